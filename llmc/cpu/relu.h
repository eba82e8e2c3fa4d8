// cpu/relu.h — ReLU, OPT's MLP activation (--activation relu, docs/knobs.md#activations-dropout-positions-and-alibi: OPT 11.10 swapped
// GeLU for ReLU suspecting GeLU's x³ term under fp16).
// Legend: N elements.
//   forward:  y = max(x, 0)
//   backward: dx += dy · [x > 0]      (the subgradient 0 at x = 0)
#pragma once
#include <cstddef>

template <typename F>
void relu_forward(F* out, const F* inp, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) out[i] = inp[i] > (F)0 ? inp[i] : (F)0;
}

template <typename F>
void relu_backward(F* dinp, const F* dout, const F* inp, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++)
        if (inp[i] > (F)0) dinp[i] += dout[i];
}
