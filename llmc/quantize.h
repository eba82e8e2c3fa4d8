// quantize.h — the 8-bit dynamic quantization maps of bitsandbytes' 8-bit optimizers (docs/knobs.md#8-bit-adam)
// and the round-to-nearest code search; shared host code (the maps are built once, then copied to
// wherever the optimizer kernels run).
//
// A map is 256 sorted fp32 values in [-1, 1] (signed, for Adam's m) or [0, 1] (unsigned, for v).
// A block of state values x_j is stored as one fp32 absmax = max_j |x_j| and one uint8 code per
// value: code_j = the index of the map value nearest to x_j / absmax; x_j is read back as
// map[code_j] · absmax.
//
// The dynamic map (bitsandbytes `create_dynamic_map`, 7 exponent decades): decade i = 0..6 covers
// [0.1, 1] · 10^(i-6) with the midpoints of a linear grid of k points, k = 2^i + 1 (signed) or
// 2^(i+1) + 1 (unsigned), i.e. 2^i resp. 2^(i+1) codes per decade — few codes for tiny magnitudes,
// many near 1, a floating-point-like layout. Signed maps add the negatives; both add 0 and 1:
//   signed   127 positive + 127 negative + {0, 1} = 256;  index 127 is 0, index 255 is 1
//   unsigned 254 positive + {0, 1} = 256;                  index 0 is 0,   index 255 is 1
// bitsandbytes builds the grid with torch.linspace in fp32; here it is computed in double and
// rounded once, so a value may differ from the reference's in the last bit (the maps are data of
// the checkpoint's meaning, not of its bytes: checkpoints store codes, and both sides use these).
//
// Round to nearest: ties go to the value of smaller magnitude. The fast search (QuantLUT) and the
// obvious one (quant_nearest_reference) are tested to agree on every input class.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "llmc/hd.h"

enum { QMAP_SIZE = 256 };

static inline void quant_map_dynamic(float out[QMAP_SIZE], bool is_signed) {
    std::vector<double> data;
    for (int i = 0; i < 7; i++) {
        int k = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;  // grid points in [0.1, 1]
        double decade = std::pow(10.0, i - 6);
        for (int j = 0; j + 1 < k; j++) {
            double lo = 0.1 + 0.9 * j / (k - 1), hi = 0.1 + 0.9 * (j + 1) / (k - 1);
            double mean = (lo + hi) / 2;
            data.push_back(decade * mean);
            if (is_signed) data.push_back(-decade * mean);
        }
    }
    data.push_back(0.0);
    data.push_back(1.0);
    std::sort(data.begin(), data.end());
    for (int i = 0; i < QMAP_SIZE; i++) out[i] = (float)data[i];
}

// The obvious search, for tests: argmin |map[i] - x|, ties to the smaller |map[i]|.
static inline int quant_nearest_reference(const float* map, float x) {
    int best = 0;
    for (int i = 1; i < QMAP_SIZE; i++) {
        float d = std::fabs(map[i] - x), db = std::fabs(map[best] - x);
        if (d < db || (d == db && std::fabs(map[i]) < std::fabs(map[best]))) best = i;
    }
    return best;
}

// Fast search. Each sign of x has its half of the map (the codes >= 0, or <= 0, ordered by
// magnitude). For a ≥ 0 the bits of an fp32 are monotone in a, so the top 17 bits of a = |x|
// (sign, exponent, 8 mantissa bits) name a bucket, and the table holds, per bucket, the last code
// of the half at or below the bucket's smallest value; a short forward scan (at most one step for
// these maps) finds the last code <= a, and the nearer of it and the next one wins.
enum { QLUT_SHIFT = 15, QLUT_KEYS = (0x3F800000 >> QLUT_SHIFT) + 1 };  // keys of a in [0, 1]

struct QuantHalf {
    int len;
    float mag[QMAP_SIZE];        // ascending magnitudes
    uint8_t code[QMAP_SIZE];     // their indices in the map
    uint8_t floor[QLUT_KEYS];    // per bucket: the last position with mag <= the bucket's smallest value
};

struct QuantLUT {
    QuantHalf pos, neg;  // codes >= 0 (for x >= 0) and codes <= 0 (for x < 0)
};

static inline void quant_half_build(QuantHalf* h, const float* map, bool negative) {
    h->len = 0;
    for (int i = 0; i < QMAP_SIZE; i++) {
        int idx = negative ? QMAP_SIZE - 1 - i : i;  // walk the negative half from 0 downwards
        if (negative ? map[idx] <= 0 : map[idx] >= 0) {
            h->mag[h->len] = std::fabs(map[idx]);
            h->code[h->len++] = (uint8_t)idx;
        }
    }
    for (int k = 0, j = 0; k < QLUT_KEYS; k++) {
        uint32_t bits = (uint32_t)k << QLUT_SHIFT;
        float lo;
        memcpy(&lo, &bits, 4);
        while (j + 1 < h->len && h->mag[j + 1] <= lo) j++;
        h->floor[k] = (uint8_t)j;
    }
}

// Needs map[] to contain 0 (both dynamic maps do): every half starts at magnitude 0.
static inline void quant_lut_build(QuantLUT* q, const float* map) {
    quant_half_build(&q->pos, map, false);
    quant_half_build(&q->neg, map, true);
}

// The code nearest to x, for x in [-1, 1] (values outside are clamped; NaN reads as 1).
KEEL_HD static inline int quant_nearest(const QuantLUT* q, float x) {
    const QuantHalf* h = x < 0 ? &q->neg : &q->pos;
    float a = std::fabs(x);
    if (!(a <= 1.0f)) a = 1.0f;
    uint32_t bits;
    memcpy(&bits, &a, 4);
    int j = h->floor[bits >> QLUT_SHIFT];
    while (j + 1 < h->len && h->mag[j + 1] <= a) j++;
    if (j + 1 < h->len && h->mag[j + 1] - a < a - h->mag[j]) j++;  // strictly nearer; ties keep the smaller
    return h->code[j];
}
