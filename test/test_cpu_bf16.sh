#!/usr/bin/env bash
# --bf16 on the CPU trainer (docs/internals.md#precision): fp32 arithmetic, with the weights the ops
# read, every activation and activation gradient, and the attention's probabilities and dS rounded
# to bf16 wherever the CUDA trainer's bf16 model stores them (llmc/model.h gpt_stored). Checked
# against the emulated CUDA trainer's --bf16 (build/train_gpt_emu), value by value:
#   1. iteration 1, every figure the run logs (loss, grad norm, each layer's gradient norm and
#      activation RMS, the embedding's and final norm's gradient norms, with
#      --log-layer-norms-interval 1) within 1e-4 relative of the CUDA trainer's. With the same rounding
#      points the two hold the same bf16 values except where fp32 summation order puts a value on the
#      other side of a rounding boundary: measured 3e-8 without such a flip, 2.6e-5 with one. Each
#      rounding point removed (the weights, a residual before its LayerNorm, the probabilities, q/k/v
#      or their gradient, the residual gradient: test/mutants/cpu_bf16_*.patch) moves some figure by
#      1.8e-4..1e-3, and the fp32 run must miss the bound too (measured 6.1e-4, 1.5e-3), so the check
#      can fail. (dS inside the attention moves these figures by only ~5e-6 at this size: its rounding
#      is checked at the op, in test_cuda_attention, where the CPU twin gives the GPU's bits);
#   2. after iteration 1 the two drift apart as bf16 weights round on either side of a boundary:
#      six iterations stay within 5e-3 (the CUDA bf16 vs fp32 bound of test_cuda_trainer), printed;
#   3. plain GPT-2 with dropout, and every model knob (ALiBi, NormFormer, embedding LayerNorm, ReLU,
#      query-key layer scaling); the CPU's flash twin runs under --bf16 too;
#   4. determinism and resume: two runs byte-identical; 3 iterations + save + resume to 6 = 6 straight
#      (the bf16 copy is recomputed from the fp32 master weights the checkpoint holds);
#   5. DP=2 with ZeRO-1 under mpirun = one process (iteration 1 within 1e-6, six within 5e-3).
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=2
CUDA=build/train_gpt_emu
[ -x "$CUDA" ] || { fail "$CUDA not built (make build/train_gpt_emu)"; finish; }
ARGS=("${TINY[@]}" --hidden-dropout 0.1 --attention-dropout 0.1 --log-layer-norms-interval 1)

# first_record_close A B TOL: every numeric figure of A's first iteration record within TOL relative of B's;
# prints the worst. Exit 1 on a miss (naming it), 2 when the records cannot be compared.
first_record_close() {
  python3 - "$@" <<'PY'
import json, sys
def flat(d, pre=""):
    if isinstance(d, dict):
        return {k2: v2 for k, v in d.items() for k2, v2 in flat(v, pre + k + ".").items()}
    if isinstance(d, list):
        return {k2: v2 for i, v in enumerate(d) for k2, v2 in flat(v, pre + str(i) + ".").items()}
    return {pre[:-1]: float(d)} if isinstance(d, (int, float)) and not isinstance(d, bool) else {}
skip = ("elapsed_ms", "samples_per_second", "tflops", "num_zeros")  # (a count: one flip moves it by 1)
def first(path):
    for line in open(path):
        r = json.loads(line)
        if r.get("iteration") == 1 and "lm_loss" in r:
            return {k: v for k, v in flat(r).items() if k not in skip}
    sys.exit(2)
a, b, tol = first(sys.argv[1]), first(sys.argv[2]), float(sys.argv[3])
if set(a) != set(b) or "layer_grad_norm.0" not in a: sys.exit(2)
worst, name = 0.0, ""
for k in a:
    d = abs(a[k] - b[k]) / max(abs(b[k]), 1e-30)
    if d > worst: worst, name = d, k
print(f"{len(a)} figures, worst {name} at {worst:.2g}")
sys.exit(1 if worst > tol else 0)
PY
}

case_run() {  # name flags...: CPU --bf16, CPU fp32 and CUDA --bf16 runs of 6 iterations
  local name=$1; shift
  local a=("${ARGS[@]}" --train-iters 6 "$@")
  timeout -k 10 300 ./train_gpt_cpu "${a[@]}" --bf16 --metrics-file "$TMP/$name.cpu.jsonl" >"$TMP/$name.cpu.log" 2>&1 || { fail "$name: CPU --bf16 run failed: $(grep -m1 error "$TMP/$name.cpu.log")"; return 1; }
  timeout -k 10 300 ./train_gpt_cpu "${a[@]}" --metrics-file "$TMP/$name.fp32.jsonl" >"$TMP/$name.fp32.log" 2>&1 || { fail "$name: CPU fp32 run failed"; return 1; }
  timeout -k 10 600 $CUDA "${a[@]}" --bf16 --metrics-file "$TMP/$name.cuda.jsonl" >"$TMP/$name.cuda.log" 2>&1 || { fail "$name: CUDA --bf16 run failed"; return 1; }
  grep -q "precision: bf16 emulated" "$TMP/$name.cpu.log" || fail "$name: the CPU run does not say bf16 emulated"
  local r
  r=$(first_record_close "$TMP/$name.cpu.jsonl" "$TMP/$name.cuda.jsonl" 1e-4) && ok "$name: iteration 1, CPU --bf16 = CUDA --bf16 within 1e-4 ($r)" || fail "$name: iteration 1, CPU --bf16 vs CUDA --bf16: $r"
  r=$(first_record_close "$TMP/$name.fp32.jsonl" "$TMP/$name.cuda.jsonl" 1e-4); [ $? = 1 ] && ok "$name: the fp32 run misses that bound ($r)" || fail "$name: fp32 is as close to CUDA --bf16 as the CPU's --bf16 ($r): the check cannot fail"
  r=$(compare_jsonl "$TMP/$name.cpu.jsonl" "$TMP/$name.cuda.jsonl" 5e-3 2>&1) && ok "$name: 6 iterations within 5e-3 ($r)" || fail "$name: 6 iterations: $r"
}
case_run gpt2
case_run knobs --position-embedding-type alibi --normformer --embed-layernorm --activation relu --apply-query-key-layer-scaling
# the flash twin on the CPU shares the probabilities' rounding but not the GPU flash kernel's (which
# rounds unnormalized probabilities in registers): close to the materialized path, not equal to it
./train_gpt_cpu "${ARGS[@]}" --train-iters 3 --bf16 --attention-impl flash --metrics-file "$TMP/flash.jsonl" >"$TMP/flash.log" 2>&1 \
  && r=$(first_record_close "$TMP/flash.jsonl" "$TMP/gpt2.cpu.jsonl" 1e-3) && ok "--attention-impl flash under --bf16: iteration 1 within 1e-3 of the materialized path ($r)" \
  || fail "flash under --bf16: $(grep -m1 error "$TMP/flash.log") $r"

# 4. determinism and resume
D=("${ARGS[@]}" --bf16)
./train_gpt_cpu "${D[@]}" --train-iters 6 --metrics-file "$TMP/d1.jsonl" >/dev/null 2>&1 &&
  ./train_gpt_cpu "${D[@]}" --train-iters 6 --metrics-file "$TMP/d2.jsonl" >/dev/null 2>&1 &&
  cmp -s <(strip_timing "$TMP/d1.jsonl") <(strip_timing "$TMP/d2.jsonl") && ok "two --bf16 runs: identical records" || fail "two --bf16 runs differ"
./train_gpt_cpu "${D[@]}" --train-iters 6 --exit-interval 3 --save "$TMP/ck" --save-interval 3 --metrics-file "$TMP/r.jsonl" >/dev/null 2>&1 &&
  ./train_gpt_cpu "${D[@]}" --train-iters 6 --save "$TMP/ck" --save-interval 3 --load "$TMP/ck" --metrics-file "$TMP/r.jsonl" >"$TMP/r.log" 2>&1 &&
  cmp -s <(strip_timing "$TMP/d1.jsonl") <(strip_timing "$TMP/r.jsonl") && ok "--bf16: 3 iterations, save, resume to 6 = 6 straight (records byte-identical)" \
  || fail "--bf16 resume: $(grep -m1 error "$TMP/r.log")"
# 5. data parallel: DP=2 with ZeRO-1 under mpirun = one process, as under fp32: the gradients' fp32
# sums group the micro-batches differently (~1e-9), which bf16 weights amplify over the iterations
if command -v mpirun >/dev/null; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 timeout -k 10 300 \
    mpirun --oversubscribe -np 2 ./train_gpt_cpu "${D[@]}" --train-iters 6 --zero-stage 1 --metrics-file "$TMP/dp.jsonl" >"$TMP/dp.log" 2>&1 \
    && r=$(first_record_close "$TMP/dp.jsonl" "$TMP/d1.jsonl" 1e-6) && r2=$(compare_jsonl "$TMP/dp.jsonl" "$TMP/d1.jsonl" 5e-3 2>&1) \
    && ok "--bf16 at DP=2 with ZeRO-1 = one process: iteration 1 within 1e-6 ($r), six within 5e-3 ($r2)" \
    || fail "--bf16 at DP=2: $(grep -m1 error "$TMP/dp.log") $r"
fi
finish
