#!/usr/bin/env bash
# The Makefile's GPU architecture choice, read from `make -n` (nothing is built):
# without a GPU the nvcc lines carry a fat binary for sm_80 and sm_90 plus compute_90 PTX; GPU_ARCH=90
# gives sm_90 alone; a value nvcc cannot compile for (9.0, 70) stops make with a message naming it.
# Skipped (passes, saying so) on a machine without nvcc, where train_gpt is not built at all.
source "$(dirname "$0")/lib.sh"
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "no nvcc: train_gpt is not built, nothing to check"; finish; }
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && { echo "a GPU is present: the detected architecture is gpu_check.sh's to report"; finish; }
codes() { make -n -B "$@" train_gpt 2>&1 | grep -o "arch=compute_[0-9a-z]*,code=[a-z_0-9]*" | sort -u | tr '\n' ' '; }
got=$(codes)
[ "$got" = "arch=compute_80,code=sm_80 arch=compute_90,code=compute_90 arch=compute_90,code=sm_90 " ] \
  && ok "no GPU: a fat binary for sm_80 and sm_90 with compute_90 PTX" || fail "default architectures: '$got'"
got=$(codes GPU_ARCH=90)
[[ "$got" == *"code=sm_90"* && "$got" != *"sm_80"* ]] && ok "GPU_ARCH=90: sm_90 alone ($got)" || fail "GPU_ARCH=90: '$got'"
for bad in 9.0 70 abc; do
  out=$(make -n GPU_ARCH=$bad train_gpt 2>&1); rc=$?
  [ $rc -ne 0 ] && grep -q "GPU_ARCH=$bad" <<<"$out" && ok "GPU_ARCH=$bad refused: $(grep -o 'GPU_ARCH=[^:]*: [^(]*' <<<"$out" | head -1)" \
    || fail "GPU_ARCH=$bad: exit $rc"
done
finish
