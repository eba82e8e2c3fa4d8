#!/usr/bin/env bash
# A newcomer's first hour: what `make` and the trainer say before any real run.
#   1. `make help` lists every target of the Makefile's header, one line each.
#   2. `make run` builds only what it runs (the CPU trainer and the tokenizer, not the CUDA trainer,
#      even where nvcc is found: a stand-in nvcc here), and prints the ✓/✗ lines once, after set-up.
#   2b. scripts/setup.sh hands apt-get a bounded wait for the dpkg lock (stub apt-get, nothing installed).
#   3. `./train_gpt_cpu` with no arguments: a short usage on stderr, naming -h, exit 2.
#   4. `-h` lists every flag exactly once (the start-up printout's list is the reference), under
#      topic headings.
#   5. The start-up printout shows no `nan` (unset values say so), no `fp32 ... false` on an fp32 run,
#      and a derived size (ffn-hidden-size 0) with the value it derives to.
#   6. A finished run started again says "nothing to train" and the command that trains further;
#      that command works.
source "$(dirname "$0")/lib.sh"
K=$KEEL

# Each make below runs as a user's would, at the top level: under `make test` the environment says
# it is nested (MAKELEVEL, MAKEFLAGS), and a nested make prints no ✓/✗ lines.
make() { env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS -u KEEL_BANNER make "$@"; }

# ---- 1. make help
help=$(make --no-print-directory help 2>&1)
for t in run test data clean bench fuzz test-cuda test-gpu test-sanitize test-crash help; do
  grep -qE "^  make $t( |$)" <<<"$help" || fail "make help lacks 'make $t': $help"
done
[ "$(grep -c '^  make' <<<"$help")" -eq "$(grep -c '^#   make' Makefile)" ] && ok "make help: every target of the header, one line each" \
  || fail "make help: $(grep -c '^  make' <<<"$help") lines vs $(grep -c '^#   make' Makefile) in the header"
grep -q '✓\|✗' <<<"$help" && fail "make help prints the detection lines" || ok "make help: no detection lines"

# ---- 2. make run: what it builds, the ✓/✗ lines once and after set-up (make -n: nothing is run)
mkdir -p "$TMP/bin"
printf '#!/bin/sh\n[ "$1" = --list-gpu-code ] && echo sm_80 sm_90\nexit 0\n' >"$TMP/bin/nvcc"
chmod +x "$TMP/bin/nvcc"
run_n=$(make --no-print-directory -n -B run NVCC="$TMP/bin/nvcc" 2>&1)
all_n=$(make --no-print-directory -n -B all NVCC="$TMP/bin/nvcc" 2>&1)
grep -q -- "-DKEEL_CUDA .*train_gpt.cu -o train_gpt " <<<"$all_n" && ok "control: make all builds train_gpt where nvcc is found" \
  || fail "control: make all with the stand-in nvcc does not build train_gpt"
grep -q -- "train_gpt.cu -o train_gpt " <<<"$run_n" && fail "make run builds the CUDA trainer" || ok "make run: no CUDA trainer"
grep -q -- "-o train_gpt_cpu " <<<"$run_n" && ok "make run builds train_gpt_cpu" || fail "make run does not build train_gpt_cpu"
grep -q -- "-o batch_lookup\|-o layer_norms\|-o megatron_data\|-o preprocess_data" <<<"$run_n" && fail "make run builds the dev tools" || ok "make run: no dev tools"
[ "$(grep -c '^✓ OpenMP\|^✗ OpenMP' <<<"$run_n")" -eq 1 ] && ok "make run: the ✓/✗ lines once" \
  || fail "make run: OpenMP line $(grep -c 'OpenMP' <<<"$run_n") times"
setup_at=$(grep -n 'scripts/setup.sh' <<<"$run_n" | head -1 | cut -d: -f1)
banner_at=$(grep -n 'OpenMP' <<<"$run_n" | head -1 | cut -d: -f1)
[ -n "$setup_at" ] && [ -n "$banner_at" ] && [ "$banner_at" -gt "$setup_at" ] && ok "make run: the ✓/✗ lines after set-up" \
  || fail "make run: set-up at line $setup_at, detection at $banner_at"
[ "$(make --no-print-directory -n train_gpt_cpu NO_CUDA=1 2>&1 | grep -c 'OpenMP')" -eq 1 ] && ok "make TARGET: the ✓/✗ lines once" \
  || fail "make TARGET: not one OpenMP line"

# ---- 2b. scripts/setup.sh waits for another apt process's dpkg lock (bounded) instead of failing at
# once: run where nothing is installed (PATH holds only stubs), apt-get recording its arguments
mkdir -p "$TMP/sbin"
printf '#!/bin/sh\necho 0\n' >"$TMP/sbin/id"
printf '#!/bin/sh\necho "$@" >>"%s/apt.args"\n' "$TMP" >"$TMP/sbin/apt-get"
chmod +x "$TMP/sbin/id" "$TMP/sbin/apt-get"
PATH="$TMP/sbin" /bin/bash scripts/setup.sh >"$TMP/setup.out" 2>&1 || fail "setup.sh with stubs: $(cat "$TMP/setup.out")"
[ "$(grep -c -- '-o DPkg::Lock::Timeout=600 ' "$TMP/apt.args")" -eq 2 ] && grep -q "install -y" "$TMP/apt.args" \
  && ok "setup.sh: apt-get update and install wait up to 600 s for the dpkg lock" || fail "setup.sh apt-get arguments: $(cat "$TMP/apt.args")"
rm -f "$TMP/apt.args"
KEEL_APT_LOCK_TIMEOUT=30 PATH="$TMP/sbin" /bin/bash scripts/setup.sh >/dev/null 2>&1
grep -q -- '-o DPkg::Lock::Timeout=30 ' "$TMP/apt.args" && ok "setup.sh: KEEL_APT_LOCK_TIMEOUT sets the wait" || fail "KEEL_APT_LOCK_TIMEOUT: $(cat "$TMP/apt.args")"

# ---- 3. no arguments
out=$($K 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && grep -q "^usage:" <<<"$out" && grep -q -- "-h" <<<"$out" && grep -q "@scripts/brown_cpu.args" <<<"$out" \
  && [ "$(wc -l <<<"$out")" -le 8 ] && ok "no arguments: a short usage naming -h, exit 2" || fail "no arguments: exit $rc :: $out"

# ---- 4. -h: every flag once, grouped
$K "${TINY[@]}" --train-iters 3 --eval-interval 0 >"$TMP/one.log" 2>&1 || fail "three-iteration run: $(grep -m1 error "$TMP/one.log")"
sed -n '/^-* arguments -*$/,/^-* end of arguments/p' "$TMP/one.log" | sed -nE 's/^  ([A-Za-z0-9_-]+) \.+ .*$/\1/p' | sort >"$TMP/flags"
$K -h >"$TMP/help" 2>&1 || fail "-h exited non-zero"
grep -oE '^  --[A-Za-z0-9_-]+' "$TMP/help" | sed 's/^  --//' | sort >"$TMP/hflags"
n=$(wc -l <"$TMP/flags")
[ "$n" -gt 100 ] || fail "only $n flags in the start-up printout"
if cmp -s "$TMP/flags" "$TMP/hflags"; then ok "-h lists each of the $n flags exactly once"
else fail "-h vs the flags: $(diff "$TMP/flags" "$TMP/hflags" | grep '^[<>]' | head -5 | tr '\n' ' ')"; fi
groups=$(grep -cE '^[a-zA-Z].*:$' "$TMP/help")
[ "$groups" -ge 10 ] && grep -q '^model:$' "$TMP/help" && grep -q '^data:$' "$TMP/help" && grep -q '^precision and loss scaling:$' "$TMP/help" \
  && ok "-h: $groups topic headings" || fail "-h: $groups headings"
# every heading has flags under it (no empty topic)
awk '/^[a-zA-Z].*:$/ { if (h && !n) bad = bad h " "; h = $0; n = 0; next } /^  --/ { n++ } END { if (h && !n) bad = bad h; print bad }' "$TMP/help" >"$TMP/empty"
[ ! -s "$TMP/empty" ] || [ -z "$(tr -d ' \n' <"$TMP/empty")" ] && ok "-h: no empty topic" || fail "-h: empty topics: $(cat "$TMP/empty")"

# ---- 5. the start-up printout
args=$(sed -n '/^-* arguments -*$/,/^-* end of arguments/p' "$TMP/one.log")
grep -qE ' \.+ nan$' <<<"$args" && fail "start-up printout shows nan: $(grep -E ' \.+ nan$' <<<"$args" | head -3)" || ok "start-up printout: no nan"
grep -qE '^  embed-dropout \.+ unset \(= --hidden-dropout: 0\)$' <<<"$args" && ok "embed-dropout: unset, = --hidden-dropout" \
  || fail "embed-dropout: $(grep embed-dropout <<<"$args")"
grep -qE '^  fp32 \.+ true' <<<"$args" && ok "an fp32 run: fp32 true" || fail "fp32 line: $(grep -E '^  fp32 ' <<<"$args")"
# sizes whose 0 means "derived" say what they derive to (a bare 0 reads as a zero-wide MLP)
grep -qE '^  ffn-hidden-size \.+ 0 \(= 4 x --hidden-size: 128\)$' <<<"$args" \
  && ok "ffn-hidden-size: 0 with the width it derives to" || fail "derived size: $(grep -E '^  ffn-hidden-size ' <<<"$args")"
$K "${TINY[@]}" --train-iters 3 --eval-interval 0 --fp16 >"$TMP/fp16.log" 2>&1 || fail "fp16 run"
grep -qE '^  fp32 \.+ false$' "$TMP/fp16.log" && grep -qE '^  fp16 \.+ true$' "$TMP/fp16.log" && ok "an --fp16 run: fp32 false" \
  || fail "fp16 run: $(grep -E '^  fp(16|32) ' "$TMP/fp16.log")"

# ---- 6. nothing to train, and the way on
$K "${TINY[@]}" --train-iters 3 --eval-interval 0 --save "$TMP/ck" >"$TMP/a.log" 2>&1 || fail "first run"
$K "${TINY[@]}" --train-iters 3 --eval-interval 0 --save "$TMP/ck" --load "$TMP/ck" >"$TMP/b.log" 2>&1 || fail "second run"
hint=$(grep '^to train further' "$TMP/b.log")
grep -q "^nothing to train: iteration 3 of 3" "$TMP/b.log" && grep -q -- "--train-iters 6 .*--override-lr-scheduler.*--load $TMP/ck" <<<"$hint" \
  && ok "nothing to train: $hint" || fail "no hint after nothing to train: $(grep -A1 nothing "$TMP/b.log")"
$K "${TINY[@]}" --train-iters 6 --override-lr-scheduler --eval-interval 0 --save "$TMP/ck" --load "$TMP/ck" --metrics-file "$TMP/c.jsonl" >"$TMP/c.log" 2>&1 \
  && [ "$(grep -c '"iteration"' "$TMP/c.jsonl")" -eq 3 ] && ok "the hint's command trains iterations 4-6" || fail "the hint's command: $(grep -m1 error "$TMP/c.log")"
TS=("${TINY[@]/--lr-warmup-iters/--lr-warmup-samples}")  # a sample-based run takes the -samples forms
$K "${TS[@]}" --train-samples 8 --eval-interval 0 --save "$TMP/cs" >"$TMP/s1.log" 2>&1 || fail "sample-based run: $(grep -m1 error "$TMP/s1.log")"
$K "${TS[@]}" --train-samples 8 --eval-interval 0 --save "$TMP/cs" --load "$TMP/cs" >"$TMP/s2.log" 2>&1
grep -q -- "^to train further: rerun with --train-samples 16 " "$TMP/s2.log" && ok "sample-based: the hint names --train-samples" \
  || fail "sample-based hint: $(grep 'to train further' "$TMP/s2.log")"
finish
