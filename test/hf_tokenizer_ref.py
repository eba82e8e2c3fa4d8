#!/usr/bin/env python3
"""hf_tokenizer_ref.py — an independent reference of Hugging Face `tokenizers` for the subset keel
reads (llmc/hf_tokenizer.h), written from the format's documented semantics with nothing but the
standard library (the `tokenizers` package is not available offline), for test/test_hf_tokenizer.sh.

  hf_tokenizer_ref.py make OUT GPT2_DIR   writes tokenizer directories built from OpenAI's GPT-2 files
                                          (GPT2_DIR/encoder.json, vocab.bpe) under OUT: gpt2/ (ByteLevel
                                          with its regex, "a b" merges, added tokens of every kind),
                                          bloom/ (BLOOM's Split + ByteLevel, [a, b] merges, </s> eos in
                                          special_tokens_map.json), openai/ (GPT-2 as OpenAI's files: no
                                          added tokens), prefix/ (add_prefix_space), small/ (a 260-token
                                          vocabulary with ignore_merges), bloomsmall/ (BLOOM's Split; "a"
                                          merges with every character it splits at)
  hf_tokenizer_ref.py encode DIR FILE...  prints the ids of each FILE (UTF-8 text), one line each
  hf_tokenizer_ref.py preprocess DIR INPUT PREFIX KEYS EOD [--append-eod] [--megatron-extras]
                                          Megatron-DeepSpeed's tools/preprocess_data.py on JSON lines with
                                          this tokenizer (KEYS comma-separated; EOD the end-of-document id;
                                          --megatron-extras: _AutoTokenizer's 21 <extra_id_NN> tokens),
                                          written by test/megatron_ref.py's MMapIndexedDataset writer

Method, written independently of keel's C++: classes come from Python's unicodedata (\\p{L}: a
category starting with L, \\p{N}: with N) and a literal list of Unicode White_Space (Oniguruma's \\s);
the GPT-2 regex and BLOOM's Split are hand-written scanners; BPE is encoder.py's loop (merge every
occurrence of the lowest-ranked pair, until none has a rank); added tokens follow AddedVocabulary's
find_matches (leftmost-longest, non-normalized tokens first, single_word / lstrip / rstrip).
"""
import json
import os
import sys
import unicodedata

WHITE_SPACE = set([0x9, 0xA, 0xB, 0xC, 0xD, 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000] + list(range(0x2000, 0x200B)))
BLOOM_SPLIT = " ?[^(\\s|[.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c])]+"
BLOOM_STOPS = set("()|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c")


def is_space(ch):
    return ord(ch) in WHITE_SPACE


def cls(ch):
    if is_space(ch):
        return "S"
    cat = unicodedata.category(ch)
    return cat[0] if cat[0] in "LN" else "O"


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_CHAR = bytes_to_unicode()
CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}


# ---- pre-tokenizers ------------------------------------------------------------------------------

def gpt2_pieces(t):
    """'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"""
    out, i = [], 0
    while i < len(t):
        m = None
        for suf in ("s", "t", "re", "ve", "m", "ll", "d"):
            if t[i] == "'" and t.startswith(suf, i + 1):
                m = i + 1 + len(suf)
                break
        if m is None:
            j = i + 1 if t[i] == " " and i + 1 < len(t) and cls(t[i + 1]) != "S" else i
            if cls(t[j]) != "S":
                c = cls(t[j])
                k = j
                while k < len(t) and cls(t[k]) == c:
                    k += 1
                m = k
            else:  # a whitespace run; (?!\S) gives the last one back when a non-space follows
                k = i
                while k < len(t) and is_space(t[k]):
                    k += 1
                m = k if k == len(t) or k - i == 1 else k - 1
        out.append(t[i:m])
        i = m
    return out


def bloom_match(t, i):
    j = i + 1 if t[i] == " " and i + 1 < len(t) and not (is_space(t[i + 1]) or t[i + 1] in BLOOM_STOPS) else i
    while j < len(t) and not (is_space(t[j]) or t[j] in BLOOM_STOPS):
        j += 1
    return j


def bloom_pieces(t):
    out, i, gap = [], 0, 0
    while i < len(t):
        m = bloom_match(t, i)
        if m > i:
            if gap < i:
                out.append(t[gap:i])
            out.append(t[i:m])
            i = gap = m
        else:
            i += 1
    if gap < len(t):
        out.append(t[gap:])
    return out


# ---- BPE -------------------------------------------------------------------------------------------

def bpe(word, ranks):
    parts = list(word)
    while len(parts) > 1:
        pairs = [(ranks.get((a, b)), k) for k, (a, b) in enumerate(zip(parts, parts[1:])) if (a, b) in ranks]
        if not pairs:
            break
        best = min(pairs)[0]
        a, b = [(x, y) for x, y in zip(parts, parts[1:]) if ranks.get((x, y)) == best][0]
        merged, k = [], 0
        while k < len(parts):
            if k + 1 < len(parts) and parts[k] == a and parts[k + 1] == b:
                merged.append(a + b)
                k += 2
            else:
                merged.append(parts[k])
                k += 1
        parts = merged
    return parts


class Ref:
    def __init__(self, d):
        tj = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
        model = tj["model"]
        self.vocab = model["vocab"]
        self.ranks = {}
        for r, m in enumerate(model["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            self.ranks[(a, b)] = r
        self.ignore_merges = model.get("ignore_merges", False)
        pre = tj["pre_tokenizer"]
        if pre["type"] == "Sequence":
            self.split, bl = pre["pretokenizers"][0]["type"] == "Split", pre["pretokenizers"][-1]
        else:
            self.split, bl = False, pre
        self.regex, self.prefix = bl.get("use_regex", True), bl.get("add_prefix_space", True)
        self.added = tj.get("added_tokens") or []

    def plain(self, text):
        if not text:
            return []
        if self.prefix and not text.startswith(" "):
            text = " " + text
        pieces = bloom_pieces(text) if self.split else gpt2_pieces(text) if self.regex else [text]
        ids = []
        for p in pieces:
            spelled = "".join(BYTE_CHAR[b] for b in p.encode("utf-8"))
            if self.ignore_merges and spelled in self.vocab:
                ids.append(self.vocab[spelled])
            else:
                ids += [self.vocab[x] for x in bpe(spelled, self.ranks)]
        return ids

    def find(self, t, normalized):
        """AddedVocabulary.find_matches: [(id or None, text)] tiling t."""
        toks = [a for a in self.added if a.get("normalized", not a.get("special")) == normalized]
        word = lambda ch: ch == "_" or unicodedata.category(ch)[0] in "LN"
        out, start_offset, pos = [], 0, 0
        while pos < len(t):
            hit = None
            for at in range(pos, len(t)):
                cands = [a for a in toks if t.startswith(a["content"], at)]
                if cands:
                    hit = (at, max(cands, key=lambda a: len(a["content"])))
                    break
            if hit is None:
                break
            at, a = hit
            start, stop = at, at + len(a["content"])
            pos = stop
            if a.get("single_word") and ((start > 0 and word(t[start - 1])) or (stop < len(t) and word(t[stop]))):
                continue
            if a.get("lstrip"):
                while start > start_offset and is_space(t[start - 1]):
                    start -= 1
            if a.get("rstrip"):
                while stop < len(t) and is_space(t[stop]):
                    stop += 1
                pos = stop
            if start_offset < start:
                out.append((None, t[start_offset:start]))
            out.append((a["id"], t[start:stop]))
            start_offset = stop
        if start_offset < len(t):
            out.append((None, t[start_offset:]))
        return out

    def encode(self, text):
        ids = []
        for i, part in self.find(text, False):
            if i is not None:
                ids.append(i)
                continue
            for j, sub in self.find(part, True):
                ids += [j] if j is not None else self.plain(sub)
        return ids


# ---- building the test's tokenizer directories -------------------------------------------------------

def write_dir(path, tj, extra=None):
    os.makedirs(path, exist_ok=True)
    json.dump(tj, open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False, indent=1)
    for name, content in (extra or {}).items():
        json.dump(content, open(os.path.join(path, name), "w", encoding="utf-8"), indent=1)


def added(i, content, special, **kw):
    a = dict(id=i, content=content, single_word=False, lstrip=False, rstrip=False, normalized=not special, special=special)
    a.update(kw)
    return a


def byte_level(prefix=False, regex=True):
    return {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": regex}


def make(out, gpt2_dir):
    vocab = json.load(open(os.path.join(gpt2_dir, "encoder.json"), encoding="utf-8"))
    lines = open(os.path.join(gpt2_dir, "vocab.bpe"), encoding="utf-8").read().split("\n")[1:]
    merges = [l for l in lines if l]
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "", "end_of_word_suffix": "",
             "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges}
    dec = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    post = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    gpt2_added = [added(50256, "<|endoftext|>", True, normalized=True), added(50257, "[SW]", False, single_word=True),
                  added(50258, "<L>", True, lstrip=True), added(50259, "<R>", True, rstrip=True), added(50260, "<|end", False),
                  added(50261, " hello", False), added(50262, " hello world", False)]
    write_dir(os.path.join(out, "gpt2"), {"version": "1.0", "truncation": None, "padding": None, "added_tokens": gpt2_added,
                                          "normalizer": None, "pre_tokenizer": byte_level(), "post_processor": post, "decoder": dec,
                                          "model": model}, {"tokenizer_config.json": {"eos_token": "<|endoftext|>", "model_max_length": 1024}})
    bloom_model = dict(model, merges=[m.split(" ") for m in merges])
    bloom_added = [added(50257 + k, c, True) for k, c in enumerate(["<unk>", "<s>", "</s>", "<pad>"])]
    bloom_pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": BLOOM_SPLIT}, "behavior": "Isolated", "invert": False}, byte_level(regex=False)]}
    write_dir(os.path.join(out, "bloom"), {"version": "1.0", "truncation": None, "padding": None, "added_tokens": bloom_added,
                                           "normalizer": None, "pre_tokenizer": bloom_pre, "post_processor": post, "decoder": dec,
                                           "model": bloom_model},
              {"special_tokens_map.json": {"bos_token": "<s>", "eos_token": {"content": "</s>", "lstrip": False}, "pad_token": "<pad>"}})
    write_dir(os.path.join(out, "openai"), {"added_tokens": [], "normalizer": None, "pre_tokenizer": byte_level(),
                                            "post_processor": None, "decoder": dec, "model": model})
    write_dir(os.path.join(out, "prefix"), {"added_tokens": [], "normalizer": None, "pre_tokenizer": byte_level(prefix=True),
                                            "post_processor": None, "decoder": dec, "model": model})
    small = {BYTE_CHAR[b]: b for b in range(256)}
    for k, tok in enumerate(["ab", "bc", "abc", "\u0120a"]):
        small[tok] = 256 + k
    small_model = {"type": "BPE", "vocab": small, "merges": ["b c", "a b", "\u0120 a"], "ignore_merges": True}
    # bloomsmall: BLOOM's Split over a vocabulary where "a" merges with each character the Split's class
    # excludes, so a piece boundary missing at any of them changes the ids
    bs = dict(small)
    bmerges = []
    for c in sorted(BLOOM_STOPS) + [" ", "\t", "\u00a0", "\u3000", "\u0085"]:
        spelled = "".join(BYTE_CHAR[b] for b in c.encode("utf-8"))
        left = spelled[0]
        for ch in spelled[1:]:
            if left + ch not in bs:
                bs[left + ch] = len(bs)
                bmerges.append(left + " " + ch)
            left += ch
        bs["a" + spelled] = len(bs)
        bmerges.append("a " + spelled)
    bloom_small = {"type": "BPE", "vocab": bs, "merges": bmerges}
    write_dir(os.path.join(out, "bloomsmall"), {"added_tokens": [], "normalizer": None, "pre_tokenizer": bloom_pre,
                                                "decoder": dec, "model": bloom_small})
    write_dir(os.path.join(out, "small"), {"added_tokens": [], "normalizer": None, "pre_tokenizer": byte_level(),
                                           "decoder": dec, "model": small_model})


def preprocess(d, path, prefix, keys, eod, append_eod, extras):
    """encode() per JSON line and key; empty documents left out; EOD after each non-empty one."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import megatron_ref
    ref = Ref(d)
    if extras:  # a new token takes the id after the largest so far (AddedVocabulary.add_tokens)
        for k in range(21):
            content = "<extra_id_%02d>" % k
            if content in ref.vocab or any(a["content"] == content for a in ref.added):
                continue
            nid = max([len(ref.vocab) - 1] + [a["id"] for a in ref.added]) + 1
            ref.added.append(added(nid, content, True))
    docs = {k: [] for k in keys}
    for line in open(path, encoding="utf-8"):  # text mode: \n, \r\n and \r end lines, as in the tool
        data = json.loads(line)
        for k in keys:
            ids = ref.encode(data[k])
            if ids:
                docs[k].append(ids + ([eod] if append_eod else []))
    dtype = "uint16" if len(ref.vocab) < 65500 else "int32"
    for k in keys:
        megatron_ref.write_prefix("%s_%s_document" % (prefix, k), docs[k], dtype)


def main():
    if len(sys.argv) >= 7 and sys.argv[1] == "preprocess":
        preprocess(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5].split(","), int(sys.argv[6]), "--append-eod" in sys.argv[7:],
                   "--megatron-extras" in sys.argv[7:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 4 and sys.argv[1] == "encode":
        ref = Ref(sys.argv[2])
        for f in sys.argv[3:]:
            print(" ".join(map(str, ref.encode(open(f, encoding="utf-8", newline="").read()))))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
