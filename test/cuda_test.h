// cuda_test.h — shared helpers of the CUDA kernel tests (test/test_cuda_*.cpp). They compile with
// g++ against the emulation (test/cuda_emu, `make test-cuda`) and with nvcc on a GPU
// (`make test-gpu`), and compare each llmc/cuda op (namespace keel_cuda) with its CPU reference op
// (llmc/cpu, global namespace) on the same inputs.
#pragma once
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/cuda/common.cuh"
#include "llmc/rand.h"

static int cuda_test_failures = 0, cuda_test_checks = 0;

template <typename T> static T* dev_upload(const std::vector<T>& h) {
    T* d = nullptr;
    CUDA_CHECK(cudaMalloc((void**)&d, h.size() * sizeof(T) + 1));
    if (!h.empty()) CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T> static std::vector<T> dev_download(const T* d, size_t n) {
    std::vector<T> h(n);
    if (n) CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
[[maybe_unused]] static void dev_free(void* d) { CUDA_CHECK(cudaFree(d)); }

// N(0, sigma) values keyed by `key`, so every test input is reproducible.
static std::vector<float> randn(size_t n, uint64_t key, double sigma = 1.0) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (float)(sigma * rng_normal(12345, 99, key, i));
    return v;
}

// |got - want| <= atol + rtol·|want| for every element; prints the worst element either way.
static bool check_close(const std::string& what, const float* got, const float* want, size_t n, double rtol, double atol) {
    size_t worst = 0, bad = 0;
    double worst_excess = -1;
    for (size_t i = 0; i < n; i++) {
        double err = std::fabs((double)got[i] - (double)want[i]), lim = atol + rtol * std::fabs((double)want[i]);
        bool ok = err <= lim || (std::isnan(got[i]) && std::isnan(want[i])) || (std::isinf(want[i]) && got[i] == want[i]);
        if (!ok) bad++;
        double excess = std::isnan(err) ? 1e300 : err - lim;
        if (excess > worst_excess) { worst_excess = excess; worst = i; }
    }
    cuda_test_checks++;
    if (bad) cuda_test_failures++;
    printf("%s  %-58s n=%-8zu worst [%zu] got %.9g want %.9g%s\n", bad ? "FAIL" : "ok  ", what.c_str(), n, n ? worst : 0,
           n ? got[worst] : 0.0, n ? want[worst] : 0.0, bad ? (" (" + std::to_string(bad) + " elements out of tolerance)").c_str() : "");
    return bad == 0;
}
static bool check_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want, double rtol, double atol) {
    if (got.size() != want.size()) {
        printf("FAIL  %s: sizes differ (%zu vs %zu)\n", what.c_str(), got.size(), want.size());
        cuda_test_failures++;
        return false;
    }
    return check_close(what, got.data(), want.data(), got.size(), rtol, atol);
}
[[maybe_unused]] static bool check_true(const std::string& what, bool ok) {
    cuda_test_checks++;
    if (!ok) cuda_test_failures++;
    printf("%s  %s\n", ok ? "ok  " : "FAIL", what.c_str());
    return ok;
}

static int cuda_test_finish() {
    printf("%d checks, %d failed\n", cuda_test_checks, cuda_test_failures);
    return cuda_test_failures ? 1 : 0;
}
