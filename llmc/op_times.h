// op_times.h — --time-ops ITER: where one training iteration's time goes, op by op.
//
// Contract
//   The shared orchestration (llmc/model.h, train_gpt.cu) calls op_mark(t, phase, name, flops,
//   bytes) as it issues each op of the step. A mark opens a segment and closes the one before it:
//   the iteration's timeline is cut into consecutive segments with nothing between them, so the
//   segments add up to the whole iteration. op_times_begin(t, it) starts marking when `it` is the
//   iteration asked for (and opens the first segment); op_times_end closes the last one, waits for
//   the device once, and returns the segments summed per (phase, name).
//   Marks cost nothing in any other iteration (one test of a flag), and timing never changes what
//   the ops compute: a run with --time-ops gives the bytes of one without.
//
// What a segment's time is
//   GPU: each mark is a CUDA event recorded on keel's stream (llmc/cuda/stream.h), and a segment is
//   the time between the stream reaching its mark and reaching the next — the op's kernels, plus any
//   time the stream sat idle because the host had not yet issued the next op. The host's own work
//   has segments of its own (phase "host": reading the batch, checking and uploading the targets), so
//   a GPU starved by the host shows there, not in the op after it. The data-parallel reduction runs
//   on the communication stream beside the backward; what of it the compute stream still waits for
//   shows as "step gradient reduction (wait)".
//   CPU: each mark reads a monotonic clock; the ops run synchronously, so a segment is the op.
//
// Rates
//   flops: the model's FLOPs of the op (matrix products 2·m·n·k; attention at its causal half, the
//   forward's two products and the backward's four — flash's recomputed scores not counted);
//   bytes: the bytes a memory-bound op must move at least (each tensor read or written once), or a
//   collective's buffer (comm: its GB/s is the collective's, and it has no roofline — its link is not
//   the memory). A row shows TFLOP/s or GB/s where its ops gave them, and on a GPU of the step model's
//   table (llmc/step_model.h) its roofline: the time its FLOPs need at the dense peak or its bytes at
//   the memory's bandwidth, whichever is longer, as a share of the time it took. The FLOPs line sums
//   the model's FLOPs (the recomputed forward of --checkpoint-activations apart).
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "llmc/backend.h"

struct OpMark {
    const char* phase;  // "fwd", "bwd", "recompute", "step", "host"
    const char* name;   // the op, e.g. "qkv matmul"
    double flops, bytes;
    bool comm = false;  // a collective: bytes are its buffer's
};

struct OpTimes {
    int64_t iteration = 0;      // the iteration to time (--time-ops; 0: none)
    // the roofline (0: none, on the CPU or an unknown GPU): dense FLOP/s at the training precision, bytes/s
    double peak_flops = 0, peak_bytes = 0;
    std::string peak_name;      // whose peaks ("h200")
    bool on = false;            // marking now: that iteration is running
    std::vector<OpMark> marks;  // segment i starts at mark i
    BackendMarks clock;         // the marks' times (events on the GPU)
};

// Starts marking if `it` is the iteration asked for; the first segment is the iteration's start.
static inline void op_times_begin(OpTimes* t, int64_t it) {
    t->on = t->iteration > 0 && it == t->iteration;
    t->marks.clear();
    if (!t->on) return;
    t->marks.reserve(4096);
    backend_mark(&t->clock, 0);
    t->marks.push_back({"step", "iteration start", 0, 0, false});
}

static inline void op_mark(OpTimes* t, const char* phase, const char* name, double flops = 0, double bytes = 0) {
    if (!t || !t->on) return;
    backend_mark(&t->clock, t->marks.size());
    t->marks.push_back({phase, name, flops, bytes, false});
}
// A collective (tensor-parallel all-reduces, the gradients' and weights' all-gathers): `bytes` its buffer.
static inline void op_mark_comm(OpTimes* t, const char* phase, const char* name, double bytes) {
    if (!t || !t->on) return;
    backend_mark(&t->clock, t->marks.size());
    t->marks.push_back({phase, name, 0, bytes, true});
}
// Takes back the bytes of the marks of (phase, name) so far: the work they named did not run (an
// update skipped on a non-finite gradient).
static inline void op_marks_unbytes(OpTimes* t, const char* phase, const char* name) {
    if (!t || !t->on) return;
    for (OpMark& mk : t->marks)
        if (!strcmp(mk.phase, phase) && !strcmp(mk.name, name)) mk.bytes = 0;
}

struct OpRow {
    std::string op;    // "phase name"
    int64_t calls;     // segments of that op in the iteration
    double ms;         // their time, summed
    double flops, bytes;
    bool comm;         // a collective's (no roofline)
    bool recompute;    // --checkpoint-activations' second forward (not the model's FLOPs)
};

struct OpTable {
    int64_t iteration;
    double total_ms;          // the first mark to the end of the iteration
    std::vector<OpRow> rows;  // by time, the largest first (ties: in order of first appearance)
    double peak_flops, peak_bytes;  // the roofline's (OpTimes'), 0: none
    std::string peak_name;
};

// The marks' segments summed per op (the marks' times already read: op_times_end).
static inline OpTable op_times_table(OpTimes* t) {
    OpTable tab = {t->iteration, 0, {}, t->peak_flops, t->peak_bytes, t->peak_name};
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < t->marks.size(); i++) {  // segment i: mark i to mark i + 1 (the last: to the end)
        const OpMark* mk = &t->marks[i];
        std::string op = std::string(mk->phase) + " " + mk->name;
        auto it = index.find(op);
        if (it == index.end()) {
            it = index.emplace(op, tab.rows.size()).first;
            tab.rows.push_back({op, 0, 0, 0, 0, mk->comm, !strcmp(mk->phase, "recompute")});
        }
        OpRow* r = &tab.rows[it->second];
        double ms = backend_marks_ms(&t->clock, i, i + 1);
        r->calls++;
        r->ms += ms;
        r->flops += mk->flops;
        r->bytes += mk->bytes;
        tab.total_ms += ms;
    }
    std::stable_sort(tab.rows.begin(), tab.rows.end(), [](const OpRow& a, const OpRow& b) { return a.ms > b.ms; });
    return tab;
}

// Closes the last segment, waits for the device, and sums the segments per op. Stops marking.
static inline OpTable op_times_end(OpTimes* t) {
    if (!t->on) return {t->iteration, 0, {}, t->peak_flops, t->peak_bytes, t->peak_name};
    backend_mark(&t->clock, t->marks.size());  // the end of the last segment
    backend_marks_wait(&t->clock, t->marks.size());
    OpTable tab = op_times_table(t);
    t->on = false;
    t->marks.clear();
    return tab;
}

// The table as text: one line per op, its calls, time, share of the iteration, time per call and
// rate; `who` names the rank (or "" on one rank), `how` the clock.
static inline std::string op_table_text(const OpTable* tab, const char* who, const char* how) {
    std::string s;
    char line[256];
    snprintf(line, sizeof line, "time per op, iteration %lld%s: %.3f ms from its start to its end (%s)\n", (long long)tab->iteration, who,
             tab->total_ms, how);
    s += line;
    bool roof = tab->peak_flops > 0 && tab->peak_bytes > 0;
    if (roof) {
        snprintf(line, sizeof line, "  roofline: %s's %.0f TFLOP/s dense and %.2f TB/s (the longer of an op's FLOPs and bytes at those, over its time)\n",
                 tab->peak_name.c_str(), tab->peak_flops / 1e12, tab->peak_bytes / 1e12);
        s += line;
    }
    snprintf(line, sizeof line, "  %-36s %6s %10s %7s %10s %9s %9s%s\n", "op", "calls", "ms", "share", "ms/call", "TFLOP/s", "GB/s",
             roof ? "  roofline" : "");
    s += line;
    // a rate with three significant digits or more (a GPU's 650 TFLOP/s, a CPU's 0.0612)
    auto rate = [](char* out, size_t n, double v) { snprintf(out, n, v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : v >= 1 ? "%.2f" : "%.3g", v); };
    for (const OpRow& r : tab->rows) {
        char tf[16] = "", gb[16] = "";
        double sec = r.ms / 1000.0;
        if (r.flops > 0 && sec > 0) rate(tf, sizeof tf, r.flops / sec / 1e12);
        if (r.bytes > 0 && sec > 0) rate(gb, sizeof gb, r.bytes / sec / 1e9);
        char rl[16] = "";
        if (roof && !r.comm && sec > 0 && (r.flops > 0 || r.bytes > 0))
            snprintf(rl, sizeof rl, "%.1f%%", 100.0 * std::max(r.flops / tab->peak_flops, r.bytes / tab->peak_bytes) / sec);
        snprintf(line, sizeof line, "  %-36s %6lld %10.3f %6.1f%% %10.4f %9s %9s %9s", r.op.c_str(), (long long)r.calls, r.ms,
                 tab->total_ms > 0 ? 100.0 * r.ms / tab->total_ms : 0.0, r.ms / (double)r.calls, tf, gb, rl);
        std::string row = line;
        row.erase(row.find_last_not_of(' ') + 1);  // (no trailing blanks where the last columns are empty)
        s += row + "\n";
    }
    double flops = 0, again = 0;
    for (const OpRow& r : tab->rows) (r.recompute ? again : flops) += r.flops;
    snprintf(line, sizeof line, "  model FLOPs %.0f (the rows' sum), %.3g TFLOP/s over the iteration", flops,
             tab->total_ms > 0 ? flops / (tab->total_ms / 1000.0) / 1e12 : 0.0);
    s += line;
    if (again > 0) {
        snprintf(line, sizeof line, "; %.0f more recomputed", again);
        s += line;
    }
    s += "\n";
    return s;
}
