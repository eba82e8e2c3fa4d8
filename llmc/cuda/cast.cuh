// cuda/cast.cuh — the compute copy of the parameters; the contract of cpu/cast.h:
//   cast_from_f32: out[i] = round_to_F(inp[i])   (round to nearest even; F = float copies)
// Legend: N elements. One thread per element. Under --bf16/--fp16 the optimizer updates the fp32
// master weights and this op refreshes the bf16/fp16 weights the forward and backward read.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

template <typename F> __global__ void cast_from_f32_kernel(F* out, const float* inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = from_f32<F>(inp[i]);
}

template <typename F> void cast_from_f32(F* out, const float* inp, size_t N) {
    if (N == 0) return;
    KEEL_LAUNCH(cast_from_f32_kernel<F>, ceil_div(N, 256), 256, 0, MAIN_STREAM)(out, inp, N);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
