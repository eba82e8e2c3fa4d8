#!/usr/bin/env bash
# The LM head in chunks of positions (--classifier-chunk-rows, model.h gpt_head_rows/gpt_head_chunk):
#   1. CPU: chunks of 13 positions (not a divisor of B·T = 32: a short last chunk) train to the same
#      bytes as the unchunked head — JSONL (losses, grad norms, validation) and the checkpoint — so a
#      chunk that skips, repeats or misplaces a row fails; the start-up line names the chunking;
#   2. CPU, tensor parallel (2 ranks, the vocabulary-parallel loss per chunk): the same bytes as
#      unchunked at TP=2;
#   3. text samples (generation keeps only the last chunk's logits) identical with chunks of 5;
#   4. the emulated CUDA trainer (bf16): chunked within 1e-6 of unchunked (the emulated GEMM adds a
#      chunk's weight gradient to the accumulated sum, so the last bits may move), and --dry-run's
#      exact allocation count equals the trainer's with chunks;
#   5. auto on the GPU bounds the logits: --dry-run for GPT-2 124M at B=16, T=1024 in bf16 counts
#      (16384 − 2560)·50304·2 bytes fewer than with the whole micro-batch's logits (2560 rows: the
#      multiple of 128 that fits 256 MiB), and the CPU's auto keeps the whole micro-batch.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
RUN=("${TINY[@]}" --train-iters 4 --global-batch-size 4 --micro-batch-size 2 --save-interval 4)

# run NAME BIN [flags...]: metrics in $TMP/NAME.jsonl, checkpoint in $TMP/NAME.ck, log in $TMP/NAME.log
# (mpirun's own start-up can fail under load before any rank runs, "orte_session_dir failed", more so
# with two started at once: each run has its own session directory, and such a start is repeated
# once, from nothing)
run() {
  local name=$1 bin=$2 try; shift 2
  mkdir -p "$TMP/ompi_$name"
  for try in 1 2; do
    rm -rf "$TMP/$name.ck" "$TMP/$name.jsonl"
    OMPI_MCA_orte_tmpdir_base="$TMP/ompi_$name" $bin "${RUN[@]}" --metrics-file "$TMP/$name.jsonl" --save "$TMP/$name.ck" "$@" \
      >"$TMP/$name.log" 2>&1 && return
    [ $try = 1 ] && mpi_start_failed <"$TMP/$name.log" || break
  done
  fail "$name: the trainer failed"
  tail -5 "$TMP/$name.log"
}
same_run() {  # same_run WHAT A B: metrics (without timings) and checkpoint byte-identical
  if cmp -s <(strip_timing "$TMP/$2.jsonl") <(strip_timing "$TMP/$3.jsonl"); then ok "$1: metrics identical"; else fail "$1: metrics differ"; fi
  same_checkpoint "$1" "$TMP/$2.ck" "$TMP/$3.ck" 4
}

# ---- 1. CPU -----------------------------------------------------------------------------------------
run whole $KEEL &
run chunked $KEEL --classifier-chunk-rows 13 &
wait
same_run "CPU, chunks of 13 of 32 positions" whole chunked
line=$(grep -m1 '^LM head:' "$TMP/chunked.log")
[[ "$line" == *"13 of the micro-batch's 32 positions at once (3 chunk(s)"* ]] && ok "start-up: $line" || fail "start-up line: '$line'"
line=$(grep -m1 '^LM head:' "$TMP/whole.log")
[[ "$line" == *"32 of the micro-batch's 32 positions at once (1 chunk(s)"* ]] && ok "CPU auto: the whole micro-batch" || fail "CPU auto: '$line'"

# ---- 2. tensor parallel -----------------------------------------------------------------------------
run tp_whole "mpirun --oversubscribe -np 2 $KEEL" --tensor-model-parallel-size 2 &
run tp_chunked "mpirun --oversubscribe -np 2 $KEEL" --tensor-model-parallel-size 2 --classifier-chunk-rows 7 &
wait
same_run "TP=2, chunks of 7" tp_whole tp_chunked

# ---- 3. generation ----------------------------------------------------------------------------------
run sample_whole $KEEL --sample-interval 4 --sample-length 12 &
run sample_chunked $KEEL --sample-interval 4 --sample-length 12 --classifier-chunk-rows 5 &
wait
a=$(text_samples "$TMP/sample_whole.log"); b=$(text_samples "$TMP/sample_chunked.log")
[ -n "$a" ] && [ "$a" == "$b" ] && ok "text samples identical with chunks of 5" || fail "text samples differ or are missing"

# ---- 4. the emulated CUDA trainer -------------------------------------------------------------------
CUDA=build/train_gpt_emu
if [ -x "$CUDA" ]; then
  KEEL_EMU_PROFILE="$TMP/emu_whole.json" run emu_whole $CUDA &
  KEEL_EMU_PROFILE="$TMP/emu_chunked.json" run emu_chunked $CUDA --classifier-chunk-rows 13 &
  wait
  compare_jsonl "$TMP/emu_chunked.jsonl" "$TMP/emu_whole.jsonl" 1e-6 && ok "emulated CUDA: chunked within 1e-6 of unchunked" ||
    fail "emulated CUDA: chunked vs unchunked"
  total=$($KEEL --dry-run "${RUN[@]}" --classifier-chunk-rows 13 2>&1 | sed -nE 's/^gpu allocations: total ([0-9]+) bytes.*/\1/p')
  asked=$(python3 -c "import json; print(json.load(open('$TMP/emu_chunked.json'))['alloc_bytes'])")
  [ -n "$total" ] && [ "$total" == "$asked" ] && ok "--dry-run counts the chunked trainer's $asked bytes exactly" ||
    fail "--dry-run '$total' vs the chunked trainer's '$asked' bytes"
else
  fail "$CUDA not built (make build/train_gpt_emu)"
fi

# ---- 5. auto on the GPU -----------------------------------------------------------------------------
G124=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --micro-batch-size 16 --global-batch-size 16
      --train-iters 1 --bf16)
gpu_total() { $KEEL --dry-run "${G124[@]}" "$@" 2>&1 | sed -nE 's/^gpu allocations: total ([0-9]+) bytes.*/\1/p'; }
auto=$(gpu_total); whole=$(gpu_total --classifier-chunk-rows 16384)
want=$(( (16384 - 2560) * 50304 * 2 ))
[ -n "$auto" ] && [ -n "$whole" ] && [ $((whole - auto)) -eq $want ] && ok "GPU auto: 2560-row chunks, $want bytes of logits fewer at 124M" ||
  fail "GPU auto: whole $whole - auto $auto != $want"
finish
