#!/usr/bin/env bash
# --step-curves FILE (llmc/step_model.h step_curves_load) and scripts/step_curves.sh, which writes such a
# file from the kernel lab's output on a GPU:
#   1. derive: test/kernel_lab_h200_sample.txt (a whole kernel-lab run on an H200, read here by a parser of its own)
#      gives the shares computed here from the sample's shapes and times, taking keel's rows only (not
#      the naive, GEMM-path or timing-only ones); the flash tables of B=16 T=1024 alone give back the
#      model's own STEP_FLASH_*_EFF, which were measured there; no lab rows, a share above 1 (another
#      GPU) and an unknown GPU are refused;
#   2. the file applied: every key at the model's own value changes no byte of the plan; halving
#      flash_bwd_eff adds exactly the flash backward's compute time once more, halving mem_eff doubles
#      the optimizer pass, and gemm_eff, nvlink_eff, ib_eff and kernel_gap_s move their parts the way they
#      should; the start-up line names the file and what it changed;
#   3. each malformed file is refused (exit 2) with one error line naming the file, the line and the problem;
#   4. compare: the measured step beside the plans with and without the file, as gpu_check.sh reports it.
source "$(dirname "$0")/lib.sh"
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, d))" "$1" "$2"; }
[ -x build/gpu_spec ] || { fail "build/gpu_spec is not built (make build/gpu_spec)"; finish; }
SAMPLE=test/kernel_lab_h200_sample.txt
curve() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }
# within A B REL: |A/B - 1| <= REL
within() { python3 -c "import sys; a, b, r = map(float, sys.argv[1:]); sys.exit(0 if abs(a / b - 1) <= r else 1)" "$1" "$2" "$3"; }

# ---- 1. derive
bash scripts/step_curves.sh derive "$SAMPLE" h200 >"$TMP/c.txt" || fail "derive on the sample: exit $?"
# the shares from the sample's own numbers, read here by a parser of their own: FLOPs (the model's
# count) over time over the H200's 989 TFLOP/s and 4.8 TB/s; gemm: the best square, over d/(d+128);
# flash: causal halves, 2 (forward) and 5 (backward) x B·NH·T²·hs, every table's FLOPs over their
# times; mem: keel's rows without FLOPs, their bytes (GB/s x time) over their time
want=$(python3 - "$SAMPLE" <<'PY'
import re, sys
peak, hbm = 989e12, 4.8e12
# the sample's tables: the title is the line before "  bytes ..."; a row is "  N   name   ms   GB/s   TFLOP/s|-"
rows, prev, title, flops = [], "", "", False
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("  bytes "):
        title, flops = prev, "FLOPs" in line
    m = re.match(r"^  \d+ +([a-z]+) +([0-9]+\.[0-9]+) +([0-9]+\.[0-9]+) +([0-9.]+|-) *$", line)
    if m: rows.append((title, flops, m.group(1), float(m.group(2)), float(m.group(3))))
    prev = line
def dims(t):
    return {k: int(v) for k, v in re.findall(r"\b([A-Z]+)=([0-9]+)", t)}
gemm = max(2 * d["N"] * d["C"] * d["OC"] / (ms * 1e-3) / peak / (d["N"] / (d["N"] + 128))
           for t, f, name, ms, _ in rows if f and name == "keel" and "(square)" in t for d in [dims(t)])
def flash(kind, products):
    sel = [(dims(t), ms) for t, f, name, ms, _ in rows if f and name == "flash" and t.startswith("attention " + kind)]
    work = sum(products * d["B"] * d["NH"] * d["T"] ** 2 * d["C"] / d["NH"] for d, _ in sel)
    return work / (sum(ms for _, ms in sel) * 1e-3) / peak
mem = [(gbs * 1e9 * ms * 1e-3, ms) for t, f, name, ms, gbs in rows if not f and name == "keel"]
print(gemm, flash("forward", 2), flash("backward", 5), sum(b for b, _ in mem) / (sum(ms for _, ms in mem) * 1e-3) / hbm)
PY
)
read -r w_gemm w_fwd w_bwd w_mem <<<"$want"
for kv in "gemm_eff $w_gemm" "flash_fwd_eff $w_fwd" "flash_bwd_eff $w_bwd" "mem_eff $w_mem"; do
  read -r k v <<<"$kv"
  got=$(curve "$TMP/c.txt" "$k")
  [ -n "$got" ] && within "$got" "$v" 1e-3 && ok "derive: $k $got (computed from the sample: $(printf %.4g "$v"))" || fail "derive: $k '$got', want $v"
done
[ "$(curve "$TMP/c.txt" gpu_type)" = h200 ] && ! grep -qE '^(nvlink_eff|ib_eff|kernel_gap_s) ' "$TMP/c.txt" \
  && ok "derive: gpu_type h200; nvlink_eff, ib_eff, kernel_gap_s left to the model (not measured by the lab)" || fail "derive: $(cat "$TMP/c.txt")"
# the shape the model's flash constants were measured at (docs/gpu.md, B=16 T=1024) gives them back
awk '/^== build\/lab\/flash_attention -B 16/ { on = 1; print; next } /^== / { on = 0 } on' "$SAMPLE" >"$TMP/b16.txt"
bash scripts/step_curves.sh derive "$TMP/b16.txt" h200 >"$TMP/b16c.txt"
for k in flash_fwd_eff flash_bwd_eff; do
  got=$(curve "$TMP/b16c.txt" "$k"); own=$(build/gpu_spec h200 | awk -v k="$k" '$1 == k { print $2 }')
  [ -n "$got" ] && within "$got" "$own" 0.01 && ok "B=16 T=1024 alone: $k $got, the model's own $own (measured there)" || fail "B=16 T=1024: $k '$got' vs the model's $own"
done
grep -qE '^(gemm_eff|mem_eff) ' "$TMP/b16c.txt" && fail "derive: a share from no rows: $(cat "$TMP/b16c.txt")" || ok "derive: no GEMM or memory-bound rows, no gemm_eff or mem_eff"
printf 'nothing of the lab here\n' >"$TMP/empty.log"
expect_fail 1 "holds no timed row" bash scripts/step_curves.sh derive "$TMP/empty.log" h200
expect_fail 1 "gemm_eff [0-9.]+, flash_fwd_eff [0-9.]+, mem_eff [0-9.]+ above 1: the GPU measured is faster than the v100-32gb row" bash scripts/step_curves.sh derive "$SAMPLE" v100-32gb
expect_fail 2 "'h300' is not in the GPU table" bash scripts/step_curves.sh derive "$SAMPLE" h300

# ---- 2. the file applied
G=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --micro-batch-size 16 --global-batch-size 16 --bf16 --gpu-type h200
   --attention-impl flash)  # (auto would take the GEMM path once flash_bwd_eff is halved below)
plan() { # json file, flags...
  local f=$1; shift; rm -f "$f"; $KEEL --dry-run "$@" --dry-run-json "$f" >"$f.out" 2>&1 || [ $? -eq 1 ] || fail "plan $*: $(tail -2 "$f.out")"; }
with() { printf '%s\n' "$@" >"$TMP/w.txt"; echo "$TMP/w.txt"; }
plan "$TMP/own.json" "${G[@]}"
build/gpu_spec h200 | awk '$1 ~ /_eff$|^kernel_gap_s$/' >"$TMP/same.txt"
plan "$TMP/same.json" "${G[@]}" --step-curves "$TMP/same.txt"
cmp -s "$TMP/own.json" "$TMP/same.json" && grep -q "^--step-curves $TMP/same.txt: changed nothing; unchanged: gemm_eff 0.8, " "$TMP/same.json.out" \
  && ok "every key at the model's own value: the plan is the same to the byte ($(wc -l <"$TMP/same.txt") keys), and it says it changed nothing" \
  || fail "own values: $(diff "$TMP/own.json" "$TMP/same.json"; grep step-curves "$TMP/same.json.out")"
grep -q "step-curves" "$TMP/own.json.out" && fail "a plan without --step-curves mentions it" || ok "without --step-curves, no curves line"
own_bwd=$(build/gpu_spec h200 | awk '$1 == "flash_bwd_eff" { print $2 }'); own_fwd=$(build/gpu_spec h200 | awk '$1 == "flash_fwd_eff" { print $2 }')
half_bwd=$(python3 -c "print('%g' % ($own_bwd / 2))")
plan "$TMP/bwd.json" "${G[@]}" --step-curves "$(with "gpu_type h200" "flash_bwd_eff $half_bwd  # half")"
# the flash backward's compute at the model's share of 989 TFLOP/s: 5 causal half-products per layer,
# 12 layers; at half the share it takes that time once more, and only compute moves
d=$(python3 -c "print(12 * 5 * (2 * 16 * 12 * 1024 * 1024 / 2 * 64) / (989e12 * $own_bwd))")
r=$(python3 -c "
import json; a = json.load(open('$TMP/own.json')); b = json.load(open('$TMP/bwd.json')); d = $d
print(abs((b['step_seconds'] - a['step_seconds']) / d - 1) < 1e-9 and b['breakdown']['optimizer'] == a['breakdown']['optimizer'],
      '%.3f ms' % (1e3 * (b['step_seconds'] - a['step_seconds'])))")
[ "${r%% *}" = True ] && ok "flash_bwd_eff halved: the step grows by the flash backward's time, ${r#* } (computed: $(python3 -c "print('%.3f' % ($d * 1e3))") ms)" \
  || fail "flash_bwd_eff halved: $r vs $d s"
grep -q "^--step-curves $TMP/w.txt (measured on h200): flash_bwd_eff $own_bwd -> $half_bwd; unchanged: gemm_eff 0.8, flash_fwd_eff $own_fwd, mem_eff 0.8" "$TMP/bwd.json.out" \
  && ok "the start-up line names the file, what it changed and what it left" || fail "curves line: $(grep step-curves "$TMP/bwd.json.out")"
plan "$TMP/mem.json" "${G[@]}" --step-curves "$(with "mem_eff 0.4")"
r=$(json "$TMP/mem.json" "breakdown['optimizer']")
python3 -c "import json; a = json.load(open('$TMP/own.json')); exit(0 if abs($r / a['breakdown']['optimizer'] / 2 - 1) < 1e-12 else 1)" \
  && ok "mem_eff halved: the optimizer pass (memory-bound only) takes twice as long" || fail "mem_eff halved: optimizer $r"
# the GEMM attention path: gemm_eff moves compute (GEMMs and memory passes together: more, less than double)
plan "$TMP/g.json" "${G[@]}" --attention-impl gemm
plan "$TMP/g2.json" "${G[@]}" --attention-impl gemm --step-curves "$(with "gemm_eff 0.4")"
r=$(python3 -c "import json; a = json.load(open('$TMP/g.json'))['breakdown']; b = json.load(open('$TMP/g2.json'))['breakdown']; print('%.3f' % (b['compute'] / a['compute']), 1.3 < b['compute'] / a['compute'] < 2 and b['optimizer'] == a['optimizer'])")
[ "${r#* }" = True ] && ok "gemm_eff halved: compute x${r%% *} (its GEMMs doubled, its memory passes not)" || fail "gemm_eff: $r"
TP=(--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --micro-batch-size 1 --global-batch-size 64 --bf16 --gpu-type a100-80gb
    --tensor-model-parallel-size 8 --data-parallel-size 2 --grad-bucket-mb 0)
plan "$TMP/tp.json" "${TP[@]}"
plan "$TMP/tp2.json" "${TP[@]}" --step-curves "$(with "nvlink_eff 0.375" "ib_eff 0.425")"
r=$(python3 -c "
import json; a = json.load(open('$TMP/tp.json'))['breakdown']; b = json.load(open('$TMP/tp2.json'))['breakdown']
print('%.2f %.2f' % (b['tp_comm'] / a['tp_comm'], b['dp_comm'] / a['dp_comm']), 1 < b['tp_comm'] / a['tp_comm'] < 2 and 1.5 < b['dp_comm'] / a['dp_comm'] <= 2 and b['compute'] == a['compute'])")
[ "${r##* }" = True ] && ok "nvlink_eff and ib_eff halved (TP 8 in a node, DP across 2): TP communication x$(cut -d' ' -f1 <<<"$r"), DP x$(cut -d' ' -f2 <<<"$r") (bandwidth doubled, latency not)" \
  || fail "links: $r"
plan "$TMP/gap.json" "${G[@]}" --step-curves "$(with "kernel_gap_s 0")"
r=$(python3 -c "import json; a = json.load(open('$TMP/own.json')); b = json.load(open('$TMP/gap.json')); print('%.3f' % (1e3 * (a['step_seconds'] - b['step_seconds'])), 0 < a['step_seconds'] - b['step_seconds'] < 0.05 * a['step_seconds'])")
[ "${r#* }" = True ] && ok "kernel_gap_s 0: the step is ${r%% *} ms shorter (the launch gaps)" || fail "kernel_gap_s: $r"

# ---- 3. malformed files: refused with their line
bad() { # line, pattern, file content lines...
  local line=$1 pattern=$2; shift 2
  printf '%s\n' "# a curves file" "$@" >"$TMP/bad.txt"
  expect_fail 2 "^error: --step-curves $TMP/bad.txt:$line: $pattern" $KEEL --dry-run "${G[@]}" --step-curves "$TMP/bad.txt"
}
bad 3 "unknown key 'gem_eff' \(the keys: gpu_type, gemm_eff," "gpu_type h200" "gem_eff 0.8"
bad 2 "mem_eff has no value" "mem_eff   # the value forgotten"
bad 2 "gemm_eff: 'abc' is not a number" "gemm_eff abc"
bad 2 "gemm_eff: '80%' is not a number" "gemm_eff 80%"
bad 2 "flash_fwd_eff: 'nan' is not a number" "flash_fwd_eff nan"
bad 3 "flash_bwd_eff 0 is out of range \(a share: 0 < value <= 1\)" "" "flash_bwd_eff 0"
bad 2 "mem_eff 80 is out of range" "mem_eff 80"
bad 2 "ib_eff -0.5 is out of range" "ib_eff -0.5"
bad 2 "kernel_gap_s 2 is out of range \(0 <= seconds <= 0.001\)" "kernel_gap_s 2"
bad 2 "gemm_eff takes one value, found 2" "gemm_eff 0.7 0.8"
bad 3 "gemm_eff given again \(first on line 2\)" "gemm_eff 0.7" "gemm_eff 0.8"
bad 2 "gpu_type 'h300' is not in the GPU table" "gpu_type h300"
bad 2 "gpu_type has no value" "gpu_type"
bad 3 "measured on a100-80gb, but the plan is for h200" "gemm_eff 0.7" "gpu_type a100-80gb"
expect_fail 2 "^error: --step-curves $TMP/none.txt: cannot read it" $KEEL --dry-run "${G[@]}" --step-curves "$TMP/none.txt"
expect_fail 2 "give them with --dry-run" $KEEL "${TINY[@]}" --train-iters 1 --step-curves "$TMP/same.txt"

# ---- 4. compare: what gpu_check.sh puts in its report
printf '%s\n' "GPU: NVIDIA H200 | bf16 dense peak: 989 TFLOP/s | 10 iterations, median of 2..10" \
  "124M   L12 C768 NH12 T1024 B16                39.6       413518     355.7   36.0%      8.4 GiB" >"$TMP/bench.log"
out=$(bash scripts/step_curves.sh compare "$TMP/c.txt" "$TMP/bench.log" h200); rc=$?
echo "$out"
plan "$TMP/c124.json" "${G[@]}" --step-curves "$TMP/c.txt"
row=$(python3 -c "
import json; a = json.load(open('$TMP/own.json'))['step_seconds'] * 1e3; b = json.load(open('$TMP/c124.json'))['step_seconds'] * 1e3
print('%.1f (%+.1f%%) %.1f (%+.1f%%)' % (a, 100 * (a / 39.6 - 1), b, 100 * (b / 39.6 - 1)))")
got=$(awk '$1 == "124M" { $1 = $2 = $3 = $4 = $5 = $6 = $7 = ""; print }' <<<"$out" | xargs)
[ $rc -eq 0 ] && [ "$got" = "$row" ] && grep -qE '^1\.5B .* - +[0-9.]+ +[0-9.]+$' <<<"$out" \
  && ok "compare: 124M measured 39.6 ms beside the plans ($row); 1.5B has no measured row: '-'" || fail "compare (exit $rc): '$got' vs '$row'"
out=$(bash scripts/step_curves.sh compare "$TMP/c.txt" "$TMP/bench.log" a100-80gb 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "measured on h200, but the plan is for a100-80gb" <<<"$out" && ok "compare: a plan that fails (the file is another GPU's) fails the step, its error shown" \
  || fail "compare on another GPU: exit $rc: $out"
finish
