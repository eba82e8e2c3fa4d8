// cpu/dropout.h — inverted dropout whose mask is a pure function of where the element is.
// Legend: B samples in the micro-batch, R elements per sample.
//   forward:  out[b,r] = keep(b,r) ? inp[b,r] / (1-p) : 0          (out may alias inp)
//   backward: dinp[b,r] += keep(b,r) ? dout[b,r] / (1-p) : 0
//   keep(b,r) = uniform(seed, DROPOUT, site, first_sample + b, r) >= p
// Why counter-based (docs/internals.md#determinism): the mask of an element depends on (seed, site, the run's sample
// number, the element's index inside the sample) and nothing else, so the backward regenerates it
// instead of storing it, a resumed run draws the masks the uninterrupted run would have drawn, and
// the masks do not change with the thread count, the micro-batch size or the parallel layout (a
// sample's number is global; TP ranks index channels and heads globally). `site` names the place
// in the network: layer·16 + DROPOUT_SITE_*.
#pragma once
#include <cstddef>
#include <cstdint>

#include "llmc/ops.h"


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
