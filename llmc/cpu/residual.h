// cpu/residual.h — the residual add: out = a + b; backward: da += dout, db += dout.
// Legend: N elements.
#pragma once
#include <cstddef>

template <typename F>
void residual_forward(F* out, const F* a, const F* b, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

template <typename F>
void residual_backward(F* da, F* db, const F* dout, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) { da[i] += dout[i]; db[i] += dout[i]; }
}
