#!/usr/bin/env bash
# `make run`: trains the default small GPT-2 on the Brown corpus on CPU (scripts/brown_cpu.args).
# Resumes from out/brown_cpu/checkpoints if an earlier run saved there; extra arguments are passed
# through to the trainer, e.g. `bash scripts/run_brown_cpu.sh --train-iters 2400`.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p out/brown_cpu
./train_gpt_cpu @scripts/brown_cpu.args --load out/brown_cpu/checkpoints "$@" 2>&1 | tee -a out/brown_cpu/train.log
echo
echo "checkpoints: out/brown_cpu/checkpoints (latest: iteration $(cat out/brown_cpu/checkpoints/latest_checkpointed_iteration.txt))"
echo "metrics:     out/brown_cpu/metrics.jsonl    log: out/brown_cpu/train.log"
