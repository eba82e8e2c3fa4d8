#!/usr/bin/env bash
# The CUDA trainer (train_gpt.cu with KEEL_CUDA: the llmc/cuda op set, cuBLASLt, the NCCL comm
# backend) against the CPU trainer. In CI it is build/train_gpt_emu — the CUDA sources under the CPU
# emulation of the CUDA execution model, with device memory inaccessible to host code outside
# kernels and copies; on a GPU `make test-gpu` sets KEEL_CUDA_TRAINER=./train_gpt. The CPU trainer is
# ./train_gpt_cpu (KEEL_CPU_TRAINER names another: scripts/gpu_session.sh's bundle has its own).
#   1. parity, --fp32: every iteration's loss, grad norm and validation loss within 2e-5 relative
#      of train_gpt_cpu over 6 iterations of a tiny model with dropout on, for plain GPT-2, the model
#      knobs (ALiBi, NormFormer, embedding LayerNorm, ReLU, qk-layer scaling) and 8-bit Adam with
#      percentile clipping (1e-4, see below). The op sets sum in different orders (cuBLASLt's
#      tiling, warp trees), so bits differ; 2e-5 is ~100 ulp of fp32 after six updates;
#   2. mixed precision against the fp32 CPU trainer: --bf16 (the GPU default: bf16 weights and
#      activations, fp32 master weights and gradients) within 5e-3 relative, plain and with the
#      model knobs; --fp16 (fp16 weights and activations, loss scaler, clipping) within 1e-3 of the
#      CPU's --fp16 (fp32 arithmetic, binary16 gradient rounding). bf16 keeps 8 significant bits
#      (2^-9 relative per rounding), fp16 11; measured worst: bf16 1.4e-3, fp16 1.5e-4. And the
#      low precision must show: each differs from the fp32 numbers by more than 2e-5 somewhere;
#   3. determinism under --bf16: two runs give identical JSONL records and checkpoint bytes;
#   4. bit-exact resume under --bf16: 3 iterations, save, resume to 6 = 6 straight (the bf16 weights
#      are recomputed from the fp32 master weights the checkpoint holds);
#   5. checkpoints are canonical: the CPU trainer loads the CUDA trainer's checkpoint and its first
#      validation loss matches;
#   6. data parallel through the NCCL backend (mpirun -np 2, ZeRO-1) within 2e-5 of one process;
#   7. a model beyond the device's free memory is refused before any allocation.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
CUDA=${KEEL_CUDA_TRAINER:-build/train_gpt_emu}
CPU=${KEEL_CPU_TRAINER:-./train_gpt_cpu}
[ -x "$CUDA" ] || { fail "$CUDA not built (make build/train_gpt_emu)"; finish; }
[ -x "$CPU" ] || { fail "$CPU not built (make train_gpt_cpu)"; finish; }
N=6
ARGS=("${TINY[@]}" --train-iters $N --hidden-dropout 0.1 --attention-dropout 0.1 --eval-interval 3)

compare() { compare_jsonl "$@"; }  # (test/lib.sh)
parity() {  # name tol flags...: the same run on both trainers
  local name=$1 tol=$2; shift 2
  timeout -k 10 600 $CPU "${ARGS[@]}" "$@" --metrics-file "$TMP/$name.cpu.jsonl" >"$TMP/$name.cpu.log" 2>&1 || { fail "$name: CPU run failed"; tail -5 "$TMP/$name.cpu.log"; return; }
  timeout -k 10 600 $CUDA "${ARGS[@]}" "$@" --metrics-file "$TMP/$name.cuda.jsonl" >"$TMP/$name.cuda.log" 2>&1 || { fail "$name: CUDA run failed"; tail -5 "$TMP/$name.cuda.log"; return; }
  local r; r=$(compare "$TMP/$name.cuda.jsonl" "$TMP/$name.cpu.jsonl" $tol 2>&1) && ok "$name: CUDA = CPU within $tol ($r)" || fail "$name: $r"
}

grep -q "backend: cuda" < <($CUDA "${ARGS[@]}" --train-iters 1 2>&1) || fail "$CUDA does not report the CUDA backend"
# 7. a model the device cannot hold is refused before anything is allocated, naming both figures
# (the plan against cudaMemGetInfo's free bytes: the emulated device has 16 GiB; 96 layers of
# 4096 channels need ~330 GiB), and --save gets no checkpoint
out=$(timeout -k 10 120 $CUDA "${ARGS[@]}" --num-layers 96 --hidden-size 4096 --num-attention-heads 32 --save "$TMP/big" 2>&1); rc=$?
if [ $rc = 1 ] && grep -qE "this run needs [0-9.]+ GiB \(weights, gradients, optimizer state, activations\), more than GPU memory free on this device: [0-9.]+ GiB" <<<"$out" \
   && [ "$(grep -c "^error" <<<"$out")" = 1 ] && [ -z "$(ls -A "$TMP/big" 2>/dev/null)" ]; then ok "a model beyond the device's memory: refused before allocating (exit 1, one line, no checkpoint)"
else fail "oversized model on the device: exit $rc: $(grep -i "error\|memory" <<<"$out" | head -3)"; fi
KNOBS=(--position-embedding-type alibi --normformer --embed-layernorm --activation relu --apply-query-key-layer-scaling)
parity gpt2 2e-5 --fp32
parity knobs 2e-5 --fp32 "${KNOBS[@]}"
# 8-bit state: a moment that lands near a code boundary rounds to the neighbouring code on one
# side, which moves its parameter by a quantization step; 1e-4 covers that, not a wrong update
parity adam8bit 1e-4 --fp32 --optimizer adam8bit --adam8bit-min-size 1024 --adam8bit-block-size 256 --adam8bit-percentile-clipping 5

# 2. mixed precision against the CPU trainer in fp32 (test_cpu_bf16 compares the CPU's own --bf16)
parity_mixed() {  # name tol flags...: the CUDA run in bf16 (--bf16 among the flags, or the default), the CPU in fp32
  local name=$1 tol=$2; shift 2
  local cpu=(); for a in "$@"; do [ "$a" = --bf16 ] || cpu+=("$a"); done
  timeout -k 10 600 $CPU "${ARGS[@]}" "${cpu[@]}" --metrics-file "$TMP/$name.cpu.jsonl" >"$TMP/$name.cpu.log" 2>&1 || { fail "$name: CPU run failed"; tail -5 "$TMP/$name.cpu.log"; return; }
  timeout -k 10 600 $CUDA "${ARGS[@]}" "$@" --metrics-file "$TMP/$name.cuda.jsonl" >"$TMP/$name.cuda.log" 2>&1 || { fail "$name: CUDA run failed"; tail -5 "$TMP/$name.cuda.log"; return; }
  grep -q "precision: bf16" "$TMP/$name.cuda.log" || fail "$name: the CUDA run does not report bf16"
  local r; r=$(compare "$TMP/$name.cuda.jsonl" "$TMP/$name.cpu.jsonl" $tol 2>&1) && ok "$name: CUDA bf16 = CPU fp32 within $tol ($r)" || fail "$name: $r"
}
parity_mixed bf16-default 5e-3
parity_mixed bf16-knobs 5e-3 --bf16 "${KNOBS[@]}"
parity fp16 1e-3 --fp16 --initial-loss-scale 65536 --clip-grad 0.05
grep -q "precision: fp16" "$TMP/fp16.cuda.log" || fail "fp16: the CUDA run does not report fp16"
for name in bf16-default fp16; do  # a bf16/fp16 run that computed in fp32 would pass the above
  compare "$TMP/$name.cuda.jsonl" "$TMP/$name.cpu.jsonl" 2e-5 >/dev/null 2>&1 && fail "$name: no different from fp32 (inert precision flag)" \
    || ok "$name: differs from fp32 beyond 2e-5 (it computes in low precision)"
done

# bf16 activations read on the host side: per-layer statistics (Σx² of bf16 buffers) and text
# samples (bf16 logits converted on the host) run, and the statistics agree with the CPU's
ST=(--log-layer-norms-interval 1 --sample-interval 6 --sample-length 8)
$CPU "${ARGS[@]}" "${ST[@]}" --metrics-file "$TMP/st.cpu.jsonl" >"$TMP/st.cpu.log" 2>&1 || fail "stats: CPU run failed"
$CUDA "${ARGS[@]}" "${ST[@]}" --metrics-file "$TMP/st.cuda.jsonl" >"$TMP/st.cuda.log" 2>&1 || fail "stats: bf16 run failed"
grep -q "sample at iteration 6" "$TMP/st.cuda.log" || fail "bf16: no text sample"
python3 - "$TMP/st.cuda.jsonl" "$TMP/st.cpu.jsonl" <<'PY' && ok "bf16: per-layer statistics within 5e-3 of the CPU's, text sample printed" || fail "bf16 per-layer statistics"
import json, sys
a, b = ([json.loads(l) for l in open(f) if '"layer_act_rms"' in l] for f in sys.argv[1:3])
assert len(a) == len(b) == 6, (len(a), len(b))
for x, y in zip(a, b):
    for k in ("layer_act_rms", "layer_grad_norm", "layer_weight_norm"):
        for u, v in zip(x[k], y[k]):
            assert abs(u - v) <= 5e-3 * abs(v), (x["iteration"], k, u, v)
PY

# 3-4. determinism and bit-exact resume (bf16, the default)
$CUDA "${ARGS[@]}" --save "$TMP/a" --save-interval $N --metrics-file "$TMP/a.jsonl" >"$TMP/a.log" 2>&1 || fail "run a failed"
$CUDA "${ARGS[@]}" --save "$TMP/b" --save-interval $N --metrics-file "$TMP/b.jsonl" >"$TMP/b.log" 2>&1 || fail "run b failed"
$CUDA "${ARGS[@]}" --save "$TMP/c" --save-interval 3 --exit-interval 3 --metrics-file "$TMP/c.jsonl" >"$TMP/c.log" 2>&1 || fail "run c failed"
$CUDA "${ARGS[@]}" --load "$TMP/c" --save "$TMP/c" --save-interval 3 --metrics-file "$TMP/c.jsonl" >"$TMP/c2.log" 2>&1 || fail "resume c failed"
cmp -s <(strip_timing "$TMP/a.jsonl") <(strip_timing "$TMP/b.jsonl") && ok "two CUDA runs: identical records" || fail "two CUDA runs: records differ"
for f in model.bin optimizer.bin state.txt; do
  cmp -s "$TMP/a/iter_0000006/$f" "$TMP/b/iter_0000006/$f" || fail "two CUDA runs: $f differs"
  cmp -s "$TMP/a/iter_0000006/$f" "$TMP/c/iter_0000006/$f" || fail "resume at 3: $f differs from the straight run"
done
cmp -s <(strip_timing "$TMP/a.jsonl") <(strip_timing "$TMP/c.jsonl") && ok "stop at 3 + resume = straight run (records and checkpoint bytes)" \
  || fail "resumed records differ"

# 5. the CPU trainer continues from the CUDA trainer's checkpoint
$CUDA "${ARGS[@]}" --fp32 --save "$TMP/d" --save-interval 3 --exit-interval 3 >"$TMP/d.log" 2>&1 || fail "run d failed"
$CPU "${ARGS[@]}" --load "$TMP/d" --eval-interval 1 --metrics-file "$TMP/x.jsonl" >"$TMP/x.log" 2>&1 || fail "CPU load of a CUDA checkpoint failed"
$CUDA "${ARGS[@]}" --fp32 --load "$TMP/d" --eval-interval 1 --metrics-file "$TMP/y.jsonl" >"$TMP/y.log" 2>&1 || fail "CUDA continue failed"
r=$(compare "$TMP/x.jsonl" "$TMP/y.jsonl" 2e-5 2>&1) && ok "CPU trainer continues the CUDA checkpoint ($r)" || fail "CPU vs CUDA from one checkpoint: $r"

# 6. data parallel through the NCCL backend: two ranks need two GPUs (NCCL refuses two ranks on one)
# and a build with MPI; the emulated trainer gives each rank its own emulated device
dp_why=""
command -v mpirun >/dev/null || dp_why="no mpirun"
grep -q "single-GPU build" < <($CUDA "${ARGS[@]}" --train-iters 1 2>&1) && dp_why="$CUDA is a single-GPU build (no MPI)"
if [ "$CUDA" != build/train_gpt_emu ] && [ -z "$dp_why" ]; then
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
  [ "$gpus" -ge 2 ] || dp_why="$gpus GPU(s): NCCL needs one per rank"
fi
if [ -n "$dp_why" ]; then
  echo "skip: DP=2 through NCCL ($dp_why)"
else
  timeout -k 10 600 mpirun --oversubscribe -np 2 $CUDA "${ARGS[@]}" --zero-stage 1 --metrics-file "$TMP/dp2.jsonl" >"$TMP/dp2.log" 2>&1 \
    || { fail "DP=2 CUDA run failed"; tail -5 "$TMP/dp2.log"; }
  r=$(compare "$TMP/dp2.jsonl" "$TMP/a.jsonl" 2e-5 2>&1) && ok "DP=2 ZeRO-1 (NCCL backend) = one process ($r)" || fail "DP=2: $r"
fi
finish
