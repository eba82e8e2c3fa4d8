#!/usr/bin/env bash
# --log-layer-norms-interval: the per-layer fields of the JSONL equal the norms dev/layer_norms
# computes on its own from the checkpoints (plain double loops over the parameter table):
#   weight norms of iteration N   vs  the checkpoint of iteration N
#   grad norms, activation RMS of iteration N+1  vs  the checkpoint of N and N+1's batch
# in one process and with 2 data-parallel ranks (the activation sums and gradients cross ranks).
# Also: Σ layer² + embedding² + final² = grad_norm², and the fields appear exactly every N iterations.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RUN=(--num-layers 3 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 --global-batch-size 8
     --lr 3e-3 --seed 7 --train-data-path data/brown/brown_train.bin --train-iters 8
     --hidden-dropout 0 --attention-dropout 0 --log-interval 1)

# field KEY LINE: the value text of KEY in a JSONL line (a number or a [..] array)
field() { grep -oE "\"$1\": (\[[^]]*\]|[^,}]*)" <<<"$2" | head -1 | sed -E "s/^\"$1\": //; s/[][]//g; s/,/ /g"; }
# close A B: every number of A within $TOL (relative) of the same position in B, same count
TOL=1e-9
close() {
  awk -v a="$1" -v b="$2" -v tol="$TOL" 'BEGIN { n = split(a, x, " "); m = split(b, y, " "); if (n != m || n == 0) exit 1;
    for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; s = (x[i] < 0 ? -x[i] : x[i]); if (d > tol * s + 1e-300) exit 1 } }'
}
compare() {  # compare NAME JSONL_LINE TOOL_LINE KEY...
  local name=$1 a=$2 b=$3; shift 3
  for k in "$@"; do
    local va vb; va=$(field "$k" "$a"); vb=$(field "$k" "$b")
    if close "$va" "$vb"; then ok "$name $k: $va"; else fail "$name $k: JSONL [$va] vs checkpoint [$vb]"; fi
  done
}
check_run() {  # check_run NAME LAUNCHER...
  local name=$1; shift
  local dir=$TMP/$name
  "$@" ./train_gpt_cpu "${RUN[@]}" --save "$dir/ck" --save-interval 1 --metrics-file "$dir/m.jsonl" --log-layer-norms-interval 3 \
    >"$dir.log" 2>&1 || { fail "$name: training failed: $(tail -3 "$dir.log")"; return; }
  local with; with=$(grep -c layer_grad_norm "$dir/m.jsonl")
  [ "$with" -eq 2 ] && ok "$name: layer fields on iterations 3 and 6 only" || fail "$name: $with records with layer fields (want 2)"
  for n in 3 6; do
    echo "$n" >"$dir/ck/latest_checkpointed_iteration.txt"
    local tool; tool=$(./layer_norms "${RUN[@]}" --load "$dir/ck" --next-batch 2>&1) || { fail "layer_norms: $tool"; continue; }
    compare "$name it$n weights" "$(grep "^{\"iteration\": $n, \"consumed" "$dir/m.jsonl")" "$tool" \
      layer_weight_norm embedding_weight_norm final_norm_weight_norm
  done
  # iteration 6's gradients and activations come from the checkpoint of 5 and iteration 6's batch
  echo 5 >"$dir/ck/latest_checkpointed_iteration.txt"
  local tool; tool=$(./layer_norms "${RUN[@]}" --load "$dir/ck" --next-batch 2>&1)
  local line; line=$(grep '^{"iteration": 6, "consumed' "$dir/m.jsonl")
  compare "$name it6 from ckpt 5" "$line" "$tool" layer_act_rms embedding_act_rms
  # gradients: one process adds the micro-batches in one fp32 buffer; two ranks add halves, then
  # the reduction adds the halves, so the float roundings differ (well below 1e-6 relative)
  [ "$name" = dp2 ] && TOL=1e-6
  compare "$name it6 from ckpt 5" "$line" "$tool" layer_grad_norm embedding_grad_norm final_norm_grad_norm
  TOL=1e-9
}
mkdir -p "$TMP/single" "$TMP/dp2"
check_run single env
check_run dp2 mpirun --oversubscribe -np 2

# the parts add up to the global grad norm
line=$(grep '^{"iteration": 6, "consumed' "$TMP/single/m.jsonl")
sum=$(awk -v l="$(field layer_grad_norm "$line")" -v e="$(field embedding_grad_norm "$line")" -v f="$(field final_norm_grad_norm "$line")" \
  'BEGIN { n = split(l, x, " "); s = e * e + f * f; for (i = 1; i <= n; i++) s += x[i] * x[i]; printf "%.17g", sqrt(s) }')
close "$sum" "$(field grad_norm "$line")" && ok "sqrt(sum of parts^2) = grad_norm ($sum)" || fail "parts $sum vs grad_norm $(field grad_norm "$line")"
finish
