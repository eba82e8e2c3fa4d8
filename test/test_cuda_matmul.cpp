// test_cuda_matmul — cuda/matmul.cuh (cuBLASLt; under emulation the strict shim of
// test/cuda_emu/cublasLt.h) against cpu/matmul.h: forward with and without bias, backward
// accumulating into non-zero dinp/dweight/dbias, on shapes that are not multiples of anything.
// Tolerance: both sum in fp32, in different orders (and with different tiling on the GPU):
// relative 1e-5 of the row's magnitude, i.e. atol 1e-4 on O(1..10) values with K up to 260.
#include "llmc/cpu/matmul.h"
#include "llmc/cuda/matmul.cuh"
#include "test/cuda_test.h"

int main() {
    struct Shape { int N, C, OC; };
    for (Shape s : {Shape{1, 1, 1}, Shape{3, 5, 7}, Shape{37, 48, 144}, Shape{64, 260, 33}}) {
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
