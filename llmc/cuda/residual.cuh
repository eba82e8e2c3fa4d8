// cuda/residual.cuh — the residual add; the contract of cpu/residual.h:
//   forward: out = a + b;   backward: da += dout, db += dout
// Legend: N elements. One thread per element.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

template <typename F> __global__ void residual_forward_kernel(F* out, const F* a, const F* b, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = from_f32<F>(to_f32(a[i]) + to_f32(b[i]));
}

template <typename F> __global__ void residual_backward_kernel(F* da, F* db, const F* dout, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float d = to_f32(dout[i]);
    da[i] = from_f32<F>(to_f32(da[i]) + d);
    db[i] = from_f32<F>(to_f32(db[i]) + d);
}

template <typename F> void residual_forward(F* out, const F* a, const F* b, size_t N) {
    if (N == 0) return;
    KEEL_LAUNCH(residual_forward_kernel<F>, ceil_div(N, 256), 256, 0, MAIN_STREAM)(out, a, b, N);
    CUDA_CHECK_LAUNCH();
}

template <typename F> void residual_backward(F* da, F* db, const F* dout, size_t N) {
    if (N == 0) return;
    KEEL_LAUNCH(residual_backward_kernel<F>, ceil_div(N, 256), 256, 0, MAIN_STREAM)(da, db, dout, N);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
