// json.h — a small JSON reader (RFC 8259) into a tree, and the quoting a JSON writer needs. It reads
// the outside JSON keel trusts with structure: safetensors headers and Hugging Face config.json files.
//
// Contract
//   json_parse(text, n, &value, &err)  parses exactly text[0..n) (surrounding whitespace allowed) into
//       value; false with err = "byte K: what is wrong" on any deviation from the grammar: trailing
//       content, an unterminated string, a control character or bad escape inside a string, a lone
//       surrogate, a malformed number, a duplicate key in one object, nesting deeper than
//       JSON_MAX_DEPTH. Never reads outside text[0..n); never dies (callers name the file and die).
//   Numbers keep their literal text, so json_as_u64 / json_as_i64 read integers exactly (data offsets
//   past 2^53) and refuse fractions, exponents and out-of-range values; num holds strtod's double.
//   Objects keep their members in file order; json_get finds a member by key.
//   json_quote(s)  s as a JSON string literal: ", \ and control characters escaped, other bytes as-is.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

enum JsonType { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };
enum { JSON_MAX_DEPTH = 64 };  // deeper input is refused (recursion depth bounds the stack)

struct Json {
    JsonType type = JSON_NULL;
    bool boolean = false;
    double num = 0;                                    // JSON_NUMBER
    std::string text;                                  // JSON_STRING: the value (UTF-8); JSON_NUMBER: the literal
    std::vector<Json> items;                           // JSON_ARRAY
    std::vector<std::pair<std::string, Json>> members; // JSON_OBJECT, in file order
};

struct JsonParser {
    const char* s;
    size_t n, pos;
    std::string err;
};

static inline bool json_fail(JsonParser* p, const char* what) {
    if (p->err.empty()) p->err = "byte " + std::to_string(p->pos) + ": " + what;
    return false;
}

static inline void json_skip_space(JsonParser* p) {
    while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' || p->s[p->pos] == '\r')) p->pos++;
}

static inline void json_utf8_append(std::string* out, uint32_t cp) {
    if (cp < 0x80) {
        *out += (char)cp;
    } else if (cp < 0x800) {
        *out += (char)(0xC0 | cp >> 6); *out += (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *out += (char)(0xE0 | cp >> 12); *out += (char)(0x80 | ((cp >> 6) & 0x3F)); *out += (char)(0x80 | (cp & 0x3F));
    } else {
        *out += (char)(0xF0 | cp >> 18); *out += (char)(0x80 | ((cp >> 12) & 0x3F));
        *out += (char)(0x80 | ((cp >> 6) & 0x3F)); *out += (char)(0x80 | (cp & 0x3F));
    }
}

static inline bool json_hex4(JsonParser* p, uint32_t* v) {
    if (p->n - p->pos < 4) return json_fail(p, "truncated \\u escape");
    *v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->pos++];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return json_fail(p, "bad hex digit in a \\u escape");
        *v = *v * 16 + (uint32_t)d;
    }
    return true;
}

// A string; the opening quote is at p->pos.
static inline bool json_string(JsonParser* p, std::string* out) {
    p->pos++;
    for (;;) {
        if (p->pos >= p->n) return json_fail(p, "unterminated string");
        char c = p->s[p->pos++];
        if (c == '"') return true;
        if ((unsigned char)c < 0x20) return json_fail(p, "control character inside a string");
        if (c != '\\') { *out += c; continue; }
        if (p->pos >= p->n) return json_fail(p, "unterminated escape");
        char e = p->s[p->pos++];
        switch (e) {
            case '"': *out += '"'; break;
            case '\\': *out += '\\'; break;
            case '/': *out += '/'; break;
            case 'b': *out += '\b'; break;
            case 'f': *out += '\f'; break;
            case 'n': *out += '\n'; break;
            case 'r': *out += '\r'; break;
            case 't': *out += '\t'; break;
            case 'u': {  // astral characters come as a UTF-16 surrogate pair
                uint32_t v = 0;
                if (!json_hex4(p, &v)) return false;
                if (v >= 0xDC00 && v <= 0xDFFF) return json_fail(p, "lone low surrogate");
                if (v >= 0xD800 && v <= 0xDBFF) {
                    uint32_t lo = 0;
                    if (p->n - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                        return json_fail(p, "high surrogate without a low surrogate");
                    p->pos += 2;
                    if (!json_hex4(p, &lo)) return false;
                    if (lo < 0xDC00 || lo > 0xDFFF) return json_fail(p, "high surrogate without a low surrogate");
                    v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                }
                json_utf8_append(out, v);
                break;
            }
            default: p->pos--; return json_fail(p, "unknown escape");
        }
    }
}

// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
static inline bool json_number(JsonParser* p, Json* v) {
    size_t start = p->pos;
    auto digits = [&]() { size_t d = p->pos; while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++; return p->pos - d; };
    if (p->pos < p->n && p->s[p->pos] == '-') p->pos++;
    if (p->pos < p->n && p->s[p->pos] == '0') p->pos++;
    else if (digits() == 0) return json_fail(p, "malformed number");
    if (p->pos < p->n && p->s[p->pos] == '.') {
        p->pos++;
        if (digits() == 0) return json_fail(p, "malformed number (no digits after '.')");
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (digits() == 0) return json_fail(p, "malformed number (no exponent digits)");
    }
    v->type = JSON_NUMBER;
    v->text.assign(p->s + start, p->pos - start);
    v->num = strtod(v->text.c_str(), nullptr);  // ±inf for a literal beyond double's range
    return true;
}

static inline bool json_literal(JsonParser* p, const char* word) {
    size_t k = 0;
    while (word[k]) {
        if (p->pos + k >= p->n || p->s[p->pos + k] != word[k]) return json_fail(p, "unexpected character");
        k++;
    }
    p->pos += k;
    return true;
}

static inline bool json_value(JsonParser* p, Json* v, int depth) {
    json_skip_space(p);
    if (p->pos >= p->n) return json_fail(p, "unexpected end of input");
    if (depth > JSON_MAX_DEPTH) return json_fail(p, "nesting too deep");
    char c = p->s[p->pos];
    if (c == '{') {
        v->type = JSON_OBJECT;
        std::unordered_set<std::string> keys;  // the duplicate check: a tokenizer.json vocabulary has 250k keys
        p->pos++;
        json_skip_space(p);
        if (p->pos < p->n && p->s[p->pos] == '}') { p->pos++; return true; }
        for (;;) {
            json_skip_space(p);
            if (p->pos >= p->n || p->s[p->pos] != '"') return json_fail(p, "expected a string key");
            std::string key;
            size_t key_at = p->pos;
            if (!json_string(p, &key)) return false;
            if (!keys.insert(key).second) { p->pos = key_at; return json_fail(p, ("duplicate key '" + key + "'").c_str()); }
            json_skip_space(p);
            if (p->pos >= p->n || p->s[p->pos] != ':') return json_fail(p, "expected ':'");
            p->pos++;
            v->members.emplace_back(std::move(key), Json());
            if (!json_value(p, &v->members.back().second, depth + 1)) return false;
            json_skip_space(p);
            if (p->pos < p->n && p->s[p->pos] == ',') { p->pos++; continue; }
            if (p->pos < p->n && p->s[p->pos] == '}') { p->pos++; return true; }
            return json_fail(p, "expected ',' or '}'");
        }
    }
    if (c == '[') {
        v->type = JSON_ARRAY;
        p->pos++;
        json_skip_space(p);
        if (p->pos < p->n && p->s[p->pos] == ']') { p->pos++; return true; }
        for (;;) {
            v->items.emplace_back();
            if (!json_value(p, &v->items.back(), depth + 1)) return false;
            json_skip_space(p);
            if (p->pos < p->n && p->s[p->pos] == ',') { p->pos++; continue; }
            if (p->pos < p->n && p->s[p->pos] == ']') { p->pos++; return true; }
            return json_fail(p, "expected ',' or ']'");
        }
    }
    if (c == '"') { v->type = JSON_STRING; return json_string(p, &v->text); }
    if (c == 't') { v->type = JSON_BOOL; v->boolean = true; return json_literal(p, "true"); }
    if (c == 'f') { v->type = JSON_BOOL; v->boolean = false; return json_literal(p, "false"); }
    if (c == 'n') { v->type = JSON_NULL; return json_literal(p, "null"); }
    if (c == '-' || (c >= '0' && c <= '9')) return json_number(p, v);
    return json_fail(p, "unexpected character");
}

static inline bool json_parse(const char* text, size_t n, Json* out, std::string* err) {
    JsonParser p = {text, n, 0, ""};
    *out = Json();
    bool ok = json_value(&p, out, 0);
    if (ok) {
        json_skip_space(&p);
        if (p.pos != n) ok = json_fail(&p, "trailing content after the value");
    }
    if (!ok && err) *err = p.err;
    return ok;
}

// The member `key` of an object (null if absent or v is not an object).
static inline const Json* json_get(const Json* v, const char* key) {
    if (!v || v->type != JSON_OBJECT) return nullptr;
    for (const auto& m : v->members)
        if (m.first == key) return &m.second;
    return nullptr;
}

// A number literal that is a non-negative integer within uint64 (no sign, fraction or exponent).
static inline bool json_as_u64(const Json* v, uint64_t* out) {
    if (!v || v->type != JSON_NUMBER || v->text.empty() || v->text[0] == '-') return false;
    for (char c : v->text)
        if (c < '0' || c > '9') return false;
    errno = 0;
    unsigned long long x = strtoull(v->text.c_str(), nullptr, 10);
    if (errno == ERANGE) return false;
    *out = (uint64_t)x;
    return true;
}

// A number literal that is an integer within int64.
static inline bool json_as_i64(const Json* v, int64_t* out) {
    if (!v || v->type != JSON_NUMBER) return false;
    for (size_t i = 0; i < v->text.size(); i++)
        if ((v->text[i] < '0' || v->text[i] > '9') && !(i == 0 && v->text[i] == '-')) return false;
    errno = 0;
    long long x = strtoll(v->text.c_str(), nullptr, 10);
    if (errno == ERANGE) return false;
    *out = (int64_t)x;
    return true;
}

static inline std::string json_quote(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') { out += '\\'; out += c; }
        else if ((unsigned char)c < 0x20) {
            char buf[8];
            snprintf(buf, sizeof buf, "\\u%04x", (unsigned)(unsigned char)c);
            out += buf;
        } else {
            out += c;
        }
    }
    return out + "\"";
}
