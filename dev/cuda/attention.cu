// dev/cuda/attention.cu — kernel lab: causal multi-head self-attention, forward and backward
// (llmc/cuda/attention.cuh against cpu/attention.h), standard scaling, no ALiBi or dropout (the
// test suite covers the variants; the lab measures the common path).
// Legend: B batch, T time, C channels, NH heads, hs = C/NH; inp = qkv (B,T,3C), att (B,NH,T,T),
// out (B,T,C). Storage bf16, arithmetic fp32; the CPU reference computes in fp32 on the same
// bf16-rounded inputs, rounding to bf16 where keel's kernels store bf16 (the scores S, the
// probabilities, dP and dS: cpu/attention.h's round_bf16) for keel's variants, and nowhere for the
// naive kernel (fp32 scores).
// Variants:
//   forward  0 naive: one thread per (b, h, t) row — its scores (recomputed per pass), softmax and
//                     its hs outputs in sequence; the baseline that shows what parallelism buys.
//            1 keel:  keel_cuda::attention_forward.
//   backward 1 keel:  keel_cuda::attention_backward. (No naive variant: one thread per row would
//                     need atomics for dk and dv, or a serial walk per (b, h) that takes minutes.)
// FLOPs at full T×T (the MFU convention, scripts/bench.sh): forward 2 products, 4·B·NH·T²·hs;
// backward 4 products, 8·B·NH·T²·hs. The causal mask makes the useful work about half.
// Checks: probabilities are bf16-rounded fp32 values, so a pure relative bound (floor 0) holds for
// every one, however small. Outputs and gradients are sums of products with bf16-rounded
// probabilities: each term carries a 2^-9 relative error, so the sum's error scales with the size
// of its terms, not with the element (which can cancel to ~0): bound relative to |want| + the rms of
// the element's head slice (hs values of one position). A dropped or doubled term, a wrong index,
// moves an element by O(that rms) and fails. Measured under emulation: the naive kernel against the
// fp32 op up to T=1024, probabilities 3.9e-3, out 7.4e-3; keel against the op rounded at its storage
// points (T=37..512), probabilities 6.9e-3, out 2.9e-3, dinp 2.9e-3; bounds 2e-2, 2e-2, 3e-2. (Against
// the plain fp32 op keel's bf16 scores reach 2.6e-2 on out and 3.2e-2 on dinp at T=512.)
#include "llmc/cpu/attention.h"
#include "llmc/cuda/attention.cuh"
#include "dev/cuda/lab.h"

typedef __nv_bfloat16 bf16;

// ---- variant 1: keel's launchers (the one place to adapt when their arguments change) -------------
static void keel_forward(bf16* out, bf16* att, const bf16* inp, int B, int T, int C, int NH) {
    AttentionOpts o;
    keel_cuda::attention_forward(out, att, inp, B, T, C, NH, &o);
}
static void keel_backward(bf16* dinp, const bf16* dout, const bf16* inp, const bf16* att, int B, int T, int C, int NH) {
    AttentionOpts o;
    keel_cuda::attention_backward(dinp, dout, inp, att, B, T, C, NH, &o);
}

// ---- variant 0: naive forward --------------------------------------------------------------------
__global__ void attention_forward_naive_kernel(bf16* out, bf16* att, const bf16* inp, int B, int T, int C, int NH) {
    size_t row = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // (b, h, t)
    if (row >= (size_t)B * NH * T) return;
    int t = (int)(row % T), h = (int)(row / T % NH), b = (int)(row / ((size_t)T * NH));
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    const bf16* q = inp + ((size_t)b * T + t) * C3 + h * hs;
    const bf16* kv = inp + (size_t)b * T * C3 + h * hs;  // position u: k at kv[u·3C + C], v at kv[u·3C + 2C]
    float scale = 1.0f / sqrtf((float)hs), maxv = -INFINITY, sum = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int u = 0; u <= t; u++) {
            float s = 0;
            for (int i = 0; i < hs; i++) s += keel_cuda::to_f32(q[i]) * keel_cuda::to_f32(kv[u * C3 + C + i]);
            s *= scale;
            if (pass == 0) maxv = fmaxf(maxv, s);
            else sum += expf(s - maxv);
        }
    bf16* a = att + row * T;  // (T)
    for (int u = 0; u < T; u++) {
        float p = 0;
        if (u <= t) {
            float s = 0;
            for (int i = 0; i < hs; i++) s += keel_cuda::to_f32(q[i]) * keel_cuda::to_f32(kv[u * C3 + C + i]);
            p = expf(s * scale - maxv) / sum;
        }
        a[u] = keel_cuda::from_f32<bf16>(p);
    }
    bf16* o = out + ((size_t)b * T + t) * C + h * hs;
    for (int i = 0; i < hs; i++) {
        float acc = 0;
        for (int u = 0; u <= t; u++) acc += keel_cuda::to_f32(a[u]) * keel_cuda::to_f32(kv[u * C3 + 2 * C + i]);
        o[i] = keel_cuda::from_f32<bf16>(acc);
    }
}
static void naive_forward(bf16* out, bf16* att, const bf16* inp, int B, int T, int C, int NH) {
    size_t rows = (size_t)B * NH * T;
    KEEL_LAUNCH(attention_forward_naive_kernel, keel_cuda::ceil_div(rows, 128), 128, 0, MAIN_STREAM)(out, att, inp, B, T, C, NH);
    CUDA_CHECK_LAUNCH();
}

int main(int argc, char** argv) {
    LabArgs a = lab_parse(argc, argv, "attention forward and backward (llmc/cuda/attention.cuh)");
    lab_print_device(a);
    int B = a.B, T = a.T, C = a.C, NH = a.NH, hs = C / NH;
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;

    // Inputs, rounded to bf16 once: the CPU reference reads exactly what the kernels read.
    std::vector<float> inp = lab_round<bf16>(lab_randn(n_inp, 1)), dout = lab_round<bf16>(lab_randn(n_out, 2));
    std::vector<float> out(n_out), att(n_att), dinp(n_inp, 0.0f), out32(n_out), att32(n_att);
    // keel's kernels store S, the probabilities, dP and dS in bf16: their reference rounds there too
    // (cpu/attention.h's round_bf16, the CPU twin of those rounding points); the naive kernel keeps
    // fp32 scores and is checked against the plain fp32 op
    AttentionOpts o, o_ref;
    o_ref.round_bf16 = true;
    printf("CPU reference ...\n");
    fflush(stdout);
    attention_forward(out32.data(), att32.data(), inp.data(), B, T, C, NH, &o);
    attention_forward(out.data(), att.data(), inp.data(), B, T, C, NH, &o_ref);
    std::vector<float> att_in = lab_round<bf16>(att);  // the backward's att: what a bf16 forward stores
    attention_backward(dinp.data(), dout.data(), inp.data(), att_in.data(), B, T, C, NH, &o_ref);

    bf16 *d_inp = lab_upload(lab_to<bf16>(inp)), *d_dout = lab_upload(lab_to<bf16>(dout));
    bf16 *d_att_in = lab_upload(lab_to<bf16>(att_in)), *d_att = lab_upload(std::vector<bf16>(n_att));
    bf16 *d_out = lab_upload(std::vector<bf16>(n_out)), *d_dinp = lab_upload(std::vector<bf16>(n_inp));
    double prod = 2.0 * B * NH * (double)T * T * hs;  // one (T×T)·hs product over every head, full T×T
    int failed = 0;

    LabOp fwd;
    fwd.title = "attention_forward B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
                " NH=" + std::to_string(NH) + " bf16 (FLOPs: 4·B·NH·T²·hs at full T×T)";
    fwd.bytes = 2.0 * (n_inp + n_att + n_out);
    fwd.flops = 2 * prod;
    fwd.check = [&] {
        return std::vector<LabCheck>{lab_compare("att (probabilities)", lab_from(lab_download(d_att, n_att)), att, 2e-2, 0.0),
                                     lab_compare("out", lab_from(lab_download(d_out, n_out)), out, 2e-2, 1.0, hs)};
    };
    auto check32 = [&] {
        return std::vector<LabCheck>{lab_compare("att (probabilities)", lab_from(lab_download(d_att, n_att)), att32, 2e-2, 0.0),
                                     lab_compare("out", lab_from(lab_download(d_out, n_out)), out32, 2e-2, 1.0, hs)};
    };
    fwd.variants = {{0, "naive", [&] { naive_forward(d_out, d_att, d_inp, B, T, C, NH); }, false, check32},
                    {1, "keel", [&] { keel_forward(d_out, d_att, d_inp, B, T, C, NH); }}};
    failed += lab_run(a, fwd);

    LabOp bwd;
    bwd.title = "attention_backward B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
                " NH=" + std::to_string(NH) + " bf16 (FLOPs: 8·B·NH·T²·hs at full T×T)";
    bwd.bytes = 2.0 * (n_out + n_inp + n_att + 2 * n_inp);  // dout, inp, att read; dinp read and written
    bwd.flops = 4 * prod;
    bwd.reset = [&] { CUDA_CHECK(cudaMemset(d_dinp, 0, n_inp * sizeof(bf16))); };  // accumulated into: from 0
    bwd.check = [&] {
        return std::vector<LabCheck>{lab_compare("dinp (dq, dk, dv)", lab_from(lab_download(d_dinp, n_inp)), dinp, 3e-2, 1.0, hs)};
    };
    bwd.variants = {{1, "keel", [&] { keel_backward(d_dinp, d_dout, d_inp, d_att_in, B, T, C, NH); }}};
    failed += lab_run(a, bwd);
    return lab_finish(failed);
}
