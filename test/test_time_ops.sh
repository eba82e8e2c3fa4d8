#!/usr/bin/env bash
# --time-ops N (llmc/op_times.h): the table of where iteration N's time went, op by op.
#   1. CPU trainer, dropout on, accumulation 2: one table, for iteration N only, printed before
#      iteration N's log line; every op of the step with its calls (per layer and micro-batch), the
#      shares adding up to 100%, the times to the table's total and that total to the iteration's
#      elapsed_ms in the metrics (the segments cover the iteration); the model FLOPs of the rows
#      exactly 6·tokens·(12·L·C² + C·Vp) plus the attention's causal 6·L·B·C·T(T+1) per micro-batch;
#      the training bytes (losses, grad norms) identical to a run without the flag.
#   2. --checkpoint-activations: the recomputed forward has rows of its own ("recompute ..."), and
#      its FLOPs are given apart from the model's.
#   3. The knobs' ops (NormFormer, the embedding LayerNorm, ALiBi, ReLU): their rows, the same FLOPs.
#   4. The emulated GPU trainer (flash at head size 64): its table names the flash kernels, the
#      times are the events' (the emulator's clock, test_cuda_emu), the model FLOPs exact, the bytes
#      as without the flag.
#   5. Parallel runs under mpirun: PP=2 x DP=2 with ZeRO-1 — rank 0 prints each stage's table, the
#      embedding on stage 0 and the LM head on stage 1, the pipeline's sends, the gradient
#      reduction and its wait, the ZeRO-1 all-gather as rows; TP=2 — the tensor-parallel
#      all-reduces as rows, the classifier's three passes, and the rank's FLOPs half the model's.
#   6. Bad values: a negative N is refused; an N the run never reaches is said at the end, and one
#      that falls in a skipped range too.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

# check_table LOG ITER EXPECT...: the table of ITER in LOG; EXPECT are "op=calls" pairs (an op
# absent: calls 0). Also: shares sum to 100 ± 0.3, the rows' ms to the header's total ± 0.001 ms
# per row, the table once, between the log lines of the iteration before and of the iteration. Prints the FLOPs line's two counts
# (the model's, the recomputed: 0 without) and the header's total ms.
check_table() {
  python3 - "$@" <<'PY'
import re, sys
log, it, expect = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
lines = open(log).read().split("\n")
heads = [i for i, l in enumerate(lines) if l.startswith("time per op, iteration")]
if len(heads) != 1: sys.exit(f"{len(heads)} tables, want 1")
h = heads[0]
m = re.match(r"time per op, iteration (\d+)(, pipeline stage \d+)?: ([0-9.]+) ms", lines[h])
if not m or int(m.group(1)) != it: sys.exit(f"header: {lines[h]}")
total = float(m.group(3))
logline = [i for i, l in enumerate(lines) if re.match(rf"\s*iteration\s+{it}/", l)]
if not logline or logline[0] < h: sys.exit("the table does not come before the iteration's log line")
before = [i for i, l in enumerate(lines) if re.match(rf"\s*iteration\s+{it - 1}/", l)]
if it > 1 and (not before or before[0] > h): sys.exit("the table does not come after the previous iteration's log line")
rows, i = {}, h + 2
while lines[i].startswith("  ") and not lines[i].startswith("  model FLOPs"):
    f = re.match(r"  (.+?)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)%\s+([0-9.]+)", lines[i])
    if not f: sys.exit(f"row: {lines[i]}")
    rows[f.group(1)] = (int(f.group(2)), float(f.group(3)), float(f.group(4)))
    i += 1
fl = re.match(r"  model FLOPs (\d+) \(the rows' sum\), [^;]*(; (\d+) more recomputed)?$", lines[i])
if not fl: sys.exit(f"no FLOPs line: {lines[i]}")
share = sum(r[2] for r in rows.values())
ms = sum(r[1] for r in rows.values())
if abs(share - 100) > 0.3 + 0.05 * len(rows): sys.exit(f"shares sum to {share}")
if abs(ms - total) > 0.001 * len(rows) + 1e-9: sys.exit(f"rows {ms} ms, total {total} ms")
for e in expect:
    op, calls = e.rsplit("=", 1)
    got = rows.get(op, (0,))[0]
    if got != int(calls): sys.exit(f"{op}: {got} calls, want {calls} (rows: {sorted(rows)})")
print(fl.group(1), fl.group(3) or 0, total)
PY
}
# elapsed_of JSONL ITER: that iteration's elapsed_ms in the metrics
elapsed_of() { python3 -c "
import json, sys
for l in open('$1'):
    r = json.loads(l)
    if r.get('iteration') == $2 and 'elapsed_ms' in r: print(r['elapsed_ms']); break"; }

L=2 C=32 NH=2 T=16 B=2 ACC=2 VP=50304
# model_flops L C T B ACC [forward]: the model's FLOPs of an iteration (forward: of the layers' forward
# alone, what --checkpoint-activations recomputes)
model_flops() { python3 -c "
L,C,T,B,A,V,fwd=$1,$2,$3,$4,$5,$VP,${6:-0}
print(A*(2*B*T*12*L*C*C + 2*L*B*C*T*(T+1)) if fwd else A*(6*B*T*(12*L*C*C + C*V) + 6*L*B*C*T*(T+1)))"; }
flops=$(model_flops $L $C $T $B $ACC)
RUN=("${TINY[@]}" --hidden-dropout 0.1 --attention-dropout 0.1 --train-iters 3 --eval-interval 0)

# ---- 1. the CPU trainer ----------------------------------------------------------------------------------
$KEEL "${RUN[@]}" --metrics-file "$TMP/plain.jsonl" >"$TMP/plain.log" 2>&1 || fail "the run without --time-ops failed"
$KEEL "${RUN[@]}" --time-ops 2 --metrics-file "$TMP/timed.jsonl" >"$TMP/timed.log" 2>&1 || fail "the run with --time-ops 2 failed"
per=$((L * ACC))
got=$(check_table "$TMP/timed.log" 2 "fwd embed=$ACC" "fwd ln1=$ACC" "fwd qkv matmul=$per" "fwd attention (gemm)=$per" \
  "fwd attproj matmul=$per" "fwd residual + ln2=$per" "fwd fc matmul + gelu=$per" "fwd fcproj matmul=$per" \
  "fwd residual + next ln1=$(((L - 1) * ACC))" "fwd residual + lnf=$ACC" "fwd dropout=$((2 * per + ACC))" \
  "fwd lm head matmul=$ACC" "fwd classifier=$ACC" "bwd lm head matmul=$ACC" "bwd lnf=$ACC" \
  "bwd fcproj matmul + dgelu=$per" "bwd fc matmul=$per" "bwd ln2=$per" "bwd attproj matmul=$per" "bwd attention (gemm)=$per" \
  "bwd qkv matmul=$per" "bwd ln1=$per" "bwd dropout=$((2 * per + ACC))" "bwd embed=$ACC" "host batch read=$ACC" "host targets=$ACC" \
  "host loss sum over ranks=1" "step iteration start=1" "step loss read-back=1" "step optimizer=1" "step gradient reduction (wait)=0" \
  "step gradient reduction=0" "recompute qkv matmul=0" "fwd positions=0" "step statistics=0")
if [ $? -eq 0 ]; then
  read -r got again total <<<"$got"
  elapsed=$(elapsed_of "$TMP/timed.jsonl" 2)
  if [ "$got" = "$flops" ] && [ "$again" = 0 ] && python3 -c "import sys; t, e = $total, $elapsed; sys.exit(not (abs(t - e) <= 0.05 * e + 2))"; then
    ok "CPU: every op with its calls, shares and times adding up to $total ms (the iteration's elapsed_ms: $elapsed), model FLOPs $got"
  else fail "CPU: model FLOPs $got (want $flops), recomputed $again (want 0), total $total ms against elapsed_ms $elapsed"; fi
else
  fail "CPU table: $got"; sed -n '/^time per op/,/model FLOPs/p' "$TMP/timed.log"
fi
[ "$(grep -c '^time per op' "$TMP/timed.log")" -eq 1 ] && ! grep -q '^time per op' "$TMP/plain.log" ||
  fail "a table in a run without the flag, or more than one with it"
cmp -s <(strip_timing "$TMP/plain.jsonl") <(strip_timing "$TMP/timed.jsonl") &&
  ok "CPU: the metrics are byte-identical with and without --time-ops" || fail "CPU: --time-ops changed the metrics"

# ---- 2. the recomputed forward ------------------------------------------------------------------------
$KEEL "${RUN[@]}" --checkpoint-activations --time-ops 3 >"$TMP/ckpt.log" 2>&1 || fail "the run with --checkpoint-activations failed"
out=$(check_table "$TMP/ckpt.log" 3 "recompute qkv matmul=$per" "recompute attention (gemm)=$per" "fwd qkv matmul=$per" \
  "recompute residual + next ln1=0" "recompute residual=$per" "recompute ln1=$per")
if [ $? -eq 0 ] && [ "$(cut -d' ' -f1-2 <<<"$out")" = "$flops $(model_flops $L $C $T $B $ACC 1)" ]; then
  ok "--checkpoint-activations: the recomputed forward in rows of its own, its FLOPs apart from the model's ($out)"
else
  fail "recompute table: $out (want $flops $(model_flops $L $C $T $B $ACC 1))"
fi

# ---- 3. the knobs' ops -------------------------------------------------------------------------------------
$KEEL "${RUN[@]}" --normformer --embed-layernorm --position-embedding-type alibi --activation relu --time-ops 2 >"$TMP/knobs.log" 2>&1 ||
  fail "the run with NormFormer, the embedding LayerNorm, ALiBi and ReLU failed"
out=$(check_table "$TMP/knobs.log" 2 "fwd head scale=$per" "fwd ln attn=$per" "fwd ln fc=$per" "fwd fc matmul=$per" "fwd activation=$per" \
  "fwd fc matmul + gelu=0" "bwd head scale=$per" "bwd ln attn=$per" "bwd ln fc=$per" "bwd activation=$per" "bwd fcproj matmul=$per" \
  "fwd embedding layernorm=$ACC" "bwd embedding layernorm=$ACC" "bwd embed=$((2 * ACC))" "fwd positions=0")
[ $? -eq 0 ] && [ "$(cut -d' ' -f1 <<<"$out")" = "$flops" ] && ok "NormFormer, embedding LayerNorm, ALiBi, ReLU: their rows, the same model FLOPs" ||
  fail "knobs table: $out"

# ---- 3. the emulated GPU trainer -----------------------------------------------------------------------
CUDA=build/train_gpt_emu
if [ -x "$CUDA" ]; then
  GRUN=(--num-layers 2 --hidden-size 128 --num-attention-heads 2 --seq-length 32 --micro-batch-size 2 --global-batch-size 4
        --lr 1e-3 --seed 5 --train-data-path data/brown/brown_train.bin --eval-interval 0 --log-interval 1 --train-iters 2
        --hidden-dropout 0 --attention-dropout 0)
  $CUDA "${GRUN[@]}" --metrics-file "$TMP/gplain.jsonl" >"$TMP/gplain.log" 2>&1 || fail "the emulated run failed"
  $CUDA "${GRUN[@]}" --time-ops 2 --metrics-file "$TMP/gtimed.jsonl" >"$TMP/gtimed.log" 2>&1 || fail "the emulated run with --time-ops failed"
  out=$(check_table "$TMP/gtimed.log" 2 "fwd attention (flash)=4" "bwd attention (flash)=4" "fwd qkv matmul=4" "step optimizer=1")
  if [ $? -eq 0 ] && grep -q "CUDA events" "$TMP/gtimed.log" && awk '/^time per op/ { exit !($6 > 0) }' "$TMP/gtimed.log" &&
     [ "$(cut -d' ' -f1 <<<"$out")" = "$(model_flops 2 128 32 2 2)" ]; then
    ok "emulated GPU: the flash kernels' rows, timed by CUDA events, the model FLOPs exact"
  else
    fail "emulated GPU table: $out"; sed -n '/^time per op/,/model FLOPs/p' "$TMP/gtimed.log"
  fi
  cmp -s <(strip_timing "$TMP/gplain.jsonl") <(strip_timing "$TMP/gtimed.jsonl") &&
    ok "emulated GPU: the metrics are byte-identical with and without --time-ops" || fail "emulated GPU: --time-ops changed the metrics"
else
  fail "$CUDA not built (make build/train_gpt_emu)"
fi

# ---- 5. parallel runs -------------------------------------------------------------------------------------
if command -v mpirun >/dev/null; then
  mpi_run() { timeout -k 10 300 mpirun --oversubscribe -np 4 $KEEL "${TINY[@]}" --train-iters 3 --eval-interval 0 \
    --pipeline-model-parallel-size 2 --global-batch-size 8 --zero-stage 1 --time-ops 2 >"$TMP/pp.log" 2>&1; }
  mpi_run || { mpi_start_failed <"$TMP/pp.log" && mpi_run; } || fail "PP=2 x DP=2 run failed: $(tail -3 "$TMP/pp.log")"
  s0=$(sed -n '/^time per op, iteration 2, pipeline stage 0/,/model FLOPs/p' "$TMP/pp.log")
  s1=$(sed -n '/^time per op, iteration 2, pipeline stage 1/,/model FLOPs/p' "$TMP/pp.log")
  if grep -q "fwd embed " <<<"$s0" && ! grep -q "lm head" <<<"$s0" && grep -q "fwd lm head matmul " <<<"$s1" &&
     ! grep -q "fwd embed " <<<"$s1" && grep -q "step pipeline send/recv " <<<"$s0" && grep -q "step pipeline send/recv " <<<"$s1" &&
     grep -q "step gradient reduction (wait) " <<<"$s0" && grep -q "step ZeRO-1 parameter all-gather " <<<"$s1" &&
     grep -q "step gradient reduction  *1 " <<<"$s0" && grep -q "step gradient reduction  *1 " <<<"$s1" && grep -q "step embedding gradient all-reduce " <<<"$s1" &&
     [ "$(grep -c '^time per op' "$TMP/pp.log")" -eq 2 ]; then
    ok "PP=2 x DP=2, ZeRO-1: rank 0 prints both stages' tables, each with its own ops"
  else
    fail "PP=2 x DP=2 tables:"; sed -n '/^time per op/,/model FLOPs/p' "$TMP/pp.log"
  fi
  tp_run() { timeout -k 10 300 mpirun --oversubscribe -np 2 $KEEL "${RUN[@]}" --tensor-model-parallel-size 2 --time-ops 2 >"$TMP/tp.log" 2>&1; }
  tp_run || { mpi_start_failed <"$TMP/tp.log" && tp_run; } || fail "TP=2 run failed: $(tail -3 "$TMP/tp.log")"
  tp_flops=$(($(VP=50432 model_flops $L $C $T $B $ACC) / 2))  # (the vocabulary padded to a multiple of 128 x TP)
  out=$(check_table "$TMP/tp.log" 2 "fwd classifier=$((3 * ACC))" "fwd qkv matmul=$per" "step replicated weights check=1")
  if [ $? -eq 0 ] && [ "$(cut -d' ' -f1 <<<"$out")" = "$tp_flops" ] && grep -q "^  fwd tensor-parallel all-reduce " "$TMP/tp.log" &&
     grep -q "^  bwd tensor-parallel all-reduce " "$TMP/tp.log"; then
    ok "TP=2: the tensor-parallel all-reduces as rows, the classifier's three passes, the rank's FLOPs half the model's"
  else
    fail "TP=2 table: $out (want FLOPs $tp_flops)"; sed -n '/^time per op/,/model FLOPs/p' "$TMP/tp.log"
  fi
else
  fail "mpirun not found (scripts/setup.sh installs OpenMPI)"
fi

# ---- 6. bad values ----------------------------------------------------------------------------------------
expect_fail 2 "time-ops" $KEEL "${RUN[@]}" --time-ops -1
$KEEL "${RUN[@]}" --time-ops 9 >"$TMP/late.log" 2>&1 || fail "a run with --time-ops past its end failed"
grep -q "^--time-ops 9: that iteration did not run in this process (it ended at iteration 3)" "$TMP/late.log" &&
  ! grep -q '^time per op' "$TMP/late.log" && ok "an iteration the run never reaches is said at the end" ||
  fail "no note for --time-ops past the run's end"
$KEEL "${RUN[@]}" --time-ops 2 --skip-train-iteration-range 2-2 >"$TMP/skip.log" 2>&1 || fail "a run with --time-ops in a skipped range failed"
grep -q "^--time-ops 2: that iteration was skipped (--skip-train-iteration-range): nothing to time" "$TMP/skip.log" &&
  ! grep -q '^time per op' "$TMP/skip.log" && ok "an iteration in a skipped range is said so at the end" || fail "no note for a skipped --time-ops iteration"
finish
