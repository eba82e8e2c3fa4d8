#!/usr/bin/env bash
# `make gpu-profile`: the GPU trainer's step profile without a GPU. build/train_gpt_emu
# (train_gpt.cu under the CPU emulation of CUDA) runs a fixed small config with KEEL_EMU_PROFILE
# (test/cuda_emu/emu_core.h: what the program asks of the GPU, counted at the CUDA API boundary) for
# N and N+1 iterations; the difference of the two profiles is the steady-state cost of one iteration.
# It is printed next to the model's FLOPs for one iteration, computed from the config:
#   matmuls    6·tokens·(L·12·C² + C·Vp)       QKV 3C², attention-out C², FC 4C², FC-proj 4C², LM head C·Vp
#                                              (forward 2·m·n·k, backward twice that: dinp and dweight)
#   attention  3·L·A·4·B·NH·T·T·hs = 12·L·A·B·T²·C   forward QKᵀ and att·V at full T×T (2·2·B·NH·T²·hs
#                                              per layer and micro-batch), backward twice that
# with tokens = A·B·T (A micro-batches per iteration, one process), Vp the padded vocabulary.
# Verdicts on the step's targets: ≥ 97% of the model FLOPs on tensor cores; 0 allocations after the
# first iteration (the N+1 run against a 1-iteration run); host synchronisations per iteration the
# same with 1 and with 2 micro-batches per iteration. A report, not a test: it exits 0 whatever the
# verdicts, non-zero only if a run fails.
#   bash scripts/gpu_profile.sh [--iters N] [--json FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
N=2 JSON=""
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "error: --iters takes a positive integer" >&2; exit 2; }; N=$2; shift 2 ;;
    --json) [ -n "${2:-}" ] || { echo "error: --json takes a file name" >&2; exit 2; }; JSON=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (usage: $0 [--iters N] [--json FILE])" >&2; exit 2 ;;
  esac
done
TRAINER=build/train_gpt_emu
tmp=$(mktemp -d /tmp/keel_gpu_profile.XXXXXX); trap 'rm -rf "$tmp"' EXIT
make --no-print-directory "$TRAINER" >"$tmp/make.log" 2>&1 || { tail -20 "$tmp/make.log"; echo "error: could not build $TRAINER" >&2; exit 1; }
[ -f data/brown/brown_train.bin ] || make --no-print-directory data

# The config: about GPT-2 124M's ratio of attention to the layers' matmuls (T/C = 1.5; both T/(6C) ≈ 0.25),
# bf16 (the GPU default), 2 micro-batches of 2 per iteration.
L=2 C=128 NH=2 T=192 B=2
CONFIG=(--num-layers $L --hidden-size $C --num-attention-heads $NH --seq-length $T --micro-batch-size $B
        --bf16 --lr 3e-4 --lr-warmup-iters 0 --seed 7 --log-interval 1 --train-data-path data/brown/brown_train.bin
        --hidden-dropout 0 --attention-dropout 0)

# name iterations micro-batches: one profiled run (one thread each: the runs go side by side)
profile_run() {
  local name=$1 iters=$2 accum=$3
  KEEL_EMU_PROFILE="$tmp/$name.json" OMP_NUM_THREADS=1 timeout -k 10 3600 "$TRAINER" "${CONFIG[@]}" \
    --global-batch-size $((B * accum)) --train-iters "$iters" >"$tmp/$name.log" 2>&1 \
    || { echo "error: the $name run ($iters iterations, $accum micro-batches) failed:" >&2; tail -5 "$tmp/$name.log" >&2; return 1; }
}
RUNS=("a2_n1 $((N + 1)) 2" "a2_n $N 2" "a1_n1 $((N + 1)) 1" "a1_n $N 1")
[ "$N" -gt 1 ] && RUNS+=("a2_first 1 2")  # with N = 1 the N run is the 1-iteration run
echo "gpu-profile: $TRAINER, L=$L C=$C NH=$NH T=$T B=$B bf16; ${#RUNS[@]} runs of $N and $((N + 1)) iterations, $(nproc) at a time (a few minutes)..."
start=$(date +%s) failed=0 running=0
for r in "${RUNS[@]}"; do
  if [ $running -ge "$(nproc)" ]; then wait -n || failed=1; running=$((running - 1)); fi
  # shellcheck disable=SC2086
  profile_run $r &
  running=$((running + 1))
done
while [ $running -gt 0 ]; do wait -n || failed=1; running=$((running - 1)); done
[ $failed -eq 0 ] || exit 1
[ "$N" -gt 1 ] || cp "$tmp/a2_n.json" "$tmp/a2_first.json"
VP=$(grep -o 'padded [0-9]*' "$tmp/a2_n1.log" | grep -o '[0-9]*' | head -1)
[ -n "$VP" ] || { echo "error: no padded vocabulary size in the trainer's log" >&2; exit 1; }

python3 - "$tmp" "$N" "$L" "$C" "$NH" "$T" "$B" "$VP" "$(( $(date +%s) - start ))" "$JSON" <<'PY'
import json, sys
tmp, N, L, C, NH, T, B, Vp, secs, out = sys.argv[1], *map(int, sys.argv[2:10]), sys.argv[10]
A = 2  # micro-batches per iteration in the main runs
prof = {name: json.load(open(f"{tmp}/{name}.json")) for name in ("a2_n1", "a2_n", "a1_n1", "a1_n", "a2_first")}

def diff(a, b):  # a − b, recursively over the profile's numbers
    if isinstance(a, dict):
        return {k: diff(a.get(k, 0), b.get(k, 0) if isinstance(b, dict) else 0) for k in set(a) | set(b if isinstance(b, dict) else {})}
    return a - b
it = diff(prof["a2_n1"], prof["a2_n"])    # one steady-state iteration, 2 micro-batches
it1 = diff(prof["a1_n1"], prof["a1_n"])   # the same with 1 micro-batch

tokens = A * B * T
hs = C // NH
linear = 6 * tokens * L * 12 * C * C
lm_head = 6 * tokens * C * Vp
attention = 3 * L * A * 4 * B * NH * T * T * hs
model = linear + lm_head + attention
tc = it["tensor_core_flops"] + it["mma_flops"]
share = tc / model
share_no_head = (tc - lm_head) / (model - lm_head)  # assumes the LM head's GEMMs run on tensor cores (bf16)
allocs_after_first = prof["a2_n1"]["allocations"] - prof["a2_first"]["allocations"]
G = 1e9
def mib(x): return f"{x / 2**20:.2f} MiB"

W = 40
def row(label, text): print(f"{label:<{W}} {text}")
print(f"\n== GPU step profile (emulated, counted at the CUDA API boundary): one iteration = run({N + 1}) − run({N}) ==")
print(f"config: L={L} C={C} NH={NH} T={T} B={B}, {A} micro-batches/iteration ({tokens} tokens), bf16, vocabulary padded to {Vp}")
print("model FLOPs/iteration, from the config (tokens = A·B·T, hs = C/NH; forward 2·m·n·k, backward twice that):")
row("  matmuls    6·tokens·L·12·C²", f"{linear / G:9.3f} GFLOP ({100 * linear / model:5.1f}%)  QKV, attention-out, FC, FC-proj")
row("  LM head    6·tokens·C·Vp", f"{lm_head / G:9.3f} GFLOP ({100 * lm_head / model:5.1f}%)")
row("  attention  3·L·A·4·B·NH·T²·hs", f"{attention / G:9.3f} GFLOP ({100 * attention / model:5.1f}%)  QKᵀ and att·V at full T×T")
row("  total", f"{model / G:9.3f} GFLOP")
row("tensor-core FLOPs/iteration", f"{tc / G:9.3f} GFLOP = {100 * share:.1f}% of model FLOPs "
    f"(cuBLASLt bf16/fp16 {it['tensor_core_flops'] / G:.3f} + warp MMA {it['mma_flops'] / G:.3f})")
row("  without the LM head", f"{100 * share_no_head:.1f}% of the other model FLOPs (the LM head, {100 * lm_head / model:.0f}% "
    f"of this config's FLOPs at C={C} with GPT-2's vocabulary, counted as on tensor cores)")
row("gemm FLOPs/iteration", f"{it['gemm_flops'] / G:9.3f} GFLOP in {it['gemm_calls']} cublasLtMatmul calls "
    f"({100 * it['gemm_flops'] / model:.1f}% of model FLOPs)")
row("launches/iteration", f"{it['launches']}; top 10 by launches:")
top = sorted(((v, k) for k, v in it["launches_by_kernel"].items() if v), key=lambda x: (-x[0], x[1]))[:10]
for v, k in top:
    row("", f"{v:6d}  {k}")
row("syncs/iteration", f"{it['syncs']} ({it['sync_calls']} synchronize calls + {it['d2h_copies']} blocking device→host copies)")
row("  with 1 micro-batch/iteration", f"{it1['syncs']} ({it1['sync_calls']} + {it1['d2h_copies']})")
row("allocations/iteration", f"{it['allocations']} cudaMalloc ({mib(it['alloc_bytes'])}), {it['frees']} cudaFree")
row("allocations after the first iteration", f"{allocs_after_first} (iterations 2..{N + 1})")
row("peak device memory", f"{mib(prof['a2_n1']['peak_device_bytes'])} (arena high-water mark, {N + 1}-iteration run)")
row("bytes moved/iteration", f"h2d {mib(it['h2d_bytes'])} ({it['h2d_copies']} copies), d2h {mib(it['d2h_bytes'])}, "
    f"d2d {mib(it['d2d_bytes'])}, memset {mib(it['memset_bytes'])} ({it['memsets']} calls)")
row("NCCL/iteration", f"{it['nccl_calls']} calls, {mib(it['nccl_bytes'])} (one process: no communicator)")

# The flash kernels' warp MMA against FlashAttention-2's count: per layer and micro-batch, 2 products
# forward and 5 backward on each causal tile pair (64-query by 64-key tiles with a key ≤ a query),
# 2·64·64·hs FLOPs each. (Under the GEMM path mma_flops is 0 and the line says so.)
nt = (T + 63) // 64
fa2 = L * A * B * NH * (nt * (nt + 1) // 2) * 7 * 2 * 64 * 64 * hs
mma_ratio = it["mma_flops"] / fa2
row("flash MMA FLOPs/iteration", f"{it['mma_flops'] / G:9.3f} GFLOP = {mma_ratio:.3f}× FlashAttention-2's {fa2 / G:.3f} "
    f"(7 products per causal 64×64 tile pair)" if it["mma_flops"] else "0 (the GEMM attention path)")

targets = [
    ("flash products", 0 < mma_ratio <= 1.05, f"flash MMA FLOPs {mma_ratio:.3f}× FlashAttention-2's count (target ≤ 1.05)"),
    ("tensor cores", share >= 0.97, f"{100 * share:.1f}% of model FLOPs on tensor cores (target ≥ 97%; "
     f"without the LM head {100 * share_no_head:.1f}%)"),
    ("allocations", allocs_after_first == 0, f"{allocs_after_first} allocations after the first iteration (target 0)"),
    ("syncs", it["syncs"] == it1["syncs"], f"syncs/iteration {it['syncs']} with 2 micro-batches, {it1['syncs']} with 1 (target: equal)"),
]
print()
for name, met, text in targets:
    print(f"verdict: {'MET    ' if met else 'NOT MET'}  {text}")
print(f"({secs} s; a report: the verdicts do not change the exit status)")

if out:
    figures = {
        "config": {"L": L, "C": C, "NH": NH, "T": T, "B": B, "micro_batches": A, "Vp": Vp, "precision": "bf16", "iterations": [N, N + 1]},
        "model_flops": {"matmuls": linear, "lm_head": lm_head, "attention": attention, "total": model},
        "per_iteration": it,
        "per_iteration_1_micro_batch": it1,
        "tensor_core_share": share,
        "flash_mma_vs_fa2": mma_ratio,
        "tensor_core_share_without_lm_head": share_no_head,
        "allocations_after_first_iteration": allocs_after_first,
        "peak_device_bytes": prof["a2_n1"]["peak_device_bytes"],
        "verdicts": {name: met for name, met, _ in targets},
    }
    with open(out, "w") as f:
        json.dump(figures, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"figures written to {out}")
PY
