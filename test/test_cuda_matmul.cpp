// test_cuda_matmul — cuda/matmul.cuh (cuBLASLt; under emulation the strict shim of
// test/cuda_emu/cublasLt.h) against cpu/matmul.h: forward with and without bias, backward
// accumulating into non-zero dinp/dweight/dbias, on shapes that are not multiples of anything.
// Tolerance: both sum in fp32, in different orders (and with different tiling on the GPU):
// relative 1e-5 of the row's magnitude, i.e. atol 1e-4 on O(1..10) values with K up to 260.
// bf16 and fp16 storage (--bf16, --fp16): inputs rounded to the type, the CPU's fp32 op on the same
// rounded values as reference. Outputs of the storage type (out, dinp) are rounded once: rtol
// 2^-7 (bf16) / 2^-9 (fp16) plus the fp32 tolerance. dweight and dbias are fp32 buffers accumulated
// in fp32 (DESIGN §3): they keep the fp32 tolerance, which a gradient rounded to bf16 would miss.
#include "llmc/cpu/matmul.h"
#include "llmc/cuda/matmul.cuh"
#include "test/cuda_test.h"

template <typename L> static void test_low_precision(const char* name, double rtol, int N, int C, int OC) {
    std::string sz = std::string(" ") + name + " N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
    std::vector<float> inp = lowp_rounded<L>(randn((size_t)N * C, 11)), w = lowp_rounded<L>(randn((size_t)OC * C, 12));
    std::vector<float> b = lowp_rounded<L>(randn(OC, 13)), dout = lowp_rounded<L>(randn((size_t)N * OC, 14));
    std::vector<float> out((size_t)N * OC), dinp = lowp_rounded<L>(randn((size_t)N * C, 15)), dw = randn((size_t)OC * C, 16), db = randn(OC, 17);
    L *d_inp = dev_upload(lowp_store<L>(inp)), *d_w = dev_upload(lowp_store<L>(w)), *d_b = dev_upload(lowp_store<L>(b));
    L *d_dout = dev_upload(lowp_store<L>(dout)), *d_out = dev_upload(lowp_store<L>(out)), *d_dinp = dev_upload(lowp_store<L>(dinp));
    float *d_dw = dev_upload(dw), *d_db = dev_upload(db);
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    keel_cuda::matmul_forward(d_out, d_inp, d_w, d_b, N, C, OC);
    check_close("matmul_forward +bias" + sz, lowp_widen(dev_download(d_out, out.size())), out, rtol, 1e-3);
    matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    keel_cuda::matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC);
    check_close("matmul_backward dinp" + sz, lowp_widen(dev_download(d_dinp, dinp.size())), dinp, rtol, 1e-3);
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

int main() {
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
