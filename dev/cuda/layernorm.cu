// dev/cuda/layernorm.cu — kernel lab: LayerNorm forward and backward (llmc/cuda/layernorm.cuh
// against cpu/layernorm.h).
// Legend: N rows (B*T), C channels; inp, out, dout, dinp (N,C) bf16; weight, bias (C) bf16;
// mean, rstd (N), dweight, dbias (C) fp32.
// Variants:
//   forward  0 naive: one thread per row (mean, variance, outputs in sequence; neighbouring threads
//                     read addresses C apart: uncoalesced).
//            1 keel:  keel_cuda::layernorm_forward (LN_FWD_INFLIGHT chunks in flight a lane).
//            2 one in flight: the same kernel with K = 1, each chunk's load waited on before the next
//                     is issued (the kernel as it was before the chunks in flight); same bytes as 1.
//   backward 0 naive: one thread per row for dinp, then one thread per channel for dweight/dbias
//                     walking the N rows in order.
//            1 keel:  keel_cuda::layernorm_backward (LN_BWD_INFLIGHT loads in flight a thread,
//                     LN_BWD_FINISH_INFLIGHT slots in the last block, the blocks counted done by
//                     one atomicAdd each into the word the previous launch armed).
//            2 one in flight: the kernel as the H200 first timed it — K = 1: each lane waits for a
//                     chunk's load before it issues the next, a column thread for a row's, the last
//                     block for 2 slots'; the blocks counted done by a compare-and-swap loop each;
//                     same bytes as 1.
//            3 CAS count: 1's loads in flight (the last block 6 slots), 2's counter: 3 against 2 is
//                     the loads in flight, 1 against 3 the counter and the last block's sum.
//            4 two passes: 1 with the column sums in their two-pass form (the block's rows read again
//                     for dweight and dbias; the launcher's form for rows too wide for the one-pass
//                     form's shared memory, and the kernel as timed before it): 4 against 1 is the
//                     second read. dinp the same bytes, dweight and dbias summed in another order.
// Memory-bound: GB/s is the figure.
// Checks: out and dinp are bf16, each computed in fp32 and rounded once: relative to |want| + 0.1·rms
// of the row (the affine shift and the backward's mean subtractions can cancel), bound 2e-2; mean,
// rstd, dweight, dbias are fp32: bound 1e-3 (dweight, dbias: sums over N rows in other orders).
#include "llmc/cpu/layernorm.h"
#include "llmc/cuda/layernorm.cuh"
#include "dev/cuda/lab.h"

typedef __nv_bfloat16 bf16;

// ---- variant 1: keel's launchers (the one place to adapt when their arguments change) -------------
static void keel_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b, int N, int C) {
    keel_cuda::layernorm_forward(out, mean, rstd, inp, w, b, N, C);
}
static void keel_forward_one_in_flight(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w, const bf16* b, int N, int C) {
    keel_cuda::layernorm_forward<bf16, 1>(out, mean, rstd, inp, w, b, N, C);
}
static void keel_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w, const float* mean,
                          const float* rstd, int N, int C) {
    keel_cuda::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
static void keel_backward_one_in_flight(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w,
                                        const float* mean, const float* rstd, int N, int C) {
    keel_cuda::layernorm_backward<bf16, 1, 2, false>(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
static void keel_backward_two_pass(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w, const float* mean,
                                   const float* rstd, int N, int C) {
    using namespace keel_cuda;
    layernorm_backward<bf16, LN_BWD_INFLIGHT, LN_BWD_FINISH_INFLIGHT, true, LN_BWD_TWO_PASS>(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
static void keel_backward_cas_count(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w,
                                    const float* mean, const float* rstd, int N, int C) {
    keel_cuda::layernorm_backward<bf16, keel_cuda::LN_BWD_INFLIGHT, 2 * keel_cuda::LN_BWD_INFLIGHT, false>(dinp, dw, db, dout, inp, w, mean,
                                                                                                          rstd, N, C);
}

// ---- variant 0: naive ----------------------------------------------------------------------------
using keel_cuda::from_f32;
using keel_cuda::to_f32;
__global__ void layernorm_forward_naive_kernel(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* w,
                                               const bf16* b, int N, int C) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const bf16* x = inp + (size_t)n * C;
    float m = 0, v = 0;
    for (int c = 0; c < C; c++) m += to_f32(x[c]);
    m /= C;
    for (int c = 0; c < C; c++) v += (to_f32(x[c]) - m) * (to_f32(x[c]) - m);
    float s = 1.0f / sqrtf(v / C + (float)LAYERNORM_EPS);
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = from_f32<bf16>((to_f32(x[c]) - m) * s * to_f32(w[c]) + to_f32(b[c]));
    mean[n] = m;
    rstd[n] = s;
}
__global__ void layernorm_backward_dinp_naive_kernel(bf16* dinp, const bf16* dout, const bf16* inp, const bf16* w,
                                                     const float* mean, const float* rstd, int N, int C) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const bf16 *d = dout + (size_t)n * C, *x = inp + (size_t)n * C;
    float m = mean[n], s = rstd[n], gm = 0, gxm = 0;
    for (int c = 0; c < C; c++) {
        float g = to_f32(d[c]) * to_f32(w[c]);
        gm += g;
        gxm += g * (to_f32(x[c]) - m) * s;
    }
    gm /= C;
    gxm /= C;
    for (int c = 0; c < C; c++) {
        float g = to_f32(d[c]) * to_f32(w[c]), xhat = (to_f32(x[c]) - m) * s;
        bf16* dx = dinp + (size_t)n * C + c;
        *dx = from_f32<bf16>(to_f32(*dx) + s * (g - gm - xhat * gxm));
    }
}
__global__ void layernorm_backward_params_naive_kernel(float* dw, float* db, const bf16* dout, const bf16* inp,
                                                       const float* mean, const float* rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0, sb = 0;
    for (int n = 0; n < N; n++) {
        float d = to_f32(dout[(size_t)n * C + c]);
        sw += d * (to_f32(inp[(size_t)n * C + c]) - mean[n]) * rstd[n];
        sb += d;
    }
    dw[c] += sw;
    db[c] += sb;
}

int main(int argc, char** argv) {
    LabArgs a = lab_parse(argc, argv, "LayerNorm forward and backward (llmc/cuda/layernorm.cuh)");
    lab_print_device(a);
    int N = a.B * a.T, C = a.C;
    size_t NC = (size_t)N * C;
    using keel_cuda::ceil_div;
    // Inputs with a mean and a scale, as a residual stream has: x = 0.5 + 2·N(0,1).
    std::vector<float> inp = lab_randn(NC, 1, 2.0);
    for (float& x : inp) x += 0.5f;
    inp = lab_round<bf16>(inp);
    std::vector<float> w = lab_round<bf16>(lab_randn(C, 2, 0.2)), b = lab_round<bf16>(lab_randn(C, 3, 0.2));
    for (float& x : w) x = lab_from(lab_to<bf16>(std::vector<float>{x + 1.0f}))[0];
    std::vector<float> dout = lab_round<bf16>(lab_randn(NC, 4)), dw0 = lab_randn(C, 5), db0 = lab_randn(C, 6);
    std::vector<float> out(NC), mean(N), rstd(N), dinp(NC, 0.0f), dw = dw0, db = db0;
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(), rstd.data(), N, C);

    bf16 *d_inp = lab_upload(lab_to<bf16>(inp)), *d_w = lab_upload(lab_to<bf16>(w)), *d_b = lab_upload(lab_to<bf16>(b));
    bf16 *d_dout = lab_upload(lab_to<bf16>(dout)), *d_out = lab_upload(std::vector<bf16>(NC)), *d_dinp = lab_upload(std::vector<bf16>(NC));
    float *d_mean = lab_upload(std::vector<float>(N)), *d_rstd = lab_upload(std::vector<float>(N));
    float *d_mean_ref = lab_upload(mean), *d_rstd_ref = lab_upload(rstd);  // the backward's saved statistics
    float *d_dw = lab_upload(dw0), *d_db = lab_upload(db0), *d_dw0 = lab_upload(dw0), *d_db0 = lab_upload(db0);
    std::string shape = " N=" + std::to_string(N) + " (B·T) C=" + std::to_string(C) + " bf16";
    int failed = 0;

    LabOp fwd;
    fwd.title = "layernorm_forward" + shape;
    fwd.bytes = 2.0 * NC + 2 * 2.0 * C + 2.0 * NC + 2 * 4.0 * N;  // inp, weight, bias; out, mean, rstd
    fwd.check = [&] {
        return std::vector<LabCheck>{lab_compare("out", lab_from(lab_download(d_out, NC)), out, 2e-2, 0.1, C),
                                     lab_compare("mean", lab_download(d_mean, N), mean, 1e-3, 0.01),
                                     lab_compare("rstd", lab_download(d_rstd, N), rstd, 1e-3, 0.0)};
    };
    fwd.variants = {{0, "naive", [&] {
                         KEEL_LAUNCH(layernorm_forward_naive_kernel, ceil_div(N, 256), 256, 0, MAIN_STREAM)(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
                         CUDA_CHECK_LAUNCH();
                     }},
                    {1, "keel", [&] { keel_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C); }},
                    {2, "one in flight", [&] { keel_forward_one_in_flight(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C); }}};
    failed += lab_run(a, fwd);

    LabOp bwd;
    bwd.title = "layernorm_backward" + shape;
    // dout, inp, weight, mean, rstd read; dinp, dweight, dbias read and written (accumulated into)
    bwd.bytes = 2.0 * NC * 2 + 2.0 * C + 2 * 4.0 * N + 2 * (2.0 * NC + 2 * 4.0 * C);
    bwd.reset = [&] {
        CUDA_CHECK(cudaMemset(d_dinp, 0, NC * sizeof(bf16)));
        lab_restore(d_dw, d_dw0, C);
        lab_restore(d_db, d_db0, C);
    };
    bwd.check = [&] {
        return std::vector<LabCheck>{lab_compare("dinp", lab_from(lab_download(d_dinp, NC)), dinp, 2e-2, 0.1, C),
                                     lab_compare("dweight", lab_download(d_dw, C), dw, 1e-3, 0.01),
                                     lab_compare("dbias", lab_download(d_db, C), db, 1e-3, 0.01)};
    };
    bwd.variants = {{0, "naive", [&] {
                         KEEL_LAUNCH(layernorm_backward_dinp_naive_kernel, ceil_div(N, 256), 256, 0, MAIN_STREAM)(
                             d_dinp, d_dout, d_inp, d_w, d_mean_ref, d_rstd_ref, N, C);
                         CUDA_CHECK_LAUNCH();
                         KEEL_LAUNCH(layernorm_backward_params_naive_kernel, ceil_div(C, 256), 256, 0, MAIN_STREAM)(
                             d_dw, d_db, d_dout, d_inp, d_mean_ref, d_rstd_ref, N, C);
                         CUDA_CHECK_LAUNCH();
                     }},
                    {1, "keel", [&] { keel_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean_ref, d_rstd_ref, N, C); }},
                    {2, "one in flight", [&] {
                         keel_backward_one_in_flight(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean_ref, d_rstd_ref, N, C);
                     }},
                    {3, "CAS count", [&] { keel_backward_cas_count(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean_ref, d_rstd_ref, N, C); }},
                    {4, "two passes", [&] { keel_backward_two_pass(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean_ref, d_rstd_ref, N, C); }}};
    failed += lab_run(a, bwd);
    return lab_finish(failed);
}
