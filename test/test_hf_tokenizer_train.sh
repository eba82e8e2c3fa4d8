#!/usr/bin/env bash
# test_hf_tokenizer_train.sh — the trainer under --tokenizer-type PretrainedFromHF --tokenizer-name-or-path
# (llmc/deepspeed.h megatron_apply_tokenizer, llmc/hf_tokenizer.h), with tokenizer directories this test
# writes (tokenize_gpt2 --save-tokenizer: GPT-2's vocabulary with BLOOM's pre-tokenizer; and a 260-token one).
#   1. the vocabulary comes from the tokenizer (a start-up note names the file, the size and the EOD):
#      the run equals, byte for byte in its JSONL, the same run under GPT2BPETokenizer (same vocabulary);
#   2. --sample-interval decodes with it and starts at its EOD; the sample text equals the GPT-2 run's;
#   3. --export-hf copies its files (tokenizer.json, tokenizer_config.json) and config.json names its EOD;
#   4. a model id resolves through HF_HOME's cache; a 260-token tokenizer sets --vocab-size 260, and a
#      --vocab-size that disagrees is one error line;
#   5. refusals: no --tokenizer-name-or-path, --tokenizer-name-or-path without PretrainedFromHF, a
#      malformed tokenizer.json, --sample-interval with a tokenizer that names no eos_token.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
[ -x ./tokenize_gpt2 ] && [ -x "$KEEL" ] || { fail "./tokenize_gpt2 or $KEEL not built"; finish; }
D="$TMP/bloomish"
./tokenize_gpt2 --save-tokenizer "$D" --pretokenizer bloom || { fail "--save-tokenizer"; finish; }
RUN=("${TINY[@]}" --train-iters 3 --sample-interval 3 --sample-length 12)
HF=(--tokenizer-type PretrainedFromHF --tokenizer-name-or-path "$D")
$KEEL "${RUN[@]}" "${HF[@]}" --metrics-file "$TMP/hf.jsonl" --export-hf "$TMP/export" >"$TMP/hf.log" 2>&1 ||
  { fail "the PretrainedFromHF run failed: $(grep -m1 error "$TMP/hf.log")"; finish; }
$KEEL "${RUN[@]}" --metrics-file "$TMP/gpt2.jsonl" >"$TMP/gpt2.log" 2>&1 || fail "the GPT2BPETokenizer run failed"
grep -q "^note: --tokenizer-name-or-path $D: $D/tokenizer.json, vocabulary 50257, end of document 50256" "$TMP/hf.log" &&
  ok "start-up note: the tokenizer, its vocabulary and EOD" || fail "no tokenizer note: $(grep -m1 tokenizer "$TMP/hf.log")"
grep -q " > padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)" "$TMP/hf.log" && ok "Megatron's padding of its vocabulary" ||
  fail "padded vocab line"
cmp -s <(strip_timing "$TMP/hf.jsonl") <(strip_timing "$TMP/gpt2.jsonl") && ok "the run equals the GPT2BPETokenizer run (JSONL)" ||
  fail "the PretrainedFromHF and GPT2BPETokenizer runs differ"
sample() { sed -n '/^---------------- sample at iteration/,/^------------------------------------------------------/p' "$1"; }
[ -n "$(sample "$TMP/hf.log")" ] && [ "$(sample "$TMP/hf.log")" == "$(sample "$TMP/gpt2.log")" ] &&
  ok "the sample is decoded by the HF tokenizer, equal to the GPT-2 run's" || fail "samples differ or are missing"
for f in tokenizer.json tokenizer_config.json; do
  cmp -s "$D/$f" "$TMP/export/$f" && ok "--export-hf wrote $f as the run's" || fail "--export-hf: $f missing or different"
done
[ ! -e "$TMP/export/vocab.json" ] || fail "--export-hf wrote GPT-2's vocab.json beside tokenizer.json"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); sys.exit(c["eos_token_id"] != 50256)' "$TMP/export/config.json" &&
  ok "config.json eos_token_id is the tokenizer's EOD" || fail "config.json eos_token_id"

# a model id in the cache; a tokenizer with another vocabulary
mkdir -p "$TMP/hf/hub/models--bigscience--toy/refs" "$TMP/hf/hub/models--bigscience--toy/snapshots"
echo rev1 > "$TMP/hf/hub/models--bigscience--toy/refs/main"
python3 test/hf_tokenizer_ref.py make "$TMP/made" data/gpt2 && cp -r "$TMP/made/small" "$TMP/hf/hub/models--bigscience--toy/snapshots/rev1"
HF_HOME="$TMP/hf" $KEEL "${TINY[@]}" --train-iters 1 --tokenizer-type PretrainedFromHF --tokenizer-name-or-path bigscience/toy >"$TMP/small.log" 2>&1
grep -q "^note: --tokenizer-name-or-path bigscience/toy: $TMP/hf/hub/models--bigscience--toy/snapshots/rev1/tokenizer.json, vocabulary 260, end of document none" "$TMP/small.log" &&
  ok "bigscience/toy from HF_HOME's cache: vocabulary 260" || fail "cache / vocabulary: $(grep -m1 -E 'tokenizer|error' "$TMP/small.log")"
grep -qE "^error: .*(above|outside|>=|vocab).*260" "$TMP/small.log" && ok "GPT-2 data refused under the 260-token vocabulary" ||
  fail "GPT-2 data under a 260-token vocabulary: $(grep -m1 error "$TMP/small.log")"
expect_fail 2 "--vocab-size 300: the tokenizer .* has 260 tokens" env HF_HOME="$TMP/hf" $KEEL "${TINY[@]}" --train-iters 1 \
  --tokenizer-type PretrainedFromHF --tokenizer-name-or-path bigscience/toy --vocab-size 300
expect_fail 2 "needs --tokenizer-name-or-path" $KEEL "${TINY[@]}" --train-iters 1 --tokenizer-type PretrainedFromHF
expect_fail 2 "--tokenizer-name-or-path $D applies to --tokenizer-type PretrainedFromHF" $KEEL "${TINY[@]}" --train-iters 1 --tokenizer-name-or-path "$D"
mkdir -p "$TMP/bad"; echo '{"model": [' > "$TMP/bad/tokenizer.json"
expect_fail 1 "tokenizer file '$TMP/bad/tokenizer.json': malformed JSON" $KEEL "${TINY[@]}" --train-iters 1 --tokenizer-type PretrainedFromHF --tokenizer-name-or-path "$TMP/bad"
cp -r "$D" "$TMP/noeos"; echo '{}' > "$TMP/noeos/tokenizer_config.json"
expect_fail 2 "--sample-interval starts each sample at the end-of-document token" $KEEL "${RUN[@]}" --tokenizer-type PretrainedFromHF --tokenizer-name-or-path "$TMP/noeos"
finish
