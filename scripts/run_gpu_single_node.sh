#!/usr/bin/env bash
# One node, one process per GPU: GPT-2 124M on the token shards under data/ (or pass your own
# --train-data-path/--valid-data-path). NGPU defaults to every GPU nvidia-smi lists. Data parallel
# with ZeRO-1 over the GPUs (NCCL for the gradients and parameters, MPI for the bootstrap and the
# small host reductions). Extra arguments go to the trainer, e.g.
#   bash scripts/run_gpu_single_node.sh --train-iters 2000 --save out/gpt2_124m
set -euo pipefail
cd "$(dirname "$0")/.."
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}
[ "$NGPU" -ge 1 ] || { echo "error: no GPU found (set NGPU)" >&2; exit 1; }
[ -x ./train_gpt ] || make train_gpt
mkdir -p out/gpt2_124m
mpirun -np "$NGPU" --bind-to none ./train_gpt \
  --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024 \
  --micro-batch-size 16 --global-batch-size $((16 * NGPU * 4)) --zero-stage 1 \
  --lr 6e-4 --min-lr 6e-5 --lr-decay-style cosine --lr-warmup-iters 700 --train-iters 10000 \
  --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --seed 1234 --hidden-dropout 0 --attention-dropout 0 \
  --train-data-path "data/brown/brown_train.bin" --valid-data-path "data/brown/brown_val.bin" \
  --eval-interval 250 --eval-iters 20 --log-interval 10 \
  --save out/gpt2_124m/checkpoints --load out/gpt2_124m/checkpoints --save-interval 1000 \
  --metrics-file out/gpt2_124m/metrics.jsonl --tensorboard-dir out/gpt2_124m/tb "$@"
