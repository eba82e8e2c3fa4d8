// cuda/relu.cuh — ReLU; the contract of cpu/relu.h:
//   forward:  y = max(x, 0);   backward: dx += dy · [x > 0]
// Legend: N elements. One thread per element.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

template <typename F> __global__ void relu_forward_kernel(F* out, const F* inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float x = to_f32(inp[i]);
    out[i] = from_f32<F>(x > 0.0f ? x : 0.0f);
}

template <typename F> __global__ void relu_backward_kernel(F* dinp, const F* dout, const F* inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    if (to_f32(inp[i]) > 0.0f) dinp[i] = from_f32<F>(to_f32(dinp[i]) + to_f32(dout[i]));
}

template <typename F> void relu_forward(F* out, const F* inp, size_t N) {
    if (N == 0) return;
    KEEL_LAUNCH(relu_forward_kernel<F>, ceil_div(N, 256), 256, 0, MAIN_STREAM)(out, inp, N);
    CUDA_CHECK_LAUNCH();
}

template <typename F> void relu_backward(F* dinp, const F* dout, const F* inp, size_t N) {
    if (N == 0) return;
    KEEL_LAUNCH(relu_backward_kernel<F>, ceil_div(N, 256), 256, 0, MAIN_STREAM)(dinp, dout, inp, N);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
