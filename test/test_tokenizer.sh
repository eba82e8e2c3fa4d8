#!/usr/bin/env bash
# test_tokenizer.sh — ./tokenize_gpt2 (llmc/tokenizer.h) against the npm gpt-3-encoder (Encoder.js).
#
# Checks, each failing the test with a message naming what differed:
#   1. Brown: every document of both splits, keel ids == JS ids (with the 50256 document prefixes),
#      and the shards written by `make data` hold exactly these ids.
#   2. --decode of those ids gives back "<|endoftext|>" + document, byte for byte.
#   3. Hard strings (test/tokenizer_ref.js --cases): keel == JS, and decode(encode(x)) == x.
#   4. Invalid UTF-8: decode(encode(x)) == x (lossless; node would see U+FFFD, so no JS comparison).
#   5. The command line: unknown flag → exit 2, bad ids → exit 1 naming them, -h lists every flag,
#      literal "<|endoftext|>" text is not id 50256, --documents adds one 50256 per document.
# Needs `make tokenize_gpt2 data`. Takes ~10 s (the JS encoder is the slow part).
set -uo pipefail
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
REF="node test/tokenizer_ref.js"
[ -x ./tokenize_gpt2 ] || fail "./tokenize_gpt2 not built (make tokenize_gpt2)"
[ -s data/brown/brown_train.bin ] || fail "data/brown missing (make data)"

one_per_line() { tr -s ' ' '\n' | sed '/^$/d'; }
# Body of an llm.c shard (skip the 1024-byte header) as one id per line.
shard_ids() { od -An -v -t u2 -j 1024 "$1" | one_per_line; }

check_brown_split() {
  local split=$1 docs=(data/brown/docs/$1/*.txt)
  local t0 t1
  t0=$(date +%s.%N)
  ./tokenize_gpt2 --documents "${docs[@]}" > "$TMP/keel_$split.txt" || fail "tokenize_gpt2 failed on Brown $split"
  t1=$(date +%s.%N)
  $REF --documents "${docs[@]}" > "$TMP/js_$split.txt" || fail "the JS reference failed on Brown $split"
  cmp -s "$TMP/keel_$split.txt" "$TMP/js_$split.txt" ||
    fail "Brown $split: keel and JS ids differ (first difference: $(cmp <(one_per_line < "$TMP/keel_$split.txt") <(one_per_line < "$TMP/js_$split.txt") | head -1))"
  cmp -s <(one_per_line < "$TMP/keel_$split.txt") <(shard_ids data/brown/brown_$split.bin) ||
    fail "data/brown/brown_$split.bin does not hold the ids of data/brown/docs/$split (rerun make data)"
  ./tokenize_gpt2 --decode < "$TMP/keel_$split.txt" > "$TMP/decoded_$split" || fail "--decode failed on Brown $split"
  for d in "${docs[@]}"; do printf '<|endoftext|>'; cat "$d"; done > "$TMP/expect_$split"
  cmp -s "$TMP/decoded_$split" "$TMP/expect_$split" || fail "Brown $split: --decode does not give the documents back"
  echo "ok  Brown $split: ${#docs[@]} documents, $(one_per_line < "$TMP/keel_$split.txt" | wc -l) tokens," \
       "$(cat "${docs[@]}" | wc -c) bytes encoded by keel in $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s"
}

# decode(encode(file)) must be the file, byte for byte.
check_round_trip() {
  ./tokenize_gpt2 < "$1" > "$TMP/ids" || fail "$(basename "$1"): encode failed"
  ./tokenize_gpt2 --decode < "$TMP/ids" > "$TMP/back" || fail "$(basename "$1"): decode failed"
  cmp -s "$1" "$TMP/back" || fail "$(basename "$1"): decode(encode(x)) != x"
}

check_hard_cases() {
  $REF --cases "$TMP/cases" || fail "writing the hard cases failed"
  local files=("$TMP"/cases/*.txt) n=0
  $REF --each "${files[@]}" > "$TMP/js_cases" || fail "the JS reference failed on the hard cases"
  for f in "${files[@]}"; do
    n=$((n + 1))
    local keel js
    keel=$(./tokenize_gpt2 < "$f") || fail "$(basename "$f"): tokenize_gpt2 failed"
    js=$(sed -n "${n}p" "$TMP/js_cases")
    [ "$keel" == "$js" ] || fail "$(basename "$f" .txt): keel [$keel] != JS [$js]"
    check_round_trip "$f"
  done
  echo "ok  ${#files[@]} hard strings equal the JS encoder and round-trip"
  local bins=("$TMP"/cases/*.bin)
  for f in "${bins[@]}"; do check_round_trip "$f"; done
  echo "ok  ${#bins[@]} invalid UTF-8 byte strings round-trip"
}

# expect_fail CODE TEXT CMD...: CMD must exit with CODE and print TEXT on stderr.
expect_fail() {
  local code=$1 text=$2
  shift 2
  "$@" > /dev/null 2> "$TMP/err" < "${STDIN:-/dev/null}"
  local rc=$?
  [ $rc -eq "$code" ] || fail "'$*' exited $rc, expected $code"
  grep -qF -- "$text" "$TMP/err" || fail "'$*' did not say '$text' (said: $(head -1 "$TMP/err"))"
}

check_cli() {
  expect_fail 2 "unknown argument '--bogus'" ./tokenize_gpt2 --bogus
  expect_fail 2 "--shard-out needs a value" ./tokenize_gpt2 --shard-out
  expect_fail 2 "--documents needs at least one FILE" ./tokenize_gpt2 --documents
  expect_fail 2 "--decode reads ids from stdin" ./tokenize_gpt2 --decode --shard-out x.bin
  expect_fail 1 "no/such/encoder.json" ./tokenize_gpt2 --encoder no/such/encoder.json
  expect_fail 1 "missing.txt" ./tokenize_gpt2 --documents data/brown/docs/val/ca20.txt missing.txt
  echo '{"a": 0, "b" 1}' > "$TMP/bad.json"
  expect_fail 1 "$TMP/bad.json" ./tokenize_gpt2 --encoder "$TMP/bad.json"
  printf '{"\\ude00": 0}' > "$TMP/lone.json"
  expect_fail 1 "lone low surrogate" ./tokenize_gpt2 --encoder "$TMP/lone.json"
  printf '{"\\ud83d\\ude00": 0}' > "$TMP/astral.json"  # a valid pair, but not a byte-alphabet token
  expect_fail 1 $'"\xf0\x9f\x98\x80" is not spelled' ./tokenize_gpt2 --encoder "$TMP/astral.json"
  # The same vocabulary with every non-ASCII character and "/" escaped, pretty-printed: same ids.
  node -e 'const fs = require("fs"), [src, dst] = process.argv.slice(1);
    const esc = (c) => "\\u" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0");
    fs.writeFileSync(dst, JSON.stringify(JSON.parse(fs.readFileSync(src)), null, 1)
      .replace(/[\u0080-\uffff]/g, esc).replace(/\//g, "\\/"));' data/gpt2/encoder.json "$TMP/escaped.json"
  cmp -s <(./tokenize_gpt2 --encoder "$TMP/escaped.json" < data/brown/val.txt) <(./tokenize_gpt2 < data/brown/val.txt) ||
    fail "an escaped, pretty-printed encoder.json gives other ids"
  echo "15496 50257 995" > "$TMP/bad_id"
  STDIN="$TMP/bad_id" expect_fail 1 "id 50257" ./tokenize_gpt2 --decode
  echo "15496 12x" > "$TMP/junk_id"
  STDIN="$TMP/junk_id" expect_fail 1 "'12x' is not a token id" ./tokenize_gpt2 --decode
  local help
  help=$(./tokenize_gpt2 -h) || fail "-h exited non-zero"
  for flag in --encoder --bpe --decode --shard-out --documents -h; do
    grep -qF -- "$flag" <<< "$help" || fail "-h does not list $flag"
  done
  [ "$(printf 'a<|endoftext|>b' | ./tokenize_gpt2)" == "64 27 91 437 1659 5239 91 29 65" ] ||
    fail "literal <|endoftext|> text must encode as ordinary text"
  printf 'Hello' > "$TMP/d1"; printf ' world' > "$TMP/d2"
  [ "$(./tokenize_gpt2 --documents "$TMP/d1" "$TMP/d2")" == "50256 15496 50256 995" ] ||
    fail "--documents must prefix every document with 50256"
  ./tokenize_gpt2 --shard-out "$TMP/s.bin" --documents "$TMP/d1" "$TMP/d2" || fail "--shard-out failed"
  [ "$(shard_ids "$TMP/s.bin" | tr '\n' ' ')" == "50256 15496 50256 995 " ] || fail "--shard-out wrote wrong ids"
  [ ! -e "$TMP/s.bin.tmp" ] || fail "--shard-out left its .tmp file"
  echo "ok  command line"
}

check_brown_split val
check_brown_split train
check_hard_cases
check_cli
echo "PASS test_tokenizer"
