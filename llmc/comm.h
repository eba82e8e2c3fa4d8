// comm.h — the communication interface between ranks (DESIGN §5): all-reduce, reduce-scatter,
// all-gather, broadcast, send/recv, barrier. Three backends:
//   - single process (no MPI in the build, or not launched by mpirun): every collective is a copy;
//   - MPI (CPU trainer, KEEL_MPI): host buffers;
//   - NCCL (CUDA trainer, KEEL_CUDA + KEEL_MPI): device buffers, one process per GPU, the NCCL id
//     broadcast over MPI. It compiles everywhere nvcc is; it runs where GPUs are (the CUDA op set,
//     which puts the buffers on the device, selects it).
// Launch: `mpirun -np N ./train_gpt_cpu ...` or `srun ./train_gpt_cpu ...`.
//
// Determinism (DESIGN §4): floating-point sums across ranks are never left to the library's
// algorithm choice. comm_reduce_scatter_sum_f32 moves every rank's slice to the slice's owner and
// the owner adds them in rank order 0, 1, ..., N-1; small reductions (norm partials, losses) are
// all-gathered and added in a fixed order by the caller. So the same partition gives the same bits,
// and ZeRO-0 (reduce-scatter + all-gather) equals ZeRO-1 bit for bit.
//
// Sizes: MPI counts are int, so one rank's slice must stay below 2 GiB (checked, with a hint).
#pragma once
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "llmc/common.h"

#ifdef KEEL_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only (OpenMPI's C++ bindings warn under -Wextra)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#define MPI_CHECK(call)                                                                             \
    do {                                                                                            \
        int mpi_status_ = (call);                                                                   \
        if (mpi_status_ != MPI_SUCCESS) {                                                           \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                                    \
            int mpi_len_ = 0;                                                                       \
            MPI_Error_string(mpi_status_, mpi_msg_, &mpi_len_);                                     \
            keel_die("MPI call %s failed at %s:%d: %s", #call, __FILE__, __LINE__, mpi_msg_);       \
        }                                                                                           \
    } while (0)
#endif

#if defined(KEEL_CUDA) && defined(KEEL_MPI)
#define KEEL_NCCL 1
#include <cuda_runtime.h>
#include <nccl.h>
#endif

struct Comm {
    int rank, size;  // this process and the world
    bool mpi;        // MPI is initialised (a run under mpirun/srun, or an MPI singleton)
#ifdef KEEL_NCCL
    ncclComm_t nccl; // device-buffer collectives (size > 1)
    int local_rank;  // this process's GPU on its node
#endif
};

#ifdef KEEL_NCCL
static inline void comm_nccl_init(Comm* c);
static inline void comm_nccl_free(Comm* c);
static inline void nccl_reduce_scatter_sum_f32(const Comm* c, float* buf, const std::vector<int64_t>& lo);
static inline void nccl_allgather_shards_f32(const Comm* c, float* buf, const std::vector<int64_t>& lo);
#endif

// True when a launcher (mpirun/mpiexec of OpenMPI, MPICH or PMIx, or srun) started this process.
// A plain `./train_gpt_cpu` does not initialise MPI: an MPI singleton start costs a daemon fork.
static inline bool comm_launched() {
    const char* vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    for (const char* v : vars)
        if (getenv(v)) return true;
    return false;
}

static inline void comm_init(Comm* c, int* argc, char*** argv) {
    *c = Comm{};  // every backend's handle null until set
    c->rank = 0;
    c->size = 1;
    c->mpi = false;
#ifndef KEEL_MPI
    // started by a launcher with more ranks, but unable to talk to them: every rank would train
    // alone and write the same files — refuse instead
    const char* n = getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : getenv("PMI_SIZE");
    if (n && atoi(n) > 1)
        keel_die_code(KEEL_EXIT_USAGE, "rebuild with MPI: scripts/setup.sh installs OpenMPI, then make",
                      "launched as one of %s ranks, but this build has no MPI (it was built without mpicxx or with NO_MPI=1)", n);
#else
    if (!comm_launched()) return;
    MPI_CHECK(MPI_Init(argc, argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->size));
    c->mpi = true;
#endif
#ifdef KEEL_NCCL
    comm_nccl_init(c);
#endif
}

static inline void comm_finalize(Comm* c) {
#ifdef KEEL_NCCL
    comm_nccl_free(c);
#endif
#ifdef KEEL_MPI
    if (c->mpi) MPI_Finalize();
#endif
    c->mpi = false;
}

static inline void comm_barrier(const Comm* c) {
#ifdef KEEL_MPI
    if (c->size > 1) MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
#endif
}

static inline int comm_count(size_t bytes) {
    if (bytes > (size_t)INT_MAX)
        keel_die_code(KEEL_EXIT_RUNTIME, "use more data-parallel ranks or --zero-stage 1 so each rank's slice is smaller",
                      "a message of %zu bytes exceeds MPI's int count", bytes);
    return (int)bytes;
}

// Every rank contributes send (send_bytes, which must equal counts[rank]); recv receives the
// concatenation in rank order (counts[r] bytes from rank r). recv may contain send at its place
// (then the copy is skipped).
static inline void comm_allgatherv(const Comm* c, const void* send, size_t send_bytes, void* recv, const std::vector<size_t>& counts) {
    std::vector<size_t> displ(counts.size() + 1, 0);
    for (size_t r = 0; r < counts.size(); r++) displ[r + 1] = displ[r] + counts[r];
    if (send_bytes != counts[c->rank]) keel_die("comm_allgatherv: rank %d sends %zu bytes, expected %zu", c->rank, send_bytes, counts[c->rank]);
    uint8_t* dst = (uint8_t*)recv + displ[c->rank];
    if (dst != send) memmove(dst, send, send_bytes);
#ifdef KEEL_MPI
    if (c->size > 1) {
        std::vector<int> cnt(c->size), dsp(c->size);
        for (int r = 0; r < c->size; r++) { cnt[r] = comm_count(counts[r]); dsp[r] = comm_count(displ[r]); }
        MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, recv, cnt.data(), dsp.data(), MPI_BYTE, MPI_COMM_WORLD));
    }
#endif
}

// Each rank's equal-sized item (bytes) gathered to every rank, in rank order.
static inline void comm_allgather(const Comm* c, const void* send, size_t bytes, void* recv) {
    comm_allgatherv(c, send, bytes, recv, std::vector<size_t>(c->size, bytes));
}

static inline void comm_broadcast(const Comm* c, void* buf, size_t bytes, int root) {
#ifdef KEEL_MPI
    if (c->size > 1) MPI_CHECK(MPI_Bcast(buf, comm_count(bytes), MPI_BYTE, root, MPI_COMM_WORLD));
#endif
}

static inline void comm_send(const Comm* c, const void* buf, size_t bytes, int peer, int tag) {
#ifdef KEEL_MPI
    MPI_CHECK(MPI_Send(buf, comm_count(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD));
#else
    keel_die("comm_send to rank %d: this build has no MPI", peer);
#endif
}

static inline void comm_recv(const Comm* c, void* buf, size_t bytes, int peer, int tag) {
#ifdef KEEL_MPI
    MPI_CHECK(MPI_Recv(buf, comm_count(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
#else
    keel_die("comm_recv from rank %d: this build has no MPI", peer);
#endif
}

// Sum over ranks of a few doubles, added in rank order: the same bits on every rank.
static inline void comm_allreduce_sum_f64(const Comm* c, double* x, int n) {
    if (c->size == 1) return;
    std::vector<double> all((size_t)n * c->size);
    comm_allgather(c, x, (size_t)n * sizeof(double), all.data());
    for (int i = 0; i < n; i++) {
        double s = all[i];
        for (int r = 1; r < c->size; r++) s += all[(size_t)r * n + i];
        x[i] = s;
    }
}

static inline bool comm_any(const Comm* c, bool flag) {
    double x = flag ? 1.0 : 0.0;
    comm_allreduce_sum_f64(c, &x, 1);
    return x > 0;
}

// buf (n floats, every rank) → out = Σ_r buf_r over this rank's shard [lo[rank], lo[rank+1]),
// added in rank order. lo has size+1 entries with lo[0] = 0, lo[size] = n. out may alias
// buf + lo[rank]. scratch is resized as needed (size × shard floats).
static inline void comm_reduce_scatter_sum_f32(const Comm* c, const float* buf, float* out, const std::vector<int64_t>& lo,
                                               std::vector<float>* scratch) {
    int64_t mine = lo[c->rank + 1] - lo[c->rank];
#ifdef KEEL_NCCL
    if (out != buf + lo[c->rank]) keel_die("comm_reduce_scatter_sum_f32: the CUDA build reduces in place (out = buf + lo[rank])");
    if (c->size > 1) nccl_reduce_scatter_sum_f32(c, (float*)buf, lo);
    return;
#endif
    if (c->size == 1) {
        if (out != buf + lo[0]) memmove(out, buf + lo[0], (size_t)mine * sizeof(float));
        return;
    }
#ifdef KEEL_MPI
    std::vector<int> scnt(c->size), sdsp(c->size), rcnt(c->size), rdsp(c->size);
    for (int r = 0; r < c->size; r++) {
        scnt[r] = comm_count((size_t)(lo[r + 1] - lo[r]) * sizeof(float));
        sdsp[r] = comm_count((size_t)lo[r] * sizeof(float));
        rcnt[r] = comm_count((size_t)mine * sizeof(float));
        rdsp[r] = comm_count((size_t)r * mine * sizeof(float));
    }
    scratch->resize((size_t)c->size * mine);
    MPI_CHECK(MPI_Alltoallv(buf, scnt.data(), sdsp.data(), MPI_BYTE, scratch->data(), rcnt.data(), rdsp.data(), MPI_BYTE,
                            MPI_COMM_WORLD));
    const float* s = scratch->data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < mine; i++) {
        float acc = s[i];
        for (int r = 1; r < c->size; r++) acc += s[(size_t)r * mine + i];
        out[i] = acc;
    }
#endif
}

// Every rank's shard [lo[r], lo[r+1]) of buf (floats), gathered in place on every rank.
static inline void comm_allgather_shards_f32(const Comm* c, float* buf, const std::vector<int64_t>& lo) {
    if (c->size == 1) return;
#ifdef KEEL_NCCL
    nccl_allgather_shards_f32(c, buf, lo);
    return;
#endif
    std::vector<size_t> counts(c->size);
    for (int r = 0; r < c->size; r++) counts[r] = (size_t)(lo[r + 1] - lo[r]) * sizeof(float);
    comm_allgatherv(c, buf + lo[c->rank], counts[c->rank], buf, counts);
}

#ifdef KEEL_NCCL
// ---- NCCL backend (device buffers) ---------------------------------------------------------------
// The collectives on device buffers (gradients, parameters) in the CUDA trainer; the small host
// reductions (losses, norm partials, flags) stay on MPI above. One process per GPU: the GPU is the
// process's rank among the ranks of its node (MPI's shared-memory split), rank 0 creates the NCCL
// id and broadcasts it over MPI. All calls run on the default stream, ordered with the kernels.
// Reduce-scatter of unequal shards is a group of ncclReduce calls, one per owner (NCCL's own
// ReduceScatter needs equal counts). NCCL chooses its reduction order (ring/tree) from the world's
// topology: fixed for a fixed layout and machine, so runs repeat bit for bit; it is not the MPI
// backend's rank order, so CPU and GPU data-parallel sums differ in the last bits.
#define NCCL_CHECK(call)                                                                              \
    do {                                                                                              \
        ncclResult_t nccl_status_ = (call);                                                           \
        if (nccl_status_ != ncclSuccess)                                                              \
            keel_die("NCCL call %s failed at %s:%d: %s", #call, __FILE__, __LINE__, ncclGetErrorString(nccl_status_)); \
    } while (0)

static inline void comm_nccl_init(Comm* c) {
    c->local_rank = 0;
    c->nccl = nullptr;
    if (c->size == 1) return;
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &c->local_rank));
    MPI_CHECK(MPI_Comm_free(&node));
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
        keel_die("rank %d: no CUDA device visible", c->rank);
    if (c->local_rank >= devices)
        keel_die_code(KEEL_EXIT_USAGE, "start one process per GPU (mpirun -np <GPUs> / srun --ntasks-per-node=<GPUs>)",
                      "rank %d is process %d on its node, which has %d GPU(s)", c->rank, c->local_rank, devices);
    if (cudaSetDevice(c->local_rank) != cudaSuccess) keel_die("rank %d: cudaSetDevice(%d) failed", c->rank, c->local_rank);
    ncclUniqueId id;
    if (c->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    comm_broadcast(c, &id, sizeof id, 0);
    NCCL_CHECK(ncclCommInitRank(&c->nccl, c->size, id, c->rank));
}

static inline void comm_nccl_free(Comm* c) {
    if (c->nccl) ncclCommDestroy(c->nccl);
    c->nccl = nullptr;
}

static inline void nccl_reduce_scatter_sum_f32(const Comm* c, float* buf, const std::vector<int64_t>& lo) {
    NCCL_CHECK(ncclGroupStart());
    for (size_t r = 0; r + 1 < lo.size(); r++)
        NCCL_CHECK(ncclReduce(buf + lo[r], buf + lo[r], (size_t)(lo[r + 1] - lo[r]), ncclFloat, ncclSum, (int)r, c->nccl, 0));
    NCCL_CHECK(ncclGroupEnd());
    if (cudaStreamSynchronize(0) != cudaSuccess) keel_die("rank %d: the gradient reduce-scatter failed on the GPU", c->rank);
}

static inline void nccl_allgather_shards_f32(const Comm* c, float* buf, const std::vector<int64_t>& lo) {
    NCCL_CHECK(ncclGroupStart());
    for (size_t r = 0; r + 1 < lo.size(); r++)
        NCCL_CHECK(ncclBroadcast(buf + lo[r], buf + lo[r], (size_t)(lo[r + 1] - lo[r]), ncclFloat, (int)r, c->nccl, 0));
    NCCL_CHECK(ncclGroupEnd());
    if (cudaStreamSynchronize(0) != cudaSuccess) keel_die("rank %d: the parameter all-gather failed on the GPU", c->rank);
}
#endif
