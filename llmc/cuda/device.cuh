// cuda/device.cuh — what the CUDA build links against, reported at start-up.
//
// It queries the CUDA runtime, cuBLASLt, NCCL and MPI, so the start-up line shows which versions the
// binary really linked and how many GPUs it sees. A build without MPI (no mpicxx: one GPU, no
// NCCL) says so instead of the two library versions.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>
#ifdef KEEL_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <nccl.h>
#endif

#include <cstdio>

static inline void cuda_report(void) {
#ifdef KEEL_CUDA_EMULATION
    // The emulation's runtime, device count and library versions are stand-ins (it reports 8 devices so
    // that multi-rank tests find one each): printing them would read as a real GPU's.
    printf("cuda: emulated on the CPU (test/cuda_emu): no GPU is used, kernels run as CPU threads\n");
    return;
#endif
    int devices = 0, runtime = 0;
    cudaError_t err = cudaGetDeviceCount(&devices);
    cudaRuntimeGetVersion(&runtime);
    size_t lt = cublasLtGetVersion();
#ifdef KEEL_MPI
    int nccl = 0;
    ncclGetVersion(&nccl);
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(mpi, &len);
    for (int i = 0; i < len; i++)
        if (mpi[i] == '\n' || mpi[i] == ',') { mpi[i] = '\0'; break; }
    printf("cuda: runtime %d, %d device(s)%s%s | cuBLASLt %zu | NCCL %d | %s\n", runtime, err == cudaSuccess ? devices : 0,
           err == cudaSuccess ? "" : " — ", err == cudaSuccess ? "" : cudaGetErrorString(err), lt, nccl, mpi);
#else
    printf("cuda: runtime %d, %d device(s)%s%s | cuBLASLt %zu | no MPI/NCCL (single-GPU build)\n", runtime,
           err == cudaSuccess ? devices : 0, err == cudaSuccess ? "" : " — ", err == cudaSuccess ? "" : cudaGetErrorString(err), lt);
#endif
}
