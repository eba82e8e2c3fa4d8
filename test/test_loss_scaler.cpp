// test_loss_scaler — llmc/loss_scaler.h against hand-worked values (docs/knobs.md#mixed-precision-and-loss-scaling):
//   - the dynamic scaler's trajectory (scale, growth_tracker, hysteresis_tracker) over a scripted
//     overflow pattern, the floor at --min-loss-scale, the static and disabled scalers, and the
//     text of every event's log line;
//   - fp16_round: every binary16 value is a fixed point (decoded by an independent decoder below),
//     every midpoint between neighbours ties to the even mantissa and its float neighbours round
//     to the nearer side, the overflow and underflow edges; and, where the compiler has _Float16,
//     a sweep of float bit patterns against the compiler's own conversion;
//   - grad_round_fp16 / grad_unscale_check: exact unscaling, any single inf/NaN found;
//   - RollingWindow: z-scores of small windows, no verdict before full, bit-exact serialization,
//     malformed text dies (checked in a forked child).
#include <sys/wait.h>
#include <unistd.h>

#include <cfloat>

#include "llmc/cpu/adamw.h"  // grad_round_fp16, grad_unscale_check (the CPU ops of the scaler's gradient passes)
#include "llmc/loss_scaler.h"

static int failures = 0;

static void check(bool ok, const char* what, const std::string& detail = "") {
    printf("%-4s %s%s%s\n", ok ? "ok" : "FAIL", what, detail.empty() ? "" : ": ", detail.c_str());
    if (!ok) failures++;
}

static uint32_t float_bits(float x) { uint32_t u; memcpy(&u, &x, sizeof u); return u; }
static float bits_float(uint32_t u) { float x; memcpy(&x, &u, sizeof x); return x; }

// ---- loss scaler ----------------------------------------------------------------------------------

struct ScalerStep { bool inf; double scale; int64_t growth, hysteresis; LossScaleEvent event; };

static const char* event_name(LossScaleEvent e) {
    static const char* names[] = {"CLEAN", "GREW", "OVERFLOW_HYSTERESIS", "OVERFLOW_BACKOFF", "OVERFLOW_AT_MIN", "OVERFLOW_FIXED"};
    return names[e];
}

// Runs `steps` through `s` and checks the state after each update against the hand-worked row.
static void run_script(LossScaler* s, const ScalerStep* steps, int n, const char* name) {
    std::string bad;
    for (int i = 0; i < n; i++) {
        LossScaleEvent e = loss_scaler_update(s, steps[i].inf);
        const ScalerStep& w = steps[i];
        if (s->scale != w.scale || s->growth_tracker != w.growth || s->hysteresis_tracker != w.hysteresis || e != w.event) {
            char buf[256];
            snprintf(buf, sizeof buf, "step %d (%s): got (%.17g, %lld, %lld, %s) want (%.17g, %lld, %lld, %s)", i + 1,
                     w.inf ? "inf" : "ok", s->scale, (long long)s->growth_tracker, (long long)s->hysteresis_tracker,
                     event_name(e), w.scale, (long long)w.growth, (long long)w.hysteresis, event_name(w.event));
            bad = buf;
            break;
        }
    }
    check(bad.empty(), name, bad);
}

static void test_dynamic_trajectory() {
    Config c;
    c.fp16 = true; c.initial_loss_scale = 65536; c.loss_scale_window = 3; c.hysteresis = 2; c.min_loss_scale = 1;
    LossScaler s;
    loss_scaler_init(&s, &c);
    check(s.enabled && s.dynamic && s.scale == 65536 && s.growth_tracker == 0 && s.hysteresis_tracker == 2,
          "dynamic init: enabled, scale 2^16, growth 0, hysteresis 2");
    // Worked by hand from the loss scaler's state machine (docs/knobs.md#mixed-precision-and-loss-scaling), window 3, hysteresis 2. Columns: input, then the
    // state after update (scale, growth_tracker, hysteresis_tracker) and the event.
    const ScalerStep script[] = {
        {true, 65536, 0, 1, LOSS_SCALE_OVERFLOW_HYSTERESIS},   // 1 inf: hyst 2->1 > 0, scale kept
        {true, 32768, 0, 0, LOSS_SCALE_OVERFLOW_BACKOFF},      // 2 inf: hyst 1->0 <= 0, halve
        {false, 32768, 1, 0, LOSS_SCALE_CLEAN},                // 3 ok
        {false, 32768, 2, 0, LOSS_SCALE_CLEAN},                // 4 ok
        {false, 65536, 0, 2, LOSS_SCALE_GREW},                 // 5 ok: growth 3 == window: double, hyst reset
        {true, 65536, 0, 1, LOSS_SCALE_OVERFLOW_HYSTERESIS},   // 6 inf: hyst 2->1
        {false, 65536, 1, 1, LOSS_SCALE_CLEAN},                // 7 ok
        {false, 65536, 2, 1, LOSS_SCALE_CLEAN},                // 8 ok
        {false, 131072, 0, 2, LOSS_SCALE_GREW},                // 9 ok: grow, hyst back to 2
        {true, 131072, 0, 1, LOSS_SCALE_OVERFLOW_HYSTERESIS},  // 10 inf
        {true, 65536, 0, 0, LOSS_SCALE_OVERFLOW_BACKOFF},      // 11 inf: hyst 0, halve
        {true, 32768, 0, -1, LOSS_SCALE_OVERFLOW_BACKOFF},     // 12 inf: hysteresis spent: halves again
        {false, 32768, 1, -1, LOSS_SCALE_CLEAN},               // 13 ok: clean steps do not restore hyst
        {true, 16384, 0, -2, LOSS_SCALE_OVERFLOW_BACKOFF},     // 14 inf: growth reset, halve again
        {false, 16384, 1, -2, LOSS_SCALE_CLEAN},               // 15 ok
        {false, 16384, 2, -2, LOSS_SCALE_CLEAN},               // 16 ok
        {false, 32768, 0, 2, LOSS_SCALE_GREW},                 // 17 ok: grow; only growth restores hyst
        {true, 32768, 0, 1, LOSS_SCALE_OVERFLOW_HYSTERESIS},   // 18 inf: absorbed again
    };
    run_script(&s, script, (int)(sizeof script / sizeof script[0]), "dynamic: 18-step scripted trajectory (window 3, hysteresis 2)");
}

static void test_floor() {
    Config c;
    c.fp16 = true; c.initial_loss_scale = 4; c.min_loss_scale = 1; c.hysteresis = 1; c.loss_scale_window = 1000;
    LossScaler s;
    loss_scaler_init(&s, &c);
    const ScalerStep script[] = {
        {true, 2, 0, 0, LOSS_SCALE_OVERFLOW_BACKOFF},   // hysteresis 1: the first overflow halves: 4 -> 2
        {true, 1, 0, -1, LOSS_SCALE_OVERFLOW_BACKOFF},  // 2 -> 1
        {true, 1, 0, -2, LOSS_SCALE_OVERFLOW_AT_MIN},   // max(0.5, 1) = 1: stays at the floor
        {true, 1, 0, -3, LOSS_SCALE_OVERFLOW_AT_MIN},
    };
    run_script(&s, script, 4, "dynamic: floor at min_loss_scale 1 (initial 4, hysteresis 1)");
    // A floor that is not a power-of-two step away: 8 -> 4 -> max(2, 3) = 3 -> 3.
    c.initial_loss_scale = 8; c.min_loss_scale = 3;
    loss_scaler_init(&s, &c);
    const ScalerStep odd[] = {
        {true, 4, 0, 0, LOSS_SCALE_OVERFLOW_BACKOFF},
        {true, 3, 0, -1, LOSS_SCALE_OVERFLOW_BACKOFF},  // cut to the floor: still a change of scale
        {true, 3, 0, -2, LOSS_SCALE_OVERFLOW_AT_MIN},
    };
    run_script(&s, odd, 3, "dynamic: floor min_loss_scale 3 (initial 8)");
    // window 1: every clean iteration doubles.
    c.initial_loss_scale = 1; c.min_loss_scale = 1; c.loss_scale_window = 1; c.hysteresis = 2;
    loss_scaler_init(&s, &c);
    const ScalerStep w1[] = {
        {false, 2, 0, 2, LOSS_SCALE_GREW},
        {false, 4, 0, 2, LOSS_SCALE_GREW},
        {true, 4, 0, 1, LOSS_SCALE_OVERFLOW_HYSTERESIS},
        {false, 8, 0, 2, LOSS_SCALE_GREW},
    };
    run_script(&s, w1, 4, "dynamic: window 1 doubles on every clean iteration");
}

static void test_static_and_disabled() {
    Config c;
    c.fp16 = true; c.loss_scale = 1024;  // a static scale wins over --fp16's dynamic one (Megatron order)
    LossScaler s;
    loss_scaler_init(&s, &c);
    check(s.enabled && !s.dynamic && s.scale == 1024, "static (--fp16 --loss-scale 1024): enabled, not dynamic, scale 1024");
    bool unchanged = true, events_ok = true;
    for (int i = 0; i < 3000; i++) {  // more than one default window (1000) of both kinds
        bool inf = (i % 7 == 0) || (i > 1000 && i < 1003);
        LossScaleEvent e = loss_scaler_update(&s, inf);
        unchanged &= s.scale == 1024 && s.growth_tracker == 0 && s.hysteresis_tracker == 2;
        events_ok &= e == (inf ? LOSS_SCALE_OVERFLOW_FIXED : LOSS_SCALE_CLEAN);
    }
    check(unchanged, "static: 3000 updates with overflows never change the state");
    check(events_ok, "static: events are CLEAN / OVERFLOW_FIXED");
    Config b;
    b.bf16 = true; b.loss_scale = 8;
    loss_scaler_init(&s, &b);
    check(s.enabled && !s.dynamic && s.scale == 8, "static under --bf16 --loss-scale 8 (allowed, docs/knobs.md#mixed-precision-and-loss-scaling)");
    Config d;  // fp32, no --loss-scale
    loss_scaler_init(&s, &d);
    check(!s.enabled && !s.dynamic && s.scale == 1, "disabled (no --fp16, no --loss-scale): scale 1");
    unchanged = true;
    for (int i = 0; i < 2000; i++) {
        loss_scaler_update(&s, i % 3 == 0);
        unchanged &= s.scale == 1;
    }
    check(unchanged, "disabled: scale stays 1");
    Config e;
    e.bf16 = true;
    loss_scaler_init(&s, &e);
    check(!s.enabled && s.scale == 1, "disabled under --bf16 without --loss-scale (grad_scaler None)");
}

static void expect_text(const char* what, const std::string& got, const std::string& want) {
    check(got == want, what, got == want ? "" : "got '" + got + "' want '" + want + "'");
}

static void test_describe() {
    Config c;
    c.fp16 = true;  // defaults: initial 2^32, window 1000, hysteresis 2
    LossScaler s, prev;
    loss_scaler_init(&s, &c);
    prev = s;
    LossScaleEvent e = loss_scaler_update(&s, true);
    expect_text("describe: hysteresis absorbs", loss_scaler_describe(&prev, &s, e, 11),
                "iteration 11: gradient overflow (inf/NaN), update skipped; hysteresis 2 -> 1, loss scale stays 4294967296");
    prev = s;
    e = loss_scaler_update(&s, true);
    expect_text("describe: backoff", loss_scaler_describe(&prev, &s, e, 12),
                "iteration 12: gradient overflow (inf/NaN), update skipped; loss scale 4294967296 -> 2147483648");
    for (int i = 0; i < 999; i++) {
        prev = s;
        e = loss_scaler_update(&s, false);
        if (e != LOSS_SCALE_CLEAN || !loss_scaler_describe(&prev, &s, e, 13 + i).empty()) break;
    }
    check(e == LOSS_SCALE_CLEAN && s.growth_tracker == 999, "describe: 999 clean iterations say nothing");
    prev = s;
    e = loss_scaler_update(&s, false);
    expect_text("describe: growth", loss_scaler_describe(&prev, &s, e, 1012),
                "iteration 1012: loss scale 2147483648 -> 4294967296 after 1000 clean iterations");
    c.initial_loss_scale = 1; c.hysteresis = 1;
    loss_scaler_init(&s, &c);
    prev = s;
    e = loss_scaler_update(&s, true);
    expect_text("describe: at the floor", loss_scaler_describe(&prev, &s, e, 5),
                "iteration 5: gradient overflow (inf/NaN), update skipped; loss scale stays at --min-loss-scale 1");
    c.loss_scale = 0.5;
    loss_scaler_init(&s, &c);
    prev = s;
    e = loss_scaler_update(&s, true);
    expect_text("describe: static", loss_scaler_describe(&prev, &s, e, 6),
                "iteration 6: gradient overflow (inf/NaN), update skipped; static loss scale 0.5");
    Config d;
    loss_scaler_init(&s, &d);
    prev = s;
    e = loss_scaler_update(&s, true);
    expect_text("describe: no scaling", loss_scaler_describe(&prev, &s, e, 7),
                "iteration 7: non-finite gradient (inf/NaN), update skipped");
}

// ---- fp16_round ---------------------------------------------------------------------------------

// An independent binary16 decoder: the textbook formula, in double, then to float (exact: a
// binary16 value has at most 11 significant bits and its exponent is well inside float's range).
static float half_decode(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    double v;
    if (exp == 0) v = std::ldexp((double)mant, -24);                       // subnormal: mant·2^-24
    else if (exp == 31) v = mant ? NAN : INFINITY;
    else v = std::ldexp((double)(1024 + mant), exp - 15 - 10);            // (1 + mant/1024)·2^(exp-15)
    return (float)(sign ? -v : v);
}

static bool same_bits(float a, float b) { return float_bits(a) == float_bits(b); }

static std::string fmt_mismatch(float in, float got, float want) {
    char buf[160];
    snprintf(buf, sizeof buf, "in %.9g (0x%08x) got %.9g (0x%08x) want %.9g (0x%08x)", in, float_bits(in), got,
             float_bits(got), want, float_bits(want));
    return buf;
}

static void test_fp16_fixed_points() {
    int bad = 0, nans = 0;
    std::string first;
    for (uint32_t h = 0; h < 65536; h++) {
        float v = half_decode((uint16_t)h);
        float r = fp16_round(v);
        bool ok = std::isnan(v) ? std::isnan(r) : same_bits(r, v);
        nans += std::isnan(v);
        if (!ok && bad++ == 0) first = fmt_mismatch(v, r, v);
    }
    // 2 signs × 1023 NaN mantissas = 2046 NaN patterns.
    check(bad == 0 && nans == 2046, "fp16_round: all 65536 binary16 values are fixed points (2046 NaNs stay NaN)", first);
}

// Between each pair of adjacent finite binary16 values lo < hi (same sign): the midpoint ties to
// the one whose bit pattern (hence mantissa) is even; the floats just below and above it go to the
// nearer one. Magnitudes: patterns 0x0000 .. 0x7BFF, the pair (h, h+1), mirrored for negatives.
static void test_fp16_midpoints() {
    int bad = 0, pairs = 0;
    std::string first;
    for (uint32_t h = 0; h < 0x7BFF; h++) {
        for (uint32_t sign : {0u, 0x8000u}) {
            float lo = half_decode((uint16_t)(h | sign)), hi = half_decode((uint16_t)((h + 1) | sign));
            double midd = ((double)lo + (double)hi) / 2;  // 12 significant bits: exact in float
            float mid = (float)midd;
            if ((double)mid != midd) { bad++; first = "midpoint not representable"; continue; }
            float tie = (h & 1) == 0 ? lo : hi;
            float below = std::nextafter(mid, lo), above = std::nextafter(mid, hi);
            struct { float in, want; } cases[] = {{mid, tie}, {below, lo}, {above, hi}};
            for (auto& k : cases) {
                float r = fp16_round(k.in);
                if (!same_bits(r, k.want) && bad++ == 0) first = fmt_mismatch(k.in, r, k.want);
            }
            pairs++;
        }
    }
    check(bad == 0 && pairs == 2 * 0x7BFF, "fp16_round: 63486 neighbour pairs: midpoint ties to even, ±1 ulp to the nearer", first);
}

static void expect_round(const char* what, float in, float want) {
    float r = fp16_round(in);
    check(same_bits(r, want), what, same_bits(r, want) ? "" : fmt_mismatch(in, r, want));
}

static void test_fp16_edges() {
    expect_round("fp16_round: 65504 (max) stays", 65504.0f, 65504.0f);
    expect_round("fp16_round: 65519.99 -> 65504", 65519.99f, 65504.0f);
    expect_round("fp16_round: nextbelow(65520) -> 65504", std::nextafter(65520.0f, 0.0f), 65504.0f);
    // 65520 is the midpoint of 65504 (mantissa 0x3FF, odd) and 2^16 (even, but overflows): inf.
    expect_round("fp16_round: 65520 -> inf (tie to even overflows)", 65520.0f, INFINITY);
    expect_round("fp16_round: -65520 -> -inf", -65520.0f, -INFINITY);
    expect_round("fp16_round: 1e30 -> inf", 1e30f, INFINITY);
    expect_round("fp16_round: FLT_MAX -> inf", FLT_MAX, INFINITY);
    expect_round("fp16_round: inf stays", INFINITY, INFINITY);
    expect_round("fp16_round: -inf stays", -INFINITY, -INFINITY);
    check(std::isnan(fp16_round(NAN)) && std::isnan(fp16_round(-NAN)), "fp16_round: NaN stays NaN");
    // 2^-25 is half the smallest subnormal 2^-24: a tie between 0 (even) and 2^-24 (odd) -> 0.
    expect_round("fp16_round: 2^-25 -> +0 (tie to even)", 0x1p-25f, 0.0f);
    expect_round("fp16_round: -2^-25 -> -0", -0x1p-25f, -0.0f);
    expect_round("fp16_round: 1.5*2^-25 -> 2^-24", 0x1.8p-25f, 0x1p-24f);
    expect_round("fp16_round: nextabove(2^-25) -> 2^-24", std::nextafter(0x1p-25f, 1.0f), 0x1p-24f);
    expect_round("fp16_round: 2^-24 (min subnormal) stays", 0x1p-24f, 0x1p-24f);
    // 3·2^-25 = 1.5·2^-24: tie between 1·2^-24 (odd) and 2·2^-24 (even) -> 2^-23.
    expect_round("fp16_round: 3*2^-25 -> 2^-23 (tie to even)", 0x1.8p-24f, 0x1p-23f);
    // the largest subnormal (1023·2^-24) plus half a step ties to 1024·2^-24 = 2^-14 (even).
    expect_round("fp16_round: 1023.5*2^-24 -> 2^-14 (min normal)", 1023.5f * 0x1p-24f, 0x1p-14f);
    expect_round("fp16_round: 1e-30 -> +0", 1e-30f, 0.0f);
    expect_round("fp16_round: float subnormal -> -0", -0x1p-140f, -0.0f);
    expect_round("fp16_round: +0 stays +0", 0.0f, 0.0f);
    expect_round("fp16_round: -0 stays -0", -0.0f, -0.0f);
    // 1 + 2^-11 is the midpoint of 1 and 1+2^-10 (odd): ties to 1; 1 + 3·2^-11 ties to 1 + 2^-9.
    expect_round("fp16_round: 1+2^-11 -> 1", 1.0f + 0x1p-11f, 1.0f);
    expect_round("fp16_round: 1+3*2^-11 -> 1+2^-9", 1.0f + 0x1.8p-10f, 1.0f + 0x1p-9f);
    // 2047.5 is above 2^11 - 1 by half an ulp of the 2^10 binade (ulp 1): tie between 2047 (odd)
    // and 2048 (even, next binade) -> 2048, the carry into the exponent.
    expect_round("fp16_round: 2047.5 -> 2048 (carry into the exponent)", 2047.5f, 2048.0f);
    expect_round("fp16_round: 0.1 -> 0.0999755859375", 0.1f, 0.0999755859375f);  // 1638/16384 = 0x2E66
}

#if defined(__FLT16_MAX__)
// Independent reference where the compiler has it: the compiler's own float -> _Float16 conversion
// (F16C vcvtps2ph, or libgcc's __truncsfhf2). Every 61st float bit pattern (61 is odd, so all
// residues of the low mantissa bits are visited) plus the ±[2^-26, 2^17] region densely.
static void test_fp16_vs_compiler() {
    int64_t bad = 0, n = 0;
    std::string first;
    auto one = [&](uint32_t u) {
        float x = bits_float(u);
        float want = (float)(_Float16)x, got = fp16_round(x);
        bool ok = std::isnan(x) ? std::isnan(got) : same_bits(got, want);
        if (!ok && bad++ == 0) first = fmt_mismatch(x, got, want);
        n++;
    };
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 61) one((uint32_t)u);
    for (uint32_t u = 0x32800000u; u <= 0x48000000u; u += 7) { one(u); one(u | 0x80000000u); }
    char what[96];
    snprintf(what, sizeof what, "fp16_round: %lld float patterns match (float)(_Float16)x", (long long)n);
    check(bad == 0, what, first);
}
#else
static void test_fp16_vs_compiler() { printf("ok   fp16_round vs _Float16: skipped (compiler has no _Float16)\n"); }
#endif

// ---- gradient passes ----------------------------------------------------------------------------

static void test_grad_passes() {
    const size_t n = 100003;  // odd size: any thread partition has uneven chunks
    std::vector<float> g(n), want(n);
    // g[i] = (i - 50000)·1024·1.25: scaled by 2^-10 exactly -> (i - 50000)·1.25 (11-bit mantissas).
    for (size_t i = 0; i < n; i++) g[i] = ((float)i - 50000.0f) * 1280.0f, want[i] = ((float)i - 50000.0f) * 1.25f;
    bool found = grad_unscale_check(g.data(), n, 1.0 / 1024.0);
    check(!found && memcmp(g.data(), want.data(), n * sizeof(float)) == 0, "grad_unscale_check: clean buffer scaled by 2^-10 exactly, no flag");
    bool all_found = true;
    for (size_t pos : {(size_t)0, (size_t)1, n / 2, n - 2, n - 1}) {
        for (float poison : {INFINITY, -INFINITY, NAN}) {
            std::vector<float> h(n, 1.0f);
            h[pos] = poison;
            all_found &= grad_unscale_check(h.data(), n, 0.5);
        }
    }
    check(all_found, "grad_unscale_check: one +inf, -inf or NaN at the first, middle or last places is found");
    std::vector<float> big(n, 1.0f);
    big[n / 3] = 3e38f;  // finite, but × 4 (a loss scale of 0.25) overflows float
    check(grad_unscale_check(big.data(), n, 4.0), "grad_unscale_check: overflow on unscaling (scale < 1) is found");
    // grad_round_fp16 then unscale: 65504 stays finite, 65520 overflows, as fp16 would.
    std::vector<float> r = {65504.0f, 1.0f, -3.0f};
    grad_round_fp16(r.data(), r.size());
    check(!grad_unscale_check(r.data(), r.size(), 1.0 / 65536.0), "grad_round_fp16: 65504 survives, the step is clean");
    r = {1.0f, 65520.0f, 2.0f};
    grad_round_fp16(r.data(), r.size());
    check(std::isinf(r[1]) && grad_unscale_check(r.data(), r.size(), 1.0 / 65536.0), "grad_round_fp16: 65520 overflows to inf and is found");
    // element-wise equal to fp16_round on a buffer of varied magnitudes
    std::vector<float> a(n), b(n);
    for (size_t i = 0; i < n; i++) a[i] = b[i] = bits_float(0x30000000u + (uint32_t)i * 4111u);
    grad_round_fp16(a.data(), n);
    bool same = true;
    for (size_t i = 0; i < n; i++) same &= same_bits(a[i], fp16_round(b[i]));
    check(same, "grad_round_fp16: element-wise fp16_round over 100003 values");
}

// ---- rolling window -----------------------------------------------------------------------------

static void expect_z(const char* what, const RollingWindow* w, double x, double want, double tol) {
    double z = -12345;
    bool verdict = rolling_zscore(w, x, &z);
    bool ok = verdict && (std::isinf(want) ? z == want : std::fabs(z - want) <= tol);
    char buf[96];
    snprintf(buf, sizeof buf, "verdict %d z %.17g want %.17g", (int)verdict, z, want);
    check(ok, what, ok ? "" : buf);
}

static void test_rolling() {
    RollingWindow w;
    rolling_init(&w, 4);
    double z = -12345;
    rolling_push(&w, 1); rolling_push(&w, 3); rolling_push(&w, 1);
    check(!rolling_zscore(&w, 100.0, &z) && z == -12345, "rolling: no verdict with 3 of 4 values");
    rolling_push(&w, 3);
    // {1,3,1,3}: mean 2, deviations ±1, population variance 1, std 1 -> z(x) = x - 2 exactly.
    expect_z("rolling: {1,3,1,3} z(5) = 3", &w, 5.0, 3.0, 0.0);
    expect_z("rolling: {1,3,1,3} z(0) = -2", &w, 0.0, -2.0, 0.0);
    rolling_push(&w, 2);  // drops the oldest 1: window {3,1,3,2}
    check(w.values.size() == 4 && w.values[0] == 3 && w.values[1] == 1 && w.values[2] == 3 && w.values[3] == 2,
          "rolling: full window drops the oldest, keeps oldest-first order");
    rolling_push(&w, 1); rolling_push(&w, 3); rolling_push(&w, 4);  // window {2,1,3,4}
    // {2,1,3,4}: mean 2.5, squared deviations 0.25+2.25+0.25+2.25 = 5, variance 1.25,
    // std sqrt(1.25) = 1.1180339887498949; z(5) = 2.5/1.1180339887498949 = sqrt(5) = 2.2360679774997897.
    expect_z("rolling: {2,1,3,4} z(5) = sqrt(5)", &w, 5.0, 2.2360679774997897, 1e-15);
    expect_z("rolling: {2,1,3,4} z(2.5) = 0", &w, 2.5, 0.0, 0.0);
    rolling_resize(&w, 2);  // a shorter window keeps the newest values: {3,4}
    check(w.capacity == 2 && w.values.size() == 2 && w.values[0] == 3 && w.values[1] == 4, "rolling: resize keeps the newest");
    RollingWindow c;
    rolling_init(&c, 3);
    for (int i = 0; i < 3; i++) rolling_push(&c, 7.0);
    // constant window: std 0. Above the mean: +inf; at or below: 0.
    expect_z("rolling: constant window, x above mean -> +inf", &c, 7.000001, INFINITY, 0.0);
    expect_z("rolling: constant window, x = mean -> 0", &c, 7.0, 0.0, 0.0);
    expect_z("rolling: constant window, x below mean -> 0", &c, 6.0, 0.0, 0.0);
    RollingWindow d;
    rolling_init(&d, 2);
    rolling_push(&d, 3.0); rolling_push(&d, 5.0);  // mean 4, std 1
    std::string line = rolling_describe_skip(&d, 812, "loss", 11.3, 7.3, 6.0);
    expect_text("rolling: skip line", line,
                "iteration 812: update skipped, loss z-score 7.3 > 6 (loss 11.3, window of the last 2 updates)");
}

static void test_rolling_serialization() {
    RollingWindow w;
    rolling_init(&w, 8);
    rolling_push(&w, 1.0); rolling_push(&w, 0.5); rolling_push(&w, 0.1);
    expect_text("rolling_to_string: '1 0.5 0.1'", rolling_to_string(&w), "1 0.5 0.1");
    const double vals[] = {0.1, 1.0 / 3.0, 3.0000000000000004, 1e-300, -2.5, 12345.678, 5e-324, -0.0, 1.2345678901234567e100};
    for (double v : vals) rolling_push(&w, v);  // 12 pushed into capacity 8: the last 8 remain
    RollingWindow r;
    rolling_init(&r, 8);
    rolling_from_string(&r, rolling_to_string(&w), "test window");
    bool same = r.values.size() == 8 && memcmp(r.values.data(), w.values.data(), 8 * sizeof(double)) == 0;
    check(same, "rolling: to_string/from_string round-trips bit for bit (incl. -0, a subnormal, 1e-300, 1e100)",
          same ? "" : rolling_to_string(&w) + " vs " + rolling_to_string(&r));
    double z1 = 0, z2 = 1;
    check(rolling_zscore(&w, 10.0, &z1) && rolling_zscore(&r, 10.0, &z2) && memcmp(&z1, &z2, sizeof z1) == 0,
          "rolling: restored window gives the same z bits");
    RollingWindow e;
    rolling_init(&e, 4);
    rolling_push(&e, 1.0);
    rolling_from_string(&e, "", "test window");
    check(e.values.empty() && rolling_to_string(&e).empty(), "rolling: empty text <-> empty window");
}

// Runs fn in a forked child; true when the child exited with a non-zero status (keel_die).
template <class F>
static bool dies(F fn) {
    fflush(stdout);  // or the child's exit flushes the parent's buffered lines a second time
    pid_t pid = fork();
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) != 0;
}

static void test_rolling_bad_input() {
    const char* bad[] = {"1 2 x", "1  2", " 1", "1 ", "1,2", "nan", "inf", "-inf", "1e999", "0x10", "1 2\n", "1.5.2",
                         "--1", "1e", "+", "1 2 3 4 5" /* 5 values > capacity 4 */};
    for (const char* s : bad) {
        std::string what = std::string("rolling_from_string dies on '") + s + "'";
        for (char& ch : what) if (ch == '\n') ch = '|';
        check(dies([&] {
                  RollingWindow w;
                  rolling_init(&w, 4);
                  rolling_from_string(&w, s, "test window");
              }),
              what.c_str());
    }
    check(!dies([] {
              RollingWindow w;
              rolling_init(&w, 4);
              rolling_from_string(&w, "1 -2.5 3e-5 4", "test window");
          }),
          "rolling_from_string accepts '1 -2.5 3e-5 4' (the control: the child exits 0)");
    check(dies([] {
              RollingWindow w;
              rolling_init(&w, 4);
              rolling_push(&w, NAN);
          }),
          "rolling_push dies on a non-finite value");
}

int main() {
    test_dynamic_trajectory();
    test_floor();
    test_static_and_disabled();
    test_describe();
    test_fp16_fixed_points();
    test_fp16_midpoints();
    test_fp16_edges();
    test_fp16_vs_compiler();
    test_grad_passes();
    test_rolling();
    test_rolling_serialization();
    test_rolling_bad_input();
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
