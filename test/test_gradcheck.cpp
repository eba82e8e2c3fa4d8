// test_gradcheck — every op's backward, and the whole model's gradient with respect to every
// parameter tensor, against central finite differences in double precision.
//
// Each op is checked through a scalar probe loss  Lp = Σ out·w  with random fixed weights w, so
// dout = w. For a sampled set of input elements x_i:  (Lp(x_i + h) - Lp(x_i - h)) / 2h  must
// equal the analytic gradient. In double, h = 1e-6 leaves an error near 1e-9 relative, so the
// tolerance (1e-6 relative to the gradient scale) catches any wrong term while never flaking.
// The knobs that change the network (embedding LayerNorm, ALiBi, NormFormer, ReLU, qk-inward and
// layer scaling, dropout with a fixed mask) are checked op by op and as whole models.
#include <functional>
#include <vector>

#include "llmc/init.h"
#include "llmc/model.h"

static int failures = 0;
static uint64_t g_seed = 42;

static std::vector<double> randvec(size_t n, double scale = 1.0) {
    std::vector<double> v(n);
    for (size_t i = 0; i < n; i++) v[i] = scale * rng_normal(g_seed, 99, g_seed * 7 + 1, i);
    g_seed++;
    return v;
}

// Compares analytic vs numeric gradients of `loss` w.r.t. `x` at up to `samples` positions.
static void check(const char* name, std::vector<double>& x, const std::vector<double>& analytic,
                  const std::function<double()>& loss, int samples = 40) {
    double h = 1e-6, max_err = 0, scale = 1e-12;
    for (double a : analytic) scale = std::max(scale, std::fabs(a));
    size_t n = x.size(), step = n > (size_t)samples ? n / samples : 1;
    for (size_t i = 0; i < n; i += step) {
        double keep = x[i];
        x[i] = keep + h; double lp = loss();
        x[i] = keep - h; double lm = loss();
        x[i] = keep;
        double num = (lp - lm) / (2 * h);
        max_err = std::max(max_err, std::fabs(num - analytic[i]) / scale);
    }
    bool ok = max_err < 1e-6;
    printf("%-4s %-28s max rel err %.3e\n", ok ? "ok" : "FAIL", name, max_err);
    if (!ok) failures++;
}

static double dotw(const std::vector<double>& a, const std::vector<double>& w) {
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += a[i] * w[i];
    return s;
}

static void check_ops() {
    const int B = 2, T = 5, C = 12, NH = 3, OC = 7, N = B * T, V = 11, Vp = 16;
    {   // matmul, with an odd C so the lane tail and the 4-row blocks' tail both run
        const int Cm = 13;
        std::vector<double> x = randvec(N * Cm), w = randvec(OC * Cm), b = randvec(OC), out(N * OC), pw = randvec(N * OC);
        auto loss = [&] { matmul_forward(out.data(), x.data(), w.data(), b.data(), N, Cm, OC); return dotw(out, pw); };
        std::vector<double> dx(N * Cm, 0), dw(OC * Cm, 0), db(OC, 0);
        matmul_backward(dx.data(), dw.data(), db.data(), pw.data(), x.data(), w.data(), N, Cm, OC);
        check("matmul dinp", x, dx, loss);
        check("matmul dweight", w, dw, loss);
        check("matmul dbias", b, db, loss);
    }
    {   // layernorm
        std::vector<double> x = randvec(N * C), w = randvec(C), b = randvec(C), out(N * C), mean(N), rstd(N), pw = randvec(N * C);
        auto loss = [&] { layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C); return dotw(out, pw); };
        loss();
        std::vector<double> dx(N * C, 0), dw(C, 0), db(C, 0);
        layernorm_backward(dx.data(), dw.data(), db.data(), pw.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
        check("layernorm dinp", x, dx, loss);
        check("layernorm dweight", w, dw, loss);
        check("layernorm dbias", b, db, loss);
    }
    {   // gelu
        std::vector<double> x = randvec(N * C, 2.0), out(N * C), pw = randvec(N * C), dx(N * C, 0);
        auto loss = [&] { gelu_forward(out.data(), x.data(), x.size()); return dotw(out, pw); };
        gelu_backward(dx.data(), pw.data(), x.data(), x.size());
        check("gelu dinp", x, dx, loss);
    }
    {   // residual
        std::vector<double> a = randvec(N * C), b = randvec(N * C), out(N * C), pw = randvec(N * C), da(N * C, 0), db(N * C, 0);
        auto loss = [&] { residual_forward(out.data(), a.data(), b.data(), a.size()); return dotw(out, pw); };
        residual_backward(da.data(), db.data(), pw.data(), a.size());
        check("residual da", a, da, loss);
        check("residual db", b, db, loss);
    }
    // attention: the plain op, then each numerics knob, then all of them with dropout on the probabilities
    std::vector<float> slopes(NH);
    alibi_slopes(NH, slopes.data());
    struct { const char* name; int scaling; double coeff; bool alibi; double p; } variants[] = {
        {"attention dqkv", ATTN_SCALING_STANDARD, 1, false, 0},
        {"attention qk-inward dqkv", ATTN_SCALING_QK_INWARD, 1, false, 0},
        {"attention layer-scaled dqkv", ATTN_SCALING_STANDARD, 3, false, 0},
        {"attention alibi dqkv", ATTN_SCALING_STANDARD, 1, true, 0},
        {"attention all+dropout dqkv", ATTN_SCALING_QK_INWARD, 2, true, 0.3},
    };
    for (auto& va : variants) {
        AttentionOpts o;
        o.scaling = va.scaling; o.coeff = va.coeff; o.alibi = va.alibi ? slopes.data() : nullptr;
        o.dropout = {va.p, 11, dropout_site(0, DROPOUT_SITE_ATTN_PROBS), 5};
        std::vector<double> qkv = randvec(N * 3 * C), out(N * C), att(B * NH * T * T), pw = randvec(N * C), dqkv(N * 3 * C, 0);
        auto loss = [&] { attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, &o); return dotw(out, pw); };
        loss();
        attention_backward(dqkv.data(), pw.data(), qkv.data(), att.data(), B, T, C, NH, &o);
        check(va.name, qkv, dqkv, loss, 90);
    }
    {   // relu
        std::vector<double> x = randvec(N * C, 2.0), out(N * C), pw = randvec(N * C), dx(N * C, 0);
        auto loss = [&] { relu_forward(out.data(), x.data(), x.size()); return dotw(out, pw); };
        relu_backward(dx.data(), pw.data(), x.data(), x.size());
        check("relu dinp", x, dx, loss);
    }
    {   // NormFormer head scale
        std::vector<double> x = randvec(N * C), sc = randvec(NH), out(N * C), pw = randvec(N * C), dx(N * C, 0), dsc(NH, 0);
        auto loss = [&] { headscale_forward(out.data(), x.data(), sc.data(), N, C, NH); return dotw(out, pw); };
        headscale_backward(dx.data(), dsc.data(), pw.data(), x.data(), sc.data(), N, C, NH);
        check("headscale dinp", x, dx, loss);
        check("headscale dscale", sc, dsc, loss);
    }
    {   // dropout with a fixed mask (the same key every call)
        DropoutSite d = {0.4, 3, dropout_site(1, DROPOUT_SITE_MLP_OUT), 17};
        std::vector<double> x = randvec(N * C), out(N * C), pw = randvec(N * C), dx(N * C, 0);
        auto loss = [&] { dropout_forward(out.data(), x.data(), B, (size_t)T * C, &d); return dotw(out, pw); };
        dropout_backward(dx.data(), pw.data(), B, (size_t)T * C, &d);
        check("dropout dinp", x, dx, loss);
        size_t dropped = 0;
        loss();
        for (double v : out) dropped += v == 0;
        if (dropped == 0 || dropped == out.size()) { printf("FAIL dropout: %zu of %zu dropped\n", dropped, out.size()); failures++; }
    }
    {   // position add (the --embed-layernorm path)
        const int maxT = 8;
        std::vector<double> wpe = randvec(maxT * C), base = randvec(N * C), out(N * C), pw = randvec(N * C), dwpe(maxT * C, 0);
        auto loss = [&] { out = base; position_forward(out.data(), wpe.data(), B, T, C); return dotw(out, pw); };
        position_backward(dwpe.data(), pw.data(), B, T, C);
        check("position dwpe", wpe, dwpe, loss, 200);
    }
    {   // encoder (a repeated token exercises the accumulation into a shared row)
        const int maxT = 8;
        std::vector<int> ids = {1, 3, 3, 0, 9, 2, 3, 7, 1, 1};
        std::vector<double> wte = randvec(V * C), wpe = randvec(maxT * C), out(N * C), pw = randvec(N * C);
        auto loss = [&] { encoder_forward(out.data(), ids.data(), wte.data(), wpe.data(), B, T, C); return dotw(out, pw); };
        std::vector<double> dwte(V * C, 0), dwpe(maxT * C, 0);
        encoder_backward(dwte.data(), dwpe.data(), pw.data(), ids.data(), (const int*)nullptr, B, T, C);
        check("encoder dwte", wte, dwte, loss, 200);
        check("encoder dwpe", wpe, dwpe, loss, 200);
    }
    {   // classifier: loss = Σ_n dloss · CE_n, a padded vocabulary whose extra columns must not count
        std::vector<int> tg = {0, 5, 10, 3, 3, 7, 1, 2, 9, 4};
        std::vector<double> logits = randvec(N * Vp, 3.0), work(N * Vp), losses(N);
        double dloss = 0.37;
        auto loss = [&] {
            work = logits;
            classifier_forward(losses.data(), work.data(), tg.data(), N, V, Vp, 0.0);  // the loss alone
            double s = 0;
            for (double l : losses) s += dloss * l;
            return s;
        };
        work = logits;
        classifier_forward(losses.data(), work.data(), tg.data(), N, V, Vp, dloss);  // fused: dlogits in place
        std::vector<double> dlogits = work;
        check("classifier dlogits", logits, dlogits, loss, 160);
        for (int n = 0; n < N; n++)
            for (int j = V; j < Vp; j++)
                if (dlogits[n * Vp + j] != 0) { printf("FAIL classifier: padded column has a gradient\n"); failures++; n = N; break; }
    }
}

// The whole model: loss w.r.t. every parameter tensor of a tiny GPT, in double, for a knob set.
static void check_model(const char* label, GPTConfig cfg, bool dropout) {
    const int B = 2, T = 6;
    GPT<double> m;
    gpt_build(&m, &cfg, B, T);
    param_table_init(m.params, &m.table, &cfg, 0.3, 7);
    // LayerNorm, gains and biases start at 1 / 0: perturb them so their gradients are generic.
    for (int id = 0; id < NUM_PARAMS; id++) {
        const ParamTensor* t = &m.table.t[id];
        if (t->init == INIT_ONE || t->init == INIT_ZERO)
            for (int64_t i = 0; i < t->numel; i++) m.p[id][i] += 0.2 * rng_normal(3, 5, id, i);
    }
    gpt_set_dropout(&m, dropout, 99, 40);  // a fixed mask: the same key at every forward
    std::vector<int> in(B * T), tg(B * T);
    for (int i = 0; i < B * T; i++) { in[i] = (i * 7 + 3) % cfg.vocab_size; tg[i] = (i * 5 + 1) % cfg.vocab_size; }
    in[3] = in[1];  // a repeated token
    gpt_zero_grad(&m);
    gpt_forward(&m, in.data(), tg.data(), B, T, 1.0 / (B * T));
    gpt_backward(&m, B, T, 1.0 / (B * T));
    for (int id = 0; id < NUM_PARAMS; id++) {
        const ParamTensor* t = &m.table.t[id];
        if (t->numel == 0) continue;
        std::vector<double> x(m.p[id], m.p[id] + t->numel), g(m.g[id], m.g[id] + t->numel);
        auto loss = [&] {
            std::copy(x.begin(), x.end(), m.p[id]);
            return gpt_forward(&m, in.data(), tg.data(), B, T);
        };
        char name[96];
        snprintf(name, sizeof name, "%s d%s", label, t->name);
        check(name, x, g, loss, 30);
        std::copy(x.begin(), x.end(), m.p[id]);
    }
    gpt_free(&m);
}

static void check_models() {
    GPTConfig base = {8, 37, gpt_padded_vocab(37, 16), 2, 2, 8};
    check_model("model", base, false);
    GPTConfig c = base; c.embed_layernorm = true;
    check_model("embed-ln", c, false);
    c = base; c.alibi = true;
    check_model("alibi", c, false);
    c = base; c.normformer = true;
    check_model("normformer", c, false);
    c = base; c.activation = ACT_RELU;
    check_model("relu", c, false);
    c = base; c.attention_scaling = ATTN_SCALING_QK_INWARD; c.qk_layer_scaling = true;
    check_model("qk-inward+layer", c, false);
    c = base; c.hidden_dropout = 0.2; c.attention_dropout = 0.25; c.embed_dropout = 0.3;
    check_model("dropout", c, true);
    // --ffn-hidden-size: an MLP width that is not 4C (13 with C = 8: odd, prime). Negative control: a
    // table still 4C wide fails the shape check (and an op still reading 4C fails the gradients).
    c = base; c.ffn_hidden = 13;
    {
        ParamTable pt;
        param_table_build(&pt, &c);
        bool ok = pt.t[P_FCW].rows == 13 && pt.t[P_FCB].cols == 13 && pt.t[P_FCPROJW].cols == 13 && gpt_tp_dims(&c).H == 13;
        printf("%-4s %-28s fc rows %lld, fcproj cols %lld\n", ok ? "ok" : "FAIL", "ffn=13 table", (long long)pt.t[P_FCW].rows,
               (long long)pt.t[P_FCPROJW].cols);
        if (!ok) failures++;
    }
    check_model("ffn=13", c, false);
    c.normformer = true; c.hidden_dropout = 0.2;
    check_model("ffn=13 normformer+dropout", c, true);
    c = base; c.embed_layernorm = c.alibi = c.normformer = c.qk_layer_scaling = true; c.activation = ACT_RELU;
    c.attention_scaling = ATTN_SCALING_QK_INWARD; c.hidden_dropout = c.attention_dropout = c.embed_dropout = 0.2;
    check_model("all knobs", c, true);
}

int main() {
    check_ops();
    check_models();
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
