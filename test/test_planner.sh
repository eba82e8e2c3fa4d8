#!/usr/bin/env bash
# --dry-run (llmc/planner.h) against hand-computed values:
#   GPT-2 124M: 124,439,808 parameters (124,475,904 padded to 50304), the logbooks' formula equal;
#   104B (L32 h16384 s2048 V50257) at TP=4 PP=32 DP=8 ZeRO-1, micro-batch 1, GBS 2048, checkpointing:
#     formula 103,943,028,736 = the table's real count; busiest stage (first: 1 layer + wte/4 + wpe)
#     3h²+7.75h + 50304·h/4 + 2048·h = 1,045,032,960 parameters; bytes (2+4+4/8+8/8)·N = 7,837,747,200;
#     activations 32 in flight × (2·s·h + s·h·(10+24/4+5·32·2048/(16384·4))) = 24,696,061,952;
#     total 32,533,809,152 bytes — fits 32 GiB, not 30;
#   176B (BLOOM: L70 h14336 heads112 V250880, ALiBi, embedding LayerNorm): 176,247,271,424, and the
#     formula (which counts s·h positions and no embedding LayerNorm) 176,276,602,880.
# Plus the errors: heads not divisible by T, more stages than layers, training with TP > 1.
source "$(dirname "$0")/lib.sh"
G124=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --micro-batch-size 4)
B104=(--num-layers 32 --hidden-size 16384 --num-attention-heads 32 --seq-length 2048 --micro-batch-size 1 --global-batch-size 2048
      --tensor-model-parallel-size 4 --pipeline-model-parallel-size 32 --data-parallel-size 8 --zero-stage 1 --checkpoint-activations)
B176=(--num-layers 70 --hidden-size 14336 --num-attention-heads 112 --seq-length 2048 --vocab-size 250880
      --position-embedding-type alibi --embed-layernorm --micro-batch-size 1)
expect() { # name, output, fixed string
  if grep -qF -- "$3" <<<"$2"; then ok "$1"; else fail "$1: '$3' not in output"; echo "$2"; fi
}
out=$($KEEL --dry-run "${G124[@]}"); rc=$?
expect "124M parameters" "$out" "parameters: 124439808 (124475904 with vocabulary padding); formula n(12h^2+13h)+vh+sh+2h = 124439808"
[ $rc -eq 0 ] && ok "124M fits 80 GiB (exit 0)" || fail "124M dry run exit $rc"
out=$($KEEL --dry-run "${B104[@]}" --gpu-memory-gb 32); rc=$?
expect "104B parameters = formula" "$out" "parameters: 103943028736 (103943798784 with vocabulary padding); formula n(12h^2+13h)+vh+sh+2h = 103943028736"
expect "104B busiest stage" "$out" "one TP rank): 1045032960 parameters"
expect "104B total per rank" "$out" "total per rank: 32533809152 bytes"
expect "104B verdict" "$out" "fits"
[ $rc -eq 0 ] && ok "104B fits 32 GiB (exit 0)" || fail "104B at 32 GiB: exit $rc"
$KEEL --dry-run "${B104[@]}" --gpu-memory-gb 30 >/dev/null; rc=$?
[ $rc -eq 1 ] && ok "104B does not fit 30 GiB (exit 1)" || fail "104B at 30 GiB: exit $rc, expected 1"
out=$($KEEL --dry-run "${B104[@]}" --optimizer adam8bit --gpu-memory-gb 32)
grep -qE '8-bit Adam state \(ZeRO-1 shard\) +0\.254 ' <<<"$out" && ok "8-bit state: (2 + 8/256)/8 bytes/param under ZeRO-1" \
  || fail "8-bit state row: $(grep '8-bit' <<<"$out")"
out=$($KEEL --dry-run "${B176[@]}")
expect "176B parameters and formula" "$out" "parameters: 176247271424 (176247271424 with vocabulary padding); formula n(12h^2+13h)+vh+sh+2h = 176276602880"
expect_usage_error() { # name, expected message part, flags...
  local name=$1 msg=$2; shift 2
  local err; err=$($KEEL "$@" 2>&1 >/dev/null); local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$msg" <<<"$err"; then ok "$name"; else fail "$name: exit $rc, '$err'"; fi
}
expect_usage_error "heads not divisible by T" "not divisible by --tensor-model-parallel-size" --dry-run "${G124[@]}" --tensor-model-parallel-size 5
expect_usage_error "more stages than layers" "exceeds --num-layers" --dry-run "${G124[@]}" --pipeline-model-parallel-size 13
expect_usage_error "training at TP=2 needs 2 ranks" "1 launched ranks are not divisible by --tensor-model-parallel-size 2" "${TINY[@]}" --train-iters 1 --tensor-model-parallel-size 2
finish
