// cpu/adam8bit.h — bitsandbytes' blockwise 8-bit Adam (docs/knobs.md#8-bit-adam) and its fp32 twin.
// Legend: n elements of one parameter tensor ("unit": a global tensor or one layer's slice);
// BS the quantization block size (256 or 2048); blocks start at the unit's first element.
//
//   adam8bit_update: per block, with t the step, c1 = 1-β1^t, c2 = sqrt(1-β2^t) (passed in):
//       g = g · gnorm_scale                                  (percentile clipping, 1 when off)
//       m = map_s[code_m]·absmax_m;  v = map_u[code_v]·absmax_v           dequantize
//       m = β1·m + (1-β1)·g;         v = β2·v + (1-β2)·g²                 Adam moments in fp32
//       absmax_m = max |m|;          absmax_v = max v                     over the block
//       p = p - lr·(c2/c1) · m / (sqrt(v) + c2·eps)      == p - lr·m̂/(sqrt(v̂)+eps)
//       p = p · (1 - lr·wd)                              decoupled decay AFTER the step (bitsandbytes)
//       code_m = nearest(m/absmax_m), then if the code's sign bit differs from m's, one code
//                further in m's direction (m never changes sign in storage);
//       code_v = nearest(v/absmax_v)
//     The parameter update uses the fp32 moments of this step; only what is stored is rounded.
//     An all-zero block (absmax 0, e.g. the vocabulary padding rows) stores code(0).
//   adam32_update: the same step with fp32 moments (bitsandbytes' 32-bit kernel), for the units
//     that keep 32-bit state under --optimizer adam8bit.
//   adam8bit_update_pieces, adam32_update_pieces: the same on every piece of an update table
//     (AdamPieces, cpu/adamw.h; 8-bit tables hold the quantization block), piece k with its factor
//     gnorm_scale[k] and h.wd when it decays, else 0; with p_c, also p_c = (F)p of every element
//     updated. One call per step and kind of state (llmc/optimizer.h); the CUDA twins are one launch
//     each and write the compute copy in the same pass (cuda/adamw.cuh says why).
//   adam8bit_split_maxima, adam8bit_split_apply: adam8bit_update_pieces for units whose quantization
//     blocks this rank shares with other ranks (tensor parallelism: the blocks are the whole unit's,
//     llmc/optimizer.h), in two halves around the caller's all-reduce of the blocks' maxima. The
//     table's pieces are "segments", each inside one block (numel <= BS), sorted by block;
//     offset_block is the block's index into absmax_m/_v (the stored scales) and blk_m/_v:
//       maxima: blk_m[b], blk_v[b] = max |m|, max v over the block's elements held here (0 where
//               none), m, v this step's moments as adam8bit_update computes them (nothing else written)
//       (caller: blk_m, blk_v = their maximum over the ranks that share the blocks)
//       apply:  every element's step as adam8bit_update takes it (the moments computed again, the
//               same bits), quantized against blk_m/_v; then absmax_m/_v = blk_m/_v
//     A block's maximum is a max, exact in any order, so the state and the parameters are
//     bit-identical to adam8bit_update_pieces over the whole unit from the same gradient.
//   percentile_clip_scale: bitsandbytes' percentile clipping. hist[100] holds ‖g‖² of the unit's
//     last 100 steps (slot t % 100; at t = 1 every slot); the gradient is scaled by
//     sqrt(sorted(hist)[p]) / ‖g‖ when that is below 1.
// Blocks are independent, so the result does not depend on the thread count.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "llmc/cpu/adamw.h"
#include "llmc/cpu/cast.h"
#include "llmc/cpu/vmath.h"
#include "llmc/ops.h"


static inline void adam8bit_update(float* p, const float* g, uint8_t* code_m, uint8_t* code_v, float* absmax_m,
                                   float* absmax_v, int64_t n, int block_size, const Adam8bitMaps* q, AdamHyper h,
                                   float gnorm_scale) {
    int64_t nblocks = (n + block_size - 1) / block_size;
    float step_size = -h.lr * h.c2 / h.c1, eps = h.c2 * h.eps, decay = 1.0f - h.lr * h.wd;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nblocks; b++) {
        int64_t lo = b * block_size, len = std::min<int64_t>(block_size, n - lo);
        float m[ADAM8BIT_MAX_BLOCK], v[ADAM8BIT_MAX_BLOCK];  // this step's moments in fp32
        float am = absmax_m[b], av = absmax_v[b];
        // Four passes, each a loop the compiler vectorizes except the last: dequantize and step
        // the moments, their block maxima, the parameter, then the codes.
        for (int64_t j = 0; j < len; j++) {
            float gj = g[lo + j] * h.clip * gnorm_scale;
            m[j] = q->map_m[code_m[lo + j]] * am * h.beta1 + (1.0f - h.beta1) * gj;
            v[j] = q->map_v[code_v[lo + j]] * av * h.beta2 + (1.0f - h.beta2) * gj * gj;
        }
        float new_am = row_max_abs(m, (int)len), new_av = row_max_abs(v, (int)len);
        for (int64_t j = 0; j < len; j++) {
            float pj = p[lo + j] + step_size * (m[j] / (std::sqrt(v[j]) + eps));
            p[lo + j] = h.wd > 0.0f ? pj * decay : pj;
        }
        for (int64_t j = 0; j < len; j++) {
            code_m[lo + j] = adam8bit_quantize_m(q, m[j], new_am);
            code_v[lo + j] = adam8bit_quantize_v(q, v[j], new_av);
        }
        absmax_m[b] = new_am;
        absmax_v[b] = new_av;
    }
}

static inline void adam32_update(float* p, const float* g, float* m, float* v, int64_t n, AdamHyper h, float gnorm_scale) {
    float step_size = -h.lr * h.c2 / h.c1, eps = h.c2 * h.eps, decay = 1.0f - h.lr * h.wd;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * h.clip * gnorm_scale;
        float mi = m[i] * h.beta1 + (1.0f - h.beta1) * gi;
        float vi = v[i] * h.beta2 + (1.0f - h.beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float pi = p[i] + step_size * (mi / (std::sqrt(vi) + eps));
        if (h.wd > 0.0f) pi *= decay;
        p[i] = pi;
    }
}

template <typename F>
static inline void adam8bit_update_pieces(float* p, F* p_c, const float* g, uint8_t* code_m, uint8_t* code_v, float* absmax_m,
                                          float* absmax_v, AdamPieces* t, const Adam8bitMaps* q, AdamHyper h,
                                          const float* gnorm_scale) {
    if (t->block_size < 1 || t->block_size > ADAM8BIT_MAX_BLOCK)
        keel_die("adam8bit_update_pieces: the table's block size %d is outside [1, %d]", t->block_size, (int)ADAM8BIT_MAX_BLOCK);
    for (size_t k = 0; k < t->numel.size(); k++) {
        int64_t e = t->offset_param[k], s = t->offset_state[k], b = t->offset_block[k], n = t->numel[k];
        AdamHyper hk = h;
        hk.wd = t->decay[k] ? h.wd : 0.0f;
        adam8bit_update(p + e, g + e, code_m + s, code_v + s, absmax_m + b, absmax_v + b, n, t->block_size, q, hk, gnorm_scale[k]);
        if (p_c) cast_from_f32(p_c + e, p + e, (size_t)n);
    }
}

// Segment k of a split table: its elements' moments (adam8bit_update's first pass) into m[], v[];
// returns its length.
static inline int64_t adam8bit_segment_moments(float* m, float* v, const AdamPieces* t, int64_t k, const float* g, const uint8_t* code_m,
                                               const uint8_t* code_v, const float* absmax_m, const float* absmax_v,
                                               const Adam8bitMaps* q, AdamHyper h, const float* gnorm_scale) {
    int64_t e = t->offset_param[k], s = t->offset_state[k], b = t->offset_block[k], n = t->numel[k];
    float am = absmax_m[b], av = absmax_v[b];
    for (int64_t j = 0; j < n; j++) {
        float gj = g[e + j] * h.clip * gnorm_scale[k];
        m[j] = q->map_m[code_m[s + j]] * am * h.beta1 + (1.0f - h.beta1) * gj;
        v[j] = q->map_v[code_v[s + j]] * av * h.beta2 + (1.0f - h.beta2) * gj * gj;
    }
    return n;
}

static inline void adam8bit_split_check(const AdamPieces* t, const char* op) {
    if (t->block_size < 1 || t->block_size > ADAM8BIT_MAX_BLOCK)
        keel_die("%s: the table's block size %d is outside [1, %d]", op, t->block_size, (int)ADAM8BIT_MAX_BLOCK);
    for (size_t k = 0; k < t->numel.size(); k++)
        if (t->numel[k] > t->block_size || (k > 0 && t->offset_block[k] < t->offset_block[k - 1]))
            keel_die("%s: segment %zu is longer than a block or out of block order", op, k);
}

// blk_m, blk_v: (nblocks) this rank's maxima per block; seg: (2 x npieces) scratch.
static inline void adam8bit_split_maxima(const float* g, const uint8_t* code_m, const uint8_t* code_v, const float* absmax_m,
                                         const float* absmax_v, float* blk_m, float* blk_v, int64_t nblocks, float* seg,
                                         const AdamPieces* t, const Adam8bitMaps* q, AdamHyper h, const float* gnorm_scale) {
    adam8bit_split_check(t, "adam8bit_split_maxima");
    int64_t np = (int64_t)t->numel.size();
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < np; k++) {
        float m[ADAM8BIT_MAX_BLOCK], v[ADAM8BIT_MAX_BLOCK];
        int64_t n = adam8bit_segment_moments(m, v, t, k, g, code_m, code_v, absmax_m, absmax_v, q, h, gnorm_scale);
        seg[2 * k] = row_max_abs(m, (int)n);
        seg[2 * k + 1] = row_max_abs(v, (int)n);
    }
    for (int64_t b = 0; b < nblocks; b++) blk_m[b] = blk_v[b] = 0.0f;
    for (int64_t k = 0; k < np; k++) {  // a max: exact in any order
        int64_t b = t->offset_block[k];
        blk_m[b] = std::max(blk_m[b], seg[2 * k]);
        blk_v[b] = std::max(blk_v[b], seg[2 * k + 1]);
    }
}

template <typename F>
static inline void adam8bit_split_apply(float* p, F* p_c, const float* g, uint8_t* code_m, uint8_t* code_v, float* absmax_m,
                                        float* absmax_v, const float* blk_m, const float* blk_v, int64_t nblocks, const AdamPieces* t,
                                        const Adam8bitMaps* q, AdamHyper h, const float* gnorm_scale) {
    adam8bit_split_check(t, "adam8bit_split_apply");
    int64_t np = (int64_t)t->numel.size();
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < np; k++) {
        float m[ADAM8BIT_MAX_BLOCK], v[ADAM8BIT_MAX_BLOCK];
        int64_t n = adam8bit_segment_moments(m, v, t, k, g, code_m, code_v, absmax_m, absmax_v, q, h, gnorm_scale);
        int64_t e = t->offset_param[k], s = t->offset_state[k], b = t->offset_block[k];
        float wd = t->decay[k] ? h.wd : 0.0f;
        float step_size = -h.lr * h.c2 / h.c1, eps = h.c2 * h.eps, decay = 1.0f - h.lr * wd;
        for (int64_t j = 0; j < n; j++) {
            float pj = p[e + j] + step_size * (m[j] / (std::sqrt(v[j]) + eps));
            p[e + j] = wd > 0.0f ? pj * decay : pj;
        }
        for (int64_t j = 0; j < n; j++) {
            code_m[s + j] = adam8bit_quantize_m(q, m[j], blk_m[b]);
            code_v[s + j] = adam8bit_quantize_v(q, v[j], blk_v[b]);
        }
        if (p_c) cast_from_f32(p_c + e, p + e, (size_t)n);
    }
    for (int64_t b = 0; b < nblocks; b++) {  // after every segment has read the old scales
        absmax_m[b] = blk_m[b];
        absmax_v[b] = blk_v[b];
    }
}

template <typename F>
static inline void adam32_update_pieces(float* p, F* p_c, const float* g, float* m, float* v, AdamPieces* t, AdamHyper h,
                                        const float* gnorm_scale) {
    if (t->block_size != 0) keel_die("adam32_update_pieces: the table was set up for 8-bit Adam (block %d)", t->block_size);
    for (size_t k = 0; k < t->numel.size(); k++) {
        int64_t e = t->offset_param[k], s = t->offset_state[k], n = t->numel[k];
        AdamHyper hk = h;
        hk.wd = t->decay[k] ? h.wd : 0.0f;
        adam32_update(p + e, g + e, m + s, v + s, n, hk, gnorm_scale[k]);
        if (p_c) cast_from_f32(p_c + e, p + e, (size_t)n);
    }
}
