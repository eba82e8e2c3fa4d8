// test_megatron_index — llmc/megatron_order.h against numpy itself and an independent GPTDataset
// reference (test/megatron_order_ref.py, written from Megatron-DeepSpeed's documented method):
//   1. RandomState(seed).shuffle: several arrays shuffled in turn by one generator (the draws carry
//      over from one shuffle to the next, as doc_idx then shuffle_idx do), seeds 0 .. 2^32-1,
//      lengths 0 .. 70,000 (past 65,536: masks of 17 bits).
//   2. numpy's bounded draws on [0, max] for max past 2^32 (the 64-bit branch: two 32-bit draws,
//      high first) and at the 32-bit edges.
//   3. GPTDataset: for document sizes with empty and long documents, sub-ranges, seeds, one epoch,
//      several epochs with the last one kept in the global shuffle and shuffled apart (both sides
//      of the 95% cutoff, exactly at it and one sample under, and at 88% to show the cutoff is
//      BigScience's 95%, not 80%), every item's start
//      (document, offset) and the epoch count, flag and length are the reference's.
// The reference needs python3 with numpy (scripts/setup.sh installs python3-numpy); without it the
// test fails, saying so.
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/megatron_order.h"
#include "test/unit_check.h"

static std::string python;  // a python3 that imports numpy

static bool find_python() {
    for (const char* p : {"python3", "/usr/bin/python3"}) {
        std::string cmd = std::string(p) + " -c 'import numpy' >/dev/null 2>&1";
        if (system(cmd.c_str()) == 0) { python = p; return true; }
    }
    return false;
}

static std::vector<std::string> ref_lines(const std::string& args) {
    std::string cmd = python + " test/megatron_order_ref.py " + args;
    FILE* f = popen(cmd.c_str(), "r");
    std::vector<std::string> out;
    if (!f) return out;
    std::string line;
    for (int ch; (ch = fgetc(f)) != EOF;) {
        if (ch == '\n') { out.push_back(line); line.clear(); } else line += (char)ch;
    }
    if (!line.empty()) out.push_back(line);
    if (pclose(f) != 0) { printf("FAIL: reference command failed: %s\n", cmd.c_str()); fails++; }
    return out;
}

template <typename T>
static std::string join(const std::vector<T>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); i++) s += (i ? " " : "") + std::to_string(v[i]);
    return s;
}

static void check_shuffles(uint32_t seed, const std::vector<int64_t>& lengths) {
    std::string args = "shuffle " + std::to_string(seed);
    for (int64_t n : lengths) args += " " + std::to_string(n);
    std::vector<std::string> want = ref_lines(args);
    NumpyRng rng;
    numpy_rng_seed(&rng, seed);
    for (size_t i = 0; i < lengths.size(); i++) {
        std::vector<int64_t> a(lengths[i]);
        for (int64_t k = 0; k < lengths[i]; k++) a[k] = k;
        numpy_rng_shuffle(&rng, a.data(), lengths[i]);
        CHECK(i < want.size() && join(a) == want[i], "seed %u: shuffle number %zu (length %lld) differs from numpy's", seed, i,
              (long long)lengths[i]);
    }
}

static void check_interval(uint32_t seed, uint64_t max, int count) {
    std::vector<std::string> want = ref_lines("interval " + std::to_string(seed) + " " + std::to_string(max) + " " + std::to_string(count));
    NumpyRng rng;
    numpy_rng_seed(&rng, seed);
    std::vector<uint64_t> got(count);
    for (int i = 0; i < count; i++) got[i] = numpy_rng_interval(&rng, max);
    CHECK(!want.empty() && join(got) == want[0], "seed %u: draws on [0, %llu] differ from numpy's", seed, (unsigned long long)max);
}

static void check_gpt(const std::vector<int32_t>& sizes, int64_t begin, int64_t end, int64_t n, int64_t seq, uint32_t seed,
                      const char* what, int want_separate) {
    std::string list = join(sizes);
    for (char& ch : list) if (ch == ' ') ch = ',';
    char args[128];
    snprintf(args, sizeof args, " %lld %lld %lld %lld %u", (long long)begin, (long long)end, (long long)n, (long long)seq, seed);
    std::vector<std::string> want = ref_lines("starts " + list + args);
    GPTIndex gi;
    std::vector<int32_t> part(sizes.begin() + begin, sizes.begin() + end);  // the range's sizes, as the loader passes them
    std::string why = megatron_index_plan(&gi, part.data(), begin, end, n, seq);
    CHECK(why.empty(), "%s: plan refused: %s", what, why.c_str());
    megatron_index_build(&gi, part.data(), begin, end, seq, seed);
    std::string head = std::to_string(gi.num_epochs) + " " + std::to_string((int)gi.separate_last_epoch) + " " + std::to_string(gi.len);
    std::string starts;
    for (int64_t k = 0; k < gi.len; k++) {
        int64_t i = gi.shuffle_idx[k];
        starts += (k ? " " : "") + std::to_string(gi.doc_idx[gi.sample_idx[2 * i]]) + ":" + std::to_string(gi.sample_idx[2 * i + 1]);
    }
    CHECK(want.size() == 2 && want[0] == head, "%s: epochs/separate/len '%s', reference '%s'", what, head.c_str(),
          want.empty() ? "" : want[0].c_str());
    CHECK(want.size() == 2 && want[1] == starts, "%s: the items' starts differ from the reference", what);
    CHECK(want_separate < 0 || gi.separate_last_epoch == (want_separate == 1), "%s: the case meant to test separate=%d has %d", what,
          want_separate, (int)gi.separate_last_epoch);
    printf("ok: %s: %lld epoch(s), last apart %d, %lld items\n", what, (long long)gi.num_epochs, (int)gi.separate_last_epoch,
           (long long)gi.len);
}

int main() {
    if (!find_python()) {
        printf("FAIL: no python3 with numpy (install python3-numpy: scripts/setup.sh)\n");
        return 1;
    }
    for (uint32_t seed : {0u, 1u, 7u, 1234u, 4294967295u}) check_shuffles(seed, {0, 1, 2, 3, 10, 1000, 70000, 5});
    printf("ok: RandomState.shuffle matches numpy (5 seeds, 8 arrays each, one generator)\n");
    for (uint64_t max : {5ull, 0xfffffffeull, 0xffffffffull, 0x100000000ull, 0x100003039ull, (1ull << 40) + 3, (1ull << 63) + 5,
                         ~0ull - 1, ~0ull})
        check_interval(1234, max, 40);
    printf("ok: bounded draws match numpy past 2^32 (the 64-bit branch) and at the 32-bit edges\n");

    std::vector<int32_t> sizes;
    for (int i = 0; i < 60; i++) sizes.push_back(i % 7 == 3 ? 0 : 1 + (i * 37) % 29 + (i % 11 == 0 ? 90 : 0));
    int64_t tpe_all = 0;
    for (int32_t s : sizes) tpe_all += s;
    int64_t seq = 8, per_epoch = (tpe_all - 1) / seq;
    check_gpt(sizes, 0, 60, per_epoch / 2, seq, 1234, "one epoch", 0);
    check_gpt(sizes, 0, 60, per_epoch, seq, 1234, "exactly one epoch", 0);
    check_gpt(sizes, 0, 60, 3 * per_epoch + per_epoch / 4, seq, 1234, "4 epochs, last at 25%: shuffled apart", 1);
    check_gpt(sizes, 0, 60, 3 * per_epoch + per_epoch * 97 / 100, seq, 42, "4 epochs, last at 97%: in the global shuffle", 0);
    check_gpt(sizes, 0, 60, 2 * per_epoch + per_epoch * 88 / 100, seq, 7, "3 epochs, last at 88% (apart at 95%, not at 80%)", 1);
    check_gpt(sizes, 12, 47, 500, 5, 0, "documents 12-47, seq 5, 500 samples", -1);
    check_gpt(sizes, 30, 31, 40, 3, 4294967295u, "one document, many epochs, seed 2^32-1", -1);
    check_gpt(sizes, 0, 60, 7 * per_epoch + 3, 8, 99, "8 epochs, a few samples of the last", 1);
    int64_t from_first = (2 * tpe_all - 1) / seq, at_cutoff = from_first + (int64_t)(0.95 * (double)per_epoch);
    check_gpt(sizes, 0, 60, at_cutoff, seq, 5, "3 epochs, the last exactly at the cutoff: in the global shuffle", 0);
    check_gpt(sizes, 0, 60, at_cutoff - 1, seq, 5, "3 epochs, the last one sample under the cutoff: apart", 1);
    return fails != 0;
}
