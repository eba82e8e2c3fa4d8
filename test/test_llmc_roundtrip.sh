#!/usr/bin/env bash
# llm.c model files: --export-llmc then --load-llmc round-trips the weights byte for byte (a run at
# --lr 0 leaves them unchanged), across a different vocabulary padding too; the header holds
# magic 20240326, version 3 and the shape.
source "$(dirname "$0")/lib.sh"
A=(--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 --train-data-path data/brown/brown_train.bin)
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
finish
