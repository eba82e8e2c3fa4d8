// test_pipeline_schedule — llmc/parallel.h against independent references:
//   1F1B   for P in 1..4, M in 1..8: each stage's program on its own (every micro-batch forward once
//          and backward once, in order; in-flight activations peak at pipeline_max_in_flight; no op
//          names a missing stage), then all P programs run together in a rendezvous simulator (every
//          send meets a receive of the same micro-batch, data exists before it is used, no deadlock);
//          plus hand-written programs for small cases (the reference is the paper schedule, not the code).
//   layers the stage split against a round-robin count (earlier stages take the extra layers).
//   grid   world 8 in seven TP×PP shapes: coordinates round-trip, hand-written coordinate tables for
//          the Megatron order, groups partition the world, impossible shapes are refused with a reason.
// Exits non-zero on any failure, naming it.
#include "llmc/parallel.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

static int failures = 0;

static void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    failures++;
}

// The test's own short notation for a program (kept apart from the library so the hand-written
// references below do not depend on it): F3 forward mb 3, B3 backward, RF/SF receive/send an
// activation, RB/SB receive/send a gradient, SF2+RB0 one simultaneous pair.
static std::string format_action(const PipeAction& a) {
    char buf[48];
    switch (a.op) {
        case PIPE_RECV_FORWARD: snprintf(buf, sizeof buf, "RF%d", a.mb); break;
        case PIPE_FORWARD: snprintf(buf, sizeof buf, "F%d", a.mb); break;
        case PIPE_SEND_FORWARD: snprintf(buf, sizeof buf, "SF%d", a.mb); break;
        case PIPE_RECV_BACKWARD: snprintf(buf, sizeof buf, "RB%d", a.mb); break;
        case PIPE_BACKWARD: snprintf(buf, sizeof buf, "B%d", a.mb); break;
        case PIPE_SEND_BACKWARD: snprintf(buf, sizeof buf, "SB%d", a.mb); break;
        case PIPE_SEND_FORWARD_RECV_BACKWARD: snprintf(buf, sizeof buf, "SF%d+RB%d", a.mb, a.mb2); break;
        case PIPE_SEND_BACKWARD_RECV_FORWARD: snprintf(buf, sizeof buf, "SB%d+RF%d", a.mb, a.mb2); break;
        default: snprintf(buf, sizeof buf, "?op%d", (int)a.op); break;
    }
    return buf;
}

static std::string format_program(const std::vector<PipeAction>& prog) {
    std::string s;
    for (const PipeAction& a : prog) s += (s.empty() ? "" : " ") + format_action(a);
    return s;
}

// ----------------------------------------------------------------------------------------------------
// 1F1B, one stage at a time

// Fills why and returns false at the first problem in stage's program.
static bool check_program(int stage, int P, int M, const std::vector<PipeAction>& prog, std::string* why) {
    char buf[256];
    bool has_prev = stage > 0, has_next = stage < P - 1;
    std::vector<int> fwd, bwd, act_in, act_out, grad_in, grad_out;  // micro-batches in program order
    std::vector<int> fwd_at(M, -1), bwd_at(M, -1);                 // position of each mb's compute
    int in_flight = 0, peak = 0;
    for (size_t i = 0; i < prog.size(); i++) {
        const PipeAction& a = prog[i];
        bool combined = a.op == PIPE_SEND_FORWARD_RECV_BACKWARD || a.op == PIPE_SEND_BACKWARD_RECV_FORWARD;
        if (a.mb < 0 || a.mb >= M || (combined ? (a.mb2 < 0 || a.mb2 >= M) : a.mb2 != -1)) {
            snprintf(buf, sizeof buf, "action %zu %s: micro-batch out of range (M=%d)", i, format_action(a).c_str(), M);
            *why = buf;
            return false;
        }
        bool talks_prev = a.op == PIPE_RECV_FORWARD || a.op == PIPE_SEND_BACKWARD || a.op == PIPE_SEND_BACKWARD_RECV_FORWARD;
        bool talks_next = a.op == PIPE_SEND_FORWARD || a.op == PIPE_RECV_BACKWARD || a.op == PIPE_SEND_FORWARD_RECV_BACKWARD;
        if ((talks_prev && !has_prev) || (talks_next && !has_next)) {
            snprintf(buf, sizeof buf, "action %zu %s talks to stage %d, which does not exist (P=%d)", i,
                     format_action(a).c_str(), talks_prev ? stage - 1 : stage + 1, P);
            *why = buf;
            return false;
        }
        switch (a.op) {
            case PIPE_FORWARD:
                fwd.push_back(a.mb);
                if (fwd_at[a.mb] < 0) fwd_at[a.mb] = (int)i;
                peak = std::max(peak, ++in_flight);
                break;
            case PIPE_BACKWARD:
                bwd.push_back(a.mb);
                if (bwd_at[a.mb] < 0) bwd_at[a.mb] = (int)i;
                in_flight--;
                break;
            case PIPE_RECV_FORWARD: act_in.push_back(a.mb); break;
            case PIPE_SEND_FORWARD: act_out.push_back(a.mb); break;
            case PIPE_RECV_BACKWARD: grad_in.push_back(a.mb); break;
            case PIPE_SEND_BACKWARD: grad_out.push_back(a.mb); break;
            case PIPE_SEND_FORWARD_RECV_BACKWARD: act_out.push_back(a.mb); grad_in.push_back(a.mb2); break;
            case PIPE_SEND_BACKWARD_RECV_FORWARD: grad_out.push_back(a.mb); act_in.push_back(a.mb2); break;
        }
        if (in_flight > P) {
            snprintf(buf, sizeof buf, "after action %zu, %d activations in flight > P=%d", i, in_flight, P);
            *why = buf;
            return false;
        }
    }
    // Each stream must be exactly 0, 1, ..., M-1 (or empty where the neighbour does not exist).
    struct Stream { const char* name; const std::vector<int>* mbs; bool expected; };
    Stream streams[] = {{"forwards", &fwd, true}, {"backwards", &bwd, true},
                        {"activations received", &act_in, has_prev}, {"gradients sent", &grad_out, has_prev},
                        {"activations sent", &act_out, has_next}, {"gradients received", &grad_in, has_next}};
    for (const Stream& st : streams) {
        std::vector<int> want;
        if (st.expected) for (int m = 0; m < M; m++) want.push_back(m);
        if (*st.mbs != want) {
            std::string got;
            for (int m : *st.mbs) got += " " + std::to_string(m);
            snprintf(buf, sizeof buf, "%s:%s, want 0..%d in order%s", st.name, got.empty() ? " (none)" : got.c_str(),
                     M - 1, st.expected ? "" : " (no neighbour: none)");
            *why = buf;
            return false;
        }
    }
    for (int m = 0; m < M; m++) {
        if (bwd_at[m] < fwd_at[m]) {
            snprintf(buf, sizeof buf, "backward of mb %d (action %d) precedes its forward (action %d)", m, bwd_at[m], fwd_at[m]);
            *why = buf;
            return false;
        }
    }
    if (peak != pipeline_max_in_flight(stage, P, M)) {
        snprintf(buf, sizeof buf, "peak in-flight activations %d != pipeline_max_in_flight %d", peak,
                 pipeline_max_in_flight(stage, P, M));
        *why = buf;
        return false;
    }
    if (P == 1 && prog.size() != (size_t)(2 * M)) {
        *why = "P=1 must be forwards and backwards only";  // implied by the streams above; stated for the reader
        return false;
    }
    return true;
}

// ----------------------------------------------------------------------------------------------------
// 1F1B, all stages together: a rendezvous simulator
//
// Each stage executes its program in order. Compute ops run at once (after checking their inputs
// exist). A communication op is one or two message halves; each half is a send or a receive of one
// micro-batch with one neighbour. Rendezvous: a send half completes only when, at the same moment,
// the neighbour is blocked on an op with the matching receive half (the strictest blocking-send
// semantics: no eager buffering). The two halves of a combined op match independently, as in
// MPI_Sendrecv, possibly with plain ops of the neighbour; the stage stays blocked until both have.
// If a sweep over all stages changes nothing and some stage is unfinished, that is a deadlock.

struct Half {
    bool send;        // else receive
    bool activation;  // else gradient
    int peer;         // the other stage
    int mb;
    bool done;
};

// The message halves of action a on stage s; returns how many (0 for compute). The peer follows from
// the direction alone: activations flow s → s+1, gradients s+1 → s.
static int action_halves(int s, const PipeAction& a, Half h[2]) {
    switch (a.op) {
        case PIPE_RECV_FORWARD: h[0] = {false, true, s - 1, a.mb, false}; return 1;
        case PIPE_SEND_FORWARD: h[0] = {true, true, s + 1, a.mb, false}; return 1;
        case PIPE_RECV_BACKWARD: h[0] = {false, false, s + 1, a.mb, false}; return 1;
        case PIPE_SEND_BACKWARD: h[0] = {true, false, s - 1, a.mb, false}; return 1;
        case PIPE_SEND_FORWARD_RECV_BACKWARD:
            h[0] = {true, true, s + 1, a.mb, false};
            h[1] = {false, false, s + 1, a.mb2, false};
            return 2;
        case PIPE_SEND_BACKWARD_RECV_FORWARD:
            h[0] = {true, false, s - 1, a.mb, false};
            h[1] = {false, true, s - 1, a.mb2, false};
            return 2;
        default: return 0;
    }
}

struct StageSim {
    std::vector<PipeAction> prog;
    size_t pc = 0;       // the action the stage is executing or blocked on
    bool posted = false; // the comm action at pc has its halves in h
    Half h[2];
    int nh = 0;
    std::vector<char> forwarded, backwarded, act_received, grad_received;  // (M,)
};

static std::string describe_blocked(int s, const StageSim& st) {
    const PipeAction& a = st.prog[st.pc];
    std::string d = "stage " + std::to_string(s) + " blocked at action " + std::to_string(st.pc) + " " +
                    pipe_op_name(a.op) + " (" + format_action(a) + "):";
    for (int j = 0; j < st.nh; j++) {
        const Half& h = st.h[j];
        d += std::string(" [") + (h.send ? "send " : "recv ") + (h.activation ? "activation" : "gradient") + " mb " +
             std::to_string(h.mb) + (h.send ? " to " : " from ") + std::to_string(h.peer) + (h.done ? ": done]" : ": waiting]");
    }
    return d;
}

// Runs all P programs; returns false with the first problem (or the deadlock picture) in why.
static bool simulate(int P, int M, std::string* why) {
    char buf[256];
    std::vector<StageSim> st(P);
    for (int s = 0; s < P; s++) {
        st[s].prog = pipeline_schedule_1f1b(s, P, M);
        st[s].forwarded.assign(M, 0);
        st[s].backwarded.assign(M, 0);
        st[s].act_received.assign(M, 0);
        st[s].grad_received.assign(M, 0);
    }
    for (;;) {
        bool progress = false;
        // 1. Each stage runs compute ops until it reaches a communication op, which it posts.
        for (int s = 0; s < P; s++) {
            StageSim& x = st[s];
            while (x.pc < x.prog.size() && !x.posted) {
                const PipeAction& a = x.prog[x.pc];
                if (a.mb < 0 || a.mb >= M) {
                    snprintf(buf, sizeof buf, "stage %d action %zu: mb %d out of range", s, x.pc, a.mb);
                    *why = buf;
                    return false;
                }
                if (a.op == PIPE_FORWARD) {
                    if (s > 0 && !x.act_received[a.mb]) {
                        snprintf(buf, sizeof buf, "stage %d forward of mb %d before its activation arrived", s, a.mb);
                        *why = buf;
                        return false;
                    }
                    x.forwarded[a.mb] = 1;
                    x.pc++;
                    progress = true;
                } else if (a.op == PIPE_BACKWARD) {
                    if (!x.forwarded[a.mb] || (s < P - 1 && !x.grad_received[a.mb])) {
                        snprintf(buf, sizeof buf, "stage %d backward of mb %d before its %s", s, a.mb,
                                 !x.forwarded[a.mb] ? "forward" : "gradient arrived");
                        *why = buf;
                        return false;
                    }
                    x.backwarded[a.mb] = 1;
                    x.pc++;
                    progress = true;
                } else {
                    x.nh = action_halves(s, a, x.h);
                    for (int j = 0; j < x.nh; j++) {
                        const Half& h = x.h[j];
                        if (h.peer < 0 || h.peer >= P) {
                            snprintf(buf, sizeof buf, "stage %d action %zu %s talks to stage %d, which does not exist", s,
                                     x.pc, format_action(a).c_str(), h.peer);
                            *why = buf;
                            return false;
                        }
                        if (h.mb < 0 || h.mb >= M) {
                            snprintf(buf, sizeof buf, "stage %d action %zu %s: mb %d out of range", s, x.pc,
                                     format_action(a).c_str(), h.mb);
                            *why = buf;
                            return false;
                        }
                        if (h.send && !(h.activation ? x.forwarded[h.mb] : x.backwarded[h.mb])) {
                            snprintf(buf, sizeof buf, "stage %d sends the %s of mb %d before computing it", s,
                                     h.activation ? "activation" : "gradient", h.mb);
                            *why = buf;
                            return false;
                        }
                    }
                    x.posted = true;
                }
            }
        }
        // 2. Rendezvous: every posted, unfinished send meets the peer's posted, unfinished receive from
        //    this stage, if there is one right now. Messages between two stages are matched by
        //    (source, destination) only, as MPI with one tag would, so a wrong micro-batch shows up as
        //    a mismatch rather than a silent wait.
        for (int s = 0; s < P; s++) {
            StageSim& x = st[s];
            if (!x.posted) continue;
            for (int j = 0; j < x.nh; j++) {
                Half& snd = x.h[j];
                if (!snd.send || snd.done) continue;
                StageSim& y = st[snd.peer];
                if (!y.posted) continue;
                for (int k = 0; k < y.nh; k++) {
                    Half& rcv = y.h[k];
                    if (rcv.send || rcv.done || rcv.peer != s) continue;
                    if (rcv.activation != snd.activation || rcv.mb != snd.mb) {
                        snprintf(buf, sizeof buf, "stage %d sends the %s of mb %d to stage %d, which receives the %s of mb %d",
                                 s, snd.activation ? "activation" : "gradient", snd.mb, snd.peer,
                                 rcv.activation ? "activation" : "gradient", rcv.mb);
                        *why = buf;
                        return false;
                    }
                    std::vector<char>& got = snd.activation ? y.act_received : y.grad_received;
                    if (got[snd.mb]) {
                        snprintf(buf, sizeof buf, "stage %d receives the %s of mb %d twice", snd.peer,
                                 snd.activation ? "activation" : "gradient", snd.mb);
                        *why = buf;
                        return false;
                    }
                    got[snd.mb] = 1;
                    snd.done = rcv.done = true;
                    progress = true;
                    break;
                }
            }
        }
        // 3. A communication op finishes when all its halves have been matched.
        bool finished = true;
        for (int s = 0; s < P; s++) {
            StageSim& x = st[s];
            if (x.posted) {
                bool all = true;
                for (int j = 0; j < x.nh; j++) all = all && x.h[j].done;
                if (all) {
                    x.posted = false;
                    x.pc++;
                    progress = true;
                }
            }
            finished = finished && x.pc == x.prog.size();
        }
        if (finished) break;
        if (!progress) {
            std::string d = "deadlock:";
            for (int s = 0; s < P; s++) {
                if (st[s].pc < st[s].prog.size()) d += "\n       " + describe_blocked(s, st[s]);
                else d += "\n       stage " + std::to_string(s) + " finished";
            }
            *why = d;
            return false;
        }
    }
    // Everything each stage needed arrived, and everything ran.
    for (int s = 0; s < P; s++) {
        for (int m = 0; m < M; m++) {
            bool ok = st[s].forwarded[m] && st[s].backwarded[m] && (s == 0 || st[s].act_received[m]) &&
                      (s == P - 1 || st[s].grad_received[m]);
            if (!ok) {
                snprintf(buf, sizeof buf, "stage %d finished without forward/backward/inputs of mb %d", s, m);
                *why = buf;
                return false;
            }
        }
    }
    return true;
}

// Hand-written programs: the 1F1B picture from the paper, worked out on paper, independent of the
// generator. P=3, M=4 has every phase on the middle stage; P=4, M=2 has M < P (no steady phase on
// the first two stages, a steady pair meeting plain ops between stages 2 and 3). They also pin where
// the combined ops go: the simulator accepts any deadlock-free placement, and one side's sendrecv is
// already enough to break two facing sends, so it would not notice one side split into plain ops.
static void test_1f1b_reference() {
    struct Ref { int P, M, stage; const char* program; };
    const Ref refs[] = {
        {1, 3, 0, "F0 B0 F1 B1 F2 B2"},
        {2, 1, 0, "F0 SF0 RB0 B0"},
        {2, 1, 1, "RF0 F0 B0 SB0"},
        {3, 4, 0, "F0 SF0 F1 SF1 F2 SF2+RB0 B0 F3 SF3+RB1 B1 RB2 B2 RB3 B3"},
        {3, 4, 1, "RF0 F0 SF0 RF1 F1 SF1+RB0 B0 SB0+RF2 F2 SF2+RB1 B1 SB1+RF3 F3 SF3+RB2 B2 SB2 RB3 B3 SB3"},
        {3, 4, 2, "RF0 F0 B0 SB0+RF1 F1 B1 SB1+RF2 F2 B2 SB2+RF3 F3 B3 SB3"},
        {4, 2, 0, "F0 SF0 F1 SF1 RB0 B0 RB1 B1"},
        {4, 2, 1, "RF0 F0 SF0 RF1 F1 SF1 RB0 B0 SB0 RB1 B1 SB1"},
        {4, 2, 2, "RF0 F0 SF0 RF1 F1 SF1+RB0 B0 SB0 RB1 B1 SB1"},
        {4, 2, 3, "RF0 F0 B0 SB0+RF1 F1 B1 SB1"},
    };
    int bad = 0;
    for (const Ref& r : refs) {
        std::string got = format_program(pipeline_schedule_1f1b(r.stage, r.P, r.M));
        if (got != r.program) {
            fail("1f1b reference P=%d M=%d stage %d\n       got  %s\n       want %s", r.P, r.M, r.stage, got.c_str(), r.program);
            bad++;
        }
    }
    if (!bad) printf("ok   1f1b matches %zu hand-written stage programs\n", sizeof refs / sizeof refs[0]);
}

static void test_1f1b_all() {
    int cases = 0, bad = 0;
    for (int P = 1; P <= 4; P++) {
        for (int M = 1; M <= 8; M++) {
            cases++;
            std::string why;
            bool ok = true;
            for (int s = 0; s < P && ok; s++) {
                if (!check_program(s, P, M, pipeline_schedule_1f1b(s, P, M), &why)) {
                    fail("1f1b P=%d M=%d stage %d: %s\n       program %s", P, M, s, why.c_str(),
                         format_program(pipeline_schedule_1f1b(s, P, M)).c_str());
                    ok = false;
                }
            }
            if (ok && !simulate(P, M, &why)) {
                fail("1f1b P=%d M=%d simulation: %s", P, M, why.c_str());
                ok = false;
            }
            if (!ok) bad++;
        }
    }
    if (!bad) printf("ok   1f1b P 1..4 x M 1..8 (%d cases): programs well formed, peaks match, simulation deadlock-free\n", cases);
}

// ----------------------------------------------------------------------------------------------------
// Layer split

static void test_layer_split() {
    int bad = 0;
    for (int L = 1; L <= 12; L++) {
        for (int P = 1; P <= std::min(L, 4); P++) {
            int next_first = 0;
            for (int s = 0; s < P; s++) {
                // reference: deal the layers out round-robin; stage s gets the l with l % P == s, so
                // the remainder lands on the earliest stages, as documented
                int want_count = 0;
                for (int l = 0; l < L; l++) want_count += (l % P == s);
                int first = -1, count = -1;
                pipeline_stage_layers(L, P, s, &first, &count);
                if (first != next_first || count != want_count) {
                    fail("layers L=%d P=%d stage %d: [%d, +%d), want [%d, +%d)", L, P, s, first, count, next_first, want_count);
                    bad++;
                }
                next_first += want_count;
            }
        }
    }
    if (!bad) printf("ok   layer split L 1..12 x P 1..min(L,4): contiguous, balanced, extra layers on the earlier stages\n");
}

// ----------------------------------------------------------------------------------------------------
// Rank grid

static void test_rank_grid() {
    const int world = 8;
    const int shapes[][2] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {2, 4}, {8, 1}, {1, 8}};
    int bad0 = failures;
    for (const auto& shape : shapes) {
        int tp = shape[0], pp = shape[1];
        std::vector<RankGrid> g(world);
        char err[128];
        bool init_ok = true;
        for (int r = 0; r < world; r++) {
            if (!rank_grid_init(&g[r], world, r, tp, pp, err, sizeof err)) {
                fail("grid tp=%d pp=%d rank %d refused: %s", tp, pp, r, err);
                init_ok = false;
            }
        }
        if (!init_ok) continue;
        for (int r = 0; r < world; r++) {
            const RankGrid& x = g[r];
            if (x.tp * x.pp * x.dp != world || x.dp != world / (tp * pp))
                fail("grid tp=%d pp=%d: sizes tp %d pp %d dp %d", tp, pp, x.tp, x.pp, x.dp);
            if (rank_grid_rank_of(&x, x.tp_rank, x.pp_rank, x.dp_rank) != r)
                fail("grid tp=%d pp=%d rank %d: coordinates (tp %d, pp %d, dp %d) do not round-trip", tp, pp, r,
                     x.tp_rank, x.pp_rank, x.dp_rank);
            // every group: right size, contains this rank, ascending by the varying coordinate, the
            // other two coordinates shared, and the same list on every member (so groups partition)
            const RankGroupKind kinds[] = {RANK_GROUP_TP, RANK_GROUP_DP, RANK_GROUP_PP};
            const char* names[] = {"tp", "dp", "pp"};
            for (int k = 0; k < 3; k++) {
                std::vector<int> grp = rank_grid_group(&x, kinds[k]);
                int want_size = k == 0 ? x.tp : k == 1 ? x.dp : x.pp;
                bool ok = (int)grp.size() == want_size;
                bool self = false;
                for (int i = 0; ok && i < (int)grp.size(); i++) {
                    int m = grp[i];
                    if (m < 0 || m >= world) { ok = false; break; }
                    const RankGrid& y = g[m];
                    int vary = k == 0 ? y.tp_rank : k == 1 ? y.dp_rank : y.pp_rank;
                    bool shares = (k == 0 || y.tp_rank == x.tp_rank) && (k == 1 || y.dp_rank == x.dp_rank) &&
                                  (k == 2 || y.pp_rank == x.pp_rank);
                    ok = vary == i && shares && rank_grid_group(&y, kinds[k]) == grp;
                    self = self || m == r;
                }
                if (!ok || !self) fail("grid tp=%d pp=%d rank %d: %s group is wrong", tp, pp, r, names[k]);
                if (k == 0)  // TP peers are consecutive ranks (one node)
                    for (int i = 0; i < (int)grp.size(); i++)
                        if (grp[i] != grp[0] + i || grp[0] % tp != 0)
                            fail("grid tp=%d pp=%d rank %d: tp group not consecutive ranks", tp, pp, r);
                if (k == 2)
                    for (int st = 0; st < x.pp; st++)
                        if (rank_grid_pipeline_peer(&x, st) != grp[st])
                            fail("grid tp=%d pp=%d rank %d: pipeline peer of stage %d", tp, pp, r, st);
            }
        }
    }
    // Megatron order, written out by hand for world 8, tp 2, pp 2 (dp 2): rank = tp + 2·(dp + 2·pp).
    {
        const int want_tp[] = {0, 1, 0, 1, 0, 1, 0, 1}, want_dp[] = {0, 0, 1, 1, 0, 0, 1, 1},
                  want_pp[] = {0, 0, 0, 0, 1, 1, 1, 1};
        for (int r = 0; r < world; r++) {
            RankGrid x = {};
            char err[128];
            if (!rank_grid_init(&x, world, r, 2, 2, err, sizeof err) || x.tp_rank != want_tp[r] ||
                x.dp_rank != want_dp[r] || x.pp_rank != want_pp[r])
                fail("grid tp=2 pp=2 rank %d: (tp %d, dp %d, pp %d), want (tp %d, dp %d, pp %d)", r, x.tp_rank,
                     x.dp_rank, x.pp_rank, want_tp[r], want_dp[r], want_pp[r]);
        }
        // tp 1, pp 2 (dp 4): DP groups are ranks 0-3 and 4-7, pipelines pair r with r+4
        RankGrid x = {};
        char err[128];
        rank_grid_init(&x, world, 1, 1, 2, err, sizeof err);
        if (rank_grid_group(&x, RANK_GROUP_DP) != std::vector<int>({0, 1, 2, 3}) ||
            rank_grid_group(&x, RANK_GROUP_PP) != std::vector<int>({1, 5}))
            fail("grid tp=1 pp=2 rank 1: want dp group 0 1 2 3 and pipeline 1 5");
    }
    // Impossible shapes are refused with a reason.
    {
        const int refused[][4] = {{8, 0, 3, 1}, {8, 0, 1, 3}, {8, 0, 4, 4}, {8, 0, 0, 1}, {8, 8, 2, 2}, {0, 0, 1, 1}};
        for (const auto& q : refused) {
            RankGrid x = {};
            char err[128] = "";
            bool ok = rank_grid_init(&x, q[0], q[1], q[2], q[3], err, sizeof err);
            if (ok || strlen(err) == 0 || strchr(err, '\n'))
                fail("grid world %d rank %d tp %d pp %d: %s", q[0], q[1], q[2], q[3],
                     ok ? "accepted" : "refused without a one-line reason");
            else if (q[2] == 3)
                printf("ok   grid refuses tp=3 on world 8: %s\n", err);
        }
    }
    if (failures == bad0) printf("ok   grid world 8 in 7 shapes: coordinates round-trip, Megatron order, groups partition\n");
}

int main() {
    // The method at a glance: P=4 stages, M=6 micro-batches.
    printf("1F1B, P=4 M=6 (F/B compute, RF/SF activation recv/send, RB/SB gradient, a+b one sendrecv):\n");
    for (int s = 0; s < 4; s++) printf("  stage %d: %s\n", s, format_program(pipeline_schedule_1f1b(s, 4, 6)).c_str());
    test_1f1b_reference();
    test_1f1b_all();
    test_layer_split();
    test_rank_grid();
    if (failures) {
        printf("%d failure(s)\n", failures);
        return 1;
    }
    printf("all pipeline/grid checks passed\n");
    return 0;
}
