// test_cuda_matmul — cuda/matmul.cuh (cuBLASLt; under emulation the strict shim of
// test/cuda_emu/cublasLt.h) against cpu/matmul.h: forward with and without bias, backward
// accumulating into non-zero dinp/dweight/dbias, on shapes that are not multiples of anything.
// Tolerance: both sum in fp32, in different orders (and with different tiling on the GPU):
// relative 1e-5 of the row's magnitude, i.e. atol 1e-4 on O(1..10) values with K up to 260.
// bf16 and fp16 storage (--bf16, --fp16): inputs rounded to the type, the CPU's fp32 op on the same
// rounded values as reference. Outputs of the storage type (out, dinp) are rounded once: rtol
// 2^-7 (bf16) / 2^-9 (fp16) plus the fp32 tolerance. dweight and dbias are fp32 buffers accumulated
// in fp32 (docs/internals.md#precision): they keep the fp32 tolerance, which a gradient rounded to bf16 would miss.
// The GeLU ops (matmul_forward_gelu, matmul_backward_gelu: cuBLASLt's GELU_AUX_BIAS and DGELU
// epilogues) against their CPU twins (the matmul, then cpu/gelu.h): see test_gelu_* below.
#include "llmc/cpu/matmul.h"
#include "llmc/cuda/matmul.cuh"
#include "test/cuda_test.h"

// Where the product meets an addend (the bias epilogue, beta = 1 with C), the exact fp32 result
// rounded once is `want`; cuBLASLt on an H200 (13.0) was seen to round the product to the output
// type first and then add (on small odd shapes: a cancelling dinp += dout·W came out 0 where the
// single rounding gives 4e-3). Each element must match one of the two, to the same tolerance: a
// wrong product, layout or addend matches neither.
static void check_close_either(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                               const std::vector<float>& want2, double rtol, double atol) {
    std::vector<float> pick = want;
    for (size_t i = 0; i < got.size(); i++) {
        double e1 = std::fabs((double)got[i] - want[i]), e2 = std::fabs((double)got[i] - want2[i]);
        if (e2 < e1) pick[i] = want2[i];
    }
    check_close(what, got, pick, rtol, atol);
}

template <typename L> static void test_low_precision(const char* name, double rtol, int N, int C, int OC) {
    std::string sz = std::string(" ") + name + " N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
    std::vector<float> inp = lowp_rounded<L>(randn((size_t)N * C, 11)), w = lowp_rounded<L>(randn((size_t)OC * C, 12));
    std::vector<float> b = lowp_rounded<L>(randn(OC, 13)), dout = lowp_rounded<L>(randn((size_t)N * OC, 14));
    std::vector<float> out((size_t)N * OC), dinp = lowp_rounded<L>(randn((size_t)N * C, 15)), dw = randn((size_t)OC * C, 16), db = randn(OC, 17);
    L *d_inp = dev_upload(lowp_store<L>(inp)), *d_w = dev_upload(lowp_store<L>(w)), *d_b = dev_upload(lowp_store<L>(b));
    L *d_dout = dev_upload(lowp_store<L>(dout)), *d_out = dev_upload(lowp_store<L>(out)), *d_dinp = dev_upload(lowp_store<L>(dinp));
    float *d_dw = dev_upload(dw), *d_db = dev_upload(db);
    // the product rounded to L before its addend: the second reading (check_close_either)
    std::vector<float> prod((size_t)N * OC), out2((size_t)N * OC), dprod((size_t)N * C, 0.0f), dinp2 = dinp, dw0 = dw, db0 = db;
    matmul_forward(prod.data(), inp.data(), w.data(), (const float*)nullptr, N, C, OC);
    prod = lowp_rounded<L>(prod);
    for (size_t i = 0; i < out2.size(); i++) out2[i] = prod[i] + b[i % OC];
    matmul_backward(dprod.data(), dw0.data(), db0.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    dprod = lowp_rounded<L>(dprod);
    for (size_t i = 0; i < dinp2.size(); i++) dinp2[i] += dprod[i];
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    keel_cuda::matmul_forward(d_out, d_inp, d_w, d_b, N, C, OC);
    check_close_either("matmul_forward +bias" + sz, lowp_widen(dev_download(d_out, out.size())), out, out2, rtol, 1e-3);
    matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    keel_cuda::matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC);
    check_close_either("matmul_backward dinp" + sz, lowp_widen(dev_download(d_dinp, dinp.size())), dinp, dinp2, rtol, 1e-3);
    check_close("matmul_backward dweight (fp32)" + sz, dev_download(d_dw, dw.size()), dw, 1e-5, 1e-4);
    check_close("matmul_backward dbias (fp32)" + sz, dev_download(d_db, db.size()), db, 1e-5, 1e-4);
    for (L* p : {d_inp, d_w, d_b, d_dout, d_out, d_dinp}) dev_free(p);
    for (float* p : {d_dw, d_db}) dev_free(p);
}

// Operands at odd offsets (a layer's or a rank's slice of the flat buffer): the algorithm is chosen
// for the pointers' real alignment (the emulated cuBLASLt refuses a pointer less aligned than the
// algorithm's), and a bias under 16-byte alignment is added by keel's kernel instead of the epilogue.
static void test_misaligned(int N, int C, int OC) {
    std::string sz = " N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
    std::vector<float> inp = randn((size_t)N * C, 31), w = randn((size_t)OC * C, 32), b = randn(OC, 33), out((size_t)N * OC);
    DevBuf<float> d_inp(inp, 1), d_w(w, 3), d_b(b, 1), d_out(out, 2);  // 4-, 12-, 4- and 8-byte aligned
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    keel_cuda::matmul_forward(d_out.p, d_inp.p, d_w.p, d_b.p, N, C, OC);
    check_close("matmul_forward +bias, misaligned operands and bias" + sz, d_out.get(out.size()), out, 1e-5, 1e-4);
    DevBuf<float> a_inp(inp, 0), a_w(w, 0), a_out(out, 0);  // the same shape aligned: another algorithm, the same values
    keel_cuda::matmul_forward(a_out.p, a_inp.p, a_w.p, d_b.p, N, C, OC);
    check_close("matmul_forward +bias, aligned operands, misaligned bias" + sz, a_out.get(out.size()), out, 1e-5, 1e-4);
}

// ---- the GeLU ops -------------------------------------------------------------------------------------
// What one call asked of the GPU (the emulator's step profile; nothing on a GPU build, where the
// checks that use it are skipped).
struct GpuWork {
    uint64_t gemms = 0, launches = 0, memsets = 0;
};
static GpuWork gpu_work() {
    GpuWork w;
#ifdef KEEL_CUDA_EMULATION
    w.gemms = emu::profile().gemm_calls;
    w.launches = emu::profile().launches;
    w.memsets = emu::profile().memsets;
#endif
    return w;
}
[[maybe_unused]] static void check_work(const std::string& what, GpuWork before, int gemms, int launches, int memsets) {
#ifdef KEEL_CUDA_EMULATION
    GpuWork a = gpu_work();
    uint64_t g = a.gemms - before.gemms, l = a.launches - before.launches, m = a.memsets - before.memsets;
    check_true(what + ": " + std::to_string(g) + " GEMM(s), " + std::to_string(l) + " launch(es), " + std::to_string(m) + " memset(s) (want " +
                   std::to_string(gemms) + ", " + std::to_string(launches) + ", " + std::to_string(memsets) + ")",
               (int)g == gemms && (int)l == launches && (int)m == memsets);
#endif
}

// The GeLU that is not GPT-2's (erf, the exact one) and its derivative: a negative control, off from
// the tanh approximation by up to 5e-4 (x ≈ -2.7) and its derivative by up to 9e-4 (x ≈ 2).
static float gelu_erf(float x) { return (float)(0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)))); }
static float gelu_erf_grad(float x) {
    return (float)(0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * (double)x * x) / 2.5066282746310002);  // √(2π)
}
static double sum_sq_err(const std::vector<float>& got, const std::vector<float>& want) {
    double s = 0;
    for (size_t i = 0; i < got.size(); i++) s += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
    return s;
}
namespace keel_cuda {
// Zeroes `bytes` on the stream keel's ops run on, as the model does before an accumulating op.
static void zero_on_ops_stream(void* p, size_t bytes) { CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, MAIN_STREAM)); }
}  // namespace keel_cuda
// Two device buffers of n elements hold the same bytes.
template <typename T> static bool same_device_bytes(const T* a, const T* b, size_t n) {
    std::vector<T> x = dev_download(a, n), y = dev_download(b, n);
    return n == 0 || memcmp(x.data(), y.data(), n * sizeof(T)) == 0;
}

// The forward and backward GeLU ops, pre-activations of order 1 (W scaled by 1/√C) so GeLU's curved
// part is exercised. The op's shapes: forward act, pre (N,OC) from inp (N,C); backward dpre (N,C)
// from dout (N,OC), at pre (N,C). fp32: fused against the CPU twin, tight (the fp32 tolerance above;
// the erf GeLU misses it); fused only where the aux leading dimension (OC forward, C backward) is a
// multiple of 8, else the unfused ops run — counted on the emulator either way. dpre is written, not
// accumulated (its device buffer starts as garbage). Then the unfused paths (fuse off, a bias under
// 16-byte alignment) give exactly the bytes of today's separate ops.
static void test_gelu_fp32(int N, int C, int OC) {
    std::string sz = " N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
    std::vector<float> inp = randn((size_t)N * C, 41), w = randn((size_t)OC * C, 42, 1.0 / std::sqrt((double)C)), b = randn(OC, 43, 0.5);
    std::vector<float> pre((size_t)N * OC), act((size_t)N * OC), pre_nb((size_t)N * OC), act_nb((size_t)N * OC);
    matmul_forward_gelu(act.data(), pre.data(), inp.data(), w.data(), b.data(), N, C, OC, true);
    matmul_forward_gelu(act_nb.data(), pre_nb.data(), inp.data(), w.data(), (const float*)nullptr, N, C, OC, true);  // a dropped bias
    std::vector<float> act_erf(act.size());
    for (size_t i = 0; i < act.size(); i++) act_erf[i] = gelu_erf(pre[i]);
    DevBuf<float> d_inp(inp, 0), d_w(w, 0), d_b(b, 0), d_pre(randn(pre.size(), 48), 0), d_act(randn(act.size(), 49), 0);
    bool fwd_fused = OC % 8 == 0;
    GpuWork w0 = gpu_work();
    keel_cuda::matmul_forward_gelu(d_act.p, d_pre.p, d_inp.p, d_w.p, d_b.p, N, C, OC, true);
    check_work(std::string("matmul_forward_gelu ") + (fwd_fused ? "fused: one GEMM, no kernel" : "OC % 8 != 0: GEMM + GeLU kernel") + sz, w0, 1,
               fwd_fused ? 0 : 1, 0);
    std::vector<float> got_pre = d_pre.get(pre.size()), got_act = d_act.get(act.size());
    check_close("matmul_forward_gelu pre (the aux output)" + sz, got_pre, pre, 1e-5, 1e-4);
    check_close("matmul_forward_gelu act" + sz, got_act, act, 1e-5, 1e-4);
    expect_fail("act against the erf GeLU" + sz, [&] { return check_close("act", got_act, act_erf, 1e-5, 1e-4); });
    expect_fail("act against a dropped bias" + sz, [&] { return check_close("act", got_act, act_nb, 1e-5, 1e-4); });
    DevBuf<float> m_b(b, 1);  // a bias under 16-byte alignment: the unfused ops, keel's kernel adding the bias
    w0 = gpu_work();
    keel_cuda::matmul_forward_gelu(d_act.p, d_pre.p, d_inp.p, d_w.p, m_b.p, N, C, OC, true);
    check_work("matmul_forward_gelu, bias under 16-byte alignment: GEMM, bias kernel, GeLU kernel" + sz, w0, 1, 2, 0);
    check_close("matmul_forward_gelu act, bias under 16-byte alignment" + sz, d_act.get(act.size()), act, 1e-5, 1e-4);

    // backward at pre-activations bpre (N,C), through the projection W (OC,C)
    std::vector<float> bpre = randn((size_t)N * C, 47, 1.5), bact((size_t)N * C), dout = randn((size_t)N * OC, 44);
    gelu_forward(bact.data(), bpre.data(), bact.size());
    std::vector<float> dw = randn((size_t)OC * C, 45), db = randn(OC, 46), dpre((size_t)N * C), dact((size_t)N * C);
    DevBuf<float> d_dout(dout, 0), d_bpre(bpre, 0), d_bact(bact, 0), d_dw(dw, 0), d_db(db, 0);
    DevBuf<float> d_dpre(randn(dpre.size(), 50), 0), d_dact(randn(dact.size(), 51), 0);
    matmul_backward_gelu(dpre.data(), dact.data(), dw.data(), db.data(), dout.data(), bact.data(), w.data(), bpre.data(), N, C, OC, true);
    std::vector<float> dpre_erf(dpre.size());
    for (size_t i = 0; i < dpre.size(); i++) dpre_erf[i] = dact[i] * gelu_erf_grad(bpre[i]);
    bool bwd_fused = C % 8 == 0;
    w0 = gpu_work();
    keel_cuda::matmul_backward_gelu(d_dpre.p, d_dact.p, d_dw.p, d_db.p, d_dout.p, d_bact.p, d_w.p, d_bpre.p, N, C, OC, true);
    // fused: the DGELU GEMM, the dweight GEMM and the bias gradient's 2 kernels; unfused: the dinp GEMM
    // in the DGELU one's place, and the GeLU kernel and 2 memsets besides
    check_work(std::string("matmul_backward_gelu ") + (bwd_fused ? "fused: no GeLU kernel, nothing zeroed" : "C % 8 != 0: unfused") + sz, w0, 2,
               bwd_fused ? 2 : 3, bwd_fused ? 0 : 2);
    std::vector<float> got_dpre = d_dpre.get(dpre.size());
    check_close("matmul_backward_gelu dpre (written over garbage)" + sz, got_dpre, dpre, 1e-5, 1e-4);
    check_close("matmul_backward_gelu dweight" + sz, d_dw.get(dw.size()), dw, 1e-5, 1e-4);
    check_close("matmul_backward_gelu dbias" + sz, d_db.get(db.size()), db, 1e-5, 1e-4);
    expect_fail("dpre against the erf GeLU's derivative" + sz, [&] { return check_close("dpre", got_dpre, dpre_erf, 1e-5, 1e-4); });
    expect_fail("dpre without GeLU's derivative" + sz, [&] { return check_close("dpre", got_dpre, dact, 1e-5, 1e-4); });
}

// Low precision (L = bf16, fp16): inputs rounded to L, the reference the CPU twin's fp32 on those
// values. Fused, act and dpre are one rounding of fp32 values (check_lowp, its negative controls, a
// dropped bias and a missing derivative caught); unfused they are two roundings, so the fused
// result's squared error against fp32 is the smaller (cuda/matmul.cuh's numerics note). pre is one
// rounding either way. Then fuse off, and fuse on with a bias under 16-byte alignment (the epilogue
// refused; keel's bias kernel adds it), give exactly the bytes of today's separate ops.
template <typename L> static void test_gelu_lowp(const char* name, int N, int C, int OC) {
    std::string sz = std::string(" ") + name + " N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
    std::vector<float> inp = lowp_rounded<L>(randn((size_t)N * C, 61)), w = lowp_rounded<L>(randn((size_t)OC * C, 62, 1.0 / std::sqrt((double)C)));
    std::vector<float> b = lowp_rounded<L>(randn(OC, 63, 0.5)), zeros((size_t)N * OC);
    std::vector<float> pre((size_t)N * OC), act((size_t)N * OC), pre_nb((size_t)N * OC), act_nb((size_t)N * OC);
    matmul_forward_gelu(act.data(), pre.data(), inp.data(), w.data(), b.data(), N, C, OC, true);
    matmul_forward_gelu(act_nb.data(), pre_nb.data(), inp.data(), w.data(), (const float*)nullptr, N, C, OC, true);
    DevBuf<L> d_inp(inp, 0), d_w(w, 0), d_b(b, 0), d_pre(zeros, 0), d_act(zeros, 0), u_pre(zeros, 0), u_act(zeros, 0);
    keel_cuda::matmul_forward_gelu(d_act.p, d_pre.p, d_inp.p, d_w.p, d_b.p, N, C, OC, true);
    keel_cuda::matmul_forward_gelu(u_act.p, u_pre.p, d_inp.p, d_w.p, d_b.p, N, C, OC, false);
    std::vector<float> got_act = d_act.get(act.size()), got_unfused = u_act.get(act.size());
    check_lowp("matmul_forward_gelu pre, fused" + sz, d_pre.get(pre.size()), pre);
    check_lowp("matmul_forward_gelu act, fused" + sz, got_act, act);
    check_lowp("matmul_forward_gelu act, unfused" + sz, got_unfused, act);
    lowp_negative_controls("matmul_forward_gelu act" + sz, got_act, act);
    expect_fail("act against a dropped bias" + sz, [&] { return check_lowp("act", got_act, act_nb); });
    double e_fused = sum_sq_err(got_act, act), e_unfused = sum_sq_err(got_unfused, act);
    check_true("fused act one rounding closer to fp32: squared error " + std::to_string(e_fused) + " < unfused " + std::to_string(e_unfused) + sz,
               e_fused < e_unfused);
    // today's ops, separately: the unfused paths must give their bytes
    DevBuf<L> t_pre(zeros, 0), t_act(zeros, 0), m_b(b, 1), m_pre(zeros, 0), m_act(zeros, 0), tm_pre(zeros, 0), tm_act(zeros, 0);
    keel_cuda::matmul_forward(t_pre.p, d_inp.p, d_w.p, d_b.p, N, C, OC);
    keel_cuda::gelu_forward(t_act.p, t_pre.p, act.size());
    check_true("matmul_forward_gelu, fuse off: the bytes of matmul_forward + gelu_forward" + sz,
               same_device_bytes(u_pre.p, t_pre.p, pre.size()) && same_device_bytes(u_act.p, t_act.p, act.size()));
    GpuWork w0 = gpu_work();
    keel_cuda::matmul_forward_gelu(m_act.p, m_pre.p, d_inp.p, d_w.p, m_b.p, N, C, OC, true);
    check_work("matmul_forward_gelu, bias under 16-byte alignment: GEMM, bias kernel, GeLU kernel" + sz, w0, 1, 2, 0);
    keel_cuda::matmul_forward(tm_pre.p, d_inp.p, d_w.p, m_b.p, N, C, OC);
    keel_cuda::gelu_forward(tm_act.p, tm_pre.p, act.size());
    check_true("matmul_forward_gelu, bias under 16-byte alignment: the bytes of matmul_forward + gelu_forward" + sz,
               same_device_bytes(m_pre.p, tm_pre.p, pre.size()) && same_device_bytes(m_act.p, tm_act.p, act.size()));

    // backward: pre-activations as L stores them, the projection's input their GeLU as L stores it
    std::vector<float> bpre = lowp_rounded<L>(randn((size_t)N * C, 67, 1.5)), bact((size_t)N * C), dout = lowp_rounded<L>(randn((size_t)N * OC, 64));
    gelu_forward(bact.data(), bpre.data(), bact.size());
    bact = lowp_rounded<L>(bact);
    std::vector<float> dw0 = randn((size_t)OC * C, 65), db0 = randn(OC, 66), dw = dw0, db = db0, dpre((size_t)N * C), dact((size_t)N * C);
    matmul_backward_gelu(dpre.data(), dact.data(), dw.data(), db.data(), dout.data(), bact.data(), w.data(), bpre.data(), N, C, OC, true);
    DevBuf<L> d_dout(dout, 0), d_bpre(bpre, 0), d_bact(bact, 0), d_dpre(randn(dpre.size(), 68), 0), d_dact(zeros, 0);
    DevBuf<L> u_dpre(randn(dpre.size(), 69), 0), u_dact(randn(dact.size(), 70), 0), t_dpre(zeros, 0), t_dact(zeros, 0);
    DevBuf<float> d_dw(dw0, 0), d_db(db0, 0), u_dw(dw0, 0), u_db(db0, 0), t_dw(dw0, 0), t_db(db0, 0);
    keel_cuda::matmul_backward_gelu(d_dpre.p, d_dact.p, d_dw.p, d_db.p, d_dout.p, d_bact.p, d_w.p, d_bpre.p, N, C, OC, true);
    keel_cuda::matmul_backward_gelu(u_dpre.p, u_dact.p, u_dw.p, u_db.p, d_dout.p, d_bact.p, d_w.p, d_bpre.p, N, C, OC, false);
    std::vector<float> got_dpre = d_dpre.get(dpre.size()), got_udpre = u_dpre.get(dpre.size());
    check_lowp("matmul_backward_gelu dpre, fused" + sz, got_dpre, dpre);
    check_lowp("matmul_backward_gelu dpre, unfused" + sz, got_udpre, dpre);
    check_f32_of_lowp("matmul_backward_gelu dweight (fp32), fused" + sz, d_dw.get(dw.size()), dw);
    check_f32_of_lowp("matmul_backward_gelu dbias (fp32), fused" + sz, d_db.get(db.size()), db);
    lowp_negative_controls("matmul_backward_gelu dpre" + sz, got_dpre, dpre);
    expect_fail("dpre without GeLU's derivative" + sz, [&] { return check_lowp("dpre", got_dpre, dact); });
    e_fused = sum_sq_err(got_dpre, dpre);
    e_unfused = sum_sq_err(got_udpre, dpre);
#ifdef KEEL_CUDA_EMULATION
    check_true("fused dpre one rounding closer to fp32: squared error " + std::to_string(e_fused) + " < unfused " + std::to_string(e_unfused) + sz,
               e_fused < e_unfused);
#else  // an H200's DGELU epilogue (cuBLASLt 13.0) was seen to take the product already rounded to bf16, as
       // the unfused path does: the two errors agreed to 5 digits, the fused one a rounding larger
    check_true("fused dpre as close to fp32 as unfused (within 0.1%): squared error " + std::to_string(e_fused) + " vs unfused " +
                   std::to_string(e_unfused) + sz,
               e_fused <= 1.001 * e_unfused);
#endif
    size_t bytes = dpre.size() * sizeof(L);
    keel_cuda::zero_on_ops_stream(t_dact.p, bytes);
    keel_cuda::matmul_backward(t_dact.p, t_dw.p, t_db.p, d_dout.p, d_bact.p, d_w.p, N, C, OC);
    keel_cuda::zero_on_ops_stream(t_dpre.p, bytes);
    keel_cuda::gelu_backward(t_dpre.p, t_dact.p, d_bpre.p, dpre.size());
    check_true("matmul_backward_gelu, fuse off: the bytes of zero, matmul_backward, zero, gelu_backward" + sz,
               same_device_bytes(u_dpre.p, t_dpre.p, dpre.size()) && same_device_bytes(u_dact.p, t_dact.p, dact.size()) &&
                   same_bytes_f32(u_dw.get(dw.size()), t_dw.get(dw.size())) && same_bytes_f32(u_db.get(db.size()), t_db.get(db.size())));
}

#ifdef KEEL_CUDA_EMULATION
// The emulated cuBLASLt holds a GeLU epilogue to the library's documented rules
// (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD divisible by 8 and ≥ D's rows) and refuses it with batches
// (not implemented, as a bias epilogue): one raw fp32 m×n×k product, D (m,n), aux (aux_ld,n).
static cublasStatus_t raw_gelu_matmul(uint32_t epi, int m, int n, int k, int64_t aux_ld, int32_t batch) {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t l[3];
    float* a = dev_upload(randn((size_t)m * k * batch, 71));
    float* bm = dev_upload(randn((size_t)k * n * batch, 72));
    float* d = dev_upload(std::vector<float>((size_t)m * n * batch));
    float* aux = dev_upload(randn((size_t)(aux_ld > m ? aux_ld : m) * n * batch, 73));
    float* bias = dev_upload(randn(m, 74));
    CUBLAS_CHECK(cublasLtCreate(&h));
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    const int rows[3] = {m, k, m}, cols[3] = {k, n, n};
    for (int i = 0; i < 3; i++) {
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l[i], CUDA_R_32F, rows[i], cols[i], rows[i]));
        if (batch > 1) {
            int64_t stride = (int64_t)rows[i] * cols[i];
            CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
            CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
        }
    }
    float alpha = 1.0f, beta = 0.0f;
    fflush(stdout);
    cublasStatus_t st = cublasLtMatmul(h, desc, &alpha, a, l[0], bm, l[1], &beta, d, l[2], d, l[2], nullptr, nullptr, 0, (cudaStream_t)0);
    for (int i = 0; i < 3; i++) cublasLtMatrixLayoutDestroy(l[i]);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
    for (float* p : {a, bm, d, aux, bias}) dev_free(p);
    return st;
}
// The emulated cuBLASLt refuses what the real library refuses whatever the algorithm: one raw fp32
// 16×3×8 product with a bias epilogue; A `a_shift` bytes and the bias `bias_shift` floats off their
// allocations' 256-byte alignment; with `heuristic`, the algorithm the heuristic chose for a 64 KiB
// workspace and the call given `workspace` bytes of it; out_f32_of_bf16: bf16 inputs into an fp32 D.
static cublasStatus_t raw_bias_matmul(size_t a_shift, int bias_shift, bool heuristic, size_t workspace, bool out_f32_of_bf16 = false) {
    const int m = 16, n = 3, k = 8;
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t l[3];
    char* a = (char*)dev_upload(randn((size_t)m * k + 4, 75));
    float *bm = dev_upload(randn((size_t)k * n, 76)), *d = dev_upload(std::vector<float>((size_t)m * n)), *bias = dev_upload(randn(m + 4, 77)) + bias_shift;
    float* ws = dev_upload(std::vector<float>(16384));
    uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
    CUBLAS_CHECK(cublasLtCreate(&h));
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const int rows[3] = {m, k, m}, cols[3] = {k, n, n};
    for (int i = 0; i < 3; i++) CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l[i], out_f32_of_bf16 && i < 2 ? CUDA_R_16BF : CUDA_R_32F, rows[i], cols[i], rows[i]));
    cublasLtMatmulHeuristicResult_t heur;
    if (heuristic) {
        cublasLtMatmulPreference_t pref;
        uint64_t max_ws = 65536;
        int found = 0;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws));
        CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h, desc, l[0], l[1], l[2], l[2], pref, 1, &heur, &found));
        cublasLtMatmulPreferenceDestroy(pref);
    }
    float alpha = 1.0f, beta = 0.0f;
    fflush(stdout);
    cublasStatus_t st = cublasLtMatmul(h, desc, &alpha, a + a_shift, l[0], bm, l[1], &beta, d, l[2], d, l[2], heuristic ? &heur.algo : nullptr, ws,
                                       workspace, (cudaStream_t)0);
    cudaDeviceSynchronize();
    for (int i = 0; i < 3; i++) cublasLtMatrixLayoutDestroy(l[i]);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
    for (void* p : {(void*)a, (void*)bm, (void*)d, (void*)(bias - bias_shift), (void*)ws}) dev_free(p);
    return st;
}
static void test_emulated_library_rules() {
    check_true("emulated cuBLASLt: an aligned bias product with the workspace its algorithm asked for accepted",
               raw_bias_matmul(0, 0, true, 65536) == CUBLAS_STATUS_SUCCESS);
    check_true("emulated cuBLASLt: an fp32 operand 2 bytes off its element alignment refused", raw_bias_matmul(2, 0, false, 0) != CUBLAS_STATUS_SUCCESS);
    check_true("emulated cuBLASLt: a bias epilogue pointer 4 bytes past 16-byte alignment refused", raw_bias_matmul(0, 1, false, 0) != CUBLAS_STATUS_SUCCESS);
    check_true("emulated cuBLASLt: less workspace than the algorithm asked for refused", raw_bias_matmul(0, 0, true, 4096) != CUBLAS_STATUS_SUCCESS);
    check_true("emulated cuBLASLt: a bias epilogue from bf16 inputs into an fp32 output refused", raw_bias_matmul(0, 0, false, 0, true) != CUBLAS_STATUS_SUCCESS);
}
static void test_emulated_gelu_rules() {
    for (uint32_t epi : {(uint32_t)CUBLASLT_EPILOGUE_GELU_AUX_BIAS, (uint32_t)CUBLASLT_EPILOGUE_DGELU}) {
        std::string e = epi == CUBLASLT_EPILOGUE_DGELU ? "DGELU" : "GELU_AUX_BIAS";
        check_true("emulated cuBLASLt " + e + ": aux ld 16 for 16 rows accepted", raw_gelu_matmul(epi, 16, 3, 5, 16, 1) == CUBLAS_STATUS_SUCCESS);
        check_true("emulated cuBLASLt " + e + ": aux ld 24 (> rows) accepted", raw_gelu_matmul(epi, 16, 3, 5, 24, 1) == CUBLAS_STATUS_SUCCESS);
        check_true("emulated cuBLASLt " + e + ": aux ld 17 (not divisible by 8) refused", raw_gelu_matmul(epi, 16, 3, 5, 17, 1) != CUBLAS_STATUS_SUCCESS);
        check_true("emulated cuBLASLt " + e + ": aux ld 8 (< 16 rows) refused", raw_gelu_matmul(epi, 16, 3, 5, 8, 1) != CUBLAS_STATUS_SUCCESS);
        check_true("emulated cuBLASLt " + e + ": with batches refused", raw_gelu_matmul(epi, 16, 3, 5, 16, 2) != CUBLAS_STATUS_SUCCESS);
    }
}
#endif

// dinp_write: dinp = dout·W written (beta = 0) without reading it — the model's backward passes it
// instead of zeroing the buffer first. From a NaN-filled dinp it must equal the accumulating backward
// from a zeroed one (a NaN read would stay NaN); dweight and dbias still accumulate.
template <typename L> static void test_dinp_write(const char* name, int N, int C, int OC) {
    std::string sz = std::string(" ") + name + " N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
    std::vector<float> inp = lowp_rounded<L>(randn((size_t)N * C, 51)), w = lowp_rounded<L>(randn((size_t)OC * C, 52));
    std::vector<float> dout = lowp_rounded<L>(randn((size_t)N * OC, 53)), dw = randn((size_t)OC * C, 54), db = randn(OC, 55);
    L *d_inp = dev_upload(lowp_store<L>(inp)), *d_w = dev_upload(lowp_store<L>(w)), *d_dout = dev_upload(lowp_store<L>(dout));
    L *d_acc = dev_upload(lowp_store<L>(std::vector<float>((size_t)N * C, 0.0f))), *d_wr = dev_upload(lowp_store<L>(std::vector<float>((size_t)N * C, NAN)));
    float *d_dw1 = dev_upload(dw), *d_db1 = dev_upload(db), *d_dw2 = dev_upload(dw), *d_db2 = dev_upload(db);
    keel_cuda::matmul_backward(d_acc, d_dw1, d_db1, d_dout, d_inp, d_w, N, C, OC);
    keel_cuda::matmul_backward(d_wr, d_dw2, d_db2, d_dout, d_inp, d_w, N, C, OC, true);
    check_close("matmul_backward dinp_write over NaN = accumulating into zeros" + sz, lowp_widen(dev_download(d_wr, (size_t)N * C)),
                lowp_widen(dev_download(d_acc, (size_t)N * C)), 0.0, 0.0);
    std::vector<float> dw1 = dev_download(d_dw1, dw.size()), dw2 = dev_download(d_dw2, dw.size());
    check_true("matmul_backward dinp_write: dweight still accumulated, the same bytes" + sz, memcmp(dw1.data(), dw2.data(), dw1.size() * 4) == 0);
    for (void* p : {(void*)d_inp, (void*)d_w, (void*)d_dout, (void*)d_acc, (void*)d_wr, (void*)d_dw1, (void*)d_db1, (void*)d_dw2, (void*)d_db2}) dev_free(p);
}

// dweight_write: dweight and dbias written (beta = 0, the bias sum stored) — the first micro-batch
// of an iteration, instead of zeroing the gradients first. From NaN-filled dweight/dbias it must give
// the bytes of the accumulating backward from zeroed ones, on the GPU and on the CPU (zero, then add);
// through matmul_backward_gelu (fused and unfused) too.
template <typename L> static void test_dweight_write(const char* name, int N, int C, int OC) {
    std::string sz = std::string(" ") + name + " N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
    size_t NC = (size_t)N * C, OCC = (size_t)OC * C;
    std::vector<float> inp = lowp_rounded<L>(randn(NC, 61)), w = lowp_rounded<L>(randn(OCC, 62)), dout = lowp_rounded<L>(randn((size_t)N * OC, 63));
    L *d_inp = dev_upload(lowp_store<L>(inp)), *d_w = dev_upload(lowp_store<L>(w)), *d_dout = dev_upload(lowp_store<L>(dout));
    L *d_dinp = dev_upload(lowp_store<L>(std::vector<float>(NC, 0.0f))), *d_pre = dev_upload(lowp_store<L>(randn(NC, 64)));
    for (int gelu = 0; gelu < 3; gelu++) {  // 0: matmul_backward, 1: matmul_backward_gelu fused, 2: unfused
        std::string op = gelu == 0 ? "matmul_backward" : gelu == 1 ? "matmul_backward_gelu (fused)" : "matmul_backward_gelu (unfused)";
        float *d_dw0 = dev_upload(std::vector<float>(OCC, 0.0f)), *d_db0 = dev_upload(std::vector<float>(OC, 0.0f));
        float *d_dw = dev_upload(std::vector<float>(OCC, NAN)), *d_db = dev_upload(std::vector<float>(OC, NAN));
        L* d_scratch = dev_upload(lowp_store<L>(std::vector<float>(NC, 0.0f)));
        for (int write = 0; write < 2; write++) {
            float *dw = write ? d_dw : d_dw0, *db = write ? d_db : d_db0;
            if (gelu == 0) keel_cuda::matmul_backward(d_dinp, dw, db, d_dout, d_inp, d_w, N, C, OC, true, write == 1);
            else keel_cuda::matmul_backward_gelu(d_dinp, d_scratch, dw, db, d_dout, d_inp, d_w, d_pre, N, C, OC, gelu == 1, write == 1);
        }
        std::vector<float> w0 = dev_download(d_dw0, OCC), w1 = dev_download(d_dw, OCC), b0 = dev_download(d_db0, OC), b1 = dev_download(d_db, OC);
        check_true(op + " dweight_write over NaN = accumulating into zeros, the same bytes (dweight, dbias)" + sz,
                   memcmp(w0.data(), w1.data(), OCC * 4) == 0 && memcmp(b0.data(), b1.data(), (size_t)OC * 4) == 0);
        for (void* p : {(void*)d_dw0, (void*)d_db0, (void*)d_dw, (void*)d_db, (void*)d_scratch}) dev_free(p);
    }
    if constexpr (std::is_same_v<L, float>) {  // the CPU op: written = zeroed, then added
        std::vector<float> dinp(NC), dw0(OCC, 0.0f), db0(OC, 0.0f), dw1(OCC, NAN), db1(OC, NAN);
        matmul_backward(dinp.data(), dw0.data(), db0.data(), dout.data(), inp.data(), w.data(), N, C, OC, true);
        matmul_backward(dinp.data(), dw1.data(), db1.data(), dout.data(), inp.data(), w.data(), N, C, OC, true, true);
        check_true("CPU matmul_backward dweight_write over NaN = accumulating into zeros, the same bytes" + sz,
                   memcmp(dw0.data(), dw1.data(), OCC * 4) == 0 && memcmp(db0.data(), db1.data(), (size_t)OC * 4) == 0);
    }
    for (void* p : {(void*)d_inp, (void*)d_w, (void*)d_dout, (void*)d_dinp, (void*)d_pre}) dev_free(p);
}

int main() {
    test_dinp_write<float>("fp32", 37, 48, 144);
    test_dinp_write<__nv_bfloat16>("bf16", 64, 260, 33);
    test_dweight_write<float>("fp32", 37, 48, 144);
    test_dweight_write<__nv_bfloat16>("bf16", 300, 64, 40);
#ifdef KEEL_CUDA_EMULATION
    test_emulated_gelu_rules();
    test_emulated_library_rules();
#endif
    // fused both ways; OC % 8 ≠ 0 (forward unfused); C % 8 ≠ 0 (backward unfused)
    test_gelu_fp32(37, 48, 144);
    test_gelu_fp32(19, 64, 36);
    test_gelu_fp32(21, 20, 40);
    test_gelu_lowp<__nv_bfloat16>("bf16", 37, 48, 144);
    test_gelu_lowp<__half>("fp16", 37, 48, 144);
    test_misaligned(37, 48, 144);
    test_misaligned(5, 7, 9);
    test_low_precision<__nv_bfloat16>("bf16", 1.0 / 128, 37, 48, 144);
    test_low_precision<__nv_bfloat16>("bf16", 1.0 / 128, 64, 260, 33);
    test_low_precision<__half>("fp16", 1.0 / 512, 37, 48, 144);
    test_low_precision<__half>("fp16", 1.0 / 512, 64, 260, 33);
    // the bias gradient's two stages: several row chunks (DBIAS_ROWS = 256), a partial last chunk,
    // OC a multiple of the 16-byte vector (8 bf16, 4 fp32) and not
    test_low_precision<__nv_bfloat16>("bf16", 1.0 / 128, 600, 16, 72);
    test_low_precision<__nv_bfloat16>("bf16", 1.0 / 128, 1000, 8, 37);
    struct Shape { int N, C, OC; };
    for (Shape s : {Shape{1, 1, 1}, Shape{3, 5, 7}, Shape{37, 48, 144}, Shape{64, 260, 33}, Shape{777, 8, 36}, Shape{513, 4, 5}}) {
        int N = s.N, C = s.C, OC = s.OC;
        std::string sz = " N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
        std::vector<float> inp = randn((size_t)N * C, 1), w = randn((size_t)OC * C, 2), b = randn(OC, 3), dout = randn((size_t)N * OC, 4);
        std::vector<float> out((size_t)N * OC), dinp = randn((size_t)N * C, 5), dw = randn((size_t)OC * C, 6), db = randn(OC, 7);
        float *d_inp = dev_upload(inp), *d_w = dev_upload(w), *d_b = dev_upload(b), *d_dout = dev_upload(dout), *d_out = dev_upload(out);
        float *d_dinp = dev_upload(dinp), *d_dw = dev_upload(dw), *d_db = dev_upload(db);
        for (bool bias : {true, false}) {
            matmul_forward(out.data(), inp.data(), w.data(), bias ? b.data() : nullptr, N, C, OC);
            keel_cuda::matmul_forward(d_out, d_inp, d_w, bias ? d_b : nullptr, N, C, OC);
            check_close(std::string("matmul_forward") + (bias ? " +bias" : "") + sz, dev_download(d_out, out.size()), out, 1e-5, 1e-4);
        }
        matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
        keel_cuda::matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC);
        check_close("matmul_backward dinp" + sz, dev_download(d_dinp, dinp.size()), dinp, 1e-5, 1e-4);
        check_close("matmul_backward dweight" + sz, dev_download(d_dw, dw.size()), dw, 1e-5, 1e-4);
        check_close("matmul_backward dbias" + sz, dev_download(d_db, db.size()), db, 1e-5, 1e-4);
        std::vector<float> first = dev_download(d_dw, dw.size());
        CUDA_CHECK(cudaMemcpy(d_dw, dw.data(), dw.size() * 4, cudaMemcpyHostToDevice));
        std::vector<float> dw0 = randn((size_t)OC * C, 6);
        CUDA_CHECK(cudaMemcpy(d_dw, dw0.data(), dw.size() * 4, cudaMemcpyHostToDevice));
        keel_cuda::matmul_backward((float*)nullptr, d_dw, (float*)nullptr, d_dout, d_inp, d_w, N, C, OC);
        std::vector<float> again = dev_download(d_dw, dw.size());
        check_true("matmul_backward dweight twice: identical bytes" + sz, memcmp(first.data(), again.data(), first.size() * 4) == 0);
        for (float* p : {d_inp, d_w, d_b, d_dout, d_out, d_dinp, d_dw, d_db}) dev_free(p);
    }
    return cuda_test_finish();
}
