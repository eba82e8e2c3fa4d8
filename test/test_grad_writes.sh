#!/usr/bin/env bash
# The parameter gradients without a zero-fill (llmc/model.h gpt_grads_begin): an iteration leaves the
# last iteration's gradients in the buffer and the first op producing each slot (a tensor, or one
# layer's slice) writes it — a GEMM with beta = 0 on the GPU, keel's reductions storing their sums —
# while an op covering part of its slot (the word embedding's scatter, the position rows below T, the
# head scale) zeroes it first. A slot read before it is written would add a stale value in.
# Three runs of 3 iterations must give the same checkpoint bytes and records: the reference
# (KEEL_TEST_ZERO_FILL_GRADS: the buffer zeroed at every iteration's start and every op adding, as
# before the scheme), the plain run (the stale values are the last iteration's gradients) and a run
# with KEEL_TEST_POISON_GRADS (the buffer filled with NaN at every iteration's start: a slot read
# before its first write poisons the step). A write flag missing or ignored shows against the
# reference; a contribution lost (a slot zeroed after an op added into it) too. On the CPU trainer for:
#   gradient accumulation (2 micro-batches); --normformer with --embed-layernorm, dropout and
#   --checkpoint-activations; ALiBi (no position table); position rows beyond --seq-length
#   (--max-position-embeddings 32: rows 16-31 never produced); 2 pipeline stages (the first stage's
#   word embedding comes from the scatter alone, the last stage's from the LM head) at 4 micro-batches;
#   TP 2 × PP 2; DP 2 with ZeRO-1 (the reduction's buckets read each layer as its backward ends);
# and on the emulated CUDA trainer (build/train_gpt_emu: cuBLASLt beta = 0, the written LayerNorm and
# bias sums) for bf16 with 2 micro-batches and fp32 with every knob above. Planted defects (a partial
# slot not zeroed, a LayerNorm write flag ignored) fail it (test/mutants).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
EMU=build/train_gpt_emu
# same NAME NP TRAINER ARGS...: the plain run and the poisoned one equal the zero-filled reference, byte for byte
same() {
  local name=$1 np=$2 trainer=$3; shift 3
  local r env
  for r in reference plain poison; do
    rm -rf "$TMP/$name.$r"
    case $r in reference) env=KEEL_TEST_ZERO_FILL_GRADS=1;; poison) env=KEEL_TEST_POISON_GRADS=1;; *) env=KEEL_TEST_NONE=1;; esac
    local launch=(env "$env")
    [ "$np" -gt 1 ] && launch=(env "$env" timeout -k 10 300 mpirun --oversubscribe -np "$np" -x "${env%%=*}")
    "${launch[@]}" "$trainer" "${TINY[@]}" --train-iters 3 --save "$TMP/$name.$r" --save-interval 3 \
      --metrics-file "$TMP/$name.$r.jsonl" "$@" >"$TMP/$name.$r.log" 2>&1 \
      || { fail "$name: the $r run failed: $(grep -m1 -E '^error|rror:' "$TMP/$name.$r.log")"; return; }
  done
  for r in plain poison; do
    if ! diff -rq "$TMP/$name.reference/iter_0000003" "$TMP/$name.$r/iter_0000003" >/dev/null; then
      fail "$name: the $r run's checkpoint differs from the zero-filled reference's (grad norms: $(grep -o '"grad_norm": [^,]*' "$TMP/$name.$r.jsonl" | tr '\n' ' ') against $(grep -o '"grad_norm": [^,]*' "$TMP/$name.reference.jsonl" | tr '\n' ' '))"
      return
    fi
    cmp -s <(strip_timing "$TMP/$name.reference.jsonl") <(strip_timing "$TMP/$name.$r.jsonl") \
      || { fail "$name: the $r run's records differ from the zero-filled reference's"; return; }
  done
  ok "$name: written first gradients = the zero-filled reference, byte for byte, also from NaN-filled buffers (checkpoint and $(wc -l <"$TMP/$name.plain.jsonl") records)"
}
same accum 1 ./train_gpt_cpu --global-batch-size 8
same knobs 1 ./train_gpt_cpu --normformer --embed-layernorm --hidden-dropout 0.1 --attention-dropout 0.1 --checkpoint-activations
same alibi 1 ./train_gpt_cpu --position-embedding-type alibi
same positions 1 ./train_gpt_cpu --max-position-embeddings 32
if command -v mpirun >/dev/null; then
  same pp2 2 ./train_gpt_cpu --pipeline-model-parallel-size 2 --global-batch-size 8
  same tp2pp2 4 ./train_gpt_cpu --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --global-batch-size 8
  same dp2 2 ./train_gpt_cpu --zero-stage 1 --global-batch-size 8
else
  fail "mpirun not found (scripts/setup.sh installs OpenMPI)"
fi
if [ -x "$EMU" ]; then
  same cuda_bf16 1 "$EMU" --bf16 --global-batch-size 8
  same cuda_knobs 1 "$EMU" --fp32 --normformer --embed-layernorm --hidden-dropout 0.1 --attention-dropout 0.1 --max-position-embeddings 32
else
  fail "$EMU not built (make tests builds it)"
fi
finish
