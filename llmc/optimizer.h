// optimizer.h — one optimizer step on the flat buffers: gradient reduction, global norm, the
// update-skipping rules, global-norm clipping, AdamW with decay groups from the parameter table
// (KNOBS.md §7, §8).
//
// Order, per iteration (Megatron native path, §7.1/§8.2), after the backward passes:
//   0. reduce: g /= F (--gradient-predivide-factor), sum over data-parallel ranks, g *= F/DP (§8.5)
//   1. loss scaling (when on, llmc/loss_scaler.h): [--fp16: round g to binary16], g /= scale, found_inf,
//      update the scaler — the caller does this and passes found_inf
//   2. norm = sqrt(Σ g²) over every gradient (fixed reduction order); num_zeros counted alongside
//   3. the update is skipped (weights, moments, step count and LR schedule stay as they were) when:
//        - the loss or a gradient is non-finite (found_inf or a non-finite norm)   counted as nan too
//        - norm > --skip-update-grad-norm-above (OPT's "rejecting batch", here in every precision)
//        - the loss, or the norm, is more than Z standard deviations above the mean of the last
//          --skip-update-window applied updates (--skip-update-loss-zscore / --skip-update-norm-zscore)
//      each prints one line saying why; all count as "number of skipped iterations"
//   4. clip: if --clip-grad > 0 and coeff = clip/(norm + 1e-6) < 1, every gradient is scaled by coeff
//   5. t += 1; AdamW with bias corrections for t; weight decay only on tensors the table marks decay
// The logged grad norm is the one from step 2 (unscaled, before clipping).
#pragma once
#include <cmath>
#include <string>

#include "llmc/cpu/adamw.h"
#include "llmc/flags.h"
#include "llmc/loss_scaler.h"
#include "llmc/model.h"

struct Optimizer {
    float* m;      // (P) first moment, canonical layout
    float* v;      // (P) second moment
    int64_t n;     // P
    int64_t step;  // t: successful updates so far (Adam bias correction)
};

struct StepResult {
    double grad_norm;   // before clipping
    int64_t num_zeros;
    bool skipped;       // no update was applied
    bool nonfinite;     // the loss or a gradient was NaN/Inf
};

// The state of the z-score rules: the losses and norms of the last applied updates (checkpointed).
struct UpdateGuard {
    RollingWindow loss, norm;
};

static inline void optimizer_init(Optimizer* o, int64_t n) {
    o->n = n;
    o->step = 0;
    o->m = (float*)backend_malloc((size_t)n * sizeof(float));
    o->v = (float*)backend_malloc((size_t)n * sizeof(float));
    backend_memset_zero(o->m, (size_t)n * sizeof(float));
    backend_memset_zero(o->v, (size_t)n * sizeof(float));
}

static inline void optimizer_reset(Optimizer* o) {
    o->step = 0;
    backend_memset_zero(o->m, (size_t)o->n * sizeof(float));
    backend_memset_zero(o->v, (size_t)o->n * sizeof(float));
}

static inline void optimizer_free(Optimizer* o) {
    backend_free(o->m);
    backend_free(o->v);
}

static inline void update_guard_init(UpdateGuard* g, const Config* c) {
    rolling_init(&g->loss, c->skip_update_window);
    rolling_init(&g->norm, c->skip_update_window);
}

// Step 0: the data-parallel mean of the gradients with the pre-divide split (KNOBS §8.5). `sum`
// adds the buffers of all DP ranks in place (identity on one process). The net factor is 1/DP;
// F only decides how much of it is applied before the sum (overflow/underflow control under fp16).
template <typename SumFn> static inline void grad_reduce(float* g, int64_t n, double predivide, int dp, SumFn sum) {
    if (predivide != 1.0) grad_scale(g, n, (float)(1.0 / predivide));
    sum(g, n);
    if (predivide != (double)dp) grad_scale(g, n, (float)(predivide / dp));
}

// Step 3: the rules that reject an update. Returns "" to go ahead, else the line to print.
static inline std::string update_guard_check(const UpdateGuard* g, const Config* c, int64_t iteration, double loss, double norm) {
    char buf[256];
    if (c->skip_update_grad_norm_above > 0 && norm > c->skip_update_grad_norm_above) {
        snprintf(buf, sizeof buf, "iteration %lld: update skipped, grad norm %.6g > --skip-update-grad-norm-above %g (batch rejected)",
                 (long long)iteration, norm, c->skip_update_grad_norm_above);
        return buf;
    }
    double z;
    if (c->skip_update_loss_zscore > 0 && rolling_zscore(&g->loss, loss, &z) && z > c->skip_update_loss_zscore)
        return rolling_describe_skip(&g->loss, iteration, "loss", loss, z, c->skip_update_loss_zscore);
    if (c->skip_update_norm_zscore > 0 && rolling_zscore(&g->norm, norm, &z) && z > c->skip_update_norm_zscore)
        return rolling_describe_skip(&g->norm, iteration, "grad norm", norm, z, c->skip_update_norm_zscore);
    return "";
}

// Steps 2-5. found_inf: the loss scaler's verdict on the gradients (false when scaling is off).
static inline StepResult optimizer_step(Optimizer* o, GPT<float>* model, UpdateGuard* guard, const Config* c, int64_t iteration,
                                        double lr, double loss, bool found_inf) {
    StepResult r = {0, 0, false, false};
    r.grad_norm = std::sqrt(grad_sumsq(model->grads, o->n, &r.num_zeros));
    if (found_inf || !std::isfinite(r.grad_norm) || !std::isfinite(loss)) {
        r.skipped = r.nonfinite = true;
        return r;
    }
    std::string why = update_guard_check(guard, c, iteration, loss, r.grad_norm);
    if (!why.empty()) {
        printf("%s\n", why.c_str());
        r.skipped = true;
        return r;
    }
    rolling_push(&guard->loss, loss);
    rolling_push(&guard->norm, r.grad_norm);
    if (c->clip_grad > 0) {
        double coeff = c->clip_grad / (r.grad_norm + 1e-6);
        if (coeff < 1.0) grad_scale(model->grads, o->n, (float)coeff);
    }
    o->step++;
    // 1 - β^t in double, then rounded once (in float it cancels: 1.3e-5 relative error at t=1, β=0.999)
    float bc1 = (float)(1.0 - std::pow(c->adam_beta1, (double)o->step));
    float bc2 = (float)(1.0 - std::pow(c->adam_beta2, (double)o->step));
    for (int id = 0; id < NUM_PARAMS; id++) {
        const ParamTensor* t = &model->table.t[id];
        int64_t off = t->offset_canonical;
        adamw_update(model->params + off, model->grads + off, o->m + off, o->v + off, t->numel, (float)lr,
                     (float)c->adam_beta1, (float)c->adam_beta2, (float)c->adam_eps,
                     t->decay ? (float)c->weight_decay : 0.0f, bc1, bc2);
    }
    return r;
}
