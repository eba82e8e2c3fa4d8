#!/usr/bin/env bash
# scripts/plot.sh (metrics JSONL → tables → PNG through gnuplot):
#  1. a tiny --fp16 run with skip-update flags and validation: exit 0, nothing on stderr, a real PNG
#     next to the JSONL; every table equals an independent sed extraction from the JSONL (null values
#     left out), validation points carry their iteration's tokens, the skipped updates are the
#     records with "skipped": 1, and stdout gives each table's point count; a run with spike-autopilot
#     rollbacks: the rollback table (at the tokens of the spiking iteration) against the JSONL;
#  2. the same file plus a torn write, then iterations 17.. again (a crash, then a resume from
#     iteration 16 that appends without truncating): the same tables;
#  3. a hand-written JSONL (nulls, an added array key, validation before any training record, a
#     skipped update, a spike-autopilot skip and rollback, a validation logged again, iterations 3-4
#     repeated, a torn write with the next record glued to it): exact tables;
#     A single record (every series constant) plots without gnuplot warnings.
#     One loss panel holds training and validation loss; a plain fp32 run (loss scale 1, nothing
#     skipped) gets no loss-scale or skipped-updates panel, an --fp16 run with skips gets both.
#  4. errors (one `error:` line, exit 1): missing file, empty file, no training records, no gnuplot,
#     bad arguments.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
PLOT=scripts/plot.sh
command -v gnuplot >/dev/null 2>&1 || { fail "gnuplot is not installed: run scripts/setup.sh"; finish; }

# rows FILE: a table without its header.
rows() { grep -v '^#' "$1"; }
# expected KEY JSONL: "iteration tokens value" of every training record whose KEY is not null.
expected() {
  sed -nE 's/^\{"iteration": ([0-9]+), "consumed_samples": [0-9]+, "consumed_tokens": ([0-9]+), .*"'"$1"'": ([^,}]+)[,}].*/\1 \2 \3/p' "$2" \
    | grep -v ' null$'
}
# same_table WHAT GOT EXPECTED_TEXT
same_table() {
  if [ "$(rows "$2")" = "$3" ]; then ok "$1: $(rows "$2" | wc -l) rows as expected"; else
    fail "$1 differs"; diff <(rows "$2") <(echo "$3") | head -n 6; fi
}
is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ]; }

# --- 1. a real run -----------------------------------------------------------------------------
mkdir -p "$TMP/run"
M=$TMP/run/m.jsonl
$KEEL "${TINY[@]}" --train-iters 24 --fp16 --skip-update-loss-zscore 2 --skip-update-window 5 \
  --metrics-file "$M" >"$TMP/train.log" 2>&1 || { fail "training run"; tail -n 3 "$TMP/train.log"; }
nskip=$(grep -c '"skipped": 1,' "$M"); nval=$(grep -c '"val_loss"' "$M")
[ "$nskip" -gt 0 ] && [ "$nval" -gt 0 ] && [ "$(expected loss_scale "$M" | cut -d' ' -f3 | sort -u | wc -l)" -gt 1 ] \
  && ok "the run has $nskip skipped updates, $nval validations, a moving loss scale" \
  || fail "the run lacks skipped updates, validations or loss-scale changes"
if bash $PLOT "$M" >"$TMP/out" 2>"$TMP/err"; then ok "plot.sh exit 0"; else fail "plot.sh exit $?: $(cat "$TMP/err")"; fi
[ -s "$TMP/err" ] && fail "stderr not empty: $(head -n 3 "$TMP/err")"
is_png "$TMP/run/m.png" && ok "m.png next to the JSONL is a PNG" || fail "no PNG at $TMP/run/m.png"
T=$TMP/run/m.plot
for key in lm_loss grad_norm lr loss_scale; do
  table=$T/${key#lm_}.dat
  same_table "$key" "$table" "$(expected "$key" "$M")"
  grep -qE "/${key#lm_}\.dat +points: $(rows "$table" | wc -l)$" "$TMP/out" || fail "stdout lacks the $key point count"
done
[ "$(rows "$T/grad_norm.dat" | wc -l)" -lt 24 ] && ok "null grad norms left out" || fail "the run has no null grad norm"
want_val=$(sed -nE 's/^\{"iteration": ([0-9]+), "val_loss": ([^,]+),.*/\1 \2/p' "$M" | while read -r it v; do
  echo "$it $(grep "^{\"iteration\": $it, \"consumed_samples\"" "$M" | sed -E 's/.*"consumed_tokens": ([0-9]+),.*/\1/') $v"
done)
same_table "validation (tokens of its iteration)" "$T/val.dat" "$want_val"
same_table "skipped updates" "$T/skipped.dat" "$(grep '"skipped": 1,' "$M" | sed -E 's/^\{"iteration": ([0-9]+), .*"consumed_tokens": ([0-9]+), .*"lm_loss": ([^,]+),.*/\1 \2 \3/')"
grep -q "skipped updates: $nskip, rollbacks: 0" "$T/plot.gp" && ok "panel title counts $nskip skipped" || fail "skipped count not in plot.gp"
# one loss panel: training and validation on the same axes; the fp16 run's loss scale and skips get theirs
grep -q "^plot 'loss.dat' using 2:3 .*'val.dat' using 2:3" "$T/plot.gp" && ! grep -q "^set title 'validation loss'" "$T/plot.gp" \
  && ok "training and validation loss in one panel" || fail "loss panels: $(grep -E "^set title|^plot 'loss|^plot 'val" "$T/plot.gp")"
grep -q "^set multiplot layout 3,2" "$T/plot.gp" && grep -q "^set title 'loss scale'" "$T/plot.gp" && ok "--fp16 run: 5 panels, loss scale among them" \
  || fail "fp16 panels: $(grep -E '^set (title|multiplot)' "$T/plot.gp")"
# a plain fp32 run (constant loss scale 1, nothing skipped): no empty loss-scale or skipped panels
mkdir -p "$TMP/f32"
$KEEL "${TINY[@]}" --train-iters 6 --metrics-file "$TMP/f32/m.jsonl" >"$TMP/f32.log" 2>&1 || fail "fp32 run"
bash $PLOT "$TMP/f32/m.jsonl" >"$TMP/out" 2>"$TMP/err" && [ ! -s "$TMP/err" ] && is_png "$TMP/f32/m.png" || fail "plot.sh on the fp32 run: $(cat "$TMP/err")"
G=$TMP/f32/m.plot/plot.gp
[ "$(grep -c '^set title' "$G")" -eq 3 ] && grep -q "^set multiplot layout 2,2" "$G" && ! grep -q "^set title 'loss scale'\|^set title 'skipped" "$G" \
  && ok "fp32 run: 3 panels (loss, grad norm, learning rate), no loss scale, no skipped updates" || fail "fp32 panels: $(grep -E '^set (title|multiplot)' "$G")"

# a run with spike-autopilot rollbacks (a low z-score on a short window makes them happen)
mkdir -p "$TMP/spike"
P=$TMP/spike/p.jsonl
$KEEL "${TINY[@]}" --train-iters 30 --spike-policy rollback --spike-zscore 1 --spike-window 3 --spike-snapshot-interval 4 \
  --spike-max-rollbacks 100 --metrics-file "$P" >"$TMP/spike.log" 2>&1 || { fail "spike run"; tail -n 3 "$TMP/spike.log"; }
bash $PLOT "$P" >"$TMP/out" 2>"$TMP/err" && [ ! -s "$TMP/err" ] || fail "plot.sh on the spike run: $(cat "$TMP/err")"
want_rb=$(sed -nE 's/^\{"iteration": ([0-9]+), "spike": "rollback", "metric": "([a-z-]+)", "value": ([^,]+), .*"restored_iteration": ([0-9]+),.*/\1 \4 \2 \3/p' "$P" |
  while read -r it restored metric v; do
    echo "$it $(grep "^{\"iteration\": $it, \"consumed_samples\"" "$P" | sed -E 's/.*"consumed_tokens": ([0-9]+),.*/\1/') $restored $metric $v"
  done)
[ -n "$want_rb" ] && ok "the spike run has $(grep -c . <<<"$want_rb") rollbacks" || fail "the spike run has no rollback"
same_table "rollbacks (tokens of their iteration)" "$TMP/spike/p.plot/rollback.dat" "$want_rb"
same_table "spike run: skipped updates" "$TMP/spike/p.plot/skipped.dat" "$(grep '"skipped": 1,' "$P" | sed -E 's/^\{"iteration": ([0-9]+), .*"consumed_tokens": ([0-9]+), .*"lm_loss": ([^,]+),.*/\1 \2 \3/')"
same_table "spike run: loss" "$TMP/spike/p.plot/loss.dat" "$(expected lm_loss "$P")"
grep -q "set arrow from" "$TMP/spike/p.plot/plot.gp" && is_png "$TMP/spike/p.png" && ok "rollback markers drawn" || fail "no rollback markers in plot.gp"

# --- 2. a torn write and repeated iterations ----------------------------------------------------
R=$TMP/rep/r.jsonl; mkdir -p "$TMP/rep"
{ cat "$M"; printf '{"iteration": 25, "consumed_samples": 100, "consu'; awk '/^\{"iteration": (1[7-9]|2[0-9]),/' "$M"; } >"$R"
bash $PLOT "$R" >"$TMP/out" 2>"$TMP/err" || fail "plot.sh on the repeated file: $(cat "$TMP/err")"
for f in loss val grad_norm lr loss_scale skipped rollback; do
  cmp -s "$T/$f.dat" "$TMP/rep/r.plot/$f.dat" || fail "repeated iterations: $f.dat differs from the original"
done
grep -q "incomplete lines left out" "$TMP/out" && grep -q "superseded" "$TMP/out" \
  && ok "repeated iterations: the later lines win, torn line left out" || fail "no notes on stdout: $(cat "$TMP/out")"

# --- 3. a hand-written JSONL -------------------------------------------------------------------
S=$TMP/syn/s.jsonl; mkdir -p "$TMP/syn"
tail_keys='"num_zeros": 0, "seqlen": 16, "percentile_clipped": 0'
timing='"elapsed_ms": 1.5, "samples_per_second": 100, "tflops": 0.001'
rec() { # IT TOKENS LR LOSS SCALE NORM SKIPPED NAN [EXTRA]
  echo "{\"iteration\": $1, \"consumed_samples\": $(($2 / 16)), \"consumed_tokens\": $2, \"lr\": $3, \"global_batch_size\": 4, \"lm_loss\": $4, \"loss_scale\": $5, \"grad_norm\": $6, $tail_keys, \"skipped\": $7, \"nan\": $8, ${9:-}$timing}"
}
{
  echo '{"iteration": 0, "val_loss": 11.75, "val_ppl": 126753.5}'
  rec 1 64 0.001 11.5 65536 null 1 1
  rec 2 128 0.002 11.25 32768 3.5 0 0 '"layer_grad_norm": [0.5, null, 1e-3], '
  echo '{"iteration": 2, "val_loss": 11.0, "val_ppl": 59874.1}'
  rec 3 192 3e-03 null 32768 2.5e+00 0 1
  rec 4 256 0.003 13.75 32768 40 1 0
  echo '{"iteration": 4, "spike": "skip", "metric": "loss", "value": 13.75, "zscore": 5.2}'
  rec 5 320 0.003 14.5 32768 55.5 0 0
  echo '{"iteration": 5, "spike": "rollback", "metric": "loss", "value": 14.5, "zscore": 8.1, "restored_iteration": 2, "skip": "3-5", "lr_factor": 0.5, "lr_factor_through": 9}'
  echo '{"iteration": 2, "val_loss": 10.875, "val_ppl": 52844.5}'
  rec 3 192 0.0015 10.75 32768 1.25 0 0
  echo '{"iteration": 3, "val_loss": null, "val_ppl": null}'
  rec 4 256 0.0015 10.5 16384 0.75 0 0
  echo '{"iteration": 4, "val_loss": 10.25, "val_ppl": 28282.5}'
  echo '{"iteration": 6, "consumed_samples": 24, "consum{"iteration": 5, "val_loss": 10.0, "val_ppl": 22026.5}'
} >"$S"
bash $PLOT "$S" "$TMP/syn/out" >"$TMP/out" 2>"$TMP/err" && [ ! -s "$TMP/err" ] \
  || fail "plot.sh on the hand-written JSONL: $(cat "$TMP/err")"
is_png "$TMP/syn/out/s.png" && ok "s.png in OUT_DIR is a PNG" || fail "no PNG in OUT_DIR"
T=$TMP/syn/out/s.plot
same_table "hand-written loss" "$T/loss.dat" "1 64 11.5
2 128 11.25
3 192 10.75
4 256 10.5"
same_table "hand-written grad_norm" "$T/grad_norm.dat" "2 128 3.5
3 192 1.25
4 256 0.75"
same_table "hand-written lr" "$T/lr.dat" "1 64 0.001
2 128 0.002
3 192 0.0015
4 256 0.0015"
same_table "hand-written loss_scale" "$T/loss_scale.dat" "1 64 65536
2 128 32768
3 192 32768
4 256 16384"
same_table "hand-written val" "$T/val.dat" "0 0 11.75
2 128 10.875
4 256 10.25"
same_table "hand-written skipped" "$T/skipped.dat" "1 64 11.5"
same_table "hand-written rollback" "$T/rollback.dat" "5 320 2 loss 14.5"
grep -q "^note: 4 records superseded" "$TMP/out" && grep -q "^note: 1 incomplete lines" "$TMP/out" \
  && ok "hand-written: 4 superseded records, 1 torn line reported" || fail "notes: $(grep note "$TMP/out")"

# one training record: every series constant (padded y ranges), no gnuplot warning on stderr
rec 1 64 0.001 11.5 1 2.0 0 0 >"$TMP/syn/one.jsonl"
if bash $PLOT "$TMP/syn/one.jsonl" >/dev/null 2>"$TMP/err" && [ ! -s "$TMP/err" ] && is_png "$TMP/syn/one.png"; then
  ok "a single record plots without warnings"; else fail "single record: $(cat "$TMP/err")"; fi

# --- 4. errors ---------------------------------------------------------------------------------
expect_fail 1 'cannot read' bash $PLOT "$TMP/missing.jsonl"
: >"$TMP/empty.jsonl"
expect_fail 1 'no training iteration records' bash $PLOT "$TMP/empty.jsonl"
grep '"val_loss"' "$M" >"$TMP/valonly.jsonl"
expect_fail 1 'no training iteration records' bash $PLOT "$TMP/valonly.jsonl"
mkdir "$TMP/bin"; ln -s /usr/bin/* "$TMP/bin/" 2>/dev/null; rm -f "$TMP/bin"/gnuplot*
expect_fail 1 'gnuplot not found: run scripts/setup.sh' env PATH="$TMP/bin" bash $PLOT "$M"
expect_fail 1 'usage' bash $PLOT
expect_fail 1 'usage' bash $PLOT "$M" "$TMP/a" extra
bash $PLOT --help | grep -q 'METRICS.jsonl' && ok "--help" || fail "--help"
finish
