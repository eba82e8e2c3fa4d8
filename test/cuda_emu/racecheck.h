// racecheck.h (emulation, checked build only) — a shadow race, bounds and initialization checker
// for shared memory, the emulator's counterpart of compute-sanitizer's racecheck, memcheck (shared
// arrays) and initcheck (shared memory). Included by emu_core.h when KEEL_EMU_RACECHECK is defined;
// the program must then be compiled with g++ -fsanitize=thread and linked WITHOUT it.
//
// How accesses are seen: -fsanitize=thread makes the compiler call __tsan_read4(addr),
// __tsan_write8(addr), ... before every load and store of the program. ThreadSanitizer's runtime is
// not linked: this file defines those functions. While a fiber runs a kernel, an address inside the
// block's shared memory (the dynamic buffer or a KEEL_SHARED array) is checked; everything else
// returns at once. So the kernels need no accessor types: plain indexing, pointer arithmetic, casts
// and memcpy-based pack loads are all seen, and the call's return address is the access's source
// line (addr2line, at report time). The warp-level instructions of ptx.h report their own accesses
// (ldmatrix: each lane's 16-byte row; cp.async: the destination, when issued and when it lands).
//
// The model: per 4-byte word of shared memory, the last writer and the latest readers, each with
// the block's barrier interval (__syncthreads count) and its warp's __syncwarp count at the access.
// Two accesses by different threads, at least one a write, conflict unless a __syncthreads lies
// between them, or they are in one warp with a __syncwarp between them (shuffles, ballots, ldmatrix
// and mma meet the warp but order no memory, as on the GPU). A conflict is reported as a race with
// both threads and both source lines. A read of a word no thread of the block wrote is reported as
// uninitialized; an access that reaches the 64 bytes around a shared array or the dynamic buffer is
// out of bounds. The first report ends the program (exit 3), naming the kernel.
// Not seen: atomics on shared memory (keel has none), accesses from code compiled without the flag.
#pragma once
#ifndef __SANITIZE_THREAD__
#error "KEEL_EMU_RACECHECK needs g++ -fsanitize=thread (compile only; the runtime is this file)"
#endif
#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace emu {

// One access as the shadow keeps it: thread (linear index in the block), barrier interval, the
// warp's __syncwarp count, and where in the source.
struct ShadowAccess {
    int32_t tid = -1;
    uint32_t bgen = 0, order = 0;
    const void* pc = nullptr;
};
struct ShadowWord {
    uint64_t block = 0;        // Block::serial of the block the rest describes (older: untouched)
    ShadowAccess write;        // the last write
    uint32_t read_bgen = 0;    // the barrier interval of the reads below
    uint32_t read_warps = 0;   // warps (mod 32) that read in it
    ShadowAccess read, read2;  // the latest reader, and the latest reader other than it
};
struct ShadowRegion {
    const char* lo = nullptr;
    size_t bytes = 0;
    const char* name = "";
    const char* file = "";
    int line = 0;
    std::vector<ShadowWord> words;
};
struct RaceState {
    int regions = 0;  // [0] the dynamic buffer, then the static arrays this block declared
    std::vector<ShadowRegion> region;
    // The block's first read of a word no thread had written: reported when the block ends, unless
    // a write of another thread in the same barrier interval turns it into a race first (a missing
    // barrier shows as a read before the write it should have waited for).
    bool uninit = false;
    int uninit_region = 0;
    size_t uninit_byte = 0;
    ShadowAccess uninit_read;
};
// Constant-initialized thread_locals (no initialization function, which would itself be instrumented):
// whether a kernel's fiber is running, so that its accesses are checked; and the shadow.
inline thread_local bool tl_race_active = false;
inline thread_local RaceState* tl_race_state = nullptr;

EMU_UNCHECKED inline void race_region(int slot, const void* p, size_t bytes, const char* name, const char* file, int line) {
    if (!tl_race_state) tl_race_state = new RaceState;
    RaceState& r = *tl_race_state;
    if ((int)r.region.size() <= slot) r.region.resize(slot + 1);
    ShadowRegion& g = r.region[slot];
    g.lo = (const char*)p;
    g.bytes = bytes;
    g.name = name;
    g.file = file;
    g.line = line;
    if (g.words.size() < (bytes + 3) / 4) g.words.resize((bytes + 3) / 4);
    for (size_t i = 0; i < (bytes + 3) / 4; i++) g.words[i].block = 0;
    if (slot + 1 > r.regions) r.regions = slot + 1;
}
// A block starts: its dynamic buffer is the only region until its threads declare static arrays.
EMU_UNCHECKED inline void race_block_start(const void* smem, size_t bytes) {
    if (tl_race_state) tl_race_state->regions = 0, tl_race_state->uninit = false;
    race_region(0, smem, bytes, "dynamic shared memory", "", 0);
}
EMU_UNCHECKED inline void shared_declared(void* p, size_t bytes, const char* name, const char* file, int line) {
    bool was = tl_race_active;
    tl_race_active = false;  // (the shadow's own vectors are not the kernel's accesses)
    race_region(tl_race_state->regions, p, bytes, name, file, line);
    tl_race_active = was;
}

// "file:line (function)" of a code address, inlined frames outermost last, by addr2line.
EMU_UNCHECKED inline std::string race_where(const void* pc) {
    Dl_info info;
    if (!pc || !dladdr(pc, &info) || !info.dli_fname) return "(unknown)";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "addr2line -C -f -i -e '%s' %#lx 2>/dev/null", info.dli_fname,
             (unsigned long)((uintptr_t)pc - 1 - (uintptr_t)info.dli_fbase));
    std::string out, fn;
    FILE* f = popen(cmd, "r");
    char line[1024];
    for (int i = 0; f && fgets(line, sizeof line, f); i++) {
        std::string s = line;
        if (!s.empty() && s.back() == '\n') s.pop_back();
        size_t d = s.find(" (discriminator");
        if (d != std::string::npos) s.erase(d);
        char cwd[512];
        if (getcwd(cwd, sizeof cwd) && s.compare(0, strlen(cwd) + 1, std::string(cwd) + "/") == 0) s.erase(0, strlen(cwd) + 1);
        if (i % 2 == 0) fn = s.substr(0, 60);
        else out += (out.empty() ? "" : "\n        inlined into ") + s + " (" + fn + ")";
    }
    if (f) pclose(f);
    return out.empty() ? "(no line information: build with -g)" : out;
}
EMU_UNCHECKED inline std::string race_thread(int tid) {
    const Block* b = &tl_block;
    uint3 t = b->fibers[tid].tid;
    char s[96];
    snprintf(s, sizeof s, "thread (%u,%u,%u) [warp %d] of block (%u,%u,%u)", t.x, t.y, t.z, tid / 32, blockIdx.x, blockIdx.y, blockIdx.z);
    return s;
}
[[noreturn]] EMU_UNCHECKED inline void race_report(const char* what, const ShadowRegion& g, const char* at, const ShadowAccess* first,
                                                   const char* first_verb, const ShadowAccess& now, const char* now_verb) {
    tl_race_active = false;
    fflush(stdout);
    fprintf(stderr, "cuda emulation: racecheck: kernel %s: %s in %s", profile_kernel_name(tl_block.kernel_name).c_str(), what, g.name);
    if (g.line) fprintf(stderr, " (declared at %s:%d)", g.file, g.line);
    fprintf(stderr, " at byte %s\n", at);
    if (first)
        fprintf(stderr, "  %s %s at %s\n", race_thread(first->tid).c_str(), first_verb, race_where(first->pc).c_str());
    fprintf(stderr, "  %s %s at %s\n", race_thread(now.tid).c_str(), now_verb, race_where(now.pc).c_str());
    exit(3);
}

// A block ended: an uninitialized read no race explained is reported now.
EMU_UNCHECKED inline void race_block_end() {
    RaceState* r = tl_race_state;
    if (!r || !r->uninit) return;
    char at[32];
    snprintf(at, sizeof at, "%zu", r->uninit_byte);
    race_report("an uninitialized read (no thread of the block had written this word)", r->region[r->uninit_region], at, nullptr, "",
                r->uninit_read, "reads");
}

// Whether access a happened before the access `now` of the current thread (see the model above).
EMU_UNCHECKED inline bool race_ordered(const ShadowAccess& a, const ShadowAccess& now) {
    return a.tid < 0 || a.tid == now.tid || a.bgen != now.bgen || (a.tid / 32 == now.tid / 32 && a.order != now.order);
}
EMU_UNCHECKED inline void race_word(const ShadowRegion& g, ShadowWord& w, size_t byte, bool is_write, const ShadowAccess& now) {
    uint64_t serial = tl_block.serial;
    char at[64];
    snprintf(at, sizeof at, "%zu", byte);
    if (w.block != serial) {
        w = ShadowWord{};
        w.block = serial;
    }
    if (!race_ordered(w.write, now))
        race_report(is_write ? "a write-write race (no barrier between two writes)" : "a read-after-write race (no barrier between the write and the read)",
                    g, at, &w.write, "wrote", now, is_write ? "writes" : "reads");
    bool same_interval = w.read_bgen == now.bgen;
    if (is_write && same_interval) {
        for (const ShadowAccess* r : {&w.read, &w.read2})
            if (!race_ordered(*r, now)) race_report("a write-after-read race (no barrier between the read and the write)", g, at, r, "read", now, "writes");
        if (w.read_warps & ~(1u << (now.tid / 32 % 32)))
            race_report("a write-after-read race with another warp (no __syncthreads between the read and the write)", g, at, &w.read, "(one of the readers) read",
                        now, "writes");
    }
    if (is_write) {
        w.write = now;
        w.read = w.read2 = ShadowAccess{};
        w.read_warps = 0;
        return;
    }
    RaceState& r = *tl_race_state;
    if (w.write.tid < 0 && !r.uninit) {
        r.uninit = true;
        r.uninit_region = (int)(&g - r.region.data());
        r.uninit_byte = byte;
        r.uninit_read = now;
    }
    if (!same_interval) {
        w.read = w.read2 = ShadowAccess{};
        w.read_warps = 0;
        w.read_bgen = now.bgen;
    }
    w.read_warps |= 1u << (now.tid / 32 % 32);
    if (w.read.tid != now.tid) w.read2 = w.read;
    w.read = now;
}

// An access of a fiber, checked against the shadow when it lands in or around shared memory.
EMU_UNCHECKED inline void race_check(RaceState& r, const char* c, size_t n, bool is_write, const void* pc) {
    for (int i = 0; i < r.regions; i++) {
        ShadowRegion& g = r.region[i];
        if (c + n <= g.lo - SHARED_REDZONE || c >= g.lo + g.bytes + SHARED_REDZONE) continue;
        Block* b = &tl_block;
        ShadowAccess now;
        now.tid = b->current;
        now.bgen = b->block_gen;
        now.order = b->warp_order[b->current / 32];
        now.pc = pc;
        if (c < g.lo || c + n > g.lo + g.bytes) {
            char at[96];
            snprintf(at, sizeof at, "%lld (%zu bytes; the region has %zu)", (long long)(c - g.lo), n, g.bytes);
            race_report(is_write ? "an out-of-bounds write" : "an out-of-bounds read", g, at, nullptr, "", now, is_write ? "writes" : "reads");
        }
        size_t first = (size_t)(c - g.lo) / 4, last = (size_t)(c + n - 1 - g.lo) / 4;
        for (size_t k = first; k <= last; k++) race_word(g, g.words[k], k * 4, is_write, now);
        return;
    }
}
EMU_UNCHECKED inline void race_access(const void* p, size_t n, bool is_write, const void* pc) {
    if (!tl_race_active) return;
    tl_race_active = false;  // (a library function called out of line may itself be instrumented)
    race_check(*tl_race_state, (const char*)p, n, is_write, pc);
    tl_race_active = true;
}

}  // namespace emu

// ---- the instrumentation's entry points ------------------------------------------------------------
#define EMU_TSAN_ENTRY extern "C" __attribute__((weak, noinline, no_sanitize_thread))
#define EMU_TSAN_ACCESS(N)                                                                                                       \
    EMU_TSAN_ENTRY void __tsan_read##N(void* p) { emu::race_access(p, N, false, __builtin_return_address(0)); }             \
    EMU_TSAN_ENTRY void __tsan_write##N(void* p) { emu::race_access(p, N, true, __builtin_return_address(0)); }             \
    EMU_TSAN_ENTRY void __tsan_unaligned_read##N(void* p) { emu::race_access(p, N, false, __builtin_return_address(0)); }   \
    EMU_TSAN_ENTRY void __tsan_unaligned_write##N(void* p) { emu::race_access(p, N, true, __builtin_return_address(0)); }
EMU_TSAN_ACCESS(1)
EMU_TSAN_ACCESS(2)
EMU_TSAN_ACCESS(4)
EMU_TSAN_ACCESS(8)
EMU_TSAN_ACCESS(16)
EMU_TSAN_ENTRY void __tsan_read_range(void* p, unsigned long n) { emu::race_access(p, n, false, __builtin_return_address(0)); }
EMU_TSAN_ENTRY void __tsan_write_range(void* p, unsigned long n) { emu::race_access(p, n, true, __builtin_return_address(0)); }
EMU_TSAN_ENTRY void __tsan_init() {}
EMU_TSAN_ENTRY void __tsan_func_entry(void*) {}
EMU_TSAN_ENTRY void __tsan_func_exit() {}
EMU_TSAN_ENTRY void __tsan_vptr_update(void**, void*) {}
EMU_TSAN_ENTRY void __tsan_vptr_read(void**) {}
// Atomics the instrumented program performs (host code: MPI, OpenMP, std::atomic) — carried out
// sequentially consistent, the strongest order any caller may ask for.
#define EMU_TSAN_ATOMIC(BITS, T)                                                                                                       \
    EMU_TSAN_ENTRY T __tsan_atomic##BITS##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }        \
    EMU_TSAN_ENTRY void __tsan_atomic##BITS##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }         \
    EMU_TSAN_ENTRY T __tsan_atomic##BITS##_exchange(volatile T* a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
    EMU_TSAN_ENTRY T __tsan_atomic##BITS##_fetch_add(volatile T* a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
    EMU_TSAN_ENTRY T __tsan_atomic##BITS##_fetch_sub(volatile T* a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
    EMU_TSAN_ENTRY T __tsan_atomic##BITS##_fetch_and(volatile T* a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
    EMU_TSAN_ENTRY T __tsan_atomic##BITS##_fetch_or(volatile T* a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }   \
    EMU_TSAN_ENTRY T __tsan_atomic##BITS##_fetch_xor(volatile T* a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
    EMU_TSAN_ENTRY int __tsan_atomic##BITS##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {                       \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                                      \
    }                                                                                                                                  \
    EMU_TSAN_ENTRY int __tsan_atomic##BITS##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {                         \
        return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                                       \
    }                                                                                                                                  \
    EMU_TSAN_ENTRY T __tsan_atomic##BITS##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                             \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                                            \
        return c;                                                                                                                      \
    }
EMU_TSAN_ATOMIC(8, uint8_t)
EMU_TSAN_ATOMIC(16, uint16_t)
EMU_TSAN_ATOMIC(32, uint32_t)
EMU_TSAN_ATOMIC(64, uint64_t)
EMU_TSAN_ENTRY void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
EMU_TSAN_ENTRY void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
