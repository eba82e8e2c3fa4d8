// cuda/flash_attention.cuh — fused causal multi-head self-attention in the FlashAttention-2 scheme
// (Dao 2023): the (T,T) scores and probabilities never reach global memory. The contract of
// cpu/flash_attention.h (= cpu/attention.h's math: standard or qk-inward scaling, layer coefficient,
// ALiBi, causal mask, dropout on the probabilities keyed by (h + head_offset, t, u)), saving only the
// log-sum-exp of each row for the backward.
// Legend: B batch, T time, C channels, NH heads, hs = C/NH head size (HS, a template argument),
// BH = B·NH head-batches, F the storage type (bf16 or fp16: the matrix products run on tensor cores
// through nvcuda::wmma, 16×16×16 tiles, fp32 accumulation).
//   inp = qkv (B,T,3C); out (B,T,C); lse (B,NH,T) fp32; dinp (B,T,3C) accumulated into.
//
// Coverage (flash_attention_supported): hs ∈ {64, 128}, F = bf16 or fp16, compute capability ≥ 8.0
// (bf16 WMMA; keel builds for sm_80/sm_90). fp32 runs and other head sizes take the GEMM path
// (cuda/attention.cuh), which --attention-impl auto selects.
//
// Blocks and warps. Every kernel runs 4 warps (128 threads); a warp owns 16 rows of the block's tile
// (the M of a 16×16×16 product), so each softmax row lives in one warp and needs no block barrier.
//   forward: block = (query tile of BR = 64 rows, head-batch). Q's tile is loaded once into the
//     warp's matrix_a fragments. Loop over key tiles of BC = 64 (ascending; causal: only tiles with a
//     key ≤ the tile's last query; inside, a warp skips the 16-key column blocks above its last
//     query): S = Q·Kᵀ on tensor cores → shared fp32; the row's two lanes apply the score variant in
//     fp32 (alpha = 1/(√hs·coeff), or sq² for qk-inward as in the GEMM path; ALiBi slope·u/coeff;
//     ·coeff), update the running max m and sum l (online softmax, fp32), write P = F(exp(s - m)·drop)
//     to shared memory and rescale the row's fp32 O accumulator by exp(m_old - m); then O += P·V on
//     tensor cores (the accumulator loaded from and stored to shared memory: a per-row rescale is not
//     possible on a fragment whose element layout is unspecified). Last: out = F(O / l),
//     lse = m + log(l).
//   backward (deterministic, no atomics; D_t = dout_t·out_t by a warp-per-row kernel first, which
//     equals Σ_u drop(att)·datt in exact arithmetic, dropout included):
//     dK/dV kernel: block = (key tile of BC = 64 keys it owns, head-batch); loops over query steps of
//       BRB = 32 in ascending order from the diagonal on; per step, for its 16 keys a warp forms
//       Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, recomputes p = exp(s - lse_t), writes Pᵀ·drop and
//       dSᵀ = p·(dP·drop - D_t)/√hs as F, and accumulates dV += (P·drop)ᵀ·dO, dK += dSᵀ·Q in fp32
//       fragments that stay in registers for the whole loop.
//     dQ kernel: block = (query tile of BR = 64, head-batch), loops over key tiles in ascending
//       order, recomputes p and dS the same way, dQ += dS·K in register fragments.
//   Every output element is produced by one warp, summed in an order fixed by the shape (tiles
//   ascending, 16-wide k-steps ascending, the tensor core's own order inside a step): the same bits
//   run to run.
// Tile sizes, why: 16 rows per warp is the WMMA M; 4 warps × 16 = 64 query rows amortise each K/V
// tile load over 64 queries; BC = 64 keys gives 4 independent 16-column products per k-step. The
// dK/dV kernel steps over queries by 32 to stay under the 99 KB of shared memory every sm_8x/9x part
// allows a block at hs = 128. Shared memory (bytes, incl. 128 of alignment; opted in with
// cudaFuncSetAttribute since some exceed the default 48 KB):
//     forward  K,V (2·64·hs F) + S (64·64 fp32) + P (64·64 F) + O (64·hs fp32)   hs 64: 56 KB, 128: 88 KB
//     dK/dV    K,V (2·64·hs F) + Q,dO (2·32·hs F) + lse,D (2·32 fp32) + Sᵀ,dPᵀ (2·64·32 fp32)
//              + Pᵀ,dSᵀ (2·64·32 F)                                             hs 64: 48.4 KB, 128: 72 KB
//     dQ       K,V (2·64·hs F) + S,dP (2·64·64 fp32) + dS (64·64 F)             hs 64: 56 KB, 128: 72 KB
//   (Q and dO are staged through the S/O regions before their fragments are loaded.)
// Registers per thread: the fragments held across the key/query loop are the forward's Q
// a-fragments (hs/16 of 8 F), the dK/dV kernel's 2·hs/16 fp32 accumulators, the dQ kernel's Q and dO
// a-fragments and hs/16 accumulators. ptxas (nvcc 13, bf16, sm_80 and sm_90) reports no spills:
// forward 80 (hs 64) / 128 (hs 128) registers, dK/dV 128 / 254, dQ 128 / 242 — at hs = 128 the
// backward runs 2 blocks (8 warps) per SM. Keeping O in registers as well needs mma.sync with its
// documented fragment layout (the per-row rescale); that is the next step for speed.
// Numerics vs the GEMM path (cuda/attention.cuh): both multiply F operands exactly and sum in fp32.
// The GEMM path rounds the normalized probability to F (then ·drop, rounded again) before att·V;
// here the unnormalized exp(s - m_running)·drop is rounded to F and the fp32 sum is divided by l at
// the end. The backward uses p = exp(s - lse) in fp32 (the GEMM path: the stored F probability) and
// D = dout·out from the F output (GEMM path: Σ att·datt in fp32). Each is an F rounding of one term,
// so the two paths agree to F tolerances, not bits. lse is fp32. Where the exact dS is 0 (query
// row 0: one key, p = 1, dP·drop = D) the GEMM path's Σ att·datt cancels exactly, while flash's
// D from the rounded out leaves dS of the order of 2^-9·|dout|·|v|/√hs (FlashAttention-2 has the
// same property); test_cuda_flash bounds the difference.
// Scratch: D (B,NH,T) fp32, flash_attention_scratch_bytes (for --dry-run), reserved once by
// flash_attention_reserve; the caller keeps lse (B,NH,T) fp32 per layer instead of att (B,NH,T,T).
// Grid: (T/64, B·NH): B·NH ≤ 65535 (gridDim.y).
// Emulation: test/cuda_emu/mma.h implements the wmma calls used here (one documented fragment layout
// the kernels do not depend on: fragments are only loaded, stored, filled and multiplied).
#pragma once
#include <mma.h>

// bf16/fp16 WMMA needs compute capability 8.0. A build for an older target (GPU_ARCH=75) still
// compiles: there the three tensor-core kernels are a trap, and the model never selects flash on
// such a device (gpt_build asks the device: backend_compute_capability).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define KEEL_FLASH_ARCH_OK 0
#else
#define KEEL_FLASH_ARCH_OK 1
#endif

#include <type_traits>

#include "llmc/cuda/attention.cuh"

namespace keel_cuda {

enum {
    FLASH_WARPS = 4,
    FLASH_THREADS = 32 * FLASH_WARPS,
    FLASH_BR = 16 * FLASH_WARPS,  // query rows of a forward / dQ block
    FLASH_BC = 64,                // keys of a tile (forward, dQ) and of a dK/dV block
    FLASH_BRB = 32,               // query rows of one step of the dK/dV kernel
};

// Whether the fused path handles the config; otherwise the caller takes attention_forward/backward.
static inline bool flash_attention_supported(int hs, size_t fsize) { return flash_attention_gpu_supported(hs, fsize); }  // (llmc/ops.h)

// Device scratch beyond the caller's lse (B,NH,T): D (B,NH,T) fp32 in the backward.
static inline size_t flash_attention_scratch_bytes(size_t B, size_t T, size_t C, size_t NH) { return flash_attention_gpu_scratch_bytes(B, T, C, NH); }

// Shared-memory bytes of each kernel (the layouts in the kernels below), 128 for aligning the base.
static inline size_t flash_forward_smem(int hs, size_t fsize) {
    return 128 + 2 * FLASH_BC * hs * fsize + FLASH_BR * FLASH_BC * (4 + fsize) + FLASH_BR * hs * 4;
}
static inline size_t flash_dkdv_smem(int hs, size_t fsize) {
    return 128 + 2 * FLASH_BC * hs * fsize + 2 * FLASH_BRB * hs * fsize + 2 * FLASH_BRB * 4 + FLASH_BC * FLASH_BRB * (8 + 2 * fsize);
}
static inline size_t flash_dq_smem(int hs, size_t fsize) { return 128 + 2 * FLASH_BC * hs * fsize + FLASH_BR * FLASH_BC * (8 + fsize); }

__device__ __host__ inline int flash_imin(int a, int b) { return a < b ? a : b; }

// Fragment arrays (qf[], dk[], ...) stay in registers only if every index is a compile-time
// constant: the loops over them are unrolled (nvcc); g++ (the emulation) does not know the pragma.
#if defined(__CUDACC__)
#define FLASH_UNROLL _Pragma("unroll")
#else
#define FLASH_UNROLL
#endif

// WMMA needs 256-bit aligned tile pointers: the kernels carve shared memory from a 128-byte boundary.
__device__ inline char* flash_smem_align(char* p) { return (char*)(((uintptr_t)p + 127) & ~(uintptr_t)127); }

// Rows t0..t0+rows-1 of one head's slice (row t at src + t·stride, HS elements) into dst (rows,HS),
// rows ≥ T as zeros (a zero K or V row contributes nothing and cannot be NaN). All threads of the
// block; vec: 16-byte accesses (the host checked alignment), else scalar — the same values.
template <typename F, int HS> __device__ inline void flash_load_rows(F* dst, const F* src, int t0, int rows, int T, size_t stride, bool vec) {
    const int V = 16 / sizeof(F), PR = HS / V;  // packs per row
    if (vec) {
        for (int i = threadIdx.x; i < rows * PR; i += blockDim.x) {
            int r = i / PR, c = i % PR * V;
            Pack<F, V> p;
            if (t0 + r < T) p = pack_load<F, V>(src + (size_t)(t0 + r) * stride + c);
            else
                for (int j = 0; j < V; j++) p.v[j] = from_f32<F>(0.0f);
            pack_store<F, V>(dst + r * HS + c, p);
        }
    } else {
        for (int i = threadIdx.x; i < rows * HS; i += blockDim.x) {
            int r = i / HS, c = i % HS;
            dst[r * HS + c] = t0 + r < T ? src[(size_t)(t0 + r) * stride + c] : from_f32<F>(0.0f);
        }
    }
}

// dst[c] = F(dst[c] + src[c]) for the HS/2 channels [c0, c0 + HS/2) of one row (one lane's half).
template <typename F, int HS> __device__ inline void flash_add_half_row(F* dst, const float* src, int c0) {
    for (int c = c0; c < c0 + HS / 2; c++) dst[c] = from_f32<F>(to_f32(dst[c]) + src[c]);
}

// ---- forward -------------------------------------------------------------------------------------
template <typename F, int HS>
__global__ void __launch_bounds__(FLASH_THREADS)
    flash_attention_forward_kernel(F* out, float* lse, const F* inp, int T, int C, int NH, AttentionOpts o, AttnScoreScale sc, float alpha,
                                   bool vec) {
#if KEEL_FLASH_ARCH_OK
    using namespace nvcuda;
    const int BR = FLASH_BR, BC = FLASH_BC;
    KEEL_DYNAMIC_SHARED(char, smem_raw);
    char* smem = flash_smem_align(smem_raw);
    F* Ks = (F*)smem;              // (BC,HS)
    F* Vs = Ks + BC * HS;          // (BC,HS)
    float* Ss = (float*)(Vs + BC * HS);  // (BR,BC) scores, then softmax inputs
    F* Ps = (F*)(Ss + BR * BC);    // (BR,BC) exp(s - m)·drop
    float* Os = (float*)(Ps + BR * BC);  // (BR,HS) unnormalized output; first the Q staging
    int qt = (int)gridDim.x - 1 - (int)blockIdx.x;  // the longest (last) query tiles start first
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, q0 = qt * BR;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t C3 = 3 * (size_t)C;
    const F* qsrc = inp + (size_t)b * T * C3 + h * HS;

    F* Qs = (F*)Os;
    flash_load_rows<F, HS>(Qs, qsrc, q0, BR, T, C3, vec);
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, F, wmma::row_major> qf[HS / 16];
    FLASH_UNROLL
    for (int kk = 0; kk < HS / 16; kk++) wmma::load_matrix_sync(qf[kk], Qs + warp * 16 * HS + kk * 16, HS);
    __syncthreads();  // the staging becomes O

    // lanes 2r and 2r+1 own row r of the warp (query t): columns [half·BC/2, ...) of S and P,
    // [half·HS/2, ...) of O; both hold the row's (m, l).
    int r = lane / 2, half = lane % 2, t = q0 + warp * 16 + r;
    float* Sw = Ss + warp * 16 * BC;
    F* Pw = Ps + warp * 16 * BC;
    float* Ow = Os + warp * 16 * HS;
    for (int c = half * HS / 2; c < (half + 1) * HS / 2; c++) Ow[r * HS + c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    int w_first = q0 + warp * 16, w_last = flash_imin(w_first + 15, T - 1);  // the warp's real queries
    int q_last = flash_imin(q0 + BR, T) - 1;
    int nk = q_last / BC + 1;  // key tiles holding a key ≤ the tile's last query
    for (int kt = 0; kt < nk; kt++) {
        int k0 = kt * BC;
        __syncthreads();  // every warp is done with the previous K, V
        flash_load_rows<F, HS>(Ks, qsrc + C, k0, BC, T, C3, vec);
        flash_load_rows<F, HS>(Vs, qsrc + 2 * C, k0, BC, T, C3, vec);
        __syncthreads();
        // 16-key column blocks with a key ≤ the warp's last query (warp-uniform)
        int jn = w_first > w_last || w_last < k0 ? 0 : flash_imin(BC / 16, (w_last - k0) / 16 + 1);
        if (jn == 0) continue;
        for (int j = 0; j < jn; j++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> sf;
            wmma::fill_fragment(sf, 0.0f);
            FLASH_UNROLL
            for (int kk = 0; kk < HS / 16; kk++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, F, wmma::col_major> kf;  // Kᵀ: (k = channel, n = key)
                wmma::load_matrix_sync(kf, Ks + j * 16 * HS + kk * 16, HS);
                wmma::mma_sync(sf, qf[kk], kf, sf);
            }
            wmma::store_matrix_sync(Sw + j * 16, sf, BC, wmma::mem_row_major);
        }
        __syncwarp();
        // online softmax over this tile's half row
        float* srow = Sw + r * BC;
        int c0 = half * BC / 2, c1 = c0 + BC / 2;
        float mt = -INFINITY;
        for (int c = c0; c < c1; c++) {
            int u = k0 + c;
            if (t < T && u <= t) {
                float s = attention_softmax_input(srow[c] * alpha, h, u, o, sc);
                srow[c] = s;
                mt = fmaxf(mt, s);
            }
        }
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        float mn = fmaxf(m, mt);
        float corr = mn == -INFINITY ? 1.0f : expf(m - mn);  // m = -inf (first tile): 0
        float ps = 0.0f;
        for (int c = c0; c < c1; c++) {
            int u = k0 + c;
            float p = 0.0f;
            if (t < T && u <= t) p = expf(srow[c] - mn);
            ps += p;
            Pw[r * BC + c] = from_f32<F>(t < T && u <= t ? p * attention_drop_mult(o, sc.dscale, b, h, t, u) : 0.0f);
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);  // a + b = b + a: both lanes hold the same bits
        l = l * corr + ps;
        m = mn;
        for (int c = half * HS / 2; c < (half + 1) * HS / 2; c++) Ow[r * HS + c] *= corr;
        __syncwarp();
        // O += P·V over the column blocks that hold a key ≤ the warp's last query
        FLASH_UNROLL
        for (int j = 0; j < HS / 16; j++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> of;
            wmma::load_matrix_sync(of, Ow + j * 16, HS, wmma::mem_row_major);
            for (int kk = 0; kk < jn; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, F, wmma::row_major> pf;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, F, wmma::row_major> vf;
                wmma::load_matrix_sync(pf, Pw + kk * 16, BC);
                wmma::load_matrix_sync(vf, Vs + kk * 16 * HS + j * 16, HS);
                wmma::mma_sync(of, pf, vf, of);
            }
            wmma::store_matrix_sync(Ow + j * 16, of, HS, wmma::mem_row_major);
        }
        __syncwarp();
    }
    if (t < T) {
        float inv = 1.0f / l;
        F* orow = out + ((size_t)b * T + t) * C + h * HS;
        for (int c = half * HS / 2; c < (half + 1) * HS / 2; c++) orow[c] = from_f32<F>(Ow[r * HS + c] * inv);
        if (half == 0) lse[(size_t)bh * T + t] = m + logf(l);
    }
#else
    __trap();  // bf16/fp16 WMMA needs sm_80; gpt_build never selects flash below it
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

// dK, dV of one key tile (block), summed over query steps in ascending order.
template <typename F, int HS>
__global__ void __launch_bounds__(FLASH_THREADS)
    flash_attention_dkdv_kernel(F* dinp, const F* dout, const F* inp, const float* lse, const float* D, int T, int C, int NH, AttentionOpts o,
                                AttnScoreScale sc, float alpha, bool vec) {
#if KEEL_FLASH_ARCH_OK
    using namespace nvcuda;
    const int BC = FLASH_BC, BRB = FLASH_BRB;
    KEEL_DYNAMIC_SHARED(char, smem_raw);
    char* smem = flash_smem_align(smem_raw);
    F* Ks = (F*)smem;                    // (BC,HS)
    F* Vs = Ks + BC * HS;                // (BC,HS)
    F* Qs = Vs + BC * HS;                // (BRB,HS)
    F* dOs = Qs + BRB * HS;              // (BRB,HS)
    float* Ss = (float*)(dOs + BRB * HS);  // (BC,BRB) Sᵀ
    float* dPs = Ss + BC * BRB;          // (BC,BRB) dPᵀ
    float* lse_s = dPs + BC * BRB;       // (BRB)
    float* D_s = lse_s + BRB;            // (BRB)
    F* Pts = (F*)(D_s + BRB);            // (BC,BRB) (p·drop)ᵀ
    F* dSts = Pts + BC * BRB;            // (BC,BRB) dSᵀ
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, k0 = blockIdx.x * BC;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t C3 = 3 * (size_t)C;
    const F* qsrc = inp + (size_t)b * T * C3 + h * HS;
    const F* dosrc = dout + (size_t)b * T * C + h * HS;

    flash_load_rows<F, HS>(Ks, qsrc + C, k0, BC, T, C3, vec);
    flash_load_rows<F, HS>(Vs, qsrc + 2 * C, k0, BC, T, C3, vec);
    __syncthreads();
    int u_first = k0 + warp * 16;  // the warp's 16 keys
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> dk[HS / 16], dv[HS / 16];
    FLASH_UNROLL
    for (int j = 0; j < HS / 16; j++) {
        wmma::fill_fragment(dk[j], 0.0f);
        wmma::fill_fragment(dv[j], 0.0f);
    }
    // lanes 2r, 2r+1: key row r (u), query columns [half·BRB/2, ...)
    int r = lane / 2, half = lane % 2, u = u_first + r;
    float* Sw = Ss + warp * 16 * BRB;
    float* dPw = dPs + warp * 16 * BRB;
    F* Ptw = Pts + warp * 16 * BRB;
    F* dStw = dSts + warp * 16 * BRB;
    for (int q0 = k0 / BRB * BRB; q0 < T; q0 += BRB) {
        __syncthreads();  // every warp is done with the previous step's Q, dO
        flash_load_rows<F, HS>(Qs, qsrc, q0, BRB, T, C3, vec);
        flash_load_rows<F, HS>(dOs, dosrc, q0, BRB, T, (size_t)C, vec);
        for (int i = threadIdx.x; i < BRB; i += blockDim.x) {
            lse_s[i] = q0 + i < T ? lse[(size_t)bh * T + q0 + i] : 0.0f;
            D_s[i] = q0 + i < T ? D[(size_t)bh * T + q0 + i] : 0.0f;
        }
        __syncthreads();
        // a 16-query block takes part if it holds a real query ≥ one of the warp's real keys
        auto needed = [&](int jq) { return u_first < T && q0 + jq * 16 < T && q0 + jq * 16 + 15 >= u_first; };
        bool any = false;
        for (int jq = 0; jq < BRB / 16; jq++) {
            if (!needed(jq)) continue;
            any = true;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> sf, pf;
            wmma::fill_fragment(sf, 0.0f);
            wmma::fill_fragment(pf, 0.0f);
            FLASH_UNROLL
            for (int kk = 0; kk < HS / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, F, wmma::row_major> ka, va;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, F, wmma::col_major> qb, dob;  // Qᵀ, dOᵀ
                wmma::load_matrix_sync(ka, Ks + warp * 16 * HS + kk * 16, HS);
                wmma::load_matrix_sync(qb, Qs + jq * 16 * HS + kk * 16, HS);
                wmma::mma_sync(sf, ka, qb, sf);
                wmma::load_matrix_sync(va, Vs + warp * 16 * HS + kk * 16, HS);
                wmma::load_matrix_sync(dob, dOs + jq * 16 * HS + kk * 16, HS);
                wmma::mma_sync(pf, va, dob, pf);
            }
            wmma::store_matrix_sync(Sw + jq * 16, sf, BRB, wmma::mem_row_major);
            wmma::store_matrix_sync(dPw + jq * 16, pf, BRB, wmma::mem_row_major);
        }
        if (!any) continue;  // warp-uniform: this warp has nothing in this step
        __syncwarp();
        for (int c = half * BRB / 2; c < (half + 1) * BRB / 2; c++) {
            int t = q0 + c;
            float pd = 0.0f, ds = 0.0f;
            if (t < T && u <= t) {
                float p = expf(attention_softmax_input(Sw[r * BRB + c] * alpha, h, u, o, sc) - lse_s[c]);
                float mult = attention_drop_mult(o, sc.dscale, b, h, t, u);
                pd = p * mult;
                ds = p * (dPw[r * BRB + c] * mult - D_s[c]) * sc.scale;
            }
            Ptw[r * BRB + c] = from_f32<F>(pd);
            dStw[r * BRB + c] = from_f32<F>(ds);
        }
        __syncwarp();
        for (int jq = 0; jq < BRB / 16; jq++) {
            if (!needed(jq)) continue;
            wmma::fragment<wmma::matrix_a, 16, 16, 16, F, wmma::row_major> pa, dsa;
            wmma::load_matrix_sync(pa, Ptw + jq * 16, BRB);
            wmma::load_matrix_sync(dsa, dStw + jq * 16, BRB);
            FLASH_UNROLL
            for (int j = 0; j < HS / 16; j++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, F, wmma::row_major> dob, qb;
                wmma::load_matrix_sync(dob, dOs + jq * 16 * HS + j * 16, HS);
                wmma::mma_sync(dv[j], pa, dob, dv[j]);
                wmma::load_matrix_sync(qb, Qs + jq * 16 * HS + j * 16, HS);
                wmma::mma_sync(dk[j], dsa, qb, dk[j]);
            }
        }
    }
    // dK, then dV, through an fp32 staging of the warp's 16 rows (over K, V, Q: all reads are done)
    __syncthreads();
    float* stage = (float*)smem + warp * 16 * HS;
    FLASH_UNROLL
    for (int j = 0; j < HS / 16; j++) wmma::store_matrix_sync(stage + j * 16, dk[j], HS, wmma::mem_row_major);
    __syncwarp();
    if (u < T) flash_add_half_row<F, HS>(dinp + ((size_t)b * T + u) * C3 + C + h * HS, stage + r * HS, half * HS / 2);
    __syncwarp();
    FLASH_UNROLL
    for (int j = 0; j < HS / 16; j++) wmma::store_matrix_sync(stage + j * 16, dv[j], HS, wmma::mem_row_major);
    __syncwarp();
    if (u < T) flash_add_half_row<F, HS>(dinp + ((size_t)b * T + u) * C3 + 2 * C + h * HS, stage + r * HS, half * HS / 2);
#else
    __trap();  // bf16/fp16 WMMA needs sm_80; gpt_build never selects flash below it
#endif
}

// dQ of one query tile (block), summed over key tiles in ascending order.
template <typename F, int HS>
__global__ void __launch_bounds__(FLASH_THREADS)
    flash_attention_dq_kernel(F* dinp, const F* dout, const F* inp, const float* lse, const float* D, int T, int C, int NH, AttentionOpts o,
                              AttnScoreScale sc, float alpha, bool vec) {
#if KEEL_FLASH_ARCH_OK
    using namespace nvcuda;
    const int BR = FLASH_BR, BC = FLASH_BC;
    KEEL_DYNAMIC_SHARED(char, smem_raw);
    char* smem = flash_smem_align(smem_raw);
    F* Ks = (F*)smem;                    // (BC,HS)
    F* Vs = Ks + BC * HS;                // (BC,HS)
    float* Ss = (float*)(Vs + BC * HS);  // (BR,BC); first the Q staging
    float* dPs = Ss + BR * BC;           // (BR,BC); first the dO staging
    F* dSs = (F*)(dPs + BR * BC);        // (BR,BC)
    int qt = (int)gridDim.x - 1 - (int)blockIdx.x;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, q0 = qt * BR;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t C3 = 3 * (size_t)C;
    const F* qsrc = inp + (size_t)b * T * C3 + h * HS;

    flash_load_rows<F, HS>((F*)Ss, qsrc, q0, BR, T, C3, vec);
    flash_load_rows<F, HS>((F*)dPs, dout + (size_t)b * T * C + h * HS, q0, BR, T, (size_t)C, vec);
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, F, wmma::row_major> qf[HS / 16], dof[HS / 16];
    FLASH_UNROLL
    for (int kk = 0; kk < HS / 16; kk++) {
        wmma::load_matrix_sync(qf[kk], (F*)Ss + warp * 16 * HS + kk * 16, HS);
        wmma::load_matrix_sync(dof[kk], (F*)dPs + warp * 16 * HS + kk * 16, HS);
    }
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> dq[HS / 16];
    FLASH_UNROLL
    for (int j = 0; j < HS / 16; j++) wmma::fill_fragment(dq[j], 0.0f);
    int r = lane / 2, half = lane % 2, t = q0 + warp * 16 + r;
    float lse_t = t < T ? lse[(size_t)bh * T + t] : 0.0f, D_t = t < T ? D[(size_t)bh * T + t] : 0.0f;
    float* Sw = Ss + warp * 16 * BC;
    float* dPw = dPs + warp * 16 * BC;
    F* dSw = dSs + warp * 16 * BC;
    int w_first = q0 + warp * 16, w_last = flash_imin(w_first + 15, T - 1);
    int nk = (flash_imin(q0 + BR, T) - 1) / BC + 1;
    for (int kt = 0; kt < nk; kt++) {
        int k0 = kt * BC;
        __syncthreads();  // the staging (first tile) or the previous K, V are no longer read
        flash_load_rows<F, HS>(Ks, qsrc + C, k0, BC, T, C3, vec);
        flash_load_rows<F, HS>(Vs, qsrc + 2 * C, k0, BC, T, C3, vec);
        __syncthreads();
        int jn = w_first > w_last || w_last < k0 ? 0 : flash_imin(BC / 16, (w_last - k0) / 16 + 1);
        if (jn == 0) continue;
        for (int j = 0; j < jn; j++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> sf, pf;
            wmma::fill_fragment(sf, 0.0f);
            wmma::fill_fragment(pf, 0.0f);
            FLASH_UNROLL
            for (int kk = 0; kk < HS / 16; kk++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, F, wmma::col_major> kb, vb;  // Kᵀ, Vᵀ
                wmma::load_matrix_sync(kb, Ks + j * 16 * HS + kk * 16, HS);
                wmma::mma_sync(sf, qf[kk], kb, sf);
                wmma::load_matrix_sync(vb, Vs + j * 16 * HS + kk * 16, HS);
                wmma::mma_sync(pf, dof[kk], vb, pf);
            }
            wmma::store_matrix_sync(Sw + j * 16, sf, BC, wmma::mem_row_major);
            wmma::store_matrix_sync(dPw + j * 16, pf, BC, wmma::mem_row_major);
        }
        __syncwarp();
        for (int c = half * BC / 2; c < (half + 1) * BC / 2; c++) {
            int u = k0 + c;
            float ds = 0.0f;
            if (t < T && u <= t) {
                float p = expf(attention_softmax_input(Sw[r * BC + c] * alpha, h, u, o, sc) - lse_t);
                ds = p * (dPw[r * BC + c] * attention_drop_mult(o, sc.dscale, b, h, t, u) - D_t) * sc.scale;
            }
            dSw[r * BC + c] = from_f32<F>(ds);
        }
        __syncwarp();
        for (int kk = 0; kk < jn; kk++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, F, wmma::row_major> dsa;
            wmma::load_matrix_sync(dsa, dSw + kk * 16, BC);
            FLASH_UNROLL
            for (int j = 0; j < HS / 16; j++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, F, wmma::row_major> kb;
                wmma::load_matrix_sync(kb, Ks + kk * 16 * HS + j * 16, HS);
                wmma::mma_sync(dq[j], dsa, kb, dq[j]);
            }
        }
    }
    __syncthreads();
    float* stage = (float*)smem + warp * 16 * HS;
    FLASH_UNROLL
    for (int j = 0; j < HS / 16; j++) wmma::store_matrix_sync(stage + j * 16, dq[j], HS, wmma::mem_row_major);
    __syncwarp();
    if (t < T) flash_add_half_row<F, HS>(dinp + ((size_t)b * T + t) * C3 + h * HS, stage + r * HS, half * HS / 2);
#else
    __trap();  // bf16/fp16 WMMA needs sm_80; gpt_build never selects flash below it
#endif
}

// ---- scratch and launchers ---------------------------------------------------------------------------
static inline DeviceScratch* flash_attention_scratch() {
    static DeviceScratch s;
    return &s;
}
// Sizes the backward's D for micro-batches of up to (B,T), so that no training step allocates.
template <typename F> void flash_attention_reserve(int B, int T, int C, int NH) {
    scratch_reserve(flash_attention_scratch(), flash_attention_scratch_bytes(B, T, C, NH));
}

// Opts a kernel into `bytes` of dynamic shared memory once (the attribute is per kernel function).
template <typename K> static void flash_smem_optin(K kernel, size_t bytes, bool* done) {
    if (*done) return;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    *done = true;
}

template <typename F, int HS> static void flash_forward_launch(F* out, float* lse, const F* inp, int B, int T, int C, int NH, const AttentionOpts* o) {
    AttnScoreScale sc = attention_score_scale(o, HS);
    float alpha = o->scaling == ATTN_SCALING_QK_INWARD ? sc.sq * sc.sq : sc.alpha;
    bool vec = aligned16(inp) && C % (16 / (int)sizeof(F)) == 0;  // (out is written by scalar stores)
    size_t smem = flash_forward_smem(HS, sizeof(F));
    static bool optin = false;
    flash_smem_optin(flash_attention_forward_kernel<F, HS>, smem, &optin);
    KEEL_LAUNCH(flash_attention_forward_kernel<F KEEL_COMMA HS>, dim3(ceil_div(T, FLASH_BR), B * NH), FLASH_THREADS, smem, MAIN_STREAM)(
        out, lse, inp, T, C, NH, *o, sc, alpha, vec);
    CUDA_CHECK_LAUNCH();
}

template <typename F, int HS>
static void flash_backward_launch(F* dinp, const F* dout, const F* inp, const F* out, const float* lse, int B, int T, int C, int NH,
                                  const AttentionOpts* o) {
    AttnScoreScale sc = attention_score_scale(o, HS);
    float alpha = o->scaling == ATTN_SCALING_QK_INWARD ? sc.sq * sc.sq : sc.alpha;
    bool vec = aligned16(inp) && aligned16(dout) && C % (16 / (int)sizeof(F)) == 0;
    float* D = (float*)scratch_reserve(flash_attention_scratch(), flash_attention_scratch_bytes(B, T, C, NH));
    size_t rows = (size_t)B * NH * T;
    KEEL_LAUNCH(flash_attention_rowdot_kernel<F>, ceil_div(rows, 8), 256, 0, MAIN_STREAM)(D, dout, out, B, T, C, NH);
    CUDA_CHECK_LAUNCH();
    size_t smem_kv = flash_dkdv_smem(HS, sizeof(F)), smem_q = flash_dq_smem(HS, sizeof(F));
    static bool optin_kv = false, optin_q = false;
    flash_smem_optin(flash_attention_dkdv_kernel<F, HS>, smem_kv, &optin_kv);
    flash_smem_optin(flash_attention_dq_kernel<F, HS>, smem_q, &optin_q);
    KEEL_LAUNCH(flash_attention_dkdv_kernel<F KEEL_COMMA HS>, dim3(ceil_div(T, FLASH_BC), B * NH), FLASH_THREADS, smem_kv, MAIN_STREAM)(
        dinp, dout, inp, lse, D, T, C, NH, *o, sc, alpha, vec);
    CUDA_CHECK_LAUNCH();
    KEEL_LAUNCH(flash_attention_dq_kernel<F KEEL_COMMA HS>, dim3(ceil_div(T, FLASH_BR), B * NH), FLASH_THREADS, smem_q, MAIN_STREAM)(
        dinp, dout, inp, lse, D, T, C, NH, *o, sc, alpha, vec);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
void flash_attention_forward(F* out, float* lse,  // (B,T,C), (B,NH,T)
                             const F* inp,        // (B,T,3C)
                             int B, int T, int C, int NH, const AttentionOpts* o) {
    int hs = C / NH;
    if (!flash_attention_supported(hs, sizeof(F)))
        keel_die("flash attention: head size %d with %zu-byte floats is not supported (hs 64 or 128, bf16/fp16); use the GEMM path", hs, sizeof(F));
    if ((size_t)B * NH * T == 0) return;
    if ((size_t)B * NH > 65535) keel_die("flash attention: B·NH = %zu head-batches exceed the grid's 65535 rows (gridDim.y)", (size_t)B * NH);
    if constexpr (sizeof(F) == 2) {
        if (hs == 64) flash_forward_launch<F, 64>(out, lse, inp, B, T, C, NH, o);
        else flash_forward_launch<F, 128>(out, lse, inp, B, T, C, NH, o);
    }
}

template <typename F>
void flash_attention_backward(F* dinp,                   // (B,T,3C) accumulated into
                              const F* dout,             // (B,T,C)
                              const F* inp, const F* out, const float* lse,  // (B,T,3C), (B,T,C), (B,NH,T)
                              int B, int T, int C, int NH, const AttentionOpts* o) {
    int hs = C / NH;
    if (!flash_attention_supported(hs, sizeof(F)))
        keel_die("flash attention: head size %d with %zu-byte floats is not supported (hs 64 or 128, bf16/fp16); use the GEMM path", hs, sizeof(F));
    if ((size_t)B * NH * T == 0) return;
    if ((size_t)B * NH > 65535) keel_die("flash attention: B·NH = %zu head-batches exceed the grid's 65535 rows (gridDim.y)", (size_t)B * NH);
    if constexpr (sizeof(F) == 2) {
        if (hs == 64) flash_backward_launch<F, 64>(dinp, dout, inp, out, lse, B, T, C, NH, o);
        else flash_backward_launch<F, 128>(dinp, dout, inp, out, lse, B, T, C, NH, o);
    }
}

}  // namespace keel_cuda
