#!/usr/bin/env bash
# run_requeue.sh — run a training command until it finishes, restarting it after a failure, as a
# scheduler's requeue would. The command must resume by itself: give it --load and --save naming the
# same directory (the first start finds no checkpoint and starts fresh; every restart continues from
# the last published one, byte for byte as if it had never stopped).
#
#   bash scripts/run_requeue.sh mpirun -np 8 ./train_gpt @my_run.args --load ckpt --save ckpt
#
# Exit 0 ends the loop (the run finished, or stopped cleanly: --exit-interval, the kill switch, the
# time limit, --exit-signal-handler). Exit 2 (a bad command line) also ends it: restarting cannot fix
# it. Any other exit (a rank died, the watchdog of --distributed-timeout-minutes ended a hung job, a
# failed save) restarts the command after KEEL_REQUEUE_DELAY seconds (default 10), at most
# KEEL_MAX_RESTARTS times (default 20). On slurm, scripts/run_gpu_slurm.sbatch requeues the job
# instead, which also replaces a node that failed.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: bash scripts/run_requeue.sh COMMAND [ARGS...]  (a command that resumes from --load)" >&2; exit 2; }
max=${KEEL_MAX_RESTARTS:-20}
delay=${KEEL_REQUEUE_DELAY:-10}
for ((attempt = 0; ; attempt++)); do
  echo "run_requeue: start $((attempt + 1)) (restarts left: $((max - attempt))): $*"
  "$@"
  rc=$?
  if [ $rc -eq 0 ]; then echo "run_requeue: the command exited 0 after $attempt restart(s)"; exit 0; fi
  if [ $rc -eq 2 ]; then echo "run_requeue: the command exited 2 (a bad command line): not restarting" >&2; exit 2; fi
  if [ $attempt -ge $max ]; then echo "run_requeue: exit $rc, and $max restarts are used up (KEEL_MAX_RESTARTS)" >&2; exit $rc; fi
  echo "run_requeue: the command exited $rc: restarting in $delay s from the last checkpoint" >&2
  sleep "$delay"
done
