// test_safetensors — llmc/json.h and llmc/safetensors.h, the readers of outside bytes behind
// --load-hf (docs/internals.md#tests-and-benchmarks: every reader of outside bytes is fuzzed; the Makefile also builds this test
// under AddressSanitizer + UBSan as test_safetensors_asan):
//   - JSON: values of every kind read back (escapes, surrogate pairs, integers past 2^53 exactly);
//     every class of malformed text refused with its reason, duplicate keys and deep nesting too;
//   - safetensors headers: a valid header read field by field; each defect refused with its reason —
//     not an object, bad __metadata__, unknown key, missing field, unknown dtype, bad shape or
//     offsets, a size that is not dtype x shape, a shape whose byte count overflows 64 bits, offsets
//     past the end, overlapping tensors, a gap, trailing bytes; empty tensors and scalars accepted;
//   - files: writer → reader round trip of every byte (header length a multiple of 8); the 8-byte
//     length refused when past the end, too short or over 100 MB, a file shorter than 8 bytes;
//   - F16/BF16 elements: every code is a fixed point of widen → narrow, widening against an
//     independent decoder, bf16 midpoints tie to even, narrowing to fp16 = llmc/ops.h's fp16_round;
//   - fuzz: 30000 mutations of a valid file (byte flips, insertions, deletions in the header, random
//     lengths, truncations): never a crash, and whatever is accepted satisfies the format's
//     invariants checked independently here.
#include <unistd.h>

#include <cmath>
#include <random>

#include "llmc/safetensors.h"

static int failures = 0;

static void check(bool ok, const char* what, const std::string& detail = "") {
    printf("%-4s %s%s%s\n", ok ? "ok" : "FAIL", what, detail.empty() ? "" : ": ", detail.c_str());
    if (!ok) failures++;
}

// ---- JSON -------------------------------------------------------------------------------------------

static void test_json_values() {
    const char* text = " {\"a\": [1, -2.5e3, true, false, null, \"x\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"], "
                       "\"big\": 18446744073709551615, \"neg\": -9223372036854775808, \"o\": {\"k\": {}}, \"e\": []} ";
    Json v;
    std::string err;
    bool ok = json_parse(text, strlen(text), &v, &err);
    check(ok && v.type == JSON_OBJECT && v.members.size() == 5, "JSON: an object of every kind of value parses", err);
    if (!ok) return;
    const Json* a = json_get(&v, "a");
    check(a && a->type == JSON_ARRAY && a->items.size() == 6, "JSON: array of six");
    check(a->items[0].num == 1 && a->items[1].num == -2500 && a->items[2].boolean && !a->items[3].boolean && a->items[4].type == JSON_NULL,
          "JSON: numbers, booleans, null");
    check(a->items[5].text == "x\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80", "JSON: escapes incl. \\u00e9 and a surrogate pair as UTF-8");
    uint64_t u = 0;
    int64_t i = 0;
    check(json_as_u64(json_get(&v, "big"), &u) && u == UINT64_MAX, "JSON: 2^64-1 read exactly as an integer");
    check(json_as_i64(json_get(&v, "neg"), &i) && i == INT64_MIN, "JSON: -2^63 read exactly");
    check(json_get(json_get(&v, "o"), "k")->type == JSON_OBJECT && json_get(&v, "missing") == nullptr, "JSON: nested lookup, absent key");
    const char* not_u64[] = {"1.0", "1e3", "-1", "18446744073709551616", "\"7\""};
    bool all = true;
    for (const char* s : not_u64) {
        Json n;
        all = all && json_parse(s, strlen(s), &n, &err) && !json_as_u64(&n, &u);
    }
    check(all, "JSON: 1.0, 1e3, -1, 2^64 and a string are not unsigned integers");
}

static void test_json_refusals() {
    struct { const char* text; const char* why; } bad[] = {
        {"", "unexpected end"}, {"{", "expected a string key"}, {"{\"a\":1,}", "expected a string key"},
        {"[1,]", "unexpected character"}, {"[1 2]", "expected ',' or ']'"}, {"{\"a\" 1}", "expected ':'"},
        {"\"abc", "unterminated string"}, {"\"a\x01\"", "control character"}, {"\"\\x\"", "unknown escape"},
        {"\"\\u12\"", "truncated \\u escape"}, {"\"\\u12zz\"", "bad hex digit"}, {"\"\\ud800\"", "high surrogate without"}, {"\"\\udc00\"", "lone low surrogate"},
        {"01", "trailing content"}, {"1.", "no digits after"}, {"-", "malformed number"}, {"1e", "no exponent digits"},
        {"tru", "unexpected character"}, {"nul", "unexpected character"}, {"{} x", "trailing content"},
        {"{\"a\":1,\"a\":2}", "duplicate key 'a'"}, {"+1", "unexpected character"},
    };
    for (auto& b : bad) {
        Json v;
        std::string err;
        bool ok = json_parse(b.text, strlen(b.text), &v, &err);
        check(!ok && err.find(b.why) != std::string::npos, ("JSON refused: " + std::string(b.text)).c_str(), err);
    }
    std::string deep(JSON_MAX_DEPTH + 2, '['), fine(JSON_MAX_DEPTH, '[');
    deep += std::string(JSON_MAX_DEPTH + 2, ']');
    fine += std::string(JSON_MAX_DEPTH, ']');
    Json v;
    std::string err;
    check(!json_parse(deep.data(), deep.size(), &v, &err) && err.find("nesting too deep") != std::string::npos, "JSON: nesting past 64 refused", err);
    check(json_parse(fine.data(), fine.size(), &v, &err), "JSON: nesting of 64 accepted", err);
    std::string quoted = json_quote(std::string("a\"b\\c\n\x01", 7));
    check(quoted == "\"a\\\"b\\\\c\\u000a\\u0001\"" && json_parse(quoted.data(), quoted.size(), &v, &err) && v.text == std::string("a\"b\\c\n\x01", 7),
          "json_quote escapes and reads back", quoted);
}

// ---- headers ------------------------------------------------------------------------------------------

static bool parse(const std::string& h, uint64_t data, std::string* err, SafeTensors* st = nullptr) {
    SafeTensors local;
    return safetensors_parse_header(st ? st : &local, h.data(), h.size(), data, err);
}

static void test_header_valid() {
    std::string h = "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[24,30]},"
                    "\"a\":{\"shape\":[2,3],\"dtype\":\"F32\",\"data_offsets\":[0,24]},\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[30,38]},"
                    "\"z\":{\"dtype\":\"F16\",\"shape\":[4,0],\"data_offsets\":[38,38]}}";
    SafeTensors st;
    std::string err;
    bool ok = parse(h, 38, &err, &st);
    check(ok, "header: a valid one (metadata, BF16, F32, a scalar, an empty tensor, keys in any order) is read", err);
    if (!ok) return;
    const StTensor* a = safetensors_find(&st, "a");
    check(st.tensors.size() == 4 && a && a->dtype == ST_F32 && a->shape == std::vector<uint64_t>{2, 3} && a->begin == 0 && a->end == 24,
          "header: tensor a = F32 [2, 3] at [0, 24)");
    check(st.metadata.size() == 1 && st.metadata[0].first == "format" && st.metadata[0].second == "pt", "header: __metadata__ format pt");
    check(safetensors_find(&st, "s")->shape.empty() && safetensors_find(&st, "z")->end == 38, "header: scalar and empty tensor");
}

static void test_header_refusals() {
    auto t = [](const char* name, const char* dtype, const char* shape, const char* offsets) {
        return "\"" + std::string(name) + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
    };
    std::string A = t("a", "F32", "[2]", "[0,8]"), B = t("b", "F32", "[2]", "[8,16]");
    struct { std::string header; uint64_t data; const char* why; } bad[] = {
        {"[]", 0, "not a JSON object"},
        {"{\"a\":1}", 0, "tensor 'a': not an object"},
        {"{\"__metadata__\":[]}", 0, "__metadata__ is not an object"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ value of 'k' is not a string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "unknown key 'x'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "needs dtype, shape and data_offsets"},
        {"{" + t("a", "F33", "[2]", "[0,8]") + "}", 8, "unknown dtype 'F33'"},
        {"{\"a\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype (not a string)"},
        {"{" + t("a", "F32", "2", "[0,8]") + "}", 8, "shape is not an array"},
        {"{" + t("a", "F32", "[-2]", "[0,8]") + "}", 8, "non-negative integer"},
        {"{" + t("a", "F32", "[2.0]", "[0,8]") + "}", 8, "non-negative integer"},
        {"{" + t("a", "F32", "[2]", "[0]") + "}", 8, "data_offsets is not [begin, end]"},
        {"{" + t("a", "F32", "[2]", "[0,8,9]") + "}", 8, "data_offsets is not [begin, end]"},
        {"{" + t("a", "F32", "[2]", "[8,0]") + "}", 8, "end before they begin"},
        {"{" + t("a", "F32", "[2]", "[0,8]") + "}", 4, "past the end of the data section"},
        {"{" + t("a", "F32", "[3]", "[0,8]") + "}", 8, "hold 8 bytes, but F32 [3] is 12"},
        {"{" + t("a", "F32", "[4294967296,4294967296]", "[0,8]") + "}", 8, "overflows 64 bits"},
        {"{" + t("a", "U8", "[18446744073709551615,2]", "[0,8]") + "}", 8, "overflows 64 bits"},
        {"{" + A + "," + t("b", "F32", "[2]", "[4,12]") + "}", 12, "overlap"},
        {"{" + A + "," + t("b", "F32", "[2]", "[12,20]") + "}", 20, "4 unreferenced bytes before tensor 'b'"},
        {"{" + A + "," + B + "}", 20, "4 bytes after the last tensor"},
        {"{" + t("a", "F32", "[2]", "[4,12]") + "}", 12, "4 unreferenced bytes before tensor 'a'"},
        {"{" + A + "," + A + "}", 8, "duplicate key 'a'"},
        {"{" + A + ",}", 8, "malformed header JSON"},
    };
    for (auto& b : bad) {
        std::string err;
        bool ok = parse(b.header, b.data, &err);
        check(!ok && err.find(b.why) != std::string::npos, ("header refused: " + std::string(b.why)).c_str(), err);
    }
    std::string err;
    check(parse("{" + A + "," + B + "}", 16, &err), "header: two tensors tiling 16 bytes accepted (the refusals above are not spurious)", err);
    check(parse("{}", 0, &err), "header: no tensors, no data accepted", err);
}

// ---- files -------------------------------------------------------------------------------------------

static std::string tmp_path(const char* name) { return "/tmp/keel_test_safetensors_" + std::to_string(getpid()) + "_" + name; }

static void write_bytes(const std::string& path, const std::string& bytes) {
    FILE* f = fopen(path.c_str(), "wb");
    fwrite(bytes.data(), 1, bytes.size(), f);
    fclose(f);
}

static std::string read_bytes(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    fclose(f);
    return s;
}

static std::string valid_file() {
    std::vector<StEntry> e = {{"w", ST_F32, {3, 5}}, {"b\"q", ST_BF16, {7}}, {"e", ST_F16, {0}}, {"i", ST_I64, {2}}};
    std::string bytes = safetensors_header(e, {{"format", "pt"}, {"producer", "test"}});
    for (int k = 0; k < 3 * 5 * 4 + 7 * 2 + 2 * 8; k++) bytes += (char)(k * 37 + 11);
    return bytes;
}

static void test_files() {
    std::string path = tmp_path("ok.safetensors"), err;
    std::vector<StEntry> e = {{"w", ST_F32, {3, 5}}, {"b", ST_BF16, {7}}, {"s", ST_F64, {}}};
    std::vector<float> w(15);
    std::vector<uint16_t> b(7);
    double s = -1.25;
    for (int i = 0; i < 15; i++) w[i] = 0.5f * (float)i - 3.0f;
    for (int i = 0; i < 7; i++) b[i] = (uint16_t)(0x3F80 + i);
    bool ok = safetensors_write_file(path.c_str(), e, {w.data(), b.data(), &s}, {{"format", "pt"}}, &err);
    SafeTensors st;
    ok = ok && safetensors_open(&st, path.c_str(), &err);
    check(ok, "file: written and opened", err);
    if (!ok) return;
    check(st.header_bytes % 8 == 0 && st.data_offset % 8 == 0, "file: header padded to a multiple of 8 (aligned data)");
    std::vector<float> w2(15);
    std::vector<uint16_t> b2(7);
    double s2 = 0;
    ok = safetensors_read(&st, safetensors_find(&st, "w"), w2.data(), &err) && safetensors_read(&st, safetensors_find(&st, "b"), b2.data(), &err) &&
         safetensors_read(&st, safetensors_find(&st, "s"), &s2, &err);
    check(ok && w2 == w && b2 == b && s2 == s, "file: every tensor's bytes read back", err);
    safetensors_close(&st);
    std::string bytes = read_bytes(path);
    struct { std::string content; const char* why; } bad[] = {
        {bytes.substr(0, 5), "shorter than the 8-byte header length"},
        {std::string("\xff\xff\xff\x00\x00\x00\x00\x00", 8) + bytes.substr(8), "runs past the end of the file"},
        {std::string("\x01\x00\x00\x00\x00\x00\x00\x00", 8) + bytes.substr(8), "too short for a JSON object"},
        {std::string("\x01\xe1\xf5\x05\x00\x00\x00\x00", 8) + bytes.substr(8), "100 MB limit"},  // checked before any allocation
        {bytes.substr(0, bytes.size() - 3), "past the end of the data section"},
        {bytes + "xyz", "3 bytes after the last tensor"},
    };
    for (auto& c : bad) {
        write_bytes(path, c.content);
        SafeTensors t;
        ok = safetensors_open(&t, path.c_str(), &err);
        check(!ok && err.find(c.why) != std::string::npos && t.file == nullptr, ("file refused: " + std::string(c.why)).c_str(), err);
    }
    unlink(path.c_str());
    SafeTensors t;
    check(!safetensors_open(&t, "/nonexistent/x.safetensors", &err) && err.find("cannot open") != std::string::npos, "file: missing file refused", err);
}

// ---- F16 / BF16 --------------------------------------------------------------------------------------

static uint32_t bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float from_bits(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

static void test_elements() {
    bool f16_fixed = true, f16_decode = true, bf16_fixed = true;
    for (uint32_t c = 0; c < 65536; c++) {
        uint16_t h = (uint16_t)c;
        float x = st_f16_to_f32(h);
        int e = h >> 10 & 0x1F, m = h & 0x3FF;  // the independent decoder: (-1)^s · m·2^-24 or (1024+m)·2^(e-25)
        double ref = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? std::ldexp((double)m, -24) : std::ldexp(1024.0 + m, e - 25);
        if (h & 0x8000) ref = -ref;
        if (std::isnan(ref) ? !std::isnan(x) : (double)x != ref || std::signbit(x) != (bool)(h & 0x8000)) f16_decode = false;
        if (!std::isnan(x) && st_f16_from_f32(x) != h) f16_fixed = false;
        if (std::isnan(x) && !std::isnan(st_f16_to_f32(st_f16_from_f32(x)))) f16_fixed = false;
        float y = st_bf16_to_f32(h);
        if (bits(y) != c << 16) bf16_fixed = false;
        if (!std::isnan(y) && st_bf16_from_f32(y) != h) bf16_fixed = false;
        if (std::isnan(y) && !std::isnan(st_bf16_to_f32(st_bf16_from_f32(y)))) bf16_fixed = false;
    }
    check(f16_decode, "F16: all 65536 codes widen to the independently decoded value (sign of zero, inf, NaN)");
    check(f16_fixed, "F16: every code is a fixed point of widen -> narrow (NaN stays NaN)");
    check(bf16_fixed, "BF16: every code widens to its top 16 bits and narrows back (NaN stays NaN)");
    bool ties = true, near = true;
    for (uint32_t c = 0; c < 0x7F80; c++) {  // positive finite codes and the midpoint to the next
        float mid = from_bits(c << 16 | 0x8000);
        uint16_t want = (c & 1) ? (uint16_t)(c + 1) : (uint16_t)c;  // ties to the even code
        if (st_bf16_from_f32(mid) != want || st_bf16_from_f32(-mid) != (want | 0x8000)) ties = false;
        if (st_bf16_from_f32(from_bits(c << 16 | 0x7FFF)) != c || st_bf16_from_f32(from_bits(c << 16 | 0x8001)) != c + 1) near = false;
    }
    check(ties, "BF16: every midpoint rounds to the even code (both signs)");
    check(near, "BF16: one ulp below / above a midpoint rounds down / up");
    std::mt19937 rng(7);
    bool same = true;
    for (int i = 0; i < 1000000; i++) {
        float x = from_bits(rng());
        if (std::isnan(x)) continue;
        if (bits(st_f16_to_f32(st_f16_from_f32(x))) != bits(fp16_round(x))) same = false;
    }
    check(same, "F16: narrowing = fp16_round (llmc/ops.h) on a million random floats, overflow to inf included");
}

// ---- fuzz ----------------------------------------------------------------------------------------------

// Whatever the reader accepts must satisfy the format, checked here without its code: offsets in
// range, byte counts = dtype x shape, and the tensors exactly tiling the data section.
static bool invariants_hold(const SafeTensors* st) {
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const StTensor& t : st->tensors) {
        if (t.dtype < 0 || t.dtype >= ST_NUM_DTYPES || t.begin > t.end || t.end > st->data_bytes) return false;
        long double n = ST_DTYPE_SIZES[t.dtype];
        for (uint64_t d : t.shape) n *= (long double)d;
        if (n != (long double)(t.end - t.begin)) return false;
        spans.push_back({t.begin, t.end});
    }
    std::sort(spans.begin(), spans.end());
    uint64_t at = 0;
    for (auto& s : spans) {
        if (s.first != at) return false;
        at = s.second;
    }
    return at == st->data_bytes;
}

static void test_fuzz() {
    std::string good = valid_file(), path = tmp_path("fuzz.safetensors");
    uint64_t N = 0;
    for (int i = 7; i >= 0; i--) N = N << 8 | (uint8_t)good[i];
    std::mt19937_64 rng(20240601);
    int accepted = 0, refused = 0, broken = 0, file_runs = 0;
    for (int it = 0; it < 30000; it++) {
        std::string h = good.substr(8, N);
        uint64_t data = good.size() - 8 - N;
        int edits = 1 + (int)(rng() % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = rng() % (h.size() + 1);
            switch (rng() % 6) {
                case 0: if (!h.empty()) h[at % h.size()] = (char)(rng() & 0xFF); break;              // any byte
                case 1: if (!h.empty()) h[at % h.size()] = "{}[]\":,0123456789-e. "[rng() % 21]; break;  // a JSON byte
                case 2: h.insert(at, 1, "{}[]\":,0123456789"[rng() % 17]); break;
                case 3: if (!h.empty()) h.erase(at % h.size(), 1 + rng() % 4); break;
                case 4: data = rng() % 2 ? rng() % 200 : rng(); break;                                // another data size
                case 5: h = h.substr(0, at); break;                                                    // truncated
            }
        }
        SafeTensors st;
        std::string err;
        bool ok = safetensors_parse_header(&st, h.data(), h.size(), data, &err);
        if (ok) { accepted++; if (!invariants_hold(&st)) broken++; }
        else { refused++; if (err.empty()) broken++; }
        if (it % 100 == 0) {  // through a real file: random 8-byte lengths and truncations
            std::string bytes = good;
            if (rng() % 2) for (int i = 0; i < 8; i++) bytes[i] = (char)(rng() & 0xFF);
            else bytes.resize(rng() % bytes.size());
            write_bytes(path, bytes);
            SafeTensors f;
            if (safetensors_open(&f, path.c_str(), &err)) { if (!invariants_hold(&f)) broken++; safetensors_close(&f); }
            file_runs++;
        }
    }
    unlink(path.c_str());
    char buf[160];
    snprintf(buf, sizeof buf, "%d accepted, %d refused (each with a reason), %d file runs", accepted, refused, file_runs);
    check(broken == 0 && refused > 20000 && accepted > 0, "fuzz: 30000 mutated headers, no crash, every acceptance satisfies the format", buf);
}

int main() {
    test_json_values();
    test_json_refusals();
    test_header_valid();
    test_header_refusals();
    test_files();
    test_elements();
    test_fuzz();
    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
