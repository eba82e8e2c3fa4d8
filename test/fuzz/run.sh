#!/usr/bin/env bash
# run.sh — runs the built fuzz targets (build/fuzz/fuzz_*, `make fuzz-build`), each from its seed
# corpus test/fuzz/corpus/<name> plus the corpus earlier runs grew in build/fuzz/corpus/<name>.
#   bash test/fuzz/run.sh SECONDS [NAME ...]   fuzz each target (all by default) for SECONDS
# Every run is bounded: -rss_limit_mb=2048 (a header that makes a reader allocate unbounded memory
# is a finding), -timeout=10 per input (a hang is a finding). LeakSanitizer stays on. A finding stops
# that target: its input lands in build/fuzz/findings/<name>-crash-* (or -timeout-, -oom-, -leak-);
# fix the reader, then keep the input in test/fuzz/corpus/<name>/ as a regression. Exits non-zero
# if any target reported a finding.
# KEEL_FUZZ_WORK=DIR puts the grown corpora and findings under DIR instead of build/fuzz (the smoke
# test uses a fresh temporary one).
set -uo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:?usage: run.sh SECONDS [NAME ...]}; shift
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for s in test/fuzz/fuzz_*.cpp; do names+=("$(basename "$s" .cpp | sed 's/^fuzz_//')"); done
fi
work=${KEEL_FUZZ_WORK:-build/fuzz}
mkdir -p "$work/findings"
bad=0
for n in "${names[@]}"; do
  bin=build/fuzz/fuzz_$n
  [ -x "$bin" ] || { echo "FAIL: $bin is not built (make fuzz-build)"; bad=$((bad+1)); continue; }
  mkdir -p "$work/corpus/$n"
  log="$work/findings/$n.log"
  start=$(date +%s)
  # -close_fd_mask=3: the readers' error lines and notes stay quiet; libFuzzer and the sanitizers
  # still report through their own copy of stderr.
  "$bin" "$work/corpus/$n" "test/fuzz/corpus/$n" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -close_fd_mask=3 -print_final_stats=1 -artifact_prefix="$work/findings/$n-" >"$log" 2>&1
  rc=$?
  runs=$(grep -m1 -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
  if [ $rc -eq 0 ]; then
    printf 'ok: fuzz_%-12s %4ds %9s runs, %s, corpus %s inputs\n' "$n" $(( $(date +%s) - start )) "${runs:-?}" "${cov:-cov ?}" "$(ls "$work/corpus/$n" | wc -l)"
  else
    bad=$((bad+1))
    echo "FAIL: fuzz_$n exit $rc: $(grep -m1 -E 'ERROR|runtime error|fuzz invariant|Timeout|out-of-memory|deadly signal' "$log")"
    grep -E "Test unit written to" "$log" | sed 's/^/      /'
    grep -E '^ *#[0-9]+ 0x' "$log" | head -8 | sed 's/^/      /'
  fi
done
[ $bad -eq 0 ]
