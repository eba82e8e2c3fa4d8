// test_schedule_knobs — batch-size ramp-up (docs/knobs.md#batch-size-ramp-up), sequence-length curriculum (docs/knobs.md#curriculum-learning) and
// skipped-iteration ranges (docs/knobs.md#skipping-iterations) from llmc/schedule.h, against values computed by hand (shown in the
// comments) and an independent step-by-step count. Every usage error is provoked in a forked child,
// which must exit with status 2 and name the flag on stderr.
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include "llmc/schedule.h"

static int failures = 0;

static void check(const char* what, bool ok, const std::string& detail = "") {
    printf("%-4s %-64s %s\n", ok ? "ok" : "FAIL", what, detail.c_str());
    if (!ok) failures++;
}

static void expect_int(const char* what, int64_t got, int64_t want) {
    check(what, got == want, "got " + std::to_string(got) + " want " + std::to_string(want));
}

// Runs `fn` in a child with stdout discarded and stderr captured. Passes if the child exits with
// status 2 and its stderr contains `needle` (the flag's name, or a message text).
static void expect_usage_error(const char* what, const char* needle, const std::function<void()>& fn) {
    int pipefd[2];
    if (pipe(pipefd) != 0) { perror("pipe"); exit(1); }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(1); }
    if (pid == 0) {
        close(pipefd[0]);
        dup2(pipefd[1], 2);
        if (!freopen("/dev/null", "w", stdout)) _exit(99);
        fn();
        _exit(0);  // no error raised: the parent sees status 0
    }
    close(pipefd[1]);
    std::string err;
    char buf[512];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof buf)) > 0) err.append(buf, (size_t)n);
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    bool ok = code == 2 && err.find(needle) != std::string::npos;
    std::string first_line = err.substr(0, err.find('\n'));
    check(what, ok, "exit " + std::to_string(code) + ": " + first_line);
}

// ---- ramp-up -----------------------------------------------------------------------------------

// A sample-based config with --rampup-batch-size; dp is passed to rampup_init.
static Config ramp_config(const char* spec, int64_t gbs, int64_t mbs, int64_t train_samples) {
    Config c;
    c.rampup_batch_size = spec;
    c.global_batch_size = gbs;
    c.micro_batch_size = mbs;
    c.train_samples = train_samples;
    return c;
}

// Independent count: walk the iterations one by one, each taking the batch of its rung (written
// out here from the ramp-up formula (docs/knobs.md#batch-size-ramp-up), not by calling the library), and stop before a batch that would run
// past train_samples. Equals Megatron's count whenever train_samples lies beyond the ramp.
static int64_t iterations_by_walking(int64_t start, int64_t incr, int64_t ramp, int64_t gbs, int64_t train_samples) {
    double per_rung = (double)ramp / (double)((gbs - start) / incr);
    int64_t consumed = 0, iters = 0;
    for (;;) {
        int64_t batch = consumed > ramp ? gbs : start + (int64_t)((double)consumed / per_rung) * incr;
        if (consumed + batch > train_samples) return iters;
        consumed += batch;
        iters++;
    }
}

static void test_rampup() {
    RampUp r;
    // BigScience 104B: 16 16 6_000_000, GBS 2048, mbs 2 × dp 8 = 16. num_increments = 2032/16 = 127,
    // samples_per_increment = 6e6/127 = 47244.094488...
    Config c = ramp_config("16 16 6000000", 2048, 2, 300000000);
    rampup_init(&r, &c, 8);
    check("104B: enabled", r.enabled);
    check("104B: samples_per_increment = 6e6/127", std::fabs(r.samples_per_increment - 47244.094488188976) < 1e-8);
    expect_int("104B: batch at 0 consumed = START", rampup_global_batch(&r, 0), 16);
    expect_int("104B: 47244 < 1·47244.09: still 16", rampup_global_batch(&r, 47244), 16);
    expect_int("104B: 47245 ≥ 1·47244.09: second rung 32", rampup_global_batch(&r, 47245), 32);
    expect_int("104B: 94488 < 2·47244.09 = 94488.19: still 32", rampup_global_batch(&r, 94488), 32);
    expect_int("104B: 94489: third rung 48", rampup_global_batch(&r, 94489), 48);
    // 5999999/47244.09 = 126.99998 → 16 + 126·16 = 2032
    expect_int("104B: 5999999: rung 126 = 2032", rampup_global_batch(&r, 5999999), 2032);
    // 6e6/(6e6/127) is 127.00000000000001 in doubles (also in Python): 16 + 127·16 = 2048
    expect_int("104B: 6000000 (= SAMPLES, formula) = 2048", rampup_global_batch(&r, 6000000), 2048);
    expect_int("104B: 6000001 (> SAMPLES) = GBS", rampup_global_batch(&r, 6000001), 2048);
    // 300M samples: Megatron's update_train_iters, run in Python, gives 16022 ramp iterations ending
    // at 6000864 consumed, plus (300000000 - 6000864) // 2048 = 143554 → 159576.
    expect_int("104B: train iterations for 300M samples (reference 159576)", rampup_train_iters(&r, 300000000), 159576);
    expect_int("104B: train iterations = independent walk", rampup_train_iters(&r, 300000000),
               iterations_by_walking(16, 16, 6000000, 2048, 300000000));

    // Small case by hand: 2 2 10, GBS 8, mbs 1 × dp 2. num_increments 3, per rung 10/3 = 3.33.
    //   iteration 1: consumed 0  → 2 + floor(0/3.33)·2 = 2
    //   iteration 2: consumed 2  → floor(0.6) = 0 → 2
    //   iteration 3: consumed 4  → floor(1.2) = 1 → 4
    //   iteration 4: consumed 8  → floor(2.4) = 2 → 6
    //   consumed 14 > 10: ramp over after 4 iterations; then (100 - 14) // 8 = 10 → 14 iterations.
    Config s = ramp_config("2 2 10", 8, 1, 100);
    rampup_init(&r, &s, 2);
    expect_int("small: batch at 0", rampup_global_batch(&r, 0), 2);
    expect_int("small: batch at 2", rampup_global_batch(&r, 2), 2);
    expect_int("small: batch at 4", rampup_global_batch(&r, 4), 4);
    expect_int("small: batch at 8", rampup_global_batch(&r, 8), 6);
    expect_int("small: batch at 14 (past ramp)", rampup_global_batch(&r, 14), 8);
    expect_int("small: train iterations for 100 samples (hand: 14)", rampup_train_iters(&r, 100), 14);
    expect_int("small: train iterations = independent walk", rampup_train_iters(&r, 100), iterations_by_walking(2, 2, 10, 8, 100));
    // After the ramp, k iterations have consumed 14 + 8·(k - 4): 14 take 94, 15 take 102. So 101
    // samples give 14 (the partial 15th batch is dropped) and 102 give 15.
    expect_int("small: 101 samples, partial last batch dropped", rampup_train_iters(&r, 101), 14);
    expect_int("small: 102 samples", rampup_train_iters(&r, 102), 15);
    // train_samples inside the ramp: Megatron's (8 - 14) // 8 floors to -1 → 4 - 1 = 3
    expect_int("small: 8 samples ends inside the ramp (Python floor: 3)", rampup_train_iters(&r, 8), 3);

    // BigScience 176B: 192 16 9_765_625, GBS 2048, mbs 2 × dp 8 = 16: 116 rungs of 84186.42 samples
    Config b = ramp_config("192 16 9765625", 2048, 2, 220000000);
    rampup_init(&r, &b, 8);
    expect_int("176B: batch at 0", rampup_global_batch(&r, 0), 192);
    expect_int("176B: 84186 < 84186.42: 192", rampup_global_batch(&r, 84186), 192);
    expect_int("176B: 84187: 208", rampup_global_batch(&r, 84187), 208);
    expect_int("176B: train iterations = independent walk", rampup_train_iters(&r, 220000000),
               iterations_by_walking(192, 16, 9765625, 2048, 220000000));

    // START == GBS: no ramp (Megatron divides by zero), every batch is GBS.
    Config e = ramp_config("8 8 1000", 8, 1, 100);
    rampup_init(&r, &e, 2);
    expect_int("START == GBS: batch at 0", rampup_global_batch(&r, 0), 8);
    expect_int("START == GBS: batch at 500", rampup_global_batch(&r, 500), 8);
    expect_int("START == GBS: 100 samples → 12 iterations", rampup_train_iters(&r, 100), 12);

    // Off: the constant global batch and train_samples // GBS.
    Config off = ramp_config("", 8, 1, 100);
    rampup_init(&r, &off, 2);
    check("off: not enabled", !r.enabled);
    expect_int("off: batch = GBS", rampup_global_batch(&r, 0), 8);
    expect_int("off: 100 samples → 12 iterations", rampup_train_iters(&r, 100), 12);

    const char* F = "--rampup-batch-size";
    expect_usage_error("ramp error: two values", F, [] { RampUp x; Config k = ramp_config("16 16", 2048, 2, 1000); rampup_init(&x, &k, 8); });
    expect_usage_error("ramp error: trailing junk '16x'", F, [] { RampUp x; Config k = ramp_config("16x 16 100", 2048, 2, 1000); rampup_init(&x, &k, 8); });
    expect_usage_error("ramp error: negative '-16'", F, [] { RampUp x; Config k = ramp_config("-16 16 100", 2048, 2, 1000); rampup_init(&x, &k, 8); });
    expect_usage_error("ramp error: --train-iters run", F, [] {
        RampUp x; Config k = ramp_config("16 16 100", 2048, 2, 0); k.train_iters = 10; rampup_init(&x, &k, 8); });
    expect_usage_error("ramp error: START 0", "START must be > 0", [] { RampUp x; Config k = ramp_config("0 16 100", 2048, 2, 1000); rampup_init(&x, &k, 8); });
    expect_usage_error("ramp error: INCR 0", "INCR must be > 0", [] { RampUp x; Config k = ramp_config("16 0 100", 2048, 2, 1000); rampup_init(&x, &k, 8); });
    expect_usage_error("ramp error: START > GBS", "exceeds --global-batch-size", [] {
        RampUp x; Config k = ramp_config("4096 16 100", 2048, 2, 1000); rampup_init(&x, &k, 8); });
    expect_usage_error("ramp error: GBS - START not a multiple of INCR", "is not a multiple of INCR 48", [] {
        RampUp x; Config k = ramp_config("16 48 100", 2048, 2, 1000); rampup_init(&x, &k, 8); });
    // 104B's rungs with mbs 2 × dp 16 = 32: START 16 is not a multiple of 32 (checked before INCR)
    expect_usage_error("ramp error: START not divisible by mbs×dp", "START 16 is not divisible by --micro-batch-size 2 x data-parallel size 16 = 32", [] {
        RampUp x; Config k = ramp_config("16 16 100", 2048, 2, 1000); rampup_init(&x, &k, 16); });
    // 176B's rungs with dp 16: INCR 16 is not a multiple of 32 (START 192 is)
    expect_usage_error("ramp error: INCR not divisible by mbs×dp", "INCR 16 is not divisible by --micro-batch-size 2 x data-parallel size 16 = 32", [] {
        RampUp x; Config k = ramp_config("192 16 9765625", 2048, 2, 1000); rampup_init(&x, &k, 16); });
    expect_usage_error("ramp error: SAMPLES 0 with rungs to climb", "SAMPLES must be > 0", [] {
        RampUp x; Config k = ramp_config("16 16 0", 2048, 2, 1000); rampup_init(&x, &k, 8); });
}

// ---- curriculum ----------------------------------------------------------------------------------

static Config cl_config(const char* schedule) {
    Config c;
    c.seq_length = 2048;
    c.curriculum_learning = true;
    c.cl_schedule = schedule;
    return c;
}

static void test_curriculum() {
    Curriculum cl;
    // MDS tests/ds_config_cl.json: 64 → 2048, step 8, over 36000 steps; max - min = 1984.
    Config c = cl_config("fixed_linear");
    c.cl_min_seqlen = 64; c.cl_total_steps = 36000;  // --cl-max-seqlen 0: --seq-length 2048
    curriculum_init(&cl, &c);
    expect_int("linear: max from --seq-length", cl.max_d, 2048);
    expect_int("linear: t=1: floor(1984/36000 + 64) = 64", curriculum_seqlen(&cl, 1), 64);
    expect_int("linear: t=100: floor(69.51) = 69 → 64", curriculum_seqlen(&cl, 100), 64);
    expect_int("linear: t=200: floor(75.02) = 75 → 72", curriculum_seqlen(&cl, 200), 72);
    expect_int("linear: t=9000: 1984/4 + 64 = 560", curriculum_seqlen(&cl, 9000), 560);
    expect_int("linear: t=18000: 1984/2 + 64 = 1056", curriculum_seqlen(&cl, 18000), 1056);
    expect_int("linear: t=36000: 2048", curriculum_seqlen(&cl, 36000), 2048);
    // t=40000: floor(2268.4) = 2268 → 2264 → min(2264, 2048) = 2048
    expect_int("linear: t=40000: clamped to 2048", curriculum_seqlen(&cl, 40000), 2048);
    // explicit --cl-max-seqlen 1024 (max - min = 960): t=18000 → 480 + 64 = 544
    c.cl_max_seqlen = 1024;
    curriculum_init(&cl, &c);
    expect_int("linear max 1024: t=18000: 544", curriculum_seqlen(&cl, 18000), 544);
    expect_int("linear max 1024: t=10^9: 1024 (no overflow)", curriculum_seqlen(&cl, 1000000000), 1024);

    // fixed_root, degree 2: d = floor(sqrt(t/36000)·1984 + 64)
    Config r = cl_config("fixed_root");
    r.cl_min_seqlen = 64; r.cl_total_steps = 36000; r.cl_root_degree = 2;
    curriculum_init(&cl, &r);
    expect_int("root 2: t=1: sqrt(1/36000)·1984 = 10.46 → 74 → 72", curriculum_seqlen(&cl, 1), 72);
    expect_int("root 2: t=4000: (1/3)·1984 = 661.3 → 725 → 720", curriculum_seqlen(&cl, 4000), 720);
    expect_int("root 2: t=9000: (1/2)·1984 + 64 = 1056", curriculum_seqlen(&cl, 9000), 1056);
    expect_int("root 2: t=36000: 2048", curriculum_seqlen(&cl, 36000), 2048);
    expect_int("root 2: t=50000: 2048", curriculum_seqlen(&cl, 50000), 2048);
    // degree 0.5 squares the fraction: t=18000 → 1984/4 + 64 = 560. At t=10^15 the unclamped
    // length (10^15/36000)^2·1984 ≈ 1.5e24 is far beyond int64: it must still come out as 2048.
    r.cl_root_degree = 0.5;
    curriculum_init(&cl, &r);
    expect_int("root 0.5: t=18000: 560", curriculum_seqlen(&cl, 18000), 560);
    expect_int("root 0.5: t=10^15: 2048 (no int64 overflow)", curriculum_seqlen(&cl, 1000000000000000), 2048);

    // fixed_discrete: 128 through iteration 100, 512 through 300, then 1024
    Config d = cl_config("fixed_discrete");
    d.cl_discrete_seqlens = "128 512 1024"; d.cl_discrete_steps = "100 300";
    curriculum_init(&cl, &d);
    expect_int("discrete: t=1", curriculum_seqlen(&cl, 1), 128);
    expect_int("discrete: t=100 (last of the first)", curriculum_seqlen(&cl, 100), 128);
    expect_int("discrete: t=101", curriculum_seqlen(&cl, 101), 512);
    expect_int("discrete: t=300", curriculum_seqlen(&cl, 300), 512);
    expect_int("discrete: t=301", curriculum_seqlen(&cl, 301), 1024);
    expect_int("discrete: t=10^6", curriculum_seqlen(&cl, 1000000), 1024);

    // off: always --seq-length
    Config off;
    off.seq_length = 2048;
    curriculum_init(&cl, &off);
    check("off: not enabled", !cl.enabled);
    expect_int("off: t=1 → seq_length", curriculum_seqlen(&cl, 1), 2048);

    expect_usage_error("cl error: --cl-min-seqlen without --curriculum-learning", "--cl-min-seqlen needs --curriculum-learning", [] {
        Curriculum x; Config k; k.cl_min_seqlen = 64; curriculum_init(&x, &k); });
    expect_usage_error("cl error: --cl-schedule without --curriculum-learning", "--cl-schedule needs --curriculum-learning", [] {
        Curriculum x; Config k; k.cl_schedule = "fixed_root"; curriculum_init(&x, &k); });
    expect_usage_error("cl error: min 0", "--cl-min-seqlen", [] {
        Curriculum x; Config k = cl_config("fixed_linear"); k.cl_total_steps = 10; curriculum_init(&x, &k); });
    expect_usage_error("cl error: min > max", "--cl-min-seqlen", [] {
        Curriculum x; Config k = cl_config("fixed_linear"); k.cl_min_seqlen = 512; k.cl_max_seqlen = 256; k.cl_total_steps = 10; curriculum_init(&x, &k); });
    expect_usage_error("cl error: max > seq_length", "--cl-max-seqlen 4096 exceeds --seq-length 2048", [] {
        Curriculum x; Config k = cl_config("fixed_linear"); k.cl_min_seqlen = 64; k.cl_max_seqlen = 4096; k.cl_total_steps = 10; curriculum_init(&x, &k); });
    expect_usage_error("cl error: min not a multiple of the step", "--cl-min-seqlen 60 is not a multiple of --cl-difficulty-step 8", [] {
        Curriculum x; Config k = cl_config("fixed_linear"); k.cl_min_seqlen = 60; k.cl_total_steps = 10; curriculum_init(&x, &k); });
    expect_usage_error("cl error: linear without total steps", "--cl-total-steps", [] {
        Curriculum x; Config k = cl_config("fixed_linear"); k.cl_min_seqlen = 64; curriculum_init(&x, &k); });
    expect_usage_error("cl error: root without degree", "--cl-root-degree", [] {
        Curriculum x; Config k = cl_config("fixed_root"); k.cl_min_seqlen = 64; k.cl_total_steps = 10; curriculum_init(&x, &k); });
    expect_usage_error("cl error: root degree on fixed_linear", "--cl-root-degree does not apply to --cl-schedule fixed_linear", [] {
        Curriculum x; Config k = cl_config("fixed_linear"); k.cl_min_seqlen = 64; k.cl_total_steps = 10; k.cl_root_degree = 2; curriculum_init(&x, &k); });
    expect_usage_error("cl error: discrete lists on fixed_root", "--cl-discrete-seqlens does not apply", [] {
        Curriculum x; Config k = cl_config("fixed_root"); k.cl_min_seqlen = 64; k.cl_total_steps = 10; k.cl_root_degree = 2;
        k.cl_discrete_seqlens = "64 128"; curriculum_init(&x, &k); });
    expect_usage_error("cl error: --cl-min-seqlen on fixed_discrete", "--cl-min-seqlen does not apply to --cl-schedule fixed_discrete", [] {
        Curriculum x; Config k = cl_config("fixed_discrete"); k.cl_min_seqlen = 64; k.cl_discrete_seqlens = "64 128"; k.cl_discrete_steps = "10";
        curriculum_init(&x, &k); });
    expect_usage_error("cl error: discrete without lists", "--cl-discrete-seqlens and --cl-discrete-steps", [] {
        Curriculum x; Config k = cl_config("fixed_discrete"); k.cl_discrete_seqlens = "64"; curriculum_init(&x, &k); });
    expect_usage_error("cl error: discrete lengths = steps", "--cl-discrete-seqlens: 2 lengths for 2", [] {
        Curriculum x; Config k = cl_config("fixed_discrete"); k.cl_discrete_seqlens = "64 128"; k.cl_discrete_steps = "10 20"; curriculum_init(&x, &k); });
    expect_usage_error("cl error: discrete length junk", "--cl-discrete-seqlens: '128x'", [] {
        Curriculum x; Config k = cl_config("fixed_discrete"); k.cl_discrete_seqlens = "64 128x"; k.cl_discrete_steps = "10"; curriculum_init(&x, &k); });
    expect_usage_error("cl error: discrete length > seq_length", "--cl-discrete-seqlens: 4096 is outside", [] {
        Curriculum x; Config k = cl_config("fixed_discrete"); k.cl_discrete_seqlens = "64 4096"; k.cl_discrete_steps = "10"; curriculum_init(&x, &k); });
    expect_usage_error("cl error: discrete length 0", "--cl-discrete-seqlens: 0 is outside", [] {
        Curriculum x; Config k = cl_config("fixed_discrete"); k.cl_discrete_seqlens = "0 64"; k.cl_discrete_steps = "10"; curriculum_init(&x, &k); });
    expect_usage_error("cl error: discrete lengths decreasing", "--cl-discrete-seqlens must be non-decreasing", [] {
        Curriculum x; Config k = cl_config("fixed_discrete"); k.cl_discrete_seqlens = "128 64"; k.cl_discrete_steps = "10"; curriculum_init(&x, &k); });
    expect_usage_error("cl error: discrete steps not increasing", "--cl-discrete-steps must be strictly increasing", [] {
        Curriculum x; Config k = cl_config("fixed_discrete"); k.cl_discrete_seqlens = "64 128 256"; k.cl_discrete_steps = "10 10"; curriculum_init(&x, &k); });
    expect_usage_error("cl error: discrete step 0", "--cl-discrete-steps", [] {
        Curriculum x; Config k = cl_config("fixed_discrete"); k.cl_discrete_seqlens = "64 128"; k.cl_discrete_steps = "0"; curriculum_init(&x, &k); });
}

// ---- skip ranges ---------------------------------------------------------------------------------

static void test_skip_ranges() {
    SkipRanges s;
    // BigScience 104B's ranges
    skip_ranges_parse(&s, "13251-14000 16651-19500");
    check("104B: two ranges", s.ranges.size() == 2, skip_ranges_string(&s));
    check("104B: 13250 not skipped", !skip_ranges_contains(&s, 13250));
    check("104B: 13251 (first) skipped", skip_ranges_contains(&s, 13251));
    check("104B: 14000 (last, inclusive) skipped", skip_ranges_contains(&s, 14000));
    check("104B: 14001 not skipped", !skip_ranges_contains(&s, 14001));
    check("104B: 16650 not skipped", !skip_ranges_contains(&s, 16650));
    check("104B: 16651 skipped", skip_ranges_contains(&s, 16651));
    check("104B: 19500 skipped", skip_ranges_contains(&s, 19500));
    check("104B: 19501 not skipped", !skip_ranges_contains(&s, 19501));
    skip_ranges_parse(&s, "1-5 2-6");
    check("merge: 1-5 2-6 → 1-6", skip_ranges_string(&s) == "1-6", skip_ranges_string(&s));
    skip_ranges_parse(&s, "10-20 1-3 15-30 3-4");
    check("sort and merge: → 1-4 10-30", skip_ranges_string(&s) == "1-4 10-30", skip_ranges_string(&s));
    check("contains: 4 yes, 5 no, 9 no, 10 yes, 30 yes, 31 no",
          skip_ranges_contains(&s, 4) && !skip_ranges_contains(&s, 5) && !skip_ranges_contains(&s, 9) &&
              skip_ranges_contains(&s, 10) && skip_ranges_contains(&s, 30) && !skip_ranges_contains(&s, 31));
    skip_ranges_parse(&s, "1-5 6-8");
    check("touching ranges stay two (as MDS): 1-5 6-8", skip_ranges_string(&s) == "1-5 6-8", skip_ranges_string(&s));
    skip_ranges_parse(&s, "7-7");
    check("single iteration 7-7: 6 no, 7 yes, 8 no",
          !skip_ranges_contains(&s, 6) && skip_ranges_contains(&s, 7) && !skip_ranges_contains(&s, 8));
    skip_ranges_parse(&s, "");
    check("empty spec: no ranges", s.ranges.empty() && !skip_ranges_contains(&s, 1) && skip_ranges_string(&s).empty());

    const char* MDS = "--skip-train-iteration-range: skip train iterations should be specified as two numbers, i.e. start-end (got '";
    const char* bad[] = {"5", "1-2-3", "a-b", "1-2x", "-1-5", "1-", "-5", "+1-5"};
    for (const char* spec : bad) {
        std::string what = std::string("skip error: '") + spec + "'";
        std::string needle = std::string(MDS) + spec + "')";
        expect_usage_error(what.c_str(), needle.c_str(), [spec] { SkipRanges x; skip_ranges_parse(&x, std::string("3-4 ") + spec); });
    }
    expect_usage_error("skip error: start 0", "--skip-train-iteration-range: iterations are numbered from 1 (got '0-5')", [] {
        SkipRanges x; skip_ranges_parse(&x, "0-5"); });
    expect_usage_error("skip error: end < start", "--skip-train-iteration-range: end of skip range cannot be smaller than start", [] {
        SkipRanges x; skip_ranges_parse(&x, "7-3"); });
}

int main() {
    test_rampup();
    test_curriculum();
    test_skip_ranges();
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
