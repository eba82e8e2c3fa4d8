#!/usr/bin/env bash
# scripts/gpu_session.sh — the GPU check for a machine lent for minutes, not hours: nothing is compiled
# there. Build everything it runs first, on any machine with nvcc (no GPU needed):
#
#   make gpu-bundle [GPU_ARCH=80]        # train_gpt and train_gpt_cpu without MPI/NCCL, the kernel tests
#                                        # and kernel labs (sm_90 unless told), the data; prints what to bring
#   bash scripts/gpu_session.sh [-o DIR] [--budget SECONDS]     # then, on the GPU machine
#
# Steps, most wanted first; each is timed, its output kept in DIR/NAME.log (default gpu_session_<date>/;
# $OUT/gpu_session where OUT is set, so the files come back from a lent machine, which returns at
# most 8: there the logs are packed into DIR/logs.tar.gz at the end), and a step that would not fit
# what is left of --budget (default 480 s) is skipped, said so, rather than started, and one that
# runs three times as long as it should is stopped (TIMEOUT) so that the rest still run:
#   gpu          nvidia-smi
#   lab-flash    build/lab/flash_attention -B 16: every forward and backward variant at the trainer's
#                shape (the block order 2 against 3 and 8, the dQ chains 7 and 6, 4 and 5 warps, the
#                chain's acquire by a load 9, 32-query steps at 3 blocks a multiprocessor 10)
#   bench        train_gpt at GPT-2 124M (flash; with the GeLU unfused; the GEMM attention path) and 1.5B
#                (flash): the step in ms and MFU (BENCH_ONLY=gpu scripts/bench.sh's rows, 10 iterations each)
#   ops          train_gpt --time-ops 3 at GPT-2 124M and 1.5B (flash, B=16, T=1024): where the step's
#                time goes, op by op (CUDA events; each table whole in the log, its top rows in the table)
#   lab-memory   build/lab/layernorm (B=8, then B=16 at C=768 and 1600) and build/lab/classifier (B=8): each
#                kernel beside its first-timed form
#   tests        every build/gpu/test_cuda_* kernel test on the GPU
#   ncu          Nsight Compute on the flash forward and backward and the LayerNorm backward as the
#                124M trainer launches them (one launch each, its second iteration): stall reasons,
#                issue rate, occupancy, throughput (the rest skipped when ncu cannot read the
#                counters; without the stall metrics where this ncu takes no metric regex)
#   trainer      test/test_cuda_trainer.sh: train_gpt against train_gpt_cpu
#   lab-shapes   the flash lab at T=512 (B=32) and T=4096 (B=4): a block's cost beside its steps
#   memcheck     compute-sanitizer --tool memcheck on the flash and LayerNorm kernel tests
#   sanitize     compute-sanitizer's racecheck and synccheck on those tests; initcheck on one
#                iteration of a small train_gpt run (information only: see the step's function)
# Last, one table: each step's status and time, and its key lines (the end of the output is what a
# lent machine's reply carries). The steps' budgets add up to about 880 s, but on an H200 (November
# 2026) the first ten ran in 166 s in all: a step starts when what is left of the budget covers its
# expected time, so under a 600 s call --budget 420 runs them all and leaves room for the table. Exit status 0 when every step run passed, 1 when one
# failed, 2 when there is no GPU or the bundle is incomplete or does not load. The full check on a machine of one's own:
# scripts/gpu_check.sh (it builds, and runs every lab and the sanitizers on every test).
set -u
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
caller=$PWD
cd "$(dirname "$self")/.." || exit 2
usage() { sed -n '7p' "$self" | sed 's/^# *//'; }
budget=480
dir=${OUT:+$OUT/gpu_session}
while [ $# -gt 0 ]; do
  case "$1" in
    -o) [ $# -ge 2 ] || { echo "error: -o needs a directory" >&2; exit 2; }; dir=$2; [[ $dir == /* ]] || dir=$caller/$dir; shift 2 ;;
    --budget) [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] || { echo "error: --budget needs a number of seconds" >&2; exit 2; }; budget=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
dir=${dir:-gpu_session_$(date +%Y%m%d_%H%M%S)}

if ! nvidia-smi --query-gpu=name --format=csv,noheader >/dev/null 2>&1; then
  echo "gpu_session: no GPU here (nvidia-smi lists none): nothing to check. Run it on a machine with an NVIDIA GPU." >&2
  exit 2
fi
export TRAIN_GPT=build/bundle/train_gpt
missing=()
for f in "$TRAIN_GPT" build/bundle/train_gpt_cpu build/lab/flash_attention build/lab/layernorm build/lab/classifier data/brown/brown_train.bin \
  data/brown/brown_val.bin data/gpt2/encoder.json data/gpt2/vocab.bpe; do
  [ -e "$f" ] || missing+=("$f")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu_session: the bundle is incomplete (missing: ${missing[*]}): run \`make gpu-bundle\` where nvcc is, and bring what it lists" >&2
  exit 2
fi
# built elsewhere: every shared library the programs need must be here (a newer C library or a CUDA
# major version this machine lacks shows now, not as a failure of every step)
unresolved=$(for f in "$TRAIN_GPT" build/bundle/train_gpt_cpu build/lab/* build/gpu/test_cuda_*; do
  [ -x "$f" ] && ldd "$f" 2>&1 | grep -E 'not found|version .* not found' | sed "s|^|$f: |"
done | sort -u)
if [ -n "$unresolved" ]; then
  echo "gpu_session: the bundle's programs do not load here: $(head -n 3 <<<"$unresolved" | tr '\n' ';' | tr -s ' \t' ' ')" >&2
  exit 2
fi
mkdir -p "$dir" || exit 2
start=$(date +%s)
failed=0
rows=()
keys="$dir/keys.txt"
: >"$keys"

# step NAME NEED PATTERN CMD...: runs CMD if NEED seconds are left of the budget (its output to
# $dir/NAME.log, stopped at what is left or at 3·NEED, whichever comes first), records PASS, FAIL,
# TIMEOUT or SKIP and the lines matching PATTERN.
step() {
  local name=$1 need=$2 pattern=$3 left t0 rc status; shift 3
  left=$((budget - ($(date +%s) - start)))
  if [ "$left" -lt "$need" ]; then
    rows+=("$(printf '%-11s %-16s %5s' "$name" "SKIP (time)" -)")
    echo "== $name: skipped (${left} s left of the budget, about $need s needed)"
    return
  fi
  echo "== $name: $*"
  t0=$(date +%s)
  [ "$left" -le $((3 * need)) ] || left=$((3 * need))  # a step that hangs leaves time for the next ones
  timeout -k 5 "$left" bash -c '"$@"' "$name" "$@" >"$dir/$name.log" 2>&1  # (a function: exported below)
  rc=$?
  if [ $rc -eq 0 ]; then status=PASS; elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then status="TIMEOUT"; failed=1; else status="FAIL ($rc)"; failed=1; fi
  rows+=("$(printf '%-11s %-16s %5s' "$name" "$status" "$(($(date +%s) - t0)) s")")
  echo "   $status in $(($(date +%s) - t0)) s"
  { echo "-- $name ($status)"; grep -E -- "$pattern" "$dir/$name.log" | head -n 40; } >>"$keys"
}
skip() { rows+=("$(printf '%-11s %-16s %5s' "$1" "SKIP" -)"); echo "== $1: skipped ($2)"; echo "-- $1: skipped ($2)" >>"$keys"; }

# ---- what the steps run (functions run under `timeout` through bash -c: exported) ----------------------
# train_gpt's step at 124M (both attention paths) and 1.5B, as make bench prints them
bench_rows() {  # (bench.sh prints a failed row and goes on: a failed row fails the step)
  local out
  out=$(BENCH_GPU_ITERS=10 TRAIN_GPT_BIN=$TRAIN_GPT BENCH_GPU_CONFIGS="$1" BENCH_ONLY=gpu bash scripts/bench.sh 2>&1)
  echo "$out"
  ! grep -qE 'failed|no timed iterations' <<<"$out"
}
# --time-ops: iteration 3 of 3 cut into its ops (docs/operations.md); the whole table to the log, and
# for the summary each model's header, its 12 largest rows and its FLOPs line, prefixed by the model
op_tables() {
  local row name L C NH log bad=0
  log=$(mktemp)
  for row in "124M 12 768 12" "1.5B 48 1600 25"; do
    read -r name L C NH <<<"$row"
    "$TRAIN_GPT" --bf16 --num-layers "$L" --hidden-size "$C" --num-attention-heads "$NH" --seq-length 1024 --micro-batch-size 16 \
      --train-iters 3 --time-ops 3 --lr 1e-4 --train-data-path data/brown/brown_train.bin --log-interval 1000 --eval-interval 0 \
      --hidden-dropout 0 --attention-dropout 0 >"$log" 2>&1 || { echo "$name: train_gpt failed"; tail -n 3 "$log"; bad=1; continue; }
    grep -q '^time per op' "$log" || { echo "$name: no table in train_gpt's output"; tail -n 3 "$log"; bad=1; continue; }
    echo "==== $name"
    sed -n '/^time per op/,/^  model FLOPs/p' "$log"
    { sed -n '/^time per op/,/^  model FLOPs/p' "$log" | grep -v '^  roofline:' | head -n 14; grep '^  model FLOPs' "$log"; } |
      sed "s/^/$name | /"  # (the header, the columns' names, 12 rows, the FLOPs line)
  done
  rm -f "$log"
  return $bad
}
# (B=16: the 124M trainer's rows, which L2 cannot hold twice; C=1600: GPT-2 1.5B's, where the LayerNorm
# backward's one-pass regions leave the multiprocessor little L1)
lab_memory() { build/lab/layernorm && build/lab/layernorm -B 16 && build/lab/layernorm -B 16 -C 1600 -NH 25 && build/lab/classifier; }
kernel_tests() {
  local t bad=0
  for t in build/gpu/test_cuda_*; do
    [ -x "$t" ] || continue
    echo "-- $t"
    "$t" 2>&1  # (all of it in the log: the key lines take its failed checks and its count)
    [ $? -eq 0 ] || { echo "$t: FAILED"; bad=1; }
  done
  return $bad
}
# Nsight Compute: one launch of each kernel in the 124M trainer's second iteration (12 launches of
# each attention kernel and 25 of the LayerNorm backward an iteration), the clocks left as they are;
# the sections' tables, and each stall reason as cycles per issued instruction
ncu_kernels() {
  local kernel skip bad=0 log
  local run=("$TRAIN_GPT" --bf16 --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --micro-batch-size 16
    --train-iters 2 --lr 1e-4 --train-data-path data/brown/brown_train.bin --log-interval 1000 --eval-interval 0 --hidden-dropout 0
    --attention-dropout 0)
  local sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats)
  local stalls=(--metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio')
  log=$(mktemp)
  for kernel in flash_attention_forward_kernel:12 flash_attention_backward_kernel:12 layernorm_backward_kernel:25; do
    skip=${kernel#*:}; kernel=${kernel%:*}
    echo "==== $kernel"
    ncu --clock-control none -k "regex:$kernel" --launch-skip "$skip" --launch-count 1 "${sections[@]}" "${stalls[@]}" "${run[@]}" >"$log" 2>&1
    local rc=$?
    cat "$log"
    if grep -qE 'ERR_NVGPUCTRPERM|LibraryNotLoaded|Failed to initialize the profiler' "$log"; then
      echo "ncu: the hardware counters cannot be read on this machine: skipped"
      break
    fi
    if [ $rc -ne 0 ] && grep -qiE '==ERROR==.*metric' "$log" && [ ${#stalls[@]} -gt 0 ]; then  # (an ncu without a metric regex)
      echo "ncu: without the stall metrics"
      stalls=()
      ncu --clock-control none -k "regex:$kernel" --launch-skip "$skip" --launch-count 1 "${sections[@]}" "${run[@]}" >"$log" 2>&1
      rc=$?
      cat "$log"
    fi
    [ $rc -eq 0 ] || bad=1
    grep -q 'No kernels were profiled' "$log" && bad=1
  done
  rm -f "$log"
  return $bad
}
trainer() { KEEL_CPU_TRAINER=build/bundle/train_gpt_cpu KEEL_CUDA_TRAINER=$TRAIN_GPT bash test/test_cuda_trainer.sh; }
lab_shapes() { build/lab/flash_attention -B 32 -T 512 && build/lab/flash_attention -B 4 -T 4096; }
memcheck() {
  local t bad=0
  for t in build/gpu/test_cuda_flash build/gpu/test_cuda_layers; do
    [ -x "$t" ] || { echo "$t: not built"; bad=1; continue; }
    echo "-- $t"
    compute-sanitizer --tool memcheck --error-exitcode 99 "$t" 2>&1 | grep -E 'ERROR SUMMARY|Invalid|checks, ' | head -n 20
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "$t: compute-sanitizer failed"; bad=1; }
  done
  return $bad
}
# racecheck (shared-memory hazards between a block's threads) and synccheck (barriers some threads
# of a block miss) on the flash and LayerNorm kernel tests: each fails the step on an error. Then
# initcheck (a read of device memory nothing wrote) on one iteration of a small train_gpt run, kept
# to 90 s, for information only: it reports kernels that read a cuBLASLt product (an H200 found
# 16-byte "uninitialized" reads of the qkv product in attention_heads_split_kernel on the GEMM path,
# and 16-byte reads on the flash path, their kernels not named in that run; the matmul tests compare
# every element of such products), most likely because the tool does not follow the library's
# tensor-memory-accelerator stores (docs/emulator.md). Unbounded, that run (thousands of reports,
# each with its backtrace) outran a 360 s step.
sanitize() {
  local t tool bad=0
  for tool in racecheck synccheck; do
    for t in build/gpu/test_cuda_flash build/gpu/test_cuda_layers; do
      [ -x "$t" ] || { echo "$t: not built"; bad=1; continue; }
      echo "-- $tool $t"
      timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 99 "$t" 2>&1 | grep -E 'SUMMARY|Hazard|Barrier|Error|checks, ' | head -n 20
      [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "$t: compute-sanitizer --tool $tool failed"; bad=1; }
    done
  done
  echo "-- initcheck train_gpt (flash, 1 iteration; information only)"
  timeout 90 compute-sanitizer --tool initcheck --print-limit 8 --show-backtrace device "$TRAIN_GPT" --bf16 --num-layers 2 \
    --hidden-size 128 --num-attention-heads 2 --seq-length 128 --micro-batch-size 2 --train-iters 1 --lr 1e-4 \
    --train-data-path data/brown/brown_train.bin --log-interval 1 --eval-interval 0 2>&1 |
    grep -E 'ERROR SUMMARY|Uninitialized|^=+ +at ' | sed 's/^/  initcheck: /' | head -n 24
  return $bad
}
export -f bench_rows op_tables lab_memory kernel_tests ncu_kernels trainer lab_shapes memcheck sanitize

# ---- the steps, most wanted first ---------------------------------------------------------------------
LAB_ROWS='^(attention|layernorm|classifier)|^  [0-9]+ |wrong|FAIL'
step gpu 5 '^[0-9]+,' nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version,clocks.max.sm --format=csv,noheader
step lab-flash 60 "$LAB_ROWS" build/lab/flash_attention -B 16
step bench 120 '^GPU|^config|^(124M|124Ms64|124Mnf|124Mg|1\.5B) |flash backward:|failed' bench_rows "124M 124Ms64 124Mnf 124Mg 1.5B"
step ops 60 '^(124M|1\.5B) \| |failed|no table' op_tables
step lab-memory 40 "$LAB_ROWS" lab_memory
step tests 60 '^-- |checks, |FAILED|^FAIL' kernel_tests
if command -v ncu >/dev/null 2>&1; then
  step ncu 120 '^==== |^ncu: |No kernels|==WARNING==|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Issued Warp|No Eligible|Warp Cycles Per Issued|issue_stalled.* [0-9.]+$|==ERROR==' ncu_kernels
else
  skip ncu "ncu not on the PATH"
fi
step trainer 120 '^(ok|FAIL|not ok)|passed|failed' trainer
step lab-shapes 90 "$LAB_ROWS" lab_shapes
if command -v compute-sanitizer >/dev/null 2>&1; then
  step memcheck 120 '^-- |ERROR SUMMARY|Invalid|failed|not built' memcheck
  step sanitize 150 '^-- |SUMMARY|Hazard|initcheck: .* at |Barrier|failed|not built' sanitize
else
  skip memcheck "compute-sanitizer not on the PATH"
  skip sanitize "compute-sanitizer not on the PATH"
fi

# ---- the table ----------------------------------------------------------------------------------------
echo
echo "gpu_session: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(($(date +%s) - start)) s of a $budget s budget; logs in $dir/"
printf '%-11s %-16s %5s\n' step status time
printf '%s\n' "${rows[@]}"
echo
cat "$keys"
# A lent machine sends back at most 8 files from $OUT: there the step logs travel as one archive
# (logs.tar.gz beside keys.txt; `tar -xzf logs.tar.gz` gives NAME.log back)
if [ -n "${OUT:-}" ] && [ "$dir" = "$OUT/gpu_session" ]; then
  (cd "$dir" && shopt -s nullglob && logs=(*.log) && [ ${#logs[@]} -gt 0 ] && tar -czf logs.tar.gz "${logs[@]}" && rm -f "${logs[@]}") ||
    echo "gpu_session: the logs stay unpacked in $dir (tar failed)" >&2
fi
exit $failed
