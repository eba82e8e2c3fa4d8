// tp_gradcheck — the whole model's gradient under tensor parallelism (TP = the mpirun world), in
// double, against central finite differences of the canonical parameters; run by
// test/test_tensor_parallel.sh under `mpirun -np 2` (it needs MPI: built there with -DKEEL_MPI).
//
// Every rank builds its TP slice of a tiny GPT (column/row-parallel layers, vocabulary-parallel
// embedding and cross-entropy) from the same canonical initialization, plus the whole model on one
// rank (TP = 1) for reference. For sampled canonical elements of every tensor, every rank holding
// the element (its owner, or all ranks for a replicated tensor: one shared parameter) moves its copy
// by ±h and all ranks run the forward: (L+ - L-)/2h must equal the analytic gradient. Also:
//   - the loss equals the TP = 1 model's to 1e-12, and every gradient element (gathered canonically)
//     equals the TP = 1 gradient to 1e-10 relative;
//   - a replicated tensor's gradient is identical, bit for bit, on every rank (what keeps the copies
//     identical after the update).
// Knob sets: plain; dropout (attention masks keyed by the model's head: head_offset); ALiBi with the
// embedding LayerNorm (the slopes' slice, the lookup before the norm).
#include <functional>
#include <vector>

#include "llmc/init.h"
#include "llmc/model.h"

static int failures = 0;

static void report(bool ok, const char* what, double err, int rank) {
    if (rank == 0) printf("%-4s %-44s max rel err %.3e\n", ok ? "ok" : "FAIL", what, err);
    if (!ok) failures++;
}

static void check_model(const char* label, GPTConfig whole, bool dropout, const Comm* comm) {
    const int B = 2, T = 6, TP = comm->size;
    GPTConfig cfg = whole;
    cfg.tp_size = TP;
    cfg.tp_rank = comm->rank;
    GPT<double> ref, m;
    gpt_build(&ref, &whole, B, T);
    gpt_build(&m, &cfg, B, T);
    m.tp = comm;
    param_table_init(ref.params, &ref.table, &whole, 0.3, 7);
    for (int id = 0; id < NUM_PARAMS; id++) {  // gains and biases off their 1 / 0, so their gradients are generic
        const ParamTensor* t = &ref.table.t[id];
        if (t->init == INIT_ONE || t->init == INIT_ZERO)
            for (int64_t i = 0; i < t->numel; i++) ref.p[id][i] += 0.2 * rng_normal(3, 5, id, i);
    }
    std::vector<ParamSpan> spans = param_table_rank_spans(&m.table, &ref.table, &cfg);
    std::vector<int64_t> local_of(ref.table.total, -1);  // canonical element → this rank's copy, or -1
    for (const ParamSpan& sp : spans)
        for (int64_t k = 0; k < sp.numel; k++) {
            local_of[sp.offset_canonical + k] = sp.offset_local + k;
            m.params[sp.offset_local + k] = ref.params[sp.offset_canonical + k];
        }
    gpt_set_dropout(&ref, dropout, 99, 40);
    gpt_set_dropout(&m, dropout, 99, 40);
    std::vector<int> in(B * T), tg(B * T);
    for (int i = 0; i < B * T; i++) { in[i] = (i * 7 + 3) % whole.vocab_size; tg[i] = (i * 5 + 1) % whole.vocab_size; }
    in[3] = in[1];
    gpt_zero_grad(&ref);
    gpt_zero_grad(&m);
    double lref = gpt_forward(&ref, in.data(), tg.data(), B, T, 1.0 / (B * T)), loss = gpt_forward(&m, in.data(), tg.data(), B, T, 1.0 / (B * T));
    gpt_backward(&ref, B, T, 1.0 / (B * T));
    gpt_backward(&m, B, T, 1.0 / (B * T));
    char name[128];
    snprintf(name, sizeof name, "%s: loss = TP=1's", label);
    report(std::fabs(loss - lref) <= 1e-12 * std::fabs(lref), name, std::fabs(loss - lref) / std::fabs(lref), comm->rank);
    // the gradient, gathered: each canonical element from its owner (rank 0's copy for a replicated one)
    std::vector<double> mine(ref.table.total, 0.0), gathered(ref.table.total * TP);
    std::vector<double> owned(ref.table.total, 0.0), owners(ref.table.total * TP);
    for (int64_t c = 0; c < ref.table.total; c++)
        if (local_of[c] >= 0) { mine[c] = m.grads[local_of[c]]; owned[c] = 1; }
    comm_allgather(comm, mine.data(), mine.size() * sizeof(double), gathered.data());
    comm_allgather(comm, owned.data(), owned.size() * sizeof(double), owners.data());
    double worst = 0, scale = 1e-30;
    int64_t unequal = 0;
    for (int64_t c = 0; c < ref.table.total; c++) scale = std::max(scale, std::fabs(ref.grads[c]));
    for (int64_t c = 0; c < ref.table.total; c++) {
        double first = NAN;
        for (int r = 0; r < TP; r++) {
            if (owners[(size_t)r * ref.table.total + c] == 0) continue;
            double g = gathered[(size_t)r * ref.table.total + c];
            if (std::isnan(first)) first = g;
            else if (g != first) unequal++;  // a replicated element whose ranks disagree
        }
        worst = std::max(worst, std::fabs(first - ref.grads[c]) / scale);
    }
    snprintf(name, sizeof name, "%s: gradient = TP=1's", label);
    report(worst <= 1e-10, name, worst, comm->rank);
    snprintf(name, sizeof name, "%s: replicated gradients identical", label);
    report(unequal == 0, name, (double)unequal, comm->rank);
    // finite differences, tensor by tensor, on the canonical elements
    for (int id = 0; id < NUM_PARAMS; id++) {
        const ParamTensor* t = &ref.table.t[id];
        if (t->numel == 0) continue;
        double h = 1e-6, err = 0, gscale = 1e-12;
        for (int64_t i = 0; i < t->numel; i++) gscale = std::max(gscale, std::fabs(ref.grads[t->offset_canonical + i]));
        int64_t step = t->numel > 24 ? t->numel / 24 : 1;
        for (int64_t i = 0; i < t->numel; i += step) {
            int64_t c = t->offset_canonical + i, l = local_of[c];
            double keep = l >= 0 ? m.params[l] : 0;
            if (l >= 0) m.params[l] = keep + h;
            double lp = gpt_forward(&m, in.data(), tg.data(), B, T);
            if (l >= 0) m.params[l] = keep - h;
            double lm = gpt_forward(&m, in.data(), tg.data(), B, T);
            if (l >= 0) m.params[l] = keep;
            double analytic = NAN;
            for (int r = 0; r < TP && std::isnan(analytic); r++)
                if (owners[(size_t)r * ref.table.total + c] != 0) analytic = gathered[(size_t)r * ref.table.total + c];
            err = std::max(err, std::fabs((lp - lm) / (2 * h) - analytic) / gscale);
        }
        snprintf(name, sizeof name, "%s d%s (finite differences)", label, t->name);
        report(err < 1e-6, name, err, comm->rank);
    }
    gpt_free(&ref);
    gpt_free(&m);
}

int main(int argc, char** argv) {
    Comm comm{};
    comm_init(&comm, &argc, &argv);
    if (comm.size < 2) keel_die("tp_gradcheck: run it under mpirun -np 2 (or more: the tensor-parallel size)");
    GPTConfig base = {8, 37, gpt_padded_vocab(37, 16), 2, 2, 8};  // Vp 48: rank 1 of 2 holds 13 real columns and 11 padding
    check_model("TP model", base, false, &comm);
    GPTConfig c = base;
    c.hidden_dropout = 0.2; c.attention_dropout = 0.25; c.embed_dropout = 0.3;
    check_model("TP dropout", c, true, &comm);
    c = base;
    c.alibi = c.embed_layernorm = true;
    check_model("TP alibi+embed-ln", c, false, &comm);
    if (comm.rank == 0) printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    comm_finalize(&comm);
    return failures ? 1 : 0;
}
