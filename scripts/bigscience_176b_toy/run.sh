#!/usr/bin/env bash
# BigScience's 176B (BLOOM) Megatron-DeepSpeed arguments and DeepSpeed config at toy size, under mpirun
# on 4 processes (TP 2 x PP 2): docs/megatron-deepspeed.md, the worked example.
#   bash scripts/bigscience_176b_toy/run.sh            # after `make` and `make data`
# The tokenizer: GPT-2's vocabulary in BLOOM's tokenizer.json form (./tokenize_gpt2 --save-tokenizer), read
# through --tokenizer-type PretrainedFromHF as BLOOM's would be.
# The data: the Brown shards as two Megatron indexed datasets (./megatron_data, one per shard file),
# blended 70/30 by BigScience's weighted split paths (train: their first 98%, validation: the rest of
# the first). The config is bf16: ./train_gpt on a GPU machine, else ./train_gpt_cpu, whose --bf16 keeps
# fp32 arithmetic and rounds to bf16 where the GPU stores bf16 (TRAINER=build/train_gpt_emu runs the
# CUDA trainer under its CPU emulation: slow, the same program). TRAINER=... picks another binary;
# OUT is fixed by the args file (out/bigscience_176b_toy).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=out/bigscience_176b_toy
if [ -z "${TRAINER:-}" ]; then
  if [ -x ./train_gpt ] && command -v nvidia-smi >/dev/null 2>&1; then TRAINER=./train_gpt; else TRAINER=./train_gpt_cpu; fi
fi
[ -x "$TRAINER" ] || { echo "error: $TRAINER not built (make; for build/train_gpt_emu: make build/train_gpt_emu)" >&2; exit 1; }
mkdir -p "$OUT"
# the tokenizer directory: GPT-2's vocabulary and merges in BLOOM's tokenizer.json form
[ -e "$OUT/tokenizer/tokenizer.json" ] || ./tokenize_gpt2 --save-tokenizer "$OUT/tokenizer" --pretokenizer bloom
[ -e "$OUT/brown_a.idx" ] || ./megatron_data write --from-shards data/brown/brown_train.bin --out "$OUT/brown_a"
[ -e "$OUT/brown_b.idx" ] || ./megatron_data write --from-shards data/brown/brown_val.bin --out "$OUT/brown_b"
echo "\"train: 0.7 0:0.98 $OUT/brown_a, 0.3 0:1 $OUT/brown_b\"" >"$OUT/train-splits.txt"
echo "\"valid: 1 0.98:1 $OUT/brown_a\"" >"$OUT/valid-splits.txt"
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
exec mpirun --oversubscribe -np 4 "$TRAINER" @scripts/bigscience_176b_toy/args "$@"
