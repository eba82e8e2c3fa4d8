#!/usr/bin/env bash
# Which tensors weight decay touches, read from the checkpoints alone. A run trains 2 iterations and
# saves (every tensor moved off its initial value, biases and LayerNorms included); resumed with a
# fresh optimizer (--no-load-optim: m = v = 0), its next update has every gradient zeroed (test hook
# KEEL_TEST_ZERO_GRADS), so Adam's step is 0 and the update is weight decay alone:
# p ← p − lr·wd·p (AdamW; 8-bit Adam: p·(1 − lr·wd)). The test's own list of Megatron-DeepSpeed's
# groups is checked tensor by tensor: the weights of linear layers and the embeddings shrink by
# exactly lr·wd (to 1 ulp); biases, LayerNorm weights and biases and NormFormer's gains stay byte
# for byte. The layout comes from model.bin's header and state.txt's model.* keys, not keel's table.
source "$(dirname "$0")/lib.sh"
LR=0.01 WD=0.1
export TMP
ARGS=("${TINY[@]}" --lr $LR --weight-decay $WD --lr-decay-style constant --lr-warmup-iters 0 --train-iters 3)
check() {  # check NAME DIR_BEFORE DIR_AFTER
  python3 - "$2/iter_0000002" "$3/iter_0000003" $LR $WD <<'PY' && ok "$1: $(tail -1 "$TMP/check.out")" || fail "$1: $(cat "$TMP/check.out")"
import array, math, os, struct, sys
before_dir, after_dir, lr, wd = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
out = open(os.environ["TMP"] + "/check.out", "w")
def state(d):
    kv = {}
    for line in open(d + "/state.txt"):
        k, _, v = line.rstrip("\n").partition(" = ")
        kv[k] = v
    return kv
def model(d):
    raw = open(d + "/model.bin", "rb").read()
    assert raw[:8] == b"KEELCKPT", "not a keel checkpoint"
    nbytes, count = struct.unpack("<QQ", raw[16:32])
    assert nbytes == 4 * count == len(raw) - 64, "payload size"
    return raw[64:]
s0, s1 = state(before_dir), state(after_dir)
assert s0["optimizer_step"] == "2" and s1["optimizer_step"] == "1", ("optimizer steps", s0["optimizer_step"], s1["optimizer_step"])
L, C, H = (int(s1["model." + k]) for k in ("num_layers", "channels", "ffn_hidden_size"))
Vp, T, NH = (int(s1["model." + k]) for k in ("padded_vocab_size", "max_seq_len", "num_heads"))
eln, nf = int(s1["model.embed_layernorm"]), int(s1["model.normformer"])
# the canonical order: llm.c's GPT-2 tensors, then the knobs' (empty when off); decay per Megatron-DeepSpeed
tensors = [("wte", Vp * C, True), ("wpe", T * C, True),
           ("ln1w", L * C, False), ("ln1b", L * C, False), ("qkvw", L * 3 * C * C, True), ("qkvb", L * 3 * C, False),
           ("attprojw", L * C * C, True), ("attprojb", L * C, False), ("ln2w", L * C, False), ("ln2b", L * C, False),
           ("fcw", L * H * C, True), ("fcb", L * H, False), ("fcprojw", L * C * H, True), ("fcprojb", L * C, False),
           ("lnfw", C, False), ("lnfb", C, False), ("lnew", eln * C, False), ("lneb", eln * C, False),
           ("headscale", nf * L * NH, False), ("lnaw", nf * L * C, False), ("lnab", nf * L * C, False),
           ("lnfcw", nf * L * H, False), ("lnfcb", nf * L * H, False)]
p0, p1 = model(before_dir), model(after_dir)
assert len(p0) == len(p1) == 4 * sum(n for _, n, _ in tensors), ("parameter bytes", len(p0), 4 * sum(n for _, n, _ in tensors))
def ulp32(x):  # the spacing of float32 at x (subnormals: 2^-149)
    return 2.0 ** max(math.frexp(x)[1] - 24, -149) if x else 2.0 ** -149
bad, decayed, kept, at = [], [], [], 0
for name, n, decay in tensors:
    ra, rb = p0[4 * at:4 * (at + n)], p1[4 * at:4 * (at + n)]
    at += n
    if n == 0:
        continue
    a, b = array.array("f", ra), array.array("f", rb)
    if decay:
        f = 1.0 - lr * wd
        miss = next((i for i in range(n) if abs(b[i] - a[i] * f) > ulp32(a[i])), None)
        if miss is not None:
            bad.append(f"{name}: element {miss} is {b[miss]!r}, want {a[miss]!r}·(1 − lr·wd) = {a[miss] * f!r} (a decayed tensor)")
        if ra == rb:
            bad.append(f"{name}: unchanged (should decay)")
        decayed.append(name)
    else:
        if all(x == 0 for x in a):
            bad.append(f"{name}: all zero before the step (a decay of it would not show)")
        if ra != rb:
            i = next(i for i in range(n) if ra[4 * i:4 * i + 4] != rb[4 * i:4 * i + 4])
            bad.append(f"{name}: element {i} changed {a[i]!r} → {b[i]!r} (should not decay)")
        kept.append(name)
for m in bad:
    print(m, file=out)
print(f"decayed by lr·wd = {lr * wd:g}: {' '.join(decayed)} | byte-identical: {' '.join(kept)}", file=out)
sys.exit(1 if bad else 0)
PY
}
for opt in adam adam8bit; do
  extra=(--optimizer $opt)
  [ $opt = adam8bit ] && extra+=(--adam8bit-min-size 64 --adam8bit-block-size 256)
  for knobs in "" "--embed-layernorm --normformer"; do
    what="$opt${knobs:+ $knobs}"
    d0="$TMP/before" d1="$TMP/after"
    rm -rf "$d0" "$d1"
    $KEEL "${ARGS[@]}" "${extra[@]}" $knobs --exit-interval 2 --save "$d0" >"$TMP/before.log" 2>&1 || { fail "$what: first 2 iterations"; continue; }
    KEEL_TEST_ZERO_GRADS=3 $KEEL "${ARGS[@]}" "${extra[@]}" $knobs --load "$d0" --no-load-optim --save "$d1" >"$TMP/after.log" 2>&1 \
      || { fail "$what: zero-gradient run"; continue; }
    check "$what" "$d0" "$d1"
  done
done
finish
