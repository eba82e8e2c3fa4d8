#!/usr/bin/env bash
# ZeRO-1 with sharded fp32 master weights on the GPU, on the emulated CUDA trainer and
# NCCL: under bf16 a rank keeps only its shard of the master weights, so every reader of the whole
# fp32 master goes through trainer_whole_master / trainer_master_checksums. Each is held to ZeRO-0
# (where every rank keeps the whole master) bit for bit, and the replica checks must still fire:
#   1. per-layer weight norms, --log-params-norm, checkpoints at 3 and 6, a stop at 3 and a resume (the load takes each
#      rank's shard): ZeRO-1 = ZeRO-0 — records and checkpoint bytes;
#   2. the spike autopilot's rollbacks (snapshots of each rank's shard, restored, the compute copy
#      re-gathered): ZeRO-1 = ZeRO-0, and rollbacks happened;
#   3. PP=2 x DP=2: the tied-embedding check (per-shard checksums added over the data-parallel ranks)
#      passes, and fails when the test hook unties the copies (negative control);
#   4. TP=2 x DP=2: a replicated tensor perturbed on tensor rank 1 is caught by
#      --check-replicated-params-interval, and --sync-tp-duplicated-parameters repairs it.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
CUDA=build/train_gpt_emu
[ -x "$CUDA" ] || { fail "$CUDA not built (make build/train_gpt_emu)"; finish; }
BASE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16 --micro-batch-size 1 --lr 1e-3 --seed 3
      --hidden-dropout 0 --attention-dropout 0 --train-data-path data/brown/brown_train.bin --eval-interval 0 --log-interval 1)
# run NAME RANKS [flags...]: the emulated trainer on RANKS ranks, metrics in $TMP/NAME.jsonl, log $TMP/NAME.log
# (HOOK=VAR=VALUE: a test hook, exported to every rank)
run() {
  local name=$1 np=$2 x=(); shift 2
  [ -n "${HOOK:-}" ] && x=(-x "$HOOK")
  timeout -k 10 600 mpirun --oversubscribe -np "$np" "${x[@]}" $CUDA "${BASE[@]}" --metrics-file "$TMP/$name.jsonl" "$@" >"$TMP/$name.log" 2>&1
}
same_records() { cmp -s <(strip_timing "$TMP/$1.jsonl") <(strip_timing "$TMP/$2.jsonl"); }

# ---- 1. layer norms, checkpoints, resume -----------------------------------------------------------------
ONE=(--train-iters 6 --global-batch-size 4 --log-layer-norms-interval 2 --log-params-norm --save-interval 3)
run z0 2 "${ONE[@]}" --zero-stage 0 --save "$TMP/z0" || fail "ZeRO-0 run: $(tail -2 "$TMP/z0.log")"
run z1a 2 "${ONE[@]}" --zero-stage 1 --save "$TMP/z1" --exit-interval 3 || fail "ZeRO-1 first part: $(tail -2 "$TMP/z1a.log")"
run z1b 2 "${ONE[@]}" --zero-stage 1 --save "$TMP/z1" --load "$TMP/z1" || fail "ZeRO-1 resume: $(tail -2 "$TMP/z1b.log")"
grep -q "ZeRO-1 master weights: this rank keeps parameters" "$TMP/z1a.log" && ok "start-up names the sharded master: $(grep -m1 "ZeRO-1 master weights" "$TMP/z1a.log")" \
  || fail "no start-up line for the sharded master"
grep -q '"layer_weight_norm"' "$TMP/z1b.jsonl" && ok "layer statistics recorded" || fail "no layer statistics in the records"
cat "$TMP/z1a.jsonl" "$TMP/z1b.jsonl" >"$TMP/z1.jsonl"
same_records z1 z0 && ok "ZeRO-1 (stopped at 3, resumed) = ZeRO-0: records, layer norms included" || fail "ZeRO-1 records differ from ZeRO-0"
same_checkpoint "ZeRO-1 vs ZeRO-0 at 3" "$TMP/z1" "$TMP/z0" 3
same_checkpoint "ZeRO-1 resumed vs ZeRO-0 at 6" "$TMP/z1" "$TMP/z0" 6

# ---- 2. spike rollbacks ---------------------------------------------------------------------------------
SPIKE=(--train-iters 6 --global-batch-size 2 --spike-policy rollback --spike-window 2 --spike-zscore 0.5 --spike-snapshot-interval 2
       --spike-max-rollbacks 50)
run s0 2 "${SPIKE[@]}" --zero-stage 0 || fail "ZeRO-0 rollback run: $(tail -2 "$TMP/s0.log")"
run s1 2 "${SPIKE[@]}" --zero-stage 1 || fail "ZeRO-1 rollback run: $(tail -2 "$TMP/s1.log")"
n=$(grep -c '"spike": "rollback"' "$TMP/s1.jsonl")
[ "$n" -ge 1 ] && ok "$n rollback(s) in the ZeRO-1 run" || fail "no rollback happened: the test proves nothing"
same_records s1 s0 && ok "rollbacks: ZeRO-1 = ZeRO-0 (records)" || fail "rollback records differ between ZeRO-1 and ZeRO-0"

# ---- 3. PP=2 x DP=2: the tied embedding ------------------------------------------------------------------
PP=(--train-iters 2 --global-batch-size 4 --pipeline-model-parallel-size 2 --zero-stage 1)
run pp 4 "${PP[@]}" && ok "PP=2 x DP=2 ZeRO-1: the tied-embedding check passes every iteration" || fail "PP x DP run: $(grep -m1 error "$TMP/pp.log")"
HOOK=KEEL_TEST_UNTIE_PIPELINE_EMBEDDING=1 run untie 4 "${PP[@]}"
grep -q "the tied word embedding differs between the first and the last pipeline stage" "$TMP/untie.log" \
  && ok "negative control: untied copies are caught over sharded masters" || fail "untied copies not caught"

# ---- 4. TP=2 x DP=2: replicated tensors ------------------------------------------------------------------
TP=(--train-iters 3 --global-batch-size 2 --tensor-model-parallel-size 2 --zero-stage 1 --check-replicated-params-interval 1)
HOOK=KEEL_TEST_PERTURB_REPLICATED=ln2w:1:2 run drift 4 "${TP[@]}"
grep -q "iteration 2: replicated tensor ln2w of layer 1 differs between tensor-parallel ranks 0 and 1" "$TMP/drift.log" \
  && ok "TP=2 x DP=2 ZeRO-1: planted drift caught" || fail "drift not caught: $(grep -m1 error "$TMP/drift.log")"
HOOK=KEEL_TEST_PERTURB_REPLICATED=ln2w:1:2 run repair 4 "${TP[@]}" --sync-tp-duplicated-parameters \
  && ok "TP=2 x DP=2 ZeRO-1: --sync-tp-duplicated-parameters repairs it" || fail "sync did not repair: $(grep -m1 error "$TMP/repair.log")"
finish
