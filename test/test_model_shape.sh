#!/usr/bin/env bash
# The model's shape from Megatron-DeepSpeed's flags:
#   1. --ffn-hidden-size (any MLP width): F = 3C = 96 at C = 32 trains; the checkpoint records
#      model.ffn_hidden_size 96 and holds exactly the parameters of a 96-wide MLP (model.bin's size:
#      a run still 4C wide fails it); resume is byte-identical to the straight run; TP=2 at
#      F = 100 (50 per rank, a multiple of nothing special) = one process within 1e-5 (the TP tests'
#      tolerance); the emulated CUDA trainer = the CPU trainer within 2e-5 (test_cuda_trainer's);
#      llm.c export/load and a width TP does not divide are refused with one error line.
#      Negative control for "trains at F": a 4C run's losses differ from the F run's.
#   2. --pp-partition-method: the transformer layers per stage for several (L, P) under type:transformer,
#      type:transformer|embedding and uniform equal DeepSpeed's partition of GPTModelPipe's layer
#      list, computed here in python from DeepSpeed's algorithm (partition_balanced/_lprobe,
#      partition_uniform); a PP=2 run at L=3 with uniform holds layers 0-0 | 1-2 (keel's own split
#      is 0-1 | 2-2: the negative control) and matches one process within 1e-5; 'parameters' and a
#      partition that leaves a stage without a layer are refused.
#   3. vocabulary padding as Megatron (multiple of make-vocab-size-divisible-by x TP), canonical in
#      checkpoints (TP=2 -> TP=1 -> TP=2 byte-identical), --pad-vocab-size-to exact, bad values refused;
#   4. --use-bnb-optimizer = --optimizer adam8bit --stable-embedding, also at TP=2 (test_tp_adam8bit).
# The gradient of the model at F = 13 is checked by test_gradcheck.cpp.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPI=(mpirun --oversubscribe -np)
run() {  # name np binary args...
  local name=$1 np=$2 bin=$3; shift 3
  timeout -k 10 300 "${MPI[@]}" "$np" $bin "$@" --metrics-file "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1 \
    || { fail "$name: run failed"; tail -8 "$TMP/$name.log"; }
}
ARGS=("${TINY[@]}" --hidden-dropout 0 --attention-dropout 0 --train-iters 4 --eval-interval 2 --eval-iters 1)

# ---- 1. --ffn-hidden-size -------------------------------------------------------------------------
run f96 1 $KEEL "${ARGS[@]}" --ffn-hidden-size 96 --save "$TMP/f96" --save-interval 2
run f128 1 $KEEL "${ARGS[@]}" --save "$TMP/f128" --save-interval 4
grep -q "model: L=2 C=32 F=96 " "$TMP/f96.log" && ok "start-up line names F=96" || fail "no F=96 in: $(grep '^model:' "$TMP/f96.log")"
grep -qx "model.ffn_hidden_size = 96" "$TMP/f96/iter_0000004/state.txt" && ok "checkpoint records model.ffn_hidden_size = 96" \
  || fail "state.txt: $(grep ffn "$TMP/f96/iter_0000004/state.txt")"
# against the 4C checkpoint: L x (2C + 1) x (128 - 96) fewer floats (fcw, fcprojw, fcb)
want=$(( $(stat -c %s "$TMP/f128/iter_0000004/model.bin") - 4 * 2 * (2*32 + 1) * 32 ))
[ "$(stat -c %s "$TMP/f96/iter_0000004/model.bin")" -eq "$want" ] && ok "model.bin holds a 96-wide MLP ($want bytes)" \
  || fail "model.bin is $(stat -c %s "$TMP/f96/iter_0000004/model.bin") bytes, want $want"
compare_jsonl "$TMP/f96.jsonl" "$TMP/f128.jsonl" 1e-6 >/dev/null 2>&1 && fail "F=96 trains exactly like 4C (inert flag)" \
  || ok "F=96 and 4C runs differ (the width is used)"
python3 -c "import json,math,sys; r=[x for x in map(json.loads, open(sys.argv[1])) if 'lm_loss' in x]; sys.exit(not (len(r)==4 and all(math.isfinite(x['lm_loss']) for x in r) and r[-1]['lm_loss']<r[0]['lm_loss']))" \
  "$TMP/f96.jsonl" && ok "F=96 trains (4 iterations, loss falls)" || fail "F=96 did not train"
# resume: 2 iterations, stop, --load, 2 more = 4 straight
run half 1 $KEEL "${ARGS[@]}" --ffn-hidden-size 96 --exit-interval 2 --save "$TMP/res" --save-interval 2
run rest 1 $KEEL "${ARGS[@]}" --ffn-hidden-size 96 --load "$TMP/res" --save "$TMP/res" --save-interval 2
grep -q "successfully loaded checkpoint" "$TMP/rest.log" || fail "the resume did not load the F=96 checkpoint"
same_checkpoint "F=96 resume at 2 = straight" "$TMP/f96" "$TMP/res" 4
expect_fail 1 "model.ffn_hidden_size = 96 but this run has 128" $KEEL "${ARGS[@]}" --load "$TMP/f96"
# TP=2 at F=100
run t1 1 $KEEL "${ARGS[@]}" --ffn-hidden-size 100
run t2 2 $KEEL "${ARGS[@]}" --ffn-hidden-size 100 --tensor-model-parallel-size 2
grep -q "MLP columns 0-49" "$TMP/t2.log" && ok "TP=2: rank 0 holds MLP columns 0-49 of 100" || fail "TP=2 slice: $(grep 'tensor parallel' "$TMP/t2.log")"
r=$(compare_jsonl "$TMP/t2.jsonl" "$TMP/t1.jsonl" 1e-5 2>&1) && ok "F=100: TP=2 = one process within 1e-5 ($r)" || fail "F=100 TP=2: $r"
CUDA=${KEEL_CUDA_TRAINER:-build/train_gpt_emu}
if [ -x "$CUDA" ]; then
  timeout -k 10 300 $CUDA "${ARGS[@]}" --ffn-hidden-size 100 --fp32 --metrics-file "$TMP/cu.jsonl" >"$TMP/cu.log" 2>&1 || { fail "CUDA run"; tail -5 "$TMP/cu.log"; }
  r=$(compare_jsonl "$TMP/cu.jsonl" "$TMP/t1.jsonl" 2e-5 2>&1) && ok "F=100: CUDA trainer ($CUDA) = CPU within 2e-5 ($r)" || fail "F=100 CUDA: $r"
else
  fail "$CUDA not built (make build/train_gpt_emu)"
fi
expect_fail 2 "ffn-hidden-size 100 is not divisible by --tensor-model-parallel-size 3" $KEEL "${ARGS[@]}" --ffn-hidden-size 100 \
  --tensor-model-parallel-size 3 --num-attention-heads 3 --hidden-size 30 --dry-run
expect_fail 2 "export-llmc: llm.c's model file has no MLP width" $KEEL "${ARGS[@]}" --ffn-hidden-size 96 --export-llmc "$TMP/x.bin"

# ---- 2. --pp-partition-method ---------------------------------------------------------------------
cat >"$TMP/pp.cpp" <<'EOF'
#include <cstdio>
#include <string>
#include "llmc/pp_partition.h"
int main() {
    const char* methods[] = {"type:transformer", "type:transformer|embedding", "uniform"};
    for (int L : {3, 4, 5, 7, 10, 13, 24, 70})
        for (int P : {2, 3, 4, 12})
            for (const char* m : methods)
                for (int half : {0, 1}) {
                    if (P > L) continue;
                    std::vector<std::string> s = pp_gpt_specs(L, half);
                    std::vector<int> parts = std::string(m) == "uniform" ? pp_partition_uniform((int)s.size(), P) : [&] {
                        std::vector<double> w;
                        for (auto& n : s) w.push_back(std::string(m) == "type:transformer" ? n == "ParallelTransformerLayerPipe"
                                                                                             : n == "ParallelTransformerLayerPipe" || n == "EmbeddingPipe");
                        return pp_partition_balanced(w, P);
                    }();
                    printf("%d %d %s %d", L, P, m, half);
                    for (int x : parts) printf(" %d", x);
                    printf("\n");
                }
}
EOF
g++ -std=c++17 -O1 -I. "$TMP/pp.cpp" -o "$TMP/pp" 2>"$TMP/pp.err" || { fail "building the partition driver"; cat "$TMP/pp.err"; }
"$TMP/pp" >"$TMP/pp.keel"
python3 - "$TMP/pp.keel" <<'PY' && ok "layer partitions = DeepSpeed's (python) for $(wc -l <"$TMP/pp.keel") (L, P, method, fp16) cases" || fail "partitions differ"
# DeepSpeed's deepspeed/runtime/utils.py (BigScience's DeepSpeed), written out here on its own.
import re, sys
from bisect import bisect_left
def uniform(n, m):
    if n <= m: return [min(p, n) for p in range(m + 1)]
    c = n // m
    return [min(c * p, n) for p in range(m)] + [n]
def lprobe(w, m, b):
    n = len(w); parts = [0] + [n] * m; bsum = b; c = n // m; step = c
    for p in range(1, m):
        while step < n and w[step] < bsum: step += c
        parts[p] = bisect_left(w, bsum, lo=step - c, hi=min(step, n))
        if parts[p] == n: return parts, w[-1] - w[parts[p - 1]] < b
        bsum = w[parts[p] - 1] + b
    return parts, bsum >= w[-1]
def balanced(weights, m, eps=1e-3):
    if len(weights) <= m: return uniform(len(weights), m)
    w = [sum(weights[:i + 1]) for i in range(len(weights))]
    lo, hi = w[-1] / m, w[-1]
    while hi > lo + eps:
        mid = lo + (hi - lo) / 2
        if lprobe(w, m, mid)[1]: hi = mid
        else: lo = mid + eps
    return lprobe(w, m, hi)[0]
bad = 0
for line in open(sys.argv[1]):
    f = line.split(); L, P, meth, half = int(f[0]), int(f[1]), f[2], int(f[3]); got = [int(x) for x in f[4:]]
    specs = ["_to_float16", "EmbeddingPipe", "<lambda>"] + ["ParallelTransformerLayerPipe"] * L + ["<lambda>", "MixedFusedLayerNorm", "EmbeddingPipe"] + (["float16_to_fp32"] if half else [])
    if meth == "uniform": want = uniform(len(specs), P)
    else:
        rx = re.compile(meth.split(":", 1)[1], re.IGNORECASE)
        want = balanced([1 if rx.search(n) else 0 for n in specs], P)
    if got != want: print(f"L={L} P={P} {meth} half={half}: keel {got}, DeepSpeed {want}"); bad += 1
sys.exit(bad)
PY
PPARGS=("${ARGS[@]}" --num-layers 3 --global-batch-size 8)
run pp1 1 $KEEL "${PPARGS[@]}"
run ppu 2 $KEEL "${PPARGS[@]}" --pipeline-model-parallel-size 2 --pp-partition-method uniform
grep -q "stage 0 holds layers 0-0, the embeddings" "$TMP/ppu.log" \
  && ok "PP=2, L=3: uniform puts 1 layer on stage 0 (keel's split: 2)" || fail "uniform split: $(grep 'pipeline:' "$TMP/ppu.log")"
r=$(compare_jsonl "$TMP/ppu.jsonl" "$TMP/pp1.jsonl" 1e-5 2>&1) && ok "PP=2 uniform = one process within 1e-5 ($r)" || fail "PP=2 uniform: $r"
expect_fail 2 "parameters .*is not built" $KEEL "${PPARGS[@]}" --pipeline-model-parallel-size 2 --pp-partition-method parameters --dry-run
expect_fail 2 "puts no transformer layer on stage 0 of 3" $KEEL "${PPARGS[@]}" --num-layers 4 --global-batch-size 12 \
  --pipeline-model-parallel-size 3 --pp-partition-method uniform --dry-run

# ---- 3. Megatron's vocabulary padding, --pad-vocab-size-to ---------------------------------------
# In memory: V = 50257 padded to a multiple of 128 x TP (TP=2: 50432, 175 dummy tokens; TP=1: 50304);
# checkpoints hold the TP-independent 50304 rows. Negative control: keel's old padding (50304 at any
# TP) prints 47 dummy tokens at TP=2 and gives rank 0 rows 0-25151.
VARGS=("${ARGS[@]}" --train-iters 3 --eval-interval 3)
run v2 2 $KEEL "${VARGS[@]}" --tensor-model-parallel-size 2 --save "$TMP/v2" --save-interval 3
grep -q "^ > padded vocab (size: 50257) with 175 dummy tokens (new size: 50432)" "$TMP/v2.log" \
  && grep -q "vocabulary rows 0-25215" "$TMP/v2.log" && ok "TP=2 pads V=50257 to 50432 as Megatron (rank 0 holds rows 0-25215)" \
  || fail "TP=2 padding: $(grep -E 'padded vocab|tensor parallel' "$TMP/v2.log")"
grep -q "^ > padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)" "$TMP/f128.log" && ok "TP=1 pads to 50304" || fail "TP=1 padding line"
grep -qx "model.padded_vocab_size = 50304" "$TMP/v2/iter_0000003/state.txt" && ok "the TP=2 checkpoint stores the canonical 50304 rows" \
  || fail "state.txt: $(grep padded "$TMP/v2/iter_0000003/state.txt")"
run v1 1 $KEEL "${VARGS[@]}" --load "$TMP/v2" --save "$TMP/v1"
same_checkpoint "TP=2 checkpoint (50432 rows in memory) re-saved at TP=1" "$TMP/v2" "$TMP/v1" 3
run v2b 2 $KEEL "${VARGS[@]}" --tensor-model-parallel-size 2 --load "$TMP/v1" --save "$TMP/v2b"
same_checkpoint "that copy re-saved at TP=2" "$TMP/v2" "$TMP/v2b" 3
run p2 2 $KEEL "${VARGS[@]}" --pad-vocab-size-to 50560 --tensor-model-parallel-size 2 --save "$TMP/p2" --save-interval 3
grep -q "with 303 dummy tokens (new size: 50560)" "$TMP/p2.log" && grep -q "vocabulary rows 0-25279" "$TMP/p2.log" \
  && grep -qx "model.padded_vocab_size = 50560" "$TMP/p2/iter_0000003/state.txt" && ok "--pad-vocab-size-to 50560 at TP=2: exactly 50560 rows" \
  || fail "--pad-vocab-size-to: $(grep -E 'padded vocab|tensor parallel' "$TMP/p2.log")"
r=$(compare_jsonl "$TMP/p2.jsonl" "$TMP/v2.jsonl" 1e-5 2>&1) && ok "--pad-vocab-size-to: the same losses as Megatron's padding within 1e-5 ($r)" || fail "--pad-vocab-size-to: $r"
expect_fail 2 "pad-vocab-size-to 50176 is smaller than --vocab-size 50257" $KEEL "${VARGS[@]}" --pad-vocab-size-to 50176
expect_fail 2 "pad-vocab-size-to 50300 is not divisible by --make-vocab-size-divisible-by 128" $KEEL "${VARGS[@]}" --pad-vocab-size-to 50300
expect_fail 2 "pad-vocab-size-to 50304 is not divisible by --tensor-model-parallel-size 5" $KEEL "${VARGS[@]}" --pad-vocab-size-to 50304 \
  --tensor-model-parallel-size 5 --num-attention-heads 5 --hidden-size 30 --dry-run

# ---- 4. --use-bnb-optimizer: BigScience's bitsandbytes Adam8bit + StableEmbedding ----------------
run bnb 1 $KEEL "${VARGS[@]}" --use-bnb-optimizer
run a8 1 $KEEL "${VARGS[@]}" --optimizer adam8bit --stable-embedding
cmp -s <(strip_timing "$TMP/bnb.jsonl") <(strip_timing "$TMP/a8.jsonl") && grep -q "optimizer: adam8bit" "$TMP/bnb.log" \
  && ok "--use-bnb-optimizer = --optimizer adam8bit --stable-embedding (records identical)" || fail "--use-bnb-optimizer differs"
run bnb2 2 $KEEL "${VARGS[@]}" --use-bnb-optimizer --tensor-model-parallel-size 2  # BigScience ran it at TP=4
r=$(compare_jsonl "$TMP/bnb2.jsonl" "$TMP/bnb.jsonl" 5e-5 2>&1) && ok "--use-bnb-optimizer at TP=2 = one process within 5e-5 ($r)" || fail "--use-bnb-optimizer TP=2: $r"
finish
