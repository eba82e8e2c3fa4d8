// optimizer.h — one optimizer step on the flat buffers: gradient reduction, global norm, the
// update-skipping rules, global-norm clipping, then Adam: AdamW with fp32 state (--optimizer adam)
// or bitsandbytes' blockwise 8-bit Adam (--optimizer adam8bit), with decay groups from the
// parameter table (KNOBS.md §7, §8, §9).
//
// Order, per iteration (Megatron native path, §7.1/§8.2), after the backward passes:
//   0. reduce: g /= F (--gradient-predivide-factor), sum over data-parallel ranks, g *= F/DP (§8.5)
//   1. loss scaling (when on, llmc/loss_scaler.h): [--fp16: round g to binary16], g /= scale, found_inf,
//      update the scaler — the caller does this and passes found_inf
//   2. norm = sqrt(Σ g²), summed per unit in fixed chunks, then over units in table order (below);
//      num_zeros counted alongside
//   3. the update is skipped (weights, moments, step count and LR schedule stay as they were) when:
//        - the loss or a gradient is non-finite (found_inf or a non-finite norm)   counted as nan too
//        - norm > --skip-update-grad-norm-above (OPT's "rejecting batch", here in every precision)
//        - the loss, or the norm, is more than Z standard deviations above the mean of the last
//          --skip-update-window applied updates (--skip-update-loss-zscore / --skip-update-norm-zscore)
//      each prints one line saying why; all count as "number of skipped iterations"
//   4. clip: if --clip-grad > 0 and coeff = clip/(norm + 1e-6) < 1, every gradient is scaled by coeff
//   5. t += 1; the Adam step of the chosen optimizer for every unit, weight decay only on tensors the
//      table marks decay
// The logged grad norm is the one from step 2 (unscaled, before clipping).
//
// Units. Optimizer state is kept per "unit": a global tensor of the table, or one layer's slice of
// a per-layer tensor — exactly what PyTorch (and so bitsandbytes) sees as one parameter. Quantization
// blocks, the 32-bit/8-bit choice and percentile-clipping statistics are per unit, so keel's 8-bit
// Adam makes the same decisions as bitsandbytes on the same model. The grad norm is also summed per
// unit (GRAD_CHUNK chunks relative to the unit's start), so a ZeRO shard that starts on a unit-relative
// chunk boundary (which is also a block boundary) can contribute its chunks' partial sums and get the
// same bits as one process.
//
// State layout (canonical; also the checkpoint's optimizer.bin payload, byte for byte):
//   m32, v32      fp32 (n32)      moments of the fp32 units, in unit order
//   absmax_m, _v  fp32 (nblocks)  per-block scale of the 8-bit units, in unit then block order
//   pclip_hist    fp32 (units × 100)  ‖g‖² history for percentile clipping (adam8bit only)
//   code_m, _v    uint8 (n8)      8-bit codes of the 8-bit units, in unit order
// Under --optimizer adam every unit is fp32 and the payload is m then v over the canonical buffer.
// Under adam8bit a unit keeps fp32 state when it has fewer than --adam8bit-min-size elements, or is
// the word embedding under --stable-embedding (bitsandbytes' 32-bit override for StableEmbedding —
// which in Megatron-DeepSpeed's integration never took effect, KNOBS §2.3; here it does).
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "llmc/cpu/adam8bit.h"
#include "llmc/cpu/adamw.h"
#include "llmc/flags.h"
#include "llmc/loss_scaler.h"
#include "llmc/model.h"

enum OptimizerType { OPTIMIZER_ADAM, OPTIMIZER_ADAM8BIT };

struct OptUnit {
    int id, layer;              // table tensor; layer (0 for a global tensor)
    int64_t offset_canonical;   // first element in the flat parameter buffer
    int64_t numel;
    bool q8;                    // 8-bit state (else fp32 m, v)
    int64_t offset_state;       // into m32/v32 (fp32 unit) or code_m/code_v (8-bit unit)
    int64_t offset_block;       // into absmax_m/absmax_v (8-bit unit)
};

struct Optimizer {
    OptimizerType type;
    int block_size;             // 8-bit quantization block
    int64_t n;                  // parameters covered (P)
    int64_t step;               // t: successful updates so far (Adam bias correction)
    std::vector<OptUnit> units;
    int64_t n32, n8, nblocks;
    uint8_t* state;             // the whole state, canonical layout (above); state_bytes long
    size_t state_bytes;
    float* m32;                 // (n32)
    float* v32;                 // (n32)
    float* absmax_m;            // (nblocks)
    float* absmax_v;            // (nblocks)
    float* pclip_hist;          // (units × PCLIP_HISTORY), adam8bit only
    uint8_t* code_m;            // (n8)
    uint8_t* code_v;            // (n8)
    Adam8bitMaps* maps;         // quantization maps and their search tables (adam8bit only)
    std::vector<double> unit_sumsq;  // scratch: this step's Σ g² per unit
};

struct StepResult {
    double grad_norm;         // before clipping
    int64_t num_zeros;
    bool skipped;             // no update was applied
    bool nonfinite;           // the loss or a gradient was NaN/Inf
    int64_t pclip_units;      // units whose gradient percentile clipping scaled down this step
};

// The state of the z-score rules: the losses and norms of the last applied updates (checkpointed).
struct UpdateGuard {
    RollingWindow loss, norm;
};

static inline bool optimizer_unit_is_8bit(const Config* c, int id, int64_t numel) {
    if (c->optimizer != "adam8bit") return false;
    if (id == P_WTE && c->stable_embedding) return false;  // StableEmbedding: 32-bit state (KNOBS §2.2)
    return numel >= c->adam8bit_min_size;
}

// Zero moments: fp32 zeros, absmax 0 with the codes of 0 (which read back as exactly 0).
static inline void optimizer_reset(Optimizer* o) {
    o->step = 0;
    backend_memset_zero(o->state, o->state_bytes);
    if (o->n8) {
        std::vector<uint8_t> zm((size_t)o->n8, o->maps->zero_m), zv((size_t)o->n8, o->maps->zero_v);
        backend_copy_to_device(o->code_m, zm.data(), zm.size());
        backend_copy_to_device(o->code_v, zv.data(), zv.size());
    }
}

// Units from the table; state allocated in the canonical layout and zeroed.
static inline void optimizer_init(Optimizer* o, const ParamTable* pt, const Config* c) {
    o->type = c->optimizer == "adam8bit" ? OPTIMIZER_ADAM8BIT : OPTIMIZER_ADAM;
    o->block_size = (int)c->adam8bit_block_size;
    o->n = pt->total;
    o->step = 0;
    o->units.clear();
    o->n32 = o->n8 = o->nblocks = 0;
    for (int id = 0; id < NUM_PARAMS; id++) {
        const ParamTensor* t = &pt->t[id];
        if (t->numel == 0) continue;
        int64_t per = t->per_layer ? t->rows * t->cols : t->numel, layers = t->numel / per;
        for (int64_t l = 0; l < layers; l++) {
            OptUnit u = {id, (int)l, t->offset_canonical + l * per, per, optimizer_unit_is_8bit(c, id, per), 0, 0};
            if (u.q8) {
                u.offset_state = o->n8;
                u.offset_block = o->nblocks;
                o->n8 += per;
                o->nblocks += (per + o->block_size - 1) / o->block_size;
            } else {
                u.offset_state = o->n32;
                o->n32 += per;
            }
            o->units.push_back(u);
        }
    }
    int64_t hist = o->type == OPTIMIZER_ADAM8BIT ? (int64_t)o->units.size() * PCLIP_HISTORY : 0;
    int64_t floats = 2 * o->n32 + 2 * o->nblocks + hist;
    o->state_bytes = (size_t)floats * sizeof(float) + (size_t)o->n8 * 2;
    o->state = (uint8_t*)backend_malloc(o->state_bytes);
    float* f = (float*)o->state;
    o->m32 = f;
    o->v32 = f + o->n32;
    o->absmax_m = f + 2 * o->n32;
    o->absmax_v = o->absmax_m + o->nblocks;
    o->pclip_hist = hist ? o->absmax_v + o->nblocks : nullptr;
    o->code_m = o->state + (size_t)floats * sizeof(float);
    o->code_v = o->code_m + o->n8;
    o->maps = nullptr;
    if (o->type == OPTIMIZER_ADAM8BIT) {
        o->maps = new Adam8bitMaps;
        adam8bit_maps_init(o->maps);
    }
    o->unit_sumsq.assign(o->units.size(), 0.0);
    optimizer_reset(o);
}

static inline void optimizer_free(Optimizer* o) {
    backend_free(o->state);
    delete o->maps;
}

// What a checkpoint must match to hand its optimizer state to this run: "adam", or
// "adam8bit block B: wte 32, wpe 8, ..." (the bits of every tensor's units).
static inline std::string optimizer_layout(const Optimizer* o, const ParamTable* pt) {
    if (o->type == OPTIMIZER_ADAM) return "adam";
    std::string s = "adam8bit block " + std::to_string(o->block_size) + ":";
    int last = -1;
    for (const OptUnit& u : o->units) {
        if (u.id == last) continue;
        last = u.id;
        s += std::string(last == o->units[0].id ? " " : ", ") + pt->t[u.id].name + (u.q8 ? " 8" : " 32");
    }
    return s;
}

// The start-up memory line: bytes of optimizer state per parameter, and what keeps 32-bit state.
static inline std::string optimizer_describe(const Optimizer* o, const ParamTable* pt, const Config* c) {
    char buf[512];
    double per = (double)o->state_bytes / (double)o->n, mb = (double)o->state_bytes / 1048576.0;
    if (o->type == OPTIMIZER_ADAM) {
        snprintf(buf, sizeof buf, "optimizer: adam, fp32 m and v | state %.2f bytes/parameter (%.1f MiB)", per, mb);
        return buf;
    }
    std::string kept;  // the tensors with 32-bit state, and why
    for (int id = 0; id < NUM_PARAMS; id++) {
        bool fp32 = false;
        for (const OptUnit& u : o->units) fp32 = fp32 || (u.id == id && !u.q8);
        if (!fp32) continue;
        kept += (kept.empty() ? "" : ", ") + std::string(pt->t[id].name);
        if (id == P_WTE && c->stable_embedding) kept += " (--stable-embedding)";
    }
    snprintf(buf, sizeof buf,
             "optimizer: adam8bit, block %d, min size %lld | 8-bit state on %lld of %lld parameters; 32-bit on %lld (%s) | "
             "state %.2f bytes/parameter (%.1f MiB; fp32 Adam: 8.00, %.1f MiB)",
             o->block_size, (long long)c->adam8bit_min_size, (long long)o->n8, (long long)o->n, (long long)o->n32,
             kept.empty() ? "none" : kept.c_str(),
             per, mb, (double)o->n * 8 / 1048576.0);
    return buf;
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

// Step 5 for one unit. coeff: the clipping factor applied to the gradients (1: none), which the
// percentile statistics fold in (they describe the gradient the optimizer sees, as in
// Megatron + bitsandbytes where clipping runs first): ‖coeff·g‖² = coeff²·Σ g².
static inline bool optimizer_update_unit(Optimizer* o, size_t ui, GPT<float>* model, const Config* c, double lr, double coeff) {
    const OptUnit* u = &o->units[ui];
    float* p = model->params + u->offset_canonical;
    const float* g = model->grads + u->offset_canonical;
    float wd = model->table.t[u->id].decay ? (float)c->weight_decay : 0.0f;
    // 1 - β^t in double, then rounded once (in float it cancels: 1.3e-5 relative error at t=1, β=0.999)
    double bc1 = 1.0 - std::pow(c->adam_beta1, (double)o->step), bc2 = 1.0 - std::pow(c->adam_beta2, (double)o->step);
    if (o->type == OPTIMIZER_ADAM) {
        adamw_update(p, g, o->m32 + u->offset_state, o->v32 + u->offset_state, u->numel, (float)lr, (float)c->adam_beta1,
                     (float)c->adam_beta2, (float)c->adam_eps, wd, (float)bc1, (float)bc2);
        return false;
    }
    AdamHyper h = {(float)lr, (float)c->adam_beta1, (float)c->adam_beta2, (float)c->adam_eps, wd, (float)bc1, (float)std::sqrt(bc2)};
    float s = percentile_clip_scale(o->pclip_hist + ui * PCLIP_HISTORY, o->step, o->unit_sumsq[ui] * coeff * coeff,
                                    (int)c->adam8bit_percentile_clipping);
    if (u->q8)
        adam8bit_update(p, g, o->code_m + u->offset_state, o->code_v + u->offset_state, o->absmax_m + u->offset_block,
                        o->absmax_v + u->offset_block, u->numel, o->block_size, o->maps, h, s);
    else
        adam32_update(p, g, o->m32 + u->offset_state, o->v32 + u->offset_state, u->numel, h, s);
    return s < 1.0f;
}

// Steps 2-5. found_inf: the loss scaler's verdict on the gradients (false when scaling is off).
static inline StepResult optimizer_step(Optimizer* o, GPT<float>* model, UpdateGuard* guard, const Config* c, int64_t iteration,
                                        double lr, double loss, bool found_inf) {
    StepResult r = {0, 0, false, false, 0};
    double sumsq = 0;
    for (size_t ui = 0; ui < o->units.size(); ui++) {
        o->unit_sumsq[ui] = grad_sumsq(model->grads + o->units[ui].offset_canonical, o->units[ui].numel, &r.num_zeros);
        sumsq += o->unit_sumsq[ui];
    }
    r.grad_norm = std::sqrt(sumsq);
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
    double coeff = 1.0;
    if (c->clip_grad > 0 && c->clip_grad / (r.grad_norm + 1e-6) < 1.0) {
        coeff = (float)(c->clip_grad / (r.grad_norm + 1e-6));
        grad_scale(model->grads, o->n, (float)coeff);
    }
    o->step++;
    for (size_t ui = 0; ui < o->units.size(); ui++) r.pclip_units += optimizer_update_unit(o, ui, model, c, lr, coeff);
    return r;
}
