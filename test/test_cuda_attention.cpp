// test_cuda_attention — cuda/attention.cuh and cuda/classifier.cuh against the CPU ops
// (cpu/attention.h, cpu/classifier.h), on shapes with T and the head size not multiples of 32,
// T = 1 and N = 1, for every score variant (standard, qk-inward, layer coefficient, ALiBi) and
// attention dropout. The backward ops accumulate, so each starts from a random gradient buffer.
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

int main() {
    const AttnVariant variants[] = {
        {"standard", ATTN_SCALING_STANDARD, 1.0, false, 0.0},
        {"qk-inward", ATTN_SCALING_QK_INWARD, 1.0, false, 0.0},
        {"coeff=3", ATTN_SCALING_STANDARD, 3.0, false, 0.0},
        {"qk-inward coeff=3", ATTN_SCALING_QK_INWARD, 3.0, false, 0.0},
        {"alibi", ATTN_SCALING_STANDARD, 1.0, true, 0.0},
        {"dropout p=0.25", ATTN_SCALING_STANDARD, 1.0, false, 0.25},
        {"all: qk-inward coeff=2 alibi dropout", ATTN_SCALING_QK_INWARD, 2.0, true, 0.25},
    };
    struct Shape { int B, T, C, NH; };
    const Shape shapes[] = {{1, 1, 8, 2}, {2, 7, 24, 3}, {2, 33, 64, 4}, {1, 70, 40, 5}};
    for (const Shape& s : shapes)
        for (const AttnVariant& v : variants)
            test_attention(s.B, s.T, s.C, s.NH, v, s.T == 33 && (v.p > 0 || v.alibi));
    for (int N : {1, 5, 64}) {
        test_classifier(N, 50, 64);
        test_classifier(N, 1000, 1024);
    }
    return cuda_test_finish();
}
