// test_cuda_optimizer — cuda/adamw.cuh and cuda/adam8bit.cuh against the CPU ops (cpu/adamw.h,
// cpu/adam8bit.h), on identical inputs, for n = 1, 1000, 4097, 70000 (odd sizes, partial blocks).
//
// Tolerances:
//   - elementwise ops (adamw, adam32, adam8bit, grad_scale, grad_round_fp16, grad_unscale_check):
//     0, bit for bit — the kernels evaluate the CPU's float formula with the same roundings (no FMA
//     contraction, IEEE sqrt and division), so any difference is a bug. The optimizers run 3 steps
//     in a row, so the state each step reads is the state the previous one wrote.
//   - sumsq_f64 and the chunked sums: 1e-12 relative. Both sides add exact float squares in double
//     in different fixed orders (CPU: 8 lanes; CUDA: per-thread strides, then trees); an order's
//     error grows like sqrt(n)·2^-53 for random data (bounded by n·2^-53): observed 1e-15 at
//     n = 70000, 1.5e-13 at n = 5e6.
//   - zero counts: exact.
#include <cstring>

#include "llmc/cpu/adam8bit.h"
#include "llmc/cpu/adamw.h"
#include "llmc/cuda/adam8bit.cuh"
#include "llmc/cuda/adamw.cuh"
#include "test/cuda_test.h"

static const int64_t SIZES[] = {1, 1000, 4097, 70000};

// The batched chunk reduction spelled out from its definition: out (nchunks, 2) = Σ x², zero count
// of each chunk of base. cpu/adamw.h's sumsq_zeros_chunks must equal it bit for bit.
static void ref_sumsq_zeros_chunks(double* out, const float* base, const int64_t* offsets, const int64_t* numels,
                                   size_t nchunks) {
    for (size_t c = 0; c < nchunks; c++) {
        out[2 * c] = sumsq_f64(base + offsets[c], numels[c]);
        out[2 * c + 1] = (double)count_zeros(base + offsets[c], numels[c]);
    }
}

// "" when got and want are equal bit for bit (which also tells -0 from +0 and NaN payloads
// apart), else where they first differ.
template <typename T> static std::string bits_diff(const std::string& name, const std::vector<T>& got, const std::vector<T>& want) {
    if (got.size() != want.size()) return " " + name + ": sizes differ";
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < got.size(); i++)
        if (memcmp(&got[i], &want[i], sizeof(T)) != 0 && bad++ == 0) first = i;
    if (!bad) return "";
    char detail[160];
    snprintf(detail, sizeof detail, " %s: %zu of %zu differ, first [%zu] got %.9g want %.9g;", name.c_str(), bad,
             want.size(), first, (double)got[first], (double)want[first]);
    return detail;
}
static bool check_bits(const std::string& what, const std::string& diffs) {
    return check_true(what + (diffs.empty() ? ": bit-identical" : ":" + diffs), diffs.empty());
}
template <typename T> static bool check_bits(const std::string& what, const std::vector<T>& got, const std::vector<T>& want) {
    return check_bits(what, bits_diff("", got, want));
}

static bool check_rel(const std::string& what, double got, double want, double rtol) {
    double err = std::fabs(got - want), rel = want != 0 ? err / std::fabs(want) : err;
    char detail[128];
    snprintf(detail, sizeof detail, ": got %.17g want %.17g rel %.2e", got, want, rel);
    return check_true(what + detail, rel <= rtol);
}

static std::vector<float> abs_sq(std::vector<float> x) {
    for (float& e : x) e = e * e;
    return x;
}

static std::string tag(int64_t n) { return " n=" + std::to_string(n); }

// ---- AdamW --------------------------------------------------------------------------------------
static void test_adamw(int64_t n, float wd) {
    std::vector<float> p = randn(n, 10), m = randn(n, 11, 0.01), v = abs_sq(randn(n, 12, 0.01));
    float *d_p = dev_upload(p), *d_m = dev_upload(m), *d_v = dev_upload(v), *d_g = nullptr;
    const float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
    for (int t = 1; t <= 3; t++) {
        std::vector<float> g = randn(n, 20 + t);
        d_g = dev_upload(g);
        float bc1 = 1.0f - std::pow(beta1, (float)t), bc2 = 1.0f - std::pow(beta2, (float)t);
        adamw_update(p.data(), g.data(), m.data(), v.data(), n, lr, beta1, beta2, eps, wd, bc1, bc2);
        keel_cuda::adamw_update(d_p, d_g, d_m, d_v, n, lr, beta1, beta2, eps, wd, bc1, bc2);
        dev_free(d_g);
    }
    check_bits("adamw_update p, m, v" + tag(n) + " wd=" + std::to_string(wd).substr(0, 3) + " after 3 steps",
               bits_diff("p", dev_download(d_p, n), p) + bits_diff("m", dev_download(d_m, n), m) +
                   bits_diff("v", dev_download(d_v, n), v));
    for (float* d : {d_p, d_m, d_v}) dev_free(d);
}

// ---- 8-bit Adam ---------------------------------------------------------------------------------
struct Adam8bitState {
    std::vector<float> p;              // (n)
    std::vector<uint8_t> cm, cv;       // (n) codes of m and v
    std::vector<float> am, av;         // (nblocks) absmax of m and v
};

// Random codes and absmax (the dequantization path sees every map entry), except block 1 when
// there are at least 3 blocks: all-zero state and gradient, which must stay code(0) with absmax 0.
static Adam8bitState adam8bit_state(int64_t n, int bs, const Adam8bitMaps* q) {
    int64_t nblocks = (n + bs - 1) / bs;
    Adam8bitState s{randn(n, 30), std::vector<uint8_t>(n), std::vector<uint8_t>(n), std::vector<float>(nblocks),
                    std::vector<float>(nblocks)};
    for (int64_t i = 0; i < n; i++) {
        s.cm[i] = (uint8_t)rng_u64(7, 1, 31, i);
        s.cv[i] = (uint8_t)rng_u64(7, 1, 32, i);
    }
    for (int64_t b = 0; b < nblocks; b++) {
        s.am[b] = (float)(0.05 * rng_uniform(7, 1, 33, b));
        s.av[b] = (float)(1e-4 * rng_uniform(7, 1, 34, b));
    }
    if (nblocks >= 3) {
        std::fill(s.cm.begin() + bs, s.cm.begin() + 2 * bs, q->zero_m);
        std::fill(s.cv.begin() + bs, s.cv.begin() + 2 * bs, q->zero_v);
        s.am[1] = s.av[1] = 0.0f;
    }
    return s;
}

static std::vector<float> adam_grad(int64_t n, int bs, int t) {
    std::vector<float> g = randn(n, 40 + t, 0.01);
    if ((n + bs - 1) / bs >= 3) std::fill(g.begin() + bs, g.begin() + 2 * bs, 0.0f);
    return g;
}

static AdamHyper adam_hyper(int t, float wd) {
    double b1 = 0.9, b2 = 0.999;
    return {1e-3f, (float)b1, (float)b2, 1e-8f, wd, (float)(1 - std::pow(b1, t)), (float)std::sqrt(1 - std::pow(b2, t))};
}

struct DevAdam8bit {
    float* p;
    uint8_t *cm, *cv;
    float *am, *av;
};
static DevAdam8bit dev_upload(const Adam8bitState& s) {
    return {dev_upload(s.p), dev_upload(s.cm), dev_upload(s.cv), dev_upload(s.am), dev_upload(s.av)};
}
static Adam8bitState dev_download(const DevAdam8bit& d, int64_t n, int64_t nblocks) {
    return {dev_download(d.p, n), dev_download(d.cm, n), dev_download(d.cv, n), dev_download(d.am, nblocks),
            dev_download(d.av, nblocks)};
}
static void dev_free(const DevAdam8bit& d) {
    for (void* p : {(void*)d.p, (void*)d.cm, (void*)d.cv, (void*)d.am, (void*)d.av}) dev_free(p);
}

// One step on both sides with maps q.
static void adam8bit_step_both(Adam8bitState* s, const DevAdam8bit& d, int64_t n, int bs, const Adam8bitMaps* q, int t,
                               float wd, float gs) {
    std::vector<float> g = adam_grad(n, bs, t);
    float* d_g = dev_upload(g);
    AdamHyper h = adam_hyper(t, wd);
    adam8bit_update(s->p.data(), g.data(), s->cm.data(), s->cv.data(), s->am.data(), s->av.data(), n, bs, q, h, gs);
    keel_cuda::adam8bit_update(d.p, d_g, d.cm, d.cv, d.am, d.av, n, bs, q, h, gs);
    dev_free(d_g);
}

static void check_adam8bit(const std::string& s, const Adam8bitState& got, const Adam8bitState& want) {
    check_bits("adam8bit_update p, codes, absmax" + s, bits_diff("p", got.p, want.p) + bits_diff("code_m", got.cm, want.cm) +
                                                         bits_diff("code_v", got.cv, want.cv) +
                                                         bits_diff("absmax_m", got.am, want.am) +
                                                         bits_diff("absmax_v", got.av, want.av));
}

static void test_adam8bit(int64_t n, int bs, float wd, float gs, const Adam8bitMaps* q) {
    int64_t nblocks = (n + bs - 1) / bs;
    Adam8bitState s = adam8bit_state(n, bs, q);
    DevAdam8bit d = dev_upload(s);
    for (int t = 1; t <= 3; t++) adam8bit_step_both(&s, d, n, bs, q, t, wd, gs);
    char cfg[96];
    snprintf(cfg, sizeof cfg, " n=%lld BS=%d wd=%.1f gs=%.1f after 3 steps", (long long)n, bs, wd, gs);
    check_adam8bit(cfg, dev_download(d, n, nblocks), s);
    dev_free(d);
}

// The maps are a host struct the launcher caches on the device: a changed struct must be uploaded
// again. q2 stores zeros as another code, which only the all-zero block shows.
static void test_adam8bit_maps_change(const Adam8bitMaps* q) {
    const int64_t n = 4097;
    const int bs = 256;
    Adam8bitMaps* q2 = new Adam8bitMaps(*q);
    q2->zero_m = (uint8_t)(q->zero_m + 1);
    q2->zero_v = (uint8_t)(q->zero_v + 1);
    Adam8bitState s = adam8bit_state(n, bs, q);
    DevAdam8bit d = dev_upload(s);
    adam8bit_step_both(&s, d, n, bs, q, 1, 0.1f, 1.0f);
    adam8bit_step_both(&s, d, n, bs, q2, 2, 0.1f, 1.0f);
    Adam8bitState got = dev_download(d, n, (n + bs - 1) / bs);
    check_adam8bit(" maps changed", got, s);
    check_true("adam8bit_update zero block stored with the new maps' code(0)", got.cm[bs] == q2->zero_m && got.cv[bs] == q2->zero_v);
    adam8bit_step_both(&s, d, n, bs, q, 3, 0.1f, 1.0f);
    got = dev_download(d, n, (n + bs - 1) / bs);
    check_adam8bit(" maps changed back", got, s);
    check_true("adam8bit_update zero block stored with the first maps' code(0)", got.cm[bs] == q->zero_m && got.cv[bs] == q->zero_v);
    dev_free(d);
    delete q2;
}

// Two runs from the same state give the same bytes (the block absmax is the only reduction).
static void test_adam8bit_determinism(const Adam8bitMaps* q) {
    const int64_t n = 70000;
    const int bs = 2048;
    Adam8bitState s0 = adam8bit_state(n, bs, q), runs[2];
    for (Adam8bitState& r : runs) {
        DevAdam8bit d = dev_upload(s0);
        std::vector<float> g = adam_grad(n, bs, 1);
        float* d_g = dev_upload(g);
        keel_cuda::adam8bit_update(d.p, d_g, d.cm, d.cv, d.am, d.av, n, bs, q, adam_hyper(1, 0.1f), 0.5f);
        r = dev_download(d, n, (n + bs - 1) / bs);
        dev_free(d_g);
        dev_free(d);
    }
    check_true("adam8bit_update deterministic (two runs, memcmp)",
               runs[0].p == runs[1].p && runs[0].cm == runs[1].cm && runs[0].cv == runs[1].cv &&
                   memcmp(runs[0].am.data(), runs[1].am.data(), runs[0].am.size() * 4) == 0);
}

static void test_adam32(int64_t n, float wd, float gs) {
    std::vector<float> p = randn(n, 50), m = randn(n, 51, 0.01), v = abs_sq(randn(n, 52, 0.01));
    float *d_p = dev_upload(p), *d_m = dev_upload(m), *d_v = dev_upload(v);
    for (int t = 1; t <= 3; t++) {
        std::vector<float> g = randn(n, 60 + t, 0.01);
        float* d_g = dev_upload(g);
        AdamHyper h = adam_hyper(t, wd);
        adam32_update(p.data(), g.data(), m.data(), v.data(), n, h, gs);
        keel_cuda::adam32_update(d_p, d_g, d_m, d_v, n, h, gs);
        dev_free(d_g);
    }
    char cfg[80];
    snprintf(cfg, sizeof cfg, " n=%lld wd=%.1f gs=%.1f after 3 steps", (long long)n, wd, gs);
    check_bits(std::string("adam32_update p, m, v") + cfg, bits_diff("p", dev_download(d_p, n), p) +
                                                             bits_diff("m", dev_download(d_m, n), m) +
                                                             bits_diff("v", dev_download(d_v, n), v));
    for (float* d : {d_p, d_m, d_v}) dev_free(d);
}

// ---- gradient scaling ---------------------------------------------------------------------------
static void test_grad_scale(int64_t n) {
    std::vector<float> g = randn(n, 70);
    float* d_g = dev_upload(g);
    grad_scale(g.data(), n, 0.37f);
    keel_cuda::grad_scale(d_g, n, 0.37f);
    check_close("grad_scale" + tag(n), dev_download(d_g, n), g, 0, 0);  // finite products: equal means equal bits
    dev_free(d_g);
}

// Values around binary16's limits: the overflow midpoint 65520, the subnormal range down to
// 2^-25 (a tie that rounds to 0), float subnormals, signed zeros, NaN, inf; then randn over many
// binades.
static void test_grad_round_fp16() {
    std::vector<float> g = {65504.0f, 65519.996f, 65520.0f, 65536.0f, -65520.0f, -65504.0f, 6e-8f, 5.9604645e-8f,
                            0x1p-25f, 0x1.0002p-25f, 0x1.8p-24f, 0x1.4p-24f, 3e-8f, 1e-8f, 0x1p-14f, 0x1.ffcp-15f,
                            0x1.ffep-15f, 1e-40f, -1e-40f, 0x1p-149f, 0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY,
                            1.00048828125f, 1.00146484375f, 1.0f / 3.0f, -2.0f / 3.0f, 3.4e38f, -3.4e38f};
    std::vector<float> r = randn(4000, 80);
    for (size_t i = 0; i < r.size(); i++) g.push_back(std::ldexp(r[i], (int)(i % 60) - 40));
    float* d_g = dev_upload(g);
    grad_round_fp16(g.data(), g.size());
    keel_cuda::grad_round_fp16(d_g, g.size());
    check_bits("grad_round_fp16 limits, subnormals, NaN, inf, 2^-40..2^19", dev_download(d_g, g.size()), g);
    dev_free(d_g);
}

// One case: the CPU and CUDA verdicts agree with `expect`, and the unscaled values are identical.
static void unscale_case(const std::string& what, std::vector<float> g, double inv_scale, bool expect) {
    float* d_g = dev_upload(g);
    bool cpu = grad_unscale_check(g.data(), g.size(), inv_scale);
    bool gpu = keel_cuda::grad_unscale_check(d_g, g.size(), inv_scale);
    check_true("grad_unscale_check verdict " + what + (expect ? " (non-finite)" : " (finite)"), cpu == expect && gpu == expect);
    check_bits("grad_unscale_check values " + what, dev_download(d_g, g.size()), g);
    dev_free(d_g);
}

static void test_grad_unscale_check(int64_t n) {
    std::vector<float> g = randn(n, 90, 1024.0);
    unscale_case("clean" + tag(n), g, 1.0 / 1024, false);
    std::vector<float> inf_last = g, nan_first = g, overflow = g;
    inf_last[n - 1] = INFINITY;
    unscale_case("inf at the end" + tag(n), inf_last, 1.0 / 1024, true);
    nan_first[0] = NAN;
    unscale_case("NaN at the start" + tag(n), nan_first, 1.0 / 1024, true);
    overflow[n / 3] = 3e38f;  // finite, but not once unscaled by a scale below 1
    unscale_case("overflow on unscaling" + tag(n), overflow, 2.0, true);
}

// ---- reductions ---------------------------------------------------------------------------------
// randn with zeros planted (every 7th element, some of them -0).
static std::vector<float> with_zeros(int64_t n, uint64_t key) {
    std::vector<float> x = randn(n, key, 3.0);
    for (int64_t i = 0; i < n; i += 7) x[i] = i % 14 ? -0.0f : 0.0f;
    return x;
}

static void test_sumsq_count(int64_t n) {
    std::vector<float> x = with_zeros(n, 100);
    float* d_x = dev_upload(x);
    double got = keel_cuda::sumsq_f64(d_x, n), again = keel_cuda::sumsq_f64(d_x, n);
    check_rel("sumsq_f64" + tag(n), got, sumsq_f64(x.data(), n), 1e-12);
    check_true("sumsq_f64 deterministic (memcmp)" + tag(n), memcmp(&got, &again, sizeof got) == 0);
    int64_t zc = keel_cuda::count_zeros(d_x, n), zw = count_zeros(x.data(), n);
    check_true("count_zeros" + tag(n) + ": " + std::to_string(zc) + " vs " + std::to_string(zw), zc == zw);
    dev_free(d_x);
}

// Uneven chunks of one buffer, an empty one and a one-element one among them, not in offset order.
static void test_sumsq_zeros_chunks() {
    const int64_t n = 70000;
    std::vector<float> x = with_zeros(n, 110);
    float* d_x = dev_upload(x);
    std::vector<int64_t> offsets = {0, 16384, 16384, 16385, 32769, 40000, 100, 69999};
    std::vector<int64_t> numels = {16384, 0, 1, 16384, 5000, 30000, 37, 1};
    size_t nc = offsets.size();
    std::vector<double> want(2 * nc), got(2 * nc), again(2 * nc);
    ref_sumsq_zeros_chunks(want.data(), x.data(), offsets.data(), numels.data(), nc);
    std::vector<double> cpu(2 * nc);
    sumsq_zeros_chunks(cpu.data(), x.data(), offsets.data(), numels.data(), nc);
    check_bits("sumsq_zeros_chunks CPU op vs its definition", cpu, want);
    keel_cuda::sumsq_zeros_chunks(got.data(), d_x, offsets.data(), numels.data(), nc);
    keel_cuda::sumsq_zeros_chunks(again.data(), d_x, offsets.data(), numels.data(), nc);
    for (size_t c = 0; c < nc; c++) {
        std::string s = " chunk " + std::to_string(c) + " (offset " + std::to_string(offsets[c]) + ", numel " + std::to_string(numels[c]) + ")";
        check_rel("sumsq_zeros_chunks sumsq" + s, got[2 * c], want[2 * c], 1e-12);
        check_true("sumsq_zeros_chunks zeros" + s + ": " + std::to_string((long long)got[2 * c + 1]), got[2 * c + 1] == want[2 * c + 1]);
    }
    check_true("sumsq_zeros_chunks deterministic (memcmp)", memcmp(got.data(), again.data(), got.size() * sizeof(double)) == 0);
    double untouched = -1;
    keel_cuda::sumsq_zeros_chunks(&untouched, d_x, offsets.data(), numels.data(), 0);
    check_true("sumsq_zeros_chunks with no chunks writes nothing", untouched == -1);
    dev_free(d_x);
}

int main() {
    Adam8bitMaps* q = new Adam8bitMaps;  // ~140 KB: not on the stack
    adam8bit_maps_init(q);
    for (int64_t n : SIZES) {
        for (float wd : {0.0f, 0.1f}) test_adamw(n, wd);
        for (float wd : {0.0f, 0.1f})
            for (float gs : {1.0f, 0.5f}) {
                for (int bs : {256, 2048}) test_adam8bit(n, bs, wd, gs, q);
                test_adam32(n, wd, gs);
            }
        test_grad_scale(n);
        test_grad_unscale_check(n);
        test_sumsq_count(n);
    }
    test_sumsq_count(5000000);  // past REDUCE_MAX_BLOCKS: threads stride over several elements
    test_adam8bit_maps_change(q);
    test_adam8bit_determinism(q);
    test_grad_round_fp16();
    test_sumsq_zeros_chunks();
    delete q;
    return cuda_test_finish();
}
