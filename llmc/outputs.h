// outputs.h — no run destroys or mixes into another run's files.
//
// A run writes the checkpoints of --save DIR, the --metrics-file records, the event files of
// --tensorboard-dir and the exports (--export-llmc FILE, --export-hf DIR). Any of them may already
// hold what an earlier run wrote. Rank 0 decides at start-up, before anything is written, which
// run the files there belong to:
//   - no --load: a new run. An output that holds earlier files is refused (exit 2, one line naming
//     it, what it holds and the way out) unless --start-over, which moves them aside (below).
//   - --load with a checkpoint: the run continues. --save must be the --load directory or hold no
//     checkpoint; the metrics records up to the loaded iteration are kept and later ones (from an
//     attempt that died before its next save) moved aside (log.h logger_keep_through); the
//     TensorBoard files stay and a new one is added beside; an export is replaced at the end by this
//     run's (the checkpoint it was made from is in --save).
//   - --load that holds no checkpoint yet (a restart loop's first start): a new run under the same
//     names, so what is there is moved aside with a note instead of refused — except a --save other
//     than --load that holds checkpoints: refused, since a mistyped --load looks just like this.
// Nothing is ever deleted. Moved aside means renamed (same filesystem, atomic per entry) to the first
// free N of:
//   --save DIR               iter_*, latest_checkpointed_iteration.txt  → DIR/previous_run_N/  (a
//                            checkpoint directory again: --load DIR/previous_run_N resumes that run)
//   --tensorboard-dir DIR    its event files                            → DIR/previous_run_N/  (a run of
//                            its own in TensorBoard, which reads subdirectories)
//   --metrics-file m.jsonl   the file (or the records moved out of it)  → m.previous_run_N.jsonl
//   --export-llmc m.bin      → m.previous_run_N.bin;   --export-hf DIR  → DIR.previous_run_N
#pragma once
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include "llmc/common.h"
#include "llmc/flags.h"

static inline std::string output_strip_slashes(const std::string& path) {
    std::string p = path;
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    return p;
}

static inline bool output_exists(const std::string& path) {
    struct stat sb;
    return lstat(path.c_str(), &sb) == 0;
}

// The first free name of head N tail, N = 1, 2, ...
static inline std::string output_first_free(const std::string& head, const std::string& tail) {
    for (int n = 1;; n++) {
        std::string name = head + std::to_string(n) + tail;
        if (!output_exists(name)) return name;
    }
}

// Where a file goes aside: ".previous_run_N" before the extension of its last component
// (m.jsonl → m.previous_run_1.jsonl), or after the name where it has none.
static inline std::string output_aside_file(const std::string& path) {
    std::string p = output_strip_slashes(path);
    size_t slash = p.rfind('/'), dot = p.rfind('.');
    bool ext = dot != std::string::npos && dot > (slash == std::string::npos ? 0 : slash + 1);
    return ext ? output_first_free(p.substr(0, dot) + ".previous_run_", p.substr(dot)) : output_first_free(p + ".previous_run_", "");
}

static inline void output_rename(const std::string& from, const std::string& to) {
    if (rename(from.c_str(), to.c_str()) != 0) keel_die("moving '%s' aside to '%s' failed: %s", from.c_str(), to.c_str(), strerror(errno));
}

// The entries of dir whose name `mine` accepts, sorted (none when dir is missing or unreadable: the
// caller's later open names that problem).
static inline std::vector<std::string> output_dir_entries(const std::string& dir, bool (*mine)(const std::string&)) {
    std::vector<std::string> names;
    DIR* d = opendir(dir.c_str());
    if (!d) return names;
    while (struct dirent* e = readdir(d))
        if (mine(e->d_name)) names.push_back(e->d_name);
    closedir(d);
    std::sort(names.begin(), names.end());
    return names;
}

// What a checkpoint save writes into --save (published, in progress or left by a crash).
static inline bool output_is_checkpoint_entry(const std::string& name) {
    return name.rfind("iter_", 0) == 0 || name.rfind("latest_checkpointed_iteration.txt", 0) == 0;
}
// A TensorBoard event file (TensorBoard itself matches "tfevents" in the name).
static inline bool output_is_event_file(const std::string& name) { return name.find("tfevents") != std::string::npos; }

// "checkpoints up to iteration 4" from `latest`, read leniently (this is a description, not a load).
static inline std::string output_describe_checkpoints(const std::string& dir, const std::vector<std::string>& names) {
    std::string latest = output_strip_slashes(dir) + "/latest_checkpointed_iteration.txt";
    if (FILE* f = fopen(latest.c_str(), "rb")) {  // (a directory opens, then reads nothing)
        char text[64] = {0};
        size_t got = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        long long it = -1;
        if (got > 0 && sscanf(text, "%lld", &it) == 1) return "checkpoints up to iteration " + std::to_string(it);
    }
    return std::to_string(names.size()) + " checkpoint entr" + (names.size() == 1 ? "y" : "ies") + " (" + names[0] +
           ", no readable latest_checkpointed_iteration.txt)";
}

// The records of a JSONL file ("" when it is missing or empty): "6 records up to iteration 4".
static inline std::string output_describe_metrics(const std::string& path) {
    std::string text = file_read_all(path.c_str());
    long long records = 0, last = -1;
    for (size_t pos = 0; pos < text.size();) {
        size_t nl = text.find('\n', pos);
        std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
        pos = nl == std::string::npos ? text.size() : nl + 1;
        long long it;
        records++;
        if (sscanf(line.c_str(), "{\"iteration\": %lld", &it) == 1) last = std::max(last, it);
    }
    if (records == 0) return "";
    return std::to_string(records) + " record" + (records == 1 ? "" : "s") +
           (last >= 0 ? " up to iteration " + std::to_string(last) : "");
}

// True when a and b name the same directory (both exist and are one inode, or read the same).
static inline bool output_same_dir(const std::string& a, const std::string& b) {
    struct stat sa, sb;
    if (stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return output_strip_slashes(a) == output_strip_slashes(b);
}

// One output that holds an earlier run's files: what it is, what it holds, and how to move it aside.
struct OutputClaim {
    std::string flag, path, holds;  // "--save", "runs/a", "checkpoints up to iteration 4"
    std::vector<std::string> entries;  // a directory's entries to move into path/previous_run_N/; empty: path itself
    bool is_file;                      // path itself is a file: m.previous_run_N.jsonl
};

// Where o goes: a directory's entries into o.path/previous_run_N/, anything else beside itself.
static inline std::string output_claim_aside(const OutputClaim& o) {
    if (!o.entries.empty()) return output_first_free(output_strip_slashes(o.path) + "/previous_run_", "");
    return o.is_file ? output_aside_file(o.path) : output_first_free(output_strip_slashes(o.path) + ".previous_run_", "");
}

static inline void output_claim_move(const OutputClaim& o) {
    std::string to = output_claim_aside(o);
    if (o.entries.empty()) {
        output_rename(output_strip_slashes(o.path), to);
    } else {
        if (mkdir(to.c_str(), 0755) != 0) keel_die("mkdir '%s' failed: %s", to.c_str(), strerror(errno));
        for (const std::string& n : o.entries) output_rename(output_strip_slashes(o.path) + "/" + n, to + "/" + n);
        to += "/";
    }
    printf("moved aside: %s %s held %s; now in %s\n", o.flag.c_str(), o.path.c_str(), o.holds.c_str(), to.c_str());
}

// A refusal: the error line and its hint ("" error: none).
struct OutputsVerdict { std::string error, hint; };

// Rank 0, at start-up, before anything is written (the other ranks wait for its verdict): the rules
// at the top of this file. load_it: the iteration --load resumes (-1: none, or no --load). Returns the
// refusal, having written nothing; or moves the earlier files aside (saying so) and returns none.
static inline OutputsVerdict outputs_claim(const Config* c, int64_t load_it) {
    bool has_load = !c->load.empty(), resumes = has_load && load_it >= 0;
    std::vector<OutputClaim> found;  // earlier files this run would mix into or replace
    if (!c->save.empty()) {
        std::vector<std::string> e = output_dir_entries(c->save, output_is_checkpoint_entry);
        bool own = has_load && output_same_dir(c->load, c->save);
        if (!e.empty() && !(own && resumes)) {  // (own without a checkpoint: leftovers of a save that never published)
            OutputClaim o{"--save", c->save, output_describe_checkpoints(c->save, e), e, false};
            if (!own && !c->start_over) {
                std::string why = !has_load ? "this run does not resume from them (no --load " + c->save + ")"
                                  : !output_exists(c->load) ? "--load " + c->load + " does not exist (a typo?)"
                                                             : "this run resumes from --load " + c->load + ", not from them";
                return {"--save " + c->save + " holds " + o.holds + ", but " + why + ": resume with --load " + c->save +
                            ", or name a new --save directory",
                        "--start-over starts a new run there instead, moving them aside into " + output_claim_aside(o) + "/"};
            }
            found.push_back(o);
        }
    }
    if (!c->metrics_file.empty() && !has_load && output_exists(c->metrics_file)) {  // under --load: log.h logger_keep_through
        std::string holds = output_describe_metrics(c->metrics_file);
        if (!holds.empty()) found.push_back({"--metrics-file", c->metrics_file, holds, {}, true});
    }
    if (!c->tensorboard_dir.empty() && !resumes) {
        std::vector<std::string> e = output_dir_entries(c->tensorboard_dir, output_is_event_file);
        if (!e.empty())
            found.push_back({"--tensorboard-dir", c->tensorboard_dir,
                             std::to_string(e.size()) + " event file" + (e.size() == 1 ? "" : "s") + " (" + e[0] + ")", e, false});
    }
    if (!c->export_llmc.empty() && !resumes && output_exists(c->export_llmc))
        found.push_back({"--export-llmc", c->export_llmc, "an earlier export", {}, true});
    if (!c->export_hf.empty() && !resumes) {
        std::vector<std::string> e = output_dir_entries(c->export_hf, [](const std::string& n) { return n != "." && n != ".."; });
        if (!e.empty()) found.push_back({"--export-hf", c->export_hf, "an earlier export (" + e[0] + ", ...)", {}, false});
    }
    for (const OutputClaim& o : found)
        if (o.flag != "--save" && !has_load && !c->start_over)
            return {o.flag + " " + o.path + " holds " + o.holds + ", and this run does not resume one (no --load): name a new " +
                        o.flag + ", or resume with --load",
                    "--start-over starts a new run instead, moving it aside to " + output_claim_aside(o)};
    for (const OutputClaim& o : found) output_claim_move(o);
    return {};
}
