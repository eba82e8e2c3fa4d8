// test_adam8bit — bitsandbytes' blockwise 8-bit Adam as keel builds it (docs/knobs.md#8-bit-adam):
//   1. the dynamic quantization maps against the reference construction (fp32 linspace, as torch);
//   2. the fast nearest-code search against the obvious one, on every input class;
//   3. quantize/dequantize error bounds per block, and the sign of m kept;
//   4. one optimizer step on random data against double-precision Adam: from zero state the update
//      is Adam's up to fp32 rounding; from a quantized state it lies inside the interval the
//      quantization error of m and v allows; the stored new state is the nearest code;
//   5. percentile clipping's history and factor;
//   6. StableEmbedding's word embedding really has 32-bit state (the state is inspected, not the flag),
//      and the 8-bit units really hold codes;
//   7. a unit sliced over two ranks by columns (tensor parallelism), updated by adam8bit_split_maxima,
//      the max over the ranks and adam8bit_split_apply: parameters, codes and scales bit-identical to
//      adam8bit_update over the whole unit, step after step; rows only one rank holds keep their own
//      blocks; without the max over ranks the scales differ (the check can fail).
#include <array>
#include <cstdio>
#include <cstring>
#include <vector>

#include "llmc/init.h"
#include "llmc/optimizer.h"
#include "llmc/rand.h"
#include "test/unit_check.h"


static double uniform(uint64_t purpose, uint64_t i) { return rng_uniform(99, purpose, 0, i); }

// The reference construction, literally: torch.linspace in fp32, means in fp32, times a Python
// float (the product rounded to fp32), then 0 and 1, sorted.
static std::vector<float> map_reference(bool is_signed) {
    std::vector<float> d;
    for (int i = 0; i < 7; i++) {
        int k = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
        std::vector<float> b(k);
        float step = (1.0f - 0.1f) / (float)(k - 1);
        for (int j = 0; j < k; j++) b[j] = 0.1f + step * (float)j;
        for (int j = 0; j + 1 < k; j++) {
            float mean = (b[j] + b[j + 1]) / 2.0f;
            d.push_back((float)(std::pow(10.0, i - 6) * mean));
            if (is_signed) d.push_back((float)(-std::pow(10.0, i - 6) * mean));
        }
    }
    d.push_back(0.0f);
    d.push_back(1.0f);
    std::sort(d.begin(), d.end());
    return d;
}

static void test_maps() {
    for (int s = 0; s < 2; s++) {
        bool is_signed = s == 0;
        float map[QMAP_SIZE];
        quant_map_dynamic(map, is_signed);
        std::vector<float> ref = map_reference(is_signed);
        CHECK(ref.size() == QMAP_SIZE, "reference map has %zu codes", ref.size());
        double worst = 0;
        for (int i = 0; i < QMAP_SIZE; i++) {
            if (i) CHECK(map[i] > map[i - 1], "map not strictly ascending at %d", i);
            double rel = ref[i] == 0 ? std::fabs(map[i]) : std::fabs(map[i] - ref[i]) / std::fabs(ref[i]);
            worst = std::max(worst, rel);
        }
        CHECK(worst < 1e-6, "%s map differs from the reference construction by %.3g relative", is_signed ? "signed" : "unsigned", worst);
        CHECK(map[255] == 1.0f, "last code is %g, want 1", map[255]);
        // codes per decade: 2^i (signed, each side) or 2^(i+1) (unsigned) in (0.1, 1)·10^(i-6)
        for (int i = 0; i < 7; i++) {
            double lo = 0.1 * std::pow(10.0, i - 6), hi = std::pow(10.0, i - 6);
            int count = 0;
            for (int j = 0; j < QMAP_SIZE; j++) count += map[j] > lo && map[j] < hi;
            CHECK(count == (is_signed ? 1 << i : 1 << (i + 1)), "decade %d holds %d codes", i, count);
        }
        if (is_signed) {
            CHECK(map[127] == 0.0f, "signed map: code 127 is %g, want 0", map[127]);
            for (int j = 0; j < 127; j++) CHECK(map[126 - j] == -map[128 + j], "signed map not symmetric at %d", j);
            CHECK(std::fabs(map[128] - 0.55e-6f) < 1e-12, "smallest positive code %g, want 5.5e-7", map[128]);
            CHECK(std::fabs(map[254] - 0.99296875f) < 1e-6, "largest code below 1: %g, want 0.99296875", map[254]);
        } else {
            CHECK(map[0] == 0.0f, "unsigned map: code 0 is %g, want 0", map[0]);
        }
        printf("ok: %s map: 256 ascending codes, %s, matches the reference construction (max rel diff %.2g)\n",
               is_signed ? "signed" : "unsigned", is_signed ? "127 = 0, 255 = 1, symmetric" : "0 = 0, 255 = 1", worst);
    }
}

static void test_nearest() {
    for (int s = 0; s < 2; s++) {
        bool is_signed = s == 0;
        float map[QMAP_SIZE];
        quant_map_dynamic(map, is_signed);
        QuantLUT* lut = new QuantLUT;
        quant_lut_build(lut, map);
        std::vector<float> xs = {0.0f, -0.0f, 1.0f, 1e-45f, 1e-38f, 1e-7f, 0.5f};
        for (int i = 0; i < QMAP_SIZE; i++) {
            xs.push_back(map[i]);
            if (i + 1 < QMAP_SIZE) {
                float mid = (map[i] + map[i + 1]) / 2;
                xs.push_back(mid);
                xs.push_back(std::nextafter(mid, -2.0f));
                xs.push_back(std::nextafter(mid, 2.0f));
            }
        }
        for (int i = 0; i < 200000; i++) {
            xs.push_back((float)uniform(1, i));
            xs.push_back((float)std::pow(10.0, -9 * uniform(2, i)));  // log-uniform magnitudes down to 1e-9
        }
        int64_t checked = 0, wrong = 0;
        for (float x : xs) {
            for (float y : {x, -x}) {
                if (!is_signed && y < 0) continue;
                if (y < -1 || y > 1) continue;
                int a = quant_nearest(lut, y), b = quant_nearest_reference(map, y);
                checked++;
                if (a != b) {
                    if (wrong++ < 5) printf("  nearest(%.9g): fast %d (%.9g), reference %d (%.9g)\n", y, a, map[a], b, map[b]);
                }
            }
        }
        CHECK(wrong == 0, "%s map: fast search disagrees with the reference on %lld of %lld inputs", is_signed ? "signed" : "unsigned",
              (long long)wrong, (long long)checked);
        printf("ok: %s map: fast nearest-code search == exhaustive search on %lld inputs (codes, midpoints +-1ulp, random)\n",
               is_signed ? "signed" : "unsigned", (long long)checked);
        delete lut;
    }
}

// Half the gap between the codes around y (the most round-to-nearest can be off), or the gap
// to the next code outward when the sign rule moved the code.
static double code_error_bound(const float* map, double y) {
    for (int i = 0; i + 1 < QMAP_SIZE; i++)
        if (map[i] <= y && y <= map[i + 1]) return (map[i + 1] - map[i]) / 2;
    return y < map[0] ? map[0] - y : y - map[QMAP_SIZE - 1];
}

static void test_block_roundtrip(const Adam8bitMaps* q) {
    const int BS = 256, NB = 64;
    double worst_ratio = 0, worst_top = 0;
    int64_t sign_kept = 0, sign_cases = 0;
    for (int b = 0; b < NB; b++) {
        std::vector<float> m(BS), v(BS);
        double scale = std::pow(10.0, -8 + 7 * uniform(3, b));  // blocks of very different magnitude
        for (int j = 0; j < BS; j++) {
            double mag = scale * std::pow(10.0, -7 * uniform(4, b * BS + j));  // spans the map's decades and below
            m[j] = (float)(uniform(5, b * BS + j) < 0.5 ? -mag : mag);
            v[j] = (float)(mag * mag);
        }
        float am = 0, av = 0;
        for (int j = 0; j < BS; j++) { am = std::max(am, std::fabs(m[j])); av = std::max(av, v[j]); }
        for (int j = 0; j < BS; j++) {
            uint8_t cm = adam8bit_quantize_m(q, m[j], am), cv = adam8bit_quantize_v(q, v[j], av);
            double dm = (double)q->map_m[cm] * am, dv = (double)q->map_v[cv] * av;
            double ym = m[j] / am, yv = v[j] / av;
            bool moved = std::signbit(q->map_m[quant_nearest_reference(q->map_m, (float)ym)]) != std::signbit(m[j]);
            double bound_m = (moved ? 2 * code_error_bound(q->map_m, ym) + 1e-6 : code_error_bound(q->map_m, ym)) * am;
            double bound_v = code_error_bound(q->map_v, yv) * av;
            // + the rounding of the fp32 division m/absmax, which can move a value sitting on a midpoint
            bound_m += 1.2e-7 * std::fabs(m[j]);
            bound_v += 1.2e-7 * v[j];
            double err_m = std::fabs(dm - m[j]), err_v = std::fabs(dv - v[j]);
            CHECK(err_m <= bound_m * (1 + 1e-5) + 1e-30, "m %.9g -> %.9g, error %.3g > bound %.3g", m[j], dm, err_m, bound_m);
            CHECK(err_v <= bound_v * (1 + 1e-5) + 1e-30, "v %.9g -> %.9g, error %.3g > bound %.3g", v[j], dv, err_v, bound_v);
            worst_ratio = std::max(worst_ratio, err_m / am);
            if (std::fabs(ym) >= 0.1) worst_top = std::max(worst_top, err_m / std::fabs(m[j]));
            if (m[j] != 0) {
                sign_cases++;
                bool ok = m[j] < 0 ? q->map_m[cm] < 0 : q->map_m[cm] >= 0;
                sign_kept += ok;
                CHECK(ok, "m = %.9g stored as code %d (%g): sign flipped", m[j], cm, q->map_m[cm]);
            }
        }
    }
    // With |m| spread over 7+ decades, most values sit where the map is coarse: the bound is the map's own.
    printf("ok: block round trip: every value within half a code gap (x absmax) of the original; max error %.4f x absmax,"
           " max relative error %.4f for |m| >= 0.1 absmax (bound 0.0704); sign of m kept in %lld/%lld, negative m never stored >= 0\n",
           worst_ratio, worst_top, (long long)sign_kept, (long long)sign_cases);
    CHECK(worst_top <= 0.0704, "top-decade relative error %.4f > 0.0704 (half of 0.9/64 over 0.1)", worst_top);
    // tiny negative m in a block with a large absmax: nearest is 0, stored one code below
    uint8_t c = adam8bit_quantize_m(q, -1e-12f, 1.0f);
    CHECK(q->map_m[c] < 0, "tiny negative m stored as %g", q->map_m[c]);
    c = adam8bit_quantize_m(q, 0.0f, 0.0f);
    CHECK(q->map_m[c] == 0.0f, "zero block stores code of %g", q->map_m[c]);
}

// Double-precision Adam (bitsandbytes semantics: decoupled decay after the step) for one element.
struct Ref { double p, m, v; };
static Ref adam_ref(double p, double m, double v, double g, double lr, double b1, double b2, double eps, double wd, int64_t t) {
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    double mhat = m / (1 - std::pow(b1, (double)t)), vhat = v / (1 - std::pow(b2, (double)t));
    p = p - lr * mhat / (std::sqrt(vhat) + eps);
    p = p * (1 - lr * wd);
    return {p, m, v};
}

static void test_step(const Adam8bitMaps* q) {
    const int64_t n = 3000;  // 11 full blocks of 256 and a partial one
    const int BS = 256;
    const int64_t nb = (n + BS - 1) / BS;
    const double lr = 1e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    for (int start = 0; start < 2; start++) {  // 0: zero state, t = 1; 1: a quantized random state, t = 7
        int64_t t = start ? 7 : 1;
        std::vector<float> p(n), g(n), m0(n), v0(n), absm(nb, 0.0f), absv(nb, 0.0f);
        std::vector<uint8_t> cm(n, q->zero_m), cv(n, q->zero_v);
        for (int64_t i = 0; i < n; i++) {
            double blockscale = std::pow(10.0, -3 * uniform(10, i / BS));
            p[i] = (float)(uniform(11, i) - 0.5);
            g[i] = (float)((uniform(12, i) - 0.5) * blockscale);
            m0[i] = start ? (float)((uniform(13, i) - 0.5) * blockscale) : 0.0f;
            v0[i] = start ? (float)(std::pow(uniform(14, i) * blockscale, 2)) : 0.0f;
        }
        if (start) {
            for (int64_t b = 0; b < nb; b++)
                for (int64_t i = b * BS; i < std::min(n, (b + 1) * BS); i++) {
                    absm[b] = std::max(absm[b], std::fabs(m0[i]));
                    absv[b] = std::max(absv[b], v0[i]);
                }
            for (int64_t i = 0; i < n; i++) {
                cm[i] = adam8bit_quantize_m(q, m0[i], absm[i / BS]);
                cv[i] = adam8bit_quantize_v(q, v0[i], absv[i / BS]);
            }
        }
        std::vector<float> p8 = p, am8 = absm, av8 = absv;
        std::vector<uint8_t> cm8 = cm, cv8 = cv;
        double c1 = 1 - std::pow(b1, (double)t), c2 = 1 - std::pow(b2, (double)t);
        AdamHyper h = {(float)lr, (float)b1, (float)b2, (float)eps, (float)wd, (float)c1, (float)std::sqrt(c2)};
        adam8bit_update(p8.data(), g.data(), cm8.data(), cv8.data(), am8.data(), av8.data(), n, BS, q, h, 1.0f);
        double worst_p = 0, worst_state = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t b = i / BS;
            // (a) against Adam from the state the optimizer actually held: fp32 rounding only
            double md = (double)q->map_m[cm[i]] * absm[b], vd = (double)q->map_v[cv[i]] * absv[b];
            Ref r = adam_ref(p[i], md, vd, g[i], lr, b1, b2, eps, wd, t);
            double tol = 4 * std::fabs(std::nextafter(p[i], 2.0f) - p[i]) + 1e-6 * lr;
            CHECK(std::fabs(p8[i] - r.p) <= tol, "t=%lld p[%lld] = %.9g, Adam from the held state gives %.9g", (long long)t,
                  (long long)i, p8[i], r.p);
            worst_p = std::max(worst_p, std::fabs(p8[i] - r.p) / (lr));
            // (b) against Adam from the unquantized state: inside the interval the state's quantization allows
            if (start) {
                double em = code_error_bound(q->map_m, m0[i] / absm[b]) * 2 * absm[b];  // generous for sign-moved codes
                double ev = code_error_bound(q->map_v, v0[i] / absv[b]) * absv[b];
                double lo = 1e300, hi = -1e300;
                for (double dm : {-em, em})
                    for (double dv : {-ev, ev}) {
                        double pr = adam_ref(p[i], m0[i] + dm, std::max(0.0, v0[i] + dv), g[i], lr, b1, b2, eps, wd, t).p;
                        lo = std::min(lo, pr);
                        hi = std::max(hi, pr);
                    }
                CHECK(p8[i] >= lo - tol && p8[i] <= hi + tol, "p[%lld] = %.9g outside [%.9g, %.9g] that quantization allows",
                      (long long)i, p8[i], lo, hi);
            }
            // (c) the stored new state is the nearest code of the new moments
            double newm = (double)q->map_m[cm8[i]] * am8[b], newv = (double)q->map_v[cv8[i]] * av8[b];
            double bm = code_error_bound(q->map_m, r.m / am8[b]) * 2 * am8[b] + 1e-6 * am8[b];
            double bv = code_error_bound(q->map_v, r.v / av8[b]) * av8[b] + 1e-6 * av8[b];
            CHECK(std::fabs(newm - r.m) <= bm, "new m[%lld] %.9g vs %.9g (bound %.3g)", (long long)i, newm, r.m, bm);
            CHECK(std::fabs(newv - r.v) <= bv, "new v[%lld] %.9g vs %.9g (bound %.3g)", (long long)i, newv, r.v, bv);
            worst_state = std::max(worst_state, std::fabs(newm - r.m) / am8[b]);
        }
        printf("ok: one adam8bit step (t=%lld, %s state, n=%lld, block 256): params match double-precision Adam to %.2g x lr;"
               " new m within %.4f x absmax%s\n", (long long)t, start ? "quantized random" : "zero", (long long)n, worst_p,
               worst_state, start ? "; every param inside the interval the quantized m, v allow" : "");
    }
}

static void test_percentile() {
    float hist[PCLIP_HISTORY];
    float s = percentile_clip_scale(hist, 1, 4.0, 5);
    CHECK(s == 1.0f, "t=1: scale %g, want 1", s);
    for (int i = 0; i < PCLIP_HISTORY; i++) CHECK(hist[i] == 4.0f, "t=1 must fill every slot (slot %d = %g)", i, hist[i]);
    for (int64_t t = 2; t <= 20; t++) percentile_clip_scale(hist, t, 1.0, 5);
    CHECK(hist[20] == 1.0f && hist[21] == 4.0f, "slot t %% 100 holds step t's norm");
    s = percentile_clip_scale(hist, 21, 100.0, 5);  // sorted: 19 ones then 81 fours; [5] = 1 → clip 1, current 10
    CHECK(std::fabs(s - 0.1f) < 1e-7, "spike: scale %g, want 0.1", s);
    s = percentile_clip_scale(hist, 22, 100.0, 100);
    CHECK(s == 1.0f && hist[22] == 100.0f, "p = 100: records but never clips");
    s = percentile_clip_scale(hist, 23, 0.25, 5);
    CHECK(s == 1.0f, "a small norm is not clipped (scale %g)", s);
    // the scale acts on g: one fp32 step with scale 0.5 equals one with g halved
    std::vector<float> p1 = {0.3f, -0.2f}, p2 = p1, m1(2, 0.1f), m2 = m1, v1(2, 0.01f), v2 = v1, g = {0.8f, -0.4f}, gh = {0.4f, -0.2f};
    AdamHyper h = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.5f, 0.6f};
    adam32_update(p1.data(), g.data(), m1.data(), v1.data(), 2, h, 0.5f);
    adam32_update(p2.data(), gh.data(), m2.data(), v2.data(), 2, h, 1.0f);
    CHECK(p1 == p2 && m1 == m2 && v1 == v2, "gnorm_scale 0.5 differs from halving g");
    printf("ok: percentile clipping: t=1 fills the history, slot t %% 100, spike 10x above the 5th percentile scaled by 0.1, "
           "p=100 records only, the factor scales g\n");
}

// Builds a small model and its optimizer, puts random gradients in, takes one step.
static void test_stable_embedding() {
    for (int stable = 0; stable < 2; stable++) {
        GPTConfig cfg = {16, 64, gpt_padded_vocab(64, 128), 2, 2, 64};
        cfg.stable_embedding = cfg.embed_layernorm = stable;
        GPT<float> model;
        gpt_build(&model, &cfg, 1, 16);
        param_table_init(model.params, &model.table, &cfg, 0.02, 1);
        Config c;
        c.optimizer = "adam8bit";
        c.stable_embedding = stable;
        c.clip_grad = 0;
        c.lr = 1e-3;
        Optimizer o;
        optimizer_init(&o, &model.table, &c);
        for (int64_t i = 0; i < model.table.total; i++) model.grads[i] = (float)(uniform(20, i) - 0.5) * 1e-2f;
        UpdateGuard guard;
        update_guard_init(&guard, &c);
        SpikeState spike;
        spike_init(&spike, &c);
        Comm comm{};  // one process: rank 0 of 1, no MPI
        comm.size = 1;
        optimizer_step(&o, &comm, nullptr, &model, &guard, &spike, &c, 1, c.lr, 1.0, false);
        const ParamTensor* wte = &model.table.t[P_WTE];
        const OptUnit* u = nullptr;
        for (const OptUnit& x : o.units) if (x.id == P_WTE) u = &x;
        CHECK(u && u->numel == wte->numel, "no unit for wte");
        if (!u) continue;
        if (stable) {
            CHECK(!u->q8, "--stable-embedding: wte unit has 8-bit state");
            // the fp32 moments hold exactly (1-β1)·g and (1-β2)·g² — values no 8-bit code reproduces
            int64_t exact = 0;
            for (int64_t i = 0; i < wte->numel; i++) {
                float g = model.grads[wte->offset_canonical + i];
                exact += o.m32[u->offset_state + i] == (1.0f - (float)c.adam_beta1) * g &&
                         o.v32[u->offset_state + i] == (1.0f - (float)c.adam_beta2) * g * g;
            }
            CHECK(exact == wte->numel, "wte fp32 state holds the exact moments for %lld of %lld elements", (long long)exact,
                  (long long)wte->numel);
            CHECK(o.n32 >= wte->numel, "n32 %lld smaller than wte", (long long)o.n32);
            CHECK(optimizer_layout(&o).find("wte 32") != std::string::npos, "layout lacks 'wte 32'");
            printf("ok: --stable-embedding: wte's %lld elements have fp32 m and v holding the exact moments; %s\n",
                   (long long)wte->numel, optimizer_describe(&o, &model.table, &c).c_str());
        } else {
            CHECK(u->q8, "plain adam8bit: wte (%lld elements) has 32-bit state", (long long)wte->numel);
            int64_t coded = 0;
            for (int64_t i = 0; i < wte->numel; i++) coded += o.code_m[u->offset_state + i] != o.maps->zero_m;
            CHECK(coded > wte->numel / 2, "wte codes barely changed (%lld)", (long long)coded);
            float amax = 0;
            for (int64_t i = 0; i < wte->numel; i++)
                amax = std::max(amax, std::fabs((1.0f - (float)c.adam_beta1) * model.grads[wte->offset_canonical + i]));
            CHECK(o.absmax_m[u->offset_block] > 0 && o.absmax_m[u->offset_block] <= amax, "absmax of wte's first block %g",
                  o.absmax_m[u->offset_block]);
            printf("ok: plain adam8bit: wte has 8-bit codes (%lld of %lld non-zero after one step) and block absmax\n",
                   (long long)coded, (long long)wte->numel);
        }
        // every 32-bit unit is small or the overridden embedding
        for (const OptUnit& x : o.units)
            CHECK(x.q8 == (x.numel >= c.adam8bit_min_size && !(stable && x.id == P_WTE)), "unit %s/%d: q8 = %d",
                  model.table.t[x.id].name, x.layer, x.q8);
        size_t want = (size_t)(2 * o.n32 + 2 * o.nblocks + (int64_t)o.units.size() * PCLIP_HISTORY) * 4 + (size_t)o.n8 * 2;
        CHECK(o.state_bytes == want, "state bytes %zu, want %zu", o.state_bytes, want);
        optimizer_free(&o);
        gpt_free(&model);
    }
}

// A (rows x cols) unit, block bs, sliced by columns over 2 ranks; rank 1 also holds `extra` elements
// that map nowhere (as the vocabulary's TP padding rows).
static void test_split(const Adam8bitMaps* q) {
    const int64_t rows = 9, cols = 100, n = rows * cols, half = cols / 2, extra = 70;
    const int bs = 64;
    const int64_t nb = (n + bs - 1) / bs;
    AdamHyper h = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0, 0};
    for (bool reduce : {true, false}) {
        std::vector<float> p(n), am(nb, 0.0f), av(nb, 0.0f);
        std::vector<uint8_t> cm(n, q->zero_m), cv(n, q->zero_v);
        for (int64_t i = 0; i < n; i++) p[i] = (float)(uniform(1, i) - 0.5);
        struct Rank {
            std::vector<int64_t> canon;  // local element -> canonical (-1: its own)
            std::vector<float> p, g, am, av, scratch;
            std::vector<uint8_t> cm, cv;
            AdamPieces t;
            int64_t nblocks;
        } rk[2];
        for (int r = 0; r < 2; r++) {
            Rank& R = rk[r];
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < half; j++) R.canon.push_back(i * cols + r * half + j);
            if (r == 1) R.canon.insert(R.canon.end(), extra, -1);
            int64_t nl = (int64_t)R.canon.size(), own = 0;
            for (int64_t x : R.canon) R.p.push_back(x >= 0 ? p[x] : 0.25f);
            R.cm.assign(nl, q->zero_m);
            R.cv.assign(nl, q->zero_v);
            // segments: runs of consecutive canonical elements inside one block (own elements: bs at a time)
            std::vector<std::array<int64_t, 3>> seg;  // block, first local element, length
            for (int64_t e = 0; e < nl; e++) {
                int64_t blk = R.canon[e] >= 0 ? R.canon[e] / bs : -1;
                bool cont = e > 0 && !seg.empty() && seg.back()[1] + seg.back()[2] == e &&
                            (blk >= 0 ? R.canon[e - 1] == R.canon[e] - 1 && seg.back()[0] == blk
                                      : R.canon[e - 1] < 0 && seg.back()[2] < bs);
                if (cont) seg.back()[2]++;
                else seg.push_back({blk >= 0 ? blk : nb + own++, e, 1});
            }
            std::stable_sort(seg.begin(), seg.end(), [](const std::array<int64_t, 3>& a, const std::array<int64_t, 3>& b) { return a[0] < b[0]; });
            std::vector<int64_t> op, os, ob, num;
            std::vector<uint8_t> dec;
            for (auto& sg : seg) {
                op.push_back(sg[1]);
                os.push_back(sg[1]);
                ob.push_back(sg[0]);
                num.push_back(sg[2]);
                dec.push_back(1);
            }
            adam_pieces_init(&R.t, op.data(), os.data(), ob.data(), num.data(), dec.data(), (int)seg.size(), bs);
            R.nblocks = nb + own;
            R.am.assign(R.nblocks, 0.0f);
            R.av.assign(R.nblocks, 0.0f);
            R.scratch.assign(2 * R.nblocks + 2 * seg.size(), 0.0f);
        }
        bool same = true;
        for (int64_t t = 1; t <= 3; t++) {
            h.c1 = 1.0f - std::pow(h.beta1, (float)t);
            h.c2 = std::sqrt(1.0f - std::pow(h.beta2, (float)t));
            float scale = t == 2 ? 0.7f : 1.0f;
            std::vector<float> g(n);
            for (int64_t i = 0; i < n; i++) g[i] = (float)((uniform(10 + t, i) - 0.5) * (i % 7 == 0 ? 10.0 : 1.0));
            adam8bit_update(p.data(), g.data(), cm.data(), cv.data(), am.data(), av.data(), n, bs, q, h, scale);
            for (Rank& R : rk) {
                R.g.clear();
                for (int64_t x : R.canon) R.g.push_back(x >= 0 ? g[x] : 0.0f);
                std::vector<float> sc(R.t.numel.size(), scale);
                float *bm = R.scratch.data(), *bv = bm + R.nblocks;
                adam8bit_split_maxima(R.g.data(), R.cm.data(), R.cv.data(), R.am.data(), R.av.data(), bm, bv, R.nblocks, bv + R.nblocks, &R.t,
                                      q, h, sc.data());
            }
            for (int64_t b = 0; b < nb && reduce; b++)
                for (int k = 0; k < 2; k++) {  // the all-reduce (MAX)
                    float* x = rk[0].scratch.data() + (k ? rk[0].nblocks : 0) + b;
                    float* y = rk[1].scratch.data() + (k ? rk[1].nblocks : 0) + b;
                    *x = *y = std::max(*x, *y);
                }
            for (Rank& R : rk) {
                std::vector<float> sc(R.t.numel.size(), scale);
                float *bm = R.scratch.data(), *bv = bm + R.nblocks;
                adam8bit_split_apply<float>(R.p.data(), nullptr, R.g.data(), R.cm.data(), R.cv.data(), R.am.data(), R.av.data(), bm, bv,
                                            R.nblocks, &R.t, q, h, sc.data());
            }
            int64_t wrong = 0;
            for (Rank& R : rk) {
                for (size_t e = 0; e < R.canon.size(); e++) {
                    int64_t x = R.canon[e];
                    if (x < 0) continue;
                    wrong += memcmp(&R.p[e], &p[x], 4) != 0 || R.cm[e] != cm[x] || R.cv[e] != cv[x];
                }
                for (int64_t b = 0; b < nb; b++) wrong += memcmp(&R.am[b], &am[b], 4) != 0 || memcmp(&R.av[b], &av[b], 4) != 0;
                for (size_t e = 0; e < R.canon.size(); e++)
                    if (R.canon[e] < 0) wrong += R.cm[e] != q->zero_m || R.cv[e] != q->zero_v;  // zero gradient: zero state
            }
            if (reduce) CHECK(wrong == 0, "split over 2 ranks, step %lld: %lld values differ from the whole unit's update", (long long)t, (long long)wrong);
            same = same && wrong == 0;
        }
        if (!reduce) CHECK(!same, "without the max over ranks the split update still matched: the check cannot fail");
        for (Rank& R : rk) adam_pieces_free(&R.t);
    }
    printf("ok: a unit sliced by columns over 2 ranks (block 64, 9 x 100, 70 own elements): 3 steps of split maxima, max over "
           "ranks, split apply = adam8bit_update over the whole unit, bit for bit; without the max they differ\n");
}

int main() {
    test_maps();
    test_nearest();
    Adam8bitMaps* q = new Adam8bitMaps;
    adam8bit_maps_init(q);
    test_block_roundtrip(q);
    test_step(q);
    test_percentile();
    test_stable_embedding();
    test_split(q);
    delete q;
    printf("%s\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
