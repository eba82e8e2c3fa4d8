// cuda/attention.cuh — causal multi-head self-attention with a materialized softmax, its six matrix
// products on the tensor cores (cuBLASLt strided-batched GEMMs, fp32 accumulation); the contract of
// cpu/attention.h (scores: standard or qk-inward scaling, layer coefficient, ALiBi; dropout on the
// probabilities; att holds the undropped probabilities, 0 above the diagonal).
// Legend: B batch, T time, C channels, NH heads, hs = C/NH head size, BH = B·NH (head-batches).
//   inp = qkv (B,T,3C); att (B,NH,T,T); out (B,T,C).
//
// Why permute: the GEMMs run over BH head-batches at one fixed stride, but in (B,T,3C) head (b,h)
// starts at b·T·3C + h·hs, which is not a multiple of one stride. So q, k and v are first copied
// into head-major (BH,T,hs) scratch (one 16-byte vector per thread where hs allows), and the
// products' results are copied back. In row-major terms, per head-batch:
//   forward   S  = alpha·Q·Kᵀ   (T,T) fp32        scores, before the variant's extra terms
//             att = softmax(S ...) (T,T) F         one warp per row (below)
//             O  = drop(att)·V  (T,hs)            → out (B,T,C)
//   backward  dP = dO·Vᵀ        (T,T) fp32
//             dV = drop(att)ᵀ·dO (T,hs) fp32
//             dS = att·(drop'(dP) - rowdot)·(1/√hs)   (T,T) F, one warp per row
//             dQ = dS·K,  dK = dSᵀ·Q  (T,hs) fp32  → added into dinp (B,T,3C), rounded once
// cuBLASLt is column-major: a row-major (R,K) matrix is the column-major (K,R) one, so each product
// above is handed over transposed (attention_gemm_* say which operand is transposed).
// Scaling: standard scores come out of the GEMM with alpha = 1/(√hs·coeff) (the CPU's "stored"
// value); qk-inward scales each operand by 1/√(√hs·coeff) before the product on the CPU — here the
// same factor, squared, is the GEMM's alpha: with fp32 accumulation the raw product cannot
// overflow, which is what the operand scaling protects in a half-precision product, and the two
// agree to fp32 rounding. The softmax kernel then adds ALiBi's slope·u/coeff and multiplies by
// coeff, as the CPU does.
// Softmax rows (forward): warp per row (b,h,t); lane k takes the 4-element groups k, k+32, ... of
// the fp32 score row (one 16-byte load each when T % 4 == 0); an online max/sum per lane, combined
// by a fixed butterfly (cuda/softmax.cuh), then a second pass writes exp(s - max)/sum (and the
// dropped probabilities when dropout is on). Zeros above the diagonal are written, since the next
// GEMM reads the whole T×T block.
// Backward rows: warp per row; dot = Σ_u att·drop'(dP) in the lanes' fixed order then warp_sum.
// Determinism: each GEMM's algorithm is fixed per shape (lt_matmul's cache), the row reductions have
// fixed trees, and every output element is written by exactly one thread: the same bits every run.
// Numerics vs the CPU: the products see F operands (bf16 under --bf16: q, k, v, dout, the
// probabilities and dS are rounded to bf16, as on any tensor-core path) and sum in fp32 in the
// GEMM's order; dQ, dK, dV stay fp32 until the single rounding into dinp.
// Memory: the scratch (permuted q,k,v and dO, fp32 dQ,dK,dV, the fp32 T×T scores and one F T×T
// block) is reserved once for the largest (B,T) by attention_reserve, so no step allocates;
// attention_scratch_bytes is the same formula for --dry-run.
// The dropout mask comes from dropout_keep (llmc/ops.h), keyed by (h + o.head_offset, t, u) as on
// the CPU: under tensor parallelism local head h is the model's head h + head_offset.
#pragma once
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/matmul.cuh"
#include "llmc/cuda/softmax.cuh"

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

// The dropout multiplier of probability att[b,h,t,u] (h the local head): 1 (dropout off),
// 1/(1-p) (kept) or 0. The mask is the model head's, h + head_offset.
__device__ inline float attention_drop_mult(const AttentionOpts& o, float dscale, int b, int h, int t, int u) {
    if (!(o.dropout.p > 0)) return 1.0f;
    return dropout_keep(&o.dropout, b, attention_dropout_index(h + o.head_offset, t, u)) ? dscale : 0.0f;
}

// ---- head-major copies ---------------------------------------------------------------------------
// heads_split: part z of src (B,T,S) — channels [z·C, (z+1)·C) — to dst + z·BTC as (B,NH,T,hs).
// One thread per V consecutive channels of one head (V = 16/sizeof(F) when hs allows).
template <typename F, int V>
__global__ void attention_heads_split_kernel(F* dst, const F* src, int B, int T, int C, int NH, int S) {
    int hs = C / NH;
    size_t BTC = (size_t)B * T * C, i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= BTC) return;
    int z = blockIdx.y;
    // i indexes dst (B,NH,T,hs): i = ((b·NH + h)·T + t)·hs + e
    int e = (int)(i % hs), t = (int)(i / hs % T), h = (int)(i / ((size_t)hs * T) % NH), b = (int)(i / ((size_t)hs * T * NH));
    const F* s = src + ((size_t)b * T + t) * S + (size_t)z * C + h * hs + e;
    pack_store<F, V>(dst + (size_t)z * BTC + i, pack_load<F, V>(s));
}

// heads_merge: parts z of src (parts, B,NH,T,hs) of type Src back to dst (B,T,S) at channels
// [z·C, ...); accumulate: dst += src (fp32 sum, one rounding to F), else dst = src.
template <typename F, typename Src, int V>
__global__ void attention_heads_merge_kernel(F* dst, const Src* src, int B, int T, int C, int NH, int S, bool accumulate) {
    int hs = C / NH;
    size_t BTC = (size_t)B * T * C, i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= BTC) return;
    int z = blockIdx.y;
    int e = (int)(i % hs), t = (int)(i / hs % T), h = (int)(i / ((size_t)hs * T) % NH), b = (int)(i / ((size_t)hs * T * NH));
    F* d = dst + ((size_t)b * T + t) * S + (size_t)z * C + h * hs + e;
    Pack<Src, V> x = pack_load<Src, V>(src + (size_t)z * BTC + i);
    Pack<F, V> y;
    if (accumulate) y = pack_load<F, V>(d);
    for (int v = 0; v < V; v++) y.v[v] = from_f32<F>(accumulate ? to_f32(y.v[v]) + to_f32(x.v[v]) : to_f32(x.v[v]));
    pack_store<F, V>(d, y);
}

// ---- softmax rows ----------------------------------------------------------------------------------
// The softmax input of score x (the GEMM's alpha already applied) at key position u of head h.
__device__ inline float attention_softmax_input(float x, int h, int u, const AttentionOpts& o, const AttnScoreScale& sc) {
    if (o.alibi) x += o.alibi[h] * (float)u / sc.coeff;
    return o.coeff == 1.0 ? x : x * sc.coeff;
}

// Loads the 4 scores u0..u0+3 of a row (V4: one 16-byte load).
template <bool V4> __device__ inline void attention_load4(float x[4], const float* row, int u0, int T) {
    if (V4) {
        Pack<float, 4> p = pack_load<float, 4>(row + u0);
        for (int j = 0; j < 4; j++) x[j] = p.v[j];
    } else {
        for (int j = 0; j < 4; j++) x[j] = u0 + j < T ? row[u0 + j] : 0.0f;
    }
}

// Row r = (b·NH + h)·T + t: att[r,u] = softmax_u≤t; drop (if not null) = att·mask·dscale as F.
template <typename F, bool V4>
__global__ void attention_softmax_kernel(F* att, F* drop, const float* scores, int B, int T, int NH, AttentionOpts o, AttnScoreScale sc) {
    int lane = threadIdx.x % 32;
    size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= (size_t)B * NH * T) return;  // the whole warp leaves: its collectives stay matched
    int t = (int)(r % T), h = (int)(r / T % NH), b = (int)(r / ((size_t)T * NH));
    const float* row = scores + r * T;
    float m = -INFINITY, s = 0.0f;
    for (int u0 = 4 * lane; u0 <= t; u0 += 128) {
        float x[4];
        attention_load4<V4>(x, row, u0, T);
        for (int j = 0; j < 4 && u0 + j <= t; j++) {
            float v = attention_softmax_input(x[j], h, u0 + j, o, sc);
            softmax_state_add(&m, &s, v);
        }
    }
    warp_softmax_combine(&m, &s);
    float inv = 1.0f / s;
    F* a = att + r * T;
    F* d = drop ? drop + r * T : nullptr;
    for (int u0 = 4 * lane; u0 < T; u0 += 128) {
        float x[4];
        attention_load4<V4>(x, row, u0, T);
        for (int j = 0; j < 4 && u0 + j < T; j++) {
            int u = u0 + j;
            float p = u <= t ? expf(attention_softmax_input(x[j], h, u, o, sc) - m) * inv : 0.0f;
            F pf = from_f32<F>(p);
            a[u] = pf;
            // the product sees the stored probability, as the CPU's att·mask·dscale does
            if (d) d[u] = from_f32<F>(to_f32(pf) * attention_drop_mult(o, sc.dscale, b, h, t, u));
        }
    }
}

// Backward row r: ds[r,u] = att·(dP·m - Σ_u' att·dP·m)·scale for u ≤ t, 0 above.
template <typename F>
__global__ void attention_softmax_backward_kernel(F* ds, const float* dp, const F* att, int B, int T, int NH, AttentionOpts o,
                                                  AttnScoreScale sc) {
    int lane = threadIdx.x % 32;
    size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= (size_t)B * NH * T) return;
    int t = (int)(r % T), h = (int)(r / T % NH), b = (int)(r / ((size_t)T * NH));
    const float* dpr = dp + r * T;
    const F* a = att + r * T;
    F* out = ds + r * T;
    float dot = 0.0f;
    for (int u = lane; u <= t; u += 32) dot += to_f32(a[u]) * (dpr[u] * attention_drop_mult(o, sc.dscale, b, h, t, u));
    dot = warp_sum(dot);
    for (int u = lane; u < T; u += 32) {
        float v = 0.0f;
        if (u <= t) v = to_f32(a[u]) * (dpr[u] * attention_drop_mult(o, sc.dscale, b, h, t, u) - dot) * sc.scale;
        out[u] = from_f32<F>(v);
    }
}

// The dropped probabilities att·mask·dscale (backward with dropout: dV's left operand).
template <typename F>
__global__ void attention_dropped_probs_kernel(F* drop, const F* att, int B, int T, int NH, AttentionOpts o, float dscale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * T) return;
    int u = (int)(i % T), t = (int)(i / T % T), h = (int)(i / ((size_t)T * T) % NH), b = (int)(i / ((size_t)T * T * NH));
    drop[i] = from_f32<F>(to_f32(att[i]) * attention_drop_mult(o, dscale, b, h, t, u));
}

// ---- scratch -----------------------------------------------------------------------------------------
// The scratch's bytes for (B,T,C,NH): attention_scratch_bytes (llmc/ops.h, shared with --dry-run).
struct AttnScratch {
    void* qkv;   // (3,BH,T,hs) F
    void* o;     // (BH,T,hs) F: O in the forward, dO in the backward
    float* dqkv; // (3,BH,T,hs)
    float* s;    // (BH,T,T) scores, then dP
    void* p;     // (BH,T,T) F: dropped probabilities, then dS
};
static inline DeviceScratch* attention_scratch() {
    static DeviceScratch s;
    return &s;
}
static inline AttnScratch attention_scratch_carve(size_t B, size_t T, size_t C, size_t NH, size_t fsize) {
    char* base = (char*)scratch_reserve(attention_scratch(), attention_scratch_bytes(B, T, C, NH, fsize));
    size_t BTC = B * T * C, BHTT = B * NH * T * T;
    auto take = [&](size_t bytes) { char* p = base; base += (bytes + 255) / 256 * 256; return (void*)p; };
    AttnScratch a;
    a.qkv = take(3 * BTC * fsize);
    a.o = take(BTC * fsize);
    a.dqkv = (float*)take(3 * BTC * sizeof(float));
    a.s = (float*)take(BHTT * sizeof(float));
    a.p = take(BHTT * fsize);
    return a;
}
// Sizes the scratch for micro-batches of up to (B,T) (the curriculum's longest T), so that no
// training step allocates.
template <typename F> void attention_reserve(int B, int T, int C, int NH) {
    scratch_reserve(attention_scratch(), attention_scratch_bytes(B, T, C, NH, sizeof(F)));
}

// ---- launchers -------------------------------------------------------------------------------------

// Vector width of the head copies: 16 bytes when a head's channels and every pointer allow it.
template <typename F> static inline bool attention_vec_ok(int hs, const void* a, const void* b) {
    return hs % (16 / sizeof(F)) == 0 && aligned16(a) && aligned16(b);
}
template <typename F> static void attention_heads_split(F* dst, const F* src, int parts, int B, int T, int C, int NH, int S) {
    const int V = 16 / sizeof(F);
    size_t BTC = (size_t)B * T * C;
    if (attention_vec_ok<F>(C / NH, dst, src) && S % V == 0)
        KEEL_LAUNCH(attention_heads_split_kernel<F KEEL_COMMA V>, dim3(ceil_div(BTC / V, 256), parts), 256, 0, MAIN_STREAM)(dst, src, B, T, C, NH, S);
    else
        KEEL_LAUNCH(attention_heads_split_kernel<F KEEL_COMMA 1>, dim3(ceil_div(BTC, 256), parts), 256, 0, MAIN_STREAM)(dst, src, B, T, C, NH, S);
    CUDA_CHECK_LAUNCH();
}
template <typename F, typename Src>
static void attention_heads_merge(F* dst, const Src* src, int parts, int B, int T, int C, int NH, int S, bool accumulate) {
    const int V = 16 / sizeof(F) < 16 / sizeof(Src) ? 16 / sizeof(F) : 16 / sizeof(Src);  // 4 for fp32 sources
    size_t BTC = (size_t)B * T * C;
    bool vec = (C / NH) % V == 0 && S % V == 0 && aligned16(dst) && aligned16(src);
    if (vec && V == 4)
        KEEL_LAUNCH(attention_heads_merge_kernel<F KEEL_COMMA Src KEEL_COMMA 4>, dim3(ceil_div(BTC / 4, 256), parts), 256, 0, MAIN_STREAM)(
            dst, src, B, T, C, NH, S, accumulate);
    else if (vec && V == 8)
        KEEL_LAUNCH(attention_heads_merge_kernel<F KEEL_COMMA Src KEEL_COMMA 8>, dim3(ceil_div(BTC / 8, 256), parts), 256, 0, MAIN_STREAM)(
            dst, src, B, T, C, NH, S, accumulate);
    else
        KEEL_LAUNCH(attention_heads_merge_kernel<F KEEL_COMMA Src KEEL_COMMA 1>, dim3(ceil_div(BTC, 256), parts), 256, 0, MAIN_STREAM)(
            dst, src, B, T, C, NH, S, accumulate);
    CUDA_CHECK_LAUNCH();
}

// The three product shapes, row-major per head-batch (see the contract for the column-major view):
//   rows_dot:  D (T,T)  = alpha·X·Yᵀ      X, Y (T,hs)            S = Q·Kᵀ, dP = dO·Vᵀ
//   mix:       D (T,hs) = P·Y             P (T,T), Y (T,hs)      O = P·V, dQ = dS·K
//   mix_t:     D (T,hs) = Pᵀ·Y            P (T,T), Y (T,hs)      dV = Pᵀ·dO, dK = dSᵀ·Q
template <typename Out, typename F> static void attention_gemm_rows_dot(Out* d, const F* x, const F* y, int BH, int T, int hs, float alpha) {
    LtBatch bt{BH, (int64_t)T * hs, (int64_t)T * hs, (int64_t)T * T};
    lt_matmul(d, y, x, (const Out*)nullptr, T, T, hs, true, false, 0.0f, alpha, bt);
}
template <typename Out, typename F> static void attention_gemm_mix(Out* d, const F* p, const F* y, int BH, int T, int hs) {
    LtBatch bt{BH, (int64_t)T * hs, (int64_t)T * T, (int64_t)T * hs};
    lt_matmul(d, y, p, (const Out*)nullptr, hs, T, T, false, false, 0.0f, 1.0f, bt);
}
template <typename Out, typename F> static void attention_gemm_mix_t(Out* d, const F* p, const F* y, int BH, int T, int hs) {
    LtBatch bt{BH, (int64_t)T * hs, (int64_t)T * T, (int64_t)T * hs};
    lt_matmul(d, y, p, (const Out*)nullptr, hs, T, T, false, true, 0.0f, 1.0f, bt);
}

// Warps per block of the row kernels.
enum { ATTN_ROW_WARPS = 8 };

template <typename F>
void attention_forward(F* out, F* att,   // (B,T,C), (B,NH,T,T)
                       const F* inp,     // (B,T,3C)
                       int B, int T, int C, int NH, const AttentionOpts* o) {
    size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    int hs = C / NH, BH = B * NH;
    size_t BTC = (size_t)B * T * C;
    AttnScoreScale sc = attention_score_scale(o, hs);
    AttnScratch s = attention_scratch_carve(B, T, C, NH, sizeof(F));
    F* q = (F*)s.qkv;
    F *k = q + BTC, *v = q + 2 * BTC;
    attention_heads_split(q, inp, 3, B, T, C, NH, 3 * C);
    float alpha = o->scaling == ATTN_SCALING_QK_INWARD ? sc.sq * sc.sq : sc.alpha;
    attention_gemm_rows_dot(s.s, q, k, BH, T, hs, alpha);
    bool drop = o->dropout.p > 0;
    F* pd = drop ? (F*)s.p : nullptr;
    unsigned blocks = ceil_div(rows, ATTN_ROW_WARPS);
    if (T % 4 == 0)
        KEEL_LAUNCH(attention_softmax_kernel<F KEEL_COMMA true>, blocks, 32 * ATTN_ROW_WARPS, 0, MAIN_STREAM)(att, pd, s.s, B, T, NH, *o, sc);
    else
        KEEL_LAUNCH(attention_softmax_kernel<F KEEL_COMMA false>, blocks, 32 * ATTN_ROW_WARPS, 0, MAIN_STREAM)(att, pd, s.s, B, T, NH, *o, sc);
    CUDA_CHECK_LAUNCH();
    attention_gemm_mix((F*)s.o, drop ? pd : att, v, BH, T, hs);
    attention_heads_merge(out, (const F*)s.o, 1, B, T, C, NH, C, false);
}

template <typename F>
void attention_backward(F* dinp,                   // (B,T,3C) accumulated into
                        const F* dout,             // (B,T,C)
                        const F* inp, const F* att,  // (B,T,3C), (B,NH,T,T)
                        int B, int T, int C, int NH, const AttentionOpts* o) {
    size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    int hs = C / NH, BH = B * NH;
    size_t BTC = (size_t)B * T * C;
    AttnScoreScale sc = attention_score_scale(o, hs);
    AttnScratch s = attention_scratch_carve(B, T, C, NH, sizeof(F));
    F* q = (F*)s.qkv;
    F *k = q + BTC, *v = q + 2 * BTC, *dO = (F*)s.o, *p = (F*)s.p;
    float *dq = s.dqkv, *dk = dq + BTC, *dv = dq + 2 * BTC;
    attention_heads_split(q, inp, 3, B, T, C, NH, 3 * C);
    attention_heads_split(dO, dout, 1, B, T, C, NH, C);
    attention_gemm_rows_dot(s.s, dO, v, BH, T, hs, 1.0f);  // dP = dO·Vᵀ
    const F* pv = att;  // dV's probabilities: the dropped ones under dropout
    if (o->dropout.p > 0) {
        size_t n = rows * T;
        KEEL_LAUNCH(attention_dropped_probs_kernel<F>, ceil_div(n, 256), 256, 0, MAIN_STREAM)(p, att, B, T, NH, *o, sc.dscale);
        CUDA_CHECK_LAUNCH();
        pv = p;
    }
    attention_gemm_mix_t(dv, pv, dO, BH, T, hs);  // dV = drop(att)ᵀ·dO (before p is overwritten by dS)
    KEEL_LAUNCH(attention_softmax_backward_kernel<F>, ceil_div(rows, ATTN_ROW_WARPS), 32 * ATTN_ROW_WARPS, 0, MAIN_STREAM)(
        p, s.s, att, B, T, NH, *o, sc);
    CUDA_CHECK_LAUNCH();
    attention_gemm_mix(dq, p, k, BH, T, hs);    // dQ = dS·K
    attention_gemm_mix_t(dk, p, q, BH, T, hs);  // dK = dSᵀ·Q
    attention_heads_merge(dinp, (const float*)dq, 3, B, T, C, NH, 3 * C, true);
}

}  // namespace keel_cuda
