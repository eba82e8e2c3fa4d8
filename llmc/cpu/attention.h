// cpu/attention.h — causal multi-head self-attention (materialized softmax), with the numerics
// knobs of docs/knobs.md#attention-numerics, #activations-dropout-positions-and-alibi: ALiBi, qk-inward scaling, query-key layer scaling, attention dropout.
// Legend: B batch, T time, C channels, NH heads, hs = C/NH head size.
//   inp  = qkv (B,T,3C): q in [0,C), k in [C,2C), v in [2C,3C); head h uses channels [h·hs, (h+1)·hs)
//   score: norm = sqrt(hs)·coeff (coeff = the 1-based layer number under
//          --apply-query-key-layer-scaling, else 1), computed as the variant does it:
//            standard:  raw = q·k,                 stored = raw / norm        (GEMM alpha after the product)
//            qk-inward: raw = (q/√norm)·(k/√norm), stored = raw               (operands scaled first)
//          ALiBi adds slope_h·u/coeff to `stored` (u the key position; Megatron's beta = 1/coeff);
//          s[t,u] = stored · coeff is the softmax input. All variants are softmax(q·k/√hs + slope·u)
//          in exact arithmetic; they differ in the magnitude of `raw` and `stored`, the values a
//          half-precision kernel holds (this is what the knobs protect; test_attention_knobs).
//   forward:  att[t,:] = softmax(s[t,:]) over u ≤ t (0 for u > t); saves att (B,NH,T,T), undropped
//             out[t, h·hs + i] = Σ_u drop(att[t,u])·v_u[i],  drop(a) = keep ? a/(1-p) : 0
//   backward: datt[t,u] = drop'(dout_t·v_u);  dv_u += Σ_t drop(att[t,u])·dout_t
//             ds[t,u] = att[t,u]·(datt[t,u] - Σ_u' att[t,u']·datt[t,u'])
//             dq_t += Σ_u ds[t,u]·k_u·f;  dk_u += Σ_t ds[t,u]·q_t·f,  f = ∂s/∂(q·k) = 1/√hs
// Numerics: softmax subtracts the row max before exp (exp_f32, cpu/vmath.h). The backward is parallel over (b, h) only:
// dk and dv of a head receive contributions from every query position, and (b, h) is the
// smallest unit that owns them, so each element is summed in ascending t by one thread. Dropout
// masks are regenerated in the backward from the counter-based RNG (cpu/dropout.h), keyed by
// (head, t, u) so the mask does not depend on T's padding or the layout.
#pragma once
#include <cmath>
#include <cstring>
#include <vector>

#include "llmc/cpu/dropout.h"
#include "llmc/ops.h"
#include "llmc/cpu/vmath.h"


// The softmax input s for query q against key k of head h at key position u, computed the
// variant's way; *raw and *stored (if not null) receive the intermediates described above.
// round_scores: `stored` before ALiBi rounded to bf16, where the GPU's materialized path stores its
// score block S in bf16 (the materialized op under AttentionOpts::round_bf16; the flash kernels keep
// their scores in fp32, so the flash twin does not round).
template <typename F>
static inline F attention_score(const F* q, const F* k, int hs, int h, int u, const AttentionOpts* o, F* raw = nullptr,
                                F* stored = nullptr, bool round_scores = false) {
    F coeff = (F)o->coeff;
    F acc = 0, st;
    if (o->scaling == ATTN_SCALING_QK_INWARD) {
        F sq = (F)(1.0 / std::sqrt(std::sqrt((double)hs) * o->coeff));
        for (int i = 0; i < hs; i++) acc += (q[i] * sq) * (k[i] * sq);
        st = acc;
    } else {
        F alpha = o->coeff == 1.0 ? (F)1 / std::sqrt((F)hs) : (F)(1.0 / (std::sqrt((double)hs) * o->coeff));
        for (int i = 0; i < hs; i++) acc += q[i] * k[i];
        st = acc * alpha;
    }
    if (round_scores) st = (F)bf16_round((float)st);
    if (o->alibi) st += (F)o->alibi[h] * (F)u / coeff;
    if (raw) *raw = acc;
    if (stored) *stored = st;
    return o->coeff == 1.0 ? st : st * coeff;
}

// A value the GPU's materialized path stores in the model's type between its kernels (the scores S,
// the probabilities, the dropped probabilities, dP, dS): rounded to bf16 under the CPU's --bf16
// (AttentionOpts::round_bf16), else as computed. The flash twin shares the forward's row, so its
// probabilities round the same way: close to, not the same as, the GPU's flash kernel, which rounds
// the unnormalized probabilities in registers for its second product.
template <typename F> static inline F attention_stored(F x, const AttentionOpts* o) {
    return o->round_bf16 ? (F)bf16_round((float)x) : x;
}

// The CUDA op set sizes its scratch up front (cuda/attention.cuh); the CPU op set needs none.
template <typename F> void attention_reserve(int B, int T, int C, int NH) {}

// One row (b, t, h) of the forward: a[0..t] ← the probabilities (a holds at least t+1 values),
// out_t (hs) ← Σ_u drop(a[u])·v_u. Returns the row's log-sum-exp, max + log Σ exp, which the flash
// twin (cpu/flash_attention.h) keeps instead of the probabilities. round_scores: attention_score's
// (the materialized op's S, stored like the GPU's under round_bf16).
template <typename F>
static inline F attention_forward_row(F* out_t, F* a, const F* inp, int b, int t, int h, int T, int C, int hs, const AttentionOpts* o,
                                      bool round_scores = false) {
    size_t C3 = 3 * (size_t)C;
    bool drop = o->dropout.p > 0;
    F dscale = drop ? (F)(1.0 / (1.0 - o->dropout.p)) : (F)1;
    const F* q = inp + ((size_t)b * T + t) * C3 + h * hs;
    F maxv = -INFINITY;
    for (int u = 0; u <= t; u++) {
        const F* k = inp + ((size_t)b * T + u) * C3 + C + h * hs;
        F s = attention_score(q, k, hs, h, u, o, (F*)nullptr, (F*)nullptr, round_scores);
        a[u] = s;
        if (s > maxv) maxv = s;
    }
    F sum = 0;
    for (int u = 0; u <= t; u++) a[u] = exp_f32(a[u] - maxv);
    for (int u = 0; u <= t; u++) sum += a[u];
    F inv = (F)1 / sum;
    for (int u = 0; u <= t; u++) a[u] = attention_stored(a[u] * inv, o);
    for (int i = 0; i < hs; i++) out_t[i] = 0;
    for (int u = 0; u <= t; u++) {
        F w = a[u];
        if (drop) w = dropout_keep(&o->dropout, b, attention_dropout_index(h + o->head_offset, t, u)) ? attention_stored(w * dscale, o) : (F)0;
        const F* v = inp + ((size_t)b * T + u) * C3 + 2 * C + h * hs;
        for (int i = 0; i < hs; i++) out_t[i] += w * v[i];
    }
    return maxv + std::log(sum);
}

template <typename F>
void attention_forward(F* out, F* att,                      // (B,T,C), (B,NH,T,T)
                       const F* inp,                         // (B,T,3C)
                       int B, int T, int C, int NH, const AttentionOpts* o) {
    int hs = C / NH;
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                F* a = att + (((size_t)b * NH + h) * T + t) * T;
                attention_forward_row(out + ((size_t)b * T + t) * C + h * hs, a, inp, b, t, h, T, C, hs, o, o->round_bf16);
                for (int u = t + 1; u < T; u++) a[u] = 0;
            }
}

template <typename F>
void attention_backward(F* dinp,                            // (B,T,3C) accumulated into (written with dinp_write)
                        const F* dout,                       // (B,T,C)
                        const F* inp, const F* att,          // (B,T,3C), (B,NH,T,T)
                        int B, int T, int C, int NH, const AttentionOpts* o, bool dinp_write = false) {
    if (dinp_write) memset(dinp, 0, (size_t)B * T * 3 * C * sizeof(F));  // (the GPU copies its products in without reading)
    int hs = C / NH;
    F scale = (F)1 / std::sqrt((F)hs);  // ∂s/∂(q·k): the layer coefficient and the operand scaling cancel
    size_t C3 = 3 * (size_t)C;
    bool drop = o->dropout.p > 0;
    F dscale = drop ? (F)(1.0 / (1.0 - o->dropout.p)) : (F)1;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            std::vector<F> datt(T), ds(T);
            for (int t = 0; t < T; t++) {
                const F* a = att + (((size_t)b * NH + h) * T + t) * T;
                const F* d = dout + ((size_t)b * T + t) * C + h * hs;
                const F* q = inp + ((size_t)b * T + t) * C3 + h * hs;
                F* dq = dinp + ((size_t)b * T + t) * C3 + h * hs;
                F dot = 0;
                for (int u = 0; u <= t; u++) {
                    const F* v = inp + ((size_t)b * T + u) * C3 + 2 * C + h * hs;
                    F* dv = dinp + ((size_t)b * T + u) * C3 + 2 * C + h * hs;
                    F m = 1;  // the dropout multiplier of this probability: 1, 1/(1-p) or 0
                    if (drop) m = dropout_keep(&o->dropout, b, attention_dropout_index(h + o->head_offset, t, u)) ? dscale : (F)0;
                    F w = attention_stored(a[u] * m, o), s = 0;
                    for (int i = 0; i < hs; i++) { s += d[i] * v[i]; dv[i] += w * d[i]; }
                    datt[u] = attention_stored(s, o) * m;  // dP, stored by the GPU before the mask
                    dot += a[u] * datt[u];
                }
                for (int u = 0; u <= t; u++) ds[u] = attention_stored(a[u] * (datt[u] - dot) * scale, o);
                for (int u = 0; u <= t; u++) {
                    const F* k = inp + ((size_t)b * T + u) * C3 + C + h * hs;
                    F* dk = dinp + ((size_t)b * T + u) * C3 + C + h * hs;
                    for (int i = 0; i < hs; i++) { dq[i] += ds[u] * k[i]; dk[i] += ds[u] * q[i]; }
                }
            }
        }
}
