// test_comm_groups — llmc/comm.h's process groups (docs/internals.md#parallelism) against the rank grid of llmc/parallel.h.
// For every TP×PP shape of the world (at 4 ranks: (1,1) (1,2) (1,4) (2,1) (2,2) (4,1)) each rank
// splits the world into its data-parallel, pipeline, tensor-parallel and embedding groups
// {first stage, last stage}, and checks against the grid's own arithmetic (the reference):
//   - size, rank = the grid coordinate, and the members' world ranks in group-rank order;
//   - sums within the group equal the sum over the listed members (f64 host, f32 host on a length
//     no group size divides, f32 on the op set's buffers), a broadcast from the group's last rank;
//   - around the pipeline ring: 4 MiB exchanges (above any eager limit, so MPI must rendezvous)
//     to the next stage and from the previous one, the reverse, and the 1F1B pairing where both
//     neighbours send to each other at once — host (comm_sendrecv) and op-set buffers
//     (comm_sendrecv_buf) — and lone comm_send/comm_recv (host and _buf) between stage pairs;
//   - a group split out of a group (pipeline pairs, parent ranks not world ranks) and the world
//     reversed (the list's order, not the parent's, gives the ranks).
// Builds: without MPI (make's build/test_comm_groups) a single process, where every group is {0};
// with -DKEEL_MPI under mpirun (test/test_comm_groups.sh) host buffers over MPI; and with
// -DKEEL_CUDA_EMULATION -DKEEL_CUDA -DKEEL_MPI the _buf functions on emulated device memory through
// the NCCL backend and the emulated NCCL (test/cuda_emu/nccl.h).
// `--bad-split` instead splits with member lists that disagree, which comm_split must refuse.
// Exits non-zero on any failure (agreed over the world, so every rank exits alike), naming it.
#include "llmc/comm.h"
#include "llmc/parallel.h"

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

static int failures = 0;
static int world_rank = 0;  // for the messages only

static void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL rank %d: ", world_rank);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    failures++;
}

// ---- the op set's buffers: device memory under the NCCL backend, host memory otherwise -----------
#ifdef KEEL_NCCL
static const char* buf_kind = "device buffers (NCCL backend)";
static void* buf_alloc(size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) keel_die("cudaMalloc of %zu bytes failed", bytes);
    return p;
}
static void buf_free(void* p) { cudaFree(p); }
static void buf_upload(void* dst, const void* src, size_t bytes) {
    if (cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess) keel_die("cudaMemcpy to the device failed");
}
static void buf_download(void* dst, const void* src, size_t bytes) {
    if (cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) keel_die("cudaMemcpy from the device failed");
}
#else
static const char* buf_kind = "host buffers";
static void* buf_alloc(size_t bytes) { return malloc(bytes); }
static void buf_free(void* p) { free(p); }
static void buf_upload(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
static void buf_download(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
#endif

// ---- payloads -------------------------------------------------------------------------------------
static const size_t PAYLOAD_WORDS = (size_t)1 << 20;  // 4 MiB of uint32

// What world rank `sender` sends as message `tag`: every word depends on both and on its index.
static uint32_t payload_word(int sender, int tag, size_t i) {
    return ((uint32_t)(sender + 1) * 0x01000193u) ^ ((uint32_t)tag << 26) ^ (uint32_t)i;
}
static std::vector<uint32_t> payload(int sender, int tag, size_t words) {
    std::vector<uint32_t> p(words);
    for (size_t i = 0; i < words; i++) p[i] = payload_word(sender, tag, i);
    return p;
}
static void check_payload(const char* what, const std::vector<uint32_t>& got, int sender, int tag) {
    for (size_t i = 0; i < got.size(); i++)
        if (got[i] != payload_word(sender, tag, i)) {
            fail("%s: word %zu is %08x, expected %08x from world rank %d (tag %d)", what, i, got[i], payload_word(sender, tag, i), sender, tag);
            return;
        }
}

// Floats for the sums: small integers, so every order of addition gives the exact sum.
static float sum_value(int world, size_t i) { return (float)((world + 1) * (int)(i % 13 + 1)); }

// ---- one group ------------------------------------------------------------------------------------

// Checks a group against its member list (world ranks, in group-rank order) and this rank's
// expected group rank. `members_world` may differ from the list passed to comm_split when the parent
// is not the world.
static void check_group(const char* name, const Comm* g, const std::vector<int>& members_world, int expect_rank) {
    int n = (int)members_world.size();
    if (g->size != n || g->rank != expect_rank) {
        fail("%s: rank %d of %d, expected rank %d of %d", name, g->rank, g->size, expect_rank, n);
        return;  // the collectives below would not match up
    }
    // who is where: the world ranks gathered in group-rank order
    std::vector<int> who(n);
    comm_allgather(g, &world_rank, sizeof world_rank, who.data());
    if (who != members_world)
        fail("%s: group ranks hold world ranks %s, expected %s", name, comm_format_members(who.data(), n).c_str(),
             comm_format_members(members_world.data(), n).c_str());
    double want = 0;
    for (int m : members_world) want += m;

    double x = world_rank;
    comm_allreduce_sum_f64(g, &x, 1);
    if (x != want) fail("%s: comm_allreduce_sum_f64 of world ranks = %g, expected %g", name, x, want);

    int last = members_world[n - 1], got = world_rank;
    comm_broadcast(g, &got, sizeof got, n - 1);
    if (got != last) fail("%s: broadcast from the last group rank gave %d, expected world rank %d", name, got, last);

    // f32 sums: a length that no group size divides, so the reduce-scatter's shards are unequal
    const size_t len = 1000003;
    std::vector<float> host(len), expect(len, 0.0f);
    for (size_t i = 0; i < len; i++) {
        host[i] = sum_value(world_rank, i);
        for (int m : members_world) expect[i] += sum_value(m, i);
    }
    comm_allreduce_sum_f32(g, host.data(), len);
    for (size_t i = 0; i < len; i++)
        if (host[i] != expect[i]) { fail("%s: comm_allreduce_sum_f32 [%zu] = %g, expected %g", name, i, host[i], expect[i]); break; }

    for (size_t i = 0; i < len; i++) host[i] = sum_value(world_rank, i);
    float* buf = (float*)buf_alloc(len * sizeof(float));
    buf_upload(buf, host.data(), len * sizeof(float));
    comm_allreduce_sum_f32_buf(g, buf, len);
    buf_download(host.data(), buf, len * sizeof(float));
    buf_free(buf);
    for (size_t i = 0; i < len; i++)
        if (host[i] != expect[i]) { fail("%s: comm_allreduce_sum_f32_buf (%s) [%zu] = %g, expected %g", name, buf_kind, i, host[i], expect[i]); break; }

#ifdef KEEL_NCCL
    if ((g->nccl != nullptr) != (n > 1)) fail("%s: a group of %d %s an NCCL communicator", name, n, g->nccl ? "has" : "lacks");
#endif
    comm_barrier(g);
}

// ---- the pipeline ring ----------------------------------------------------------------------------

// One exchange: send to dest and receive from source (group ranks), 4 MiB each way, on host buffers
// (comm_sendrecv) and on the op set's (comm_sendrecv_buf). A sendrecv built from a blocking send and
// a receive hangs here, every stage sending at once (the script's timeout reports it).
static void check_exchange(const char* what, const Comm* pipe, const std::vector<int>& stage_world, int dest, int source, int tag) {
    char name[160];
    std::vector<uint32_t> out = payload(world_rank, tag, PAYLOAD_WORDS), in(PAYLOAD_WORDS, 0);
    comm_sendrecv(pipe, out.data(), out.size() * 4, dest, in.data(), in.size() * 4, source, tag);
    snprintf(name, sizeof name, "%s, host, stage %d <- stage %d", what, pipe->rank, source);
    check_payload(name, in, stage_world[source], tag);

    void* dout = buf_alloc(PAYLOAD_WORDS * 4);
    void* din = buf_alloc(PAYLOAD_WORDS * 4);
    out = payload(world_rank, tag + 1, PAYLOAD_WORDS);
    buf_upload(dout, out.data(), out.size() * 4);
    comm_sendrecv_buf(pipe, dout, PAYLOAD_WORDS * 4, dest, din, PAYLOAD_WORDS * 4, source, tag + 1);
    buf_download(in.data(), din, PAYLOAD_WORDS * 4);
    buf_free(dout);
    buf_free(din);
    snprintf(name, sizeof name, "%s, %s, stage %d <- stage %d", what, buf_kind, pipe->rank, source);
    check_payload(name, in, stage_world[source], tag + 1);
}

static void check_pipeline_ring(const Comm* pipe, const std::vector<int>& stage_world) {
    int P = pipe->size, s = pipe->rank;
    int next = (s + 1) % P, prev = (s + P - 1) % P;
    check_exchange("ring forward", pipe, stage_world, next, prev, 10);
    check_exchange("ring backward", pipe, stage_world, prev, next, 12);
    // 1F1B: neighbours exchange with each other (activation one way, gradient the other), first the
    // pairs (0,1) (2,3) ..., then (1,2) (3,0) ...; with one stage, the stage exchanges with itself
    int a = P == 1 ? 0 : (s ^ 1) % P;
    int b = P == 1 ? 0 : (s % 2 == 1 ? next : prev);
    check_exchange("1F1B pair (even, odd)", pipe, stage_world, a, a, 14);
    check_exchange("1F1B pair (odd, even)", pipe, stage_world, b, b, 16);

    // lone sends and receives between the stage pairs (0,1) (2,3) ...: even sends first, odd receives
    if (P % 2 != 0) return;
    int peer = s ^ 1;
    std::vector<uint32_t> out = payload(world_rank, 20, PAYLOAD_WORDS), in(PAYLOAD_WORDS, 0);
    if (s % 2 == 0) comm_send(pipe, out.data(), out.size() * 4, peer, 20), comm_recv(pipe, in.data(), in.size() * 4, peer, 20);
    else comm_recv(pipe, in.data(), in.size() * 4, peer, 20), comm_send(pipe, out.data(), out.size() * 4, peer, 20);
    check_payload("comm_send/comm_recv, host", in, stage_world[peer], 20);

    void* dout = buf_alloc(PAYLOAD_WORDS * 4);
    void* din = buf_alloc(PAYLOAD_WORDS * 4);
    out = payload(world_rank, 21, PAYLOAD_WORDS);
    buf_upload(dout, out.data(), out.size() * 4);
    if (s % 2 == 0) comm_send_buf(pipe, dout, PAYLOAD_WORDS * 4, peer, 21), comm_recv_buf(pipe, din, PAYLOAD_WORDS * 4, peer, 21);
    else comm_recv_buf(pipe, din, PAYLOAD_WORDS * 4, peer, 21), comm_send_buf(pipe, dout, PAYLOAD_WORDS * 4, peer, 21);
    buf_download(in.data(), din, PAYLOAD_WORDS * 4);
    buf_free(dout);
    buf_free(din);
    check_payload("comm_send_buf/comm_recv_buf", in, stage_world[peer], 21);
}

// ---- one grid shape -------------------------------------------------------------------------------

static void check_grid(const Comm* world, int tp, int pp) {
    RankGrid g;
    char err[256];
    if (!rank_grid_init(&g, world->size, world->rank, tp, pp, err, sizeof err)) { fail("grid tp=%d pp=%d: %s", tp, pp, err); return; }
    std::vector<int> dp_members = rank_grid_group(&g, RANK_GROUP_DP);
    std::vector<int> pp_members = rank_grid_group(&g, RANK_GROUP_PP);
    std::vector<int> tp_members = rank_grid_group(&g, RANK_GROUP_TP);
    // the embedding group: first and last stage of this replica and shard; a middle stage alone
    int first = rank_grid_pipeline_peer(&g, 0), last = rank_grid_pipeline_peer(&g, pp - 1);
    std::vector<int> emb_members = {world->rank};
    if (pp > 1 && (g.pp_rank == 0 || g.pp_rank == pp - 1)) emb_members = {first, last};
    int emb_rank = g.pp_rank == pp - 1 && pp > 1 ? 1 : 0;

    Comm dp, pipe, tpg, emb;
    comm_split(world, dp_members, &dp);
    comm_split(world, pp_members, &pipe);
    comm_split(world, tp_members, &tpg);
    comm_split(world, emb_members, &emb);
    char name[128];
    snprintf(name, sizeof name, "tp=%d pp=%d dp group", tp, pp);
    check_group(name, &dp, dp_members, g.dp_rank);
    snprintf(name, sizeof name, "tp=%d pp=%d pipeline group", tp, pp);
    check_group(name, &pipe, pp_members, g.pp_rank);
    snprintf(name, sizeof name, "tp=%d pp=%d tp group", tp, pp);
    check_group(name, &tpg, tp_members, g.tp_rank);
    snprintf(name, sizeof name, "tp=%d pp=%d embedding group", tp, pp);
    check_group(name, &emb, emb_members, emb_rank);
    if (pipe.size == (int)pp_members.size()) check_pipeline_ring(&pipe, pp_members);

    // a group of a group: the pipeline group split into stage pairs, named by PIPELINE ranks
    if (pipe.size == pp && pp % 2 == 0) {
        Comm pair;
        int s0 = pipe.rank & ~1;
        comm_split(&pipe, {s0, s0 + 1}, &pair);
        snprintf(name, sizeof name, "tp=%d pp=%d stage pair within the pipeline group", tp, pp);
        check_group(name, &pair, {pp_members[s0], pp_members[s0 + 1]}, pipe.rank & 1);
        comm_free(&pair);
    }
    comm_free(&emb);
    comm_free(&tpg);
    comm_free(&pipe);
    comm_free(&dp);
}

int main(int argc, char** argv) {
    Comm world;
    comm_init(&world, &argc, &argv);
    world_rank = world.rank;
    if (argc > 1 && strcmp(argv[1], "--bad-split") == 0) {
        // ranks 0 and 1 meet by color 0 at the right sizes and positions, but rank 0 thinks its
        // partner is world rank 2: comm_split must refuse, naming both lists
        if (world.size < 4) keel_die("--bad-split needs 4 ranks");
        std::vector<int> lists[4] = {{0, 2}, {0, 1}, {2}, {3}};
        Comm g;
        comm_split(&world, lists[world.rank], &g);
        comm_free(&g);
        comm_finalize(&world);
        return 0;
    }
    if (world.rank == 0)
        printf("world of %d rank(s), %s, op-set buffers: %s\n", world.size, world.mpi ? "MPI" : "single process (no MPI)", buf_kind);

    const int shapes[][2] = {{1, 1}, {1, 2}, {1, 4}, {2, 1}, {2, 2}, {4, 1}};
    for (const auto& sh : shapes) {
        if (world.size % (sh[0] * sh[1]) != 0) continue;
        int before = failures;
        check_grid(&world, sh[0], sh[1]);
        double bad = failures - before;
        comm_allreduce_sum_f64(&world, &bad, 1);
        if (world.rank == 0)
            printf("%s: tp=%d pp=%d dp=%d: dp, pipeline, tp and embedding groups, the pipeline ring exchanges%s\n",
                   bad == 0 ? "ok" : "FAIL", sh[0], sh[1], world.size / (sh[0] * sh[1]), sh[1] % 2 == 0 ? ", stage pairs" : "");
    }

    // the world reversed: ranks follow the list, not the parent
    std::vector<int> reversed(world.size);
    for (int r = 0; r < world.size; r++) reversed[r] = world.size - 1 - r;
    Comm rev;
    comm_split(&world, reversed, &rev);
    int before = failures;
    check_group("the world reversed", &rev, reversed, world.size - 1 - world.rank);
    comm_free(&rev);
    double bad = failures - before;
    comm_allreduce_sum_f64(&world, &bad, 1);
    if (world.rank == 0) printf("%s: the world split in reverse order\n", bad == 0 ? "ok" : "FAIL");

    double total = failures;
    comm_allreduce_sum_f64(&world, &total, 1);
    comm_finalize(&world);
    if (world_rank == 0) printf(total == 0 ? "PASS\n" : "FAIL: %.0f failure(s) over all ranks\n", total);
    return total == 0 ? 0 : 1;
}
