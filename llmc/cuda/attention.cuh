// cuda/attention.cuh — causal multi-head self-attention with a materialized softmax; the contract
// of cpu/attention.h (scores: standard or qk-inward scaling, layer coefficient, ALiBi; dropout on
// the probabilities; att holds the undropped probabilities, 0 above the diagonal).
// Legend: B batch, T time, C channels, NH heads, hs = C/NH head size.
//   inp = qkv (B,T,3C); att (B,NH,T,T); out (B,T,C); one attention "row" is (b, h, t).
// Forward:  1. one warp per row: scores s[u] for u ≤ t (lane k takes u ≡ k mod 32, each dot product
//              over hs in ascending i) into an fp32 row in shared memory, then max and sum by
//              warp_max / warp_sum, then att[t,:] = exp(s - max)/sum, zeros above the diagonal.
//           2. one thread per output (b, t, c): out = Σ_u drop(att[t,u])·v_u[c], u ascending.
// Backward, without atomics, each gradient element owned by one thread that sums in a fixed order:
//   A. one warp per row: datt[u] = drop'(dout_t·v_u), the row dot Σ_u att·datt (lane partial sums
//      in ascending u, then the butterfly), ds[t,u] = att·(datt - dot)·scale into an fp32 scratch
//      (B,NH,T,T) kept between calls.
//   B. one thread per (b, t, c): dq_t[c] += Σ_u ds[t,u]·k_u[c], u ascending from the existing value.
//   C. one thread per (b, u, c): dk_u[c] += Σ_t ds[t,u]·q_t[c] and dv_u[c] += Σ_t drop(att[t,u])·dout_t[c],
//      t ascending from u — the order in which the CPU op adds them, so only ds's row dot differs.
// Numerics: fp32 arithmetic whatever the storage F; expf instead of exp_f32 (both within 2 ulp).
// The dropout mask comes from dropout_keep (llmc/ops.h), keyed by (h + o.head_offset, t, u) as on
// the CPU: under tensor parallelism local head h is the model's head h + head_offset.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

// The score's scale factors, computed once on the host exactly as cpu/attention.h computes them.
struct AttnScoreScale {
    float sq;     // qk-inward: each operand's factor 1/√(√hs·coeff)
    float alpha;  // standard: the factor after the product, 1/(√hs·coeff)
    float coeff;  // the layer coefficient as a float
    float dscale; // dropout: 1/(1-p) for a kept probability
    float scale;  // backward: ∂s/∂(q·k) = 1/√hs (coefficient and operand scaling cancel)
};

static inline AttnScoreScale attention_score_scale(const AttentionOpts* o, int hs) {
    AttnScoreScale s;
    s.sq = (float)(1.0 / std::sqrt(std::sqrt((double)hs) * o->coeff));
    s.alpha = o->coeff == 1.0 ? 1.0f / std::sqrt((float)hs) : (float)(1.0 / (std::sqrt((double)hs) * o->coeff));
    s.coeff = (float)o->coeff;
    s.dscale = o->dropout.p > 0 ? (float)(1.0 / (1.0 - o->dropout.p)) : 1.0f;
    s.scale = 1.0f / std::sqrt((float)hs);
    return s;
}

// The softmax input for query q and key k (hs values each) of head h at key position u.
template <typename F>
__device__ inline float attention_score_f32(const F* q, const F* k, int hs, int h, int u, const AttentionOpts& o,
                                        const AttnScoreScale& sc) {
    float acc = 0, st;
    if (o.scaling == ATTN_SCALING_QK_INWARD) {
        for (int i = 0; i < hs; i++) acc += (to_f32(q[i]) * sc.sq) * (to_f32(k[i]) * sc.sq);
        st = acc;
    } else {
        for (int i = 0; i < hs; i++) acc += to_f32(q[i]) * to_f32(k[i]);
        st = acc * sc.alpha;
    }
    if (o.alibi) st += o.alibi[h] * (float)u / sc.coeff;
    return o.coeff == 1.0 ? st : st * sc.coeff;
}

// The dropout multiplier of probability att[b,h,t,u] (h the local head): 1 (dropout off),
// 1/(1-p) (kept) or 0. The mask is the model head's, h + head_offset.
__device__ inline float attention_drop_mult(const AttentionOpts& o, float dscale, int b, int h, int t, int u) {
    if (!(o.dropout.p > 0)) return 1.0f;
    return dropout_keep(&o.dropout, b, attention_dropout_index(h + o.head_offset, t, u)) ? dscale : 0.0f;
}

// ---- forward -------------------------------------------------------------------------------------

// Warp w of the block takes row blockIdx.x·(warps per block) + w = (b·NH + h)·T + t.
template <typename F>
__global__ void attention_softmax_kernel(F* att, const F* inp, int B, int T, int C, int NH, AttentionOpts o,
                                         AttnScoreScale sc) {
    KEEL_DYNAMIC_SHARED(float, sbuf);  // (warps per block, T) each warp's scores, then exps, in fp32
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + warp;
    if (row >= (size_t)B * NH * T) return;  // the whole warp leaves: its collectives stay matched
    int t = (int)(row % T), h = (int)(row / T % NH), b = (int)(row / ((size_t)T * NH));
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    float* s = sbuf + (size_t)warp * T;  // (T) this row's scores; lane k touches only u ≡ k mod 32
    const F* q = inp + ((size_t)b * T + t) * C3 + h * hs;
    float maxv = -INFINITY;
    for (int u = lane; u <= t; u += 32) {
        const F* k = inp + ((size_t)b * T + u) * C3 + C + h * hs;
        s[u] = attention_score_f32(q, k, hs, h, u, o, sc);
        maxv = s[u] > maxv ? s[u] : maxv;
    }
    maxv = warp_max(maxv);
    float sum = 0;
    for (int u = lane; u <= t; u += 32) {
        s[u] = expf(s[u] - maxv);
        sum += s[u];
    }
    float inv = 1.0f / warp_sum(sum);
    F* a = att + row * T;
    for (int u = lane; u < T; u += 32) a[u] = from_f32<F>(u <= t ? s[u] * inv : 0.0f);
}

// One thread per out element (b, t, c), c = h·hs + i.
template <typename F>
__global__ void attention_values_kernel(F* out, const F* att, const F* inp, int B, int T, int C, int NH,
                                        AttentionOpts o, float dscale) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    int c = (int)(idx % C), t = (int)(idx / C % T), b = (int)(idx / ((size_t)C * T));
    int h = c / (C / NH);
    size_t C3 = 3 * (size_t)C;
    const F* a = att + (((size_t)b * NH + h) * T + t) * T;  // (T) row t of head h
    const F* v = inp + (size_t)b * T * C3 + 2 * C + c;      // v_u[c] at v[u·3C]
    float acc = 0;
    for (int u = 0; u <= t; u++) acc += to_f32(a[u]) * attention_drop_mult(o, dscale, b, h, t, u) * to_f32(v[u * C3]);
    out[idx] = from_f32<F>(acc);
}

// ---- backward ------------------------------------------------------------------------------------

// Row (b, h, t) as in the softmax kernel: ds[t,u] for u ≤ t (entries above the diagonal are not
// written; kernels B and C never read them).
template <typename F>
__global__ void attention_backward_ds_kernel(float* ds, const F* dout, const F* inp, const F* att, int B, int T, int C,
                                             int NH, AttentionOpts o, AttnScoreScale sc) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + warp;
    if (row >= (size_t)B * NH * T) return;
    int t = (int)(row % T), h = (int)(row / T % NH), b = (int)(row / ((size_t)T * NH));
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    const F* a = att + row * T;                               // (T)
    float* dsr = ds + row * T;                                // (T) datt first, then ds
    const F* d = dout + ((size_t)b * T + t) * C + h * hs;     // (hs)
    float dot = 0;
    for (int u = lane; u <= t; u += 32) {
        const F* v = inp + ((size_t)b * T + u) * C3 + 2 * C + h * hs;
        float s = 0;
        for (int i = 0; i < hs; i++) s += to_f32(d[i]) * to_f32(v[i]);
        float datt = s * attention_drop_mult(o, sc.dscale, b, h, t, u);
        dsr[u] = datt;
        dot += to_f32(a[u]) * datt;
    }
    dot = warp_sum(dot);
    for (int u = lane; u <= t; u += 32) dsr[u] = to_f32(a[u]) * (dsr[u] - dot) * sc.scale;
}

// One thread per dq element (b, t, c): the keys of positions u ≤ t, u ascending.
template <typename F>
__global__ void attention_backward_dq_kernel(F* dinp, const float* ds, const F* inp, int B, int T, int C, int NH) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    int c = (int)(idx % C), t = (int)(idx / C % T), b = (int)(idx / ((size_t)C * T));
    int h = c / (C / NH);
    size_t C3 = 3 * (size_t)C;
    const float* dsr = ds + (((size_t)b * NH + h) * T + t) * T;  // (T) row t
    const F* k = inp + (size_t)b * T * C3 + C + c;              // k_u[c] at k[u·3C]
    F* dq = dinp + ((size_t)b * T + t) * C3 + c;
    float acc = to_f32(*dq);
    for (int u = 0; u <= t; u++) acc += dsr[u] * to_f32(k[u * C3]);
    *dq = from_f32<F>(acc);
}

// One thread per (b, u, c): dk_u[c] and dv_u[c] over the queries t ≥ u, t ascending.
template <typename F>
__global__ void attention_backward_dkv_kernel(F* dinp, const float* ds, const F* dout, const F* inp, const F* att, int B,
                                              int T, int C, int NH, AttentionOpts o, float dscale) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    int c = (int)(idx % C), u = (int)(idx / C % T), b = (int)(idx / ((size_t)C * T));
    int h = c / (C / NH);
    size_t C3 = 3 * (size_t)C, head = ((size_t)b * NH + h) * T * T;  // head: offset of (b, h) in (B,NH,T,T)
    const F* q = inp + (size_t)b * T * C3 + c;                       // q_t[c] at q[t·3C]
    const F* d = dout + (size_t)b * T * C + c;                       // dout_t[c] at d[t·C]
    F* dk = dinp + ((size_t)b * T + u) * C3 + C + c;
    F* dv = dk + C;
    float acc_k = to_f32(*dk), acc_v = to_f32(*dv);
    for (int t = u; t < T; t++) {
        size_t tu = head + (size_t)t * T + u;
        acc_k += ds[tu] * to_f32(q[t * C3]);
        float w = to_f32(att[tu]) * attention_drop_mult(o, dscale, b, h, t, u);
        acc_v += w * to_f32(d[(size_t)t * C]);
    }
    *dk = from_f32<F>(acc_k);
    *dv = from_f32<F>(acc_v);
}

// ---- launchers -----------------------------------------------------------------------------------

// Warps per block of the row kernels: 4, unless T's fp32 score rows would not fit 48 KiB of shared
// memory that way (T > 3072), then 1.
static inline int attention_row_warps(int T) { return 4 * (size_t)T * sizeof(float) <= 48 * 1024 ? 4 : 1; }

// The backward's ds scratch (B,NH,T,T) in fp32, kept between calls. size_t: B·NH·T·T overflows
// int at GPT-2 sizes.
inline float* attention_scratch(size_t n) {
    static DeviceScratch s;
    return (float*)scratch_reserve(&s, n * sizeof(float));
}

template <typename F>
void attention_forward(F* out, F* att,   // (B,T,C), (B,NH,T,T)
                       const F* inp,     // (B,T,3C)
                       int B, int T, int C, int NH, const AttentionOpts* o) {
    size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    AttnScoreScale sc = attention_score_scale(o, C / NH);
    int warps = attention_row_warps(T);
    size_t smem = (size_t)warps * T * sizeof(float);
    if (smem > 227 * 1024) keel_die("attention_forward: T=%d needs %zu bytes of shared memory per score row (at most 227 KiB)", T, smem);
    if (smem > 48 * 1024)  // beyond the default limit a kernel must opt in
        CUDA_CHECK(cudaFuncSetAttribute(attention_softmax_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    KEEL_LAUNCH(attention_softmax_kernel<F>, ceil_div(rows, warps), 32 * warps, smem, MAIN_STREAM)(att, inp, B, T, C, NH, *o, sc);
    CUDA_CHECK_LAUNCH();
    size_t n = (size_t)B * T * C;
    KEEL_LAUNCH(attention_values_kernel<F>, ceil_div(n, 256), 256, 0, MAIN_STREAM)(out, att, inp, B, T, C, NH, *o, sc.dscale);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
void attention_backward(F* dinp,                   // (B,T,3C) accumulated into
                        const F* dout,             // (B,T,C)
                        const F* inp, const F* att,  // (B,T,3C), (B,NH,T,T)
                        int B, int T, int C, int NH, const AttentionOpts* o) {
    size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    AttnScoreScale sc = attention_score_scale(o, C / NH);
    float* ds = attention_scratch(rows * T);  // (B,NH,T,T)
    KEEL_LAUNCH(attention_backward_ds_kernel<F>, ceil_div(rows, 4), 128, 0, MAIN_STREAM)(ds, dout, inp, att, B, T, C, NH, *o, sc);
    CUDA_CHECK_LAUNCH();
    size_t n = (size_t)B * T * C;
    KEEL_LAUNCH(attention_backward_dq_kernel<F>, ceil_div(n, 256), 256, 0, MAIN_STREAM)(dinp, ds, inp, B, T, C, NH);
    CUDA_CHECK_LAUNCH();
    KEEL_LAUNCH(attention_backward_dkv_kernel<F>, ceil_div(n, 256), 256, 0, MAIN_STREAM)(dinp, ds, dout, inp, att, B, T, C, NH, *o, sc.dscale);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
