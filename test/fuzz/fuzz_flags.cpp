// fuzz_flags — the command line (llmc/flags.h): the input is an @file (the shell-like lexer: quotes,
// escapes, continuations, comments, nested @files), then the flag split, every flag's value parser,
// a DeepSpeed config the flags may name, and config_validate's checks of the parsed configuration.
#include "llmc/flags.h"
#include "test/fuzz/fuzz.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    fuzz_quiet_stdin();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzFile in(data, size);
    std::string arg = "@" + in.path;
    char prog[] = "keel";
    char* argv[] = {prog, &arg[0], nullptr};
    Config c;
    try {
        if (flags_parse(&c, 2, argv)) config_validate(&c, 1);
    } catch (const KeelError&) {
    }
    return 0;
}
