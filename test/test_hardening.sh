#!/usr/bin/env bash
# Checkpoints under bad input: no code path replaces or damages a checkpoint that exists.
# Each refusal is one error line and a non-zero exit at start-up (no iteration ran: the metrics file
# holds no record), with the checkpoint directory exactly as it was (names, sizes, contents):
#   1. --load X --save X where X/latest_checkpointed_iteration.txt exists but cannot be read (a
#      dangling link; a directory; unreadable permissions when not run as root): refused (it used to
#      train from random weights and move `latest` forward, exit 0);
#   2. --load naming a regular file: refused, nothing written to --save (it used to start fresh);
#      `latest` holding 10^20: refused naming the value (it used to look for iter_9223372036854775807);
#   3. only a missing directory, or a directory without `latest`, starts fresh (with the warning);
#   4. --save naming a regular file, or a path under one (and, not as root, a directory without write
#      permission): refused before the first iteration (it used to fail at the first save, after
#      the iterations before it);
#   5. a save that fails (the file-size limit makes write() fail with EFBIG, as a full disk would
#      with ENOSPC) exits 1 with one error line and leaves the directory as it was: no iter_N.tmp/,
#      the published iteration and `latest` untouched.
source "$(dirname "$0")/lib.sh"
K=$KEEL
M="$TMP/m.jsonl"
# snapshot DIR: every name under DIR with its type, size and link target, and every file's md5
snapshot() { (cd "$1" && find . -printf '%p|%y|%s|%l\n' | sort && find . -type f -exec md5sum {} + | sort); }
# refused CODE PATTERN ARGS...: expect_fail (exit CODE, one error line matching PATTERN) and no
# iteration ran before the refusal
refused() {
  local code=$1 pattern=$2; shift 2
  rm -f "$M"
  expect_fail "$code" "$pattern" "$@" --metrics-file "$M"
  [ -s "$M" ] && fail "an iteration ran before the refusal: $*"
}
$K "${TINY[@]}" --train-iters 6 --exit-interval 3 --save "$TMP/ck" >"$TMP/ck.log" 2>&1 || fail "checkpoint run"
L=latest_checkpointed_iteration.txt

# 1. `latest` exists but cannot be read
cp -r "$TMP/ck" "$TMP/dangling" && ln -sf "$TMP/nowhere" "$TMP/dangling/$L"
cp -r "$TMP/ck" "$TMP/isdir" && rm "$TMP/isdir/$L" && mkdir "$TMP/isdir/$L"
cases=("dangling|No such file or directory" "isdir|Is a directory")
if [ "$(id -u)" != 0 ]; then  # root reads any file: the permission case needs another user
  cp -r "$TMP/ck" "$TMP/noperm" && chmod 000 "$TMP/noperm/$L" && cases+=("noperm|Permission denied")
fi
for c in "${cases[@]}"; do
  d="$TMP/${c%%|*}" why=${c#*|}
  before=$(snapshot "$d")
  refused 1 "$d/$L' exists but cannot be read: $why" $K "${TINY[@]}" --train-iters 6 --load "$d" --save "$d"
  [ "$(snapshot "$d")" = "$before" ] && ok "${c%%|*}: the checkpoint directory is unchanged" || fail "${c%%|*}: $d changed"
done

# 2. --load naming a file; `latest` out of range
refused 2 "--load $TMP/ck.log is not a directory" $K "${TINY[@]}" --train-iters 6 --load "$TMP/ck.log" --save "$TMP/new"
[ ! -e "$TMP/new" ] && ok "nothing written to --save" || fail "--save $TMP/new was created"
cp -r "$TMP/ck" "$TMP/huge" && echo 100000000000000000000 >"$TMP/huge/$L"
before=$(snapshot "$TMP/huge")
refused 1 "'$TMP/huge/$L' holds iteration 100000000000000000000, beyond any iteration" \
  $K "${TINY[@]}" --train-iters 6 --load "$TMP/huge" --save "$TMP/huge"
[ "$(snapshot "$TMP/huge")" = "$before" ] && ok "huge: the checkpoint directory is unchanged" || fail "huge: changed"

# 3. a fresh start: only with no directory, or no `latest` in it
mkdir -p "$TMP/nolatest"
for d in "$TMP/none" "$TMP/nolatest"; do
  $K "${TINY[@]}" --train-iters 3 --eval-interval 0 --load "$d" --save "$d" >"$TMP/fresh.log" 2>&1 \
    && grep -q "WARNING: could not find $d/$L: starting from random" "$TMP/fresh.log" && [ "$(cat "$d/$L")" = 3 ] \
    && ok "$(basename "$d"): starts fresh with the warning" || fail "$(basename "$d"): $(tail -2 "$TMP/fresh.log")"
done

# 4. an unusable --save, at start-up
sum=$(md5sum <"$TMP/ck.log")
refused 2 "--save $TMP/ck.log is not a directory" $K "${TINY[@]}" --train-iters 4 --save "$TMP/ck.log"
refused 2 "--save $TMP/ck.log/sub: cannot create '$TMP/ck.log/sub': Not a directory" $K "${TINY[@]}" --train-iters 4 --save "$TMP/ck.log/sub"
[ "$(md5sum <"$TMP/ck.log")" = "$sum" ] && ok "the file named by --save is unchanged" || fail "$TMP/ck.log changed"
if [ "$(id -u)" != 0 ]; then
  mkdir -p "$TMP/ro" && chmod 555 "$TMP/ro"
  refused 2 "--save $TMP/ro: cannot write there: Permission denied" $K "${TINY[@]}" --train-iters 4 --save "$TMP/ro"
fi

# 5. a save that fails leaves nothing behind and touches nothing published
cp -r "$TMP/ck" "$TMP/full"
before=$(snapshot "$TMP/full")
err=$( (trap '' XFSZ; ulimit -f 2000; $K "${TINY[@]}" --train-iters 6 --load "$TMP/full" --save "$TMP/full" 2>&1 >/dev/null) ); rc=$?
[ $rc -eq 1 ] && [ "$(grep -c '^error:' <<<"$err")" -eq 1 ] && grep -q "iter_0000006.tmp/model.bin' failed: File too large" <<<"$err" \
  && ok "the failed save: exit 1, $(grep '^error:' <<<"$err")" || fail "the failed save: exit $rc: $err"
[ "$(snapshot "$TMP/full")" = "$before" ] && ok "the failed save: no iter_0000006.tmp, iteration 3 and latest untouched" \
  || fail "the failed save changed the directory: $(ls "$TMP/full")"
finish
