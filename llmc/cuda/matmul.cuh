// cuda/matmul.cuh — the linear layer through cuBLASLt; the contract of cpu/matmul.h:
//   forward:  out = inp·Wᵀ + bias                      out (N,OC), inp (N,C), weight (OC,C), bias (OC) or null
//   backward: dinp += dout·W;  dweight += doutᵀ·inp;  dbias += Σ_n dout[n,:]     (accumulated into)
// Legend: N rows (B*T), C input channels, OC output channels.
//
// Layouts: keel's buffers are row-major, cuBLASLt is column-major, so a row-major (R,K) matrix is
// handed over as the column-major (K,R) matrix with leading dimension K — its transpose, for free:
//   forward   outᵀ (OC,N)  = op(W as (C,OC), T) · inpᵀ (C,N)          bias epilogue on OC
//   dinp      dinpᵀ (C,N) += W as (C,OC) · doutᵀ (OC,N)                beta = 1
//   dweight   dWᵀ (C,OC)  += inpᵀ (C,N) · op(doutᵀ as (OC,N), T)       beta = 1
// Numerics: fp32 accumulation (CUBLAS_COMPUTE_32F) for fp32, bf16 and fp16 storage; dweight and
// dbias are fp32 whatever the storage type (DESIGN §3: gradients accumulate in fp32). cuBLASLt picks one
// algorithm per shape from its heuristic and is deterministic for it on a given GPU and library
// version (no split-K reduction with atomics is requested: the workspace is fixed and the heuristic
// is asked for the first result only). dbias is keel's own kernel: each thread owns one output
// channel and sums the N rows in order (no atomics).
#pragma once
#include <cublasLt.h>

#include "llmc/cuda/common.cuh"

#define CUBLAS_CHECK(call)                                                                                  \
    do {                                                                                                    \
        cublasStatus_t cublas_status_ = (call);                                                             \
        if (cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                        \
            keel_die("cuBLASLt call %s failed at %s:%d: %s", #call, __FILE__, __LINE__, cublasLtGetStatusString(cublas_status_)); \
    } while (0)

namespace keel_cuda {

template <typename F> struct cuda_type;
template <> struct cuda_type<float> { static const cudaDataType_t value = CUDA_R_32F; };
template <> struct cuda_type<__nv_bfloat16> { static const cudaDataType_t value = CUDA_R_16BF; };
template <> struct cuda_type<__half> { static const cudaDataType_t value = CUDA_R_16F; };

// The library handle and its workspace, created on first use (one GPU per process).
struct LtContext {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 32u << 20;  // what Hopper's kernels ask for at most
};
static inline LtContext* lt_context() {
    static LtContext ctx;
    if (!ctx.handle) {
        CUBLAS_CHECK(cublasLtCreate(&ctx.handle));
        CUDA_CHECK(cudaMalloc(&ctx.workspace, ctx.workspace_bytes));
    }
    return &ctx;
}

// D (m,n) = alpha·op(A)·op(B) + beta·D [+ bias], column-major. A and B are of the storage type F,
// D of type Out (F, or fp32 for the weight gradients: bf16 × bf16 → fp32 accumulated into fp32 is
// one of cuBLASLt's supported type combinations); the bias, if any, is of D's type.
template <typename Out, typename F>
static void lt_matmul(Out* d, const F* a, const F* b, const Out* bias, int m, int n, int k, bool trans_a, bool trans_b, float beta) {
    LtContext* ctx = lt_context();
    cudaDataType_t t = cuda_type<F>::value, td = cuda_type<Out>::value;
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t opa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (bias) {
        uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    cublasLtMatrixLayout_t la, lb, ld;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, t, trans_a ? k : m, trans_a ? m : k, trans_a ? k : m));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, t, trans_b ? n : k, trans_b ? k : n, trans_b ? n : k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, td, m, n, m));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = ctx->workspace_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx->handle, desc, la, lb, ld, ld, pref, 1, &heur, &found));
    if (found == 0) keel_die("cuBLASLt has no algorithm for a %dx%dx%d matmul (trans %d%d, bias %d)", m, n, k, trans_a, trans_b, bias != nullptr);
    float alpha = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(ctx->handle, desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &heur.algo, ctx->workspace,
                                ctx->workspace_bytes, MAIN_STREAM));
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
}

// dbias[o] += Σ_n dout[n,o], n ascending: one thread per output channel.
template <typename F> __global__ void matmul_dbias_kernel(float* dbias, const F* dout, int N, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float sum = 0.0f;
    for (int n = 0; n < N; n++) sum += to_f32(dout[(size_t)n * OC + o]);
    dbias[o] += sum;
}

template <typename F> void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC) {
    if (N == 0 || OC == 0) return;
    lt_matmul(out, weight, inp, bias, OC, N, C, true, false, 0.0f);
}

template <typename F>
void matmul_backward(F* dinp, float* dweight, float* dbias, const F* dout, const F* inp, const F* weight, int N, int C, int OC) {
    if (N == 0 || OC == 0) return;
    if (dinp) lt_matmul(dinp, weight, dout, (const F*)nullptr, C, N, OC, false, false, 1.0f);
    if (dweight) lt_matmul(dweight, inp, dout, (const float*)nullptr, C, OC, N, false, true, 1.0f);
    if (dbias) {
        KEEL_LAUNCH(matmul_dbias_kernel<F>, ceil_div(OC, 256), 256, 0, MAIN_STREAM)(dbias, dout, N, OC);
        CUDA_CHECK_LAUNCH();
    }
}

}  // namespace keel_cuda
