// model.h — GPT-2: configuration, the parameter table, flat buffers, activations, and the
// forward/backward sequencing over layers. It owns no math: every number is computed by an op of
// the backend (llmc/backend.h), so the same sequencing drives both trainers.
//
// Legend: B batch, T time, C channels, NH heads, L layers, V vocabulary, Vp padded vocabulary,
// maxT position rows.
//
// The parameter table (docs/internals.md#the-flat-parameter-buffer) is the one description of every parameter tensor: name, shape,
// per-layer or global, weight decay or not, tensor-parallel split, init rule. Sizes, offsets,
// decay masks, checkpoint layout, llm.c export, gradient checks and norms all derive from it.
// Canonical layout = table order, per-layer tensors stored (L, ...) — which is also llm.c's order,
// so an llm.c model file is the canonical buffer behind a header.
//
// The model is templated on its compute type F (llmc/ops.h, docs/internals.md#precision): float in the CPU trainer
// and under --fp32, bf16/fp16 on the GPU under --bf16/--fp16 (with fp32 master weights, gradients,
// statistics and losses: acc_t<F>), double in the gradient checks (test/test_gradcheck.cpp), so a
// finite difference can be taken in double precision through the very same sequencing code.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "llmc/backend.h"
#include "llmc/comm.h"
#include "llmc/flags.h"
#include "llmc/op_times.h"
#include "llmc/parallel.h"
#include "llmc/pp_partition.h"
#include "llmc/rand.h"

enum Activation { ACT_GELU, ACT_RELU };
// --attention-impl: which attention kernels run (the model keeps the probabilities (gemm) or only
// each row's log-sum-exp (flash); gpt_attention_flash decides).
enum AttnImpl { ATTN_IMPL_AUTO, ATTN_IMPL_FLASH, ATTN_IMPL_GEMM };
// --gelu-fusion: whether the CUDA op set fuses the MLP's GeLU into cuBLASLt's epilogues (gpt_gelu_fusion decides)
enum GeluFusion { GELU_FUSION_AUTO, GELU_FUSION_ON, GELU_FUSION_OFF };

struct GPTConfig {
    int max_seq_len;        // maxT: rows of the position embedding
    int vocab_size;         // V
    int padded_vocab_size;  // Vp, a multiple of --make-vocab-size-divisible-by (or --pad-vocab-size-to): the canonical,
                            // layout-independent padding; under tensor parallelism gpt_vocab_rows pads further
    int num_layers;         // L, the whole model's
    int num_heads;          // NH
    int channels;           // C
    int ffn_hidden = 0;     // F, the MLP width (--ffn-hidden-size); 0: 4C (gpt_ffn)
    int vocab_tp_multiple = 0;  // Megatron's padding under TP: Vp rounded up to this x tp_size (0: none, --pad-vocab-size-to)
    // The pipeline stage this model is (docs/internals.md#parallelism; llmc/parallel.h splits the layers): layers
    // [stage_layer_first, stage_layer_first + stage_num_layers) of the L; the first stage owns the
    // embeddings, the last the final LayerNorm and the LM head (the tied word embedding: both own a
    // copy of wte). The defaults are the whole model on one stage.
    int stage_layer_first = 0;
    int stage_num_layers = -1;          // -1: all L
    // --pp-partition-method: the layers of each of pp_stages stages (llmc/pp_partition.h); null: keel's split
    const int* pp_counts = nullptr;
    int pp_stages = 0;
    bool stage_first = true, stage_last = true;
    // The tensor-parallel rank this model is (docs/internals.md#parallelism, Megatron's scheme): tp_rank of tp_size holds
    // heads [tp_rank·NH/tp, ...) (their QKV rows and attention-out columns), the same slice of the
    // MLP's F (FC rows, projection columns) and of the padded vocabulary (wte rows); everything
    // else is replicated. The defaults are the whole model.
    int tp_size = 1, tp_rank = 0;
    // --checkpoint-activations: keep only each layer's output (the residual stream) and recompute the
    // layer's forward right before its backward; the other activations exist for one layer at a time.
    bool checkpoint_activations = false;
    // the knobs that change the network (docs/knobs.md#embedding-layernorm-and-stableembedding, #attention-numerics, #normformer, #activations-dropout-positions-and-alibi); the defaults are GPT-2
    bool embed_layernorm = false;       // LayerNorm on the word embedding (also on under stable_embedding)
    bool stable_embedding = false;      // xavier-uniform word embedding (bitsandbytes StableEmbedding)
    bool alibi = false;                 // ALiBi biases instead of the learned position table
    bool sinusoidal_positions = false;  // learned position table initialised sinusoidally
    int activation = ACT_GELU;          // Activation
    int attention_scaling = ATTN_SCALING_STANDARD;
    int attention_impl = ATTN_IMPL_AUTO;  // AttnImpl
    int gelu_fusion = GELU_FUSION_AUTO;   // GeluFusion
    int classifier_chunk_rows = 0;      // --classifier-chunk-rows: positions whose logits exist at once (0: auto, gpt_head_rows)
    bool qk_layer_scaling = false;      // --apply-query-key-layer-scaling
    bool normformer = false;
    double hidden_dropout = 0, attention_dropout = 0, embed_dropout = 0;
    // --bf16 on the CPU trainer: fp32 arithmetic, with the weights the ops read and every activation
    // and activation gradient rounded to bf16 where the CUDA trainer stores them in bf16 (gpt_stored).
    // Never set on the GPU, whose bf16 model stores bf16 itself.
    bool round_bf16 = false;
};

// The MLP width F: --ffn-hidden-size, or Megatron's default 4C (GPT-2's) when unset.
static inline int gpt_ffn(const GPTConfig* cfg) { return cfg->ffn_hidden > 0 ? cfg->ffn_hidden : 4 * cfg->channels; }

// The word embedding's rows in memory: Megatron pads the vocabulary to a multiple of
// make-vocab-size-divisible-by x TP (megatron/tokenizer/tokenizer.py _vocab_size_with_padding), so a
// TP=2 run holds more rows than a TP=1 run. The rows past the canonical Vp are padding like the rest
// (zero at init, zero gradient, so zero for ever: decoupled weight decay of 0 is 0): checkpoints keep
// the canonical Vp rows only (param_table_rank_spans) and any layout reads them back.
static inline int gpt_vocab_rows(const GPTConfig* cfg) {
    if (cfg->vocab_tp_multiple <= 0 || cfg->tp_size <= 1) return cfg->padded_vocab_size;
    int64_t m = (int64_t)cfg->vocab_tp_multiple * cfg->tp_size;
    return (int)((cfg->padded_vocab_size + m - 1) / m * m);
}

static inline int gpt_padded_vocab(int V, int multiple) { return (V + multiple - 1) / multiple * multiple; }

// The layers this stage computes (L without pipeline parallelism).
static inline int gpt_stage_layers(const GPTConfig* cfg) { return cfg->stage_num_layers < 0 ? cfg->num_layers : cfg->stage_num_layers; }

// Stage `stage` of a P-stage pipeline of the model cfg describes (whichever stage or tensor-parallel
// rank cfg itself is), without tensor parallelism; gpt_config_stage(cfg, 1, 0) is the whole model.
static inline GPTConfig gpt_config_stage(const GPTConfig* cfg, int P, int stage) {
    GPTConfig g = *cfg;
    g.tp_size = 1;
    g.tp_rank = 0;
    pipeline_stage_layers(g.num_layers, P, stage, &g.stage_layer_first, &g.stage_num_layers);
    if (cfg->pp_counts && cfg->pp_stages == P) {  // --pp-partition-method's split
        g.stage_layer_first = 0;
        for (int s = 0; s < stage; s++) g.stage_layer_first += cfg->pp_counts[s];
        g.stage_num_layers = cfg->pp_counts[stage];
    }
    if (P == 1) g.stage_num_layers = -1;
    g.stage_first = stage == 0;
    g.stage_last = stage == P - 1;
    return g;
}

// The layers of stage `stage` of a P-stage pipeline.
static inline int gpt_stage_layers_of(const GPTConfig* cfg, int P, int stage) {
    GPTConfig g = gpt_config_stage(cfg, P, stage);
    return gpt_stage_layers(&g);
}

// The first LLMC_NUM_PARAMS tensors are GPT-2's, in llm.c's order; the knobs' tensors follow and
// have zero rows (no elements) when their knob is off, so a plain model's buffer is llm.c's.
enum ParamId {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB,
    P_LNEW, P_LNEB,                                          // --embed-layernorm / --stable-embedding
    P_HEADSCALE, P_LNAW, P_LNAB, P_LNFCW, P_LNFCB,           // --normformer
    NUM_PARAMS
};
enum { LLMC_NUM_PARAMS = P_LNFB + 1 };
enum TPSplit { TP_NONE, TP_ROWS, TP_COLS };  // ROWS: output rows split (column-parallel linear)
enum InitRule {
    INIT_NORMAL,         // N(0, σ)
    INIT_NORMAL_OUTPUT,  // N(0, σ/sqrt(2·L)), L the global layer count (docs/knobs.md#initialization)
    INIT_NORMAL_VOCAB,   // N(0, σ) for the V real rows, 0 for the padding rows
    INIT_XAVIER_VOCAB,   // U(-a, a), a = sqrt(6/(Vp + C)), real rows; 0 for padding (StableEmbedding, docs/knobs.md#embedding-layernorm-and-stableembedding)
    INIT_SINUSOIDAL,     // [sin(pos·ω_k) | cos(pos·ω_k)], ω_k = exp(-k·ln(10000)/(C/2 - 1)) (docs/knobs.md#activations-dropout-positions-and-alibi)
    INIT_ZERO,
    INIT_ONE,
};

struct ParamTensor {
    const char* name;
    bool per_layer;    // shape (L, rows, cols) if true, else (rows, cols)
    int64_t rows, cols;
    bool decay;        // in the weight-decay group (matrices and embeddings, not biases, LayerNorms or gains)
    TPSplit tp;
    InitRule init;
    int64_t numel;             // derived: (L ·) rows · cols
    int64_t offset_canonical;  // derived: position in the canonical flat buffer (of a pipeline stage or a
                               // tensor-parallel rank: in its own buffer; param_table_rank_spans maps it to the whole model's)
    int parts;                 // fused blocks along the split dimension, each split on its own (QKV: 3)
};

struct ParamTable {
    ParamTensor t[NUM_PARAMS];
    int64_t total;
};

// The table of the tensors a stage holds: a tensor the stage does not own has zero rows, exactly
// like the tensor of a knob that is off, so a stage's flat buffer is its own tensors in table order
// (per-layer tensors with its layers only; split tensors with its slice). param_table_rank_spans maps it to the canonical buffer.
static inline void param_table_build(ParamTable* pt, const GPTConfig* cfg) {
    int64_t C = cfg->channels, Vp = gpt_vocab_rows(cfg), maxT = cfg->max_seq_len, NH = cfg->num_heads, H = gpt_ffn(cfg);
    bool first = cfg->stage_first, last = cfg->stage_last;
    int64_t pos_rows = cfg->alibi || !first ? 0 : maxT;
    int64_t eln = (cfg->embed_layernorm || cfg->stable_embedding) && first ? 1 : 0, nf = cfg->normformer ? 1 : 0;
    int64_t wte_rows = first || last ? Vp : 0, lnf_rows = last ? 1 : 0;
    InitRule wte_init = cfg->stable_embedding ? INIT_XAVIER_VOCAB : INIT_NORMAL_VOCAB;
    InitRule wpe_init = cfg->sinusoidal_positions ? INIT_SINUSOIDAL : INIT_NORMAL;
    //        id           name        layer rows      cols   decay  tp       init  numel offset parts
    const ParamTensor rows[NUM_PARAMS] = {
        {"wte",       false, wte_rows, C,     true,  TP_ROWS, wte_init, 0, 0, 1},
        {"wpe",       false, pos_rows, C,     true,  TP_NONE, wpe_init, 0, 0, 1},
        {"ln1w",      true,  1,        C,     false, TP_NONE, INIT_ONE, 0, 0, 1},
        {"ln1b",      true,  1,        C,     false, TP_NONE, INIT_ZERO, 0, 0, 1},
        {"qkvw",      true,  3 * C,    C,     true,  TP_ROWS, INIT_NORMAL, 0, 0, 3},  // q, k, v: each split on its own
        {"qkvb",      true,  1,        3 * C, false, TP_COLS, INIT_ZERO, 0, 0, 3},
        {"attprojw",  true,  C,        C,     true,  TP_COLS, INIT_NORMAL_OUTPUT, 0, 0, 1},
        {"attprojb",  true,  1,        C,     false, TP_NONE, INIT_ZERO, 0, 0, 1},
        {"ln2w",      true,  1,        C,     false, TP_NONE, INIT_ONE, 0, 0, 1},
        {"ln2b",      true,  1,        C,     false, TP_NONE, INIT_ZERO, 0, 0, 1},
        {"fcw",       true,  H,        C,     true,  TP_ROWS, INIT_NORMAL, 0, 0, 1},
        {"fcb",       true,  1,        H,     false, TP_COLS, INIT_ZERO, 0, 0, 1},
        {"fcprojw",   true,  C,        H,     true,  TP_COLS, INIT_NORMAL_OUTPUT, 0, 0, 1},
        {"fcprojb",   true,  1,        C,     false, TP_NONE, INIT_ZERO, 0, 0, 1},
        {"lnfw",      false, lnf_rows, C,     false, TP_NONE, INIT_ONE, 0, 0, 1},
        {"lnfb",      false, lnf_rows, C,     false, TP_NONE, INIT_ZERO, 0, 0, 1},
        {"lnew",      false, eln,      C,     false, TP_NONE, INIT_ONE, 0, 0, 1},
        {"lneb",      false, eln,      C,     false, TP_NONE, INIT_ZERO, 0, 0, 1},
        {"headscale", true,  nf,       NH,    false, TP_COLS, INIT_ONE, 0, 0, 1},
        {"lnaw",      true,  nf,       C,     false, TP_NONE, INIT_ONE, 0, 0, 1},
        {"lnab",      true,  nf,       C,     false, TP_NONE, INIT_ZERO, 0, 0, 1},
        {"lnfcw",     true,  nf,       H,     false, TP_COLS, INIT_ONE, 0, 0, 1},
        {"lnfcb",     true,  nf,       H,     false, TP_COLS, INIT_ZERO, 0, 0, 1},
    };
    int64_t offset = 0, TP = cfg->tp_size;
    for (int i = 0; i < NUM_PARAMS; i++) {
        pt->t[i] = rows[i];
        if (rows[i].tp == TP_ROWS) pt->t[i].rows /= TP;  // this rank's slice (of each part)
        if (rows[i].tp == TP_COLS) pt->t[i].cols /= TP;
        pt->t[i].numel = (rows[i].per_layer ? gpt_stage_layers(cfg) : 1) * pt->t[i].rows * pt->t[i].cols;
        pt->t[i].offset_canonical = offset;
        offset += pt->t[i].numel;
    }
    pt->total = offset;
}

// A rank's buffer against the canonical (whole-model) buffer: contiguous spans, in local order. A
// pipeline stage holds its layers of each per-layer tensor; a tensor-parallel rank of a row-split
// tensor holds rows [tp_rank·r, (tp_rank+1)·r) of each part (QKV: of q, of k and of v), of a
// column-split one the same columns of every row.
struct ParamSpan {
    int64_t offset_local, offset_canonical, numel;
};
static inline std::vector<ParamSpan> param_table_rank_spans(const ParamTable* local, const ParamTable* whole, const GPTConfig* cfg) {
    std::vector<ParamSpan> spans;
    auto add = [&](int64_t lo, int64_t co, int64_t n) {
        ParamSpan* b = spans.empty() ? nullptr : &spans.back();
        if (b && b->offset_local + b->numel == lo && b->offset_canonical + b->numel == co) b->numel += n;
        else spans.push_back({lo, co, n});
    };
    for (int i = 0; i < NUM_PARAMS; i++) {
        const ParamTensor *s = &local->t[i], *w = &whole->t[i];
        if (s->numel == 0) continue;
        int64_t layers = s->per_layer ? gpt_stage_layers(cfg) : 1, l0 = s->per_layer ? cfg->stage_layer_first : 0;
        int64_t ls = s->rows * s->cols, ws = w->rows * w->cols;  // one layer's elements, here and in the whole
        bool split = cfg->tp_size > 1 && s->tp != TP_NONE;
        for (int64_t l = 0; l < layers; l++) {
            int64_t lo = s->offset_canonical + l * ls, co = w->offset_canonical + (l0 + l) * ws;
            if (!split) {
                add(lo, co, ls);
            } else if (s->tp == TP_ROWS) {
                // rows past the whole model's (Megatron's extra vocabulary padding, gpt_vocab_rows) are not canonical
                int64_t rp = s->rows / s->parts, wrp = w->rows / s->parts, r0 = cfg->tp_rank * rp;
                int64_t here = std::max<int64_t>(0, std::min(rp, wrp - r0));
                for (int p = 0; p < s->parts; p++)
                    if (here > 0) add(lo + p * rp * s->cols, co + (p * wrp + r0) * s->cols, here * s->cols);
            } else {
                int64_t cp = s->cols / s->parts, wcp = w->cols / s->parts;
                for (int64_t r = 0; r < s->rows; r++)
                    for (int p = 0; p < s->parts; p++) add(lo + r * s->cols + p * cp, co + r * w->cols + p * wcp + cfg->tp_rank * cp, cp);
            }
        }
    }
    return spans;
}

// Whether another rank holds the same values of tensor id and is the one that saves and counts
// them: the tied word embedding on the last pipeline stage (the first stage's copy counts), a
// replicated tensor on tensor-parallel rank > 0 (rank 0's copy counts).
static inline bool param_is_mirror(const ParamTable* pt, int id, const GPTConfig* cfg) {
    if (id == P_WTE && !cfg->stage_first) return true;
    return cfg->tp_rank > 0 && pt->t[id].tp == TP_NONE;
}

// ALiBi slopes for n heads (docs/knobs.md#activations-dropout-positions-and-alibi): for n a power of two, slope_i = 2^(-8(i+1)/n); otherwise
// the slopes of the largest power of two p < n, then every other slope of the 2p series.
static inline void alibi_slopes(int n, float* out) {
    int p = 1;
    while (p * 2 <= n) p *= 2;
    for (int i = 0; i < p; i++) out[i] = (float)std::exp2(-8.0 * (i + 1) / p);
    for (int i = 0; i < n - p; i++) out[p + i] = (float)std::exp2(-8.0 * (2 * i + 1) / (2 * p));
}

// Activations of one micro-batch; every buffer is sized for the allocated (B, T). Buffers of a
// knob that is off have no elements.
template <typename F> struct Activations {
    typedef acc_t<F> S;  // LayerNorm statistics and losses: fp32 whatever F (double in the gradient checks)
    F* emb;        // (B,T,C)  word embedding before the embedding LayerNorm (--embed-layernorm)
    S* lne_mean;   // (B,T)
    S* lne_rstd;   // (B,T)
    F* encoded;    // (B,T,C)  the residual stream entering layer 0 (after embedding dropout)
    F* ln1;        // (L,B,T,C)
    S* ln1_mean;   // (L,B,T)
    S* ln1_rstd;   // (L,B,T)
    F* qkv;        // (L,B,T,3C)
    F* atty;       // (L,B,T,C)
    F* att;        // (L,B,NH,T,T) softmax probabilities, before attention dropout (gemm attention)
    float* lse;    // (L,B,NH,T) each softmax row's log-sum-exp (flash attention: instead of att)
    F* atty_hs;    // (L,B,T,C)  atty times the per-head scale (--normformer)
    F* attproj;    // (L,B,T,C)  (the attention branch after dropout, unless --normformer)
    F* lna;        // (L,B,T,C)  post-attention LayerNorm of attproj (--normformer), then dropout
    S* lna_mean;   // (L,B,T)
    S* lna_rstd;   // (L,B,T)
    F* residual2;  // (L,B,T,C)
    F* ln2;        // (L,B,T,C)
    S* ln2_mean;   // (L,B,T)
    S* ln2_rstd;   // (L,B,T)
    F* fch;        // (L,B,T,F)
    F* fch_act;    // (L,B,T,F)  GeLU or ReLU of fch
    F* lnfc;       // (L,B,T,F)  LayerNorm of fch_act (--normformer)
    S* lnfc_mean;  // (L,B,T)
    S* lnfc_rstd;  // (L,B,T)
    F* fcproj;     // (L,B,T,C)  the MLP branch, after dropout
    F* residual3;  // (L,B,T,C)
    F* lnf;        // (B,T,C)
    S* lnf_mean;   // (B,T)
    S* lnf_rstd;   // (B,T)
    F* logits;     // (head_rows,Vp): one chunk of positions' logits → dlogits (gpt_head_rows)
    S* losses;     // (B,T)
    int* inputs;   // (B,T) token ids on the device
    int* targets;  // (B,T)
    int* wte_groups;  // (2·B·T + 2) encoder_token_groups of inputs (llmc/ops.h): the word-embedding gradient's work list
};

// Gradient scratch for one layer at a time, reused down the stack.
template <typename F> struct GradScratch {
    F* residual;   // (B,T,C): the gradient flowing down the residual stream
    F* branch;     // (B,T,C): gradient of a branch output before its dropout / LayerNorm
    F* ln;         // (B,T,C)
    F* atty;       // (B,T,C)
    F* atty_hs;    // (B,T,C)
    F* qkv;        // (B,T,3C)
    F* fch;        // (B,T,F)
    F* fch_act;    // (B,T,F)
    F* lnfc;       // (B,T,F)
};

// Dropout is on only for training forwards; the trainer says which samples the micro-batch holds.
struct DropoutState {
    bool train;            // false: evaluation and generation (no dropout)
    uint64_t seed;         // the run's RNG key for dropout
    int64_t first_sample;  // the run's sample number of micro-batch row 0
};

template <typename F> struct GPT {
    GPTConfig config;
    ParamTable table;
    acc_t<F>* params;         // (table.total) canonical flat buffer: the master weights (fp32); with a
                              // compute copy under ZeRO-1, only params[master_lo, master_hi) exists
                              // (the rank's shard: gpt_build's master range) and params is that
                              // allocation shifted by -master_lo, so offsets stay the table's
    int64_t master_lo, master_hi;  // the master weights this rank keeps: all of the table, or its shard
    acc_t<F>* grads;          // same layout, fp32 (docs/internals.md#precision: gradients accumulate in fp32)
    F* params_c;              // same layout, the weights the ops read: params itself when F is the
                              // master type, else its bf16/fp16 copy (gpt_params_changed refreshes it)
    F* p[NUM_PARAMS];         // views into params_c
    acc_t<F>* g[NUM_PARAMS];  // views into grads
    int B, T;                 // allocated micro-batch shape
    Activations<F> acts;      // the slot in use (gpt_use_slot)
    std::vector<Activations<F>> slots;  // one per micro-batch in flight (1F1B keeps up to P on a stage)
    size_t act_bytes;                   // their size, all slots
    GradScratch<F> dacts;
    int* inputs;              // (B,T) on the device: the slot's
    int* targets;             // (B,T) on the device: the slot's
    std::vector<acc_t<F>> losses_host;
    // The per-position losses of an iteration's micro-batches, kept on the device and read back once
    // (gpt_losses_read): a read per micro-batch would synchronize the host with the GPU each time.
    acc_t<F>* loss_log;       // (loss_log_rows) micro-batch k at k·B·T
    size_t loss_log_rows;
    double classifier_dloss;  // the dloss of the last training forward's fused classifier (gpt_backward checks it)
    // Optional timing of the LM head's backward, which the fused classifier runs inside gpt_forward:
    // with a clock (ms, after waiting for the device) set, its time is added to head_backward_ms, so a
    // caller timing the forward can move it to the backward (--log-timers-to-tensorboard).
    double (*clock)(void* ctx) = nullptr;
    void* clock_ctx = nullptr;
    double head_backward_ms = 0;
    size_t head_rows;         // positions whose logits exist at once (gpt_head_rows): acts.logits holds that many rows
    size_t logits_row0;       // the position of acts.logits' first row after a forward without targets
    float* alibi;             // (NH) ALiBi slopes in device memory (the attention kernels read them), or null
    bool flash;               // flash attention (gpt_attention_flash), else the materialized softmax
    bool gelu_fusion;         // the GeLU ops may fuse into cuBLASLt's epilogues (gpt_gelu_fusion; the CPU ops ignore it)
    DropoutState dropout;
    const Comm* tp;           // the tensor-parallel group (null or size 1: none)
    acc_t<F>* vp_stats;       // (B,T,3) vocabulary-parallel cross-entropy: row max, Σ exp, target logit
    std::vector<int> ids_host;  // (B,T) the rank's local token / target numbers (tensor parallelism)
    std::vector<int> groups_host, group_count;  // (2·B·T + 2), (Vp/T): encoder_token_groups' output and counts
    // The parameter gradients' slots still holding the last iteration's values (gpt_grads_begin):
    // (NUM_PARAMS × grad_layers), slot (id, l) = tensor id's layer-l slice (l = 0 for a whole tensor).
    // Empty: every slot is current (gpt_zero_grad), so every op adds.
    std::vector<uint8_t> grad_stale;
    int grad_layers = 1;
    // --time-ops (llmc/op_times.h): the marks of the iteration being timed (null: never), and the pass
    // the ops belong to ("fwd", "bwd", or "recompute" for --checkpoint-activations' second forward)
    OpTimes* op_times = nullptr;
    const char* op_phase = "fwd";
};

// --time-ops: op `name` of the step starts here (llmc/op_times.h), in the pass under way; flops and
// bytes give the table its rates (the model's FLOPs; the bytes a memory-bound op must move).
template <typename F> static inline void gpt_mark(const GPT<F>* m, const char* name, double flops = 0, double bytes = 0) {
    op_mark(m->op_times, m->op_phase, name, flops, bytes);
}

// Tensor parallelism's all-reduces over the group (no-ops without it): the sum after a row-parallel
// layer's partial products and of a column-parallel layer's input gradient (Megatron's g and f), the
// vocabulary-parallel lookup's rows and the cross-entropy's statistics.
// (Under --time-ops each is a segment of its own: the op after it marks its own start.)
template <typename F, typename T> static inline void gpt_tp_sum(const GPT<F>* m, T* buf, size_t n) {
    if (!m->tp || m->tp->size <= 1) return;
    op_mark_comm(m->op_times, m->op_phase, "tensor-parallel all-reduce", (double)n * sizeof(T));
    comm_allreduce_buf(m->tp, buf, n, COMM_SUM);
}
template <typename F, typename T> static inline void gpt_tp_max(const GPT<F>* m, T* buf, size_t n) {
    if (!m->tp || m->tp->size <= 1) return;
    op_mark_comm(m->op_times, m->op_phase, "tensor-parallel all-reduce", (double)n * sizeof(T));
    comm_allreduce_buf(m->tp, buf, n, COMM_MAX);
}

// The slices of the tensor-parallel split (the whole width without it): attention channels and
// heads, MLP width and vocabulary columns of this rank, and how many of those are real vocabulary.
struct TPDims {
    int C, NH, H, Vl, Vr, v0;  // C/T, NH/T, F/T (the MLP width, gpt_ffn), Vp/T, real columns among them, first column's number
};
static inline TPDims gpt_tp_dims(const GPTConfig* cfg) {
    int T = cfg->tp_size;
    TPDims d;
    d.C = cfg->channels / T;
    d.NH = cfg->num_heads / T;
    d.H = gpt_ffn(cfg) / T;
    d.Vl = gpt_vocab_rows(cfg) / T;
    d.v0 = cfg->tp_rank * d.Vl;
    d.Vr = std::max(0, std::min(d.Vl, cfg->vocab_size - d.v0));
    return d;
}

template <typename F> static inline void gpt_bind_views(GPT<F>* m) {
    for (int i = 0; i < NUM_PARAMS; i++) {
        m->p[i] = m->params_c + m->table.t[i].offset_canonical;
        m->g[i] = m->grads + m->table.t[i].offset_canonical;
    }
}

template <typename F> static inline F* gpt_alloc(size_t n) { return n ? (F*)backend_malloc(n * sizeof(F)) : nullptr; }

// ---- parameter gradients without a zero-fill --------------------------------------------------------
// An iteration does not zero the gradient buffer. gpt_grads_begin marks every slot (a tensor, or one
// layer's slice of a per-layer tensor) stale: it still holds the last iteration's values. The first op
// that produces a slot writes it instead of adding into it (gpt_grad_first gives the ops their write
// flags: on the GPU a GEMM with beta = 0 and keel's reductions storing their sums, so nothing is zeroed
// first and the GEMM reads nothing back); the later micro-batches add. An op that covers only part of
// its slot (the word embedding's scatter by token id, the position rows below T, the head scale's sum)
// zeroes the slot first instead (gpt_grad_zero_first). A slot no op produced in the micro-batch (none
// does in keel's model today; the check stays as the guarantee) is zeroed when its layer's backward
// ends and when the micro-batch's ends (gpt_grads_settle), before any reduction reads it. The CPU ops
// implement a write as zero-then-add, so their bytes are the same as adding into a zeroed buffer; the
// GPU's write stores 0 + sum, the same bits too. KEEL_TEST_POISON_GRADS (the trainer) fills the
// buffer with NaN at every iteration's start, so a slot read before it was written shows.
template <typename F> static inline size_t gpt_grad_slot_numel(const GPT<F>* m, int id) {
    const ParamTensor* t = &m->table.t[id];
    return t->per_layer ? (size_t)(t->numel / m->grad_layers) : (size_t)t->numel;
}
// Whether the op about to produce slot (id, l) writes it (the first this iteration); marks it current.
template <typename F> static inline bool gpt_grad_first(GPT<F>* m, int id, int l = 0) {
    if (m->grad_stale.empty()) return false;
    uint8_t* s = &m->grad_stale[(size_t)id * m->grad_layers + l];
    bool first = *s != 0;
    *s = 0;
    return first;
}
// The write flag of an op producing a weight and its bias together (matmul_backward, layernorm_backward).
template <typename F> static inline bool gpt_grads_first(GPT<F>* m, int w, int b, int l = 0) {
    bool fw = gpt_grad_first(m, w, l), fb = gpt_grad_first(m, b, l);
    if (m->table.t[b].numel && fw != fb) keel_die("gradient slots %s and %s of layer %d out of step", m->table.t[w].name, m->table.t[b].name, l);
    return fw;
}
// For an op that adds into part of its slot: zeroes the slot first when it is stale.
template <typename F> static inline void gpt_grad_zero_first(GPT<F>* m, int id, int l = 0) {
    if (!gpt_grad_first(m, id, l)) return;
    size_t n = gpt_grad_slot_numel(m, id);
    backend_memset_zero(m->g[id] + (size_t)l * n, n * sizeof(acc_t<F>));
}
// Zeroes the slots still stale: layer ≥ 0 that layer's slices, -1 every slot.
template <typename F> static inline void gpt_grads_settle(GPT<F>* m, int layer) {
    if (m->grad_stale.empty()) return;
    for (int id = 0; id < NUM_PARAMS; id++) {
        const ParamTensor* t = &m->table.t[id];
        if (t->numel == 0 || (!t->per_layer && layer >= 0)) continue;
        if (!t->per_layer) gpt_grad_zero_first(m, id);
        else if (layer >= 0) gpt_grad_zero_first(m, id, layer);
        else
            for (int l = 0; l < m->grad_layers; l++) gpt_grad_zero_first(m, id, l);
    }
}

// Whether the ops read a separate low-precision copy of the master weights.
template <typename F> static constexpr bool gpt_has_compute_copy() { return !std::is_same<F, acc_t<F>>::value; }
// Whether params_c is an allocation of its own: a low-precision copy, or (CPU --bf16) the master
// weights rounded to bf16 in fp32 storage. Otherwise the ops read the master weights themselves.
template <typename F> static inline bool gpt_separate_copy(const GPT<F>* m) {
    return gpt_has_compute_copy<F>() || m->config.round_bf16;
}

// An op just wrote n values of x, a buffer the CUDA trainer's bf16 model holds in bf16: under the CPU
// trainer's --bf16 (GPTConfig::round_bf16) they are rounded to bf16 in place, the store the GPU
// makes (docs/internals.md#precision). A no-op everywhere else.
template <typename F> static inline void gpt_stored(const GPT<F>* m, F* x, size_t n) {
#ifndef KEEL_CUDA
    if (m->config.round_bf16) cast_round_bf16(x, x, n);
#endif
}

// After every write to the master weights (initialization, load, rollback, an optimizer step that
// did not write the copy itself: StepResult::compute_copy_written, llmc/optimizer.h): refreshes the
// copy the ops read (a no-op when they read the master weights themselves) — the part of it this
// rank's master weights cover: with a sharded master (gpt_master_sharded) the caller then
// all-gathers the copy over the data-parallel ranks.
template <typename F> void gpt_params_changed(GPT<F>* m) {
    if constexpr (gpt_has_compute_copy<F>()) {
        cast_from_f32(m->params_c + m->master_lo, m->params + m->master_lo, (size_t)(m->master_hi - m->master_lo));
    } else {
#ifndef KEEL_CUDA  // (the CPU's --bf16: its copy is the master weights rounded, kept in fp32)
        if (m->config.round_bf16) cast_round_bf16(m->params_c, m->params, (size_t)m->table.total);
#endif
    }
}

// Whether this rank keeps only a shard of the master weights (ZeRO-1 with a compute copy).
template <typename F> static inline bool gpt_master_sharded(const GPT<F>* m) {
    return m->master_lo != 0 || m->master_hi != m->table.total;
}

// [*lo, *hi): the part of the table's [a, b) whose master weights this rank keeps (empty: lo >= hi).
template <typename F> static inline bool gpt_master_part(const GPT<F>* m, int64_t a, int64_t b, int64_t* lo, int64_t* hi) {
    *lo = std::max(a, m->master_lo);
    *hi = std::min(b, m->master_hi);
    return *lo < *hi;
}

// Whether the model runs flash attention (cpu/flash_attention.h, cuda/flash_attention.cuh) rather than
// the materialized softmax: --attention-impl flash, or auto on a GPU of compute capability cc ≥ 8.0
// whose flash kernels cover the head size and storage type (fsize bytes). The CPU trainer's auto is
// the materialized reference.
// On the GPU the trainer and --dry-run settle auto first (trainer_attention_auto in train_gpt.cu: the
// step model's time for each path, llmc/step_model.h step_attention_times, with keel's kernels at
// their measured rates; the GEMM path only where its T x T probabilities fit), and set
// attention_impl to the path chosen. An auto nothing settled means flash wherever it is covered:
// the path that needs less memory.
static inline bool gpt_attention_flash(const GPTConfig* cfg, size_t fsize, bool gpu, int cc = 80) {
    if (cfg->attention_impl == ATTN_IMPL_FLASH) return true;
    return cfg->attention_impl == ATTN_IMPL_AUTO && gpu && cc >= 80 && flash_attention_gpu_supported(cfg->channels / cfg->num_heads, fsize);
}
// Whether the GeLU ops (matmul_forward_gelu, matmul_backward_gelu) fuse the GeLU into cuBLASLt's
// epilogues: --gelu-fusion on, or auto on a GPU of compute capability cc ≥ 9.0 (llm.c measured the
// fused GEMM faster on H100 and slower on an RTX 4090, sm_89: cuda/matmul.cuh). The CPU ops compute
// the same values either way.
static inline bool gpt_gelu_fusion(const GPTConfig* cfg, bool gpu, int cc) {
    return cfg->gelu_fusion == GELU_FUSION_ON || (cfg->gelu_fusion == GELU_FUSION_AUTO && gpu && cc >= 90);
}
#ifdef KEEL_CUDA
static const bool GPT_ON_GPU = true;
#else
static const bool GPT_ON_GPU = false;
#endif

// The LM head runs in chunks of positions so that its logits buffer is bounded (cuda's (B·T, Vp) at
// GPT-2 124M, B=16, T=1024 in bf16 would be 1.6 GB): the positions whose logits exist at once.
// --classifier-chunk-rows n > 0: n (at most B·T); auto: all B·T on the CPU (host memory; one chunk
// keeps the reference trainer's bits), on the GPU as many rows as fit GPT_GPU_LOGITS_BYTES of this
// rank's vocabulary columns, a multiple of 128 when that many fit (whole GEMM tiles), at least one.
// A function of the configuration alone, so a run and its resume chunk alike.
static const size_t GPT_GPU_LOGITS_BYTES = (size_t)256 << 20;
static inline size_t gpt_head_rows(const GPTConfig* cfg, int B, int T, size_t fsize, bool gpu) {
    size_t BT = (size_t)B * T, Vl = (size_t)gpt_tp_dims(cfg).Vl;
    size_t rows = BT;
    if (cfg->classifier_chunk_rows > 0) rows = (size_t)cfg->classifier_chunk_rows;
    else if (gpu) rows = GPT_GPU_LOGITS_BYTES / (Vl * fsize > 0 ? Vl * fsize : 1);
    if (cfg->classifier_chunk_rows == 0 && rows >= 128) rows -= rows % 128;
    rows = rows < BT ? rows : BT;
    return rows > 0 ? rows : 1;
}

// Allocates one slot of activations for micro-batches of up to (B, T); returns the bytes.
// count_only: allocates nothing (the pointers stay null) and returns the same bytes (--dry-run).
// flash: the attention path (gpt_attention_flash): lse per layer instead of the probabilities;
// head_rows: the rows of the logits chunk (gpt_head_rows).
template <typename F>
static size_t gpt_alloc_activations(Activations<F>* a, const GPTConfig* cfg, int B, int T, bool flash, size_t head_rows,
                                    bool count_only = false) {
    TPDims td = gpt_tp_dims(cfg);  // this rank's widths of the split activations
    size_t L = gpt_stage_layers(cfg), C = cfg->channels, NH = td.NH, Vp = td.Vl, Ca = td.C, H = td.H;
    size_t BT = (size_t)B * T;
    size_t eln = (cfg->embed_layernorm || cfg->stable_embedding) && cfg->stage_first ? 1 : 0, nf = cfg->normformer ? 1 : 0;
    size_t head = cfg->stage_last ? 1 : 0;
    size_t Lr = L;  // the residual stream leaving each layer: always kept
    if (cfg->checkpoint_activations) L = L > 0 ? 1 : 0;  // the rest: one layer's worth, recomputed
    size_t bytes = 0;
    auto alloc = [&](size_t n) { bytes += n * sizeof(F); return count_only ? nullptr : gpt_alloc<F>(n); };
    auto stat = [&](size_t n) { bytes += n * sizeof(acc_t<F>); return count_only ? nullptr : gpt_alloc<acc_t<F>>(n); };  // statistics and losses
    auto ids = [&](size_t n) { bytes += n * sizeof(int); return count_only ? nullptr : gpt_alloc<int>(n); };
    auto f32 = [&](size_t n) { bytes += n * sizeof(float); return count_only ? nullptr : gpt_alloc<float>(n); };
    a->emb = alloc(eln * BT * C); a->lne_mean = stat(eln * BT); a->lne_rstd = stat(eln * BT);
    a->encoded = alloc(BT * C);
    a->ln1 = alloc(L * BT * C); a->ln1_mean = stat(L * BT); a->ln1_rstd = stat(L * BT);
    a->qkv = alloc(L * BT * 3 * Ca); a->atty = alloc(L * BT * Ca); a->att = alloc(flash ? 0 : L * B * NH * T * T);
    a->lse = f32(flash ? L * B * NH * T : 0);
    a->atty_hs = alloc(nf * L * BT * Ca); a->attproj = alloc(L * BT * C);
    a->lna = alloc(nf * L * BT * C); a->lna_mean = stat(nf * L * BT); a->lna_rstd = stat(nf * L * BT);
    a->residual2 = alloc(L * BT * C);
    a->ln2 = alloc(L * BT * C); a->ln2_mean = stat(L * BT); a->ln2_rstd = stat(L * BT);
    a->fch = alloc(L * BT * H); a->fch_act = alloc(L * BT * H);
    a->lnfc = alloc(nf * L * BT * H); a->lnfc_mean = stat(nf * L * BT); a->lnfc_rstd = stat(nf * L * BT);
    a->fcproj = alloc(L * BT * C); a->residual3 = alloc(Lr * BT * C);
    a->lnf = alloc(head * BT * C); a->lnf_mean = stat(head * BT); a->lnf_rstd = stat(head * BT);
    a->logits = alloc(head * head_rows * Vp); a->losses = stat(head * BT);
    a->inputs = ids(BT);
    a->targets = ids(BT);
    a->wte_groups = ids(cfg->stage_first ? 2 * BT + 2 : 0);
    return bytes;
}

// The gradient scratch of one layer at a time (GradScratch); count_only as above.
template <typename F> static size_t gpt_alloc_grad_scratch(GradScratch<F>* d, const GPTConfig* cfg, int B, int T, bool count_only = false) {
    TPDims td = gpt_tp_dims(cfg);
    size_t C = cfg->channels, Ca = td.C, H = td.H, BT = (size_t)B * T, nf = cfg->normformer ? 1 : 0, bytes = 0;
    auto alloc = [&](size_t n) { bytes += n * sizeof(F); return count_only ? nullptr : gpt_alloc<F>(n); };
    d->residual = alloc(BT * C); d->branch = alloc(BT * C); d->ln = alloc(BT * C); d->atty = alloc(BT * Ca);
    d->atty_hs = alloc(nf * BT * Ca); d->qkv = alloc(BT * 3 * Ca); d->fch = alloc(BT * H);
    d->fch_act = alloc(BT * H); d->lnfc = alloc(nf * BT * H);
    return bytes;
}

// The widest bias gradient (QKV, FC or a C-wide projection) and LayerNorm of a rank: what the CUDA
// ops' scratch is reserved for.
static inline size_t gpt_max_bias_width(const GPTConfig* cfg) {
    TPDims td = gpt_tp_dims(cfg);
    return std::max({3 * (size_t)td.C, (size_t)td.H, (size_t)cfg->channels});
}
static inline int gpt_max_layernorm_width(const GPTConfig* cfg) {
    TPDims td = gpt_tp_dims(cfg);
    return cfg->normformer ? std::max(td.H, cfg->channels) : cfg->channels;
}

// Device bytes of a GPU rank, by what holds them (--dry-run, llmc/planner.h).
struct GPTDeviceBytes {
    size_t params, grads, compute_copy;  // fp32 master weights, fp32 gradients, the bf16/fp16 copy
    size_t activations, grad_scratch;    // all slots; one layer's gradients
    size_t loss_log, other;              // the iteration's per-position losses; ALiBi slopes, vocabulary-parallel statistics, the checksum
    size_t op_scratch;                   // the CUDA ops' reserved scratch (llmc/ops.h) and cuBLASLt's workspace
    bool flash;                          // the attention path these count (gpt_attention_flash)
};
// What gpt_build and the training loop's loss log allocate on a GPU, computed without allocating
// (the same functions as gpt_build, count_only). fsize: the storage type's bytes (2 under
// --bf16/--fp16, 4 under --fp32); loss_slots: micro-batches per iteration on this rank.
// master: the master weights the rank keeps (gpt_build's range; < 0: all of them).
template <typename F> GPTDeviceBytes gpt_device_bytes(const GPTConfig* cfg, int B, int T, int slots, int loss_slots, int64_t master = -1) {
    ParamTable pt;
    param_table_build(&pt, cfg);
    TPDims td = gpt_tp_dims(cfg);
    size_t P = (size_t)pt.total, BT = (size_t)B * T;
    GPTDeviceBytes d;
    d.params = (master < 0 ? P : (size_t)master) * sizeof(acc_t<F>);
    d.grads = P * sizeof(acc_t<F>);
    d.compute_copy = gpt_has_compute_copy<F>() || cfg->round_bf16 ? P * sizeof(F) : 0;  // (CPU --bf16: the rounded copy)
    Activations<F> a;
    d.flash = gpt_attention_flash(cfg, sizeof(F), true);  // (--dry-run plans a GPU of compute capability ≥ 8.0)
    d.activations = (size_t)slots * gpt_alloc_activations(&a, cfg, B, T, d.flash, gpt_head_rows(cfg, B, T, sizeof(F), true), true);
    GradScratch<F> g;
    d.grad_scratch = gpt_alloc_grad_scratch(&g, cfg, B, T, true);
    d.loss_log = cfg->stage_last ? (size_t)loss_slots * BT * sizeof(acc_t<F>) : 0;
    d.other = (cfg->alibi ? td.NH * sizeof(float) : 0) + (cfg->tp_size > 1 && cfg->stage_last ? 3 * BT * sizeof(acc_t<F>) : 0) +
              sizeof(uint64_t);  // param_checksum's sum
    d.op_scratch = (d.flash ? flash_attention_gpu_scratch_bytes(B, T, td.C, td.NH) : attention_scratch_bytes(B, T, td.C, td.NH, sizeof(F))) +
                   matmul_scratch_bytes(BT, gpt_max_bias_width(cfg)) +
                   layernorm_scratch_bytes((int)BT, gpt_max_layernorm_width(cfg)) + LT_WORKSPACE_BYTES;
    return d;
}

// The activations of slot k become the ones the forward and backward use (1F1B: micro-batch mb
// lives in slot mb mod slots from its forward to its backward).
template <typename F> void gpt_use_slot(GPT<F>* m, int k) {
    m->acts = m->slots[k];
    m->inputs = m->acts.inputs;
    m->targets = m->acts.targets;
}

// Allocates parameters, gradients and activations for micro-batches of up to (B, T), with `slots`
// sets of activations (micro-batches in flight; 1 without pipeline parallelism). [master_lo,
// master_hi): the master weights this rank keeps (hi < 0: all of them); a shard needs a compute copy
// (the forward reads the whole copy; the master is only the optimizer's).
template <typename F> void gpt_build(GPT<F>* m, const GPTConfig* cfg, int B, int T, int slots = 1, int64_t master_lo = 0,
                                     int64_t master_hi = -1) {
    m->config = *cfg;
    param_table_build(&m->table, cfg);
    size_t P = (size_t)m->table.total;
    if (master_hi < 0) master_lo = 0, master_hi = (int64_t)P;
    if (master_lo < 0 || master_lo > master_hi || master_hi > (int64_t)P || (!gpt_has_compute_copy<F>() && master_hi - master_lo != (int64_t)P))
        keel_die("gpt_build: master range [%lld, %lld) of %zu parameters", (long long)master_lo, (long long)master_hi, P);
    m->master_lo = master_lo;
    m->master_hi = master_hi;
    m->params = gpt_alloc<acc_t<F>>((size_t)(master_hi - master_lo));
    if (m->params) m->params -= master_lo;  // (offsets stay the table's: params[i] for i in the range)
    m->grads = gpt_alloc<acc_t<F>>(P);
    backend_memset_zero(m->grads, P * sizeof(acc_t<F>));
    m->params_c = gpt_separate_copy(m) ? gpt_alloc<F>(P) : (F*)m->params;
    gpt_bind_views(m);
    m->B = B;
    m->T = T;
    TPDims td = gpt_tp_dims(cfg);
    size_t NH = cfg->num_heads;
    size_t BT = (size_t)B * T;
    int cc = GPT_ON_GPU ? backend_compute_capability() : 0;
    m->flash = gpt_attention_flash(cfg, sizeof(F), GPT_ON_GPU, cc);
    m->gelu_fusion = gpt_gelu_fusion(cfg, GPT_ON_GPU, cc);
    int hs = cfg->channels / cfg->num_heads;
    if (m->flash && GPT_ON_GPU && (!flash_attention_supported(hs, sizeof(F)) || cc < 80))
        keel_die_code(KEEL_EXIT_USAGE, "use --attention-impl auto or gemm",
                      "--attention-impl flash: the GPU's flash kernels cover head size 64 or 128 in bf16/fp16 on compute capability 8.0 or "
                      "newer, not head size %d in %zu-byte floats on %d.%d", hs, sizeof(F), cc / 10, cc % 10);
    m->slots.resize(slots);
    m->act_bytes = 0;
    m->head_rows = gpt_head_rows(cfg, B, T, sizeof(F), GPT_ON_GPU);
    m->logits_row0 = 0;
    for (Activations<F>& a : m->slots) m->act_bytes += gpt_alloc_activations(&a, cfg, B, T, m->flash, m->head_rows);
    gpt_use_slot(m, 0);
    gpt_alloc_grad_scratch(&m->dacts, cfg, B, T);
    m->losses_host.resize(BT);
    m->loss_log = nullptr;
    m->loss_log_rows = 0;
    m->classifier_dloss = 0.0;
    m->alibi = nullptr;
    if (cfg->alibi) {  // the slopes of the model's heads; this rank's slice
        std::vector<float> slopes(NH);
        alibi_slopes((int)NH, slopes.data());
        m->alibi = (float*)backend_malloc(td.NH * sizeof(float));
        backend_copy_to_device(m->alibi, slopes.data() + (size_t)cfg->tp_rank * td.NH, td.NH * sizeof(float));
    }
    m->dropout = {false, 0, 0};
    m->tp = nullptr;
    m->vp_stats = cfg->tp_size > 1 && cfg->stage_last ? gpt_alloc<acc_t<F>>(3 * BT) : nullptr;
    m->ids_host.resize(BT);
    m->groups_host.resize(2 * BT + 2);
    backend_upload_reserve((2 * BT + 2) * sizeof(int));  // the step's largest upload (the token groups)
    m->group_count.assign(td.Vl, 0);
    // the ops' kept scratch (CUDA: the attention products, the bias and LayerNorm column sums),
    // sized now for the largest micro-batch so that no training step allocates (CPU: nothing)
    if (m->flash) flash_attention_reserve<F>(B, T, td.C, td.NH);
    else attention_reserve<F>(B, T, td.C, td.NH);
    // the GPU's flash backward: of its kernels that give the same bytes, the faster on this device and
    // shape, timed now on the model's own buffers (written again before the first step reads them)
    if (m->flash) flash_attention_tune<F>(m->slots[0].qkv, m->slots[0].atty, m->slots[0].lse, m->dacts.qkv, B, T, td.C, td.NH);
    matmul_reserve(BT, gpt_max_bias_width(cfg));
    param_checksum((const float*)nullptr, 0);  // (reserves its 8-byte scratch: the replica checks allocate nothing later)
    layernorm_reserve((int)BT, gpt_max_layernorm_width(cfg));
}

template <typename F> void gpt_free(GPT<F>* m) {
    GradScratch<F>* d = &m->dacts;
    for (Activations<F>& sl : m->slots) {
        Activations<F>* a = &sl;
        F* bufs[] = {a->emb, a->encoded, a->ln1, a->qkv, a->atty, a->att, a->atty_hs, a->attproj, a->lna, a->residual2,
                     a->ln2, a->fch, a->fch_act, a->lnfc, a->fcproj, a->residual3, a->lnf, a->logits};
        for (F* b : bufs) backend_free(b);
        backend_free(a->lse);
        acc_t<F>* stats[] = {a->lne_mean, a->lne_rstd, a->ln1_mean, a->ln1_rstd, a->lna_mean, a->lna_rstd, a->ln2_mean,
                             a->ln2_rstd, a->lnfc_mean, a->lnfc_rstd, a->lnf_mean, a->lnf_rstd, a->losses};
        for (acc_t<F>* b : stats) backend_free(b);
        backend_free(a->inputs);
        backend_free(a->targets);
        backend_free(a->wte_groups);
    }
    F* dbufs[] = {d->residual, d->branch, d->ln, d->atty, d->atty_hs, d->qkv, d->fch, d->fch_act, d->lnfc};
    for (F* b : dbufs) backend_free(b);
    backend_free(m->params ? m->params + m->master_lo : nullptr);
    backend_free(m->grads);
    if (gpt_separate_copy(m)) backend_free(m->params_c);
    backend_free(m->alibi);
    backend_free(m->vp_stats);
    backend_free(m->loss_log);
}

// Turns dropout on for the next forward/backward of a training micro-batch whose row 0 is the
// run's sample number first_sample (off: evaluation, generation).
template <typename F> void gpt_set_dropout(GPT<F>* m, bool train, uint64_t seed, int64_t first_sample) {
    m->dropout = {train, seed, first_sample};
}

template <typename F> static inline DropoutSite gpt_dropout_site(const GPT<F>* m, double p, int layer, int kind) {
    DropoutSite d;
    d.p = m->dropout.train ? p : 0.0;
    d.seed = m->dropout.seed;
    d.site = dropout_site(layer, kind);
    d.first_sample = m->dropout.first_sample;
    return d;
}

template <typename F> static inline AttentionOpts gpt_attention_opts(const GPT<F>* m, int layer) {
    AttentionOpts o;
    o.scaling = m->config.attention_scaling;
    o.coeff = m->config.qk_layer_scaling ? (double)(layer + 1) : 1.0;  // 1-based layer number, as GPTModel
    o.alibi = m->alibi;
    o.dropout = gpt_dropout_site(m, m->config.attention_dropout, layer, DROPOUT_SITE_ATTN_PROBS);
    o.head_offset = m->config.tp_rank * gpt_tp_dims(&m->config).NH;  // masks of the model's heads
    o.round_bf16 = m->config.round_bf16;
    return o;
}

template <typename F> static inline void gpt_activation_forward(const GPT<F>* m, F* out, const F* inp, size_t N) {
    if (m->config.activation == ACT_RELU) relu_forward(out, inp, N); else gelu_forward(out, inp, N);
}
template <typename F> static inline void gpt_activation_backward(const GPT<F>* m, F* dinp, const F* dout, const F* inp, size_t N) {
    if (m->config.activation == ACT_RELU) relu_backward(dinp, dout, inp, N); else gelu_backward(dinp, dout, inp, N);
}

// Embedding: word lookup [→ LayerNorm] [+ positions] [→ dropout] into acts.encoded (docs/knobs.md#embedding-layernorm-and-stableembedding:
// the norm is on the word embedding only, positions are added after it, dropout comes last).
template <typename F> static void gpt_embed_forward(GPT<F>* m, int B, int T) {
    const GPTConfig* cfg = &m->config;
    Activations<F>* a = &m->acts;
    int C = cfg->channels;
    const F* wpe = cfg->alibi ? nullptr : m->p[P_WPE];
    size_t BTC = (size_t)B * T * C;
    double es = sizeof(F);
    if (m->table.t[P_LNEW].numel) {
        encoder_forward(a->emb, m->inputs, m->p[P_WTE], (const F*)nullptr, B, T, C);
        gpt_tp_sum(m, a->emb, BTC);  // vocabulary-parallel: each row comes from one rank, the others add 0
        gpt_mark(m, "embedding layernorm", 0, 2 * BTC * es);
        layernorm_forward(a->encoded, a->lne_mean, a->lne_rstd, a->emb, m->p[P_LNEW], m->p[P_LNEB], B * T, C);
        gpt_stored(m, a->encoded, BTC);
        if (wpe) {
            gpt_mark(m, "positions", 0, 2 * BTC * es);
            position_forward(a->encoded, wpe, B, T, C);
        }
    } else if (cfg->tp_size > 1) {
        encoder_forward(a->encoded, m->inputs, m->p[P_WTE], (const F*)nullptr, B, T, C);
        gpt_tp_sum(m, a->encoded, BTC);  // exactly the word rows (x + 0 = x), then the positions as one rank adds them
        if (wpe) {
            gpt_mark(m, "positions", 0, 2 * BTC * es);
            position_forward(a->encoded, wpe, B, T, C);
        }
    } else {
        encoder_forward(a->encoded, m->inputs, m->p[P_WTE], wpe, B, T, C);
    }
    gpt_stored(m, a->encoded, BTC);  // (the word rows alone are bf16 already: sums of one nonzero term)
    DropoutSite d = gpt_dropout_site(m, cfg->embed_dropout, -1, DROPOUT_SITE_EMBED);
    if (d.p > 0) {
        gpt_mark(m, "dropout", 0, 2 * BTC * es);
        dropout_forward(a->encoded, a->encoded, B, (size_t)T * C, &d);
    }
    gpt_stored(m, a->encoded, BTC);
}

// Backward of the embedding; d holds the gradient of acts.encoded and is used as scratch.
template <typename F> static void gpt_embed_backward(GPT<F>* m, F* d, int B, int T) {
    const GPTConfig* cfg = &m->config;
    Activations<F>* a = &m->acts;
    int C = cfg->channels;
    size_t BTC = (size_t)B * T * C;
    DropoutSite ds = gpt_dropout_site(m, cfg->embed_dropout, -1, DROPOUT_SITE_EMBED);
    if (ds.p > 0) {
        gpt_mark(m, "dropout", 0, 2.0 * BTC * sizeof(F));
        backend_memset_zero(m->dacts.branch, BTC * sizeof(F));
        dropout_backward(m->dacts.branch, d, B, (size_t)T * C, &ds);
        gpt_stored(m, m->dacts.branch, BTC);
        d = m->dacts.branch;
    }
    gpt_mark(m, "embed");  // (the position rows' gradient, and the words' scatter — after the embedding LayerNorm's if any)
    acc_t<F>* dwpe = cfg->alibi ? nullptr : m->g[P_WPE];
    // the scatter by token id and the position rows below T cover part of their tensors: zeroed first
    // when this is the iteration's first writer (the tied head on this stage wrote the word embedding's)
    gpt_grad_zero_first(m, P_WTE);
    if (dwpe) gpt_grad_zero_first(m, P_WPE);
    if (m->table.t[P_LNEW].numel) {
        if (dwpe) position_backward(dwpe, d, B, T, C);
        gpt_mark(m, "embedding layernorm", 0, 3.0 * BTC * sizeof(F));
        layernorm_backward(m->dacts.ln, m->g[P_LNEW], m->g[P_LNEB], d, a->emb, m->p[P_LNEW], a->lne_mean, a->lne_rstd, B * T, C, true,
                           gpt_grads_first(m, P_LNEW, P_LNEB));
        gpt_stored(m, m->dacts.ln, BTC);
        gpt_mark(m, "embed");
        encoder_backward(m->g[P_WTE], (acc_t<F>*)nullptr, m->dacts.ln, m->inputs, a->wte_groups, B, T, C);
    } else if (cfg->tp_size > 1) {  // the replicated positions from the whole gradient, this rank's word rows
        if (dwpe) position_backward(dwpe, d, B, T, C);
        encoder_backward(m->g[P_WTE], (acc_t<F>*)nullptr, d, m->inputs, a->wte_groups, B, T, C);
    } else {
        encoder_backward(m->g[P_WTE], dwpe, d, m->inputs, a->wte_groups, B, T, C);
    }
}

// Which layer's slice of the per-layer activations layer l uses: its own, or under
// --checkpoint-activations the one slice every layer shares (residual3 always has all layers).
template <typename F> static inline size_t gpt_act_layer(const GPT<F>* m, int l) { return m->config.checkpoint_activations ? 0 : (size_t)l; }

// A tensor-parallel sum of a buffer the GPU holds in bf16: each rank's part as the GPU stored it,
// and the sum as it stores it (gpt_stored; a plain sum otherwise).
template <typename F> static inline void gpt_tp_sum_stored(const GPT<F>* m, F* x, size_t n) {
    gpt_stored(m, x, n);
    gpt_tp_sum(m, x, n);
    gpt_stored(m, x, n);
}

// The attention's core for layer l (activation slice k): atty from qkv, through the flash kernels
// or the materialized softmax (whose probabilities att are kept), with the stores the GPU makes.
template <typename F> static void gpt_attention_core_forward(GPT<F>* m, int l, size_t k, int B, int T) {
    TPDims td = gpt_tp_dims(&m->config);
    int NH = td.NH, Ca = td.C;
    Activations<F>* a = &m->acts;
    size_t la = k * (size_t)m->B * m->T * Ca;
    F* qkv = a->qkv + 3 * la;
    F* atty = a->atty + la;
    AttentionOpts ao = gpt_attention_opts(m, m->config.stage_layer_first + l);
    // the model's FLOPs: QKᵀ and PV over the causal half, 2·hs·T(T+1)/2 each per (sample, head)
    gpt_mark(m, m->flash ? "attention (flash)" : "attention (gemm)", 2.0 * B * Ca * (double)T * (T + 1));
    if (m->flash) {
        flash_attention_forward(atty, a->lse + k * m->B * NH * m->T, qkv, B, T, Ca, NH, &ao);
    } else {
        F* att = a->att + k * m->B * NH * m->T * m->T;
        attention_forward(atty, att, qkv, B, T, Ca, NH, &ao);
        gpt_stored(m, att, (size_t)B * NH * T * T);
    }
    gpt_stored(m, atty, (size_t)B * T * Ca);
}

// sum = residual + branch, then ln = LayerNorm(sum) with (w, b) and its statistics: one pass on the
// GPU, whose LayerNorm reads the sum it stored, so under the CPU's --bf16 the two ops run apart with
// the sum rounded. Every residual add of the forward meets a LayerNorm this way: the attention
// branch's with the layer's LN2, the MLP branch's with the next layer's LN1, or with the final
// LayerNorm after the stage's last layer (gpt_layer_forward's `next`).
template <typename F, typename S>
static void gpt_residual_ln_forward(GPT<F>* m, F* sum, F* ln, S* mean, S* rstd, const F* residual, const F* branch, const F* w, const F* b,
                                    size_t BT, const char* ln_name) {
    int C = m->config.channels;
    gpt_mark(m, ln_name, 0, 4.0 * BT * C * sizeof(F));  // (two read, two written)
    if (m->config.round_bf16) {
        residual_forward(sum, residual, branch, BT * C);
        gpt_stored(m, sum, BT * C);
        layernorm_forward(ln, mean, rstd, sum, w, b, (int)BT, C);
    } else {
        residual_layernorm_forward(sum, ln, mean, rstd, residual, branch, w, b, (int)BT, C);
    }
    gpt_stored(m, ln, BT * C);
}

// What layer l's forward does with the residual stream it leaves (residual3): LN_NEXT_NONE stores it
// alone; LN_NEXT_LAYER also forms the next layer's LN1 in the same pass (that layer then starts from
// it: gpt_layer_forward's ln1_ready); LN_NEXT_FINAL the final LayerNorm (the stage's last layer on the
// last stage). The forward pass fuses; the backward's recomputation under --checkpoint-activations
// does not (its slot of the next layer's activations is the recomputed layer's own).
enum LnNext { LN_NEXT_NONE, LN_NEXT_LAYER, LN_NEXT_FINAL };

// Layer l's place in the stage's buffers, as its forward and backward branches see it: this rank's
// widths under tensor parallelism, the offsets of its activation slice (gpt_act_layer) in the
// (·,C), (·,Ca), (·,H) and per-row buffers, and the residual stream entering it.
template <typename F> struct GptLayerAt {
    int l, C, NH, Ca, H;        // NH heads of Ca channels and an MLP slice of H on this rank
    size_t BT, BTmax;           // this micro-batch's rows; the rows of an activation slot
    size_t k, lc, la, lh, lr;   // the activation slice; its offsets in (·,C), (·,Ca), (·,H), (·) buffers
    size_t CCa, CH;             // a layer's slice of the (Ca,C)-sized and (H,C)-sized weights
    F* residual;                // (B,T,C) the stream entering the layer
};
template <typename F> static GptLayerAt<F> gpt_layer_at(const GPT<F>* m, int l, int B, int T) {
    const GPTConfig* cfg = &m->config;
    TPDims td = gpt_tp_dims(cfg);
    GptLayerAt<F> at;
    at.l = l, at.C = cfg->channels, at.NH = td.NH, at.Ca = td.C, at.H = td.H;
    at.BT = (size_t)B * T, at.BTmax = (size_t)m->B * m->T;
    at.k = gpt_act_layer(m, l);
    at.lc = at.k * at.BTmax * at.C, at.la = at.k * at.BTmax * at.Ca, at.lh = at.k * at.BTmax * at.H, at.lr = at.k * at.BTmax;
    at.CCa = (size_t)at.C * at.Ca, at.CH = (size_t)at.C * at.H;
    at.residual = l == 0 ? m->acts.encoded : m->acts.residual3 + (l - 1) * at.BTmax * at.C;
    return at;
}

// Layer l's attention branch, forward: from the stream entering it (or, ln1_ready, the LN1 the
// previous layer's residual add formed) to residual2 = residual + dropout([LN_attn](proj([head
// scale](attention(qkv(ln1(residual))))))) and the LN2 of it.
template <typename F> static void gpt_attention_branch_forward(GPT<F>* m, const GptLayerAt<F>* at, int B, int T, bool ln1_ready) {
    const GPTConfig* cfg = &m->config;
    int l = at->l, C = at->C, NH = at->NH, Ca = at->Ca;
    size_t BT = at->BT, BTC = BT * C, lc = at->lc, la = at->la, lr = at->lr, CCa = at->CCa;
    Activations<F>* a = &m->acts;
    F** p = m->p;
    bool nf = cfg->normformer;
    double es = sizeof(F);
    F* ln1 = a->ln1 + lc; F* qkv = a->qkv + 3 * la; F* atty = a->atty + la; F* attproj = a->attproj + lc;
    if (!ln1_ready) {  // (else the previous layer's residual add formed it)
        gpt_mark(m, "ln1", 0, 2 * BTC * es);
        layernorm_forward(ln1, a->ln1_mean + lr, a->ln1_rstd + lr, at->residual, p[P_LN1W] + l * C, p[P_LN1B] + l * C, (int)BT, C);
        gpt_stored(m, ln1, BTC);
    }
    gpt_mark(m, "qkv matmul", 2.0 * BT * C * 3 * Ca);
    matmul_forward(qkv, ln1, p[P_QKVW] + l * 3 * CCa, p[P_QKVB] + l * 3 * Ca, (int)BT, C, 3 * Ca);  // column-parallel
    gpt_stored(m, qkv, BT * 3 * Ca);
    gpt_attention_core_forward(m, l, at->k, B, T);
    F* attin = atty;
    if (nf) {
        attin = a->atty_hs + la;
        gpt_mark(m, "head scale", 0, 2 * BT * Ca * es);
        headscale_forward(attin, atty, p[P_HEADSCALE] + l * NH, (int)BT, Ca, NH);
        gpt_stored(m, attin, BT * Ca);
    }
    // row-parallel layers add their bias once, on tensor-parallel rank 0, into the sum over ranks
    bool bias_here = cfg->tp_rank == 0;
    gpt_mark(m, "attproj matmul", 2.0 * BT * Ca * C);
    matmul_forward(attproj, attin, p[P_ATTPROJW] + l * CCa, bias_here ? p[P_ATTPROJB] + l * C : nullptr, (int)BT, Ca, C);  // row-parallel
    gpt_tp_sum_stored(m, attproj, BTC);
    F* branch = attproj;
    if (nf) {
        branch = a->lna + lc;
        gpt_mark(m, "ln attn", 0, 2 * BTC * es);
        layernorm_forward(branch, a->lna_mean + lr, a->lna_rstd + lr, attproj, p[P_LNAW] + l * C, p[P_LNAB] + l * C, (int)BT, C);
        gpt_stored(m, branch, BTC);
    }
    DropoutSite d = gpt_dropout_site(m, cfg->hidden_dropout, cfg->stage_layer_first + l, DROPOUT_SITE_ATTN_OUT);
    if (d.p > 0) {
        gpt_mark(m, "dropout", 0, 2 * BTC * es);
        dropout_forward(branch, branch, B, (size_t)T * C, &d);
    }
    gpt_stored(m, branch, BTC);
    gpt_residual_ln_forward(m, a->residual2 + lc, a->ln2 + lc, a->ln2_mean + lr, a->ln2_rstd + lr, at->residual, branch, p[P_LN2W] + l * C,
                            p[P_LN2B] + l * C, BT, "residual + ln2");
}

// Layer l's MLP branch, forward: residual3 = residual2 + dropout(proj([LN_fc](act(fc(ln2))))), with
// the LayerNorm that follows it fused in as `next` says.
template <typename F> static void gpt_mlp_branch_forward(GPT<F>* m, const GptLayerAt<F>* at, int B, int T, LnNext next) {
    const GPTConfig* cfg = &m->config;
    int l = at->l, C = at->C, H = at->H;
    size_t BT = at->BT, BTC = BT * C, lc = at->lc, lh = at->lh, lr = at->lr, CH = at->CH;
    Activations<F>* a = &m->acts;
    F** p = m->p;
    double es = sizeof(F);
    F* ln2 = a->ln2 + lc; F* residual2 = a->residual2 + lc; F* fch = a->fch + lh; F* fch_act = a->fch_act + lh; F* fcproj = a->fcproj + lc;
    F* residual3 = a->residual3 + l * at->BTmax * C;
    // column-parallel; GeLU: one op, on the GPU one GEMM whose epilogue also keeps fch for the backward
    if (cfg->activation == ACT_GELU) {  // (the GPU's GeLU reads the fp32 product when fused, the bf16 one when not)
        gpt_mark(m, "fc matmul + gelu", 2.0 * BT * C * H);
        matmul_forward_gelu(fch_act, fch, ln2, p[P_FCW] + l * CH, p[P_FCB] + l * H, (int)BT, C, H, m->gelu_fusion);
    } else {
        gpt_mark(m, "fc matmul", 2.0 * BT * C * H);
        matmul_forward(fch, ln2, p[P_FCW] + l * CH, p[P_FCB] + l * H, (int)BT, C, H);
        gpt_stored(m, fch, BT * H);
        gpt_mark(m, "activation", 0, 2 * BT * H * es);
        gpt_activation_forward(m, fch_act, fch, BT * H);
    }
    gpt_stored(m, fch, BT * H);
    gpt_stored(m, fch_act, BT * H);
    F* fcin = fch_act;
    if (cfg->normformer) {
        fcin = a->lnfc + lh;
        gpt_mark(m, "ln fc", 0, 2 * BT * H * es);
        layernorm_forward(fcin, a->lnfc_mean + lr, a->lnfc_rstd + lr, fch_act, p[P_LNFCW] + l * H, p[P_LNFCB] + l * H, (int)BT, H);
        gpt_stored(m, fcin, BT * H);
    }
    bool bias_here = cfg->tp_rank == 0;  // (row-parallel: the bias once, into the sum over ranks)
    gpt_mark(m, "fcproj matmul", 2.0 * BT * H * C);
    matmul_forward(fcproj, fcin, p[P_FCPROJW] + l * CH, bias_here ? p[P_FCPROJB] + l * C : nullptr, (int)BT, H, C);  // row-parallel
    gpt_stored(m, fcproj, BTC);
    gpt_tp_sum(m, fcproj, BTC);
    DropoutSite d = gpt_dropout_site(m, cfg->hidden_dropout, cfg->stage_layer_first + l, DROPOUT_SITE_MLP_OUT);
    if (d.p > 0) {
        gpt_mark(m, "dropout", 0, 2 * BTC * es);
        dropout_forward(fcproj, fcproj, B, (size_t)T * C, &d);
    }
    gpt_stored(m, fcproj, BTC);
    if (next == LN_NEXT_LAYER) {  // residual3 and layer l + 1's ln1
        size_t k1 = gpt_act_layer(m, l + 1), lc1 = k1 * at->BTmax * C, lr1 = k1 * at->BTmax;
        gpt_residual_ln_forward(m, residual3, a->ln1 + lc1, a->ln1_mean + lr1, a->ln1_rstd + lr1, residual2, fcproj, p[P_LN1W] + (l + 1) * C,
                                p[P_LN1B] + (l + 1) * C, BT, "residual + next ln1");
    } else if (next == LN_NEXT_FINAL) {  // residual3 and the final LayerNorm
        gpt_residual_ln_forward(m, residual3, a->lnf, a->lnf_mean, a->lnf_rstd, residual2, fcproj, p[P_LNFW], p[P_LNFB], BT, "residual + lnf");
    } else {
        gpt_mark(m, "residual", 0, 3 * BTC * es);
        residual_forward(residual3, residual2, fcproj, BTC);
    }
    gpt_stored(m, residual3, BTC);
}

// Layer l of the stage, forward: reads the residual stream entering it, writes its activations and
// the stream leaving it (residual3 of layer l).
template <typename F> static void gpt_layer_forward(GPT<F>* m, int l, int B, int T, LnNext next = LN_NEXT_NONE, bool ln1_ready = false) {
    GptLayerAt<F> at = gpt_layer_at(m, l, B, T);
    gpt_attention_branch_forward(m, &at, B, T, ln1_ready);
    gpt_mlp_branch_forward(m, &at, B, T, next);
}

// The mean of n per-position losses, added in position order in double.
template <typename S> static inline double gpt_mean_loss(const S* losses, size_t n) {
    double sum = 0;  // fixed order: position 0 .. n-1
    for (size_t i = 0; i < n; i++) sum += (double)losses[i];
    return sum / (double)n;
}

// The LM head and its loss for positions [r0, r0 + n) (one chunk of gpt_head_rows): the chunk's
// logits into acts.logits, the fused classifier's losses into losses[0..n); dloss ≠ 0 (training):
// the classifier turns the logits into dlogits (cpu/classifier.h: the probabilities are never
// stored) and the head's backward runs here, while the chunk's dlogits exist: the input gradient
// into rows [r0, r0 + n) of dacts.ln, the tied word embedding's gradient added into g[P_WTE]
// (chunk by chunk in position order: one chunk gives the unchunked sums' bits).
template <typename F> static void gpt_head_chunk(GPT<F>* m, size_t r0, size_t n, acc_t<F>* losses, double dloss) {
    const GPTConfig* cfg = &m->config;
    TPDims td = gpt_tp_dims(cfg);
    int C = cfg->channels, V = cfg->vocab_size, Vp = gpt_vocab_rows(cfg);
    Activations<F>* a = &m->acts;
    const F* lnf = a->lnf + r0 * C;
    const int* targets = m->targets + r0;
    double es = sizeof(F);
    gpt_mark(m, "lm head matmul", 2.0 * n * C * td.Vl);
    matmul_forward(a->logits, lnf, m->p[P_WTE], (const F*)nullptr, (int)n, C, td.Vl);  // this rank's vocabulary columns
    gpt_stored(m, a->logits, n * td.Vl);
    // the logits read (and their gradient written); under tensor parallelism three passes, each its own mark
    if (cfg->tp_size == 1) gpt_mark(m, "classifier", 0, (dloss != 0.0 ? 2.0 : 1.0) * n * td.Vl * es);
    else gpt_mark(m, "classifier", 0, (double)n * td.Vl * es);
    if (cfg->tp_size == 1) {
        classifier_forward(losses, a->logits, targets, (int)n, V, Vp, (acc_t<F>)dloss);
    } else {  // vocabulary-parallel cross-entropy (cpu/classifier.h): max, then Σ exp and the target's logit, over ranks
        acc_t<F>* rowmax = m->vp_stats;
        acc_t<F>* stats = m->vp_stats + n;
        vocab_parallel_max(rowmax, a->logits, (int)n, td.Vr, td.Vl);
        gpt_tp_max(m, rowmax, n);
        gpt_mark(m, "classifier", 0, (double)n * td.Vl * es);
        vocab_parallel_sumexp(stats, a->logits, targets, rowmax, (int)n, td.Vr, td.Vl);
        gpt_tp_sum(m, stats, 2 * n);
        gpt_mark(m, "classifier", 0, (dloss != 0.0 ? 2.0 : 0.0) * n * td.Vl * es);  // (the gradient: the logits read, written)
        vocab_parallel_finish(losses, a->logits, stats, rowmax, targets, (acc_t<F>)dloss, (int)n, td.Vr, td.Vl);
    }
    if (dloss != 0.0) {
        gpt_stored(m, a->logits, n * td.Vl);  // the classifier left the logits' gradient there
        double t0 = m->clock ? m->clock(m->clock_ctx) : 0;
        op_mark(m->op_times, "bwd", "lm head matmul", 4.0 * n * C * td.Vl);  // (the backward's, run here)
        // the chunk's rows of d(lnf) written (the chunks cover every position); the word embedding's
        // gradient written by the iteration's first chunk, added by the others
        matmul_backward(m->dacts.ln + r0 * C, m->g[P_WTE], (acc_t<F>*)nullptr, a->logits, lnf, m->p[P_WTE], (int)n, C, td.Vl, true,
                        gpt_grad_first(m, P_WTE));
        gpt_stored(m, m->dacts.ln + r0 * C, n * C);
        if (m->clock) m->head_backward_ms += m->clock(m->clock_ctx) - t0;
    }
}

// Forward pass over tokens (B,T) with B·T within the allocated shape. With targets, computes the
// per-position losses and returns their mean; without (generation), leaves the logits of the last
// gpt_head_rows positions (gpt_logits_row_to_host) and returns 0.
// dloss ≠ 0 (training): the LM head's part of the backward runs here, chunk by chunk
// (gpt_head_chunk: the logits exist for one chunk at a time), for the gpt_backward(…, dloss) that
// follows; the word embedding's gradient has then already received the head's part.
// loss_slot ≥ 0 (training): the losses stay on the device in slot loss_slot of the loss log
// (gpt_loss_log_reserve) and the function returns 0 without waiting for the GPU; gpt_losses_read
// fetches every slot of the iteration at once.
// The activation layout keeps the allocated stride, so a shorter T (curriculum, sampling) works.
//
// One layer (pre-LN GPT-2; [..] only under its knob):
//   x → LN1 → QKV → attention → [head scale] → out-proj → [LN_attn] → [dropout] → + x = r2
//   r2 → LN2 → FC → GeLU/ReLU → [LN_fc] → proj → [dropout] → + r2 = r3
//
// Pipeline stages (GPTConfig::stage_*): the first stage starts from the tokens; a later stage starts
// from acts.encoded, which the caller has filled with the previous stage's output (inputs_host is
// then unused). The last stage ends with the loss; an earlier one ends at gpt_stage_output (no
// targets needed, returns 0). Layer l of the stage is layer stage_layer_first + l of the model: its
// dropout masks and layer-scaling coefficient are the ones it has without pipeline parallelism.
template <typename F>
double gpt_forward(GPT<F>* m, const int* inputs_host, const int* targets_host, int B, int T, double dloss = 0.0, int loss_slot = -1) {
    const GPTConfig* cfg = &m->config;
    int L = gpt_stage_layers(cfg);
    int C = cfg->channels, V = cfg->vocab_size;
    if (B * T > m->B * m->T || T > m->T) keel_die("gpt_forward: batch (%d,%d) exceeds the allocated (%d,%d)", B, T, m->B, m->T);
    size_t BT = (size_t)B * T;
    Activations<F>* a = &m->acts;
    F** p = m->p;
    TPDims td = gpt_tp_dims(cfg);
    m->op_phase = "fwd";
    if (cfg->stage_first) {
        gpt_mark(m, "embed");  // (with the ids' upload and the word-embedding gradient's token groups)
        for (size_t i = 0; i < BT; i++)
            if (inputs_host[i] < 0 || inputs_host[i] >= V) keel_die("token id %d at position %zu is outside [0, %d)", inputs_host[i], i, V);
        gpt_ids_to_device(m, m->inputs, inputs_host, BT, true);
        // the word-embedding gradient's token groups, from the ids as this rank numbers them
        const int* local = cfg->tp_size == 1 ? inputs_host : m->ids_host.data();
        int used = encoder_token_groups(m->groups_host.data(), local, (int)BT, &m->group_count);
        backend_upload(a->wte_groups, m->groups_host.data(), (size_t)used * sizeof(int));
        gpt_embed_forward(m, B, T);
    }
    for (int l = 0; l < L; l++)  // each residual add with the LayerNorm after it (LnNext)
        gpt_layer_forward(m, l, B, T, l + 1 < L ? LN_NEXT_LAYER : cfg->stage_last ? LN_NEXT_FINAL : LN_NEXT_NONE, l > 0);
    if (!cfg->stage_last) return 0.0;
    if (L == 0) {  // (a stage without layers: the final LayerNorm on the embeddings)
        gpt_mark(m, "lnf", 0, 2.0 * BT * C * sizeof(F));
        layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->encoded, p[P_LNFW], p[P_LNFB], (int)BT, C);
        gpt_stored(m, a->lnf, BT * C);
    }
    if (!targets_host) {  // generation: the logits of the last head_rows positions (the next token's row among them)
        size_t r0 = BT > m->head_rows ? BT - m->head_rows : 0;
        matmul_forward(a->logits, a->lnf + r0 * C, p[P_WTE], (const F*)nullptr, (int)(BT - r0), C, td.Vl);
        gpt_stored(m, a->logits, (BT - r0) * td.Vl);
        m->logits_row0 = r0;
        return 0.0;
    }
    op_mark(m->op_times, "host", "targets");  // (their check, and the upload)
    for (size_t i = 0; i < BT; i++)
        if (targets_host[i] < 0 || targets_host[i] >= V) keel_die("target id %d at position %zu is outside [0, %d)", targets_host[i], i, V);
    gpt_ids_to_device(m, m->targets, targets_host, BT, false);
    if (loss_slot >= 0 && (size_t)(loss_slot + 1) * BT > m->loss_log_rows)
        keel_die("gpt_forward: loss slot %d of %zu positions is beyond the loss log's %zu rows", loss_slot, BT, m->loss_log_rows);
    acc_t<F>* losses = loss_slot >= 0 ? m->loss_log + (size_t)loss_slot * BT : a->losses;
    m->classifier_dloss = dloss;
    for (size_t r0 = 0; r0 < BT; r0 += m->head_rows) gpt_head_chunk(m, r0, std::min(m->head_rows, BT - r0), losses + r0, dloss);
    if (loss_slot >= 0) return 0.0;
    backend_copy_to_host(m->losses_host.data(), losses, BT * sizeof(acc_t<F>));
    return gpt_mean_loss(m->losses_host.data(), BT);
}

// Room for `slots` micro-batches of (B,T) losses in the loss log (allocates only when it grows:
// the first iteration, or a batch-size ramp-up step).
template <typename F> void gpt_loss_log_reserve(GPT<F>* m, int slots, int B, int T) {
    size_t rows = (size_t)slots * B * T;
    if (rows <= m->loss_log_rows) return;
    backend_free(m->loss_log);
    m->loss_log = gpt_alloc<acc_t<F>>(rows);
    m->loss_log_rows = rows;
}

// The mean loss of each of the first `slots` micro-batches of the loss log: one copy to the host.
template <typename F> std::vector<double> gpt_losses_read(GPT<F>* m, int slots, int B, int T) {
    size_t BT = (size_t)B * T;
    std::vector<acc_t<F>> host((size_t)slots * BT);
    backend_copy_to_host(host.data(), m->loss_log, host.size() * sizeof(acc_t<F>));
    std::vector<double> means(slots);
    for (int k = 0; k < slots; k++) means[k] = gpt_mean_loss(host.data() + k * BT, BT);
    return means;
}

// Token ids (inputs) or targets to the device; under tensor parallelism as this rank's local numbers:
// id - v0 (targets: any value, only [0, Vr) is a local column; inputs: -1 for another rank's row).
template <typename F> static void gpt_ids_to_device(GPT<F>* m, int* dst, const int* ids, size_t n, bool inputs) {
    if (m->config.tp_size == 1) {
        backend_upload(dst, ids, n * sizeof(int));
        return;
    }
    TPDims td = gpt_tp_dims(&m->config);
    for (size_t i = 0; i < n; i++) {
        int local = ids[i] - td.v0;
        m->ids_host[i] = inputs && (local < 0 || local >= td.Vl) ? -1 : local;
    }
    backend_upload(dst, m->ids_host.data(), n * sizeof(int));
}

// The activation a stage hands to the next one: (B,T,C), the residual stream leaving its last layer
// (contiguous for any B·T within the allocation). Its gradient comes back into gpt_stage_grad.
template <typename F> F* gpt_stage_output(const GPT<F>* m) {
    int L = gpt_stage_layers(&m->config);
    return L > 0 ? m->acts.residual3 + (size_t)(L - 1) * m->B * m->T * m->config.channels : m->acts.encoded;
}
// Where gpt_backward of a stage that is not the last expects the gradient of gpt_stage_output (the
// caller fills it, B·T·C values), and where any stage but the first leaves the gradient of its
// input (acts.encoded) for the previous stage.
template <typename F> F* gpt_stage_grad(const GPT<F>* m) { return m->dacts.residual; }

// Row `row` of the last forward's logits, as fp32 on the host (text samples): Vp values, or under
// tensor parallelism this rank's Vp/T columns.
template <typename F> void gpt_logits_row_to_host(const GPT<F>* m, size_t row, float* out) {
    size_t Vp = gpt_tp_dims(&m->config).Vl;
    if (row < m->logits_row0 || row - m->logits_row0 >= m->head_rows)
        keel_die("gpt_logits_row_to_host: position %zu is not among the %zu whose logits the last forward kept (from %zu)", row,
                 m->head_rows, m->logits_row0);
    row -= m->logits_row0;
    if constexpr (std::is_same<F, float>::value) {
        backend_copy_to_host(out, m->acts.logits + row * Vp, Vp * sizeof(float));
    } else {
        std::vector<F> tmp(Vp);
        backend_copy_to_host(tmp.data(), m->acts.logits + row * Vp, Vp * sizeof(F));
        for (size_t j = 0; j < Vp; j++) out[j] = (float)to_f32(tmp[j]);
    }
}

// Backward of a branch's dropout: returns the gradient of the branch before its dropout (dout
// itself when dropout is off).
template <typename F> static F* gpt_dropout_backward(GPT<F>* m, F* dout, int B, int T, const DropoutSite* d) {
    if (d->p <= 0) return dout;
    size_t N = (size_t)B * T * m->config.channels;
    gpt_mark(m, "dropout", 0, 2.0 * N * sizeof(F));
    backend_memset_zero(m->dacts.branch, N * sizeof(F));
    dropout_backward(m->dacts.branch, dout, B, (size_t)T * m->config.channels, d);
    gpt_stored(m, m->dacts.branch, N);
    return m->dacts.branch;
}

// Backward pass of the last gpt_forward (with targets); gradients are ADDED into m->grads, so
// micro-batches accumulate. dloss is each position's weight in the loss being differentiated
// (1 / positions in the global batch for the mean loss).
// Backward of the LM head (the last stage): from the final LayerNorm's output gradient the
// forward's chunks left in d->ln (gpt_head_chunk) to the gradient of the stage output in d->residual.
template <typename F> static void gpt_head_backward(GPT<F>* m, int B, int T, double dloss) {
    int C = m->config.channels;
    size_t BT = (size_t)B * T;
    Activations<F>* a = &m->acts;
    GradScratch<F>* d = &m->dacts;
    F** p = m->p;
    acc_t<F>** g = m->g;
    // the forward's chunks left the gradient of the final LayerNorm's output in d->ln (gpt_head_chunk)
    if (m->classifier_dloss != dloss)
        keel_die("gpt_backward: the forward's fused classifier used dloss %.9g, not %.9g (pass dloss to gpt_forward)",
                 m->classifier_dloss, dloss);
    gpt_tp_sum(m, d->ln, BT * C);  // each rank's vocabulary columns contributed a part
    gpt_stored(m, d->ln, BT * C);
    F* last = gpt_stage_output(m);  // (the LayerNorm writes d->residual: nothing zeroed first)
    gpt_mark(m, "lnf", 0, 3.0 * BT * C * sizeof(F));
    layernorm_backward(d->residual, g[P_LNFW], g[P_LNFB], d->ln, last, p[P_LNFW], a->lnf_mean, a->lnf_rstd, (int)BT, C, true,
                       gpt_grads_first(m, P_LNFW, P_LNFB));
    gpt_stored(m, d->residual, BT * C);
}

// Backward of the attention's core for layer l (activation slice k): the gradient of qkv, all of
// d->qkv, from the gradient of atty in d->atty.
template <typename F> static void gpt_attention_core_backward(GPT<F>* m, int l, size_t k, int B, int T) {
    TPDims td = gpt_tp_dims(&m->config);
    int NH = td.NH, Ca = td.C;
    Activations<F>* a = &m->acts;
    GradScratch<F>* d = &m->dacts;
    size_t la = k * (size_t)m->B * m->T * Ca, BT = (size_t)B * T;
    AttentionOpts ao = gpt_attention_opts(m, m->config.stage_layer_first + l);
    gpt_mark(m, m->flash ? "attention (flash)" : "attention (gemm)", 4.0 * B * Ca * (double)T * (T + 1));  // (dV, dP, dQ, dK)
    // (each writes all of d->qkv)
    if (m->flash)
        flash_attention_backward(d->qkv, d->atty, a->qkv + 3 * la, a->atty + la, a->lse + k * m->B * NH * m->T, B, T, Ca, NH, &ao, true);
    else
        attention_backward(d->qkv, d->atty, a->qkv + 3 * la, a->att + k * m->B * NH * m->T * m->T, B, T, Ca, NH, &ao, true);
    gpt_stored(m, d->qkv, BT * 3 * Ca);
}

// Zero n elements of a gradient buffer some op then adds into.
template <typename F> static inline void gpt_zero(F* x, size_t n) { backend_memset_zero(x, n * sizeof(F)); }

// Layer l's MLP branch, backward: residual3 = residual2 + dropout(proj([LN_fc](act(fc(ln2(residual2)))))).
// From the gradient of residual3 in d->residual to the gradient of residual2 there (LN2's backward
// adds the branch's part to the stream's own).
template <typename F> static void gpt_mlp_branch_backward(GPT<F>* m, const GptLayerAt<F>* at, int B, int T) {
    const GPTConfig* cfg = &m->config;
    int l = at->l, C = at->C, H = at->H;
    size_t BT = at->BT, lc = at->lc, lh = at->lh, lr = at->lr, CH = at->CH;
    Activations<F>* a = &m->acts;
    GradScratch<F>* d = &m->dacts;
    F** p = m->p;
    acc_t<F>** g = m->g;
    bool nf = cfg->normformer;
    double es = sizeof(F);
    DropoutSite ds = gpt_dropout_site(m, cfg->hidden_dropout, cfg->stage_layer_first + l, DROPOUT_SITE_MLP_OUT);
    F* dbranch = gpt_dropout_backward(m, d->residual, B, T, &ds);
    F* fcin = nf ? a->lnfc + lh : a->fch_act + lh;
    // row-parallel: the whole output gradient on every rank; the bias gradient on every rank too
    if (cfg->activation == ACT_GELU && !nf) {
        // GeLU's derivative applied to the projection's input gradient in one op (on the GPU one GEMM,
        // the DGELU epilogue); d->fch_act is the op's scratch
        // (the GPU stores the scratch d->fch_act in bf16 only when unfused; here it stays fp32)
        gpt_mark(m, "fcproj matmul + dgelu", 4.0 * BT * H * C);
        matmul_backward_gelu(d->fch, d->fch_act, g[P_FCPROJW] + l * CH, g[P_FCPROJB] + l * C, dbranch, fcin, p[P_FCPROJW] + l * CH,
                             a->fch + lh, (int)BT, H, C, m->gelu_fusion, gpt_grads_first(m, P_FCPROJW, P_FCPROJB, l));
    } else {  // ReLU, or --normformer: there the activation's gradient comes out of LN_fc's backward, not out of a GEMM
        F* dfcin = nf ? d->lnfc : d->fch_act;
        gpt_mark(m, "fcproj matmul", 4.0 * BT * H * C);
        if (nf) gpt_zero(d->fch_act, BT * H);  // (LN_fc's backward adds into it; the matmul writes dfcin)
        matmul_backward(dfcin, g[P_FCPROJW] + l * CH, g[P_FCPROJB] + l * C, dbranch, fcin, p[P_FCPROJW] + l * CH, (int)BT, H, C, true,
                        gpt_grads_first(m, P_FCPROJW, P_FCPROJB, l));
        gpt_stored(m, dfcin, BT * H);
        if (nf) gpt_mark(m, "ln fc", 0, 3.0 * BT * H * es);  // (into a zeroed gradient: nothing to read back)
        if (nf)
            layernorm_backward(d->fch_act, g[P_LNFCW] + l * H, g[P_LNFCB] + l * H, d->lnfc, a->fch_act + lh, p[P_LNFCW] + l * H,
                               a->lnfc_mean + lr, a->lnfc_rstd + lr, (int)BT, H, false, gpt_grads_first(m, P_LNFCW, P_LNFCB, l));
        gpt_stored(m, d->fch_act, BT * H);
        gpt_mark(m, "activation", 0, 3.0 * BT * H * es);
        gpt_zero(d->fch, BT * H);
        gpt_activation_backward(m, d->fch, d->fch_act, a->fch + lh, BT * H);
    }
    gpt_stored(m, d->fch, BT * H);
    gpt_mark(m, "fc matmul", 4.0 * BT * C * H);
    matmul_backward(d->ln, g[P_FCW] + l * CH, g[P_FCB] + l * H, d->fch, a->ln2 + lc, p[P_FCW] + l * CH, (int)BT, C, H, true,
                    gpt_grads_first(m, P_FCW, P_FCB, l));
    gpt_tp_sum_stored(m, d->ln, BT * C);  // column-parallel: the input gradient is the sum of the ranks' parts
    gpt_mark(m, "ln2", 0, 4.0 * BT * C * es);  // (dout and the input read, the gradient read and written)
    layernorm_backward(d->residual, g[P_LN2W] + l * C, g[P_LN2B] + l * C, d->ln, a->residual2 + lc,
                       p[P_LN2W] + l * C, a->ln2_mean + lr, a->ln2_rstd + lr, (int)BT, C, false, gpt_grads_first(m, P_LN2W, P_LN2B, l));
    gpt_stored(m, d->residual, BT * C);
}

// Layer l's attention branch, backward: residual2 = residual + dropout([LN_attn](proj([head
// scale](attention(qkv(ln1(residual))))))). From the gradient of residual2 in d->residual to the
// gradient of the stream entering the layer there.
template <typename F> static void gpt_attention_branch_backward(GPT<F>* m, const GptLayerAt<F>* at, int B, int T) {
    const GPTConfig* cfg = &m->config;
    int l = at->l, C = at->C, NH = at->NH, Ca = at->Ca;
    size_t BT = at->BT, lc = at->lc, la = at->la, lr = at->lr, CCa = at->CCa;
    Activations<F>* a = &m->acts;
    GradScratch<F>* d = &m->dacts;
    F** p = m->p;
    acc_t<F>** g = m->g;
    bool nf = cfg->normformer;
    double es = sizeof(F);
    DropoutSite ds = gpt_dropout_site(m, cfg->hidden_dropout, cfg->stage_layer_first + l, DROPOUT_SITE_ATTN_OUT);
    F* dbranch = gpt_dropout_backward(m, d->residual, B, T, &ds);
    if (nf) {  // d->ln is free here: the LayerNorm's input gradient goes there
        gpt_mark(m, "ln attn", 0, 3.0 * BT * C * es);  // (into a zeroed gradient)
        gpt_zero(d->ln, BT * C);
        layernorm_backward(d->ln, g[P_LNAW] + l * C, g[P_LNAB] + l * C, dbranch, a->attproj + lc, p[P_LNAW] + l * C,
                           a->lna_mean + lr, a->lna_rstd + lr, (int)BT, C, false, gpt_grads_first(m, P_LNAW, P_LNAB, l));
        gpt_stored(m, d->ln, BT * C);
        dbranch = d->ln;
    }
    F* attin = nf ? a->atty_hs + la : a->atty + la;
    F* dattin = nf ? d->atty_hs : d->atty;
    gpt_mark(m, "attproj matmul", 4.0 * BT * Ca * C);
    if (nf) gpt_zero(d->atty, BT * Ca);  // (the head scale's backward adds into it; the matmul writes dattin)
    matmul_backward(dattin, g[P_ATTPROJW] + l * CCa, g[P_ATTPROJB] + l * C, dbranch, attin, p[P_ATTPROJW] + l * CCa,
                    (int)BT, Ca, C, true, gpt_grads_first(m, P_ATTPROJW, P_ATTPROJB, l));
    gpt_stored(m, dattin, BT * Ca);
    if (nf) {
        gpt_mark(m, "head scale", 0, 3.0 * BT * Ca * es);
        gpt_grad_zero_first(m, P_HEADSCALE, l);
        headscale_backward(d->atty, g[P_HEADSCALE] + l * NH, d->atty_hs, a->atty + la, p[P_HEADSCALE] + l * NH, (int)BT, Ca, NH);
        gpt_stored(m, d->atty, BT * Ca);
    }
    gpt_attention_core_backward(m, l, at->k, B, T);  // d->atty → d->qkv
    gpt_mark(m, "qkv matmul", 4.0 * BT * C * 3 * Ca);
    matmul_backward(d->ln, g[P_QKVW] + l * 3 * CCa, g[P_QKVB] + l * 3 * Ca, d->qkv, a->ln1 + lc, p[P_QKVW] + l * 3 * CCa,
                    (int)BT, C, 3 * Ca, true, gpt_grads_first(m, P_QKVW, P_QKVB, l));
    gpt_tp_sum_stored(m, d->ln, BT * C);
    gpt_mark(m, "ln1", 0, 4.0 * BT * C * es);
    layernorm_backward(d->residual, g[P_LN1W] + l * C, g[P_LN1B] + l * C, d->ln, at->residual, p[P_LN1W] + l * C,
                       a->ln1_mean + lr, a->ln1_rstd + lr, (int)BT, C, false, gpt_grads_first(m, P_LN1W, P_LN1B, l));
    gpt_stored(m, d->residual, BT * C);
}

// Backward of layer l of the stage: d->residual holds the gradient of its output and receives the
// gradient of its input; parameter gradients are written or added into m->grads (gpt_grad_first).
template <typename F> static void gpt_layer_backward(GPT<F>* m, int l, int B, int T) {
    // --checkpoint-activations: the layer's forward again, from its kept input; the same ops on
    // the same inputs with the same dropout masks give the same bytes as the first time (its LN1
    // and last residual add run apart here, fused the first time: the fused pass gives the two ops'
    // bytes, test_cuda_layers)
    if (m->config.checkpoint_activations) {
        m->op_phase = "recompute";
        gpt_layer_forward(m, l, B, T);
        m->op_phase = "bwd";
    }
    GptLayerAt<F> at = gpt_layer_at(m, l, B, T);
    gpt_mlp_branch_backward(m, &at, B, T);
    gpt_attention_branch_backward(m, &at, B, T);
}

// layer_done (or null): called after the backward of each stage layer l (from the last to the first)
// with layer_ctx — the data-parallel reduction's hook: the layer's gradients are complete there on
// the last micro-batch (llmc/optimizer.h grad_reducer_layer_done).
template <typename F> void gpt_backward(GPT<F>* m, int B, int T, double dloss, void (*layer_done)(void*, int) = nullptr,
                                        void* layer_ctx = nullptr) {
    const GPTConfig* cfg = &m->config;
    m->op_phase = "bwd";
    // the last stage starts from the loss; any other from the gradient of gpt_stage_output, which
    // the caller put in d->residual (gpt_stage_grad)
    if (cfg->stage_last) gpt_head_backward(m, B, T, dloss);
    for (int l = gpt_stage_layers(cfg) - 1; l >= 0; l--) {
        gpt_layer_backward(m, l, B, T);
        gpt_grads_settle(m, l);  // (before the reduction hook reads the layer's gradients)
        if (layer_done) {
            op_mark(m->op_times, "step", "gradient reduction");  // (the GPU: issued to the communication stream)
            layer_done(layer_ctx, l);
        }
    }
    if (cfg->stage_first) gpt_embed_backward(m, m->dacts.residual, B, T);
    gpt_grads_settle(m, -1);
}

// Every gradient zeroed and current: the ops add into it (tests, and anything that accumulates from zero).
template <typename F> void gpt_zero_grad(GPT<F>* m) {
    backend_memset_zero(m->grads, (size_t)m->table.total * sizeof(acc_t<F>));
    m->grad_stale.clear();
}
// An iteration's start (the trainer): every slot stale, to be written by its first op (above).
template <typename F> void gpt_grads_begin(GPT<F>* m) {
    m->grad_layers = std::max(1, gpt_stage_layers(&m->config));
    m->grad_stale.assign((size_t)NUM_PARAMS * m->grad_layers, 1);
}

// Parameter count without the padding rows of the vocabulary (what users quote as model size).
static inline int64_t gpt_num_params_real(const ParamTable* pt, const GPTConfig* cfg) {
    return pt->total - (int64_t)(cfg->padded_vocab_size - cfg->vocab_size) * cfg->channels;
}

// Tensor parallelism's shape rules (exit 2 naming the flags): whole heads per rank (then C and
// the head's channels divide too), the MLP width F in equal parts and the padded vocabulary in equal parts. training: also the
// knobs not built for T > 1 (--dry-run still plans them).
static inline void config_validate_tp(const Config* c, bool training) {
    int64_t T = c->tensor_model_parallel_size;
    if (c->num_attention_heads % T != 0)
        keel_usage_error("--num-attention-heads %lld is not divisible by --tensor-model-parallel-size %lld",
                         (long long)c->num_attention_heads, (long long)T);
    int64_t F = c->ffn_hidden_size > 0 ? c->ffn_hidden_size : 4 * c->hidden_size;
    if (F % T != 0)
        keel_usage_error("--ffn-hidden-size %lld is not divisible by --tensor-model-parallel-size %lld (each rank holds F/TP of the MLP)",
                         (long long)F, (long long)T);
    int64_t Vp = config_padded_vocab(c, T);
    if (Vp % T != 0)
        keel_usage_error("--pad-vocab-size-to %lld is not divisible by --tensor-model-parallel-size %lld (each rank holds Vp/TP rows)",
                         (long long)Vp, (long long)T);
    if (!training || T == 1) return;
    if (c->normformer)
        keel_usage_error("--normformer is not built for --tensor-model-parallel-size > 1 (its LayerNorm over the MLP's width would span ranks)");
}

// The model's shape and knobs from the flags (the trainer, --dry-run and the dev/ tools share it).
static inline void gpt_config_from_flags(const Config* c, GPTConfig* g) {
    g->max_seq_len = (int)c->max_position_embeddings;
    g->vocab_size = (int)c->vocab_size;
    g->padded_vocab_size = (int)config_padded_vocab(c, 1);
    g->vocab_tp_multiple = c->pad_vocab_size_to > 0 ? 0 : (int)c->make_vocab_size_divisible_by;
    g->num_layers = (int)c->num_layers;
    g->num_heads = (int)c->num_attention_heads;
    g->channels = (int)c->hidden_size;
    g->ffn_hidden = c->ffn_hidden_size > 0 ? (int)c->ffn_hidden_size : 4 * g->channels;
    g->embed_layernorm = c->embed_layernorm || c->stable_embedding;
    g->stable_embedding = c->stable_embedding;
    g->alibi = c->position_embedding_type == "alibi";
    g->sinusoidal_positions = c->position_embedding_init == "sinusoidal";
    g->activation = c->activation == "relu" ? ACT_RELU : ACT_GELU;
    g->attention_scaling = c->attention_scaling == "qk-inward" ? ATTN_SCALING_QK_INWARD : ATTN_SCALING_STANDARD;
    g->attention_impl = c->attention_impl == "flash" ? ATTN_IMPL_FLASH : c->attention_impl == "gemm" ? ATTN_IMPL_GEMM : ATTN_IMPL_AUTO;
    g->gelu_fusion = c->gelu_fusion == "on" ? GELU_FUSION_ON : c->gelu_fusion == "off" ? GELU_FUSION_OFF : GELU_FUSION_AUTO;
    g->classifier_chunk_rows = (int)c->classifier_chunk_rows;
    g->qk_layer_scaling = c->apply_query_key_layer_scaling;
    g->normformer = c->normformer;
    g->checkpoint_activations = c->checkpoint_activations;
    g->round_bf16 = c->bf16 && !GPT_ON_GPU;
    g->hidden_dropout = c->hidden_dropout;
    g->attention_dropout = c->attention_dropout;
    g->embed_dropout = std::isnan(c->embed_dropout) ? c->hidden_dropout : c->embed_dropout;  // Megatron: = hidden
    if (!c->pp_partition_method.empty() && c->pipeline_model_parallel_size > 1) {  // one model per process: the counts live here
        static std::vector<int> counts;
        counts = pp_layer_counts(c->pp_partition_method, g->num_layers, (int)c->pipeline_model_parallel_size, c->fp16 || c->bf16);
        g->pp_counts = counts.data();
        g->pp_stages = (int)counts.size();
    }
}
