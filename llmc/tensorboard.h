// tensorboard.h — scalar metrics as a TensorBoard event file ("tfevents"), so `tensorboard --logdir`
// plots a run's curves (loss, lr, grad norm, ...) next to Megatron-DeepSpeed runs that log the same
// tags. Written from the format's specification with no TensorFlow or protobuf library: the trainer
// must build with a bare C++17 compiler.
//
// File: DIR/events.out.tfevents.<unix seconds>.<hostname>.<pid>, created new (O_EXCL: an existing
// file is never overwritten; a name already taken gets ".1", ".2", ... appended, which TensorBoard
// still picks up because it matches on "tfevents"). TensorBoard reads every such file of a
// directory, so one run = one file, and a resumed run simply adds a second file beside the first.
//
// Record framing (TFRecord), everything little-endian:
//   uint64 length of data | uint32 masked_crc32c(the 8 length bytes) | data | uint32 masked_crc32c(data)
// crc32c is CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF);
// masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 in uint32 arithmetic. The length has its own CRC
// so that a reader never trusts a corrupted length and runs off into the file.
//
// Each record's data is one tensorflow.Event protobuf message, encoded by hand:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first record is { wall_time, step 0, file_version "brain.Event:2" }: TensorBoard uses it to
// recognise the file's format version. Step 0 is encoded explicitly (proto3 would omit a zero);
// parsers accept either.
//
// Functions:
//   tb_open    creates DIR like `mkdir -p`, opens a new event file, writes the version event; on
//              failure returns false and a one-line message naming the path and strerror.
//   tb_scalar  appends one Event with one simple_value (stored as float: that is the field's type,
//              so a double loses precision here exactly as in every other TensorBoard writer).
//              Without wall_time it reads the real-time clock.
//   tb_flush   hands buffered records to the kernel, so a live TensorBoard sees them; TensorBoard
//              tolerates a torn last record (it waits for the rest), so flushing per log interval
//              rather than per record is safe.
//   tb_close   flushes and closes; safe to call twice. tb_close_discard_empty also removes a file
//              that holds no event beside the version record (a run that logged nothing).
// A writer that is not open (f == nullptr) ignores tb_scalar/tb_flush/tb_close, so a trainer keeps
// one TbWriter and calls it unconditionally whether or not event files were requested. Write errors
// after open are reported once on stderr and do not stop training: metrics are not worth a run.
// One writer per process (rank 0 in a multi-rank run); a TbWriter is not thread-safe.
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

struct TbWriter {
    FILE* f = nullptr;
    std::string path;
    bool write_failed = false;  // set at the first failed write, so the warning is printed once
    int64_t scalars = 0;        // events written after the version record
};

// ---- CRC-32C ------------------------------------------------------------------------------------

static inline uint32_t tb_crc32c(const void* data, size_t n) {
    struct Table {
        uint32_t t[256];
        Table() {
            for (uint32_t i = 0; i < 256; i++) {
                uint32_t c = i;
                for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
                t[i] = c;
            }
        }
    };
    static const Table table;  // built at first use; C++11 makes the initialisation thread-safe
    const unsigned char* p = (const unsigned char*)data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table.t[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

// The mask keeps a CRC stored inside data that is itself CRC'd from weakening the outer check.
static inline uint32_t tb_mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

// ---- protobuf encoding --------------------------------------------------------------------------

enum { TB_WIRE_VARINT = 0, TB_WIRE_FIXED64 = 1, TB_WIRE_LEN = 2, TB_WIRE_FIXED32 = 5 };

static inline void tb_put_varint(std::string* out, uint64_t v) {
    while (v >= 0x80) {
        out->push_back((char)(unsigned char)(v | 0x80));
        v >>= 7;
    }
    out->push_back((char)(unsigned char)v);
}

static inline void tb_put_tag(std::string* out, int field, int wire) { tb_put_varint(out, ((uint64_t)field << 3) | (uint64_t)wire); }

// Byte by byte rather than memcpy so the file is little-endian whatever the host is.
static inline void tb_put_le(std::string* out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) out->push_back((char)(unsigned char)(v >> (8 * i)));
}

static inline void tb_put_bytes(std::string* out, int field, const std::string& bytes) {
    tb_put_tag(out, field, TB_WIRE_LEN);
    tb_put_varint(out, bytes.size());
    out->append(bytes);
}

static inline void tb_put_double(std::string* out, int field, double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    tb_put_tag(out, field, TB_WIRE_FIXED64);
    tb_put_le(out, u, 8);
}

static inline void tb_put_float(std::string* out, int field, float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    tb_put_tag(out, field, TB_WIRE_FIXED32);
    tb_put_le(out, u, 4);
}

// int64 is a plain varint of the two's-complement bits (not zigzag): a negative step takes 10 bytes.
static inline void tb_put_int64(std::string* out, int field, int64_t v) {
    tb_put_tag(out, field, TB_WIRE_VARINT);
    tb_put_varint(out, (uint64_t)v);
}

// ---- records ------------------------------------------------------------------------------------

static inline void tb_write_record(TbWriter* w, const std::string& data) {
    if (!w->f) return;
    std::string rec;
    rec.reserve(data.size() + 16);
    tb_put_le(&rec, data.size(), 8);
    tb_put_le(&rec, tb_mask_crc(tb_crc32c(rec.data(), 8)), 4);
    rec.append(data);
    tb_put_le(&rec, tb_mask_crc(tb_crc32c(data.data(), data.size())), 4);
    if (fwrite(rec.data(), 1, rec.size(), w->f) != rec.size() && !w->write_failed) {
        w->write_failed = true;
        fprintf(stderr, "warning: tensorboard: write to '%s' failed: %s (later events may be lost)\n", w->path.c_str(), strerror(errno));
    }
}

static inline double tb_now() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void tb_scalar(TbWriter* w, const char* tag, int64_t step, double value, double wall_time) {
    if (!w->f) return;
    w->scalars++;
    std::string val, summary, event;
    tb_put_bytes(&val, 1, tag);
    tb_put_float(&val, 2, (float)value);
    tb_put_bytes(&summary, 1, val);
    tb_put_double(&event, 1, wall_time);
    tb_put_int64(&event, 2, step);
    tb_put_bytes(&event, 5, summary);
    tb_write_record(w, event);
}

static inline void tb_scalar(TbWriter* w, const char* tag, int64_t step, double value) { tb_scalar(w, tag, step, value, tb_now()); }

static inline void tb_flush(TbWriter* w) {
    if (w->f && fflush(w->f) != 0 && !w->write_failed) {
        w->write_failed = true;
        fprintf(stderr, "warning: tensorboard: flush of '%s' failed: %s (later events may be lost)\n", w->path.c_str(), strerror(errno));
    }
}

static inline void tb_close(TbWriter* w) {
    if (!w->f) return;
    tb_flush(w);
    if (fclose(w->f) != 0 && !w->write_failed) {
        w->write_failed = true;
        fprintf(stderr, "warning: tensorboard: close of '%s' failed: %s\n", w->path.c_str(), strerror(errno));
    }
    w->f = nullptr;
}

// Closes; a file with no scalar in it is removed (true then), so a run that logged nothing (a
// finished run started again) leaves no empty event file beside the real ones.
static inline bool tb_close_discard_empty(TbWriter* w) {
    if (!w->f) return false;
    bool empty = w->scalars == 0;
    tb_close(w);
    return empty && unlink(w->path.c_str()) == 0;
}

// ---- open ---------------------------------------------------------------------------------------

// mkdir -p, but reporting instead of dying: a bad --tensorboard-dir is the caller's to judge.
static inline bool tb_mkdirs(const std::string& dir, std::string* err) {
    for (size_t i = 1; i <= dir.size(); i++) {
        if (i < dir.size() && dir[i] != '/') continue;
        std::string part = dir.substr(0, i);
        if (mkdir(part.c_str(), 0755) == 0 || errno == EEXIST) continue;
        if (err) *err = "tensorboard: cannot create directory '" + part + "': " + strerror(errno);
        return false;
    }
    return true;
}

static inline bool tb_open(TbWriter* w, const std::string& dir, std::string* err) {
    w->f = nullptr;
    w->path.clear();
    w->write_failed = false;
    w->scalars = 0;
    if (dir.empty()) {
        if (err) *err = "tensorboard: empty directory name";
        return false;
    }
    if (!tb_mkdirs(dir, err)) return false;
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    for (char* c = host; *c; c++)
        if (*c == '/') *c = '_';  // a hostname is one path component, never a subdirectory
    double now = tb_now();
    std::string base = dir + "/events.out.tfevents." + std::to_string((long long)now) + "." + host + "." + std::to_string((long long)getpid());
    int fd = -1;
    std::string path;
    // Same process, same second (a second writer, a reopened one): a new suffix, never an overwrite.
    for (int n = 0; n < 1000 && fd < 0; n++) {
        path = n == 0 ? base : base + "." + std::to_string(n);
        fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST) break;
    }
    FILE* f = fd >= 0 ? fdopen(fd, "wb") : nullptr;
    if (!f) {
        if (err) *err = "tensorboard: cannot create '" + path + "': " + strerror(errno);
        if (fd >= 0) close(fd);
        return false;
    }
    w->f = f;
    w->path = path;
    std::string event;
    tb_put_double(&event, 1, now);
    tb_put_int64(&event, 2, 0);
    tb_put_bytes(&event, 3, "brain.Event:2");
    tb_write_record(w, event);
    tb_flush(w);  // the version record on disk at once: TensorBoard recognises the file from the start
    return true;
}
