// tokenize_gpt2 — GPT-2 BPE on the command line: text → ids, ids → text, documents → an llm.c shard.
// With --tokenizer DIR|ORG/NAME the tokenizer is a Hugging Face tokenizer.json (llmc/hf_tokenizer.h:
// a directory, or a model id in the local HF cache), read as `tokenizers` reads it.
//
// Contract
//   tokenize_gpt2 [flags] < text.txt                 prints the ids, space-separated, on one line
//   tokenize_gpt2 --decode [flags] < ids.txt          ids (separated by any whitespace) → raw bytes
//   tokenize_gpt2 [flags] --documents FILE...         encodes each FILE as one document
//   --shard-out PATH writes the ids as an llm.c shard (llmc/data.h) instead of printing them.
//   tokenize_gpt2 --save-tokenizer DIR [--pretokenizer gpt2|bloom]   writes the tokenizer in Hugging
//       Face's format (e.g. GPT-2's vocabulary with BLOOM's pre-tokenizer, for a PretrainedFromHF run).
// Documents: each document is prefixed by <|endoftext|> (id 50256; with --tokenizer, its eos_token), the llm.c / FineWeb convention,
// so a model sees "end of the previous text" before every document, the first included. Plain stdin
// input gets no prefix. The literal text "<|endoftext|>" inside any input is ordinary text (as in the
// JS encoder): only --documents inserts id 50256. A Hugging Face tokenizer matches its added tokens
// (<|endoftext|>, </s>, ...) inside the text, as `tokenizers` does.
// Input bytes need not be valid UTF-8; see llmc/tokenizer.h for how invalid bytes are kept lossless.
// Exit status: 0 ok, 1 runtime failure (unreadable file, bad id), 2 bad command line.
#include <string>
#include <vector>

#include "llmc/common.h"
#include "llmc/data.h"
#include "llmc/hf_tokenizer.h"
#include "llmc/tokenizer.h"

struct Options {
    std::string encoder = "data/gpt2/encoder.json";
    std::string bpe = "data/gpt2/vocab.bpe";
    std::string shard_out;
    std::string tokenizer;
    std::string save_tokenizer;
    std::string pretokenizer = "gpt2";
    bool decode = false;
    bool help = false;
    std::vector<std::string> documents;
};

// The one flag table: the parser and the -h text both read it.
struct CliFlag {
    const char* name;
    const char* metavar;            // nullptr for a switch
    std::string Options::*value;    // where a flag with an argument stores it
    bool Options::*on;              // where a switch stores itself
    const char* help;
};

static const CliFlag CLI_FLAGS[] = {
    {"--encoder", "PATH", &Options::encoder, nullptr, "GPT-2 encoder.json (token → id)"},
    {"--bpe", "PATH", &Options::bpe, nullptr, "GPT-2 vocab.bpe (the ranked merges)"},
    {"--tokenizer", "DIR|ORG/NAME", &Options::tokenizer, nullptr,
     "a Hugging Face tokenizer.json: its directory, or a model id in the local HF cache (instead of --encoder/--bpe)"},
    {"--save-tokenizer", "DIR", &Options::save_tokenizer, nullptr,
     "write the tokenizer as DIR/tokenizer.json + tokenizer_config.json (Hugging Face's format) and exit"},
    {"--pretokenizer", "gpt2|bloom", &Options::pretokenizer, nullptr,
     "--save-tokenizer's pre-tokenizer: GPT-2's ByteLevel regex, or BLOOM's Split + ByteLevel"},
    {"--decode", nullptr, nullptr, &Options::decode, "read ids from stdin, write the raw bytes they spell"},
    {"--shard-out", "PATH", &Options::shard_out, nullptr, "write the ids as an llm.c shard instead of text"},
    {"--documents", "FILE...", nullptr, nullptr,
     "encode each FILE as one document prefixed by <|endoftext|> (50256; with --tokenizer, its eos_token); every later argument is a FILE"},
    {"-h", nullptr, nullptr, &Options::help, "print this help"},
};

static void cli_print_help() {
    Options defaults;
    printf("usage: tokenize_gpt2 [flags] [--documents FILE...]   (text on stdin → ids on stdout)\n");
    for (const CliFlag& f : CLI_FLAGS) {
        std::string left = std::string(f.name) + (f.metavar ? std::string(" ") + f.metavar : "");
        printf("  %-22s %s", left.c_str(), f.help);
        if (f.value && !(defaults.*f.value).empty()) printf(" (default %s)", (defaults.*f.value).c_str());
        printf("\n");
    }
}

static Options cli_parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; i++) {
        const CliFlag* flag = nullptr;
        for (const CliFlag& f : CLI_FLAGS)
            if (strcmp(argv[i], f.name) == 0) flag = &f;
        if (!flag) keel_usage_error("unknown argument '%s'", argv[i]);
        if (strcmp(flag->name, "--documents") == 0) {
            o.documents.assign(argv + i + 1, argv + argc);
            if (o.documents.empty()) keel_usage_error("--documents needs at least one FILE");
            break;
        }
        if (flag->on) { o.*flag->on = true; continue; }
        if (i + 1 >= argc) keel_usage_error("%s needs a value (%s)", flag->name, flag->metavar);
        o.*flag->value = argv[++i];
    }
    if (o.pretokenizer != "gpt2" && o.pretokenizer != "bloom") keel_usage_error("--pretokenizer '%s': gpt2 or bloom", o.pretokenizer.c_str());
    if (o.decode && (!o.shard_out.empty() || !o.documents.empty()))
        keel_usage_error("--decode reads ids from stdin; it takes neither --shard-out nor --documents");
    return o;
}

static std::string cli_read_stdin() {
    std::string s;
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) s.append(buf, n);
    if (ferror(stdin)) keel_die("reading stdin failed: %s", strerror(errno));
    return s;
}

// Parses whitespace-separated decimal ids strictly: "12x" is an error, not 12.
static std::vector<int> cli_parse_ids(const std::string& s) {
    std::vector<int> ids;
    for (size_t i = 0; i < s.size();) {
        if (isspace((unsigned char)s[i])) { i++; continue; }
        size_t end = i;
        while (end < s.size() && !isspace((unsigned char)s[end])) end++;
        std::string word = s.substr(i, end - i);
        bool digits = word.size() <= 10 && word.find_first_not_of("0123456789") == std::string::npos;
        long long v = digits ? atoll(word.c_str()) : -1;
        if (v < 0 || v > INT32_MAX) keel_die("--decode: '%.40s' is not a token id", word.c_str());
        ids.push_back((int)v);
        i = end;
    }
    return ids;
}

static void cli_write_ids(const std::vector<int>& ids) {
    std::string line;
    line.reserve(ids.size() * 6);
    for (size_t k = 0; k < ids.size(); k++) {
        if (k) line += ' ';
        line += std::to_string(ids[k]);
    }
    line += '\n';
    fwrite_check(line.data(), 1, line.size(), stdout, "<stdout>");
}

static void cli_write_shard(const char* path, const std::vector<int>& ids) {
    for (int id : ids)
        if (id > 65535) keel_die("--shard-out: id %d does not fit an llm.c shard (uint16 tokens)", id);
    std::vector<uint16_t> tokens(ids.begin(), ids.end());
    shard_write(path, tokens.data(), tokens.size());
}

int main(int argc, char** argv) {
    Options o = cli_parse(argc, argv);
    if (o.help) { cli_print_help(); return 0; }
    Tokenizer tok;
    if (o.tokenizer.empty()) tokenizer_load(&tok, o.encoder.c_str(), o.bpe.c_str());
    else hf_tokenizer_load(&tok, hf_tokenizer_resolve(o.tokenizer, "--tokenizer"));
    if (!o.save_tokenizer.empty()) {
        hf_tokenizer_save(&tok, o.save_tokenizer, o.pretokenizer == "bloom" ? TOKPRE_BLOOM : TOKPRE_GPT2_ONIG);
        return 0;
    }
    if (!o.documents.empty() && tok.eod < 0)
        keel_die("--documents: the tokenizer names no end-of-document token (no eos_token in tokenizer_config.json or special_tokens_map.json)");
    if (o.decode) {
        std::vector<int> ids = cli_parse_ids(cli_read_stdin());
        std::string bytes;
        tokenizer_decode(&tok, ids.data(), ids.size(), bytes);
        fwrite_check(bytes.data(), 1, bytes.size(), stdout, "<stdout>");
        return 0;
    }
    std::vector<int> ids;
    if (o.documents.empty()) {
        std::string text = cli_read_stdin();
        tokenizer_encode(&tok, text.data(), text.size(), ids);
    }
    for (const std::string& path : o.documents) {
        std::string text = file_read_all(path.c_str());
        ids.push_back(tok.eod);
        tokenizer_encode(&tok, text.data(), text.size(), ids);
    }
    if (o.shard_out.empty()) cli_write_ids(ids);
    else cli_write_shard(o.shard_out.c_str(), ids);
    FILE_CHECK(fflush(stdout) == 0, "fflush", "<stdout>");
    return 0;
}
