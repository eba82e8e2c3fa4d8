// dev/cuda/matmul_dbias.cu — kernel lab: the bias gradient of the linear layer,
// dbias[o] += Σ_n dout[n,o] (llmc/cuda/matmul.cuh's matmul_backward with only dbias, against
// cpu/matmul.h). The trainer calls it 4 times per layer (qkv, attention projection, fc, fc
// projection): OC = 3C, C, 4C, C. The lab runs OC = 4C, the widest.
// Legend: N rows (B*T), OC output channels; dout (N,OC) bf16, dbias (OC) fp32.
// Variants (all deterministic: every output summed in an order fixed by the shape, no atomics):
//   0 naive:     one thread per output channel walks the N rows in order (N dependent adds each,
//                and only OC threads: a few blocks on a GPU of 132 SMs).
//   1 keel:      keel_cuda::matmul_backward(nullptr, nullptr, dbias, ...): the two-stage column sum
//                with 16-byte loads (8 bf16 channels a thread, 256 a block).
//   2 two-stage, scalar: a block per (chunk of V2_ROWS rows, 32 channels): its 32×8 threads sum
//                row slices into shared memory, the block adds them in a fixed order into a partial
//                (nchunks, OC); a second kernel adds the chunk partials in chunk order — keel's shape
//                with one channel a thread, to show what the vector loads buy.
// Memory-bound: GB/s is the figure (FLOPs are N·OC adds; no TFLOP/s column).
// Check: fp32 sums of bf16 values in different orders: relative to |want| + 0.01·rms, bound 1e-3.
#include "llmc/cpu/matmul.h"
#include "llmc/cuda/matmul.cuh"
#include "dev/cuda/lab.h"

typedef __nv_bfloat16 bf16;

// ---- variant 1: keel's launcher (the one place to adapt when its arguments change) ---------------
static void keel_dbias(float* dbias, const bf16* dout, int N, int OC) {
    keel_cuda::matmul_backward((bf16*)nullptr, (float*)nullptr, dbias, dout, (const bf16*)nullptr, (const bf16*)nullptr, N,
                               /*C, unused without dinp and dweight*/ 1, OC);
}

// ---- variant 0: naive ----------------------------------------------------------------------------
__global__ void dbias_naive_kernel(float* dbias, const bf16* dout, int N, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float sum = 0;
    for (int n = 0; n < N; n++) sum += keel_cuda::to_f32(dout[(size_t)n * OC + o]);
    dbias[o] += sum;
}

// ---- variant 2: two-stage column reduction -------------------------------------------------------
enum { V2_COLS = 32, V2_SLICES = 8, V2_ROWS = 256 };

// Block (chunk, column block), threads (32 columns, 8 row slices): thread (c, s) sums rows
// r0 + s, r0 + s + 8, ... of its column (neighbouring threads read neighbouring columns of a row:
// coalesced), then slice sums are added s ascending.
__global__ void dbias_partial_kernel(float* partial, const bf16* dout, int N, int OC) {  // partial (nchunks, OC)
    __shared__ float sums[V2_SLICES][V2_COLS];
    int c = threadIdx.x % V2_COLS, s = threadIdx.x / V2_COLS;
    int o = blockIdx.y * V2_COLS + c;
    int r0 = blockIdx.x * V2_ROWS, r1 = r0 + V2_ROWS < N ? r0 + V2_ROWS : N;
    float acc = 0;
    if (o < OC)
        for (int r = r0 + s; r < r1; r += V2_SLICES) acc += keel_cuda::to_f32(dout[(size_t)r * OC + o]);
    sums[s][c] = acc;
    __syncthreads();
    if (s == 0 && o < OC) {
        float t = 0;
        for (int k = 0; k < V2_SLICES; k++) t += sums[k][c];
        partial[(size_t)blockIdx.x * OC + o] = t;
    }
}
__global__ void dbias_final_kernel(float* dbias, const float* partial, int nchunks, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float t = 0;
    for (int k = 0; k < nchunks; k++) t += partial[(size_t)k * OC + o];
    dbias[o] += t;
}
static void two_stage_dbias(float* dbias, float* partial, const bf16* dout, int N, int OC) {
    unsigned nchunks = keel_cuda::ceil_div(N, V2_ROWS);
    dim3 grid(nchunks, keel_cuda::ceil_div(OC, V2_COLS));
    KEEL_LAUNCH(dbias_partial_kernel, grid, V2_COLS * V2_SLICES, 0, MAIN_STREAM)(partial, dout, N, OC);
    CUDA_CHECK_LAUNCH();
    KEEL_LAUNCH(dbias_final_kernel, keel_cuda::ceil_div(OC, 256), 256, 0, MAIN_STREAM)(dbias, partial, (int)nchunks, OC);
    CUDA_CHECK_LAUNCH();
}

int main(int argc, char** argv) {
    LabArgs a = lab_parse(argc, argv, "matmul bias gradient (llmc/cuda/matmul.cuh, matmul_backward with only dbias)");
    lab_print_device(a);
    int N = a.B * a.T, OC = 4 * a.C;
    std::vector<float> dout = lab_round<bf16>(lab_randn((size_t)N * OC, 1)), dbias0 = lab_randn(OC, 2), dbias = dbias0;
    // The CPU op with C = 0: no dinp (null), an empty dweight — only its dbias loop runs.
    float unused = 0;
    matmul_backward((float*)nullptr, &unused, dbias.data(), dout.data(), &unused, &unused, N, 0, OC);

    bf16* d_dout = lab_upload(lab_to<bf16>(dout));
    float *d_dbias = lab_upload(dbias0), *d_dbias0 = lab_upload(dbias0);
    float* d_partial = lab_upload(std::vector<float>((size_t)keel_cuda::ceil_div(N, V2_ROWS) * OC));

    LabOp op;
    op.title = "matmul_backward dbias N=" + std::to_string(N) + " (B·T) OC=" + std::to_string(OC) + " (4C) bf16 dout, fp32 dbias";
    op.bytes = 2.0 * N * OC + 2 * 4.0 * OC;  // dout read; dbias read and written
    op.reset = [&] { lab_restore(d_dbias, d_dbias0, OC); };  // accumulated into: from the same start
    op.check = [&] { return std::vector<LabCheck>{lab_compare("dbias", lab_download(d_dbias, OC), dbias, 1e-3, 0.01)}; };
    op.variants = {{0, "naive", [&] {
                        KEEL_LAUNCH(dbias_naive_kernel, keel_cuda::ceil_div(OC, 256), 256, 0, MAIN_STREAM)(d_dbias, d_dout, N, OC);
                        CUDA_CHECK_LAUNCH();
                    }},
                   {1, "keel", [&] { keel_dbias(d_dbias, d_dout, N, OC); }},
                   {2, "two-stage", [&] { two_stage_dbias(d_dbias, d_partial, d_dout, N, OC); }}};
    return lab_finish(lab_run(a, op));
}
