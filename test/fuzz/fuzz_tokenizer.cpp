// fuzz_tokenizer — GPT-2's BPE (llmc/tokenizer.h) with the real encoder.json and vocab.bpe
// (data/gpt2/, `make data`; KEEL_FUZZ_GPT2_DIR overrides). The first byte picks the direction:
//   even: the rest is text: encode, every id in the vocabulary, and decode(encode(x)) == x (lossless
//         for any bytes, the tokenizer's contract);
//   odd:  the rest is int32 ids: decode (an id outside the vocabulary is refused), and the lenient
//         decode shows every id.
#include "llmc/tokenizer.h"
#include "test/fuzz/fuzz.h"

static Tokenizer tok;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* dir = getenv("KEEL_FUZZ_GPT2_DIR");
    std::string d = dir ? dir : "data/gpt2";
    tokenizer_load(&tok, (d + "/encoder.json").c_str(), (d + "/vocab.bpe").c_str());
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const char* rest = (const char*)data + 1;
    size_t n = size - 1;
    if (data[0] % 2 == 0) {
        std::vector<int> ids;
        tokenizer_encode(&tok, rest, n, ids);
        for (int id : ids)
            if (id < 0 || id >= tokenizer_vocab_size(&tok)) fuzz_fail("encode gave an id outside the vocabulary");
        std::string back;
        tokenizer_decode(&tok, ids.data(), ids.size(), back);
        if (back != std::string(rest, n)) fuzz_fail("decode(encode(x)) != x");
    } else {
        std::vector<int> ids(n / 4);
        if (!ids.empty()) memcpy(ids.data(), rest, ids.size() * 4);
        std::string out;
        tokenizer_decode_lenient(&tok, ids.data(), ids.size(), out);
        try {
            out.clear();
            tokenizer_decode(&tok, ids.data(), ids.size(), out);
        } catch (const KeelError&) {
        }
    }
    return 0;
}
