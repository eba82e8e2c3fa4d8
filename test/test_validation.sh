#!/usr/bin/env bash
# Validation with Megatron's meaning: one validation iterator for the whole run. Every run here has
# --lr 0, so the model never changes and a validation value depends only on the batches it read.
#   1. Each evaluation reads the --eval-iters global batches after the previous one's: with
#      --eval-iters 1 on a validation set of exactly 3 global batches, evaluations 1, 2, 3 differ and
#      evaluations 4-6 repeat them bit for bit (the iterator wraps around the set).
#   2. --eval-iters counts global batches: one evaluation of 3 batches = the mean of the three
#      one-batch evaluations (within rounding).
#   3. --eval-full-at-end: the whole set's loss (val_loss_full) = the 3-batch evaluation bit for bit
#      (the same 6 micro-batches in the same order), printed with its extent; not written without the flag.
#   4. A resumed run reads the batches an uninterrupted one reads: JSONL identical; --eval-only on a
#      checkpoint reproduces the value the run logged there (the window of that iteration, not the first).
source "$(dirname "$0")/lib.sh"
K=$KEEL
T=16 B=2 G=4  # TINY's sequence length, micro-batch and global batch
# a validation shard of 3 global batches: 12 samples of T+1 tokens (llm.c format: 256 int32 header, uint16 ids)
python3 - "$TMP/val3.bin" $((3 * G * T + 1)) <<'EOF'
import struct, sys, random
n = int(sys.argv[2])
random.seed(5)
ids = [random.randrange(50257) for _ in range(n)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *ids))
EOF
R=("${TINY[@]}" --lr 0 --min-lr 0 --valid-data-path "$TMP/val3.bin")
run() { local name=$1; shift; $K "$@" --metrics-file "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1 || fail "run $name: $(grep -m1 error "$TMP/$name.log")"; }
vals() { python3 -c "import json,sys; print(' '.join(repr(r['val_loss']) for r in map(json.loads, open(sys.argv[1])) if 'val_loss' in r))" "$1"; }

# ---- 1. the iterator persists and wraps
run one "${R[@]}" --train-iters 6 --eval-interval 1 --eval-iters 1
read -r -a v <<<"$(vals "$TMP/one.jsonl")"
[ "${#v[@]}" -eq 6 ] || fail "6 evaluations expected, got ${#v[@]}"
[ "${v[0]}" != "${v[1]}" ] && [ "${v[1]}" != "${v[2]}" ] && [ "${v[0]}" != "${v[2]}" ] \
  && ok "evaluations 1-3 read different batches: ${v[*]:0:3}" || fail "evaluations 1-3 equal (a fixed subset): ${v[*]}"
[ "${v[3]}" = "${v[0]}" ] && [ "${v[4]}" = "${v[1]}" ] && [ "${v[5]}" = "${v[2]}" ] \
  && ok "evaluations 4-6 wrap around to batches 0-2, bit for bit" || fail "no wrap: ${v[*]}"

# ---- 2. --eval-iters counts global batches
run three "${R[@]}" --train-iters 3 --eval-interval 3 --eval-iters 3
read -r -a w <<<"$(vals "$TMP/three.jsonl")"
python3 -c "import sys; a=[float(x) for x in sys.argv[1:4]]; m=sum(a)/3; sys.exit(abs(m-float(sys.argv[4]))>1e-12*abs(m))" "${v[@]:0:3}" "${w[0]}" \
  && ok "one evaluation of 3 batches = the mean of 3 one-batch evaluations (${w[0]})" || fail "3 batches ${w[0]} vs one-batch values ${v[*]:0:3}"
# the set is too small for more batches per evaluation than it holds: refused, as before
expect_fail 2 "--eval-iters 4 x global batch 4 = 16 validation samples, but the validation set holds 12" $K "${R[@]}" --train-iters 3 --eval-iters 4

# ---- 3. --eval-full-at-end
run full "${R[@]}" --train-iters 3 --eval-interval 3 --eval-iters 1 --eval-full-at-end
full=$(python3 -c "import json,sys; print([repr(r['val_loss_full']) for r in map(json.loads, open(sys.argv[1])) if 'val_loss_full' in r])" "$TMP/full.jsonl")
[ "$full" = "['${w[0]}']" ] && ok "--eval-full-at-end: one val_loss_full record = all 3 batches (${w[0]})" || fail "val_loss_full $full vs ${w[0]}"
grep -q "validation loss over the whole validation set (12 samples, 192 tokens) at iteration 3" "$TMP/full.log" \
  && ok "--eval-full-at-end: the line names its extent" || fail "no whole-set line: $(grep -m1 'whole' "$TMP/full.log")"
expect_fail 2 "--eval-full-at-end evaluates the validation set" $K "${TINY[@]}" --train-iters 3 --eval-interval 0 --valid-data-path "" --eval-full-at-end
grep -q val_loss_full "$TMP/three.jsonl" && fail "val_loss_full without --eval-full-at-end" || ok "no whole-set evaluation without the flag"

# ---- 4. resume and --eval-only read the windows of their iterations
S=("${TINY[@]}" --eval-interval 2 --eval-iters 1)  # lr > 0 here: a real run, on Brown's validation set
run straight "${S[@]}" --train-iters 8
run first "${S[@]}" --train-iters 8 --exit-interval 4 --save "$TMP/ck"
$K "${S[@]}" --train-iters 8 --load "$TMP/ck" --save "$TMP/ck" --metrics-file "$TMP/first.jsonl" >"$TMP/second.log" 2>&1 || fail "resumed run"
cmp -s <(strip_timing "$TMP/straight.jsonl") <(strip_timing "$TMP/first.jsonl") && ok "4 + resumed 4 = 8 straight, validation included" \
  || fail "resume: $(diff <(strip_timing "$TMP/straight.jsonl") <(strip_timing "$TMP/first.jsonl") | head -3)"
$K "${S[@]}" --train-iters 8 --load "$TMP/ck" --eval-only true --metrics-file "$TMP/eo.jsonl" >"$TMP/eo.log" 2>&1 || fail "eval-only"
want=$(grep -o '"iteration": 8, "val_loss": [^,]*' "$TMP/straight.jsonl")
got=$(grep -o '"iteration": 8, "val_loss": [^,]*' "$TMP/eo.jsonl")
[ -n "$want" ] && [ "$got" = "$want" ] && ok "--eval-only at 8 = the run's value at 8 ($got)" || fail "--eval-only: '$got' vs '$want'"
# the same checkpoint without an interval reads the first window: another value (batch 0, not 3)
$K "${S[@]}" --train-iters 8 --eval-interval 0 --load "$TMP/ck" --eval-only true --metrics-file "$TMP/eo0.jsonl" >"$TMP/eo0.log" 2>&1 || fail "eval-only 0"
got0=$(grep -o '"iteration": 8, "val_loss": [^,]*' "$TMP/eo0.jsonl")
[ -n "$got0" ] && [ "$got0" != "$got" ] && ok "--eval-only reads the window of the checkpoint's iteration (batch 0 gives $got0)" \
  || fail "--eval-only at 8 read batch 0's window: $got0 = $got"
finish
