// safetensors.h — the safetensors file format (Hugging Face's weight container): a reader that
// validates every number before it trusts it, and a writer. Shared by --export-hf, --load-hf
// (llmc/hf.h) and the tests.
//
// Format (https://github.com/huggingface/safetensors):
//   bytes [0, 8)        N, u64 little-endian: the header's length
//   bytes [8, 8+N)      the header, UTF-8 JSON: {"name": {"dtype": "F32", "shape": [2, 3],
//                       "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "string", ...}}
//   bytes [8+N, EOF)    the data section: each tensor's raw little-endian elements, row-major, at
//                       [begin, end) relative to the section's start
//
// Contract
//   safetensors_open(st, path, &err)  reads and checks the header; false with a one-line reason
//       (the caller names the file and dies) unless ALL of these hold:
//         - the file holds the 8 length bytes, N ≥ 2, N ≤ SAFETENSORS_MAX_HEADER (100 MB, the
//           reference implementation's limit) and 8 + N ≤ file size;
//         - the header is well-formed JSON (llmc/json.h), an object; __metadata__, if present, an
//           object of strings; every other member a tensor: an object with exactly the keys dtype
//           (a known dtype name), shape (array of non-negative integers) and data_offsets (two
//           non-negative integers begin ≤ end);
//         - end - begin = product(shape) · dtype size, computed without overflow;
//         - the tensors tile the data section: sorted by begin, each starts where the previous one
//           ended (no overlap, no gap) and the last ends at the end of the file (no trailing bytes).
//       Names must be unique (json.h refuses duplicate keys).
//   safetensors_read(st, t, dst, &err)  reads tensor t's bytes (t->end - t->begin) into dst.
//   safetensors_header(entries, metadata)  the 8 length bytes and the JSON header for tensors laid
//       out back to back in the given order, padded with spaces to a multiple of 8 so that the data
//       section (and every tensor of an 8-byte-multiple size) stays aligned; the caller writes the
//       tensors' bytes after it, in the same order. safetensors_write_file does both from memory.
//   st_bf16_from_f32 / st_f16_from_f32 / st_bf16_to_f32 / st_f16_to_f32  the BF16 and F16 elements:
//       narrowing rounds to nearest even (fp16 by llmc/ops.h's fp16_round), widening is exact.
// Byte order: keel runs on little-endian hosts only (x86-64, aarch64, CUDA), so element bytes are
// copied as they are.
#pragma once
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "llmc/json.h"
#include "llmc/ops.h"

static const uint64_t SAFETENSORS_MAX_HEADER = 100000000;

enum StDtype {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_I16, ST_U16, ST_F16, ST_BF16,
    ST_I32, ST_U32, ST_F32, ST_F64, ST_I64, ST_U64, ST_NUM_DTYPES
};
// The dtype names of the format and their element sizes, indexed by StDtype.
static const char* const ST_DTYPE_NAMES[ST_NUM_DTYPES] = {
    "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"};
static const int ST_DTYPE_SIZES[ST_NUM_DTYPES] = {1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};

static inline int st_dtype_parse(const std::string& s) {
    for (int d = 0; d < ST_NUM_DTYPES; d++)
        if (s == ST_DTYPE_NAMES[d]) return d;
    return -1;
}

struct StTensor {
    std::string name;
    int dtype;                    // StDtype
    std::vector<uint64_t> shape;
    uint64_t begin, end;          // byte range in the data section
};

struct SafeTensors {
    std::string path;
    FILE* file = nullptr;
    uint64_t header_bytes = 0;    // N
    uint64_t data_offset = 0;     // 8 + N: where the data section starts in the file
    uint64_t data_bytes = 0;
    std::vector<StTensor> tensors;  // in header order
    std::vector<std::pair<std::string, std::string>> metadata;
};

static inline std::string st_shape_string(const std::vector<uint64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

// __metadata__: an object of strings, appended to st's metadata.
static inline bool st_parse_metadata(SafeTensors* st, const Json& v, std::string* err) {
    if (v.type != JSON_OBJECT) { *err = "__metadata__ is not an object"; return false; }
    for (const auto& kv : v.members) {
        if (kv.second.type != JSON_STRING) { *err = "__metadata__ value of '" + kv.first + "' is not a string"; return false; }
        st->metadata.emplace_back(kv.first, kv.second.text);
    }
    return true;
}

// Reads shape (an array of non-negative integers) into t->shape; *bytes: its size in t->dtype elements.
static inline bool st_parse_shape(const Json* sh, const std::string& what, StTensor* t, uint64_t* bytes, std::string* err) {
    if (sh->type != JSON_ARRAY) { *err = what + "shape is not an array"; return false; }
    *bytes = (uint64_t)ST_DTYPE_SIZES[t->dtype];
    bool overflow = false;
    for (const Json& d : sh->items) {
        uint64_t x;
        if (!json_as_u64(&d, &x)) { *err = what + "shape holds something other than a non-negative integer"; return false; }
        t->shape.push_back(x);
        if (x != 0 && *bytes > UINT64_MAX / x) overflow = true;  // keep going: a later 0 makes it empty
        else *bytes *= x;
    }
    if (overflow && *bytes != 0) { *err = what + "shape " + st_shape_string(t->shape) + " overflows 64 bits of bytes"; return false; }
    if (overflow) *bytes = 0;
    return true;
}

// Reads data_offsets into t->begin and t->end: inside a data section of data_bytes, holding exactly bytes.
static inline bool st_parse_offsets(const Json* off, const std::string& what, uint64_t bytes, uint64_t data_bytes, StTensor* t, std::string* err) {
    if (off->type != JSON_ARRAY || off->items.size() != 2 || !json_as_u64(&off->items[0], &t->begin) ||
        !json_as_u64(&off->items[1], &t->end)) {
        *err = what + "data_offsets is not [begin, end] of non-negative integers";
        return false;
    }
    if (t->begin > t->end) {
        *err = what + "data_offsets [" + std::to_string(t->begin) + ", " + std::to_string(t->end) + "] end before they begin";
        return false;
    }
    if (t->end > data_bytes) {
        *err = what + "data_offsets end " + std::to_string(t->end) + " is past the end of the data section (" + std::to_string(data_bytes) +
               " bytes): a truncated file or a corrupt header";
        return false;
    }
    if (t->end - t->begin != bytes) {
        *err = what + "data_offsets hold " + std::to_string(t->end - t->begin) + " bytes, but " + ST_DTYPE_NAMES[t->dtype] + " " +
               st_shape_string(t->shape) + " is " + std::to_string(bytes);
        return false;
    }
    return true;
}

// One tensor member of the header: an object of exactly dtype, shape and data_offsets, which agree.
static inline bool st_parse_tensor(const std::string& name, const Json& v, uint64_t data_bytes, StTensor* t, std::string* err) {
    std::string what = "tensor '" + name + "': ";
    if (v.type != JSON_OBJECT) { *err = what + "not an object"; return false; }
    for (const auto& kv : v.members)
        if (kv.first != "dtype" && kv.first != "shape" && kv.first != "data_offsets") {
            *err = what + "unknown key '" + kv.first + "'";
            return false;
        }
    const Json *dt = json_get(&v, "dtype"), *sh = json_get(&v, "shape"), *off = json_get(&v, "data_offsets");
    if (!dt || !sh || !off) { *err = what + "needs dtype, shape and data_offsets"; return false; }
    t->name = name;
    t->dtype = dt->type == JSON_STRING ? st_dtype_parse(dt->text) : -1;
    if (t->dtype < 0) { *err = what + "unknown dtype " + (dt->type == JSON_STRING ? "'" + dt->text + "'" : "(not a string)"); return false; }
    uint64_t bytes;
    return st_parse_shape(sh, what, t, &bytes, err) && st_parse_offsets(off, what, bytes, data_bytes, t, err);
}

// The tensors must tile [0, data_bytes): no overlap, no gap, nothing after the last.
static inline bool st_check_tiling(const SafeTensors* st, uint64_t data_bytes, std::string* err) {
    std::vector<const StTensor*> order;
    for (const StTensor& t : st->tensors) order.push_back(&t);
    std::sort(order.begin(), order.end(),
              [](const StTensor* a, const StTensor* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
    uint64_t cursor = 0;
    const StTensor* prev = nullptr;
    for (const StTensor* t : order) {
        if (t->begin < cursor) { *err = "tensors '" + prev->name + "' and '" + t->name + "' overlap in the data section"; return false; }
        if (t->begin > cursor) {
            *err = std::to_string(t->begin - cursor) + " unreferenced bytes before tensor '" + t->name + "' (a gap in the data section)";
            return false;
        }
        cursor = t->end;
        prev = t;
    }
    if (cursor != data_bytes) {
        *err = std::to_string(data_bytes - cursor) + " bytes after the last tensor are not part of any tensor";
        return false;
    }
    return true;
}

// Checks the header JSON (n bytes) against a data section of data_bytes bytes and fills st's
// tensors and metadata. The whole of the format's validation lives here, so tests can feed it
// headers from memory.
static inline bool safetensors_parse_header(SafeTensors* st, const char* json, size_t n, uint64_t data_bytes, std::string* err) {
    Json h;
    std::string jerr;
    if (!json_parse(json, n, &h, &jerr)) { *err = "malformed header JSON at " + jerr; return false; }
    if (h.type != JSON_OBJECT) { *err = "the header is not a JSON object"; return false; }
    st->tensors.clear();
    st->metadata.clear();
    st->data_bytes = data_bytes;
    for (const auto& m : h.members) {
        if (m.first == "__metadata__") {
            if (!st_parse_metadata(st, m.second, err)) return false;
            continue;
        }
        StTensor t;
        if (!st_parse_tensor(m.first, m.second, data_bytes, &t, err)) return false;
        st->tensors.push_back(t);
    }
    return st_check_tiling(st, data_bytes, err);
}

static inline void safetensors_close(SafeTensors* st) {
    if (st->file) fclose(st->file);
    st->file = nullptr;
}

static inline bool safetensors_open(SafeTensors* st, const char* path, std::string* err) {
    st->path = path;
    st->file = fopen(path, "rb");
    if (!st->file) { *err = std::string("cannot open: ") + strerror(errno); return false; }
    struct stat sb;
    if (fstat(fileno(st->file), &sb) != 0) { *err = std::string("cannot stat: ") + strerror(errno); safetensors_close(st); return false; }
    uint64_t size = (uint64_t)sb.st_size;
    uint8_t len[8];
    if (size < 8 || fread(len, 1, 8, st->file) != 8) {
        *err = "truncated: shorter than the 8-byte header length";
        safetensors_close(st);
        return false;
    }
    uint64_t N = 0;
    for (int i = 7; i >= 0; i--) N = N << 8 | len[i];
    if (N < 2 || N > SAFETENSORS_MAX_HEADER || N > size - 8) {
        *err = "header length " + std::to_string(N) + (N < 2                        ? " is too short for a JSON object"
                                                       : N > SAFETENSORS_MAX_HEADER ? " exceeds the format's 100 MB limit"
                                                       : " runs past the end of the file (" + std::to_string(size) + " bytes)");
        safetensors_close(st);
        return false;
    }
    std::string header(N, '\0');
    if (fread(&header[0], 1, N, st->file) != N) { *err = "truncated header"; safetensors_close(st); return false; }
    st->header_bytes = N;
    st->data_offset = 8 + N;
    if (!safetensors_parse_header(st, header.data(), header.size(), size - 8 - N, err)) { safetensors_close(st); return false; }
    return true;
}

static inline const StTensor* safetensors_find(const SafeTensors* st, const std::string& name) {
    for (const StTensor& t : st->tensors)
        if (t.name == name) return &t;
    return nullptr;
}

static inline bool safetensors_read(const SafeTensors* st, const StTensor* t, void* dst, std::string* err) {
    uint64_t bytes = t->end - t->begin;
    if (fseeko(st->file, (off_t)(st->data_offset + t->begin), SEEK_SET) != 0 || fread(dst, 1, bytes, st->file) != bytes) {
        *err = "tensor '" + t->name + "': truncated (the file shrank since its header was read?)";
        return false;
    }
    return true;
}

// ---- F16 and BF16 elements ------------------------------------------------------------------------
// Widening to fp32 is exact; narrowing rounds to nearest even (NaN stays NaN; fp16: |x| >= 65520 -> inf).

static inline uint16_t st_bf16_from_f32(float x) {  // round to nearest even; NaN stays a (quiet) NaN
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(u >> 16 | 0x40);
    return (uint16_t)((u + 0x7FFFu + (u >> 16 & 1u)) >> 16);
}
static inline float st_bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}
// binary16 bits of x, rounded by fp16_round (llmc/ops.h: the rounding every fp16 path of keel uses).
static inline uint16_t st_f16_from_f32(float x) {
    float y = fp16_round(x);
    uint32_t u;
    memcpy(&u, &y, 4);
    uint16_t sign = (uint16_t)(u >> 16 & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00;            // NaN
    if (a == 0x7F800000u) return sign | 0x7C00;           // inf
    if (a >= 0x38800000u) return sign | (uint16_t)(((a >> 23) - 112) << 10 | (a >> 13 & 0x3FF));  // normal: exponent - 127 + 15
    float mag;
    memcpy(&mag, &a, 4);
    return sign | (uint16_t)(mag * 0x1p24f);             // subnormal: k·2^-24, k < 1024 (exact)
}
static inline float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = h >> 10 & 0x1F, m = h & 0x3FF, u;
    if (e == 0) {
        float v = (float)m * 0x1p-24f;  // zero or subnormal, exact
        memcpy(&u, &v, 4);
        u |= sign;
    } else if (e == 31) {
        u = sign | 0x7F800000u | m << 13;
    } else {
        u = sign | (e + 112) << 23 | m << 13;
    }
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// ---- writer -------------------------------------------------------------------------------------

struct StEntry {
    std::string name;
    int dtype;                    // StDtype
    std::vector<uint64_t> shape;
};

static inline uint64_t st_entry_bytes(const StEntry* e) {
    uint64_t b = (uint64_t)ST_DTYPE_SIZES[e->dtype];
    for (uint64_t d : e->shape) b *= d;
    return b;
}

// The file's first bytes for these tensors, back to back in this order: the length, then the
// JSON (tensors in order, then __metadata__), padded with spaces to a multiple of 8.
static inline std::string safetensors_header(const std::vector<StEntry>& entries, const std::vector<std::pair<std::string, std::string>>& metadata) {
    std::string j = "{";
    uint64_t offset = 0;
    for (const StEntry& e : entries) {
        uint64_t end = offset + st_entry_bytes(&e);
        j += (j.size() > 1 ? "," : "") + json_quote(e.name) + ":{\"dtype\":\"" + ST_DTYPE_NAMES[e.dtype] + "\",\"shape\":[";
        for (size_t i = 0; i < e.shape.size(); i++) j += (i ? "," : "") + std::to_string(e.shape[i]);
        j += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
        offset = end;
    }
    if (!metadata.empty()) {
        j += std::string(j.size() > 1 ? "," : "") + "\"__metadata__\":{";
        for (size_t i = 0; i < metadata.size(); i++) j += (i ? "," : "") + json_quote(metadata[i].first) + ":" + json_quote(metadata[i].second);
        j += "}";
    }
    j += "}";
    while (j.size() % 8) j += ' ';
    std::string out(8, '\0');
    uint64_t N = j.size();
    for (int i = 0; i < 8; i++) out[i] = (char)(N >> (8 * i) & 0xFF);
    return out + j;
}

// Writes a whole safetensors file from memory (datas[i]: entries[i]'s bytes); false with a reason.
static inline bool safetensors_write_file(const char* path, const std::vector<StEntry>& entries, const std::vector<const void*>& datas,
                                          const std::vector<std::pair<std::string, std::string>>& metadata, std::string* err) {
    FILE* f = fopen(path, "wb");
    if (!f) { *err = std::string("cannot create: ") + strerror(errno); return false; }
    std::string h = safetensors_header(entries, metadata);
    bool ok = fwrite(h.data(), 1, h.size(), f) == h.size();
    for (size_t i = 0; ok && i < entries.size(); i++) {
        uint64_t b = st_entry_bytes(&entries[i]);
        ok = fwrite(datas[i], 1, b, f) == b;
    }
    ok = fclose(f) == 0 && ok;
    if (!ok) *err = std::string("write failed: ") + strerror(errno);
    return ok;
}
