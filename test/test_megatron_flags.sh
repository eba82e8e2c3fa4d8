#!/usr/bin/env bash
# The parser, the DeepSpeed config and Megatron-DeepSpeed's defaults: a Megatron-DeepSpeed argument
# block and its DeepSpeed JSON mean in keel what they meant there.
#   1. Numbers with Python's digit underscores (126_953_125, 1_0e-3) parse; 1__0, _1, 1_ are refused.
#   2. Every unknown flag is named in ONE error line (with "did you mean"); under mpirun -np 2 a flag
#      error is printed once (negative control: rank 1 alone, told its rank, prints nothing and
#      does not exit first: it waits for rank 0, whose exit ends the job).
#   3. @file takes a pasted shell block: continuations, quotes, comments → the same run (JSONL bytes)
#      as the plain arguments; $VAR and an unterminated quote are refused naming the word.
#   4. --deepspeed --deepspeed_config: fp16 (initial_scale_power, window), zero stage, clipping and
#      batch sizes give the same bytes as the flags that mean the same (negative control: the run
#      without the config differs); --loss-scale 12 beside a dynamic fp16 config is ignored (the
#      records start at 2^12, not 12); curriculum_learning = keel's --cl-* flags byte for byte, and
#      its first length is the short one; contradictions, malformed JSON, wrong types and stages 2/3
#      are one error line; unused keys one warning line; without --deepspeed the file is not read.
#   5. Megatron's defaults: no dropout flags = dropout 0.1 (bytes equal to --hidden-dropout 0.1
#      --attention-dropout 0.1, and different from 0); -h shows log-interval 100, eval-interval 1000,
#      eval-iters 100; no validation data and the default interval: no evaluation, no error.
#   6. The launcher-level flags: accepted ones say so at start-up, refused ones give one error.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1  # tiny runs: one thread each is fastest beside another test (bytes are compared within this test only)
K=$KEEL
make --no-print-directory train_gpt_cpu >/dev/null || { echo "build failed"; exit 1; }
N=${#TINY[@]}
BASE=("${TINY[@]:0:N-4}")  # TINY without its explicit --hidden-dropout 0 --attention-dropout 0 (its last 4 words)
[ "${TINY[*]:N-4}" = "--hidden-dropout 0 --attention-dropout 0" ] || fail "TINY no longer ends in its dropout flags"
NODROP=(--hidden-dropout 0 --attention-dropout 0)
run() { local name=$1; shift; $K "$@" --metrics-file "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1 || { fail "run $name: $(grep -m1 error "$TMP/$name.log")"; }; }
same() { cmp -s <(strip_timing "$TMP/$2.jsonl") <(strip_timing "$TMP/$3.jsonl") && ok "$1" || fail "$1: $2 and $3 differ"; }
differ() { cmp -s <(strip_timing "$TMP/$2.jsonl") <(strip_timing "$TMP/$3.jsonl") && fail "$1: $2 = $3 (inert)" || ok "$1"; }
arg() { sed -nE "s/^  $2 \.+ (.*)$/\1/p" "$TMP/$1.log"; }  # a value of the start-up arguments block

# ---- 1. digit underscores
# (a run that reads them: section 6's, which passes --seed 1_234 --lr 3_0e-4)
for bad in 1__0 _1 1_; do expect_fail 2 "--train-iters: '$bad' is not an integer" $K "${TINY[@]}" --train-iters $bad; done
expect_fail 2 "--lr: '1_.5' is not a finite number" $K "${TINY[@]}" --train-iters 1 --lr 1_.5

# ---- 2. every unknown flag in one line; one line under a launcher
expect_fail 2 "unknown flags --frobnicate, --quux, --hiden-dropout \(did you mean --hidden-dropout\?\)$" \
  $K "${TINY[@]}" --train-iters 1 --frobnicate mmap --quux 949,50,1 --hiden-dropout 0.1
out=$(OMPI_COMM_WORLD_RANK=1 timeout 3 $K --bogus 2>&1); rc=$?
[ $rc -eq 124 ] && [ -z "$out" ] && ok "rank 1 waits silently for rank 0 on a flag error (still running after 3 s)" \
  || fail "rank 1: rc $rc, '$out'"
if command -v mpirun >/dev/null; then
  out=$(timeout -k 10 60 mpirun --oversubscribe -np 2 $K "${TINY[@]}" --train-iters 1 --bogus 1 --quux 9 2>&1)
  [ "$(grep -c '^error:' <<<"$out")" -eq 1 ] && grep -q '^error: unknown flags --bogus, --quux' <<<"$out" \
    && ok "mpirun -np 2: one error line" || fail "mpirun -np 2: $(grep -c '^error:' <<<"$out") error lines: $out"
fi

# ---- 3. @file: a pasted shell block
mkdir -p "$TMP/a dir"
cat >"$TMP/block.args" <<'EOF'
    --num-layers 2 \
    --hidden-size 32 --num-attention-heads "2" \
    # a comment line, then a comment after a word
    --seq-length 16 --micro-batch-size 2 --global-batch-size 4 \
    --lr 3e-3 --min-lr 3e-4 --lr-decay-style 'cosine' --lr-warmup-iters 2 --weight-decay 0.1 --adam-beta2 0.95 # trailing
    --clip-grad 1.0 --seed 7 --log-interval 1 --eval-interval 0 --hidden-dropout 0 --attention-dropout 0 \
    --train-data-path 'data/brown/brown_train.bin' --train-iters 3 \
    --save "a dir/ck \"q\""
EOF
(cd "$TMP" && ln -s "$OLDPWD/data" data && $OLDPWD/$K @block.args --metrics-file at.jsonl >at.log 2>&1) || fail "@file run: $(grep -m1 error "$TMP/at.log")"
run plain "${TINY[@]}" --train-iters 3 --eval-interval 0
same "@file block (continuations, quotes, comments) = the plain arguments" at plain
[ -d "$TMP/a dir/ck \"q\"/iter_0000003" ] && ok "quoted --save path with a space and \\\" is one word" || fail "quoted save path: $(ls "$TMP")"
printf -- '--num-layers 2 \\\n  --save $SAVE_DIR/ck\n' >"$TMP/var.args"
expect_fail 2 "var.args: line 2: a shell expansion .*in \\\$SAVE_DIR/ck" $K @"$TMP/var.args"
printf -- '--save "$(date)"\n' >"$TMP/sub.args"
expect_fail 2 "sub.args: line 1: a shell expansion" $K @"$TMP/sub.args"
printf 'GPT_ARGS=" \\\n  --num-layers 2 \\\n"\n' >"$TMP/assign.args"
expect_fail 2 "a shell assignment; an @file holds only the arguments \(the inside of GPT_ARGS=" $K @"$TMP/assign.args"
printf -- "--num-layers 2\n--save 'open\n\n" >"$TMP/open.args"
expect_fail 2 "open.args: line 2: unterminated single quote in 'open...$" $K @"$TMP/open.args"

# ---- 4. the DeepSpeed config
DS=(--deepspeed --deepspeed_config "$TMP/ds.json")
cat >"$TMP/ds.json" <<'EOF'
{
  "train_micro_batch_size_per_gpu": 2,
  "train_batch_size": 4,
  "gradient_clipping": 0.05,
  "zero_optimization": {"stage": 1, "overlap_comm": true},
  "fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 2, "hysteresis": 2, "min_loss_scale": 1, "initial_scale_power": 12},
  "steps_per_print": 2000,
  "wall_clock_breakdown": false
}
EOF
R=("${TINY[@]}" --train-iters 3 --eval-interval 0)
run ds "${R[@]}" "${DS[@]}" --loss-scale 12
run flags "${R[@]}" --fp16 --initial-loss-scale 4096 --loss-scale-window 2 --clip-grad 0.05 --zero-stage 1
same "DeepSpeed config = the flags it maps to (fp16 scaler, clipping, ZeRO-1, batch sizes)" ds flags
differ "the DeepSpeed config changes the run" ds plain  # (plain: the same R without the config)
python3 - "$TMP/ds.jsonl" <<'EOF' && ok "--loss-scale 12 under a dynamic fp16 config: scale 4096, doubled after the window" || fail "loss scale records"
import json, sys
s = [json.loads(l)["loss_scale"] for l in open(sys.argv[1])]
assert s[0] == 4096 and min(s) == 4096 and max(s) > 4096, s  # static 12 would log 12 throughout
EOF
grep -q "^note: --deepspeed: ignoring --loss-scale 12: the DeepSpeed config's fp16 section governs" "$TMP/ds.log" \
  && ok "the ignored --loss-scale is said at start-up" || fail "no note for --loss-scale"
[ "$(arg ds clip-grad)" = 0.05 ] && [ "$(arg ds zero-stage)" = 1 ] && ok "printed arguments: clip-grad 0.05, zero-stage 1" || fail "printed arguments"
run nods "${R[@]}" --deepspeed_config "$TMP/ds.json" --fp16 --loss-scale 12
grep -q "^note: --deepspeed_config .* is not read without --deepspeed" "$TMP/nods.log" && [ "$(head -c 200 "$TMP/nods.jsonl" | grep -o '"loss_scale": [0-9]*')" = '"loss_scale": 12' ] \
  && ok "without --deepspeed the config is not read (static --loss-scale 12 rules)" || fail "config without --deepspeed"
# curriculum: DeepSpeed's section = keel's flags, byte for byte
cat >"$TMP/cl.json" <<'EOF'
{"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 8, "max_difficulty": 16,
  "schedule_type": "fixed_linear", "schedule_config": {"total_curriculum_step": 4, "difficulty_step": 4}}}
EOF
run cl_ds "${R[@]}" --deepspeed --deepspeed_config "$TMP/cl.json" --clip-grad 1.0
run cl_flags "${R[@]}" --curriculum-learning --cl-min-seqlen 8 --cl-max-seqlen 16 --cl-difficulty-step 4 --cl-total-steps 4 --clip-grad 0
same "curriculum_learning = --curriculum-learning --cl-* (and gradient_clipping absent = no clipping)" cl_ds cl_flags
grep -q '"seqlen": 8,' "$TMP/cl_ds.jsonl" && ok "the curriculum starts at 8 tokens" || fail "curriculum inert"
# bad configs: one error line each
printf '{"train_batch_size": 8}' >"$TMP/b.json"
expect_fail 2 "train_batch_size 8 contradicts --global-batch-size 4" $K "${R[@]}" --deepspeed --deepspeed_config "$TMP/b.json"
printf '{"gradient_accumulation_steps": 3}' >"$TMP/g.json"
expect_fail 2 "gradient_accumulation_steps 3 contradicts --global-batch-size 4" $K "${R[@]}" --deepspeed --deepspeed_config "$TMP/g.json"
printf '{"fp16": {"enabled": true,}}' >"$TMP/m.json"
expect_fail 2 "m.json: malformed JSON: byte" $K "${R[@]}" --deepspeed --deepspeed_config "$TMP/m.json"
expect_fail 2 "m.json: malformed JSON: byte" $K "${R[@]}" --deepspeed --deepspeed-config "$TMP/m.json"  # the dashed spelling reads it too
printf '{"fp16": {"enabled": "yes"}}' >"$TMP/t.json"
expect_fail 2 "fp16.enabled must be a boolean, not a string" $K "${R[@]}" --deepspeed --deepspeed_config "$TMP/t.json"
printf '{"zero_optimization": {"stage": 2}}' >"$TMP/z.json"
expect_fail 2 "zero_optimization.stage 2: keel shards only" $K "${R[@]}" --deepspeed --deepspeed_config "$TMP/z.json"
printf '{"zero_optimization": {"stage": 1}}' >"$TMP/z1.json"
expect_fail 2 "zero_optimization.stage 1 contradicts --zero-stage 0" $K "${R[@]}" --zero-stage 0 --deepspeed --deepspeed_config "$TMP/z1.json"
printf '{"bf16": {"enabled": true}}' >"$TMP/bf.json"
expect_fail 2 "bf16.enabled contradicts --fp16" $K "${R[@]}" --fp16 --deepspeed --deepspeed_config "$TMP/bf.json"
expect_fail 2 "--deepspeed needs --deepspeed_config" $K "${R[@]}" --deepspeed
[ "$(grep -c 'WARNING' "$TMP/ds.log")" -eq 1 ] && grep -q "keys keel does not use: zero_optimization.overlap_comm, steps_per_print, wall_clock_breakdown$" "$TMP/ds.log" \
  && ok "unused keys: one warning naming them" || fail "unused keys warning: $(grep WARNING "$TMP/ds.log")"

# ---- 5. Megatron's defaults
run d_default "${BASE[@]}" --train-iters 3 --eval-interval 0
run d_explicit "${BASE[@]}" --train-iters 3 --eval-interval 0 --hidden-dropout 0.1 --attention-dropout 0.1
run d_off "${BASE[@]}" --train-iters 3 --eval-interval 0 "${NODROP[@]}"
same "default dropout = --hidden-dropout 0.1 --attention-dropout 0.1" d_default d_explicit
differ "default dropout is not 0" d_default d_off
help=$($K -h)
for d in "log-interval N.*\[100\]" "eval-interval N.*\[1000\]" "eval-iters N.*\[100\]" "hidden-dropout X.*\[0.1\]" "attention-dropout X.*\[0.1\]"; do
  grep -qE -- "--$d" <<<"$help" && ok "default: --$d" || fail "default: --$d"
done
run noval --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 --lr 1e-3 --train-iters 2 \
  --train-data-path data/brown/brown_train.bin
! grep -q valid_loss "$TMP/noval.jsonl" && ok "no validation data, default --eval-interval: trains without evaluating" || fail "noval evaluated"
expect_fail 2 "--eval-interval needs --valid-data-path" $K "${TINY[@]}" --train-iters 2 --valid-data-path "" --eval-interval 5

# ---- 6. launcher-level Megatron-DeepSpeed flags
run acc "${TINY[@]}" --train-iters 3 --eval-interval 0 --seed 1_234 --lr 3_0e-4 --num-workers 2 --valid-num-workers 0 --codecarbon-dir "$TMP/cc" --distributed-backend nccl \
  --tokenizer-type GPT2BPETokenizer --deepspeed-activation-checkpointing --partition-activations
for n in "--num-workers" "--codecarbon-dir" "--deepspeed-activation-checkpointing does nothing without --checkpoint-activations" \
         "--partition-activations" "--distributed-backend nccl"; do
  grep -q -- "^note: $n" "$TMP/acc.log" && ok "accepted with a note: $n" || fail "no start-up note for $n"
done
[ ! -e "$TMP/cc" ] || fail "--codecarbon-dir wrote something"
[ "$(arg acc seed)" = 1234 ] && [ "$(arg acc lr)" = 0.003 ] && ok "--seed 1_234 --lr 3_0e-4 read as 1234 and 0.003" \
  || fail "underscores: seed '$(arg acc seed)' lr '$(arg acc lr)'"
expect_fail 2 "--distributed-backend gloo: keel communicates over" $K "${TINY[@]}" --train-iters 1 --distributed-backend gloo
expect_fail 2 "--tokenizer-type PretrainedFromHF needs --tokenizer-name-or-path" $K "${TINY[@]}" --train-iters 1 --tokenizer-type PretrainedFromHF
finish
