// dev/cuda/matmul.cu — kernel lab: the linear layer's product, out = inp·Wᵀ (llmc/cuda/matmul.cuh's
// matmul_forward through cuBLASLt, no bias), against cpu/matmul.h's chains.
// Legend: N rows (B*T), C input channels, OC output channels; inp (N,C), weight (OC,C), out (N,OC), bf16.
// Shapes: the four products of a layer at N = B·T (qkv: OC = 3C; attention projection: C; fc: 4C;
// fc projection: C from 4C), then square products S×S×S at S/2 and S (-S): the rate a large GEMM
// sustains, which the step model's gemm_eff is a share of the dense peak of (scripts/step_curves.sh
// reads it from these rows; the layer's rows show how far short of it keel's own shapes fall).
// Variants:
//   1 keel: keel_cuda::matmul_forward (cuBLASLt, fp32 accumulation, one algorithm per shape from its heuristic).
// FLOPs 2·N·C·OC; bytes: inp and weight read, out written, once each.
// Check: the CPU reference on every `stride`-th row only (a full S³ reference on the host would take
// longer than the lab); relative to |want| + the row's rms (a sum of C products can cancel), bound 1e-2:
// the output's bf16 rounding is 2^-9.
#include "llmc/cpu/matmul.h"
#include "llmc/cuda/matmul.cuh"
#include "dev/cuda/lab.h"

typedef __nv_bfloat16 bf16;

// ---- variant 1: keel's launcher (the one place to adapt when its arguments change) ---------------
static void keel_matmul(bf16* out, const bf16* inp, const bf16* weight, int N, int C, int OC) {
    keel_cuda::matmul_forward(out, inp, weight, (const bf16*)nullptr, N, C, OC);
}

// The reference rows 0, stride, 2·stride, ...: out[n,o] = Σ_i inp[n,i]·W[o,i], the CPU op's chain.
static std::vector<float> reference_rows(const std::vector<float>& inp, const std::vector<float>& w, int N, int C, int OC, int stride) {
    std::vector<float> x, out;
    for (int n = 0; n < N; n += stride) x.insert(x.end(), inp.begin() + (size_t)n * C, inp.begin() + (size_t)(n + 1) * C);
    int rows = (int)(x.size() / C);
    out.resize((size_t)rows * OC);
    matmul_forward_reference(out.data(), x.data(), w.data(), (const float*)nullptr, rows, C, OC);
    return out;
}

// The same rows of the device output.
static std::vector<float> device_rows(const bf16* d_out, int N, int OC, int stride) {
    std::vector<float> all = lab_from(lab_download(d_out, (size_t)N * OC)), rows;
    for (int n = 0; n < N; n += stride) rows.insert(rows.end(), all.begin() + (size_t)n * OC, all.begin() + (size_t)(n + 1) * OC);
    return rows;
}

// One shape: inputs, the reference rows, a LabOp with keel's variant; returns the variants that failed.
static int run_shape(const LabArgs& a, const char* what, int N, int C, int OC, uint64_t key) {
    int stride = std::max(1, N / 64);  // about 64 reference rows
    std::vector<float> inp = lab_round<bf16>(lab_randn((size_t)N * C, key)), w = lab_round<bf16>(lab_randn((size_t)OC * C, key + 1));
    std::vector<float> want = reference_rows(inp, w, N, C, OC, stride);
    bf16 *d_inp = lab_upload(lab_to<bf16>(inp)), *d_w = lab_upload(lab_to<bf16>(w)), *d_out = lab_upload(std::vector<bf16>((size_t)N * OC));
    LabOp op;
    op.title = "matmul_forward N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC) + " bf16 (" + what + ")";
    op.bytes = 2.0 * ((double)N * C + (double)OC * C + (double)N * OC);
    op.flops = 2.0 * N * C * (double)OC;
    op.check = [&] { return std::vector<LabCheck>{lab_compare("out", device_rows(d_out, N, OC, stride), want, 1e-2, 1.0, OC)}; };
    op.variants = {{1, "keel", [&] { keel_matmul(d_out, d_inp, d_w, N, C, OC); }}};
    int failed = lab_run(a, op);
    CUDA_CHECK(cudaFree(d_inp));
    CUDA_CHECK(cudaFree(d_w));
    CUDA_CHECK(cudaFree(d_out));
    return failed;
}

int main(int argc, char** argv) {
    LabArgs a = lab_parse(argc, argv, "the linear layer's product (llmc/cuda/matmul.cuh matmul_forward), the layer's shapes and large squares");
    lab_print_device(a);
    int N = a.B * a.T, C = a.C, S = a.square;
    int failed = 0;
    failed += run_shape(a, "qkv", N, C, 3 * C, 1);
    failed += run_shape(a, "attention projection", N, C, C, 3);
    failed += run_shape(a, "fc", N, C, 4 * C, 5);
    failed += run_shape(a, "fc projection", N, 4 * C, C, 7);
    failed += run_shape(a, "square", S / 2, S / 2, S / 2, 9);
    failed += run_shape(a, "square", S, S, S, 11);
    return lab_finish(failed);
}
