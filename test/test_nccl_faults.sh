#!/usr/bin/env bash
# An NCCL communicator that fails asynchronously ends the job at once, and every end of a job by the
# watchdog aborts the NCCL communicators first. The emulated CUDA trainer under mpirun -np 2, with the
# emulated NCCL's planted failure (KEEL_EMU_NCCL_FAULT=RANK@CALL[:hang], test/cuda_emu/nccl.h: the
# CALL-th collective of world rank RANK never finishes on any member and RANK's communicator reports
# ncclRemoteError, as a dead peer or a broken link makes NCCL report):
#   1. data parallel (the world's communicator): the job ends non-zero with one line from rank 1
#      naming the rank, the group (the world) and NCCL's error string, found by the host's wait on
#      the GPU while it polls (not the watchdog's timeout, which is set to a minute here and would
#      print "did not complete"), and rank 1 aborted its communicator (the emulation prints
#      ncclCommAbort) after that line;
#   2. tensor parallel: the line names the tensor-parallel group, and every communicator of the rank
#      is aborted, the failed one among them;
#   3. a hang NCCL does not notice (:hang): the watchdog ends the job after its bound with its line,
#      says NCCL reports no error, and aborts the communicators too;
# also: the same run without a fault finishes (the polling waits raise no false alarm), and a
# malformed KEEL_EMU_NCCL_FAULT is refused. The seconds each job took are printed, not asserted.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
CUDA=build/train_gpt_emu
[ -x "$CUDA" ] || { fail "$CUDA not built (make build/train_gpt_emu)"; finish; }
unset KEEL_EMU_NCCL_FAULT
RUN=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16 --micro-batch-size 1 --lr 1e-3 --seed 3
     --train-data-path data/brown/brown_train.bin --eval-interval 0 --log-interval 1 --train-iters 8)
ERR="remote process exited or there was a network error"

# job NAME FAULT TIMEOUT_MINUTES FLAGS...: a 2-rank run into $TMP/NAME.log; sets RC and SECS
job() {
  local name=$1 fault=$2 bound=$3 t0; shift 3
  t0=$(date +%s.%N)
  KEEL_EMU_NCCL_FAULT=$fault timeout -k 5 180 mpirun -np 2 $CUDA "${RUN[@]}" --distributed-timeout-minutes "$bound" \
    --save "$TMP/$name.ck" "$@" >"$TMP/$name.log" 2>&1
  RC=$?
  SECS=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}
# aborts LOG RANK: the emulation's ncclCommAbort lines of world rank RANK
aborts() { grep -cE "^NCCL emulation: ncclCommAbort: world rank $2 aborts" "$1"; }
# after LOG A B: the first line matching A comes before the first matching B
after() { awk -v a="$2" -v b="$3" '$0 ~ a && !x { x = NR } $0 ~ b && !y { y = NR } END { exit !(x && y && x < y) }' "$1"; }

job clean "" 1 --global-batch-size 2 --zero-stage 1
[ $RC = 0 ] && [ -f "$TMP/clean.ck/iter_0000008/model.bin" ] && ! grep -q "ncclCommAbort" "$TMP/clean.log" \
  && ok "no fault: DP 2 finished in ${SECS} s, nothing aborted" || fail "no fault: exit $RC: $(grep -m2 -E 'error|NCCL' "$TMP/clean.log")"

# ---- 1. an asynchronous error on the world's communicator (data parallel)
job dp "1@30" 1 --global-batch-size 2 --zero-stage 1
line=$(grep -m1 "^error: rank 1: NCCL" "$TMP/dp.log")
if [ $RC -ne 0 ] && grep -qE "^error: rank 1: NCCL reported an asynchronous error on the world \(2 ranks\): $ERR \(at iteration [0-9]+, waiting for the GPU" <<<"$line" \
   && ! grep -q "did not complete" "$TMP/dp.log"; then
  ok "DP 2: asynchronous error on rank 1 ended the job in ${SECS} s (bound 60 s), exit $RC: ${line:0:170}"
else
  fail "DP 2: exit $RC, not ended by the polling wait: $(grep -m3 -E '^error|did not complete' "$TMP/dp.log" | cut -c1-200 | tr '\n' ' ')"
fi
[ "$(aborts "$TMP/dp.log" 1)" -ge 1 ] && grep -q "world rank 1 aborts .*(the failed one)" "$TMP/dp.log" \
  && after "$TMP/dp.log" "^error: rank 1: NCCL" "ncclCommAbort: world rank 1" \
  && ok "DP 2: rank 1 aborted its communicator after the line: $(grep -m1 'ncclCommAbort: world rank 1' "$TMP/dp.log")" \
  || fail "DP 2: no ncclCommAbort from rank 1 after its line ($(aborts "$TMP/dp.log" 1) abort lines)"

# ---- 2. on the tensor-parallel group
job tp "0@20" 1 --global-batch-size 1 --tensor-model-parallel-size 2
line=$(grep -m1 "^error: rank 0: NCCL" "$TMP/tp.log")
n=$(aborts "$TMP/tp.log" 0)
[ $RC -ne 0 ] && grep -qE "^error: rank 0: NCCL reported an asynchronous error on the tensor-parallel group of ranks \{0, 1\}: $ERR " <<<"$line" \
  && ! grep -q "did not complete" "$TMP/tp.log" \
  && ok "TP 2: ended in ${SECS} s, exit $RC: ${line:0:150}" || fail "TP 2: exit $RC: $(grep -m2 '^error' "$TMP/tp.log" | cut -c1-200)"
[ "$n" -ge 2 ] && [ "$(grep -c "world rank 0 aborts .*(the failed one)" "$TMP/tp.log")" = 1 ] \
  && ok "TP 2: rank 0 aborted all $n of its communicators, the failed one among them" || fail "TP 2: $n abort lines from rank 0"

# ---- 3. a hang without an error: the watchdog's bound, then the abort
job hang "1@30:hang" 0.1 --global-batch-size 2 --zero-stage 1
line=$(grep -m1 -E "^error: rank [01]: .* did not complete in" "$TMP/hang.log")
r=$(sed -E 's/^error: rank ([01]).*/\1/' <<<"$line")
[ $RC -ne 0 ] && grep -qE "waiting for the GPU .* did not complete in [0-9]+ s \(at iteration [0-9]+; --distributed-timeout-minutes 0.1\)" <<<"$line" \
  && grep -q "^note: rank $r: NCCL reports no asynchronous error on this rank's communicators" "$TMP/hang.log" \
  && ! grep -q "NCCL reported an asynchronous error" "$TMP/hang.log" \
  && ok "hang: the watchdog ended the job in ${SECS} s (bound 6 s), exit $RC: ${line:0:130}" \
  || fail "hang: exit $RC: $(grep -m3 -E '^error|^note' "$TMP/hang.log" | cut -c1-200 | tr '\n' ' ')"
[ -n "$r" ] && [ "$(aborts "$TMP/hang.log" "$r")" -ge 1 ] && after "$TMP/hang.log" "^error: rank $r: " "ncclCommAbort: world rank $r" \
  && ok "hang: rank $r aborted its communicator before MPI_Abort" || fail "hang: no ncclCommAbort from the watchdog's rank ${r:-?}"

# ---- the switch's own errors
out=$(KEEL_EMU_NCCL_FAULT=1 timeout -k 5 60 mpirun -np 2 $CUDA "${RUN[@]}" --global-batch-size 2 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "KEEL_EMU_NCCL_FAULT=1: expected RANK@CALL" <<<"$out" && ok "malformed KEEL_EMU_NCCL_FAULT refused (exit $rc)" \
  || fail "malformed KEEL_EMU_NCCL_FAULT: exit $rc: $(grep -m1 -i fault <<<"$out")"
finish
