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
        fprintf(stderr, "hint: restart from the last checkpoint (--load); the other ranks' logs say which one stopped answering\n");
        fflush(stderr);
        fflush(stdout);
        if (w.abort_job) w.abort_job(KEEL_EXIT_RUNTIME);
        _exit(KEEL_EXIT_RUNTIME);
    }
}

// Starts the watchdog (timeout in minutes; 0 or less: off). Call once, after the communicator is up.
static inline void watchdog_start(double timeout_minutes, int rank, void (*abort_job)(int)) {
    Watchdog& w = watchdog();
    if (timeout_minutes <= 0 || w.running.load()) return;
    w.timeout_s = timeout_minutes * 60;
    w.rank = rank;
    w.abort_job = abort_job;
    w.running.store(true);
    std::thread(watchdog_loop).detach();
}

// Stops checking (at the end of a run: the thread sleeps out its tick and returns).
static inline void watchdog_stop() { watchdog().running.store(false); }
