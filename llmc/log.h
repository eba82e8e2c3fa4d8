// log.h — the Megatron-DeepSpeed log line, the JSONL metrics file, the validation line and the
// TensorBoard scalars (docs/internals.md#logs).
//
// Every iteration produces one IterationRecord. It goes to the JSONL file at once (one object per
// line, every number in the shortest text that reads back to the same bits, so two runs compare bit
// for bit) and into the interval accumulator that
// prints the Megatron line every --log-interval iterations:
//   elapsed  = interval wall time / (advanced + skipped iterations)
//   lm loss  = mean over the interval's non-skipped iterations
//   skipped / nan counters = sums over the interval (reset at each print)
//   TFLOPs   = 24·ckpt·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) / (elapsed · world · 1e12)   (docs/knobs.md#the-log-line-and-tflops)
// Timing fields (elapsed_ms, samples_per_second, tflops) are the only non-deterministic values.
// With --log-layer-norms-interval the record also carries the per-layer fields of
// llmc/layer_stats.h; the spike autopilot adds records of their own ({"iteration": k, "spike": ...}).
// TensorBoard (--tensorboard-dir, rank 0): the Megatron-DeepSpeed tags (docs/knobs.md#the-log-line-and-tflops), each
// against iterations and, as "<tag> vs samples" / "<tag> vs tokens", against consumed samples and
// tokens — the axes that stay comparable across batch-size ramp-up and curriculum runs:
//   always: lm-loss-training/lm loss, learning-rate/learning-rate, loss-scale/loss-scale (--fp16),
//   grad-norm/grad-norm, curriculum_seqlen (CL), steps-vs-samples/{y=steps,x=samples, y=samples,x=steps},
//   steps-vs-tokens/{y=steps,x=tokens, y=tokens,x=steps}, lm-loss-validation/lm loss validation;
//   with Megatron's flags, as Megatron: num-zeros/num-zeros (--log-num-zeros-in-grad), params-norm/params-norm
//   (--log-params-norm), batch-size/batch-size and "batch-size/batch-size vs samples" only
//   (--log-batch-size-to-tensorboard), lm-loss-validation/lm loss validation ppl
//   (--log-validation-ppl-to-tensorboard), and under --log-timers-to-tensorboard the timers of every
//   iteration as "<timer>-time" (forward-compute, backward-compute, optimizer; seconds) and at each log
//   line iteration-time/iteration-time (the interval's mean, seconds, with vs samples / vs tokens)
//   plus keel's iteration-time/{samples per second, tokens per second, TFLOPs per gpu (estimated)};
// and keel's own: skipped-updates/skipped, spike/rollback (value: the restored iteration),
// layer-grad-norm/layer NN, layer-weight-norm/layer NN, layer-act-rms/layer NN.
// Not written: Megatron's "vs gigaflos (without embeddings)".
#pragma once
#include <cmath>
#include <cstdio>
#include <string>

#include "llmc/common.h"
#include "llmc/layer_stats.h"
#include "llmc/outputs.h"
#include "llmc/tensorboard.h"

struct IterationRecord {
    int64_t iteration, consumed_samples, consumed_tokens;
    double elapsed_ms, lr;
    int64_t global_batch_size;
    double lm_loss, loss_scale, grad_norm;
    int64_t num_zeros, seqlen;
    int64_t pclip_units;  // tensors (units) whose gradient --adam8bit-percentile-clipping scaled down
    bool skipped, nan;
    double samples_per_second, tflops;
    const LayerStats* layers;  // this iteration's per-layer statistics, or nullptr
    double params_norm;        // --log-params-norm: after the update (NaN: not computed)
    double forward_s, backward_s, optimizer_s;  // --log-timers-to-tensorboard: this iteration's timers (< 0: not measured)
};

struct Logger {
    FILE* jsonl;  // nullptr without --metrics-file
    int64_t train_iters;
    // interval accumulators
    double loss_sum, time_ms;
    int64_t advanced, skipped, nan;
    bool show_loss_scale;  // --fp16: "loss scale" in the line, as Megatron
    bool show_seqlen;      // curriculum learning: "curriculum seqlen"
    bool show_pclip;       // --adam8bit-percentile-clipping: "percentile-clipped tensors"
    bool show_num_zeros;   // --log-num-zeros-in-grad: "num zeros" in the line, num-zeros in TensorBoard
    bool show_params_norm; // --log-params-norm: "params norm", params_norm, params-norm
    bool tb_timers, tb_batch_size, tb_validation_ppl;  // the --log-*-to-tensorboard flags
    TbWriter tb;           // not open: no --tensorboard-dir (or not rank 0)
};

// Appends: the file is new or empty, or holds what this run keeps (llmc/outputs.h decided which).
static inline void logger_open(Logger* lg, const std::string& path, int64_t train_iters) {
    lg->jsonl = nullptr;
    size_t slash = path.rfind('/');
    if (slash != std::string::npos && slash > 0) mkdir_p(path.substr(0, slash));
    if (!path.empty()) lg->jsonl = fopen_check(path.c_str(), "ab");
    lg->train_iters = train_iters;
    lg->loss_sum = lg->time_ms = 0;
    lg->advanced = lg->skipped = lg->nan = 0;
    lg->show_loss_scale = lg->show_seqlen = lg->show_pclip = false;
    lg->show_num_zeros = lg->show_params_norm = false;
    lg->tb_timers = lg->tb_batch_size = lg->tb_validation_ppl = false;
}

// Opens the TensorBoard writer; an unusable directory is a usage error before any training.
static inline void logger_open_tensorboard(Logger* lg, const std::string& dir) {
    std::string err;
    if (!dir.empty() && !tb_open(&lg->tb, dir, &err)) keel_usage_error("--tensorboard-dir: %s", err.c_str());
    if (lg->tb.f) printf("tensorboard: writing %s\n", lg->tb.path.c_str());
}

// A run started with --load continues the metrics file after `iteration` (the one it loaded; 0 when
// it found no checkpoint or took only the weights): the records of later iterations — logged by an
// attempt that died before its next save, or by another run — and a torn last line are moved into a
// side file (llmc/outputs.h: m.previous_run_N.jsonl), written and synced before the file is cut.
static inline void logger_keep_through(const std::string& path, int64_t iteration) {
    if (path.empty() || !file_exists(path.c_str())) return;
    std::string text = file_read_all(path.c_str()), kept, moved;
    int64_t nmoved = 0;
    for (size_t pos = 0; pos < text.size();) {
        size_t nl = text.find('\n', pos);
        std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl + 1 - pos);
        pos = nl == std::string::npos ? text.size() : nl + 1;
        long long it = -1;
        bool whole = nl != std::string::npos;
        if (whole && sscanf(line.c_str(), "{\"iteration\": %lld", &it) == 1 && it <= iteration) {
            kept += line;
        } else {
            moved += whole ? line : line + "\n";
            nmoved++;
        }
    }
    if (nmoved == 0) return;
    std::string aside = output_aside_file(path), tmp = path + ".tmp";
    FILE* f = fopen_check(aside.c_str(), "wb");
    fwrite_check(moved.data(), 1, moved.size(), f, aside.c_str());
    FILE_CHECK(fflush(f) == 0 && fsync(fileno(f)) == 0, "fsync", aside.c_str());
    FILE_CHECK(fclose(f) == 0, "fclose", aside.c_str());
    f = fopen_check(tmp.c_str(), "wb");
    fwrite_check(kept.data(), 1, kept.size(), f, tmp.c_str());
    FILE_CHECK(fflush(f) == 0 && fsync(fileno(f)) == 0, "fsync", tmp.c_str());
    FILE_CHECK(fclose(f) == 0, "fclose", tmp.c_str());
    FILE_CHECK(rename(tmp.c_str(), path.c_str()) == 0, "rename", tmp.c_str());
    fsync_parent_dir(path);  // the cut file and the side file survive a power loss together
    printf("--metrics-file %s: moved %lld record(s) after iteration %lld aside to %s\n", path.c_str(), (long long)nmoved,
           (long long)iteration, aside.c_str());
}

static inline void logger_close(Logger* lg) {
    if (lg->jsonl) fclose(lg->jsonl);
    lg->jsonl = nullptr;
    std::string path = lg->tb.path;
    if (tb_close_discard_empty(&lg->tb)) printf("tensorboard: nothing was logged; removed the empty %s\n", path.c_str());
}

// JSON has no NaN/Inf: non-finite values are written as null (the `nan` field says why).
static inline std::string json_num(double x) {
    if (!std::isfinite(x)) return "null";
    return double_repr(x);  // shortest text that reads back as the same double: compare runs bit for bit
}

// TFLOP/s per device by the BigScience formula; flops of one iteration over its seconds.
static inline double log_tflops(int64_t gbs, int64_t s, int64_t l, int64_t h, int64_t Vp, bool checkpoint_activations,
                                double seconds, int world) {
    double ckpt = checkpoint_activations ? 4 : 3;
    double flops = 24.0 * ckpt * gbs * s * l * (double)h * h * (1.0 + s / (6.0 * h) + Vp / (16.0 * l * h));
    return flops / (seconds * world * 1e12);
}

static inline std::string log_json_array(const LayerStats* s, double (*value)(const LayerStats*, int), int first, int n) {
    std::string t = "[";
    for (int i = 0; i < n; i++) t += (i ? ", " : "") + json_num(value(s, first + i));
    return t + "]";
}

// The per-layer fields of a record (", key: value" pieces); see llmc/layer_stats.h.
static inline std::string log_layer_stats_json(const LayerStats* s) {
    int L = s->L;
    return ", \"layer_grad_norm\": " + log_json_array(s, layer_grad_norm, 0, L) +
           ", \"layer_weight_norm\": " + log_json_array(s, layer_weight_norm, 0, L) +
           ", \"layer_act_rms\": " + log_json_array(s, layer_act_rms, 1, L) +
           ", \"embedding_grad_norm\": " + json_num(layer_grad_norm(s, L)) +
           ", \"embedding_weight_norm\": " + json_num(layer_weight_norm(s, L)) +
           ", \"embedding_act_rms\": " + json_num(layer_act_rms(s, 0)) +
           ", \"final_norm_grad_norm\": " + json_num(layer_grad_norm(s, L + 1)) +
           ", \"final_norm_weight_norm\": " + json_num(layer_weight_norm(s, L + 1));
}

// One value under `tag` against iterations, samples and tokens (Megatron's three views).
static inline void log_tb_three(Logger* lg, const std::string& tag, double v, int64_t it, int64_t samples, int64_t tokens) {
    if (!lg->tb.f || !std::isfinite(v)) return;
    tb_scalar(&lg->tb, tag.c_str(), it, v);
    tb_scalar(&lg->tb, (tag + " vs samples").c_str(), samples, v);
    tb_scalar(&lg->tb, (tag + " vs tokens").c_str(), tokens, v);
}

static inline void log_tensorboard(Logger* lg, const IterationRecord* r) {
    if (!lg->tb.f) return;
    int64_t it = r->iteration, sm = r->consumed_samples, tk = r->consumed_tokens;
    TbWriter* w = &lg->tb;
    tb_scalar(w, "steps-vs-samples/y=steps,x=samples", sm, (double)it);
    tb_scalar(w, "steps-vs-samples/y=samples,x=steps", it, (double)sm);
    tb_scalar(w, "steps-vs-tokens/y=steps,x=tokens", tk, (double)it);
    tb_scalar(w, "steps-vs-tokens/y=tokens,x=steps", it, (double)tk);
    log_tb_three(lg, "lm-loss-training/lm loss", r->lm_loss, it, sm, tk);  // a skipped spike shows too
    log_tb_three(lg, "learning-rate/learning-rate", r->lr, it, sm, tk);
    if (lg->tb_batch_size) {  // Megatron writes these two, not a "vs tokens"
        tb_scalar(w, "batch-size/batch-size", it, (double)r->global_batch_size);
        tb_scalar(w, "batch-size/batch-size vs samples", sm, (double)r->global_batch_size);
    }
    if (lg->show_loss_scale) log_tb_three(lg, "loss-scale/loss-scale", r->loss_scale, it, sm, tk);
    log_tb_three(lg, "grad-norm/grad-norm", r->grad_norm, it, sm, tk);
    if (lg->show_num_zeros) log_tb_three(lg, "num-zeros/num-zeros", (double)r->num_zeros, it, sm, tk);
    if (lg->show_params_norm) log_tb_three(lg, "params-norm/params-norm", r->params_norm, it, sm, tk);
    if (lg->show_seqlen) tb_scalar(w, "curriculum_seqlen", it, (double)r->seqlen);
    if (lg->tb_timers && r->forward_s >= 0) {  // Megatron's timers.write: "<timer name>-time", seconds per iteration
        tb_scalar(w, "forward-compute-time", it, r->forward_s);
        tb_scalar(w, "backward-compute-time", it, r->backward_s);
        tb_scalar(w, "optimizer-time", it, r->optimizer_s);
    }
    tb_scalar(w, "skipped-updates/skipped", it, r->skipped ? 1.0 : 0.0);
    if (const LayerStats* s = r->layers) {
        char tag[64];
        for (int l = 0; l < s->L; l++) {
            snprintf(tag, sizeof tag, "layer-grad-norm/layer %02d", l);
            tb_scalar(w, tag, it, layer_grad_norm(s, l));
            snprintf(tag, sizeof tag, "layer-weight-norm/layer %02d", l);
            tb_scalar(w, tag, it, layer_weight_norm(s, l));
            snprintf(tag, sizeof tag, "layer-act-rms/layer %02d", l);
            tb_scalar(w, tag, it, layer_act_rms(s, 1 + l));
        }
    }
}

// --log-timers-to-tensorboard, at a log line (as Megatron): the interval's mean iteration time in
// seconds, and the rates keel derives from it.
static inline void log_tb_iteration_time(Logger* lg, const IterationRecord* r, double elapsed_s) {
    if (!lg->tb.f || elapsed_s <= 0) return;
    int64_t it = r->iteration;
    log_tb_three(lg, "iteration-time/iteration-time", elapsed_s, it, r->consumed_samples, r->consumed_tokens);
    double scale = r->elapsed_ms > 0 ? r->elapsed_ms / 1000.0 / elapsed_s : 0;  // the record's rates at the interval's mean time
    tb_scalar(&lg->tb, "iteration-time/samples per second", it, r->global_batch_size / elapsed_s);
    tb_scalar(&lg->tb, "iteration-time/tokens per second", it, r->global_batch_size * r->seqlen / elapsed_s);
    tb_scalar(&lg->tb, "iteration-time/TFLOPs per gpu (estimated)", it, r->tflops * scale);
}

static inline void log_iteration(Logger* lg, const IterationRecord* r, int64_t log_interval) {
    log_tensorboard(lg, r);
    if (lg->jsonl) {
        std::string layers = r->layers ? log_layer_stats_json(r->layers) : "";
        if (lg->show_params_norm) layers = ", \"params_norm\": " + json_num(r->params_norm) + layers;
        fprintf(lg->jsonl,
                "{\"iteration\": %lld, \"consumed_samples\": %lld, \"consumed_tokens\": %lld, \"lr\": %s, "
                "\"global_batch_size\": %lld, \"lm_loss\": %s, \"loss_scale\": %s, \"grad_norm\": %s, \"num_zeros\": %lld, "
                "\"seqlen\": %lld, \"percentile_clipped\": %lld, \"skipped\": %d, \"nan\": %d, \"elapsed_ms\": %s, \"samples_per_second\": %s, "
                "\"tflops\": %s%s}\n",
                (long long)r->iteration, (long long)r->consumed_samples, (long long)r->consumed_tokens, json_num(r->lr).c_str(),
                (long long)r->global_batch_size, json_num(r->lm_loss).c_str(), json_num(r->loss_scale).c_str(),
                json_num(r->grad_norm).c_str(), (long long)r->num_zeros, (long long)r->seqlen, (long long)r->pclip_units, r->skipped ? 1 : 0,
                r->nan ? 1 : 0, json_num(r->elapsed_ms).c_str(), json_num(r->samples_per_second).c_str(),
                json_num(r->tflops).c_str(), layers.c_str());
        fflush(lg->jsonl);
    }
    lg->time_ms += r->elapsed_ms;
    if (r->skipped) lg->skipped++; else { lg->advanced++; lg->loss_sum += r->lm_loss; }
    if (r->nan) lg->nan++;
    if (r->iteration % log_interval != 0) return;
    int64_t n = lg->advanced + lg->skipped;
    double elapsed_s = n ? lg->time_ms / 1000.0 / n : 0;
    std::string line;
    char buf[256];
    snprintf(buf, sizeof buf, " iteration %8lld/%8lld | consumed samples: %12lld | consumed tokens: %12lld |",
             (long long)r->iteration, (long long)lg->train_iters, (long long)r->consumed_samples, (long long)r->consumed_tokens);
    line += buf;
    snprintf(buf, sizeof buf, " elapsed time per iteration (s): %.2f | learning rate: %.3E | global batch size: %5lld |",
             elapsed_s, r->lr, (long long)r->global_batch_size);
    line += buf;
    if (lg->advanced > 0) {
        snprintf(buf, sizeof buf, " lm loss: %.6E |", lg->loss_sum / lg->advanced);
        line += buf;
    }
    if (lg->show_loss_scale) {
        snprintf(buf, sizeof buf, " loss scale: %.1f |", r->loss_scale);
        line += buf;
    }
    snprintf(buf, sizeof buf, " grad norm: %.3f |", r->grad_norm);
    line += buf;
    if (lg->show_num_zeros) {
        snprintf(buf, sizeof buf, " num zeros: %.1f |", (double)r->num_zeros);
        line += buf;
    }
    if (lg->show_params_norm) {
        snprintf(buf, sizeof buf, " params norm: %.3f |", r->params_norm);
        line += buf;
    }
    if (lg->show_seqlen) {
        snprintf(buf, sizeof buf, " curriculum seqlen: %5lld |", (long long)r->seqlen);
        line += buf;
    }
    if (lg->show_pclip) {
        snprintf(buf, sizeof buf, " percentile-clipped tensors: %lld |", (long long)r->pclip_units);
        line += buf;
    }
    snprintf(buf, sizeof buf, " number of skipped iterations: %3lld | number of nan iterations: %3lld |",
             (long long)lg->skipped, (long long)lg->nan);
    line += buf;
    // samples/s and TFLOPs from the interval's mean time, like `elapsed` (docs/knobs.md#the-log-line-and-tflops)
    double scale = r->elapsed_ms > 0 && elapsed_s > 0 ? r->elapsed_ms / 1000.0 / elapsed_s : 0;
    snprintf(buf, sizeof buf, " samples per second: %.3f | TFLOPs: %.2f |", elapsed_s > 0 ? r->global_batch_size / elapsed_s : 0.0,
             r->tflops * scale);
    line += buf;
    printf("%s\n", line.c_str());
    fflush(stdout);
    if (lg->tb_timers) log_tb_iteration_time(lg, r, elapsed_s);
    tb_flush(&lg->tb);
    lg->loss_sum = lg->time_ms = 0;
    lg->advanced = lg->skipped = lg->nan = 0;
}

// A spike-autopilot action as its own JSONL record (fields pre-formatted by the caller, e.g.
// "\"spike\": \"rollback\", ...") and, for a rollback, the spike/rollback scalar.
static inline void log_spike(Logger* lg, int64_t iteration, const std::string& fields, int64_t restored) {
    if (lg->jsonl) {
        fprintf(lg->jsonl, "{\"iteration\": %lld, %s}\n", (long long)iteration, fields.c_str());
        fflush(lg->jsonl);
    }
    if (restored >= 0) tb_scalar(&lg->tb, "spike/rollback", iteration, (double)restored);
    tb_flush(&lg->tb);
}

static inline void log_validation(Logger* lg, int64_t iteration, double loss, int64_t samples, int64_t tokens) {
    double ppl = std::exp(std::min(20.0, loss));
    char buf[200];
    int n = snprintf(buf, sizeof buf, " validation loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.6E | ",
                     (long long)iteration, loss, ppl);
    std::string dashes(n, '-');
    printf("%s\n%s\n%s\n", dashes.c_str(), buf, dashes.c_str());
    fflush(stdout);
    if (lg->jsonl) {
        fprintf(lg->jsonl, "{\"iteration\": %lld, \"val_loss\": %s, \"val_ppl\": %s}\n", (long long)iteration,
                json_num(loss).c_str(), json_num(ppl).c_str());
        fflush(lg->jsonl);
    }
    log_tb_three(lg, "lm-loss-validation/lm loss validation", loss, iteration, samples, tokens);
    if (lg->tb_validation_ppl) log_tb_three(lg, "lm-loss-validation/lm loss validation ppl", ppl, iteration, samples, tokens);
    tb_flush(&lg->tb);
}

// --eval-full-at-end: the loss over the whole validation set (`samples` of T tokens), printed as the
// validation line with its extent, recorded as val_loss_full / val_ppl_full and a TensorBoard tag of its own.
static inline void log_validation_full(Logger* lg, int64_t iteration, double loss, int64_t samples, int64_t T, int64_t consumed_samples,
                                       int64_t tokens) {
    double ppl = std::exp(std::min(20.0, loss));
    char buf[300];
    int n = snprintf(buf, sizeof buf, " validation loss over the whole validation set (%lld samples, %lld tokens) at iteration %lld | "
                     "lm loss value: %.6E | lm loss PPL: %.6E | ", (long long)samples, (long long)(samples * T), (long long)iteration, loss, ppl);
    std::string dashes(n, '-');
    printf("%s\n%s\n%s\n", dashes.c_str(), buf, dashes.c_str());
    fflush(stdout);
    if (lg->jsonl) {
        fprintf(lg->jsonl, "{\"iteration\": %lld, \"val_loss_full\": %s, \"val_ppl_full\": %s, \"val_samples_full\": %lld}\n",
                (long long)iteration, json_num(loss).c_str(), json_num(ppl).c_str(), (long long)samples);
        fflush(lg->jsonl);
    }
    log_tb_three(lg, "lm-loss-validation/lm loss validation (whole set)", loss, iteration, consumed_samples, tokens);
    tb_flush(&lg->tb);
}
