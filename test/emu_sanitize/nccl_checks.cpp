// nccl_checks — the emulated NCCL's agreement checks (test/cuda_emu/nccl.h), on 2 ranks under mpirun,
// for test/test_emu_sanitize.sh. Each mode but `ok` plants one disagreement between the ranks, which
// on a GPU hangs or corrupts memory; the emulation must refuse it (exit 1, NCCL's message).
//   nccl_checks ok      the same collectives on both ranks, then a matching send/recv pair: exit 0
//   nccl_checks count   rank 1 all-reduces fewer elements than rank 0
//   nccl_checks type    rank 1 broadcasts bf16 where rank 0 broadcasts floats
//   nccl_checks order   rank 0 all-reduces then broadcasts, rank 1 the other way round
//   nccl_checks p2p     rank 0 sends 64 bytes, rank 1 receives 32
#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>

static void check(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    fprintf(stderr, "nccl_checks: %s failed: %s\n", what, ncclGetErrorString(r));
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char* mode = argc > 1 ? argv[1] : "ok";
    ncclUniqueId id;
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    check(emu_nccl_comm_init_rank(&comm, 2, id, rank, MPI_COMM_WORLD), "ncclCommInitRank");
    float* buf = nullptr;
    cudaMalloc((void**)&buf, 64 * sizeof(float));
    cudaMemset(buf, 0, 64 * sizeof(float));
    bool odd = rank == 1;
    size_t n = !strcmp(mode, "count") && odd ? 32 : 64;
    check(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, nullptr), "ncclAllReduce");
    ncclDataType_t t = !strcmp(mode, "type") && odd ? ncclBfloat16 : ncclFloat;
    check(ncclBroadcast(buf, buf, 16, t, 0, comm, nullptr), "ncclBroadcast");
    bool swap = !strcmp(mode, "order") && odd;
    if (swap) check(ncclBroadcast(buf, buf, 16, ncclFloat, 0, comm, nullptr), "ncclBroadcast");
    check(ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, comm, nullptr), "ncclAllReduce");
    if (!swap) check(ncclBroadcast(buf, buf, 16, ncclFloat, 0, comm, nullptr), "ncclBroadcast");
    size_t bytes = !strcmp(mode, "p2p") && odd ? 32 : 64;
    if (rank == 0) check(ncclSend(buf, bytes, ncclUint8, 1, comm, nullptr), "ncclSend");
    else check(ncclRecv(buf, bytes, ncclUint8, 0, comm, nullptr), "ncclRecv");
    cudaDeviceSynchronize();
    ncclCommDestroy(comm);
    if (rank == 0) printf("nccl_checks %s: ran through\n", mode);
    MPI_Finalize();
    return 0;
}
