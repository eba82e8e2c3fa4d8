#!/usr/bin/env bash
# Hugging Face directories (llmc/hf.h), against test/hf_reference.py — an independent reader and
# forward pass written from transformers' GPT-2, BLOOM and OPT modules (stdlib Python, no torch):
#   1. for GPT-2, BLOOM (ALiBi + embedding LayerNorm, 6 heads: ALiBi's non-power-of-two slopes) and
#      OPT (ReLU), a model trained 3 iterations is exported; the reader finds exactly the
#      architecture's tensor names, shapes and one dtype, offsets tiling the data, an 8-aligned
#      header, format pt, config.json's keys, OPT's unused position rows zero, no tokenizer files for
#      a 60-token vocabulary;
#   2. keel's iteration-1 loss from that directory (--load-hf, --lr 0) = the reference forward of
#      the exported tensors on the very rows keel trained on (KEEL_DUMP_TOKENS) within 1e-6; a
#      deliberate layout error in the reference (GPT-2 Conv1D untransposed, BLOOM QKV as (3,NH,hs),
#      OPT positions without the offset 2) misses by more than 1e-2: the match is not an accident;
#   3. round trips: keel → HF → keel gives the same canonical weights (checkpoint model.bin
#      byte-identical) and HF → keel → HF the same model.safetensors (and config.json, the
#      init-σ line aside), in one process, at TP=2 and at PP=2 (mpirun);
#   4. directories made by the reference the way published ones look (GPT-2 without prefix, with
#      the attention-mask buffers, F32; BLOOM without prefix, BF16; OPT with model. prefix, a stored
#      tied lm_head, non-zero unused position rows, F16) load with no shape flags: keel's loss = the
#      reference forward, and keel's re-export holds the same weights;
#   5. --export-dtype bf16 and fp16: every weight is the fp32 export rounded to nearest even
#      (Python's own rounding), torch_dtype says so, and dtype → keel → dtype is byte-identical;
#   6. GPT-2's vocabulary: vocab.json / merges.txt are the tokenizer's files byte for byte;
#   7. starting points: --load-hf with --finetune trains from the file's weights (fresh counters, the
#      loss falls); a --load checkpoint takes precedence over --load-hf (said on a note line);
#      --normformer on top of an HF directory trains, its own tensors from their init (as under
#      --load-llmc), the file's tensors in place (the checkpoint holds them);
#   8. the CUDA trainer (build/train_gpt_emu, or KEEL_CUDA_TRAINER=./train_gpt on a GPU), bf16: its
#      loss from each exported directory = the reference within 5e-3 (bf16's rounding), and its
#      re-export (from the fp32 master weights) byte-identical.
# keel runs first; the reference then checks everything in one interpreter (its start-up is ~1 s).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
REF="python3 test/hf_reference.py"
CUDA=${KEEL_CUDA_TRAINER:-build/train_gpt_emu}
SHAPE=(--num-layers 2 --hidden-size 24 --num-attention-heads 6 --vocab-size 60 --max-position-embeddings 12)
RUN=(--seq-length 8 --micro-batch-size 2 --global-batch-size 4 --make-vocab-size-divisible-by 16
     --train-data-path "$TMP/tiny.bin" --seed 3 --log-interval 1 --hidden-dropout 0 --attention-dropout 0)
HOLD=(--lr 0 --weight-decay 0 --train-iters 1)  # one iteration that changes nothing
ARCHS=(gpt2 bloom opt)
knobs() { case $1 in gpt2) ;; bloom) echo --position-embedding-type alibi --embed-layernorm;; opt) echo --activation relu;; esac; }
dtype_of() { case $1 in gpt2) echo F32;; bloom) echo BF16;; opt) echo F16;; esac; }
lm_loss() { grep -o '"lm_loss": [^,}]*' "$1" | head -n "${2:-1}" | tail -n 1 | cut -d' ' -f2; }
keel() {  # keel LOG ARGS...: a run that must succeed
  local log=$1; shift
  "$@" >"$log" 2>&1 || { fail "run failed: ${*: -6} (log: $(tail -n 2 "$log" | tr '\n' ' '))"; return 1; }
}
CHECKS=()  # "LABEL | reference command", run in one batch at the end

$REF batch >"$TMP/setup.out" <<END || { cat "$TMP/setup.out"; fail "reference set-up"; finish; }
shard | shard $TMP/tiny.bin 4000 60 1
$(for a in "${ARCHS[@]}"; do echo "make $a | make $a $TMP/made_$a 2 24 6 60 12 $(dtype_of $a) 5"; done)
END

for a in "${ARCHS[@]}"; do
  # 1. export; 2. the forward; 3. the round trips
  keel "$TMP/$a.1.log" $KEEL "${SHAPE[@]}" "${RUN[@]}" $(knobs $a) --lr 1e-2 --init-method-std 0.3 --train-iters 3 \
    --save "$TMP/$a.ck1" --export-hf "$TMP/$a.hf" || continue
  CHECKS+=("$a: the export | check $TMP/$a.hf $a 2 24 6 60 12 F32")
  KEEL_DUMP_TOKENS="$TMP/$a.dump" keel "$TMP/$a.2.log" $KEEL "${RUN[@]}" "${HOLD[@]}" --load-hf "$TMP/$a.hf" \
    --metrics-file "$TMP/$a.jsonl" --save "$TMP/$a.ck2" --export-hf "$TMP/$a.hf2" || continue
  CHECKS+=("$a: the export's forward | match $TMP/$a.hf $TMP/$a.dump.rank0 $TMP/$a.jsonl")
  cmp -s <(tail -c +65 "$TMP/$a.ck1/iter_0000003/model.bin") <(tail -c +65 "$TMP/$a.ck2/iter_0000001/model.bin") \
    && ok "$a: keel -> HF -> keel: the canonical weights (model.bin) are byte-identical" || fail "$a: keel -> HF -> keel changed the weights"
  cmp -s "$TMP/$a.hf/model.safetensors" "$TMP/$a.hf2/model.safetensors" \
    && cmp -s <(grep -v '"init' "$TMP/$a.hf/config.json") <(grep -v '"init' "$TMP/$a.hf2/config.json") \
    && ok "$a: HF -> keel -> HF: model.safetensors and config.json byte-identical" || fail "$a: HF -> keel -> HF differs"
  for layout in "--tensor-model-parallel-size 2" "--pipeline-model-parallel-size 2"; do
    par="$TMP/$a.par.$(cut -d- -f3 <<<"$layout")"  # one export directory per layout (a fresh run refuses a used one)
    keel "$par.log" timeout -k 10 120 mpirun --oversubscribe -np 2 $KEEL "${RUN[@]}" "${HOLD[@]}" $layout \
      --load-hf "$TMP/$a.hf" --export-hf "$par" || continue
    cmp -s "$TMP/$a.hf/model.safetensors" "$par/model.safetensors" \
      && ok "$a $layout: loaded into the split model and gathered back byte-identical" || fail "$a $layout: the export differs"
  done
  # 4. a directory made the way published ones look, loaded with no shape or architecture flags
  KEEL_DUMP_TOKENS="$TMP/made_$a.dump" keel "$TMP/made_$a.log" $KEEL "${RUN[@]}" "${HOLD[@]}" --load-hf "$TMP/made_$a" \
    --metrics-file "$TMP/made_$a.jsonl" --export-hf "$TMP/made_$a.out" || continue
  CHECKS+=("made $a ($(dtype_of $a)): the forward | match $TMP/made_$a $TMP/made_$a.dump.rank0 $TMP/made_$a.jsonl")
  CHECKS+=("made $a: keel's re-export holds its weights | same $TMP/made_$a $TMP/made_$a.out")
done
grep -q "OPTForCausalLM (learned positions, ReLU, pre-LayerNorm), L=2 C=24 NH=6 V=60 maxT=12" "$TMP/made_opt.log" \
  && ok "the architecture and shape came from config.json" || fail "no architecture line for the made OPT"

# 5. export dtypes
for dt in bf16 fp16; do
  DT=$([ $dt = bf16 ] && echo BF16 || echo F16)
  keel "$TMP/d_$dt.log" $KEEL "${RUN[@]}" "${HOLD[@]}" --load-hf "$TMP/gpt2.hf" --export-hf "$TMP/d_$dt" --export-dtype $dt || continue
  CHECKS+=("$dt: the export | check $TMP/d_$dt gpt2 2 24 6 60 12 $DT" "$dt: the values | rounded $TMP/gpt2.hf $TMP/d_$dt $DT")
  keel "$TMP/d2_$dt.log" $KEEL "${RUN[@]}" "${HOLD[@]}" --load-hf "$TMP/d_$dt" --export-hf "$TMP/d2_$dt" --export-dtype $dt || continue
  cmp -s "$TMP/d_$dt/model.safetensors" "$TMP/d2_$dt/model.safetensors" && ok "$dt -> keel -> $dt byte-identical" || fail "$dt round trip differs"
done

# 6. GPT-2's vocabulary: the tokenizer files
keel "$TMP/v.log" $KEEL "${TINY[@]}" --train-iters 3 --eval-interval 0 --export-hf "$TMP/v" \
  && CHECKS+=("GPT-2 vocabulary | check $TMP/v gpt2 2 32 2 50257 16 F32")

# 7. starting points
if keel "$TMP/ft.log" $KEEL "${RUN[@]}" --lr 1e-2 --train-iters 6 --load-hf "$TMP/made_opt" --finetune --metrics-file "$TMP/ft.jsonl"; then
  first=$(head -n 1 "$TMP/ft.jsonl" | grep -o '"iteration": 1, "consumed_samples": 4,')
  [ -n "$first" ] && ok "--load-hf --finetune: counters start at iteration 1" || fail "--finetune: $(head -c 80 "$TMP/ft.jsonl")"
  [ "$(lm_loss "$TMP/ft.jsonl")" = "$(lm_loss "$TMP/made_opt.jsonl")" ] && ok "--finetune's first loss is the file's weights' loss" || fail "--finetune starts elsewhere"
  awk -v a="$(lm_loss "$TMP/ft.jsonl")" -v b="$(lm_loss "$TMP/ft.jsonl" 6)" 'BEGIN { exit !(b < a) }' \
    && ok "--finetune trains: loss $(lm_loss "$TMP/ft.jsonl") -> $(lm_loss "$TMP/ft.jsonl" 6)" || fail "--finetune: the loss did not fall"
fi
keel "$TMP/pre.log" $KEEL "${RUN[@]}" "${HOLD[@]}" --load-hf "$TMP/made_opt" --load "$TMP/opt.ck2"
out=$(cat "$TMP/pre.log")
grep -q "weights from the checkpoint, so --load-hf $TMP/made_opt is not used" <<<"$out" \
  && ok "a --load checkpoint takes precedence over --load-hf (note printed)" || fail "no precedence note"

keel "$TMP/nf.log" $KEEL "${RUN[@]}" "${HOLD[@]}" --load-hf "$TMP/gpt2.hf" --normformer --save "$TMP/nf"
grep -q "Hugging Face directory $TMP/gpt2.hf (--normformer's tensors, which it lacks, from their init)" "$TMP/nf.log" \
  && n=$(grep -o '([0-9]* with vocabulary padding)' "$TMP/gpt2.2.log" | grep -o '[0-9]*') \
  && cmp -s "$TMP/gpt2.ck2/iter_0000001/model.bin" <(head -c $((64 + 4 * n)) "$TMP/nf/iter_0000001/model.bin") --ignore-initial=64:64 \
  && ok "--load-hf + --normformer: the file's tensors in place, NormFormer's from their init" || fail "--load-hf + --normformer"

# 8. the CUDA trainer
if [ -x "$CUDA" ]; then
  for a in "${ARCHS[@]}"; do
    KEEL_DUMP_TOKENS="$TMP/cu_$a.dump" keel "$TMP/cu_$a.log" $CUDA "${RUN[@]}" "${HOLD[@]}" --load-hf "$TMP/$a.hf" \
      --metrics-file "$TMP/cu_$a.jsonl" --export-hf "$TMP/cu_$a" || continue
    CHECKS+=("$a on $CUDA (bf16): the forward | match $TMP/$a.hf $TMP/cu_$a.dump.rank0 $TMP/cu_$a.jsonl 5e-3")
    cmp -s "$TMP/$a.hf/model.safetensors" "$TMP/cu_$a/model.safetensors" \
      && ok "$a on $CUDA: HF -> keel (bf16) -> HF byte-identical" || fail "$a on $CUDA: the re-export differs"
  done
  grep -q "backend: cuda" "$TMP/cu_gpt2.log" || fail "$CUDA does not report the CUDA backend"
else
  fail "$CUDA not built (make build/train_gpt_emu)"
fi

# the reference's checks, in one interpreter
out=$(printf '%s\n' "${CHECKS[@]}" | $REF batch)
while IFS= read -r line; do
  case $line in FAIL:*) fail "${line#FAIL: }";; *) echo "$line";; esac
done <<<"$out"
[ "$(grep -c '^ok:' <<<"$out")" -eq ${#CHECKS[@]} ] || fail "$(grep -c '^ok:' <<<"$out") of ${#CHECKS[@]} reference checks passed"
finish
