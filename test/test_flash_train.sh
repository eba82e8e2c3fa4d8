#!/usr/bin/env bash
# --attention-impl through the trainers (the kernels themselves: test_cuda_flash):
#   1. the emulated CUDA trainer at head size 64 in bf16 picks flash under auto and says so; flash and
#      the GEMM path agree within bf16 tolerance (5e-3) over 4 iterations with ALiBi, attention and
#      hidden dropout; a second flash run writes the same bytes; a flash run stopped at 2 and resumed
#      equals the straight run (records and checkpoint bytes); the backward at 8 warps a block
#      (KEEL_FLASH_BWD_WARPS=8) at T=160 (two 128-key tiles: a dQ chain of two parts where 4 warps have
#      three) within 5e-3 of the default 4-warp run and not the same bits, the default = an explicit
#      KEEL_FLASH_BWD_WARPS=4 byte for byte, a value other than 4 or 8 refused; the backward's query
#      step forced to 32 (KEEL_FLASH_BWD_STEP=32) or timed at start-up (auto) = the default's bytes,
#      each choice said on a start-up line, another value refused; tensor parallel on 2
#      ranks (one head each, head offsets in the dropout masks) agrees with one process; head size 16
#      falls back to gemm under auto and --attention-impl flash there is refused (exit 2); at head
#      size 128 and T=1024 auto takes flash, which the step model has faster (as measured);
#   2. the CPU trainer's flash twin (cpu/flash_attention.h) against its materialized reference:
#      within 1e-5 (fp32 both);
#   3. --dry-run: with flash the GPT-2 1.5B step at B=16, T=1024 fits 80 GB without activation
#      checkpointing (the GEMM path's T x T probabilities do not); auto at head size 128 on an H200
#      plans flash; with a curves file that makes flash slow the GEMM path, and flash again where the
#      GEMM path would not fit; the plan's count equals the
#      emulated trainer's cudaMalloc bytes for a flash run.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
CUDA=build/train_gpt_emu
[ -x "$CUDA" ] || { fail "$CUDA not built (make build/train_gpt_emu)"; finish; }
unset KEEL_EMU_PROFILE
RUN=(--num-layers 2 --hidden-size 128 --num-attention-heads 2 --seq-length 64 --micro-batch-size 2 --global-batch-size 2
     --lr 1e-3 --seed 3 --position-embedding-type alibi --attention-dropout 0.1 --hidden-dropout 0.1 --log-interval 1
     --train-data-path data/brown/brown_train.bin --valid-data-path data/brown/brown_val.bin --eval-interval 0)

# ---- 1. the emulated CUDA trainer ----------------------------------------------------------------------
$CUDA "${RUN[@]}" --train-iters 4 --metrics-file "$TMP/flash.jsonl" --save "$TMP/ck_flash" --save-interval 4 >"$TMP/flash.log" 2>&1 &
$CUDA "${RUN[@]}" --train-iters 4 --attention-impl gemm --metrics-file "$TMP/gemm.jsonl" >"$TMP/gemm.log" 2>&1 &
wait
grep -q "^attention: flash" "$TMP/flash.log" && ok "auto picks flash at head size 64 in bf16 (start-up line)" || fail "auto did not pick flash: $(grep '^attention' "$TMP/flash.log")"
grep -qE "^attention: flash .*\(--attention-impl auto: estimated [0-9.e+-]+ ms flash vs [0-9.e+-]+ ms gemm per layer" "$TMP/flash.log" \
  && ok "auto says why: the step model's estimates on the start-up line" || fail "auto's start-up line lacks the step model's estimates: $(grep '^attention' "$TMP/flash.log")"
grep -q "^attention: gemm" "$TMP/gemm.log" && ok "--attention-impl gemm runs the GEMM path" || fail "gemm: $(grep '^attention' "$TMP/gemm.log")"
out=$(compare_jsonl "$TMP/flash.jsonl" "$TMP/gemm.jsonl" 5e-3) && ok "flash vs gemm (bf16): $out" || fail "flash vs gemm: $out"
$CUDA "${RUN[@]}" --train-iters 4 --metrics-file "$TMP/flash2.jsonl" >"$TMP/flash2.log" 2>&1 &
$CUDA "${RUN[@]}" --train-iters 4 --exit-interval 2 --metrics-file "$TMP/part.jsonl" --save "$TMP/ck_resume" --save-interval 4 >"$TMP/part.log" 2>&1 &
wait
cmp -s <(strip_timing "$TMP/flash.jsonl") <(strip_timing "$TMP/flash2.jsonl") && ok "two flash runs: identical records" || fail "two flash runs differ"
$CUDA "${RUN[@]}" --train-iters 4 --metrics-file "$TMP/part.jsonl" --load "$TMP/ck_resume" --save "$TMP/ck_resume" --save-interval 4 \
  >"$TMP/resume.log" 2>&1 || { fail "flash resume failed"; tail -3 "$TMP/resume.log"; }
cmp -s <(strip_timing "$TMP/flash.jsonl") <(strip_timing "$TMP/part.jsonl") && ok "flash: stop at 2 + resume = straight run (records)" || fail "flash resume: records differ"
same_checkpoint "flash resume" "$TMP/ck_flash" "$TMP/ck_resume" 4
# the backward's query step at head size 64: 32 and 64 give the same bytes, so forcing 32
# (KEEL_FLASH_BWD_STEP=32) or letting the start-up trial choose (auto: under the emulation its times
# are the emulator's, so either may win) ends with the default run's records and checkpoint; each
# says on a start-up line how the step was chosen; another value is refused
KEEL_FLASH_BWD_STEP=32 $CUDA "${RUN[@]}" --train-iters 4 --metrics-file "$TMP/s32.jsonl" --save "$TMP/ck_s32" --save-interval 4 >"$TMP/s32.log" 2>&1 &
KEEL_FLASH_BWD_STEP=auto $CUDA "${RUN[@]}" --train-iters 4 --metrics-file "$TMP/sauto.jsonl" --save "$TMP/ck_sauto" --save-interval 4 >"$TMP/sauto.log" 2>&1 &
wait
grep -q "^flash backward: 64-query steps (not timed: the CPU emulation" "$TMP/flash.log" && grep -q "^flash backward: 32-query steps (KEEL_FLASH_BWD_STEP=32)$" "$TMP/s32.log" &&
  grep -qE "^flash backward: (32|64)-query steps \(timed at start-up on B=2, T=64: [0-9.]+ ms against [0-9.]+ for (64|32)-query steps; the same bytes either way\)$" "$TMP/sauto.log" \
  && ok "the backward's query step: a start-up line says how it was chosen (default, KEEL_FLASH_BWD_STEP=32, auto's trial)" \
  || fail "query step lines: $(grep -h '^flash backward' "$TMP/flash.log" "$TMP/s32.log" "$TMP/sauto.log" | tr '\n' '|')"
for s in s32 sauto; do
  cmp -s <(strip_timing "$TMP/flash.jsonl") <(strip_timing "$TMP/$s.jsonl") && ok "$s: the same records as the default 64-query steps" || fail "$s: records differ from the default's"
  same_checkpoint "$s against the default" "$TMP/ck_flash" "$TMP/ck_$s" 4
done
out=$(KEEL_FLASH_BWD_STEP=48 $CUDA "${RUN[@]}" --train-iters 1 2>&1) && fail "KEEL_FLASH_BWD_STEP=48 accepted" \
  || { grep -q "KEEL_FLASH_BWD_STEP=48: expected auto, 64 or 32" <<<"$out" && ok "KEEL_FLASH_BWD_STEP=48 refused" || fail "KEEL_FLASH_BWD_STEP=48: $out"; }
W=(--seq-length 160 --train-iters 3)
KEEL_FLASH_BWD_WARPS=8 $CUDA "${RUN[@]}" "${W[@]}" --metrics-file "$TMP/w8.jsonl" >"$TMP/w8.log" 2>&1 &
$CUDA "${RUN[@]}" "${W[@]}" --metrics-file "$TMP/w4.jsonl" >"$TMP/w4.log" 2>&1 &
wait
KEEL_FLASH_BWD_WARPS=4 $CUDA "${RUN[@]}" "${W[@]}" --metrics-file "$TMP/w4b.jsonl" >"$TMP/w4b.log" 2>&1
out=$(compare_jsonl "$TMP/w8.jsonl" "$TMP/w4.jsonl" 5e-3) && ok "flash backward at 8 warps a block vs 4 (bf16, T=160): $out" || fail "8-warp backward: $out"
cmp -s <(strip_timing "$TMP/w8.jsonl") <(strip_timing "$TMP/w4.jsonl") && fail "KEEL_FLASH_BWD_WARPS=8 changed nothing (inert)"
cmp -s <(strip_timing "$TMP/w4.jsonl") <(strip_timing "$TMP/w4b.jsonl") && ok "the default = KEEL_FLASH_BWD_WARPS=4: identical records" || fail "the default and KEEL_FLASH_BWD_WARPS=4 differ"
out=$(KEEL_FLASH_BWD_WARPS=6 $CUDA "${RUN[@]}" --train-iters 1 2>&1) && fail "KEEL_FLASH_BWD_WARPS=6 accepted" \
  || { grep -q "KEEL_FLASH_BWD_WARPS=6: expected 4 or 8" <<<"$out" && ok "KEEL_FLASH_BWD_WARPS=6 refused" || fail "KEEL_FLASH_BWD_WARPS=6: $out"; }
SMALL=(--num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 1 --global-batch-size 1 --lr 1e-3
       --train-data-path data/brown/brown_train.bin --eval-interval 0 --train-iters 1 --hidden-dropout 0 --attention-dropout 0)
out=$($CUDA "${SMALL[@]}" 2>&1)
grep -q "^attention: gemm" <<<"$out" && ok "auto falls back to gemm at head size 16" || fail "head size 16 did not fall back to gemm"
expect_fail 2 "attention-impl flash.*head size 16" $CUDA "${SMALL[@]}" --attention-impl flash
# head size 128 at T=1024: the step model puts flash ahead (as the H200 measured: 47.9 against 49.9
# ms a step at L12 C1536 B=8), and auto takes it; both estimates on the start-up line (a vocabulary of
# 64 keeps the emulated step short)
python3 test/hf_reference.py shard "$TMP/v64.bin" 4000 64 1 >/dev/null || fail "shard of vocabulary 64"
H128=(--num-layers 1 --hidden-size 256 --num-attention-heads 2 --seq-length 1024 --max-position-embeddings 1024 --vocab-size 64
      --make-vocab-size-divisible-by 64 --micro-batch-size 1 --global-batch-size 1 --lr 1e-3 --train-data-path "$TMP/v64.bin"
      --eval-interval 0 --train-iters 1)
line=$($CUDA "${H128[@]}" 2>&1 | grep '^attention')
est=$(sed -nE 's/.*auto: estimated ([0-9.e+-]+) ms flash vs ([0-9.e+-]+) ms gemm per layer on .*/\1 \2/p' <<<"$line")
[[ "$line" == "attention: flash "* ]] && [ -n "$est" ] && python3 -c "import sys; f, g = map(float, sys.argv[1:]); sys.exit(0 if f < g else 1)" $est \
  && ok "auto picks flash at head size 128, T=1024, where the step model has it faster: $est ms" || fail "head size 128: $line"

# tensor parallelism: 2 ranks of one head each (head size 64: flash), masks keyed by the model's head
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 10 300 mpirun --oversubscribe -np 2 $CUDA "${RUN[@]}" --train-iters 4 \
  --tensor-model-parallel-size 2 --metrics-file "$TMP/tp.jsonl" >"$TMP/tp.log" 2>&1 &

# ---- 2. the CPU trainer's flash twin ---------------------------------------------------------------------
$KEEL "${RUN[@]}" --train-iters 3 --attention-impl flash --metrics-file "$TMP/cpu_flash.jsonl" >"$TMP/cpu_flash.log" 2>&1 &
$KEEL "${RUN[@]}" --train-iters 3 --metrics-file "$TMP/cpu_gemm.jsonl" >"$TMP/cpu_gemm.log" 2>&1 &
wait
grep -q "^attention: flash" "$TMP/tp.log" || fail "TP=2: not on the flash path: $(grep '^attention' "$TMP/tp.log")"
out=$(compare_jsonl "$TMP/tp.jsonl" "$TMP/flash.jsonl" 5e-3) && ok "flash at TP=2 vs one process (bf16): $out" || { fail "flash TP=2: $out"; tail -3 "$TMP/tp.log"; }
grep -q "^attention: flash" "$TMP/cpu_flash.log" && grep -q "^attention: gemm" "$TMP/cpu_gemm.log" && ok "CPU: flash when asked, gemm under auto" \
  || fail "CPU attention lines: $(grep '^attention' "$TMP/cpu_flash.log" "$TMP/cpu_gemm.log")"
out=$(compare_jsonl "$TMP/cpu_flash.jsonl" "$TMP/cpu_gemm.jsonl" 1e-5) && ok "CPU flash twin vs the materialized reference: $out" || fail "CPU flash vs gemm: $out"

# ---- 3. --dry-run ---------------------------------------------------------------------------------------
XL=(--num-layers 48 --hidden-size 1600 --num-attention-heads 25 --seq-length 1024 --micro-batch-size 16)
flash=$($KEEL --dry-run "${XL[@]}" | grep '^gpu allocations')  # (exit 1: the logbooks' estimate does not fit 80 GB)
gemm=$($KEEL --dry-run "${XL[@]}" --attention-impl gemm | grep '^gpu allocations')
[[ "$flash" == *": fits" ]] && ok "1.5B, B=16, T=1024 with flash fits 80 GB without checkpointing: $flash" || fail "1.5B flash: $flash"
[[ "$gemm" == *"does NOT fit" ]] && ok "... and with the GEMM path it does not: $gemm" || fail "1.5B gemm: $gemm"
# auto in the plan: head size 128 on an H200 takes flash, which the model (as measured) has faster;
# with the flash backward at 0.03 of the peak (a curves file) the GEMM path, where its T x T
# probabilities fit (16.0 GiB planned, as measured there), and flash where they do not (15 GiB:
# flash's 13.3 fits)
H=(--num-layers 12 --hidden-size 1536 --num-attention-heads 12 --seq-length 1024 --micro-batch-size 8 --gpu-type h200)
out=$($KEEL --dry-run "${H[@]}")
grep -qE "^--attention-impl auto: flash: estimated .* ms gemm per layer on h200" <<<"$out" && grep -q "^keel's GPU trainer .*, flash attention)" <<<"$out" \
  && ok "--dry-run, head size 128 on h200: auto plans flash" || fail "dry-run auto at head size 128: $(grep -E '^--attention|^keel.s GPU' <<<"$out")"
printf 'flash_bwd_eff 0.03\n' >"$TMP/slow_flash.txt"
H+=(--step-curves "$TMP/slow_flash.txt")
out=$($KEEL --dry-run "${H[@]}")
grep -qE "^--attention-impl auto: gemm: estimated .* ms gemm per layer on h200" <<<"$out" && grep -q "^keel's GPU trainer .*, gemm attention)" <<<"$out" \
  && ok "--dry-run, head size 128 on h200 with the flash backward at 0.03 of the peak: auto plans the GEMM path" || fail "dry-run auto, slow flash: $(grep -E '^--attention|^keel.s GPU' <<<"$out")"
out=$($KEEL --dry-run "${H[@]}" --gpu-memory-gb 15)
grep -q "^--attention-impl auto: flash: .*; the GEMM path's T x T probabilities would not fit: flash$" <<<"$out" && grep -q "^keel's GPU trainer .*, flash attention)" <<<"$out" \
  && ok "... and flash where the GEMM path's probabilities do not fit 15 GiB" || fail "dry-run auto, 15 GiB: $(grep -E '^--attention|^keel.s GPU' <<<"$out")"
KEEL_EMU_PROFILE="$TMP/prof.json" $CUDA "${RUN[@]}" --train-iters 1 >"$TMP/prof.log" 2>&1 || fail "profiled flash run failed"
dry=$($KEEL --dry-run "${RUN[@]}" --train-iters 1 | sed -nE 's/^gpu allocations: total ([0-9]+) bytes.*/\1/p')
asked=$(python3 -c "import json; print(json.load(open('$TMP/prof.json'))['alloc_bytes'])")
[ -n "$dry" ] && [ "$dry" = "$asked" ] && ok "flash: --dry-run $dry bytes = the trainer's cudaMalloc bytes" || fail "flash: --dry-run $dry vs trainer $asked"
finish
