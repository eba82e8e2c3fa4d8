// cuda/stream.h — the CUDA trainer's stream.
//
// Contract
//   keel_stream()  the stream every kernel, cuBLASLt product, copy, memset and NCCL call of the CUDA
//                  trainer is issued on (llmc/cuda/*.cuh, llmc/backend.h, llmc/comm.h's NCCL backend),
//                  in program order. Created on first use; nothing keel issues ever runs on the
//                  legacy default stream, which would wait for (and hold up) every other blocking
//                  stream of the process at each call. The stream itself is a blocking one on
//                  purpose: code outside the trainer that copies with plain cudaMemcpy (the kernel
//                  tests' helpers, the kernel lab) stays ordered with keel's work through the legacy
//                  stream's implicit synchronisation, while keel's own calls never pay for it.
//   A host that needs a result waits for this stream alone (cudaStreamSynchronize(keel_stream())),
//   at the points that read values: losses once per iteration, the gradient norm's partials, the
//   loss scaler's overflow flags, checksums. NCCL calls are stream-ordered like kernels and are not
//   followed by a host wait; a failure on the GPU surfaces at the next wait.
//   keel_comm_stream()  the second stream: the data-parallel gradient reduction of the last
//                  micro-batch runs there, bucket by bucket, while keel_stream() goes on with the
//                  backward. Ordered by events only (llmc/comm.h comm_reduce_scatter_ranges /
//                  comm_reductions_wait): a bucket's reduction waits for an event recorded on
//                  keel_stream() after the kernels that finished its gradients, and keel_stream()
//                  waits for the comm stream's last reduction before anything reads the reduced shard.
// The step profile of the emulation (test/cuda_emu, KEEL_EMU_PROFILE) counts every call that still
// uses the legacy stream (legacy_stream_ops), so a test can hold a steady-state iteration to zero.
#pragma once
#include <cuda_runtime.h>

#include "llmc/common.h"

// keel's streams, by index (0: keel_stream, 1: keel_comm_stream), each created on first use.
static inline cudaStream_t keel_stream_at(int which) {
    static cudaStream_t streams[2] = {nullptr, nullptr};
    if (!streams[which] && cudaStreamCreate(&streams[which]) != cudaSuccess)
        keel_die("cannot create the CUDA %s stream", which == 0 ? "compute" : "communication");
    return streams[which];
}
static inline cudaStream_t keel_stream() { return keel_stream_at(0); }
// The stream the ops of llmc/cuda/*.cuh issue on (MAIN_STREAM): keel_stream(), unless an OpStreamScope
// on this thread names another. The trainer never opens one; a test that runs ops on two streams at
// once does (the ops' shared scratch buffers order themselves across streams: DeviceScratch in
// cuda/common.cuh).
static inline cudaStream_t& keel_op_stream_override() {
    static thread_local cudaStream_t s = nullptr;
    return s;
}
static inline cudaStream_t keel_op_stream() {
    cudaStream_t s = keel_op_stream_override();
    return s ? s : keel_stream();
}
struct OpStreamScope {
    cudaStream_t prev;
    explicit OpStreamScope(cudaStream_t s) : prev(keel_op_stream_override()) { keel_op_stream_override() = s; }
    ~OpStreamScope() { keel_op_stream_override() = prev; }
    OpStreamScope(const OpStreamScope&) = delete;
    OpStreamScope& operator=(const OpStreamScope&) = delete;
};
static inline cudaStream_t keel_comm_stream() { return keel_stream_at(1); }
// `waiter` waits (on the GPU, not the host) for everything issued on `after` so far.
static inline void keel_stream_wait(cudaStream_t waiter, cudaStream_t after) {
    static cudaEvent_t events[2] = {nullptr, nullptr};  // one per direction (an event may be re-recorded once waited on)
    cudaEvent_t* e = &events[waiter == keel_stream() ? 0 : 1];
    if (!*e && cudaEventCreateWithFlags(e, cudaEventDisableTiming) != cudaSuccess) keel_die("cannot create a CUDA event");
    if (cudaEventRecord(*e, after) != cudaSuccess || cudaStreamWaitEvent(waiter, *e, 0) != cudaSuccess)
        keel_die("cannot order the CUDA streams (cudaEventRecord / cudaStreamWaitEvent failed)");
}
