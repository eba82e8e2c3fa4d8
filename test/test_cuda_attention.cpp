// test_cuda_attention — cuda/attention.cuh and cuda/classifier.cuh against the CPU ops
// (cpu/attention.h, cpu/classifier.h), on shapes with T and the head size not multiples of 32,
// T = 1 and N = 1, for every score variant (standard, qk-inward, layer coefficient, ALiBi) and
// attention dropout, also with a tensor-parallel head_offset (the mask of the model's head). The
// backward ops accumulate, so each starts from a random gradient buffer. Then the classifier
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
#include "test/cuda_test.h"

static void dev_set(float* d, const std::vector<float>& h) {
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
}

// ALiBi slopes for n heads: the formula of llmc/model.h's alibi_slopes (model.h is not included:
// it pulls in the whole trainer).
static std::vector<float> test_alibi_slopes(int n) {
    std::vector<float> s(n);
    int p = 1;
    while (p * 2 <= n) p *= 2;
    for (int i = 0; i < p; i++) s[i] = (float)std::exp2(-8.0 * (i + 1) / p);
    for (int i = 0; i < n - p; i++) s[p + i] = (float)std::exp2(-8.0 * (2 * i + 1) / (2 * p));
    return s;
}

struct AttnVariant {
    const char* name;
    int scaling;   // AttnScaling
    double coeff;  // layer coefficient
    bool alibi;
    double p;      // attention dropout
    int head_offset;  // AttentionOpts::head_offset (tensor parallelism)
};

// Host and device copies of the options: identical but for where the ALiBi slopes live.
struct AttnOptsPair {
    AttentionOpts host, dev;
    std::vector<float> slopes;  // (NH)
    float* d_slopes = nullptr;  // (NH) device
};

static void attn_opts_make(AttnOptsPair* op, const AttnVariant& v, int NH) {
    op->host = AttentionOpts{};
    op->host.scaling = v.scaling;
    op->host.coeff = v.coeff;
    op->host.dropout = DropoutSite{v.p, 7, dropout_site(2, DROPOUT_SITE_ATTN_PROBS), 5};
    op->host.head_offset = v.head_offset;
    op->dev = op->host;
    if (v.alibi) {
        op->slopes = test_alibi_slopes(NH);
        op->d_slopes = dev_upload(op->slopes);
        op->host.alibi = op->slopes.data();
        op->dev.alibi = op->d_slopes;
    }
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

    if (determinism) {  // a second run from the same start gives the same bytes
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
    if (op.d_slopes) dev_free(op.d_slopes);
}

static void test_classifier(int N, int V, int Vp) {
    char tag[64];
    snprintf(tag, sizeof tag, " N=%d V=%d Vp=%d", N, V, Vp);
    std::vector<float> logits = randn((size_t)N * Vp, 20, 2.0);  // (N,Vp), the padding filled with junk
    // Row 0 with a wide spread: probabilities underflow, the log-sum-exp loss must stay finite.
    for (int j = 0; j < Vp; j++) logits[j] *= 40.0f;
    std::vector<int> targets(N);  // (N)
    for (int n = 0; n < N; n++) targets[n] = (int)rng_below((uint64_t)V, 12345, 98, 21, (uint64_t)n);
    std::vector<float> probs = logits, losses(N);  // (N,Vp) (N)
    float *d_logits = dev_upload(logits), *d_losses = dev_upload(losses);
    int* d_targets = dev_upload(targets);

    classifier_forward(losses.data(), probs.data(), targets.data(), N, V, Vp);
    keel_cuda::classifier_forward(d_losses, d_logits, d_targets, N, V, Vp);
    check_close(std::string("classifier_forward losses") + tag, dev_download(d_losses, N), losses, 1e-5, 1e-5);
    std::vector<float> got = dev_download(d_logits, (size_t)N * Vp);
    check_close(std::string("classifier_forward probs") + tag, got, probs, 1e-5, 1e-7);
    bool pad_zero = true;
    for (int n = 0; n < N; n++)
        for (int j = V; j < Vp; j++) pad_zero = pad_zero && got[(size_t)n * Vp + j] == 0.0f && probs[(size_t)n * Vp + j] == 0.0f;
    check_true(std::string("classifier_forward padding is 0") + tag, pad_zero);

    float dloss = 1.0f / N;
    classifier_backward(probs.data(), targets.data(), dloss, N, V, Vp);
    keel_cuda::classifier_backward(d_logits, d_targets, dloss, N, V, Vp);
    check_close(std::string("classifier_backward dlogits") + tag, dev_download(d_logits, (size_t)N * Vp), probs, 1e-5, 1e-7);

    // Determinism: the forward twice from the same logits gives the same bytes.
    std::vector<std::vector<float>> runs;
    for (int r = 0; r < 2; r++) {
        CUDA_CHECK(cudaMemcpy(d_logits, logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
        keel_cuda::classifier_forward(d_losses, d_logits, d_targets, N, V, Vp);
        std::vector<float> r1 = dev_download(d_logits, (size_t)N * Vp), l1 = dev_download(d_losses, N);
        r1.insert(r1.end(), l1.begin(), l1.end());
        runs.push_back(r1);
    }
    check_true(std::string("classifier_forward deterministic") + tag,
               memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)) == 0);
    dev_free(d_logits);
    dev_free(d_losses);
    dev_free(d_targets);
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

// classifier_backward where some targets are not real local columns (negative, a padding column,
// beyond Vp): those rows subtract nothing, on both sides. (1 ulp: nvcc may fuse p·d - d into an FMA.)
static void test_classifier_backward_other_rank(int N, int V, int Vp) {
    char tag[64];
    snprintf(tag, sizeof tag, " N=%d V=%d Vp=%d", N, V, Vp);
    std::vector<float> probs = randn((size_t)N * Vp, 22);  // (N,Vp) any values: the backward is elementwise
    for (int n = 0; n < N; n++)
        for (int j = V; j < Vp; j++) probs[(size_t)n * Vp + j] = 0.0f;
    std::vector<int> targets(N);  // (N)
    const int other[] = {-1, V, Vp - 1, Vp + 7, -1000000};
    for (int n = 0; n < N; n++)
        targets[n] = n % 2 ? other[n / 2 % 5] : (int)rng_below((uint64_t)V, 12345, 98, 23, (uint64_t)n);
    float* d_probs = dev_upload(probs);
    int* d_targets = dev_upload(targets);
    float dloss = 1.0f / (N + 1);
    classifier_backward(probs.data(), targets.data(), dloss, N, V, Vp);
    keel_cuda::classifier_backward(d_probs, d_targets, dloss, N, V, Vp);
    check_close(std::string("classifier_backward targets outside [0,V)") + tag, dev_download(d_probs, (size_t)N * Vp), probs, 1e-6, 1e-7);
    dev_free(d_probs);
    dev_free(d_targets);
}

// ---- vocabulary-parallel cross-entropy -------------------------------------------------------------
// F = float and F = bf16 (the CPU reference runs in fp32 on the bf16-rounded inputs). rowmax, stats
// and losses are fp32 buffers whatever F.
// Tolerances, fp32: max is exact; the exponentials differ by expf vs exp_f32 (≤ 2 ulp each, and
// exp_f32 clamps below e^-86.5 where expf flushes to 0: atol 1e-30), the Σ by the order of the
// additions: rtol 1e-6. bf16: each stored exponential and probability is rounded once (2^-9
// relative): BF_TOL; the fp32 statistics and losses come from the fp32 exponentials: 1e-5.
typedef __nv_bfloat16 bf16;
static const double BF_TOL = 2e-2;
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
    double e_rtol = bf ? BF_TOL : 1e-6, e_atol = bf ? BF_TOL : 1e-30, s_tol = bf ? 1e-5 : 1e-6;
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
    std::vector<float> exps = logits, stats(2 * N);  // (N,Vl) (N,2)
    vocab_parallel_sumexp(stats.data(), exps.data(), targets.data(), gmax.data(), N, Vr, Vl);
    keel_cuda::vocab_parallel_sumexp(d_stats, d_logits, d_targets, d_rowmax, N, Vr, Vl);
    std::vector<float> g_stats = dev_download(d_stats, 2 * N), g_exps = download_as(d_logits, NV);
    std::vector<float> sums(N), sums_want(N), tlog(N), tlog_want(N);
    for (int n = 0; n < N; n++) {
        sums[n] = g_stats[2 * n], sums_want[n] = stats[2 * n];
        tlog[n] = g_stats[2 * n + 1], tlog_want[n] = stats[2 * n + 1];
    }
    check_close("vocab_parallel_sumexp exps (padding untouched)" + std::string(tag), g_exps, exps, e_rtol, e_atol);
    check_close("vocab_parallel_sumexp sum (fp32)" + std::string(tag), sums, sums_want, s_tol, 1e-30);
    check_close("vocab_parallel_sumexp target logit (fp32)" + std::string(tag), tlog, tlog_want, 0, 0);

    // finish from the GPU's exponentials on both sides (as F), and the group's sums
    std::vector<float> gstats(2 * N);  // (N,2)
    for (int n = 0; n < N; n++) {
        gstats[2 * n] = g_stats[2 * n] + 1.0f + 0.25f * n;
        gstats[2 * n + 1] = g_stats[2 * n + 1] + (targets[n] >= 0 && targets[n] < Vr ? 0.0f : 0.3f * n - 1.0f);
    }
    dev_set(d_stats, gstats);
    std::vector<float> probs = g_exps, losses(N);  // (N,Vl) (N)
    vocab_parallel_finish(losses.data(), probs.data(), gstats.data(), gmax.data(), N, Vr, Vl);
    keel_cuda::vocab_parallel_finish(d_losses, d_logits, d_stats, d_rowmax, N, Vr, Vl);
    std::vector<float> g_probs = download_as(d_logits, NV);
    check_close("vocab_parallel_finish probs" + std::string(tag), g_probs, probs, bf ? BF_TOL : 1e-6, bf ? BF_TOL : 1e-30);
    check_close("vocab_parallel_finish losses (fp32)" + std::string(tag), dev_download(d_losses, N), losses, 1e-6, 1e-6);
    bool pad_zero = true;
    for (int n = 0; n < N; n++)
        for (int j = Vr; j < Vl; j++) pad_zero = pad_zero && g_probs[(size_t)n * Vl + j] == 0.0f;
    check_true("vocab_parallel_finish padding is 0" + std::string(tag), pad_zero);

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
// Σ: 1e-5), equal on both ranks, and their probabilities side by side the whole row's.
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
    keel_cuda::classifier_forward(d_losses, d_full, d_targets, N, V, Vp);
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
        keel_cuda::vocab_parallel_finish(d_loss[r], d_l[r], d_stats[r], d_rowmax[r], N, Vr[r], Vl);
        loss[r] = dev_download(d_loss[r], N);
        std::vector<float> pr = download_as(d_l[r], (size_t)N * Vl);
        for (int n = 0; n < N; n++) std::copy(&pr[(size_t)n * Vl], &pr[(size_t)(n + 1) * Vl], &probs[(size_t)n * Vp + r * Vl]);
    }
    check_close("vocab_parallel 2 ranks: losses = classifier_forward's" + std::string(tag), loss[0], want_losses, 1e-5, 1e-5);
    check_true("vocab_parallel 2 ranks: both ranks' losses equal" + std::string(tag),
               memcmp(loss[0].data(), loss[1].data(), N * sizeof(float)) == 0);
    check_close("vocab_parallel 2 ranks: probs = classifier_forward's" + std::string(tag), probs, want_probs,
                is_bf16<F>() ? BF_TOL : 1e-5, is_bf16<F>() ? BF_TOL : 1e-7);
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
    for (int N : {1, 5, 64}) {
        test_classifier(N, 50, 64);
        test_classifier(N, 1000, 1024);
        test_classifier_backward_other_rank(N, 50, 64);
    }
    test_classifier_backward_other_rank(7, 1000, 1024);
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
