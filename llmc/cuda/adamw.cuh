// cuda/adamw.cuh — the optimizer's elementwise kernels; the contract of cpu/adamw.h:
//   adamw_update: m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²
//                 p -= lr·( (m/bc1) / (sqrt(v/bc2) + eps) + wd·p )      (bc1, bc2 passed in)
//   grad_scale:        g *= s
//   grad_round_fp16:   g = fp16_round(g)                                   (llmc/ops.h)
//   grad_unscale_check: g *= (float)inv_scale, returns whether any result is inf/NaN
//   sumsq_f64, count_zeros: Σ x² in double and the number of exact zeros of one range
//   sumsq_zeros_chunks: both of those for many chunks of one buffer in one launch (the gradient
//                 norm's per-chunk partials, llmc/optimizer.h); out[2c] = Σ x², out[2c+1] = zeros.
// Legend: n elements of one flat range; nchunks ranges (offset, numel) of one buffer.
//
// Numerics. The elementwise ops run one thread per element with the CPU's float formula, rounded
// the CPU's way: the CPU build has -ffp-contract=off, while nvcc fuses a·b+c into one FMA by
// default (--fmad=true), so the kernels spell every operation as an _rn intrinsic (fmul_rn & co.
// below), which nvcc never contracts and which fast-math flags do not relax. sqrt and division are
// IEEE round-to-nearest on both sides: the updated p, m, v are bit-identical to the CPU's.
// The reductions are deterministic but not the CPU's order (its 8 lanes would be 8 threads): each
// thread adds its grid-strided elements in ascending order, the block adds its threads in a fixed
// tree (block_sum), a second single-block kernel adds the per-block partials in a fixed order. The
// grid is a function of n alone, so the result is a function of the data alone; it agrees with the
// CPU's sum to ~1e-15..1e-13 relative (exact float squares added in double; the test allows 1e-12).
// Zero counts are exact.
// The unscale check ORs an int flag per block on the host: order-independent, no atomics.
#pragma once
#include <algorithm>
#include <vector>

#include "llmc/cuda/common.cuh"

namespace keel_cuda {

// ---- arithmetic rounded as the CPU op rounds it (one rounding per operation, never an FMA) -------
__device__ inline float fmul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
__device__ inline float fadd_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
__device__ inline float fsub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
__device__ inline float fdiv_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}
__device__ inline float fsqrt_rn(float a) {
#ifdef __CUDA_ARCH__
    return __fsqrt_rn(a);
#else
    return sqrtf(a);
#endif
}

// ---- elementwise --------------------------------------------------------------------------------
__global__ void adamw_update_kernel(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                                    float beta2, float eps, float wd, float bc1, float bc2) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i];
    float mi = fadd_rn(fmul_rn(beta1, m[i]), fmul_rn(1.0f - beta1, gi));
    float vi = fadd_rn(fmul_rn(beta2, v[i]), fmul_rn(fmul_rn(1.0f - beta2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    float mhat = fdiv_rn(mi, bc1), vhat = fdiv_rn(vi, bc2), pi = p[i];
    float step = fadd_rn(fdiv_rn(mhat, fadd_rn(fsqrt_rn(vhat), eps)), fmul_rn(wd, pi));
    p[i] = fsub_rn(pi, fmul_rn(lr, step));
}

__global__ void grad_scale_kernel(float* g, int64_t n, float s) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = fmul_rn(g[i], s);
}

__global__ void grad_round_fp16_kernel(float* g, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = fp16_round(g[i]);
}

// Non-finite: exponent all ones (inf or NaN). On the bits, so no host/device isfinite overloads.
__device__ inline bool nonfinite_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7F800000u) == 0x7F800000u;
}

// flags: (gridDim.x) — 1 where the block saw a non-finite unscaled value.
__global__ void grad_unscale_check_kernel(int* flags, float* g, size_t n, float s) {
    __shared__ int shared[32];
    int found = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = fmul_rn(g[i], s);
        g[i] = x;
        found |= nonfinite_f32(x);
    }
    found = block_sum(found, shared);  // a count of threads that found one: any non-zero is "yes"
    if (threadIdx.x == 0) flags[blockIdx.x] = found != 0;
}

// ---- reductions ---------------------------------------------------------------------------------
// What one element adds to the reduction, and its type: a square in double, or a zero count. A
// float's square is exact in double (24 + 24 significand bits < 53), so whether nvcc fuses it into
// the accumulating add changes nothing.
// In: the element type read (converted to float first).
struct SumSqTerm {
    typedef double T;
    typedef float In;
    __device__ static T of(float x) { return (double)x * (double)x; }
};
template <typename X> struct SumSqOf : SumSqTerm { typedef X In; };
struct ZeroTerm {
    typedef long long T;
    typedef float In;
    __device__ static T of(float x) { return x == 0.0f ? 1 : 0; }
};

enum { REDUCE_THREADS = 256, REDUCE_MAX_BLOCKS = 1024, REDUCE_PER_THREAD = 16 };

// The grid of the first pass: a function of n alone (the determinism contract), enough blocks to
// fill a GPU, at least REDUCE_PER_THREAD elements per thread so small ranges use few blocks.
static inline unsigned reduce_blocks(int64_t n) {
    unsigned b = ceil_div((size_t)n, (size_t)REDUCE_THREADS * REDUCE_PER_THREAD);
    return b < (unsigned)REDUCE_MAX_BLOCKS ? b : (unsigned)REDUCE_MAX_BLOCKS;
}

// partial: (gridDim.x) — block b's sum over the elements i ≡ (b·blockDim + t) mod (grid·blockDim).
template <typename Term> __global__ void reduce_partials_kernel(typename Term::T* partial, const typename Term::In* x, int64_t n) {
    typedef typename Term::T T;
    __shared__ T shared[32];
    T acc = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc += Term::of(to_f32(x[i]));
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block: thread t adds partials t, t + blockDim, ... in order, then the fixed tree; out: (1).
template <typename T> __global__ void reduce_final_kernel(T* out, const T* partial, int nparts) {
    __shared__ T shared[32];
    T acc = 0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += partial[i];
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) *out = acc;
}

// Runs both passes and copies the result to the host (the copy waits for the kernels).
template <typename Term> static typename Term::T reduce_to_host(const typename Term::In* x, int64_t n) {
    typedef typename Term::T T;
    static DeviceScratch scratch;  // (blocks + 1) partials, the last slot the result
    if (n <= 0) return 0;
    unsigned blocks = reduce_blocks(n);
    T* partial = (T*)scratch_reserve(&scratch, (blocks + 1) * sizeof(T));
    KEEL_LAUNCH(reduce_partials_kernel<Term>, blocks, REDUCE_THREADS, 0, MAIN_STREAM)(partial, x, n);
    CUDA_CHECK_LAUNCH();
    KEEL_LAUNCH(reduce_final_kernel<T>, 1, REDUCE_THREADS, 0, MAIN_STREAM)(partial + blocks, partial, (int)blocks);
    CUDA_CHECK_LAUNCH();
    T result;
    CUDA_CHECK(cudaMemcpy(&result, partial + blocks, sizeof(T), cudaMemcpyDeviceToHost));
    return result;
}

// One block per chunk. table: (2, nchunks) — element offsets, then numels; out: (nchunks, 2) —
// Σ x² and the zero count (exact in a double below 2^53) of each chunk.
__global__ void sumsq_zeros_chunks_kernel(double* out, const float* base, const int64_t* table, int nchunks) {
    __shared__ double shared_d[32];
    __shared__ long long shared_z[32];
    int c = blockIdx.x;
    const float* x = base + table[c];
    int64_t n = table[nchunks + c];
    double sumsq = 0;
    long long zeros = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        sumsq += SumSqTerm::of(x[i]);
        zeros += ZeroTerm::of(x[i]);
    }
    sumsq = block_sum(sumsq, shared_d);
    zeros = block_sum(zeros, shared_z);
    if (threadIdx.x == 0) {
        out[2 * c] = sumsq;
        out[2 * c + 1] = (double)zeros;
    }
}

// ---- launchers ----------------------------------------------------------------------------------
static inline void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                                float beta2, float eps, float wd, float bc1, float bc2) {
    if (n <= 0) return;
    KEEL_LAUNCH(adamw_update_kernel, ceil_div(n, 256), 256, 0, MAIN_STREAM)(p, g, m, v, n, lr, beta1, beta2, eps, wd, bc1, bc2);
    CUDA_CHECK_LAUNCH();
}

// Σx² of any storage type (the layer statistics read bf16 activations).
template <typename X> static inline double sumsq_f64(const X* x, int64_t n) { return reduce_to_host<SumSqOf<X>>(x, n); }

static inline int64_t count_zeros(const float* x, int64_t n) { return (int64_t)reduce_to_host<ZeroTerm>(x, n); }

static inline void grad_scale(float* g, int64_t n, float s) {
    if (n <= 0) return;
    KEEL_LAUNCH(grad_scale_kernel, ceil_div(n, 256), 256, 0, MAIN_STREAM)(g, n, s);
    CUDA_CHECK_LAUNCH();
}

static inline void grad_round_fp16(float* g, size_t n) {
    if (n == 0) return;
    KEEL_LAUNCH(grad_round_fp16_kernel, ceil_div(n, 256), 256, 0, MAIN_STREAM)(g, n);
    CUDA_CHECK_LAUNCH();
}

// inv_scale is rounded to float once, on the host, as the CPU op does (Megatron's convention).
static inline bool grad_unscale_check(float* g, size_t n, double inv_scale) {
    static DeviceScratch scratch;  // (blocks) int flags
    if (n == 0) return false;
    unsigned blocks = reduce_blocks((int64_t)n);
    int* flags = (int*)scratch_reserve(&scratch, blocks * sizeof(int));
    KEEL_LAUNCH(grad_unscale_check_kernel, blocks, REDUCE_THREADS, 0, MAIN_STREAM)(flags, g, n, (float)inv_scale);
    CUDA_CHECK_LAUNCH();
    std::vector<int> host(blocks);
    CUDA_CHECK(cudaMemcpy(host.data(), flags, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    int found = 0;
    for (int f : host) found |= f;
    return found != 0;
}

// out: host (nchunks, 2); base: device; offsets, numels: host (nchunks). One launch for all chunks.
static inline void sumsq_zeros_chunks(double* out, const float* base, const int64_t* offsets, const int64_t* numels,
                                      size_t nchunks) {
    static DeviceScratch table_scratch, out_scratch;
    if (nchunks == 0) return;
    std::vector<int64_t> table(2 * nchunks);  // (2, nchunks): offsets, then numels
    std::copy(offsets, offsets + nchunks, table.begin());
    std::copy(numels, numels + nchunks, table.begin() + nchunks);
    int64_t* d_table = (int64_t*)scratch_reserve(&table_scratch, table.size() * sizeof(int64_t));
    double* d_out = (double*)scratch_reserve(&out_scratch, 2 * nchunks * sizeof(double));
    CUDA_CHECK(cudaMemcpy(d_table, table.data(), table.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
    KEEL_LAUNCH(sumsq_zeros_chunks_kernel, (unsigned)nchunks, REDUCE_THREADS, 0, MAIN_STREAM)(d_out, base, d_table, (int)nchunks);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(out, d_out, 2 * nchunks * sizeof(double), cudaMemcpyDeviceToHost));
}

}  // namespace keel_cuda
