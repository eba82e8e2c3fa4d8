#!/usr/bin/env bash
# llmc/comm.h's process groups under `mpirun --oversubscribe -np 4` (docs/internals.md#parallelism): test/test_comm_groups.cpp
# (see its header for what it checks) built twice, because make builds the compiled tests without MPI
# (build/test_comm_groups: the single-process case, run by run_tests.sh on its own):
#   1. build/comm_groups_mpi  (-DKEEL_MPI): host buffers over MPI — the CPU trainer's backend;
#   2. build/comm_groups_emu  (-DKEEL_CUDA_EMULATION -DKEEL_CUDA -DKEEL_MPI, as build/train_gpt_emu):
#      the NCCL backend on emulated device memory, through the emulated NCCL's communicators;
#   3. member lists that disagree within one group are refused by comm_split, on both builds.
# The binaries are named without the test_ prefix so that run_tests.sh does not start them without
# mpirun; they are rebuilt only when a source is newer. A deadlock (a sendrecv that is not one)
# shows as the timeout.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
command -v mpirun >/dev/null && command -v mpicxx >/dev/null || { fail "mpirun/mpicxx not found (scripts/setup.sh installs OpenMPI)"; finish; }
SRC=test/test_comm_groups.cpp
DEPS=("$SRC" llmc/comm.h llmc/parallel.h llmc/common.h test/cuda_emu/*.h)
# The flags of the Makefile's KEEL_CXXFLAGS (warnings, no contraction) and its MPI detection.
FLAGS=(-O2 -std=c++17 -Wall -Wextra -Wno-unused-parameter -ffp-contract=off -fopenmp -I.)
read -ra MPI_C <<<"$(mpicxx --showme:compile)"
read -ra MPI_L <<<"$(mpicxx --showme:link)"

build() {  # out extra-flags...: compile unless up to date
  local out=$1; shift
  local stale=0 d
  [ -x "$out" ] || stale=1
  for d in "${DEPS[@]}"; do [ "$d" -nt "$out" ] && stale=1; done
  [ $stale = 0 ] && return 0
  mkdir -p build
  if ${CXX:-g++} "${FLAGS[@]}" "$@" "${MPI_C[@]}" "$SRC" -o "$out" "${MPI_L[@]}" -lm >"$TMP/build.log" 2>&1; then
    ok "built $out"
  else
    fail "building $out"; tail -20 "$TMP/build.log"; rm -f "$out"
  fi
}
build build/comm_groups_mpi -DKEEL_MPI
build build/comm_groups_emu -Itest/cuda_emu -DKEEL_CUDA_EMULATION -DKEEL_CUDA -DKEEL_MPI

for bin in build/comm_groups_mpi build/comm_groups_emu; do
  [ -x "$bin" ] || continue
  log=$TMP/$(basename "$bin").log
  start=$(date +%s)
  timeout -k 10 30 mpirun --oversubscribe -np 4 "$bin" >"$log" 2>&1; rc=$?
  secs=$(( $(date +%s) - start ))
  grep -E '^(ok|FAIL)' "$log" | sed "s|^|  $bin: |"
  if [ $rc -eq 0 ] && grep -q '^PASS$' "$log" && ! grep -q '^FAIL' "$log"; then
    ok "$bin at 4 ranks: every group, sum and exchange as the rank grid says (${secs}s)"
  else
    [ $rc -eq 124 ] && fail "$bin at 4 ranks: timed out after 30 s (a deadlock?)" || fail "$bin at 4 ranks: exit $rc"
    grep -v '^ok' "$log" | tail -25
  fi

  # Both refusing ranks exit 1 while the other two sit in MPI_Finalize; mpirun then tears the job
  # down. Once, on a loaded 2-core CI machine, that teardown outlived the 30 s bound after the
  # refusal had been printed; such a run is started once more (a hang would time out twice).
  for try in 1 2; do
    out=$(timeout -k 10 30 mpirun --oversubscribe -np 4 "$bin" --bad-split 2>&1); rc=$?
    [ $rc -eq 124 ] && [ $try = 1 ] && grep -q 'one group, two member lists' <<<"$out" || break
    echo "  note: $bin --bad-split refused but mpirun's teardown outlived 30 s; running it once more"
  done
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q 'one group, two member lists' <<<"$out"; then
    ok "$bin: disagreeing member lists refused: $(grep -o 'comm_split: one group.*' <<<"$out" | head -1)"
  else
    fail "$bin --bad-split: exit $rc, no refusal: $(tail -5 <<<"$out")"
  fi
done
finish
