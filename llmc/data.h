// data.h — token shards, the sample index and the deterministic sampler (docs/internals.md#data).
//
// Two orders, by where the data comes from:
//
// llm.c shards (--train-data-path/--valid-data-path naming shards): keel's own order.
//   Shard format (llm.c's, so llm.c / FineWeb shards work unchanged):
//     header: 256 × int32 — [0] magic 20240520, [1] version 1, [2] number of tokens; rest zero
//     body:   ntok × uint16 token ids
//   A sample is seq_length+1 consecutive tokens of one shard; sample k of a shard starts at token
//   k·seq_length, so consecutive samples share one token and every token after the first is a target
//   exactly once. A shard with ntok tokens holds (ntok-1)/seq_length samples; the samples of all
//   shards (in sorted glob order) form one index space [0, N). With shuffling, epoch e visits them in
//   the permutation perm(seed, e) — a Fisher-Yates shuffle driven by the counter RNG, a pure function
//   of (seed, epoch). Sample number s (the s-th sample the run ever consumed, counted from 0) is
//   perm(seed, s / N)[s % N]. Without shuffling (validation) s maps to s % N.
//
// Megatron indexed data (--data-path with --split, weighted split paths, or a prefix given as
//   --train-data-path/--valid-data-path): Megatron-DeepSpeed's own order (docs/megatron-data.md).
//   Each prefix's part is a GPTDataset (llmc/megatron_order.h) built for the samples Megatron builds
//   it for — the split's target size, or with a blend ceil(target x weight x 1.005) — from numpy's
//   RandomState(seed); a sample is seq_length+1 tokens that may span documents. Item k of a dataset
//   is its sample shuffle_idx[k], for validation too (Megatron shuffles every split).
//
// Blends (--data-path W1 P1 W2 P2 ..., weighted split paths): sample number s goes to the dataset
// that Megatron's build_blending_indices picks for it (greedy by weight error, a pure function of s)
// and is that dataset's k-th item. Either way resuming needs only the consumed-sample count, and the
// data-parallel ranks split each global batch as Megatron's sequential sampler does
// (batch_first_sample).
#pragma once
#include <algorithm>
#include <glob.h>
#include <string>
#include <vector>

#include "llmc/common.h"
#include "llmc/flags.h"
#include "llmc/megatron_data.h"
#include "llmc/megatron_order.h"
#include "llmc/rand.h"

enum { SHARD_MAGIC = 20240520, SHARD_VERSION = 1, SHARD_HEADER_INTS = 256 };

// Writes tokens as one shard: to PATH.tmp, synced, then renamed and the directory synced, so neither
// a crash nor a power loss leaves a torn shard under the final name.
static inline void shard_write(const char* path, const uint16_t* tokens, size_t ntok) {
    std::string tmp = std::string(path) + ".tmp";
    FILE* f = fopen_check(tmp.c_str(), "wb");
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = SHARD_MAGIC;
    header[1] = SHARD_VERSION;
    if (ntok > (size_t)INT32_MAX) keel_die("shard '%s': %zu tokens exceed the format's int32 count", path, ntok);
    header[2] = (int32_t)ntok;
    fwrite_check(header, sizeof(int32_t), SHARD_HEADER_INTS, f, tmp.c_str());
    fwrite_check(tokens, sizeof(uint16_t), ntok, f, tmp.c_str());
    FILE_CHECK(fflush(f) == 0 && fsync(fileno(f)) == 0, "fsync", tmp.c_str());
    FILE_CHECK(fclose(f) == 0, "fclose", tmp.c_str());
    FILE_CHECK(rename(tmp.c_str(), path) == 0, "rename", tmp.c_str());
    fsync_parent_dir(path);  // a shard under its final name is complete after a power loss too
}

// One contiguous token range of one file, cut into samples of seq_len+1 tokens: a whole llm.c shard,
// or the sequences of one Megatron prefix's split (llmc/megatron_data.h) read from its .bin.
struct Shard {
    std::string path;
    FILE* file;
    int dtype = MD_UINT16;       // how ids are stored (a Megatron dtype code; llm.c shards: uint16)
    int width = 2;               // bytes per id
    int64_t data_offset = SHARD_HEADER_INTS * 4;  // bytes before token 0 of the file (a .bin: 0)
    int64_t token_first = 0;     // the range's first token in the file (a Megatron split starts mid-file)
    int64_t ntok;                // tokens in the range
    int64_t first_sample;        // index of this range's first sample in its dataset's index space
    int64_t nsamples;
};

// Opens and validates one shard: a regular file (not a directory; a FIFO would block the read),
// magic, version, a token count >= 0, exact file size, every token id < vocab_size.
static inline void shard_open(Shard* s, const char* path, int vocab_size) {
    s->path = path;
    if (vocab_size > 65536)  // an id >= 65536 could never be trained: say so rather than run with the rows unused
        keel_die_code(KEEL_EXIT_USAGE, "write the data as Megatron int32 .bin/.idx (./megatron_data write --dtype int32)",
                      "shard '%s': llm.c shards store uint16 token ids, which cannot reach --vocab-size %d", path, vocab_size);
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        keel_die("shard '%s': %s, not a token shard", path, S_ISDIR(sb.st_mode) ? "is a directory" : "not a regular file");
    FilePtr f(fopen(path, "rb"));
    if (!f) keel_die("shard '%s': cannot open: %s", path, strerror(errno));
    int32_t header[SHARD_HEADER_INTS];
    if (fread(header, sizeof(int32_t), SHARD_HEADER_INTS, f.get()) != SHARD_HEADER_INTS)
        keel_die("shard '%s': truncated header (a shard starts with 256 int32s)", path);
    if (header[0] != SHARD_MAGIC)
        keel_die("shard '%s': bad magic %d (expected %d): not an llm.c token shard", path, header[0], SHARD_MAGIC);
    if (header[1] != SHARD_VERSION)
        keel_die("shard '%s': unsupported version %d (expected %d)", path, header[1], SHARD_VERSION);
    s->ntok = header[2];
    if (s->ntok < 0) keel_die("shard '%s': the header's token count is negative (%lld): a corrupt header", path, (long long)s->ntok);
    fseek(f.get(), 0, SEEK_END);
    int64_t bytes = ftell(f.get());
    int64_t expect = (int64_t)sizeof(header) + s->ntok * 2;
    if (bytes != expect)
        keel_die("shard '%s': %s: header says %lld tokens (%lld bytes) but the file has %lld bytes", path,
                 bytes < expect ? "truncated" : "trailing bytes", (long long)s->ntok, (long long)expect,
                 (long long)bytes);
    // One pass over the ids: a bad id is reported here, by position, not as a crash mid-run.
    fseek(f.get(), sizeof(header), SEEK_SET);
    std::vector<uint16_t> buf(1 << 20);
    for (int64_t done = 0; done < s->ntok;) {
        size_t n = (size_t)std::min<int64_t>(buf.size(), s->ntok - done);
        if (fread(buf.data(), 2, n, f.get()) != n) keel_die("shard '%s': read failed", path);
        for (size_t i = 0; i < n; i++)
            if (buf[i] >= vocab_size)
                keel_die("shard '%s': token id %d at position %lld is >= the vocabulary size %d", path, buf[i],
                         (long long)(done + i), vocab_size);
        done += n;
    }
    s->file = f.release();
}

// One index space [0, nsamples). keel's order: the samples of its ranges in order, visited epoch by
// epoch in the permutation perm(seed, epoch) (with shuffling). Megatron's order (gpt): a GPTDataset
// over the documents [doc_begin, doc_end) of one prefix, whose indices are built for the loader's
// seed on first use. A run reads one DataSet, or a blend of several.
struct DataSet {
    std::string name;          // the glob or the Megatron prefix (and its part), for messages
    std::vector<Shard> shards; // Megatron's order: one, the whole .bin
    int64_t nsamples = 0;
    int64_t perm_epoch = -1;   // the epoch `perm` holds, -1 if none
    std::vector<int64_t> perm;
    bool gpt = false;          // Megatron's order
    int64_t doc_begin = 0, doc_end = 0;
    std::vector<int32_t> sizes;      // (doc_end - doc_begin) tokens of each document of the part
    std::vector<int64_t> doc_token;  // (doc_end - doc_begin) the first token of each in the .bin
    GPTIndex gi;                     // sizes planned at open; arrays built for gi_seed
    int64_t gi_seed = -1;            // the seed the arrays hold, -1 if none
};

// Which order a run's consumed-sample count walks (recorded in checkpoints as data.order): a
// checkpoint written before the record (0) counted Megatron data in keel's former order.
enum { DATA_ORDER_UNRECORDED = 0, DATA_ORDER_KEEL = 1, DATA_ORDER_MEGATRON = 2 };

struct DataLoader {
    std::vector<DataSet> sets;     // one, or the datasets of a blend
    std::vector<double> weights;   // the blend's normalized weights (Megatron's), empty without a blend
    int seq_len;                   // T: a sample is T+1 tokens
    int64_t nsamples;              // N: the samples of all sets (one epoch of a single set)
    uint64_t seed;
    bool shuffle;
    int64_t megatron_samples = -1; // Megatron's order: the samples the split's dataset is built for; -1: keel's order
    // the blend's cursor: the per-dataset counts after the first blend_pos samples
    int64_t blend_pos = 0;
    std::vector<int64_t> blend_count;
};

// Where the run's sample number s lives: dataset `set`, that dataset's sample number k (epoch
// k / its N), the shuffled index in its index space, the range and the first token in the file.
struct DataLoc {
    int set;
    int64_t k, epoch, index;
    const Shard* shard;
    int64_t offset;  // the sample's first token, counted from the file's token 0
};

// Megatron's order: one contiguous piece of a sample, `count` tokens of document `doc` from `from`.
struct DocPiece {
    int64_t doc, from, count;
};

// The shard paths of a glob or comma list, each glob's matches in sorted order.
static inline std::vector<std::string> dataloader_glob(const std::string& all) {
    std::vector<std::string> paths;
    for (size_t pos = 0; pos <= all.size();) {
        size_t comma = all.find(',', pos);
        if (comma == std::string::npos) comma = all.size();
        std::string one = all.substr(pos, comma - pos);
        pos = comma + 1;
        if (one.empty()) continue;
        glob_t g;
        int rc = glob(one.c_str(), 0, nullptr, &g);
        if (rc != 0) keel_die("data path '%s': no file matches", one.c_str());
        std::vector<std::string> found(g.gl_pathv, g.gl_pathv + g.gl_pathc);
        globfree(&g);
        std::sort(found.begin(), found.end());
        paths.insert(paths.end(), found.begin(), found.end());
    }
    if (paths.empty()) keel_die("data path '%s': no file matches", all.c_str());
    return paths;
}

static inline void dataset_add_range(DataSet* set, Shard s, int seq_len) {
    s.first_sample = set->nsamples;
    s.nsamples = s.ntok > 0 ? (s.ntok - 1) / seq_len : 0;
    set->nsamples += s.nsamples;
    set->shards.push_back(s);
}

static inline void dataloader_free(DataLoader* dl) {
    for (DataSet& set : dl->sets)
        for (Shard& s : set.shards) fclose(s.file);
    dl->sets.clear();
}

// A Megatron prefix "P", "P.idx" or "P.bin" names a prefix when both files exist; else "".
static inline std::string dataloader_megatron_prefix(const std::string& path) {
    if (megatron_is_prefix(path)) return path;
    for (const char* ext : {".idx", ".bin"}) {
        size_t n = path.size();
        if (n > 4 && path.compare(n - 4, 4, ext) == 0 && megatron_is_prefix(path.substr(0, n - 4))) return path.substr(0, n - 4);
    }
    return "";
}

// The sequences [begin, end) of a source: all, a --split part, or a START:END range.
static inline void dataloader_source_range(const DataSourceSpec* src, const MegatronData* md, const std::string& split,
                                           int64_t* begin, int64_t* end) {
    int64_t N = (int64_t)md->ix.sizes.size();
    *begin = 0, *end = N;
    if (src->part >= 0) {
        int64_t b[4];
        std::string why = megatron_split_bounds(split, N, b);
        if (!why.empty()) keel_usage_error("--split '%s': %s", split.c_str(), why.c_str());
        *begin = b[src->part], *end = b[src->part + 1];
    } else if (src->part == -2) {
        std::string why = megatron_range_bounds(src->range, N, begin, end);
        if (!why.empty()) keel_usage_error("weighted split paths, dataset '%s': %s", src->path.c_str(), why.c_str());
    }
}

// Megatron's order for one prefix's documents [begin, end): a GPTDataset built for `target`
// samples; its length is known now, its arrays are built for the seed on first use.
static inline void dataset_plan_gpt(DataSet* set, const MegatronData* md, int64_t begin, int64_t end, int64_t target, int seq_len) {
    set->gpt = true;
    set->doc_begin = begin;
    set->doc_end = end;
    set->sizes.assign(md->ix.sizes.begin() + begin, md->ix.sizes.begin() + end);  // the part's only: a prefix may hold 10^8
    set->doc_token.resize(end - begin);
    for (int64_t d = begin; d < end; d++) set->doc_token[d - begin] = md->ix.pointers[d] / md->ix.width;
    set->nsamples = 0;
    if (end <= begin) return;  // an empty part: Megatron builds no dataset for it
    std::string why = megatron_index_plan(&set->gi, set->sizes.data(), begin, end, target, seq_len);
    if (!why.empty()) keel_die("data '%s': Megatron's GPTDataset cannot be built: %s", set->name.c_str(), why.c_str());
    set->nsamples = set->gi.len;
    set->shards[0].nsamples = set->gi.len;
}

// One dataset of the loader from a source: llm.c shards (a glob), or a Megatron prefix's sequences
// (in Megatron's order when target >= 0: the samples its GPTDataset is built for).
// A dataset without a sample is an error, or (empty_ok) reported by returning false.
static inline bool dataloader_add_source(DataLoader* dl, const DataSourceSpec* src, const std::string& split, int vocab_size,
                                         int64_t target, bool empty_ok) {
    static const char* part_names[] = {"train", "valid", "test"};
    DataSet set;
    std::string prefix = dataloader_megatron_prefix(src->path);
    if (prefix.empty() && src->part != -1)  // --split and START:END carve a prefix's sequences; shards have none
        keel_usage_error("'%s' is not a Megatron prefix (no %s.idx and %s.bin): --data-path and weighted split paths name "
                         "prefixes; llm.c shards go in --train-data-path/--valid-data-path", src->path.c_str(), src->path.c_str(),
                         src->path.c_str());
    if (prefix.empty()) {
        set.name = src->path;
        for (const std::string& p : dataloader_glob(src->path)) {
            Shard s;
            shard_open(&s, p.c_str(), vocab_size);
            dataset_add_range(&set, s, dl->seq_len);
        }
    } else {
        MegatronData md;
        megatron_open(&md, prefix, vocab_size);
        int64_t begin, end;
        dataloader_source_range(src, &md, split, &begin, &end);
        Shard s;
        s.path = md.bin_path;
        s.file = fopen_check(md.bin_path.c_str(), "rb");
        s.dtype = md.ix.dtype;
        s.width = md.ix.width;
        s.data_offset = 0;
        int64_t N = (int64_t)md.ix.sizes.size();
        s.token_first = begin < N ? md.ix.pointers[begin] / md.ix.width : md.ix.ntok;
        s.ntok = (end < N ? md.ix.pointers[end] / md.ix.width : md.ix.ntok) - s.token_first;
        set.name = prefix + (src->part >= 0 ? std::string(" (") + part_names[src->part] + " part of --split " + split + ")"
                             : src->part == -2 ? " (" + src->range + ")" : "");
        set.name += ": sequences " + std::to_string(begin) + "-" + std::to_string(end);
        dataset_add_range(&set, s, dl->seq_len);
        if (target >= 0) dataset_plan_gpt(&set, &md, begin, end, target, dl->seq_len);
    }
    if (set.nsamples == 0 && empty_ok) {
        for (Shard& s : set.shards) fclose(s.file);
        return false;
    }
    if (set.nsamples == 0 && prefix.empty())
        keel_die("data path '%s': the shards hold no sample of %d tokens (seq_length+1)", src->path.c_str(), dl->seq_len + 1);
    if (set.nsamples == 0) keel_die("data '%s': holds no sample of %d tokens (seq_length+1)", set.name.c_str(), dl->seq_len + 1);
    dl->sets.push_back(std::move(set));
    return true;
}

// The samples each source's GPTDataset is built for, from the split's target: the target itself for
// one source; for a blend, get_datasets_weights_and_num_samples's ceil(target x w x 1.005) with the
// weights normalized once (summed left to right, as Python's loop does). -1 each: keel's order.
static inline std::vector<int64_t> dataloader_source_targets(const std::vector<DataSourceSpec>& sources, int64_t target) {
    std::vector<int64_t> out(sources.size(), target);
    if (target < 0 || sources.size() < 2) return out;
    double sum = 0.0;
    for (const DataSourceSpec& s : sources) sum += s.weight;
    for (size_t i = 0; i < sources.size(); i++) out[i] = megatron_blend_num_samples(target, sources[i].weight / sum);
    return out;
}

// The loader over `sources` (one: no blend; several: Megatron's blend by weight). `split` is
// --split, for sources that take a part of it. megatron_samples >= 0 reads Megatron prefixes in
// Megatron's order, their datasets built for that many samples (the split's target); -1 keeps
// keel's order. With empty_ok, a dataset without a sample makes it return false (nothing left open)
// instead of failing.
static inline bool dataloader_init_sources(DataLoader* dl, const std::vector<DataSourceSpec>& sources, const std::string& split,
                                           int seq_len, int vocab_size, uint64_t seed, bool shuffle, bool empty_ok = false,
                                           int64_t megatron_samples = -1) {
    dl->seq_len = seq_len;
    dl->seed = seed;
    dl->shuffle = shuffle;
    dl->megatron_samples = megatron_samples;
    dl->sets.clear();
    std::vector<double> w;
    std::vector<int64_t> targets = dataloader_source_targets(sources, megatron_samples);
    for (size_t i = 0; i < sources.size(); i++) {
        if (!dataloader_add_source(dl, &sources[i], split, vocab_size, targets[i], empty_ok)) {
            dataloader_free(dl);
            return false;
        }
        w.push_back(sources[i].weight);
    }
    dl->nsamples = 0;
    for (const DataSet& s : dl->sets) dl->nsamples += s.nsamples;
    dl->weights.clear();
    if (sources.size() > 1) dl->weights = megatron_blend_weights(w);
    dl->blend_pos = 0;
    dl->blend_count.assign(dl->sets.size(), 0);
    return true;
}

// `pattern` is a path or a glob ("data/fineweb_train_*.bin"); several may be given separated by
// commas. Matches are taken in sorted order so the index space does not depend on the file system.
// A path that names a Megatron prefix (P with P.idx and P.bin, or P.idx / P.bin) reads all of its
// sequences instead.
static inline void dataloader_init(DataLoader* dl, const char* pattern, int seq_len, int vocab_size, uint64_t seed,
                                   bool shuffle) {
    dataloader_init_sources(dl, {DataSourceSpec{pattern, 1.0, -1, ""}}, "", seq_len, vocab_size, seed, shuffle);
}

// The sources of the run's training (train = true) or validation data, from the flags:
// --train-data-path/--valid-data-path, --data-path with --split, or the weighted split paths.
// Returns an empty list for validation when the run names none.
static inline std::vector<DataSourceSpec> dataloader_sources(const Config* c, bool train) {
    std::vector<DataSourceSpec> out;
    const std::string& direct = train ? c->train_data_path : c->valid_data_path;
    const std::string& inline_group = train ? c->train_weighted_split_paths : c->valid_weighted_split_paths;
    const std::string& file_group = train ? c->train_weighted_split_paths_path : c->valid_weighted_split_paths_path;
    const char* which = train ? "train" : "valid";
    if (!direct.empty()) {
        out.push_back({direct, 1.0, -1, ""});
    } else if (!inline_group.empty() || !file_group.empty()) {
        std::string group = inline_group, name;
        if (group.empty()) {
            std::string why = megatron_read_weighted_split_file(file_group, &group);
            if (!why.empty()) keel_usage_error("--%s-weighted-split-paths-path: %s", which, why.c_str());
        }
        std::string why = megatron_parse_weighted_split(group, &name, &out);
        if (!why.empty()) keel_usage_error("--%s-weighted-split-paths: %s", which, why.c_str());
    } else if (!c->data_path.empty()) {
        std::string why = megatron_parse_data_path(c->data_path, train ? 0 : 1, &out);
        if (!why.empty()) keel_usage_error("--data-path: %s", why.c_str());
    }
    return out;
}

// The run's training or validation loader from the flags (false: no validation data). --data-path's
// validation part may be empty (--split 100,0,0): then the run has no validation data, which is an
// error only for a run that asks to validate — an --eval-interval other than Megatron's default,
// which (as there) means "when there is validation data" (Megatron likewise builds no dataset for
// an empty part).
// Megatron prefixes are read in Megatron's order, each split's dataset built for the samples
// Megatron builds it for (megatron_split_num_samples, from the run's train_iters).
static inline bool dataloader_open(DataLoader* dl, const Config* c, bool train, int seq_len, int vocab_size, uint64_t seed,
                                   int64_t train_iters) {
    std::vector<DataSourceSpec> src = dataloader_sources(c, train);
    if (src.empty()) return false;
    bool from_split = !train && c->valid_data_path.empty() && src[0].part == 1;
    int64_t target[3];
    megatron_split_num_samples(c->train_samples, train_iters, c->global_batch_size, c->eval_interval, c->eval_iters, target);
    if (seed > UINT32_MAX && dataloader_megatron_prefix(src[0].path) != "")
        keel_usage_error("--seed %llu: Megatron's data order seeds numpy's RandomState, which takes 0 to 2^32-1",
                         (unsigned long long)seed);
    if (dataloader_init_sources(dl, src, c->split, seq_len, vocab_size, seed, train, from_split, target[train ? 0 : 1])) return true;
    if (c->eval_interval > 0 && c->eval_interval != Config().eval_interval)
        keel_usage_error("--eval-interval: a dataset's validation part of --split '%s' holds no sample of %d tokens", c->split.c_str(),
                         seq_len + 1);
    return false;
}

// The start-up line's description: "3 shard(s), 1234 samples" for llm.c shards; a Megatron prefix
// or a blend names each dataset, its sequences, weight and samples (in Megatron's order: the target
// it is built for and its epochs).
static inline std::string dataloader_describe(const DataLoader* dl) {
    char buf[384];
    if (dl->sets.size() == 1 && dl->sets[0].shards[0].data_offset != 0) {
        snprintf(buf, sizeof buf, "%zu shard(s), %lld samples", dl->sets[0].shards.size(), (long long)dl->nsamples);
        return buf;
    }
    std::string out;
    if (dl->sets.size() > 1) out = "blend of " + std::to_string(dl->sets.size()) + " datasets by weight (Megatron's rule): ";
    for (size_t d = 0; d < dl->sets.size(); d++) {
        const DataSet* set = &dl->sets[d];
        const Shard* s = &set->shards[0];
        snprintf(buf, sizeof buf, " [%s ids%s%s] %lld samples", megatron_dtype_name(s->dtype),
                 dl->weights.empty() ? "" : ", weight ", dl->weights.empty() ? "" : double_repr(dl->weights[d]).c_str(),
                 (long long)set->nsamples);
        out += (d ? "; " : "") + set->name + buf;
        if (set->gpt) {
            snprintf(buf, sizeof buf, " (GPTDataset for %lld: %lld epoch(s)%s)", (long long)set->gi.num_samples,
                     (long long)set->gi.num_epochs, set->gi.separate_last_epoch ? ", the last shuffled apart" : "");
            out += buf;
        }
    }
    return out;
}

// Whether the loader reads in Megatron's order (every dataset a GPTDataset).
static inline bool dataloader_megatron_order(const DataLoader* dl) { return !dl->sets.empty() && dl->sets[0].gpt; }
static inline int64_t dataloader_order(const DataLoader* dl) { return dataloader_megatron_order(dl) ? DATA_ORDER_MEGATRON : DATA_ORDER_KEEL; }

// The permutation of epoch e of dataset d: Fisher-Yates where swap i's partner is
// rng_below(i+1, seed, DATA, e, i, d) (d = 0 is the unblended loader's stream).
static inline void dataset_make_perm(DataSet* set, uint64_t seed, int d, int64_t epoch) {
    set->perm.resize(set->nsamples);
    for (int64_t i = 0; i < set->nsamples; i++) set->perm[i] = i;
    for (int64_t i = set->nsamples - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below((uint64_t)i + 1, seed, RNG_DATA, (uint64_t)epoch, (uint64_t)i, (uint64_t)d);
        std::swap(set->perm[i], set->perm[j]);
    }
    set->perm_epoch = epoch;
}

// Which dataset the run's sample number s comes from and its number k there: the identity without a
// blend; with one, Megatron's greedy assignment walked from the cursor (from 0 when s lies behind it).
static inline int dataloader_blend(DataLoader* dl, int64_t s, int64_t* k) {
    if (dl->sets.size() == 1) { *k = s; return 0; }
    if (s < dl->blend_pos) {
        dl->blend_pos = 0;
        dl->blend_count.assign(dl->sets.size(), 0);
    }
    while (dl->blend_pos < s) megatron_blend_next(dl->weights, dl->blend_pos++, dl->blend_count);
    std::vector<int64_t> before = dl->blend_count;
    int d = megatron_blend_next(dl->weights, s, dl->blend_count);
    *k = before[d];
    dl->blend_pos = s + 1;
    return d;
}

// Megatron's order: the GPTDataset's arrays for the loader's seed (built on first use: the trainer
// sets the seed once a checkpoint is loaded).
static inline void dataset_build_gpt(DataSet* set, uint64_t seed, int seq_len) {
    if (set->gi_seed == (int64_t)seed) return;
    if (seed > UINT32_MAX)
        keel_usage_error("seed %llu: Megatron's data order seeds numpy's RandomState, which takes 0 to 2^32-1", (unsigned long long)seed);
    megatron_index_build(&set->gi, set->sizes.data(), set->doc_begin, set->doc_end, seq_len, (uint32_t)seed);
    set->gi_seed = (int64_t)seed;
}

// The pieces of GPTDataset sample `index` (after the shuffle): from sample_idx[index] up to and
// including the token at sample_idx[index+1] — the rest of the first document, whole documents
// between, the head of the last one.
static inline std::vector<DocPiece> dataset_gpt_pieces(const DataSet* set, int64_t index) {
    const GPTIndex& gi = set->gi;
    int64_t f = gi.sample_idx[2 * index], off_f = gi.sample_idx[2 * index + 1];
    int64_t l = gi.sample_idx[2 * index + 2], off_l = gi.sample_idx[2 * index + 3];
    std::vector<DocPiece> out;
    if (f == l) {
        out.push_back({gi.doc_idx[f], off_f, off_l - off_f + 1});
        return out;
    }
    out.push_back({gi.doc_idx[f], off_f, set->sizes[gi.doc_idx[f] - set->doc_begin] - off_f});
    for (int64_t i = f + 1; i < l; i++) out.push_back({gi.doc_idx[i], 0, set->sizes[gi.doc_idx[i] - set->doc_begin]});
    out.push_back({gi.doc_idx[l], 0, off_l + 1});
    return out;
}

// Where the run's sample number s lives (the trainer's read and the bad-batch tools). keel's order:
// epoch = the pass over the dataset, index = the permuted sample. Megatron's order: index = the
// GPTDataset sample (shuffle_idx of the item), epoch = the pass over the documents it starts in,
// offset = its first token in the .bin. An item past the dataset's end (Megatron would have stopped;
// keel's runs never ask for one) wraps around.
static inline DataLoc dataloader_resolve(DataLoader* dl, int64_t s) {
    DataLoc loc;
    loc.set = dataloader_blend(dl, s, &loc.k);
    DataSet* set = &dl->sets[loc.set];
    loc.epoch = loc.k / set->nsamples;
    int64_t pos = loc.k % set->nsamples;
    if (set->gpt) {
        dataset_build_gpt(set, dl->seed, dl->seq_len);
        loc.index = set->gi.shuffle_idx[pos];
        int64_t doc_pos = set->gi.sample_idx[2 * loc.index];
        loc.epoch = doc_pos / (set->doc_end - set->doc_begin);
        loc.shard = &set->shards[0];
        loc.offset = set->doc_token[set->gi.doc_idx[doc_pos] - set->doc_begin] + set->gi.sample_idx[2 * loc.index + 1];
        return loc;
    }
    if (dl->shuffle) {
        if (set->perm_epoch != loc.epoch) dataset_make_perm(set, dl->seed, loc.set, loc.epoch);
        loc.index = set->perm[pos];
    } else {
        loc.index = pos;
    }
    // ranges are few; a binary search keeps FineWeb-sized sets quick
    size_t lo = 0, hi = set->shards.size() - 1;
    while (lo < hi) {
        size_t mid = (lo + hi + 1) / 2;
        if (set->shards[mid].first_sample <= loc.index) lo = mid; else hi = mid - 1;
    }
    loc.shard = &set->shards[lo];
    loc.offset = loc.shard->token_first + (loc.index - loc.shard->first_sample) * dl->seq_len;
    return loc;
}

// The run's sample number of row 0 of micro-batch step m on data-parallel rank `rank`, in an
// iteration that starts after `consumed` samples: global micro-batch m·DP + rank (Megatron's order),
// rows b = 0..B-1 are the following sample numbers. The trainer and dev/batch_lookup both use it.
static inline int64_t batch_first_sample(int64_t consumed, int64_t m, int dp, int rank, int B) {
    return consumed + (m * dp + rank) * (int64_t)B;
}

// The shuffled index of the run's sample number s in its dataset's index space.
static inline int64_t dataloader_sample_index(DataLoader* dl, int64_t s) { return dataloader_resolve(dl, s).index; }

// Reads n token ids of shard sh from its token `offset` (counted from the file's token 0) into out.
static inline void shard_read_tokens(const Shard* sh, int64_t offset, int n, int* out) {
    std::vector<uint8_t> buf((size_t)n * sh->width);
    if (fseeko(sh->file, (off_t)(sh->data_offset + offset * sh->width), SEEK_SET) != 0 ||
        fread(buf.data(), sh->width, n, sh->file) != (size_t)n)
        keel_die("data '%s': read of %d tokens at %lld failed (file changed while training?)", sh->path.c_str(), n, (long long)offset);
    if (sh->dtype == MD_UINT16) {  // llm.c shards and small-vocabulary Megatron data
        const uint16_t* b = (const uint16_t*)buf.data();
        for (int i = 0; i < n; i++) out[i] = b[i];
    } else {
        for (int i = 0; i < n; i++) out[i] = (int)megatron_token(&buf[(size_t)i * sh->width], sh->dtype);  // ids checked < V at open
    }
}

// Reads the run's sample number s: seq_len+1 token ids into out.
static inline void dataloader_read(DataLoader* dl, int64_t s, int* out) {
    DataLoc loc = dataloader_resolve(dl, s);
    int n = dl->seq_len + 1;
    const DataSet* set = &dl->sets[loc.set];
    if (!set->gpt) {
        shard_read_tokens(loc.shard, loc.offset, n, out);
        return;
    }
    int got = 0;
    for (const DocPiece& p : dataset_gpt_pieces(set, loc.index)) {
        if (p.count > n - got) keel_die("data '%s': sample %lld overruns %d tokens (a corrupt index)", set->name.c_str(), (long long)loc.index, n);
        if (p.count > 0) shard_read_tokens(loc.shard, set->doc_token[p.doc - set->doc_begin] + p.from, (int)p.count, out + got);
        got += (int)p.count;
    }
    if (got != n) keel_die("data '%s': sample %lld holds %d tokens, not %d", set->name.c_str(), (long long)loc.index, got, n);
}
