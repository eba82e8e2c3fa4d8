// spike.h — the spike autopilot (--spike-policy off|skip|rollback): what the logbooks' on-call
// engineer did at 3 a.m., done by the runtime (seeds: the 104B restarts with
// --skip-train-iteration-range, OPT's "roll back, skip the data, lower the LR").
//
// Detection. A rolling window of the last --spike-window APPLIED updates' loss and grad norm (the
// same RollingWindow as the --skip-update-*-zscore rules, llmc/loss_scaler.h). Iteration k is a
// spike when its loss (or grad norm, --spike-metric) is more than --spike-zscore population
// standard deviations above the window's mean. No verdict until the window is full. Non-finite
// steps are not spikes: they are the loss scaler's and the non-finite check's business.
//
// Policies, decided before iteration k's update is applied:
//   skip      the update is not applied (a skipped iteration, like --skip-update-loss-zscore).
//   rollback  the trainer restores its in-memory snapshot of iteration s (the last multiple of
//             --spike-snapshot-interval, or the run's start), then iterations s+1..k are consumed
//             unread — exactly a restart from a checkpoint of iteration s with
//             --skip-train-iteration-range s+1-k, which is what the tests compare it to. Iterations
//             k+1 .. k+--spike-lr-iters then run at lr × --spike-lr-factor.
// What a rollback keeps from the discarded timeline: its record (k, s), appended to the history
// below, and the lowered-LR window. Both live in TrainState and so in every later checkpoint
// (state.txt: spike.rollbacks, spike.lr_factor_through): a resumed run skips the same windows,
// applies the same factor and counts the same rollbacks; a rerun makes the same decisions because
// every input to them (losses, norms, windows) is bit-reproducible.
#pragma once
#include <cinttypes>
#include <string>
#include <vector>

#include "llmc/flags.h"
#include "llmc/loss_scaler.h"

struct SpikeRollback {
    int64_t detected;  // k: the spike's iteration
    int64_t restored;  // s: the snapshot's iteration; s+1..k are skipped
};

struct SpikeState {
    RollingWindow loss, norm;              // the detector's windows (applied updates only)
    int64_t lr_factor_through;             // iterations <= this run at lr × --spike-lr-factor (0: none)
    std::vector<SpikeRollback> rollbacks;  // the run's history, oldest first
};

struct SpikeVerdict {
    bool spike;
    const char* metric;  // "loss" | "grad norm"
    double value, z;
};

static inline void spike_init(SpikeState* s, const Config* c) {
    rolling_init(&s->loss, c->spike_window);
    rolling_init(&s->norm, c->spike_window);
    s->lr_factor_through = 0;
    s->rollbacks.clear();
}

// The detector's verdict on an iteration with this loss and (pre-clip) grad norm.
static inline SpikeVerdict spike_check(const SpikeState* s, const Config* c, double loss, double norm) {
    SpikeVerdict v = {false, "", 0, 0};
    if (c->spike_policy == "off") return v;
    double z;
    if (c->spike_metric != "grad-norm" && rolling_zscore(&s->loss, loss, &z) && z > c->spike_zscore) return {true, "loss", loss, z};
    if (c->spike_metric != "loss" && rolling_zscore(&s->norm, norm, &z) && z > c->spike_zscore) return {true, "grad norm", norm, z};
    return v;
}

// An applied update's values join the windows.
static inline void spike_push(SpikeState* s, double loss, double norm) {
    rolling_push(&s->loss, loss);
    rolling_push(&s->norm, norm);
}

// Inside a window a rollback skips (s+1..k of some record)?
static inline bool spike_skips(const SpikeState* s, int64_t iteration) {
    for (const SpikeRollback& r : s->rollbacks)
        if (iteration > r.restored && iteration <= r.detected) return true;
    return false;
}

static inline double spike_lr_factor(const SpikeState* s, const Config* c, int64_t iteration) {
    return iteration <= s->lr_factor_through ? c->spike_lr_factor : 1.0;
}

// state.txt form of the history: "k:s k:s ..." ("" when none).
static inline std::string spike_rollbacks_to_string(const SpikeState* s) {
    std::string t;
    char buf[64];
    for (const SpikeRollback& r : s->rollbacks) {
        snprintf(buf, sizeof buf, "%s%lld:%lld", t.empty() ? "" : " ", (long long)r.detected, (long long)r.restored);
        t += buf;
    }
    return t;
}

// Strict reader of that form; `what` names the checkpoint field in the error.
static inline void spike_rollbacks_from_string(SpikeState* s, const std::string& text, const char* what) {
    s->rollbacks.clear();
    for (size_t pos = 0; pos < text.size();) {
        size_t end = text.find(' ', pos);
        if (end == std::string::npos) end = text.size();
        std::string tok = text.substr(pos, end - pos);
        long long k, r;
        int used = 0;
        if (sscanf(tok.c_str(), "%lld:%lld%n", &k, &r, &used) != 2 || used != (int)tok.size() || r < 0 || r >= k)
            keel_die("%s: '%s' is not DETECTED:RESTORED with RESTORED < DETECTED (in '%s')", what, tok.c_str(), text.c_str());
        s->rollbacks.push_back({k, r});
        pos = end + 1;
    }
}

// The line printed (and the reason kept) when the detector fires, e.g.
//   spike autopilot: iteration 45: loss z-score 8.13 > 6 (loss 10.91, window of the last 50 updates)
static inline std::string spike_describe(const SpikeVerdict* v, const Config* c, int64_t iteration) {
    char buf[256];
    snprintf(buf, sizeof buf, "spike autopilot: iteration %lld: %s z-score %.3g > %g (%s %.6g, window of the last %lld updates)",
             (long long)iteration, v->metric, v->z, c->spike_zscore, v->metric, v->value, (long long)c->spike_window);
    return buf;
}
