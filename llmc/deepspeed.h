// deepspeed.h — `--deepspeed --deepspeed_config FILE`: a Megatron-DeepSpeed run's DeepSpeed JSON,
// read onto keel's flags with the meaning it had there; and the start-up notes for the
// Megatron-DeepSpeed flags keel accepts without a computation of its own.
//
// Contract (deepspeed_apply, called by flags_parse once the flags are set; included from flags.h,
// whose Config, FlagValue and flag_set it uses):
//   - without --deepspeed the config file is not read (Megatron-DeepSpeed reads it only under
//     --deepspeed); a start-up line says so. --deepspeed without a config file is refused.
//   - keys mapped (DeepSpeed name → keel flag):
//       fp16.enabled → --fp16; bf16.enabled → --bf16; neither → --fp32 (DeepSpeed's full precision); fp16.loss_scale (0: dynamic) → --loss-scale;
//       fp16.initial_scale_power p → --initial-loss-scale 2^p (DeepSpeed's default p: 16);
//       fp16.loss_scale_window, fp16.hysteresis, fp16.min_loss_scale → the flags of those names;
//       zero_optimization.stage 0|1 → --zero-stage;
//       gradient_clipping (absent: 0, no clipping) → --clip-grad;
//       train_micro_batch_size_per_gpu → --micro-batch-size; train_batch_size → --global-batch-size;
//       gradient_accumulation_steps: checked against global / (micro x data-parallel size);
//       curriculum_learning {enabled, curriculum_type "seqlen", min_difficulty, max_difficulty,
//         schedule_type, schedule_config {total_curriculum_step, difficulty_step, root_degree,
//         difficulty[], max_step[]}} → --curriculum-learning and the --cl-* flags.
//   - Under --deepspeed the config's fp16 section governs loss scaling and its gradient_clipping
//     governs clipping, as in Megatron-DeepSpeed (whose optimizer is then DeepSpeed's, which never
//     reads --loss-scale, --initial-loss-scale, ... or --clip-grad): such a flag given on the command
//     line is ignored and a start-up line names it.
//   - A batch size or precision that the flags give differently is one error line naming both.
//   - Refused with a reason: zero_optimization.stage 2/3, optimizer and scheduler sections (the flags
//     define keel's optimizer and schedule), fp16.consecutive_hysteresis / auto_cast true, a
//     curriculum_type other than seqlen.
//   - --tokenizer-type PretrainedFromHF: the tokenizer (--tokenizer-name-or-path) is read at parse time
//     and its vocabulary becomes --vocab-size (megatron_apply_tokenizer); a start-up note names it.
//   - Every other key is named in ONE warning line (keel does not use it); a malformed file or a
//     value of the wrong type is one error line with the key's path.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "llmc/common.h"
#include "llmc/hf_tokenizer.h"
#include "llmc/json.h"

struct DsReader {
    const char* path;                 // the config file, for messages
    std::vector<std::string> used;    // key paths keel read ("fp16.enabled")
    std::vector<std::string> notes;   // start-up lines
};

[[noreturn]] static inline void ds_error(const DsReader* r, const std::string& key, const char* what) {
    keel_usage_error("--deepspeed_config %s: %s %s", r->path, key.c_str(), what);
}

// The member `key` of object `obj` (path: obj's own key path, "" at the top), marked used; null if absent.
static inline const Json* ds_member(DsReader* r, const Json* obj, const std::string& path, const char* key, JsonType want) {
    const Json* v = json_get(obj, key);
    std::string full = path.empty() ? key : path + "." + key;
    if (!v) return nullptr;
    r->used.push_back(full);
    if (v->type != want) {
        static const char* const names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
        ds_error(r, full, (std::string("must be ") + names[want] + ", not " + names[v->type]).c_str());
    }
    return v;
}

static inline bool ds_bool(DsReader* r, const Json* obj, const std::string& path, const char* key, bool fallback) {
    const Json* v = ds_member(r, obj, path, key, JSON_BOOL);
    return v ? v->boolean : fallback;
}

static inline double ds_number(DsReader* r, const Json* obj, const std::string& path, const char* key, double fallback) {
    const Json* v = ds_member(r, obj, path, key, JSON_NUMBER);
    return v ? v->num : fallback;
}

// An integer member (-1: absent); fractions and negative numbers are refused.
static inline int64_t ds_int(DsReader* r, const Json* obj, const std::string& path, const char* key) {
    const Json* v = ds_member(r, obj, path, key, JSON_NUMBER);
    int64_t x;
    if (!v) return -1;
    if (!json_as_i64(v, &x) || x < 0) ds_error(r, path.empty() ? key : path + "." + key, "must be a non-negative integer");
    return x;
}

// An array of non-negative integers as keel's space-separated list form.
static inline std::string ds_int_list(DsReader* r, const Json* obj, const std::string& path, const char* key) {
    const Json* v = ds_member(r, obj, path, key, JSON_ARRAY);
    std::string out;
    int64_t x;
    if (!v) return out;
    for (const Json& item : v->items) {
        if (!json_as_i64(&item, &x) || x < 0) ds_error(r, path + "." + key, "must hold non-negative integers");
        out += (out.empty() ? "" : " ") + std::to_string(x);
    }
    return out;
}

// The command-line value of flag `name`, or null if it was not given.
static inline const std::string* ds_flag_given(const std::vector<FlagValue>* given, const char* name) {
    const std::string* v = nullptr;
    for (const FlagValue& g : *given)
        if (strcmp(g.flag->name, name) == 0) v = &g.value;  // the last one wins, as in the parser
    return v;
}

// A value both the config and a flag can give: taken from the config unless the flag says otherwise.
static inline void ds_agree_int(DsReader* r, Config* c, const std::vector<FlagValue>* given, const char* key, int64_t ds_value,
                                const char* flag, int64_t* field) {
    if (ds_value < 0) return;
    if (ds_flag_given(given, flag) && *field != ds_value)
        keel_usage_error("--deepspeed_config %s: %s %lld contradicts --%s %lld", r->path, key, (long long)ds_value, flag, (long long)*field);
    *field = ds_value;
    (void)c;
}

// A flag that DeepSpeed's engine replaces: given on the command line, it is ignored, and said so.
static inline void ds_override(DsReader* r, const std::vector<FlagValue>* given, const char* flag, const char* governs) {
    if (const std::string* v = ds_flag_given(given, flag))
        r->notes.push_back(std::string("note: --deepspeed: ignoring --") + flag + " " + *v + ": the DeepSpeed config's " + governs +
                           " governs, as in Megatron-DeepSpeed");
}

// fp16 / bf16 and the loss scaler.
static inline void ds_apply_precision(DsReader* r, const Json* root, Config* c, const std::vector<FlagValue>* given) {
    const Json* fp16 = ds_member(r, root, "", "fp16", JSON_OBJECT);
    const Json* bf16 = ds_member(r, root, "", "bf16", JSON_OBJECT);
    bool half = fp16 && ds_bool(r, fp16, "fp16", "enabled", false);
    bool brain = bf16 && ds_bool(r, bf16, "bf16", "enabled", false);
    if (half && brain) ds_error(r, "fp16.enabled and bf16.enabled", "are both true: enable one");
    if (c->bf16 && half) keel_usage_error("--deepspeed_config %s: fp16.enabled contradicts --bf16", r->path);
    if (c->fp16 && brain) keel_usage_error("--deepspeed_config %s: bf16.enabled contradicts --fp16", r->path);
    if ((c->fp16 && !half) || (c->bf16 && !brain))
        keel_usage_error("--deepspeed_config %s: --%s, but the config does not enable %s (DeepSpeed would train fp32)", r->path,
                         c->fp16 ? "fp16" : "bf16", c->fp16 ? "fp16.enabled" : "bf16.enabled");
    if (c->fp32 && (half || brain))
        keel_usage_error("--deepspeed_config %s: %s.enabled contradicts --fp32", r->path, half ? "fp16" : "bf16");
    c->fp16 = half;
    c->bf16 = brain;
    c->fp32 = !half && !brain;  // DeepSpeed without either trains fp32 (the CUDA trainer would default to bf16)
    for (const char* f : {"loss-scale", "initial-loss-scale", "min-loss-scale", "loss-scale-window", "hysteresis"})
        ds_override(r, given, f, half ? "fp16 section" : "precision (no fp16: no loss scaling)");
    Config defaults;
    c->loss_scale = 0;  // DeepSpeed scales the loss only under fp16
    c->initial_loss_scale = defaults.initial_loss_scale;
    c->min_loss_scale = defaults.min_loss_scale;
    c->loss_scale_window = defaults.loss_scale_window;
    c->hysteresis = defaults.hysteresis;
    if (!half) return;
    // DeepSpeed's defaults (deepspeed/runtime/constants.py): dynamic, 2^16, window 1000, hysteresis 2, min 1
    double scale = ds_number(r, fp16, "fp16", "loss_scale", 0);
    int64_t power = ds_int(r, fp16, "fp16", "initial_scale_power");
    int64_t window = ds_int(r, fp16, "fp16", "loss_scale_window"), hyst = ds_int(r, fp16, "fp16", "hysteresis");
    if (scale < 0) ds_error(r, "fp16.loss_scale", "must be >= 0 (0: dynamic)");
    if (power > 126) ds_error(r, "fp16.initial_scale_power", "must be <= 126 (2^p must be a finite float)");
    if (window == 0 || hyst == 0) ds_error(r, window == 0 ? "fp16.loss_scale_window" : "fp16.hysteresis", "must be >= 1");
    c->loss_scale = scale;
    c->initial_loss_scale = std::ldexp(1.0, power < 0 ? 16 : (int)power);
    c->loss_scale_window = window < 0 ? 1000 : window;
    c->hysteresis = hyst < 0 ? 2 : hyst;
    c->min_loss_scale = ds_number(r, fp16, "fp16", "min_loss_scale", 1.0);
    // DeepSpeed's DynamicLossScaler with consecutive_hysteresis false moves as Megatron's scaler (keel's):
    // the hysteresis refills only when the scale grows. The true form refills after every clean step.
    if (ds_bool(r, fp16, "fp16", "consecutive_hysteresis", false))
        ds_error(r, "fp16.consecutive_hysteresis", "true is not keel's scaler (hysteresis refills only when the scale grows)");
    if (ds_bool(r, fp16, "fp16", "auto_cast", false))
        ds_error(r, "fp16.auto_cast", "true is not supported (keel casts inputs per its precision flags)");
}

// Batch sizes, ZeRO stage and clipping.
static inline void ds_apply_batch(DsReader* r, const Json* root, Config* c, const std::vector<FlagValue>* given) {
    ds_agree_int(r, c, given, "train_micro_batch_size_per_gpu", ds_int(r, root, "", "train_micro_batch_size_per_gpu"),
                 "micro-batch-size", &c->micro_batch_size);
    ds_agree_int(r, c, given, "train_batch_size", ds_int(r, root, "", "train_batch_size"), "global-batch-size", &c->global_batch_size);
    int64_t gas = ds_int(r, root, "", "gradient_accumulation_steps");
    if (gas == 0) ds_error(r, "gradient_accumulation_steps", "must be >= 1");
    c->deepspeed_gradient_accumulation_steps = gas < 0 ? 0 : gas;  // checked by config_validate (needs the data-parallel size)
    if (const Json* zero = ds_member(r, root, "", "zero_optimization", JSON_OBJECT)) {
        int64_t stage = ds_int(r, zero, "zero_optimization", "stage");
        if (stage > 1)
            ds_error(r, "zero_optimization.stage", (std::to_string(stage) + ": keel shards only the optimizer state and fp32 master weights "
                                                    "(stage 1); stages 2 and 3 also shard gradients and parameters").c_str());
        ds_agree_int(r, c, given, "zero_optimization.stage", stage, "zero-stage", &c->zero_stage);
    }
    ds_override(r, given, "clip-grad", "gradient_clipping");
    c->clip_grad = ds_number(r, root, "", "gradient_clipping", 0.0);  // DeepSpeed's default: no clipping
    if (c->clip_grad < 0) ds_error(r, "gradient_clipping", "must be >= 0");
}

// curriculum_learning → keel's sequence-length curriculum (llmc/schedule.h), key for key.
static inline void ds_apply_curriculum(DsReader* r, const Json* root, Config* c) {
    const Json* cl = ds_member(r, root, "", "curriculum_learning", JSON_OBJECT);
    if (!cl || !ds_bool(r, cl, "curriculum_learning", "enabled", false)) return;
    Config defaults;
    for (int i = 0; i < NUM_FLAGS; i++)
        if ((strncmp(FLAGS[i].name, "cl-", 3) == 0 || strcmp(FLAGS[i].name, "curriculum-learning") == 0) &&
            flag_value_string(c, &FLAGS[i]) != flag_value_string(&defaults, &FLAGS[i]))
            keel_usage_error("--deepspeed_config %s: curriculum_learning and --%s both set the curriculum: give it once", r->path,
                             FLAGS[i].name);
    const Json* type = ds_member(r, cl, "curriculum_learning", "curriculum_type", JSON_STRING);
    if (type && type->text != "seqlen") ds_error(r, "curriculum_learning.curriculum_type", "must be \"seqlen\" (keel's only curriculum)");
    const Json* sched = ds_member(r, cl, "curriculum_learning", "schedule_type", JSON_STRING);
    std::string schedule = sched ? sched->text : "";
    if (schedule != "fixed_linear" && schedule != "fixed_root" && schedule != "fixed_discrete")
        ds_error(r, "curriculum_learning.schedule_type", "must be fixed_linear, fixed_root or fixed_discrete");
    const Json* conf = ds_member(r, cl, "curriculum_learning", "schedule_config", JSON_OBJECT);
    if (!conf) ds_error(r, "curriculum_learning.schedule_config", "is missing");
    const std::string p = "curriculum_learning.schedule_config";
    c->curriculum_learning = true;
    c->cl_schedule = schedule;
    if (schedule == "fixed_discrete") {  // the lengths and the last iteration of each; min/max_difficulty unused
        ds_int(r, cl, "curriculum_learning", "min_difficulty");
        ds_int(r, cl, "curriculum_learning", "max_difficulty");
        c->cl_discrete_seqlens = ds_int_list(r, conf, p, "difficulty");
        c->cl_discrete_steps = ds_int_list(r, conf, p, "max_step");
        return;
    }
    int64_t min_d = ds_int(r, cl, "curriculum_learning", "min_difficulty"), max_d = ds_int(r, cl, "curriculum_learning", "max_difficulty");
    int64_t total = ds_int(r, conf, p, "total_curriculum_step"), step = ds_int(r, conf, p, "difficulty_step");
    if (min_d < 0 || max_d < 0 || total < 0 || step < 1)
        ds_error(r, "curriculum_learning", "needs min_difficulty, max_difficulty, schedule_config.total_curriculum_step and difficulty_step >= 1");
    c->cl_min_seqlen = min_d;
    c->cl_max_seqlen = max_d;
    c->cl_total_steps = total;
    c->cl_difficulty_step = step;
    if (schedule == "fixed_root") c->cl_root_degree = ds_number(r, conf, p, "root_degree", 0.0);
}

// Every key of the file keel did not read, as one list ("steps_per_print, zero_optimization.overlap_comm").
static inline void ds_collect_unused(const DsReader* r, const Json* obj, const std::string& path, std::string* out) {
    for (const auto& m : obj->members) {
        std::string full = path.empty() ? m.first : path + "." + m.first;
        bool used = false;
        for (const std::string& u : r->used) used = used || u == full;
        if (!used) *out += (out->empty() ? "" : ", ") + full;
        else if (m.second.type == JSON_OBJECT) ds_collect_unused(r, &m.second, full, out);
    }
}

static inline void ds_read_file(const char* path, Json* root) {
    FILE* f = fopen(path, "rb");
    if (!f) keel_usage_error("--deepspeed_config %s: cannot open: %s", path, strerror(errno));
    fclose(f);
    std::string text = file_read_all(path, FLAGS_FILE_MAX_BYTES), err;  // (a DeepSpeed config is a few hundred bytes)
    if (text.size() > FLAGS_FILE_MAX_BYTES) keel_usage_error("--deepspeed_config %s: larger than 1 MiB: not a DeepSpeed config", path);
    if (!json_parse(text.data(), text.size(), root, &err)) keel_usage_error("--deepspeed_config %s: malformed JSON: %s", path, err.c_str());
    if (root->type != JSON_OBJECT) keel_usage_error("--deepspeed_config %s: the top level must be a JSON object", path);
}

// The start-up lines for Megatron-DeepSpeed flags keel accepts but computes nothing different for.
static inline void megatron_accepted_notes(const Config* c, const std::vector<FlagValue>* given, std::vector<std::string>* notes) {
    if (ds_flag_given(given, "num-workers") || ds_flag_given(given, "valid-num-workers"))
        notes->push_back("note: --num-workers/--valid-num-workers: keel's loader reads batches in the training process (no worker "
                         "processes); the batches are the same");
    if (!c->codecarbon_dir.empty())
        notes->push_back("note: --codecarbon-dir " + c->codecarbon_dir + ": keel does not measure energy; nothing is written there");
    if (c->deepspeed_activation_checkpointing && !c->checkpoint_activations)
        notes->push_back("note: --deepspeed-activation-checkpointing does nothing without --checkpoint-activations (as in Megatron-DeepSpeed)");
    if (c->partition_activations)
        notes->push_back("note: --partition-activations: each tensor-parallel rank keeps its layer checkpoints whole (memory only; "
                         "the values are the same)");
    if (c->abort_on_unmet_fused_kernel_constraints)
        notes->push_back("note: --abort-on-unmet-fused-kernel-constraints: keel has no silent slow fallback to abort on (the "
                         "start-up names the attention kernels; --attention-impl flash refuses a config it does not cover)");
    if (c->no_masked_softmax_fusion)
        notes->push_back("note: --no-masked-softmax-fusion: keel's fused and unfused softmax compute the same values; nothing changes");
#ifndef KEEL_CUDA
    if (ds_flag_given(given, "distributed-backend"))
        notes->push_back("note: --distributed-backend nccl: the CPU trainer communicates over MPI (the CUDA trainer over NCCL)");
#endif
}

// Refusals of the Megatron-DeepSpeed flags keel names but cannot honour.
static inline void megatron_check_flags(const Config* c) {
    if (c->distributed_backend != "nccl")
        keel_usage_error("--distributed-backend %s: keel communicates over NCCL (GPU) or MPI (CPU trainer); give nccl or leave it out",
                         c->distributed_backend.c_str());
}

// --tokenizer-type PretrainedFromHF --tokenizer-name-or-path P: the tokenizer is read now (offline: a
// directory, or a model id in the local HF cache; llmc/hf_tokenizer.h) and its vocabulary is the
// model's, as Megatron's build_tokenizer sets it (then padded by its rule); a --vocab-size that says
// otherwise is refused.
static inline void megatron_apply_tokenizer(Config* c, const std::vector<FlagValue>* given, std::vector<std::string>* notes) {
    if (c->tokenizer_type != "PretrainedFromHF") {
        if (!c->tokenizer_name_or_path.empty())
            keel_usage_error("--tokenizer-name-or-path %s applies to --tokenizer-type PretrainedFromHF (the tokenizer type is %s)",
                             c->tokenizer_name_or_path.c_str(), c->tokenizer_type.c_str());
        return;
    }
    if (c->tokenizer_name_or_path.empty())
        keel_usage_error("--tokenizer-type PretrainedFromHF needs --tokenizer-name-or-path (a directory holding tokenizer.json, or a "
                         "model id in the local HF cache)");
    Tokenizer tok;
    std::string dir = hf_tokenizer_resolve(c->tokenizer_name_or_path);
    hf_tokenizer_for_run(&tok, c->tokenizer_type, c->tokenizer_name_or_path, c->vocab_file, c->merge_file);
    if (ds_flag_given(given, "vocab-size") && c->vocab_size != tok.vocab_size)
        keel_usage_error("--vocab-size %lld: the tokenizer %s has %d tokens, which PretrainedFromHF makes the vocabulary; drop --vocab-size",
                         (long long)c->vocab_size, c->tokenizer_name_or_path.c_str(), tok.vocab_size);
    c->vocab_size = tok.vocab_size;
    std::string eod = tok.eod < 0 ? "none (no eos_token)" : std::to_string(tok.eod);
    notes->push_back("note: --tokenizer-name-or-path " + c->tokenizer_name_or_path + ": " + dir + "/tokenizer.json, vocabulary " +
                     std::to_string(tok.vocab_size) + ", end of document " + eod + " (--vocab-file/--merge-file are not used)");
}

static inline void deepspeed_apply(Config* c, const std::vector<FlagValue>* given) {
    DsReader r;
    r.path = c->deepspeed_config.c_str();
    megatron_check_flags(c);
    megatron_apply_tokenizer(c, given, &r.notes);
    megatron_accepted_notes(c, given, &r.notes);
    if (!c->deepspeed) {
        if (!c->deepspeed_config.empty())
            r.notes.push_back("note: --deepspeed_config " + c->deepspeed_config + " is not read without --deepspeed (as in Megatron-DeepSpeed)");
    } else {
        if (c->deepspeed_config.empty()) keel_usage_error("--deepspeed needs --deepspeed_config FILE (the DeepSpeed JSON)");
        Json root;
        ds_read_file(r.path, &root);
        for (const char* section : {"optimizer", "scheduler"})
            if (json_get(&root, section))
                ds_error(&r, section, "is not supported: keel's optimizer and LR schedule come from the flags (--optimizer, --lr, "
                                      "--adam-*, --lr-decay-style, ...), as in BigScience's configs");
        ds_apply_precision(&r, &root, c, given);
        ds_apply_batch(&r, &root, c, given);
        ds_apply_curriculum(&r, &root, c);
        std::string unused;
        ds_collect_unused(&r, &root, "", &unused);
        if (!unused.empty()) r.notes.push_back("WARNING: --deepspeed_config " + c->deepspeed_config + ": keys keel does not use: " + unused);
    }
    for (const std::string& n : r.notes) printf("%s\n", n.c_str());
}
