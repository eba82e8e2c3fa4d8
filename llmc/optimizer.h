// optimizer.h — one optimizer step on the flat buffers: gradient reduction, global norm, the
// update-skipping rules, global-norm clipping, then Adam: AdamW with fp32 state (--optimizer adam)
// or bitsandbytes' blockwise 8-bit Adam (--optimizer adam8bit), with decay groups from the
// parameter table (docs/knobs.md#mixed-precision-and-loss-scaling, #optimizer-clipping-and-skipped-updates, #8-bit-adam).
//
// Order, per iteration (Megatron native path, docs/knobs.md#mixed-precision-and-loss-scaling, #optimizer-clipping-and-skipped-updates), after the backward passes:
//   0. reduce: g /= F (--gradient-predivide-factor), sum over data-parallel ranks, g *= F/DP (docs/knobs.md#gradient-pre-divide-factor)
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
//      (inside step 5's update kernels, which read g·coeff: not a pass of its own)
//   5. t += 1; the Adam step of the chosen optimizer for every unit, weight decay only on tensors the
//      table marks decay: one update call per kind of state (fp32 m, v; 8-bit codes) over all of
//      the rank's pieces (optimizer_update), which on the GPU is one launch each and also writes the
//      bf16/fp16 compute copy of every parameter it updates (below)
// The logged grad norm is the one from step 2 (unscaled, before clipping).
//
// The update tables and the compute copy. The pieces are recorded once, at set-up, in an update table
// per kind of state (AdamPieces: cpu/adamw.h, cuda/adamw.cuh), so a step is one call per kind instead
// of one per piece (on the GPU: 1 launch, or 2 under adam8bit, instead of ~12·L + 4); what changes per
// step travels as arguments (lr, the bias corrections, the percentile factors of adam8bit). Under
// --bf16/--fp16 the forward reads a bf16/fp16 copy of the master weights (GPT::params_c); the update
// writes it in the same pass, rounded as cast_from_f32 rounds, for every parameter it updates
// (StepResult::compute_copy_written), and the trainer skips gpt_params_changed's second pass over the
// parameters. Under ZeRO-1 on several ranks a rank updates its shard only and keeps only its shard of
// the fp32 master weights (optimizer_master_range, GPT::master_lo/hi): the trainer all-gathers the
// compute copy's shards — 2 bytes per parameter under bf16/fp16 instead of the master's 4 — and
// every rank ends with the same copy the ZeRO-0 update writes. Without a compute copy (the CPU
// trainer, --fp32) the fp32 parameters are the copy and are all-gathered. A skipped update writes
// neither copy.
//
// Units. Optimizer state is kept per "unit": a global tensor of the table, or one layer's slice of
// a per-layer tensor — exactly what PyTorch (and so bitsandbytes) sees as one parameter. Quantization
// blocks, the 32-bit/8-bit choice and percentile-clipping statistics are per unit, so keel's 8-bit
// Adam makes the same decisions as bitsandbytes on the same model. The grad norm is also summed per
// unit (GRAD_CHUNK chunks relative to the unit's start), so a ZeRO shard that starts on a unit-relative
// chunk boundary (which is also a block boundary) can contribute its chunks' partial sums and get the
// same bits as one process.
//
// Data parallelism and ZeRO (docs/internals.md#parallelism). The flat buffer is partitioned over the DP ranks at
// unit-relative GRAD_CHUNK boundaries (shard_lo). Every step, gradients are reduce-scattered to
// the shard owners (llmc/comm.h, summed in rank order); each rank rounds/unscales/checks its shard
// and computes the norm partials of its shard's chunks, which are all-gathered, so every rank adds
// the same partials in the same order: the norm has the same bits at any DP size and ZeRO stage.
// ZeRO-0: the reduced gradient shards are all-gathered and every rank updates every parameter with
// its full copy of the state. ZeRO-1 (--zero-stage 1): each rank holds and updates only the state
// of its shard ("pieces": units clipped to the shard) and the updated parameters are all-gathered.
// Both compute every element with the same arithmetic, so their bits are identical.
//
// State layout (canonical; also the checkpoint's optimizer.bin payload, byte for byte):
//   m32, v32      fp32 (n32)      moments of the fp32 units, in unit order
//   absmax_m, _v  fp32 (nblocks)  per-block scale of the 8-bit units, in unit then block order
//   pclip_hist    fp32 (units × 100)  ‖g‖² history for percentile clipping (adam8bit only)
//   code_m, _v    uint8 (n8)      8-bit codes of the 8-bit units, in unit order
// Under --optimizer adam every unit is fp32 and the payload is m then v over the canonical buffer.
// Under adam8bit a unit keeps fp32 state when it has fewer than --adam8bit-min-size elements, or is
// the word embedding under --stable-embedding (bitsandbytes' 32-bit override for StableEmbedding —
// which in Megatron-DeepSpeed's integration never took effect, docs/knobs.md#embedding-layernorm-and-stableembedding; here it does).
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "llmc/backend.h"
#include "llmc/comm.h"
#include "llmc/flags.h"
#include "llmc/loss_scaler.h"
#include "llmc/model.h"
#include "llmc/spike.h"

enum OptimizerType { OPTIMIZER_ADAM, OPTIMIZER_ADAM8BIT };
static_assert(GRAD_CHUNK % ADAM8BIT_MAX_BLOCK == 0, "a shard boundary (a chunk boundary) must be a block boundary");

struct OptUnit {
    int id, layer;              // table tensor; layer: the model's layer number (0 for a global tensor)
    int64_t offset_canonical;   // first element in the flat parameter buffer
    int64_t numel;
    bool q8;                    // 8-bit state (else fp32 m, v)
    int64_t offset_state;       // into m32/v32 (fp32 unit) or code_m/code_v (8-bit unit)
    int64_t offset_block;       // into absmax_m/absmax_v (8-bit unit)
    // Its place in the whole model's canonical state (the checkpoint payload). Without pipeline
    // parallelism these equal the fields above; a pipeline stage's units are a part of the whole
    // model's (optimizer_set_stage).
    int canon_index;            // the unit's number among the whole model's units
    int64_t canon_state, canon_block;
    bool mirror;                // the tied word embedding's copy on the last stage: its state equals the
                                // first stage's copy, which is the one saved
    // Tensor parallelism (optimizer_set_stage): the whole unit's first element and size, whether this
    // rank holds a slice of it (else all of it), and for a sliced 8-bit unit its first block in
    // split_absmax (its blocks are the whole unit's: see Optimizer::split8).
    int64_t canon_elem = 0, canon_numel = 0;
    bool tp_split = false;
    int64_t split_block = 0;
};

// A unit's part of this rank's optimizer range (the whole unit unless ZeRO-1 cut it).
struct OptPiece {
    int unit;                   // index into units
    int64_t offset_canonical;   // first parameter
    int64_t numel;
    int64_t offset_state;       // into this rank's m32/v32 or code_m/code_v
    int64_t offset_block;       // into this rank's absmax arrays
};

// A GRAD_CHUNK-long (or shorter, at a unit's end) stretch of one unit: the norm's summation grain.
struct GradChunk {
    int unit;
    int64_t offset_canonical, numel;
};

struct Optimizer {
    OptimizerType type;
    int block_size;             // 8-bit quantization block
    int64_t n;                  // parameters of the model (P)
    int64_t step;               // t: successful updates so far (Adam bias correction)
    std::vector<OptUnit> units; // the whole model; offsets index the canonical state
    int64_t n32, n8, nblocks;   // canonical totals
    std::vector<GradChunk> chunks;   // the whole model, in canonical order
    std::vector<int64_t> shard_lo;   // (dp + 1) shard boundaries: rank r owns [shard_lo[r], shard_lo[r+1])
    int rank;                        // this rank's shard
    int64_t range_lo, range_hi;      // parameters whose state this rank holds: its shard (ZeRO-1) or all (ZeRO-0)
    std::vector<OptPiece> pieces;    // units ∩ [range_lo, range_hi)
    int64_t local_n32, local_n8, local_nblocks;
    uint8_t* state;             // this rank's state, in the canonical layout's section order; state_bytes long
    size_t state_bytes;
    size_t canonical_bytes;     // the whole model's state (the checkpoint payload)
    int64_t canon_n, canon_n32, canon_n8, canon_nblocks, canon_units;  // the whole model's totals
    std::string layout;         // what a checkpoint must match (optimizer_layout)
    std::vector<bool> fp32_tensor;   // per table id: the whole model has a unit of it with 32-bit state
    std::vector<ParamSpan> tp_spans; // tensor parallelism: this rank's buffer against the canonical one
                                     // (fp32 Adam only, whose canonical state is element for element the
                                     // canonical parameter order); empty otherwise
    float* m32;                 // (local_n32)
    float* v32;                 // (local_n32)
    float* absmax_m;            // (local_nblocks)
    float* absmax_v;            // (local_nblocks)
    float* pclip_hist;          // (units × PCLIP_HISTORY), adam8bit only; replicated on every rank
    uint8_t* code_m;            // (local_n8)
    uint8_t* code_v;            // (local_n8)
    Adam8bitMaps* maps;         // quantization maps and their search tables (adam8bit only)
    std::vector<double> unit_sumsq;  // this step's Σ g² per unit (every unit, every rank)
    std::vector<float> pclip_scale;  // this step's percentile-clipping factor per unit
    // The update tables: the pieces with fp32 state (all of them under adam) and those with 8-bit
    // state, each updated by one call per step (optimizer_update); their units, in table order, for
    // the per-step factors, and those factors (adam8bit).
    AdamPieces update32, update8;
    std::vector<int> update32_units, update8_units;
    std::vector<float> update32_scale, update8_scale;
    // 8-bit units sliced over tensor-parallel ranks. Their quantization blocks are the whole unit's
    // (the canonical state, the same at any TP), so one block can hold elements of several ranks, and
    // under ZeRO-1 of several shards: a block's new scale is the max of its elements' over those ranks.
    // split8's pieces are segments, a piece's part inside one block, sorted by block; offset_block
    // indexes split_absmax_m/_v: the whole units' blocks first (split_shared, the same on every rank
    // of the stage), then blocks of the rows only this rank holds (the vocabulary's TP padding, never
    // saved). A step: adam8bit_split_maxima, the maxima's all-reduce (MAX, exact in any order) over
    // shard_comm (ZeRO-1) and tp_comm, adam8bit_split_apply.
    AdamPieces split8;
    std::vector<int> split8_units;
    std::vector<float> split8_scale;
    int64_t split_nblocks = 0, split_shared = 0;
    float* split_absmax_m = nullptr;   // (split_nblocks) state
    float* split_absmax_v = nullptr;
    float* split_scratch = nullptr;    // blk_m, blk_v (split_nblocks each), then 2 per segment: not state
    const Comm* tp_comm = nullptr;     // the tensor-parallel group, when TP > 1 (optimizer_set_comms)
    const Comm* shard_comm = nullptr;  // the data-parallel group under ZeRO-1 on several ranks
    int tp_rank = 0;
};

// The device bytes of one update table: a row and a per-step factor per piece (adam_pieces_init, one
// allocation per kind of state that has pieces). --dry-run counts them (optimizer_tables_bytes).
enum { OPT_TABLE_BYTES_PER_PIECE = 6 * 8 + 4 };
#ifdef KEEL_CUDA
static_assert(sizeof(AdamPieceRow) + sizeof(float) == OPT_TABLE_BYTES_PER_PIECE, "the planner's size of an update table row");
#endif

struct StepResult {
    double grad_norm;         // before clipping
    int64_t num_zeros;
    bool skipped;             // no update was applied
    bool nonfinite;           // the loss or a gradient was NaN/Inf
    int64_t pclip_units;      // units whose gradient percentile clipping scaled down this step
    SpikeVerdict spike;       // the spike autopilot fired (then skipped is set; the trainer acts on the policy)
    bool compute_copy_written;  // the update also wrote the model's bf16/fp16 copy of every parameter
                                // it updated (no gpt_params_changed needed; under ZeRO-1 the shards
                                // are then all-gathered); false without a copy and when skipped
};

// The state of the z-score rules: the losses and norms of the last applied updates (checkpointed).
struct UpdateGuard {
    RollingWindow loss, norm;
};

static inline bool optimizer_unit_is_8bit(const Config* c, int id, int64_t numel) {
    if (c->optimizer != "adam8bit") return false;
    if (id == P_WTE && c->stable_embedding) return false;  // StableEmbedding: 32-bit state (docs/knobs.md#embedding-layernorm-and-stableembedding)
    return numel >= c->adam8bit_min_size;
}

// Zero moments: fp32 zeros, absmax 0 with the codes of 0 (which read back as exactly 0).
static inline void optimizer_reset(Optimizer* o) {
    o->step = 0;
    backend_memset_zero(o->state, o->state_bytes);
    if (o->local_n8) {
        std::vector<uint8_t> zm((size_t)o->local_n8, o->maps->zero_m), zv((size_t)o->local_n8, o->maps->zero_v);
        backend_copy_to_device(o->code_m, zm.data(), zm.size());
        backend_copy_to_device(o->code_v, zv.data(), zv.size());
    }
}

// Shard boundaries for dp ranks: near r·P/dp, moved down to a GRAD_CHUNK boundary of the unit they
// fall in (so whole norm chunks and whole quantization blocks belong to one rank).
static inline std::vector<int64_t> optimizer_shards(const std::vector<OptUnit>& units, int64_t total, int dp) {
    std::vector<int64_t> lo(dp + 1, 0);
    lo[dp] = total;
    for (int r = 1; r < dp; r++) {
        int64_t t = total * r / dp, b = total;
        for (const OptUnit& u : units)
            if (t >= u.offset_canonical && t < u.offset_canonical + u.numel) {
                b = u.offset_canonical + (t - u.offset_canonical) / GRAD_CHUNK * GRAD_CHUNK;
                break;
            }
        lo[r] = std::max(b, lo[r - 1]);
    }
    return lo;
}

// The units of a parameter table, in table order, with their offsets in its canonical state;
// *n32, *n8, *nblocks: the state's totals. tp_slices: the table is one of that many tensor-parallel
// slices, and a split tensor's 8-bit choice is made on its whole size (slice x tp_slices; for the
// word embedding that counts the TP padding rows, which only moves a threshold set between the two).
static inline std::vector<OptUnit> optimizer_units(const ParamTable* pt, const Config* c, int64_t* n32, int64_t* n8, int64_t* nblocks,
                                                   int64_t tp_slices = 1) {
    std::vector<OptUnit> units;
    int64_t block = c->adam8bit_block_size;
    *n32 = *n8 = *nblocks = 0;
    for (int id = 0; id < NUM_PARAMS; id++) {
        const ParamTensor* t = &pt->t[id];
        if (t->numel == 0) continue;
        int64_t per = t->per_layer ? t->rows * t->cols : t->numel, layers = t->numel / per;
        for (int64_t l = 0; l < layers; l++) {
            int64_t whole = t->tp != TP_NONE ? per * tp_slices : per;
            OptUnit u = {id, (int)l, t->offset_canonical + l * per, per, optimizer_unit_is_8bit(c, id, whole), 0, 0, 0, 0, 0, false};
            if (u.q8) {
                u.offset_state = *n8;
                u.offset_block = *nblocks;
                *n8 += per;
                *nblocks += (per + block - 1) / block;
            } else {
                u.offset_state = *n32;
                *n32 += per;
            }
            u.canon_index = (int)units.size();
            u.canon_state = u.offset_state;
            u.canon_block = u.offset_block;
            u.canon_elem = u.offset_canonical;
            u.canon_numel = per;
            units.push_back(u);
        }
    }
    return units;
}

// "adam", or "adam8bit block B: wte 32, wpe 8, ..." (the bits of every tensor's units); and which
// tensors keep 32-bit state (for the start-up line).
static inline std::string optimizer_layout_of(const std::vector<OptUnit>& units, const ParamTable* pt, const Config* c,
                                              std::vector<bool>* fp32_tensor) {
    fp32_tensor->assign(NUM_PARAMS, false);
    for (const OptUnit& u : units) (*fp32_tensor)[u.id] = (*fp32_tensor)[u.id] || !u.q8;
    if (c->optimizer != "adam8bit") return "adam";
    std::string s = "adam8bit block " + std::to_string(c->adam8bit_block_size) + ":";
    int last = -1;
    for (const OptUnit& u : units) {
        if (u.id == last) continue;
        last = u.id;
        s += std::string(last == units[0].id ? " " : ", ") + pt->t[u.id].name + (u.q8 ? " 8" : " 32");
    }
    return s;
}

static inline size_t optimizer_state_bytes(const Optimizer* o, int64_t n32, int64_t n8, int64_t nblocks, int64_t units) {
    int64_t hist = o->type == OPTIMIZER_ADAM8BIT ? units * PCLIP_HISTORY : 0;
    return (size_t)(2 * n32 + 2 * nblocks + hist) * sizeof(float) + (size_t)n8 * 2;
}

// The update tables of o->pieces: one for the fp32-state pieces, one for the 8-bit ones, in piece
// (table) order; the decay flags from the parameter table.
static inline void optimizer_tables_init(Optimizer* o, const ParamTable* pt) {
    for (bool q8 : {false, true}) {
        std::vector<int64_t> offset_param, offset_state, offset_block, numel;
        std::vector<uint8_t> decay;
        std::vector<int>* units = q8 ? &o->update8_units : &o->update32_units;
        units->clear();
        for (const OptPiece& pc : o->pieces) {
            const OptUnit& u = o->units[pc.unit];
            if (u.q8 != q8 || (u.q8 && u.tp_split)) continue;  // (a split 8-bit unit: split8)
            offset_param.push_back(pc.offset_canonical);
            offset_state.push_back(pc.offset_state);
            offset_block.push_back(pc.offset_block);
            numel.push_back(pc.numel);
            decay.push_back(pt->t[u.id].decay ? 1 : 0);
            units->push_back(pc.unit);
        }
        adam_pieces_init(q8 ? &o->update8 : &o->update32, offset_param.data(), offset_state.data(), offset_block.data(),
                         numel.data(), decay.data(), (int)numel.size(), q8 ? o->block_size : 0);
        (q8 ? o->update8_scale : o->update32_scale).assign(units->size(), 1.0f);
    }
}

// The device bytes of the update tables of rank `rank` of dp (its pieces, as optimizer_init cuts
// them): what optimizer_tables_init allocates on the GPU, for --dry-run (llmc/planner.h).
static inline size_t optimizer_tables_bytes(const ParamTable* pt, const Config* c, int rank, int dp, int zero_stage) {
    int64_t n32, n8, nblocks;
    std::vector<OptUnit> units = optimizer_units(pt, c, &n32, &n8, &nblocks);
    std::vector<int64_t> shards = optimizer_shards(units, pt->total, dp);
    int64_t lo = zero_stage == 1 ? shards[rank] : 0, hi = zero_stage == 1 ? shards[rank + 1] : pt->total;
    size_t pieces = 0;
    for (const OptUnit& u : units) pieces += std::min(u.offset_canonical + u.numel, hi) > std::max(u.offset_canonical, lo);
    return pieces * OPT_TABLE_BYTES_PER_PIECE;
}

// The fp32 master weights rank `rank` of dp keeps (gpt_build's range, --dry-run's count): under
// ZeRO-1 with a compute copy (bf16/fp16) its shard, which is all its update reads and writes; else
// every parameter (ZeRO-0 updates everything; without a copy the master is what the forward reads).
static inline void optimizer_master_range(const ParamTable* pt, const Config* c, int rank, int dp, int zero_stage, bool compute_copy,
                                          int64_t* lo, int64_t* hi) {
    *lo = 0;
    *hi = pt->total;
    if (zero_stage != 1 || !compute_copy || dp == 1) return;
    int64_t n32, n8, nblocks;
    std::vector<int64_t> shards = optimizer_shards(optimizer_units(pt, c, &n32, &n8, &nblocks), pt->total, dp);
    *lo = shards[rank];
    *hi = shards[rank + 1];
}

// This rank's state buffer (one allocation, in the canonical layout's section order, then the split
// units' scales, then the codes), replacing any earlier one.
static inline void optimizer_alloc_state(Optimizer* o) {
    int64_t hist = o->type == OPTIMIZER_ADAM8BIT ? (int64_t)o->units.size() * PCLIP_HISTORY : 0;
    int64_t floats = 2 * o->local_n32 + 2 * o->local_nblocks + hist + 2 * o->split_nblocks;
    o->state_bytes = (size_t)floats * sizeof(float) + (size_t)o->local_n8 * 2;
    if (o->state) backend_free(o->state);
    o->state = (uint8_t*)backend_malloc(o->state_bytes);
    float* f = (float*)o->state;
    o->m32 = f;
    o->v32 = f + o->local_n32;
    o->absmax_m = f + 2 * o->local_n32;
    o->absmax_v = o->absmax_m + o->local_nblocks;
    o->pclip_hist = hist ? o->absmax_v + o->local_nblocks : nullptr;
    o->split_absmax_m = o->absmax_v + o->local_nblocks + hist;
    o->split_absmax_v = o->split_absmax_m + o->split_nblocks;
    o->code_m = o->state + (size_t)floats * sizeof(float);
    o->code_v = o->code_m + o->local_n8;
}

// This rank's pieces (the units cut to [range_lo, range_hi)) and where each one's state sits.
static inline void optimizer_cut_pieces(Optimizer* o) {
    o->pieces.clear();
    o->local_n32 = o->local_n8 = o->local_nblocks = 0;
    for (size_t ui = 0; ui < o->units.size(); ui++) {
        const OptUnit& u = o->units[ui];
        int64_t lo = std::max(u.offset_canonical, o->range_lo), hi = std::min(u.offset_canonical + u.numel, o->range_hi);
        if (lo >= hi) continue;
        OptPiece pc = {(int)ui, lo, hi - lo, 0, 0};
        if (u.q8) {
            pc.offset_state = o->local_n8;
            pc.offset_block = o->local_nblocks;
            o->local_n8 += pc.numel;
            if (!u.tp_split) o->local_nblocks += (pc.numel + o->block_size - 1) / o->block_size;  // (sliced: split_absmax)
        } else {
            pc.offset_state = o->local_n32;
            o->local_n32 += pc.numel;
        }
        o->pieces.push_back(pc);
    }
}

// Units and chunks from the table; the shards for dp ranks; this rank's pieces (all units under
// ZeRO-0, the units cut to its shard under ZeRO-1); state allocated and zeroed. The table is the
// whole model's; a pipeline stage's optimizer then learns its place in the whole with
// optimizer_set_stage.
static inline void optimizer_init(Optimizer* o, const ParamTable* pt, const Config* c, int rank = 0, int dp = 1,
                                  int zero_stage = 0) {
    o->type = c->optimizer == "adam8bit" ? OPTIMIZER_ADAM8BIT : OPTIMIZER_ADAM;
    o->block_size = (int)c->adam8bit_block_size;
    o->n = pt->total;
    o->step = 0;
    o->units = optimizer_units(pt, c, &o->n32, &o->n8, &o->nblocks, c->tensor_model_parallel_size);
    o->chunks.clear();
    for (size_t ui = 0; ui < o->units.size(); ui++)
        for (int64_t k = 0; k < o->units[ui].numel; k += GRAD_CHUNK)
            o->chunks.push_back({(int)ui, o->units[ui].offset_canonical + k, std::min<int64_t>(GRAD_CHUNK, o->units[ui].numel - k)});
    o->canon_n = o->n;
    o->canon_n32 = o->n32;
    o->canon_n8 = o->n8;
    o->canon_nblocks = o->nblocks;
    o->canon_units = (int64_t)o->units.size();
    o->layout = optimizer_layout_of(o->units, pt, c, &o->fp32_tensor);
    o->shard_lo = optimizer_shards(o->units, o->n, dp);
    o->rank = rank;
    o->range_lo = zero_stage == 1 ? o->shard_lo[rank] : 0;
    o->range_hi = zero_stage == 1 ? o->shard_lo[rank + 1] : o->n;
    optimizer_cut_pieces(o);
    o->canonical_bytes = optimizer_state_bytes(o, o->n32, o->n8, o->nblocks, o->canon_units);
    o->state = nullptr;
    optimizer_alloc_state(o);
    o->maps = nullptr;
    if (o->type == OPTIMIZER_ADAM8BIT) {
        o->maps = new Adam8bitMaps;
        adam8bit_maps_init(o->maps);
    }
    o->unit_sumsq.assign(o->units.size(), 0.0);
    o->pclip_scale.assign(o->units.size(), 1.0f);
    optimizer_tables_init(o, pt);
    optimizer_reset(o);
}

// The segments of the sliced 8-bit units (Optimizer::split8): each piece's parts that map into the
// whole model (tp_spans, in local order) cut at the whole unit's block boundaries, each in that block;
// the parts that map nowhere (the vocabulary's TP padding rows) cut into blocks of their own. Then the
// state is allocated again with room for the scales, and the update tables rebuilt without them.
static inline void optimizer_split_init(Optimizer* o, const ParamTable* local) {
    struct Seg { int64_t block, param, state, numel; int unit; };
    std::vector<Seg> segs;
    int64_t bs = o->block_size, shared = 0, own = 0;
    for (OptUnit& u : o->units)
        if (u.q8 && u.tp_split) {
            u.split_block = shared;
            shared += (u.canon_numel + bs - 1) / bs;
        }
    auto add_own = [&](const OptPiece& pc, int64_t a, int64_t b) {  // local elements [a, b) that map nowhere
        for (int64_t x = a; x < b; x += bs) segs.push_back({-1 - own++, x, pc.offset_state + (x - pc.offset_canonical), std::min(bs, b - x), pc.unit});
    };
    for (const OptPiece& pc : o->pieces) {
        const OptUnit& u = o->units[pc.unit];
        if (!(u.q8 && u.tp_split)) continue;
        int64_t lo = pc.offset_canonical, hi = lo + pc.numel, at = lo;
        auto sp = std::lower_bound(o->tp_spans.begin(), o->tp_spans.end(), lo,
                                   [](const ParamSpan& a, int64_t x) { return a.offset_local + a.numel <= x; });
        for (; sp != o->tp_spans.end() && sp->offset_local < hi; ++sp) {
            int64_t a = std::max(sp->offset_local, lo), b = std::min(sp->offset_local + sp->numel, hi);
            if (a > at) add_own(pc, at, a);
            for (int64_t x = a; x < b;) {
                int64_t in_unit = sp->offset_canonical + (x - sp->offset_local) - u.canon_elem, blk = in_unit / bs;
                int64_t end = std::min(b, x + (blk + 1) * bs - in_unit);
                segs.push_back({u.split_block + blk, x, pc.offset_state + (x - lo), end - x, pc.unit});
                x = end;
            }
            at = b;
        }
        if (at < hi) add_own(pc, at, hi);
    }
    for (Seg& g : segs)
        if (g.block < 0) g.block = shared + (-1 - g.block);
    std::stable_sort(segs.begin(), segs.end(), [](const Seg& a, const Seg& b) { return a.block < b.block; });
    std::vector<int64_t> offset_param, offset_state, offset_block, numel;
    std::vector<uint8_t> decay;
    o->split8_units.clear();
    for (const Seg& g : segs) {
        offset_param.push_back(g.param);
        offset_state.push_back(g.state);
        offset_block.push_back(g.block);
        numel.push_back(g.numel);
        decay.push_back(local->t[o->units[g.unit].id].decay ? 1 : 0);
        o->split8_units.push_back(g.unit);
    }
    o->split_shared = shared;
    o->split_nblocks = shared + own;
    o->split8_scale.assign(segs.size(), 1.0f);
    adam_pieces_init(&o->split8, offset_param.data(), offset_state.data(), offset_block.data(), numel.data(), decay.data(),
                     (int)segs.size(), o->block_size);
    o->split_scratch = (float*)backend_malloc(std::max<size_t>(1, (size_t)(2 * o->split_nblocks + 2 * (int64_t)segs.size()) * sizeof(float)));
    optimizer_alloc_state(o);
    adam_pieces_free(&o->update32);
    adam_pieces_free(&o->update8);
    optimizer_tables_init(o, local);
    optimizer_reset(o);
}

// The groups the sliced 8-bit units' block maxima are all-reduced over (Optimizer::split8): the
// tensor-parallel group (size > 1), and the data-parallel one under ZeRO-1 on several ranks.
static inline void optimizer_set_comms(Optimizer* o, const Comm* tp, const Comm* dp, int zero_stage) {
    o->tp_comm = tp && tp->size > 1 ? tp : nullptr;
    o->shard_comm = zero_stage == 1 && dp && dp->size > 1 ? dp : nullptr;
}

// A pipeline stage's or tensor-parallel rank's optimizer (built from its own table) learns where its
// units sit in the whole model's canonical state: unit (tensor, layer l of the stage) is the whole
// model's unit (tensor, stage_layer_first + l); a tensor-parallel rank's slice of a split tensor maps
// element by element through param_table_rank_spans. Units another rank also holds and saves
// (param_is_mirror: the tied embedding on the last stage, replicated tensors on TP rank > 0) are
// marked. The checkpoint layout and the per-layer statistics then speak of the whole model, whatever
// the layout.
static inline void optimizer_set_stage(Optimizer* o, const ParamTable* whole, const Config* c, const ParamTable* local,
                                       const GPTConfig* cfg) {
    std::vector<OptUnit> all = optimizer_units(whole, c, &o->canon_n32, &o->canon_n8, &o->canon_nblocks);
    bool tp = cfg->tp_size > 1;
    for (OptUnit& u : o->units) {
        int layer = whole->t[u.id].per_layer ? cfg->stage_layer_first + u.layer : 0;
        const OptUnit* w = nullptr;
        for (const OptUnit& x : all)
            if (x.id == u.id && x.layer == layer) w = &x;
        bool split = tp && local->t[u.id].tp != TP_NONE;
        if (w && split) u.q8 = w->q8;  // 8-bit or not as the whole unit (a slice may be under --adam8bit-min-size)
        if (!w || (!split && w->numel != u.numel) || w->q8 != u.q8)
            keel_die("optimizer: unit %s layer %d is not in the whole model", whole->t[u.id].name, layer);
        u.layer = layer;
        u.canon_index = w->canon_index;
        u.canon_state = w->canon_state;
        u.canon_block = w->canon_block;
        u.canon_elem = w->offset_canonical;
        u.canon_numel = w->numel;
        u.tp_split = split;
        u.mirror = param_is_mirror(local, u.id, cfg);
    }
    o->tp_rank = cfg->tp_rank;
    if (tp) {
        o->tp_spans = param_table_rank_spans(local, whole, cfg);
        if (o->type == OPTIMIZER_ADAM8BIT) {
            optimizer_cut_pieces(o);  // (the 8-bit choice may have changed)
            optimizer_split_init(o, local);
        }
    }
    o->canon_n = whole->total;
    o->canon_units = (int64_t)all.size();
    o->canonical_bytes = optimizer_state_bytes(o, o->canon_n32, o->canon_n8, o->canon_nblocks, o->canon_units);
    o->layout = optimizer_layout_of(all, whole, c, &o->fp32_tensor);
}

// Where state sits in the canonical payload: (canonical byte offset, local pointer, bytes) per
// contiguous stretch, for the pieces' parts inside [lo, hi) of this rank's buffer, and with
// with_history each unit's percentile history (replicated over the data-parallel ranks). saving:
// leave out the tied embedding's mirror copy. With [lo, hi) = the rank's shard, saving, and the
// history on one rank per stage, the spans of all ranks tile the payload exactly once (each byte has
// one writer); with [lo, hi) = the rank's whole range they are everything the rank holds (for loading).
struct StateSpan { size_t offset_canonical; uint8_t* local; size_t bytes; };

static inline std::vector<StateSpan> optimizer_state_spans(Optimizer* o, int64_t lo_limit, int64_t hi_limit, bool with_history,
                                                           bool saving) {
    std::vector<StateSpan> spans;
    int64_t hist = o->pclip_hist ? o->canon_units * PCLIP_HISTORY : 0;
    size_t f4 = sizeof(float);
    size_t sec_m32 = 0, sec_v32 = o->canon_n32 * f4, sec_am = 2 * o->canon_n32 * f4, sec_av = sec_am + o->canon_nblocks * f4;
    size_t sec_hist = sec_av + o->canon_nblocks * f4, sec_cm = sec_hist + hist * f4, sec_cv = sec_cm + o->canon_n8;
    auto add = [&](size_t at, void* local, size_t bytes) {  // joined to the last span when both sides continue it
        StateSpan* b = spans.empty() ? nullptr : &spans.back();
        if (b && b->offset_canonical + b->bytes == at && b->local + b->bytes == (uint8_t*)local) b->bytes += bytes;
        else spans.push_back({at, (uint8_t*)local, bytes});
    };
    if (!o->tp_spans.empty()) {  // the units tensor parallelism slices: element spans (see tp_spans)
        std::vector<int> piece_of(o->units.size(), -1);
        for (size_t k = 0; k < o->pieces.size(); k++) piece_of[o->pieces[k].unit] = (int)k;
        size_t ui = 0;  // the unit at `at` (spans are in local order; one may run on into the next unit)
        for (const ParamSpan& sp : o->tp_spans)
            for (int64_t at = std::max(sp.offset_local, lo_limit), end = std::min(sp.offset_local + sp.numel, hi_limit); at < end;) {
                while (ui + 1 < o->units.size() && o->units[ui + 1].offset_canonical <= at) ui++;
                const OptUnit& u = o->units[ui];
                int64_t lo = at, hi = std::min(end, u.offset_canonical + u.numel);
                at = hi;
                if (!u.tp_split || (saving && u.mirror) || piece_of[ui] < 0) continue;
                const OptPiece& pc = o->pieces[piece_of[ui]];
                lo = std::max(lo, pc.offset_canonical);
                hi = std::min(hi, pc.offset_canonical + pc.numel);
                if (lo >= hi) continue;
                size_t in_unit = (size_t)(sp.offset_canonical + (lo - sp.offset_local) - u.canon_elem), n = (size_t)(hi - lo);
                size_t local = (size_t)(pc.offset_state + (lo - pc.offset_canonical));
                if (u.q8) {
                    add(sec_cm + u.canon_state + in_unit, o->code_m + local, n);
                    add(sec_cv + u.canon_state + in_unit, o->code_v + local, n);
                } else {
                    add(sec_m32 + (u.canon_state + in_unit) * f4, o->m32 + local, n * f4);
                    add(sec_v32 + (u.canon_state + in_unit) * f4, o->v32 + local, n * f4);
                }
            }
        // the sliced 8-bit units' scales: the same on every rank of the stage, written by its first
        if (with_history && !(saving && o->tp_rank != 0))
            for (const OptUnit& u : o->units)
                if (u.q8 && u.tp_split && !(saving && u.mirror)) {
                    size_t nb = (size_t)((u.canon_numel + o->block_size - 1) / o->block_size);
                    add(sec_am + u.canon_block * f4, o->split_absmax_m + u.split_block, nb * f4);
                    add(sec_av + u.canon_block * f4, o->split_absmax_v + u.split_block, nb * f4);
                }
    }
    for (const OptPiece& pc : o->pieces) {
        const OptUnit& u = o->units[pc.unit];
        if ((saving && u.mirror) || u.tp_split) continue;  // (a sliced unit: above)
        int64_t lo = std::max(pc.offset_canonical, lo_limit), hi = std::min(pc.offset_canonical + pc.numel, hi_limit);
        if (lo >= hi) continue;
        int64_t skip = lo - pc.offset_canonical, n = hi - lo;  // within the piece
        int64_t in_unit = lo - u.offset_canonical;              // within the unit (a block boundary)
        if (u.q8) {
            int64_t b0 = skip / o->block_size, nb = (n + o->block_size - 1) / o->block_size, cb0 = in_unit / o->block_size;
            add(sec_cm + u.canon_state + in_unit, o->code_m + pc.offset_state + skip, (size_t)n);
            add(sec_cv + u.canon_state + in_unit, o->code_v + pc.offset_state + skip, (size_t)n);
            add(sec_am + (u.canon_block + cb0) * f4, o->absmax_m + pc.offset_block + b0, (size_t)nb * f4);
            add(sec_av + (u.canon_block + cb0) * f4, o->absmax_v + pc.offset_block + b0, (size_t)nb * f4);
        } else {
            add(sec_m32 + (u.canon_state + in_unit) * f4, o->m32 + pc.offset_state + skip, (size_t)n * f4);
            add(sec_v32 + (u.canon_state + in_unit) * f4, o->v32 + pc.offset_state + skip, (size_t)n * f4);
        }
    }
    if (hist && with_history)
        for (size_t ui = 0; ui < o->units.size(); ui++)
            if (!(saving && (o->units[ui].mirror || (o->units[ui].tp_split && o->tp_rank != 0))))
                add(sec_hist + (size_t)o->units[ui].canon_index * PCLIP_HISTORY * f4, o->pclip_hist + ui * PCLIP_HISTORY,
                    PCLIP_HISTORY * f4);
    return spans;
}

// What this rank writes of a checkpoint: its shard's state (and the stage's first rank the history).
static inline std::vector<StateSpan> optimizer_save_spans(Optimizer* o) {
    return optimizer_state_spans(o, o->shard_lo[o->rank], o->shard_lo[o->rank + 1], o->rank == 0, true);
}

// This rank's whole state from a canonical payload (whatever DP size, ZeRO stage or pipeline size
// wrote it).
static inline void optimizer_load_canonical(Optimizer* o, const uint8_t* payload) {
    for (const StateSpan& sp : optimizer_state_spans(o, o->range_lo, o->range_hi, true, false))
        backend_copy_to_device(sp.local, payload + sp.offset_canonical, sp.bytes);
}

static inline void optimizer_free(Optimizer* o) {
    adam_pieces_free(&o->update32);
    adam_pieces_free(&o->update8);
    adam_pieces_free(&o->split8);
    backend_free(o->state);
    if (o->split_scratch) backend_free(o->split_scratch);
    delete o->maps;
}

// What a checkpoint must match to hand its optimizer state to this run: "adam", or
// "adam8bit block B: wte 32, wpe 8, ..." (the bits of every tensor's units, over the whole model).
static inline const std::string& optimizer_layout(const Optimizer* o) { return o->layout; }

// The start-up memory line: bytes of optimizer state per parameter, and what keeps 32-bit state.
static inline std::string optimizer_describe(const Optimizer* o, const ParamTable* pt, const Config* c) {
    char buf[768];
    double per = (double)o->canonical_bytes / (double)o->canon_n, mb = (double)o->canonical_bytes / 1048576.0;
    char rank_part[200] = "";
    const char* of = o->n != o->canon_n ? "of this rank's part of the model: " : "of ";
    if (o->range_hi - o->range_lo != o->n)
        snprintf(rank_part, sizeof rank_part, " | ZeRO-1: this rank holds %.1f MiB (parameters %lld..%lld %s%lld)",
                 (double)o->state_bytes / 1048576.0, (long long)o->range_lo, (long long)o->range_hi, of, (long long)o->n);
    else if (o->n != o->canon_n)
        snprintf(rank_part, sizeof rank_part, " | this rank's part of the model (stage, tensor slice) holds %.1f MiB (%lld of the %lld parameters)",
                 (double)o->state_bytes / 1048576.0, (long long)o->n, (long long)o->canon_n);
    if (o->type == OPTIMIZER_ADAM) {
        snprintf(buf, sizeof buf, "optimizer: adam, fp32 m and v | state %.2f bytes/parameter (%.1f MiB)%s", per, mb, rank_part);
        return buf;
    }
    std::string kept;  // the tensors with 32-bit state, and why
    for (int id = 0; id < NUM_PARAMS; id++) {
        if (!o->fp32_tensor[id]) continue;
        kept += (kept.empty() ? "" : ", ") + std::string(pt->t[id].name);
        if (id == P_WTE && c->stable_embedding) kept += " (--stable-embedding)";
    }
    snprintf(buf, sizeof buf,
             "optimizer: adam8bit, block %d, min size %lld | 8-bit state on %lld of %lld parameters; 32-bit on %lld (%s) | "
             "state %.2f bytes/parameter (%.1f MiB; fp32 Adam: 8.00, %.1f MiB)%s",
             o->block_size, (long long)c->adam8bit_min_size, (long long)o->canon_n8, (long long)o->canon_n, (long long)o->canon_n32,
             kept.empty() ? "none" : kept.c_str(),
             per, mb, (double)o->canon_n * 8 / 1048576.0, rank_part);
    return buf;
}

static inline void update_guard_init(UpdateGuard* g, const Config* c) {
    rolling_init(&g->loss, c->skip_update_window);
    rolling_init(&g->norm, c->skip_update_window);
}

// Step 0: the data-parallel mean of the gradients with the pre-divide split (docs/knobs.md#gradient-pre-divide-factor), reduced
// to the shard owners: afterwards this rank's shard [shard_lo[rank], shard_lo[rank+1]) of g holds
// Σ_r g_r / DP (summed in rank order). The net factor is 1/DP; F only decides how much of it is
// applied before the sum (overflow/underflow control under fp16).
// (Step 0 in one call: every bucket at once, grad_reducer_* below is the overlapped form of it.)
static inline void grad_reduce(const Comm* comm, const Optimizer* o, float* g, double predivide, std::vector<float>* scratch) {
    if (predivide != 1.0) grad_scale(g, o->n, (float)(1.0 / predivide));
    int64_t lo = o->shard_lo[o->rank], n = o->shard_lo[o->rank + 1] - lo;
    comm_reduce_scatter_sum_f32(comm, g, g + lo, o->shard_lo, scratch);
    if (predivide != (double)comm->size) grad_scale(g + lo, n, (float)(predivide / comm->size));
}

// ---- Step 0 overlapped with the backward: gradient buckets ---------------------------------------------
// The data-parallel reduction of an iteration's gradients starts while the last micro-batch's
// backward is still running (Megatron's overlapped gradient reduction; docs/internals.md#parallelism). The backward runs
// the stage's layers from last to first, so layer l's slice of every per-layer tensor is final once
// the backward of layer l of the last micro-batch is done. A bucket is a group of consecutive layers,
// grown (from the last layer down) until its gradients reach bucket_elems: one contiguous range per
// per-layer tensor, ready after its lowest layer's backward. The tensors outside the layers (word
// and position embeddings, final LayerNorm, embedding LayerNorm) form the last bucket, ready after
// the whole backward — under pipeline parallelism after the tied embedding's exchange too.
// bucket_elems ≤ 0: one bucket, after the backward (no overlap). The buckets are a function of the
// table and bucket_elems alone (the same on every data-parallel rank); every element belongs to
// exactly one; each is reduced as the unbucketed reduce-scatter reduces it (comm.h
// comm_reduce_scatter_ranges), so ZeRO-0 and ZeRO-1 keep one set of bits and resume stays exact.
struct GradBucket {
    std::vector<std::pair<int64_t, int64_t>> ranges;  // [lo, hi) of the flat gradient buffer, ascending, disjoint
    int after_layer;                                  // the stage layer whose backward completes it; -1: the whole backward
};
static inline void grad_bucket_add(GradBucket* b, int64_t lo, int64_t hi) {
    if (lo >= hi) return;
    if (!b->ranges.empty() && b->ranges.back().second == lo) b->ranges.back().second = hi;  // adjacent: one range
    else b->ranges.push_back({lo, hi});
}
static inline std::vector<GradBucket> grad_buckets(const ParamTable* pt, int L, int64_t bucket_elems) {
    std::vector<GradBucket> buckets;
    int64_t per_layer = 0;  // gradient elements of one layer
    for (int i = 0; i < NUM_PARAMS; i++)
        if (pt->t[i].per_layer && L > 0) per_layer += pt->t[i].numel / L;
    if (bucket_elems > 0 && per_layer > 0) {
        for (int hi = L; hi > 0;) {  // layers [lo, hi), from the last one down
            int lo = hi - 1;
            while (lo > 0 && (int64_t)(hi - lo) * per_layer < bucket_elems) lo--;
            GradBucket b = {{}, lo};
            for (int i = 0; i < NUM_PARAMS; i++) {
                const ParamTensor* t = &pt->t[i];
                if (!t->per_layer || t->numel == 0) continue;
                int64_t per = t->numel / L;
                grad_bucket_add(&b, t->offset_canonical + lo * per, t->offset_canonical + hi * per);
            }
            std::sort(b.ranges.begin(), b.ranges.end());
            buckets.push_back(b);
            hi = lo;
        }
    }
    GradBucket rest = {{}, -1};  // everything no layer bucket holds, in buffer order
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (const GradBucket& b : buckets) taken.insert(taken.end(), b.ranges.begin(), b.ranges.end());
    std::sort(taken.begin(), taken.end());
    int64_t at = 0;
    for (const auto& r : taken) {
        grad_bucket_add(&rest, at, r.first);
        at = r.second;
    }
    grad_bucket_add(&rest, at, pt->total);
    if (!rest.ranges.empty()) buckets.push_back(rest);
    return buckets;
}

// The buckets of one iteration in flight: grad_reducer_layer_done(l) after the backward of stage
// layer l of the last micro-batch issues the buckets it completes, grad_reducer_finish the rest and
// orders everything after them; then this rank's shard holds the mean, exactly as after grad_reduce.
struct GradReducer {
    const Comm* comm;
    const Optimizer* o;
    float* g;
    double predivide;
    const std::vector<GradBucket>* buckets;
    size_t next;                   // the first bucket not issued yet
    std::vector<float>* scratch;
};
static inline void grad_reducer_issue(GradReducer* r) {
    const GradBucket* b = &(*r->buckets)[r->next++];
    if (r->predivide != 1.0)
        for (const auto& rg : b->ranges) grad_scale(r->g + rg.first, rg.second - rg.first, (float)(1.0 / r->predivide));
    comm_reduce_scatter_ranges(r->comm, r->g, b->ranges, r->o->shard_lo, r->scratch);
}
static inline void grad_reducer_layer_done(GradReducer* r, int layer) {
    while (r->next < r->buckets->size() && (*r->buckets)[r->next].after_layer == layer) grad_reducer_issue(r);
}
static inline void grad_reducer_finish(GradReducer* r) {
    while (r->next < r->buckets->size()) grad_reducer_issue(r);
    comm_reductions_wait(r->comm);
    int64_t lo = r->o->shard_lo[r->o->rank], n = r->o->shard_lo[r->o->rank + 1] - lo;
    if (r->predivide != (double)r->comm->size) grad_scale(r->g + lo, n, (float)(r->predivide / r->comm->size));
}

// Step 2: Σ g² of every chunk of this rank's shard (sumsq_f64: in double, eight interleaved lanes
// added in a fixed tree), all-gathered, then
// added per unit in chunk order and over units in table order: every rank gets the same bits, at
// any DP size. Fills o->unit_sumsq; returns the total and adds the exact zeros to *zeros.
// Mirror units (another rank holds and counts the same values: optimizer_set_stage) count in
// unit_sumsq but not in the total or the zeros.
static inline double grad_norm_sumsq(Optimizer* o, const Comm* comm, const float* g, int64_t* zeros) {
    size_t nc = o->chunks.size();
    std::vector<size_t> first(comm->size + 1, nc), counts(comm->size);
    for (int r = comm->size - 1; r >= 0; r--) {
        size_t c = first[r + 1];
        while (c > 0 && o->chunks[c - 1].offset_canonical >= o->shard_lo[r]) c--;
        first[r] = c;
    }
    std::vector<double> part(2 * nc);  // (Σ g², zeros) per chunk
    size_t c0 = first[comm->rank], c1 = first[comm->rank + 1];
    std::vector<int64_t> offsets(c1 - c0), numels(c1 - c0);
    for (size_t c = c0; c < c1; c++) {
        offsets[c - c0] = o->chunks[c].offset_canonical;
        numels[c - c0] = o->chunks[c].numel;
    }
    sumsq_zeros_chunks(part.data() + 2 * c0, g, offsets.data(), numels.data(), c1 - c0);
    for (int r = 0; r < comm->size; r++) counts[r] = (first[r + 1] - first[r]) * 2 * sizeof(double);
    comm_allgatherv(comm, part.data() + 2 * c0, counts[comm->rank], part.data(), counts);
    std::fill(o->unit_sumsq.begin(), o->unit_sumsq.end(), 0.0);
    for (size_t c = 0; c < nc; c++) {
        o->unit_sumsq[o->chunks[c].unit] += part[2 * c];
        if (!o->units[o->chunks[c].unit].mirror) *zeros += (int64_t)part[2 * c + 1];
    }
    double total = 0;
    for (size_t u = 0; u < o->unit_sumsq.size(); u++)
        if (!o->units[u].mirror) total += o->unit_sumsq[u];
    return total;
}

// Pipeline stages and tensor-parallel ranks each hold a part of the model: the global Σg² and zero
// count are their totals added in the model-parallel group's rank order (stage-major, then tensor
// rank: the same value on every rank).
static inline double grad_norm_across_ranks(const Comm* pipe, double sumsq, int64_t* zeros) {
    double mine[2] = {sumsq, (double)*zeros};
    std::vector<double> all(2 * pipe->size);
    comm_allgather(pipe, mine, sizeof mine, all.data());
    double total = 0, z = 0;
    for (int s = 0; s < pipe->size; s++) {
        total += all[2 * s];
        z += all[2 * s + 1];
    }
    *zeros = (int64_t)z;
    return total;
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

// Step 5: the Adam step of every piece of this rank, one update call per kind of state. The
// percentile factor of each unit was computed beforehand (per unit, on every rank: the history is
// replicated). p_c: the compute copy to write in the same pass, or null.
template <typename F>
static inline void optimizer_update(Optimizer* o, GPT<F>* model, F* p_c, const Config* c, double lr, float clip) {
    float* p = model->params;
    const float* g = model->grads;
    float wd = (float)c->weight_decay;  // on the pieces the table marks decay (the update tables know which)
    // 1 - β^t in double, then rounded once (in float it cancels: 1.3e-5 relative error at t=1, β=0.999)
    double bc1 = 1.0 - std::pow(c->adam_beta1, (double)o->step), bc2 = 1.0 - std::pow(c->adam_beta2, (double)o->step);
    if (o->type == OPTIMIZER_ADAM) {
        adamw_update_pieces(p, p_c, g, o->m32, o->v32, &o->update32, (float)lr, (float)c->adam_beta1, (float)c->adam_beta2,
                            (float)c->adam_eps, wd, (float)bc1, (float)bc2, clip);
        return;
    }
    AdamHyper h = {(float)lr, (float)c->adam_beta1, (float)c->adam_beta2, (float)c->adam_eps, wd, (float)bc1, (float)std::sqrt(bc2), clip};
    for (size_t k = 0; k < o->update32_units.size(); k++) o->update32_scale[k] = o->pclip_scale[o->update32_units[k]];
    for (size_t k = 0; k < o->update8_units.size(); k++) o->update8_scale[k] = o->pclip_scale[o->update8_units[k]];
    adam32_update_pieces(p, p_c, g, o->m32, o->v32, &o->update32, h, o->update32_scale.data());
    adam8bit_update_pieces(p, p_c, g, o->code_m, o->code_v, o->absmax_m, o->absmax_v, &o->update8, o->maps, h,
                           o->update8_scale.data());
    if (o->split_nblocks == 0) return;
    for (size_t k = 0; k < o->split8_units.size(); k++) o->split8_scale[k] = o->pclip_scale[o->split8_units[k]];
    float *blk_m = o->split_scratch, *blk_v = blk_m + o->split_nblocks, *seg = blk_v + o->split_nblocks;
    adam8bit_split_maxima(g, o->code_m, o->code_v, o->split_absmax_m, o->split_absmax_v, blk_m, blk_v, o->split_nblocks, seg, &o->split8,
                          o->maps, h, o->split8_scale.data());
    for (const Comm* group : {o->shard_comm, o->tp_comm})  // the whole units' blocks (split_shared: the same on every rank)
        if (group) {
            comm_allreduce_buf(group, blk_m, (size_t)o->split_shared, COMM_MAX);
            comm_allreduce_buf(group, blk_v, (size_t)o->split_shared, COMM_MAX);
        }
    adam8bit_split_apply(p, p_c, g, o->code_m, o->code_v, o->split_absmax_m, o->split_absmax_v, blk_m, blk_v, o->split_nblocks, &o->split8,
                         o->maps, h, o->split8_scale.data());
}

// Percentile clipping speaks of whole units: a sliced unit's Σ g² is its slices' added over the
// tensor-parallel group in rank order (every rank the same bits, so the replicated history stays
// replicated).
static inline void optimizer_tp_unit_sums(Optimizer* o) {
    if (!o->tp_comm) return;
    std::vector<double> mine;
    for (size_t u = 0; u < o->units.size(); u++)
        if (o->units[u].tp_split) mine.push_back(o->unit_sumsq[u]);
    if (mine.empty()) return;
    comm_allreduce_host(o->tp_comm, mine.data(), mine.size(), COMM_SUM);
    size_t k = 0;
    for (size_t u = 0; u < o->units.size(); u++)
        if (o->units[u].tp_split) o->unit_sumsq[u] = mine[k++];
}

// Whether the update writes the compute copy (of the parameters it updates): the model has one.
template <typename F> static inline bool optimizer_writes_compute_copy(const Optimizer*) { return gpt_has_compute_copy<F>(); }

// Steps 2-5, after grad_reduce and the loss scaler. The gradients of this rank's range hold the
// reduced values (ZeRO-0: all of them, all-gathered; ZeRO-1: the shard). found_inf: the scaler's
// verdict, already agreed over ranks. The caller all-gathers the parameters under ZeRO-1, and
// refreshes the compute copy (gpt_params_changed) unless r.compute_copy_written.
template <typename F>
static inline StepResult optimizer_step(Optimizer* o, const Comm* comm, const Comm* mp, GPT<F>* model, UpdateGuard* guard, SpikeState* spike,
                                        const Config* c, int64_t iteration, double lr, double loss, bool found_inf) {
    StepResult r = {0, 0, false, false, 0, {false, "", 0, 0}, false};
    double sumsq = grad_norm_sumsq(o, comm, model->grads, &r.num_zeros);
    if (mp && mp->size > 1) sumsq = grad_norm_across_ranks(mp, sumsq, &r.num_zeros);
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
    r.spike = spike_check(spike, c, loss, r.grad_norm);
    if (r.spike.spike) {
        r.skipped = true;
        return r;
    }
    rolling_push(&guard->loss, loss);
    rolling_push(&guard->norm, r.grad_norm);
    spike_push(spike, loss, r.grad_norm);
    // Clipping is folded into the update: each update kernel reads g and uses g·coeff, rounded, which is
    // what a separate g *= coeff pass would have left (one read and one write of the gradients fewer;
    // nothing reads the gradients after the update: the next iteration zeroes them).
    double coeff = 1.0;
    if (c->clip_grad > 0 && c->clip_grad / (r.grad_norm + 1e-6) < 1.0) coeff = (float)(c->clip_grad / (r.grad_norm + 1e-6));
    o->step++;
    // percentile statistics describe the gradient the optimizer sees (after clipping, as in
    // Megatron + bitsandbytes): ‖coeff·g‖² = coeff²·Σ g²
    // (the history is optimizer state, in device memory: the host works on a copy of it)
    if (o->pclip_hist) {
        optimizer_tp_unit_sums(o);
        std::vector<float> hist(o->units.size() * PCLIP_HISTORY);
        backend_copy_to_host(hist.data(), o->pclip_hist, hist.size() * sizeof(float));
        for (size_t ui = 0; ui < o->units.size(); ui++) {
            o->pclip_scale[ui] = percentile_clip_scale(hist.data() + ui * PCLIP_HISTORY, o->step, o->unit_sumsq[ui] * coeff * coeff,
                                                       (int)c->adam8bit_percentile_clipping);
            r.pclip_units += o->pclip_scale[ui] < 1.0f;
        }
        backend_copy_to_device(o->pclip_hist, hist.data(), hist.size() * sizeof(float));
    }
    r.compute_copy_written = optimizer_writes_compute_copy<F>(o);
    optimizer_update(o, model, r.compute_copy_written ? model->params_c : (F*)nullptr, c, lr, (float)coeff);
    return r;
}
