// watchdog.h — every wait on another rank or on the GPU is bounded (--distributed-timeout-minutes).
//
// Why: in a job of hundreds of processes, the usual failure is not a crash (the launcher ends the job
// when a process dies) but a rank that stops answering: a hung GPU, a dead network link, a process
// stopped by the system. Its peers then wait inside a collective forever, burning their allocation
// while the scheduler sees a healthy job. So every blocking call that waits on other ranks (MPI
// collectives, sends, receives) or on the device (the host's stream and event waits, where a wedged
// kernel or a stuck NCCL operation shows) is announced here first; a watchdog thread checks the
// announcement and, once one wait has lasted longer than the timeout, prints one line naming this
// rank, the operation, the peer group and the iteration, and ends the whole job (MPI_Abort), so the
// scheduler can restart it from the last checkpoint. The rank that hangs cannot report itself (it is
// stopped, or blocked in the same way); its peers do, within the timeout.
//
// Megatron's --distributed-timeout-minutes (default 10) sets the same bound on its process groups.
// keel also accepts fractions of a minute (tests use a few seconds). 0 turns the watchdog off.
//
// NCCL. A collective on the GPU does not fail where it was called: NCCL notices a dead peer or a
// broken link later, on its own threads, records it as the communicator's asynchronous error, and
// the kernel waiting for the peer may never finish. So the communication layer (llmc/comm.h) hands
// the watchdog two functions over its communicators: one that names those in error (ncclCommGetAsyncError,
// ncclGetErrorString, the group's label), one that aborts them all (ncclCommAbort, which also stops
// their kernels). The host's waits on the GPU poll the first while they wait (watchdog_check_comm_errors),
// so an asynchronous error ends the job at once, naming this rank, the group and the error; the
// watchdog's timeout polls it too and names what it finds. Every end of the job by the watchdog
// aborts the communicators before MPI_Abort: a rank whose kernels still wait on a dead peer would
// otherwise keep its GPU busy while the launcher tears the job down.
//
// Cost: two relaxed atomic stores per wait on the calling thread, and a thread that wakes a few
// times per timeout. The state is process-global on purpose: it describes what this process's one
// training thread is waiting for, and the watchdog thread reads nothing else.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "llmc/common.h"

struct Watchdog {
    std::atomic<int64_t> wait_start_ns{0};   // 0: not waiting; else when the current wait began
    std::atomic<const char*> op{""};         // what is awaited (static strings only)
    std::atomic<const char*> group{""};      // the peer group's label (lives as long as its Comm)
    std::atomic<int64_t> iteration{0};       // the iteration being run (0: set-up)
    std::atomic<bool> running{false};
    double timeout_s = 0;
    int rank = 0;
    void (*abort_job)(int code) = nullptr;   // ends every rank (MPI_Abort); nullptr: this process only
    // the communication library's asynchronous errors (nullptr: none to poll; llmc/comm.h under NCCL)
    std::atomic<int (*)(char* out, size_t n)> comm_errors{nullptr};  // describes the communicators in error; returns how many
    std::atomic<void (*)()> comm_abort{nullptr};                     // aborts every communicator
};

static inline Watchdog& watchdog() {
    static Watchdog w;
    return w;
}

static inline int64_t watchdog_now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A scope around one blocking call: `WatchedWait w("MPI_Allgatherv", c->label);`. Nested scopes
// keep the outer one's start (the outer wait is the one that can hang).
struct WatchedWait {
    bool outer;
    WatchedWait(const char* what, const char* group_label) {
        Watchdog& w = watchdog();
        outer = w.wait_start_ns.load(std::memory_order_relaxed) == 0;
        if (!outer) return;
        w.op.store(what, std::memory_order_relaxed);
        w.group.store(group_label ? group_label : "", std::memory_order_relaxed);
        w.wait_start_ns.store(watchdog_now_ns(), std::memory_order_release);
    }
    ~WatchedWait() {
        if (outer) watchdog().wait_start_ns.store(0, std::memory_order_release);
    }
    WatchedWait(const WatchedWait&) = delete;
    WatchedWait& operator=(const WatchedWait&) = delete;
};

static inline void watchdog_set_iteration(int64_t it) { watchdog().iteration.store(it, std::memory_order_relaxed); }

// Whether the host's waits have communicators to poll (else they wait the plain way).
static inline bool watchdog_polls_comm_errors() { return watchdog().comm_errors.load(std::memory_order_acquire) != nullptr; }

// Ends the whole job from the watchdog or a wait that found an error: the communicators aborted
// first (their kernels stop), then every rank (MPI_Abort), then this process.
[[noreturn]] static inline void watchdog_end_job() {
    Watchdog& w = watchdog();
    fflush(stderr);
    fflush(stdout);
    if (void (*abort_comms)() = w.comm_abort.load(std::memory_order_acquire)) abort_comms();
    if (w.abort_job) w.abort_job(KEEL_EXIT_RUNTIME);
    _exit(KEEL_EXIT_RUNTIME);
}

// Called by the host's waits on the GPU while they wait: an asynchronous error of any communicator
// ends the job now, with one line naming this rank, the communicator's group and the error, rather
// than after --distributed-timeout-minutes (or never, with the watchdog off) while a kernel waits
// for a peer that is gone. `what`: the wait, for the line.
static inline void watchdog_check_comm_errors(const char* what) {
    Watchdog& w = watchdog();
    int (*errors)(char*, size_t) = w.comm_errors.load(std::memory_order_acquire);
    char msg[768];
    if (!errors || errors(msg, sizeof msg) == 0) return;
    fprintf(stderr, "error: rank %d: %s (at iteration %lld, %s): the job is ended\n", w.rank, msg, (long long)w.iteration.load(), what);
    fprintf(stderr, "hint: restart from the last checkpoint (--load); NCCL_DEBUG=WARN prints NCCL's own account of the failure\n");
    watchdog_end_job();
}

// At a timeout: what the communicators say (an asynchronous error tells why the wait hangs; none
// points at a peer that stopped without breaking a link), one line.
static inline void watchdog_report_comms(Watchdog* w) {
    int (*errors)(char*, size_t) = w->comm_errors.load(std::memory_order_acquire);
    if (!errors) return;
    char msg[768];
    if (errors(msg, sizeof msg) > 0) fprintf(stderr, "error: rank %d: %s\n", w->rank, msg);
    else fprintf(stderr, "note: rank %d: NCCL reports no asynchronous error on this rank's communicators; they are aborted with the job\n", w->rank);
}

// The watchdog thread: wakes every timeout/20 (between 50 ms and 5 s), and ends the job when the
// current wait is older than the timeout. The op and group are read between two reads of the start
// time, so a message never pairs one wait's name with another's age.
static inline void watchdog_loop() {
    Watchdog& w = watchdog();
    double tick = std::min(5.0, std::max(0.05, w.timeout_s / 20));
    while (w.running.load()) {
        std::this_thread::sleep_for(std::chrono::duration<double>(tick));
        int64_t start = w.wait_start_ns.load(std::memory_order_acquire);
        if (start == 0) continue;
        const char* op = w.op.load(std::memory_order_relaxed);
        const char* group = w.group.load(std::memory_order_relaxed);
        if (w.wait_start_ns.load(std::memory_order_acquire) != start) continue;
        double waited = (watchdog_now_ns() - start) / 1e9;
        if (waited <= w.timeout_s) continue;
        fprintf(stderr, "error: rank %d: %s%s%s did not complete in %.0f s (at iteration %lld; --distributed-timeout-minutes %g): "
                "a rank it waits for (or this rank's GPU) has died or hangs, so the job is ended\n",
                w.rank, op, *group ? " on " : "", group, waited, (long long)w.iteration.load(), w.timeout_s / 60);
        watchdog_report_comms(&w);
        fprintf(stderr, "hint: restart from the last checkpoint (--load); the other ranks' logs say which one stopped answering\n");
        watchdog_end_job();
    }
}

// The communication layer's hooks (llmc/comm.h, once its NCCL world is up): this process's world
// rank, what ends the job, and the two functions over its communicators. The host's waits poll from
// then on, the watchdog running or not.
static inline void watchdog_set_comms(int rank, void (*abort_job)(int), int (*errors)(char*, size_t), void (*abort_comms)()) {
    Watchdog& w = watchdog();
    if (!w.running.load()) {
        w.rank = rank;
        w.abort_job = abort_job;
    }
    w.comm_abort.store(abort_comms, std::memory_order_release);
    w.comm_errors.store(errors, std::memory_order_release);
}

// Starts the watchdog (timeout in minutes; 0 or less: off). Call once, after the communicator is up.
// The rank and the job's end are kept either way: the waits' error checks use them.
static inline void watchdog_start(double timeout_minutes, int rank, void (*abort_job)(int)) {
    Watchdog& w = watchdog();
    if (w.running.load()) return;
    w.rank = rank;
    w.abort_job = abort_job;
    if (timeout_minutes <= 0) return;
    w.timeout_s = timeout_minutes * 60;
    w.running.store(true);
    std::thread(watchdog_loop).detach();
}

// Stops checking (at the end of a run: the thread sleeps out its tick and returns).
static inline void watchdog_stop() { watchdog().running.store(false); }
