#!/usr/bin/env bash
# Data parallelism and ZeRO-1 under `mpirun --oversubscribe` (docs/internals.md#determinism, #parallelism):
#   1. ZeRO-1 ≡ ZeRO-0 at DP=2 and DP=4, with gradient accumulation, for adam and adam8bit:
#      identical records and checkpoint bytes;
#   2. DP=2 and DP=4 vs one process on the same global batch (dropout on): the first step's loss is
#      identical, every loss and grad norm within 1e-5 relative (the gradient sums are added in
#      another order, so bits may differ after the first update), the norm is not DP times larger;
#   3. bit-exact resume at DP=2 with ZeRO-1;
#   4. reshard: a DP=4 ZeRO-1 checkpoint loaded at DP=2 ZeRO-0 and at DP=1 and written again is
#      byte-identical, and training continues from it;
#   5. --gradient-predivide-factor acts under DP; --fp16's overflow verdict is agreed over ranks;
#      bad layouts and ranks started with different flags fail before any work.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
command -v mpirun >/dev/null || { fail "mpirun not found (scripts/setup.sh installs OpenMPI)"; finish; }
N=4
MPI=(mpirun --oversubscribe -np)
# gbs 16 = micro-batch 2 × DP × accumulation: 8 accumulation steps at DP=1, 4 at DP=2, 2 at DP=4
DPARGS=("${TINY[@]}" --global-batch-size 16 --train-iters $N)
run() {  # name np args...: a run whose JSONL lands in $TMP/name.jsonl
  local name=$1 np=$2; shift 2
  timeout -k 10 300 "${MPI[@]}" "$np" $KEEL "$@" --metrics-file "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1 \
    || { fail "$name: run failed"; tail -8 "$TMP/$name.log"; }
}
same_run() {  # a b: identical records and final checkpoint bytes
  cmp -s <(strip_timing "$TMP/$1.jsonl") <(strip_timing "$TMP/$2.jsonl") || { fail "$1 vs $2: records differ"; return; }
  for f in model.bin optimizer.bin state.txt; do
    cmp -s "$TMP/$1/iter_000000$N/$f" "$TMP/$2/iter_000000$N/$f" || { fail "$1 vs $2: $f differs"; return; }
  done
  ok "$1 = $2: every record and checkpoint byte identical"
}

# 1. ZeRO-1 ≡ ZeRO-0
for np in 2 4; do
  for opt in adam adam8bit; do
    extra=(--optimizer $opt); [ $opt = adam8bit ] && extra+=(--adam8bit-min-size 1024)
    for z in 0 1; do run "dp${np}_${opt}_z$z" $np "${DPARGS[@]}" "${extra[@]}" --zero-stage $z --save "$TMP/dp${np}_${opt}_z$z"; done
    same_run "dp${np}_${opt}_z0" "dp${np}_${opt}_z1"
  done
done
grep -q "data-parallel ranks: 4 | ZeRO stage 1" "$TMP/dp4_adam_z1.log" && grep -q "ZeRO-1: this rank holds" "$TMP/dp4_adam_z1.log" \
  && ok "start-up shows the layout and rank 0's state bytes: $(grep -o 'ZeRO-1: this rank holds.*' "$TMP/dp4_adam_z1.log")" \
  || fail "no ZeRO-1 memory line"

# fp16 emulation under DP: rounding and the overflow check run on each rank's shard, the verdict is
# agreed over ranks (an inf planted on rank 0's shard at iteration 2 skips the step on every rank)
for z in 0 1; do
  KEEL_INJECT_INF=2 run "fp16_z$z" 2 "${DPARGS[@]}" --fp16 --initial-loss-scale 1024 --zero-stage $z --save "$TMP/fp16_z$z"
done
same_run fp16_z0 fp16_z1
grep -q '"iteration": 2, .*"skipped": 1, "nan": 1' "$TMP/fp16_z1.jsonl" && grep -q "loss scale" "$TMP/fp16_z1.log" \
  && ok "--fp16 at DP=2: the planted overflow skipped iteration 2 on every rank" || fail "fp16 overflow under DP: $(grep '"iteration": 2' "$TMP/fp16_z1.jsonl")"

# 2. DP vs one process, dropout on (masks are keyed by sample number, so they match too)
for np in 1 2 4; do run "drop$np" $np "${DPARGS[@]}" --hidden-dropout 0.1 --attention-dropout 0.1; done
for np in 2 4; do
  python3 - "$TMP/drop1.jsonl" "$TMP/drop$np.jsonl" "$np" <<'EOF' && ok "DP=$np vs 1 process: first loss identical, losses and grad norms within 1e-5" || fail "DP=$np vs 1 process"
import json, sys
one, dp = ([json.loads(l) for l in open(f) if '"lm_loss"' in l] for f in sys.argv[1:3])
assert len(one) == len(dp) == 4, (len(one), len(dp))
assert one[0]["lm_loss"] == dp[0]["lm_loss"], ("first loss", one[0]["lm_loss"], dp[0]["lm_loss"])
for a, b in zip(one, dp):
    for k in ("lm_loss", "grad_norm"):
        assert abs(a[k] - b[k]) <= 1e-5 * abs(a[k]), (a["iteration"], k, a[k], b[k])
    assert a["consumed_samples"] == b["consumed_samples"]
print("first loss", one[0]["lm_loss"], "norms", [round(x["grad_norm"], 6) for x in one], [round(x["grad_norm"], 6) for x in dp])
EOF
done

# 3. bit-exact resume at DP=2, ZeRO-1
run resume_full 2 "${DPARGS[@]}" --train-iters $((2*N)) --zero-stage 1 --save "$TMP/resume_full"
run resume_a 2 "${DPARGS[@]}" --train-iters $((2*N)) --zero-stage 1 --exit-interval $N --save "$TMP/resume_split"
cp "$TMP/resume_a.jsonl" "$TMP/resume_b.jsonl"
timeout -k 10 300 "${MPI[@]}" 2 $KEEL "${DPARGS[@]}" --train-iters $((2*N)) --zero-stage 1 --load "$TMP/resume_split" --save "$TMP/resume_split" \
  --metrics-file "$TMP/resume_b.jsonl" >"$TMP/resume_b.log" 2>&1 || { fail "resume run"; tail -5 "$TMP/resume_b.log"; }
cmp -s <(strip_timing "$TMP/resume_full.jsonl") <(strip_timing "$TMP/resume_b.jsonl") && ok "DP=2 ZeRO-1 resume: every record identical" \
  || fail "DP=2 ZeRO-1 resume: records differ"
for f in model.bin optimizer.bin; do
  cmp -s "$TMP/resume_full/iter_0000008/$f" "$TMP/resume_split/iter_0000008/$f" && ok "resume: final $f identical" || fail "resume: final $f differs"
done

# 4. reshard: DP=4 ZeRO-1 → DP=2 ZeRO-0 → DP=1, canonical bytes unchanged; training continues
for opt in adam adam8bit; do
  extra=(--optimizer $opt); [ $opt = adam8bit ] && extra+=(--adam8bit-min-size 1024)
  src="$TMP/dp4_${opt}_z1"
  run "re2_$opt" 2 "${DPARGS[@]}" "${extra[@]}" --zero-stage 0 --load "$src" --save "$TMP/re2_$opt"
  run "re1_$opt" 1 "${DPARGS[@]}" "${extra[@]}" --load "$TMP/re2_$opt" --save "$TMP/re1_$opt"
  grep -q "writing the loaded state to --save" "$TMP/re2_$opt.log" || fail "$opt: no re-save at DP=2"
  for f in model.bin optimizer.bin; do
    cmp -s "$src/iter_000000$N/$f" "$TMP/re2_$opt/iter_000000$N/$f" && cmp -s "$src/iter_000000$N/$f" "$TMP/re1_$opt/iter_000000$N/$f" \
      && ok "$opt: $f saved at DP=4 ZeRO-1 = loaded and re-saved at DP=2 ZeRO-0 = at DP=1" || fail "$opt: $f changed by resharding"
  done
  # continuing: DP=4 ZeRO-1 → 2 more iterations at DP=2 ZeRO-0 vs at DP=4 ZeRO-1: within tolerance
  run "cont2_$opt" 2 "${DPARGS[@]}" "${extra[@]}" --train-iters $((N+2)) --override-lr-scheduler --load "$src" --save "$TMP/cont2_$opt"
  run "cont4_$opt" 4 "${DPARGS[@]}" "${extra[@]}" --train-iters $((N+2)) --override-lr-scheduler --zero-stage 1 --load "$src" --save "$TMP/cont4_$opt"
  python3 - "$TMP/cont2_$opt.jsonl" "$TMP/cont4_$opt.jsonl" <<'EOF' && ok "$opt: training continues after the reshard (DP=2 from a DP=4 checkpoint tracks DP=4)" || fail "$opt: continuation"
import json, sys
a, b = ([json.loads(l) for l in open(f) if '"lm_loss"' in l] for f in sys.argv[1:3])
assert [x["iteration"] for x in a] == [5, 6] == [x["iteration"] for x in b], (a, b)
assert a[0]["lm_loss"] == b[0]["lm_loss"], "the first loss after loading is computed from the same weights"
assert all(abs(x["lm_loss"] - y["lm_loss"]) <= 1e-5 * y["lm_loss"] for x, y in zip(a, b))
EOF
done

# 5. pre-divide acts under DP (÷3 before the sum, ×3/2 after: the same mean to rounding, other bits)
run pre3 2 "${DPARGS[@]}" --gradient-predivide-factor 3
python3 - "$TMP/pre3.jsonl" "$TMP/dp2_adam_z0.jsonl" <<'EOF' && ok "--gradient-predivide-factor 3 at DP=2: other bits, same mean" || fail "predivide under DP"
import json, sys
p, base = ([json.loads(l) for l in open(f) if '"lm_loss"' in l] for f in sys.argv[1:3])
assert any(x["grad_norm"] != y["grad_norm"] for x, y in zip(p, base)), "factor 3 changed no bit: inert"
assert all(abs(x["grad_norm"] - y["grad_norm"]) <= 1e-5 * y["grad_norm"] for x, y in zip(p, base))
EOF
out=$(timeout -k 10 60 "${MPI[@]}" 2 $KEEL "${TINY[@]}" --global-batch-size 6 --micro-batch-size 2 --train-iters 2 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "error: --global-batch-size 6 is not divisible by --micro-batch-size 2 x data-parallel size 2" <<<"$out" \
  && ! grep -q "iteration *1/" <<<"$out" && ok "bad layout refused before any work" || fail "bad layout: rc $rc: $(grep error <<<"$out")"
out=$(timeout -k 10 60 mpirun --oversubscribe -np 1 $KEEL "${TINY[@]}" --train-iters 2 : -np 1 $KEEL "${TINY[@]}" --train-iters 3 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "error: rank 1 was started with other flag values than rank 0" <<<"$out" \
  && ok "ranks with different flags refused" || fail "different flags per rank: rc $rc: $(grep error <<<"$out" | head -2)"
finish
