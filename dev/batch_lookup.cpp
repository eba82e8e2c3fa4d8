// batch_lookup — which samples did iterations A..B of a run train on? Prints, for every data-parallel
// rank, micro-batch step and row, the run's sample number, its shuffled index, the shard and token
// span it came from, and its decoded text.
//
// What it is for: the loss spikes at iteration 31,337 at 3 a.m. and the question in the BigScience
// and OPT logbooks is always the same: "what was in that batch?" (a block of repeated junk, a table
// of numbers, a binary blob that slipped through the filter). keel's data order is a pure function
// of (seed, consumed samples) (llmc/data.h), and the consumed-sample count of every iteration is a
// pure function of the trajectory flags (llmc/schedule.h), so the batch can be recomputed offline,
// without the run and without a GPU, from the run's flags or its checkpoint.
//
// Usage
//   batch_lookup @run.args --iterations 31330-31337              the run's own flags (or @file)
//   batch_lookup --load ckpts --train-data-path 'data/fw_*.bin' --iterations 31337 --data-parallel-size 64
//   batch_lookup ... --iterations 12 --rank 3 --no-text           one rank, token ids instead of text
//   batch_lookup ... --iterations 1-8 --tokens                     machine output (the trainer's dump format)
// Tool flags (anywhere on the command line, not inside @files): --iterations A-B | A (required),
// --tokens, --rank R, --no-text, --checkpoint-iteration N. Everything else is a run flag
// (llmc/flags.h), parsed by the trainer's own parser.
//
// Where the trajectory comes from:
//   - the command line: the run's flags exactly as it was started (a run's @file works);
//   - with --load DIR: the latest checkpoint of DIR (or --checkpoint-iteration N). Its state.txt
//     records every trajectory flag (FK_STATE: batch sizes, ramp-up, curriculum, skip ranges, seq
//     length, ...); they replace the command line's (a note on stderr names each one that differed),
//     the data order uses the checkpoint's RNG key (rng.seed, which a resume keeps even if --seed
//     changed), and spike.rollbacks marks iterations that were read and then discarded. Only the
//     run flags are still needed: --train-data-path and the data-parallel size.
//   The data-parallel size is not part of the trajectory (a checkpoint is canonical and can be
//   resumed at any DP): pass --data-parallel-size N, the number of ranks the run had (0 or absent: 1).
//
// The mapping (the trainer's, through the same functions): iteration i starts after `consumed`
// samples; its global batch is rampup_global_batch(consumed), its sequence length T is
// curriculum_seqlen(i); rank r's micro-batch step m reads rows b = 0..B-1, the run's sample numbers
// batch_first_sample(consumed, m, DP, r, B) + b, each row the first T+1 tokens of the sample. An
// iteration inside --skip-train-iteration-range consumes its batch unread (no rows printed).
//
// Output
//   human (default): a header per iteration (global batch, seqlen, consumed-sample range, and
//     whether it was skipped or rolled back), then one line per row:
//       rank R step M row B | sample S | index I epoch E | shard PATH tokens O-O+T | TEXT
//     For Megatron indexed data (Megatron's order, llmc/megatron_order.h) INDEX is the GPTDataset
//     sample the item maps to (shuffle_idx), EPOCH the pass over the documents it starts in, and the
//     place is PREFIX.bin documents D[FROM:TO] ... (the sequences of the .idx the row's tokens span,
//     Python slices).
//     TEXT is the decoded T+1 tokens on one line: \n, \r, \t and \\ are escaped, as are other control
//     bytes and bytes that are not valid UTF-8 (\xNN), so one row is one grep-able line. Without the
//     GPT-2 files (--vocab-file/--merge-file, data/gpt2/ by default) or with --no-text it shows the
//     token ids instead, and says why.
//   --tokens: exactly the lines the trainer writes under KEEL_DUMP_TOKENS (test mode), ordered by
//     iteration, rank, micro-batch step, row:
//       <iteration> <rank> <micro-batch step> <row> <sample number> <T+1 token ids>
//     test/test_batch_lookup.sh compares the two byte for byte.
// Exit status: 0 ok, 1 runtime failure (unreadable shard or checkpoint), 2 bad command line.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "llmc/checkpoint.h"
#include "llmc/data.h"
#include "llmc/flags.h"
#include "llmc/schedule.h"
#include "llmc/spike.h"
#include "llmc/tokenizer.h"

// ---- the tool's own flags, stripped from argv before the run flags are parsed -------------------

struct LookupOptions {
    int64_t first = 0, last = 0;       // the iteration range, 1-based inclusive (0: not given)
    bool tokens = false;               // machine mode: the trainer's dump lines
    bool no_text = false;              // token ids instead of decoded text
    int64_t rank = -1;                 // only this data-parallel rank (-1: all)
    int64_t checkpoint_iteration = -1; // with --load: this checkpoint instead of the latest
    bool help = false;
};

struct LookupFlag {
    const char* name;
    const char* metavar;  // nullptr for a switch
    const char* help;
};

static const LookupFlag LOOKUP_FLAGS[] = {
    {"--iterations", "A-B", "the iterations to look up, 1-based inclusive (or one iteration A); required"},
    {"--tokens", nullptr, "print the trainer's KEEL_DUMP_TOKENS lines instead of the human listing"},
    {"--rank", "R", "only data-parallel rank R"},
    {"--no-text", nullptr, "show token ids instead of decoded text"},
    {"--checkpoint-iteration", "N", "with --load DIR: take the trajectory from iteration N's checkpoint, not the latest"},
    {"-h", nullptr, "print this help (--help too)"},
};

static void lookup_print_help() {
    printf("usage: batch_lookup [run flags | @run.args | --load DIR --train-data-path P] --iterations A-B [tool flags]\n\n");
    printf("Prints the samples (shard, token offset, text) that iterations A..B consumed on every data-parallel rank.\n");
    printf("tool flags:\n");
    for (const LookupFlag& f : LOOKUP_FLAGS) {
        std::string left = std::string(f.name) + (f.metavar ? std::string(" ") + f.metavar : "");
        printf("  %-30s %s\n", left.c_str(), f.help);
    }
    printf("run flags: those of the run (./train_gpt_cpu -h lists them); --data-parallel-size N gives the run's\n"
           "data-parallel ranks (0: 1); with --load DIR the trajectory flags come from the checkpoint.\n");
}

// A count: digits only, so "3x" or "-1" is an error rather than 3 or a huge number.
static int64_t lookup_parse_count(const std::string& flag, const std::string& v) {
    int64_t x;
    if (!schedule_parse_count(v, &x)) keel_usage_error("%s: '%s' is not a non-negative integer", flag.c_str(), v.c_str());
    return x;
}

// "A-B" or "A": 1 <= A <= B.
static void lookup_parse_range(const std::string& v, int64_t* first, int64_t* last) {
    size_t dash = v.find('-');
    std::string a = v.substr(0, dash), b = dash == std::string::npos ? a : v.substr(dash + 1);
    if (!schedule_parse_count(a, first) || !schedule_parse_count(b, last))
        keel_usage_error("--iterations: '%s' is not A-B or A (iteration numbers, 1-based)", v.c_str());
    if (*first < 1) keel_usage_error("--iterations: iterations are numbered from 1 (got '%s')", v.c_str());
    if (*last < *first) keel_usage_error("--iterations: the range %s ends before it starts", v.c_str());
}

// Takes the tool's flags (`--name value` or `--name=value`) out of argv; the rest, argv[0] first,
// goes to the trainer's flag parser.
static std::vector<char*> lookup_strip_args(int argc, char** argv, LookupOptions* o) {
    std::vector<char*> rest = {argv[0]};
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i], name = a, value;
        size_t eq = a.find('=');
        bool has_value = eq != std::string::npos && a.compare(0, 2, "--") == 0;
        if (has_value) { name = a.substr(0, eq); value = a.substr(eq + 1); }
        const LookupFlag* flag = nullptr;
        for (const LookupFlag& f : LOOKUP_FLAGS)
            if (name == f.name || (name == "--help" && strcmp(f.name, "-h") == 0)) flag = &f;
        if (!flag) { rest.push_back(argv[i]); continue; }
        if (!flag->metavar) {
            if (has_value) keel_usage_error("%s takes no value", flag->name);
            if (name == "--tokens") o->tokens = true;
            else if (name == "--no-text") o->no_text = true;
            else o->help = true;
            continue;
        }
        if (!has_value) {
            if (i + 1 >= argc) keel_usage_error("%s needs a value (%s)", flag->name, flag->metavar);
            value = argv[++i];
        }
        if (name == "--iterations") lookup_parse_range(value, &o->first, &o->last);
        else if (name == "--rank") o->rank = lookup_parse_count(name, value);
        else o->checkpoint_iteration = lookup_parse_count(name, value);
    }
    return rest;
}

// ---- the run's trajectory ----------------------------------------------------------------------

struct Run {
    Config c;
    int dp = 1;                       // data-parallel ranks
    int64_t train_iters = 0;
    RampUp rampup;
    Curriculum curriculum;
    SkipRanges skips;
    uint64_t seed = 0;                // key of the data order
    SpikeState spike;                 // only .rollbacks: the checkpoint's spike.rollbacks (llmc/spike.h)
    std::string source;               // where the trajectory flags came from (printed)
    int64_t ckpt_iteration = -1;      // the checkpoint read (-1: none) and its counters
    int64_t ckpt_consumed_samples = 0, ckpt_consumed_tokens = 0;
    bool anchored = false;            // the flags disagree with the checkpoint's counters (lookup_check_checkpoint)
};

// A flag's value as the checkpoint wrote it. An unset float is written "nan", which flag_set (rightly,
// for a command line) refuses, so it is restored here.
static void lookup_set_flag(Config* c, const Flag* f, const std::string& v) {
    if (f->type == FT_FLOAT && (v == "nan" || v == "-nan")) *flag_field<double>(c, f) = NAN;
    else flag_set(c, f, v);
}

// --load DIR: the trajectory flags, data-order key, counters and rollbacks of a checkpoint.
static void lookup_load_checkpoint(Run* run, int64_t want) {
    const std::string& dir = run->c.load;
    int64_t it = want >= 0 ? want : ckpt_latest(dir);
    if (it < 0) keel_die("--load %s: no checkpoint (%s/latest_checkpointed_iteration.txt is missing)", dir.c_str(), dir.c_str());
    std::string idir = ckpt_iter_dir(dir, it);
    struct stat st;
    if (stat(idir.c_str(), &st) != 0 && stat((idir + ".old").c_str(), &st) == 0) idir += ".old";  // a crash mid-swap
    std::string path = idir + "/state.txt";
    if (!file_exists(path.c_str())) keel_die("--load %s: no checkpoint of iteration %lld (%s is missing)", dir.c_str(), (long long)it, path.c_str());
    std::map<std::string, std::string> kv = ckpt_read_state(path);
    Config defaults;
    for (int i = 0; i < NUM_FLAGS; i++) {
        const Flag* f = &FLAGS[i];
        auto saved = kv.find(std::string("flag.") + f->name);
        if (f->kind != FK_STATE || saved == kv.end()) continue;  // an older checkpoint may lack newer flags
        std::string given = flag_value_string(&run->c, f);
        if (given != flag_value_string(&defaults, f) && given != saved->second)
            fprintf(stderr, "note: --%s is %s in the checkpoint; the command line's %s is not used\n", f->name,
                    saved->second.c_str(), given.c_str());
        lookup_set_flag(&run->c, f, saved->second);
    }
    run->seed = (uint64_t)ckpt_get_i64(kv, "rng.seed", path);
    run->ckpt_iteration = ckpt_get_i64(kv, "iteration", path);
    run->ckpt_consumed_samples = ckpt_get_i64(kv, "consumed_samples", path);
    run->ckpt_consumed_tokens = ckpt_get_i64(kv, "consumed_tokens", path);
    // "K:S ...": at iteration K the run restored iteration S and consumed S+1..K unread; their first
    // pass did read (and train on) those samples. Absent in checkpoints older than the autopilot.
    auto rb = kv.find("spike.rollbacks");
    if (rb != kv.end()) spike_rollbacks_from_string(&run->spike, rb->second, (path + ": spike.rollbacks").c_str());
    run->source = "checkpoint " + idir;
}

// The flags a lookup cannot do without, named in terms of the tool (config_validate would only say
// "--lr is required", which reads oddly for a lookup).
static void lookup_check_required(const Config* c) {
    const char* hint = "pass the run's own flags (e.g. @run.args), or --load DIR of its checkpoint";
    if (c->train_data_path.empty() && c->data_path.empty() && c->train_weighted_split_paths.empty() &&
        c->train_weighted_split_paths_path.empty())
        keel_die_code(KEEL_EXIT_USAGE, "give the run's training data: --train-data-path PATH|GLOB, or its --data-path and --split",
                      "--train-data-path is required (the samples are read from the run's shards)");
    if (c->train_iters == 0 && c->train_samples == 0)
        keel_die_code(KEEL_EXIT_USAGE, hint, "the run's length is missing: --train-iters or --train-samples");
    if (std::isnan(c->lr)) keel_die_code(KEEL_EXIT_USAGE, hint, "the run's flags are incomplete: --lr is missing");
}

static void lookup_setup(Run* run, LookupOptions* o, int argc, char** argv) {
    std::vector<char*> rest = lookup_strip_args(argc, argv, o);
    if (o->help || !flags_parse(&run->c, (int)rest.size(), rest.data())) {
        lookup_print_help();
        exit(0);
    }
    if (o->first == 0) keel_usage_error("--iterations A-B is required (the iterations to look up)");
    if (o->checkpoint_iteration >= 0 && run->c.load.empty()) keel_usage_error("--checkpoint-iteration needs --load DIR");
    run->source = "command line";
    run->seed = (uint64_t)run->c.seed;
    if (!run->c.load.empty()) lookup_load_checkpoint(run, o->checkpoint_iteration);
    Config* c = &run->c;
    run->dp = c->data_parallel_size > 0 ? (int)c->data_parallel_size : 1;
    if (o->rank >= run->dp) keel_usage_error("--rank %lld: the run has %d data-parallel rank(s) (--data-parallel-size)", (long long)o->rank, run->dp);
    lookup_check_required(c);
    config_validate(c, run->dp);
    rampup_init(&run->rampup, c, run->dp);
    curriculum_init(&run->curriculum, c);
    skip_ranges_parse(&run->skips, c->skip_train_iteration_range);
    run->train_iters = c->train_iters > 0 ? c->train_iters : rampup_train_iters(&run->rampup, c->train_samples);
    if (o->last > run->train_iters)
        keel_usage_error("--iterations %lld-%lld: the run has %lld iterations", (long long)o->first, (long long)o->last,
                         (long long)run->train_iters);
}

// ---- walking the iterations ----------------------------------------------------------------------

// One iteration as the trainer sees it on entry.
struct Step {
    int64_t iteration, consumed_samples, consumed_tokens;
    int64_t gbs;  // global batch (samples)
    int T;        // sequence length: a row is T+1 tokens
};

static Step lookup_step(const Run* run, int64_t it, int64_t consumed_samples, int64_t consumed_tokens) {
    Step s;
    s.iteration = it;
    s.consumed_samples = consumed_samples;
    s.consumed_tokens = consumed_tokens;
    s.gbs = rampup_global_batch(&run->rampup, consumed_samples);
    s.T = (int)curriculum_seqlen(&run->curriculum, it);
    return s;
}

// The iteration after s: s's batch and its tokens are consumed (skipped iterations too, as in the
// trainer). Past an anchored checkpoint the counters restart from the checkpoint's own.
static Step lookup_next(const Run* run, const Step* s) {
    int64_t samples = s->consumed_samples + s->gbs, tokens = s->consumed_tokens + s->gbs * s->T;
    if (run->anchored && s->iteration == run->ckpt_iteration) {
        samples = run->ckpt_consumed_samples;
        tokens = run->ckpt_consumed_tokens;
    }
    return lookup_step(run, s->iteration + 1, samples, tokens);
}

// With a checkpoint, walking the flags from iteration 1 must arrive at the checkpoint's counters. If
// it does not, the trajectory flags changed during the run (a resume with another batch size, say):
// the iterations after the checkpoint are then anchored at its counters; the earlier ones cannot be
// recomputed from the checkpoint's flags, and the warning says so.
static void lookup_check_checkpoint(Run* run) {
    if (run->ckpt_iteration < 0) return;
    Step s = lookup_step(run, 1, 0, 0);
    while (s.iteration <= run->ckpt_iteration) s = lookup_next(run, &s);
    if (s.consumed_samples == run->ckpt_consumed_samples && s.consumed_tokens == run->ckpt_consumed_tokens) return;
    fprintf(stderr, "warning: the checkpoint's flags give %lld samples / %lld tokens consumed by iteration %lld, the checkpoint "
            "says %lld / %lld: the trajectory flags changed during the run, so iterations up to %lld may be wrong (later "
            "ones count from the checkpoint); look them up with --checkpoint-iteration N of a checkpoint from before the "
            "change\n", (long long)s.consumed_samples, (long long)s.consumed_tokens, (long long)run->ckpt_iteration,
            (long long)run->ckpt_consumed_samples, (long long)run->ckpt_consumed_tokens, (long long)run->ckpt_iteration);
    run->anchored = true;
}

// The iteration `first` as the trainer enters it.
static Step lookup_seek(const Run* run, int64_t first) {
    Step s = lookup_step(run, 1, 0, 0);
    while (s.iteration < first) s = lookup_next(run, &s);
    return s;
}

// --train-tokens ends a run early (checked before each iteration, as the trainer does).
static void lookup_check_not_stopped(const Run* run, const Step* s) {
    if (run->c.train_tokens > 0 && s->consumed_tokens >= run->c.train_tokens)
        keel_usage_error("iteration %lld never ran: the run stops once %lld tokens are consumed (--train-tokens), after %lld",
                         (long long)s->iteration, (long long)run->c.train_tokens, (long long)s->consumed_tokens);
}

// ---- the rows of one iteration ---------------------------------------------------------------------

struct Row {
    int rank;
    int64_t step, b;      // micro-batch step m, row b
    int64_t sample;       // the run's sample number
    int64_t index;        // the shuffled sample index in its dataset's [0, N)
    int64_t epoch;        // of its dataset
    int set;              // which dataset of a blend (0 without one)
    const Shard* shard;
    int64_t offset;       // the sample's first token in the shard
    std::vector<DocPiece> pieces;  // Megatron's order: the documents the sample spans
    std::vector<int> tokens;  // (T+1) the row: inputs tokens[0..T-1], targets tokens[1..T]
};

// The rows in (rank, step, row) order. They are read in sample-number order, so the permutation of
// an epoch is built once even when the iteration straddles an epoch boundary.
static std::vector<Row> lookup_rows(const Run* run, DataLoader* dl, const Step* s, int64_t only_rank) {
    int B = (int)run->c.micro_batch_size, dp = run->dp;
    int64_t accum = s->gbs / ((int64_t)B * dp);  // micro-batch steps per rank
    std::vector<Row> rows;
    for (int r = 0; r < dp; r++) {
        if (only_rank >= 0 && r != only_rank) continue;
        for (int64_t m = 0; m < accum; m++)
            for (int b = 0; b < B; b++) {
                Row row{};  // index, epoch, shard, ...: filled in below
                row.rank = r;
                row.step = m;
                row.b = b;
                row.sample = batch_first_sample(s->consumed_samples, m, dp, r, B) + b;
                rows.push_back(row);
            }
    }
    std::vector<size_t> order(rows.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return rows[x].sample < rows[y].sample; });
    std::vector<int> sample(run->c.seq_length + 1);
    for (size_t i : order) {
        Row* row = &rows[i];
        DataLoc loc = dataloader_resolve(dl, row->sample);
        row->index = loc.index;
        row->epoch = loc.epoch;
        row->set = loc.set;
        row->shard = loc.shard;
        row->offset = loc.offset;
        if (dl->sets[loc.set].gpt) row->pieces = dataset_gpt_pieces(&dl->sets[loc.set], loc.index);
        dataloader_read(dl, row->sample, sample.data());  // the trainer's read: the whole sample, of which a row is a prefix
        row->tokens.assign(sample.begin(), sample.begin() + s->T + 1);
    }
    return rows;
}

// ---- output ----------------------------------------------------------------------------------------

static void lookup_print_tokens(const Step* s, const std::vector<Row>& rows) {
    std::string line;
    for (const Row& r : rows) {
        line = std::to_string(s->iteration) + " " + std::to_string(r.rank) + " " + std::to_string(r.step) + " " +
               std::to_string(r.b) + " " + std::to_string(r.sample);
        for (int t : r.tokens) line += " " + std::to_string(t);
        line += "\n";
        fwrite_check(line.data(), 1, line.size(), stdout, "<stdout>");
    }
}

// One row on one line: control bytes and bytes that are not valid UTF-8 become escapes (a sample
// may start or end inside a multi-byte character: its tokens split it).
static std::string lookup_escape(const std::string& s) {
    std::string out;
    const unsigned char* p = (const unsigned char*)s.data();
    char hex[8];
    for (size_t i = 0; i < s.size();) {
        unsigned char ch = p[i];
        uint32_t cp;
        int n = tokenizer_utf8_decode(p, s.size(), i, &cp);
        if (ch == '\n') out += "\\n";
        else if (ch == '\r') out += "\\r";
        else if (ch == '\t') out += "\\t";
        else if (ch == '\\') out += "\\\\";
        else if (ch < 0x20 || ch == 0x7f || n == 0) { snprintf(hex, sizeof hex, "\\x%02x", ch); out += hex; }
        else { out.append(s, i, n); i += n; continue; }
        i++;
    }
    return out;
}

// The iteration's header: what the trainer did with it.
static void lookup_print_header(const Run* run, const Step* s) {
    int64_t accum = s->gbs / (run->c.micro_batch_size * run->dp);
    printf("iteration %lld | global batch %lld | seqlen %d | samples %lld-%lld | %lld micro-batch step(s) per rank",
           (long long)s->iteration, (long long)s->gbs, s->T, (long long)s->consumed_samples,
           (long long)(s->consumed_samples + s->gbs - 1), (long long)accum);
    if (skip_ranges_contains(&run->skips, s->iteration)) {
        printf(" | skipped (--skip-train-iteration-range): consumed unread\n");
        return;
    }
    for (const SpikeRollback& r : run->spike.rollbacks)
        if (r.restored < s->iteration && s->iteration <= r.detected)
            printf(" | read, then discarded by the spike rollback at iteration %lld (back to %lld)", (long long)r.detected,
                   (long long)r.restored);
    printf("\n");
}

// Where a row's tokens are: an llm.c shard's token span, or (Megatron's order) the documents of the
// .bin it spans, each as DOC[FROM:TO] in Python's slice notation — of a curriculum row's first T+1
// tokens only.
static std::string lookup_where(const Row& r) {
    int T = (int)r.tokens.size() - 1;
    char buf[96];
    if (r.pieces.empty()) {
        snprintf(buf, sizeof buf, " tokens %lld-%lld", (long long)r.offset, (long long)(r.offset + T));
        return "shard " + r.shard->path + buf;
    }
    std::string out = r.shard->path + " documents";
    int64_t left = T + 1;
    for (const DocPiece& p : r.pieces) {
        if (left <= 0) break;
        int64_t n = std::min(p.count, left);
        left -= n;
        snprintf(buf, sizeof buf, " %lld[%lld:%lld]", (long long)p.doc, (long long)p.from, (long long)(p.from + n));
        out += buf;
    }
    return out;
}

static void lookup_print_rows(const DataLoader* dl, const Tokenizer* tok, const std::vector<Row>& rows) {
    for (const Row& r : rows) {
        printf("  rank %d step %lld row %lld | sample %lld | index %lld epoch %lld | %s | ", r.rank, (long long)r.step, (long long)r.b,
               (long long)r.sample, (long long)r.index, (long long)r.epoch, lookup_where(r).c_str());
        if (tok) {
            std::string text;
            tokenizer_decode(tok, r.tokens.data(), r.tokens.size(), text);
            printf("%s\n", lookup_escape(text).c_str());
        } else {
            printf("ids");
            for (int t : r.tokens) printf(" %d", t);
            printf("\n");
        }
    }
}

// The GPT-2 tokenizer if the text can be shown; otherwise nullptr, and the reason on stdout.
static bool lookup_load_tokenizer(const Config* c, bool no_text, Tokenizer* tok) {
    if (no_text) return false;
    if (c->tokenizer_type == "PretrainedFromHF") {  // read once already by the flags (llmc/deepspeed.h), so it loads
        hf_tokenizer_for_run(tok, c->tokenizer_type, c->tokenizer_name_or_path, c->vocab_file, c->merge_file);
        return true;
    }
    for (const std::string* f : {&c->vocab_file, &c->merge_file})
        if (!file_exists(f->c_str())) {
            printf("# no text: %s is missing (make data fetches it, or give --vocab-file/--merge-file); showing token ids\n",
                   f->c_str());
            return false;
        }
    tokenizer_load(tok, c->vocab_file.c_str(), c->merge_file.c_str());
    if (tokenizer_vocab_size(tok) != c->vocab_size) {
        printf("# no text: the GPT-2 tokenizer has %d ids but the run's --vocab-size is %lld; showing token ids\n",
               tokenizer_vocab_size(tok), (long long)c->vocab_size);
        return false;
    }
    return true;
}

static void lookup_print_preamble(const Run* run, const DataLoader* dl, const LookupOptions* o) {
    printf("# batch_lookup: iterations %lld-%lld of a run of %lld | %d data-parallel rank(s) | micro-batch %lld | "
           "data order seed %llu\n", (long long)o->first, (long long)o->last, (long long)run->train_iters, run->dp,
           (long long)run->c.micro_batch_size, (unsigned long long)run->seed);
    printf("# trajectory flags from the %s | train data: %s of %lld tokens per epoch\n", run->source.c_str(),
           dataloader_describe(dl).c_str(), (long long)run->c.seq_length + 1);
    printf("# row: rank, micro-batch step, row | the run's sample number | shuffled index, epoch | shard and token span (T+1 "
           "tokens), or the .bin's documents DOC[FROM:TO] | text (\\n \\r \\t \\\\ \\xNN escaped)\n");
    if (run->c.spike_policy == "rollback" && run->ckpt_iteration < 0)
        printf("# --spike-policy rollback: the rollbacks are recorded in checkpoints; with --load DIR the iterations they "
               "discarded are marked\n");
}

int main(int argc, char** argv) {
    Run* run = new Run();
    LookupOptions o;
    lookup_setup(run, &o, argc, argv);
    lookup_check_checkpoint(run);
    const Config* c = &run->c;
    DataLoader dl;
    dataloader_open(&dl, c, true, (int)c->seq_length, (int)c->vocab_size, run->seed, run->train_iters);
    Tokenizer tok;
    bool text = false;
    if (!o.tokens) {
        lookup_print_preamble(run, &dl, &o);
        text = lookup_load_tokenizer(c, o.no_text, &tok);
    }
    Step s = lookup_seek(run, o.first);
    for (int64_t it = o.first; it <= o.last; it++) {
        lookup_check_not_stopped(run, &s);
        bool skipped = skip_ranges_contains(&run->skips, it);
        if (!o.tokens) lookup_print_header(run, &s);
        if (!skipped) {
            std::vector<Row> rows = lookup_rows(run, &dl, &s, o.rank);
            if (o.tokens) lookup_print_tokens(&s, rows);
            else lookup_print_rows(&dl, text ? &tok : nullptr, rows);
        }
        s = lookup_next(run, &s);
    }
    FILE_CHECK(fflush(stdout) == 0, "fflush", "<stdout>");
    dataloader_free(&dl);
    delete run;
    return 0;
}
