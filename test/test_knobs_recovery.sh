#!/usr/bin/env bash
# Recovery knobs end to end through the trainer (docs/knobs.md#resuming-a-schedule, #skipping-iterations, #activations-dropout-positions-and-alibi; docs/internals.md#determinism, #checkpoints):
#  1. --skip-train-iteration-range (NVIDIA Megatron-LM semantics): a skipped iteration consumes its
#     global batch unread (counters advance; no forward/backward/update/LR step; no JSONL record), one
#     message per contiguous stretch; across a resume inside a range; malformed ranges exit 2.
#  2. dropout: changes the loss (each of the three flags), is thread-count independent, resumes
#     bit-exactly, and is off for validation.
#  3. --no-load-rng: the dropout/sampling key comes from the checkpoint unless this flag is given;
#     the data order always keeps the checkpoint's key.
#  4. --no-load-optim: Adam (moments, step) and the loss scaler start fresh; weights, counters and
#     the LR schedule come from the checkpoint.
#  5. --finetune: only the weights (≡ a fresh run from the same weights loaded via --load-llmc).
#  6. --load-llmc composes with --embed-layernorm/--normformer/alibi; --export-llmc refuses models
#     llm.c cannot compute.
# Every check compares against a second run or a hand-computed number.
source "$(dirname "$0")/lib.sh"
# One thread: with 2 cores shared with other work, 2 spinning OpenMP threads can slow a run 100x.
# The thread-count check below runs 2 threads with a passive wait policy (same results, no spinning).
export OMP_NUM_THREADS=1

# run NAME ARGS...: TINY + ARGS, log in $TMP/NAME.log, metrics in $TMP/NAME.jsonl.
run() {
  local n=$1; shift
  $KEEL "${TINY[@]}" --metrics-file "$TMP/$n.jsonl" "$@" >"$TMP/$n.log" 2>&1 \
    || { fail "run $n exited $?: $*"; tail -n 3 "$TMP/$n.log"; }
}
# rec FILE IT: the training record of iteration IT, timing fields removed.
rec() { strip_timing "$1" | grep "^{\"iteration\": $2, \"consumed_samples\""; }
# val FILE: the validation records.
val() { grep '"val_loss"' "$1"; }
# get FILE IT KEY: one field of iteration IT's training record.
get() { rec "$1" "$2" | grep -o "\"$3\": [^,}]*" | cut -d' ' -f2; }
# iters FILE: the iterations that have a training record.
iters() { sed -nE 's/^\{"iteration": ([0-9]+), "consumed_samples".*/\1/p' "$1" | tr '\n' ' ' | sed 's/ $//'; }
# st DIR ITER KEY: a value from a checkpoint's state.txt.
st() { sed -n "s/^$3 = //p" "$1/iter_$(printf %07d "$2")/state.txt"; }
# same_jsonl A B MSG: the two JSONL byte streams (timing aside) are identical.
same_jsonl() {
  if cmp -s <(strip_timing "$1") <(strip_timing "$2"); then ok "$3"; else
    fail "$3"; diff <(strip_timing "$1") <(strip_timing "$2") | head -n 6; fi
}
check() { local msg=$1; shift; if "$@"; then ok "$msg"; else fail "$msg"; fi; }
eq() { [ "$1" = "$2" ] || { echo "  got '$1', want '$2'"; return 1; }; }
ne() { [ -n "$1" ] && [ "$1" != "$2" ] || { echo "  both '$1'"; return 1; }; }
differ() { ! cmp -s "$1" "$2"; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN{exit !(a < b)}' || { echo "  $1 is not < $2"; return 1; }; }
GBS=4; SEQ=16  # TINY

# --------------------------------------------------------------------------------------------------
# 1. --skip-train-iteration-range
# With --lr 0 the weights never change, so each iteration's record depends only on its data.
run p0 --train-iters 6 --lr 0 --min-lr 0 --eval-interval 2
run s0 --train-iters 6 --lr 0 --min-lr 0 --eval-interval 2 --skip-train-iteration-range 3-4
check "skip 3-4: records for iterations 1 2 5 6 only" eq "$(iters "$TMP/s0.jsonl")" "1 2 5 6"
for i in 1 2 5 6; do
  r=$(rec "$TMP/s0.jsonl" $i)
  check "skip 3-4 at lr 0: iteration $i record (loss, grad norm, counters) = the plain run's" \
    eq "$r" "$(rec "$TMP/p0.jsonl" $i)"
done
check "skip 3-4: consumed_samples at iteration 5 = 5 x $GBS" eq "$(get "$TMP/s0.jsonl" 5 consumed_samples)" $((5*GBS))
check "skip 3-4: consumed_tokens at iteration 5 = 5 x $GBS x $SEQ" eq "$(get "$TMP/s0.jsonl" 5 consumed_tokens)" $((5*GBS*SEQ))
check "skip 3-4: one 'skipping iterations 3 to 4' line" \
  eq "$(grep -c '^skipping iterations' "$TMP/s0.log"):$(grep -c '^skipping iterations 3 to 4 (--skip-train-iteration-range)' "$TMP/s0.log")" "1:1"
check "plain run at lr 0 has no skipping line" eq "$(grep -c '^skipping iterations' "$TMP/p0.log")" 0

# With the real schedule: the skipped iterations do not step the LR schedule.
run p1 --train-iters 6 --sample-interval 6 --sample-length 8
run s1 --train-iters 6 --skip-train-iteration-range 3-4 --save "$TMP/s1ck"
check "skip 3-4: LR of iteration 5 = the plain run's LR of iteration 3" eq "$(get "$TMP/s1.jsonl" 5 lr)" "$(get "$TMP/p1.jsonl" 3 lr)"
check "skip 3-4: LR of iteration 6 = the plain run's LR of iteration 4" eq "$(get "$TMP/s1.jsonl" 6 lr)" "$(get "$TMP/p1.jsonl" 4 lr)"
check "(plain run's LR at 3 and 5 differ, so the above can fail)" ne "$(get "$TMP/p1.jsonl" 3 lr)" "$(get "$TMP/p1.jsonl" 5 lr)"
check "skip 3-4: 4 updates in all (optimizer_step)" eq "$(st "$TMP/s1ck" 6 optimizer_step)" 4

# Across a resume that stops inside the range.
run sr --train-iters 6 --skip-train-iteration-range 3-4 --save "$TMP/srck" --save-interval 3 --exit-interval 3
check "stopped at iteration 3, inside the range" grep -q 'exiting program at iteration 3' "$TMP/sr.log"
check "checkpoint at 3: iteration 3, consumed 12 samples, 2 updates" \
  eq "$(st "$TMP/srck" 3 iteration) $(st "$TMP/srck" 3 consumed_samples) $(st "$TMP/srck" 3 optimizer_step)" "3 $((3*GBS)) 2"
cp "$TMP/sr.jsonl" "$TMP/sr_all.jsonl"
run sr2 --train-iters 6 --skip-train-iteration-range 3-4 --load "$TMP/srck" --save "$TMP/srck"
cat "$TMP/sr2.jsonl" >>"$TMP/sr_all.jsonl"
check "resume inside the range: prints 'skipping iterations 4 to 4'" grep -q '^skipping iterations 4 to 4 ' "$TMP/sr2.log"
same_jsonl "$TMP/s1.jsonl" "$TMP/sr_all.jsonl" "skip 3-4, stop at 3, resume: JSONL = the uninterrupted run's"
for f in model.bin optimizer.bin; do
  check "skip 3-4, stop at 3, resume: final $f = the uninterrupted run's" cmp -s "$TMP/s1ck/iter_0000006/$f" "$TMP/srck/iter_0000006/$f"
done

# Adjacent ranges print as one stretch; a range that ends exactly at the resume iteration must not
# block a later range (Megatron-DeepSpeed's deque bug, docs/knobs.md#skipping-iterations).
R=(--skip-train-iteration-range 2-2 3-3 5-5)
run m1 --train-iters 6 "${R[@]}"
check "ranges 2-2 3-3 5-5: records for 1 4 6" eq "$(iters "$TMP/m1.jsonl")" "1 4 6"
check "ranges 2-2 3-3 5-5: lines '2 to 3' and '5 to 5'" \
  eq "$(grep '^skipping iterations' "$TMP/m1.log" | cut -d' ' -f3-5 | tr '\n' ',')" "2 to 3,5 to 5,"
run m2 --train-iters 6 "${R[@]}" --save "$TMP/mck" --exit-interval 3
cp "$TMP/m2.jsonl" "$TMP/m_all.jsonl"
run m3 --train-iters 6 "${R[@]}" --load "$TMP/mck"
cat "$TMP/m3.jsonl" >>"$TMP/m_all.jsonl"
check "resume at 3 (range 3-3 just ended): still skips 5" grep -q '^skipping iterations 5 to 5 ' "$TMP/m3.log"
same_jsonl "$TMP/m1.jsonl" "$TMP/m_all.jsonl" "ranges 2-2 3-3 5-5, stop at 3, resume: JSONL = the uninterrupted run's"

for r in 5-3 0-2 abc 3; do
  expect_fail 2 'skip-train-iteration-range' $KEEL "${TINY[@]}" --train-iters 6 --skip-train-iteration-range "$r"
done

# --------------------------------------------------------------------------------------------------
# 2. Dropout
D=(--hidden-dropout 0.1 --attention-dropout 0.1 --embed-dropout 0.1)
run d1 --train-iters 6 "${D[@]}" --save "$TMP/d1ck"
OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive run d2 --train-iters 6 "${D[@]}"
check "(the runs used 1 and 2 threads)" eq "$(grep -o 'threads: [0-9]*' "$TMP/d1.log") $(grep -o 'threads: [0-9]*' "$TMP/d2.log")" "threads: 1 threads: 2"
same_jsonl "$TMP/d1.jsonl" "$TMP/d2.jsonl" "dropout: 1 thread and 2 threads give identical JSONL"
n=0; for i in 1 2 3 4 5 6; do [ "$(get "$TMP/d1.jsonl" $i lm_loss)" = "$(get "$TMP/p1.jsonl" $i lm_loss)" ] && n=$((n+1)); done
check "dropout: every iteration's loss differs from the run without dropout" eq "$n equal" "0 equal"
# Each flag acts on its own; --embed-dropout defaults to --hidden-dropout (Megatron).
for k in "h:--hidden-dropout 0.1" "he:--hidden-dropout 0.1 --embed-dropout 0.1" "h0:--hidden-dropout 0.1 --embed-dropout 0" \
         "a:--attention-dropout 0.1" "e:--embed-dropout 0.1"; do
  # shellcheck disable=SC2086
  run "k_${k%%:*}" --train-iters 3 --eval-interval 0 ${k#*:}
done
L1() { get "$TMP/$1.jsonl" 1 lm_loss; }
check "iteration-1 losses without dropout / hidden / attention / embed / hidden without embed are all different" \
  eq "$(printf '%s\n' "$(L1 p1)" "$(L1 k_h)" "$(L1 k_a)" "$(L1 k_e)" "$(L1 k_h0)" | sort -u | wc -l)" 5
check "--embed-dropout defaults to --hidden-dropout" eq "$(L1 k_h)" "$(L1 k_he)"
# Kill and resume with dropout on.
run dh1 --train-iters 6 "${D[@]}" --save "$TMP/dck" --exit-interval 3
for x in r a b c b2; do cp -r "$TMP/dck" "$TMP/dck_$x"; done
run dh2 --train-iters 6 "${D[@]}" --load "$TMP/dck_r" --save "$TMP/dck_r"
cat "$TMP/dh1.jsonl" "$TMP/dh2.jsonl" >"$TMP/dh.cat"
same_jsonl "$TMP/d1.jsonl" "$TMP/dh.cat" "dropout: save at 3, resume to 6: JSONL = the uninterrupted run's"
for f in model.bin optimizer.bin; do
  check "dropout: save at 3, resume to 6: final $f = the uninterrupted run's" cmp -s "$TMP/d1ck/iter_0000006/$f" "$TMP/dck_r/iter_0000006/$f"
done
# Validation is computed without dropout (lr 0: the weights are those of the plain lr-0 run).
run dv --train-iters 6 --lr 0 --min-lr 0 --eval-interval 2 "${D[@]}"
check "dropout at lr 0: 3 validation records, identical to those without dropout" \
  eq "$(val "$TMP/dv.jsonl" | wc -l):$(val "$TMP/dv.jsonl")" "3:$(val "$TMP/p0.jsonl")"
check "(and its training losses do differ from those without dropout)" ne "$(get "$TMP/dv.jsonl" 2 lm_loss)" "$(get "$TMP/p0.jsonl" 2 lm_loss)"

# --------------------------------------------------------------------------------------------------
# 3. --no-load-rng (checkpoint at 3 made with --seed 7 and dropout on)
run ra --train-iters 6 "${D[@]}" --load "$TMP/dck_a" --save "$TMP/dck_a" --seed 99
cat "$TMP/dh1.jsonl" "$TMP/ra.jsonl" >"$TMP/ra.cat"
same_jsonl "$TMP/d1.jsonl" "$TMP/ra.cat" "resume with --seed 99, no --no-load-rng: = uninterrupted (checkpoint's key)"
run rb --train-iters 6 "${D[@]}" --load "$TMP/dck_b" --save "$TMP/dck_b" --seed 99 --no-load-rng
check "resume with --no-load-rng --seed 99: records for 4 5 6" eq "$(iters "$TMP/rb.jsonl")" "4 5 6"
for i in 4 5 6; do
  check "resume with --no-load-rng --seed 99: iteration $i loss differs from uninterrupted" \
    ne "$(get "$TMP/rb.jsonl" $i lm_loss)" "$(get "$TMP/d1.jsonl" $i lm_loss)"
done
check "… its checkpoint: rng.dropout_seed = 99, rng.seed = 7" \
  eq "$(st "$TMP/dck_b" 6 rng.dropout_seed) $(st "$TMP/dck_b" 6 rng.seed)" "99 7"
run rc --train-iters 6 "${D[@]}" --load "$TMP/dck_c" --save "$TMP/dck_c" --seed 7 --no-load-rng
cat "$TMP/dh1.jsonl" "$TMP/rc.jsonl" >"$TMP/rc.cat"
same_jsonl "$TMP/d1.jsonl" "$TMP/rc.cat" "resume with --no-load-rng --seed 7: = uninterrupted"
# The key taken with --no-load-rng is saved and used by a later plain resume (even with --seed 7).
run rb2 --train-iters 6 "${D[@]}" --load "$TMP/dck_b2" --save "$TMP/dck_b2" --seed 99 --no-load-rng --exit-interval 5
run rb3 --train-iters 6 "${D[@]}" --load "$TMP/dck_b2" --save "$TMP/dck_b2" --seed 7
cat "$TMP/rb2.jsonl" "$TMP/rb3.jsonl" >"$TMP/rb.cat"
same_jsonl "$TMP/rb.jsonl" "$TMP/rb.cat" "--no-load-rng --seed 99 to 5, then plain resume --seed 7 to 6: = one --no-load-rng resume to 6"
# Without dropout the data order is all the key could change: it stays the checkpoint's. Text
# samples are keyed by the dropout key.
run ob --train-iters 6 --save "$TMP/obase" --exit-interval 3
for x in A B d s; do cp -r "$TMP/obase" "$TMP/ock_$x"; done
run rd --train-iters 6 --load "$TMP/ock_d" --seed 99 --no-load-rng --sample-interval 6 --sample-length 8
cat "$TMP/ob.jsonl" "$TMP/rd.jsonl" >"$TMP/rd.cat"
same_jsonl "$TMP/p1.jsonl" "$TMP/rd.cat" "no dropout, resume --no-load-rng --seed 99: = uninterrupted (data order keeps the checkpoint's key)"
run rs --train-iters 6 --load "$TMP/ock_s" --seed 99 --sample-interval 6 --sample-length 8
sample() { grep -A1 '^-* sample at iteration 6' "$TMP/$1.log" | tail -n 1; }
check "text sample at 6 after resume with --seed 99: = uninterrupted's" eq "$(sample rs)" "$(sample p1)"
check "text sample at 6 after resume with --seed 99 --no-load-rng: differs" ne "$(sample rd)" "$(sample p1)"

# --------------------------------------------------------------------------------------------------
# 4. --no-load-optim (checkpoint at 3, plain run)
run oA --train-iters 6 --load "$TMP/ock_A" --save "$TMP/ock_A" --exit-interval 5
run oB --train-iters 6 --load "$TMP/ock_B" --save "$TMP/ock_B" --exit-interval 5 --no-load-optim
check "plain resume to 5: records = uninterrupted" eq "$(rec "$TMP/oA.jsonl" 4; rec "$TMP/oA.jsonl" 5)" "$(rec "$TMP/p1.jsonl" 4; rec "$TMP/p1.jsonl" 5)"
check "--no-load-optim: records for 4 5" eq "$(iters "$TMP/oB.jsonl")" "4 5"
check "--no-load-optim: iteration 4 loss and grad norm = plain resume's (same weights, same data)" \
  eq "$(get "$TMP/oB.jsonl" 4 lm_loss) $(get "$TMP/oB.jsonl" 4 grad_norm)" "$(get "$TMP/oA.jsonl" 4 lm_loss) $(get "$TMP/oA.jsonl" 4 grad_norm)"
check "--no-load-optim: iteration 5 loss differs from plain resume's (fresh Adam)" ne "$(get "$TMP/oB.jsonl" 5 lm_loss)" "$(get "$TMP/oA.jsonl" 5 lm_loss)"
check "--no-load-optim: lr and consumed_samples of 4 and 5 = plain resume's" \
  eq "$(for i in 4 5; do get "$TMP/oB.jsonl" $i lr; get "$TMP/oB.jsonl" $i consumed_samples; done)" \
     "$(for i in 4 5; do get "$TMP/oA.jsonl" $i lr; get "$TMP/oA.jsonl" $i consumed_samples; done)"
check "optimizer_step at 5: plain 5, --no-load-optim 2" eq "$(st "$TMP/ock_A" 5 optimizer_step) $(st "$TMP/ock_B" 5 optimizer_step)" "5 2"
check "--no-load-optim checkpoint at 5: iteration 5, consumed 20 samples, lr.num_steps = plain's" \
  eq "$(st "$TMP/ock_B" 5 iteration) $(st "$TMP/ock_B" 5 consumed_samples) $(st "$TMP/ock_B" 5 lr.num_steps)" "5 $((5*GBS)) $(st "$TMP/ock_A" 5 lr.num_steps)"
# The loss scaler starts fresh too: fp16, initial scale 1024, growth every 2 clean steps.
FP=(--fp16 --initial-loss-scale 1024 --loss-scale-window 2)
run fb --train-iters 6 "${FP[@]}" --save "$TMP/fbase" --exit-interval 3
cp -r "$TMP/fbase" "$TMP/fck_A"; cp -r "$TMP/fbase" "$TMP/fck_B"
run fA --train-iters 6 "${FP[@]}" --load "$TMP/fck_A" --exit-interval 5
run fB --train-iters 6 "${FP[@]}" --load "$TMP/fck_B" --exit-interval 5 --no-load-optim
check "fp16 --no-load-optim: loss scale at 4,5 = a fresh run's at 1,2" \
  eq "$(get "$TMP/fB.jsonl" 4 loss_scale) $(get "$TMP/fB.jsonl" 5 loss_scale)" "$(get "$TMP/fb.jsonl" 1 loss_scale) $(get "$TMP/fb.jsonl" 2 loss_scale)"
check "fp16 plain resume: loss scale at 4 is the continued one (differs)" ne "$(get "$TMP/fA.jsonl" 4 loss_scale)" "$(get "$TMP/fB.jsonl" 4 loss_scale)"
# growth every 2 clean steps from 1024: 1024 2048 2048 4096 4096 straight, so a resume at 3 that lost
# the growth tracker (1 after iteration 3) grows one step late: 2048 at 4
check "fp16 plain resume: loss scale at 4,5 = the straight run's (the growth tracker restored)" \
  eq "$(get "$TMP/fA.jsonl" 4 loss_scale) $(get "$TMP/fA.jsonl" 5 loss_scale)" "4096 4096"
check "fp16 --no-load-optim: iteration 4 loss = plain resume's" eq "$(get "$TMP/fB.jsonl" 4 lm_loss)" "$(get "$TMP/fA.jsonl" 4 lm_loss)"

# --------------------------------------------------------------------------------------------------
# 5. --finetune (checkpoint and llm.c export of the same weights, iteration 4)
run fbase4 --train-iters 4 --save "$TMP/ftck" --export-llmc "$TMP/w4.bin"
out=$($KEEL "${TINY[@]}" --train-iters 4 --lr 1e-3 --load "$TMP/ftck" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -qE '^error: AnnealingLR: class input value 0.001 and checkpoint ?value 0.003 for learning rate do not match' <<<"$out"; then
  ok "plain resume with a changed --lr: exit $rc, AnnealingLR mismatch"; else fail "plain resume with a changed --lr: exit $rc: $out"; fi
run ft --train-iters 3 --lr 1e-3 --load "$TMP/ftck" --finetune --save "$TMP/ftout"
check "--finetune: records for 1 2 3" eq "$(iters "$TMP/ft.jsonl")" "1 2 3"
check "--finetune: consumed_samples at 1 = $GBS" eq "$(get "$TMP/ft.jsonl" 1 consumed_samples)" $GBS
check "--finetune: iteration-1 loss below a from-scratch run's" lt "$(get "$TMP/ft.jsonl" 1 lm_loss)" "$(get "$TMP/p1.jsonl" 1 lm_loss)"
check "--finetune checkpoint at 3: iteration 3, 3 updates, lr.max_lr 0.001" \
  eq "$(st "$TMP/ftout" 3 iteration) $(st "$TMP/ftout" 3 optimizer_step) $(st "$TMP/ftout" 3 lr.max_lr)" "3 3 0.001"
# The same weights through --load-llmc give a run that starts fresh in every other respect.
run fl --train-iters 3 --lr 1e-3 --load-llmc "$TMP/w4.bin" --save "$TMP/flout"
same_jsonl "$TMP/fl.jsonl" "$TMP/ft.jsonl" "--finetune JSONL = a fresh run from the same weights (--load-llmc)"
for f in model.bin optimizer.bin state.txt; do
  check "--finetune final $f = the fresh run's" cmp -s "$TMP/ftout/iter_0000003/$f" "$TMP/flout/iter_0000003/$f"
done
# The RNG starts fresh: with dropout and --seed 99, the same as the fresh run with --seed 99.
run ft99 --train-iters 3 "${D[@]}" --seed 99 --load "$TMP/ftck" --finetune --save "$TMP/ft99"
run fl99 --train-iters 3 "${D[@]}" --seed 99 --load-llmc "$TMP/w4.bin"
same_jsonl "$TMP/fl99.jsonl" "$TMP/ft99.jsonl" "--finetune --seed 99 with dropout = a fresh --seed 99 run from the same weights"
check "--finetune --seed 99 checkpoint: rng.seed 99, rng.dropout_seed 99" eq "$(st "$TMP/ft99" 3 rng.seed) $(st "$TMP/ft99" 3 rng.dropout_seed)" "99 99"
expect_fail 2 'finetune' $KEEL "${TINY[@]}" --train-iters 3 --finetune

# --------------------------------------------------------------------------------------------------
# 6. --load-llmc with knobs whose tensors the file lacks
run lw --train-iters 2 --lr-warmup-iters 1 --eval-interval 0 --export-llmc "$TMP/w.bin"
FB=$(( $(stat -c %s "$TMP/w.bin") - 1024 ))  # the llm.c tensors' bytes
K=(--embed-layernorm --normformer)
# lr is 0 at iteration 1 (warmup), so the iteration-1 checkpoint holds the initial weights.
run lx --train-iters 3 --load-llmc "$TMP/w.bin" "${K[@]}" --save "$TMP/lx" --save-interval 1
run ly --train-iters 3 "${K[@]}" --save "$TMP/ly" --save-interval 1
check "--load-llmc + ${K[*]}: trains 3 iterations, no nan" eq "$(iters "$TMP/lx.jsonl") $(grep -c '"nan": 0' "$TMP/lx.jsonl")" "1 2 3 3"
check "--load-llmc + ${K[*]}: weights change over training" differ "$TMP/lx/iter_0000001/model.bin" "$TMP/lx/iter_0000003/model.bin"
check "--load-llmc + ${K[*]}: GPT-2's tensors are the file's" \
  cmp -s <(tail -c +1025 "$TMP/w.bin") <(tail -c +65 "$TMP/lx/iter_0000001/model.bin" | head -c $FB)
E=$(( $(stat -c %s "$TMP/lx/iter_0000001/model.bin") - 64 - FB ))
# embedding LN 2 x C; per layer: head scale NH, post-attention LN 2 x C, MLP LN 2 x 4C (L=2, C=32, NH=2)
check "--load-llmc + ${K[*]}: the knobs' tensors are $(( 4 * (2*32 + 2*(2 + 2*32 + 2*128)) )) bytes" eq "$E" $(( 4 * (2*32 + 2*(2 + 2*32 + 2*128)) ))
check "--load-llmc + ${K[*]}: the knobs' tensors take their init (= a run without the file)" \
  cmp -s <(tail -c "$E" "$TMP/lx/iter_0000001/model.bin") <(tail -c "$E" "$TMP/ly/iter_0000001/model.bin")
check "--load-llmc + ${K[*]}: no position-embedding warning" eq "$(grep -c 'WARNING' "$TMP/lx.log")" 0
run lz --train-iters 3 --load-llmc "$TMP/w.bin" --position-embedding-type alibi --save "$TMP/lz" --save-interval 1
check "--load-llmc + alibi: exactly one position-embedding warning" \
  eq "$(grep -c 'WARNING' "$TMP/lz.log"):$(grep -cE 'WARNING: llm.c model file .* position embedding is not used' "$TMP/lz.log")" "1:1"
check "--load-llmc + alibi: trains 3 iterations" eq "$(iters "$TMP/lz.jsonl")" "1 2 3"
WTE=$((50304 * 32 * 4)); WPE=$((16 * 32 * 4))
check "--load-llmc + alibi: the file's tensors minus wpe land in the buffer" \
  cmp -s <(tail -c +1025 "$TMP/w.bin" | head -c $WTE; tail -c +$((1025 + WTE + WPE)) "$TMP/w.bin") <(tail -c +65 "$TMP/lz/iter_0000001/model.bin")
for k in --embed-layernorm --normformer "--position-embedding-type alibi" "--activation relu"; do
  # shellcheck disable=SC2086
  expect_fail 2 'export-llmc' $KEEL "${TINY[@]}" --train-iters 3 $k --export-llmc "$TMP/x.bin"
  # shellcheck disable=SC2086
  out=$($KEEL "${TINY[@]}" --train-iters 3 $k --export-llmc "$TMP/x.bin" 2>/dev/null)
  if ! grep -q ' iteration ' <<<"$out" && [ ! -e "$TMP/x.bin" ]; then ok "--export-llmc $k: refused before training, no file written"
  else fail "--export-llmc $k: trained or wrote a file"; fi
done
finish
