// test_fast_kernels — the CPU speed work against its promises:
//   - the gemm-backed matmul_forward/backward equal matmul_*_reference byte for byte, on GPT-2
//     shapes and odd ones (edge tiles, K across slices), at 1, 2 and 3 threads. Any reordering of a
//     sum — a changed tile, a split K, a different thread split — fails here. The Makefile also builds
//     this test for the AVX2 and the scalar engine (test_fast_kernels_avx2, _scalar): each equals the
//     same reference, so all engines give one set of bits;
//   - exp_f32/tanh_f32 (cpu/vmath.h) are within their stated error of libm (in double) on a dense
//     grid, keep NaN a NaN, and give the same bits in a vectorized loop as one element at a time
//     (the vector body vs the scalar tail), checked through gelu at every start offset.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "llmc/model.h"
#include "llmc/rand.h"

static int failures = 0;

static std::vector<float> randvec(size_t n, uint64_t seed, float scale = 1.0f) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = scale * (float)rng_normal(seed, 5, 0, i);
    return v;
}

static void expect_same(const char* what, const std::vector<float>& a, const std::vector<float>& b, int threads) {
    bool same = a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    size_t first = 0;
    while (same == false && first < a.size() && memcmp(&a[first], &b[first], sizeof(float)) == 0) first++;
    if (!same) {
        printf("FAIL %s at %d threads: first difference at element %zu (%.9g vs %.9g)\n", what, threads, first,
               first < a.size() ? a[first] : 0.0, first < b.size() ? b[first] : 0.0);
        failures++;
    }
}

static void check_matmul(int N, int C, int OC, bool bias, int threads) {
    omp_set_num_threads(threads);
    auto x = randvec((size_t)N * C, 1), w = randvec((size_t)OC * C, 2, 0.1f), b = randvec(OC, 3);
    auto dout = randvec((size_t)N * OC, 4), dx0 = randvec((size_t)N * C, 5), dw0 = randvec((size_t)OC * C, 6);
    auto db0 = randvec(OC, 7);
    std::vector<float> out_ref((size_t)N * OC), out((size_t)N * OC, 123.0f);
    matmul_forward_reference(out_ref.data(), x.data(), w.data(), bias ? b.data() : nullptr, N, C, OC);
    matmul_forward(out.data(), x.data(), w.data(), bias ? b.data() : nullptr, N, C, OC);
    char name[96];
    snprintf(name, sizeof name, "matmul_forward N%d C%d OC%d%s", N, C, OC, bias ? "" : " (no bias)");
    expect_same(name, out_ref, out, threads);
    std::vector<float> dx_ref = dx0, dw_ref = dw0, db_ref = db0, dx = dx0, dw = dw0, db = db0;
    matmul_backward_reference(dx_ref.data(), dw_ref.data(), bias ? db_ref.data() : nullptr, dout.data(), x.data(),
                              w.data(), N, C, OC);
    matmul_backward(dx.data(), dw.data(), bias ? db.data() : nullptr, dout.data(), x.data(), w.data(), N, C, OC);
    snprintf(name, sizeof name, "matmul_backward dinp N%d C%d OC%d", N, C, OC);
    expect_same(name, dx_ref, dx, threads);
    snprintf(name, sizeof name, "matmul_backward dweight N%d C%d OC%d", N, C, OC);
    expect_same(name, dw_ref, dw, threads);
    snprintf(name, sizeof name, "matmul_backward dbias N%d C%d OC%d", N, C, OC);
    expect_same(name, db_ref, db, threads);
}

// One element at a time, never vectorized: the scalar side of the body-vs-tail comparison.
__attribute__((optimize("no-tree-vectorize"))) static void gelu_scalar(float* out, const float* inp, int n) {
    for (int i = 0; i < n; i++) {
        volatile float x = inp[i];  // volatile: the loop cannot be turned into vector code
        out[i] = 0.5f * x * (1.0f + tanh_f32((float)GELU_K * (x + 0.044715f * x * x * x)));
    }
}

static void check_vmath() {
    double max_rel = 0, max_abs = 0;
    for (double x = -86.4; x < 88.2; x += 3e-4) {
        float xf = (float)x;
        double e = std::exp((double)xf);
        max_rel = std::max(max_rel, std::fabs(exp_f32(xf) - e) / e);
    }
    for (double x = -12; x < 12; x += 1e-5) {
        float xf = (float)x;
        max_abs = std::max(max_abs, std::fabs(tanh_f32(xf) - std::tanh((double)xf)));
    }
    bool ok = max_rel <= 2 * 5.97e-8 && max_abs <= 2e-7;
    printf("%s exp_f32 max relative error %.3g (%.2f ulp, bound 2), tanh_f32 max absolute error %.3g (bound 2e-7)\n",
           ok ? "ok  " : "FAIL", max_rel, max_rel / 5.97e-8, max_abs);
    if (!ok) failures++;
    if (!std::isnan(exp_f32(NAN)) || !std::isnan(tanh_f32(NAN)) || tanh_f32(INFINITY) != 1.0f || exp_f32(-INFINITY) <= 0.0f) {
        printf("FAIL exp_f32/tanh_f32 special values\n");
        failures++;
    }
    // gelu_forward (vectorized loop) vs gelu_scalar, for every alignment of the vector body.
    auto x = randvec(1000, 9, 3.0f);
    for (int start = 0; start < 17; start++) {
        int n = 1000 - start - (start % 5);
        std::vector<float> a(n), b(n);
        gelu_forward(a.data(), x.data() + start, (size_t)n);
        gelu_scalar(b.data(), x.data() + start, n);
        char name[64];
        snprintf(name, sizeof name, "gelu vector body vs scalar, start %d", start);
        expect_same(name, b, a, 1);
    }
}

int main() {
    printf("gemm engine: %s, MR %d NR %d KC %d\n", gemm_isa(), (int)GEMM_MR, (int)GEMM_NR, (int)GEMM_KC);
    // GPT-2-like shapes (K across several slices, many jobs), once; the reference is slow
    check_matmul(256, 768, 384, true, 2);
    check_matmul(128, 1536, 192, true, 3);
    check_matmul(64, 128, 6288, false, 2);
    const int odd[][3] = {{1, 1, 1}, {7, 5, 3}, {37, 29, 53}, {9, 300, 47}, {130, 257, 97}, {3, 1000, 5}, {300, 17, 1}};
    for (int threads : {1, 2, 3})
        for (const auto& s : odd)
            for (bool bias : {true, false}) check_matmul(s[0], s[1], s[2], bias, threads);
    check_vmath();
    printf("%s (%d failures)\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
