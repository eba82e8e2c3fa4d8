#!/usr/bin/env bash
# Communication that hides behind compute, on the emulated CUDA trainer with the emulated
# NCCL (2 ranks) — its step profile (KEEL_EMU_PROFILE) and event trace (KEEL_EMU_TRACE):
#   1. data parallel, ZeRO-1, gradient buckets (--grad-bucket-mb 0.1: one bucket per layer here):
#      - one steady-state iteration moves exactly the formula's NCCL bytes per rank: the gradients'
#        reduce-scatter (fp32, every element once: 4·P bytes as ncclReduce pieces) + the parameters'
#        all-gather in the compute precision (bf16: 2·P bytes as ncclBroadcast shards; the fp32 master
#        weights stay sharded), P = the model's parameters;
#      - the first gradient reduction of the last iteration is issued before the backward's last
#        kernel (the word-embedding gradient), and after a stream wait; with --grad-bucket-mb 0 it
#        comes after it (the test can tell the two apart);
#      - buckets change no bit: bucketed = one bucket = ZeRO-0 (metrics and checkpoint bytes);
#   2. nothing in a steady-state iteration runs on the legacy default stream, and host waits per
#      iteration do not grow with micro-batches or layers — at DP=2, TP=2 and PP=2;
#   3. the streams of the NCCL calls (the trace numbers streams by first use: 1 is keel's compute
#      stream, whose kernels come first, 2 the communication stream): the gradient buckets' reductions
#      and the pipeline's sends and receives on stream 2, the parameter all-gather and the
#      tensor-parallel all-reduces on stream 1.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
CUDA=build/train_gpt_emu
[ -x "$CUDA" ] || { fail "$CUDA not built (make build/train_gpt_emu)"; finish; }
unset KEEL_EMU_PROFILE KEEL_EMU_TRACE
BASE=(--hidden-size 64 --num-attention-heads 4 --seq-length 16 --micro-batch-size 1 --lr 1e-3 --seed 3
      --train-data-path data/brown/brown_train.bin --valid-data-path data/brown/brown_val.bin --eval-interval 0 --log-interval 1 --hidden-dropout 0 --attention-dropout 0)

# run NAME ITERS GBS LAYERS [flags...] on 2 ranks: profile $TMP/NAME.json.r, trace $TMP/NAME.trace.r
# (mpirun's own start-up can fail under load before any rank runs, "orte_session_dir failed": keel never
# ran, so that start is repeated once, from nothing)
run() {
  local name=$1 iters=$2 gbs=$3 layers=$4 try; shift 4
  for try in 1 2; do
    rm -rf "$TMP/$name.ck" "$TMP/$name.jsonl"
    KEEL_EMU_PROFILE="$TMP/$name.json" KEEL_EMU_TRACE="$TMP/$name.trace" mpirun --oversubscribe -np 2 $CUDA "${BASE[@]}" \
      --num-layers "$layers" --train-iters "$iters" --global-batch-size "$gbs" --metrics-file "$TMP/$name.jsonl" --save "$TMP/$name.ck" \
      "$@" >"$TMP/$name.log" 2>&1 && return
    [ $try = 1 ] && mpi_start_failed <"$TMP/$name.log" || break
  done
  fail "$name: the trainer failed"; tail -5 "$TMP/$name.log"
}

# ---- 1. data parallel ---------------------------------------------------------------------------------
run dp2 2 2 2 --zero-stage 1 --grad-bucket-mb 0.1 &
run dp1 1 2 2 --zero-stage 1 --grad-bucket-mb 0.1 &
wait
run one 2 2 2 --zero-stage 1 --grad-bucket-mb 0 &
run zero0 2 2 2 --zero-stage 0 --grad-bucket-mb 0.1 &
wait
line=$(grep -m1 '^data parallel:' "$TMP/dp2.log")
[[ "$line" == *"3 bucket(s)"*overlapping* ]] && ok "start-up: $line" || fail "start-up line: '$line'"
P=$(sed -nE 's/.*parameters: [0-9]+ \(([0-9]+) with vocabulary padding\).*/\1/p' "$TMP/dp2.log" | head -1)
python3 - "$TMP" "${P:-0}" <<'PY' && ok "DP=2 ZeRO-1: bytes by the formula, a bucket before the backward's last kernel" || fail "DP=2 ZeRO-1 overlap"
import json, sys
tmp, P = sys.argv[1], int(sys.argv[2])
bad = 0
def check(what, good):
    global bad
    print(("ok  " if good else "FAIL") + " " + what)
    bad += not good
check(f"P read from the log: {P}", P > 0)
for r in range(2):
    a, b = json.load(open(f"{tmp}/dp1.json.{r}")), json.load(open(f"{tmp}/dp2.json.{r}"))
    d = {k: b["nccl_by_collective"][k]["bytes"] - a["nccl_by_collective"][k]["bytes"] for k in b["nccl_by_collective"]}
    check(f"rank {r}: gradient reduce-scatter {d['reduce']} bytes = 4·P = {4 * P}", d["reduce"] == 4 * P)
    check(f"rank {r}: parameter all-gather {d['broadcast']} bytes = 2·P = {2 * P} (bf16)", d["broadcast"] == 2 * P)
    check(f"rank {r}: nothing else over NCCL ({d['allreduce']} all-reduce, {d['send'] + d['recv']} point-to-point bytes)",
          d["allreduce"] == 0 and d["send"] == 0 and d["recv"] == 0)
    check(f"rank {r}: legacy-stream calls per iteration {b['legacy_stream_ops'] - a['legacy_stream_ops']} (0)",
          b["legacy_stream_ops"] == a["legacy_stream_ops"])
def order(name):  # in the last iteration: index of the first reduce, of the last embedding-gradient kernel, waits before the reduce
    lines = open(f"{tmp}/{name}.trace.0").read().splitlines()
    last_bwd = max(i for i, l in enumerate(lines) if l.startswith("launch encoder_backward_wte"))
    start = max(i for i, l in enumerate(lines[:last_bwd]) if l.startswith("launch encoder_forward"))  # the last micro-batch's forward
    first_red = min(i for i, l in enumerate(lines) if i > start and l.startswith("nccl reduce"))
    waited = any(l == "wait" for l in lines[start:first_red])
    return first_red, last_bwd, waited
red, last, waited = order("dp2")
check(f"buckets: first reduction at event {red}, before the backward's last kernel at {last}, after a stream wait", red < last and waited)
red, last, _ = order("one")
check(f"--grad-bucket-mb 0: first reduction at event {red}, after the backward's last kernel at {last}", red > last)
sys.exit(1 if bad else 0)
PY
if cmp -s <(strip_timing "$TMP/dp2.jsonl") <(strip_timing "$TMP/one.jsonl") && cmp -s <(strip_timing "$TMP/dp2.jsonl") <(strip_timing "$TMP/zero0.jsonl"); then
  ok "bucketed = one bucket = ZeRO-0: metrics identical"
else
  fail "bucketed, one bucket and ZeRO-0 metrics differ"
fi
same_checkpoint "bucketed vs one bucket" "$TMP/dp2.ck" "$TMP/one.ck" 2
same_checkpoint "ZeRO-1 vs ZeRO-0" "$TMP/dp2.ck" "$TMP/zero0.ck" 2

# ---- 2. host waits at DP, TP, PP ----------------------------------------------------------------------
# One steady iteration's host waits (the profile of 2 iterations minus that of 1): run "a" with the
# fewest micro-batches and 2 layers, run "b" with twice the micro-batches and 4 layers; equal counts
# mean neither grows (both could only add waits). No legacy-stream call in either.
for layout in "dp 2 4 --zero-stage 1 --grad-bucket-mb 0.1" "tp 1 2 --tensor-model-parallel-size 2" "pp 2 4 --pipeline-model-parallel-size 2"; do
  set -- $layout
  name=$1 ga=$2 gb=$3; shift 3
  if [ "$name" == dp ]; then  # the runs of part 1 are its "a"
    for r in 0 1; do cp "$TMP/dp1.json.$r" "$TMP/dp_a1.json.$r"; cp "$TMP/dp2.json.$r" "$TMP/dp_a2.json.$r"; done
  else run ${name}_a1 1 $ga 2 "$@" & run ${name}_a2 2 $ga 2 "$@" & wait; fi
  run ${name}_b1 1 $gb 4 "$@" & run ${name}_b2 2 $gb 4 "$@" & wait
  python3 - "$TMP" "$name" <<'PY' && ok "$name: host waits per iteration independent of micro-batches and layers, none on the legacy stream" || fail "$name: host waits grow"
import json, sys
tmp, name = sys.argv[1], sys.argv[2]
def delta(run, key, r):
    a, b = json.load(open(f"{tmp}/{name}_{run}1.json.{r}")), json.load(open(f"{tmp}/{name}_{run}2.json.{r}"))
    return b[key] - a[key]
bad = 0
for r in range(2):
    s = {run: delta(run, "syncs", r) for run in "ab"}
    legacy = [delta(run, "legacy_stream_ops", r) for run in "ab"]
    print(f"rank {r}: syncs per iteration {s['a']} (2 layers), {s['b']} (twice the micro-batches, 4 layers); legacy-stream calls {legacy}")
    bad += not (0 < s["a"] == s["b"]) or any(legacy)
sys.exit(1 if bad else 0)
PY
done

# ---- 3. which stream each NCCL call is on ---------------------------------------------------------------
python3 - "$TMP" <<'PY' && ok "streams: bucket reductions and pipeline send/recv on the communication stream" || fail "NCCL calls on the wrong stream"
import sys
tmp = sys.argv[1]
bad = 0
def streams(name, op):
    found = set()
    for r in range(2):
        for l in open(f"{tmp}/{name}.trace.{r}").read().splitlines():
            if l.startswith(f"nccl {op} "): found.add(l.rsplit(" ", 1)[1])
    return found
for name, op, want in [("dp2", "reduce", {"2"}), ("dp2", "broadcast", {"1"}), ("pp_b2", "send", {"2"}), ("pp_b2", "recv", {"2"}),
                       ("tp_b2", "allreduce", {"1"})]:
    got = streams(name, op)
    print(f"{name}: nccl {op} on stream(s) {sorted(got)} (want {sorted(want)})")
    bad += got != want
sys.exit(1 if bad else 0)
PY
finish
