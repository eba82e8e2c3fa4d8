#!/usr/bin/env bash
# Bad input gets one clear error line and a non-zero exit (2 for the command line, 1 for bad
# files): every malformed-flag class, contradictory flags, corrupt/truncated checkpoints, a changed
# model shape, a changed LR schedule (AnnealingLR rule), bad shards and llm.c files.
source "$(dirname "$0")/lib.sh"
K=$KEEL
# -- flags: unknown, missing value, malformed numbers, choices, ranges, contradictions
expect_fail 2 "unknown flag --no-such-flag" $K "${TINY[@]}" --train-iters 1 --no-such-flag 3
expect_fail 2 "--lr needs a value" $K "${TINY[@]}" --train-iters 1 --lr
expect_fail 2 "--num-layers: '12x' is not an integer" $K "${TINY[@]}" --train-iters 1 --num-layers 12x
expect_fail 2 "--lr: 'abc' is not a finite number" $K "${TINY[@]}" --train-iters 1 --lr abc
expect_fail 2 "--lr: 'nan' is not a finite number" $K "${TINY[@]}" --train-iters 1 --lr nan
expect_fail 2 "--seed: '99999999999999999999' is not an integer" $K "${TINY[@]}" --train-iters 1 --seed 99999999999999999999
expect_fail 2 "--lr-decay-style: 'exp' is not one of" $K "${TINY[@]}" --train-iters 1 --lr-decay-style exp
expect_fail 2 "--override-lr-scheduler: 'maybe' is not true or false" $K "${TINY[@]}" --train-iters 1 --override-lr-scheduler=maybe
expect_fail 2 "--lr: '1e999' is not a finite number" $K "${TINY[@]}" --train-iters 1 --lr 1e999
expect_fail 2 "--lr: 'inf' is not a finite number" $K "${TINY[@]}" --train-iters 1 --lr inf
expect_fail 2 "--lr: '' is not a finite number" $K "${TINY[@]}" --train-iters 1 --lr=
expect_fail 2 "--train-iters must be >= 0" $K "${TINY[@]}" --train-iters -1
expect_fail 2 "--micro-batch-size must be <= 2147483647" $K "${TINY[@]}" --train-iters 1 --micro-batch-size 4294967297
expect_fail 2 "--adam-beta2 must be in" $K "${TINY[@]}" --train-iters 4 --adam-beta2 1.0
expect_fail 2 "unexpected argument 'stray'" $K "${TINY[@]}" --train-iters 1 stray
expect_fail 2 "--micro-batch-size must be >= 1 \(got 0\)" $K "${TINY[@]}" --train-iters 1 --micro-batch-size 0
expect_fail 2 "exactly one of --train-iters and --train-samples" $K "${TINY[@]}" --train-iters 2 --train-samples 8
expect_fail 2 "exactly one of --train-iters and --train-samples" $K "${TINY[@]}"
expect_fail 2 "--global-batch-size 5 is not divisible" $K "${TINY[@]}" --train-iters 1 --global-batch-size 5
expect_fail 2 "--hidden-size 32 is not divisible by --num-attention-heads 3" $K "${TINY[@]}" --train-iters 1 --num-attention-heads 3
expect_fail 2 "--seq-length 16 exceeds --max-position-embeddings 8" $K "${TINY[@]}" --train-iters 1 --max-position-embeddings 8
expect_fail 2 "both override and use-checkpoint" $K "${TINY[@]}" --train-iters 1 --override-lr-scheduler --use-checkpoint-lr-scheduler
expect_fail 2 "min-lr" $K "${TINY[@]}" --train-iters 1 --min-lr 1
expect_fail 2 "lr-warmup-fraction cannot be combined" $K "${TINY[@]}" --train-iters 4 --lr-warmup-fraction 0.1
expect_fail 2 "iteration-based run" $K "${TINY[@]}" --train-iters 4 --lr-warmup-iters 0 --lr-warmup-samples 4
expect_fail 2 "warmup .* must be shorter" $K "${TINY[@]}" --train-iters 2
expect_fail 2 "@/nonexistent: cannot open" $K @/nonexistent
printf -- '--num-layers 2 # a comment\n--lr 1e-3 --bogus\n' >"$TMP/args"
expect_fail 2 "unknown flag --bogus" $K @"$TMP/args"
# -- data
expect_fail 1 "no file matches" $K "${TINY[@]}" --train-iters 4 --train-data-path "$TMP/none_*.bin"
expect_fail 1 "is >= the vocabulary size 1000" $K "${TINY[@]}" --train-iters 4 --vocab-size 1000
printf 'garbage' >"$TMP/bad.bin"
expect_fail 1 "shard '$TMP/bad.bin': truncated header" $K "${TINY[@]}" --train-iters 4 --train-data-path "$TMP/bad.bin"
# -- checkpoints
$K "${TINY[@]}" --train-iters 4 --save "$TMP/ck" >"$TMP/ck.log" 2>&1 || fail "checkpoint run"
expect_fail 1 "model shape changed" $K "${TINY[@]}" --train-iters 8 --num-layers 3 --load "$TMP/ck"
expect_fail 2 "AnnealingLR: class input value 0.002 and checkpoint value 0.003 for learning rate do not match" \
  $K "${TINY[@]}" --train-iters 4 --lr 2e-3 --load "$TMP/ck"
expect_fail 2 "for total number of iterations do not match" $K "${TINY[@]}" --train-iters 8 --load "$TMP/ck"
$K "${TINY[@]}" --train-iters 8 --lr 2e-3 --override-lr-scheduler --load "$TMP/ck" >"$TMP/o.log" 2>&1 \
  && grep -q "overriding learning rate value to 0.002" "$TMP/o.log" && ok "--override-lr-scheduler takes the new LR" || fail "--override-lr-scheduler"
$K "${TINY[@]}" --train-iters 8 --lr 2e-3 --use-checkpoint-lr-scheduler --load "$TMP/ck" --metrics-file "$TMP/u.jsonl" >"$TMP/u.log" 2>&1 \
  && grep -q "using checkpoint value 0.003 for learning rate" "$TMP/u.log" && ok "--use-checkpoint-lr-scheduler keeps the checkpoint's" || fail "--use-checkpoint-lr-scheduler"
cp -r "$TMP/ck" "$TMP/flip"
printf '\x55' | dd of="$TMP/flip/iter_0000004/model.bin" bs=1 seek=1000 conv=notrunc status=none
expect_fail 1 "model.bin': checksum mismatch" $K "${TINY[@]}" --train-iters 4 --load "$TMP/flip"
cp -r "$TMP/ck" "$TMP/trunc"
truncate -s -100 "$TMP/trunc/iter_0000004/optimizer.bin"
expect_fail 1 "optimizer.bin': truncated" $K "${TINY[@]}" --train-iters 4 --load "$TMP/trunc"
cp -r "$TMP/ck" "$TMP/state"
sed -i 's/^consumed_samples = 16/consumed_samples = 17/' "$TMP/state/iter_0000004/state.txt"
expect_fail 1 "state.txt': checksum mismatch" $K "${TINY[@]}" --train-iters 4 --load "$TMP/state"
echo "x" >"$TMP/ck2" && mkdir -p "$TMP/badlatest" && echo "four" >"$TMP/badlatest/latest_checkpointed_iteration.txt"
mkdir -p "$TMP/gone" && echo 7 >"$TMP/gone/latest_checkpointed_iteration.txt"
expect_fail 1 "gone/iter_0000007/state.txt': missing" $K "${TINY[@]}" --train-iters 4 --load "$TMP/gone"
expect_fail 1 "does not hold one iteration number" $K "${TINY[@]}" --train-iters 4 --load "$TMP/badlatest"
# -- llm.c model files
# an llm.c header whose padded vocabulary (2e9) implies a huge file: refused before allocating
node -e "
const b = Buffer.alloc(1024 + 64);
[20240326, 3, 16, 50257, 2, 2, 32, 2000000000].forEach((v, i) => b.writeInt32LE(v, 4 * i));
require('fs').writeFileSync(process.argv[1], b);" "$TMP/fake_llmc.bin"
expect_fail 1 "bytes, but its header's shape needs" $K "${TINY[@]}" --train-iters 4 --load-llmc "$TMP/fake_llmc.bin"
expect_fail 2 "validation set holds" $K "${TINY[@]}" --train-iters 4 --eval-iters 100000
expect_fail 1 "llm.c model file '$TMP/bad.bin': truncated header" $K "${TINY[@]}" --train-iters 4 --load-llmc "$TMP/bad.bin"
# instability knobs: ranges and contradictions
expect_fail 2 "hidden-dropout" $KEEL "${TINY[@]}" --train-iters 3 --hidden-dropout 1.0
expect_fail 2 "attention-dropout" $KEEL "${TINY[@]}" --train-iters 3 --attention-dropout -0.1
expect_fail 2 "--fp16, --bf16 and --fp32 are mutually exclusive" $KEEL "${TINY[@]}" --train-iters 3 --fp16 --bf16
expect_fail 2 "mutually exclusive" $KEEL "${TINY[@]}" --train-iters 3 --bf16 --fp32
expect_fail 2 "the CPU trainer computes in fp32" $KEEL "${TINY[@]}" --train-iters 3 --bf16
expect_fail 2 "min-loss-scale" $KEEL "${TINY[@]}" --train-iters 3 --fp16 --initial-loss-scale 1 --min-loss-scale 2
expect_fail 2 "finetune needs --load" $KEEL "${TINY[@]}" --train-iters 3 --finetune
expect_fail 2 "export-llmc.*normformer" $KEEL "${TINY[@]}" --train-iters 3 --normformer --export-llmc "$TMP/x.bin"
expect_fail 2 "position-embedding-init" $KEEL "${TINY[@]}" --train-iters 3 --position-embedding-type alibi --position-embedding-init sinusoidal
expect_fail 2 "activation.*not one of" $KEEL "${TINY[@]}" --train-iters 3 --activation swish
expect_fail 2 "rampup-batch-size takes 3" $KEEL "${TINY[@]}" --train-samples 40 --rampup-batch-size 2 2
expect_fail 2 "skip-train-iteration-range" $KEEL "${TINY[@]}" --train-iters 3 --skip-train-iteration-range 5-x
expect_fail 2 "gradient-predivide-factor" $KEEL "${TINY[@]}" --train-iters 3 --gradient-predivide-factor 0
# 8-bit Adam
expect_fail 2 "optimizer: 'sgd' is not one of adam\|adam8bit" $KEEL "${TINY[@]}" --train-iters 3 --optimizer sgd
expect_fail 2 "adam8bit-block-size must be a power of two" $KEEL "${TINY[@]}" --train-iters 3 --optimizer adam8bit --adam8bit-block-size 300
expect_fail 2 "adam8bit-block-size must be <= 2048" $KEEL "${TINY[@]}" --train-iters 3 --optimizer adam8bit --adam8bit-block-size 4096
expect_fail 2 "adam8bit-percentile-clipping must be <= 100" $KEEL "${TINY[@]}" --train-iters 3 --optimizer adam8bit --adam8bit-percentile-clipping 101
expect_fail 2 "adam8bit-percentile-clipping applies to --optimizer adam8bit" $KEEL "${TINY[@]}" --train-iters 3 --adam8bit-percentile-clipping 5
expect_fail 2 "adam8bit-min-size must be >= 0" $KEEL "${TINY[@]}" --train-iters 3 --optimizer adam8bit --adam8bit-min-size -1
finish
