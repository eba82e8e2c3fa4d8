#!/usr/bin/env bash
# llm.c model files: --export-llmc then --load-llmc round-trips the weights byte for byte (a run at
# --lr 0 leaves them unchanged), across a different vocabulary padding too; the header holds
# magic 20240326, version 3 and the shape.
source "$(dirname "$0")/lib.sh"
A=(--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 --train-data-path data/brown/brown_train.bin
   --hidden-dropout 0 --attention-dropout 0 --log-interval 1)
$KEEL "${A[@]}" --lr 1e-3 --train-iters 3 --export-llmc "$TMP/a.bin" >"$TMP/1.log" 2>&1 || { fail "export"; cat "$TMP/1.log"; }
hdr=$(od -An -t d4 -N 32 "$TMP/a.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$hdr" = "20240326 3 16 50257 2 2 32 50304" ] && ok "header: $hdr" || fail "header: $hdr"
size=$(stat -c %s "$TMP/a.bin")
params=$(grep -o '([0-9]* with vocabulary padding)' "$TMP/1.log" | grep -o '[0-9]*')
[ "$size" -eq $((1024 + 4 * params)) ] && ok "size = header + 4 x $params" || fail "size $size"
$KEEL "${A[@]}" --lr 0 --weight-decay 0 --train-iters 1 --load-llmc "$TMP/a.bin" --export-llmc "$TMP/b.bin" >"$TMP/2.log" 2>&1 || { fail "reload"; cat "$TMP/2.log"; }
cmp -s "$TMP/a.bin" "$TMP/b.bin" && ok "export -> load -> export is byte-identical" || fail "round trip differs"
# a different padding (multiple of 64 → Vp 50304 is also 64-aligned; use 1 → Vp = V) maps rows
$KEEL "${A[@]}" --lr 0 --weight-decay 0 --train-iters 1 --make-vocab-size-divisible-by 1 --load-llmc "$TMP/a.bin" --export-llmc "$TMP/c.bin" >"$TMP/3.log" 2>&1 || fail "repad"
hdr=$(od -An -t d4 -N 32 "$TMP/c.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$hdr" = "20240326 3 16 50257 2 2 32 50257" ] && ok "repadded header: $hdr" || fail "repadded header: $hdr"
$KEEL "${A[@]}" --lr 0 --weight-decay 0 --train-iters 1 --load-llmc "$TMP/c.bin" --export-llmc "$TMP/d.bin" >"$TMP/4.log" 2>&1 || fail "repad back"
cmp -s "$TMP/a.bin" "$TMP/d.bin" && ok "50304 -> 50257 -> 50304 padding round trip is byte-identical" || fail "repad round trip differs"
# a shape mismatch is refused with the file's shape in the message
expect_fail 2 "is maxT=16 V=50257 L=2 NH=2 C=32" $KEEL "${A[@]}" --lr 0 --train-iters 1 --num-layers 3 --load-llmc "$TMP/a.bin"
# Layout against llm.c's own order, built independently here (not through keel's table): tensor k
# of llm.c's list is filled with (k+1)/64; keel loads it, trains one step at lr 0 and saves; its
# canonical model.bin must hold exactly the llm.c tensors in llm.c's order.
node -e "
const [maxT, V, L, NH, C, Vp] = [16, 50257, 2, 2, 32, 50304];
const sizes = [Vp*C, maxT*C, L*C, L*C, L*3*C*C, L*3*C, L*C*C, L*C, L*C, L*C, L*4*C*C, L*4*C, L*4*C*C, L*C, C, C];
const total = sizes.reduce((a, b) => a + b, 0);
const b = Buffer.alloc(1024 + 4 * total);
[20240326, 3, maxT, V, L, NH, C, Vp].forEach((v, i) => b.writeInt32LE(v, 4 * i));
let off = 1024;
sizes.forEach((n, k) => { for (let i = 0; i < n; i++, off += 4) b.writeFloatLE(k == 0 && i >= V*C ? 0 : (k + 1) / 64, off); });
require('fs').writeFileSync(process.argv[1], b);" "$TMP/llmc_order.bin"
$KEEL "${A[@]}" --lr 0 --weight-decay 0 --train-iters 1 --load-llmc "$TMP/llmc_order.bin" --save "$TMP/ord" >"$TMP/5.log" 2>&1 || { fail "load llm.c-ordered file"; tail -3 "$TMP/5.log"; }
cmp -s <(tail -c +1025 "$TMP/llmc_order.bin") <(tail -c +65 "$TMP/ord/iter_0000001/model.bin") \
  && ok "an independently laid-out llm.c file lands tensor by tensor in keel's canonical buffer" || fail "llm.c layout differs from keel's canonical layout"
finish
