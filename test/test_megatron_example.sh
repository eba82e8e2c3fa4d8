#!/usr/bin/env bash
# The worked example: BigScience's 176B (BLOOM) Megatron-DeepSpeed argument block and
# DeepSpeed config at toy size (scripts/bigscience_176b_toy: args, ds_config.json, run.sh), pasted as
# an @file and run under mpirun on 4 processes (TP 2 x PP 2) by the emulated CUDA trainer (the
# config is bf16), on Megatron indexed data blended by weighted split paths. It must train to the
# end with the meaning the flags had there:
#   - --tokenizer-type PretrainedFromHF reads the tokenizer.json run.sh writes (BLOOM's pre-tokenizer,
#     GPT-2's vocabulary), which sets the vocabulary;
#   - every flag accepted; the launcher-level ones said at start-up (note: lines), the DeepSpeed
#     config's unused keys named in one warning;
#   - the DeepSpeed config's bf16 and clipping, the ramp-up (global batch 2 → 4), the kill switch,
#     TensorBoard's Megatron tags (batch size, validation ppl, timers), a validation at the end;
#   - the Megatron log line at every iteration, checkpoints at 3 and 6 (save-interval 3);
#   - rerun: --load finds the finished checkpoint and the run ends at once (latest = 6), exit 0;
#   - the CPU trainer runs the same files (its --bf16 emulates the storage) to the same losses.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
CUDA=build/train_gpt_emu
[ -x "$CUDA" ] && [ -x ./megatron_data ] && [ -x ./tokenize_gpt2 ] || { fail "$CUDA, ./megatron_data or ./tokenize_gpt2 not built"; finish; }
# the example's files unchanged, in a scratch copy of the repository's layout (data, tools and
# binaries linked) so that its out/ directory is this test's
W="$TMP/w"
mkdir -p "$W/scripts" "$W/build"
cp -r scripts/bigscience_176b_toy "$W/scripts/"
ln -s "$(pwd)/data" "$W/data"
ln -s "$(pwd)/megatron_data" "$W/megatron_data"
ln -s "$(pwd)/tokenize_gpt2" "$W/tokenize_gpt2"
ln -s "$(pwd)/$CUDA" "$W/$CUDA"
O="$W/out/bigscience_176b_toy"
run_example() { TRAINER=$CUDA timeout -k 10 900 bash "$W/scripts/bigscience_176b_toy/run.sh" --metrics-file "$TMP/m.jsonl" "$@"; }
run_example >"$TMP/run.log" 2>&1 || { fail "the worked example failed: $(grep -m3 -E 'error|Error' "$TMP/run.log")"; tail -5 "$TMP/run.log"; finish; }
log="$TMP/run.log"
for note in "--num-workers" "--abort-on-unmet-fused-kernel-constraints" ; do
  grep -q "^note: .*$note" "$log" && ok "start-up note: $note" || fail "no start-up note for $note"
done
[ "$(grep -c '^WARNING: .*steps_per_print' "$log")" -eq 1 ] && grep -q "wall_clock_breakdown" <(grep '^WARNING: .*steps_per_print' "$log") \
  && ok "DeepSpeed config: the unused keys in one warning" || fail "unused-key warning: $(grep -m1 WARNING "$log")"
grep -q "^note: --tokenizer-name-or-path out/bigscience_176b_toy/tokenizer: out/bigscience_176b_toy/tokenizer/tokenizer.json, vocabulary 50257, end of document 50256" "$log" &&
  grep -q '"Regex": " ?\[^(\\\\s|' "$O/tokenizer/tokenizer.json" && ok "PretrainedFromHF: BLOOM's Split tokenizer.json, vocabulary 50257" ||
  fail "PretrainedFromHF: $(grep -m1 -E 'tokenizer|error' "$log")"
grep -q "precision: bf16" "$log" && ok "bf16 from the DeepSpeed config" || fail "not bf16"
grep -qE "clip-grad \.+ 1(\.0)?$" "$log" && ok "gradient_clipping 1.0" || fail "clip-grad not 1.0"
grep -q "TP 2 x PP 2 x DP 1" "$log" && ok "layout TP 2 x PP 2" || fail "layout line: $(grep -m1 'keel |' "$log")"
grep -q " > padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)" "$log" && ok "--pad-vocab-size-to 50304" || fail "padded vocab line"
python3 - "$TMP/m.jsonl" <<'EOF' && ok "ramp-up 2 → 4, 6 iterations, finite losses, validation at the end" || fail "records"
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
it = [r for r in recs if "lm_loss" in r]
gbs = [r["global_batch_size"] for r in it]
assert [r["iteration"] for r in it] == list(range(1, len(it) + 1)), it
assert gbs[0] == 2 and gbs[-1] == 4 and it[-1]["consumed_samples"] == 20, gbs
assert all(math.isfinite(r["lm_loss"]) for r in it)
assert any("val_loss" in r for r in recs), "no validation record"
print(f"{len(it)} iterations, global batch {gbs}")
EOF
[ "$(grep -c '^ iteration ' "$log")" -ge 6 ] && ok "Megatron's log line at every iteration" || fail "log lines"
for i in 3 6; do [ -d "$O/checkpoints/iter_000000$i" ] || fail "no checkpoint at $i"; done
last=$(cat "$O/checkpoints/latest_checkpointed_iteration.txt")
ls "$O/tensorboard"/events.out.tfevents.* >/dev/null 2>&1 && ok "TensorBoard events written" || fail "no TensorBoard events"
run_example >"$TMP/rerun.log" 2>&1 && grep -q "successfully loaded checkpoint from out/bigscience_176b_toy/checkpoints at iteration $last" "$TMP/rerun.log" \
  && ok "rerun loads the finished checkpoint (iteration $last) and ends" || fail "rerun: $(grep -m2 -E 'error|loaded' "$TMP/rerun.log")"

# The same files on the CPU trainer (its --bf16: fp32 arithmetic, bf16 storage emulated), in a second
# scratch copy: it trains the same samples to the same losses, within what the tensor-parallel sums
# allow (the GPU sums bf16 partial products over the ranks, the CPU fp32 ones rounded after;
# measured 2.7e-6 over the seven iterations)
W2="$TMP/w2"
mkdir -p "$W2/scripts"
cp -r scripts/bigscience_176b_toy "$W2/scripts/"
for f in data megatron_data tokenize_gpt2 train_gpt_cpu; do ln -s "$(pwd)/$f" "$W2/$f"; done
TRAINER=./train_gpt_cpu timeout -k 10 300 bash "$W2/scripts/bigscience_176b_toy/run.sh" --metrics-file "$TMP/cpu.jsonl" >"$TMP/cpu.log" 2>&1 \
  && grep -q "precision: bf16 emulated" "$TMP/cpu.log" && grep -q "TP 2 x PP 2 x DP 1" "$TMP/cpu.log" \
  && ok "the CPU trainer runs the block unchanged (bf16 emulated, TP 2 x PP 2)" || fail "CPU trainer: $(grep -m2 -E '^error' "$TMP/cpu.log")"
r=$(compare_jsonl "$TMP/cpu.jsonl" "$TMP/m.jsonl" 1e-4 2>&1) && ok "CPU --bf16 = emulated CUDA --bf16 within 1e-4 over the run ($r)" || fail "CPU vs CUDA: $r"
finish
