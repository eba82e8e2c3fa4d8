#!/usr/bin/env bash
# Checkpoint durability: what survives a power loss, not only a killed process (the page cache
# outlives a SIGKILL, so test_checkpoint_crash cannot see a missing fsync).
#   1. order: an LD_PRELOAD shim (test/fsync_shim.c) records every open, write, fsync, mkdir and
#      rename under the run's directory. When `latest` is renamed to name iteration N, every file of
#      iter_N was fsync'd after its last write, iter_N.tmp/ after its files were created, and the
#      save directory after iter_N.tmp/ became iter_N/; latest's temp file was fsync'd before the
#      rename, and the directories above it were created durably; by the end of the run every entry and every file under the directory is durable
#      (the save directory's own creation included), also those of --export-llmc and --export-hf
#      (into a directory the export creates).
#   2. power loss: the run is killed right after each recorded call of its two saves in turn; then
#      what a power loss may undo is undone (a directory entry whose directory was not fsync'd after
#      it: the create removed, the rename reversed; a file not fsync'd after its last write: emptied,
#      as delayed allocation leaves it). The resumed run must load the previous checkpoint or the
#      new one, byte-identical to the uninterrupted run's, and the new one once its save returned.
source "$(dirname "$0")/lib.sh"
cc -shared -fPIC -O1 -o "$TMP/shim.so" test/fsync_shim.c -ldl || { fail "shim does not build"; finish; }
R="$TMP/run"
RUN=("${TINY[@]}" --train-iters 4 --save-interval 2 --save "$R/save")

# power_loss LOG ROOT: undo, under ROOT, what LOG's calls did not make durable.
# order LOG ROOT: the ordering checks of part 1 on a complete run's LOG.
# saves LOG: the record number (1-based) that ends each save, and the iteration it published.
analyse() {
  python3 - "$@" <<'PY'
import os, shutil, sys

def parse(path):
    ev = []
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        ev.append(f)
    return ev

def durability(ev):
    """(entry ops not yet durable, in order; inodes whose data is not yet durable)"""
    pending, dirty = [], {}
    for i, f in enumerate(ev):
        kind = f[0]
        if kind in ("CREATE", "MKDIR"):
            pending.append((i, f, {f[2]}))
        elif kind in ("RENAME", "EXCHANGE"):
            pending.append((i, f, {f[2], f[3]}))
        if kind == "WRITE":
            dirty[f[1]] = (i, f[2])
        if kind == "FSYNC":
            dirty.pop(f[1], None)
            for op in pending:
                op[2].discard(f[1])
            pending = [op for op in pending if op[2]]
    return pending, dirty

def where(root, ino):
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            if str(os.lstat(p).st_ino) == ino:
                return p
    if str(os.lstat(root).st_ino) == ino:
        return root
    return None

def power_loss(log, root):
    pending, dirty = durability(parse(log))
    for i, f, _ in reversed(pending):
        kind = f[0]
        if kind in ("CREATE", "MKDIR"):
            p = where(root, f[1])
            if p:
                shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
        else:
            src, dst, old = f[4], f[5], f[6]
            p, sdir, ddir = where(root, f[1]), where(root, f[2]), where(root, f[3])
            if not (p and sdir and ddir):
                continue
            back = os.path.join(sdir, os.path.basename(src))
            if kind == "EXCHANGE":
                os.rename(p, back + ".x"); os.rename(os.path.join(ddir, os.path.basename(dst)), p); os.rename(back + ".x", back)
                continue
            os.rename(p, back)
            if old != "-":
                with open(os.path.join(ddir, os.path.basename(dst)), "wb") as out:
                    out.write(b"" if old == "=" else bytes.fromhex(old))
    for ino, (i, path) in dirty.items():
        p = where(root, ino)
        if p and os.path.isfile(p):
            open(p, "wb").close()
    print(f"undone: {len(pending)} directory entries, {len(dirty)} files emptied")

def saves(log):
    ev = parse(log)
    for i, f in enumerate(ev):
        if f[0] == "RENAME" and f[5].endswith("/latest_checkpointed_iteration.txt"):
            j = next((k for k in range(i + 1, len(ev)) if ev[k][0] == "FSYNC" and ev[k][1] == f[3]), i)
            print(j + 1)

def order(log, root):
    ev = parse(log)
    bad = []
    for i, f in enumerate(ev):
        if not (f[0] == "RENAME" and f[5].endswith("/latest_checkpointed_iteration.txt")):
            continue
        pending, dirty = durability(ev[: i + 1])
        # the iteration this rename publishes: the last iter_N/ renamed into place before it
        it_dir = next(e[5] for e in reversed(ev[:i]) if e[0] == "RENAME" and "/iter_" in e[5] and not e[5].endswith(".tmp"))
        tmp_dir = it_dir + ".tmp"
        for ino, (w, path) in dirty.items():
            if path.startswith(tmp_dir + "/") or path.startswith(it_dir + "/") or ino == f[1]:
                bad.append(f"{path}: written (record {w + 1}) but not fsync'd before `latest` named {it_dir} (record {i + 1})")
        for j, e, _ in pending:
            if e is f:
                continue  # the publishing rename itself: durable by the end (checked below)
            if any(p.startswith(tmp_dir) or p.startswith(it_dir) or it_dir.startswith(p + "/") for p in e[3:6]):
                bad.append(f"{e[0]} {' '.join(e[3:6])} (record {j + 1}): its directory not fsync'd before `latest` named {it_dir} (record {i + 1})")
    pending, dirty = durability(ev)
    for ino, (w, path) in dirty.items():
        bad.append(f"{path}: written (record {w + 1}) and never fsync'd after")
    for j, e, _ in pending:
        bad.append(f"{e[0]} {' '.join(e[3:6])} (record {j + 1}): its directory never fsync'd after")
    for b in bad:
        print(b)
    n = sum(1 for f in ev if f[0] == "RENAME" and f[5].endswith("/latest_checkpointed_iteration.txt"))
    print(f"{len(ev)} records, {n} publishes of latest, {len(bad)} problems")
    sys.exit(1 if bad or n == 0 else 0)

mode = sys.argv[1]
if mode == "power_loss": power_loss(sys.argv[2], sys.argv[3])
elif mode == "order": order(sys.argv[2], sys.argv[3])
elif mode == "saves": saves(sys.argv[2])
PY
}

# ---- 1. the order of a whole run's calls --------------------------------------------------------
mkdir -p "$R"
KEEL_SHIM_ROOT="$R" KEEL_SHIM_LOG="$TMP/full.log" LD_PRELOAD="$TMP/shim.so" \
  $KEEL "${RUN[@]}" --export-llmc "$R/model.llmc.bin" --export-hf "$R/exports/hf" >"$TMP/full.out" 2>&1 || fail "the recorded run failed"
grep -q "^FSYNC" "$TMP/full.log" 2>/dev/null || fail "the shim recorded no fsync (LD_PRELOAD not in effect?)"
out=$(analyse order "$TMP/full.log" "$R") && ok "order: ${out##*$'\n'}" || fail "order: $out"
cp -r "$R/save" "$TMP/ref"

# ---- 2. a power loss right after each call of the saves -----------------------------------------
# Crash points: every record except the middle of a run of writes to one file (the pwrites of
# optimizer.bin's spans), from the first save's start to the second save's end.
ends=($(analyse saves "$TMP/full.log"))
first=$(grep -n "iter_0000002.tmp$" "$TMP/full.log" | head -1 | cut -d: -f1)
points=$(awk -F'\t' -v a="$first" -v b="${ends[1]:-0}" '
  NR >= a && NR <= b { key = $1 $2; if (key != prev || NR == b) { if (pending) print pending; print NR; pending = "" } else pending = NR; prev = key }
' "$TMP/full.log" | sort -nu)
[ -n "$first" ] && [ "${#ends[@]}" -eq 2 ] || fail "expected two saves in the recorded run"
tried=0 bad=0
for k in $points; do
  rm -rf "$R" && mkdir -p "$R"
  rc=$( { KEEL_SHIM_ROOT="$R" KEEL_SHIM_LOG="$TMP/k.log" KEEL_SHIM_CRASH_AT=$k LD_PRELOAD="$TMP/shim.so" \
          $KEEL "${RUN[@]}" >"$TMP/k.out" 2>&1; } 2>/dev/null; echo $?)  # (no "Killed" line from the shell)
  [ $rc -eq 137 ] || { fail "crash point $k: not killed (exit $rc)"; bad=$((bad+1)); continue; }
  analyse power_loss "$TMP/k.log" "$R" >"$TMP/k.undo" 2>&1 || { fail "crash point $k: simulation: $(cat "$TMP/k.undo")"; continue; }
  rm -f "$TMP/k.log"
  $KEEL "${TINY[@]}" --train-iters 4 --load "$R/save" >"$TMP/k.resume" 2>&1
  rc=$?
  loaded=$(grep -oE "successfully loaded checkpoint from .* at iteration [0-9]+" "$TMP/k.resume" | grep -oE "[0-9]+$")
  # allowed: the save in progress or the one before it; once a save returned, nothing older
  if [ "$k" -le "${ends[0]}" ]; then allowed=" 2 "; [ "$k" -lt "${ends[0]}" ] && allowed=" none 2 "
  else allowed=" 4 "; [ "$k" -lt "${ends[1]}" ] && allowed=" 2 4 "; fi
  why=""
  [ $rc -eq 0 ] || why="resume failed (exit $rc): $(grep -m1 '^error' "$TMP/k.resume")"
  [ -z "$why" ] && [[ "$allowed" != *" ${loaded:-none} "* ]] && why="resumed from ${loaded:-nothing}, allowed:$allowed"
  if [ -z "$why" ] && [ -n "$loaded" ]; then
    for f in model.bin optimizer.bin state.txt; do
      cmp -s "$TMP/ref/iter_000000$loaded/$f" "$R/save/iter_000000$loaded/$f" || why="iteration $loaded: $f differs from the uninterrupted run's"
    done
  fi
  tried=$((tried+1))
  [ -z "$why" ] || { fail "power loss after record $k ($(sed -n "${k}p" "$TMP/full.log" | cut -f1,4 | sed "s|$R/||")): $why [$(cat "$TMP/k.undo")]"; bad=$((bad+1)); }
  [ $bad -ge 3 ] && break
done
[ $bad -eq 0 ] && ok "power loss after each of $tried calls of two saves: the resumed run loads the previous or the new checkpoint, intact"
finish
