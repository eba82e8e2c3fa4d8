// cuda/activation.cuh — the element-wise kernels of the activation functions (cuda/gelu.cuh,
// cuda/relu.cuh), written once: an activation is a struct Op with
//   static __device__ float value(float x)                  y = f(x)
//   static __device__ float grad(float dx, float dy, float x)  dx + dy·f'(x)
// and activation_forward<Op> / activation_backward<Op> run it over N elements of storage type F in
// fp32. Each thread handles one 128-bit pack of every operand (8 bf16/fp16 or 4 fp32: common.cuh's
// element-wise launch shape); the N % V tail and misaligned buffers one element per thread. Both
// paths call the same per-element function, so they give the same bits.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

template <typename F, typename Op> __global__ void activation_forward_kernel(F* out, const F* inp, size_t N, size_t packs) {
    constexpr int V = Pack128<F>::SIZE;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < packs) {
        Pack128<F> x = load128(inp + t * V), y;
        for (int k = 0; k < V; k++) y.v[k] = from_f32<F>(Op::value(to_f32(x.v[k])));
        store128(out + t * V, y);
        return;
    }
    size_t i = elementwise_tail_index<F>(t, packs);
    if (i < N) out[i] = from_f32<F>(Op::value(to_f32(inp[i])));
}

template <typename F, typename Op> __global__ void activation_backward_kernel(F* dinp, const F* dout, const F* inp, size_t N, size_t packs) {
    constexpr int V = Pack128<F>::SIZE;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < packs) {
        Pack128<F> dx = load128(dinp + t * V), dy = load128(dout + t * V), x = load128(inp + t * V);
        for (int k = 0; k < V; k++) dx.v[k] = from_f32<F>(Op::grad(to_f32(dx.v[k]), to_f32(dy.v[k]), to_f32(x.v[k])));
        store128(dinp + t * V, dx);
        return;
    }
    size_t i = elementwise_tail_index<F>(t, packs);
    if (i < N) dinp[i] = from_f32<F>(Op::grad(to_f32(dinp[i]), to_f32(dout[i]), to_f32(inp[i])));
}

template <typename Op, typename F> void activation_forward(F* out, const F* inp, size_t N) {
    if (N == 0) return;
    size_t packs = elementwise_packs<F>(N, aligned16(out) && aligned16(inp));
    KEEL_LAUNCH(activation_forward_kernel<F KEEL_COMMA Op>, ceil_div(elementwise_threads<F>(N, packs), 256), 256, 0, MAIN_STREAM)(
        out, inp, N, packs);
    CUDA_CHECK_LAUNCH();
}

template <typename Op, typename F> void activation_backward(F* dinp, const F* dout, const F* inp, size_t N) {
    if (N == 0) return;
    size_t packs = elementwise_packs<F>(N, aligned16(dinp) && aligned16(dout) && aligned16(inp));
    KEEL_LAUNCH(activation_backward_kernel<F KEEL_COMMA Op>, ceil_div(elementwise_threads<F>(N, packs), 256), 256, 0, MAIN_STREAM)(
        dinp, dout, inp, N, packs);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
