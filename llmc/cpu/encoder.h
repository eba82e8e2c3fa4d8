// cpu/encoder.h — token + position embedding.
// Legend: B batch, T time, C channels, Vp padded vocabulary, maxT position rows.
//   forward:  out[b,t,:] = wte[inp[b,t],:] (+ wpe[t,:] unless wpe is null: ALiBi has no table)
//   backward: dwte[inp[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]
//   A negative id (vocabulary-parallel embedding: the token's row is on another tensor-parallel
//   rank) reads as a zero row and receives no gradient.
//   position_forward/backward: the position add alone, for --embed-layernorm, where the LayerNorm
//   sits between the word lookup and the positions (docs/knobs.md#embedding-layernorm-and-stableembedding).
// Numerics: the backward scatters into rows that several positions share (a repeated token), so
// it is parallel over channel blocks and walks (b,t) in order inside each block: every element
// sums its contributions in one fixed order whatever the thread count (no atomics, docs/internals.md#determinism).
#pragma once
#include <cstddef>

template <typename F>
void encoder_forward(F* out,                               // (B,T,C)
                     const int* inp,                       // (B,T)
                     const F* wte, const F* wpe,           // (Vp,C), (maxT,C) or null
                     int B, int T, int C) {
#pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        F* o = out + (size_t)bt * C;
        if (inp[bt] < 0) {  // vocabulary-parallel: another rank's row (its sum over ranks fills it)
            for (int c = 0; c < C; c++) o[c] = wpe ? wpe[(size_t)(bt % T) * C + c] : (F)0;
            continue;
        }
        const F* we = wte + (size_t)inp[bt] * C;
        if (wpe) {
            const F* pe = wpe + (size_t)(bt % T) * C;
            for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
        } else {
            for (int c = 0; c < C; c++) o[c] = we[c];
        }
    }
}

template <typename F>
void encoder_backward(F* dwte, F* dwpe,                    // (Vp,C), (maxT,C) or null; accumulated into
                      const F* dout,                       // (B,T,C)
                      const int* inp,                      // (B,T)
                      const int* groups,                   // encoder_token_groups of inp (llmc/ops.h): the CUDA op's work list; unused here
                      int B, int T, int C) {
    const int CB = 16;  // channel block: the unit of parallel work
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += CB) {
        int c1 = c0 + CB < C ? c0 + CB : C;
        for (int bt = 0; bt < B * T; bt++) {
            const F* d = dout + (size_t)bt * C;
            if (inp[bt] >= 0) {  // (a negative id: another rank's row)
                F* we = dwte + (size_t)inp[bt] * C;
                for (int c = c0; c < c1; c++) we[c] += d[c];
            }
            if (dwpe) {
                F* pe = dwpe + (size_t)(bt % T) * C;
                for (int c = c0; c < c1; c++) pe[c] += d[c];
            }
        }
    }
}

template <typename F>
void position_forward(F* out, const F* wpe, int B, int T, int C) {  // out (B,T,C) += wpe[t]
#pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const F* pe = wpe + (size_t)(bt % T) * C;
        F* o = out + (size_t)bt * C;
        for (int c = 0; c < C; c++) o[c] += pe[c];
    }
}

template <typename F>
void position_backward(F* dwpe, const F* dout, int B, int T, int C) {  // dwpe (maxT,C) += Σ_b dout[b,t]
#pragma omp parallel for
    for (int tc = 0; tc < T * C; tc++) {
        F sum = 0;
        for (int b = 0; b < B; b++) sum += dout[(size_t)b * T * C + tc];
        dwpe[tc] += sum;
    }
}
