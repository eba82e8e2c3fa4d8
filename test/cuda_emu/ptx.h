// ptx.h (emulation) — the warp-level instructions of llmc/cuda/mma.cuh on the CPU, to the letter of
// the PTX ISA's fragment layouts (that header documents them; this file implements exactly those):
//   mma_m16n8k16<F>   a warp collective: every lane publishes its a[4], b[2], d[4] registers and
//                     meets the warp; the first lane to run after the meeting computes the warp's
//                     16×8 result from the owners' registers, and each lane takes its four (A element
//                     (m, k) lives in lane (m%8)·4 + (k%8)/2, register (m/8) + 2·(k/8), half k%2; B
//                     element (k, n) in lane n·4 + (k%8)/2, register k/8, half k%2). Products are exact
//                     in fp32 (16-bit operands); they are added to d in ascending k in fp32 (the
//                     hardware's order inside one instruction is its own: results may differ from a
//                     GPU's in the last bits, never in layout). 2·16·8·16 FLOPs to the profile.
//   ldmatrix_x4(_trans)  a warp collective: each lane publishes its row address, which must lie in
//                     the block's shared memory (dynamic or static) and be 16-byte aligned; lane l
//                     receives from the rows the lanes 8j..8j+7 named.
//   cp_async16, cp_async4, cp_async_commit, cp_async_wait<N>   per thread: a copy is recorded with the source
//                     bytes as they are at the wait (the bytes land at the wait, not before), so a
//                     kernel that reads shared memory before waiting reads the old bytes, as it may on
//                     a GPU; a wait for groups this thread never committed is fine (no-op).
// A lane that is missing from a collective (finished, or in another branch) stops the program naming
// the kernel (exit 3): on a GPU that is undefined behaviour.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda_bf16.h"
#include "emu_core.h"

namespace emu {
namespace ptx_detail {

struct LaneRegs {
    uint64_t epoch = ~0ull, seq = 0;
    int op = 0;
    const void* p = nullptr;  // ldmatrix: the row address; mma: a
    const void* q = nullptr;  // mma: b
    const float* r = nullptr; // mma: d (the accumulators the lane adds to)
};
inline thread_local std::vector<LaneRegs> lanes;
enum { OP_MMA = 1, OP_LDM, OP_LDM_T };
static const char* const op_names[] = {"", "mma.sync.m16n8k16", "ldmatrix.x4", "ldmatrix.x4.trans"};

// One warp's current collective as the first of its lanes to run after the meeting saw it. The
// lanes then run one after another, and none gets past the warp's next meeting before all have left
// this one, so what that lane derives from all 32 lanes' registers — their agreement, an mma's
// result, an ldmatrix's rows — stays here for the others to take, and needs no second meeting.
struct WarpMeet {
    uint64_t epoch = ~0ull, seq = 0;  // the meeting (block, the lanes' count of collectives)
    float d[16][8];                    // mma: the warp's result D (m, n)
    uint32_t ldm[32][4];               // ldmatrix: each lane's four registers
};
inline thread_local std::vector<WarpMeet> warp_meets;

// Publishes this lane's operands and meets the warp; returns the index of the warp's lane 0 and, in
// *first, whether this lane is the first to run after the meeting (it checks that all 32 lanes are
// at the same instruction; for the others that is then settled: they all hold one epoch and count).
inline int begin(LaneRegs me, bool* first = nullptr) {
    Block* b = &tl_block;
    int i = b->current, w = i / 32, n = (int)b->fibers.size();
    if ((w + 1) * 32 > n) die("kernel %s: %s in a partial warp (the block's thread count is not a multiple of 32)", b->kernel_name, op_names[me.op]);
    std::vector<LaneRegs>& lr = lanes;
    if ((int)lr.size() < n) lr.resize(n);
    uint64_t epoch = stats().blocks;
    LaneRegs& slot = lr[i];
    if (slot.epoch != epoch) slot.seq = 0;
    me.epoch = epoch;
    me.seq = slot.seq + 1;
    slot = me;
    warp_sync(0xffffffffu);
    std::vector<WarpMeet>& meets = warp_meets;
    if ((int)meets.size() < n / 32) meets.resize(n / 32);
    WarpMeet& wm = meets[w];
    bool fresh = wm.epoch != epoch || wm.seq != me.seq;
    if (fresh) {
        for (int l = 0; l < 32; l++) {
            const LaneRegs& o = lr[w * 32 + l];
            if (b->fibers[w * 32 + l].state == FIBER_DONE || o.epoch != epoch || o.seq != me.seq || o.op != me.op)
                die("kernel %s: all 32 lanes of a warp must execute %s together (the same instruction, in the same order)",
                    b->kernel_name, op_names[me.op]);
        }
        wm.epoch = epoch;
        wm.seq = me.seq;
    }
    if (first) *first = fresh;
    return w * 32;
}

inline uint16_t half_of(uint32_t r, int hi) { return (uint16_t)(hi ? r >> 16 : r & 0xffffu); }
inline float widen_t(uint16_t bits, const __nv_bfloat16*) {
    __nv_bfloat16 v;
    memcpy(&v, &bits, 2);
    return __bfloat162float(v);
}
inline float widen_t(uint16_t bits, const __half*) {
    __half v;
    memcpy(&v, &bits, 2);
    return __half2float(v);
}

// Whether [p, p+16) lies in the running block's shared memory.
inline bool in_shared(const void* p, size_t n = 16) {
    const char* c = (const char*)p;
    const Block* b = &tl_block;
    return b->smem_bytes && c >= b->smem_base && c + n <= b->smem_base + b->smem_bytes;
}

// The checked build (racecheck.h): an emulated instruction reports its own shared-memory accesses,
// `pc` being the kernel's line that issued it.
inline void shared_access(const void* p, size_t n, bool is_write, const void* pc) {
#ifdef KEEL_EMU_RACECHECK
    race_access(p, n, is_write, pc);
#else
    (void)p, (void)n, (void)is_write, (void)pc;
#endif
}

// ldmatrix: the lane's own row is its read (the warp reads the rows the lanes name).
EMU_UNCHECKED inline void ldmatrix(uint32_t (&r)[4], const void* p, bool trans, const void* pc) {
    if (((uintptr_t)p & 15u) != 0) die("kernel %s: ldmatrix needs 16-byte aligned row addresses%s", tl_block.kernel_name);
    if (!in_shared(p)) die("kernel %s: ldmatrix reads shared memory only (the address is outside the block's dynamic shared memory)%s", tl_block.kernel_name);
    shared_access(p, 16, false, pc);
    LaneRegs me;
    me.op = trans ? OP_LDM_T : OP_LDM;
    me.p = p;
    bool first;
    int base = begin(me, &first);
    WarpMeet& wm = warp_meets[base / 32];
    if (first) {  // every lane's registers, from the rows as they are at the meeting
        const std::vector<LaneRegs>& lr = lanes;
        for (int l = 0; l < 32; l++) {
            int g = l / 4, t = l % 4;
            for (int j = 0; j < 4; j++) {
                uint16_t e[2];
                for (int k = 0; k < 2; k++) {
                    int row = trans ? 2 * t + k : g, col = trans ? g : 2 * t + k;  // (row of matrix j, element in the row)
                    const uint16_t* rowp = (const uint16_t*)lr[base + 8 * j + row].p;
                    e[k] = rowp[col];
                }
                wm.ldm[l][j] = (uint32_t)e[0] | (uint32_t)e[1] << 16;
            }
        }
    }
    // (no second meeting: the first lane read every row before any lane moved on)
    for (int j = 0; j < 4; j++) r[j] = wm.ldm[tl_block.current % 32][j];
}

// cp.async: per fiber, groups of pending copies.
struct Copy {
    void* dst;
    const void* src;
    int n, size;  // source bytes read; bytes written (the rest of size zero-filled)
    const void* pc;  // the kernel's line that issued it (the checked build's reports)
};
struct AsyncState {
    uint64_t epoch = ~0ull;
    std::vector<Copy> open;                 // since the last commit
    std::vector<std::vector<Copy>> groups;  // committed, oldest first
};
inline thread_local std::vector<AsyncState> async_states;
inline AsyncState& async_state() {
    Block* b = &tl_block;
    int n = (int)b->fibers.size();
    if ((int)async_states.size() < n) async_states.resize(n);
    AsyncState& s = async_states[b->current];
    if (s.epoch != stats().blocks) {
        s = AsyncState{};
        s.epoch = stats().blocks;
    }
    return s;
}

}  // namespace ptx_detail
}  // namespace emu

namespace keel_cuda {

template <typename F> EMU_UNCHECKED inline void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    using namespace emu::ptx_detail;
    LaneRegs me;
    me.op = OP_MMA;
    me.p = a;
    me.q = b;
    me.r = d;
    bool first;
    int base = begin(me, &first);
    WarpMeet& wm = warp_meets[base / 32];
    if (first) {  // the warp's product, from the registers as they are at the meeting
        const std::vector<LaneRegs>& lr = lanes;
        float A[16][16], Bt[16][8];
        for (int m = 0; m < 16; m++)
            for (int k = 0; k < 16; k++) {
                const uint32_t* ra = (const uint32_t*)lr[base + (m % 8) * 4 + (k % 8) / 2].p;
                A[m][k] = widen_t(half_of(ra[(m / 8) + 2 * (k / 8)], k & 1), (const F*)nullptr);
            }
        for (int k = 0; k < 16; k++)
            for (int n = 0; n < 8; n++) {
                const uint32_t* rb = (const uint32_t*)lr[base + n * 4 + (k % 8) / 2].q;
                Bt[k][n] = widen_t(half_of(rb[k / 8], k & 1), (const F*)nullptr);
            }
        // a row of D in two 4-float vectors (GCC's vector extension: the same IEEE operations per element)
        typedef float v4 __attribute__((vector_size(16)));
        for (int m = 0; m < 16; m++) {
            float init[8];  // D (m, n) is element (m / 8)·2 + n % 2 of lane (m % 8)·4 + n / 2
            for (int n = 0; n < 8; n++) init[n] = lr[base + (m % 8) * 4 + n / 2].r[(m / 8) * 2 + n % 2];
            v4 lo, hi, blo, bhi;
            memcpy(&lo, init, 16), memcpy(&hi, init + 4, 16);
            for (int k = 0; k < 16; k++) {  // each element's sum in ascending k
                memcpy(&blo, Bt[k], 16), memcpy(&bhi, Bt[k] + 4, 16);
                lo += A[m][k] * blo;
                hi += A[m][k] * bhi;
            }
            memcpy(wm.d[m], &lo, 16), memcpy(wm.d[m] + 4, &hi, 16);
        }
    }
    // (no second meeting: the first lane read every lane's registers before any lane moved on)
    int l = emu::tl_block.current % 32, g = l / 4, t = l % 4;
    for (int e = 0; e < 4; e++) d[e] = wm.d[g + (e >= 2 ? 8 : 0)][2 * t + (e & 1)];
    if (l == 0) emu::profile_mma(2ull * 16 * 8 * 16);
}

EMU_HOOK void ldmatrix_x4(uint32_t (&r)[4], const void* p) { emu::ptx_detail::ldmatrix(r, p, false, __builtin_return_address(0)); }
EMU_HOOK void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) { emu::ptx_detail::ldmatrix(r, p, true, __builtin_return_address(0)); }

// cp.async: the destination counts as written by the issuing thread when issued (the bytes may land
// any time from then on) and again when they land at the wait.
EMU_HOOK void cp_async16(void* dst, const void* src, int src_bytes) {
    using namespace emu::ptx_detail;
    if (((uintptr_t)dst & 15u) || ((uintptr_t)src & 15u))
        emu::die("kernel %s: cp.async of 16 bytes needs 16-byte aligned addresses%s", emu::tl_block.kernel_name);
    if (!in_shared(dst, 16)) emu::die("kernel %s: cp.async writes shared memory only%s", emu::tl_block.kernel_name);
    if (src_bytes < 0 || src_bytes > 16) emu::die("kernel %s: cp.async source size outside 0..16%s", emu::tl_block.kernel_name);
    shared_access(dst, 16, true, __builtin_return_address(0));
    async_state().open.push_back(Copy{dst, src, src_bytes, 16, __builtin_return_address(0)});
}
EMU_HOOK void cp_async4(void* dst, const void* src, int src_bytes) {
    using namespace emu::ptx_detail;
    if (((uintptr_t)dst & 3u) || ((uintptr_t)src & 3u))
        emu::die("kernel %s: cp.async of 4 bytes needs 4-byte aligned addresses%s", emu::tl_block.kernel_name);
    if (!in_shared(dst, 4)) emu::die("kernel %s: cp.async writes shared memory only%s", emu::tl_block.kernel_name);
    if (src_bytes != 0 && src_bytes != 4) emu::die("kernel %s: cp.async of 4 bytes reads 0 or 4 source bytes%s", emu::tl_block.kernel_name);
    shared_access(dst, 4, true, __builtin_return_address(0));
    async_state().open.push_back(Copy{dst, src, src_bytes, 4, __builtin_return_address(0)});
}
inline void cp_async_commit() {
    using namespace emu::ptx_detail;
    AsyncState& s = async_state();
    s.groups.push_back(std::move(s.open));
    s.open.clear();
}
template <int N> EMU_HOOK void cp_async_wait() {
    using namespace emu::ptx_detail;
    AsyncState& s = async_state();
    while ((int)s.groups.size() > N) {
        for (const Copy& c : s.groups.front()) {
            shared_access(c.dst, (size_t)c.size, true, __builtin_return_address(0));
            memset(c.dst, 0, (size_t)c.size);
            if (c.n > 0) memcpy(c.dst, c.src, (size_t)c.n);
        }
        s.groups.erase(s.groups.begin());
    }
}

}  // namespace keel_cuda
