// test_cuda_elementwise — cuda/gelu.cuh, cuda/relu.cuh, cuda/residual.cuh against the CPU ops, on
// sizes that are and are not multiples of the block size. The backward ops accumulate, so each
// starts from a non-zero gradient buffer.
#include "llmc/cpu/gelu.h"
#include "llmc/cpu/relu.h"
#include "llmc/cpu/residual.h"
#include "llmc/cuda/gelu.cuh"
#include "llmc/cuda/relu.cuh"
#include "llmc/cuda/residual.cuh"
#include "test/cuda_test.h"

int main() {
    for (size_t N : {1ul, 31ul, 256ul, 1000ul, 70001ul}) {
        std::string sz = " N=" + std::to_string(N);
        std::vector<float> x = randn(N, 1, 2.0), dy = randn(N, 2), acc = randn(N, 3), y(N), dx = acc, dx2 = acc;
        float *d_x = dev_upload(x), *d_dy = dev_upload(dy), *d_y = dev_upload(y), *d_dx = dev_upload(acc), *d_b = dev_upload(acc);
        gelu_forward(y.data(), x.data(), N);
        keel_cuda::gelu_forward(d_y, d_x, N);
        check_close("gelu_forward" + sz, dev_download(d_y, N), y, 1e-6, 1e-6);
        gelu_backward(dx.data(), dy.data(), x.data(), N);
        keel_cuda::gelu_backward(d_dx, d_dy, d_x, N);
        check_close("gelu_backward" + sz, dev_download(d_dx, N), dx, 1e-5, 1e-5);  // tanhf vs tanh_f32
        relu_forward(y.data(), x.data(), N);
        keel_cuda::relu_forward(d_y, d_x, N);
        check_close("relu_forward" + sz, dev_download(d_y, N), y, 0, 0);
        dx = acc;
        CUDA_CHECK(cudaMemcpy(d_dx, acc.data(), N * 4, cudaMemcpyHostToDevice));
        relu_backward(dx.data(), dy.data(), x.data(), N);
        keel_cuda::relu_backward(d_dx, d_dy, d_x, N);
        check_close("relu_backward" + sz, dev_download(d_dx, N), dx, 0, 0);
        residual_forward(y.data(), x.data(), dy.data(), N);
        keel_cuda::residual_forward(d_y, d_x, d_dy, N);
        check_close("residual_forward" + sz, dev_download(d_y, N), y, 0, 0);
        dx = acc;
        CUDA_CHECK(cudaMemcpy(d_dx, acc.data(), N * 4, cudaMemcpyHostToDevice));
        residual_backward(dx.data(), dx2.data(), dy.data(), N);
        keel_cuda::residual_backward(d_dx, d_b, d_dy, N);
        check_close("residual_backward da" + sz, dev_download(d_dx, N), dx, 0, 0);
        check_close("residual_backward db" + sz, dev_download(d_b, N), dx2, 0, 0);
        for (float* p : {d_x, d_dy, d_y, d_dx, d_b}) dev_free(p);
    }
    return cuda_test_finish();
}
