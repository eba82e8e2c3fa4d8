// cpu/adamw.h — the optimizer's elementwise kernels: AdamW update, gradient norm, gradient scale.
// Legend: n elements of one flat range.
//   adamw_update: m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²
//                 p -= lr·( (m/bc1) / (sqrt(v/bc2) + eps) + wd·p )      (APEX FusedAdam, adam_w_mode)
//                 bc1 = 1-β1^t, bc2 = 1-β2^t are passed in (computed once per step).
//   grad_sumsq:   Σ g² in double, in fixed chunks of GRAD_CHUNK summed in chunk order, so the norm
//                 does not depend on the thread count (DESIGN §4); also counts zeros (Megatron
//                 "num zeros") and reports non-finite values through the sum.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

static inline void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                                float beta2, float eps, float wd, float bc1, float bc2) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * p[i]);
    }
}

enum { GRAD_CHUNK = 1 << 14 };

// Returns Σ g² over [0, n) and adds the number of exact zeros to *zeros.
static inline double grad_sumsq(const float* g, int64_t n, int64_t* zeros) {
    int64_t nchunks = (n + GRAD_CHUNK - 1) / GRAD_CHUNK;
    std::vector<double> part(nchunks);
    std::vector<int64_t> zpart(nchunks);
#pragma omp parallel for
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t lo = c * GRAD_CHUNK, hi = lo + GRAD_CHUNK < n ? lo + GRAD_CHUNK : n;
        double s = 0;
        int64_t z = 0;
        for (int64_t i = lo; i < hi; i++) { s += (double)g[i] * (double)g[i]; z += g[i] == 0.0f; }
        part[c] = s;
        zpart[c] = z;
    }
    double total = 0;
    for (int64_t c = 0; c < nchunks; c++) { total += part[c]; *zeros += zpart[c]; }
    return total;
}

static inline void grad_scale(float* g, int64_t n, float s) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) g[i] *= s;
}
