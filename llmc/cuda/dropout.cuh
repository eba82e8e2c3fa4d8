// cuda/dropout.cuh — inverted dropout whose mask is a pure function of where the element is; the
// contract of cpu/dropout.h:
//   forward:  out[b,r] = keep(b,r) ? inp[b,r] / (1-p) : 0          (out may alias inp)
//   backward: dinp[b,r] += keep(b,r) ? dout[b,r] / (1-p) : 0
//   keep(b,r) = dropout_keep(site, b, r)  (llmc/ops.h: uniform(seed, DROPOUT, site, first_sample + b, r) >= p)
// Legend: B samples in the micro-batch, R elements per sample.
// One thread per element. The keep decision is the one host+device function dropout_keep, so the
// CUDA mask equals the CPU mask bit for bit; the backward regenerates it instead of storing it.
// The DropoutSite is host memory: the launcher copies it by value into the kernel's parameters.
// out may alias inp: each thread reads its element before it writes the same element.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

enum { DROPOUT_THREADS = 256 };

// p == 0 keeps everything (uniform >= 0 always): the short-circuit only skips the hash.
template <typename F>
__global__ void dropout_forward_kernel(F* out, const F* inp,    // (B,R), (B,R)
                                       size_t R, size_t n,      // n = B*R
                                       DropoutSite d, float scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    bool keep = d.p == 0.0 || dropout_keep(&d, (int64_t)(i / R), (uint64_t)(i % R));
    out[i] = from_f32<F>(keep ? to_f32(inp[i]) * scale : 0.0f);
}

template <typename F>
__global__ void dropout_backward_kernel(F* dinp, const F* dout,  // (B,R) accumulated into, (B,R)
                                        size_t R, size_t n,      // n = B*R
                                        DropoutSite d, float scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (d.p == 0.0 || dropout_keep(&d, (int64_t)(i / R), (uint64_t)(i % R)))
        dinp[i] = from_f32<F>(to_f32(dinp[i]) + to_f32(dout[i]) * scale);
}

template <typename F>
void dropout_forward(F* out, const F* inp, int B, size_t R, const DropoutSite* d) {
    size_t n = (size_t)B * R;
    if (n == 0 || (d->p == 0.0 && out == inp)) return;  // p = 0 in place: the identity
    float scale = (float)(1.0 / (1.0 - d->p));          // fp32 for any F: a bf16 scale would bias by ~0.1%
    KEEL_LAUNCH(dropout_forward_kernel<F>, ceil_div(n, DROPOUT_THREADS), DROPOUT_THREADS, 0, MAIN_STREAM)(out, inp, R, n, *d, scale);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
void dropout_backward(F* dinp, const F* dout, int B, size_t R, const DropoutSite* d) {
    size_t n = (size_t)B * R;
    if (n == 0) return;
    float scale = (float)(1.0 / (1.0 - d->p));
    KEEL_LAUNCH(dropout_backward_kernel<F>, ceil_div(n, DROPOUT_THREADS), DROPOUT_THREADS, 0, MAIN_STREAM)(dinp, dout, R, n, *d, scale);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
