#!/usr/bin/env bash
# Renders a run's --metrics-file JSONL to one PNG, all panels against consumed tokens:
#   loss: training and validation on the same axes (skipped updates marked, spike-autopilot rollbacks as
#         vertical lines)                                                  | grad norm (log y when every value is > 0)
#   learning rate                                                          | loss scale (log2 y), only when it
#                                                                            is not constant 1 (an --fp16 run)
#   skipped updates, running count: only when the run skipped an update or rolled back
# A plain fp32 run gets three panels (loss, grad norm, learning rate), no empty ones.
#
#   bash scripts/plot.sh METRICS.jsonl [OUT_DIR]      OUT_DIR defaults to the JSONL's directory
#
# Writes OUT_DIR/NAME.png (NAME: the JSONL's file name without .jsonl) and, in OUT_DIR/NAME.plot/,
# the tables it plotted and the gnuplot script (to re-render: cd OUT_DIR/NAME.plot && gnuplot plot.gp).
# Tables are whitespace-separated, a `#` header line then one point per line, numbers as the JSONL
# wrote them:
#   loss.dat grad_norm.dat lr.dat loss_scale.dat val.dat   iteration tokens value  (null values left out)
#   skipped.dat   training records with "skipped": 1         iteration tokens lm_loss (lm_loss may be null)
#   rollback.dat  "spike": "rollback" records                iteration tokens restored_iteration metric value
# Repeated iterations: a training record whose iteration is not above the previous one's starts
# over from there; the training and validation records read so far from that iteration on are
# dropped, so later lines win. (keel cuts the file at the checkpoint's iteration when it
# resumes, moving the later records to a side file, so this takes a file joined by hand or one from a run resumed without that.) A validation
# record of an iteration already seen replaces the earlier one (after a spike-autopilot rollback, an
# evaluation can fall in the skipped window and be logged again).
# A validation or rollback record sits at the consumed_tokens of its iteration's training record as
# read so far (for a rollback: the spiking iteration), else of the closest earlier iteration. Every rollback record is kept; its triggering value is
# marked on the loss panel when its metric is "loss". "spike": "skip" records need nothing: their
# iteration's record has "skipped": 1.
# Keys are found by name, so added keys (arrays too) do no harm. A line that is not one complete
# object (a write torn by a crash) is left out and counted.
# Needs awk and gnuplot (scripts/setup.sh installs gnuplot-nox); uses the pngcairo terminal, else png.
set -euo pipefail

USAGE="usage: bash scripts/plot.sh METRICS.jsonl [OUT_DIR]"
die() { echo "error: $*" >&2; exit 1; }

# Reads the JSONL $1, writes the tables into directory $2, prints `key value...` lines on stdout:
# one line per series (see stats; skipped: y from 0, for its running count), then `key N` for
# skipped_with_loss, train (iterations), tokens_min, tokens_max, rollback_loss (rollbacks on the
# loss), dropped (records superseded by later lines), malformed (lines left out).
extract() {
  awk -v dir="$2" '
    # The number or null after "key": in this line; "" when the key is absent or holds something else.
    function num(key,   rest) {
      if (!match($0, "\"" key "\": *")) return ""
      rest = substr($0, RSTART + RLENGTH)
      return match(rest, /^(null|-?[0-9][0-9.eE+-]*)/) ? substr(rest, 1, RLENGTH) : ""
    }
    # The string after "key":, without its quotes ("" when absent).
    function str(key,   s) {
      if (!match($0, "\"" key "\": *\"[^\"]*\"")) return ""
      s = substr($0, RSTART, RLENGTH)
      sub(/^[^:]*: *"/, "", s)
      return substr(s, 1, length(s) - 1)
    }
    # consumed_tokens of iteration it, else of the closest earlier iteration (0 when none).
    function tokens_at(it,   i, best) {
      if (it in tok) return tok[it]
      best = -1
      for (i in tok) if (i + 0 <= it + 0 && i + 0 > best) best = i + 0
      return best < 0 ? 0 : tok[best]
    }
    # Drops the training and validation records from iteration it on ("Repeated iterations" above).
    function rewind(it) {
      while (ntrain && order[ntrain - 1] + 0 >= it + 0) { delete tok[order[--ntrain]]; dropped++ }
      while (nval && vorder[nval - 1] + 0 >= it + 0) { delete vloss[vorder[--nval]]; dropped++ }
    }
    function train(it) {
      if (ntrain && order[ntrain - 1] + 0 >= it + 0) rewind(it)
      order[ntrain++] = it
      tok[it] = num("consumed_tokens"); loss[it] = num("lm_loss"); gn[it] = num("grad_norm")
      lr[it] = num("lr"); ls[it] = num("loss_scale"); skip[it] = num("skipped")
    }
    function val(it) {
      if (it in vloss) dropped++; else vorder[nval++] = it
      vloss[it] = num("val_loss"); vtok[it] = tokens_at(it)
    }
    function rollback(it,   t, metric) {
      t = tokens_at(it); span(t)
      metric = str("metric"); gsub(/[ \t]/, "_", metric); rbloss += metric == "loss"
      row("rollback", it " " t " " num("restored_iteration") " " metric " " num("value"))
    }
    function row(s, line) { print line > (dir "/" s ".dat"); n[s]++ }
    # A point of series s unless v is null or missing; tracks the value and token ranges.
    function point(s, it, t, v) {
      if (v == "" || v == "null") return
      span(t)
      if (!n[s] || v + 0 < lo[s]) lo[s] = v + 0
      if (!n[s] || v + 0 > hi[s]) hi[s] = v + 0
      row(s, it " " t " " v)
    }
    # `s points ylo yhi logy`: logy 1 when a log axis is wanted and every value is > 0; the y range
    # is * * unless every value is the same (gnuplot warns on an empty range), then padded around it.
    function stats(s, want_log,   v, pad, logy) {
      v = lo[s]; pad = (v < 0 ? -v : v) / 10; logy = want_log && n[s] && v > 0
      if (!n[s] || lo[s] != hi[s]) print s, n[s] + 0, "*", "*", logy
      else if (logy) print s, n[s], v / 2, v * 2, logy
      else print s, n[s], v - (pad ? pad : 1), v + (pad ? pad : 1), logy
    }
    # The token range of everything plotted, kept as text (awk would print 2.048e+11).
    function span(t) {
      if (!spanned++ || t + 0 < tmin + 0) tmin = t
      if (spanned == 1 || t + 0 > tmax + 0) tmax = t
    }
    function header(s, cols) { print "# iteration tokens " cols > (dir "/" s ".dat") }
    BEGIN {
      header("loss", "lm_loss"); header("grad_norm", "grad_norm"); header("lr", "lr")
      header("loss_scale", "loss_scale"); header("val", "val_loss"); header("skipped", "lm_loss")
      header("rollback", "restored_iteration metric value")
    }
    !/^[ \t]*\{.*\}[ \t]*$/ || gsub(/\{/, "{") != 1 || num("iteration") !~ /^[0-9]+$/ { if (NF) bad++; next }
    num("val_loss") != ""        { val(num("iteration")); next }
    str("spike") == "rollback"   { rollback(num("iteration")); next }
    num("consumed_tokens") != "" && str("spike") == "" { train(num("iteration")) }
    END {
      for (i = 0; i < ntrain; i++) {
        it = order[i]; t = tok[it]
        point("loss", it, t, loss[it]); point("grad_norm", it, t, gn[it])
        point("lr", it, t, lr[it]); point("loss_scale", it, t, ls[it])
        if (skip[it] + 0 == 1) { row("skipped", it " " t " " loss[it]); nullskip += loss[it] == "null"; span(t) }
      }
      for (i = 0; i < nval; i++) { it = vorder[i]; point("val", it, vtok[it], vloss[it]) }
      stats("loss", 0); stats("val", 0); stats("grad_norm", 1); stats("lr", 0); stats("loss_scale", 1)
      # the loss panel holds both losses: one y range over both series
      lo["losses"] = lo["loss"]; hi["losses"] = hi["loss"]
      if (n["val"] && (!n["loss"] || lo["val"] < lo["losses"])) lo["losses"] = lo["val"]
      if (n["val"] && (!n["loss"] || hi["val"] > hi["losses"])) hi["losses"] = hi["val"]
      n["losses"] = n["loss"] + n["val"]; stats("losses", 0)
      print "scale_moves", n["loss_scale"] && (lo["loss_scale"] != 1 || hi["loss_scale"] != 1)
      print "skipped", n["skipped"] + 0, 0, "*", 0; print "rollback", n["rollback"] + 0, "*", "*", 0
      print "skipped_with_loss", n["skipped"] - nullskip; print "train", ntrain + 0
      print "tokens_min", tmin; print "tokens_max", tmax
      print "rollback_loss", rbloss + 0; print "dropped", dropped + 0; print "malformed", bad + 0
    }' "$1"
}

# A gnuplot single-quoted string (a quote inside is doubled).
gp_quote() { local s=${1//\'/\'\'}; printf "'%s'" "$s"; }

# One panel: `panel SERIES TITLE PLOT_CLAUSES`. Sets SERIES' y range and log axis (from the
# statistics), draws the clauses, or says "no data" over an empty frame when SERIES has no points.
panel() {
  local s=$1 title=$2 clauses=$3
  echo "set title $(gp_quote "$title")"
  if [ "${N[$s]}" -eq 0 ]; then
    echo "set yrange [0:1]; set label 1 'no data' at graph 0.5, 0.5 center; plot NaN notitle; unset label 1"
    return
  fi
  echo "set yrange [${LO[$s]}:${HI[$s]}]"
  if [ "${LOGY[$s]}" -eq 1 ]; then
    [ "$s" = loss_scale ] && echo "set logscale y 2; set format y '2^%L'" || echo "set logscale y 10"
  fi
  echo "plot $clauses"
  echo "unset logscale y; set format y '%g'"
}

# The gnuplot script: $1 terminal, $2 PNG path relative to the table directory, $3 title.
gp_script() {
  local t arrows="" skipped_marks="" rb_marks="" rb_key=""
  while read -r _ t _; do
    arrows+="set arrow from $t, graph 0 to $t, graph 1 nohead dt 2 lc rgb 'red'"$'\n'
  done < <(grep -v '^#' rollback.dat)
  if [ "${N[rollback]}" -gt 0 ]; then
    rb_key=", NaN with lines dt 2 lc rgb 'red' title 'rollback (${N[rollback]})'"
  fi
  if [ "${N[rollback_loss]}" -gt 0 ]; then  # the loss that triggered it, on the loss panel
    rb_marks=", 'rollback.dat' using 2:(strcol(4) eq 'loss' ? \$5 : NaN) with points pt 9 ps 1.5 lc rgb 'red' notitle"
  fi
  local panels=$(( 3 + N[scale_moves] + (N[skipped] > 0 || N[rollback] > 0) ))
  if [ "${N[skipped_with_loss]}" -gt 0 ]; then
    skipped_marks=", 'skipped.dat' using 2:3 with points pt 2 lc rgb 'black' title 'skipped update'"
  fi
  cat <<GP
# Written by scripts/plot.sh; run from this directory: gnuplot plot.gp
set terminal $1 size 1400,$(( (panels + 1) / 2 * 400 )) noenhanced
set output $(gp_quote "$2")
set datafile missing 'null'
set multiplot layout $(( (panels + 1) / 2 )),2 title $(gp_quote "$3")
set xlabel 'consumed tokens'
set xrange [${TOK_MIN}:${TOK_MAX}]
set format x '$(tokens_format)'
set offsets 0, 0, graph 0.05, graph 0.05
set grid
set key bottom left
GP
  printf '%s' "$arrows"
  local val_line=""
  [ "${N[val]}" -gt 0 ] && val_line=", 'val.dat' using 2:3 with linespoints pt 7 ps 0.8 lw 2 lc rgb 'dark-green' title 'validation loss'"
  panel losses "loss" "'loss.dat' using 2:3 with lines lc rgb 'blue' title 'training loss'$val_line$skipped_marks$rb_marks$rb_key"
  echo "unset arrow"
  panel grad_norm "grad norm" "'grad_norm.dat' using 2:3 with lines lc rgb 'purple' notitle"
  panel lr "learning rate" "'lr.dat' using 2:3 with lines lc rgb 'orange' notitle"
  if [ "${N[scale_moves]}" -eq 1 ]; then
    panel loss_scale "loss scale" "'loss_scale.dat' using 2:3 with steps lc rgb 'brown' notitle"
  fi
  if [ "${N[skipped]}" -gt 0 ] || [ "${N[rollback]}" -gt 0 ]; then
    printf '%s' "$arrows"
    local count="'skipped.dat' using 2:(\$0 + 1)"  # the running count: line number + 1
    echo "set key top left"
    panel skipped "skipped updates: ${N[skipped]}, rollbacks: ${N[rollback]}" \
      "$count with steps lc rgb 'black' notitle, $count with points pt 7 ps 0.6 lc rgb 'black' title 'skipped updates'$rb_key"
  fi
  echo "unset multiplot"
}

# The x tick format: plain numbers in a short run, else mantissa and SI prefix (2.5k, 1.2G).
tokens_format() { [ "$TOK_MAX" -lt 10000 ] && echo '%g' || echo '%.1s%c'; }

# pngcairo when this gnuplot has it, else the libgd png terminal.
png_terminal() {
  local t
  for t in pngcairo png; do
    gnuplot -e "set terminal $t" >/dev/null 2>&1 && { echo "$t"; return; }
  done
  die "gnuplot has no png terminal (install gnuplot-nox)"
}

main() {
  case "${1:-}" in -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0;; esac
  [ $# -ge 1 ] && [ $# -le 2 ] || die "$USAGE"
  local jsonl=$1 out_dir=${2:-$(dirname "$1")}
  [ -f "$jsonl" ] && [ -r "$jsonl" ] || die "cannot read $jsonl"
  command -v gnuplot >/dev/null 2>&1 || die "gnuplot not found: run scripts/setup.sh (or apt-get install gnuplot-nox)"
  local term name tables png
  term=$(png_terminal)
  WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
  local k a b c d
  while read -r k a b c d; do N[$k]=$a; LO[$k]=$b; HI[$k]=$c; LOGY[$k]=$d; done < <(extract "$jsonl" "$WORK")
  [ "${N[train]:-0}" -gt 0 ] || die "$jsonl has no training iteration records"
  local pad=$(( (N[tokens_max] - N[tokens_min]) / 50 ))  # 2% each side: nothing hides in the frame
  [ "$pad" -gt 0 ] || pad=1
  TOK_MIN=$(( N[tokens_min] - pad )) TOK_MAX=$(( N[tokens_max] + pad ))
  name=$(basename "$jsonl"); name=${name%.jsonl}
  tables=$out_dir/$name.plot; png=$out_dir/$name.png
  mkdir -p "$tables" 2>/dev/null || die "cannot create $tables"
  mv "$WORK"/*.dat "$tables"/
  (cd "$tables" && gp_script "$term" "../$name.png" "$(basename "$jsonl"): ${N[train]} iterations" >plot.gp)
  local err
  err=$(cd "$tables" && gnuplot plot.gp 2>&1) || die "gnuplot failed: $(tail -n 1 <<<"$err")"
  [ -z "$err" ] || echo "$err" >&2
  report "$png" "$tables"
}

# What was written, with the points per table.
report() {
  local s
  echo "$1 ($(( $(stat -c %s "$1") / 1024 )) KiB)"
  for s in loss val grad_norm lr loss_scale skipped rollback; do
    printf '%-40s %s: %d\n' "$2/$s.dat" "$([ "$s" = rollback ] && echo records || echo points)" "${N[$s]}"
  done
  echo "$2/plot.gp"
  [ "${N[dropped]}" -eq 0 ] || echo "note: ${N[dropped]} records superseded by later lines (repeated iterations)"
  [ "${N[malformed]}" -eq 0 ] || echo "note: ${N[malformed]} incomplete lines left out"
}

declare -A N LO HI LOGY
main "$@"
