// nccl.h (emulation) — the NCCL calls of llmc/comm.h's NCCL backend, carried out over MPI on the
// emulated device memory, so the emulated CUDA trainer runs data and pipeline parallel under mpirun
// through the very code path the GPU build uses. Sums use MPI_Reduce's order (like NCCL, not the MPI
// backend's rank order). MPI works on host copies of the
// buffers (see "stream order" below), so device memory is never open while MPI waits for a peer.
//
// Communicators. Real NCCL builds a communicator from the unique id alone: the id carries the root's
// socket address and ncclCommInitRank connects the members over the network. The emulation has no
// network of its own, only MPI, and an MPI communicator cannot travel as bytes in an id (handles are
// process-local). So it is handed the group's MPI communicator, explicitly, through the one
// emulation-only entry point emu_nccl_comm_init_rank(comm, nranks, id, rank, mpi_comm); llmc/comm.h
// calls it instead of ncclCommInitRank under KEEL_CUDA_EMULATION, at the one place it holds both the
// id and the group. No global "current communicator": the argument is the whole story. The shim
//   - duplicates the communicator (MPI_Comm_dup), so the NCCL traffic has a matching context of its
//     own and can never be confused with host MPI messages keel sends over the same group — as real
//     NCCL's transport is separate from MPI's;
//   - checks that nranks/rank are the communicator's, and that every member holds the root's id
//     (ids are unique per ncclGetUniqueId call). An id broadcast over the wrong ranks is a bug that
//     real NCCL turns into a hang; here it fails at once.
// The plain ncclCommInitRank refuses: guessing MPI_COMM_WORLD would hide exactly the bug the group
// tests must catch (a group's collective run over the world).
//
// Groups. ncclGroupStart/End nest (a depth counter, per thread as in NCCL). Collectives run as they
// are issued: keel's groups of collectives are issued by every rank in the same order, so running
// each at once is equivalent. Sends and receives are queued and run at the outermost ncclGroupEnd
// as nonblocking MPI, all posted, then all waited: NCCL progresses a group's point-to-point ops
// together, and running them blocking in issue order would deadlock two ranks that both send first
// (1F1B's exchange with a neighbour does exactly that). A lone send or receive is a group of one.
// A collective issued while sends/receives are queued is refused (keel never mixes them in a group,
// and running it first would reorder it).
//
// Failures (KEEL_EMU_NCCL_FAULT=RANK@CALL[:hang]). Real NCCL reports a dead peer or a broken link
// asynchronously: the call returned long ago, its kernel waits for data that never comes, and
// NCCL's own threads set the communicator's asynchronous error (ncclCommGetAsyncError). The switch
// plants that: on world rank RANK, the CALL-th NCCL operation of the process (ncclReduce,
// ncclBroadcast, ncclAllReduce, ncclSend and ncclRecv, counted from 1) moves nothing, its stream
// never finishes (a wedged stream, emu_core.h: host waits on it never return) and its communicator's
// asynchronous error becomes ncclRemoteError; every later operation on that communicator does the
// same. `:hang` plants the hang without the error (a peer stopped without closing a link: NCCL
// notices nothing). The peers' matching operations wait in MPI for the rank, as on a GPU they wait
// for a peer that is gone. ncclCommAbort prints one line naming the world rank, so a test sees that
// keel aborted its communicators before ending the job.
//
// Step profile (emu_core.h, KEEL_EMU_PROFILE): every call that passes its checks is counted under
// its collective with this rank's buffer size (count × type size); the world rank and size are
// recorded when a communicator is built, so a multi-rank run's ranks write FILE.r.
#pragma once
#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

typedef enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3, ncclInvalidArgument = 4,
               ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7 } ncclResult_t;  // NCCL's values
typedef enum { ncclUint8 = 1, ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8, ncclDouble = 8,
               ncclBfloat16 = 9 } ncclDataType_t;  // NCCL's values
typedef enum { ncclSum = 0, ncclMax = 2 } ncclRedOp_t;
struct ncclUniqueId { char internal[128]; };
struct emu_nccl_comm {
    int rank, size;
    MPI_Comm mpi;        // a duplicate of the group's MPI communicator: this communicator's own context
    uint64_t calls = 0;  // collectives issued on it (the agreement check below)
    int world_rank = -1;                      // this process in MPI_COMM_WORLD (the fault's lines)
    bool failed = false;                      // KEEL_EMU_NCCL_FAULT hit it: its operations never finish
    ncclResult_t async_error = ncclSuccess;   // what ncclCommGetAsyncError reports
};
typedef emu_nccl_comm* ncclComm_t;
#define NCCL_VERSION_CODE 0

// NCCL's own strings for the errors it reports asynchronously; the emulation's synchronous refusals
// print their reason on the line before.
inline const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case ncclSuccess: return "no error";
        case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
        default: return "emulated NCCL error (see the line above)";
    }
}
inline ncclResult_t ncclGetVersion(int* v) { *v = 0; return ncclSuccess; }

inline ncclResult_t emu_nccl_fail(ncclResult_t r, const char* msg) {
    fprintf(stderr, "NCCL emulation: %s\n", msg);
    return r;
}

// Unique per call: the creating process and a per-process count.
inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    static unsigned long long created = 0;
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "keel-emu-nccl pid %ld id %llu", (long)getpid(), created++);
    return ncclSuccess;
}

inline ncclResult_t emu_nccl_comm_init_rank(ncclComm_t* c, int nranks, ncclUniqueId id, int rank, MPI_Comm group) {
    *c = nullptr;
    int size = -1, me = -1;
    if (group == MPI_COMM_NULL || MPI_Comm_size(group, &size) != MPI_SUCCESS || MPI_Comm_rank(group, &me) != MPI_SUCCESS)
        return emu_nccl_fail(ncclInvalidArgument, "ncclCommInitRank: no valid MPI communicator for the group");
    if (size != nranks || me != rank)
        return emu_nccl_fail(ncclInvalidArgument, "ncclCommInitRank: nranks/rank are not the group communicator's size/rank");
    int world_rank = -1, world_size = 0;
    if (MPI_Comm_rank(MPI_COMM_WORLD, &world_rank) == MPI_SUCCESS && MPI_Comm_size(MPI_COMM_WORLD, &world_size) == MPI_SUCCESS)
        emu::profile_mpi_world(world_rank, world_size);
    MPI_Comm dup;
    if (MPI_Comm_dup(group, &dup) != MPI_SUCCESS) return emu_nccl_fail(ncclSystemError, "MPI_Comm_dup failed");
    ncclUniqueId root = id;
    if (MPI_Bcast(&root, (int)sizeof root, MPI_BYTE, 0, dup) != MPI_SUCCESS) return emu_nccl_fail(ncclSystemError, "MPI_Bcast failed");
    int mine_ok = memcmp(&root, &id, sizeof id) == 0, all_ok = 0;
    if (MPI_Allreduce(&mine_ok, &all_ok, 1, MPI_INT, MPI_MIN, dup) != MPI_SUCCESS) return emu_nccl_fail(ncclSystemError, "MPI_Allreduce failed");
    if (!all_ok) {
        MPI_Comm_free(&dup);
        return emu_nccl_fail(ncclInvalidUsage, "ncclCommInitRank: the members of one communicator hold different unique ids "
                                               "(the id was not broadcast over exactly this group)");
    }
    *c = new emu_nccl_comm{rank, nranks, dup, 0};
    (*c)->world_rank = world_rank;
    return ncclSuccess;
}
inline ncclResult_t ncclCommInitRank(ncclComm_t* c, int, ncclUniqueId, int) {
    *c = nullptr;
    return emu_nccl_fail(ncclInvalidUsage, "ncclCommInitRank needs the group's MPI communicator under the emulation: "
                                           "call emu_nccl_comm_init_rank (llmc/comm.h does)");
}
inline ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (c) MPI_Comm_free(&c->mpi);
    delete c;
    return ncclSuccess;
}

// ---- the planted failure (KEEL_EMU_NCCL_FAULT; see the contract) ------------------------------------
struct emu_nccl_fault_spec {
    int rank = -1;                 // the world rank it hits (-1: none)
    unsigned long long call = 0;   // the process's NCCL operation it hits, from 1
    bool hang = false;             // no asynchronous error, only the hang
};
inline const emu_nccl_fault_spec& emu_nccl_fault() {
    static const emu_nccl_fault_spec spec = [] {
        emu_nccl_fault_spec f;
        const char* e = getenv("KEEL_EMU_NCCL_FAULT");
        if (!e || !*e) return f;
        int used = 0;
        if (sscanf(e, "%d@%llu%n", &f.rank, &f.call, &used) != 2 || f.rank < 0 || f.call < 1 ||
            (e[used] && strcmp(e + used, ":hang") != 0 && strcmp(e + used, ":error") != 0))
            emu::die("KEEL_EMU_NCCL_FAULT=%s: expected RANK@CALL[:hang|:error] (a world rank, an operation from 1)", e);
        f.hang = strcmp(e + used, ":hang") == 0;
        return f;
    }();
    return spec;
}
// Whether this collective is the planted failure: the process's CALL-th collective, on RANK.
inline bool emu_nccl_fault_here(ncclComm_t c) {
    static unsigned long long collectives = 0;  // the process's collectives so far
    const emu_nccl_fault_spec& f = emu_nccl_fault();
    return f.rank == c->world_rank && ++collectives == f.call;
}
// Called first by every operation: a communicator hit by the failure does nothing any more, and the
// operation's stream never finishes.
inline bool emu_nccl_failed(ncclComm_t c, cudaStream_t stream) {
    if (c->failed) emu::stream_wedge(stream);
    return c->failed;
}
// The failure lands (emu_nccl_agree tells every member at once, so none waits for it in MPI):
// every member's communicator is failed and the operation's stream wedged; the planted rank's
// communicator reports the asynchronous error (not under :hang; the others' NCCL has noticed
// nothing, their kernels only wait).
inline void emu_nccl_fail_here(ncclComm_t c, cudaStream_t stream, bool planted, const char* op) {
    c->failed = true;
    emu::stream_wedge(stream);
    if (!planted) return;
    bool hang = emu_nccl_fault().hang;
    if (!hang) c->async_error = ncclRemoteError;
    fprintf(stderr, "NCCL emulation: KEEL_EMU_NCCL_FAULT: world rank %d's collective %llu (%s) never finishes%s%s\n", c->world_rank,
            emu_nccl_fault().call, op, hang ? " (no error reported)" : "; its communicator's asynchronous error: ",
            hang ? "" : ncclGetErrorString(c->async_error));
}
inline ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* error) {
    if (!c || !error) return ncclInvalidArgument;
    *error = c->async_error;
    return ncclSuccess;
}
// The abort another thread may call while this communicator's operations hang: it says so and frees
// nothing (the job ends next; a thread may still be inside MPI on the communicator).
inline ncclResult_t ncclCommAbort(ncclComm_t c) {
    if (!c) return ncclSuccess;
    fprintf(stderr, "NCCL emulation: ncclCommAbort: world rank %d aborts its communicator of %d ranks%s\n", c->world_rank, c->size,
            c->failed ? " (the failed one)" : "");
    return ncclSuccess;
}

inline MPI_Datatype emu_nccl_type(ncclDataType_t t) { return t == ncclFloat ? MPI_FLOAT : MPI_BYTE; }
inline size_t emu_nccl_size(ncclDataType_t t);  // bytes per element (below)
// The MPI count of `count` elements of t moved as emu_nccl_type(t): floats, or bytes for every other type.
inline int emu_nccl_mpi_count(size_t count, ncclDataType_t t) { return (int)(t == ncclFloat ? count : count * emu_nccl_size(t)); }
inline bool emu_nccl_device(const void* p) {
    if (emu::is_device_ptr(p)) return true;
    fprintf(stderr, "NCCL emulation: a host pointer handed to NCCL (NCCL takes device buffers)\n");
    return false;
}
inline bool emu_nccl_count(size_t count) {
    if (count <= (size_t)INT_MAX) return true;
    fprintf(stderr, "NCCL emulation: a count of %zu exceeds MPI's int\n", count);
    return false;
}

// ---- agreement between ranks -------------------------------------------------------------------------
// Real NCCL hangs, or corrupts memory, when the ranks of a communicator issue different collectives,
// counts, types or roots in the same place of their sequence. The emulation compares each
// collective's signature across the communicator before it runs and refuses a mismatch, naming both.
struct emu_nccl_sig {
    uint64_t seq, count;
    int32_t kind, type, op, root;
    int32_t fault, pad;  // the planted failure hits this collective on that member (not compared)
};
inline void emu_nccl_describe(char* out, size_t n, const emu_nccl_sig& g) {
    snprintf(out, n, "%s of %llu elements of NCCL type %d (op %d, root %d)", emu::profile_collective_names[g.kind], (unsigned long long)g.count,
             g.type, g.op, g.root);
}
// Also where the planted failure lands on every member (emu_nccl_fail_here): then c->failed is set
// and the caller moves nothing.
inline ncclResult_t emu_nccl_agree(ncclComm_t c, emu::ProfileCollective kind, size_t count, ncclDataType_t t, int op, int root,
                                   cudaStream_t stream) {
    emu_nccl_sig me = {c->calls++, count, kind, t, op, root, emu_nccl_fault_here(c) ? 1 : 0, 0};
    std::vector<emu_nccl_sig> all(c->size);
    if (MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all.data(), (int)sizeof me, MPI_BYTE, c->mpi) != MPI_SUCCESS) return ncclSystemError;
    for (int r = 0; r < c->size; r++) {
        const emu_nccl_sig& o = all[r];
        if (o.count == me.count && o.kind == me.kind && o.type == me.type && o.op == me.op && o.root == me.root) continue;
        char mine[160], theirs[160];
        emu_nccl_describe(mine, sizeof mine, me);
        emu_nccl_describe(theirs, sizeof theirs, o);
        fprintf(stderr, "NCCL emulation: collective #%llu of the communicator differs between ranks: rank %d issues %s, rank %d %s\n",
                (unsigned long long)me.seq, c->rank, mine, r, theirs);
        return ncclInvalidUsage;
    }
    bool any = false;
    for (int r = 0; r < c->size; r++) any = any || all[r].fault;
    if (any) emu_nccl_fail_here(c, stream, me.fault != 0, emu::profile_collective_names[kind]);
    return ncclSuccess;
}

// ---- stream order (KEEL_EMU_STREAMS, emu_core.h) ------------------------------------------------------
// An NCCL call reads its buffer when issued, after its stream's earlier work has run, into a staged
// host copy, communicates over MPI there, and writes the result back when its place in the stream
// comes: with the streams run apart, a kernel on another stream that reads the result without
// waiting for the call's stream reads the old bytes. (KEEL_EMU_STREAMS=sync: all of it at once.)
inline std::shared_ptr<std::vector<uint8_t>> emu_nccl_stage(const void* buf, size_t bytes, cudaStream_t stream) {
    emu::stream_sync(stream);
    emu::DeviceScope open;
    return std::make_shared<std::vector<uint8_t>>((const uint8_t*)buf, (const uint8_t*)buf + bytes);
}
inline void emu_nccl_commit(void* buf, std::shared_ptr<std::vector<uint8_t>> staged, cudaStream_t stream) {
    emu::stream_submit(stream, [buf, staged] { memcpy(buf, staged->data(), staged->size()); });
}

// ---- groups ----------------------------------------------------------------------------------------
struct emu_nccl_p2p { bool send; void* buf; int count; MPI_Datatype type; int peer; MPI_Comm mpi; size_t bytes; cudaStream_t stream; ncclDataType_t nccl_type; };
struct emu_nccl_group_state {
    int depth = 0;
    std::vector<emu_nccl_p2p> queued;
};
inline emu_nccl_group_state& emu_nccl_group() {
    static thread_local emu_nccl_group_state g;
    return g;
}

// Each send first tells its receive what it sends (bytes and type, tag 1); a receive that expects
// something else is refused before any data moves (on a GPU: a hang, or bytes read as another type).
inline ncclResult_t emu_nccl_p2p_agree(const std::vector<emu_nccl_p2p>& q) {
    std::vector<MPI_Request> req(q.size(), MPI_REQUEST_NULL);
    std::vector<uint64_t> mine(2 * q.size()), got(2 * q.size());
    for (size_t i = 0; i < q.size(); i++) {
        mine[2 * i] = q[i].bytes;
        mine[2 * i + 1] = (uint64_t)q[i].nccl_type;
        int rc = q[i].send ? MPI_Isend(&mine[2 * i], 2, MPI_UINT64_T, q[i].peer, 1, q[i].mpi, &req[i])
                           : MPI_Irecv(&got[2 * i], 2, MPI_UINT64_T, q[i].peer, 1, q[i].mpi, &req[i]);
        if (rc != MPI_SUCCESS) return ncclSystemError;
    }
    if (MPI_Waitall((int)req.size(), req.data(), MPI_STATUSES_IGNORE) != MPI_SUCCESS) return ncclSystemError;
    for (size_t i = 0; i < q.size(); i++)
        if (!q[i].send && (got[2 * i] != mine[2 * i] || got[2 * i + 1] != mine[2 * i + 1])) {
            fprintf(stderr, "NCCL emulation: ncclRecv of %llu bytes of NCCL type %llu from rank %d, which sends %llu bytes of type %llu\n",
                    (unsigned long long)mine[2 * i], (unsigned long long)mine[2 * i + 1], q[i].peer, (unsigned long long)got[2 * i],
                    (unsigned long long)got[2 * i + 1]);
            return ncclInvalidUsage;
        }
    return ncclSuccess;
}

inline ncclResult_t emu_nccl_run_p2p() {
    std::vector<emu_nccl_p2p>& q = emu_nccl_group().queued;
    if (ncclResult_t agreed = emu_nccl_p2p_agree(q)) {
        q.clear();
        return agreed;
    }
    std::vector<MPI_Request> req(q.size(), MPI_REQUEST_NULL);
    std::vector<std::shared_ptr<std::vector<uint8_t>>> staged(q.size());  // (stream order: see above)
    for (size_t i = 0; i < q.size(); i++) staged[i] = emu_nccl_stage(q[i].buf, q[i].bytes, q[i].stream);
    int rc = MPI_SUCCESS;
    // receives first: every send then finds its receive posted, whatever the MPI protocol
    for (size_t i = 0; i < q.size() && rc == MPI_SUCCESS; i++)
        if (!q[i].send) rc = MPI_Irecv(staged[i]->data(), q[i].count, q[i].type, q[i].peer, 0, q[i].mpi, &req[i]);
    for (size_t i = 0; i < q.size() && rc == MPI_SUCCESS; i++)
        if (q[i].send) rc = MPI_Isend(staged[i]->data(), q[i].count, q[i].type, q[i].peer, 0, q[i].mpi, &req[i]);
    if (rc == MPI_SUCCESS) rc = MPI_Waitall((int)req.size(), req.data(), MPI_STATUSES_IGNORE);
    for (size_t i = 0; i < q.size() && rc == MPI_SUCCESS; i++)
        if (!q[i].send) emu_nccl_commit(q[i].buf, staged[i], q[i].stream);
    q.clear();
    return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}

inline ncclResult_t ncclGroupStart() {
    emu_nccl_group().depth++;
    return ncclSuccess;
}
inline ncclResult_t ncclGroupEnd() {
    emu_nccl_group_state& g = emu_nccl_group();
    if (g.depth == 0) return emu_nccl_fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    return --g.depth == 0 ? emu_nccl_run_p2p() : ncclSuccess;
}

// A collective runs at once; it may not overtake queued point-to-point ops (see the contract).
inline bool emu_nccl_collective_ok() {
    if (emu_nccl_group().queued.empty()) return true;
    fprintf(stderr, "NCCL emulation: a collective in the same group as a send/recv (not supported)\n");
    return false;
}

inline ncclResult_t emu_nccl_p2p_post(bool send, const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t stream) {
    if (!emu_nccl_device(buf) || !emu_nccl_count(count * emu_nccl_size(t))) return ncclInvalidArgument;
    if (peer < 0 || peer >= c->size) return emu_nccl_fail(ncclInvalidArgument, "send/recv: the peer is outside the communicator");
    emu::profile_nccl(send ? emu::NCCL_SEND : emu::NCCL_RECV, count * emu_nccl_size(t));
    emu_nccl_group().queued.push_back({send, (void*)buf, emu_nccl_mpi_count(count, t), emu_nccl_type(t), peer, c->mpi, count * emu_nccl_size(t), stream, t});
    ncclGroupStart();  // a lone op is a group of one
    return ncclGroupEnd();
}
inline ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t stream) {
    emu::profile_stream(stream);
    if (emu_nccl_failed(c, stream)) return ncclSuccess;
    return emu_nccl_p2p_post(true, send, count, t, peer, c, stream);
}
inline ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t stream) {
    emu::profile_stream(stream);
    if (emu_nccl_failed(c, stream)) return ncclSuccess;
    return emu_nccl_p2p_post(false, recv, count, t, peer, c, stream);
}

// ---- collectives -----------------------------------------------------------------------------------
inline ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t, int root, ncclComm_t c, cudaStream_t stream) {
    emu::profile_stream(stream);
    if (emu_nccl_failed(c, stream)) return ncclSuccess;
    if (!emu_nccl_device(send) || !emu_nccl_device(recv) || send != recv) return ncclInvalidArgument;  // keel reduces in place
    if (!emu_nccl_count(count) || !emu_nccl_collective_ok()) return ncclInvalidArgument;
    if (ncclResult_t agreed = emu_nccl_agree(c, emu::NCCL_REDUCE, count, t, 0, root, stream)) return agreed;
    if (c->failed) return ncclSuccess;  // the planted failure (emu_nccl_agree)
    emu::profile_nccl(emu::NCCL_REDUCE, count * emu_nccl_size(t));
    auto staged = emu_nccl_stage(recv, count * emu_nccl_size(t), stream);
    int rc = c->rank == root ? MPI_Reduce(MPI_IN_PLACE, staged->data(), (int)count, emu_nccl_type(t), MPI_SUM, root, c->mpi)
                             : MPI_Reduce(staged->data(), nullptr, (int)count, emu_nccl_type(t), MPI_SUM, root, c->mpi);
    if (rc == MPI_SUCCESS && c->rank == root) emu_nccl_commit(recv, staged, stream);
    return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}
inline ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t stream) {
    emu::profile_stream(stream);
    if (emu_nccl_failed(c, stream)) return ncclSuccess;
    if (!emu_nccl_device(send) || !emu_nccl_device(recv) || send != recv) return ncclInvalidArgument;
    if (!emu_nccl_count(count * emu_nccl_size(t)) || !emu_nccl_collective_ok()) return ncclInvalidArgument;
    if (ncclResult_t agreed = emu_nccl_agree(c, emu::NCCL_BROADCAST, count, t, 0, root, stream)) return agreed;
    if (c->failed) return ncclSuccess;  // the planted failure (emu_nccl_agree)
    emu::profile_nccl(emu::NCCL_BROADCAST, count * emu_nccl_size(t));
    auto staged = emu_nccl_stage(recv, count * emu_nccl_size(t), stream);
    if (MPI_Bcast(staged->data(), emu_nccl_mpi_count(count, t), emu_nccl_type(t), root, c->mpi) != MPI_SUCCESS) return ncclSystemError;
    if (c->rank != root) emu_nccl_commit(recv, staged, stream);
    return ncclSuccess;
}
// Every type and op keel uses: the ranks' buffers are gathered and combined in rank order in double
// (exact for max; for a sum the order is fixed, as a fixed NCCL topology's is), then rounded once.
inline double emu_nccl_load(const void* p, size_t i, ncclDataType_t t) {
    switch (t) {
        case ncclFloat: return ((const float*)p)[i];
        case ncclDouble: return ((const double*)p)[i];
        case ncclBfloat16: return __bfloat162float(((const __nv_bfloat16*)p)[i]);
        case ncclHalf: return __half2float(((const __half*)p)[i]);
        default: return ((const uint8_t*)p)[i];
    }
}
inline void emu_nccl_store(void* p, size_t i, ncclDataType_t t, double v) {
    switch (t) {
        case ncclFloat: ((float*)p)[i] = (float)v; break;
        case ncclDouble: ((double*)p)[i] = v; break;
        case ncclBfloat16: ((__nv_bfloat16*)p)[i] = __float2bfloat16((float)v); break;
        case ncclHalf: ((__half*)p)[i] = __float2half((float)v); break;
        default: ((uint8_t*)p)[i] = (uint8_t)v; break;
    }
}
inline size_t emu_nccl_size(ncclDataType_t t) {
    return t == ncclDouble ? 8 : t == ncclFloat ? 4 : t == ncclBfloat16 || t == ncclHalf ? 2 : 1;
}
inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t stream) {
    emu::profile_stream(stream);
    if (emu_nccl_failed(c, stream)) return ncclSuccess;
    if (!emu_nccl_device(send) || !emu_nccl_device(recv) || send != recv) return ncclInvalidArgument;
    if (!emu_nccl_count(count * emu_nccl_size(t) * c->size) || !emu_nccl_collective_ok()) return ncclInvalidArgument;
    if (ncclResult_t agreed = emu_nccl_agree(c, emu::NCCL_ALLREDUCE, count, t, op, 0, stream)) return agreed;
    if (c->failed) return ncclSuccess;  // the planted failure (emu_nccl_agree)
    emu::profile_nccl(emu::NCCL_ALLREDUCE, count * emu_nccl_size(t));
    size_t bytes = count * emu_nccl_size(t);
    auto staged = emu_nccl_stage(recv, bytes, stream);
    if (t == ncclFloat && op == ncclSum) {
        if (MPI_Allreduce(MPI_IN_PLACE, staged->data(), (int)count, MPI_FLOAT, MPI_SUM, c->mpi) != MPI_SUCCESS) return ncclSystemError;
        emu_nccl_commit(recv, staged, stream);
        return ncclSuccess;
    }
    std::vector<uint8_t> all(bytes * c->size);
    if (MPI_Allgather(staged->data(), (int)bytes, MPI_BYTE, all.data(), (int)bytes, MPI_BYTE, c->mpi) != MPI_SUCCESS) return ncclSystemError;
    for (size_t i = 0; i < count; i++) {
        double v = emu_nccl_load(all.data(), i, t);
        for (int r = 1; r < c->size; r++) {
            double x = emu_nccl_load(all.data() + r * bytes, i, t);
            v = op == ncclMax ? (x > v ? x : v) : v + x;
        }
        emu_nccl_store(staged->data(), i, t, v);
    }
    emu_nccl_commit(recv, staged, stream);
    return ncclSuccess;
}
