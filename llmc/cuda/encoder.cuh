// cuda/encoder.cuh — token + position embedding; the contract of cpu/encoder.h:
//   forward:  out[b,t,:] = wte[inp[b,t],:] (+ wpe[t,:] unless wpe is null: ALiBi has no table)
//   backward: dwte[inp[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]
//   A negative id (vocabulary-parallel embedding: the row is on another tensor-parallel rank) reads
//   as a zero row (out = wpe[t,:], or 0) and adds nothing to dwte (dwpe still gets dout).
//   position_forward/backward: the position add alone (--embed-layernorm puts the LayerNorm between
//   the word lookup and the positions, docs/knobs.md#embedding-layernorm-and-stableembedding).
// Legend: B batch, T time, C channels, Vp padded vocabulary, maxT position rows.
// Forward ops: one thread per element of out. Gradients dwte, dwpe are fp32 whatever F (docs/internals.md#precision).
// Determinism (no float atomics, docs/internals.md#determinism): several positions share a dwte row when a token
// repeats. The dwte scatter works from the token groups (encoder_token_groups, llmc/ops.h: the
// positions of each distinct id, ascending, built on the host): block x owns group x's row, its
// threads 4 adjacent channels each (16-byte fp32 accesses), and each thread adds the group's
// positions in ascending order — the CPU op's order of additions per element, so the sums are the
// CPU's bit for bit (fp32). Parallel over (distinct tokens × channels) instead of over C threads
// walking all B·T positions. dwpe: a thread per (t,c) adds over b in order.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

enum { ENC_THREADS = 256, ENC_WTE_THREADS = 64 };  // dwte: 64 threads × 4 channels cover C = 256 a block

template <typename F>
__global__ void encoder_forward_kernel(F* out,                      // (B,T,C)
                                       const int* inp,              // (B,T)
                                       const F* wte, const F* wpe,  // (Vp,C), (maxT,C) or null
                                       int T, int C, size_t n) {    // n = B*T*C
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t bt = i / C, c = i % C;
    int id = inp[bt];
    float v;
    if (id >= 0) {
        v = to_f32(wte[(size_t)id * C + c]);
        if (wpe) v += to_f32(wpe[(bt % T) * C + c]);
    } else {  // another rank's row: the position alone, as the CPU op copies it (no 0 + wpe)
        v = wpe ? to_f32(wpe[(bt % T) * C + c]) : 0.0f;
    }
    out[i] = from_f32<F>(v);
}

// dwte: block x takes group x of the token groups (blocks past the G groups leave at once: the grid
// is sized by B·T, the most groups there can be, since G lives in device memory); thread y·blockDim
// + k the channels [V·that, +V).
template <typename F, int V>
__global__ void encoder_backward_wte_kernel(float* dwte,        // (Vp,C), accumulated into
                                            const F* dout,      // (B,T,C)
                                            const int* inp,     // (B,T)
                                            const int* groups,  // encoder_token_groups(inp)
                                            int C) {
    int G = groups[0], g = blockIdx.x;
    int c = (blockIdx.y * blockDim.x + threadIdx.x) * V;
    if (g >= G || c >= C) return;
    const int* pos = groups + G + 2;  // the positions, grouped
    int k0 = groups[1 + g], k1 = groups[2 + g];
    float* w = dwte + (size_t)inp[pos[k0]] * C + c;
    Pack<float, V> acc = pack_load<float, V>(w);
    for (int k = k0; k < k1; k++) {
        Pack<F, V> d = pack_load<F, V>(dout + (size_t)pos[k] * C + c);
        for (int v = 0; v < V; v++) acc.v[v] += to_f32(d.v[v]);
    }
    pack_store<float, V>(w, acc);
}

// dwpe inside encoder_backward: the running value starts from dwpe and adds each b in order, the
// same chain of additions as the CPU op's in-place `pe[c] += d[c]`.
template <typename F>
__global__ void encoder_backward_wpe_kernel(float* dwpe,         // (maxT,C), accumulated into
                                            const F* dout,   // (B,T,C)
                                            int B, size_t TC) {
    size_t tc = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (tc >= TC) return;
    float v = dwpe[tc];
    for (int b = 0; b < B; b++) v += to_f32(dout[(size_t)b * TC + tc]);
    dwpe[tc] = v;
}

template <typename F>
__global__ void position_forward_kernel(F* out,         // (B,T,C), added to
                                        const F* wpe,   // (maxT,C)
                                        size_t TC, size_t n) {  // n = B*T*C
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = from_f32<F>(to_f32(out[i]) + to_f32(wpe[i % TC]));
}

// position_backward sums over b first, then adds the sum once, as the CPU op does.
template <typename F>
__global__ void position_backward_kernel(float* dwpe,        // (maxT,C), accumulated into
                                         const F* dout,  // (B,T,C)
                                         int B, size_t TC) {
    size_t tc = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (tc >= TC) return;
    float sum = 0.0f;
    for (int b = 0; b < B; b++) sum += to_f32(dout[(size_t)b * TC + tc]);
    dwpe[tc] += sum;
}

template <typename F>
void encoder_forward(F* out,                               // (B,T,C)
                     const int* inp,                       // (B,T)
                     const F* wte, const F* wpe,           // (Vp,C), (maxT,C) or null
                     int B, int T, int C) {
    size_t n = (size_t)B * T * C;  // size_t: B*T*C overflows int at large batches
    if (n == 0) return;
    KEEL_LAUNCH(encoder_forward_kernel<F>, ceil_div(n, ENC_THREADS), ENC_THREADS, 0, MAIN_STREAM)(out, inp, wte, wpe, T, C, n);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
void encoder_backward(float* dwte, float* dwpe,                    // (Vp,C), (maxT,C) or null; accumulated into
                      const F* dout,                       // (B,T,C)
                      const int* inp,                      // (B,T)
                      const int* groups,                   // (2·B·T + 2) encoder_token_groups of inp (llmc/ops.h)
                      int B, int T, int C) {
    if ((size_t)B * T * C == 0) return;
    if (C % 4 == 0 && aligned16(dwte) && aligned16(dout)) {
        dim3 grid(B * T, ceil_div(C, 4 * ENC_WTE_THREADS));
        KEEL_LAUNCH(encoder_backward_wte_kernel<F KEEL_COMMA 4>, grid, ENC_WTE_THREADS, 0, MAIN_STREAM)(dwte, dout, inp, groups, C);
    } else {
        dim3 grid(B * T, ceil_div(C, ENC_WTE_THREADS));
        KEEL_LAUNCH(encoder_backward_wte_kernel<F KEEL_COMMA 1>, grid, ENC_WTE_THREADS, 0, MAIN_STREAM)(dwte, dout, inp, groups, C);
    }
    CUDA_CHECK_LAUNCH();
    if (!dwpe) return;
    size_t TC = (size_t)T * C;
    KEEL_LAUNCH(encoder_backward_wpe_kernel<F>, ceil_div(TC, ENC_THREADS), ENC_THREADS, 0, MAIN_STREAM)(dwpe, dout, B, TC);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
void position_forward(F* out, const F* wpe, int B, int T, int C) {  // out (B,T,C) += wpe[t]
    size_t TC = (size_t)T * C, n = (size_t)B * TC;
    if (n == 0) return;
    KEEL_LAUNCH(position_forward_kernel<F>, ceil_div(n, ENC_THREADS), ENC_THREADS, 0, MAIN_STREAM)(out, wpe, TC, n);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
void position_backward(float* dwpe, const F* dout, int B, int T, int C) {  // dwpe (maxT,C) += Σ_b dout[b,t]
    size_t TC = (size_t)T * C;
    if (TC == 0) return;
    KEEL_LAUNCH(position_backward_kernel<F>, ceil_div(TC, ENC_THREADS), ENC_THREADS, 0, MAIN_STREAM)(dwpe, dout, B, TC);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
