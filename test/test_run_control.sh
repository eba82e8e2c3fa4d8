#!/usr/bin/env bash
# Megatron-DeepSpeed's run control: --kill-switch-path (BigScience), --exit-duration-in-mins,
# --exit-signal-handler (SIGUSR1 through mpirun), keel's --save-interval-minutes and --eval-only. Each stop leaves a checkpoint that resumes into the uninterrupted run byte for byte
# (JSONL and final checkpoint); --eval-only reproduces the logged validation loss and writes nothing.
# Deterministic through the test hooks of llmc/test_hooks.h: KEEL_TEST_KILL_SWITCH_AT=K (rank 0
# touches the switch once iteration K is done) and KEEL_TEST_FAKE_CLOCK=M[@R] (M minutes per iteration).
# Negative controls: the uninterrupted run A (same flags, no switch, real clock) runs to the end; an
# inert flag would not stop at 3, a stop without a save leaves no iter_0000003, a resume that is not
# exact fails the byte comparisons, and with the fake clock on rank 1 only, a rank that stopped
# alone would leave rank 0 waiting in its next collective (the timeout fails the run).
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
RUN=("${TINY[@]}" --train-iters 6 --hidden-dropout 0.1 --attention-dropout 0.1)
digest() { (cd "$1" && find . -type f | sort | xargs sha256sum); }

$KEEL "${RUN[@]}" --save "$TMP/A" --metrics-file "$TMP/A.jsonl" >"$TMP/A.log" 2>&1 || { fail "run A: $(tail -2 "$TMP/A.log")"; finish; }

# ---- kill switch: touched after iteration 3, found before iteration 4: checkpoint 3, exit 0 --------
KS="$TMP/kill-switch"
KEEL_TEST_KILL_SWITCH_AT=3 $KEEL "${RUN[@]}" --save "$TMP/B" --kill-switch-path "$KS" --metrics-file "$TMP/B.jsonl" >"$TMP/B.log" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "detected kill switch at $KS: exiting at iteration 3" "$TMP/B.log" && ! grep -q "iteration        4/" "$TMP/B.log" \
  && [ "$(cat "$TMP/B/latest_checkpointed_iteration.txt")" = 3 ] && ok "kill switch: exit 0 before iteration 4, checkpoint 3" \
  || fail "kill switch (rc $rc): $(grep -E 'kill|error' "$TMP/B.log" | head -3)"
# BigScience's start-up poll: a job that finds the switch leaves at once, touching nothing
before=$(digest "$TMP/B")
$KEEL "${RUN[@]}" --load "$TMP/B" --save "$TMP/B" --kill-switch-path "$KS" --metrics-file "$TMP/B.jsonl" >"$TMP/B2.log" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "exiting before training" "$TMP/B2.log" && ! grep -q "loaded checkpoint" "$TMP/B2.log" \
  && [ "$before" = "$(digest "$TMP/B")" ] && ok "kill switch at start-up: exit 0, checkpoint untouched" || fail "start-up kill switch (rc $rc)"

# ---- --eval-only on checkpoint 3: the validation loss run A logged at iteration 3; nothing written ----
val3=$(grep -o '"iteration": 3, "val_loss": [^,]*' "$TMP/A.jsonl")
$KEEL "${RUN[@]}" --eval-only true --load "$TMP/B" --save "$TMP/B" --metrics-file "$TMP/E.jsonl" >"$TMP/E.log" 2>&1
rc=$?
got=$(grep -o '"iteration": 3, "val_loss": [^,]*' "$TMP/E.jsonl" 2>/dev/null)
[ $rc -eq 0 ] && [ -n "$val3" ] && [ "$got" = "$val3" ] && [ "$(wc -l <"$TMP/E.jsonl")" -eq 1 ] \
  && ok "--eval-only: $got, as logged in training" || fail "--eval-only (rc $rc): '$got' vs '$val3'"
[ "$before" = "$(digest "$TMP/B")" ] && ! grep -q "iteration        4/" "$TMP/E.log" && ok "--eval-only: no iteration, checkpoint directory byte-identical" \
  || fail "--eval-only trained or wrote into the checkpoint directory"
expect_fail 2 "eval-only false.*any non-empty value as true" $KEEL "${RUN[@]}" --eval-only false --load "$TMP/B"
expect_fail 2 "eval-only.*--load" $KEEL "${RUN[@]}" --eval-only true
expect_fail 2 "eval-only: no checkpoint in --load" $KEEL "${RUN[@]}" --eval-only true --load "$TMP/empty"
expect_fail 2 "exit-duration-in-mins must be >= 0" $KEEL "${RUN[@]}" --exit-duration-in-mins -1
expect_fail 2 "exit-duration-in-mins: '1.5' is not an integer" $KEEL "${RUN[@]}" --exit-duration-in-mins 1.5

# ---- the resume from the kill switch's checkpoint is the uninterrupted run ------------------------
rm -f "$KS"
$KEEL "${RUN[@]}" --load "$TMP/B" --save "$TMP/B" --kill-switch-path "$KS" --metrics-file "$TMP/B.jsonl" >"$TMP/B3.log" 2>&1 || fail "resume B: $(tail -2 "$TMP/B3.log")"
diff <(strip_timing "$TMP/A.jsonl") <(strip_timing "$TMP/B.jsonl") >/dev/null && ok "kill switch + resume: JSONL identical to run A" || fail "kill switch + resume: JSONL differs"
same_checkpoint "kill switch + resume" "$TMP/A" "$TMP/B" 6

# ---- --exit-duration-in-mins 2 at a fake minute per iteration: 3 > 2 after iteration 3 ------------
KEEL_TEST_FAKE_CLOCK=1 $KEEL "${RUN[@]}" --save "$TMP/D" --exit-duration-in-mins 2 --metrics-file "$TMP/D.jsonl" >"$TMP/D.log" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "exiting program after 3.00 minutes at iteration 3" "$TMP/D.log" && [ "$(cat "$TMP/D/latest_checkpointed_iteration.txt")" = 3 ] \
  && ok "--exit-duration-in-mins: exit 0 after iteration 3 with checkpoint 3" || fail "duration exit (rc $rc): $(grep -E 'exiting|error' "$TMP/D.log")"
$KEEL "${RUN[@]}" --load "$TMP/D" --save "$TMP/D" --exit-duration-in-mins 2 --metrics-file "$TMP/D.jsonl" >"$TMP/D2.log" 2>&1 || fail "resume D"
diff <(strip_timing "$TMP/A.jsonl") <(strip_timing "$TMP/D.jsonl") >/dev/null && ok "duration exit + resume (real clock): JSONL identical to run A" || fail "duration + resume: JSONL differs"
same_checkpoint "duration exit + resume" "$TMP/A" "$TMP/D" 6

# ---- two ranks, only rank 1's clock over the limit: both stop after iteration 3 -------------------
KEEL_TEST_FAKE_CLOCK=1@1 timeout -k 5 60 mpirun -np 2 $KEEL "${RUN[@]}" --save "$TMP/M" --exit-duration-in-mins 2 >"$TMP/M.log" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "exiting program after .* at iteration 3" "$TMP/M.log" && [ "$(cat "$TMP/M/latest_checkpointed_iteration.txt")" = 3 ] \
  && ok "mpirun -np 2: both ranks stop after iteration 3 (rank 1's clock), checkpoint 3" || fail "two-rank duration exit (rc $rc): $(tail -3 "$TMP/M.log")"
# ---- --save-interval-minutes 2 at a fake minute per iteration: saves after 2, 4 and 6 --------------
KEEL_TEST_FAKE_CLOCK=1 $KEEL "${RUN[@]}" --save "$TMP/T" --save-interval-minutes 2 >"$TMP/T.log" 2>&1 || fail "save by time: run failed"
[ "$(ls "$TMP/T" | grep -c '^iter_')" = 3 ] && [ -d "$TMP/T/iter_0000002" ] && [ -d "$TMP/T/iter_0000004" ] && [ -d "$TMP/T/iter_0000006" ] \
  && ok "--save-interval-minutes 2: checkpoints 2, 4, 6 (a fake minute per iteration)" || fail "save by time: $(ls "$TMP/T" | tr '\n' ' ')"
$KEEL "${RUN[@]}" --save "$TMP/T2" >"$TMP/T2.log" 2>&1; [ "$(ls "$TMP/T2" | grep -c '^iter_')" = 1 ] && ok "without it: only the final checkpoint" || fail "no-flag saves: $(ls "$TMP/T2")"
expect_fail 2 "--save-interval-minutes needs --save" $KEEL "${RUN[@]}" --save-interval-minutes 5
expect_fail 2 "--save-interval-minutes -1: must be >= 0" $KEEL "${RUN[@]}" --save "$TMP/T3" --save-interval-minutes -1

# ---- --exit-signal-handler: SIGUSR1 to mpirun (it forwards the signal to every rank) mid-run: both ranks
# finish the same iteration, save it and exit 0; resumed, the run reaches iteration 60 byte-identical to
# an uninterrupted one. Without the handler SIGUSR1 kills the ranks (negative control).
SIG=("${TINY[@]}" --train-iters 400 --exit-interval 60 --eval-interval 0 --exit-signal-handler)
timeout -k 5 120 mpirun -np 2 $KEEL "${SIG[@]}" --save "$TMP/SA" >"$TMP/SA.log" 2>&1 || fail "signal: uninterrupted run"
mpirun -np 2 $KEEL "${SIG[@]}" --save "$TMP/SB" --load "$TMP/SB" >"$TMP/SB.log" 2>&1 & pid=$!
for _ in $(seq 300); do grep -qE "^ iteration +5/" "$TMP/SB.log" && break; sleep 0.1; done
kill -USR1 $pid; wait $pid; rc=$?
line=$(grep -m1 -E "exiting program after receiving SIGUSR1 at iteration [0-9]+ \(--exit-signal-handler\)" "$TMP/SB.log")
at=$(grep -oE "at iteration [0-9]+" <<<"$line" | grep -oE "[0-9]+")
if [ $rc -eq 0 ] && [ -n "$at" ] && [ "$(cat "$TMP/SB/latest_checkpointed_iteration.txt")" = "$at" ] && [ "$at" -lt 60 ]; then
  ok "SIGUSR1 under mpirun -np 2: exit 0 after iteration $at with checkpoint $at"
  timeout -k 5 120 mpirun -np 2 $KEEL "${SIG[@]}" --save "$TMP/SB" --load "$TMP/SB" >"$TMP/SB2.log" 2>&1 || fail "signal: resume"
  cmp -s "$TMP/SA/iter_0000060/model.bin" "$TMP/SB/iter_0000060/model.bin" && cmp -s "$TMP/SA/iter_0000060/optimizer.bin" "$TMP/SB/iter_0000060/optimizer.bin" \
    && ok "signal stop + resume: iteration 60 byte-identical to the uninterrupted run" || fail "signal stop + resume: iteration 60 differs"
else fail "SIGUSR1 (rc $rc, line '$line', latest $(cat "$TMP/SB/latest_checkpointed_iteration.txt" 2>/dev/null))"; fi
$KEEL "${TINY[@]}" --train-iters 400 --eval-interval 0 >"$TMP/SC.log" 2>&1 & pid=$!
for _ in $(seq 300); do grep -qE "^ iteration +3/" "$TMP/SC.log" && break; sleep 0.1; done
kill -USR1 $pid; wait $pid; rc=$?
[ $rc -ne 0 ] && ok "without --exit-signal-handler, SIGUSR1 ends the process (exit $rc)" || fail "SIGUSR1 without the handler: exit 0"
finish
