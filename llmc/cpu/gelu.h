// cpu/gelu.h — GeLU, tanh approximation (what GPT-2 and the BigScience runs used, docs/knobs.md#activations-dropout-positions-and-alibi).
// Legend: N elements.
//   forward:  y = 0.5·x·(1 + tanh(k·(x + 0.044715·x³))),  k = sqrt(2/π)
//   backward: dx += dy · [0.5·(1+th) + 0.5·x·(1-th²)·k·(1 + 3·0.044715·x²)]
// Numerics: tanh is tanh_f32 (cpu/vmath.h), so both loops vectorize with identical bits in the
// vector body and the tail; in double (gradient checks) it is libm's.
#pragma once
#include "llmc/ops.h"
#include <cmath>

#include "llmc/cpu/vmath.h"


template <typename F>
void gelu_forward(F* out, const F* inp, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        F x = inp[i];
        out[i] = (F)0.5 * x * ((F)1 + tanh_f32((F)GELU_K * (x + (F)0.044715 * x * x * x)));
    }
}

template <typename F>
void gelu_backward(F* dinp, const F* dout, const F* inp, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        F x = inp[i];
        F th = tanh_f32((F)GELU_K * (x + (F)0.044715 * x * x * x));
        F dth = (F)GELU_K * ((F)1 + (F)3 * (F)0.044715 * x * x);
        dinp[i] += dout[i] * ((F)0.5 * ((F)1 + th) + (F)0.5 * x * ((F)1 - th * th) * dth);
    }
}
