#!/usr/bin/env bash
# --optimizer adam8bit in the trainer: the memory printout, checkpoint contents, bit-exact resume,
# thread-count independence, each adam8bit flag changing the trajectory (and only when given),
# --stable-embedding's 32-bit embedding state in the checkpoint, and resuming across optimizers.
source "$(dirname "$0")/lib.sh"
# min size 1024: the tiny model's wte, qkvw, attprojw, fcw, fcprojw get 8-bit state, the rest 32-bit
A8=("${TINY[@]}" --optimizer adam8bit --adam8bit-min-size 1024)
N=4
run() { local name=$1; shift; $KEEL "$@" --metrics-file "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1 || { fail "$name: run failed"; tail -5 "$TMP/$name.log"; }; }
losses() { grep -o '"lm_loss": [^,]*' "$TMP/$1.jsonl" | tr '\n' ' '; }

# 1. start-up printout and checkpoint contents
run a8 "${A8[@]}" --train-iters $((2*N)) --save "$TMP/a8"
line=$(grep '^optimizer: adam8bit' "$TMP/a8.log")
[[ "$line" =~ "8-bit state on "([0-9]+)" of "([0-9]+)" parameters; 32-bit on "([0-9]+)" ".*"state "([0-9.]+)" bytes/parameter" ]] \
  && ok "printout: $line" || fail "no adam8bit memory line: $line"
n8=${BASH_REMATCH[1]}; P=${BASH_REMATCH[2]}; n32=${BASH_REMATCH[3]}
[ $((n8 + n32)) -eq "$P" ] || fail "8-bit $n8 + 32-bit $n32 != $P parameters"
# state bytes = 8·n32 (m, v) + 8·blocks (absmax) + 400·units (percentile history) + 2·n8 (codes), checked
# against the file. Every 8-bit unit here (wte 50304·32; per layer qkvw 3072, attprojw 1024, fcw 4096,
# fcprojw 4096) is a whole number of 256-blocks, so blocks = n8/256; units = wte, wpe, 12 per layer, lnfw, lnfb.
units=$((2 + 12 * 2 + 2)); want=$((8 * n32 + 8 * (n8 / 256) + 400 * units + 2 * n8 + 64))
got=$(stat -c %s "$TMP/a8/iter_0000008/optimizer.bin")
[ "$got" -eq "$want" ] && ok "optimizer.bin is $got bytes = header + fp32 state + absmax + history + 2 bytes/8-bit param" \
  || fail "optimizer.bin $got bytes, want $want"
grep -q '^optimizer.layout = adam8bit block 256: wte 8, wpe 32, .*qkvw 8, .*fcprojw 8' "$TMP/a8/iter_0000008/state.txt" \
  && ok "state.txt records the layout" || fail "layout: $(grep optimizer.layout "$TMP/a8/iter_0000008/state.txt")"

# 2. bit-exact resume
run a8split1 "${A8[@]}" --train-iters $((2*N)) --exit-interval $N --save "$TMP/a8split"
cp "$TMP/a8split1.jsonl" "$TMP/a8split.jsonl"
$KEEL "${A8[@]}" --train-iters $((2*N)) --load "$TMP/a8split" --save "$TMP/a8split" --metrics-file "$TMP/a8split.jsonl" >"$TMP/a8split2.log" 2>&1 \
  || { fail "resume run"; tail -5 "$TMP/a8split2.log"; }
grep -q "successfully loaded checkpoint" "$TMP/a8split2.log" || fail "resume did not load"
cmp -s <(strip_timing "$TMP/a8.jsonl") <(strip_timing "$TMP/a8split.jsonl") && ok "resume: every record identical" \
  || { fail "resume: records differ"; diff <(strip_timing "$TMP/a8.jsonl") <(strip_timing "$TMP/a8split.jsonl") | head -4; }
for f in model.bin optimizer.bin state.txt; do
  cmp -s "$TMP/a8/iter_0000008/$f" "$TMP/a8split/iter_0000008/$f" && ok "resume: final $f identical" || fail "resume: final $f differs"
done

# 3. thread count does not change a bit
OMP_NUM_THREADS=1 run a8t1 "${A8[@]}" --train-iters $((2*N)) --save "$TMP/a8t1"
for f in model.bin optimizer.bin; do
  cmp -s "$TMP/a8/iter_0000008/$f" "$TMP/a8t1/iter_0000008/$f" && ok "1 vs 2 threads: $f identical" || fail "1 vs 2 threads: $f differs"
done

# 4. each flag acts: adam8bit vs adam, block 2048 vs 256, min size, percentile clipping; defaults are inert
run adam "${TINY[@]}" --train-iters $((2*N))
[ "$(losses a8)" != "$(losses adam)" ] && ok "adam8bit's trajectory differs from adam's" || fail "adam8bit is inert"
python3 - "$TMP/a8.jsonl" "$TMP/adam.jsonl" <<'EOF' && ok "adam8bit stays within 1% of adam's loss over $((2*N)) iterations" || fail "adam8bit far from adam"
import json, sys
a, b = ([json.loads(l)["lm_loss"] for l in open(f) if '"lm_loss"' in l] for f in sys.argv[1:3])
assert a[0] == b[0], (a[0], b[0])  # the first loss is computed before any update
assert all(abs(x - y) / y < 0.01 for x, y in zip(a, b)), list(zip(a, b))
EOF
run a8b2048 "${A8[@]}" --train-iters $((2*N)) --adam8bit-block-size 2048 --save "$TMP/a8b2048"
[ "$(losses a8)" != "$(losses a8b2048)" ] && ok "block 2048 differs from 256" || fail "--adam8bit-block-size is inert"
[ "$(stat -c %s "$TMP/a8b2048/iter_0000008/optimizer.bin")" -lt "$got" ] && ok "block 2048: fewer absmax values" || fail "block 2048 file not smaller"
grep -q '^optimizer.layout = adam8bit block 2048:' "$TMP/a8b2048/iter_0000008/state.txt" || fail "block 2048 not in layout"
run a8min "${A8[@]}" --train-iters $((2*N)) --adam8bit-min-size 4096
grep -q "32-bit on .*qkvw" "$TMP/a8min.log" && ok "min size 4096: qkvw (3072/layer) keeps 32-bit state" || fail "min size: $(grep '^optimizer' "$TMP/a8min.log")"
[ "$(losses a8)" != "$(losses a8min)" ] && ok "--adam8bit-min-size changes the trajectory" || fail "--adam8bit-min-size is inert"
run a8p100 "${A8[@]}" --train-iters $((2*N)) --adam8bit-percentile-clipping 100
cmp -s <(strip_timing "$TMP/a8.jsonl") <(strip_timing "$TMP/a8p100.jsonl") && ok "percentile 100 = off" || fail "percentile 100 changed the run"
run a8p5 "${A8[@]}" --train-iters $((2*N)) --adam8bit-percentile-clipping 5
[ "$(losses a8)" != "$(losses a8p5)" ] && ok "percentile clipping 5 changes the trajectory" || fail "--adam8bit-percentile-clipping is inert"
clipped=$(grep -o '"percentile_clipped": [0-9]*' "$TMP/a8p5.jsonl" | awk '{s += $2} END {print s + 0}')
[ "$clipped" -gt 0 ] && grep -q "percentile-clipped tensors:" "$TMP/a8p5.log" && ok "percentile clipping reports $clipped clipped tensor-steps" \
  || fail "no clipped tensors reported"
grep -o '"percentile_clipped": [0-9]*' "$TMP/a8.jsonl" | grep -qv ': 0$' && fail "clipping reported while off" || true

# 5. --stable-embedding: the checkpoint's state has 32-bit wte (its 50304x32 fp32 m and v are in optimizer.bin)
run a8se "${A8[@]}" --train-iters 4 --stable-embedding --save "$TMP/a8se"
grep -q "32-bit on .*wte (--stable-embedding)" "$TMP/a8se.log" && ok "printout: wte keeps 32-bit state" || fail "stable embedding printout"
grep -q '^optimizer.layout = adam8bit block 256: wte 32,' "$TMP/a8se/iter_0000004/state.txt" || fail "stable embedding layout"
wte=$((50304 * 32)); se=$(stat -c %s "$TMP/a8se/iter_0000004/optimizer.bin")
# vs the plain file: wte moves from 2 bytes + absmax (8 per 256) to 8 bytes per element; plus lnew/lneb (2 units of 32)
want_se=$((got + 6 * wte - 8 * (wte / 256) + 8 * 64 + 400 * 2))
[ "$se" -eq "$want_se" ] && ok "--stable-embedding: optimizer.bin holds wte as fp32 m, v ($se bytes)" || fail "stable embedding file $se bytes, want $want_se"

# 6. resuming across optimizers: refused with a hint; --no-load-optim starts the optimizer fresh
out=$($KEEL "${TINY[@]}" --train-iters $((3*N)) --override-lr-scheduler --load "$TMP/a8" 2>&1 >/dev/null); rc=$?
[ $rc -ne 0 ] && grep -q "holds optimizer state 'adam8bit block 256" <<<"$out" && grep -q -- "--no-load-optim" <<<"$out" \
  && ok "adam8bit checkpoint into --optimizer adam refused: $(head -1 <<<"$out")" || fail "cross-optimizer resume: rc $rc $out"
$KEEL "${TINY[@]}" --train-iters $((3*N)) --override-lr-scheduler --load "$TMP/a8" --no-load-optim >"$TMP/x.log" 2>&1 \
  && grep -q "no-load-optim: Adam moments" "$TMP/x.log" && ok "--no-load-optim switches the optimizer" || fail "--no-load-optim across optimizers"
out=$($KEEL "${A8[@]}" --adam8bit-block-size 2048 --train-iters $((3*N)) --override-lr-scheduler --load "$TMP/a8" 2>&1 >/dev/null); rc=$?
[ $rc -ne 0 ] && grep -q "block 2048" <<<"$out" && ok "block-size change refused" || fail "block-size change: rc $rc $out"
finish
