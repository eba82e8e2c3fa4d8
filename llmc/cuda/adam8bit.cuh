// cuda/adam8bit.cuh — bitsandbytes' blockwise 8-bit Adam and its fp32 twin; the contract of
// cpu/adam8bit.h:
//   adam8bit_update, per quantization block (c1 = 1-β1^t, c2 = sqrt(1-β2^t) passed in):
//       g = g·gnorm_scale;  m = map_m[code_m]·absmax_m;  v = map_v[code_v]·absmax_v
//       m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²;  absmax_m = max|m|, absmax_v = max|v| (block)
//       p = p - lr·(c2/c1)·m/(sqrt(v) + c2·eps);  p = p·(1 - lr·wd) when wd > 0
//       code_m = adam8bit_quantize_m(m, absmax_m), code_v = adam8bit_quantize_v(v, absmax_v)
//   adam32_update: the same step with fp32 moments m, v.
//   adam8bit_update_pieces, adam32_update_pieces: the same over every piece of an AdamPieces table
//       (cuda/adamw.cuh) in ONE launch each, with the piece's gnorm_scale (a host array, one factor
//       per piece) and h.wd where the piece decays, else 0; writing p_c = round_to_F(p) of each
//       updated element when p_c is given (the compute copy, as cast_from_f32 writes it).
//   adam8bit_split_maxima, adam8bit_split_apply: the step of units whose blocks this rank shares with
//       other ranks, in two halves around the caller's all-reduce of the blocks' maxima (the
//       contract of cpu/adam8bit.h); the table's pieces are segments (numel <= BS) sorted by block.
//       One CUDA block per segment computes its moments and their maxima (maxima: into a scratch
//       row per segment; a second kernel, one thread per quantization block, takes the max over the
//       block's segments, found by binary search in the sorted rows); apply computes the same
//       moments again and writes the parameter, the copy and the codes; absmax ← blk last.
// Legend: n elements of one parameter tensor; BS the quantization block size (≤ ADAM8BIT_MAX_BLOCK),
// blocks start at element 0 and the last may be partial; nblocks = ceil(n / BS). A piece's blocks
// start at the piece's first element (a unit's start, or a ZeRO-1 shard boundary, which is a block
// boundary of its unit).
//
// Layout. One CUDA block of ADAM8BIT_THREADS threads per quantization block; thread t owns the
// elements t, t + 256, ... of it (at most 8) and keeps their new moments in registers between the
// passes (dequantize + moments, block absmax, parameter, codes), as the CPU keeps them in its m[],
// v[] arrays. adam32_update is one thread per element. The pieces' versions find their piece from
// the CUDA block as cuda/adamw.cuh describes (one CUDA block per quantization block of every 8-bit
// piece; 4 elements a thread for adam32): one launch per kind of state instead of one per piece.
//
// Numerics: the CPU's float formulas, one rounding per operation (fmul_rn & co. of cuda/adamw.cuh:
// no FMA contraction), IEEE sqrt and division; the per-step constants step_size, c2·eps and
// 1 - lr·wd are computed on the host with the CPU op's expressions. The block absmax is a max,
// exact in any order, and like the CPU's row_max_abs it starts at 0 and never lets a NaN win.
// So params, codes and absmax are bit-identical to the CPU's, and results do not depend on timing.
//
// The maps (Adam8bitMaps, ~140 KB with the lookup tables) arrive as a host pointer: the launcher
// keeps one device copy and a host copy of its bytes, and uploads again only when the bytes differ
// (a memcmp per call, microseconds; padding bytes that differ only cost a redundant upload).
#pragma once
#include <cstring>

#include "llmc/cuda/adamw.cuh"
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

enum { ADAM8BIT_THREADS = 256, ADAM8BIT_PER_THREAD = ADAM8BIT_MAX_BLOCK / ADAM8BIT_THREADS };

// The per-step constants, computed once on the host exactly as the CPU op computes them.
struct AdamStepConsts {
    float step_size;  // -lr·c2/c1
    float eps;        // c2·eps
    float decay;      // 1 - lr·wd
};
static inline AdamStepConsts adam_step_consts(AdamHyper h) {
    return {-h.lr * h.c2 / h.c1, h.c2 * h.eps, 1.0f - h.lr * h.wd};
}

__device__ inline float max_abs_acc(float acc, float x) {
    float a = fabsf(x);
    return acc < a ? a : acc;  // a NaN never wins (as row_max_abs)
}

// m' = β1·m + (1-β1)·g and v' = β2·v + (1-β2)·g·g, rounded in the CPU's order.
__device__ inline float adam_moment1(float m, float g, float beta1) {
    return fadd_rn(fmul_rn(m, beta1), fmul_rn(1.0f - beta1, g));
}
__device__ inline float adam_moment2(float v, float g, float beta2) {
    return fadd_rn(fmul_rn(v, beta2), fmul_rn(fmul_rn(1.0f - beta2, g), g));
}
// p + step_size·m/(sqrt(v) + eps), then the decoupled decay.
__device__ inline float adam_param(float p, float m, float v, float wd, AdamStepConsts s) {
    float pj = fadd_rn(p, fmul_rn(s.step_size, fdiv_rn(m, fadd_rn(fsqrt_rn(v), s.eps))));
    return wd > 0.0f ? fmul_rn(pj, s.decay) : pj;
}

// Quantization block b of one tensor of n elements, by the calling CUDA block (all its threads).
// wd: h.wd or 0 (a tensor outside the decay group); p_c: the compute copy to write, or null.
template <typename F>
__device__ inline void adam8bit_block(float* p, F* p_c, const float* g, uint8_t* code_m, uint8_t* code_v, float* absmax_m,
                                      float* absmax_v, int64_t b, int64_t n, int block_size, const Adam8bitMaps* q,
                                      AdamHyper h, float wd, AdamStepConsts s, float gnorm_scale) {
    KEEL_SHARED(float, shared, [32]);
    int64_t lo = b * block_size;
    int len = n - lo < block_size ? (int)(n - lo) : block_size;
    float m[ADAM8BIT_PER_THREAD], v[ADAM8BIT_PER_THREAD];  // this thread's new moments, fp32
    float am = absmax_m[b], av = absmax_v[b];                // read by all before thread 0 writes
    float max_m = 0.0f, max_v = 0.0f;
KEEL_UNROLL
    for (int k = 0; k < ADAM8BIT_PER_THREAD; k++) {
        int j = threadIdx.x + k * ADAM8BIT_THREADS;
        if (j >= len) break;
        float gj = fmul_rn(fmul_rn(g[lo + j], h.clip), gnorm_scale);
        m[k] = adam_moment1(fmul_rn(q->map_m[code_m[lo + j]], am), gj, h.beta1);
        v[k] = adam_moment2(fmul_rn(q->map_v[code_v[lo + j]], av), gj, h.beta2);
        max_m = max_abs_acc(max_m, m[k]);
        max_v = max_abs_acc(max_v, v[k]);
    }
    float new_am = block_max(max_m, shared), new_av = block_max(max_v, shared);
KEEL_UNROLL
    for (int k = 0; k < ADAM8BIT_PER_THREAD; k++) {
        int j = threadIdx.x + k * ADAM8BIT_THREADS;
        if (j >= len) break;
        float pj = adam_param(p[lo + j], m[k], v[k], wd, s);
        p[lo + j] = pj;
        if (p_c) p_c[lo + j] = from_f32<F>(pj);
        code_m[lo + j] = adam8bit_quantize_m(q, m[k], new_am);
        code_v[lo + j] = adam8bit_quantize_v(q, v[k], new_av);
    }
    if (threadIdx.x == 0) {
        absmax_m[b] = new_am;
        absmax_v[b] = new_av;
    }
}

// Grid: (nblocks); block: (ADAM8BIT_THREADS). q: device copy of the maps.
__global__ void adam8bit_update_kernel(float* p, const float* g, uint8_t* code_m, uint8_t* code_v, float* absmax_m,
                                       float* absmax_v, int64_t n, int block_size, const Adam8bitMaps* q, AdamHyper h,
                                       AdamStepConsts s, float gnorm_scale) {
    adam8bit_block<float>(p, nullptr, g, code_m, code_v, absmax_m, absmax_v, blockIdx.x, n, block_size, q, h, h.wd, s,
                          gnorm_scale);
}

// Grid: (AdamPieces::grid: every quantization block of every piece); block: (ADAM8BIT_THREADS).
// gnorm_scale: (npieces) device.
template <typename F>
__global__ void adam8bit_update_pieces_kernel(float* p, F* p_c, const float* g, uint8_t* code_m, uint8_t* code_v,
                                              float* absmax_m, float* absmax_v, const AdamPieceRow* rows, int npieces,
                                              const float* gnorm_scale, int block_size, const Adam8bitMaps* q, AdamHyper h,
                                              AdamStepConsts s) {
    const AdamPieceRow* r = adam_piece_of_block(rows, npieces, blockIdx.x);
    int64_t e = r->offset_param, st = r->offset_state;
    adam8bit_block(p + e, p_c ? p_c + e : nullptr, g + e, code_m + st, code_v + st, absmax_m + r->offset_block,
                   absmax_v + r->offset_block, blockIdx.x - r->first_block, r->numel, block_size, q, h, r->decay ? h.wd : 0.0f,
                   s, gnorm_scale[r - rows]);
}

// Segment k = blockIdx.x of a split table (numel <= block size): this step's moments of its elements
// into m[], v[] (registers, as adam8bit_block), returned with their maxima.
__device__ inline int adam8bit_segment_moments(float* m, float* v, float* max_m, float* max_v, const AdamPieceRow* r,
                                               const float* g, const uint8_t* code_m, const uint8_t* code_v, const float* absmax_m,
                                               const float* absmax_v, const Adam8bitMaps* q, AdamHyper h, float gnorm_scale) {
    int len = (int)r->numel;
    float am = absmax_m[r->offset_block], av = absmax_v[r->offset_block];
    *max_m = *max_v = 0.0f;
KEEL_UNROLL
    for (int k = 0; k < ADAM8BIT_PER_THREAD; k++) {
        int j = threadIdx.x + k * ADAM8BIT_THREADS;
        if (j >= len) break;
        float gj = fmul_rn(fmul_rn(g[r->offset_param + j], h.clip), gnorm_scale);
        m[k] = adam_moment1(fmul_rn(q->map_m[code_m[r->offset_state + j]], am), gj, h.beta1);
        v[k] = adam_moment2(fmul_rn(q->map_v[code_v[r->offset_state + j]], av), gj, h.beta2);
        *max_m = max_abs_acc(*max_m, m[k]);
        *max_v = max_abs_acc(*max_v, v[k]);
    }
    return len;
}

// Grid: (npieces); block: (ADAM8BIT_THREADS). seg: (2 x npieces) device scratch.
__global__ void adam8bit_split_maxima_kernel(const float* g, const uint8_t* code_m, const uint8_t* code_v, const float* absmax_m,
                                             const float* absmax_v, float* seg, const AdamPieceRow* rows, const float* gnorm_scale,
                                             const Adam8bitMaps* q, AdamHyper h) {
    KEEL_SHARED(float, shared, [32]);
    float m[ADAM8BIT_PER_THREAD], v[ADAM8BIT_PER_THREAD], max_m, max_v;
    const AdamPieceRow* r = rows + blockIdx.x;
    adam8bit_segment_moments(m, v, &max_m, &max_v, r, g, code_m, code_v, absmax_m, absmax_v, q, h, gnorm_scale[blockIdx.x]);
    float bm = block_max(max_m, shared), bv = block_max(max_v, shared);
    if (threadIdx.x == 0) {
        seg[2 * blockIdx.x] = bm;
        seg[2 * blockIdx.x + 1] = bv;
    }
}

// Grid: (ceil(nblocks / 256)); block: (256): quantization block b's maximum over its segments (the
// rows are sorted by block: the first with offset_block >= b, by binary search, then on while equal).
__global__ void adam8bit_split_blockmax_kernel(float* blk_m, float* blk_v, int64_t nblocks, const float* seg, const AdamPieceRow* rows,
                                               int npieces) {
    int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= nblocks) return;
    int lo = 0, hi = npieces;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (rows[mid].offset_block < b) lo = mid + 1;
        else hi = mid;
    }
    float mm = 0.0f, mv = 0.0f;
    for (int k = lo; k < npieces && rows[k].offset_block == b; k++) {
        mm = seg[2 * k] > mm ? seg[2 * k] : mm;
        mv = seg[2 * k + 1] > mv ? seg[2 * k + 1] : mv;
    }
    blk_m[b] = mm;
    blk_v[b] = mv;
}

// Grid: (npieces); block: (ADAM8BIT_THREADS). Reads absmax (the old scales), writes no scale.
template <typename F>
__global__ void adam8bit_split_apply_kernel(float* p, F* p_c, const float* g, uint8_t* code_m, uint8_t* code_v, const float* absmax_m,
                                            const float* absmax_v, const float* blk_m, const float* blk_v, const AdamPieceRow* rows,
                                            const float* gnorm_scale, const Adam8bitMaps* q, AdamHyper h, AdamStepConsts s) {
    float m[ADAM8BIT_PER_THREAD], v[ADAM8BIT_PER_THREAD], max_m, max_v;
    const AdamPieceRow* r = rows + blockIdx.x;
    int len = adam8bit_segment_moments(m, v, &max_m, &max_v, r, g, code_m, code_v, absmax_m, absmax_v, q, h, gnorm_scale[blockIdx.x]);
    float new_am = blk_m[r->offset_block], new_av = blk_v[r->offset_block], wd = r->decay ? h.wd : 0.0f;
KEEL_UNROLL
    for (int k = 0; k < ADAM8BIT_PER_THREAD; k++) {
        int j = threadIdx.x + k * ADAM8BIT_THREADS;
        if (j >= len) break;
        int64_t e = r->offset_param + j, st = r->offset_state + j;
        float pj = adam_param(p[e], m[k], v[k], wd, s);
        p[e] = pj;
        if (p_c) p_c[e] = from_f32<F>(pj);
        code_m[st] = adam8bit_quantize_m(q, m[k], new_am);
        code_v[st] = adam8bit_quantize_v(q, v[k], new_av);
    }
}

// One element of adam32_update: updates *p, *m, *v (registers) from g.
__device__ inline void adam32_element(float* p, float* m, float* v, float g, AdamHyper h, float wd, AdamStepConsts s,
                                      float gnorm_scale) {
    float gi = fmul_rn(fmul_rn(g, h.clip), gnorm_scale);
    float mi = adam_moment1(*m, gi, h.beta1), vi = adam_moment2(*v, gi, h.beta2);
    *m = mi;
    *v = vi;
    *p = adam_param(*p, mi, vi, wd, s);
}

__global__ void adam32_update_kernel(float* p, const float* g, float* m, float* v, int64_t n, AdamHyper h,
                                     AdamStepConsts s, float gnorm_scale) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float pi = p[i], mi = m[i], vi = v[i];
    adam32_element(&pi, &mi, &vi, g[i], h, h.wd, s, gnorm_scale);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
}

// Grid: (AdamPieces::grid); block: (ADAM_THREADS). gnorm_scale: (npieces) device.
template <typename F>
__global__ void adam32_update_pieces_kernel(float* p, F* p_c, const float* g, float* m, float* v, const AdamPieceRow* rows,
                                            int npieces, const float* gnorm_scale, AdamHyper h, AdamStepConsts s) {
    const AdamPieceRow* r;
    int64_t i;
    int len;
    if (!adam_vec_of_thread(rows, npieces, &r, &i, &len)) return;
    int64_t e = r->offset_param + i, st = r->offset_state + i;
    float wd = r->decay ? h.wd : 0.0f, scale = gnorm_scale[r - rows];
    Pack<float, ADAM_VEC> pp = adam_vec_load(p + e, len), gg = adam_vec_load(g + e, len);
    Pack<float, ADAM_VEC> mm = adam_vec_load(m + st, len), vv = adam_vec_load(v + st, len);
    KEEL_UNROLL for (int j = 0; j < ADAM_VEC; j++)  // (a constant trip count: the packs stay in registers)
        if (j < len) adam32_element(&pp.v[j], &mm.v[j], &vv.v[j], gg.v[j], h, wd, s, scale);
    adam_vec_store(m + st, mm, len);
    adam_vec_store(v + st, vv, len);
    adam_vec_store(p + e, pp, len);
    if (p_c) adam_vec_store_copy(p_c + e, pp, len);
}

// The device copy of the maps, uploaded on first use and again whenever the host bytes change.
static inline const Adam8bitMaps* adam8bit_maps_device(const Adam8bitMaps* q) {
    static Adam8bitMaps* device = nullptr;
    static Adam8bitMaps* uploaded = nullptr;  // host copy of what `device` holds (heap: ~140 KB)
    if (!device) {
        CUDA_CHECK(cudaMalloc(&device, sizeof(Adam8bitMaps)));
        uploaded = new Adam8bitMaps;
    } else if (memcmp(uploaded, q, sizeof(Adam8bitMaps)) == 0) {
        return device;
    }
    memcpy(uploaded, q, sizeof(Adam8bitMaps));
    host_to_device(device, uploaded, sizeof(Adam8bitMaps));  // (the kept copy: a source that stays unchanged)
    return device;
}

// ---- launchers ----------------------------------------------------------------------------------
static inline void adam8bit_update(float* p, const float* g, uint8_t* code_m, uint8_t* code_v, float* absmax_m,
                                   float* absmax_v, int64_t n, int block_size, const Adam8bitMaps* q, AdamHyper h,
                                   float gnorm_scale) {
    if (block_size < 1 || block_size > ADAM8BIT_MAX_BLOCK)
        keel_die("adam8bit_update: block size %d outside [1, %d]", block_size, (int)ADAM8BIT_MAX_BLOCK);
    if (n <= 0) return;
    const Adam8bitMaps* d_q = adam8bit_maps_device(q);
    KEEL_LAUNCH(adam8bit_update_kernel, ceil_div(n, block_size), ADAM8BIT_THREADS, 0, MAIN_STREAM)(
        p, g, code_m, code_v, absmax_m, absmax_v, n, block_size, d_q, h, adam_step_consts(h), gnorm_scale);
    CUDA_CHECK_LAUNCH();
}

static inline void adam32_update(float* p, const float* g, float* m, float* v, int64_t n, AdamHyper h, float gnorm_scale) {
    if (n <= 0) return;
    KEEL_LAUNCH(adam32_update_kernel, ceil_div(n, 256), 256, 0, MAIN_STREAM)(p, g, m, v, n, h, adam_step_consts(h), gnorm_scale);
    CUDA_CHECK_LAUNCH();
}

// adam8bit_update over every piece of t (set up with the quantization block) in one launch.
// gnorm_scale: host (npieces), piece k's factor. p_c: the compute copy to write, or null.
template <typename F>
static inline void adam8bit_update_pieces(float* p, F* p_c, const float* g, uint8_t* code_m, uint8_t* code_v, float* absmax_m,
                                          float* absmax_v, AdamPieces* t, const Adam8bitMaps* q, AdamHyper h,
                                          const float* gnorm_scale) {
    if (t->block_size < 1 || t->block_size > ADAM8BIT_MAX_BLOCK)
        keel_die("adam8bit_update_pieces: the table's block size %d is outside [1, %d]", t->block_size, (int)ADAM8BIT_MAX_BLOCK);
    if (t->grid == 0) return;
    const Adam8bitMaps* d_q = adam8bit_maps_device(q);
    const float* d_scale = adam_pieces_scales(t, gnorm_scale);
    KEEL_LAUNCH(adam8bit_update_pieces_kernel<F>, t->grid, ADAM8BIT_THREADS, 0, MAIN_STREAM)(
        p, p_c, g, code_m, code_v, absmax_m, absmax_v, t->rows, t->npieces, d_scale, t->block_size, d_q, h, adam_step_consts(h));
    CUDA_CHECK_LAUNCH();
}

static inline void adam8bit_split_check(const AdamPieces* t, const char* op) {
    if (t->block_size < 1 || t->block_size > ADAM8BIT_MAX_BLOCK)
        keel_die("%s: the table's block size %d is outside [1, %d]", op, t->block_size, (int)ADAM8BIT_MAX_BLOCK);
    if (t->grid != (unsigned)t->npieces) keel_die("%s: a segment is longer than a block (%u CUDA blocks for %d segments)", op, t->grid, t->npieces);
}

// blk_m, blk_v: (nblocks) device; seg: (2 x npieces) device scratch. gnorm_scale: host (npieces).
static inline void adam8bit_split_maxima(const float* g, const uint8_t* code_m, const uint8_t* code_v, const float* absmax_m,
                                         const float* absmax_v, float* blk_m, float* blk_v, int64_t nblocks, float* seg,
                                         AdamPieces* t, const Adam8bitMaps* q, AdamHyper h, const float* gnorm_scale) {
    adam8bit_split_check(t, "adam8bit_split_maxima");
    if (nblocks == 0) return;
    if (t->npieces > 0) {
        const Adam8bitMaps* d_q = adam8bit_maps_device(q);
        const float* d_scale = adam_pieces_scales(t, gnorm_scale);
        KEEL_LAUNCH(adam8bit_split_maxima_kernel, t->grid, ADAM8BIT_THREADS, 0, MAIN_STREAM)(g, code_m, code_v, absmax_m,
                                                                                             absmax_v, seg, t->rows, d_scale, d_q, h);
        CUDA_CHECK_LAUNCH();
    }
    KEEL_LAUNCH(adam8bit_split_blockmax_kernel, ceil_div(nblocks, 256), 256, 0, MAIN_STREAM)(blk_m, blk_v, nblocks, seg, t->rows, t->npieces);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
static inline void adam8bit_split_apply(float* p, F* p_c, const float* g, uint8_t* code_m, uint8_t* code_v, float* absmax_m,
                                        float* absmax_v, const float* blk_m, const float* blk_v, int64_t nblocks, AdamPieces* t,
                                        const Adam8bitMaps* q, AdamHyper h, const float* gnorm_scale) {
    adam8bit_split_check(t, "adam8bit_split_apply");
    if (t->npieces > 0) {
        const Adam8bitMaps* d_q = adam8bit_maps_device(q);
        const float* d_scale = adam_pieces_scales(t, gnorm_scale);
        KEEL_LAUNCH(adam8bit_split_apply_kernel<F>, t->grid, ADAM8BIT_THREADS, 0, MAIN_STREAM)(
            p, p_c, g, code_m, code_v, absmax_m, absmax_v, blk_m, blk_v, t->rows, d_scale, d_q, h, adam_step_consts(h));
        CUDA_CHECK_LAUNCH();
    }
    if (nblocks == 0) return;
    device_to_device(absmax_m, blk_m, (size_t)nblocks * sizeof(float));  // after every segment has read the old scales
    device_to_device(absmax_v, blk_v, (size_t)nblocks * sizeof(float));
}

// adam32_update over every piece of t (an elementwise table) in one launch; as adam8bit_update_pieces.
template <typename F>
static inline void adam32_update_pieces(float* p, F* p_c, const float* g, float* m, float* v, AdamPieces* t, AdamHyper h,
                                        const float* gnorm_scale) {
    if (t->block_size != 0) keel_die("adam32_update_pieces: the table was set up for 8-bit Adam (block %d)", t->block_size);
    if (t->grid == 0) return;
    const float* d_scale = adam_pieces_scales(t, gnorm_scale);
    KEEL_LAUNCH(adam32_update_pieces_kernel<F>, t->grid, ADAM_THREADS, 0, MAIN_STREAM)(p, p_c, g, m, v, t->rows, t->npieces, d_scale,
                                                                                       h, adam_step_consts(h));
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
