// dev/layer_norms.cpp — per-layer norms of a checkpoint, computed on their own: the oracle the
// trainer's --log-layer-norms-interval is tested against (test/test_layer_norms.sh), and a way to
// look at a checkpoint's layers after the fact (which layer's weights grew before the spike?).
//
//   ./layer_norms <the run's flags> --load DIR
//        weight norms of DIR's latest checkpoint, tensor by tensor, layer by layer
//   ./layer_norms <the run's flags> --load DIR --next-batch
//        also the gradient norms and activation RMS of the iteration after the checkpoint, from its
//        global batch: one process, fp32, no dropout, no loss scaling, no batch ramp-up or curriculum
// Prints one JSON object with the keys of the trainer's JSONL fields (llmc/layer_stats.h).
//
// Deliberately not the trainer's code path: no optimizer units, no chunked sums, no all-gathers.
// Sums are plain sequential double loops over the parameter table, so agreement with the JSONL
// (to rounding) says the trainer put the right numbers under the right keys.
#include <string>
#include <vector>

#include "llmc/checkpoint.h"
#include "llmc/data.h"
#include "llmc/flags.h"
#include "llmc/log.h"
#include "llmc/model.h"

// Group of layer l of tensor t (or of a global tensor): l, L (embedding) or L + 1 (final LayerNorm).
static int group_of(int id, const ParamTensor* t, int l, int L) {
    if (t->per_layer) return l;
    return id == P_LNFW || id == P_LNFB ? L + 1 : L;
}

// Σx² per group over a buffer laid out like the parameter table.
static std::vector<double> table_sumsq(const float* x, const ParamTable* pt, int L) {
    std::vector<double> sum(L + 2, 0.0);
    for (int id = 0; id < NUM_PARAMS; id++) {
        const ParamTensor* t = &pt->t[id];
        int layers = t->per_layer ? L : 1;
        int64_t per = t->numel / layers;
        for (int l = 0; l < layers; l++) {
            const float* p = x + t->offset_canonical + l * per;
            double s = 0;
            for (int64_t i = 0; i < per; i++) s += (double)p[i] * p[i];
            sum[group_of(id, t, l, L)] += s;
        }
    }
    return sum;
}

static double plain_sumsq(const float* x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

static std::string json_array(const std::vector<double>& v, size_t first, size_t n, double div, bool rms) {
    std::string t = "[";
    for (size_t i = 0; i < n; i++) t += (i ? ", " : "") + json_num(rms ? std::sqrt(v[first + i] / div) : std::sqrt(v[first + i]));
    return t + "]";
}

int main(int argc, char** argv) {
    bool next_batch = false;
    std::vector<char*> args;
    for (int i = 0; i < argc; i++) {
        if (std::string(argv[i]) == "--next-batch") next_batch = true;
        else args.push_back(argv[i]);
    }
    Config cfg;
    Config* c = &cfg;
    if (!flags_parse(c, (int)args.size(), args.data())) {
        printf("usage: %s <the run's flags> --load DIR [--next-batch]\n", argv[0]);
        return 0;
    }
    config_validate(c, 1);
    if (c->load.empty()) keel_usage_error("--load DIR is required (the checkpoint to read)");
    if (next_batch && (c->hidden_dropout > 0 || c->attention_dropout > 0 || (!std::isnan(c->embed_dropout) && c->embed_dropout > 0)))
        keel_usage_error("--next-batch computes without dropout; the run used dropout");
    if (next_batch && (!c->rampup_batch_size.empty() || c->curriculum_learning))
        keel_usage_error("--next-batch takes the plain global batch: no --rampup-batch-size or --curriculum-learning");
    GPTConfig g;
    gpt_config_from_flags(c, &g);
    int64_t it = ckpt_latest(c->load);
    if (it < 0) keel_die("no checkpoint in '%s'", c->load.c_str());
    int B = (int)c->micro_batch_size, T = (int)c->seq_length, L = g.num_layers;
    GPT<float> model;
    gpt_build(&model, &g, B, T);
    TrainState st{};
    std::string idir, layout;
    ckpt_load(c->load, it, model.params, model.table.total, &st, &g, c, &idir, &layout);
    std::vector<double> w = table_sumsq(model.params, &model.table, L);
    printf("{\"iteration\": %lld, \"layer_weight_norm\": %s, \"embedding_weight_norm\": %s, \"final_norm_weight_norm\": %s",
           (long long)it, json_array(w, 0, L, 1, false).c_str(), json_num(std::sqrt(w[L])).c_str(), json_num(std::sqrt(w[L + 1])).c_str());
    if (next_batch) {
        DataLoader dl;
        int64_t train_iters = c->train_iters > 0 ? c->train_iters : c->train_samples / c->global_batch_size;  // no ramp-up here
        dataloader_open(&dl, c, true, T, g.vocab_size, st.seed, train_iters);
        int64_t gbs = c->global_batch_size;
        std::vector<int> sample(T + 1), inputs((size_t)B * T), targets((size_t)B * T);
        std::vector<double> acts(L + 1, 0.0);
        size_t BT = (size_t)B * T, C = g.channels;
        gpt_zero_grad(&model);
        gpt_set_dropout(&model, false, 0, 0);
        for (int64_t m = 0; m < gbs / B; m++) {
            for (int b = 0; b < B; b++) {
                dataloader_read(&dl, batch_first_sample(st.consumed_samples, m, 1, 0, B) + b, sample.data());
                for (int t = 0; t < T; t++) inputs[b * T + t] = sample[t], targets[b * T + t] = sample[t + 1];
            }
            gpt_forward(&model, inputs.data(), targets.data(), B, T, 1.0 / ((double)gbs * T));  // the fused classifier's dloss
            acts[0] += plain_sumsq(model.acts.encoded, BT * C);
            for (int l = 0; l < L; l++) acts[1 + l] += plain_sumsq(model.acts.residual3 + l * BT * C, BT * C);
            gpt_backward(&model, B, T, 1.0 / ((double)gbs * T));
        }
        std::vector<double> gs = table_sumsq(model.grads, &model.table, L);
        double count = (double)gbs * T * C;
        printf(", \"next_iteration\": %lld, \"layer_grad_norm\": %s, \"layer_act_rms\": %s, \"embedding_grad_norm\": %s, "
               "\"embedding_act_rms\": %s, \"final_norm_grad_norm\": %s",
               (long long)it + 1, json_array(gs, 0, L, 1, false).c_str(), json_array(acts, 1, L, count, true).c_str(),
               json_num(std::sqrt(gs[L])).c_str(), json_num(std::sqrt(acts[0] / count)).c_str(), json_num(std::sqrt(gs[L + 1])).c_str());
        dataloader_free(&dl);
    }
    printf("}\n");
    gpt_free(&model);
    return 0;
}
