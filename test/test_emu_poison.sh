#!/usr/bin/env bash
# No CUDA kernel reads memory nothing wrote (as compute-sanitizer's initcheck would say on a GPU):
# under KEEL_EMU_POISON (test/cuda_emu/emu_core.h) every fresh cudaMalloc and every block's dynamic
# and static shared memory start as all-0xFF bytes (NaN in fp32, bf16 and fp16) or as random bytes, instead of
# what the arena held. An op that read such memory would change its output with the pattern.
#   1. the CUDA kernel tests pass under KEEL_EMU_POISON=nan (flash and layers also under random:7);
#   2. the emulated trainer (flash and GEMM attention, dropout, 3 iterations with a validation) gives
#      the same records and checkpoint bytes poisoned as not.
# The emulator's own test (test_cuda_emu) shows the poison reaches a fresh buffer and unwritten shared memory.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
for t in attention elementwise flash layers matmul optimizer; do
  bin=build/test_cuda_$t
  [ -x "$bin" ] || { fail "$bin not built"; continue; }
  modes="nan"; case $t in flash|layers) modes="nan random:7";; esac  # (random on the tiled kernels: time)
  for mode in $modes; do
    if KEEL_EMU_POISON=$mode "$bin" >"$TMP/$t.$mode.log" 2>&1; then ok "$t under KEEL_EMU_POISON=$mode: $(tail -1 "$TMP/$t.$mode.log")"
    else fail "$t under KEEL_EMU_POISON=$mode: $(grep -m3 FAIL "$TMP/$t.$mode.log")"; fi
  done
done
CUDA=build/train_gpt_emu
[ -x "$CUDA" ] || { fail "$CUDA not built"; finish; }
ARGS=(--num-layers 2 --hidden-size 128 --num-attention-heads 2 --seq-length 96 --micro-batch-size 2 --global-batch-size 4 --lr 3e-3
      --train-iters 3 --seed 5 --hidden-dropout 0.1 --attention-dropout 0.1 --log-interval 1 --eval-interval 3 --eval-iters 1
      --train-data-path data/brown/brown_train.bin --valid-data-path data/brown/brown_val.bin --save-interval 3)
for impl in flash gemm; do
  $CUDA "${ARGS[@]}" --attention-impl $impl --metrics-file "$TMP/$impl.jsonl" --save "$TMP/$impl.ck" >"$TMP/$impl.log" 2>&1 &
  KEEL_EMU_POISON=nan $CUDA "${ARGS[@]}" --attention-impl $impl --metrics-file "$TMP/$impl.p.jsonl" --save "$TMP/$impl.p.ck" >"$TMP/$impl.p.log" 2>&1 &
  wait
  if cmp -s <(strip_timing "$TMP/$impl.jsonl") <(strip_timing "$TMP/$impl.p.jsonl") &&
     cmp -s "$TMP/$impl.ck/iter_0000003/model.bin" "$TMP/$impl.p.ck/iter_0000003/model.bin"; then
    ok "$impl attention: the emulated trainer poisoned (nan) = unpoisoned, records and checkpoint bytes"
  else
    fail "$impl attention: the poisoned run differs: $(tail -2 "$TMP/$impl.p.log")"
  fi
done
finish
