// cpu/matmul.h — the linear layer: out = inp · Wᵀ + bias.
// Legend: N rows (B*T), C input channels, OC output channels.
//   forward:  out[n,o] = bias[o] + Σ_i inp[n,i]·W[o,i]                 W: (OC,C) as in PyTorch/llm.c
//   backward: dinp[n,i] += Σ_o dout[n,o]·W[o,i]
//             dW[o,i]   += Σ_n dout[n,o]·inp[n,i];   dbias[o] += Σ_n dout[n,o]
// Numerics (DESIGN §4): every output element has one fixed summation order, independent of thread
// count and of which rows share a register block:
//   - forward dots use 8 lane accumulators (lane k takes i ≡ k mod 8, ascending i, fused
//     multiply-add) and a fixed pairwise tree at the end — vectorizable without reassociation;
//   - backward sums run in ascending o (dinp) or ascending n (dW, dbias).
// Blocking: rows are processed R at a time so each weight element is loaded once per R rows; the
// work is split over column tiles (forward, dW) or row blocks (dinp) so threads never share outputs.
#pragma once
#include <cmath>
#include <cstddef>

enum { MATMUL_LANES = 8, MATMUL_OTILE = 64 };

// R rows of inp against one weight row; identical arithmetic for any R.
template <typename F, int R>
static inline void matmul_dots(F* res, const F* inp, size_t stride, const F* w, int C) {
    F acc[R][MATMUL_LANES] = {};
    int i = 0;
    for (; i + MATMUL_LANES <= C; i += MATMUL_LANES)
        for (int r = 0; r < R; r++)
            for (int k = 0; k < MATMUL_LANES; k++)
                acc[r][k] = std::fma(inp[r * stride + i + k], w[i + k], acc[r][k]);
    for (; i < C; i++)
        for (int r = 0; r < R; r++) acc[r][i % MATMUL_LANES] = std::fma(inp[r * stride + i], w[i], acc[r][i % MATMUL_LANES]);
    for (int r = 0; r < R; r++) {
        F* a = acc[r];
        res[r] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    }
}

template <typename F>
void matmul_forward(F* out,                                 // (N,OC)
                    const F* inp,                           // (N,C)
                    const F* weight, const F* bias,         // (OC,C), (OC) or nullptr
                    int N, int C, int OC) {
    const int RB = 4;
    int ntiles = (OC + MATMUL_OTILE - 1) / MATMUL_OTILE;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < ntiles; tile++) {
        int o0 = tile * MATMUL_OTILE, o1 = o0 + MATMUL_OTILE < OC ? o0 + MATMUL_OTILE : OC;
        F res[RB];
        int n = 0;
        for (; n + RB <= N; n += RB)
            for (int o = o0; o < o1; o++) {
                matmul_dots<F, RB>(res, inp + (size_t)n * C, C, weight + (size_t)o * C, C);
                for (int r = 0; r < RB; r++) out[(size_t)(n + r) * OC + o] = res[r] + (bias ? bias[o] : (F)0);
            }
        for (; n < N; n++)
            for (int o = o0; o < o1; o++) {
                matmul_dots<F, 1>(res, inp + (size_t)n * C, C, weight + (size_t)o * C, C);
                out[(size_t)n * OC + o] = res[0] + (bias ? bias[o] : (F)0);
            }
    }
}

template <typename F>
void matmul_backward(F* dinp, F* dweight, F* dbias,         // (N,C), (OC,C), (OC) or nullptr; accumulated into
                     const F* dout,                          // (N,OC)
                     const F* inp, const F* weight,          // (N,C), (OC,C)
                     int N, int C, int OC) {
    // dinp: rows are independent; the o loop is tiled so a weight tile is reused across row blocks.
    if (dinp) {
        const int RB = 8;
        for (int o0 = 0; o0 < OC; o0 += MATMUL_OTILE) {
            int o1 = o0 + MATMUL_OTILE < OC ? o0 + MATMUL_OTILE : OC;
#pragma omp parallel for schedule(static)
            for (int n0 = 0; n0 < N; n0 += RB) {
                int n1 = n0 + RB < N ? n0 + RB : N;
                for (int o = o0; o < o1; o++) {
                    const F* w = weight + (size_t)o * C;
                    for (int n = n0; n < n1; n++) {
                        F d = dout[(size_t)n * OC + o];
                        F* dx = dinp + (size_t)n * C;
                        for (int i = 0; i < C; i++) dx[i] = std::fma(d, w[i], dx[i]);
                    }
                }
            }
        }
    }
    // dweight, dbias: weight rows are independent; rows n are summed in order.
    const int OB = 8;
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += OB) {
        int o1 = o0 + OB < OC ? o0 + OB : OC;
        for (int n = 0; n < N; n++) {
            const F* x = inp + (size_t)n * C;
            const F* d = dout + (size_t)n * OC;
            for (int o = o0; o < o1; o++) {
                F* dw = dweight + (size_t)o * C;
                F g = d[o];
                for (int i = 0; i < C; i++) dw[i] = std::fma(g, x[i], dw[i]);
                if (dbias) dbias[o] += g;
            }
        }
    }
}
