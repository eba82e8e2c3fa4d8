// cuda/gelu.cuh — GeLU, tanh approximation; the contract of cpu/gelu.h:
//   forward:  y = 0.5·x·(1 + tanh(k·(x + 0.044715·x³))),  k = sqrt(2/π)
//   backward: dx += dy · [0.5·(1+th) + 0.5·x·(1-th²)·k·(1 + 3·0.044715·x²)]
// Legend: N elements. One thread per element, fp32 arithmetic (tanhf) whatever the storage type F.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

template <typename F> __global__ void gelu_forward_kernel(F* out, const F* inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float x = to_f32(inp[i]);
    out[i] = from_f32<F>(0.5f * x * (1.0f + tanhf((float)GELU_K * (x + 0.044715f * x * x * x))));
}

template <typename F> __global__ void gelu_backward_kernel(F* dinp, const F* dout, const F* inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float x = to_f32(inp[i]);
    float th = tanhf((float)GELU_K * (x + 0.044715f * x * x * x));
    float dth = (float)GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    float g = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * dth;
    dinp[i] = from_f32<F>(to_f32(dinp[i]) + to_f32(dout[i]) * g);
}

template <typename F> void gelu_forward(F* out, const F* inp, size_t N) {
    if (N == 0) return;
    KEEL_LAUNCH(gelu_forward_kernel<F>, ceil_div(N, 256), 256, 0, MAIN_STREAM)(out, inp, N);
    CUDA_CHECK_LAUNCH();
}

template <typename F> void gelu_backward(F* dinp, const F* dout, const F* inp, size_t N) {
    if (N == 0) return;
    KEEL_LAUNCH(gelu_backward_kernel<F>, ceil_div(N, 256), 256, 0, MAIN_STREAM)(dinp, dout, inp, N);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
