// flags.h — every command-line flag of keel, from one table (docs/internals.md#flags).
//
// The table `FLAGS` below is the single source for: the parser, `-h` usage text, the start-up
// printout of effective values, which flags a checkpoint records, and the names tests use.
// Contract:
//   - long flags with Megatron-DeepSpeed names and defaults: `--name value` or `--name=value`;
//     booleans are `--name` (store_true); numbers may group digits as Python does (`126_953_125`);
//     `@file` reads more arguments from a file written as a shell passes them (a pasted slurm
//     block: continuations, quotes, `#` comments; no `$` expansion), so a run's arguments are data.
//   - strict: unknown flags (all named in one line), missing values, malformed numbers (trailing
//     junk, out of range, NaN, misplaced `_`) and values outside a flag's choices exit with status 2
//     and one line naming the flag; under a launcher only rank 0 prints it (common.h keel_flag_error).
//   - `--deepspeed --deepspeed_config FILE` maps DeepSpeed's JSON onto the flags (llmc/deepspeed.h).
//   - contradictory combinations are rejected by config_validate(), also with status 2.
// Each flag has a `kind`: FK_STATE flags define the training trajectory and are recorded in every
// checkpoint (a resume reports what changed); FK_RUN flags only steer this process (paths, logs).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "llmc/common.h"
#include "llmc/pp_partition.h"

// The whole configuration of a run. Defaults are the plain GPT-2 recipe; every instability knob
// defaults to off. Integers are int64 so sample/token counts of large runs fit.
struct Config {
    // model
    int64_t num_layers = 12, hidden_size = 768, num_attention_heads = 12, seq_length = 1024;
    int64_t ffn_hidden_size = 0;          // 0: 4 x hidden-size (Megatron's None)
    int64_t max_position_embeddings = 0;  // 0: equal to --seq-length
    int64_t make_vocab_size_divisible_by = 128;
    int64_t pad_vocab_size_to = 0;  // 0: unset (BigScience's None)
    int64_t vocab_size = 50257;
    double init_method_std = 0.02;
    std::string init_method = "std";               // std | small_init | mt_nlg (docs/knobs.md#initialization)
    // architecture and numerics knobs (docs/knobs.md#embedding-layernorm-and-stableembedding, #attention-numerics, #normformer, #activations-dropout-positions-and-alibi); all off by default
    bool embed_layernorm = false, stable_embedding = false;
    std::string position_embedding_type = "learned", position_embedding_init = "normal";
    std::string activation = "gelu", attention_scaling = "standard";
    std::string attention_impl = "auto";
    std::string gelu_fusion = "auto";
    int64_t classifier_chunk_rows = 0;  // 0: auto (model.h gpt_head_rows)
    bool apply_query_key_layer_scaling = false, normformer = false;
    double hidden_dropout = 0.1, attention_dropout = 0.1, embed_dropout = NAN;  // Megatron's 0.1; NaN: = hidden dropout
    // batch and duration
    int64_t micro_batch_size = 4, global_batch_size = 0;  // 0: micro-batch × data-parallel size
    int64_t train_iters = 0, train_samples = 0, train_tokens = 0, exit_interval = 0;
    std::string rampup_batch_size;                 // "START INCR SAMPLES" (docs/knobs.md#batch-size-ramp-up)
    // curriculum learning by sequence length (docs/knobs.md#curriculum-learning)
    bool curriculum_learning = false;
    int64_t cl_min_seqlen = 0, cl_max_seqlen = 0, cl_difficulty_step = 8, cl_total_steps = 0;
    std::string cl_schedule = "fixed_linear", cl_discrete_seqlens, cl_discrete_steps;
    double cl_root_degree = 0.0;
    std::string skip_train_iteration_range;        // "A-B C-D ..." (docs/knobs.md#skipping-iterations, NVM semantics)
    // optimizer and schedule
    double lr = NAN, min_lr = 0.0;
    std::string lr_decay_style = "linear";
    int64_t lr_warmup_iters = 0, lr_warmup_samples = 0, lr_decay_iters = 0, lr_decay_samples = 0, lr_decay_tokens = 0;
    double lr_warmup_fraction = NAN;
    bool override_lr_scheduler = false, use_checkpoint_lr_scheduler = false;
    double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_eps = 1e-8, weight_decay = 0.01, clip_grad = 1.0;
    std::string optimizer = "adam";                // adam | adam8bit (docs/knobs.md#8-bit-adam)
    bool use_bnb_optimizer = false;                // BigScience's: = --optimizer adam8bit --stable-embedding
    int64_t adam8bit_block_size = 256, adam8bit_min_size = 4096, adam8bit_percentile_clipping = 100;
    int64_t zero_stage = 0;                        // 0: replicated optimizer state; 1: sharded over data parallel
    int64_t seed = 1234;
    // update-skipping rules (docs/knobs.md#rejecting-a-batch-by-its-gradient-norm) and the gradient reduction (docs/knobs.md#gradient-pre-divide-factor)
    double skip_update_grad_norm_above = 0.0, skip_update_loss_zscore = 0.0, skip_update_norm_zscore = 0.0;
    int64_t skip_update_window = 100;
    double gradient_predivide_factor = 1.0;
    double grad_bucket_mb = 25.0;  // the data-parallel reduction's bucket size (optimizer.h grad_buckets)
    // spike autopilot (llmc/spike.h): detect a loss/grad-norm spike, then skip the update or roll back
    std::string spike_policy = "off", spike_metric = "loss";
    double spike_zscore = 6.0, spike_lr_factor = 1.0;
    int64_t spike_window = 50, spike_lr_iters = 100, spike_snapshot_interval = 0, spike_max_rollbacks = 10;
    // precision and loss scaling (docs/knobs.md#mixed-precision-and-loss-scaling)
    bool fp16 = false, bf16 = false, fp32 = false;
    double loss_scale = 0.0, initial_loss_scale = 4294967296.0, min_loss_scale = 1.0;
    int64_t loss_scale_window = 1000, hysteresis = 2;
    // data
    std::string train_data_path, valid_data_path;
    // Megatron's indexed data (llmc/megatron_data.h): a prefix or a weighted blend, split by --split,
    // or BigScience's weighted split paths (one group each, inline or in a file)
    std::string data_path, split = "969, 30, 1", data_impl = "infer";
    std::string train_weighted_split_paths, valid_weighted_split_paths;
    std::string train_weighted_split_paths_path, valid_weighted_split_paths_path;
    std::string vocab_file = "data/gpt2/encoder.json", merge_file = "data/gpt2/vocab.bpe";
    // checkpoints
    std::string save, load, load_llmc, export_llmc;
    std::string load_hf, export_hf, export_dtype = "fp32";  // Hugging Face directories (llmc/hf.h)
    int64_t save_interval = 0;
    bool no_load_optim = false, no_load_rng = false, finetune = false;  // recovery recipes (docs/knobs.md#resuming-a-schedule)
    bool start_over = false;  // outputs holding an earlier run's files: moved aside, not refused (llmc/outputs.h)
    // logging and evaluation
    int64_t log_interval = 100, eval_interval = 1000, eval_iters = 100;  // Megatron's defaults; no validation data: no evaluation
    bool eval_full_at_end = false;  // keel's: the whole validation set once after the last iteration
    int64_t sample_interval = 0, sample_length = 64;
    std::string metrics_file, tensorboard_dir;
    int64_t log_layer_norms_interval = 0;
    // Megatron-DeepSpeed's run control and extra logging (docs/megatron-deepspeed.md)
    int64_t exit_duration_in_mins = 0;             // 0: off (Megatron: None)
    bool async_save = false;                      // write checkpoints behind training (Megatron-LM's name)
    std::string save_failure = "stop";            // stop | continue: after a save that failed on some rank
    double save_interval_minutes = 0;             // also save once this much wall time passed since the last save; 0: off
    bool exit_signal_handler = false;             // SIGTERM/SIGUSR1: save after the iteration and exit 0 (Megatron)
    double distributed_timeout_minutes = 10;      // bound on every wait for another rank or the GPU (llmc/watchdog.h); 0: none
    std::string kill_switch_path;                  // BigScience's kill switch ("": off)
    std::string eval_only;                         // Megatron's type=bool value: "" off, any other true ("false" refused)
    bool log_params_norm = false, log_num_zeros_in_grad = false;
    int64_t tensorboard_queue_size = 1000;
    bool log_timers_to_tensorboard = false, log_batch_size_to_tensorboard = false, log_validation_ppl_to_tensorboard = false;
    int64_t time_ops = 0;  // --time-ops: the iteration whose ops are timed (0: none)
    int64_t check_replicated_params_interval = 0;  // tensor parallelism: compare replicated tensors every N iterations
    bool sync_tp_duplicated_parameters = false;    // ... or average them over the TP group before every forward
    // layout and planning (docs/internals.md#parallelism): --dry-run plans any layout; training runs TP x PP x DP over the launched ranks
    int64_t tensor_model_parallel_size = 1, pipeline_model_parallel_size = 1, data_parallel_size = 0;
    bool checkpoint_activations = false, dry_run = false;
    std::string pp_partition_method;  // empty: keel's even split (llmc/pp_partition.h)
    double gpu_memory_gb = 0;  // 0: --gpu-type's memory
    // --dry-run's step time (llmc/step_model.h): the GPU, the node, the links; the layout search; the JSON
    std::string gpu_type = "auto", dry_run_json;  // auto: the GPU found, else a100-80gb
    int64_t gpus_per_node = 8, num_gpus = 0;
    double inter_node_gbps = 0, intra_node_gbps = 0;  // 0: --gpu-type's
    bool search_layout = false;
    std::string software_stack = "keel";  // whose implementation the step time is of (llmc/step_model.h STEP_STACKS)
    std::string step_curves;              // a file of measured efficiencies replacing the step model's ("": none)
    // Megatron-DeepSpeed's launcher-level flags (llmc/deepspeed.h): the DeepSpeed JSON, and flags keel
    // accepts with a start-up note (its computation does not change) or refuses with a reason
    bool deepspeed = false;
    std::string deepspeed_config;
    int64_t deepspeed_gradient_accumulation_steps = 0;  // not a flag: the JSON's, checked by config_validate (0: absent)
    bool deepspeed_activation_checkpointing = false, partition_activations = false;
    bool abort_on_unmet_fused_kernel_constraints = false, no_masked_softmax_fusion = false;
    std::string distributed_backend = "nccl", tokenizer_type = "GPT2BPETokenizer", tokenizer_name_or_path, codecarbon_dir;
    int64_t num_workers = 2, valid_num_workers = 2;
};

enum FlagType { FT_INT, FT_FLOAT, FT_STR, FT_BOOL };
enum FlagKind { FK_STATE, FK_RUN };
// The topic a flag is listed under in -h, in the order -h prints them (FLAG_GROUP_TITLES).
enum FlagGroup { FG_MODEL, FG_ARCH, FG_DATA, FG_BATCH, FG_OPTIM, FG_PRECISION, FG_PARALLEL, FG_CKPT, FG_LOG, FG_KNOBS, FG_GPU, FG_COMPAT, FG_COUNT };
static const char* const FLAG_GROUP_TITLES[FG_COUNT] = {
    "model", "architecture variants (BLOOM, OPT)", "data", "batch size and duration", "optimizer and learning-rate schedule",
    "precision and loss scaling", "parallelism and memory planning", "checkpoints and model files",
    "logging, evaluation and run control", "instability knobs (curriculum, skipped batches and updates, spike autopilot)",
    "GPU kernels (train_gpt)", "Megatron-DeepSpeed launcher flags (accepted with a note, or refused with the reason)"};

enum : int64_t { NO_MIN = INT64_MIN, NO_MAX = INT64_MAX };
enum { NARGS_MANY = -1 };

struct Flag {
    const char* name;     // without the leading "--"
    int nargs;            // values taken: 1, or N > 1 exactly, or NARGS_MANY (one or more); kept space-joined
    int64_t min, max;     // bounds of an FT_INT value (NO_MIN / NO_MAX: none), checked by config_validate
    FlagType type;
    size_t offset;        // offsetof(Config, field)
    FlagKind kind;
    const char* choices;  // "a|b|c" for enumerated strings, else nullptr
    const char* help;
    FlagGroup group;      // where -h lists it
};

#define KEEL_FLAG(group, name, min, max, type, field, kind, choices, help) {name, 1, min, max, type, offsetof(Config, field), kind, choices, help, group}
#define KEEL_FLAGN(group, name, nargs, field, kind, help) {name, nargs, NO_MIN, NO_MAX, FT_STR, offsetof(Config, field), kind, nullptr, help, group}
static const Flag FLAGS[] = {
    // model shape
    KEEL_FLAG(FG_MODEL, "num-layers", 1, INT32_MAX, FT_INT, num_layers, FK_STATE, nullptr, "transformer layers L"),
    KEEL_FLAG(FG_MODEL, "hidden-size", 1, INT32_MAX, FT_INT, hidden_size, FK_STATE, nullptr, "channels C"),
    KEEL_FLAG(FG_MODEL, "ffn-hidden-size", 0, INT32_MAX, FT_INT, ffn_hidden_size, FK_STATE, nullptr,
              "MLP width F, any value (0: 4 x hidden-size, Megatron's default)"),
    KEEL_FLAG(FG_MODEL, "num-attention-heads", 1, INT32_MAX, FT_INT, num_attention_heads, FK_STATE, nullptr, "attention heads NH (must divide C)"),
    KEEL_FLAG(FG_MODEL, "seq-length", 1, INT32_MAX, FT_INT, seq_length, FK_STATE, nullptr, "tokens per sample T"),
    KEEL_FLAG(FG_MODEL, "max-position-embeddings", 0, INT32_MAX, FT_INT, max_position_embeddings, FK_STATE, nullptr,
              "rows of the position embedding (0: = seq-length)"),
    KEEL_FLAG(FG_MODEL, "vocab-size", 1, INT32_MAX, FT_INT, vocab_size, FK_STATE, nullptr, "real vocabulary size (GPT-2: 50257)"),
    KEEL_FLAG(FG_MODEL, "make-vocab-size-divisible-by", 1, INT32_MAX, FT_INT, make_vocab_size_divisible_by, FK_STATE, nullptr,
              "pad the vocabulary to a multiple of this x --tensor-model-parallel-size (Megatron)"),
    KEEL_FLAG(FG_MODEL, "pad-vocab-size-to", 0, INT32_MAX, FT_INT, pad_vocab_size_to, FK_STATE, nullptr,
              "pad the vocabulary to exactly this many rows, at any TP (BigScience; >= --vocab-size, a multiple of "
              "--make-vocab-size-divisible-by and of TP); 0: a multiple of make-vocab-size-divisible-by x TP, as Megatron"),
    KEEL_FLAG(FG_MODEL, "init-method-std", NO_MIN, NO_MAX, FT_FLOAT, init_method_std, FK_STATE, nullptr,
              "sigma of the normal init; output projections use sigma/sqrt(2L)"),
    KEEL_FLAG(FG_MODEL, "init-method", NO_MIN, NO_MAX, FT_STR, init_method, FK_STATE, "std|small_init|mt_nlg",
              "sigma from --init-method-std, or sqrt(2/(5h)) (small_init), or sqrt(1/(3h)) (mt_nlg)"),
    // architecture and numerics knobs
    KEEL_FLAG(FG_ARCH, "embed-layernorm", NO_MIN, NO_MAX, FT_BOOL, embed_layernorm, FK_STATE, nullptr,
              "LayerNorm on the word embedding, before positions and dropout (BigScience 104B/176B)"),
    KEEL_FLAG(FG_ARCH, "stable-embedding", NO_MIN, NO_MAX, FT_BOOL, stable_embedding, FK_STATE, nullptr,
              "bitsandbytes StableEmbedding: xavier-uniform word embedding + the embedding LayerNorm"),
    KEEL_FLAG(FG_ARCH, "position-embedding-type", NO_MIN, NO_MAX, FT_STR, position_embedding_type, FK_STATE, "learned|absolute|alibi",
              "learned (= absolute) position table, or ALiBi attention biases (BLOOM)"),
    KEEL_FLAG(FG_ARCH, "position-embedding-init", NO_MIN, NO_MAX, FT_STR, position_embedding_init, FK_STATE, "normal|sinusoidal",
              "init of the learned position table (OPT 11.xx: sinusoidal)"),
    KEEL_FLAG(FG_ARCH, "activation", NO_MIN, NO_MAX, FT_STR, activation, FK_STATE, "gelu|relu", "MLP activation (gelu: tanh approximation; OPT: relu)"),
    KEEL_FLAG(FG_ARCH, "attention-scaling", NO_MIN, NO_MAX, FT_STR, attention_scaling, FK_STATE, "standard|qk-inward",
              "scale scores after QK^T, or q and k each by d^-1/4 before it (OPT, Megatron-DeepSpeed PR 118)"),
    KEEL_FLAG(FG_GPU, "attention-impl", NO_MIN, NO_MAX, FT_STR, attention_impl, FK_RUN, "auto|flash|gemm",
              "attention kernels: flash (fused, O(T) memory; GPU: head size 64/128 in bf16/fp16), gemm (materialized "
              "softmax), auto (on the GPU the faster of the two by the step model where flash covers the config, gemm only "
              "where its T x T probabilities fit; the CPU trainer: gemm)"),
    KEEL_FLAG(FG_GPU, "gelu-fusion", NO_MIN, NO_MAX, FT_STR, gelu_fusion, FK_RUN, "auto|on|off",
              "GPU: the MLP's GeLU in cuBLASLt's GEMM epilogues (forward GELU_AUX_BIAS; backward DGELU, not under "
              "--normformer), or a separate kernel each way (off); auto: on from compute capability 9.0. The CPU "
              "trainer ignores it (its ops compute the same values either way)"),
    KEEL_FLAG(FG_GPU, "classifier-chunk-rows", 0, INT32_MAX, FT_INT, classifier_chunk_rows, FK_RUN, nullptr,
              "positions whose logits exist at once: the LM head and its loss run in chunks of this many rows "
              "(0: auto — the whole micro-batch on the CPU, at most 256 MiB of logits on the GPU)"),
    KEEL_FLAG(FG_ARCH, "apply-query-key-layer-scaling", NO_MIN, NO_MAX, FT_BOOL, apply_query_key_layer_scaling, FK_STATE, nullptr,
              "scores computed at 1/layer scale, multiplied back inside an fp32 softmax (Megatron)"),
    KEEL_FLAG(FG_ARCH, "normformer", NO_MIN, NO_MAX, FT_BOOL, normformer, FK_STATE, nullptr,
              "NormFormer: per-head scale, post-attention LayerNorm, LayerNorm after the MLP activation (OPT 11.xx)"),
    KEEL_FLAG(FG_MODEL, "hidden-dropout", NO_MIN, NO_MAX, FT_FLOAT, hidden_dropout, FK_STATE, nullptr,
              "dropout on the attention and MLP outputs before the residual add"),
    KEEL_FLAG(FG_MODEL, "attention-dropout", NO_MIN, NO_MAX, FT_FLOAT, attention_dropout, FK_STATE, nullptr, "dropout on the attention probabilities"),
    KEEL_FLAG(FG_MODEL, "embed-dropout", NO_MIN, NO_MAX, FT_FLOAT, embed_dropout, FK_STATE, nullptr,
              "dropout on the embedding output (unset: = --hidden-dropout, as Megatron; OPT: 0)"),
    // batch and duration
    KEEL_FLAG(FG_BATCH, "micro-batch-size", 1, INT32_MAX, FT_INT, micro_batch_size, FK_STATE, nullptr, "samples per micro-batch per data-parallel rank"),
    KEEL_FLAG(FG_BATCH, "global-batch-size", 0, NO_MAX, FT_INT, global_batch_size, FK_STATE, nullptr,
              "samples per iteration (0: micro-batch x DP); the rest is gradient accumulation"),
    KEEL_FLAG(FG_BATCH, "train-iters", 0, NO_MAX, FT_INT, train_iters, FK_STATE, nullptr, "iterations to train (or --train-samples)"),
    KEEL_FLAG(FG_BATCH, "train-samples", 0, NO_MAX, FT_INT, train_samples, FK_STATE, nullptr, "samples to train (or --train-iters)"),
    KEEL_FLAG(FG_BATCH, "train-tokens", 0, NO_MAX, FT_INT, train_tokens, FK_STATE, nullptr,
              "also stop once this many tokens are consumed (a real stop condition); 0: off"),
    KEEL_FLAGN(FG_BATCH, "rampup-batch-size", 3, rampup_batch_size, FK_STATE,
               "START INCR SAMPLES: global batch grows from START by INCR over SAMPLES samples (sample-based runs)"),
    KEEL_FLAG(FG_KNOBS, "curriculum-learning", NO_MIN, NO_MAX, FT_BOOL, curriculum_learning, FK_STATE, nullptr,
              "sequence-length curriculum: train on truncated samples, growing to full length"),
    KEEL_FLAG(FG_KNOBS, "cl-min-seqlen", 0, INT32_MAX, FT_INT, cl_min_seqlen, FK_STATE, nullptr, "curriculum start length"),
    KEEL_FLAG(FG_KNOBS, "cl-max-seqlen", 0, INT32_MAX, FT_INT, cl_max_seqlen, FK_STATE, nullptr, "curriculum end length (0: --seq-length)"),
    KEEL_FLAG(FG_KNOBS, "cl-difficulty-step", 1, INT32_MAX, FT_INT, cl_difficulty_step, FK_STATE, nullptr, "curriculum lengths are multiples of this"),
    KEEL_FLAG(FG_KNOBS, "cl-total-steps", 0, NO_MAX, FT_INT, cl_total_steps, FK_STATE, nullptr, "iterations until the full length (fixed_linear/root)"),
    KEEL_FLAG(FG_KNOBS, "cl-schedule", NO_MIN, NO_MAX, FT_STR, cl_schedule, FK_STATE, "fixed_linear|fixed_root|fixed_discrete", "curriculum schedule"),
    KEEL_FLAG(FG_KNOBS, "cl-root-degree", NO_MIN, NO_MAX, FT_FLOAT, cl_root_degree, FK_STATE, nullptr, "root degree r of fixed_root"),
    KEEL_FLAGN(FG_KNOBS, "cl-discrete-seqlens", NARGS_MANY, cl_discrete_seqlens, FK_STATE, "fixed_discrete: lengths d0 .. dn"),
    KEEL_FLAGN(FG_KNOBS, "cl-discrete-steps", NARGS_MANY, cl_discrete_steps, FK_STATE, "fixed_discrete: last iteration of each length but the final one"),
    KEEL_FLAGN(FG_KNOBS, "skip-train-iteration-range", NARGS_MANY, skip_train_iteration_range, FK_STATE,
               "A-B [C-D ...]: consume these iterations' batches without training on them (1-based, inclusive)"),
    KEEL_FLAG(FG_BATCH, "exit-interval", 0, NO_MAX, FT_INT, exit_interval, FK_RUN, nullptr,
              "stop after an iteration that is a multiple of this (saving first if --save); 0: off"),
    // optimizer and schedule
    KEEL_FLAG(FG_OPTIM, "lr", NO_MIN, NO_MAX, FT_FLOAT, lr, FK_STATE, nullptr, "peak learning rate (required)"),
    KEEL_FLAG(FG_OPTIM, "min-lr", NO_MIN, NO_MAX, FT_FLOAT, min_lr, FK_STATE, nullptr, "learning rate at the end of the decay"),
    KEEL_FLAG(FG_OPTIM, "lr-decay-style", NO_MIN, NO_MAX, FT_STR, lr_decay_style, FK_STATE, "constant|linear|cosine", "decay after warmup"),
    KEEL_FLAG(FG_OPTIM, "lr-warmup-iters", 0, NO_MAX, FT_INT, lr_warmup_iters, FK_STATE, nullptr, "warmup in iterations (iteration-based runs)"),
    KEEL_FLAG(FG_OPTIM, "lr-warmup-samples", 0, NO_MAX, FT_INT, lr_warmup_samples, FK_STATE, nullptr, "warmup in samples (sample-based runs)"),
    KEEL_FLAG(FG_OPTIM, "lr-warmup-fraction", NO_MIN, NO_MAX, FT_FLOAT, lr_warmup_fraction, FK_STATE, nullptr, "warmup as a fraction of the decay span"),
    KEEL_FLAG(FG_OPTIM, "lr-decay-iters", 0, NO_MAX, FT_INT, lr_decay_iters, FK_STATE, nullptr, "decay span in iterations (0: --train-iters)"),
    KEEL_FLAG(FG_OPTIM, "lr-decay-samples", 0, NO_MAX, FT_INT, lr_decay_samples, FK_STATE, nullptr, "decay span in samples (0: --train-samples)"),
    KEEL_FLAG(FG_OPTIM, "lr-decay-tokens", 0, NO_MAX, FT_INT, lr_decay_tokens, FK_STATE, nullptr,
              "decay over consumed tokens instead (warmup stays in samples); 0: off"),
    KEEL_FLAG(FG_OPTIM, "override-lr-scheduler", NO_MIN, NO_MAX, FT_BOOL, override_lr_scheduler, FK_RUN, nullptr,
              "on --load, take the schedule from the command line"),
    KEEL_FLAG(FG_OPTIM, "use-checkpoint-lr-scheduler", NO_MIN, NO_MAX, FT_BOOL, use_checkpoint_lr_scheduler, FK_RUN, nullptr,
              "on --load, take the schedule from the checkpoint"),
    KEEL_FLAG(FG_OPTIM, "adam-beta1", NO_MIN, NO_MAX, FT_FLOAT, adam_beta1, FK_STATE, nullptr, "Adam beta1"),
    KEEL_FLAG(FG_OPTIM, "adam-beta2", NO_MIN, NO_MAX, FT_FLOAT, adam_beta2, FK_STATE, nullptr, "Adam beta2 (BigScience: 0.95)"),
    KEEL_FLAG(FG_OPTIM, "adam-eps", NO_MIN, NO_MAX, FT_FLOAT, adam_eps, FK_STATE, nullptr, "Adam epsilon"),
    KEEL_FLAG(FG_OPTIM, "weight-decay", NO_MIN, NO_MAX, FT_FLOAT, weight_decay, FK_STATE, nullptr, "decoupled weight decay (not on biases, LayerNorms)"),
    KEEL_FLAG(FG_OPTIM, "optimizer", NO_MIN, NO_MAX, FT_STR, optimizer, FK_STATE, "adam|adam8bit",
              "adam: fp32 m and v (8 bytes/parameter); adam8bit: bitsandbytes' blockwise 8-bit m and v (about 2)"),
    KEEL_FLAG(FG_OPTIM, "use-bnb-optimizer", NO_MIN, NO_MAX, FT_BOOL, use_bnb_optimizer, FK_STATE, nullptr,
              "BigScience's bitsandbytes Adam8bit: = --optimizer adam8bit --stable-embedding (its embedding gets "
              "LayerNorm, xavier init and 32-bit state there too); keel's block size stays --adam8bit-block-size"),
    KEEL_FLAG(FG_OPTIM, "adam8bit-block-size", 64, 2048, FT_INT, adam8bit_block_size, FK_STATE, nullptr,
              "elements per 8-bit quantization block, a power of two (bitsandbytes: 256; its 2021 release: 2048)"),
    KEEL_FLAG(FG_OPTIM, "adam8bit-min-size", 0, NO_MAX, FT_INT, adam8bit_min_size, FK_STATE, nullptr,
              "tensors (per layer) with fewer elements keep 32-bit state"),
    KEEL_FLAG(FG_OPTIM, "adam8bit-percentile-clipping", 0, 100, FT_INT, adam8bit_percentile_clipping, FK_STATE, nullptr,
              "per tensor, clip the gradient norm to this percentile of its last 100 steps (bitsandbytes); 100: off"),
    KEEL_FLAG(FG_PARALLEL, "zero-stage", 0, 1, FT_INT, zero_stage, FK_RUN, nullptr,
              "1: shard fp32 master state and optimizer state over the data-parallel ranks (ZeRO-1); same bits as 0"),
    KEEL_FLAG(FG_OPTIM, "clip-grad", NO_MIN, NO_MAX, FT_FLOAT, clip_grad, FK_STATE, nullptr, "global-norm clipping threshold (0: off)"),
    KEEL_FLAG(FG_OPTIM, "seed", 0, NO_MAX, FT_INT, seed, FK_STATE, nullptr, "key of every random number (init, data order, dropout, sampling)"),
    KEEL_FLAG(FG_KNOBS, "skip-update-grad-norm-above", NO_MIN, NO_MAX, FT_FLOAT, skip_update_grad_norm_above, FK_STATE, nullptr,
              "reject the batch (no update, no schedule step) if the grad norm exceeds this (OPT); 0: off"),
    KEEL_FLAG(FG_KNOBS, "skip-update-loss-zscore", NO_MIN, NO_MAX, FT_FLOAT, skip_update_loss_zscore, FK_STATE, nullptr,
              "skip the update if the loss is this many standard deviations above the recent window; 0: off"),
    KEEL_FLAG(FG_KNOBS, "skip-update-norm-zscore", NO_MIN, NO_MAX, FT_FLOAT, skip_update_norm_zscore, FK_STATE, nullptr,
              "skip the update if the grad norm is this many standard deviations above the recent window; 0: off"),
    KEEL_FLAG(FG_KNOBS, "skip-update-window", 2, NO_MAX, FT_INT, skip_update_window, FK_STATE, nullptr,
              "iterations in the z-score window (updated iterations only)"),
    KEEL_FLAG(FG_PARALLEL, "gradient-predivide-factor", NO_MIN, NO_MAX, FT_FLOAT, gradient_predivide_factor, FK_STATE, nullptr,
              "divide gradients by F before the data-parallel sum and by DP/F after"),
    KEEL_FLAG(FG_PARALLEL, "grad-bucket-mb", NO_MIN, NO_MAX, FT_FLOAT, grad_bucket_mb, FK_RUN, nullptr,
              "data parallel: the gradient reduction runs in buckets of about this many MiB of fp32 gradients (whole "
              "layers), each issued as soon as the last micro-batch's backward has completed it, overlapping the rest "
              "of the backward (CUDA: on a second stream); 0: one reduction after the backward"),
    // spike autopilot
    KEEL_FLAG(FG_KNOBS, "spike-policy", NO_MIN, NO_MAX, FT_STR, spike_policy, FK_STATE, "off|skip|rollback",
              "on a spike: skip the update, or restore the last snapshot and skip the data window up to the spike"),
    KEEL_FLAG(FG_KNOBS, "spike-metric", NO_MIN, NO_MAX, FT_STR, spike_metric, FK_STATE, "loss|grad-norm|any",
              "what the spike detector watches"),
    KEEL_FLAG(FG_KNOBS, "spike-zscore", NO_MIN, NO_MAX, FT_FLOAT, spike_zscore, FK_STATE, nullptr,
              "a spike: this many standard deviations above the mean of the --spike-window last applied updates"),
    KEEL_FLAG(FG_KNOBS, "spike-window", 2, NO_MAX, FT_INT, spike_window, FK_STATE, nullptr,
              "applied updates in the spike detector's window (no verdict until it is full)"),
    KEEL_FLAG(FG_KNOBS, "spike-lr-factor", NO_MIN, NO_MAX, FT_FLOAT, spike_lr_factor, FK_STATE, nullptr,
              "after a rollback, multiply the learning rate by this for --spike-lr-iters iterations"),
    KEEL_FLAG(FG_KNOBS, "spike-lr-iters", 0, NO_MAX, FT_INT, spike_lr_iters, FK_STATE, nullptr,
              "iterations after the spike that run at the lowered learning rate"),
    KEEL_FLAG(FG_KNOBS, "spike-snapshot-interval", 0, NO_MAX, FT_INT, spike_snapshot_interval, FK_STATE, nullptr,
              "rollback: keep an in-memory snapshot every N iterations (0: --save-interval, or 100 without saves)"),
    KEEL_FLAG(FG_KNOBS, "spike-max-rollbacks", 1, NO_MAX, FT_INT, spike_max_rollbacks, FK_STATE, nullptr,
              "stop the run (exit 1) when a rollback would exceed this many in the run: a human is needed"),
    // precision and loss scaling
    KEEL_FLAG(FG_PRECISION, "fp16", NO_MIN, NO_MAX, FT_BOOL, fp16, FK_STATE, nullptr,
              "fp16 mixed precision with dynamic loss scaling (CPU: fp32 arithmetic, gradients rounded to binary16)"),
    KEEL_FLAG(FG_PRECISION, "bf16", NO_MIN, NO_MAX, FT_BOOL, bf16, FK_STATE, nullptr,
              "bf16 weights and activations, fp32 master weights and gradients (the CUDA trainer's default; CPU: fp32 arithmetic, "
              "bf16 storage emulated)"),
    KEEL_FLAG(FG_PRECISION, "fp32", NO_MIN, NO_MAX, FT_BOOL, fp32, FK_STATE, nullptr, "fp32 everywhere (the CPU trainer always; GPU parity runs)"),
    KEEL_FLAG(FG_PRECISION, "loss-scale", NO_MIN, NO_MAX, FT_FLOAT, loss_scale, FK_STATE, nullptr, "static loss scale; 0: dynamic under --fp16, none otherwise"),
    KEEL_FLAG(FG_PRECISION, "initial-loss-scale", NO_MIN, NO_MAX, FT_FLOAT, initial_loss_scale, FK_STATE, nullptr, "dynamic scaler: starting scale"),
    KEEL_FLAG(FG_PRECISION, "min-loss-scale", NO_MIN, NO_MAX, FT_FLOAT, min_loss_scale, FK_STATE, nullptr, "dynamic scaler: floor"),
    KEEL_FLAG(FG_PRECISION, "loss-scale-window", 1, NO_MAX, FT_INT, loss_scale_window, FK_STATE, nullptr, "dynamic scaler: clean iterations before doubling"),
    KEEL_FLAG(FG_PRECISION, "hysteresis", 1, NO_MAX, FT_INT, hysteresis, FK_STATE, nullptr, "dynamic scaler: overflows tolerated before halving"),
    // data
    KEEL_FLAG(FG_DATA, "train-data-path", NO_MIN, NO_MAX, FT_STR, train_data_path, FK_RUN, nullptr, "training shards: path, glob or comma list (required)"),
    KEEL_FLAG(FG_DATA, "valid-data-path", NO_MIN, NO_MAX, FT_STR, valid_data_path, FK_RUN, nullptr, "validation shards (needed for --eval-interval)"),
    KEEL_FLAGN(FG_DATA, "data-path", NARGS_MANY, data_path, FK_RUN,
               "Megatron indexed data (.idx/.bin): PREFIX, or WEIGHT PREFIX pairs blended by weight; train and validation "
               "sequences carved by --split"),
    KEEL_FLAG(FG_DATA, "split", NO_MIN, NO_MAX, FT_STR, split, FK_RUN, nullptr,
              "--data-path's train, validation, test proportions of each prefix's sequences (Megatron's rounding)"),
    KEEL_FLAG(FG_DATA, "data-impl", NO_MIN, NO_MAX, FT_STR, data_impl, FK_RUN, "mmap|infer|lazy|cached",
              "Megatron indexed-dataset format; keel reads mmap (MMIDIDX) only, lazy/cached are refused"),
    KEEL_FLAGN(FG_DATA, "train-weighted-split-paths", NARGS_MANY, train_weighted_split_paths, FK_RUN,
               "BigScience's training group \"NAME: WEIGHT START:END PREFIX, ...\" (blended by weight)"),
    KEEL_FLAGN(FG_DATA, "valid-weighted-split-paths", NARGS_MANY, valid_weighted_split_paths, FK_RUN,
               "BigScience's validation group, same form (keel validates on one group)"),
    KEEL_FLAG(FG_DATA, "train-weighted-split-paths-path", NO_MIN, NO_MAX, FT_STR, train_weighted_split_paths_path, FK_RUN, nullptr,
              "a file holding the training group on one line, in double quotes"),
    KEEL_FLAG(FG_DATA, "valid-weighted-split-paths-path", NO_MIN, NO_MAX, FT_STR, valid_weighted_split_paths_path, FK_RUN, nullptr,
              "a file holding the validation group on one line, in double quotes"),
    KEEL_FLAG(FG_DATA, "vocab-file", NO_MIN, NO_MAX, FT_STR, vocab_file, FK_RUN, nullptr, "GPT-2 encoder.json (text samples; --export-hf copies it as vocab.json)"),
    KEEL_FLAG(FG_DATA, "merge-file", NO_MIN, NO_MAX, FT_STR, merge_file, FK_RUN, nullptr, "GPT-2 vocab.bpe merges (text samples; --export-hf copies it as merges.txt)"),
    // checkpoints
    KEEL_FLAG(FG_CKPT, "save", NO_MIN, NO_MAX, FT_STR, save, FK_RUN, nullptr, "checkpoint directory to write"),
    KEEL_FLAG(FG_CKPT, "save-interval", 0, NO_MAX, FT_INT, save_interval, FK_RUN, nullptr, "save every N iterations (and at the end); 0: only at the end"),
    KEEL_FLAG(FG_CKPT, "save-interval-minutes", NO_MIN, NO_MAX, FT_FLOAT, save_interval_minutes, FK_RUN, nullptr,
              "also save after an iteration once this many minutes of wall time have passed since the run's start or its last "
              "save, on any rank (agreed over ranks; keel's flag); 0: off"),
    KEEL_FLAG(FG_CKPT, "async-save", NO_MIN, NO_MAX, FT_BOOL, async_save, FK_RUN, nullptr,
              "write interval checkpoints behind training: the step waits for host copies only, the ranks publish once all have "
              "written (the previous checkpoint stays latest until then); the run waits for a pending save before it ends (Megatron-LM's name)"),
    KEEL_FLAG(FG_CKPT, "save-failure", NO_MIN, NO_MAX, FT_STR, save_failure, FK_RUN, "stop|continue",
              "after a save that failed on any rank (a full disk, a quota; nothing of it is kept, the previous checkpoint stays "
              "latest): stop with exit 1, or continue and save again at the next interval (the end's save stops either way)"),
    KEEL_FLAG(FG_CKPT, "exit-signal-handler", NO_MIN, NO_MAX, FT_BOOL, exit_signal_handler, FK_RUN, nullptr,
              "on SIGTERM or SIGUSR1 (what slurm sends before a time limit or a preemption; mpirun forwards SIGUSR1), finish the "
              "iteration, save (with --save) and exit 0, agreed over ranks (Megatron)"),
    KEEL_FLAG(FG_CKPT, "load", NO_MIN, NO_MAX, FT_STR, load, FK_RUN, nullptr, "checkpoint directory to resume from (latest iteration)"),
    KEEL_FLAG(FG_CKPT, "start-over", NO_MIN, NO_MAX, FT_BOOL, start_over, FK_RUN, nullptr,
              "start a new run where --save, --metrics-file, --tensorboard-dir or an export holds an earlier run's files "
              "(refused without it): they are moved aside to previous_run_N names, never deleted"),
    KEEL_FLAG(FG_CKPT, "no-load-optim", NO_MIN, NO_MAX, FT_BOOL, no_load_optim, FK_RUN, nullptr,
              "on --load, start Adam (moments, step) and the loss scaler fresh (the optimizer-reset recipe)"),
    KEEL_FLAG(FG_CKPT, "no-load-rng", NO_MIN, NO_MAX, FT_BOOL, no_load_rng, FK_RUN, nullptr,
              "on --load, key dropout and sampling by --seed instead of the checkpoint's key"),
    KEEL_FLAG(FG_CKPT, "finetune", NO_MIN, NO_MAX, FT_BOOL, finetune, FK_RUN, nullptr,
              "on --load, take only the weights: iteration, counters, optimizer, schedule and RNG start fresh "
              "(a start from --load-hf or --load-llmc always does)"),
    KEEL_FLAG(FG_CKPT, "load-llmc", NO_MIN, NO_MAX, FT_STR, load_llmc, FK_RUN, nullptr, "initialise the weights from an llm.c GPT-2 model file"),
    KEEL_FLAG(FG_CKPT, "export-llmc", NO_MIN, NO_MAX, FT_STR, export_llmc, FK_RUN, nullptr, "write the final weights as an llm.c GPT-2 model file"),
    KEEL_FLAG(FG_CKPT, "load-hf", NO_MIN, NO_MAX, FT_STR, load_hf, FK_RUN, nullptr,
              "initialise the weights from a Hugging Face GPT-2, BLOOM or OPT directory (model.safetensors + config.json); "
              "the architecture and shape flags are taken from its config.json"),
    KEEL_FLAG(FG_CKPT, "export-hf", NO_MIN, NO_MAX, FT_STR, export_hf, FK_RUN, nullptr,
              "write the final weights as a Hugging Face directory (model.safetensors, config.json, GPT-2 tokenizer) that "
              "transformers loads as GPT2LMHeadModel, BloomForCausalLM or OPTForCausalLM"),
    KEEL_FLAG(FG_CKPT, "export-dtype", NO_MIN, NO_MAX, FT_STR, export_dtype, FK_RUN, "fp32|bf16|fp16", "--export-hf: the weights' dtype"),
    // logging and evaluation
    KEEL_FLAG(FG_LOG, "log-interval", 1, NO_MAX, FT_INT, log_interval, FK_RUN, nullptr, "print the log line every N iterations"),
    KEEL_FLAG(FG_LOG, "eval-interval", 0, NO_MAX, FT_INT, eval_interval, FK_RUN, nullptr, "validate every N iterations (and at the end); 0: off"),
    KEEL_FLAG(FG_LOG, "eval-iters", 1, NO_MAX, FT_INT, eval_iters, FK_RUN, nullptr,
              "global batches per evaluation; each evaluation reads the ones after the previous one's, wrapping around "
              "the validation set (Megatron's persistent validation iterator)"),
    KEEL_FLAG(FG_LOG, "eval-full-at-end", NO_MIN, NO_MAX, FT_BOOL, eval_full_at_end, FK_RUN, nullptr,
              "after the last iteration (and under --eval-only), also the loss over the whole validation set "
              "(every whole micro-batch once): val_loss_full in the metrics"),
    KEEL_FLAG(FG_LOG, "sample-interval", 0, NO_MAX, FT_INT, sample_interval, FK_RUN, nullptr, "print a generated text sample every N iterations; 0: off"),
    KEEL_FLAG(FG_LOG, "sample-length", 0, INT32_MAX, FT_INT, sample_length, FK_RUN, nullptr, "tokens per generated sample"),
    KEEL_FLAG(FG_LOG, "metrics-file", NO_MIN, NO_MAX, FT_STR, metrics_file, FK_RUN, nullptr, "JSONL metrics, one object per iteration"),
    KEEL_FLAG(FG_LOG, "tensorboard-dir", NO_MIN, NO_MAX, FT_STR, tensorboard_dir, FK_RUN, nullptr,
              "write TensorBoard event files here (Megatron tag names, with vs samples / vs tokens)"),
    KEEL_FLAG(FG_LOG, "log-layer-norms-interval", 0, NO_MAX, FT_INT, log_layer_norms_interval, FK_RUN, nullptr,
              "every N iterations: per-layer gradient norm, weight norm and activation RMS into the metrics; 0: off"),
    // Megatron-DeepSpeed's run control and extra logging
    KEEL_FLAG(FG_LOG, "exit-duration-in-mins", 0, NO_MAX, FT_INT, exit_duration_in_mins, FK_RUN, nullptr,
              "stop once the run's wall time (from the earliest rank's start) exceeds this many minutes, agreed over ranks "
              "after an iteration; save first (with --save); exit 0. 0: off"),
    KEEL_FLAG(FG_PARALLEL, "distributed-timeout-minutes", NO_MIN, NO_MAX, FT_FLOAT, distributed_timeout_minutes, FK_RUN, nullptr,
              "end the job when one wait for another rank or for the GPU (a collective, a send, a receive, a device sync) "
              "lasts longer than this, naming the rank, the operation, the group and the iteration (Megatron's bound on its "
              "process groups; fractions allowed); 0: wait forever"),
    KEEL_FLAG(FG_LOG, "kill-switch-path", NO_MIN, NO_MAX, FT_STR, kill_switch_path, FK_RUN, nullptr,
              "BigScience's kill switch: if this file exists at start-up, exit at once; if it appears during training, "
              "save (with --save) before the next iteration and exit 0"),
    KEEL_FLAG(FG_LOG, "eval-only", NO_MIN, NO_MAX, FT_STR, eval_only, FK_RUN, nullptr,
              "takes a value, as Megatron-DeepSpeed's type=bool (any non-empty value is true; 'false' is refused): load "
              "--load, evaluate --eval-iters batches of --valid-data-path, record the loss, exit; nothing trains or is saved"),
    KEEL_FLAG(FG_LOG, "log-params-norm", NO_MIN, NO_MAX, FT_BOOL, log_params_norm, FK_RUN, nullptr,
              "the L2 norm of the fp32 master weights after each update (every parameter once) in the log line, the "
              "metrics (params_norm) and TensorBoard (params-norm)"),
    KEEL_FLAG(FG_LOG, "log-num-zeros-in-grad", NO_MIN, NO_MAX, FT_BOOL, log_num_zeros_in_grad, FK_RUN, nullptr,
              "the count of exact zeros in the reduced gradient (every parameter once) in the log line and TensorBoard "
              "(num-zeros); the metrics file always has num_zeros"),
    KEEL_FLAG(FG_LOG, "tensorboard-queue-size", 1, NO_MAX, FT_INT, tensorboard_queue_size, FK_RUN, nullptr,
              "accepted for Megatron-DeepSpeed scripts; keel's writer has no queue: it hands the events to the file at "
              "every log line"),
    KEEL_FLAG(FG_LOG, "log-timers-to-tensorboard", NO_MIN, NO_MAX, FT_BOOL, log_timers_to_tensorboard, FK_RUN, nullptr,
              "TensorBoard: iteration-time/* at each log line and the forward-compute-time, backward-compute-time and "
              "optimizer-time of every iteration (seconds)"),
    KEEL_FLAG(FG_LOG, "time-ops", 0, NO_MAX, FT_INT, time_ops, FK_RUN, nullptr,
              "time every op of iteration N (as the log numbers it; 0: none) and print where its time went: calls, "
              "ms, share, TFLOP/s or GB/s per op, largest first (GPU: CUDA events on the compute stream, one host wait "
              "at that iteration's end; CPU: the clock). Training computes the same bytes with or without it"),
    KEEL_FLAG(FG_LOG, "log-batch-size-to-tensorboard", NO_MIN, NO_MAX, FT_BOOL, log_batch_size_to_tensorboard, FK_RUN, nullptr,
              "TensorBoard: batch-size/batch-size and batch-size/batch-size vs samples"),
    KEEL_FLAG(FG_LOG, "log-validation-ppl-to-tensorboard", NO_MIN, NO_MAX, FT_BOOL, log_validation_ppl_to_tensorboard, FK_RUN, nullptr,
              "TensorBoard: lm-loss-validation/lm loss validation ppl (vs samples, vs tokens)"),
    // layout and the memory planner
    KEEL_FLAG(FG_PARALLEL, "tensor-model-parallel-size", 1, INT32_MAX, FT_INT, tensor_model_parallel_size, FK_RUN, nullptr,
              "tensor-parallel ranks T (Megatron split: heads, MLP columns, vocabulary; launch TP x P x DP ranks)"),
    KEEL_FLAG(FG_PARALLEL, "check-replicated-params-interval", 0, NO_MAX, FT_INT, check_replicated_params_interval, FK_RUN, nullptr,
              "every N iterations compare a checksum of every replicated tensor (LayerNorms, row-parallel biases, positions) "
              "across tensor-parallel ranks; stop on a mismatch naming it; 0: off"),
    KEEL_FLAG(FG_PARALLEL, "sync-tp-duplicated-parameters", NO_MIN, NO_MAX, FT_BOOL, sync_tp_duplicated_parameters, FK_RUN, nullptr,
              "average the replicated tensors over the tensor-parallel ranks before every forward (the BLOOM band-aid, docs/knobs.md#drift-of-tp-replicated-parameters)"),
    KEEL_FLAG(FG_PARALLEL, "pipeline-model-parallel-size", 1, INT32_MAX, FT_INT, pipeline_model_parallel_size, FK_RUN, nullptr,
              "pipeline stages P: layers split over P ranks, 1F1B schedule (launch TP x P x DP ranks)"),
    KEEL_FLAG(FG_PARALLEL, "pp-partition-method", NO_MIN, NO_MAX, FT_STR, pp_partition_method, FK_RUN, nullptr,
              "DeepSpeed's layer split over pipeline stages: type:REGEX (BigScience: type:transformer) or uniform, over "
              "GPTModelPipe's layer list; unset: L/P layers per stage, earlier stages taking the rest (Megatron-DeepSpeed's "
              "default 'parameters' is refused)"),
    KEEL_FLAG(FG_PARALLEL, "data-parallel-size", 0, 65536, FT_INT, data_parallel_size, FK_RUN, nullptr,
              "--dry-run: data-parallel ranks to plan for (0: the launched ranks / (T*P)); training takes the launched ranks"),
    KEEL_FLAG(FG_PARALLEL, "checkpoint-activations", NO_MIN, NO_MAX, FT_BOOL, checkpoint_activations, FK_RUN, nullptr,
              "recompute each layer's forward in backward: keep one layer's activations instead of L (same bits)"),
    KEEL_FLAG(FG_PARALLEL, "dry-run", NO_MIN, NO_MAX, FT_BOOL, dry_run, FK_RUN, nullptr,
              "print parameters, bytes/parameter and per-rank memory of the GPU layout, and its predicted step time, TFLOP/s and "
              "where the time goes, then exit (no data, no allocation)"),
    KEEL_FLAG(FG_PARALLEL, "gpu-memory-gb", NO_MIN, NO_MAX, FT_FLOAT, gpu_memory_gb, FK_RUN, nullptr,
              "--dry-run: memory per GPU (GiB) for the fits / does-not-fit verdict (exit 0 / 1); 0: --gpu-type's"),
    // (the choices are auto and llmc/step_model.h's GPU_SPECS names: test_gpu_spec compares them)
    KEEL_FLAG(FG_PARALLEL, "gpu-type", NO_MIN, NO_MAX, FT_STR, gpu_type, FK_RUN, "auto|v100-32gb|a100-40gb|a100-80gb|h100-sxm|h100-pcie|h200",
              "--dry-run: the GPU the step time is predicted for (peak FLOP/s, memory bandwidth and size, NVLink, one NIC per "
              "GPU as in its DGX); auto: the GPU train_gpt finds (its memory too), else a100-80gb"),
    KEEL_FLAG(FG_PARALLEL, "gpus-per-node", 1, 1024, FT_INT, gpus_per_node, FK_RUN, nullptr,
              "--dry-run: GPUs per node; ranks fill nodes TP first, then DP, then PP"),
    KEEL_FLAG(FG_PARALLEL, "inter-node-gbps", NO_MIN, NO_MAX, FT_FLOAT, inter_node_gbps, FK_RUN, nullptr,
              "--dry-run: network bandwidth between nodes per GPU, GB/s one way (0: --gpu-type's DGX, e.g. 25 for A100's "
              "200 Gb/s HDR)"),
    KEEL_FLAG(FG_PARALLEL, "intra-node-gbps", NO_MIN, NO_MAX, FT_FLOAT, intra_node_gbps, FK_RUN, nullptr,
              "--dry-run: GPU-to-GPU bandwidth inside a node, GB/s one way (0: --gpu-type's NVLink, or PCIe for h100-pcie)"),
    // (the choices are llmc/step_model.h's STEP_STACKS names: test_gpu_spec compares them)
    KEEL_FLAG(FG_PARALLEL, "software-stack", NO_MIN, NO_MAX, FT_STR, software_stack, FK_RUN, "keel|megatron-lm|megatron-deepspeed",
              "--dry-run: whose implementation the step time is predicted for: keel's, or a published stack's at its measured "
              "overhead over keel's model (megatron-deepspeed: DeepSpeed's pipeline engine, 2021-22) to check the model "
              "against that stack's runs"),
    KEEL_FLAG(FG_PARALLEL, "step-curves", NO_MIN, NO_MAX, FT_STR, step_curves, FK_RUN, nullptr,
              "--dry-run: a file of efficiencies measured on a GPU (`key value` lines: gemm_eff, flash_fwd_eff, flash_bwd_eff, "
              "mem_eff, nvlink_eff, ib_eff, kernel_gap_s; scripts/gpu_check.sh writes one) that replace the step model's"),
    KEEL_FLAG(FG_PARALLEL, "dry-run-json", NO_MIN, NO_MAX, FT_STR, dry_run_json, FK_RUN, nullptr,
              "--dry-run: also write the plan's figures to this JSON file (an existing non-empty file is refused unless "
              "--start-over moves it aside)"),
    KEEL_FLAG(FG_PARALLEL, "search-layout", NO_MIN, NO_MAX, FT_BOOL, search_layout, FK_RUN, nullptr,
              "--dry-run: rank every TP x PP x DP x micro-batch x checkpointing x ZeRO stage of --num-gpus GPUs that "
              "fits, by predicted step time"),
    KEEL_FLAG(FG_PARALLEL, "num-gpus", 0, 1 << 24, FT_INT, num_gpus, FK_RUN, nullptr,
              "--dry-run --search-layout: the GPUs to lay out (0: TP x PP x data-parallel size of the flags)"),
    // Megatron-DeepSpeed's launcher level (llmc/deepspeed.h; docs/megatron-deepspeed.md)
    KEEL_FLAG(FG_COMPAT, "deepspeed", NO_MIN, NO_MAX, FT_BOOL, deepspeed, FK_RUN, nullptr,
              "read --deepspeed_config: its fp16/bf16 and loss scaler, ZeRO stage, clipping, batch sizes and curriculum "
              "govern, as in Megatron-DeepSpeed"),
    KEEL_FLAG(FG_COMPAT, "deepspeed_config", NO_MIN, NO_MAX, FT_STR, deepspeed_config, FK_RUN, nullptr,
              "the DeepSpeed JSON (also --deepspeed-config); read only under --deepspeed"),
    KEEL_FLAG(FG_COMPAT, "deepspeed-activation-checkpointing", NO_MIN, NO_MAX, FT_BOOL, deepspeed_activation_checkpointing, FK_RUN, nullptr,
              "with --checkpoint-activations: the same recomputation (keel has one implementation)"),
    KEEL_FLAG(FG_COMPAT, "partition-activations", NO_MIN, NO_MAX, FT_BOOL, partition_activations, FK_RUN, nullptr,
              "accepted: keel keeps layer checkpoints whole on each tensor-parallel rank (said at start-up)"),
    KEEL_FLAG(FG_COMPAT, "abort-on-unmet-fused-kernel-constraints", NO_MIN, NO_MAX, FT_BOOL, abort_on_unmet_fused_kernel_constraints, FK_RUN,
              nullptr, "accepted: keel has no silent unfused fallback (said at start-up)"),
    KEEL_FLAG(FG_COMPAT, "no-masked-softmax-fusion", NO_MIN, NO_MAX, FT_BOOL, no_masked_softmax_fusion, FK_RUN, nullptr,
              "accepted: keel's softmax values do not depend on fusion (said at start-up)"),
    KEEL_FLAG(FG_COMPAT, "distributed-backend", NO_MIN, NO_MAX, FT_STR, distributed_backend, FK_RUN, "nccl|gloo",
              "nccl: keel's own (NCCL on GPUs, MPI in the CPU trainer); gloo is refused"),
    KEEL_FLAG(FG_COMPAT, "tokenizer-type", NO_MIN, NO_MAX, FT_STR, tokenizer_type, FK_RUN, "GPT2BPETokenizer|PretrainedFromHF",
              "GPT2BPETokenizer (--vocab-file/--merge-file) or PretrainedFromHF (--tokenizer-name-or-path; docs/tokenizers.md)"),
    KEEL_FLAG(FG_COMPAT, "tokenizer-name-or-path", NO_MIN, NO_MAX, FT_STR, tokenizer_name_or_path, FK_RUN, nullptr,
              "PretrainedFromHF's tokenizer: a directory holding tokenizer.json, or a model id in the local HF cache (never "
              "downloaded); its vocabulary sets --vocab-size"),
    KEEL_FLAG(FG_COMPAT, "num-workers", 0, NO_MAX, FT_INT, num_workers, FK_RUN, nullptr,
              "accepted: keel's loader reads in the training process, the same batches (said at start-up)"),
    KEEL_FLAG(FG_COMPAT, "valid-num-workers", 0, NO_MAX, FT_INT, valid_num_workers, FK_RUN, nullptr, "accepted, as --num-workers"),
    KEEL_FLAG(FG_COMPAT, "codecarbon-dir", NO_MIN, NO_MAX, FT_STR, codecarbon_dir, FK_RUN, nullptr,
              "accepted: keel does not measure energy, nothing is written there (said at start-up)"),
};
#undef KEEL_FLAG
#undef KEEL_FLAGN
static const int NUM_FLAGS = (int)(sizeof(FLAGS) / sizeof(FLAGS[0]));

template <typename T> static inline T* flag_field(Config* c, const Flag* f) { return (T*)((char*)c + f->offset); }
template <typename T> static inline const T* flag_field(const Config* c, const Flag* f) {
    return (const T*)((const char*)c + f->offset);
}

static inline const Flag* flag_find(const char* name) {
    for (int i = 0; i < NUM_FLAGS; i++)
        if (strcmp(FLAGS[i].name, name) == 0) return &FLAGS[i];
    return nullptr;
}

// The value of a flag as text: the start-up printout, checkpoints and usage share this form.
static inline std::string flag_value_string(const Config* c, const Flag* f) {
    char buf[64];
    switch (f->type) {
        case FT_INT: snprintf(buf, sizeof buf, "%lld", (long long)*flag_field<int64_t>(c, f)); return buf;
        case FT_FLOAT: return double_repr(*flag_field<double>(c, f));  // shortest text that reads back exactly
        case FT_BOOL: return *flag_field<bool>(c, f) ? "true" : "false";
        case FT_STR: return *flag_field<std::string>(c, f);
    }
    return "";
}

static inline bool flag_in_choices(const char* choices, const std::string& v) {
    for (const char* p = choices; *p;) {
        const char* bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (v.size() == n && strncmp(p, v.c_str(), n) == 0) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

// Python's digit grouping, as argparse's int()/float() accept it (`126_953_125`, `1_000.5`): an
// underscore stands between two digits, so `_1`, `1_`, `1__0` and `1_.5` are malformed. Returns
// the text without underscores, or false.
static inline bool flag_strip_digit_underscores(const std::string& v, std::string* out) {
    out->clear();
    for (size_t i = 0; i < v.size(); i++) {
        if (v[i] != '_') { *out += v[i]; continue; }
        bool between = i > 0 && isdigit((unsigned char)v[i - 1]) && i + 1 < v.size() && isdigit((unsigned char)v[i + 1]);
        if (!between) return false;
    }
    return true;
}

// Parses one value into the flag's field; on failure a one-line error naming the flag, exit 2.
static inline void flag_set(Config* c, const Flag* f, const std::string& v) {
    const char* s = v.c_str();
    char* end = nullptr;
    errno = 0;
    std::string digits;
    bool grouped_ok = flag_strip_digit_underscores(v, &digits);
    if (f->type == FT_INT) {
        long long x = strtoll(digits.c_str(), &end, 10);
        if (v.empty() || !grouped_ok || *end != '\0' || errno == ERANGE)
            keel_usage_error("--%s: '%s' is not an integer", f->name, s);
        *flag_field<int64_t>(c, f) = x;
    } else if (f->type == FT_FLOAT) {
        double x = strtod(digits.c_str(), &end);
        if (v.empty() || !grouped_ok || *end != '\0' || errno == ERANGE || !std::isfinite(x))
            keel_usage_error("--%s: '%s' is not a finite number", f->name, s);
        *flag_field<double>(c, f) = x;
    } else if (f->type == FT_STR) {
        if (f->choices && !flag_in_choices(f->choices, v))
            keel_usage_error("--%s: '%s' is not one of %s", f->name, s, f->choices);
        *flag_field<std::string>(c, f) = v;
    } else {
        if (v == "true" || v == "1") *flag_field<bool>(c, f) = true;
        else if (v == "false" || v == "0") *flag_field<bool>(c, f) = false;
        else keel_usage_error("--%s: '%s' is not true or false", f->name, s);
    }
}

// ---- @file: a pasted shell argument block ---------------------------------------------------------
// The file holds the arguments as a shell script would pass them, so the block of a slurm script
// (`--num-layers 70 \` lines, 'quoted paths', "double quotes", # comments) pastes in unchanged.
// Words split as the shell splits them: backslash-newline joins lines; '...' is literal; "..."
// keeps \" \\ \$ \` and drops backslash-newline; an unquoted backslash escapes the next character;
// `#` at the start of a word comments out the rest of the line. The shell's expansions are not
// performed: an unquoted or double-quoted `$` or backtick is refused naming its word (a literal
// `$SAVE_DIR` would become a directory of that name), and globs stay literal (keel's data paths
// expand their own globs). An unquoted `@name` word reads another file.
struct ArgLexer {
    const char* path;
    const std::string* text;
    size_t i = 0;
    int line = 1;
};

[[noreturn]] static inline void arglex_error(const ArgLexer* lx, const char* what, const std::string& word) {
    std::string shown = word.substr(0, word.find('\n'));  // the error stays one line
    if (shown.size() < word.size()) shown += "...";
    keel_usage_error("@%s: line %d: %s%s%s", lx->path, lx->line, what, shown.empty() ? "" : " in ", shown.c_str());
}

// Reads one quoted span after its opening quote q into *word (the quotes removed).
static inline void arglex_quoted(ArgLexer* lx, char q, std::string* word, std::string* raw) {
    const std::string& t = *lx->text;
    int start_line = lx->line;
    for (; lx->i < t.size(); lx->i++) {
        char ch = t[lx->i];
        *raw += ch;
        if (ch == '\n') lx->line++;
        if (ch == q) { lx->i++; return; }
        if (q == '"' && (ch == '$' || ch == '`'))
            arglex_error(lx, "a shell expansion ($ or `) that keel does not perform; write the value", *raw + "...");
        if (q == '"' && ch == '\\' && lx->i + 1 < t.size() && strchr("\"\\$`\n", t[lx->i + 1])) {
            char next = t[++lx->i];
            *raw += next;
            if (next == '\n') lx->line++;
            else *word += next;
            continue;
        }
        *word += ch;
    }
    lx->line = start_line;
    arglex_error(lx, q == '"' ? "unterminated double quote" : "unterminated single quote", *raw);
}

// The next word (false at the end of the text); *quoted: some of it was quoted or escaped.
static inline bool arglex_next(ArgLexer* lx, std::string* word, bool* quoted) {
    const std::string& t = *lx->text;
    word->clear();
    *quoted = false;
    std::string raw;  // the word as written, for error messages
    bool in_word = false;
    for (; lx->i < t.size(); lx->i++) {
        char ch = t[lx->i];
        if (ch == '\\' && lx->i + 1 < t.size()) {  // escape, or a line continuation
            char next = t[++lx->i];
            if (next == '\n') { lx->line++; continue; }
            *word += next; raw += ch; raw += next; in_word = *quoted = true;
            continue;
        }
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            if (in_word) return true;
            if (ch == '\n') lx->line++;
            continue;
        }
        if (ch == '#' && !in_word) {  // a comment: to the end of the line
            while (lx->i + 1 < t.size() && t[lx->i + 1] != '\n') lx->i++;
            continue;
        }
        in_word = true;
        raw += ch;
        if (ch == '\'' || ch == '"') {
            lx->i++;
            arglex_quoted(lx, ch, word, &raw);
            lx->i--;
            *quoted = true;
            continue;
        }
        if (ch == '$' || ch == '`') {
            size_t e = lx->i;
            while (e < t.size() && !isspace((unsigned char)t[e])) e++;
            arglex_error(lx, "a shell expansion ($ or `) that keel does not perform; write the value",
                         raw + t.substr(lx->i + 1, e - lx->i - 1));
        }
        *word += ch;
    }
    return in_word;
}

static const size_t FLAGS_FILE_MAX_BYTES = 1 << 20;

static inline void flags_read_file(const char* path, std::vector<std::string>* out, int depth) {
    if (depth > 8) keel_usage_error("@%s: @file nesting deeper than 8", path);
    FILE* f = fopen(path, "rb");
    if (!f) keel_usage_error("@%s: cannot open: %s", path, strerror(errno));
    fclose(f);
    std::string text = file_read_all(path, FLAGS_FILE_MAX_BYTES), word;
    if (text.size() > FLAGS_FILE_MAX_BYTES) keel_usage_error("@%s: larger than 1 MiB: an @file holds a block of arguments", path);
    ArgLexer lx;
    lx.path = path;
    lx.text = &text;
    bool quoted;
    while (arglex_next(&lx, &word, &quoted)) {
        if (word[0] == '@' && !quoted) flags_read_file(word.c_str() + 1, out, depth + 1);
        else out->push_back(word);
    }
}

// -h: every flag once, under its topic (FlagGroup), with its default; generated from FLAGS.
static inline void flags_usage(FILE* out, const char* program) {
    Config defaults;
    fprintf(out, "usage: %s [flags] [@argsfile]   (Megatron-DeepSpeed flag names)\n", program);
    for (int g = 0; g < FG_COUNT; g++) {
        fprintf(out, "\n%s:\n", FLAG_GROUP_TITLES[g]);
        for (int i = 0; i < NUM_FLAGS; i++) {
            const Flag* f = &FLAGS[i];
            if (f->group != g) continue;
            std::string def = flag_value_string(&defaults, f);
            const char* meta = f->nargs == NARGS_MANY ? " S [S ...]" : f->nargs == 3 ? " A B C"
                             : f->type == FT_INT ? " N" : f->type == FT_FLOAT ? " X" : f->type == FT_STR ? " S" : "";
            char head[80];
            snprintf(head, sizeof head, "--%s%s", f->name, meta);
            fprintf(out, "  %-36s %s", head, f->help);
            if (f->choices) fprintf(out, " {%s}", f->choices);
            if (f->type != FT_BOOL && !def.empty() && def != "nan") fprintf(out, " [%s]", def.c_str());
            fprintf(out, "\n");
        }
    }
}

// No arguments at all: a short synopsis on stderr (the run exits 2, as for any incomplete command
// line) instead of the first missing flag's error.
static inline void flags_synopsis(FILE* out, const char* program) {
    fprintf(out,
            "usage: %s [flags] [@argsfile]   (Megatron-DeepSpeed flag names)\n"
            "  required: --lr, the length (--train-iters or --train-samples) and the data (--train-data-path);\n"
            "  the rest defaults to GPT-2 124M with Megatron's settings (--num-layers 12 --hidden-size 768 ...)\n"
            "  example: %s @scripts/brown_cpu.args   (the `make run` demo; arguments from a file)\n"
            "  every flag, by topic: %s -h\n",
            program, program, program);
}

// Edit distance (insertions, deletions, substitutions) between two flag names, for "did you mean".
static inline size_t flags_edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); j++) row[j] = j;
    for (size_t i = 1; i <= a.size(); i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); j++) {
            size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
            diag = up;
        }
    }
    return row[b.size()];
}

// "--name" or "--name (did you mean --known?)": the closest flag within 2 edits (or a spelling with
// `_` for `-`, as --deepspeed_config beside --deepspeed-config).
static inline std::string flags_unknown_name(const std::string& name) {
    const Flag* best = nullptr;
    size_t best_d = 3;
    std::string dashed = name;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    for (int i = 0; i < NUM_FLAGS; i++) {
        size_t len = strlen(FLAGS[i].name);  // the distance is at least the length difference: skip the
        if (name.size() > len + 2 || len > name.size() + 2) continue;  // quadratic work on a long word
        size_t d = dashed == FLAGS[i].name ? 0 : flags_edit_distance(name, FLAGS[i].name);
        if (d < best_d) { best = &FLAGS[i]; best_d = d; }
    }
    return "--" + name + (best ? std::string(" (did you mean --") + best->name + "?)" : "");
}

struct FlagValue { const Flag* flag; std::string value; };

// Splits the expanded words into (flag, value) pairs. Every unknown flag is collected, with the
// words after it up to the next --flag taken as its values, so one error can name them all.
static inline void flags_split(const std::vector<std::string>& args, std::vector<FlagValue>* out, std::vector<std::string>* unknown) {
    for (size_t i = 0; i < args.size(); i++) {
        const std::string& a = args[i];
        if (a.size() < 3 || a[0] != '-' || a[1] != '-') {
            std::string shown = a.substr(0, std::min(a.find('\n'), (size_t)60));  // one line, however long the word
            size_t eq = a.find('=');
            if (eq != std::string::npos && eq > 0 && a.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789") == eq)
                keel_usage_error("unexpected argument '%s...': a shell assignment; an @file holds only the arguments (the inside of %s\"...\")",
                                 shown.c_str(), a.substr(0, eq + 1).c_str());
            keel_usage_error("unexpected argument '%s%s' (flags start with --)", shown.c_str(), shown.size() < a.size() ? "..." : "");
        }
        std::string name = a.substr(2), value;
        size_t eq = name.find('=');
        bool has_value = eq != std::string::npos;
        if (has_value) { value = name.substr(eq + 1); name = name.substr(0, eq); }
        if (name == "deepspeed-config") name = "deepspeed_config";  // Megatron-DeepSpeed spells it with `_`; both are accepted
        const Flag* f = flag_find(name.c_str());
        if (!f) {
            unknown->push_back(flags_unknown_name(name));
            while (!has_value && i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0) i++;
            continue;
        }
        if (f->type == FT_BOOL) {
            out->push_back({f, has_value ? value : "true"});
            continue;
        }
        if (!has_value && f->nargs != 1) {  // multi-value: the following words up to the next --flag
            int got = 0;
            while (i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0 && (f->nargs == NARGS_MANY || got < f->nargs)) {
                value += (got++ ? " " : "") + args[++i];
            }
            if (got == 0 || (f->nargs > 1 && got != f->nargs))
                keel_usage_error("--%s takes %s value(s), got %d", f->name, f->nargs > 1 ? std::to_string(f->nargs).c_str() : "one or more", got);
        } else if (!has_value) {
            if (i + 1 >= args.size()) keel_usage_error("--%s needs a value", f->name);
            value = args[++i];
        }
        out->push_back({f, value});
    }
}

#include "llmc/deepspeed.h"  // deepspeed_apply: --deepspeed_config's JSON onto the flags (needs FlagValue, flag_set)

// Parses argv (after expanding @files) into *c. Returns false if -h/--help was given.
static inline bool flags_parse(Config* c, int argc, char** argv) {
    std::vector<std::string> args;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '@') flags_read_file(argv[i] + 1, &args, 0);
        else args.push_back(argv[i]);
    }
    for (const std::string& a : args)
        if (a == "-h" || a == "--help") return false;
    std::vector<FlagValue> given;
    std::vector<std::string> unknown;
    flags_split(args, &given, &unknown);
    if (!unknown.empty()) {
        std::string names;
        for (const std::string& u : unknown) names += (names.empty() ? "" : ", ") + u;
        keel_usage_error("unknown flag%s %s", unknown.size() > 1 ? "s" : "", names.c_str());
    }
    for (const FlagValue& g : given) flag_set(c, g.flag, g.value);
    deepspeed_apply(c, &given);
    return true;
}

// The instability knobs: ranges and combinations (the schedule knobs' own arithmetic is checked
// where they are built, in llmc/schedule.h).
static inline void config_validate_knobs(Config* c) {
    if (c->use_bnb_optimizer) {  // BigScience's VocabParallelEmbedding under bnb: LayerNorm, xavier init, 32-bit state
        if (c->optimizer != "adam" && c->optimizer != "adam8bit")
            keel_usage_error("--use-bnb-optimizer replaces Adam by bitsandbytes' Adam8bit; it contradicts --optimizer %s", c->optimizer.c_str());
        c->optimizer = "adam8bit";
        c->stable_embedding = true;
    }
    struct { const char* name; double v; } probs[] = {
        {"hidden-dropout", c->hidden_dropout}, {"attention-dropout", c->attention_dropout}, {"embed-dropout", c->embed_dropout}};
    for (auto& p : probs)
        if (!std::isnan(p.v) && (p.v < 0 || p.v >= 1)) keel_usage_error("--%s must be in [0, 1) (got %g)", p.name, p.v);
    if (c->position_embedding_type == "absolute") c->position_embedding_type = "learned";  // Megatron's name
    if (c->position_embedding_type == "alibi" && c->position_embedding_init != "normal")
        keel_usage_error("--position-embedding-init applies to learned positions, not --position-embedding-type alibi");
    if (c->skip_update_grad_norm_above < 0 || c->skip_update_loss_zscore < 0 || c->skip_update_norm_zscore < 0)
        keel_usage_error("--skip-update-grad-norm-above/--skip-update-loss-zscore/--skip-update-norm-zscore must be >= 0 (0: off)");
    if (c->gradient_predivide_factor <= 0) keel_usage_error("--gradient-predivide-factor must be > 0");
    if (!(c->grad_bucket_mb >= 0) || c->grad_bucket_mb > 1e9) keel_usage_error("--grad-bucket-mb must be in [0, 1e9] MiB (0: one reduction after the backward)");
    if (c->spike_zscore <= 0) keel_usage_error("--spike-zscore must be > 0 (got %g)", c->spike_zscore);
    if (c->spike_lr_factor <= 0 || c->spike_lr_factor > 1)
        keel_usage_error("--spike-lr-factor must be in (0, 1] (got %g)", c->spike_lr_factor);
    if (c->spike_policy == "rollback") {
        if (c->spike_snapshot_interval == 0) c->spike_snapshot_interval = c->save_interval > 0 ? c->save_interval : 100;
        if (c->save_interval > 0 && c->save_interval % c->spike_snapshot_interval != 0)
            keel_usage_error("--save-interval %lld is not a multiple of --spike-snapshot-interval %lld: every save must be a "
                             "snapshot, so a resumed run rolls back where the uninterrupted one would",
                             (long long)c->save_interval, (long long)c->spike_snapshot_interval);
    } else {
        const Config d;  // the defaults: a spike flag that was changed must be one that acts
        const char* f = c->spike_lr_factor != d.spike_lr_factor ? "spike-lr-factor"
                      : c->spike_lr_iters != d.spike_lr_iters ? "spike-lr-iters"
                      : c->spike_snapshot_interval != d.spike_snapshot_interval ? "spike-snapshot-interval"
                      : c->spike_max_rollbacks != d.spike_max_rollbacks ? "spike-max-rollbacks" : nullptr;
        if (f) keel_usage_error("--%s applies to --spike-policy rollback (this run: --spike-policy %s)", f, c->spike_policy.c_str());
        f = c->spike_policy != "off" ? nullptr : c->spike_zscore != d.spike_zscore ? "spike-zscore"
          : c->spike_window != d.spike_window ? "spike-window" : c->spike_metric != d.spike_metric ? "spike-metric" : nullptr;
        if (f) keel_usage_error("--%s has no effect without --spike-policy skip|rollback", f);
    }
    if ((int)c->fp16 + (int)c->bf16 + (int)c->fp32 > 1) keel_usage_error("--fp16, --bf16 and --fp32 are mutually exclusive");
    if (c->loss_scale < 0) keel_usage_error("--loss-scale must be >= 0 (0: dynamic under --fp16)");
    if (c->initial_loss_scale <= 0 || c->min_loss_scale <= 0 || c->min_loss_scale > c->initial_loss_scale)
        keel_usage_error("need 0 < --min-loss-scale (%g) <= --initial-loss-scale (%g)", c->min_loss_scale, c->initial_loss_scale);
    const char* arch = c->stable_embedding ? "--stable-embedding" : c->embed_layernorm ? "--embed-layernorm"
                     : c->position_embedding_type == "alibi" ? "--position-embedding-type alibi"
                     : c->normformer ? "--normformer" : c->activation == "relu" ? "--activation relu" : nullptr;
    if (!c->export_llmc.empty() && arch)
        keel_usage_error("--export-llmc: llm.c's GPT-2 cannot compute a model trained with %s", arch);
    // llm.c's header has no MLP width field: its files are 4C wide by definition
    if ((!c->export_llmc.empty() || !c->load_llmc.empty()) && c->ffn_hidden_size != 0 && c->ffn_hidden_size != 4 * c->hidden_size)
        keel_usage_error("--%s: llm.c's model file has no MLP width (it is 4 x hidden-size), so --ffn-hidden-size %lld cannot be stored in it",
                         c->export_llmc.empty() ? "load-llmc" : "export-llmc", (long long)c->ffn_hidden_size);
    if (c->optimizer != "adam8bit") {
        const char* f = c->adam8bit_block_size != 256 ? "adam8bit-block-size" : c->adam8bit_min_size != 4096 ? "adam8bit-min-size"
                      : c->adam8bit_percentile_clipping != 100 ? "adam8bit-percentile-clipping" : nullptr;
        if (f) keel_usage_error("--%s applies to --optimizer adam8bit (this run uses --optimizer %s)", f, c->optimizer.c_str());
    }
    if (c->adam8bit_block_size & (c->adam8bit_block_size - 1))
        keel_usage_error("--adam8bit-block-size must be a power of two (got %lld)", (long long)c->adam8bit_block_size);
    if (c->finetune && c->load.empty() && c->load_hf.empty() && c->load_llmc.empty())
        keel_usage_error("--finetune needs --load DIR, --load-hf DIR or --load-llmc FILE (the weights to start from)");
    if (c->export_dtype != "fp32" && c->export_hf.empty()) keel_usage_error("--export-dtype applies to --export-hf");
    if ((c->no_load_optim || c->no_load_rng) && c->load.empty())
        keel_usage_error("--no-load-optim/--no-load-rng need --load DIR");
}

// The ranks of one pipeline stage that train data-parallel: the launched world over TP x PP (exit 2
// if they do not divide it).
static inline int config_dp_size(const Config* c, int world) {
    int64_t tp = c->tensor_model_parallel_size, pp = c->pipeline_model_parallel_size;
    if (tp < 1 || pp < 1 || world % (tp * pp) != 0)
        keel_usage_error("%d launched ranks are not divisible by --tensor-model-parallel-size %lld x --pipeline-model-parallel-size %lld",
                         world, (long long)tp, (long long)pp);
    return (int)(world / (tp * pp));
}

// The padded vocabulary at tensor-parallel size tp (Megatron's _vocab_size_with_padding): exactly
// --pad-vocab-size-to when set, else V rounded up to a multiple of make-vocab-size-divisible-by x tp.
// tp = 1 gives the canonical padding checkpoints store (llmc/model.h gpt_vocab_rows).
static inline int64_t config_padded_vocab(const Config* c, int64_t tp) {
    if (c->pad_vocab_size_to > 0) return c->pad_vocab_size_to;
    int64_t m = c->make_vocab_size_divisible_by * tp;
    return (c->vocab_size + m - 1) / m * m;
}

// Bounds from the table: counts that must be positive or non-negative, shapes that must fit an int.
static inline void config_validate_bounds(const Config* c) {
    for (int i = 0; i < NUM_FLAGS; i++) {
        const Flag* f = &FLAGS[i];
        if (f->type != FT_INT) continue;
        int64_t v = *flag_field<int64_t>(c, f);
        if (f->min != NO_MIN && v < f->min) keel_usage_error("--%s must be >= %lld (got %lld)", f->name, (long long)f->min, (long long)v);
        if (f->max != NO_MAX && v > f->max) keel_usage_error("--%s must be <= %lld (got %lld)", f->name, (long long)f->max, (long long)v);
    }
}

// ---- sizes: every product keel forms from the flags fits its type --------------------------------
// Checked before anything is allocated: a flag's extreme value would otherwise wrap a count into a
// small, wrong one (an allocation of 0 activation slots, a negative padded vocabulary, a byte count
// printed wrapped, an LR decay span that overflows to <= 0).
//
// KEEL_MAX_ELEMENTS: the most elements of one buffer, and the most parameters: 2^58, so the bytes of
// such a count in fp32 and a sum of several (weights, gradients, Adam's two moments, checkpoint
// copies: at most 32 bytes per element) still fit int64. Far beyond any memory: a model this refuses
// could not have been allocated, and one it admits that does not fit fails as out of memory with
// its true byte count.
// KEEL_MAX_ACCUMULATION: micro-batches per iteration and data-parallel rank. Each keeps its loss until
// the iteration's end (the loss log, the host vectors), and each is a forward and backward before
// the first log line: --global-batch-size 2^31 at micro-batch 2 would be 2^30 of them, hours of
// silence and 8 GB of losses. 65536 is over 100x any published recipe's count.
static const int64_t KEEL_MAX_ELEMENTS = (int64_t)1 << 58;
static const int64_t KEEL_MAX_ACCUMULATION = 65536;

// Checked int64 arithmetic for the size checks: a result that overflows saturates at INT64_MAX,
// which every limit refuses (all operands are >= 0).
static inline int64_t size_mul(int64_t a, int64_t b) { int64_t r; return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r; }
static inline int64_t size_add(int64_t a, int64_t b) { int64_t r; return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r; }

struct SizeFlag { const char* name; int64_t value; };  // a flag a size is formed from, and its value

// Refuses (exit 2) a size n above `limit` (limit_text says it in words), or one that overflowed, with
// one line naming the largest of the flags it is formed from (the extreme one) and the others beside.
static inline void config_check_size(int64_t n, int64_t limit, const char* limit_text, const char* what,
                                     std::initializer_list<SizeFlag> flags) {
    if (n <= limit && n != INT64_MAX) return;
    const SizeFlag* big = flags.begin();
    for (const SizeFlag& f : flags) big = f.value > big->value ? &f : big;
    std::string with;
    for (const SizeFlag& f : flags)
        if (&f != big) with += std::string(with.empty() ? " (with " : ", ") + "--" + f.name + " " + std::to_string(f.value);
    if (!with.empty()) with += ")";
    if (n == INT64_MAX) keel_usage_error("--%s %lld: %s overflows int64%s", big->name, (long long)big->value, what, with.c_str());
    keel_usage_error("--%s %lld: %s is %lld, more than %s%s", big->name, (long long)big->value, what, (long long)n, limit_text, with.c_str());
}

// The products of the model shape, the batch and the run length (the trainer and --dry-run; dp_size:
// the data-parallel ranks; global_batch_size already defaulted).
static inline void config_validate_sizes(const Config* c, int dp_size) {
    int64_t L = c->num_layers, C = c->hidden_size, NH = c->num_attention_heads, T = c->seq_length, B = c->micro_batch_size;
    int64_t V = c->vocab_size, mult = c->make_vocab_size_divisible_by, maxT = c->max_position_embeddings, gbs = c->global_batch_size;
    const char* max_elements = "2^58 (llmc/flags.h KEEL_MAX_ELEMENTS)";
    // the padded vocabulary is an int, and so is V + multiple - 1 on the way to it (llmc/model.h gpt_padded_vocab)
    SizeFlag vocab = mult > V ? SizeFlag{"make-vocab-size-divisible-by", mult} : SizeFlag{"vocab-size", V};
    config_check_size(size_add(V, size_mul(mult, c->tensor_model_parallel_size) - 1), INT32_MAX, "2^31-1 (an int)",
                      "V + multiple - 1 (rounding up to the padded vocabulary, multiple = make-vocab-size-divisible-by x TP)",
                      {{"vocab-size", V}, {"make-vocab-size-divisible-by", mult}, {"tensor-model-parallel-size", c->tensor_model_parallel_size}});
    int64_t Vp = config_padded_vocab(c, c->tensor_model_parallel_size);
    if (c->pad_vocab_size_to > 0 && c->pad_vocab_size_to < V)
        keel_usage_error("--pad-vocab-size-to %lld is smaller than --vocab-size %lld: padding only adds rows", (long long)c->pad_vocab_size_to,
                         (long long)V);
    if (c->pad_vocab_size_to > 0 && c->pad_vocab_size_to % mult != 0)
        keel_usage_error("--pad-vocab-size-to %lld is not divisible by --make-vocab-size-divisible-by %lld (Megatron-DeepSpeed's rule)",
                         (long long)c->pad_vocab_size_to, (long long)mult);
    // the parameter count, bounded from above: per layer 4C^2 + 2CF + 9C + F (GPT-2, F the MLP width)
    // + NH + 2C + 2F (NormFormer's tensors), plus the embeddings (Vp + maxT) x C and at most 4C of
    // final and embedding LayerNorms
    int64_t F = c->ffn_hidden_size > 0 ? c->ffn_hidden_size : size_mul(4, C);
    int64_t per_layer = size_add(size_add(size_mul(C, size_add(size_mul(4, C), 11)), size_mul(size_add(size_mul(2, C), 3), F)), NH);
    int64_t params = size_add(size_mul(L, per_layer), size_mul(size_add(size_add(Vp, maxT), 4), C));
    config_check_size(params, KEEL_MAX_ELEMENTS, max_elements, "the parameter count",
                      {{"num-layers", L}, {"hidden-size", C}, {"max-position-embeddings", maxT}, vocab});
    // the MLP width F is an int in the ops' signatures (implied by the count above; said on its own)
    if (c->ffn_hidden_size == 0) config_check_size(F, INT32_MAX, "2^31-1 (an int)", "the MLP width 4 x C", {{"hidden-size", C}});
    // the activations of one micro-batch: positions as an int (the ops' N), the widest per-layer
    // buffers (the MLP's L x B x T x F, the attention probabilities L x B x NH x T x T) and the logits
    if (B * T > INT32_MAX / 4) keel_usage_error("--micro-batch-size x --seq-length = %lld positions is too large", (long long)(B * T));
    config_check_size(size_mul(size_mul(L, B * T), F), KEEL_MAX_ELEMENTS, max_elements, "the MLP activations' element count L x B x T x F",
                      {{"num-layers", L}, {"micro-batch-size", B}, {"seq-length", T}, {c->ffn_hidden_size ? "ffn-hidden-size" : "hidden-size", c->ffn_hidden_size ? F : C}});
    config_check_size(size_mul(size_mul(size_mul(L, B), NH), size_mul(T, T)), KEEL_MAX_ELEMENTS, max_elements,
                      "the attention probabilities' element count L x B x NH x T x T",
                      {{"num-layers", L}, {"micro-batch-size", B}, {"num-attention-heads", NH}, {"seq-length", T}});
    config_check_size(size_mul(B * T, Vp), KEEL_MAX_ELEMENTS, max_elements, "the logits' element count B x T x padded vocabulary",
                      {{"micro-batch-size", B}, {"seq-length", T}, vocab});
    // the micro-batches of one iteration (an int everywhere: the 1F1B schedule, the loss log)
    int64_t accum = gbs / (B * dp_size);
    if (accum > KEEL_MAX_ACCUMULATION)
        keel_flag_error("raise --micro-batch-size or lower --global-batch-size",
                      "--global-batch-size %lld: %lld micro-batches of %lld samples per iteration on each of %d data-parallel rank(s), more "
                      "than %lld (each keeps its loss until the iteration ends)",
                      (long long)gbs, (long long)accum, (long long)B, dp_size, (long long)KEEL_MAX_ACCUMULATION);
    // the run's length: samples and tokens are int64 counters (consumed_samples, consumed_tokens, the
    // LR schedule's spans in samples)
    const char* i64 = "int64";
    config_check_size(size_mul(size_mul(c->train_iters, gbs), T), INT64_MAX - 1, i64, "the run's token count (iterations x global batch x T)",
                      {{"train-iters", c->train_iters}, {"global-batch-size", gbs}, {"seq-length", T}});
    config_check_size(size_mul(c->train_samples, T), INT64_MAX - 1, i64, "the run's token count (samples x T)",
                      {{"train-samples", c->train_samples}, {"seq-length", T}});
    config_check_size(size_mul(c->lr_decay_iters, gbs), INT64_MAX - 1, i64, "the LR decay span in samples",
                      {{"lr-decay-iters", c->lr_decay_iters}, {"global-batch-size", gbs}});
    config_check_size(size_mul(c->lr_warmup_iters, gbs), INT64_MAX - 1, i64, "the LR warmup in samples",
                      {{"lr-warmup-iters", c->lr_warmup_iters}, {"global-batch-size", gbs}});
    // an evaluation's batches (when validation runs): their losses are one int-counted exchange
    if (c->eval_interval > 0)
        config_check_size(size_mul(c->eval_iters, gbs / B), INT32_MAX, "2^31-1 (an int)", "the count of one evaluation's micro-batches",
                          {{"eval-iters", c->eval_iters}, {"global-batch-size", gbs}});
}

// Whether the run has validation data: llm.c shards or a prefix (--valid-data-path), a weighted split
// group, or --data-path's --split.
static inline bool config_has_valid_data(const Config* c) {
    return !c->valid_data_path.empty() || !c->valid_weighted_split_paths.empty() || !c->valid_weighted_split_paths_path.empty() ||
           !c->data_path.empty();
}

// The data flags: exactly one source of training data (llm.c shards or a Megatron prefix by
// --train-data-path, --data-path, or a weighted split group), at most one of validation data. (The
// vocabulary's bound is the data's: llm.c shards refuse --vocab-size > 65536 at open, naming the file.)
static inline void config_validate_data(const Config* c) {
    if (c->data_impl == "lazy" || c->data_impl == "cached")
        keel_usage_error("--data-impl %s: keel reads Megatron's mmap format (MMIDIDX) only; convert with preprocess_data.py --dataset-impl mmap",
                         c->data_impl.c_str());
    bool group = !c->train_weighted_split_paths.empty() || !c->train_weighted_split_paths_path.empty();
    int train = !c->train_data_path.empty() + !c->data_path.empty() + group;
    if (!c->train_weighted_split_paths.empty() && !c->train_weighted_split_paths_path.empty())
        keel_usage_error("give one of --train-weighted-split-paths and --train-weighted-split-paths-path");
    if (!c->valid_weighted_split_paths.empty() && !c->valid_weighted_split_paths_path.empty())
        keel_usage_error("give one of --valid-weighted-split-paths and --valid-weighted-split-paths-path");
    if (train == 0) keel_usage_error("--train-data-path is required (or Megatron's --data-path, or --train-weighted-split-paths)");
    if (train > 1)
        keel_usage_error("give one source of training data: --train-data-path, --data-path or --train-weighted-split-paths(-path)");
    bool valid_group = !c->valid_weighted_split_paths.empty() || !c->valid_weighted_split_paths_path.empty();
    if (!c->data_path.empty() && (!c->valid_data_path.empty() || valid_group))
        keel_usage_error("--data-path takes its validation data from --split: drop --valid-data-path/--valid-weighted-split-paths");
    if (!c->valid_data_path.empty() && valid_group)
        keel_usage_error("give one of --valid-data-path and --valid-weighted-split-paths(-path)");
    // Megatron evaluates only when there is validation data, so its default interval asks for none;
    // an interval other than the default is a request, refused without data
    if (c->eval_interval > 0 && c->eval_interval != Config().eval_interval && !config_has_valid_data(c))
        keel_usage_error("--eval-interval needs --valid-data-path (or --data-path's --split, or --valid-weighted-split-paths)");
    if (c->eval_full_at_end && !config_has_valid_data(c))
        keel_usage_error("--eval-full-at-end evaluates the validation set: give --valid-data-path (or --data-path's --split, or --valid-weighted-split-paths)");
}

// The run-control flags of Megatron-DeepSpeed scripts (--eval-only, --kill-switch-path): what they
// need, and --eval-only's value read as Megatron's argparse type=bool reads it.
static inline void config_validate_run_control(Config* c) {
    if (!(c->save_interval_minutes >= 0))
        keel_usage_error("--save-interval-minutes %s: must be >= 0 (0: off)", double_repr(c->save_interval_minutes).c_str());
    if (c->save_interval_minutes > 0 && c->save.empty()) keel_usage_error("--save-interval-minutes needs --save DIR");
    if (!(c->distributed_timeout_minutes >= 0))
        keel_usage_error("--distributed-timeout-minutes %s: must be >= 0 (0: no bound)", double_repr(c->distributed_timeout_minutes).c_str());
    const std::string& v = c->eval_only;
    if (v == "false" || v == "False" || v == "0" || v == "no")
        keel_usage_error("--eval-only %s: Megatron-DeepSpeed reads any non-empty value as true (type=bool), so this would "
                         "evaluate only there; leave the flag out to train, or give --eval-only true", v.c_str());
    if (!v.empty() && c->load.empty()) keel_usage_error("--eval-only evaluates a checkpoint: give --load DIR");
    if (!v.empty() && !config_has_valid_data(c))
        keel_usage_error("--eval-only evaluates on the validation data: give --valid-data-path (or --data-path's --split, or --valid-weighted-split-paths)");
    if (c->kill_switch_path == "") return;
    if (c->kill_switch_path.back() == '/') keel_usage_error("--kill-switch-path %s names a directory; give a file path", c->kill_switch_path.c_str());
}

// Rejects contradictory or impossible combinations (exit 2, one line naming the flags). world: the
// launched ranks (TP x PP x DP).
static inline void config_validate(Config* c, int world) {
    config_validate_bounds(c);  // first: TP x PP below must not overflow
    int dp_size = config_dp_size(c, world);
    if (c->max_position_embeddings == 0) c->max_position_embeddings = c->seq_length;
    if (c->global_batch_size == 0) c->global_batch_size = c->micro_batch_size * dp_size;
    if (c->hidden_size % c->num_attention_heads != 0)
        keel_usage_error("--hidden-size %lld is not divisible by --num-attention-heads %lld", (long long)c->hidden_size,
                         (long long)c->num_attention_heads);
    if (c->seq_length > c->max_position_embeddings)
        keel_usage_error("--seq-length %lld exceeds --max-position-embeddings %lld", (long long)c->seq_length,
                         (long long)c->max_position_embeddings);
    if (c->global_batch_size % (c->micro_batch_size * dp_size) != 0)
        keel_usage_error("--global-batch-size %lld is not divisible by --micro-batch-size %lld x data-parallel size %d",
                         (long long)c->global_batch_size, (long long)c->micro_batch_size, dp_size);
    config_validate_sizes(c, dp_size);
    if ((c->train_iters > 0) == (c->train_samples > 0))
        keel_usage_error("give exactly one of --train-iters and --train-samples");
    if (std::isnan(c->lr)) keel_usage_error("--lr is required");
    if (c->lr < 0 || c->min_lr < 0 || c->min_lr > c->lr)
        keel_usage_error("need 0 <= --min-lr (%g) <= --lr (%g)", c->min_lr, c->lr);
    bool fraction = !std::isnan(c->lr_warmup_fraction);
    if (fraction && (c->lr_warmup_fraction < 0 || c->lr_warmup_fraction >= 1))
        keel_usage_error("--lr-warmup-fraction must be in [0, 1) (got %g)", c->lr_warmup_fraction);
    if (fraction && (c->lr_warmup_iters > 0 || c->lr_warmup_samples > 0))
        keel_usage_error("--lr-warmup-fraction cannot be combined with --lr-warmup-iters or --lr-warmup-samples");
    if (c->train_iters > 0 && (c->lr_decay_samples > 0 || c->lr_warmup_samples > 0))
        keel_usage_error("an iteration-based run (--train-iters) takes --lr-decay-iters/--lr-warmup-iters, not the -samples forms");
    if (c->train_samples > 0 && (c->lr_decay_iters > 0 || c->lr_warmup_iters > 0))
        keel_usage_error("a sample-based run (--train-samples) takes --lr-decay-samples/--lr-warmup-samples, not the -iters forms");
    if (c->override_lr_scheduler && c->use_checkpoint_lr_scheduler)
        keel_usage_error("both override and use-checkpoint are set: give one of --override-lr-scheduler and --use-checkpoint-lr-scheduler");
    if (c->adam_beta1 < 0 || c->adam_beta1 >= 1 || c->adam_beta2 < 0 || c->adam_beta2 >= 1)
        keel_usage_error("--adam-beta1/--adam-beta2 must be in [0, 1)");
    if (c->adam_eps <= 0) keel_usage_error("--adam-eps must be > 0");
    if (c->weight_decay < 0) keel_usage_error("--weight-decay must be >= 0");
    if (c->clip_grad < 0) keel_usage_error("--clip-grad must be >= 0 (0 turns clipping off)");
    if (c->init_method_std <= 0) keel_usage_error("--init-method-std must be > 0");
    config_validate_knobs(c);
    int64_t TP = c->tensor_model_parallel_size;  // its shape rules: config_validate_tp (llmc/model.h)
    if ((c->check_replicated_params_interval > 0 || c->sync_tp_duplicated_parameters) && TP == 1)
        printf("WARNING: --check-replicated-params-interval/--sync-tp-duplicated-parameters do nothing without tensor parallelism\n");
    int64_t P = c->pipeline_model_parallel_size;
    if (!c->pp_partition_method.empty()) {  // the method and its partition, checked here (the trainer applies it in llmc/model.h)
        if (P <= c->num_layers) pp_layer_counts(c->pp_partition_method, (int)c->num_layers, (int)P, c->fp16 || c->bf16);
        if (P == 1) printf("WARNING: --pp-partition-method does nothing without pipeline parallelism\n");
    }
    if (P > c->num_layers)
        keel_usage_error("--pipeline-model-parallel-size %lld exceeds --num-layers %lld: every stage needs a layer", (long long)P,
                         (long long)c->num_layers);
    if (P > 1) {
        // 1F1B keeps P micro-batches in flight; with fewer the pipeline never fills (stages idle most of the step)
        int64_t gbs_min = c->global_batch_size;
        if (!c->rampup_batch_size.empty()) gbs_min = std::min(gbs_min, (int64_t)std::atoll(c->rampup_batch_size.c_str()));
        int64_t M = gbs_min / (c->micro_batch_size * dp_size);
        if (M < P)
            keel_usage_error("%lld micro-batches per data-parallel rank (global batch %lld / (micro-batch %lld x %d data-parallel ranks)) "
                             "cannot fill %lld pipeline stages: raise --global-batch-size or lower --micro-batch-size",
                             (long long)M, (long long)gbs_min, (long long)c->micro_batch_size, dp_size, (long long)P);
    }
    if (c->data_parallel_size != 0 && c->data_parallel_size != dp_size)
        keel_usage_error("--data-parallel-size %lld: training uses the launched ranks (%d); the flag is for --dry-run",
                         (long long)c->data_parallel_size, dp_size);
    if (c->search_layout || !c->dry_run_json.empty() || c->num_gpus > 0 || !c->step_curves.empty())
        keel_usage_error("--search-layout, --dry-run-json, --num-gpus and --step-curves plan a run: give them with --dry-run");
    config_validate_data(c);
    int64_t gas = c->global_batch_size / (c->micro_batch_size * dp_size);
    // under a batch ramp-up Megatron-DeepSpeed resets DeepSpeed's batch as it grows (set_train_batch_size),
    // so the config's accumulation steps are replaced, not checked (BigScience's 13B config holds such a value)
    if (c->deepspeed_gradient_accumulation_steps > 0 && !c->rampup_batch_size.empty())
        printf("note: --deepspeed_config: gradient_accumulation_steps %lld is replaced by the ramp-up's batch (as in Megatron-DeepSpeed)\n",
               (long long)c->deepspeed_gradient_accumulation_steps);
    else if (c->deepspeed_gradient_accumulation_steps > 0 && c->deepspeed_gradient_accumulation_steps != gas)
        keel_usage_error("--deepspeed_config %s: gradient_accumulation_steps %lld contradicts --global-batch-size %lld / (--micro-batch-size "
                         "%lld x data-parallel size %d) = %lld", c->deepspeed_config.c_str(), (long long)c->deepspeed_gradient_accumulation_steps,
                         (long long)c->global_batch_size, (long long)c->micro_batch_size, dp_size, (long long)gas);
    if (c->save_interval > 0 && c->save.empty()) keel_usage_error("--save-interval needs --save DIR");
    config_validate_run_control(c);
}

// A value for the start-up printout: what the run uses, where the flag's own value would mislead.
// A float flag left unset (NaN: Megatron's None) says so, with the value that applies instead; the
// precision flags name the arithmetic the run resolved to (no flag given: fp32 on the CPU).
static inline std::string flags_effective_string(const Config* c, const Flag* f) {
    if (f->type == FT_FLOAT && std::isnan(*flag_field<double>(c, f))) {
        if (strcmp(f->name, "embed-dropout") == 0) return "unset (= --hidden-dropout: " + double_repr(c->hidden_dropout) + ")";
        if (strcmp(f->name, "lr-warmup-fraction") == 0) return "unset (warmup from --lr-warmup-iters/--lr-warmup-samples)";
        return "unset";
    }
    if (strcmp(f->name, "fp32") == 0 && !c->fp16 && !c->bf16 && !c->fp32) return "true (no --fp16/--bf16: fp32 arithmetic)";
    // model sizes whose 0 means "derived": say what they derive to, since a 0-wide MLP would be nonsense
    if (strcmp(f->name, "ffn-hidden-size") == 0 && c->ffn_hidden_size == 0)
        return "0 (= 4 x --hidden-size: " + std::to_string(4 * c->hidden_size) + ")";
    return flag_value_string(c, f);
}

// Rank 0's start-up printout: every effective value, Megatron style.
static inline void flags_print(const Config* c) {
    printf("------------------------ arguments ------------------------\n");
    for (int i = 0; i < NUM_FLAGS; i++) {
        std::string name = FLAGS[i].name;
        std::string dots(name.size() < 40 ? 40 - name.size() : 1, '.');
        printf("  %s %s %s\n", name.c_str(), dots.c_str(), flags_effective_string(c, &FLAGS[i]).c_str());
    }
    printf("-------------------- end of arguments ---------------------\n");
}
