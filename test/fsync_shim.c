// fsync_shim.c — an LD_PRELOAD library for test_checkpoint_durability: it records, in order, every
// call that decides what survives a power loss, for the files under one directory, and can kill the
// process right after any of them.
//
// Environment:
//   KEEL_SHIM_ROOT=DIR     record only paths inside DIR (an existing directory), and its own fsync
//   KEEL_SHIM_LOG=FILE     append one line per call there (tab-separated, below)
//   KEEL_SHIM_CRASH_AT=K   SIGKILL the process right after the K-th recorded call (1-based)
//
// Lines (ino: the inode the call acted on; pino, spino, dpino: inodes of parent directories):
//   CREATE  ino pino path          a file that did not exist was created (open/fopen)
//   MKDIR   ino pino path
//   WRITE   ino path               its contents may have changed (opened for writing, pwrite,
//                                  write, ftruncate): not durable until the next FSYNC of ino
//   FSYNC   ino path               fsync or fdatasync (a file's data; a directory's entries)
//   RENAME  ino spino dpino src dst old   old: the hex bytes of a small regular file the rename
//                                  replaced ("-" if none), so the test can put it back
// A directory entry (CREATE, MKDIR, RENAME) survives a power loss only once its parent directories
// were fsync'd after it; a file's contents only once the file was fsync'd after its last WRITE.
// stdio's own writes (fwrite) happen inside libc and are not seen, so opening a file for writing
// counts as writing it.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[PATH_MAX];
static size_t root_len;
static int log_fd = -1, inited;
static long crash_at, events;
static __thread int busy;  // the shim's own calls are not recorded

#define REAL(ret, name, ...) static ret (*real_##name)(__VA_ARGS__); if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name)

static void shim_init(void) {
    if (inited) return;
    inited = 1;
    const char* r = getenv("KEEL_SHIM_ROOT");
    const char* l = getenv("KEEL_SHIM_LOG");
    const char* k = getenv("KEEL_SHIM_CRASH_AT");
    if (!r || !l || !realpath(r, root)) return;
    root_len = strlen(root);
    REAL(int, open, const char*, int, ...);
    log_fd = real_open(l, O_WRONLY | O_CREAT | O_APPEND, 0644);
    crash_at = k ? atol(k) : 0;
}

// The absolute path `path` names (relative to the working directory; its parent resolved, so links
// and ".." in it do not hide a path under the root), or "" if it cannot be named.
static void abs_path(const char* path, char out[PATH_MAX]) {
    char joined[PATH_MAX], dir[PATH_MAX], base[PATH_MAX], parent[PATH_MAX];
    out[0] = 0;
    if (path[0] == '/') snprintf(joined, sizeof joined, "%s", path);
    else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) return;
        snprintf(joined, sizeof joined, "%s/%s", cwd, path);
    }
    snprintf(dir, sizeof dir, "%s", joined);
    snprintf(base, sizeof base, "%s", joined);
    if (!realpath(dirname(dir), parent)) return;
    snprintf(out, PATH_MAX, "%s/%s", parent, basename(base));
}

static void fd_path(int fd, char out[PATH_MAX]) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, PATH_MAX - 1);
    out[n > 0 ? n : 0] = 0;
}

// Inside the root, or the root itself (whose fsync makes its entries durable).
static int under_root(const char* p) {
    return log_fd >= 0 && strncmp(p, root, root_len) == 0 && (p[root_len] == '/' || p[root_len] == 0);
}

static unsigned long ino_of(const char* p) {
    struct stat st;
    return lstat(p, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

static unsigned long parent_ino(const char* p) {
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%s", p);
    return ino_of(dirname(d));
}

static void emit(const char* fmt, ...) {
    char line[3 * PATH_MAX + 9000];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
    REAL(ssize_t, write, int, const void*, size_t);
    if (real_write(log_fd, line, (size_t)n) != n) abort();
    if (crash_at > 0 && ++events == crash_at) raise(SIGKILL);
}

static void note_fd(int fd, const char* what) {
    if (busy || fd < 0) return;
    busy = 1;
    shim_init();
    char p[PATH_MAX];
    fd_path(fd, p);
    struct stat st;
    if (under_root(p) && fstat(fd, &st) == 0) emit("%s\t%lu\t%s\n", what, (unsigned long)st.st_ino, p);
    busy = 0;
}

// After an open of `path` (existed: whether it did before), with write access or not.
static void note_open(const char* path, int fd, int existed, int writes) {
    if (busy || fd < 0) return;
    busy = 1;
    shim_init();
    char p[PATH_MAX];
    fd_path(fd, p);
    struct stat st;
    if (under_root(p) && fstat(fd, &st) == 0) {
        if (!existed) emit("CREATE\t%lu\t%lu\t%s\n", (unsigned long)st.st_ino, parent_ino(p), p);
        if (writes) emit("WRITE\t%lu\t%s\n", (unsigned long)st.st_ino, p);
    }
    busy = 0;
    (void)path;
}

static int exists(const char* path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static int open_common(int dirfd, const char* path, int flags, mode_t mode, int at) {
    REAL(int, openat, int, const char*, int, ...);
    int existed = dirfd == AT_FDCWD || path[0] == '/' ? exists(path) : 1;
    int fd = real_openat(at ? dirfd : AT_FDCWD, path, flags, mode);
    int writes = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
    note_open(path, fd, existed, writes);
    return fd;
}

int open(const char* path, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0; va_end(ap);
    return open_common(AT_FDCWD, path, flags, mode, 0);
}
int open64(const char* path, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0; va_end(ap);
    return open_common(AT_FDCWD, path, flags, mode, 0);
}
int openat(int dirfd, const char* path, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0; va_end(ap);
    return open_common(dirfd, path, flags, mode, 1);
}
int openat64(int dirfd, const char* path, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0; va_end(ap);
    return open_common(dirfd, path, flags, mode, 1);
}

static FILE* fopen_common(const char* path, const char* mode, int is64) {
    REAL(FILE*, fopen, const char*, const char*);
    REAL(FILE*, fopen64, const char*, const char*);
    int existed = exists(path);
    FILE* f = is64 ? real_fopen64(path, mode) : real_fopen(path, mode);
    int writes = strchr(mode, 'w') || strchr(mode, 'a') || strchr(mode, '+');
    if (f) note_open(path, fileno(f), existed, writes);
    return f;
}
FILE* fopen(const char* path, const char* mode) { return fopen_common(path, mode, 0); }
FILE* fopen64(const char* path, const char* mode) { return fopen_common(path, mode, 1); }

int fsync(int fd) {
    REAL(int, fsync, int);
    int r = real_fsync(fd);
    if (r == 0) note_fd(fd, "FSYNC");
    return r;
}
int fdatasync(int fd) {
    REAL(int, fdatasync, int);
    int r = real_fdatasync(fd);
    if (r == 0) note_fd(fd, "FSYNC");
    return r;
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
    REAL(ssize_t, pwrite, int, const void*, size_t, off_t);
    ssize_t r = real_pwrite(fd, buf, n, off);
    note_fd(fd, "WRITE");
    return r;
}
ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
    REAL(ssize_t, pwrite64, int, const void*, size_t, off_t);
    ssize_t r = real_pwrite64(fd, buf, n, off);
    note_fd(fd, "WRITE");
    return r;
}
ssize_t write(int fd, const void* buf, size_t n) {
    REAL(ssize_t, write, int, const void*, size_t);
    ssize_t r = real_write(fd, buf, n);
    if (fd > 2) note_fd(fd, "WRITE");
    return r;
}
int ftruncate(int fd, off_t len) {
    REAL(int, ftruncate, int, off_t);
    int r = real_ftruncate(fd, len);
    note_fd(fd, "WRITE");
    return r;
}
int ftruncate64(int fd, off_t len) {
    REAL(int, ftruncate64, int, off_t);
    int r = real_ftruncate64(fd, len);
    note_fd(fd, "WRITE");
    return r;
}

int mkdir(const char* path, mode_t mode) {
    REAL(int, mkdir, const char*, mode_t);
    int r = real_mkdir(path, mode);
    if (r == 0 && !busy) {
        busy = 1;
        shim_init();
        char p[PATH_MAX];
        abs_path(path, p);
        if (under_root(p)) emit("MKDIR\t%lu\t%lu\t%s\n", ino_of(p), parent_ino(p), p);
        busy = 0;
    }
    return r;
}

// Renames (AT_FDCWD or absolute paths, as keel calls them): the replaced file's bytes are kept in
// the line when it is small, so the test can undo the rename.
static int rename_common(const char* from, const char* to, unsigned flags) {
    REAL(int, renameat2, int, const char*, int, const char*, unsigned);
    if (busy) return real_renameat2(AT_FDCWD, from, AT_FDCWD, to, flags);
    busy = 1;
    shim_init();
    char src[PATH_MAX], dst[PATH_MAX], old[2 * 4096 + 2] = "-";
    abs_path(from, src);
    abs_path(to, dst);
    int watched = under_root(src) || under_root(dst);
    unsigned long ino = ino_of(src), spino = parent_ino(src), dpino = parent_ino(dst);
    struct stat st;
    if (watched && lstat(dst, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= 4096) {
        REAL(int, open, const char*, int, ...);
        REAL(ssize_t, read, int, void*, size_t);
        int fd = real_open(dst, O_RDONLY);
        unsigned char b[4096];
        ssize_t n = fd >= 0 ? real_read(fd, b, sizeof b) : -1;
        if (fd >= 0) close(fd);
        if (n >= 0) {
            for (ssize_t i = 0; i < n; i++) sprintf(old + 2 * i, "%02x", b[i]);
            if (n == 0) strcpy(old, "=");  // an empty file
        }
    }
    int r = real_renameat2(AT_FDCWD, from, AT_FDCWD, to, flags);
    if (r == 0 && watched) {
        if (flags & RENAME_EXCHANGE) emit("EXCHANGE\t%lu\t%lu\t%lu\t%s\t%s\t-\n", ino, spino, dpino, src, dst);
        else emit("RENAME\t%lu\t%lu\t%lu\t%s\t%s\t%s\n", ino, spino, dpino, src, dst, old);
    }
    busy = 0;
    return r;
}
int rename(const char* from, const char* to) { return rename_common(from, to, 0); }
int renameat(int fd1, const char* from, int fd2, const char* to) {
    REAL(int, renameat, int, const char*, int, const char*);
    if (fd1 == AT_FDCWD && fd2 == AT_FDCWD) return rename_common(from, to, 0);
    return real_renameat(fd1, from, fd2, to);
}
int renameat2(int fd1, const char* from, int fd2, const char* to, unsigned flags) {
    REAL(int, renameat2, int, const char*, int, const char*, unsigned);
    if (fd1 == AT_FDCWD && fd2 == AT_FDCWD) return rename_common(from, to, flags);
    return real_renameat2(fd1, from, fd2, to, flags);
}
