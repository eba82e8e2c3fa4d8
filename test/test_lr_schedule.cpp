// test_lr_schedule — the LR schedule (llmc/schedule.h) against hand-computed values at the
// boundaries: first update, warmup end, decay start and end, past the end; iteration- and
// sample-based units, warmup fraction, each decay style (KNOBS.md §3.3).
#include "llmc/schedule.h"

static int failures = 0;

static void expect(const char* what, double got, double want) {
    bool ok = std::fabs(got - want) <= 1e-15 * std::max(1.0, std::fabs(want));
    printf("%-4s %-48s got %.17g want %.17g\n", ok ? "ok" : "FAIL", what, got, want);
    if (!ok) failures++;
}

static double lr_at(LRSchedule s, int64_t num_steps) {
    s.num_steps = num_steps;
    return lr_schedule_get(&s);
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
    lr_schedule_step(&s, 8);
    expect("step(8) from 0 with warmup 80", lr_schedule_get(&s), 6e-4 * 8 / 80);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
