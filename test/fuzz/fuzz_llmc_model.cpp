// fuzz_llmc_model — llm.c GPT-2 model files (llmc/checkpoint.h llmc_read_header, llmc_load): the
// header's shape is checked against the file's size before anything is allocated from it; an
// accepted header is then loaded whole into keel's parameter table of that shape.
#include "llmc/checkpoint.h"
#include "test/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzFile in(data, size);
    try {
        LlmcHeader h = llmc_read_header(in.path.c_str(), nullptr);
        if (h.C % h.NH != 0) return 0;  // keel's flags refuse such a shape before llmc_load
        GPTConfig g = {};
        g.max_seq_len = h.maxT; g.vocab_size = h.V; g.padded_vocab_size = h.Vp;
        g.num_layers = h.L; g.num_heads = h.NH; g.channels = h.C; g.ffn_hidden = 4 * h.C;
        g.stage_num_layers = -1;
        ParamTable pt;
        param_table_build(&pt, &g);
        if ((size_t)pt.total * 4 > size) fuzz_fail("accepted header: the parameters exceed the file");
        std::vector<float> params((size_t)pt.total);
        llmc_load(in.path.c_str(), params.data(), &pt, &g);
    } catch (const KeelError&) {
    }
    return 0;
}
