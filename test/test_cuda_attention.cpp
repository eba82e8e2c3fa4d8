// test_cuda_attention — cuda/attention.cuh and cuda/classifier.cuh against the CPU ops
// (cpu/attention.h, cpu/classifier.h), on shapes with T and the head size not multiples of 32,
// T = 1 and N = 1, for every score variant (standard, qk-inward, layer coefficient, ALiBi) and
// attention dropout, also with a tensor-parallel head_offset (the mask of the model's head). The
// backward ops accumulate, so each starts from a random gradient buffer, and with dinp_write (the
// model's use) write over NaN. The GEMM path's scratch: the block P's zeros above every diagonal
// (the products read it whole), its byte formula, the backward's reuse of the forward's head-major
// q, k, v; bf16 S and dP at the GPU's rounding points, and within S's rounding bound of the fp32
// scores. Then the classifier
// backward with targets outside [0, V), and the vocabulary-parallel cross-entropy ops
// (vocab_parallel_max/sumexp/finish) in fp32 and bf16, one by one against the CPU ops and as two
// ranks' halves of a row against the one-rank classifier_forward.
// Tolerances: both sides compute in fp32; the GPU uses expf instead of exp_f32 (each ≤ 2 ulp) and
// sums the softmax and ds rows in a lane tree instead of ascending u, so values agree to a few ulp
// of the largest term: 1e-5 relative for probabilities, outputs and losses, 1e-4 for the
// gradients (ds = att·(datt - dot) cancels, which magnifies the rounding of dot), each with a small
// absolute floor for values near zero.
#include <cstring>

#include "llmc/cpu/attention.h"
#include "llmc/cpu/classifier.h"
#include "llmc/cuda/attention.cuh"
#include "llmc/cuda/classifier.cuh"
#include "test/attention_test.h"
#include "test/cuda_test.h"

static void dev_set(float* d, const std::vector<float>& h) {
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
}

// The scratch block P (dropped probabilities, then dS) of the carve for (B,T,C,NH): how many of its
// elements above a diagonal are not +0 (any other bit pattern). The GEMMs read P whole, so its
// upper triangles must stay zero: zeroed once per carve, and no kernel writes anything else there.
template <typename F> static size_t attention_p_upper_nonzero(int B, int T, int C, int NH) {
    keel_cuda::AttnCarveKey key;
    keel_cuda::AttnScratch a = keel_cuda::attention_scratch_carve(B, T, C, NH, sizeof(F), &key);
    size_t n = (size_t)B * NH * T * T, bad = 0;
    std::vector<F> p = dev_download((const F*)a.p, n);
    for (size_t i = 0; i < n; i++) {
        uint16_t z[sizeof(F) / 2];
        memcpy(z, &p[i], sizeof(F));
        bool zero = true;
        for (uint16_t w : z) zero = zero && w == 0;
        if ((int)(i % T) > (int)(i / T % T) && !zero) bad++;
    }
    return bad;
}

static void test_attention(int B, int T, int C, int NH, const AttnVariant& v, bool determinism) {
    char tag[128];
    snprintf(tag, sizeof tag, " %s B=%d T=%d C=%d NH=%d", v.name, B, T, C, NH);
    AttnOptsPair op;
    attn_opts_make(&op, v, NH);
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;
    std::vector<float> inp = randn(n_inp, 10), dout = randn(n_out, 11), dinp0 = randn(n_inp, 12);  // (B,T,3C) (B,T,C) (B,T,3C)
    std::vector<float> out(n_out), att(n_att, 0.0f), dinp = dinp0;                                   // (B,T,C) (B,NH,T,T) (B,T,3C)
    float *d_inp = dev_upload(inp), *d_dout = dev_upload(dout), *d_dinp = dev_upload(dinp0);
    float *d_out = dev_upload(out), *d_att = dev_upload(std::vector<float>(n_att, 1.0f));  // 1s: the zeros must be written

    attention_forward(out.data(), att.data(), inp.data(), B, T, C, NH, &op.host);
    keel_cuda::attention_forward(d_out, d_att, d_inp, B, T, C, NH, &op.dev);
    check_close(std::string("attention_forward att") + tag, dev_download(d_att, n_att), att, 1e-5, 1e-6);
    check_close(std::string("attention_forward out") + tag, dev_download(d_out, n_out), out, 1e-5, 1e-5);

    // The backward from the CPU's probabilities, so only the backward's numerics are compared.
    CUDA_CHECK(cudaMemcpy(d_att, att.data(), n_att * sizeof(float), cudaMemcpyHostToDevice));
    attention_backward(dinp.data(), dout.data(), inp.data(), att.data(), B, T, C, NH, &op.host);
    keel_cuda::attention_backward(d_dinp, d_dout, d_inp, d_att, B, T, C, NH, &op.dev);
    std::vector<float> got = dev_download(d_dinp, n_inp);
    check_close(std::string("attention_backward dinp") + tag, got, dinp, 1e-4, 1e-5);

    check_true(std::string("attention scratch P: 0 above every diagonal") + tag, attention_p_upper_nonzero<float>(B, T, C, NH) == 0);

    // dinp_write (the model's use): every element written, its old contents (NaN) not read; the
    // same values as accumulating into zeros
    std::vector<float> dinp_w(n_inp, 0.0f);
    attention_backward(dinp_w.data(), dout.data(), inp.data(), att.data(), B, T, C, NH, &op.host);
    float* d_dinp_w = dev_upload(std::vector<float>(n_inp, NAN));
    keel_cuda::attention_backward(d_dinp_w, d_dout, d_inp, d_att, B, T, C, NH, &op.dev, true);
    check_close(std::string("attention_backward dinp_write over NaN") + tag, dev_download(d_dinp_w, n_inp), dinp_w, 1e-4, 1e-5);
    dev_free(d_dinp_w);

    if (determinism) {  // a second run from the same start gives the same bytes
        // (the first backward took the forward's head-major q, k, v; this one splits them again)
        CUDA_CHECK(cudaMemcpy(d_dinp, dinp0.data(), n_inp * sizeof(float), cudaMemcpyHostToDevice));
        keel_cuda::attention_backward(d_dinp, d_dout, d_inp, d_att, B, T, C, NH, &op.dev);
        std::vector<float> again = dev_download(d_dinp, n_inp);
        check_true(std::string("attention_backward deterministic") + tag, memcmp(got.data(), again.data(), n_inp * sizeof(float)) == 0);
        std::vector<float> att1 = dev_download(d_att, n_att);
        keel_cuda::attention_forward(d_out, d_att, d_inp, B, T, C, NH, &op.dev);
        std::vector<float> out1 = dev_download(d_out, n_out);
        keel_cuda::attention_forward(d_out, d_att, d_inp, B, T, C, NH, &op.dev);
        check_true(std::string("attention_forward deterministic") + tag,
                   memcmp(out1.data(), dev_download(d_out, n_out).data(), n_out * sizeof(float)) == 0);
    }
    for (float* p : {d_inp, d_dout, d_dinp, d_out, d_att}) dev_free(p);
}

// The fused classifier (loss and dlogits in one pass) against the CPU op on the same inputs, F = float
// or bf16 (the CPU reference in fp32 on the bf16-rounded logits). Rows: 0 with a wide spread (the
// probabilities underflow, the log-sum-exp loss must stay finite), 1 a confident row (p_target ≈
// 0.999: its gradient (p - 1)·dloss is -0.001·dloss, which a bf16 probability would round to 0),
// odd rows ≥ 3 with targets outside [0, V) (another rank's column: nothing subtracted).
// Tolerances: fp32: expf vs exp_f32 and the order of the Σ: 1e-5 relative. bf16: dlogits rounded once
// to bf16 from fp32 values (2^-9 relative): check_lowp's relative bound, and an absolute floor of
// 1e-30 only (probabilities hundreds of orders below the row's largest still compare relatively).
template <typename F> static void test_classifier(int N, int V, int Vp) {
    char tag[80];
    bool bf = sizeof(F) == 2;
    snprintf(tag, sizeof tag, " %s N=%d V=%d Vp=%d", bf ? "bf16" : "fp32", N, V, Vp);
    std::vector<float> logits = randn((size_t)N * Vp, 20, 2.0);  // (N,Vp), the padding filled with junk
    for (int j = 0; j < Vp; j++) logits[j] *= 40.0f;
    std::vector<int> targets(N);  // (N)
    const int other[] = {-1, V, Vp - 1, Vp + 7, -1000000};
    for (int n = 0; n < N; n++) targets[n] = n >= 3 && n % 2 ? other[n / 2 % 5] : (int)rng_below((uint64_t)V, 12345, 98, 21, (uint64_t)n);
    if (N > 1) {  // confident row: target logit ln(999·Σ_others exp) → p_target = 0.999
        double others = 0;
        for (int j = 0; j < V; j++)
            if (j != targets[1]) others += std::exp((double)lowp_rounded<F>({logits[Vp + j]})[0]);
        logits[Vp + targets[1]] = (float)std::log(999.0 * others);
    }
    logits = lowp_rounded<F>(logits);
    float dloss = 1.0f / (N + 3);
    std::vector<float> want = logits, losses(N), want_eval = logits, losses_eval(N);  // (N,Vp) (N)
    classifier_forward(losses.data(), want.data(), targets.data(), N, V, Vp, dloss);
    classifier_forward(losses_eval.data(), want_eval.data(), targets.data(), N, V, Vp, 0.0f);
    F* d_logits = dev_upload(lowp_store<F>(logits));
    float* d_losses = dev_upload(std::vector<float>(N));
    int* d_targets = dev_upload(targets);
    // evaluation: losses alone, the logits untouched
    keel_cuda::classifier_forward(d_losses, d_logits, d_targets, N, V, Vp, 0.0f);
    check_close(std::string("classifier_forward eval losses") + tag, dev_download(d_losses, N), losses_eval, 1e-5, 1e-5);
    check_true(std::string("classifier_forward eval leaves the logits") + tag, same_bytes_f32(lowp_widen(dev_download(d_logits, logits.size())), logits));
    // training: losses and dlogits
    keel_cuda::classifier_forward(d_losses, d_logits, d_targets, N, V, Vp, dloss);
    std::vector<float> got = lowp_widen(dev_download(d_logits, (size_t)N * Vp));
    check_close(std::string("classifier_forward losses") + tag, dev_download(d_losses, N), losses, 1e-5, 1e-5);
    // (p - 1) cancels: p's fp32 value carries the Σ's reordering error (~√V ulps: 2e-6 absolute at
    // V = 1000), so near the target the floor is 2e-6·dloss, not relative
    double rtol = bf ? LOWP_RTOL : 1e-5, atol = 2e-6 * dloss;
    std::string what = std::string("classifier_forward dlogits") + tag;
    check_close(what, got, want, rtol, atol);
    if (N > 1) {  // (row 0 alone has only ~0 and large gradients: no small one to perturb)
        expect_fail(what + " with a small element doubled", [&] { return check_close(what, perturb_small(got, want), want, rtol, atol); });
        expect_fail(what + " with the largest element 2% off", [&] { return check_close(what, perturb_large(got, want), want, rtol, atol); });
    }
    if (N > 1) {  // the confident target's gradient is (p - 1)·dloss ≈ -0.001·dloss, not 0
        float g = got[Vp + targets[1]], w = want[Vp + targets[1]];
        check_true(std::string("classifier_forward confident target: dlogit ") + std::to_string(g) + " ≈ " + std::to_string(w) + tag,
                   w < -0.0009f * dloss && w > -0.0011f * dloss && std::fabs(g - w) <= rtol * std::fabs(w) + atol);
    }
    bool pad_zero = true;
    for (int n = 0; n < N; n++)
        for (int j = V; j < Vp; j++) pad_zero = pad_zero && got[(size_t)n * Vp + j] == 0.0f && want[(size_t)n * Vp + j] == 0.0f;
    check_true(std::string("classifier_forward padding gradient is 0") + tag, pad_zero);

    // Determinism: twice from the same logits gives the same bytes.
    std::vector<std::vector<F>> runs;
    for (int r = 0; r < 2; r++) {
        dev_free(d_logits);
        d_logits = dev_upload(lowp_store<F>(logits));
        keel_cuda::classifier_forward(d_losses, d_logits, d_targets, N, V, Vp, dloss);
        runs.push_back(dev_download(d_logits, (size_t)N * Vp));
    }
    check_true(std::string("classifier_forward deterministic") + tag, memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(F)) == 0);
    // the 16-byte path one column at a time (the kernel lab's "before") against the same reference
    dev_free(d_logits);
    d_logits = dev_upload(lowp_store<F>(logits));
    keel_cuda::classifier_forward<F, false>(d_losses, d_logits, d_targets, N, V, Vp, dloss);
    check_close(std::string("classifier_forward, one column at a time: losses") + tag, dev_download(d_losses, N), losses, 1e-5, 1e-5);
    check_close(std::string("classifier_forward, one column at a time: dlogits") + tag, lowp_widen(dev_download(d_logits, (size_t)N * Vp)), want, rtol,
                atol);
    dev_free(d_logits);
    dev_free(d_losses);
    dev_free(d_targets);
}

// bf16 storage (--bf16): q, k, v, dout and the probabilities rounded to bf16, the CPU's fp32 op on
// exactly those rounded values as the reference. The GPU rounds each stored result once (att, out,
// dinp: 2^-9 relative) and feeds bf16 probabilities and dS to the tensor-core products (2^-9 per
// term, of random sign), so check_lowp's relative bound with its rms-scaled floor holds, while a
// wrong value (a lost scale factor, another head's keys, a stale row) is far outside it; the
// negative controls prove the checker sees a 2% error.
// What the GPU computes at its rounding points, in double:
//   P = bf16(softmax(S·coeff + ALiBi)), S = bf16(alpha·q·k) (the score block is stored in bf16; the
//       fp32 sum and the scaling as the CPU's attention_score computes them)
//   out = bf16(Σ_u bf16(P·mask·dscale)·v_u)
//   dinp = bf16(dinp0 + d), d: dq = Σ_u dS·k_u, dk = Σ_t dS·q_t, dv = Σ_t bf16(P·m)·dout_t with
//   dS = bf16(P·(dP·m - Σ_u P·dP·m)·(1/√hs)), dP = bf16(dout_t·v_u) (fp32 sums of bf16 products,
//   stored in bf16)
// round_s / round_dp false: S or dP left in fp32 (the reference of the fp32 op; the controls).
// (bf16_round: llmc/ops.h, bit for bit the GPU's __float2bfloat16)
static double attn_mult(const AttentionOpts& o, int b, int h, int t, int u) {
    if (!(o.dropout.p > 0)) return 1.0;
    return dropout_keep(&o.dropout, b, attention_dropout_index(h + o.head_offset, t, u)) ? (float)(1.0 / (1.0 - o.dropout.p)) : 0.0;
}
// The probabilities (unrounded) from the scores S, rounded to bf16 or not; *row_smax (if not null)
// receives each row's largest |S·coeff|, which bounds what rounding S moves a probability by.
static std::vector<float> attention_bf16_att(const std::vector<float>& inp, int B, int T, int C, int NH, const AttentionOpts& o, bool round_s,
                                             std::vector<double>* row_smax = nullptr) {
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    std::vector<float> att((size_t)B * NH * T * T, 0.0f);
    if (row_smax) row_smax->assign((size_t)B * NH * T, 0.0);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                size_t r = ((size_t)b * NH + h) * T + t;
                std::vector<double> x(t + 1);
                double mx = -INFINITY, sum = 0;
                for (int u = 0; u <= t; u++) {
                    float st;
                    x[u] = attention_score(&inp[((size_t)b * T + t) * C3 + h * hs], &inp[((size_t)b * T + u) * C3 + C + h * hs], hs, h, u, &o,
                                           (float*)nullptr, &st, round_s);
                    if (o.alibi) st -= o.alibi[h] * (float)u / (float)o.coeff;  // S itself, before ALiBi
                    if (row_smax) (*row_smax)[r] = std::max((*row_smax)[r], std::fabs((double)st * o.coeff));
                    mx = std::max(mx, x[u]);
                }
                for (int u = 0; u <= t; u++) sum += std::exp(x[u] - mx);
                for (int u = 0; u <= t; u++) att[r * T + u] = (float)(std::exp(x[u] - mx) / sum);
            }
    return att;
}
static std::vector<float> attention_bf16_out(const std::vector<float>& P, const std::vector<float>& inp, int B, int T, int C, int NH,
                                             const AttentionOpts& o) {
    int hs = C / NH;
    std::vector<float> out((size_t)B * T * C);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                for (int i = 0; i < hs; i++) {
                    double acc = 0;
                    for (int u = 0; u <= t; u++)
                        acc += bf16_round(P[(((size_t)b * NH + h) * T + t) * T + u] * attn_mult(o, b, h, t, u)) *
                               inp[((size_t)b * T + u) * 3 * C + 2 * C + h * hs + i];
                    out[((size_t)b * T + t) * C + h * hs + i] = bf16_round(acc);
                }
    return out;
}
static std::vector<float> attention_bf16_dinp(const std::vector<float>& P, const std::vector<float>& inp, const std::vector<float>& dout,
                                              const std::vector<float>& dinp0, int B, int T, int C, int NH, const AttentionOpts& o,
                                              bool round_dp = true) {
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    std::vector<double> d(dinp0.size(), 0.0), ds((size_t)T * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            auto at = [&](size_t off, int t, int part) { return (double)inp[((size_t)b * T + t) * C3 + part * C + h * hs + off]; };
            for (int t = 0; t < T; t++) {
                const float* p = &P[(((size_t)b * NH + h) * T + t) * T];
                std::vector<double> datt(T, 0.0);
                double dot = 0;
                for (int u = 0; u <= t; u++) {
                    float dp = 0;  // fp32 accumulation of exact bf16 products, as the GEMM
                    for (int i = 0; i < hs; i++) dp += dout[((size_t)b * T + t) * C + h * hs + i] * (float)at(i, u, 2);
                    datt[u] = (round_dp ? bf16_round(dp) : dp) * attn_mult(o, b, h, t, u);
                    dot += p[u] * datt[u];
                }
                for (int u = 0; u < T; u++) ds[(size_t)t * T + u] = u <= t ? bf16_round((float)(p[u] * (datt[u] - dot)) * (1.0f / std::sqrt((float)hs))) : 0.0;
            }
            for (int t = 0; t < T; t++)
                for (int u = 0; u <= t; u++) {
                    double g = ds[(size_t)t * T + u], pm = bf16_round(P[(((size_t)b * NH + h) * T + t) * T + u] * attn_mult(o, b, h, t, u));
                    for (int i = 0; i < hs; i++) {
                        d[((size_t)b * T + t) * C3 + h * hs + i] += g * at(i, u, 1);                                // dq_t
                        d[((size_t)b * T + u) * C3 + C + h * hs + i] += g * at(i, t, 0);                            // dk_u
                        d[((size_t)b * T + u) * C3 + 2 * C + h * hs + i] += pm * dout[((size_t)b * T + t) * C + h * hs + i];  // dv_u
                    }
                }
        }
    std::vector<float> out(dinp0.size());
    for (size_t i = 0; i < out.size(); i++) out[i] = bf16_round((double)dinp0[i] + (float)d[i]);
    return out;
}

// How many of got's values differ from want's bits, and the largest difference in bf16 steps.
struct Bf16Diff { double frac; int max_ulps; };
static Bf16Diff bf16_diff(const std::vector<float>& got, const std::vector<float>& want) {
    Bf16Diff r{0, 0};
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); i++) {
        uint32_t a, b;
        memcpy(&a, &got[i], 4);
        memcpy(&b, &want[i], 4);
        if (a == b) continue;
        differ++;
        int ulps = (a ^ b) >> 31 ? 1 << 20 : std::abs((int)(a >> 16) - (int)(b >> 16));  // a sign flip: far
        r.max_ulps = std::max(r.max_ulps, ulps);
    }
    r.frac = (double)differ / (double)got.size();
    return r;
}

// The CPU trainer's --bf16 twin of the same op (AttentionOpts::round_bf16: the scores S, the
// probabilities, the dropped probabilities, dP and dS rounded inside the op, the outputs rounded once
// by the model after it) against the reference at the GPU's rounding points above, and its
// probabilities against the GPU's own (g_att): equal bits except where fp32 and double (or two fp32
// summation orders) land on either side of a rounding boundary (at most 2% of the values, one bf16
// step each). Negative control: the plain fp32 op (no rounding inside) on the same inputs misses that.
static void test_attention_cpu_bf16(const std::vector<float>& inp, const std::vector<float>& dout, const std::vector<float>& dinp0,
                                    const std::vector<float>& g_att, int B, int T, int C, int NH, AttentionOpts o, const char* tag) {
    auto rounded = [](std::vector<float> x) { for (float& v : x) v = bf16_round(v); return x; };
    for (int twin = 1; twin >= 0; twin--) {
        o.round_bf16 = twin;
        std::vector<float> out((size_t)B * T * C), att((size_t)B * NH * T * T), dinp = dinp0;
        attention_forward(out.data(), att.data(), inp.data(), B, T, C, NH, &o);
        att = rounded(att);  // (the model rounds the stored probabilities after the op)
        Bf16Diff p = bf16_diff(att, g_att);
        attention_backward(dinp.data(), dout.data(), inp.data(), att.data(), B, T, C, NH, &o);
        Bf16Diff f = bf16_diff(rounded(out), attention_bf16_out(att, inp, B, T, C, NH, o));
        Bf16Diff b = bf16_diff(rounded(dinp), attention_bf16_dinp(att, inp, dout, dinp0, B, T, C, NH, o));
        char msg[320];
        snprintf(msg, sizeof msg, "%s: att %.2g%% of values off the GPU's (at most %d step), out %.2g%% (at most %d), dinp %.2g%% (at most %d)%s",
                 twin ? "CPU --bf16 twin = the GPU's rounding points" : "negative control: the CPU's fp32 op misses them",
                 100 * p.frac, p.max_ulps, 100 * f.frac, f.max_ulps, 100 * b.frac, b.max_ulps, tag);
        bool close = p.frac <= 0.02 && f.frac <= 0.02 && b.frac <= 0.02 && p.max_ulps <= 1 && f.max_ulps <= 1 && b.max_ulps <= 1;
        check_true(msg, twin ? close : !close);
    }
}

// |got - want| ≤ rel[row]·|want| + atol for every value of the (rows, T) block: a per-row bound.
static bool check_rows_within(const std::string& what, const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& rel,
                              int T, double atol) {
    size_t bad = 0, worst = 0;
    double worst_x = 0;
    for (size_t i = 0; i < got.size(); i++) {
        double e = std::fabs((double)got[i] - want[i]), lim = rel[i / T] * std::fabs((double)want[i]) + atol;
        if (!(e <= lim)) bad++;
        if (e / lim > worst_x || e != e) worst_x = e / lim, worst = i;
    }
    char msg[200];
    snprintf(msg, sizeof msg, " (worst [%zu] got %.9g want %.9g, %zu out of bound)", worst, got[worst], want[worst], bad);
    return check_true(what + msg, bad == 0);
}

static void test_attention_bf16(int B, int T, int C, int NH, const AttnVariant& v) {
    typedef __nv_bfloat16 bf;
    char tag[128];
    snprintf(tag, sizeof tag, " bf16 %s B=%d T=%d C=%d NH=%d", v.name, B, T, C, NH);
    AttnOptsPair op;
    attn_opts_make(&op, v, NH);
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;
    std::vector<float> inp = lowp_rounded<bf>(randn(n_inp, 30)), dout = lowp_rounded<bf>(randn(n_out, 31));
    std::vector<float> dinp0 = lowp_rounded<bf>(randn(n_inp, 32)), out(n_out), dinp;
    bf *d_inp = dev_upload(lowp_store<bf>(inp)), *d_dout = dev_upload(lowp_store<bf>(dout));
    bf *d_dinp = dev_upload(lowp_store<bf>(std::vector<float>(n_inp, NAN)));  // dinp_write: nothing of it is read
    bf *d_out = dev_upload(lowp_store<bf>(out)), *d_att = dev_upload(lowp_store<bf>(std::vector<float>(n_att, 1.0f)));
    keel_cuda::attention_forward(d_out, d_att, d_inp, B, T, C, NH, &op.dev);
    std::vector<float> g_att = lowp_widen(dev_download(d_att, n_att)), g_out = lowp_widen(dev_download(d_out, n_out));
    // the probabilities from S as the GPU stores it (bf16), then rounded once more as att
    std::vector<double> smax;
    std::vector<float> att = attention_bf16_att(inp, B, T, C, NH, op.host, true);
    check_lowp(std::string("attention_forward att (from bf16 S)") + tag, g_att, att);
    lowp_negative_controls(std::string("attention_forward att (from bf16 S)") + tag, g_att, att);
    // against the fp32 scores of the same inputs: rounding S to bf16 (8 significant bits: at most
    // 2^-8 relative, |δ| ≤ 2^-8·|S·coeff| on the softmax input) moves a probability by a factor
    // within exp(±2·2^-8·max|S·coeff|) of its row, and storing it by 2^-8 more (1e-5: fp32's
    // summation order); a value outside that is wrong. The bound without S's term must fail: S
    // really is stored in bf16 (the check is not inert).
    std::vector<float> att32 = attention_bf16_att(inp, B, T, C, NH, op.host, false, &smax);
    std::vector<double> rel(smax.size()), rel_no_s(smax.size(), 1.0 / 256 + 1e-5);
    for (size_t r = 0; r < smax.size(); r++) rel[r] = std::expm1(2 * smax[r] / 256) + 1.0 / 256 + 1e-5;
    std::string what = std::string("attention_forward att vs fp32 S, within bf16 S's rounding bound") + tag;
    check_rows_within(what, g_att, att32, rel, T, 1e-7);
    expect_fail(what + " without S's term", [&] { return check_rows_within(what, g_att, att32, rel_no_s, T, 1e-7); });
    // out from the GPU's own probabilities (checked just above): the reference's probabilities would
    // differ from the bf16 ones by 2^-9 each, an error of the order of |v|·2^-9 that is not the kernel's
    out = attention_bf16_out(g_att, inp, B, T, C, NH, op.host);
    check_lowp(std::string("attention_forward out") + tag, g_out, out);
    lowp_negative_controls(std::string("attention_forward out") + tag, g_out, out);
    // the backward from the GPU's bf16 probabilities on both sides; dinp written (dinp_write), so the
    // reference starts from zeros. The reference with dP left in fp32 must fail: dP is stored in bf16.
    keel_cuda::attention_backward(d_dinp, d_dout, d_inp, d_att, B, T, C, NH, &op.dev, true);
    std::vector<float> g_dinp = lowp_widen(dev_download(d_dinp, n_inp)), zeros(n_inp, 0.0f);
    dinp = attention_bf16_dinp(g_att, inp, dout, zeros, B, T, C, NH, op.host);
    check_lowp(std::string("attention_backward dinp (bf16 dP), written over NaN") + tag, g_dinp, dinp);
    lowp_negative_controls(std::string("attention_backward dinp") + tag, g_dinp, dinp);
    std::vector<float> dinp32 = attention_bf16_dinp(g_att, inp, dout, zeros, B, T, C, NH, op.host, false);
    expect_fail(std::string("attention_backward dinp against the fp32-dP reference") + tag,
                [&] { return check_lowp("attention_backward dinp (fp32 dP)", g_dinp, dinp32); });
    check_true(std::string("attention scratch P: 0 above every diagonal") + tag, attention_p_upper_nonzero<bf>(B, T, C, NH) == 0);
    test_attention_cpu_bf16(inp, dout, dinp0, g_att, B, T, C, NH, op.host, tag);
    for (bf* p : {d_inp, d_dout, d_dinp, d_out, d_att}) dev_free(p);
}

// The scratch: its bytes (attention_scratch_bytes, --dry-run's formula) against the layout it is
// carved into, and at GPT-2 124M's B=16, T=1024 against the layout before S and dP were stored in
// bf16 (fp32 S/dP and fp32 dQ, dK, dV); the triangle invariant's negative control (a value planted
// above a diagonal of P is seen by the check, and it changes the backward's result: the GEMMs read P
// whole); the backward's reuse of the forward's head-major q, k, v.
static void test_attention_scratch() {
    typedef __nv_bfloat16 bf;
    {
        size_t B = 16, T = 1024, C = 768, NH = 12, BTC = B * T * C, BHTT = B * NH * T * T;
        size_t now = attention_scratch_bytes(B, T, C, NH, 2), before = 4 * BTC * 2 + 3 * BTC * 4 + BHTT * 4 + BHTT * 2 + 5 * 256;
        char msg[300];
        snprintf(msg, sizeof msg, "attention scratch at GPT-2 124M B=16 T=1024 bf16: %.1f MB (was %.1f MB: fp32 S/dP %.1f MB and fp32 dQ,dK,dV %.1f MB)",
                 now / 1e6, before / 1e6, BHTT * 4 / 1e6, 3 * BTC * 4 / 1e6);
        check_true(msg, now == 4 * BTC * 2 + 2 * BHTT * 2 + 4 * 256 && before - now == BHTT * 2 + 3 * BTC * 4 + 256);
    }
    int B = 2, T = 40, C = 64, NH = 4;
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;
    keel_cuda::AttnCarveKey key;
    keel_cuda::AttnScratch a = keel_cuda::attention_scratch_carve(B, T, C, NH, sizeof(bf), &key);
    size_t end = (size_t)((char*)a.p - (char*)keel_cuda::attention_scratch()->ptr) + n_att * sizeof(bf);
    check_true("attention scratch: the carved blocks fit the reserved bytes", end <= attention_scratch_bytes(B, T, C, NH, sizeof(bf)) &&
                                                                                  attention_scratch_bytes(B, T, C, NH, sizeof(bf)) <= keel_cuda::attention_scratch()->bytes);

    AttnOptsPair op;
    attn_opts_make(&op, AttnVariant{"", ATTN_SCALING_STANDARD, 1.0, false, 0.0, 0}, NH);
    std::vector<float> inp = lowp_rounded<bf>(randn(n_inp, 40)), dout = lowp_rounded<bf>(randn(n_out, 41));
    bf *d_inp = dev_upload(lowp_store<bf>(inp)), *d_dout = dev_upload(lowp_store<bf>(dout)), *d_dinp = dev_upload(std::vector<bf>(n_inp));
    bf *d_out = dev_upload(std::vector<bf>(n_out)), *d_att = dev_upload(std::vector<bf>(n_att));
    auto backward = [&] {
        keel_cuda::attention_backward(d_dinp, d_dout, d_inp, d_att, B, T, C, NH, &op.dev, true);
        return dev_download(d_dinp, n_inp);
    };
    keel_cuda::attention_forward(d_out, d_att, d_inp, B, T, C, NH, &op.dev);
    std::vector<bf> clean = backward();  // (q, k, v from the forward's split)
    bool same = true;
    // the backward took the forward's q, k, v: with inp changed in place after the forward (which its
    // contract rules out), it gives the same bytes; the next one splits the changed inp again
    keel_cuda::attention_forward(d_out, d_att, d_inp, B, T, C, NH, &op.dev);
    CUDA_CHECK(cudaMemcpy(d_inp, lowp_store<bf>(randn(n_inp, 42)).data(), n_inp * sizeof(bf), cudaMemcpyHostToDevice));
    std::vector<bf> reused = backward(), split_again = backward();
    check_true("attention_backward takes the forward's head-major q, k, v (inp changed in place after the forward: the same bytes)",
               memcmp(reused.data(), clean.data(), n_inp * sizeof(bf)) == 0);
    check_true("attention_backward after a backward splits inp again (the changed inp: other bytes)",
               memcmp(split_again.data(), clean.data(), n_inp * sizeof(bf)) != 0);
    CUDA_CHECK(cudaMemcpy(d_inp, lowp_store<bf>(inp).data(), n_inp * sizeof(bf), cudaMemcpyHostToDevice));
    same = memcmp(backward().data(), clean.data(), n_inp * sizeof(bf)) == 0;
    check_true("attention_backward splitting q, k, v itself = taking the forward's, byte for byte", same);

    // a kernel that wrote above a diagonal of P (planted: row t = 3 of head-batch 1, key u = 9) is
    // seen by the invariant's check, and the backward's products read it
    bf one = keel_cuda::from_f32<bf>(1.0f);
    CUDA_CHECK(cudaMemcpy((bf*)a.p + ((size_t)1 * T + 3) * T + 9, &one, sizeof one, cudaMemcpyHostToDevice));
    expect_fail("attention scratch P: 0 above every diagonal, with one value planted above", [&] {
        return check_true("attention scratch P: 0 above every diagonal", attention_p_upper_nonzero<bf>(B, T, C, NH) == 0);
    });
    check_true("attention_backward with a value planted above P's diagonal: another dinp (the zeros matter)",
               memcmp(backward().data(), clean.data(), n_inp * sizeof(bf)) != 0);
    keel_cuda::attention_scratch_state()->zeroed = keel_cuda::AttnCarveKey{};  // (a new carve zeroes P again)
    check_true("attention_backward after P is zeroed again: the clean bytes", memcmp(backward().data(), clean.data(), n_inp * sizeof(bf)) == 0);
    check_true("attention scratch P: 0 above every diagonal again", attention_p_upper_nonzero<bf>(B, T, C, NH) == 0);
    for (bf* p : {d_inp, d_dout, d_dinp, d_out, d_att}) dev_free(p);
}

// The mask is the model head's: with dropout on, head_offset changes the output (each local head
// takes another head's mask), and with head_offset = 0 the op is the one-rank op.
static void test_attention_head_offset_matters(int B, int T, int C, int NH) {
    AttnOptsPair op;
    attn_opts_make(&op, AttnVariant{"", ATTN_SCALING_STANDARD, 1.0, false, 0.25, 0}, NH);
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;
    float *d_inp = dev_upload(randn(n_inp, 13)), *d_out = dev_upload(std::vector<float>(n_out));
    float* d_att = dev_upload(std::vector<float>(n_att));
    keel_cuda::attention_forward(d_out, d_att, d_inp, B, T, C, NH, &op.dev);
    std::vector<float> out0 = dev_download(d_out, n_out);
    op.dev.head_offset = 2;
    keel_cuda::attention_forward(d_out, d_att, d_inp, B, T, C, NH, &op.dev);
    std::vector<float> out2 = dev_download(d_out, n_out);
    size_t differ = 0;
    for (size_t i = 0; i < n_out; i++) differ += out0[i] != out2[i];
    check_true("attention_forward dropout: head_offset=2 differs from head_offset=0 (" + std::to_string(differ) + " of " +
                   std::to_string(n_out) + " outputs)", differ > n_out / 4);
    for (float* p : {d_inp, d_out, d_att}) dev_free(p);
}

// ---- vocabulary-parallel cross-entropy -------------------------------------------------------------
// F = float and F = bf16 (the CPU reference runs in fp32 on the bf16-rounded inputs). rowmax, stats
// and losses are fp32 buffers whatever F.
// Tolerances, fp32: max is exact; the exponentials differ by expf vs exp_f32 (≤ 2 ulp each, and
// exp_f32 clamps below e^-86.5 where expf flushes to 0: atol 1e-30), the Σ by the order of the
// additions: rtol 1e-6. bf16: each stored gradient is rounded once (2^-9 relative): LOWP_RTOL,
// relative down to 1e-30; the fp32 statistics and losses come from fp32 exponentials: 1e-5.
typedef __nv_bfloat16 bf16;
template <typename F> static bool is_bf16() { return sizeof(F) == 2; }
template <typename F> static std::vector<float> round_as(std::vector<float> v) {
    for (float& x : v) x = keel_cuda::to_f32(keel_cuda::from_f32<F>(x));
    return v;
}
template <typename F> static F* upload_as(const std::vector<float>& v) {
    std::vector<F> h(v.size());
    for (size_t i = 0; i < v.size(); i++) h[i] = keel_cuda::from_f32<F>(v[i]);
    return dev_upload(h);
}
template <typename F> static std::vector<float> download_as(const F* d, size_t n) {
    std::vector<F> h = dev_download(d, n);
    std::vector<float> r(n);
    for (size_t i = 0; i < n; i++) r[i] = keel_cuda::to_f32(h[i]);
    return r;
}

// Each op alone against its CPU twin, on the same inputs: the logits of a (N,Vl) slice (row 0 with
// a wide spread, so some exponentials underflow), local targets in and out of [0, Vr) (negative,
// a padding column, beyond Vl), a group max above the local one (other ranks' larger logits), and
// group sums with other ranks' terms added.
template <typename F> static void test_vocab_parallel_ops(int N, int Vr, int Vl) {
    char tag[80];
    snprintf(tag, sizeof tag, " %s N=%d Vr=%d Vl=%d", is_bf16<F>() ? "bf16" : "fp32", N, Vr, Vl);
    bool bf = is_bf16<F>();
    double e_rtol = bf ? LOWP_RTOL : 1e-6, s_tol = bf ? 1e-5 : 1e-6;
    size_t NV = (size_t)N * Vl;
    std::vector<float> logits = randn(NV, 24, 2.0);  // (N,Vl), the padding filled with junk
    for (int j = 0; j < Vl; j++) logits[j] *= 40.0f;
    logits = round_as<F>(logits);
    std::vector<int> targets(N);  // (N) local column numbers
    const int other[] = {-1, Vr, Vl - 1, Vl + 3, -7};
    for (int n = 0; n < N; n++)
        targets[n] = n % 3 != 1 && Vr > 0 ? (int)rng_below((uint64_t)Vr, 12345, 98, 25, (uint64_t)n) : other[n / 3 % 5];
    F* d_logits = upload_as<F>(logits);
    int* d_targets = dev_upload(targets);
    float *d_rowmax = dev_upload(std::vector<float>(N)), *d_stats = dev_upload(std::vector<float>(2 * N));
    float* d_losses = dev_upload(std::vector<float>(N));

    std::vector<float> rowmax(N);  // (N)
    vocab_parallel_max(rowmax.data(), logits.data(), N, Vr, Vl);
    keel_cuda::vocab_parallel_max(d_rowmax, d_logits, N, Vr, Vl);
    check_close("vocab_parallel_max" + std::string(tag), dev_download(d_rowmax, N), rowmax, 0, 0);
    bool neg_inf = true;
    for (float m : rowmax) neg_inf = neg_inf && std::isinf(m) && m < 0;
    if (Vr == 0) check_true("vocab_parallel_max is -inf without real columns" + std::string(tag), neg_inf);

    std::vector<float> gmax(N);  // (N) the group's max: ≥ the local one, finite
    for (int n = 0; n < N; n++) gmax[n] = (Vr > 0 ? rowmax[n] : 1.0f) + 0.5f * (n % 3);
    dev_set(d_rowmax, gmax);
    std::vector<float> stats(2 * N);  // (N,2)
    vocab_parallel_sumexp(stats.data(), logits.data(), targets.data(), gmax.data(), N, Vr, Vl);
    keel_cuda::vocab_parallel_sumexp(d_stats, d_logits, d_targets, d_rowmax, N, Vr, Vl);
    std::vector<float> g_stats = dev_download(d_stats, 2 * N);
    std::vector<float> sums(N), sums_want(N), tlog(N), tlog_want(N);
    for (int n = 0; n < N; n++) {
        sums[n] = g_stats[2 * n], sums_want[n] = stats[2 * n];
        tlog[n] = g_stats[2 * n + 1], tlog_want[n] = stats[2 * n + 1];
    }
    check_true("vocab_parallel_sumexp leaves the logits" + std::string(tag), same_bytes_f32(download_as(d_logits, NV), logits));
    check_close("vocab_parallel_sumexp sum (fp32)" + std::string(tag), sums, sums_want, s_tol, 1e-30);
    check_close("vocab_parallel_sumexp target logit (fp32)" + std::string(tag), tlog, tlog_want, 0, 0);

    // finish with the group's sums: losses, and the fused gradient on this slice
    std::vector<float> gstats(2 * N);  // (N,2)
    for (int n = 0; n < N; n++) {
        gstats[2 * n] = g_stats[2 * n] + 1.0f + 0.25f * n;
        gstats[2 * n + 1] = g_stats[2 * n + 1] + (targets[n] >= 0 && targets[n] < Vr ? 0.0f : 0.3f * n - 1.0f);
    }
    dev_set(d_stats, gstats);
    float dloss = 1.0f / (N + 2);
    std::vector<float> dlogits = logits, losses(N);  // (N,Vl) (N)
    vocab_parallel_finish(losses.data(), dlogits.data(), gstats.data(), gmax.data(), targets.data(), dloss, N, Vr, Vl);
    keel_cuda::vocab_parallel_finish(d_losses, d_logits, d_stats, d_rowmax, d_targets, dloss, N, Vr, Vl);
    std::vector<float> g_dlogits = download_as(d_logits, NV);
    check_close("vocab_parallel_finish dlogits" + std::string(tag), g_dlogits, dlogits, e_rtol, 1e-30);
    check_close("vocab_parallel_finish losses (fp32)" + std::string(tag), dev_download(d_losses, N), losses, 1e-6, 1e-6);
    bool pad_zero = true;
    for (int n = 0; n < N; n++)
        for (int j = Vr; j < Vl; j++) pad_zero = pad_zero && g_dlogits[(size_t)n * Vl + j] == 0.0f;
    check_true("vocab_parallel_finish padding gradient is 0" + std::string(tag), pad_zero);

    // Determinism: sumexp twice from the same logits gives the same bytes.
    std::vector<std::vector<float>> runs;
    for (int r = 0; r < 2; r++) {
        dev_free(d_logits);
        d_logits = upload_as<F>(logits);
        keel_cuda::vocab_parallel_sumexp(d_stats, d_logits, d_targets, d_rowmax, N, Vr, Vl);
        std::vector<float> a = download_as(d_logits, NV), st = dev_download(d_stats, 2 * N);
        a.insert(a.end(), st.begin(), st.end());
        runs.push_back(a);
    }
    check_true("vocab_parallel_sumexp deterministic" + std::string(tag),
               memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)) == 0);
    dev_free(d_logits);
    dev_free(d_targets);
    for (float* p : {d_rowmax, d_stats, d_losses}) dev_free(p);
}

// Two tensor-parallel ranks, each holding Vl = Vp/2 columns of every row, run max → MAX-combine →
// sumexp → SUM-combine → finish (the combines done here on the host, as the all-reduces would);
// their losses must be the one-rank classifier_forward's on the whole row (up to the order of the
// Σ: 1e-5), equal on both ranks, and their dlogits side by side the whole row's.
template <typename F> static void test_vocab_parallel_two_ranks(int N, int V, int Vp) {
    char tag[80];
    snprintf(tag, sizeof tag, " %s N=%d V=%d Vp=%d", is_bf16<F>() ? "bf16" : "fp32", N, V, Vp);
    const int TP = 2, Vl = Vp / TP;
    std::vector<float> logits = round_as<F>(randn((size_t)N * Vp, 26, 2.0));  // (N,Vp)
    for (int j = 0; j < Vp; j++) logits[j] *= 8.0f;                            // (exact in bf16)
    std::vector<int> targets(N);                                               // (N) global
    for (int n = 0; n < N; n++) targets[n] = (int)rng_below((uint64_t)V, 12345, 98, 27, (uint64_t)n);
    // one rank: the whole row
    F* d_full = upload_as<F>(logits);
    int* d_targets = dev_upload(targets);
    float* d_losses = dev_upload(std::vector<float>(N));
    float dloss = 1.0f / (N + 1);
    keel_cuda::classifier_forward(d_losses, d_full, d_targets, N, V, Vp, dloss);
    std::vector<float> want_losses = dev_download(d_losses, N), want_probs = download_as(d_full, (size_t)N * Vp);
    // two ranks
    F* d_l[TP];
    int* d_t[TP];
    float *d_rowmax[TP], *d_stats[TP], *d_loss[TP];
    int Vr[TP];
    for (int r = 0; r < TP; r++) {
        Vr[r] = std::min(std::max(V - r * Vl, 0), Vl);
        std::vector<float> slice((size_t)N * Vl);  // (N,Vl) columns [r·Vl, (r+1)·Vl)
        std::vector<int> local(N);                 // (N) local targets
        for (int n = 0; n < N; n++) {
            std::copy(&logits[(size_t)n * Vp + r * Vl], &logits[(size_t)n * Vp + (r + 1) * Vl], &slice[(size_t)n * Vl]);
            local[n] = targets[n] - r * Vl;
        }
        d_l[r] = upload_as<F>(slice);
        d_t[r] = dev_upload(local);
        d_rowmax[r] = dev_upload(std::vector<float>(N));
        d_stats[r] = dev_upload(std::vector<float>(2 * N));
        d_loss[r] = dev_upload(std::vector<float>(N));
        keel_cuda::vocab_parallel_max(d_rowmax[r], d_l[r], N, Vr[r], Vl);
    }
    std::vector<float> gmax(N, -INFINITY);  // all-reduce MAX
    for (int r = 0; r < TP; r++) {
        std::vector<float> m = dev_download(d_rowmax[r], N);
        for (int n = 0; n < N; n++) gmax[n] = std::max(gmax[n], m[n]);
    }
    std::vector<float> gstats(2 * N, 0.0f);  // all-reduce SUM
    for (int r = 0; r < TP; r++) {
        dev_set(d_rowmax[r], gmax);
        keel_cuda::vocab_parallel_sumexp(d_stats[r], d_l[r], d_t[r], d_rowmax[r], N, Vr[r], Vl);
        std::vector<float> st = dev_download(d_stats[r], 2 * N);
        for (int i = 0; i < 2 * N; i++) gstats[i] += st[i];
    }
    std::vector<float> probs((size_t)N * Vp), loss[TP];
    for (int r = 0; r < TP; r++) {
        dev_set(d_stats[r], gstats);
        keel_cuda::vocab_parallel_finish(d_loss[r], d_l[r], d_stats[r], d_rowmax[r], d_t[r], dloss, N, Vr[r], Vl);
        loss[r] = dev_download(d_loss[r], N);
        std::vector<float> pr = download_as(d_l[r], (size_t)N * Vl);
        for (int n = 0; n < N; n++) std::copy(&pr[(size_t)n * Vl], &pr[(size_t)(n + 1) * Vl], &probs[(size_t)n * Vp + r * Vl]);
    }
    check_close("vocab_parallel 2 ranks: losses = classifier_forward's" + std::string(tag), loss[0], want_losses, 1e-5, 1e-5);
    check_true("vocab_parallel 2 ranks: both ranks' losses equal" + std::string(tag),
               memcmp(loss[0].data(), loss[1].data(), N * sizeof(float)) == 0);
    check_close("vocab_parallel 2 ranks: dlogits = classifier_forward's" + std::string(tag), probs, want_probs,
                is_bf16<F>() ? LOWP_RTOL : 1e-5, 1e-30);
    dev_free(d_full);
    dev_free(d_targets);
    dev_free(d_losses);
    for (int r = 0; r < TP; r++) {
        dev_free(d_l[r]);
        dev_free(d_t[r]);
        for (float* p : {d_rowmax[r], d_stats[r], d_loss[r]}) dev_free(p);
    }
}

int main() {
    const AttnVariant variants[] = {
        {"standard", ATTN_SCALING_STANDARD, 1.0, false, 0.0, 0},
        {"qk-inward", ATTN_SCALING_QK_INWARD, 1.0, false, 0.0, 0},
        {"coeff=3", ATTN_SCALING_STANDARD, 3.0, false, 0.0, 0},
        {"qk-inward coeff=3", ATTN_SCALING_QK_INWARD, 3.0, false, 0.0, 0},
        {"alibi", ATTN_SCALING_STANDARD, 1.0, true, 0.0, 0},
        {"dropout p=0.25", ATTN_SCALING_STANDARD, 1.0, false, 0.25, 0},
        {"dropout p=0.25 head_offset=3", ATTN_SCALING_STANDARD, 1.0, false, 0.25, 3},
        {"all: qk-inward coeff=2 alibi dropout", ATTN_SCALING_QK_INWARD, 2.0, true, 0.25, 0},
        {"all: qk-inward coeff=2 alibi dropout head_offset=5", ATTN_SCALING_QK_INWARD, 2.0, true, 0.25, 5},
    };
    struct Shape { int B, T, C, NH; };
    const Shape shapes[] = {{1, 1, 8, 2}, {2, 7, 24, 3}, {2, 33, 64, 4}, {1, 70, 40, 5}};
    for (const Shape& s : shapes)
        for (const AttnVariant& v : variants)
            test_attention(s.B, s.T, s.C, s.NH, v, s.T == 33 && (v.p > 0 || v.alibi));
    test_attention_head_offset_matters(2, 33, 64, 4);
    test_attention_scratch();
    for (const AttnVariant& v : variants) {
        test_attention_bf16(2, 40, 64, 4, v);  // hs = 16: the 16-byte head copies
        test_attention_bf16(1, 37, 60, 5, v);  // hs = 12, T odd: the scalar paths
    }
    for (int N : {1, 5, 64}) {
        test_classifier<float>(N, 50, 64);
        test_classifier<float>(N, 1000, 1024);
        test_classifier<float>(N, 1000, 1001);  // Vp not a multiple of the 16-byte group: the scalar kernel
        test_classifier<bf16>(N, 50, 64);
        test_classifier<bf16>(N, 1000, 1024);
        test_classifier<bf16>(N, 1000, 1003);
    }
    // several 16-byte groups a thread (1024 threads a row): the grouped pass's rescale between a
    // thread's groups, and a last real group cut by V, at GPT-2's vocabulary size too
    test_classifier<float>(5, 9001, 9008);
    test_classifier<bf16>(5, 20001, 20008);
    test_classifier<bf16>(3, 50257, 50304);
    // (N, Vr, Vl): no real local column; Vr < Vl (a padding tail); one column; Vr = Vl over the
    // 1024 threads of a block (several columns a thread).
    const int vp_shapes[][3] = {{5, 0, 64}, {5, 50, 64}, {64, 488, 512}, {1, 1, 32}, {3, 3000, 3000}, {4, 2500, 3072}};
    for (const auto& s : vp_shapes) {
        test_vocab_parallel_ops<float>(s[0], s[1], s[2]);
        test_vocab_parallel_ops<bf16>(s[0], s[1], s[2]);
    }
    // (N, V, Vp) split over two ranks of Vp/2 columns: the second rank has Vr = 0 (V = 50 of 128),
    // or a padding tail (V = 1000 of 1024), or none (V = Vp).
    const int tp_shapes[][3] = {{5, 50, 128}, {64, 1000, 1024}, {3, 4096, 4096}, {1, 33, 64}};
    for (const auto& s : tp_shapes) {
        test_vocab_parallel_two_ranks<float>(s[0], s[1], s[2]);
        test_vocab_parallel_two_ranks<bf16>(s[0], s[1], s[2]);
    }
    return cuda_test_finish();
}
