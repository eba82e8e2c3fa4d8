// test_lr_schedule — the LR schedule (llmc/schedule.h) against hand-computed values at the
// boundaries: first update, warmup end, decay start and end, past the end; iteration- and
// sample-based units, warmup fraction, each decay style; token-based decay (--lr-decay-tokens):
// warmup_tokens captured only on an exact warmup end, and restored on resume (docs/knobs.md#learning-rate-schedule, #resuming-a-schedule).
#include "llmc/schedule.h"

static int failures = 0;

static void expect(const char* what, double got, double want) {
    bool ok = std::fabs(got - want) <= 1e-15 * std::max(1.0, std::fabs(want));
    printf("%-4s %-56s got %.17g want %.17g\n", ok ? "ok" : "FAIL", what, got, want);
    if (!ok) failures++;
}

static double lr_at(LRSchedule s, int64_t num_steps) {
    s.num_steps = num_steps;
    return lr_schedule_get(&s);
}

static double lr_at_tokens(LRSchedule s, int64_t num_steps, int64_t num_tokens) {
    s.num_steps = num_steps;
    s.num_tokens = num_tokens;
    return lr_schedule_get(&s);
}

// Token-based decay. Run: lr 1e-3 → min 1e-4 (span 9e-4), GBS 4, warmup 8 samples (2 iterations),
// 100 tokens per sample so each iteration consumes 400 tokens, decay over 10400 tokens.
// Iteration k steps with tokens_before = 400·(k-1); iteration 2 ends warmup exactly (num_steps 8),
// so warmup_tokens = 400 and the token span is 10400 - 400 = 10000.
static void test_token_decay() {
    Config c;
    c.lr = 1e-3; c.min_lr = 1e-4; c.global_batch_size = 4; c.micro_batch_size = 4;
    c.train_samples = 1000; c.lr_warmup_samples = 8; c.lr_decay_tokens = 10400; c.lr_decay_style = "linear";
    LRSchedule s;
    lr_schedule_init(&s, &c);
    expect("tokens: decay_tokens from the flag", s.decay_tokens, 10400);
    expect("tokens: warmup still in samples (4 of 8)", lr_at_tokens(s, 4, 1000000), 5e-4);
    lr_schedule_step(&s, 4, 0);      // iteration 1: nothing consumed before it
    expect("tokens: after iteration 1, num_tokens = 0", (double)s.num_tokens, 0);
    expect("tokens: warmup not yet over, warmup_tokens 0", (double)s.warmup_tokens, 0);
    lr_schedule_step(&s, 4, 400);    // iteration 2: num_steps 8 == warmup, captured
    expect("tokens: warmup_tokens captured at exact warmup end", (double)s.warmup_tokens, 400);
    expect("tokens: lr at warmup end = peak", lr_schedule_get(&s), 1e-3);
    lr_schedule_step(&s, 4, 800);    // iteration 3: past warmup, capture does not move
    expect("tokens: warmup_tokens not recaptured after warmup", (double)s.warmup_tokens, 400);
    // ratio (800-400)/10000 = 0.04: linear 1e-4 + 0.96·9e-4
    expect("tokens linear: ratio 0.04 after iteration 3", lr_schedule_get(&s), 1e-4 + 0.96 * 9e-4);
    // num_steps far past the sample decay span (1000): the token branch alone decides
    expect("tokens linear: ratio 1/4 (2900 tokens)", lr_at_tokens(s, 5000, 2900), 1e-4 + 0.75 * 9e-4);
    expect("tokens linear: midpoint (5400 tokens)", lr_at_tokens(s, 5000, 5400), 5.5e-4);
    expect("tokens linear: at decay_tokens = min", lr_at_tokens(s, 5000, 10400), 1e-4);
    expect("tokens linear: past decay_tokens = min", lr_at_tokens(s, 5000, 10401), 1e-4);
    s.style = LR_DECAY_COSINE;
    // cosine at ratio 1/4: 1e-4 + 0.5·(cos(π/4) + 1)·9e-4, cos(π/4) = √2/2
    expect("tokens cosine: ratio 1/4", lr_at_tokens(s, 5000, 2900), 1e-4 + 0.5 * (0.70710678118654752 + 1) * 9e-4);
    expect("tokens cosine: midpoint", lr_at_tokens(s, 5000, 5400), 5.5e-4);
    expect("tokens cosine: past decay_tokens = min", lr_at_tokens(s, 12, 20000), 1e-4);
    // without --lr-decay-tokens the same counters decay by samples: 5000 > 1000 samples → min
    Config off = c;
    off.lr_decay_tokens = 0;
    LRSchedule so;
    lr_schedule_init(&so, &off);
    expect("no token decay: samples decide (past 1000) = min", lr_at_tokens(so, 5000, 5400), 1e-4);
    lr_schedule_step(&so, 4, 0);
    lr_schedule_step(&so, 4, 400);
    expect("no token decay: warmup_tokens never captured", (double)so.warmup_tokens, 0);

    // Warmup 6 samples with GBS 4: num_steps goes 4, 8 and never equals 6, so warmup_tokens stays 0
    // (the reference's behaviour, e.g. 176B's 183_105 / 2048) and the decay spans all 10400 tokens.
    Config odd = c;
    odd.lr_warmup_samples = 6;
    LRSchedule sd;
    lr_schedule_init(&sd, &odd);
    lr_schedule_step(&sd, 4, 0);
    lr_schedule_step(&sd, 4, 400);
    expect("inexact warmup: warmup_tokens stays 0", (double)sd.warmup_tokens, 0);
    // ratio 400/10400 = 1/26: 1e-4 + (25/26)·9e-4
    expect("inexact warmup: ratio from 0 tokens", lr_schedule_get(&sd), 1e-4 + 9e-4 * 25.0 / 26.0);

    // Resume: num_steps, num_tokens, warmup_tokens from the checkpoint; decay_tokens from the flag.
    LRSchedule ckpt = s;
    ckpt.style = LR_DECAY_LINEAR;
    ckpt.num_steps = 40; ckpt.num_tokens = 3900; ckpt.warmup_tokens = 300; ckpt.decay_tokens = 99999;
    LRSchedule r;
    lr_schedule_init(&r, &c);
    lr_schedule_resume(&r, &ckpt, &c);
    expect("resume: num_steps from checkpoint", (double)r.num_steps, 40);
    expect("resume: num_tokens from checkpoint", (double)r.num_tokens, 3900);
    expect("resume: warmup_tokens from checkpoint", (double)r.warmup_tokens, 300);
    expect("resume: decay_tokens from the command line", r.decay_tokens, 10400);
    // ratio (3900-300)/(10400-300) = 3600/10100 = 36/101: linear 1e-4 + (65/101)·9e-4
    expect("resume: lr continues from restored tokens", lr_schedule_get(&r), 1e-4 + 9e-4 * 65.0 / 101.0);
    // Megatron's load_state_dict ends with step(num_steps, num_tokens): an overridden warmup that now
    // ends exactly at the checkpoint's num_steps (40) captures warmup_tokens = num_tokens = 3900.
    Config ov = c;
    ov.lr_warmup_samples = 40;
    ov.override_lr_scheduler = true;
    lr_schedule_init(&r, &ov);
    lr_schedule_resume(&r, &ckpt, &ov);
    expect("resume: warmup ending at num_steps recaptures", (double)r.warmup_tokens, 3900);
}

int main() {
    Config c;
    c.lr = 6e-4; c.min_lr = 6e-5; c.global_batch_size = 8; c.micro_batch_size = 8;
    // iteration-based: warmup 10 iters = 80 samples, decay 100 iters = 800 samples, cosine
    c.train_iters = 100; c.lr_warmup_iters = 10; c.lr_decay_style = "cosine";
    LRSchedule s;
    lr_schedule_init(&s, &c);
    expect("iters: warmup_steps in samples", (double)s.warmup_steps, 80);
    expect("iters: decay_steps in samples", (double)s.decay_steps, 800);
    expect("cosine: first update (num_steps 0) runs at 0", lr_at(s, 0), 0.0);
    expect("cosine: warmup midpoint", lr_at(s, 40), 3e-4);
    expect("cosine: warmup end = peak", lr_at(s, 80), 6e-4);
    expect("cosine: one batch past warmup", lr_at(s, 88), 6e-5 + 0.5 * (std::cos(M_PI * 8.0 / 720.0) + 1) * 5.4e-4);
    expect("cosine: decay midpoint", lr_at(s, 440), 6e-5 + 0.5 * 5.4e-4);
    expect("cosine: decay end = min", lr_at(s, 800), 6e-5);
    expect("cosine: past decay end = min", lr_at(s, 808), 6e-5);
    c.lr_decay_style = "linear";
    lr_schedule_init(&s, &c);
    expect("linear: 3/4 through decay", lr_at(s, 80 + 540), 6e-5 + 0.25 * 5.4e-4);
    expect("linear: decay end", lr_at(s, 800), 6e-5);
    c.lr_decay_style = "constant";
    lr_schedule_init(&s, &c);
    expect("constant: in warmup", lr_at(s, 20), 1.5e-4);
    expect("constant: after warmup", lr_at(s, 81), 6e-4);
    expect("constant: past decay end", lr_at(s, 5000), 6e-4);
    // sample-based: decay over --lr-decay-samples, warmup as a fraction of it
    Config d;
    d.lr = 1e-3; d.min_lr = 0; d.global_batch_size = 4; d.micro_batch_size = 4;
    d.train_samples = 1000; d.lr_decay_samples = 500; d.lr_warmup_fraction = 0.1; d.lr_decay_style = "linear";
    lr_schedule_init(&s, &d);
    expect("samples: warmup = fraction of decay", (double)s.warmup_steps, 50);
    expect("samples: decay span", (double)s.decay_steps, 500);
    expect("samples: warmup end", lr_at(s, 50), 1e-3);
    expect("samples: midway", lr_at(s, 275), 5e-4);
    expect("samples: end", lr_at(s, 500), 0.0);
    // no warmup: the first update already runs at the peak
    Config e = d;
    e.lr_warmup_fraction = NAN;
    lr_schedule_init(&s, &e);
    expect("no warmup: first update at peak", lr_at(s, 0), 1e-3);
    // stepping: one successful update advances by the global batch
    lr_schedule_init(&s, &c);
    lr_schedule_step(&s, 8, 0);
    expect("step(8) from 0 with warmup 80", lr_schedule_get(&s), 6e-4 * 8 / 80);
    test_token_decay();
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
