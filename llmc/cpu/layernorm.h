// cpu/layernorm.h — LayerNorm over channels.
// Legend: N rows (B*T), C channels.
//   forward:  mean = Σx/C, rstd = 1/sqrt(Σ(x-mean)²/C + eps), out = (x-mean)·rstd·w + b
//             saves mean and rstd (N) for the backward.
//   residual_layernorm_forward: residual_out = a + b, then the forward on residual_out (the GPU fuses
//             the two into one pass; here it is the two ops, so the CPU trainer's bits are unchanged).
//   layernorm_reserve: sizes the CUDA backward's scratch; nothing to do here.
//   backward: with xhat = (x-mean)·rstd and g = dout·w:
//             dx += rstd·(g - mean(g) - xhat·mean(g·xhat));  dw += Σ_rows dout·xhat;  db += Σ_rows dout
// Numerics: statistics in the kernel's type F with the two-pass (subtract-mean) variance, eps 1e-5
// as GPT-2. dw/db are parallel over channels, each summing rows in order (thread-count independent).
#pragma once
#include "llmc/ops.h"
#include <cmath>
#include <cstring>

#include "llmc/cpu/residual.h"


template <typename F>
void layernorm_forward(F* out, F* mean, F* rstd,           // (N,C), (N), (N)
                       const F* inp,                       // (N,C)
                       const F* weight, const F* bias,     // (C), (C)
                       int N, int C) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const F* x = inp + (size_t)n * C;
        F m = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        F v = 0;
        for (int c = 0; c < C; c++) { F d = x[c] - m; v += d * d; }
        v /= C;
        F s = (F)1 / std::sqrt(v + (F)LAYERNORM_EPS);
        F* o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

// residual_forward(residual_out, a, b) then layernorm_forward(ln_out, ..., residual_out, ...).
template <typename F>
void residual_layernorm_forward(F* residual_out, F* ln_out,         // (N,C), (N,C)
                                F* mean, F* rstd,                   // (N), (N)
                                const F* a, const F* b,             // (N,C), (N,C)
                                const F* weight, const F* bias,     // (C), (C)
                                int N, int C) {
    residual_forward(residual_out, a, b, (size_t)N * C);
    layernorm_forward(ln_out, mean, rstd, residual_out, weight, bias, N, C);
}

// The CUDA backward's scratch, sized at set-up; the CPU backward needs none.
static inline void layernorm_reserve(int N_max, int C_max) {}

template <typename F>
void layernorm_backward(F* dinp, F* dweight, F* dbias,     // (N,C) (C) (C), accumulated into (written: the flags)
                        const F* dout, const F* inp,       // (N,C), (N,C)
                        const F* weight, const F* mean, const F* rstd, int N, int C,
                        bool dinp_write = false, bool dweight_write = false) {
    // written: zeroed first, then the same sums (the bytes of adding into zeros; the GPU writes)
    if (dinp_write) memset(dinp, 0, (size_t)N * C * sizeof(F));
    if (dweight_write) {
        memset(dweight, 0, (size_t)C * sizeof(F));
        memset(dbias, 0, (size_t)C * sizeof(F));
    }
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const F* d = dout + (size_t)n * C;
        const F* x = inp + (size_t)n * C;
        F m = mean[n], s = rstd[n];
        F gmean = 0, gxmean = 0;
        for (int c = 0; c < C; c++) {
            F g = d[c] * weight[c];
            gmean += g;
            gxmean += g * (x[c] - m) * s;
        }
        gmean /= C;
        gxmean /= C;
        F* dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            F xhat = (x[c] - m) * s;
            dx[c] += s * (d[c] * weight[c] - gmean - xhat * gxmean);
        }
    }
    const int CB = 16;
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += CB) {
        int c1 = c0 + CB < C ? c0 + CB : C;
        for (int n = 0; n < N; n++) {
            const F* d = dout + (size_t)n * C;
            const F* x = inp + (size_t)n * C;
            F m = mean[n], s = rstd[n];
            for (int c = c0; c < c1; c++) {
                dweight[c] += d[c] * (x[c] - m) * s;
                dbias[c] += d[c];
            }
        }
    }
}
