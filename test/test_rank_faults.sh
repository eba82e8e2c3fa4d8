#!/usr/bin/env bash
# A rank that dies or stops answering ends the job, and the run resumes byte for byte.
# Under mpirun at 4 ranks (DP 2 x PP 2 with ZeRO-1, and TP 2 x DP 2), saving every 2 iterations:
#   - SIGSTOP of a random rank after a random iteration (a wedged GPU, a dead link, a process the
#     system stopped): its peers block in a collective or a receive; with --distributed-timeout-minutes
#     0.1 the job must end within the 6 s bound (plus start-up slack) with exit 1 and a line naming a
#     rank, the MPI call, the group and the iteration. Without the watchdog the job hangs forever and
#     the outer timeout fails the test;
#   - SIGKILL of a random rank: the launcher ends the job;
# after each, every published checkpoint (the one `latest` names) resumes to the end, and the final
# checkpoint is byte-identical to an uninterrupted run's (the same flags, --exit-interval 12).
# Also: one run with the watchdog's bound but no fault finishes (no false alarm), and a negative
# timeout is refused. `make test-crash-mpi KILLS=N` injects N faults per layout (2 in make test).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
BOUND=0.1   # minutes
KILLS=${KILLS:-2}  # faults per layout (make test-crash-mpi KILLS=N sets it)
RUN=("${TINY[@]}" --global-batch-size 8 --train-iters 400 --exit-interval 12 --save-interval 2 --eval-interval 0 --zero-stage 1
     --distributed-timeout-minutes $BOUND)

expect_fail 2 "--distributed-timeout-minutes -1: must be >= 0" $KEEL "${TINY[@]}" --train-iters 2 --distributed-timeout-minutes -1

# launch NAME LAYOUT...: a 4-rank run into $TMP/NAME in the background; sets PID (mpirun's)
launch() {
  local name=$1; shift
  mpirun -np 4 $KEEL "${RUN[@]}" "$@" --save "$TMP/$name" --load "$TMP/$name" >"$TMP/$name.log" 2>&1 &
  PID=$!
}

# fault NAME SIGNAL LAYOUT...: run, wait for iteration 3..6 (random), send SIGNAL to a random rank,
# check the job ends in time, then resume to the end and compare with the reference
fault() {
  local name=$1 sig=$2; shift 2
  local at=$((3 + RANDOM % 4)) t0 waited ranks victim rc
  launch "$name" "$@"
  for _ in $(seq 600); do grep -qE "^ iteration +$at/" "$TMP/$name.log" && break; kill -0 $PID 2>/dev/null || break; sleep 0.1; done
  ranks=($(pgrep -P $PID -f train_gpt_cpu))
  if [ ${#ranks[@]} -ne 4 ]; then fail "$name: found ${#ranks[@]} rank processes under mpirun"; kill -9 $PID; wait $PID; return; fi
  victim=${ranks[$((RANDOM % 4))]}
  kill -$sig $victim; t0=$(date +%s)
  # the bound is 6 s; start-up slack and a loaded machine allow 40 s before calling it a hang
  for _ in $(seq 400); do kill -0 $PID 2>/dev/null || break; sleep 0.1; done
  if kill -0 $PID 2>/dev/null; then
    fail "$name: $sig of rank pid $victim after iteration $at: the job still runs after 40 s"
    pkill -9 -P $PID; kill -9 $PID; wait $PID; return
  fi
  wait $PID; rc=$?; waited=$(( $(date +%s) - t0 ))
  [ $rc -ne 0 ] || fail "$name: the job exited 0 after $sig of a rank"
  if [ $sig = STOP ]; then
    local line; line=$(grep -m1 -E "^error: rank [0-3]: MPI_[A-Za-z]+.* on the .* did not complete in [0-9]+ s \(at iteration [0-9]+; --distributed-timeout-minutes $BOUND\)" "$TMP/$name.log")
    [ -n "$line" ] && ok "$name: SIGSTOP of a rank after iteration $at: job ended in ${waited} s, exit $rc: ${line:0:150}" \
      || fail "$name: no watchdog line after SIGSTOP: $(grep -m3 -iE "error|abort" "$TMP/$name.log" | tr '\n' ' ')"
  else
    ok "$name: SIGKILL of a rank after iteration $at: job ended in ${waited} s, exit $rc"
  fi
  pkill -9 -f "save $TMP/$name " 2>/dev/null  # (a stopped rank the launcher left behind)
  local latest; latest=$(cat "$TMP/$name/latest_checkpointed_iteration.txt" 2>/dev/null)
  timeout -k 5 300 mpirun -np 4 $KEEL "${RUN[@]}" "$@" --save "$TMP/$name" --load "$TMP/$name" >"$TMP/$name.resume.log" 2>&1 \
    || { fail "$name: resume from checkpoint ${latest:-none} failed: $(grep -m2 error "$TMP/$name.resume.log")"; return; }
  if cmp -s "$TMP/ref/iter_0000012/model.bin" "$TMP/$name/iter_0000012/model.bin" \
     && cmp -s "$TMP/ref/iter_0000012/optimizer.bin" "$TMP/$name/iter_0000012/optimizer.bin"; then
    ok "$name: resumed from checkpoint ${latest:-none (fresh start)} to 12: model.bin and optimizer.bin byte-identical to the uninterrupted run"
  else fail "$name: resumed from ${latest:-none}: iteration 12 differs from the uninterrupted run"; fi
}

for layout in "dp2pp2:--pipeline-model-parallel-size 2" "tp2dp2:--tensor-model-parallel-size 2"; do
  tag=${layout%%:*}; flags=(${layout#*:})
  rm -rf "$TMP/ref"
  # the uninterrupted run, under the same bound: no false alarm
  timeout -k 5 300 mpirun -np 4 $KEEL "${RUN[@]}" "${flags[@]}" --save "$TMP/ref" >"$TMP/ref.log" 2>&1 \
    && [ -f "$TMP/ref/iter_0000012/model.bin" ] && ok "$tag: uninterrupted run under a ${BOUND}-minute bound: finished, no alarm" \
    || { fail "$tag: uninterrupted run: $(grep -m2 error "$TMP/ref.log")"; continue; }
  for ((k = 0; k < KILLS; k++)); do
    sig=$([ $((k % 2)) = 0 ] && echo STOP || echo KILL)
    fault "$tag.$k.${sig,,}" $sig "${flags[@]}"
    rm -rf "$TMP/$tag.$k.${sig,,}"
  done
done
echo "faults injected: $((2 * KILLS)) (SIGSTOP and SIGKILL alternating, per layout $KILLS); failures: $fails"
finish
