#!/usr/bin/env bash
# --checkpoint-activations: each layer's forward is recomputed right before its backward from the
# kept layer input, so the result must be the SAME BYTES as keeping every activation:
#   1. 4 iterations of a 4-layer model with dropout (hidden and attention) and every model knob that
#      adds activations (NormFormer, embedding LayerNorm, ALiBi): identical JSONL records and
#      checkpoint bytes, with and without the flag;
#   2. the same under pipeline parallelism (PP=2, 1F1B with two micro-batches in flight);
#   3. the flag acts: the start-up line reports fewer activation bytes (one layer's worth instead of
#      four), and the emulated CUDA trainer gives the same bytes with and without it too.
# Recomputation that read a stale slice, skipped a dropout mask or used another layer's weights
# would change the gradients and fail (1).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
ARGS=("${TINY[@]}" --num-layers 4 --micro-batch-size 1 --global-batch-size 4 --train-iters 4 --hidden-dropout 0.1
      --attention-dropout 0.1 --normformer --embed-layernorm --position-embedding-type alibi)
same() {  # a b: records and (when both saved) model + optimizer bytes identical
  [ -s "$TMP/$1.jsonl" ] && [ -s "$TMP/$2.jsonl" ] || { fail "$1 vs $2: missing records"; return 1; }
  cmp -s <(strip_timing "$TMP/$1.jsonl") <(strip_timing "$TMP/$2.jsonl") || { fail "$1 vs $2: records differ"; return 1; }
  if [ -d "$TMP/$1" ]; then
    for f in model.bin optimizer.bin; do cmp -s "$TMP/$1/iter_0000004/$f" "$TMP/$2/iter_0000004/$f" || { fail "$1 vs $2: $f differs"; return 1; }; done
  fi
  return 0
}
for ck in off on; do
  flag=(); [ $ck = on ] && flag=(--checkpoint-activations)
  timeout -k 10 300 $KEEL "${ARGS[@]}" "${flag[@]}" --save "$TMP/cpu_$ck" --save-interval 4 --metrics-file "$TMP/cpu_$ck.jsonl" >"$TMP/cpu_$ck.log" 2>&1 \
    || { fail "CPU run ($ck) failed"; tail -5 "$TMP/cpu_$ck.log"; }
done
same cpu_off cpu_on && ok "checkpoint-activations on = off: identical records and checkpoint bytes"
mib() { sed -nE 's/^activations: ([0-9.]+) MiB.*/\1/p' "$1"; }
python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if b < a - 0.1 else 1)" "$(mib "$TMP/cpu_off.log")" "$(mib "$TMP/cpu_on.log")" \
  && ok "activation memory $(mib "$TMP/cpu_off.log") MiB -> $(mib "$TMP/cpu_on.log") MiB" || fail "no saving: $(mib "$TMP/cpu_off.log") vs $(mib "$TMP/cpu_on.log") MiB"

if command -v mpirun >/dev/null; then
  for ck in off on; do
    flag=(); [ $ck = on ] && flag=(--checkpoint-activations)
    timeout -k 10 300 mpirun --oversubscribe -np 2 $KEEL "${ARGS[@]}" "${flag[@]}" --pipeline-model-parallel-size 2 --metrics-file "$TMP/pp_$ck.jsonl" \
      >"$TMP/pp_$ck.log" 2>&1 || { fail "PP=2 run ($ck) failed"; tail -5 "$TMP/pp_$ck.log"; }
  done
  same pp_off pp_on && ok "PP=2: checkpoint-activations on = off, identical records"
fi

EMU=build/train_gpt_emu
if [ -x $EMU ]; then
  for ck in off on; do
    flag=(); [ $ck = on ] && flag=(--checkpoint-activations)
    timeout -k 10 300 $EMU "${ARGS[@]}" "${flag[@]}" --train-iters 3 --metrics-file "$TMP/emu_$ck.jsonl" >"$TMP/emu_$ck.log" 2>&1 \
      || { fail "emulated CUDA run ($ck) failed"; tail -5 "$TMP/emu_$ck.log"; }
  done
  same emu_off emu_on && ok "emulated CUDA trainer (bf16): checkpoint-activations on = off, identical records"
fi
finish
