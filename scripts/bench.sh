#!/usr/bin/env bash
# `make bench`: ms/iteration, tokens/s and achieved GFLOP/s of the CPU trainer on fixed configs
# (GPT-2 vocabulary, padded 50304). FLOPs per token = 6·N + 6·L·C·T (N = parameters including
# the padded vocabulary, which the classifier multiplies). Iteration 1 is warm-up and not counted;
# the figures are the mean of the timed iterations. Timing is printed, never asserted.
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${BENCH_ITERS:-4}
[ -f data/brown/brown_train.bin ] || make --no-print-directory data
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
peak_probe() { ./build/fma_peak | awk '$2 != "threads" { if ($3 > best) { best = $3; isa = $2 } } END { printf "%s %s\n", best + 0, isa }'; }
read -r PEAK PEAK_ISA < <(peak_probe)
printf '%-10s %-22s %12s %10s %10s %8s\n' config shape ms/iter tok/s GFLOP/s "% peak"
bench() { # name L C NH T B [more flags]
  local name=$1 L=$2 C=$3 NH=$4 T=$5 B=$6; shift 6
  ./train_gpt_cpu "$@" --num-layers "$L" --hidden-size "$C" --num-attention-heads "$NH" --seq-length "$T" \
    --micro-batch-size "$B" --train-iters "$ITERS" --lr 1e-4 --train-data-path data/brown/brown_train.bin \
    --log-interval 1000 --metrics-file "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 || { echo "$name: run failed"; tail -3 "$tmp/$name.log"; return; }
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
