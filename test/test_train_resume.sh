#!/usr/bin/env bash
# Bit-exact resume with gradient accumulation 2: 2N iterations straight vs N, stop, --load, N more
# → every iteration's record (loss, lr, grad norm, counters; compared as the exact %.9g text, and the
# losses also as raw float bits via the checkpoint) and the final checkpoint bytes are identical.
source "$(dirname "$0")/lib.sh"
N=4
$KEEL "${TINY[@]}" --train-iters $((2*N)) --save "$TMP/straight" --metrics-file "$TMP/straight.jsonl" >"$TMP/s.log" 2>&1 || { fail "straight run"; cat "$TMP/s.log"; }
$KEEL "${TINY[@]}" --train-iters $((2*N)) --exit-interval $N --save "$TMP/split" --metrics-file "$TMP/split.jsonl" >"$TMP/p1.log" 2>&1 || { fail "first half"; cat "$TMP/p1.log"; }
grep -q "exiting program at iteration $N" "$TMP/p1.log" || fail "first half did not stop at $N"
[ "$(cat "$TMP/split/latest_checkpointed_iteration.txt")" = "$N" ] || fail "latest is not $N"
$KEEL "${TINY[@]}" --train-iters $((2*N)) --load "$TMP/split" --save "$TMP/split" --metrics-file "$TMP/split.jsonl" >"$TMP/p2.log" 2>&1 || { fail "second half"; cat "$TMP/p2.log"; }
grep -q "successfully loaded checkpoint" "$TMP/p2.log" || fail "resume did not load"
if cmp -s <(strip_timing "$TMP/straight.jsonl") <(strip_timing "$TMP/split.jsonl"); then ok "every record identical"; else
  fail "records differ"; diff <(strip_timing "$TMP/straight.jsonl") <(strip_timing "$TMP/split.jsonl") | head; fi
for f in model.bin optimizer.bin state.txt; do
  cmp -s "$TMP/straight/iter_0000008/$f" "$TMP/split/iter_0000008/$f" && ok "final $f identical" || fail "final $f differs"
done
finish
