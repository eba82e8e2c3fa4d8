#!/usr/bin/env bash
# scripts/ptxas_report.sh — what ptxas made of every CUDA kernel of train_gpt (`make ptxas-report`),
# and of the few instantiations only the kernel tests make (test/cuda_emu/kernel_instances.cu):
# registers per thread, stack frame, spill stores/loads, static shared memory and the
# __launch_bounds__ maximum of threads (0: none), per architecture.
#
#   bash scripts/ptxas_report.sh [--registers FILE] [ARCH ...]   (default: 80 90; e.g. 90 for the H100/H200 alone)
#
# --registers FILE also writes the table the CUDA emulator checks every launch against
# (test/cuda_emu/kernel_registers.h, `make kernel-registers`; docs/emulator.md): per architecture and
# kernel, its registers per thread and launch bound, the kernel named as c++filt prints ptxas's entry
# without the return type and the parameter list, "> >" written ">>"
# ("keel_cuda::layernorm_backward_kernel<__half, 3, true, 16, true, true>").
#
# A stack frame or a spill means a register array was indexed at run time or the kernel ran out of
# registers: local-memory traffic in a loop that was meant to stay on chip. Exit status: 0 when no
# kernel has either, 1 when one does (listed last), 2 when nvcc is missing or the compile fails.
# Needs nvcc (and the cuBLASLt/NCCL headers the trainer includes); no GPU. Per architecture, the
# trainer's compile takes minutes on 2 cores, kernel_instances.cu's about a minute; after `make`
# (which builds train_gpt) the trainer's report is the build's, kept in build/ptxas_keep/ (that build
# adds the MPI/NCCL defines, which no kernel depends on: the register table is the same either way).
set -u
cd "$(dirname "$0")/.." || exit 2
# source_hash: one hash over train_gpt.cu and every header the Makefile's train_gpt depends on
source_hash() { LC_ALL=C sha256sum train_gpt.cu $(LC_ALL=C ls llmc/*.h llmc/cpu/*.h llmc/cuda/*.h llmc/cuda/*.cuh) | sha256sum | cut -d' ' -f1; }
# (the Makefile's train_gpt rule records it before compiling, beside the report it keeps)
[ "${1:-}" = --source-hash ] && { source_hash; exit; }
table=""
if [ "${1:-}" = --registers ]; then
  [ $# -ge 2 ] || { echo "ptxas_report: --registers needs a file name" >&2; exit 2; }
  table=$2; shift 2
fi
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=$(command -v nvcc || { [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"; })
[ -n "$NVCC" ] || { echo "ptxas_report: nvcc not found (CUDA_HOME=$CUDA_HOME)" >&2; exit 2; }
archs=("$@")
[ ${#archs[@]} -gt 0 ] || archs=(80 90)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The sources: the trainer, and the kernels only the kernel tests instantiate.
SOURCES=(train_gpt.cu test/cuda_emu/kernel_instances.cu)
FLAGS="-O3 -std=c++17 --expt-relaxed-constexpr"
# The trainer's build keeps ptxas's report and its PTX (the Makefile's train_gpt rule): it stands in
# for compiling train_gpt.cu again when it is of these sources, with these flags, by this nvcc, for
# the architecture asked for (a build for one GPU has only that one).
KEEP=build/ptxas_keep
kept_current=0
[ -f "$KEEP/made_from" ] && [ "$(cat "$KEEP/made_from")" = "$(printf '%s\n%s\n%s' "$(source_hash)" "$FLAGS" "$("$NVCC" --version | tail -1)")" ] && kept_current=1
# compile_arch A: each source for sm_A, with ptxas's report ($tmp/A.log) and the PTX kept ($tmp/kA/);
# the trainer's from the build's when that is current
compile_arch() {
  mkdir -p "$tmp/k$1"
  : >"$tmp/$1.log"
  local src
  for src in "${SOURCES[@]}"; do
    if [ "$src" = train_gpt.cu ] && [ $kept_current = 1 ] && [ -f "$KEEP/train_gpt.compute_$1.ptx" ]; then
      cp "$KEEP/train_gpt.compute_$1.ptx" "$tmp/k$1/"
      # the log's entries for sm_A: from each "Compiling entry function ... for 'sm_A'" to the next entry
      awk -v a="'sm_$1'" '/Compiling entry function/ { keep = index($0, "for " a) > 0 } keep' "$KEEP/ptxas.log" >>"$tmp/$1.log"
      kept_used+=("sm_$1")
      continue
    fi
    "$NVCC" $FLAGS -gencode "arch=compute_$1,code=sm_$1" -DKEEL_CUDA -I. \
      -Xcompiler -fopenmp,-ffp-contract=off,-fno-math-errno -c "$src" -o "$tmp/t.o" -Xptxas -v \
      -keep -keep-dir "$tmp/k$1" >>"$tmp/$1.log" 2>&1 || return 1
  done
}
kept_used=()

# rows_of A: one line per kernel entry, "sm_A regs stack spill_st spill_ld smem bounds mangled_name".
# The PTX gives each entry's .maxntid (its __launch_bounds__); ptxas's log per entry: the name line,
# then "N bytes stack frame, S bytes spill stores, L bytes spill loads", then "Used R registers, ...
# [, M bytes smem]".
rows_of() {
  awk -v arch="sm_$1" '
    FNR == NR { if ($0 ~ /\.entry /) { e = $0; sub(/.*\.entry /, "", e); sub(/\(.*/, "", e) }
                if ($1 == ".maxntid") { n = 1; for (i = 2; i <= NF; i++) n *= $i + 0; bounds[e] = n }  # "x[, y[, z]]"
                next }
    /Compiling entry function/ { name = $0; sub(/.*function \047/, "", name); sub(/\047 for.*/, "", name); stack = st = ld = -1 }
    /bytes stack frame/ && name != "" { stack = $1; st = $5; ld = $9 }
    /Used [0-9]+ registers/ && name != "" {
      regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
      smem = 0; if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART, RLENGTH); sub(/ bytes smem/, "", smem) }
      print arch, regs, stack, st, ld, smem, (name in bounds ? bounds[name] : 0), name; name = "" }' \
    <(cat "$tmp/k$1"/*.ptx) "$tmp/$1.log"
}

# kernel_keys: mangled names on stdin → "mangled key" lines, key = c++filt's name less a leading
# "void " (a template's return type) and the final parenthesized group (the parameters), "> >"
# written ">>" (demanglers differ in that space; test/cuda_emu/registers.h does the same)
kernel_keys() {
  cat >"$tmp/mangled"
  c++filt <"$tmp/mangled" | paste -d' ' "$tmp/mangled" - | awk '{
    m = $1; d = substr($0, length(m) + 2); sub(/^void /, "", d)
    if (substr(d, length(d)) == ")") {
      depth = 0
      for (i = length(d); i > 0; i--) { c = substr(d, i, 1); if (c == ")") depth++; else if (c == "(") depth--; if (depth == 0) break }
      d = substr(d, 1, i - 1)
    }
    while (index(d, "> >")) sub(/> >/, ">>", d)
    print m, d }'
}

# write_table: the emulator's register table ($table) from the rows (the largest count and the
# smallest bound where two entries share a name), sorted, with the nvcc that made it
write_table() {
  awk '{print $8}' "$tmp"/*.rows | sort -u | kernel_keys >"$tmp/keys"
  {
    echo "// test/cuda_emu/kernel_registers.h — generated by \`make kernel-registers\` (scripts/ptxas_report.sh"
    echo "// --registers) from ptxas's report of train_gpt.cu and kernel_instances.cu; do not edit. The rows of"
    echo "// the table the CUDA emulator checks every launch against (test/cuda_emu/registers.h, docs/emulator.md):"
    echo "// {architecture, registers per thread, __launch_bounds__ threads (0: none), kernel}."
    echo "// $("$NVCC" --version | grep -m1 -o 'release [0-9.]*' | sed 's/release/nvcc/'), $(printf 'sm_%s ' "${archs[@]}" | sed 's/ $//')."
    awk 'FNR == NR { key[$1] = substr($0, length($1) + 2); next }
         { k = substr($1, 4) SUBSEP key[$8]
           if (!(k in regs) || $2 > regs[k]) regs[k] = $2
           if (!(k in lb) || ($7 > 0 && (lb[k] == 0 || $7 < lb[k]))) lb[k] = $7 }
         END { for (k in regs) { split(k, p, SUBSEP); printf "{%s, %d, %d, \"%s\"},\n", p[1], regs[k], lb[k], p[2] } }' \
      "$tmp/keys" "$tmp"/*.rows | LC_ALL=C sort -t'"' -k2,2 -k1,1
  } >"$table"
}

bad=0
for a in "${archs[@]}"; do
  compile_arch "$a" || { echo "ptxas_report: nvcc failed for sm_$a:" >&2; tail -5 "$tmp/$a.log" >&2; exit 2; }
  rows_of "$a" >"$tmp/$a.rows"
done
printf '%-6s %5s %6s %7s %7s %7s %6s  %s\n' arch regs stack spill_st spill_ld smem bounds kernel
cat "$tmp"/*.rows | while read -r arch regs stack st ld smem lb name; do
  printf '%-6s %5s %6s %7s %7s %7s %6s  %s\n' "$arch" "$regs" "$stack" "$st" "$ld" "$smem" "$lb" "$(echo "$name" | c++filt | sed -E 's/\(.*//')"
done
[ -z "$table" ] || write_table || { echo "ptxas_report: cannot write $table" >&2; exit 2; }
offenders=$(cat "$tmp"/*.rows | awk '$3 > 0 || $4 > 0 || $5 > 0')
n=$(cat "$tmp"/*.rows | wc -l)
if [ -n "$offenders" ]; then
  echo
  echo "kernels with a stack frame or spills:"
  echo "$offenders" | while read -r arch regs stack st ld smem lb name; do
    echo "  $arch: $(echo "$name" | c++filt | sed -E 's/\(.*//') (stack $stack, spill stores $st, loads $ld)"
  done
  bad=1
fi
[ -z "$table" ] || echo "register table: $table ($(grep -c '^{' "$table") rows)"
[ ${#kept_used[@]} = 0 ] || echo "train_gpt.cu for ${kept_used[*]}: ptxas's report kept by the trainer's build ($KEEP), of the same sources, flags and nvcc"
echo "$n kernel builds over ${#archs[@]} architecture(s): $([ $bad -eq 0 ] && echo 'no stack frame, no spill' || echo 'SOME WITH STACK OR SPILLS')"
exit $bad
