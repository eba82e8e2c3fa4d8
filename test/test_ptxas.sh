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

# No fused multiply-add in the LayerNorm kernels: nvcc fuses a·b + c into an FMA or not depending on
# the code around it, which put the fp32 forward's vector and scalar paths 1 ulp apart on an H200
# (where the tests require the same bytes; the emulation, built with -ffp-contract=off, cannot see
# it). Those kernels spell their products and sums __fmul_rn/__fadd_rn (PTX mul.rn/add.rn, never
# fused, where ptxas may still fuse a plain mul.f32 with an add): every layernorm entry of the
# trainer's PTX (build/ptxas_keep/, current with the sources) holds mul.rn.f32, no fma and no plain
# mul.f32.
# fma_entries FILE PATTERN: "NAME FMAS MULRN PLAINMUL" for every .entry whose name matches PATTERN
fma_entries() {
  awk -v pat="$2" '/^\.(visible )?\.entry / { name = $0; sub(/.*\.entry /, "", name); sub(/\(.*/, "", name); on = name ~ pat; if (on) { f[name] = 0; m[name] = 0; u[name] = 0 } next }
    on && /^[ \t]+fma\./ { f[name]++ } on && /^[ \t]+mul\.rn\.f32/ { m[name]++ } on && /^[ \t]+mul(\.ftz)?\.f32/ { u[name]++ }
    on && /^}/ { on = 0 }
    END { for (n in f) print n, f[n], m[n], u[n] }' "$1"
}
keep=build/ptxas_keep
if [ "$(head -n 1 "$keep/made_from" 2>/dev/null)" != "$(bash scripts/ptxas_report.sh --source-hash)" ]; then
  fail "$keep holds no PTX of the current sources (build train_gpt first: make train_gpt)"
else
  for ptx in "$keep"/train_gpt.compute_*.ptx; do
    rows=$(fma_entries "$ptx" layernorm)
    n=$(grep -c . <<<"$rows"); fused=$(awk '$2 > 0 || $4 > 0' <<<"$rows"); unspelled=$(awk '$3 == 0' <<<"$rows")
    [ "$n" -ge 6 ] && [ -z "$fused" ] && [ -z "$unspelled" ] && ok "$(basename "$ptx"): $n LayerNorm kernels, no fma or plain mul.f32, each with mul.rn.f32" ||
      fail "$(basename "$ptx"): LayerNorm kernels with an fma or without mul.rn ($n kernels): $(echo "$fused $unspelled" | head -c 400)"
  done
fi
# the check can fail: a kernel spelling y = a·b + c plainly gets an fma
cat >"$TMP/fma_probe.cu" <<'CU'
__global__ void layernorm_probe(float* y, const float* a, const float* b, const float* c) { y[threadIdx.x] = a[threadIdx.x] * b[threadIdx.x] + c[threadIdx.x]; }
CU
"$nv" -arch=sm_90 --ptx "$TMP/fma_probe.cu" -o "$TMP/fma_probe.ptx" 2>/dev/null &&
  [ "$(fma_entries "$TMP/fma_probe.ptx" layernorm | awk '{ print $2 }')" -ge 1 ] 2>/dev/null &&
  ok "negative control: a plainly spelled a·b + c is an fma in the PTX, and the check sees it" ||
  fail "negative control: no fma found in the probe's PTX"

# Two flash backward variants — the kernel lab's acquire-read chain and the 32-query steps the
# trainer times against 64 at start-up — differ from the 64-query early-chain kernel only in what the
# emulation cannot see (it runs the dQ chain's waits and launch bounds as no-ops, so test_cuda_flash's
# same-bytes check holds either way): the PTX must show it. The trainer's early chain acquires its
# turn by fence.acq_rel after relaxed reads, with no ld.acquire; the acquire-read chain
# (FLASH_CHAIN_EARLY_ACQUIRE) by ld.acquire, with no fence.acq_rel; the 32-query-step kernel asks for
# 3 blocks a multiprocessor (.minnctapersm 3), the 64-query kernel for none. Each compared with the
# other: a variant that compiled to the 64-query kernel's code would fail.
cat >"$TMP/variants.cu" <<'CU'
#include "llmc/cuda/flash_attention.cuh"
#define BWD(CHAIN, STEP) template __global__ void keel_cuda::flash_attention_backward_kernel<__nv_bfloat16, 64, true, 4, CHAIN, STEP>( \
    __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, const float*, const float*, float*, int*, int, int, int, int, int, int, AttentionOpts, \
    keel_cuda::AttnScoreScale, float, bool);
BWD(1, 0)
BWD(3, 0)
BWD(1, 32)
CU
# entry_has PTX CHAIN STEP PATTERN: how many lines of that entry match PATTERN (its directives included)
entry_has() {
  awk -v name="flash_attention_backward_kernelI13__nv_bfloat16Li64ELb1ELi4ELi$2ELi$3E" -v pat="$4" '
    /\.entry / { on = index($0, name) > 0 } on && $0 ~ pat { n++ } on && /^}/ { on = 0 } END { print n + 0 }' "$1"
}
if "$nv" -O3 -std=c++17 --expt-relaxed-constexpr -I. -arch=sm_90 --ptx "$TMP/variants.cu" -o "$TMP/variants.ptx" >"$TMP/variants.log" 2>&1; then
  v=$TMP/variants.ptx
  [ "$(entry_has "$v" 1 0 'fence\.acq_rel\.gpu')" -ge 1 ] && [ "$(entry_has "$v" 1 0 'ld\.acquire')" -eq 0 ] &&
    [ "$(entry_has "$v" 3 0 'ld\.acquire\.gpu')" -ge 1 ] && [ "$(entry_has "$v" 3 0 'fence\.acq_rel')" -eq 0 ] &&
    ok "flash backward PTX: the early chain acquires by fence.acq_rel, the acquire-read chain by ld.acquire (no fence)" ||
    fail "flash backward PTX: the chains' acquire is not as built (fence/ld.acquire: early $(entry_has "$v" 1 0 'fence\.acq_rel')/$(entry_has "$v" 1 0 'ld\.acquire'), acquire-read $(entry_has "$v" 3 0 'fence\.acq_rel')/$(entry_has "$v" 3 0 'ld\.acquire'))"
  [ "$(entry_has "$v" 1 32 '^\.minnctapersm 3')" -eq 1 ] && [ "$(entry_has "$v" 1 0 'minnctapersm')" -eq 0 ] &&
    ok "flash backward PTX: 32-query steps ask for 3 blocks a multiprocessor, the 64-query kernel for no minimum" ||
    fail "flash backward PTX: .minnctapersm not as built (32-query steps: $(entry_has "$v" 1 32 'minnctapersm'), 64-query: $(entry_has "$v" 1 0 'minnctapersm'))"
else
  fail "the flash backward's variants do not compile to PTX: $(head -3 "$TMP/variants.log")"
fi
finish
