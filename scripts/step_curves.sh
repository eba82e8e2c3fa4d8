#!/usr/bin/env bash
# scripts/step_curves.sh — the step model's efficiencies as measured on a GPU, and the model with them
# against the steps keel measured there (docs/operations.md#calibrating-to-a-gpu---step-curves-file).
#
#   bash scripts/step_curves.sh derive LAB_LOG GPU_TYPE > step_curves.txt
#   bash scripts/step_curves.sh compare CURVES BENCH_LOG GPU_TYPE
#
# derive: from the kernel lab's tables (the output of build/lab/*, as scripts/gpu_check.sh's
#   kernel-lab.log holds them), a curves file for `--dry-run --step-curves`. Each share is the value
#   under which the model's own formula for that kernel (llmc/step_model.h) takes the time the lab
#   measured, against the peaks of GPU_TYPE's row of the GPU table (build/gpu_spec prints it):
#     gemm_eff       the best `matmul_forward ... (square)` row of keel: FLOPs / (time x bf16 peak),
#                    over the model's factor for the shape, d/(d + gemm_half_dim) at its smallest side d
#     flash_fwd_eff  every `attention forward` table's flash row, counted as the model counts it: the
#                    causal half-products, 2·B·NH·T²·hs (the lab counts the full T×T, twice that), the
#                    FLOPs of all of them over their time
#     flash_bwd_eff  the same of the backward: 5·B·NH·T²·hs (the lab: 8·B·NH·T²·hs)
#     mem_eff        keel's row of every table without FLOPs (the memory-bound kernels): their bytes over
#                    their time, over the HBM bandwidth
#   The lab sees one GPU and times one call between two events, so nvlink_eff, ib_eff and kernel_gap_s
#   stay the model's. Exit 1 when the log holds none of these rows, or a share comes out above 1 (the
#   GPU is not GPU_TYPE).
# compare: --dry-run at make bench's GPU shapes (GPT-2 124M and 1.5B, B=16, T=1024, bf16) on GPU_TYPE,
#   with the model's own efficiencies and with CURVES, beside the ms/iteration make bench measured
#   (BENCH_LOG: its output; "-" where it has no such row). Exit 1 when a prediction failed (its error
#   on stderr).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
KEEL=${KEEL:-./train_gpt_cpu}
GPU_SPEC=${GPU_SPEC:-build/gpu_spec}

die() { echo "error: step_curves.sh: $*" >&2; exit 2; }

# spec_value TYPE KEY: one figure of the GPU table's row
spec_value() {
  local v
  v=$("$GPU_SPEC" "$1" | awk -v k="$2" '$1 == k { print $2 }') || exit 2
  [ -n "$v" ] || die "$GPU_SPEC $1 has no $2"
  echo "$v"
}

# The lab's tables as records "KIND|TITLE|VARIANT|MS|GBPS": a timed row (number, one-word name, ms, GB/s,
# TFLOP/s or -) under the title line that precedes its table's `bytes` line; KIND says whether the
# table counts FLOPs. Rows that are not timed (a wrong result, the emulation, a timing-only
# measurement whose name is not one word) do not match.
lab_rows() {
  awk '
    /^  bytes / { title = prev; kind = ($0 ~ /FLOPs/) ? "flops" : "bytes" }
    /^  [0-9]+ +[a-z]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +([0-9]+\.[0-9]+|-) *$/ { print kind "|" title "|" $2 "|" $3 "|" $4 }
    { prev = $0 }' "$1"
}

# derive_shares PEAK16 HBM HALF_DIM: the records on stdin to "key value # how" lines, and the layer's
# GEMMs as comments. FLOPs from each title's N= C= OC= or B= T= C= NH= words.
derive_shares() {
  awk -F'|' -v peak="$1" -v hbm="$2" -v half="$3" '
    function word(t, key,   i, n, w) { n = split(t, w, " "); for (i = 1; i <= n; i++) if (index(w[i], key "=") == 1) return substr(w[i], length(key) + 2) + 0; return -1 }
    function min3(a, b, c) { return a < b ? (a < c ? a : c) : (b < c ? b : c) }
    $1 == "flops" && $2 ~ /^matmul_forward / && $3 == "keel" {
      n = word($2, "N"); c = word($2, "C"); oc = word($2, "OC"); d = min3(n, c, oc); rate = 2 * n * c * oc / ($4 * 1e-3)
      if ($2 ~ /\(square\)/) {
        e = rate / peak / (d / (d + half))
        if (e > gemm) { gemm = e; gemm_how = sprintf("%s: %.4g TFLOP/s = %.4g of the peak, over d/(d+%g) = %.4g", $2, rate / 1e12, rate / peak, half, d / (d + half)) }
      } else layers[++nl] = sprintf("%s|%.4g|%d", $2, rate / 1e12, d)
    }
    $1 == "flops" && $2 ~ /^attention (forward|backward) / && $3 == "flash" {
      b = word($2, "B"); t = word($2, "T"); hs = word($2, "C") / word($2, "NH"); nh = word($2, "NH")
      if ($2 ~ /forward/) { ff += 2 * b * nh * t * t * hs; ft += $4; fn++ } else { bf += 5 * b * nh * t * t * hs; bt += $4; bn++ }
    }
    $1 == "bytes" && $3 == "keel" { mb += $5 * $4; mt += $4; mn++ }
    END {
      if (gemm > 0) printf "gemm_eff %.4g|the best square GEMM, %s\n", gemm, gemm_how
      for (i = 1; i <= nl && gemm > 0; i++) {
        split(layers[i], f, "|")
        printf "# layer|%s: %s TFLOP/s measured, %.4g modelled (gemm_eff x d/(d+%g), d = %d)\n", f[1], f[2], gemm * peak * f[3] / (f[3] + half) / 1e12, half, f[3]
      }
      if (fn) printf "flash_fwd_eff %.4g|%d flash forward table(s): %.4g TFLOP/s counted as the model counts (causal halves)\n", ff / (ft * 1e-3) / peak, fn, ff / (ft * 1e-3) / 1e12
      if (bn) printf "flash_bwd_eff %.4g|%d flash backward table(s): %.4g TFLOP/s counted as the model counts (causal halves)\n", bf / (bt * 1e-3) / peak, bn, bf / (bt * 1e-3) / 1e12
      if (mn) printf "mem_eff %.4g|%d memory-bound kernel(s), keel'"'"'s rows: %.4g GB/s, their bytes over their time\n", mb / mt * 1e9 / hbm, mn, mb / mt
    }'
}

# derive LAB_LOG GPU_TYPE: the curves file on stdout.
derive() {
  local log=$1 type=$2 peak hbm half shares key val how over=
  [ -r "$log" ] || die "derive: cannot read the lab log '$log'"
  peak=$(spec_value "$type" peak16_flops) && hbm=$(spec_value "$type" hbm_bytes_per_s) && half=$(spec_value "$type" gemm_half_dim) || exit 2
  shares=$(lab_rows "$log" | derive_shares "$peak" "$hbm" "$half")
  grep -q '^[a-z]' <<<"$shares" || { echo "error: step_curves.sh: $log holds no timed row of the kernel lab's matmul, flash_attention or memory-bound tables" >&2; exit 1; }
  echo "# step curves: the step model's efficiencies measured on this GPU by the kernel lab (scripts/step_curves.sh derive)"
  echo "# from $log against the $type row: bf16 peak $(awk -v p="$peak" 'BEGIN { printf "%g", p / 1e12 }') TFLOP/s, HBM $(awk -v h="$hbm" 'BEGIN { printf "%g", h / 1e9 }') GB/s"
  echo "# use: train_gpt_cpu --dry-run ... --gpu-type $type --step-curves FILE"
  echo "gpu_type $type"
  while IFS='|' read -r key how; do
    [[ "$key" == "# layer" ]] && { echo "#   keel's $how"; continue; }
    val=${key#* }; key=${key%% *}
    echo "# $key: $how (the model's own: $(spec_value "$type" "$key"))"
    echo "$key $val"
    awk -v v="$val" 'BEGIN { exit !(v > 1) }' && over+="${over:+, }$key $val"
  done <<<"$shares"
  echo "# not measured by the lab (one GPU, one call between two events): nvlink_eff, ib_eff, kernel_gap_s stay the model's"
  [ -z "$over" ] || { echo "error: step_curves.sh: $over above 1: the GPU measured is faster than the $type row (another GPU?)" >&2; return 1; }
}

# predict CONFIG_FLAGS GPU_TYPE [CURVES]: --dry-run's seconds per iteration, or "-" (with the error on stderr).
predict() {
  local flags=$1 type=$2 json rc extra=()
  [ -n "${3:-}" ] && extra=(--step-curves "$3")
  json=$(mktemp) || exit 2
  # shellcheck disable=SC2086  # (the flags are words)
  $KEEL --dry-run $flags --gpu-type "$type" "${extra[@]}" --dry-run-json "$json" >"$json.out" 2>&1
  rc=$?
  if [ $rc -le 1 ] && [ -s "$json" ]; then grep -o '"step_seconds": [^,]*' "$json" | awk '{ print $2 }'; else tail -n 2 "$json.out" >&2; echo -; fi
  rm -f "$json" "$json.out"
}

# compare CURVES BENCH_LOG GPU_TYPE: the table of measured and predicted steps.
compare() {
  local curves=$1 bench=$2 type=$3 name L C NH shape flags measured own cal bad=0
  [ -r "$curves" ] || die "compare: cannot read the curves file '$curves'"
  [ -x "$KEEL" ] || die "compare: $KEEL is not built (make train_gpt_cpu)"
  echo "step time on 1 x $type, B=16 T=1024 bf16: measured by make bench ($bench) against --dry-run with the model's own efficiencies and with $curves"
  printf '%-6s %-25s %12s %24s %24s\n' config shape "measured ms" "model's own ms (error)" "with the curves (error)"
  while read -r name L C NH; do
    shape="L$L C$C NH$NH T1024 B16"
    flags="--num-layers $L --hidden-size $C --num-attention-heads $NH --seq-length 1024 --micro-batch-size 16 --global-batch-size 16 --bf16"
    measured=$(awk -v n="$name" -v s="$shape" '$1 == n && index($0, s) { print $7; exit }' "$bench" 2>/dev/null)
    own=$(predict "$flags" "$type")
    cal=$(predict "$flags" "$type" "$curves")
    [ "$own" = - ] || [ "$cal" = - ] && bad=1
    awk -v n="$name" -v s="$shape" -v m="${measured:--}" -v a="$own" -v b="$cal" '
      function cell(p) { if (p == "-") return "-"; return m == "-" ? sprintf("%.1f", p * 1e3) : sprintf("%.1f (%+.1f%%)", p * 1e3, 100 * (p * 1e3 / m - 1)) }
      BEGIN { printf "%-6s %-25s %12s %24s %24s\n", n, s, m, cell(a), cell(b) }'
  done <<<$'124M 12 768 12\n1.5B 48 1600 25'
  return $bad
}

case "${1:-}" in
  derive) [ $# -eq 3 ] || die "usage: derive LAB_LOG GPU_TYPE"; derive "$2" "$3" ;;
  compare) [ $# -eq 4 ] || die "usage: compare CURVES BENCH_LOG GPU_TYPE"; compare "$2" "$3" "$4" ;;
  *) die "usage: $0 derive LAB_LOG GPU_TYPE | compare CURVES BENCH_LOG GPU_TYPE" ;;
esac
