// cpu/vmath.h — exp and tanh for fp32 kernels, written so the compiler vectorizes them.
// Why not std::exp/std::tanh: libm's are scalar calls (a GeLU over 12·B·T·4C elements spent more
// time in tanhf than the MLP's matmuls), and a vectorized libm (libmvec) gives different bits from
// the scalar libm that handles a loop's tail — a result that would depend on where a thread's range
// starts (docs/internals.md#determinism). These are straight-line IEEE operations (+, ×, fma, round-to-nearest, a
// bit-level scale by 2ⁿ): the vector body and the scalar tail compute the very same bits.
// Accuracy (test_fast_kernels checks it against libm in double on a dense grid):
//   exp_f32:  relative error ≤ 2 ulp for x in [-86.5, 88.3]; outside, the value at the nearer end
//             (e^-86.5 ≈ 2.6e-38, never a denormal; e^88.3 ≈ 2.0e38); NaN stays NaN (the fp16
//             overflow check relies on it).
//   tanh_f32: absolute error ≤ 2e-7 (the form 1 - 2/(e^{2|x|}+1) loses relative accuracy near 0,
//             which no use here sees: GeLU adds 1 to it).
// Double-precision overloads forward to libm: the gradient checks run on the textbook functions.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

static inline float exp_f32(float x) {
    // e^x = 2^n · e^r,  n = round(x / ln 2),  r = x - n·ln 2 in [-ln2/2, ln2/2] (ln 2 split in two
    // parts so n·LN2_HI is exact), e^r by its degree-7 Taylor polynomial (truncation < 6e-9 on that range).
    // n is found by adding 1.5·2²³: the sum rounds to an integer held in the low mantissa bits, which
    // then build 2^n directly — no float→int conversion, so a NaN stays a NaN without undefined behavior.
    const float LOG2E = 1.44269504088896341f, LN2_HI = 0.693359375f, LN2_LO = -2.12194440e-4f;
    const float SHIFT = 12582912.0f;  // 1.5·2²³, bits 0x4B400000
    x = x < -86.5f ? -86.5f : x;      // comparisons, not fmin/fmax: a NaN passes through both
    x = x > 88.3f ? 88.3f : x;        // keeps n in [-125, 127]: 2^n and the result stay normal
    float nf = std::fma(x, LOG2E, SHIFT);
    float n = nf - SHIFT;
    float r = std::fma(n, -LN2_HI, x);
    r = std::fma(n, -LN2_LO, r);
    float p = 1.0f / 5040;
    p = std::fma(p, r, 1.0f / 720);
    p = std::fma(p, r, 1.0f / 120);
    p = std::fma(p, r, 1.0f / 24);
    p = std::fma(p, r, 1.0f / 6);
    p = std::fma(p, r, 0.5f);
    p = std::fma(p, r, 1.0f);
    p = std::fma(p, r, 1.0f);
    uint32_t bits;
    memcpy(&bits, &nf, 4);
    bits = (bits - 0x4B400000u + 127u) << 23;  // the float 2^n
    float scale;
    memcpy(&scale, &bits, 4);
    return p * scale;
}

static inline float tanh_f32(float x) {
    float a = std::fabs(x);
    float t = exp_f32(-2.0f * a);            // in (0, 1]: no overflow for any x
    float th = (1.0f - t) / (1.0f + t);
    return std::copysign(th, x);
}

// Row reductions for the softmaxes. max is exact in any order (a NaN never wins, as with
// std::max(acc, x)); the sum's order is fixed as lane k adding the elements j ≡ k (mod 16) in
// ascending j, then the lanes in a fixed tree — a function of n alone, and vectorizable.
template <typename F, bool ABS = false> static inline F row_max(const F* x, int n) {
    auto val = [&](int j) { return ABS ? std::fabs(x[j]) : x[j]; };
    F lane[16];
    for (int k = 0; k < 16; k++) lane[k] = ABS ? (F)0 : (F)-INFINITY;
    int j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; k++) lane[k] = lane[k] < val(j + k) ? val(j + k) : lane[k];
    for (; j < n; j++) lane[0] = lane[0] < val(j) ? val(j) : lane[0];
    F r = lane[0];
    for (int k = 1; k < 16; k++) r = r < lane[k] ? lane[k] : r;
    return r;
}
// max |x[j]|, 0 for n = 0 (the 8-bit optimizer's block absmax).
template <typename F> static inline F row_max_abs(const F* x, int n) { return row_max<F, true>(x, n); }

template <typename F> static inline F row_sum(const F* x, int n) {
    F lane[16] = {};
    int j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; k++) lane[k] += x[j + k];
    for (; j < n; j++) lane[j % 16] += x[j];
    for (int w = 8; w >= 1; w /= 2)
        for (int k = 0; k < w; k++) lane[k] += lane[k + w];
    return lane[0];
}

static inline double exp_f32(double x) { return std::exp(x); }
static inline double tanh_f32(double x) { return std::tanh(x); }
