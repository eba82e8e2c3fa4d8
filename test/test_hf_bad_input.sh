#!/usr/bin/env bash
# Hugging Face directories that keel must refuse, each with one error line and the exit status of
# its kind (1: a bad file, 2: a bad command line), before any iteration runs:
#   1. malformed model.safetensors (made by test/hf_reference.py corrupt from a good directory): the
#      8-byte header length past the end / too short / the file shorter than 8 bytes, a truncated
#      file, malformed JSON, a duplicate name, offsets past the end, overlapping tensors, a gap, a
#      byte count that is not dtype x shape, an unknown dtype, an integer dtype, a transposed shape,
#      a missing tensor, an unexpected tensor, a stored lm_head that is not the embedding, a weight
#      that is NaN (it used to train with every update skipped, exit 0);
#   2. the directory: no config.json, no model.safetensors (pytorch_model.bin only; sharded);
#   3. config.json: malformed, another model_type, a LayerNorm eps keel does not use, GPT-2's
#      inverse-layer scaling or another MLP width or activation, an untied head, post-LayerNorm OPT,
#      OPT's embedding projection, BLOOM's post-LayerNorm residual;
#   4. flags that contradict the file (shape, activation, positions, embedding LayerNorm) or each
#      other (--load-hf with --load-llmc, --export-dtype without --export-hf, an unknown dtype);
#   5. --export-hf of a model no architecture holds (NormFormer, ALiBi without the embedding
#      LayerNorm or with ReLU, the embedding LayerNorm with learned positions), into a directory
#      holding other files or onto a file, with GPT-2's vocabulary but no tokenizer files — all at
#      start-up; a weight beyond fp16's range under --export-dtype fp16 at export;
#   6. an export of a resumed run killed after writing but before publishing (KEEL_FAULT_SAVE=hf)
#      leaves the previous export byte-identical, and the next export replaces it whole.
source "$(dirname "$0")/lib.sh"
REF="python3 test/hf_reference.py"
RUN=(--seq-length 8 --micro-batch-size 2 --make-vocab-size-divisible-by 16 --train-data-path "$TMP/tiny.bin" --lr 0 --train-iters 1
     --hidden-dropout 0 --attention-dropout 0 --log-interval 1)
GOOD="$TMP/good"
CORRUPT=(len-past-end len-short tiny-file truncated bad-json duplicate-name offsets-past-end overlap gap size-mismatch
         unknown-dtype int-dtype wrong-shape missing extra lm-head-differs)
{
  echo "shard | shard $TMP/tiny.bin 2000 60 1"
  echo "good | make gpt2 $GOOD 2 24 6 60 12 F32 5"
  echo "opt | make opt $TMP/opt 2 24 6 60 12 F32 5"
  echo "bloom | make bloom $TMP/bloom 2 24 6 60 12 F32 5"
  for k in "${CORRUPT[@]}"; do echo "$k | corrupt $GOOD $TMP/bad_$k $k"; done
  echo "huge | corrupt $GOOD $TMP/huge huge-weight"
  cat <<END
c_llama | config $GOOD $TMP/c_llama model_type "llama"
c_eps | config $GOOD $TMP/c_eps layer_norm_epsilon 1e-06
c_inv | config $GOOD $TMP/c_inv scale_attn_by_inverse_layer_idx true
c_inner | config $GOOD $TMP/c_inner n_inner "wide"
c_act | config $GOOD $TMP/c_act activation_function "gelu"
c_tie | config $GOOD $TMP/c_tie tie_word_embeddings false
c_type | config $GOOD $TMP/c_type n_layer "2"
c_post | config $TMP/opt $TMP/c_post do_layer_norm_before false
c_proj | config $TMP/opt $TMP/c_proj word_embed_proj_dim 12
c_res | config $TMP/bloom $TMP/c_res apply_residual_connection_post_layernorm true
END
} | $REF batch >"$TMP/setup.out" || { cat "$TMP/setup.out"; fail "reference set-up"; finish; }
$KEEL "${RUN[@]}" --load-hf "$GOOD" >"$TMP/good.log" 2>&1 && ok "the good directory loads (the refusals below are its defects)" || fail "good directory refused"

# 1. malformed model.safetensors
why() {
  case $1 in
    len-past-end) echo "header length [0-9]+ runs past the end of the file";;
    len-short) echo "header length 1 is too short";;
    tiny-file) echo "shorter than the 8-byte header length";;
    truncated|offsets-past-end) echo "past the end of the data section";;
    bad-json) echo "malformed header JSON at byte [0-9]+: expected a string key";;
    duplicate-name) echo "duplicate key";;
    overlap) echo "overlap in the data section";;
    gap) echo "8 unreferenced bytes before tensor";;
    size-mismatch) echo "data_offsets hold [0-9]+ bytes, but F32 \[[0-9, ]+\] is [0-9]+";;
    unknown-dtype) echo "unknown dtype 'F33'";;
    int-dtype) echo "is I32; keel reads F32, BF16 and F16 weights";;
    wrong-shape) echo "has shape \[72, 24\], but GPT2LMHeadModel with this config.json needs \[24, 72\]";;
    missing) echo "tensor 'transformer.ln_f.bias' is missing";;
    extra) echo "unexpected tensor 'transformer.h.0.attn.extra_gate'";;
    lm-head-differs) echo "lm_head.weight differs from the word embedding";;
  esac
}
for k in "${CORRUPT[@]}"; do
  expect_fail 1 "model.safetensors': .*$(why $k)" $KEEL "${RUN[@]}" --load-hf "$TMP/bad_$k"
done
cp -r "$TMP/huge" "$TMP/nan" && python3 - "$TMP/nan/model.safetensors" <<'EOF'
import struct, sys
b = open(sys.argv[1], "rb").read()
i = b.index(struct.pack("<f", 100000.0))  # the huge directory's first embedding weight: NaN instead
open(sys.argv[1], "wb").write(b[:i] + struct.pack("<f", float("nan")) + b[i + 4:])
EOF
expect_fail 1 "model.safetensors': tensor '(transformer\.)?wte.weight' holds nan at element 0: the weights must be finite" \
  $KEEL "${RUN[@]}" --load-hf "$TMP/nan"

# 2. the directory
mkdir -p "$TMP/empty" "$TMP/ptonly" "$TMP/sharded"
expect_fail 1 "no config.json there" $KEEL "${RUN[@]}" --load-hf "$TMP/empty"
for d in ptonly sharded; do cp "$GOOD/config.json" "$TMP/$d/"; done
touch "$TMP/ptonly/pytorch_model.bin" "$TMP/sharded/model.safetensors.index.json"
expect_fail 1 "no model.safetensors there \(only pytorch_model.bin" $KEEL "${RUN[@]}" --load-hf "$TMP/ptonly"
expect_fail 1 "the weights are sharded" $KEEL "${RUN[@]}" --load-hf "$TMP/sharded"

# 3. config.json
mkdir -p "$TMP/c_json" && cp "$GOOD/model.safetensors" "$TMP/c_json/" && printf '{"model_type": "gpt2",,}' >"$TMP/c_json/config.json"
expect_fail 1 "config.json': malformed JSON at byte 22: expected a string key" $KEEL "${RUN[@]}" --load-hf "$TMP/c_json"
while IFS='|' read -r name pattern; do
  expect_fail 1 "$name/config.json': $pattern" $KEEL "${RUN[@]}" --load-hf "$TMP/$name"
done <<'END'
c_llama|model_type 'llama': keel reads gpt2, bloom and opt
c_eps|"layer_norm_epsilon" is 1e-06; keel's LayerNorm uses 1e-05
c_inv|scale_attn_by_inverse_layer_idx is true
c_inner|n_inner is not an integer; it must be a positive integer \(the MLP width\) or null
c_act|activation_function 'gelu': keel's GPT-2 computes the tanh GeLU
c_tie|tie_word_embeddings is false
c_type|"n_layer" is not an integer
c_post|do_layer_norm_before is false: keel is pre-LayerNorm
c_proj|word_embed_proj_dim differs from hidden_size
c_res|apply_residual_connection_post_layernorm is true
END

# 4. flags against the file, and against each other
expect_fail 2 "--num-layers 3 contradicts --load-hf $GOOD, whose config.json says 2" $KEEL "${RUN[@]}" --load-hf "$GOOD" --num-layers 3
expect_fail 2 "--ffn-hidden-size 100 contradicts --load-hf $GOOD, whose config.json says 96" $KEEL "${RUN[@]}" --load-hf "$GOOD" --ffn-hidden-size 100
expect_fail 2 "--activation relu contradicts --load-hf $GOOD: GPT2LMHeadModel computes gelu" $KEEL "${RUN[@]}" --load-hf "$GOOD" --activation relu
expect_fail 2 "--position-embedding-type alibi contradicts .*GPT2LMHeadModel has learned positions" $KEEL "${RUN[@]}" --load-hf "$GOOD" --position-embedding-type alibi
expect_fail 2 "--embed-layernorm contradicts .*OPTForCausalLM has no embedding LayerNorm" $KEEL "${RUN[@]}" --load-hf "$TMP/opt" --embed-layernorm
expect_fail 2 "--load-hf and --load-llmc both name the starting weights" $KEEL "${RUN[@]}" --load-hf "$GOOD" --load-llmc "$TMP/x.bin"
expect_fail 2 "--export-dtype applies to --export-hf" $KEEL "${RUN[@]}" --load-hf "$GOOD" --export-dtype bf16
expect_fail 2 "--export-dtype: 'fp8' is not one of fp32\|bf16\|fp16" $KEEL "${RUN[@]}" --export-hf "$TMP/o" --export-dtype fp8

# 5. exports refused at start-up (exit 2, before training) and at export (exit 1)
S=(--num-layers 2 --hidden-size 24 --num-attention-heads 6 --vocab-size 60 "${RUN[@]}")
expect_fail 2 "--export-hf: no Hugging Face architecture computes this model: --normformer" $KEEL "${S[@]}" --normformer --export-hf "$TMP/o"
expect_fail 2 "alibi without --embed-layernorm: BLOOM" $KEEL "${S[@]}" --position-embedding-type alibi --export-hf "$TMP/o"
expect_fail 2 "alibi with --activation relu: BLOOM's MLP is GeLU" $KEEL "${S[@]}" --position-embedding-type alibi --embed-layernorm --activation relu --export-hf "$TMP/o"
expect_fail 2 "--embed-layernorm with learned positions: neither GPT-2 nor OPT" $KEEL "${S[@]}" --embed-layernorm --export-hf "$TMP/o"
mkdir -p "$TMP/mine" && echo hi >"$TMP/mine/README.md"
expect_fail 2 "--export-hf $TMP/mine holds 'README.md', which an export does not write" $KEEL "${S[@]}" --export-hf "$TMP/mine"
[ "$(cat "$TMP/mine/README.md")" = hi ] && ok "the user's directory is untouched" || fail "README.md changed"
expect_fail 2 "--export-hf $TMP/tiny.bin exists and is not a directory" $KEEL "${S[@]}" --export-hf "$TMP/tiny.bin"
expect_fail 2 "--export-hf writes GPT-2's tokenizer from --vocab-file $TMP/none.json" \
  $KEEL "${TINY[@]}" --train-iters 3 --export-hf "$TMP/o" --vocab-file "$TMP/none.json"
out=$($KEEL "${S[@]}" --normformer --export-hf "$TMP/o" 2>&1)
grep -q "iteration *1/" <<<"$out" && fail "a refused export trained first" || ok "refused exports stop before the first iteration"
# a weight beyond fp16's range: refused at export under fp16, written under bf16
expect_fail 1 "--export-hf: transformer.wte.weight element 0 is 100000, beyond fp16's range" \
  $KEEL "${RUN[@]}" --load-hf "$TMP/huge" --export-hf "$TMP/h16" --export-dtype fp16
[ ! -e "$TMP/h16" ] && ok "the refused fp16 export published nothing" || fail "$TMP/h16 exists after a refused export"
$KEEL "${RUN[@]}" --load-hf "$TMP/huge" --export-hf "$TMP/h16" --export-dtype bf16 >/dev/null 2>&1 && ok "the same weights export as bf16" || fail "bf16 export of the huge weight"

# 6. killed mid-export: the previous export stays whole. A resumed run (--load) replaces its own
# export (a fresh run refuses an existing one: test_run_safety); bf16 tells the new one apart.
$KEEL "${RUN[@]}" --load-hf "$GOOD" --save "$TMP/pubck" --export-hf "$TMP/pub" >/dev/null 2>&1 || fail "first export"
cp -r "$TMP/pub" "$TMP/pub.copy"
R=(--load-hf "$GOOD" --load "$TMP/pubck" --save "$TMP/pubck" --export-hf "$TMP/pub" --export-dtype bf16)
KEEL_FAULT_SAVE=hf $KEEL "${RUN[@]}" "${R[@]}" >/dev/null 2>&1
rc=$?
[ $rc -eq 137 ] && diff -r "$TMP/pub" "$TMP/pub.copy" >/dev/null && [ -d "$TMP/pub.tmp" ] \
  && ok "killed before publishing (exit $rc): the previous export is byte-identical, the new one sits in pub.tmp" || fail "after the kill: exit $rc"
$KEEL "${RUN[@]}" "${R[@]}" >/dev/null 2>&1 || fail "export after the kill"
grep -q '"torch_dtype": "bfloat16"' "$TMP/pub/config.json" && [ ! -e "$TMP/pub.tmp" ] && [ ! -e "$TMP/pub.old" ] \
  && ok "the next export replaced it whole (bf16 now), nothing left beside it" || fail "the next export: $(ls "$TMP" | grep pub | tr '\n' ' ')"
finish
