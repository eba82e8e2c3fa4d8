// test_cuda_optimizer — cuda/adamw.cuh and cuda/adam8bit.cuh against the CPU ops (cpu/adamw.h,
// cpu/adam8bit.h), on identical inputs, for n = 1, 1000, 4097, 70000 (odd sizes, partial blocks).
// The update tables (adamw/adam32/adam8bit_update_pieces): one launch over several pieces (different
// sizes and decay flags, percentile factors that change between steps, misaligned and out-of-order
// pieces, gaps between them) against the per-piece CPU reference, byte for byte; the compute copy
// (bf16, fp16) against cast_from_f32 of the reference parameters, byte for byte, and untouched
// outside the pieces; the CPU twins against the same reference; one launch per call (emulation).
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
#include "llmc/cuda/cast.cuh"
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

// ---- the update tables: every piece in one launch, the compute copy in the same pass ---------------
// Pieces of a flat buffer of PIECES_N elements, in table order: sizes from 1 to 70000, offsets that
// are not multiples of 4 (the scalar path) and that are, gaps between pieces (elements no piece
// owns: both copies must keep them), a piece placed before the one listed ahead of it. State offsets
// are prefix sums over the table, as llmc/optimizer.h makes them.
static const int64_t PIECES_N = 80000;
struct PieceSpec {
    int64_t offset_param, numel;
    uint8_t decay;
    float gnorm_scale[3];  // steps 1..3
};
static const PieceSpec PIECES[] = {
    {8, 1000, 1, {1.0f, 0.5f, 1.0f}},     {1011, 1, 0, {1.0f, 1.0f, 0.25f}},  {1012, 4097, 1, {0.5f, 0.5f, 0.5f}},
    {9000, 70000, 0, {1.0f, 1.0f, 1.0f}}, {5120, 2048, 1, {0.75f, 0.75f, 1.0f}}, {79003, 3, 1, {1.0f, 0.5f, 0.5f}},
};
static const int NPIECES = (int)(sizeof(PIECES) / sizeof(PIECES[0]));

// The table's host arrays; block_size 0: fp32 state (offsets in elements), else 8-bit state.
struct PieceTable {
    std::vector<int64_t> offset_param, offset_state, offset_block, numel;
    std::vector<uint8_t> decay;
    int64_t state_n = 0, nblocks = 0;
    int block_size = 0;
};
static PieceTable piece_table(int block_size) {
    PieceTable t;
    t.block_size = block_size;
    for (const PieceSpec& pc : PIECES) {
        t.offset_param.push_back(pc.offset_param);
        t.offset_state.push_back(t.state_n);
        t.offset_block.push_back(t.nblocks);
        t.numel.push_back(pc.numel);
        t.decay.push_back(pc.decay);
        t.state_n += pc.numel;
        if (block_size) t.nblocks += (pc.numel + block_size - 1) / block_size;
    }
    return t;
}
template <typename Pieces> static void pieces_init(Pieces* p, const PieceTable& t) {
    adam_pieces_init(p, t.offset_param.data(), t.offset_state.data(), t.offset_block.data(), t.numel.data(), t.decay.data(),
                     NPIECES, t.block_size);
}
static void pieces_init_cuda(keel_cuda::AdamPieces* p, const PieceTable& t) {
    keel_cuda::adam_pieces_init(p, t.offset_param.data(), t.offset_state.data(), t.offset_block.data(), t.numel.data(),
                                t.decay.data(), NPIECES, t.block_size);
}
static std::vector<float> piece_scales(int step) {
    std::vector<float> s;
    for (const PieceSpec& pc : PIECES) s.push_back(pc.gnorm_scale[step - 1]);
    return s;
}

static uint64_t emu_launches() {
#ifdef KEEL_CUDA_EMULATION
    return emu::profile().launches;
#else
    return 0;
#endif
}
static uint64_t emu_h2d_copies() {
#ifdef KEEL_CUDA_EMULATION
    return emu::profile().h2d_copies;
#else
    return 0;
#endif
}
static void check_one_launch(const std::string& what, uint64_t before) {
#ifdef KEEL_CUDA_EMULATION
    uint64_t n = emu_launches() - before;
    check_true(what + ": " + std::to_string(n) + " launch(es) for " + std::to_string(NPIECES) + " pieces", n == 1);
#endif
}

// The 16-bit copy's bytes.
template <typename F> static std::vector<uint16_t> copy_bits(const F* d, size_t n) { return dev_download((const uint16_t*)d, n); }

// The compute copy after the update: cast_from_f32 (the CUDA op) of the reference parameters inside
// the pieces, the sentinel bytes outside them.
template <typename F> static std::vector<uint16_t> want_copy(const std::vector<float>& p_ref, uint16_t sentinel) {
    float* d_p = dev_upload(p_ref);
    F* d_c = nullptr;
    CUDA_CHECK(cudaMalloc((void**)&d_c, p_ref.size() * sizeof(F)));
    keel_cuda::cast_from_f32(d_c, d_p, p_ref.size());
    std::vector<uint16_t> cast = copy_bits(d_c, p_ref.size()), want(p_ref.size(), sentinel);
    for (const PieceSpec& pc : PIECES)
        std::copy(cast.begin() + pc.offset_param, cast.begin() + pc.offset_param + pc.numel, want.begin() + pc.offset_param);
    dev_free(d_p);
    dev_free(d_c);
    return want;
}
template <typename F> static F* sentinel_copy(size_t n, uint16_t sentinel) { return (F*)dev_upload(std::vector<uint16_t>(n, sentinel)); }

static const uint16_t SENTINEL = 0x7e5a;  // a NaN in bf16 and fp16: no cast writes it here

// fp32 state: adamw_update_pieces (fp32 Adam) or adam32_update_pieces (adam8bit's fp32 units), 3
// steps with bf16 or fp16 copies, against adamw_update / adam32_update piece by piece on the CPU.
template <typename F> static void test_update_pieces_f32(bool adamw, const char* type) {
    PieceTable t = piece_table(0);
    std::vector<float> p = randn(PIECES_N, 200), m = randn(t.state_n, 201, 0.01), v = abs_sq(randn(t.state_n, 202, 0.01));
    std::vector<float> p_twin = p, m_twin = m, v_twin = v, c_twin(PIECES_N, -1.0f);  // the CPU twin, float copy
    float *d_p = dev_upload(p), *d_m = dev_upload(m), *d_v = dev_upload(v);
    F* d_c = sentinel_copy<F>(PIECES_N, SENTINEL);
    keel_cuda::AdamPieces dt;
    AdamPieces ht;
    pieces_init_cuda(&dt, t);
    pieces_init(&ht, t);
    const float wd = 0.1f;
    std::string name = std::string(adamw ? "adamw" : "adam32") + "_update_pieces (" + type + " copy)";
    uint64_t uploads = 0;  // host→device copies by the update calls
    for (int step = 1; step <= 3; step++) {
        std::vector<float> g = randn(PIECES_N, 210 + step, 0.01), scale = piece_scales(step);
        float* d_g = dev_upload(g);
        AdamHyper h = adam_hyper(step, wd);
        h.lr = 1e-3f * (float)step;  // changes per step: a kernel argument
        // Step 2 is clipped: the updates read g and use g·clip; the reference scales g in a pass of
        // its own first (grad_scale, as the optimizer once did) and updates with clip 1.
        h.clip = step == 2 ? 0.3712f : 1.0f;
        std::vector<float> g_ref = g;
        if (h.clip != 1.0f) grad_scale(g_ref.data(), PIECES_N, h.clip);
        float bc1 = h.c1, bc2 = h.c2 * h.c2;
        for (int k = 0; k < NPIECES; k++) {  // the reference: the per-range CPU op, piece by piece
            int64_t e = t.offset_param[k], s = t.offset_state[k], n = t.numel[k];
            float wk = t.decay[k] ? wd : 0.0f;
            if (adamw) {
                adamw_update(&p[e], &g_ref[e], &m[s], &v[s], n, h.lr, h.beta1, h.beta2, h.eps, wk, bc1, bc2);
            } else {
                AdamHyper hk = h;
                hk.wd = wk;
                hk.clip = 1.0f;
                adam32_update(&p[e], &g_ref[e], &m[s], &v[s], n, hk, scale[k]);
            }
        }
        uint64_t launches = emu_launches(), copies = emu_h2d_copies();
        if (adamw) {
            keel_cuda::adamw_update_pieces(d_p, d_c, d_g, d_m, d_v, &dt, h.lr, h.beta1, h.beta2, h.eps, wd, bc1, bc2, h.clip);
            adamw_update_pieces(p_twin.data(), c_twin.data(), g.data(), m_twin.data(), v_twin.data(), &ht, h.lr, h.beta1, h.beta2,
                                h.eps, wd, bc1, bc2, h.clip);
        } else {
            keel_cuda::adam32_update_pieces(d_p, d_c, d_g, d_m, d_v, &dt, h, scale.data());
            adam32_update_pieces(p_twin.data(), c_twin.data(), g.data(), m_twin.data(), v_twin.data(), &ht, h, scale.data());
        }
        if (step == 1) check_one_launch(name, launches);
        uploads += emu_h2d_copies() - copies;
        dev_free(d_g);
    }
    check_bits(name + " p, m, v after 3 steps vs the per-piece CPU op",
               bits_diff("p", dev_download(d_p, PIECES_N), p) + bits_diff("m", dev_download(d_m, t.state_n), m) +
                   bits_diff("v", dev_download(d_v, t.state_n), v));
    check_bits(name + " compute copy vs cast_from_f32 (outside the pieces untouched)",
               bits_diff("copy", copy_bits(d_c, PIECES_N), want_copy<F>(p, SENTINEL)));
    std::vector<float> c_want(PIECES_N, -1.0f);
    for (const PieceSpec& pc : PIECES) std::copy(p.begin() + pc.offset_param, p.begin() + pc.offset_param + pc.numel, c_want.begin() + pc.offset_param);
    check_bits(name + " CPU twin p, m, v, copy vs the per-piece CPU op",
               bits_diff("p", p_twin, p) + bits_diff("m", m_twin, m) + bits_diff("v", v_twin, v) + bits_diff("copy", c_twin, c_want));
#ifdef KEEL_CUDA_EMULATION
    // adam32: the factors differ at every step, one small copy each; adamw has none to copy
    check_true(name + ": " + std::to_string(uploads) + " host→device copies in 3 steps", uploads == (adamw ? 0u : 3u));
#endif
    keel_cuda::adam_pieces_free(&dt);
    adam_pieces_free(&ht);
    for (void* d : {(void*)d_p, (void*)d_m, (void*)d_v, (void*)d_c}) dev_free(d);
}

// The per-piece factors are copied to the device only when they change (a few bytes, no read-back).
static void test_update_pieces_factor_upload() {
    PieceTable t = piece_table(0);
    std::vector<float> p = randn(PIECES_N, 220), g = randn(PIECES_N, 221, 0.01), m(t.state_n, 0.0f), v(t.state_n, 0.0f);
    float *d_p = dev_upload(p), *d_g = dev_upload(g), *d_m = dev_upload(m), *d_v = dev_upload(v);
    keel_cuda::AdamPieces dt;
    pieces_init_cuda(&dt, t);
    std::vector<uint64_t> copies;
    for (int step : {1, 1, 2, 2, 1}) {
        uint64_t before = emu_h2d_copies();
        keel_cuda::adam32_update_pieces(d_p, (__nv_bfloat16*)nullptr, d_g, d_m, d_v, &dt, adam_hyper(step, 0.1f),
                                        piece_scales(step).data());
        copies.push_back(emu_h2d_copies() - before);
    }
#ifdef KEEL_CUDA_EMULATION
    check_true("adam32_update_pieces: factors copied only when they change (1 0 1 0 1 copies over 5 calls)",
               copies == std::vector<uint64_t>({1, 0, 1, 0, 1}));
#endif
    keel_cuda::adam_pieces_free(&dt);
    for (void* d : {(void*)d_p, (void*)d_g, (void*)d_m, (void*)d_v}) dev_free(d);
}

// 8-bit state: adam8bit_update_pieces, blocks of each piece from its first element (partial last
// blocks, a one-element piece), 3 steps, against adam8bit_update piece by piece on the CPU.
template <typename F> static void test_adam8bit_pieces(int bs, const char* type, const Adam8bitMaps* q) {
    PieceTable t = piece_table(bs);
    Adam8bitState s = adam8bit_state(t.state_n, bs, q);  // random codes and absmax over the state
    s.am.resize(t.nblocks);
    s.av.resize(t.nblocks);
    for (int64_t b = 0; b < t.nblocks; b++) {
        s.am[b] = (float)(0.05 * rng_uniform(7, 2, 33, b));
        s.av[b] = (float)(1e-4 * rng_uniform(7, 2, 34, b));
    }
    s.p = randn(PIECES_N, 230);
    Adam8bitState twin = s;
    std::vector<float> c_twin(PIECES_N, -1.0f);
    DevAdam8bit d = dev_upload(s);
    F* d_c = sentinel_copy<F>(PIECES_N, SENTINEL);
    keel_cuda::AdamPieces dt;
    AdamPieces ht;
    pieces_init_cuda(&dt, t);
    pieces_init(&ht, t);
    const float wd = 0.1f;
    std::string name = std::string("adam8bit_update_pieces BS=") + std::to_string(bs) + " (" + type + " copy)";
    for (int step = 1; step <= 3; step++) {
        std::vector<float> g = randn(PIECES_N, 240 + step, 0.01), scale = piece_scales(step);
        float* d_g = dev_upload(g);
        AdamHyper h = adam_hyper(step, wd);
        h.clip = step == 2 ? 0.3712f : 1.0f;  // a clipped step: the reference scales g in a pass of its own
        std::vector<float> g_ref = g;
        if (h.clip != 1.0f) grad_scale(g_ref.data(), PIECES_N, h.clip);
        for (int k = 0; k < NPIECES; k++) {
            int64_t e = t.offset_param[k], st = t.offset_state[k], b = t.offset_block[k];
            AdamHyper hk = h;
            hk.wd = t.decay[k] ? wd : 0.0f;
            hk.clip = 1.0f;
            adam8bit_update(&s.p[e], &g_ref[e], &s.cm[st], &s.cv[st], &s.am[b], &s.av[b], t.numel[k], bs, q, hk, scale[k]);
        }
        uint64_t launches = emu_launches();
        keel_cuda::adam8bit_update_pieces(d.p, d_c, d_g, d.cm, d.cv, d.am, d.av, &dt, q, h, scale.data());
        if (step == 1) check_one_launch(name, launches);
        adam8bit_update_pieces(twin.p.data(), c_twin.data(), g.data(), twin.cm.data(), twin.cv.data(), twin.am.data(),
                               twin.av.data(), &ht, q, h, scale.data());
        dev_free(d_g);
    }
    Adam8bitState got = dev_download(d, 0, t.nblocks);
    got.p = dev_download(d.p, PIECES_N);
    got.cm = dev_download(d.cm, t.state_n);
    got.cv = dev_download(d.cv, t.state_n);
    check_bits(name + " p, codes, absmax after 3 steps vs the per-piece CPU op",
               bits_diff("p", got.p, s.p) + bits_diff("code_m", got.cm, s.cm) + bits_diff("code_v", got.cv, s.cv) +
                   bits_diff("absmax_m", got.am, s.am) + bits_diff("absmax_v", got.av, s.av));
    check_bits(name + " compute copy vs cast_from_f32 (outside the pieces untouched)",
               bits_diff("copy", copy_bits(d_c, PIECES_N), want_copy<F>(s.p, SENTINEL)));
    std::vector<float> c_want(PIECES_N, -1.0f);
    for (const PieceSpec& pc : PIECES) std::copy(s.p.begin() + pc.offset_param, s.p.begin() + pc.offset_param + pc.numel, c_want.begin() + pc.offset_param);
    check_bits(name + " CPU twin vs the per-piece CPU op",
               bits_diff("p", twin.p, s.p) + bits_diff("code_m", twin.cm, s.cm) + bits_diff("code_v", twin.cv, s.cv) +
                   bits_diff("absmax_m", twin.am, s.am) + bits_diff("absmax_v", twin.av, s.av) + bits_diff("copy", c_twin, c_want));
    keel_cuda::adam_pieces_free(&dt);
    adam_pieces_free(&ht);
    dev_free(d);
    dev_free(d_c);
}

// 8-bit state shared across ranks: adam8bit_split_maxima and adam8bit_split_apply over segments
// (runs of 1..bs elements, several per block, sorted by block, a block with none), 3 steps, with the
// maxima raised by another rank's (a random factor >= 1 on some blocks) between the halves, against
// the CPU ops: params, codes, scales and the compute copy bit for bit.
template <typename F> static void test_adam8bit_split(int bs, const char* type, const Adam8bitMaps* q) {
    const int64_t n = 3000, nblocks = 14;
    Adam8bitState s = adam8bit_state(n, bs, q);
    s.am.resize(nblocks);
    s.av.resize(nblocks);
    std::vector<int64_t> op, os, ob, num;
    std::vector<uint8_t> dec;
    for (int64_t e = 0, k = 0; e < n; k++) {  // element runs, each given a block (block 5 gets none)
        int64_t len = std::min<int64_t>(n - e, 1 + (int64_t)(rng_u64(7, 3, 50, k) % (uint64_t)bs));
        int64_t b = (int64_t)(rng_u64(7, 3, 51, k) % (uint64_t)nblocks);
        if (b == 5) b = 6;
        op.push_back(e);
        os.push_back(e);
        ob.push_back(b);
        num.push_back(len);
        dec.push_back(k % 3 != 0);
        e += len;
    }
    std::vector<size_t> order(op.size());
    for (size_t k = 0; k < order.size(); k++) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ob[a] < ob[b]; });
    auto permute = [&](auto& v) { auto w = v; for (size_t k = 0; k < order.size(); k++) v[k] = w[order[k]]; };
    permute(op); permute(os); permute(ob); permute(num); permute(dec);
    int np = (int)op.size();
    keel_cuda::AdamPieces dt;
    AdamPieces ht;
    keel_cuda::adam_pieces_init(&dt, op.data(), os.data(), ob.data(), num.data(), dec.data(), np, bs);
    adam_pieces_init(&ht, op.data(), os.data(), ob.data(), num.data(), dec.data(), np, bs);
    DevAdam8bit d = dev_upload(s);
    F* d_c = sentinel_copy<F>(n, SENTINEL);
    std::vector<float> c_twin(n, -1.0f), scratch(2 * nblocks + 2 * np);
    float* d_scratch = dev_upload(scratch);
    std::string name = std::string("adam8bit_split BS=") + std::to_string(bs) + " (" + type + " copy)";
    std::string diffs;
    for (int step = 1; step <= 3; step++) {
        std::vector<float> g = randn(n, 260 + step, 0.01), scale(np);
        for (int k = 0; k < np; k++) scale[k] = step == 2 && k % 2 ? 0.5f : 1.0f;
        float* d_g = dev_upload(g);
        AdamHyper h = adam_hyper(step, 0.1f);
        h.clip = step == 3 ? 0.61f : 1.0f;  // a clipped step, on top of the percentile factors
        float *bm = scratch.data(), *bv = bm + nblocks;
        adam8bit_split_maxima(g.data(), s.cm.data(), s.cv.data(), s.am.data(), s.av.data(), bm, bv, nblocks, bv + nblocks, &ht, q, h,
                              scale.data());
        keel_cuda::adam8bit_split_maxima(d_g, d.cm, d.cv, d.am, d.av, d_scratch, d_scratch + nblocks, nblocks, d_scratch + 2 * nblocks,
                                         &dt, q, h, scale.data());
        diffs += bits_diff("maxima", dev_download(d_scratch, 2 * (size_t)nblocks), std::vector<float>(bm, bm + 2 * nblocks));
        check_true(name + ": block 5 (no segment) has maxima 0", bm[5] == 0.0f && bv[5] == 0.0f);
        for (int64_t b = 0; b < nblocks; b += 3) {  // another rank's larger maxima
            bm[b] *= 1.0f + (float)step;
            bv[b] *= 1.5f;
        }
        std::vector<float> raised = scratch;
        keel_cuda::host_to_device(d_scratch, raised.data(), raised.size() * sizeof(float));
        adam8bit_split_apply(s.p.data(), c_twin.data(), g.data(), s.cm.data(), s.cv.data(), s.am.data(), s.av.data(), bm, bv, nblocks, &ht, q,
                             h, scale.data());
        keel_cuda::adam8bit_split_apply(d.p, d_c, d_g, d.cm, d.cv, d.am, d.av, d_scratch, d_scratch + nblocks, nblocks, &dt, q, h,
                                        scale.data());
        dev_free(d_g);
    }
    Adam8bitState got = dev_download(d, n, nblocks);
    diffs += bits_diff("p", got.p, s.p) + bits_diff("code_m", got.cm, s.cm) + bits_diff("code_v", got.cv, s.cv) +
             bits_diff("absmax_m", got.am, s.am) + bits_diff("absmax_v", got.av, s.av);
    check_bits(name + " maxima, p, codes, scales after 3 steps vs the CPU ops", diffs);
    float* d_want = dev_upload(s.p);  // every element is in a segment: the whole copy is cast_from_f32(p)
    F* d_cast = sentinel_copy<F>(n, SENTINEL);
    keel_cuda::cast_from_f32(d_cast, d_want, (size_t)n);
    check_bits(name + " compute copy vs cast_from_f32 of p; the CPU twin's copy = p",
               bits_diff("copy", copy_bits(d_c, n), copy_bits(d_cast, n)) + bits_diff("twin copy", c_twin, s.p));
    dev_free(d_want);
    dev_free(d_cast);
    keel_cuda::adam_pieces_free(&dt);
    adam_pieces_free(&ht);
    dev_free(d);
    dev_free(d_c);
    dev_free(d_scratch);
}

// Without a copy (fp32 training, ZeRO-1's shards): p_c null, the same p, m, v.
static void test_update_pieces_no_copy() {
    PieceTable t = piece_table(0);
    std::vector<float> p = randn(PIECES_N, 250), g = randn(PIECES_N, 251, 0.01), m = randn(t.state_n, 252, 0.01),
                       v = abs_sq(randn(t.state_n, 253, 0.01));
    float *d_p = dev_upload(p), *d_g = dev_upload(g), *d_m = dev_upload(m), *d_v = dev_upload(v);
    keel_cuda::AdamPieces dt;
    pieces_init_cuda(&dt, t);
    AdamHyper h = adam_hyper(1, 0.1f);
    for (int k = 0; k < NPIECES; k++) {
        int64_t e = t.offset_param[k], s = t.offset_state[k];
        adamw_update(&p[e], &g[e], &m[s], &v[s], t.numel[k], h.lr, h.beta1, h.beta2, h.eps, t.decay[k] ? 0.1f : 0.0f, h.c1, h.c2 * h.c2);
    }
    keel_cuda::adamw_update_pieces(d_p, (float*)nullptr, d_g, d_m, d_v, &dt, h.lr, h.beta1, h.beta2, h.eps, 0.1f, h.c1, h.c2 * h.c2);
    check_bits("adamw_update_pieces without a copy: p, m, v vs the per-piece CPU op",
               bits_diff("p", dev_download(d_p, PIECES_N), p) + bits_diff("m", dev_download(d_m, t.state_n), m) +
                   bits_diff("v", dev_download(d_v, t.state_n), v));
    keel_cuda::adam_pieces_free(&dt);
    for (void* d : {(void*)d_p, (void*)d_g, (void*)d_m, (void*)d_v}) dev_free(d);
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
    // A NaN stays a NaN; its payload is the hardware's (x86 keeps the operand's quiet NaN, a GPU
    // returns the canonical 0x7fffffff): both sides' NaNs are compared as one value.
    std::vector<float> got = dev_download(d_g, g.size());
    for (float* v : {got.data(), g.data()})
        for (size_t i = 0; i < g.size(); i++)
            if (std::isnan(v[i])) v[i] = NAN;
    check_bits("grad_unscale_check values " + what, got, g);
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
    // (the GPU reads 16-byte packs between 0-3 single elements at either end: chunks at every
    // alignment, shorter than the run up to the first boundary (offset 1, numel 2), exactly one pack)
    std::vector<int64_t> offsets = {0, 16384, 16384, 16385, 32769, 40000, 100, 69999, 1, 8, 50002};
    std::vector<int64_t> numels = {16384, 0, 1, 16384, 5000, 30000, 37, 1, 2, 4, 7};
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
    test_update_pieces_f32<__nv_bfloat16>(true, "bf16");
    test_update_pieces_f32<__half>(true, "fp16");
    test_update_pieces_f32<__nv_bfloat16>(false, "bf16");
    test_update_pieces_f32<__half>(false, "fp16");
    test_update_pieces_factor_upload();
    test_update_pieces_no_copy();
    for (int bs : {256, 2048}) test_adam8bit_pieces<__nv_bfloat16>(bs, "bf16", q);
    test_adam8bit_pieces<__half>(256, "fp16", q);
    for (int bs : {64, 256}) test_adam8bit_split<__nv_bfloat16>(bs, "bf16", q);
    test_adam8bit_split<__half>(256, "fp16", q);
    delete q;
    return cuda_test_finish();
}
