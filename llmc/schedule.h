// schedule.h — the schedule knobs: what each iteration's learning rate, global batch and sequence
// length are, and which iterations are skipped. Every function here is pure in the counters the
// trainer owns (samples, tokens, iteration), so a resumed run recomputes the same values.
//   LRSchedule   Megatron-DeepSpeed AnnealingLR, optionally decaying over tokens   (docs/knobs.md#learning-rate-schedule)
//   RampUp       --rampup-batch-size START INCR SAMPLES                             (docs/knobs.md#batch-size-ramp-up)
//   Curriculum   sequence-length curriculum learning (DeepSpeed legacy CL)          (docs/knobs.md#curriculum-learning)
//   SkipRanges   --skip-train-iteration-range A-B ...                               (docs/knobs.md#skipping-iterations)
//
// LR schedule. Units: the schedule counts SAMPLES. Each successful update advances it by the global
// batch size; an iteration whose update was skipped (non-finite gradients) does not advance it (docs/knobs.md#learning-rate-schedule).
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
// log line printed the next iteration's; see docs/training.md).
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
    // Token-based decay (docs/knobs.md#learning-rate-schedule, --lr-decay-tokens; 0 = off). Warmup stays in samples on purpose: the
    // curriculum authors found token-based warmup slowed it down under short sequences (docs/knobs.md#curriculum-learning).
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
// the token decay runs from warmup_tokens = 0, as in the reference (docs/knobs.md#learning-rate-schedule).
static inline void lr_schedule_capture_warmup_tokens(LRSchedule* s) {
    if (s->decay_tokens > 0 && s->warmup_steps > 0 && (double)s->num_steps == s->warmup_steps)
        s->warmup_tokens = s->num_tokens;
}

// One successful update of `increment` samples. `tokens_before` is the consumed-token count BEFORE
// this iteration's tokens are added: Megatron passes args.consumed_train_tokens, which train() only
// updates after train_step returns. A skipped update does not step, but its tokens still count, so
// under token decay the next step jumps over them (docs/knobs.md#learning-rate-schedule).
static inline void lr_schedule_step(LRSchedule* s, int64_t increment, int64_t tokens_before) {
    s->num_tokens = tokens_before;
    s->num_steps += increment;
    lr_schedule_capture_warmup_tokens(s);
}

// Resume (docs/knobs.md#resuming-a-schedule): num_steps, num_tokens and warmup_tokens always come from the checkpoint;
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
    s->warmup_steps = lr_check_and_set(s->warmup_steps, ckpt->warmup_steps, "warmup samples", c);
    s->decay_steps = lr_check_and_set(s->decay_steps, ckpt->decay_steps, "decay samples (the schedule's length)", c);
    s->style = (int)lr_check_and_set((double)s->style, (double)ckpt->style, "decay style", c, true);
    s->num_steps = ckpt->num_steps;
    s->num_tokens = ckpt->num_tokens;
    s->warmup_tokens = ckpt->warmup_tokens;
    // Megatron's load_state_dict ends with step(num_steps, num_tokens), whose get_lr may capture again
    // (only if an overridden warmup now ends exactly at num_steps).
    lr_schedule_capture_warmup_tokens(s);
}

// ---- strict parsing of the multi-value knobs ----------------------------------------------------
// The flag parser keeps multi-value flags as one space-joined string; these split and read it.
// Counts are digits only (no sign, no junk, at most 18 digits so they cannot overflow int64):
// `atoi` turning "16x" into 16 is how a typo becomes a different run.

static inline std::vector<std::string> schedule_split_words(const std::string& s) {
    std::vector<std::string> words;
    std::istringstream in(s);
    for (std::string w; in >> w;) words.push_back(w);
    return words;
}

static inline bool schedule_parse_count(const std::string& w, int64_t* out) {
    if (w.empty() || w.size() > 18) return false;
    int64_t v = 0;
    for (char ch : w) {
        if (ch < '0' || ch > '9') return false;
        v = v * 10 + (ch - '0');
    }
    *out = v;
    return true;
}

static inline std::vector<int64_t> schedule_parse_counts(const std::string& s, const char* flag) {
    std::vector<int64_t> v;
    for (const std::string& w : schedule_split_words(s)) {
        int64_t x;
        if (!schedule_parse_count(w, &x)) keel_usage_error("--%s: '%s' is not a non-negative integer", flag, w.c_str());
        v.push_back(x);
    }
    return v;
}

// Whether the user changed a flag from its default: the flag table knows both values.
static inline bool schedule_flag_given(const Config* c, const Flag* f) {
    Config defaults;
    return flag_value_string(c, f) != flag_value_string(&defaults, f);
}

// ---- batch-size ramp-up (docs/knobs.md#batch-size-ramp-up, Megatron RampupBatchsizeNumMicroBatches) ------------------
// The global batch starts at START and grows by INCR every SAMPLES/num_increments consumed samples,
// num_increments = (GBS - START)/INCR, reaching GBS after SAMPLES samples:
//   batch(consumed) = consumed > SAMPLES ? GBS : START + floor(consumed / samples_per_increment)·INCR
// It is a function of consumed samples only, so a resumed run is on the same rung. Megatron checks
// each rung's divisibility by micro_batch·dp when it is reached (possibly days in); keel checks START
// and INCR up front, which makes every rung divisible. START == GBS (a division by zero in Megatron)
// means no ramp: every batch is GBS.

struct RampUp {
    bool enabled;
    int64_t start, incr, ramp_samples;  // START INCR SAMPLES of --rampup-batch-size
    int64_t global_batch;               // GBS, the batch after the ramp
    double samples_per_increment;       // SAMPLES / num_increments, a float as in Megatron (0: no ramp)
};

// Call after config_validate (which fills the default --global-batch-size).
static inline void rampup_init(RampUp* r, const Config* c, int dp_size) {
    *r = RampUp{};
    r->global_batch = c->global_batch_size;
    r->enabled = !c->rampup_batch_size.empty();
    if (!r->enabled) return;
    std::vector<std::string> w = schedule_split_words(c->rampup_batch_size);
    if (w.size() != 3 || !schedule_parse_count(w[0], &r->start) || !schedule_parse_count(w[1], &r->incr) ||
        !schedule_parse_count(w[2], &r->ramp_samples))
        keel_usage_error("--rampup-batch-size: expected three non-negative integers START INCR SAMPLES (got '%s')",
                         c->rampup_batch_size.c_str());
    if (c->train_samples <= 0)
        keel_usage_error("--rampup-batch-size needs a sample-based run: give --train-samples, not --train-iters");
    if (r->start <= 0) keel_usage_error("--rampup-batch-size: START must be > 0");
    if (r->incr <= 0) keel_usage_error("--rampup-batch-size: INCR must be > 0");
    long long gbs = r->global_batch, start = r->start, incr = r->incr;
    if (start > gbs) keel_usage_error("--rampup-batch-size: START %lld exceeds --global-batch-size %lld", start, gbs);
    if ((gbs - start) % incr != 0)
        keel_usage_error("--rampup-batch-size: --global-batch-size %lld - START %lld = %lld is not a multiple of INCR %lld",
                         gbs, start, gbs - start, incr);
    long long unit = c->micro_batch_size * dp_size;  // samples of one micro-batch on every DP rank
    const char* names[2] = {"START", "INCR"};
    long long values[2] = {start, incr};
    for (int i = 0; i < 2; i++)
        if (values[i] % unit != 0)
            keel_usage_error("--rampup-batch-size: %s %lld is not divisible by --micro-batch-size %lld x data-parallel size %d = %lld",
                             names[i], values[i], (long long)c->micro_batch_size, dp_size, unit);
    int64_t num_increments = (gbs - start) / incr;
    if (num_increments > 0 && r->ramp_samples == 0)
        keel_usage_error("--rampup-batch-size: SAMPLES must be > 0 to ramp from START %lld to --global-batch-size %lld", start, gbs);
    r->samples_per_increment = num_increments > 0 ? (double)r->ramp_samples / (double)num_increments : 0.0;
}

// The global batch of the iteration that starts with `consumed_samples` consumed. The rung index is
// floored, so a rung changes at the first iteration whose pre-step count reaches k·samples_per_increment.
static inline int64_t rampup_global_batch(const RampUp* r, int64_t consumed_samples) {
    if (!r->enabled || consumed_samples > r->ramp_samples || r->samples_per_increment == 0) return r->global_batch;
    return r->start + (int64_t)((double)consumed_samples / r->samples_per_increment) * r->incr;
}

// Iterations for `train_samples` (Megatron update_train_iters): simulate the ramp up to the first
// iteration that starts past SAMPLES, then count whole GBS batches; a partial last batch is dropped.
// If train_samples ends inside the ramp the remainder is negative and Python's // floors it; keel
// keeps that rounding so both count the same iterations.
static inline int64_t rampup_train_iters(const RampUp* r, int64_t train_samples) {
    if (!r->enabled) return train_samples / r->global_batch;
    int64_t consumed = 0, iters = 0;
    while (consumed <= r->ramp_samples) {
        consumed += rampup_global_batch(r, consumed);
        iters++;
    }
    int64_t rest = train_samples - consumed, gbs = r->global_batch;
    return iters + (rest >= 0 ? rest / gbs : -((-rest + gbs - 1) / gbs));
}

// ---- curriculum learning by sequence length (docs/knobs.md#curriculum-learning, DeepSpeed CurriculumScheduler) ---------
// Iteration t (1-based, the one about to run) trains on samples truncated to curriculum_seqlen(t):
//   fixed_root(t; r):  d = floor((t/T)^(1/r)·(max - min) + min);  d -= d % step;  d = min(d, max)
//   fixed_linear:      fixed_root with r = 1
//   fixed_discrete:    t > steps[-1] ? seqlens[-1] : seqlens[first i with t <= steps[i]]
// DeepSpeed freezes the length once it reaches max ("update only while current < max"); every
// schedule here is non-decreasing in t (keel requires sorted discrete lists), so the plain function
// of t gives the same lengths, and resume needs no curriculum state, as in Megatron-DeepSpeed.

enum ClSchedule { CL_FIXED_LINEAR, CL_FIXED_ROOT, CL_FIXED_DISCRETE };
static const char* const CL_SCHEDULE_NAMES[] = {"fixed_linear", "fixed_root", "fixed_discrete"};

struct Curriculum {
    bool enabled;
    int schedule;                         // ClSchedule
    int64_t min_d, max_d;                 // first and last length (disabled: both --seq-length)
    int64_t step;                         // lengths are multiples of this (fixed_linear/root)
    int64_t total_steps;                  // T: the iteration that reaches max_d (fixed_linear/root)
    double root_degree;                   // r (fixed_linear: 1)
    std::vector<int64_t> seqlens, steps;  // fixed_discrete: seqlens[i] through iteration steps[i]
};

static inline int cl_schedule_parse(const std::string& s) {
    for (int i = 0; i < 3; i++)
        if (s == CL_SCHEDULE_NAMES[i]) return i;
    keel_usage_error("--cl-schedule: '%s' is not one of fixed_linear|fixed_root|fixed_discrete", s.c_str());
}

// Every --cl-* flag must be used by the chosen schedule: a given flag that nothing reads is refused,
// not ignored (a knob that silently does nothing).
static inline void curriculum_check_flags(const Config* c, int schedule) {
    enum { LIN = 1 << CL_FIXED_LINEAR, ROOT = 1 << CL_FIXED_ROOT, DISC = 1 << CL_FIXED_DISCRETE };
    static const struct { const char* name; int schedules; } uses[] = {
        {"cl-min-seqlen", LIN | ROOT},  {"cl-max-seqlen", LIN | ROOT},  {"cl-difficulty-step", LIN | ROOT},
        {"cl-total-steps", LIN | ROOT}, {"cl-root-degree", ROOT},      {"cl-discrete-seqlens", DISC},
        {"cl-discrete-steps", DISC},
    };
    for (const auto& u : uses)
        if (!(u.schedules & (1 << schedule)) && schedule_flag_given(c, flag_find(u.name)))
            keel_usage_error("--%s does not apply to --cl-schedule %s", u.name, CL_SCHEDULE_NAMES[schedule]);
}

static inline void curriculum_init_discrete(Curriculum* cl, const Config* c) {
    cl->seqlens = schedule_parse_counts(c->cl_discrete_seqlens, "cl-discrete-seqlens");
    cl->steps = schedule_parse_counts(c->cl_discrete_steps, "cl-discrete-steps");
    if (cl->seqlens.empty() || cl->steps.empty())
        keel_usage_error("--cl-schedule fixed_discrete needs --cl-discrete-seqlens and --cl-discrete-steps");
    if (cl->seqlens.size() != cl->steps.size() + 1)
        keel_usage_error("--cl-discrete-seqlens: %zu lengths for %zu --cl-discrete-steps; it needs exactly one more",
                         cl->seqlens.size(), cl->steps.size());
    for (size_t i = 0; i < cl->seqlens.size(); i++) {
        long long d = cl->seqlens[i];
        if (d < 1 || d > c->seq_length)
            keel_usage_error("--cl-discrete-seqlens: %lld is outside [1, --seq-length %lld]", d, (long long)c->seq_length);
        if (i > 0 && d < cl->seqlens[i - 1])
            keel_usage_error("--cl-discrete-seqlens must be non-decreasing (%lld after %lld)", d, (long long)cl->seqlens[i - 1]);
    }
    for (size_t i = 0; i < cl->steps.size(); i++) {
        long long s = cl->steps[i];
        if (s < 1) keel_usage_error("--cl-discrete-steps: iterations are numbered from 1 (got %lld)", s);
        if (i > 0 && s <= cl->steps[i - 1])
            keel_usage_error("--cl-discrete-steps must be strictly increasing (%lld after %lld)", s, (long long)cl->steps[i - 1]);
    }
    cl->min_d = cl->seqlens.front();
    cl->max_d = cl->seqlens.back();
}

static inline void curriculum_init_root(Curriculum* cl, const Config* c) {
    long long min_d = c->cl_min_seqlen, max_d = c->cl_max_seqlen > 0 ? c->cl_max_seqlen : c->seq_length;
    long long step = c->cl_difficulty_step;
    if (max_d > c->seq_length) keel_usage_error("--cl-max-seqlen %lld exceeds --seq-length %lld", max_d, (long long)c->seq_length);
    if (min_d < 1 || min_d > max_d) keel_usage_error("--cl-min-seqlen %lld must be in [1, %lld] (the final length)", min_d, max_d);
    // The reference rounds every length down to a multiple of the step, the first one included, so
    // min 60 with step 8 would start at 56, and min 4 at 0 tokens. keel refuses such a config.
    if (min_d % step != 0) keel_usage_error("--cl-min-seqlen %lld is not a multiple of --cl-difficulty-step %lld", min_d, step);
    if (c->cl_total_steps <= 0)
        keel_usage_error("--cl-schedule %s needs --cl-total-steps > 0 (the iteration that reaches the final length)",
                         CL_SCHEDULE_NAMES[cl->schedule]);
    if (cl->schedule == CL_FIXED_ROOT && !(c->cl_root_degree > 0))
        keel_usage_error("--cl-schedule fixed_root needs --cl-root-degree > 0 (got %g)", c->cl_root_degree);
    cl->min_d = min_d;
    cl->max_d = max_d;
    cl->step = step;
    cl->total_steps = c->cl_total_steps;
    cl->root_degree = cl->schedule == CL_FIXED_ROOT ? c->cl_root_degree : 1.0;
}

static inline void curriculum_init(Curriculum* cl, const Config* c) {
    *cl = Curriculum{};
    cl->min_d = cl->max_d = c->seq_length;
    cl->enabled = c->curriculum_learning;
    if (!cl->enabled) {
        for (int i = 0; i < NUM_FLAGS; i++)
            if (strncmp(FLAGS[i].name, "cl-", 3) == 0 && schedule_flag_given(c, &FLAGS[i]))
                keel_usage_error("--%s needs --curriculum-learning", FLAGS[i].name);
        return;
    }
    cl->schedule = cl_schedule_parse(c->cl_schedule);
    curriculum_check_flags(c, cl->schedule);
    if (cl->schedule == CL_FIXED_DISCRETE) curriculum_init_discrete(cl, c);
    else curriculum_init_root(cl, c);
}

// The sequence length of global step t (1-based: Megatron passes args.iteration + 1).
static inline int64_t curriculum_seqlen(const Curriculum* cl, int64_t t) {
    if (!cl->enabled) return cl->max_d;
    if (cl->schedule == CL_FIXED_DISCRETE) {
        if (t > cl->steps.back()) return cl->seqlens.back();
        size_t i = 0;
        while (t > cl->steps[i]) i++;
        return cl->seqlens[i];
    }
    double x = std::pow((double)t / (double)cl->total_steps, 1.0 / cl->root_degree) * (double)(cl->max_d - cl->min_d) +
               (double)cl->min_d;
    // Past max + step the rounded length is above max, so the answer is max; returning early keeps
    // the int64 conversion in range when r < 1 makes (t/T)^(1/r) enormous.
    if (x >= (double)(cl->max_d + cl->step)) return cl->max_d;
    int64_t d = (int64_t)std::floor(x);
    d -= d % cl->step;
    return std::min(d, cl->max_d);
}

// ---- skipped iterations (docs/knobs.md#skipping-iterations) -----------------------------------------------------------
// --skip-train-iteration-range A-B C-D: 1-based inclusive ranges, sorted, overlapping ones merged
// (1-5 2-6 → 1-6; like Megatron-DeepSpeed, touching ranges 1-5 6-8 stay two). keel follows
// Megatron-LM's semantics, not MDS's: a skipped iteration consumes its whole global batch and
// advances the iteration and consumed counters (the trainer does that; this is the query).

struct SkipRanges {
    std::vector<std::pair<int64_t, int64_t>> ranges;  // (first, last) iteration, sorted, non-overlapping
};

static inline void skip_ranges_parse(SkipRanges* s, const std::string& spec) {
    std::vector<std::pair<int64_t, int64_t>> items;
    for (const std::string& w : schedule_split_words(spec)) {
        size_t dash = w.find('-');
        int64_t first = 0, last = 0;
        if (dash == std::string::npos || !schedule_parse_count(w.substr(0, dash), &first) ||
            !schedule_parse_count(w.substr(dash + 1), &last))
            keel_usage_error("--skip-train-iteration-range: skip train iterations should be specified as two numbers, "
                             "i.e. start-end (got '%s')", w.c_str());
        if (first < 1) keel_usage_error("--skip-train-iteration-range: iterations are numbered from 1 (got '%s')", w.c_str());
        if (last < first)
            keel_usage_error("--skip-train-iteration-range: end of skip range cannot be smaller than start of skip range (got '%s')",
                             w.c_str());
        items.push_back({first, last});
    }
    std::sort(items.begin(), items.end());
    s->ranges.clear();
    for (const auto& r : items) {
        if (!s->ranges.empty() && s->ranges.back().second >= r.first)
            s->ranges.back().second = std::max(s->ranges.back().second, r.second);
        else
            s->ranges.push_back(r);
    }
}

static inline bool skip_ranges_contains(const SkipRanges* s, int64_t iteration) {
    for (const auto& r : s->ranges)
        if (r.first <= iteration && iteration <= r.second) return true;
    return false;
}

// The merged ranges as the flag takes them ("1-6 9-10"; empty when none), for the start-up printout.
static inline std::string skip_ranges_string(const SkipRanges* s) {
    std::string out;
    for (const auto& r : s->ranges)
        out += (out.empty() ? "" : " ") + std::to_string(r.first) + "-" + std::to_string(r.second);
    return out;
}
