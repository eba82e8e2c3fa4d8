// test_op_times — --time-ops' table (llmc/op_times.h) from marks of known times, against sums and
// rates worked by hand: segments summed per op in order of first appearance, sorted by time, calls
// counted, the rates and the roofline column (the longer of FLOPs at the peak and bytes at the
// bandwidth, over the time), none without a peak and none for a collective; the recomputed
// forward's FLOPs apart from the model's; bytes taken back; marking only in the iteration asked for.
#include "llmc/op_times.h"

static int failures = 0;

static void expect(const char* what, bool ok) {
    printf("%-4s %s\n", ok ? "ok" : "FAIL", what);
    if (!ok) failures++;
}

static bool has(const std::string& text, const char* s) { return text.find(s) != std::string::npos; }

int main() {
    // marks at 0, 1, 2, 4.5 ms; the end at 10: segments start 1, x 1, y 2.5, x 5.5
    OpTimes t;
    t.iteration = 7;
    t.marks = {{"step", "iteration start", 0, 0}, {"fwd", "x", 1e9, 0}, {"fwd", "y", 0, 1e8}, {"fwd", "x", 1e9, 0}};
    t.clock.ms = {0, 1, 2, 4.5, 10};
    OpTable tab = op_times_table(&t);
    expect("three ops, largest first: fwd x, fwd y, step iteration start",
           tab.rows.size() == 3 && tab.rows[0].op == "fwd x" && tab.rows[1].op == "fwd y" && tab.rows[2].op == "step iteration start");
    expect("fwd x: 2 calls, 6.5 ms, 2e9 FLOPs; fwd y: 1 call, 2.5 ms, 1e8 bytes; total 10 ms",
           tab.rows[0].calls == 2 && tab.rows[0].ms == 6.5 && tab.rows[0].flops == 2e9 && tab.rows[1].calls == 1 && tab.rows[1].ms == 2.5 &&
               tab.rows[1].bytes == 1e8 && tab.total_ms == 10);
    std::string text = op_table_text(&tab, "", "test clock");
    printf("%s", text.c_str());
    // x: 2e9 FLOPs in 6.5 ms = 0.3077 TFLOP/s; y: 1e8 bytes in 2.5 ms = 40 GB/s
    expect("header, rows with share, ms/call and rates; the FLOPs line",
           has(text, "time per op, iteration 7: 10.000 ms from its start to its end (test clock)") &&
               has(text, "fwd x                                     2      6.500   65.0%     3.2500     0.308\n") &&
               has(text, "fwd y                                     1      2.500   25.0%     2.5000                40.0\n") &&
               has(text, "model FLOPs 2000000000 (the rows' sum), 0.2 TFLOP/s over the iteration"));
    expect("no roofline without a peak", !has(text, "roofline"));

    // a roofline of 1 TFLOP/s and 100 GB/s: x needs 2 ms of its 6.5 (30.8%), y 1 ms of its 2.5 (40.0%)
    t.peak_flops = 1e12, t.peak_bytes = 1e11, t.peak_name = "test-gpu";
    tab = op_times_table(&t);
    text = op_table_text(&tab, ", pipeline stage 1", "test clock");
    printf("%s", text.c_str());
    expect("the roofline: its peaks named, x at 30.8%, y at 40.0%, none for the start",
           has(text, "time per op, iteration 7, pipeline stage 1:") && has(text, "roofline: test-gpu's 1 TFLOP/s dense and 0.10 TB/s") &&
               has(text, "     0.308               30.8%\n") && has(text, "                40.0     40.0%\n") &&
               has(text, "step iteration start                      1      1.000   10.0%     1.0000\n"));

    // marking: only in the iteration asked for, and a table only from it
    OpTimes m;
    m.iteration = 3;
    op_times_begin(&m, 2);
    op_mark(&m, "fwd", "x", 1, 0);
    bool off = !m.on && m.marks.empty() && op_times_end(&m).rows.empty();
    op_times_begin(&m, 3);
    op_mark(&m, "fwd", "x", 1, 0);
    op_mark(&m, "bwd", "x", 2, 0);
    OpTable got = op_times_end(&m);
    bool on = got.rows.size() == 3 && got.total_ms >= 0 && !m.on && m.marks.empty();
    op_mark(&m, "fwd", "x", 1, 0);
    expect("marks only in the iteration asked for: nothing in another, its start and ops in it, nothing after", off && on && m.marks.empty());
    // a collective: GB/s, no roofline; the recomputed forward: apart in the FLOPs line
    OpTimes c;
    c.iteration = 1, c.peak_flops = 1e12, c.peak_bytes = 1e11, c.peak_name = "test-gpu";
    c.marks = {{"step", "iteration start", 0, 0}, {"fwd", "all-reduce", 0, 1e8, true}, {"recompute", "x", 5e8, 0}, {"bwd", "x", 1e9, 0}};
    c.clock.ms = {0, 1, 3, 4, 6};
    OpTable ct = op_times_table(&c);
    text = op_table_text(&ct, "", "test clock");
    printf("%s", text.c_str());
    expect("a collective's row: 50 GB/s and no roofline; the FLOPs line: 1e9 the model's, 5e8 more recomputed",
           has(text, "fwd all-reduce                            1      2.000   33.3%     2.0000                50.0\n") &&
               has(text, "recompute x                               1      1.000   16.7%     1.0000       0.5               50.0%\n") &&
               has(text, "model FLOPs 1000000000 (the rows' sum), 0.167 TFLOP/s over the iteration; 500000000 more recomputed\n"));
    // bytes taken back (an update that did not run)
    OpTimes u;
    u.iteration = 1;
    op_times_begin(&u, 1);
    op_mark(&u, "step", "optimizer", 0, 4e9);
    op_mark(&u, "step", "gradient all-gather", 0, 1e9);
    op_mark(&u, "step", "optimizer", 0, 4e9);
    op_marks_unbytes(&u, "step", "optimizer");
    expect("op_marks_unbytes: the optimizer's marks lose their bytes, the others keep theirs",
           u.marks[1].bytes == 0 && u.marks[3].bytes == 0 && u.marks[2].bytes == 1e9);
    op_times_end(&u);
    OpTimes none;
    op_times_begin(&none, 1);
    expect("--time-ops 0 marks nothing", !none.on && none.marks.empty());
    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
