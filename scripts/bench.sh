#!/usr/bin/env bash
# `make bench`: ms/iteration, tokens/s and achieved GFLOP/s of the CPU trainer on fixed configs
# (GPT-2 vocabulary, padded 50304). FLOPs per token = 6·N + 6·L·C·T (N = parameters including
# the padded vocabulary, which the classifier multiplies). Iteration 1 is warm-up and not counted;
# the figures are the mean of the timed iterations. Timing is printed, never asserted. Then the
# step's wait at a checkpoint save, synchronous and --async-save (BENCH_ONLY=save: that alone), then
# the GPU rows where a GPU is found (BENCH_ONLY=gpu: those alone).
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${BENCH_ITERS:-4}
[ -f data/brown/brown_train.bin ] || make --no-print-directory data
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# ---- checkpoint saves: how long the step waits, synchronous and --async-save ----------------------
# GPT-2 at L6 C512 (44.7M parameters: a 512 MiB checkpoint of fp32 weights and Adam's m and v), 12
# iterations saving every 4, into a directory on the disk of `mktemp -d`, once synchronously and once
# with --async-save. The step's wait at each save is what the trainer prints ("the step waited X s":
# from the save's start, a wait for an earlier background save included, until training goes on);
# printed: each save's wait, the means, and the background mean as a share of the synchronous one.
# The iterations' mean time in each run is printed too (the background writer shares the cores).
bench_save() {
  local mode
  for mode in sync async; do
    ./train_gpt_cpu --num-layers 6 --hidden-size 512 --num-attention-heads 8 --seq-length 64 --micro-batch-size 4 \
      --train-iters 12 --save-interval 4 --lr 1e-4 --train-data-path data/brown/brown_train.bin --log-interval 1 --eval-interval 0 \
      --hidden-dropout 0 --attention-dropout 0 --save "$tmp/save_$mode" --metrics-file "$tmp/save_$mode.jsonl" \
      $([ $mode = async ] && echo --async-save) >"$tmp/save_$mode.log" 2>&1 || { echo "save ($mode): run failed"; tail -3 "$tmp/save_$mode.log"; return; }
  done
  awk -v sync_log="$tmp/save_sync.log" -v async_log="$tmp/save_async.log" -v sj="$tmp/save_sync.jsonl" -v aj="$tmp/save_async.jsonl" '
    function waits(file, pat,   line, n, out, w) {
      n = 0; out = ""; total = 0
      while ((getline line < file) > 0)
        if (line ~ pat && match(line, /the step waited [0-9.]+ s/)) { w = substr(line, RSTART + 16, RLENGTH - 18); out = out " " w; total += w; n++ }
      close(file); count = n; return out
    }
    function iter_ms(file,   line, n, sum) {
      n = 0; sum = 0
      while ((getline line < file) > 0) if (match(line, /"elapsed_ms": [0-9.e+-]+/)) { sum += substr(line, RSTART + 14, RLENGTH - 14); n++ }
      close(file); return n ? sum / n : 0
    }
    BEGIN {
      sw = waits(sync_log, "a synchronous save"); sn = count; st = total
      aw = waits(async_log, "in the background"); an = count; at = total
      if (!sn || !an) { print "save: no waits found in the logs"; exit }
      printf "checkpoint save, L6 C512 (44.7M parameters, 512 MiB), every 4 of 12 iterations:\n"
      printf "  synchronous:   the step waited%s s (mean %.3f s); iterations %.0f ms on average\n", sw, st / sn, iter_ms(sj)
      printf "  --async-save:  the step waited%s s (mean %.3f s); iterations %.0f ms on average\n", aw, at / an, iter_ms(aj)
      printf "  background wait / synchronous wait: %.1f%%\n", 100 * (at / an) / (st / sn)
    }'
}
if [ "${BENCH_ONLY:-}" = save ]; then bench_save; exit 0; fi
if [ "${BENCH_ONLY:-}" != gpu ]; then

peak_probe() { ./build/fma_peak | awk '$2 != "threads" { if ($3 > best) { best = $3; isa = $2 } } END { printf "%s %s\n", best + 0, isa }'; }
read -r PEAK PEAK_ISA < <(peak_probe)
printf '%-10s %-22s %12s %10s %10s %8s\n' config shape ms/iter tok/s GFLOP/s "% peak"
bench() { # name L C NH T B [more flags]
  local name=$1 L=$2 C=$3 NH=$4 T=$5 B=$6; shift 6
  ./train_gpt_cpu "$@" --num-layers "$L" --hidden-size "$C" --num-attention-heads "$NH" --seq-length "$T" \
    --micro-batch-size "$B" --train-iters "$ITERS" --lr 1e-4 --train-data-path data/brown/brown_train.bin \
    --log-interval 1000 --hidden-dropout 0 --attention-dropout 0 --metrics-file "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 || { echo "$name: run failed"; tail -3 "$tmp/$name.log"; return; }
  local P
  P=$(grep -o '([0-9]* with vocabulary padding)' "$tmp/$name.log" | grep -o '[0-9]*')
  awk -v P="$P" -v PEAK="$PEAK" -v L="$L" -v C="$C" -v T="$T" -v B="$B" -v name="$name" '
    match($0, /"elapsed_ms": [0-9.e+-]+/) { ms = substr($0, RSTART + 14, RLENGTH - 14); if (NR > 1) { sum += ms; n++ } }
    END { avg = sum / n; tps = B * T / (avg / 1000); fl = (6 * P + 6 * L * C * T) * tps / 1e9;
          pct = PEAK > 0 ? sprintf("%.1f%%", 100 * fl / PEAK) : "-"
          printf "%-10s %-22s %12.1f %10.1f %10.2f %8s\n", name, sprintf("L%d C%d T%d B%d", L, C, T, B), avg, tps, fl, pct }' "$tmp/$name.jsonl"
}


bench tiny  4  128 4  64  4
bench small 6  256 8  128 4
bench 124M  12 768 12 64  4
bench 124M-8bit 12 768 12 64 4 --optimizer adam8bit   # the same with 8-bit Adam: the optimizer step's cost
read -r PEAK2 _ < <(peak_probe)
echo "fp32 FMA peak, measured: $PEAK GFLOP/s ($PEAK_ISA) before the runs, $PEAK2 after (% peak: against the one before)"
./build/fma_peak | awk '$2 != "threads" && $2 != "'"$PEAK_ISA"'" { printf "  (%s: %s GFLOP/s)\n", $2, $3 }'
echo "threads: ${OMP_NUM_THREADS:-$(nproc)} | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') | $(grep -m1 -o 'backend: [^|]*' "$tmp/tiny.log" || true)"
bench_save
fi  # (BENCH_ONLY=gpu skips the CPU rows)

# ---- GPU: train_gpt at GPT-2 124M (both attention paths, T=1024 and 2048), 350M and 1.5B (bf16) --------
# ms/iteration: the median of the iterations after the first (start-up, allocation, cuBLASLt's
# heuristics); tokens/s = B·T / that. Model FLOPs per token = 6·N + 12·L·C·T (N = parameters
# including the padded vocabulary; attention counted at full T×T, the PaLM / llm.c convention), so
# MFU = FLOPs/token · tokens/s / peak, with the bf16 dense peak taken from the GPU's name (H100 and
# H200: 989 TFLOP/s, A100: 312; otherwise MFU is n/a). Peak memory: nvidia-smi's memory.used of the
# GPU, sampled every 0.2 s during the run (the whole GPU: other processes count too).
# TRAIN_GPT_BIN: the trainer to time (default ./train_gpt); BENCH_GPU_CONFIGS: the rows to run, by
# name ("124M 1.5B"; default every row).
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 || true)
if [ -z "$GPU_NAME" ]; then
  echo "GPU: no GPU found (nvidia-smi): the GPU figures (train_gpt at 124M, 350M and 1.5B) need a GPU — not yet measured"
  exit 0
fi
TRAIN_GPT_BIN=${TRAIN_GPT_BIN:-./train_gpt}
if [ ! -x "$TRAIN_GPT_BIN" ]; then
  echo "GPU: $GPU_NAME found but $TRAIN_GPT_BIN is not built (make train_gpt): GPU figures not measured"
  exit 0
fi
case "$GPU_NAME" in
  *H100*|*H200*) GPU_PEAK=989 ;;
  *A100*) GPU_PEAK=312 ;;
  *) GPU_PEAK=0 ;;
esac
GPU_ITERS=${BENCH_GPU_ITERS:-10}
GPU_ROWS=""  # the rows gpu_bench was called for (BENCH_GPU_CONFIGS is checked against them)
GPU_INDEX=${CUDA_VISIBLE_DEVICES:-0}; GPU_INDEX=${GPU_INDEX%%,*}
echo
echo "GPU: $GPU_NAME | bf16 dense peak: $([ "$GPU_PEAK" -gt 0 ] && echo "$GPU_PEAK TFLOP/s" || echo "unknown for this GPU (MFU n/a)") | $GPU_ITERS iterations, median of 2..$GPU_ITERS"
echo "model FLOPs per token = 6·N + 12·L·C·T (N: parameters incl. padded vocabulary; attention at full T×T)"
printf '%-6s %-28s %10s %12s %9s %7s %12s\n' config shape ms/iter tok/s TFLOP/s MFU "peak mem"
gpu_bench() { # name L C NH T B [more flags]
  local name=$1 L=$2 C=$3 NH=$4 T=$5 B=$6 sampler P peak rc=0; shift 6
  GPU_ROWS+=" $name"
  [ -z "${BENCH_GPU_CONFIGS:-}" ] || [[ " $BENCH_GPU_CONFIGS " == *" $name "* ]] || return 0
  nvidia-smi -i "$GPU_INDEX" --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$tmp/$name.mem" 2>/dev/null &
  sampler=$!
  timeout -k 10 900 "$TRAIN_GPT_BIN" "$@" --bf16 --num-layers "$L" --hidden-size "$C" --num-attention-heads "$NH" --seq-length "$T" \
    --micro-batch-size "$B" --train-iters "$GPU_ITERS" --lr 1e-4 --train-data-path data/brown/brown_train.bin \
    --log-interval 1000 --hidden-dropout 0 --attention-dropout 0 --metrics-file "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 || rc=$?
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  if [ $rc -ne 0 ]; then echo "$name: train_gpt failed (exit $rc)"; tail -3 "$tmp/$name.log"; return; fi
  P=$(grep -o '([0-9]* with vocabulary padding)' "$tmp/$name.log" | grep -o '[0-9]*' | head -n1 || true)
  peak=$(awk '$1 ~ /^[0-9]+$/ && $1 > m { m = $1 } END { print m + 0 }' "$tmp/$name.mem")
  { grep -o '"elapsed_ms": [0-9.e+-]*' "$tmp/$name.jsonl" || true; } | awk 'NR > 1 { print $2 }' | sort -g |
    awk -v P="$P" -v PEAK="$GPU_PEAK" -v L="$L" -v C="$C" -v T="$T" -v B="$B" -v NH="$NH" -v name="$name" -v mem="$peak" '
      { v[n++] = $1 }
      END {
        if (n == 0) { printf "%s: no timed iterations\n", name; exit }
        med = n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2
        tps = B * T / (med / 1000); tf = (6 * P + 12 * L * C * T) * tps / 1e12
        mfu = PEAK > 0 ? sprintf("%.1f%%", 100 * tf / PEAK) : "n/a"
        printf "%-6s %-28s %10.1f %12.0f %9.1f %7s %8.1f GiB\n", name, sprintf("L%d C%d NH%d T%d B%d", L, C, NH, T, B), med, tps, tf, mfu, mem / 1024
      }'
  # the flash backward's query step and the start-up trial that chose it (head size 64)
  grep -m1 '^flash backward:' "$tmp/$name.log" | sed 's/^/       /' || true
}
gpu_bench 124M 12 768 12 1024 16
KEEL_FLASH_BWD_WARPS=8 gpu_bench 124Mb8 12 768 12 1024 16  # the same with the flash backward at 8 warps a block (llmc/cuda/flash_attention.cuh)
KEEL_FLASH_BWD_STEP=64 gpu_bench 124Ms64 12 768 12 1024 16  # the flash backward at 64-query steps, untimed (the 124M row: the start-up trial's pick)
KEEL_FLASH_BWD_STEP=32 gpu_bench 124Ms32 12 768 12 1024 16  # ... and at 32-query steps (3 blocks a multiprocessor)
gpu_bench 124Mnf 12 768 12 1024 16 --gelu-fusion off     # the MLP's GeLU as separate kernels (cuBLASLt's GeLU epilogues ran at 49-51% of the peak)
gpu_bench 124Mg 12 768 12 1024 16 --attention-impl gemm   # the GEMM attention path (the fallback for head sizes flash lacks)
gpu_bench 124MT2 12 768 12 2048 8                         # T = 2048: flash, then the GEMM path
gpu_bench 124MT2g 12 768 12 2048 8 --attention-impl gemm
gpu_bench h128 12 1536 12 1024 8 --attention-impl flash   # head size 128 (BLOOM's): flash, then the GEMM path
gpu_bench h128g 12 1536 12 1024 8 --attention-impl gemm
gpu_bench 350M 24 1024 16 1024 16
gpu_bench 1.5B 48 1600 25 1024 16   # flash attention (the default at head size 64): fits 80 GB without --checkpoint-activations
# a name in BENCH_GPU_CONFIGS that is no row's ran nothing: say so, not a silent empty table
for want in ${BENCH_GPU_CONFIGS:-}; do
  [[ "$GPU_ROWS " == *" $want "* ]] || { echo "error: BENCH_GPU_CONFIGS names '$want', which is no row (rows:$GPU_ROWS)" >&2; exit 2; }
done
