// flags.h — every command-line flag of keel, from one table (DESIGN §6, STYLE 4).
//
// The table `FLAGS` below is the single source for: the parser, `-h` usage text, the start-up
// printout of effective values, which flags a checkpoint records, and the names tests use.
// Contract:
//   - long flags with Megatron-DeepSpeed names: `--name value` or `--name=value`; booleans are
//     `--name` (store_true); `@file` reads more arguments from a file (whitespace separated, `#`
//     starts a comment), so a run's arguments can be kept as data.
//   - strict: unknown flags, missing values, malformed numbers (trailing junk, out of range, NaN)
//     and values outside a flag's choices exit with status 2 and one line naming the flag.
//   - contradictory combinations are rejected by config_validate(), also with status 2.
// Each flag has a `kind`: FK_STATE flags define the training trajectory and are recorded in every
// checkpoint (a resume reports what changed); FK_RUN flags only steer this process (paths, logs).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/common.h"

// The whole configuration of a run. Defaults are the plain GPT-2 recipe; every instability knob
// defaults to off. Integers are int64 so sample/token counts of large runs fit.
struct Config {
    // model
    int64_t num_layers = 12, hidden_size = 768, num_attention_heads = 12, seq_length = 1024;
    int64_t max_position_embeddings = 0;  // 0: equal to --seq-length
    int64_t make_vocab_size_divisible_by = 128;
    int64_t vocab_size = 50257;
    double init_method_std = 0.02;
    // batch and duration
    int64_t micro_batch_size = 4, global_batch_size = 0;  // 0: micro-batch × data-parallel size
    int64_t train_iters = 0, train_samples = 0, exit_interval = 0;
    // optimizer and schedule
    double lr = NAN, min_lr = 0.0;
    std::string lr_decay_style = "linear";
    int64_t lr_warmup_iters = 0, lr_warmup_samples = 0, lr_decay_iters = 0, lr_decay_samples = 0;
    double lr_warmup_fraction = NAN;
    bool override_lr_scheduler = false, use_checkpoint_lr_scheduler = false;
    double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_eps = 1e-8, weight_decay = 0.01, clip_grad = 1.0;
    int64_t seed = 1234;
    // data
    std::string train_data_path, valid_data_path;
    std::string vocab_file = "data/gpt2/encoder.json", merge_file = "data/gpt2/vocab.bpe";
    // checkpoints
    std::string save, load, load_llmc, export_llmc;
    int64_t save_interval = 0;
    // logging and evaluation
    int64_t log_interval = 1, eval_interval = 0, eval_iters = 10, sample_interval = 0, sample_length = 64;
    std::string metrics_file;
};

enum FlagType { FT_INT, FT_FLOAT, FT_STR, FT_BOOL };
enum FlagKind { FK_STATE, FK_RUN };

enum : int64_t { NO_MIN = INT64_MIN, NO_MAX = INT64_MAX };

struct Flag {
    const char* name;     // without the leading "--"
    int64_t min, max;     // bounds of an FT_INT value (NO_MIN / NO_MAX: none), checked by config_validate
    FlagType type;
    size_t offset;        // offsetof(Config, field)
    FlagKind kind;
    const char* choices;  // "a|b|c" for enumerated strings, else nullptr
    const char* help;
};

#define KEEL_FLAG(name, min, max, type, field, kind, choices, help) {name, min, max, type, offsetof(Config, field), kind, choices, help}
static const Flag FLAGS[] = {
    // model shape
    KEEL_FLAG("num-layers", 1, INT32_MAX, FT_INT, num_layers, FK_STATE, nullptr, "transformer layers L"),
    KEEL_FLAG("hidden-size", 1, INT32_MAX, FT_INT, hidden_size, FK_STATE, nullptr, "channels C"),
    KEEL_FLAG("num-attention-heads", 1, INT32_MAX, FT_INT, num_attention_heads, FK_STATE, nullptr, "attention heads NH (must divide C)"),
    KEEL_FLAG("seq-length", 1, INT32_MAX, FT_INT, seq_length, FK_STATE, nullptr, "tokens per sample T"),
    KEEL_FLAG("max-position-embeddings", 0, INT32_MAX, FT_INT, max_position_embeddings, FK_STATE, nullptr,
              "rows of the position embedding (0: = seq-length)"),
    KEEL_FLAG("vocab-size", 1, INT32_MAX, FT_INT, vocab_size, FK_STATE, nullptr, "real vocabulary size (GPT-2: 50257)"),
    KEEL_FLAG("make-vocab-size-divisible-by", 1, INT32_MAX, FT_INT, make_vocab_size_divisible_by, FK_STATE, nullptr,
              "pad the vocabulary to a multiple of this"),
    KEEL_FLAG("init-method-std", NO_MIN, NO_MAX, FT_FLOAT, init_method_std, FK_STATE, nullptr,
              "sigma of the normal init; output projections use sigma/sqrt(2L)"),
    // batch and duration
    KEEL_FLAG("micro-batch-size", 1, INT32_MAX, FT_INT, micro_batch_size, FK_STATE, nullptr, "samples per micro-batch per data-parallel rank"),
    KEEL_FLAG("global-batch-size", 0, NO_MAX, FT_INT, global_batch_size, FK_STATE, nullptr,
              "samples per iteration (0: micro-batch x DP); the rest is gradient accumulation"),
    KEEL_FLAG("train-iters", 0, NO_MAX, FT_INT, train_iters, FK_STATE, nullptr, "iterations to train (or --train-samples)"),
    KEEL_FLAG("train-samples", 0, NO_MAX, FT_INT, train_samples, FK_STATE, nullptr, "samples to train (or --train-iters)"),
    KEEL_FLAG("exit-interval", 0, NO_MAX, FT_INT, exit_interval, FK_RUN, nullptr,
              "stop after an iteration that is a multiple of this (saving first if --save); 0: off"),
    // optimizer and schedule
    KEEL_FLAG("lr", NO_MIN, NO_MAX, FT_FLOAT, lr, FK_STATE, nullptr, "peak learning rate (required)"),
    KEEL_FLAG("min-lr", NO_MIN, NO_MAX, FT_FLOAT, min_lr, FK_STATE, nullptr, "learning rate at the end of the decay"),
    KEEL_FLAG("lr-decay-style", NO_MIN, NO_MAX, FT_STR, lr_decay_style, FK_STATE, "constant|linear|cosine", "decay after warmup"),
    KEEL_FLAG("lr-warmup-iters", 0, NO_MAX, FT_INT, lr_warmup_iters, FK_STATE, nullptr, "warmup in iterations (iteration-based runs)"),
    KEEL_FLAG("lr-warmup-samples", 0, NO_MAX, FT_INT, lr_warmup_samples, FK_STATE, nullptr, "warmup in samples (sample-based runs)"),
    KEEL_FLAG("lr-warmup-fraction", NO_MIN, NO_MAX, FT_FLOAT, lr_warmup_fraction, FK_STATE, nullptr, "warmup as a fraction of the decay span"),
    KEEL_FLAG("lr-decay-iters", 0, NO_MAX, FT_INT, lr_decay_iters, FK_STATE, nullptr, "decay span in iterations (0: --train-iters)"),
    KEEL_FLAG("lr-decay-samples", 0, NO_MAX, FT_INT, lr_decay_samples, FK_STATE, nullptr, "decay span in samples (0: --train-samples)"),
    KEEL_FLAG("override-lr-scheduler", NO_MIN, NO_MAX, FT_BOOL, override_lr_scheduler, FK_RUN, nullptr,
              "on --load, take the schedule from the command line"),
    KEEL_FLAG("use-checkpoint-lr-scheduler", NO_MIN, NO_MAX, FT_BOOL, use_checkpoint_lr_scheduler, FK_RUN, nullptr,
              "on --load, take the schedule from the checkpoint"),
    KEEL_FLAG("adam-beta1", NO_MIN, NO_MAX, FT_FLOAT, adam_beta1, FK_STATE, nullptr, "Adam beta1"),
    KEEL_FLAG("adam-beta2", NO_MIN, NO_MAX, FT_FLOAT, adam_beta2, FK_STATE, nullptr, "Adam beta2 (BigScience: 0.95)"),
    KEEL_FLAG("adam-eps", NO_MIN, NO_MAX, FT_FLOAT, adam_eps, FK_STATE, nullptr, "Adam epsilon"),
    KEEL_FLAG("weight-decay", NO_MIN, NO_MAX, FT_FLOAT, weight_decay, FK_STATE, nullptr, "decoupled weight decay (not on biases, LayerNorms)"),
    KEEL_FLAG("clip-grad", NO_MIN, NO_MAX, FT_FLOAT, clip_grad, FK_STATE, nullptr, "global-norm clipping threshold (0: off)"),
    KEEL_FLAG("seed", 0, NO_MAX, FT_INT, seed, FK_STATE, nullptr, "key of every random number (init, data order, sampling)"),
    // data
    KEEL_FLAG("train-data-path", NO_MIN, NO_MAX, FT_STR, train_data_path, FK_RUN, nullptr, "training shards: path, glob or comma list (required)"),
    KEEL_FLAG("valid-data-path", NO_MIN, NO_MAX, FT_STR, valid_data_path, FK_RUN, nullptr, "validation shards (needed for --eval-interval)"),
    KEEL_FLAG("vocab-file", NO_MIN, NO_MAX, FT_STR, vocab_file, FK_RUN, nullptr, "GPT-2 encoder.json (for text samples)"),
    KEEL_FLAG("merge-file", NO_MIN, NO_MAX, FT_STR, merge_file, FK_RUN, nullptr, "GPT-2 vocab.bpe merges (for text samples)"),
    // checkpoints
    KEEL_FLAG("save", NO_MIN, NO_MAX, FT_STR, save, FK_RUN, nullptr, "checkpoint directory to write"),
    KEEL_FLAG("save-interval", 0, NO_MAX, FT_INT, save_interval, FK_RUN, nullptr, "save every N iterations (and at the end); 0: only at the end"),
    KEEL_FLAG("load", NO_MIN, NO_MAX, FT_STR, load, FK_RUN, nullptr, "checkpoint directory to resume from (latest iteration)"),
    KEEL_FLAG("load-llmc", NO_MIN, NO_MAX, FT_STR, load_llmc, FK_RUN, nullptr, "initialise the weights from an llm.c GPT-2 model file"),
    KEEL_FLAG("export-llmc", NO_MIN, NO_MAX, FT_STR, export_llmc, FK_RUN, nullptr, "write the final weights as an llm.c GPT-2 model file"),
    // logging and evaluation
    KEEL_FLAG("log-interval", 1, NO_MAX, FT_INT, log_interval, FK_RUN, nullptr, "print the log line every N iterations"),
    KEEL_FLAG("eval-interval", 0, NO_MAX, FT_INT, eval_interval, FK_RUN, nullptr, "validate every N iterations (and at the end); 0: off"),
    KEEL_FLAG("eval-iters", 1, NO_MAX, FT_INT, eval_iters, FK_RUN, nullptr, "validation batches per evaluation"),
    KEEL_FLAG("sample-interval", 0, NO_MAX, FT_INT, sample_interval, FK_RUN, nullptr, "print a generated text sample every N iterations; 0: off"),
    KEEL_FLAG("sample-length", 0, INT32_MAX, FT_INT, sample_length, FK_RUN, nullptr, "tokens per generated sample"),
    KEEL_FLAG("metrics-file", NO_MIN, NO_MAX, FT_STR, metrics_file, FK_RUN, nullptr, "JSONL metrics, one object per iteration"),
};
#undef KEEL_FLAG
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

// Parses one value into the flag's field; on failure a one-line error naming the flag, exit 2.
static inline void flag_set(Config* c, const Flag* f, const std::string& v) {
    const char* s = v.c_str();
    char* end = nullptr;
    errno = 0;
    if (f->type == FT_INT) {
        long long x = strtoll(s, &end, 10);
        if (v.empty() || *end != '\0' || errno == ERANGE)
            keel_usage_error("--%s: '%s' is not an integer", f->name, s);
        *flag_field<int64_t>(c, f) = x;
    } else if (f->type == FT_FLOAT) {
        double x = strtod(s, &end);
        if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x))
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

// `@file` expansion: whitespace-separated words, `#` to end of line is a comment.
static inline void flags_read_file(const char* path, std::vector<std::string>* out, int depth) {
    if (depth > 8) keel_usage_error("@%s: @file nesting deeper than 8", path);
    FILE* f = fopen(path, "rb");
    if (!f) keel_usage_error("@%s: cannot open: %s", path, strerror(errno));
    fclose(f);
    std::string text = file_read_all(path), word;
    bool comment = false;
    for (size_t i = 0; i <= text.size(); i++) {
        char ch = i < text.size() ? text[i] : '\n';
        if (comment) { if (ch == '\n') comment = false; continue; }
        if (ch == '#' && word.empty()) { comment = true; continue; }
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            if (!word.empty()) {
                if (word[0] == '@') flags_read_file(word.c_str() + 1, out, depth + 1);
                else out->push_back(word);
            }
            word.clear();
        } else {
            word += ch;
        }
    }
}

static inline void flags_usage(FILE* out, const char* program) {
    Config defaults;
    fprintf(out, "usage: %s [flags] [@argsfile]   (Megatron-DeepSpeed flag names)\n\n", program);
    for (int i = 0; i < NUM_FLAGS; i++) {
        const Flag* f = &FLAGS[i];
        std::string def = flag_value_string(&defaults, f);
        const char* meta = f->type == FT_INT ? " N" : f->type == FT_FLOAT ? " X" : f->type == FT_STR ? " S" : "";
        char head[80];
        snprintf(head, sizeof head, "--%s%s", f->name, meta);
        fprintf(out, "  %-36s %s", head, f->help);
        if (f->choices) fprintf(out, " {%s}", f->choices);
        if (f->type != FT_BOOL && !def.empty() && def != "nan") fprintf(out, " [%s]", def.c_str());
        fprintf(out, "\n");
    }
}

// Parses argv (after expanding @files) into *c. Returns false if -h/--help was given.
static inline bool flags_parse(Config* c, int argc, char** argv) {
    std::vector<std::string> args;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '@') flags_read_file(argv[i] + 1, &args, 0);
        else args.push_back(argv[i]);
    }
    for (size_t i = 0; i < args.size(); i++) {
        const std::string& a = args[i];
        if (a == "-h" || a == "--help") return false;
        if (a.size() < 3 || a[0] != '-' || a[1] != '-') keel_usage_error("unexpected argument '%s' (flags start with --)", a.c_str());
        std::string name = a.substr(2), value;
        size_t eq = name.find('=');
        bool has_value = eq != std::string::npos;
        if (has_value) { value = name.substr(eq + 1); name = name.substr(0, eq); }
        const Flag* f = flag_find(name.c_str());
        if (!f) keel_usage_error("unknown flag --%s", name.c_str());
        if (f->type == FT_BOOL) {
            flag_set(c, f, has_value ? value : "true");
            continue;
        }
        if (!has_value) {
            if (i + 1 >= args.size()) keel_usage_error("--%s needs a value", f->name);
            value = args[++i];
        }
        flag_set(c, f, value);
    }
    return true;
}

// Rejects contradictory or impossible combinations (exit 2, one line naming the flags).
static inline void config_validate(Config* c, int dp_size) {
    if (c->max_position_embeddings == 0) c->max_position_embeddings = c->seq_length;
    if (c->global_batch_size == 0) c->global_batch_size = c->micro_batch_size * dp_size;
    // Bounds from the table: counts that must be positive or non-negative, shapes that must fit an int.
    for (int i = 0; i < NUM_FLAGS; i++) {
        const Flag* f = &FLAGS[i];
        if (f->type != FT_INT) continue;
        int64_t v = *flag_field<int64_t>(c, f);
        if (f->min != NO_MIN && v < f->min) keel_usage_error("--%s must be >= %lld (got %lld)", f->name, (long long)f->min, (long long)v);
        if (f->max != NO_MAX && v > f->max) keel_usage_error("--%s must be <= %lld (got %lld)", f->name, (long long)f->max, (long long)v);
    }
    if (c->micro_batch_size * c->seq_length > INT32_MAX / 4)
        keel_usage_error("--micro-batch-size x --seq-length = %lld positions is too large", (long long)(c->micro_batch_size * c->seq_length));
    if (c->hidden_size % c->num_attention_heads != 0)
        keel_usage_error("--hidden-size %lld is not divisible by --num-attention-heads %lld", (long long)c->hidden_size,
                         (long long)c->num_attention_heads);
    if (c->seq_length > c->max_position_embeddings)
        keel_usage_error("--seq-length %lld exceeds --max-position-embeddings %lld", (long long)c->seq_length,
                         (long long)c->max_position_embeddings);
    if (c->vocab_size > 65536) keel_usage_error("--vocab-size %lld: shards store uint16 token ids (max 65536)", (long long)c->vocab_size);
    if (c->global_batch_size % (c->micro_batch_size * dp_size) != 0)
        keel_usage_error("--global-batch-size %lld is not divisible by --micro-batch-size %lld x data-parallel size %d",
                         (long long)c->global_batch_size, (long long)c->micro_batch_size, dp_size);
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
    if (c->train_data_path.empty()) keel_usage_error("--train-data-path is required");
    if (c->eval_interval > 0 && c->valid_data_path.empty())
        keel_usage_error("--eval-interval needs --valid-data-path");
    if (c->save_interval > 0 && c->save.empty()) keel_usage_error("--save-interval needs --save DIR");
}

// Rank 0's start-up printout: every effective value, Megatron style.
static inline void flags_print(const Config* c) {
    printf("------------------------ arguments ------------------------\n");
    for (int i = 0; i < NUM_FLAGS; i++) {
        std::string name = FLAGS[i].name;
        std::string dots(name.size() < 40 ? 40 - name.size() : 1, '.');
        printf("  %s %s %s\n", name.c_str(), dots.c_str(), flag_value_string(c, &FLAGS[i]).c_str());
    }
    printf("-------------------- end of arguments ---------------------\n");
}
