#!/usr/bin/env bash
# ZeRO-1 element by element (under `mpirun --oversubscribe`), where test_data_parallel compares
# losses and norms:
#   1. the reduced gradient: after one iteration with clipping off, optimizer.bin's m is exactly
#      (1 − β1)·g of the data-parallel mean gradient, every element, whichever rank owns its shard.
#      DP=2 and DP=4 ZeRO-1 against one process (the same 4 samples): every element within
#      1e-5 relative + 1e-6 of the largest (the sums' order differs; a shard's element left out of
#      the 1/DP scaling is off by 100% of itself);
#   2. 8-bit Adam's block scales over shards: at TP=2 the quantization blocks are the whole tensor's,
#      so under ZeRO-1 a block can span two data-parallel shards and its scale is the max over both.
#      TP=2 × DP=2 with ZeRO-1 against ZeRO-0 (every rank holds whole blocks): optimizer.bin and
#      model.bin byte-identical after 2 iterations; and against one process: every block scale within
#      1e-4 relative after the first iteration (learning rate 0: the same weights in both);
#   3. global-norm clipping, which the update kernels apply as they read g (no pass of its own): with
#      --clip-grad 0.01 (far below the norm, so every element is scaled), one process and DP=2 ZeRO-1,
#      optimizer.bin's m is coeff·m of the unclipped run, coeff = 0.01/(norm + 1e-6) from the logged
#      norm, every element within 1e-6 relative (1e-5 + 1e-6 of the largest at DP=2); an element its
#      rank's update did not clip is off by a factor of 1/coeff.
source "$(dirname "$0")/lib.sh"
export TMP
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
command -v mpirun >/dev/null || { fail "mpirun not found (scripts/setup.sh installs OpenMPI)"; finish; }
run() {  # run NAME NP ARGS...
  local name=$1 np=$2; shift 2
  timeout -k 10 120 mpirun --oversubscribe -np "$np" $KEEL "$@" --save "$TMP/$name" >"$TMP/$name.log" 2>&1 \
    || { fail "$name: run failed: $(grep -m1 '^error' "$TMP/$name.log")"; return 1; }
}
A=("${TINY[@]}" --micro-batch-size 1 --global-batch-size 4 --clip-grad 0 --lr-warmup-iters 0 --lr-decay-style constant --train-iters 1)
run one 1 "${A[@]}"
for dp in 2 4; do
  run dp$dp $dp "${A[@]}" --zero-stage 1 || continue
  shards=$(grep -oE "parameters [0-9]+\.\.[0-9]+" "$TMP/dp$dp.log" | head -1)
  python3 - "$TMP/one/iter_0000001/optimizer.bin" "$TMP/dp$dp/iter_0000001/optimizer.bin" <<'PY' \
    && ok "DP=$dp ZeRO-1: the reduced gradient = one process's, element by element ($(tail -1 "$TMP/cmp.out"))" \
    || fail "DP=$dp ZeRO-1: the reduced gradient differs from one process's: $(cat "$TMP/cmp.out")"
import array, os, struct, sys
out = open(os.environ["TMP"] + "/cmp.out", "w")
def moments(path):  # the payload's first section: m over the canonical parameters
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[24:32])[0]
    return array.array("f", raw[64:64 + 4 * n])
a, b = moments(sys.argv[1]), moments(sys.argv[2])
assert len(a) == len(b)
top = max(abs(x) for x in a)
bad = [i for i in range(len(a)) if abs(b[i] - a[i]) > 1e-5 * abs(a[i]) + 1e-6 * top]
for i in bad[:5]:
    print(f"element {i}: m {b[i]!r}, one process {a[i]!r}", file=out)
worst = max(abs(x - y) for x, y in zip(a, b))
print(f"{len(bad)} of {len(a)} elements off; largest difference {worst:.2g}, largest |m| {top:.2g}", file=out)
sys.exit(1 if bad else 0)
PY
done
B=("${TINY[@]}" --train-iters 2 --lr-warmup-iters 0 --lr-decay-style constant --optimizer adam8bit --adam8bit-block-size 64 --adam8bit-min-size 256 --tensor-model-parallel-size 2)
run z0 4 "${B[@]}" --data-parallel-size 2 --zero-stage 0
run z1 4 "${B[@]}" --data-parallel-size 2 --zero-stage 1
for f in model.bin optimizer.bin; do
  cmp -s "$TMP/z0/iter_0000002/$f" "$TMP/z1/iter_0000002/$f" && ok "TP=2 × DP=2 adam8bit: ZeRO-1's $f = ZeRO-0's byte for byte" \
    || fail "TP=2 × DP=2 adam8bit: ZeRO-1's $f differs from ZeRO-0's"
done
C=("${TINY[@]}" --train-iters 1 --lr 0 --min-lr 0 --lr-warmup-iters 0 --lr-decay-style constant --optimizer adam8bit
   --adam8bit-block-size 64 --adam8bit-min-size 256)
run s1 1 "${C[@]}"
run s4 4 "${C[@]}" --tensor-model-parallel-size 2 --data-parallel-size 2 --zero-stage 1
python3 - "$TMP/s1/iter_0000001/optimizer.bin" "$TMP/s4/iter_0000001/optimizer.bin" "$TMP/s1.log" <<'PY' \
  && ok "TP=2 × DP=2 ZeRO-1 adam8bit: every block scale = one process's ($(tail -1 "$TMP/cmp.out"))" \
  || fail "TP=2 × DP=2 ZeRO-1 adam8bit: block scales differ from one process's: $(cat "$TMP/cmp.out")"
import array, math, os, re, struct, sys
out = open(os.environ["TMP"] + "/cmp.out", "w")
a, b = (open(f, "rb").read() for f in sys.argv[1:3])
assert len(a) == len(b), (len(a), len(b))
log = open(sys.argv[3]).read()
n8, n = (int(x) for x in re.search(r"8-bit state on (\d+) of (\d+) parameters", log).groups())
n32 = n - n8
# the block count from the 8-bit units of this model (64-element blocks per unit, layer by layer)
V, T, C, L = 50304, 16, 32, 2
layer = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
units = [V * C, T * C] + layer * L + [C, C]
assert sum(u for u in units if u >= 256) == n8, "the layout assumed here is not the model's"
nb = sum(math.ceil(u / 64) for u in units if u >= 256)
at = 64 + 8 * n32
sa, sb = (array.array("f", x[at:at + 8 * nb]) for x in (a, b))
bad = [i for i in range(2 * nb) if abs(sa[i] - sb[i]) > 1e-4 * max(abs(sa[i]), abs(sb[i]))]
for i in bad[:5]:
    print(f"scale {i} ({'m' if i < nb else 'v'} block {i % nb}): {sb[i]!r}, one process {sa[i]!r}", file=out)
print(f"{len(bad)} of {2 * nb} scales off", file=out)
sys.exit(1 if bad else 0)
PY
# 3. clipping: m after one step = (1 - β1)·coeff·g, against the unclipped run's (1 - β1)·g
for np_ in 1 2; do
  name=clip$np_
  run $name $np_ "${A[@]}" --clip-grad 0.01 --zero-stage 1 --metrics-file "$TMP/$name.jsonl" || continue
  rel=$([ $np_ = 1 ] && echo 1e-6 || echo 1e-5)
  python3 - "$TMP/one/iter_0000001/optimizer.bin" "$TMP/$name/iter_0000001/optimizer.bin" "$TMP/$name.jsonl" $rel <<'PY' \
    && ok "--clip-grad 0.01 at DP=$np_: m = coeff·m of the unclipped run, element by element ($(tail -1 "$TMP/cmp.out"))" \
    || fail "--clip-grad 0.01 at DP=$np_: m is not coeff·m of the unclipped run: $(cat "$TMP/cmp.out")"
import array, json, os, struct, sys
out = open(os.environ["TMP"] + "/cmp.out", "w")
def moments(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[24:32])[0]
    return array.array("f", raw[64:64 + 4 * n])
a, b = moments(sys.argv[1]), moments(sys.argv[2])
norm = json.loads(open(sys.argv[3]).readline())["grad_norm"]
coeff = 0.01 / (norm + 1e-6)
rel = float(sys.argv[4])
assert coeff < 0.5, f"the norm {norm} does not make 0.01 clip"
top = max(abs(x) for x in a) * coeff
bad = [i for i in range(len(a)) if abs(b[i] - coeff * a[i]) > rel * abs(coeff * a[i]) + (0 if rel < 1e-5 else 1e-6 * top)]
for i in bad[:5]:
    print(f"element {i}: m {b[i]!r}, coeff·m unclipped {coeff * a[i]!r}", file=out)
print(f"coeff {coeff:.4g}; {len(bad)} of {len(a)} elements off", file=out)
sys.exit(1 if bad else 0)
PY
done
finish
