// fuzz_safetensors — safetensors files (llmc/safetensors.h): the input is the whole file (u64 header
// length, header JSON, data). safetensors_open checks it; an accepted file's tensors each lie inside
// the data section with bytes = dtype size x shape, and each is read back.
#include "llmc/safetensors.h"
#include "test/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzFile in(data, size);
    SafeTensors st;
    std::string err;
    if (!safetensors_open(&st, in.path.c_str(), &err)) {
        if (err.empty()) fuzz_fail("refused without a reason");
        return 0;
    }
    for (const StTensor& t : st.tensors) {
        if (t.begin > t.end || t.end > st.data_bytes || st.data_offset + st.data_bytes != size) fuzz_fail("a tensor outside the data");
        uint64_t numel = 1;
        for (uint64_t d : t.shape) numel *= d;
        if (numel * ST_DTYPE_SIZES[t.dtype] != t.end - t.begin) fuzz_fail("tensor bytes != dtype size x shape");
        std::vector<uint8_t> buf(t.end - t.begin);
        if (!safetensors_read(&st, &t, buf.data(), &err)) fuzz_fail("an accepted tensor cannot be read");
    }
    safetensors_close(&st);
    return 0;
}
