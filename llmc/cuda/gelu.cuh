// cuda/gelu.cuh — GeLU, tanh approximation; the contract of cpu/gelu.h:
//   forward:  y = 0.5·x·(1 + tanh(k·(x + 0.044715·x³))),  k = sqrt(2/π)
//   backward: dx += dy · [0.5·(1+th) + 0.5·x·(1-th²)·k·(1 + 3·0.044715·x²)]
// Legend: N elements. fp32 arithmetic (tanhf) whatever the storage type F.
// Each thread handles one 128-bit pack of every operand (8 bf16/fp16 or 4 fp32: common.cuh's
// element-wise launch shape), the N % 8 (or 4) tail and misaligned buffers one element per thread.
// Both paths call the same per-element function (gelu_value, gelu_grad), so they give the same bits.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

__device__ inline float gelu_value(float x) {
    return 0.5f * x * (1.0f + tanhf((float)GELU_K * (x + 0.044715f * x * x * x)));
}
// dx + dy·gelu'(x)
__device__ inline float gelu_grad(float dx, float dy, float x) {
    float th = tanhf((float)GELU_K * (x + 0.044715f * x * x * x));
    float dth = (float)GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    float g = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * dth;
    return dx + dy * g;
}

template <typename F> __global__ void gelu_forward_kernel(F* out, const F* inp, size_t N, size_t packs) {
    constexpr int V = Pack128<F>::SIZE;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < packs) {
        Pack128<F> x = load128(inp + t * V), y;
        for (int k = 0; k < V; k++) y.v[k] = from_f32<F>(gelu_value(to_f32(x.v[k])));
        store128(out + t * V, y);
        return;
    }
    size_t i = elementwise_tail_index<F>(t, packs);
    if (i < N) out[i] = from_f32<F>(gelu_value(to_f32(inp[i])));
}

template <typename F> __global__ void gelu_backward_kernel(F* dinp, const F* dout, const F* inp, size_t N, size_t packs) {
    constexpr int V = Pack128<F>::SIZE;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < packs) {
        Pack128<F> dx = load128(dinp + t * V), dy = load128(dout + t * V), x = load128(inp + t * V);
        for (int k = 0; k < V; k++) dx.v[k] = from_f32<F>(gelu_grad(to_f32(dx.v[k]), to_f32(dy.v[k]), to_f32(x.v[k])));
        store128(dinp + t * V, dx);
        return;
    }
    size_t i = elementwise_tail_index<F>(t, packs);
    if (i < N) dinp[i] = from_f32<F>(gelu_grad(to_f32(dinp[i]), to_f32(dout[i]), to_f32(inp[i])));
}

template <typename F> void gelu_forward(F* out, const F* inp, size_t N) {
    if (N == 0) return;
    size_t packs = elementwise_packs<F>(N, aligned16(out) && aligned16(inp));
    KEEL_LAUNCH(gelu_forward_kernel<F>, ceil_div(elementwise_threads<F>(N, packs), 256), 256, 0, MAIN_STREAM)(out, inp, N, packs);
    CUDA_CHECK_LAUNCH();
}

template <typename F> void gelu_backward(F* dinp, const F* dout, const F* inp, size_t N) {
    if (N == 0) return;
    size_t packs = elementwise_packs<F>(N, aligned16(dinp) && aligned16(dout) && aligned16(inp));
    KEEL_LAUNCH(gelu_backward_kernel<F>, ceil_div(elementwise_threads<F>(N, packs), 256), 256, 0, MAIN_STREAM)(
        dinp, dout, inp, N, packs);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
