// cuda/layernorm.cuh — LayerNorm over channels; the contract of cpu/layernorm.h:
//   forward:  mean = Σx/C, rstd = 1/sqrt(Σ(x-mean)²/C + eps), out = (x-mean)·rstd·w + b
//             saves mean and rstd (N) for the backward.
//   residual_layernorm_forward: residual_out = a + b (rounded to F), then the forward above on
//             residual_out — residual_forward and layernorm_forward in one pass.
//   backward: with xhat = (x-mean)·rstd and g = dout·w:
//             dx += rstd·(g - mean(g) - xhat·mean(g·xhat));  dw += Σ_rows dout·xhat;  db += Σ_rows dout
// Legend: N rows (B*T), C channels (any C: 4*hidden under --normformer, not a multiple of 32).
// Numerics: statistics in fp32 whatever the storage type F, two-pass (subtract-mean) variance;
// mean, rstd, dweight and dbias are fp32 buffers (docs/internals.md#precision: fp32 statistics and gradient accumulation).
//
// Channel ownership. A row's channels are cut into chunks of V = Pack128<F>::SIZE (8 bf16/fp16, 4
// fp32); lane l of a row's warp owns chunks l, l+32, l+64, ... and sums a chunk's channels in order.
// When C % V == 0 and the buffers are 16-byte aligned, a chunk is one 128-bit load/store; otherwise
// (odd C, misaligned views) the same chunks are read element by element. The order of every addition
// is therefore a function of (C, F) alone, and the vector and scalar paths give the same bits: every
// product that meets a sum is spelled fmul_rn/fadd_rn (cuda/common.cuh), never left for nvcc to fuse
// into an FMA, which it does or not depending on each path's branches (an H200 found the fp32
// forward's paths 1 ulp apart that way, where the emulation, which never fuses, could not).
//
// Forward (and the fused residual forward): one warp per row, 8 rows per block. Per lane: the chunk
// sums in order, then warp_sum's fixed butterfly over the 32 lanes. The fused kernel first writes the
// rounded residual row (each lane its own chunks), then runs the same row code on what it wrote: the
// LayerNorm reads the rounded residual, as the unfused pair does, so the two agree bit for bit.
//
// Backward: one kernel. Block k owns rows [k·R, k·R + R), R = layernorm_backward_rows(N) (a function
// of N alone), 16 warps:
//   1. dinp: one warp per row (rows k·R + w, + 16, ...), the two row means as in the forward.
//   2. the block's dweight/dbias contributions into its slot of the fp32 partials scratch (blocks, 2, C),
//      in one of two forms, chosen by (C, F, the device) alone:
//      one pass (where the regions fit the block's shared memory: C up to ~1800 on an H100, ~1300 on an
//        A100): while phase 1 holds a row, each lane adds the row's dout·xhat and dout for its chunks
//        into its entries of the warp's region (ln_cols_at), so in row order w, w + 16, ...; then the
//        block adds the 16 regions in warp order. The rows are read once.
//      two passes (wider rows): thread (slice s, chunk j) sums rows k·R + s, + S, ... in order for the V
//        channels of chunk j (S = row slices that fit the block beside the C/V chunks), reading the
//        block's rows again (from L2 when they are still there); the S slice sums are added in slice
//        order (through shared memory).
//      The two forms add the same terms in different orders: dweight and dbias differ between them by
//      fp32 rounding, dinp not at all.
//   3. the last block to finish adds the slots in block order into dweight/dbias. "Last" is decided by
//      an integer atomic counter; which block is last depends on timing, but what it computes does
//      not: every slot is complete when it reads them and it adds them in block order 0, 1, ....
//      The counter carries the launch's tag (layernorm_next_tag), and each launch's last block leaves
//      it armed for the next launch's tag with a count of 0, so a block counts itself with one
//      atomicAdd. A word under any other tag (the fresh word, a launch that stopped part-way, junk)
//      is replaced by compare-and-swap (layernorm_count_done): nothing has to reset it between
//      launches, and nothing a stopped launch left is counted.
//   Memory ordering on the GPU: each thread fences (grid_fence: __threadfence) after writing its slot
//   entries; __syncthreads; thread 0 then counts the block. The fence makes the slot writes visible
//   device-wide before the count can be observed. The last block's thread 0 fences after its atomic
//   (acquire side), and the block reads the slots with L2-only loads (pack_load_cg: no stale L1 line
//   can be read), 4 columns a thread where C % 4 == 0, LN_BWD_FINISH_INFLIGHT slots in flight. Under
//   the emulation the blocks run one after another.
// Scratch: the partials and the counter are sized by layernorm_reserve(N_max, C_max) at set-up (no
// cudaMalloc in a steady-state step); an unreserved larger call grows them once.
#pragma once
#include <initializer_list>
#include <type_traits>

#include "llmc/cuda/common.cuh"

namespace keel_cuda {

// LN_BWD_WARPS (warps per backward block, 512 threads) and LN_BWD_MAX_BLOCKS (blocks at most: one wave
// on a 132-SM H100; the last block reads LN_BWD_MAX_BLOCKS·2C partials, so more blocks lengthen the
// serial tail) live in llmc/ops.h with the scratch formula --dry-run uses.
enum { LN_WARPS_PER_BLOCK = 8 };  // forward: rows per block
// Forward: a lane's chunks of a row in flight at once (a GPT-2 124M row is 3, 350M's 4): its loads
// issued together instead of one round trip each; the registers allow it (44-ish a thread at 1).
enum { LN_FWD_INFLIGHT = 3 };

// ---- scratch -----------------------------------------------------------------------------------------
// Rows per backward block: a multiple of the warps, and enough that there are at most
// LN_BWD_MAX_BLOCKS blocks. Depends on N alone (the reduction order is a function of the shape).
static inline int layernorm_backward_rows(int N) {
    int per = (int)ceil_div((size_t)N, LN_BWD_MAX_BLOCKS);
    return (int)ceil_div((size_t)per, LN_BWD_WARPS) * LN_BWD_WARPS;
}
// (layernorm_backward_max_blocks(N_max), llmc/ops.h: the most blocks any N <= N_max launches.)

// The blocks of one backward count themselves done in a device word: (launch tag << 8) | blocks done.
// Each launch has its own tag (the host's launch count, 1..2^24 - 1, then again from 1). A launch's
// last block leaves the word armed for the next launch — (its tag, count 0) — so each block of that
// launch counts itself with one atomicAdd. A block whose add finds another tag there (the fresh word,
// what a launch that stopped part-way left, a value that is no launch's) replaces the word by
// compare-and-swap with (its tag, 1), and the blocks that found it so join the count the same way:
// nothing has to reset the word between launches, and nothing a stopped launch left is counted. (A
// stale count could be taken for the running launch's only if it carried the same tag: 2^24 - 1
// launches later.)
// Why not compare-and-swap alone, as this counter first was: the blocks of one launch do the same work
// and finish within a few microseconds of each other, and under contention such a loop lets one block
// through per L2 round trip — every other block's swap fails and goes round again — so 128 blocks
// took up to 128 round trips in a row, while the other multiprocessors waited for the last block. An
// add never fails: the L2 takes the 128 in a row at its own rate.
enum { LN_DONE_COUNT_BITS = 8 };
static_assert(LN_BWD_MAX_BLOCKS < (1 << LN_DONE_COUNT_BITS), "a launch's block count fits the counter's low bits");
struct LayerNormScratch {
    DeviceScratch partial;       // (blocks, 2, C) fp32: dweight then dbias per block
    unsigned* done = nullptr;    // the running backward's tag and count (above); 0 when allocated
    unsigned launches = 0;       // backward launches so far: the next launch's tag
};
static inline unsigned layernorm_launch_after(unsigned launches) { return launches % ((1u << (32 - LN_DONE_COUNT_BITS)) - 1) + 1; }
// The next launch's tag (1..2^24 - 1: never the fresh word's 0), counted as issued; the one after it,
// which that launch's last block arms the word for.
static inline unsigned layernorm_next_tag(LayerNormScratch* s) {
    s->launches = layernorm_launch_after(s->launches);
    return s->launches << LN_DONE_COUNT_BITS;
}
static inline unsigned layernorm_following_tag(const LayerNormScratch* s) { return layernorm_launch_after(s->launches) << LN_DONE_COUNT_BITS; }
// One block's count of itself, one atomic operation of its thread 0 a call: layernorm_count_done
// loops over it on the device, and test_cuda_streams runs several blocks' steps in every interleaving
// on a plain word (the emulator runs a grid's blocks one after another, never their atomics
// interleaved). Word: add1 (atomicAdd of 1), load, cas, exch, each returning the old value.
// ARMED false: the compare-and-swap loop alone, as first built (the kernel lab times the two).
struct LnCount {
    unsigned seen = 0;  // the word as this block last saw (or left) it
    int state = 0;      // 0: to count, 1: swapping (the word was under another tag), 2: last, to arm, 3: done
    bool last = false;  // this block's count made the launch's last
};
template <bool ARMED, typename Word>
__host__ __device__ inline bool layernorm_count_step(LnCount& c, Word& w, unsigned tag, unsigned next, unsigned blocks) {
    constexpr unsigned COUNT = (1u << LN_DONE_COUNT_BITS) - 1;
    auto counted = [&](bool last) {  // (the last block of an ARMED launch arms the word: one step more)
        c.last = last;
        c.state = ARMED && last ? 2 : 3;
        return c.state == 3;
    };
    if (c.state == 0) {
        if (!ARMED) {
            c.seen = w.load();
            c.state = 1;
            return false;
        }
        c.seen = w.add1();
        if ((c.seen & ~COUNT) == tag) return counted(c.seen + 1 == tag + blocks);  // armed for this launch (or replaced by one of its blocks)
        // Another tag: this add went into a word no count of this launch is in. It is wiped out by the
        // swap that first puts this launch's tag there (that swap expects the word with the add in it),
        // or it carried into the tag bits and made this tag with count 0 (a swap then counts this
        // block on top). Either way the block counts once, by its swap.
        c.seen += 1;
        c.state = 1;
        return false;
    }
    if (c.state == 1) {
        unsigned expected = c.seen, next_count = (expected & ~COUNT) == tag ? expected + 1 : tag + 1;
        c.seen = w.cas(expected, next_count);
        if (c.seen != expected) return false;  // another block's add or swap came first: again, from what it left
        return counted(next_count == tag + blocks);
    }
    if (c.state == 2) w.exch(next);  // every block has counted: nothing else touches the word this launch
    c.state = 3;
    return true;
}
struct LnDeviceWord {
    unsigned* p;
    __device__ unsigned add1() { return atomicAdd(p, 1u); }
    __device__ unsigned load() { return *(volatile unsigned*)p; }
    __device__ unsigned cas(unsigned expected, unsigned value) { return atomicCAS(p, expected, value); }
    __device__ void exch(unsigned value) { atomicExch(p, value); }
};
// Thread 0 of a finishing block: counts the block into `done` under this launch's tag; true for the
// launch's last block, which then arms the word for the next launch (tag `next`, count 0).
template <bool ARMED = true> __device__ inline bool layernorm_count_done(unsigned* done, unsigned tag, unsigned next, unsigned blocks) {
    LnDeviceWord w{done};
    LnCount c;
    while (!layernorm_count_step<ARMED>(c, w, tag, next, blocks)) {
    }
    return c.last;
}
static inline LayerNormScratch* layernorm_scratch() {
    static LayerNormScratch s;
    return &s;
}
static inline void layernorm_scratch_size(LayerNormScratch* s, int blocks, int C) {
    scratch_reserve(&s->partial, (size_t)blocks * 2 * C * sizeof(float));
    if (!s->done) {
        CUDA_CHECK(cudaMalloc((void**)&s->done, sizeof(unsigned)));
        device_memset_zero(s->done, sizeof(unsigned));
    }
}

// Sizes the backward's scratch for every call with N <= N_max rows and C <= C_max channels: the model
// calls it once at set-up with its largest LayerNorm (C, or 4C under --normformer).
static inline void layernorm_reserve(int N_max, int C_max) {
    if (N_max > 0 && C_max > 0) layernorm_scratch_size(layernorm_scratch(), layernorm_backward_max_blocks(N_max), C_max);
}

// ---- chunks of a row -------------------------------------------------------------------------------------
// Channels [c, c + n) of row x into a pack (n = V: one 16-byte load on the vector path; fewer only
// for a short last chunk, which never takes it), and back.
template <typename F, bool VEC> __device__ inline void ln_load_pack(Pack128<F>& p, const F* x, int c, int n) {
    constexpr int V = Pack128<F>::SIZE;
    if (VEC) {
        p = load128(x + c);
    } else {
        KEEL_UNROLL
        for (int k = 0; k < V; k++)
            if (k < n) p.v[k] = x[c + k];
    }
}
template <typename F, bool VEC> __device__ inline void ln_store_pack(F* x, const Pack128<F>& p, int c, int n) {
    constexpr int V = Pack128<F>::SIZE;
    if (VEC) {
        store128(x + c, p);
    } else {
        KEEL_UNROLL
        for (int k = 0; k < V; k++)
            if (k < n) x[c + k] = p.v[k];
    }
}
// A lane's next K chunks of a row (chunk i at channel c0 + i·32·V), every load issued before any
// value is used; n[i] channels exist in chunk i (0 past the row's end: nothing read or written).
template <typename F, int K> __device__ inline void ln_chunk_sizes(int (&n)[K], int c0, int C) {
    constexpr int V = Pack128<F>::SIZE;
    KEEL_UNROLL
    for (int i = 0; i < K; i++) {
        int c = c0 + i * 32 * V;
        n[i] = c >= C ? 0 : C - c < V ? C - c : V;
    }
}
template <typename F, int K, bool VEC>
__device__ inline void ln_load_chunks(Pack128<F> (&p)[K], int (&n)[K], const F* x, int c0, int C) {
    constexpr int V = Pack128<F>::SIZE;
    ln_chunk_sizes<F, K>(n, c0, C);
    KEEL_UNROLL
    for (int i = 0; i < K; i++)
        if (n[i]) ln_load_pack<F, VEC>(p[i], x, c0 + i * 32 * V, n[i]);
}
template <typename F, int K, bool VEC>
__device__ inline void ln_store_chunks(F* x, const Pack128<F> (&p)[K], const int (&n)[K], int c0) {
    constexpr int V = Pack128<F>::SIZE;
    KEEL_UNROLL
    for (int i = 0; i < K; i++)
        if (n[i]) ln_store_pack<F, VEC>(x, p[i], c0 + i * 32 * V, n[i]);
}

// f(value) for each of the lane's channels of row x, in chunk order, K chunks loaded at a time.
template <typename F, int K, bool VEC, typename Fn> __device__ inline void ln_row_values(const F* x, int C, int lane, Fn f) {
    constexpr int V = Pack128<F>::SIZE;
    Pack128<F> px[K];
    int n[K];
    for (int c0 = lane * V; c0 < C; c0 += K * 32 * V) {
        ln_load_chunks<F, K, VEC>(px, n, x, c0, C);
        KEEL_UNROLL
        for (int i = 0; i < K; i++)
            KEEL_UNROLL
            for (int k = 0; k < V; k++)
                if (k < n[i]) f(to_f32(px[i].v[k]));
    }
}

// ---- forward -------------------------------------------------------------------------------------------
// One row by one warp: statistics of x (C channels), then out. Lane `lane` touches only its chunks, K of
// them in flight at a time (LN_FWD_INFLIGHT; the sums in chunk order whatever K: the same bits). The
// second and third passes reread the row from L1.
template <typename F, int K, bool VEC>
__device__ inline void layernorm_row(F* o, float* mean, float* rstd, const F* x, const F* weight, const F* bias, int C, int lane) {
    constexpr int V = Pack128<F>::SIZE;
    Pack128<F> px[K];
    int n[K];
    float sum = 0.0f;
    ln_row_values<F, K, VEC>(x, C, lane, [&](float v) { sum += v; });
    float m = warp_sum(sum) / C;
    float sq = 0.0f;
    ln_row_values<F, K, VEC>(x, C, lane, [&](float v) {
        float d = v - m;
        sq = fadd_rn(sq, fmul_rn(d, d));
    });
    float s = 1.0f / sqrtf(warp_sum(sq) / C + (float)LAYERNORM_EPS);
    for (int c0 = lane * V; c0 < C; c0 += K * 32 * V) {
        ln_load_chunks<F, K, VEC>(px, n, x, c0, C);
        KEEL_UNROLL
        for (int i = 0; i < K; i++) {
            if (!n[i]) continue;
            int c = c0 + i * 32 * V;
            Pack128<F> pw, pb;
            ln_load_pack<F, VEC>(pw, weight, c, n[i]);
            ln_load_pack<F, VEC>(pb, bias, c, n[i]);
            KEEL_UNROLL
            for (int k = 0; k < V; k++)
                if (k < n[i]) px[i].v[k] = from_f32<F>(fadd_rn(fmul_rn(fmul_rn(to_f32(px[i].v[k]) - m, s), to_f32(pw.v[k])), to_f32(pb.v[k])));
        }
        ln_store_chunks<F, K, VEC>(o, px, n, c0);
    }
    if (lane == 0) {
        *mean = m;
        *rstd = s;
    }
}

template <typename F, int K, bool VEC>
__global__ void layernorm_forward_kernel(F* out, float* mean, float* rstd,        // (N,C), (N), (N)
                                         const F* inp,                    // (N,C)
                                         const F* weight, const F* bias,  // (C), (C)
                                         int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together: no lane is missing from warp_sum
    size_t off = (size_t)row * C;
    layernorm_row<F, K, VEC>(out + off, mean + row, rstd + row, inp + off, weight, bias, C, lane);
}

// residual_out = a + b rounded to F (residual_forward's arithmetic), then layernorm_row on the row it
// wrote. Each lane rereads only the channels it wrote itself (same chunks), so program order is all the
// ordering needed; the reread hits L1.
template <typename F, int K, bool VEC>
__global__ void residual_layernorm_forward_kernel(F* residual_out, F* ln_out,          // (N,C), (N,C)
                                                  float* mean, float* rstd,            // (N), (N)
                                                  const F* a, const F* b,              // (N,C), (N,C)
                                                  const F* weight, const F* bias,      // (C), (C)
                                                  int N, int C) {
    constexpr int V = Pack128<F>::SIZE;
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // whole warp
    size_t off = (size_t)row * C;
    F* r = residual_out + off;
    Pack128<F> pa[K], pb[K];
    int n[K];
    for (int c0 = lane * V; c0 < C; c0 += K * 32 * V) {
        ln_load_chunks<F, K, VEC>(pa, n, a + off, c0, C);
        ln_load_chunks<F, K, VEC>(pb, n, b + off, c0, C);
        KEEL_UNROLL
        for (int i = 0; i < K; i++)
            KEEL_UNROLL
            for (int k = 0; k < V; k++)
                if (k < n[i]) pa[i].v[k] = from_f32<F>(to_f32(pa[i].v[k]) + to_f32(pb[i].v[k]));
        ln_store_chunks<F, K, VEC>(r, pa, n, c0);
    }
    layernorm_row<F, K, VEC>(ln_out + off, mean + row, rstd + row, r, weight, bias, C, lane);
}

// ---- backward ------------------------------------------------------------------------------------------
// Memory-level parallelism. The backward is bound by memory, and a load's round trip (about a
// microsecond from DRAM, half that from L2) is far longer than the arithmetic on what it brings, so
// each thread keeps several independent loads in flight instead of waiting on one at a time: a lane
// loads LN_BWD_INFLIGHT chunks of a row's dout and inp (of dinp, in its second pass over the row)
// before it adds any of them, a column thread LN_BWD_INFLIGHT rows, and the last block's threads
// LN_BWD_FINISH_INFLIGHT slots of their 4 columns. The sums still run in the order the contract above gives (chunk by chunk, row by row, slot by slot):
// the values are loaded early, never added in another order, so the bits do not depend on how many
// are in flight (test_cuda_layers compares the launcher with the kernel at 1 in flight, byte for
// byte; the kernel lab times the two). 3: a GPT-2 124M row (C = 768, 8 bf16 a chunk) is 3 chunks a
// lane, one group; at 4 the 16-bit kernels need more than the 128 registers a thread of a 512-thread
// block can have (they spill under a launch bound).
// The scalar fallback (odd C, misaligned views) runs with 1: it is for correctness, not speed.
// The last block's sum (phase 3) is the launch's serial tail — one multiprocessor works while the others
// have nothing of this launch left — and its threads hold nothing else then: 16 slots in flight, 8 round
// trips to L2 for 128 blocks (it was 2·LN_BWD_INFLIGHT = 6: 22 round trips).
enum { LN_BWD_INFLIGHT = 3, LN_BWD_FINISH_INFLIGHT = 16 };

// ---- the one-pass form's shared memory ----------------------------------------------------------------
// The backward's one-pass form (LN_BWD_ONE_PASS) keeps each warp's dweight/dbias sums over the rows
// it owns in its own region of the block's shared memory, 2·V floats per chunk of V channels: lane l
// holds chunks l, l + 32, ... (its chunks of every row), so during phase 1 no lane touches another's
// entries. Group q of chunks (32q .. 32q + 31; the last group `lanes` < 32 wide) takes lanes·V/2
// float4s: entry u of lane l's chunk in it (u < V/4: dweight's channels 4u .. 4u + 3 of the chunk,
// else dbias's 4(u - V/4) ..) at float4 q·16V + u·lanes + l. A warp's 16-byte access of one entry u
// is then 32 consecutive float4s — every 8-lane phase one 128-byte row of the banks, conflict-free
// (test_cuda_layers checks every access and the layout's bijection). Index in float4s.
__host__ __device__ inline int ln_cols_at(int q, int u, int lane, int chunks, int V) {
    int lanes = chunks - 32 * q < 32 ? chunks - 32 * q : 32;
    return q * 16 * V + u * lanes + lane;
}
// Floats of one warp's region: 2·V per chunk.
__host__ __device__ inline int ln_cols_floats(int C, int V) { return (C + V - 1) / V * 2 * V; }
// The inverse, for the block's sum over its warps: region float f holds dweight (*bias = false) or dbias
// (*bias = true) of the channel returned; -1 for the padding of a short last chunk (C % V != 0).
__host__ __device__ inline int ln_cols_channel(int f, int C, int V, bool* bias) {
    int chunks = (C + V - 1) / V, f4 = f / 4, q = f4 / (16 * V), r = f4 % (16 * V);
    int lanes = chunks - 32 * q < 32 ? chunks - 32 * q : 32;
    int u = r / lanes, lane = r % lanes;
    *bias = u >= V / 4;
    int c = (32 * q + lane) * V + (u % (V / 4)) * 4 + f % 4;
    return c < C ? c : -1;
}
// Bytes of shared memory the one-pass form takes a block (every warp's region).
static inline size_t layernorm_backward_fused_smem(int C, int V) { return (size_t)LN_BWD_WARPS * ln_cols_floats(C, V) * sizeof(float); }

// Phase 1 for one row by one warp: dx += rstd·(g - mean(g) - xhat·mean(g·xhat)); write: dx = 0 + ...
// (dx not read; the bits of adding into zeros). K chunks of d and x (then of dx) in flight a lane.
// COLS (the one-pass form): the row's dout·xhat and dout are also added into the lane's entries
// of its warp's region `cols` (ln_cols_at), chunk by chunk, while the first pass holds them.
template <typename F, int K, bool VEC, bool COLS = false>
__device__ inline void layernorm_backward_row(F* dx, const F* d, const F* x, const F* weight, float m, float s, int C,
                                              int lane, bool write, float* cols = nullptr) {
    constexpr int V = Pack128<F>::SIZE;
    Pack128<F> pd[K], px[K], pdx[K];  // pdx: its writes only where n[i] says the channel exists
    int n[K];
    float g_sum = 0.0f, gx_sum = 0.0f;
    int chunks = (C + V - 1) / V;
    for (int c0 = lane * V, q0 = 0; c0 < C; c0 += K * 32 * V, q0 += K) {
        ln_load_chunks<F, K, VEC>(pd, n, d, c0, C);
        ln_load_chunks<F, K, VEC>(px, n, x, c0, C);
        KEEL_UNROLL
        for (int i = 0; i < K; i++) {
            if (!n[i]) continue;
            Pack128<F> pw;  // the weight from L1 or L2 (every row reads it), chunk by chunk
            ln_load_pack<F, VEC>(pw, weight, c0 + i * 32 * V, n[i]);
            Pack<float, 4> acc[V / 2];  // COLS: the chunk's running dweight (acc[0 .. V/4)) and dbias sums
            if (COLS) {
                KEEL_UNROLL
                for (int u = 0; u < V / 2; u++) acc[u] = load128(cols + 4 * ln_cols_at(q0 + i, u, lane, chunks, V));
            }
            KEEL_UNROLL
            for (int k = 0; k < V; k++)
                if (k < n[i]) {
                    float fd = to_f32(pd[i].v[k]), xm = to_f32(px[i].v[k]) - m;
                    float g = fmul_rn(fd, to_f32(pw.v[k]));
                    g_sum += g;
                    gx_sum = fadd_rn(gx_sum, fmul_rn(fmul_rn(g, xm), s));
                    if (COLS) {  // the column sums' terms as the two-pass kernel forms them: dout·xhat, dout
                        float& w = acc[k / 4].v[k % 4];
                        float& b = acc[V / 4 + k / 4].v[k % 4];
                        w = fadd_rn(w, fmul_rn(fd, fmul_rn(xm, s)));
                        b += fd;
                    }
                }
            if (COLS) {
                KEEL_UNROLL
                for (int u = 0; u < V / 2; u++) store128(cols + 4 * ln_cols_at(q0 + i, u, lane, chunks, V), acc[u]);
            }
        }
    }
    float gmean = warp_sum(g_sum) / C, gxmean = warp_sum(gx_sum) / C;
    // Again over the row: dx's K chunks in flight (from DRAM); d, x and the weight chunk by chunk, from
    // L1, where the first pass left them (a row of K chunks a lane or fewer)
    for (int c0 = lane * V; c0 < C; c0 += K * 32 * V) {
        if (write)
            ln_chunk_sizes<F, K>(n, c0, C);
        else
            ln_load_chunks<F, K, VEC>(pdx, n, dx, c0, C);
        KEEL_UNROLL
        for (int i = 0; i < K; i++) {
            if (!n[i]) continue;
            int c = c0 + i * 32 * V;
            Pack128<F> qd, qx, qw;
            ln_load_pack<F, VEC>(qd, d, c, n[i]);
            ln_load_pack<F, VEC>(qx, x, c, n[i]);
            ln_load_pack<F, VEC>(qw, weight, c, n[i]);
            KEEL_UNROLL
            for (int k = 0; k < V; k++)
                if (k < n[i]) {
                    float xhat = fmul_rn(to_f32(qx.v[k]) - m, s);
                    float g = fmul_rn(to_f32(qd.v[k]), to_f32(qw.v[k]));
                    float old = write ? 0.0f : to_f32(pdx[i].v[k]);
                    pdx[i].v[k] = from_f32<F>(fadd_rn(old, fmul_rn(s, g - gmean - fmul_rn(xhat, gxmean))));
                }
        }
        ln_store_chunks<F, K, VEC>(dx, pdx, n, c0);
    }
}

// Phase 2 for one (row slice, chunk): Σ over rows r0, r0 + step, ... < r1 of dout·xhat and dout for the
// channels [c0, c0 + n), added in row order; K rows' loads in flight.
template <typename F, int K, bool VEC>
__device__ inline int layernorm_backward_columns(float* dw, float* db, const F* dout, const F* inp, const float* mean,
                                                 const float* rstd, int r0, int r1, int step, int c0, int C) {
    constexpr int V = Pack128<F>::SIZE;
    int n = C - c0 < V ? C - c0 : V;
    KEEL_UNROLL
    for (int k = 0; k < V; k++) dw[k] = db[k] = 0.0f;
    for (int row = r0; row < r1; row += K * step) {
        Pack128<F> pd[K], px[K];
        float m[K], s[K];
        KEEL_UNROLL
        for (int i = 0; i < K; i++) {
            int r = row + i * step;
            if (r >= r1) continue;
            size_t off = (size_t)r * C;
            ln_load_pack<F, VEC>(pd[i], dout + off, c0, n);
            ln_load_pack<F, VEC>(px[i], inp + off, c0, n);
            m[i] = mean[r];
            s[i] = rstd[r];
        }
        KEEL_UNROLL
        for (int i = 0; i < K; i++) {
            if (row + i * step >= r1) continue;
            KEEL_UNROLL
            for (int k = 0; k < V; k++)
                if (k < n) {
                    float fd = to_f32(pd[i].v[k]);
                    dw[k] = fadd_rn(dw[k], fmul_rn(fd, fmul_rn(to_f32(px[i].v[k]) - m[i], s[i])));
                    db[k] += fd;
                }
        }
    }
    return n;
}

// The backward's slices: S row slices of the block's rows side by side with the C/V chunks, as many
// as the block's threads allow (1 when the chunks alone fill the block).
static inline int layernorm_backward_slices(int C, int V, int rows) {
    int chunks = (int)ceil_div((size_t)C, V);
    int S = LN_BWD_WARPS * 32 / chunks;
    if (S > rows) S = rows;
    return S < 1 ? 1 : S;
}

// Phase 3 in the last block: dweight/dbias (+)= Σ over the blocks' slots in block order, a thread per
// 4 columns of the (2, C) slot (quad4: C % 4 == 0, the 16-byte path) or per column, Q slots' loads in
// flight. The slots come through L2 (pack_load_cg), never a line L1 kept from before.
template <int Q>
__device__ inline void layernorm_backward_finish(float* dweight, float* dbias, const float* partial, int blocks, int C,
                                                 bool quad4, bool write) {
    int W = quad4 ? 4 : 1, cols = 2 * C / W;
    for (int q = threadIdx.x; q < cols; q += blockDim.x) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int k0 = 0; k0 < blocks; k0 += Q) {
            Pack<float, 4> v[Q];
            KEEL_UNROLL
            for (int i = 0; i < Q; i++) {
                if (k0 + i >= blocks) continue;
                const float* p = partial + (size_t)(k0 + i) * 2 * C + (size_t)q * W;
                if (quad4)
                    v[i] = pack_load_cg<float, 4>(p);
                else
                    v[i].v[0] = pack_load_cg<float, 1>(p).v[0];
            }
            KEEL_UNROLL
            for (int i = 0; i < Q; i++) {
                if (k0 + i >= blocks) continue;
                KEEL_UNROLL
                for (int j = 0; j < 4; j++)
                    if (j < W) acc[j] += v[i].v[j];
            }
        }
        KEEL_UNROLL
        for (int j = 0; j < 4; j++) {
            if (j >= W) continue;
            int c = q * W + j;  // < C: dweight, else dbias (a quad never straddles: C % 4 == 0)
            float* o = c < C ? dweight + c : dbias + (c - C);
            *o = (write ? 0.0f : *o) + acc[j];
        }
    }
}

// dinp_write / dweight_write: dinp / (dweight, dbias) written instead of accumulated into. K: loads in
// flight (LN_BWD_INFLIGHT; 1 for the kernel lab's comparison); Q: the last block's slots in flight;
// ARMED: the counter's atomicAdd (false: compare-and-swap alone, as first built; the lab times both).
// FUSED: the one-pass form of the column sums (dynamic shared memory: layernorm_backward_fused_smem);
// false, the two-pass form.
// The launch bound holds ptxas to the 128 registers a thread that a 512-thread block can have (124
// at sm_90 now, bf16, one pass): past them the launch would fail at run time, where under the bound
// the kernel spills, which test_ptxas reports at build time.
template <typename F, int K, bool VEC, int Q = LN_BWD_FINISH_INFLIGHT, bool ARMED = true, bool FUSED = true>
__global__ void __launch_bounds__(LN_BWD_WARPS * 32)
    layernorm_backward_kernel(F* dinp, float* dweight, float* dbias,  // (N,C) (C) (C), accumulated into
                              float* partial, unsigned* done,        // (gridDim.x, 2, C), counter
                              unsigned tag, unsigned next_tag,       // this launch's (layernorm_next_tag), the next one's
                              const F* dout, const F* inp,           // (N,C), (N,C)
                              const F* weight,                       // (C)
                              const float* mean, const float* rstd,  // (N), (N)
                              int N, int C, int rows, int S, bool quad4, bool dinp_write, bool dweight_write) {
    constexpr int V = Pack128<F>::SIZE;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    int r0 = blockIdx.x * rows, r1 = r0 + rows < N ? r0 + rows : N;
    float* slot = partial + (size_t)blockIdx.x * 2 * C;  // (2, C)

    if constexpr (FUSED) {
        // 1. dinp, one warp per row, and the warp's column sums of its rows in its region (zeroed first;
        //    its lanes then touch only their own entries)
        KEEL_DYNAMIC_SHARED(float, cols);  // (warps, ln_cols_floats(C, V))
        int region = ln_cols_floats(C, V);
        float* mine = cols + (size_t)warp * region;
        for (int f = lane * 4; f < region; f += 32 * 4) store128(mine + f, Pack<float, 4>{});
        __syncwarp();
        for (int row = r0 + warp; row < r1; row += warps) {
            size_t off = (size_t)row * C;
            layernorm_backward_row<F, K, VEC, true>(dinp + off, dout + off, inp + off, weight, mean[row], rstd[row], C, lane,
                                                    dinp_write, mine);
        }
        // 2. the block's slot: the warps' regions added in warp order (the threads read consecutive floats)
        __syncthreads();
        for (int f = threadIdx.x; f < region; f += blockDim.x) {
            bool bias;
            int c = ln_cols_channel(f, C, V, &bias);
            if (c < 0) continue;
            float v = cols[f];
            for (int w = 1; w < warps; w++) v += cols[(size_t)w * region + f];
            slot[(bias ? C : 0) + c] = v;
        }
    } else {
        // 1. dinp, one warp per row
        for (int row = r0 + warp; row < r1; row += warps) {
            size_t off = (size_t)row * C;
            layernorm_backward_row<F, K, VEC>(dinp + off, dout + off, inp + off, weight, mean[row], rstd[row], C, lane, dinp_write);
        }

        // 2. this block's dweight/dbias into its slot, the rows read again
        float dw[V], db[V];
        int chunks = (C + V - 1) / V;
        if (S == 1) {
            for (int j = threadIdx.x; j < chunks; j += blockDim.x) {
                int n = layernorm_backward_columns<F, K, VEC>(dw, db, dout, inp, mean, rstd, r0, r1, 1, j * V, C);
                KEEL_UNROLL
                for (int k = 0; k < V; k++)
                    if (k < n) {
                        slot[j * V + k] = dw[k];
                        slot[C + j * V + k] = db[k];
                    }
            }
        } else {
            KEEL_DYNAMIC_SHARED(float, sums);  // (S, 2, C): slice s's dweight then dbias sums
            int s = threadIdx.x / chunks, j = threadIdx.x % chunks;
            if (s < S) {
                int n = layernorm_backward_columns<F, K, VEC>(dw, db, dout, inp, mean, rstd, r0 + s, r1, S, j * V, C);
                KEEL_UNROLL
                for (int k = 0; k < V; k++)
                    if (k < n) {
                        sums[(size_t)(2 * s) * C + j * V + k] = dw[k];
                        sums[(size_t)(2 * s + 1) * C + j * V + k] = db[k];
                    }
            }
            __syncthreads();
            for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {  // c < C: dweight, else dbias
                int half = c / C, cc = c % C;
                float v = sums[(size_t)half * C + cc];
                for (int k = 1; k < S; k++) v += sums[(size_t)(2 * k + half) * C + cc];
                slot[c] = v;
            }
        }
    }

    // 3. count this block done; the last one adds every slot in block order
    KEEL_SHARED(int, is_last, );
    grid_fence();  // this thread's slot writes are visible device-wide before the count below
    __syncthreads();
    if (threadIdx.x == 0) {
        is_last = layernorm_count_done<ARMED>(done, tag, next_tag, gridDim.x);
        grid_fence();  // acquire side: the slots counted before ours are read after this point
    }
    __syncthreads();
    if (!is_last) return;
    layernorm_backward_finish<Q>(dweight, dbias, partial, (int)gridDim.x, C, quad4, dweight_write);
}

// ---- launchers -------------------------------------------------------------------------------------------
// The 128-bit path: C a multiple of the pack (every row start then aligned like the base) and every
// base pointer 16-byte aligned.
template <typename F> static inline bool ln_vec_ok(int C, std::initializer_list<const void*> ptrs) {
    if (C % Pack128<F>::SIZE != 0) return false;
    for (const void* p : ptrs)
        if (!aligned16(p)) return false;
    return true;
}

// K: chunks in flight a lane (LN_FWD_INFLIGHT; the kernel lab launches 1 beside it: same bits).
template <typename F, int K = LN_FWD_INFLIGHT>
void layernorm_forward(F* out, float* mean, float* rstd,           // (N,C), (N), (N)
                       const F* inp,                       // (N,C)
                       const F* weight, const F* bias,     // (C), (C)
                       int N, int C) {
    if (N == 0 || C == 0) return;
    int blocks = (int)ceil_div(N, LN_WARPS_PER_BLOCK);
    if (ln_vec_ok<F>(C, {out, inp, weight, bias}))
        KEEL_LAUNCH(layernorm_forward_kernel<F KEEL_COMMA K KEEL_COMMA true>, blocks, 32 * LN_WARPS_PER_BLOCK, 0, MAIN_STREAM)(
            out, mean, rstd, inp, weight, bias, N, C);
    else
        KEEL_LAUNCH(layernorm_forward_kernel<F KEEL_COMMA 1 KEEL_COMMA false>, blocks, 32 * LN_WARPS_PER_BLOCK, 0, MAIN_STREAM)(
            out, mean, rstd, inp, weight, bias, N, C);
    CUDA_CHECK_LAUNCH();
}

template <typename F, int K = LN_FWD_INFLIGHT>
void residual_layernorm_forward(F* residual_out, F* ln_out,             // (N,C), (N,C)
                                float* mean, float* rstd,               // (N), (N)
                                const F* a, const F* b,                 // (N,C), (N,C)
                                const F* weight, const F* bias,         // (C), (C)
                                int N, int C) {
    if (N == 0 || C == 0) return;
    int blocks = (int)ceil_div(N, LN_WARPS_PER_BLOCK);
    if (ln_vec_ok<F>(C, {residual_out, ln_out, a, b, weight, bias}))
        KEEL_LAUNCH(residual_layernorm_forward_kernel<F KEEL_COMMA K KEEL_COMMA true>, blocks, 32 * LN_WARPS_PER_BLOCK, 0, MAIN_STREAM)(
            residual_out, ln_out, mean, rstd, a, b, weight, bias, N, C);
    else
        KEEL_LAUNCH(residual_layernorm_forward_kernel<F KEEL_COMMA 1 KEEL_COMMA false>, blocks, 32 * LN_WARPS_PER_BLOCK, 0, MAIN_STREAM)(
            residual_out, ln_out, mean, rstd, a, b, weight, bias, N, C);
    CUDA_CHECK_LAUNCH();
}

// The one-pass form fits a block where every warp's region (layernorm_backward_fused_smem) fits the
// device's shared memory per block beside the kernel's one static int: C up to about 1800 channels in
// bf16 on an H100 or H200 (GPT-2 1.5B's 1600 included), about 1300 on an A100 (and under the emulation,
// which has an A100's limit). Wider rows (BLOOM's 14336, --normformer's 4C at 124M) read their rows again.
// (LN_BWD_STATIC_SMEM: room for the kernel's static shared memory, its one int; ptxas reports 16 bytes.)
enum { LN_BWD_STATIC_SMEM = 64 };
static inline bool layernorm_backward_fused_fits(size_t smem) { return smem + LN_BWD_STATIC_SMEM <= cuda_device().sharedMemPerBlockOptin; }

// One instantiation of the backward kernel launched with the kernel's own arguments (its
// shared-memory opt-in once, when over 48 KiB: up to the device's limit less LN_BWD_STATIC_SMEM).
template <typename F, int K, bool VEC, int Q, bool ARMED, bool FUSED, typename... Args>
static void layernorm_backward_launch(int blocks, size_t smem, Args... args) {
    static bool optin = false;
    if (smem > 48 * 1024)
        smem_optin(layernorm_backward_kernel<F, K, VEC, Q, ARMED, FUSED>, (size_t)cuda_device().sharedMemPerBlockOptin - LN_BWD_STATIC_SMEM, &optin);
    KEEL_LAUNCH(layernorm_backward_kernel<F KEEL_COMMA K KEEL_COMMA VEC KEEL_COMMA Q KEEL_COMMA ARMED KEEL_COMMA FUSED>, blocks, LN_BWD_WARPS * 32,
                smem, MAIN_STREAM)(args...);
    CUDA_CHECK_LAUNCH();
}

// PASSES: LN_BWD_ONE_PASS, the column sums fused into the first pass (where they fit, else the launch
// dies naming the size); LN_BWD_TWO_PASS, the rows read again for them; LN_BWD_AUTO (the model's), the
// first where it fits. K: loads in flight, Q: the last block's slots in flight, ARMED: the counter (the
// kernel lab launches the kernel as first built — K = 1, Q = 2, compare-and-swap — beside this one; the
// same bits at the same PASSES).
enum { LN_BWD_AUTO = 0, LN_BWD_ONE_PASS = 1, LN_BWD_TWO_PASS = 2 };
template <typename F, int K = LN_BWD_INFLIGHT, int Q = LN_BWD_FINISH_INFLIGHT, bool ARMED = true, int PASSES = LN_BWD_AUTO>
void layernorm_backward(F* dinp, float* dweight, float* dbias,     // (N,C) (C) (C), accumulated into (written: the flags)
                        const F* dout, const F* inp,       // (N,C), (N,C)
                        const F* weight, const float* mean, const float* rstd, int N, int C,
                        bool dinp_write = false, bool dweight_write = false) {
    if (N == 0 || C == 0) return;
    constexpr int V = Pack128<F>::SIZE;
    int rows = layernorm_backward_rows(N), blocks = (int)ceil_div((size_t)N, rows);
    size_t fused_smem = layernorm_backward_fused_smem(C, V);
    bool fused = PASSES == LN_BWD_ONE_PASS || (PASSES == LN_BWD_AUTO && layernorm_backward_fused_fits(fused_smem));
    if (fused && !layernorm_backward_fused_fits(fused_smem))
        keel_die("layernorm_backward: the one-pass form needs %zu bytes of shared memory a block at C = %d, over this device's %zu",
                 fused_smem, C, (size_t)cuda_device().sharedMemPerBlockOptin);
    int S = layernorm_backward_slices(C, V, rows);
    size_t smem = fused ? fused_smem : S > 1 ? (size_t)S * 2 * C * sizeof(float) : 0;  // two-pass: S·C <= 512·V channels, <= 32 KiB
    LayerNormScratch* s = layernorm_scratch();
    layernorm_scratch_size(s, blocks, C);  // no-op once layernorm_reserve sized it
    bool vec = ln_vec_ok<F>(C, {dinp, dout, inp, weight});
    bool quad4 = C % 4 == 0 && aligned16(s->partial.ptr);  // every slot row then starts 16-byte aligned
    unsigned tag = layernorm_next_tag(s), next_tag = layernorm_following_tag(s);
    float* partial = (float*)s->partial.ptr;
    // the vector path with K loads in flight; the scalar fallback (odd C, misaligned views) one at a time
    auto launch = [&](auto vec_c, auto fused_c) {
        constexpr bool VEC = decltype(vec_c)::value, FUSED = decltype(fused_c)::value;
        layernorm_backward_launch<F, VEC ? K : 1, VEC, Q, ARMED, FUSED>(blocks, smem, dinp, dweight, dbias, partial, s->done, tag, next_tag, dout, inp,
                                                                       weight, mean, rstd, N, C, rows, S, quad4, dinp_write, dweight_write);
    };
    if (vec)
        fused ? launch(std::true_type{}, std::true_type{}) : launch(std::true_type{}, std::false_type{});
    else
        fused ? launch(std::false_type{}, std::true_type{}) : launch(std::false_type{}, std::false_type{});
}

}  // namespace keel_cuda
