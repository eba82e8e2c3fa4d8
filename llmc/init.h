// init.h — initialization (docs/knobs.md#initialization, #embedding-layernorm-and-stableembedding, #activations-dropout-positions-and-alibi), driven by the counter-based RNG.
//
// σ comes from --init-method:  std → --init-method-std;  small_init → sqrt(2/(5h)) (Transformers
// without Tears; the BigScience 104B's 0.006 for h = 11600);  mt_nlg → sqrt(1/(3h)) (MT-NLG 530B;
// BLOOM 176B's 0.0048 for h = 14336). Output projections (attention out, MLP down) take
// σ/sqrt(2·L) with L the GLOBAL layer count, as Megatron, also under pipeline parallelism.
// Per tensor the parameter table's rule applies (llmc/model.h): normal, scaled normal, the
// StableEmbedding xavier-uniform word embedding, the sinusoidal position table, ones, zeros.
//
// Element i of tensor t is a pure function of (seed, name(t), i): the same on any thread count
// and any parallel layout (TP=2 initialises exactly like TP=1), and adding a tensor to the table
// does not move any other tensor's values.
#pragma once
#include <cmath>
#include <string>

#include "llmc/common.h"
#include "llmc/model.h"
#include "llmc/rand.h"

// σ of the normal init for --init-method (hidden = h).
static inline double init_sigma(const std::string& method, double init_method_std, int64_t hidden) {
    if (method == "small_init") return std::sqrt(2.0 / (5.0 * (double)hidden));
    if (method == "mt_nlg") return std::sqrt(1.0 / (3.0 * (double)hidden));
    if (method == "std") return init_method_std;
    keel_usage_error("--init-method: '%s' is not one of std|small_init|mt_nlg", method.c_str());
}

// A stable 64-bit key per tensor name: init keys do not shift when the table grows.
static inline uint64_t param_name_key(const char* name) {
    uint64_t h = 1469598103934665603ull;
    for (; *name; name++) h = (h ^ (uint8_t)*name) * 1099511628211ull;
    return h;
}

// Sinusoidal position table value at (pos, column j) of width C, tensor2tensor layout (the sines
// of all frequencies, then the cosines; concatenated, not interleaved), as fairseq/metaseq's
// SinusoidalPositionalEmbedding. An odd C leaves the last column 0, as fairseq pads.
static inline double init_sinusoidal(int64_t pos, int64_t j, int64_t C) {
    int64_t half = C / 2;
    if (j >= 2 * half) return 0.0;
    double step = half > 1 ? std::log(10000.0) / (double)(half - 1) : 0.0;
    int64_t k = j < half ? j : j - half;
    double angle = (double)pos * std::exp(-(double)k * step);
    return j < half ? std::sin(angle) : std::cos(angle);
}

// Fills the canonical buffer.
template <typename F>
void param_table_init(F* params, const ParamTable* pt, const GPTConfig* cfg, double sigma, uint64_t seed) {
    double xavier = std::sqrt(6.0 / (double)(cfg->padded_vocab_size + cfg->channels));
    for (int id = 0; id < NUM_PARAMS; id++) {
        const ParamTensor* t = &pt->t[id];
        F* p = params + t->offset_canonical;
        uint64_t key = param_name_key(t->name);
        double s = t->init == INIT_NORMAL_OUTPUT ? sigma / std::sqrt(2.0 * cfg->num_layers) : sigma;
#pragma omp parallel for
        for (int64_t i = 0; i < t->numel; i++) {
            double v = 0;
            bool real_row = (i / t->cols) < cfg->vocab_size;
            switch (t->init) {
                case INIT_ZERO: v = 0; break;
                case INIT_ONE: v = 1; break;
                case INIT_NORMAL_VOCAB: v = real_row ? s * rng_normal(seed, RNG_INIT, key, (uint64_t)i) : 0; break;
                case INIT_XAVIER_VOCAB:
                    v = real_row ? xavier * (2.0 * rng_uniform(seed, RNG_INIT, key, (uint64_t)i) - 1.0) : 0;
                    break;
                case INIT_SINUSOIDAL: v = init_sinusoidal(i / t->cols, i % t->cols, t->cols); break;
                default: v = s * rng_normal(seed, RNG_INIT, key, (uint64_t)i); break;
            }
            p[i] = (F)v;
        }
    }
}
