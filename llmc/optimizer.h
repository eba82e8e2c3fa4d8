// optimizer.h — one optimizer step on the flat buffers: global norm, non-finite check, global-norm
// clipping, AdamW with decay groups from the parameter table (KNOBS.md §8).
//
// Order, per iteration (Megatron native path, §7.1/§8.2):
//   1. norm = sqrt(Σ g²) over every gradient (fixed reduction order); num_zeros counted alongside
//   2. non-finite loss or norm → the update is skipped (counted as skipped and nan); the weights,
//      the moments, the step count and the LR schedule stay as they were (DESIGN §10)
//   3. clip: if --clip-grad > 0 and coeff = clip/(norm + 1e-6) < 1, every gradient is scaled by coeff
//   4. t += 1; AdamW with bias corrections for t; weight decay only on tensors the table marks decay
// The logged grad norm is the one from step 1 (before clipping).
#pragma once
#include <cmath>

#include "llmc/cpu/adamw.h"
#include "llmc/flags.h"
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

static inline void optimizer_init(Optimizer* o, int64_t n) {
    o->n = n;
    o->step = 0;
    o->m = (float*)backend_malloc((size_t)n * sizeof(float));
    o->v = (float*)backend_malloc((size_t)n * sizeof(float));
    backend_memset_zero(o->m, (size_t)n * sizeof(float));
    backend_memset_zero(o->v, (size_t)n * sizeof(float));
}

static inline void optimizer_free(Optimizer* o) {
    backend_free(o->m);
    backend_free(o->v);
}

static inline StepResult optimizer_step(Optimizer* o, GPT<float>* model, const Config* c, double lr, double loss) {
    StepResult r = {0, 0, false, false};
    r.grad_norm = std::sqrt(grad_sumsq(model->grads, o->n, &r.num_zeros));
    if (!std::isfinite(r.grad_norm) || !std::isfinite(loss)) {
        r.skipped = r.nonfinite = true;
        return r;
    }
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
