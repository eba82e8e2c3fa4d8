// mma.h (emulation) — the warp-level matrix API (nvcuda::wmma) that keel's kernels use, on the CPU.
// Tests compile with -Itest/cuda_emu, so llmc/cuda's `#include <mma.h>` lands here; nvcc finds the
// real header. Only what keel uses exists, so anything else fails to compile:
//   fragment<matrix_a | matrix_b, 16, 16, 16, __nv_bfloat16 | __half, row_major | col_major>
//   fragment<accumulator, 16, 16, 16, float>
//   load_matrix_sync (a/b: the fragment's layout; accumulator: mem_row_major | mem_col_major),
//   store_matrix_sync (accumulator), fill_fragment, mma_sync (d = a·b + c, fp32 accumulation).
// Other shapes or element types hit the undefined primary template or a static_assert.
//
// Fragment-to-thread layout of THIS emulation (documented so that tests can reason about it; real
// GPUs use another, unspecified one): the 256 elements of a 16×16 fragment in row-major order
// (element e = row·16 + col; for matrix_a row = m and col = k, for matrix_b row = k and col = n),
// lane l holds elements l, l+32, ..., l+224 as x[0..7]. A kernel must not depend on it: element-wise
// use of x[i] is correct only for operations that treat every element alike (scaling all of them);
// anything per row or per column goes through shared memory (store_matrix_sync, then index).
//
// Every call is a warp collective, as on the GPU: all 32 lanes of the warp must make the same call
// (same operation, same pointer, ldm and layout for loads and stores, same value for fill) in the
// same order. The emulation publishes each lane's call, meets the warp at the emulator's warp
// barrier (emu::warp_sync), and dies with the kernel's name when a lane is missing (finished, or
// the warp is partial), makes another call, or passes other arguments. Loads and stores check the
// API's requirements: a 256-bit aligned pointer and ldm a multiple of 16 bytes.
// mma_sync multiplies exactly (a bf16/fp16 product is exact in fp32) and adds in fp32 in ascending
// k, starting from c; each call adds 2·16·16·16 FLOPs to the step profile's mma_flops.
#pragma once
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cuda_bf16.h"
#include "emu_core.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int m, int n, int k, typename T, typename Layout = void> class fragment;  // only 16×16×16 below

template <typename T> struct wmma_half_type : std::false_type {};
template <> struct wmma_half_type<__nv_bfloat16> : std::true_type {};
template <> struct wmma_half_type<__half> : std::true_type {};

template <typename Use, typename T, typename Layout> struct fragment_base {
    static constexpr int num_elements = 8;  // 256 elements / 32 lanes
    typedef T element_type;
    T x[num_elements];
};
template <typename T, typename Layout> class fragment<matrix_a, 16, 16, 16, T, Layout> : public fragment_base<matrix_a, T, Layout> {
    static_assert(wmma_half_type<T>::value, "the emulated wmma supports __nv_bfloat16 and __half matrix_a fragments only");
    static_assert(std::is_same<Layout, row_major>::value || std::is_same<Layout, col_major>::value, "matrix_a needs row_major or col_major");
};
template <typename T, typename Layout> class fragment<matrix_b, 16, 16, 16, T, Layout> : public fragment_base<matrix_b, T, Layout> {
    static_assert(wmma_half_type<T>::value, "the emulated wmma supports __nv_bfloat16 and __half matrix_b fragments only");
    static_assert(std::is_same<Layout, row_major>::value || std::is_same<Layout, col_major>::value, "matrix_b needs row_major or col_major");
};
template <typename T> class fragment<accumulator, 16, 16, 16, T, void> : public fragment_base<accumulator, T, void> {
    static_assert(std::is_same<T, float>::value, "the emulated wmma supports float accumulators only");
};

}  // namespace wmma
}  // namespace nvcuda

namespace emu {
namespace wmma_detail {

enum Op { OP_LOAD_A = 1, OP_LOAD_B, OP_LOAD_C, OP_STORE, OP_FILL, OP_MMA };
static const char* const op_names[] = {"", "load_matrix_sync (matrix_a)", "load_matrix_sync (matrix_b)",
                                       "load_matrix_sync (accumulator)", "store_matrix_sync", "fill_fragment", "mma_sync"};

// One lane's published call. seq counts the lane's wmma calls in this block, so a lane that sits at
// another warp barrier (a shuffle) while the rest of its warp calls wmma is seen as missing.
struct LaneCall {
    uint64_t block_epoch = ~0ull;  // which block the record belongs to (stale records start over)
    uint64_t seq = 0;
    int op = 0;
    const void* p = nullptr;  // the memory pointer (loads, stores) or the fill value's bits
    uint64_t value_bits = 0;
    unsigned ldm = 0;
    int layout = 0;
    const void* a = nullptr;  // mma: the lane's fragments
    const void* b = nullptr;
};
inline thread_local std::vector<LaneCall> calls;  // (threads of the running block); fibers share it

// Publish this lane's call, meet the warp, check that all 32 lanes made the same call.
// Returns the index of lane 0 of the warp in `calls`.
inline int collective_begin(LaneCall me, bool uniform_ptr) {
    Block* b = &tl_block;
    int i = b->current, w = i / 32, n = (int)b->fibers.size();
    if ((w + 1) * 32 > n)
        die("kernel %s: a wmma call in a partial warp (the block's thread count is not a multiple of 32): %s", b->kernel_name,
            op_names[me.op]);
    if ((int)calls.size() < n) calls.resize(n);
    uint64_t epoch = stats().blocks;  // constant while one block runs, different for the next
    LaneCall& slot = calls[i];
    if (slot.block_epoch != epoch) slot.seq = 0;
    me.block_epoch = epoch;
    me.seq = slot.seq + 1;
    slot = me;
    warp_sync(0xffffffffu);
    for (int l = 0; l < 32; l++) {
        const LaneCall& o = calls[w * 32 + l];
        if (b->fibers[w * 32 + l].state == FIBER_DONE)
            die("kernel %s: a lane of the warp finished before the warp-collective %s (all 32 lanes must call it)", b->kernel_name,
                op_names[me.op]);
        if (o.block_epoch != epoch || o.seq != me.seq || o.op != me.op)
            die("kernel %s: the lanes of a warp do not make the same wmma call (this lane: %s; all 32 lanes must call it, in the same order)",
                b->kernel_name, op_names[me.op]);
        if ((uniform_ptr && o.p != me.p) || o.ldm != me.ldm || o.layout != me.layout || o.value_bits != me.value_bits)
            die("kernel %s: the lanes of a warp pass different arguments to %s (pointer, ldm, layout and value must be the warp's)",
                b->kernel_name, op_names[me.op]);
    }
    return w * 32;
}
// The second meeting: no lane goes on (and overwrites a fragment another lane still reads) before
// every lane has done its part.
inline void collective_end() { warp_sync(0xffffffffu); }

template <typename T> inline void check_memory(const T* p, unsigned ldm, int op) {
    if (((uintptr_t)p & 31u) != 0)
        die("kernel %s: %s needs a 256-bit (32-byte) aligned pointer", tl_block.kernel_name, op_names[op]);
    if ((ldm * sizeof(T)) % 16 != 0)
        die("kernel %s: %s needs ldm to be a multiple of 16 bytes", tl_block.kernel_name, op_names[op]);
}

inline int lane() { return tl_block.current % 32; }
// Element slot i of this lane: (row, col) of the 16×16 tile.
inline int elem_row(int i) { return (lane() + 32 * i) / 16; }
inline int elem_col(int i) { return (lane() + 32 * i) % 16; }

inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float widen(__half v) { return __half2float(v); }
inline float widen(float v) { return v; }

}  // namespace wmma_detail
}  // namespace emu

namespace nvcuda {
namespace wmma {

// matrix_a / matrix_b: element (row, col) of the tile at mptr[row·ldm + col] (row_major) or
// mptr[col·ldm + row] (col_major).
template <typename Use, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* mptr, unsigned ldm) {
    using namespace emu::wmma_detail;
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load names its memory layout");
    int op = std::is_same<Use, matrix_a>::value ? OP_LOAD_A : OP_LOAD_B;
    check_memory(mptr, ldm, op);
    LaneCall me;
    me.op = op;
    me.p = mptr;
    me.ldm = ldm;
    me.layout = std::is_same<Layout, row_major>::value ? 0 : 1;
    collective_begin(me, true);
    for (int i = 0; i < 8; i++) {
        int r = elem_row(i), c = elem_col(i);
        f.x[i] = me.layout == 0 ? mptr[(size_t)r * ldm + c] : mptr[(size_t)c * ldm + r];
    }
    collective_end();
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* mptr, unsigned ldm, layout_t layout) {
    using namespace emu::wmma_detail;
    check_memory(mptr, ldm, OP_LOAD_C);
    LaneCall me;
    me.op = OP_LOAD_C;
    me.p = mptr;
    me.ldm = ldm;
    me.layout = layout == mem_row_major ? 0 : 1;
    collective_begin(me, true);
    for (int i = 0; i < 8; i++) {
        int r = elem_row(i), c = elem_col(i);
        f.x[i] = me.layout == 0 ? mptr[(size_t)r * ldm + c] : mptr[(size_t)c * ldm + r];
    }
    collective_end();
}
inline void store_matrix_sync(float* mptr, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t layout) {
    using namespace emu::wmma_detail;
    check_memory(mptr, ldm, OP_STORE);
    LaneCall me;
    me.op = OP_STORE;
    me.p = mptr;
    me.ldm = ldm;
    me.layout = layout == mem_row_major ? 0 : 1;
    collective_begin(me, true);
    for (int i = 0; i < 8; i++) {
        int r = elem_row(i), c = elem_col(i);
        (me.layout == 0 ? mptr[(size_t)r * ldm + c] : mptr[(size_t)c * ldm + r]) = f.x[i];
    }
    collective_end();
}
template <typename Use, typename T, typename Layout, typename V>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, const V& v) {
    using namespace emu::wmma_detail;
    T tv = (T)v;
    LaneCall me;
    me.op = OP_FILL;
    memcpy(&me.value_bits, &tv, sizeof(T) < 8 ? sizeof(T) : 8);
    collective_begin(me, false);
    for (int i = 0; i < 8; i++) f.x[i] = tv;
    collective_end();
}
// d = a·b + c for 16×16 tiles; each lane computes its own 8 elements of d from the whole warp's a and
// b fragments (read through the published calls). d may be c.
template <typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c,
                     bool satf = false) {
    using namespace emu::wmma_detail;
    if (satf) emu::die("kernel %s: mma_sync with satf is not emulated%s", emu::tl_block.kernel_name);
    LaneCall me;
    me.op = OP_MMA;
    me.a = &a;
    me.b = &b;
    int base = collective_begin(me, false);
    typedef fragment<matrix_a, 16, 16, 16, T, LA> FA;
    typedef fragment<matrix_b, 16, 16, 16, T, LB> FB;
    float out[8];
    for (int i = 0; i < 8; i++) {
        int r = elem_row(i), col = elem_col(i);
        float acc = c.x[i];
        for (int k = 0; k < 16; k++) {
            int ea = r * 16 + k, eb = k * 16 + col;  // element numbers in a (m,k) and b (k,n), row-major
            const FA* fa = (const FA*)calls[base + ea % 32].a;
            const FB* fb = (const FB*)calls[base + eb % 32].b;
            acc += widen(fa->x[ea / 32]) * widen(fb->x[eb / 32]);
        }
        out[i] = acc;
    }
    collective_end();  // every lane has read the others' a and b before any d is written or a changes
    for (int i = 0; i < 8; i++) d.x[i] = out[i];
    if (lane() == 0) emu::profile_mma(2ull * 16 * 16 * 16);
}

}  // namespace wmma
}  // namespace nvcuda
