// megatron_data.h — Megatron-DeepSpeed's indexed data (.idx + .bin), its --split, its weighted
// split paths and its blending rule (docs/data.md). No trainer state here: pure
// functions over bytes and strings (a parse error is returned as text, so a fuzz target can call
// megatron_index_parse without files), plus megatron_open, which validates a prefix's two files.
//
// The MMapIndexedDataset layout (megatron/data/indexed_dataset.py), all little-endian:
//   .idx  magic "MMIDIDX\0\0" (9 bytes) | u64 version = 1 | u8 dtype code
//         | u64 N (sequences) | u64 D (document-index entries)
//         | int32 sizes[N] (tokens per sequence) | int64 pointers[N] (byte offset of sequence i in .bin)
//         | int64 doc_idx[D] (sequence index where each document starts; [0] = 0, last = N)
//   .bin  the sequences' token ids back to back, each of the dtype's width
// dtype codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float32, 7 float64, 8 uint16. Megatron's
// preprocess_data writes uint16 for vocabularies under 65,500 and int32 above (best_fitting_dtype).
// Megatron's writer lays the sequences out contiguously (pointer i = the bytes of sequences 0..i-1);
// keel requires exactly that, so token t of the file is at byte t x width and a range of sequences is
// a range of tokens.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "llmc/common.h"

enum MegatronDtype {
    MD_UINT8 = 1, MD_INT8 = 2, MD_INT16 = 3, MD_INT32 = 4, MD_INT64 = 5, MD_FLOAT32 = 6, MD_FLOAT64 = 7, MD_UINT16 = 8
};
static const char MEGATRON_MAGIC[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
static const size_t MEGATRON_HEADER_BYTES = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype, N, D

// Bytes per element of a dtype code; 0 for a code Megatron does not define.
static inline int megatron_dtype_size(int code) {
    switch (code) {
        case MD_UINT8: case MD_INT8: return 1;
        case MD_INT16: case MD_UINT16: return 2;
        case MD_INT32: case MD_FLOAT32: return 4;
        case MD_INT64: case MD_FLOAT64: return 8;
        default: return 0;
    }
}

static inline const char* megatron_dtype_name(int code) {
    static const char* names[] = {"?", "uint8", "int8", "int16", "int32", "int64", "float32", "float64", "uint16"};
    return code >= 1 && code <= 8 ? names[code] : "?";
}

// One token id stored in dtype `code` at p (an integer dtype; the host is little-endian like the files).
static inline int64_t megatron_token(const uint8_t* p, int code) {
    switch (code) {
        case MD_UINT8: return p[0];
        case MD_INT8: return (int8_t)p[0];
        case MD_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
        case MD_UINT16: { uint16_t v; memcpy(&v, p, 2); return v; }
        case MD_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
        default: { int64_t v; memcpy(&v, p, 8); return v; }
    }
}

struct MegatronIndex {
    int dtype = 0, width = 0;
    std::vector<int32_t> sizes;      // (N) tokens of each sequence
    std::vector<int64_t> pointers;   // (N) byte offset of each sequence in .bin
    std::vector<int64_t> doc_idx;    // (D) first sequence of each document, then N
    int64_t ntok = 0;                // tokens in .bin (the sum of sizes)
};

static inline uint64_t megatron_u64(const uint8_t* p) { uint64_t v; memcpy(&v, p, 8); return v; }

// Parses and checks an .idx image: "" if it is a well-formed MMapIndexedDataset index, else the
// reason (one phrase, no file name). Every count is checked against the byte length before an
// array is read, so no input makes it read out of bounds or allocate more than n bytes' worth.
static inline std::string megatron_index_parse(const uint8_t* p, size_t n, MegatronIndex* ix) {
    if (n >= 8 && memcmp(p, "TNTIDX\0\0", 8) == 0)
        return "a legacy IndexedDataset index (TNTIDX, Megatron's --data-impl lazy/cached): keel reads the mmap format only "
               "(re-run Megatron's preprocess_data.py with --dataset-impl mmap)";
    if (n < 9 || memcmp(p, MEGATRON_MAGIC, 9) != 0) return "bad magic: not a Megatron MMapIndexedDataset index (expected \"MMIDIDX\\0\\0\")";
    if (n < MEGATRON_HEADER_BYTES) return "truncated header (" + std::to_string(n) + " bytes, the header alone is 34)";
    uint64_t version = megatron_u64(p + 9);
    if (version != 1) return "unsupported version " + std::to_string(version) + " (expected 1)";
    ix->dtype = p[17];
    ix->width = megatron_dtype_size(ix->dtype);
    if (ix->width == 0) return "unknown dtype code " + std::to_string(ix->dtype) + " (Megatron's codes are 1-8)";
    if (ix->dtype == MD_FLOAT32 || ix->dtype == MD_FLOAT64)
        return std::string("dtype code ") + std::to_string(ix->dtype) + " (" + megatron_dtype_name(ix->dtype) + ") cannot hold token ids";
    uint64_t N = megatron_u64(p + 18), D = megatron_u64(p + 26);
    // the arrays' bytes, overflow-safe: each count is first bounded by the file's length
    uint64_t body = n - MEGATRON_HEADER_BYTES;
    if (N > body / 12 || D > body / 8 || 12 * N + 8 * D != body)
        return "the header's counts (" + std::to_string(N) + " sequences, " + std::to_string(D) + " document-index entries) need " +
               (N > body / 12 || D > body / 8 ? std::string("more bytes than the file's ") + std::to_string(n)
                                              : std::to_string(MEGATRON_HEADER_BYTES + 12 * N + 8 * D) + " bytes but the file has " +
                                                    std::to_string(n) + (12 * N + 8 * D > body ? " (truncated)" : " (trailing bytes)"));
    const uint8_t* q = p + MEGATRON_HEADER_BYTES;
    ix->sizes.resize(N);
    ix->pointers.resize(N);
    ix->doc_idx.resize(D);
    if (N) memcpy(ix->sizes.data(), q, 4 * N);
    if (N) memcpy(ix->pointers.data(), q + 4 * N, 8 * N);
    if (D) memcpy(ix->doc_idx.data(), q + 12 * N, 8 * D);
    // pointers: contiguous, as Megatron's writer makes them (pointer i = bytes of the sequences before i)
    int64_t at = 0;
    for (uint64_t i = 0; i < N; i++) {
        if (ix->sizes[i] < 0) return "sequence " + std::to_string(i) + " has a negative size " + std::to_string(ix->sizes[i]);
        if (ix->pointers[i] != at)
            return "the pointer of sequence " + std::to_string(i) + " is " + std::to_string(ix->pointers[i]) + ", expected " +
                   std::to_string(at) + " (the sizes before it x " + std::to_string(ix->width) + " bytes): sizes and pointers disagree";
        at += (int64_t)ix->sizes[i] * ix->width;  // < 2^31 x 8 x 2^60 / 12: bounded by N <= n / 12
    }
    ix->ntok = at / ix->width;
    if (D == 0) return "the document index is empty (it holds at least the final entry N)";
    if (ix->doc_idx[0] != 0) return "the document index starts at " + std::to_string(ix->doc_idx[0]) + ", not 0";
    for (uint64_t d = 1; d < D; d++)
        if (ix->doc_idx[d] < ix->doc_idx[d - 1])
            return "the document index decreases at entry " + std::to_string(d) + " (" + std::to_string(ix->doc_idx[d - 1]) + " then " +
                   std::to_string(ix->doc_idx[d]) + ")";
    if (ix->doc_idx[D - 1] != (int64_t)N)
        return "the document index ends at " + std::to_string(ix->doc_idx[D - 1]) + ", not at the sequence count " + std::to_string(N);
    return "";
}

// An opened, validated prefix: the index in memory and the .bin's path (the DataLoader opens it).
struct MegatronData {
    std::string prefix, idx_path, bin_path;
    MegatronIndex ix;
};

static inline bool megatron_is_prefix(const std::string& prefix) {
    return file_exists((prefix + ".idx").c_str()) && file_exists((prefix + ".bin").c_str());
}

// Reads a regular file whole (a directory or FIFO is refused by name, not read forever).
static inline std::string megatron_read_file(const std::string& path) {
    struct stat sb;
    if (stat(path.c_str(), &sb) != 0) keel_die("megatron data '%s': cannot open: %s", path.c_str(), strerror(errno));
    if (!S_ISREG(sb.st_mode)) keel_die("megatron data '%s': not a regular file", path.c_str());
    return file_read_all(path.c_str());
}

// Opens PREFIX.idx and PREFIX.bin and validates them (one error line naming the file): the index
// (megatron_index_parse), the .bin's size against the index, and every token id in [0, vocab_size).
static inline void megatron_open(MegatronData* md, const std::string& prefix, int64_t vocab_size) {
    md->prefix = prefix;
    md->idx_path = prefix + ".idx";
    md->bin_path = prefix + ".bin";
    if (!megatron_is_prefix(prefix))
        keel_die("megatron data '%s': needs both %s and %s", prefix.c_str(), md->idx_path.c_str(), md->bin_path.c_str());
    std::string img = megatron_read_file(md->idx_path);
    std::string why = megatron_index_parse((const uint8_t*)img.data(), img.size(), &md->ix);
    if (!why.empty()) keel_die("megatron data '%s': %s", md->idx_path.c_str(), why.c_str());
    struct stat sb;
    if (stat(md->bin_path.c_str(), &sb) != 0 || !S_ISREG(sb.st_mode))
        keel_die("megatron data '%s': not a regular file", md->bin_path.c_str());
    int64_t want = md->ix.ntok * md->ix.width;
    if ((int64_t)sb.st_size != want)
        keel_die("megatron data '%s': %s: the index's sizes add up to %lld tokens (%lld bytes) but the file has %lld bytes",
                 md->bin_path.c_str(), (int64_t)sb.st_size < want ? "truncated" : "trailing bytes", (long long)md->ix.ntok,
                 (long long)want, (long long)sb.st_size);
    // One pass over the ids, as for llm.c shards: a bad id is reported here, by position.
    FilePtr file(fopen_check(md->bin_path.c_str(), "rb"));
    FILE* f = file.get();
    std::vector<uint8_t> buf((size_t)md->ix.width << 20);
    for (int64_t done = 0; done < md->ix.ntok;) {
        size_t k = (size_t)std::min<int64_t>(1 << 20, md->ix.ntok - done);
        if (fread(buf.data(), md->ix.width, k, f) != k) keel_die("megatron data '%s': read failed", md->bin_path.c_str());
        for (size_t i = 0; i < k; i++) {
            int64_t id = megatron_token(&buf[i * md->ix.width], md->ix.dtype);
            if (id < 0 || id >= vocab_size) {
                int64_t t = done + (int64_t)i, seq = 0;
                while (seq + 1 < (int64_t)md->ix.pointers.size() && md->ix.pointers[seq + 1] / md->ix.width <= t) seq++;
                keel_die("megatron data '%s': token id %lld at token %lld (sequence %lld) is outside the vocabulary [0, %lld)",
                         md->bin_path.c_str(), (long long)id, (long long)t, (long long)seq, (long long)vocab_size);
            }
        }
        done += k;
    }
}

// ---- which sequences a run reads: --split and the weighted split paths' START:END ----------------
// Megatron counts "documents" as the .idx's sequences (GPTDataset: sizes.shape[0]); with
// preprocess_data's default (no --split-sentences) each document is one sequence.

// Megatron's get_train_valid_test_split_: "969, 30, 1" (or "a/b/c", or one number; missing parts
// are 0) normalized, then cumulative int(round(part x size)) — Python's round, ties to even, which
// nearbyint does in the default rounding mode — and the overshoot taken off every boundary.
// Returns "" and bounds[4], or the reason the string is refused.
static inline std::string megatron_split_bounds(const std::string& spec, int64_t size, int64_t bounds[4]) {
    char sep = spec.find(',') != std::string::npos ? ',' : spec.find('/') != std::string::npos ? '/' : 0;
    std::vector<double> parts;
    for (size_t pos = 0; pos <= spec.size();) {
        size_t end = sep ? spec.find(sep, pos) : std::string::npos;
        if (end == std::string::npos) end = spec.size();
        std::string one = spec.substr(pos, end - pos);
        char* stop = nullptr;
        double v = strtod(one.c_str(), &stop);
        while (stop && (*stop == ' ' || *stop == '\t')) stop++;
        if (one.find_first_not_of(" \t") == std::string::npos || *stop != 0 || !std::isfinite(v) || v < 0)
            return "'" + one + "' is not a non-negative number";
        parts.push_back(v);
        pos = end + 1;
    }
    if (parts.size() > 3) return "more than three parts (train, validation, test)";
    while (parts.size() < 3) parts.push_back(0.0);
    double sum = parts[0] + parts[1] + parts[2];
    if (!(sum > 0)) return "the parts add up to 0";
    bounds[0] = 0;
    for (int i = 0; i < 3; i++) bounds[i + 1] = bounds[i] + (int64_t)std::nearbyint(parts[i] / sum * (double)size);
    int64_t diff = bounds[3] - size;
    for (int i = 1; i < 4; i++) bounds[i] -= diff;
    for (int i = 0; i < 3; i++)
        if (bounds[i] < 0 || bounds[i] > bounds[i + 1]) return "the rounding left an impossible range";
    return "";
}

// Megatron's get_split_by_range_ (BigScience): "START:END" fractions of the sequences, each boundary
// round(fraction x size), ties to even. Returns "" and [begin, end), or the reason.
static inline std::string megatron_range_bounds(const std::string& spec, int64_t size, int64_t* begin, int64_t* end) {
    size_t colon = spec.find(':');
    if (colon == std::string::npos) return "'" + spec + "' is not START:END";
    double v[2];
    std::string s[2] = {spec.substr(0, colon), spec.substr(colon + 1)};
    for (int i = 0; i < 2; i++) {
        char* stop = nullptr;
        v[i] = strtod(s[i].c_str(), &stop);
        if (s[i].empty() || *stop != 0 || !std::isfinite(v[i]) || v[i] < 0 || v[i] > 1)
            return "'" + spec + "': START and END are fractions in [0, 1]";
    }
    if (!(v[0] < v[1])) return "'" + spec + "': START must be below END";
    *begin = (int64_t)std::nearbyint(v[0] * (double)size);
    *end = (int64_t)std::nearbyint(v[1] * (double)size);
    return "";
}

// ---- blends: which dataset each sample comes from ----------------------------------------------

// Megatron's weights: normalized by their sum in analyze_data_prefix, then again by BlendableDataset
// (np.sum: the same left-to-right sum for fewer than 8 datasets; numpy's pairwise sum can differ from
// it in the last bit beyond that).
static inline std::vector<double> megatron_blend_weights(std::vector<double> w) {
    for (int pass = 0; pass < 2; pass++) {
        double sum = 0.0;
        for (double x : w) sum += x;
        for (double& x : w) x /= sum;
    }
    return w;
}

// One step of Megatron's build_blending_indices (helpers.cpp): sample s goes to the dataset whose
// share is furthest behind its weight, w_i x max(s, 1) - count_i, the first one on a tie; the
// sample is that dataset's count_i-th, and the count grows. Deterministic, a pure function of the
// counts, so the assignment of s needs only the walk from 0 (the DataLoader keeps a cursor).
static inline int megatron_blend_next(const std::vector<double>& w, int64_t s, std::vector<int64_t>& count) {
    double x = std::max((double)s, 1.0);
    int best = 0;
    double best_err = w[0] * x - (double)count[0];
    for (size_t i = 1; i < w.size(); i++) {
        double err = w[i] * x - (double)count[i];
        if (err > best_err) { best_err = err; best = (int)i; }
    }
    count[best]++;
    return best;
}

// ---- the flags' strings ------------------------------------------------------------------------

// One dataset of a blend: a prefix (or an llm.c shard glob), its weight and which of its sequences.
struct DataSourceSpec {
    std::string path;
    double weight = 1.0;
    int part = -1;          // -1: every sequence; 0/1/2: the train/valid/test part of --split
    std::string range;      // "START:END" (weighted split paths), used when part == -2
};

static inline std::vector<std::string> megatron_words(const std::string& s) {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = s.find_first_not_of(" \t\r\n", pos)) != std::string::npos) {
        size_t end = s.find_first_of(" \t\r\n", pos);
        if (end == std::string::npos) end = s.size();
        out.push_back(s.substr(pos, end - pos));
        pos = end;
    }
    return out;
}

static inline bool megatron_parse_weight(const std::string& s, double* w) {
    char* stop = nullptr;
    *w = strtod(s.c_str(), &stop);
    return !s.empty() && *stop == 0 && std::isfinite(*w) && *w >= 0;
}

// --data-path "PREFIX" or "W1 P1 W2 P2 ..." (the flag's words space-joined): the sources, each
// taking part `part` of --split. Returns "" or the reason.
static inline std::string megatron_parse_data_path(const std::string& value, int part, std::vector<DataSourceSpec>* out) {
    std::vector<std::string> w = megatron_words(value);
    out->clear();
    if (w.size() == 1) { out->push_back({w[0], 1.0, part, ""}); return ""; }
    if (w.empty() || w.size() % 2 != 0) return "give PREFIX, or WEIGHT PREFIX pairs (got " + std::to_string(w.size()) + " words)";
    double sum = 0;
    for (size_t i = 0; i < w.size(); i += 2) {
        DataSourceSpec s{w[i + 1], 0.0, part, ""};
        if (!megatron_parse_weight(w[i], &s.weight)) return "'" + w[i] + "' is not a weight (a number >= 0) before '" + w[i + 1] + "'";
        sum += s.weight;
        out->push_back(s);
    }
    if (!(sum > 0)) return "the weights add up to 0";
    if (out->size() > 254) return "more than 254 datasets (Megatron's blend keeps a dataset's number in a byte)";
    return "";
}

// BigScience's weighted split paths, one group: "NAME: W1 START:END P1, W2 START:END P2, ...".
// Returns "" or the reason; *name gets NAME.
static inline std::string megatron_parse_weighted_split(const std::string& value, std::string* name, std::vector<DataSourceSpec>* out) {
    out->clear();
    size_t colon = value.find(':');
    if (colon == std::string::npos) return "expected \"NAME: WEIGHT START:END PATH, ...\"";
    *name = value.substr(0, colon);
    std::string rest = value.substr(colon + 1);
    double sum = 0;
    for (size_t pos = 0; pos <= rest.size();) {
        size_t comma = rest.find(',', pos);
        if (comma == std::string::npos) comma = rest.size();
        std::vector<std::string> w = megatron_words(rest.substr(pos, comma - pos));
        pos = comma + 1;
        if (w.size() > 3 && w[3].find(':') != std::string::npos && w[3].back() == ':')
            return "more than one dataset group: keel trains on one and validates on one (give one \"NAME: ...\" group)";
        if (w.size() != 3) return "each dataset is WEIGHT START:END PATH (got '" + rest.substr(0, 60) + "')";
        DataSourceSpec s{w[2], 0.0, -2, w[1]};
        if (!megatron_parse_weight(w[0], &s.weight)) return "'" + w[0] + "' is not a weight (a number >= 0)";
        sum += s.weight;
        out->push_back(s);
    }
    if (!(sum > 0)) return "the weights add up to 0";
    if (out->size() > 254) return "more than 254 datasets (Megatron's blend keeps a dataset's number in a byte)";
    return "";
}

// The -path form's file: one line, the group(s) each in double quotes ("A: ..." "B: ..."), as
// BigScience's parse_data_paths_path reads it. Returns "" and the one group's text, or the reason.
static inline std::string megatron_read_weighted_split_file(const std::string& path, std::string* group) {
    if (!file_exists(path.c_str())) return "cannot open '" + path + "'";
    std::string text = megatron_read_file(path);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    if (text.find('\n') != std::string::npos) return "'" + path + "' has more than one line (expected one line of quoted groups)";
    if (text.size() < 2 || text.front() != '"' || text.back() != '"') return "'" + path + "': the line must start and end with a double quote";
    *group = text.substr(1, text.size() - 2);
    if (group->find("\" \"") != std::string::npos)
        return "'" + path + "' holds more than one dataset group: keel trains on one and validates on one";
    return "";
}

// ---- writing (dev/megatron_data) ---------------------------------------------------------------

// Megatron's best_fitting_dtype: uint16 for a vocabulary under 65,500, else int32.
static inline int megatron_best_dtype(int64_t vocab_size) { return vocab_size < 65500 ? MD_UINT16 : MD_INT32; }

// Writes PREFIX.bin and PREFIX.idx as Megatron's MMapIndexedDatasetBuilder does for documents of one
// sequence each (preprocess_data without --split-sentences): sizes = the documents' lengths, pointers
// their byte offsets, doc_idx = 0, 1, ..., N. Each file goes to PATH.tmp, then is renamed, so a crash
// never leaves a torn file under the final name. tokens: the documents back to back.
static inline void megatron_write(const std::string& prefix, const std::vector<int64_t>& tokens, const std::vector<int64_t>& doc_sizes,
                                  int dtype) {
    int width = megatron_dtype_size(dtype);
    if (width == 0 || dtype == MD_FLOAT32 || dtype == MD_FLOAT64) keel_die("megatron_write: dtype code %d holds no token ids", dtype);
    int64_t lo = dtype == MD_UINT8 || dtype == MD_UINT16 ? 0 : -(INT64_C(1) << (8 * width - 1));
    int64_t hi = dtype == MD_INT64 ? INT64_MAX : dtype == MD_UINT8 || dtype == MD_UINT16 ? (INT64_C(1) << (8 * width)) - 1
                                                                                         : (INT64_C(1) << (8 * width - 1)) - 1;
    std::string bin = prefix + ".bin", idx = prefix + ".idx";
    std::vector<uint8_t> body(tokens.size() * width);
    for (size_t i = 0; i < tokens.size(); i++) {
        if (tokens[i] < lo || tokens[i] > hi)
            keel_die("megatron data '%s': id %lld does not fit dtype %s", bin.c_str(), (long long)tokens[i], megatron_dtype_name(dtype));
        memcpy(&body[i * width], &tokens[i], width);  // little-endian: the low bytes
    }
    std::vector<uint8_t> head(MEGATRON_HEADER_BYTES);
    uint64_t version = 1, N = doc_sizes.size(), D = N + 1;
    memcpy(&head[0], MEGATRON_MAGIC, 9);
    memcpy(&head[9], &version, 8);
    head[17] = (uint8_t)dtype;
    memcpy(&head[18], &N, 8);
    memcpy(&head[26], &D, 8);
    std::vector<int32_t> sizes(N);
    std::vector<int64_t> pointers(N), doc_idx(D);
    int64_t at = 0;
    for (uint64_t i = 0; i < N; i++) {
        if (doc_sizes[i] > INT32_MAX) keel_die("megatron data '%s': document %llu has more than 2^31-1 tokens", idx.c_str(), (unsigned long long)i);
        sizes[i] = (int32_t)doc_sizes[i];
        pointers[i] = at;
        at += doc_sizes[i] * width;
        doc_idx[i + 1] = (int64_t)i + 1;
    }
    if (at != (int64_t)body.size()) keel_die("megatron_write: the document sizes do not add up to the tokens");
    for (const std::string& path : {bin, idx}) {
        std::string tmp = path + ".tmp";
        FILE* f = fopen_check(tmp.c_str(), "wb");
        if (path == bin) {
            if (!body.empty()) fwrite_check(body.data(), 1, body.size(), f, tmp.c_str());
        } else {
            fwrite_check(head.data(), 1, head.size(), f, tmp.c_str());
            if (N) fwrite_check(sizes.data(), 4, N, f, tmp.c_str());
            if (N) fwrite_check(pointers.data(), 8, N, f, tmp.c_str());
            fwrite_check(doc_idx.data(), 8, D, f, tmp.c_str());
        }
        FILE_CHECK(fclose(f) == 0, "fclose", tmp.c_str());
        FILE_CHECK(rename(tmp.c_str(), path.c_str()) == 0, "rename", tmp.c_str());
    }
}
