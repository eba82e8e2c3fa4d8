#!/usr/bin/env bash
# The spike autopilot (--spike-policy) on a poisoned data window.
# A copy of the Brown training shard gets random token ids planted over exactly the samples that
# iterations 50-51 read (located with ./batch_lookup). Then:
#   - without the autopilot the loss jumps at 50 and 51 (the poison works);
#   - rollback: detected at 50: restores the snapshot of 45, skips 46-50 (passing 50, a snapshot
#     iteration, it snapshots again); detected at 51: restores 50, skips 51. One JSONL record each;
#     the final validation loss is within 0.03 of a clean run's;
#   - the same run twice: byte-identical metrics (timing fields aside) and checkpoints;
#   - the rollback is exactly the manual recipe: the checkpoint of 45 restarted with
#     --skip-train-iteration-range 46-51 ends with the same model and optimizer bytes;
#   - the history is in the checkpoint; a run stopped before (at 40) or after (at 55, inside the
#     lowered-LR window) the spike and resumed ends byte-identical to the uninterrupted run;
#   - --spike-lr-factor 0.5 halves exactly iterations 52..56 (--spike-lr-iters 5);
#   - two data-parallel ranks with ZeRO-1 (each rank restores its own shard) decide the same;
#   - skip: the two updates are skipped, nothing is restored;
#   - --spike-max-rollbacks 1 stops the run at the second rollback (exit 1, one error line).
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RUN=(--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 --global-batch-size 8
     --lr 1e-2 --min-lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 5 --seed 7 --train-iters 70
     --valid-data-path data/brown/brown_val.bin --eval-interval 70 --eval-iters 4 --log-interval 10 --hidden-dropout 0 --attention-dropout 0)
CLEAN=(--train-data-path data/brown/brown_train.bin)
POISON=(--train-data-path "$TMP/poisoned.bin")
AUTO=(--spike-policy rollback --spike-window 10 --spike-zscore 6 --spike-snapshot-interval 5)

# plant the poison: random ids (fixed perl seed) over the token spans iterations 50-51 read
cp data/brown/brown_train.bin "$TMP/poisoned.bin"
./batch_lookup "${RUN[@]}" "${CLEAN[@]}" --iterations 50-51 --no-text | grep -oE "tokens [0-9]+-[0-9]+" | awk '{print $2}' >"$TMP/spans"
[ "$(wc -l <"$TMP/spans")" -eq 16 ] && ok "16 sample spans of iterations 50-51 located" || fail "spans: $(wc -l <"$TMP/spans")"
perl -e 'open(F, "+<", $ARGV[0]) or die; srand(12345); open(S, "<", $ARGV[1]) or die;
  while (<S>) { my ($a, $b) = /(\d+)-(\d+)/; seek(F, 1024 + 2 * $a, 0); print F pack("v*", map { int(rand(50257)) } $a .. $b); }
  close F or die;' "$TMP/poisoned.bin" "$TMP/spans" || fail "perl poisoning"

value() { grep -oE "\"$1\": [^,}]*" <<<"$2" | head -1 | sed -E "s/^\"$1\": //"; }
loss_at() { value lm_loss "$(grep "^{\"iteration\": $2, \"consumed" "$1" | tail -1)"; }
val_of() { value val_loss "$(grep val_loss "$1" | tail -1)"; }
train() { local name=$1; shift; $KEEL "${RUN[@]}" --metrics-file "$TMP/$name.jsonl" "$@" >"$TMP/$name.log" 2>&1; }

train clean "${CLEAN[@]}" || fail "clean run"
train off "${POISON[@]}" || fail "poisoned run"
for it in 50 51; do
  awk -v p="$(loss_at "$TMP/off.jsonl" $it)" -v c="$(loss_at "$TMP/clean.jsonl" $it)" 'BEGIN { exit !(p > c + 2) }' \
    && ok "poison spikes iteration $it: $(loss_at "$TMP/off.jsonl" $it) vs clean $(loss_at "$TMP/clean.jsonl" $it)" \
    || fail "no spike at $it: $(loss_at "$TMP/off.jsonl" $it) vs $(loss_at "$TMP/clean.jsonl" $it)"
done

train rb "${POISON[@]}" "${AUTO[@]}" --save "$TMP/rb" --save-interval 5 || fail "rollback run: $(tail -3 "$TMP/rb.log")"
recs=$(grep '"spike": "rollback"' "$TMP/rb.jsonl" | sed -E 's/, "metric".*"restored_iteration"/ restored/; s/, "lr_factor".*//')
want='{"iteration": 50, "spike": "rollback" restored: 45, "skip": "46-50"
{"iteration": 51, "spike": "rollback" restored: 50, "skip": "51-51"'
[ "$recs" = "$want" ] && ok "rollbacks: 50 to 45, 51 to 50" || fail "rollback records: $recs"
grep -q "skipping iterations 46 to 50 (spike rollback)" "$TMP/rb.log" && grep -q "skipping iterations 51 to 51 (spike rollback)" "$TMP/rb.log" \
  && ok "windows 46-50 and 51 skipped" || fail "skip lines"
awk -v r="$(val_of "$TMP/rb.jsonl")" -v c="$(val_of "$TMP/clean.jsonl")" 'BEGIN { d = r - c; if (d < 0) d = -d; exit !(d < 0.03) }' \
  && ok "final validation loss $(val_of "$TMP/rb.jsonl") vs clean $(val_of "$TMP/clean.jsonl") (poisoned, no autopilot: $(val_of "$TMP/off.jsonl"))" \
  || fail "final validation loss $(val_of "$TMP/rb.jsonl") vs clean $(val_of "$TMP/clean.jsonl")"
grep -qx "spike.rollbacks = 50:45 51:50" "$TMP/rb/iter_0000070/state.txt" && ok "history in the checkpoint" || fail "state.txt history"

same_ckpt() {  # same_ckpt A B ITER: model and optimizer bytes equal
  cmp -s "$1/iter_$(printf %07d "$3")/model.bin" "$2/iter_$(printf %07d "$3")/model.bin" &&
  cmp -s "$1/iter_$(printf %07d "$3")/optimizer.bin" "$2/iter_$(printf %07d "$3")/optimizer.bin"
}
train rb2 "${POISON[@]}" "${AUTO[@]}" --save "$TMP/rb2" --save-interval 5 || fail "second rollback run"
cmp -s <(strip_timing "$TMP/rb.jsonl") <(strip_timing "$TMP/rb2.jsonl") && same_ckpt "$TMP/rb" "$TMP/rb2" 70 &&
  cmp -s "$TMP/rb/iter_0000070/state.txt" "$TMP/rb2/iter_0000070/state.txt" \
  && ok "two rollback runs: identical metrics and checkpoint bytes" || fail "rollback reruns differ"

# the manual recipe from the checkpoint of 45
mkdir -p "$TMP/m45" && cp -r "$TMP/rb/iter_0000045" "$TMP/m45/" && echo 45 >"$TMP/m45/latest_checkpointed_iteration.txt"
train manual "${POISON[@]}" --load "$TMP/m45" --save "$TMP/manual" --skip-train-iteration-range 46-51 || fail "manual restart"
same_ckpt "$TMP/rb" "$TMP/manual" 70 && ok "rollback = restart from 45 with --skip-train-iteration-range 46-51 (model and optimizer bytes)" \
  || fail "rollback differs from the manual recipe"

# lowered LR, and resumes before and after the spike
train lr "${POISON[@]}" "${AUTO[@]}" --spike-lr-factor 0.5 --spike-lr-iters 5 --save "$TMP/lr" --save-interval 5 || fail "lr run"
lr_at() { value lr "$(grep "^{\"iteration\": $2, \"consumed" "$1" | tail -1)"; }
for it in 52 56 57; do
  want=$(awk -v a="$(lr_at "$TMP/rb.jsonl" $it)" -v i=$it 'BEGIN { printf "%.17g", i <= 56 ? a * 0.5 : a }')
  awk -v a="$(lr_at "$TMP/lr.jsonl" $it)" -v b="$want" 'BEGIN { d = a - b; exit !(d * d <= 1e-30 * b * b) }' \
    && ok "lr at $it: $(lr_at "$TMP/lr.jsonl" $it) ($( [ $it -le 56 ] && echo halved || echo restored))" || fail "lr at $it: $(lr_at "$TMP/lr.jsonl" $it), want $want"
done
for stop in 40 55; do
  train "stop$stop" "${POISON[@]}" "${AUTO[@]}" --spike-lr-factor 0.5 --spike-lr-iters 5 --save "$TMP/r$stop" --save-interval 5 --exit-interval $stop \
    || fail "run stopped at $stop"
  train "resume$stop" "${POISON[@]}" "${AUTO[@]}" --spike-lr-factor 0.5 --spike-lr-iters 5 --save "$TMP/r$stop" --save-interval 5 --load "$TMP/r$stop" \
    || fail "resume from $stop"
  same_ckpt "$TMP/lr" "$TMP/r$stop" 70 && cmp -s "$TMP/lr/iter_0000070/state.txt" "$TMP/r$stop/iter_0000070/state.txt" \
    && ok "stopped at $stop and resumed: final checkpoint byte-identical" || fail "resume from $stop differs"
done
grep -q "spike autopilot history: 2 rollback(s)" "$TMP/resume55.log" && ok "the resumed run knows its history" || fail "no history line"

# two ranks, ZeRO-1: the same decisions, a loadable final checkpoint
mpirun --oversubscribe -np 2 $KEEL "${RUN[@]}" "${POISON[@]}" "${AUTO[@]}" --zero-stage 1 --save "$TMP/dp" --save-interval 5 \
  --metrics-file "$TMP/dp.jsonl" >"$TMP/dp.log" 2>&1 || fail "DP=2 rollback run: $(tail -3 "$TMP/dp.log")"
[ "$(grep '"spike"' "$TMP/dp.jsonl" | sed -E 's/, "value".*"restored/ restored/; s/, "lr_factor".*//')" = \
  "$(grep '"spike"' "$TMP/rb.jsonl" | sed -E 's/, "value".*"restored/ restored/; s/, "lr_factor".*//')" ] \
  && ok "DP=2 ZeRO-1: the same rollbacks" || fail "DP=2 decisions: $(grep '"spike"' "$TMP/dp.jsonl")"
awk -v r="$(val_of "$TMP/dp.jsonl")" -v c="$(val_of "$TMP/rb.jsonl")" 'BEGIN { d = r - c; if (d < 0) d = -d; exit !(d < 1e-4) }' \
  && ok "DP=2 final validation loss $(val_of "$TMP/dp.jsonl") ~ single process $(val_of "$TMP/rb.jsonl")" || fail "DP=2 validation $(val_of "$TMP/dp.jsonl")"

# skip policy, and the rollback limit
train skip "${POISON[@]}" --spike-policy skip --spike-window 10 --spike-zscore 6 || fail "skip run"
[ "$(grep -c '"spike": "skip"' "$TMP/skip.jsonl")" -eq 2 ] && grep -q '^{"iteration": 51, "consumed.*"skipped": 1' "$TMP/skip.jsonl" \
  && ! grep -q rollback "$TMP/skip.jsonl" && ok "skip: updates 50 and 51 skipped, no rollback" || fail "skip policy records"
expect_fail 1 "spike-max-rollbacks" $KEEL "${RUN[@]}" "${POISON[@]}" "${AUTO[@]}" --spike-max-rollbacks 1
expect_fail 2 "spike-lr-factor" $KEEL "${RUN[@]}" "${POISON[@]}" --spike-lr-factor 0.5
expect_fail 2 "spike-zscore has no effect" $KEEL "${RUN[@]}" "${POISON[@]}" --spike-zscore 4
expect_fail 2 "spike-max-rollbacks applies" $KEEL "${RUN[@]}" "${POISON[@]}" --spike-policy skip --spike-max-rollbacks 3

# the detector's knobs act: the grad norm spikes too (metric named in the records); a threshold
# above any z-score seen, or a window longer than the run, never fires
train gn "${POISON[@]}" "${AUTO[@]}" --spike-metric grad-norm || fail "grad-norm run"
grep -q '^{"iteration": 50, "spike": "rollback", "metric": "grad norm"' "$TMP/gn.jsonl" && ! grep -q '"metric": "loss"' "$TMP/gn.jsonl" \
  && ok "--spike-metric grad-norm: rollback at 50 on the grad norm" || fail "grad-norm records: $(grep spike "$TMP/gn.jsonl")"
train z "${POISON[@]}" "${AUTO[@]}" --spike-zscore 1000 || fail "z run"
train w "${POISON[@]}" "${AUTO[@]}" --spike-window 100 || fail "window run"
! grep -q '"spike"' "$TMP/z.jsonl" && ! grep -q '"spike"' "$TMP/w.jsonl" && cmp -s <(strip_timing "$TMP/z.jsonl") <(strip_timing "$TMP/off.jsonl") \
  && ok "--spike-zscore 1000 and --spike-window 100 never fire (= no autopilot)" || fail "threshold/window runs fired"

expect_fail 2 "not a multiple of --spike-snapshot-interval" $KEEL "${RUN[@]}" "${POISON[@]}" "${AUTO[@]}" --save "$TMP/x" --save-interval 7
finish
