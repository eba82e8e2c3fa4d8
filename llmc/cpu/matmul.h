// cpu/matmul.h — the linear layer: out = inp · Wᵀ + bias.
// Legend: N rows (B*T), C input channels, OC output channels.
//   forward:  out[n,o] = bias[o] + Σ_i inp[n,i]·W[o,i]                 W: (OC,C) as in PyTorch/llm.c
//   backward: dinp[n,i] += Σ_o dout[n,o]·W[o,i]
//             dW[o,i]   += Σ_n dout[n,o]·inp[n,i];   dbias[o] += Σ_n dout[n,o]
// Numerics (docs/internals.md#determinism): each output element is one fused multiply-add chain in ascending order of
// the summed index, started from bias[o] (or 0) in the forward and from the value already there in
// the backward. One order per element, independent of threads, tiling and vector width.
// Two implementations with those identical bits:
//   matmul_*_reference — the loops above, written out; the textbook, and the test oracle;
//   matmul_forward / matmul_backward — the same chains computed by the packed, register-tiled,
//     cache-blocked engine of cpu/gemm.h (fp32). Other element types (the double-precision gradient
//     checks) take the reference. test_fast_kernels compares the two byte for byte.
// With GeLU, the MLP's up-projection as one op (the twin of cuda/matmul.cuh's cuBLASLt GeLU epilogues):
//   matmul_forward_gelu:  pre = inp·Wᵀ + bias;  act = gelu(pre)                      act, pre (N,OC)
//   matmul_backward_gelu: dpre = gelu'(pre) ⊙ (dout·W), written (not accumulated), with dact (N,C)
//                         the scratch for dout·W; dW += doutᵀ·inp, dbias += Σ_n dout, inp = gelu(pre)
// Here the two ops in sequence: matmul_forward then gelu_forward (cpu/gelu.h); dact zeroed, then
// matmul_backward's dinp into it, dpre zeroed, then gelu_backward — the unfused model's operations in
// its order, so the CPU trainer's bits do not depend on the op. `fuse` (--gelu-fusion) steers the
// CUDA op set only: here both settings compute the same values.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "llmc/cpu/gelu.h"
#include "llmc/cpu/gemm.h"

template <typename F>
void matmul_forward_reference(F* out,                       // (N,OC)
                              const F* inp,                 // (N,C)
                              const F* weight, const F* bias,  // (OC,C), (OC) or nullptr
                              int N, int C, int OC) {
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            const F* x = inp + (size_t)n * C;
            const F* w = weight + (size_t)o * C;
            F acc = bias ? bias[o] : (F)0;
            for (int i = 0; i < C; i++) acc = std::fma(x[i], w[i], acc);
            out[(size_t)n * OC + o] = acc;
        }
}

template <typename F>
void matmul_backward_reference(F* dinp, F* dweight, F* dbias,  // (N,C), (OC,C), (OC) or nullptr; accumulated into
                               const F* dout,                  // (N,OC)
                               const F* inp, const F* weight,  // (N,C), (OC,C)
                               int N, int C, int OC) {
    if (dinp) {
#pragma omp parallel for
        for (int n = 0; n < N; n++)
            for (int i = 0; i < C; i++) {
                F acc = dinp[(size_t)n * C + i];
                for (int o = 0; o < OC; o++) acc = std::fma(dout[(size_t)n * OC + o], weight[(size_t)o * C + i], acc);
                dinp[(size_t)n * C + i] = acc;
            }
    }
#pragma omp parallel for
    for (int o = 0; o < OC; o++) {
        for (int i = 0; i < C; i++) {
            F acc = dweight[(size_t)o * C + i];
            for (int n = 0; n < N; n++) acc = std::fma(dout[(size_t)n * OC + o], inp[(size_t)n * C + i], acc);
            dweight[(size_t)o * C + i] = acc;
        }
        if (dbias) {
            F acc = dbias[o];
            for (int n = 0; n < N; n++) acc += dout[(size_t)n * OC + o];
            dbias[o] = acc;
        }
    }
}

// The CUDA op set sizes its scratch up front (cuda/matmul.cuh); the CPU op set needs none.
static inline void matmul_reserve(size_t N, size_t OC) {}

// The fast path. Each call is C += A·B on the gemm engine, with A and B read through strides:
//   forward  out  (N×OC)  = [bias] + inp (N×C) · Wᵀ        B(i,o) = W[o,i]
//   dinp     dinp (N×C)  += dout (N×OC) · W (OC×C)
//   dweight  dW   (OC×C) += doutᵀ (OC×N) · inp (N×C)     A(o,n) = dout[n,o]
template <typename F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC) {
    if constexpr (!std::is_same_v<F, float>) {
        matmul_forward_reference(out, inp, weight, bias, N, C, OC);
    } else {
#pragma omp parallel for
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] = bias ? bias[o] : 0.0f;
        gemm_accumulate(out, OC, {inp, (size_t)C, 1}, {weight, (size_t)C, 1}, N, OC, C);
    }
}

template <typename F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight, int N, int C, int OC,
                     bool dinp_write = false, bool dweight_write = false) {
    // the write flags: zero, then the same accumulation (the GPU: beta = 0 and a written bias sum,
    // nothing zeroed first); the bytes are those of adding into a zeroed buffer
    if (dinp && dinp_write) memset(dinp, 0, (size_t)N * C * sizeof(F));
    if (dweight_write) {
        memset(dweight, 0, (size_t)OC * C * sizeof(F));
        if (dbias) memset(dbias, 0, (size_t)OC * sizeof(F));
    }
    if constexpr (!std::is_same_v<F, float>) {
        matmul_backward_reference(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
    } else {
        if (dinp) gemm_accumulate(dinp, C, {dout, (size_t)OC, 1}, {weight, 1, (size_t)C}, N, C, OC);
        gemm_accumulate(dweight, C, {dout, 1, (size_t)OC}, {inp, 1, (size_t)C}, OC, C, N);
        if (dbias) {  // ascending n per element; each thread owns a range of o
#pragma omp parallel for schedule(static)
            for (int o0 = 0; o0 < OC; o0 += 256) {
                int o1 = o0 + 256 < OC ? o0 + 256 : OC;
                for (int n = 0; n < N; n++)
                    for (int o = o0; o < o1; o++) dbias[o] += dout[(size_t)n * OC + o];
            }
        }
    }
}

template <typename F>
void matmul_forward_gelu(F* act, F* pre,                     // (N,OC), (N,OC)
                         const F* inp,                       // (N,C)
                         const F* weight, const F* bias,     // (OC,C), (OC) or nullptr
                         int N, int C, int OC, bool fuse) {
    matmul_forward(pre, inp, weight, bias, N, C, OC);
    gelu_forward(act, pre, (size_t)N * OC);
}

template <typename F>
void matmul_backward_gelu(F* dpre, F* dact, F* dweight, F* dbias,   // (N,C) written, (N,C) scratch, (OC,C), (OC) or nullptr
                          const F* dout,                            // (N,OC)
                          const F* inp, const F* weight,            // (N,C) = gelu(pre), (OC,C)
                          const F* pre,                             // (N,C)
                          int N, int C, int OC, bool fuse, bool dweight_write = false) {
    size_t n = (size_t)N * C;
    memset(dact, 0, n * sizeof(F));
    matmul_backward(dact, dweight, dbias, dout, inp, weight, N, C, OC, false, dweight_write);
    memset(dpre, 0, n * sizeof(F));
    gelu_backward(dpre, dact, pre, n);
}
