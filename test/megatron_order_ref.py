"""megatron_order_ref.py — an independent reference of Megatron-DeepSpeed's sample order, for
test/test_megatron_order.sh and build/test_megatron_index. Written from Megatron-DeepSpeed's
documented method (BigScience's tree: megatron/data/gpt_dataset.py, blendable_dataset.py,
dataset_utils.py, helpers.cpp, data_samplers.py, training.py), with numpy's own RandomState —
not from keel's code:

  GPTDataset(documents, num_samples, seq_length, seed):
    tokens_per_epoch = sum of the documents' sizes
    num_epochs = smallest E with (E * tokens_per_epoch - 1) // seq_length >= num_samples
    rng = numpy.random.RandomState(seed)
    separate_last_epoch: E > 1 and the samples the last epoch must give,
        num_samples - ((E-1) * tokens_per_epoch - 1) // seq_length,
        are fewer than int(cutoff * ((tokens_per_epoch - 1) // seq_length))   (cutoff 0.95)
    doc_idx = the documents E times, rng.shuffle'd (separate: E-1 copies shuffled, then 1 shuffled)
    sample_idx: walk doc_idx taking seq_length + 1 tokens per sample, the next sample starting on
        the last token of the previous one: (doc_idx position, offset) of each sample start
    shuffle_idx = arange(len) rng.shuffle'd (separate: [0, first) and [first, len) shuffled apart,
        first = ((E-1) * tokens_per_epoch - 1) // seq_length)
    item k = the tokens of sample shuffle_idx[k], len = (E * tokens_per_epoch - 1) // seq_length
  Target sizes: train = train_samples or train_iters * gbs; valid = (train_iters // eval_interval
    + 1) * eval_iters * gbs; a blend builds dataset i for ceil(target * w_i * 1.005) with w
    normalized once; BlendableDataset's size is the sum of the datasets' lengths; the blending
    index is greedy: sample s goes to argmax_i(w_i * max(s, 1) - count_i), first on a tie (w
    normalized twice, as the blend normalizes the already normalized weights again).
  MegatronPretrainingSampler: global batch after `consumed` samples; data-parallel rank r reads
    micro-batch m as the samples consumed + (m * dp + r) * mbs + [0, mbs).

Commands (python3 megatron_order_ref.py CMD ...):
  shuffle SEED N...          numpy RandomState(SEED): shuffles arange(N) for each N in turn (one
                             rng), one line each
  interval SEED MAX COUNT    numpy's bounded draws on [0, MAX] (randint, the masked legacy method)
  starts SIZES B E N SEQ SEED [CUTOFF]
                             a GPTDataset over documents [B, E) of the comma-separated sizes: its
                             epochs, separate-last-epoch flag and length, then each item's start
                             "document:offset" in item order
  rows JSON                  the trainer's token-dump lines for the run described by JSON (see rows())
  plan JSON                  per dataset: target, epochs, separate last epoch, length
"""
import json
import math
import sys

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import megatron_ref as mref  # noqa: E402  (the .idx reader and --split rounding, written earlier)

CUTOFF = 0.95


class GPTData:
    def __init__(self, docs, begin, end, num_samples, seq, seed, cutoff=CUTOFF):
        self.docs, self.seq = docs, seq
        sizes = [len(d) for d in docs]
        documents = list(range(begin, end))
        tpe = sum(sizes[d] for d in documents)
        epochs, total = 0, 0
        while True:
            epochs += 1
            total += tpe
            if (total - 1) // seq >= num_samples:
                break
        separate = False
        if epochs > 1:
            from_first = ((epochs - 1) * tpe - 1) // seq
            per_epoch = (tpe - 1) // seq
            separate = (num_samples - from_first) < int(cutoff * per_epoch)
        rng = np.random.RandomState(seed)

        def doc_shuffle(n_epochs):
            a = np.array(documents * n_epochs, dtype=np.int32)
            rng.shuffle(a)
            return list(a)
        doc_idx = doc_shuffle(epochs - 1) + doc_shuffle(1) if separate else doc_shuffle(epochs)
        n = (epochs * tpe - 1) // seq
        starts = [(0, 0)]
        pos, off = 0, 0
        for _ in range(n):  # the next start is seq tokens further on
            need = seq
            while sizes[doc_idx[pos]] - off <= need:
                need -= sizes[doc_idx[pos]] - off
                pos, off = pos + 1, 0
            off += need
            starts.append((pos, off))
        first = ((epochs - 1) * tpe - 1) // seq if separate else n
        a = np.arange(0, first, dtype=np.uint32)
        rng.shuffle(a)
        b = np.arange(first, n, dtype=np.uint32)
        if first < n:
            rng.shuffle(b)
        self.shuffle = [int(x) for x in a] + [int(x) for x in b]
        self.doc_idx, self.starts, self.len = doc_idx, starts, n
        self.plan = {"target": num_samples, "epochs": epochs, "separate": separate, "len": n}

    def item(self, k):
        """The seq+1 tokens of item k: from the sample's start, seq+1 tokens along doc_idx."""
        pos, off = self.starts[self.shuffle[k]]
        out = []
        while len(out) < self.seq + 1:
            d = self.docs[self.doc_idx[pos]]
            out += d[off:off + self.seq + 1 - len(out)]
            pos, off = pos + 1, 0
        return out


def blend_index(weights, size):
    """(dataset, its item) for each of the blend's samples [0, size)."""
    w = [x / sum(weights) for x in weights]
    w = list(np.array(w, dtype=np.float64) / np.sum(np.array(w, dtype=np.float64)))
    count = [0] * len(w)
    out = []
    for s in range(size):
        x = max(float(s), 1.0)
        err = [w[i] * x - count[i] for i in range(len(w))]
        best = err.index(max(err))
        out.append((best, count[best]))
        count[best] += 1
    return out


def build(run):
    """The run's training (or, with run["part"] == 1, validation) datasets: [GPTData], weights."""
    gbs, part = run["global_batch_size"], run.get("part", 0)
    train_iters = run["train_iters"]
    if part == 0:
        target = run.get("train_samples") or train_iters * gbs
    else:
        target = (train_iters // run["eval_interval"] + 1) * run["eval_iters"] * gbs
    sources = run["sources"]  # [{"prefix", "weight", "split" or "range"}]
    total = 0.0
    for s in sources:
        total += s["weight"]
    sets = []
    for s in sources:
        docs = mref.read_prefix(s["prefix"])[3]
        if "range" in s:
            begin, end = mref.range_bounds(s["range"], len(docs))
        else:
            b = mref.split_bounds(s["split"], len(docs))
            begin, end = b[part], b[part + 1]
        n = target if len(sources) == 1 else int(math.ceil(target * (s["weight"] / total) * 1.005))
        sets.append(GPTData(docs, begin, end, n, run["seq_length"], run["seed"], run.get("cutoff", CUTOFF)))
    return sets, [s["weight"] for s in sources]


def skipped(run, it):
    return any(a <= it <= b for a, b in run.get("skip", []))


def rows(run):
    """Lines '<iteration> <rank> <step> <row> <sample> <T+1 ids>' of iterations 1..train_iters (a
    skipped iteration's batch is consumed unread), ordered by iteration, rank, step, row."""
    sets, weights = build(run)
    gbs, mbs, dp = run["global_batch_size"], run["micro_batch_size"], run["dp"]
    size = sum(d.len for d in sets)
    pick = blend_index(weights, size) if len(sets) > 1 else [(0, k) for k in range(size)]
    out = []
    for it in range(1, run["train_iters"] + 1):
        consumed = (it - 1) * gbs
        if skipped(run, it):
            continue
        for r in range(dp):
            for m in range(gbs // (mbs * dp)):
                for b in range(mbs):
                    s = consumed + (m * dp + r) * mbs + b
                    d, k = pick[s]
                    toks = sets[d].item(k)
                    out.append(" ".join(map(str, [it, r, m, b, s] + toks)))
    return out


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "shuffle":
        rng = np.random.RandomState(int(args[0]))
        for n in args[1:]:
            a = np.arange(int(n), dtype=np.int64)
            rng.shuffle(a)
            print(" ".join(map(str, a)))
    elif cmd == "interval":
        rng = np.random.RandomState(int(args[0]))
        mx, count = int(args[1]), int(args[2])
        print(" ".join(map(str, rng.randint(0, mx + 1, size=count, dtype=np.uint64))))
    elif cmd == "starts":  # SIZES BEGIN END N SEQ SEED [CUTOFF]: a GPTDataset over documents of these sizes
        sizes = [int(x) for x in args[0].split(",")]
        begin, end, n, seq, seed = (int(x) for x in args[1:6])
        cutoff = float(args[6]) if len(args) > 6 else CUTOFF
        d = GPTData([[0] * z for z in sizes], begin, end, n, seq, seed, cutoff)
        p = d.plan
        print(p["epochs"], int(p["separate"]), p["len"])
        print(" ".join("%d:%d" % (d.doc_idx[d.starts[i][0]], d.starts[i][1]) for i in d.shuffle))
    elif cmd == "rows":
        print("\n".join(rows(json.loads(args[0]))))
    elif cmd == "plan":
        sets, _ = build(json.loads(args[0]))
        print(json.dumps([d.plan for d in sets]))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
