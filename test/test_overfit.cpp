// test_overfit — the model, backward and AdamW together can memorise one batch: the loss on a
// single fixed batch falls below 0.1 within a bounded number of steps (the trainer's own
// gpt_forward / gpt_backward / optimizer_step, fp32), with --optimizer adam and with adam8bit
// (min size lowered so that most of this tiny model's tensors get 8-bit state).
#include "llmc/init.h"
#include "llmc/optimizer.h"

static bool overfit(const char* optimizer) {
    GPTConfig cfg = {16, 64, gpt_padded_vocab(64, 128), 2, 2, 32};
    const int B = 2, T = 16, MAX_STEPS = 300;
    GPT<float> m;
    gpt_build(&m, &cfg, B, T);
    param_table_init(m.params, &m.table, &cfg, 0.02, 1);
    Config c;
    c.lr = 3e-3; c.weight_decay = 0.0; c.clip_grad = 1.0; c.adam_beta2 = 0.99;
    c.optimizer = optimizer;
    c.adam8bit_min_size = 256;
    Optimizer opt;
    optimizer_init(&opt, &m.table, &c);
    printf("%s\n", optimizer_describe(&opt, &m.table, &c).c_str());
    std::vector<int> in(B * T), tg(B * T);
    for (int i = 0; i < B * T; i++) {
        in[i] = (int)rng_below(64, 5, 1, i);
        tg[i] = (int)rng_below(64, 5, 2, i);
    }
    UpdateGuard guard;
    update_guard_init(&guard, &c);
    SpikeState spike;
    spike_init(&spike, &c);
    double first = 0, loss = 0;
    int step = 0;
    for (; step < MAX_STEPS; step++) {
        gpt_zero_grad(&m);
        loss = gpt_forward(&m, in.data(), tg.data(), B, T, 1.0 / (B * T));
        if (step == 0) first = loss;
        if (loss < 0.1) break;
        gpt_backward(&m, B, T, 1.0 / (B * T));
        Comm comm{};  // rank 0, no MPI, no label
        comm.size = 1;
        optimizer_step(&opt, &comm, nullptr, &m, &guard, &spike, &c, 0, c.lr, loss, false);
        if (step % 25 == 0) printf("step %3d loss %.4f\n", step, loss);
    }
    printf("%s: loss %.4f -> %.4f after %d steps\n", optimizer, first, loss, step);
    bool ok = loss < 0.1 && first > 3.5;  // ~ln(64) at the start
    printf("%s\n", ok ? "PASS" : "FAIL: did not overfit one batch");
    optimizer_free(&opt);
    gpt_free(&m);
    return ok;
}

int main() {
    bool ok = overfit("adam");
    ok = overfit("adam8bit") && ok;
    return ok ? 0 : 1;
}
