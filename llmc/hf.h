// hf.h — Hugging Face model directories for GPT-2, BLOOM and OPT: --export-hf DIR writes what
// transformers loads with no conversion script, --load-hf DIR starts a run from such a directory.
//
// Which architecture (hf_arch_of): the model's knobs name exactly one, or none:
//   GPT2LMHeadModel   learned positions, GeLU (tanh: "gelu_new"), no embedding LayerNorm
//   BloomForCausalLM  ALiBi, embedding LayerNorm, GeLU
//   OPTForCausalLM    learned positions, ReLU, pre-LayerNorm (do_layer_norm_before), no embedding LayerNorm
//   refused: NormFormer (no place for its head scales and LayerNorms), ALiBi without the embedding
//   LayerNorm or with ReLU (BLOOM has both fixed), the embedding LayerNorm with learned positions
//   (GPT-2 and OPT have none). keel has no model with both ALiBi and a position table.
//   The attention-scaling knobs (--attention-scaling qk-inward, --apply-query-key-layer-scaling)
//   compute softmax(q·k/√hs [+ ALiBi]) like the plain formula and differ only in rounding, so they
//   export as the plain architecture; every HF class here uses LayerNorm eps 1e-5, keel's.
//
// Tensor layouts (one table per architecture below; HF_* says how an HF tensor is made from
// keel's canonical one, layer by layer; hf_keel_index is the one element map both directions use):
//   keel stores every matrix (out, in) like torch's nn.Linear, QKV fused as (3, NH, hs) rows.
//   GPT-2's Conv1D stores (in, out): transposed. BLOOM's fused QKV interleaves per head: rows
//   (NH, 3, hs). OPT splits q, k, v into three Linear layers and keeps 2 unused rows in front of
//   its position table (positions are looked up at position + 2).
//   The LM head is tied to the word embedding in all three, so it is not written (HF's own
//   save_pretrained drops it too); a file that holds lm_head.weight is read only if it equals the
//   embedding. The word embedding holds the V real rows (keel's padding rows dropped, config
//   vocab_size = V), so HF's softmax runs over exactly the logits keel's loss uses.
//
// Contract
//   hf_export_check(c)   at start-up (exit 2): the model maps to an architecture, --export-hf's
//       directory is absent or holds only files an export writes (it is replaced whole), and with
//       GPT-2's vocabulary (V = 50257) the tokenizer files (--vocab-file, --merge-file) load.
//   hf_export(dir, params, pt, g, c, fault)   writes dir atomically from the whole model's canonical
//       parameters: everything goes into dir.tmp/ (each file fsync'd), which then replaces dir in
//       one step (renameat2 RENAME_EXCHANGE; where the filesystem lacks it, two renames through
//       dir.old). Files: model.safetensors (--export-dtype fp32|bf16|fp16, round to nearest even;
//       fp16 refuses a weight beyond its range), config.json, and the tokenizer: under --tokenizer-type
//       PretrainedFromHF the files of its directory (tokenizer.json, tokenizer_config.json,
//       special_tokens_map.json) as they are; else with V = 50257 GPT-2's: vocab.json (= encoder.json),
//       merges.txt (= vocab.bpe), tokenizer_config.json.
//   hf_config_apply(c)   before the flags are validated: reads dir/config.json; the architecture's
//       knobs (--position-embedding-type, --embed-layernorm, --activation) and the shape
//       (--num-layers, --hidden-size, --num-attention-heads, --vocab-size, --max-position-embeddings)
//       are taken from it where the flag has its default, and must equal it where the flag was
//       changed (exit 2 naming the flag and the file's value). Settings keel cannot compute
//       (another LayerNorm eps, post-LayerNorm OPT, OPT's embedding projection, untied head, ...)
//       are refused naming the key.
//   hf_load(dir, params, pt, g)   fills the canonical buffer from dir/model.safetensors (F32, BF16 or
//       F16, widened exactly): every tensor of the architecture must be present with its exact shape;
//       a missing, misshapen, unknown-dtype or unexpected tensor, a weight that is NaN or infinite,
//       or a malformed file (llmc/safetensors.h), is refused with one line. GPT-2's attention-mask buffers
//       (h.N.attn.bias, h.N.attn.masked_bias, in files from older transformers) are skipped. Names
//       are read with or without the base-model prefix (transformer. / model.), as HF does. keel's
//       tensors outside the architecture (--normformer's) keep the values the caller initialised.
#pragma once
#include <dirent.h>
#include <sys/stat.h>

#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/checkpoint.h"
#include "llmc/common.h"
#include "llmc/flags.h"
#include "llmc/json.h"
#include "llmc/model.h"
#include "llmc/safetensors.h"
#include "llmc/hf_tokenizer.h"
#include "llmc/tokenizer.h"

enum HfArch { HF_GPT2, HF_BLOOM, HF_OPT, HF_NUM_ARCHS };

struct HfArchInfo {
    const char* cls;         // config.json "architectures"
    const char* model_type;  // config.json "model_type"
    const char* prefix;      // the base model's name in the causal-LM class's state dict
    const char* knobs;       // what keel calls it
};
static const HfArchInfo HF_ARCHS[HF_NUM_ARCHS] = {
    {"GPT2LMHeadModel", "gpt2", "transformer.", "learned positions, GeLU"},
    {"BloomForCausalLM", "bloom", "transformer.", "ALiBi, embedding LayerNorm, GeLU"},
    {"OPTForCausalLM", "opt", "model.", "learned positions, ReLU, pre-LayerNorm"},
};

// The Hugging Face architecture that computes this model, or -1 with *why naming the knob.
static inline int hf_arch_of(const GPTConfig* g, std::string* why) {
    if (g->normformer) { *why = "--normformer: its head scales and extra LayerNorms have no place in GPT-2, BLOOM or OPT"; return -1; }
    bool relu = g->activation == ACT_RELU;
    if (g->alibi) {
        if (!g->embed_layernorm) {
            *why = "--position-embedding-type alibi without --embed-layernorm: BLOOM, the ALiBi architecture, always normalizes the word embedding";
            return -1;
        }
        if (relu) { *why = "--position-embedding-type alibi with --activation relu: BLOOM's MLP is GeLU"; return -1; }
        if (gpt_ffn(g) != 4 * g->channels) {  // BloomConfig has no width key: its MLP is 4 x hidden_size
            *why = "--ffn-hidden-size other than 4 x hidden-size: BLOOM's config has no MLP width (it is always 4 x hidden_size)";
            return -1;
        }
        return HF_BLOOM;
    }
    if (g->embed_layernorm) {
        *why = "--embed-layernorm with learned positions: neither GPT-2 nor OPT normalizes the word embedding (BLOOM does, with ALiBi "
               "instead of a position table)";
        return -1;
    }
    return relu ? HF_OPT : HF_GPT2;
}

// ---- tensor maps ----------------------------------------------------------------------------------

enum HfHow {
    HF_SAME,         // keel's tensor (one layer's slice) as it is; one-row tensors as vectors
    HF_VOCAB,        // the V real rows of keel's Vp
    HF_TRANSPOSE,    // GPT-2's Conv1D: (in, out), keel's (out, in) transposed
    HF_QKV_HEADS,    // BLOOM's fused QKV: outputs ordered (NH, 3, hs), keel's (3, NH, hs)
    HF_QKV_PART,     // OPT's q, k or v (part 0, 1, 2): outputs [part·C, (part+1)·C) of keel's fused QKV
    HF_POS_OFFSET2,  // OPT's positions: 2 rows in front (written 0, never looked up), then keel's rows
};

struct HfTensorMap {
    const char* name;  // without the base-model prefix; %d: the layer
    int id;            // ParamId
    HfHow how;
    int part;
};

static const HfTensorMap HF_GPT2_TENSORS[] = {
    {"wte.weight", P_WTE, HF_VOCAB, 0},
    {"wpe.weight", P_WPE, HF_SAME, 0},
    {"h.%d.ln_1.weight", P_LN1W, HF_SAME, 0},
    {"h.%d.ln_1.bias", P_LN1B, HF_SAME, 0},
    {"h.%d.attn.c_attn.weight", P_QKVW, HF_TRANSPOSE, 0},
    {"h.%d.attn.c_attn.bias", P_QKVB, HF_SAME, 0},
    {"h.%d.attn.c_proj.weight", P_ATTPROJW, HF_TRANSPOSE, 0},
    {"h.%d.attn.c_proj.bias", P_ATTPROJB, HF_SAME, 0},
    {"h.%d.ln_2.weight", P_LN2W, HF_SAME, 0},
    {"h.%d.ln_2.bias", P_LN2B, HF_SAME, 0},
    {"h.%d.mlp.c_fc.weight", P_FCW, HF_TRANSPOSE, 0},
    {"h.%d.mlp.c_fc.bias", P_FCB, HF_SAME, 0},
    {"h.%d.mlp.c_proj.weight", P_FCPROJW, HF_TRANSPOSE, 0},
    {"h.%d.mlp.c_proj.bias", P_FCPROJB, HF_SAME, 0},
    {"ln_f.weight", P_LNFW, HF_SAME, 0},
    {"ln_f.bias", P_LNFB, HF_SAME, 0},
};
static const HfTensorMap HF_BLOOM_TENSORS[] = {
    {"word_embeddings.weight", P_WTE, HF_VOCAB, 0},
    {"word_embeddings_layernorm.weight", P_LNEW, HF_SAME, 0},
    {"word_embeddings_layernorm.bias", P_LNEB, HF_SAME, 0},
    {"h.%d.input_layernorm.weight", P_LN1W, HF_SAME, 0},
    {"h.%d.input_layernorm.bias", P_LN1B, HF_SAME, 0},
    {"h.%d.self_attention.query_key_value.weight", P_QKVW, HF_QKV_HEADS, 0},
    {"h.%d.self_attention.query_key_value.bias", P_QKVB, HF_QKV_HEADS, 0},
    {"h.%d.self_attention.dense.weight", P_ATTPROJW, HF_SAME, 0},
    {"h.%d.self_attention.dense.bias", P_ATTPROJB, HF_SAME, 0},
    {"h.%d.post_attention_layernorm.weight", P_LN2W, HF_SAME, 0},
    {"h.%d.post_attention_layernorm.bias", P_LN2B, HF_SAME, 0},
    {"h.%d.mlp.dense_h_to_4h.weight", P_FCW, HF_SAME, 0},
    {"h.%d.mlp.dense_h_to_4h.bias", P_FCB, HF_SAME, 0},
    {"h.%d.mlp.dense_4h_to_h.weight", P_FCPROJW, HF_SAME, 0},
    {"h.%d.mlp.dense_4h_to_h.bias", P_FCPROJB, HF_SAME, 0},
    {"ln_f.weight", P_LNFW, HF_SAME, 0},
    {"ln_f.bias", P_LNFB, HF_SAME, 0},
};
static const HfTensorMap HF_OPT_TENSORS[] = {
    {"decoder.embed_tokens.weight", P_WTE, HF_VOCAB, 0},
    {"decoder.embed_positions.weight", P_WPE, HF_POS_OFFSET2, 0},
    {"decoder.layers.%d.self_attn_layer_norm.weight", P_LN1W, HF_SAME, 0},
    {"decoder.layers.%d.self_attn_layer_norm.bias", P_LN1B, HF_SAME, 0},
    {"decoder.layers.%d.self_attn.q_proj.weight", P_QKVW, HF_QKV_PART, 0},
    {"decoder.layers.%d.self_attn.q_proj.bias", P_QKVB, HF_QKV_PART, 0},
    {"decoder.layers.%d.self_attn.k_proj.weight", P_QKVW, HF_QKV_PART, 1},
    {"decoder.layers.%d.self_attn.k_proj.bias", P_QKVB, HF_QKV_PART, 1},
    {"decoder.layers.%d.self_attn.v_proj.weight", P_QKVW, HF_QKV_PART, 2},
    {"decoder.layers.%d.self_attn.v_proj.bias", P_QKVB, HF_QKV_PART, 2},
    {"decoder.layers.%d.self_attn.out_proj.weight", P_ATTPROJW, HF_SAME, 0},
    {"decoder.layers.%d.self_attn.out_proj.bias", P_ATTPROJB, HF_SAME, 0},
    {"decoder.layers.%d.final_layer_norm.weight", P_LN2W, HF_SAME, 0},
    {"decoder.layers.%d.final_layer_norm.bias", P_LN2B, HF_SAME, 0},
    {"decoder.layers.%d.fc1.weight", P_FCW, HF_SAME, 0},
    {"decoder.layers.%d.fc1.bias", P_FCB, HF_SAME, 0},
    {"decoder.layers.%d.fc2.weight", P_FCPROJW, HF_SAME, 0},
    {"decoder.layers.%d.fc2.bias", P_FCPROJB, HF_SAME, 0},
    {"decoder.final_layer_norm.weight", P_LNFW, HF_SAME, 0},
    {"decoder.final_layer_norm.bias", P_LNFB, HF_SAME, 0},
};

// The table of an architecture: its first entry, and *n entries.
static inline const HfTensorMap* hf_tensor_maps(int arch, int* n) {
    if (arch == HF_GPT2) { *n = (int)(sizeof HF_GPT2_TENSORS / sizeof HF_GPT2_TENSORS[0]); return HF_GPT2_TENSORS; }
    if (arch == HF_BLOOM) { *n = (int)(sizeof HF_BLOOM_TENSORS / sizeof HF_BLOOM_TENSORS[0]); return HF_BLOOM_TENSORS; }
    *n = (int)(sizeof HF_OPT_TENSORS / sizeof HF_OPT_TENSORS[0]);
    return HF_OPT_TENSORS;
}

// One HF tensor: its name (without prefix) for layer l, and where keel's layer slice is.
struct HfTensor {
    std::string name;
    const HfTensorMap* map;
    const ParamTensor* t;      // keel's tensor in the whole model's table
    int64_t offset_canonical;  // layer l's slice of it
    std::vector<uint64_t> shape;
    int64_t numel;
};

// keel's (rows, cols) slice seen as O outputs of I inputs each: a matrix's rows are its outputs,
// a one-row tensor (bias, LayerNorm) is O = cols values of one input each.
static inline void hf_outputs(const ParamTensor* t, int64_t* O, int64_t* I) {
    *O = t->rows == 1 ? t->cols : t->rows;
    *I = t->rows == 1 ? 1 : t->cols;
}

static inline std::vector<uint64_t> hf_shape(const HfTensorMap* m, const ParamTensor* t, const GPTConfig* g) {
    uint64_t r = (uint64_t)t->rows, c = (uint64_t)t->cols;
    auto vec_or_mat = [](uint64_t rows, uint64_t cols) { return rows == 1 ? std::vector<uint64_t>{cols} : std::vector<uint64_t>{rows, cols}; };
    switch (m->how) {
        case HF_SAME: case HF_QKV_HEADS: return vec_or_mat(r, c);
        case HF_VOCAB: return {(uint64_t)g->vocab_size, c};
        case HF_TRANSPOSE: return {c, r};
        case HF_QKV_PART: return r == 1 ? std::vector<uint64_t>{c / 3} : std::vector<uint64_t>{r / 3, c};
        case HF_POS_OFFSET2: return {r + 2, c};
    }
    return {};
}

// The element of keel's layer slice that HF element i holds, or -1 for HF's own (OPT's 2 unused
// position rows). The one map: export reads keel[k] into hf[i], import writes hf[i] into keel[k].
static inline int64_t hf_keel_index(const HfTensorMap* m, const ParamTensor* t, int NH, int64_t i) {
    int64_t O, I;
    hf_outputs(t, &O, &I);
    switch (m->how) {
        case HF_SAME: case HF_VOCAB: return i;
        case HF_TRANSPOSE: {  // hf (in = a, out = b) at a·rows + b  ←  keel (out = b, in = a)
            int64_t a = i / t->rows, b = i % t->rows;
            return b * t->cols + a;
        }
        case HF_QKV_HEADS: {  // hf output (h, p, d) ← keel output (p, h, d)
            int64_t o = i / I, j = i % I, hs = O / 3 / NH;
            int64_t h = o / (3 * hs), p = o / hs % 3, d = o % hs;
            return ((p * NH + h) * hs + d) * I + j;
        }
        case HF_QKV_PART: {  // hf output o of part p ← keel output p·O/3 + o
            int64_t o = i / I, j = i % I;
            return (m->part * (O / 3) + o) * I + j;
        }
        case HF_POS_OFFSET2: return i < 2 * t->cols ? -1 : i - 2 * t->cols;
    }
    return -1;
}

// Every HF tensor of the architecture for this model (pt, g: the whole model), in the order the
// file holds them: the embeddings, layer 0's tensors, layer 1's, ..., the final LayerNorm.
static inline std::vector<HfTensor> hf_tensors(int arch, const ParamTable* pt, const GPTConfig* g) {
    int n;
    const HfTensorMap* maps = hf_tensor_maps(arch, &n);
    std::vector<HfTensor> out;
    auto add = [&](const HfTensorMap* m, int l) {
        const ParamTensor* t = &pt->t[m->id];
        char name[160];
        snprintf(name, sizeof name, m->name, l);
        HfTensor h{name, m, t, t->offset_canonical + (t->per_layer ? (int64_t)l * t->rows * t->cols : 0), hf_shape(m, t, g), 1};
        for (uint64_t d : h.shape) h.numel *= (int64_t)d;
        out.push_back(h);
    };
    auto final_norm = [&](const HfTensorMap* m) { return m->id == P_LNFW || m->id == P_LNFB; };
    for (int i = 0; i < n; i++) if (!pt->t[maps[i].id].per_layer && !final_norm(&maps[i])) add(&maps[i], 0);
    for (int l = 0; l < g->num_layers; l++)
        for (int i = 0; i < n; i++) if (pt->t[maps[i].id].per_layer) add(&maps[i], l);
    for (int i = 0; i < n; i++) if (final_norm(&maps[i])) add(&maps[i], 0);
    return out;
}

// ---- dtypes (the element conversions: llmc/safetensors.h) ----------------------------------------

static inline int hf_export_dtype(const std::string& s) { return s == "bf16" ? ST_BF16 : s == "fp16" ? ST_F16 : ST_F32; }
static inline const char* hf_torch_dtype(int st) { return st == ST_BF16 ? "bfloat16" : st == ST_F16 ? "float16" : "float32"; }

// ---- export ---------------------------------------------------------------------------------------

static const char* const HF_EXPORT_FILES[] = {"model.safetensors", "config.json",           "vocab.json",
                                               "merges.txt",        "tokenizer_config.json", "tokenizer.json",
                                               "special_tokens_map.json"};
static const char* const HF_TOKENIZER_FILES[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"};
enum { HF_GPT2_VOCAB = 50257 };  // GPT-2's tokenizer: its files are written for models of this vocabulary

static inline std::string hf_dir_strip(const std::string& dir) {
    std::string d = dir;
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    return d;
}

// "" if dir may be replaced by an export (absent, or holding only files an export writes), else why not.
static inline std::string hf_export_dir_problem(const std::string& dir) {
    struct stat sb;
    if (stat(dir.c_str(), &sb) != 0) return "";
    if (!S_ISDIR(sb.st_mode)) return "exists and is not a directory";
    DIR* d = opendir(dir.c_str());
    if (!d) return std::string("cannot be read: ") + strerror(errno);
    std::string bad;
    while (struct dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n == "." || n == "..") continue;
        bool ours = false;
        for (const char* f : HF_EXPORT_FILES) ours = ours || n == f;
        if (!ours) { bad = n; break; }
    }
    closedir(d);
    return bad.empty() ? "" : "holds '" + bad + "', which an export does not write (the export replaces the directory whole)";
}

static inline void hf_export_check(const Config* c) {
    GPTConfig g;
    gpt_config_from_flags(c, &g);
    std::string why;
    if (hf_arch_of(&g, &why) < 0) keel_usage_error("--export-hf: no Hugging Face architecture computes this model: %s", why.c_str());
    std::string problem = hf_export_dir_problem(hf_dir_strip(c->export_hf));
    if (!problem.empty()) keel_usage_error("--export-hf %s %s: name a new directory", c->export_hf.c_str(), problem.c_str());
    if (c->tokenizer_type == "PretrainedFromHF") {  // read at parse time already; it must still be there at the end
        hf_tokenizer_resolve(c->tokenizer_name_or_path);
    } else if (g.vocab_size == HF_GPT2_VOCAB) {  // the tokenizer is written beside the weights: it must load now, not after training
        if (!file_exists(c->vocab_file.c_str()) || !file_exists(c->merge_file.c_str()))
            keel_usage_error("--export-hf writes GPT-2's tokenizer from --vocab-file %s and --merge-file %s, which are missing "
                             "(make data fetches them)",
                             c->vocab_file.c_str(), c->merge_file.c_str());
        Tokenizer tok;
        tokenizer_load(&tok, c->vocab_file.c_str(), c->merge_file.c_str());
        if (tokenizer_vocab_size(&tok) != g.vocab_size)
            keel_usage_error("--export-hf: --vocab-file %s holds %d tokens, the model's vocabulary is %d", c->vocab_file.c_str(),
                             tokenizer_vocab_size(&tok), g.vocab_size);
    }
}

// config.json for the architecture, as transformers' save_pretrained would write it.
static inline std::string hf_config_json(int arch, const GPTConfig* g, const Config* c, int dtype) {
    std::vector<std::pair<std::string, std::string>> kv;  // key, JSON value
    auto num = [&](const char* k, double v) { kv.push_back({k, double_repr(v)}); };
    auto flt = [&](const char* k, double v) {  // a float key written as Python writes floats: 0.0, not 0
        std::string r = double_repr(v);
        kv.push_back({k, r.find_first_of(".e") == std::string::npos ? r + ".0" : r});
    };
    auto str = [&](const char* k, const char* v) { kv.push_back({k, json_quote(v)}); };
    auto lit = [&](const char* k, const char* v) { kv.push_back({k, v}); };
    std::string eod = g->vocab_size == HF_GPT2_VOCAB ? "50256" : "null";
    if (c->tokenizer_type == "PretrainedFromHF") {
        Tokenizer tok;
        hf_tokenizer_for_run(&tok, c->tokenizer_type, c->tokenizer_name_or_path, c->vocab_file, c->merge_file);
        eod = tok.eod >= 0 ? std::to_string(tok.eod) : "null";
    }
    kv.push_back({"architectures", "[" + json_quote(HF_ARCHS[arch].cls) + "]"});
    str("model_type", HF_ARCHS[arch].model_type);
    num("vocab_size", g->vocab_size);
    if (arch == HF_GPT2) {
        num("n_positions", g->max_seq_len);
        num("n_ctx", g->max_seq_len);
        num("n_embd", g->channels);
        num("n_layer", g->num_layers);
        num("n_head", g->num_heads);
        if (gpt_ffn(g) == 4 * g->channels) lit("n_inner", "null");  // GPT-2's 4 x n_embd
        else num("n_inner", gpt_ffn(g));
        str("activation_function", "gelu_new");
        flt("resid_pdrop", g->hidden_dropout);
        flt("embd_pdrop", g->embed_dropout);
        flt("attn_pdrop", g->attention_dropout);
        flt("layer_norm_epsilon", LAYERNORM_EPS);
        flt("initializer_range", c->init_method_std);
        lit("scale_attn_weights", "true");
        lit("scale_attn_by_inverse_layer_idx", "false");
        lit("reorder_and_upcast_attn", "false");
    } else if (arch == HF_BLOOM) {
        num("hidden_size", g->channels);
        num("n_layer", g->num_layers);
        num("n_head", g->num_heads);
        flt("layer_norm_epsilon", LAYERNORM_EPS);
        flt("initializer_range", c->init_method_std);
        flt("hidden_dropout", g->hidden_dropout);
        flt("attention_dropout", g->attention_dropout);
        lit("apply_residual_connection_post_layernorm", "false");
        num("pretraining_tp", 1);
        lit("slow_but_exact", "false");
    } else {
        num("hidden_size", g->channels);
        num("num_hidden_layers", g->num_layers);
        num("num_attention_heads", g->num_heads);
        num("ffn_dim", gpt_ffn(g));
        num("word_embed_proj_dim", g->channels);
        num("max_position_embeddings", g->max_seq_len);
        str("activation_function", "relu");
        lit("do_layer_norm_before", "true");
        lit("_remove_final_layer_norm", "false");
        lit("enable_bias", "true");
        lit("layer_norm_elementwise_affine", "true");
        flt("dropout", g->hidden_dropout);
        flt("attention_dropout", g->attention_dropout);
        flt("activation_dropout", 0);
        flt("layerdrop", 0);
        flt("init_std", c->init_method_std);
        lit("pad_token_id", "null");  // OPT's default (1) would freeze that row's gradient in HF training
    }
    lit("bos_token_id", eod.c_str());  // GPT-2's and BLOOM's files name their end of document for both
    lit("eos_token_id", eod.c_str());
    lit("tie_word_embeddings", "true");
    lit("use_cache", "true");
    str("torch_dtype", hf_torch_dtype(dtype));
    std::string j = "{\n";
    for (size_t i = 0; i < kv.size(); i++) j += "  " + json_quote(kv[i].first) + ": " + kv[i].second + (i + 1 < kv.size() ? ",\n" : "\n");
    return j + "}\n";
}

static inline void hf_write_text(const std::string& path, const std::string& text) {
    FILE* f = fopen_check(path.c_str(), "wb");
    fwrite_check(text.data(), 1, text.size(), f, path.c_str());
    FILE_CHECK(fflush(f) == 0 && fsync(fileno(f)) == 0, "fsync", path.c_str());
    FILE_CHECK(fclose(f) == 0, "fclose", path.c_str());
}

// model.safetensors: the header, then each tensor converted layer slice by layer slice.
static inline void hf_write_weights(const std::string& path, int arch, const float* params, const ParamTable* pt, const GPTConfig* g, int dtype) {
    std::vector<HfTensor> ts = hf_tensors(arch, pt, g);
    std::vector<StEntry> entries;
    for (const HfTensor& h : ts) entries.push_back({std::string(HF_ARCHS[arch].prefix) + h.name, dtype, h.shape});
    std::vector<std::pair<std::string, std::string>> meta = {{"format", "pt"}, {"producer", "keel"}};  // transformers requires format pt
    FILE* f = fopen_check(path.c_str(), "wb");
    std::string header = safetensors_header(entries, meta);
    fwrite_check(header.data(), 1, header.size(), f, path.c_str());
    std::vector<float> buf;
    std::vector<uint16_t> half;
    for (const HfTensor& h : ts) {
        buf.assign((size_t)h.numel, 0.0f);
        const float* src = params + h.offset_canonical;
        for (int64_t i = 0; i < h.numel; i++) {
            int64_t k = hf_keel_index(h.map, h.t, g->num_heads, i);
            if (k >= 0) buf[i] = src[k];
        }
        if (dtype == ST_F32) {
            fwrite_check(buf.data(), 4, buf.size(), f, path.c_str());
            continue;
        }
        half.resize(buf.size());
        for (size_t i = 0; i < buf.size(); i++) {
            if (dtype == ST_F16 && std::isfinite(buf[i]) && std::fabs(buf[i]) >= 65520.0f)
                keel_die_code(KEEL_EXIT_RUNTIME, "export with --export-dtype bf16 or fp32",
                              "--export-hf: %s%s element %zu is %g, beyond fp16's range (65504)",
                              HF_ARCHS[arch].prefix, h.name.c_str(), i, buf[i]);
            half[i] = dtype == ST_BF16 ? st_bf16_from_f32(buf[i]) : st_f16_from_f32(buf[i]);
        }
        fwrite_check(half.data(), 2, half.size(), f, path.c_str());
    }
    FILE_CHECK(fflush(f) == 0 && fsync(fileno(f)) == 0, "fsync", path.c_str());
    FILE_CHECK(fclose(f) == 0, "fclose", path.c_str());
}

static inline void hf_copy_file(const std::string& from, const std::string& to) { hf_write_text(to, file_read_all(from.c_str())); }

static inline std::string hf_parent(const std::string& dir) {
    size_t slash = dir.rfind('/');
    return slash == std::string::npos ? "." : dir.substr(0, slash ? slash : 1);
}

// dir.tmp (complete, fsync'd) becomes dir in one step; the previous dir, if any, is removed after.
static inline void hf_publish(const std::string& tmp, const std::string& dir) {
    std::string parent = hf_parent(dir);
    struct stat sb;
    if (stat(dir.c_str(), &sb) != 0) {
        FILE_CHECK(rename(tmp.c_str(), dir.c_str()) == 0, "rename", tmp.c_str());
    } else {
#ifdef RENAME_EXCHANGE
        bool swapped = renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0;
#else
        bool swapped = false;
#endif
        if (swapped) {
            rmtree(tmp);  // now the previous export
        } else {          // no atomic exchange here: dir is briefly absent, the previous export in dir.old
            std::string old = dir + ".old";
            rmtree(old);
            FILE_CHECK(rename(dir.c_str(), old.c_str()) == 0, "rename", dir.c_str());
            FILE_CHECK(rename(tmp.c_str(), dir.c_str()) == 0, "rename", tmp.c_str());
            rmtree(old);
        }
    }
    fsync_path(parent.c_str());
}

// fault: the KEEL_FAULT_SAVE test hook (llmc/test_hooks.h), null or "" when off.
static inline void hf_export(const std::string& dir_flag, const float* params, const ParamTable* pt, const GPTConfig* g, const Config* c,
                             const char* fault) {
    std::string why, dir = hf_dir_strip(dir_flag), tmp = dir + ".tmp";
    int arch = hf_arch_of(g, &why);
    if (arch < 0) keel_die("--export-hf: no Hugging Face architecture computes this model: %s", why.c_str());
    std::string problem = hf_export_dir_problem(dir);
    if (!problem.empty()) keel_die("--export-hf %s %s: name a new directory", dir.c_str(), problem.c_str());
    int dtype = hf_export_dtype(c->export_dtype);
    if (arch == HF_BLOOM && g->embed_dropout > 0)
        printf(" > note: BLOOM has no embedding dropout: --embed-dropout %s is not in config.json (it acts in training only)\n",
               double_repr(g->embed_dropout).c_str());
    if (arch == HF_OPT && g->embed_dropout > 0)
        printf(" > note: transformers' OPT has no embedding dropout: --embed-dropout %s is not in config.json (it acts in training only)\n",
               double_repr(g->embed_dropout).c_str());
    std::string part;  // (created durably: a directory not fsync'd into its parent can vanish with the export)
    if (int err = mkdir_p_durable(hf_parent(dir), &part)) keel_die("--export-hf %s: cannot create '%s': %s", dir.c_str(), part.c_str(), strerror(err));
    rmtree(tmp);  // left by an export that crashed
    FILE_CHECK(mkdir(tmp.c_str(), 0755) == 0, "mkdir", tmp.c_str());
    hf_write_weights(tmp + "/model.safetensors", arch, params, pt, g, dtype);
    hf_write_text(tmp + "/config.json", hf_config_json(arch, g, c, dtype));
    if (c->tokenizer_type == "PretrainedFromHF") {  // the run's tokenizer directory, its files as they are
        std::string src = hf_tokenizer_resolve(c->tokenizer_name_or_path);
        for (const char* f : HF_TOKENIZER_FILES)
            if (file_exists((src + "/" + f).c_str())) hf_copy_file(src + "/" + f, tmp + "/" + f);
    } else if (g->vocab_size == HF_GPT2_VOCAB) {
        hf_copy_file(c->vocab_file, tmp + "/vocab.json");  // OpenAI's encoder.json is HF's vocab.json
        hf_copy_file(c->merge_file, tmp + "/merges.txt");  // and vocab.bpe its merges.txt
        // AutoTokenizer reads the class here, so BLOOM and OPT directories get GPT-2's tokenizer too
        hf_write_text(tmp + "/tokenizer_config.json",
                      "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
                      "  \"unk_token\": \"<|endoftext|>\",\n  \"add_prefix_space\": false,\n  \"model_max_length\": " +
                          std::to_string(arch == HF_BLOOM ? (int64_t)c->seq_length : (int64_t)g->max_seq_len) + "\n}\n");
    } else {
        printf(" > note: --export-hf: the vocabulary (%d) is not GPT-2's (%d): no tokenizer files written\n", g->vocab_size, (int)HF_GPT2_VOCAB);
    }
    fsync_path(tmp.c_str());
    ckpt_fault(fault, "hf", 0);  // test hook (KEEL_FAULT_SAVE=hf): killed with the new export complete but unpublished
    hf_publish(tmp, dir);
}

// ---- import ---------------------------------------------------------------------------------------

// What keel reads from config.json: the architecture and the shape (maxT 0: none, ALiBi).
struct HfFileConfig {
    int arch;
    int64_t L, C, NH, V, maxT;
    int64_t F;  // the MLP width
};

static inline std::string hf_path(const std::string& dir, const char* file) { return hf_dir_strip(dir) + "/" + file; }

// The config.json value of the first of keys present, else null.
static inline const Json* hf_cfg_get(const Json& cfg, std::initializer_list<const char*> keys) {
    for (const char* k : keys) if (const Json* v = json_get(&cfg, k)) return v;
    return nullptr;
}

// An integer in (0, INT32_MAX] under the first of keys present, else def (HF's config classes' default); p: the file, for errors.
static inline int64_t hf_cfg_integer(const Json& cfg, const char* p, std::initializer_list<const char*> keys, int64_t def) {
    const Json* v = hf_cfg_get(cfg, keys);
    int64_t x = def;
    if (v && !json_as_i64(v, &x)) keel_die("'%s': \"%s\" is not an integer", p, *keys.begin());
    if (x <= 0 || x > INT32_MAX) keel_die("'%s': \"%s\" = %lld is out of range", p, *keys.begin(), (long long)x);
    return x;
}

// A true/false under key, else def.
static inline bool hf_cfg_boolean(const Json& cfg, const char* p, const char* key, bool def) {
    const Json* v = json_get(&cfg, key);
    if (v && v->type != JSON_BOOL) keel_die("'%s': \"%s\" is not true or false", p, key);
    return v ? v->boolean : def;
}

// A string under key, else def.
static inline std::string hf_cfg_string(const Json& cfg, const char* p, const char* key, const char* def) {
    const Json* v = json_get(&cfg, key);
    if (v && v->type != JSON_STRING) keel_die("'%s': \"%s\" is not a string", p, key);
    return v ? v->text : std::string(def);
}

// A LayerNorm epsilon under key, if present, must be keel's 1e-05.
static inline void hf_cfg_eps(const Json& cfg, const char* p, const char* key) {
    const Json* v = json_get(&cfg, key);
    if (v && (v->type != JSON_NUMBER || v->num != LAYERNORM_EPS))
        keel_die("'%s': \"%s\" is %s; keel's LayerNorm uses 1e-05", p, key, v->type == JSON_NUMBER ? v->text.c_str() : "not a number");
}

// The architecture (HF_GPT2, HF_BLOOM, HF_OPT) from model_type, or in older files from the architectures class name.
static inline int hf_cfg_arch(const Json& cfg, const char* p) {
    std::string type = hf_cfg_string(cfg, p, "model_type", "");
    if (type.empty()) {  // older files: the class names it
        const Json* a = json_get(&cfg, "architectures");
        std::string cls = a && a->type == JSON_ARRAY && !a->items.empty() && a->items[0].type == JSON_STRING ? a->items[0].text : "";
        type = cls.rfind("GPT2", 0) == 0 ? "gpt2" : cls.rfind("Bloom", 0) == 0 ? "bloom" : cls.rfind("OPT", 0) == 0 ? "opt" : cls;
    }
    int arch = type == "gpt2" ? HF_GPT2 : type == "bloom" ? HF_BLOOM : type == "opt" ? HF_OPT : -1;
    if (arch < 0) keel_die("'%s': model_type '%s': keel reads gpt2, bloom and opt", p, type.c_str());
    return arch;
}

// GPT2Config's shape into f, and the checks that it computes what keel's GPT-2 does.
static inline void hf_cfg_gpt2(const Json& cfg, const char* p, HfFileConfig* f) {
    f->V = hf_cfg_integer(cfg, p, {"vocab_size"}, 50257);
    f->maxT = hf_cfg_integer(cfg, p, {"n_positions", "n_ctx"}, 1024);
    f->C = hf_cfg_integer(cfg, p, {"n_embd", "hidden_size"}, 768);
    f->L = hf_cfg_integer(cfg, p, {"n_layer", "num_hidden_layers"}, 12);
    f->NH = hf_cfg_integer(cfg, p, {"n_head", "num_attention_heads"}, 12);
    const Json* inner = json_get(&cfg, "n_inner");
    int64_t ni = 0;
    f->F = 4 * f->C;  // n_inner null: GPT-2's 4 x n_embd
    if (inner && inner->type != JSON_NULL) {
        if (!json_as_i64(inner, &ni) || ni < 1 || ni > INT32_MAX)
            keel_die("'%s': n_inner is %s; it must be a positive integer (the MLP width) or null", p,
                     inner->type == JSON_NUMBER ? inner->text.c_str() : "not an integer");
        f->F = ni;
    }
    std::string act = hf_cfg_string(cfg, p, "activation_function", "gelu_new");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu_fast")
        keel_die("'%s': activation_function '%s': keel's GPT-2 computes the tanh GeLU (gelu_new)", p, act.c_str());
    hf_cfg_eps(cfg, p, "layer_norm_epsilon");
    if (!hf_cfg_boolean(cfg, p, "scale_attn_weights", true))
        keel_die("'%s': scale_attn_weights is false: keel scales scores by 1/sqrt(head size)", p);
    if (hf_cfg_boolean(cfg, p, "scale_attn_by_inverse_layer_idx", false))
        keel_die("'%s': scale_attn_by_inverse_layer_idx is true: keel's scores are not divided by the layer number", p);
    if (hf_cfg_boolean(cfg, p, "add_cross_attention", false)) keel_die("'%s': add_cross_attention is true: keel's GPT-2 is a decoder only", p);
}

// BloomConfig's shape into f (ALiBi: no maxT), and the checks that it computes what keel's BLOOM does.
static inline void hf_cfg_bloom(const Json& cfg, const char* p, HfFileConfig* f) {
    f->V = hf_cfg_integer(cfg, p, {"vocab_size"}, 250880);
    f->C = hf_cfg_integer(cfg, p, {"hidden_size", "n_embed"}, 64);
    f->L = hf_cfg_integer(cfg, p, {"n_layer", "num_hidden_layers"}, 2);
    f->NH = hf_cfg_integer(cfg, p, {"n_head", "num_attention_heads"}, 8);
    f->maxT = 0;
    f->F = 4 * f->C;  // BLOOM's MLP: always 4 x hidden_size
    hf_cfg_eps(cfg, p, "layer_norm_epsilon");
    if (hf_cfg_boolean(cfg, p, "apply_residual_connection_post_layernorm", false))
        keel_die("'%s': apply_residual_connection_post_layernorm is true: keel's residual is the block's input", p);
}

// OPTConfig's shape into f, and the checks that it computes what keel's OPT does.
static inline void hf_cfg_opt(const Json& cfg, const char* p, HfFileConfig* f) {
    f->V = hf_cfg_integer(cfg, p, {"vocab_size"}, 50272);
    f->C = hf_cfg_integer(cfg, p, {"hidden_size"}, 768);
    f->L = hf_cfg_integer(cfg, p, {"num_hidden_layers"}, 12);
    f->NH = hf_cfg_integer(cfg, p, {"num_attention_heads"}, 12);
    f->maxT = hf_cfg_integer(cfg, p, {"max_position_embeddings"}, 2048);
    f->F = hf_cfg_integer(cfg, p, {"ffn_dim"}, 3072);
    if (f->F < 1 || f->F > INT32_MAX) keel_die("'%s': ffn_dim %lld is not a positive int (the MLP width)", p, (long long)f->F);
    if (hf_cfg_integer(cfg, p, {"word_embed_proj_dim"}, f->C) != f->C)
        keel_die("'%s': word_embed_proj_dim differs from hidden_size: keel has no embedding projection (OPT-350m's project_in/out)", p);
    if (!hf_cfg_boolean(cfg, p, "do_layer_norm_before", true))
        keel_die("'%s': do_layer_norm_before is false: keel is pre-LayerNorm (OPT-350m is post)", p);
    if (hf_cfg_boolean(cfg, p, "_remove_final_layer_norm", false)) keel_die("'%s': _remove_final_layer_norm is true: keel has a final LayerNorm", p);
    if (!hf_cfg_boolean(cfg, p, "enable_bias", true)) keel_die("'%s': enable_bias is false: keel's linear layers have biases", p);
    if (!hf_cfg_boolean(cfg, p, "layer_norm_elementwise_affine", true))
        keel_die("'%s': layer_norm_elementwise_affine is false: keel's LayerNorms have weights and biases", p);
    std::string act = hf_cfg_string(cfg, p, "activation_function", "relu");
    if (act != "relu") keel_die("'%s': activation_function '%s': keel's OPT computes relu", p, act.c_str());
}

// Reads dir's config.json: the architecture and shape, dying on anything keel does not compute.
static inline HfFileConfig hf_read_config(const std::string& dir) {
    std::string path = hf_path(dir, "config.json");
    if (!file_exists(path.c_str()))
        keel_die("--load-hf %s: no config.json there (a Hugging Face model directory holds config.json and model.safetensors)", dir.c_str());
    std::string text = file_read_all(path.c_str()), err;
    Json cfg;
    if (!json_parse(text.data(), text.size(), &cfg, &err)) keel_die("'%s': malformed JSON at %s", path.c_str(), err.c_str());
    if (cfg.type != JSON_OBJECT) keel_die("'%s': not a JSON object", path.c_str());
    const char* p = path.c_str();
    HfFileConfig f;
    f.arch = hf_cfg_arch(cfg, p);
    if (!hf_cfg_boolean(cfg, p, "tie_word_embeddings", true)) keel_die("'%s': tie_word_embeddings is false: keel's LM head is the word embedding", p);
    if (f.arch == HF_GPT2) hf_cfg_gpt2(cfg, p, &f);
    else if (f.arch == HF_BLOOM) hf_cfg_bloom(cfg, p, &f);
    else hf_cfg_opt(cfg, p, &f);
    if (f.C % f.NH != 0) keel_die("'%s': hidden size %lld is not divisible by %lld heads", p, (long long)f.C, (long long)f.NH);
    return f;
}

// A flag the file decides: taken from it at its default, else it must agree (exit 2).
static inline void hf_take_int(const std::string& dir, const char* flag, int64_t* field, int64_t def, int64_t file) {
    if (*field == def) *field = file;
    else if (*field != file)
        keel_usage_error("--%s %lld contradicts --load-hf %s, whose config.json says %lld", flag, (long long)*field, dir.c_str(), (long long)file);
}

static inline void hf_config_apply(Config* c) {
    const std::string& dir = c->load_hf;
    HfFileConfig f = hf_read_config(dir);
    const Config d;  // the defaults
    hf_take_int(dir, "num-layers", &c->num_layers, d.num_layers, f.L);
    hf_take_int(dir, "hidden-size", &c->hidden_size, d.hidden_size, f.C);
    hf_take_int(dir, "num-attention-heads", &c->num_attention_heads, d.num_attention_heads, f.NH);
    hf_take_int(dir, "vocab-size", &c->vocab_size, d.vocab_size, f.V);
    // the MLP width: --ffn-hidden-size unset (0) means 4C, so a 4C file leaves it unset
    if (c->ffn_hidden_size != 0 || f.F != 4 * f.C) hf_take_int(dir, "ffn-hidden-size", &c->ffn_hidden_size, 0, f.F);
    if (f.maxT > 0) hf_take_int(dir, "max-position-embeddings", &c->max_position_embeddings, d.max_position_embeddings, f.maxT);
    const char* cls = HF_ARCHS[f.arch].cls;
    std::string pos = f.arch == HF_BLOOM ? "alibi" : "learned", act = f.arch == HF_OPT ? "relu" : "gelu";
    if (c->position_embedding_type == "absolute") c->position_embedding_type = "learned";
    if (c->position_embedding_type != d.position_embedding_type && c->position_embedding_type != pos)
        keel_usage_error("--position-embedding-type %s contradicts --load-hf %s: %s has %s", c->position_embedding_type.c_str(), dir.c_str(), cls,
                         f.arch == HF_BLOOM ? "ALiBi" : "learned positions");
    if (c->activation != d.activation && c->activation != act)
        keel_usage_error("--activation %s contradicts --load-hf %s: %s computes %s", c->activation.c_str(), dir.c_str(), cls, act.c_str());
    if ((c->embed_layernorm || c->stable_embedding) && f.arch != HF_BLOOM)
        keel_usage_error("--%s contradicts --load-hf %s: %s has no embedding LayerNorm", c->stable_embedding ? "stable-embedding" : "embed-layernorm",
                         dir.c_str(), cls);
    c->position_embedding_type = pos;
    c->activation = act;
    c->embed_layernorm = f.arch == HF_BLOOM || c->embed_layernorm;
    printf("--load-hf %s: %s (%s), L=%lld C=%lld NH=%lld V=%lld%s\n", dir.c_str(), cls, HF_ARCHS[f.arch].knobs, (long long)f.L,
           (long long)f.C, (long long)f.NH, (long long)f.V, f.maxT > 0 ? (" maxT=" + std::to_string(f.maxT)).c_str() : "");
}

// GPT-2's attention-mask buffers, which files from older transformers carry: h.N.attn.bias / .masked_bias.
static inline bool hf_is_gpt2_buffer(const std::string& name) {
    const char* s = name.c_str();
    if (strncmp(s, "h.", 2) != 0) return false;
    s += 2;
    if (!isdigit((unsigned char)*s)) return false;
    while (isdigit((unsigned char)*s)) s++;
    return strcmp(s, ".attn.bias") == 0 || strcmp(s, ".attn.masked_bias") == 0;
}

// Reads tensor st_t (F32/BF16/F16) as fp32.
static inline std::vector<float> hf_read_f32(const SafeTensors* st, const StTensor* t) {
    uint64_t n = 1;
    for (uint64_t d : t->shape) n *= d;
    std::vector<float> out(n);
    std::string err;
    if (t->dtype == ST_F32) {
        if (!safetensors_read(st, t, out.data(), &err)) keel_die("'%s': %s", st->path.c_str(), err.c_str());
        return out;
    }
    std::vector<uint16_t> h(n);
    if (!safetensors_read(st, t, h.data(), &err)) keel_die("'%s': %s", st->path.c_str(), err.c_str());
    for (uint64_t i = 0; i < n; i++) out[i] = t->dtype == ST_BF16 ? st_bf16_to_f32(h[i]) : st_f16_to_f32(h[i]);
    return out;
}

static inline void hf_load(const std::string& dir, float* params, const ParamTable* pt, const GPTConfig* g) {
    std::string path = hf_path(dir, "model.safetensors"), err;
    if (!file_exists(path.c_str())) {
        if (file_exists(hf_path(dir, "model.safetensors.index.json").c_str()))
            keel_die("--load-hf %s: the weights are sharded (model.safetensors.index.json); keel reads one model.safetensors", dir.c_str());
        keel_die("--load-hf %s: no model.safetensors there%s", dir.c_str(),
                 file_exists(hf_path(dir, "pytorch_model.bin").c_str()) ? " (only pytorch_model.bin: keel reads safetensors)" : "");
    }
    HfFileConfig f = hf_read_config(dir);
    const char* cls = HF_ARCHS[f.arch].cls;
    std::string prefix = HF_ARCHS[f.arch].prefix;
    SafeTensors st;
    if (!safetensors_open(&st, path.c_str(), &err)) keel_die("'%s': %s", path.c_str(), err.c_str());
    std::vector<bool> used(st.tensors.size(), false);
    auto index_of = [&](const StTensor* t) { return (size_t)(t - st.tensors.data()); };
    std::vector<float> wte;  // the word embedding as read, for a stored lm_head.weight
    for (const HfTensor& h : hf_tensors(f.arch, pt, g)) {
        const StTensor *with = safetensors_find(&st, prefix + h.name), *without = safetensors_find(&st, h.name);
        if (with && without) keel_die("'%s': holds both '%s' and '%s'", path.c_str(), (prefix + h.name).c_str(), h.name.c_str());
        const StTensor* t = with ? with : without;
        if (!t) keel_die("'%s': tensor '%s' is missing (%s, %d layers)", path.c_str(), (prefix + h.name).c_str(), cls, g->num_layers);
        used[index_of(t)] = true;
        if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
            keel_die("'%s': tensor '%s' is %s; keel reads F32, BF16 and F16 weights", path.c_str(), t->name.c_str(), ST_DTYPE_NAMES[t->dtype]);
        if (t->shape != h.shape)
            keel_die("'%s': tensor '%s' has shape %s, but %s with this config.json needs %s", path.c_str(), t->name.c_str(),
                     st_shape_string(t->shape).c_str(), cls, st_shape_string(h.shape).c_str());
        std::vector<float> v = hf_read_f32(&st, t);
        int64_t bad = weights_first_nonfinite(v.data(), (int64_t)v.size());  // (llmc/checkpoint.h)
        if (bad >= 0)
            keel_die("'%s': tensor '%s' holds %g at element %lld: the weights must be finite", path.c_str(), t->name.c_str(),
                     v[bad], (long long)bad);
        float* dst = params + h.offset_canonical;
        if (h.map->how == HF_VOCAB) {  // keel's padding rows are zero
            memset(dst, 0, (size_t)h.t->numel * sizeof(float));
            wte = v;
        }
        for (int64_t i = 0; i < h.numel; i++) {
            int64_t k = hf_keel_index(h.map, h.t, g->num_heads, i);
            if (k >= 0) dst[k] = v[i];
        }
    }
    for (size_t i = 0; i < st.tensors.size(); i++) {
        if (used[i]) continue;
        const StTensor* t = &st.tensors[i];
        std::string bare = t->name.compare(0, prefix.size(), prefix) == 0 ? t->name.substr(prefix.size()) : t->name;
        if (f.arch == HF_GPT2 && hf_is_gpt2_buffer(bare)) continue;
        if (t->name == "lm_head.weight") {  // a tied head stored anyway: it must be the embedding, bit for bit
            bool same = (t->dtype == ST_F32 || t->dtype == ST_BF16 || t->dtype == ST_F16) && t->shape.size() == 2 &&
                        t->shape[0] == (uint64_t)g->vocab_size && t->shape[1] == (uint64_t)g->channels;
            if (same) {
                std::vector<float> head = hf_read_f32(&st, t);
                same = head.size() == wte.size() && memcmp(head.data(), wte.data(), wte.size() * sizeof(float)) == 0;
            }
            if (!same) keel_die("'%s': lm_head.weight differs from the word embedding; keel ties the LM head to the embedding", path.c_str());
            continue;
        }
        keel_die("'%s': unexpected tensor '%s': not part of %s", path.c_str(), t->name.c_str(), cls);
    }
    safetensors_close(&st);
}
