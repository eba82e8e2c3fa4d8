// cuda_test.h — shared helpers of the CUDA kernel tests (test/test_cuda_*.cpp). They compile with
// g++ against the emulation (test/cuda_emu, `make test-cuda`) and with nvcc on a GPU
// (`make test-gpu`), and compare each llmc/cuda op (namespace keel_cuda) with its CPU reference op
// (llmc/cpu, global namespace) on the same inputs.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/cuda/common.cuh"
#include "llmc/rand.h"

static int cuda_test_failures = 0, cuda_test_checks = 0;

// ---- shared-memory layouts ----------------------------------------------------------------------------
// Shared memory has 32 banks of 4 bytes (bank = (byte address / 4) % 32). A warp's access of `bytes`
// per lane is served in phases of 128 bytes: 16-byte accesses (ldmatrix rows, cp.async, vector loads)
// in 4 phases of 8 lanes (for ldmatrix each phase is one 8×8 matrix: lanes 8j..8j+7 name its rows),
// 4-byte accesses in one phase of 32 lanes. A phase's conflict degree is the largest number of
// distinct 4-byte words in one bank (1: conflict-free; k: the phase takes k passes).
[[maybe_unused]] static int bank_degree(const std::vector<long>& byte_addr, int bytes) {
    int per_phase = 128 / bytes, worst = 0;
    for (int p0 = 0; p0 < 32; p0 += per_phase) {
        std::vector<std::vector<long>> bank(32);
        for (int l = p0; l < p0 + per_phase; l++)
            for (int w = 0; w < bytes / 4; w++) {
                long word = byte_addr[l] / 4 + w;
                auto& b = bank[word % 32];
                if (std::find(b.begin(), b.end(), word) == b.end()) b.push_back(word);
            }
        for (auto& b : bank) worst = std::max(worst, (int)b.size());
    }
    return worst;
}
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

// ---- reduced-precision checks and negative controls ------------------------------
// A bf16/fp16 kernel is checked against the fp32 CPU op run on the same rounded inputs (lowp_rounded<T>
// first, then both sides compute from exactly those values). The kernel then differs from the
// reference by its one rounding of each stored value (bf16: at most 2^-8 relative, fp16 2^-11) plus
// fp32 reordering: check_lowp allows LOWP_RTOL relative and, for values that cancel to near zero, an
// absolute floor scaled to the data (LOWP_ATOL_RMS · rms(want)) — not a fixed 2e-2, under which any
// value below 0.02 passes whatever it is. fp32 buffers a low-precision run produces (statistics,
// parameter gradients) are checked by check_f32_of_lowp: fp32 reordering only.
// expect_fail runs a check that must report failure (a negative control): its lines are hidden and
// its counts dropped; one line says whether it failed as it should. lowp_negative_controls perturbs
// one small and one large output element by more than the tolerance and expects check_lowp to see it.
#include <fcntl.h>
#include <cstring>
#include <unistd.h>

static const double LOWP_RTOL = 8e-3, LOWP_ATOL_RMS = 1e-3;

[[maybe_unused]] static double rms_of(const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += (double)x * x;
    return v.empty() ? 0.0 : std::sqrt(s / (double)v.size());
}
template <typename T> static std::vector<T> lowp_store(const std::vector<float>& v) {
    std::vector<T> r(v.size());
    for (size_t i = 0; i < v.size(); i++) r[i] = keel_cuda::from_f32<T>(v[i]);
    return r;
}
template <typename T> static std::vector<float> lowp_widen(const std::vector<T>& v) {
    std::vector<float> r(v.size());
    for (size_t i = 0; i < v.size(); i++) r[i] = keel_cuda::to_f32(v[i]);
    return r;
}
// v as the type T would store it, back in fp32 (the rounded inputs, or an exactly-rounded reference)
template <typename T> static std::vector<float> lowp_rounded(const std::vector<float>& v) { return lowp_widen(lowp_store<T>(v)); }

[[maybe_unused]] static bool check_lowp(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                       double rtol = LOWP_RTOL) {
    return check_close(what, got, want, rtol, LOWP_ATOL_RMS * rms_of(want));
}
[[maybe_unused]] static bool check_f32_of_lowp(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
    return check_close(what, got, want, 1e-4, 1e-5 * rms_of(want));
}

template <typename Check> static bool expect_fail(const std::string& what, Check check) {
    int failures = cuda_test_failures, checks = cuda_test_checks;
    fflush(stdout);
    int saved = dup(1), null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    bool passed = check();
    fflush(stdout);
    dup2(saved, 1);
    close(null);
    close(saved);
    cuda_test_failures = failures;
    cuda_test_checks = checks;
    return check_true("negative control: " + what + " is caught", !passed);
}

// got with one element changed: the one whose |want| is nearest 1% of rms(want) doubled (a small value
// a 2e-2 absolute tolerance would pass), or the largest |want| scaled by 1.02 (2.5x the relative bound).
[[maybe_unused]] static std::vector<float> perturb_small(std::vector<float> got, const std::vector<float>& want) {
    double target = 0.01 * rms_of(want), best = 1e300;
    size_t k = 0;
    for (size_t i = 0; i < want.size(); i++)
        if (want[i] != 0.0f && std::fabs(std::fabs((double)want[i]) - target) < best) best = std::fabs(std::fabs((double)want[i]) - target), k = i;
    got[k] = 2.0f * want[k];
    return got;
}
[[maybe_unused]] static std::vector<float> perturb_large(std::vector<float> got, const std::vector<float>& want) {
    size_t k = 0;
    for (size_t i = 0; i < want.size(); i++)
        if (std::fabs(want[i]) > std::fabs(want[k])) k = i;
    got[k] = 1.02f * want[k];
    return got;
}
[[maybe_unused]] static void lowp_negative_controls(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
    expect_fail(what + " with a small element doubled", [&] { return check_lowp(what, perturb_small(got, want), want); });
    expect_fail(what + " with the largest element 2% off", [&] { return check_lowp(what, perturb_large(got, want), want); });
}

// A device copy of host values stored as T (rounded), starting `off` elements into its allocation:
// off = 1 misaligns it for the 128-bit paths, so a test can run an op's scalar fallback.
template <typename T> struct DevBuf {
    T* base;
    T* p;
    DevBuf(const std::vector<float>& h, size_t off) {
        std::vector<T> pad(off);
        std::vector<T> v = lowp_store<T>(h);
        pad.insert(pad.end(), v.begin(), v.end());
        base = dev_upload(pad);
        p = base + off;
    }
    std::vector<float> get(size_t n) const { return lowp_widen(dev_download(p, n)); }
    DevBuf(const DevBuf&) = delete;
    ~DevBuf() { dev_free(base); }
};
[[maybe_unused]] static bool same_bytes_f32(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
