#!/usr/bin/env bash
# scripts/gpu_check.sh — the one command to run first on any machine with a GPU.
#
#   bash scripts/gpu_check.sh [-o REPORT.md] [--quick]
#
# Steps, each timed and recorded whatever the others did (a failure never stops the run):
#   1. GPU          nvidia-smi: the GPUs, driver and CUDA versions
#   2. build        make train_gpt_cpu train_gpt and the nvcc kernel tests (build/gpu/test_cuda_*),
#                   for this GPU's architecture (the Makefile's "GPU arch" line says which)
#   3. test-gpu     make test-gpu: the kernel tests on the GPU, train_gpt against train_gpt_cpu
#   4. memcheck     compute-sanitizer --tool memcheck on each build/gpu/test_cuda_* (skipped, and
#   5. racecheck    compute-sanitizer --tool racecheck  said so, when compute-sanitizer is absent)
#   6. bench        make bench: the CPU figures, then train_gpt at GPT-2 124M, 350M and 1.5B (ms/iteration,
#                   tokens/s, MFU, peak memory; scripts/bench.sh)
#   7. kernel lab   make cuda-lab, then each build/lab/* at its default (GPT-2 124M) shapes, and
#                   flash attention at the trainer's B=16, at T=2048 and at head size 128
#   8. step-curves  the step model's efficiencies from the lab's figures (scripts/step_curves.sh derive)
#                   into <report>.logs/step_curves.txt, then --dry-run at 124M and 1.5B with the model's
#                   own efficiencies and with that file, beside the steps make bench measured
# --quick skips 4, 5, 7 and 8.
# Writes ONE markdown report (default gpu_report_<date>.md; -o chooses) with a section per step:
# the command, PASS/FAIL/SKIP, the time, and the step's key output lines; the full output of each
# step is kept beside it in <report>.logs/. Exit status: 0 when every step passed (or was skipped),
# 1 when any failed, 2 when there is no GPU (nothing is run).
set -u
cd "$(dirname "$0")/.." || exit 2

usage() { sed -n '4p' "$0" | sed 's/^# *//'; }
report="gpu_report_$(date +%Y%m%d_%H%M%S).md"
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    -o) [ $# -ge 2 ] || { echo "error: -o needs a file name" >&2; exit 2; }; report=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

# ---- refuse without a GPU ------------------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_check: no GPU here (nvidia-smi not found): nothing to check. Run it on a machine with an NVIDIA GPU." >&2
  exit 2
fi
gpus=$(nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv,noheader 2>/dev/null | grep -E '^[0-9]+,' || true)
if [ -z "$gpus" ]; then
  echo "gpu_check: nvidia-smi lists no GPU (driver not loaded, or no device visible): nothing to check." >&2
  exit 2
fi

logs="${report%.md}.logs"
mkdir -p "$logs" || exit 2
: >"$report" || exit 2
failed=0
summary=()

# run_step NAME KEY_PATTERN CMD...: runs CMD, its output to $logs/NAME.log; appends a section to the
# report with the command, status, time and the lines matching KEY_PATTERN (the last 15 lines if
# none match).
run_step() {
  local name=$1 pattern=$2; shift 2
  local log="$logs/$name.log" start end rc status
  echo "== $name: $*"
  start=$(date +%s)
  "$@" >"$log" 2>&1
  rc=$?
  end=$(date +%s)
  if [ $rc -eq 0 ]; then status=PASS; else status="FAIL (exit $rc)"; failed=1; fi
  summary+=("| $name | $status | $((end - start)) s |")
  echo "   $status in $((end - start)) s (log: $log)"
  {
    echo "## $name"
    echo
    echo "- command: \`$*\`"
    echo "- status: **$status**"
    echo "- time: $((end - start)) s"
    echo "- full output: \`$log\`"
    echo
    echo '```'
    if grep -Eq -- "$pattern" "$log"; then grep -E -- "$pattern" "$log" | head -n 80; else tail -n 15 "$log"; fi
    echo '```'
    echo
  } >>"$report.body"
}

skip_step() {  # NAME REASON
  summary+=("| $1 | SKIP | - |")
  echo "== $1: skipped ($2)"
  printf '## %s\n\n- status: **SKIP** — %s\n\n' "$1" "$2" >>"$report.body"
}

: >"$report.body"

# 1. the GPU
run_step gpu 'NVIDIA-SMI|Driver Version|^[0-9]+,' bash -c \
  'nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv,noheader; nvidia-smi'

# 2. build for this GPU
gpu_tests=()
for src in test/test_cuda_*.cpp; do
  [ -e "$src" ] || continue
  [ "$src" = test/test_cuda_emu.cpp ] && continue  # the emulator's own test: no GPU build
  t=${src#test/}; gpu_tests+=("build/gpu/${t%.cpp}")
done
run_step build '^✓|^✗|error|Error' make --no-print-directory train_gpt_cpu train_gpt build/gpu_spec "${gpu_tests[@]}"

# 3. the tests on the GPU
run_step test-gpu '^(PASS|FAIL)|passed, .* failed|GPU arch' make --no-print-directory test-gpu

# 4-5. compute-sanitizer on each kernel test
# shellcheck disable=SC2317  # (called through run_step)
sanitize() {  # TOOL: every build/gpu/test_cuda_* under compute-sanitizer; fails if any reports an error
  local tool=$1 bad=0 t
  for t in "${gpu_tests[@]}"; do
    if [ ! -x "$t" ]; then echo "$t: not built"; bad=1; continue; fi
    echo "-- $t"
    compute-sanitizer --tool "$tool" --error-exitcode 99 "$t" 2>&1 | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Error|error|Hazard|checks, [0-9]+ failed' | head -n 20
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "$t: compute-sanitizer --tool $tool failed"; bad=1; }
  done
  return "$bad"
}
if [ $quick -eq 1 ]; then
  skip_step memcheck "--quick"; skip_step racecheck "--quick"
elif ! command -v compute-sanitizer >/dev/null 2>&1; then
  skip_step memcheck "compute-sanitizer not found (it ships with the CUDA toolkit: \$CUDA_HOME/bin)"
  skip_step racecheck "compute-sanitizer not found"
else
  run_step memcheck '^--|SUMMARY|failed|not built' sanitize memcheck
  run_step racecheck '^--|SUMMARY|Hazard|failed|not built' sanitize racecheck
fi

# 6. benchmarks: the CPU trainer's table, then the GPU section of scripts/bench.sh
run_step bench 'config|^[0-9A-Za-z-]+ +L[0-9]|GPU|MFU|FLOPs|failed|not yet' make --no-print-directory bench

# 7. the kernel lab
# shellcheck disable=SC2317  # (called through run_step)
run_lab() {
  local bad=0 b
  make --no-print-directory cuda-lab || return 1
  for b in build/lab/*; do
    [ -x "$b" ] || continue
    echo "== $b"
    "$b" || bad=1
  done
  # flash against the GEMM attention at the trainer's micro-batch (the shape the step model's flash
  # shares were first measured at) and at BLOOM's sequence length
  if [ -x build/lab/flash_attention ]; then
    echo "== build/lab/flash_attention -B 16"
    build/lab/flash_attention -B 16 || bad=1
    echo "== build/lab/flash_attention -T 2048"
    build/lab/flash_attention -T 2048 || bad=1
    echo "== build/lab/flash_attention -B 8 -C 1536 -NH 12"  # head size 128 (BLOOM's), where auto takes the GEMM path
    build/lab/flash_attention -B 8 -C 1536 -NH 12 || bad=1
    # the same tokens in more, shorter blocks and in fewer, longer ones: with B=16 T=1024 and T=2048,
    # what a block costs beside its steps (dev/cuda/README.md's measurements log)
    echo "== build/lab/flash_attention -B 32 -T 512"
    build/lab/flash_attention -B 32 -T 512 || bad=1
    echo "== build/lab/flash_attention -B 4 -T 4096"
    build/lab/flash_attention -B 4 -T 4096 || bad=1
  fi
  return "$bad"
}
if [ $quick -eq 1 ]; then
  skip_step kernel-lab "--quick"
else
  run_step kernel-lab '^== |^device|^[a-z_]+.*(B=|N=|n=)|^  [0-9] |FAIL|FAILED|agree' run_lab
fi

# 8. the step model's efficiencies as this GPU reaches them, and the model with them against make bench
# shellcheck disable=SC2317  # (called through run_step)
step_curves() {  # GPU_TYPE
  bash scripts/step_curves.sh derive "$logs/kernel-lab.log" "$1" >"$logs/step_curves.txt" || return 1
  echo "-- $logs/step_curves.txt"
  cat "$logs/step_curves.txt"
  echo
  bash scripts/step_curves.sh compare "$logs/step_curves.txt" "$logs/bench.log" "$1"
}
gpu_line=$(head -n 1 <<<"$gpus")
gpu_name=$(cut -d, -f2 <<<"$gpu_line" | sed 's/^ *//; s/ *$//')
gpu_mib=$(cut -d, -f4 <<<"$gpu_line" | grep -o '[0-9]*' | head -n 1)
gpu_type=$(build/gpu_spec --match "$gpu_name" "${gpu_mib:-0}" 2>/dev/null | awk '$1 == "gpu_type" { print $2 }')
if [ $quick -eq 1 ]; then
  skip_step step-curves "--quick (no kernel lab figures)"
elif [ -z "$gpu_type" ]; then
  skip_step step-curves "$gpu_name is not in the step model's GPU table (llmc/step_model.h GPU_SPECS), or build/gpu_spec did not build"
else
  run_step step-curves '^-- |^gpu_type|^[a-z_]+ [0-9.e+-]+$|^step time|^config|^(124M|1\.5B) |error' step_curves "$gpu_type"
fi

# ---- the report: header, summary table, then the sections --------------------------------------
{
  echo "# GPU check — $(hostname) — $(date '+%Y-%m-%d %H:%M:%S')"
  echo
  echo "- commit: \`$(git rev-parse --short HEAD 2>/dev/null || echo unknown)\`$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "- GPUs (index, name, compute capability, memory, driver):"
  echo '```'
  echo "$gpus"
  echo '```'
  echo "- mode: $([ $quick -eq 1 ] && echo 'quick (no sanitizer, no kernel lab)' || echo full)"
  echo
  echo "| step | status | time |"
  echo "|---|---|---|"
  printf '%s\n' "${summary[@]}"
  echo
  cat "$report.body"
} >"$report"
rm -f "$report.body"
echo "report: $report ($([ $failed -eq 0 ] && echo 'every step passed' || echo 'some step FAILED'))"
exit $failed
