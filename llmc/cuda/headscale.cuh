// cuda/headscale.cuh — NormFormer's learned per-head scale (--normformer); the contract of
// cpu/headscale.h:
//   forward:  out[n, h·hs + i] = inp[n, h·hs + i] · scale[h]
//   backward: dinp += dout · scale[h];  dscale[h] += Σ_n Σ_i dout·inp   (dscale fp32 whatever F)
// Legend: N rows (B*T), C channels, NH heads, hs = C/NH.
// Element-wise parts: one thread per element, fp32 arithmetic whatever the storage type F.
// Determinism (no float atomics, docs/internals.md#determinism): dscale is a sum over N·hs products per head, done in
// two stages: block (row chunk of HS_ROW_CHUNK rows, head) reduces its chunk with a fixed thread
// assignment and block_sum's fixed tree into a scratch partial, then a thread per head adds the
// chunks' partials in chunk order. The chunking depends on N alone, never on timing.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

enum { HS_THREADS = 256, HS_ROW_CHUNK = 64 };

// The dscale partials (nchunks, NH), kept between calls.
inline float* headscale_scratch(size_t floats) {
    static DeviceScratch s;
    return (float*)scratch_reserve(&s, floats * sizeof(float));
}

template <typename F>
__global__ void headscale_forward_kernel(F* out, const F* inp, const F* scale,  // (N,C), (N,C), (NH)
                                         int C, int hs, size_t n) {             // n = N*C
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = from_f32<F>(to_f32(inp[i]) * to_f32(scale[(int)(i % C) / hs]));
}

template <typename F>
__global__ void headscale_backward_dinp_kernel(F* dinp,                          // (N,C), accumulated into
                                               const F* dout, const F* scale,    // (N,C), (NH)
                                               int C, int hs, size_t n) {        // n = N*C
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    dinp[i] = from_f32<F>(to_f32(dinp[i]) + to_f32(dout[i]) * to_f32(scale[(int)(i % C) / hs]));
}

// Stage 1: block (chunk, h). Thread j takes elements j, j+blockDim, ... of the chunk's rows×hs
// slice of head h; no early return, every thread reaches block_sum's barriers.
template <typename F>
__global__ void headscale_backward_partial_kernel(float* partial,                // (nchunks, NH)
                                                  const F* dout, const F* inp,   // (N,C), (N,C)
                                                  int N, int C, int hs) {
    KEEL_SHARED(float, warp_sums, [32]);
    int chunk = blockIdx.x, h = blockIdx.y, NH = gridDim.y;
    int r0 = chunk * HS_ROW_CHUNK, rows = N - r0 < HS_ROW_CHUNK ? N - r0 : HS_ROW_CHUNK;
    float sum = 0.0f;
    for (int j = threadIdx.x; j < rows * hs; j += blockDim.x) {
        size_t k = (size_t)(r0 + j / hs) * C + (size_t)h * hs + j % hs;
        sum += to_f32(dout[k]) * to_f32(inp[k]);
    }
    sum = block_sum(sum, warp_sums);
    if (threadIdx.x == 0) partial[(size_t)chunk * NH + h] = sum;
}

// Stage 2: a thread per head adds the chunk partials in chunk order.
__global__ void headscale_backward_final_kernel(float* dscale,              // (NH), accumulated into
                                                const float* partial,   // (nchunks, NH)
                                                int nchunks, int NH) {
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= NH) return;
    float sum = 0.0f;
    for (int k = 0; k < nchunks; k++) sum += partial[(size_t)k * NH + h];
    dscale[h] += sum;
}

template <typename F>
void headscale_forward(F* out, const F* inp, const F* scale,   // (N,C), (N,C), (NH)
                       int N, int C, int NH) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    KEEL_LAUNCH(headscale_forward_kernel<F>, ceil_div(n, HS_THREADS), HS_THREADS, 0, MAIN_STREAM)(out, inp, scale, C, C / NH, n);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
void headscale_backward(F* dinp, float* dscale,                     // (N,C), (NH) accumulated into
                        const F* dout, const F* inp, const F* scale, int N, int C, int NH) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    int hs = C / NH;
    KEEL_LAUNCH(headscale_backward_dinp_kernel<F>, ceil_div(n, HS_THREADS), HS_THREADS, 0, MAIN_STREAM)(dinp, dout, scale, C, hs, n);
    CUDA_CHECK_LAUNCH();
    unsigned nchunks = ceil_div(N, HS_ROW_CHUNK);
    float* partial = headscale_scratch((size_t)nchunks * NH);  // (nchunks, NH)
    dim3 grid(nchunks, NH);  // chunks on x: gridDim.y stops at 65535
    KEEL_LAUNCH(headscale_backward_partial_kernel<F>, grid, HS_THREADS, 0, MAIN_STREAM)(partial, dout, inp, N, C, hs);
    CUDA_CHECK_LAUNCH();
    KEEL_LAUNCH(headscale_backward_final_kernel, ceil_div(NH, 128), 128, 0, MAIN_STREAM)(dscale, partial, (int)nchunks, NH);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
