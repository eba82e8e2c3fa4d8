// test_model_knobs — each knob that changes the network or its initialisation, against values
// computed by hand from its formula (docs/knobs.md#initialization, #embedding-layernorm-and-stableembedding, #attention-numerics, #normformer, #activations-dropout-positions-and-alibi). Every check here fails if
// its knob is inert or wrong; the gradients of the same knobs are checked in test_gradcheck.
#include <algorithm>
#include <vector>

#include "llmc/init.h"
#include "llmc/model.h"
#include "llmc/optimizer.h"

static int failures = 0;

static void expect(bool ok, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%-4s ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (!ok) failures++;
}

static bool near(double got, double want, double rel) { return std::fabs(got - want) <= rel * std::max(1e-30, std::fabs(want)); }

// Sample mean and standard deviation of a tensor.
static void moments(const float* x, int64_t n, double* mean, double* sd) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) { s += x[i]; s2 += (double)x[i] * x[i]; }
    *mean = s / n;
    *sd = std::sqrt(s2 / n - *mean * *mean);
}

static void test_init() {
    // σ presets by hand: h = 11600 → small_init sqrt(2/58000) = 0.0058722 (the 104B's 0.006);
    // h = 14336 → mt_nlg sqrt(1/43008) = 0.0048220 (the 176B's 0.0048)
    expect(near(init_sigma("small_init", 0.02, 11600), 0.005872202195147035, 1e-12), "small_init sigma for h=11600 = 0.0058722");
    expect(near(init_sigma("mt_nlg", 0.02, 14336), 0.004821979686315372, 1e-12), "mt_nlg sigma for h=14336 = 0.0048220");
    expect(init_sigma("std", 0.006, 64) == 0.006, "std takes --init-method-std");

    // Initialised tensors: σ within sampling error (n ≈ 25k-100k elements → relative error ~1%).
    GPTConfig cfg = {64, 1000, 1024, 4, 4, 64};
    ParamTable pt;
    param_table_build(&pt, &cfg);
    std::vector<float> p(pt.total);
    double sigma = init_sigma("small_init", 0.02, cfg.channels);  // sqrt(2/320) = 0.0790569
    param_table_init(p.data(), &pt, &cfg, sigma, 11);
    double mean, sd;
    moments(p.data() + pt.t[P_QKVW].offset_canonical, pt.t[P_QKVW].numel, &mean, &sd);
    expect(near(sd, 0.07905694150420949, 0.02) && std::fabs(mean) < 0.002, "qkvw ~ N(0, sqrt(2/(5h))): sd %.5f want 0.07906", sd);
    moments(p.data() + pt.t[P_FCPROJW].offset_canonical, pt.t[P_FCPROJW].numel, &mean, &sd);
    expect(near(sd, 0.07905694150420949 / std::sqrt(8.0), 0.02), "fcprojw ~ N(0, sigma/sqrt(2L)), L=4: sd %.5f want 0.02795", sd);
    moments(p.data() + pt.t[P_ATTPROJW].offset_canonical, pt.t[P_ATTPROJW].numel, &mean, &sd);
    expect(near(sd, 0.07905694150420949 / std::sqrt(8.0), 0.02), "attprojw ~ N(0, sigma/sqrt(2L)): sd %.5f", sd);
    const float* wte = p.data() + pt.t[P_WTE].offset_canonical;
    moments(wte, (int64_t)cfg.vocab_size * cfg.channels, &mean, &sd);
    expect(near(sd, 0.07905694150420949, 0.02), "wte real rows ~ N(0, sigma): sd %.5f", sd);
    bool pad_zero = true;
    for (int64_t i = (int64_t)cfg.vocab_size * cfg.channels; i < pt.t[P_WTE].numel; i++) pad_zero &= wte[i] == 0;
    expect(pad_zero, "wte padding rows are 0");

    // StableEmbedding: xavier-uniform on (Vp, C): a = sqrt(6/(1024+64)) = 0.0742611; U(-a,a) has sd a/sqrt(3)
    GPTConfig st = cfg;
    st.stable_embedding = true;
    param_table_build(&pt, &st);
    p.assign(pt.total, 0);
    param_table_init(p.data(), &pt, &st, 0.02, 11);
    wte = p.data() + pt.t[P_WTE].offset_canonical;
    double a = 0.07426106572325057, maxabs = 0;
    for (int64_t i = 0; i < (int64_t)st.vocab_size * st.channels; i++) maxabs = std::max(maxabs, (double)std::fabs(wte[i]));
    moments(wte, (int64_t)st.vocab_size * st.channels, &mean, &sd);
    expect(maxabs <= a && maxabs > 0.99 * a, "stable-embedding: |wte| <= a = 0.0742611 and reaches it (max %.6f)", maxabs);
    expect(near(sd, a / std::sqrt(3.0), 0.02), "stable-embedding: sd %.5f want a/sqrt(3) = 0.04287", sd);
    expect(pt.t[P_LNEW].numel == 64 && p[pt.t[P_LNEW].offset_canonical] == 1 && p[pt.t[P_LNEB].offset_canonical] == 0,
           "stable-embedding brings the embedding LayerNorm (weight 1, bias 0)");

    // Sinusoidal positions, C = 64, half = 32: column j<32 is sin(pos·10000^(-j/31)), j>=32 cos(...)
    GPTConfig sn = cfg;
    sn.sinusoidal_positions = true;
    param_table_build(&pt, &sn);
    p.assign(pt.total, 0);
    param_table_init(p.data(), &pt, &sn, 0.02, 11);
    const float* wpe = p.data() + pt.t[P_WPE].offset_canonical;
    // pos 3, j = 0: sin(3) = 0.14112; j = 32: cos(3) = -0.98999; j = 31: sin(3e-4); pos 5, j = 1: sin(5·10000^(-1/31)) = sin(3.7173...)
    expect(near(wpe[3 * 64 + 0], 0.1411200080598672, 1e-6), "sinusoidal (3, 0) = sin 3");
    expect(near(wpe[3 * 64 + 32], -0.9899924966004454, 1e-6), "sinusoidal (3, 32) = cos 3");
    expect(near(wpe[3 * 64 + 31], 2.9999999550000e-4, 1e-5), "sinusoidal (3, 31) = sin(3/10000)");
    expect(near(wpe[5 * 64 + 1], std::sin(5.0 * std::pow(10000.0, -1.0 / 31.0)), 1e-6), "sinusoidal (5, 1) = sin(5·10000^(-1/31))");
}

static void test_alibi() {
    float s8[8], s12[12], s112[112];
    alibi_slopes(8, s8);
    bool ok = true;
    for (int i = 0; i < 8; i++) ok &= s8[i] == (float)std::ldexp(1.0, -(i + 1));  // 2^-1 .. 2^-8
    expect(ok, "alibi slopes, 8 heads: 1/2, 1/4, ..., 1/256");
    alibi_slopes(12, s12);
    // 12 heads: the 8-head series, then 16-head slopes 2^(-k/2) for k = 1, 3, 5, 7
    double want12[12] = {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625,
                         0.7071067811865476, 0.35355339059327373, 0.17677669529663687, 0.08838834764831845};
    ok = true;
    for (int i = 0; i < 12; i++) ok &= near(s12[i], want12[i], 1e-7);
    expect(ok, "alibi slopes, 12 heads (not a power of two)");
    alibi_slopes(112, s112);  // BLOOM: 2^(-k/8), k = 1..64, then 2^(-(2k+1)/16), k = 0..47
    ok = true;
    for (int k = 1; k <= 64; k++) ok &= near(s112[k - 1], std::pow(2.0, -k / 8.0), 1e-7);
    for (int k = 0; k < 48; k++) ok &= near(s112[64 + k], std::pow(2.0, -(2 * k + 1) / 16.0), 1e-7);
    expect(ok, "alibi slopes, BLOOM's 112 heads");

    // Effect: with q = 0 every score is equal, so a row's probabilities are softmax(slope·u):
    // row t = 2 of head 0 (slope 1/2): weights e^0, e^0.5, e^1 normalised.
    const int B = 1, T = 3, C = 4, NH = 2;
    std::vector<float> qkv(B * T * 3 * C, 0.0f), out(B * T * C), att(B * NH * T * T), slopes(NH);
    alibi_slopes(NH, slopes.data());  // 2 heads: 2^-4, 2^-8
    AttentionOpts o;
    o.alibi = slopes.data();
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, &o);
    double z = 1 + std::exp(0.0625) + std::exp(0.125);
    expect(near(att[2 * T + 2], std::exp(0.125) / z, 1e-6) && near(att[2 * T + 0], 1 / z, 1e-6),
           "alibi probabilities = softmax(slope·u) (head 0, slope 1/16)");
    AttentionOpts plain;
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, &plain);
    expect(near(att[2 * T + 2], 1.0 / 3.0, 1e-6), "without alibi the same row is uniform");
}

// qk-inward and layer scaling compute the same softmax in fp32 (within rounding), but hold
// intermediates of different magnitude: that difference is the point of both knobs under fp16.
static void test_attention_scaling() {
    const int hs = 64, T = 16;
    std::vector<float> q(T * hs), k(T * hs);
    for (int i = 0; i < T * hs; i++) { q[i] = (float)(4 * rng_normal(1, 9, 1, i)); k[i] = (float)(4 * rng_normal(1, 9, 2, i)); }
    const double layer = 24;
    struct V { const char* name; int scaling; double coeff; double max_raw = 0, max_stored = 0, max_diff = 0; } v[] = {
        {"standard", ATTN_SCALING_STANDARD, 1}, {"qk-inward", ATTN_SCALING_QK_INWARD, 1},
        {"layer-scaled", ATTN_SCALING_STANDARD, layer}, {"qk-inward + layer-scaled", ATTN_SCALING_QK_INWARD, layer}};
    for (auto& x : v) {
        AttentionOpts o;
        o.scaling = x.scaling;
        o.coeff = x.coeff;
        for (int t = 0; t < T; t++)
            for (int u = 0; u < T; u++) {
                float raw, stored;
                float s = attention_score(&q[t * hs], &k[u * hs], hs, 0, u, &o, &raw, &stored);
                double exact = 0;
                for (int i = 0; i < hs; i++) exact += (double)q[t * hs + i] * k[u * hs + i];
                exact /= 8.0;  // sqrt(64)
                x.max_raw = std::max(x.max_raw, (double)std::fabs(raw));
                x.max_stored = std::max(x.max_stored, (double)std::fabs(stored));
                x.max_diff = std::max(x.max_diff, std::fabs(s - exact) / std::max(1.0, std::fabs(exact)));
            }
        printf("     %-26s max|raw product| %10.4f  max|stored score| %9.5f  max rel err of s %.2e\n", x.name, x.max_raw,
               x.max_stored, x.max_diff);
        expect(x.max_diff < 1e-5, "%s: softmax input equals q.k/sqrt(d) within fp32 rounding", x.name);
    }
    // The product the GEMM accumulates: standard holds q·k (8x the score here), qk-inward q·k/8;
    // layer scaling divides what is stored by the layer number (24) and the inward product by 8·24.
    expect(near(v[0].max_raw / v[1].max_raw, 8.0, 1e-4), "qk-inward's product is sqrt(d) = 8 times smaller (%.4f)", v[0].max_raw / v[1].max_raw);
    expect(near(v[0].max_stored / v[2].max_stored, layer, 1e-4), "layer scaling stores scores %g times smaller (%.4f)", layer,
           v[0].max_stored / v[2].max_stored);
    expect(near(v[0].max_raw / v[3].max_raw, 8.0 * layer, 1e-4), "both: the product is sqrt(d)·layer = 192 times smaller (%.4f)",
           v[0].max_raw / v[3].max_raw);
}

// A tiny model for the knobs' effect tests (GPT-2 shape, vocabulary 37).
struct Tiny {
    GPT<float> m;
    std::vector<int> in, tg;
    Tiny(GPTConfig cfg, int B = 2, int T = 6) {
        gpt_build(&m, &cfg, B, T);
        param_table_init(m.params, &m.table, &cfg, 0.3, 7);
        for (int i = 0; i < B * T; i++) { in.push_back((i * 7 + 3) % 37); tg.push_back((i * 5 + 1) % 37); }
    }
    ~Tiny() { gpt_free(&m); }
    double loss(int B = 2, int T = 6) { return gpt_forward(&m, in.data(), tg.data(), B, T); }
};

static GPTConfig tiny_cfg() { return GPTConfig{8, 37, 48, 2, 2, 8}; }

static void test_model_effects() {
    double base = Tiny(tiny_cfg()).loss();
    {   // embedding LayerNorm: with zero positions, every row of the residual stream is normalised
        GPTConfig c = tiny_cfg();
        c.embed_layernorm = true;
        Tiny t(c);
        std::fill(t.m.p[P_WPE], t.m.p[P_WPE] + t.m.table.t[P_WPE].numel, 0.0f);
        t.loss();
        double worst = 0;
        for (int r = 0; r < 12; r++) {
            double mean, sd;
            moments(t.m.acts.encoded + r * 8, 8, &mean, &sd);
            worst = std::max({worst, std::fabs(mean), std::fabs(sd - 1.0)});
        }
        expect(worst < 1e-3, "embed-layernorm: embedding rows have mean 0 and sd 1 (worst deviation %.2e)", worst);
        expect(t.m.table.t[P_LNEW].decay == false && t.m.table.t[P_LNEB].decay == false, "embed-layernorm: no weight decay");
    }
    {   // ALiBi: no position table, a different loss
        GPTConfig c = tiny_cfg();
        c.alibi = true;
        Tiny t(c);
        expect(t.m.table.t[P_WPE].numel == 0, "alibi: the model has no position table");
        double l = t.loss();
        expect(l != base, "alibi changes the loss (%.6f vs %.6f)", l, base);
    }
    {   // ReLU: the MLP activations are max(fch, 0)
        GPTConfig c = tiny_cfg();
        c.activation = ACT_RELU;
        Tiny t(c);
        t.loss();
        bool ok = true;
        for (int i = 0; i < 2 * 12 * 32; i++) ok &= t.m.acts.fch_act[i] == std::max(t.m.acts.fch[i], 0.0f);
        expect(ok, "relu: fch_act = max(fch, 0)");
    }
    {   // NormFormer: the head scale and both LayerNorms are live
        GPTConfig c = tiny_cfg();
        c.normformer = true;
        Tiny t(c);
        expect(t.m.table.t[P_HEADSCALE].numel == 2 * 2 && t.m.table.t[P_LNAW].numel == 2 * 8 && t.m.table.t[P_LNFCW].numel == 2 * 32,
               "normformer: (L, NH) head scales, (L, C) and (L, 4C) LayerNorms");
        double l0 = t.loss();
        t.m.p[P_HEADSCALE][1] = 0.5f;
        double l1 = t.loss();
        t.m.p[P_HEADSCALE][1] = 1.0f;
        t.m.p[P_LNFCB][3] = 0.7f;
        double l2 = t.loss();
        expect(l0 != base && l1 != l0 && l2 != l0, "normformer: changes the loss, and so do its head scale and MLP LayerNorm");
        // head 1 of layer 0 scaled by 0.5: its channels [4, 8) of atty_hs are half of atty
        t.m.p[P_LNFCB][3] = 0.0f;
        t.m.p[P_HEADSCALE][1] = 0.5f;
        t.loss();
        expect(t.m.acts.atty_hs[5] == 0.5f * t.m.acts.atty[5] && t.m.acts.atty_hs[1] == t.m.acts.atty[1],
               "normformer: the head scale multiplies its own head's channels only");
    }
    {   // Dropout: off unless training; about p of the elements dropped; masks keyed by sample number
        GPTConfig c = tiny_cfg();
        c.hidden_dropout = 0.5; c.attention_dropout = 0.5; c.embed_dropout = 0.5;
        Tiny t(c);
        double eval = t.loss();
        expect(eval == base, "dropout: no effect when not training (%.9f vs %.9f)", eval, base);
        gpt_set_dropout(&t.m, true, 5, 100);
        double tr = t.loss();
        expect(tr != base, "dropout: active when training");
        DropoutSite d = {0.3, 5, dropout_site(0, DROPOUT_SITE_MLP_OUT), 0};
        int64_t dropped = 0, n = 200000;
        for (int64_t i = 0; i < n; i++) dropped += !dropout_keep(&d, i / 1000, (uint64_t)(i % 1000));
        double frac = (double)dropped / n;  // sd of the estimate: sqrt(0.21/2e5) = 0.001
        expect(std::fabs(frac - 0.3) < 0.005, "dropout p=0.3 drops %.4f of 200000 elements", frac);
        // The GPU kernels' integer keep test (dropout_keep_from, dropout_keep_keyed) is dropout_keep's.
        // At its boundary: the bits keep_from pass the double test, keep_from - 1 fail it; the p include
        // draws themselves (a p equal to a draw is kept: >=), draws above 2^52·2^-53 (where x + 0.5
        // rounds) and the ends; then the two decisions on random bits.
        std::vector<double> ps = {0.0, -0.5, 1e-300, 0x1p-55, 0x1p-54, 0x1p-53, 0.1, 0.25, 0.3, 1.0 / 3, 0.5, 0.9, 0.999999, 1.0 - 0x1p-53, 1.0};
        for (uint64_t x : {1ull, 2ull, 12345ull, (1ull << 52) - 1, 1ull << 52, (1ull << 52) + 1, (1ull << 52) + 2, (1ull << 53) - 2, (1ull << 53) - 1})
            for (double dp : {0.0, 1e-17, -1e-17}) ps.push_back(rng_unit(x << 11) + dp);
        int boundary_bad = 0;
        for (double p : ps) {
            uint64_t k = dropout_keep_from(p);
            bool ok = k <= (1ull << 53) && (k == (1ull << 53) || rng_unit(k << 11) >= p) && (k == 0 || !(rng_unit((k - 1) << 11) >= p));
            // and the integer test on the 64 bits either side of the boundary (the low 11 bits unread)
            for (uint64_t x : {k - 1, k})
                if (x < (1ull << 53))
                    for (uint64_t low : {0ull, 0x7ffull}) ok = ok && dropout_bits_kept(x << 11 | low, k) == (rng_unit(x << 11 | low) >= p);
            if (!ok && boundary_bad++ < 3) std::printf("  dropout_keep_from(%.17g) = %llu: not the boundary\n", p, (unsigned long long)k);
        }
        expect(boundary_bad == 0, "dropout_keep_from: the smallest passing bits, at %zu values of p (%d wrong)", ps.size(), boundary_bad);
        // (the largest draw, (2^53 - 1 + 0.5)·2^-53, rounds to 1: p = 1 keeps it; above 1 nothing passes)
        expect(dropout_keep_from(0.0) == 0 && dropout_keep_from(0.5) == (1ull << 52) && dropout_keep_from(1.0) == (1ull << 53) - 1 &&
                   dropout_keep_from(std::nextafter(1.0, 2.0)) == (1ull << 53),
               "dropout_keep_from: p = 0 keeps every draw, p = 0.5 the upper half, p = 1 the one draw that rounds to 1, p > 1 none");
        int64_t differ = 0, kept = 0, m = 0;
        for (double p : {0.1, 0.3, 0.5, 0.9}) {
            DropoutSite e = {p, 11, dropout_site(2, DROPOUT_SITE_ATTN_PROBS), 40};
            uint64_t kf = dropout_keep_from(p);
            for (int64_t b = 0; b < 4; b++) {
                uint64_t rk = dropout_row_key(&e, b);
                for (uint64_t r = 0; r < 25000; r++, m++) {
                    bool k1 = dropout_keep(&e, b, r), k2 = dropout_keep_keyed(rk, r, kf);
                    differ += k1 != k2;
                    kept += k1;
                }
            }
        }
        expect(differ == 0 && kept > 0 && kept < m, "dropout_keep_keyed = dropout_keep on %lld draws at 4 values of p (%lld differ)", (long long)m,
               (long long)differ);
        // micro-batch of 2 starting at sample 100 == two micro-batches of 1 at samples 100 and 101
        gpt_set_dropout(&t.m, true, 5, 100);
        t.loss();
        std::vector<float> two(t.m.acts.residual3 + 12 * 8, t.m.acts.residual3 + 12 * 8 + 12 * 8);  // layer 1 output
        Tiny one(c, 1, 6);
        std::vector<float> split;
        for (int b = 0; b < 2; b++) {
            std::copy(t.in.begin() + 6 * b, t.in.begin() + 6 * b + 6, one.in.begin());
            std::copy(t.tg.begin() + 6 * b, t.tg.begin() + 6 * b + 6, one.tg.begin());
            gpt_set_dropout(&one.m, true, 5, 100 + b);
            one.loss(1, 6);
            split.insert(split.end(), one.m.acts.residual3 + 6 * 8, one.m.acts.residual3 + 12 * 8);
        }
        expect(two == split, "dropout masks depend on the sample number, not on the micro-batch split");
    }
    {   // attention scaling variants: the same model output within fp32 rounding
        GPTConfig c = tiny_cfg();
        c.attention_scaling = ATTN_SCALING_QK_INWARD;
        c.qk_layer_scaling = true;
        double l = Tiny(c).loss();
        expect(near(l, base, 1e-6), "qk-inward + layer scaling: loss %.9f = standard %.9f within rounding", l, base);
    }
}

// --gradient-predivide-factor (docs/knobs.md#gradient-pre-divide-factor): ÷F before the sum, ×F/DP after; the net factor is 1/DP.
// One process here (the sum over ranks is exercised by test_data_parallel under mpirun).
static void test_predivide() {
    Tiny t(tiny_cfg());
    Config c;
    Optimizer o;
    optimizer_init(&o, &t.m.table, &c);
    Comm one{};  // rank 0, no MPI, no label
    one.size = 1;
    std::vector<float> scratch, g(o.n);
    for (int64_t i = 0; i < o.n; i++) g[i] = (float)(0.01 * (i % 97) - 0.3);
    std::vector<float> h = g;
    grad_reduce(&one, &o, h.data(), 3.0, &scratch);
    bool applied = true, moved = false;
    for (int64_t i = 0; i < o.n; i++) {
        applied &= h[i] == (g[i] * (float)(1.0 / 3.0)) * 3.0f;
        moved |= h[i] != g[i];
    }
    expect(applied && moved, "grad_reduce F=3 on one rank: g·(1/3)·3 (rounding shows the knob acted)");
    h = g;
    grad_reduce(&one, &o, h.data(), 1.0, &scratch);
    expect(h == g, "grad_reduce F=1 on one rank is the identity");
    optimizer_free(&o);
}

int main() {
    test_predivide();
    test_init();
    test_alibi();
    test_attention_scaling();
    test_model_effects();
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
