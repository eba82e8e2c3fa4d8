#!/usr/bin/env bash
# Tensor parallelism (--tensor-model-parallel-size, docs/internals.md#parallelism) under `mpirun --oversubscribe`:
#   1. the gradient under TP=2 (test/tp_gradcheck.cpp, fp64): finite differences for every tensor,
#      equality with the TP=1 gradient, replicated gradients identical on both ranks;
#   2. TP=2 vs one process: the initial weights byte-identical (model.bin after iteration 1, whose
#      learning rate is 0: the weights are the initialization); every loss, grad norm and validation
#      loss within 1e-5 over 6 iterations with dropout on (not bits: a split matmul adds its K terms in
#      two halves, and the vocabulary's Σ exp in two parts); the text samples identical and the
#      per-layer norms within 1e-5;
#   3. replicated-tensor integrity: a drift planted on rank 1's ln2w of layer 1 (test hook
#      KEEL_TEST_PERTURB_REPLICATED) stops the run at that iteration, naming ln2w, layer 1 and the
#      ranks; --sync-tp-duplicated-parameters repairs it (the run finishes under the same check); the
#      sync is harmless without drift (records identical to a run without it: avg(x, x) = x at TP=2);
#   4. full 3D: TP=2 x PP=2 x DP=2 with ZeRO-1 (8 processes) vs one process within 1e-5; bit-exact
#      resume; its checkpoint re-saved by one process (TP=1 PP=1 DP=1) and at TP=2 PP=1 is
#      byte-identical (model.bin, optimizer.bin, state.txt): the merge is free;
#   5. the emulated CUDA trainer at TP=2 (NCCL all-reduce of device buffers) = the CPU trainer at TP=2
#      (fp32, 2e-5), and in bf16 = one CPU process within 5e-3 (the bf16 tolerance of test_cuda_trainer);
#   6. bad shapes refused: heads or --pad-vocab-size-to not divisible by T, NormFormer (8-bit Adam at
#      TP > 1: test_tp_adam8bit).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
command -v mpirun >/dev/null && command -v mpicxx >/dev/null || { fail "mpirun/mpicxx not found (scripts/setup.sh installs OpenMPI)"; finish; }
MPI=(mpirun --oversubscribe -np)
run() {  # name np binary args...
  local name=$1 np=$2 bin=$3; shift 3
  timeout -k 10 300 "${MPI[@]}" "$np" $bin "$@" --metrics-file "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1 \
    || { fail "$name: run failed"; tail -8 "$TMP/$name.log"; }
}
compare() { compare_jsonl "$TMP/$1.jsonl" "$TMP/$2.jsonl" "$3"; }

# 1. gradient check under TP=2 (built here with MPI, as test_comm_groups does)
SRC=test/tp_gradcheck.cpp
if [ ! -x build/tp_gradcheck ] || [ -n "$(find "$SRC" llmc -newer build/tp_gradcheck -print -quit)" ]; then
  read -ra MPI_C <<<"$(mpicxx --showme:compile)"; read -ra MPI_L <<<"$(mpicxx --showme:link)"
  mkdir -p build
  g++ -O2 -std=c++17 -Wall -Wextra -Wno-unused-parameter -ffp-contract=off -fopenmp -I. -DKEEL_MPI "${MPI_C[@]}" "$SRC" \
    -o build/tp_gradcheck "${MPI_L[@]}" -lm >"$TMP/build.log" 2>&1 || { fail "building tp_gradcheck"; tail -20 "$TMP/build.log"; }
fi
if out=$(timeout -k 10 300 "${MPI[@]}" 2 build/tp_gradcheck 2>&1); then
  ok "TP=2 gradient check: $(grep -c '^ok' <<<"$out") checks ($(grep -m1 'gradient = TP=1' <<<"$out"))"
else
  fail "TP=2 gradient check"; grep -v '^ok' <<<"$out" | head -20
fi

# 2. TP=2 vs one process
ARGS=("${TINY[@]}" --train-iters 6 --hidden-dropout 0.1 --attention-dropout 0.1 --eval-interval 3 --eval-iters 1
      --log-layer-norms-interval 3 --sample-interval 3 --sample-length 12)
run one 1 $KEEL "${ARGS[@]}" --save "$TMP/one" --save-interval 1
run tp2 2 $KEEL "${ARGS[@]}" --tensor-model-parallel-size 2 --save "$TMP/tp2" --save-interval 1
cmp -s "$TMP/one/iter_0000001/model.bin" "$TMP/tp2/iter_0000001/model.bin" \
  && ok "TP=2 initializes exactly like TP=1 (model.bin after the learning-rate-0 iteration identical)" || fail "TP=2 initial weights differ"
r=$(compare tp2 one 1e-5 2>&1) && ok "TP=2 = one process within 1e-5, dropout on ($r)" || fail "TP=2: $r"
grep -q "tensor parallel: 2 ranks; rank 0 holds heads 0-0" "$TMP/tp2.log" && ok "TP=2: the start-up line names rank 0's slice" \
  || fail "TP=2: no tensor-parallel line"
[ "$(text_samples "$TMP/one.log" | grep -c 'sample at')" -eq 2 ] && cmp -s <(text_samples "$TMP/one.log") <(text_samples "$TMP/tp2.log") \
  && ok "--sample-interval at TP=2 (each rank's vocabulary columns of the row gathered): the same samples as one process" \
  || fail "TP=2 samples differ: $(text_samples "$TMP/tp2.log" | head -3)"
compare_layer_stats "$TMP/tp2.jsonl" "$TMP/one.jsonl" 1e-5 2 \
  && ok "--log-layer-norms-interval at TP=2 = one process within 1e-5 (split tensors summed, replicated counted once)" || fail "TP=2 layer statistics"

# 3. replicated-tensor drift: caught, repaired, and the repair is harmless without drift
CHK=("${TINY[@]}" --train-iters 6 --tensor-model-parallel-size 2 --check-replicated-params-interval 1)
out=$(KEEL_TEST_PERTURB_REPLICATED=ln2w:1:3 timeout -k 10 120 "${MPI[@]}" 2 -x KEEL_TEST_PERTURB_REPLICATED $KEEL "${CHK[@]}" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "iteration 3: replicated tensor ln2w of layer 1 differs between tensor-parallel ranks 0 and 1 (world ranks 0 and 1)" <<<"$out" \
  && ! grep -q "iteration        3/" <<<"$out" \
  && ok "planted drift caught before iteration 3 trains: $(grep -m1 '^error' <<<"$out")" || fail "drift not caught ($rc): $(grep -m1 error <<<"$out")"
# every 2nd iteration: the drift of iteration 3 is found at 4, after one update spread it (all named)
out=$(KEEL_TEST_PERTURB_REPLICATED=ln2w:1:3 timeout -k 10 120 "${MPI[@]}" 2 -x KEEL_TEST_PERTURB_REPLICATED $KEEL "${CHK[@]}" \
      --check-replicated-params-interval 2 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "iteration        3/" <<<"$out" && grep -qE "error: iteration 4: replicated tensors .*ln2w of layer 1.* differ" <<<"$out" \
  && ok "--check-replicated-params-interval 2: the drift of iteration 3 found at 4: $(grep -m1 '^error' <<<"$out" | cut -c1-140)..." \
  || fail "interval 2 ($rc): $(grep -m1 error <<<"$out")"
out=$(KEEL_TEST_PERTURB_REPLICATED=ln2w:1:3 timeout -k 10 120 "${MPI[@]}" 2 -x KEEL_TEST_PERTURB_REPLICATED $KEEL "${CHK[@]}" \
      --sync-tp-duplicated-parameters 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "iteration        6/" <<<"$out" && ok "--sync-tp-duplicated-parameters repairs the drift: the checked run finishes" \
  || fail "sync did not repair ($rc): $(grep -m1 error <<<"$out")"
run sync 2 $KEEL "${CHK[@]}" --sync-tp-duplicated-parameters
run nosync 2 $KEEL "${CHK[@]}"
cmp -s <(strip_timing "$TMP/sync.jsonl") <(strip_timing "$TMP/nosync.jsonl") \
  && ok "without drift the sync changes nothing (records identical)" || fail "the sync changed an undrifted run"

# 4. 3D: TP=2 x PP=2 x DP=2, ZeRO-1, 8 processes
D3=("${TINY[@]}" --num-layers 4 --micro-batch-size 1 --global-batch-size 8 --hidden-dropout 0.1 --attention-dropout 0.1
    --eval-interval 3 --eval-iters 1 --embed-layernorm --position-embedding-type alibi)
L3=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --zero-stage 1 --check-replicated-params-interval 1)
run d3_one 1 $KEEL "${D3[@]}" --train-iters 6
run d3_full 8 $KEEL "${D3[@]}" "${L3[@]}" --train-iters 6 --save "$TMP/d3_full" --save-interval 3
r=$(compare d3_full d3_one 1e-5 2>&1) && ok "TP=2 x PP=2 x DP=2 ZeRO-1 = one process within 1e-5 ($r)" || fail "3D: $r"
run d3_a 8 $KEEL "${D3[@]}" "${L3[@]}" --train-iters 6 --save "$TMP/d3_part" --save-interval 3 --exit-interval 3
cp "$TMP/d3_a.jsonl" "$TMP/d3_b.jsonl"
timeout -k 10 300 "${MPI[@]}" 8 $KEEL "${D3[@]}" "${L3[@]}" --train-iters 6 --save "$TMP/d3_part" --save-interval 3 --load "$TMP/d3_part" \
  --metrics-file "$TMP/d3_b.jsonl" >"$TMP/d3_b.log" 2>&1 || { fail "3D resume run failed"; tail -5 "$TMP/d3_b.log"; }
cmp -s <(strip_timing "$TMP/d3_full.jsonl") <(strip_timing "$TMP/d3_b.jsonl") \
  && ok "3D resume: every record identical to the uninterrupted run" || fail "3D resume: records differ"
same_checkpoint "3D resume, final checkpoint" "$TMP/d3_full" "$TMP/d3_part" 6
run d3_re1 1 $KEEL "${D3[@]}" --train-iters 6 --load "$TMP/d3_full" --save "$TMP/d3_re1"
same_checkpoint "3D checkpoint re-saved at TP=1 PP=1 DP=1" "$TMP/d3_full" "$TMP/d3_re1" 6
run d3_re2 2 $KEEL "${D3[@]}" --tensor-model-parallel-size 2 --train-iters 6 --load "$TMP/d3_re1" --save "$TMP/d3_re2"
same_checkpoint "that copy re-saved at TP=2" "$TMP/d3_full" "$TMP/d3_re2" 6

# 5. the emulated CUDA trainer: NCCL all-reduces of device buffers
EMU=build/train_gpt_emu
if [ -x $EMU ]; then
  run emu_tp2 2 $EMU "${ARGS[@]}" --fp32 --tensor-model-parallel-size 2
  r=$(compare emu_tp2 tp2 2e-5 2>&1) && ok "emulated CUDA trainer TP=2 = CPU trainer TP=2 ($r)" || fail "emulated TP=2: $r"
  # bf16: the all-reduces of bf16 activations (NCCL's bf16 sum) and the fp32 statistics
  run emu_tp2_bf16 2 $EMU "${ARGS[@]}" --bf16 --tensor-model-parallel-size 2
  r=$(compare emu_tp2_bf16 one 5e-3 2>&1) && ok "emulated CUDA trainer TP=2 --bf16 = CPU fp32 one process within 5e-3 ($r)" || fail "emulated TP=2 bf16: $r"
fi

# 6. refusals, on every rank, before any iteration
mpi_refused 4 "--num-attention-heads 2 is not divisible by --tensor-model-parallel-size 4" "${TINY[@]}" --train-iters 2 --tensor-model-parallel-size 4
mpi_refused 2 "pad-vocab-size-to 50257 is not divisible by --tensor-model-parallel-size 2" "${TINY[@]}" --train-iters 2 --tensor-model-parallel-size 2 \
  --make-vocab-size-divisible-by 1 --pad-vocab-size-to 50257  # (without --pad-vocab-size-to, Megatron pads to a multiple of 1 x TP)

mpi_refused 2 "--normformer is not built for --tensor-model-parallel-size" "${TINY[@]}" --train-iters 2 --tensor-model-parallel-size 2 --normformer
finish
