// common.h — the one family of error checks and the small file helpers every part of keel uses.
//
// Contract: every failure leaves through keel_die(), which prints one line naming the problem
// (plus an optional hint line saying what to do) and exits with a non-zero status. Library errors
// (fopen, fread, ...) name the failing call, file:line and the system's error string.
// Exit codes: 1 = runtime failure (I/O, corrupt input), 2 = bad command line (docs/internals.md#flags).
// Fuzz builds (-DKEEL_FUZZ, test/fuzz/): keel_die throws KeelError instead of exiting, so a fuzz target
// catches a refusal (a correct outcome) and goes on to the next input. Normal builds never throw.
#pragma once
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <memory>
#include <string>
#include <vector>

enum { KEEL_EXIT_RUNTIME = 1, KEEL_EXIT_USAGE = 2 };

// The rank a launcher gave this process, from its environment (-1: not launched by one). Read from
// the environment because a flag error can come before MPI is initialised (and in tools without it).
static inline int keel_launcher_rank() {
    static const char* const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID"};
    for (const char* v : vars)
        if (const char* s = getenv(v)) return atoi(s);
    return -1;
}

// The error line (and hint) in one write. Under a launcher a newline goes first: the launcher
// forwards stdout and stderr separately and may cut a stdout line anywhere (the flags printout
// arrives in chunks), so the error starts a line of its own rather than landing mid-line.
// rank >= 0: the line names the rank that meets the error (one that only it meets).
static inline void keel_vprint_error(const char* hint, const char* fmt, va_list ap, int rank = -1) {
    fflush(stdout);
    char body[2048];
    vsnprintf(body, sizeof body, fmt, ap);
    std::string text = keel_launcher_rank() >= 0 ? "\nerror: " : "error: ";
    if (rank >= 0) text += "rank " + std::to_string(rank) + ": ";
    text += body;
    text += "\n";
    if (hint) text += std::string("hint: ") + hint + "\n";
    for (size_t done = 0; done < text.size();) {
        ssize_t w = write(STDERR_FILENO, text.data() + done, text.size() - done);
        if (w <= 0) break;  // nowhere left to report to
        done += (size_t)w;
    }
}

#ifdef KEEL_FUZZ
struct KeelError { int code; std::string message; };
// The message is still formatted: a format argument that reads out of bounds is a finding too.
#define KEEL_THROW_ERROR(code, fmt, ap)         \
    do {                                        \
        char buf_[1024];                        \
        vsnprintf(buf_, sizeof buf_, fmt, ap);  \
        va_end(ap);                             \
        throw KeelError{code, buf_};            \
    } while (0)
#endif

[[noreturn]] static inline void keel_die_code(int code, const char* hint, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
#ifdef KEEL_FUZZ
    KEEL_THROW_ERROR(code, fmt, ap);
#endif
    keel_vprint_error(hint, fmt, ap);
    va_end(ap);
    exit(code);
}

// How long a rank > 0 waits for rank 0 to report an error they share and end the job.
enum { KEEL_ROOT_ERROR_WAIT_S = 30 };

// A rank > 0 that knows rank 0 reports the error (a refusal rank 0 decided and broadcast) exits
// only after this wait, silently: a launcher that sees any rank exit kills the rest, and a rank > 0
// that exited first could take rank 0 down before its line was written. Rank 0's exit ends the job
// long before the wait does.
[[noreturn]] static inline void keel_exit_after_root(int code) {
    fflush(stdout);
    sleep(KEEL_ROOT_ERROR_WAIT_S);
    exit(code);
}

// A flag error (exit 2) comes from the command line, which every rank shares (the trainer checks
// that they agree), so under a launcher only rank 0 prints it; the other ranks wait for rank 0 to
// end the job (keel_exit_after_root) instead of racing its line. An error only a rank > 0 meets
// (rank 0 goes on, and blocks in the next collective) is printed by that rank after the wait.
// Errors that can differ between ranks (a directory, a file, a device) use keel_die_code and stay
// per rank.
[[noreturn]] static inline void keel_flag_error(const char* hint, const char* fmt, ...) {
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
#ifdef KEEL_FUZZ
    KEEL_THROW_ERROR(KEEL_EXIT_USAGE, fmt, ap);
#endif
    int rank = keel_launcher_rank();
    if (rank > 0) sleep(KEEL_ROOT_ERROR_WAIT_S);
    keel_vprint_error(hint, fmt, ap, rank > 0 ? rank : -1);
    va_end(ap);
    exit(KEEL_EXIT_USAGE);
}
#define keel_die(...) keel_die_code(KEEL_EXIT_RUNTIME, nullptr, __VA_ARGS__)
#define keel_usage_error(...) keel_flag_error("run with -h for the list of flags", __VA_ARGS__)

// FILE_CHECK(cond, path): a failed file operation, with the system's reason.
#define FILE_CHECK(cond, what, path)                                                          \
    do {                                                                                      \
        if (!(cond)) keel_die("%s '%s' failed: %s (%s:%d)", what, path, strerror(errno),      \
                              __FILE__, __LINE__);                                            \
    } while (0)

// A FILE closed when its owner goes out of scope: a reader that refuses its input leaves no open
// file behind when keel_die throws (KEEL_FUZZ), where exit() would have closed it.
struct FileCloser { void operator()(FILE* f) const { fclose(f); } };
typedef std::unique_ptr<FILE, FileCloser> FilePtr;

static inline FILE* fopen_check(const char* path, const char* mode) {
    FILE* f = fopen(path, mode);
    FILE_CHECK(f != nullptr, "fopen", path);
    return f;
}

static inline void fwrite_check(const void* p, size_t size, size_t n, FILE* f, const char* path) {
    FILE_CHECK(fwrite(p, size, n, f) == n, "fwrite", path);
}

// Durability: a file's bytes survive a power loss once it is fsync'd, a rename (or a new entry) once
// its directory is. fsync_path syncs a file or directory by name; fsync_parent_dir the directory
// that holds `path` (its entries: a rename that publishes a file is durable after this).
static inline void fsync_path(const char* path) {
    int fd = open(path, O_RDONLY);
    FILE_CHECK(fd >= 0, "open for fsync", path);
    FILE_CHECK(fsync(fd) == 0, "fsync", path);
    close(fd);
}
static inline void fsync_parent_dir(const std::string& path) {
    size_t slash = path.rfind('/');
    fsync_path(slash == std::string::npos ? "." : path.substr(0, slash ? slash : 1).c_str());
}

// Reads a whole file; dies naming the file if it cannot. With max_bytes, stops after max_bytes + 1
// bytes (a caller that finds more refuses the file: /dev/zero as an @file must not fill memory).
static inline std::string file_read_all(const char* path, size_t max_bytes = SIZE_MAX) {
    FilePtr f(fopen_check(path, "rb"));
    std::string s;
    char buf[1 << 16];
    size_t n;
    while (s.size() <= max_bytes && (n = fread(buf, 1, sizeof buf, f.get())) > 0) s.append(buf, n);
    FILE_CHECK(!ferror(f.get()), "fread", path);
    if (s.size() > max_bytes) s.resize(max_bytes + 1);
    return s;
}

// The shortest decimal text that reads back as the same double (like Python's repr).
static inline std::string double_repr(double x) {
    char buf[40];
    if (x == std::floor(x) && std::fabs(x) < 1e15) {  // whole numbers read as written: 40, not 4e+01
        snprintf(buf, sizeof buf, "%.0f", x);
        return buf;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (strtod(buf, nullptr) == x) break;
    }
    return buf;
}

// mkdir -p: creates every missing directory of `path`.
static inline void mkdir_p(const std::string& path) {
    for (size_t i = 1; i <= path.size(); i++) {
        if (i == path.size() || path[i] == '/') {
            std::string part = path.substr(0, i);
            if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) keel_die("mkdir '%s' failed: %s", part.c_str(), strerror(errno));
        }
    }
}

static inline bool file_exists(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return false;
    fclose(f);
    return true;
}
