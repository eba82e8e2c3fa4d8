// emu_core.h — the CUDA execution model on the CPU, so keel's llmc/cuda kernels run under g++ in CI
// (docs/gpu.md and docs/emulator.md). Test-only: nothing here is ever compiled into the GPU build.
//
// What is emulated, and how:
//   - a launch runs the grid's blocks one after another on the calling OS thread, in linear order or
//     the order KEEL_EMU_SCHEDULE asks for (see "schedule exploration");
//   - the threads of a block are cooperative fibers: each has its own stack, and a round-robin
//     scheduler resumes every live fiber until it finishes or reaches a synchronization point;
//   - threadIdx/blockIdx/blockDim/gridDim are thread_local variables the scheduler sets before it
//     resumes a fiber;
//   - __shared__ is `static thread_local`: one copy per OS thread, i.e. per running block (blocks
//     run one at a time per OS thread); dynamic shared memory is a per-launch buffer;
//   - __syncthreads() releases when every unfinished thread of the block has arrived; a warp
//     collective releases when every unfinished lane of the mask has arrived, each having published
//     its value first. A pass of the scheduler in which no fiber can move is a deadlock: a kernel
//     whose barriers do not match, which would hang or be undefined on the GPU too. It is reported
//     with the kernel's launch site and the launch aborts the process.
//   - atomics are read-modify-write between two switches (fibers never interleave inside one).
//
// Fiber switch: a 12-instruction x86-64 / AArch64 context switch (callee-saved registers and the
// stack pointer) instead of swapcontext, which makes a system call per switch to save the signal
// mask; element-wise kernels over a trainer's tensors switch millions of times.
//
// Device memory (cudaMalloc) comes from one reserved arena that is PROT_NONE except while a kernel,
// a cudaMemcpy/cudaMemset or a library call (the cuBLASLt and NCCL shims) runs. Host code that
// dereferences a device pointer — the bug a CPU emulation would otherwise hide, since host and
// device memory are one here — dies with SIGSEGV in CI, as it would on the GPU.
//
// Step profile (KEEL_EMU_PROFILE=FILE): the emulator counts what the program asks of the GPU at the
// CUDA API boundary — launches by kernel, cuBLASLt FLOPs, host synchronisations, allocations, bytes
// moved, NCCL traffic — and writes one JSON object at exit. See "the step profile" below.
#pragma once
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

struct __nv_bfloat16;  // (cuda_bf16.h: the NaN check below tells the 16-bit types apart by name)
struct __half;

// ---- dim3 and the built-in index variables ------------------------------------------------------
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
    unsigned x, y, z;
};
inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;
static constexpr int warpSize = 32;

// ---- fibers --------------------------------------------------------------------------------------
// emu_switch(from, to): saves the callee-saved registers on the current stack, stores the stack
// pointer in *from, loads `to` and restores the registers saved there. A new fiber's stack is laid
// out so that the first switch into it "returns" into emu_fiber_entry.
extern "C" void emu_switch(void** from_sp, void* to_sp);
#if defined(__x86_64__)
asm(R"(
.text
.weak emu_switch
.type emu_switch,@function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
)");
#elif defined(__aarch64__)
asm(R"(
.text
.weak emu_switch
.type emu_switch,%function
emu_switch:
    sub sp, sp, #176
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mov x9, sp
    str x9, [x0]
    mov sp, x1
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #176
    ret
)");
#else
#error "the CUDA emulation has a context switch for x86-64 and AArch64 only"
#endif

// The checked build (KEEL_EMU_RACECHECK, racecheck.h): the emulator's own code that touches shared
// memory on a kernel's behalf is not instrumented (EMU_UNCHECKED) and reports the access itself;
// a hook is kept out of line so that its return address is the kernel's source line.
#ifdef KEEL_EMU_RACECHECK
#define EMU_UNCHECKED __attribute__((no_sanitize_thread))
#define EMU_HOOK __attribute__((noinline, no_sanitize_thread)) inline
#else
#define EMU_UNCHECKED
#define EMU_HOOK inline
#endif

namespace emu {

enum FiberState { FIBER_READY, FIBER_WAIT_BLOCK, FIBER_WAIT_WARP, FIBER_DONE };

struct Fiber {
    void* sp;
    FiberState state;
    unsigned generation;  // the barrier generation it waits to see pass
    uint3 tid;
};

static const size_t FIBER_STACK = 64 * 1024;
// Bytes around each shared array and the dynamic buffer that no access may reach (the checked build
// reports one that does as out of bounds).
enum : size_t { SHARED_REDZONE = 64 };

// One OS thread's scheduler: the fibers of the block it is running.
struct Block {
    std::vector<Fiber> fibers;
    std::vector<char*> stacks;
    void* scheduler_sp = nullptr;
    int current = -1;
    int live = 0;                       // unfinished threads
    unsigned block_gen = 0;             // __syncthreads generation
    int block_arrived = 0;
    std::vector<unsigned> warp_gen;     // per warp
    std::vector<int> warp_arrived;
    std::vector<unsigned> warp_expect;  // the mask of lanes the pending collective waits for
    std::vector<unsigned> warp_live;    // per warp: the lanes that exist and have not finished
    std::vector<uint64_t> warp_slots;   // (warps, 32) published values
    std::vector<unsigned> warp_order;   // per warp: __syncwarp barriers passed (the race checker's order)
    std::vector<char> warp_fence;       // per warp: whether the pending collective is a __syncwarp
    const std::function<void()>* body = nullptr;
    std::vector<char> smem_storage;     // the dynamic shared memory with SHARED_REDZONE bytes either side
    char* smem_base = nullptr;          // the launch's dynamic shared memory: smem_bytes bytes
    size_t smem_bytes = 0;
    const char* kernel_name = "";
    std::vector<unsigned> order;        // the fibers in the schedule's order (KEEL_EMU_SCHEDULE)
    uint64_t serial = 0;                // blocks this OS thread has started: which block declared a static array
};
inline thread_local Block tl_block;

// The pseudo-random generator of the schedule and the poison (splitmix64: one state word).
inline uint64_t splitmix64(uint64_t* state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

[[noreturn]] inline void die(const char* fmt, const char* a = "", const char* b = "") {
    fprintf(stderr, "cuda emulation: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    exit(3);
}

inline void fiber_yield(FiberState why) {
    Block* b = &tl_block;
    Fiber* f = &b->fibers[b->current];
    f->state = why;
    emu_switch(&f->sp, b->scheduler_sp);
}

extern "C" inline void emu_fiber_entry() {
    Block* b = &tl_block;
    (*b->body)();
    Fiber* f = &b->fibers[b->current];
    f->state = FIBER_DONE;
    b->live--;
    b->warp_live[b->current / 32] &= ~(1u << (b->current % 32));
    emu_switch(&f->sp, b->scheduler_sp);  // never resumed
    __builtin_trap();
}

inline void fiber_init(Block* b, int i) {
    char* top = b->stacks[i] + FIBER_STACK;
    top = (char*)((uintptr_t)top & ~(uintptr_t)15);
    void** sp = (void**)top;
#if defined(__x86_64__)
    *--sp = nullptr;                        // fake return address of emu_fiber_entry (16-byte alignment)
    *--sp = (void*)&emu_fiber_entry;        // where emu_switch's `ret` goes
    for (int r = 0; r < 6; r++) *--sp = nullptr;  // rbp rbx r12 r13 r14 r15
#else
    sp -= 22;                               // 176 bytes: x19..x30, d8..d15
    memset(sp, 0, 176);
    sp[11] = (void*)&emu_fiber_entry;       // x30 (link register): where `ret` goes
#endif
    b->fibers[i].sp = sp;
    b->fibers[i].state = FIBER_READY;
}

// ---- barriers ---------------------------------------------------------------------------------
// Whether every unfinished lane of `mask` in warp w has arrived (lanes past the block's last thread
// and finished lanes are not waited for).
inline bool warp_complete(Block* b, int w) {
    // (each waited-for lane adds one arrival: fewer arrivals than such lanes cannot be complete, and
    // the lanes need not be looked at; every arrival but the last is turned away here)
    if (b->warp_arrived[w] < __builtin_popcount(b->warp_expect[w] & b->warp_live[w])) return false;
    int n = (int)b->fibers.size();
    for (int lane = 0; lane < 32; lane++) {
        int i = w * 32 + lane;
        if (i >= n || !(b->warp_expect[w] >> lane & 1u)) continue;
        if (b->fibers[i].state == FIBER_DONE) continue;
        if (!(b->fibers[i].state == FIBER_WAIT_WARP && b->fibers[i].generation == b->warp_gen[w]) && i != b->current) return false;
    }
    return true;
}

// Releases warp w's pending collective; a __syncwarp also orders the warp's memory accesses.
inline void warp_release(Block* b, int w) {
    b->warp_arrived[w] = 0;
    b->warp_gen[w]++;
    if (b->warp_fence[w]) b->warp_order[w]++;
    b->warp_fence[w] = 0;
}

inline void syncthreads() {
    Block* b = &tl_block;
    Fiber* f = &b->fibers[b->current];
    f->generation = b->block_gen;
    if (++b->block_arrived == b->live) {  // the last to arrive releases the others
        b->block_arrived = 0;
        b->block_gen++;
        return;
    }
    fiber_yield(FIBER_WAIT_BLOCK);
}

// A warp barrier over `mask`: returns when every unfinished lane of the mask has arrived. fence: it
// is a __syncwarp, which (unlike a shuffle) also orders the lanes' memory accesses.
inline void warp_sync(unsigned mask, bool fence = false) {
    Block* b = &tl_block;
    int i = b->current, w = i / 32;
    Fiber* f = &b->fibers[i];
    if (b->warp_arrived[w] == 0) b->warp_expect[w] = mask;
    else if (b->warp_expect[w] != mask) die("kernel %s: warp collectives with different masks meet in one warp%s", b->kernel_name);
    if (fence) b->warp_fence[w] = 1;
    f->generation = b->warp_gen[w];
    b->warp_arrived[w]++;
    if (warp_complete(b, w)) {
        warp_release(b, w);
        return;
    }
    fiber_yield(FIBER_WAIT_WARP);
}

// A shuffle: publish, wait for the warp, read lane src's value, wait again (so that no lane
// overwrites its slot for the next collective before every lane has read this one).
template <typename T> inline T warp_exchange(unsigned mask, T v, int src_lane) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "warp shuffles move at most 8 bytes");
    Block* b = &tl_block;
    int w = b->current / 32;
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    b->warp_slots[w * 32 + (b->current % 32)] = bits;
    warp_sync(mask);
    T out;
    int src = w * 32 + src_lane;
    uint64_t sbits = src < (int)b->fibers.size() ? b->warp_slots[src] : bits;
    memcpy(&out, &sbits, sizeof(T));
    warp_sync(mask);
    return out;
}

inline unsigned warp_ballot(unsigned mask, bool pred) {
    Block* b = &tl_block;
    int w = b->current / 32;
    b->warp_slots[b->current] = pred ? 1u : 0u;
    warp_sync(mask);
    unsigned r = 0;
    for (int lane = 0; lane < 32; lane++) {
        int i = w * 32 + lane;
        if (i < (int)b->fibers.size() && (mask >> lane & 1u) && b->fibers[i].state != FIBER_DONE && b->warp_slots[i]) r |= 1u << lane;
    }
    warp_sync(mask);
    return r;
}

// ---- the step profile ----------------------------------------------------------------------------
// What a program asks of the GPU, counted where it asks (the runtime, cuBLASLt and NCCL shims),
// over the whole process. Counting is a few integer additions per call; only the per-kernel table
// (a hash lookup per launch) is skipped when KEEL_EMU_PROFILE is unset, and then nothing is written.
// With it set, one JSON object goes to FILE at exit — exit() or a return from main; not _exit or a
// fatal signal — or to FILE.r on rank r of a multi-rank run (OMPI_COMM_WORLD_RANK / PMI_RANK /
// PMIX_RANK in the environment, or an MPI world of more than one rank seen by the NCCL shim).
// Keys (scripts/gpu_profile.sh reads them; docs/gpu.md):
//   launches, launches_by_kernel   kernel launches, and by the launch's kernel expression as written
//                                  (KEEL_LAUNCH's #kernel, e.g. "matmul_dbias_kernel<F>")
//   gemm_calls, gemm_flops         cublasLtMatmul calls and 2·m·n·k·batch summed over them
//   tensor_core_flops              the part with bf16/fp16 A and B (fp32 inputs under
//                                  CUBLAS_COMPUTE_32F run on CUDA cores, not tensor cores)
//   mma_flops                      warp-level MMA in keel's own kernels (profile_mma: the flash attention's mma.sync)
//   syncs = sync_calls + d2h_copies   host waits: cudaDeviceSynchronize / cudaStreamSynchronize /
//                                  cudaEventSynchronize calls, and blocking device→host cudaMemcpy
//   d2h_async_copies               cudaMemcpyAsync device→host (not a host wait; bytes in d2h_bytes)
//   allocations, alloc_bytes, frees   cudaMalloc calls and the bytes they asked for; cudaFree calls
//   peak_device_bytes              high-water mark of live device memory as the arena holds it
//                                  (each allocation rounded up to 256 bytes)
//   memsets, memset_bytes, h2d_copies, h2d_bytes, d2h_bytes, d2d_copies, d2d_bytes
//   nccl_calls, nccl_bytes, nccl_by_collective   {"allreduce"|"reduce"|"broadcast"|"send"|"recv":
//                                  {"calls", "bytes"}}; bytes: this rank's buffer (count × type size)
//   legacy_stream_ops              launches, cuBLASLt products, NCCL calls, copies and memsets issued
//                                  on the legacy default stream (a null stream, or cudaMemcpy/cudaMemset)
// KEEL_EMU_TRACE=FILE (with or without the profile) writes the order of events, one line each, to FILE
// (FILE.r on rank r), at exit: "launch <kernel>", "gemm", "nccl <collective> <bytes>", "sync",
// "wait" (a stream waiting for another: cudaStreamWaitEvent). For tests of what overlaps what. An NCCL
// line ends with "stream K": the stream it was issued on, numbered from 1 in the order streams are
// first used (0: the legacy default stream).
// The counters assume one host thread issues the CUDA calls (keel's trainers do).
enum ProfileCollective { NCCL_ALLREDUCE, NCCL_REDUCE, NCCL_BROADCAST, NCCL_SEND, NCCL_RECV, NCCL_COLLECTIVES };
static const char* const profile_collective_names[NCCL_COLLECTIVES] = {"allreduce", "reduce", "broadcast", "send", "recv"};

struct Profile {
    bool enabled = false;
    std::string path;                 // KEEL_EMU_PROFILE (before a rank suffix)
    int mpi_rank = -1, mpi_size = 0;  // MPI_COMM_WORLD as the NCCL shim saw it (nccl.h), if it ran
    uint64_t launches = 0;
    std::unordered_map<const char*, uint64_t> launch_sites;  // #kernel string → launches (one string per site)
    uint64_t gemm_calls = 0, gemm_flops = 0, tensor_core_flops = 0, mma_flops = 0;
    uint64_t sync_calls = 0, d2h_copies = 0, d2h_async_copies = 0;
    uint64_t allocations = 0, alloc_bytes = 0, frees = 0, live_bytes = 0, peak_device_bytes = 0;
    uint64_t memsets = 0, memset_bytes = 0;
    uint64_t h2d_copies = 0, h2d_bytes = 0, d2h_bytes = 0, d2d_copies = 0, d2d_bytes = 0;
    uint64_t nccl_calls[NCCL_COLLECTIVES] = {}, nccl_bytes[NCCL_COLLECTIVES] = {};
    uint64_t legacy_stream_ops = 0;
    std::map<const void*, int> stream_numbers;  // streams by first use, from 1
    int last_stream = 0;                        // the number of the stream of the last call
    std::string trace_path;           // KEEL_EMU_TRACE (before a rank suffix); empty: no trace
    std::vector<std::string> trace;
};
inline void trace_write();
inline void profile_write();
// Never destroyed: a static object's destructor may still call cudaFree after the profile is written.
inline Profile& profile() {
    static Profile* p = [] {
        Profile* q = new Profile;
        const char* env = getenv("KEEL_EMU_PROFILE");
        if (env && env[0]) {
            q->enabled = true;
            q->path = env;
            atexit(profile_write);
        }
        const char* tr = getenv("KEEL_EMU_TRACE");
        if (tr && tr[0]) {
            q->trace_path = tr;
            atexit(trace_write);
        }
        return q;
    }();
    return *p;
}

// Made (and, with KEEL_EMU_PROFILE set, registered for the exit) before main runs: a program that
// exits before its first CUDA call still writes its profile, all zeros.
inline const bool profile_started = (profile(), true);

inline void profile_trace(const std::string& line) {
    Profile& p = profile();
    if (!p.trace_path.empty()) p.trace.push_back(line);
}
inline void profile_launch(const char* kernel) {
    Profile& p = profile();
    profile_trace(std::string("launch ") + kernel);
    p.launches++;
    if (p.enabled) p.launch_sites[kernel]++;
}
// A cuBLASLt matmul of 2·m·n·k·batch FLOPs; on tensor cores when its inputs are 16-bit.
inline void profile_gemm(uint64_t flops, bool tensor_cores) {
    Profile& p = profile();
    p.gemm_calls++;
    profile_trace("gemm");
    p.gemm_flops += flops;
    if (tensor_cores) p.tensor_core_flops += flops;
}
// For a kernel that issues warp-level MMA (mma.sync, test/cuda_emu/ptx.h): its FLOPs, 2·m·n·k per tile product.
inline void profile_mma(uint64_t flops) { profile().mma_flops += flops; }
inline void profile_sync() {
    profile().sync_calls++;
    profile_trace("sync");
}
// A call issued on the legacy default stream (stream: the call's stream handle; null is the legacy one).
inline void profile_stream(const void* stream) {
    Profile& p = profile();
    if (!stream) p.legacy_stream_ops++;
    p.last_stream = stream ? p.stream_numbers.emplace(stream, (int)p.stream_numbers.size() + 1).first->second : 0;
}
// A copy between memories: direction from where the pointers live; a blocking device→host copy is
// a host wait (the host cannot go on before the GPU has finished everything queued before it).
inline void profile_copy(bool dst_device, bool src_device, size_t bytes, bool blocking) {
    Profile& p = profile();
    if (src_device && !dst_device) {
        (blocking ? p.d2h_copies : p.d2h_async_copies)++;
        p.d2h_bytes += bytes;
    } else if (!src_device && dst_device) {
        p.h2d_copies++;
        p.h2d_bytes += bytes;
    } else if (src_device && dst_device) {
        p.d2d_copies++;
        p.d2d_bytes += bytes;
    }
}
inline void profile_memset(size_t bytes) {
    profile().memsets++;
    profile().memset_bytes += bytes;
}
inline void profile_malloc(size_t bytes) {
    profile().allocations++;
    profile().alloc_bytes += bytes;
}
inline void profile_free() { profile().frees++; }
// The arena's live bytes (allocation sizes as rounded by the arena) and their high-water mark.
inline void profile_live(int64_t delta) {
    Profile& p = profile();
    p.live_bytes += (uint64_t)delta;  // unsigned wrap-around subtracts
    if (p.live_bytes > p.peak_device_bytes) p.peak_device_bytes = p.live_bytes;
}
inline void profile_nccl(ProfileCollective c, size_t bytes) {
    profile().nccl_calls[c]++;
    profile_trace(std::string("nccl ") + profile_collective_names[c] + " " + std::to_string(bytes) + " stream " +
                  std::to_string(profile().last_stream));
    profile().nccl_bytes[c] += bytes;
}
inline void profile_mpi_world(int rank, int size) {
    profile().mpi_rank = rank;
    profile().mpi_size = size;
}

// This process's rank if it is one of several (-1 if alone): the launcher's environment first, then
// the MPI world the NCCL shim saw. A value that is not a plain non-negative integer is ignored.
inline int profile_rank() {
    for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
        const char* s = getenv(var);
        if (!s || !*s) continue;
        char* end = nullptr;
        long r = strtol(s, &end, 10);
        if (*end == '\0' && r >= 0 && r <= 1 << 30) return (int)r;
    }
    const Profile& p = profile();
    return p.mpi_size > 1 ? p.mpi_rank : -1;
}

inline void profile_json_string(FILE* f, const std::string& s) {
    fputc('"', f);
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

// A launch's kernel expression as written, with the KEEL_COMMA spelling (a template argument list's
// comma inside a macro argument, llmc/cuda) turned back into commas: "k<F, V>".
inline std::string profile_kernel_name(const char* expr) {
    std::string s = expr;
    for (size_t at; (at = s.find("KEEL_COMMA")) != std::string::npos;) {
        size_t from = at > 0 && s[at - 1] == ' ' ? at - 1 : at;
        s.replace(from, at + 10 - from, ",");
    }
    return s;
}

// Writes the profile (at exit): to a temporary name, then renamed, so a reader never sees half a file.
inline void trace_write() {
    const Profile& p = profile();
    std::string path = p.trace_path;
    int rank = profile_rank();
    if (rank >= 0) path += "." + std::to_string(rank);
    FILE* f = fopen(path.c_str(), "w");
    if (!f) {
        fprintf(stderr, "cuda emulation: cannot write the trace to %s (KEEL_EMU_TRACE)\n", path.c_str());
        return;
    }
    for (const std::string& l : p.trace) fprintf(f, "%s\n", l.c_str());
    fclose(f);
}
inline void profile_write() {
    const Profile& p = profile();
    if (!p.enabled) return;
    std::string path = p.path;
    int rank = profile_rank();
    if (rank >= 0) path += "." + std::to_string(rank);
    std::string tmp = path + ".tmp" + std::to_string((long)getpid());
    FILE* f = fopen(tmp.c_str(), "w");
    if (!f) {
        fprintf(stderr, "cuda emulation: cannot write the profile to %s (KEEL_EMU_PROFILE)\n", tmp.c_str());
        return;
    }
    std::map<std::string, uint64_t> by_kernel;  // launch sites of one kernel expression merged, sorted by name
    for (const auto& site : p.launch_sites) by_kernel[profile_kernel_name(site.first)] += site.second;
    auto u = [](uint64_t v) { return (unsigned long long)v; };
    fprintf(f, "{\"launches\": %llu, \"launches_by_kernel\": {", u(p.launches));
    bool first = true;
    for (const auto& k : by_kernel) {
        fprintf(f, first ? "" : ", ");
        profile_json_string(f, k.first);
        fprintf(f, ": %llu", u(k.second));
        first = false;
    }
    fprintf(f, "},\n \"gemm_calls\": %llu, \"gemm_flops\": %llu, \"tensor_core_flops\": %llu, \"mma_flops\": %llu,\n",
            u(p.gemm_calls), u(p.gemm_flops), u(p.tensor_core_flops), u(p.mma_flops));
    fprintf(f, " \"syncs\": %llu, \"sync_calls\": %llu, \"d2h_copies\": %llu, \"d2h_async_copies\": %llu,\n",
            u(p.sync_calls + p.d2h_copies), u(p.sync_calls), u(p.d2h_copies), u(p.d2h_async_copies));
    fprintf(f, " \"allocations\": %llu, \"alloc_bytes\": %llu, \"frees\": %llu, \"peak_device_bytes\": %llu,\n",
            u(p.allocations), u(p.alloc_bytes), u(p.frees), u(p.peak_device_bytes));
    fprintf(f, " \"memsets\": %llu, \"memset_bytes\": %llu, \"h2d_copies\": %llu, \"h2d_bytes\": %llu, \"d2h_bytes\": %llu, "
               "\"d2d_copies\": %llu, \"d2d_bytes\": %llu,\n",
            u(p.memsets), u(p.memset_bytes), u(p.h2d_copies), u(p.h2d_bytes), u(p.d2h_bytes), u(p.d2d_copies), u(p.d2d_bytes));
    uint64_t calls = 0, bytes = 0;
    for (int c = 0; c < NCCL_COLLECTIVES; c++) calls += p.nccl_calls[c], bytes += p.nccl_bytes[c];
    fprintf(f, " \"nccl_calls\": %llu, \"nccl_bytes\": %llu, \"nccl_by_collective\": {", u(calls), u(bytes));
    for (int c = 0; c < NCCL_COLLECTIVES; c++)
        fprintf(f, "%s\"%s\": {\"calls\": %llu, \"bytes\": %llu}", c ? ", " : "", profile_collective_names[c], u(p.nccl_calls[c]),
                u(p.nccl_bytes[c]));
    fprintf(f, "},\n \"legacy_stream_ops\": %llu, \"rank\": %d}\n", u(p.legacy_stream_ops), rank);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
        fprintf(stderr, "cuda emulation: cannot write the profile to %s (KEEL_EMU_PROFILE)\n", path.c_str());
        remove(tmp.c_str());
    }
}

// ---- device memory arena ---------------------------------------------------------------------
// One reserved range; allocations are bump-allocated with 256-byte alignment and freed blocks are
// reused first-fit. Only the used prefix is ever made accessible.
struct Arena {
    char* base = nullptr;
    size_t reserved = 0, used = 0;
    std::vector<std::pair<size_t, size_t>> live;  // (offset, bytes), allocation order
    std::vector<std::pair<size_t, size_t>> holes;
    int open_depth = 0;
    bool protect = true;
};
inline Arena& arena() {
    static Arena a;
    if (!a.base) {
        a.reserved = (size_t)64 << 30;
        const size_t huge = (size_t)2 << 20;  // (the base rounded up to a multiple of 2 MiB, below)
        void* r = mmap(nullptr, a.reserved + huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r == MAP_FAILED) die("could not reserve the device arena%s", "");
        void* p = (void*)(((uintptr_t)r + huge - 1) / huge * huge);
        // Transparent huge pages where the kernel offers them: every launch flips the used prefix's
        // protection (device_open/close), and on 4 KiB pages that walk of page-table entries was a
        // quarter of an emulated trainer's time; a 2 MiB page is one entry (protect_len keeps the
        // flipped range whole pages of 2 MiB, so none is split).
        madvise(p, a.reserved, MADV_HUGEPAGE);
        a.base = (char*)p;
        const char* env = getenv("KEEL_EMU_PROTECT");
        a.protect = !(env && env[0] == '0');
    }
    return a;
}
// The length of the arena's prefix whose protection flips: the used bytes rounded up to 2 MiB (a
// huge page; the arena's base and its reserve are multiples of 2 MiB). The bytes past
// `used` are never handed out before an allocation extends `used`, so opening them too changes
// nothing a program can rely on; while device memory is closed, all of it is closed.
inline size_t protect_len(size_t used) {
    const size_t huge = (size_t)2 << 20;
    return (used + huge - 1) / huge * huge;
}
// Device memory becomes readable and writable for the duration of a kernel or library call.
inline void device_open() {
    Arena& a = arena();
    if (a.open_depth++ == 0 && a.used) mprotect(a.base, protect_len(a.used), PROT_READ | PROT_WRITE);
}
inline void device_close() {
    Arena& a = arena();
    if (--a.open_depth == 0 && a.used && a.protect) mprotect(a.base, protect_len(a.used), PROT_NONE);
}
struct DeviceScope {
    DeviceScope() { device_open(); }
    ~DeviceScope() { device_close(); }
};

inline bool is_device_ptr(const void* p) {
    Arena& a = arena();
    return (const char*)p >= a.base && (const char*)p < a.base + a.reserved;
}

inline void* device_alloc(size_t bytes) {
    Arena& a = arena();
    bytes = (bytes + 255) / 256 * 256;
    if (bytes == 0) bytes = 256;
    for (size_t h = 0; h < a.holes.size(); h++) {
        if (a.holes[h].second < bytes) continue;
        size_t off = a.holes[h].first;
        a.holes[h].first += bytes;
        a.holes[h].second -= bytes;
        if (a.holes[h].second == 0) a.holes.erase(a.holes.begin() + h);
        a.live.push_back({off, bytes});
        profile_live((int64_t)bytes);
        return a.base + off;
    }
    if (a.used + bytes > a.reserved) return nullptr;
    size_t off = a.used;
    a.used += bytes;
    a.live.push_back({off, bytes});
    profile_live((int64_t)bytes);
    if (a.open_depth > 0 || !a.protect) mprotect(a.base, protect_len(a.used), PROT_READ | PROT_WRITE);
    return a.base + off;
}

// KEEL_EMU_POISON=none | nan | ones | random:SEED (default none): what fresh device memory (every
// cudaMalloc), each block's dynamic shared memory and each block's static shared arrays (KEEL_SHARED)
// hold at their start, instead of what the arena or the previous block left:
//   nan     every byte 0xFF: a NaN in fp32, bf16 and fp16 (and -1 in an integer);
//   ones    every 4-byte word 1.0f: finite, so an uninitialized value that a max or a mask would
//           swallow when it is a NaN still changes a sum;
//   random  pseudo-random bytes from SEED, different in every buffer and every block.
// A kernel whose output changes with the pattern reads memory nothing wrote. set_poison overrides
// the variable (the emulator's own test).
enum PoisonMode { POISON_NONE, POISON_NAN, POISON_RANDOM, POISON_ONES };
struct Poison {
    int mode = POISON_NONE;
    uint64_t seed = 0;
};
inline Poison& poison() {
    static Poison p = [] {
        Poison q;
        const char* e = getenv("KEEL_EMU_POISON");
        char* end = nullptr;
        if (!e || !*e || strcmp(e, "none") == 0) return q;
        if (strcmp(e, "nan") == 0) q.mode = POISON_NAN;
        else if (strcmp(e, "ones") == 0) q.mode = POISON_ONES;
        else if (strncmp(e, "random:", 7) == 0 && e[7] && (q.seed = strtoull(e + 7, &end, 10), *end == '\0')) q.mode = POISON_RANDOM;
        else die("KEEL_EMU_POISON=%s: expected none, nan, ones or random:SEED%s", e);
        return q;
    }();
    return p;
}
inline void set_poison(int mode, uint64_t seed = 0) { poison() = Poison{mode, seed}; }
inline void poison_fill(void* p, size_t n) {
    Poison& q = poison();
    unsigned char* c = (unsigned char*)p;
    if (q.mode == POISON_NAN) memset(p, 0xFF, n);
    if (q.mode == POISON_ONES) {
        const float one = 1.0f;
        for (size_t i = 0; i < n; i++) c[i] = ((const unsigned char*)&one)[((uintptr_t)(c + i)) % 4];
    }
    if (q.mode == POISON_RANDOM) {
        for (size_t i = 0; i < n; i += 8) {
            uint64_t z = splitmix64(&q.seed);
            memcpy(c + i, &z, n - i < 8 ? n - i : 8);
        }
    }
}

inline bool device_free(void* p) {
    Arena& a = arena();
    size_t off = (size_t)((char*)p - a.base);
    for (size_t i = 0; i < a.live.size(); i++)
        if (a.live[i].first == off) {
            profile_live(-(int64_t)a.live[i].second);
            a.holes.push_back(a.live[i]);
            a.live.erase(a.live.begin() + i);
            return true;
        }
    return false;
}

// ---- schedule exploration ------------------------------------------------------------------------
// KEEL_EMU_SCHEDULE=in-order | reverse | random:SEED (default in-order): the order in which the
// scheduler resumes the fibers of a block in each pass (one pass ≈ one barrier interval: it also
// decides which lane arrives first at a warp collective) and the order of the blocks of a grid.
// random draws a fresh permutation for every pass and every launch from SEED. keel's contract is
// that no output depends on it: a kernel whose result changes with the schedule has a race (a
// missing barrier) or an order-dependent reduction, both of which a GPU turns into run-to-run
// differences. set_schedule overrides the variable (the emulator's own test).
enum ScheduleMode { SCHEDULE_IN_ORDER, SCHEDULE_REVERSE, SCHEDULE_RANDOM };
struct Schedule {
    ScheduleMode mode = SCHEDULE_IN_ORDER;
    uint64_t state = 0;  // random: the generator's state (splitmix64), advanced per permutation
};
inline Schedule parse_schedule(const char* e) {
    Schedule q;
    if (!e || !*e || strcmp(e, "in-order") == 0) return q;
    char* end = nullptr;
    if (strcmp(e, "reverse") == 0) q.mode = SCHEDULE_REVERSE;
    else if (strncmp(e, "random:", 7) == 0 && e[7] && (q.state = strtoull(e + 7, &end, 10), *end == '\0')) q.mode = SCHEDULE_RANDOM;
    else die("KEEL_EMU_SCHEDULE=%s: expected in-order, reverse or random:SEED%s", e);
    return q;
}
inline Schedule& schedule() {
    static Schedule s = parse_schedule(getenv("KEEL_EMU_SCHEDULE"));
    return s;
}
inline void set_schedule(ScheduleMode mode, uint64_t seed = 0) { schedule() = Schedule{mode, seed}; }
// order = 0..n-1 in the schedule's order (a fresh permutation for random).
inline void schedule_order(std::vector<unsigned>* order, unsigned n) {
    Schedule& s = schedule();
    order->resize(n);
    for (unsigned i = 0; i < n; i++) (*order)[i] = s.mode == SCHEDULE_REVERSE ? n - 1 - i : i;
    if (s.mode != SCHEDULE_RANDOM) return;
    for (unsigned i = n; i > 1; i--) std::swap((*order)[i - 1], (*order)[splitmix64(&s.state) % i]);
}
// Kernels whose blocks wait for blocks of a lower linear index (a spin on a counter that an earlier
// block advances): the GPU dispatches blocks in that order, so such a wait is safe there, and the
// schedule's block order leaves their grids in it. Threads and lanes are still reordered.
inline std::map<const void*, bool>& dispatch_order_kernels() {
    static std::map<const void*, bool> m;
    return m;
}
template <typename K> inline void keep_block_order(K kernel) { dispatch_order_kernels()[(const void*)kernel] = true; }

// ---- streams -------------------------------------------------------------------------------------
// KEEL_EMU_STREAMS=sync | async:SEED (default sync). sync: every launch, copy, memset, cuBLASLt
// product and NCCL call runs when it is issued, in program order (streams and events are labels).
// async: the work is queued per stream and runs only when something needs it — a host wait
// (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, a blocking cudaMemcpy,
// cudaFree) or an NCCL call whose stream must have run first — and then in a random interleaving
// (from SEED) of the queues' heads that respects exactly what CUDA guarantees:
//   - the order of one stream;
//   - cudaStreamWaitEvent: the waiting stream's later work runs after the event's recorded point;
//   - the legacy default stream (a null stream, cudaMemcpy, cudaMemset): its work waits for all
//     work issued before it on blocking streams, and their later work waits for it (streams made
//     with cudaStreamNonBlocking take no part);
//   - a blocking call returns after what it waits for has run.
// A missing wait then shows as a wrong result, or a read of memory not yet written (with
// KEEL_EMU_POISON: the pattern). Copies from pageable host memory take their bytes at the call, as
// CUDA stages them; from pinned memory (cudaMallocHost) when the copy runs. NCCL calls read their
// input when issued, after their stream's earlier work, and write their output when their place in
// the stream comes (nccl.h).
struct StreamOp {
    uint64_t id;
    std::vector<uint64_t> after;  // ops that must have run first (event waits, the legacy stream's rule)
    std::function<void()> run;
};
struct StreamQueue {
    std::deque<StreamOp> ops;
    uint64_t last = 0;      // the last op issued on it
    bool blocking = true;   // (cudaStreamNonBlocking: false)
};
struct Streams {
    bool async = false;
    uint64_t rng = 0, next_id = 1;
    std::map<const void*, StreamQueue> queues;  // by handle; nullptr is the legacy default stream
    std::unordered_set<uint64_t> pending;       // issued, not yet run
    std::vector<std::pair<const char*, size_t>> pinned;  // cudaMallocHost ranges
    std::unordered_set<const void*> wedged;     // streams whose work never finishes (stream_wedge)
};
inline Streams& streams() {
    static Streams* s = [] {
        Streams* q = new Streams;  // (never destroyed: static destructors may still free memory)
        const char* e = getenv("KEEL_EMU_STREAMS");
        char* end = nullptr;
        if (!e || !*e || strcmp(e, "sync") == 0) return q;
        if (strncmp(e, "async:", 6) == 0 && e[6] && (q->rng = strtoull(e + 6, &end, 10), *end == '\0')) q->async = true;
        else die("KEEL_EMU_STREAMS=%s: expected sync or async:SEED%s", e);
        return q;
    }();
    return *s;
}
inline void set_streams(bool async, uint64_t seed = 0) { streams().async = async, streams().rng = seed; }
inline bool stream_pending(uint64_t id) { return id && streams().pending.count(id) != 0; }
inline void stream_created(const void* handle, bool blocking) { streams().queues[handle].blocking = blocking; }

// Queues `run` on the stream (sync: runs it now, with device memory open); returns its id (0 if it ran).
inline uint64_t stream_submit(const void* handle, std::function<void()> run, std::vector<uint64_t> after = {}) {
    Streams& s = streams();
    if (!s.async) {
        DeviceScope open;
        run();
        return 0;
    }
    StreamQueue& q = s.queues[handle];
    if (!handle) {  // the legacy stream waits for every blocking stream's work so far
        for (auto& kv : s.queues)
            if (kv.first && kv.second.blocking && stream_pending(kv.second.last)) after.push_back(kv.second.last);
    } else if (q.blocking && stream_pending(s.queues[nullptr].last)) {
        after.push_back(s.queues[nullptr].last);
    }
    uint64_t id = s.next_id++;
    q.ops.push_back(StreamOp{id, std::move(after), std::move(run)});
    q.last = id;
    s.pending.insert(id);
    return id;
}
inline bool stream_head_ready(const StreamQueue& q) {
    if (q.ops.empty()) return false;
    for (uint64_t a : q.ops.front().after)
        if (stream_pending(a)) return false;
    return true;
}
// Runs one queue head whose waits are over: `first` if given and ready, else one chosen at random;
// false if none can run.
inline bool stream_run_one(StreamQueue* first = nullptr) {
    Streams& s = streams();
    std::vector<StreamQueue*> ready;
    for (auto& kv : s.queues)
        if (stream_head_ready(kv.second)) ready.push_back(&kv.second);
    if (ready.empty()) return false;
    StreamQueue* q = first && stream_head_ready(*first) ? first : ready[splitmix64(&s.rng) % ready.size()];
    StreamOp op = std::move(q->ops.front());
    q->ops.pop_front();
    {
        DeviceScope open;
        op.run();
    }
    s.pending.erase(op.id);
    return true;
}
// Runs queued work until `done` holds. With a target queue (the stream waited for), a coin decides
// per wait whether the target's work goes first whenever it can (the other streams' work then runs
// as late as possible: a consumer that forgot to wait sees its input unwritten) or every step picks
// at random (other work may run early: a producer that forgot to wait overwrites what is still read).
template <typename Pred> inline void stream_drain(Pred done, StreamQueue* target = nullptr) {
    if (target && splitmix64(&streams().rng) % 2) target = nullptr;
    while (!done())
        if (!stream_run_one(target)) die("streams: queued work waits for an event that nothing will ever record%s%s");
}
inline void stream_sync(const void* handle) {
    auto it = streams().queues.find(handle);
    if (it == streams().queues.end()) return;
    StreamQueue* q = &it->second;
    stream_drain([q] { return q->ops.empty(); }, q);
}
inline void stream_sync_op(uint64_t id) {
    StreamQueue* target = nullptr;
    for (auto& kv : streams().queues)
        for (const StreamOp& op : kv.second.ops)
            if (op.id == id) target = &kv.second;
    stream_drain([id] { return !stream_pending(id); }, target);
}
// A wedged stream: its work never finishes, as a GPU's stream behind a kernel that waits forever
// for a peer (the NCCL emulation's injected fault, nccl.h). A host wait on it never returns; an
// event recorded on it never passes, and a stream that waits for that event is wedged too
// (cuda_runtime.h); the legacy stream and a device-wide wait wait for it.
inline void stream_wedge(const void* handle) { streams().wedged.insert(handle); }
inline bool stream_wedged(const void* handle) { return streams().wedged.count(handle) != 0; }
// What the host sees when a wait on the GPU never returns: its other threads (the watchdog) go on,
// and a signal (the launcher's, after an MPI_Abort) ends it.
[[noreturn]] inline void hang_forever() {
    for (;;) sleep(1);
}
inline void device_sync() {
    if (!streams().wedged.empty()) hang_forever();
    stream_drain([] { return streams().pending.empty(); });
}
inline bool host_pinned(const void* p) {
    for (auto& r : streams().pinned)
        if ((const char*)p >= r.first && (const char*)p < r.first + r.second) return true;
    return false;
}

// The checked build's shadow of shared memory (racecheck.h); without it, a declared static array is
// only poisoned.
#ifdef KEEL_EMU_RACECHECK
}  // namespace emu
#include "racecheck.h"
namespace emu {
#else
inline void shared_declared(void*, size_t, const char*, const char*, int) {}
#endif

// ---- launches ------------------------------------------------------------------------------------
inline std::vector<char*>& stack_pool() {
    static thread_local std::vector<char*> pool;
    return pool;
}

// Runs one block of `threads` fibers to completion.
inline void run_block(Block* b, unsigned threads) {
    std::vector<char*>& pool = stack_pool();
    while (pool.size() < threads) pool.push_back((char*)malloc(FIBER_STACK));
    b->fibers.assign(threads, Fiber{});
    b->stacks.assign(pool.begin(), pool.begin() + threads);
    unsigned warps = (threads + 31) / 32;
    b->warp_gen.assign(warps, 0);
    b->warp_arrived.assign(warps, 0);
    b->warp_expect.assign(warps, 0);
    b->warp_live.assign(warps, 0);
    for (unsigned i = 0; i < threads; i++) b->warp_live[i / 32] |= 1u << (i % 32);
    b->warp_slots.assign(warps * 32, 0);
    b->warp_order.assign(warps, 0);
    b->warp_fence.assign(warps, 0);
    b->block_gen = 0;
    b->block_arrived = 0;
    b->live = (int)threads;
    b->serial++;
    if (poison().mode && b->smem_bytes) poison_fill(b->smem_base, b->smem_bytes);
#ifdef KEEL_EMU_RACECHECK
    race_block_start(b->smem_base, b->smem_bytes);
#endif
    for (unsigned i = 0; i < threads; i++) {
        fiber_init(b, (int)i);
        b->fibers[i].tid = {i % blockDim.x, i / blockDim.x % blockDim.y, i / (blockDim.x * blockDim.y)};
    }
    std::vector<unsigned>& order = b->order;
    while (b->live > 0) {
        bool moved = false;
        if (schedule().mode != SCHEDULE_IN_ORDER || order.size() != threads) schedule_order(&order, threads);
        for (unsigned i : order) {
            Fiber* f = &b->fibers[i];
            bool runnable = f->state == FIBER_READY || (f->state == FIBER_WAIT_BLOCK && f->generation != b->block_gen) ||
                            (f->state == FIBER_WAIT_WARP && f->generation != b->warp_gen[i / 32]);
            if (!runnable) continue;
            // a thread that finished may have completed a barrier the others wait on
            f->state = FIBER_READY;
            b->current = (int)i;
            threadIdx = f->tid;
#ifdef KEEL_EMU_RACECHECK
            tl_race_active = true;  // the fiber's accesses are checked, the scheduler's are not
            emu_switch(&b->scheduler_sp, f->sp);
            tl_race_active = false;
#else
            emu_switch(&b->scheduler_sp, f->sp);
#endif
            moved = true;
        }
        if (b->live > 0 && !moved) {
            // finished threads no longer count: release a barrier every live thread has reached
            if (b->block_arrived > 0 && b->block_arrived == b->live) {
                b->block_arrived = 0;
                b->block_gen++;
                continue;
            }
            bool released = false;
            for (unsigned w = 0; w < warps; w++) {
                if (b->warp_arrived[w] == 0) continue;
                b->current = -1;
                if (warp_complete(b, (int)w)) {
                    warp_release(b, (int)w);
                    released = true;
                }
            }
            if (!released) die("deadlock in kernel %s: some threads wait at a barrier the others never reach%s", b->kernel_name);
        }
    }
#ifdef KEEL_EMU_RACECHECK
    race_block_end();
#endif
}

struct LaunchStats {
    uint64_t launches = 0, blocks = 0, threads = 0;
};
inline LaunchStats& stats() {
    static LaunchStats s;
    return s;
}

// The launch limits of the GPU, as the hardware enforces them (a launch outside them fails on a GPU
// with "invalid configuration" or "too many resources", at run time only): block dimensions
// 1024 × 1024 × 64 and 1024 threads, grid dimensions (2^31 − 1) × 65535 × 65535, and dynamic shared
// memory above the 48 KiB default only after cudaFuncSetAttribute(kernel,
// cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) raised the kernel's limit, to at most 163 KiB:
// the A100's (sm_80) limit, the smallest of the architectures keel builds for (an H100/H200, sm_90,
// allows 227 KiB), so a kernel that passes here launches on both. And registers per thread ×
// threads within the register file, threads within __launch_bounds__ (registers.h).
inline std::map<const void*, size_t>& smem_optin() {  // kernel → its raised dynamic shared-memory limit
    static std::map<const void*, size_t> m;
    return m;
}
enum : size_t { DEFAULT_DYNAMIC_SMEM = 48 * 1024, MAX_DYNAMIC_SMEM = 163 * 1024 };
// The emulated device's shared memory a multiprocessor and reserved a block (an A100's), which
// cudaGetDeviceProperties reports and the occupancy query counts.
enum : size_t { SMEM_PER_SM = 164 * 1024, SMEM_RESERVED_PER_BLOCK = 1024 };

// Registers per thread × threads per block, and __launch_bounds__: from ptxas's figures (registers.h).
}  // namespace emu
#include "registers.h"
namespace emu {

// Runs the grid's blocks, in linear order or the schedule's (KEEL_EMU_SCHEDULE).
inline void run_grid(Block* b, dim3 grid, unsigned threads, bool keep_order) {
    LaunchStats& s = stats();
    uint64_t n = (uint64_t)grid.x * grid.y * grid.z;
    bool permute = schedule().mode != SCHEDULE_IN_ORDER && !keep_order;
    if (permute && n > 0xffffffffull) die("a grid of over 2^32 blocks under KEEL_EMU_SCHEDULE%s%s");
    std::vector<unsigned> order;
    if (permute) schedule_order(&order, (unsigned)n);
    for (uint64_t k = 0; k < n; k++) {
        uint64_t i = permute ? order[k] : k;
        blockIdx = {(unsigned)(i % grid.x), (unsigned)(i / grid.x % grid.y), (unsigned)(i / ((uint64_t)grid.x * grid.y))};
        run_block(b, threads);
        s.blocks++;
        s.threads += threads;
    }
}

// ---- where NaNs come from (KEEL_EMU_NANCHECK=1) -----------------------------------------------------
// Around every launch, for each argument that is a pointer to non-const float, bf16 or fp16, the NaNs
// from the pointer to the end of its cudaMalloc allocation are counted before and after the kernel;
// a kernel that made new ones is named on stderr with the argument (the run goes on). Under
// KEEL_EMU_POISON=nan the first kernel named is usually the one that read memory nothing wrote, and
// the argument the buffer its NaNs went to. It costs two scans of those buffers per launch.
enum NanType { NAN_NONE, NAN_F32, NAN_BF16, NAN_F16 };
struct NanCheck {
    bool enabled = false;
    uint64_t reports = 0;
};
inline NanCheck& nancheck() {
    static NanCheck n{getenv("KEEL_EMU_NANCHECK") && strcmp(getenv("KEEL_EMU_NANCHECK"), "1") == 0, 0};
    return n;
}
template <typename T> constexpr NanType nan_type() {
    if constexpr (std::is_same_v<T, float*>) return NAN_F32;
    else if constexpr (std::is_same_v<T, __nv_bfloat16*>) return NAN_BF16;
    else if constexpr (std::is_same_v<T, __half*>) return NAN_F16;
    else return NAN_NONE;
}
struct NanArg {
    int index;
    const char* p;
    NanType type;
    size_t before;
};
// The NaNs from p to the end of its allocation (0 if p is not in one).
inline size_t nan_count(const char* p, NanType t) {
    Arena& a = arena();
    for (auto& l : a.live) {
        const char *lo = a.base + l.first, *hi = lo + l.second;
        if (p < lo || p >= hi) continue;
        size_t n = 0, w = t == NAN_F32 ? 4 : 2;
        for (const char* q = p; q + w <= hi; q += w) {
            uint32_t v = 0;
            memcpy(&v, q, w);
            n += t == NAN_F32 ? (v & 0x7fffffffu) > 0x7f800000u : t == NAN_BF16 ? (v & 0x7fffu) > 0x7f80u : (v & 0x7fffu) > 0x7c00u;
        }
        return n;
    }
    return 0;
}
template <typename T> inline void nan_arg(std::vector<NanArg>* out, int i, const T& v) {
    if constexpr (nan_type<T>() != NAN_NONE) out->push_back(NanArg{i, (const char*)v, nan_type<T>(), 0});
}
template <typename Tuple, size_t... I> inline std::vector<NanArg> nan_args(const Tuple& t, std::index_sequence<I...>) {
    std::vector<NanArg> out;
    (nan_arg(&out, (int)I, std::get<I>(t)), ...);
    for (NanArg& a : out) a.before = nan_count(a.p, a.type);
    return out;
}
inline void nan_report(const char* kernel, const std::vector<NanArg>& args) {
    static const char* const names[] = {"", "float", "bf16", "fp16"};
    for (const NanArg& a : args) {
        size_t after = nan_count(a.p, a.type);
        if (after <= a.before) continue;
        nancheck().reports++;
        fprintf(stderr, "cuda emulation: NaN check: kernel %s made %zu new NaN in its argument %d (%s*, the buffer at device offset %lld)\n",
                profile_kernel_name(kernel).c_str(), after - a.before, a.index + 1, names[a.type], (long long)(a.p - arena().base));
    }
}

template <typename... P> struct Launch {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    const char* name;
    const void* stream;
    const std::string* key;  // the kernel as registers.h looks it up (kernel_key)
    void check(unsigned threads) const {
        if (threads == 0 || threads > 1024) die("kernel %s: %s threads per block (1..1024)", name, threads == 0 ? "0" : "over 1024");
        if (block.z > 64) die("kernel %s: a block's z dimension over 64%s", name);
        if (grid.x == 0 || grid.y == 0 || grid.z == 0) die("kernel %s: an empty grid%s", name);
        if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
            die("kernel %s: a grid dimension over the GPU's limit (x 2^31 - 1, y and z 65535)%s", name);
        if (smem > MAX_DYNAMIC_SMEM) die("kernel %s: dynamic shared memory over 163 KiB (an A100's, sm_80's, limit per block)%s", name);
        if (smem > DEFAULT_DYNAMIC_SMEM) {
            auto it = smem_optin().find((const void*)kernel);
            if (it == smem_optin().end() || smem > it->second)
                die("kernel %s: dynamic shared memory over 48 KiB without cudaFuncSetAttribute(MaxDynamicSharedMemorySize) "
                    "raising the kernel's limit that far first%s: on a GPU the launch fails", name);
        }
        check_registers(*key, threads);
    }
    template <typename... A> void operator()(A&&... args) const {
        // converted as the GPU converts kernel arguments, and kept until the launch runs (KEEL_EMU_STREAMS)
        auto params = std::make_shared<std::tuple<P...>>(std::forward<A>(args)...);
        unsigned threads = block.x * block.y * block.z;
        check(threads);
        stats().launches++;
        profile_launch(name);
        Launch l = *this;
        stream_submit(stream, [l, params, threads] {
            std::function<void()> body = [&]() { std::apply(l.kernel, *params); };
            Block* b = &tl_block;
            b->body = &body;
            b->kernel_name = l.name;
            b->smem_storage.assign(l.smem + 2 * SHARED_REDZONE, 0);
            b->smem_base = b->smem_storage.data() + SHARED_REDZONE;
            b->smem_bytes = l.smem;
            blockDim = l.block;
            gridDim = l.grid;
            std::vector<NanArg> nan_watch;
            if (nancheck().enabled) nan_watch = nan_args(*params, std::index_sequence_for<P...>{});
            run_grid(b, l.grid, threads, dispatch_order_kernels().count((const void*)l.kernel) != 0);
            if (!nan_watch.empty()) nan_report(l.name, nan_watch);
        });
    }
};

// ---- static shared memory -------------------------------------------------------------------------
// A static shared array and, around it, bytes no access may reach (the checked build reports one
// that does as out of bounds).
template <typename X> using SharedRef = X&;
template <typename X> struct SharedStatic {
    alignas(16) unsigned char below[SHARED_REDZONE];
    alignas(16) X v;
    alignas(16) unsigned char above[SHARED_REDZONE];
    uint64_t block = 0;  // the Block::serial of the block that last reached the declaration
};
template <typename X> inline X& shared_static(SharedStatic<X>* s, const char* name, const char* file, int line) {
    Block* b = &tl_block;
    if (s->block != b->serial) {  // the block's first thread here: no thread of this block has touched it
        s->block = b->serial;
        poison_fill(&s->v, sizeof s->v);
        shared_declared(&s->v, sizeof s->v, name, file, line);
    }
    return s->v;
}


// K is the kernel again, as a template argument: kernel_key<K> names the instantiation launched.
template <auto K, typename... P>
Launch<P...> make_launch(void (*k)(P...), dim3 g, dim3 b, size_t smem, const char* name, const void* stream) {
    profile_stream(stream);
    return Launch<P...>{k, g, b, smem, name, stream, &kernel_key<K>()};
}

}  // namespace emu

// The launch convention (llmc/cuda/common.cuh): KEEL_LAUNCH(kernel, grid, block, smem, stream)(args...)
// is `kernel<<<grid, block, smem, stream>>>(args...)` under nvcc and a call of the emulator here.
// `kernel` names a kernel (or an instantiation of one), not a variable holding a function pointer:
// it is also a template argument, which tells the register check which instantiation runs.
#define KEEL_LAUNCH(kernel, grid, block, smem, stream) \
    ::emu::make_launch<kernel>(kernel, dim3(grid), dim3(block), (size_t)(smem), #kernel, (const void*)(stream))
#define KEEL_DYNAMIC_SHARED(T, name) T* name = (T*)::emu::tl_block.smem_base
// KEEL_SHARED(T, name, dims) (llmc/cuda/common.cuh): a static shared array as a thread_local
// (one copy per OS thread, i.e. per running block) that the first thread of each block to reach the
// declaration fills with the poison pattern; `name` is a reference to it, so sizeof, indexing and
// decay to a pointer are the array's.
#define KEEL_SHARED(T, name, dims)                                    \
    static thread_local ::emu::SharedStatic<T dims> name##_emu_static_; \
    ::emu::SharedRef<T dims> name = ::emu::shared_static(&name##_emu_static_, #name, __FILE__, __LINE__)

// ---- kernel-side built-ins -----------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __shared__ static thread_local
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __noinline__

inline void __syncthreads() { emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_sync(mask, true); }
template <typename T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    int lane = emu::tl_block.current % 32;
    return emu::warp_exchange(mask, v, (lane / width) * width + (src % width));
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    int lane = emu::tl_block.current % 32, src = lane ^ lane_mask;
    if (src / width != lane / width) src = lane;
    return emu::warp_exchange(mask, v, src);
}
template <typename T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    int lane = emu::tl_block.current % 32, src = lane + (int)delta;
    if (src / width != lane / width) src = lane;
    return emu::warp_exchange(mask, v, src);
}
template <typename T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    int lane = emu::tl_block.current % 32, src = lane - (int)delta;
    if (src < 0 || src / width != lane / width) src = lane;
    return emu::warp_exchange(mask, v, src);
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return emu::warp_ballot(mask, pred != 0); }
inline int __any_sync(unsigned mask, int pred) { return emu::warp_ballot(mask, pred != 0) != 0; }
inline int __all_sync(unsigned mask, int pred) {
    unsigned r = emu::warp_ballot(mask, pred != 0), live = emu::warp_ballot(mask, true);
    return r == live;
}

// Atomics: a fiber is never interrupted between the read and the write.
template <typename T> EMU_UNCHECKED inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <typename T> EMU_UNCHECKED inline T atomicMax(T* p, T v) { T old = *p; *p = old > v ? old : v; return old; }
template <typename T> EMU_UNCHECKED inline T atomicMin(T* p, T v) { T old = *p; *p = old < v ? old : v; return old; }
template <typename T> EMU_UNCHECKED inline T atomicOr(T* p, T v) { T old = *p; *p = old | v; return old; }
template <typename T> EMU_UNCHECKED inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <typename T> EMU_UNCHECKED inline T atomicCAS(T* p, T cmp, T v) { T old = *p; if (old == cmp) *p = v; return old; }

// Device math that the C library lacks. rsqrtf is 1/sqrtf here (≤ 2 ulp apart from the GPU's).
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float f) { int x; memcpy(&x, &f, 4); return x; }
inline unsigned __float_as_uint(float f) { unsigned x; memcpy(&x, &f, 4); return x; }
inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
template <typename T> inline T __ldg(const T* p) { return *p; }
// Memory fences: blocks run one after another here, so every write is visible before the next read.
inline void __threadfence() {}
inline void __threadfence_block() {}
