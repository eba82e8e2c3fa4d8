// plant_driver — runs a few of keel's real CUDA ops once, on small shapes, under the CPU emulation,
// for test/test_emu_sanitize.sh: that script compiles it against a scratch copy of llmc/ in which one
// defect is planted (a removed barrier, a read past a shared array, ...) and requires the emulator's
// detectors to stop it with a message naming the defect. Unplanted, every mode runs clean and exits 0.
//   plant_driver sumsq    keel_cuda::sumsq_f64 (block_sum in shared memory) vs the sum on the host
//   plant_driver dbias    keel_cuda::matmul_backward's bias gradient (a 2-D shared array)
//   plant_driver flash    keel_cuda::flash_attention_forward, bf16 (ldmatrix, cp.async, __syncwarp); prints
//                         a hash of the output, which must not depend on KEEL_EMU_SCHEDULE
//   plant_driver matmul   keel_cuda::matmul_forward with a bias slice at an odd offset (cuBLASLt)
//   plant_driver overlap  a product on one stream, its input copied on another (a cross-stream wait)
//   plant_driver layernorm keel_cuda::layernorm_backward, bf16: its bias gradient vs the host's sums
// Built with -DPLANT_ONLY=MODE (MODE one of the six), it has that mode alone: a planted copy is built
// for the one mode it runs, so the compiler instantiates only that op's kernels.
#include <cstring>

#include "llmc/cuda/adamw.cuh"
#include "llmc/cuda/flash_attention.cuh"
#include "llmc/cuda/layernorm.cuh"
#include "llmc/cuda/matmul.cuh"
#include "test/cuda_test.h"

// WANTS(m): mode m is built (every mode, or PLANT_ONLY's alone); a preprocessor test, so that an
// unbuilt mode's kernels are never instantiated
#define PLANT_MODE_sumsq 1
#define PLANT_MODE_dbias 2
#define PLANT_MODE_flash 3
#define PLANT_MODE_matmul 4
#define PLANT_MODE_overlap 5
#define PLANT_MODE_layernorm 6
#define PLANT_CAT2(a, b) a##b
#define PLANT_CAT(a, b) PLANT_CAT2(a, b)
#ifdef PLANT_ONLY
#if PLANT_CAT(PLANT_MODE_, PLANT_ONLY) == 0  // (an unknown name is 0 in #if: no mode at all would be built)
#error "PLANT_ONLY names no mode of plant_driver (sumsq, dbias, flash, matmul, overlap, layernorm)"
#endif
#define WANTS(m) (PLANT_CAT(PLANT_MODE_, PLANT_ONLY) == PLANT_MODE_##m)
#else
#define WANTS(m) 1
#endif

#if WANTS(sumsq)
static int run_sumsq() {
    std::vector<float> x = randn(5000, 1);
    float* d = dev_upload(x);
    double want = 0, got = keel_cuda::sumsq_f64(d, (int64_t)x.size());
    for (float v : x) want += (double)v * v;
    return check_true("sumsq_f64 = the host's sum", std::fabs(got - want) <= 1e-9 * want) ? 0 : 1;
}
#endif

#if WANTS(dbias)
static int run_dbias() {
    int N = 64, OC = 96;
    std::vector<float> dout = randn((size_t)N * OC, 2), want(OC, 0.0f);
    float *d_dout = dev_upload(dout), *d_dbias = dev_upload(std::vector<float>(OC, 0.0f));
    keel_cuda::matmul_backward<float>(nullptr, nullptr, d_dbias, d_dout, nullptr, nullptr, N, 1, OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) want[o] += dout[(size_t)n * OC + o];
    return check_close("matmul_backward dbias", dev_download(d_dbias, OC), want, 1e-5, 1e-5) ? 0 : 1;
}
#endif

#if WANTS(flash)
static int run_flash() {
    int B = 1, T = 80, C = 128, NH = 1;  // head size 128: 80 KiB of dynamic shared memory (the opt-in)
    AttentionOpts o;
    __nv_bfloat16* d_inp = dev_upload(lowp_store<__nv_bfloat16>(randn((size_t)B * T * 3 * C, 3)));
    __nv_bfloat16* d_out = dev_upload(lowp_store<__nv_bfloat16>(std::vector<float>((size_t)B * T * C, 0.0f)));
    float* d_lse = dev_upload(std::vector<float>((size_t)B * NH * T, 0.0f));
    keel_cuda::flash_attention_forward(d_out, d_lse, d_inp, B, T, C, NH, &o);
    std::vector<float> out = lowp_widen(dev_download(d_out, (size_t)B * T * C));
    bool finite = true;
    uint64_t h = 1469598103934665603ull;  // FNV-1a of the output's bytes: equal under every schedule
    for (float v : out) {
        finite = finite && std::isfinite(v);
        uint32_t bits;
        memcpy(&bits, &v, 4);
        h = (h ^ bits) * 1099511628211ull;
    }
    printf("flash_attention_forward output hash %016llx\n", (unsigned long long)h);
    return check_true("flash_attention_forward: finite outputs", finite) ? 0 : 1;
}
#endif

#if WANTS(matmul)
static int run_matmul() {
    int N = 16, C = 32, OC = 64;
    __nv_bfloat16* d_inp = dev_upload(lowp_store<__nv_bfloat16>(randn((size_t)N * C, 4)));
    __nv_bfloat16* d_w = dev_upload(lowp_store<__nv_bfloat16>(randn((size_t)OC * C, 5)));
    __nv_bfloat16* d_bias = dev_upload(lowp_store<__nv_bfloat16>(randn(OC + 1, 6)));
    __nv_bfloat16* d_out = dev_upload(lowp_store<__nv_bfloat16>(std::vector<float>((size_t)N * OC, 0.0f)));
    keel_cuda::matmul_forward(d_out, d_inp, d_w, d_bias + 1, N, C, OC);  // a bias slice 2 bytes past 16-byte alignment
    return check_true("matmul_forward with an unaligned bias ran", true) ? 0 : 1;
}
#endif

#if WANTS(overlap)
// x = inp·Wᵀ on keel's compute stream, then a copy of x on the communication stream after
// keel_stream_wait (llmc/cuda/stream.h, the call every overlapping exchange uses): the copy must be x.
static int run_overlap() {
    int N = 16, C = 32, OC = 64;
    float *d_inp = dev_upload(randn((size_t)N * C, 7)), *d_w = dev_upload(randn((size_t)OC * C, 8));
    float *d_x = dev_upload(std::vector<float>((size_t)N * OC, 0.0f)), *d_copy = dev_upload(std::vector<float>((size_t)N * OC, 0.0f));
    keel_cuda::matmul_forward<float>(d_x, d_inp, d_w, nullptr, N, C, OC);
    keel_stream_wait(keel_comm_stream(), keel_stream());
    CUDA_CHECK(cudaMemcpyAsync(d_copy, d_x, (size_t)N * OC * sizeof(float), cudaMemcpyDeviceToDevice, keel_comm_stream()));
    CUDA_CHECK(cudaStreamSynchronize(keel_comm_stream()));
    CUDA_CHECK(cudaStreamSynchronize(keel_stream()));
    std::vector<float> x = dev_download(d_x, (size_t)N * OC), copy = dev_download(d_copy, (size_t)N * OC);
    return check_true("the communication stream's copy of x = x (it waited for the compute stream)", x == copy) ? 0 : 1;
}
#endif

#if WANTS(layernorm)
// The fused residual + LayerNorm forward (the bf16 kernel of 68 registers a thread at sm_90, 256
// threads, no launch bound: the block the register check watches), its residual sum = a + b; then
// dbias of the LayerNorm backward = Σ over rows of dout.
static int run_layernorm() {
    int N = 64, C = 128;
    {
        std::vector<float> a = lowp_widen(lowp_store<__nv_bfloat16>(randn((size_t)N * C, 12)));
        std::vector<float> b = lowp_widen(lowp_store<__nv_bfloat16>(randn((size_t)N * C, 13))), sum((size_t)N * C);
        for (size_t i = 0; i < sum.size(); i++) sum[i] = lowp_widen(lowp_store<__nv_bfloat16>(std::vector<float>{a[i] + b[i]}))[0];
        __nv_bfloat16 *d_a = dev_upload(lowp_store<__nv_bfloat16>(a)), *d_b = dev_upload(lowp_store<__nv_bfloat16>(b));
        __nv_bfloat16 *d_res = dev_upload(lowp_store<__nv_bfloat16>(std::vector<float>((size_t)N * C))), *d_ln = dev_upload(lowp_store<__nv_bfloat16>(std::vector<float>((size_t)N * C)));
        __nv_bfloat16 *d_g = dev_upload(lowp_store<__nv_bfloat16>(std::vector<float>(C, 1.0f))), *d_beta = dev_upload(lowp_store<__nv_bfloat16>(std::vector<float>(C, 0.0f)));
        float *d_m = dev_upload(std::vector<float>(N)), *d_r = dev_upload(std::vector<float>(N));
        keel_cuda::residual_layernorm_forward(d_res, d_ln, d_m, d_r, d_a, d_b, d_g, d_beta, N, C);
        if (!check_close("residual_layernorm_forward residual", lowp_widen(dev_download(d_res, (size_t)N * C)), sum, 0, 0)) return 1;
    }
    std::vector<float> dout = lowp_widen(lowp_store<__nv_bfloat16>(randn((size_t)N * C, 9))), want(C, 0.0f);
    __nv_bfloat16* d_dout = dev_upload(lowp_store<__nv_bfloat16>(dout));
    __nv_bfloat16* d_inp = dev_upload(lowp_store<__nv_bfloat16>(randn((size_t)N * C, 10)));
    __nv_bfloat16* d_w = dev_upload(lowp_store<__nv_bfloat16>(randn(C, 11)));
    __nv_bfloat16* d_dinp = dev_upload(lowp_store<__nv_bfloat16>(std::vector<float>((size_t)N * C, 0.0f)));
    float *d_dw = dev_upload(std::vector<float>(C, 0.0f)), *d_db = dev_upload(std::vector<float>(C, 0.0f));
    float *d_mean = dev_upload(std::vector<float>(N, 0.0f)), *d_rstd = dev_upload(std::vector<float>(N, 1.0f));
    keel_cuda::layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) want[c] += dout[(size_t)n * C + c];
    return check_close("layernorm_backward dbias", dev_download(d_db, C), want, 1e-4, 1e-4) ? 0 : 1;
}
#endif

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
#if WANTS(sumsq)
    if (!strcmp(mode, "sumsq")) return run_sumsq();
#endif
#if WANTS(dbias)
    if (!strcmp(mode, "dbias")) return run_dbias();
#endif
#if WANTS(flash)
    if (!strcmp(mode, "flash")) return run_flash();
#endif
#if WANTS(matmul)
    if (!strcmp(mode, "matmul")) return run_matmul();
#endif
#if WANTS(overlap)
    if (!strcmp(mode, "overlap")) return run_overlap();
#endif
#if WANTS(layernorm)
    if (!strcmp(mode, "layernorm")) return run_layernorm();
#endif
    fprintf(stderr, "usage: plant_driver sumsq|dbias|flash|matmul|overlap|layernorm\n");
    return 2;
}
