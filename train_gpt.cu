// train_gpt.cu — keel's trainer: main(), the training loop, model orchestration.
//
// Backend-agnostic (docs/internals.md#repository-shape): no CUDA syntax here. g++ builds it as train_gpt_cpu, nvcc as
// train_gpt; llmc/backend.h picks the op set. Everything a run does is in this file's loop:
//
//   per iteration:  for each micro-batch: read samples → forward → backward (the first micro-batch
//                   writes the gradients, the others add: llmc/model.h gpt_grads_begin)
//                   → reduce-scatter over data-parallel ranks → loss scaler → global norm → skip
//                   rules → clip (inside Adam) → Adam → [ZeRO-1: all-gather parameters] → LR schedule step
//                   → counters, JSONL record, Megatron log line
//   around it:      --eval-interval validation, --sample-interval text samples, --save-interval
//                   checkpoints, --exit-interval, and at the end: validation, save, --export-llmc,
//                   --export-hf.
//   spike autopilot (llmc/spike.h): the optimizer step reports a spike instead of applying it;
//                   --spike-policy rollback then restores the in-memory snapshot (taken every
//                   --spike-snapshot-interval iterations) and the loop skips the window up to the spike.
//
// Data: the run's k-th sample (k counted from 0 over the whole run) is the DataLoader's sample
// number k, so iteration i reads samples [consumed, consumed + global_batch) in micro-batch order,
// and a resumed run needs only consumed_samples to read exactly what the uninterrupted run would.
// With DP ranks (mpirun -np DP), micro-batch step m of rank r reads the global micro-batch m·DP + r
// (Megatron's order), so the union over ranks is exactly the single-process batch; the losses of
// all micro-batches are gathered and added in global micro-batch order, so the logged loss of a
// step is the single-process value for the same parameters. Rank 0 prints and writes files; every
// rank checks (errors name the rank's problem on stderr).
#include <chrono>
#include <csignal>
#include <functional>
#include <string>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "llmc/checkpoint.h"
#include "llmc/data.h"
#include "llmc/flags.h"
#include "llmc/hf.h"
#include "llmc/init.h"
#include "llmc/layer_stats.h"
#include "llmc/log.h"
#include "llmc/model.h"
#include "llmc/optimizer.h"
#include "llmc/outputs.h"
#include "llmc/parallel.h"
#include "llmc/planner.h"
#include "llmc/schedule.h"
#include "llmc/step_model.h"
#include "llmc/test_hooks.h"
#include "llmc/hf_tokenizer.h"
#include "llmc/tokenizer.h"

// A: the compute type of the model (llmc/ops.h, docs/internals.md#precision): float in the CPU trainer and under
// --fp32; bf16 or fp16 on the GPU under --bf16 (its default) or --fp16. Whatever A, the master
// weights, gradients, optimizer state and checkpoints are fp32, so everything below except the
// model's forward and backward reads the same buffers in every precision.
template <typename A>
struct Trainer {
    Comm comm;               // this stage's data-parallel group (llmc/comm.h): the world without pipeline parallelism
    Comm world;              // every rank: TP x PP x DP (llmc/parallel.h); its rank 0 prints and writes the files
    Comm pipe;               // this rank's pipeline: its rank is the stage (activations, gradients, the loss)
    Comm embed;              // the first and the last stage (the tied word embedding's gradient); unused at P = 1
    Comm tp;                 // this rank's tensor-parallel group (the model's all-reduces, the replicated-tensor check)
    Comm mp;                 // the model-parallel group: every stage and tensor rank of this data-parallel index
                             // (global grad norm, per-layer statistics)
    RankGrid grid;
    Config cfg;
    GPTConfig gcfg;          // this rank's part of the model: its stage and tensor-parallel slice
    std::string attention_why;  // how --attention-impl auto chose the path (trainer_attention_auto), for the start-up line
    ParamTable whole;        // the whole model's parameter table: the canonical layout of checkpoints and exports
    GPT<A> model;
    Optimizer opt;
    TrainState st;
    DataLoader train_data, valid_data;
    bool have_valid = false;
    Tokenizer tok;
    bool have_tok = false;
    Logger log;
    int64_t train_iters = 0;
    RampUp rampup;
    Curriculum curriculum;
    SkipRanges skips;
    bool skipping = false;   // inside a stretch of skipped iterations (prints its line once)
    double init_sigma = 0;   // σ of the normal init (--init-method / --init-method-std)
    std::vector<int> sample, inputs, targets;  // (T+1), (B,T), (B,T) on the host
    std::vector<float> reduce_scratch;         // (DP × shard) receive buffer of the reduce-scatter
    std::vector<GradBucket> buckets;           // the data-parallel reduction's buckets (--grad-bucket-mb, optimizer.h)
    TestHooks hooks;                           // the test-only environment hooks, read once (llmc/test_hooks.h)
    FILE* token_dump = nullptr;                // KEEL_DUMP_TOKENS (test mode): every sample this rank trains on
    LayerStats layer_stats;                    // --log-layer-norms-interval
    // --spike-policy rollback: the state of iteration snap_state.iteration (taken at start-up, so
    // there always is one), each rank its own parameters and optimizer shard
    std::vector<float> snap_params;
    std::vector<uint8_t> snap_opt;
    int64_t snap_opt_step = 0;
    TrainState snap_state;
    bool rollback_pending = false;             // the last iteration's spike asks for a rollback
    SpikeVerdict pending_spike;
    // --exit-duration-in-mins: the run's start (wall clock, seconds: the earliest rank's) and the
    // iterations this process ran; --log-timers-to-tensorboard: this iteration's timers (ms)
    double start_wall = 0;
    int64_t iterations_run = 0;
    double last_save_minutes = 0;              // --save-interval-minutes: trainer_elapsed_minutes at the last save
    AsyncSave async_save;                      // --async-save: the save being written behind training
    std::vector<float> gather_stage;           // a save's host copy of this rank's parameters under P or T > 1 (kept under --async-save)
    double timer_forward_ms = 0, timer_backward_ms = 0;
    OpTimes op_times;                          // --time-ops: the timed iteration's marks (llmc/op_times.h)
    bool op_times_done = false;                // its table was printed
    bool op_times_skipped = false;             // that iteration fell in a --skip-train-iteration-range
};

static double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

static int num_threads() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

// ---- Megatron-DeepSpeed's run control and timers ----------------------------------------------

static double wall_seconds() {  // comparable across nodes, as Python's time.time()
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
}

// The run's start for --exit-duration-in-mins: the earliest rank's, as Megatron's all-reduce MIN of
// its start times (the scheduler's clock started before the first rank did).
static double trainer_start_clock(const Comm* world) {
    double mine = wall_seconds();
    std::vector<double> all(world->size);
    comm_allgather(world, &mine, sizeof mine, all.data());
    return *std::min_element(all.begin(), all.end());
}

// BigScience's kill switch (--kill-switch-path): whether the file exists, agreed over the world, so
// a rank whose file system has not seen it yet stops with the others at the same iteration.
template <typename A>
static bool trainer_kill_switch(const Trainer<A>* tr) {
    return !tr->cfg.kill_switch_path.empty() && comm_any(&tr->world, file_exists(tr->cfg.kill_switch_path.c_str()));
}

// Minutes since the run's start; test hook KEEL_TEST_FAKE_CLOCK makes them iterations x M on the
// hooked ranks (llmc/test_hooks.h).
template <typename A>
static double trainer_elapsed_minutes(const Trainer<A>* tr) {
    const TestHooks* h = &tr->hooks;
    if (h->fake_clock_minutes >= 0 && (h->fake_clock_rank < 0 || h->fake_clock_rank == tr->world.rank))
        return h->fake_clock_minutes * (double)tr->iterations_run;
    return (wall_seconds() - tr->start_wall) / 60.0;
}

// --log-timers-to-tensorboard: a timer reads the clock after the device has finished the work
// queued so far (as Megatron's timers synchronize CUDA), which costs overlap, so only under the flag.
// The 4-byte read-back is the host's wait for keel's stream (no-op on the CPU).
template <typename A>
static double trainer_timer_now(Trainer<A>* tr) {
    if (!tr->cfg.log_timers_to_tensorboard) return 0;
    float x;
    backend_copy_to_host(&x, tr->model.grads, sizeof x);  // (a wait for the GPU; the gradients always exist whole)
    return now_ms();
}
template <typename A>
static void trainer_timer_add(Trainer<A>* tr, double start, double* total_ms) {
    if (tr->cfg.log_timers_to_tensorboard) *total_ms += trainer_timer_now(tr) - start;
}

// --log-params-norm: the L2 norm of the fp32 master weights after the update, Megatron's
// calc_params_l2_norm: every parameter counted once (not the last stage's copy of the tied embedding,
// not a replicated tensor's copies on tensor ranks > 0), Σθ² of each rank's part added over the
// model-parallel group in its rank order. Megatron reads the model's own copy (bf16/fp16 on a GPU
// run); keel the fp32 master weights (the CPU trainer's only copy).
template <typename A>
static double trainer_params_norm(Trainer<A>* tr) {
    const Optimizer* o = &tr->opt;
    const GPT<A>* m = &tr->model;
    size_t nc = o->chunks.size();
    std::vector<int64_t> offsets, numels;
    std::vector<size_t> which;  // the chunks this rank's master weights hold (all, or its ZeRO-1 shard's)
    for (size_t c = 0; c < nc; c++) {
        int64_t lo, hi, at = o->chunks[c].offset_canonical;
        if (!gpt_master_part(m, at, at + o->chunks[c].numel, &lo, &hi)) continue;
        offsets.push_back(at);
        numels.push_back(o->chunks[c].numel);
        which.push_back(c);
    }
    std::vector<double> held(2 * which.size()), part(2 * nc, 0.0);  // (Σ θ², zeros) per chunk: the gradient norm's op, on the weights
    sumsq_zeros_chunks(held.data(), m->params, offsets.data(), numels.data(), which.size());
    for (size_t k = 0; k < which.size(); k++) part[2 * which[k]] = held[2 * k];
    // a sharded master: each chunk has one owner, the others add 0 (exact), then the sum below in chunk order
    if (gpt_master_sharded(m)) comm_allreduce_sum_f64(&tr->comm, part.data(), (int)part.size());
    double mine = 0;
    for (size_t c = 0; c < nc; c++)
        if (!o->units[o->chunks[c].unit].mirror) mine += part[2 * c];
    std::vector<double> all(tr->mp.size);
    comm_allgather(&tr->mp, &mine, sizeof mine, all.data());
    double total = 0;
    for (double x : all) total += x;
    return std::sqrt(total);
}

// Fills inputs/targets (B,T) from the loader's sample numbers first .. first+B-1.
template <typename A>
static void trainer_read_batch(Trainer<A>* tr, DataLoader* dl, int64_t first, int B, int T) {
    for (int b = 0; b < B; b++) {
        dataloader_read(dl, first + b, tr->sample.data());
        for (int t = 0; t < T; t++) {
            tr->inputs[b * T + t] = tr->sample[t];
            tr->targets[b * T + t] = tr->sample[t + 1];
        }
    }
}

// Test mode: KEEL_DUMP_TOKENS=PREFIX makes rank r append one line per sample row it trains on to
// PREFIX.rank<r>:  "<iteration> <rank> <micro-batch step> <row> <sample number> <T+1 token ids>".
// dev/batch_lookup must print exactly these for the same run (test/test_batch_lookup.sh).
template <typename A>
static void trainer_dump_tokens(Trainer<A>* tr, int64_t iteration, int64_t m, int64_t first, int B, int T) {
    if (!tr->token_dump) return;
    for (int b = 0; b < B; b++) {
        fprintf(tr->token_dump, "%lld %d %lld %d %lld", (long long)iteration, tr->comm.rank, (long long)m, b, (long long)(first + b));
        for (int t = 0; t < T; t++) fprintf(tr->token_dump, " %d", tr->inputs[b * T + t]);
        fprintf(tr->token_dump, " %d\n", tr->targets[b * T + T - 1]);
    }
    fflush(tr->token_dump);
}

// Iterations whose batch is consumed unread: --skip-train-iteration-range, and the windows the
// spike autopilot's rollbacks skip.
template <typename A>
static bool trainer_skips(const Trainer<A>* tr, int64_t iteration) {
    return skip_ranges_contains(&tr->skips, iteration) || spike_skips(&tr->st.spike, iteration);
}

// A skipped iteration (docs/knobs.md#skipping-iterations, NVM semantics): its global batch is consumed unread, the iteration
// and the consumed-sample/token counters advance, nothing trains (no forward, no update, no LR or
// scaler step). One line per contiguous stretch.
template <typename A>
static void trainer_skip_iteration(Trainer<A>* tr, int64_t gbs, int T) {
    int64_t it = tr->st.iteration + 1;
    if (!tr->skipping) {
        int64_t last = it;
        while (last < tr->train_iters && trainer_skips(tr, last + 1)) last++;
        printf("skipping iterations %lld to %lld (%s): their batches are consumed without training\n", (long long)it, (long long)last,
               skip_ranges_contains(&tr->skips, it) ? "--skip-train-iteration-range" : "spike rollback");
    }
    tr->skipping = true;
    tr->st.iteration = it;
    tr->st.consumed_samples += gbs;
    tr->st.consumed_tokens += gbs * T;
}

// Per-micro-batch values of every rank, added up in global micro-batch order (m·DP + r), so the
// result is the single-process sum at any DP size. local: (accum, k) on this rank; returns k sums.
static std::vector<double> trainer_sum_global_order(const Comm* comm, const double* local, int64_t accum, int k) {
    int dp = comm->size;
    std::vector<double> all(accum * dp * k), sum(k, 0.0);  // all[(r·accum + m)·k + j]
    comm_allgather(comm, local, accum * k * sizeof(double), all.data());
    for (int64_t m = 0; m < accum; m++)
        for (int r = 0; r < dp; r++)
            for (int j = 0; j < k; j++) sum[j] += all[(r * accum + m) * k + j];
    return sum;
}

// The optimizer step found a spike (llmc/spike.h) and did not apply the update. skip: that is all;
// rollback: the main loop restores the snapshot once this iteration is logged.
template <typename A>
static void trainer_on_spike(Trainer<A>* tr, const SpikeVerdict* v, int64_t it) {
    std::string why = spike_describe(v, &tr->cfg, it);
    if (tr->cfg.spike_policy == "skip") {
        printf("%s: update skipped (--spike-policy skip)\n", why.c_str());
        char buf[256];
        snprintf(buf, sizeof buf, "\"spike\": \"skip\", \"metric\": \"%s\", \"value\": %s, \"zscore\": %s", v->metric,
                 json_num(v->value).c_str(), json_num(v->z).c_str());
        log_spike(&tr->log, it, buf, -1);
        return;
    }
    printf("%s: rolling back\n", why.c_str());
    tr->rollback_pending = true;
    tr->pending_spike = *v;
}

// The compute copy after a write to the master weights: refreshed where this rank's master weights
// cover it, then, with a sharded master (ZeRO-1 under bf16/fp16), all-gathered over the data-parallel
// ranks. Collective over them.
template <typename A>
static void trainer_params_changed(Trainer<A>* tr) {
    gpt_params_changed(&tr->model);
    if (gpt_master_sharded(&tr->model)) comm_allgather_shards(&tr->comm, tr->model.params_c, tr->opt.shard_lo);
}

// The stage's whole fp32 master weights on the device, for the rare readers of all of them (the
// checkpoint, the exports, the per-layer weight norms): the master itself, or with a sharded master
// the shards all-gathered into the gradient buffer — free from the update to the next iteration's
// zeroing, so no memory is kept for it; 4 bytes per parameter move, at those moments only.
// Collective over the data-parallel ranks; valid until the next iteration.
template <typename A>
static const float* trainer_whole_master(Trainer<A>* tr) {
    GPT<A>* m = &tr->model;
    if (!gpt_master_sharded(m)) return m->params;
    backend_copy_on_device(m->grads + m->master_lo, m->params + m->master_lo, (size_t)(m->master_hi - m->master_lo) * sizeof(float));
    comm_allgather_shards(&tr->comm, m->grads, tr->opt.shard_lo);
    return m->grads;
}

// The checksums (param_checksum) of the stage's master weights [a, a + n) for each (a, n) of `parts`,
// whichever data-parallel ranks keep them: with a sharded master every rank sums the terms of its
// part and the ranks' sums are added (each term is one element at its position; u64 sums are
// order-free). A few bytes to the host each; collective over the data-parallel ranks when sharded.
template <typename A>
static std::vector<uint64_t> trainer_master_checksums(Trainer<A>* tr, const std::vector<std::pair<int64_t, int64_t>>& parts) {
    const GPT<A>* m = &tr->model;
    std::vector<uint64_t> sums;
    for (const auto& pt : parts) {
        int64_t lo, hi;
        sums.push_back(gpt_master_part(m, pt.first, pt.first + pt.second, &lo, &hi) ? param_checksum(m->params + lo, hi - lo, lo - pt.first) : 0);
    }
    if (!gpt_master_sharded(m) || sums.empty()) return sums;
    std::vector<uint64_t> all(sums.size() * tr->comm.size);
    comm_allgather(&tr->comm, sums.data(), sums.size() * sizeof(uint64_t), all.data());
    for (size_t i = 0; i < sums.size(); i++) {
        sums[i] = 0;
        for (int r = 0; r < tr->comm.size; r++) sums[i] += all[r * sums.size() + i];
    }
    return sums;
}

// --spike-policy rollback: keep this iteration's whole state in host memory (every rank its own:
// its master weights, all of them or its ZeRO-1 shard, and its optimizer state).
template <typename A>
static void trainer_snapshot(Trainer<A>* tr) {
    const GPT<A>* m = &tr->model;
    tr->snap_params.resize(m->master_hi - m->master_lo);
    backend_copy_to_host(tr->snap_params.data(), m->params + m->master_lo, tr->snap_params.size() * sizeof(float));
    tr->snap_opt.resize(tr->opt.state_bytes);
    backend_copy_to_host(tr->snap_opt.data(), tr->opt.state, tr->opt.state_bytes);
    tr->snap_opt_step = tr->opt.step;
    tr->snap_state = tr->st;
}

// Restores the snapshot of iteration s after a spike at iteration k: the run continues exactly as a
// restart from a checkpoint of s with --skip-train-iteration-range s+1-k would (plus the history
// and the lowered-LR window, which survive the restore). Every rank does the same: the verdict came
// from values identical on all ranks.
template <typename A>
static void trainer_rollback(Trainer<A>* tr, int64_t k) {
    const Config* c = &tr->cfg;
    const SpikeVerdict* v = &tr->pending_spike;
    tr->rollback_pending = false;
    SpikeState kept = tr->st.spike;
    if ((int64_t)kept.rollbacks.size() >= c->spike_max_rollbacks)
        keel_die_code(KEEL_EXIT_RUNTIME, "inspect the run (dev/batch_lookup shows the batches); raise --spike-max-rollbacks to go on",
                      "spike autopilot: a %s spike at iteration %lld would be rollback %lld, over --spike-max-rollbacks %lld",
                      v->metric, (long long)k, (long long)kept.rollbacks.size() + 1, (long long)c->spike_max_rollbacks);
    int64_t s = tr->snap_state.iteration;
    backend_copy_to_device(tr->model.params + tr->model.master_lo, tr->snap_params.data(), tr->snap_params.size() * sizeof(float));
    trainer_params_changed(tr);
    backend_copy_to_device(tr->opt.state, tr->snap_opt.data(), tr->opt.state_bytes);
    tr->opt.step = tr->snap_opt_step;
    tr->st = tr->snap_state;
    tr->st.spike.rollbacks = kept.rollbacks;
    tr->st.spike.rollbacks.push_back({k, s});
    tr->st.spike.lr_factor_through = std::max(kept.lr_factor_through, k + c->spike_lr_iters);
    tr->skipping = false;
    printf("spike autopilot: restored iteration %lld (in-memory snapshot); iterations %lld-%lld will be skipped", (long long)s,
           (long long)s + 1, (long long)k);
    if (c->spike_lr_factor != 1.0)
        printf("; learning rate x%s through iteration %lld", double_repr(c->spike_lr_factor).c_str(),
               (long long)tr->st.spike.lr_factor_through);
    printf(" (rollback %zu of at most %lld)\n", tr->st.spike.rollbacks.size(), (long long)c->spike_max_rollbacks);
    char buf[512];
    snprintf(buf, sizeof buf,
             "\"spike\": \"rollback\", \"metric\": \"%s\", \"value\": %s, \"zscore\": %s, \"restored_iteration\": %lld, "
             "\"skip\": \"%lld-%lld\", \"lr_factor\": %s, \"lr_factor_through\": %lld",
             v->metric, json_num(v->value).c_str(), json_num(v->z).c_str(), (long long)s, (long long)s + 1, (long long)k,
             json_num(c->spike_lr_factor).c_str(), (long long)tr->st.spike.lr_factor_through);
    log_spike(&tr->log, k, buf, s);
}

// Pipeline parallelism keeps the tied word embedding on the first and the last stage; the two
// copies must stay identical (same gradient sum, same optimizer state, same update). Checked at
// every log line by a checksum exchange; a mismatch stops the run.
template <typename A>
static void trainer_check_tied_embedding(Trainer<A>* tr, int64_t it) {
    if (tr->grid.pp == 1 || (tr->grid.pp_rank != 0 && tr->grid.pp_rank != tr->grid.pp - 1)) return;
    // computed where the weights live: 8 bytes to the host, not the V×C table (llmc/ops.h)
    const ParamTensor* wte = &tr->model.table.t[P_WTE];
    uint64_t mine = trainer_master_checksums(tr, {{wte->offset_canonical, wte->numel}})[0], both[2];
    comm_allgather(&tr->embed, &mine, sizeof mine, both);
    if (both[0] != both[1])
        keel_die_code(KEEL_EXIT_RUNTIME, "a bug in keel: please report it with the run's flags",
                      "iteration %lld: the tied word embedding differs between the first and the last pipeline stage "
                      "(checksums %016llx and %016llx)", (long long)it, (unsigned long long)both[0], (unsigned long long)both[1]);
}

// The replicated tensors of this rank (llmc/model.h: tensor-parallel split none): every LayerNorm, the
// row-parallel biases, the position table. Identical on every tensor-parallel rank by construction
// (identical inputs, gradients, clipping and updates, and no rank-dependent randomness).
template <typename A>
static std::vector<int> trainer_replicated_tensors(const Trainer<A>* tr) {
    std::vector<int> ids;
    for (int id = 0; id < NUM_PARAMS; id++)
        if (tr->model.table.t[id].tp == TP_NONE && tr->model.table.t[id].numel > 0) ids.push_back(id);
    return ids;
}

// --sync-tp-duplicated-parameters (docs/knobs.md#drift-of-tp-replicated-parameters, BLOOM's band-aid): before the forward, every
// replicated tensor becomes its average over the tensor-parallel ranks (fp32 master weights; the
// compute copy refreshed). Test hook: KEEL_TEST_PERTURB_REPLICATED="<tensor>:<layer>:<iteration>"
// adds 1e-3 to the first element of that tensor's layer on tensor rank 1 at the start of that
// iteration: the planted drift the check must catch, or the sync repair.
template <typename A>
static void trainer_sync_replicated(Trainer<A>* tr, int64_t it) {
    GPT<A>* m = &tr->model;
    bool changed = false;
    if (const TestHooks* h = &tr->hooks; !h->perturb_tensor.empty() && tr->grid.tp_rank == 1) {
        for (int id : trainer_replicated_tensors(tr)) {
            const ParamTensor* t = &m->table.t[id];
            int64_t l = t->per_layer ? h->perturb_layer - tr->gcfg.stage_layer_first : 0;
            if (h->perturb_iteration != it || h->perturb_tensor != t->name || l < 0 || l >= (t->per_layer ? gpt_stage_layers(&tr->gcfg) : 1)) continue;
            int64_t at = t->offset_canonical + l * t->rows * t->cols, lo, hi;
            if (gpt_master_part(m, at, at + 1, &lo, &hi)) {  // (the rank keeping that element: every rank, or its shard's)
                float v;
                backend_copy_to_host(&v, m->params + at, sizeof v);
                v += 1e-3f;
                backend_copy_to_device(m->params + at, &v, sizeof v);
            }
            changed = true;
        }
    }
    if (tr->cfg.sync_tp_duplicated_parameters && tr->grid.tp > 1) {
        // (a sharded master: the tensor-parallel ranks of one data-parallel rank have the same shard)
        for (int id : trainer_replicated_tensors(tr)) {
            const ParamTensor* t = &m->table.t[id];
            int64_t lo, hi;
            if (!gpt_master_part(m, t->offset_canonical, t->offset_canonical + t->numel, &lo, &hi)) continue;
            comm_allreduce_sum_f32_buf(&tr->tp, m->params + lo, (size_t)(hi - lo));
            grad_scale(m->params + lo, hi - lo, 1.0f / (float)tr->grid.tp);
        }
        changed = true;
    }
    if (changed) trainer_params_changed(tr);
}

// --check-replicated-params-interval: before the forward of every N-th iteration (after the sync, if
// on), a checksum of every replicated tensor, layer by layer, compared across the tensor-parallel
// ranks: the weights this iteration trains with. A mismatch stops the run naming the tensors, their
// layers and the ranks (one bad copy spreads into the others through the next update, so the check
// runs on the weights before any of that).
template <typename A>
static void trainer_check_replicated(Trainer<A>* tr, int64_t it) {
    GPT<A>* m = &tr->model;
    std::vector<std::pair<int64_t, int64_t>> parts;  // (offset, elements) of each checksum
    std::vector<std::pair<int, int>> what;            // (tensor, model layer) of each checksum
    for (int id : trainer_replicated_tensors(tr)) {
        const ParamTensor* t = &m->table.t[id];
        int64_t layers = t->per_layer ? gpt_stage_layers(&tr->gcfg) : 1, per = t->numel / layers;
        for (int64_t l = 0; l < layers; l++) {
            parts.push_back({t->offset_canonical + l * per, per});
            what.push_back({id, t->per_layer ? tr->gcfg.stage_layer_first + (int)l : -1});
        }
    }
    std::vector<uint64_t> mine = trainer_master_checksums(tr, parts);  // 8 bytes each to the host
    int T = tr->grid.tp;
    std::vector<uint64_t> all(mine.size() * T);
    comm_allgather(&tr->tp, mine.data(), mine.size() * sizeof(uint64_t), all.data());
    for (int r = 1; r < T; r++) {
        std::string bad;
        int count = 0;
        for (size_t i = 0; i < mine.size(); i++) {
            if (all[(size_t)r * mine.size() + i] == all[i]) continue;
            if (++count > 8) continue;
            bad += std::string(count > 1 ? ", " : "") + m->table.t[what[i].first].name;
            if (what[i].second >= 0) bad += " of layer " + std::to_string(what[i].second);
        }
        if (count == 0) continue;
        if (count > 8) bad += ", ... (" + std::to_string(count) + " in all)";
        keel_die_code(KEEL_EXIT_RUNTIME, "--sync-tp-duplicated-parameters averages the copies (docs/knobs.md#drift-of-tp-replicated-parameters); find the cause first",
                      "iteration %lld: replicated tensor%s %s differ%s between tensor-parallel ranks 0 and %d (world ranks %d and %d)",
                      (long long)it, count > 1 ? "s" : "", bad.c_str(), count > 1 ? "" : "s", r,
                      rank_grid_rank_of(&tr->grid, 0, tr->grid.pp_rank, tr->grid.dp_rank),
                      rank_grid_rank_of(&tr->grid, r, tr->grid.pp_rank, tr->grid.dp_rank));
    }
}

// Pipeline messages between neighbouring stages: s → s+1 carries activations, s+1 → s their
// gradients, so one tag is enough (MPI and NCCL deliver a pair's messages in order).
enum { PIPE_TAG = 7 };

// The iteration's log record (the Megatron line, the JSONL, TensorBoard) from its results.
template <typename A>
static void trainer_fill_record(const Trainer<A>* tr, IterationRecord* rec, int64_t it, int64_t gbs, int T, double lr, double loss,
                                const StepResult* rp, double ms) {
    const Config* c = &tr->cfg;
    const TrainState* st = &tr->st;
    const StepResult& r = *rp;
    rec->iteration = it;
    rec->consumed_samples = st->consumed_samples;
    rec->consumed_tokens = st->consumed_tokens;
    rec->elapsed_ms = ms;
    rec->lr = lr;
    rec->global_batch_size = gbs;
    rec->lm_loss = loss;
    rec->loss_scale = st->scaler.scale;
    rec->grad_norm = r.grad_norm;
    rec->num_zeros = r.num_zeros;
    rec->pclip_units = r.pclip_units;
    rec->seqlen = T;
    rec->skipped = r.skipped;
    rec->nan = r.nonfinite;
    rec->samples_per_second = gbs / (ms / 1000.0);
    // per GPU as Megatron-DeepSpeed estimates it: over every rank of TP x PP x DP, and 4 passes
    // (forward, recomputed forward, backward = 2) per layer under activation checkpointing
    rec->tflops = log_tflops(gbs, T, c->num_layers, c->hidden_size, tr->gcfg.padded_vocab_size, c->checkpoint_activations,
                             ms / 1000.0, tr->world.size);
    rec->layers = nullptr;
    rec->params_norm = NAN;
    rec->forward_s = rec->backward_s = rec->optimizer_s = -1;
}

// One micro-batch's forward on this pipeline stage (its slot in use): the batch read where the stage
// needs tokens, dropout keyed by its first sample, the losses left on the device until the
// iteration's end (one read-back, not one per micro-batch); act_sumsq: per-layer activation sums.
template <typename A>
static void trainer_micro_forward(Trainer<A>* tr, int64_t it, int mb, int64_t first, int B, int T, double dloss, double* act_sumsq) {
    GPT<A>* model = &tr->model;
    bool first_stage = tr->grid.pp_rank == 0, last_stage = tr->grid.pp_rank == tr->grid.pp - 1;
    double t0 = trainer_timer_now(tr);
    op_mark(&tr->op_times, "host", "batch read");
    if (first_stage || last_stage) trainer_read_batch(tr, &tr->train_data, first, B, T);
    if (first_stage) trainer_dump_tokens(tr, it, mb, first, B, T);
    gpt_set_dropout(model, true, tr->st.dropout_seed, first);
    double head_before = model->head_backward_ms;
    gpt_forward(model, tr->inputs.data(), last_stage ? tr->targets.data() : nullptr, B, T, dloss, mb);
    if (act_sumsq) op_mark(&tr->op_times, "step", "statistics");
    if (act_sumsq) layer_stats_acts(model, B, T, act_sumsq);
    trainer_timer_add(tr, t0, &tr->timer_forward_ms);
    // the LM head's backward ran inside the fused classifier: it is backward time, as Megatron counts it
    tr->timer_forward_ms -= model->head_backward_ms - head_before;
    tr->timer_backward_ms += model->head_backward_ms - head_before;
}

// The end of an iteration's pipeline schedule on this stage: its sends done (before anything reuses
// their buffers), and the tied word embedding's gradient summed over its two copies — the first
// stage's got the lookup's gradient, the last stage's the LM head's; both take the sum, so the two
// copies step identically (docs/internals.md#parallelism). (Test hook:
// KEEL_TEST_UNTIE_PIPELINE_EMBEDDING=1 leaves the copies apart, to prove the exchange matters.)
template <typename A> static void trainer_pipeline_finish(Trainer<A>* tr) {
    int P = tr->grid.pp, stage = tr->grid.pp_rank;
    GPT<A>* model = &tr->model;
    if (P > 1) op_mark(&tr->op_times, "step", "pipeline send/recv");
    comm_sends_wait(&tr->pipe);
    if (P > 1 && (stage == 0 || stage == P - 1) && !tr->hooks.untie_pipeline_embedding) {
        op_mark_comm(&tr->op_times, "step", "embedding gradient all-reduce", 4.0 * model->table.t[P_WTE].numel);
        comm_allreduce_sum_f32_buf(&tr->embed, model->g[P_WTE], (size_t)model->table.t[P_WTE].numel);
    }
}

// The gradients of one iteration's micro-batches through this stage, accumulated in the model's
// gradient buffer, then reduced over the data-parallel ranks (this rank's shard holds their mean);
// returns each micro-batch's mean loss (the last stage's; zeros elsewhere).
// act_sumsq (or null): the per-layer activation statistics, (L+1) per micro-batch.
template <typename A>
static std::vector<double> trainer_accumulate(Trainer<A>* tr, int64_t it, int64_t gbs, int B, int T, int64_t accum, double* act_sumsq) {
    const Config* c = &tr->cfg;
    TrainState* st = &tr->st;
    const Comm* comm = &tr->comm;
    int dp = comm->size, L = tr->gcfg.num_layers;
    double scale = st->scaler.scale;
    std::vector<double> losses(accum);
    // The micro-batches through this stage in 1F1B order (llmc/parallel.h; at P = 1 it is forward 0,
    // backward 0, forward 1, ...: the plain accumulation loop).
    GPT<A>* model = &tr->model;
    int P = tr->grid.pp, stage = tr->grid.pp_rank, slots = (int)model->slots.size();
    bool last_stage = stage == P - 1;
    size_t act_bytes = (size_t)B * T * c->hidden_size * sizeof(A);
    double dloss = scale / ((double)gbs * T) * dp;  // the loss scale rides on dloss; ×DP: the reduction averages
    auto first_sample = [&](int mb) { return batch_first_sample(st->consumed_samples, mb, dp, comm->rank, B); };
    // the data-parallel mean of the gradients, bucket by bucket as the last micro-batch's backward
    // completes them (optimizer.h grad_buckets): with data parallelism the reduction overlaps the
    // rest of that backward (under CUDA on the communication stream)
    GradReducer reducer = {comm, &tr->opt, tr->model.grads, c->gradient_predivide_factor, &tr->buckets, 0, &tr->reduce_scratch};
    auto layer_done = [](void* r, int l) { grad_reducer_layer_done((GradReducer*)r, l); };
    auto slot_of = [&](int mb) { gpt_use_slot(model, mb % slots); };
    if (last_stage) gpt_loss_log_reserve(model, (int)accum, B, T);
    bool grad_sent = false;  // a gradient send may still be moving (CUDA: on the communication stream)
    for (const PipeAction& a : pipeline_schedule_1f1b(stage, P, (int)accum)) {
        if (a.op != PIPE_FORWARD && a.op != PIPE_BACKWARD) op_mark(&tr->op_times, "step", "pipeline send/recv");
        switch (a.op) {
            case PIPE_RECV_FORWARD:
                slot_of(a.mb);
                comm_recv_buf(&tr->pipe, model->acts.encoded, act_bytes, stage - 1, PIPE_TAG);
                break;
            case PIPE_FORWARD:
                slot_of(a.mb);
                trainer_micro_forward(tr, it, a.mb, first_sample(a.mb), B, T, dloss, act_sumsq ? act_sumsq + a.mb * (L + 1) : nullptr);
                break;
            case PIPE_SEND_FORWARD:  // (no wait: the slot is written again only after mb's backward, which waits
                                     // for mb's gradient, which the next stage sends after receiving this)
                slot_of(a.mb);
                comm_send_buf(&tr->pipe, gpt_stage_output(model), act_bytes, stage + 1, PIPE_TAG);
                break;
            case PIPE_RECV_BACKWARD:
                comm_recv_buf(&tr->pipe, gpt_stage_grad(model), act_bytes, stage + 1, PIPE_TAG);
                break;
            case PIPE_BACKWARD: {
                if (grad_sent) comm_sends_wait(&tr->pipe);  // this backward rewrites the gradient buffer sent
                grad_sent = false;
                double t0 = trainer_timer_now(tr);
                slot_of(a.mb);
                gpt_set_dropout(model, true, st->dropout_seed, first_sample(a.mb));
                if (a.mb == accum - 1 && dp > 1) gpt_backward(model, B, T, dloss, layer_done, &reducer);
                else gpt_backward(model, B, T, dloss);
                trainer_timer_add(tr, t0, &tr->timer_backward_ms);
                break;
            }
            case PIPE_SEND_BACKWARD:  // (overlaps the next forward; the next backward waits for it)
                comm_send_buf(&tr->pipe, gpt_stage_grad(model), act_bytes, stage - 1, PIPE_TAG);
                grad_sent = true;
                break;
            case PIPE_SEND_FORWARD_RECV_BACKWARD:  // activation of mb up, gradient for mb2 down, at once
                slot_of(a.mb);
                comm_sendrecv_buf(&tr->pipe, gpt_stage_output(model), act_bytes, stage + 1, gpt_stage_grad(model), act_bytes,
                                  stage + 1, PIPE_TAG);
                break;
            case PIPE_SEND_BACKWARD_RECV_FORWARD: {  // gradient of mb down, activation of mb2 in (into mb2's slot)
                A* grad = gpt_stage_grad(model);
                slot_of(a.mb2);
                comm_sendrecv_buf(&tr->pipe, grad, act_bytes, stage - 1, model->acts.encoded, act_bytes, stage - 1, PIPE_TAG);
                break;
            }
        }
    }
    trainer_pipeline_finish(tr);
    op_mark(&tr->op_times, "step", "loss read-back");
    if (last_stage) losses = gpt_losses_read(model, (int)accum, B, T);  // (the host waits for the backward, not the reduction)
    if (dp > 1) op_mark(&tr->op_times, "step", "gradient reduction (wait)");
    grad_reducer_finish(&reducer);  // the remaining buckets; this rank's shard then holds the mean
    return losses;
}

// The loss scaler's part of a step, on this rank's shard of the reduced gradients (trainer_accumulate
// left the mean there): [--fp16: round to binary16,] unscale, check for inf/NaN over every rank,
// update the scale. Returns found_inf (false without a scaler).
template <typename A>
static bool trainer_unscale_grads(Trainer<A>* tr, int64_t it, double scale) {
    const Comm* comm = &tr->comm;
    TrainState* st = &tr->st;
    float* grads = tr->model.grads;
    int64_t lo = tr->opt.shard_lo[comm->rank], n = tr->opt.shard_lo[comm->rank + 1] - lo;
    if (tr->hooks.zero_grads_at == it) backend_memset_zero(grads + lo, (size_t)n * sizeof(float));  // test hook KEEL_TEST_ZERO_GRADS
    if (test_hooks_inject_inf(&tr->hooks, it) && comm->rank == 0) {  // test hook KEEL_INJECT_INF
        const float inf = INFINITY;
        backend_copy_to_device(grads, &inf, sizeof inf);
    }
    if (!st->scaler.enabled) return false;
    if (tr->cfg.fp16) grad_round_fp16(grads + lo, (size_t)n);
    bool found_inf = comm_any(&tr->world, grad_unscale_check(grads + lo, (size_t)n, 1.0 / scale));
    LossScaler before = st->scaler;
    std::string line = loss_scaler_describe(&before, &st->scaler, loss_scaler_update(&st->scaler, found_inf), it);
    if (!line.empty()) printf("%s\n", line.c_str());
    return found_inf;
}

// After an applied update, the weights the next forward reads. ZeRO-1: every rank updated its shard,
// and the bf16/fp16 compute copy the update wrote is all-gathered (2 bytes per parameter; the fp32
// master stays sharded), or without a copy the fp32 parameters themselves. A copy the update did not
// write is refreshed from the master (a no-op without a copy).
template <typename A>
static void trainer_share_update(Trainer<A>* tr, const StepResult* r) {
    if (tr->cfg.zero_stage == 1) {
        op_mark_comm(&tr->op_times, "step", "ZeRO-1 parameter all-gather",
                     (double)tr->model.table.total * (r->compute_copy_written ? sizeof(A) : sizeof(float)));
        if (r->compute_copy_written) comm_allgather_shards(&tr->comm, tr->model.params_c, tr->opt.shard_lo);
        else comm_allgather_shards(&tr->comm, tr->model.params, tr->opt.shard_lo);
    }
    if (!r->compute_copy_written) {
        op_mark(&tr->op_times, "step", "compute copy refresh");
        gpt_params_changed(&tr->model);
    }
}

// --log-layer-norms-interval's statistics of this iteration: gradient and weight norms per layer and
// the activations' (act_sumsq: (L+1) per micro-batch step, act_count values each), summed over ranks.
template <typename A>
static LayerStats* trainer_layer_stats(Trainer<A>* tr, const std::vector<double>& act_sumsq, int64_t accum, double act_count) {
    LayerStats* ls = &tr->layer_stats;
    int L = tr->gcfg.num_layers;
    layer_stats_grads(ls, &tr->opt, &tr->model.table);
    const float* master = trainer_whole_master(tr);  // (every data-parallel rank takes part; the gradients are spent)
    if (tr->comm.rank == 0) layer_stats_weights(ls, &tr->opt, &tr->model.table, master);
    ls->act_sumsq = trainer_sum_global_order(&tr->comm, act_sumsq.data(), accum, L + 1);
    ls->act_count = act_count;
    // each stage filled its own entries (llmc/layer_stats.h), each tensor rank its slices (the
    // replicated tensors once); the stream is replicated over tensor ranks, so its sums go over stages
    comm_allreduce_sum_f64(&tr->mp, ls->grad_sumsq.data(), (int)ls->grad_sumsq.size());
    comm_allreduce_sum_f64(&tr->mp, ls->weight_sumsq.data(), (int)ls->weight_sumsq.size());
    comm_allreduce_sum_f64(&tr->pipe, ls->act_sumsq.data(), (int)ls->act_sumsq.size());
    return ls;
}

// --time-ops: the bytes the update moves for this rank's parameters (the step model's figure per
// parameter: master weights, moments, gradient, compute copy; llmc/step_model.h).
template <typename A>
static double trainer_optimizer_bytes(const Trainer<A>* tr) {
    double per = tr->cfg.optimizer == "adam8bit" ? STEP_ADAM8BIT_BYTES_PER_PARAM : STEP_ADAM_BYTES_PER_PARAM;
    if (!gpt_has_compute_copy<A>()) per -= 2;  // (those figures write a 2-byte compute copy; --fp32 has none)
    return per * (double)(tr->opt.range_hi - tr->opt.range_lo);
}

// --time-ops at set-up: the iteration to time, the model's marks, the marks made now (on the GPU,
// events: a generous count per micro-batch and layer), and the roofline of a GPU in the step model's
// table (its dense peak at the training precision, its memory's bandwidth).
template <typename A>
static void trainer_op_times_setup(Trainer<A>* tr, int64_t accum_max) {
    const Config* c = &tr->cfg;
    tr->op_times.iteration = c->time_ops;
    tr->model.op_times = &tr->op_times;
    if (c->time_ops <= 0) return;
    backend_marks_reserve(&tr->op_times.clock, (size_t)(128 + accum_max * (40 * gpt_stage_layers(&tr->gcfg) + 64)));
    std::string device;
    double device_mem = 0;
    const GpuSpec* roof = backend_gpu_found(&device, &device_mem) ? gpu_spec_match(device, device_mem) : nullptr;
    if (!roof) return;
    tr->op_times.peak_flops = sizeof(A) == sizeof(float) ? roof->peak32 : roof->peak16;
    tr->op_times.peak_bytes = roof->hbm_bw;
    tr->op_times.peak_name = roof->name;
}

// --time-ops: the timed iteration's table (llmc/op_times.h). Under pipeline parallelism every stage
// times its own ops; rank 0 prints each stage's table of its pipeline (the stages' first data- and
// tensor-parallel ranks: the others run the same ops on other data or slices).
template <typename A>
static void trainer_print_op_times(Trainer<A>* tr) {
    OpTable tab = op_times_end(&tr->op_times);
#ifdef KEEL_CUDA
    const char* how = "the GPU's time between CUDA events on the compute stream";
#else
    const char* how = "the host's clock; the CPU ops run synchronously";
#endif
    char who[64] = "";
    if (tr->grid.pp > 1) snprintf(who, sizeof who, ", pipeline stage %d", tr->grid.pp_rank);
    std::string text = op_table_text(&tab, who, how);
    tr->op_times_done = true;
    tr->op_times.iteration = 0;  // once (a rollback may run the iteration's number again)
    if (tr->grid.pp == 1) {
        if (tr->world.rank == 0) fputs(text.c_str(), stdout);
        fflush(stdout);
        return;
    }
    std::vector<uint64_t> len(tr->pipe.size);  // each stage's text to the pipeline's every rank
    uint64_t mine = text.size();
    comm_allgather(&tr->pipe, &mine, sizeof mine, len.data());
    std::vector<size_t> counts(len.begin(), len.end());
    size_t total = 0;
    for (size_t n : counts) total += n;
    std::string all(total, '\0');
    comm_allgatherv(&tr->pipe, text.data(), text.size(), &all[0], counts);
    if (tr->world.rank == 0) fputs(all.c_str(), stdout);
    fflush(stdout);
}

// One training iteration: accumulate gradients over the micro-batches, then one optimizer step.
// Returns false for an iteration of a skip range (nothing to log).
template <typename A>
static bool trainer_iteration(Trainer<A>* tr, IterationRecord* rec) {
    const Config* c = &tr->cfg;
    TrainState* st = &tr->st;
    int64_t it = st->iteration + 1;                                // the iteration about to run, 1-based
    watchdog_set_iteration(it);
    int64_t gbs = rampup_global_batch(&tr->rampup, st->consumed_samples);
    int B = (int)c->micro_batch_size, T = (int)curriculum_seqlen(&tr->curriculum, it);
    if (trainer_skips(tr, it)) {
        if (it == c->time_ops) tr->op_times_skipped = true;
        trainer_skip_iteration(tr, gbs, T);
        return false;
    }
    tr->skipping = false;
    const Comm* comm = &tr->comm;
    int dp = comm->size;
    int64_t accum = gbs / ((int64_t)B * dp);  // micro-batch steps on this rank
    op_times_begin(&tr->op_times, it);  // (--time-ops: from here to the statistics, when `it` is the iteration asked for)
    double t0 = now_ms();
    if (tr->grid.tp > 1) {
        op_mark(&tr->op_times, "step", "replicated weights check");
        trainer_sync_replicated(tr, it);
        if (c->check_replicated_params_interval > 0 && it % c->check_replicated_params_interval == 0) trainer_check_replicated(tr, it);
    }
    if (tr->hooks.zero_fill_grads) {  // test hook KEEL_TEST_ZERO_FILL_GRADS: the reference, every op adding into zeros
        gpt_zero_grad(&tr->model);
    } else {
        gpt_grads_begin(&tr->model);  // (no zero-fill: each gradient's first op this iteration writes it)
        if (tr->hooks.poison_grads)   // test hook KEEL_TEST_POISON_GRADS: a gradient read before it is written shows as NaN
            backend_memset_bytes(tr->model.grads, 0xff, (size_t)tr->model.table.total * sizeof(float));
    }
    int L = tr->gcfg.num_layers;
    bool stats = c->log_layer_norms_interval > 0 && it % c->log_layer_norms_interval == 0;
    std::vector<double> act_sumsq(stats ? accum * (L + 1) : 0, 0.0);  // per micro-batch step, (L+1) each
    double scale = st->scaler.scale;  // this iteration's (the scaler may change it below)
    tr->timer_forward_ms = tr->timer_backward_ms = 0;
    std::vector<double> losses = trainer_accumulate(tr, it, gbs, B, T, accum, stats ? act_sumsq.data() : nullptr);
    double t_opt = trainer_timer_now(tr);
    int P = tr->grid.pp;
    op_mark(&tr->op_times, "host", "loss sum over ranks");
    double loss = trainer_sum_global_order(comm, losses.data(), accum, 1)[0] / (double)(accum * dp);
    comm_broadcast(&tr->pipe, &loss, sizeof loss, P - 1);  // the last stage computed it
    Optimizer* o = &tr->opt;
    op_mark(&tr->op_times, "step", "optimizer", 0, trainer_optimizer_bytes(tr));
    bool found_inf = trainer_unscale_grads(tr, it, scale);
    if (c->zero_stage == 0 && dp > 1) op_mark_comm(&tr->op_times, "step", "gradient all-gather", 4.0 * tr->model.table.total);
    if (c->zero_stage == 0) comm_allgather_shards(comm, tr->model.grads, o->shard_lo);  // every rank updates everything
    if (c->zero_stage == 0 && dp > 1) op_mark(&tr->op_times, "step", "optimizer");
    double lr = lr_schedule_get(&st->schedule) * spike_lr_factor(&st->spike, c, it);
    StepResult r = optimizer_step(o, comm, &tr->mp, &tr->model, &st->guard, &st->spike, c, it, lr, loss, found_inf);
    if (r.skipped) op_marks_unbytes(&tr->op_times, "step", "optimizer");  // (no update ran: no GB/s to claim)
    if (r.spike.spike) trainer_on_spike(tr, &r.spike, it);
    if (!r.skipped) {
        trainer_share_update(tr, &r);
        lr_schedule_step(&st->schedule, gbs, st->consumed_tokens);
    }
    double optimizer_ms = 0;
    trainer_timer_add(tr, t_opt, &optimizer_ms);
    st->iteration = it;
    st->consumed_samples += gbs;
    st->consumed_tokens += gbs * T;
    st->optimizer_step = tr->opt.step;
    if (r.skipped) st->skipped_iterations++;
    if (r.nonfinite) {
        st->nan_iterations++;
        if (!st->scaler.enabled)  // the scaler printed its own line
            printf("iteration %lld: update skipped, non-finite %s (loss %g, grad norm %g)\n", (long long)it,
                   std::isfinite(loss) ? "gradient" : "loss", loss, r.grad_norm);
    }
    double ms = now_ms() - t0;
    trainer_fill_record(tr, rec, it, gbs, T, lr, loss, &r, ms);
    if (c->log_params_norm || stats) op_mark(&tr->op_times, "step", "statistics");
    if (c->log_params_norm) rec->params_norm = trainer_params_norm(tr);
    if (c->log_timers_to_tensorboard) {
        rec->forward_s = tr->timer_forward_ms / 1000.0;
        rec->backward_s = tr->timer_backward_ms / 1000.0;
        rec->optimizer_s = optimizer_ms / 1000.0;
    }
    if (stats) rec->layers = trainer_layer_stats(tr, act_sumsq, accum, (double)gbs * T * c->hidden_size);
    if (tr->op_times.on) trainer_print_op_times(tr);  // (the iteration's last work issued)
    return true;
}

// Mean loss over n micro-batches of the validation set: micro-batch i holds the B samples from
// (first + i·B) mod wrap (wrap: a multiple of B). Rank r of the data-parallel group evaluates
// micro-batches r, r + DP, ...; the sum is taken in a fixed order, so the mean does not depend on DP.
template <typename A>
static double trainer_evaluate_samples(Trainer<A>* tr, int64_t first, int64_t n, int64_t wrap) {
    const Config* c = &tr->cfg;
    int B = (int)c->micro_batch_size, T = (int)c->seq_length;
    std::vector<double> loss(n, 0.0);  // the other ranks' slots stay 0
    GPT<A>* m = &tr->model;
    int P = tr->grid.pp, stage = tr->grid.pp_rank;
    size_t act_bytes = (size_t)B * T * c->hidden_size * sizeof(A);
    gpt_set_dropout(m, false, 0, 0);
    gpt_use_slot(m, 0);
    for (int64_t i = tr->comm.rank; i < n; i += tr->comm.size) {  // forwards only: down the pipeline, batch by batch
        if (stage == 0 || stage == P - 1) trainer_read_batch(tr, &tr->valid_data, (first + i * B) % wrap, B, T);
        if (stage > 0) comm_recv_buf(&tr->pipe, m->acts.encoded, act_bytes, stage - 1, PIPE_TAG);
        loss[i] = gpt_forward(m, tr->inputs.data(), stage == P - 1 ? tr->targets.data() : nullptr, B, T);
        if (stage < P - 1) comm_send_buf(&tr->pipe, gpt_stage_output(m), act_bytes, stage + 1, PIPE_TAG);
        comm_sends_wait(&tr->pipe);  // the next batch's forward rewrites what was sent
    }
    comm_allreduce_sum_f64(&tr->comm, loss.data(), (int)n);  // x + 0 = x: each slot is exactly one rank's value
    comm_broadcast(&tr->pipe, loss.data(), n * sizeof(double), P - 1);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += loss[i];
    return sum / (double)n;
}

// The first validation batch of the evaluation at iteration `it`, as Megatron's validation iterator
// reads them: one iterator for the whole run, so each evaluation takes the --eval-iters global batches
// after the previous one's, wrapping around the set (nbatches whole global batches). The k-th
// evaluation (k = evaluations before it = ceil(it / eval_interval) - 1) starts at batch
// k·eval_iters mod nbatches. Derived from the iteration, as Megatron derives consumed_valid_samples
// = (iteration // eval_interval)·eval_iters·global batch on a resume, so a resumed run reads what an
// uninterrupted one would, and --eval-only at a checkpoint's iteration reads what the run logged there.
static inline int64_t valid_first_batch(int64_t it, int64_t eval_interval, int64_t eval_iters, int64_t nbatches) {
    int64_t k = eval_interval > 0 && it > 0 ? (it - 1) / eval_interval : 0;
    return (int64_t)((unsigned __int128)k * (unsigned __int128)eval_iters % (unsigned __int128)nbatches);
}

// The validation loss at iteration `it`: --eval-iters global batches (see valid_first_batch).
template <typename A>
static double trainer_evaluate(Trainer<A>* tr, int64_t it) {
    const Config* c = &tr->cfg;
    int64_t gbs = c->global_batch_size, nbatches = tr->valid_data.nsamples / gbs;  // >= eval_iters (checked at set-up)
    int64_t first = valid_first_batch(it, c->eval_interval, c->eval_iters, nbatches);
    return trainer_evaluate_samples(tr, first * gbs, c->eval_iters * (gbs / c->micro_batch_size), nbatches * gbs);
}

// --eval-full-at-end: every whole micro-batch of the validation set once.
template <typename A>
static double trainer_evaluate_full(Trainer<A>* tr, int64_t* samples) {
    int64_t B = tr->cfg.micro_batch_size, n = tr->valid_data.nsamples / B;
    *samples = n * B;
    return trainer_evaluate_samples(tr, 0, n, n * B);
}

// Generates --sample-length tokens after <|endoftext|> by sampling the model's softmax (temperature
// 1); the random draws are keyed by (seed, GENERATE, iteration, position), so a rerun prints the same.
// The stages of the first data-parallel rank's pipeline take part: each token's window goes down the
// pipeline, the last stage draws the next token and broadcasts it back; rank 0 prints.
template <typename A>
static void trainer_print_sample(Trainer<A>* tr) {
    const GPTConfig* g = &tr->gcfg;
    GPT<A>* m = &tr->model;
    int T = m->T, V = g->vocab_size, Vp = gpt_vocab_rows(g), P = tr->grid.pp, stage = tr->grid.pp_rank;
    std::vector<int> toks = {tr->tok.eod};
    std::vector<float> row(Vp);
    gpt_set_dropout(m, false, 0, 0);
    gpt_use_slot(m, 0);
    for (int64_t pos = 0; pos < tr->cfg.sample_length; pos++) {
        int n = (int)toks.size() < T ? (int)toks.size() : T;
        const int* window = toks.data() + toks.size() - n;
        size_t act_bytes = (size_t)n * g->channels * sizeof(A);
        if (stage > 0) comm_recv_buf(&tr->pipe, m->acts.encoded, act_bytes, stage - 1, PIPE_TAG);
        gpt_forward(m, window, nullptr, 1, n);
        if (stage < P - 1) {
            comm_send_buf(&tr->pipe, gpt_stage_output(m), act_bytes, stage + 1, PIPE_TAG);
            comm_sends_wait(&tr->pipe);  // the next position's forward rewrites what was sent
            int next = 0;
            comm_broadcast(&tr->pipe, &next, sizeof next, P - 1);
            if (next == tr->tok.eod) break;
            toks.push_back(next);
            continue;
        }
        if (tr->grid.tp == 1) {
            gpt_logits_row_to_host(m, (size_t)(n - 1), row.data());
        } else {  // one row of logits, for one token: the tensor ranks' columns gathered (training never does this)
            std::vector<float> mine(Vp / tr->grid.tp);
            gpt_logits_row_to_host(m, (size_t)(n - 1), mine.data());
            comm_allgather(&tr->tp, mine.data(), mine.size() * sizeof(float), row.data());
        }
        double maxv = row[0], sum = 0;
        for (int j = 1; j < V; j++) maxv = row[j] > maxv ? row[j] : maxv;
        for (int j = 0; j < V; j++) sum += std::exp((double)row[j] - maxv);
        double u = rng_uniform(tr->st.dropout_seed, RNG_GENERATE, (uint64_t)tr->st.iteration, (uint64_t)pos) * sum, acc = 0;
        int next = V - 1;
        for (int j = 0; j < V; j++) {
            acc += std::exp((double)row[j] - maxv);
            if (u < acc) { next = j; break; }
        }
        if (P > 1) comm_broadcast(&tr->pipe, &next, sizeof next, P - 1);
        if (next == tr->tok.eod) break;
        toks.push_back(next);
    }
    if (tr->world.rank != 0) return;
    std::string text;
    tokenizer_decode_lenient(&tr->tok, toks.data() + 1, toks.size() - 1, text);  // ids past the tokenizer (int32 data) as <|id N|>
    printf("---------------- sample at iteration %lld ----------------\n%s\n", (long long)tr->st.iteration, text.c_str());
    printf("----------------------------------------------------------\n");
    fflush(stdout);
}

// Uploads this rank's part of the whole model's canonical parameters (all of it at P = T = 1).
template <typename A>
static void trainer_take_stage_params(Trainer<A>* tr, const std::vector<float>& params) {
    std::vector<float> mine(tr->model.table.total);
    for (const ParamSpan& sp : param_table_rank_spans(&tr->model.table, &tr->whole, &tr->gcfg))
        std::copy(params.begin() + sp.offset_canonical, params.begin() + sp.offset_canonical + sp.numel, mine.begin() + sp.offset_local);
    const GPT<A>* m = &tr->model;  // (a sharded master takes its shard)
    backend_copy_to_device(m->params + m->master_lo, mine.data() + m->master_lo, (size_t)(m->master_hi - m->master_lo) * sizeof(float));
    trainer_params_changed(tr);
}

// The whole model's canonical parameters on world rank 0 into *whole (emptied elsewhere): at P = T = 1
// its own buffer; else the first data-parallel rank of every (stage, tensor rank) sends its buffer and
// rank 0 places its spans (the tied embedding from the first stage, replicated tensors from tensor rank
// 0). Every rank calls it. *whole and tr->gather_stage keep their capacity: a buffer handed back from
// the last save is filled without faulting in fresh pages (--async-save keeps them; for a 180 MB model
// a fresh buffer's page faults and zeroing cost 0.2 s of the step's wait here).
template <typename A>
static void trainer_gather_params(Trainer<A>* tr, std::vector<float>* whole) {
    const RankGrid* g = &tr->grid;
    bool root = tr->world.rank == 0, sender = g->dp_rank == 0, alone = g->pp == 1 && g->tp == 1;
    std::vector<float>& mine = alone ? *whole : tr->gather_stage;
    mine.resize(sender ? tr->model.table.total : 0);
    backend_copy_to_host(mine.data(), trainer_whole_master(tr), mine.size() * sizeof(float));
    if (alone) return;  // (at P = T = 1 the only sender is rank 0)
    enum { GATHER_TAG = 8 };
    if (sender && !root) comm_send(&tr->world, mine.data(), mine.size() * sizeof(float), 0, GATHER_TAG);
    if (!root) {
        whole->clear();
        return;
    }
    whole->assign(tr->whole.total, 0.0f);
    for (int s = 0; s < g->pp; s++)
        for (int t = 0; t < g->tp; t++) {
            GPTConfig sc = gpt_config_stage(&tr->gcfg, g->pp, s);
            sc.tp_size = g->tp;
            sc.tp_rank = t;
            ParamTable st;
            param_table_build(&st, &sc);
            int from = rank_grid_rank_of(g, t, s, 0);
            std::vector<float> buf(from == 0 ? 0 : st.total);
            if (from != 0) comm_recv(&tr->world, buf.data(), buf.size() * sizeof(float), from, GATHER_TAG);
            const float* src = from == 0 ? mine.data() : buf.data();
            int id = 0;  // the tensor of the span (spans are in local order and never cross a tensor)
            for (const ParamSpan& sp : param_table_rank_spans(&st, &tr->whole, &sc)) {
                while (sp.offset_local >= st.t[id].offset_canonical + st.t[id].numel) id++;
                if (!param_is_mirror(&st, id, &sc))
                    std::copy(src + sp.offset_local, src + sp.offset_local + sp.numel, whole->begin() + sp.offset_canonical);
            }
        }
}

// --async-save at start-up: every host buffer a save copies into, allocated and faulted in now and
// kept (ckpt_save_async_reserve), so that no save's wait pays for fresh pages.
template <typename A>
static void trainer_async_save_reserve(Trainer<A>* tr) {
    if ((tr->grid.pp > 1 || tr->grid.tp > 1) && tr->grid.dp_rank == 0) tr->gather_stage.resize(tr->model.table.total);
    ckpt_save_async_reserve(&tr->async_save, tr->world.rank == 0 ? (size_t)tr->whole.total : 0, optimizer_save_spans(&tr->opt));
}

// After a save of `iteration` ended (synchronously, or an asynchronous one published or failed):
// the success line, or the failure's report and what follows it. A save that failed on any rank (a
// full disk, a quota, an I/O error) failed on all and left the directory as it was; rank 0 reports
// it once; the run stops with exit 1 (--save-failure stop, the default, or `final`: a save the run
// cannot go on after) or goes on and saves again at the next interval (--save-failure continue).
template <typename A>
static bool trainer_save_outcome(Trainer<A>* tr, const SaveResult& r, int64_t iteration, bool final) {
    const Config* c = &tr->cfg;
    if (r.ok) {
        printf("  successfully saved checkpoint at iteration %7lld to %s\n", (long long)iteration, ckpt_iter_dir(c->save, iteration).c_str());
        return true;
    }
    int64_t latest = tr->world.rank == 0 ? ckpt_latest(c->save) : -1;
    std::string kept = latest >= 0 ? "iteration " + std::to_string(latest) + " stays the latest checkpoint" : "there is no checkpoint yet";
    bool stop = final || c->save_failure == "stop";
    if (tr->world.rank != 0) {
        if (stop) keel_exit_after_root(KEEL_EXIT_RUNTIME);  // rank 0 reports it and ends the job
        return false;
    }
    if (stop)
        keel_die_code(KEEL_EXIT_RUNTIME, "free space (or fix the cause) and restart with --load: the run resumes from the latest checkpoint",
                      "saving iteration %lld failed on rank %d: %s; nothing of it was kept and %s", (long long)iteration, r.rank,
                      r.why.c_str(), kept.c_str());
    fflush(stdout);
    fprintf(stderr, "warning: saving iteration %lld failed on rank %d: %s; nothing of it was kept and %s; training goes on and saves "
            "again at the next interval (--save-failure continue)\n", (long long)iteration, r.rank, r.why.c_str(), kept.c_str());
    return false;
}

// --async-save: finishes the pending save once its writes are done on every rank (wait: block until
// they are), with its outcome reported as a synchronous save's. Every rank calls it at the same
// points: after each iteration, and before a save, an exit or an export.
template <typename A>
static void trainer_async_save_finish(Trainer<A>* tr, bool wait, bool final) {
    SaveResult r;
    int64_t it = tr->async_save.iteration;
    if (ckpt_save_async_poll(&tr->async_save, &tr->world, wait, &r)) trainer_save_outcome(tr, r, it, final);
}

// Every rank takes part: rank 0 writes the gathered parameters and the state, every rank its
// shard of the optimizer state (a pipeline stage's part of the canonical payload); see
// trainer_save_outcome for a failure. Under --async-save (not for a `final` save, after which the
// run ends) the step waits only for the copies and the directory's creation, and the writes go on
// behind training (llmc/checkpoint.h). Returns whether it saved (or started saving).
template <typename A>
static bool trainer_save(Trainer<A>* tr, bool final = false) {
    const Config* c = &tr->cfg;
    double t0 = wall_seconds();  // the step's wait: from here (an earlier background save still writing included)
    trainer_async_save_finish(tr, true, final);  // one save at a time
    std::vector<float> params;
    params.swap(tr->async_save.params);  // (the last background save has ended: its buffer is free again)
    trainer_gather_params(tr, &params);
    tr->last_save_minutes = trainer_elapsed_minutes(tr);
    if (c->async_save && !final) {
        SaveResult r = ckpt_save_async_begin(&tr->async_save, c->save, &tr->world, std::move(params), tr->whole.total,
                                             optimizer_save_spans(&tr->opt), tr->opt.canonical_bytes, optimizer_layout(&tr->opt),
                                             &tr->st, &tr->gcfg, c, tr->hooks.fault_save.c_str());
        if (!r.ok) return trainer_save_outcome(tr, r, tr->st.iteration, final);
        printf("saving checkpoint at iteration %7lld to %s in the background (the step waited %.3f s)\n", (long long)tr->st.iteration,
               c->save.c_str(), wall_seconds() - t0);
        return true;
    }
    printf("saving checkpoint at iteration %7lld to %s\n", (long long)tr->st.iteration, c->save.c_str());
    SaveResult r = ckpt_save(c->save, &tr->world, params.data(), tr->whole.total, optimizer_save_spans(&tr->opt), tr->opt.canonical_bytes,
                             optimizer_layout(&tr->opt), &tr->st, &tr->gcfg, c, tr->hooks.fault_save.c_str());
    printf("  (a synchronous save: the step waited %.3f s)\n", wall_seconds() - t0);  // (make bench compares the two)
    if (c->async_save) tr->async_save.params.swap(params);  // kept for the next save
    else std::vector<float>().swap(tr->gather_stage);       // a synchronous run frees its copies
    return trainer_save_outcome(tr, r, tr->st.iteration, final);
}

enum ResumeKind { RESUME_NONE, RESUME_WEIGHTS, RESUME_FULL };

// The checkpoint's consumed samples count in the order it recorded. One written before keel read
// Megatron data in Megatron's order counted it in keel's former order: resuming it here would skip
// and repeat samples silently, so it is refused. A run that switches between llm.c shards and
// Megatron data changes its data anyway; that is said, not refused.
static void trainer_resume_data_order(TrainState* saved, const TrainState* fresh, const std::string& idir) {
    if (saved->data_order == DATA_ORDER_UNRECORDED && fresh->data_order == DATA_ORDER_MEGATRON)
        keel_die_code(KEEL_EXIT_RUNTIME, "resume it with the keel that wrote it, or start a new run from its weights (--finetune)",
                      "checkpoint '%s' predates Megatron's sample order: its consumed samples count keel's former order of the "
                      "Megatron data, so this run would skip and repeat samples", idir.c_str());
    if (saved->data_order != DATA_ORDER_UNRECORDED && saved->data_order != fresh->data_order)
        printf(" > note: the checkpoint's run read %s; this run reads %s from consumed sample %lld on\n",
               saved->data_order == DATA_ORDER_MEGATRON ? "Megatron's order" : "keel's order",
               fresh->data_order == DATA_ORDER_MEGATRON ? "Megatron's order" : "keel's order", (long long)saved->consumed_samples);
    saved->data_order = fresh->data_order;
}

// Loads iteration `it` of --load (what ckpt_latest found at start-up; -1: none, so start from scratch
// as Megatron does). tr->st holds the fresh state of this run's flags on entry. RESUME_FULL continues
// the checkpoint's trajectory (the recovery flags may reset parts of it); RESUME_WEIGHTS (--finetune)
// keeps only the weights.
template <typename A>
static ResumeKind trainer_resume(Trainer<A>* tr, int64_t it) {
    const Config* c = &tr->cfg;
    const std::string& dir = c->load;
    if (it < 0) {
        printf("WARNING: could not find %s/latest_checkpointed_iteration.txt: starting from random\n", dir.c_str());
        return RESUME_NONE;
    }
    int64_t n = tr->whole.total;  // the canonical buffer; this rank's stage takes its part
    std::vector<float> params(n);
    TrainState saved{};
    std::string idir, saved_layout;
    ckpt_load(dir, it, params.data(), n, &saved, &tr->gcfg, c, &idir, &saved_layout);
    trainer_take_stage_params(tr, params);
    if (c->finetune) {
        printf(" > --finetune: took the weights of iteration %lld; counters, optimizer, schedule and RNG start fresh\n", (long long)it);
        return RESUME_WEIGHTS;
    }
    const TrainState fresh = tr->st;
    if (!c->no_load_optim) {
        std::vector<uint8_t> opt(tr->opt.canonical_bytes);  // the whole canonical state; this rank keeps its part
        ckpt_load_optimizer(idir, saved_layout, optimizer_layout(&tr->opt), opt.data(), opt.size(), n);
        optimizer_load_canonical(&tr->opt, opt.data());
        tr->opt.step = saved.optimizer_step;
    }
    LRSchedule sched = fresh.schedule;
    lr_schedule_resume(&sched, &saved.schedule, c);
    saved.schedule = sched;
    // The scaler's settings come from the flags, its state from the checkpoint (if the mode matches).
    LossScaler sc = fresh.scaler;
    if (saved.scaler.enabled == sc.enabled && saved.scaler.dynamic == sc.dynamic) {
        sc.scale = saved.scaler.scale;
        sc.growth_tracker = saved.scaler.growth_tracker;
        sc.hysteresis_tracker = saved.scaler.hysteresis_tracker;
    } else {
        printf(" > note: the loss-scaling mode changed since the checkpoint: the scaler starts at %s\n", double_repr(sc.scale).c_str());
    }
    saved.scaler = sc;
    if (c->no_load_optim) {  // BigScience's optimizer-reset recipe (docs/knobs.md#resuming-a-schedule)
        optimizer_reset(&tr->opt);  // never read: the checkpoint may even hold another optimizer's state
        saved.optimizer_step = 0;
        saved.scaler = fresh.scaler;
        printf(" > --no-load-optim: Adam moments, step count and loss scaler start fresh (the LR schedule is kept)\n");
    }
    rolling_resize(&saved.guard.loss, c->skip_update_window);
    rolling_resize(&saved.guard.norm, c->skip_update_window);
    rolling_resize(&saved.spike.loss, c->spike_window);
    rolling_resize(&saved.spike.norm, c->spike_window);
    if (!saved.spike.rollbacks.empty())
        printf(" > spike autopilot history: %zu rollback(s) (iteration:restored) %s\n", saved.spike.rollbacks.size(),
               spike_rollbacks_to_string(&saved.spike).c_str());
    if (saved.seed != fresh.seed)
        printf(" > note: the data order keeps the checkpoint's RNG key (seed %llu), not --seed %llu\n",
               (unsigned long long)saved.seed, (unsigned long long)fresh.seed);
    trainer_resume_data_order(&saved, &fresh, idir);
    if (c->no_load_rng) {
        saved.dropout_seed = fresh.dropout_seed;
        printf(" > --no-load-rng: dropout and text samples are keyed by --seed %llu\n", (unsigned long long)fresh.dropout_seed);
    }
    tr->st = saved;
    printf("  successfully loaded checkpoint from %s at iteration %lld\n", dir.c_str(), (long long)it);
    return RESUME_FULL;
}

// Every rank must run the same configuration (an @file that differs between nodes would otherwise
// train a silently inconsistent model): the checksum of all effective values, compared.
static void trainer_check_same_flags(const Comm* comm, const Config* c) {
    std::string all;
    for (int i = 0; i < NUM_FLAGS; i++) all += flag_value_string(c, &FLAGS[i]) + '\n';
    uint64_t mine = checksum64(all.data(), all.size());
    std::vector<uint64_t> sums(comm->size);
    comm_allgather(comm, &mine, sizeof mine, sums.data());
    for (int r = 0; r < comm->size; r++)
        if (sums[r] != sums[0])
            keel_flag_error("launch every rank with the same arguments",
                          "rank %d was started with other flag values than rank 0", r);
}

// --dry-run's hardware: --gpu-type's row with the flags' overrides, at the run's precision.
// --gpu-type auto: the GPU train_gpt finds, with its memory; the CPU trainer, or a GPU not in the table: a100-80gb.
// quiet: nothing printed (the GPU trainer's --attention-impl auto asks it too).
static StepHw trainer_dry_run_hw(const Config* c, bool quiet = false) {
    std::string device;
    double device_mem = 0;
    bool found = c->gpu_type == "auto" && backend_gpu_found(&device, &device_mem);
    const GpuSpec* spec = c->gpu_type != "auto" ? gpu_spec_find(c->gpu_type) : found ? gpu_spec_match(device, device_mem) : nullptr;
    if (c->gpu_type == "auto") {
        if (!spec) spec = gpu_spec_find("a100-80gb");
        std::string why = !found ? "no GPU found: the default" : gpu_spec_match(device, device_mem) ? "found " + device
                                                                 : "found " + device + ", not in the table: the default";
        if (!quiet) printf("--gpu-type auto: %s (%s)\n", spec->name, why.c_str());
    }
    if (!spec) keel_usage_error("--gpu-type %s: no such row in the GPU table", c->gpu_type.c_str());  // (the choices are its names)
    if (c->inter_node_gbps < 0 || c->intra_node_gbps < 0 || c->gpu_memory_gb < 0)
        keel_usage_error("--inter-node-gbps, --intra-node-gbps and --gpu-memory-gb take a size >= 0 (0: --gpu-type's)");
    StepHw hw;
    hw.gpu = *spec;
    hw.gpus_per_node = (int)c->gpus_per_node;
    if (c->inter_node_gbps > 0) hw.gpu.ib_bw = c->inter_node_gbps * 1e9;
    if (c->intra_node_gbps > 0) hw.gpu.nvlink_bw = c->intra_node_gbps * 1e9;
    if (found && gpu_spec_match(device, device_mem)) hw.gpu.mem_gib = device_mem / (1024.0 * 1024 * 1024);
    hw.peak = c->fp32 ? spec->peak32 : spec->peak16;
    if (!c->step_curves.empty()) {
        std::string said, err;
        if (!step_curves_load(c->step_curves, &hw, &said, &err))
            keel_flag_error("fix the file, or leave --step-curves out to plan with the model's own efficiencies", "--step-curves %s", err.c_str());
        if (!quiet) printf("%s\n", said.c_str());
    }
    return hw;
}

// --attention-impl auto on the GPU, settled before anything is allocated: the step model's time for
// one layer's attention on each path (llmc/step_model.h step_attention_times: keel's kernels at their
// rates measured on an H200, on this GPU's row of the GPU table), and the faster one, except that the
// GEMM path is taken only where its T x T probabilities fit (gemm_fits, asked only then). Sets
// g->attention_impl to the path chosen and returns why, for the start-up line; "" where auto is not
// the GPU's to settle (the CPU trainer, a flag naming the path, a shape or precision flash does not
// cover: the GEMM path). Every rank settles it alike (gemm_fits must answer the same everywhere).
static std::string trainer_attention_auto(GPTConfig* g, const StepHw* hw, int B, int T, int tp, double es, int cc,
                                          const std::function<bool()>& gemm_fits) {
    if (g->attention_impl != ATTN_IMPL_AUTO || !gpt_attention_flash(g, (size_t)es, true, cc)) return "";
    AttnTimes t = step_attention_times(hw, g, B, T, tp, es);
    bool gemm = t.gemm_s < t.flash_s;
    const char* tail = "";
    if (gemm && !gemm_fits()) {
        gemm = false;
        tail = "; the GEMM path's T x T probabilities would not fit: flash";
    }
    g->attention_impl = gemm ? ATTN_IMPL_GEMM : ATTN_IMPL_FLASH;
    char buf[256];
    snprintf(buf, sizeof buf, ": estimated %.3g ms flash vs %.3g ms gemm per layer on %s, forward + backward (step model)%s", 1e3 * t.flash_s,
             1e3 * t.gemm_s, hw->gpu.name, tail);
    return buf;
}

// --dry-run-json FILE: a plan is an output like the metrics file (llmc/outputs.h): an existing non-empty
// FILE is refused unless --start-over, which moves it aside; the new file appears whole (written beside
// it, then renamed), so a reader never sees half a plan.
static void trainer_dry_run_json(const Config* c, const std::string& text) {
    const std::string& path = c->dry_run_json;
    struct stat sb;
    if (stat(path.c_str(), &sb) == 0 && sb.st_size > 0) {
        if (!c->start_over)
            keel_flag_error("--start-over moves it aside (never deleted), or name another file",
                            "--dry-run-json %s holds an earlier plan (%lld bytes)", path.c_str(), (long long)sb.st_size);
        std::string aside = output_aside_file(path);
        output_rename(path, aside);
        printf("--start-over: moved the earlier plan %s aside to %s\n", path.c_str(), aside.c_str());
    }
    std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f || fwrite(text.data(), 1, text.size(), f) != text.size() || fclose(f) != 0)
        keel_die("writing --dry-run-json %s failed: %s", tmp.c_str(), strerror(errno));
    if (rename(tmp.c_str(), path.c_str()) != 0) keel_die("publishing --dry-run-json %s failed: %s", path.c_str(), strerror(errno));
    printf("dry run: wrote %s\n", path.c_str());
}

// The flags' layout (validated as training would be), for --dry-run.
static PlanLayout trainer_dry_run_layout(Config* c, int launched) {
    config_validate_bounds(c);  // (a zero micro-batch or TP size would divide by zero below)
    if (c->max_position_embeddings == 0) c->max_position_embeddings = c->seq_length;
    int64_t T = c->tensor_model_parallel_size, P = c->pipeline_model_parallel_size;
    int dp = c->data_parallel_size > 0 ? (int)c->data_parallel_size : (int)std::max<int64_t>(1, launched / (T * P));
    int64_t gbs = c->global_batch_size > 0 ? c->global_batch_size : c->micro_batch_size * dp;
    if (gbs % (c->micro_batch_size * dp) != 0)
        keel_usage_error("--global-batch-size %lld is not divisible by --micro-batch-size %lld x data-parallel size %d",
                         (long long)gbs, (long long)c->micro_batch_size, dp);
    c->global_batch_size = gbs;
    config_validate_sizes(c, dp);  // before any size is formed from the flags
    if (c->hidden_size % c->num_attention_heads != 0)
        keel_usage_error("--hidden-size %lld is not divisible by --num-attention-heads %lld", (long long)c->hidden_size,
                         (long long)c->num_attention_heads);
    config_validate_tp(c, false);
    if (P > c->num_layers)
        keel_usage_error("--pipeline-model-parallel-size %lld exceeds --num-layers %lld", (long long)P, (long long)c->num_layers);
    PlanLayout l;
    l.tp = (int)T;
    l.pp = (int)P;
    l.dp = dp;
    l.zero_stage = (int)c->zero_stage;
    l.micro_batch = c->micro_batch_size;
    l.micro_batches = gbs / (c->micro_batch_size * l.dp);
    l.seq = (int)c->seq_length;
    l.checkpoint_activations = c->checkpoint_activations;
    l.adam8bit = c->optimizer == "adam8bit";
    l.adam8bit_block = (int)c->adam8bit_block_size;
    return l;
}

// --dry-run: the planner's table for the flags' layout (llmc/planner.h) and its step time
// (llmc/step_model.h), or with --search-layout the layouts ranked; exit 0 if the flags' layout fits, 1 if not.
static void trainer_dry_run(Config* c, int launched) {
    PlanLayout l = trainer_dry_run_layout(c, launched);
    StepHw hw = trainer_dry_run_hw(c);
    if (c->gpu_memory_gb == 0) c->gpu_memory_gb = hw.gpu.mem_gib;
    GPTConfig g;
    gpt_config_from_flags(c, &g);
    Plan p = plan_compute(&g, &l);
    std::string why = trainer_attention_auto(&g, &hw, (int)l.micro_batch, l.seq, l.tp, c->fp32 ? 4 : 2, hw.gpu.cc, [&] {
        GPTConfig gg = g;
        gg.attention_impl = ATTN_IMPL_GEMM;
        return plan_gpu_bytes(c, &gg, &l).total + p.reserve <= c->gpu_memory_gb * 1024.0 * 1024 * 1024;
    });
    if (!why.empty())  // (the layouts --search-layout ranks plan the path chosen here)
        printf("--attention-impl auto: %s%s\n", g.attention_impl == ATTN_IMPL_GEMM ? "gemm" : "flash", why.c_str());
    bool fits = plan_print(stdout, &g, &l, &p, c->gpu_memory_gb);
    PlanGpu gpu = plan_gpu_bytes(c, &g, &l);
    plan_gpu_print(stdout, &gpu, c, c->gpu_memory_gb, p.reserve);
    StepOptions opt;
    opt.esize = c->fp32 ? 4 : 2;
    opt.overlap_dp = c->grad_bucket_mb > 0;
    opt.stack = *step_stack_find(c->software_stack);  // (the flag's choices are the table's names)
    StepPlan sp = step_predict(&hw, &g, &l, &opt);
    int64_t iters = step_run_iterations(c->train_iters, c->train_samples, c->train_tokens, c->global_batch_size, l.seq);
    step_print(stdout, &sp, &hw, &l, iters);
    double limit = c->gpu_memory_gb * 1024.0 * 1024 * 1024;
    if (c->search_layout) {
        int gpus = c->num_gpus > 0 ? (int)c->num_gpus : l.tp * l.pp * l.dp;
        std::vector<StepCandidate> all = step_search(&hw, &g, &l, gpus, c->global_batch_size, &opt, limit);
        step_search_print(stdout, all, &l, gpus, c->global_batch_size, 10);
    }
    if (!c->dry_run_json.empty()) trainer_dry_run_json(c, step_json(&sp, &hw, &l, p.total + p.reserve, limit, fits, iters));
    exit(fits ? 0 : 1);
}

static const char* precision_describe(const Config* c) {
#ifdef KEEL_CUDA
    if (c->bf16) return "bf16 (fp32 master weights, gradients, statistics)";
    if (c->fp16) return "fp16 with loss scaling (fp32 master weights, gradients, statistics)";
#else
    if (c->bf16) return "bf16 emulated (fp32 arithmetic; weights, activations and their gradients rounded to bf16 where the GPU stores them)";
    if (c->fp16) return "fp32, gradients rounded to fp16 with loss scaling";
#endif
    return "fp32";
}

// Flags → the validated configuration, the same on every rank, with the precision resolved for
// this backend (docs/internals.md#precision): the GPU defaults to --bf16; the CPU computes in fp32 (its --bf16 rounds
// what the GPU stores in bf16 to bf16, its --fp16 rounds the gradients to binary16 so the loss scaler sees fp16's range).
static void trainer_parse_flags(Config* c, const Comm* comm, int argc, char** argv) {
    if (argc == 1) {  // a first try with no arguments: how to run, not the first missing flag's error
        if (comm->rank > 0) keel_exit_after_root(KEEL_EXIT_USAGE);
        flags_synopsis(stderr, argv[0]);
        exit(KEEL_EXIT_USAGE);
    }
    if (!flags_parse(c, argc, argv)) {
        flags_usage(stdout, argv[0]);
        exit(0);
    }
    if (!c->load_hf.empty() && !c->load_llmc.empty())  // before either file is read
        keel_usage_error("--load-hf and --load-llmc both name the starting weights: give one");
    if (!c->load_llmc.empty() && c->max_position_embeddings == 0)
        c->max_position_embeddings = llmc_read_header(c->load_llmc.c_str(), nullptr).maxT;  // GPT-2: 1024
    if (!c->load_hf.empty()) hf_config_apply(c);  // shape and architecture from config.json
    if (c->dry_run) trainer_dry_run(c, comm->size);
    config_validate(c, comm->size);
    config_validate_tp(c, true);
    if (!c->export_hf.empty()) hf_export_check(c);
#ifdef KEEL_CUDA
    if (!c->fp16 && !c->fp32) c->bf16 = true;
#endif
    trainer_check_same_flags(comm, c);
}

// The rank grid and its groups (llmc/parallel.h, docs/internals.md#parallelism): this stage's data-parallel group
// becomes tr->comm, which everything data-parallel uses as before; the pipeline and the tied
// embedding's groups beside it. At P = 1 the data-parallel group is the world itself.
template <typename A>
static void trainer_init_groups(Trainer<A>* tr) {
    const Config* c = &tr->cfg;
    char err[256];
    if (!rank_grid_init(&tr->grid, tr->world.size, tr->world.rank, (int)c->tensor_model_parallel_size,
                        (int)c->pipeline_model_parallel_size, err, sizeof err))
        keel_usage_error("%s", err);
    if (tr->grid.pp == 1 && tr->grid.tp == 1) tr->comm = tr->world;  // the NCCL communicator of the world serves, no second one
    else comm_split(&tr->world, rank_grid_group(&tr->grid, RANK_GROUP_DP), &tr->comm);
    comm_split(&tr->world, rank_grid_group(&tr->grid, RANK_GROUP_PP), &tr->pipe);
    comm_split(&tr->world, rank_grid_group(&tr->grid, RANK_GROUP_TP), &tr->tp);
    std::vector<int> mp;  // stage-major, then tensor rank
    for (int s = 0; s < tr->grid.pp; s++)
        for (int t = 0; t < tr->grid.tp; t++) mp.push_back(rank_grid_rank_of(&tr->grid, t, s, tr->grid.dp_rank));
    comm_split(&tr->world, mp, &tr->mp);
    // embedding groups {first, last stage} of each pipeline; the middle stages form their own
    // (unused) groups, since every rank takes part in a split
    std::vector<int> pp = rank_grid_group(&tr->grid, RANK_GROUP_PP);
    int stage = tr->grid.pp_rank, P = tr->grid.pp;
    bool ends = P > 1 && (stage == 0 || stage == P - 1);
    std::vector<int> members = ends ? std::vector<int>{pp.front(), pp.back()} : std::vector<int>{tr->world.rank};
    comm_split(&tr->world, members, &tr->embed);
    comm_name(&tr->comm, "data-parallel");
    comm_name(&tr->pipe, "pipeline");
    comm_name(&tr->tp, "tensor-parallel");
    comm_name(&tr->mp, "model-parallel");
    comm_name(&tr->embed, "embedding");
    // every wait on another rank or the GPU from here on is bounded (llmc/watchdog.h)
    watchdog_start(c->distributed_timeout_minutes, tr->world.rank, comm_abort_fn(&tr->world));
}

template <typename A>
static void trainer_free_groups(Trainer<A>* tr) {
    if (tr->grid.pp > 1 || tr->grid.tp > 1) comm_free(&tr->comm);  // else it is the world
    comm_free(&tr->pipe);
    comm_free(&tr->embed);
    comm_free(&tr->tp);
    comm_free(&tr->mp);
    comm_finalize(&tr->world);
}

// The outputs that hold an earlier run's files (llmc/outputs.h): rank 0 decides, refusing or moving
// them aside, while the others wait for its verdict; on a refusal only rank 0 prints, and the others
// leave after it (keel_exit_after_root), never racing its error line.
template <typename A>
static void trainer_claim_outputs(Trainer<A>* tr, int64_t load_it) {
    OutputsVerdict v;
    if (tr->world.rank == 0) v = outputs_claim(&tr->cfg, load_it);
    int refused = !v.error.empty();
    comm_broadcast(&tr->world, &refused, sizeof refused, 0);
    if (!refused) return;
    if (tr->world.rank == 0) keel_flag_error(v.hint.c_str(), "%s", v.error.c_str());
    keel_exit_after_root(KEEL_EXIT_USAGE);
}

// Before anything is allocated or written: the checkpoint to resume (a --load whose `latest` exists
// but cannot be read is refused, never trained over and replaced), the outputs that hold an earlier
// run's files (llmc/outputs.h: refused, or moved aside under --start-over), the --save directory
// (created and probed, not found unwritable at the first save), and the data (a shard too short for
// one sample of T+1 tokens is refused here, not after an allocation sized by T). Returns the
// iteration to resume (-1: none). The sampler's key is set once the checkpoint is loaded.
template <typename A>
static int64_t trainer_open_inputs(Trainer<A>* tr, int T) {
    const Config* c = &tr->cfg;
    int64_t load_it = c->load.empty() ? -1 : ckpt_latest(c->load);
    if (!c->eval_only.empty() && load_it < 0)
        keel_usage_error("--eval-only: no checkpoint in --load %s (no latest_checkpointed_iteration.txt)", c->load.c_str());
    if (c->eval_only.empty()) trainer_claim_outputs(tr, load_it);  // --eval-only writes nothing but its validation record
    if (!c->save.empty() && c->eval_only.empty()) ckpt_check_save_dir(c->save);  // --eval-only never writes there
    dataloader_open(&tr->train_data, c, true, T, tr->gcfg.vocab_size, (uint64_t)c->seed, tr->train_iters);
    if (dataloader_open(&tr->valid_data, c, false, T, tr->gcfg.vocab_size, (uint64_t)c->seed, tr->train_iters)) {
        tr->have_valid = true;
        int64_t want = c->eval_iters * c->global_batch_size;  // (fits: config_validate_sizes)
        if ((c->eval_interval > 0 || !c->eval_only.empty()) && want > tr->valid_data.nsamples)  // only a run that validates reads them
            keel_usage_error("--eval-iters %lld x global batch %lld = %lld validation samples, but the validation set holds %lld",
                             (long long)c->eval_iters, (long long)c->global_batch_size, (long long)want,
                             (long long)tr->valid_data.nsamples);
    }
    return load_it;
}

// The start-up lines that describe the run's layout and paths (parallelism, model, optimizer, the
// kernels chosen, memory, batch and schedule), once the model and the optimizer exist.
template <typename A>
static void trainer_print_layout(Trainer<A>* tr, int B, int T) {
    const Config* c = &tr->cfg;
    const GPTConfig* g = &tr->gcfg;
    GPTConfig whole = gpt_config_stage(g, 1, 0);
    int stage = tr->grid.pp_rank, P = tr->grid.pp;
    if (tr->grid.tp > 1) {
        TPDims td = gpt_tp_dims(g);
        printf("tensor parallel: %d ranks; rank 0 holds heads 0-%d, MLP columns 0-%d, vocabulary rows 0-%d; replicated: the "
               "LayerNorms, row-parallel biases and positions%s%s\n", tr->grid.tp, td.NH - 1, td.H - 1, td.Vl - 1,
               c->check_replicated_params_interval > 0 ? (", checked every " + std::to_string(c->check_replicated_params_interval) + " iterations").c_str() : "",
               c->sync_tp_duplicated_parameters ? ", averaged before every forward (--sync-tp-duplicated-parameters)" : "");
    }
    if (P > 1)
        printf("pipeline: %d stages, 1F1B; stage %d holds layers %d-%d%s%s and %d micro-batch(es) of activations\n", P, stage,
               g->stage_layer_first, g->stage_layer_first + g->stage_num_layers - 1, g->stage_first ? ", the embeddings" : "",
               g->stage_last ? ", the final LayerNorm and the LM head" : "", (int)tr->model.slots.size());
    if (tr->comm.size > 1)
        printf("data parallel: gradients reduced in %zu bucket(s) (--grad-bucket-mb %s)%s\n", tr->buckets.size(),
               double_repr(c->grad_bucket_mb).c_str(),
               tr->buckets.size() > 1 ? ", each issued as the last micro-batch's backward completes it, overlapping the rest of it"
                                      : ", after the last micro-batch's backward");
    if (gpt_master_sharded(&tr->model))
        printf("ZeRO-1 master weights: this rank keeps parameters %lld..%lld of %lld in fp32 (%.1f MiB); the %s copy is all-gathered "
               "after each update\n", (long long)tr->model.master_lo, (long long)tr->model.master_hi, (long long)tr->model.table.total,
               (double)(tr->model.master_hi - tr->model.master_lo) * 4 / 1048576.0, c->fp16 ? "fp16" : "bf16");
    int Vrows = gpt_vocab_rows(g);  // Megatron's start-up line (megatron/tokenizer/tokenizer.py), rows in memory at this TP
    printf(" > padded vocab (size: %d) with %d dummy tokens (new size: %d)\n", g->vocab_size, Vrows - g->vocab_size, Vrows);
    std::string ffn = gpt_ffn(g) == 4 * g->channels ? "" : " F=" + std::to_string(gpt_ffn(g));  // the MLP width, said when not 4C
    printf("model: L=%d C=%d%s NH=%d maxT=%d V=%d (padded %d) | parameters: %lld (%lld with vocabulary padding)\n",
           g->num_layers, g->channels, ffn.c_str(), g->num_heads, g->max_seq_len, g->vocab_size, g->padded_vocab_size,
           (long long)gpt_num_params_real(&tr->whole, &whole), (long long)tr->whole.total);
    printf("%s\n", optimizer_describe(&tr->opt, &tr->model.table, c).c_str());
    printf("attention: %s (--attention-impl %s%s)\n",
           tr->model.flash ? "flash (fused, tensor cores, each row's log-sum-exp kept instead of the T x T probabilities)"
                           : "gemm (the materialized softmax: T x T probabilities kept per layer)",
           c->attention_impl.c_str(), tr->attention_why.c_str());
    if (tr->model.flash && !flash_attention_note().empty()) printf("%s\n", flash_attention_note().c_str());
    printf("gelu fusion: %s (--gelu-fusion %s)\n",
           !GPT_ON_GPU                 ? "n/a (the CPU trainer's GeLU ops compute the same values either way)"
           : g->activation != ACT_GELU ? "n/a (--activation relu)"
           : !tr->model.gelu_fusion    ? "off (the GEMMs, then a GeLU kernel each way)"
           : g->normformer             ? "forward (cuBLASLt GELU_AUX_BIAS epilogue; the backward stays unfused under --normformer)"
                                       : "forward and backward (cuBLASLt GELU_AUX_BIAS and DGELU epilogues)",
           c->gelu_fusion.c_str());
    if (g->stage_last) {
        size_t R = tr->model.head_rows, BT = (size_t)B * T;
        printf("LM head: logits of %zu of the micro-batch's %zu positions at once (%zu chunk(s); --classifier-chunk-rows %lld)\n", R, BT,
               (BT + R - 1) / R, (long long)c->classifier_chunk_rows);
    }
    printf("activations: %.2f MiB for %d micro-batch(es) of %d x %d%s\n", tr->model.act_bytes / 1048576.0, (int)tr->model.slots.size(),
           B, T, c->checkpoint_activations ? " (--checkpoint-activations: each layer's output kept, one layer's activations recomputed in backward)" : "");
    printf("batch: micro-batch %d x %d data-parallel ranks x %lld accumulation steps = global batch %lld samples of %d tokens | %lld iterations\n",
           B, tr->comm.size, (long long)(c->global_batch_size / B / tr->comm.size), (long long)c->global_batch_size, T,
           (long long)tr->train_iters);
    if (tr->rampup.enabled)
        printf("batch ramp-up: global batch %lld + %lld every %s samples up to %lld, reached after %lld samples\n",
               (long long)tr->rampup.start, (long long)tr->rampup.incr, double_repr(tr->rampup.samples_per_increment).c_str(),
               (long long)tr->rampup.global_batch, (long long)tr->rampup.ramp_samples);
    if (tr->curriculum.enabled)
        printf("curriculum: sequence length %lld -> %lld (%s), validation at full length %d\n", (long long)tr->curriculum.min_d,
               (long long)tr->curriculum.max_d, c->cl_schedule.c_str(), T);
    if (!tr->skips.ranges.empty()) printf("skip ranges: iterations %s\n", skip_ranges_string(&tr->skips).c_str());
}

// Fresh weights (no checkpoint to resume): the whole model's canonical buffer, as at P = 1 (so every
// layout starts from the same weights), from the init or a model file, of which this stage takes its part.
template <typename A>
static void trainer_init_weights(Trainer<A>* tr) {
    const Config* c = &tr->cfg;
    GPTConfig whole = gpt_config_stage(&tr->gcfg, 1, 0);
    // the whole model's canonical buffer, as at P = 1 (so every layout starts from the same
    // weights), of which this stage takes its part
    std::vector<float> params(tr->whole.total);
    param_table_init(params.data(), &tr->whole, &whole, tr->init_sigma, tr->st.seed);  // with a file: a knob's own tensors
    if (!c->load_llmc.empty()) llmc_load(c->load_llmc.c_str(), params.data(), &tr->whole, &whole);
    if (!c->load_hf.empty()) hf_load(c->load_hf, params.data(), &tr->whole, &whole);
    trainer_take_stage_params(tr, params);
    if (!c->load_llmc.empty()) printf("initialised the weights from llm.c model file %s\n", c->load_llmc.c_str());
    if (!c->load_hf.empty())
        printf("initialised the weights from Hugging Face directory %s%s\n", c->load_hf.c_str(),
               c->normformer ? " (--normformer's tensors, which it lacks, from their init)" : "");
}

// Megatron-DeepSpeed's logging flags → what the logger writes; the notes on what keel does differently.
template <typename A>
static void trainer_logger_flags(Trainer<A>* tr) {
    const Config* c = &tr->cfg;
    Logger* lg = &tr->log;
    lg->show_num_zeros = c->log_num_zeros_in_grad;
    lg->show_params_norm = c->log_params_norm;
    lg->tb_timers = c->log_timers_to_tensorboard;
    lg->tb_batch_size = c->log_batch_size_to_tensorboard;
    lg->tb_validation_ppl = c->log_validation_ppl_to_tensorboard;
    bool tb_flag = c->log_timers_to_tensorboard || c->log_batch_size_to_tensorboard || c->log_validation_ppl_to_tensorboard;
    if (tb_flag && c->tensorboard_dir.empty()) printf(" > note: the --log-*-to-tensorboard flags write nothing without --tensorboard-dir\n");
    if (c->tensorboard_queue_size != Config().tensorboard_queue_size)
        printf(" > note: --tensorboard-queue-size %lld has no effect: keel's TensorBoard writer has no queue, it hands the events "
               "to the file at every log line\n", (long long)c->tensorboard_queue_size);
    if (!c->eval_only.empty())
        printf(" > note: --eval-only evaluates the validation set (--valid-data-path); keel has no test set to evaluate\n");
}

// What the run writes and keeps beside the model: the tokenizer for samples, the token dump (test
// hook), the metrics and TensorBoard files, the per-layer statistics, the spike autopilot's snapshot.
template <typename A>
static void trainer_open_outputs(Trainer<A>* tr) {
    const Config* c = &tr->cfg;
    const GPTConfig* g = &tr->gcfg;
    int B = (int)c->micro_batch_size, T = (int)c->seq_length, stage = tr->grid.pp_rank;
    if (c->sample_interval > 0) {
        hf_tokenizer_for_run(&tr->tok, c->tokenizer_type, c->tokenizer_name_or_path, c->vocab_file, c->merge_file);
        if (tokenizer_vocab_size(&tr->tok) > g->vocab_size)
            keel_usage_error("--sample-interval decodes with the tokenizer (%d ids) but --vocab-size is %d",
                             tokenizer_vocab_size(&tr->tok), g->vocab_size);
        if (tr->tok.eod < 0 || tr->tok.eod >= g->vocab_size)
            keel_usage_error("--sample-interval starts each sample at the end-of-document token, which the tokenizer lacks "
                             "(give its eos_token in tokenizer_config.json)");
        if (tokenizer_vocab_size(&tr->tok) < g->vocab_size)
            printf(" > note: --sample-interval: ids from %d up to the vocabulary's %d are printed as <|id N|> (the tokenizer lacks them)\n",
                   tokenizer_vocab_size(&tr->tok), g->vocab_size);
        tr->have_tok = true;
    }
    if (!tr->hooks.dump_tokens.empty() && stage == 0 && tr->grid.tp_rank == 0)  // KEEL_DUMP_TOKENS; one writer per DP rank
        tr->token_dump = fopen_check((tr->hooks.dump_tokens + ".rank" + std::to_string(tr->comm.rank)).c_str(), "ab");
    tr->sample.resize(T + 1);
    tr->inputs.resize((size_t)B * T);
    tr->targets.resize((size_t)B * T);
    std::string metrics = tr->world.rank == 0 ? c->metrics_file : "";  // rank 0 writes the files
    if (!c->load.empty() && c->eval_only.empty()) logger_keep_through(metrics, tr->st.iteration);  // --eval-only appends only
    logger_open(&tr->log, metrics, tr->train_iters);
    tr->log.show_loss_scale = c->fp16;
    tr->log.show_seqlen = tr->curriculum.enabled;
    tr->log.show_pclip = c->adam8bit_percentile_clipping < 100;
    trainer_logger_flags(tr);
    if (tr->world.rank == 0) logger_open_tensorboard(&tr->log, c->tensorboard_dir);
    layer_stats_init(&tr->layer_stats, g->num_layers);
    if (c->spike_policy != "off")
        printf("spike autopilot: %s on %s z-score > %s over the last %lld updates%s\n", c->spike_policy.c_str(), c->spike_metric.c_str(),
               double_repr(c->spike_zscore).c_str(), (long long)c->spike_window,
               c->spike_policy == "rollback" ? (", in-memory snapshot every " + std::to_string(c->spike_snapshot_interval) + " iterations").c_str() : "");
    if (c->spike_policy == "rollback") {
        trainer_snapshot(tr);  // the loaded (or initial) state is the first good one
        if (tr->st.iteration % c->spike_snapshot_interval != 0)
            printf(" > note: resumed at iteration %lld, not a multiple of --spike-snapshot-interval %lld: a spike before the next "
                   "snapshot rolls back here, where the uninterrupted run would have gone back further\n",
                   (long long)tr->st.iteration, (long long)c->spike_snapshot_interval);
    }
}

// Before allocating, the planned total (what gpt_build allocates, counted by the same code without
// allocating, plus the optimizer state) is compared with what this backend can allocate: host
// memory for the CPU trainer, the device's free memory for the GPU (backend_memory_available). A
// model that cannot fit is refused with both figures instead of asking the allocator for petabytes
// or failing halfway through the allocations.
template <typename A>
static double trainer_memory_need(Trainer<A>* tr, const GPTConfig* g, const ParamTable* table, int B, int T, int slots, int loss_slots,
                                  int64_t master) {
    const Config* c = &tr->cfg;
    GPTDeviceBytes m = gpt_device_bytes<A>(g, B, T, slots, loss_slots, master);
    size_t chunks = 0;
    size_t optim = plan_optimizer_bytes(table, c, tr->comm.rank, tr->comm.size, (int)c->zero_stage, &chunks, tr->grid.tp);
    return (double)m.params + m.grads + m.compute_copy + m.activations + m.grad_scratch + m.loss_log + m.other + optim;
}
template <typename A>
static void trainer_check_memory(Trainer<A>* tr, const ParamTable* table, int B, int T, int slots, int loss_slots, int64_t master) {
    double need = trainer_memory_need(tr, &tr->gcfg, table, B, T, slots, loss_slots, master);
    double have = backend_memory_available();
    if (have > 0 && need > have)
        keel_die_code(KEEL_EXIT_RUNTIME, "a smaller model or micro-batch, or more ranks with --zero-stage 1 (--dry-run plans one without allocating)",
                      "this run needs %.4g GiB (weights, gradients, optimizer state, activations), more than %s: %.4g GiB",
                      need / 1073741824.0, backend_memory_name(), have / 1073741824.0);
}

// --attention-impl auto on the GPU (trainer_attention_auto), on this GPU's row of the step model's
// table; the GEMM path's plan is held to the device's free memory on every rank (flash everywhere if
// one rank cannot hold it).
template <typename A>
static void trainer_settle_attention(Trainer<A>* tr, const ParamTable* table, int B, int T, int slots, int loss_slots, int64_t master) {
    StepHw hw = trainer_dry_run_hw(&tr->cfg, true);
    tr->attention_why = trainer_attention_auto(&tr->gcfg, &hw, B, T, tr->grid.tp, sizeof(A), backend_compute_capability(), [&] {
        GPTConfig gg = tr->gcfg;
        gg.attention_impl = ATTN_IMPL_GEMM;
        double need = trainer_memory_need(tr, &gg, table, B, T, slots, loss_slots, master), have = backend_memory_available();
        return !comm_any(&tr->world, have > 0 && need > have);
    });
}

// The validated config → model, optimizer, data; everything before the first iteration.
template <typename A>
static void trainer_setup(Trainer<A>* tr) {
    Config* c = &tr->cfg;
    GPTConfig* g = &tr->gcfg;
    gpt_config_from_flags(c, g);
    trainer_init_groups(tr);
    int stage = tr->grid.pp_rank, P = tr->grid.pp;
    GPTConfig whole = gpt_config_stage(g, 1, 0);
    param_table_build(&tr->whole, &whole);
    *g = gpt_config_stage(g, P, stage);
    g->tp_size = tr->grid.tp;
    g->tp_rank = tr->grid.tp_rank;
    rampup_init(&tr->rampup, c, tr->comm.size);
    curriculum_init(&tr->curriculum, c);
    skip_ranges_parse(&tr->skips, c->skip_train_iteration_range);
    tr->train_iters = c->train_iters > 0 ? c->train_iters : rampup_train_iters(&tr->rampup, c->train_samples);
    if (tr->train_iters <= 0) keel_usage_error("--train-samples %lld is less than one global batch", (long long)c->train_samples);

    printf("keel | backend: %s | precision: %s | threads: %d | data-parallel ranks: %d | ZeRO stage %lld%s\n", backend_name(),
           precision_describe(c), num_threads(), tr->comm.size, (long long)c->zero_stage,
           tr->grid.tp > 1 || P > 1 ? (" | TP " + std::to_string(tr->grid.tp) + " x PP " + std::to_string(P) + " x DP " +
                                       std::to_string(tr->comm.size)).c_str() : "");
#ifdef KEEL_CUDA
    cuda_report();
#endif
    flags_print(c);
    tr->init_sigma = init_sigma(c->init_method, c->init_method_std, c->hidden_size);
    if (c->init_method != "std")
        printf("init: --init-method %s gives sigma = %s (output projections: %s)\n", c->init_method.c_str(),
               double_repr(tr->init_sigma).c_str(), double_repr(tr->init_sigma / std::sqrt(2.0 * c->num_layers)).c_str());
    int B = (int)c->micro_batch_size, T = (int)c->seq_length;
    int64_t load_it = trainer_open_inputs(tr, T);
    int64_t accum_max = c->global_batch_size / B / tr->comm.size;  // the ramp-up only lowers it
    ParamTable table;  // this rank's, for its share of the master weights (optimizer_master_range: a ZeRO-1 shard under bf16/fp16)
    param_table_build(&table, g);
    int64_t master_lo, master_hi;
    optimizer_master_range(&table, c, tr->comm.rank, tr->comm.size, (int)c->zero_stage, gpt_has_compute_copy<A>(), &master_lo, &master_hi);
    int slots = pipeline_max_in_flight(stage, P, (int)accum_max);
    if (GPT_ON_GPU) trainer_settle_attention(tr, &table, B, T, slots, (int)accum_max, master_hi - master_lo);
    trainer_check_memory(tr, &table, B, T, slots, (int)accum_max, master_hi - master_lo);
    gpt_build(&tr->model, g, B, T, slots, master_lo, master_hi);
    if (c->log_timers_to_tensorboard) {  // the fused LM head's backward, timed apart (trainer_forward_backward)
        tr->model.clock = [](void* t) { return trainer_timer_now((Trainer<A>*)t); };
        tr->model.clock_ctx = tr;
    }
    tr->model.tp = &tr->tp;
    trainer_op_times_setup(tr, accum_max);
    optimizer_init(&tr->opt, &tr->model.table, c, tr->comm.rank, tr->comm.size, (int)c->zero_stage);
    if (gpt_master_sharded(&tr->model) && (tr->opt.range_lo != master_lo || tr->opt.range_hi != master_hi))
        keel_die("the sharded master weights [%lld, %lld) are not the optimizer's shard", (long long)master_lo, (long long)master_hi);
    optimizer_set_stage(&tr->opt, &tr->whole, c, &tr->model.table, g);  // the units' places in the whole model
    optimizer_set_comms(&tr->opt, &tr->tp, &tr->comm, (int)c->zero_stage);  // (8-bit Adam's scales across TP)
    tr->buckets = grad_buckets(&tr->model.table, gpt_stage_layers(g), (int64_t)(c->grad_bucket_mb * 1048576.0 / sizeof(float)));
    trainer_print_layout(tr, B, T);
    if (c->async_save && !c->save.empty() && c->eval_only.empty()) trainer_async_save_reserve(tr);

    tr->st = TrainState{};
    tr->st.seed = tr->st.dropout_seed = (uint64_t)c->seed;
    tr->st.data_order = dataloader_order(&tr->train_data);
    lr_schedule_init(&tr->st.schedule, c);
    loss_scaler_init(&tr->st.scaler, c);
    update_guard_init(&tr->st.guard, c);
    spike_init(&tr->st.spike, c);
    ResumeKind kind = c->load.empty() ? RESUME_NONE : trainer_resume(tr, load_it);
    if (kind != RESUME_NONE && (!c->load_llmc.empty() || !c->load_hf.empty()))
        printf(" > note: weights from the checkpoint, so --load-%s %s is not used\n", c->load_hf.empty() ? "llmc" : "hf",
               (c->load_hf.empty() ? c->load_llmc : c->load_hf).c_str());
    if (kind == RESUME_NONE) trainer_init_weights(tr);
    tr->train_data.seed = tr->valid_data.seed = tr->st.seed;  // the data order's key: the checkpoint's on a resume
    printf("train data: %s per epoch\n", dataloader_describe(&tr->train_data).c_str());
    if (dataloader_megatron_order(&tr->train_data))
        printf(" > note: Megatron's sample order (GPTDataset's indices from numpy RandomState(%llu), the blending index, the "
               "sequential sampler); as in BigScience's Megatron-DeepSpeed, a last epoch under 95%% of an epoch is shuffled apart "
               "(Microsoft's and NVIDIA's trees: 80%%), and on a resume the checkpoint's seed keys the order "
               "(docs/megatron-data.md)\n", (unsigned long long)tr->train_data.seed);
    if (tr->have_valid)
        printf("valid data: %s%s\n", dataloader_describe(&tr->valid_data).c_str(), c->eval_interval > 0 ? "" : " (not used: --eval-interval 0)");
    trainer_open_outputs(tr);
}

// Stops the run after iteration st.iteration, for the kill switch or --exit-duration-in-mins, as
// Megatron-DeepSpeed does: a checkpoint first (with --save, unless this iteration's is written
// already), then exit 0 without the end of run's validation and exports.
template <typename A>
static int trainer_stop_early(Trainer<A>* tr, bool saved_now, const std::string& why) {
    if (!tr->cfg.save.empty() && !saved_now) trainer_save(tr, true);
    trainer_async_save_finish(tr, true, true);
    printf("%s\n", why.c_str());
    return 0;
}

// --eval-full-at-end: the whole validation set's loss, after the last iteration (and its usual evaluation).
template <typename A>
static void trainer_evaluate_full_at_end(Trainer<A>* tr) {
    if (!tr->cfg.eval_full_at_end || !tr->have_valid) return;
    int64_t samples = 0;
    double loss = trainer_evaluate_full(tr, &samples);
    log_validation_full(&tr->log, tr->st.iteration, loss, samples, tr->cfg.seq_length, tr->st.consumed_samples, tr->st.consumed_tokens);
}

// --eval-only (BigScience's Megatron-DeepSpeed): the loaded checkpoint's validation loss, printed and
// recorded at its iteration as a training run's evaluation would be (the same batches as the run's
// evaluation at that iteration: valid_first_batch); nothing trains, no file beside the metrics is written.
template <typename A>
static int trainer_eval_only(Trainer<A>* tr) {
    printf("eval-only: iteration %lld of %s on %lld validation batch(es); nothing trains, nothing is saved\n",
           (long long)tr->st.iteration, tr->cfg.load.c_str(), (long long)tr->cfg.eval_iters);
    log_validation(&tr->log, tr->st.iteration, trainer_evaluate(tr, tr->st.iteration), tr->st.consumed_samples, tr->st.consumed_tokens);
    trainer_evaluate_full_at_end(tr);
    return 0;
}

// --exit-signal-handler: SIGTERM or SIGUSR1 only sets a flag (nothing else is safe in a handler);
// the loop reads it after each iteration, agreed over ranks, so every rank stops after the same one.
static volatile sig_atomic_t g_exit_signal = 0;
static void trainer_on_exit_signal(int sig) { g_exit_signal = sig; }
static inline void trainer_install_exit_signal_handler(const Config* c) {
    if (!c->exit_signal_handler) return;
    struct sigaction sa = {};
    sa.sa_handler = trainer_on_exit_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // a blocking call the signal interrupts goes on
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGUSR1, &sa, nullptr);
}

// Checked after iteration `it`: the line to stop with if any rank received the signal, else "".
template <typename A>
static std::string trainer_exit_signal(Trainer<A>* tr, int64_t it) {
    if (!tr->cfg.exit_signal_handler) return "";
    int mine = (int)g_exit_signal;
    std::vector<int> all(tr->world.size);
    comm_allgather(&tr->world, &mine, sizeof mine, all.data());
    int sig = *std::max_element(all.begin(), all.end());
    if (!sig) return "";
    return std::string("exiting program after receiving ") + (sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "a signal") +
           " at iteration " + std::to_string(it) + " (--exit-signal-handler)";
}

// --save-interval-minutes: whether to save after this iteration (the wall time since the last save,
// the largest over ranks, reached the interval). Every rank takes the same verdict.
template <typename A>
static bool trainer_save_by_time(Trainer<A>* tr) {
    const Config* c = &tr->cfg;
    if (c->save_interval_minutes <= 0) return false;
    double mine = trainer_elapsed_minutes(tr) - tr->last_save_minutes;
    std::vector<double> all(tr->world.size);
    comm_allgather(&tr->world, &mine, sizeof mine, all.data());
    return *std::max_element(all.begin(), all.end()) >= c->save_interval_minutes;
}

// --exit-duration-in-mins, checked after iteration `it` (after its save, before --exit-interval, as
// Megatron): the wall time over the limit on any rank stops all of them (Megatron's all-reduce MAX).
// Returns the line to stop with, or "" to go on (also at the last iteration: the run ends anyway).
template <typename A>
static std::string trainer_exit_duration(Trainer<A>* tr, int64_t it) {
    const Config* c = &tr->cfg;
    if (c->exit_duration_in_mins <= 0 || it >= tr->train_iters) return "";
    double mine = trainer_elapsed_minutes(tr);
    std::vector<double> all(tr->world.size);
    comm_allgather(&tr->world, &mine, sizeof mine, all.data());
    double minutes = *std::max_element(all.begin(), all.end());
    if (minutes <= (double)c->exit_duration_in_mins) return "";
    char buf[200];
    snprintf(buf, sizeof buf, "exiting program after %.2f minutes at iteration %lld (--exit-duration-in-mins %lld)", minutes,
             (long long)it, (long long)c->exit_duration_in_mins);
    return buf;
}

// Test hook KEEL_TEST_KILL_SWITCH_AT: rank 0 creates the kill switch once iteration `it` is done.
template <typename A>
static void trainer_test_touch_kill_switch(const Trainer<A>* tr, int64_t it) {
    if (tr->hooks.kill_switch_at != it || tr->world.rank != 0 || tr->cfg.kill_switch_path.empty()) return;
    FILE* f = fopen_check(tr->cfg.kill_switch_path.c_str(), "wb");
    fclose(f);
}

// After "nothing to train": the command that trains further from the same checkpoints. A longer
// run is also a longer LR schedule, which a resume refuses unless told (llmc/schedule.h).
template <typename A>
static void trainer_print_go_on(const Trainer<A>* tr) {
    const Config* c = &tr->cfg;
    const char* flag = c->train_tokens > 0 && tr->st.iteration < tr->train_iters ? "--train-tokens"
                     : c->train_samples > 0 ? "--train-samples" : "--train-iters";
    long long now = c->train_tokens > 0 && tr->st.iteration < tr->train_iters ? (long long)c->train_tokens
                  : c->train_samples > 0 ? (long long)c->train_samples : (long long)c->train_iters;
    printf("to train further: rerun with %s %lld (or any larger value) and --override-lr-scheduler (the new length "
           "stretches the LR schedule), keeping --load %s\n", flag, 2 * now, c->load.empty() ? "DIR" : c->load.c_str());
}

// --export-llmc / --export-hf at the end of a run: the whole model gathered to rank 0, which writes.
template <typename A>
static void trainer_export(Trainer<A>* tr) {
    const Config* c = &tr->cfg;
    if (c->export_llmc.empty() && c->export_hf.empty()) return;
    std::vector<float> params;
    trainer_gather_params(tr, &params);
    if (tr->world.rank != 0) return;
    GPTConfig whole = gpt_config_stage(&tr->gcfg, 1, 0);
    if (!c->export_llmc.empty()) {
        llmc_export(c->export_llmc.c_str(), params.data(), &tr->whole, &whole);
        printf("exported the weights as llm.c model file %s\n", c->export_llmc.c_str());
    }
    if (!c->export_hf.empty()) {
        hf_export(c->export_hf, params.data(), &tr->whole, &whole, c, tr->hooks.fault_save.c_str());
        std::string why;
        printf("exported the weights as Hugging Face directory %s (%s, %s)\n", c->export_hf.c_str(),
               HF_ARCHS[hf_arch_of(&whole, &why)].cls, c->export_dtype.c_str());
    }
}

// The run after setup: iterations with their evaluations, samples and checkpoints; then the end
// of run's validation, save and export. Returns the process's exit status.
template <typename A>
static int trainer_run(Trainer<A>* tr) {
    trainer_setup(tr);
    const Config* c = &tr->cfg;
    if (!c->eval_only.empty()) return trainer_eval_only(tr);
    // Nothing to train (a finished run started again): no extra validation record, no re-save.
    bool nothing = tr->st.iteration >= tr->train_iters || (c->train_tokens > 0 && tr->st.consumed_tokens >= c->train_tokens);
    // ... unless --save names another directory than --load: then the loaded state is written there
    // (a checkpoint re-laid out by this run's DP size and ZeRO stage comes out byte-identical).
    bool convert = nothing && !c->save.empty() && c->save != c->load;
    bool saved_now = nothing && !convert, evaluated_now = nothing;
    if (nothing) {
        printf("nothing to train: iteration %lld of %lld, %lld tokens consumed%s\n", (long long)tr->st.iteration,
               (long long)tr->train_iters, (long long)tr->st.consumed_tokens, convert ? "; writing the loaded state to --save" : "");
        if (!convert) trainer_print_go_on(tr);
    }
    while (tr->st.iteration < tr->train_iters) {
        if (trainer_kill_switch(tr))  // before each iteration, as BigScience's loop
            return trainer_stop_early(tr, saved_now, "detected kill switch at " + c->kill_switch_path + ": exiting at iteration " +
                                                         std::to_string(tr->st.iteration) + " (--kill-switch-path)");
        if (c->train_tokens > 0 && tr->st.consumed_tokens >= c->train_tokens) {
            printf("stopping: %lld tokens consumed, --train-tokens %lld reached\n", (long long)tr->st.consumed_tokens,
                   (long long)c->train_tokens);
            break;
        }
        IterationRecord rec;
        tr->iterations_run++;
        if (trainer_iteration(tr, &rec)) {
            log_iteration(&tr->log, &rec, c->log_interval);
            if (rec.iteration % c->log_interval == 0) trainer_check_tied_embedding(tr, rec.iteration);
        }
        if (tr->rollback_pending) {  // back to the snapshot; the skipped window follows in the next passes
            trainer_rollback(tr, rec.iteration);
            continue;
        }
        int64_t it = tr->st.iteration;
        evaluated_now = saved_now = false;
        if (tr->have_valid && c->eval_interval > 0 && it % c->eval_interval == 0) {
            log_validation(&tr->log, it, trainer_evaluate(tr, it), tr->st.consumed_samples, tr->st.consumed_tokens);
            evaluated_now = true;
        }
        if (tr->have_tok && it % c->sample_interval == 0 && tr->comm.rank == 0) trainer_print_sample(tr);  // the first pipeline
        if (!c->save.empty() && ((c->save_interval > 0 && it % c->save_interval == 0) || trainer_save_by_time(tr))) {
            saved_now = trainer_save(tr);
        } else if (c->async_save) {
            trainer_async_save_finish(tr, false, false);  // publishes the pending save once every rank has written it
        }
        if (c->spike_policy == "rollback" && it % c->spike_snapshot_interval == 0) trainer_snapshot(tr);
        std::string stop = trainer_exit_duration(tr, it);
        if (stop.empty()) stop = trainer_exit_signal(tr, it);
        if (!stop.empty()) return trainer_stop_early(tr, saved_now, stop);
        trainer_test_touch_kill_switch(tr, it);
        if (c->exit_interval > 0 && it % c->exit_interval == 0 && it < tr->train_iters) {
            if (!c->save.empty() && !saved_now) trainer_save(tr, true);
            trainer_async_save_finish(tr, true, true);
            printf("exiting program at iteration %lld (--exit-interval %lld)\n", (long long)it, (long long)c->exit_interval);
            return 0;
        }
    }
    if (tr->have_valid && c->eval_interval > 0 && !evaluated_now)
        log_validation(&tr->log, tr->st.iteration, trainer_evaluate(tr, tr->st.iteration), tr->st.consumed_samples, tr->st.consumed_tokens);
    if (!nothing) trainer_evaluate_full_at_end(tr);
    if (!c->save.empty() && !saved_now) trainer_save(tr, true);
    trainer_async_save_finish(tr, true, true);
    trainer_export(tr);
    return 0;
}

// After trainer_run, whichever way it ended (the end, --exit-interval, a kill switch, the time limit,
// --eval-only): everything trainer_setup opened or allocated is closed and freed (LeakSanitizer
// checks every exit path, test/sanitize.sh).
template <typename A>
static void trainer_finish(Trainer<A>* tr) {
    const Config* c = &tr->cfg;
    if (c->time_ops > 0 && !tr->op_times_done && c->eval_only.empty()) {  // (whichever way the run ended)
        if (tr->op_times_skipped)
            printf("--time-ops %lld: that iteration was skipped (--skip-train-iteration-range): nothing to time\n", (long long)c->time_ops);
        else
            printf("--time-ops %lld: that iteration did not run in this process (it ended at iteration %lld)\n", (long long)c->time_ops,
                   (long long)tr->st.iteration);
    }
    backend_marks_free(&tr->op_times.clock);
    logger_close(&tr->log);
    dataloader_free(&tr->train_data);
    if (tr->have_valid) dataloader_free(&tr->valid_data);
    optimizer_free(&tr->opt);
    gpt_free(&tr->model);
    trainer_free_groups(tr);
    delete tr;
}

template <typename A> static int trainer_main(const Comm* comm, const Config* c) {
    Trainer<A>* tr = new Trainer<A>();
    tr->world = *comm;
    tr->cfg = *c;
    tr->hooks = test_hooks_read();
    tr->start_wall = trainer_start_clock(&tr->world);
    trainer_install_exit_signal_handler(c);
    if (trainer_kill_switch(tr)) {  // BigScience: a queued job finding the switch exits at once, before loading anything
        printf("detected kill switch at %s: exiting before training (--kill-switch-path)\n", c->kill_switch_path.c_str());
        comm_finalize(&tr->world);
        delete tr;
        return 0;
    }
    int status = trainer_run(tr);
    trainer_finish(tr);
    return status;
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    Comm comm{};
    comm_init(&comm, &argc, &argv);
    if (comm.rank != 0 && !freopen("/dev/null", "w", stdout)) keel_die("rank %d: cannot silence stdout", comm.rank);
    Config c;
    trainer_parse_flags(&c, &comm, argc, argv);
#ifdef KEEL_CUDA
    if (c.bf16) return trainer_main<__nv_bfloat16>(&comm, &c);
    if (c.fp16) return trainer_main<__half>(&comm, &c);
#endif
    return trainer_main<float>(&comm, &c);
}
