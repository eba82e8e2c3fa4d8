#!/usr/bin/env bash
# Determinism (docs/internals.md#determinism): two identical runs give identical JSONL bytes (wall-clock fields aside)
# and identical checkpoint bytes; so do runs with OMP_NUM_THREADS=1 and 2.
source "$(dirname "$0")/lib.sh"
run() { # $1 dir, $2 threads
  OMP_NUM_THREADS=$2 $KEEL "${TINY[@]}" --train-iters 6 --save "$1/ck" --metrics-file "$1/m.jsonl" >"$1.log" 2>&1 \
    || { fail "run $1 failed"; cat "$1.log"; }
}
run "$TMP/a" 2; run "$TMP/b" 2; run "$TMP/c" 1; run "$TMP/d" 3
[ "$(grep -c lm_loss "$TMP/a/m.jsonl")" -eq 6 ] || fail "expected 6 iteration records"
for x in b c d; do
  if cmp -s <(strip_timing "$TMP/a/m.jsonl") <(strip_timing "$TMP/$x/m.jsonl"); then ok "JSONL a == $x"; else fail "JSONL a != $x"; diff <(strip_timing "$TMP/a/m.jsonl") <(strip_timing "$TMP/$x/m.jsonl") | head; fi
  for f in model.bin optimizer.bin state.txt; do
    cmp -s "$TMP/a/ck/iter_0000006/$f" "$TMP/$x/ck/iter_0000006/$f" && ok "$f a == $x" || fail "$f differs a vs $x"
  done
done
# The LR each update used (TINY: peak 3e-3, warmup 2 iterations = 8 samples, global batch 4):
# iteration 1 runs at 0, iteration 2 at half the peak, iteration 3 at the peak (docs/knobs.md#learning-rate-schedule).
lrs=$(grep -o '"lr": [0-9.e+-]*' "$TMP/a/m.jsonl" | head -3 | cut -d' ' -f2 | tr '\n' ' ')
[ "$lrs" = "0 0.0015 0.003 " ] && ok "LR used by iterations 1-3: $lrs" || fail "LR used by iterations 1-3: '$lrs'"
# The loss must actually move (a run that trains nothing would also be "deterministic").
first=$(grep -m1 -o '"lm_loss": [0-9.e+-]*' "$TMP/a/m.jsonl" | cut -d' ' -f2)
last=$(grep -o '"lm_loss": [0-9.e+-]*' "$TMP/a/m.jsonl" | tail -1 | cut -d' ' -f2)
awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a)}' && ok "loss fell $first -> $last" || fail "loss did not fall: $first -> $last"
finish
