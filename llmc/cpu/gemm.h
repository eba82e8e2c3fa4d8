// cpu/gemm.h — the fast fp32 matrix multiply under matmul_forward/backward: packed, cache-blocked,
// register-tiled, written with AVX-512 or AVX2 intrinsics (and a portable scalar fallback).
// Legend: M rows of C, NC_ columns of C, K the reduced dimension.
//   C[m,j] = chain over k ascending:  acc = C[m,j];  acc = fma(A(m,k), B(k,j), acc)
//   A(m,k) = a[m·rs_a + k·cs_a],  B(k,j) = b[k·rs_b + j·cs_b]   (any strides: transposes are free)
// Numerics — the one thing this file must not change (docs/internals.md#determinism): every element of C is one fused
// multiply-add chain in ascending k, started from the value C holds on entry. Vector width, tile
// shape, cache blocks and the thread split decide only *which* elements are computed together,
// never the order of any element's sum, so the AVX-512, AVX2 and scalar paths, every thread count,
// and the readable loops of cpu/matmul.h (matmul_*_reference) produce identical bits. Callers that
// want `out = bias + A·B` or `out = A·B` fill C with the bias or zeros first.
// Method (the Goto/BLIS scheme): C is cut into jobs of MC×NC; a job walks K in KC slices; each slice
// packs its MR-row panels of A and NR-column panels of B into contiguous buffers (the micro-kernel
// then reads both with unit stride, and zero padding makes every tile full), and an MR×NR tile of C
// is held in vector registers while the kernel streams the slice. A job's outputs belong to it
// alone, so threads take jobs dynamically without changing any result.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#ifdef __CUDACC__
#define GEMM_UNROLL _Pragma("unroll")
#else
#define GEMM_UNROLL _Pragma("GCC unroll 16")
#endif

// ---- one vector of floats: the only width-specific code ------------------------------------------
#if defined(__AVX512F__)
struct GemmVec {
    __m512 v;
    enum { W = 16 };
    static GemmVec load(const float* p) { return {_mm512_loadu_ps(p)}; }
    static GemmVec bcast(const float* p) { return {_mm512_set1_ps(*p)}; }
    void store(float* p) const { _mm512_storeu_ps(p, v); }
    static GemmVec fma(GemmVec a, GemmVec b, GemmVec c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
};
enum { GEMM_MR = 8, GEMM_NR = 48 };  // 24 accumulators + 3 B vectors + 1 broadcast of 32 zmm
static inline const char* gemm_isa() { return "AVX-512"; }
#elif defined(__AVX2__) && defined(__FMA__)
struct GemmVec {
    __m256 v;
    enum { W = 8 };
    static GemmVec load(const float* p) { return {_mm256_loadu_ps(p)}; }
    static GemmVec bcast(const float* p) { return {_mm256_broadcast_ss(p)}; }
    void store(float* p) const { _mm256_storeu_ps(p, v); }
    static GemmVec fma(GemmVec a, GemmVec b, GemmVec c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
};
enum { GEMM_MR = 6, GEMM_NR = 16 };  // 12 accumulators + 2 B vectors + 1 broadcast of 16 ymm
static inline const char* gemm_isa() { return "AVX2+FMA"; }
#else
struct GemmVec {  // portable: one lane; std::fma keeps the single rounding of the vector paths
    float v;
    enum { W = 1 };
    static GemmVec load(const float* p) { return {*p}; }
    static GemmVec bcast(const float* p) { return {*p}; }
    void store(float* p) const { *p = v; }
    static GemmVec fma(GemmVec a, GemmVec b, GemmVec c) { return {std::fma(a.v, b.v, c.v)}; }
};
enum { GEMM_MR = 4, GEMM_NR = 4 };
static inline const char* gemm_isa() { return "scalar"; }
#endif

// Block sizes, tuned on Zen 5 (48 KB L1, 1 MB L2) for the shapes of GPT-2 at B·T = 256 rows: a
// KC-deep B panel (24 KB at NR 48) stays in L1 while the kernel sweeps the A block from L2.
enum { GEMM_KC = 128,                  // K slice
       GEMM_MC = 32 * GEMM_MR,         // rows per job: the A block MC×KC (128 KB at MR 8)
       GEMM_NCB = 8 * GEMM_NR };       // columns per job: the B block KC×NC (192 KB at NR 48)

// The micro-kernel: C tile (MR×NR, row stride ldc) += packed A panel (kc×MR) · packed B panel (kc×NR).
static inline void gemm_kernel(int kc, const float* ap, const float* bp, float* c, size_t ldc) {
    enum { NV = GEMM_NR / GemmVec::W };
    GemmVec acc[GEMM_MR][NV];
GEMM_UNROLL
    for (int r = 0; r < GEMM_MR; r++)
GEMM_UNROLL
        for (int v = 0; v < NV; v++) acc[r][v] = GemmVec::load(c + r * ldc + v * GemmVec::W);
    for (int k = 0; k < kc; k++) {
        GemmVec b[NV];
GEMM_UNROLL
        for (int v = 0; v < NV; v++) b[v] = GemmVec::load(bp + (size_t)k * GEMM_NR + v * GemmVec::W);
GEMM_UNROLL
        for (int r = 0; r < GEMM_MR; r++) {
            GemmVec a = GemmVec::bcast(ap + (size_t)k * GEMM_MR + r);
GEMM_UNROLL
            for (int v = 0; v < NV; v++) acc[r][v] = GemmVec::fma(a, b[v], acc[r][v]);
        }
    }
GEMM_UNROLL
    for (int r = 0; r < GEMM_MR; r++)
GEMM_UNROLL
        for (int v = 0; v < NV; v++) acc[r][v].store(c + r * ldc + v * GemmVec::W);
}

struct GemmOperand {  // element (i,k) of an operand is p[i·rs + k·cs]
    const float* p;
    size_t rs, cs;
};

// Packs rows [m0, m0+mr) × k [k0, k0+kc) of A into MR-interleaved panels: ap[k·MR + r]; rows past
// mr are zero. B is packed the same way through its transpose (rows = columns of B).
static inline void gemm_pack(float* dst, GemmOperand x, int width, int m0, int m, int k0, int kc) {
    for (int p0 = 0; p0 < m; p0 += width) {
        int rows = std::min(width, m - p0);
        float* panel = dst + (size_t)p0 * kc;
        if (x.cs == 1) {  // rows contiguous in k: read each row straight, write with stride width
            for (int r = 0; r < rows; r++) {
                const float* src = x.p + (size_t)(m0 + p0 + r) * x.rs + k0;
                for (int k = 0; k < kc; k++) panel[(size_t)k * width + r] = src[k];
            }
        } else {  // columns contiguous: read `rows` consecutive elements per k
            for (int k = 0; k < kc; k++) {
                const float* src = x.p + (size_t)(k0 + k) * x.cs + (size_t)(m0 + p0) * x.rs;
                for (int r = 0; r < rows; r++) panel[(size_t)k * width + r] = src[(size_t)r * x.rs];
            }
        }
        for (int r = rows; r < width; r++)
            for (int k = 0; k < kc; k++) panel[(size_t)k * width + r] = 0;
    }
}

static inline int gemm_threads() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

// Per-thread packing buffers, allocated once at their largest size and freed when their thread
// ends (OpenMP retires threads when the thread count drops: LeakSanitizer, test/sanitize.sh).
struct GemmBuffers {
    float* buf[2] = {nullptr, nullptr};
    ~GemmBuffers() { free(buf[0]); free(buf[1]); }
};
static inline float* gemm_buffer(int which, size_t floats) {
    static thread_local GemmBuffers buffers;
    float** buf = buffers.buf;
    if (!buf[which]) {
        void* p = nullptr;
        if (posix_memalign(&p, 64, floats * sizeof(float)) != 0) {
            fprintf(stderr, "error: out of memory allocating the matmul packing buffer (%zu bytes)\n", floats * sizeof(float));
            exit(1);  // KEEL_EXIT_RUNTIME (common.h is not included by this kernel header)
        }
        buf[which] = (float*)p;
    }
    return buf[which];
}

// C (M×N, row stride ldc) += A (M×K) · B (K×N), B given as its transpose operand bt: B(k,j) = bt(j,k).
static inline void gemm_accumulate(float* c, size_t ldc, GemmOperand a, GemmOperand bt, int M, int N, int K) {
    if (M <= 0 || N <= 0) return;
    // Jobs: at least two per thread where the shape allows, by narrowing the blocks (a skinny C,
    // such as the classifier's dinp at small C, would otherwise be one job on one thread).
    int mb = GEMM_MC, nb = GEMM_NCB, threads = gemm_threads();
    auto jobs = [&] { return ((M + mb - 1) / mb) * ((N + nb - 1) / nb); };
    while (jobs() < 2 * threads) {
        if (nb > GEMM_NR) nb = (nb / 2 + GEMM_NR - 1) / GEMM_NR * GEMM_NR;
        else if (mb > GEMM_MR) mb = (mb / 2 + GEMM_MR - 1) / GEMM_MR * GEMM_MR;
        else break;
    }
    int njobs = (N + nb - 1) / nb;
#pragma omp parallel for schedule(dynamic, 1)
    for (int job = 0; job < jobs(); job++) {
        int m0 = (job / njobs) * mb, n0 = (job % njobs) * nb;
        int mc = std::min(mb, M - m0), nc = std::min(nb, N - n0);
        int mc_pad = (mc + GEMM_MR - 1) / GEMM_MR * GEMM_MR, nc_pad = (nc + GEMM_NR - 1) / GEMM_NR * GEMM_NR;
        float* ap = gemm_buffer(0, (size_t)GEMM_MC * GEMM_KC);
        float* bp = gemm_buffer(1, (size_t)GEMM_NCB * GEMM_KC);
        for (int k0 = 0; k0 < K; k0 += GEMM_KC) {  // ascending slices: the chain stays in k order
            int kc = std::min((int)GEMM_KC, K - k0);
            gemm_pack(ap, a, GEMM_MR, m0, mc, k0, kc);
            gemm_pack(bp, bt, GEMM_NR, n0, nc, k0, kc);
            for (int j = 0; j < nc_pad; j += GEMM_NR)
                for (int i = 0; i < mc_pad; i += GEMM_MR) {
                    float* tile = c + (size_t)(m0 + i) * ldc + n0 + j;
                    int rows = std::min((int)GEMM_MR, mc - i), cols = std::min((int)GEMM_NR, nc - j);
                    if (rows == GEMM_MR && cols == GEMM_NR) {
                        gemm_kernel(kc, ap + (size_t)i * kc, bp + (size_t)j * kc, tile, ldc);
                    } else {  // an edge tile: run it in a full-size scratch tile, copy the valid part
                        alignas(64) float t[GEMM_MR * GEMM_NR] = {};
                        for (int r = 0; r < rows; r++) memcpy(t + r * GEMM_NR, tile + r * ldc, cols * sizeof(float));
                        gemm_kernel(kc, ap + (size_t)i * kc, bp + (size_t)j * kc, t, GEMM_NR);
                        for (int r = 0; r < rows; r++) memcpy(tile + r * ldc, t + r * GEMM_NR, cols * sizeof(float));
                    }
                }
        }
    }
}
