// dev/cuda/lab.h — what every kernel-lab program (dev/cuda/*.cu) shares: flags, inputs, the check
// against the CPU reference, and the timing. Numbered variants of a kernel, each checked
// against the CPU op (llmc/cpu) before it is timed; the winner moves into llmc/cuda.
//
// A lab program builds its inputs (deterministic, llmc/rand.h), runs the CPU op once as the
// reference, then for each variant: restores the inputs, runs the variant once, downloads its
// outputs and compares them with the reference; only a variant that passes is timed. Timing: cudaEvents
// around each call on the default stream, warm-up calls first, the median of the repeats (the
// median, not the mean: one slow call — a clock ramp, another process — moves a mean, not a median).
// Inputs that a variant overwrites (in-place ops, accumulated gradients) are restored before every
// timed call, outside the events.
//
// Throughput: GB/s counts each input read once and each output written once (a buffer that is
// accumulated into counts twice: read and written); TFLOP/s only where the op is a matrix product.
//
// Under the CPU emulation (g++ -Itest/cuda_emu -DKEEL_CUDA_EMULATION, `make cuda-lab-emu`) the
// same programs run their checks at small sizes and time nothing: the emulation's events would give
// the CPU's time for the emulated kernels, which says nothing of a GPU's.
#pragma once
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "llmc/cuda/common.cuh"
#include "llmc/rand.h"

// ---- flags ---------------------------------------------------------------------------------------
// GPT-2 124M shapes by default. B=8 rather than the trainer's 16: the CPU reference of attention and
// the classifier runs once per program and is the slow part of a lab run.
struct LabArgs {
    int B = 8, T = 1024, C = 768, NH = 12, V = 50257, Vp = 50304;
    int warmup = 3, repeats = 20;  // timed calls: the median of `repeats` after `warmup` untimed ones
    int variant = -1;              // -1: every variant
    int square = 8192;             // the side of matmul.cu's large square products (and half of it)
};

static const char* LAB_USAGE =
    "  -B N  batch [8]     -T N  time [1024]     -C N  channels [768]     -NH N  heads [12]\n"
    "  -V N  vocabulary [50257]     -Vp N  padded vocabulary [50304]\n"
    "  -w N  warm-up calls [3]     -r N  timed calls, median reported [20]     -v N  only variant N\n"
    "  -S N  matmul: the side of the large square products [8192]\n";

// Strict integer: the whole word, in range (a typo is an error, never a 0).
static int lab_parse_int(const char* flag, const char* s, int lo) {
    char* end = nullptr;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > 1 << 30) keel_die("%s: expected an integer >= %d, got '%s'", flag, lo, s);
    return (int)v;
}

static LabArgs lab_parse(int argc, char** argv, const char* what) {
    LabArgs a;
    struct Flag { const char* name; int* dst; int lo; } flags[] = {
        {"-B", &a.B, 1}, {"-T", &a.T, 1}, {"-C", &a.C, 1}, {"-NH", &a.NH, 1}, {"-V", &a.V, 1}, {"-Vp", &a.Vp, 1},
        {"-w", &a.warmup, 0}, {"-r", &a.repeats, 1}, {"-v", &a.variant, 0}, {"-S", &a.square, 2}};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: %s [flags]   — %s\n%s", argv[0], what, LAB_USAGE);
            exit(0);
        }
        bool known = false;
        for (Flag& f : flags)
            if (!strcmp(argv[i], f.name)) {
                if (i + 1 >= argc) keel_die("%s needs a value\n%s", f.name, LAB_USAGE);
                *f.dst = lab_parse_int(f.name, argv[++i], f.lo);
                known = true;
            }
        if (!known) keel_die("unknown flag '%s'\n%s", argv[i], LAB_USAGE);
    }
    if (a.C % a.NH) keel_die("-NH %d must divide -C %d", a.NH, a.C);
    if (a.Vp < a.V) keel_die("-Vp %d must be at least -V %d", a.Vp, a.V);
#ifdef KEEL_CUDA_EMULATION
    a.warmup = 0;
#endif
    return a;
}

static bool lab_wants(const LabArgs& a, int variant) { return a.variant < 0 || a.variant == variant; }

// ---- inputs --------------------------------------------------------------------------------------
// N(0, sigma) keyed by `key`: every lab run sees the same inputs.
static std::vector<float> lab_randn(size_t n, uint64_t key, double sigma = 1.0) {
    std::vector<float> v(n);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) v[i] = (float)(sigma * rng_normal(2024, 77, key, i));
    return v;
}

// Storage type conversions of whole buffers (the kernels read bf16; the CPU reference reads the
// same values as fp32, so both compute on identical inputs).
template <typename L> static std::vector<L> lab_to(const std::vector<float>& v) {
    std::vector<L> r(v.size());
#pragma omp parallel for
    for (size_t i = 0; i < v.size(); i++) r[i] = keel_cuda::from_f32<L>(v[i]);
    return r;
}
template <typename L> static std::vector<float> lab_from(const std::vector<L>& v) {
    std::vector<float> r(v.size());
#pragma omp parallel for
    for (size_t i = 0; i < v.size(); i++) r[i] = keel_cuda::to_f32(v[i]);
    return r;
}
// v rounded to L and back: the fp32 values the CPU reference should see.
template <typename L> static std::vector<float> lab_round(const std::vector<float>& v) { return lab_from(lab_to<L>(v)); }

// A device copy of a host buffer, and the way back. Device buffers live until the process ends.
template <typename T> static T* lab_upload(const std::vector<T>& h) {
    T* d = nullptr;
    CUDA_CHECK(cudaMalloc((void**)&d, h.size() * sizeof(T) + 16));
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T> static void lab_set(T* d, const std::vector<T>& h) {
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <typename T> static std::vector<T> lab_download(const T* d, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
// A device-to-device restore (for the timed calls: cheap, and outside the events).
template <typename T> static void lab_restore(T* d, const T* pristine, size_t n) {
    CUDA_CHECK(cudaMemcpy(d, pristine, n * sizeof(T), cudaMemcpyDeviceToDevice));
}

// ---- the check -----------------------------------------------------------------------------------
// Element i passes when |got - want| <= rtol·(|want| + floor·rms), rms taken over the element's
// segment: `seg` consecutive elements (one head's channels of one position, say), or the whole
// buffer for seg = 0. floor = 0 is a pure relative bound (probabilities: a wrong small probability
// fails however small). A floor > 0 is for sums that can cancel (outputs, gradients): their
// rounding error scales with the size of their terms, which the local rms measures, not with the
// element itself; a local rather than a global rms keeps the bound tight where values are small.
struct LabCheck {
    std::string what;
    double worst = 0;  // the largest |got - want| / (|want| + floor·rms), NaN counts as infinite
    size_t worst_i = 0, bad = 0;
    float got = 0, want = 0;
    double rtol = 0;
};

static LabCheck lab_compare(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                            double rtol, double floor, size_t seg = 0) {
    LabCheck c;
    c.what = what;
    c.rtol = rtol;
    if (got.size() != want.size()) keel_die("%s: %zu values, the reference has %zu", what.c_str(), got.size(), want.size());
    size_t n = want.size(), len = seg ? seg : (n ? n : 1);
    for (size_t s0 = 0; s0 < n; s0 += len) {
        size_t s1 = std::min(n, s0 + len);
        double ss = 0;
        for (size_t i = s0; i < s1; i++) ss += (double)want[i] * want[i];
        double scale = floor * std::sqrt(ss / (double)(s1 - s0));
        for (size_t i = s0; i < s1; i++) {
            double den = std::fabs((double)want[i]) + scale;
            double err = std::fabs((double)got[i] - (double)want[i]);
            double r = den > 0 ? err / den : (err > 0 ? INFINITY : 0);
            if (std::isnan(r)) r = INFINITY;
            if (r > rtol) c.bad++;
            if (r > c.worst || i == 0) { c.worst = r; c.worst_i = i; c.got = got[i]; c.want = want[i]; }
        }
    }
    return c;
}

// A variant's row: its checks, then (if they all pass) its time.
struct LabRow {
    int variant;
    const char* name;
    std::vector<LabCheck> checks;
};

static bool lab_row_ok(const LabRow& r) {
    for (const LabCheck& c : r.checks)
        if (c.bad) return false;
    return true;
}

static void lab_print_checks(const LabRow& r) {
    for (const LabCheck& c : r.checks)
        printf("    %s %-26s max rel err %.2e (bound %.0e)%s\n", c.bad ? "FAIL" : "ok  ", c.what.c_str(), c.worst, c.rtol,
               c.bad ? (" — " + std::to_string(c.bad) + " elements out, worst [" + std::to_string(c.worst_i) + "] got " +
                        std::to_string(c.got) + " want " + std::to_string(c.want)).c_str()
                     : "");
}

// ---- timing --------------------------------------------------------------------------------------
// The median time of one call of `run`, ms; `reset` (may be empty) restores what run overwrites and
// runs before each call, outside the events. 0 under the emulation (its events time the CPU, not a GPU).
[[maybe_unused]] static double lab_time_ms(const LabArgs& a, const std::function<void()>& run, const std::function<void()>& reset) {
#ifdef KEEL_CUDA_EMULATION
    (void)a; (void)run; (void)reset;
    return 0;
#else
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<float> ms;
    for (int i = 0; i < a.warmup + a.repeats; i++) {
        if (reset) reset();
        CUDA_CHECK(cudaEventRecord(start, MAIN_STREAM));
        run();
        CUDA_CHECK(cudaEventRecord(stop, MAIN_STREAM));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
        if (i >= a.warmup) ms.push_back(t);
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    std::sort(ms.begin(), ms.end());
    size_t n = ms.size();
    return n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
#endif
}

// ---- one op's table ------------------------------------------------------------------------------
// What a lab program registers per variant: a name, how to run it on the current device buffers,
// how to check its outputs (restore inputs, run once, compare), and what to restore before a timed call.
struct LabVariant {
    int number;
    const char* name;  // "naive", "keel" (the launcher in llmc/cuda), or the idea a candidate tries
    std::function<void()> run;
    bool timing_only = false;  // a measurement, not a candidate (e.g. a step left out): timed, never checked
    std::function<std::vector<LabCheck>()> check = nullptr;  // this variant's own check (its own reference), else the op's
};

struct LabOp {
    std::string title;   // e.g. "attention_forward B=8 T=1024 C=768 NH=12 bf16"
    double bytes = 0;    // inputs read once + outputs written once
    double flops = 0;    // 0: not a matrix product (no TFLOP/s column)
    std::function<void()> reset;                        // restore every input the op overwrites
    std::function<std::vector<LabCheck>()> check;       // compare the device outputs with the reference
    std::vector<LabVariant> variants;
};

// Runs every (selected) variant of the op: reset, run once, check; time only if the check passed.
// Returns the number of variants that failed their check.
static int lab_run(const LabArgs& a, const LabOp& op) {
    printf("\n%s\n", op.title.c_str());
    printf("  bytes %.3g (inputs read once + outputs written once)%s\n", op.bytes,
           op.flops > 0 ? (", FLOPs " + std::to_string(op.flops / 1e9).substr(0, 8) + " G").c_str() : "");
    printf("  %-3s %-18s %12s %10s %10s\n", "#", "variant", "ms (median)", "GB/s", "TFLOP/s");
    int failed = 0;
    for (const LabVariant& v : op.variants) {
        if (!lab_wants(a, v.number)) continue;
        if (v.timing_only) {
#ifndef KEEL_CUDA_EMULATION
            double ms = lab_time_ms(a, v.run, op.reset);
            printf("  %-3d %-18s %12.4f %10s %10s   (timing only: a measurement, its result is not checked)\n", v.number, v.name, ms, "-", "-");
#endif
            continue;
        }
        if (op.reset) op.reset();
        v.run();
        CUDA_CHECK(cudaDeviceSynchronize());
        LabRow row{v.number, v.name, v.check ? v.check() : op.check()};
        if (!lab_row_ok(row)) {
            printf("  %-3d %-18s %12s   (wrong result: not timed)\n", v.number, v.name, "-");
            lab_print_checks(row);
            failed++;
            continue;
        }
#ifdef KEEL_CUDA_EMULATION
        printf("  %-3d %-18s %12s %10s %10s   (emulation: checked, not timed)\n", v.number, v.name, "-", "-", "-");
#else
        double ms = lab_time_ms(a, v.run, op.reset);
        char tf[32] = "-";
        if (op.flops > 0) snprintf(tf, sizeof tf, "%.1f", op.flops / (ms * 1e-3) / 1e12);
        printf("  %-3d %-18s %12.4f %10.1f %10s\n", v.number, v.name, ms, op.bytes / (ms * 1e-3) / 1e9, tf);
#endif
        lab_print_checks(row);
    }
    return failed;
}

static void lab_print_device(const LabArgs& a) {
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    char timing[64] = "emulation: checks only, nothing timed";
#ifndef KEEL_CUDA_EMULATION
    snprintf(timing, sizeof timing, "median of %d after %d warm-up", a.repeats, a.warmup);
#endif
    printf("device: %s (sm_%d%d, %d SMs) | shapes B=%d T=%d C=%d NH=%d V=%d Vp=%d | bf16 storage | %s\n", p.name, p.major,
           p.minor, p.multiProcessorCount, a.B, a.T, a.C, a.NH, a.V, a.Vp, timing);
}

static int lab_finish(int failed) {
    printf("\n%s\n", failed ? "FAILED: a variant disagrees with the CPU reference (see FAIL above)" : "all variants agree with the CPU reference");
    return failed ? 1 : 0;
}
