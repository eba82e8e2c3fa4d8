#!/usr/bin/env bash
# scripts/ptxas_report.sh — what ptxas made of every CUDA kernel of train_gpt (`make ptxas-report`):
# registers per thread, stack frame, spill stores/loads and static shared memory, per architecture.
#
#   bash scripts/ptxas_report.sh [ARCH ...]      (default: 80 90; e.g. 90 for the H100/H200 alone)
#
# A stack frame or a spill means a register array was indexed at run time or the kernel ran out of
# registers: local-memory traffic in a loop that was meant to stay on chip. Exit status: 0 when no
# kernel has either, 1 when one does (listed last), 2 when nvcc is missing or the compile fails.
# Needs nvcc (and the cuBLASLt/NCCL headers the trainer includes); no GPU. One compile per
# architecture, ~40 s each on 2 cores.
set -u
cd "$(dirname "$0")/.." || exit 2
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=$(command -v nvcc || { [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"; })
[ -n "$NVCC" ] || { echo "ptxas_report: nvcc not found (CUDA_HOME=$CUDA_HOME)" >&2; exit 2; }
archs=("$@")
[ ${#archs[@]} -gt 0 ] || archs=(80 90)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0
printf '%-6s %5s %6s %7s %7s %7s  %s\n' arch regs stack spill_st spill_ld smem kernel
for a in "${archs[@]}"; do
  if ! "$NVCC" -O3 -std=c++17 --expt-relaxed-constexpr -gencode "arch=compute_$a,code=sm_$a" -DKEEL_CUDA -I. \
        -Xcompiler -fopenmp,-ffp-contract=off,-fno-math-errno -c train_gpt.cu -o "$tmp/t.o" -Xptxas -v >"$tmp/$a.log" 2>&1; then
    echo "ptxas_report: nvcc failed for sm_$a:" >&2; tail -5 "$tmp/$a.log" >&2; exit 2
  fi
  # per entry: the name line, then "N bytes stack frame, S bytes spill stores, L bytes spill loads",
  # then "Used R registers, ... [, M bytes smem]"
  awk -v arch="sm_$a" '
    /Compiling entry function/ { name = $0; sub(/.*function \047/, "", name); sub(/\047 for.*/, "", name); stack = st = ld = -1 }
    /bytes stack frame/ && name != "" { stack = $1; st = $5; ld = $9 }
    /Used [0-9]+ registers/ && name != "" {
      regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
      smem = 0; if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART, RLENGTH); sub(/ bytes smem/, "", smem) }
      print arch, regs, stack, st, ld, smem, name; name = "" }' "$tmp/$a.log" >"$tmp/$a.rows"
done
cat "$tmp"/*.rows | while read -r arch regs stack st ld smem name; do
  printf '%-6s %5s %6s %7s %7s %7s  %s\n' "$arch" "$regs" "$stack" "$st" "$ld" "$smem" "$(echo "$name" | c++filt | sed -E 's/\(.*//')"
done
offenders=$(cat "$tmp"/*.rows | awk '$3 > 0 || $4 > 0 || $5 > 0')
n=$(cat "$tmp"/*.rows | wc -l)
if [ -n "$offenders" ]; then
  echo
  echo "kernels with a stack frame or spills:"
  echo "$offenders" | while read -r arch regs stack st ld smem name; do
    echo "  $arch: $(echo "$name" | c++filt | sed -E 's/\(.*//') (stack $stack, spill stores $st, loads $ld)"
  done
  bad=1
fi
echo "$n kernel builds over ${#archs[@]} architecture(s): $([ $bad -eq 0 ] && echo 'no stack frame, no spill' || echo 'SOME WITH STACK OR SPILLS')"
exit $bad
