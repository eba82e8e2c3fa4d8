#!/usr/bin/env bash
# The CUDA emulator as a sanitizer (docs/emulator.md): keel's kernels and the emulated trainer under
# the emulator's detectors, and each detector shown catching a defect planted in a scratch copy of
# keel's own code.
#   1. schedules: every kernel test prints byte-identical output under KEEL_EMU_SCHEDULE=reverse and
#      random:SEED as in launch order (a difference is a race or an order-dependent reduction);
#   2. streams run apart (KEEL_EMU_STREAMS=async:SEED) and poison (KEEL_EMU_POISON): the same output;
#   3. the checked build (build/racecheck/, KEEL_EMU_RACECHECK): no race, out-of-bounds or
#      uninitialized shared-memory access in the kernel tests;
#   4. planted defects, each compiled from a copy of llmc/ with one change, each stopped with a
#      message naming it: a removed barrier, a removed __syncwarp (flash; the LayerNorm backward's
#      region zeroing), a read one past a shared array, an
#      uninitialized shared read (by the checked build, and by poison), a removed __syncwarp again by
#      the schedule alone (the output changes with it), a removed stream wait, a misaligned cuBLASLt
#      bias, an oversized launch, a block over the register file (ptxas's registers × threads), a
#      block over __launch_bounds__; and NCCL calls the ranks disagree on;
#   5. (full) the emulated trainer at DP=2 (ZeRO-1, overlapping gradient buckets), TP=2 and PP=2:
#      records and checkpoint bytes under streams run apart, a random schedule and poison equal the
#      in-order synchronous run's; the bucket reduction's stream wait removed from llmc/comm.h is caught
#      by streams run apart; and one iteration (flash and GEMM attention) in the checked build.
# `make test` runs the fast subset (kernel tests that take seconds, 1 random seed, the checked build
# of three tests and of the plant driver's LayerNorm, every planted defect); `make test-emu-sanitize`
# (KEEL_EMU_SANITIZE=full) all of it.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
unset KEEL_EMU_SCHEDULE KEEL_EMU_POISON KEEL_EMU_STREAMS KEEL_EMU_PROFILE KEEL_EMU_TRACE
# every keel kernel the tests launch must be in the register table (a stale table is refused)
export KEEL_EMU_REGISTERS=strict
FULL=$([ "${KEEL_EMU_SANITIZE:-}" = full ] && echo 1 || echo 0)
if [ $FULL = 1 ]; then
  KERNELS="emu elementwise matmul layers attention optimizer flash streams"
  VARIANTS="KEEL_EMU_SCHEDULE=reverse KEEL_EMU_SCHEDULE=random:1 KEEL_EMU_SCHEDULE=random:2 KEEL_EMU_STREAMS=async:1 KEEL_EMU_STREAMS=async:2
            KEEL_EMU_POISON=nan KEEL_EMU_POISON=ones KEEL_EMU_POISON=random:5"
  CHECKED=$KERNELS
else
  KERNELS="emu elementwise matmul layers streams"
  VARIANTS="KEEL_EMU_SCHEDULE=reverse KEEL_EMU_SCHEDULE=random:1 KEEL_EMU_STREAMS=async:1 KEEL_EMU_POISON=ones"
  CHECKED="emu elementwise matmul"
fi

# ---- 1-2. the kernel tests under each schedule, stream mode and poison -------------------------------
for t in $KERNELS; do
  bin=build/test_cuda_$t
  [ -x "$bin" ] || { fail "$bin not built"; continue; }
  "$bin" >"$TMP/$t.base" 2>&1 || { fail "$t: fails as it is"; continue; }
  bad=""
  for v in $VARIANTS; do
    env "$v" "$bin" >"$TMP/$t.var" 2>&1 && cmp -s "$TMP/$t.base" "$TMP/$t.var" || bad="$bad $v"
  done
  [ -z "$bad" ] && ok "$t: the same output under $(echo $VARIANTS | wc -w) schedules, stream modes and poisons" || fail "$t differs under:$bad"
done

# ---- 3. the checked build ----------------------------------------------------------------------------
for t in $CHECKED; do
  bin=build/racecheck/test_cuda_$t
  [ -x "$bin" ] || { fail "$bin not built (make $bin)"; continue; }
  if "$bin" >"$TMP/rc.$t" 2>&1; then ok "$t in the checked build: no race, out-of-bounds or uninitialized shared access"
  else fail "$t in the checked build: $(grep -m1 -A2 'racecheck\|FAIL' "$TMP/rc.$t")"; fi
done

# ---- 4. planted defects ------------------------------------------------------------------------------
FLAGS=(-O1 -std=c++17 -Wall -Wextra -Wno-unused-parameter -ffp-contract=off -fno-math-errno -fopenmp -Itest/cuda_emu -DKEEL_CUDA_EMULATION)
CHECKED_FLAGS=(-g -DKEEL_EMU_RACECHECK -fsanitize=thread --param=tsan-instrument-func-entry-exit=0)
# build_driver DIR BUILD(plain|checked) [MODE]: test/emu_sanitize/plant_driver.cpp against DIR/llmc (then
# ./llmc); with MODE, that mode alone (-DPLANT_ONLY: only its op's kernels are compiled)
build_driver() {
  local dir=$1 flags=("${FLAGS[@]}")
  [ "$2" = checked ] && flags+=("${CHECKED_FLAGS[@]}")
  [ -n "${3:-}" ] && flags+=(-DPLANT_ONLY="$3")
  ${CXX:-g++} "${flags[@]}" -I"$dir" -I. -c test/emu_sanitize/plant_driver.cpp -o "$dir/pd.o" >"$dir/build.log" 2>&1 &&
    ${CXX:-g++} -fopenmp "$dir/pd.o" -o "$dir/pd" -ldl -lm >>"$dir/build.log" 2>&1
}
# plant NAME FILE PERL BUILD MODE PATTERN [ENV...]: copies llmc/ to $TMP/NAME, applies the perl
# substitution to FILE (it must change it), builds the driver against the copy and runs MODE, once
# per ENV (none: once); caught when a run fails with PATTERN in its output.
plant() {
  local name=$1 file=$2 perl=$3 build=$4 mode=$5 pattern=$6; shift 6
  local dir=$TMP/$name
  mkdir -p "$dir" && cp -r llmc "$dir/"
  perl -0pi -e "$perl" "$dir/$file"
  if cmp -s "$file" "$dir/$file"; then fail "plant $name: the substitution no longer applies to $file"; return; fi
  build_driver "$dir" "$build" "$mode" || { fail "plant $name: does not build: $(head -3 "$dir/build.log")"; return; }
  local envs=("$@") e
  [ ${#envs[@]} -eq 0 ] && envs=(KEEL_EMU_PLANT="$name")
  for e in "${envs[@]}"; do
    if ! env "$e" "$dir/pd" "$mode" >"$dir/out" 2>&1 && grep -qE -- "$pattern" "$dir/out"; then
      ok "plant $name caught ($e): $(grep -m1 -E -- "$pattern" "$dir/out" | cut -c1-160)"; rm -rf "$dir"; return
    fi
  done
  fail "plant $name not caught: $(tail -2 "$dir/out")"
}
# unplanted, the driver runs clean (so that a planted run's failure is the plant's); the checked build
# of it only in the full run (the fast one has the checked kernel tests)
mkdir -p "$TMP/clean-plain" "$TMP/clean-checked"
if build_driver "$TMP/clean-plain" plain && { [ $FULL = 0 ] || build_driver "$TMP/clean-checked" checked; }; then
  bad=""
  for m in sumsq dbias flash matmul overlap layernorm; do "$TMP/clean-plain/pd" $m >/dev/null 2>&1 || bad="$bad plain:$m"; done
  for s in reverse random:1; do
    cmp -s <("$TMP/clean-plain/pd" flash 2>&1) <(KEEL_EMU_SCHEDULE=$s "$TMP/clean-plain/pd" flash 2>&1) || bad="$bad flash:$s"
  done
  for s in 1 2 3 4; do KEEL_EMU_STREAMS=async:$s "$TMP/clean-plain/pd" overlap >/dev/null 2>&1 || bad="$bad overlap:async:$s"; done
  KEEL_EMU_POISON=nan "$TMP/clean-plain/pd" sumsq >/dev/null 2>&1 || bad="$bad sumsq:poison"
  for m in sumsq dbias flash layernorm; do [ $FULL = 0 ] || "$TMP/clean-checked/pd" $m >/dev/null 2>&1 || bad="$bad checked:$m"; done
  [ -z "$bad" ] && ok "plant_driver runs clean on keel's code" || fail "plant_driver fails unplanted:$bad"
else fail "plant_driver does not build: $(head -3 "$TMP"/clean-*/build.log)"; fi
# the LayerNorm backward's one-pass form (each warp's region of shared memory, zeroed by the warp
# before its lanes add into it) in the checked build, in the fast run too (its layernorm mode alone
# compiles in seconds): no race, out-of-bounds or uninitialized access
if [ $FULL = 0 ]; then
  mkdir -p "$TMP/clean-checked-ln"
  if build_driver "$TMP/clean-checked-ln" checked layernorm; then
    "$TMP/clean-checked-ln/pd" layernorm >"$TMP/clean-checked-ln/out" 2>&1 && ! grep -q racecheck "$TMP/clean-checked-ln/out" &&
      ok "plant_driver layernorm in the checked build: no race, out-of-bounds or uninitialized shared access" ||
      fail "plant_driver layernorm in the checked build: $(grep -m2 -E 'racecheck|FAIL' "$TMP/clean-checked-ln/out")"
  else fail "plant_driver layernorm (checked) does not build: $(head -3 "$TMP/clean-checked-ln/build.log")"; fi
fi
plant removed-barrier llmc/cuda/common.cuh 's/(T\* shared\) \{.*?shared\[warp\] = v;\n)\s*__syncthreads\(\);\n/$1/s' checked sumsq "racecheck: .*race"
plant removed-syncwarp llmc/cuda/flash_attention.cuh 's/\n    __syncwarp\(\);\n/\n/' checked flash "racecheck: .*race"
plant removed-ln-region-syncwarp llmc/cuda/layernorm.cuh 's/(store128\(mine \+ f, Pack<float, 4>\{\}\);\n)\s*__syncwarp\(\);\n/$1/' checked layernorm \
  "racecheck: .*race"
plant one-past-shared llmc/cuda/matmul.cuh 's/y < DBIAS_ROW_THREADS; y\+\+/y <= DBIAS_ROW_THREADS; y++/' checked dbias "racecheck: .*out-of-bounds read in sums"
plant uninit-shared llmc/cuda/common.cuh 's/T w = lane < warps \? shared\[lane\] : \(T\)0;/T w = shared[lane];/' checked sumsq "racecheck: .*uninitialized read"
plant uninit-shared-poison llmc/cuda/common.cuh 's/T w = lane < warps \? shared\[lane\] : \(T\)0;/T w = shared[lane];/' plain sumsq "FAIL  sumsq" KEEL_EMU_POISON=nan
plant removed-stream-wait llmc/cuda/stream.h 's/ \|\| cudaStreamWaitEvent\(waiter, \*e, 0\) != cudaSuccess//' plain overlap "FAIL  the communication stream" \
  KEEL_EMU_STREAMS=async:1 KEEL_EMU_STREAMS=async:2 KEEL_EMU_STREAMS=async:3 KEEL_EMU_STREAMS=async:4
# the schedule exploration alone, in the plain build: without the flash forward's __syncwarp its lanes
# read each other's staged rows before they are written, and the output changes with the lanes' order
plant_schedule() {
  local name=$1 file=$2 perl=$3 mode=$4 dir=$TMP/$1
  mkdir -p "$dir" && cp -r llmc "$dir/"
  perl -0pi -e "$perl" "$dir/$file"
  cmp -s "$file" "$dir/$file" && { fail "plant $name: the substitution no longer applies to $file"; return; }
  build_driver "$dir" plain "$mode" || { fail "plant $name: does not build: $(head -3 "$dir/build.log")"; return; }
  local s outs=""
  for s in in-order reverse random:1; do outs="$outs$(KEEL_EMU_SCHEDULE=$s "$dir/pd" "$mode" 2>&1 | head -1)"$'\n'; done
  [ "$(sort -u <<<"$outs" | grep -c .)" -gt 1 ] && ok "plant $name caught: the output depends on KEEL_EMU_SCHEDULE" ||
    fail "plant $name not caught: $(head -1 <<<"$outs")"
}
plant_schedule removed-syncwarp-schedule llmc/cuda/flash_attention.cuh 's/\n    __syncwarp\(\);\n/\n/' flash
plant misaligned-cublaslt-bias llmc/cuda/matmul.cuh 's/bool epilogue = bias && aligned16\(bias\);/bool epilogue = bias;/' plain matmul "bias pointer is not 16-byte aligned"
plant oversized-launch llmc/cuda/flash_attention.cuh 's/\n    smem_optin\(flash_attention_forward_kernel<F, HS, MT>, smem, &optin\);\n/\n/' plain flash \
  "over 48 KiB without cudaFuncSetAttribute"
# registers × threads (test/cuda_emu/registers.h): the fused residual + LayerNorm forward (no launch
# bound) at 32 rows a block, 1024 threads of its 68 registers at sm_90 (72 as allocated), need 73728
# of the 65536 (the counts as the table has them); the flash forward at head size 128 and twice its
# threads fits the register file (243 × 256) but not its __launch_bounds__(FLASH_THREADS)
plant register-file llmc/cuda/layernorm.cuh 's/LN_WARPS_PER_BLOCK = 8 /LN_WARPS_PER_BLOCK = 32 /' plain layernorm \
  "residual_layernorm_forward_kernel<__nv_bfloat16, 3, true>: [0-9]+ registers per thread on sm_90 \([0-9]+ as allocated\) × 1024 threads = [0-9]+ registers, over the 65536"
plant launch-bounds llmc/cuda/flash_attention.cuh 's/\* B \* NH\), FLASH_THREADS,/* B * NH), 2 * FLASH_THREADS,/' plain flash \
  "flash_attention_forward_kernel<__nv_bfloat16, 128, 1>: 256 threads per block, over its __launch_bounds__\(128\)"

# NCCL calls the ranks disagree on (the emulated NCCL, test/emu_sanitize/nccl_checks.cpp)
if command -v mpicxx >/dev/null && command -v mpirun >/dev/null; then
  read -ra MPI_C <<<"$(mpicxx --showme:compile)"
  read -ra MPI_L <<<"$(mpicxx --showme:link)"
  if ${CXX:-g++} "${FLAGS[@]}" -I. "${MPI_C[@]}" test/emu_sanitize/nccl_checks.cpp -o "$TMP/nccl_checks" "${MPI_L[@]}" >"$TMP/nccl.log" 2>&1; then
    timeout 120 mpirun --oversubscribe -np 2 "$TMP/nccl_checks" ok >"$TMP/nccl.ok" 2>&1 && ok "NCCL: agreeing ranks run through" || fail "NCCL ok: $(tail -3 "$TMP/nccl.ok")"
    for m in count type order p2p; do
      if ! timeout 120 mpirun --oversubscribe -np 2 "$TMP/nccl_checks" $m >"$TMP/nccl.$m" 2>&1 && grep -q "NCCL emulation: .*\(differs between ranks\|which sends\)" "$TMP/nccl.$m"; then
        ok "NCCL plant $m caught: $(grep -m1 'NCCL emulation' "$TMP/nccl.$m" | cut -c1-150)"
      else fail "NCCL plant $m not caught: $(tail -2 "$TMP/nccl.$m")"; fi
    done
  else fail "nccl_checks does not build: $(head -3 "$TMP/nccl.log")"; fi
else fail "mpicxx/mpirun not found (scripts/setup.sh installs OpenMPI)"; fi

# ---- 5. the emulated trainer (full) ----------------------------------------------------------------------
[ $FULL = 1 ] || finish
CUDA=build/train_gpt_emu
[ -x "$CUDA" ] || { fail "$CUDA not built"; finish; }
BASE=(--hidden-size 64 --num-attention-heads 4 --seq-length 16 --micro-batch-size 1 --lr 1e-3 --seed 3 --num-layers 2 --train-iters 2
      --train-data-path data/brown/brown_train.bin --valid-data-path data/brown/brown_val.bin --eval-interval 0 --log-interval 1
      --hidden-dropout 0.1 --attention-dropout 0.1 --save-interval 2)
RUNS=(KEEL_EMU_STREAMS=sync KEEL_EMU_STREAMS=async:1 KEEL_EMU_STREAMS=async:2,KEEL_EMU_SCHEDULE=random:3 KEEL_EMU_STREAMS=async:3,KEEL_EMU_POISON=nan)
for layout in "dp 4 --zero-stage 1 --grad-bucket-mb 0.1" "tp 2 --tensor-model-parallel-size 2" "pp 4 --pipeline-model-parallel-size 2"; do
  read -r name gbs flags <<<"$layout"
  for i in "${!RUNS[@]}"; do
    env ${RUNS[$i]//,/ } mpirun --oversubscribe -np 2 $CUDA "${BASE[@]}" --global-batch-size "$gbs" $flags \
      --metrics-file "$TMP/$name.$i.jsonl" --save "$TMP/$name.$i.ck" >"$TMP/$name.$i.log" 2>&1 || fail "$name ${RUNS[$i]}: the trainer failed: $(tail -2 "$TMP/$name.$i.log")"
  done
  for i in "${!RUNS[@]}"; do
    [ "$i" = 0 ] && continue
    if cmp -s <(strip_timing "$TMP/$name.0.jsonl") <(strip_timing "$TMP/$name.$i.jsonl") &&
       cmp -s "$TMP/$name.0.ck/iter_0000002/model.bin" "$TMP/$name.$i.ck/iter_0000002/model.bin"; then
      ok "trainer $name ($flags) under ${RUNS[$i]} = in order and synchronous: records and checkpoint bytes"
    else fail "trainer $name ($flags) under ${RUNS[$i]} differs from the in-order synchronous run"; fi
  done
done
# the removed stream wait at a real call site of the trainer: the gradient buckets' reduction on the
# communication stream no longer waits for the backward on keel's stream (llmc/comm.h)
dir=$TMP/trainer-wait
mkdir -p "$dir" && cp -r llmc train_gpt.cu "$dir/"
perl -0pi -e 's/(nccl_reduce_ranges_f32\(.*?\{\n)    keel_stream_wait\(keel_comm_stream\(\), keel_stream\(\)\);\n/$1/s' "$dir/llmc/comm.h"
if cmp -s llmc/comm.h "$dir/llmc/comm.h"; then fail "plant trainer-wait: the substitution no longer applies to llmc/comm.h"
elif ! ${CXX:-g++} -O2 "${FLAGS[@]:1}" -I"$dir" -I. -DKEEL_CUDA -DKEEL_MPI $(mpicxx --showme:compile) -x c++ "$dir/train_gpt.cu" -o "$dir/tr" \
       $(mpicxx --showme:link) -lm >"$dir/build.log" 2>&1; then fail "plant trainer-wait: does not build: $(head -3 "$dir/build.log")"
else
  caught=""
  for r in sync async:1 async:2 async:3; do
    KEEL_EMU_STREAMS=$r mpirun --oversubscribe -np 2 "$dir/tr" "${BASE[@]}" --hidden-dropout 0 --attention-dropout 0 --global-batch-size 4 \
      --zero-stage 1 --grad-bucket-mb 0.1 --metrics-file "$dir/$r.jsonl" --save "$dir/$r.ck" >"$dir/$r.log" 2>&1
    [ $r != sync ] && ! cmp -s <(strip_timing "$dir/sync.jsonl") <(strip_timing "$dir/$r.jsonl") && caught="$caught $r"
  done
  if [ ! -s "$dir/sync.jsonl" ]; then fail "plant trainer-wait: the synchronous run failed: $(grep -m1 error "$dir/sync.log")"
  elif [ -n "$caught" ]; then ok "plant trainer-wait caught: the records differ from the synchronous run under$caught"
  else fail "plant trainer-wait not caught"; fi
fi
# the trainer in the checked build: every kernel at the trainer's shapes, flash and GEMM attention
CHECKED_TRAINER=build/racecheck/train_gpt_emu
if [ -x "$CHECKED_TRAINER" ]; then
  for impl in flash gemm; do
    if $CHECKED_TRAINER --num-layers 1 --hidden-size 128 --num-attention-heads 2 --seq-length 64 --micro-batch-size 2 --global-batch-size 2 \
         --lr 1e-3 --train-iters 1 --seed 5 --hidden-dropout 0.1 --attention-dropout 0.1 --eval-interval 1 --eval-iters 1 --attention-impl $impl \
         --train-data-path data/brown/brown_train.bin --valid-data-path data/brown/brown_val.bin >"$TMP/checked.$impl.log" 2>&1; then
      ok "trainer ($impl attention) in the checked build: no race, out-of-bounds or uninitialized shared access"
    else fail "trainer ($impl attention) in the checked build: $(grep -m1 -A2 'racecheck\|error' "$TMP/checked.$impl.log")"; fi
  done
else fail "$CHECKED_TRAINER not built (make $CHECKED_TRAINER)"; fi
finish
