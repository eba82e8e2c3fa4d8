#!/usr/bin/env bash
# Megatron's sample order, end to end: for Megatron indexed data keel trains on exactly the samples
# Megatron-DeepSpeed's GPTDataset / BlendableDataset / MegatronPretrainingSampler give, in the same
# order, on every data-parallel rank. The reference is test/megatron_order_ref.py (written from
# Megatron-DeepSpeed's documented method, with numpy's own RandomState); every comparison is of the
# token ids of every row (iteration, rank, micro-batch step, row, sample number, T+1 ids):
#   1. one prefix, --split 80,15,5, several epochs, seeds 1234 and 7; the last epoch shuffled apart
#      (train-iters 40) and kept in the global shuffle (train-iters 43); --train-samples;
#   2. a blend of three prefixes 5:3:2 (one with empty documents) with --split 90,10,0;
#   3. weighted split paths (BigScience) blending two prefixes' ranges;
#   4. DP 2: the lookup at --data-parallel-size 2, and the trainer itself under mpirun -np 2 (each
#      rank's token dump);
#   5. the trainer on one process with --skip-train-iteration-range 3-5: the other iterations read the
#      reference's rows, the skipped ones none; and the validation set is built for Megatron's
#      (train_iters // eval_interval + 1) x eval_iters x global batch samples;
#   6. negative controls: another seed, or keel's former order (each part cut in .bin order), differ;
#      a seed numpy refuses (past 2^32-1) is refused with one line;
#   7. checkpoints record the order (data.order); one from before the record is refused with one line
#      (its consumed samples counted keel's former order), and --finetune still takes its weights.
# The unit side (the RNG against numpy, the three index arrays) is build/test_megatron_index.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 LC_ALL=C
LOOKUP=${LOOKUP:-./batch_lookup}
for b in $KEEL $LOOKUP; do [ -x $b ] || { fail "$b missing (make $b)"; finish; }; done
PY=""
for p in python3 /usr/bin/python3; do $p -c 'import numpy' 2>/dev/null && { PY=$p; break; }; done
[ -n "$PY" ] || { fail "no python3 with numpy (install python3-numpy: scripts/setup.sh)"; finish; }
REF="$PY test/megatron_order_ref.py"
D=$TMP/d
mkdir -p $D
MG=(--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 --global-batch-size 4
    --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0
    --log-interval 1 --vocab-size 3000 --hidden-dropout 0 --attention-dropout 0 --eval-iters 1 --eval-interval 1000)
python3 test/megatron_ref.py docs $D/a uint16 11 40 0 1000 3 40
python3 test/megatron_ref.py docs $D/b uint16 12 30 1000 2000 0 30   # some documents are empty
python3 test/megatron_ref.py docs $D/c int32 13 50 2000 3000 1 25

# compare NAME LABEL JSON LOOKUP-ARGS...: the lookup's rows for iterations 1..train_iters equal the reference's
compare() {
  local name=$1 label=$2 json=$3 iters; shift 3
  iters=$($PY -c 'import json,sys; print(json.loads(sys.argv[1])["train_iters"])' "$json")
  $REF rows "$json" >$D/$name.ref || { fail "$label: the reference failed"; return; }
  $LOOKUP "${MG[@]}" "$@" --iterations 1-$iters --tokens >$D/$name.got 2>$D/$name.err || { fail "$label: lookup failed: $(cat $D/$name.err)"; return; }
  [ -s $D/$name.ref ] || { fail "$label: the reference gave no rows"; return; }
  if cmp -s $D/$name.ref $D/$name.got; then ok "$label: $(wc -l <$D/$name.got) rows identical to the reference"
  else fail "$label: differs from the reference"; diff $D/$name.ref $D/$name.got | head -3 | cut -c1-150; fi
}
src() { echo "{\"prefix\": \"$D/$1\", \"weight\": $2, \"split\": \"$3\"}"; }
run_json() {  # train_iters seed dp sources-json [extra json fields]
  echo "{\"train_iters\": $1, \"seed\": $2, \"dp\": $3, \"global_batch_size\": 4, \"micro_batch_size\": 2, \"seq_length\": 16, \"sources\": [$4]${5:-}}"
}

# ---- 1. one prefix, several epochs --------------------------------------------------------------
for seed in 1234 7; do
  for it in 40 43; do
    J=$(run_json $it $seed 1 "$(src a 1 80,15,5)")
    plan=$($REF plan "$J")
    compare a_${seed}_$it "one prefix, seed $seed, $it iterations ($plan)" "$J" --seed $seed --train-iters $it --data-path $D/a --split 80,15,5
  done
done
grep -q '"separate": true' <($REF plan "$(run_json 40 1234 1 "$(src a 1 80,15,5)")") && grep -q '"separate": false' <($REF plan "$(run_json 43 1234 1 "$(src a 1 80,15,5)")") \
  && ok "the cases cover a last epoch shuffled apart (40 iterations) and one in the global shuffle (43)" || fail "the cases do not cover both last-epoch rules"
J=$(run_json 29 1234 1 "$(src a 1 80,15,5)" ', "train_samples": 118')
compare a_samples "--train-samples 118 (29 iterations; the dataset is built for 118, not 29 x 4)" "$J" --seed 1234 --train-samples 118 --data-path $D/a --split 80,15,5

# ---- 2. a blend with --split ----------------------------------------------------------------------
# (at 44 iterations the 1.005 margin matters: b's 176 x 0.3 x 1.005 = 53.06 needs 3 epochs, the
# last one shuffled apart; 52.8 would take 2)
J=$(run_json 44 1234 1 "$(src a 5 90,10,0), $(src b 3 90,10,0), $(src c 2 90,10,0)")
compare blend "blend 5:3:2 of three prefixes, --split 90,10,0, each built for ceil(176 w 1.005) ($($REF plan "$J" | tr -d '[]{}"'))" "$J" \
  --seed 1234 --train-iters 44 --data-path 5 $D/a 3 $D/b 2 $D/c --split 90,10,0

# ---- 3. weighted split paths ----------------------------------------------------------------------
J="{\"train_iters\": 25, \"seed\": 1234, \"dp\": 1, \"global_batch_size\": 4, \"micro_batch_size\": 2, \"seq_length\": 16, \"sources\": [
   {\"prefix\": \"$D/a\", \"weight\": 0.7, \"range\": \"0:0.6\"}, {\"prefix\": \"$D/c\", \"weight\": 0.3, \"range\": \"0.2:1\"}]}"
compare wsp "weighted split paths: 0.7 of a 0:0.6 and 0.3 of c 0.2:1" "$J" --seed 1234 --train-iters 25 \
  --train-weighted-split-paths "TRAIN: 0.7 0:0.6 $D/a, 0.3 0.2:1 $D/c" --valid-weighted-split-paths "VALID: 1 0.6:1 $D/a"

# ---- 4. two data-parallel ranks ---------------------------------------------------------------------
J=$(run_json 20 1234 2 "$(src a 5 90,10,0), $(src c 2 90,10,0)")
compare dp2 "DP 2 (lookup): each rank's micro-batches of every global batch" "$J" --seed 1234 --train-iters 20 \
  --data-path 5 $D/a 2 $D/c --split 90,10,0 --data-parallel-size 2
KEEL_DUMP_TOKENS=$D/mpi timeout -k 10 120 mpirun --oversubscribe -np 2 $KEEL "${MG[@]}" --seed 1234 --train-iters 20 \
  --data-path 5 $D/a 2 $D/c --split 90,10,0 >$D/mpi.log 2>&1 || fail "DP 2 run: $(grep -m1 error $D/mpi.log)"
if cmp -s <(cat $D/mpi.rank* | sort -n -k1,1 -k2,2 -k3,3 -k4,4) $D/dp2.ref; then ok "DP 2 (trainer under mpirun): every rank trained on the reference's rows"
else fail "DP 2 trainer rows differ from the reference"; fi

# ---- 5. the trainer, a skip range, the validation set's size --------------------------------------
KEEL_DUMP_TOKENS=$D/skip $KEEL "${MG[@]}" --seed 7 --train-iters 12 --data-path $D/a --split 80,15,5 --eval-interval 5 --eval-iters 2 \
  --skip-train-iteration-range 3-5 >$D/skip.log 2>&1 || fail "skip run: $(grep -m1 error $D/skip.log)"
J=$(run_json 12 7 1 "$(src a 1 80,15,5)" ', "skip": [[3, 5]]')
$REF rows "$J" >$D/skip.ref
cmp -s <(sort -n -k1,1 -k2,2 -k3,3 -k4,4 $D/skip.rank0) $D/skip.ref && ! grep -qE '^(3|4|5) ' $D/skip.rank0 \
  && ok "--skip-train-iteration-range 3-5: the trainer read the reference's rows of 1-2 and 6-12, none of 3-5" || fail "skip run's rows differ"
grep -q "note: Megatron's sample order" $D/skip.log && ok "start-up note names Megatron's sample order" || fail "no start-up note"
VJ=$(run_json 12 7 1 "$(src a 1 80,15,5)" ', "part": 1, "eval_interval": 5, "eval_iters": 2')
vt=$($REF plan "$VJ" | $PY -c 'import json,sys; p=json.load(sys.stdin)[0]; print(p["target"], p["epochs"])')
grep -qE "^valid data: .*GPTDataset for ${vt% *}: ${vt#* } epoch" $D/skip.log \
  && ok "validation set built for (12 // 5 + 1) x 2 x 4 = ${vt% *} samples, ${vt#* } epoch(s), as the reference" \
  || fail "validation set: $(grep '^valid data' $D/skip.log) (reference: $vt)"

# ---- 6. negative controls ----------------------------------------------------------------------------
J=$(run_json 40 1234 1 "$(src a 1 80,15,5)")
$LOOKUP "${MG[@]}" --seed 1235 --train-iters 40 --data-path $D/a --split 80,15,5 --iterations 1-40 --tokens >$D/other_seed.got 2>&1
cmp -s $D/a_1234_40.ref $D/other_seed.got && fail "seed 1235 gives seed 1234's rows: the seed is inert" || ok "another seed gives other rows"
$PY - $D/a $D/a_1234_40.ref <<'PY' && ok "negative control: keel's former order (the train part cut in .bin order) is not the reference's" || fail "the former order matches: the comparison cannot tell orders apart"
import sys
sys.path.insert(0, "test"); import megatron_ref as m
docs = m.read_prefix(sys.argv[1])[3]
b = m.split_bounds("80,15,5", len(docs))
stream = sum(docs[b[0]:b[1]], [])
windows = {tuple(stream[j:j + 17]) for j in range(0, len(stream) - 16, 16)}
rows = [tuple(map(int, l.split()[5:])) for l in open(sys.argv[2])]
sys.exit(0 if sum(r in windows for r in rows) < len(rows) // 2 else 1)
PY
expect_fail 2 "seed 4294967296: Megatron's data order seeds numpy's RandomState, which takes 0 to 2\^32-1" \
  $KEEL "${MG[@]}" --seed 4294967296 --train-iters 4 --data-path $D/a --split 80,15,5

# ---- 7. a checkpoint from before the order was recorded ---------------------------------------------
RUN=("${MG[@]}" --seed 1234 --train-iters 4 --data-path $D/a --split 80,15,5 --save-interval 2)
$KEEL "${RUN[@]}" --exit-interval 2 --save $D/ck >$D/ck.log 2>&1 || fail "checkpoint run: $(grep -m1 error $D/ck.log)"
grep -q "^data.order = 2$" $D/ck/iter_0000002/state.txt && ok "the checkpoint records Megatron's order (data.order = 2)" || fail "no data.order in state.txt"
$PY - $D/ck/iter_0000002/state.txt <<'PY'   # the state.txt an older keel wrote: no data.order line, checksum redone
import sys
M = (1 << 64) - 1
def mix(z):
    z = (z + 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)
def checksum(b):
    h = 0xcbf29ce484222325 ^ len(b)
    i = 0
    while i + 8 <= len(b):
        h = ((h ^ int.from_bytes(b[i:i + 8], "little")) * 0x100000001b3) & M
        h ^= h >> 29
        i += 8
    for x in b[i:]:
        h = ((h ^ x) * 0x100000001b3) & M
    return mix(h)
p = sys.argv[1]
body = "".join(l for l in open(p) if not l.startswith(("data.order", "checksum"))).encode()
open(p, "wb").write(body + ("checksum = %016x\n" % checksum(body)).encode())
PY
expect_fail 1 "iter_0000002' predates Megatron's sample order" $KEEL "${RUN[@]}" --load $D/ck --save $D/ck
$KEEL "${RUN[@]}" --load $D/ck --finetune --train-iters 1 --save $D/ft >$D/ft.log 2>&1 && ok "--finetune takes such a checkpoint's weights" \
  || fail "--finetune of the old checkpoint: $(grep -m1 error $D/ft.log)"
finish
