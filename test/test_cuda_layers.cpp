// test_cuda_layers — cuda/layernorm.cuh, cuda/encoder.cuh, cuda/headscale.cuh and cuda/dropout.cuh
// against the CPU ops, on shapes that are and are not multiples of a warp or a block (N=1, odd
// B*T, C=48 and C=4*48 as --normformer uses, C=100), then a bf16 pass that runs every op with the
// storage type __nv_bfloat16. Backward ops accumulate, so each starts from non-zero random
// gradients; every reducing backward is also run twice and compared byte for byte (determinism).
//
// Tolerances, fp32:
//   - layernorm: the CUDA statistics add a row's channels in a warp tree, the CPU in a line; fp32
//     reordering of sums of up to ~1000 O(1) terms moves results by ~1e-6 relative, ~1e-5 where a
//     gradient is a small difference of O(1) terms: rtol 1e-5 / atol 1e-5 (1e-4 for the column sums
//     dweight/dbias, whose N-row sums are ~10 and more).
//   - headscale dscale: a block tree per 64-row chunk against the CPU's single running sum of N·hs
//     terms: rtol 1e-5 / atol 1e-4.
//   - element-wise ops with a multiply-add (headscale dinp, dropout backward): exact under g++
//     (-ffp-contract=off), but nvcc fuses a·b+c into one FMA on the GPU: 1 ulp, rtol/atol 1e-6.
//   - encoder, position and dropout forward: the same additions in the same order, or one multiply:
//     bit for bit, tolerance 0; the dropout zero pattern is compared exactly as well. The encoder
//     also with negative ids (vocabulary-parallel: a zero word row, no dwte gradient).
#include <cstring>

#include "llmc/cpu/dropout.h"
#include "llmc/cpu/encoder.h"
#include "llmc/cpu/headscale.h"
#include "llmc/cpu/layernorm.h"
#include "llmc/cuda/dropout.cuh"
#include "llmc/cuda/encoder.cuh"
#include "llmc/cuda/headscale.cuh"
#include "llmc/cuda/layernorm.cuh"
#include "test/cuda_test.h"

static bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
static void dev_set(float* d, const std::vector<float>& h) {
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
}

// ---- layernorm -------------------------------------------------------------------------------------
static void test_layernorm(int N, int C) {
    std::string sz = " N=" + std::to_string(N) + " C=" + std::to_string(C);
    size_t NC = (size_t)N * C;
    std::vector<float> x = randn(NC, 10, 2.0), w = randn(C, 11), b = randn(C, 12), dy = randn(NC, 13);  // (N,C) (C) (C) (N,C)
    for (float& v : x) v += 0.7f;  // a non-zero row mean, so the subtraction is exercised
    std::vector<float> y(NC), mean(N), rstd(N);  // (N,C) (N) (N)
    layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    float *d_x = dev_upload(x), *d_w = dev_upload(w), *d_b = dev_upload(b), *d_dy = dev_upload(dy);
    float *d_y = dev_upload(std::vector<float>(NC)), *d_mean = dev_upload(mean), *d_rstd = dev_upload(rstd);
    keel_cuda::layernorm_forward(d_y, d_mean, d_rstd, d_x, d_w, d_b, N, C);
    check_close("layernorm_forward out" + sz, dev_download(d_y, NC), y, 1e-5, 1e-5);
    check_close("layernorm_forward mean" + sz, dev_download(d_mean, N), mean, 1e-5, 1e-6);
    check_close("layernorm_forward rstd" + sz, dev_download(d_rstd, N), rstd, 1e-5, 1e-6);

    // The backward reads the CPU's statistics on both sides: the comparison is the backward's alone.
    dev_set(d_mean, mean);
    dev_set(d_rstd, rstd);
    std::vector<float> dx0 = randn(NC, 14), dw0 = randn(C, 15), db0 = randn(C, 16);  // (N,C) (C) (C)
    std::vector<float> dx = dx0, dw = dw0, db = db0;
    layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    float *d_dx = dev_upload(dx0), *d_dw = dev_upload(dw0), *d_db = dev_upload(db0);
    keel_cuda::layernorm_backward(d_dx, d_dw, d_db, d_dy, d_x, d_w, d_mean, d_rstd, N, C);
    std::vector<float> g_dx = dev_download(d_dx, NC), g_dw = dev_download(d_dw, C), g_db = dev_download(d_db, C);
    check_close("layernorm_backward dinp" + sz, g_dx, dx, 1e-5, 1e-5);
    check_close("layernorm_backward dweight" + sz, g_dw, dw, 1e-5, 1e-4);
    check_close("layernorm_backward dbias" + sz, g_db, db, 1e-5, 1e-4);

    dev_set(d_dx, dx0);
    dev_set(d_dw, dw0);
    dev_set(d_db, db0);
    keel_cuda::layernorm_backward(d_dx, d_dw, d_db, d_dy, d_x, d_w, d_mean, d_rstd, N, C);
    check_true("layernorm_backward twice: same bytes" + sz, same_bytes(dev_download(d_dx, NC), g_dx) &&
                                                            same_bytes(dev_download(d_dw, C), g_dw) &&
                                                            same_bytes(dev_download(d_db, C), g_db));
    for (float* p : {d_x, d_w, d_b, d_dy, d_y, d_mean, d_rstd, d_dx, d_dw, d_db}) dev_free(p);
}

// ---- encoder and position ----------------------------------------------------------------------------
// Tokens drawn from a vocabulary of V (small: ids repeat, so the dwte scatter shares rows); the
// tables have padding rows (Vp > V, maxT > T) that must come back untouched. with_neg: every third
// id negative (vocabulary-parallel: another rank's row), a zero row that gets no gradient.
static void test_encoder(int B, int T, int C, int V, bool with_wpe, bool with_neg = false) {
    std::string sz = " B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
                     " V=" + std::to_string(V) + (with_wpe ? " wpe" : " no wpe") + (with_neg ? " negative ids" : "");
    int BT = B * T, Vp = V + 3, maxT = T + 2;
    std::vector<int> tok(BT);  // (B,T)
    for (int i = 0; i < BT; i++) tok[i] = (int)rng_below((uint64_t)V, 12345, 98, 20, (uint64_t)i);
    if (with_neg)
        for (int i = 0; i < BT; i += 3) tok[i] = i % 2 ? -1 : -1 - i;
    std::vector<float> wte = randn((size_t)Vp * C, 21), wpe = randn((size_t)maxT * C, 22);  // (Vp,C) (maxT,C)
    std::vector<float> dy = randn((size_t)BT * C, 23), y((size_t)BT * C);                     // (B,T,C) (B,T,C)
    int* d_tok = dev_upload(tok);
    float *d_wte = dev_upload(wte), *d_wpe = dev_upload(wpe), *d_dy = dev_upload(dy), *d_y = dev_upload(y);
    encoder_forward(y.data(), tok.data(), wte.data(), with_wpe ? wpe.data() : nullptr, B, T, C);
    keel_cuda::encoder_forward(d_y, d_tok, d_wte, with_wpe ? d_wpe : nullptr, B, T, C);
    check_close("encoder_forward" + sz, dev_download(d_y, y.size()), y, 0, 0);

    std::vector<float> dwte = randn(wte.size(), 24), dwpe = randn(wpe.size(), 25);  // (Vp,C) (maxT,C)
    float *d_dwte = dev_upload(dwte), *d_dwpe = dev_upload(dwpe);
    encoder_backward(dwte.data(), with_wpe ? dwpe.data() : nullptr, dy.data(), tok.data(), B, T, C);
    keel_cuda::encoder_backward(d_dwte, with_wpe ? d_dwpe : nullptr, d_dy, d_tok, B, T, C);
    std::vector<float> g_dwte = dev_download(d_dwte, wte.size());
    check_close("encoder_backward dwte" + sz, g_dwte, dwte, 0, 0);
    check_close("encoder_backward dwpe" + sz, dev_download(d_dwpe, wpe.size()), dwpe, 0, 0);
    dev_set(d_dwte, randn(wte.size(), 24));
    keel_cuda::encoder_backward(d_dwte, with_wpe ? d_dwpe : nullptr, d_dy, d_tok, B, T, C);
    check_true("encoder_backward twice: same bytes" + sz, same_bytes(dev_download(d_dwte, wte.size()), g_dwte));

    if (with_wpe) {  // the position add alone (--embed-layernorm)
        std::vector<float> out = randn(y.size(), 26);  // (B,T,C)
        dev_set(d_y, out);
        position_forward(out.data(), wpe.data(), B, T, C);
        keel_cuda::position_forward(d_y, d_wpe, B, T, C);
        check_close("position_forward" + sz, dev_download(d_y, out.size()), out, 0, 0);
        dwpe = randn(wpe.size(), 27);
        dev_set(d_dwpe, dwpe);
        position_backward(dwpe.data(), dy.data(), B, T, C);
        keel_cuda::position_backward(d_dwpe, d_dy, B, T, C);
        check_close("position_backward" + sz, dev_download(d_dwpe, wpe.size()), dwpe, 0, 0);
    }
    dev_free(d_tok);
    for (float* p : {d_wte, d_wpe, d_dy, d_y, d_dwte, d_dwpe}) dev_free(p);
}

// ---- headscale -----------------------------------------------------------------------------------------
static void test_headscale(int N, int C, int NH) {
    std::string sz = " N=" + std::to_string(N) + " C=" + std::to_string(C) + " NH=" + std::to_string(NH);
    size_t NC = (size_t)N * C;
    std::vector<float> x = randn(NC, 30), s = randn(NH, 31), dy = randn(NC, 32), y(NC);  // (N,C) (NH) (N,C) (N,C)
    float *d_x = dev_upload(x), *d_s = dev_upload(s), *d_dy = dev_upload(dy), *d_y = dev_upload(y);
    headscale_forward(y.data(), x.data(), s.data(), N, C, NH);
    keel_cuda::headscale_forward(d_y, d_x, d_s, N, C, NH);
    check_close("headscale_forward" + sz, dev_download(d_y, NC), y, 0, 0);

    std::vector<float> dx0 = randn(NC, 33), ds0 = randn(NH, 34), dx = dx0, ds = ds0;  // (N,C) (NH)
    float *d_dx = dev_upload(dx0), *d_ds = dev_upload(ds0);
    headscale_backward(dx.data(), ds.data(), dy.data(), x.data(), s.data(), N, C, NH);
    keel_cuda::headscale_backward(d_dx, d_ds, d_dy, d_x, d_s, N, C, NH);
    std::vector<float> g_ds = dev_download(d_ds, NH);
    check_close("headscale_backward dinp" + sz, dev_download(d_dx, NC), dx, 1e-6, 1e-6);
    check_close("headscale_backward dscale" + sz, g_ds, ds, 1e-5, 1e-4);
    dev_set(d_dx, dx0);
    dev_set(d_ds, ds0);
    keel_cuda::headscale_backward(d_dx, d_ds, d_dy, d_x, d_s, N, C, NH);
    check_true("headscale_backward twice: same bytes" + sz, same_bytes(dev_download(d_ds, NH), g_ds));
    for (float* p : {d_x, d_s, d_dy, d_y, d_dx, d_ds}) dev_free(p);
}

// ---- dropout --------------------------------------------------------------------------------------------
static size_t zero_pattern_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
    size_t bad = 0;
    for (size_t i = 0; i < a.size(); i++) bad += (a[i] == 0.0f) != (b[i] == 0.0f);
    return bad;
}

static void test_dropout(int B, size_t R, double p) {
    std::string sz = " B=" + std::to_string(B) + " R=" + std::to_string(R) + " p=" + std::to_string(p).substr(0, 3);
    DropoutSite site = {p, 42, dropout_site(2, DROPOUT_SITE_MLP_OUT), 1000};
    size_t n = (size_t)B * R;
    std::vector<float> x = randn(n, 40), dy = randn(n, 41), y(n);  // (B,R) each; randn is never exactly 0
    float *d_x = dev_upload(x), *d_dy = dev_upload(dy), *d_y = dev_upload(y);
    dropout_forward(y.data(), x.data(), B, R, &site);
    keel_cuda::dropout_forward(d_y, d_x, B, R, &site);
    std::vector<float> g_y = dev_download(d_y, n);
    check_close("dropout_forward" + sz, g_y, y, 0, 0);
    check_true("dropout_forward zero pattern equals the CPU's" + sz, zero_pattern_mismatches(g_y, y) == 0);
    size_t dropped = 0;
    for (float v : y) dropped += v == 0.0f;
    if (n >= 1000) check_true("dropout_forward drops a fraction near p" + sz, std::fabs((double)dropped / n - p) < 0.05);

    keel_cuda::dropout_forward(d_x, d_x, B, R, &site);  // in place: out aliases inp
    check_close("dropout_forward in place" + sz, dev_download(d_x, n), y, 0, 0);

    std::vector<float> dx = randn(n, 42);  // (B,R)
    float* d_dx = dev_upload(dx);
    dropout_backward(dx.data(), dy.data(), B, R, &site);
    keel_cuda::dropout_backward(d_dx, d_dy, B, R, &site);
    check_close("dropout_backward" + sz, dev_download(d_dx, n), dx, 1e-6, 1e-6);
    for (float* p : {d_x, d_dy, d_y, d_dx}) dev_free(p);
}

// ---- bf16 storage ------------------------------------------------------------------------------------------
// Every op with F = __nv_bfloat16 against the fp32 CPU op on the same bf16-rounded inputs. The CUDA
// ops compute in fp32 and round each stored bf16 value once (2^-9 relative); statistics and
// parameter gradients are fp32 buffers (DESIGN §3), so those match to fp32 rounding of the sums:
// rtol 2e-2 / atol 2e-2 on bf16 outputs and 1e-4 on fp32 ones, which still catch any wrong index,
// missing term or a gradient rounded to bf16.
typedef __nv_bfloat16 bf16;
static std::vector<bf16> to_bf16(const std::vector<float>& v) {
    std::vector<bf16> r(v.size());
    for (size_t i = 0; i < v.size(); i++) r[i] = __float2bfloat16(v[i]);
    return r;
}
static std::vector<float> from_bf16(const std::vector<bf16>& v) {
    std::vector<float> r(v.size());
    for (size_t i = 0; i < v.size(); i++) r[i] = __bfloat162float(v[i]);
    return r;
}
static std::vector<float> bf16_randn(size_t n, uint64_t key) { return from_bf16(to_bf16(randn(n, key))); }
static std::vector<float> bf16_download(const bf16* d, size_t n) { return from_bf16(dev_download(d, n)); }
static bf16* bf16_upload(const std::vector<float>& v) { return dev_upload(to_bf16(v)); }
static const double BF_TOL = 2e-2, F32_TOL = 1e-4;

static void test_bf16_layernorm(int N, int C) {
    size_t NC = (size_t)N * C;
    std::vector<float> x = bf16_randn(NC, 50), w = bf16_randn(C, 51), b = bf16_randn(C, 52), dy = bf16_randn(NC, 53);
    std::vector<float> y(NC), mean(N), rstd(N), dx = bf16_randn(NC, 54), dw = bf16_randn(C, 55), db = bf16_randn(C, 56);
    bf16 *d_x = bf16_upload(x), *d_w = bf16_upload(w), *d_b = bf16_upload(b), *d_dy = bf16_upload(dy);
    bf16 *d_y = bf16_upload(y), *d_dx = bf16_upload(dx);
    float *d_mean = dev_upload(mean), *d_rstd = dev_upload(rstd), *d_dw = dev_upload(dw), *d_db = dev_upload(db);
    layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    keel_cuda::layernorm_forward(d_y, d_mean, d_rstd, d_x, d_w, d_b, N, C);
    check_close("bf16 layernorm_forward out", bf16_download(d_y, NC), y, BF_TOL, BF_TOL);
    check_close("bf16 layernorm_forward mean (fp32)", dev_download(d_mean, N), mean, F32_TOL, F32_TOL);
    check_close("bf16 layernorm_forward rstd (fp32)", dev_download(d_rstd, N), rstd, F32_TOL, F32_TOL);
    mean = dev_download(d_mean, N);  // both backwards read the statistics the bf16 forward stored
    rstd = dev_download(d_rstd, N);
    layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    keel_cuda::layernorm_backward(d_dx, d_dw, d_db, d_dy, d_x, d_w, d_mean, d_rstd, N, C);
    check_close("bf16 layernorm_backward dinp", bf16_download(d_dx, NC), dx, BF_TOL, BF_TOL);
    check_close("bf16 layernorm_backward dweight (fp32)", dev_download(d_dw, C), dw, F32_TOL, F32_TOL);
    check_close("bf16 layernorm_backward dbias (fp32)", dev_download(d_db, C), db, F32_TOL, F32_TOL);
    for (bf16* p : {d_x, d_w, d_b, d_dy, d_y, d_dx}) dev_free(p);
    for (float* p : {d_mean, d_rstd, d_dw, d_db}) dev_free(p);
}

static void test_bf16_encoder(int B, int T, int C, int V, bool with_neg = false) {
    int BT = B * T;
    std::vector<int> tok(BT);
    for (int i = 0; i < BT; i++) tok[i] = (int)rng_below((uint64_t)V, 12345, 98, 60, (uint64_t)i);
    if (with_neg)  // every third id another rank's (negative)
        for (int i = 1; i < BT; i += 3) tok[i] = -1;
    std::string neg = with_neg ? " negative ids" : "";
    std::vector<float> wte = bf16_randn((size_t)V * C, 61), wpe = bf16_randn((size_t)T * C, 62), dy = bf16_randn((size_t)BT * C, 63);
    std::vector<float> y((size_t)BT * C), dwte = bf16_randn(wte.size(), 64), dwpe = bf16_randn(wpe.size(), 65);
    int* d_tok = dev_upload(tok);
    bf16 *d_wte = bf16_upload(wte), *d_wpe = bf16_upload(wpe), *d_dy = bf16_upload(dy), *d_y = bf16_upload(y);
    float *d_dwte = dev_upload(dwte), *d_dwpe = dev_upload(dwpe);
    encoder_forward(y.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    keel_cuda::encoder_forward(d_y, d_tok, d_wte, d_wpe, B, T, C);
    check_close("bf16 encoder_forward" + neg, bf16_download(d_y, y.size()), y, BF_TOL, BF_TOL);
    encoder_backward(dwte.data(), dwpe.data(), dy.data(), tok.data(), B, T, C);
    keel_cuda::encoder_backward(d_dwte, d_dwpe, d_dy, d_tok, B, T, C);
    check_close("bf16 encoder_backward dwte (fp32)" + neg, dev_download(d_dwte, wte.size()), dwte, F32_TOL, F32_TOL);
    check_close("bf16 encoder_backward dwpe (fp32)" + neg, dev_download(d_dwpe, wpe.size()), dwpe, F32_TOL, F32_TOL);
    y = bf16_download(d_y, y.size());
    position_forward(y.data(), wpe.data(), B, T, C);
    keel_cuda::position_forward(d_y, d_wpe, B, T, C);
    check_close("bf16 position_forward" + neg, bf16_download(d_y, y.size()), y, BF_TOL, BF_TOL);
    dwpe = dev_download(d_dwpe, wpe.size());
    position_backward(dwpe.data(), dy.data(), B, T, C);
    keel_cuda::position_backward(d_dwpe, d_dy, B, T, C);
    check_close("bf16 position_backward (fp32)" + neg, dev_download(d_dwpe, wpe.size()), dwpe, F32_TOL, F32_TOL);
    dev_free(d_tok);
    for (bf16* p : {d_wte, d_wpe, d_dy, d_y}) dev_free(p);
    for (float* p : {d_dwte, d_dwpe}) dev_free(p);
}

static void test_bf16_headscale_dropout(int N, int C, int NH) {
    size_t NC = (size_t)N * C;
    std::vector<float> x = bf16_randn(NC, 70), s = bf16_randn(NH, 71), dy = bf16_randn(NC, 72), y(NC);
    std::vector<float> dx = bf16_randn(NC, 73), ds = bf16_randn(NH, 74);
    bf16 *d_x = bf16_upload(x), *d_s = bf16_upload(s), *d_dy = bf16_upload(dy), *d_y = bf16_upload(y);
    bf16 *d_dx = bf16_upload(dx);
    float* d_ds = dev_upload(ds);
    headscale_forward(y.data(), x.data(), s.data(), N, C, NH);
    keel_cuda::headscale_forward(d_y, d_x, d_s, N, C, NH);
    check_close("bf16 headscale_forward", bf16_download(d_y, NC), y, BF_TOL, BF_TOL);
    headscale_backward(dx.data(), ds.data(), dy.data(), x.data(), s.data(), N, C, NH);
    keel_cuda::headscale_backward(d_dx, d_ds, d_dy, d_x, d_s, N, C, NH);
    check_close("bf16 headscale_backward dinp", bf16_download(d_dx, NC), dx, BF_TOL, BF_TOL);
    check_close("bf16 headscale_backward dscale (fp32)", dev_download(d_ds, NH), ds, F32_TOL, F32_TOL);

    DropoutSite site = {0.3, 7, dropout_site(0, DROPOUT_SITE_ATTN_OUT), 5};  // rows as samples: B=N, R=C
    dx = bf16_download(d_dx, NC);
    dropout_forward(y.data(), x.data(), N, (size_t)C, &site);
    keel_cuda::dropout_forward(d_y, d_x, N, (size_t)C, &site);
    std::vector<float> g_y = bf16_download(d_y, NC);
    check_close("bf16 dropout_forward", g_y, y, BF_TOL, BF_TOL);
    check_true("bf16 dropout_forward zero pattern equals the CPU's", zero_pattern_mismatches(g_y, y) == 0);
    dropout_backward(dx.data(), dy.data(), N, (size_t)C, &site);
    keel_cuda::dropout_backward(d_dx, d_dy, N, (size_t)C, &site);
    check_close("bf16 dropout_backward", bf16_download(d_dx, NC), dx, BF_TOL, BF_TOL);
    for (bf16* p : {d_x, d_s, d_dy, d_y, d_dx}) dev_free(p);
    dev_free(d_ds);
}

int main() {
    // (N, C): one row; a single partial warp of rows; N over the 64-row chunk of the column sums
    // with a partial last chunk; C = 4*48 (--normformer's 4C); C = 100 and 1000 (over one
    // 256-thread channel block); rows not a multiple of the 8 rows per block.
    const int ln_shapes[][2] = {{1, 48}, {7, 48}, {150, 48}, {37, 192}, {70, 100}, {3, 1000}};
    for (const auto& s : ln_shapes) test_layernorm(s[0], s[1]);
    // (B, T, C, V): one position; odd B*T = 21 over 5 token ids (repeats); C = 4*48; V = 1: every
    // position scatters into the same dwte row.
    for (bool with_wpe : {true, false}) {
        test_encoder(1, 1, 48, 3, with_wpe);
        test_encoder(3, 7, 48, 5, with_wpe);
        test_encoder(2, 9, 192, 4, with_wpe);
        test_encoder(5, 13, 100, 1, with_wpe);
        test_encoder(1, 1, 48, 3, with_wpe, true);
        test_encoder(3, 7, 48, 5, with_wpe, true);
        test_encoder(5, 13, 100, 1, with_wpe, true);
    }
    // (N, C, NH): hs = 12, 16, 32, 20; N over the 64-row chunk of dscale, and N = 1.
    const int hs_shapes[][3] = {{1, 48, 4}, {21, 48, 3}, {150, 192, 6}, {70, 100, 5}};
    for (const auto& s : hs_shapes) test_headscale(s[0], s[1], s[2]);
    // p = 0 is the identity (the CPU draws keep = true for every element, as must the CUDA op).
    for (double p : {0.3, 0.0, 0.9}) {
        test_dropout(1, 37, p);
        test_dropout(3, 1001, p);
    }
    test_bf16_layernorm(37, 192);
    test_bf16_encoder(3, 7, 48, 5);
    test_bf16_encoder(3, 7, 48, 5, true);
    test_bf16_headscale_dropout(21, 48, 3);
    return cuda_test_finish();
}
