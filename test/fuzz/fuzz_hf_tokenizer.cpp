// fuzz_hf_tokenizer — Hugging Face tokenizer.json (llmc/hf_tokenizer.h). The first byte picks:
//   even: the rest is a tokenizer.json: loaded (or refused); a loaded one encodes a fixed text into
//         ids it can decode;
//   odd:  the rest is text, encoded by a fixed tokenizer (byte 0 bit 1: BLOOM's Split, else GPT-2's
//         ByteLevel regex) with added tokens (special, single_word, one a prefix of another, none
//         stripping spaces): every id decodes, and decode(encode(x)) == x.
#include "llmc/hf_tokenizer.h"
#include "test/fuzz/fuzz.h"

static Tokenizer fixed[2];

// 256 byte tokens, "ab", "Ġa" and their merges; added <s>, [W] (single_word), <|e and <|end.
static std::string fixed_json(bool bloom) {
    int cp_of_byte[256];
    tokenizer_byte_alphabet(cp_of_byte);
    std::string vocab;
    for (int b = 0; b < 256; b++) {
        std::string s;
        tokenizer_utf8_append(s, (uint32_t)cp_of_byte[b]);
        vocab += json_quote(s) + ": " + std::to_string(b) + ", ";
    }
    vocab += "\"ab\": 256, \"\\u0120a\": 257";
    std::string pre = bloom ? "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": " +
                                  json_quote(HF_BLOOM_SPLIT) + "}, \"behavior\": \"Isolated\", \"invert\": false}, "
                                  "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}"
                            : "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}";
    return "{\"added_tokens\": [{\"id\": 258, \"content\": \"<s>\", \"special\": true}, "
           "{\"id\": 259, \"content\": \"[W]\", \"single_word\": true}, {\"id\": 260, \"content\": \"<|e\"}, "
           "{\"id\": 261, \"content\": \"<|end\", \"normalized\": false}], \"normalizer\": null, \"pre_tokenizer\": " + pre +
           ", \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {" + vocab +
           "}, \"merges\": [\"a b\", \"\\u0120 a\"]}}";
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    for (int k = 0; k < 2; k++) {
        std::string j = fixed_json(k == 1);
        FuzzFile f(j.data(), j.size());
        hf_tokenizer_load_file(&fixed[k], f.path, "/nonexistent");
    }
    return 0;
}

static void check_round_trip(const Tokenizer* tok, const std::string& text, bool exact) {
    std::vector<int> ids;
    tokenizer_encode(tok, text.data(), text.size(), ids);
    for (int id : ids)
        if (id < 0 || id >= (int)tok->token_bytes.size()) fuzz_fail("encode gave an id that does not decode");
    std::string back;
    tokenizer_decode(tok, ids.data(), ids.size(), back);
    if (exact && back != text) fuzz_fail("decode(encode(x)) != x");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    std::string rest((const char*)data + 1, size - 1);
    if (data[0] % 2 == 1) {
        check_round_trip(&fixed[(data[0] >> 1) & 1], rest, true);
        return 0;
    }
    FuzzFile f(rest.data(), rest.size());
    Tokenizer tok;
    try {
        hf_tokenizer_load_file(&tok, f.path, "/nonexistent");
    } catch (const KeelError&) {
        return 0;
    }
    check_round_trip(&tok, "Hello, world! <s> a  b\n\n\xc2\x85 \xff", false);  // lstrip/rstrip may take spaces
    return 0;
}
