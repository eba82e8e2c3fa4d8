#!/usr/bin/env bash
# Megatron-DeepSpeed's logging flags, each checked against an independent value and absent without
# its flag:
#   --log-params-norm       the JSONL params_norm of the last iteration = the L2 norm of the saved
#                           model.bin computed here in Python (every parameter once); at TP=2 x PP=2
#                           (4 ranks) the same per iteration (the tied embedding's second copy or a
#                           replicated tensor's copies counted again would add their norm);
#   --log-num-zeros-in-grad the gradient's exact zeros = the rows that can get no gradient:
#                           (padded vocabulary - vocabulary) x C word-embedding rows and
#                           (max positions - T) x C position rows (2016 here), also at TP=2 x PP=2
#                           where the vocabulary is padded to 128 x TP rows (Megatron's), 6112 (a
#                           double count there gives more, a missed part less),
#                           plus at most L x C: the key biases' gradients are zero in exact arithmetic
#                           (softmax ignores a shift shared by a query's scores) and some round to an
#                           exact 0, depending on the backend's summation order;
#   tflops                  Megatron's estimate per GPU: divided by the world size, factor 4 under
#                           --checkpoint-activations;
#   --log-{timers,batch-size,validation-ppl}-to-tensorboard and the two above: their TensorBoard tags
#                           (Megatron's names) with the JSONL's values, read back by the independent
#                           reader of test_tensorboard.cpp; none of them in a run without the flags.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
READER=build/test_tensorboard
RUN=("${TINY[@]}" --train-iters 4 --hidden-dropout 0 --attention-dropout 0 --max-position-embeddings 32)
FLAGS=(--log-params-norm --log-num-zeros-in-grad --log-timers-to-tensorboard --log-batch-size-to-tensorboard
       --log-validation-ppl-to-tensorboard --tensorboard-queue-size 5)

$KEEL "${RUN[@]}" "${FLAGS[@]}" --save "$TMP/S" --metrics-file "$TMP/s.jsonl" --tensorboard-dir "$TMP/tb" >"$TMP/s.log" 2>&1 \
  || { fail "single rank: $(tail -2 "$TMP/s.log")"; finish; }
grep -qE "num zeros: 20[0-9]{2}\.0 \| params norm: [0-9.]+ \|" "$TMP/s.log" && ok "log line: num zeros, params norm" || fail "log line lacks num zeros / params norm"
grep -q "note: --tensorboard-queue-size 5 has no effect" "$TMP/s.log" && ok "--tensorboard-queue-size: its note" || fail "no queue-size note"

# zeros: every iteration from 2 on, on one rank and on TP=2 x PP=2; params norm: model.bin and TP x PP
timeout -k 5 120 mpirun -np 4 $KEEL "${RUN[@]}" "${FLAGS[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --metrics-file "$TMP/m.jsonl" >"$TMP/m.log" 2>&1 || fail "TP=2 x PP=2: $(tail -2 "$TMP/m.log")"
python3 - "$TMP/s.jsonl" "$TMP/m.jsonl" "$TMP/S/iter_0000004/model.bin" "$TMP/s.log" "$TMP/m.log" <<'EOF' && ok "num zeros and params norm: independent values, one rank and TP=2 x PP=2" || fail "num zeros / params norm"
import array, json, math, re, sys
one, four = ([json.loads(l) for l in open(f) if '"consumed_samples"' in l] for f in sys.argv[1:3])
V, Vp = map(int, re.search(r"V=(\d+) \(padded (\d+)\)", open(sys.argv[4]).read()).groups())
C, T, maxT = 32, 16, 32
want = (Vp - V) * C + (maxT - T) * C
# at TP=2 the vocabulary is padded as Megatron pads it (to 128 x TP rows): its rows in memory, all
# counted (Megatron's count_zeros counts the padding it holds too)
Vtp = int(re.search(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)", open(sys.argv[5]).read()).group(1))
want_tp = (Vtp - V) * C + (maxT - T) * C
assert len(one) == len(four) == 4, (len(one), len(four))
key_biases = 2 * C  # L x C
for a, b in zip(one, four):
    assert "params_norm" in a and "params_norm" in b, a
    for z, w in ((a["num_zeros"], want), (b["num_zeros"], want_tp)):
        assert w <= z <= w + key_biases, (a["iteration"], a["num_zeros"], b["num_zeros"], want, want_tp)
    assert abs(a["params_norm"] - b["params_norm"]) <= 1e-6 * a["params_norm"], (a["iteration"], a["params_norm"], b["params_norm"])
raw = open(sys.argv[3], "rb").read()
assert raw[:8] == b"KEELCKPT"
w = array.array("f", raw[64:])  # little-endian fp32 (the test machines are)
norm = math.sqrt(math.fsum(x * x for x in w))  # exactly rounded: an order-free reference
got = one[-1]["params_norm"]
assert abs(got - norm) <= 1e-12 * norm, (got, norm)
print(f"zeros {want} (V={V}, padded {Vp}); params norm {got} vs model.bin {norm}")
EOF

# TFLOPs per GPU, Megatron-DeepSpeed's estimate: 24·F·B·s·l·h²·(1 + s/(6h) + Vp/(16·l·h)) over the
# iteration's seconds times the WORLD size (every GPU of TP x PP x DP), F = 4 under
# --checkpoint-activations (the forward runs twice) else 3; recomputed here from each record's own
# elapsed_ms. At TP=2 x PP=2 a divisor of the data-parallel size alone reads 4x too high.
$KEEL "${RUN[@]}" --checkpoint-activations --metrics-file "$TMP/ca.jsonl" >"$TMP/ca.log" 2>&1 || fail "checkpoint-activations run"
python3 - "$TMP/s.jsonl" "$TMP/s.log" 1 3 "$TMP/m.jsonl" "$TMP/m.log" 4 3 "$TMP/ca.jsonl" "$TMP/ca.log" 1 4 <<'PY' \
  && ok "tflops = Megatron's formula over world size (4 ranks at TP=2 x PP=2), factor 4 under --checkpoint-activations" || fail "tflops"
import json, re, sys
a = sys.argv[1:]
L, h, s = 2, 32, 16
for i in range(0, len(a), 4):
    recs = [json.loads(l) for l in open(a[i]) if '"consumed_samples"' in l]
    Vp = int(re.search(r"V=\d+ \(padded (\d+)\)", open(a[i + 1]).read()).group(1))
    world, factor = int(a[i + 2]), int(a[i + 3])
    for r in recs:
        B = r["global_batch_size"]
        flops = 24 * factor * B * s * L * h * h * (1 + s / (6 * h) + Vp / (16 * L * h))
        want = flops / (r["elapsed_ms"] / 1000 * world * 1e12)
        if abs(r["tflops"] - want) > 1e-9 * want:
            sys.exit(f"{a[i]} iteration {r['iteration']}: tflops {r['tflops']} != {want} (world {world}, factor {factor}, Vp {Vp})")
PY

# TensorBoard: each flag's tags with the JSONL's values
$READER "$TMP"/tb/events.out.tfevents.* >"$TMP/scalars" 2>"$TMP/err" || fail "reader: $(cat "$TMP/err")"
value() { grep -oE "\"$1\": [^,}]*" <<<"$2" | head -1 | sed -E "s/^\"$1\": //"; }
expect() {  # TAG STEP WANT: the scalar under TAG at STEP equals WANT as a float
  local got; got=$(awk -F'\t' -v t="$1" -v s="$2" '$3 == t && $1 == s { print $2 }' "$TMP/scalars" | tail -1)
  if [ -n "$got" ] && awk -v a="$got" -v b="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = (b < 0 ? -b : b); exit !(d <= 1e-6 * m + 1e-30) }'; then
    ok "$1 @ $2 = $got"
  else fail "$1 @ $2: got '$got', want $3"; fi
}
while read -r line; do
  it=$(value iteration "$line"); sm=$(value consumed_samples "$line"); tk=$(value consumed_tokens "$line")
  expect "params-norm/params-norm" "$it" "$(value params_norm "$line")"
  expect "params-norm/params-norm vs tokens" "$tk" "$(value params_norm "$line")"
  expect "num-zeros/num-zeros" "$it" "$(value num_zeros "$line")"
  expect "num-zeros/num-zeros vs samples" "$sm" "$(value num_zeros "$line")"
  expect "batch-size/batch-size" "$it" 4
  expect "batch-size/batch-size vs samples" "$sm" 4
  for t in forward-compute-time backward-compute-time optimizer-time iteration-time/iteration-time; do
    awk -F'\t' -v t="$t" -v s="$it" '$3 == t && $1 == s && $2 > 0 { f = 1 } END { exit !f }' "$TMP/scalars" \
      && ok "$t @ $it > 0" || fail "$t @ $it missing or not positive"
  done
done < <(grep '"consumed_samples"' "$TMP/s.jsonl")
while read -r line; do
  expect "lm-loss-validation/lm loss validation ppl" "$(value iteration "$line")" "$(value val_ppl "$line")"
done < <(grep '"val_loss"' "$TMP/s.jsonl")

# without the flags: none of those tags, no params_norm, the log line as before
$KEEL "${RUN[@]}" --metrics-file "$TMP/n.jsonl" --tensorboard-dir "$TMP/tbn" >"$TMP/n.log" 2>&1 || fail "run without flags"
$READER "$TMP"/tbn/events.out.tfevents.* >"$TMP/nscalars" 2>"$TMP/err" || fail "reader: $(cat "$TMP/err")"
stray=$(cut -f3 "$TMP/nscalars" | grep -E "^(params-norm|num-zeros|batch-size|iteration-time)/|validation ppl|-time$" | sort -u | tr '\n' ' ')
[ -z "$stray" ] && grep -qx "lm-loss-training/lm loss" <(cut -f3 "$TMP/nscalars") && ok "no flags: no such tags" || fail "tags without their flags: $stray"
! grep -q "params_norm" "$TMP/n.jsonl" && ! grep -qE "num zeros|params norm" "$TMP/n.log" && ok "no flags: no params_norm, no num zeros / params norm in the line" \
  || fail "no flags: params_norm or num zeros shown"
finish
