// fuzz_checkpoint — the checkpoint loader (llmc/checkpoint.h). The first byte picks the part:
//   0: state.txt — the rest is its text before the checksum line; the target appends a correct
//      `checksum = ...` line (else almost every input would stop at the checksum) and a valid
//      model.bin of the tiny shape below, then ckpt_load parses every field, window and rollback;
//   1: state.txt as given (the checksum line and its verification included);
//   2: model.bin / optimizer.bin — the rest is the file: header, kind, sizes, checksum, payload;
//   3: latest_checkpointed_iteration.txt — the rest is its text (ckpt_latest).
// The tiny shape (the seed corpus's state.txt is a real run's: test/fuzz/README.md): 1 layer, 8
// channels, 2 heads, vocabulary 16 (padded 16), 8 positions.
#include "llmc/checkpoint.h"
#include "test/fuzz/fuzz.h"

static GPTConfig fuzz_tiny_config() {
    GPTConfig g = {};
    g.max_seq_len = 8; g.vocab_size = 16; g.padded_vocab_size = 16;
    g.num_layers = 1; g.num_heads = 2; g.channels = 8; g.ffn_hidden = 32;
    g.stage_num_layers = -1;
    return g;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    int part = data[0] % 4;
    std::string rest((const char*)data + 1, size - 1);
    const std::string& dir = fuzz_dir();
    std::string idir = dir + "/iter_0000003";
    mkdir(idir.c_str(), 0755);
    GPTConfig g = fuzz_tiny_config();
    ParamTable pt;
    param_table_build(&pt, &g);
    std::vector<float> params((size_t)pt.total);
    try {
        if (part == 0 || part == 1) {
            if (part == 0) {
                char line[64];
                snprintf(line, sizeof line, "checksum = %016llx\n", (unsigned long long)checksum64(rest.data(), rest.size()));
                rest += line;
            }
            fuzz_write(idir + "/state.txt", rest.data(), rest.size());
            ckpt_write_file(idir + "/model.bin", params.data(), params.size() * 4, CKPT_KIND_MODEL, params.size());
            Config c;
            TrainState s = {};
            std::string loaded, layout;
            ckpt_load(dir, 3, params.data(), pt.total, &s, &g, &c, &loaded, &layout);
            if (s.iteration != 3) fuzz_fail("accepted state.txt of another iteration");
        } else if (part == 2) {
            // The reader is told the kind, bytes and count the file claims (bytes capped by the
            // input's size), as a run of that shape would ask, so the payload and checksum are reached.
            FuzzFile in(rest.data(), rest.size());
            uint32_t kind = CKPT_KIND_MODEL;
            uint64_t bytes = 0, count = 0;
            if (rest.size() >= 64) { memcpy(&kind, &rest[12], 4); memcpy(&bytes, &rest[16], 8); memcpy(&count, &rest[24], 8); }
            bytes = std::min<uint64_t>(bytes, rest.size());
            std::vector<uint8_t> payload(bytes);
            ckpt_read_file(in.path, payload.data(), bytes, count, kind);
        } else {
            fuzz_write(dir + "/latest_checkpointed_iteration.txt", rest.data(), rest.size());
            int64_t it = ckpt_latest(dir);
            if (it < 0) fuzz_fail("an existing latest read as 'no checkpoint'");
        }
    } catch (const KeelError&) {
    }
    return 0;
}
