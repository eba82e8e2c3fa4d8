// cpu/headscale.h — NormFormer's learned per-head scale (--normformer, docs/knobs.md#normformer).
// Legend: N rows (B*T), C channels, NH heads, hs = C/NH.
//   forward:  out[n, h·hs + i] = inp[n, h·hs + i] · scale[h]
//   backward: dinp += dout · scale[h];  dscale[h] += Σ_n Σ_i dout·inp
// Placement: keel applies it to each head's attention output BEFORE the output projection, as the
// NormFormer paper describes; fairseq's --scale-heads multiplies the projected output reshaped into
// NH chunks, which after the projection no longer belong to heads (docs/knobs.md#normformer).
// Numerics: dscale is parallel over heads, each summing rows in order (thread-count independent).
#pragma once
#include <cstddef>

template <typename F>
void headscale_forward(F* out, const F* inp, const F* scale,   // (N,C), (N,C), (NH)
                       int N, int C, int NH) {
    int hs = C / NH;
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = inp[(size_t)n * C + c] * scale[c / hs];
}

template <typename F>
void headscale_backward(F* dinp, F* dscale,                     // (N,C), (NH) accumulated into
                        const F* dout, const F* inp, const F* scale, int N, int C, int NH) {
    int hs = C / NH;
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) dinp[(size_t)n * C + c] += dout[(size_t)n * C + c] * scale[c / hs];
#pragma omp parallel for
    for (int h = 0; h < NH; h++) {
        F sum = 0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < hs; i++) sum += dout[(size_t)n * C + h * hs + i] * inp[(size_t)n * C + h * hs + i];
        dscale[h] += sum;
    }
}
