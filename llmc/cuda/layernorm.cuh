// cuda/layernorm.cuh — LayerNorm over channels; the contract of cpu/layernorm.h:
//   forward:  mean = Σx/C, rstd = 1/sqrt(Σ(x-mean)²/C + eps), out = (x-mean)·rstd·w + b
//             saves mean and rstd (N) for the backward.
//   backward: with xhat = (x-mean)·rstd and g = dout·w:
//             dx += rstd·(g - mean(g) - xhat·mean(g·xhat));  dw += Σ_rows dout·xhat;  db += Σ_rows dout
// Legend: N rows (B*T), C channels (any C: 4*hidden under --normformer, not a multiple of 32).
// Numerics: statistics in fp32 whatever the storage type F, two-pass (subtract-mean) variance;
// mean, rstd, dweight and dbias are fp32 buffers (DESIGN §3: fp32 statistics and gradient accumulation).
// Determinism (no float atomics, DESIGN §4):
//   - forward and dinp: one warp per row; each lane sums its channels (lane, lane+32, ...) in order,
//     then warp_sum's fixed butterfly adds the 32 lane sums.
//   - dweight/dbias are a column sum over N rows, done in two stages: a thread per (row chunk of
//     LN_ROW_CHUNK rows, channel) sums its rows in order into a scratch partial, then a thread per
//     channel adds the chunks' partials in chunk order. The chunking depends on N alone, so the order
//     of every addition is a function of the shape, never of timing or the GPU's block schedule.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

enum { LN_WARPS_PER_BLOCK = 8, LN_ROW_CHUNK = 64, LN_COL_THREADS = 256 };

// The dweight/dbias partials (2, nchunks, C), kept between calls (a cudaMalloc per step would
// synchronize the device every backward).
inline float* layernorm_scratch(size_t floats) {
    static DeviceScratch s;
    return (float*)scratch_reserve(&s, floats * sizeof(float));
}

template <typename F>
__global__ void layernorm_forward_kernel(F* out, float* mean, float* rstd,        // (N,C), (N), (N)
                                         const F* inp,                    // (N,C)
                                         const F* weight, const F* bias,  // (C), (C)
                                         int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together: no lane is missing from warp_sum below
    const F* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += to_f32(x[c]);
    float m = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = to_f32(x[c]) - m;
        sq += d * d;
    }
    float s = 1.0f / sqrtf(warp_sum(sq) / C + (float)LAYERNORM_EPS);
    F* o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        o[c] = from_f32<F>((to_f32(x[c]) - m) * s * to_f32(weight[c]) + to_f32(bias[c]));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// dinp, one warp per row: the two row means of the formula, then the per-channel update.
template <typename F>
__global__ void layernorm_backward_dinp_kernel(F* dinp,                           // (N,C), accumulated into
                                               const F* dout, const F* inp,       // (N,C), (N,C)
                                               const F* weight,                   // (C)
                                               const float* mean, const float* rstd,      // (N), (N)
                                               int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // whole warp, as in the forward
    const F* d = dout + (size_t)row * C;
    const F* x = inp + (size_t)row * C;
    float m = mean[row], s = rstd[row];
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float g = to_f32(d[c]) * to_f32(weight[c]);
        g_sum += g;
        gx_sum += g * (to_f32(x[c]) - m) * s;
    }
    float gmean = warp_sum(g_sum) / C, gxmean = warp_sum(gx_sum) / C;
    F* dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float xhat = (to_f32(x[c]) - m) * s;
        float g = to_f32(d[c]) * to_f32(weight[c]);
        dx[c] = from_f32<F>(to_f32(dx[c]) + s * (g - gmean - xhat * gxmean));
    }
}

// Stage 1 of dweight/dbias: block (chunk, channel block); each thread sums the chunk's rows in
// order for its channel. Neighbouring threads read neighbouring channels of one row (coalesced).
template <typename F>
__global__ void layernorm_backward_partial_kernel(float* partial,                // (2, nchunks, C): dw then db
                                                  const F* dout, const F* inp,   // (N,C), (N,C)
                                                  const float* mean, const float* rstd,  // (N), (N)
                                                  int N, int C) {
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int chunk = blockIdx.x, nchunks = gridDim.x;
    int r0 = chunk * LN_ROW_CHUNK, r1 = r0 + LN_ROW_CHUNK < N ? r0 + LN_ROW_CHUNK : N;
    float dw = 0.0f, db = 0.0f;
    for (int n = r0; n < r1; n++) {
        float d = to_f32(dout[(size_t)n * C + c]);
        float xhat = (to_f32(inp[(size_t)n * C + c]) - mean[n]) * rstd[n];
        dw += d * xhat;
        db += d;
    }
    partial[(size_t)chunk * C + c] = dw;
    partial[((size_t)nchunks + chunk) * C + c] = db;
}

// Stage 2: a thread per channel adds the chunk partials in chunk order.
__global__ void layernorm_backward_final_kernel(float* dweight, float* dbias,   // (C), (C), accumulated into
                                                const float* partial,   // (2, nchunks, C)
                                                int nchunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float dw = 0.0f, db = 0.0f;
    for (int k = 0; k < nchunks; k++) {
        dw += partial[(size_t)k * C + c];
        db += partial[((size_t)nchunks + k) * C + c];
    }
    dweight[c] += dw;
    dbias[c] += db;
}

template <typename F>
void layernorm_forward(F* out, float* mean, float* rstd,           // (N,C), (N), (N)
                       const F* inp,                       // (N,C)
                       const F* weight, const F* bias,     // (C), (C)
                       int N, int C) {
    if (N == 0 || C == 0) return;
    KEEL_LAUNCH(layernorm_forward_kernel<F>, ceil_div(N, LN_WARPS_PER_BLOCK), 32 * LN_WARPS_PER_BLOCK, 0,
                MAIN_STREAM)(out, mean, rstd, inp, weight, bias, N, C);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
void layernorm_backward(F* dinp, float* dweight, float* dbias,     // (N,C) (C) (C), accumulated into
                        const F* dout, const F* inp,       // (N,C), (N,C)
                        const F* weight, const float* mean, const float* rstd, int N, int C) {
    if (N == 0 || C == 0) return;
    KEEL_LAUNCH(layernorm_backward_dinp_kernel<F>, ceil_div(N, LN_WARPS_PER_BLOCK), 32 * LN_WARPS_PER_BLOCK, 0,
                MAIN_STREAM)(dinp, dout, inp, weight, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    unsigned nchunks = ceil_div(N, LN_ROW_CHUNK);
    float* partial = layernorm_scratch(2 * (size_t)nchunks * C);  // (2, nchunks, C)
    dim3 grid(nchunks, ceil_div(C, LN_COL_THREADS));  // chunks on x: gridDim.y stops at 65535
    KEEL_LAUNCH(layernorm_backward_partial_kernel<F>, grid, LN_COL_THREADS, 0, MAIN_STREAM)(
        partial, dout, inp, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    KEEL_LAUNCH(layernorm_backward_final_kernel, ceil_div(C, LN_COL_THREADS), LN_COL_THREADS, 0, MAIN_STREAM)(
        dweight, dbias, partial, (int)nchunks, C);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
