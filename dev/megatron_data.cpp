// megatron_data — writes and reads Megatron-DeepSpeed's indexed data (.bin + .idx, llmc/megatron_data.h).
//
// Contract
//   megatron_data write --from-text FILE... --out PREFIX [--dtype auto|uint16|int32]
//       GPT-2 BPE (llmc/tokenizer.h) of each non-blank LINE of each FILE as one document, with the
//       end-of-document id 50256 appended (Megatron's preprocess_data --append-eod on a JSON line per
//       document). Blank lines are skipped.
//   megatron_data write --from-shards GLOB --out PREFIX [--dtype ...]
//       llm.c shards (sorted glob order) cut into documents that end after each <|endoftext|> (50256):
//       the token stream is unchanged, so keel samples the converted data exactly as it samples the shards.
//   megatron_data read PREFIX [--docs K] [--vocab-size V]
//       validates both files (as the trainer does on open; ids below V, default 2^31-1), prints the
//       header, the counts and the first K documents' ids (default 3).
// --dtype auto is Megatron's best_fitting_dtype: uint16 for a vocabulary under 65,500 (text: GPT-2's
// 50,257; shards: the largest id + 1), else int32.
// Exit status: 0 ok, 1 runtime failure (unreadable or invalid file), 2 bad command line.
#include <string>
#include <vector>

#include "llmc/common.h"
#include "llmc/data.h"
#include "llmc/megatron_data.h"
#include "llmc/tokenizer.h"

static const int64_t GPT2_EOT = 50256;

struct Options {
    std::string command, out, dtype = "auto", shards, encoder = "data/gpt2/encoder.json", bpe = "data/gpt2/vocab.bpe";
    std::vector<std::string> texts;
    int64_t docs = 3, vocab_size = INT32_MAX;
};

static void usage(FILE* f) {
    fprintf(f, "usage: megatron_data write --from-text FILE... --out PREFIX [--dtype auto|uint16|int32] [--encoder P --bpe P]\n"
               "       megatron_data write --from-shards GLOB --out PREFIX [--dtype auto|uint16|int32]\n"
               "       megatron_data read PREFIX [--docs K] [--vocab-size V]\n");
}

static int64_t parse_count(const char* flag, const char* s) {
    char* end = nullptr;
    long long v = strtoll(s, &end, 10);
    if (*s == 0 || *end != 0 || v < 1) keel_usage_error("%s '%s': expected a positive integer", flag, s);
    return v;
}

static Options parse_args(int argc, char** argv) {
    Options o;
    if (argc < 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") { usage(stdout); exit(argc < 2 ? 2 : 0); }
    o.command = argv[1];
    if (o.command != "write" && o.command != "read") keel_usage_error("unknown command '%s' (write or read)", argv[1]);
    for (int i = 2; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) keel_usage_error("%s needs a value", a.c_str());
            return argv[++i];
        };
        if (a == "--from-text") {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) o.texts.push_back(argv[++i]);
            if (o.texts.empty()) keel_usage_error("--from-text needs at least one file");
        } else if (a == "--from-shards") o.shards = value();
        else if (a == "--out") o.out = value();
        else if (a == "--dtype") o.dtype = value();
        else if (a == "--encoder") o.encoder = value();
        else if (a == "--bpe") o.bpe = value();
        else if (a == "--docs") o.docs = parse_count("--docs", value().c_str());
        else if (a == "--vocab-size") o.vocab_size = parse_count("--vocab-size", value().c_str());
        else if (o.command == "read" && o.out.empty() && a.compare(0, 2, "--") != 0) o.out = a;  // read's PREFIX
        else keel_usage_error("unknown argument '%s'", a.c_str());
    }
    if (o.out.empty()) keel_usage_error(o.command == "write" ? "write needs --out PREFIX" : "read needs a PREFIX");
    if (o.command == "write" && o.texts.empty() == o.shards.empty()) keel_usage_error("write takes one of --from-text and --from-shards");
    if (o.dtype != "auto" && o.dtype != "uint16" && o.dtype != "int32") keel_usage_error("--dtype '%s': auto, uint16 or int32", o.dtype.c_str());
    return o;
}

// --from-text: one document per non-blank line, EOD appended.
static void read_text_documents(const Options* o, std::vector<int64_t>* tokens, std::vector<int64_t>* sizes) {
    Tokenizer tok;
    tokenizer_load(&tok, o->encoder.c_str(), o->bpe.c_str());
    std::vector<int> ids;
    for (const std::string& path : o->texts) {
        std::string text = file_read_all(path.c_str());
        for (size_t pos = 0; pos < text.size();) {
            size_t nl = text.find('\n', pos);
            if (nl == std::string::npos) nl = text.size();
            std::string line = text.substr(pos, nl - pos);
            pos = nl + 1;
            if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
            ids.clear();
            tokenizer_encode(&tok, line.data(), line.size(), ids);
            tokens->insert(tokens->end(), ids.begin(), ids.end());
            tokens->push_back(GPT2_EOT);
            sizes->push_back((int64_t)ids.size() + 1);
        }
    }
}

// --from-shards: the shards' tokens in order, a document ending after each EOT.
static void read_shard_documents(const Options* o, std::vector<int64_t>* tokens, std::vector<int64_t>* sizes) {
    int64_t start = 0;
    for (const std::string& path : dataloader_glob(o->shards)) {
        Shard s;
        shard_open(&s, path.c_str(), 65536);
        std::vector<uint16_t> buf(s.ntok);
        fseek(s.file, SHARD_HEADER_INTS * 4, SEEK_SET);
        if (s.ntok && fread(buf.data(), 2, s.ntok, s.file) != (size_t)s.ntok) keel_die("shard '%s': read failed", path.c_str());
        fclose(s.file);
        for (uint16_t id : buf) {
            tokens->push_back(id);
            if (id == GPT2_EOT) { sizes->push_back((int64_t)tokens->size() - start); start = (int64_t)tokens->size(); }
        }
    }
    if ((int64_t)tokens->size() > start) sizes->push_back((int64_t)tokens->size() - start);
}

static int write_command(const Options* o) {
    std::vector<int64_t> tokens, sizes;
    int64_t vocab = 0;
    if (!o->texts.empty()) {
        read_text_documents(o, &tokens, &sizes);
        vocab = GPT2_EOT + 1;
    } else {
        read_shard_documents(o, &tokens, &sizes);
        for (int64_t t : tokens) vocab = std::max(vocab, t + 1);
    }
    int dtype = o->dtype == "uint16" ? MD_UINT16 : o->dtype == "int32" ? MD_INT32 : megatron_best_dtype(vocab);
    megatron_write(o->out, tokens, sizes, dtype);
    printf("wrote %s.bin and %s.idx: %zu documents, %zu tokens, dtype %s\n", o->out.c_str(), o->out.c_str(), sizes.size(),
           tokens.size(), megatron_dtype_name(dtype));
    return 0;
}

static int read_command(const Options* o) {
    MegatronData md;
    megatron_open(&md, o->out, o->vocab_size);
    const MegatronIndex* ix = &md.ix;
    printf("%s: MMIDIDX version 1, dtype %d (%s), %zu sequences, %zu document-index entries (%zu documents), %lld tokens\n",
           md.idx_path.c_str(), ix->dtype, megatron_dtype_name(ix->dtype), ix->sizes.size(), ix->doc_idx.size(), ix->doc_idx.size() - 1,
           (long long)ix->ntok);
    FILE* f = fopen_check(md.bin_path.c_str(), "rb");
    for (int64_t d = 0; d < std::min<int64_t>(o->docs, (int64_t)ix->doc_idx.size() - 1); d++) {
        int64_t first = ix->doc_idx[d], last = ix->doc_idx[d + 1];  // sequences [first, last)
        int64_t begin = first < (int64_t)ix->sizes.size() ? ix->pointers[first] : ix->ntok * ix->width;
        int64_t end = last < (int64_t)ix->sizes.size() ? ix->pointers[last] : ix->ntok * ix->width;
        int64_t n = (end - begin) / ix->width;
        std::vector<uint8_t> buf(end - begin);
        fseeko(f, begin, SEEK_SET);
        if (n && fread(buf.data(), 1, buf.size(), f) != buf.size()) keel_die("megatron data '%s': read failed", md.bin_path.c_str());
        printf("document %lld: sequences %lld-%lld, %lld tokens:", (long long)d, (long long)first, (long long)last, (long long)n);
        for (int64_t i = 0; i < n; i++) printf(" %lld", (long long)megatron_token(&buf[i * ix->width], ix->dtype));
        printf("\n");
    }
    fclose(f);
    printf("valid: every id in [0, %lld)\n", (long long)o->vocab_size);
    return 0;
}

int main(int argc, char** argv) {
    Options o = parse_args(argc, argv);
    return o.command == "write" ? write_command(&o) : read_command(&o);
}
