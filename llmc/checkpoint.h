// checkpoint.h — canonical checkpoints with atomic publish and checksums (docs/internals.md#checkpoints), and the llm.c
// GPT-2 model file (import / export).
//
// Layout of --save DIR:
//   DIR/iter_0000300/model.bin       fp32 parameters, canonical layout (parameter-table order)
//   DIR/iter_0000300/optimizer.bin   optimizer state, canonical layout (llmc/optimizer.h: fp32 m and v,
//                                    or under adam8bit the fp32 units' m, v, block absmax, percentile
//                                    history, then the 8-bit codes)
//   DIR/iter_0000300/state.txt       counters, schedule, RNG key, model shape, trajectory flags
//   DIR/latest_checkpointed_iteration.txt   the iteration to resume from
// Binary files start with a 64-byte header: "KEELCKPT", u32 format version, u32 kind, u64 payload
// bytes, u64 element count, u64 checksum of the payload, zero padding. state.txt is text ending in
// a `checksum = <hex>` line over everything before it. Any mismatch → refused, naming the file.
//
// Atomic publish: everything is written into DIR/iter_N.tmp/, each file fsync'd, the directory
// renamed to DIR/iter_N/, then latest_checkpointed_iteration.txt replaced by write-temp, fsync,
// rename, then DIR fsync'd again; DIR itself, when a save creates it, is fsync'd into its parent. A
// crash or a power loss at any instant leaves `latest` naming a complete checkpoint; a save that fails
// (a full disk: keel_die, exit 1) removes its iter_N.tmp/ on the way out. The test hook
// KEEL_FAULT_SAVE (start | model | optimizer | rename | swap | latest, on one rank or all;
// llmc/test_hooks.h) kills or stops the process at that point of a save, for the crash tests.
//
// Start-up (ckpt_latest, ckpt_check_save_dir): only a missing --load directory or a missing `latest`
// means "no checkpoint yet, start fresh"; a `latest` that exists but cannot be read or parsed, or a
// --load that is not a directory, is refused (a fresh start would go on to replace that checkpoint).
// --save is created and probed before the first iteration, not found unwritable at the first save.
#pragma once
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <atomic>
#include <map>
#include <string>
#include <thread>

#include "llmc/comm.h"
#include "llmc/common.h"
#include "llmc/flags.h"
#include "llmc/model.h"
#include "llmc/optimizer.h"
#include "llmc/schedule.h"
#include "llmc/test_hooks.h"

enum { CKPT_FORMAT_VERSION = 1, CKPT_KIND_MODEL = 1, CKPT_KIND_OPTIMIZER = 2 };

// Everything besides the tensors that a resumed run needs to continue bit for bit.
struct TrainState {
    int64_t iteration;
    int64_t consumed_samples, consumed_tokens;
    int64_t skipped_iterations, nan_iterations;  // totals over the run
    int64_t optimizer_step;
    LRSchedule schedule;
    uint64_t seed;         // RNG key of the data order (and init): all randomness is counter-based (llmc/rand.h)
    uint64_t dropout_seed; // RNG key of dropout masks and text samples (--no-load-rng replaces it)
    int64_t data_order;    // DATA_ORDER_*: which order consumed_samples counts in (llmc/data.h)
    LossScaler scaler;     // scale and trackers (the settings come from the flags)
    UpdateGuard guard;     // the z-score windows, written beside the table as text
    SpikeState spike;      // the spike autopilot's windows, lowered-LR window and rollback history
};

// The one list of TrainState fields in state.txt: writer and reader both walk it.
// The decay style is written by name, beside this table.
struct StateField { const char* key; size_t offset; bool is_double; };
#define KEEL_STATE(key, member, is_double) {key, offsetof(TrainState, member), is_double}
static const StateField STATE_FIELDS[] = {
    KEEL_STATE("iteration", iteration, false),
    KEEL_STATE("consumed_samples", consumed_samples, false),
    KEEL_STATE("consumed_tokens", consumed_tokens, false),
    KEEL_STATE("skipped_iterations", skipped_iterations, false),
    KEEL_STATE("nan_iterations", nan_iterations, false),
    KEEL_STATE("optimizer_step", optimizer_step, false),
    KEEL_STATE("lr.max_lr", schedule.max_lr, true),
    KEEL_STATE("lr.min_lr", schedule.min_lr, true),
    KEEL_STATE("lr.warmup_steps", schedule.warmup_steps, true),
    KEEL_STATE("lr.decay_steps", schedule.decay_steps, true),
    KEEL_STATE("lr.num_steps", schedule.num_steps, false),
    KEEL_STATE("lr.warmup_tokens", schedule.warmup_tokens, false),
    KEEL_STATE("lr.num_tokens", schedule.num_tokens, false),
    KEEL_STATE("rng.seed", seed, false),  // uint64 stored through its int64 bits
    KEEL_STATE("rng.dropout_seed", dropout_seed, false),
    KEEL_STATE("data.order", data_order, false),
    KEEL_STATE("scaler.scale", scaler.scale, true),
    KEEL_STATE("scaler.growth_tracker", scaler.growth_tracker, false),
    KEEL_STATE("scaler.hysteresis_tracker", scaler.hysteresis_tracker, false),
    KEEL_STATE("spike.lr_factor_through", spike.lr_factor_through, false),
};
#undef KEEL_STATE

// 64-bit checksum: FNV-style over 8-byte words with a final mix (detects torn and flipped data).
// Streaming: feed the payload in pieces whose sizes are multiples of 8 (the last may be any size).
struct Checksum64 { uint64_t h; };
static inline Checksum64 checksum64_begin(size_t total_bytes) { return {0xcbf29ce484222325ull ^ total_bytes}; }
static inline void checksum64_feed(Checksum64* c, const void* data, size_t n) {
    const uint8_t* p = (const uint8_t*)data;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        c->h = (c->h ^ w) * 0x100000001b3ull;
        c->h ^= c->h >> 29;
    }
    for (; i < n; i++) c->h = (c->h ^ p[i]) * 0x100000001b3ull;
}
static inline uint64_t checksum64_end(const Checksum64* c) { return rng_mix64(c->h); }
static inline uint64_t checksum64(const void* data, size_t n) {
    Checksum64 c = checksum64_begin(n);
    checksum64_feed(&c, data, n);
    return checksum64_end(&c);
}

// fault: the KEEL_FAULT_SAVE test hook (llmc/test_hooks.h: STAGE[@RANK][:stop]; null or "": none).
// At `stage` on world rank `rank`: if the hook names that stage (and that rank, if it names one),
// the process is killed (SIGKILL: a crash) or stopped (SIGSTOP: a rank that hangs mid-save). A
// stopped one stays hung when continued: OpenMPI's teardown sends SIGCONT before SIGTERM, and a rank
// that then finished its save would not be the hang the test plants.
static inline void ckpt_fault(const char* fault, const char* stage, int rank) {
    SaveFault f;
    std::string why;
    if (!fault || !*fault || !save_fault_parse(fault, &f, &why)) return;  // (a malformed one is refused at start-up)
    if (f.stage != stage || (f.rank >= 0 && f.rank != rank)) return;
    fprintf(stderr, "KEEL_FAULT_SAVE=%s: %s rank %d mid-save\n", fault, f.stop ? "stopping" : "killing", rank);
    fflush(stderr);
    if (!f.stop) raise(SIGKILL);
    raise(SIGSTOP);
    for (;;) pause();
}

// mkdir -p whose new directories survive a power loss: a directory's entry is durable only once
// its parent is fsync'd, and a checkpoint inside a directory that vanishes is lost with it.
// Returns the errno of the first mkdir that failed (0: all there) and names its directory in *failed.
static inline int mkdir_p_durable(const std::string& path, std::string* failed) {
    for (size_t i = 1; i <= path.size(); i++) {
        if (i < path.size() && path[i] != '/') continue;
        std::string part = path.substr(0, i);
        if (mkdir(part.c_str(), 0755) == 0) {
            fsync_parent_dir(part);
        } else if (errno != EEXIST) {
            *failed = part;
            return errno;
        }
    }
    return 0;
}

static inline void ckpt_header(uint8_t header[64], size_t bytes, uint32_t kind, uint64_t count, uint64_t sum) {
    memset(header, 0, 64);
    memcpy(header, "KEELCKPT", 8);
    uint32_t version = CKPT_FORMAT_VERSION;
    uint64_t b = bytes;
    memcpy(header + 8, &version, 4);
    memcpy(header + 12, &kind, 4);
    memcpy(header + 16, &b, 8);
    memcpy(header + 24, &count, 8);
    memcpy(header + 32, &sum, 8);
}

static inline void ckpt_write_file(const std::string& path, const void* payload, size_t bytes, uint32_t kind,
                                   uint64_t count) {
    uint8_t header[64];
    ckpt_header(header, bytes, kind, count, checksum64(payload, bytes));
    FILE* f = fopen_check(path.c_str(), "wb");
    FilePtr guard(f);  // closed if a write fails (a save's errors are recoverable: ckpt_phase)
    fwrite_check(header, 1, 64, f, path.c_str());
    fwrite_check(payload, 1, bytes, f, path.c_str());
    FILE_CHECK(fflush(f) == 0 && fsync(fileno(f)) == 0, "fsync", path.c_str());
    FILE_CHECK(fclose(guard.release()) == 0, "fclose", path.c_str());
}

// Closes a descriptor when its scope ends, a failed write's included.
struct FdGuard {
    int fd;
    ~FdGuard() { if (fd >= 0) close(fd); }
};

static inline void pwrite_all(int fd, const void* data, size_t bytes, size_t offset, const char* path) {
    const uint8_t* p = (const uint8_t*)data;
    while (bytes > 0) {
        ssize_t w = pwrite(fd, p, bytes, (off_t)offset);
        FILE_CHECK(w > 0, "pwrite", path);
        p += w;
        bytes -= (size_t)w;
        offset += (size_t)w;
    }
}

// A file written by several ranks: rank 0 creates it at its full size (header zeroed); after a
// barrier each rank writes its spans of the payload; after another, rank 0 checksums the payload
// as it is on disk and writes the header. What lands on disk is what is verified.
static inline void ckpt_coop_create(const std::string& path, size_t bytes) {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    FILE_CHECK(fd >= 0, "create", path.c_str());
    FdGuard guard{fd};
    FILE_CHECK(ftruncate(fd, (off_t)(64 + bytes)) == 0, "ftruncate", path.c_str());
}

// spans_on_host: the spans are host copies already (an asynchronous save's writer thread, which must
// not touch the device); otherwise they are the op set's memory and go through a host buffer.
static inline void ckpt_coop_write(const std::string& path, const std::vector<StateSpan>& spans, bool spans_on_host = false) {
    int fd = open(path.c_str(), O_WRONLY);
    FILE_CHECK(fd >= 0, "open for writing", path.c_str());
    FdGuard guard{fd};
    std::vector<uint8_t> host;
    for (const StateSpan& sp : spans) {
        const uint8_t* src = sp.local;
        if (!spans_on_host) {
            host.resize(sp.bytes);
            backend_copy_to_host(host.data(), sp.local, sp.bytes);
            src = host.data();
        }
        pwrite_all(fd, src, sp.bytes, 64 + sp.offset_canonical, path.c_str());
    }
    FILE_CHECK(fsync(fd) == 0, "fsync", path.c_str());
}

static inline void ckpt_coop_finish(const std::string& path, size_t bytes, uint32_t kind, uint64_t count) {
    int fd = open(path.c_str(), O_RDWR);
    FILE_CHECK(fd >= 0, "open", path.c_str());
    FdGuard guard{fd};
    Checksum64 cs = checksum64_begin(bytes);
    std::vector<uint8_t> buf((size_t)8 << 20);  // a multiple of 8, as checksum64_feed wants
    for (size_t done = 0; done < bytes;) {
        size_t want = std::min(buf.size(), bytes - done);
        ssize_t got = pread(fd, buf.data(), want, (off_t)(64 + done));
        FILE_CHECK(got == (ssize_t)want, "read back", path.c_str());
        checksum64_feed(&cs, buf.data(), want);
        done += want;
    }
    uint8_t header[64];
    ckpt_header(header, bytes, kind, count, checksum64_end(&cs));
    pwrite_all(fd, header, 64, 0, path.c_str());
    FILE_CHECK(fsync(fd) == 0, "fsync", path.c_str());
}

// Reads a binary checkpoint file of `bytes` bytes describing `count` parameters, verifying header,
// size and checksum.
static inline void ckpt_read_file(const std::string& path, void* payload, uint64_t bytes_expected, uint64_t count, uint32_t kind) {
    FilePtr file(fopen(path.c_str(), "rb"));
    FILE* f = file.get();
    if (!f) keel_die("checkpoint file '%s': cannot open: %s", path.c_str(), strerror(errno));
    uint8_t header[64];
    if (fread(header, 1, 64, f) != 64 || memcmp(header, "KEELCKPT", 8) != 0)
        keel_die("checkpoint file '%s': not a keel checkpoint file (bad or truncated header)", path.c_str());
    uint32_t version, k;
    uint64_t bytes, n, sum;
    memcpy(&version, header + 8, 4);
    memcpy(&k, header + 12, 4);
    memcpy(&bytes, header + 16, 8);
    memcpy(&n, header + 24, 8);
    memcpy(&sum, header + 32, 8);
    if (version != CKPT_FORMAT_VERSION) keel_die("checkpoint file '%s': format version %u, expected %u", path.c_str(), version, CKPT_FORMAT_VERSION);
    if (k != kind) keel_die("checkpoint file '%s': holds kind %u, expected %u", path.c_str(), k, kind);
    if (n != count || bytes != bytes_expected)
        keel_die("checkpoint file '%s': holds %llu bytes for %llu parameters, this run needs %llu bytes for %llu", path.c_str(),
                 (unsigned long long)bytes, (unsigned long long)n, (unsigned long long)bytes_expected, (unsigned long long)count);
    if (fread(payload, 1, bytes, f) != bytes) keel_die("checkpoint file '%s': truncated (torn write?)", path.c_str());
    char extra;
    if (fread(&extra, 1, 1, f) != 0) keel_die("checkpoint file '%s': trailing bytes after the payload", path.c_str());
    if (checksum64(payload, bytes) != sum) keel_die("checkpoint file '%s': checksum mismatch (corrupt or torn file)", path.c_str());
}

static inline std::string ckpt_iter_dir(const std::string& dir, int64_t iteration) {
    char buf[32];
    snprintf(buf, sizeof buf, "/iter_%07lld", (long long)iteration);
    return dir + buf;
}

static inline void rmtree(const std::string& path) {
    DIR* d = opendir(path.c_str());
    if (!d) return;
    while (struct dirent* e = readdir(d)) {
        std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        std::string p = path + "/" + name;
        struct stat st;
        if (lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) rmtree(p); else unlink(p.c_str());
    }
    closedir(d);
    rmdir(path.c_str());
}

static inline std::string ckpt_state_text(const TrainState* s, const GPTConfig* g, const Config* c, int64_t nparams,
                                          const std::string& optimizer_layout) {
    std::string t;
    char buf[512];
    auto kv = [&](const char* k, const std::string& v) { t += k; t += " = "; t += v; t += "\n"; };
    auto i64 = [&](const char* k, long long v) { snprintf(buf, sizeof buf, "%lld", v); kv(k, buf); };
    auto dbl = [&](const char* k, double v) { kv(k, double_repr(v)); };
    static_assert(sizeof(long long) == sizeof(int64_t) && sizeof(uint64_t) == sizeof(int64_t), "state fields are 64-bit");
    kv("format", "keel-checkpoint-1");
    for (const StateField& f : STATE_FIELDS) {
        const char* p = (const char*)s + f.offset;
        if (f.is_double) dbl(f.key, *(const double*)p); else i64(f.key, *(const long long*)p);
    }
    kv("lr.decay_style", LR_DECAY_NAMES[s->schedule.style]);
    kv("scaler.mode", !s->scaler.enabled ? "off" : s->scaler.dynamic ? "dynamic" : "static");
    kv("guard.loss_window", rolling_to_string(&s->guard.loss));
    kv("guard.norm_window", rolling_to_string(&s->guard.norm));
    kv("spike.loss_window", rolling_to_string(&s->spike.loss));
    kv("spike.norm_window", rolling_to_string(&s->spike.norm));
    kv("spike.rollbacks", spike_rollbacks_to_string(&s->spike));
    kv("optimizer.layout", optimizer_layout);
    i64("model.num_layers", g->num_layers);
    i64("model.channels", g->channels);
    i64("model.num_heads", g->num_heads);
    i64("model.ffn_hidden_size", gpt_ffn(g));
    i64("model.vocab_size", g->vocab_size);
    i64("model.padded_vocab_size", g->padded_vocab_size);
    i64("model.max_seq_len", g->max_seq_len);
    i64("model.embed_layernorm", g->embed_layernorm);
    i64("model.alibi", g->alibi);
    i64("model.normformer", g->normformer);
    i64("model.num_parameters", nparams);
    for (int i = 0; i < NUM_FLAGS; i++)
        if (FLAGS[i].kind == FK_STATE) kv((std::string("flag.") + FLAGS[i].name).c_str(), flag_value_string(c, &FLAGS[i]));
    snprintf(buf, sizeof buf, "checksum = %016llx\n", (unsigned long long)checksum64(t.data(), t.size()));
    return t + buf;
}

// The temporary directory (or file) of the save in progress on this process, removed on the way out
// if the process exits before publishing it (keel_die: a full disk, a failed rename), so a failed save
// leaves nothing beside the published iterations. A crash (SIGKILL) leaves it to the next save's rmtree.
static std::string ckpt_pending;
static inline void ckpt_remove_pending() {
    if (ckpt_pending.empty()) return;
    rmtree(ckpt_pending);           // a directory
    unlink(ckpt_pending.c_str());  // or a file
}
static inline void ckpt_set_pending(const std::string& path) {
    static bool registered = false;
    if (!registered) atexit(ckpt_remove_pending);
    registered = true;
    ckpt_pending = path;
}

// A save's outcome on every rank: published, or failed on some rank (the lowest such rank and
// what failed there: a full disk, a quota, an I/O error).
struct SaveResult {
    bool ok = true;
    int rank = -1;
    std::string why;
};

// One phase of a save: fn runs on this rank with its I/O errors caught (KeelDieThrows: they become
// a message instead of an exit), then every rank learns whether any rank failed, with the lowest
// failing rank's message. The exchange is also the phase's barrier, so a rank that failed never
// leaves the others waiting in a collective it skipped: all ranks take the same branch after it.
template <typename F>
static inline SaveResult ckpt_phase(const Comm* comm, F fn) {
    enum { MSG = 400 };
    char mine[MSG] = {0};
    try {
        KeelDieThrows scope;
        fn();
    } catch (const KeelError& e) {
        snprintf(mine, sizeof mine, "%s", e.message.empty() ? "an error" : e.message.c_str());
    }
    std::vector<char> all((size_t)MSG * comm->size);
    comm_allgather(comm, mine, MSG, all.data());
    SaveResult r;
    for (int q = 0; q < comm->size && r.ok; q++)
        if (all[(size_t)q * MSG]) r = SaveResult{false, q, std::string(&all[(size_t)q * MSG], strnlen(&all[(size_t)q * MSG], MSG))};
    return r;
}

// What a save has done to the directory so far (rank 0), so a failed one can be taken back.
struct SaveProgress {
    bool renamed = false;   // iter_N.tmp became iter_N
    bool swapped = false;   // an earlier iter_N became iter_N.old
    bool published = false; // latest names iter_N
};

// A failed save leaves the directory as it was (rank 0): the partial iter_N.tmp removed, an
// iter_N that was renamed into place but not published removed again, an earlier copy of iter_N
// put back. Once `latest` names the new checkpoint nothing is undone (a later step failed, such as
// syncing the directory, and the checkpoint is there).
static inline void ckpt_undo(const std::string& final_dir, const std::string& tmp, const std::string& old, const SaveProgress& p) {
    if (p.published) return;
    rmtree(tmp);
    if (p.renamed) rmtree(final_dir);
    if (p.swapped) rename(old.c_str(), final_dir.c_str());
    ckpt_set_pending("");
}

// Rank 0's last phase: optimizer.bin's header, state.txt, then the publication (rename into place,
// then `latest`), each step durable before the next.
static inline void ckpt_publish(const std::string& dir, const std::string& final_dir, const std::string& tmp, const std::string& old,
                                const std::string& state, size_t opt_bytes, int64_t n, int64_t iteration, const char* fault,
                                SaveProgress* p) {
    ckpt_coop_finish(tmp + "/optimizer.bin", opt_bytes, CKPT_KIND_OPTIMIZER, (uint64_t)n);
    FILE* f = fopen_check((tmp + "/state.txt").c_str(), "wb");
    FilePtr guard(f);
    fwrite_check(state.data(), 1, state.size(), f, (tmp + "/state.txt").c_str());
    FILE_CHECK(fflush(f) == 0 && fsync(fileno(f)) == 0, "fsync", (tmp + "/state.txt").c_str());
    FILE_CHECK(fclose(guard.release()) == 0, "fclose", (tmp + "/state.txt").c_str());
    fsync_path(tmp.c_str());
    ckpt_fault(fault, "rename", 0);
    struct stat st;
    if (stat(final_dir.c_str(), &st) == 0) {  // re-saving an iteration: keep the old one until the swap
        rmtree(old);
        FILE_CHECK(rename(final_dir.c_str(), old.c_str()) == 0, "rename", final_dir.c_str());
        p->swapped = true;
        ckpt_fault(fault, "swap", 0);
    }
    FILE_CHECK(rename(tmp.c_str(), final_dir.c_str()) == 0, "rename", tmp.c_str());
    p->renamed = true;
    ckpt_set_pending("");  // published below: iter_N/ stays whatever follows
    fsync_path(dir.c_str());
    ckpt_fault(fault, "latest", 0);
    std::string latest = dir + "/latest_checkpointed_iteration.txt", latest_tmp = latest + ".tmp";
    ckpt_set_pending(latest_tmp);
    f = fopen_check(latest_tmp.c_str(), "wb");
    guard.reset(f);
    fprintf(f, "%lld\n", (long long)iteration);
    FILE_CHECK(fflush(f) == 0 && fsync(fileno(f)) == 0, "fsync", latest_tmp.c_str());
    FILE_CHECK(fclose(guard.release()) == 0, "fclose", latest_tmp.c_str());
    FILE_CHECK(rename(latest_tmp.c_str(), latest.c_str()) == 0, "rename", latest_tmp.c_str());
    p->published = true;
    ckpt_set_pending("");
    fsync_path(dir.c_str());
    rmtree(old);
}

// Saves a checkpoint of iteration s->iteration under dir (created if needed) and publishes it; every
// rank of comm (the world) calls it. Rank 0 writes model.bin from params (the whole model's n
// canonical parameters, gathered to it under pipeline parallelism) and state.txt; each rank writes
// its spans of the optimizer's canonical state (opt_bytes in all, described by opt_layout; under
// pipeline parallelism a stage's spans sit where the whole model's layout puts them); rank 0
// publishes. Three phases, each ending in an agreement (ckpt_phase): an I/O error on any rank (a
// full disk, a quota) fails the save on every rank, the directory is left as it was (ckpt_undo),
// and the same SaveResult returns everywhere, for the caller to stop or go on. fault: the
// KEEL_FAULT_SAVE hook.
static inline SaveResult ckpt_save(const std::string& dir, const Comm* comm, const float* params, int64_t n,
                                   const std::vector<StateSpan>& opt_spans, size_t opt_bytes, const std::string& opt_layout,
                                   const TrainState* s, const GPTConfig* g, const Config* c, const char* fault) {
    std::string final_dir = ckpt_iter_dir(dir, s->iteration), tmp = final_dir + ".tmp", old = final_dir + ".old";
    bool root = comm->rank == 0;
    SaveProgress progress;
    ckpt_fault(fault, "start", comm->rank);
    SaveResult r = ckpt_phase(comm, [&] {
        if (!root) return;
        std::string part;
        if (int err = mkdir_p_durable(dir, &part)) keel_die("--save %s: cannot create '%s': %s", dir.c_str(), part.c_str(), strerror(err));
        rmtree(tmp);  // a crash of an earlier save may have left one
        FILE_CHECK(mkdir(tmp.c_str(), 0755) == 0, "mkdir", tmp.c_str());
        ckpt_set_pending(tmp);
        ckpt_write_file(tmp + "/model.bin", params, (size_t)n * sizeof(float), CKPT_KIND_MODEL, (uint64_t)n);
        ckpt_fault(fault, "model", 0);
        ckpt_coop_create(tmp + "/optimizer.bin", opt_bytes);
    });
    if (r.ok) r = ckpt_phase(comm, [&] {
        ckpt_coop_write(tmp + "/optimizer.bin", opt_spans);
        ckpt_fault(fault, "optimizer", comm->rank);
    });
    if (r.ok) r = ckpt_phase(comm, [&] {
        if (root) ckpt_publish(dir, final_dir, tmp, old, ckpt_state_text(s, g, c, n, opt_layout), opt_bytes, n, s->iteration, fault, &progress);
    });
    if (!r.ok && root) ckpt_undo(final_dir, tmp, old, progress);
    return r;
}

// ---- asynchronous saves (--async-save) -----------------------------------------------------------
// The step pays for copies, not for the disk. ckpt_save_async_begin (every rank, at the save point)
// takes host copies of what the checkpoint holds (rank 0: the gathered parameters, a copy already;
// every rank: its optimizer spans), runs a synchronous save's first phase (rank 0 creates
// iter_N.tmp and the sized optimizer.bin, agreed over ranks), and starts a writer thread that writes
// this rank's part (rank 0 model.bin too) while training goes on. After each later iteration
// ckpt_save_async_poll asks every rank whether its writer is done (one small all-gather); once all
// are, the ranks agree on the outcome and rank 0 publishes on the training thread (optimizer.bin's
// checksum, state.txt, the rename and `latest`: ckpt_publish). Until then the previous checkpoint
// stays `latest`, so a crash in between loses only what a crash during a synchronous save would.
// The writer thread touches neither the device nor a communicator, and a failure there is one more
// I/O error the agreement reports (ckpt_phase). The host copies go into buffers allocated and
// faulted in at start-up and kept (ckpt_save_async_reserve): the step then waits for the copies
// alone, not for the kernel to find and zero fresh pages.
struct AsyncSave {
    bool pending = false;
    std::thread writer;
    std::atomic<bool> done{false};
    std::string error;                   // this rank's writer's failure ("": none)
    std::string dir, final_dir, tmp, old, state;
    std::vector<float> params;           // rank 0: the whole model's canonical parameters (kept between saves)
    std::vector<uint8_t> opt_copy;       // this rank's optimizer spans, back to back
    std::vector<StateSpan> spans;        // pointing into opt_copy
    size_t opt_bytes = 0;
    int64_t n = 0, iteration = 0;
    bool publishing = false;             // rank 0: the publisher thread runs
    std::thread publisher;
    std::atomic<bool> publish_done{false};
    SaveResult published;                // its outcome
    ~AsyncSave() {  // (every exit path finishes a pending save first; this only guards)
        if (writer.joinable()) writer.join();
        if (publisher.joinable()) publisher.join();
    }
};

static inline void ckpt_async_writer(AsyncSave* a, bool root, const char* fault) {
    try {
        KeelDieThrows scope;
        if (root) {
            ckpt_write_file(a->tmp + "/model.bin", a->params.data(), (size_t)a->n * sizeof(float), CKPT_KIND_MODEL, (uint64_t)a->n);
            ckpt_fault(fault, "async", 0);  // a crash while the writes run behind training
        }
        ckpt_coop_write(a->tmp + "/optimizer.bin", a->spans, true);
    } catch (const KeelError& e) {
        a->error = e.message.empty() ? "an error" : e.message;
    }
    a->done.store(true, std::memory_order_release);
}

// At start-up: the host copies' buffers of every later save allocated and touched now (params_n: rank
// 0's whole model, 0 elsewhere; every rank its optimizer spans), and kept from save to save. A copy
// into fresh memory pays a page fault and the kernel's zeroing per 4 KiB page: for a 45M-parameter
// model (540 MB of copies) that was 0.3 s of a 0.5 s wait here, against 0.03 s for the copies
// themselves.
static inline void ckpt_save_async_reserve(AsyncSave* a, size_t params_n, const std::vector<StateSpan>& opt_spans) {
    size_t total = 0;
    for (const StateSpan& sp : opt_spans) total += sp.bytes;
    a->params.resize(params_n);  // (resize writes every element: the pages are faulted in here)
    a->opt_copy.resize(total);
}

// Starts an asynchronous save of iteration s->iteration (params: rank 0's gathered parameters, moved
// in). Returns the first phase's outcome; on success the save is pending.
static inline SaveResult ckpt_save_async_begin(AsyncSave* a, const std::string& dir, const Comm* comm, std::vector<float>&& params,
                                               int64_t n, const std::vector<StateSpan>& opt_spans, size_t opt_bytes,
                                               const std::string& opt_layout, const TrainState* s, const GPTConfig* g,
                                               const Config* c, const char* fault) {
    bool root = comm->rank == 0;
    a->dir = dir;
    a->final_dir = ckpt_iter_dir(dir, s->iteration);
    a->tmp = a->final_dir + ".tmp";
    a->old = a->final_dir + ".old";
    a->state = root ? ckpt_state_text(s, g, c, n, opt_layout) : "";
    a->params = std::move(params);
    a->n = n;
    a->opt_bytes = opt_bytes;
    a->iteration = s->iteration;
    size_t total = 0;
    for (const StateSpan& sp : opt_spans) total += sp.bytes;
    a->opt_copy.resize(total);
    a->spans.clear();
    for (const StateSpan& sp : opt_spans) {  // the copies the step waits for (device to host on the GPU)
        uint8_t* dst = a->opt_copy.data() + (a->spans.empty() ? 0 : (a->spans.back().local - a->opt_copy.data()) + a->spans.back().bytes);
        backend_copy_to_host(dst, sp.local, sp.bytes);
        a->spans.push_back(StateSpan{sp.offset_canonical, dst, sp.bytes});
    }
    SaveResult r = ckpt_phase(comm, [&] {
        if (!root) return;
        std::string part;
        if (int err = mkdir_p_durable(dir, &part)) keel_die("--save %s: cannot create '%s': %s", dir.c_str(), part.c_str(), strerror(err));
        rmtree(a->tmp);
        FILE_CHECK(mkdir(a->tmp.c_str(), 0755) == 0, "mkdir", a->tmp.c_str());
        ckpt_set_pending(a->tmp);
        ckpt_coop_create(a->tmp + "/optimizer.bin", opt_bytes);
    });
    if (!r.ok) {
        if (root) ckpt_undo(a->final_dir, a->tmp, a->old, SaveProgress{});
        return r;
    }
    a->error.clear();
    a->done.store(false);
    a->pending = true;
    a->writer = std::thread(ckpt_async_writer, a, root, fault);
    return r;
}

// Rank 0's publication of an agreed asynchronous save, on its own thread (optimizer.bin's
// checksum reads the whole file back: the slowest part of a publication).
static inline void ckpt_async_publisher(AsyncSave* a) {
    SaveProgress progress;
    try {
        KeelDieThrows scope;
        ckpt_publish(a->dir, a->final_dir, a->tmp, a->old, a->state, a->opt_bytes, a->n, a->iteration, nullptr, &progress);
    } catch (const KeelError& e) {
        a->published = SaveResult{false, 0, e.message.empty() ? "an error" : e.message};
        ckpt_undo(a->final_dir, a->tmp, a->old, progress);
    }
    a->publish_done.store(true, std::memory_order_release);
}

// Moves a pending save along; returns true with its outcome in *r when it ended on this rank. Two
// stages: the writes (every rank; once all are done, one small all-gather tells, and the ranks agree
// on the outcome: a failure ends the save on every rank, taken back) and rank 0's publication (its
// own thread; its outcome is rank 0's alone). wait: block until the save has ended. Every rank calls
// it at the same points (the all-gather is collective).
static inline bool ckpt_save_async_poll(AsyncSave* a, const Comm* comm, bool wait, SaveResult* r) {
    bool root = comm->rank == 0;
    if (a->pending) {
        if (!wait) {
            int mine = a->done.load(std::memory_order_acquire) ? 1 : 0;
            std::vector<int> all(comm->size);
            comm_allgather(comm, &mine, sizeof mine, all.data());
            for (int d : all)
                if (!d) return false;
        }
        a->writer.join();
        a->pending = false;
        *r = ckpt_phase(comm, [&] {
            if (!a->error.empty()) keel_die("%s", a->error.c_str());
        });
        if (!r->ok) {
            if (root) ckpt_undo(a->final_dir, a->tmp, a->old, SaveProgress{});
            return true;
        }
        if (!root) return true;  // written and agreed: rank 0 publishes
        a->published = SaveResult{};
        a->publish_done.store(false);
        a->publishing = true;
        a->publisher = std::thread(ckpt_async_publisher, a);
    }
    if (!a->publishing || (!wait && !a->publish_done.load(std::memory_order_acquire))) return false;
    a->publisher.join();
    a->publishing = false;
    *r = a->published;  // (params and opt_copy keep their pages for the next save: ckpt_save_async_reserve)
    return true;
}

// The iteration `latest_checkpointed_iteration.txt` of --load dir names, or -1 if there is no
// checkpoint to resume: dir missing, or holding no `latest` (the first run of a restart loop). Anything
// else that keeps `latest` from being read is refused (exit 1; a --load that is not a directory, exit
// 2): a fresh start would go on to replace the checkpoint that is there.
static inline int64_t ckpt_latest(const std::string& dir) {
    const char* hint = "nothing was written: fix or remove it to start fresh";
    struct stat sb;
    if (stat(dir.c_str(), &sb) != 0) {
        if (errno == ENOENT) return -1;
        keel_die_code(KEEL_EXIT_RUNTIME, hint, "--load %s: cannot be read: %s", dir.c_str(), strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode))
        keel_die_code(KEEL_EXIT_USAGE, "--load names the checkpoint directory (what --save wrote)", "--load %s is not a directory",
                      dir.c_str());
    std::string latest = dir + "/latest_checkpointed_iteration.txt";
    if (lstat(latest.c_str(), &sb) != 0 && errno == ENOENT) return -1;
    FILE* f = fopen(latest.c_str(), "rb");
    char text[64] = {0};
    size_t got = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (!f || ferror(f)) keel_die_code(KEEL_EXIT_RUNTIME, hint, "'%s' exists but cannot be read: %s", latest.c_str(), strerror(errno));
    fclose(f);
    std::string s(text, got);  // one decimal number, surrounding white space allowed (as written: "N\n")
    size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
    std::string num = b == std::string::npos ? "" : s.substr(b, e - b + 1);
    if (num.empty() || got == sizeof text - 1 || num.find_first_not_of("0123456789") != std::string::npos)
        keel_die_code(KEEL_EXIT_RUNTIME, hint, "'%s': does not hold one iteration number (holds '%s')", latest.c_str(),
                      num.substr(0, 24).c_str());
    errno = 0;
    long long it = strtoll(num.c_str(), nullptr, 10);
    if (errno == ERANGE)
        keel_die_code(KEEL_EXIT_RUNTIME, hint, "'%s' holds iteration %s, beyond any iteration (at most %lld)", latest.c_str(),
                      num.c_str(), (long long)INT64_MAX);
    return it;
}

// --save DIR at start-up: created if missing (as a save would), and it must take a file (a probe is
// created and removed), so an unusable directory is refused before the first iteration rather than
// at the first save. Every rank checks: each writes its spans of optimizer.bin.
static inline void ckpt_check_save_dir(const std::string& dir) {
    const char* hint = "--save names a directory keel may create and write checkpoints into";
    struct stat sb;
    if (stat(dir.c_str(), &sb) == 0 && !S_ISDIR(sb.st_mode)) keel_die_code(KEEL_EXIT_USAGE, hint, "--save %s is not a directory", dir.c_str());
    std::string part;
    if (int err = mkdir_p_durable(dir, &part))  // the failure named as --save's
        keel_die_code(KEEL_EXIT_USAGE, hint, "--save %s: cannot create '%s': %s", dir.c_str(), part.c_str(), strerror(err));
    std::string probe = dir + "/.keel_save_probe_XXXXXX";
    int fd = mkstemp(&probe[0]);
    if (fd < 0) keel_die_code(KEEL_EXIT_USAGE, hint, "--save %s: cannot write there: %s", dir.c_str(), strerror(errno));
    close(fd);
    unlink(probe.c_str());
}

// Parses and verifies state.txt into key → value.
static inline std::map<std::string, std::string> ckpt_read_state(const std::string& path) {
    if (!file_exists(path.c_str())) keel_die("checkpoint file '%s': missing", path.c_str());
    std::string t = file_read_all(path.c_str());
    size_t pos = t.rfind("checksum = ");
    if (pos == std::string::npos || (pos > 0 && t[pos - 1] != '\n'))
        keel_die("checkpoint file '%s': no checksum line (truncated?)", path.c_str());
    unsigned long long want = 0;
    if (sscanf(t.c_str() + pos, "checksum = %llx", &want) != 1 || checksum64(t.data(), pos) != want)
        keel_die("checkpoint file '%s': checksum mismatch (corrupt or torn file)", path.c_str());
    std::map<std::string, std::string> kv;
    size_t start = 0;
    while (start < pos) {
        size_t nl = t.find('\n', start);
        std::string line = t.substr(start, nl - start);
        start = nl + 1;
        size_t eq = line.find(" = ");
        if (eq == std::string::npos) keel_die("checkpoint file '%s': malformed line '%s'", path.c_str(), line.c_str());
        kv[line.substr(0, eq)] = line.substr(eq + 3);
    }
    return kv;
}

static inline const std::string& ckpt_get(const std::map<std::string, std::string>& kv, const char* key, const std::string& path) {
    auto it = kv.find(key);
    if (it == kv.end()) keel_die("checkpoint file '%s': missing key '%s'", path.c_str(), key);
    return it->second;
}
static inline long long ckpt_get_i64(const std::map<std::string, std::string>& kv, const char* key, const std::string& path) {
    const std::string& v = ckpt_get(kv, key, path);
    char* end = nullptr;
    errno = 0;
    long long x = strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno == ERANGE) keel_die("checkpoint file '%s': '%s' is not an integer for %s", path.c_str(), v.c_str(), key);
    return x;
}
static inline double ckpt_get_f64(const std::map<std::string, std::string>& kv, const char* key, const std::string& path) {
    const std::string& v = ckpt_get(kv, key, path);
    char* end = nullptr;
    double x = strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(x)) keel_die("checkpoint file '%s': '%s' is not a number for %s", path.c_str(), v.c_str(), key);
    return x;
}

// Loads iteration `iteration` of dir: verifies state.txt and model.bin, refuses a different model
// shape, fills the parameters and *s. The schedule is returned as saved; the caller applies the
// resume rules. *idir_out: the directory read; *opt_layout: the optimizer layout it was saved with
// (the optimizer state is read separately, by ckpt_load_optimizer, when the caller wants it).
static inline void ckpt_load(const std::string& dir, int64_t iteration, float* params, int64_t n, TrainState* s,
                             const GPTConfig* g, const Config* c, std::string* idir_out, std::string* opt_layout) {
    std::string idir = ckpt_iter_dir(dir, iteration);
    struct stat st;
    if (stat(idir.c_str(), &st) != 0 && stat((idir + ".old").c_str(), &st) == 0) idir += ".old";  // crash mid-swap
    std::string spath = idir + "/state.txt";
    auto kv = ckpt_read_state(spath);
    // keys added after the format's first release read as their "nothing happened" value
    const char* later[][2] = {{"spike.lr_factor_through", "0"}, {"spike.loss_window", ""}, {"spike.norm_window", ""},
                              {"spike.rollbacks", ""}, {"data.order", "0"}};
    for (auto& k : later) kv.emplace(k[0], k[1]);
    kv.emplace("model.ffn_hidden_size", std::to_string(4 * (long long)g->channels));  // before --ffn-hidden-size: GPT-2's 4C
    if (ckpt_get(kv, "format", spath) != "keel-checkpoint-1") keel_die("checkpoint file '%s': unknown format", spath.c_str());
    struct { const char* key; long long have; } shape[] = {
        {"model.num_layers", g->num_layers}, {"model.channels", g->channels}, {"model.num_heads", g->num_heads},
        {"model.ffn_hidden_size", gpt_ffn(g)}, {"model.vocab_size", g->vocab_size}, {"model.padded_vocab_size", g->padded_vocab_size},
        {"model.max_seq_len", g->max_seq_len}, {"model.embed_layernorm", g->embed_layernorm}, {"model.alibi", g->alibi},
        {"model.normformer", g->normformer}};
    for (auto& sh : shape) {
        long long saved = ckpt_get_i64(kv, sh.key, spath);
        if (saved != sh.have)
            keel_die_code(KEEL_EXIT_RUNTIME, "resume with the model shape the checkpoint was trained with",
                          "checkpoint '%s' has %s = %lld but this run has %lld: the model shape changed", idir.c_str(),
                          sh.key, saved, sh.have);
    }
    ckpt_read_file(idir + "/model.bin", params, (uint64_t)n * sizeof(float), (uint64_t)n, CKPT_KIND_MODEL);
    auto lay = kv.find("optimizer.layout");
    *opt_layout = lay == kv.end() ? "adam" : lay->second;  // checkpoints from before 8-bit Adam hold Adam state
    *idir_out = idir;
    for (const StateField& f : STATE_FIELDS) {
        char* p = (char*)s + f.offset;
        if (f.is_double) *(double*)p = ckpt_get_f64(kv, f.key, spath); else *(long long*)p = ckpt_get_i64(kv, f.key, spath);
    }
    s->schedule.style = lr_decay_style_parse(ckpt_get(kv, "lr.decay_style", spath));
    s->scaler.enabled = s->scaler.dynamic = false;
    const std::string& mode = ckpt_get(kv, "scaler.mode", spath);
    if (mode == "static" || mode == "dynamic") s->scaler.enabled = true;
    if (mode == "dynamic") s->scaler.dynamic = true;
    if (!s->scaler.enabled && mode != "off") keel_die("checkpoint file '%s': unknown scaler.mode '%s'", spath.c_str(), mode.c_str());
    // the windows are read whole; the caller trims them to this run's --skip-update-window
    rolling_init(&s->guard.loss, INT64_MAX);
    rolling_init(&s->guard.norm, INT64_MAX);
    rolling_from_string(&s->guard.loss, ckpt_get(kv, "guard.loss_window", spath), "checkpoint guard.loss_window");
    rolling_from_string(&s->guard.norm, ckpt_get(kv, "guard.norm_window", spath), "checkpoint guard.norm_window");
    rolling_init(&s->spike.loss, INT64_MAX);
    rolling_init(&s->spike.norm, INT64_MAX);
    rolling_from_string(&s->spike.loss, ckpt_get(kv, "spike.loss_window", spath), "checkpoint spike.loss_window");
    rolling_from_string(&s->spike.norm, ckpt_get(kv, "spike.norm_window", spath), "checkpoint spike.norm_window");
    spike_rollbacks_from_string(&s->spike, ckpt_get(kv, "spike.rollbacks", spath), "checkpoint spike.rollbacks");
    if (s->iteration != iteration) keel_die("checkpoint file '%s': says iteration %lld, expected %lld", spath.c_str(), (long long)s->iteration, (long long)iteration);
    // Trajectory flags that changed since the checkpoint: allowed, but said out loud.
    for (int i = 0; i < NUM_FLAGS; i++) {
        if (FLAGS[i].kind != FK_STATE) continue;
        auto it = kv.find(std::string("flag.") + FLAGS[i].name);
        std::string now = flag_value_string(c, &FLAGS[i]);
        if (it != kv.end() && it->second != now)
            printf(" > note: --%s was %s in the checkpoint, is %s now\n", FLAGS[i].name, it->second.c_str(), now.c_str());
    }
}

// Reads the optimizer state of the checkpoint directory idir into state (bytes long), after checking
// that it was saved with this run's optimizer layout.
static inline void ckpt_load_optimizer(const std::string& idir, const std::string& saved_layout, const std::string& layout,
                                       void* state, size_t bytes, int64_t n) {
    if (saved_layout != layout)
        keel_die_code(KEEL_EXIT_RUNTIME,
                      "resume with the checkpoint's --optimizer/--adam8bit-block-size/--adam8bit-min-size/--stable-embedding, "
                      "or pass --no-load-optim to start the optimizer fresh",
                      "checkpoint '%s' holds optimizer state '%s' but this run's optimizer is '%s'", idir.c_str(),
                      saved_layout.c_str(), layout.c_str());
    ckpt_read_file(idir + "/optimizer.bin", state, bytes, (uint64_t)n, CKPT_KIND_OPTIMIZER);
}

// ---- llm.c GPT-2 model files ---------------------------------------------------------------------
// Header: 256 × int32 — [0] magic 20240326, [1] version (3 = fp32), [2] maxT, [3] V, [4] L, [5] NH,
// [6] C, [7] Vp; then the fp32 tensors in llm.c's order, which is keel's canonical table order.
// Vocabulary padding may differ between the file and keel: the V real rows are mapped, keel's
// padding rows are zero.
enum { LLMC_MAGIC = 20240326, LLMC_VERSION_FP32 = 3, LLMC_VERSION_BF16 = 5 };

struct LlmcHeader { int maxT, V, L, NH, C, Vp; };

static inline LlmcHeader llmc_read_header(const char* path, FILE** out_file) {
    FilePtr file(fopen(path, "rb"));
    FILE* f = file.get();
    if (!f) keel_die("llm.c model file '%s': cannot open: %s", path, strerror(errno));
    int32_t h[256];
    if (fread(h, 4, 256, f) != 256) keel_die("llm.c model file '%s': truncated header", path);
    if (h[0] != LLMC_MAGIC) keel_die("llm.c model file '%s': bad magic %d (expected %d)", path, h[0], LLMC_MAGIC);
    if (h[1] == LLMC_VERSION_BF16) keel_die("llm.c model file '%s': version 5 (bf16) — keel loads fp32 files (version 3)", path);
    if (h[1] != LLMC_VERSION_FP32) keel_die("llm.c model file '%s': unsupported version %d (expected 3)", path, h[1]);
    LlmcHeader r = {h[2], h[3], h[4], h[5], h[6], h[7]};
    if (r.maxT <= 0 || r.V <= 0 || r.L <= 0 || r.NH <= 0 || r.C <= 0 || r.Vp < r.V)
        keel_die("llm.c model file '%s': implausible shape in the header", path);
    // The whole file must be header + the tensors the shape implies: a corrupt header is refused
    // here, before anything is allocated from its numbers.
    // Saturating arithmetic (llmc/flags.h): C up to 2^31 makes 12·C·C overflow int64, and a wrapped
    // product could match the file's size (found by test/fuzz/fuzz_llmc_model).
    int64_t C = r.C, L = r.L;
    int64_t per_layer = size_add(size_mul(12, size_mul(C, C)), 13 * C);
    int64_t floats = size_add(size_add(size_mul(r.Vp, C), size_mul(r.maxT, C)), size_add(size_mul(L, per_layer), 2 * C));
    int64_t expect = size_add(1024, size_mul(4, floats));
    fseek(f, 0, SEEK_END);
    int64_t bytes = ftell(f);
    fseek(f, 1024, SEEK_SET);
    if (bytes != expect)
        keel_die("llm.c model file '%s': %lld bytes, but its header's shape needs %lld (truncated or corrupt)", path,
                 (long long)bytes, (long long)expect);
    if (out_file) *out_file = file.release();
    return r;
}

// The first element of w[0..n) that is NaN or infinite, or -1. Weights read from a file must be finite:
// a NaN makes every gradient non-finite, every update is skipped and the run "trains" to its end.
static inline int64_t weights_first_nonfinite(const float* w, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!std::isfinite(w[i])) return i;
    return -1;
}

static inline void llmc_load(const char* path, float* params, const ParamTable* pt, const GPTConfig* g) {
    FILE* f;
    LlmcHeader h = llmc_read_header(path, &f);
    FilePtr file(f);
    if (h.maxT != g->max_seq_len || h.V != g->vocab_size || h.L != g->num_layers || h.NH != g->num_heads || h.C != g->channels)
        keel_die_code(KEEL_EXIT_USAGE, "pass the file's shape: --num-layers --hidden-size --num-attention-heads --max-position-embeddings --vocab-size",
                      "llm.c model file '%s' is maxT=%d V=%d L=%d NH=%d C=%d, this run is maxT=%d V=%d L=%d NH=%d C=%d", path,
                      h.maxT, h.V, h.L, h.NH, h.C, g->max_seq_len, g->vocab_size, g->num_layers, g->num_heads, g->channels);
    // GPT-2's tensors come from the file; a knob's own tensors (embedding LayerNorm, NormFormer)
    // keep the values the caller initialised; the position table under ALiBi is read and dropped.
    for (int id = 0; id < LLMC_NUM_PARAMS; id++) {
        const ParamTensor* t = &pt->t[id];
        float* dst = params + t->offset_canonical;
        if (id == P_WPE && t->numel == 0) {
            printf("WARNING: llm.c model file '%s': its position embedding is not used under --position-embedding-type alibi\n", path);
            if (fseek(f, (long)((int64_t)h.maxT * h.C * 4), SEEK_CUR) != 0) keel_die("llm.c model file '%s': truncated in wpe", path);
            continue;
        }
        if (id == P_WTE) {  // row mapping across different paddings
            std::vector<float> rows((size_t)h.Vp * h.C);
            if (fread(rows.data(), 4, rows.size(), f) != rows.size()) keel_die("llm.c model file '%s': truncated in wte", path);
            memset(dst, 0, (size_t)t->numel * sizeof(float));
            memcpy(dst, rows.data(), (size_t)h.V * h.C * sizeof(float));
            continue;
        }
        if (fread(dst, 4, (size_t)t->numel, f) != (size_t)t->numel) keel_die("llm.c model file '%s': truncated in %s", path, t->name);
    }
    for (int id = 0; id < LLMC_NUM_PARAMS; id++) {  // (wte: the real rows, as mapped; the padding is zero)
        const ParamTensor* t = &pt->t[id];
        int64_t i = weights_first_nonfinite(params + t->offset_canonical, t->numel);
        if (i >= 0)
            keel_die("llm.c model file '%s': tensor %s holds %g at element %lld: the weights must be finite", path, t->name,
                     params[t->offset_canonical + i], (long long)i);
    }
    char extra;
    if (fread(&extra, 1, 1, f) != 0) keel_die("llm.c model file '%s': trailing bytes (shape mismatch?)", path);
}

static inline void llmc_export(const char* path, const float* params, const ParamTable* pt, const GPTConfig* g) {
    int32_t h[256] = {0};
    h[0] = LLMC_MAGIC; h[1] = LLMC_VERSION_FP32; h[2] = g->max_seq_len; h[3] = g->vocab_size;
    h[4] = g->num_layers; h[5] = g->num_heads; h[6] = g->channels; h[7] = g->padded_vocab_size;
    std::string tmp = std::string(path) + ".tmp";
    FILE* f = fopen_check(tmp.c_str(), "wb");
    fwrite_check(h, 4, 256, f, tmp.c_str());
    for (int id = 0; id < LLMC_NUM_PARAMS; id++)
        fwrite_check(params + pt->t[id].offset_canonical, 4, (size_t)pt->t[id].numel, f, tmp.c_str());
    FILE_CHECK(fflush(f) == 0 && fsync(fileno(f)) == 0, "fsync", tmp.c_str());
    FILE_CHECK(fclose(f) == 0, "fclose", tmp.c_str());
    FILE_CHECK(rename(tmp.c_str(), path) == 0, "rename", tmp.c_str());
    fsync_parent_dir(path);
}
