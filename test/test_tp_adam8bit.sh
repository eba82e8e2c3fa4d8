#!/usr/bin/env bash
# 8-bit Adam under tensor parallelism. Quantization blocks are the whole unit's,
# so a block can hold elements of both TP ranks (a row-parallel weight's rows split in two, block
# 64 here) and of two ZeRO-1 shards; its scale is the max over them (llmc/optimizer.h split8).
# Block 64 and --adam8bit-min-size 256 put every matrix and the word embedding (sliced by rows,
# padded to 128 x TP rows at TP=2: rows of this rank's own) in 8-bit state; percentile clipping 90
# makes the per-unit norms (summed over TP) matter.
#   1. TP=2 x DP=2 ZeRO-1 vs one process: every loss, grad norm and validation loss within 5e-5 (fp32
#      Adam: 1e-5; a code that rounds the other way from a last-bit difference moves a little more);
#   2. after iteration 1 (learning rate 0, the same weights on both layouts) the TP=2 optimizer.bin
#      is the one-process one but for rounding: every block scale within 1e-4 relative, fewer than
#      0.1% of the codes different (scales kept per slice, or codes written to the wrong places,
#      differ in the blocks the ranks share or in most codes);
#   3. bit-exact resume at TP=2 x DP=2 (exit at 3, resume): records and the final checkpoint;
#   4. reshard: that checkpoint re-saved by one process, and that copy re-saved at TP=2, are
#      byte-identical (model.bin, optimizer.bin, state.txt);
#   5. the emulated CUDA trainer at TP=2 (its split kernels, NCCL's MAX all-reduce) = the CPU trainer
#      at TP=2 within 2e-5.
source "$(dirname "$0")/lib.sh"
[ -n "${KEEP_TMP:-}" ] && trap - EXIT && echo "TMP=$TMP"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
command -v mpirun >/dev/null || { fail "mpirun not found (scripts/setup.sh installs OpenMPI)"; finish; }
run() {  # name np binary args...
  local name=$1 np=$2 bin=$3; shift 3
  timeout -k 10 300 mpirun --oversubscribe -np "$np" $bin "$@" --metrics-file "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1 \
    || { fail "$name: run failed"; tail -8 "$TMP/$name.log"; }
}
A=("${TINY[@]}" --train-iters 6 --eval-interval 3 --eval-iters 1 --optimizer adam8bit --adam8bit-block-size 64
   --adam8bit-min-size 256 --adam8bit-percentile-clipping 90)
L=(--tensor-model-parallel-size 2 --data-parallel-size 2 --zero-stage 1)
run one 1 $KEEL "${A[@]}" --save "$TMP/one" --save-interval 1
run tp 4 $KEEL "${A[@]}" "${L[@]}" --save "$TMP/tp" --save-interval 3
grep -q "8-bit state on" "$TMP/tp.log" || fail "no 8-bit state line: $(grep -m1 optimizer "$TMP/tp.log")"
r=$(compare_jsonl "$TMP/tp.jsonl" "$TMP/one.jsonl" 5e-5 2>&1) && ok "TP=2 x DP=2 ZeRO-1 adam8bit = one process within 5e-5 ($r)" || fail "TP=2 adam8bit: $r"

run tp_it1 2 $KEEL "${A[@]}" --tensor-model-parallel-size 2 --exit-interval 1 --save "$TMP/tp_it1" --save-interval 1
python3 - "$TMP/one/iter_0000001/optimizer.bin" "$TMP/tp_it1/iter_0000001/optimizer.bin" "$TMP/one.log" <<'PY' \
  && ok "iteration 1: TP=2's optimizer state = one process's but for rounding" || fail "iteration 1: TP=2's optimizer state is not one process's"
import array, math, re, sys
a, b = (open(f, "rb").read() for f in sys.argv[1:3])
assert len(a) == len(b), (len(a), len(b))
# the payload after the 64-byte header: fp32 m, v (n32 each), the scales of m, v (nblocks each), the
# percentile histories (100 per unit), the codes of m, v (n8 each); the units of this model, in table
# order (8-bit: 256 elements or more), give n32, nblocks and n8, checked against the start-up line
V, T, C, L = 50304, 16, 32, 2
layer = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
units = [V * C, T * C] + layer * L + [C, C]
n8 = sum(u for u in units if u >= 256); n32 = sum(units) - n8; nb = sum(math.ceil(u / 64) for u in units if u >= 256)
assert f"8-bit state on {n8} of" in open(sys.argv[3]).read(), "the layout assumed here is not the model's"
assert len(a) == 64 + 8 * n32 + 8 * nb + 400 * len(units) + 2 * n8, len(a)
at = 64 + 8 * n32
sa, sb = (array.array("f", x[at:at + 8 * nb]) for x in (a, b))
worst = max(abs(x - y) / max(abs(x), abs(y), 1e-30) for x, y in zip(sa, sb))
codes = sum(x != y for x, y in zip(a[len(a) - 2 * n8:], b[len(b) - 2 * n8:]))
print(f"{2 * nb} scales within {worst:.2e} relative; {codes} of {2 * n8} codes differ")
assert worst < 1e-4 and codes * 1000 < 2 * n8

PY

run part 4 $KEEL "${A[@]}" "${L[@]}" --save "$TMP/part" --save-interval 3 --exit-interval 3
cp "$TMP/part.jsonl" "$TMP/resumed.jsonl"
timeout -k 10 300 mpirun --oversubscribe -np 4 $KEEL "${A[@]}" "${L[@]}" --save "$TMP/part" --save-interval 3 --load "$TMP/part" \
  --metrics-file "$TMP/resumed.jsonl" >"$TMP/resumed.log" 2>&1 || { fail "resume failed"; tail -5 "$TMP/resumed.log"; }
cmp -s <(strip_timing "$TMP/tp.jsonl") <(strip_timing "$TMP/resumed.jsonl") \
  && ok "resume at TP=2 x DP=2: every record identical to the uninterrupted run" || fail "resume: records differ"
same_checkpoint "resume at TP=2 x DP=2, final checkpoint" "$TMP/tp" "$TMP/part" 6

run re1 1 $KEEL "${A[@]}" --load "$TMP/tp" --save "$TMP/re1"
same_checkpoint "TP=2 x DP=2 checkpoint re-saved by one process" "$TMP/tp" "$TMP/re1" 6
run re2 2 $KEEL "${A[@]}" --tensor-model-parallel-size 2 --load "$TMP/re1" --save "$TMP/re2"
same_checkpoint "that copy re-saved at TP=2" "$TMP/tp" "$TMP/re2" 6

EMU=build/train_gpt_emu
if [ -x $EMU ]; then
  run emu 2 $EMU "${A[@]}" --fp32 --tensor-model-parallel-size 2 --train-iters 4
  run cpu2 2 $KEEL "${A[@]}" --tensor-model-parallel-size 2 --train-iters 4
  r=$(compare_jsonl "$TMP/emu.jsonl" "$TMP/cpu2.jsonl" 2e-5 2>&1) && ok "emulated CUDA trainer TP=2 adam8bit = CPU trainer TP=2 ($r)" || fail "emulated TP=2 adam8bit: $r"
else fail "$EMU not built"; fi
finish
