#!/usr/bin/env bash
# test_preprocess_data.sh — ./preprocess_data (dev/preprocess_data.cpp) against an independent reference of
# Megatron-DeepSpeed's tools/preprocess_data.py: test/hf_tokenizer_ref.py preprocess (Python's json and
# text-mode lines, the reference tokenizer, test/megatron_ref.py's MMapIndexedDataset writer).
#   1. GPT2BPETokenizer, two keys, --append-eod, on JSON lines with escapes, surrogate pairs, an empty
#      text (left out), extra keys, \r\n and \r line ends, and the Brown validation documents: .bin/.idx
#      byte-identical to the reference, with --workers 1 and --workers 3 (batches of lines cross threads);
#   2. PretrainedFromHF (BLOOM's pre-tokenizer, </s> as eos_token, Megatron's <extra_id_NN> tokens in
#      the text): byte-identical, uint16;
#   3. a vocabulary of 65,500 tokens: int32 (Megatron's best_fitting_dtype), byte-identical;
#   4. progress lines on stderr every --log-interval documents, a summary with throughput;
#   5. refusals naming FILE:LINE (malformed JSON, a blank line, a missing key, a non-string value,
#      invalid UTF-8) and bad command lines; no output file (final or .tmp) left after a refusal.
# Needs `make preprocess_data` and data/ (make data). Takes ~20 s.
source "$(dirname "$0")/lib.sh"
[ -x ./preprocess_data ] || { fail "./preprocess_data not built"; finish; }
REF="python3 test/hf_tokenizer_ref.py"
$REF make "$TMP/tok" data/gpt2 || { fail "building the tokenizer directories"; finish; }
python3 - "$TMP/in.jsonl" data/brown/docs/val <<'PY' || fail "writing the input"
import json, os, sys
out, docs = sys.argv[1], sys.argv[2]
lines = [
    '{"text": "Hello, world!", "title": "One", "meta": {"n": [1, 2]}}',
    '{"title": "\\u00e9t\\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ \\/", "text": "tab\\there\\nnew line  two  spaces"}',
    '{"text": "", "title": "empty text: left out of text, kept in title"}',
    '  {"text": "leading space in the line", "title": "x</s>y <extra_id_03> z"}  ',
    '{"text": "a \\u3000 b \\u00a0 c <|endoftext|>", "title": ""}',
]
with open(out, "w", encoding="utf-8", newline="") as f:
    for k, l in enumerate(lines):
        f.write(l + ("\r\n" if k == 1 else "\r" if k == 2 else "\n"))
    for name in sorted(os.listdir(docs)):
        text = open(os.path.join(docs, name), encoding="utf-8").read()
        f.write(json.dumps({"text": text, "title": name}) + "\n")
PY
same_files() {  # same_files A B KEYS: PREFIX_KEY_document.{bin,idx} byte-identical
  local k e
  for k in ${3//,/ }; do for e in bin idx; do
    cmp -s "$1_${k}_document.$e" "$2_${k}_document.$e" || { echo "$1_${k}_document.$e differs from $2's"; return 1; }
  done; done
}
dtype_of() { od -An -t u1 -j 17 -N 1 "$1" | tr -d ' '; }

# ---- 1. GPT-2 ----
$REF preprocess "$TMP/tok/openai" "$TMP/in.jsonl" "$TMP/ref_gpt2" text,title 50256 --append-eod || fail "the reference failed"
for w in 1 3; do
  ./preprocess_data --input "$TMP/in.jsonl" --output-prefix "$TMP/keel_gpt2_w$w" --json-keys text title --tokenizer-type GPT2BPETokenizer \
    --vocab-file data/gpt2/encoder.json --merge-file data/gpt2/vocab.bpe --append-eod --workers $w --log-interval 10 \
    >"$TMP/w$w.log" 2>"$TMP/w$w.err" || { fail "preprocess_data --workers $w: $(cat "$TMP/w$w.err")"; continue; }
  why=$(same_files "$TMP/keel_gpt2_w$w" "$TMP/ref_gpt2" text,title) && ok "GPT2BPETokenizer --workers $w: byte-identical to the reference" || fail "$why"
done
[ "$(dtype_of "$TMP/keel_gpt2_w1_text_document.idx")" = 8 ] && ok "GPT-2's vocabulary: uint16 (code 8)" || fail "dtype code $(dtype_of "$TMP/keel_gpt2_w1_text_document.idx")"
grep -q "^Processed 20 documents (.* docs/s, .* MB/s)." "$TMP/w1.err" && ok "progress every 10 documents on stderr" || fail "no progress line: $(head -2 "$TMP/w1.err")"
grep -qE "^30 lines, .* MB in .* s: .* docs/s, .* MB/s$" "$TMP/w1.log" && ok "summary: $(tail -1 "$TMP/w1.log")" || fail "summary: $(tail -1 "$TMP/w1.log")"
grep -q "_text_document.bin: 29 documents" "$TMP/w1.log" && grep -q "_title_document.bin: 29 documents" "$TMP/w1.log" &&
  ok "empty texts left out (29 of 30 in each key)" || fail "document counts: $(grep documents, "$TMP/w1.log")"
# without --append-eod the reference differs (negative control of the comparison)
./preprocess_data --input "$TMP/in.jsonl" --output-prefix "$TMP/noeod" --tokenizer-type GPT2BPETokenizer >/dev/null 2>&1
same_files "$TMP/noeod" "$TMP/ref_gpt2" text >/dev/null && fail "the comparison cannot see --append-eod" || ok "negative control: no --append-eod differs"

# ---- 2. PretrainedFromHF ----
$REF preprocess "$TMP/tok/bloom" "$TMP/in.jsonl" "$TMP/ref_bloom" text,title 50259 --append-eod --megatron-extras || fail "the reference failed (bloom)"
./preprocess_data --input "$TMP/in.jsonl" --output-prefix "$TMP/keel_bloom" --json-keys text title --tokenizer-type PretrainedFromHF \
  --tokenizer-name-or-path "$TMP/tok/bloom" --append-eod --workers 2 >"$TMP/bloom.log" 2>&1 || fail "preprocess_data PretrainedFromHF: $(tail -1 "$TMP/bloom.log")"
why=$(same_files "$TMP/keel_bloom" "$TMP/ref_bloom" text,title) && ok "PretrainedFromHF (BLOOM's Split, </s>, <extra_id_03>): byte-identical" || fail "$why"

# ---- 3. int32 ----
python3 - "$TMP/tok/small" "$TMP/big" <<'PY'
import json, os, sys
t = json.load(open(os.path.join(sys.argv[1], "tokenizer.json")))
v = t["model"]["vocab"]
for k in range(65500 - len(v)):
    v["\u0100dummy%d" % k] = len(v)
os.makedirs(sys.argv[2]); json.dump(t, open(os.path.join(sys.argv[2], "tokenizer.json"), "w"))
json.dump({"eos_token": "\u0100dummy7"}, open(os.path.join(sys.argv[2], "tokenizer_config.json"), "w"))
PY
head -5 "$TMP/in.jsonl" > "$TMP/five.jsonl"
$REF preprocess "$TMP/big" "$TMP/five.jsonl" "$TMP/ref_big" text "$((260 + 7))" --append-eod --megatron-extras || fail "the reference failed (big)"
./preprocess_data --input "$TMP/five.jsonl" --output-prefix "$TMP/keel_big" --tokenizer-type PretrainedFromHF --tokenizer-name-or-path "$TMP/big" \
  --append-eod >/dev/null 2>"$TMP/big.err" || fail "preprocess_data (big): $(cat "$TMP/big.err")"
why=$(same_files "$TMP/keel_big" "$TMP/ref_big" text) && [ "$(dtype_of "$TMP/keel_big_text_document.idx")" = 4 ] &&
  ok "a 65,500-token vocabulary: int32 (code 4), byte-identical" || fail "int32: $why dtype $(dtype_of "$TMP/keel_big_text_document.idx")"

# ---- 5. refusals ----
bad() {  # bad NAME CONTENT PATTERN: the line-3 defect must be refused naming FILE:3
  printf '{"text": "a"}\n{"text": "b"}\n%b\n{"text": "d"}\n' "$2" > "$TMP/$1.jsonl"
  expect_fail 1 "$TMP/$1.jsonl:3: $3" ./preprocess_data --input "$TMP/$1.jsonl" --output-prefix "$TMP/out_$1" --tokenizer-type GPT2BPETokenizer
  ls "$TMP/out_$1"_text_document.* >/dev/null 2>&1 && fail "$1: output files left behind: $(ls "$TMP/out_$1"_text_document.*)"
}
bad malformed '{"text": "c"' "malformed JSON: byte 12"
bad blank '' "malformed JSON: byte 0: unexpected end of input"
bad nokey '{"body": "c"}' "no key 'text'"
bad notstring '{"text": 3}' "key 'text' is not a string"
bad notobject '["text"]' "not a JSON object"
bad utf8 '{"text": "\xff"}' "not valid UTF-8"
expect_fail 2 "--split-sentences is not supported" ./preprocess_data --input "$TMP/five.jsonl" --output-prefix "$TMP/o" --tokenizer-type GPT2BPETokenizer --split-sentences
expect_fail 2 "--dataset-impl lazy: keel writes mmap" ./preprocess_data --input "$TMP/five.jsonl" --output-prefix "$TMP/o" --tokenizer-type GPT2BPETokenizer --dataset-impl lazy
expect_fail 2 "--tokenizer-type BertWordPieceCase: GPT2BPETokenizer or PretrainedFromHF" ./preprocess_data --input "$TMP/five.jsonl" --output-prefix "$TMP/o" --tokenizer-type BertWordPieceCase
expect_fail 2 "--workers '0': expected a positive integer" ./preprocess_data --input "$TMP/five.jsonl" --output-prefix "$TMP/o" --tokenizer-type GPT2BPETokenizer --workers 0
expect_fail 2 "--append-eod: the tokenizer names no end-of-document token" ./preprocess_data --input "$TMP/five.jsonl" --output-prefix "$TMP/o" \
  --tokenizer-type PretrainedFromHF --tokenizer-name-or-path "$TMP/tok/small" --append-eod
expect_fail 1 "no/such.jsonl" ./preprocess_data --input no/such.jsonl --output-prefix "$TMP/o" --tokenizer-type GPT2BPETokenizer
finish
