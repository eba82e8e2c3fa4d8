#!/usr/bin/env bash
# dev/batch_lookup returns exactly the tokens the trainer consumed. The trainer's test mode
# KEEL_DUMP_TOKENS=PREFIX writes every row it trains on to PREFIX.rank<r>; `batch_lookup --tokens`
# must print the same lines (sorted by iteration, rank, micro-batch step, row), byte for byte:
#   1. one process, a --skip-train-iteration-range in the middle (absent from both); the flags as @file;
#   2. DP=2 under mpirun, with a batch-size ramp-up and a sequence-length curriculum (rows of
#      several lengths, iterations of several batch sizes), from the flags and from the checkpoint;
#      a lookup with the wrong DP size differs (so a wrong rank mapping could not pass); --rank;
#   3. checkpoint mode, --load DIR plus the data path only: the straight run; a run resumed with
#      another --seed (the data order keeps the checkpoint's key); a resume that changed the global
#      batch (a warning; --checkpoint-iteration of the earlier checkpoint is exact); a run whose spike
#      autopilot rolled back (the discarded window was read once, and the human listing marks it);
#   4. a sub-range; every row of the human listing: its shard and token span hold the dumped tokens
#      (read back with od) and its text is their decoding; --no-text; errors exit non-zero with one
#      `error:` line.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 LC_ALL=C
LOOKUP=${LOOKUP:-./batch_lookup}  # LOOKUP=/path/to/mutant checks that this test can fail
[ -x $LOOKUP ] || { fail "$LOOKUP not built (make batch_lookup)"; finish; }
DATA=data/brown/brown_train.bin
[ -f $DATA ] || { fail "$DATA missing (make data)"; finish; }
# a run with the token dump on: name, then the command (the dump lands in $TMP/name.rank<r>)
train() {
  local name=$1; shift
  KEEL_DUMP_TOKENS="$TMP/$name" timeout -k 10 120 "$@" >>"$TMP/$name.log" 2>&1 || { fail "$name: run failed"; tail -5 "$TMP/$name.log"; }
}
# the dump of a run, in the lookup's order
dumped() { cat "$TMP/$1".rank* | sort -n -k1,1 -k2,2 -k3,3 -k4,4; }
# name label lookup-args...: the lookup's --tokens output equals the dump, and is not empty
same_tokens() {
  local name=$1 label=$2; shift 2
  $LOOKUP "$@" --tokens >"$TMP/$name.lookup" 2>"$TMP/$name.lookup.err" || { fail "$label: lookup failed: $(cat "$TMP/$name.lookup.err")"; return; }
  [ -s "$TMP/$name.lookup" ] || { fail "$label: the lookup printed nothing"; return; }
  [ -s "$TMP/$name.lookup.err" ] && { fail "$label: the lookup complained: $(head -2 "$TMP/$name.lookup.err")"; return; }
  if cmp -s <(dumped "$name") "$TMP/$name.lookup"; then ok "$label: $(wc -l <"$TMP/$name.lookup") rows identical to the trainer's dump"
  else fail "$label: the lookup differs from the dump"; diff <(dumped "$name") "$TMP/$name.lookup" | head -4 | cut -c1-160; fi
}
iterations_in() { awk '{print $1}' "$1" | uniq | tr '\n' ' '; }

# 1. one process, iterations 4-5 skipped
ONE=("${TINY[@]}" --train-iters 8 --skip-train-iteration-range 4-5)
train one $KEEL "${ONE[@]}" --save "$TMP/one"
same_tokens one "1 process, skip range" "${ONE[@]}" --iterations 1-8
[ "$(iterations_in "$TMP/one.lookup")" = "1 2 3 6 7 8 " ] && ok "skipped iterations 4-5 consumed unread" \
  || fail "iterations looked up: $(iterations_in "$TMP/one.lookup")"
printf '%s\n' "${ONE[@]}" >"$TMP/one.args"
same_tokens one "the run's flags as @file" @"$TMP/one.args" --iterations 1-8

# 2. DP=2: ramp-up 4 → 12 (samples 4, 4, 8, 12, ...) and a curriculum 8 → 16 tokens; sample-based
DP2=(--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 --global-batch-size 12
     --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-samples 8 --seed 11 --train-data-path $DATA
     --train-samples 72 --rampup-batch-size 4 4 16 --curriculum-learning --cl-min-seqlen 8 --cl-difficulty-step 4
     --cl-total-steps 5 --skip-train-iteration-range 5-5 --hidden-dropout 0 --attention-dropout 0 --log-interval 1)
if command -v mpirun >/dev/null; then
  train dp2 mpirun --oversubscribe -np 2 $KEEL "${DP2[@]}" --save "$TMP/dp2"
  [ -s "$TMP/dp2.rank0" ] && [ -s "$TMP/dp2.rank1" ] || fail "DP=2: a rank dumped nothing"
  same_tokens dp2 "DP=2, ramp-up, curriculum" "${DP2[@]}" --data-parallel-size 2 --iterations 1-7
  lengths=$(awk '{print NF - 5}' "$TMP/dp2.lookup" | sort -u | wc -l)
  batches=$(awk '{print $1}' "$TMP/dp2.lookup" | uniq -c | awk '{print $1}' | sort -u | wc -l)
  [ "$lengths" -ge 3 ] && [ "$batches" -ge 3 ] && ok "DP=2: $lengths row lengths, $batches batch sizes" \
    || fail "DP=2 run does not exercise the knobs ($lengths row lengths, $batches batch sizes)"
  if $LOOKUP "${DP2[@]}" --iterations 1-7 --tokens 2>/dev/null | cmp -s - <(dumped dp2); then fail "DP=1 lookup of a DP=2 run matches: the test cannot see the rank mapping"
  else ok "a lookup with the wrong DP size differs"; fi
  same_tokens dp2 "DP=2 from the checkpoint" --load "$TMP/dp2" --train-data-path $DATA --data-parallel-size 2 --iterations 1-7
  $LOOKUP "${DP2[@]}" --data-parallel-size 2 --iterations 3 --rank 1 --tokens >"$TMP/r1" 2>&1
  cmp -s "$TMP/r1" <(dumped dp2 | awk '$1 == 3 && $2 == 1') && ok "--rank 1 --iterations 3: exactly rank 1's rows" || fail "--rank 1 rows differ"
else
  fail "mpirun not found (scripts/setup.sh installs OpenMPI)"
fi

# 3. checkpoint mode: the trajectory flags and the data-order key come from state.txt
same_tokens one "checkpoint of the 1-process run" --load "$TMP/one" --train-data-path $DATA --iterations 1-8
train split $KEEL "${TINY[@]}" --train-iters 8 --exit-interval 4 --save "$TMP/split"
train split $KEEL "${TINY[@]}" --train-iters 8 --seed 99 --load "$TMP/split" --save "$TMP/split"
grep -q "keeps the checkpoint's RNG key" "$TMP/split.log" || fail "the resumed run did not keep the data-order key"
same_tokens split "resumed with --seed 99" --load "$TMP/split" --train-data-path $DATA --iterations 1-8
$LOOKUP "${TINY[@]}" --train-iters 8 --seed 99 --iterations 1-8 --tokens 2>/dev/null | cmp -s - <(dumped split) \
  && fail "--seed 99 gives the same rows: the test cannot see the data-order key" || ok "the data order depends on the key"
# a resume that changed the global batch: the latest checkpoint's flags cannot recompute the
# iterations before it (a warning says so); the checkpoint from before the change can
train gbs $KEEL "${TINY[@]}" --train-iters 8 --exit-interval 4 --save "$TMP/gbs"
train gbs $KEEL "${TINY[@]}" --train-iters 8 --global-batch-size 8 --use-checkpoint-lr-scheduler --load "$TMP/gbs" --save "$TMP/gbs"
$LOOKUP --load "$TMP/gbs" --train-data-path $DATA --iterations 1-8 --tokens 2>&1 >/dev/null | grep -q "^warning: .*the trajectory flags changed during the run" \
  && ok "batch size changed at a resume: the lookup warns" || fail "batch size changed at a resume: no warning"
$LOOKUP --load "$TMP/gbs" --checkpoint-iteration 4 --train-data-path $DATA --iterations 1-4 --tokens 2>&1 \
  | cmp -s - <(dumped gbs | awk '$1 <= 4') && ok "--checkpoint-iteration 4: iterations 1-4 as dumped" || fail "--checkpoint-iteration 4 differs from the dump"
SPIKE=("${TINY[@]}" --train-iters 12 --spike-policy rollback --spike-metric any --spike-zscore 1.5 --spike-window 3 --spike-snapshot-interval 4)
train spike $KEEL "${SPIKE[@]}" --save "$TMP/spike"
rb=$(sed -n 's/^spike.rollbacks = //p' "$TMP/spike/iter_0000012/state.txt")
if [ -z "$rb" ]; then fail "the spike run made no rollback (adjust --spike-zscore): the rollback case tests nothing"; else
  k=${rb%%:*}; k=${k%% *}; s=${rb#*:}; s=${s%% *}
  same_tokens spike "spike rollback $k:$s" --load "$TMP/spike" --train-data-path $DATA --iterations 1-12
  $LOOKUP --load "$TMP/spike" --train-data-path $DATA --iterations 1-12 --no-text >"$TMP/spike.human" 2>&1
  marked=$(grep -E "^iteration [0-9]+ .*discarded by the spike rollback at iteration $k " "$TMP/spike.human" | awk '{print $2}' | tr '\n' ' ')
  [ "$marked" = "$(seq -s ' ' $((s+1)) $k) " ] && ok "iterations $marked marked as discarded by the rollback at $k" \
    || fail "rollback $k:$s: marked iterations '$marked'"
fi

# 4. a sub-range, the human listing, errors
$LOOKUP "${ONE[@]}" --iterations 3-6 --tokens >"$TMP/sub" 2>&1
cmp -s "$TMP/sub" <(dumped one | awk '$1 >= 3 && $1 <= 6') && [ "$(iterations_in "$TMP/sub")" = "3 6 " ] \
  && ok "--iterations 3-6: exactly the dump's lines of iterations 3 and 6" || fail "--iterations 3-6 gave iterations $(iterations_in "$TMP/sub")"
$LOOKUP "${DP2[@]}" --data-parallel-size 2 --iterations 3-4 >"$TMP/human" 2>&1 || fail "human listing failed: $(tail -2 "$TMP/human")"
# every row of the listing, checked independently: its shard span read with od holds the tokens the
# trainer dumped for that (iteration, rank, step, row), and its text is their decoding, escaped
rows=0; bad=0; first_bad=
while IFS= read -r line; do  # "iteration I | ..." then "  rank R step M row B | sample S | ... | shard PATH tokens A-Z | TEXT"
  case "$line" in "iteration "*) it=${line#iteration }; it=${it%% *}; continue;; "  rank "*) ;; *) continue;; esac
  rows=$((rows + 1))
  read -r r m b shard span < <(sed -E 's/^  rank ([0-9]+) step ([0-9]+) row ([0-9]+) .*[|] shard (.*) tokens ([0-9]+-[0-9]+) [|] .*/\1 \2 \3 \4 \5/' <<<"$line")
  why=
  if [[ "$span" =~ ^[0-9]+-[0-9]+$ ]]; then
    want=$(dumped dp2 | awk -v i="$it" -v r="$r" -v m="$m" -v b="$b" '$1==i && $2==r && $3==m && $4==b {$1=$2=$3=$4=$5=""; print}' | xargs)
    a=${span%-*}; z=${span#*-}
    got=$(od -An -v -tu2 -j $((1024 + 2*a)) -N $((2*(z - a + 1))) "$shard" | xargs)
    if [ -z "$want" ] || [ "$got" != "$want" ]; then why="$shard tokens $span hold '$got', the trainer read '$want'"
    elif [ -x ./tokenize_gpt2 ]; then
      text=$(./tokenize_gpt2 --decode <<<"$want"; printf x); text=${text%x}
      text=${text//\\/\\\\}; text=${text//$'\n'/\\n}; text=${text//$'\t'/\\t}; text=${text//$'\r'/\\r}
      [ "${line#* tokens $span | }" = "$text" ] || why="text '${line#* tokens $span | }' is not the decoding '$text'"
    fi
  else why="unparsed row"; fi
  [ -z "$why" ] && continue
  bad=$((bad + 1)); [ -z "$first_bad" ] && first_bad="iteration $it rank $r step $m row $b: $why"
done <"$TMP/human"
if [ $rows -eq 20 ] && [ $bad -eq 0 ]; then ok "human listing: all $rows rows' shard spans hold the dumped tokens$([ -x ./tokenize_gpt2 ] && echo ", texts are their decodings")"
else fail "human listing: $bad of $rows rows wrong (want 8 + 12 rows); first: $first_bad"; fi
grep -q "^iteration 4 | global batch 12 | seqlen 12 | samples 16-27 " "$TMP/human" && ok "header: batch, seqlen, sample range" || fail "header of iteration 4: $(grep '^iteration 4' "$TMP/human")"
$LOOKUP "${ONE[@]}" --iterations 4 | grep -q "^iteration 4 .*skipped (--skip-train-iteration-range): consumed unread" \
  && ok "a skipped iteration says so" || fail "skipped iteration not reported"
$LOOKUP "${ONE[@]}" --iterations 2 --no-text | grep -qE '^  rank 0 step 0 row 0 .* \| ids( [0-9]+){17}$' && ok "--no-text shows the 17 ids" || fail "--no-text"
$LOOKUP "${ONE[@]}" --iterations 2 --vocab-file "$TMP/none.json" | grep -q "^# no text: $TMP/none.json is missing" \
  && ok "missing tokenizer files: says why, shows ids" || fail "missing vocab file not reported"
expect_fail 2 "--iterations A-B is required" $LOOKUP "${ONE[@]}"
expect_fail 2 "ends before it starts" $LOOKUP "${ONE[@]}" --iterations 5-3
expect_fail 2 "numbered from 1" $LOOKUP "${ONE[@]}" --iterations 0-2
expect_fail 2 "is not A-B or A" $LOOKUP "${ONE[@]}" --iterations 3x
expect_fail 2 "the run has 8 iterations" $LOOKUP "${ONE[@]}" --iterations 7-9
expect_fail 2 "--train-data-path is required" $LOOKUP --load "$TMP/one" --iterations 1
expect_fail 2 "--lr is missing" $LOOKUP --train-data-path $DATA --train-iters 8 --iterations 1
expect_fail 1 "no checkpoint" $LOOKUP --load "$TMP/nowhere" --train-data-path $DATA --iterations 1
expect_fail 2 "--rank 2: the run has 2 data-parallel rank" $LOOKUP "${DP2[@]}" --data-parallel-size 2 --rank 2 --iterations 1
finish
