// cuda/common.cuh — what every CUDA op file uses: the check macros, the launch convention, float
// type conversions, 128-bit packs (Pack128, load128/store128, the element-wise launch shape), the
// grid-wide fence and the fixed-order warp/block reductions.
//
// The op set lives in namespace keel_cuda, so a test can hold it beside the CPU op set (same names,
// same signatures as llmc/cpu); llmc/backend.h brings it into scope for the CUDA trainer.
//
// Launch convention (one macro, used for every launch):
//     KEEL_LAUNCH(kernel, grid, block, smem, stream)(args...);
// is exactly `kernel<<<grid, block, smem, stream>>>(args...)` under nvcc. `<<< >>>` is not C++,
// and keel's kernels also compile with g++ against the CPU emulation of the CUDA execution model
// (test/cuda_emu; docs/gpu.md and docs/emulator.md), which defines KEEL_LAUNCH as a call of its
// launcher before this file is read. A macro rather than a preprocessing step: the GPU build stays
// plain CUDA, and what a reader sees is what both compilers compile. Kernel names passed to it have
// at most one template argument (a comma would split the macro argument). `kernel` is a kernel's
// name, not a variable holding a function pointer: the emulation also takes it as a template
// argument, to look up the instantiation's registers per thread (docs/emulator.md).
// Dynamic shared memory: KEEL_DYNAMIC_SHARED(float, buf); declares `float* buf` over the launch's
// smem bytes (nvcc: one extern __shared__ array; emulation: the launch's buffer).
// Static shared memory: KEEL_SHARED(float, red, [32]); is `__shared__ float red[32];` (dimensions as
// written, none for a scalar). Under the emulation the declaration also tells the emulator where the
// array lives, so that it can fill it with a pattern at every block start (KEEL_EMU_POISON) and
// check every access to it in its checked build (docs/emulator.md).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

#include "llmc/common.h"
#include "llmc/cuda/stream.h"
#include "llmc/watchdog.h"
#include "llmc/ops.h"

// KEEL_UNROLL before a loop with a constant trip count: nvcc unrolls it, so register arrays indexed
// by its counter stay in registers (a run-time index puts them in local memory: a stack frame in
// the ptxas report). g++ (the emulation) does not know the pragma.
// KEEL_NO_UNROLL keeps a loop rolled: one copy of its body's code where unrolling would only make
// the kernel longer (more instruction-cache misses) for no register it could keep.
#if defined(__CUDACC__)
#define KEEL_UNROLL _Pragma("unroll")
#define KEEL_NO_UNROLL _Pragma("unroll 1")
#else
#define KEEL_UNROLL
#define KEEL_NO_UNROLL
#endif

#ifndef KEEL_LAUNCH
#define KEEL_LAUNCH(kernel, grid, block, smem, stream) kernel<<<(grid), (block), (smem), (stream)>>>
#define KEEL_DYNAMIC_SHARED(T, name)                      \
    extern __shared__ __align__(16) char keel_smem_raw_[]; \
    T* name = (T*)keel_smem_raw_
#define KEEL_SHARED(T, name, dims) __shared__ T name dims
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

// ---- arithmetic rounded as the CPU op rounds it (one rounding per operation, never an FMA) -------
// nvcc fuses a·b + c into one FMA by default (--fmad=true), and whether it does depends on the code
// around the two: two paths of one kernel that spell the same formula (the LayerNorm's vector and
// scalar loads, 1 or 3 chunks in flight) rounded differently on an H200.
// These intrinsics are never contracted and no fast-math flag relaxes them; kernels that promise
// the same bits on every path (or the CPU's bits) spell their arithmetic with them.
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

// keel runs its ops on one stream, in program order (cuda/stream.h: a created stream, never the
// legacy default one; the NCCL backend issues on it too, llmc/comm.h). An OpStreamScope can move the
// ops' kernels to another stream (tests); the scratch they share then orders itself (DeviceScratch
// below), while NCCL calls and the optimizer's tables stay ordered against keel_stream().
#define MAIN_STREAM (keel_op_stream())

static inline unsigned ceil_div(size_t n, size_t d) { return (unsigned)((n + d - 1) / d); }

// Copies and memsets on keel's stream (never the legacy one). To the host: the host then waits for
// the stream (the values are needed now). To the device: the host source may change right after the
// call only when it is pageable memory (the runtime stages it at the call); a pinned source must stay
// unchanged until the stream has passed the copy (backend_upload keeps a ring of pinned slots for that).
// The host's waits on the GPU, where a wedged kernel or an NCCL call stuck on a dead peer shows: each
// is bounded by the watchdog (WatchedWait), and in a process with NCCL communicators it polls until
// the work is done, checking NCCL's asynchronous errors between polls (llmc/watchdog.h): a peer
// that died ends the job at once, named, instead of leaving this rank blocked until the timeout. The
// synchronize after the poll returns at once (the work is done) and reports a failed kernel as
// before. A few yields first (the wait is usually short), then sleeps of 50 µs: a spinning host
// thread would take a core from the data loader and the writer threads.
template <typename Query> static inline void gpu_poll_until_done(Query query, const char* what) {
    for (unsigned polls = 0;; polls++) {
        if (query() != cudaErrorNotReady) return;  // done, or failed (the synchronize after reports it)
        watchdog_check_comm_errors(what);
        if (polls < 64) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}
static inline void gpu_wait_event(cudaEvent_t e, const char* what) {
    if (watchdog_polls_comm_errors()) gpu_poll_until_done([e] { return cudaEventQuery(e); }, what);
    CUDA_CHECK(cudaEventSynchronize(e));
}

// A copy into pageable host memory returns only once it has run, i.e. after everything queued
// before it: with NCCL communicators the stream is waited for first, polling, so that a hang on a
// dead peer is met in the poll rather than inside cudaMemcpyAsync.
static inline void device_to_host(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    const char* what = "waiting for the GPU (a copy to the host after the queued kernels and NCCL calls)";
    WatchedWait w(what, "");
    if (watchdog_polls_comm_errors()) gpu_poll_until_done([] { return cudaStreamQuery(MAIN_STREAM); }, what);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, MAIN_STREAM));
    CUDA_CHECK(cudaStreamSynchronize(MAIN_STREAM));
}
static inline void host_to_device(void* dst, const void* src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, MAIN_STREAM));
}
static inline void device_memset_zero(void* p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, MAIN_STREAM));
}
static inline void device_memset_bytes(void* p, int value, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, value, bytes, MAIN_STREAM));
}
static inline void device_to_device(void* dst, const void* src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, MAIN_STREAM));
}

// The step's uploads (token ids, targets, the word-embedding gradient's token groups) go through a
// ring of UPLOAD_SLOTS pinned host buffers: the host copies its data into the next slot and queues an
// asynchronous copy from there, so it never waits for the transfer (a copy from pageable memory
// would go through the driver's staging at the call). A slot is written again only after the stream
// has passed the copy that last read it (an event per slot): the host waits there only when it is a
// whole ring of uploads ahead of the GPU. upload_reserve sizes the slots at set-up (no allocation in
// a step; a larger upload later grows them).
enum { UPLOAD_SLOTS = 8 };
struct UploadRing {
    void* slot[UPLOAD_SLOTS] = {};
    cudaEvent_t done[UPLOAD_SLOTS] = {};
    size_t bytes = 0;  // each slot's size
    unsigned next = 0;
};
static inline UploadRing* upload_ring() {
    static UploadRing r;
    return &r;
}
static inline void upload_reserve(size_t bytes) {
    UploadRing* r = upload_ring();
    if (bytes <= r->bytes) return;
    for (int k = 0; k < UPLOAD_SLOTS; k++) {
        if (r->done[k]) CUDA_CHECK(cudaEventSynchronize(r->done[k]));
        else CUDA_CHECK(cudaEventCreateWithFlags(&r->done[k], cudaEventDisableTiming));
        if (r->slot[k]) CUDA_CHECK(cudaFreeHost(r->slot[k]));
        CUDA_CHECK(cudaMallocHost(&r->slot[k], bytes));
    }
    r->bytes = bytes;
}
static inline void host_upload(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    UploadRing* r = upload_ring();
    upload_reserve(bytes);
    unsigned k = r->next++ % UPLOAD_SLOTS;
    cudaError_t ready = cudaEventQuery(r->done[k]);  // the slot's last copy has run (or it never had one)
    if (ready == cudaErrorNotReady) {
        const char* what = "waiting for the GPU (an upload slot's earlier copy)";
        WatchedWait w(what, "");
        gpu_wait_event(r->done[k], what);
    } else {
        CUDA_CHECK(ready);
    }
    memcpy(r->slot[k], src, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, r->slot[k], bytes, cudaMemcpyHostToDevice, MAIN_STREAM));
    CUDA_CHECK(cudaEventRecord(r->done[k], MAIN_STREAM));
}

// A device buffer that grows on demand and is kept for the next call (reduction partials, the
// attention backward's ds, the chunk table): one cudaMalloc per size increase, none in the steady state.
// Counters kept in scratch (LayerNorm's blocks-done, flash attention's dQ turns) carry each launch's
// tag, so a launch that stopped part-way leaves nothing a later one reads as its own
// (cuda/layernorm.cuh, cuda/flash_attention.cuh).
// An op's scratch: one device buffer shared by every call of the op (reserved once at set-up, no
// allocation in a step). Calls on one stream are ordered by the stream. A call on another stream
// than the last user's is ordered after everything that stream had been given so far (an event
// recorded there, waited for by the new stream), so two streams never hold the same scratch at once:
// the sharing is serialized on the GPU, never left to chance (test_cuda_streams runs the ops on two
// streams that run apart). keel's ops all run on keel_stream() today, where this costs nothing: a
// pointer comparison per call.
struct DeviceScratch {
    void* ptr = nullptr;
    size_t bytes = 0;
    cudaStream_t stream = nullptr;  // the stream of the last call that used it (nullptr: none yet)
    cudaEvent_t handoff = nullptr;  // recorded there when another stream takes it over
};
// The scratch for a call about to be issued on `stream` (MAIN_STREAM): orders it after the last user.
static inline void scratch_take(DeviceScratch* s, cudaStream_t stream) {
    if (s->stream && s->stream != stream) {
        if (!s->handoff) CUDA_CHECK(cudaEventCreateWithFlags(&s->handoff, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventRecord(s->handoff, s->stream));
        CUDA_CHECK(cudaStreamWaitEvent(stream, s->handoff, 0));
    }
    s->stream = stream;
}
// At least `bytes` of the scratch, for a call on MAIN_STREAM (grown if smaller: the model reserves
// the largest at set-up; cudaFree of the old buffer waits for the work still using it).
static inline void* scratch_reserve(DeviceScratch* s, size_t bytes) {
    if (bytes > s->bytes) {
        CUDA_CHECK(cudaFree(s->ptr));
        CUDA_CHECK(cudaMalloc(&s->ptr, bytes));
        s->bytes = bytes;
    }
    scratch_take(s, MAIN_STREAM);
    return s->ptr;
}

// ---- the device and a kernel's shared memory ---------------------------------------------------
// The device this process runs on, its properties read once.
static inline const cudaDeviceProp& cuda_device() {
    static const cudaDeviceProp prop = [] {
        int dev = 0;
        cudaDeviceProp p;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
        return p;
    }();
    return prop;
}
// Opts a kernel into `bytes` of dynamic shared memory (past the default 48 KiB) once: the attribute
// is per kernel function, so each instantiation keeps its own `done`.
template <typename K> static void smem_optin(K kernel, size_t bytes, bool* done) {
    if (*done) return;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = true;
}

// ---- float types -------------------------------------------------------------------------------
// Kernels are templated on the storage type F of activations and weights (float under --fp32,
// __nv_bfloat16 under --bf16, __half under --fp16); arithmetic is always fp32: load with to_f32,
// store with from_f32 (round to nearest even). Statistics, losses and parameter gradients are fp32
// buffers whatever F (docs/internals.md#precision).
__device__ __host__ inline float to_f32(float x) { return x; }
__device__ __host__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __host__ inline float to_f32(__half x) { return __half2float(x); }
template <typename F> __device__ __host__ inline F from_f32(float x);
template <> __device__ __host__ inline float from_f32<float>(float x) { return x; }
template <> __device__ __host__ inline __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ __host__ inline __half from_f32<__half>(float x) { return __float2half(x); }

// ---- 128-bit loads and stores -----------------------------------------------------------------------
// A thread that moves 16 bytes per instruction (8 bf16/fp16 or 4 fp32) needs a quarter to an eighth
// of the load/store instructions of one moving a scalar, which is what lets a memory-bound kernel reach
// the GPU's bandwidth. Pack<T, V> is V values of T moved as one access (V a power of two, aligned to
// its size up to 16 bytes); Pack128<T> is the 16-byte one, 16/sizeof(T) values. pack_load/pack_store
// (load128/store128) need an address aligned to the pack; the ops check alignment on the host
// (aligned16) and fall back to scalar accesses otherwise, with the same per-element arithmetic, so
// both paths give the same bits.
// KEEL_COMMA lets a kernel with two template arguments pass through KEEL_LAUNCH (a literal comma
// would split the macro argument): KEEL_LAUNCH(kernel<F KEEL_COMMA V>, ...).
#define KEEL_COMMA ,
template <typename T, int V> struct alignas(V * sizeof(T) >= 16 ? 16 : V * sizeof(T)) Pack {
    static constexpr int SIZE = V;
    T v[V];
};
template <typename T> using Pack128 = Pack<T, 16 / (int)sizeof(T)>;
template <typename T, int V> __device__ inline Pack<T, V> pack_load(const T* p) {
#ifdef __CUDA_ARCH__
    return *reinterpret_cast<const Pack<T, V>*>(p);  // one vector load (ld.global.v4 for 16 bytes)
#else
    Pack<T, V> r;  // host compilers (the CPU emulation): memcpy, as T is not Pack for strict aliasing
    memcpy(&r, p, sizeof r);
    return r;
#endif
}
template <typename T, int V> __device__ inline void pack_store(T* p, const Pack<T, V>& x) {
#ifdef __CUDA_ARCH__
    *reinterpret_cast<Pack<T, V>*>(p) = x;  // one vector store
#else
    memcpy(p, &x, sizeof x);
#endif
}
template <typename T> __device__ inline Pack128<T> load128(const T* p) { return pack_load<T, Pack128<T>::SIZE>(p); }
template <typename T> __device__ inline void store128(T* p, const Pack128<T>& x) { pack_store<T, Pack128<T>::SIZE>(p, x); }
static inline bool aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }
// An L2-only load (ld.global.cg) of a 16-, 8- or 4-byte pack: for data other blocks wrote during
// this kernel, read after the grid's acquire (grid_fence) — never from a line this multiprocessor's
// L1 kept from before. Unlike a volatile load, it leaves the compiler free to issue several at once.
template <typename T, int V> __device__ inline Pack<T, V> pack_load_cg(const T* p) {
    static_assert(sizeof(Pack<T, V>) == 16 || sizeof(Pack<T, V>) == 8 || sizeof(Pack<T, V>) == 4, "a 16-, 8- or 4-byte pack");
    Pack<T, V> r;
#ifdef __CUDA_ARCH__
    if constexpr (sizeof(r) == 16) {
        int4 x = __ldcg(reinterpret_cast<const int4*>(p));
        memcpy(&r, &x, sizeof r);
    } else if constexpr (sizeof(r) == 8) {
        int2 x = __ldcg(reinterpret_cast<const int2*>(p));
        memcpy(&r, &x, sizeof r);
    } else {
        int x = __ldcg(reinterpret_cast<const int*>(p));
        memcpy(&r, &x, sizeof r);
    }
#else
    memcpy(&r, p, sizeof r);
#endif
    return r;
}

// The element-wise launch shape: with every pointer 16-byte aligned, thread t < packs handles the
// pack of elements [t·V, t·V + V) (V = Pack128<F>::SIZE) and the threads after it one element each of
// the N % V tail; otherwise packs = 0 and every thread handles one element (the scalar fallback).
template <typename F> static inline size_t elementwise_packs(size_t N, bool aligned) {
    return aligned ? N / Pack128<F>::SIZE : 0;
}
template <typename F> static inline size_t elementwise_threads(size_t N, size_t packs) {
    return packs + (N - packs * Pack128<F>::SIZE);
}
// In the kernel: the element a tail thread t >= packs handles (>= N: none).
template <typename F> __device__ inline size_t elementwise_tail_index(size_t t, size_t packs) {
    return packs * Pack128<F>::SIZE + (t - packs);
}

// ---- 2^x in one instruction -----------------------------------------------------------------------
// exp2_approx(x): the multi-function unit's ex2.approx.ftz (what exp2f compiles to under
// --use_fast_math): relative error below 2^-22, and a result below 2^-126 flushed to 0. exp2f proper
// wraps that instruction in three more per value to produce denormal results, and expf in more
// still; the softmax kernels (flash attention, the classifier) spend most of their instructions
// there. The emulation: exp2f with the same flush.
__device__ inline float exp2_approx(float x) {
#ifdef __CUDA_ARCH__
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    float r = exp2f(x);
    return r < 1.17549435e-38f ? 0.0f : r;
#endif
}

// ---- ordering between the blocks of one grid ------------------------------------------------------
// grid_fence(): this thread's global writes become visible to every block of the grid before its later
// writes (the "last block done" pattern: partials, fence, then the counter). The emulation runs the
// blocks of a grid one after another, so there is nothing to order there.
__device__ inline void grid_fence() {
#ifndef KEEL_CUDA_EMULATION
    __threadfence();
#endif
}

// ---- fixed-order reductions ----------------------------------------------------------------------
// Butterfly over the 32 lanes: every lane ends with the same sum, added in the same tree whatever
// the data, so the result is a function of the inputs alone (docs/internals.md#determinism: no float atomics).
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
