// dev/cuda/encoder_backward.cu — kernel lab: the embedding gradients (llmc/cuda/encoder.cuh's
// encoder_backward against cpu/encoder.h): dwte[inp[b,t],:] += dout[b,t,:], dwpe[t,:] += dout[b,t,:].
// Legend: B batch, T time, C channels, Vp padded vocabulary; dout (B,T,C) bf16, inp (B,T) int,
// dwte (Vp,C) and dwpe (T,C) fp32, accumulated into.
// The token ids are skewed as in text (id = ⌊V·u³⌋: a few ids repeat hundreds of times), since a
// repeated token is what makes the word-embedding gradient a scatter with collisions.
// Variants:
//   0 naive: one thread per channel walks every position in order (C threads in all: keel's kernel
//            before the GPU step work; latency-bound, B·T dependent steps).
//   1 keel:  keel_cuda::encoder_backward: one block per distinct token (the token groups of
//            llmc/ops.h, built on the host as the model does), 4 channels a thread, the group's
//            positions in ascending order.
// Memory-bound: GB/s counts dout and the ids read once, and the dwte rows that some position
// touches read and written once (not all Vp rows), plus dwpe read and written.
// Check: fp32 sums in the CPU's order or another fixed one: 1e-4 relative to |want| + 0.01·rms of the
// row. dwte starts from random values, so a write to a row no position has fails too.

#include "llmc/cpu/encoder.h"
#include "llmc/cuda/encoder.cuh"
#include "dev/cuda/lab.h"

typedef __nv_bfloat16 bf16;

// ---- variant 0: one thread per channel over every position ---------------------------------------
__global__ void naive_wte_kernel(float* dwte, const bf16* dout, const int* inp, int BT, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int bt = 0; bt < BT; bt++) dwte[(size_t)inp[bt] * C + c] += keel_cuda::to_f32(dout[(size_t)bt * C + c]);
}
__global__ void naive_wpe_kernel(float* dwpe, const bf16* dout, int B, size_t TC) {
    size_t tc = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (tc >= TC) return;
    float v = dwpe[tc];
    for (int b = 0; b < B; b++) v += keel_cuda::to_f32(dout[(size_t)b * TC + tc]);
    dwpe[tc] = v;
}
static void naive_encoder_backward(float* dwte, float* dwpe, const bf16* dout, const int* inp, int B, int T, int C) {
    KEEL_LAUNCH(naive_wte_kernel, keel_cuda::ceil_div(C, 32), 32, 0, 0)(dwte, dout, inp, B * T, C);
    KEEL_LAUNCH(naive_wpe_kernel, keel_cuda::ceil_div((size_t)T * C, 256), 256, 0, 0)(dwpe, dout, B, (size_t)T * C);
    CUDA_CHECK_LAUNCH();
}

// ---- variant 1: keel's launcher (the one place to adapt when its arguments change) ---------------
static void keel_encoder_backward(float* dwte, float* dwpe, const bf16* dout, const int* inp, const int* groups, int B, int T, int C) {
    keel_cuda::encoder_backward(dwte, dwpe, dout, inp, groups, B, T, C);
}

int main(int argc, char** argv) {
    LabArgs a = lab_parse(argc, argv, "embedding gradients dwte, dwpe (llmc/cuda/encoder.cuh, encoder_backward)");
    lab_print_device(a);
    int B = a.B, T = a.T, C = a.C, V = a.V, Vp = a.Vp;
    size_t BT = (size_t)B * T, VC = (size_t)Vp * C, TC = (size_t)T * C;
    std::vector<int> inp(BT);
    std::vector<char> touched(Vp, 0);
    for (size_t i = 0; i < BT; i++) {
        double u = rng_uniform(2024, 77, 4, i);
        inp[i] = (int)(V * u * u * u);
        touched[inp[i]] = 1;
    }
    size_t rows = 0;
    for (char t : touched) rows += t;
    std::vector<float> dout = lab_round<bf16>(lab_randn(BT * C, 1)), dwte0 = lab_randn(VC, 2, 0.1), dwpe0 = lab_randn(TC, 3, 0.1);
    std::vector<float> dwte = dwte0, dwpe = dwpe0;
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), (const int*)nullptr, B, T, C);
    std::vector<int> groups(2 * BT + 2), count(Vp, 0);
    groups.resize(encoder_token_groups(groups.data(), inp.data(), (int)BT, &count));

    int* d_inp = lab_upload(inp);
    int* d_groups = lab_upload(groups);
    bf16* d_dout = lab_upload(lab_to<bf16>(dout));
    float *d_dwte = lab_upload(dwte0), *d_dwte0 = lab_upload(dwte0), *d_dwpe = lab_upload(dwpe0), *d_dwpe0 = lab_upload(dwpe0);

    LabOp op;
    op.title = "encoder_backward B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) + " Vp=" +
               std::to_string(Vp) + " bf16 dout, fp32 dwte/dwpe (" + std::to_string(rows) + " distinct tokens)";
    op.bytes = 2.0 * BT * C + 4.0 * BT + 2 * 4.0 * rows * C + 2 * 4.0 * TC;
    op.reset = [&] {
        lab_restore(d_dwte, d_dwte0, VC);
        lab_restore(d_dwpe, d_dwpe0, TC);
    };
    op.check = [&] {
        return std::vector<LabCheck>{lab_compare("dwte", lab_download(d_dwte, VC), dwte, 1e-4, 0.01, C),
                                     lab_compare("dwpe", lab_download(d_dwpe, TC), dwpe, 1e-4, 0.01, C)};
    };
    op.variants = {{0, "naive", [&] { naive_encoder_backward(d_dwte, d_dwpe, d_dout, d_inp, B, T, C); }},
                   {1, "keel", [&] { keel_encoder_backward(d_dwte, d_dwpe, d_dout, d_inp, d_groups, B, T, C); }}};
    return lab_finish(lab_run(a, op));
}
