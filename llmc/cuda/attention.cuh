// cuda/attention.cuh — causal multi-head self-attention with a materialized softmax, its six matrix
// products on the tensor cores (cuBLASLt strided-batched GEMMs, fp32 accumulation); the contract of
// cpu/attention.h (scores: standard or qk-inward scaling, layer coefficient, ALiBi; dropout on the
// probabilities; att holds the undropped probabilities, 0 above the diagonal).
// Legend: B batch, T time, C channels, NH heads, hs = C/NH head size, BH = B·NH (head-batches).
//   inp = qkv (B,T,3C); att (B,NH,T,T); out (B,T,C).
//
// Why permute: the GEMMs run over BH head-batches at one fixed stride, but in (B,T,3C) head (b,h)
// starts at b·T·3C + h·hs: a single stride s would need s = hs (from one head to the next) and
// NH·s = 3·T·C (from one batch row to the next), i.e. T = 1/3. So q, k and v are copied into
// head-major (BH,T,hs) scratch (one 16-byte vector per thread where hs allows), and the products'
// (BH,T,hs) results are copied back, in the storage type. In row-major terms, per head-batch:
//   forward   S  = alpha·Q·Kᵀ   (T,T) F           scores, before the variant's extra terms
//             att = softmax(S ...) (T,T) F         one warp per row (below)
//             O  = drop(att)·V  (T,hs) F          → out (B,T,C)
//   backward  dP = dO·Vᵀ        (T,T) F
//             dV = drop(att)ᵀ·dO (T,hs) F
//             dS = att·(drop'(dP) - rowdot)·(1/√hs)   (T,T) F, one warp per row
//             dQ = dS·K,  dK = dSᵀ·Q  (T,hs) F    → written into dinp (B,T,3C) (or added, below)
// Every product accumulates in fp32 and rounds once to F as it stores (S and dP too: fp32 under
// --fp32, bf16/fp16 under --bf16/--fp16); the row kernels read F and compute in fp32.
// cuBLASLt is column-major: a row-major (R,K) matrix is the column-major (K,R) one, so each product
// above is handed over transposed (attention_gemm_* say which operand is transposed).
// Scaling: standard scores come out of the GEMM with alpha = 1/(√hs·coeff) (the CPU's "stored"
// value); qk-inward scales each operand by 1/√(√hs·coeff) before the product on the CPU — here the
// same factor, squared, is the GEMM's alpha: with fp32 accumulation the raw product cannot
// overflow, which is what the operand scaling protects in a half-precision product, and the two
// agree to fp32 rounding before S is stored. The softmax kernel then adds ALiBi's slope·u/coeff and
// multiplies by coeff, as the CPU does.
// The causal triangle: the row kernels touch only keys u ≤ t of row t (a 16-byte group that holds
// the diagonal is read whole, and its part past the diagonal written as zeros); S and dP above the
// diagonal are computed by their GEMMs and never read. The GEMMs that read a T×T operand read all of
// it, so its zeros above the diagonal must be there: att is the caller's buffer, and the softmax
// writes its zeros (writes only: nothing above the diagonal is read); the scratch block P (the
// dropped probabilities, then dS) is zeroed once per carve (attention_p_zeros) and then holds the
// invariant that no kernel writes anything but zeros above its diagonals, so its upper triangles
// stay zero (test_cuda_attention checks it after every variant).
// Softmax rows (forward): warp per row (b,h,t); lane k takes the V-element groups k, k+32, ... of
// the score row up to the diagonal (V = 16 bytes of F when T and the pointers allow, else 1); an
// online max/sum per lane, combined by a fixed butterfly (cuda/softmax.cuh), then a second pass
// writes exp(s - max)/sum (and the dropped probabilities when dropout is on).
// Backward rows: warp per row; dot = Σ_u≤t att·drop'(dP) in the lanes' fixed order then warp_sum.
// Determinism: each GEMM's algorithm is fixed per shape (lt_matmul's cache), the row reductions have
// fixed trees, and every output element is written by exactly one thread: the same bits every run.
// Numerics vs the CPU: the products see F operands (bf16 under --bf16: q, k, v, dout, the
// probabilities and dS are rounded to bf16, as on any tensor-core path) and sum in fp32 in the
// GEMM's order; S, dP, dQ, dK and dV are rounded once to F as the GEMM stores them. The CPU's --bf16
// twin (AttentionOpts::round_bf16) rounds S and dP at the same points.
// dinp: with dinp_write (the model's use), dQ, dK, dV are copied into it and its old contents
// neither read nor needed zeroed; without it they are added in fp32 and rounded to F (so under
// --bf16 an added gradient meets two roundings: dQ's and the sum's).
// Memory: the scratch (head-major q, k, v and O/dO, the T×T S/dP block and the T×T block P, all of
// type F; the backward's dQ, dK, dV go to the slots of dO, k and v once those are read) is reserved
// once for the largest (B,T) by attention_reserve, so no step allocates; attention_scratch_bytes
// is the same formula for --dry-run.
// Reuse of the forward's head-major q, k, v: the backward skips its split when the scratch still
// holds the one the last forward made of the same inp and att (nothing in between ran attention on
// another buffer and the scratch was not resized): the model's last layer, and every layer under
// --checkpoint-activations, whose forward runs again just before its backward. It relies on the
// backward's contract: inp and att are the ones the forward computed att from, unchanged. The
// backward overwrites k and v with dK and dV, so a second backward splits again.
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
    uint64_t keep_from;  // dropout: dropout_keep_from(p), the integer form of the keep test (llmc/ops.h)
    bool dropout;        // p > 0
};

static inline AttnScoreScale attention_score_scale(const AttentionOpts* o, int hs) {
    AttnScoreScale s;
    s.sq = (float)(1.0 / std::sqrt(std::sqrt((double)hs) * o->coeff));
    s.alpha = o->coeff == 1.0 ? 1.0f / std::sqrt((float)hs) : (float)(1.0 / (std::sqrt((double)hs) * o->coeff));
    s.coeff = (float)o->coeff;
    s.dscale = o->dropout.p > 0 ? (float)(1.0 / (1.0 - o->dropout.p)) : 1.0f;
    s.scale = 1.0f / std::sqrt((float)hs);
    s.keep_from = dropout_keep_from(o->dropout.p);
    s.dropout = o->dropout.p > 0;
    return s;
}

// The dropout multiplier of probability att[b,h,t,u] (h the local head): 1 (dropout off),
// 1/(1-p) (kept) or 0. The mask is the model head's, h + head_offset. row_key: dropout_row_key of
// sample b (a kernel takes it once); the test is integer (dropout_keep_keyed), the same mask as the
// CPU's dropout_keep.
__device__ inline float attention_drop_mult(const AttentionOpts& o, const AttnScoreScale& sc, uint64_t row_key, int h, int t, int u) {
    if (!sc.dropout) return 1.0f;
    return dropout_keep_keyed(row_key, attention_dropout_index(h + o.head_offset, t, u), sc.keep_from) ? sc.dscale : 0.0f;
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

// heads_merge: part z (blockIdx.y) of the head-major (B,NH,T,hs) parts src0, src1, src2 back to dst
// (B,T,S) at channels [z·C, ...); accumulate: dst += src (fp32 sum, one rounding to F), else dst = src.
template <typename F, int V>
__global__ void attention_heads_merge_kernel(F* dst, const F* src0, const F* src1, const F* src2, int B, int T, int C, int NH, int S,
                                             bool accumulate) {
    int hs = C / NH;
    size_t BTC = (size_t)B * T * C, i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= BTC) return;
    int z = blockIdx.y;
    const F* src = z == 0 ? src0 : z == 1 ? src1 : src2;
    int e = (int)(i % hs), t = (int)(i / hs % T), h = (int)(i / ((size_t)hs * T) % NH), b = (int)(i / ((size_t)hs * T * NH));
    F* d = dst + ((size_t)b * T + t) * S + (size_t)z * C + h * hs + e;
    Pack<F, V> x = pack_load<F, V>(src + i);
    if (accumulate) {
        Pack<F, V> y = pack_load<F, V>(d);
        for (int v = 0; v < V; v++) x.v[v] = from_f32<F>(to_f32(y.v[v]) + to_f32(x.v[v]));
    }
    pack_store<F, V>(d, x);
}

// ---- softmax rows ----------------------------------------------------------------------------------
// The softmax input of score x (the GEMM's alpha already applied) at key position u of head h:
// (x + ALiBi's slope·u/coeff)·coeff. Without a layer coefficient sc.coeff is 1 and x·1 = x, the same
// bits as not multiplying: no test per score, and no double-precision compare.
// attention_alibi_term is the ALiBi addend alone (o.alibi set), for a kernel that keeps it per key.
__device__ inline float attention_alibi_term(int h, int u, const AttentionOpts& o, const AttnScoreScale& sc) { return o.alibi[h] * (float)u / sc.coeff; }
__device__ inline float attention_softmax_input_term(float x, float alibi_term, const AttentionOpts& o, const AttnScoreScale& sc) {
    if (o.alibi) x += alibi_term;
    return x * sc.coeff;
}
__device__ inline float attention_softmax_input(float x, int h, int u, const AttentionOpts& o, const AttnScoreScale& sc) {
    return attention_softmax_input_term(x, o.alibi ? attention_alibi_term(h, u, o, sc) : 0.0f, o, sc);
}

// The V values of a row from u0 as fp32 (one 16-byte load when V·sizeof(F) = 16). With V > 1 the
// launcher guarantees T % V == 0, so a group never crosses the row's end.
template <typename F, int V> __device__ inline void attention_load(float x[V], const F* row, int u0) {
    Pack<F, V> p = pack_load<F, V>(row + u0);
    for (int j = 0; j < V; j++) x[j] = to_f32(p.v[j]);
}

// Row r = (b·NH + h)·T + t: att[r,u] = softmax_u≤t (0 for u > t, written: att is the caller's);
// drop (if not null, the scratch block P) = att·mask·dscale as F for u ≤ t, nothing written past the
// diagonal's group (its zeros stay). The scores are read for u ≤ t only.
template <typename F, int V>
__global__ void attention_softmax_kernel(F* att, F* drop, const F* scores, int B, int T, int NH, AttentionOpts o, AttnScoreScale sc) {
    int lane = threadIdx.x % 32;
    size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= (size_t)B * NH * T) return;  // the whole warp leaves: its collectives stay matched
    int t = (int)(r % T), h = (int)(r / T % NH), b = (int)(r / ((size_t)T * NH));
    const F* row = scores + r * T;
    const uint64_t rk = sc.dropout ? dropout_row_key(&o.dropout, b) : 0;  // the row's dropout key
    float m = -INFINITY, s = 0.0f;
    for (int u0 = V * lane; u0 <= t; u0 += 32 * V) {
        float x[V];
        attention_load<F, V>(x, row, u0);
        for (int j = 0; j < V && u0 + j <= t; j++) softmax_state_add(&m, &s, attention_softmax_input(x[j], h, u0 + j, o, sc));
    }
    warp_softmax_combine(&m, &s);
    float inv = 1.0f / s;
    F* a = att + r * T;
    F* d = drop ? drop + r * T : nullptr;
    for (int u0 = V * lane; u0 < T; u0 += 32 * V) {
        Pack<F, V> pa, pd;
        if (u0 > t) {  // past the diagonal: att's zeros, without reading the scores
            for (int j = 0; j < V; j++) pa.v[j] = from_f32<F>(0.0f);
            pack_store<F, V>(a + u0, pa);
            continue;
        }
        float x[V];
        attention_load<F, V>(x, row, u0);
        for (int j = 0; j < V; j++) {
            int u = u0 + j;
            pa.v[j] = from_f32<F>(u <= t ? expf(attention_softmax_input(x[j], h, u, o, sc) - m) * inv : 0.0f);
            // the product sees the stored probability, as the CPU's att·mask·dscale does
            if (d) pd.v[j] = from_f32<F>(u <= t ? to_f32(pa.v[j]) * attention_drop_mult(o, sc, rk, h, t, u) : 0.0f);
        }
        pack_store<F, V>(a + u0, pa);
        if (d) pack_store<F, V>(d + u0, pd);
    }
}

// Backward row r: ds[r,u] = att·(dP·m - Σ_u' att·dP·m)·scale for u ≤ t (the diagonal's group
// padded with zeros); dP and att read for u ≤ t only.
template <typename F, int V>
__global__ void attention_softmax_backward_kernel(F* ds, const F* dp, const F* att, int B, int T, int NH, AttentionOpts o,
                                                  AttnScoreScale sc) {
    int lane = threadIdx.x % 32;
    size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= (size_t)B * NH * T) return;
    int t = (int)(r % T), h = (int)(r / T % NH), b = (int)(r / ((size_t)T * NH));
    const F* dpr = dp + r * T;
    const F* a = att + r * T;
    F* out = ds + r * T;
    const uint64_t rk = sc.dropout ? dropout_row_key(&o.dropout, b) : 0;  // the row's dropout key
    float dot = 0.0f;
    for (int u0 = V * lane; u0 <= t; u0 += 32 * V) {
        float x[V], y[V];
        attention_load<F, V>(x, dpr, u0);
        attention_load<F, V>(y, a, u0);
        for (int j = 0; j < V && u0 + j <= t; j++) dot += y[j] * (x[j] * attention_drop_mult(o, sc, rk, h, t, u0 + j));
    }
    dot = warp_sum(dot);
    for (int u0 = V * lane; u0 <= t; u0 += 32 * V) {
        float x[V], y[V];
        attention_load<F, V>(x, dpr, u0);
        attention_load<F, V>(y, a, u0);
        Pack<F, V> p;
        for (int j = 0; j < V; j++) {
            int u = u0 + j;
            p.v[j] = from_f32<F>(u <= t ? y[j] * (x[j] * attention_drop_mult(o, sc, rk, h, t, u) - dot) * sc.scale : 0.0f);
        }
        pack_store<F, V>(out + u0, p);
    }
}

// The dropped probabilities att·mask·dscale of row r for u ≤ t (backward with dropout: dV's left
// operand, in the scratch block P, whose zeros past the diagonal stay).
template <typename F, int V>
__global__ void attention_dropped_probs_kernel(F* drop, const F* att, int B, int T, int NH, AttentionOpts o, AttnScoreScale sc) {
    int lane = threadIdx.x % 32;
    size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= (size_t)B * NH * T) return;
    int t = (int)(r % T), h = (int)(r / T % NH), b = (int)(r / ((size_t)T * NH));
    const uint64_t rk = dropout_row_key(&o.dropout, b);  // the row's dropout key
    for (int u0 = V * lane; u0 <= t; u0 += 32 * V) {
        float y[V];
        attention_load<F, V>(y, att + r * T, u0);
        Pack<F, V> p;
        for (int j = 0; j < V; j++) p.v[j] = from_f32<F>(u0 + j <= t ? y[j] * attention_drop_mult(o, sc, rk, h, t, u0 + j) : 0.0f);
        pack_store<F, V>(drop + r * T + u0, p);
    }
}

// ---- scratch -----------------------------------------------------------------------------------------
// The scratch's bytes for (B,T,C,NH): attention_scratch_bytes (llmc/ops.h, shared with --dry-run).
struct AttnScratch {
    void* qkv;  // (3,BH,T,hs) F; the backward leaves dK, dV in the k, v slots
    void* o;    // (BH,T,hs) F: O in the forward, dO then dQ in the backward
    void* s;    // (BH,T,T) F: the scores S, then dP
    void* p;    // (BH,T,T) F: dropped probabilities, then dS; 0 above every diagonal (attention_p_zeros)
};
static inline DeviceScratch* attention_scratch() {
    static DeviceScratch s;
    return &s;
}
// One carve of the scratch: its buffer and the shape it is cut for. A different key moves the blocks.
struct AttnCarveKey {
    const void* ptr = nullptr;
    size_t bytes = 0, B = 0, T = 0, C = 0, NH = 0, fsize = 0;
    bool operator==(const AttnCarveKey& k) const {
        return ptr == k.ptr && bytes == k.bytes && B == k.B && T == k.T && C == k.C && NH == k.NH && fsize == k.fsize;
    }
};
// What the scratch holds beyond one call: the carve whose block P has zeros above its diagonals,
// and the carve and (inp, att) whose head-major q, k, v are in the qkv slots (split_inp null: none).
struct AttnScratchState {
    AttnCarveKey zeroed, split;
    const void *split_inp = nullptr, *split_att = nullptr;
};
static inline AttnScratchState* attention_scratch_state() {
    static AttnScratchState s;
    return &s;
}
static inline AttnScratch attention_scratch_carve(size_t B, size_t T, size_t C, size_t NH, size_t fsize, AttnCarveKey* key) {
    DeviceScratch* ds = attention_scratch();
    char* base = (char*)scratch_reserve(ds, attention_scratch_bytes(B, T, C, NH, fsize));
    *key = AttnCarveKey{ds->ptr, ds->bytes, B, T, C, NH, fsize};
    size_t BTC = B * T * C, BHTT = B * NH * T * T;
    auto take = [&](size_t bytes) { char* p = base; base += (bytes + 255) / 256 * 256; return (void*)p; };
    AttnScratch a;
    a.qkv = take(3 * BTC * fsize);
    a.o = take(BTC * fsize);
    a.s = take(BHTT * fsize);
    a.p = take(BHTT * fsize);
    return a;
}
// Block P's zeros above the diagonals, before a product reads it: one memset when the carve changed
// (the first call, or another (B,T)); from then on no kernel writes anything else there.
static inline void attention_p_zeros(const AttnScratch& a, const AttnCarveKey& key) {
    AttnScratchState* st = attention_scratch_state();
    if (st->zeroed == key) return;
    device_memset_zero(a.p, key.B * key.NH * key.T * key.T * key.fsize);
    st->zeroed = key;
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
// src[z] (head-major, z < parts) into dst's parts z.
template <typename F>
static void attention_heads_merge(F* dst, const F* const src[3], int parts, int B, int T, int C, int NH, int S, bool accumulate) {
    const int V = 16 / sizeof(F);
    size_t BTC = (size_t)B * T * C;
    const F* s1 = parts > 1 ? src[1] : src[0];
    const F* s2 = parts > 2 ? src[2] : src[0];
    bool vec = attention_vec_ok<F>(C / NH, dst, src[0]) && aligned16(s1) && aligned16(s2) && S % V == 0;
    if (vec)
        KEEL_LAUNCH(attention_heads_merge_kernel<F KEEL_COMMA V>, dim3(ceil_div(BTC / V, 256), parts), 256, 0, MAIN_STREAM)(
            dst, src[0], s1, s2, B, T, C, NH, S, accumulate);
    else
        KEEL_LAUNCH(attention_heads_merge_kernel<F KEEL_COMMA 1>, dim3(ceil_div(BTC, 256), parts), 256, 0, MAIN_STREAM)(
            dst, src[0], s1, s2, B, T, C, NH, S, accumulate);
    CUDA_CHECK_LAUNCH();
}

// The three product shapes, row-major per head-batch (see the contract for the column-major view):
//   rows_dot:  D (T,T)  = alpha·X·Yᵀ      X, Y (T,hs)            S = Q·Kᵀ, dP = dO·Vᵀ
//   mix:       D (T,hs) = P·Y             P (T,T), Y (T,hs)      O = P·V, dQ = dS·K
//   mix_t:     D (T,hs) = Pᵀ·Y            P (T,T), Y (T,hs)      dV = Pᵀ·dO, dK = dSᵀ·Q
template <typename F> static void attention_gemm_rows_dot(F* d, const F* x, const F* y, int BH, int T, int hs, float alpha) {
    LtBatch bt{BH, (int64_t)T * hs, (int64_t)T * hs, (int64_t)T * T};
    lt_matmul(d, y, x, (const F*)nullptr, T, T, hs, true, false, 0.0f, alpha, bt);
}
template <typename F> static void attention_gemm_mix(F* d, const F* p, const F* y, int BH, int T, int hs) {
    LtBatch bt{BH, (int64_t)T * hs, (int64_t)T * T, (int64_t)T * hs};
    lt_matmul(d, y, p, (const F*)nullptr, hs, T, T, false, false, 0.0f, 1.0f, bt);
}
template <typename F> static void attention_gemm_mix_t(F* d, const F* p, const F* y, int BH, int T, int hs) {
    LtBatch bt{BH, (int64_t)T * hs, (int64_t)T * T, (int64_t)T * hs};
    lt_matmul(d, y, p, (const F*)nullptr, hs, T, T, false, true, 0.0f, 1.0f, bt);
}

// Warps per block of the row kernels.
enum { ATTN_ROW_WARPS = 8 };

// The row kernels' group: 16 bytes of F when every row starts 16-byte aligned (T % V == 0 and the
// buffers aligned), else one element.
template <typename F> static inline bool attention_rows_vec(int T, const void* a, const void* b) {
    return T % (16 / sizeof(F)) == 0 && aligned16(a) && aligned16(b);
}
// The row kernels' launch: ATTN_ROW_WARPS rows a block.
static inline unsigned attention_row_blocks(size_t rows) { return (unsigned)ceil_div(rows, ATTN_ROW_WARPS); }

template <typename F>
void attention_forward(F* out, F* att,   // (B,T,C), (B,NH,T,T)
                       const F* inp,     // (B,T,3C)
                       int B, int T, int C, int NH, const AttentionOpts* o) {
    size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    int hs = C / NH, BH = B * NH;
    size_t BTC = (size_t)B * T * C;
    AttnScoreScale sc = attention_score_scale(o, hs);
    AttnCarveKey key;
    AttnScratch s = attention_scratch_carve(B, T, C, NH, sizeof(F), &key);
    F* q = (F*)s.qkv;
    F *k = q + BTC, *v = q + 2 * BTC;
    attention_heads_split(q, inp, 3, B, T, C, NH, 3 * C);
    float alpha = o->scaling == ATTN_SCALING_QK_INWARD ? sc.sq * sc.sq : sc.alpha;
    attention_gemm_rows_dot((F*)s.s, q, k, BH, T, hs, alpha);
    bool drop = o->dropout.p > 0;
    F* pd = drop ? (F*)s.p : nullptr;
    if (drop) attention_p_zeros(s, key);
    const int V = 16 / sizeof(F);
    unsigned blocks = attention_row_blocks(rows);
    if (attention_rows_vec<F>(T, att, s.s))
        KEEL_LAUNCH(attention_softmax_kernel<F KEEL_COMMA V>, blocks, 32 * ATTN_ROW_WARPS, 0, MAIN_STREAM)(att, pd, (const F*)s.s, B, T, NH, *o, sc);
    else
        KEEL_LAUNCH(attention_softmax_kernel<F KEEL_COMMA 1>, blocks, 32 * ATTN_ROW_WARPS, 0, MAIN_STREAM)(att, pd, (const F*)s.s, B, T, NH, *o, sc);
    CUDA_CHECK_LAUNCH();
    attention_gemm_mix((F*)s.o, drop ? pd : att, v, BH, T, hs);
    const F* parts[3] = {(const F*)s.o, nullptr, nullptr};
    attention_heads_merge(out, parts, 1, B, T, C, NH, C, false);
    AttnScratchState* st = attention_scratch_state();  // the backward may take these q, k, v
    st->split = key;
    st->split_inp = inp;
    st->split_att = att;
}

template <typename F>
void attention_backward(F* dinp,                   // (B,T,3C) accumulated into (written with dinp_write)
                        const F* dout,             // (B,T,C)
                        const F* inp, const F* att,  // (B,T,3C), (B,NH,T,T)
                        int B, int T, int C, int NH, const AttentionOpts* o, bool dinp_write = false) {
    size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    int hs = C / NH, BH = B * NH;
    size_t BTC = (size_t)B * T * C;
    AttnScoreScale sc = attention_score_scale(o, hs);
    AttnCarveKey key;
    AttnScratch s = attention_scratch_carve(B, T, C, NH, sizeof(F), &key);
    AttnScratchState* st = attention_scratch_state();
    F* q = (F*)s.qkv;
    F *k = q + BTC, *v = q + 2 * BTC, *dO = (F*)s.o, *dp = (F*)s.s, *p = (F*)s.p;
    if (!(st->split_inp == inp && st->split_att == att && st->split == key)) attention_heads_split(q, inp, 3, B, T, C, NH, 3 * C);
    st->split_inp = st->split_att = nullptr;  // k and v are overwritten below
    attention_heads_split(dO, dout, 1, B, T, C, NH, C);
    attention_p_zeros(s, key);
    attention_gemm_rows_dot(dp, dO, v, BH, T, hs, 1.0f);  // dP = dO·Vᵀ
    const int V = 16 / sizeof(F);
    bool vec = attention_rows_vec<F>(T, att, p);
    unsigned blocks = attention_row_blocks(rows);
    const F* pv = att;  // dV's probabilities: the dropped ones under dropout
    if (o->dropout.p > 0) {
        if (vec) KEEL_LAUNCH(attention_dropped_probs_kernel<F KEEL_COMMA V>, blocks, 32 * ATTN_ROW_WARPS, 0, MAIN_STREAM)(p, att, B, T, NH, *o, sc);
        else KEEL_LAUNCH(attention_dropped_probs_kernel<F KEEL_COMMA 1>, blocks, 32 * ATTN_ROW_WARPS, 0, MAIN_STREAM)(p, att, B, T, NH, *o, sc);
        CUDA_CHECK_LAUNCH();
        pv = p;
    }
    F *dq = dO, *dk = k, *dv = v;              // each slot once its contents are read:
    attention_gemm_mix_t(dv, pv, dO, BH, T, hs);  // dV = drop(att)ᵀ·dO  (v: read by dP)
    if (vec) KEEL_LAUNCH(attention_softmax_backward_kernel<F KEEL_COMMA V>, blocks, 32 * ATTN_ROW_WARPS, 0, MAIN_STREAM)(p, dp, att, B, T, NH, *o, sc);
    else KEEL_LAUNCH(attention_softmax_backward_kernel<F KEEL_COMMA 1>, blocks, 32 * ATTN_ROW_WARPS, 0, MAIN_STREAM)(p, dp, att, B, T, NH, *o, sc);
    CUDA_CHECK_LAUNCH();
    attention_gemm_mix(dq, p, k, BH, T, hs);    // dQ = dS·K            (dO: read by dP and dV)
    attention_gemm_mix_t(dk, p, q, BH, T, hs);  // dK = dSᵀ·Q           (k: read by dQ)
    const F* parts[3] = {dq, dk, dv};
    attention_heads_merge(dinp, parts, 3, B, T, C, NH, 3 * C, !dinp_write);
}

}  // namespace keel_cuda
