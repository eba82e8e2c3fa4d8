#!/usr/bin/env bash
# A save that fails on one rank fails for all, keeps nothing of itself, leaves the previous checkpoint
# `latest`, and the run stops (--save-failure stop, the default) or goes on and saves at the next
# interval (--save-failure continue). Under mpirun -np 2 with ZeRO-1 (each rank writes its half of
# optimizer.bin), rank 1 alone runs under a file-size limit (ulimit -f, with SIGXFSZ ignored: a write
# past it fails with EFBIG, as a full disk fails with ENOSPC or a quota with EDQUOT), so its half of
# optimizer.bin cannot be written while rank 0's model.bin can.
#   1. stop: the save at iteration 4 fails on rank 1: exit 1, one error line naming rank 1, the file
#      and the reason, and that iteration 2 stays latest; no iter_0000004 or .tmp left; resumed
#      without the limit, the run reaches iteration 6 byte-identical to an uninterrupted one;
#   2. continue: the save at 100 fails (one warning line), training goes on; the test then lifts
#      rank 1's limit (prlimit), and the save at 200 succeeds; the end is byte-identical to an
#      uninterrupted run;
#   3. the end-of-run save failing stops the run with exit 1 even under continue.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
LIMIT_KB=8000  # model.bin is ~6.6 MB; rank 1's half of optimizer.bin lies past 8 MB
limited=(bash -c 'trap "" XFSZ; ulimit -S -f '$LIMIT_KB'; exec "$@"' _)  # the soft limit: prlimit may lift it
# pair SECONDS ARGS...: two ranks, rank 0 plain, rank 1 under the file-size limit (mpirun's MPMD form)
pair() { local s=$1; shift; timeout -k 5 $s mpirun -np 1 $KEEL "$@" : -np 1 "${limited[@]}" $KEEL "$@"; }

# ---- 1. stop
S=("${TINY[@]}" --global-batch-size 4 --micro-batch-size 1 --train-iters 6 --save-interval 2 --eval-interval 0 --zero-stage 1)
timeout -k 5 120 mpirun -np 2 $KEEL "${S[@]}" --save "$TMP/ref" >"$TMP/ref.log" 2>&1 || fail "uninterrupted run: $(grep -m1 error "$TMP/ref.log")"
timeout -k 5 120 mpirun -np 2 $KEEL "${S[@]}" --save "$TMP/A" --exit-interval 2 >"$TMP/A1.log" 2>&1 || fail "run to 2: $(grep -m1 error "$TMP/A1.log")"
pair 120 "${S[@]}" --save "$TMP/A" --load "$TMP/A" >"$TMP/A2.log" 2>&1; rc=$?
err=$(grep -E "^error:" "$TMP/A2.log")
if [ $rc = 1 ] && [ "$(grep -c "^error:" <<<"$err")" = 1 ] \
   && grep -qE "^error: saving iteration 4 failed on rank 1: .*optimizer\.bin.*File too large.*; nothing of it was kept and iteration 2 stays the latest checkpoint$" <<<"$err"; then
  ok "stop: exit 1, one line: ${err:0:160}"
else fail "stop: exit $rc, errors: $err"; fi
[ "$(cat "$TMP/A/latest_checkpointed_iteration.txt")" = 2 ] && [ -z "$(ls "$TMP/A" | grep -v -x -e iter_0000002 -e latest_checkpointed_iteration.txt)" ] \
  && ok "stop: latest is 2, nothing of iteration 4 left ($(ls "$TMP/A" | tr '\n' ' '))" || fail "stop: directory holds $(ls "$TMP/A" | tr '\n' ' ')"
timeout -k 5 120 mpirun -np 2 $KEEL "${S[@]}" --save "$TMP/A" --load "$TMP/A" >"$TMP/A3.log" 2>&1 || fail "stop: resume"
cmp -s "$TMP/ref/iter_0000006/model.bin" "$TMP/A/iter_0000006/model.bin" && cmp -s "$TMP/ref/iter_0000006/optimizer.bin" "$TMP/A/iter_0000006/optimizer.bin" \
  && ok "stop: resumed from 2 to 6: byte-identical to the uninterrupted run" || fail "stop: resumed run differs at 6"

# ---- 2. continue: fails at 100, the limit lifted, saved at 200, end at 300
C=("${TINY[@]}" --global-batch-size 4 --micro-batch-size 1 --train-iters 300 --save-interval 100 --eval-interval 0 --zero-stage 1 --log-interval 10)
timeout -k 5 300 mpirun -np 2 $KEEL "${C[@]}" --save "$TMP/cref" >"$TMP/cref.log" 2>&1 || fail "continue: uninterrupted run"
pair 600 "${C[@]}" --save "$TMP/B" --save-failure continue >"$TMP/B.log" 2>&1 & pid=$!
for _ in $(seq 1200); do grep -q "^warning: saving iteration 100 failed" "$TMP/B.log" && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; done
r1=""
for p in $(pgrep -f -- "--save $TMP/B "); do grep -qE "^Max file size +$((LIMIT_KB * 1024)) " /proc/$p/limits 2>/dev/null && r1=$p; done
if [ -z "$r1" ]; then fail "continue: rank 1's process not found"; else prlimit --pid $r1 --fsize=unlimited || fail "continue: prlimit"; fi
wait $pid; rc=$?
w=$(grep -c "^warning: saving iteration 100 failed on rank 1: .*File too large.*; nothing of it was kept and there is no checkpoint yet; training goes on" "$TMP/B.log")
if [ $rc = 0 ] && [ "$w" = 1 ] && [ ! -e "$TMP/B/iter_0000100" ] && [ -d "$TMP/B/iter_0000200" ] && [ "$(cat "$TMP/B/latest_checkpointed_iteration.txt")" = 300 ]; then
  ok "continue: one warning at 100, training went on, saved at 200 once the limit was lifted, and at 300"
else fail "continue: exit $rc, $w warning(s), directory: $(ls "$TMP/B" | tr '\n' ' ')"; fi
cmp -s "$TMP/cref/iter_0000300/model.bin" "$TMP/B/iter_0000300/model.bin" && cmp -s "$TMP/cref/iter_0000300/optimizer.bin" "$TMP/B/iter_0000300/optimizer.bin" \
  && ok "continue: iteration 300 byte-identical to the uninterrupted run" || fail "continue: iteration 300 differs"

# ---- 3. the last save failing stops the run even under continue
pair 120 "${S[@]}" --save-interval 0 --save "$TMP/E" --save-failure continue >"$TMP/E.log" 2>&1; rc=$?
[ $rc = 1 ] && grep -qE "^error: saving iteration 6 failed on rank 1: .*there is no checkpoint yet$" "$TMP/E.log" && [ ! -e "$TMP/E/iter_0000006" ] \
  && ok "continue: the end's save failing: exit 1, nothing kept" || fail "end-of-run save: exit $rc: $(grep -m2 -E "error|warning" "$TMP/E.log")"
expect_fail 2 "--save-failure: 'retry' is not one of stop\|continue" $KEEL "${TINY[@]}" --train-iters 2 --save-failure retry
finish
