// cuda/cast.cuh — the compute copy of the parameters; the contract of cpu/cast.h:
//   cast_from_f32: out[i] = round_to_F(inp[i])   (round to nearest even; F = float copies)
// Legend: N elements. Under --bf16/--fp16 the optimizer updates the fp32 master weights and this op
// refreshes the bf16/fp16 weights the forward and backward read.
// Each thread converts 8 consecutive elements (bf16/fp16: one 128-bit store of out, two 128-bit loads
// of inp; fp32: 4 elements, one load and one store) — the 16 bytes of the narrower operand. The tail
// (N % 8) and misaligned buffers go one element per thread; the conversion is the same either way.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

template <typename F> __global__ void cast_from_f32_kernel(F* out, const float* inp, size_t N, size_t packs) {
    constexpr int V = Pack128<F>::SIZE, VF = Pack128<float>::SIZE;  // V is a multiple of VF
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < packs) {
        Pack128<F> y;
        for (int j = 0; j < V / VF; j++) {
            Pack128<float> x = load128(inp + t * V + j * VF);
            for (int k = 0; k < VF; k++) y.v[j * VF + k] = from_f32<F>(x.v[k]);
        }
        store128(out + t * V, y);
        return;
    }
    size_t i = elementwise_tail_index<F>(t, packs);
    if (i < N) out[i] = from_f32<F>(inp[i]);
}

template <typename F> void cast_from_f32(F* out, const float* inp, size_t N) {
    if (N == 0) return;
    size_t packs = elementwise_packs<F>(N, aligned16(out) && aligned16(inp));
    KEEL_LAUNCH(cast_from_f32_kernel<F>, ceil_div(elementwise_threads<F>(N, packs), 256), 256, 0, MAIN_STREAM)(out, inp, N, packs);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
