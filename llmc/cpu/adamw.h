// cpu/adamw.h — the optimizer's elementwise kernels: AdamW update and gradient scale.
// Legend: n elements of one flat range; npieces rows of an update table.
//   adamw_update: g = g·clip (this step's clipping factor, 1 when not clipping: the gradient buffer
//                 itself is left as it is);
//                 m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²
//                 p -= lr·( (m/bc1) / (sqrt(v/bc2) + eps) + wd·p )      (APEX FusedAdam, adam_w_mode)
//                 bc1 = 1-β1^t, bc2 = 1-β2^t are passed in (computed once per step).
//   adamw_update_pieces: adamw_update on every piece of an update table (AdamPieces, below), with wd
//                 on the pieces in the decay group and 0 on the others; when p_c is given, also
//                 p_c = (F)p for every element it updated (the compute copy, as cast_from_f32).
//                 The optimizer (llmc/optimizer.h) calls it once per step for all its pieces: the
//                 CUDA twin runs every piece in one launch and writes the bf16/fp16 copy the forward
//                 reads in the same pass over the parameters (cuda/adamw.cuh says why). Here it is
//                 adamw_update piece by piece, exactly the calls a per-piece loop would make.
//   grad_scale:   g *= s (the pre-divide factor; clipping is folded into the update).
//   sumsq_f64, count_zeros: the gradient norm's per-chunk partials.
//   param_checksum: llmc/ops.h's order-free checksum of n fp32 values (8 bytes to compare across ranks).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "llmc/common.h"
#include "llmc/cpu/cast.h"
#include "llmc/ops.h"

static inline void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                                float beta2, float eps, float wd, float bc1, float bc2, float clip = 1.0f) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * clip;  // (clip = 1: g itself, exactly)
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * p[i]);
    }
}

// ---- the update table ------------------------------------------------------------------------------
// The pieces one update call visits (the optimizer's units, cut to the rank's ZeRO-1 shard), in the
// order given. Index spaces: offset_param is an element of the flat parameter buffer (p, g, p_c),
// offset_state of the state buffers the op is given (m, v or the 8-bit codes), offset_block of the
// absmax arrays (8-bit pieces).
struct AdamPieces {
    std::vector<int64_t> offset_param, offset_state, offset_block, numel;  // (npieces)
    std::vector<uint8_t> decay;         // (npieces) 1: weight decay applies (the table's decay group)
    int block_size = 0;                 // 8-bit Adam's quantization block; 0: the fp32-state kinds
};

// Records the table (host arrays of npieces) once, at set-up; the CUDA twin uploads it.
static inline void adam_pieces_init(AdamPieces* t, const int64_t* offset_param, const int64_t* offset_state,
                                    const int64_t* offset_block, const int64_t* numel, const uint8_t* decay, int npieces,
                                    int block_size) {
    t->offset_param.assign(offset_param, offset_param + npieces);
    t->offset_state.assign(offset_state, offset_state + npieces);
    t->offset_block.assign(offset_block, offset_block + npieces);
    t->numel.assign(numel, numel + npieces);
    t->decay.assign(decay, decay + npieces);
    t->block_size = block_size;
}

static inline void adam_pieces_free(AdamPieces* t) { *t = AdamPieces(); }

template <typename F>
static inline void adamw_update_pieces(float* p, F* p_c, const float* g, float* m, float* v, const AdamPieces* t, float lr,
                                       float beta1, float beta2, float eps, float wd, float bc1, float bc2, float clip = 1.0f) {
    if (t->block_size != 0) keel_die("adamw_update_pieces: the table was set up for 8-bit Adam (block %d)", t->block_size);
    for (size_t k = 0; k < t->numel.size(); k++) {
        int64_t e = t->offset_param[k], s = t->offset_state[k], n = t->numel[k];
        adamw_update(p + e, g + e, m + s, v + s, n, lr, beta1, beta2, eps, t->decay[k] ? wd : 0.0f, bc1, bc2, clip);
        if (p_c) cast_from_f32(p_c + e, p + e, (size_t)n);
    }
}

// Σ x² in double: lane k sums the elements i ≡ k (mod 8) in ascending i, then a fixed tree adds the
// lanes. The order is a function of n alone, and the lanes let it vectorize (one serial chain of
// double adds ran at a quarter of memory speed).
static inline double sumsq_f64(const float* x, int64_t n) {
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) lane[k] += (double)x[i + k] * (double)x[i + k];
    for (; i < n; i++) lane[i % 8] += (double)x[i] * (double)x[i];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

static inline int64_t count_zeros(const float* x, int64_t n) {
    int64_t z = 0;
    for (int64_t i = 0; i < n; i++) z += x[i] == 0.0f;
    return z;
}

// The gradient norm's partials of many chunks at once: out[2c] = Σ x² (sumsq_f64's order) and
// out[2c+1] = the exact zeros of chunk c = base[offsets[c], offsets[c] + numels[c]). out, offsets
// and numels are host arrays; one call per step (the CUDA twin is a single launch).
static inline void sumsq_zeros_chunks(double* out, const float* base, const int64_t* offsets, const int64_t* numels, size_t nchunks) {
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t c = 0; c < nchunks; c++) {
        out[2 * c] = sumsq_f64(base + offsets[c], numels[c]);
        out[2 * c + 1] = (double)count_zeros(base + offsets[c], numels[c]);
    }
}

// The checksum of n fp32 values (llmc/ops.h param_checksum_term): the same value as the CUDA op's.
// first: the position of x[0] in the tensor checksummed (the terms of a tensor's parts add up to the
// tensor's checksum).
static inline uint64_t param_checksum(const float* x, int64_t n, int64_t first = 0) {
    uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum)
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        sum += param_checksum_term(bits, (uint64_t)(first + i));
    }
    return sum;
}

static inline void grad_scale(float* g, int64_t n, float s) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) g[i] *= s;
}

// Rounds g[0, n) to binary16 in place. Element-wise, so any thread count gives the same bits.
static inline void grad_round_fp16(float* g, size_t n) {
#pragma omp parallel for
    for (int64_t i = 0; i < (int64_t)n; i++) g[i] = fp16_round(g[i]);
}

// Multiplies g[0, n) by (float)inv_scale in place (Megatron: inv_scale = (1/scale in double) as
// fp32) and returns whether any result is inf or NaN. The check runs on the unscaled value: a
// non-finite input stays non-finite, and with a scale below 1 (--min-loss-scale < 1) a finite
// gradient that overflows on unscaling is caught too. The flag is an OR reduction over ints:
// order-independent, so the verdict does not depend on the thread count.
static inline bool grad_unscale_check(float* g, size_t n, double inv_scale) {
    const float s = (float)inv_scale;
    int found = 0;
#pragma omp parallel for reduction(| : found)
    for (int64_t i = 0; i < (int64_t)n; i++) {
        g[i] *= s;
        found |= !std::isfinite(g[i]);
    }
    return found != 0;
}
