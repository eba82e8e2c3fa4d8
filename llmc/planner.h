// planner.h — `--dry-run`: the size and memory of a run, computed from the flags before any
// allocation, for the GPU layout keel targets (docs/internals.md#precision, #parallelism). What the BigScience logbooks did on
// paper (seed 001: "18 bytes per parameter … plus activations") as a table with a verdict.
// Parameters: counted from the parameter table itself (model.h), so every knob's tensors are
// included, and printed beside the logbooks' formula n·(12h²+13h) + v·h + s·h + 2h.
// Bytes per parameter (bf16 mixed precision, docs/internals.md#precision):
//   bf16 weights 2 · fp32 gradients 4 · fp32 master weights 4 · optimizer state 8 (Adam m, v) or
//   ≈2 (8-bit m, v + one fp32 absmax per block of each) — 18 (or ≈12) in all. ZeRO-1 divides the
//   master weights and the optimizer state by DP.
// Per rank: tensor-parallel tensors (the table's TP split) divide by T, replicated ones do not;
//   every pipeline stage is counted with the layers the run gives it (keel's even split, or
//   --pp-partition-method's), the first with the word and position embeddings, the last with the
//   final LayerNorm and the tied word embedding's copy: the planner reports the stage with the most.
// Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
//   Models", bf16, no sequence parallelism), per layer and micro-batch of b samples of s tokens:
//     stored for backward:  s·b·h·(10 + 24/T + 5·a·s/(h·T)) bytes
//     --checkpoint-activations: 2·s·b·h (the layer's input) per layer, plus one layer's full set
//   while it is recomputed. The last stage adds the fp32 logits, 4·s·b·Vp/T. Under 1F1B stage s
//   holds min(P − s, M) micro-batches in flight (M micro-batches per iteration per DP rank).
// Beside the model, every GPU process holds memory no buffer of keel's accounts for, which the
// verdict reserves (PLAN_CUDA_CONTEXT_BYTES, PLAN_NCCL_BYTES_PER_COMM): the CUDA context with its
// module images and the cuBLAS(Lt) handle, assumed 512 MiB (300-600 MiB on A100/H100 with CUDA 12),
// and per NCCL communicator of more than one rank NCCL's default buffers, NCCL_BUFFSIZE 4 MiB per
// channel and direction over up to 16 channels: 128 MiB.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

#include "llmc/model.h"
#include "llmc/optimizer.h"

struct PlanLayout {
    int tp = 1, pp = 1, dp = 1, zero_stage = 0;
    int64_t micro_batch = 1, micro_batches = 1;  // b, and M per iteration per data-parallel rank
    int seq = 1024;
    bool checkpoint_activations = false, adam8bit = false;
    int adam8bit_block = 256;
};

static const double PLAN_CUDA_CONTEXT_BYTES = 512.0 * 1024 * 1024;
static const double PLAN_NCCL_BYTES_PER_COMM = 16 * 2 * 4.0 * 1024 * 1024;  // channels x directions x NCCL_BUFFSIZE

struct Plan {
    int64_t params = 0, params_real = 0;  // with and without vocabulary padding
    double formula = 0;                   // n·(12h²+13h) + v·h + s·h + 2h with the real vocabulary
    int stage = 0, stage_layers = 0;      // the busiest pipeline stage (most bytes) and its layers
    int64_t stage_params = 0;             // on the busiest (stage, TP rank)
    double b_weights = 0, b_grads = 0, b_master = 0, b_optim = 0;  // bytes on one rank
    double act_layer = 0;                     // one layer, one micro-batch, stored for backward
    double act_plain = 0, act_ckpt = 0;       // the first stage's activations without / with checkpointing
    double logits = 0, act = 0;               // the last stage's fp32 logits; the busiest stage's total
    double total = 0;                         // the busiest stage's model bytes (the estimate)
    int nccl_comms = 0;                       // NCCL communicators of more than one rank a process holds
    double reserve = 0;                       // CUDA context + NCCL buffers
};

// The communicators keel's trainer creates (train_gpt.cu trainer_init_groups) that span more than
// one rank: the world, data-parallel (a group of its own when TP or PP split the world), pipeline,
// tensor-parallel, model-parallel (TP x PP) and the tied embedding's (first and last stage).
static inline int plan_nccl_comms(const PlanLayout* l) {
    int world = l->tp * l->pp * l->dp;
    return (world > 1) + (l->dp > 1 && (l->tp > 1 || l->pp > 1)) + (l->pp > 1) + (l->tp > 1) + (l->tp * l->pp > 1) + (l->pp > 1);
}

// Parameters one (stage, TP rank) holds: the table's tensors, layer tensors for `layers` layers,
// split by T where the table says so.
static inline int64_t plan_stage_params(const ParamTable* pt, int layers, int L, bool first, bool last, int tp) {
    int64_t n = 0;
    for (int i = 0; i < NUM_PARAMS; i++) {
        const ParamTensor* t = &pt->t[i];
        int64_t numel = t->per_layer ? t->numel / L * layers : t->numel;
        if (!t->per_layer) {
            bool embedding = i == P_WTE || i == P_WPE || i == P_LNEW || i == P_LNEB;
            bool held = i == P_WTE ? (first || last) : embedding ? first : last;  // tied wte: a copy on both ends
            if (!held) continue;
        }
        n += t->tp == TP_NONE ? numel : numel / tp;
    }
    return n;
}

static inline Plan plan_compute(const GPTConfig* g, const PlanLayout* l) {
    Plan p;
    ParamTable pt;
    param_table_build(&pt, g);
    p.params = pt.total;
    p.params_real = gpt_num_params_real(&pt, g);
    double h = g->channels, n = g->num_layers, v = g->vocab_size, s = g->max_seq_len, f = gpt_ffn(g);
    p.formula = n * (4 * h * h + 2 * h * f + 9 * h + f) + v * h + s * h + 2 * h;  // f = 4h: the logbooks' 12h^2 + 13h
    int L = g->num_layers;
    double S = l->seq, b = (double)l->micro_batch, a = g->num_heads, T = l->tp;
    p.act_layer = S * b * h * (10 + 24 / T + 5 * a * S / (h * T));
    GPTConfig rank = *g;
    rank.tp_size = (int)T;
    p.logits = 4 * S * b * gpt_vocab_rows(&rank) / T;  // Megatron's padding at this TP
    double shard = l->zero_stage == 1 ? l->dp : 1;
    double per_param = 2 + 4 + 4 / shard + (l->adam8bit ? 2 + 8.0 / l->adam8bit_block : 8) / shard;
    p.total = -1;
    for (int st = 0; st < l->pp; st++) {  // each stage with its own layers (the run's split) and in-flight count
        int layers = gpt_stage_layers_of(g, l->pp, st);
        bool first = st == 0, last = st == l->pp - 1;
        int64_t n = plan_stage_params(&pt, layers, L, first, l->pp == 1 || last, l->tp);
        double in_flight = (double)std::min<int64_t>(l->pp - st, l->micro_batches);
        double plain = p.act_layer * layers, ckpt = 2 * S * b * h * layers + p.act_layer;  // one micro-batch
        double act = (l->checkpoint_activations ? ckpt : plain) * in_flight + (last ? p.logits : 0);
        if (first) {
            p.act_plain = plain * in_flight;
            p.act_ckpt = ckpt * in_flight;
        }
        double total = per_param * (double)n + act;
        if (total > p.total) {
            p.total = total, p.act = act, p.stage = st, p.stage_layers = layers, p.stage_params = n;
        }
    }
    double N = (double)p.stage_params;
    p.b_weights = 2 * N;
    p.b_grads = 4 * N;
    p.b_master = 4 * N / shard;
    p.b_optim = (l->adam8bit ? 2 + 8.0 / l->adam8bit_block : 8) * N / shard;
    p.nccl_comms = plan_nccl_comms(l);
    p.reserve = PLAN_CUDA_CONTEXT_BYTES + p.nccl_comms * PLAN_NCCL_BYTES_PER_COMM;
    return p;
}

static inline std::string plan_gib(double bytes) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    return buf;
}

// ---- what keel's GPU trainer itself allocates, exactly ----------------------------------------------------
// The estimate above is the logbooks' method; keel's own buffers differ (it keeps the T×T softmax of
// every layer, the logits of a whole micro-batch, its ops' scratch). plan_gpu_bytes counts them with
// the functions the trainer allocates with (gpt_device_bytes: count_only; the optimizer's units and
// shards), for the busiest rank: the first and last pipeline stage, tensor-parallel rank 0, the
// largest ZeRO-1 shard. test_planner holds it to the emulated trainer's peak device memory.
struct PlanGpu {
    GPTDeviceBytes model;
    size_t optimizer = 0;  // Adam m, v (fp32) or 8-bit codes, absmax and history: this rank's part
    size_t reductions = 0; // the gradient norm's per-chunk table and results, the 8-bit maps, the update tables
    size_t total = 0;
    int stage = 0;         // the pipeline stage counted (the busier of first and last)
};

// The optimizer state bytes of rank `rank` of dp (optimizer_init's pieces: ZeRO-1 cuts the units at
// the rank's shard), and in *chunks the gradient-norm chunks of its shard (grad_norm_sumsq sums the
// shard's chunks at either ZeRO stage: the gradients are reduce-scattered first).
// At TP > 1 a sliced 8-bit unit's scales are the whole unit's blocks, on every rank (state), and
// *split_scratch the step's buffers beside them: the blocks' maxima and, per segment (a piece's part
// inside one block; estimated as two per local block), its maxima and its table row
// (optimizer_split_init; the TP padding rows' own blocks are not counted).
static inline size_t plan_optimizer_bytes(const ParamTable* pt, const Config* c, int rank, int dp, int zero_stage, size_t* chunks,
                                          int64_t tp = 1, size_t* split_scratch = nullptr) {
    int64_t n32 = 0, n8 = 0, nblocks = 0, l32 = 0, l8 = 0, lblocks = 0, whole_blocks = 0, segments = 0, bs = c->adam8bit_block_size;
    std::vector<OptUnit> units = optimizer_units(pt, c, &n32, &n8, &nblocks, tp);
    std::vector<int64_t> shards = optimizer_shards(units, pt->total, dp);
    int64_t lo = zero_stage == 1 ? shards[rank] : 0, hi = zero_stage == 1 ? shards[rank + 1] : pt->total;
    *chunks = 0;
    for (const OptUnit& u : units) {
        // the unit's chunk starts k = 0, G, 2G, ... whose canonical offset lies in this rank's shard:
        // the multiples of G in [a, b), counted without walking them (a model of 10^15 parameters
        // has 10^10 chunks, and this runs before the memory verdict that refuses it)
        int64_t a = std::max<int64_t>(0, shards[rank] - u.offset_canonical), b = std::min<int64_t>(u.numel, shards[rank + 1] - u.offset_canonical);
        if (b > a) *chunks += (size_t)((b + GRAD_CHUNK - 1) / GRAD_CHUNK - (a + GRAD_CHUNK - 1) / GRAD_CHUNK);
        bool sliced = u.q8 && tp > 1 && pt->t[u.id].tp != TP_NONE;
        if (sliced) whole_blocks += (u.numel * tp + bs - 1) / bs;
        int64_t n = std::min(u.offset_canonical + u.numel, hi) - std::max(u.offset_canonical, lo);
        if (n <= 0) continue;
        if (u.q8) l8 += n;
        else l32 += n;
        if (u.q8 && !sliced) lblocks += (n + bs - 1) / bs;
        if (sliced) segments += 2 * ((n + bs - 1) / bs);
    }
    if (split_scratch) *split_scratch = (size_t)(2 * whole_blocks + 2 * segments) * sizeof(float) + (size_t)segments * OPT_TABLE_BYTES_PER_PIECE;
    int64_t hist = c->optimizer == "adam8bit" ? (int64_t)units.size() * PCLIP_HISTORY : 0;
    return (size_t)(2 * l32 + 2 * lblocks + hist + 2 * whole_blocks) * sizeof(float) + (size_t)l8 * 2;
}

static inline PlanGpu plan_gpu_bytes(const Config* c, const GPTConfig* g, const PlanLayout* l) {
    PlanGpu best;
    for (int stage : {0, l->pp - 1}) {
        GPTConfig s = gpt_config_stage(g, l->pp, stage);
        s.tp_size = l->tp;
        s.tp_rank = 0;
        int slots = pipeline_max_in_flight(stage, l->pp, (int)l->micro_batches);
        PlanGpu p;
        p.stage = stage;
        if (c->fp32) p.model = gpt_device_bytes<float>(&s, (int)l->micro_batch, l->seq, slots, (int)l->micro_batches);
        else p.model = gpt_device_bytes<uint16_t>(&s, (int)l->micro_batch, l->seq, slots, (int)l->micro_batches);  // a 2-byte storage type
        ParamTable pt;
        param_table_build(&pt, &s);
        size_t maps = c->optimizer == "adam8bit" ? sizeof(Adam8bitMaps) : 0;
        bool copy = !c->fp32;  // a bf16/fp16 compute copy: under ZeRO-1 the fp32 master weights are sharded too
        size_t best_rank = 0;
        for (int r = 0; r < l->dp; r++) {  // the rank with the most
            size_t chunks = 0, split = 0, state = plan_optimizer_bytes(&pt, c, r, l->dp, l->zero_stage, &chunks, l->tp, &split);
            size_t reductions = 4 * chunks * sizeof(double) + maps + split  // (2, chunks) int64 table, (chunks, 2) double sums
                                + optimizer_tables_bytes(&pt, c, r, l->dp, l->zero_stage);  // the one-launch update's piece tables
            int64_t lo, hi;
            optimizer_master_range(&pt, c, r, l->dp, l->zero_stage, copy, &lo, &hi);
            size_t master = (size_t)(hi - lo) * sizeof(float);
            if (state + reductions + master > best_rank) {
                best_rank = state + reductions + master;
                p.optimizer = state, p.reductions = reductions, p.model.params = master;
            }
        }
        const GPTDeviceBytes& m = p.model;
        p.total = m.params + m.grads + m.compute_copy + m.activations + m.grad_scratch + m.loss_log + m.other + m.op_scratch + p.optimizer +
                  p.reductions;
        if (p.total > best.total) best = p;
    }
    return best;
}

static inline void plan_gpu_print(FILE* out, const PlanGpu* p, const Config* c, double gpu_gb, double reserve) {
    const GPTDeviceBytes& m = p->model;
    auto mib = [](size_t b) { return b / 1048576.0; };
    fprintf(out, "keel's GPU trainer (train_gpt, %s, %s attention), exact, pipeline stage %d, tensor-parallel rank 0, largest shard:\n",
            c->fp32 ? "--fp32" : c->fp16 ? "--fp16" : "--bf16", m.flash ? "flash" : "gemm", p->stage);
    fprintf(out, "  master weights %.2f MiB | gradients %.2f MiB | compute copy %.2f MiB | optimizer state %.2f MiB\n", mib(m.params),
            mib(m.grads), mib(m.compute_copy), mib(p->optimizer));
    fprintf(out, "  activations %.2f MiB | layer gradient scratch %.2f MiB | loss log %.2f MiB | ops' scratch (attention, column sums, "
            "cuBLASLt workspace) %.2f MiB | other %.2f MiB\n", mib(m.activations), mib(m.grad_scratch), mib(m.loss_log), mib(m.op_scratch),
            mib(m.other + p->reductions));
    double need = (double)p->total + reserve;
    fprintf(out, "gpu allocations: total %zu bytes = %s + %s reserved = %s of %g GiB: %s\n", p->total, plan_gib((double)p->total).c_str(),
            plan_gib(reserve).c_str(), plan_gib(need).c_str(), gpu_gb, need <= gpu_gb * 1024.0 * 1024 * 1024 ? "fits" : "does NOT fit");
}

// What would bring a layout that does not fit under `limit`: each change the run has not made yet,
// planned again, listed with its per-rank total if it lowers it (one change at a time; "fits" where
// that alone suffices). ZeRO-1 needs more than one data-parallel rank; twice the TP needs heads and
// MLP width divisible by it; twice the PP needs a layer and 1F1B's micro-batches for every stage.
static inline std::string plan_suggest(const GPTConfig* g, const PlanLayout* l, double limit) {
    Plan now = plan_compute(g, l);
    std::string out;
    auto consider = [&](const std::string& change, PlanLayout m) {
        Plan p = plan_compute(g, &m);
        double need = p.total + p.reserve;
        if (need >= now.total + now.reserve) return;
        out += std::string(out.empty() ? "" : ", ") + change + " (" + plan_gib(need) + (need <= limit ? ": fits)" : ")");
    };
    PlanLayout m = *l;
    if (!l->checkpoint_activations) { m = *l; m.checkpoint_activations = true; consider("--checkpoint-activations", m); }
    if (l->zero_stage == 0 && l->dp > 1) { m = *l; m.zero_stage = 1; consider("--zero-stage 1", m); }
    if (!l->adam8bit) { m = *l; m.adam8bit = true; consider("--optimizer adam8bit", m); }
    if (l->micro_batch > 1) {
        m = *l;
        m.micro_batch = l->micro_batch / 2;
        m.micro_batches = l->micro_batches * l->micro_batch / m.micro_batch;  // the same global batch
        consider("--micro-batch-size " + std::to_string(m.micro_batch), m);
    }
    if (g->num_heads % (2 * l->tp) == 0 && gpt_ffn(g) % (2 * l->tp) == 0) {
        m = *l; m.tp = 2 * l->tp; consider("--tensor-model-parallel-size x2", m);
    }
    if (2 * l->pp <= g->num_layers && l->micro_batches >= 2 * l->pp) {
        GPTConfig even = *g;  // (a partition method's split is for P stages: twice P plans the even split)
        even.pp_counts = nullptr;
        m = *l;
        m.pp = 2 * l->pp;
        Plan p = plan_compute(&even, &m);
        double need = p.total + p.reserve;
        if (need < now.total + now.reserve)
            out += std::string(out.empty() ? "" : ", ") + "--pipeline-model-parallel-size x2 (" + plan_gib(need) + (need <= limit ? ": fits)" : ")");
    }
    if (out.empty()) return "  nothing of checkpointing, ZeRO-1, 8-bit Adam, a smaller micro-batch or twice the TP/PP lowers it: a larger "
                            "--gpu-memory-gb or a smaller model";
    return "  would lower it, one at a time: " + out;
}

// The table `--dry-run` prints; returns true if the per-rank total with the reserve fits gpu_gb.
static inline bool plan_print(FILE* out, const GPTConfig* g, const PlanLayout* l, const Plan* p, double gpu_gb) {
    fprintf(out, "dry run: L=%d h=%d heads=%d s=%d V=%d (padded %d) | TP=%d PP=%d DP=%d ZeRO-%d | micro-batch %lld x %lld per iteration%s\n",
            g->num_layers, g->channels, g->num_heads, l->seq, g->vocab_size, g->padded_vocab_size, l->tp, l->pp, l->dp,
            l->zero_stage, (long long)l->micro_batch, (long long)l->micro_batches,
            l->checkpoint_activations ? " | --checkpoint-activations" : "");
    bool f4 = gpt_ffn(g) == 4 * g->channels;
    fprintf(out, "parameters: %lld (%lld with vocabulary padding); formula %s = %.0f (%.2fB)\n", (long long)p->params_real,
            (long long)p->params, f4 ? "n(12h^2+13h)+vh+sh+2h" : "n(4h^2+2hf+9h+f)+vh+sh+2h, f the MLP width", p->formula, p->formula / 1e9);
    double N = (double)p->stage_params;
    fprintf(out, "per rank (busiest pipeline stage, one TP rank): %lld parameters\n", (long long)p->stage_params);
    fprintf(out, "  %-34s %12s %14s\n", "component", "bytes/param", "per rank");
    auto row = [&](const char* name, double bytes) { fprintf(out, "  %-34s %12.3f %14s\n", name, bytes / N, plan_gib(bytes).c_str()); };
    row("bf16 weights", p->b_weights);
    row("fp32 gradients", p->b_grads);
    row(l->zero_stage == 1 ? "fp32 master weights (ZeRO-1 shard)" : "fp32 master weights", p->b_master);
    row(l->adam8bit ? (l->zero_stage == 1 ? "8-bit Adam state (ZeRO-1 shard)" : "8-bit Adam state")
                    : (l->zero_stage == 1 ? "Adam state, fp32 m, v (ZeRO-1 shard)" : "Adam state, fp32 m, v"), p->b_optim);
    int64_t in_flight = std::min<int64_t>(l->pp, l->micro_batches);
    fprintf(out, "  activations, first stage, %lld micro-batch%s in flight: %s without, %s with --checkpoint-activations\n",
            (long long)in_flight, in_flight == 1 ? "" : "es", plan_gib(p->act_plain).c_str(), plan_gib(p->act_ckpt).c_str());
    fprintf(out, "  logits (last stage, fp32): %s | activations counted (busiest stage): %s\n", plan_gib(p->logits).c_str(),
            plan_gib(p->act).c_str());
    double limit = gpu_gb * 1024.0 * 1024 * 1024, need = p->total + p->reserve;
    bool fits = need <= limit;
    fprintf(out, "reserved per rank: CUDA context %s (assumed) + NCCL buffers %s (%d communicator%s x %s: 16 channels x 2 directions "
            "x NCCL_BUFFSIZE 4 MiB)\n", plan_gib(PLAN_CUDA_CONTEXT_BYTES).c_str(), plan_gib(p->nccl_comms * PLAN_NCCL_BYTES_PER_COMM).c_str(),
            p->nccl_comms, p->nccl_comms == 1 ? "" : "s", plan_gib(PLAN_NCCL_BYTES_PER_COMM).c_str());
    fprintf(out, "total per rank: %.0f bytes = %s (pipeline stage %d, %d layers) + %s reserved = %s of %g GiB (--gpu-memory-gb): %s\n",
            p->total, plan_gib(p->total).c_str(), p->stage, p->stage_layers, plan_gib(p->reserve).c_str(), plan_gib(need).c_str(), gpu_gb,
            fits ? "fits" : "does NOT fit");
    if (!fits) fprintf(out, "%s\n", plan_suggest(g, l, limit).c_str());
    return fits;
}