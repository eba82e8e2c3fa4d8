#!/usr/bin/env bash
# test_crash_random.sh — crash safety, measured: the trainer, saving every
# iteration, is killed with SIGKILL at random instants and resumed with --load each time; every run
# that then reaches the end must hold a final checkpoint (model.bin, optimizer.bin, state.txt)
# byte-identical to an uninterrupted run's.
#   KEEL_CRASH_KILLS=N (default 8; `make test-crash KILLS=200`), KEEL_CRASH_SEED=S (default: the
#   clock; printed, so a failure can be replayed).
# A chain is one checkpoint directory: start, kill, resume, kill, ... until a run finishes unkilled,
# then it is compared and the next chain starts fresh. Each delay is uniform in [0, T] with T the
# uninterrupted run's wall time, so kills land at start-up, mid-iteration and mid-save. A kill counts
# as inside a save when it leaves the save's traces: an iter_N.tmp/ or iter_N.old/, a
# latest_checkpointed_iteration.txt.tmp, or an iter_N/ newer than `latest` (published, not yet named).
source "$(dirname "$0")/lib.sh"
kills=${KEEL_CRASH_KILLS:-8}
seed=${KEEL_CRASH_SEED:-$(date +%s)}
RANDOM=$seed
echo "seed $seed ($kills kills; KEEL_CRASH_SEED=$seed replays the delays)"
export OMP_NUM_THREADS=1
N=8
ARGS=("${TINY[@]}" --train-iters $N --save-interval 1 --eval-interval 0)
last=$(printf 'iter_%07d' $N)
t0=$(date +%s%N)
$KEEL "${ARGS[@]}" --save "$TMP/ref" >"$TMP/ref.log" 2>&1 || { fail "the uninterrupted run: $(tail -2 "$TMP/ref.log")"; finish; }
T=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "uninterrupted run: $N iterations, a save after each, ${T} ms"

# in_save DIR: the save's traces after a kill
in_save() {
  local d=$1 latest=-1 newest=-1 x
  compgen -G "$d/iter_*.tmp" >/dev/null || compgen -G "$d/iter_*.old" >/dev/null && return 0
  [ -e "$d/latest_checkpointed_iteration.txt.tmp" ] && return 0
  [ -f "$d/latest_checkpointed_iteration.txt" ] && latest=$(cat "$d/latest_checkpointed_iteration.txt")
  for x in "$d"/iter_*; do [[ "$x" =~ iter_([0-9]+)$ ]] && newest=$((10#${BASH_REMATCH[1]})); done
  [ "$newest" -gt "$latest" ]
}
# compare DIR: the chain's final checkpoint against the uninterrupted one
compare() {
  local f
  for f in model.bin optimizer.bin state.txt; do
    cmp -s "$TMP/ref/$last/$f" "$1/$last/$f" || { fail "chain $chain ($resumes resumes): final $f differs from the uninterrupted run"; return 1; }
  done
  identical=$((identical + resumes))
}

done_kills=0 inside=0 identical=0 chain=0 resumes=0 chains=0
start=$(date +%s)
while true; do
  d="$TMP/chain$chain"
  $KEEL "${ARGS[@]}" --load "$d" --save "$d" >>"$TMP/chain$chain.log" 2>&1 &
  pid=$!
  if [ $done_kills -lt $kills ]; then
    ms=$(( (RANDOM * 32768 + RANDOM) % (T + 1) ))
    sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
    kill -KILL $pid 2>/dev/null
  fi
  { wait $pid; } 2>/dev/null; rc=$?  # (without bash's "Killed" line)
  if [ $rc -eq 137 ]; then
    done_kills=$((done_kills + 1)) resumes=$((resumes + 1))
    in_save "$d" && inside=$((inside + 1))
    continue
  fi
  if [ $rc -ne 0 ]; then fail "chain $chain: a resumed run exited $rc: $(grep -m1 '^error' "$TMP/chain$chain.log")"; break; fi
  compare "$d"
  chains=$((chains + 1))
  rm -rf "$d"
  [ $done_kills -ge $kills ] && break
  chain=$((chain + 1)) resumes=0
done
echo "$done_kills kills, $inside inside a save, $([ $identical -eq $done_kills ] && echo all || echo only) $identical resumed byte-identical ($chains chains, $(( $(date +%s) - start )) s, seed $seed)"
[ $identical -eq $done_kills ] && [ $done_kills -eq $kills ] && ok "every killed run resumed to the uninterrupted run's bytes" || fail "not every kill resumed byte-identical"
[ $inside -gt 0 ] || [ $kills -lt 8 ] || fail "no kill landed inside a save: the test did not exercise the save"
finish
