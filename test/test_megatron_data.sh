#!/usr/bin/env bash
# Megatron's indexed data (llmc/megatron_data.h, dev/megatron_data), checked against an independent
# reference (test/megatron_ref.py, written from Megatron-DeepSpeed's documented layout and rules):
#   1. layout: keel reads python's .idx/.bin; the tool's --from-shards output is byte-identical to what
#      python writes for the same documents; --from-text writes one document per line with EOD appended.
#   2. blends: every training sample's dataset is the one Megatron's build_blending_indices picks
#      (trainer's token dump; which of its samples, in which order: test_megatron_order). Negative
#      control: an inert blend (only the first dataset) or another rule (random, round-robin) assigns
#      other datasets.
#   3. --split carving and weighted split paths: the sequence ranges are python's (ties to even: a
#      half-up rounding gives other ranges) and training reads only its range's documents.
#   4. int32 ids: a vocabulary of 70,000 trains on ids up to 69,999; the loss differs from the run on
#      the same data with ids taken mod 65,536 (identical if ids were truncated to uint16).
#   5. bad .idx/.bin and contradictory flags: one error line each.
#   6. determinism and resume on a blend: 6 iterations straight == 3, stop, --load, 3 more (bytes).
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1  # tiny models: threads only contend on a shared machine
TOOL=./megatron_data
REF="python3 test/megatron_ref.py"
for b in $KEEL $TOOL ./batch_lookup; do [ -x $b ] || { fail "$b missing (make $b)"; finish; }; done
D=$TMP/d
mkdir -p $D
# a tiny GPT without data flags (TINY names llm.c shards); vocabulary 3000
MG=(--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 --global-batch-size 4
    --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0 --seed 7
    --log-interval 1 --vocab-size 3000 --hidden-dropout 0 --attention-dropout 0 --eval-iters 1)

# ---- 1. layout ------------------------------------------------------------------------------------
$REF docs $D/a uint16 1 40 0 1000 5 40      # datasets with disjoint id ranges: a token names its dataset
$REF docs $D/b uint16 2 40 1000 2000 5 40
$REF docs $D/c int32 3 40 2000 3000 5 40
$TOOL read $D/c --docs 1000 >$D/c.read 2>&1 || fail "tool read of python's int32 prefix: $(tail -1 $D/c.read)"
python3 - $D/c.read <($REF json $D/c) <<'PY' && ok "keel reads python's int32 .idx/.bin: header and all 40 documents' ids" || fail "keel's read of python's prefix differs"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
ref = json.load(open(sys.argv[2]))
assert "dtype 4 (int32), 40 sequences, 41 document-index entries" in lines[0], lines[0]
got = [list(map(int, l.rsplit(":", 1)[1].split())) for l in lines if l.startswith("document ")]
assert got == ref["docs"], "documents differ"
PY
python3 - $D/s1.bin $D/s2.bin <<'PY'
import sys, random
sys.path.insert(0, "test"); import megatron_ref as m
rng = random.Random(9)
for p in sys.argv[1:]:
    m.write_shard(p, [50256 if rng.random() < 0.02 else rng.randrange(50256) for _ in range(3000)])
PY
$TOOL write --from-shards "$D/s*.bin" --out $D/conv >/dev/null 2>&1 || fail "tool write --from-shards"
python3 - $D <<'PY' && ok "--from-shards: .idx and .bin byte-identical to python's writer (documents end after each EOT)" || fail "--from-shards bytes differ from python's"
import sys, struct
sys.path.insert(0, "test"); import megatron_ref as m
d = sys.argv[1]
toks = []
for p in ("s1", "s2"):
    b = open(f"{d}/{p}.bin", "rb").read()
    toks += struct.unpack_from("<%dH" % ((len(b) - 1024) // 2), b, 1024)
docs, cur = [], []
for t in toks:
    cur.append(t)
    if t == 50256: docs.append(cur); cur = []
if cur: docs.append(cur)
m.write_prefix(f"{d}/ref", docs, "uint16")
for ext in (".idx", ".bin"):
    assert open(f"{d}/ref{ext}", "rb").read() == open(f"{d}/conv{ext}", "rb").read(), ext
PY
printf 'The Fulton County Grand Jury said Friday.\n\n  \nAn investigation of recent primary elections.\nNo evidence.\n' >$D/t.txt
$TOOL write --from-text $D/t.txt --out $D/txt >/dev/null 2>&1 || fail "tool write --from-text"
python3 - <($REF json $D/txt) <<'PY' && ok "--from-text: 3 documents (blank lines skipped), uint16, each ending in EOD 50256" || fail "--from-text layout"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["code"] == 8 and r["doc_idx"] == [0, 1, 2, 3] and len(r["docs"]) == 3, r["doc_idx"]
assert all(d[-1] == 50256 and 50256 not in d[:-1] for d in r["docs"])
assert r["docs"][2][:2] == [2949, 2370], r["docs"][2]  # "No evidence." in GPT-2 BPE
PY

# ---- 2. blends by weight ---------------------------------------------------------------------------
KEEL_DUMP_TOKENS=$D/blend $KEEL "${MG[@]}" --train-iters 12 --data-path 5 $D/a 3 $D/b 2 $D/c --split 100,0,0 >$D/blend.log 2>&1 \
  || fail "blend run: $(grep error $D/blend.log)"
python3 - $D/blend.rank0 $D <<'PY' && ok "blend 5:3:2 over 48 samples: each sample's dataset is Megatron's greedy pick" || fail "blend assignment"
import sys
sys.path.insert(0, "test"); import megatron_ref as m
rows = [list(map(int, l.split())) for l in open(sys.argv[1])]
rows.sort(key=lambda r: r[4])
want = m.blend([5.0, 3.0, 2.0], len(rows))
# (which samples of a dataset, in which order, is test_megatron_order's exact comparison)
for r, (d, k) in zip(rows, want):
    got = {t // 1000 for t in r[5:]}
    assert got == {d}, f"sample {r[4]}: dataset {got}, Megatron's rule says {d}"
counts = [sum(1 for d, _ in want if d == i) for i in range(3)]
assert all(abs(c - w * len(rows)) < 1 for c, w in zip(counts, (0.5, 0.3, 0.2))), counts  # the rule tracks the weights
PY
grep -q "blend of 3 datasets" $D/blend.log && ok "start-up line names the blend" || fail "no blend line"
./batch_lookup "${MG[@]}" --train-iters 12 --data-path 5 $D/a 3 $D/b 2 $D/c --split 100,0,0 --iterations 1-12 --tokens >$D/blend.lookup 2>&1
cmp -s <(sort -n -k1,1 -k2,2 -k3,3 -k4,4 $D/blend.rank0) $D/blend.lookup && ok "batch_lookup --tokens gives the blend's rows exactly" \
  || fail "batch_lookup differs from the blend's dump: $(head -c 300 $D/blend.lookup)"

# ---- 3. --split and weighted split paths -----------------------------------------------------------
$REF labeled $D/L 50
read -r s0 s1 s2 s3 <<<"$($REF split 1,1,2 50)"          # 12.5 twice: ties to even (half-up gives 0 12 25 50)
KEEL_DUMP_TOKENS=$D/split $KEEL "${MG[@]}" --vocab-size 1000 --train-iters 2 --data-path $D/L --split 1,1,2 --eval-interval 2 --eval-iters 1 \
  >$D/split.log 2>&1 || fail "split run: $(grep error $D/split.log)"
grep -q "^train data: $D/L (train part of --split 1,1,2): sequences $s0-$s1 " $D/split.log && \
grep -q "^valid data: $D/L (valid part of --split 1,1,2): sequences $s1-$s2 " $D/split.log \
  && ok "--split 1,1,2 of 50 documents: train $s0-$s1, valid $s1-$s2 (Megatron's rounding)" || fail "split ranges: $(grep -E '^(train|valid) data' $D/split.log) (want $s0 $s1 $s2 $s3)"
python3 - $D/split.rank0 $s0 $s1 <<'PY' && ok "training read only documents $s0-$((s1-1))" || fail "training read outside its split"
import sys
lo, hi = int(sys.argv[2]), int(sys.argv[3])
docs = {t // 20 for l in open(sys.argv[1]) for t in map(int, l.split()[5:])}
assert docs and min(docs) >= lo and max(docs) < hi, sorted(docs)
PY
read -r a0 a1 <<<"$($REF range 0:0.6 40)"; read -r b0 b1 <<<"$($REF range 0.2:1 40)"; read -r v0 v1 <<<"$($REF range 0.6:1 40)"
echo "\"TRAIN: 0.7 0:0.6 $D/a, 0.3 0.2:1 $D/b\"" >$D/train_paths.txt
$KEEL "${MG[@]}" --train-iters 1 --train-weighted-split-paths-path $D/train_paths.txt --valid-weighted-split-paths "VALID: 1 0.6:1 $D/a" \
  --eval-interval 1 --eval-iters 1 >$D/wsp.log 2>&1 || fail "weighted split paths run: $(grep error $D/wsp.log)"
grep -q "^train data: blend of 2 datasets.*$D/a (0:0.6): sequences $a0-$a1 .*$D/b (0.2:1): sequences $b0-$b1 " $D/wsp.log && \
grep -q "^valid data: $D/a (0.6:1): sequences $v0-$v1 " $D/wsp.log \
  && ok "weighted split paths: train a $a0-$a1 + b $b0-$b1 blended, valid a $v0-$v1" || fail "weighted split paths: $(grep -E '^(train|valid) data' $D/wsp.log)"

# ---- 4. int32 ids, vocabulary > 65,536 -------------------------------------------------------------
$REF docs $D/big int32 4 30 60000 70000 20 60   # most ids above 65,535
$REF clamp $D/big $D/low
for p in big low; do
  extra=(); [ $p = big ] && extra=(--sample-interval 2 --sample-length 16)
  $KEEL "${MG[@]}" --vocab-size 70000 --train-iters 2 --data-path $D/$p --split 1 --metrics-file $D/$p.jsonl "${extra[@]}" >$D/$p.log 2>&1 \
    || fail "vocabulary 70000 on $p: $(grep error $D/$p.log)"
done
python3 - $D/big.jsonl $D/low.jsonl <<'PY' && ok "vocabulary 70,000 trains on int32 ids; ids > 65,535 reach the embedding (loss differs from the mod-65,536 run)" || fail "int32 ids"
import json, math, sys
a = [json.loads(l)["lm_loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["lm_loss"] for l in open(sys.argv[2])]
assert len(a) == 2 and all(math.isfinite(x) for x in a + b), (a, b)
assert abs(a[0] - b[0]) > 1e-6, f"same loss {a[0]} with ids mod 65536: the high ids never reached the model"
PY
grep -q "\[int32 ids\]" $D/big.log || fail "start-up line lacks the int32 dtype"
text_samples $D/big.log | grep -qE "<\|id [0-9]{5}\|>" && ok "a text sample of the 70,000-id model shows ids past GPT-2's as <|id N|>" \
  || fail "no text sample with ids past the tokenizer: $(text_samples $D/big.log | head -3)"

# ---- 5. bad inputs: one error line each ------------------------------------------------------------
bad() {  # name python-edit: a copy of $D/a corrupted by the python statement (b: the .idx bytes, t: the .bin bytes)
  cp $D/a.idx $D/$1.idx; cp $D/a.bin $D/$1.bin
  python3 - $D/$1 "$2" <<'PY'
import sys, struct
p = sys.argv[1]
b = bytearray(open(p + ".idx", "rb").read()); t = bytearray(open(p + ".bin", "rb").read())
exec(sys.argv[2])
open(p + ".idx", "wb").write(b); open(p + ".bin", "wb").write(t)
PY
}
bad trunc 'b = b[:-5]';                 expect_fail 1 "trunc\.idx'.*need 842 bytes but the file has 837 \(truncated\)" $TOOL read $D/trunc
bad magic 'b[0:7] = b"NOTMMAP"';        expect_fail 1 "magic\.idx'.*bad magic" $TOOL read $D/magic
bad legacy 'b[0:9] = b"TNTIDX\0\0\0"';  expect_fail 1 "legacy.*TNTIDX.*mmap" $TOOL read $D/legacy
bad dtype 'b[17] = 9';                  expect_fail 1 "unknown dtype code 9" $TOOL read $D/dtype
bad float 'b[17] = 6';                  expect_fail 1 "float32.*cannot hold token ids" $TOOL read $D/float
bad pointer 'struct.pack_into("<q", b, 34 + 4*40 + 8*39, 1 << 40)'; expect_fail 1 "pointer of sequence 39 .*disagree" $TOOL read $D/pointer
bad sizes 'struct.pack_into("<i", b, 34, struct.unpack_from("<i", b, 34)[0] + 1)'; expect_fail 1 "pointer of sequence 1 " $TOOL read $D/sizes
bad bin 't = t[:-2]';                   expect_fail 1 "bin': truncated: the index's sizes add up to" $TOOL read $D/bin
bad docidx 'struct.pack_into("<q", b, len(b) - 8, 39)'; expect_fail 1 "document index ends at 39, not at the sequence count 40" $TOOL read $D/docidx
bad counts 'struct.pack_into("<Q", b, 18, 41)'; expect_fail 1 "counts \(41 sequences" $TOOL read $D/counts
expect_fail 1 "magic\.idx': bad magic" $KEEL "${MG[@]}" --train-iters 1 --data-path $D/magic
expect_fail 1 "a\.bin': token id [0-9]+ at token [0-9]+ \(sequence [0-9]+\) is outside the vocabulary \[0, 500\)" $KEEL "${MG[@]}" --vocab-size 500 --train-iters 1 --data-path $D/a
expect_fail 2 "brown_val\.bin': llm.c shards store uint16 token ids, which cannot reach --vocab-size 70000" $KEEL "${MG[@]}" --vocab-size 70000 --train-iters 1 --train-data-path data/brown/brown_val.bin
expect_fail 2 "data-impl lazy: keel reads Megatron's mmap format" $KEEL "${MG[@]}" --train-iters 1 --data-path $D/a --data-impl lazy
expect_fail 2 "split '1,x': 'x' is not a non-negative number" $KEEL "${MG[@]}" --train-iters 1 --data-path $D/a --split 1,x
expect_fail 2 "data-path: give PREFIX, or WEIGHT PREFIX pairs" $KEEL "${MG[@]}" --train-iters 1 --data-path 0.5 $D/a 0.5
expect_fail 2 "one source of training data" $KEEL "${MG[@]}" --train-iters 1 --data-path $D/a --train-data-path data/brown/brown_val.bin
expect_fail 2 "validation part of --split '100,0,0' holds no sample" $KEEL "${MG[@]}" --train-iters 1 --data-path $D/a --split 100,0,0 --eval-interval 1
expect_fail 2 "brown_val.bin' is not a Megatron prefix" $KEEL "${MG[@]}" --train-iters 1 --data-path data/brown/brown_val.bin
echo '"T1: 1 0:1 x" "T2: 1 0:1 y"' >$D/two_groups.txt
expect_fail 2 "more than one dataset group" $KEEL "${MG[@]}" --train-iters 1 --train-weighted-split-paths-path $D/two_groups.txt

# ---- 6. determinism and resume on a blend ----------------------------------------------------------
RUN=("${MG[@]}" --train-iters 6 --data-path 0.6 $D/a 0.4 $D/c --split 90,10,0 --eval-interval 2 --eval-iters 1 --save-interval 3)
$KEEL "${RUN[@]}" --save $D/straight --metrics-file $D/straight.jsonl >$D/st.log 2>&1 || fail "straight run: $(grep error $D/st.log)"
$KEEL "${RUN[@]}" --exit-interval 3 --save $D/resumed --metrics-file $D/resumed.jsonl >$D/r1.log 2>&1 || fail "first half: $(grep error $D/r1.log)"
$KEEL "${RUN[@]}" --load $D/resumed --save $D/resumed --metrics-file $D/resumed.jsonl >$D/r2.log 2>&1 || fail "second half: $(grep error $D/r2.log)"
grep -q "successfully loaded checkpoint" $D/r2.log || fail "resume did not load"
cmp -s <(strip_timing $D/straight.jsonl) <(strip_timing $D/resumed.jsonl) && ok "blend: every JSONL record identical after resume" || fail "blend: records differ after resume"
same_checkpoint "blend resumed at 3" $D/straight $D/resumed 6
finish
