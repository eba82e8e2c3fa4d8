// comm.h — the communication interface between ranks (docs/internals.md#parallelism): all-reduce, reduce-scatter,
// all-gather, broadcast, send/recv, barrier, over the world or over a process group. Three backends:
//   - single process (no MPI in the build, or not launched by mpirun): every collective is a copy;
//   - MPI (CPU trainer, KEEL_MPI): host buffers;
//   - NCCL (CUDA trainer, KEEL_CUDA + KEEL_MPI): device buffers, one process per GPU, the NCCL id
//     broadcast over MPI. It compiles everywhere nvcc is; it runs where GPUs are (the CUDA op set,
//     which puts the buffers on the device, selects it).
// Launch: `mpirun -np N ./train_gpt_cpu ...` or `srun ./train_gpt_cpu ...`.
//
// Groups. A Comm is one communicator: `rank` and `size` are this process's place within it, and
// every function talks over it alone (its MPI communicator, and under KEEL_NCCL its own NCCL
// communicator). comm_init gives the world; comm_split carves groups out of a parent — for 3D
// parallelism (llmc/parallel.h) the data-parallel group of a stage (gradient reduce-scatter,
// ZeRO-1 all-gather, loss sums), the pipeline group (activations and gradients between stages, the
// loss broadcast from the last stage), the embedding group {first stage, last stage} (the tied word
// embedding's gradient), the tensor-parallel group, while the world keeps the global agreements
// (grad norm, non-finite verdict). Ranks and peers passed to a function are ranks of its Comm.
// Split groups are released with comm_free, the world with comm_finalize.
//
// Buffers. The host functions (comm_send, comm_sendrecv, comm_allreduce_sum_f32, ...) always take
// host memory and MPI. The *_device functions (KEEL_NCCL only) take device memory and NCCL. The
// trainer calls the backend-neutral *_buf functions and comm_reduce_scatter_sum_f32 /
// comm_allgather_shards, which take the memory the op set computes in: device under KEEL_NCCL,
// host otherwise.
//
// Determinism (docs/internals.md#determinism): floating-point sums across ranks are never left to the library's
// algorithm choice. comm_reduce_scatter_sum_f32 moves every rank's slice to the slice's owner and
// the owner adds them in rank order 0, 1, ..., N-1; comm_allreduce_sum_f32 is that reduce-scatter
// followed by an all-gather; small reductions (norm partials, losses) are all-gathered and added in
// a fixed order. So the same partition gives the same bits on every rank and in every run, and
// ZeRO-0 (reduce-scatter + all-gather) equals ZeRO-1 bit for bit. The NCCL backend sums in NCCL's
// order (see its section).
//
// Sizes: MPI counts are int, so one rank's slice must stay below 2 GiB (checked, with a hint).
//
// Hangs: every blocking MPI call here runs inside a WatchedWait (llmc/watchdog.h) naming the call and
// the group's label, so a peer that stops answering ends the job after --distributed-timeout-minutes
// with a line naming this rank, the call, the group and the iteration. Under NCCL the communicators
// are registered with the watchdog: an asynchronous NCCL error ends the job at the host's next poll
// (naming the group and the error), and every end of the job aborts them (ncclCommAbort).
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "llmc/common.h"
#include "llmc/watchdog.h"

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
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "llmc/cuda/stream.h"
#endif

struct Comm {
    int rank, size;       // this process within the communicator, and the communicator's size
    bool mpi;             // MPI is initialised (a run under mpirun/srun, or an MPI singleton)
#ifdef KEEL_MPI
    MPI_Comm mpi_comm;    // MPI_COMM_WORLD after comm_init; the group's own after comm_split (MPI_COMM_NULL without MPI)
#endif
    char label[96];       // for messages: "the world (4 ranks)", "the group of world ranks [0, 2]"
#ifdef KEEL_NCCL
    ncclComm_t nccl;      // device-buffer collectives (size > 1; nullptr in a group of one)
    int local_rank;       // this process's GPU on its node: per process, so a group inherits it
#endif
};

#ifdef KEEL_NCCL
static inline void comm_nccl_init(Comm* c);
static inline void comm_nccl_create(Comm* c);
static inline void comm_nccl_free(Comm* c);
static inline void nccl_registry_relabel(ncclComm_t nccl, const char* label);
static inline void nccl_reduce_scatter_sum_f32(const Comm* c, float* buf, const std::vector<int64_t>& lo);
template <typename T> static inline void nccl_allgather_shards(const Comm* c, T* buf, const std::vector<int64_t>& lo);
static inline void nccl_reduce_ranges_f32(const Comm* c, float* buf, const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                          const std::vector<int64_t>& lo);
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
    snprintf(c->label, sizeof c->label, "the world (1 rank)");
#ifndef KEEL_MPI
    // started by a launcher with more ranks, but unable to talk to them: every rank would train
    // alone and write the same files — refuse instead
    const char* n = getenv("OMPI_COMM_WORLD_SIZE") ? getenv("OMPI_COMM_WORLD_SIZE") : getenv("PMI_SIZE");
    if (n && atoi(n) > 1)
        keel_die_code(KEEL_EXIT_USAGE, "rebuild with MPI: scripts/setup.sh installs OpenMPI, then make",
                      "launched as one of %s ranks, but this build has no MPI (it was built without mpicxx or with NO_MPI=1)", n);
#else
    c->mpi_comm = MPI_COMM_WORLD;
    if (!comm_launched()) return;
    MPI_CHECK(MPI_Init(argc, argv));
    MPI_CHECK(MPI_Comm_rank(c->mpi_comm, &c->rank));
    MPI_CHECK(MPI_Comm_size(c->mpi_comm, &c->size));
    c->mpi = true;
    snprintf(c->label, sizeof c->label, "the world (%d ranks)", c->size);
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
    if (c->size > 1) {
        WatchedWait w("MPI_Barrier", c->label);
        MPI_CHECK(MPI_Barrier(c->mpi_comm));
    }
#endif
}

static inline int comm_count(size_t bytes) {
    if (bytes > (size_t)INT_MAX)
        keel_die_code(KEEL_EXIT_RUNTIME, "use more data-parallel ranks or --zero-stage 1 so each rank's slice is smaller",
                      "a message of %zu bytes exceeds MPI's int count", bytes);
    return (int)bytes;
}

static inline void comm_check_peer(const Comm* c, int peer, const char* what) {
    if (peer < 0 || peer >= c->size) keel_die("%s: rank %d is outside the group of %d", what, peer, c->size);
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
        WatchedWait w("MPI_Allgatherv", c->label);
        MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, recv, cnt.data(), dsp.data(), MPI_BYTE, c->mpi_comm));
    }
#endif
}

// Each rank's equal-sized item (bytes) gathered to every rank, in rank order.
static inline void comm_allgather(const Comm* c, const void* send, size_t bytes, void* recv) {
    comm_allgatherv(c, send, bytes, recv, std::vector<size_t>(c->size, bytes));
}

// ---- groups ----------------------------------------------------------------------------------------

static inline std::string comm_format_members(const int* m, size_t n) {
    std::string s = "{";
    for (size_t i = 0; i < n; i++) s += (i ? ", " : "") + std::to_string(m[i]);
    return s + "}";
}

// The group containing this process, out of parent. Collective over the parent: every process of the
// parent calls it, each with the member list of ITS group, given as ranks of the parent; the groups
// partition the parent (a process in no group of interest — a middle stage for the embedding group
// — passes {its own rank}). The group's rank order is the list's order: rank_grid_group lists by
// the coordinate that varies, so a pipeline group's rank is the stage and a data-parallel group's
// rank the dp_rank. Release the group with comm_free.
//
// Why MPI_Comm_split: each process needs only its own list — no rank has to know the other groups,
// and one collective call builds every group at once. Its color must be equal within a group and
// differ between groups: the group's smallest member is exactly that (the groups are disjoint, so a
// rank is the smallest member of at most one), a non-negative int as MPI requires, and every member
// computes it alone. The key is the position in the list, which fixes the new rank order.
// The split cannot see a wrong partition, so the result is checked: the group must have the list's
// size, this process the list's position, and every member must have passed the same list (lists
// of one group that disagree would otherwise meet by color and silently mis-rank).
static inline void comm_split(const Comm* parent, const std::vector<int>& members, Comm* out) {
    int pos = -1;
    for (size_t i = 0; i < members.size(); i++) {
        if (members[i] < 0 || members[i] >= parent->size)
            keel_die("comm_split: member %d of %s is outside the parent of %d ranks", members[i],
                     comm_format_members(members.data(), members.size()).c_str(), parent->size);
        for (size_t j = 0; j < i; j++)
            if (members[j] == members[i]) keel_die("comm_split: rank %d listed twice in %s", members[i], comm_format_members(members.data(), members.size()).c_str());
        if (members[i] == parent->rank) pos = (int)i;
    }
    if (pos < 0) keel_die("comm_split: rank %d is not a member of the group %s it asked for", parent->rank,
                          comm_format_members(members.data(), members.size()).c_str());
    *out = *parent;  // local_rank: the GPU belongs to the process, not to the group
    out->rank = pos;
    out->size = (int)members.size();
    snprintf(out->label, sizeof out->label, "the group of ranks %s", comm_format_members(members.data(), members.size()).c_str());
#ifdef KEEL_NCCL
    out->nccl = nullptr;
#endif
#ifdef KEEL_MPI
    out->mpi_comm = MPI_COMM_NULL;
    if (!parent->mpi) return;  // one process: the checks above leave {0} as the only group, a copy of the parent
    int color = *std::min_element(members.begin(), members.end()), rank = -1, size = -1;
    {
        WatchedWait w("MPI_Comm_split", parent->label);
        MPI_CHECK(MPI_Comm_split(parent->mpi_comm, color, pos, &out->mpi_comm));
    }
    MPI_CHECK(MPI_Comm_rank(out->mpi_comm, &rank));
    MPI_CHECK(MPI_Comm_size(out->mpi_comm, &size));
    if (size != out->size || rank != out->rank)
        keel_die("comm_split: rank %d of the parent asked for %s but landed at rank %d of a group of %d: the member lists "
                 "of its group disagree (the groups must partition the parent)",
                 parent->rank, comm_format_members(members.data(), members.size()).c_str(), rank, size);
    std::vector<int> all(members.size() * (size_t)size);
    comm_allgather(out, members.data(), members.size() * sizeof(int), all.data());
    for (int r = 0; r < size; r++)
        if (memcmp(&all[(size_t)r * members.size()], members.data(), members.size() * sizeof(int)) != 0)
            keel_die("comm_split: one group, two member lists: rank %d passed %s, group rank %d passed %s", parent->rank,
                     comm_format_members(members.data(), members.size()).c_str(), r,
                     comm_format_members(&all[(size_t)r * members.size()], members.size()).c_str());
#endif
#ifdef KEEL_NCCL
    comm_nccl_create(out);
#endif
}

// Names a group's role in its label, for messages: "the group of ranks {0, 2}" becomes "the
// data-parallel group of ranks {0, 2}".
static inline void comm_name(Comm* c, const char* role) {
    std::string l = c->label;
    if (l.rfind("the group", 0) == 0) l = std::string("the ") + role + l.substr(3);
    snprintf(c->label, sizeof c->label, "%s", l.c_str());
#ifdef KEEL_NCCL
    if (c->nccl) nccl_registry_relabel(c->nccl, c->label);  // NCCL's errors name the group by its role too
#endif
}

// What ends every rank of the job at once, for the watchdog (llmc/watchdog.h): MPI_Abort over the
// world when MPI runs (the launcher then stops all processes, a stopped one included), else nothing
// (the watchdog exits this process).
#ifdef KEEL_MPI
static inline void comm_abort_world(int code) { MPI_Abort(MPI_COMM_WORLD, code); }
#endif
static inline void (*comm_abort_fn(const Comm* world))(int) {
#ifdef KEEL_MPI
    if (world->mpi) return comm_abort_world;
#endif
    (void)world;
    return nullptr;
}

// Releases a group made by comm_split (not collective in MPI's sense, but every member should call
// it; NCCL's destroy is local). The world is comm_finalize's.
static inline void comm_free(Comm* c) {
#ifdef KEEL_MPI
    if (c->mpi_comm == MPI_COMM_WORLD) keel_die("comm_free: the world communicator is released by comm_finalize");
#endif
#ifdef KEEL_NCCL
    comm_nccl_free(c);
#endif
#ifdef KEEL_MPI
    if (c->mpi_comm != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&c->mpi_comm));  // sets it to MPI_COMM_NULL
#endif
    c->rank = 0;
    c->size = 1;
    c->mpi = false;
}

// ---- host buffers ----------------------------------------------------------------------------------

static inline void comm_broadcast(const Comm* c, void* buf, size_t bytes, int root) {
#ifdef KEEL_MPI
    if (c->size > 1) {
        WatchedWait w("MPI_Bcast", c->label);
        MPI_CHECK(MPI_Bcast(buf, comm_count(bytes), MPI_BYTE, root, c->mpi_comm));
    }
#endif
}

static inline void comm_send(const Comm* c, const void* buf, size_t bytes, int peer, int tag) {
    comm_check_peer(c, peer, "comm_send");
#ifdef KEEL_MPI
    if (c->mpi) {
        WatchedWait w("MPI_Send", c->label);
        MPI_CHECK(MPI_Send(buf, comm_count(bytes), MPI_BYTE, peer, tag, c->mpi_comm));
        return;
    }
#endif
    keel_die("comm_send to rank %d: this process runs without MPI, alone", peer);
}

static inline void comm_recv(const Comm* c, void* buf, size_t bytes, int peer, int tag) {
    comm_check_peer(c, peer, "comm_recv");
#ifdef KEEL_MPI
    if (c->mpi) {
        WatchedWait w("MPI_Recv", c->label);
        MPI_CHECK(MPI_Recv(buf, comm_count(bytes), MPI_BYTE, peer, tag, c->mpi_comm, MPI_STATUS_IGNORE));
        return;
    }
#endif
    keel_die("comm_recv from rank %d: this process runs without MPI, alone", peer);
}

// sendbuf to dest and recvbuf from source as ONE operation: the 1F1B steady phase's exchange with a
// neighbour stage (llmc/parallel.h). Why not comm_send then comm_recv: in the steady phase both
// neighbours send at once (activation up, gradient down), and a blocking send larger than MPI's eager
// limit (a few KiB to 64 KiB) completes only when the peer posts its receive (rendezvous); two sends
// facing each other then wait forever. MPI_Sendrecv posts both halves together, so each side's
// receive is up while its send waits. In a group of one the only peer is oneself: a copy.
static inline void comm_sendrecv(const Comm* c, const void* sendbuf, size_t send_bytes, int dest, void* recvbuf,
                                 size_t recv_bytes, int source, int tag) {
    comm_check_peer(c, dest, "comm_sendrecv");
    comm_check_peer(c, source, "comm_sendrecv");
    if (c->size == 1) {
        if (send_bytes != recv_bytes) keel_die("comm_sendrecv with oneself: %zu bytes sent, %zu expected", send_bytes, recv_bytes);
        if (recvbuf != sendbuf) memmove(recvbuf, sendbuf, send_bytes);
        return;
    }
#ifdef KEEL_MPI
    WatchedWait w("MPI_Sendrecv", c->label);
    MPI_CHECK(MPI_Sendrecv(sendbuf, comm_count(send_bytes), MPI_BYTE, dest, tag, recvbuf, comm_count(recv_bytes), MPI_BYTE,
                           source, tag, c->mpi_comm, MPI_STATUS_IGNORE));
#endif
}

// x (n values of T, host memory) → the sum (or max) over ranks on every rank, in place: every rank's
// x gathered, then combined in rank order 0, 1, ..., N-1, so every rank holds the same bits and a
// run repeats them. For the tensor-parallel group's activations on the CPU (a few (B,T,C) buffers
// over a handful of ranks: the gathered copies are small) and the fp64 gradient checks.
enum CommOp { COMM_SUM, COMM_MAX };
template <typename T> static inline void comm_allreduce_host(const Comm* c, T* x, size_t n, CommOp op) {
    if (c->size == 1 || n == 0) return;
    std::vector<T> all(n * (size_t)c->size);
    comm_allgather(c, x, n * sizeof(T), all.data());
    for (size_t i = 0; i < n; i++) {
        T v = all[i];
        for (int r = 1; r < c->size; r++) {
            T y = all[(size_t)r * n + i];
            v = op == COMM_MAX ? (y > v ? y : v) : v + y;
        }
        x[i] = v;
    }
}

// Sum over ranks of a few doubles, added in rank order: the same bits on every rank.
static inline void comm_allreduce_sum_f64(const Comm* c, double* x, int n) { comm_allreduce_host(c, x, (size_t)n, COMM_SUM); }

static inline bool comm_any(const Comm* c, bool flag) {
    double x = flag ? 1.0 : 0.0;
    comm_allreduce_sum_f64(c, &x, 1);
    return x > 0;
}

#ifdef KEEL_MPI
// The MPI reduce-scatter on host buffers (see comm_reduce_scatter_sum_f32): every rank's slice r goes
// to rank r in one all-to-all, and the owner adds the size copies in rank order.
static inline void comm_reduce_scatter_sum_f32_host(const Comm* c, const float* buf, float* out, const std::vector<int64_t>& lo,
                                                    std::vector<float>* scratch) {
    int64_t mine = lo[c->rank + 1] - lo[c->rank];
    std::vector<int> scnt(c->size), sdsp(c->size), rcnt(c->size), rdsp(c->size);
    for (int r = 0; r < c->size; r++) {
        scnt[r] = comm_count((size_t)(lo[r + 1] - lo[r]) * sizeof(float));
        sdsp[r] = comm_count((size_t)lo[r] * sizeof(float));
        rcnt[r] = comm_count((size_t)mine * sizeof(float));
        rdsp[r] = comm_count((size_t)r * mine * sizeof(float));
    }
    scratch->resize((size_t)c->size * mine);
    WatchedWait w("MPI_Alltoallv (a reduce-scatter)", c->label);
    MPI_CHECK(MPI_Alltoallv(buf, scnt.data(), sdsp.data(), MPI_BYTE, scratch->data(), rcnt.data(), rdsp.data(), MPI_BYTE,
                            c->mpi_comm));
    const float* s = scratch->data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < mine; i++) {
        float acc = s[i];
        for (int r = 1; r < c->size; r++) acc += s[(size_t)r * mine + i];
        out[i] = acc;
    }
}
#endif

// x (n floats, host memory, every rank) → Σ_r x_r on every rank, in place: the tied word embedding's
// gradient over the embedding group on the CPU backend. A reduce-scatter in rank order, then an
// all-gather, so every rank holds the same bits, a run repeats them, and the memory beyond x is one
// shard per rank (the embedding gradient is V×C: a gather-everything sum would hold size copies).
static inline void comm_allreduce_sum_f32(const Comm* c, float* x, size_t n) {
    if (c->size == 1 || n == 0) return;
#ifdef KEEL_MPI
    std::vector<int64_t> lo(c->size + 1);
    for (int r = 0; r <= c->size; r++) lo[r] = (int64_t)(n * (size_t)r / (size_t)c->size);
    std::vector<float> scratch;
    comm_reduce_scatter_sum_f32_host(c, x, x + lo[c->rank], lo, &scratch);
    std::vector<size_t> counts(c->size);
    for (int r = 0; r < c->size; r++) counts[r] = (size_t)(lo[r + 1] - lo[r]) * sizeof(float);
    comm_allgatherv(c, x + lo[c->rank], counts[c->rank], x, counts);
#endif
}

// ---- the op set's buffers (device under KEEL_NCCL, host otherwise) ----------------------------------

// buf (n floats, every rank) → out = Σ_r buf_r over this rank's shard [lo[rank], lo[rank+1]),
// added in rank order. lo has size+1 entries with lo[0] = 0, lo[size] = n. out may alias
// buf + lo[rank]. scratch is resized as needed (size × shard floats).
static inline void comm_reduce_scatter_sum_f32(const Comm* c, const float* buf, float* out, const std::vector<int64_t>& lo,
                                               std::vector<float>* scratch) {
#ifdef KEEL_NCCL
    if (out != buf + lo[c->rank]) keel_die("comm_reduce_scatter_sum_f32: the CUDA build reduces in place (out = buf + lo[rank])");
    if (c->size > 1) nccl_reduce_scatter_sum_f32(c, (float*)buf, lo);
    return;
#endif
    if (c->size == 1) {
        int64_t mine = lo[1] - lo[0];
        if (out != buf + lo[0]) memmove(out, buf + lo[0], (size_t)mine * sizeof(float));
        return;
    }
#ifdef KEEL_MPI
    comm_reduce_scatter_sum_f32_host(c, buf, out, lo, scratch);
#endif
}

// The reduce-scatter of comm_reduce_scatter_sum_f32 restricted to ranges [a, b) of buf (in place, out
// = buf + lo[rank]: each range's part of this rank's shard receives the sum over ranks, in rank order
// on MPI, so any cut of the buffer into ranges gives the bits of the whole-buffer call). For the
// gradient buckets (llmc/optimizer.h): under KEEL_NCCL it is issued on the communication stream
// after everything issued so far on keel's stream, and returns at once; comm_reductions_wait orders
// keel's stream after it. On MPI and alone it is done when it returns.
static inline void comm_reduce_scatter_ranges(const Comm* c, float* buf, const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                              const std::vector<int64_t>& lo, std::vector<float>* scratch) {
    if (c->size == 1) return;
#if defined(KEEL_NCCL)
    nccl_reduce_ranges_f32(c, buf, ranges, lo);
#elif defined(KEEL_MPI)
    for (const auto& rg : ranges) {
        std::vector<int64_t> sub(c->size + 1);  // the shards' boundaries within the range
        for (int r = 0; r <= c->size; r++) sub[r] = std::min(std::max(lo[r], rg.first), rg.second) - rg.first;
        comm_reduce_scatter_sum_f32_host(c, buf + rg.first, buf + rg.first + sub[c->rank], sub, scratch);
    }
#endif
}
// Keel's stream waits (on the GPU) for the reductions comm_reduce_scatter_ranges issued.
static inline void comm_reductions_wait(const Comm* c) {
#ifdef KEEL_NCCL
    if (c->size > 1) keel_stream_wait(keel_stream(), keel_comm_stream());
#endif
}
// Every rank's shard [lo[r], lo[r+1]) of buf (values of T: fp32 gradients or master weights, the
// bf16/fp16 compute copy), gathered in place on every rank.
template <typename T> static inline void comm_allgather_shards(const Comm* c, T* buf, const std::vector<int64_t>& lo) {
    if (c->size == 1) return;
#ifdef KEEL_NCCL
    nccl_allgather_shards(c, buf, lo);
    return;
#endif
    std::vector<size_t> counts(c->size);
    for (int r = 0; r < c->size; r++) counts[r] = (size_t)(lo[r + 1] - lo[r]) * sizeof(T);
    comm_allgatherv(c, buf + lo[c->rank], counts[c->rank], buf, counts);
}

#ifdef KEEL_NCCL
template <typename T> static inline void comm_allreduce_device(const Comm* c, T* buf, size_t n, CommOp op);
static inline void comm_send_device(const Comm* c, const void* buf, size_t bytes, int peer);
static inline void comm_recv_device(const Comm* c, void* buf, size_t bytes, int peer);
static inline void comm_sendrecv_device(const Comm* c, const void* sendbuf, size_t send_bytes, int dest, void* recvbuf,
                                        size_t recv_bytes, int source);
static inline void comm_allreduce_sum_f32_device(const Comm* c, float* buf, size_t n);
#endif

// The pipeline's point-to-point and the embedding group's sum, without #ifdefs in the trainer. Under
// KEEL_NCCL the buffers are device memory and NCCL moves them — in a group of one too, where there is
// no NCCL communicator and the device functions copy or return (MPI must never see a device pointer:
// it is not CUDA-aware here). Otherwise they are host memory and MPI moves them. The tag matters to
// MPI only: NCCL matches one peer's sends to its receives in issue order, which the 1F1B schedule
// makes the same on both sides.
// Streams (KEEL_NCCL): the point-to-point runs on the communication stream, after everything issued
// on keel's stream so far (the data sent is final, the buffer received into is no longer read). A
// receive then orders keel's stream after it (later kernels read what arrived); a send does not —
// the kernels after it run while it moves — so the caller calls comm_sends_wait before anything
// overwrites a buffer it sent. On MPI every call is done when it returns.
static inline void comm_send_buf(const Comm* c, const void* buf, size_t bytes, int peer, int tag) {
#ifdef KEEL_NCCL
    comm_send_device(c, buf, bytes, peer);
#else
    comm_send(c, buf, bytes, peer, tag);
#endif
}

static inline void comm_recv_buf(const Comm* c, void* buf, size_t bytes, int peer, int tag) {
#ifdef KEEL_NCCL
    comm_recv_device(c, buf, bytes, peer);
#else
    comm_recv(c, buf, bytes, peer, tag);
#endif
}

static inline void comm_sendrecv_buf(const Comm* c, const void* sendbuf, size_t send_bytes, int dest, void* recvbuf,
                                     size_t recv_bytes, int source, int tag) {
#ifdef KEEL_NCCL
    comm_sendrecv_device(c, sendbuf, send_bytes, dest, recvbuf, recv_bytes, source);
#else
    comm_sendrecv(c, sendbuf, send_bytes, dest, recvbuf, recv_bytes, source, tag);
#endif
}

// Keel's stream waits (on the GPU) for the sends issued so far (comm_send_buf): their buffers may be
// written again after this.
static inline void comm_sends_wait(const Comm* c) {
#ifdef KEEL_NCCL
    if (c->size > 1) keel_stream_wait(keel_stream(), keel_comm_stream());
#else
    (void)c;
#endif
}

// The tensor-parallel all-reduce of the model's buffers (activations of the compute type, fp32
// statistics): device buffers and NCCL under KEEL_NCCL, else host buffers (comm_allreduce_host).
template <typename T> static inline void comm_allreduce_buf(const Comm* c, T* buf, size_t n, CommOp op) {
#ifdef KEEL_NCCL
    comm_allreduce_device(c, buf, n, op);
#else
    comm_allreduce_host(c, buf, n, op);
#endif
}

static inline void comm_allreduce_sum_f32_buf(const Comm* c, float* buf, size_t n) {
#ifdef KEEL_NCCL
    comm_allreduce_sum_f32_device(c, buf, n);
#else
    comm_allreduce_sum_f32(c, buf, n);
#endif
}

#ifdef KEEL_NCCL
// ---- NCCL backend (device buffers) ---------------------------------------------------------------
// The collectives on device buffers (gradients, parameters, activations) in the CUDA trainer; the
// small host reductions (losses, norm partials, flags) stay on MPI above. One process per GPU: the
// GPU is the process's rank among the ranks of its node (MPI's shared-memory split). Every Comm of
// size > 1 has its own NCCL communicator: its rank 0 creates the NCCL id and broadcasts it over the
// Comm's MPI communicator. Every collective is issued on keel's stream (cuda/stream.h), ordered with
// the kernels before and after it like one more kernel; the gradient buckets' reductions
// (comm_reduce_scatter_ranges) and the pipeline's point-to-point run on the communication stream,
// ordered by stream waits (see those). The host does not wait for any of them: the step's
// only host waits are the reads of values (losses, norms, flags, checksums). An error NCCL raises
// on the GPU surfaces at the next of those waits, not at its call: they poll every communicator's
// asynchronous error while they wait (llmc/cuda/common.cuh, llmc/watchdog.h), and the job's end by
// the watchdog or by such an error aborts every communicator first (nccl_abort_all).
// Reduce-scatter of unequal shards is a group of ncclReduce calls, one per owner (NCCL's own
// ReduceScatter needs equal counts). NCCL chooses its reduction order (ring/tree) from the group's
// topology: fixed for a fixed layout and machine, so runs repeat bit for bit, and every rank ends
// with the same bits (each element is reduced once and then copied); it is not the MPI backend's
// rank order, so CPU and GPU data-parallel sums differ in the last bits.
#define NCCL_CHECK(call)                                                                              \
    do {                                                                                              \
        ncclResult_t nccl_status_ = (call);                                                           \
        if (nccl_status_ != ncclSuccess)                                                              \
            keel_die("NCCL call %s failed at %s:%d: %s", #call, __FILE__, __LINE__, ncclGetErrorString(nccl_status_)); \
    } while (0)

// ---- NCCL's asynchronous errors and abort (llmc/watchdog.h) ----
// Every NCCL communicator of the process, with its group's label, for the two hooks the watchdog
// and the host's waits on the GPU call: which communicators report an asynchronous error, and the
// abort of all of them before the job ends. A mutex, because the watchdog thread reads the list
// while the training thread may still build or free groups; ncclCommGetAsyncError and
// ncclCommAbort may be called from any thread (NCCL's documentation: the abort is how another
// thread ends a communicator whose operations hang).
struct NcclRegistered {
    ncclComm_t nccl;
    char label[96];
};
static inline std::mutex& nccl_registry_mutex() {
    static std::mutex m;
    return m;
}
static inline std::vector<NcclRegistered>& nccl_registry() {
    static std::vector<NcclRegistered> r;
    return r;
}
static inline void nccl_registry_add(ncclComm_t nccl, const char* label) {
    std::lock_guard<std::mutex> lock(nccl_registry_mutex());
    nccl_registry().push_back(NcclRegistered{nccl, {0}});
    snprintf(nccl_registry().back().label, sizeof nccl_registry().back().label, "%s", label);
}
static inline void nccl_registry_relabel(ncclComm_t nccl, const char* label) {
    std::lock_guard<std::mutex> lock(nccl_registry_mutex());
    for (NcclRegistered& e : nccl_registry())
        if (e.nccl == nccl) snprintf(e.label, sizeof e.label, "%s", label);
}
static inline void nccl_registry_remove(ncclComm_t nccl) {
    std::lock_guard<std::mutex> lock(nccl_registry_mutex());
    std::vector<NcclRegistered>& r = nccl_registry();
    for (size_t i = 0; i < r.size(); i++)
        if (r[i].nccl == nccl) r.erase(r.begin() + (long)i--);
}
// The watchdog's comm_errors hook: one text naming every communicator whose asynchronous error is
// set (its group and ncclGetErrorString), and their number (0: none; ncclInProgress is not an error).
static inline int nccl_async_errors(char* out, size_t n) {
    std::lock_guard<std::mutex> lock(nccl_registry_mutex());
    std::string text;
    int count = 0;
    for (const NcclRegistered& e : nccl_registry()) {
        ncclResult_t state = ncclSuccess, rc = ncclCommGetAsyncError(e.nccl, &state);
        if (rc != ncclSuccess) state = rc;  // the query itself failed: the communicator is not usable
        if (state == ncclSuccess || state == ncclInProgress) continue;
        text += count++ ? "; and on " : "NCCL reported an asynchronous error on ";
        text += std::string(e.label) + ": " + ncclGetErrorString(state);
    }
    snprintf(out, n, "%s", text.c_str());
    return count;
}
// The watchdog's comm_abort hook: every communicator aborted (its kernels stopped, its resources
// freed) and forgotten, so nothing calls NCCL on it again.
static inline void nccl_abort_all() {
    std::lock_guard<std::mutex> lock(nccl_registry_mutex());
    for (const NcclRegistered& e : nccl_registry()) ncclCommAbort(e.nccl);
    nccl_registry().clear();
}

static inline void comm_nccl_init(Comm* c) {
    c->local_rank = 0;
    c->nccl = nullptr;
    if (c->size == 1) return;
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(c->mpi_comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &c->local_rank));
    MPI_CHECK(MPI_Comm_free(&node));
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
        keel_die("rank %d: no CUDA device visible", c->rank);
    if (c->local_rank >= devices)
        keel_die_code(KEEL_EXIT_USAGE, "start one process per GPU (mpirun -np <GPUs> / srun --ntasks-per-node=<GPUs>)",
                      "rank %d is process %d on its node, which has %d GPU(s)", c->rank, c->local_rank, devices);
    if (cudaSetDevice(c->local_rank) != cudaSuccess) keel_die("rank %d: cudaSetDevice(%d) failed", c->rank, c->local_rank);
    comm_nccl_create(c);
    watchdog_set_comms(c->rank, comm_abort_world, nccl_async_errors, nccl_abort_all);  // from the first NCCL call on
}

// The NCCL communicator of c (the world or a group), collective over c; the device is already set.
static inline void comm_nccl_create(Comm* c) {
    c->nccl = nullptr;
    if (c->size == 1) return;  // no one to talk to: the device functions copy or return
    ncclUniqueId id;
    if (c->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    comm_broadcast(c, &id, sizeof id, 0);
#ifdef KEEL_CUDA_EMULATION
    // The emulated NCCL runs over MPI and cannot reach the group from the id's bytes, as real NCCL
    // does from the root address inside it: it is handed the group's MPI communicator (test/cuda_emu/nccl.h).
    NCCL_CHECK(emu_nccl_comm_init_rank(&c->nccl, c->size, id, c->rank, c->mpi_comm));
#else
    NCCL_CHECK(ncclCommInitRank(&c->nccl, c->size, id, c->rank));
#endif
    nccl_registry_add(c->nccl, c->label);
}

static inline void comm_nccl_free(Comm* c) {
    if (c->nccl) {
        nccl_registry_remove(c->nccl);
        ncclCommDestroy(c->nccl);
    }
    c->nccl = nullptr;
}


static inline void nccl_reduce_scatter_sum_f32(const Comm* c, float* buf, const std::vector<int64_t>& lo) {
    NCCL_CHECK(ncclGroupStart());
    for (size_t r = 0; r + 1 < lo.size(); r++)
        NCCL_CHECK(ncclReduce(buf + lo[r], buf + lo[r], (size_t)(lo[r + 1] - lo[r]), ncclFloat, ncclSum, (int)r, c->nccl, keel_stream()));
    NCCL_CHECK(ncclGroupEnd());
}

// Each range's pieces within each rank's shard reduced to that rank, one group on the communication
// stream once keel's stream has reached this point (the bucket's gradients are final).
static inline void nccl_reduce_ranges_f32(const Comm* c, float* buf, const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                          const std::vector<int64_t>& lo) {
    keel_stream_wait(keel_comm_stream(), keel_stream());
    NCCL_CHECK(ncclGroupStart());
    for (const auto& rg : ranges)
        for (size_t r = 0; r + 1 < lo.size(); r++) {
            int64_t a = std::max(lo[r], rg.first), b = std::min(lo[r + 1], rg.second);
            if (a < b) NCCL_CHECK(ncclReduce(buf + a, buf + a, (size_t)(b - a), ncclFloat, ncclSum, (int)r, c->nccl, keel_comm_stream()));
        }
    NCCL_CHECK(ncclGroupEnd());
}
template <typename T> static inline ncclDataType_t nccl_type_of();
template <typename T> static inline void nccl_allgather_shards(const Comm* c, T* buf, const std::vector<int64_t>& lo) {
    NCCL_CHECK(ncclGroupStart());
    for (size_t r = 0; r + 1 < lo.size(); r++)
        NCCL_CHECK(ncclBroadcast(buf + lo[r], buf + lo[r], (size_t)(lo[r + 1] - lo[r]), nccl_type_of<T>(), (int)r, c->nccl, keel_stream()));
    NCCL_CHECK(ncclGroupEnd());
}

// A lone send (or receive) to a peer of c; the peer posts the matching receive (send) in the same
// order. NCCL has no tags. A group of one has no peer: a lone send to oneself could never complete.
static inline void comm_send_device(const Comm* c, const void* buf, size_t bytes, int peer) {
    comm_check_peer(c, peer, "comm_send_device");
    if (c->size == 1) keel_die("comm_send_device to rank %d in a group of one: a lone send to oneself cannot complete", peer);
    keel_stream_wait(keel_comm_stream(), keel_stream());  // (the data is final; see comm_send_buf: no wait back)
    NCCL_CHECK(ncclSend(buf, bytes, ncclUint8, peer, c->nccl, keel_comm_stream()));
}

static inline void comm_recv_device(const Comm* c, void* buf, size_t bytes, int peer) {
    comm_check_peer(c, peer, "comm_recv_device");
    if (c->size == 1) keel_die("comm_recv_device from rank %d in a group of one: a lone receive from oneself cannot complete", peer);
    keel_stream_wait(keel_comm_stream(), keel_stream());  // the buffer is no longer read
    NCCL_CHECK(ncclRecv(buf, bytes, ncclUint8, peer, c->nccl, keel_comm_stream()));
    keel_stream_wait(keel_stream(), keel_comm_stream());  // later kernels read what arrives
}

// The 1F1B exchange (see comm_sendrecv) on device buffers: the send and the receive in one NCCL group,
// so that NCCL progresses both together, as MPI_Sendrecv does.
static inline void comm_sendrecv_device(const Comm* c, const void* sendbuf, size_t send_bytes, int dest, void* recvbuf,
                                        size_t recv_bytes, int source) {
    comm_check_peer(c, dest, "comm_sendrecv_device");
    comm_check_peer(c, source, "comm_sendrecv_device");
    if (c->size == 1) {
        if (send_bytes != recv_bytes) keel_die("comm_sendrecv_device with oneself: %zu bytes sent, %zu expected", send_bytes, recv_bytes);
        if (recvbuf != sendbuf && cudaMemcpyAsync(recvbuf, sendbuf, send_bytes, cudaMemcpyDeviceToDevice, keel_stream()) != cudaSuccess)
            keel_die("rank %d: the pipeline exchange with itself failed on the GPU", c->rank);
        return;
    }
    keel_stream_wait(keel_comm_stream(), keel_stream());
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclSend(sendbuf, send_bytes, ncclUint8, dest, c->nccl, keel_comm_stream()));
    NCCL_CHECK(ncclRecv(recvbuf, recv_bytes, ncclUint8, source, c->nccl, keel_comm_stream()));
    NCCL_CHECK(ncclGroupEnd());
    keel_stream_wait(keel_stream(), keel_comm_stream());  // (the receive's data; the send is then done too)
}

// In place: buf (n values of T, device) → the sum or max over ranks on every rank (NCCL's order).
template <typename T> static inline ncclDataType_t nccl_type_of() {
    if constexpr (std::is_same<T, float>::value) return ncclFloat;
    else if constexpr (std::is_same<T, double>::value) return ncclDouble;
    else if constexpr (std::is_same<T, __nv_bfloat16>::value) return ncclBfloat16;
    else return ncclHalf;
}
template <typename T> static inline void comm_allreduce_device(const Comm* c, T* buf, size_t n, CommOp op) {
    if (c->size == 1 || n == 0) return;
    NCCL_CHECK(ncclAllReduce(buf, buf, n, nccl_type_of<T>(), op == COMM_MAX ? ncclMax : ncclSum, c->nccl, keel_stream()));
}

// In place: buf (n floats, device) → Σ_r buf_r on every rank, in NCCL's order (see above). Over the
// embedding group of two ranks the order cannot matter: a + b = b + a exactly.
static inline void comm_allreduce_sum_f32_device(const Comm* c, float* buf, size_t n) {
    if (c->size == 1 || n == 0) return;
    NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, c->nccl, keel_stream()));
}
#endif
