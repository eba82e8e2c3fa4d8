// loss_scaler.h — fp16 loss scaling (docs/knobs.md#mixed-precision-and-loss-scaling), fp16 emulation for the CPU trainer, and the
// rolling window behind the z-score update-skipping knobs (keel's own, generalising docs/knobs.md#rejecting-a-batch-by-its-gradient-norm).
//
// Contract, in the order one optimizer step uses these parts (Megatron-native order, docs/knobs.md#mixed-precision-and-loss-scaling):
//   1. backward on loss·scale; the gradients are reduced (fp32 accumulation, as Megatron's
//      --accumulate-allreduce-grads-in-fp32);
//   2. --fp16 on the CPU trainer: grad_round_fp16() rounds every scaled gradient to binary16, so
//      the scaler meets fp16's real range (overflow above 65504, underflow below 2^-24);
//   3. found_inf = grad_unscale_check(g, n, 1/scale): unscale by the scale the gradients were
//      multiplied with, and look for inf/NaN (torch's _amp_foreach_non_finite_check_and_unscale_);
//   4. loss_scaler_update(found_inf): the scaler's state machine moves, then
//   5. found_inf ? skip the update : clip and step. A skipped iteration does not advance the LR
//      schedule and is never pushed into a z-score window.
// DeepSpeed's fp16 optimizers update the scale first and unscale by the *updated* scale (docs/knobs.md#mixed-precision-and-loss-scaling,
// [inference]): on the step where the scale doubles, the gradients come out halved. keel follows
// Megatron native: unscale, check, update, then skip or step.
//
// Everything here is deterministic: the scaler is integer/power-of-two arithmetic, the gradient
// passes are element-wise (independent of the thread count, docs/internals.md#determinism), the inf flag is an OR
// (order-independent), and the z-score sums run oldest to newest in double.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/common.h"
#include "llmc/flags.h"

// ---- 1. the loss scaler (docs/knobs.md#mixed-precision-and-loss-scaling, Megatron `optimizer/grad_scaler.py`) -------------------------
//
// Three kinds, chosen as Megatron's get_megatron_optimizer chooses:
//   --loss-scale S > 0   static (ConstantGradScaler): scale S forever; allowed with --bf16 too.
//   --fp16, no S         dynamic (DynamicGradScaler, growth ×2, backoff ×0.5):
//       found_inf: growth_tracker = 0; hysteresis_tracker -= 1;
//                  if hysteresis_tracker <= 0: scale = max(scale·0.5, min_scale)
//       clean:     growth_tracker += 1;
//                  if growth_tracker == window: growth_tracker = 0; hysteresis_tracker = hysteresis;
//                                               scale *= 2
//     Note what this does and does not do: clean iterations do NOT restore the hysteresis (only a
//     growth does, unlike DeepSpeed's consecutive_hysteresis), so once the hysteresis is spent
//     every further overflow halves again, and the tracker keeps counting below zero. The growth
//     has no ceiling (an fp16 overflow brings the scale back down).
//   otherwise            disabled: scale 1, nothing moves (bf16/fp32 skip non-finite steps by the
//                        same check with scale 1, docs/internals.md#errors-and-safety).
// The state (scale, growth_tracker, hysteresis_tracker) is what a checkpoint saves, as Megatron's
// optimizer['grad_scaler'].
struct LossScaler {
    bool enabled;                 // false: no scaling (scale 1), never changes
    bool dynamic;                 // true: DynamicGradScaler; false with enabled: ConstantGradScaler
    double scale, min_scale;      // scale a power of two times the initial scale, ≥ min_scale
    int64_t growth_tracker;       // clean iterations since the last overflow or growth
    int64_t hysteresis_tracker;   // overflows left before a backoff; reset to `hysteresis` on growth
    int64_t window;               // --loss-scale-window: clean iterations before the scale doubles
    int64_t hysteresis;           // --hysteresis
};

// What one update did; only LOSS_SCALE_CLEAN is silent. Every LOSS_SCALE_OVERFLOW_* means the
// caller skips this iteration's update.
enum LossScaleEvent {
    LOSS_SCALE_CLEAN,                // finite gradients, scale unchanged
    LOSS_SCALE_GREW,                 // `window` clean iterations in a row: scale doubled
    LOSS_SCALE_OVERFLOW_HYSTERESIS,  // overflow absorbed by the hysteresis: scale kept
    LOSS_SCALE_OVERFLOW_BACKOFF,     // overflow: scale halved (or cut to min_scale)
    LOSS_SCALE_OVERFLOW_AT_MIN,      // overflow with the scale already at min_scale: it stays
    LOSS_SCALE_OVERFLOW_FIXED,       // overflow under a static scale or no scaling: nothing to adjust
};

static inline void loss_scaler_init(LossScaler* s, const Config* c) {
    s->enabled = c->fp16 || c->loss_scale > 0;
    s->dynamic = c->fp16 && !(c->loss_scale > 0);  // Megatron: `if args.loss_scale` is tested first
    s->scale = !s->enabled ? 1.0 : s->dynamic ? c->initial_loss_scale : c->loss_scale;
    s->min_scale = c->min_loss_scale;
    s->growth_tracker = 0;
    s->hysteresis_tracker = c->hysteresis;
    s->window = c->loss_scale_window;
    s->hysteresis = c->hysteresis;
}

static inline LossScaleEvent loss_scaler_update(LossScaler* s, bool found_inf) {
    if (!s->dynamic) return found_inf ? LOSS_SCALE_OVERFLOW_FIXED : LOSS_SCALE_CLEAN;
    if (found_inf) {
        s->growth_tracker = 0;
        s->hysteresis_tracker -= 1;
        if (s->hysteresis_tracker > 0) return LOSS_SCALE_OVERFLOW_HYSTERESIS;
        double before = s->scale;
        s->scale = std::fmax(s->scale * 0.5, s->min_scale);
        return s->scale == before ? LOSS_SCALE_OVERFLOW_AT_MIN : LOSS_SCALE_OVERFLOW_BACKOFF;
    }
    s->growth_tracker += 1;
    if (s->growth_tracker != s->window) return LOSS_SCALE_CLEAN;
    s->growth_tracker = 0;
    s->hysteresis_tracker = s->hysteresis;
    s->scale *= 2.0;
    return LOSS_SCALE_GREW;
}

// The one line a scaler event prints (docs/internals.md#logs): what happened and why. `before` is a
// copy of the scaler taken just before loss_scaler_update(), `after` the scaler after it. Returns
// "" for LOSS_SCALE_CLEAN (nothing fired). Scales print exactly (shortest round-trip text).
static inline std::string loss_scaler_describe(const LossScaler* before, const LossScaler* after,
                                               LossScaleEvent event, int64_t iteration) {
    std::string it = "iteration " + std::to_string(iteration) + ": ";
    std::string skipped = it + "gradient overflow (inf/NaN), update skipped; ";
    std::string from = double_repr(before->scale), to = double_repr(after->scale);
    switch (event) {
        case LOSS_SCALE_CLEAN: return "";
        case LOSS_SCALE_GREW:
            return it + "loss scale " + from + " -> " + to + " after " + std::to_string(after->window) +
                   " clean iterations";
        case LOSS_SCALE_OVERFLOW_HYSTERESIS:
            return skipped + "hysteresis " + std::to_string(before->hysteresis_tracker) + " -> " +
                   std::to_string(after->hysteresis_tracker) + ", loss scale stays " + to;
        case LOSS_SCALE_OVERFLOW_BACKOFF: return skipped + "loss scale " + from + " -> " + to;
        case LOSS_SCALE_OVERFLOW_AT_MIN: return skipped + "loss scale stays at --min-loss-scale " + to;
        case LOSS_SCALE_OVERFLOW_FIXED:
            return after->enabled ? skipped + "static loss scale " + to
                                  : it + "non-finite gradient (inf/NaN), update skipped";
    }
    return "";
}

// ---- 2. fp16 emulation for the CPU trainer --------------------------------------------------------
//
// The CPU trainer computes in fp32. Under --fp16 it rounds every scaled parameter gradient to the
// nearest binary16 value before unscaling, so the loss scaler faces fp16's range: |g·scale| ≥ 65520
// becomes inf (and the step is skipped), tiny values become binary16 subnormals or zero. This models
// overflow and underflow of the gradients the optimizer sees, not every rounding of a real fp16
// backward pass (activations' gradients stay fp32).
//


// ---- 3. the rolling window of the z-score update-skipping knobs ----------------------------------
//
// --skip-update-loss-zscore Z (and --skip-update-norm-zscore Z for the unscaled grad norm) skip an
// iteration's update when its value x lies more than Z standard deviations above the mean of the
// last --skip-update-window values: OPT's "reject the batch" (docs/knobs.md#rejecting-a-batch-by-its-gradient-norm) with a threshold that
// follows the run instead of a constant.
//   - The caller pushes x only for iterations whose update was APPLIED, after deciding, so a spike
//     (or a loss-scale overflow) never enters the window that judges the next iterations.
//   - No verdict until the window is full (the first `capacity` applied updates are never skipped).
//   - mean = Σx/n and the population std = sqrt(Σ(x-mean)²/n), both summed oldest to newest in
//     double: a fixed order, so the verdict is bit-reproducible and survives resume.
//   - std == 0 (a constant window): z = +inf if x > mean, else 0.  A NaN x gives a NaN z, which
//     never exceeds Z: non-finite values are the non-finite check's business (docs/internals.md#errors-and-safety).
// The window is checkpointed as text (rolling_to_string) so a resumed run decides identically.
struct RollingWindow {
    int64_t capacity;            // --skip-update-window
    std::vector<double> values;  // oldest first, at most capacity; finite
};

static inline void rolling_init(RollingWindow* w, int64_t capacity) {
    w->capacity = capacity;
    w->values.clear();
}

// Appends x, dropping the oldest value when full. O(capacity), fine at a few hundred values and
// keeps the storage in the order everything else reads it.
static inline void rolling_push(RollingWindow* w, double x) {
    if (!std::isfinite(x)) keel_die("rolling window: non-finite value %g pushed (only applied updates belong in it)", x);
    if (w->capacity <= 0) return;  // a window of no values keeps none
    if ((int64_t)w->values.size() >= w->capacity) w->values.erase(w->values.begin());
    w->values.push_back(x);
}

// Returns false (no verdict, *z untouched) until the window is full; else sets *z.
static inline bool rolling_zscore(const RollingWindow* w, double x, double* z) {
    if (w->capacity <= 0 || (int64_t)w->values.size() < w->capacity) return false;
    double n = (double)w->values.size(), sum = 0.0, sumsq = 0.0;
    for (double v : w->values) sum += v;
    double mean = sum / n;
    for (double v : w->values) sumsq += (v - mean) * (v - mean);
    double std_dev = std::sqrt(sumsq / n);
    if (std_dev == 0.0) *z = x > mean ? INFINITY : 0.0;
    else *z = (x - mean) / std_dev;
    return true;
}

// The line the knob prints when it fires, e.g.
//   iteration 812: update skipped, loss z-score 7.3 > 6 (loss 4.913, window of the last 100 updates)
static inline std::string rolling_describe_skip(const RollingWindow* w, int64_t iteration, const char* quantity,
                                                double x, double z, double threshold) {
    char buf[256];
    snprintf(buf, sizeof buf, "iteration %lld: update skipped, %s z-score %.3g > %g (%s %.6g, window of the last %lld updates)",
             (long long)iteration, quantity, z, threshold, quantity, x, (long long)w->capacity);
    return buf;
}

// A new capacity keeps the newest values (a resume may shorten --skip-update-window).
static inline void rolling_resize(RollingWindow* w, int64_t capacity) {
    int64_t extra = (int64_t)w->values.size() - capacity;
    if (extra > 0) w->values.erase(w->values.begin(), w->values.begin() + extra);
    w->capacity = capacity;
}

// Space-separated shortest round-trip text of the values, oldest first ("" when empty).
static inline std::string rolling_to_string(const RollingWindow* w) {
    std::string s;
    for (size_t i = 0; i < w->values.size(); i++) {
        if (i) s += ' ';
        s += double_repr(w->values[i]);
    }
    return s;
}

// Reads rolling_to_string's text back into w (capacity unchanged). Strict: tokens separated by
// exactly one space, each a plain decimal number ([0-9+-.eE] only: no hex, inf or nan) read whole
// and finite, and no more values than the capacity. Anything else dies naming `what` (the
// checkpoint field), since a window silently read wrong would change which updates get skipped.
static inline void rolling_from_string(RollingWindow* w, const std::string& s, const char* what) {
    std::vector<double> values;
    size_t pos = 0;
    while (!s.empty()) {
        size_t end = s.find(' ', pos);
        if (end == std::string::npos) end = s.size();
        std::string tok = s.substr(pos, end - pos);
        if (tok.empty() || tok.find_first_not_of("0123456789+-.eE") != std::string::npos)
            keel_die("%s: '%s' is not a number (in '%s')", what, tok.c_str(), s.c_str());
        char* stop = nullptr;
        double v = strtod(tok.c_str(), &stop);
        if (*stop != '\0' || !std::isfinite(v)) keel_die("%s: '%s' is not a finite number (in '%s')", what, tok.c_str(), s.c_str());
        values.push_back(v);
        if (end == s.size()) break;
        pos = end + 1;
    }
    if ((int64_t)values.size() > w->capacity)
        keel_die("%s: %zu values but the window holds %lld (--skip-update-window)", what, values.size(), (long long)w->capacity);
    w->values = values;
}
