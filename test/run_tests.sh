#!/usr/bin/env bash
# Runs every test: the compiled unit tests build/test_* and the scripted tests test/test_*.sh.
# A test passes when it exits 0. Prints one line per test and ends with `N passed, N failed`;
# exits non-zero if anything failed. `bash test/run_tests.sh PATTERN` runs only matching tests;
# KEEL_TEST_BIN_DIR=build/gpu takes the compiled tests from there (make test-gpu).
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
pattern="${1:-}"
passed=0; failed=0; failures=()
mkdir -p build/test_logs
for t in "${KEEL_TEST_BIN_DIR:-build}"/test_* test/test_*.sh; do
  [ -e "$t" ] || continue
  case "$t" in *.cpp|*/test_logs) continue;; esac
  name=$(basename "$t"); name=${name%.sh}
  [ -n "$pattern" ] && [[ "$name" != *$pattern* ]] && continue
  log=build/test_logs/$name.log
  start=$(date +%s)
  if [[ "$t" == *.sh ]]; then bash "$t" >"$log" 2>&1; else "$t" >"$log" 2>&1; fi
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    passed=$((passed+1)); printf 'PASS  %-32s %4ds\n' "$name" "$secs"
  else
    failed=$((failed+1)); failures+=("$name"); printf 'FAIL  %-32s %4ds  (exit %d, log %s)\n' "$name" "$secs" "$rc" "$log"
    tail -n 25 "$log" | sed 's/^/      | /'
  fi
done
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
