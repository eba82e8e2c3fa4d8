#!/usr/bin/env bash
# Crash safety: a process killed while saving (after the model file, before the directory rename,
# before `latest` is replaced) leaves the previous checkpoint loadable, and the run resumed from it
# ends bit-identical to an uninterrupted one.
source "$(dirname "$0")/lib.sh"
$KEEL "${TINY[@]}" --train-iters 6 --save "$TMP/ref" >"$TMP/ref.log" 2>&1 || fail "reference run"
for stage in model rename latest; do
  d="$TMP/$stage"
  $KEEL "${TINY[@]}" --train-iters 6 --exit-interval 3 --save "$d" >"$d.1.log" 2>&1 || fail "$stage: first part"
  KEEL_FAULT_SAVE=$stage $KEEL "${TINY[@]}" --train-iters 6 --load "$d" --save "$d" >"$d.2.log" 2>&1
  rc=$?
  [ $rc -eq 137 ] && ok "$stage: killed mid-save (exit $rc)" || fail "$stage: expected SIGKILL, got $rc"
  [ "$(cat "$d/latest_checkpointed_iteration.txt")" = "3" ] && ok "$stage: latest still names iteration 3" || fail "$stage: latest changed"
  $KEEL "${TINY[@]}" --train-iters 6 --load "$d" --save "$d" >"$d.3.log" 2>&1 || { fail "$stage: resume after crash"; tail -3 "$d.3.log"; }
  grep -q "successfully loaded checkpoint from $d at iteration 3" "$d.3.log" || fail "$stage: did not resume from 3"
  for f in model.bin optimizer.bin state.txt; do
    cmp -s "$TMP/ref/iter_0000006/$f" "$d/iter_0000006/$f" || fail "$stage: $f differs from the uninterrupted run"
  done
  [ ! -e "$d/iter_0000006.tmp" ] && ok "$stage: stale temp directory cleaned" || fail "$stage: temp dir left behind"
done
# Re-saving an iteration that already exists swaps directories (old → iter_N.old, new → iter_N):
# killed between the two renames, `latest` still names a loadable checkpoint, and the next save
# cleans up. The `latest` stage above left iter_0000006 complete with latest = 3; reproduce that.
d="$TMP/swap"
$KEEL "${TINY[@]}" --train-iters 6 --exit-interval 3 --save "$d" >"$d.1.log" 2>&1 || fail "swap: first part"
KEEL_FAULT_SAVE=latest $KEEL "${TINY[@]}" --train-iters 6 --load "$d" --save "$d" >"$d.2.log" 2>&1
[ -d "$d/iter_0000006" ] || fail "swap: setup did not leave iter_0000006"
KEEL_FAULT_SAVE=swap $KEEL "${TINY[@]}" --train-iters 6 --load "$d" --save "$d" >"$d.3.log" 2>&1
[ $? -eq 137 ] && ok "swap: killed between the renames" || fail "swap: expected SIGKILL"
[ -d "$d/iter_0000006.old" ] && [ ! -d "$d/iter_0000006" ] && ok "swap: old directory set aside" || fail "swap: unexpected layout"
$KEEL "${TINY[@]}" --train-iters 6 --load "$d" --save "$d" >"$d.4.log" 2>&1 || fail "swap: resume"
grep -q "successfully loaded checkpoint from $d at iteration 3" "$d.4.log" || fail "swap: did not resume from 3"
for f in model.bin optimizer.bin state.txt; do
  cmp -s "$TMP/ref/iter_0000006/$f" "$d/iter_0000006/$f" || fail "swap: $f differs from the uninterrupted run"
done
[ ! -e "$d/iter_0000006.old" ] && ok "swap: set-aside directory removed after the save" || fail "swap: .old left"
finish
