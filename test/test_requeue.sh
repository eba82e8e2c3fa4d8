#!/usr/bin/env bash
# The requeue recipe, run locally: scripts/run_requeue.sh restarts a 2-rank run (DP 2, ZeRO-1,
# --load = --save, saving every 3 iterations) that a killer interrupts three times, SIGKILLing a
# random rank a few iterations into a start; every start a kill ended is restarted (a kill landing
# as a start finishes may not end it), the last one finishes, and its final checkpoint is
# byte-identical to an uninterrupted run's. Also: exit 2 is not restarted (one start), and the
# restart budget ends the loop with the command's exit code.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
export KEEL_REQUEUE_DELAY=0
# (long enough that each kill, a few iterations into a start, lands well before the run's end)
RUN=("${TINY[@]}" --global-batch-size 8 --train-iters 120 --save-interval 3 --eval-interval 0 --zero-stage 1)

timeout -k 5 300 mpirun -np 2 $KEEL "${RUN[@]}" --save "$TMP/ref" >"$TMP/ref.log" 2>&1 || { fail "uninterrupted run: $(grep -m1 error "$TMP/ref.log")"; finish; }

# (the log exists before the loop starts: the background job opens it only when it is scheduled, and
# a count read before that would be empty)
: >"$TMP/loop.log"
bash scripts/run_requeue.sh mpirun -np 2 $KEEL "${RUN[@]}" --load "$TMP/ck" --save "$TMP/ck" >>"$TMP/loop.log" 2>&1 & loop=$!
kills=0
starts() { grep -c "^run_requeue: start" "$TMP/loop.log" 2>/dev/null || true; }
current() { awk '/^run_requeue: start/ { n = NR } { l[NR] = $0 } END { for (i = n; i <= NR; i++) print l[i] }' "$TMP/loop.log"; }
# the ranks of the current start: children of the newest mpirun (a killed start's ranks may still be exiting)
ranks() { local mp; mp=$(pgrep -n -f -- "^mpirun .*--save $TMP/ck"); [ -n "$mp" ] && for p in $(pgrep -P "$mp"); do [ "$(cat /proc/$p/comm 2>/dev/null)" = train_gpt_cpu ] && echo $p; done; }
for k in 1 2 3; do  # each start: wait for a random iteration past its first, then SIGKILL one of its ranks
  n=$(starts)
  first=$(( $(cat "$TMP/ck/latest_checkpointed_iteration.txt" 2>/dev/null || echo 0) + 1 ))
  at=$(( first + 1 + RANDOM % 4 ))
  for _ in $(seq 1200); do current | grep -qE "^ iteration +$at/" && break; kill -0 $loop 2>/dev/null || break; sleep 0.05; done
  victim=$(ranks | shuf -n 1)
  [ -n "$victim" ] && kill -9 "$victim" && kills=$((kills + 1))
  for _ in $(seq 1200); do [ "$(starts)" -gt "$n" ] && break; kill -0 $loop 2>/dev/null || break; sleep 0.05; done
done
timeout 300 tail --pid=$loop -f /dev/null; wait $loop; rc=$?
starts=$(grep -c "^run_requeue: start" "$TMP/loop.log")
died=$(grep -c "^run_requeue: the command exited [1-9][0-9]*: restarting" "$TMP/loop.log")
# (a kill that lands while a start is already finishing may not end it: count the starts it did end)
[ $rc = 0 ] && [ "$died" -ge 2 ] && [ "$starts" = $((died + 1)) ] && grep -q "^run_requeue: the command exited 0 after $died restart(s)" "$TMP/loop.log" \
  && ok "$kills rank(s) killed, $died start(s) ended by them and restarted, $starts starts, the loop ended with exit 0" \
  || fail "loop: exit $rc, $kills kill(s), $died died, $starts start(s): $(grep run_requeue "$TMP/loop.log" | tr '\n' ' ')"
cmp -s "$TMP/ref/iter_0000120/model.bin" "$TMP/ck/iter_0000120/model.bin" && cmp -s "$TMP/ref/iter_0000120/optimizer.bin" "$TMP/ck/iter_0000120/optimizer.bin" \
  && ok "the requeued run's iteration 120 is byte-identical to the uninterrupted run's" || fail "requeued run differs at iteration 120"

out=$(bash scripts/run_requeue.sh $KEEL "${RUN[@]}" --no-such-flag 2>&1); rc=$?
[ $rc = 2 ] && [ "$(grep -c "^run_requeue: start" <<<"$out")" = 1 ] && grep -q "not restarting" <<<"$out" \
  && ok "exit 2 (a bad flag): one start, not restarted" || fail "bad flag: exit $rc: $out"
out=$(KEEL_MAX_RESTARTS=2 bash scripts/run_requeue.sh bash -c 'exit 3' 2>&1); rc=$?
[ $rc = 3 ] && [ "$(grep -c "^run_requeue: start" <<<"$out")" = 3 ] && ok "a command that keeps failing: 3 starts, then its exit code 3" \
  || fail "restart budget: exit $rc: $out"
finish
