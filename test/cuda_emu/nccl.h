// nccl.h (emulation) — the NCCL calls of llmc/comm.h's NCCL backend, carried out over MPI on the
// emulated device memory, so the emulated CUDA trainer runs data parallel under mpirun through the
// very code path the GPU build uses. Group semantics: keel's groups hold collectives only, which
// every rank issues in the same order, so running each call as it comes is equivalent. Sums use
// MPI_Reduce's order (like NCCL, not the MPI backend's rank order).
#pragma once
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_runtime.h"

typedef enum { ncclSuccess = 0, ncclSystemError = 2, ncclInvalidArgument = 4 } ncclResult_t;
typedef enum { ncclUint8 = 1, ncclFloat32 = 7, ncclFloat = 7 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
struct ncclUniqueId { char internal[128]; };
struct emu_nccl_comm { int rank, size; };
typedef emu_nccl_comm* ncclComm_t;
#define NCCL_VERSION_CODE 0

inline const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated NCCL error"; }
inline ncclResult_t ncclGetVersion(int* v) { *v = 0; return ncclSuccess; }
inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) { memset(id, 0x6b, sizeof *id); return ncclSuccess; }
inline ncclResult_t ncclCommInitRank(ncclComm_t* c, int size, ncclUniqueId, int rank) {
    *c = new emu_nccl_comm{rank, size};
    return ncclSuccess;
}
inline ncclResult_t ncclCommDestroy(ncclComm_t c) { delete c; return ncclSuccess; }
inline ncclResult_t ncclGroupStart() { return ncclSuccess; }
inline ncclResult_t ncclGroupEnd() { return ncclSuccess; }

inline MPI_Datatype emu_nccl_type(ncclDataType_t t) { return t == ncclFloat ? MPI_FLOAT : MPI_BYTE; }
inline bool emu_nccl_device(const void* p) {
    if (emu::is_device_ptr(p)) return true;
    fprintf(stderr, "NCCL emulation: a host pointer handed to NCCL (NCCL takes device buffers)\n");
    return false;
}

inline ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t, int root, ncclComm_t c, cudaStream_t) {
    if (!emu_nccl_device(send) || !emu_nccl_device(recv) || send != recv) return ncclInvalidArgument;  // keel reduces in place
    emu::DeviceScope open;
    int rc = c->rank == root ? MPI_Reduce(MPI_IN_PLACE, recv, (int)count, emu_nccl_type(t), MPI_SUM, root, MPI_COMM_WORLD)
                             : MPI_Reduce(send, nullptr, (int)count, emu_nccl_type(t), MPI_SUM, root, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}
inline ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t, cudaStream_t) {
    if (!emu_nccl_device(send) || !emu_nccl_device(recv) || send != recv) return ncclInvalidArgument;
    emu::DeviceScope open;
    return MPI_Bcast(recv, (int)count, emu_nccl_type(t), root, MPI_COMM_WORLD) == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}
inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t, ncclComm_t, cudaStream_t) {
    if (!emu_nccl_device(send) || !emu_nccl_device(recv) || send != recv) return ncclInvalidArgument;
    emu::DeviceScope open;
    return MPI_Allreduce(MPI_IN_PLACE, recv, (int)count, emu_nccl_type(t), MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}
