// fuzz_deepspeed — a DeepSpeed config (llmc/deepspeed.h): the input is the JSON file that
// --deepspeed --deepspeed_config names, applied to default flags (fp16/bf16, batch sizes, ZeRO,
// curriculum), then the configuration is validated as the trainer does.
#include "llmc/flags.h"
#include "test/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzFile in(data, size);
    std::string cfg = "--deepspeed_config=" + in.path;
    char prog[] = "keel", ds[] = "--deepspeed", lr[] = "--lr=1e-3", iters[] = "--train-iters=10";
    char* argv[] = {prog, ds, &cfg[0], lr, iters, nullptr};
    Config c;
    try {
        if (flags_parse(&c, 5, argv)) config_validate(&c, 1);
    } catch (const KeelError&) {
    }
    return 0;
}
