// test_adam_reference — the optimizer's step (llmc/optimizer.h optimizer_step, through the CPU ops of
// cpu/adamw.h and cpu/adam8bit.h) against Adam written out here, in double, from the papers' formulas:
//   t = 1, 2, 3 (counted here, not read from the optimizer); bc1 = 1 - β1^t, bc2 = 1 - β2^t
//   m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²;  u = (m/bc1) / (sqrt(v/bc2) + eps)
//   --optimizer adam (AdamW, APEX adam_w_mode):  p = p - lr·(u + wd·p)
//   --optimizer adam8bit (bitsandbytes):         p = (p - lr·u)·(1 - lr·wd), the moments dequantized
//       from the stored codes (m = map_m[code]·absmax_m of the block) and stored again per block of
//       64: absmax = max |m| (max v) over the block, code = the nearest map entry to m/absmax (m's
//       code moved one entry toward m's sign when the nearest one has the other sign)
// wd applies to the embeddings and the linear layers' weights (the list below, by name). A tiny
// model (every tensor kind, 8-bit and 32-bit units, several blocks per unit) takes 3 steps with
// fixed gradients of different sizes per tensor; before each step the reference starts from the
// optimizer's own parameters and state, so every step is compared with a tight tolerance: the
// parameters to 3 ulp + lr·1e-6, the fp32 moments to 1e-6 relative, the block scales to 1e-6, every
// code one the rule allows for a moment within 1e-5 of the reference's. A bias correction off by one
// step (β^(t+1)) moves the first step by 27% of lr. Also ZeRO-1's shard boundary rule, on hand-made units.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "llmc/init.h"
#include "llmc/optimizer.h"
#include "llmc/rand.h"
#include "test/unit_check.h"


// Megatron-DeepSpeed's decay group, by name: embeddings and the weights of linear layers.
static bool decays(const char* name) {
    for (const char* d : {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"})
        if (strcmp(name, d) == 0) return true;
    return false;
}

static double ulp32(double x) { return std::ldexp(1.0, std::max(std::ilogb(std::fabs(x) + 1e-45) - 23, -149)); }

// The codes the rule allows for moment x against scale amax: the nearest map entries to x/amax
// (any within slack of the nearest), each moved one entry toward x's sign if it has the other sign.
static bool code_allowed(const float* map, bool is_signed, double x, double amax, int code, double slack) {
    if (amax == 0) return map[code] == 0.0f;
    double y = x / amax, best = 1e30;
    for (int c = 0; c < QMAP_SIZE; c++) best = std::min(best, std::fabs(map[c] - y));
    for (int c = 0; c < QMAP_SIZE; c++) {
        if (std::fabs(map[c] - y) > best + slack) continue;
        int k = c;
        if (is_signed && std::signbit(map[c]) != std::signbit(y)) k += y > 0 ? 1 : -1;
        if (k == code) return true;
    }
    return false;
}

struct Worst { double p = 0, m = 0, scale = 0; int64_t codes = 0; };

static void run(const char* optimizer) {
    GPTConfig cfg = {16, 64, gpt_padded_vocab(64, 128), 2, 2, 32};
    GPT<float> model;
    gpt_build(&model, &cfg, 1, 16);
    param_table_init(model.params, &model.table, &cfg, 0.02, 1);
    const ParamTable* pt = &model.table;
    for (int64_t i = 0; i < pt->total; i++) model.params[i] += (float)(rng_uniform(5, 1, 0, i) - 0.5) * 0.1f;  // biases, gains off 0 and 1
    Config c;
    c.optimizer = optimizer;
    c.lr = 1e-2;
    c.weight_decay = 0.1;
    c.adam_beta1 = 0.9;
    c.adam_beta2 = 0.95;
    c.adam_eps = 1e-8;
    c.clip_grad = 0;
    c.adam8bit_block_size = 64;
    c.adam8bit_min_size = 1024;  // the matrices and the embeddings 8-bit, the vectors 32-bit
    c.adam8bit_percentile_clipping = 100;
    Optimizer o;
    optimizer_init(&o, pt, &c);
    UpdateGuard guard;
    update_guard_init(&guard, &c);
    SpikeState spike;
    spike_init(&spike, &c);
    Comm comm{};  // one process: rank 0 of 1, no MPI
    comm.size = 1;
    const double lr = c.lr, b1 = c.adam_beta1, b2 = c.adam_beta2, eps = c.adam_eps, wd = c.weight_decay;
    int64_t n = pt->total, units8 = 0;
    Worst worst;
    for (int t = 1; t <= 3; t++) {
        // gradients: a different size per tensor and per step, so the blocks' scales and both moments move
        for (int id = 0; id < NUM_PARAMS; id++)
            for (int64_t i = 0; i < pt->t[id].numel; i++) {
                int64_t k = pt->t[id].offset_canonical + i;
                model.grads[k] = (float)((rng_uniform(7, (uint64_t)t, 0, k) - 0.5) * 0.02 * (1 + id % 5) * (t == 2 ? 3 : 1));
            }
        // the reference's start: the optimizer's parameters and its (dequantized) moments
        std::vector<double> p0(model.params, model.params + n), m0(n), v0(n);
        for (const OptUnit& u : o.units)
            for (int64_t i = 0; i < u.numel; i++) {
                int64_t k = u.offset_canonical + i, s = u.offset_state + i, b = u.offset_block + i / o.block_size;
                m0[k] = u.q8 ? (double)o.maps->map_m[o.code_m[s]] * o.absmax_m[b] : o.m32[s];
                v0[k] = u.q8 ? (double)o.maps->map_v[o.code_v[s]] * o.absmax_v[b] : o.v32[s];
            }
        std::vector<float> g(model.grads, model.grads + n);
        StepResult r = optimizer_step(&o, &comm, nullptr, &model, &guard, &spike, &c, t, lr, 1.0, false);
        CHECK(!r.skipped, "%s step %d skipped", optimizer, t);
        double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
        for (const OptUnit& u : o.units) {
            bool dec = decays(pt->t[u.id].name);
            units8 += u.q8 && t == 1;
            std::vector<double> m(u.numel), v(u.numel);
            for (int64_t i = 0; i < u.numel; i++) {
                int64_t k = u.offset_canonical + i;
                m[i] = b1 * m0[k] + (1 - b1) * g[k];
                v[i] = b2 * v0[k] + (1 - b2) * (double)g[k] * g[k];
                double step = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps), want;
                if (strcmp(optimizer, "adam") == 0) want = p0[k] - lr * (step + (dec ? wd : 0.0) * p0[k]);
                else want = (p0[k] - lr * step) * (dec ? 1 - lr * wd : 1.0);
                double err = std::fabs(model.params[k] - want), tol = 3 * ulp32(want) + lr * 1e-6;
                worst.p = std::max(worst.p, err / tol);
                CHECK(err <= tol, "%s step %d: %s layer %d element %lld is %.9g, the reference %.9g (%.3g ulp)", optimizer, t,
                      pt->t[u.id].name, u.layer, (long long)i, model.params[k], want, err / ulp32(want));
                if (err > tol) return;
                if (!u.q8) {
                    // m relative to the size of its terms (their sum may cancel)
                    double mm = b1 * std::fabs(m0[k]) + (1 - b1) * std::fabs(g[k]) + 1e-30, vv = v[i] + 1e-30;
                    double em = std::fabs(o.m32[u.offset_state + i] - m[i]), ev = std::fabs(o.v32[u.offset_state + i] - v[i]);
                    worst.m = std::max({worst.m, em / mm, ev / vv});
                    CHECK(em <= 1e-6 * mm && ev <= 1e-6 * vv, "%s step %d: %s layer %d m/v %lld: %g %g vs %g %g",
                          optimizer, t, pt->t[u.id].name, u.layer, (long long)i, o.m32[u.offset_state + i], o.v32[u.offset_state + i], m[i], v[i]);
                }
            }
            if (!u.q8) continue;
            for (int64_t lo = 0; lo < u.numel; lo += o.block_size) {  // the blocks: scales and codes
                int64_t hi = std::min(u.numel, lo + o.block_size), b = u.offset_block + lo / o.block_size;
                double am = 0, av = 0;
                for (int64_t i = lo; i < hi; i++) {
                    am = std::max(am, std::fabs(m[i]));
                    av = std::max(av, v[i]);
                }
                double es = std::max(std::fabs(o.absmax_m[b] - am) / am, std::fabs(o.absmax_v[b] - av) / av);
                worst.scale = std::max(worst.scale, es);
                CHECK(es <= 1e-6, "%s step %d: %s layer %d block %lld scales %g %g, the reference %g %g", optimizer, t, pt->t[u.id].name,
                      u.layer, (long long)(lo / o.block_size), o.absmax_m[b], o.absmax_v[b], am, av);
                for (int64_t i = lo; i < hi; i++) {
                    int64_t s = u.offset_state + i;
                    bool okm = code_allowed(o.maps->map_m, true, m[i], am, o.code_m[s], 1e-5 * std::fabs(m[i] / am) + 1e-7);
                    bool okv = code_allowed(o.maps->map_v, false, v[i], av, o.code_v[s], 1e-5 * (v[i] / av) + 1e-7);
                    worst.codes++;
                    CHECK(okm && okv, "%s step %d: %s layer %d element %lld: code m %d (%s), code v %d (%s)", optimizer, t, pt->t[u.id].name,
                          u.layer, (long long)i, o.code_m[s], okm ? "ok" : "not the nearest", o.code_v[s], okv ? "ok" : "not the nearest");
                    if (!(okm && okv)) return;
                }
            }
        }
    }
    CHECK(strcmp(optimizer, "adam") == 0 || units8 > 0, "adam8bit: no unit has 8-bit state");
    printf("ok: %s, 3 steps, %lld parameters (%lld units in 8-bit state): worst parameter error %.2f of its tolerance, "
           "fp32 moments %.2g relative to their terms, block scales %.2g relative, %lld codes checked\n",
           optimizer, (long long)n, (long long)units8, worst.p, worst.m, worst.scale, (long long)worst.codes);
    optimizer_free(&o);
    gpt_free(&model);
}

// ZeRO-1's shard boundaries (optimizer_shards): r·P/dp moved down to a GRAD_CHUNK boundary counted from
// the start of the unit it falls in (so a shard's chunks are the one-process norm's chunks). Units of
// 1000, 5·G and 10 elements (G = GRAD_CHUNK), dp = 2: P/2 = 505 + 2.5·G lies 2.5·G - 495 into the second
// unit, so the boundary is 1000 + 2·G (a multiple of G in the flat buffer would be 2·G).
static void shards() {
    const int64_t G = GRAD_CHUNK, sizes[3] = {1000, 5 * G, 10};
    std::vector<OptUnit> units(3);
    int64_t total = 0;
    for (int i = 0; i < 3; i++) {
        units[i].offset_canonical = total;
        units[i].numel = sizes[i];
        total += sizes[i];
    }
    std::vector<int64_t> lo = optimizer_shards(units, total, 2);
    CHECK(lo.size() == 3 && lo[0] == 0 && lo[1] == 1000 + 2 * G && lo[2] == total, "shards at dp 2: %lld %lld %lld, want 0 %lld %lld",
          (long long)lo[0], (long long)lo[1], (long long)lo[2], (long long)(1000 + 2 * G), (long long)total);
    if (lo.size() == 3 && lo[1] == 1000 + 2 * G) printf("ok: ZeRO-1 shard boundary on a unit-relative GRAD_CHUNK boundary\n");
}

int main() {
    run("adam");
    run("adam8bit");
    shards();
    if (fails) {
        printf("FAIL (%d)\n", fails);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
