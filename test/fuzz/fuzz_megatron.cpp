// fuzz_megatron — Megatron's indexed dataset (llmc/megatron_data.h). The first two bytes (little
// endian) give the length of the .idx image; the rest of the input after it is the .bin.
// megatron_index_parse checks the index (an accepted one: sizes >= 0, contiguous pointers, a
// monotone document index ending at N); megatron_open then reads both files as the trainer does
// (the .bin's size against the index, every id in the vocabulary).
#include "llmc/megatron_data.h"
#include "test/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    size_t nidx = std::min<size_t>(data[0] | (size_t)data[1] << 8, size - 2);
    const uint8_t* idx = data + 2;
    MegatronIndex ix;
    std::string why = megatron_index_parse(idx, nidx, &ix);
    if (why.empty()) {
        int64_t at = 0;
        for (size_t i = 0; i < ix.sizes.size(); i++) {
            if (ix.sizes[i] < 0 || ix.pointers[i] != at) fuzz_fail("accepted index: bad sizes or pointers");
            at += (int64_t)ix.sizes[i] * ix.width;
        }
        if (ix.ntok * ix.width != at || ix.doc_idx.empty() || ix.doc_idx.back() != (int64_t)ix.sizes.size())
            fuzz_fail("accepted index: token count or document index");
    }
    std::string prefix = fuzz_dir() + "/data";
    fuzz_write(prefix + ".idx", idx, nidx);
    fuzz_write(prefix + ".bin", idx + nidx, size - 2 - nidx);
    MegatronData md;
    try {
        megatron_open(&md, prefix, 50257);
        if (!why.empty()) fuzz_fail("megatron_open accepted an index megatron_index_parse refuses");
    } catch (const KeelError&) {
    }
    return 0;
}
