// data.h — token shards, the sample index and the deterministic sampler (DESIGN §7).
//
// Shard format (llm.c's, so llm.c / FineWeb shards work unchanged):
//   header: 256 × int32 — [0] magic 20240520, [1] version 1, [2] number of tokens; rest zero
//   body:   ntok × uint16 token ids
// Samples: a sample is seq_length+1 consecutive tokens of one shard; sample k of a shard starts at
// token k·seq_length, so consecutive samples share one token and every token after the first is a
// target exactly once. A shard with ntok tokens holds (ntok-1)/seq_length samples; the samples of
// all shards (in sorted glob order) form one index space [0, N).
// Order: with shuffling, epoch e visits the samples in the permutation perm(seed, e) — a Fisher-Yates
// shuffle driven by the counter RNG, so it is a pure function of (seed, epoch). Sample number s
// (the s-th sample the run ever consumed, counted from 0) is perm(seed, s / N)[s % N]: resuming
// needs nothing but the consumed-sample count. Without shuffling (validation) s maps to s % N.
#pragma once
#include <algorithm>
#include <glob.h>
#include <string>
#include <vector>

#include "llmc/common.h"
#include "llmc/rand.h"

enum { SHARD_MAGIC = 20240520, SHARD_VERSION = 1, SHARD_HEADER_INTS = 256 };

// Writes tokens as one shard: to PATH.tmp, then rename, so a crash never leaves a torn shard
// under the final name.
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
    FILE_CHECK(fclose(f) == 0, "fclose", tmp.c_str());
    FILE_CHECK(rename(tmp.c_str(), path) == 0, "rename", tmp.c_str());
}

struct Shard {
    std::string path;
    FILE* file;
    int64_t ntok;
    int64_t first_sample;  // index of this shard's first sample in the global index space
    int64_t nsamples;
};

// Opens and validates one shard: a regular file (not a directory; a FIFO would block the read),
// magic, version, a token count >= 0, exact file size, every token id < vocab_size.
static inline void shard_open(Shard* s, const char* path, int vocab_size) {
    s->path = path;
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        keel_die("shard '%s': %s, not a token shard", path, S_ISDIR(sb.st_mode) ? "is a directory" : "not a regular file");
    s->file = fopen(path, "rb");
    if (!s->file) keel_die("shard '%s': cannot open: %s", path, strerror(errno));
    int32_t header[SHARD_HEADER_INTS];
    if (fread(header, sizeof(int32_t), SHARD_HEADER_INTS, s->file) != SHARD_HEADER_INTS)
        keel_die("shard '%s': truncated header (a shard starts with 256 int32s)", path);
    if (header[0] != SHARD_MAGIC)
        keel_die("shard '%s': bad magic %d (expected %d): not an llm.c token shard", path, header[0], SHARD_MAGIC);
    if (header[1] != SHARD_VERSION)
        keel_die("shard '%s': unsupported version %d (expected %d)", path, header[1], SHARD_VERSION);
    s->ntok = header[2];
    if (s->ntok < 0) keel_die("shard '%s': the header's token count is negative (%lld): a corrupt header", path, (long long)s->ntok);
    fseek(s->file, 0, SEEK_END);
    int64_t bytes = ftell(s->file);
    int64_t expect = (int64_t)sizeof(header) + s->ntok * 2;
    if (bytes != expect)
        keel_die("shard '%s': %s: header says %lld tokens (%lld bytes) but the file has %lld bytes", path,
                 bytes < expect ? "truncated" : "trailing bytes", (long long)s->ntok, (long long)expect,
                 (long long)bytes);
    // One pass over the ids: a bad id is reported here, by position, not as a crash mid-run.
    fseek(s->file, sizeof(header), SEEK_SET);
    std::vector<uint16_t> buf(1 << 20);
    for (int64_t done = 0; done < s->ntok;) {
        size_t n = (size_t)std::min<int64_t>(buf.size(), s->ntok - done);
        if (fread(buf.data(), 2, n, s->file) != n) keel_die("shard '%s': read failed", path);
        for (size_t i = 0; i < n; i++)
            if (buf[i] >= vocab_size)
                keel_die("shard '%s': token id %d at position %lld is >= the vocabulary size %d", path, buf[i],
                         (long long)(done + i), vocab_size);
        done += n;
    }
}

struct DataLoader {
    std::vector<Shard> shards;
    int seq_len;            // T: a sample is T+1 tokens
    int64_t nsamples;       // N: samples in one epoch, over all shards
    uint64_t seed;
    bool shuffle;
    int64_t perm_epoch;     // the epoch `perm` holds, -1 if none
    std::vector<int64_t> perm;
};

// `pattern` is a path or a glob ("data/fineweb_train_*.bin"); several may be given separated by
// commas. Matches are taken in sorted order so the index space does not depend on the file system.
static inline void dataloader_init(DataLoader* dl, const char* pattern, int seq_len, int vocab_size, uint64_t seed,
                                   bool shuffle) {
    std::vector<std::string> paths;
    std::string all(pattern);
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
    if (paths.empty()) keel_die("data path '%s': no file matches", pattern);
    dl->seq_len = seq_len;
    dl->seed = seed;
    dl->shuffle = shuffle;
    dl->perm_epoch = -1;
    dl->nsamples = 0;
    dl->shards.resize(paths.size());
    for (size_t i = 0; i < paths.size(); i++) {
        Shard* s = &dl->shards[i];
        shard_open(s, paths[i].c_str(), vocab_size);
        s->first_sample = dl->nsamples;
        s->nsamples = s->ntok > 0 ? (s->ntok - 1) / seq_len : 0;
        dl->nsamples += s->nsamples;
    }
    if (dl->nsamples == 0)
        keel_die("data path '%s': the shards hold no sample of %d tokens (seq_length+1)", pattern, seq_len + 1);
}

static inline void dataloader_free(DataLoader* dl) {
    for (Shard& s : dl->shards) fclose(s.file);
    dl->shards.clear();
}

// The permutation of epoch e: Fisher-Yates where swap i's partner is rng_below(i+1, seed, DATA, e, i).
static inline void dataloader_make_perm(DataLoader* dl, int64_t epoch) {
    dl->perm.resize(dl->nsamples);
    for (int64_t i = 0; i < dl->nsamples; i++) dl->perm[i] = i;
    for (int64_t i = dl->nsamples - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below((uint64_t)i + 1, dl->seed, RNG_DATA, (uint64_t)epoch, (uint64_t)i);
        std::swap(dl->perm[i], dl->perm[j]);
    }
    dl->perm_epoch = epoch;
}

// Which sample (index in [0, N)) the run's sample number s is.
static inline int64_t dataloader_sample_index(DataLoader* dl, int64_t s) {
    int64_t epoch = s / dl->nsamples, pos = s % dl->nsamples;
    if (!dl->shuffle) return pos;
    if (dl->perm_epoch != epoch) dataloader_make_perm(dl, epoch);
    return dl->perm[pos];
}

// Where a sample lives: its shard and first token (for the bad-batch tools too).
static inline const Shard* dataloader_locate(const DataLoader* dl, int64_t index, int64_t* token_offset) {
    // shards are few; a binary search keeps FineWeb-sized sets quick
    size_t lo = 0, hi = dl->shards.size() - 1;
    while (lo < hi) {
        size_t mid = (lo + hi + 1) / 2;
        if (dl->shards[mid].first_sample <= index) lo = mid; else hi = mid - 1;
    }
    const Shard* s = &dl->shards[lo];
    *token_offset = (index - s->first_sample) * dl->seq_len;
    return s;
}

// The run's sample number of row 0 of micro-batch step m on data-parallel rank `rank`, in an
// iteration that starts after `consumed` samples: global micro-batch m·DP + rank (Megatron's order),
// rows b = 0..B-1 are the following sample numbers. The trainer and dev/batch_lookup both use it.
static inline int64_t batch_first_sample(int64_t consumed, int64_t m, int dp, int rank, int B) {
    return consumed + (m * dp + rank) * (int64_t)B;
}

// Reads the run's sample number s: seq_len+1 token ids into out.
static inline void dataloader_read(DataLoader* dl, int64_t s, int* out) {
    int64_t off;
    const Shard* sh = dataloader_locate(dl, dataloader_sample_index(dl, s), &off);
    uint16_t buf[8192 + 1];
    int n = dl->seq_len + 1;
    std::vector<uint16_t> big;
    uint16_t* b = buf;
    if (n > 8193) { big.resize(n); b = big.data(); }
    if (fseek(sh->file, (long)(SHARD_HEADER_INTS * 4 + off * 2), SEEK_SET) != 0 ||
        fread(b, 2, n, sh->file) != (size_t)n)
        keel_die("shard '%s': read of %d tokens at %lld failed (file changed while training?)", sh->path.c_str(), n,
                 (long long)off);
    for (int i = 0; i < n; i++) out[i] = b[i];
}
