#!/usr/bin/env bash
# --tensorboard-dir: the trainer's event file, read back by the independent reader of
# test_tensorboard.cpp (framing, CRCs, protobuf), holds the Megatron tags with the JSONL's values:
# each scalar against iterations, consumed samples ("vs samples") and consumed tokens ("vs tokens").
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
READER=build/test_tensorboard
# (the tags Megatron writes only under its flags: num-zeros, iteration-time, batch-size, validation ppl)
$KEEL "${TINY[@]}" --train-iters 6 --fp16 --initial-loss-scale 256 --metrics-file "$TMP/m.jsonl" --tensorboard-dir "$TMP/tb" --log-layer-norms-interval 3 \
  --log-num-zeros-in-grad --log-timers-to-tensorboard --log-batch-size-to-tensorboard --log-validation-ppl-to-tensorboard \
  >"$TMP/log" 2>&1 || { fail "training: $(tail -3 "$TMP/log")"; finish; }
files=("$TMP"/tb/events.out.tfevents.*)
[ ${#files[@]} -eq 1 ] && [ -s "${files[0]}" ] && ok "one event file ${files[0]##*/}" || fail "event files: ${files[*]}"
$READER "${files[0]}" >"$TMP/scalars" 2>"$TMP/err" && ok "every record's framing and CRCs check out" || fail "reader: $(cat "$TMP/err")"

for tag in "lm-loss-training/lm loss" "learning-rate/learning-rate" "batch-size/batch-size" "loss-scale/loss-scale" \
           "grad-norm/grad-norm" "num-zeros/num-zeros" "iteration-time/iteration-time" "iteration-time/samples per second" \
           "iteration-time/tokens per second" "iteration-time/TFLOPs per gpu (estimated)" "steps-vs-samples/y=steps,x=samples" \
           "steps-vs-tokens/y=tokens,x=steps" "lm-loss-validation/lm loss validation" "lm-loss-validation/lm loss validation ppl" \
           "layer-grad-norm/layer 00" "layer-act-rms/layer 01"; do
  grep -qF -x -- "$(printf '%s' "$tag")" <(cut -f3 "$TMP/scalars") && ok "tag '$tag'" || fail "tag '$tag' missing"
done

# value KEY LINE: a number field of a JSONL line
value() { grep -oE "\"$1\": [^,}]*" <<<"$2" | head -1 | sed -E "s/^\"$1\": //"; }
# expect TAG STEP WANT: the scalar under TAG at STEP equals WANT rounded to float (9 significant digits)
expect() {
  [ "$3" = null ] && return  # a non-finite value (an overflow step) is not written
  local got; got=$(awk -F'\t' -v t="$1" -v s="$2" '$3 == t && $1 == s { print $2 }' "$TMP/scalars" | tail -1)
  local want; want=$(awk -v x="$3" 'BEGIN { printf "%.9g", x }')
  if [ -n "$got" ] && awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; m = (b < 0 ? -b : b); exit !(d <= 1e-6 * m + 1e-30) }'; then
    ok "$1 @ $2 = $got"
  else
    fail "$1 @ $2: got '$got', JSONL $want"
  fi
}
while read -r line; do
  it=$(value iteration "$line"); sm=$(value consumed_samples "$line"); tk=$(value consumed_tokens "$line")
  expect "lm-loss-training/lm loss" "$it" "$(value lm_loss "$line")"
  expect "lm-loss-training/lm loss vs samples" "$sm" "$(value lm_loss "$line")"
  expect "lm-loss-training/lm loss vs tokens" "$tk" "$(value lm_loss "$line")"
  expect "learning-rate/learning-rate" "$it" "$(value lr "$line")"
  expect "grad-norm/grad-norm vs tokens" "$tk" "$(value grad_norm "$line")"
  expect "loss-scale/loss-scale" "$it" "$(value loss_scale "$line")"
  expect "steps-vs-tokens/y=steps,x=tokens" "$tk" "$it"
done < <(grep '"consumed_samples"' "$TMP/m.jsonl")
while read -r line; do
  expect "lm-loss-validation/lm loss validation" "$(value iteration "$line")" "$(value val_loss "$line")"
done < <(grep '"val_loss"' "$TMP/m.jsonl")
line=$(grep '^{"iteration": 3, "consumed' "$TMP/m.jsonl")
expect "layer-grad-norm/layer 01" 3 "$(grep -oE '"layer_grad_norm": \[[^]]*\]' <<<"$line" | sed -E 's/.*, ([^]]*)\]/\1/')"

# the LM head's backward runs inside the fused classifier (during gpt_forward) but is backward time, as
# Megatron's timers count it. TINY's head (C 32, V 50257) outweighs its layers: its backward is two
# matmuls of the forward's one, so the backward takes about as long as the forward or longer (measured:
# 0.8 x); counted into the forward, the head's backward made the forward about 10 times the backward.
# The bound, forward < 2 x backward, leaves room for timing noise either way.
sum_tag() { awk -F'\t' -v t="$1" '$3 == t { s += $2 } END { printf "%.6f", s }' "$TMP/scalars"; }
fw=$(sum_tag forward-compute-time); bw=$(sum_tag backward-compute-time)
awk -v f="$fw" -v b="$bw" 'BEGIN { exit !(f > 0 && f < 2 * b) }' && ok "the LM head's backward counts as backward: forward $fw s, backward $bw s" \
  || fail "forward-compute $fw s, backward-compute $bw s: the head's backward counted as forward?"

# without the flag no file; an unusable directory is refused before training
(cd "$TMP" && "$OLDPWD/$KEEL" "${TINY[@]/#data/$OLDPWD/data}" --train-iters 3 >/dev/null 2>&1) && [ -z "$(find "$TMP" -name "events.out*" -newer "$TMP/scalars")" ] && ok "no flag, no event file" || fail "stray event file"
touch "$TMP/not_a_dir"
expect_fail 2 "tensorboard-dir" $KEEL "${TINY[@]}" --train-iters 3 --tensorboard-dir "$TMP/not_a_dir/tb"
# a finished run started again trains nothing and logs nothing: no empty event file beside the real one
$KEEL "${TINY[@]}" --train-iters 3 --save "$TMP/ck" --tensorboard-dir "$TMP/tb2" >"$TMP/r1.log" 2>&1 || fail "run for the rerun"
$KEEL "${TINY[@]}" --train-iters 3 --load "$TMP/ck" --save "$TMP/ck" --tensorboard-dir "$TMP/tb2" >"$TMP/r2.log" 2>&1 || fail "rerun"
n=$(find "$TMP/tb2" -name 'events.out.tfevents.*' | wc -l)
grep -q "^nothing to train" "$TMP/r2.log" && [ "$n" -eq 1 ] && grep -q "tensorboard: nothing was logged; removed the empty" "$TMP/r2.log" \
  && ok "a rerun that trains nothing leaves no empty event file (and says so)" || fail "rerun: $n event files; $(grep tensorboard "$TMP/r2.log")"

finish
