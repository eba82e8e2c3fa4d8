// backend.h — picks the op set and memory functions the trainer is compiled against.
//
// train_gpt.cu is backend-agnostic (docs/internals.md#repository-shape): it calls the ops below by name. The CPU op set
// (llmc/cpu/*.h: fp32 OpenMP kernels, the readable reference of the method) builds train_gpt_cpu;
// KEEL_CUDA selects the CUDA op set (llmc/cuda/*.cuh, namespace keel_cuda, same signatures) for
// train_gpt — here and nowhere else. Under the CUDA build every buffer the ops touch is device
// memory: host code reaches it only through backend_copy_to_host/to_device (the CUDA emulation
// of the tests enforces that by keeping device memory inaccessible outside kernels and copies).
#pragma once
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "llmc/common.h"

#ifdef KEEL_CUDA
#include "llmc/cuda/adam8bit.cuh"
#include "llmc/cuda/adamw.cuh"
#include "llmc/cuda/attention.cuh"
#include "llmc/cuda/cast.cuh"
#include "llmc/cuda/classifier.cuh"
#include "llmc/cuda/device.cuh"
#include "llmc/cuda/dropout.cuh"
#include "llmc/cuda/encoder.cuh"
#include "llmc/cuda/flash_attention.cuh"
#include "llmc/cuda/gelu.cuh"
#include "llmc/cuda/headscale.cuh"
#include "llmc/cuda/layernorm.cuh"
#include "llmc/cuda/matmul.cuh"
#include "llmc/cuda/relu.cuh"
#include "llmc/cuda/residual.cuh"
using namespace keel_cuda;  // the CUDA op set, same names and signatures as the CPU's
#else
#include "llmc/cpu/adam8bit.h"
#include "llmc/cpu/adamw.h"
#include "llmc/cpu/attention.h"
#include "llmc/cpu/cast.h"
#include "llmc/cpu/classifier.h"
#include "llmc/cpu/dropout.h"
#include "llmc/cpu/encoder.h"
#include "llmc/cpu/flash_attention.h"
#include "llmc/cpu/gelu.h"
#include "llmc/cpu/headscale.h"
#include "llmc/cpu/layernorm.h"
#include "llmc/cpu/matmul.h"
#include "llmc/cpu/relu.h"
#include "llmc/cpu/residual.h"
#endif

static inline const char* backend_name() {
#ifdef KEEL_CUDA
#ifdef KEEL_CUDA_EMULATION
    return "cuda (kernels under the CPU emulation of the CUDA execution model, test/cuda_emu)";
#else
    return "cuda (cuBLASLt matmul)";
#endif
#else
    static char name[64];
    snprintf(name, sizeof name, "cpu (fp32, OpenMP, %s matmul)", gemm_isa());
    return name;
#endif
}

#ifdef KEEL_CUDA
// Device memory on the GPU; sizes in bytes; failures name the size.
static inline void* backend_malloc(size_t bytes) {
    void* p = nullptr;
    if (bytes && cudaMalloc(&p, bytes) != cudaSuccess)
        keel_die_code(KEEL_EXIT_RUNTIME, "use a smaller model or micro-batch (or more GPUs with --zero-stage 1)",
                      "out of GPU memory allocating %zu bytes", bytes);
    return p;
}
static inline void backend_free(void* p) { CUDA_CHECK(cudaFree(p)); }
// What a run may still allocate: the device's free memory (the CUDA context, other processes on
// the same GPU and anything already allocated are outside it). The trainer compares its planned
// total with this before allocating, so a model that cannot fit is refused with its figures.
static inline double backend_memory_available() {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return (double)free_b;
}
static inline const char* backend_memory_name() { return "GPU memory free on this device"; }
// The device's compute capability as 10·major + minor (the flash kernels need 80).
static inline int backend_compute_capability() {
    int dev = 0;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    return 10 * prop.major + prop.minor;
}
// The first visible GPU's name and memory (bytes), for --dry-run's --gpu-type auto; false: none.
static inline bool backend_gpu_found(std::string* name, double* mem_bytes) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) return false;
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return false;
    *name = prop.name;
    *mem_bytes = (double)prop.totalGlobalMem;
    return true;
}
// On keel's stream (cuda/stream.h); a copy to the host waits for it, one to the device does not
// (pageable sources are staged at the call: the caller may reuse them at once).
static inline void backend_memset_zero(void* p, size_t bytes) { device_memset_zero(p, bytes); }
static inline void backend_memset_bytes(void* p, int value, size_t bytes) { device_memset_bytes(p, value, bytes); }
static inline void backend_copy_to_host(void* dst, const void* src, size_t bytes) { device_to_host(dst, src, bytes); }
static inline void backend_copy_to_device(void* dst, const void* src, size_t bytes) { host_to_device(dst, src, bytes); }
static inline void backend_copy_on_device(void* dst, const void* src, size_t bytes) { device_to_device(dst, src, bytes); }
// The step's small uploads (ids, targets, token groups): through pinned slots, never a host wait
// (cuda/common.cuh host_upload); backend_upload_reserve sizes the slots at set-up.
static inline void backend_upload(void* dst, const void* src, size_t bytes) { host_upload(dst, src, bytes); }
static inline void backend_upload_reserve(size_t bytes) { upload_reserve(bytes); }
// Time marks (llmc/op_times.h): mark i is a CUDA event recorded on keel's stream, so the time between
// two marks is the stream's, not the host's. backend_marks_reserve makes the events before the timed
// iteration (the host then only records them); a mark past them makes one more.
struct BackendMarks {
    std::vector<cudaEvent_t> events;
};
static inline void backend_marks_reserve(BackendMarks* b, size_t n) {
    while (b->events.size() < n) {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreate(&e));
        b->events.push_back(e);
    }
}
static inline void backend_mark(BackendMarks* b, size_t i) {
    backend_marks_reserve(b, i + 1);
    CUDA_CHECK(cudaEventRecord(b->events[i], keel_stream()));
}
// The host waits for the last mark, as for any result: under the watchdog, polling NCCL's errors
// (the iteration's last collectives are queued before it: a dead peer must not hang this wait).
static inline void backend_marks_wait(BackendMarks* b, size_t last) {
    const char* what = "waiting for the GPU (--time-ops: the end of the timed iteration)";
    WatchedWait w(what, "");
    gpu_wait_event(b->events[last], what);
}
// ms from mark i to mark j (both recorded, j's reached: backend_marks_wait)
static inline double backend_marks_ms(BackendMarks* b, size_t i, size_t j) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, b->events[i], b->events[j]));
    return ms;
}
static inline void backend_marks_free(BackendMarks* b) {
    for (cudaEvent_t e : b->events) CUDA_CHECK(cudaEventDestroy(e));
    b->events.clear();
}
#else
// Device memory: host memory on the CPU backend. Sizes in bytes; failures name the size.
static inline void* backend_malloc(size_t bytes) {
    void* p = nullptr;
    if (bytes && posix_memalign(&p, 64, bytes) != 0)
        keel_die_code(KEEL_EXIT_RUNTIME, "use a smaller model or micro-batch", "out of memory allocating %zu bytes", bytes);
    return p;
}
static inline void backend_free(void* p) { free(p); }
// The machine's physical memory (0 if unknown): a total above it can never fit. (A lower total can
// still be too much once other processes are counted; the check is for what can never fit.)
static inline double backend_memory_available() {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 0;
}
static inline const char* backend_memory_name() { return "this machine's memory"; }
static inline int backend_compute_capability() { return 0; }  // (no GPU: only the GPU build asks)
static inline bool backend_gpu_found(std::string*, double*) { return false; }  // (the CPU trainer plans a GPU it does not have)
static inline void backend_memset_zero(void* p, size_t bytes) { memset(p, 0, bytes); }
static inline void backend_memset_bytes(void* p, int value, size_t bytes) { memset(p, value, bytes); }
// (bytes == 0 may come with null pointers: an empty span, a rank holding no slice; memcpy's
// arguments must not be null even then — UBSan, test/sanitize.sh)
static inline void backend_copy_to_host(void* dst, const void* src, size_t bytes) { if (bytes) memcpy(dst, src, bytes); }
static inline void backend_copy_to_device(void* dst, const void* src, size_t bytes) { if (bytes) memcpy(dst, src, bytes); }
static inline void backend_copy_on_device(void* dst, const void* src, size_t bytes) { if (bytes) memcpy(dst, src, bytes); }
static inline void backend_upload(void* dst, const void* src, size_t bytes) { if (bytes) memcpy(dst, src, bytes); }
static inline void backend_upload_reserve(size_t) {}
// Time marks (llmc/op_times.h): the ops run synchronously, so mark i is the host's monotonic clock.
struct BackendMarks {
    std::vector<double> ms;
};
static inline void backend_mark(BackendMarks* b, size_t i) {
    if (b->ms.size() <= i) b->ms.resize(i + 1);
    b->ms[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static inline void backend_marks_reserve(BackendMarks* b, size_t n) { b->ms.reserve(n); }
static inline void backend_marks_wait(BackendMarks*, size_t) {}
static inline double backend_marks_ms(BackendMarks* b, size_t i, size_t j) { return b->ms[j] - b->ms[i]; }
static inline void backend_marks_free(BackendMarks* b) { b->ms.clear(); }
#endif
