#!/usr/bin/env bash
# No run destroys or mixes into another run's files (llmc/outputs.h), and no refusal is lost under
# a launcher. Each case used to lose data:
#   1. a fresh run (no --load) of another model shape with an existing --save: refused before
#      anything is written, naming the directory and its latest iteration (it used to overwrite
#      iter_0000002/model.bin with the new shape and move `latest` from 4 back to 2);
#   2. a fresh run with a non-empty --metrics-file: refused, the file untouched (it was truncated);
#   3. a mistyped --load (a path that does not exist) with the --save of a run: refused saying that
#      --load does not exist (it started from random, cut the metrics to one record, moved `latest`);
#   4. --start-over: the earlier checkpoints move into DIR/previous_run_1/ (byte for byte, and
#      loadable from there), the metrics file to m.previous_run_1.jsonl; nothing is deleted;
#   5. the restart loop (--load = --save): a run that died after its last save left records of later
#      iterations; the restarted run keeps the records up to the loaded iteration and moves the rest
#      into a side file, saying how many (they used to be dropped); a first start that finds no
#      checkpoint moves every record aside;
#   6. --tensorboard-dir holding event files, an existing --export-llmc file and --export-hf
#      directory: refused for a fresh run, moved aside under --start-over (exports used to be replaced);
#   7. refusals under mpirun -np 2 and 4 beside CPU hogs, 50 times: exactly one error line and exit 2
#      every time (a rank > 0 exiting first used to let mpirun kill rank 0 before it printed).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
K=$KEEL
L=latest_checkpointed_iteration.txt
WIDE=("${TINY[@]}"); WIDE[3]=64  # another model shape: --hidden-size 64
# snapshot DIR: every name under DIR with its type and size, and every file's md5
snapshot() { (cd "$1" && find . -printf '%p|%y|%s\n' | sort && find . -type f -exec md5sum {} + | sort); }

$K "${TINY[@]}" --train-iters 4 --save-interval 2 --save "$TMP/ck" --metrics-file "$TMP/m.jsonl" >"$TMP/a.log" 2>&1 \
  || fail "first run"
[ "$(cat "$TMP/ck/$L")" = 4 ] && [ "$(wc -l <"$TMP/m.jsonl")" -eq 6 ] || fail "first run: latest $(cat "$TMP/ck/$L"), $(wc -l <"$TMP/m.jsonl") records"
before=$(snapshot "$TMP/ck"); mbefore=$(md5sum <"$TMP/m.jsonl")
unchanged() {  # unchanged WHAT: the first run's checkpoints and metrics exactly as they were
  [ "$(snapshot "$TMP/ck")" = "$before" ] && [ "$(md5sum <"$TMP/m.jsonl")" = "$mbefore" ] \
    && ok "$1: checkpoints and metrics untouched" || fail "$1: the first run's files changed"
}

# 1. another shape, same --save (and a new metrics file)
expect_fail 2 "--save $TMP/ck holds checkpoints up to iteration 4.*no --load" \
  $K "${WIDE[@]}" --train-iters 2 --lr-warmup-iters 1 --save-interval 2 --save "$TMP/ck" --metrics-file "$TMP/new.jsonl"
[ -e "$TMP/new.jsonl" ] && fail "1: the refused run wrote its metrics file"
unchanged "1. fresh run into a used --save"

# 2. same metrics file, new --save
expect_fail 2 "--metrics-file $TMP/m.jsonl holds 6 records up to iteration 4" \
  $K "${WIDE[@]}" --train-iters 2 --lr-warmup-iters 1 --save "$TMP/ck_new" --metrics-file "$TMP/m.jsonl"
unchanged "2. fresh run into a used --metrics-file"

# 3. the args file reused with a mistyped --load
printf '%s ' "${TINY[@]}" --train-iters 6 --save-interval 2 --save "$TMP/ck" --metrics-file "$TMP/m.jsonl" >"$TMP/run.args"
expect_fail 2 "--save $TMP/ck holds checkpoints up to iteration 4, but --load $TMP/ckk does not exist" \
  $K @"$TMP/run.args" --load "$TMP/ckk"
unchanged "3. mistyped --load"

# 4. --start-over: everything earlier moved aside, byte for byte, and still loadable
cp "$TMP/m.jsonl" "$TMP/m.orig"
out=$($K "${WIDE[@]}" --train-iters 2 --lr-warmup-iters 1 --save-interval 2 --save "$TMP/ck" --metrics-file "$TMP/m.jsonl" \
        --start-over 2>&1) || fail "4: --start-over run: $(grep error <<<"$out")"
grep -q "moved aside: --save $TMP/ck held checkpoints up to iteration 4; now in $TMP/ck/previous_run_1/" <<<"$out" \
  || fail "4: no line saying where the checkpoints went"
[ "$(snapshot "$TMP/ck/previous_run_1")" = "$before" ] && ok "4: the earlier checkpoints are in previous_run_1/, byte for byte" \
  || fail "4: previous_run_1/ differs from the earlier checkpoints"
cmp -s "$TMP/m.orig" "$TMP/m.previous_run_1.jsonl" && ok "4: the earlier metrics are in m.previous_run_1.jsonl" \
  || fail "4: m.previous_run_1.jsonl is not the earlier metrics file"
[ "$(cat "$TMP/ck/$L")" = 2 ] && [ "$(wc -l <"$TMP/m.jsonl")" -eq 3 ] && ok "4: the new run's checkpoint and records stand alone" \
  || fail "4: new run: latest $(cat "$TMP/ck/$L"), $(wc -l <"$TMP/m.jsonl") records"
# (the output is read whole: the trainer prints the way on after the line, which a grep -q that stopped reading would cut with SIGPIPE)
grep -q "nothing to train: iteration 4" <<<"$($K "${TINY[@]}" --train-iters 4 --load "$TMP/ck/previous_run_1" --save "$TMP/ck/previous_run_1" 2>&1)" \
  && ok "4: --load DIR/previous_run_1 resumes the earlier run" || fail "4: previous_run_1/ does not load"

# 5. restart loop: records after the last save move aside, the rest stays
R=(--save "$TMP/loop" --load "$TMP/loop" --metrics-file "$TMP/loop.jsonl" --save-interval 2)
$K "${TINY[@]}" --train-iters 4 --exit-interval 2 "${R[@]}" >/dev/null 2>&1 || fail "5: first attempt"
{ KEEL_FAULT_SAVE=model $K "${TINY[@]}" --train-iters 4 "${R[@]}" >/dev/null 2>&1; } 2>/dev/null  # dies saving iteration 4
[ "$(cat "$TMP/loop/$L")" = 2 ] && [ "$(wc -l <"$TMP/loop.jsonl")" -eq 5 ] || fail "5: setup: latest $(cat "$TMP/loop/$L"), $(wc -l <"$TMP/loop.jsonl") records"
cp "$TMP/loop.jsonl" "$TMP/loop.orig"
out=$($K "${TINY[@]}" --train-iters 4 "${R[@]}" 2>&1) || fail "5: restarted run"
grep -q "moved 3 record(s) after iteration 2 aside to $TMP/loop.previous_run_1.jsonl" <<<"$out" || fail "5: no line saying 3 records moved"
sort "$TMP/loop.orig" | cmp -s - <(head -n 2 "$TMP/loop.jsonl" | cat - "$TMP/loop.previous_run_1.jsonl" | sort) \
  && ok "5: records 1-2 kept, the 3 later ones in the side file (none lost)" || fail "5: kept + moved records differ from the file before"
python3 -c "import json,sys; its=[json.loads(l)['iteration'] for l in open(sys.argv[1])]; sys.exit(its != [1, 2, 3, 3, 4, 4])" "$TMP/loop.jsonl" \
  && ok "5: the file continues from iteration 3 once" || fail "5: iterations $(cut -c1-20 "$TMP/loop.jsonl" | tr '\n' ' ')"
printf '{"iteration": 1, "lm_loss": 9}\n{"iteration": 2, "lm_lo' >"$TMP/first.jsonl"  # a first attempt that never saved
out=$($K "${TINY[@]}" --train-iters 2 --lr-warmup-iters 1 --load "$TMP/first" --save "$TMP/first" --metrics-file "$TMP/first.jsonl" 2>&1) || fail "5: first start"
grep -q "moved 2 record(s) after iteration 0 aside" <<<"$out" && [ "$(wc -l <"$TMP/first.previous_run_1.jsonl")" -eq 2 ] \
  && ok "5: a start without a checkpoint moves every record aside (the torn one too)" || fail "5: first start: $(grep moved <<<"$out")"

# 6. TensorBoard and exports
$K "${TINY[@]}" --train-iters 2 --lr-warmup-iters 1 --tensorboard-dir "$TMP/tb" --export-llmc "$TMP/x.bin" --export-hf "$TMP/hf" >/dev/null 2>&1 || fail "6: first run"
tb=$(ls "$TMP/tb"); xsum=$(md5sum <"$TMP/x.bin"); hsum=$(cat "$TMP/hf"/* | md5sum)
expect_fail 2 "--tensorboard-dir $TMP/tb holds 1 event file" $K "${TINY[@]}" --train-iters 2 --lr-warmup-iters 1 --tensorboard-dir "$TMP/tb"
expect_fail 2 "--export-llmc $TMP/x.bin holds an earlier export" $K "${TINY[@]}" --train-iters 2 --lr-warmup-iters 1 --export-llmc "$TMP/x.bin"
expect_fail 2 "--export-hf $TMP/hf holds an earlier export" $K "${TINY[@]}" --train-iters 2 --lr-warmup-iters 1 --export-hf "$TMP/hf"
$K "${TINY[@]}" --train-iters 2 --lr-warmup-iters 1 --tensorboard-dir "$TMP/tb" --export-llmc "$TMP/x.bin" --export-hf "$TMP/hf" --start-over >/dev/null 2>&1 \
  || fail "6: --start-over run"
[ "$(ls "$TMP/tb/previous_run_1")" = "$tb" ] && [ "$(ls "$TMP/tb" | grep -c tfevents)" -eq 1 ] \
  && ok "6: the earlier event file is in tb/previous_run_1/, the new one beside" || fail "6: tensorboard: $(ls -R "$TMP/tb")"
[ "$(md5sum <"$TMP/x.previous_run_1.bin")" = "$xsum" ] && [ "$(cat "$TMP/hf.previous_run_1"/* | md5sum)" = "$hsum" ] \
  && [ -s "$TMP/x.bin" ] && [ -s "$TMP/hf/model.safetensors" ] && ok "6: the earlier exports moved aside intact, the new ones written" \
  || fail "6: exports: $(ls "$TMP")"

# 7. refusals under mpirun beside CPU hogs, in two lanes at once (load too): the error line is never
# lost. Half are flag errors (every rank meets them), half the --save refusal (rank 0 decides, the
# others wait for its verdict).
lane() {  # lane FIRST LAST: runs FIRST..LAST, one line "KIND ok|lost DETAIL" each
  local i np kind args want out rc attempt
  for i in $(seq "$1" "$2"); do
    np=$((i % 2 ? 2 : 4))
    if [ $((i % 4)) -lt 2 ]; then kind=flag args=(--tensor-model-parallel-size 4); want="not divisible by --tensor-model-parallel-size 4"
    else kind=save args=(--save "$TMP/ck"); want="--save $TMP/ck holds checkpoints up to iteration 2"; fi
    # mpirun's own start-up can fail under this load before any rank runs ("orte_session_dir failed",
    # seen once in 50 on 2 cores): that is not keel losing a line, so such a run is started again
    # (at most twice), each lane with its own session directory
    for attempt in 1 2 3; do
      out=$(OMPI_MCA_orte_tmpdir_base="$TMP/ompi_$1" timeout -k 5 60 mpirun --oversubscribe -np $np $K "${TINY[@]}" --train-iters 2 \
            --global-batch-size 8 "${args[@]}" 2>&1); rc=$?
      mpi_start_failed <<<"$out" || break
      echo "mpirun start-up failed (run $i, attempt $attempt): started again" >&2
    done
    if [ $rc -eq 2 ] && [ "$(grep -c '^error:' <<<"$out")" -eq 1 ] && grep -q -- "^error: .*$want" <<<"$out"; then echo "$kind ok"
    else echo "$kind lost run $i (np $np): exit $rc, $(grep -c '^error:' <<<"$out") error lines: $(tail -c 200 <<<"$out" | tr '\n' ' ')"; fi
  done
}
hogs=(); for i in 1 2 3 4; do yes >/dev/null & hogs+=($!); done
mkdir -p "$TMP/ompi_1" "$TMP/ompi_26"
trap 'kill "${hogs[@]}" 2>/dev/null; rm -rf "$TMP"' EXIT  # no hog outlives the test
lane 1 25 >"$TMP/lane1" & l1=$!
lane 26 50 >"$TMP/lane2" & l2=$!
wait $l1 $l2
cat "$TMP/lane1" "$TMP/lane2" >"$TMP/lanes"
grep lost "$TMP/lanes" | head -n 2 | sed 's/^/  /'
for kind in flag save; do
  what=$([ $kind = flag ] && echo "flag errors (every rank meets them)" || echo "--save refusals (rank 0 decides, the others wait)")
  n=$(grep -c "^$kind " "$TMP/lanes"); bad=$(grep -c "^$kind lost" "$TMP/lanes")
  [ "$n" -eq 25 ] && [ "$bad" -eq 0 ] && ok "7: $n $what under mpirun -np 2/4 beside 4 CPU hogs: one error line, exit 2" \
    || fail "7: $bad of $n $what under mpirun lost the error line or exit 2"
done
finish
