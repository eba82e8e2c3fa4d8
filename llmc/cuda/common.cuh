// cuda/common.cuh — what every CUDA op file uses: the check macros, the launch convention, float
// type conversions and the fixed-order warp/block reductions.
//
// The op set lives in namespace keel_cuda, so a test can hold it beside the CPU op set (same names,
// same signatures: STYLE 1-2); llmc/backend.h brings it into scope for the CUDA trainer.
//
// Launch convention (one macro, used for every launch):
//     KEEL_LAUNCH(kernel, grid, block, smem, stream)(args...);
// is exactly `kernel<<<grid, block, smem, stream>>>(args...)` under nvcc. `<<< >>>` is not C++,
// and keel's kernels also compile with g++ against the CPU emulation of the CUDA execution model
// (test/cuda_emu, ../shared/CUDA_EMULATION.md), which defines KEEL_LAUNCH as a call of its
// launcher before this file is read. A macro rather than a preprocessing step: the GPU build stays
// plain CUDA, and what a reader sees is what both compilers compile. Kernel names passed to it have
// at most one template argument (a comma would split the macro argument).
// Dynamic shared memory: KEEL_DYNAMIC_SHARED(float, buf); declares `float* buf` over the launch's
// smem bytes (nvcc: one extern __shared__ array; emulation: the launch's buffer).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "llmc/common.h"
#include "llmc/ops.h"

#ifndef KEEL_LAUNCH
#define KEEL_LAUNCH(kernel, grid, block, smem, stream) kernel<<<(grid), (block), (smem), (stream)>>>
#define KEEL_DYNAMIC_SHARED(T, name)                      \
    extern __shared__ __align__(16) char keel_smem_raw_[]; \
    T* name = (T*)keel_smem_raw_
#endif

// CUDA_CHECK(call): the failing call, file:line and the runtime's error string, then exit 1.
#define CUDA_CHECK(call)                                                                                   \
    do {                                                                                                   \
        cudaError_t cuda_status_ = (call);                                                                 \
        if (cuda_status_ != cudaSuccess)                                                                   \
            keel_die("CUDA call %s failed at %s:%d: %s", #call, __FILE__, __LINE__, cudaGetErrorString(cuda_status_)); \
    } while (0)
// After every launch: a bad configuration (too many threads, too much shared memory) fails here,
// at its launch site, not at the next synchronizing call.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace keel_cuda {

// keel runs its ops on the default stream: one stream, in program order (the NCCL backend
// synchronizes with it, llmc/comm.h).
static const cudaStream_t MAIN_STREAM = 0;

static inline unsigned ceil_div(size_t n, size_t d) { return (unsigned)((n + d - 1) / d); }

// A device buffer that grows on demand and is kept for the next call (reduction partials, the
// attention backward's ds, the chunk table): one cudaMalloc per size increase, none in the steady state.
struct DeviceScratch {
    void* ptr = nullptr;
    size_t bytes = 0;
};
static inline void* scratch_reserve(DeviceScratch* s, size_t bytes) {
    if (bytes > s->bytes) {
        CUDA_CHECK(cudaFree(s->ptr));
        CUDA_CHECK(cudaMalloc(&s->ptr, bytes));
        s->bytes = bytes;
    }
    return s->ptr;
}
// (cudaFree of the old buffer waits for the work still using it.)

// ---- float types -------------------------------------------------------------------------------
// Kernels are templated on the storage type F of activations and weights (float under --fp32,
// __nv_bfloat16 under --bf16, __half under --fp16); arithmetic is always fp32: load with to_f32,
// store with from_f32 (round to nearest even). Statistics, losses and parameter gradients are fp32
// buffers whatever F (DESIGN §3).
__device__ __host__ inline float to_f32(float x) { return x; }
__device__ __host__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __host__ inline float to_f32(__half x) { return __half2float(x); }
template <typename F> __device__ __host__ inline F from_f32(float x);
template <> __device__ __host__ inline float from_f32<float>(float x) { return x; }
template <> __device__ __host__ inline __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ __host__ inline __half from_f32<__half>(float x) { return __float2half(x); }

// ---- fixed-order reductions ----------------------------------------------------------------------
// Butterfly over the 32 lanes: every lane ends with the same sum, added in the same tree whatever
// the data, so the result is a function of the inputs alone (DESIGN §4: no float atomics).
template <typename T> __device__ inline T warp_sum(T v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
template <typename T> __device__ inline T warp_max(T v) {
    for (int off = 16; off > 0; off >>= 1) {
        T o = __shfl_xor_sync(0xffffffffu, v, off);
        v = o > v ? o : v;
    }
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024): warp sums, then warp 0 adds the
// warp sums in a fixed tree. Every thread gets the result. `shared` holds 32 values of T.
template <typename T> __device__ inline T block_sum(T v, T* shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();  // shared may still be read by a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    T w = lane < warps ? shared[lane] : (T)0;
    return warp_sum(w);
}

// Max over the block, the twin of block_sum: every thread gets it; `shared` holds 32 floats.
__device__ inline float block_max(float v, float* shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();  // shared may still be read by a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float w = lane < warps ? shared[lane] : -INFINITY;
    return warp_max(w);
}

}  // namespace keel_cuda
