// megatron_order.h — Megatron-DeepSpeed's sample order over indexed data (docs/megatron-data.md):
// numpy's legacy RandomState reproduced bit for bit, GPTDataset's three index arrays, and how many
// samples Megatron builds each dataset for. Pure functions of their arguments (no files, no flags),
// so a test can enumerate them and compare with numpy itself.
//
// GPTDataset (megatron/data/gpt_dataset.py) over the documents [doc_begin, doc_end) of a prefix
// (a "document" is one sequence of the .idx), built for `num_samples` samples of seq_length+1
// tokens, with seed s:
//   tokens_per_epoch = the documents' tokens; num_epochs = the fewest E with
//     (E·tokens_per_epoch - 1) / seq_length >= num_samples        (a sample shares its last token
//                                                                  with the next one's first)
//   rng = RandomState(s)                                           (MT19937, init_genrand(s))
//   doc_idx: the documents repeated E times, shuffled by rng — or, when the last epoch is "separate",
//     the first E-1 epochs shuffled together and then the last epoch shuffled on its own, so the
//     samples of a barely-used last epoch come from one pass over the data
//   sample_idx[i] = (position in doc_idx, token offset in that document) where sample i starts;
//     sample i is the tokens from sample_idx[i] up to and including sample_idx[i+1]'s token
//   shuffle_idx: a permutation of the samples by the same rng (with a separate last epoch: the
//     samples of the first E-1 epochs shuffled, then the rest shuffled on their own)
//   len = (E·tokens_per_epoch - 1) / seq_length samples; item k is sample shuffle_idx[k].
// The last epoch is separate when E > 1 and it contributes fewer than
// int(MEGATRON_LAST_EPOCH_CUTOFF · samples per epoch) of the samples asked for.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

// BigScience's Megatron-DeepSpeed (the fork whose scripts keel runs, and the one with weighted split
// paths) separates the last epoch below 95% of an epoch; Microsoft's and NVIDIA's trees use 80%.
static const double MEGATRON_LAST_EPOCH_CUTOFF = 0.95;

// ---- numpy.random.RandomState (legacy seeding and shuffle) -----------------------------------------

struct NumpyRng {
    uint32_t mt[624];
    int pos;
};

// RandomState(seed) for an integer seed in [0, 2^32): Matsumoto-Nishimura init_genrand.
static inline void numpy_rng_seed(NumpyRng* r, uint32_t seed) {
    r->mt[0] = seed;
    for (int i = 1; i < 624; i++) r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->pos = 624;
}

// genrand_int32: the next 32-bit output of MT19937 (a full twist every 624 draws).
static inline uint32_t numpy_rng_next32(NumpyRng* r) {
    if (r->pos == 624) {  // the twist, in the reference's three loops (no modulo in the hot path)
        auto twist = [](uint32_t a, uint32_t b, uint32_t m) {
            uint32_t y = (a & 0x80000000u) | (b & 0x7fffffffu);
            return m ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        };
        int i = 0;
        for (; i < 624 - 397; i++) r->mt[i] = twist(r->mt[i], r->mt[i + 1], r->mt[i + 397]);
        for (; i < 623; i++) r->mt[i] = twist(r->mt[i], r->mt[i + 1], r->mt[i + 397 - 624]);
        r->mt[623] = twist(r->mt[623], r->mt[0], r->mt[396]);
        r->pos = 0;
    }
    uint32_t y = r->mt[r->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

// 64 bits are two 32-bit draws, the first one high (numpy's mt19937 next_uint64).
static inline uint64_t numpy_rng_next64(NumpyRng* r) {
    uint64_t hi = numpy_rng_next32(r);
    return hi << 32 | numpy_rng_next32(r);
}

// numpy's random_interval: uniform in [0, max] by rejection — draws masked to the smallest all-ones
// mask covering max, redrawn while above it; one 32-bit draw per try when max fits 32 bits, else 64.
static inline uint64_t numpy_rng_interval(NumpyRng* r, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    for (int s = 1; s <= 32; s <<= 1) mask |= mask >> s;
    uint64_t v;
    if (max <= 0xffffffffull) {
        do v = numpy_rng_next32(r) & mask; while (v > max);
    } else {
        do v = numpy_rng_next64(r) & mask; while (v > max);
    }
    return v;
}

// RandomState.shuffle of a 1-D array: for i = n-1 down to 1, swap x[i] with x[interval(i)].
template <typename T>
static inline void numpy_rng_shuffle(NumpyRng* r, T* x, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)numpy_rng_interval(r, (uint64_t)i);
        T t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

// ---- GPTDataset's indices ----------------------------------------------------------------------------

struct GPTIndex {
    int64_t num_samples = 0;         // asked for (Megatron's target size)
    int64_t tokens_per_epoch = 0;
    int64_t num_epochs = 0;
    bool separate_last_epoch = false;
    int64_t len = 0;                 // samples the dataset holds: (E·tokens_per_epoch - 1) / seq_length
    std::vector<int32_t> doc_idx;    // (E·D) document ids in the order their tokens are laid out
    std::vector<int32_t> sample_idx; // (len+1, 2) position in doc_idx, token offset in that document
    std::vector<int64_t> shuffle_idx;// (len) item k of the dataset is sample shuffle_idx[k]
};

// _num_epochs: the fewest epochs whose tokens make num_samples samples. tokens_per_epoch > 1.
static inline int64_t megatron_num_epochs(int64_t tokens_per_epoch, int64_t seq_length, int64_t num_samples) {
    int64_t epochs = 0, total = 0;
    do {
        epochs++;
        total += tokens_per_epoch;
    } while ((total - 1) / seq_length < num_samples);
    return epochs;
}

// Fills the sizes of everything GPTIndex holds without building it (start-up lines, the loader's
// length): tokens per epoch, epochs, the separate-last-epoch rule and len. "" or why Megatron would
// refuse (an empty document range, fewer than two tokens). Here and below, documents are numbered as
// in the .idx and `sizes` holds those of the range: document d has sizes[d - doc_begin] tokens.
static inline std::string megatron_index_plan(GPTIndex* gi, const int32_t* sizes, int64_t doc_begin, int64_t doc_end,
                                              int64_t num_samples, int64_t seq_length) {
    gi->num_samples = num_samples;
    gi->tokens_per_epoch = 0;
    for (int64_t d = doc_begin; d < doc_end; d++) gi->tokens_per_epoch += sizes[d - doc_begin];
    if (doc_end <= doc_begin) return "no documents";
    if (gi->tokens_per_epoch < 2) return "fewer than 2 tokens";
    gi->num_epochs = megatron_num_epochs(gi->tokens_per_epoch, seq_length, num_samples);
    gi->separate_last_epoch = false;
    if (gi->num_epochs > 1) {
        int64_t from_first = ((gi->num_epochs - 1) * gi->tokens_per_epoch - 1) / seq_length;
        int64_t last_epoch_samples = num_samples - from_first;
        int64_t per_epoch = (gi->tokens_per_epoch - 1) / seq_length;
        gi->separate_last_epoch = last_epoch_samples < (int64_t)(MEGATRON_LAST_EPOCH_CUTOFF * (double)per_epoch);
    }
    gi->len = (gi->num_epochs * gi->tokens_per_epoch - 1) / seq_length;
    if (gi->num_epochs * (doc_end - doc_begin) > INT32_MAX)
        return "its document index (" + std::to_string(gi->num_epochs) + " epochs x " + std::to_string(doc_end - doc_begin) +
               " documents) passes 2^31 entries, where Megatron's int32 sample index overflows";
    return "";
}

// _build_doc_idx: `epochs` copies of the documents, shuffled together.
static inline void megatron_doc_idx_append(std::vector<int32_t>* out, int64_t doc_begin, int64_t doc_end, int64_t epochs,
                                           NumpyRng* rng) {
    size_t at = out->size();
    for (int64_t e = 0; e < epochs; e++)
        for (int64_t d = doc_begin; d < doc_end; d++) out->push_back((int32_t)d);
    numpy_rng_shuffle(rng, out->data() + at, (int64_t)(out->size() - at));
}

// helpers.cpp build_sample_idx: walks doc_idx taking seq_length+1 tokens per sample; the next sample
// starts on the last token of this one (offset + remaining - 1), so inputs and targets overlap by one.
static inline void megatron_sample_idx(GPTIndex* gi, const int32_t* sizes, int64_t doc_begin, int64_t seq_length) {
    gi->sample_idx.assign(2 * (size_t)(gi->len + 1), 0);
    int64_t doc_pos = 0;
    int32_t offset = 0;
    for (int64_t i = 1; i <= gi->len; i++) {
        int64_t remaining = seq_length + 1;
        while (remaining != 0) {
            int64_t doc_length = sizes[gi->doc_idx[doc_pos] - doc_begin] - offset;
            remaining -= doc_length;
            if (remaining <= 0) {
                offset += (int32_t)(remaining + doc_length - 1);
                remaining = 0;
            } else {
                doc_pos++;
                offset = 0;
            }
        }
        gi->sample_idx[2 * i] = (int32_t)doc_pos;
        gi->sample_idx[2 * i + 1] = offset;
    }
}

// Builds the three arrays in Megatron's order of draws from one RandomState(seed): doc_idx (one or
// two shuffles), then shuffle_idx (one or two). The plan (megatron_index_plan) must be "".
static inline void megatron_index_build(GPTIndex* gi, const int32_t* sizes, int64_t doc_begin, int64_t doc_end,
                                        int64_t seq_length, uint32_t seed) {
    NumpyRng rng;
    numpy_rng_seed(&rng, seed);
    gi->doc_idx.clear();
    gi->doc_idx.reserve((size_t)(gi->num_epochs * (doc_end - doc_begin)));
    if (gi->separate_last_epoch) {
        megatron_doc_idx_append(&gi->doc_idx, doc_begin, doc_end, gi->num_epochs - 1, &rng);
        megatron_doc_idx_append(&gi->doc_idx, doc_begin, doc_end, 1, &rng);
    } else {
        megatron_doc_idx_append(&gi->doc_idx, doc_begin, doc_end, gi->num_epochs, &rng);
    }
    megatron_sample_idx(gi, sizes, doc_begin, seq_length);
    int64_t first = gi->separate_last_epoch ? ((gi->num_epochs - 1) * gi->tokens_per_epoch - 1) / seq_length : gi->len;
    gi->shuffle_idx.resize((size_t)gi->len);
    for (int64_t i = 0; i < gi->len; i++) gi->shuffle_idx[i] = i;
    numpy_rng_shuffle(&rng, gi->shuffle_idx.data(), first);
    if (first < gi->len) numpy_rng_shuffle(&rng, gi->shuffle_idx.data() + first, gi->len - first);
}

// ---- how many samples Megatron builds each dataset for -------------------------------------------

// build_train_valid_test_data_iterators: train = --train-samples, else train_iters x global batch;
// validation = (train_iters / eval_interval + 1) x eval_iters x global batch (every evaluation of
// the run plus the final one reads fresh samples); test = eval_iters x global batch.
static inline void megatron_split_num_samples(int64_t train_samples, int64_t train_iters, int64_t global_batch,
                                              int64_t eval_interval, int64_t eval_iters, int64_t out[3]) {
    out[0] = train_samples > 0 ? train_samples : train_iters * global_batch;
    out[1] = ((eval_interval > 0 ? train_iters / eval_interval : 0) + 1) * eval_iters * global_batch;
    out[2] = eval_iters * global_batch;
}

// get_datasets_weights_and_num_samples: each dataset of a blend is built for
// ceil(num_samples x weight x 1.005) samples, weight normalized once by the sum (in that order of
// operations, in doubles), so the greedy blend never runs a dataset dry.
static inline int64_t megatron_blend_num_samples(int64_t num_samples, double normalized_weight) {
    return (int64_t)std::ceil((double)num_samples * normalized_weight * 1.005);
}
