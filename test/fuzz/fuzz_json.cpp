// fuzz_json — the JSON reader (llmc/json.h): json_parse never reads outside its input and never
// dies; an accepted document's integers read back through json_as_u64/json_as_i64 without overflow,
// and every string re-quoted by json_quote parses back to itself.
#include "llmc/json.h"
#include "test/fuzz/fuzz.h"

static void fuzz_json_walk(const Json* v) {
    uint64_t u;
    int64_t i;
    if (v->type == JSON_NUMBER) { json_as_u64(v, &u); json_as_i64(v, &i); }
    if (v->type == JSON_STRING) {
        std::string q = json_quote(v->text), err;
        Json back;
        if (!json_parse(q.data(), q.size(), &back, &err) || back.type != JSON_STRING || back.text != v->text)
            fuzz_fail("json_quote(s) does not parse back to s");
    }
    for (const Json& x : v->items) fuzz_json_walk(&x);
    for (const auto& m : v->members) {
        if (json_get(v, m.first.c_str()) == nullptr && m.first.find('\0') == std::string::npos) fuzz_fail("json_get misses a member");
        fuzz_json_walk(&m.second);
    }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Json v;
    std::string err;
    if (json_parse((const char*)data, size, &v, &err)) fuzz_json_walk(&v);
    else if (err.empty()) fuzz_fail("refused without a reason");
    return 0;
}
