// fuzz.h — what every libFuzzer target in test/fuzz/ shares (built by `make fuzz`, docs/operations.md#hardening).
//
// Contract: a target feeds one input to one of keel's readers of outside bytes. A refusal is a
// correct outcome: the reader calls keel_die, which under -DKEEL_FUZZ throws KeelError (llmc/common.h)
// and the target catches it. Findings are what libFuzzer and the sanitizers report: a crash, an
// out-of-bounds access, undefined behaviour, a hang (-timeout) or memory past -rss_limit_mb; and a
// target's own invariant check, which calls fuzz_fail (abort) when an accepted input breaks it.
// Readers that take a path read the input from a memfd (no disk, nothing left behind), as
// /proc/self/fd/N: the reader opens it like any file.
#pragma once
#include <fcntl.h>
#include <ftw.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "llmc/common.h"

[[noreturn]] static inline void fuzz_fail(const char* what) {
    fprintf(stderr, "fuzz invariant broken: %s\n", what);
    abort();
}

// The input as a file: created, written and rewound; closed (and freed) with the object.
struct FuzzFile {
    int fd = -1;
    std::string path;
    FuzzFile(const void* data, size_t n, const char* name = "keel_fuzz") {
        fd = memfd_create(name, 0);
        if (fd < 0) { perror("memfd_create"); abort(); }
        for (size_t done = 0; done < n;) {
            ssize_t w = write(fd, (const char*)data + done, n - done);
            if (w <= 0) { perror("write memfd"); abort(); }
            done += (size_t)w;
        }
        path = "/proc/self/fd/" + std::to_string(fd);
    }
    ~FuzzFile() { close(fd); }
    FuzzFile(const FuzzFile&) = delete;
    FuzzFile& operator=(const FuzzFile&) = delete;
};

// A directory of this process for readers that want several files under one name (a Megatron prefix,
// a checkpoint directory): /dev/shm when there is one (memory, not disk), made once per process.
// Removed at exit (a crash leaves it, beside the crash input).
static std::string fuzz_dir_path;
static inline int fuzz_remove_entry(const char* path, const struct stat*, int, struct FTW*) { return remove(path); }
static inline void fuzz_remove_dir() { nftw(fuzz_dir_path.c_str(), fuzz_remove_entry, 16, FTW_DEPTH | FTW_PHYS); }
static inline const std::string& fuzz_dir() {
    if (fuzz_dir_path.empty()) {
        struct stat sb;
        fuzz_dir_path = (stat("/dev/shm", &sb) == 0 ? "/dev/shm" : "/tmp") + std::string("/keel_fuzz.XXXXXX");
        if (!mkdtemp(&fuzz_dir_path[0])) { perror("mkdtemp"); abort(); }
        atexit(fuzz_remove_dir);
    }
    return fuzz_dir_path;
}

static inline void fuzz_write(const std::string& path, const void* data, size_t n) {
    FILE* f = fopen(path.c_str(), "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) { perror(path.c_str()); abort(); }
}

// Readers may read stdin through a path the input names (@/dev/stdin): give them an empty one
// instead of the terminal or the fuzzer's pipe, so such an input ends rather than hangs.
static inline void fuzz_quiet_stdin() {
    int fd = open("/dev/null", O_RDONLY);
    if (fd >= 0) { dup2(fd, 0); close(fd); }
}
