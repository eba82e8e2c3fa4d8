// cpu/dropout.h — inverted dropout whose mask is a pure function of where the element is.
// Legend: B samples in the micro-batch, R elements per sample.
//   forward:  out[b,r] = keep(b,r) ? inp[b,r] / (1-p) : 0          (out may alias inp)
//   backward: dinp[b,r] += keep(b,r) ? dout[b,r] / (1-p) : 0
//   keep(b,r) = uniform(seed, DROPOUT, site, first_sample + b, r) >= p
// Why counter-based (DESIGN §4): the mask of an element depends on (seed, site, the run's sample
// number, the element's index inside the sample) and nothing else, so the backward regenerates it
// instead of storing it, a resumed run draws the masks the uninterrupted run would have drawn, and
// the masks do not change with the thread count, the micro-batch size or the parallel layout (a
// sample's number is global; TP ranks index channels and heads globally). `site` names the place
// in the network: layer·16 + DROPOUT_SITE_*.
#pragma once
#include <cstddef>
#include <cstdint>

#include "llmc/rand.h"

enum DropoutSiteKind { DROPOUT_SITE_EMBED = 1, DROPOUT_SITE_ATTN_PROBS = 2, DROPOUT_SITE_ATTN_OUT = 3, DROPOUT_SITE_MLP_OUT = 4 };

struct DropoutSite {
    double p;              // probability of dropping; 0: the op is the identity
    uint64_t seed;         // the run's RNG key
    uint64_t site;         // layer·16 + DropoutSiteKind
    int64_t first_sample;  // the run's sample number of micro-batch row 0
};

static inline uint64_t dropout_site(int layer, int kind) { return (uint64_t)(layer + 1) * 16 + (uint64_t)kind; }

static inline bool dropout_keep(const DropoutSite* d, int64_t b, uint64_t r) {
    return rng_uniform(d->seed, RNG_DROPOUT, d->site, (uint64_t)(d->first_sample + b), r) >= d->p;
}

template <typename F>
void dropout_forward(F* out, const F* inp, int B, size_t R, const DropoutSite* d) {
    F scale = (F)(1.0 / (1.0 - d->p));
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (size_t r = 0; r < R; r++) {
            size_t i = (size_t)b * R + r;
            out[i] = dropout_keep(d, b, r) ? inp[i] * scale : (F)0;
        }
}

template <typename F>
void dropout_backward(F* dinp, const F* dout, int B, size_t R, const DropoutSite* d) {
    F scale = (F)(1.0 / (1.0 - d->p));
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (size_t r = 0; r < R; r++) {
            size_t i = (size_t)b * R + r;
            if (dropout_keep(d, b, r)) dinp[i] += dout[i] * scale;
        }
}
