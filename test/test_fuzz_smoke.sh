#!/usr/bin/env bash
# test_fuzz_smoke.sh — the libFuzzer targets (test/fuzz/, docs/operations.md#hardening) in make test: builds
# each with clang (ASan + UBSan + libFuzzer; scripts/setup.sh installs clang and its runtime), runs it
# over its seed corpus test/fuzz/corpus/<target> (every input that ever crashed a reader is kept
# there) and fuzzes it KEEL_FUZZ_SMOKE_SECONDS (default 3) more, from a fresh temporary corpus.
# Fails on any finding (a crash, a sanitizer report, a hang past 10 s, memory past 2 GiB, a target's
# invariant), naming the target and the input. `make fuzz` is the long run.
source "$(dirname "$0")/lib.sh"
seconds=${KEEL_FUZZ_SMOKE_SECONDS:-3}
probe='#include <cstdint>
#include <cstddef>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }'
if ! echo "$probe" | clang++ -fsanitize=fuzzer,address,undefined -x c++ - -o "$TMP/probe" 2>"$TMP/probe.log"; then
  fail "clang++ cannot link a libFuzzer target (run scripts/setup.sh: clang, libclang-rt-dev): $(head -2 "$TMP/probe.log")"
  finish
fi
[ -f data/gpt2/encoder.json ] || fail "data/gpt2/encoder.json missing (make data): the tokenizer target needs it"
make --no-print-directory -s fuzz-build >"$TMP/build.log" 2>&1 || { fail "make fuzz-build: $(grep -m3 -E 'error|Error' "$TMP/build.log")"; finish; }
ok "built $(ls build/fuzz/fuzz_* | wc -l) targets"
if KEEL_FUZZ_WORK="$TMP/work" bash test/fuzz/run.sh "$seconds"; then
  ok "every target, its corpus and ${seconds} s of fuzzing: no finding"
else
  mkdir -p build/fuzz/findings && cp "$TMP"/work/findings/* build/fuzz/findings/
  fail "a fuzz target reported a finding: its input and log are kept in build/fuzz/findings"
fi
finish
