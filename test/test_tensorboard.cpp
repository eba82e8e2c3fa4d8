// test_tensorboard — llmc/tensorboard.h read back by an independent reader written here from the
// format's specification (TFRecord framing + the tensorflow.Event protobuf), sharing no code with
// the writer:
//   - a bitwise CRC-32C (no table) against the published check value crc32c("123456789") =
//     0xE3069283, the masked CRC of length 24 that opens every TensorFlow-written event file, and
//     the writer's table CRC against the bitwise one on random buffers of many lengths;
//   - an event file in a fresh nested directory (created like mkdir -p): its name
//     (events.out.tfevents.<seconds>.<host>.<pid>), every record's framing and both masked CRCs, no
//     trailing bytes, the first event (wall_time, step 0, file_version "brain.Event:2"), and every
//     scalar's wall_time (exact bits), step (negative, INT64_MIN/MAX), tag (spaces, slashes, UTF-8,
//     a 300-byte tag whose length needs a 2-byte varint) and simple_value (the float the writer
//     stores: bits equal, NaN as NaN, -0 as -0), plus the clock-reading overload;
//   - corruption: one flipped byte in a copy on disk, and every single-byte flip of the file in
//     memory, is a CRC mismatch; a truncated file is reported as truncated;
//   - a second writer in the same directory and second gets its own file (no overwrite);
//   - tb_open under a regular file fails with one line naming the path and strerror;
//   - a writer that is not open ignores tb_scalar / tb_flush / tb_close.
#include <dirent.h>
#include <ftw.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "llmc/tensorboard.h"

static int failures = 0;

static void check(bool ok, const char* what, const std::string& detail = "") {
    printf("%-4s %s%s%s\n", ok ? "ok" : "FAIL", what, detail.empty() ? "" : ": ", detail.c_str());
    if (!ok) failures++;
}

// ---- independent reader ---------------------------------------------------------------------------

static uint32_t ref_crc32c(const unsigned char* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

static uint32_t ref_masked(const unsigned char* p, size_t n) {
    uint32_t c = ref_crc32c(p, n);
    return (uint32_t)(((c >> 15) | (c << 17)) + 0xa282ead8u);
}

static uint64_t read_le(const unsigned char* p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

// Splits a TFRecord stream into its records' data; any framing or CRC problem is an error naming
// the offset. The length is used only after its own CRC has been verified.
static bool read_records(const std::string& file, std::vector<std::string>* out, std::string* err) {
    const unsigned char* b = (const unsigned char*)file.data();
    size_t pos = 0;
    out->clear();
    char buf[160];
    while (pos < file.size()) {
        if (file.size() - pos < 12) {
            snprintf(buf, sizeof buf, "truncated header at offset %zu", pos);
            *err = buf;
            return false;
        }
        if (read_le(b + pos + 8, 4) != ref_masked(b + pos, 8)) {
            snprintf(buf, sizeof buf, "length crc mismatch at offset %zu", pos);
            *err = buf;
            return false;
        }
        uint64_t len = read_le(b + pos, 8);
        if (len > file.size() - pos - 12 || file.size() - pos - 12 - len < 4) {
            snprintf(buf, sizeof buf, "truncated record at offset %zu (length %llu)", pos, (unsigned long long)len);
            *err = buf;
            return false;
        }
        const unsigned char* data = b + pos + 12;
        if (read_le(data + len, 4) != ref_masked(data, len)) {
            snprintf(buf, sizeof buf, "data crc mismatch at offset %zu", pos);
            *err = buf;
            return false;
        }
        out->push_back(std::string((const char*)data, len));
        pos += 12 + len + 4;
    }
    return true;
}

// One protobuf field: varint and fixed values in num, length-delimited payloads in bytes.
struct PbField {
    uint32_t field, wire;
    uint64_t num;
    std::string bytes;
};

static bool pb_varint(const std::string& s, size_t* pos, uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*pos >= s.size()) return false;
        unsigned char c = (unsigned char)s[(*pos)++];
        *v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) return true;
    }
    return false;
}

static bool pb_parse(const std::string& s, std::vector<PbField>* fields, std::string* err) {
    fields->clear();
    size_t pos = 0;
    while (pos < s.size()) {
        uint64_t key;
        if (!pb_varint(s, &pos, &key)) { *err = "bad key varint"; return false; }
        PbField f;
        f.field = (uint32_t)(key >> 3);
        f.wire = (uint32_t)(key & 7);
        f.num = 0;
        if (f.wire == 0) {
            if (!pb_varint(s, &pos, &f.num)) { *err = "bad varint value"; return false; }
        } else if (f.wire == 1 || f.wire == 5) {
            size_t n = f.wire == 1 ? 8 : 4;
            if (s.size() - pos < n) { *err = "truncated fixed field"; return false; }
            f.num = read_le((const unsigned char*)s.data() + pos, (int)n);
            pos += n;
        } else if (f.wire == 2) {
            uint64_t len;
            if (!pb_varint(s, &pos, &len) || len > s.size() - pos) { *err = "bad length-delimited field"; return false; }
            f.bytes = s.substr(pos, len);
            pos += len;
        } else {
            *err = "unexpected wire type " + std::to_string(f.wire);
            return false;
        }
        fields->push_back(f);
    }
    return true;
}

struct Ev {
    bool has_wall = false, has_step = false, has_version = false, has_summary = false;
    double wall = 0;
    int64_t step = 0;
    std::string version;
    int n_values = 0;
    bool has_tag = false, has_simple = false;
    std::string tag;
    float simple = 0;
};

static bool decode_event(const std::string& data, Ev* e, std::string* err) {
    std::vector<PbField> fs, ss, vs;
    if (!pb_parse(data, &fs, err)) return false;
    for (const PbField& f : fs) {
        if (f.field == 1 && f.wire == 1) {
            e->has_wall = true;
            memcpy(&e->wall, &f.num, 8);
        } else if (f.field == 2 && f.wire == 0) {
            e->has_step = true;
            e->step = (int64_t)f.num;
        } else if (f.field == 3 && f.wire == 2) {
            e->has_version = true;
            e->version = f.bytes;
        } else if (f.field == 5 && f.wire == 2) {
            e->has_summary = true;
            if (!pb_parse(f.bytes, &ss, err)) return false;
            for (const PbField& s : ss) {
                if (s.field != 1 || s.wire != 2) { *err = "unexpected Summary field " + std::to_string(s.field); return false; }
                e->n_values++;
                if (!pb_parse(s.bytes, &vs, err)) return false;
                for (const PbField& v : vs) {
                    if (v.field == 1 && v.wire == 2) {
                        e->has_tag = true;
                        e->tag = v.bytes;
                    } else if (v.field == 2 && v.wire == 5) {
                        e->has_simple = true;
                        uint32_t u = (uint32_t)v.num;
                        memcpy(&e->simple, &u, 4);
                    } else {
                        *err = "unexpected Value field " + std::to_string(v.field);
                        return false;
                    }
                }
            }
        } else {
            *err = "unexpected Event field " + std::to_string(f.field) + " wire " + std::to_string(f.wire);
            return false;
        }
    }
    return true;
}

// ---- helpers --------------------------------------------------------------------------------------

static std::string slurp(const std::string& path) {
    std::string s;
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return s;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    fclose(f);
    return s;
}

static bool spit(const std::string& path, const std::string& s) {
    FILE* f = fopen(path.c_str(), "wb");
    if (!f) return false;
    bool ok = fwrite(s.data(), 1, s.size(), f) == s.size();
    return fclose(f) == 0 && ok;
}

static std::vector<std::string> list_dir(const std::string& dir) {
    std::vector<std::string> names;
    DIR* d = opendir(dir.c_str());
    if (!d) return names;
    while (struct dirent* e = readdir(d))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names.push_back(e->d_name);
    closedir(d);
    return names;
}

static int rm_entry(const char* path, const struct stat*, int, struct FTW*) { return remove(path); }

static uint32_t fbits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static uint64_t dbits(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }

// ---- tests ----------------------------------------------------------------------------------------

static void test_crc() {
    const char* v = "123456789";
    uint32_t c = ref_crc32c((const unsigned char*)v, 9);
    char buf[64];
    snprintf(buf, sizeof buf, "got 0x%08X", c);
    check(c == 0xE3069283u, "reference bitwise crc32c(\"123456789\") == 0xE3069283", c == 0xE3069283u ? "" : buf);
    check(tb_crc32c(v, 9) == 0xE3069283u, "writer's table crc32c(\"123456789\") == 0xE3069283");
    // TensorFlow's own files start with an Event of 24 bytes (it omits step 0), so their first 12
    // bytes are 18 00 00 00 00 00 00 00 a3 7f 4b 22: a masked-CRC vector from outside this repository.
    const unsigned char len24[8] = {24, 0, 0, 0, 0, 0, 0, 0};
    check(ref_masked(len24, 8) == 0x224b7fa3u && tb_mask_crc(tb_crc32c(len24, 8)) == 0x224b7fa3u,
          "masked crc32c of the length 24 is 0x224b7fa3 (bytes a3 7f 4b 22 of TensorFlow-written files)");
    check(ref_crc32c(nullptr, 0) == 0 && tb_crc32c("", 0) == 0, "crc32c of empty input is 0 (both)");
    std::string data;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    bool same = true;
    for (int n = 0; n < 600; n++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        data.push_back((char)(x >> 24));
        same &= tb_crc32c(data.data(), data.size()) == ref_crc32c((const unsigned char*)data.data(), data.size());
        uint32_t m = tb_mask_crc((uint32_t)x);
        uint32_t c2 = (uint32_t)x;
        same &= m == (uint32_t)(((c2 >> 15) | (c2 << 17)) + 0xa282ead8u);
    }
    check(same, "table crc32c and mask equal the bitwise reference on 600 random buffers (lengths 1..600)");
}

struct Scalar { std::string tag; int64_t step; double value; double wall; };

static void test_roundtrip(const std::string& tmp) {
    std::string dir = tmp + "/runs/a b/tb";  // nested, missing, with a space
    TbWriter w;
    std::string err;
    double t_open0 = tb_now();
    bool opened = tb_open(&w, dir, &err);
    double t_open1 = tb_now();
    check(opened && w.f != nullptr, "tb_open creates the nested directory and the file", err);
    if (!opened) return;

    // the name: events.out.tfevents.<seconds>.<host>.<pid>
    std::vector<std::string> names = list_dir(dir);
    check(names.size() == 1 && dir + "/" + names[0] == w.path, "one file in the directory, at w.path", w.path);
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    std::string name = w.path.substr(dir.size() + 1), prefix = "events.out.tfevents.";
    std::string tail = "." + std::string(host) + "." + std::to_string((long long)getpid());
    bool name_ok = name.compare(0, prefix.size(), prefix) == 0 && name.size() > prefix.size() + tail.size() &&
                   name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    std::string secs = name_ok ? name.substr(prefix.size(), name.size() - prefix.size() - tail.size()) : "";
    long long s = name_ok ? atoll(secs.c_str()) : 0;
    name_ok &= !secs.empty() && secs.find_first_not_of("0123456789") == std::string::npos &&
               s >= (long long)t_open0 && s <= (long long)t_open1;
    check(name_ok, "file name is events.out.tfevents.<unix seconds>.<hostname>.<pid>", name);

    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    std::string long_tag(300, 'x');
    long_tag += "/λ μ";
    std::vector<Scalar> sc = {
        {"lm-loss-training/lm loss", 1, 10.875, 1700000000.25},
        {"lm-loss-training/lm loss vs samples", 512, 10.875, 1700000000.25},
        {"zero", 0, 0.0, 1700000001.0},
        {"negative step", -7, -1.5, 1700000001.5},
        {"large/step max", std::numeric_limits<int64_t>::max(), 1e30, 1700000002.123456789},
        {"large/step min", std::numeric_limits<int64_t>::min(), -0.0, 0.0},
        {"step 2^40", (int64_t)1 << 40, -1e30, -1.0},
        {"nan", 3, nan, 1700000003.0},
        {"inf", 4, inf, 1700000004.0},
        {"-inf", 5, -inf, 1700000005.0},
        {"rounded to float 0.1", 6, 0.1, 1700000006.0},
        {"denormal", 7, 1e-45, 1700000007.0},
        {long_tag, 8, 3.0, 1700000008.0},
    };
    for (const Scalar& x : sc) tb_scalar(&w, x.tag.c_str(), x.step, x.value, x.wall);
    tb_flush(&w);
    check(slurp(w.path).size() > 0, "tb_flush puts the records on disk before close");
    double t_clock0 = tb_now();
    tb_scalar(&w, "clock", 9, 2.0);
    double t_clock1 = tb_now();
    std::string path = w.path;
    tb_close(&w);
    tb_close(&w);  // twice is harmless
    check(w.f == nullptr, "tb_close leaves f null; a second tb_close is a no-op");

    std::string file = slurp(path);
    std::vector<std::string> recs;
    bool framed = read_records(file, &recs, &err);
    check(framed, "every record's framing and both masked CRCs verify, no trailing bytes", err);
    check(recs.size() == sc.size() + 2, "record count: version event + scalars + clock scalar",
          std::to_string(recs.size()) + " records");
    if (!framed || recs.size() != sc.size() + 2) return;

    Ev e0;
    bool dec = decode_event(recs[0], &e0, &err);
    check(dec && e0.has_wall && e0.has_step && e0.step == 0 && e0.has_version && e0.version == "brain.Event:2" && !e0.has_summary,
          "first event: wall_time, step 0, file_version \"brain.Event:2\", no summary", err);
    check(dec && e0.wall >= t_open0 && e0.wall <= t_open1 && (long long)e0.wall == s,
          "first event's wall_time is the open time, and its seconds are the name's");

    for (size_t i = 0; i < sc.size(); i++) {
        Ev e;
        std::string what = "scalar '" + sc[i].tag.substr(0, 40) + (sc[i].tag.size() > 40 ? "...'" : "'") + " step " + std::to_string((long long)sc[i].step);
        if (!decode_event(recs[i + 1], &e, &err)) {
            check(false, what.c_str(), err);
            continue;
        }
        float want = (float)sc[i].value;
        bool value_ok = std::isnan(want) ? std::isnan(e.simple) : fbits(e.simple) == fbits(want);
        char buf[256];
        snprintf(buf, sizeof buf, "wall %.17g step %lld value %.9g (bits %08X) values %d version %d", e.wall, (long long)e.step, (double)e.simple,
                 fbits(e.simple), e.n_values, (int)e.has_version);
        bool ok = e.has_wall && dbits(e.wall) == dbits(sc[i].wall) && e.has_step && e.step == sc[i].step && e.has_summary &&
                  e.n_values == 1 && e.has_tag && e.tag == sc[i].tag && e.has_simple && value_ok && !e.has_version;
        check(ok, what.c_str(), ok ? "" : buf);
    }
    Ev ec;
    bool cok = decode_event(recs.back(), &ec, &err) && ec.tag == "clock" && ec.step == 9 && ec.simple == 2.0f && ec.wall >= t_clock0 &&
               ec.wall <= t_clock1;
    check(cok, "tb_scalar without wall_time stamps the clock's time");
    check(!recs.empty() && recs[1].size() > 0 && (unsigned char)recs[1][0] == 0x09 && (unsigned char)recs[1][9] == 0x10,
          "Event encodes wall_time first (key 0x09, fixed64) then step (key 0x10, varint)");

    // corruption: one byte flipped in a copy on disk
    std::string copy = tmp + "/copy.tfevents";
    std::string bad = file;
    bad[file.size() / 2] ^= 0x20;
    std::string rerr;
    bool rejected = spit(copy, bad) && !read_records(slurp(copy), &recs, &rerr) && rerr.find("crc mismatch") != std::string::npos;
    check(rejected, "one flipped byte in a copy on disk: CRC mismatch", rerr);
    remove(copy.c_str());
    // every single-byte flip, two patterns each: always a CRC mismatch, never a crash or a pass
    size_t missed = 0;
    for (size_t i = 0; i < file.size(); i++)
        for (int pat : {0x01, 0xFF}) {
            std::string b = file;
            b[i] = (char)(b[i] ^ pat);
            std::string e;
            if (read_records(b, &recs, &e) || e.find("crc mismatch") == std::string::npos) missed++;
        }
    check(missed == 0, ("every single-byte flip of the " + std::to_string(file.size()) + "-byte file is a CRC mismatch").c_str(),
          std::to_string(missed) + " missed");
    std::string terr;
    bool trunc = !read_records(file.substr(0, file.size() - 3), &recs, &terr) && terr.find("truncated") != std::string::npos;
    check(trunc, "a truncated file is reported as truncated", terr);

    // a second writer in the same directory (very likely the same second): its own file
    TbWriter w2, w3;
    bool o2 = tb_open(&w2, dir, &err) && tb_open(&w3, dir, &err);
    check(o2 && w2.path != path && w3.path != path && w2.path != w3.path && slurp(path) == file,
          "writers opened in the same directory and second get distinct files; the first is untouched", w2.path + " " + w3.path);
    tb_close(&w2);
    tb_close(&w3);
    std::vector<std::string> r2;
    check(read_records(slurp(w2.path), &r2, &err) && r2.size() == 1, "a writer closed at once holds exactly the version event", err);
}

static void test_open_failure(const std::string& tmp) {
    std::string plain = tmp + "/plain";
    spit(plain, "not a directory\n");
    TbWriter w;
    std::string err;
    bool ok = tb_open(&w, plain + "/sub/dir", &err);
    bool msg = err.find(plain) != std::string::npos && err.find(strerror(ENOTDIR)) != std::string::npos && err.find('\n') == std::string::npos;
    check(!ok && w.f == nullptr && msg, "tb_open under a regular file fails with one line naming the path and strerror", err);
    err.clear();
    ok = tb_open(&w, plain, &err);
    check(!ok && w.f == nullptr && err.find(plain) != std::string::npos, "tb_open on a regular file as the directory fails", err);
    tb_scalar(&w, "ignored", 1, 1.0, 1.0);
    tb_scalar(&w, "ignored", 1, 1.0);
    tb_flush(&w);
    tb_close(&w);
    check(w.f == nullptr && slurp(plain) == "not a directory\n", "tb_scalar / tb_flush / tb_close on a writer that is not open do nothing");
    remove(plain.c_str());
}

// `test_tensorboard FILE`: the independent reader as a tool for test_tensorboard_train.sh — checks
// every record's framing and CRCs, then prints one line per scalar: "<step>\t<value %.9g>\t<tag>".
static int dump(const char* path) {
    std::vector<std::string> recs;
    std::string err;
    if (!read_records(slurp(path), &recs, &err)) {
        fprintf(stderr, "error: %s: %s\n", path, err.c_str());
        return 1;
    }
    for (size_t i = 0; i < recs.size(); i++) {
        Ev e;
        if (!decode_event(recs[i], &e, &err)) {
            fprintf(stderr, "error: %s: record %zu: %s\n", path, i, err.c_str());
            return 1;
        }
        if (i == 0 && (!e.has_version || e.version != "brain.Event:2")) {
            fprintf(stderr, "error: %s: first record is not the version event\n", path);
            return 1;
        }
        if (e.has_tag) printf("%lld\t%.9g\t%s\n", (long long)e.step, (double)e.simple, e.tag.c_str());
    }
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 2) return dump(argv[1]);
    char tmpl[] = "/tmp/test_tensorboard.XXXXXX";
    if (!mkdtemp(tmpl)) {
        printf("FAIL mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    std::string tmp = tmpl;
    test_crc();
    test_roundtrip(tmp);
    test_open_failure(tmp);
    nftw(tmp.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    check(access(tmp.c_str(), F_OK) != 0, "temporary directory removed");
    printf("%s: %d failure%s\n", failures ? "FAIL" : "ok", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
