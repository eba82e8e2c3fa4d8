// cublasLt.h (emulation) — the part of cuBLASLt keel's matmul (llmc/cuda/matmul.cuh) uses, computed
// with plain CPU loops. Strict on purpose: a descriptor attribute, epilogue, data type or compute
// type keel does not use is refused with CUBLAS_STATUS_NOT_SUPPORTED and a message, so the shim
// cannot silently compute something other than what the real library would.
//
// Semantics implemented (column-major, as cuBLASLt):
//   r = alpha·op(A)·op(B) + beta·C, in fp32; then by CUBLASLT_MATMUL_DESC_EPILOGUE:
//     DEFAULT        D = r
//     BIAS           D = r + bias[i] on row i
//     GELU_AUX_BIAS  s = r + bias[i];  aux[i + j·aux_ld] = s rounded to D's type;  D = gelu(s), with
//                    GeLU applied to the fp32 s before D's rounding (one rounding, not two)
//     DGELU          D = r · gelu'(aux[i + j·aux_ld]), aux read as D's type (the pre-activation the
//                    forward stored)
//   gelu is the tanh approximation, 0.5·s·(1 + tanh(√(2/π)·(s + 0.044715·s³))) — GPT-2's GeLU, and
//   the one cuBLASLt's GELU epilogues compute (PyTorch's torch._addmm_activation uses them for
//   gelu(approximate='tanh')); gelu' is its exact derivative. The aux buffer (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER)
//   has D's type (keel never sets CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE) and its leading
//   dimension CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, which the library documents as divisible by 8
//   and no less than D's rows: anything else is CUBLAS_STATUS_INVALID_VALUE, as is a missing aux
//   pointer or bias, an aux pointer or bias the epilogue does not read, or a GeLU epilogue with batches.
//   strided batches (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT / _STRIDED_BATCH_OFFSET on every layout):
//   product i reads A + i·strideA, B + i·strideB, C + i·strideC and writes D + i·strideD (elements);
//   all four layouts must carry the same batch count (an epilogue other than DEFAULT is refused
//   with batches)
//   op(X) = X or Xᵀ (CUBLASLT_MATMUL_DESC_TRANSA/B); A, B, C, D fp32 or bf16 (read as float,
//   D rounded to its type); products summed in fp32 in ascending k (the GPU's order differs:
//   tests compare with a tolerance). C may be D (in-place accumulate).
// An algorithm (cublasLtMatmulAlgoGetHeuristic) remembers what it was chosen for — the operands'
// alignments, the epilogue, and the alignments of the bias and aux pointers the descriptor held —
// and cublasLtMatmul refuses a call that differs: the real library's algorithm may not implement
// another epilogue or fault on a less aligned pointer, so a caller's algorithm cache must key on them.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda_runtime.h"

typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_INVALID_VALUE = 7,
               CUBLAS_STATUS_NOT_SUPPORTED = 15 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType_t;
typedef cudaDataType_t cudaDataType;
// (the values of the real cublasLt.h: GELU_AUX_BIAS = GELU 32 | AUX 128 | BIAS 4, DGELU = 64 | 128)
typedef enum { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
               CUBLASLT_EPILOGUE_DGELU = 192 } cublasLtEpilogue_t;
typedef enum { CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
               CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
               CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12 } cublasLtMatmulDescAttributes_t;
typedef enum { CUBLASLT_REDUCTION_SCHEME_NONE = 0, CUBLASLT_REDUCTION_SCHEME_INPLACE = 1, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2,
               CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4, CUBLASLT_REDUCTION_SCHEME_MASK = 7 } cublasLtReductionScheme_t;
typedef enum { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8 } cublasLtMatmulPreferenceAttributes_t;
typedef enum { CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6 } cublasLtMatrixLayoutAttribute_t;

struct emu_lt_handle { int unused; };
struct emu_lt_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    void* aux = nullptr;   // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER
    int64_t aux_ld = 0;    // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, elements
};
struct emu_lt_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch = 1;     // CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT
    int64_t stride = 0;    // CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, in elements
};
struct emu_lt_pref {
    uint64_t workspace = 0;
    uint32_t align[4] = {256, 256, 256, 256};  // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES (the library's default: 256)
    uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;  // the library's default: every split-K reduction scheme
};
typedef emu_lt_handle* cublasLtHandle_t;
typedef emu_lt_desc* cublasLtMatmulDesc_t;
typedef emu_lt_layout* cublasLtMatrixLayout_t;
typedef emu_lt_pref* cublasLtMatmulPreference_t;
struct cublasLtMatmulAlgo_t { uint64_t data[8]; };
struct cublasLtMatmulHeuristicResult_t {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
};

inline cublasStatus_t emu_lt_refuse(const char* what, long long value) {
    fprintf(stderr, "cuBLASLt emulation: %s %lld is not implemented (keel does not use it)\n", what, value);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

inline size_t cublasLtGetVersion() { return 0; }
inline const char* cublasLtGetStatusString(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        default: return "CUBLAS_STATUS_NOT_INITIALIZED";
    }
}
inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = new emu_lt_handle{0}; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }

inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (compute != CUBLAS_COMPUTE_32F) return emu_lt_refuse("compute type", compute);
    if (scale != CUDA_R_32F) return emu_lt_refuse("scale type", scale);
    *d = new emu_lt_desc;
    (*d)->compute = compute;
    (*d)->scale = scale;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t size) {
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_TRANSA:
        case CUBLASLT_MATMUL_DESC_TRANSB: {
            if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
            int32_t op;
            memcpy(&op, buf, sizeof op);
            if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return emu_lt_refuse("transpose op", op);
            (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->transa : d->transb) = (cublasOperation_t)op;
            return CUBLAS_STATUS_SUCCESS;
        }
        case CUBLASLT_MATMUL_DESC_EPILOGUE: {
            if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
            uint32_t e;
            memcpy(&e, buf, sizeof e);
            if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && e != CUBLASLT_EPILOGUE_GELU_AUX_BIAS &&
                e != CUBLASLT_EPILOGUE_DGELU)
                return emu_lt_refuse("epilogue", e);
            d->epilogue = (cublasLtEpilogue_t)e;
            return CUBLAS_STATUS_SUCCESS;
        }
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
            if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
            memcpy(&d->bias, buf, sizeof(void*));
            return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
            if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
            memcpy(&d->aux, buf, sizeof(void*));
            return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
            if (size != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
            memcpy(&d->aux_ld, buf, sizeof(int64_t));
            return CUBLAS_STATUS_SUCCESS;
    }
    return emu_lt_refuse("matmul descriptor attribute", attr);
}

inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld) {
    if (type != CUDA_R_32F && type != CUDA_R_16BF && type != CUDA_R_16F) return emu_lt_refuse("matrix data type", type);
    if (ld < (int64_t)rows) return CUBLAS_STATUS_INVALID_VALUE;
    *l = new emu_lt_layout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                       size_t size) {
    if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) {
        if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&l->batch, buf, sizeof(int32_t));
        return l->batch >= 1 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    }
    if (attr == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) {
        if (size != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&l->stride, buf, sizeof(int64_t));
        return CUBLAS_STATUS_SUCCESS;
    }
    return emu_lt_refuse("matrix layout attribute", attr);
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }

inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) { *p = new emu_lt_pref; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
                                                           const void* buf, size_t size) {
    if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
        if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, sizeof(uint32_t));
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr == CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK) {
        if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->reduction_mask, buf, sizeof(uint32_t));
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES || size != sizeof(uint64_t)) return emu_lt_refuse("preference attribute", attr);
    memcpy(&p->workspace, buf, sizeof(uint64_t));
    return CUBLAS_STATUS_SUCCESS;
}
// A pointer's alignment in bytes, up to 256 (what the library reads off a bias or aux pointer's value).
inline uint64_t emu_lt_pointer_alignment(const void* p) {
    uint64_t a = (uint64_t)(uintptr_t)p, bytes = 1;
    while (bytes < 256 && a % (2 * bytes) == 0) bytes *= 2;
    return bytes;
}
// What an algorithm remembers in cublasLtMatmulAlgo_t::data (cublasLtMatmul refuses a call that differs).
enum { EMU_ALGO_ALIGN_A = 0, EMU_ALGO_ALIGN_D = 3, EMU_ALGO_EPILOGUE = 4, EMU_ALGO_ALIGN_BIAS = 5, EMU_ALGO_ALIGN_AUX = 6, EMU_ALGO_WORKSPACE = 7 };

inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                     cublasLtMatrixLayout_t, cublasLtMatrixLayout_t ldd, cublasLtMatmulPreference_t pref, int requested,
                                                     cublasLtMatmulHeuristicResult_t* results, int* returned) {
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    // A split-K reduction in the output type (OUTPUT_TYPE, or INPLACE in the output buffer) rounds
    // every partial sum to bf16/fp16: on an H100 the heuristic picks one for small products, and a
    // result that cancels comes out wrong by a 16-bit rounding of the terms. keel allows only
    // reductions in the compute type; the emulation (which never splits) refuses the query otherwise.
    if (ldd->type != CUDA_R_32F && (pref->reduction_mask & (CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE))) {
        fprintf(stderr, "cuBLASLt emulation: a 16-bit output with a split-K reduction scheme in the output type allowed (mask %u)\n", pref->reduction_mask);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    memset(results, 0, sizeof *results);
    // the algorithm remembers the alignments it was chosen for: a matmul on less aligned pointers is
    // refused, as the real library may fault on it (cublasLtMatmul below); and the epilogue
    for (int i = 0; i < 4; i++) results->algo.data[EMU_ALGO_ALIGN_A + i] = pref->align[i];
    results->algo.data[EMU_ALGO_EPILOGUE] = d->epilogue;
    results->algo.data[EMU_ALGO_ALIGN_BIAS] = d->bias ? emu_lt_pointer_alignment(d->bias) : 0;
    results->algo.data[EMU_ALGO_ALIGN_AUX] = d->aux ? emu_lt_pointer_alignment(d->aux) : 0;
    // a real algorithm may need workspace up to the preference's maximum (split-K partials): the
    // emulated one asks for all of it up to 1 MiB, which cublasLtMatmul must then be given
    results->workspaceSize = pref->workspace < ((size_t)1 << 20) ? pref->workspace : ((size_t)1 << 20);
    results->algo.data[EMU_ALGO_WORKSPACE] = results->workspaceSize;
    results->state = CUBLAS_STATUS_SUCCESS;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

inline float emu_lt_load(const void* base, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_32F) return ((const float*)base)[i];
    if (t == CUDA_R_16F) return __half2float(((const __half*)base)[i]);
    return __bfloat162float(((const __nv_bfloat16*)base)[i]);
}
inline void emu_lt_store(void* base, cudaDataType_t t, size_t i, float v) {
    if (t == CUDA_R_32F) ((float*)base)[i] = v;
    else if (t == CUDA_R_16F) ((__half*)base)[i] = __float2half(v);
    else ((__nv_bfloat16*)base)[i] = __float2bfloat16(v);
}

// The GeLU of the GELU epilogues, tanh approximation, in fp32; and its derivative (DGELU).
inline float emu_lt_gelu(float s) {
    const float k = 0.7978845608028654f;  // √(2/π)
    return 0.5f * s * (1.0f + tanhf(k * (s + 0.044715f * s * s * s)));
}
inline float emu_lt_gelu_derivative(float s) {
    const float k = 0.7978845608028654f;
    float th = tanhf(k * (s + 0.044715f * s * s * s));
    return 0.5f * (1.0f + th) + 0.5f * s * (1.0f - th * th) * k * (1.0f + 3.0f * 0.044715f * s * s);
}

// The epilogue's own operands against the library's documented rules (D has `rows` rows).
inline cublasStatus_t emu_lt_check_epilogue(cublasLtMatmulDesc_t d, uint64_t rows, int32_t batch) {
    bool bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool aux = d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d->epilogue == CUBLASLT_EPILOGUE_DGELU;
    if (bias != (d->bias != nullptr)) {
        fprintf(stderr, "cuBLASLt emulation: epilogue %d %s a bias pointer\n", (int)d->epilogue, bias ? "needs" : "does not read");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (aux != (d->aux != nullptr)) {
        fprintf(stderr, "cuBLASLt emulation: epilogue %d %s an aux pointer\n", (int)d->epilogue, aux ? "needs" : "does not read");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (aux && (d->aux_ld % 8 != 0 || d->aux_ld < (int64_t)rows)) {
        fprintf(stderr, "cuBLASLt emulation: CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD %lld must be divisible by 8 and at least D's %llu rows\n",
                (long long)d->aux_ld, (unsigned long long)rows);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (batch > 1 && d->epilogue != CUBLASLT_EPILOGUE_DEFAULT) return emu_lt_refuse("an epilogue with batches, epilogue", d->epilogue);
    return CUBLAS_STATUS_SUCCESS;
}

// One column tile's products: acc[jj·m + i] = Σ_p a[p·m + i]·b[jj·k + p] for the tile's nj ≤ EMU_LT_NJ
// columns, each product rounded to fp32 and added in ascending p (`acc += a·b`, the build's
// -ffp-contract=off keeping the two roundings): the scalar loop's order, so the same bits whatever
// the blocking. Register-blocked: a strip of 2·(vector width) rows by 4 columns is held in 8 vector
// accumulators while p runs (one load of a's strip row and 4 broadcasts of b per p); p goes in chunks
// of EMU_LT_KC, the accumulators parked in acc between chunks (exact: fp32 stored and loaded back), so
// that a strip's chunk of a, read once from memory, serves all the tile's columns from the L1 cache
// however long k is. On x86 the same code is also compiled for AVX2 (8-wide) and picked at run time
// where the CPU has it; elsewhere 4-wide; the rows past the last whole strip, scalar.
static const uint64_t EMU_LT_NJ = 16, EMU_LT_KC = 256;
typedef float emu_v4 __attribute__((vector_size(16)));
typedef float emu_v8 __attribute__((vector_size(32)));
// rows i0..i0 + 2·lanes(V) - 1, columns j0..j0 + NC - 1 of acc, the products of p0 ≤ p < p1 added
// (p0 = 0: from zero). (Always inlined: in emu_lt_tile_avx2 they are compiled for AVX2 with it.)
template <typename V, int NC>
__attribute__((always_inline)) inline void emu_lt_strip(float* acc, const float* a, const float* b, uint64_t m, uint64_t k, uint64_t i0,
                                                        uint64_t j0, uint64_t p0, uint64_t p1) {
    constexpr uint64_t W = sizeof(V) / sizeof(float);
    V c[NC][2] = {};
    if (p0 > 0)
        for (int jj = 0; jj < NC; jj++) {
            memcpy(&c[jj][0], acc + (j0 + jj) * m + i0, sizeof(V));
            memcpy(&c[jj][1], acc + (j0 + jj) * m + i0 + W, sizeof(V));
        }
    const float* bj = b + j0 * k;
    for (uint64_t p = p0; p < p1; p++) {
        V a0, a1;
        memcpy(&a0, a + p * m + i0, sizeof(V));
        memcpy(&a1, a + p * m + i0 + W, sizeof(V));
        for (int jj = 0; jj < NC; jj++) {
            float bv = bj[jj * k + p];
            c[jj][0] += a0 * bv;
            c[jj][1] += a1 * bv;
        }
    }
    for (int jj = 0; jj < NC; jj++) {
        memcpy(acc + (j0 + jj) * m + i0, &c[jj][0], sizeof(V));
        memcpy(acc + (j0 + jj) * m + i0 + W, &c[jj][1], sizeof(V));
    }
}
template <typename V>
__attribute__((always_inline)) inline void emu_lt_tile_v(float* acc, const float* a, const float* b, uint64_t m, uint64_t k, uint64_t nj) {
    constexpr uint64_t R = 2 * sizeof(V) / sizeof(float);  // rows per strip
    uint64_t strips_end = m / R * R;
    for (uint64_t p0 = 0; p0 < k; p0 += EMU_LT_KC) {
        uint64_t p1 = k - p0 < EMU_LT_KC ? k : p0 + EMU_LT_KC;
        for (uint64_t i0 = 0; i0 < strips_end; i0 += R) {
            uint64_t j0 = 0;
            for (; j0 + 4 <= nj; j0 += 4) emu_lt_strip<V, 4>(acc, a, b, m, k, i0, j0, p0, p1);
            for (; j0 < nj; j0++) emu_lt_strip<V, 1>(acc, a, b, m, k, i0, j0, p0, p1);
        }
    }
    for (uint64_t i0 = strips_end; i0 < m; i0++)  // the rows past the last whole strip
        for (uint64_t jj = 0; jj < nj; jj++) {
            float s = 0.0f;
            for (uint64_t p = 0; p < k; p++) s += a[p * m + i0] * b[jj * k + p];
            acc[jj * m + i0] = s;
        }
}
#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2"))) inline void emu_lt_tile_avx2(float* acc, const float* a, const float* b, uint64_t m, uint64_t k, uint64_t nj) {
    emu_lt_tile_v<emu_v8>(acc, a, b, m, k, nj);
}
#endif
inline void emu_lt_tile(float* acc, const float* a, const float* b, uint64_t m, uint64_t k, uint64_t nj) {
#if defined(__x86_64__) || defined(__i386__)
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (avx2) return emu_lt_tile_avx2(acc, a, b, m, k, nj);
#endif
    emu_lt_tile_v<emu_v4>(acc, a, b, m, k, nj);
}

// D = alpha·op(A)·op(B) + beta·C and the epilogue, m×n×k from the layouts (validated by cublasLtMatmul).
// Per product (batch entry): op(A) is converted once to fp32 with k rows of m (column i of a row
// holds op(A)[i][p]), then columns of op(B) go EMU_LT_NJ at a time through emu_lt_tile.
inline void emu_lt_compute(const emu_lt_desc* d, float alpha, const void* A, const emu_lt_layout* la, const void* B, const emu_lt_layout* lb,
                           float beta, const void* C, const emu_lt_layout* lc, void* D, const emu_lt_layout* ld) {
    uint64_t m = d->transa == CUBLAS_OP_N ? la->rows : la->cols, k = d->transa == CUBLAS_OP_N ? la->cols : la->rows;
    uint64_t n = d->transb == CUBLAS_OP_N ? lb->cols : lb->rows;
    int32_t batch = ld->batch;
    bool ta = d->transa == CUBLAS_OP_T, tb = d->transb == CUBLAS_OP_T;
    auto elem = [](const void* base, cudaDataType_t t, int64_t off) {
        size_t sz = t == CUDA_R_32F ? 4 : 2;
        return (const void*)((const char*)base + off * (int64_t)sz);
    };
    std::vector<float> a(m * k);
    int64_t tiles = (int64_t)((n + EMU_LT_NJ - 1) / EMU_LT_NJ);
    for (int32_t bi = 0; bi < batch; bi++) {
        const void* Ab = elem(A, la->type, bi * la->stride);
        const void* Bb = elem(B, lb->type, bi * lb->stride);
        const void* Cb = elem(C, lc->type, bi * lc->stride);
        void* Db = (void*)elem(D, ld->type, bi * ld->stride);
        for (uint64_t p = 0; p < k; p++)
            for (uint64_t i = 0; i < m; i++) a[p * m + i] = emu_lt_load(Ab, la->type, ta ? i * la->ld + p : p * la->ld + i);
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < tiles; t++) {
            uint64_t j0 = (uint64_t)t * EMU_LT_NJ, nj = n - j0 < EMU_LT_NJ ? n - j0 : EMU_LT_NJ;
            std::vector<float> b(nj * k), acc(nj * m);
            for (uint64_t jj = 0; jj < nj; jj++)
                for (uint64_t p = 0; p < k; p++) b[jj * k + p] = emu_lt_load(Bb, lb->type, tb ? p * lb->ld + j0 + jj : (j0 + jj) * lb->ld + p);
            emu_lt_tile(acc.data(), a.data(), b.data(), m, k, nj);
            for (uint64_t jj = 0; jj < nj; jj++) {
                uint64_t j = j0 + jj;
                for (uint64_t i = 0; i < m; i++) {
                    float r = alpha * acc[jj * m + i];
                    if (beta != 0.0f) r += beta * emu_lt_load(Cb, lc->type, j * lc->ld + i);
                    if (d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
                        r += emu_lt_load(d->bias, ld->type, i);
                    size_t aux_i = (size_t)j * d->aux_ld + i;  // (no batches with an aux epilogue)
                    if (d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
                        emu_lt_store(d->aux, ld->type, aux_i, r);  // the pre-activation, rounded to D's type
                        r = emu_lt_gelu(r);                         // GeLU of the unrounded fp32 value
                    } else if (d->epilogue == CUBLASLT_EPILOGUE_DGELU) {
                        r *= emu_lt_gelu_derivative(emu_lt_load(d->aux, ld->type, aux_i));
                    }
                    emu_lt_store(Db, ld->type, j * ld->ld + i, r);
                }
            }
        }
    }
}

// What the real library refuses or may fault on, whatever the algorithm: an operand not aligned to
// its element type; an epilogue's bias or aux pointer not 16-byte aligned (its kernels read them in
// 16-byte vectors: keel's call sites fall back to a separate bias kernel instead, matmul.cuh); a
// workspace smaller than the algorithm asked for, or missing.
inline cublasStatus_t emu_lt_check_pointers(cublasLtMatmulDesc_t d, const void* const ptrs[4], const cublasLtMatrixLayout_t lays[4],
                                            const cublasLtMatmulAlgo_t* algo, const void* workspace, size_t workspace_bytes) {
    for (int i = 0; i < 4; i++) {
        size_t elem = lays[i]->type == CUDA_R_32F ? 4 : 2;
        if ((uintptr_t)ptrs[i] % elem != 0) {
            fprintf(stderr, "cuBLASLt emulation: operand %c is not aligned to its %zu-byte element type\n", "ABCD"[i], elem);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    const void* eptrs[2] = {d->bias, d->aux};
    for (int i = 0; i < 2; i++)
        if (eptrs[i] && (uintptr_t)eptrs[i] % 16 != 0) {
            fprintf(stderr, "cuBLASLt emulation: the epilogue's %s pointer is not 16-byte aligned\n", i ? "aux" : "bias");
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    uint64_t need = algo ? algo->data[EMU_ALGO_WORKSPACE] : 0;
    if (workspace_bytes < need || (need && !workspace)) {
        fprintf(stderr, "cuBLASLt emulation: the algorithm needs %llu bytes of workspace, the call gives %zu%s\n", (unsigned long long)need,
                workspace_bytes, workspace ? "" : " (and no pointer)");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}
// The epilogues keel uses exist for products whose C/D type is the inputs' type.
inline cublasStatus_t emu_lt_check_epilogue_types(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t ld) {
    if (d->epilogue == CUBLASLT_EPILOGUE_DEFAULT || ld->type == la->type) return CUBLAS_STATUS_SUCCESS;
    fprintf(stderr, "cuBLASLt emulation: epilogue %d with inputs of type %d and output of type %d is not a combination the library offers\n",
            (int)d->epilogue, (int)la->type, (int)ld->type);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

// The call against what its algorithm was chosen for (cublasLtMatmulAlgoGetHeuristic above).
inline cublasStatus_t emu_lt_check_algo(cublasLtMatmulDesc_t d, const void* const ptrs[4], const cublasLtMatmulAlgo_t* algo) {
    for (int i = 0; algo && i < 4; i++)
        if (algo->data[i] && (uintptr_t)ptrs[i] % algo->data[i] != 0) {
            fprintf(stderr, "cuBLASLt emulation: operand %c is not %llu-byte aligned, as the algorithm was chosen for\n", "ABCD"[i],
                    (unsigned long long)algo->data[i]);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    if (algo && algo->data[EMU_ALGO_EPILOGUE] != (uint64_t)d->epilogue) {
        fprintf(stderr, "cuBLASLt emulation: the algorithm was chosen for epilogue %llu, not %d\n",
                (unsigned long long)algo->data[EMU_ALGO_EPILOGUE], (int)d->epilogue);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const void* eptrs[2] = {d->bias, d->aux};
    for (int i = 0; algo && i < 2; i++) {
        uint64_t a = algo->data[EMU_ALGO_ALIGN_BIAS + i];
        if (eptrs[i] && a && (uintptr_t)eptrs[i] % a != 0) {
            fprintf(stderr, "cuBLASLt emulation: the %s pointer is not %llu-byte aligned, as the algorithm was chosen for\n",
                    i ? "aux" : "bias", (unsigned long long)a);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha_p, const void* A, cublasLtMatrixLayout_t la,
                                     const void* B, cublasLtMatrixLayout_t lb, const void* beta_p, const void* C, cublasLtMatrixLayout_t lc,
                                     void* D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                     cudaStream_t stream) {
    const void* ptrs[4] = {A, B, C, D};
    const cublasLtMatrixLayout_t lays[4] = {la, lb, lc, ld};
    cublasStatus_t ok = emu_lt_check_pointers(d, ptrs, lays, algo, workspace, workspace_bytes);
    if (ok == CUBLAS_STATUS_SUCCESS) ok = emu_lt_check_epilogue_types(d, la, ld);
    if (ok == CUBLAS_STATUS_SUCCESS) ok = emu_lt_check_algo(d, ptrs, algo);
    if (ok != CUBLAS_STATUS_SUCCESS) return ok;
    // op(A) is m×k, op(B) is k×n, C and D are m×n
    uint64_t m = d->transa == CUBLAS_OP_N ? la->rows : la->cols, k = d->transa == CUBLAS_OP_N ? la->cols : la->rows;
    uint64_t kb = d->transb == CUBLAS_OP_N ? lb->rows : lb->cols, n = d->transb == CUBLAS_OP_N ? lb->cols : lb->rows;
    if (k != kb || ld->rows != m || ld->cols != n || lc->rows != m || lc->cols != n) {
        fprintf(stderr, "cuBLASLt emulation: inconsistent shapes (op(A) %llux%llu, op(B) %llux%llu, D %llux%llu)\n",
                (unsigned long long)m, (unsigned long long)k, (unsigned long long)kb, (unsigned long long)n,
                (unsigned long long)ld->rows, (unsigned long long)ld->cols);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (C != D && lc->ld != ld->ld) return emu_lt_refuse("a C layout other than D's, leading dimension", lc->ld);
    // The type combinations keel may use (of cuBLASLt's table for CUBLAS_COMPUTE_32F): A and B of one
    // type; C and D of that type or fp32 (a bf16/fp16 product accumulated into fp32 gradients).
    if (la->type != lb->type) return emu_lt_refuse("A and B of different types, B type", lb->type);
    if (lc->type != ld->type) return emu_lt_refuse("C and D of different types, D type", ld->type);
    if (ld->type != la->type && ld->type != CUDA_R_32F) return emu_lt_refuse("D type with these inputs", ld->type);
    int32_t batch = ld->batch;
    if (la->batch != batch || lb->batch != batch || lc->batch != batch)
        return emu_lt_refuse("layouts with different batch counts, D's", batch);
    cublasStatus_t epilogue_ok = emu_lt_check_epilogue(d, m, batch);
    if (epilogue_ok != CUBLAS_STATUS_SUCCESS) return epilogue_ok;
    if (C != D && lc->stride != ld->stride) return emu_lt_refuse("a C batch stride other than D's", lc->stride);
    // the step profile (emu_core.h): bf16/fp16 inputs run on tensor cores; fp32 under COMPUTE_32F does not
    emu::profile_gemm(2 * m * n * k * (uint64_t)batch, la->type != CUDA_R_32F);
    float alpha, beta;
    memcpy(&alpha, alpha_p, 4);
    memcpy(&beta, beta_p, 4);
    // runs in its place on the stream (KEEL_EMU_STREAMS): the descriptors are copied, as the caller
    // may destroy them as soon as this returns
    emu_lt_desc dd = *d;
    emu_lt_layout a_ = *la, b_ = *lb, c_ = *lc, d_ = *ld;
    emu::stream_submit(stream, [=] { emu_lt_compute(&dd, alpha, A, &a_, B, &b_, beta, C, &c_, D, &d_); });
    return CUBLAS_STATUS_SUCCESS;
}
