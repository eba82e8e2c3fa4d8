// cpu/flash_attention.h — the CPU twin of cuda/flash_attention.cuh: causal multi-head
// self-attention that saves only each row's log-sum-exp instead of the (B,NH,T,T) probabilities.
// The math is cpu/attention.h's (score variants, ALiBi, layer scaling, qk-inward, causal mask,
// dropout keyed by (h + head_offset, t, u)); this file is the readable reference of the fused
// algorithm's contract, row by row, not of its tiling.
// Legend: B batch, T time, C channels, NH heads, hs = C/NH head size.
//   inp = qkv (B,T,3C); out (B,T,C); lse (B,NH,T) fp32; dinp (B,T,3C) accumulated into (written,
//   its old contents ignored, with dinp_write).
//   forward:  for row (b,h,t): s[u] = attention_score(q_t, k_u) for u ≤ t (cpu/attention.h),
//             max = max_u s, sum = Σ_u exp(s[u] - max), att[u] = exp(s[u] - max)/sum,
//             out_t = Σ_u drop(att[u])·v_u,  lse[b,h,t] = max + log(sum)
//             (the same loops and order as attention_forward: out is the same value).
//   backward: the probabilities recomputed from q, k and lse: att[u] = exp(s[u] - lse);
//             D_t = dout_t·out_t (= Σ_u att·datt in exact arithmetic, dropout included: out_t is
//             Σ_u drop(att)·v_u and datt = drop'(dout_t·v_u));
//             datt[u] = drop'(dout_t·v_u), ds = att·(datt - D_t)/√hs,
//             dq_t += Σ_u ds·k_u, dk_u += Σ_t ds·q_t, dv_u += Σ_t drop(att)·dout_t.
// Numerics vs attention_forward/backward: out is identical; the backward's att = exp(s - lse)
// differs from the stored exp(s - max)/sum by a few ulp, and D_t from Σ att·datt by the rounding of
// out, so dinp agrees to ~1e-5 relative (ds = att·(datt - D) cancels where datt ≈ D).
// Parallel over (b, h) in the backward, each dk/dv element summed in ascending t by one thread, as
// attention_backward: the result does not depend on the thread count.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/cpu/attention.h"

// Every head size and type: the CPU op set has no fused kernel to fall back from.
static inline bool flash_attention_supported(int hs, size_t fsize) { return hs > 0; }
// The CPU op set needs no scratch.
static inline size_t flash_attention_scratch_bytes(size_t B, size_t T, size_t C, size_t NH) { return 0; }
template <typename F> void flash_attention_reserve(int B, int T, int C, int NH) {}
// The GPU backward has two kernels of the same bytes and times them at start-up (cuda/flash_attention.cuh);
// the CPU op is one: nothing to choose, nothing to say.
template <typename F> void flash_attention_tune(F* qkv, F* out, float* lse, F* dqkv, int B, int T, int C, int NH) {}
static inline std::string flash_attention_note() { return ""; }

template <typename F>
void flash_attention_forward(F* out, float* lse,  // (B,T,C), (B,NH,T)
                             const F* inp,        // (B,T,3C)
                             int B, int T, int C, int NH, const AttentionOpts* o) {
    int hs = C / NH;
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                std::vector<F> a(t + 1);  // this row's probabilities, not kept
                F row_lse = attention_forward_row(out + ((size_t)b * T + t) * C + h * hs, a.data(), inp, b, t, h, T, C, hs, o);
                lse[((size_t)b * NH + h) * T + t] = (float)row_lse;
            }
}

template <typename F>
void flash_attention_backward(F* dinp,                                       // (B,T,3C) accumulated into
                              const F* dout,                                 // (B,T,C)
                              const F* inp, const F* out, const float* lse,  // (B,T,3C), (B,T,C), (B,NH,T)
                              int B, int T, int C, int NH, const AttentionOpts* o, bool dinp_write = false) {
    if (dinp_write) memset(dinp, 0, (size_t)B * T * 3 * C * sizeof(F));  // (the GPU kernels write without reading)
    int hs = C / NH;
    F scale = (F)1 / std::sqrt((F)hs);  // ∂s/∂(q·k): the layer coefficient and the operand scaling cancel
    size_t C3 = 3 * (size_t)C;
    bool drop = o->dropout.p > 0;
    F dscale = drop ? (F)(1.0 / (1.0 - o->dropout.p)) : (F)1;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            std::vector<F> ds(T);
            for (int t = 0; t < T; t++) {
                const F* d = dout + ((size_t)b * T + t) * C + h * hs;
                const F* o_t = out + ((size_t)b * T + t) * C + h * hs;
                const F* q = inp + ((size_t)b * T + t) * C3 + h * hs;
                F* dq = dinp + ((size_t)b * T + t) * C3 + h * hs;
                F lse_t = (F)lse[((size_t)b * NH + h) * T + t];
                F D = 0;  // dout_t·out_t
                for (int i = 0; i < hs; i++) D += d[i] * o_t[i];
                for (int u = 0; u <= t; u++) {
                    const F* k = inp + ((size_t)b * T + u) * C3 + C + h * hs;
                    const F* v = inp + ((size_t)b * T + u) * C3 + 2 * C + h * hs;
                    F* dv = dinp + ((size_t)b * T + u) * C3 + 2 * C + h * hs;
                    F a = exp_f32(attention_score(q, k, hs, h, u, o) - lse_t);  // the recomputed probability
                    F m = 1;  // the dropout multiplier of this probability: 1, 1/(1-p) or 0
                    if (drop) m = dropout_keep(&o->dropout, b, attention_dropout_index(h + o->head_offset, t, u)) ? dscale : (F)0;
                    F w = a * m, s = 0;
                    for (int i = 0; i < hs; i++) { s += d[i] * v[i]; dv[i] += w * d[i]; }
                    ds[u] = a * (s * m - D) * scale;
                }
                for (int u = 0; u <= t; u++) {
                    const F* k = inp + ((size_t)b * T + u) * C3 + C + h * hs;
                    F* dk = dinp + ((size_t)b * T + u) * C3 + C + h * hs;
                    for (int i = 0; i < hs; i++) { dq[i] += ds[u] * k[i]; dk[i] += ds[u] * q[i]; }
                }
            }
        }
}
