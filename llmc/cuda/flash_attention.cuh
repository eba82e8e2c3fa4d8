// cuda/flash_attention.cuh — fused causal multi-head self-attention in the FlashAttention-2 scheme
// (Dao 2023): the (T,T) scores and probabilities never reach global memory. The contract of
// cpu/flash_attention.h (= cpu/attention.h's math: standard or qk-inward scaling, layer coefficient,
// ALiBi, causal mask, dropout on the probabilities keyed by (h + head_offset, t, u)), saving only the
// log-sum-exp of each row for the backward.
// Legend: B batch, T time, C channels, NH heads, hs = C/NH head size (HS, a template argument),
// BH = B·NH head-batches, F the storage type (bf16 or fp16). inp = qkv (B,T,3C); out (B,T,C);
// lse (B,NH,T) fp32; dinp (B,T,3C) accumulated into, or written with dinp_write (every element of it
// comes from exactly one lane: the model's gradient buffer needs no zeroing first).
//
// Coverage (flash_attention_supported): hs ∈ {64, 128}, F = bf16 or fp16, compute capability ≥ 8.0.
// fp32 runs and other head sizes take the GEMM path (cuda/attention.cuh).
//
// Instructions (cuda/mma.cuh): every product is mma.sync m16n8k16 (16-bit operands, fp32
// accumulators) with its operands loaded by ldmatrix from swizzled shared tiles (swz: every warp
// access conflict-free, test_flash_layout), and tiles arrive by cp.async, the next one in flight
// while the current one is multiplied. The accumulators never leave registers inside a loop: a score
// fragment, rescaled and rounded to F, is the A operand of the next product as it stands.
//
// Forward: block = (query tile of BR rows, head-batch), 4 warps, a warp owns MT row tiles of 16 query
//   rows (flash_fwd_mt: 1, BR = 64, the faster on an H200; 2 at hs 64, BR = 128, FlashAttention-2's
//   block, is built for the kernel lab): its
//   Q fragments (MT · hs/16 × 4 registers) are loaded once. Key tiles of BC = 64 ascending (causal: only
//   tiles with a key ≤ the block's last query; inside, a warp skips the 8-key column blocks above its
//   last query), K and V double-buffered. Per tile: S = Q·Kᵀ (16·MT × 64 per warp, fp32 registers); the
//   score variant in fp32 (alpha = 1/(√hs·coeff), or sq² for qk-inward; ALiBi slope·u/coeff; ·coeff);
//   running max m and sum l per row (a row's 64 scores sit on the 4 lanes of a quad: two xor
//   shuffles); P = F(exp(s - m)·drop) packed straight into A fragments; O (16·MT × hs fp32 registers)
//   rescaled by exp(m_old - m) and O += P·V. Last: out = F(O / l) staged through shared memory for
//   16-byte stores, lse = m + log(l).
// Backward (FlashAttention-2's five products per tile pair, deterministic, no float atomics):
//   D_t = dout_t·out_t by a warp-per-row kernel first (= Σ_u drop(att)·datt in exact arithmetic).
//   Then one kernel: block = (key tile of BC = 64 keys, head-batch), a warp owns 16 keys; steps over
//   query rows of BQ = 64 (hs 64) or 32 (hs 128: the registers of dK and dV) from the diagonal on,
//   Q and dO double-buffered. Per step a warp forms Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, recomputes
//   p = exp(s - lse_t), and with Pᵀ·drop and dSᵀ = p·(dP·drop - D_t)/√hs as A fragments adds
//   dV += (P·drop)ᵀ·dO and dK += dSᵀ·Q into fp32 registers kept for the whole loop. dSᵀ also goes to
//   shared memory, and the block forms the step's dQ part = dS·K (fifth product).
//   dQ in a fixed order: a query step's parts are added by its key tiles from the diagonal tile down
//   to tile 0, each in turn: a per-(head-batch, step) counter in device memory says whose turn it is
//   (a block spins until it equals the number of tiles before it), the partial sum waits in an fp32
//   buffer (dq_acc), and tile 0 adds the total into dinp and sets the counter to 0 (no launch's
//   turn). The trainer's chain (FLASH_CHAIN_EARLY): the counter is read at the step's top, each warp
//   waits for the turn after the barrier that completes dSᵀ and fetches its part of the sum by
//   cp.async before its dQ product (the L2 round trip behind the product), adds and stores after it,
//   and the turn passes after the next step's dSᵀ barrier: two block barriers a step. Where its
//   staging tile would fit fewer blocks a multiprocessor than the serial chain (head size 128 on an
//   A100), the launcher takes the serial chain (flash_backward_chain): the same bytes. The counter's high bits carry the launch's tag (flash_scratch), so a launch that stopped
//   part-way leaves nothing a later one waits on: the diagonal tile goes first without reading the
//   counter, and every other waits for its own launch's tag. Blocks are numbered so that higher key tiles start first
//   (block 0 is a last tile; flash_block): a block only ever waits for one that started before it,
//   so the spin cannot deadlock, and under the emulation (blocks one after another in launch order)
//   the turn has always come.
//   FLASH_CHAIN_SERIAL (the kernel lab's variant 7) is the chain as first timed on a GPU, each load of
//   the sum waited on before the next, four barriers a step.
//   FLASH_CHAIN_DEFER (the kernel lab's variant 6, not yet the trainer's): a step's part waits
//   in shared memory and joins the chain during the next step — the turn awaited at that step's top
//   barrier, the sum before it fetched by cp.async while that step's products run — so the chain's
//   L2 round trip leaves the critical path; the same sums in the same order: the same bytes.
//   Every output element is produced by one warp or one ordered chain, summed in an order fixed by
//   the shape: the same bits run to run.
// Score variants and dropout stay out of the loops' floating point: ALiBi's addend is per key (the
// backward keeps a lane's two), the layer coefficient a plain multiply (1 without one: the same
// bits), and dropout's keep decisions a bit mask a lane forms once a tile (forward) or step
// (backward) by integer hashes in a loop kept rolled (flash_keep_bits). That took the kernels' code
// from 219 KB to 113 KB (the backward at head size 64, sm_90) and 112 to 71 KB (the forward): each
// copy of the softmax had carried one unrolled hash and double-precision compare a score.
// Numerics vs the GEMM path (cuda/attention.cuh): both multiply F operands exactly and sum in fp32.
// The GEMM path rounds the normalized probability to F (then ·drop, rounded again) before att·V;
// here the unnormalized exp(s - m_running)·drop is rounded to F and the fp32 sum is divided by l at
// the end. The backward uses p = exp(s - lse) in fp32 (the GEMM path: the stored F probability) and
// D = dout·out from the F output (GEMM path: Σ att·datt in fp32). Each is an F rounding of one term,
// so the two paths agree to F tolerances, not bits. lse is fp32. Where the exact dS is 0 (query
// row 0: one key, p = 1, dP·drop = D) the GEMM path's Σ att·datt cancels exactly, while flash's
// D from the rounded out leaves dS of the order of 2^-9·|dout|·|v|/√hs (FlashAttention-2 has the
// same property); test_cuda_flash bounds the difference.
// Shared memory (bytes; opted in with cudaFuncSetAttribute above the default 48 KB):
//   forward   Q (BR·hs F) + K, V (2 buffers each, 64·hs F)      hs 64: 40 KB (BR 128: 48 KB), 128: 80 KB
//   backward  K, V (BC·hs F) + Q, dO (2 buffers each, BQ·hs F) + dSᵀ (BC·BQ F) + lse, D (2·2·BQ fp32)
//             + the dQ chain's fp32 tiles: BQ·(hs + 8) fp32 for the early chain (two deferred, none serial)
//             early chain: 4 warps (BC = 64) hs 64: 75 KB, 128: 85.5 KB; 8 warps: 99, 121.5 KB
// Scratch (flash_attention_scratch_bytes, reserved once by flash_attention_reserve): D (B,NH,T) fp32,
// dq_acc (B,NH,T,hs) fp32, the dQ counters (B,NH,⌈T/BQ⌉) int (zeroed when allocated; a launch that
// completes leaves every counter it used at 0, one that stopped leaves its tag's turns). The caller keeps lse (B,NH,T) fp32 per layer instead of att (B,NH,T,T).
// Grid: one dimension, ⌈T/tile⌉·B·NH blocks, in the order of flash_block (tile by tile over groups
// of heads: which block starts when).
#pragma once

// mma.sync with bf16 operands needs compute capability 8.0. A build for an older target
// (GPU_ARCH=75) still compiles: there the kernels are a trap, and the model never selects flash on
// such a device (gpt_build asks the device: backend_compute_capability).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define KEEL_FLASH_ARCH_OK 0
#else
#define KEEL_FLASH_ARCH_OK 1
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "llmc/cuda/attention.cuh"
#include "llmc/cuda/mma.cuh"

namespace keel_cuda {

enum {
    FLASH_WARPS = 4,
    FLASH_THREADS = 32 * FLASH_WARPS,
    FLASH_BC = 64,  // keys of a forward tile and of a backward block
};
// The forward's row tiles (16 query rows each) a warp owns: 1, a 64-query block of 4 warps. Two at
// head size 64 (FlashAttention-2's 128-query block: each K and V fragment loaded from shared memory
// feeds two row tiles, half the shared-memory reads a product) is built too, and an H200 timed it
// slower or equal at every shape it ran (B=16 T=1024: 0.158 against 0.146 ms; T=512: 0.106 against
// 0.094; T=4096: equal, the kernel lab's variant 4): its 255 registers a thread allow one block of
// 4 warps a multiprocessor scheduler-wide (12% occupancy), where the 64-query block runs more at
// once and the causal triangle's ragged edge is finer. At head size 128 a row tile's O alone is 64
// registers a lane: 1 only. The rows of a block: flash_fwd_br.
__host__ __device__ constexpr inline int flash_fwd_mt(int /*hs*/) { return 1; }
__host__ __device__ constexpr inline int flash_fwd_br(int mt) { return 16 * mt * FLASH_WARPS; }
// Query rows of one backward step: dK and dV of a warp's 16 keys take 2·hs/8·4 fp32 registers per
// lane (64 at hs 64, 128 at hs 128), and Sᵀ, dPᵀ 2·BQ/8·4 more; 32 keeps hs 128 under 255.
__host__ __device__ constexpr inline int flash_bq(int hs) { return hs == 64 ? 64 : 32; }
// A step's query rows where a kernel sets them (the backward's STEP template argument; 0: flash_bq).
// 32 at head size 64 is the kernel lab's backward variant 10: Sᵀ and dPᵀ take half the registers,
// so the 4-warp kernel fits 168 a thread (flash_bwd_min_blocks: 3 blocks a multiprocessor, 12 warps,
// where 64-query steps at 245–253 registers fit 2), at twice the steps (barriers, chain parts) for
// the same products. Not yet timed on a GPU.
__host__ __device__ constexpr inline int flash_step_rows(int hs, int step) { return step ? step : flash_bq(hs); }
// The blocks a multiprocessor the backward's launch bound asks ptxas to fit: 3 for that shape (4
// warps, head size 64, 32-query steps; its shared memory, 47 KB a block, allows 4), else 0: no
// .minnctapersm at all (a bound of 1 is not the same: it moved the default kernel from 253 to 255
// registers).
__host__ __device__ constexpr inline int flash_bwd_min_blocks(int hs, int warps, int bq) { return hs == 64 && warps == 4 && bq == 32 ? 3 : 0; }
// How the backward's blocks add a query step's dQ parts in their fixed order (the kernel's CHAIN; the
// same sums in the same order, so the same bytes, each way):
//   FLASH_CHAIN_EARLY  (the trainer's) each warp's lane 0 reads the step's turn counter at the step's
//                      top (relaxed) and, after the barrier that completes dSᵀ, waits for the turn
//                      (then a fence: acquire); the warp then issues its cp.async fetch of the chain's
//                      sum before its dQ product (it arrives while the product runs), adds and stores
//                      after it, and thread 0 passes the turn after the next step's dSᵀ barrier: 2
//                      barriers a step and one L2 round trip hidden behind the product.
//   FLASH_CHAIN_SERIAL the kernel as an H200 first timed it: the turn awaited after the dQ product,
//                      then one load-add-store after another (each load's round trip exposed, DT·2 of
//                      them a step), and a barrier on each side: 4 barriers a step. The kernel lab's
//                      "before".
//   FLASH_CHAIN_DEFER  a step's part waits in shared memory and joins the chain during the next step,
//                      the sum before it fetched by cp.async behind that step's products.
//   FLASH_CHAIN_EARLY_ACQUIRE  EARLY with the turn's acquire taken by a second read of the counter
//                      with acquire semantics (ld.acquire) once the relaxed read has seen the turn,
//                      in place of the fence (fence.acq_rel waits for every memory operation the
//                      thread has in flight: Nsight Compute put 0.7 cycles an instruction of the
//                      4-warp kernel on it; the acquire read waits for its own round trip). The
//                      kernel lab's variant 9; not timed yet.
enum { FLASH_CHAIN_SERIAL = 0, FLASH_CHAIN_EARLY = 1, FLASH_CHAIN_DEFER = 2, FLASH_CHAIN_EARLY_ACQUIRE = 3 };
__host__ __device__ constexpr inline bool flash_chain_early(int chain) { return chain == FLASH_CHAIN_EARLY || chain == FLASH_CHAIN_EARLY_ACQUIRE; }

// Whether the fused path handles the config; otherwise the caller takes attention_forward/backward.
static inline bool flash_attention_supported(int hs, size_t fsize) { return flash_attention_gpu_supported(hs, fsize); }  // (llmc/ops.h)

// Device scratch beyond the caller's lse (B,NH,T): D, dq_acc and the dQ counters (llmc/ops.h).
static inline size_t flash_attention_scratch_bytes(size_t B, size_t T, size_t C, size_t NH) { return flash_attention_gpu_scratch_bytes(B, T, C, NH); }

// Shared-memory bytes of each kernel (the layouts in the kernels below).
static inline size_t flash_forward_smem(int hs, int mt) { return (size_t)(flash_fwd_br(mt) + 4 * FLASH_BC) * hs * 2; }
// The backward's block of `warps` warps takes 16·warps keys (FLASH_BC with the default 4); the dQ
// chain's fp32 staging tiles (BQ rows of hs + 8 floats) beside the rest: two deferred, one early.
static inline size_t flash_backward_smem(int hs, int warps = FLASH_WARPS, int chain = FLASH_CHAIN_EARLY, int step = 0) {
    size_t bq = (size_t)flash_step_rows(hs, step), bc = 16 * (size_t)warps, tiles = chain == FLASH_CHAIN_DEFER ? 2 : flash_chain_early(chain) ? 1 : 0;
    return (2 * bc * hs + 4 * bq * hs + bc * bq) * 2 + 4 * bq * sizeof(float) + tiles * bq * (hs + 8) * sizeof(float);
}

// ---- the order in which a grid's blocks start ----------------------------------------------------
// Both kernels' blocks differ in length: a forward block of query tile qt multiplies qt + 1 key tiles,
// a backward block of key tile kt steps over the queries from its diagonal on. A GPU starts a 1-D
// grid's blocks in index order as multiprocessors free up (what GPUs do, not a promise of CUDA's; the
// backward's dQ chain has relied on it from the start, see above). Head by head (every tile of head 0, then
// of head 1, ...), the grid's last blocks start when the others are nearly done, and the long ones
// among them run on alone: a list schedule of the 124M shape (B=16, T=1024, 12 heads) at 3 forward
// blocks a multiprocessor on 132 of them ends 15% after the average multiprocessor's work, the
// backward (one block of 8 warps a multiprocessor) 9%.
// So the grid goes tile by tile over groups of heads: block i of a group of G heads is tile rank
// i / G of the group's head i % G, rank 0 first. The forward ranks its longest tile (the last query
// tile) first: the longest work starts first and the short tiles fill in at the end (the same list
// schedule: 1.6%). The backward must rank its shortest tile (the last key tile, on the diagonal of
// the last queries) first: a key tile's dQ part waits for the tiles above it, which must have started
// (the dQ chain, below); tile by tile still narrows its tail (9% → 7%). A group holds at least three
// waves of blocks (flash_groups), few enough heads that the multiprocessors' K, V (Q, dO) tiles stay
// in L2, and the heads split into groups of equal size, the first BH % groups one head larger (a small
// last group would bring the tail back). The order changes when a block runs, never what it computes:
// any number of groups gives the same bytes (test_cuda_flash).
struct FlashBlock {
    int rank, bh;  // the block's tile rank (0 starts first) and head-batch
};
// Block i of a grid of ntiles tiles a head over BH heads in `groups` groups (1 ≤ groups ≤ BH).
__host__ __device__ inline FlashBlock flash_block(unsigned i, int ntiles, int BH, int groups) {
    const unsigned n = (unsigned)ntiles, base = (unsigned)(BH / groups), extra = (unsigned)(BH % groups), big = (base + 1) * n;
    unsigned first, heads, r;
    if (i < extra * big) {  // one of the first `extra` groups, of base + 1 heads
        first = i / big * (base + 1);
        heads = base + 1;
        r = i % big;
    } else {
        unsigned j = i - extra * big;
        first = extra * (base + 1) + j / (base * n) * base;
        heads = base;
        r = j % (base * n);
    }
    return FlashBlock{(int)(r / heads), (int)(first + r % heads)};
}
// The tile a block of rank `rank` works on (ntiles a head): the forward's longest first (the last
// query tile, which multiplies every key tile), the backward's shortest first (the last key tile: the
// dQ chain's order).
__host__ __device__ inline int flash_forward_tile(int rank, int ntiles) { return ntiles - 1 - rank; }
__host__ __device__ inline int flash_backward_tile(int rank, int ntiles) { return ntiles - 1 - rank; }
// Groups for a grid of `ntiles` tiles a head over BH heads, where `slots` blocks run at once
// (multiprocessors × blocks each): as many as leave at least 3·slots blocks in each (at least 1).
__host__ __device__ inline int flash_groups(int BH, int ntiles, long long slots) {
    long long want = (3 * slots + ntiles - 1) / ntiles, groups = BH / (want > 0 ? want : 1);
    return groups < 1 ? 1 : (int)groups;
}

__device__ __host__ inline int flash_imin(int a, int b) { return a < b ? a : b; }
// The softmax runs in base 2 (exp2_approx is one instruction on the GPU): x·log2(e) in, ln(2) back out.
#define FLASH_LOG2E 1.4426950408889634f
#define FLASH_LN2 0.6931471805599453f
// A compile-time flag as an argument, for the kernels' lambdas compiled once per value.
template <bool V> struct FlashConst { static constexpr bool value = V; };

// Dropout's keep decisions for n ≤ 32 of a lane's scores as bits (bit k: score k, at query t and key
// u given by at(k, &t, &u)), for the scores' loops to read by a shift: one hash a score (from the
// row's key rk = dropout_row_key, one mix and an integer compare, dropout_keep_keyed: no floating
// point), in a loop kept rolled, so that the kernel holds one copy of the hash's code
// instead of one a score in each compiled copy of the softmax. hb: the model's head (h + head_offset).
template <typename At> __device__ inline uint32_t flash_keep_bits(int n, uint64_t rk, int hb, uint64_t keep_from, At at) {
    uint32_t bits = 0;
    KEEL_NO_UNROLL
    for (int k = 0; k < n; k++) {
        int t, u;
        at(k, &t, &u);
        bits |= (uint32_t)dropout_keep_keyed(rk, attention_dropout_index(hb, t, u), keep_from) << k;
    }
    return bits;
}
// A score's dropout multiplier from its keep bit: 1/(1-p) or 0 (bits all set and dscale 1 when dropout
// is off: p·1 = p, the same bits as no multiply).
__device__ inline float flash_keep_mult(uint32_t bits, int k, float dscale) { return bits >> k & 1u ? dscale : 0.0f; }

// ---- each lane's shared-memory access, by pattern (element offsets in a swizzled tile of `width`) ----
// The kernels address shared memory only through these, and test_cuda_flash evaluates each for the
// 32 lanes of a warp at every offset the kernels use and counts bank conflicts (none).
// ldmatrix_x4, A operand (16 rows × 16 columns from row r0, column c0): lane l names row r0 + l%16 at
// column c0 + 8·(l/16), so the four matrices are a[0..3] of mma_m16n8k16.
__host__ __device__ inline int flash_ldm_a(int lane, int r0, int c0, int width) { return swz(r0 + lane % 16, c0 + lane / 16 * 8, width); }
// ldmatrix_x4, B operands of two 8-column blocks from a tile stored n-major (rows = n, columns = k:
// K for Q·Kᵀ, Q and dO for K·Qᵀ, V·dOᵀ): rows r0.. r0+15, columns c0..c0+15; registers {0,1} are b of
// rows r0..r0+7, {2,3} of rows r0+8..r0+15.
__host__ __device__ inline int flash_ldm_b(int lane, int r0, int c0, int width) { return swz(r0 + lane % 8 + lane / 16 * 8, c0 + lane / 8 % 2 * 8, width); }
// ldmatrix_x4_trans, B operands of two 8-column blocks from a tile stored k-major (rows = k: V for
// P·V, dO and Q for Pᵀ·dO and dSᵀ·Q, K for dS·K): rows r0..r0+15, columns c0..c0+15.
__host__ __device__ inline int flash_ldm_bt(int lane, int r0, int c0, int width) { return swz(r0 + lane % 8 + lane / 8 % 2 * 8, c0 + lane / 16 * 8, width); }
// ldmatrix_x4_trans, A operand from a tile stored k-major (dS from dSᵀ): rows (k) r0..r0+15, columns
// (m) c0..c0+15.
__host__ __device__ inline int flash_ldm_at(int lane, int r0, int c0, int width) { return swz(r0 + lane % 8 + lane / 16 * 8, c0 + lane / 8 % 2 * 8, width); }
// A C/D fragment's two values of one row as one 32-bit store: row r0 + lane/4, columns c0 + 2·(lane%4).
__host__ __device__ inline int flash_frag(int lane, int r0, int c0, int width) { return swz(r0 + lane / 4, c0 + lane % 4 * 2, width); }
// 16-byte chunk i of a tile filled (cp.async) or read out row by row: row i / (width/8).
__host__ __device__ inline int flash_chunk(int i, int width) { return swz(i / (width / 8), i % (width / 8) * 8, width); }
// The deferred dQ chain's fp32 tiles (float offsets; rows of width + 8 floats, so that the 8 rows of
// a fragment start 8 banks apart): a C/D fragment's pair of one row as one 8-byte access (row
// r0 + lane/4, columns c0 + 2·(lane%4)), and 16-byte chunk i of a row-by-row cp.async fill.
__host__ __device__ inline int flash_dq_pair(int lane, int r0, int c0, int width) { return (r0 + lane / 4) * (width + 8) + c0 + lane % 4 * 2; }
__host__ __device__ inline int flash_dq_chunk(int i, int width) { return i / (width / 4) * (width + 8) + i % (width / 4) * 4; }
// The early dQ chain's fill of one warp's part of that tile (rows r0..r0+15, columns c0..c0+cols-1):
// its 16-byte chunk j, row by row.
__host__ __device__ inline int flash_dq_warp_chunk(int j, int r0, int c0, int cols, int width) { return (r0 + j / (cols / 4)) * (width + 8) + c0 + j % (cols / 4) * 4; }

// Rows r0..r0+ROWS-1 of one head's slice (row t at src + t·stride, HS elements) into the swizzled
// (ROWS,HS) tile dst by cp.async, rows ≥ T as zeros (a zero K or V row contributes nothing and cannot
// be NaN). All THREADS threads of the block; the caller commits the group. The host checked that src
// and stride give 16-byte aligned rows. A thread's chunks are one column, RSTEP rows apart: one
// pointer stepped down the tile, not one address per chunk kept across the kernel's loop.
template <typename F, int HS, int ROWS, int THREADS = FLASH_THREADS>
__device__ inline void flash_load_tile(F* dst, const F* src, int r0, int T, size_t stride) {
    constexpr int CH = HS / 8, RSTEP = THREADS / CH;  // 16-byte chunks per row; rows between a thread's chunks
    static_assert(THREADS % CH == 0 && ROWS % RSTEP == 0, "a thread's chunks are whole rows apart and cover the tile");
    const int r = threadIdx.x / CH;
    const F* p = src + (size_t)(r0 + r) * stride + threadIdx.x % CH * 8;
    KEEL_UNROLL
    for (int k = 0; k < ROWS / RSTEP; k++) {
        bool real = r0 + r + k * RSTEP < T;
        cp_async16(dst + flash_chunk(threadIdx.x + k * THREADS, HS), real ? p : src, real ? 16 : 0);
        p += RSTEP * stride;
    }
}

// ---- forward -------------------------------------------------------------------------------------
// MT: 16-row tiles of queries a warp owns (flash_fwd_mt): the block's BR = 16·MT·FLASH_WARPS rows.
template <typename F, int HS, int MT = flash_fwd_mt(HS)>
__global__ void __launch_bounds__(FLASH_THREADS)
    flash_attention_forward_kernel(F* out, float* lse, const F* inp, int T, int C, int NH, int BH, int groups, AttentionOpts o, AttnScoreScale sc,
                                   float alpha) {
#if KEEL_FLASH_ARCH_OK
    constexpr int BR = flash_fwd_br(MT), WR = 16 * MT, BC = FLASH_BC, KS = HS / 16, NT = BC / 8, OT = HS / 8;
    KEEL_DYNAMIC_SHARED(F, smem);
    F* Qs = smem;              // (BR,HS); at the end the output staging
    F* Ks = Qs + BR * HS;      // 2 × (BC,HS): the tile being multiplied and the next one
    F* Vs = Ks + 2 * BC * HS;  // 2 × (BC,HS)
    const int nqt = (T + BR - 1) / BR;
    const FlashBlock fb = flash_block(blockIdx.x, nqt, BH, groups);  // the longest (last) query tiles start first
    const int qt = flash_forward_tile(fb.rank, nqt), bh = fb.bh, b = bh / NH, h = bh % NH, q0 = qt * BR;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const size_t C3 = 3 * (size_t)C;
    const F* qsrc = inp + (size_t)b * T * C3 + h * HS;
    const int nk = (flash_imin(q0 + BR, T) - 1) / BC + 1;  // key tiles holding a key ≤ the block's last query

    flash_load_tile<F, HS, BR>(Qs, qsrc, q0, T, C3);
    cp_async_commit();
    flash_load_tile<F, HS, BC>(Ks, qsrc + C, 0, T, C3);
    flash_load_tile<F, HS, BC>(Vs, qsrc + 2 * C, 0, T, C3);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    uint32_t qf[MT][KS][4];  // A fragments of the warp's row tiles (16 query rows each), channels 16kk..16kk+15
    KEEL_UNROLL
    for (int mt = 0; mt < MT; mt++)
        KEEL_UNROLL
        for (int kk = 0; kk < KS; kk++) ldmatrix_x4(qf[mt][kk], Qs + flash_ldm_a(lane, warp * WR + mt * 16, kk * 16, HS));

    // this lane: rows g and g+8 of each of the warp's row tiles (queries t_r[mt][0], t_r[mt][1]); of
    // every 8-column block, columns 2tq and 2tq+1
    float oacc[MT][OT][4];
    float m_r[MT][2], l_r[MT][2];
    int t_r[MT][2];
    KEEL_UNROLL
    for (int mt = 0; mt < MT; mt++) {
        KEEL_UNROLL
        for (int n = 0; n < OT; n++)
            for (int e = 0; e < 4; e++) oacc[mt][n][e] = 0.0f;
        for (int r = 0; r < 2; r++) {
            m_r[mt][r] = -INFINITY;
            l_r[mt][r] = 0.0f;
            t_r[mt][r] = q0 + warp * WR + mt * 16 + g + 8 * r;
        }
    }
    const int w_first = q0 + warp * WR, w_last = flash_imin(w_first + WR - 1, T - 1);  // the warp's real queries
    const bool plain = o.alibi == nullptr && o.coeff == 1.0, dropout = sc.dropout;  // (once a kernel, not a score)
    const float scale2 = alpha * FLASH_LOG2E;  // (plain scores: x = s·alpha·log2(e))
    for (int kt = 0; kt < nk; kt++) {
        const int cur = kt & 1, k0 = kt * BC;
        if (kt + 1 < nk) {  // the next K, V in flight while this tile is multiplied
            flash_load_tile<F, HS, BC>(Ks + (cur ^ 1) * BC * HS, qsrc + C, k0 + BC, T, C3);
            flash_load_tile<F, HS, BC>(Vs + (cur ^ 1) * BC * HS, qsrc + 2 * C, k0 + BC, T, C3);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const F* Kc = Ks + cur * BC * HS;
        const F* Vc = Vs + cur * BC * HS;
        // 8-key column blocks with a key ≤ the warp's last query (warp-uniform). With two row tiles a
        // warp, the first multiplies the columns the second needs too: there they are masked (p = 0,
        // the running max and sum unchanged, P·V adds exact zeros), the bits of not multiplying them
        // (one exception: an output channel whose sum so far is −0, all its values −0, becomes +0).
        const int nt = w_first > w_last || w_last < k0 ? 0 : flash_imin(NT, (w_last - k0) / 8 + 1);
        // The tile's products and online softmax, compiled twice: FULL for a tile whose every key is at
        // or before every query of the warp, all real (most tiles), without a mask test or a branch
        // between the fragment loads and the products, so the loads of later products issue ahead of
        // earlier ones; the other for the diagonal tile and the rows at T. Each K and V fragment
        // loaded from shared memory feeds the warp's MT row tiles.
        auto warp_tile = [&](auto full_c) {
            constexpr bool FULL = decltype(full_c)::value;
            float s[MT][NT][4];
            KEEL_UNROLL
            for (int mt = 0; mt < MT; mt++)
                KEEL_UNROLL
                for (int j = 0; j < NT; j++)
                    for (int e = 0; e < 4; e++) s[mt][j][e] = 0.0f;
            KEEL_UNROLL
            for (int kk = 0; kk < KS; kk++) {
                KEEL_UNROLL
                for (int j = 0; j < NT; j += 2) {
                    if (!FULL && j >= nt) continue;
                    uint32_t kb[4];  // Kᵀ as B: (channels 16kk.., keys 8j..) and (.., keys 8j+8..)
                    ldmatrix_x4(kb, Kc + flash_ldm_b(lane, j * 8, kk * 16, HS));
                    const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
                    KEEL_UNROLL
                    for (int mt = 0; mt < MT; mt++) {
                        mma_m16n8k16<F>(s[mt][j], qf[mt][kk], b0);
                        if (FULL || j + 1 < nt) mma_m16n8k16<F>(s[mt][j + 1], qf[mt][kk], b1);
                    }
                }
            }
            // online softmax, in base 2 (one ex2 per element, the exponent's scale folded into the
            // score's): x = s·log2(e); the score variant, the tile's row maxima over the quad, the rescale.
            // The common case — no ALiBi, no layer coefficient, a FULL tile — is one multiply per element.
            float corr[MT][2];
            KEEL_UNROLL
            for (int mt = 0; mt < MT; mt++) {
                float mx[2] = {-INFINITY, -INFINITY};
                if (FULL && plain) {
                    KEEL_UNROLL
                    for (int j = 0; j < NT; j++)
                        KEEL_UNROLL
                        for (int e = 0; e < 4; e++) {
                            s[mt][j][e] *= scale2;
                            mx[e >> 1] = fmaxf(mx[e >> 1], s[mt][j][e]);
                        }
                } else {
                    KEEL_UNROLL
                    for (int j = 0; j < NT; j++)
                        KEEL_UNROLL
                        for (int e = 0; e < 4; e++) {
                            int r = e >> 1, u = k0 + j * 8 + 2 * tq + (e & 1), t = t_r[mt][r];
                            float x = -INFINITY;  // masked (above the diagonal, or a row past T)
                            if (t < T && u <= t) x = attention_softmax_input(s[mt][j][e] * alpha, h, u, o, sc) * FLASH_LOG2E;
                            s[mt][j][e] = x;
                            mx[r] = fmaxf(mx[r], x);
                        }
                }
                float mb[2];
                for (int r = 0; r < 2; r++) {
                    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                    float mn = fmaxf(m_r[mt][r], mx[r]);
                    corr[mt][r] = mn == -INFINITY ? 1.0f : exp2_approx(m_r[mt][r] - mn);  // m = -inf (no key yet): 0
                    m_r[mt][r] = mn;
                    mb[r] = mn == -INFINITY ? 0.0f : mn;  // a row with no key yet (past T): every x is -inf, p = 0
                }
                float ps[2] = {0.0f, 0.0f};
                KEEL_UNROLL
                for (int j = 0; j < NT; j++)
                    KEEL_UNROLL
                    for (int e = 0; e < 4; e++) {
                        float p = exp2_approx(s[mt][j][e] - mb[e >> 1]);
                        ps[e >> 1] += p;
                        s[mt][j][e] = p;
                    }
                if (dropout) {  // (a pass of its own: the common case runs the one above without a test per score)
                    // score (j, e) is bit 4j + e: query t_r[mt][e >> 1], key k0 + 8j + 2tq + (e & 1)
                    // (the row's key, sample b's, formed here: kept across the key loop it took the
                    // registers the 128-query block does not have)
                    const int t0 = t_r[mt][0];
                    const uint32_t keep = flash_keep_bits(4 * NT, dropout_row_key(&o.dropout, b), h + o.head_offset, sc.keep_from, [&](int k, int* t, int* u) {
                        *t = t0 + (k & 2) * 4;
                        *u = k0 + (k >> 2) * 8 + 2 * tq + (k & 1);
                    });
                    KEEL_UNROLL
                    for (int j = 0; j < NT; j++)
                        KEEL_UNROLL
                        for (int e = 0; e < 4; e++) s[mt][j][e] *= flash_keep_mult(keep, 4 * j + e, sc.dscale);  // (a masked 0 stays +0)
                }
                for (int r = 0; r < 2; r++) {
                    ps[r] += __shfl_xor_sync(0xffffffffu, ps[r], 1);  // a + b = b + a: the quad holds the same bits
                    ps[r] += __shfl_xor_sync(0xffffffffu, ps[r], 2);
                    l_r[mt][r] = l_r[mt][r] * corr[mt][r] + ps[r];
                }
                KEEL_UNROLL
                for (int n = 0; n < OT; n++) {
                    oacc[mt][n][0] *= corr[mt][0];
                    oacc[mt][n][1] *= corr[mt][0];
                    oacc[mt][n][2] *= corr[mt][1];
                    oacc[mt][n][3] *= corr[mt][1];
                }
            }
            // O += P·V over the 16-key steps with a key ≤ the warp's last query
            KEEL_UNROLL
            for (int k2 = 0; k2 < BC / 16; k2++) {
                if (!FULL && 2 * k2 >= nt) continue;
                uint32_t pa[MT][4];
                KEEL_UNROLL
                for (int mt = 0; mt < MT; mt++) {
                    pa[mt][0] = pack2<F>(s[mt][2 * k2][0], s[mt][2 * k2][1]);
                    pa[mt][1] = pack2<F>(s[mt][2 * k2][2], s[mt][2 * k2][3]);
                    pa[mt][2] = pack2<F>(s[mt][2 * k2 + 1][0], s[mt][2 * k2 + 1][1]);
                    pa[mt][3] = pack2<F>(s[mt][2 * k2 + 1][2], s[mt][2 * k2 + 1][3]);
                }
                KEEL_UNROLL
                for (int n = 0; n < OT; n += 2) {
                    uint32_t vb[4];  // V as B: (keys 16k2.., channels 8n..) and (.., channels 8n+8..)
                    ldmatrix_x4_trans(vb, Vc + flash_ldm_bt(lane, k2 * 16, n * 8, HS));
                    const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
                    KEEL_UNROLL
                    for (int mt = 0; mt < MT; mt++) {
                        mma_m16n8k16<F>(oacc[mt][n], pa[mt], b0);
                        mma_m16n8k16<F>(oacc[mt][n + 1], pa[mt], b1);
                    }
                }
            }
        };
        if (nt == NT && k0 + BC - 1 <= w_first && w_first + WR - 1 < T) warp_tile(FlashConst<true>());  // (warp-uniform)
        else if (nt > 0) warp_tile(FlashConst<false>());
        __syncthreads();  // every warp is done with this tile's buffers before they are refilled
    }
    // out = F(O / l): the warp's rows into the (free) Q tile, then 16-byte stores of whole rows
    KEEL_UNROLL
    for (int mt = 0; mt < MT; mt++) {
        float inv[2];
        for (int r = 0; r < 2; r++) inv[r] = l_r[mt][r] > 0.0f ? 1.0f / l_r[mt][r] : 0.0f;
        KEEL_UNROLL
        for (int n = 0; n < OT; n++) {
            *(uint32_t*)(Qs + flash_frag(lane, warp * WR + mt * 16, n * 8, HS)) = pack2<F>(oacc[mt][n][0] * inv[0], oacc[mt][n][1] * inv[0]);
            *(uint32_t*)(Qs + flash_frag(lane, warp * WR + mt * 16 + 8, n * 8, HS)) = pack2<F>(oacc[mt][n][2] * inv[1], oacc[mt][n][3] * inv[1]);
        }
    }
    __syncwarp();
    for (int i = lane; i < WR * HS / 8; i += 32) {
        int r = i / (HS / 8), c = i % (HS / 8), t = q0 + warp * WR + r;  // (the warp's rows start a group of 8: its swizzle is the tile's)
        if (t < T) pack_store<F, 8>(out + ((size_t)b * T + t) * C + h * HS + c * 8, pack_load<F, 8>(Qs + warp * WR * HS + flash_chunk(i, HS)));
    }
    if (tq == 0)
        KEEL_UNROLL
        for (int mt = 0; mt < MT; mt++)
            for (int r = 0; r < 2; r++)
                if (t_r[mt][r] < T) lse[(size_t)bh * T + t_r[mt][r]] = m_r[mt][r] * FLASH_LN2 + logf(l_r[mt][r]);  // (m in base 2)
#else
    __trap();  // bf16/fp16 mma.sync needs sm_80; gpt_build never selects flash below it
#endif
}

// ---- backward --------------------------------------------------------------------------------------
// D[bh, t] = Σ_i dout[b,t,h·hs+i]·out[b,t,h·hs+i] in fp32: warp per row, lanes take i ≡ lane (mod 32)
// in ascending order, then the fixed butterfly.
template <typename F>
__global__ void flash_attention_rowdot_kernel(float* D, const F* dout, const F* out, int B, int T, int C, int NH) {
    int lane = threadIdx.x % 32, hs = C / NH;
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= (size_t)B * NH * T) return;  // the whole warp leaves
    int t = (int)(row % T), h = (int)(row / T % NH), b = (int)(row / ((size_t)T * NH));
    size_t off = ((size_t)b * T + t) * C + h * hs;
    float s = 0.0f;
    for (int i = lane; i < hs; i += 32) s += to_f32(dout[off + i]) * to_f32(out[off + i]);
    s = warp_sum(s);
    if (lane == 0) D[row] = s;
}

// The dQ chain's counter (one per head-batch and query step), CUTLASS's split-K semaphore protocol:
// one thread reads it with acquire semantics (gpu scope; through L2, never a stale L1 line) and the
// block (the early chain: the warp) meets at a barrier before reading the partial sum; the block
// meets at a barrier after writing its part, then one thread stores the next count with release
// semantics, which the barrier makes cover every thread's writes.
// ACQUIRE = false: the early chain's first read, at the step's top: relaxed (gpu scope, through L2).
// An acquire load is followed by an L1 invalidation that waits for the value (the SASS: CCTL.IVALL on
// the load's scoreboard), which would hold the warp for an L2 round trip at the top of every step.
template <bool ACQUIRE = true> __device__ inline int flash_turn_load(const int* counter) {
#ifdef KEEL_CUDA_EMULATION
    return *counter;
#else
    int v;
    if constexpr (ACQUIRE) asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(counter) : "memory");
    else asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(counter) : "memory");
    return v;
#endif
}
__device__ inline void flash_turn_store(int* counter, int v) {
#ifdef KEEL_CUDA_EMULATION
    *counter = v;
#else
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(counter), "r"(v) : "memory");
#endif
}
// The counter's value for a launch's turn: (tag << FLASH_TURN_BITS) | turn (flash_scratch).
enum { FLASH_TURN_BITS = 16 };
__device__ __host__ inline int flash_turn_value(int tag, int turn) { return tag << FLASH_TURN_BITS | turn; }
// Waits until the counter, first read into `seen` (issued early, so its latency hides behind other
// work), equals `turn` (a flash_turn_value). How the wait acquires (WAIT):
//   FLASH_WAIT_ACQUIRE  `seen` came from an acquire read, and so does every re-read;
//   FLASH_WAIT_FENCE    `seen` came from the relaxed flash_turn_load<false>: once the turn is seen
//                       the thread fences (fence.acq_rel.gpu after a strong read is PTX's acquire
//                       pattern), no round trip when the turn had come before that first read, as it
//                       usually has, but the fence waits for the thread's memory operations in flight;
//   FLASH_WAIT_REREAD   the same relaxed first read, then the counter read again with acquire
//                       semantics (it still holds the turn: only this block moves it on), so the
//                       acquire comes from a read of the value the release wrote, as the PTX memory
//                       model asks, at the cost of that read's round trip.
enum { FLASH_WAIT_ACQUIRE = 0, FLASH_WAIT_FENCE = 1, FLASH_WAIT_REREAD = 2 };
template <int WAIT = FLASH_WAIT_ACQUIRE> __device__ inline void flash_wait_turn(const int* counter, int seen, int turn) {
#ifdef KEEL_CUDA_EMULATION
    if (seen != turn) {
        char msg[160];
        snprintf(msg, sizeof msg, "the counter is %d, the turn %d", seen, turn);
        emu::die("kernel %s: a dQ part waits for a key tile that has not run (%s): on a GPU this spins forever", emu::tl_block.kernel_name, msg);
    }
    (void)counter;
#else
    if constexpr (WAIT == FLASH_WAIT_FENCE) {
        while (seen != turn) seen = flash_turn_load<false>(counter);
        asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
    } else if constexpr (WAIT == FLASH_WAIT_REREAD) {
        while (seen != turn) seen = flash_turn_load<false>(counter);
        do seen = flash_turn_load<true>(counter);  // (the turn again: the value is used, the read waited for)
        while (seen != turn);
    } else {
        while (seen != turn) seen = flash_turn_load(counter);
    }
#endif
}
// dq_acc traffic bypasses L1 (another block wrote the partial sum this block reads).
__device__ inline void flash_load_pair(const float* p, float* x, float* y) {
    Pack<float, 2> v = pack_load_cg<float, 2>(p);
    *x = v.v[0];
    *y = v.v[1];
}
__device__ inline void flash_store_pair(float* p, float x, float y) {
#ifdef KEEL_CUDA_EMULATION
    p[0] = x;
    p[1] = y;
#else
    __stcg((float2*)p, make_float2(x, y));
#endif
}

// p[0..1] = F(p[0..1] + (x, y)), or F(x, y) when `write` (the old values neither read nor needed):
// one 4-byte access each way (p is 4-byte aligned: an even channel).
template <typename F> __device__ inline void flash_add_pair(F* p, float x, float y, bool write) {
    Pack<F, 2> v;
    if (write) {
        v.v[0] = from_f32<F>(x);
        v.v[1] = from_f32<F>(y);
    } else {
        v = pack_load<F, 2>(p);
        v.v[0] = from_f32<F>(to_f32(v.v[0]) + x);
        v.v[1] = from_f32<F>(to_f32(v.v[1]) + y);
    }
    pack_store<F, 2>(p, v);
}

// dK, dV of one key tile (block) over its query steps in ascending order; each step's dQ part into
// the ordered chain (see the top of the file; CHAIN: how, FLASH_CHAIN_*). ORDERED = false drops the
// chain's waits and counters (the parts then race: wrong dQ): only the kernel lab uses it, to time
// what the ordering costs.
// WARPS: the block's warps, each owning 16 keys (a tile of BC = 16·WARPS keys). 4 is the trainer's;
// 8 is FlashAttention-2's shape (128 keys a block): the step's Q, dO, lse and D tiles are loaded once
// for twice the keys, each barrier covers twice the work, and a query step's dQ chain has half as many
// parts (half the dq_acc round trips through L2), at one block of 8 warps per multiprocessor instead
// of two of 4 (the registers allow no more). Under test and in the kernel lab until a GPU has timed it.
// STEP: the query rows of a step (flash_step_rows; 0, the trainer's: flash_bq).
template <typename F, int HS, bool ORDERED = true, int WARPS = FLASH_WARPS, int CHAIN = FLASH_CHAIN_EARLY, int STEP = 0>
__global__ void __launch_bounds__(32 * WARPS, flash_bwd_min_blocks(HS, WARPS, flash_step_rows(HS, STEP)))
    flash_attention_backward_kernel(F* dinp, const F* dout, const F* inp, const float* lse, const float* D, float* dq_acc, int* dq_turn, int tag,
                                    int T, int C, int NH, int BH, int groups, AttentionOpts o, AttnScoreScale sc, float alpha, bool write) {
#if KEEL_FLASH_ARCH_OK
    constexpr int THREADS = 32 * WARPS;
    constexpr int BC = 16 * WARPS, BQ = flash_step_rows(HS, STEP), KS = HS / 16, NQ = BQ / 8, OT = HS / 8;
    constexpr int MQ = BQ / 16;                  // 16-query row blocks of a step (the dQ product's M)
    constexpr int DQW = HS * MQ / WARPS;         // channels of the step's dQ per warp (64 with 4 warps, 32 with 8)
    static_assert(DQW % 16 == 0 && WARPS % MQ == 0, "the step's dQ splits into whole 16-channel pairs per warp");
    constexpr int DT = DQW / 8;
    constexpr bool DEFER = CHAIN == FLASH_CHAIN_DEFER, EARLY = flash_chain_early(CHAIN);
    // The four products compiled twice, for full steps and for the rest (below), except at head size
    // 128 with 8 warps or DEFER, where the second copy spills (255 registers; the default there is 4
    // warps undeferred).
    constexpr bool SPLIT = !(HS == 128 && (WARPS == 8 || DEFER));
    KEEL_DYNAMIC_SHARED(F, smem);
    F* Ks = smem;                   // (BC,HS)
    F* Vs = Ks + BC * HS;           // (BC,HS)
    F* Qs = Vs + BC * HS;           // 2 × (BQ,HS)
    F* dOs = Qs + 2 * BQ * HS;      // 2 × (BQ,HS)
    F* dSs = dOs + 2 * BQ * HS;     // (BC,BQ) dSᵀ of the step
    float* lse_s = (float*)(dSs + BC * BQ);  // 2 × BQ
    float* D_s = lse_s + 2 * BQ;             // 2 × BQ
    float* dq_own = D_s + 2 * BQ;                           // DEFER: (BQ, HS + 8) fp32, the pending step's part of this tile
    float* dq_in = dq_own + (DEFER ? BQ * (HS + 8) : 0);    // DEFER, EARLY: (BQ, HS + 8) fp32, the chain's sum before it
    const int nkt = (T + BC - 1) / BC;
    const FlashBlock fb = flash_block(blockIdx.x, nkt, BH, groups);  // the last key tile starts first
    const int kt = flash_backward_tile(fb.rank, nkt), bh = fb.bh, b = bh / NH, h = bh % NH, k0 = kt * BC;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const size_t C3 = 3 * (size_t)C;
    const F* qsrc = inp + (size_t)b * T * C3 + h * HS;
    const F* dosrc = dout + (size_t)b * T * C + h * HS;
    const int nsteps = (T - k0 + BQ - 1) / BQ, nqs = (T + BQ - 1) / BQ;  // steps from the diagonal on; all steps of a head

    flash_load_tile<F, HS, BC, THREADS>(Ks, qsrc + C, k0, T, C3);
    flash_load_tile<F, HS, BC, THREADS>(Vs, qsrc + 2 * C, k0, T, C3);
    auto load_step = [&](int i, int buf) {
        int q0 = k0 + i * BQ;
        flash_load_tile<F, HS, BQ, THREADS>(Qs + buf * BQ * HS, qsrc, q0, T, C3);
        flash_load_tile<F, HS, BQ, THREADS>(dOs + buf * BQ * HS, dosrc, q0, T, (size_t)C);
        KEEL_UNROLL
        for (int k = 0; k < (2 * BQ + THREADS - 1) / THREADS; k++) {  // lse and D of the step's rows (0 past T)
            int j = threadIdx.x + k * THREADS, row = j % BQ;
            if (j >= 2 * BQ) break;
            bool real = q0 + row < T;
            const float* src = (j < BQ ? lse : D) + (size_t)bh * T + (real ? q0 + row : 0);
            cp_async4((j < BQ ? lse_s : D_s) + buf * BQ + row, src, real ? 4 : 0);
        }
    };
    load_step(0, 0);
    cp_async_commit();

    float dk[OT][4], dv[OT][4];
    KEEL_UNROLL
    for (int n = 0; n < OT; n++)
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    const int u_first = k0 + warp * 16;                  // the warp's keys
    const int u_r[2] = {u_first + g, u_first + g + 8};   // this lane's rows of Sᵀ
    const int mq = warp % MQ, ch0 = warp / MQ * DQW;     // this warp's part of the step's dQ
    const bool plain = o.alibi == nullptr && o.coeff == 1.0, dropout = sc.dropout;  // (once a kernel, not a score)
    const float scale2 = alpha * FLASH_LOG2E;  // (plain scores: x = s·alpha·log2(e))
    const uint64_t drow = dropout ? dropout_row_key(&o.dropout, b) : 0;  // the row's dropout key (sample b)
    float ab_r[2] = {0.0f, 0.0f};  // ALiBi's addend at this lane's two keys, the same for every query
    if (o.alibi)
        for (int r = 0; r < 2; r++) ab_r[r] = attention_alibi_term(h, u_r[r], o, sc);
    // DEFER: a step's dQ part waits in dq_own, and is added to the chain's sum during the next step:
    // the sum before it comes in by cp.async (dq_in) while that step's products run, so neither the
    // turn's wait nor the L2 round trip holds up the products. pq0: the pending step's first query.
    int pq0 = 0, pend_seen = 0;
    bool pend = false;
    auto turn_of = [&](int qs) { return dq_turn + (size_t)bh * nqs + qs / BQ; };
    auto dq_fetch = [&](int qs) {  // after the turn: the chain's sum of step qs into dq_in (rows ≥ T zero)
        if (kt == qs / BC) return;  // the diagonal tile's part starts the chain
        const float* src = dq_acc + (size_t)bh * T * HS;
        for (int j = threadIdx.x; j < BQ * HS / 4; j += THREADS) {
            int r = j / (HS / 4);
            bool real = qs + r < T;
            cp_async16(dq_in + flash_dq_chunk(j, HS), src + (size_t)(real ? qs + r : 0) * HS + j % (HS / 4) * 4, real ? 16 : 0);
        }
        cp_async_commit();
    };
    auto dq_finish = [&](int qs) {  // the pending part + the sum before it: on down the chain, or into dinp
        const int lkt = qs / BC, qm = qs + mq * 16;
        cp_async_wait<0>();
        __syncthreads();  // dq_in complete
        KEEL_UNROLL
        for (int n = 0; n < DT; n++)
            for (int r = 0; r < 2; r++) {
                int t = qm + g + 8 * r, c = ch0 + n * 8 + 2 * tq, at = flash_dq_pair(lane, mq * 16 + 8 * r, ch0 + n * 8, HS);
                if (t >= T) continue;
                Pack<float, 2> v = pack_load<float, 2>(dq_own + at);
                float vx = v.v[0], vy = v.v[1];
                if (kt != lkt) {
                    Pack<float, 2> p = pack_load<float, 2>(dq_in + at);
                    vx = p.v[0] + vx;  // (the order of the undeferred chain: the same bits)
                    vy = p.v[1] + vy;
                }
                if (kt == 0) flash_add_pair(dinp + ((size_t)b * T + t) * C3 + h * HS + c, vx, vy, write);
                else flash_store_pair(dq_acc + ((size_t)bh * T + t) * HS + c, vx, vy);
            }
        __syncthreads();  // the whole part is written (dq_in and dq_own read) before the turn passes
        if (ORDERED && threadIdx.x == 0) flash_turn_store(turn_of(qs), kt == 0 ? 0 : flash_turn_value(tag, lkt - kt + 1));
    };
    // EARLY: the turn a step's part passes on (after the next step's dSᵀ barrier, every part written
    // by then): after the last part 0 (see below), else the next tile's
    auto pass_turn = [&](int qs) {
        if (ORDERED && threadIdx.x == 0) flash_turn_store(turn_of(qs), kt == 0 ? 0 : flash_turn_value(tag, qs / BC - kt + 1));
    };
    for (int i = 0; i < nsteps; i++) {
        const int cur = i & 1, q0 = k0 + i * BQ;
        // the chain of this step's queries: key tiles last_kt, last_kt - 1, ..., 0 add their parts in
        // this order (last_kt, the diagonal tile, starts it)
        const int last_kt = q0 / BC;
        // EARLY: each warp's lane 0 reads the turn now (relaxed: the warp does not wait for it); it
        // lands while the products run
        int seen = EARLY && ORDERED && lane == 0 && kt != last_kt ? flash_turn_load<false>(turn_of(q0)) : 0;
        if (i + 1 < nsteps) {
            load_step(i + 1, cur ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        if constexpr (DEFER) {  // the pending step's turn, so that its sum can be fetched after the barrier
            if (pend && ORDERED && threadIdx.x == 0 && kt != pq0 / BC) flash_wait_turn(turn_of(pq0), pend_seen, flash_turn_value(tag, pq0 / BC - kt));
        }
        __syncthreads();
        if constexpr (DEFER) {
            if (pend) dq_fetch(pq0);
        }
        const F* Qc = Qs + cur * BQ * HS;
        const F* dOc = dOs + cur * BQ * HS;
        const float* lse_c = lse_s + cur * BQ;
        const float* D_c = D_s + cur * BQ;
        // dropout: the step's keep bits of this lane's scores, bit 4j + e for query q0 + 8j + 2tq + (e & 1)
        // and key u_r[e >> 1] (all set without dropout: the multiplier is then 1)
        const uint32_t keep = !dropout ? ~0u : flash_keep_bits(4 * NQ, drow, h + o.head_offset, sc.keep_from, [&](int k, int* t, int* u) {
            *t = q0 + (k >> 2) * 8 + 2 * tq + (k & 1);
            *u = u_first + g + (k & 2) * 4;
        });
        // The warp's four products and the softmax between them, compiled twice: FULL for a step whose
        // every query is at or after every key of the warp, all real (most steps), without a mask test
        // or a branch between the fragment loads and the products, so the loads of later products
        // issue ahead of earlier ones; the other for the steps on the diagonal and at T.
        auto warp_products = [&](auto full_c) {
            constexpr bool FULL = decltype(full_c)::value;
            // an 8-query block takes part if it holds a real query ≥ the warp's first real key
            auto needed = [&](int j) { return decltype(full_c)::value || (u_first < T && q0 + 8 * j < T && q0 + 8 * j + 7 >= u_first); };
            float s[NQ][4], dp[NQ][4];
            KEEL_UNROLL
            for (int j = 0; j < NQ; j++)
                for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.0f;
            KEEL_UNROLL
            for (int kk = 0; kk < KS; kk++) {
                uint32_t ka[4], va[4];  // A: the warp's 16 keys, channels 16kk..
                ldmatrix_x4(ka, Ks + flash_ldm_a(lane, warp * 16, kk * 16, HS));
                ldmatrix_x4(va, Vs + flash_ldm_a(lane, warp * 16, kk * 16, HS));
                KEEL_UNROLL
                for (int j = 0; j < NQ; j += 2) {
                    if (!needed(j) && !needed(j + 1)) continue;
                    uint32_t qb[4], ob[4];  // Qᵀ, dOᵀ as B: (channels 16kk.., queries 8j..) and (.., 8j+8..)
                    ldmatrix_x4(qb, Qc + flash_ldm_b(lane, j * 8, kk * 16, HS));
                    ldmatrix_x4(ob, dOc + flash_ldm_b(lane, j * 8, kk * 16, HS));
                    const uint32_t q_0[2] = {qb[0], qb[1]}, q_1[2] = {qb[2], qb[3]}, o_0[2] = {ob[0], ob[1]}, o_1[2] = {ob[2], ob[3]};
                    mma_m16n8k16<F>(s[j], ka, q_0);
                    mma_m16n8k16<F>(s[j + 1], ka, q_1);
                    mma_m16n8k16<F>(dp[j], va, o_0);
                    mma_m16n8k16<F>(dp[j + 1], va, o_1);
                }
            }
            // s ← p·drop, dp ← dS (fp32), masked entries 0; p = exp2(x - lse·log2(e)) with x = s·log2(e)
            // (base 2, as the forward). The common case — plain scores on a FULL step — takes no mask test
            // and one multiply-add per score.
            // (compiled without dropout's test and product where it is off: p·1 = p, dP·1 = dP, the same bits)
            auto plain_full = [&](auto drop_c) {
                KEEL_UNROLL
                for (int j = 0; j < NQ; j++)
                    KEEL_UNROLL
                    for (int e = 0; e < 4; e++) {
                        int tl = 8 * j + 2 * tq + (e & 1);
                        float p = exp2_approx(s[j][e] * scale2 - lse_c[tl] * FLASH_LOG2E);
                        float mult = decltype(drop_c)::value ? flash_keep_mult(keep, 4 * j + e, sc.dscale) : 1.0f;
                        s[j][e] = p * mult;
                        dp[j][e] = p * (dp[j][e] * mult - D_c[tl]) * sc.scale;
                    }
            };
            if (FULL && plain && !dropout) plain_full(FlashConst<false>());
            else if (FULL && plain) plain_full(FlashConst<true>());
            else {
                KEEL_UNROLL
                for (int j = 0; j < NQ; j++)
                    KEEL_UNROLL
                    for (int e = 0; e < 4; e++) {
                        int u = u_r[e >> 1], tl = 8 * j + 2 * tq + (e & 1), t = q0 + tl;
                        float pd = 0.0f, ds = 0.0f;
                        if (t < T && u <= t) {
                            float x = attention_softmax_input_term(s[j][e] * alpha, ab_r[e >> 1], o, sc);
                            float p = exp2_approx(x * FLASH_LOG2E - lse_c[tl] * FLASH_LOG2E);
                            float mult = flash_keep_mult(keep, 4 * j + e, sc.dscale);
                            pd = p * mult;
                            ds = p * (dp[j][e] * mult - D_c[tl]) * sc.scale;
                        }
                        s[j][e] = pd;
                        dp[j][e] = ds;
                    }
            }
            // dSᵀ of the warp's 16 keys to shared memory for the dQ product
            KEEL_UNROLL
            for (int j = 0; j < NQ; j++) {
                *(uint32_t*)(dSs + flash_frag(lane, warp * 16, 8 * j, BQ)) = pack2<F>(dp[j][0], dp[j][1]);
                *(uint32_t*)(dSs + flash_frag(lane, warp * 16 + 8, 8 * j, BQ)) = pack2<F>(dp[j][2], dp[j][3]);
            }
            // dV += (P·drop)ᵀ·dO, dK += dSᵀ·Q over the 16-query steps
            KEEL_UNROLL
            for (int kq = 0; kq < BQ / 16; kq++) {
                if (!needed(2 * kq) && !needed(2 * kq + 1)) continue;
                const uint32_t pa[4] = {pack2<F>(s[2 * kq][0], s[2 * kq][1]), pack2<F>(s[2 * kq][2], s[2 * kq][3]),
                                        pack2<F>(s[2 * kq + 1][0], s[2 * kq + 1][1]), pack2<F>(s[2 * kq + 1][2], s[2 * kq + 1][3])};
                const uint32_t da[4] = {pack2<F>(dp[2 * kq][0], dp[2 * kq][1]), pack2<F>(dp[2 * kq][2], dp[2 * kq][3]),
                                        pack2<F>(dp[2 * kq + 1][0], dp[2 * kq + 1][1]), pack2<F>(dp[2 * kq + 1][2], dp[2 * kq + 1][3])};
                KEEL_UNROLL
                for (int n = 0; n < OT; n += 2) {
                    uint32_t ob[4], qb[4];  // dO, Q as B: (queries 16kq.., channels 8n..) and (.., 8n+8..)
                    ldmatrix_x4_trans(ob, dOc + flash_ldm_bt(lane, kq * 16, n * 8, HS));
                    ldmatrix_x4_trans(qb, Qc + flash_ldm_bt(lane, kq * 16, n * 8, HS));
                    const uint32_t o_0[2] = {ob[0], ob[1]}, o_1[2] = {ob[2], ob[3]}, q_0[2] = {qb[0], qb[1]}, q_1[2] = {qb[2], qb[3]};
                    mma_m16n8k16<F>(dv[n], pa, o_0);
                    mma_m16n8k16<F>(dv[n + 1], pa, o_1);
                    mma_m16n8k16<F>(dk[n], da, q_0);
                    mma_m16n8k16<F>(dk[n + 1], da, q_1);
                }
            }
        };
        if (SPLIT && q0 >= u_first + 15 && q0 + BQ <= T) warp_products(FlashConst<true>());  // (warp-uniform)
        else warp_products(FlashConst<false>());
        __syncthreads();  // dSᵀ complete
        // EARLY: the last step's part was written by every thread before the top barrier; its turn
        // passes here, not there: a release is a MEMBAR that waits for the thread's memory operations
        // in flight, and at the top those are the step's fresh cp.async and the part's stores, here
        // they have had the products' time to land
        if constexpr (EARLY) {
            if (i > 0) pass_turn(q0 - BQ);
        }
        if constexpr (DEFER) {
            if (pend) dq_finish(pq0);  // the last step's part, its sum fetched while this step's products ran
        }
        // SERIAL, DEFER: the counter's first read goes out now and lands while the part is computed
        int* turn = turn_of(q0);
        if constexpr (!EARLY) seen = ORDERED && threadIdx.x == 0 && kt != last_kt ? flash_turn_load(turn) : 0;
        // the step's dQ part: rows qm.. of the step (16 queries), channels ch0..ch0+DQW, Σ over the tile's keys
        const int qm = q0 + mq * 16, qm_last = flash_imin(qm + 15, T - 1);
        // EARLY: the warp's part of the chain's sum before this tile (its 16 rows × DQW channels) into
        // dq_in by cp.async (16 bytes, L2 only), issued before the product: one L2 round trip hidden
        // behind it, instead of one per pair after it, and no registers held across it
        if constexpr (EARLY) {
            if (kt != last_kt) {  // (block-uniform: the diagonal tile starts the chain)
                // each warp's lane 0 waits for the turn (the tiles before this one have added their parts)
                if (ORDERED && lane == 0)
                    flash_wait_turn<CHAIN == FLASH_CHAIN_EARLY ? FLASH_WAIT_FENCE : FLASH_WAIT_REREAD>(turn_of(q0), seen, flash_turn_value(tag, last_kt - kt));
                __syncwarp();
                const float* src = dq_acc + (size_t)bh * T * HS;
                KEEL_UNROLL
                for (int k = 0; k < 16 * DQW / 4 / 32; k++) {  // (rows ≥ T: not fetched, never read)
                    int j = lane + 32 * k, t = qm + j / (DQW / 4);
                    if (t < T) cp_async16(dq_in + flash_dq_warp_chunk(j, mq * 16, ch0, DQW, HS), src + (size_t)t * HS + ch0 + j % (DQW / 4) * 4, 16);
                }
                cp_async_commit();
            }
        }
        float dq[DT][4];
        KEEL_UNROLL
        for (int n = 0; n < DT; n++)
            for (int e = 0; e < 4; e++) dq[n][e] = 0.0f;
        auto dq_product = [&](auto all_c) {  // all_c: every key of the tile ≤ the warp's first query
            KEEL_UNROLL
            for (int kb = 0; kb < BC / 16; kb++) {
                if (!decltype(all_c)::value && k0 + kb * 16 > qm_last) continue;  // keys above every query of the block: dS = 0
                uint32_t da[4];  // dS as A (queries × keys) from dSᵀ: transposed
                ldmatrix_x4_trans(da, dSs + flash_ldm_at(lane, kb * 16, mq * 16, BQ));
                KEEL_UNROLL
                for (int n = 0; n < DT; n += 2) {
                    uint32_t kb4[4];  // K as B: (keys 16kb.., channels ch0 + 8n..) and (.., +8)
                    ldmatrix_x4_trans(kb4, Ks + flash_ldm_bt(lane, kb * 16, ch0 + n * 8, HS));
                    const uint32_t k_0[2] = {kb4[0], kb4[1]}, k_1[2] = {kb4[2], kb4[3]};
                    mma_m16n8k16<F>(dq[n], da, k_0);
                    mma_m16n8k16<F>(dq[n + 1], da, k_1);
                }
            }
        };
        if (k0 + BC - 1 <= qm) dq_product(FlashConst<true>());  // (warp-uniform)
        else dq_product(FlashConst<false>());
        if constexpr (DEFER) {  // the part waits in dq_own for the next step (or the end)
            KEEL_UNROLL
            for (int n = 0; n < DT; n++)
                for (int r = 0; r < 2; r++) {
                    Pack<float, 2> v;
                    v.v[0] = dq[n][2 * r];
                    v.v[1] = dq[n][2 * r + 1];
                    pack_store<float, 2>(dq_own + flash_dq_pair(lane, mq * 16 + 8 * r, ch0 + n * 8, HS), v);
                }
            pq0 = q0, pend_seen = seen, pend = true;
            continue;
        }
        if constexpr (EARLY) {  // the part + the sum before it: on down the chain, or into dinp's q section
            if (kt != last_kt) {
                cp_async_wait<0>();  // (the next step's Q and dO too, issued at this step's top)
                __syncwarp();        // the warp's lanes fetched each other's pairs
            }
            // compiled once per (last part, chained) pair (block-uniform): each of a lane's 16-row
            // halves tested against T once, its pairs at fixed offsets from one address each way
            auto store_part = [&](auto last_c, auto chained_c) {
                float* acc = dq_acc + ((size_t)bh * T + qm + g) * HS + ch0 + 2 * tq;
                F* out = dinp + ((size_t)b * T + qm + g) * C3 + h * HS + ch0 + 2 * tq;
                KEEL_UNROLL
                for (int r = 0; r < 2; r++) {
                    if (qm + g + 8 * r >= T) continue;
                    KEEL_UNROLL
                    for (int n = 0; n < DT; n++) {
                        float vx = dq[n][2 * r], vy = dq[n][2 * r + 1];
                        if constexpr (decltype(chained_c)::value) {
                            Pack<float, 2> p = pack_load<float, 2>(dq_in + flash_dq_pair(lane, mq * 16 + 8 * r, ch0 + n * 8, HS));
                            vx = p.v[0] + vx;  // (the sum first: SERIAL's order, the same bits)
                            vy = p.v[1] + vy;
                        }
                        if constexpr (decltype(last_c)::value) flash_add_pair(out + (size_t)8 * r * C3 + n * 8, vx, vy, write);
                        else flash_store_pair(acc + 8 * r * HS + n * 8, vx, vy);
                    }
                }
            };
            if (kt == 0 && kt != last_kt) store_part(FlashConst<true>(), FlashConst<true>());
            else if (kt == 0) store_part(FlashConst<true>(), FlashConst<false>());
            else if (kt != last_kt) store_part(FlashConst<false>(), FlashConst<true>());
            else store_part(FlashConst<false>(), FlashConst<false>());
            continue;  // (its turn passes after the next step's dSᵀ barrier)
        }
        if (ORDERED && threadIdx.x == 0 && kt != last_kt) flash_wait_turn(turn, seen, flash_turn_value(tag, last_kt - kt));
        __syncthreads();
        KEEL_UNROLL
        for (int n = 0; n < DT; n++)
            for (int r = 0; r < 2; r++) {
                int t = qm + g + 8 * r, c = ch0 + n * 8 + 2 * tq;
                if (t >= T) continue;
                float vx = dq[n][2 * r], vy = dq[n][2 * r + 1];
                float* pacc = dq_acc + ((size_t)bh * T + t) * HS + c;
                if (kt != last_kt) {
                    float px, py;
                    flash_load_pair(pacc, &px, &py);
                    vx = px + vx;
                    vy = py + vy;
                }
                if (kt == 0) {  // the last part: into dinp's q section
                    flash_add_pair(dinp + ((size_t)b * T + t) * C3 + h * HS + c, vx, vy, write);
                } else {
                    flash_store_pair(pacc, vx, vy);
                }
            }
        __syncthreads();  // the whole part is written (and the step's buffers read) before the turn passes
        // the next tile's turn; after the last part 0, which is no launch's (tags start at 1): a counter
        // of a completed launch holds no tag, so a later launch of another shape, whose chains reuse
        // the counters, never finds its own tag left there by an older one
        if (ORDERED && threadIdx.x == 0) flash_turn_store(turn, kt == 0 ? 0 : flash_turn_value(tag, last_kt - kt + 1));
    }
    if constexpr (EARLY) {  // the last step's part is written before its turn passes
        __syncthreads();
        if (nsteps > 0) pass_turn(k0 + (nsteps - 1) * BQ);
    }
    if constexpr (DEFER) {  // the last step's part: nothing left to hide its chain behind
        if (pend) {
            if (ORDERED && threadIdx.x == 0 && kt != pq0 / BC) flash_wait_turn(turn_of(pq0), pend_seen, flash_turn_value(tag, pq0 / BC - kt));
            __syncthreads();
            dq_fetch(pq0);
            dq_finish(pq0);
        }
    }
    // dK, dV of the lane's two key rows into dinp's k and v sections
    KEEL_UNROLL
    for (int n = 0; n < OT; n++)
        for (int r = 0; r < 2; r++) {
            int u = u_r[r], c = n * 8 + 2 * tq;
            if (u >= T) continue;
            F* pk = dinp + ((size_t)b * T + u) * C3 + C + h * HS + c;
            flash_add_pair(pk, dk[n][2 * r], dk[n][2 * r + 1], write);
            flash_add_pair(pk + C, dv[n][2 * r], dv[n][2 * r + 1], write);
        }
#else
    __trap();  // bf16/fp16 mma.sync needs sm_80; gpt_build never selects flash below it
#endif
}

// ---- scratch and launchers ---------------------------------------------------------------------------
static inline DeviceScratch* flash_attention_scratch() {
    static DeviceScratch s;
    return &s;
}
static inline DeviceScratch* flash_attention_counters() {
    static DeviceScratch s;
    return &s;
}
// The backward's scratch for (B,T,C,NH) (flash_attention_gpu_scratch_bytes in all): D and dq_acc in
// one buffer, the dQ counters in another, zeroed when it is allocated (so no fresh counter holds a
// tag: tags start at 1), and the launch's tag: the host's count of backward launches, 1..32767 and
// then again from 1. A launch that completes leaves its counters at 0; a counter left by one that
// stopped part-way carries that launch's tag, so no later launch takes it for its own turn (unless
// its tag comes round again, 32767 launches later, with no completed launch over the same chain
// in between).
struct FlashScratch {
    float* D;
    float* dq_acc;
    int* dq_turn;
    int tag;
};
static inline FlashScratch flash_scratch(size_t B, size_t T, size_t C, size_t NH) {
    size_t d_bytes = flash_scratch_round(B * NH * T * sizeof(float)), acc_bytes = flash_scratch_round(B * T * C * sizeof(float));
    size_t turn_bytes = flash_attention_scratch_bytes(B, T, C, NH) - d_bytes - acc_bytes;
    char* p = (char*)scratch_reserve(flash_attention_scratch(), d_bytes + acc_bytes);
    DeviceScratch* c = flash_attention_counters();
    if (turn_bytes > c->bytes) {
        scratch_reserve(c, turn_bytes);
        CUDA_CHECK(cudaMemsetAsync(c->ptr, 0, c->bytes, MAIN_STREAM));
    }
    scratch_take(c, MAIN_STREAM);
    static int launches = 0;
    launches = launches % ((1 << (31 - FLASH_TURN_BITS)) - 1) + 1;
    return FlashScratch{(float*)p, (float*)(p + d_bytes), (int*)c->ptr, launches};
}
// Sizes the backward's scratch for micro-batches of up to (B,T), so that no training step allocates.
template <typename F> void flash_attention_reserve(int B, int T, int C, int NH) { flash_scratch(B, T, C, NH); }

// Blocks of `kernel` (threads, smem bytes; asked after its shared-memory opt-in) that one
// multiprocessor of this device holds at once.
template <typename K> static int flash_blocks_per_sm(K kernel, int threads, size_t smem) {
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
    return n > 0 ? n : 1;
}
// The groups of the grid's block order (flash_block): `groups` where the caller sets it (clamped to
// BH; the kernel lab's BH is head by head, the order before), else flash_groups for this device, which
// runs per_sm blocks a multiprocessor.
static inline int flash_grid_groups(int groups, int per_sm, int BH, int ntiles) {
    if (groups > 0) return groups < BH ? groups : BH;
    return flash_groups(BH, ntiles, (long long)per_sm * cuda_device().multiProcessorCount);
}

// cp.async moves 16-byte rows: the qkv and dout slices must start 16-byte aligned (C is a multiple
// of 64 here, so every row then is).
template <typename F> static void flash_check_aligned(const F* p, const char* what) {
    if (!aligned16(p)) keel_die("flash attention: %s is not 16-byte aligned (cp.async copies 16-byte rows)", what);
}

// groups: of the grid's block order (flash_block); 0 = this device's (flash_groups).
template <typename F, int HS, int MT = flash_fwd_mt(HS)>
static void flash_forward_launch(F* out, float* lse, const F* inp, int B, int T, int C, int NH, const AttentionOpts* o, int groups = 0) {
    AttnScoreScale sc = attention_score_scale(o, HS);
    float alpha = o->scaling == ATTN_SCALING_QK_INWARD ? sc.sq * sc.sq : sc.alpha;
    flash_check_aligned(inp, "the qkv input");
    flash_check_aligned(out, "the output");
    size_t smem = flash_forward_smem(HS, MT);
    static bool optin = false;
    smem_optin(flash_attention_forward_kernel<F, HS, MT>, smem, &optin);
    static const int per_sm = flash_blocks_per_sm(flash_attention_forward_kernel<F, HS, MT>, FLASH_THREADS, smem);
    int ntiles = ceil_div(T, flash_fwd_br(MT));
    groups = flash_grid_groups(groups, per_sm, B * NH, ntiles);
    KEEL_LAUNCH(flash_attention_forward_kernel<F KEEL_COMMA HS KEEL_COMMA MT>, (unsigned)((size_t)ntiles * B * NH), FLASH_THREADS, smem, MAIN_STREAM)(
        out, lse, inp, T, C, NH, B * NH, groups, *o, sc, alpha);
    CUDA_CHECK_LAUNCH();
}

template <typename F, int HS, bool ORDERED = true, int WARPS = FLASH_WARPS, int CHAIN = FLASH_CHAIN_EARLY, int STEP = 0>
static void flash_backward_launch(F* dinp, const F* dout, const F* inp, const F* out, const float* lse, int B, int T, int C, int NH,
                                  const AttentionOpts* o, bool dinp_write = false, int groups = 0) {
    AttnScoreScale sc = attention_score_scale(o, HS);
    float alpha = o->scaling == ATTN_SCALING_QK_INWARD ? sc.sq * sc.sq : sc.alpha;
    flash_check_aligned(inp, "the qkv input");
    flash_check_aligned(dout, "the output gradient");
    FlashScratch sc_ = flash_scratch(B, T, C, NH);
    size_t rows = (size_t)B * NH * T;
    KEEL_LAUNCH(flash_attention_rowdot_kernel<F>, ceil_div(rows, 8), 256, 0, MAIN_STREAM)(sc_.D, dout, out, B, T, C, NH);
    CUDA_CHECK_LAUNCH();
    size_t smem = flash_backward_smem(HS, WARPS, CHAIN, STEP);
    static bool optin = false;
    smem_optin(flash_attention_backward_kernel<F, HS, ORDERED, WARPS, CHAIN, STEP>, smem, &optin);
    static const int per_sm = flash_blocks_per_sm(flash_attention_backward_kernel<F, HS, ORDERED, WARPS, CHAIN, STEP>, 32 * WARPS, smem);
    int ntiles = ceil_div(T, 16 * WARPS);
    groups = flash_grid_groups(groups, per_sm, B * NH, ntiles);
#ifdef KEEL_CUDA_EMULATION
    // the dQ chain waits only for blocks of a lower index, which the GPU dispatches first: the
    // emulator's schedule exploration (KEEL_EMU_SCHEDULE) keeps this grid in that order
    if (ORDERED) emu::keep_block_order(flash_attention_backward_kernel<F, HS, ORDERED, WARPS, CHAIN, STEP>);
#endif
    KEEL_LAUNCH(flash_attention_backward_kernel<F KEEL_COMMA HS KEEL_COMMA ORDERED KEEL_COMMA WARPS KEEL_COMMA CHAIN KEEL_COMMA STEP>,
                (unsigned)((size_t)ntiles * B * NH), 32 * WARPS, smem, MAIN_STREAM)(dinp, dout, inp, lse, sc_.D, sc_.dq_acc, sc_.dq_turn, sc_.tag, T, C, NH,
                                                                              B * NH, groups, *o, sc, alpha, dinp_write);
    CUDA_CHECK_LAUNCH();
}

// groups (both entry points): of the grids' block order (flash_block); 0, as the model calls them,
// this device's (flash_groups); B·NH is head by head, the order before (the kernel lab's "by head").
// row_tiles (the forward): 16-row tiles a warp owns; 0, as the model calls it, flash_fwd_mt; 2 at
// head size 64 is FlashAttention-2's 128-query block (the kernel lab's variant 4: the same bytes).
template <typename F>
void flash_attention_forward(F* out, float* lse,  // (B,T,C), (B,NH,T)
                             const F* inp,        // (B,T,3C)
                             int B, int T, int C, int NH, const AttentionOpts* o, int groups = 0, int row_tiles = 0) {
    int hs = C / NH;
    if (!flash_attention_supported(hs, sizeof(F)))
        keel_die("flash attention: head size %d with %zu-byte floats is not supported (hs 64 or 128, bf16/fp16); use the GEMM path", hs, sizeof(F));
    if ((size_t)B * NH * T == 0) return;
    if ((size_t)B * NH * ceil_div(T, FLASH_BC) > 2147483647u)  // (the smallest tile of either kernel: 64 queries or keys)
        keel_die("flash attention: B·NH·⌈T/%d⌉ = %zu blocks exceed a grid's 2^31 - 1", (int)FLASH_BC, (size_t)B * NH * ceil_div(T, FLASH_BC));
    if (row_tiles != 0 && row_tiles != flash_fwd_mt(hs) && !(hs == 64 && row_tiles == 2))
        keel_die("flash attention: %d row tiles a warp at head size %d is not built (%d%s)", row_tiles, hs, flash_fwd_mt(hs), hs == 64 ? " or 2" : "");
    if constexpr (sizeof(F) == 2) {
        if (hs == 64 && row_tiles == 2) flash_forward_launch<F, 64, 2>(out, lse, inp, B, T, C, NH, o, groups);
        else if (hs == 64) flash_forward_launch<F, 64>(out, lse, inp, B, T, C, NH, o, groups);
        else flash_forward_launch<F, 128>(out, lse, inp, B, T, C, NH, o, groups);
    }
}

// The backward's warps a block: 4 (64 keys a block), the faster on an H200 at both head sizes with
// the early dQ chain (docs/gpu.md; the kernel lab at hs 64: B=16 T=1024 0.553 against 0.573 ms at 8
// warps, T=512 0.360 against 0.394, T=4096 equal; 8 warps had been the faster under the serial
// chain); KEEL_FLASH_BWD_WARPS=4 or 8 sets it, for measuring on other GPUs. The two give the same dK
// and dV bits and dQ summed over 64- or 128-key tiles.
static inline int flash_backward_warps(int /*hs*/) {
    static const int forced = [] {
        const char* s = getenv("KEEL_FLASH_BWD_WARPS");
        if (s && *s && strcmp(s, "4") != 0 && strcmp(s, "8") != 0) keel_die("KEEL_FLASH_BWD_WARPS=%s: expected 4 or 8", s);
        return s && *s ? atoi(s) : 0;
    }();
    return forced ? forced : 4;
}

// The dQ chain the backward runs on a device with `smem_sm` bytes of shared memory a multiprocessor,
// `reserved` of them taken by each block: the early chain, unless its fp32 staging tile fits fewer
// blocks a multiprocessor than the serial chain's (at most 255 registers a thread cap both: two
// blocks of 4 warps, one of 8). That is head size 128 at 4 warps on an A100 (164 KB: 2 × 87.5 KB does
// not fit, 2 × 68.5 KB does); on an H100 or H200 (228 KB) every shape takes the early chain. Both give
// the same bytes.
static inline int flash_backward_chain(int hs, int warps, size_t smem_sm, size_t reserved) {
    size_t cap = 65536 / ((size_t)255 * 32 * warps);
    auto blocks = [&](int chain) {
        size_t by_smem = smem_sm / (flash_backward_smem(hs, warps, chain) + reserved);
        return by_smem < cap ? by_smem : cap;
    };
    return blocks(FLASH_CHAIN_EARLY) >= blocks(FLASH_CHAIN_SERIAL) ? FLASH_CHAIN_EARLY : FLASH_CHAIN_SERIAL;
}
// The same for this process's device (its properties read once).
static inline int flash_backward_chain_here(int hs, int warps) {
    const cudaDeviceProp& prop = cuda_device();
    return flash_backward_chain(hs, warps, prop.sharedMemPerMultiprocessor, prop.reservedSharedMemPerBlock);
}

// ---- the backward's query step, timed at start-up -----------------------------------------------------
// At head size 64 (4 warps a block) the backward is built for steps of 64 query rows — 245–253
// registers a thread, 2 blocks a multiprocessor: the kernel an H200 timed at 0.549 ms for GPT-2
// 124M's shape — and of 32 — 168 registers under its launch bound, 3 blocks: half again as many warps
// to hide the step's latencies with, for twice the steps' barriers and dQ chain parts. Which one is
// faster depends on the GPU; what they compute does not: a lane's dK and dV add the same 16-query
// products in the same order, and a query row's dQ the same key tiles' parts in the same chain, so
// every output bit is the same (test_cuda_flash, every score variant and dropout). So the trainer
// times the two at start-up on its own micro-batch shape (flash_attention_tune, called by gpt_build
// with the model's own buffers: nothing is allocated) and runs the faster. Bytes being equal, the
// choice never changes a run's numbers, resumed or not, on any rank. Before it takes the 32-query
// kernel it compares that kernel's output with the 64-query kernel's on this GPU, byte for byte, and
// keeps 64 if they differ, saying so (a fault the emulation did not show).
// KEEL_FLASH_BWD_STEP=64 or 32 sets the step without timing; auto (the default on a GPU) times them.
// Under the CPU emulation a timing means nothing, so the default there is 64 (auto still runs the
// trial, as the tests do).
enum { FLASH_STEP_AUTO = 0 };
static inline int flash_backward_step_mode() {
    static const int mode = [] {
        const char* s = getenv("KEEL_FLASH_BWD_STEP");
        if (!s || !*s) {
#ifdef KEEL_CUDA_EMULATION
            return 64;
#else
            return (int)FLASH_STEP_AUTO;
#endif
        }
        if (!strcmp(s, "auto")) return (int)FLASH_STEP_AUTO;
        if (!strcmp(s, "64") || !strcmp(s, "32")) return atoi(s);
        keel_die("KEEL_FLASH_BWD_STEP=%s: expected auto, 64 or 32", s);
    }();
    return mode;
}
// The step this process's backward runs at head size 64 (0 until flash_attention_tune settles it:
// 64), and the start-up line that says how it was chosen ("" where there was nothing to choose).
struct FlashBwdStep {
    int step = 0;
    std::string note;
};
static inline FlashBwdStep& flash_bwd_step() {
    static FlashBwdStep s;
    return s;
}
// What one trial found: whether the candidate wrote the default's bytes, each kernel's median time
// (ms) and which of the two to run (1: the candidate).
struct FlashTrial {
    bool same = false;
    float ms[2] = {0, 0};
    int pick = 0;
};
// Which of the two a trial runs (1: the candidate): the candidate only where its bytes were the
// default's and its median time, over at least one timed round, the lower.
static inline int flash_trial_pick(bool same, float ms_default, float ms_candidate, int reps) {
    return same && reps > 0 && ms_candidate < ms_default ? 1 : 0;
}
// Runs `run_default` and `run_candidate` — each writes all `bytes` at `out` — once each, comparing
// the candidate's bytes with the default's (copied to the host), then `reps` rounds of the two
// alternately, each call timed by events on keel's stream; flash_trial_pick decides. (Start-up only:
// it waits for the GPU.)
template <typename A, typename Cand>
static FlashTrial flash_trial(A run_default, Cand run_candidate, const void* out, size_t bytes, int reps = 5) {
    FlashTrial r;
    std::vector<unsigned char> want(bytes), got(bytes);
    run_default();
    device_to_host(want.data(), out, bytes);
    run_candidate();
    device_to_host(got.data(), out, bytes);
    r.same = want == got;
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<float> t[2];
    for (int i = 0; i < reps; i++)
        for (int k = 0; k < 2; k++) {
            CUDA_CHECK(cudaEventRecord(e0, MAIN_STREAM));
            if (k == 0) run_default();
            else run_candidate();
            CUDA_CHECK(cudaEventRecord(e1, MAIN_STREAM));
            gpu_wait_event(e1, "waiting for the GPU (the flash backward's trial at start-up)");
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            t[k].push_back(ms);
        }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    for (int k = 0; k < 2; k++) {
        std::sort(t[k].begin(), t[k].end());
        r.ms[k] = reps > 0 ? t[k][(size_t)reps / 2] : 0.f;
    }
    r.pick = flash_trial_pick(r.same, r.ms[0], r.ms[1], reps);
    return r;
}

template <typename F>
void flash_attention_backward(F* dinp,                   // (B,T,3C) accumulated into (written with dinp_write)
                              const F* dout,             // (B,T,C)
                              const F* inp, const F* out, const float* lse,  // (B,T,3C), (B,T,C), (B,NH,T)
                              int B, int T, int C, int NH, const AttentionOpts* o, bool dinp_write = false, int groups = 0) {
    int hs = C / NH;
    if (!flash_attention_supported(hs, sizeof(F)))
        keel_die("flash attention: head size %d with %zu-byte floats is not supported (hs 64 or 128, bf16/fp16); use the GEMM path", hs, sizeof(F));
    if ((size_t)B * NH * T == 0) return;
    if ((size_t)B * NH * ceil_div(T, FLASH_BC) > 2147483647u)  // (the smallest tile of either kernel: 64 queries or keys)
        keel_die("flash attention: B·NH·⌈T/%d⌉ = %zu blocks exceed a grid's 2^31 - 1", (int)FLASH_BC, (size_t)B * NH * ceil_div(T, FLASH_BC));
    if (ceil_div(T, 16 * FLASH_WARPS) >= (1u << FLASH_TURN_BITS))
        keel_die("flash attention: T = %d has more key tiles than the dQ chain's counter holds (%d)", T, (1 << FLASH_TURN_BITS) - 1);
    if constexpr (sizeof(F) == 2) {
        bool w8 = flash_backward_warps(hs) == 8;
        if (hs == 64 && w8) flash_backward_launch<F, 64, true, 8>(dinp, dout, inp, out, lse, B, T, C, NH, o, dinp_write, groups);
        else if (hs == 64 && flash_bwd_step().step == 32)
            flash_backward_launch<F, 64, true, 4, FLASH_CHAIN_EARLY, 32>(dinp, dout, inp, out, lse, B, T, C, NH, o, dinp_write, groups);
        else if (hs == 64) flash_backward_launch<F, 64>(dinp, dout, inp, out, lse, B, T, C, NH, o, dinp_write, groups);
        else if (w8) flash_backward_launch<F, 128, true, 8>(dinp, dout, inp, out, lse, B, T, C, NH, o, dinp_write, groups);
        else if (flash_backward_chain_here(128, 4) == FLASH_CHAIN_SERIAL)
            flash_backward_launch<F, 128, true, 4, FLASH_CHAIN_SERIAL>(dinp, dout, inp, out, lse, B, T, C, NH, o, dinp_write, groups);
        else flash_backward_launch<F, 128>(dinp, dout, inp, out, lse, B, T, C, NH, o, dinp_write, groups);
    }
}

// Settles the backward's query step at head size 64 (above) for micro-batches of (B,T): times the two
// kernels on `qkv` (B,T,3C), filled here with multiples of 1/128 in [-1, 1), their outputs written
// into `dqkv` (B,T,3C), with the forward's `out` (B,T,C) and `lse` (B,NH,T) as the output gradient's
// stand-in and the statistics (the model's activation and gradient buffers, before the first step;
// every one of them is written again before it is read). Once a process: the first model built
// settles it.
template <typename F>
static void flash_backward_tune(F* qkv, F* out, float* lse, F* dqkv, int B, int T, int C, int NH) {
    FlashBwdStep& st = flash_bwd_step();
    if (st.step || C / NH != 64 || flash_backward_warps(64) != 4 || (size_t)B * T == 0) return;
    int mode = flash_backward_step_mode();
    if (mode != FLASH_STEP_AUTO) {
        const char* env = getenv("KEEL_FLASH_BWD_STEP");
        bool pinned = env && *env;  // (else the emulation's default)
        st.step = mode;
        std::string why = pinned ? "KEEL_FLASH_BWD_STEP=" + std::to_string(mode)
                                 : "not timed: the CPU emulation's times mean nothing; KEEL_FLASH_BWD_STEP=auto runs the trial";
        st.note = "flash backward: " + std::to_string(mode) + "-query steps (" + why + ")";
        return;
    }
    size_t n = (size_t)B * T * 3 * C;
    std::vector<F> host(n);
    for (size_t i = 0; i < n; i++) host[i] = from_f32<F>((float)(rng_mix64(i) >> 56) * (1.0f / 128) - 1.0f);  // (k/128 - 1: exact in F)
    host_to_device(qkv, host.data(), n * sizeof(F));
    AttentionOpts o;
    keel_cuda::flash_attention_forward<F>(out, lse, qkv, B, T, C, NH, &o);  // (qualified: the CPU twin is a candidate by ADL)
    FlashTrial r = flash_trial(
        [&] { flash_backward_launch<F, 64>(dqkv, out, qkv, out, lse, B, T, C, NH, &o, true); },
        [&] { flash_backward_launch<F, 64, true, 4, FLASH_CHAIN_EARLY, 32>(dqkv, out, qkv, out, lse, B, T, C, NH, &o, true); }, dqkv,
        n * sizeof(F));
    st.step = r.pick ? 32 : 64;
    char buf[320];
    if (!r.same) {  // (every rank says so: the start-up line is rank 0's alone)
        snprintf(buf, sizeof buf,
                 "flash backward: 64-query steps. WARNING: the 32-query kernel's output differed from the 64-query kernel's on this GPU (they "
                 "must give the same bytes): not used");
        fprintf(stderr, "warning: %s\n", buf + strlen("flash backward: 64-query steps. WARNING: "));
    } else
        snprintf(buf, sizeof buf, "flash backward: %d-query steps (timed at start-up on B=%d, T=%d: %.3f ms against %.3f for %d-query steps; the "
                 "same bytes either way)", st.step, B, T, r.ms[r.pick], r.ms[1 - r.pick], r.pick ? 64 : 32);
    st.note = buf;
}
template <typename F>
void flash_attention_tune(F* qkv, F* out, float* lse, F* dqkv, int B, int T, int C, int NH) {
    if constexpr (sizeof(F) == 2) flash_backward_tune<F>(qkv, out, lse, dqkv, B, T, C, NH);  // (fp32 runs take the GEMM path)
}
// The start-up line of the choice above ("" where nothing was chosen: no flash at head size 64).
static inline std::string flash_attention_note() { return flash_bwd_step().note; }

}  // namespace keel_cuda
