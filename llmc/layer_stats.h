// layer_stats.h — per-layer gradient norm, weight norm and activation RMS (--log-layer-norms-interval).
//
// Why: OPT's logbook reads "gradients at early layers are much larger" — a spike often shows in a
// few layers' norms long before the global grad norm moves. Every N iterations the trainer puts
// these into the JSONL record (and TensorBoard):
//   layer_grad_norm[l]    ‖g‖₂ over layer l's tensors: the reduced, unscaled, pre-clip gradient of
//                         this iteration (the same Σg² per tensor the global grad norm adds up, so
//                         Σ_l layer² + embedding² + final_norm² = grad_norm² up to rounding)
//   layer_weight_norm[l]  ‖w‖₂ over layer l's tensors after this iteration's update (the weights a
//                         checkpoint of this iteration holds)
//   layer_act_rms[l]      sqrt(mean x²) of the residual stream leaving layer l, over every token and
//                         channel of the iteration's global batch (all micro-batches, all DP ranks),
//                         in the forward pass of this iteration (dropout included, as trained)
//   embedding_*           the same for the word/position embeddings and the embedding LayerNorm, and
//                         the residual stream entering layer 0. The word embedding is tied to the LM
//                         head, so its gradient has both contributions.
//   final_norm_*          the final LayerNorm (no activation entry: its output is not on the stream).
// Under pipeline parallelism each stage fills the entries of what it holds (units carry the model's
// layer numbers; the tied embedding's mirror copy on the last stage is left out) and the trainer
// adds the stages' vectors: every entry has exactly one owner, so the sums are the whole model's.
// Groups: index l < L a layer, L the embedding group, L + 1 the final LayerNorm. llmc/log.h writes
// them out: JSONL keys layer_grad_norm / layer_weight_norm / layer_act_rms (arrays of L),
// embedding_grad_norm / embedding_weight_norm / embedding_act_rms, final_norm_grad_norm /
// final_norm_weight_norm.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "llmc/backend.h"
#include "llmc/model.h"
#include "llmc/optimizer.h"

struct LayerStats {
    int L;
    std::vector<double> grad_sumsq, weight_sumsq;  // (L + 2): layers, embedding, final LayerNorm
    std::vector<double> act_sumsq;                 // (L + 1): stream entering layer 0, then leaving each layer
    double act_count;                              // elements behind each act_sumsq entry
};

// The group of a tensor unit: its layer, or the embedding / final-LayerNorm group.
static inline int layer_group(const ParamTable* pt, const OptUnit* u, int L) {
    if (pt->t[u->id].per_layer) return u->layer;
    return u->id == P_LNFW || u->id == P_LNFB ? L + 1 : L;
}

static inline void layer_stats_init(LayerStats* s, int L) {
    s->L = L;
    s->grad_sumsq.assign(L + 2, 0.0);
    s->weight_sumsq.assign(L + 2, 0.0);
    s->act_sumsq.assign(L + 1, 0.0);
    s->act_count = 0;
}

// Σg² per group from the optimizer's per-unit sums of this step (units in table order).
static inline void layer_stats_grads(LayerStats* s, const Optimizer* o, const ParamTable* pt) {
    std::fill(s->grad_sumsq.begin(), s->grad_sumsq.end(), 0.0);
    for (size_t i = 0; i < o->units.size(); i++)
        if (!o->units[i].mirror) s->grad_sumsq[layer_group(pt, &o->units[i], s->L)] += o->unit_sumsq[i];
}

// Σw² per group over the (whole, host) parameter buffer, unit by unit in table order.
static inline void layer_stats_weights(LayerStats* s, const Optimizer* o, const ParamTable* pt, const float* params) {
    std::fill(s->weight_sumsq.begin(), s->weight_sumsq.end(), 0.0);
    for (const OptUnit& u : o->units)
        if (!u.mirror) s->weight_sumsq[layer_group(pt, &u, s->L)] += sumsq_f64(params + u.offset_canonical, u.numel);
}

// Σx² of the residual stream of the forward pass just run on (B, T): out[0] the stream entering
// layer 0, out[1 + l] the stream leaving layer l (L + 1 values, added into out). A pipeline stage
// adds the entries of its own layers (and the first stage entry 0); the stages' vectors add up to
// the whole model's.
template <typename F> static inline void layer_stats_acts(const GPT<F>* m, int B, int T, double* out) {
    int L = gpt_stage_layers(&m->config), L0 = m->config.stage_layer_first, C = m->config.channels;
    size_t BT = (size_t)B * T, stride = (size_t)m->B * m->T * C;  // residual3 holds (L, Bmax, Tmax, C)
    if (m->config.stage_first) out[0] += sumsq_f64(m->acts.encoded, (int64_t)(BT * C));
    for (int l = 0; l < L; l++) out[1 + L0 + l] += sumsq_f64(m->acts.residual3 + l * stride, (int64_t)(BT * C));
}

// The logged values: norms (sqrt of the sums) and RMS (sqrt of the mean square), group by group.
static inline double layer_grad_norm(const LayerStats* s, int group) { return std::sqrt(s->grad_sumsq[group]); }
static inline double layer_weight_norm(const LayerStats* s, int group) { return std::sqrt(s->weight_sumsq[group]); }
static inline double layer_act_rms(const LayerStats* s, int entry) { return std::sqrt(s->act_sumsq[entry] / s->act_count); }
