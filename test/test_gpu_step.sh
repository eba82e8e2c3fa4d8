#!/usr/bin/env bash
# The GPU step's structure and memory, proven on the emulated CUDA trainer's profile
# (KEEL_EMU_PROFILE, test/cuda_emu/emu_core.h) — the step's targets, asserted:
#   1. --dry-run counts every byte the GPU trainer allocates: its "gpu allocations" total equals the
#      bytes the emulated trainer asked cudaMalloc for (alloc_bytes, exactly), and the arena's peak
#      within its 256-byte rounding per allocation — bf16, --fp32, --optimizer adam8bit,
#      --checkpoint-activations with ALiBi and dropout, and data parallel with ZeRO-1 on 2 ranks
#      (the largest shard's rank);
#   2. one steady-state iteration (the profile of 3 iterations minus that of 2):
#      - 0 allocations (all scratch reserved at set-up);
#      - every matrix product on the tensor cores (bf16), and exactly the model's FLOPs: the linear
#        layers 6·tokens·(L·12·C² + C·Vp) plus attention at full T×T, 12·L·B·T²·C per micro-batch
#        (the attention products are cuBLASLt GEMMs now, not CUDA-core loops);
#      - host synchronisations independent of the number of micro-batches (1 vs 2 per iteration:
#        the losses are read back once per iteration);
#      - one memset, of the position table's gradient (maxT·C fp32, zeroed before the positions'
#        scatter adds into it), with 1 or 2 micro-batches: the parameter gradients are written by
#        their first op (llmc/model.h gpt_grads_begin), as are the LM head's and the final
#        LayerNorm's input gradients — a zero-fill of the gradient buffer (4 bytes a parameter) or
#        of an activation gradient per micro-batch shows here;
#      - every residual add of the forward in one pass with the LayerNorm after it (LN2, the next
#        layer's LN1, the final LayerNorm: 2·L launches per micro-batch), no lone residual add, and one
#        lone LayerNorm per micro-batch (layer 0's LN1);
#   3. --gelu-fusion (cuda/matmul.cuh's GeLU epilogues): the fp32 run fused (on) and unfused (off)
#      agree within 1e-6 relative (loss, grad norm), and the fused run's profile is the unfused one's
#      less exactly the GeLU kernels — 2 launches per layer and micro-batch (forward, backward), none
#      left — and less the backward's two (B·T, 4C) memsets per layer and micro-batch, with the same
#      GEMM calls and FLOPs; each log names its path.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
CUDA=build/train_gpt_emu
[ -x "$CUDA" ] || { fail "$CUDA not built (make build/train_gpt_emu)"; finish; }
unset KEEL_EMU_PROFILE
L=2 C=64 NH=4 T=64 B=2
BASE=(--num-layers $L --hidden-size $C --num-attention-heads $NH --seq-length $T --micro-batch-size $B --lr 1e-3 --seed 3
      --train-data-path data/brown/brown_train.bin --valid-data-path data/brown/brown_val.bin --eval-interval 0 --log-interval 1 --hidden-dropout 0 --attention-dropout 0)

# profiled NAME ITERS GBS [flags...]: runs the emulated trainer, profile in $TMP/NAME.json, JSONL in $TMP/NAME.jsonl
profiled() {
  local name=$1 iters=$2 gbs=$3; shift 3
  KEEL_EMU_PROFILE="$TMP/$name.json" $CUDA "${BASE[@]}" --train-iters "$iters" --global-batch-size "$gbs" "$@" \
    --metrics-file "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1 ||
    { fail "$name: the trainer failed"; tail -5 "$TMP/$name.log"; }
}
# dry NAME GBS [flags...]: the planner's exact GPU total for the same flags
dry() {
  local name=$1 gbs=$2; shift 2
  $KEEL --dry-run "${BASE[@]}" --global-batch-size "$gbs" "$@" >"$TMP/$name.dry" 2>&1
  sed -nE 's/^gpu allocations: total ([0-9]+) bytes.*/\1/p' "$TMP/$name.dry"
}
# memory NAME PROFILE_JSON DRY_TOTAL
memory() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
name, path, dry = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = json.load(open(path))
asked, peak, n = p["alloc_bytes"], p["peak_device_bytes"], p["allocations"]
print(f"{name}: --dry-run {dry} bytes, trainer asked {asked} in {n} allocations, peak {peak}")
ok = asked == dry and dry <= peak <= dry + 256 * n
sys.exit(0 if ok else 1)
PY
}

# ---- 1. --dry-run against the trainer's allocations ----------------------------------------------
profiled bf16_2 2 4 &
profiled bf16_3 3 4 &
wait
profiled mb1_2 2 2 &
profiled mb1_3 3 2 &
wait
profiled fp32 1 4 --fp32 --gelu-fusion on &
profiled adam8bit 1 4 --optimizer adam8bit &
wait
KNOBS=(--checkpoint-activations --position-embedding-type alibi --attention-dropout 0.1 --hidden-dropout 0.1)
profiled knobs 1 4 "${KNOBS[@]}" &
profiled fp32_gelu_off 1 4 --fp32 --gelu-fusion off &
wait
KEEL_EMU_PROFILE="$TMP/dp.json" mpirun --oversubscribe -np 2 $CUDA "${BASE[@]}" --train-iters 1 --global-batch-size 4 --zero-stage 1 \
  >"$TMP/dp.log" 2>&1 || { fail "DP=2 ZeRO-1 run failed"; tail -5 "$TMP/dp.log"; }

for run in "bf16_2 4" "fp32 4 --fp32 --gelu-fusion on" "adam8bit 4 --optimizer adam8bit"; do
  set -- $run
  name=$1 gbs=$2; shift 2
  total=$(dry "$name" "$gbs" "$@")
  [ -n "$total" ] || { fail "$name: no 'gpu allocations' line in --dry-run"; cat "$TMP/$name.dry"; continue; }
  memory "$name" "$TMP/$name.json" "$total" && ok "$name: --dry-run counts every byte the GPU trainer allocates" || fail "$name: --dry-run vs the trainer"
done
total=$(dry knobs 4 "${KNOBS[@]}")
memory knobs "$TMP/knobs.json" "$total" && ok "checkpointing, ALiBi, dropout: --dry-run exact" || fail "knobs: --dry-run vs the trainer"
total=$(dry dp 4 --data-parallel-size 2 --zero-stage 1)
big=$(python3 -c "import json,sys; print(max(range(2), key=lambda r: json.load(open(f'$TMP/dp.json.{r}'))['alloc_bytes']))")
memory "DP=2 ZeRO-1 rank $big" "$TMP/dp.json.$big" "$total" && ok "DP=2 ZeRO-1: --dry-run exact for the largest shard" || fail "DP=2 ZeRO-1: --dry-run vs the trainer"

# ---- 2. one steady-state iteration ------------------------------------------------------------------
VP=$(sed -nE 's/.*V=[0-9]+ \(padded ([0-9]+)\).*/\1/p' "$TMP/bf16_2.log" | head -1)
python3 - "$TMP" $L $C $T $B "${VP:-0}" <<'PY' && ok "one iteration: no allocation, every product on tensor cores and exactly the model's FLOPs, syncs independent of micro-batches, one memset (the position gradient's), every residual add fused into the LayerNorm after it" || fail "steady-state structure"
import json, sys
tmp, L, C, T, B, Vp = sys.argv[1], *map(int, sys.argv[2:])
load = lambda n: json.load(open(f"{tmp}/{n}.json"))
def delta(a, b):
    x, y = load(a), load(b)
    return {k: y[k] - x[k] for k in y if isinstance(y[k], int)}
it2, it1 = delta("bf16_2", "bf16_3"), delta("mb1_2", "mb1_3")  # 2 and 1 micro-batches per iteration
bad = 0
def check(what, good):
    global bad
    print(("ok  " if good else "FAIL") + " " + what)
    bad += not good
tokens = 2 * B * T  # 2 micro-batches
model = 6 * tokens * (L * 12 * C * C + C * Vp) + 12 * L * 2 * B * T * T * C
check(f"Vp read from the log: {Vp}", Vp > 0)
check(f"allocations after the first iterations: {it2['allocations']} (0)", it2["allocations"] == 0 and it2["alloc_bytes"] == 0)
check(f"GEMM FLOPs per iteration {it2['gemm_flops']} = the model's {model}", it2["gemm_flops"] == model)
check(f"tensor-core FLOPs {it2['tensor_core_flops']} = all GEMM FLOPs", it2["tensor_core_flops"] == it2["gemm_flops"])
check(f"syncs per iteration: {it2['syncs']} with 2 micro-batches, {it1['syncs']} with 1", it2["syncs"] == it1["syncs"])
wpe = T * C * 4  # the position table's gradient (maxT = T here)
check(f"memsets per iteration: {it2['memsets']} of {it2['memset_bytes']} bytes with 2 micro-batches, {it1['memsets']} of "
      f"{it1['memset_bytes']} with 1 (1 of {wpe}: the position table's gradient only)",
      it2["memsets"] == it1["memsets"] == 1 and it2["memset_bytes"] == it1["memset_bytes"] == wpe)
# every residual add of the forward in one pass with the LayerNorm after it (LN2, the next layer's LN1,
# the final LayerNorm): per micro-batch 2·L fused launches, one plain LayerNorm (layer 0's LN1), no lone residual add
k2, k3 = load("bf16_2")["launches_by_kernel"], load("bf16_3")["launches_by_kernel"]
kd = {k: k3.get(k, 0) - k2.get(k, 0) for k in set(k2) | set(k3)}
# (a kernel's instantiations by name as launched: layernorm_forward_kernel<F, K, true> and <F, 1, false>)
fused, plain, lone = (sum(v for k, v in kd.items() if k.startswith(f"{n}_kernel<")) for n in ("residual_layernorm_forward", "layernorm_forward", "residual_forward"))
check(f"forward per iteration (2 micro-batches): {fused} residual + LayerNorm passes (2·L·2 = {4 * L}), {plain} lone LayerNorms (2), "
      f"{lone} lone residual adds (0)", fused == 4 * L and plain == 2 and lone == 0)
print(f"launches per iteration: {it2['launches']} (2 micro-batches), {it1['launches']} (1)")
sys.exit(1 if bad else 0)
PY

# ---- 3. --gelu-fusion on against off ---------------------------------------------------------------
grep -q "^gelu fusion: forward and backward" "$TMP/fp32.log" && grep -q "^gelu fusion: off" "$TMP/fp32_gelu_off.log" \
  && ok "the logs name the GeLU path (on: fused both ways; off)" || fail "gelu fusion lines: $(grep -h '^gelu fusion' "$TMP"/fp32*.log)"
r=$(compare_jsonl "$TMP/fp32.jsonl" "$TMP/fp32_gelu_off.jsonl" 1e-6 2>&1) \
  && ok "fp32: --gelu-fusion on = off within 1e-6 ($r)" || fail "fp32 --gelu-fusion on vs off: $r"
python3 - "$TMP" $L $C $T $B <<'PY' && ok "--gelu-fusion on: the GeLU kernels and the backward's memsets gone, the same GEMMs" || fail "gelu fusion profile"
import json, sys
tmp, L, C, T, B = sys.argv[1], *map(int, sys.argv[2:])
on, off = (json.load(open(f"{tmp}/{n}.json")) for n in ("fp32", "fp32_gelu_off"))
A = 2  # micro-batches (global batch 4 of micro-batch 2)
gelu = ("activation_forward_kernel<F, Op>", "activation_backward_kernel<F, Op>")
bad = 0
def check(what, good):
    global bad
    print(("ok  " if good else "FAIL") + " " + what)
    bad += not good
k_on, k_off = on["launches_by_kernel"], off["launches_by_kernel"]
check(f"off: GeLU kernels {[k_off.get(k, 0) for k in gelu]} = L·A = {L * A} each", all(k_off.get(k, 0) == L * A for k in gelu))
check(f"on: GeLU kernels {[k_on.get(k, 0) for k in gelu]} = 0", all(k_on.get(k, 0) == 0 for k in gelu))
check(f"launches {on['launches']} = off's {off['launches']} − 2·L·A", on["launches"] == off["launches"] - 2 * L * A)
check(f"memsets {on['memsets']} = off's {off['memsets']} − 2·L·A", on["memsets"] == off["memsets"] - 2 * L * A)
saved = 2 * L * A * B * T * 4 * C * 4  # d_act and d_pre (B·T, 4C) fp32, per layer and micro-batch
check(f"memset bytes {on['memset_bytes']} = off's {off['memset_bytes']} − {saved}", on["memset_bytes"] == off["memset_bytes"] - saved)
check(f"GEMM calls {on['gemm_calls']} and FLOPs {on['gemm_flops']} = off's", on["gemm_calls"] == off["gemm_calls"] and on["gemm_flops"] == off["gemm_flops"])
sys.exit(1 if bad else 0)
PY
finish
