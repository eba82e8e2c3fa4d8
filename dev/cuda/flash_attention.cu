// dev/cuda/flash_attention.cu — kernel lab: fused flash attention (llmc/cuda/flash_attention.cuh)
// against the GEMM path (llmc/cuda/attention.cuh), forward and backward, both checked against the
// CPU op (cpu/attention.h) first. Standard scaling, no ALiBi or dropout (test_cuda_flash covers the
// variants; the lab measures the common path).
// Legend: B batch, T time, C channels, NH heads, hs = C/NH; inp = qkv (B,T,3C), out (B,T,C),
// att (B,NH,T,T) (GEMM path), lse (B,NH,T) fp32 (flash). Storage bf16, arithmetic fp32; the CPU
// reference computes in fp32 on the same bf16-rounded inputs.
// Variants:
//   forward  1 gemm:  keel_cuda::attention_forward (cuBLASLt products + softmax kernel; writes att)
//            2 flash: keel_cuda::flash_attention_forward (writes lse only)
//            3 flash, by head: the same kernel with its blocks started head by head (every tile
//              of head 0, then head 1, ...), the order before the grouped one (flash_block): the
//              same bytes (H200, B=16 T=1024: 0.183 against 0.158 ms with 128-query blocks)
//            4 flash, 128 rows (head size 64): two 16-row tiles a warp, 128 queries a block
//              (FlashAttention-2's: each K and V fragment feeds two row tiles), one block a
//              multiprocessor at 255 registers, against the launcher's one tile a warp (64 queries);
//              the same bytes. H200: 0.158 against 0.146 ms at B=16 T=1024, 0.106 against 0.094 at
//              T=512, equal at T=4096 — why the launcher takes 64
//   backward 1 gemm:  keel_cuda::attention_backward from the GEMM forward's att
//            2 flash: keel_cuda::flash_attention_backward from the flash forward's out and lse (at
//              the trainer's warps a block: 5 below)
//            3 flash, dQ racing: the default kernel (4 warps) without the dQ chain's ordering
//              (timing only: the dQ parts race, so its result is wrong) — what determinism costs
//              (H200 at 8 warps, B=16 T=1024: 0.526 against 0.573 ms ordered)
//            4 flash, 8 warps: the kernel at 8 warps a block (128 keys, FlashAttention-2's shape;
//              KEEL_FLASH_BWD_WARPS=8): Q, dO, lse and D loaded once for twice the keys, each barrier
//              over twice the work, half the dQ chain's parts; one block a multiprocessor instead of two
//            5 flash, 4 warps: the same at 4 warps a block (64 keys; the launcher's: H200, B=16
//              T=1024, 0.553 against 0.573 ms at 8, T=512 0.360 against 0.394, T=4096 equal)
//            6 flash, dQ deferred: the default's 4 warps with each step's dQ part added to the
//              chain during the next step, its sum fetched by cp.async behind that step's products
//              (FLASH_CHAIN_DEFER; the same bytes as 2; H200 at 8 warps: 0.610 ms, slower than early)
//            7 flash, dQ serial: the default's warps with the chain as an H200 first timed it
//              (FLASH_CHAIN_SERIAL: the turn awaited after the dQ product, then one load-add-store of
//              the chain's sum after another, 4 barriers a step; the same bytes as 2) — the "before"
//              of the early chain (FLASH_CHAIN_EARLY, the launcher's: 2 to 5; H200 at 8 warps: 0.769
//              against 0.573 ms)
//            8 flash, by head: 2 (the trainer's warps and chain) with its blocks started head by
//              head, the order before the grouped one (the same bytes; H200 at 8 warps, B=16 T=1024:
//              0.594 against 0.573 ms)
//            9 flash, ld.acquire: 5 with the dQ chain's wait acquiring by a second read of
//              the counter (ld.acquire) instead of a fence once the relaxed read has seen the turn
//              (FLASH_CHAIN_EARLY_ACQUIRE; the same bytes as 5). Not yet timed on a GPU
//           10 flash, 32 queries (head size 64): 5 stepping over 32 queries instead of 64 (the
//              kernel's STEP; head size 128's step): Sᵀ and dPᵀ take half the registers, 167 a thread
//              under a launch bound of 3 blocks a multiprocessor (12 warps, against 8 at 253), at
//              twice the steps — twice the barriers and dQ chain parts for the same products. Not yet
//              timed on a GPU
// The flash variants write dinp (dinp_write, as the trainer calls them), so its old values are not read.
// Flash needs hs ∈ {64, 128} (flash_attention_supported): at other head sizes (the emulated lab's
// tiny shape) its variants are skipped with a line saying so.
// FLOPs at full T×T (the MFU convention): forward 4·B·NH·T²·hs, backward 8·B·NH·T²·hs (flash
// recomputes S in the backward: one product more than counted, FlashAttention-2's five; the causal
// mask halves the useful work of both paths).
// Checks: as dev/cuda/attention.cu (bounds relative to |want| + the rms of the element's head slice):
// out 2e-2, dinp 3e-2; flash rounds the running-max probabilities instead of the normalized ones and
// uses D = dout·out, each a 2^-9 relative error per term, against the plain fp32 op; the GEMM path,
// which stores S, the probabilities, dP and dS in bf16, against the op rounded at those points
// (cpu/attention.h's round_bf16: its own reference, LabVariant::check). Measured under emulation at
// T=512: gemm out 2.7e-3, dinp 3.0e-3; flash out 7.2e-3, dinp 9.7e-3 (both backward variants).
// The GEMM path's dinp bound is 4e-2: its reference rounds at the same points, but where the GPU's
// fp32 sum and the CPU's round a stored S or dP to neighbouring bf16 values (2^-8 apart), the
// difference passes through exp and dS = P·(dP - D), where dP and D nearly cancel: on an H200 at
// hs 128, B=8, T=1024 one element of 3.8e7 reached 3.06e-2 (hs 64, B=16: 1.4e-2); a wrong product or
// scale is off by O(1).
#include "llmc/cpu/attention.h"
#include "llmc/cuda/attention.cuh"
#include "llmc/cuda/flash_attention.cuh"
#include "dev/cuda/lab.h"

typedef __nv_bfloat16 bf16;

int main(int argc, char** argv) {
    LabArgs a = lab_parse(argc, argv, "flash attention vs the GEMM path, forward and backward");
    lab_print_device(a);
    int B = a.B, T = a.T, C = a.C, NH = a.NH, hs = C / NH;
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T, n_lse = (size_t)B * NH * T;
    bool flash_ok = keel_cuda::flash_attention_supported(hs, sizeof(bf16));
    if (!flash_ok) printf("flash: head size %d is not supported (64 or 128): its variants are skipped\n", hs);

    std::vector<float> inp = lab_round<bf16>(lab_randn(n_inp, 1)), dout = lab_round<bf16>(lab_randn(n_out, 2));
    // two references: the plain fp32 op for flash (whose S, P and dS stay in registers), and the GEMM
    // path's, which stores S, the probabilities, dP and dS in bf16: the op rounded at those points
    // (cpu/attention.h's round_bf16, the CPU twin of the GEMM path)
    std::vector<float> out(n_out), att(n_att), dinp(n_inp, 0.0f), out_g(n_out), att_g(n_att), dinp_g(n_inp, 0.0f);
    AttentionOpts o, o_gemm;
    o_gemm.round_bf16 = true;
    printf("CPU reference ...\n");
    fflush(stdout);
    attention_forward(out.data(), att.data(), inp.data(), B, T, C, NH, &o);
    attention_backward(dinp.data(), dout.data(), inp.data(), att.data(), B, T, C, NH, &o);
    attention_forward(out_g.data(), att_g.data(), inp.data(), B, T, C, NH, &o_gemm);
    attention_backward(dinp_g.data(), dout.data(), inp.data(), att_g.data(), B, T, C, NH, &o_gemm);

    keel_cuda::attention_reserve<bf16>(B, T, C, NH);
    if (flash_ok) keel_cuda::flash_attention_reserve<bf16>(B, T, C, NH);
    bf16 *d_inp = lab_upload(lab_to<bf16>(inp)), *d_dout = lab_upload(lab_to<bf16>(dout));
    bf16 *d_att = lab_upload(std::vector<bf16>(n_att)), *d_out = lab_upload(std::vector<bf16>(n_out));
    bf16 *d_dinp = lab_upload(std::vector<bf16>(n_inp));
    bf16 *d_gemm_att = lab_upload(std::vector<bf16>(n_att)), *d_flash_out = lab_upload(std::vector<bf16>(n_out));
    float *d_lse = lab_upload(std::vector<float>(n_lse)), *d_flash_lse = lab_upload(std::vector<float>(n_lse));
    double prod = 2.0 * B * NH * (double)T * T * hs;
    int failed = 0;

    LabOp fwd;
    fwd.title = "attention forward B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) + " NH=" + std::to_string(NH) +
                " bf16 (FLOPs: 4·B·NH·T²·hs at full T×T)";
    fwd.bytes = 2.0 * (n_inp + n_out);  // the fused path's traffic; the GEMM path also writes and reads att
    fwd.flops = 2 * prod;
    fwd.check = [&] { return std::vector<LabCheck>{lab_compare("out", lab_from(lab_download(d_out, n_out)), out, 2e-2, 1.0, hs)}; };
    fwd.variants = {{1, "gemm", [&] { keel_cuda::attention_forward(d_out, d_att, d_inp, B, T, C, NH, &o); }, false,
                     [&] { return std::vector<LabCheck>{lab_compare("out", lab_from(lab_download(d_out, n_out)), out_g, 2e-2, 1.0, hs)}; }}};
    if (flash_ok) {
        fwd.variants.push_back({2, "flash", [&] { keel_cuda::flash_attention_forward(d_out, d_lse, d_inp, B, T, C, NH, &o); }});
        fwd.variants.push_back({3, "flash, by head", [&] { keel_cuda::flash_attention_forward(d_out, d_lse, d_inp, B, T, C, NH, &o, B * NH); }});
        if (hs == 64)
            fwd.variants.push_back({4, "flash, 128 rows", [&] { keel_cuda::flash_attention_forward(d_out, d_lse, d_inp, B, T, C, NH, &o, 0, 2); }});
    }
    failed += lab_run(a, fwd);

    // The backward's saved inputs, from each path's own forward.
    keel_cuda::attention_forward(d_out, d_gemm_att, d_inp, B, T, C, NH, &o);
    if (flash_ok) keel_cuda::flash_attention_forward(d_flash_out, d_flash_lse, d_inp, B, T, C, NH, &o);
    LabOp bwd;
    bwd.title = "attention backward B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) + " NH=" + std::to_string(NH) +
                " bf16 (FLOPs: 8·B·NH·T²·hs at full T×T)";
    bwd.bytes = 2.0 * (n_out + n_inp + 2 * n_inp);
    bwd.flops = 4 * prod;
    bwd.reset = [&] { CUDA_CHECK(cudaMemset(d_dinp, 0, n_inp * sizeof(bf16))); };
    // rms over a position's 3C gradients, not one head slice: dq at t = 0 is exactly 0 (one key,
    // p = 1), which the GEMM path reproduces (Σ att·datt cancels exactly) but flash does not: its
    // D = dout·out from the bf16 out leaves dS of the order of 2^-9·|dout||v| there
    bwd.check = [&] {
        return std::vector<LabCheck>{lab_compare("dinp (dq, dk, dv)", lab_from(lab_download(d_dinp, n_inp)), dinp, 3e-2, 1.0, 3 * (size_t)C)};
    };
    bwd.variants = {{1, "gemm", [&] { keel_cuda::attention_backward(d_dinp, d_dout, d_inp, d_gemm_att, B, T, C, NH, &o); }, false, [&] {
                         return std::vector<LabCheck>{lab_compare("dinp (dq, dk, dv)", lab_from(lab_download(d_dinp, n_inp)), dinp_g, 4e-2, 1.0, 3 * (size_t)C)};
                     }}};
    if (flash_ok) {
        bwd.variants.push_back(
            {2, "flash", [&] { keel_cuda::flash_attention_backward(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true); }});
        // what the deterministic dQ chain costs: the same kernel with its waits and counters left out
        bwd.variants.push_back({3, "flash, dQ racing", [&] {
                                    if (hs == 64) keel_cuda::flash_backward_launch<bf16, 64, false, 4>(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true);
                                    else keel_cuda::flash_backward_launch<bf16, 128, false, 4>(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true);
                                },
                                true});
        bwd.variants.push_back({4, "flash, 8 warps", [&] {
                                    if (hs == 64) keel_cuda::flash_backward_launch<bf16, 64, true, 8>(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true);
                                    else keel_cuda::flash_backward_launch<bf16, 128, true, 8>(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true);
                                }});
        bwd.variants.push_back({5, "flash, 4 warps", [&] {
                                    if (hs == 64) keel_cuda::flash_backward_launch<bf16, 64, true, 4>(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true);
                                    else keel_cuda::flash_backward_launch<bf16, 128, true, 4>(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true);
                                }});
        bwd.variants.push_back({6, "flash, dQ deferred", [&] {
                                    if (hs == 64) keel_cuda::flash_backward_launch<bf16, 64, true, 4, keel_cuda::FLASH_CHAIN_DEFER>(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true);
                                    else keel_cuda::flash_backward_launch<bf16, 128, true, 4, keel_cuda::FLASH_CHAIN_DEFER>(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true);
                                }});
        bwd.variants.push_back({7, "flash, dQ serial", [&] {
                                    if (hs == 64) keel_cuda::flash_backward_launch<bf16, 64, true, 4, keel_cuda::FLASH_CHAIN_SERIAL>(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true);
                                    else keel_cuda::flash_backward_launch<bf16, 128, true, 4, keel_cuda::FLASH_CHAIN_SERIAL>(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true);
                                }});
        bwd.variants.push_back({8, "flash, by head", [&] {
                                    keel_cuda::flash_attention_backward(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true, B * NH);
                                }});
        bwd.variants.push_back({9, "flash, ld.acquire", [&] {
                                    if (hs == 64) keel_cuda::flash_backward_launch<bf16, 64, true, 4, keel_cuda::FLASH_CHAIN_EARLY_ACQUIRE>(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true);
                                    else keel_cuda::flash_backward_launch<bf16, 128, true, 4, keel_cuda::FLASH_CHAIN_EARLY_ACQUIRE>(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true);
                                }});
        if (hs == 64)  // (head size 128 steps over 32 queries already)
            bwd.variants.push_back({10, "flash, 32 queries", [&] {
                                        keel_cuda::flash_backward_launch<bf16, 64, true, 4, keel_cuda::FLASH_CHAIN_EARLY, 32>(d_dinp, d_dout, d_inp, d_flash_out, d_flash_lse, B, T, C, NH, &o, true);
                                    }});
    }
    failed += lab_run(a, bwd);
    return lab_finish(failed);
}
