// test_data.cpp — shards and the sampler of llmc/data.h, checked against what they must be by
// construction (the token formula that wrote the shard, a counting argument for permutations).
//
// Checks
//   1. Round trip: shard_write, then dataloader_read of every sample gives back exactly the tokens
//      k·T .. k·T+T of the shard; no .tmp file is left behind.
//   2. Rejection: wrong magic, wrong version, truncated header, truncated body, trailing bytes, an id
//      ≥ vocab, a missing file, a glob matching nothing — each opened in a child process (this binary
//      with --open PATH) that must exit non-zero with one line naming the file and the problem.
//   3. Sampler: same seed → same order, another seed → another order, every epoch visits each sample
//      exactly once, and a fresh loader reading from any consumed count s continues the sequence.
//   4. Several shards, by glob and by comma list: the index space is the shards' samples in order, and
//      no sample straddles two shards.
//   5. Megatron's index (llmc/megatron_data.h): megatron_write's .idx parses back to its sizes; every
//      truncation and 4000 random byte corruptions of it are either refused with a reason or parse to
//      an index whose arrays fit the bytes (no crash, no out-of-bounds read: run under ASan to see);
//      the Megatron prefix read as a dataset gives the same samples as the llm.c shard of its tokens.
// Exit status 0 = pass; the first failed check prints its line and exits 1.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "llmc/common.h"
#include "llmc/data.h"

static const int VOCAB = 50257;
static int checks_passed = 0;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            exit(1);                                                       \
        }                                                                  \
        checks_passed++;                                                   \
    } while (0)

// The token at position i of shard number `shard`: distinct per shard, below the vocabulary.
static uint16_t token_at(int shard, int64_t i) { return (uint16_t)((i * 7919 + shard * 1013 + 17) % VOCAB); }

static std::vector<uint16_t> make_tokens(int shard, int64_t n) {
    std::vector<uint16_t> t(n);
    for (int64_t i = 0; i < n; i++) t[i] = token_at(shard, i);
    return t;
}

static std::string write_shard(const std::string& dir, const char* name, int shard, int64_t n) {
    std::string path = dir + "/" + name;
    std::vector<uint16_t> t = make_tokens(shard, n);
    shard_write(path.c_str(), t.data(), t.size());
    return path;
}

// ---- 1. round trip ---------------------------------------------------------------------------------

static void test_round_trip(const std::string& dir) {
    const int T = 16;
    const int64_t ntok = 1000;
    std::string path = write_shard(dir, "round.bin", 0, ntok);
    CHECK(!file_exists((path + ".tmp").c_str()), "shard_write left %s.tmp", path.c_str());
    DataLoader dl;
    dataloader_init(&dl, path.c_str(), T, VOCAB, 1, false);
    CHECK(dl.nsamples == (ntok - 1) / T, "nsamples %lld, expected %lld", (long long)dl.nsamples,
          (long long)((ntok - 1) / T));
    std::vector<int> got(T + 1);
    for (int64_t s = 0; s < 2 * dl.nsamples; s++) {  // two epochs: unshuffled wraps around
        dataloader_read(&dl, s, got.data());
        int64_t k = s % dl.nsamples;
        for (int i = 0; i <= T; i++)
            CHECK(got[i] == token_at(0, k * T + i), "sample %lld token %d: %d != %d", (long long)s, i, got[i],
                  token_at(0, k * T + i));
    }
    dataloader_free(&dl);
    printf("ok  round trip: %lld samples of %d tokens read back exactly\n", (long long)((ntok - 1) / T), T + 1);
}

// ---- 2. rejection (child processes) ------------------------------------------------------------------

// Runs this binary with --open PATTERN; returns its exit status and its stderr in *err.
static int run_open(const char* pattern, const std::string& err_path, std::string* err) {
    pid_t pid = fork();
    CHECK(pid >= 0, "fork failed: %s", strerror(errno));
    if (pid == 0) {
        FILE* f = freopen(err_path.c_str(), "w", stderr);
        if (!f) _exit(100);
        execl("/proc/self/exe", "test_data", "--open", pattern, (char*)nullptr);
        _exit(101);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid failed");
    *err = file_read_all(err_path.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void expect_rejected(const std::string& dir, const std::string& path, const char* why) {
    std::string err;
    int rc = run_open(path.c_str(), dir + "/child.err", &err);
    CHECK(rc != 0 && rc < 100, "opening %s (%s) exited %d, expected a failure", path.c_str(), why, rc);
    CHECK(err.find(path) != std::string::npos, "the error for %s does not name the file: %s", why, err.c_str());
    CHECK(err.find(why) != std::string::npos, "the error for %s does not say '%s': %s", path.c_str(), why,
          err.c_str());
    CHECK(std::count(err.begin(), err.end(), '\n') == 1, "the error for %s is not one line: %s", why, err.c_str());
    printf("ok  rejected (%s): %s", why, err.c_str());
}

// Rewrites the file with the int32 header word `word` set to `value`.
static std::string with_header_word(const std::string& dir, const char* name, int word, int32_t value) {
    std::string path = write_shard(dir, name, 0, 100);
    FILE* f = fopen_check(path.c_str(), "r+b");
    fseek(f, word * 4, SEEK_SET);
    fwrite_check(&value, 4, 1, f, path.c_str());
    fclose(f);
    return path;
}

static std::string with_size(const std::string& dir, const char* name, long bytes) {
    std::string path = write_shard(dir, name, 0, 100);
    CHECK(truncate(path.c_str(), bytes) == 0, "truncate %s: %s", path.c_str(), strerror(errno));
    return path;
}

static std::string with_token(const std::string& dir, const char* name, int64_t pos, uint16_t id) {
    std::string path = write_shard(dir, name, 0, 100);
    FILE* f = fopen_check(path.c_str(), "r+b");
    fseek(f, SHARD_HEADER_INTS * 4 + pos * 2, SEEK_SET);
    fwrite_check(&id, 2, 1, f, path.c_str());
    fclose(f);
    return path;
}

static void test_rejection(const std::string& dir) {
    long full = SHARD_HEADER_INTS * 4 + 100 * 2;
    expect_rejected(dir, with_header_word(dir, "magic.bin", 0, 12345), "bad magic 12345");
    expect_rejected(dir, with_header_word(dir, "version.bin", 1, 7), "unsupported version 7");
    expect_rejected(dir, with_size(dir, "header.bin", 100), "truncated header");
    expect_rejected(dir, with_size(dir, "body.bin", full - 2), "truncated: header says 100 tokens");
    expect_rejected(dir, with_size(dir, "trailing.bin", full + 3), "trailing bytes");
    expect_rejected(dir, with_token(dir, "token.bin", 57, VOCAB), "token id 50257 at position 57");
    expect_rejected(dir, dir + "/missing.bin", "no file matches");
    expect_rejected(dir, dir + "/nothing_*.bin", "no file matches");
    std::string err;  // and the child mode itself accepts a good shard, so a pass above is not a crash
    CHECK(run_open((dir + "/round.bin").c_str(), dir + "/child.err", &err) == 0, "a good shard was rejected: %s",
          err.c_str());
}

// ---- 3. sampler ----------------------------------------------------------------------------------------

static std::vector<int64_t> order(DataLoader* dl, int64_t from, int64_t count) {
    std::vector<int64_t> v;
    for (int64_t s = from; s < from + count; s++) v.push_back(dataloader_sample_index(dl, s));
    return v;
}

static void test_sampler(const std::string& dir) {
    const int T = 8;
    std::string path = write_shard(dir, "sampler.bin", 3, 8 * 97 + 1);  // 97 samples
    DataLoader a, b, c;
    dataloader_init(&a, path.c_str(), T, VOCAB, 42, true);
    dataloader_init(&b, path.c_str(), T, VOCAB, 42, true);
    dataloader_init(&c, path.c_str(), T, VOCAB, 43, true);
    const int64_t N = a.nsamples;
    CHECK(N == 97, "expected 97 samples, got %lld", (long long)N);
    CHECK(order(&a, 0, 3 * N) == order(&b, 0, 3 * N), "the same seed gave two orders");
    CHECK(order(&a, 0, N) != order(&c, 0, N), "seeds 42 and 43 gave the same order");
    CHECK(order(&a, 0, N) != order(&a, N, N), "epochs 0 and 1 have the same order");
    for (int64_t e = 0; e < 3; e++) {
        std::vector<int64_t> ep = order(&a, e * N, N);
        std::set<int64_t> seen(ep.begin(), ep.end());
        CHECK((int64_t)seen.size() == N && *seen.begin() == 0 && *seen.rbegin() == N - 1,
              "epoch %lld does not visit each of the %lld samples exactly once", (long long)e, (long long)N);
    }
    // Resume: a fresh loader reading from consumed count s0 continues the uninterrupted sequence.
    const int64_t K = 2 * N + 10;
    std::vector<std::vector<int>> ref(K, std::vector<int>(T + 1));
    for (int64_t s = 0; s < K; s++) dataloader_read(&a, s, ref[s].data());
    std::vector<int> got(T + 1);
    for (int64_t s0 : {(int64_t)0, (int64_t)1, (int64_t)37, N - 1, N, N + 1, 2 * N - 1}) {
        DataLoader fresh;
        dataloader_init(&fresh, path.c_str(), T, VOCAB, 42, true);
        for (int64_t s = s0; s < std::min(K, s0 + 11); s++) {
            dataloader_read(&fresh, s, got.data());
            CHECK(got == ref[s], "resumed at %lld: sample %lld differs from the uninterrupted run", (long long)s0,
                  (long long)s);
        }
        dataloader_free(&fresh);
    }
    dataloader_free(&a);
    dataloader_free(&b);
    dataloader_free(&c);
    printf("ok  sampler: deterministic per seed, a permutation per epoch, resumable at any count\n");
}

// ---- 4. several shards ---------------------------------------------------------------------------------

// Reads every sample unshuffled and checks it against the shard that must hold it.
static void check_concatenation(const char* pattern, const std::vector<int64_t>& ntoks, int T) {
    DataLoader dl;
    dataloader_init(&dl, pattern, T, VOCAB, 1, false);
    int64_t expect_n = 0;
    for (int64_t n : ntoks) expect_n += (n - 1) / T;
    CHECK(dl.nsamples == expect_n, "%s: %lld samples, expected %lld", pattern, (long long)dl.nsamples,
          (long long)expect_n);
    std::vector<int> got(T + 1);
    int64_t s = 0;
    for (size_t shard = 0; shard < ntoks.size(); shard++)
        for (int64_t k = 0; k < (ntoks[shard] - 1) / T; k++, s++) {
            dataloader_read(&dl, s, got.data());
            for (int i = 0; i <= T; i++)
                CHECK(got[i] == token_at((int)shard, k * T + i), "%s: sample %lld should be sample %lld of shard %zu",
                      pattern, (long long)s, (long long)k, shard);
        }
    dataloader_free(&dl);
}

static void test_multi_shard(const std::string& dir) {
    const int T = 10;
    std::string sub = dir + "/multi";
    CHECK(mkdir(sub.c_str(), 0755) == 0, "mkdir %s: %s", sub.c_str(), strerror(errno));
    // sizes: a partial last sample, an exact fit (10k+1 tokens) and a shard too short for any sample
    std::vector<int64_t> ntoks = {95, 51, 7, 33};
    const char* names[] = {"part_00.bin", "part_01.bin", "part_02.bin", "part_03.bin"};
    for (int k = 0; k < 4; k++) write_shard(sub, names[k], k, ntoks[k]);
    check_concatenation((sub + "/part_*.bin").c_str(), ntoks, T);
    std::string list = sub + "/part_00.bin," + sub + "/part_01.bin," + sub + "/part_02.bin," + sub + "/part_03.bin";
    check_concatenation(list.c_str(), ntoks, T);
    check_concatenation((sub + "/part_0[01].bin," + sub + "/part_0[23].bin").c_str(), ntoks, T);
    printf("ok  several shards by glob and by comma list\n");
}

static void test_megatron_index(const std::string& dir) {
    std::vector<int64_t> tokens, sizes = {5, 0, 17, 3, 40};
    for (int64_t i = 0; i < 65; i++) tokens.push_back(token_at(1, i));
    std::string prefix = dir + "/meg";
    megatron_write(prefix, tokens, sizes, MD_INT32);
    std::string img = file_read_all((prefix + ".idx").c_str());
    MegatronIndex ix;
    CHECK(megatron_index_parse((const uint8_t*)img.data(), img.size(), &ix).empty(), "a written index parses");
    CHECK(ix.dtype == MD_INT32 && ix.ntok == 65 && ix.sizes.size() == 5 && ix.sizes[2] == 17 && ix.pointers[3] == 4 * 22 &&
              ix.doc_idx.size() == 6 && ix.doc_idx[5] == 5, "the index holds the written sizes");
    for (size_t n = 0; n < img.size(); n++) {
        MegatronIndex t;
        CHECK(!megatron_index_parse((const uint8_t*)img.data(), n, &t).empty(), "a truncation to %zu bytes is refused", n);
    }
    uint64_t state = 12345;
    for (int trial = 0; trial < 4000; trial++) {
        std::string bad = img;
        for (int k = 0; k < 1 + trial % 4; k++) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            bad[(state >> 33) % bad.size()] = (char)(state >> 20);
        }
        MegatronIndex t;
        if (megatron_index_parse((const uint8_t*)bad.data(), bad.size(), &t).empty())
            CHECK(t.sizes.size() * 12 + t.doc_idx.size() * 8 + MEGATRON_HEADER_BYTES == bad.size(), "an accepted index fits its bytes");
    }
    // the prefix as a dataset: the samples of the llm.c shard holding the same tokens
    std::vector<uint16_t> u16(tokens.begin(), tokens.end());
    shard_write((dir + "/meg_shard.bin").c_str(), u16.data(), u16.size());
    DataLoader a, b;
    dataloader_init(&a, (prefix + ".idx").c_str(), 8, VOCAB, 3, true);
    dataloader_init(&b, (dir + "/meg_shard.bin").c_str(), 8, VOCAB, 3, true);
    CHECK(a.nsamples == b.nsamples && a.nsamples == 8, "%lld samples", (long long)a.nsamples);
    std::vector<int> x(9), y(9);
    for (int64_t s = 0; s < 20; s++) {
        dataloader_read(&a, s, x.data());
        dataloader_read(&b, s, y.data());
        CHECK(x == y, "sample %lld of the prefix equals the shard's", (long long)s);
    }
    dataloader_free(&a);
    dataloader_free(&b);
    printf("ok  Megatron index: round trip, truncations and corruptions, read as a dataset\n");
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "--open") == 0) {  // child mode for test_rejection
        DataLoader dl;
        dataloader_init(&dl, argv[2], 8, VOCAB, 1, false);
        dataloader_free(&dl);
        return 0;
    }
    char tmpl[] = "/tmp/keel_test_data_XXXXXX";
    CHECK(mkdtemp(tmpl) != nullptr, "mkdtemp: %s", strerror(errno));
    std::string dir = tmpl;
    test_round_trip(dir);
    test_rejection(dir);
    test_sampler(dir);
    test_multi_shard(dir);
    test_megatron_index(dir);
    std::string rm = "rm -rf '" + dir + "'";
    CHECK(system(rm.c_str()) == 0, "could not remove %s", dir.c_str());
    printf("PASS test_data (%d checks)\n", checks_passed);
    return 0;
}
