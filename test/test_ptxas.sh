#!/usr/bin/env bash
# Every CUDA kernel of train_gpt compiles for sm_80 and sm_90 without a stack frame or a register
# spill (scripts/ptxas_report.sh): a register array indexed at run time, or a kernel over its
# register budget, would put its hot loop's data in local memory. The same report, written as the
# CUDA emulator's register table, equals the checked-in test/cuda_emu/kernel_registers.h row for row
# (otherwise the emulator checks launches against stale counts: `make kernel-registers`). Needs
# nvcc, no GPU. After `make` the trainer's report is the one its build kept (build/ptxas_keep/, when
# of the same sources, flags and nvcc), so only kernel_instances.cu compiles here (~70 s an
# architecture on 2 cores); without that build, train_gpt.cu compiles too (minutes).
source "$(dirname "$0")/lib.sh"
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
  fail "nvcc not found: the kernels' ptxas figures cannot be checked (scripts/setup.sh does not install CUDA)"; finish
fi
TABLE=test/cuda_emu/kernel_registers.h
out=$(bash scripts/ptxas_report.sh --registers "$TMP/kernel_registers.h" 80 90 2>&1); rc=$?
echo "$out" | grep -E "flash_attention|adamw_update_pieces|kernel builds|kept by" | head -24
case $rc in
  0) ok "$(echo "$out" | tail -1)" ;;
  1) fail "$(echo "$out" | sed -n '/kernels with a stack frame/,$p')" ;;
  *) fail "ptxas report failed: $(echo "$out" | tail -5)" ;;
esac

# table_diff A B: the rows (not the comments: the nvcc version line) in which two tables differ
table_diff() { diff <(grep '^{' "$1") <(grep '^{' "$2") | grep '^[<>]'; }
if [ $rc -le 1 ]; then
  d=$(table_diff "$TABLE" "$TMP/kernel_registers.h")
  [ -z "$d" ] && ok "$TABLE is current: $(grep -c '^{' "$TABLE") rows = this nvcc's report" ||
    fail "$TABLE is not current ($(echo "$d" | wc -l) rows differ, < checked in, > now; make kernel-registers): $(echo "$d" | head -4 | tr '\n' ' ')"
  # the comparison can fail: one count changed (to 256, more than ptxas ever gives) is a difference
  sed -E '0,/^\{80, [0-9]+,/s//{80, 256,/' "$TMP/kernel_registers.h" >"$TMP/changed.h"
  [ -n "$(table_diff "$TMP/kernel_registers.h" "$TMP/changed.h")" ] && ok "negative control: a table with one count changed differs" ||
    fail "negative control: a changed count went unseen"
fi

# the check can fail: a kernel that indexes a register array at run time has a stack frame
probe=$TMP/probe.cu
cat >"$probe" <<'CU'
__global__ void probe(float* x, int n) {
    float a[64];
    for (int i = 0; i < 64; i++) a[i] = x[i];
    for (int i = 0; i < n; i++) a[(i * 7) & 63] += a[i & 63];
    for (int i = 0; i < 64; i++) x[i] = a[i];
}
CU
nv=$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")
# (the whole output first: grep -q may close the pipe while ptxas still writes, and under pipefail
# the SIGPIPE fails the pipeline)
probe_out=$("$nv" -gencode arch=compute_90,code=sm_90 -c "$probe" -o "$TMP/probe.o" -Xptxas -v 2>&1)
grep -qE "[1-9][0-9]* bytes stack frame" <<<"$probe_out" \
  && ok "negative control: a run-time-indexed register array shows a stack frame in ptxas's report" \
  || fail "negative control: ptxas reported no stack frame for a run-time-indexed array"
finish
