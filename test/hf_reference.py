#!/usr/bin/env python3
"""hf_reference.py - an independent reader, writer and forward pass of Hugging Face GPT-2, BLOOM and OPT
weights, for keel's tests (test/test_hf_roundtrip.sh, test/test_hf_bad_input.sh). Standard library only
(struct + json). The names, layouts and formulas are written from transformers' modeling_gpt2.py,
modeling_bloom.py and modeling_opt.py, not from keel's code (llmc/hf.h), so a layout keel gets wrong
shows as a mismatch here.

  check DIR ARCH L C NH V MAXT DTYPE    the directory keel wrote: the safetensors container (header length,
                                         JSON, offsets tiling the data), exactly the architecture's tensor
                                         names with their shapes and one dtype, config.json, tokenizer files
  loss DIR DUMP ITER [--wrong]          mean next-token loss over the rows keel dumped for iteration ITER
                                         (KEEL_DUMP_TOKENS), computed with the architecture's formulas from
                                         DIR's tensors; --wrong swaps in a deliberate layout error (GPT-2: an
                                         untransposed Conv1D, BLOOM: (3, NH, hs) QKV rows, OPT: positions
                                         without the offset of 2), which must break the match
  match DIR DUMP JSONL [TOL]            keel's iteration-1 loss (JSONL) = loss DIR DUMP 1 within TOL (1e-6),
                                         and the --wrong loss misses it by more than 1e-2
  make ARCH DIR L C NH V MAXT DTYPE SEED  a model directory in HF's layout with random weights, the way
                                         published checkpoints look (GPT-2: no base-model prefix and the
                                         attention-mask buffers; BLOOM: no prefix; OPT: model. prefix, a stored
                                         tied lm_head and non-zero unused position rows)
  same DIR_A DIR_B                      every weight of A equals B's as fp32 (names with or without the
                                         base-model prefix; buffers, lm_head and OPT's 2 unused rows aside)
  rounded FP32_DIR DIR DTYPE            every weight of DIR is the fp32 weight rounded to nearest even
  corrupt SRC_DIR DST_DIR KIND          a copy of SRC_DIR whose model.safetensors is broken in one way
  config SRC_DIR DST_DIR KEY JSON       a copy of SRC_DIR whose config.json has KEY set to the JSON value
  shard PATH N V SEED                   an llm.c token shard of N tokens below V
  batch                                 the commands on stdin, one a line as "LABEL | command args", in one
                                         interpreter (its start-up is most of a small check's time); prints
                                         "ok: LABEL: ..." or "FAIL: LABEL: why" per line, exits 1 on any FAIL
"""
import json, math, os, random, shutil, struct, sys

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
         "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}
PREFIX = {"gpt2": "transformer.", "bloom": "transformer.", "opt": "model."}
CLASS = {"gpt2": "GPT2LMHeadModel", "bloom": "BloomForCausalLM", "opt": "OPTForCausalLM"}


class CheckFailed(Exception):
    pass


def fail(msg):
    raise CheckFailed(msg)


# ---- the container -----------------------------------------------------------------------------------

def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


def read_safetensors(path):
    """(header dict, metadata, data bytes, header length); checks the whole container."""
    b = open(path, "rb").read()
    if len(b) < 8:
        fail(f"{path}: shorter than 8 bytes")
    n = struct.unpack("<Q", b[:8])[0]
    if 8 + n > len(b):
        fail(f"{path}: header length {n} runs past the file ({len(b)} bytes)")
    header = json.loads(b[8:8 + n].decode("utf-8"), object_pairs_hook=no_duplicates)
    data = b[8 + n:]
    meta = header.pop("__metadata__", {})
    spans = []
    for name, t in header.items():
        if set(t) != {"dtype", "shape", "data_offsets"}:
            fail(f"{path}: {name} has keys {sorted(t)}")
        if t["dtype"] not in SIZES:
            fail(f"{path}: {name} has dtype {t['dtype']}")
        begin, end = t["data_offsets"]
        if end - begin != math.prod(t["shape"]) * SIZES[t["dtype"]]:
            fail(f"{path}: {name} offsets {begin},{end} do not hold {t['dtype']} {t['shape']}")
        spans.append((begin, end, name))
    spans.sort()
    cursor = 0
    for begin, end, name in spans:
        if begin != cursor:
            fail(f"{path}: {name} starts at {begin}, the previous tensor ended at {cursor}")
        cursor = end
    if cursor != len(data):
        fail(f"{path}: tensors end at {cursor}, the data section is {len(data)} bytes")
    return header, meta, data, n


def decode(t, data):
    """A tensor's elements as Python floats (exact for F32, F16 and BF16)."""
    begin, end = t["data_offsets"]
    raw, count = data[begin:end], math.prod(t["shape"])
    if t["dtype"] == "F32":
        return list(struct.unpack(f"<{count}f", raw))
    if t["dtype"] == "F16":
        return list(struct.unpack(f"<{count}e", raw))
    if t["dtype"] == "BF16":  # the top 16 bits of an fp32
        wide = bytearray(4 * count)
        wide[2::4], wide[3::4] = raw[0::2], raw[1::2]
        return list(struct.unpack(f"<{count}f", wide))
    fail(f"cannot decode {t['dtype']}")


def encode(dtype, values):
    if dtype == "F32":
        return struct.pack(f"<{len(values)}f", *values)
    if dtype == "F16":
        return struct.pack(f"<{len(values)}e", *values)
    if dtype == "BF16":
        return b"".join(struct.pack("<H", bf16_bits(v)) for v in values)
    if dtype == "BOOL":
        return bytes(1 if v else 0 for v in values)
    fail(f"cannot encode {dtype}")


def bf16_bits(x):
    """fp32 x rounded to nearest even bf16 (x is an fp32 value)."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def to_f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def write_safetensors(path, tensors, metadata):
    """tensors: [(name, dtype, shape, raw bytes)], laid out sorted by name (the order differs from keel's)."""
    header, offset = {}, 0
    for name, dtype, shape, raw in sorted(tensors):
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    header["__metadata__"] = metadata
    write_raw(path, header, b"".join(raw for _, _, _, raw in sorted(tensors)))


def write_raw(path, header, data, pad=True):
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


# ---- the architectures: names and shapes as transformers' modules define them ---------------------------

def expected(arch, L, C, NH, V, maxT):
    """{name without prefix: shape} of the causal LM's weights (the tied lm_head is not stored)."""
    e = {}
    if arch == "gpt2":
        e["wte.weight"], e["wpe.weight"] = [V, C], [maxT, C]
        for i in range(L):
            h = f"h.{i}."
            for ln in ("ln_1", "ln_2"):
                e[h + ln + ".weight"], e[h + ln + ".bias"] = [C], [C]
            e[h + "attn.c_attn.weight"], e[h + "attn.c_attn.bias"] = [C, 3 * C], [3 * C]  # Conv1D: (in, out)
            e[h + "attn.c_proj.weight"], e[h + "attn.c_proj.bias"] = [C, C], [C]
            e[h + "mlp.c_fc.weight"], e[h + "mlp.c_fc.bias"] = [C, 4 * C], [4 * C]
            e[h + "mlp.c_proj.weight"], e[h + "mlp.c_proj.bias"] = [4 * C, C], [C]
        e["ln_f.weight"], e["ln_f.bias"] = [C], [C]
    elif arch == "bloom":
        e["word_embeddings.weight"] = [V, C]
        e["word_embeddings_layernorm.weight"], e["word_embeddings_layernorm.bias"] = [C], [C]
        for i in range(L):
            h = f"h.{i}."
            for ln in ("input_layernorm", "post_attention_layernorm"):
                e[h + ln + ".weight"], e[h + ln + ".bias"] = [C], [C]
            e[h + "self_attention.query_key_value.weight"], e[h + "self_attention.query_key_value.bias"] = [3 * C, C], [3 * C]
            e[h + "self_attention.dense.weight"], e[h + "self_attention.dense.bias"] = [C, C], [C]
            e[h + "mlp.dense_h_to_4h.weight"], e[h + "mlp.dense_h_to_4h.bias"] = [4 * C, C], [4 * C]
            e[h + "mlp.dense_4h_to_h.weight"], e[h + "mlp.dense_4h_to_h.bias"] = [C, 4 * C], [C]
        e["ln_f.weight"], e["ln_f.bias"] = [C], [C]
    else:
        d = "decoder."
        e[d + "embed_tokens.weight"], e[d + "embed_positions.weight"] = [V, C], [maxT + 2, C]
        for i in range(L):
            h = f"{d}layers.{i}."
            for ln in ("self_attn_layer_norm", "final_layer_norm"):
                e[h + ln + ".weight"], e[h + ln + ".bias"] = [C], [C]
            for p in ("q_proj", "k_proj", "v_proj", "out_proj"):
                e[h + "self_attn." + p + ".weight"], e[h + "self_attn." + p + ".bias"] = [C, C], [C]
            e[h + "fc1.weight"], e[h + "fc1.bias"] = [4 * C, C], [4 * C]
            e[h + "fc2.weight"], e[h + "fc2.bias"] = [C, 4 * C], [C]
        e[d + "final_layer_norm.weight"], e[d + "final_layer_norm.bias"] = [C], [C]
    return e


def config_json(arch, L, C, NH, V, maxT, dtype):
    """config.json as transformers' save_pretrained writes it (with the keys keel does not read)."""
    torch_dtype = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype]
    common = {"architectures": [CLASS[arch]], "model_type": arch, "vocab_size": V, "torch_dtype": torch_dtype,
              "transformers_version": "4.44.0", "_name_or_path": "made-by-hf_reference", "use_cache": True}
    if arch == "gpt2":
        return dict(common, n_positions=maxT, n_ctx=maxT, n_embd=C, n_layer=L, n_head=NH, activation_function="gelu_new",
                    resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1, layer_norm_epsilon=1e-05, initializer_range=0.02,
                    summary_type="cls_index", summary_use_proj=True, summary_activation=None, summary_first_dropout=0.1,
                    task_specific_params={"text-generation": {"do_sample": True, "max_length": 50}},
                    bos_token_id=50256, eos_token_id=50256)
    if arch == "bloom":
        return dict(common, n_embed=C, n_layer=L, num_attention_heads=NH, layer_norm_epsilon=1e-05, hidden_dropout=0.0,
                    attention_dropout=0.0, apply_residual_connection_post_layernorm=False, pretraining_tp=1,
                    slow_but_exact=False, bos_token_id=1, eos_token_id=2, pad_token_id=3, unk_token_id=0)
    return dict(common, hidden_size=C, num_hidden_layers=L, num_attention_heads=NH, ffn_dim=4 * C, max_position_embeddings=maxT,
                word_embed_proj_dim=C, do_layer_norm_before=True, _remove_final_layer_norm=False, activation_function="relu",
                dropout=0.1, attention_dropout=0.0, enable_bias=True, layer_norm_elementwise_affine=True, layerdrop=0.0,
                init_std=0.02, pad_token_id=1, bos_token_id=2, eos_token_id=2, prefix="</s>")


# ---- the forward passes (double precision), one per architecture -------------------------------------

class Weights:
    def __init__(self, d):
        self.header, self.meta, self.data, _ = read_safetensors(os.path.join(d, "model.safetensors"))
        self.config = json.load(open(os.path.join(d, "config.json")))

    def get(self, arch, name):  # with or without the base-model prefix, as from_pretrained accepts
        for n in (PREFIX[arch] + name, name):
            if n in self.header:
                return decode(self.header[n], self.data), self.header[n]["shape"]
        fail(f"no tensor {name}")

    def vec(self, arch, name):
        return self.get(arch, name)[0]

    def mat(self, arch, name):
        v, (r, c) = self.get(arch, name)
        return [v[i * c:(i + 1) * c] for i in range(r)]


def transpose(m):
    return [list(col) for col in zip(*m)]


def linear(x, w, b):  # w: (out, in), as torch's nn.Linear
    return [sum(a * c for a, c in zip(x, row)) + bb for row, bb in zip(w, b)]


def layernorm(x, w, b, eps=1e-5):
    mean = sum(x) / len(x)
    var = sum((a - mean) ** 2 for a in x) / len(x)
    r = 1.0 / math.sqrt(var + eps)
    return [(a - mean) * r * ww + bb for a, ww, bb in zip(x, w, b)]


def gelu_tanh(x, k=math.sqrt(2 / math.pi)):
    return 0.5 * x * (1 + math.tanh(k * (x + 0.044715 * x ** 3)))


def causal_attention(q, k, v, bias):
    """q, k, v: [T][hs] of one head; bias(t, u) is added to each score before the softmax."""
    out = []
    for t in range(len(q)):
        s = [sum(a * b for a, b in zip(q[t], k[u])) + bias(t, u) for u in range(t + 1)]
        m = max(s)
        e = [math.exp(x - m) for x in s]
        z = sum(e)
        out.append([sum(e[u] / z * v[u][i] for u in range(t + 1)) for i in range(len(q[t]))])
    return out


def bloom_slopes(n):  # build_alibi_tensor's slopes
    p = 2 ** math.floor(math.log2(n))
    base = 2 ** (-(2 ** -(math.log2(p) - 3)))
    slopes = [base ** i for i in range(1, p + 1)]
    if p != n:
        extra = 2 ** (-(2 ** -(math.log2(2 * p) - 3)))
        slopes += [extra ** i for i in range(1, 1 + 2 * min(p, n - p), 2)]
    return slopes


def shape_of(W, arch):
    cfg = W.config
    if arch == "gpt2":
        return cfg["n_layer"], cfg["n_embd"], cfg["n_head"]
    if arch == "bloom":
        return cfg.get("n_layer"), cfg.get("hidden_size", cfg.get("n_embed")), cfg.get("n_head", cfg.get("num_attention_heads"))
    return cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]


def forward(W, arch, toks, wrong):
    """The logits (T, V) of one sequence."""
    L, C, NH = shape_of(W, arch)
    hs, T = C // NH, len(toks)
    heads = lambda rows, h: [r[h * hs:(h + 1) * hs] for r in rows]
    if arch == "gpt2":
        wte, wpe = W.mat(arch, "wte.weight"), W.mat(arch, "wpe.weight")
        x = [[a + b for a, b in zip(wte[t], wpe[p])] for p, t in enumerate(toks)]
        conv1d = lambda xs, name: [linear(r, transpose(W.mat(arch, name + ".weight")), W.vec(arch, name + ".bias")) for r in xs]
        for i in range(L):
            p = f"h.{i}."
            h = [layernorm(r, W.vec(arch, p + "ln_1.weight"), W.vec(arch, p + "ln_1.bias")) for r in x]
            qkv = conv1d(h, p + "attn.c_attn")
            q, k, v = [r[:C] for r in qkv], [r[C:2 * C] for r in qkv], [r[2 * C:] for r in qkv]
            y = [[] for _ in range(T)]
            for hd in range(NH):
                qh = [[a / math.sqrt(hs) for a in r] for r in heads(q, hd)]  # scale_attn_weights: q.k / sqrt(hs)
                for t, o in enumerate(causal_attention(qh, heads(k, hd), heads(v, hd), lambda t, u: 0.0)):
                    y[t] += o
            wp, bp = W.mat(arch, p + "attn.c_proj.weight"), W.vec(arch, p + "attn.c_proj.bias")
            a = [linear(r, wp if wrong else transpose(wp), bp) for r in y]
            x = [[u + w for u, w in zip(r, s)] for r, s in zip(x, a)]
            h = [layernorm(r, W.vec(arch, p + "ln_2.weight"), W.vec(arch, p + "ln_2.bias")) for r in x]
            m = conv1d([[gelu_tanh(z) for z in r] for r in conv1d(h, p + "mlp.c_fc")], p + "mlp.c_proj")
            x = [[u + w for u, w in zip(r, s)] for r, s in zip(x, m)]
        x = [layernorm(r, W.vec(arch, "ln_f.weight"), W.vec(arch, "ln_f.bias")) for r in x]
        emb = wte
    elif arch == "bloom":
        emb = W.mat(arch, "word_embeddings.weight")
        x = [layernorm(emb[t], W.vec(arch, "word_embeddings_layernorm.weight"), W.vec(arch, "word_embeddings_layernorm.bias")) for t in toks]
        slopes = bloom_slopes(NH)
        for i in range(L):
            p = f"h.{i}."
            h = [layernorm(r, W.vec(arch, p + "input_layernorm.weight"), W.vec(arch, p + "input_layernorm.bias")) for r in x]
            fused = [linear(r, W.mat(arch, p + "self_attention.query_key_value.weight"), W.vec(arch, p + "self_attention.query_key_value.bias")) for r in h]
            y = [[] for _ in range(T)]
            for hd in range(NH):
                if wrong:  # (3, NH, hs): not BLOOM's layout
                    q, k, v = ([r[(j * NH + hd) * hs:(j * NH + hd + 1) * hs] for r in fused] for j in range(3))
                else:      # _split_heads: (NH, 3, hs)
                    q, k, v = ([r[(hd * 3 + j) * hs:(hd * 3 + j + 1) * hs] for r in fused] for j in range(3))
                qh = [[a / math.sqrt(hs) for a in r] for r in q]
                for t, o in enumerate(causal_attention(qh, k, v, lambda t, u, s=slopes[hd]: s * u)):  # alibi: slope x key position
                    y[t] += o
            a = [linear(r, W.mat(arch, p + "self_attention.dense.weight"), W.vec(arch, p + "self_attention.dense.bias")) for r in y]
            x = [[u + w for u, w in zip(r, s)] for r, s in zip(x, a)]
            h = [layernorm(r, W.vec(arch, p + "post_attention_layernorm.weight"), W.vec(arch, p + "post_attention_layernorm.bias")) for r in x]
            f = [[gelu_tanh(z, 0.79788456) for z in linear(r, W.mat(arch, p + "mlp.dense_h_to_4h.weight"), W.vec(arch, p + "mlp.dense_h_to_4h.bias"))] for r in h]
            m = [linear(r, W.mat(arch, p + "mlp.dense_4h_to_h.weight"), W.vec(arch, p + "mlp.dense_4h_to_h.bias")) for r in f]
            x = [[u + w for u, w in zip(r, s)] for r, s in zip(x, m)]
        x = [layernorm(r, W.vec(arch, "ln_f.weight"), W.vec(arch, "ln_f.bias")) for r in x]
    else:
        d = "decoder."
        emb, pos = W.mat(arch, d + "embed_tokens.weight"), W.mat(arch, d + "embed_positions.weight")
        off = 0 if wrong else 2  # OPTLearnedPositionalEmbedding: position + 2
        x = [[a + b for a, b in zip(emb[t], pos[p + off])] for p, t in enumerate(toks)]
        lin = lambda xs, name: [linear(r, W.mat(arch, name + ".weight"), W.vec(arch, name + ".bias")) for r in xs]
        for i in range(L):
            p = f"{d}layers.{i}."
            h = [layernorm(r, W.vec(arch, p + "self_attn_layer_norm.weight"), W.vec(arch, p + "self_attn_layer_norm.bias")) for r in x]
            q = [[a * hs ** -0.5 for a in r] for r in lin(h, p + "self_attn.q_proj")]  # the query scaled, then q.k
            k, v = lin(h, p + "self_attn.k_proj"), lin(h, p + "self_attn.v_proj")
            y = [[] for _ in range(T)]
            for hd in range(NH):
                for t, o in enumerate(causal_attention(heads(q, hd), heads(k, hd), heads(v, hd), lambda t, u: 0.0)):
                    y[t] += o
            a = lin(y, p + "self_attn.out_proj")
            x = [[u + w for u, w in zip(r, s)] for r, s in zip(x, a)]
            h = [layernorm(r, W.vec(arch, p + "final_layer_norm.weight"), W.vec(arch, p + "final_layer_norm.bias")) for r in x]
            m = lin([[max(z, 0.0) for z in r] for r in lin(h, p + "fc1")], p + "fc2")
            x = [[u + w for u, w in zip(r, s)] for r, s in zip(x, m)]
        x = [layernorm(r, W.vec(arch, d + "final_layer_norm.weight"), W.vec(arch, d + "final_layer_norm.bias")) for r in x]
    return [[sum(a * b for a, b in zip(r, e)) for e in emb] for r in x]  # the tied LM head


def reference_loss(W, dump, iteration, wrong):
    arch = W.config["model_type"]
    rows = [list(map(int, l.split()[5:])) for l in open(dump) if l.split()[0] == iteration]
    if not rows:
        fail(f"no rows of iteration {iteration} in {dump}")
    total, count = 0.0, 0
    for ids in rows:
        for t, logits in enumerate(forward(W, arch, ids[:-1], wrong)):
            m = max(logits)
            total += m + math.log(sum(math.exp(z - m) for z in logits)) - logits[ids[t + 1]]
            count += 1
    return total / count


def cmd_loss(d, dump, iteration, wrong):
    return f"{reference_loss(Weights(d), dump, iteration, wrong):.12g}"


def cmd_match(d, dump, jsonl, tol=1e-6):
    """keel's iteration-1 loss (JSONL) = the reference within tol; the wrong layout misses by > 1e-2."""
    keel = json.loads(open(jsonl).readline())["lm_loss"]
    W = Weights(d)
    ref, wrong = reference_loss(W, dump, "1", False), reference_loss(W, dump, "1", True)
    if abs(keel - ref) > tol * abs(ref):
        fail(f"keel's loss {keel!r} vs the reference forward {ref!r}")
    if abs(wrong - ref) <= 1e-2 * abs(ref):
        fail(f"the wrong layout gives {wrong!r}, too close to {ref!r}: the check cannot see layouts")
    return f"keel's loss {keel:.9g} = the reference forward {ref:.9g} (relative {abs(keel - ref) / abs(ref):.1e}); a wrong layout: {wrong:.6g}"


# ---- check: the directory keel wrote ---------------------------------------------------------------------

def cmd_check(d, arch, L, C, NH, V, maxT, dtype):
    header, meta, data, n = read_safetensors(os.path.join(d, "model.safetensors"))
    if n % 8:
        fail(f"header length {n} is not a multiple of 8 (the data section would be misaligned)")
    if meta.get("format") != "pt":
        fail(f"__metadata__ {meta}: transformers refuses a file without format pt")
    want = {PREFIX[arch] + k: v for k, v in expected(arch, L, C, NH, V, maxT).items()}
    if set(header) != set(want):
        fail(f"names differ: extra {sorted(set(header) - set(want))[:5]}, missing {sorted(set(want) - set(header))[:5]}")
    for name, shape in want.items():
        if header[name]["shape"] != shape:
            fail(f"{name}: shape {header[name]['shape']}, {CLASS[arch]} needs {shape}")
        if header[name]["dtype"] != dtype:
            fail(f"{name}: dtype {header[name]['dtype']}, want {dtype}")
        if header[name]["data_offsets"][0] % SIZES[dtype]:
            fail(f"{name}: misaligned at {header[name]['data_offsets'][0]}")
    if arch == "opt":
        rows = decode(header["model.decoder.embed_positions.weight"], data)[:2 * C]
        if any(rows):
            fail("OPT's two unused position rows are not zero")
    cfg = json.load(open(os.path.join(d, "config.json")))
    torch_dtype = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[dtype]
    keys = {"architectures": [CLASS[arch]], "model_type": arch, "vocab_size": V, "tie_word_embeddings": True, "torch_dtype": torch_dtype}
    if arch == "gpt2":
        keys.update(n_layer=L, n_embd=C, n_head=NH, n_positions=maxT, activation_function="gelu_new", layer_norm_epsilon=1e-5,
                    scale_attn_by_inverse_layer_idx=False)
    elif arch == "bloom":
        keys.update(n_layer=L, hidden_size=C, n_head=NH, layer_norm_epsilon=1e-5, apply_residual_connection_post_layernorm=False)
    else:
        keys.update(num_hidden_layers=L, hidden_size=C, num_attention_heads=NH, ffn_dim=4 * C, max_position_embeddings=maxT,
                    word_embed_proj_dim=C, do_layer_norm_before=True, activation_function="relu", enable_bias=True)
    for k, v in keys.items():
        if cfg.get(k) != v:
            fail(f"config.json {k} = {cfg.get(k)!r}, want {v!r}")
    tok = ["vocab.json", "merges.txt", "tokenizer_config.json"]
    if V == 50257:
        for ours, src in (("vocab.json", "data/gpt2/encoder.json"), ("merges.txt", "data/gpt2/vocab.bpe")):
            if open(os.path.join(d, ours), "rb").read() != open(src, "rb").read():
                fail(f"{ours} differs from {src}")
        if json.load(open(os.path.join(d, "tokenizer_config.json"))).get("tokenizer_class") != "GPT2Tokenizer":
            fail("tokenizer_config.json does not name GPT2Tokenizer")
    elif any(os.path.exists(os.path.join(d, f)) for f in tok):
        fail(f"tokenizer files written for a {V}-token vocabulary")
    return f"{len(header)} tensors of {CLASS[arch]} in {dtype}, offsets tile {len(data)} bytes, config.json and tokenizer files as expected"


# ---- make: a model directory the way published ones look --------------------------------------------------

def cmd_make(arch, d, L, C, NH, V, maxT, dtype, seed):
    rng = random.Random(seed)
    os.makedirs(d, exist_ok=True)
    quant = {"F32": to_f32, "F16": lambda x: struct.unpack("<e", struct.pack("<e", x))[0],
             "BF16": lambda x: struct.unpack("<f", struct.pack("<I", bf16_bits(to_f32(x)) << 16))[0]}[dtype]
    tensors = []
    for name, shape in expected(arch, L, C, NH, V, maxT).items():
        n = math.prod(shape)
        if len(shape) == 1 and name.endswith(".weight"):  # every vector weight is a LayerNorm's gain
            vals = [1 + rng.gauss(0, 0.2) for _ in range(n)]
        elif name.endswith(".bias"):
            vals = [rng.gauss(0, 0.2) for _ in range(n)]
        else:
            vals = [rng.gauss(0, 0.35) for _ in range(n)]
        vals = [quant(v) for v in vals]
        stored = name if arch != "opt" else PREFIX[arch] + name
        tensors.append((stored, dtype, shape, encode(dtype, vals)))
        if arch == "opt" and name == "decoder.embed_tokens.weight":
            tensors.append(("lm_head.weight", dtype, shape, encode(dtype, vals)))  # a stored tied head
    if arch == "gpt2":  # the attention-mask buffers of older transformers' files
        for i in range(L):
            mask = [1.0 if u <= t else 0.0 for t in range(maxT) for u in range(maxT)]
            tensors.append((f"h.{i}.attn.bias", "F32", [1, 1, maxT, maxT], encode("F32", mask)))
            tensors.append((f"h.{i}.attn.masked_bias", "F32", [], encode("F32", [-1e4])))
    write_safetensors(os.path.join(d, "model.safetensors"), tensors, {"format": "pt"})
    json.dump(config_json(arch, L, C, NH, V, maxT, dtype), open(os.path.join(d, "config.json"), "w"), indent=2, sort_keys=True)


# ---- comparisons ------------------------------------------------------------------------------------------

def weights_of(d):
    header, _, data, _ = read_safetensors(os.path.join(d, "model.safetensors"))
    arch = json.load(open(os.path.join(d, "config.json")))["model_type"]
    out = {}
    for name, t in header.items():
        bare = name[len(PREFIX[arch]):] if name.startswith(PREFIX[arch]) else name
        if name == "lm_head.weight" or (arch == "gpt2" and (bare.endswith(".attn.bias") or bare.endswith(".attn.masked_bias"))):
            continue
        v = decode(t, data)
        if bare == "decoder.embed_positions.weight":
            v = v[2 * t["shape"][1]:]  # the two rows OPT never looks up
        out[bare] = v
    return out


def cmd_same(a, b):
    wa, wb = weights_of(a), weights_of(b)
    if set(wa) != set(wb):
        fail(f"tensor names differ: {sorted(set(wa) ^ set(wb))[:5]}")
    bad = [n for n in wa if wa[n] != wb[n]]
    if bad:
        fail(f"{len(bad)} tensors differ, e.g. {bad[0]}")
    return f"{len(wa)} tensors equal"


def cmd_rounded(f32_dir, d, dtype):
    wa, wb = weights_of(f32_dir), weights_of(d)
    rnd = {"BF16": lambda x: struct.unpack("<f", struct.pack("<I", bf16_bits(x) << 16))[0],
           "F16": lambda x: struct.unpack("<e", struct.pack("<e", x))[0]}[dtype]  # struct's 'e' rounds half to even
    bad = [n for n in wa if [rnd(x) for x in wa[n]] != wb[n]]
    if bad or set(wa) != set(wb):
        fail(f"not the fp32 weights rounded to {dtype}: {bad[:3]}")
    changed = sum(x != y for n in wa for x, y in zip(wa[n], wb[n]))
    return f"{len(wa)} tensors = fp32 rounded to nearest even {dtype} ({changed} values changed by the rounding)"


# ---- corrupt: one defect each ----------------------------------------------------------------------------

def cmd_corrupt(src, dst, kind):
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    data = bytearray(b[8 + n:])
    names = [k for k in header if k != "__metadata__"]
    by_offset = sorted(names, key=lambda k: header[k]["data_offsets"][0])
    second, last = by_offset[1], by_offset[-1]
    first = next(k for k in by_offset if ".attn.bias" not in k and "masked_bias" not in k)  # a weight, not a skipped buffer
    if kind == "len-past-end":
        open(path, "wb").write(struct.pack("<Q", len(b)) + b[8:])
    elif kind == "len-short":
        open(path, "wb").write(struct.pack("<Q", 1) + b[8:])
    elif kind == "tiny-file":
        open(path, "wb").write(b[:5])
    elif kind == "truncated":
        open(path, "wb").write(b[:-100])
    elif kind == "bad-json":
        text = json.dumps(header)
        raw = (text[:-1] + ",}").encode()  # a trailing comma
        raw += b" " * (-len(raw) % 8)
        open(path, "wb").write(struct.pack("<Q", len(raw)) + raw + bytes(data))
    elif kind == "duplicate-name":
        text = json.dumps(header)
        dup = json.dumps({first: header[first]})[1:-1]
        raw = (text[:-1] + ", " + dup + "}").encode()
        raw += b" " * (-len(raw) % 8)
        open(path, "wb").write(struct.pack("<Q", len(raw)) + raw + bytes(data))
    elif kind == "offsets-past-end":
        header[last]["data_offsets"] = [o + 8 for o in header[last]["data_offsets"]]
        write_raw(path, header, bytes(data))
    elif kind == "overlap":
        header[second]["data_offsets"] = [o - 4 for o in header[second]["data_offsets"]]
        write_raw(path, header, bytes(data))
    elif kind == "gap":
        b0, e0 = header[last]["data_offsets"]
        header[last]["data_offsets"] = [b0 + 8, e0 + 8]
        write_raw(path, header, bytes(data[:b0]) + bytes(8) + bytes(data[b0:]))
    elif kind == "size-mismatch":
        header[first]["shape"] = [header[first]["shape"][0] + 1] + header[first]["shape"][1:]
        write_raw(path, header, bytes(data))
    elif kind == "unknown-dtype":
        header[first]["dtype"] = "F33"
        write_raw(path, header, bytes(data))
    elif kind == "int-dtype":  # a valid container; an integer tensor where a weight belongs
        header[first]["dtype"] = {4: "I32", 2: "I16"}[SIZES[header[first]["dtype"]]]
        write_raw(path, header, bytes(data))
    elif kind == "huge-weight":  # a valid file whose first embedding weight is beyond fp16's range
        emb = next(k for k in names if k.endswith(("wte.weight", "word_embeddings.weight", "embed_tokens.weight")))
        begin = header[emb]["data_offsets"][0]
        data[begin:begin + 4] = struct.pack("<f", 1e5)
        write_raw(path, header, bytes(data))
    elif kind in ("wrong-shape", "missing", "extra", "lm-head-differs"):
        tensors = [(k, header[k]["dtype"], header[k]["shape"], bytes(data[header[k]["data_offsets"][0]:header[k]["data_offsets"][1]]))
                   for k in names]
        if kind == "wrong-shape":  # a Conv1D / Linear weight with its two dimensions swapped (same bytes)
            i = next(j for j, t in enumerate(tensors) if len(t[2]) == 2 and t[2][0] != t[2][1] and "embed" not in t[0] and "wte" not in t[0])
            name, dt, shape, raw = tensors[i]
            tensors[i] = (name, dt, shape[::-1], raw)
        elif kind == "missing":
            tensors = [t for t in tensors if not t[0].endswith("ln_f.bias") and not t[0].endswith("decoder.final_layer_norm.bias")]
        elif kind == "extra":
            tensors.append(("transformer.h.0.attn.extra_gate", tensors[0][1], [4], bytes(4 * SIZES[tensors[0][1]])))
        else:
            emb = next(t for t in tensors if t[0].endswith(("wte.weight", "word_embeddings.weight", "embed_tokens.weight")))
            raw = bytearray(emb[3])
            raw[0] ^= 0x40
            tensors.append(("lm_head.weight", emb[1], emb[2], bytes(raw)))
        write_safetensors(path, tensors, header.get("__metadata__", {"format": "pt"}))
    else:
        fail(f"unknown corruption {kind}")


def cmd_shard(path, n, V, seed):
    rng = random.Random(seed)
    toks, t = [], 0
    for _ in range(n):  # a little structure (a walk with jumps), so the loss has something to learn
        t = (t + rng.choice([1, 1, 2, 3])) % V if rng.random() < 0.8 else rng.randrange(V)
        toks.append(t)
    header = [20240520, 1, n] + [0] * 253
    open(path, "wb").write(struct.pack("<256i", *header) + struct.pack(f"<{n}H", *toks))


def run(a):
    cmd = a[0]
    if cmd == "check":
        return cmd_check(a[1], a[2], *map(int, a[3:8]), a[8])
    if cmd == "loss":
        return cmd_loss(a[1], a[2], a[3], "--wrong" in a)
    if cmd == "match":
        return cmd_match(a[1], a[2], a[3], *map(float, a[4:5]))
    if cmd == "make":
        return cmd_make(a[1], a[2], *map(int, a[3:8]), a[8], int(a[9]))
    if cmd == "same":
        return cmd_same(a[1], a[2])
    if cmd == "rounded":
        return cmd_rounded(a[1], a[2], a[3])
    if cmd == "corrupt":
        return cmd_corrupt(a[1], a[2], a[3])
    if cmd == "config":  # config SRC DST KEY JSON: a copy of SRC with config.json's KEY set to the JSON value
        if os.path.exists(a[2]):
            shutil.rmtree(a[2])
        shutil.copytree(a[1], a[2])
        c = json.load(open(os.path.join(a[2], "config.json")))
        c[a[3]] = json.loads(a[4])
        json.dump(c, open(os.path.join(a[2], "config.json"), "w"))
        return f"{a[3]} = {a[4]}"
    if cmd == "shard":
        return cmd_shard(a[1], int(a[2]), int(a[3]), int(a[4]))
    if cmd == "batch":  # one command a line, "LABEL | command args": one interpreter for many checks
        failed = 0
        for line in sys.stdin:
            if not line.strip():
                continue
            label, _, command = line.partition("|")
            try:
                print(f"ok: {label.strip()}: {run(command.split()) or 'done'}")
            except Exception as e:  # a failed check, or a file the check could not read
                print(f"FAIL: {label.strip()}: {e}")
                failed += 1
        return None if not failed else fail(f"{failed} batch checks failed")
    fail(f"unknown command {cmd}")


if __name__ == "__main__":
    try:
        out = run(sys.argv[1:])
        if out:
            print(out)
    except CheckFailed as e:
        print(f"FAIL: {e}")
        sys.exit(1)
