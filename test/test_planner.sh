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
# ---- the verdict: the run's own partition, the reserve beside the model, suggestions that help
# 104B: 30.30 GiB of model + 0.50 GiB CUDA context + 6 NCCL communicators x 128 MiB = 31.55 GiB
expect "reserve: context + 6 communicators" "$($KEEL --dry-run "${B104[@]}" --gpu-memory-gb 32)" \
  "reserved per rank: CUDA context 0.50 GiB (assumed) + NCCL buffers 0.75 GiB (6 communicators"
$KEEL --dry-run "${B104[@]}" --gpu-memory-gb 31 >"$TMP/b104_31" ; rc=$?
[ $rc -eq 1 ] && grep -q "30.30 GiB (pipeline stage 0, 1 layers) + 1.25 GiB reserved = 31.55 GiB of 31 GiB (--gpu-memory-gb): does NOT fit" "$TMP/b104_31" \
  && ok "104B: the model alone fits 31 GiB, with the reserve it does not (exit 1)" || fail "104B at 31 GiB: exit $rc, $(grep '^total' "$TMP/b104_31")"
out=$($KEEL --dry-run "${G124[@]}")
expect "one process: the CUDA context only" "$out" "reserved per rank: CUDA context 0.50 GiB (assumed) + NCCL buffers 0.00 GiB (0 communicators"
# BLOOM's layout (TP 4, PP 12, DP 8): --pp-partition-method counts the embeddings as layers, so the first
# stage holds 5 transformer layers instead of 6, and both the estimate and the exact count drop
BL=("${B176[@]}" --micro-batch-size 2 --global-batch-size 2048 --tensor-model-parallel-size 4 --pipeline-model-parallel-size 12
    --data-parallel-size 8 --zero-stage 1 --checkpoint-activations --bf16)
even=$($KEEL --dry-run "${BL[@]}"); part=$($KEEL --dry-run "${BL[@]}" --pp-partition-method 'type:transformer|embedding')
est() { sed -nE 's/^total per rank: ([0-9]+) bytes.*/\1/p' <<<"$1"; }
exact() { sed -nE 's/^gpu allocations: total ([0-9]+) bytes.*/\1/p' <<<"$1"; }
grep -q "(pipeline stage 0, 6 layers)" <<<"$even" && grep -q "(pipeline stage 0, 5 layers)" <<<"$part" \
  && [ "$(est "$part")" -lt "$(est "$even")" ] && [ "$(exact "$part")" -lt "$(exact "$even")" ] \
  && ok "176B: the partition method's split in the estimate ($(est "$even") -> $(est "$part")) as in the exact count ($(exact "$even") -> $(exact "$part"))" \
  || fail "176B partition: estimate $(est "$even") -> $(est "$part"), exact $(exact "$even") -> $(exact "$part")"
out=$($KEEL --dry-run "${BL[@]}" --gpu-memory-gb 40); rc=$?
hint=$(grep -A1 '^total per rank' <<<"$out" | tail -1)
[ $rc -eq 1 ] && grep -q -- "--optimizer adam8bit" <<<"$hint" && grep -q -- "--micro-batch-size 1" <<<"$hint" \
  && ! grep -q -- "--zero-stage 1\|--checkpoint-activations\|pipeline-model-parallel-size" <<<"$hint" \
  && ok "176B at 40 GiB: suggests only what is off and lowers it:$hint" || fail "176B hint (exit $rc): $hint"
hint=$($KEEL --dry-run "${B104[@]}" --zero-stage 0 --gpu-memory-gb 20 | grep -A1 '^total per rank' | tail -1)
grep -q -- "--zero-stage 1 (" <<<"$hint" && ok "ZeRO-0 at DP 8: --zero-stage 1 suggested" || fail "ZeRO-0 hint: $hint"
hint=$($KEEL --dry-run "${G124[@]}" --gpu-memory-gb 1 | grep -A1 '^total per rank' | tail -1)
grep -q -- "--zero-stage" <<<"$hint" && fail "DP 1: --zero-stage suggested (it shards over nothing): $hint" || ok "DP 1: no ZeRO suggestion:$hint"
expect_usage_error() { # name, expected message part, flags...
  local name=$1 msg=$2; shift 2
  local err; err=$($KEEL "$@" 2>&1 >/dev/null); local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$msg" <<<"$err"; then ok "$name"; else fail "$name: exit $rc, '$err'"; fi
}
expect_usage_error "heads not divisible by T" "not divisible by --tensor-model-parallel-size" --dry-run "${G124[@]}" --tensor-model-parallel-size 5
expect_usage_error "more stages than layers" "exceeds --num-layers" --dry-run "${G124[@]}" --pipeline-model-parallel-size 13
expect_usage_error "training at TP=2 needs 2 ranks" "1 launched ranks are not divisible by --tensor-model-parallel-size 2" "${TINY[@]}" --train-iters 1 --tensor-model-parallel-size 2
finish
