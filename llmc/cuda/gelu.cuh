// cuda/gelu.cuh — GeLU, tanh approximation; the contract of cpu/gelu.h:
//   forward:  y = 0.5·x·(1 + tanh(k·(x + 0.044715·x³))),  k = sqrt(2/π)
//   backward: dx += dy · [0.5·(1+th) + 0.5·x·(1-th²)·k·(1 + 3·0.044715·x²)]
// Legend: N elements. fp32 arithmetic (tanhf) whatever the storage type F.
// The kernels are cuda/activation.cuh's (128-bit packs, a scalar tail) with the per-element
// functions gelu_value and gelu_grad.
#pragma once
#include "llmc/cuda/activation.cuh"

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

struct GeluOp {
    static __device__ float value(float x) { return gelu_value(x); }
    static __device__ float grad(float dx, float dy, float x) { return gelu_grad(dx, dy, x); }
};

template <typename F> void gelu_forward(F* out, const F* inp, size_t N) { activation_forward<GeluOp>(out, inp, N); }
template <typename F> void gelu_backward(F* dinp, const F* dout, const F* inp, size_t N) { activation_backward<GeluOp>(dinp, dout, inp, N); }

}  // namespace keel_cuda
