// hf_tokenizer.h — a Hugging Face tokenizer (the `tokenizers` library's tokenizer.json) read into
// keel's byte-level BPE (llmc/tokenizer.h), and where a model id lives in the local HF cache.
//
// Contract
//   hf_tokenizer_resolve(name, flag)  the directory holding tokenizer.json, found offline only: name itself
//       when it is a directory; else a model id ORG/NAME in the HF cache, whose refs/main names the
//       snapshot: CACHE/models--ORG--NAME/snapshots/<refs/main>/. CACHE is the first set of
//       $TRANSFORMERS_CACHE, $HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE; else $HF_HOME/hub; else
//       $XDG_CACHE_HOME/huggingface/hub; else ~/.cache/huggingface/hub. Dies with one line naming
//       the paths it looked at.
//   hf_tokenizer_load(tok, dir)  reads dir/tokenizer.json, and the eos_token of dir/tokenizer_config.json
//       or else dir/special_tokens_map.json (transformers' eos_token_id: Megatron's EOD). What is read:
//         model        BPE: vocab, merges ("a b" strings or [a, b] pairs), ignore_merges; byte_fallback,
//                      unk_token and fuse_unk are accepted and have no effect because every byte has a
//                      token (required); dropout, continuing_subword_prefix, end_of_word_suffix refused;
//         normalizer   none (null);
//         pre_tokenizer  ByteLevel (add_prefix_space, use_regex; trim_offsets only moves offsets), or
//                      BLOOM's Sequence [Split(its regex, Isolated, invert false), ByteLevel(use_regex false)];
//         post_processor  none or ByteLevel (adds no token); decoder ByteLevel;
//         added_tokens  matched in the text before the model (single_word, lstrip, rstrip, normalized,
//                      special), as HF's AddedVocabulary does (llmc/tokenizer.h tokenizer_find_added);
//         truncation, padding  not read (transformers resets them per call).
//       Anything else is refused with one line naming the file, the key and the value.
//       tok->vocab_size is the model's vocabulary (transformers' vocab_size, which Megatron pads);
//       added tokens past it decode, and count only in ids.
//   hf_tokenizer_add_megatron_extras(tok)  the 21 special tokens <extra_id_00> .. <extra_id_20> that
//       BigScience's Megatron-DeepSpeed (_AutoTokenizer) adds to every PretrainedFromHF tokenizer.
//   hf_tokenizer_for_run(tok, type, name, vocab_file, merge_file)  the tokenizer of a run:
//       GPT2BPETokenizer (OpenAI's two files) or PretrainedFromHF (name resolved, extras added).
#pragma once
#include <sys/stat.h>

#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "llmc/common.h"
#include "llmc/json.h"
#include "llmc/tokenizer.h"

// BLOOM's Split pattern, as its tokenizer.json spells it (the only Split keel implements).
static const char* const HF_BLOOM_SPLIT = " ?[^(\\s|[.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c])]+";

struct HfTokReader {
    std::string path;                            // the file, for messages
    std::unordered_map<std::string, int> vocab;  // spelled token → id (model vocabulary, then added tokens)
};

[[noreturn]] static inline void hf_tok_fail(const HfTokReader* r, const std::string& key, const std::string& what) {
    keel_die("tokenizer file '%s': %s %s", r->path.c_str(), key.c_str(), what.c_str());
}

static inline bool hf_is_dir(const std::string& p) {
    struct stat sb;
    return stat(p.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode);
}

// ---- the HF cache ---------------------------------------------------------------------------------

static inline std::string hf_cache_dir() {
    for (const char* v : {"TRANSFORMERS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"})
        if (const char* e = getenv(v); e && *e) return e;
    if (const char* e = getenv("HF_HOME"); e && *e) return std::string(e) + "/hub";
    if (const char* e = getenv("XDG_CACHE_HOME"); e && *e) return std::string(e) + "/huggingface/hub";
    const char* home = getenv("HOME");
    return std::string(home && *home ? home : ".") + "/.cache/huggingface/hub";
}

static inline std::string hf_tokenizer_resolve(const std::string& name, const char* flag = "--tokenizer-name-or-path") {
    if (hf_is_dir(name)) return name;
    std::string cache = hf_cache_dir(), entry = "models--";
    for (char ch : name) entry += ch == '/' ? std::string("--") : std::string(1, ch);
    std::string ref_path = cache + "/" + entry + "/refs/main";
    if (!file_exists(ref_path.c_str()))
        keel_die("%s %s: not a directory, and not in the HF cache (no %s; keel never downloads: "
                 "set HF_HOME or give the directory)", flag, name.c_str(), ref_path.c_str());
    std::string rev = file_read_all(ref_path.c_str(), 256);
    while (!rev.empty() && (rev.back() == '\n' || rev.back() == '\r' || rev.back() == ' ')) rev.pop_back();
    std::string snap = cache + "/" + entry + "/snapshots/" + rev;
    if (rev.empty() || rev.find('/') != std::string::npos || !hf_is_dir(snap))
        keel_die("%s %s: %s names revision '%s', but %s is not a directory", flag, name.c_str(), ref_path.c_str(),
                 rev.c_str(), snap.c_str());
    return snap;
}

// ---- tokenizer.json -------------------------------------------------------------------------------

static inline const Json* hf_tok_member(const HfTokReader* r, const Json* obj, const std::string& path, const char* key, JsonType want,
                                        bool nullable) {
    const Json* v = json_get(obj, key);
    if (!v || (nullable && v->type == JSON_NULL)) return nullptr;
    static const char* const names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    if (v->type != want) hf_tok_fail(r, path + key, std::string("must be ") + names[want] + ", not " + names[v->type]);
    return v;
}

static inline bool hf_tok_bool(const HfTokReader* r, const Json* obj, const std::string& path, const char* key, bool fallback) {
    const Json* v = hf_tok_member(r, obj, path, key, JSON_BOOL, true);
    return v ? v->boolean : fallback;
}

static inline std::string hf_tok_type(const HfTokReader* r, const Json* obj, const std::string& path) {
    const Json* t = hf_tok_member(r, obj, path, "type", JSON_STRING, false);
    if (!t) hf_tok_fail(r, path + "type", "is missing");
    return t->text;
}

// A token as tokenizer.json spells it → the bytes it decodes to (HF's ByteLevel decoder: each character
// through GPT-2's byte alphabet; a token with a character outside it decodes to its own UTF-8).
static inline std::string hf_tok_bytes(const std::string& spelled, const int byte_of_cp[324]) {
    std::string raw;
    return tokenizer_unspell(spelled, byte_of_cp, raw) ? raw : spelled;
}

// model.vocab: ids must be dense from 0; every byte's character must be a token.
static inline void hf_tok_read_vocab(HfTokReader* r, Tokenizer* tok, const Json* model, const int cp_of_byte[256],
                                     const int byte_of_cp[324]) {
    const Json* vocab = hf_tok_member(r, model, "model.", "vocab", JSON_OBJECT, false);
    if (!vocab || vocab->members.empty()) hf_tok_fail(r, "model.vocab", "is missing or empty");
    tok->vocab_size = (int)vocab->members.size();
    tok->token_bytes.assign(vocab->members.size(), std::string());
    std::vector<bool> seen(vocab->members.size(), false);
    for (const auto& m : vocab->members) {
        int64_t id;
        if (!json_as_i64(&m.second, &id) || id < 0 || id >= tok->vocab_size || seen[id])
            hf_tok_fail(r, "model.vocab", "\"" + m.first + "\": id " + m.second.text + " is repeated or outside [0, " +
                                              std::to_string(tok->vocab_size) + "): ids must be dense");
        seen[id] = true;
        tok->token_bytes[id] = hf_tok_bytes(m.first, byte_of_cp);
        r->vocab[m.first] = (int)id;
    }
    for (int b = 0; b < 256; b++) {
        std::string spelled;
        tokenizer_utf8_append(spelled, (uint32_t)cp_of_byte[b]);
        auto it = r->vocab.find(spelled);
        if (it == r->vocab.end()) hf_tok_fail(r, "model.vocab", "has no token for byte 0x" + std::string(1, "0123456789ABCDEF"[b >> 4]) +
                                                                    "0123456789ABCDEF"[b & 15] + " (keel reads byte-level BPE only)");
        tok->byte_id[b] = it->second;
    }
}

// model.merges: "left right" or [left, right]; the rank is the position.
static inline void hf_tok_read_merges(const HfTokReader* r, Tokenizer* tok, const Json* model) {
    const Json* merges = hf_tok_member(r, model, "model.", "merges", JSON_ARRAY, false);
    if (!merges) hf_tok_fail(r, "model.merges", "is missing");
    tok->merges.clear();
    for (size_t k = 0; k < merges->items.size(); k++) {
        const Json& m = merges->items[k];
        std::string left, right, key = "model.merges[" + std::to_string(k) + "]";
        size_t sp = m.text.find(' ');
        if (m.type == JSON_STRING && sp != std::string::npos && m.text.find(' ', sp + 1) == std::string::npos) {
            left = m.text.substr(0, sp);
            right = m.text.substr(sp + 1);
        } else if (m.type == JSON_ARRAY && m.items.size() == 2 && m.items[0].type == JSON_STRING && m.items[1].type == JSON_STRING) {
            left = m.items[0].text;
            right = m.items[1].text;
        } else {
            hf_tok_fail(r, key, "is neither \"a b\" nor [\"a\", \"b\"]");
        }
        auto l = r->vocab.find(left), rt = r->vocab.find(right), both = r->vocab.find(left + right);
        if (l == r->vocab.end() || rt == r->vocab.end() || both == r->vocab.end())
            hf_tok_fail(r, key, "\"" + left + " " + right + "\" merges tokens missing from model.vocab");
        uint64_t pair = ((uint64_t)l->second << 32) | (uint32_t)rt->second;
        tok->merges[pair] = TokenizerMerge{(int)k, both->second};  // a repeated pair keeps its last rank, as HF's map does
    }
}

static inline void hf_tok_read_model(HfTokReader* r, Tokenizer* tok, const Json* root, const int cp_of_byte[256], const int byte_of_cp[324]) {
    const Json* model = hf_tok_member(r, root, "", "model", JSON_OBJECT, false);
    if (!model) hf_tok_fail(r, "model", "is missing");
    if (json_get(model, "type") && hf_tok_type(r, model, "model.") != "BPE")
        hf_tok_fail(r, "model.type", "\"" + hf_tok_type(r, model, "model.") + "\" is not supported (keel reads byte-level BPE)");
    if (hf_tok_member(r, model, "model.", "dropout", JSON_NUMBER, true)) hf_tok_fail(r, "model.dropout", "is not supported (BPE dropout)");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        const Json* v = hf_tok_member(r, model, "model.", k, JSON_STRING, true);
        if (v && !v->text.empty()) hf_tok_fail(r, std::string("model.") + k, "\"" + v->text + "\" is not supported (byte-level BPE has none)");
    }
    hf_tok_read_vocab(r, tok, model, cp_of_byte, byte_of_cp);
    hf_tok_read_merges(r, tok, model);
    tok->ignore_merges = hf_tok_bool(r, model, "model.", "ignore_merges", false);
    tok->whole.clear();
    if (tok->ignore_merges)
        for (const auto& m : r->vocab) tok->whole[tok->token_bytes[m.second]] = m.second;
}

// A ByteLevel pre-tokenizer: sets add_prefix_space; returns use_regex.
static inline bool hf_tok_byte_level(const HfTokReader* r, Tokenizer* tok, const Json* bl, const std::string& path) {
    tok->add_prefix_space = hf_tok_bool(r, bl, path, "add_prefix_space", true);
    hf_tok_bool(r, bl, path, "trim_offsets", true);  // offsets only: type-checked, no effect on ids
    return hf_tok_bool(r, bl, path, "use_regex", true);
}

// BLOOM's Sequence [Split(regex, Isolated, invert false), ByteLevel(use_regex false, no prefix space)].
static inline void hf_tok_read_sequence(const HfTokReader* r, Tokenizer* tok, const Json* pre) {
    const Json* list = hf_tok_member(r, pre, "pre_tokenizer.", "pretokenizers", JSON_ARRAY, false);
    const char* want = "is not supported: keel reads ByteLevel alone or BLOOM's [Split, ByteLevel(use_regex false)]";
    if (!list || list->items.empty() || list->items.size() > 2) hf_tok_fail(r, "pre_tokenizer.pretokenizers", want);
    if (list->items.size() == 1) {
        if (hf_tok_type(r, &list->items[0], "pre_tokenizer.pretokenizers[0].") != "ByteLevel") hf_tok_fail(r, "pre_tokenizer.pretokenizers", want);
        tok->pretok = hf_tok_byte_level(r, tok, &list->items[0], "pre_tokenizer.pretokenizers[0].") ? TOKPRE_GPT2_ONIG : TOKPRE_WHOLE;
        return;
    }
    const Json* split = &list->items[0];
    std::string sp = "pre_tokenizer.pretokenizers[0].";
    if (hf_tok_type(r, split, sp) != "Split" || hf_tok_type(r, &list->items[1], "pre_tokenizer.pretokenizers[1].") != "ByteLevel")
        hf_tok_fail(r, "pre_tokenizer.pretokenizers", want);
    const Json* pattern = hf_tok_member(r, split, sp, "pattern", JSON_OBJECT, false);
    const Json* regex = pattern ? hf_tok_member(r, pattern, sp + "pattern.", "Regex", JSON_STRING, false) : nullptr;
    if (!regex || regex->text != HF_BLOOM_SPLIT)
        hf_tok_fail(r, sp + "pattern", "is not supported: keel implements BLOOM's Regex \"" + std::string(HF_BLOOM_SPLIT) + "\" only");
    const Json* behavior = hf_tok_member(r, split, sp, "behavior", JSON_STRING, false);
    if (!behavior || behavior->text != "Isolated") hf_tok_fail(r, sp + "behavior", "must be \"Isolated\" (BLOOM's)");
    if (hf_tok_bool(r, split, sp, "invert", false)) hf_tok_fail(r, sp + "invert", "true is not supported");
    if (hf_tok_byte_level(r, tok, &list->items[1], "pre_tokenizer.pretokenizers[1].") || tok->add_prefix_space)
        hf_tok_fail(r, "pre_tokenizer.pretokenizers[1]", "after a Split must have use_regex false and add_prefix_space false (BLOOM's)");
    tok->pretok = TOKPRE_BLOOM;
}

static inline void hf_tok_read_pipeline(const HfTokReader* r, Tokenizer* tok, const Json* root) {
    if (const Json* n = hf_tok_member(r, root, "", "normalizer", JSON_OBJECT, true))
        hf_tok_fail(r, "normalizer", "\"" + hf_tok_type(r, n, "normalizer.") + "\" is not supported (keel reads tokenizers without a normalizer)");
    const Json* pre = hf_tok_member(r, root, "", "pre_tokenizer", JSON_OBJECT, true);
    if (!pre) hf_tok_fail(r, "pre_tokenizer", "is null: keel reads byte-level BPE (ByteLevel)");
    std::string type = hf_tok_type(r, pre, "pre_tokenizer.");
    if (type == "ByteLevel") tok->pretok = hf_tok_byte_level(r, tok, pre, "pre_tokenizer.") ? TOKPRE_GPT2_ONIG : TOKPRE_WHOLE;
    else if (type == "Sequence") hf_tok_read_sequence(r, tok, pre);
    else hf_tok_fail(r, "pre_tokenizer", "\"" + type + "\" is not supported (ByteLevel, or BLOOM's Sequence)");
    if (const Json* post = hf_tok_member(r, root, "", "post_processor", JSON_OBJECT, true)) {
        std::string t = hf_tok_type(r, post, "post_processor.");
        if (t != "ByteLevel") hf_tok_fail(r, "post_processor", "\"" + t + "\" is not supported (it adds tokens; keel reads none or ByteLevel)");
    }
    const Json* dec = hf_tok_member(r, root, "", "decoder", JSON_OBJECT, true);
    if (!dec || hf_tok_type(r, dec, "decoder.") != "ByteLevel")
        hf_tok_fail(r, "decoder", std::string(dec ? "\"" + hf_tok_type(r, dec, "decoder.") + "\"" : "null") + " is not supported (ByteLevel)");
}

// added_tokens: ids inside the vocabulary name its token; past it they continue it without a gap.
static inline void hf_tok_read_added(HfTokReader* r, Tokenizer* tok, const Json* root, const int byte_of_cp[324]) {
    const Json* list = hf_tok_member(r, root, "", "added_tokens", JSON_ARRAY, true);
    std::vector<TokenizerAdded> added;
    for (size_t k = 0; list && k < list->items.size(); k++) {
        const Json* t = &list->items[k];
        std::string key = "added_tokens[" + std::to_string(k) + "].";
        const Json* content = hf_tok_member(r, t, key, "content", JSON_STRING, false);
        int64_t id;
        if (!content || content->text.empty()) hf_tok_fail(r, key + "content", "is missing or empty");
        if (!json_as_i64(json_get(t, "id"), &id) || id < 0 || id > (int64_t)tok->token_bytes.size())
            hf_tok_fail(r, key + "id", "must be a token id up to " + std::to_string(tok->token_bytes.size()) + " (added ids continue the vocabulary)");
        if (id == (int64_t)tok->token_bytes.size()) tok->token_bytes.push_back(hf_tok_bytes(content->text, byte_of_cp));
        else tok->token_bytes[id] = hf_tok_bytes(content->text, byte_of_cp);
        r->vocab[content->text] = (int)id;
        bool special = hf_tok_bool(r, t, key, "special", false);
        added.push_back({content->text, (int)id, hf_tok_bool(r, t, key, "single_word", false), hf_tok_bool(r, t, key, "lstrip", false),
                         hf_tok_bool(r, t, key, "rstrip", false), hf_tok_bool(r, t, key, "normalized", !special), special});
    }
    tokenizer_set_added(tok, added);
}

// A transformers config file beside tokenizer.json (tokenizer_config.json, special_tokens_map.json);
// false when absent.
static inline bool hf_tok_config_file(const std::string& path, Json* root) {
    if (!file_exists(path.c_str())) return false;
    std::string text = file_read_all(path.c_str()), err;
    if (!json_parse(text.data(), text.size(), root, &err)) keel_die("tokenizer file '%s': malformed JSON: %s", path.c_str(), err.c_str());
    return true;
}

// Its eos_token: a string or {"content": ...}; "" when absent or null.
static inline std::string hf_tok_config_eos(const std::string& path, const Json* root) {
    const Json* eos = json_get(root, "eos_token");
    if (eos && eos->type == JSON_OBJECT) eos = json_get(eos, "content");
    if (!eos || eos->type == JSON_NULL) return "";
    if (eos->type != JSON_STRING) keel_die("tokenizer file '%s': eos_token must be a string or {\"content\": ...}", path.c_str());
    return eos->text;
}

// The end-of-document id: tokenizer_config.json's eos_token, else special_tokens_map.json's (-1: none).
// tokenizer_config.json's add_prefix_space overrides a top-level ByteLevel's (transformers' GPT-2 and
// BLOOM fast tokenizers rebuild the pre-tokenizer with it).
static inline void hf_tok_read_config(const HfTokReader* r, Tokenizer* tok, const std::string& dir) {
    std::string config = dir + "/tokenizer_config.json", map = dir + "/special_tokens_map.json", eos;
    Json croot, mroot;
    bool have_config = hf_tok_config_file(config, &croot);
    if (have_config) eos = hf_tok_config_eos(config, &croot);
    if (eos.empty() && hf_tok_config_file(map, &mroot)) eos = hf_tok_config_eos(map, &mroot);
    tok->eod = -1;
    if (!eos.empty()) {
        auto it = r->vocab.find(eos);
        if (it == r->vocab.end()) keel_die("tokenizer directory '%s': eos_token \"%s\" is not a token of tokenizer.json", dir.c_str(), eos.c_str());
        tok->eod = it->second;
    }
    const Json* aps = have_config ? json_get(&croot, "add_prefix_space") : nullptr;
    if (aps && aps->type == JSON_BOOL && tok->pretok != TOKPRE_BLOOM) tok->add_prefix_space = aps->boolean;
}

// The tokenizer.json at json_path; the config files are looked for in dir.
static inline void hf_tokenizer_load_file(Tokenizer* tok, const std::string& json_path, const std::string& dir) {
    HfTokReader r;
    r.path = json_path;
    std::string text = file_read_all(r.path.c_str()), err;
    Json root;
    if (!json_parse(text.data(), text.size(), &root, &err)) keel_die("tokenizer file '%s': malformed JSON: %s", r.path.c_str(), err.c_str());
    if (root.type != JSON_OBJECT) keel_die("tokenizer file '%s': the top level must be a JSON object", r.path.c_str());
    int cp_of_byte[256], byte_of_cp[324];
    tokenizer_byte_alphabet(cp_of_byte);
    std::fill(byte_of_cp, byte_of_cp + 324, -1);
    for (int b = 0; b < 256; b++) byte_of_cp[cp_of_byte[b]] = b;
    hf_tok_read_model(&r, tok, &root, cp_of_byte, byte_of_cp);
    hf_tok_read_pipeline(&r, tok, &root);
    hf_tok_read_added(&r, tok, &root, byte_of_cp);
    hf_tok_read_config(&r, tok, dir);
    tok->serial = ++tokenizer_load_count;
}

static inline void hf_tokenizer_load(Tokenizer* tok, const std::string& dir) {
    std::string path = dir + "/tokenizer.json";
    if (!file_exists(path.c_str())) keel_die("tokenizer directory '%s' has no tokenizer.json", dir.c_str());
    hf_tokenizer_load_file(tok, path, dir);
}

// _AutoTokenizer's add_special_tokens: a token already known keeps its id; a new one takes the next id.
static inline void hf_tokenizer_add_megatron_extras(Tokenizer* tok) {
    std::vector<TokenizerAdded> added = tok->added;
    for (int k = 0; k <= 20; k++) {
        char content[24];  // (k ≤ 20: 14 bytes; room for any int, so no truncation warning)
        snprintf(content, sizeof content, "<extra_id_%02d>", k);
        int id = -1;
        for (size_t i = 0; i < tok->token_bytes.size() && id < 0; i++)
            if (tok->token_bytes[i] == content) id = (int)i;
        bool listed = false;
        for (const TokenizerAdded& a : added) listed = listed || a.content == content;
        if (listed) continue;
        if (id < 0) {
            id = (int)tok->token_bytes.size();
            tok->token_bytes.push_back(content);
        }
        added.push_back({content, id, false, false, false, false, true});
    }
    tokenizer_set_added(tok, added);
    tok->serial = ++tokenizer_load_count;
}

static inline void hf_tokenizer_for_run(Tokenizer* tok, const std::string& type, const std::string& name, const std::string& vocab_file,
                                        const std::string& merge_file) {
    if (type != "PretrainedFromHF") {
        tokenizer_load(tok, vocab_file.c_str(), merge_file.c_str());
        return;
    }
    hf_tokenizer_load(tok, hf_tokenizer_resolve(name));
    hf_tokenizer_add_megatron_extras(tok);
}

// ---- writing tokenizer.json -------------------------------------------------------------------------

// dir/tokenizer.json and dir/tokenizer_config.json for a loaded tokenizer, in the form HF's own files
// take: the vocabulary spelled in GPT-2's byte alphabet, the merges as "a b" in rank order, the
// end-of-document token as a special added token and the eos_token. pretok picks the pre-tokenizer
// written: TOKPRE_GPT2_ONIG (GPT-2's ByteLevel) or TOKPRE_BLOOM (BLOOM's Split + ByteLevel).
static inline void hf_tokenizer_save(const Tokenizer* tok, const std::string& dir, int pretok) {
    int cp_of_byte[256];
    tokenizer_byte_alphabet(cp_of_byte);
    auto spell = [&](const std::string& raw) {
        std::string s;
        for (unsigned char b : raw) tokenizer_utf8_append(s, (uint32_t)cp_of_byte[b]);
        return json_quote(s);
    };
    std::vector<std::pair<int, uint64_t>> ranked;  // (rank, pair)
    for (const auto& m : tok->merges) ranked.push_back({m.second.rank, m.first});
    std::sort(ranked.begin(), ranked.end());
    std::string j = "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [";
    if (tok->eod >= 0)
        j += "\n    {\"id\": " + std::to_string(tok->eod) + ", \"content\": " + json_quote(tok->token_bytes[tok->eod]) +
             ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}\n  ";
    j += "],\n  \"normalizer\": null,\n  \"pre_tokenizer\": ";
    const char* byte_level = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": ";
    if (pretok == TOKPRE_BLOOM)
        j += "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": " + json_quote(HF_BLOOM_SPLIT) +
             "}, \"behavior\": \"Isolated\", \"invert\": false}, " + byte_level + "false}]}";
    else
        j += std::string(byte_level) + "true}";
    j += ",\n  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, \"use_regex\": true},\n"
         "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n"
         "  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": \"\", "
         "\"end_of_word_suffix\": \"\", \"fuse_unk\": false, \"byte_fallback\": false, \"vocab\": {";
    for (int id = 0; id < tok->vocab_size; id++) j += std::string(id ? ",\n" : "\n") + "    " + spell(tok->token_bytes[id]) + ": " + std::to_string(id);
    j += "\n  }, \"merges\": [";
    for (size_t k = 0; k < ranked.size(); k++) {
        int l = (int)(ranked[k].second >> 32), r = (int)(uint32_t)ranked[k].second;
        std::string a = spell(tok->token_bytes[l]), b = spell(tok->token_bytes[r]);
        j += std::string(k ? ",\n" : "\n") + "    " + a.substr(0, a.size() - 1) + " " + b.substr(1);
    }
    j += "\n  ]}\n}\n";
    mkdir_p(dir);
    std::string cfg = "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"eos_token\": " +
                      (tok->eod >= 0 ? json_quote(tok->token_bytes[tok->eod]) : std::string("null")) + "\n}\n";
    for (const auto& f : {std::make_pair(dir + "/tokenizer.json", j), std::make_pair(dir + "/tokenizer_config.json", cfg)}) {
        FILE* out = fopen_check(f.first.c_str(), "wb");
        fwrite_check(f.second.data(), 1, f.second.size(), out, f.first.c_str());
        FILE_CHECK(fclose(out) == 0, "fclose", f.first.c_str());
    }
}
