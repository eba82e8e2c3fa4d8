#!/usr/bin/env bash
# Checkpoints, exports, samples and per-layer statistics under pipeline parallelism (docs/internals.md#parallelism, #checkpoints):
#   1. bit-exact resume at PP=2 × DP=2 with ZeRO-1 (8-bit Adam with percentile clipping, dropout on):
#      6 iterations straight = 3, exit, resume, 3 more — every record and the final checkpoint's bytes;
#   2. reshard: that PP=2 × DP=2 ZeRO-1 checkpoint loaded and written again at PP=1, PP=3 (uneven:
#      layers 2+1+1) and PP=4 holds the same model.bin, optimizer.bin and state.txt, byte for byte,
#      for fp32 Adam and for 8-bit Adam; and a PP=1 checkpoint re-saved at PP=2 is unchanged;
#   3. training continues from a resharded checkpoint: PP=1 from the PP=2 checkpoint computes the
#      same first loss and tracks PP=2 within 1e-5;
#   4. --export-llmc at PP=2 = the export of the same weights by one process (from the checkpoint);
#   5. --sample-interval at PP=2 prints the text one process prints (the last stage draws, the
#      stages forward the window down the pipeline);
#   6. --log-layer-norms-interval at PP=2: every per-layer norm and RMS within 1e-6 of one process
#      (each stage fills its own layers' entries; the tied embedding counted once).
#   7. the emulated CUDA trainer: a PP=2 checkpoint re-saved at PP=1 is byte-identical.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
command -v mpirun >/dev/null || { fail "mpirun not found (scripts/setup.sh installs OpenMPI)"; finish; }
MPI=(mpirun --oversubscribe -np)
# 4 layers, micro-batch 1: PP=2 x DP=2 runs 4 micro-batches per rank of the global batch 8
ARGS=("${TINY[@]}" --num-layers 4 --micro-batch-size 1 --global-batch-size 8 --hidden-dropout 0.1 --attention-dropout 0.1
      --eval-interval 3 --eval-iters 1)
Q8=(--optimizer adam8bit --adam8bit-min-size 64 --adam8bit-block-size 64 --adam8bit-percentile-clipping 95)
run() {  # name np args...
  local name=$1 np=$2; shift 2
  timeout -k 10 300 "${MPI[@]}" "$np" $KEEL "$@" --metrics-file "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1 \
    || { fail "$name: run failed"; tail -8 "$TMP/$name.log"; }
}

# 1. bit-exact resume, PP=2 x DP=2 ZeRO-1, 8-bit Adam
run full 4 "${ARGS[@]}" "${Q8[@]}" --pipeline-model-parallel-size 2 --zero-stage 1 --train-iters 6 --save "$TMP/full" --save-interval 3
run part_a 4 "${ARGS[@]}" "${Q8[@]}" --pipeline-model-parallel-size 2 --zero-stage 1 --train-iters 6 --save "$TMP/part" \
  --save-interval 3 --exit-interval 3
cp "$TMP/part_a.jsonl" "$TMP/part_b.jsonl"
timeout -k 10 300 "${MPI[@]}" 4 $KEEL "${ARGS[@]}" "${Q8[@]}" --pipeline-model-parallel-size 2 --zero-stage 1 --train-iters 6 \
  --save "$TMP/part" --save-interval 3 --load "$TMP/part" --metrics-file "$TMP/part_b.jsonl" >"$TMP/part_b.log" 2>&1 \
  || { fail "resume run failed"; tail -5 "$TMP/part_b.log"; }
grep -q "successfully loaded checkpoint from $TMP/part at iteration 3" "$TMP/part_b.log" || fail "the resume did not load iteration 3"
cmp -s <(strip_timing "$TMP/full.jsonl") <(strip_timing "$TMP/part_b.jsonl") \
  && ok "PP=2 x DP=2 ZeRO-1 resume: every record identical to the uninterrupted run" || fail "PP=2 x DP=2 resume: records differ"
same_checkpoint "PP=2 x DP=2 resume, final checkpoint" "$TMP/full" "$TMP/part" 6

# 2. reshard across pipeline sizes, both optimizers
run adam 4 "${ARGS[@]}" --pipeline-model-parallel-size 2 --zero-stage 1 --train-iters 3 --save "$TMP/adam"
for opt in adam q8; do
  extra=(); src="$TMP/adam"; it=3
  [ $opt = q8 ] && { extra=("${Q8[@]}"); src="$TMP/full"; it=6; }
  for p in 1 3 4; do
    run "re_${opt}_pp$p" $p "${ARGS[@]}" "${extra[@]}" --pipeline-model-parallel-size $p --train-iters $it --load "$src" --save "$TMP/re_${opt}_pp$p"
    grep -q "writing the loaded state to --save" "$TMP/re_${opt}_pp$p.log" || fail "$opt PP=$p: no re-save"
    same_checkpoint "$opt: saved at PP=2 x DP=2 ZeRO-1, loaded and re-saved at PP=$p" "$src" "$TMP/re_${opt}_pp$p" $it
  done
done
run back 2 "${ARGS[@]}" --pipeline-model-parallel-size 2 --train-iters 3 --load "$TMP/re_adam_pp1" --save "$TMP/back"
same_checkpoint "adam: the PP=1 copy re-saved at PP=2" "$TMP/adam" "$TMP/back" 3

# 3. training continues after the reshard
run cont1 1 "${ARGS[@]}" --train-iters 5 --override-lr-scheduler --load "$TMP/adam" --save "$TMP/cont1"
run cont2 4 "${ARGS[@]}" --pipeline-model-parallel-size 2 --zero-stage 1 --train-iters 5 --override-lr-scheduler --load "$TMP/adam" --save "$TMP/cont2"
python3 - "$TMP/cont1.jsonl" "$TMP/cont2.jsonl" <<'EOF' && ok "PP=1 from the PP=2 checkpoint: same first loss, tracks PP=2 within 1e-5" || fail "continuation after the reshard"
import json, sys
a, b = ([json.loads(l) for l in open(f) if '"lm_loss"' in l] for f in sys.argv[1:3])
assert [x["iteration"] for x in a] == [4, 5] == [x["iteration"] for x in b], (a, b)
assert a[0]["lm_loss"] == b[0]["lm_loss"], ("first loss after loading", a[0]["lm_loss"], b[0]["lm_loss"])
for x, y in zip(a, b):
    for k in ("lm_loss", "grad_norm"):
        assert abs(x[k] - y[k]) <= 1e-5 * abs(y[k]), (x["iteration"], k, x[k], y[k])
EOF

# 4-6. export, samples, per-layer statistics: PP=2 vs one process
SHOW=(--train-iters 4 --log-layer-norms-interval 2 --sample-interval 2 --sample-length 16 --global-batch-size 4)
run show1 1 "${ARGS[@]}" "${SHOW[@]}" --save "$TMP/show1"
run show2 2 "${ARGS[@]}" "${SHOW[@]}" --pipeline-model-parallel-size 2 --save "$TMP/show2" --export-llmc "$TMP/show2.bin"
run show2_export 1 "${ARGS[@]}" "${SHOW[@]}" --load "$TMP/show2" --export-llmc "$TMP/show2_one.bin"
[ -s "$TMP/show2.bin" ] && cmp -s "$TMP/show2.bin" "$TMP/show2_one.bin" \
  && ok "--export-llmc at PP=2 = one process exporting the same checkpoint ($(stat -c %s "$TMP/show2.bin") bytes)" || fail "PP=2 export differs"
[ "$(text_samples "$TMP/show1.log" | grep -c 'sample at')" -eq 2 ] && cmp -s <(text_samples "$TMP/show1.log") <(text_samples "$TMP/show2.log") \
  && ok "--sample-interval at PP=2: the same two samples as one process" || fail "PP=2 samples differ: $(text_samples "$TMP/show2.log" | head -3)"
compare_layer_stats "$TMP/show2.jsonl" "$TMP/show1.jsonl" 1e-6 2 \
  && ok "--log-layer-norms-interval at PP=2 = one process within 1e-6" || fail "PP=2 layer statistics"

# 7. the emulated CUDA trainer (device buffers, NCCL) saves and reshards the same way
EMU=build/train_gpt_emu
if [ -x $EMU ]; then
  timeout -k 10 300 "${MPI[@]}" 2 $EMU "${ARGS[@]}" --fp32 --pipeline-model-parallel-size 2 --train-iters 3 --save "$TMP/emu2" \
    >"$TMP/emu2.log" 2>&1 || { fail "emulated PP=2 run failed"; tail -5 "$TMP/emu2.log"; }
  timeout -k 10 300 $EMU "${ARGS[@]}" --fp32 --train-iters 3 --load "$TMP/emu2" --save "$TMP/emu1" >"$TMP/emu1.log" 2>&1 \
    || { fail "emulated PP=1 re-save failed"; tail -5 "$TMP/emu1.log"; }
  same_checkpoint "emulated CUDA trainer: saved at PP=2, re-saved at PP=1" "$TMP/emu2" "$TMP/emu1" 3
fi
finish
