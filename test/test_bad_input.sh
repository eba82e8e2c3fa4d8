#!/usr/bin/env bash
# Bad input gets one clear error line and a non-zero exit (2 for the command line, 1 for bad
# files): every malformed-flag class, contradictory flags, corrupt/truncated checkpoints, a changed
# model shape, a changed LR schedule (AnnealingLR rule), bad shards and llm.c files. Sizes
# whose products would overflow their types (each used to crash, hang, or wrap into a misleading
# message), a directory or a negative token count as a shard, a sequence too long for the data
# before any allocation, a model larger than the machine's memory refused before allocating, non-finite llm.c weights; a validation set too small for --eval-iters
# matters only when validation runs; the test-only hooks are read in one place; an @file or DeepSpeed
# config past 1 MiB (/dev/zero) is refused, not read into memory. (Checkpoint
# directories: test_hardening.)
source "$(dirname "$0")/lib.sh"
K=$KEEL
# -- flags: unknown, missing value, malformed numbers, choices, ranges, contradictions
expect_fail 2 "unknown flag --no-such-flag" $K "${TINY[@]}" --train-iters 1 --no-such-flag 3
expect_fail 2 "--lr needs a value" $K "${TINY[@]}" --train-iters 1 --lr
# files the flags name are read up to 1 MiB: an endless one is refused, not read into memory
expect_fail 2 "@/dev/zero: larger than 1 MiB" $K "${TINY[@]}" --train-iters 1 @/dev/zero
expect_fail 2 "--deepspeed_config /dev/zero: larger than 1 MiB" $K "${TINY[@]}" --train-iters 1 --deepspeed --deepspeed_config /dev/zero
expect_fail 2 "--num-layers: '12x' is not an integer" $K "${TINY[@]}" --train-iters 1 --num-layers 12x
expect_fail 2 "--lr: 'abc' is not a finite number" $K "${TINY[@]}" --train-iters 1 --lr abc
expect_fail 2 "--lr: 'nan' is not a finite number" $K "${TINY[@]}" --train-iters 1 --lr nan
expect_fail 2 "--grad-bucket-mb must be in" $K "${TINY[@]}" --train-iters 1 --grad-bucket-mb -1
expect_fail 2 "--classifier-chunk-rows must be >= 0" $K "${TINY[@]}" --train-iters 1 --classifier-chunk-rows -1
expect_fail 2 "--gelu-fusion: .maybe. is not one of auto.on.off" $K "${TINY[@]}" --train-iters 1 --gelu-fusion maybe
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
$K "${TINY[@]}" --train-iters 4 --save "$TMP/ck" --export-llmc "$TMP/ck.llmc" >"$TMP/ck.log" 2>&1 || fail "checkpoint run"
expect_fail 1 "model shape changed" $K "${TINY[@]}" --train-iters 8 --num-layers 3 --load "$TMP/ck"
expect_fail 2 "AnnealingLR: class input value 0.002 and checkpoint value 0.003 for learning rate do not match" \
  $K "${TINY[@]}" --train-iters 4 --lr 2e-3 --load "$TMP/ck"
expect_fail 2 "for decay samples \(the schedule.s length\) do not match" $K "${TINY[@]}" --train-iters 8 --load "$TMP/ck"
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
# -- sizes: every product of the flags fits its type, checked before allocation, the flag named
expect_fail 2 "--global-batch-size 8589934592: 4294967296 micro-batches of 2 samples per iteration .*, more than 65536" \
  $K "${TINY[@]}" --train-iters 4 --global-batch-size 8589934592  # (was SIGSEGV: (int) 2^32 accumulation steps = 0 slots)
expect_fail 2 "--global-batch-size 2147483648: 1073741824 micro-batches" \
  timeout 20 $K "${TINY[@]}" --train-iters 4 --eval-interval 0 --valid-data-path "" --global-batch-size 2147483648  # (was a hang)
expect_fail 2 "--make-vocab-size-divisible-by 2147483647: V \+ multiple - 1 .* more than 2\^31-1" \
  $K "${TINY[@]}" --train-iters 4 --make-vocab-size-divisible-by 2147483647  # (was SIGSEGV: a negative padded vocabulary)
expect_fail 2 "--hidden-size 2147483647: the parameter count overflows int64" \
  $K "${TINY[@]}" --train-iters 4 --hidden-size 2147483647 --num-attention-heads 1  # (was a wrapped byte count)
expect_fail 2 "--train-iters 4611686018427387904: the run's token count .* overflows int64" \
  $K "${TINY[@]}" --train-iters 4611686018427387904  # (was "the LR decay span must be > 0")
expect_fail 2 "--seq-length 536870911: the attention probabilities' element count L x B x NH x T x T is [0-9]+, more than 2\^58" \
  $K "${TINY[@]}" --train-iters 4 --micro-batch-size 1 --seq-length 536870911
expect_fail 2 "--eval-iters 4611686018427387904: the count of one evaluation's micro-batches overflows" \
  $K "${TINY[@]}" --train-iters 4 --eval-iters 4611686018427387904
expect_fail 2 "--micro-batch-size must be >= 1" $K --dry-run --micro-batch-size 0  # (was SIGFPE)
expect_fail 2 "--data-parallel-size must be <= 65536" $K --dry-run --data-parallel-size 2147483647  # (was std::bad_alloc)
expect_fail 2 "--tensor-model-parallel-size must be <= 2147483647" \
  $K "${TINY[@]}" --train-iters 4 --tensor-model-parallel-size 4294967296 --pipeline-model-parallel-size 4294967296  # (was SIGFPE: TP x PP wrapped to 0)
expect_fail 2 "--hidden-size 2147483647: the parameter count overflows int64" $K --dry-run --hidden-size 2147483647 --num-attention-heads 1
# -- data
expect_fail 1 "shard 'data/brown/docs': is a directory" $K "${TINY[@]}" --train-iters 4 --train-data-path data/brown/docs
python3 -c "import struct, sys; open(sys.argv[1], 'wb').write(struct.pack('<3i', 20240520, 1, -5) + bytes(1012 + 64))" "$TMP/neg.bin"
expect_fail 1 "shard '$TMP/neg.bin': the header's token count is negative \(-5\)" $K "${TINY[@]}" --train-iters 4 --train-data-path "$TMP/neg.bin"
expect_fail 1 "the shards hold no sample of 3000001 tokens" $K "${TINY[@]}" --train-iters 4 --seq-length 3000000  # (was out of memory)
# a model no machine holds is refused before anything is allocated, naming the figure (it used to ask the
# allocator for 48 PB: an AddressSanitizer report under make test-sanitize)
expect_fail 1 "this run needs [0-9.e+]+ GiB \(weights, gradients, optimizer state, activations\), more than this machine's memory: [0-9.]+ GiB" \
  $K "${TINY[@]}" --train-iters 4 --num-layers 100000 --hidden-size 100000 --num-attention-heads 10
$K "${TINY[@]}" --train-iters 3 --eval-interval 0 --eval-iters 100000 >"$TMP/noval.log" 2>&1 \
  && ok "--eval-iters beyond the validation set with validation off: trains" || fail "validation off: $(grep error "$TMP/noval.log")"
# -- llm.c weights that are not finite (every update used to be skipped, exit 0)
cp "$TMP/ck.llmc" "$TMP/nan.llmc" && printf '\x00\x00\xc0\x7f' | dd of="$TMP/nan.llmc" bs=1 seek=$((1024 + 4 * 5)) conv=notrunc status=none
expect_fail 1 "llm.c model file '$TMP/nan.llmc': tensor wte holds nan at element 5" $K "${TINY[@]}" --train-iters 4 --load-llmc "$TMP/nan.llmc"
cp "$TMP/ck.llmc" "$TMP/inf.llmc" && printf '\x00\x00\x80\x7f' | dd of="$TMP/inf.llmc" bs=1 seek=$(($(stat -c %s "$TMP/ck.llmc") - 4)) conv=notrunc status=none
expect_fail 1 "tensor lnfb holds inf at element 31" $K "${TINY[@]}" --train-iters 4 --load-llmc "$TMP/inf.llmc"
# -- the test-only environment hooks are read in one place, once (llmc/test_hooks.h), not in the loop
hooks=$(grep -n 'getenv("KEEL_' train_gpt.cu llmc/*.h llmc/*/*.h* | grep -v '^llmc/test_hooks.h:')
[ -z "$hooks" ] && ok "KEEL_* hooks read only by llmc/test_hooks.h" || fail "hooks read elsewhere: $hooks"
finish
