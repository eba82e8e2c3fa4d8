// rand.h — keel's counter-based random numbers (docs/internals.md#determinism).
//
// Contract: every random number is a pure function of (seed, purpose, indices). There is no
// generator state to advance, so a value never depends on call order, thread count, rank or
// parallel layout: element i of tensor t initialises the same on TP=1 and TP=2, the sample order
// after a resume is the order an uninterrupted run would have used, and replicated parameters
// cannot drift apart through RNG (the BLOOM tp_rank-0 dataloader bug, docs/knobs.md#drift-of-tp-replicated-parameters).
//
// The mixer is splitmix64's finaliser applied once per key word (a keyed hash chain). It is not
// cryptographic; it passes the statistical needs of init, shuffling, dropout and sampling.
#pragma once
#include <cmath>
#include <cstdint>

#include "llmc/hd.h"

enum RngPurpose : uint64_t {
    RNG_INIT = 1,      // (tensor index, element index)
    RNG_DATA = 2,      // (epoch, position) — the sample permutation
    RNG_DROPOUT = 3,   // (iteration, micro-batch, layer*16+site, element)
    RNG_GENERATE = 4,  // (sample call, position) — text samples printed during training
};

KEEL_HD static inline uint64_t rng_mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// The chain's state after (seed, purpose, a, b): rng_u64 of (seed, purpose, a, b, c) is one more mix
// of it and c. A kernel drawing many c at one (seed, purpose, a, b) — the elements of one dropout
// row — computes it once.
KEEL_HD static inline uint64_t rng_key(uint64_t seed, uint64_t purpose, uint64_t a, uint64_t b) {
    uint64_t h = rng_mix64(seed);
    h = rng_mix64(h ^ purpose);
    h = rng_mix64(h ^ a);
    return rng_mix64(h ^ b);
}

// The one hash: 64 random bits for the key (seed, purpose, a, b, c).
KEEL_HD static inline uint64_t rng_u64(uint64_t seed, uint64_t purpose, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
    return rng_mix64(rng_key(seed, purpose, a, b) ^ c);
}

// Uniform in (0, 1) from 64 random bits: their top 53, never exactly 0 (safe under log()).
KEEL_HD static inline double rng_unit(uint64_t bits) { return ((bits >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
KEEL_HD static inline double rng_uniform(uint64_t seed, uint64_t purpose, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
    return rng_unit(rng_u64(seed, purpose, a, b, c));
}

// Uniform integer in [0, n) without modulo bias worth caring about (128-bit multiply-high).
static inline uint64_t rng_below(uint64_t n, uint64_t seed, uint64_t purpose, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
    return (uint64_t)(((unsigned __int128)rng_u64(seed, purpose, a, b, c) * n) >> 64);
}

// Standard normal for the key (seed, purpose, a, b): Box-Muller on two uniforms keyed by 2b and
// 2b+1, cosine branch only, so element b never shares its draw with a neighbour.
static inline double rng_normal(uint64_t seed, uint64_t purpose, uint64_t a, uint64_t b) {
    double u1 = rng_uniform(seed, purpose, a, 2 * b);
    double u2 = rng_uniform(seed, purpose, a, 2 * b + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
