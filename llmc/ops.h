// ops.h — what the two op sets (llmc/cpu/*.h and llmc/cuda/*.cuh) share: the structs the
// orchestration hands to ops, the constants of their numerics, and the per-element formulas that a
// CPU loop and a CUDA kernel both call (KEEL_HD), so each is defined once and both backends
// compute it the same way. No op lives here: backend.h includes exactly one op set.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "llmc/quantize.h"
#include "llmc/rand.h"

// ---- precision (docs/internals.md#precision) ------------------------------------------------------------------------
// The model computes in its storage type F (activations and the weights the ops read): float on
// the CPU and under --fp32, bf16/fp16 on the GPU under --bf16/--fp16, double in the gradient checks.
// Everything that accumulates is of acc_t<F>: the master weights the optimizer updates, the
// gradients, LayerNorm statistics and the per-position losses — fp32, or double for a double model.
template <typename F> struct AccumType { typedef float type; };
template <> struct AccumType<double> { typedef double type; };
template <typename F> using acc_t = typename AccumType<F>::type;

static const double LAYERNORM_EPS = 1e-5;
static const double GELU_K = 0.7978845608028654;  // sqrt(2/pi)

// ---- dropout (cpu/dropout.h, cuda/dropout.cuh) ----------------------------------------------------
enum DropoutSiteKind { DROPOUT_SITE_EMBED = 1, DROPOUT_SITE_ATTN_PROBS = 2, DROPOUT_SITE_ATTN_OUT = 3, DROPOUT_SITE_MLP_OUT = 4 };

struct DropoutSite {
    double p;              // probability of dropping; 0: the op is the identity
    uint64_t seed;         // the run's RNG key
    uint64_t site;         // layer·16 + DropoutSiteKind
    int64_t first_sample;  // the run's sample number of micro-batch row 0
};

KEEL_HD static inline uint64_t dropout_site(int layer, int kind) { return (uint64_t)(layer + 1) * 16 + (uint64_t)kind; }

KEEL_HD static inline bool dropout_keep(const DropoutSite* d, int64_t b, uint64_t r) {
    return rng_uniform(d->seed, RNG_DROPOUT, d->site, (uint64_t)(d->first_sample + b), r) >= d->p;
}
// The same decision without floating point, for the GPU's kernels (no double-precision instruction
// in a loop: a GPU without full-rate FP64 runs them at 1/64): element r of row b is kept iff its 53
// random bits, read as an integer, are ≥ dropout_keep_from(p). That holds for exactly the elements
// dropout_keep keeps, because rng_unit is monotone in the bits (an exact conversion, an add of 0.5
// rounded to nearest, an exact scaling by 2^-53): the bits that pass are those from the smallest that
// passes on, which the host finds by bisection with the very expression dropout_keep evaluates.
// 2^53: no bits pass (p > 1; the largest draw rounds to exactly 1, so p = 1 still keeps it).
// test_model_knobs checks the boundary of each of a list of p, and the two decisions on random bits.
static inline uint64_t dropout_keep_from(double p) {
    uint64_t lo = 0, hi = 1ull << 53;  // the answer lies in [lo, hi]
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (rng_unit(mid << 11) >= p) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}
// Row b's key (rng_key of the site and sample, once a row) and one element's decision from it.
KEEL_HD static inline uint64_t dropout_row_key(const DropoutSite* d, int64_t b) {
    return rng_key(d->seed, RNG_DROPOUT, d->site, (uint64_t)(d->first_sample + b));
}
// (bits: rng_u64's 64; dropout_keep reads their top 53, as rng_unit does)
KEEL_HD static inline bool dropout_bits_kept(uint64_t bits, uint64_t keep_from) { return bits >> 11 >= keep_from; }
KEEL_HD static inline bool dropout_keep_keyed(uint64_t row_key, uint64_t r, uint64_t keep_from) { return dropout_bits_kept(rng_mix64(row_key ^ r), keep_from); }

// ---- word-embedding gradient (cpu/encoder.h, cuda/encoder.cuh) ----------------------------------------
// dwte[id] += dout[bt] over every position bt holding token id: positions that share a token add into
// the same row, so a parallel op must give each row one owner that adds its positions in a fixed
// order. The token groups say who: built on the host from the ids the host already has (no device
// sort, no read-back), uploaded with them, (2·n + 2) ints:
//   [0]                 G, the number of distinct ids ≥ 0 (negative ids — another tensor-parallel
//                       rank's rows — belong to no group)
//   [1, G+2)            start of group g in the position list (G + 1 offsets)
//   [G+2, G+2+P)        the positions, grouped by id in ascending id, ascending within a group
// Counting sort over the ids (a stable pass), O(n + G) with `count` (of at least max id + 1 zeros,
// left zeroed for the next call).
static inline int encoder_token_groups(int* groups, const int* ids, int n, std::vector<int>* count) {
    std::vector<int>& cnt = *count;
    std::vector<int> distinct;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0) continue;
        if (cnt[ids[i]]++ == 0) distinct.push_back(ids[i]);
    }
    std::sort(distinct.begin(), distinct.end());
    int G = (int)distinct.size();
    int* start = groups + 1;
    int* pos = groups + G + 2;
    int off = 0;
    for (int g = 0; g < G; g++) {
        start[g] = off;
        off += cnt[distinct[g]];
        cnt[distinct[g]] = start[g];  // now: the next free slot of the group
    }
    start[G] = off;
    groups[0] = G;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0) pos[cnt[ids[i]]++] = i;
    for (int g = 0; g < G; g++) cnt[distinct[g]] = 0;
    return G + 2 + off;  // ints used
}

// ---- the CUDA op set's kept device scratch, in bytes -----------------------------------------------------
// Each CUDA op with scratch reserves it once at set-up for the largest micro-batch (*_reserve, called
// by gpt_build); the formulas live here so that --dry-run (llmc/planner.h, in either trainer) counts
// exactly what the GPU trainer allocates. The CPU op set keeps no scratch.
// attention (cuda/attention.cuh): head-major q,k,v and O/dO (4·BTC; the backward's dQ, dK, dV reuse
// the slots of dO, k and v), the T×T scores/dP and the T×T block P (dropped probabilities, then dS),
// all of the storage type, each 256-byte aligned.
static inline size_t attention_scratch_bytes(size_t B, size_t T, size_t C, size_t NH, size_t fsize) {
    size_t BTC = B * T * C, BHTT = B * NH * T * T;  // size_t: B·NH·T·T overflows int at GPT-2 sizes
    return 4 * BTC * fsize + 2 * BHTT * fsize + 4 * 256;
}
// the bias gradient's column partials (cuda/matmul.cuh): one fp32 row per chunk of DBIAS_ROWS rows
enum { DBIAS_ROWS = 256 };
static inline size_t matmul_scratch_bytes(size_t N, size_t OC) { return (N + DBIAS_ROWS - 1) / DBIAS_ROWS * OC * sizeof(float); }
// cuBLASLt's workspace (cuda/matmul.cuh): what Hopper's kernels ask for at most
static const size_t LT_WORKSPACE_BYTES = (size_t)32 << 20;
// the LayerNorm backward (cuda/layernorm.cuh): at most LN_BWD_MAX_BLOCKS blocks of LN_BWD_WARPS warps,
// each with an fp32 (2, C) slot of column partials, and the blocks' finish counter
enum { LN_BWD_WARPS = 16, LN_BWD_MAX_BLOCKS = 128 };
static inline int layernorm_backward_max_blocks(int N_max) {
    int b = (N_max + LN_BWD_WARPS - 1) / LN_BWD_WARPS;
    return b < LN_BWD_MAX_BLOCKS ? b : LN_BWD_MAX_BLOCKS;
}
static inline size_t layernorm_scratch_bytes(int N_max, int C_max) {
    return N_max > 0 && C_max > 0 ? (size_t)layernorm_backward_max_blocks(N_max) * 2 * C_max * sizeof(float) + sizeof(unsigned) : 0;
}

// flash attention (cuda/flash_attention.cuh): the configurations its kernels cover — head size 64
// or 128 in bf16/fp16 (mma.sync) — and its backward's scratch: D (B,NH,T) fp32, the dQ partial sums
// dq_acc (B,NH,T,hs) fp32 = B·T·C floats, and the dQ chain's counters (B,NH,⌈T/32⌉) int, each
// rounded up to 256 bytes. The model keeps lse (B,NH,T) fp32 per layer instead of the (B,NH,T,T)
// probabilities.
static inline bool flash_attention_gpu_supported(int hs, size_t fsize) { return (hs == 64 || hs == 128) && fsize == 2; }
static inline size_t flash_scratch_round(size_t bytes) { return (bytes + 255) / 256 * 256; }
static inline size_t flash_attention_gpu_scratch_bytes(size_t B, size_t T, size_t C, size_t NH) {
    return flash_scratch_round(B * NH * T * sizeof(float)) + flash_scratch_round(B * T * C * sizeof(float)) +
           flash_scratch_round(B * NH * ((T + 31) / 32) * sizeof(int));
}

// ---- attention (cpu/attention.h, cuda/attention.cuh) -------------------------------------------------
enum AttnScaling { ATTN_SCALING_STANDARD, ATTN_SCALING_QK_INWARD };

struct AttentionOpts {
    int scaling = ATTN_SCALING_STANDARD;  // AttnScaling
    double coeff = 1.0;                   // layer-scaling coefficient (1: off)
    const float* alibi = nullptr;         // (NH) ALiBi slopes, or null
    DropoutSite dropout = {};             // on the probabilities; p = 0: off
    int head_offset = 0;                  // the model's number of local head 0 (tensor parallelism:
                                          // a rank's heads are a slice; masks are keyed by the model's head)
    bool round_bf16 = false;              // CPU --bf16: the materialized path rounds, inside the op, what the
                                          // GPU's stores in bf16 (the probabilities, dropped probabilities, dS)
};

KEEL_HD static inline uint64_t attention_dropout_index(int h, int t, int u) {
    return ((uint64_t)h << 42) | ((uint64_t)t << 21) | (uint64_t)u;
}

// ---- optimizer (cpu/adamw.h, cpu/adam8bit.h and their CUDA twins) -----------------------------------
// The grain of the gradient norm's fixed summation order (llmc/optimizer.h: grad_norm_sumsq sums
// each chunk in double, then the chunks in order), and of data-parallel shard boundaries.
enum { GRAD_CHUNK = 1 << 14 };

// binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Max finite 65504 = (2 - 2^-10)·2^15;
// min normal 2^-14; min subnormal 2^-24. fp16_round(x) = float(half(x)) with round-to-nearest-even,
// bit for bit what a hardware conversion (F16C vcvtps2ph, CUDA __float2half_rn) gives:
//   NaN stays NaN, ±inf stays, |x| ≥ 65520 → ±inf (65520 is the midpoint between 65504 and 2^16,
//   and ties go to the even mantissa, 2^16's, which overflows), sign of zero kept.
// Integer arithmetic on the float's bits (no _Float16: nvcc's host front end compiles this header).
KEEL_HD static inline float fp16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t sign = u & 0x80000000u, a = u ^ sign;  // a: the bits of |x|, ordered like |x|
    if (a >= 0x7F800000u) return x;                  // inf, NaN
    uint32_t r;
    if (a >= 0x477FF000u) {                          // |x| ≥ 65520
        r = 0x7F800000u;
    } else if (a >= 0x38800000u) {                   // |x| ≥ 2^-14: normal in binary16
        // Drop the low 13 of the 23 mantissa bits, round to nearest even: adding 0xFFF plus the
        // kept LSB carries exactly when the dropped part is above half, or half with an odd LSB.
        // A carry out of the mantissa bumps the exponent, which is the correct rounding too.
        r = (a + 0xFFFu + ((a >> 13) & 1u)) & ~0x1FFFu;
    } else if (a >= 0x33000000u) {                   // 2^-25 ≤ |x| < 2^-14: binary16 subnormal
        // |x| = m·2^(e-150) with m the 24-bit significand; in units of 2^-24 that is
        // m·2^(e-126) = m >> (126 - e), shift in [14, 24]. Round the shifted-out bits to even.
        uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u;
        uint32_t shift = 126u - e, k = m >> shift;
        uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rest > half || (rest == half && (k & 1u))) k += 1;  // k ≤ 1024: 2^-14 at most
        float v = (float)k * 0x1p-24f;                           // exact: k has ≤ 11 bits
        memcpy(&r, &v, sizeof r);
    } else {                                          // |x| < 2^-25: below half the min subnormal
        r = 0;
    }
    r |= sign;
    float y;
    memcpy(&y, &r, sizeof y);
    return y;
}

// bfloat16: fp32's sign and 8-bit exponent, 7 mantissa bits. bf16_round(x) = float(bf16(x)) with
// round-to-nearest-even, bit for bit CUDA's __float2bfloat16 (and the emulator's): the low 16 bits
// are rounded away (a carry into the exponent is the correct rounding, up to inf); NaN stays a
// quiet NaN. Subnormals keep their bits like any other value (bf16 shares fp32's exponent range).
KEEL_HD static inline float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) u |= 0x400000u;  // NaN: quiet, payload cut below
    else u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    float y;
    memcpy(&y, &u, sizeof y);
    return y;
}

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
KEEL_HD static inline uint8_t adam8bit_quantize_m(const Adam8bitMaps* q, float m, float amax) {
    if (amax == 0.0f) return q->zero_m;
    int c = quant_nearest(&q->lut_m, m / amax);
    if (std::signbit(q->map_m[c]) != std::signbit(m)) c += m > 0 ? 1 : -1;
    return (uint8_t)c;
}

KEEL_HD static inline uint8_t adam8bit_quantize_v(const Adam8bitMaps* q, float v, float amax) {
    if (amax == 0.0f) return q->zero_v;
    return (uint8_t)quant_nearest(&q->lut_v, v / amax);
}

struct AdamHyper {
    float lr, beta1, beta2, eps, wd;  // wd: 0 for tensors outside the decay group
    float c1, c2;                     // 1 - β1^t and sqrt(1 - β2^t)
    float clip = 1.0f;                // this step's global-norm clipping factor (1: not clipped): g·clip,
                                      // rounded, is the gradient the step sees (before a unit's percentile
                                      // factor), exactly the value a separate g *= clip pass would leave
};

enum { ADAM8BIT_MAX_BLOCK = 2048 };

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

// The parameter checksum both backends compute (param_checksum: cpu/adamw.h, cuda/adamw.cuh): the sum
// mod 2⁶⁴ of one mixed term per element, of its fp32 bit pattern and its index. A sum of integers
// is the same in any order, so a GPU's parallel reduction gives the CPU loop's value exactly, and
// only 8 bytes leave the device; any changed bit of any element (or two swapped elements) changes
// a term. For comparing copies that must be identical (the tied word embedding of the first and
// last pipeline stage, tensor-parallel replicated tensors), not for cryptographic use.
KEEL_HD static inline uint64_t param_checksum_term(uint32_t bits, uint64_t i) {
    return rng_mix64(((uint64_t)bits << 32 | (uint64_t)(uint32_t)(i * 0x9e3779b9u)) ^ (i >> 32) * 0xd6e8feb86659fd93ull);
}
