// model.h — GPT-2: configuration, the parameter table, flat buffers, activations, and the
// forward/backward sequencing over layers. It owns no math: every number is computed by an op of
// the backend (llmc/backend.h), so the same sequencing drives both trainers.
//
// Legend: B batch, T time, C channels, NH heads, L layers, V vocabulary, Vp padded vocabulary,
// maxT position rows.
//
// The parameter table (DESIGN §2) is the one description of every parameter tensor: name, shape,
// per-layer or global, weight decay or not, tensor-parallel split, init rule. Sizes, offsets,
// decay masks, checkpoint layout, llm.c export, gradient checks and norms all derive from it.
// Canonical layout = table order, per-layer tensors stored (L, ...) — which is also llm.c's order,
// so an llm.c model file is the canonical buffer behind a header.
//
// The model is templated on its float type F: float in the trainers, double in the gradient
// checks (test/test_gradcheck.cpp), so a finite difference can be taken in double precision
// through the very same sequencing code.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/backend.h"
#include "llmc/rand.h"

struct GPTConfig {
    int max_seq_len;        // maxT: rows of the position embedding
    int vocab_size;         // V
    int padded_vocab_size;  // Vp, a multiple of --make-vocab-size-divisible-by
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
};

static inline int gpt_padded_vocab(int V, int multiple) { return (V + multiple - 1) / multiple * multiple; }

enum ParamId {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB, NUM_PARAMS
};
enum TPSplit { TP_NONE, TP_ROWS, TP_COLS };  // ROWS: output rows split (column-parallel linear)
enum InitRule {
    INIT_NORMAL,         // N(0, σ)
    INIT_NORMAL_OUTPUT,  // N(0, σ/sqrt(2·L)), L the global layer count (KNOBS.md §1.2)
    INIT_NORMAL_VOCAB,   // N(0, σ) for the V real rows, 0 for the padding rows
    INIT_ZERO,
    INIT_ONE,
};

struct ParamTensor {
    const char* name;
    bool per_layer;    // shape (L, rows, cols) if true, else (rows, cols)
    int64_t rows, cols;
    bool decay;        // in the weight-decay group (matrices and embeddings, not biases or LayerNorms)
    TPSplit tp;
    InitRule init;
    int64_t numel;             // derived: (L ·) rows · cols
    int64_t offset_canonical;  // derived: position in the canonical flat buffer
};

struct ParamTable {
    ParamTensor t[NUM_PARAMS];
    int64_t total;
};

static inline void param_table_build(ParamTable* pt, const GPTConfig* cfg) {
    int64_t C = cfg->channels, Vp = cfg->padded_vocab_size, maxT = cfg->max_seq_len;
    //        id           name        layer rows     cols decay  tp        init
    const ParamTensor rows[NUM_PARAMS] = {
        {"wte",      false, Vp,    C,     true,  TP_ROWS, INIT_NORMAL_VOCAB, 0, 0},
        {"wpe",      false, maxT,  C,     true,  TP_NONE, INIT_NORMAL, 0, 0},
        {"ln1w",     true,  1,     C,     false, TP_NONE, INIT_ONE, 0, 0},
        {"ln1b",     true,  1,     C,     false, TP_NONE, INIT_ZERO, 0, 0},
        {"qkvw",     true,  3 * C, C,     true,  TP_ROWS, INIT_NORMAL, 0, 0},
        {"qkvb",     true,  1,     3 * C, false, TP_COLS, INIT_ZERO, 0, 0},
        {"attprojw", true,  C,     C,     true,  TP_COLS, INIT_NORMAL_OUTPUT, 0, 0},
        {"attprojb", true,  1,     C,     false, TP_NONE, INIT_ZERO, 0, 0},
        {"ln2w",     true,  1,     C,     false, TP_NONE, INIT_ONE, 0, 0},
        {"ln2b",     true,  1,     C,     false, TP_NONE, INIT_ZERO, 0, 0},
        {"fcw",      true,  4 * C, C,     true,  TP_ROWS, INIT_NORMAL, 0, 0},
        {"fcb",      true,  1,     4 * C, false, TP_COLS, INIT_ZERO, 0, 0},
        {"fcprojw",  true,  C,     4 * C, true,  TP_COLS, INIT_NORMAL_OUTPUT, 0, 0},
        {"fcprojb",  true,  1,     C,     false, TP_NONE, INIT_ZERO, 0, 0},
        {"lnfw",     false, 1,     C,     false, TP_NONE, INIT_ONE, 0, 0},
        {"lnfb",     false, 1,     C,     false, TP_NONE, INIT_ZERO, 0, 0},
    };
    int64_t offset = 0;
    for (int i = 0; i < NUM_PARAMS; i++) {
        pt->t[i] = rows[i];
        pt->t[i].numel = (rows[i].per_layer ? cfg->num_layers : 1) * rows[i].rows * rows[i].cols;
        pt->t[i].offset_canonical = offset;
        offset += pt->t[i].numel;
    }
    pt->total = offset;
}

// A stable 64-bit key per tensor name: init keys do not shift when the table grows.
static inline uint64_t param_name_key(const char* name) {
    uint64_t h = 1469598103934665603ull;
    for (; *name; name++) h = (h ^ (uint8_t)*name) * 1099511628211ull;
    return h;
}

// Fills the canonical buffer: element i of tensor t is a pure function of (seed, name(t), i).
template <typename F>
void param_table_init(F* params, const ParamTable* pt, const GPTConfig* cfg, double std, uint64_t seed) {
    for (int id = 0; id < NUM_PARAMS; id++) {
        const ParamTensor* t = &pt->t[id];
        F* p = params + t->offset_canonical;
        uint64_t key = param_name_key(t->name);
        double sigma = t->init == INIT_NORMAL_OUTPUT ? std / std::sqrt(2.0 * cfg->num_layers) : std;
#pragma omp parallel for
        for (int64_t i = 0; i < t->numel; i++) {
            double v = 0;
            switch (t->init) {
                case INIT_ZERO: v = 0; break;
                case INIT_ONE: v = 1; break;
                case INIT_NORMAL_VOCAB:
                    v = (i / t->cols) < cfg->vocab_size ? sigma * rng_normal(seed, RNG_INIT, key, (uint64_t)i) : 0;
                    break;
                default: v = sigma * rng_normal(seed, RNG_INIT, key, (uint64_t)i); break;
            }
            p[i] = (F)v;
        }
    }
}

// Activations of one micro-batch; every buffer is sized for the allocated (B, T).
template <typename F> struct Activations {
    F* encoded;    // (B,T,C)
    F* ln1;        // (L,B,T,C)
    F* ln1_mean;   // (L,B,T)
    F* ln1_rstd;   // (L,B,T)
    F* qkv;        // (L,B,T,3C)
    F* atty;       // (L,B,T,C)
    F* att;        // (L,B,NH,T,T)
    F* attproj;    // (L,B,T,C)
    F* residual2;  // (L,B,T,C)
    F* ln2;        // (L,B,T,C)
    F* ln2_mean;   // (L,B,T)
    F* ln2_rstd;   // (L,B,T)
    F* fch;        // (L,B,T,4C)
    F* fch_gelu;   // (L,B,T,4C)
    F* fcproj;     // (L,B,T,C)
    F* residual3;  // (L,B,T,C)
    F* lnf;        // (B,T,C)
    F* lnf_mean;   // (B,T)
    F* lnf_rstd;   // (B,T)
    F* logits;     // (B,T,Vp): logits → probs → dlogits
    F* losses;     // (B,T)
};

// Gradient scratch for one layer at a time, reused down the stack.
template <typename F> struct GradScratch {
    F* residual;   // (B,T,C): the gradient flowing down the residual stream
    F* ln;         // (B,T,C)
    F* atty;       // (B,T,C)
    F* qkv;        // (B,T,3C)
    F* fch;        // (B,T,4C)
    F* fch_gelu;   // (B,T,4C)
};

template <typename F> struct GPT {
    GPTConfig config;
    ParamTable table;
    F* params;                // (table.total) canonical flat buffer
    F* grads;                 // same layout
    F* p[NUM_PARAMS];         // views into params
    F* g[NUM_PARAMS];         // views into grads
    int B, T;                 // allocated micro-batch shape
    Activations<F> acts;
    GradScratch<F> dacts;
    int* inputs;              // (B,T) on the device
    int* targets;             // (B,T) on the device
    std::vector<F> losses_host;
};

template <typename F> static inline void gpt_bind_views(GPT<F>* m) {
    for (int i = 0; i < NUM_PARAMS; i++) {
        m->p[i] = m->params + m->table.t[i].offset_canonical;
        m->g[i] = m->grads + m->table.t[i].offset_canonical;
    }
}

// Allocates parameters, gradients and activations for micro-batches of up to (B, T).
template <typename F> void gpt_build(GPT<F>* m, const GPTConfig* cfg, int B, int T) {
    m->config = *cfg;
    param_table_build(&m->table, cfg);
    size_t P = (size_t)m->table.total;
    m->params = (F*)backend_malloc(P * sizeof(F));
    m->grads = (F*)backend_malloc(P * sizeof(F));
    backend_memset_zero(m->grads, P * sizeof(F));
    gpt_bind_views(m);
    m->B = B;
    m->T = T;
    size_t L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads, Vp = cfg->padded_vocab_size;
    size_t BT = (size_t)B * T;
    Activations<F>* a = &m->acts;
    auto alloc = [](size_t n) { return (F*)backend_malloc(n * sizeof(F)); };
    a->encoded = alloc(BT * C);
    a->ln1 = alloc(L * BT * C); a->ln1_mean = alloc(L * BT); a->ln1_rstd = alloc(L * BT);
    a->qkv = alloc(L * BT * 3 * C); a->atty = alloc(L * BT * C); a->att = alloc(L * B * NH * T * T);
    a->attproj = alloc(L * BT * C); a->residual2 = alloc(L * BT * C);
    a->ln2 = alloc(L * BT * C); a->ln2_mean = alloc(L * BT); a->ln2_rstd = alloc(L * BT);
    a->fch = alloc(L * BT * 4 * C); a->fch_gelu = alloc(L * BT * 4 * C);
    a->fcproj = alloc(L * BT * C); a->residual3 = alloc(L * BT * C);
    a->lnf = alloc(BT * C); a->lnf_mean = alloc(BT); a->lnf_rstd = alloc(BT);
    a->logits = alloc(BT * Vp); a->losses = alloc(BT);
    GradScratch<F>* d = &m->dacts;
    d->residual = alloc(BT * C); d->ln = alloc(BT * C); d->atty = alloc(BT * C);
    d->qkv = alloc(BT * 3 * C); d->fch = alloc(BT * 4 * C); d->fch_gelu = alloc(BT * 4 * C);
    m->inputs = (int*)backend_malloc(BT * sizeof(int));
    m->targets = (int*)backend_malloc(BT * sizeof(int));
    m->losses_host.resize(BT);
}

template <typename F> void gpt_free(GPT<F>* m) {
    Activations<F>* a = &m->acts;
    F* bufs[] = {a->encoded, a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->atty, a->att, a->attproj, a->residual2,
                 a->ln2, a->ln2_mean, a->ln2_rstd, a->fch, a->fch_gelu, a->fcproj, a->residual3, a->lnf,
                 a->lnf_mean, a->lnf_rstd, a->logits, a->losses, m->dacts.residual, m->dacts.ln, m->dacts.atty,
                 m->dacts.qkv, m->dacts.fch, m->dacts.fch_gelu, m->params, m->grads};
    for (F* b : bufs) backend_free(b);
    backend_free(m->inputs);
    backend_free(m->targets);
}

// Forward pass over tokens (B,T) with B·T within the allocated shape. With targets, computes the
// per-position losses and returns their mean; without (generation), leaves logits and returns 0.
// The activation layout keeps the allocated stride, so a shorter T (curriculum, sampling) works.
template <typename F> double gpt_forward(GPT<F>* m, const int* inputs_host, const int* targets_host, int B, int T) {
    const GPTConfig* cfg = &m->config;
    int L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads, V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    if (B * T > m->B * m->T || T > m->T) keel_die("gpt_forward: batch (%d,%d) exceeds the allocated (%d,%d)", B, T, m->B, m->T);
    size_t BT = (size_t)B * T, BTmax = (size_t)m->B * m->T;
    for (size_t i = 0; i < BT; i++)
        if (inputs_host[i] < 0 || inputs_host[i] >= V) keel_die("token id %d at position %zu is outside [0, %d)", inputs_host[i], i, V);
    backend_copy_to_device(m->inputs, inputs_host, BT * sizeof(int));
    Activations<F>* a = &m->acts;
    F** p = m->p;
    encoder_forward(a->encoded, m->inputs, p[P_WTE], p[P_WPE], B, T, C);
    for (int l = 0; l < L; l++) {
        F* residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BTmax * C;
        size_t lc = l * BTmax * C, lr = l * BTmax;
        F* ln1 = a->ln1 + lc; F* qkv = a->qkv + 3 * lc; F* atty = a->atty + lc;
        F* att = a->att + (size_t)l * m->B * NH * m->T * m->T;
        F* attproj = a->attproj + lc; F* residual2 = a->residual2 + lc; F* ln2 = a->ln2 + lc;
        F* fch = a->fch + 4 * lc; F* fch_gelu = a->fch_gelu + 4 * lc; F* fcproj = a->fcproj + lc;
        F* residual3 = a->residual3 + lc;
        layernorm_forward(ln1, a->ln1_mean + lr, a->ln1_rstd + lr, residual, p[P_LN1W] + l * C, p[P_LN1B] + l * C, (int)BT, C);
        matmul_forward(qkv, ln1, p[P_QKVW] + (size_t)l * 3 * C * C, p[P_QKVB] + l * 3 * C, (int)BT, C, 3 * C);
        attention_forward(atty, att, qkv, B, T, C, NH);
        matmul_forward(attproj, atty, p[P_ATTPROJW] + (size_t)l * C * C, p[P_ATTPROJB] + l * C, (int)BT, C, C);
        residual_forward(residual2, residual, attproj, BT * C);
        layernorm_forward(ln2, a->ln2_mean + lr, a->ln2_rstd + lr, residual2, p[P_LN2W] + l * C, p[P_LN2B] + l * C, (int)BT, C);
        matmul_forward(fch, ln2, p[P_FCW] + (size_t)l * 4 * C * C, p[P_FCB] + l * 4 * C, (int)BT, C, 4 * C);
        gelu_forward(fch_gelu, fch, BT * 4 * C);
        matmul_forward(fcproj, fch_gelu, p[P_FCPROJW] + (size_t)l * 4 * C * C, p[P_FCPROJB] + l * C, (int)BT, 4 * C, C);
        residual_forward(residual3, residual2, fcproj, BT * C);
    }
    F* last = a->residual3 + (L - 1) * BTmax * C;
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, p[P_LNFW], p[P_LNFB], (int)BT, C);
    matmul_forward(a->logits, a->lnf, p[P_WTE], (const F*)nullptr, (int)BT, C, Vp);
    if (!targets_host) return 0.0;
    for (size_t i = 0; i < BT; i++)
        if (targets_host[i] < 0 || targets_host[i] >= V) keel_die("target id %d at position %zu is outside [0, %d)", targets_host[i], i, V);
    backend_copy_to_device(m->targets, targets_host, BT * sizeof(int));
    classifier_forward(a->losses, a->logits, m->targets, (int)BT, V, Vp);
    backend_copy_to_host(m->losses_host.data(), a->losses, BT * sizeof(F));
    double sum = 0;  // fixed order: position 0 .. BT-1
    for (size_t i = 0; i < BT; i++) sum += (double)m->losses_host[i];
    return sum / (double)BT;
}

// Backward pass of the last gpt_forward (with targets); gradients are ADDED into m->grads, so
// micro-batches accumulate. dloss is each position's weight in the loss being differentiated
// (1 / positions in the global batch for the mean loss).
template <typename F> void gpt_backward(GPT<F>* m, int B, int T, double dloss) {
    const GPTConfig* cfg = &m->config;
    int L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads, V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    size_t BT = (size_t)B * T, BTmax = (size_t)m->B * m->T;
    Activations<F>* a = &m->acts;
    GradScratch<F>* d = &m->dacts;
    F** p = m->p;
    F** g = m->g;
    classifier_backward(a->logits, m->targets, (F)dloss, (int)BT, V, Vp);
    backend_memset_zero(d->ln, BT * C * sizeof(F));
    matmul_backward(d->ln, g[P_WTE], (F*)nullptr, a->logits, a->lnf, p[P_WTE], (int)BT, C, Vp);
    backend_memset_zero(d->residual, BT * C * sizeof(F));
    F* last = a->residual3 + (L - 1) * BTmax * C;
    layernorm_backward(d->residual, g[P_LNFW], g[P_LNFB], d->ln, last, p[P_LNFW], a->lnf_mean, a->lnf_rstd, (int)BT, C);
    for (int l = L - 1; l >= 0; l--) {
        F* residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BTmax * C;
        size_t lc = l * BTmax * C, lr = l * BTmax;
        size_t CC = (size_t)C * C;
        backend_memset_zero(d->fch_gelu, BT * 4 * C * sizeof(F));
        backend_memset_zero(d->fch, BT * 4 * C * sizeof(F));
        backend_memset_zero(d->ln, BT * C * sizeof(F));
        backend_memset_zero(d->atty, BT * C * sizeof(F));
        backend_memset_zero(d->qkv, BT * 3 * C * sizeof(F));
        // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        matmul_backward(d->fch_gelu, g[P_FCPROJW] + l * 4 * CC, g[P_FCPROJB] + l * C, d->residual, a->fch_gelu + 4 * lc,
                        p[P_FCPROJW] + l * 4 * CC, (int)BT, 4 * C, C);
        gelu_backward(d->fch, d->fch_gelu, a->fch + 4 * lc, BT * 4 * C);
        matmul_backward(d->ln, g[P_FCW] + l * 4 * CC, g[P_FCB] + l * 4 * C, d->fch, a->ln2 + lc, p[P_FCW] + l * 4 * CC,
                        (int)BT, C, 4 * C);
        layernorm_backward(d->residual, g[P_LN2W] + l * C, g[P_LN2B] + l * C, d->ln, a->residual2 + lc,
                           p[P_LN2W] + l * C, a->ln2_mean + lr, a->ln2_rstd + lr, (int)BT, C);
        // attention: residual2 = residual + attproj(attention(qkv(ln1(residual))))
        backend_memset_zero(d->ln, BT * C * sizeof(F));
        matmul_backward(d->atty, g[P_ATTPROJW] + l * CC, g[P_ATTPROJB] + l * C, d->residual, a->atty + lc,
                        p[P_ATTPROJW] + l * CC, (int)BT, C, C);
        attention_backward(d->qkv, d->atty, a->qkv + 3 * lc, a->att + (size_t)l * m->B * NH * m->T * m->T, B, T, C, NH);
        matmul_backward(d->ln, g[P_QKVW] + l * 3 * CC, g[P_QKVB] + l * 3 * C, d->qkv, a->ln1 + lc, p[P_QKVW] + l * 3 * CC,
                        (int)BT, C, 3 * C);
        layernorm_backward(d->residual, g[P_LN1W] + l * C, g[P_LN1B] + l * C, d->ln, residual, p[P_LN1W] + l * C,
                           a->ln1_mean + lr, a->ln1_rstd + lr, (int)BT, C);
    }
    encoder_backward(g[P_WTE], g[P_WPE], d->residual, m->inputs, B, T, C);
}

template <typename F> void gpt_zero_grad(GPT<F>* m) { backend_memset_zero(m->grads, (size_t)m->table.total * sizeof(F)); }

// Parameter count without the padding rows of the vocabulary (what users quote as model size).
static inline int64_t gpt_num_params_real(const ParamTable* pt, const GPTConfig* cfg) {
    return pt->total - (int64_t)(cfg->padded_vocab_size - cfg->vocab_size) * cfg->channels;
}
