// parallel.h — the arithmetic of 3D parallelism (docs/internals.md#parallelism), as pure functions: where a rank sits in
// the TP × PP × DP grid, which layers a pipeline stage owns, and the 1F1B schedule a stage executes.
// No MPI and no I/O here: the trainer turns the schedule into send/recv calls, and
// test/test_pipeline_schedule.cpp enumerates every (stage, P, M) and runs all stages together in a
// rendezvous simulator to prove the schedule matches its messages and cannot deadlock.
//
// Rank grid. world = TP·PP·DP with TP fastest-varying (TP peers exchange the most bytes, so they are
// consecutive ranks, i.e. on one node), then DP, then PP — Megatron's order:
//   rank = tp_rank + TP·(dp_rank + DP·pp_rank)
//
// Layer split. L layers over P stages, contiguous and balanced; when P does not divide L the EARLIER
// stages take one extra layer each (reason at pipeline_stage_layers).
//
// 1F1B (Megatron's non-interleaved schedule, "PipeDream-Flush"). Stage s of P runs M micro-batches:
//   warmup = min(P - s - 1, M) forwards;  steady = M - warmup × (1 forward, 1 backward);  cooldown = warmup backwards
// Forwards run micro-batches 0..M-1 in order, backwards 0..M-1 in order. At most min(P - s, M)
// micro-batches have run forward but not backward at once, so stage s stashes that many activations
// (stage 0 the most: the 1F1B memory bound, versus M for all-forward-then-all-backward GPipe).
// Messages: stage s > 0 receives M activations from s-1 and sends M gradients back to it; stage
// s < P-1 sends M activations to s+1 and receives M gradients from it. P = 1 communicates nothing.
//
// Why the combined ops. The trainer uses BLOCKING send/recv, and a large blocking send completes only
// when the peer posts the matching receive (rendezvous). In the steady phase stage s has just run a
// forward and wants to send that activation up to s+1, while s+1 has just run a backward and wants to
// send a gradient down to s: two plain sends facing each other deadlock. So, exactly where Megatron
// does, the two directions travel as one simultaneous pair (MPI_Sendrecv):
//   after a steady forward:  PIPE_SEND_FORWARD_RECV_BACKWARD with s+1  (activation out, gradient of the
//                            oldest in-flight micro-batch in — the one the next backward needs)
//   after a steady backward: PIPE_SEND_BACKWARD_RECV_FORWARD with s-1  (gradient out, the next
//                            forward's activation in) — except after the last steady backward, where
//                            no forward follows and it is a plain PIPE_SEND_BACKWARD.
// A half with no peer stage (s = 0 has no s-1, s = P-1 no s+1) or no micro-batch to carry is dropped:
// the pair degrades to the plain op of the remaining half, or to nothing. Both halves of a pair talk
// to the same neighbour, so on the first and last stage the pair facing the missing neighbour vanishes
// entirely; no action ever names a stage that does not exist.
#pragma once
#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdio>
#include <vector>

// ----------------------------------------------------------------------------------------------------
// Rank grid

struct RankGrid {
    int world, rank;              // this process among all
    int tp, pp, dp;               // group sizes: world = tp·pp·dp
    int tp_rank, pp_rank, dp_rank;  // this process's coordinates; pp_rank is its pipeline stage
};

enum RankGroupKind { RANK_GROUP_TP, RANK_GROUP_DP, RANK_GROUP_PP };

// Fills g from the world and the TP/PP sizes; DP is what remains. Returns false with a one-line
// reason in err (when err is not null) if the shape is impossible.
static inline bool rank_grid_init(RankGrid* g, int world, int rank, int tp, int pp, char* err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (world < 1 || tp < 1 || pp < 1) {
        if (err) snprintf(err, errlen, "world size %d, tensor-parallel size %d and pipeline-parallel size %d must all be >= 1",
                          world, tp, pp);
        return false;
    }
    if (world % (tp * pp) != 0) {
        if (err) snprintf(err, errlen, "world size %d is not divisible by tensor-parallel x pipeline-parallel = %d x %d = %d",
                          world, tp, pp, tp * pp);
        return false;
    }
    if (rank < 0 || rank >= world) {
        if (err) snprintf(err, errlen, "rank %d is outside the world of %d ranks", rank, world);
        return false;
    }
    g->world = world;
    g->rank = rank;
    g->tp = tp;
    g->pp = pp;
    g->dp = world / (tp * pp);
    g->tp_rank = rank % tp;                 // rank = tp_rank + tp·(dp_rank + dp·pp_rank), peeled from the inside
    g->dp_rank = (rank / tp) % g->dp;
    g->pp_rank = rank / (tp * g->dp);
    return true;
}

// The world rank at the given coordinates (argument order tp, pp, dp: the grid's name, not its layout).
static inline int rank_grid_rank_of(const RankGrid* g, int tp_rank, int pp_rank, int dp_rank) {
    assert(tp_rank >= 0 && tp_rank < g->tp && pp_rank >= 0 && pp_rank < g->pp && dp_rank >= 0 && dp_rank < g->dp);
    return tp_rank + g->tp * (dp_rank + g->dp * pp_rank);
}

// The members of this rank's group of the given kind: the ranks that share this rank's other two
// coordinates, ascending by the coordinate that varies (which is also ascending by world rank).
// Every rank of a group computes the same list, as a communicator split needs.
static inline std::vector<int> rank_grid_group(const RankGrid* g, RankGroupKind kind) {
    std::vector<int> members;
    int n = kind == RANK_GROUP_TP ? g->tp : kind == RANK_GROUP_DP ? g->dp : g->pp;
    for (int i = 0; i < n; i++) {
        int tp_rank = kind == RANK_GROUP_TP ? i : g->tp_rank;
        int dp_rank = kind == RANK_GROUP_DP ? i : g->dp_rank;
        int pp_rank = kind == RANK_GROUP_PP ? i : g->pp_rank;
        members.push_back(rank_grid_rank_of(g, tp_rank, pp_rank, dp_rank));
    }
    return members;
}

// The rank holding pipeline stage `stage` of this rank's model replica and tensor shard: the partner
// of every pipeline send/recv (stage = pp_rank ± 1).
static inline int rank_grid_pipeline_peer(const RankGrid* g, int stage) {
    assert(stage >= 0 && stage < g->pp);
    return rank_grid_rank_of(g, g->tp_rank, stage, g->dp_rank);
}

// ----------------------------------------------------------------------------------------------------
// Layer split

// Stage `stage` of P owns layers [first, first + count) of L. Contiguous, counts differ by at most
// one, and the L % P extra layers go to the EARLIER stages. Why earlier: the last stage also runs the
// LM head and the cross-entropy, a (C × Vp) matmul costing about 2·C·Vp flops a token against about
// 24·C² for a transformer layer — several layers' worth at GPT-2 shapes (C 768, Vp 50304: ~5 layers)
// — while the first stage's extra work, the embedding, is a gather. A pipeline runs at the pace of
// its slowest stage, so the extra layers go where the slack is. The price is memory on stage 0, which
// already stashes the most activations (min(P, M) micro-batches); a run that is memory-bound there
// rather than time-bound would want the opposite, and can choose an L divisible by P.
static inline void pipeline_stage_layers(int L, int P, int stage, int* first, int* count) {
    assert(P >= 1 && P <= L && stage >= 0 && stage < P);
    int base = L / P, extra = L % P;  // stages 0..extra-1 own base+1 layers, the rest base
    *first = stage * base + std::min(stage, extra);
    *count = base + (stage < extra ? 1 : 0);
}

// ----------------------------------------------------------------------------------------------------
// 1F1B schedule

// One action of a stage's program, executed in order. FORWARD and BACKWARD compute; the rest move one
// micro-batch's activation (forward direction, stage s → s+1) or gradient (backward, s+1 → s).
enum PipeOp {
    PIPE_RECV_FORWARD,                // activation of mb from stage - 1
    PIPE_FORWARD,                     // forward of mb through this stage's layers
    PIPE_SEND_FORWARD,                // activation of mb to stage + 1
    PIPE_RECV_BACKWARD,               // gradient of mb from stage + 1
    PIPE_BACKWARD,                    // backward of mb through this stage's layers
    PIPE_SEND_BACKWARD,               // gradient of mb to stage - 1
    PIPE_SEND_FORWARD_RECV_BACKWARD,  // with stage + 1: activation of mb out, gradient of mb2 in
    PIPE_SEND_BACKWARD_RECV_FORWARD,  // with stage - 1: gradient of mb out, activation of mb2 in
};

// mb: the micro-batch the op is about; for the combined ops mb is the one sent and mb2 the one
// received. mb2 is -1 for every other op.
struct PipeAction { PipeOp op; int mb; int mb2; };

static inline const char* pipe_op_name(PipeOp op) {
    switch (op) {
        case PIPE_RECV_FORWARD: return "recv_forward";
        case PIPE_FORWARD: return "forward";
        case PIPE_SEND_FORWARD: return "send_forward";
        case PIPE_RECV_BACKWARD: return "recv_backward";
        case PIPE_BACKWARD: return "backward";
        case PIPE_SEND_BACKWARD: return "send_backward";
        case PIPE_SEND_FORWARD_RECV_BACKWARD: return "send_forward_recv_backward";
        case PIPE_SEND_BACKWARD_RECV_FORWARD: return "send_backward_recv_forward";
    }
    return "?";
}

// The messages with one neighbour after (or before) a compute step, as the fewest blocking ops.
// A half is dropped when the neighbour does not exist or its micro-batch is -1 (nothing to carry);
// two surviving halves become the combined op, one survives as its plain op.
//   with the previous stage: gradient of send_mb out, activation of recv_mb in
static inline void pipeline_exchange_prev(std::vector<PipeAction>* a, int stage, int send_mb, int recv_mb) {
    if (stage == 0) return;  // the first stage has no previous stage: it reads tokens, returns no gradient
    if (send_mb >= 0 && recv_mb >= 0) a->push_back({PIPE_SEND_BACKWARD_RECV_FORWARD, send_mb, recv_mb});
    else if (send_mb >= 0) a->push_back({PIPE_SEND_BACKWARD, send_mb, -1});
    else if (recv_mb >= 0) a->push_back({PIPE_RECV_FORWARD, recv_mb, -1});
}
//   with the next stage: activation of send_mb out, gradient of recv_mb in
static inline void pipeline_exchange_next(std::vector<PipeAction>* a, int stage, int P, int send_mb, int recv_mb) {
    if (stage == P - 1) return;  // the last stage has no next stage: its gradient starts at the loss
    if (send_mb >= 0 && recv_mb >= 0) a->push_back({PIPE_SEND_FORWARD_RECV_BACKWARD, send_mb, recv_mb});
    else if (send_mb >= 0) a->push_back({PIPE_SEND_FORWARD, send_mb, -1});
    else if (recv_mb >= 0) a->push_back({PIPE_RECV_BACKWARD, recv_mb, -1});
}

// At the peak, the number of micro-batches whose forward has run on this stage and whose backward
// has not: the activations the stage must hold at once.
static inline int pipeline_max_in_flight(int stage, int P, int M) {
    return std::min(P - stage, M);
}

// Stage `stage` of P, M micro-batches: the program, in execution order. Mirrors Megatron's
// forward_backward_pipelining_without_interleaving.
static inline std::vector<PipeAction> pipeline_schedule_1f1b(int stage, int P, int M) {
    assert(P >= 1 && stage >= 0 && stage < P && M >= 1);
    int warmup = std::min(P - stage - 1, M), steady = M - warmup, cooldown = warmup;
    std::vector<PipeAction> a;

    // Warmup: fill the pipeline. Stage s runs P-s-1 forwards ahead so that, when its first backward
    // is due, the gradient is already travelling down from the last stage.
    for (int i = 0; i < warmup; i++) {
        pipeline_exchange_prev(&a, stage, -1, i);
        a.push_back({PIPE_FORWARD, i, -1});
        pipeline_exchange_next(&a, stage, P, i, -1);
    }

    // Steady 1F1B: forward micro-batch warmup+i, backward micro-batch i (the oldest in flight). The
    // first steady forward's input is received alone; each later one arrives with the previous
    // backward's gradient send (see the contract: facing plain sends would deadlock).
    if (steady > 0) pipeline_exchange_prev(&a, stage, -1, warmup);
    for (int i = 0; i < steady; i++) {
        int fwd = warmup + i, bwd = i;
        bool last_iteration = (i == steady - 1);
        a.push_back({PIPE_FORWARD, fwd, -1});
        pipeline_exchange_next(&a, stage, P, fwd, bwd);
        a.push_back({PIPE_BACKWARD, bwd, -1});
        pipeline_exchange_prev(&a, stage, bwd, last_iteration ? -1 : fwd + 1);
    }

    // Cooldown: drain the warmup's micro-batches, steady..M-1, backward only.
    for (int i = 0; i < cooldown; i++) {
        int bwd = steady + i;
        pipeline_exchange_next(&a, stage, P, -1, bwd);
        a.push_back({PIPE_BACKWARD, bwd, -1});
        pipeline_exchange_prev(&a, stage, bwd, -1);
    }
    return a;
}
