// cuda/dropout.cuh — inverted dropout whose mask is a pure function of where the element is; the
// contract of cpu/dropout.h:
//   forward:  out[b,r] = keep(b,r) ? inp[b,r] / (1-p) : 0          (out may alias inp)
//   backward: dinp[b,r] += keep(b,r) ? dout[b,r] / (1-p) : 0
//   keep(b,r) = dropout_keep(site, b, r)  (llmc/ops.h: uniform(seed, DROPOUT, site, first_sample + b, r) >= p)
// Legend: B samples in the micro-batch, R elements per sample.
// Each thread handles one 128-bit pack of every operand (common.cuh's element-wise launch shape;
// the tail and misaligned buffers one element per thread), deciding keep for each element of it.
// The keep decision is dropout_keep's in its integer form (dropout_keep_keyed against the launcher's
// dropout_keep_from(p), llmc/ops.h: no double-precision instruction), so the CUDA mask equals the
// CPU mask bit for bit; the backward regenerates it instead of storing it.
// The DropoutSite is host memory: the launcher copies it by value into the kernel's parameters.
// out may alias inp: each thread reads its pack (or element) before it writes the same one.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

enum { DROPOUT_THREADS = 256 };

// Whether element i of the (B,R) view is kept. keep_from = 0 (p = 0, or so small that every draw passes)
// keeps everything: the short-circuit only skips the hash.
__device__ inline bool dropout_kept(const DropoutSite& d, uint64_t keep_from, size_t i, size_t R) {
    return keep_from == 0 || dropout_keep_keyed(dropout_row_key(&d, (int64_t)(i / R)), (uint64_t)(i % R), keep_from);
}
__device__ inline float dropout_value(float x, const DropoutSite& d, uint64_t keep_from, size_t i, size_t R, float scale) {
    return dropout_kept(d, keep_from, i, R) ? x * scale : 0.0f;
}

template <typename F>
__global__ void dropout_forward_kernel(F* out, const F* inp,    // (B,R), (B,R)
                                       size_t R, size_t n,      // n = B*R
                                       size_t packs, DropoutSite d, uint64_t keep_from, float scale) {
    constexpr int V = Pack128<F>::SIZE;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < packs) {
        Pack128<F> x = load128(inp + t * V);
        for (int k = 0; k < V; k++) x.v[k] = from_f32<F>(dropout_value(to_f32(x.v[k]), d, keep_from, t * V + k, R, scale));
        store128(out + t * V, x);
        return;
    }
    size_t i = elementwise_tail_index<F>(t, packs);
    if (i < n) out[i] = from_f32<F>(dropout_value(to_f32(inp[i]), d, keep_from, i, R, scale));
}

// Dropped elements of dinp are left as they were (a pack rewrites them unchanged: F → fp32 → F is exact).
template <typename F>
__global__ void dropout_backward_kernel(F* dinp, const F* dout,  // (B,R) accumulated into, (B,R)
                                        size_t R, size_t n,      // n = B*R
                                        size_t packs, DropoutSite d, uint64_t keep_from, float scale) {
    constexpr int V = Pack128<F>::SIZE;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < packs) {
        Pack128<F> dx = load128(dinp + t * V), dy = load128(dout + t * V);
        for (int k = 0; k < V; k++) {
            size_t i = t * V + k;
            if (dropout_kept(d, keep_from, i, R))
                dx.v[k] = from_f32<F>(to_f32(dx.v[k]) + to_f32(dy.v[k]) * scale);
        }
        store128(dinp + t * V, dx);
        return;
    }
    size_t i = elementwise_tail_index<F>(t, packs);
    if (i < n && dropout_kept(d, keep_from, i, R))
        dinp[i] = from_f32<F>(to_f32(dinp[i]) + to_f32(dout[i]) * scale);
}

template <typename F>
void dropout_forward(F* out, const F* inp, int B, size_t R, const DropoutSite* d) {
    size_t n = (size_t)B * R;
    if (n == 0 || (d->p == 0.0 && out == inp)) return;  // p = 0 in place: the identity
    float scale = (float)(1.0 / (1.0 - d->p));          // fp32 for any F: a bf16 scale would bias by ~0.1%
    size_t packs = elementwise_packs<F>(n, aligned16(out) && aligned16(inp));
    KEEL_LAUNCH(dropout_forward_kernel<F>, ceil_div(elementwise_threads<F>(n, packs), DROPOUT_THREADS), DROPOUT_THREADS, 0,
                MAIN_STREAM)(out, inp, R, n, packs, *d, dropout_keep_from(d->p), scale);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
void dropout_backward(F* dinp, const F* dout, int B, size_t R, const DropoutSite* d) {
    size_t n = (size_t)B * R;
    if (n == 0) return;
    float scale = (float)(1.0 / (1.0 - d->p));
    size_t packs = elementwise_packs<F>(n, aligned16(dinp) && aligned16(dout));
    KEEL_LAUNCH(dropout_backward_kernel<F>, ceil_div(elementwise_threads<F>(n, packs), DROPOUT_THREADS), DROPOUT_THREADS, 0,
                MAIN_STREAM)(dinp, dout, R, n, packs, *d, dropout_keep_from(d->p), scale);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
