#!/usr/bin/env bash
# test_hf_tokenizer.sh — Hugging Face tokenizer.json (llmc/hf_tokenizer.h) through ./tokenize_gpt2 --tokenizer,
# against test/hf_tokenizer_ref.py, an independent Python reference of the `tokenizers` semantics.
#
# The tokenizer directories are built here from OpenAI's GPT-2 files (data/gpt2): gpt2/ (ByteLevel with
# its regex, "a b" merges, added tokens special and not, single_word, lstrip, rstrip, one a prefix of
# another), bloom/ (BLOOM's Split + ByteLevel(use_regex false), [a, b] merges, </s> as eos_token in
# special_tokens_map.json), prefix/ (add_prefix_space), small/ (a 260-token vocabulary, ignore_merges),
# bloomsmall/ (BLOOM's Split over a vocabulary where "a" merges with every character the Split cuts at).
# Checks:
#   1. hard strings (test/tokenizer_ref.js's, and HF-specific ones: added tokens inside text, BLOOM's
#      punctuation, U+0085 / U+FEFF, whose \s differs from JS's): keel ids == the reference's, in
#      every directory; decode(encode(x)) == x where no prefix space is added and no lstrip/rstrip takes spaces;
#   2. ids written by hand from the format's rules (independent of both programs);
#   3. gpt2/ and tokenize_gpt2 --save-tokenizer's file on the Brown validation text == tokenize_gpt2 with
#      OpenAI's files (checked against JS); --save-tokenizer --pretokenizer bloom is among 1.'s directories;
#   4. the HF cache: HF_HOME, TRANSFORMERS_CACHE, refs/main → snapshot; a model id missing names the path;
#   5. --documents puts the eos_token (</s>) before every document;
#   6. refusals: one line naming the file and the key, exit 1.
# Needs `make tokenize_gpt2` and data/gpt2 (make data). Takes ~15 s.
source "$(dirname "$0")/lib.sh"
[ -x ./tokenize_gpt2 ] || { fail "./tokenize_gpt2 not built"; finish; }
[ -s data/gpt2/encoder.json ] || { fail "data/gpt2 missing (make data)"; finish; }
REF="python3 test/hf_tokenizer_ref.py"
D="$TMP/tok"
$REF make "$D" data/gpt2 || { fail "building the tokenizer directories"; finish; }
# and keel's own writer (tokenize_gpt2 --save-tokenizer): GPT-2's files in HF's format, BLOOM's pre-tokenizer
./tokenize_gpt2 --save-tokenizer "$D/saved_bloom" --pretokenizer bloom && ./tokenize_gpt2 --save-tokenizer "$D/saved_gpt2" ||
  fail "tokenize_gpt2 --save-tokenizer failed"

# ---- 1. hard strings against the reference ----
node test/tokenizer_ref.js --cases "$TMP/cases" || fail "writing the JS hard strings"
rm -f "$TMP/cases/unicode_boundaries.txt"  # every range edge of node's Unicode 17: Python's unicodedata is older
hf_case() { printf '%b' "$2" > "$TMP/cases/hf_$1.txt"; }
hf_case added_inside 'x<|endoftext|>y <|endoftext|> z<|endoftext|><|endoftext|>\n<|end <|endo'
hf_case single_word '[SW] a[SW] [SW]b ([SW]) é[SW] 中[SW]文 _[SW] [SW]'
hf_case strip 'a  <L>  b  <R>  c\t<L>\n<R>\n\n<L><R> <R><L>'
hf_case prefix_token 'say hello hello  hello\thello hello world hello worlds'
hf_case bloom_specials 'x</s>y <s> <pad><unk></s>\n</s>'
hf_case bloom_stops 'a(a)a|a.a,a!a?a…a。a，a、a।a۔a،a a\ta\xc2\xa0a\xe3\x80\x80a\xc2\x85a'
hf_case bloom_punct 'a.b,c!d?e…f。g，h、i।j۔k،l (m) n|o [p] {q} "r" '"'"'s'"'"' 1.5 3,000'
hf_case odd_space 'a\xc2\x85b \xef\xbb\xbfc  \xc2\x85 d\xe2\x80\xa8e'
hf_case mixed_runs 'tab\t\tx  \n  y.  z ,, w!! ?? ...end'
files=("$TMP"/cases/*.txt)
for d in gpt2 bloom prefix small bloomsmall saved_bloom; do
  $REF encode "$D/$d" "${files[@]}" > "$TMP/ref_$d" || { fail "the reference failed on $d"; continue; }
  n=0; bad=0
  for f in "${files[@]}"; do
    n=$((n + 1))
    keel=$(./tokenize_gpt2 --tokenizer "$D/$d" < "$f") || { fail "$d $(basename "$f"): tokenize_gpt2 failed"; bad=1; continue; }
    [ "$keel" == "$(sed -n "${n}p" "$TMP/ref_$d")" ] || { fail "$d $(basename "$f" .txt): keel [$keel] != reference [$(sed -n "${n}p" "$TMP/ref_$d")]"; bad=1; }
    if [ "$d" != prefix ] && ! [ "$d" == gpt2 -a "$(basename "$f")" == hf_strip.txt ]; then  # prefix space, stripped spaces
      printf '%s' "$keel" | ./tokenize_gpt2 --tokenizer "$D/$d" --decode > "$TMP/back" && cmp -s "$f" "$TMP/back" ||
        { fail "$d $(basename "$f"): decode(encode(x)) != x"; bad=1; }
    fi
  done
  [ $bad -eq 0 ] && ok "$d: ${#files[@]} hard strings equal the reference"
done

# ---- 2. ids by hand ----
by_hand() {  # by_hand DIR TEXT IDS WHY
  local got; got=$(printf '%b' "$2" | ./tokenize_gpt2 --tokenizer "$D/$1")
  [ "$got" == "$3" ] && ok "by hand, $1: $4" || fail "by hand, $1: $4: '$2' gave [$got], want [$3]"
}
# GPT-2 ids: Hello 15496, "," 11, " world" 995, "!" 0, foo 21943, bar 5657, "(" 7, ")" 8, x 87, y 88
by_hand bloom 'Hello, world!' "15496 11 995 0" "matches and punctuation gaps"
by_hand bloom 'foo(bar)' "21943 7 5657 8" "( and ) are in the Split's class"
by_hand bloom 'x</s>y' "87 50259 88" "a special token inside a word"
by_hand gpt2 'x<|endoftext|>y' "87 50256 88" "<|endoftext|> is its id, not 7 tokens"
by_hand gpt2 'x<|endy' "87 50260 88" "<|end (an added token) inside text"
by_hand gpt2 'x [SW] y' "87 220 50257 331" "a single_word token between spaces"
by_hand gpt2 'x[SW]y' "87 58 17887 60 88" "a single_word token inside a word stays text"
by_hand gpt2 'x <L> y' "87 50258 331" "lstrip takes the space before"
by_hand gpt2 'x <R> y' "87 220 50259 88" "rstrip takes the space after"
by_hand small 'abc' "258" "ignore_merges: a piece that is a token"
by_hand small 'abcabc' "97 257 97 257" "BPE by rank: b c (rank 0) before a b"
by_hand small 'x a' "120 259" "' a' merged by the third merge"
by_hand prefix 'Hello' "18435" "add_prefix_space: ' Hello'"
by_hand gpt2 'say hello world' "16706 50262" "the longest added token at a position"
cp -r "$D/gpt2" "$D/gpt2_aps"; echo '{"eos_token": "<|endoftext|>", "add_prefix_space": true}' > "$D/gpt2_aps/tokenizer_config.json"
by_hand gpt2_aps 'Hello' "18435" "tokenizer_config.json's add_prefix_space overrides ByteLevel's"
by_hand bloomsmall 'a|a' "97 124 97" "| ends a piece though a merge would join it"

# ---- 3. Brown: the same ids as OpenAI's files ----
cmp -s <(./tokenize_gpt2 --tokenizer "$D/gpt2" < data/brown/val.txt) <(./tokenize_gpt2 < data/brown/val.txt) &&
  ok "gpt2 tokenizer.json on Brown validation == OpenAI's files" || fail "gpt2 tokenizer.json and OpenAI's files differ on Brown validation"
cmp -s <(./tokenize_gpt2 --tokenizer "$D/saved_gpt2" < data/brown/val.txt) <(./tokenize_gpt2 < data/brown/val.txt) &&
  ok "--save-tokenizer's GPT-2 tokenizer.json on Brown validation == OpenAI's files" || fail "--save-tokenizer's tokenizer.json differs on Brown validation"

# ---- 4. the HF cache ----
mkdir -p "$TMP/hf/hub/models--test-org--tiny/refs" "$TMP/hf/hub/models--test-org--tiny/snapshots"
printf 'abc123\n' > "$TMP/hf/hub/models--test-org--tiny/refs/main"
cp -r "$D/bloom" "$TMP/hf/hub/models--test-org--tiny/snapshots/abc123"
want=$(printf 'x</s>y' | ./tokenize_gpt2 --tokenizer "$D/bloom")
got=$(printf 'x</s>y' | HF_HOME="$TMP/hf" ./tokenize_gpt2 --tokenizer test-org/tiny) && [ "$got" == "$want" ] &&
  ok "HF_HOME: test-org/tiny → snapshots/abc123" || fail "HF_HOME cache lookup: [$got]"
got=$(printf 'x</s>y' | HF_HOME=/nonexistent TRANSFORMERS_CACHE="$TMP/hf/hub" ./tokenize_gpt2 --tokenizer test-org/tiny) && [ "$got" == "$want" ] &&
  ok "TRANSFORMERS_CACHE takes precedence over HF_HOME" || fail "TRANSFORMERS_CACHE lookup: [$got]"
expect_fail 1 "test-org/other: not a directory, and not in the HF cache \(no $TMP/hf/hub/models--test-org--other/refs/main" \
  env HF_HOME="$TMP/hf" ./tokenize_gpt2 --tokenizer test-org/other
printf 'def456\n' > "$TMP/hf/hub/models--test-org--tiny/refs/main"
expect_fail 1 "names revision 'def456'" env HF_HOME="$TMP/hf" ./tokenize_gpt2 --tokenizer test-org/tiny

# ---- 5. documents ----
printf 'Hello' > "$TMP/d1"; printf 'x' > "$TMP/d2"
[ "$(./tokenize_gpt2 --tokenizer "$D/bloom" --documents "$TMP/d1" "$TMP/d2")" == "50259 15496 50259 87" ] &&
  ok "--documents: eos_token </s> (special_tokens_map.json) before each document" || fail "--documents with bloom/"
expect_fail 1 "names no end-of-document token" ./tokenize_gpt2 --tokenizer "$D/small" --documents "$TMP/d1"

# ---- 6. refusals ----
refuse() {  # refuse PYTHON_EDIT PATTERN: small/ edited by PYTHON_EDIT (on t, the JSON) must be refused naming PATTERN
  rm -rf "$TMP/bad"; cp -r "$D/small" "$TMP/bad"
  python3 - "$TMP/bad/tokenizer.json" "$1" <<'PY' || { fail "edit failed: $1"; return; }
import json, sys
t = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(t, open(sys.argv[1], "w"))
PY
  expect_fail 1 "tokenizer file '$TMP/bad/tokenizer.json': $2" ./tokenize_gpt2 --tokenizer "$TMP/bad"
}
refuse 't["normalizer"] = {"type": "NFC"}' 'normalizer "NFC" is not supported'
refuse 't["pre_tokenizer"] = {"type": "Metaspace", "replacement": "_"}' 'pre_tokenizer "Metaspace" is not supported'
refuse 't["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "Isolated", "invert": False}, {"type": "ByteLevel", "use_regex": False, "add_prefix_space": False}]}' \
  'pre_tokenizer.pretokenizers\[0\].pattern is not supported'
refuse 't["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": " ?[^(\\s|[.,!?…。，、।۔،])]+"}, "behavior": "Removed", "invert": False}, {"type": "ByteLevel", "use_regex": False, "add_prefix_space": False}]}' \
  'pre_tokenizer.pretokenizers\[0\].behavior must be "Isolated"'
refuse 't["model"]["type"] = "WordPiece"' 'model.type "WordPiece" is not supported'
refuse 't["model"]["dropout"] = 0.1' 'model.dropout is not supported'
refuse 't["model"]["continuing_subword_prefix"] = "##"' 'model.continuing_subword_prefix "##" is not supported'
refuse 't["model"]["merges"].append("zz q")' 'model.merges\[3\] "zz q" merges tokens missing from model.vocab'
refuse 't["model"]["merges"].append(7)' 'model.merges\[3\] is neither'
refuse 'del t["model"]["vocab"]["A"]' 'model.vocab "[^"]+": id [0-9]+ is repeated or outside'
refuse 'v = t["model"]["vocab"]; del v["A"]; v["A2"] = 65' 'model.vocab has no token for byte 0x41'
refuse 't["decoder"] = None' 'decoder null is not supported'
refuse 't["post_processor"] = {"type": "TemplateProcessing", "single": []}' 'post_processor "TemplateProcessing" is not supported'
refuse 't["pre_tokenizer"]["use_regex"] = "yes"' 'pre_tokenizer.use_regex must be a boolean, not a string'
refuse 't["added_tokens"] = [{"id": 999, "content": "<x>"}]' 'added_tokens\[0\].id must be a token id up to 260'
rm -rf "$TMP/bad"; cp -r "$D/small" "$TMP/bad"; printf '{"model": {' > "$TMP/bad/tokenizer.json"
expect_fail 1 "tokenizer file '$TMP/bad/tokenizer.json': malformed JSON: byte 11" ./tokenize_gpt2 --tokenizer "$TMP/bad"
rm "$TMP/bad/tokenizer.json"
expect_fail 1 "tokenizer directory '$TMP/bad' has no tokenizer.json" ./tokenize_gpt2 --tokenizer "$TMP/bad"
cp "$D/small/tokenizer.json" "$TMP/bad/"; echo '{"eos_token": "</nope>"}' > "$TMP/bad/tokenizer_config.json"
expect_fail 1 'eos_token "</nope>" is not a token' ./tokenize_gpt2 --tokenizer "$TMP/bad"
finish
