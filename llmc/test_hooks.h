// test_hooks.h — the test-only environment hooks: the whole list, read once at start-up.
//
// None is a flag: a test sets one to plant a fault or to record what a run did; a normal run has
// them all unset. test_hooks_read() reads the environment once (main's start-up; a malformed value
// is refused there); the trainer keeps the struct and passes what a hook needs to where it acts, so
// nothing reads the environment inside the iteration loop or a library function.
//   KEEL_FAULT_SAVE=STAGE[@RANK][:stop]
//                                kill the process (SIGKILL; with :stop, SIGSTOP: a rank that hangs) at
//                                that point of a save (llmc/checkpoint.h ckpt_save), on every rank that
//                                reaches it or only on world rank RANK. On any rank: start (entering the
//                                save, the parameters gathered), optimizer (this rank's part of
//                                optimizer.bin written and fsync'd, before the ranks agree on it). On
//                                rank 0 only: model (model.bin written), rename, swap, latest (the
//                                publication), async (the writer thread of --async-save, after
//                                model.bin), hf (an --export-hf complete but not yet published):
//                                test_checkpoint_crash, test_save_faults, test_async_save, test_hf_bad_input
//   KEEL_INJECT_INF=3,7          plant an inf in the gradients of those iterations, before the loss
//                                scaler and the non-finite check: test_knobs_train, test_data_parallel
//   KEEL_TEST_PERTURB_REPLICATED=TENSOR:LAYER:ITERATION
//                                add 1e-3 to the first element of that replicated tensor's layer on
//                                tensor-parallel rank 1 at the start of that iteration (the drift
//                                --check-replicated-params-interval must catch): test_tensor_parallel
//   KEEL_TEST_UNTIE_PIPELINE_EMBEDDING (any value)
//                                skip the exchange of the tied word embedding's gradient between the
//                                first and the last pipeline stage: test_pipeline_parallel
//   KEEL_DUMP_TOKENS=PREFIX      rank r appends every sample row it trains on to PREFIX.rank<r>
//                                (what dev/batch_lookup --tokens prints): test_batch_lookup, test_hf_roundtrip
//   KEEL_TEST_KILL_SWITCH_AT=K   world rank 0 creates the --kill-switch-path file once iteration K is done,
//                                as an operator's `touch` would (the check before iteration K+1 finds it):
//                                test_run_control
//   KEEL_TEST_ZERO_GRADS=K       zero every reduced gradient of iteration K just before the optimizer step:
//                                the update is then weight decay alone, on exactly the decayed tensors
//                                (test_decay_groups)
//   KEEL_TEST_POISON_GRADS       fill the gradient buffer with NaN (all bits set) at each iteration's start
//                                instead of leaving the last iteration's values: a gradient read before
//                                its first op wrote it poisons the step (test_grad_writes)
//   KEEL_TEST_ZERO_FILL_GRADS    zero the gradient buffer at each iteration's start and let every op add
//                                (no write flags): the reference the first-writer scheme must reproduce
//                                byte for byte (test_grad_writes)
//   KEEL_TEST_FAKE_CLOCK=M[@R]   --exit-duration-in-mins reads the run's wall time as M minutes per
//                                iteration this process ran, on every rank or only on world rank R (the
//                                others keep the real clock: only the agreement over ranks stops them):
//                                test_run_control
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llmc/common.h"

// KEEL_FAULT_SAVE's value, parsed: the stage, the world rank (-1: any) and the signal.
struct SaveFault {
    std::string stage;
    int rank = -1;
    bool stop = false;  // SIGSTOP instead of SIGKILL
};
// Parses STAGE[@RANK][:stop] into *f; on a malformed value returns false with the reason in *why.
static inline bool save_fault_parse(const char* s, SaveFault* f, std::string* why) {
    static const char* any_rank[] = {"start", "optimizer"};
    static const char* rank0[] = {"model", "rename", "swap", "latest", "async", "hf"};
    std::string v = s;
    *f = SaveFault{};
    if (v.size() > 5 && v.compare(v.size() - 5, 5, ":stop") == 0) {
        f->stop = true;
        v.resize(v.size() - 5);
    }
    size_t at = v.find('@');
    f->stage = v.substr(0, at);
    if (at != std::string::npos) {
        char* end;
        long r = strtol(v.c_str() + at + 1, &end, 10);
        if (at + 1 == v.size() || *end || r < 0) return *why = "expected STAGE[@RANK][:stop] with RANK a world rank", false;
        f->rank = (int)r;
    }
    for (const char* st : any_rank)
        if (f->stage == st) return true;
    for (const char* st : rank0)
        if (f->stage == st) {
            if (f->rank > 0) return *why = "stage " + f->stage + " happens on rank 0 only", false;
            return true;
        }
    return *why = "unknown stage '" + f->stage + "' (start, optimizer, model, rename, swap, latest, async, hf)", false;
}

struct TestHooks {
    std::string fault_save;               // KEEL_FAULT_SAVE ("": off), checked by save_fault_parse
    std::vector<int64_t> inject_inf;      // KEEL_INJECT_INF's iterations
    std::string perturb_tensor;           // KEEL_TEST_PERTURB_REPLICATED ("": off) ...
    int64_t perturb_layer = 0, perturb_iteration = 0;  // ... its layer and iteration
    bool untie_pipeline_embedding = false;  // KEEL_TEST_UNTIE_PIPELINE_EMBEDDING is set
    std::string dump_tokens;              // KEEL_DUMP_TOKENS's PREFIX ("": off)
    int64_t kill_switch_at = -1;          // KEEL_TEST_KILL_SWITCH_AT (-1: off)
    int64_t zero_grads_at = -1;           // KEEL_TEST_ZERO_GRADS (-1: off)
    bool poison_grads = false;            // KEEL_TEST_POISON_GRADS is set: NaN in the gradients at each iteration's start
    bool zero_fill_grads = false;         // KEEL_TEST_ZERO_FILL_GRADS is set: gradients zeroed, every op adds
    double fake_clock_minutes = -1;       // KEEL_TEST_FAKE_CLOCK's minutes per iteration (< 0: off) ...
    int fake_clock_rank = -1;             // ... and its world rank (-1: every rank)
};

static inline TestHooks test_hooks_read() {
    TestHooks h;
    if (const char* s = getenv("KEEL_FAULT_SAVE")) {
        SaveFault f;
        std::string why;
        if (*s && !save_fault_parse(s, &f, &why)) keel_die("KEEL_FAULT_SAVE=%s: %s", s, why.c_str());
        h.fault_save = s;
    }
    if (const char* s = getenv("KEEL_INJECT_INF")) {  // numbers separated by commas; reading stops at anything else
        for (const char* p = s; *p;) {
            char* end;
            long long v = strtoll(p, &end, 10);
            if (end == p) break;
            h.inject_inf.push_back(v);
            p = *end == ',' ? end + 1 : end;
        }
    }
    if (const char* s = getenv("KEEL_TEST_PERTURB_REPLICATED")) {
        char name[32];
        long long layer, at;
        if (sscanf(s, "%31[^:]:%lld:%lld", name, &layer, &at) != 3) keel_die("KEEL_TEST_PERTURB_REPLICATED: expected tensor:layer:iteration");
        h.perturb_tensor = name;
        h.perturb_layer = layer;
        h.perturb_iteration = at;
    }
    h.untie_pipeline_embedding = getenv("KEEL_TEST_UNTIE_PIPELINE_EMBEDDING") != nullptr;
    if (const char* s = getenv("KEEL_DUMP_TOKENS")) h.dump_tokens = s;
    if (const char* s = getenv("KEEL_TEST_KILL_SWITCH_AT")) {
        char* end;
        h.kill_switch_at = strtoll(s, &end, 10);
        if (end == s || *end || h.kill_switch_at < 0) keel_die("KEEL_TEST_KILL_SWITCH_AT: expected an iteration >= 0");
    }
    if (const char* s = getenv("KEEL_TEST_ZERO_GRADS")) {
        char* end;
        h.zero_grads_at = strtoll(s, &end, 10);
        if (end == s || *end || h.zero_grads_at < 1) keel_die("KEEL_TEST_ZERO_GRADS: expected an iteration >= 1");
    }
    h.poison_grads = getenv("KEEL_TEST_POISON_GRADS") != nullptr;
    h.zero_fill_grads = getenv("KEEL_TEST_ZERO_FILL_GRADS") != nullptr;
    if (const char* s = getenv("KEEL_TEST_FAKE_CLOCK")) {
        char* end;
        h.fake_clock_minutes = strtod(s, &end);
        if (*end == '@') h.fake_clock_rank = (int)strtol(end + 1, &end, 10);
        if (end == s || *end || !(h.fake_clock_minutes >= 0)) keel_die("KEEL_TEST_FAKE_CLOCK: expected MINUTES[@RANK]");
    }
    return h;
}

// KEEL_INJECT_INF: whether iteration `it` gets the planted inf.
static inline bool test_hooks_inject_inf(const TestHooks* h, int64_t it) {
    for (int64_t v : h->inject_inf)
        if (v == it) return true;
    return false;
}
