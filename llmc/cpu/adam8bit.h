// cpu/adam8bit.h — bitsandbytes' blockwise 8-bit Adam (KNOBS.md §9) and its fp32 twin.
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
//   percentile_clip_scale: bitsandbytes' percentile clipping. hist[100] holds ‖g‖² of the unit's
//     last 100 steps (slot t % 100; at t = 1 every slot); the gradient is scaled by
//     sqrt(sorted(hist)[p]) / ‖g‖ when that is below 1.
// Blocks are independent, so the result does not depend on the thread count.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "llmc/cpu/vmath.h"
#include "llmc/quantize.h"

struct Adam8bitMaps {
    float map_m[QMAP_SIZE], map_v[QMAP_SIZE];  // signed (m) and unsigned (v) dynamic maps
    QuantLUT lut_m, lut_v;
    uint8_t zero_m, zero_v;                    // the codes of 0
};

static inline void adam8bit_maps_init(Adam8bitMaps* q) {
    quant_map_dynamic(q->map_m, true);
    quant_map_dynamic(q->map_v, false);
    quant_lut_build(&q->lut_m, q->map_m);
    quant_lut_build(&q->lut_v, q->map_v);
    q->zero_m = (uint8_t)quant_nearest(&q->lut_m, 0.0f);
    q->zero_v = (uint8_t)quant_nearest(&q->lut_v, 0.0f);
}

// Stores m (of the block whose absmax is amax) as a code that keeps m's sign.
static inline uint8_t adam8bit_quantize_m(const Adam8bitMaps* q, float m, float amax) {
    if (amax == 0.0f) return q->zero_m;
    int c = quant_nearest(&q->lut_m, m / amax);
    if (std::signbit(q->map_m[c]) != std::signbit(m)) c += m > 0 ? 1 : -1;
    return (uint8_t)c;
}

static inline uint8_t adam8bit_quantize_v(const Adam8bitMaps* q, float v, float amax) {
    if (amax == 0.0f) return q->zero_v;
    return (uint8_t)quant_nearest(&q->lut_v, v / amax);
}

struct AdamHyper {
    float lr, beta1, beta2, eps, wd;  // wd: 0 for tensors outside the decay group
    float c1, c2;                     // 1 - β1^t and sqrt(1 - β2^t)
};

enum { ADAM8BIT_MAX_BLOCK = 2048 };

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
            float gj = g[lo + j] * gnorm_scale;
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
        float gi = g[i] * gnorm_scale;
        float mi = m[i] * h.beta1 + (1.0f - h.beta1) * gi;
        float vi = v[i] * h.beta2 + (1.0f - h.beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float pi = p[i] + step_size * (mi / (std::sqrt(vi) + eps));
        if (h.wd > 0.0f) pi *= decay;
        p[i] = pi;
    }
}

enum { PCLIP_HISTORY = 100 };

// Records this step's ‖g‖² (sumsq) in hist and returns the factor for g (1: not clipped).
// percentile p in [0, 100); p = 100 only records (the history stays warm for a later resume with
// clipping on).
static inline float percentile_clip_scale(float hist[PCLIP_HISTORY], int64_t step, double sumsq, int percentile) {
    float s = (float)sumsq;
    if (step == 1) std::fill(hist, hist + PCLIP_HISTORY, s);
    else hist[step % PCLIP_HISTORY] = s;
    if (percentile >= PCLIP_HISTORY) return 1.0f;
    float sorted[PCLIP_HISTORY];
    std::copy(hist, hist + PCLIP_HISTORY, sorted);
    std::sort(sorted, sorted + PCLIP_HISTORY);
    float current = std::sqrt(s), clip = std::sqrt(sorted[percentile]);
    return current > clip ? clip / current : 1.0f;
}
