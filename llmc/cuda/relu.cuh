// cuda/relu.cuh — ReLU; the contract of cpu/relu.h:
//   forward:  y = max(x, 0);   backward: dx += dy · [x > 0]
// Legend: N elements. The kernels are cuda/activation.cuh's (128-bit packs, a scalar tail) with the
// per-element functions relu_value and relu_grad.
#pragma once
#include "llmc/cuda/activation.cuh"

namespace keel_cuda {

__device__ inline float relu_value(float x) { return x > 0.0f ? x : 0.0f; }
// dx + dy·[x > 0]; where x <= 0 the stored dx is left as it was (rewritten unchanged: the
// conversion to F and back is exact).
__device__ inline float relu_grad(float dx, float dy, float x) { return x > 0.0f ? dx + dy : dx; }

struct ReluOp {
    static __device__ float value(float x) { return relu_value(x); }
    static __device__ float grad(float dx, float dy, float x) { return relu_grad(dx, dy, x); }
};

template <typename F> void relu_forward(F* out, const F* inp, size_t N) { activation_forward<ReluOp>(out, inp, N); }
template <typename F> void relu_backward(F* dinp, const F* dout, const F* inp, size_t N) { activation_backward<ReluOp>(dinp, dout, inp, N); }

}  // namespace keel_cuda
