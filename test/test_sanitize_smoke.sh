#!/usr/bin/env bash
# test_sanitize_smoke.sh — the sanitizer smoke in make test: test/sanitize.sh smoke (the CPU trainer
# under ASan + UBSan: many knobs, save + resume, DP=2 under mpirun, bad inputs). make test-sanitize
# runs the full set.
exec bash "$(dirname "$0")/sanitize.sh" smoke
