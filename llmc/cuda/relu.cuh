// cuda/relu.cuh — ReLU; the contract of cpu/relu.h:
//   forward:  y = max(x, 0);   backward: dx += dy · [x > 0]
// Legend: N elements. Each thread handles one 128-bit pack of every operand (common.cuh's
// element-wise launch shape); the tail and misaligned buffers one element per thread, with the same
// per-element function (relu_value, relu_grad), so both paths give the same bits.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

__device__ inline float relu_value(float x) { return x > 0.0f ? x : 0.0f; }
// dx + dy·[x > 0]; where x <= 0 the stored dx is left as it was (rewritten unchanged: the
// conversion to F and back is exact).
__device__ inline float relu_grad(float dx, float dy, float x) { return x > 0.0f ? dx + dy : dx; }

template <typename F> __global__ void relu_forward_kernel(F* out, const F* inp, size_t N, size_t packs) {
    constexpr int V = Pack128<F>::SIZE;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < packs) {
        Pack128<F> x = load128(inp + t * V), y;
        for (int k = 0; k < V; k++) y.v[k] = from_f32<F>(relu_value(to_f32(x.v[k])));
        store128(out + t * V, y);
        return;
    }
    size_t i = elementwise_tail_index<F>(t, packs);
    if (i < N) out[i] = from_f32<F>(relu_value(to_f32(inp[i])));
}

template <typename F> __global__ void relu_backward_kernel(F* dinp, const F* dout, const F* inp, size_t N, size_t packs) {
    constexpr int V = Pack128<F>::SIZE;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < packs) {
        Pack128<F> dx = load128(dinp + t * V), dy = load128(dout + t * V), x = load128(inp + t * V);
        for (int k = 0; k < V; k++) dx.v[k] = from_f32<F>(relu_grad(to_f32(dx.v[k]), to_f32(dy.v[k]), to_f32(x.v[k])));
        store128(dinp + t * V, dx);
        return;
    }
    size_t i = elementwise_tail_index<F>(t, packs);
    if (i < N && to_f32(inp[i]) > 0.0f) dinp[i] = from_f32<F>(to_f32(dinp[i]) + to_f32(dout[i]));
}

template <typename F> void relu_forward(F* out, const F* inp, size_t N) {
    if (N == 0) return;
    size_t packs = elementwise_packs<F>(N, aligned16(out) && aligned16(inp));
    KEEL_LAUNCH(relu_forward_kernel<F>, ceil_div(elementwise_threads<F>(N, packs), 256), 256, 0, MAIN_STREAM)(out, inp, N, packs);
    CUDA_CHECK_LAUNCH();
}

template <typename F> void relu_backward(F* dinp, const F* dout, const F* inp, size_t N) {
    if (N == 0) return;
    size_t packs = elementwise_packs<F>(N, aligned16(dinp) && aligned16(dout) && aligned16(inp));
    KEEL_LAUNCH(relu_backward_kernel<F>, ceil_div(elementwise_threads<F>(N, packs), 256), 256, 0, MAIN_STREAM)(
        dinp, dout, inp, N, packs);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
