// cuda_runtime.h (emulation) — the CUDA runtime API keel uses, on the CPU (test/cuda_emu/emu_core.h
// runs the kernels). Built with -Itest/cuda_emu, so llmc/cuda's `#include <cuda_runtime.h>` lands
// here and the kernel sources compile unchanged with g++.
//
// Streams and events: by default (KEEL_EMU_STREAMS=sync) labels, and every launch and copy runs
// when issued, in program order. Under KEEL_EMU_STREAMS=async:SEED each stream's work is queued and
// run apart, in a random interleaving that respects only CUDA's guarantees (emu_core.h "streams"):
// a missing cudaStreamWaitEvent or host wait then shows. A created stream is a distinct non-null
// handle, so the profile can count what is issued on the legacy default stream (null, cudaMemcpy,
// cudaMemset).
//
// Every call below that the step profile counts (emu_core.h, KEEL_EMU_PROFILE) reports itself there:
// synchronisations, copies by direction (a blocking device→host cudaMemcpy is a host wait),
// memsets, cudaMalloc/cudaFree.
#pragma once
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "emu_core.h"

typedef int cudaError_t;
enum : int {
    cudaSuccess = 0,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidValue = 1,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600
};
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
typedef struct emu_stream* cudaStream_t;
typedef struct emu_event* cudaEvent_t;
enum { cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2 };

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int multiProcessorCount;
    int major, minor;
    size_t sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor, reservedSharedMemPerBlock;
    int maxThreadsPerBlock;
    int warpSize;
    int clockRate;
};

inline thread_local cudaError_t emu_last_error = cudaSuccess;

inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
    }
    return "unknown error";
}
inline cudaError_t cudaGetLastError() { cudaError_t e = emu_last_error; emu_last_error = cudaSuccess; return e; }
inline cudaError_t cudaPeekAtLastError() { return emu_last_error; }

// The emulated node has 8 GPUs (one per rank of a local mpirun), like an 8-GPU server.
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 8; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaRuntimeGetVersion(int* v) { *v = 0; return cudaSuccess; }
inline cudaError_t cudaDriverGetVersion(int* v) { *v = 0; return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulation of the CUDA execution model");
    p->totalGlobalMem = (size_t)16 << 30;
    p->multiProcessorCount = 2;
    p->major = 9;
    p->minor = 0;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = 163 * 1024;  // an A100's (sm_80): the smallest keel builds for
    p->sharedMemPerMultiprocessor = emu::SMEM_PER_SM;
    p->reservedSharedMemPerBlock = emu::SMEM_RESERVED_PER_BLOCK;
    p->maxThreadsPerBlock = 1024;
    p->warpSize = 32;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
    emu::profile_sync();
    emu::device_sync();
    return cudaSuccess;
}
inline cudaError_t cudaDeviceReset() { return cudaSuccess; }
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
// Raises a kernel's dynamic shared-memory limit: the launcher then allows up to `value` bytes for it
// (emu_core.h's launch limits); the only attribute keel sets.
template <typename K> inline cudaError_t cudaFuncSetAttribute(K kernel, int attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || (size_t)value > emu::MAX_DYNAMIC_SMEM)
        return emu_last_error = cudaErrorInvalidValue;
    emu::smem_optin()[(const void*)kernel] = (size_t)value;
    return cudaSuccess;
}

// Blocks of `kernel` that one multiprocessor holds at once, by threads (2048 a multiprocessor, 32
// blocks) and by shared memory (the emulated device's 164 KB, each block its dynamic bytes plus the
// reserved 1 KB); 0 where the dynamic bytes exceed what the kernel may launch with (48 KiB, or its
// cudaFuncSetAttribute opt-in), as a GPU answers. Registers are not counted here (the emulation knows
// them by kernel name, at launch), so a kernel a GPU holds fewer of by its registers gets more. keel
// asks it only to order a grid's blocks, which changes no result.
template <typename K> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, K kernel, int threads, size_t smem) {
    if (threads <= 0 || threads > 1024) return emu_last_error = cudaErrorInvalidValue;
    auto it = emu::smem_optin().find((const void*)kernel);
    size_t limit = it == emu::smem_optin().end() ? (size_t)emu::DEFAULT_DYNAMIC_SMEM : it->second;
    if (smem > limit) {
        *n = 0;
        return cudaSuccess;
    }
    size_t by_threads = 2048 / (size_t)threads, by_smem = emu::SMEM_PER_SM / (smem + emu::SMEM_RESERVED_PER_BLOCK);
    size_t k = by_threads < by_smem ? by_threads : by_smem;
    *n = (int)(k < 32 ? k : 32);
    return cudaSuccess;
}

inline cudaError_t cudaMalloc(void** p, size_t bytes) {
    *p = emu::device_alloc(bytes);
    if (!*p) return emu_last_error = cudaErrorMemoryAllocation;
    emu::profile_malloc(bytes);
    if (emu::poison().mode && bytes) {  // KEEL_EMU_POISON: fresh memory holds the pattern, not old bytes
        emu::DeviceScope open;
        emu::poison_fill(*p, bytes);
    }
    return cudaSuccess;
}
template <typename T> inline cudaError_t cudaMalloc(T** p, size_t bytes) { return cudaMalloc((void**)p, bytes); }
inline cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    emu::device_sync();  // (cudaFree waits for the device: queued work may still use the memory)
    if (!emu::device_free(p)) return emu_last_error = cudaErrorInvalidValue;
    emu::profile_free();
    return cudaSuccess;
}
// Pinned host memory: a copy from it reads it when the copy runs, not when it is issued.
inline cudaError_t cudaMallocHost(void** p, size_t bytes) {
    *p = malloc(bytes);
    if (!*p) return cudaErrorMemoryAllocation;
    emu::streams().pinned.push_back({(const char*)*p, bytes});
    return cudaSuccess;
}
template <typename T> inline cudaError_t cudaMallocHost(T** p, size_t bytes) { return cudaMallocHost((void**)p, bytes); }
inline cudaError_t cudaFreeHost(void* p) {
    emu::device_sync();
    auto& pinned = emu::streams().pinned;
    for (size_t i = 0; i < pinned.size(); i++)
        if (pinned[i].first == (const char*)p) pinned.erase(pinned.begin() + (long)i--);
    free(p);
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total) {
    *total = (size_t)16 << 30;
    *free_b = *total - emu::arena().used;
    return cudaSuccess;
}

// A copy's direction must match where its pointers live: a host pointer handed to the device side
// of a copy is the kind of bug the emulation exists to catch.
inline cudaError_t emu_check_copy(const void* dst, const void* src, cudaMemcpyKind kind) {
    bool dd = emu::is_device_ptr(dst), sd = emu::is_device_ptr(src);
    bool ok = kind == cudaMemcpyDefault || (kind == cudaMemcpyHostToDevice && dd && !sd) ||
              (kind == cudaMemcpyDeviceToHost && !dd && sd) || (kind == cudaMemcpyDeviceToDevice && dd && sd) ||
              (kind == cudaMemcpyHostToHost && !dd && !sd);
    if (!ok) emu::die("cudaMemcpy: the pointers do not match the copy's direction%s%s", "", "");
    return cudaSuccess;
}
// blocking: cudaMemcpy (the host waits for it, and for the work queued before it) or cudaMemcpyAsync.
// The copy runs in its place on the stream; from pageable host memory its bytes are taken now, and
// into pageable host memory the call returns once it has run (CUDA's rules for unpinned memory).
inline cudaError_t emu_memcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, bool blocking, cudaStream_t stream) {
    emu_check_copy(dst, src, kind);
    emu::profile_copy(emu::is_device_ptr(dst), emu::is_device_ptr(src), bytes, blocking);
    if (!bytes) return cudaSuccess;
    std::shared_ptr<std::vector<char>> staged;
    if (!blocking && !emu::is_device_ptr(src) && !emu::host_pinned(src))
        staged = std::make_shared<std::vector<char>>((const char*)src, (const char*)src + bytes);
    uint64_t id = emu::stream_submit(stream, [=] { memmove(dst, staged ? staged->data() : src, bytes); });
    bool waits = blocking || (!emu::is_device_ptr(dst) && !emu::host_pinned(dst));
    if (waits && (emu::stream_wedged(stream) || (!stream && !emu::streams().wedged.empty()))) emu::hang_forever();
    if (waits) emu::stream_sync_op(id);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    emu::profile_stream(nullptr);
    return emu_memcpy(dst, src, bytes, kind, true, nullptr);
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr) {
    emu::profile_stream(stream);
    return emu_memcpy(dst, src, bytes, kind, false, stream);
}
inline cudaError_t emu_memset(void* p, int v, size_t bytes, cudaStream_t stream) {
    emu::profile_stream(stream);
    if (bytes && !emu::is_device_ptr(p)) emu::die("cudaMemset on a host pointer%s%s", "", "");
    emu::profile_memset(bytes);
    if (bytes) emu::stream_submit(stream, [=] { memset(p, v, bytes); });
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void* p, int v, size_t bytes) { return emu_memset(p, v, bytes, nullptr); }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t bytes, cudaStream_t stream = nullptr) { return emu_memset(p, v, bytes, stream); }

struct emu_stream { unsigned flags; };
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
    *s = new emu_stream{flags};
    emu::stream_created(*s, !(flags & cudaStreamNonBlocking));
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    emu::stream_sync(s);
    emu::streams().queues.erase(s);
    delete s;
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    emu::profile_sync();
    if (emu::stream_wedged(s)) emu::hang_forever();
    emu::stream_sync(s);
    return cudaSuccess;
}
// Not a wait: whether the stream's (or the event's) work is done. A query that finds work left says
// so and then runs one piece of queued work (emu_core.h stream_run_one), as a GPU goes on while the
// host asks, so a host that polls sees it finish; a wedged stream's never does.
inline cudaError_t emu_query(bool (*pending)(const void*), const void* what) {
    if (!pending(what)) return cudaSuccess;
    if (!emu::stream_run_one()) emu::die("streams: queued work waits for an event that nothing will ever record%s%s");
    return cudaErrorNotReady;
}
inline cudaError_t cudaStreamQuery(cudaStream_t s) {
    if (emu::stream_wedged(s)) return cudaErrorNotReady;
    return emu_query([](const void* h) {
        auto it = emu::streams().queues.find(h);
        return it != emu::streams().queues.end() && !it->second.ops.empty();
    }, s);
}
// An event is the point of its stream where it was last recorded (an op id; 0: already passed). A
// null event is one that has always passed; `never`: recorded on a wedged stream, it never passes.
// Timing: when the stream reaches the event's latest record, the host's monotonic clock is read
// (t_ms; `records` tells the latest record from an earlier one still queued), so
// cudaEventElapsedTime gives the time the emulation spent on the work between two events. As on a
// GPU, an event made with cudaEventDisableTiming, or one never recorded, has no time to give. The
// timing state is shared with the queued records, so an event destroyed before its stream reaches
// it (CUDA allows that) leaves them nothing freed to write to.
struct emu_event_time {
    uint64_t records = 0;  // cudaEventRecord calls so far
    bool timed = false;    // the latest record was reached and t_ms read
    double t_ms = 0;
};
struct emu_event {
    uint64_t op;
    bool never = false;
    bool timing = true;
    std::shared_ptr<emu_event_time> time = std::make_shared<emu_event_time>();
};
inline uint64_t emu_event_op(cudaEvent_t e) { return e ? e->op : 0; }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned = 0) {
    emu::profile_trace("wait");
    if (e && e->never) emu::stream_wedge(s);
    if (emu::stream_pending(emu_event_op(e))) emu::stream_submit(s, [] {}, {e->op});
    return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new emu_event{0}; return cudaSuccess; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
    cudaEventCreate(e);
    (*e)->timing = !(flags & cudaEventDisableTiming);
    return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
inline double emu_clock_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
    if (!e) return emu_last_error = cudaErrorInvalidValue;
    e->never = emu::stream_wedged(s);
    std::shared_ptr<emu_event_time> time = e->time;
    uint64_t record = ++time->records;
    time->timed = false;
    e->op = emu::stream_submit(s, [time, record] {
        if (time->records != record) return;  // recorded again since: that record's time counts
        time->t_ms = emu_clock_ms();
        time->timed = true;
    });
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    emu::profile_sync();
    if (e && e->never) emu::hang_forever();
    emu::stream_sync_op(emu_event_op(e));
    return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (e && e->never) return cudaErrorNotReady;
    return emu_query([](const void* ev) { return emu::stream_pending(emu_event_op((cudaEvent_t)ev)); }, e);
}
// (the real call's errors: cudaErrorInvalidResourceHandle for an event without timing or never
// recorded, cudaErrorNotReady for one its stream has not reached)
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!start || !end) return emu_last_error = cudaErrorInvalidValue;
    if (!start->timing || !end->timing || !start->time->records || !end->time->records)
        return emu_last_error = cudaErrorInvalidResourceHandle;
    if (!start->time->timed || !end->time->timed) return cudaErrorNotReady;
    *ms = (float)(end->time->t_ms - start->time->t_ms);
    return cudaSuccess;
}

#include "cuda_bf16.h"
