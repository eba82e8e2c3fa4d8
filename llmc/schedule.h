// schedule.h — the schedule knobs: what each iteration's learning rate, global batch and sequence
// length are, and which iterations are skipped. Every function here is pure in the counters the
// trainer owns (samples, tokens, iteration), so a resumed run recomputes the same values.
//   LRSchedule   Megatron-DeepSpeed AnnealingLR, optionally decaying over tokens   (KNOBS.md §3)
//   RampUp       --rampup-batch-size START INCR SAMPLES                             (KNOBS.md §4)
//   Curriculum   sequence-length curriculum learning (DeepSpeed legacy CL)          (KNOBS.md §5)
//   SkipRanges   --skip-train-iteration-range A-B ...                               (KNOBS.md §6)
//
// LR schedule. Units: the schedule counts SAMPLES. Each successful update advances it by the global
// batch size; an iteration whose update was skipped (non-finite gradients) does not advance it (§3.3).
//   iteration-based run: warmup = lr_warmup_iters·GBS (or fraction·decay), decay = (lr_decay_iters or
//                        train_iters)·GBS
//   sample-based run:    warmup = lr_warmup_samples (or fraction·decay), decay = lr_decay_samples
//                        or train_samples
// lr(num_steps, num_tokens):
//   num_steps ≤ warmup (warmup > 0): max_lr · num_steps / warmup        (the first update runs at 0)
//   constant: max_lr
//   step decay:  num_steps > decay: min_lr;   else ratio = (num_steps - warmup)/(decay - warmup)
//   token decay (--lr-decay-tokens): num_tokens > decay_tokens: min_lr;
//                else ratio = (num_tokens - warmup_tokens)/(decay_tokens - warmup_tokens)
//   linear coeff = 1 - ratio, cosine coeff = (cos(π·ratio) + 1)/2;  lr = min_lr + coeff·(max_lr - min_lr)
// Iteration i's update uses lr(num_steps before its own step). keel logs that value (Megatron's
// log line printed the next iteration's; see README).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "llmc/flags.h"

enum LrDecayStyle { LR_DECAY_CONSTANT, LR_DECAY_LINEAR, LR_DECAY_COSINE };
static const char* const LR_DECAY_NAMES[] = {"constant", "linear", "cosine"};

struct LRSchedule {
    double max_lr, min_lr;
    double warmup_steps, decay_steps;   // in samples; a warmup fraction may leave warmup fractional, as in Megatron
    int style;                          // LrDecayStyle
    int64_t num_steps;                  // samples of the successful updates so far
    // Token-based decay (§3.3, --lr-decay-tokens; 0 = off). Warmup stays in samples on purpose: the
    // curriculum authors found token-based warmup slowed it down under short sequences (§5.4).
    double decay_tokens;
    int64_t warmup_tokens;              // tokens consumed when warmup ended (captured by lr_schedule_step)
    int64_t num_tokens;                 // tokens consumed before the last successful update's iteration
};

static inline int lr_decay_style_parse(const std::string& s) {
    for (int i = 0; i < 3; i++)
        if (s == LR_DECAY_NAMES[i]) return i;
    keel_usage_error("--lr-decay-style: '%s' is not one of constant|linear|cosine", s.c_str());
}

static inline void lr_schedule_init(LRSchedule* s, const Config* c) {
    s->max_lr = c->lr;
    s->min_lr = c->min_lr;
    s->style = lr_decay_style_parse(c->lr_decay_style);
    if (c->train_iters > 0) {
        s->decay_steps = (double)((c->lr_decay_iters > 0 ? c->lr_decay_iters : c->train_iters) * c->global_batch_size);
        s->warmup_steps = (double)(c->lr_warmup_iters * c->global_batch_size);
    } else {
        s->decay_steps = (double)(c->lr_decay_samples > 0 ? c->lr_decay_samples : c->train_samples);
        s->warmup_steps = (double)c->lr_warmup_samples;
    }
    if (!std::isnan(c->lr_warmup_fraction)) s->warmup_steps = c->lr_warmup_fraction * s->decay_steps;
    if (s->decay_steps <= 0) keel_usage_error("the LR decay span must be > 0 samples");
    if (s->warmup_steps >= s->decay_steps)
        keel_usage_error("LR warmup (%g samples) must be shorter than the decay span (%g samples)", s->warmup_steps,
                         s->decay_steps);
    s->num_steps = 0;
    s->decay_tokens = (double)c->lr_decay_tokens;  // the flag's bounds already refuse negatives; 0 is off
    s->warmup_tokens = 0;
    s->num_tokens = 0;
}

static inline double lr_schedule_get(const LRSchedule* s) {
    if (s->warmup_steps > 0 && s->num_steps <= s->warmup_steps)
        return s->max_lr * (double)s->num_steps / (double)s->warmup_steps;
    if (s->style == LR_DECAY_CONSTANT) return s->max_lr;
    double ratio;
    if (s->decay_tokens > 0) {
        // warmup_tokens == decay_tokens leaves an empty span (Megatron divides by zero): its end, min_lr.
        if ((double)s->num_tokens > s->decay_tokens || (double)s->warmup_tokens >= s->decay_tokens) return s->min_lr;
        ratio = (double)(s->num_tokens - s->warmup_tokens) / (s->decay_tokens - (double)s->warmup_tokens);
    } else {
        if (s->num_steps > s->decay_steps) return s->min_lr;
        ratio = ((double)s->num_steps - s->warmup_steps) / (s->decay_steps - s->warmup_steps);
    }
    double coeff = s->style == LR_DECAY_LINEAR ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
    return s->min_lr + coeff * (s->max_lr - s->min_lr);
}

// Megatron records warmup_tokens inside get_lr, and only when num_steps lands EXACTLY on the warmup
// end; keel's get stays pure, so the capture happens wherever Megatron's step() would call get_lr.
// If warmup is not a multiple of the global batch (176B: 183_105 / 2048) the capture never fires and
// the token decay runs from warmup_tokens = 0, as in the reference (§3.3).
static inline void lr_schedule_capture_warmup_tokens(LRSchedule* s) {
    if (s->decay_tokens > 0 && s->warmup_steps > 0 && (double)s->num_steps == s->warmup_steps)
        s->warmup_tokens = s->num_tokens;
}

// One successful update of `increment` samples. `tokens_before` is the consumed-token count BEFORE
// this iteration's tokens are added: Megatron passes args.consumed_train_tokens, which train() only
// updates after train_step returns. A skipped update does not step, but its tokens still count, so
// under token decay the next step jumps over them (§3.3).
static inline void lr_schedule_step(LRSchedule* s, int64_t increment, int64_t tokens_before) {
    s->num_tokens = tokens_before;
    s->num_steps += increment;
    lr_schedule_capture_warmup_tokens(s);
}

// Resume (KNOBS.md §3.5): num_steps, num_tokens and warmup_tokens always come from the checkpoint;
// decay_tokens always comes from the command line (it is not in Megatron's state_dict). The five
// hyper-parameters come from the command line if --override-lr-scheduler, from the checkpoint if
// --use-checkpoint-lr-scheduler, and must otherwise agree or the run aborts.
// `show` prints a value the way the user wrote it (numbers shortest-exact, styles by name).
static inline std::string lr_show(double v, bool is_style) {
    return is_style ? LR_DECAY_NAMES[(int)v] : double_repr(v);
}

static inline double lr_check_and_set(double cls, double ckpt, const char* name, const Config* c, bool is_style = false) {
    if (c->override_lr_scheduler) {
        printf(" > overriding %s value to %s\n", name, lr_show(cls, is_style).c_str());
        return cls;
    }
    if (!c->use_checkpoint_lr_scheduler && cls != ckpt)
        keel_die_code(KEEL_EXIT_USAGE,
                      "pass --override-lr-scheduler to use the command line's value, or --use-checkpoint-lr-scheduler to keep the checkpoint's",
                      "AnnealingLR: class input value %s and checkpoint value %s for %s do not match",
                      lr_show(cls, is_style).c_str(), lr_show(ckpt, is_style).c_str(), name);
    printf(" > using checkpoint value %s for %s\n", lr_show(ckpt, is_style).c_str(), name);
    return ckpt;
}

static inline void lr_schedule_resume(LRSchedule* s, const LRSchedule* ckpt, const Config* c) {
    s->max_lr = lr_check_and_set(s->max_lr, ckpt->max_lr, "learning rate", c);
    s->min_lr = lr_check_and_set(s->min_lr, ckpt->min_lr, "minimum learning rate", c);
    s->warmup_steps = lr_check_and_set(s->warmup_steps, ckpt->warmup_steps, "warmup iterations", c);
    s->decay_steps = lr_check_and_set(s->decay_steps, ckpt->decay_steps, "total number of iterations", c);
    s->style = (int)lr_check_and_set((double)s->style, (double)ckpt->style, "decay style", c, true);
    s->num_steps = ckpt->num_steps;
    s->num_tokens = ckpt->num_tokens;
    s->warmup_tokens = ckpt->warmup_tokens;
    // Megatron's load_state_dict ends with step(num_steps, num_tokens), whose get_lr may capture again
    // (only if an overridden warmup now ends exactly at num_steps).
    lr_schedule_capture_warmup_tokens(s);
}
