// cuda/residual.cuh — the residual add; the contract of cpu/residual.h:
//   forward: out = a + b;   backward: da += dout, db += dout
// Legend: N elements. Each thread handles one 128-bit pack of every operand (common.cuh's
// element-wise launch shape); the tail and misaligned buffers one element per thread, with the same
// per-element arithmetic, so both paths give the same bits. (The residual add that feeds a LayerNorm
// is fused with it: residual_layernorm_forward, cuda/layernorm.cuh.)
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

template <typename F> __global__ void residual_forward_kernel(F* out, const F* a, const F* b, size_t N, size_t packs) {
    constexpr int V = Pack128<F>::SIZE;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < packs) {
        Pack128<F> x = load128(a + t * V), y = load128(b + t * V);
        for (int k = 0; k < V; k++) x.v[k] = from_f32<F>(to_f32(x.v[k]) + to_f32(y.v[k]));
        store128(out + t * V, x);
        return;
    }
    size_t i = elementwise_tail_index<F>(t, packs);
    if (i < N) out[i] = from_f32<F>(to_f32(a[i]) + to_f32(b[i]));
}

template <typename F> __global__ void residual_backward_kernel(F* da, F* db, const F* dout, size_t N, size_t packs) {
    constexpr int V = Pack128<F>::SIZE;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < packs) {
        Pack128<F> x = load128(da + t * V), y = load128(db + t * V), d = load128(dout + t * V);
        for (int k = 0; k < V; k++) {
            float dk = to_f32(d.v[k]);
            x.v[k] = from_f32<F>(to_f32(x.v[k]) + dk);
            y.v[k] = from_f32<F>(to_f32(y.v[k]) + dk);
        }
        store128(da + t * V, x);
        store128(db + t * V, y);
        return;
    }
    size_t i = elementwise_tail_index<F>(t, packs);
    if (i >= N) return;
    float d = to_f32(dout[i]);
    da[i] = from_f32<F>(to_f32(da[i]) + d);
    db[i] = from_f32<F>(to_f32(db[i]) + d);
}

template <typename F> void residual_forward(F* out, const F* a, const F* b, size_t N) {
    if (N == 0) return;
    size_t packs = elementwise_packs<F>(N, aligned16(out) && aligned16(a) && aligned16(b));
    KEEL_LAUNCH(residual_forward_kernel<F>, ceil_div(elementwise_threads<F>(N, packs), 256), 256, 0, MAIN_STREAM)(
        out, a, b, N, packs);
    CUDA_CHECK_LAUNCH();
}

template <typename F> void residual_backward(F* da, F* db, const F* dout, size_t N) {
    if (N == 0) return;
    size_t packs = elementwise_packs<F>(N, aligned16(da) && aligned16(db) && aligned16(dout));
    KEEL_LAUNCH(residual_backward_kernel<F>, ceil_div(elementwise_threads<F>(N, packs), 256), 256, 0, MAIN_STREAM)(
        da, db, dout, N, packs);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
