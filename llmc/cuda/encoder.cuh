// cuda/encoder.cuh — token + position embedding; the contract of cpu/encoder.h:
//   forward:  out[b,t,:] = wte[inp[b,t],:] (+ wpe[t,:] unless wpe is null: ALiBi has no table)
//   backward: dwte[inp[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]
//   A negative id (vocabulary-parallel embedding: the row is on another tensor-parallel rank) reads
//   as a zero row (out = wpe[t,:], or 0) and adds nothing to dwte (dwpe still gets dout).
//   position_forward/backward: the position add alone (--embed-layernorm puts the LayerNorm between
//   the word lookup and the positions, KNOBS.md §2.1).
// Legend: B batch, T time, C channels, Vp padded vocabulary, maxT position rows.
// Forward ops: one thread per element of out. Gradients dwte, dwpe are fp32 whatever F (DESIGN §3).
// Determinism (no float atomics, DESIGN §4): several positions share a dwte row when a token
// repeats, so the dwte scatter gives each thread one channel and lets it walk the B*T positions in
// order, adding dout into dwte[inp[bt]][c]: the read-modify-writes of one element come from one
// thread, in the CPU op's order, so the sums are the CPU's bit for bit (fp32). dwpe: a thread per
// (t,c) adds over b in order. Cost: the dwte walk is B*T dependent steps over only C threads; it is
// latency-bound on a GPU (a token-sorted scatter would be the faster deterministic design).
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

enum { ENC_THREADS = 256, ENC_SCATTER_THREADS = 32 };  // scatter: small blocks spread C over many SMs

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

// dwte: thread c walks every position in order (see the contract above for why one thread),
// skipping the negative ids (another rank's rows).
template <typename F>
__global__ void encoder_backward_wte_kernel(float* dwte,          // (Vp,C), accumulated into
                                            const F* dout,    // (B,T,C)
                                            const int* inp,   // (B,T)
                                            int BT, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int bt = 0; bt < BT; bt++) {
        int id = inp[bt];
        if (id >= 0) dwte[(size_t)id * C + c] += to_f32(dout[(size_t)bt * C + c]);
    }
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
                      const int* inp, int B, int T, int C) {
    if ((size_t)B * T * C == 0) return;
    KEEL_LAUNCH(encoder_backward_wte_kernel<F>, ceil_div(C, ENC_SCATTER_THREADS), ENC_SCATTER_THREADS, 0, MAIN_STREAM)(
        dwte, dout, inp, B * T, C);
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
