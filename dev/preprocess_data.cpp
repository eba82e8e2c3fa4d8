// preprocess_data — Megatron-DeepSpeed's tools/preprocess_data.py: JSON lines → Megatron indexed data.
//
// Contract
//   preprocess_data --input FILE --output-prefix PREFIX --tokenizer-type GPT2BPETokenizer|PretrainedFromHF
//       [--vocab-file P --merge-file P | --tokenizer-name-or-path DIR|ORG/NAME] [--json-keys KEY...]
//       [--append-eod] [--workers N] [--log-interval N] [--dataset-impl mmap]
//   Each line of FILE is one JSON object (a document); for each KEY (default: text) its string is
//   tokenized (llmc/tokenizer.h; llmc/hf_tokenizer.h with BigScience's 21 extra tokens, as
//   Megatron-DeepSpeed's build_tokenizer makes it) and, with --append-eod, followed by the tokenizer's
//   end-of-document id. PREFIX_KEY_document.bin/.idx are written as Megatron's MMapIndexedDatasetBuilder
//   writes them: one sequence per document, doc_idx 0..N, dtype best_fitting_dtype(vocabulary)
//   (uint16 under 65,500, else int32). A document whose text gives no token is left out (no EOD),
//   as Megatron's tool does. The files are byte-identical to that tool's for the same input.
//   The input is streamed: batches of lines are tokenized by N threads and written in input order, so
//   memory holds one batch and the per-document sizes, never the corpus. Progress goes to stderr every
//   --log-interval documents (documents/s, MB/s); a summary line to stdout at the end.
//   Lines end at \n, \r\n or \r (Python's text mode). A line that is not a JSON object, lacks a key, holds
//   a non-string value, or is not valid UTF-8 is refused naming FILE:LINE; so is a blank line (Python's
//   json.loads refuses it too). The outputs are written under .tmp names and renamed when complete; a
//   refused run removes them.
//   Not supported (refused): --split-sentences and --keep-newlines (NLTK's Punkt), --dataset-impl lazy|cached.
// Exit status: 0 ok, 1 runtime failure (unreadable file, bad line), 2 bad command line.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "llmc/common.h"
#include "llmc/hf_tokenizer.h"
#include "llmc/json.h"
#include "llmc/megatron_data.h"
#include "llmc/tokenizer.h"

struct Options {
    std::string input, output_prefix, tokenizer_type, vocab_file = "data/gpt2/encoder.json", merge_file = "data/gpt2/vocab.bpe";
    std::string tokenizer_name_or_path, dataset_impl = "mmap";
    std::vector<std::string> json_keys = {"text"};
    bool append_eod = false, help = false;
    int64_t workers = 1, log_interval = 100;
};

static void usage(FILE* f) {
    fprintf(f, "usage: preprocess_data --input FILE --output-prefix PREFIX --tokenizer-type GPT2BPETokenizer|PretrainedFromHF\n"
               "         [--vocab-file P --merge-file P | --tokenizer-name-or-path DIR|ORG/NAME] [--json-keys KEY...]\n"
               "         [--append-eod] [--workers N] [--log-interval N] [--dataset-impl mmap]\n"
               "  writes PREFIX_KEY_document.bin/.idx as Megatron-DeepSpeed's tools/preprocess_data.py does\n");
}

static int64_t parse_positive(const char* flag, const std::string& s) {
    char* end = nullptr;
    long long v = strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != 0 || v < 1) keel_usage_error("%s '%s': expected a positive integer", flag, s.c_str());
    return v;
}

static Options parse_args(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) keel_usage_error("%s needs a value", a.c_str());
            return argv[++i];
        };
        if (a == "-h" || a == "--help") o.help = true;
        else if (a == "--input") o.input = value();
        else if (a == "--output-prefix") o.output_prefix = value();
        else if (a == "--tokenizer-type") o.tokenizer_type = value();
        else if (a == "--vocab-file") o.vocab_file = value();
        else if (a == "--merge-file") o.merge_file = value();
        else if (a == "--tokenizer-name-or-path") o.tokenizer_name_or_path = value();
        else if (a == "--dataset-impl") o.dataset_impl = value();
        else if (a == "--append-eod") o.append_eod = true;
        else if (a == "--workers") o.workers = parse_positive("--workers", value());
        else if (a == "--log-interval") o.log_interval = parse_positive("--log-interval", value());
        else if (a == "--json-keys") {
            o.json_keys.clear();
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) o.json_keys.push_back(argv[++i]);
            if (o.json_keys.empty()) keel_usage_error("--json-keys needs at least one KEY");
        } else if (a == "--split-sentences" || a == "--keep-newlines")
            keel_usage_error("%s is not supported: sentence splitting is NLTK's Punkt, which keel does not have", a.c_str());
        else keel_usage_error("unknown argument '%s'", a.c_str());
    }
    if (o.help) return o;
    if (o.input.empty() || o.output_prefix.empty() || o.tokenizer_type.empty())
        keel_usage_error("--input, --output-prefix and --tokenizer-type are required");
    if (o.tokenizer_type == "PretrainedFromHf") o.tokenizer_type = "PretrainedFromHF";  // the tool's own spelling of the choice
    if (o.tokenizer_type != "GPT2BPETokenizer" && o.tokenizer_type != "PretrainedFromHF")
        keel_usage_error("--tokenizer-type %s: GPT2BPETokenizer or PretrainedFromHF", o.tokenizer_type.c_str());
    if (o.tokenizer_type == "PretrainedFromHF" && o.tokenizer_name_or_path.empty())
        keel_usage_error("--tokenizer-type PretrainedFromHF needs --tokenizer-name-or-path");
    if (o.dataset_impl != "mmap") keel_usage_error("--dataset-impl %s: keel writes mmap (Megatron's default) only", o.dataset_impl.c_str());
    if (o.workers > 256) keel_usage_error("--workers %lld: at most 256", (long long)o.workers);
    return o;
}

// ---- reading lines --------------------------------------------------------------------------------

// The next line without its ending (\n, \r\n or \r); false at the end of the file.
static bool read_line(FILE* f, std::string* line) {
    line->clear();
    int c;
    while ((c = getc_unlocked(f)) != EOF) {
        if (c == '\n') return true;
        if (c == '\r') {
            int d = getc_unlocked(f);
            if (d != '\n' && d != EOF) ungetc(d, f);
            return true;
        }
        line->push_back((char)c);
    }
    FILE_CHECK(!ferror(f), "read", "input");
    return !line->empty();
}

static bool valid_utf8(const std::string& s) {
    const unsigned char* p = (const unsigned char*)s.data();
    uint32_t cp;
    for (size_t i = 0; i < s.size();) {
        int n = tokenizer_utf8_decode(p, s.size(), i, &cp);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

// ---- one line → ids per key ---------------------------------------------------------------------

struct Encoded {
    std::vector<std::vector<int>> ids;  // (keys) the document's ids under each key; empty: left out
    std::string error;                  // non-empty: why the line is refused
};

static void encode_line(const Tokenizer* tok, const Options* o, const std::string& line, Encoded* out) {
    out->ids.assign(o->json_keys.size(), {});
    out->error.clear();
    Json root;
    std::string err;
    if (!valid_utf8(line)) { out->error = "not valid UTF-8"; return; }
    if (!json_parse(line.data(), line.size(), &root, &err)) { out->error = "malformed JSON: " + err; return; }
    if (root.type != JSON_OBJECT) { out->error = "not a JSON object"; return; }
    for (size_t k = 0; k < o->json_keys.size(); k++) {
        const Json* v = json_get(&root, o->json_keys[k].c_str());
        if (!v) { out->error = "no key '" + o->json_keys[k] + "'"; return; }
        if (v->type != JSON_STRING) { out->error = "key '" + o->json_keys[k] + "' is not a string"; return; }
        tokenizer_encode(tok, v->text.data(), v->text.size(), out->ids[k]);
        if (o->append_eod && !out->ids[k].empty()) out->ids[k].push_back(tok->eod);
    }
}

// ---- the output files ------------------------------------------------------------------------------

// The .tmp files of an unfinished run: removed at exit, so a refused input leaves nothing behind
// (every refusal leaves through exit, llmc/common.h); emptied once the outputs are renamed.
static std::vector<std::string> partial_files;
static void remove_partial_files() {
    for (const std::string& f : partial_files) remove(f.c_str());
}

struct Output {
    std::string bin, idx;
    FILE* f = nullptr;
    std::vector<int32_t> sizes;  // (documents) tokens of each
    int64_t tokens = 0;
};

static void output_append(Output* out, const std::vector<int>& ids, int dtype) {
    if (ids.size() > INT32_MAX) keel_die("'%s': a document of %zu tokens (sizes are int32)", out->bin.c_str(), ids.size());
    std::vector<uint8_t> buf(ids.size() * megatron_dtype_size(dtype));
    for (size_t i = 0; i < ids.size(); i++) {
        if (dtype == MD_UINT16) {
            if (ids[i] < 0 || ids[i] > 65535) keel_die("'%s': id %d does not fit uint16", out->bin.c_str(), ids[i]);
            uint16_t v = (uint16_t)ids[i];
            memcpy(&buf[2 * i], &v, 2);
        } else {
            int32_t v = ids[i];
            memcpy(&buf[4 * i], &v, 4);
        }
    }
    if (!buf.empty()) fwrite_check(buf.data(), 1, buf.size(), out->f, (out->bin + ".tmp").c_str());
    out->sizes.push_back((int32_t)ids.size());
    out->tokens += (int64_t)ids.size();
}

// .idx as MMapIndexedDataset's writer lays it out: header, sizes, byte pointers, doc_idx 0..N.
static void output_finish(Output* out, int dtype) {
    FILE_CHECK(fclose(out->f) == 0, "fclose", (out->bin + ".tmp").c_str());
    uint64_t version = 1, n = out->sizes.size(), d = n + 1;
    uint8_t code = (uint8_t)dtype;
    std::string tmp = out->idx + ".tmp";
    FILE* f = fopen_check(tmp.c_str(), "wb");
    fwrite_check(MEGATRON_MAGIC, 1, 9, f, tmp.c_str());
    fwrite_check(&version, 8, 1, f, tmp.c_str());
    fwrite_check(&code, 1, 1, f, tmp.c_str());
    fwrite_check(&n, 8, 1, f, tmp.c_str());
    fwrite_check(&d, 8, 1, f, tmp.c_str());
    if (n) fwrite_check(out->sizes.data(), 4, n, f, tmp.c_str());
    std::vector<int64_t> pointers(n), doc_idx(d);
    int64_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        pointers[i] = at;
        at += (int64_t)out->sizes[i] * megatron_dtype_size(dtype);
        doc_idx[i + 1] = (int64_t)i + 1;
    }
    if (n) fwrite_check(pointers.data(), 8, n, f, tmp.c_str());
    fwrite_check(doc_idx.data(), 8, d, f, tmp.c_str());
    FILE_CHECK(fclose(f) == 0, "fclose", tmp.c_str());
    FILE_CHECK(rename((out->bin + ".tmp").c_str(), out->bin.c_str()) == 0, "rename", out->bin.c_str());
    FILE_CHECK(rename(tmp.c_str(), out->idx.c_str()) == 0, "rename", out->idx.c_str());
}

// ---- the pipeline ------------------------------------------------------------------------------------

enum { BATCH_LINES_PER_WORKER = 256 };

struct Progress {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    int64_t docs = 0, bytes = 0;
    double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
};

// Tokenizes batch[0..n) on o->workers threads; line k goes to thread k mod workers.
static void encode_batch(const Tokenizer* tok, const Options* o, const std::vector<std::string>& batch, size_t n, std::vector<Encoded>* enc) {
    std::vector<std::thread> pool;
    for (int64_t w = 0; w < o->workers; w++)
        pool.emplace_back([&, w]() {
            for (size_t k = (size_t)w; k < n; k += (size_t)o->workers) encode_line(tok, o, batch[k], &(*enc)[k]);
        });
    for (std::thread& t : pool) t.join();
}

static void write_batch(const Options* o, const std::vector<Encoded>& enc, size_t n, int64_t first_line, std::vector<Output>& outs,
                        int dtype, const std::vector<std::string>& batch, Progress* p) {
    for (size_t k = 0; k < n; k++) {
        if (!enc[k].error.empty()) keel_die("%s:%lld: %s", o->input.c_str(), (long long)(first_line + (int64_t)k), enc[k].error.c_str());
        for (size_t key = 0; key < outs.size(); key++)
            if (!enc[k].ids[key].empty()) output_append(&outs[key], enc[k].ids[key], dtype);
        p->docs++;
        p->bytes += (int64_t)batch[k].size() + 1;
        if (p->docs % o->log_interval == 0) {
            double s = p->seconds();
            fprintf(stderr, "Processed %lld documents (%.1f docs/s, %.2f MB/s).\n", (long long)p->docs, p->docs / s, p->bytes / s / 1048576.0);
        }
    }
}

int main(int argc, char** argv) {
    Options o = parse_args(argc, argv);
    if (o.help) { usage(stdout); return 0; }
    Tokenizer tok;
    hf_tokenizer_for_run(&tok, o.tokenizer_type, o.tokenizer_name_or_path, o.vocab_file, o.merge_file);
    if (o.append_eod && tok.eod < 0)
        keel_usage_error("--append-eod: the tokenizer names no end-of-document token (no eos_token in tokenizer_config.json or "
                         "special_tokens_map.json)");
    int dtype = megatron_best_dtype(tok.vocab_size);
    FILE* in = fopen_check(o.input.c_str(), "rb");
    std::vector<Output> outs(o.json_keys.size());
    for (size_t k = 0; k < outs.size(); k++) {
        outs[k].bin = o.output_prefix + "_" + o.json_keys[k] + "_document.bin";
        outs[k].idx = o.output_prefix + "_" + o.json_keys[k] + "_document.idx";
        outs[k].f = fopen_check((outs[k].bin + ".tmp").c_str(), "wb");
        partial_files.push_back(outs[k].bin + ".tmp");
        partial_files.push_back(outs[k].idx + ".tmp");
    }
    atexit(remove_partial_files);
    printf("Opening %s\nVocab size: %d\nOutput prefix: %s\n", o.input.c_str(), tok.vocab_size, o.output_prefix.c_str());
    size_t cap = (size_t)(BATCH_LINES_PER_WORKER * o.workers);
    std::vector<std::string> batch(cap);
    std::vector<Encoded> enc(cap);
    Progress p;
    int64_t line_no = 1;
    for (;;) {
        size_t n = 0;
        while (n < cap && read_line(in, &batch[n])) n++;
        if (n == 0) break;
        encode_batch(&tok, &o, batch, n, &enc);
        write_batch(&o, enc, n, line_no, outs, dtype, batch, &p);
        line_no += (int64_t)n;
    }
    fclose(in);
    for (Output& out : outs) output_finish(&out, dtype);
    partial_files.clear();
    double s = p.seconds();
    for (const Output& out : outs)
        printf("%s: %zu documents, %lld tokens (%s)\n", out.bin.c_str(), out.sizes.size(), (long long)out.tokens, megatron_dtype_name(dtype));
    printf("%lld lines, %.2f MB in %.2f s: %.1f docs/s, %.2f MB/s\n", (long long)p.docs, p.bytes / 1048576.0, s, p.docs / s,
           p.bytes / s / 1048576.0);
    return 0;
}
