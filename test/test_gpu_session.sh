#!/usr/bin/env bash
# scripts/gpu_session.sh without a GPU: the script is the one thing a lent GPU's few minutes run, so
# its logic is tested here on stand-ins. A scratch tree holds a copy of the script, stand-in bundle
# programs (shell scripts that print what the real ones print, or fail when told), stand-in
# nvidia-smi, ncu and compute-sanitizer on the PATH, and a stand-in bench.sh and trainer test.
#   1. no GPU (nvidia-smi absent, or listing none): exit 2, one line, nothing run
#   2. a GPU but an incomplete bundle, or a program that does not load there (ldd): exit 2 naming
#      what is missing (and `make gpu-bundle`), nothing run
#   3. every step run in order, each log in the output directory ($OUT/gpu_session when OUT is set:
#      there packed into logs.tar.gz beside keys.txt, 2 files of the 8 a lent machine sends back),
#      the table last with each step's key lines; the sanitizers' step on the flash and LayerNorm
#      tests and on train_gpt; exit 0
#   4. a failing step: the others still run, exit 1
#   5. the budget: a step that does not fit what is left is skipped and said so, not started; one
#      that runs three times as long as it should is stopped (TIMEOUT) and the next one runs
#   6. ncu and compute-sanitizer absent: those steps skipped, said so; ncu without access to the
#      counters: said so, the other kernels not tried; a failed bench row fails the bench step
#   7. bad arguments refused (exit 2)
source "$(dirname "$0")/lib.sh"
S=$TMP/tree
mkdir -p "$S/scripts" "$S/build/bundle" "$S/build/lab" "$S/build/gpu" "$S/data/brown" "$S/data/gpt2" "$S/test" "$TMP/bin" "$TMP/nogpu"
cp scripts/gpu_session.sh "$S/scripts/"
: >"$S/data/brown/brown_train.bin"
: >"$S/data/brown/brown_val.bin"
: >"$S/data/gpt2/encoder.json"
: >"$S/data/gpt2/vocab.bpe"
stub() {  # PATH BODY: an executable shell script
  printf '#!/usr/bin/env bash\n%s\n' "$2" >"$1"
  chmod +x "$1"
}
# the tools; FAIL_STEP names a program that must fail, SLOW a program that must sleep 3 s
stub "$TMP/bin/nvidia-smi" 'echo "0, NVIDIA H200, 9.0, 143771 MiB, 580.159.04, 1980 MHz"'
stub "$TMP/bin/ncu" 'echo "ncu $*" | cut -c1-60; echo "    Duration                         us       856.03"; echo "    smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio 3.10"'
stub "$TMP/bin/compute-sanitizer" 'echo "sanitizer $*" >>"$SANITIZER_LOG"; while [[ $1 == --* ]]; do shift 2; done; "$@"; echo "========= ERROR SUMMARY: 0 errors"'
export SANITIZER_LOG=$TMP/sanitizer_calls.txt
prog='n=$(basename "$0"); [ "${FAIL_STEP:-}" = "$n" ] && { echo "$n: broken"; exit 3; }; [ "${SLOW:-}" = "$n" ] && sleep 3
[[ " $* " == *" --time-ops 3 "* ]] && { echo "time per op, iteration 3: 39.600 ms (L$3)"; echo "  op  calls  ms"; echo "  bwd attention (flash)  12  12.082"; echo "  model FLOPs 1 (the rows sum)"; }
echo "attention backward B=16 T=1024 C=768 NH=12 bf16 ($n $*)"; echo "  2   flash                    1.0068      250.0      102.4"; echo "7 checks, 0 failed"'
for p in build/bundle/train_gpt build/bundle/train_gpt_cpu build/lab/flash_attention build/lab/layernorm build/lab/classifier \
  build/gpu/test_cuda_flash build/gpu/test_cuda_layers; do
  stub "$S/$p" "$prog"
done
stub "$S/scripts/bench.sh" 'echo "GPU: stand-in | $BENCH_GPU_CONFIGS | $TRAIN_GPT_BIN"; echo "124M   L12 C768 NH12 T1024 B16          39.6       413000     356.0   36.0%      8.4 GiB"'
stub "$S/test/test_cuda_trainer.sh" 'echo "ok: CPU $KEEL_CPU_TRAINER, CUDA $KEEL_CUDA_TRAINER"; echo PASS'
run() { (cd "$S" && PATH="$TMP/bin:$PATH" "$@"); }

# 1. no GPU
out=$(cd "$S" && PATH="$TMP/nogpu:/usr/bin:/bin" bash scripts/gpu_session.sh 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "no GPU here" <<<"$out" && [ "$(wc -l <<<"$out")" -eq 1 ] && ok "no GPU: exit 2, one line" || fail "no GPU: exit $rc: $out"
stub "$TMP/nogpu/nvidia-smi" 'exit 9'
out=$(cd "$S" && PATH="$TMP/nogpu:/usr/bin:/bin" bash scripts/gpu_session.sh 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "no GPU here" <<<"$out" && ok "nvidia-smi listing no GPU: exit 2" || fail "nvidia-smi failing: exit $rc: $out"

# 2. an incomplete bundle
mv "$S/build/lab/layernorm" "$TMP/layernorm"
out=$(run bash scripts/gpu_session.sh 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "missing: build/lab/layernorm" <<<"$out" && grep -q "make gpu-bundle" <<<"$out" && ok "incomplete bundle: exit 2, names build/lab/layernorm" ||
  fail "incomplete bundle: exit $rc: $out"
mv "$TMP/layernorm" "$S/build/lab/layernorm"
rm "$S/data/gpt2/vocab.bpe"
out=$(run bash scripts/gpu_session.sh 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "missing: data/gpt2/vocab.bpe" <<<"$out" && ok "incomplete bundle: exit 2, names data/gpt2/vocab.bpe (the trainer test's samples)" ||
  fail "no vocab.bpe: exit $rc: $out"
: >"$S/data/gpt2/vocab.bpe"
# a program that does not load here (a library ldd cannot find): exit 2 naming it, nothing run
stub "$TMP/bin/ldd" '[ "$(basename "$1")" = train_gpt ] && echo "	libcublasLt.so.13 => not found"; exit 0'
out=$(OUT=$TMP/out2 run bash scripts/gpu_session.sh 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "do not load here: build/bundle/train_gpt: .*libcublasLt.so.13 => not found" <<<"$out" && [ ! -e "$TMP/out2" ] &&
  ok "a program whose library is missing: exit 2, named, nothing run" || fail "missing library: exit $rc: $out"
rm "$TMP/bin/ldd"

# 3. every step, into $OUT/gpu_session: the logs packed into one archive there (a lent machine sends
# back at most 8 files), keys.txt beside it
unpack() { mkdir -p "$1/logs" && tar -xzf "$1/gpu_session/logs.tar.gz" -C "$1/logs"; }
out=$(OUT=$TMP/out run bash scripts/gpu_session.sh 2>&1); rc=$?
unpack "$TMP/out" && [ "$(cd "$TMP/out/gpu_session" && ls | tr '\n' ' ')" = "keys.txt logs.tar.gz " ] &&
  ok "\$OUT/gpu_session holds keys.txt and logs.tar.gz alone" || fail "\$OUT/gpu_session: $(ls "$TMP/out/gpu_session" | tr '\n' ' ')"
steps=(gpu lab-flash bench ops lab-memory tests ncu trainer lab-shapes memcheck sanitize)
[ $rc -eq 0 ] && ok "all steps pass: exit 0" || fail "all steps: exit $rc: $(tail -20 <<<"$out")"
order=$(grep -oE '^== [a-z-]+' <<<"$out" | cut -c4- | tr '\n' ' ')
[ "$order" = "${steps[*]} " ] && ok "steps run in order: $order" || fail "step order: '$order'"
missing_logs=""
for s in "${steps[@]}"; do [ -s "$TMP/out/logs/$s.log" ] || missing_logs+=" $s"; done
[ -z "$missing_logs" ] && ok "each step's log in \$OUT/gpu_session/logs.tar.gz" || fail "logs missing:$missing_logs"
table=$(sed -n '/^step  *status/,$p' <<<"$out")
for s in "${steps[@]}"; do grep -qE "^$s +PASS" <<<"$table" || fail "table lacks '$s PASS'"; done
grep -q "1.0068" <<<"$table" && grep -q "stalled_long_scoreboard.* 3.10" <<<"$table" && grep -q "^124M " <<<"$table" &&
  ok "the table carries the key lines (lab row, ncu stall, bench row)" || fail "key lines missing: $table"
grep -q "124M 124Ms64 124Mnf 124Mg 1.5B | build/bundle/train_gpt" "$TMP/out/logs/bench.log" && ok "bench: the 124M, 124Ms64, 124Mnf, 124Mg and 1.5B rows of the bundle's train_gpt" ||
  fail "bench arguments: $(cat "$TMP/out/logs/bench.log")"
grep -q "CPU build/bundle/train_gpt_cpu, CUDA build/bundle/train_gpt" "$TMP/out/logs/trainer.log" && ok "trainer test on the bundle's two trainers" ||
  fail "trainer: $(cat "$TMP/out/logs/trainer.log")"
[ "$(grep -c '^ncu ' "$TMP/out/logs/ncu.log")" -eq 3 ] && ok "ncu: three kernels profiled" || fail "ncu: $(cat "$TMP/out/logs/ncu.log")"
[ "$(grep -cE '^-- (racecheck|synccheck) build/gpu/test_cuda_(flash|layers)$' "$TMP/out/logs/sanitize.log")" -eq 4 ] &&
  grep -q '^-- initcheck train_gpt' "$TMP/out/logs/sanitize.log" &&
  grep -qE '^sanitizer --tool initcheck --print-limit [0-9]+ --show-backtrace device build/bundle/train_gpt .*--train-iters 1 ' "$SANITIZER_LOG" &&
  ok "sanitize: racecheck and synccheck on the flash and LayerNorm tests, initcheck on one bounded train_gpt iteration" ||
  fail "sanitize: $(cat "$TMP/out/logs/sanitize.log" "$SANITIZER_LOG")"
grep -q "^124M | time per op, iteration 3: 39.600 ms (L12)" <<<"$table" && grep -q "^1.5B | time per op, iteration 3: 39.600 ms (L48)" <<<"$table" &&
  grep -q "^1.5B |   bwd attention (flash)" <<<"$table" && grep -q "^==== 1.5B" "$TMP/out/logs/ops.log" &&
  ok "ops: the bundle's train_gpt --time-ops 3 at 124M and 1.5B, each table in the log and its top rows in the summary" ||
  fail "ops: $(cat "$TMP/out/logs/ops.log")"

# 4. a failing step does not stop the others
out=$(FAIL_STEP=layernorm OUT=$TMP/out4 run bash scripts/gpu_session.sh 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qE '^lab-memory +FAIL' <<<"$out" && grep -qE '^memcheck +PASS' <<<"$out" && ok "a failing step: exit 1, the later steps still run" ||
  fail "failing step: exit $rc: $(tail -15 <<<"$out")"

# 5. the budget: with 62 s and a first step of 3 s, 59 s are left: lab-flash (about 60 s) is skipped
# and said so, lab-memory (about 40 s) after it still runs
stub "$TMP/bin/nvidia-smi" 'if [ "$1" = --query-gpu=name ]; then echo "NVIDIA H200"; exit 0; fi; sleep 3; echo "0, NVIDIA H200, 9.0, 143771 MiB, 580.159.04, 1980 MHz"'
out=$(OUT=$TMP/out5 run bash scripts/gpu_session.sh --budget 62 2>&1); rc=$?
grep -qE '^== lab-flash: skipped \(5[0-9] s left of the budget, about 60 s needed\)' <<<"$out" && grep -qE '^lab-flash +SKIP \(time\)' <<<"$out" &&
  grep -qE '^lab-memory +PASS' <<<"$out" && tar -tzf "$TMP/out5/gpu_session/logs.tar.gz" | grep -qx lab-memory.log && ! tar -tzf "$TMP/out5/gpu_session/logs.tar.gz" | grep -qx lab-flash.log && ok "budget: a step that does not fit is skipped and said so; a smaller one after it runs" ||
  fail "budget: exit $rc: $out"
# and a step that runs three times as long as it should (the first, about 5 s: stopped at 15) is
# stopped, TIMEOUT, and the next one still runs
stub "$TMP/bin/nvidia-smi" 'if [ "$1" = --query-gpu=name ]; then echo "NVIDIA H200"; exit 0; fi; sleep 60'
t0=$(date +%s)
out=$(OUT=$TMP/out5b run bash scripts/gpu_session.sh --budget 100 2>&1); rc=$?
t=$(($(date +%s) - t0))
[ $rc -eq 1 ] && grep -qE '^gpu +TIMEOUT +(1[5-9]|2[0-9]) s' <<<"$out" && grep -qE '^lab-flash +PASS' <<<"$out" && [ $t -lt 55 ] &&
  ok "a hung step stopped at 3x its time (TIMEOUT, exit 1), the next one runs (${t} s in all)" || fail "hung step: exit $rc in $t s: $out"
stub "$TMP/bin/nvidia-smi" 'echo "0, NVIDIA H200, 9.0, 143771 MiB, 580.159.04, 1980 MHz"'

# ncu without access to the counters: said so once, the other kernels not tried; a bench row that
# failed fails the bench step
stub "$TMP/bin/ncu" 'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"; exit 1'
stub "$S/scripts/bench.sh" 'echo "124M: train_gpt failed (exit 1)"'
out=$(OUT=$TMP/out5c run bash scripts/gpu_session.sh 2>&1); rc=$?
unpack "$TMP/out5c" && [ "$(grep -c ERR_NVGPUCTRPERM "$TMP/out5c/logs/ncu.log")" -eq 1 ] && grep -q "^ncu: the hardware counters cannot be read on this machine: skipped" <<<"$out" &&
  grep -qE '^bench +FAIL' <<<"$out" && [ $rc -eq 1 ] && ok "ncu without counters: said so once, not retried; a failed bench row fails the step" ||
  fail "ncu without counters / failed bench: exit $rc: $(tail -25 <<<"$out")"
stub "$S/scripts/bench.sh" 'echo "GPU: stand-in | $BENCH_GPU_CONFIGS | $TRAIN_GPT_BIN"; echo "124M   L12 C768 NH12 T1024 B16          39.6       413000     356.0   36.0%      8.4 GiB"'

# the sanitizers: a racecheck error fails the step; an initcheck report alone does not (information only)
SAN_OK='echo "sanitizer $*" >>"$SANITIZER_LOG"; while [[ $1 == --* ]]; do shift 2; done; "$@"; echo "========= ERROR SUMMARY: 0 errors"'
stub "$TMP/bin/compute-sanitizer" '[ "$2" = racecheck ] && { echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"; exit 99; }; '"$SAN_OK"
out=$(OUT=$TMP/out5d run bash scripts/gpu_session.sh 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qE '^sanitize +FAIL' <<<"$out" && ok "a racecheck error fails the sanitize step" || fail "racecheck error: exit $rc: $(tail -25 <<<"$out")"
stub "$TMP/bin/compute-sanitizer" '[ "$2" = initcheck ] && { echo "========= Uninitialized __global__ memory read of size 16 bytes"; exit 99; }; '"$SAN_OK"
out=$(OUT=$TMP/out5e run bash scripts/gpu_session.sh 2>&1); rc=$?
unpack "$TMP/out5e"
[ $rc -eq 0 ] && grep -qE '^sanitize +PASS' <<<"$out" && grep -q "initcheck: ========= Uninitialized" "$TMP/out5e/logs/sanitize.log" &&
  ok "initcheck's reports are shown, and do not fail the step (information only)" || fail "initcheck report: exit $rc: $(tail -25 <<<"$out")"
stub "$TMP/bin/compute-sanitizer" "$SAN_OK"

# 6. no ncu, no compute-sanitizer
rm "$TMP/bin/ncu" "$TMP/bin/compute-sanitizer"
out=$(OUT=$TMP/out6 PATH="$TMP/bin:/usr/bin:/bin" bash -c "cd '$S' && bash scripts/gpu_session.sh" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -qE '^ncu +SKIP' <<<"$out" && grep -q "ncu: skipped (ncu not on the PATH)" <<<"$out" && grep -qE '^memcheck +SKIP' <<<"$out" && grep -qE '^sanitize +SKIP' <<<"$out" &&
  ok "ncu and compute-sanitizer absent: skipped, said so, exit 0" || fail "no tools: exit $rc: $(tail -15 <<<"$out")"

# 7. arguments
out=$(run bash scripts/gpu_session.sh --budget x 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "budget needs a number" <<<"$out" && ok "--budget x refused" || fail "--budget x: exit $rc: $out"
out=$(run bash scripts/gpu_session.sh --frobnicate 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "unknown argument '--frobnicate'" <<<"$out" && ok "an unknown argument refused" || fail "unknown argument: exit $rc: $out"
finish
