#!/usr/bin/env bash
# --async-save: checkpoints written behind training are the synchronous ones, byte for byte, and a
# crash while one is being written leaves the previous checkpoint `latest`. The stall ("the step
# waited X s") is printed per save; timing never decides a test.
# Under mpirun -np 2 (DP 2, ZeRO-1: each rank writes its half of optimizer.bin), saving every 2 of 8
# iterations:
#   1. every checkpoint (2, 4, 6, 8, all in the background; the run waits for 8 before it ends) has the model.bin,
#      optimizer.bin and state.txt of the synchronous run, and the log says each interval save went
#      to the background and was published;
#   2. KEEL_FAULT_SAVE=async kills rank 0's writer thread after model.bin of the save at 6 (a
#      crash behind training): the job dies, `latest` still names 4, nothing of 6 is published, and
#      the run resumed from 4 reaches 8 byte-identical to the synchronous run;
#   3. a failed background write (rank 1 under a file-size limit) is reported when the ranks agree,
#      one line, and the run stops with exit 1 (--save-failure stop) keeping the previous checkpoint.
#   4. at DP 2 x PP 2 (4 ranks: rank 0 gathers the other stage's parameters into the buffers kept from
#      save to save), every background checkpoint equals the synchronous run's.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
RUN=("${TINY[@]}" --global-batch-size 4 --micro-batch-size 1 --train-iters 8 --save-interval 2 --eval-interval 0 --zero-stage 1)
same() {  # same NAME DIR_A DIR_B ITERATION
  local f
  for f in model.bin optimizer.bin state.txt; do
    cmp -s "$2/iter_000000$4/$f" "$3/iter_000000$4/$f" || { fail "$1: iteration $4's $f differs"; return 1; }
  done
  ok "$1: iteration $4: model.bin, optimizer.bin, state.txt identical"
}

timeout -k 5 120 mpirun -np 2 $KEEL "${RUN[@]}" --save "$TMP/sync" >"$TMP/sync.log" 2>&1 || { fail "synchronous run: $(grep -m1 error "$TMP/sync.log")"; finish; }
timeout -k 5 120 mpirun -np 2 $KEEL "${RUN[@]}" --save "$TMP/async" --async-save >"$TMP/async.log" 2>&1 || fail "async run: $(grep -m1 error "$TMP/async.log")"
for it in 2 4 6 8; do same "async" "$TMP/sync" "$TMP/async" $it; done
bg=$(grep -cE "^saving checkpoint at iteration +[2468] to .* in the background \(the step waited [0-9.]+ s\)$" "$TMP/async.log")
pub=$(grep -cE "^  successfully saved checkpoint at iteration +[2468] to" "$TMP/async.log")
[ "$bg" = 4 ] && [ "$pub" = 4 ] && ok "async: 2, 4, 6, 8 written in the background and published (the run waited for 8 before its end)" \
  || fail "async log: $bg background, $pub published"

# ---- 2. a crash behind training
timeout -k 5 120 mpirun -np 2 $KEEL "${RUN[@]}" --save "$TMP/c" --async-save --exit-interval 4 >"$TMP/c1.log" 2>&1 || fail "crash: run to 4"
KEEL_FAULT_SAVE=async timeout -k 5 120 mpirun -np 2 $KEEL "${RUN[@]}" --save "$TMP/c" --load "$TMP/c" --async-save >"$TMP/c2.log" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "KEEL_FAULT_SAVE=async" "$TMP/c2.log" && [ "$(cat "$TMP/c/latest_checkpointed_iteration.txt")" = 4 ] && [ ! -e "$TMP/c/iter_0000006" ] \
  && ok "crash in the background write of 6: exit $rc, latest still 4, no iter_0000006" \
  || fail "crash: exit $rc, latest $(cat "$TMP/c/latest_checkpointed_iteration.txt"), $(ls "$TMP/c" | tr '\n' ' ')"
timeout -k 5 120 mpirun -np 2 $KEEL "${RUN[@]}" --save "$TMP/c" --load "$TMP/c" --async-save >"$TMP/c3.log" 2>&1 || fail "crash: resume"
same "crash + resume" "$TMP/sync" "$TMP/c" 8

# ---- 3. a background write that fails
limited=(bash -c 'trap "" XFSZ; ulimit -S -f 8000; exec "$@"' _)
timeout -k 5 120 mpirun -np 2 $KEEL "${RUN[@]}" --save "$TMP/f" --async-save --exit-interval 2 >"$TMP/f1.log" 2>&1 || fail "failure: run to 2"
timeout -k 5 120 mpirun -np 1 $KEEL "${RUN[@]}" --save "$TMP/f" --load "$TMP/f" --async-save : -np 1 "${limited[@]}" $KEEL "${RUN[@]}" \
  --save "$TMP/f" --load "$TMP/f" --async-save >"$TMP/f2.log" 2>&1; rc=$?
err=$(grep "^error:" "$TMP/f2.log")
[ $rc = 1 ] && [ "$(grep -c . <<<"$err")" = 1 ] && grep -qE "^error: saving iteration 4 failed on rank 1: .*File too large.*; nothing of it was kept and iteration 2 stays the latest checkpoint$" <<<"$err" \
  && [ "$(cat "$TMP/f/latest_checkpointed_iteration.txt")" = 2 ] && [ ! -e "$TMP/f/iter_0000004" ] && [ ! -e "$TMP/f/iter_0000004.tmp" ] \
  && ok "failed background write: exit 1, one line, latest stays 2, nothing of 4 left" || fail "failed background write: exit $rc: $err; $(ls "$TMP/f" | tr '\n' ' ')"

# ---- 4. pipeline parallel
PP=(--global-batch-size 8 --pipeline-model-parallel-size 2)
timeout -k 5 120 mpirun -np 4 $KEEL "${RUN[@]}" "${PP[@]}" --save "$TMP/pp_sync" >"$TMP/pp_sync.log" 2>&1 || fail "PP 2: synchronous run: $(grep -m1 error "$TMP/pp_sync.log")"
timeout -k 5 120 mpirun -np 4 $KEEL "${RUN[@]}" "${PP[@]}" --save "$TMP/pp_async" --async-save >"$TMP/pp_async.log" 2>&1 || fail "PP 2: async run: $(grep -m1 error "$TMP/pp_async.log")"
for it in 2 4 6 8; do same "DP 2 x PP 2 async" "$TMP/pp_sync" "$TMP/pp_async" $it; done
finish
