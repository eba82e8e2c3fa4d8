#!/usr/bin/env bash
# The emulator's step profile (KEEL_EMU_PROFILE, test/cuda_emu/emu_core.h) counts what it should.
#   1. exact counts on a known program: a small program against the emulation headers (cudaMalloc,
#      copies each way, memsets, synchronisations, launches of a templated kernel, a batched bf16 and
#      an fp32 cuBLASLt matmul, each NCCL collective) run on 2 ranks: FILE.0 and FILE.1, every key
#      equal to the count worked out by hand below, the program ending through exit();
#   2. the emulated CUDA trainer, 1 iteration of a tiny model (bf16, 2 micro-batches): every key
#      present; launches = Σ launches_by_kernel; gemm_flops ≥ the linear layers' FLOPs computed from
#      the config (QKV, attention-out, FC, FC-proj, LM head: 6·tokens·(L·12·C² + C·Vp)) and at most
#      that plus attention at full T×T; 0 < tensor_core_flops ≤ gemm_flops; syncs ≥ 1 (the loss);
#   3. --fp32: the same GEMMs, none on tensor cores (tensor_core_flops = 0);
#   4. a run that stops at a usage error (exit() before any CUDA call) still writes its profile;
#   5. data parallel on 2 ranks (mpirun, NCCL backend): FILE.0 and FILE.1, no FILE, NCCL calls and
#      bytes > 0 on each, the per-collective table summing to the totals.
# The step's performance targets (tensor-core share, allocations, syncs per micro-batch) are
# `make gpu-profile`'s report, not asserted here.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
CUDA=build/train_gpt_emu
[ -x "$CUDA" ] || { fail "$CUDA not built (make build/train_gpt_emu)"; finish; }
command -v mpicxx >/dev/null && command -v mpirun >/dev/null || { fail "needs MPI (mpicxx, mpirun)"; finish; }
unset KEEL_EMU_PROFILE

# ---- 1. exact counts on a known program ---------------------------------------------------------
cat >"$TMP/known.cpp" <<'CPP'
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <vector>
#define KEEL_COMMA ,
template <typename T, int K> __global__ void fill_kernel(T* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = (T)K;
}
__global__ void nop_kernel() {}
#define CHECK(x) do { if ((x) != 0) { fprintf(stderr, "failed: %s\n", #x); exit(1); } } while (0)
// D (m,n) = A (m,k) · B (k,n), column-major, `batch` products `stride` elements apart
static void gemm(cudaDataType_t t, void* a, void* b, void* d, int m, int n, int k, int batch, int64_t sa, int64_t sb, int64_t sd) {
    cublasLtHandle_t h; cublasLtMatmulDesc_t desc; cublasLtMatrixLayout_t la, lb, ld;
    CHECK(cublasLtCreate(&h));
    CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CHECK(cublasLtMatrixLayoutCreate(&la, t, m, k, m));
    CHECK(cublasLtMatrixLayoutCreate(&lb, t, k, n, k));
    CHECK(cublasLtMatrixLayoutCreate(&ld, t, m, n, m));
    int64_t strides[3] = {sa, sb, sd};
    cublasLtMatrixLayout_t ls[3] = {la, lb, ld};
    for (int i = 0; i < 3 && batch > 1; i++) {
        CHECK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
        CHECK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i], sizeof strides[i]));
    }
    float alpha = 1, beta = 0;
    CHECK(cublasLtMatmul(h, desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld, nullptr, nullptr, 0, nullptr));
}
int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *a, *b, *c, *g;                  // the arena rounds to 256 bytes:
    CHECK(cudaMalloc(&a, 1000));          // 1024 live
    CHECK(cudaMalloc(&b, 4000));          // 5120 live: the peak
    CHECK(cudaFree(b));                   // 1024 live, a hole of 4096
    CHECK(cudaFree(nullptr));             // no call to count
    CHECK(cudaMalloc(&c, 300));           // 512 from the hole
    CHECK(cudaMalloc(&g, 2048));          // 2048 from the hole: 3584 live
    std::vector<char> host(1000);
    CHECK(cudaMemcpy(a, host.data(), 400, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(host.data(), a, 200, cudaMemcpyDeviceToHost));  // a host wait
    CHECK(cudaMemcpy(host.data(), a, 100, cudaMemcpyDefault));       // device → host by the pointers: a host wait
    CHECK(cudaMemcpyAsync(host.data(), a, 40, cudaMemcpyDeviceToHost, nullptr));  // not a wait
    CHECK(cudaMemcpy(c, a, 64, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(host.data() + 500, host.data(), 8, cudaMemcpyHostToHost));   // not device traffic
    CHECK(cudaMemset(a, 0, 1000));
    CHECK(cudaMemsetAsync(c, 0, 300, nullptr));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaStreamSynchronize(nullptr));
    CHECK(cudaEventSynchronize(nullptr));
    for (int i = 0; i < 3; i++) KEEL_LAUNCH(fill_kernel<float KEEL_COMMA 2>, 1, 32, 0, nullptr)((float*)a, 250);
    KEEL_LAUNCH(nop_kernel, 2, 1, 0, nullptr)();
    gemm(CUDA_R_16BF, g, g + 144, g + 324, 4, 5, 6, 3, 24, 30, 20);     // 2·4·5·6·3 = 720 FLOPs, tensor cores
    gemm(CUDA_R_32F, g + 1024, g + 1120, g + 1144, 8, 2, 3, 1, 0, 0, 0);  // 2·8·2·3 = 96 FLOPs, CUDA cores
    ncclUniqueId id;
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    CHECK(emu_nccl_comm_init_rank(&comm, size, id, rank, MPI_COMM_WORLD));
    CHECK(ncclAllReduce(a, a, 10, ncclFloat, ncclSum, comm, nullptr));          // 40 bytes
    CHECK(ncclAllReduce(a, a, 6, ncclBfloat16, ncclSum, comm, nullptr));        // 12
    CHECK(ncclReduce(a, a, 5, ncclFloat, ncclSum, 0, comm, nullptr));           // 20
    CHECK(ncclBroadcast(a, a, 7, ncclFloat, 0, comm, nullptr));                 // 28
    CHECK(ncclGroupStart());
    CHECK(ncclSend(a, 16, ncclUint8, 1 - rank, comm, nullptr));                 // 16
    CHECK(ncclRecv(c, 16, ncclUint8, 1 - rank, comm, nullptr));                 // 16
    CHECK(ncclGroupEnd());
    ncclCommDestroy(comm);
    MPI_Finalize();
    exit(0);  // the profile is written at exit()
}
CPP
cat >"$TMP/known.expect" <<'EOF'
{"launches": 4, "launches_by_kernel": {"fill_kernel<float, 2>": 3, "nop_kernel": 1},
 "gemm_calls": 2, "gemm_flops": 816, "tensor_core_flops": 720, "mma_flops": 0,
 "syncs": 5, "sync_calls": 3, "d2h_copies": 2, "d2h_async_copies": 1,
 "allocations": 4, "alloc_bytes": 7348, "frees": 1, "peak_device_bytes": 5120,
 "memsets": 2, "memset_bytes": 1300, "h2d_copies": 1, "h2d_bytes": 400, "d2h_bytes": 340, "d2d_copies": 1, "d2d_bytes": 64,
 "nccl_calls": 6, "nccl_bytes": 132,
 "nccl_by_collective": {"allreduce": {"calls": 2, "bytes": 52}, "reduce": {"calls": 1, "bytes": 20},
                        "broadcast": {"calls": 1, "bytes": 28}, "send": {"calls": 1, "bytes": 16}, "recv": {"calls": 1, "bytes": 16}}}
EOF
if mpicxx -std=c++17 -O1 -w -Itest/cuda_emu -DKEEL_CUDA_EMULATION "$TMP/known.cpp" -o "$TMP/known" 2>"$TMP/known.build.log"; then
  KEEL_EMU_PROFILE="$TMP/known.json" timeout -k 10 60 mpirun --oversubscribe -np 2 "$TMP/known" >"$TMP/known.log" 2>&1 \
    || { fail "known program: run failed"; tail -5 "$TMP/known.log"; }
  [ -e "$TMP/known.json" ] && fail "known program: a 2-rank run wrote the unsuffixed FILE"
  python3 - "$TMP/known.expect" "$TMP/known.json" <<'PY' && ok "known program on 2 ranks: FILE.0 and FILE.1 hold exactly the hand-counted figures" || fail "known program: counts"
import json, sys
want = json.load(open(sys.argv[1]))
for r in (0, 1):
    got = json.load(open(f"{sys.argv[2]}.{r}"))
    assert got["rank"] == r, (r, got["rank"])
    for k, v in want.items():
        assert got.get(k) == v, f"rank {r}: {k} = {got.get(k)}, want {v}"
PY
else
  fail "known program does not compile against test/cuda_emu"; tail -20 "$TMP/known.build.log"
fi

# ---- 2-5. the emulated trainer ---------------------------------------------------------------------
RUN=("${TINY[@]}" --train-iters 1 --lr-warmup-iters 0 --eval-interval 0)
profiled() {  # name command...: runs with KEEL_EMU_PROFILE=$TMP/name.json
  local name=$1; shift
  KEEL_EMU_PROFILE="$TMP/$name.json" timeout -k 10 300 "$@" >"$TMP/$name.log" 2>&1
}
profiled bf16 $CUDA "${RUN[@]}" --bf16 || { fail "bf16 run failed"; tail -5 "$TMP/bf16.log"; }
profiled fp32 $CUDA "${RUN[@]}" --fp32 || { fail "fp32 run failed"; tail -5 "$TMP/fp32.log"; }
profiled usage $CUDA "${RUN[@]}" --no-such-flag && fail "a run with an unknown flag succeeded"
profiled dp mpirun --oversubscribe -np 2 $CUDA "${RUN[@]}" || { fail "DP=2 run failed"; tail -5 "$TMP/dp.log"; }
VP=$(grep -o 'padded [0-9]*' "$TMP/bf16.log" | grep -o '[0-9]*' | head -1)

python3 - "$TMP" "${VP:-0}" <<'PY'
import json, os, sys
tmp, Vp = sys.argv[1], int(sys.argv[2])
L, C, T, B, A = 2, 32, 16, 2, 2   # test/lib.sh's TINY: 2 micro-batches of 2 per iteration
KEYS = ["launches", "launches_by_kernel", "gemm_calls", "gemm_flops", "tensor_core_flops", "mma_flops", "syncs", "d2h_copies",
        "allocations", "alloc_bytes", "frees", "peak_device_bytes", "memset_bytes", "h2d_bytes", "d2h_bytes", "d2d_bytes",
        "nccl_calls", "nccl_bytes", "nccl_by_collective"]
COLLECTIVES = ["allreduce", "reduce", "broadcast", "send", "recv"]
fails = 0
def check(cond, what):
    global fails
    print(("ok: " if cond else "FAIL: ") + what)
    fails += not cond
def load(name):
    path = f"{tmp}/{name}"
    if not os.path.exists(path):
        check(False, f"{name} was not written")
        return None
    return json.load(open(path))
def consistent(p, name):  # what must hold of any profile
    check(all(k in p for k in KEYS), f"{name}: every key present" + "".join(f" (missing {k})" for k in KEYS if k not in p))
    check(p["launches"] == sum(p["launches_by_kernel"].values()), f"{name}: launches {p['launches']} = Σ launches_by_kernel")
    check(not any("KEEL_COMMA" in k for k in p["launches_by_kernel"]), f"{name}: kernel names with commas restored")
    check(0 <= p["tensor_core_flops"] <= p["gemm_flops"], f"{name}: tensor_core_flops {p['tensor_core_flops']} ≤ gemm_flops {p['gemm_flops']}")
    check(p["syncs"] == p["sync_calls"] + p["d2h_copies"], f"{name}: syncs = synchronize calls + blocking device→host copies")
    check(sorted(p["nccl_by_collective"]) == sorted(COLLECTIVES) and
          p["nccl_calls"] == sum(c["calls"] for c in p["nccl_by_collective"].values()) and
          p["nccl_bytes"] == sum(c["bytes"] for c in p["nccl_by_collective"].values()), f"{name}: NCCL totals = Σ per collective")

tokens = A * B * T
linear = 6 * tokens * (L * 12 * C * C + C * Vp)           # QKV 3C², attention-out C², FC 4C², FC-proj 4C², LM head C·Vp
attention = 3 * L * A * 4 * B * T * T * C                  # QKᵀ and att·V at full T×T, forward + 2× backward
linear_calls = 3 * A * (4 * L + 1)                         # forward, dinp, dweight of each linear layer, per micro-batch
check(Vp >= 50257, f"padded vocabulary {Vp} read from the trainer's log")
bf16 = load("bf16.json")
if bf16:
    consistent(bf16, "bf16")
    check(bf16["gemm_calls"] >= linear_calls, f"bf16: gemm_calls {bf16['gemm_calls']} ≥ {linear_calls} linear-layer GEMMs")
    check(linear <= bf16["gemm_flops"] <= linear + attention,
          f"bf16: gemm_flops {bf16['gemm_flops']} within [linear layers {linear}, + full-T×T attention {linear + attention}]")
    print(f"info: gemm_flops − linear layers = {bf16['gemm_flops'] - linear} (attention at full T×T: {attention})")
    check(bf16["tensor_core_flops"] > 0, "bf16: tensor_core_flops > 0")
    check(bf16["mma_flops"] == 0, "bf16: mma_flops = 0 (no kernel issues warp MMA)")
    check(bf16["launches"] > 0 and bf16["allocations"] > 0 and bf16["peak_device_bytes"] >= bf16["alloc_bytes"] - 256 * bf16["allocations"]
          and bf16["h2d_bytes"] > 0 and bf16["syncs"] >= 1 and bf16["nccl_calls"] == 0,
          "bf16: launches, allocations, peak memory, host→device bytes and ≥ 1 sync counted; no NCCL in one process")
    check(bf16["rank"] == -1 and not os.path.exists(f"{tmp}/bf16.json.0"), "bf16: one process writes the unsuffixed FILE")
fp32 = load("fp32.json")
if fp32:
    consistent(fp32, "fp32")
    check(fp32["gemm_flops"] >= linear and fp32["tensor_core_flops"] == 0,
          f"fp32: gemm_flops {fp32['gemm_flops']} ≥ linear layers, none on tensor cores (tensor_core_flops {fp32['tensor_core_flops']})")
usage = load("usage.json")
if usage:
    consistent(usage, "usage error")
    check(usage["launches"] == 0 and usage["allocations"] == 0, "usage error: profile written at exit(), all zeros")
check(not os.path.exists(f"{tmp}/dp.json"), "DP=2: no unsuffixed FILE")
for r in (0, 1):
    dp = load(f"dp.json.{r}")
    if dp:
        consistent(dp, f"DP=2 rank {r}")
        check(dp["rank"] == r and dp["nccl_calls"] > 0 and dp["nccl_bytes"] > 0,
              f"DP=2 rank {r}: FILE.{r}, {dp['nccl_calls']} NCCL calls, {dp['nccl_bytes']} bytes")
sys.exit(1 if fails else 0)
PY
[ $? -eq 0 ] || fail "trainer profiles (see above)"
finish
