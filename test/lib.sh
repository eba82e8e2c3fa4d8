# test/lib.sh — shared helpers for the scripted tests (sourced, not run).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KEEL=${KEEL:-./train_gpt_cpu}  # make test-sanitize re-runs tests against build/asan/train_gpt_cpu
TMP=$(mktemp -d /tmp/keel_test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
# A tiny GPT-2 (GPT-2 vocabulary) with gradient accumulation 2, on the Brown shards.
TINY=(--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16
      --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 2
      --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --seed 7 --log-interval 1
      --train-data-path data/brown/brown_train.bin --valid-data-path data/brown/brown_val.bin
      --eval-interval 3 --eval-iters 2 --hidden-dropout 0 --attention-dropout 0)
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
ok() { echo "ok: $*"; }
# JSONL without the wall-clock fields, the only values that legitimately differ between runs.
strip_timing() { sed -E 's/, "elapsed_ms": [^,}]*, "samples_per_second": [^,}]*, "tflops": [^,}]*//' "$1"; }
# Runs a command that must fail with exit code $1 and print text matching $2 (grep -E) on stderr.
expect_fail() {
  local code=$1 pattern=$2; shift 2
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" -ne "$code" ]; then fail "exit $rc (want $code): $* :: $out"; return; fi
  if ! grep -qE -- "$pattern" <<<"$out"; then fail "message '$out' lacks /$pattern/: $*"; return; fi
  [ "$(grep -c '^error:' <<<"$out")" -eq 1 ] || { fail "not one error line: $out"; return; }
  ok "rejected ($rc): $(grep '^error:' <<<"$out")"
}
finish() { [ "$fails" -eq 0 ] && { echo PASS; exit 0; } || { echo "FAIL ($fails)"; exit 1; }; }

# compare_jsonl A B TOL: the loss, grad norm, validation loss and loss scale of every record of
# JSONL file A within TOL relative of B's; prints the worst difference, exits non-zero on the first
# miss (or a record count that differs).
compare_jsonl() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[3])
if len(a) != len(b) or not a:
    sys.exit(f"{len(a)} vs {len(b)} records")
worst = 0.0
for x, y in zip(a, b):
    for k in ("lm_loss", "grad_norm", "valid_loss", "loss_scale"):
        if k in x or k in y:
            if k not in x or k not in y: sys.exit(f"record {x.get('iteration')}: {k} missing on one side")
            d = abs(x[k] - y[k]) / max(abs(y[k]), 1e-30)
            worst = max(worst, d)
            if d > tol: sys.exit(f"iteration {x.get('iteration')}: {k} {x[k]} vs {y[k]} (relative {d:.3g} > {tol})")
print(f"worst relative difference {worst:.3g}")
PY
}

# ---- multi-rank runs (mpirun --oversubscribe; the callers export OMPI_ALLOW_RUN_AS_ROOT...) --------

# mpi_start_failed < OUTPUT: mpirun's own start-up failed before any rank ran ("orte_session_dir
# failed" and the like, seen under load on 2 cores) and keel printed no error: not keel's failure, so
# the caller starts that run again from nothing.
mpi_start_failed() { local out; out=$(cat); grep -qE "orte_[a-z_]+ failed|ORTE_ERROR" <<<"$out" && ! grep -q "^error:" <<<"$out"; }

# mpi_refused NP PATTERN ARGS...: $KEEL on NP ranks must fail, every rank's error line matching
# PATTERN, before any iteration ran. (A flag error is printed by rank 0 only; other errors by every rank
# that meets them, so expect_fail's one-error-line rule is not asked for here.)
mpi_refused() {
  local np=$1 pattern=$2; shift 2
  local out rc
  out=$(timeout -k 10 60 mpirun --oversubscribe -np "$np" $KEEL "$@" 2>&1); rc=$?
  [ $rc -ne 0 ] && grep -qE -- "error: .*$pattern" <<<"$out" && ! grep -q "iteration *1/" <<<"$out" \
    && ok "refused: $(grep -m1 '^error:' <<<"$out")" || fail "not refused ($rc) /$pattern/: $(grep -m1 error <<<"$out")"
}

# same_checkpoint WHAT DIR_A DIR_B ITERATION: model.bin, optimizer.bin and state.txt byte-identical.
same_checkpoint() {
  local f bad=0
  for f in model.bin optimizer.bin state.txt; do
    cmp -s "$2/iter_000000$4/$f" "$3/iter_000000$4/$f" || { fail "$1: $f differs"; bad=1; }
  done
  [ $bad -eq 0 ] && ok "$1: model.bin, optimizer.bin and state.txt identical"
}

# text_samples LOG: the --sample-interval blocks of a training log.
text_samples() { sed -n '/^---------------- sample at/,/^-----------------------------------------------------------*$/p' "$1"; }

# compare_layer_stats A B TOL RECORDS: the per-layer statistics (--log-layer-norms-interval) of
# JSONL file A within TOL relative of B's, both holding RECORDS such records.
compare_layer_stats() {
  python3 - "$@" <<'EOF'
import json, sys
a, b = ([json.loads(l) for l in open(f) if "layer_grad_norm" in l] for f in sys.argv[1:3])
tol, n = float(sys.argv[3]), int(sys.argv[4])
assert len(a) == len(b) == n, (len(a), len(b))
keys = [k for k in b[0] if k.startswith(("layer_", "embedding_", "final_norm_"))]
assert len(keys) >= 8, keys
for x, y in zip(a, b):
    for k in keys:
        xs, ys = (v if isinstance(v, list) else [v] for v in (x[k], y[k]))
        assert len(xs) == len(ys), (k, xs, ys)
        for u, v in zip(xs, ys):
            assert v > 0 and abs(u - v) <= tol * v, (x["iteration"], k, u, v)
EOF
}
