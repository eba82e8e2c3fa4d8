# test/lib.sh — shared helpers for the scripted tests (sourced, not run).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KEEL=./train_gpt_cpu
TMP=$(mktemp -d /tmp/keel_test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
# A tiny GPT-2 (GPT-2 vocabulary) with gradient accumulation 2, on the Brown shards.
TINY=(--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16
      --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 2
      --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --seed 7 --log-interval 1
      --train-data-path data/brown/brown_train.bin --valid-data-path data/brown/brown_val.bin
      --eval-interval 3 --eval-iters 2)
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
