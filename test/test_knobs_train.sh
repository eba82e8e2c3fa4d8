#!/usr/bin/env bash
# The schedule, precision and update-skipping knobs through the trainer, each against values worked
# out by hand or replayed independently (in node) from the run's own JSONL, so an inert or wrong knob
# fails: loss-scale trajectories (injected and natural overflows), --fp16 emulation, the grad-norm
# ceiling and the z-score rules, batch ramp-up, curriculum seqlen, token-based LR decay,
# --train-tokens, the gradient pre-divide, and the model knobs' wiring (parameter counts, losses).
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=2
# No validation here: only the training records matter.
BASE=(--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 --global-batch-size 4
      --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.1 --seed 7
      --train-data-path data/brown/brown_train.bin --hidden-dropout 0 --attention-dropout 0 --log-interval 1)
run() { local name=$1; shift; $KEEL "$@" --metrics-file "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1 || { fail "run $name: $*"; tail -3 "$TMP/$name.log"; }; }
# col NAME FIELD: the field's values, one per training record, as text
col() { node -e 'const f=process.argv[2];for(const l of require("fs").readFileSync(process.argv[1],"utf8").split("\n")){if(!l)continue;const r=JSON.parse(l);if("lm_loss" in r)console.log(r[f]===null?"null":r[f])}' "$TMP/$1.jsonl" "$2" | paste -sd' '; }
want() { local got="$1" exp="$2" what="$3"; [ "$got" = "$exp" ] && ok "$what: $got" || fail "$what: got '$got' want '$exp'"; }

# ---- loss scaler (docs/knobs.md#mixed-precision-and-loss-scaling) -------------------------------------------------------------------
# Injected overflows at 2, 3, 7; initial 1024, window 3, hysteresis 2 (worked by hand):
#   it1 clean g1 | it2 inf hyst 2->1 | it3 inf hyst 0: 1024->512 | it4,5 clean | it6 clean g3: 512->1024, hyst 2
#   it7 inf hyst 1 | it8,9 clean | it10 clean g3: 1024->2048
KEEL_INJECT_INF=2,3,7 run inj "${BASE[@]}" --train-iters 10 --fp16 --initial-loss-scale 1024 --loss-scale-window 3 --hysteresis 2
want "$(col inj loss_scale)" "1024 1024 512 512 512 1024 1024 1024 1024 2048" "loss-scale trajectory, injected overflows"
want "$(col inj skipped)" "0 1 1 0 0 0 1 0 0 0" "skipped iterations = the injected ones"
want "$(col inj nan)" "0 1 1 0 0 0 1 0 0 0" "nan iterations = the injected ones"
grep -q "iteration 3: gradient overflow (inf/NaN), update skipped; loss scale 1024 -> 512" "$TMP/inj.log" && ok "overflow line printed" || fail "no overflow line"
grep -q "iteration 10: loss scale 1024 -> 2048 after 3 clean iterations" "$TMP/inj.log" && ok "growth line printed" || fail "no growth line"
grep -q "loss scale: 512.0 |" "$TMP/inj.log" && ok "loss scale in the Megatron line under --fp16" || fail "loss scale missing from the log line"
# Skipped updates do not advance the LR schedule: lr of it3 = lr of it2 = lr of it1's successor
lrs=($(col inj lr))
[ "${lrs[1]}" = "${lrs[2]}" ] && [ "${lrs[2]}" = "${lrs[3]}" ] && [ "${lrs[6]}" = "${lrs[7]}" ] && ok "LR frozen across skipped updates" || fail "LR moved on a skipped update: ${lrs[*]}"
# Natural overflows: from 2^20 the emulated fp16 gradients overflow until the scale is small enough;
# node replays the Megatron state machine on the run's own skipped flags and must get every scale.
run nat "${BASE[@]}" --train-iters 14 --fp16 --initial-loss-scale 1048576 --loss-scale-window 3 --hysteresis 2
replay=$(node -e '
let s=1048576,g=0,h=2,out=[],sk=0;
for(const l of require("fs").readFileSync(process.argv[1],"utf8").split("\n")){ if(!l) continue; const r=JSON.parse(l);
  if(r.skipped){ sk++; g=0; h-=1; if(h<=0) s=Math.max(s*0.5,1); } else { g++; if(g==3){ g=0; h=2; s*=2; } }
  out.push(s===r.loss_scale?"ok":"bad@"+r.iteration+":"+r.loss_scale+"!="+s) }
console.log(out.every(x=>x=="ok")&&sk>0&&sk<14?"ok":"mismatch "+out.join(" ")+" skipped "+sk)' "$TMP/nat.jsonl")
want "$replay" ok "natural overflows: the scale follows the state machine, with some skipped and some applied"
# fp16 emulation: with a static scale of 1 small gradients flush to zero (more zeros than fp32)
run f32 "${BASE[@]}" --train-iters 3
run f16 "${BASE[@]}" --train-iters 3 --fp16 --loss-scale 1
z32=$(col f32 num_zeros | cut -d" " -f1); z16=$(col f16 num_zeros | cut -d" " -f1)
[ "$z16" -gt "$z32" ] && ok "--fp16 emulation flushes small gradients ($z32 -> $z16 zeros)" || fail "--fp16 emulation inert ($z32 vs $z16 zeros)"
want "$(col f16 loss_scale)" "1 1 1" "static --loss-scale stays"
# fp32, no scaler: an injected inf skips the update and counts as nan
KEEL_INJECT_INF=3 run inj32 "${BASE[@]}" --train-iters 5
want "$(col inj32 skipped)" "0 0 1 0 0" "fp32: the injected inf is skipped"
grep -q "iteration 3: update skipped, non-finite gradient" "$TMP/inj32.log" && ok "fp32: non-finite line" || fail "fp32: no non-finite line"
grep -q "number of nan iterations:   1" "$TMP/inj32.log" && ok "fp32: counted in the log line" || fail "fp32: nan not counted"

# ---- update-skipping rules (docs/knobs.md#rejecting-a-batch-by-its-gradient-norm and keel's z-scores) ----------------------------------------
# The grad-norm ceiling: skipped exactly when grad_norm > X (pre-clip), and then the LR stays.
run gn "${BASE[@]}" --train-iters 12 --skip-update-grad-norm-above 1.8
v=$(node -e 'let bad=0,sk=0,prev=null;for(const l of require("fs").readFileSync(process.argv[1],"utf8").split("\n")){if(!l)continue;const r=JSON.parse(l);
  if((r.grad_norm>1.8)!==(r.skipped==1))bad++; if(r.skipped)sk++; if(prev&&prev.skipped&&prev.lr!==r.lr)bad++; prev=r}
  console.log(bad==0&&sk>0&&sk<12?"ok":"bad="+bad+" skipped="+sk)' "$TMP/gn.jsonl")
want "$v" ok "--skip-update-grad-norm-above: skipped iff norm > 1.8, LR frozen after a skip, some of each"
grep -qE "update skipped, grad norm [0-9.]+ > --skip-update-grad-norm-above 1.8" "$TMP/gn.log" && ok "grad-norm line" || fail "no grad-norm line"
# z-scores over a window of 3 applied updates (population sd); node replays the verdicts.
zcheck() {  # $1 run name, $2 field (lm_loss|grad_norm), $3 Z
  node -e 'const [f,fld,Z]=[process.argv[1],process.argv[2],+process.argv[3]];let w=[],bad=0,sk=0;
  for(const l of require("fs").readFileSync(f,"utf8").split("\n")){if(!l)continue;const r=JSON.parse(l),x=r[fld];let skip=false;
    if(w.length==3){const m=(w[0]+w[1]+w[2])/3;const sd=Math.sqrt(((w[0]-m)**2+(w[1]-m)**2+(w[2]-m)**2)/3);const z=sd==0?(x>m?Infinity:0):(x-m)/sd;skip=z>Z}
    if(skip!==(r.skipped==1))bad++; if(r.skipped)sk++; else {w.push(x); if(w.length>3)w.shift()} }
  console.log(bad==0&&sk>0?"ok":"bad="+bad+" skipped="+sk)' "$TMP/$1.jsonl" "$2" "$3"; }
run zl "${BASE[@]}" --train-iters 16 --skip-update-loss-zscore 0.3 --skip-update-window 3
want "$(zcheck zl lm_loss 0.3)" ok "--skip-update-loss-zscore: verdicts replayed from the window"
grep -qE "update skipped, loss z-score" "$TMP/zl.log" && ok "loss z-score line" || fail "no loss z-score line"
run zn "${BASE[@]}" --train-iters 16 --skip-update-norm-zscore 1.0 --skip-update-window 3
want "$(zcheck zn grad_norm 1.0)" ok "--skip-update-norm-zscore: verdicts replayed from the window"
# Resume keeps the windows: split at 8 = straight
run zs "${BASE[@]}" --train-iters 16 --skip-update-loss-zscore 0.3 --skip-update-window 3 --save "$TMP/zck" --exit-interval 8
run zs2 "${BASE[@]}" --train-iters 16 --skip-update-loss-zscore 0.3 --skip-update-window 3 --load "$TMP/zck"
cat "$TMP/zs2.jsonl" >>"$TMP/zs.jsonl"
cmp -s <(strip_timing "$TMP/zl.jsonl") <(strip_timing "$TMP/zs.jsonl") && ok "z-score windows survive a resume bit-exactly" || fail "z-score resume differs"
# a resume may shorten the window: the newest values are kept
run zs3 "${BASE[@]}" --train-iters 16 --skip-update-loss-zscore 0.3 --skip-update-window 2 --load "$TMP/zck"

# ---- batch ramp-up (docs/knobs.md#batch-size-ramp-up) ---------------------------------------------------------------------
# START 2, INCR 2, over 8 samples to GBS 6, micro-batch 2: 2 increments, one every 4 samples.
#   consumed 0 → 2, 2 → 2, 4 → 4, 8 → 6 (8 is not > 8: 2 + int(8/4)·2), 14 → 6 ...
# --train-samples 40: the ramp takes 4 iterations (14 samples), then (40-14)//6 = 4 more → 8 iterations.
R=(--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 --global-batch-size 6
   --lr 3e-3 --lr-decay-style cosine --lr-warmup-samples 8 --seed 7 --train-data-path data/brown/brown_train.bin
   --hidden-dropout 0 --attention-dropout 0 --log-interval 1)
run ramp "${R[@]}" --train-samples 40 --rampup-batch-size 2 2 8
want "$(col ramp global_batch_size)" "2 2 4 6 6 6 6 6" "ramp-up: global batch per iteration"
want "$(col ramp consumed_samples)" "2 4 8 14 20 26 32 38" "ramp-up: consumed samples"
grep -q "global batch size:     4 |" "$TMP/ramp.log" && ok "ramp-up: current batch in the log line" || fail "ramp-up batch missing from the log line"
expect_fail 2 "rampup-batch-size" $KEEL "${BASE[@]}" --train-iters 5 --rampup-batch-size 2 2 8
expect_fail 2 "rampup-batch-size.*divisible" $KEEL "${R[@]}" --train-samples 40 --rampup-batch-size 3 3 8

# ---- curriculum learning (docs/knobs.md#curriculum-learning) ----------------------------------------------------------------
# min 8, max 16, step 4, 4 steps, fixed_linear: d(t) = floor(t/4·8 + 8) - d%4:
#   t=1: 10→8, t=2: 12, t=3: 14→12, t=4: 16, t=5: 16 (capped)
C=("${BASE[@]}" --curriculum-learning --cl-min-seqlen 8 --cl-max-seqlen 16 --cl-difficulty-step 4 --cl-total-steps 4)
run cl "${C[@]}" --train-iters 5
want "$(col cl seqlen)" "8 12 12 16 16" "curriculum: seqlen per iteration"
want "$(col cl consumed_tokens)" "32 80 128 192 256" "curriculum: tokens counted at the current length"
grep -q "curriculum seqlen:    12 |" "$TMP/cl.log" && ok "curriculum seqlen in the log line" || fail "curriculum seqlen missing from the log line"
# validation is at full length: with LR 0 the weights stay, so val loss equals a plain run's
run clv "${C[@]}" --train-iters 3 --lr 0 --min-lr 0 --valid-data-path data/brown/brown_val.bin --eval-interval 3 --eval-iters 2
run plv "${BASE[@]}" --train-iters 3 --lr 0 --min-lr 0 --valid-data-path data/brown/brown_val.bin --eval-interval 3 --eval-iters 2
a=$(grep val_loss "$TMP/clv.jsonl" | head -1); b=$(grep val_loss "$TMP/plv.jsonl" | head -1)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "curriculum: validation at full length ($a)" || fail "curriculum validation: '$a' vs '$b'"
expect_fail 2 "cl-min-seqlen" $KEEL "${BASE[@]}" --train-iters 2 --curriculum-learning --cl-min-seqlen 6 --cl-difficulty-step 4 --cl-total-steps 4

# ---- token-based LR decay and --train-tokens (docs/knobs.md#learning-rate-schedule, #curriculum-learning) ------------------------------------
# Under the curriculum the tokens per iteration vary, so token decay differs from sample decay.
# lr of iteration i+1 = f(samples = i·4, tokens = consumed tokens before iteration i); warmup 8
# samples (2 iterations) captures warmup_tokens = tokens before iteration 2 = 32.
run tok "${C[@]}" --train-iters 8 --lr-decay-tokens 400
v=$(node -e 'const rs=require("fs").readFileSync(process.argv[1],"utf8").split("\n").filter(l=>l).map(l=>JSON.parse(l));
  const mx=3e-3,mn=3e-4,W=8,D=400,wt=32;let bad=[];const tok=i=>i<=0?0:rs[i-1].consumed_tokens;
  rs.forEach((r,k)=>{const i=k+1,steps=(i-1)*4,nt=tok(i-2);let lr;
    if(steps<=W) lr=mx*steps/W; else if(nt>D) lr=mn; else {const q=(nt-wt)/(D-wt);lr=mn+0.5*(Math.cos(Math.PI*q)+1)*(mx-mn)}
    if(Math.abs(lr-r.lr)>1e-12*mx) bad.push(i+":"+r.lr+"!="+lr)});
  console.log(bad.length?bad.join(" "):"ok")' "$TMP/tok.jsonl")
want "$v" ok "--lr-decay-tokens: LR per iteration from consumed tokens"
lrs_tok=$(col tok lr); run smp "${C[@]}" --train-iters 8
[ "$lrs_tok" != "$(col smp lr)" ] && ok "token decay differs from sample decay under the curriculum" || fail "token decay inert"
# --train-tokens 150 with the curriculum (32, 80, 128, 192 tokens after iterations 1-4): stops after 4
run tt "${C[@]}" --train-iters 100 --train-tokens 150
want "$(col tt iteration | awk '{print $NF}')" "4" "--train-tokens: last iteration"
grep -q "stopping: 192 tokens consumed, --train-tokens 150 reached" "$TMP/tt.log" && ok "--train-tokens line" || fail "no --train-tokens line"

# ---- gradient pre-divide (docs/knobs.md#gradient-pre-divide-factor): on one process the net factor is 1, only rounding differs ----
run pd1 "${BASE[@]}" --train-iters 4
run pd3 "${BASE[@]}" --train-iters 4 --gradient-predivide-factor 3
v=$(node -e 'const a=process.argv[1].split(" ").map(Number),b=process.argv[2].split(" ").map(Number);
  console.log(a.every((x,i)=>Math.abs(x-b[i])<1e-5*Math.abs(x))&&a.some((x,i)=>x!==b[i])?"ok":"bad "+a+" | "+b)' "$(col pd1 grad_norm)" "$(col pd3 grad_norm)")
want "$v" ok "--gradient-predivide-factor 3: applied (different rounding), same mean within 1e-5"

# ---- model knobs are wired: parameter counts and losses ---------------------------------------------
# plain: 1635712 parameters with padding (L2 C32, Vp 50304, maxT 16); embedding LN +2C; ALiBi -maxT·C;
# NormFormer +L·(NH + 2C + 8C) = 2·(4 + 64 + 256)
params() { sed -nE 's/.*\(([0-9]+) with vocabulary padding\).*/\1/p' "$TMP/$1.log"; }
# 4 heads (head size 8): with head size 16 the scalings are powers of two and exact, so equal bits.
run m_plain "${BASE[@]}" --num-attention-heads 4 --train-iters 3
plain_loss=$(col m_plain lm_loss)
declare -A delta=( [embed-layernorm]=64 [stable-embedding]=64 [alibi]=-512 [normformer]=648 [relu]=0 [qk-inward]=0
                   [sinusoidal]=0 [small-init]=0 [dropout]=0 )
declare -A flags=( [embed-layernorm]="--embed-layernorm" [stable-embedding]="--stable-embedding"
                   [alibi]="--position-embedding-type alibi" [normformer]="--normformer" [relu]="--activation relu"
                   [qk-inward]="--attention-scaling qk-inward"
                   [sinusoidal]="--position-embedding-init sinusoidal" [small-init]="--init-method small_init"
                   [dropout]="--hidden-dropout 0.1" )
for k in "${!flags[@]}"; do
  run "m_$k" "${BASE[@]}" --num-attention-heads 4 --train-iters 3 ${flags[$k]}
  want "$(params "m_$k")" "$((1635712 + ${delta[$k]}))" "$k: parameter count"
  [ "$(col "m_$k" lm_loss)" != "$plain_loss" ] && ok "$k: changes the losses" || fail "$k: losses identical to the plain model"
done
# "absolute" is Megatron's name for the learned table: the same model, the same bits
run m_absolute "${BASE[@]}" --num-attention-heads 4 --train-iters 3 --position-embedding-type absolute
want "$(col m_absolute lm_loss)" "$plain_loss" "--position-embedding-type absolute = learned"
# layer scaling by 1, 2 is exact in binary: take 3 layers so layer 3's coefficient is not a power of two
run m3_plain "${BASE[@]}" --num-attention-heads 4 --num-layers 3 --train-iters 3
run m3_ls "${BASE[@]}" --num-attention-heads 4 --num-layers 3 --train-iters 3 --apply-query-key-layer-scaling
[ "$(col m3_ls lm_loss)" != "$(col m3_plain lm_loss)" ] && ok "layer-scaling: changes the losses (rounding only)" || fail "layer-scaling: losses identical"
grep -q "init: --init-method small_init gives sigma = 0.11180339887498948" "$TMP/m_small-init.log" && ok "small_init sigma printed (sqrt(2/160))" || fail "small_init sigma line"
finish
