// test_cuda_elementwise — cuda/gelu.cuh, cuda/relu.cuh, cuda/residual.cuh and cuda/cast.cuh against the
// CPU ops, on sizes that are and are not multiples of the block size and of the 128-bit pack (4 fp32,
// 8 bf16/fp16: N = 70001 leaves a one-element tail). The backward ops accumulate, so each starts from a
// non-zero gradient buffer. Every op also runs on buffers one element off 16-byte alignment (the
// scalar fallback) and must give the same bytes as the 128-bit path: the per-element arithmetic is one
// function.
//
// Tolerances: fp32 as before (gelu: tanhf against the CPU's tanh_f32, 1e-6 / 1e-5; the others exact).
// bf16/fp16 (inputs rounded first, the fp32 CPU op on the same values): relu, residual and cast are
// one fp32 operation then one rounding, so they equal the rounded CPU result bit for bit; gelu goes
// through check_lowp (relative bound + 1e-3·rms floor, cuda_test.h) with negative controls.
#include "llmc/cpu/cast.h"
#include "llmc/cpu/gelu.h"
#include "llmc/cpu/relu.h"
#include "llmc/cpu/residual.h"
#include "llmc/cuda/cast.cuh"
#include "llmc/cuda/gelu.cuh"
#include "llmc/cuda/relu.cuh"
#include "llmc/cuda/residual.cuh"
#include "test/cuda_test.h"

template <typename T> static const char* type_name();
template <> const char* type_name<__nv_bfloat16>() { return "bf16"; }
template <> const char* type_name<__half>() { return "fp16"; }

// The CUDA ops on buffers `off` elements into their allocations (off = 1: the scalar fallback).
// Each returns what the op wrote, as fp32.
template <typename T> struct Outputs {
    std::vector<float> gelu, dgelu, relu, drelu, res, da, db, cast;
};
template <typename T>
static Outputs<T> run_gpu(const std::vector<float>& x, const std::vector<float>& dy, const std::vector<float>& acc,
                          const std::vector<float>& master, size_t off) {
    size_t N = x.size();
    Outputs<T> o;
    DevBuf<T> d_x(x, off), d_dy(dy, off), d_y(std::vector<float>(N), off);
    {
        DevBuf<T> d_dx(acc, off);
        keel_cuda::gelu_forward(d_y.p, d_x.p, N);
        keel_cuda::gelu_backward(d_dx.p, d_dy.p, d_x.p, N);
        o.gelu = d_y.get(N), o.dgelu = d_dx.get(N);
    }
    {
        DevBuf<T> d_dx(acc, off);
        keel_cuda::relu_forward(d_y.p, d_x.p, N);
        keel_cuda::relu_backward(d_dx.p, d_dy.p, d_x.p, N);
        o.relu = d_y.get(N), o.drelu = d_dx.get(N);
    }
    {
        DevBuf<T> d_da(acc, off), d_db(acc, off);
        keel_cuda::residual_forward(d_y.p, d_x.p, d_dy.p, N);
        keel_cuda::residual_backward(d_da.p, d_db.p, d_dy.p, N);
        o.res = d_y.get(N), o.da = d_da.get(N), o.db = d_db.get(N);
    }
    {
        DevBuf<float> d_m(master, off);
        keel_cuda::cast_from_f32(d_y.p, d_m.p, N);
        o.cast = d_y.get(N);
    }
    return o;
}

// The CPU ops in fp32 on the same (rounded) inputs.
static Outputs<float> run_cpu(const std::vector<float>& x, const std::vector<float>& dy, const std::vector<float>& acc,
                              const std::vector<float>& master) {
    size_t N = x.size();
    Outputs<float> o;
    o.gelu.resize(N), o.relu.resize(N), o.res.resize(N), o.cast.resize(N);
    o.dgelu = o.drelu = o.da = o.db = acc;
    gelu_forward(o.gelu.data(), x.data(), N);
    gelu_backward(o.dgelu.data(), dy.data(), x.data(), N);
    relu_forward(o.relu.data(), x.data(), N);
    relu_backward(o.drelu.data(), dy.data(), x.data(), N);
    residual_forward(o.res.data(), x.data(), dy.data(), N);
    residual_backward(o.da.data(), o.db.data(), dy.data(), N);
    cast_from_f32(o.cast.data(), master.data(), N);
    return o;
}

template <typename T> static bool same_outputs(const Outputs<T>& a, const Outputs<T>& b) {
    return same_bytes_f32(a.gelu, b.gelu) && same_bytes_f32(a.dgelu, b.dgelu) && same_bytes_f32(a.relu, b.relu) &&
           same_bytes_f32(a.drelu, b.drelu) && same_bytes_f32(a.res, b.res) && same_bytes_f32(a.da, b.da) &&
           same_bytes_f32(a.db, b.db) && same_bytes_f32(a.cast, b.cast);
}

static void test_fp32(size_t N) {
    std::string sz = " N=" + std::to_string(N);
    std::vector<float> x = randn(N, 1, 2.0), dy = randn(N, 2), acc = randn(N, 3), master = randn(N, 4);
    Outputs<float> want = run_cpu(x, dy, acc, master), got = run_gpu<float>(x, dy, acc, master, 0);
    check_close("gelu_forward" + sz, got.gelu, want.gelu, 1e-6, 1e-6);
    check_close("gelu_backward" + sz, got.dgelu, want.dgelu, 1e-5, 1e-5);  // tanhf vs tanh_f32
    check_close("relu_forward" + sz, got.relu, want.relu, 0, 0);
    check_close("relu_backward" + sz, got.drelu, want.drelu, 0, 0);
    check_close("residual_forward" + sz, got.res, want.res, 0, 0);
    check_close("residual_backward da" + sz, got.da, want.da, 0, 0);
    check_close("residual_backward db" + sz, got.db, want.db, 0, 0);
    check_close("cast_from_f32 (copy)" + sz, got.cast, want.cast, 0, 0);
    check_true("fp32 misaligned buffers (scalar path): same bytes as the 128-bit path" + sz,
               same_outputs(run_gpu<float>(x, dy, acc, master, 1), got));
}

template <typename T> static void test_lowp(size_t N) {
    std::string sz = std::string(type_name<T>()) + " N=" + std::to_string(N) + " ";
    std::vector<float> x = lowp_rounded<T>(randn(N, 1, 2.0)), dy = lowp_rounded<T>(randn(N, 2)), acc = lowp_rounded<T>(randn(N, 3));
    std::vector<float> master = randn(N, 4);  // fp32 master weights: cast rounds them
    Outputs<float> want = run_cpu(x, dy, acc, master);
    Outputs<T> got = run_gpu<T>(x, dy, acc, master, 0);
    check_lowp(sz + "gelu_forward", got.gelu, want.gelu);
    check_lowp(sz + "gelu_backward", got.dgelu, want.dgelu);
    if (N >= 256) {
        lowp_negative_controls(sz + "gelu_forward", got.gelu, want.gelu);
        lowp_negative_controls(sz + "gelu_backward", got.dgelu, want.dgelu);
    }
    // one fp32 operation, one rounding: the rounded CPU result exactly
    check_close(sz + "relu_forward (exactly rounded)", got.relu, lowp_rounded<T>(want.relu), 0, 0);
    check_close(sz + "relu_backward (exactly rounded)", got.drelu, lowp_rounded<T>(want.drelu), 0, 0);
    check_close(sz + "residual_forward (exactly rounded)", got.res, lowp_rounded<T>(want.res), 0, 0);
    check_close(sz + "residual_backward da (exactly rounded)", got.da, lowp_rounded<T>(want.da), 0, 0);
    check_close(sz + "residual_backward db (exactly rounded)", got.db, lowp_rounded<T>(want.db), 0, 0);
    check_close(sz + "cast_from_f32 (round to nearest even)", got.cast, lowp_rounded<T>(want.cast), 0, 0);
    check_true(sz + "misaligned buffers (scalar path): same bytes as the 128-bit path", same_outputs(run_gpu<T>(x, dy, acc, master, 1), got));
}

int main() {
    for (size_t N : {1ul, 31ul, 256ul, 1000ul, 70001ul}) {
        test_fp32(N);
        test_lowp<__nv_bfloat16>(N);
        test_lowp<__half>(N);
    }
    // the negative controls see a wrong value: a gelu that is 1% off everywhere fails check_lowp
    std::vector<float> x = lowp_rounded<__nv_bfloat16>(randn(1000, 1, 2.0)), y(1000);
    gelu_forward(y.data(), x.data(), x.size());
    std::vector<float> off = y;
    for (float& v : off) v *= 1.01f;
    expect_fail("bf16 gelu_forward 1% off everywhere", [&] { return check_lowp("gelu", lowp_rounded<__nv_bfloat16>(off), y); });
    return cuda_test_finish();
}
