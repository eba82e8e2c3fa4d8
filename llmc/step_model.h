// step_model.h — `--dry-run`'s step time: how long one iteration of a layout takes, and where the
// time goes, from quantities keel knows exactly and a table of GPUs (docs/operations.md#the-step-time-how-long-an-iteration-takes-and-where-the-time-goes).
//
// What is exact: per op of keel's layer (llmc/model.h gpt_forward/gpt_backward, the same op list on
// both trainers) its FLOPs and the bytes it moves at this layout — the four linear layers (forward,
// then an input-gradient and a weight-gradient product in backward), the attention on the path the
// GPU trainer would choose (gpt_attention_flash at the GPU's compute capability: flash's causal
// half-products, or the GEMM path's six full products and its T×T score traffic), LayerNorm,
// residual, dropout and GeLU as memory-bound passes, the LM head and its classifier, the recomputed
// forward under --checkpoint-activations; per parallel dimension the bytes each collective or send
// moves, and over which link: keel places ranks TP-innermost, then DP, then PP
// (rank = tp_rank + TP·(dp_rank + DP·pp_rank), llmc/parallel.h), on nodes of --gpus-per-node.
// What the trainer overlaps (docs/gpu.md#streams-and-host-waits) and what it does not:
//   - TP all-reduces (2 per layer forward, 2 backward, 2 more in the recomputed forward; the
//     vocabulary-parallel embedding and LM head's) stay on the compute stream: exposed;
//   - PP activations and gradients: the receiving stage waits for them: exposed, per micro-batch;
//   - the DP gradient reduce-scatter runs in buckets behind the last micro-batch's backward: only
//     what that backward does not cover is exposed; the ZeRO-1 all-gather of the updated weights
//     (ZeRO-0: of the reduced gradients) and the tied embedding's sum are exposed;
//   - 1F1B: the slowest stage sets the pace of the M micro-batches; the warm-up and cool-down add
//     every other stage's forward and backward once (uniform stages: (P−1)/M of the steady phase);
//   - the optimizer pass is memory-bound over the rank's shard.
// What is a model: each kernel's time is the larger of its FLOPs at a share of the dense peak (less for
// a GEMM dimension short of the GPU's alignment) and its bytes at a share of the memory bandwidth (a
// roofline); a collective's is a ring's bytes at a share of the link's bandwidth plus a per-step
// latency. The shares are the named constants below, each with its source, set once for all layouts
// (--step-curves FILE replaces them with those measured on a GPU: step_curves_load);
// another stack's run is planned at that stack's measured overhead (--software-stack, STEP_STACKS);
// docs/operations.md#the-step-time-how-long-an-iteration-takes-and-where-the-time-goes holds the
// predictions against published runs.
#pragma once
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/log.h"
#include "llmc/model.h"
#include "llmc/planner.h"

// ---- hardware, as data ---------------------------------------------------------------------------------
// One row per --gpu-type. Sources: NVIDIA's datasheets — V100 SXM2 (125 TFLOP/s fp16 tensor, 15.7
// fp32, 900 GB/s HBM2, NVLink 2: 300 GB/s), A100 SXM (312 TFLOP/s bf16/fp16 dense, 19.5 fp32, 40 GB
// 1,555 GB/s, 80 GB 2,039 GB/s, NVLink 3: 600 GB/s), H100 SXM (989 dense bf16 — the 1,979 quoted is
// with sparsity, 67 fp32, 3.35 TB/s, NVLink 4: 900 GB/s), H100 PCIe (756 dense bf16, 51 fp32, 2.0 TB/s,
// PCIe Gen5 x16: 128 GB/s), H200 SXM (the H100's compute, 141 GB at 4.8 TB/s). NVLink and PCIe are
// quoted as the sum of both directions: a ring uses one, so the table holds half. Between nodes, one
// NIC per GPU as in the DGX of each generation (DGX-1: four 100 Gb/s EDR ports for 8 V100s; DGX A100:
// 200 Gb/s HDR per GPU; DGX H100/H200: 400 Gb/s NDR per GPU); a cluster built otherwise says so with
// --inter-node-gbps. Memory is what the device reports (nvidia-smi MiB / 1024: an "80 GB" H100 has
// 81,559 MiB, an H200 143,771 MiB). V100 has no bf16 tensor cores: its bf16 row is its fp16 rate
// (keel's --fp16).
// gemm_eff: the share of the dense peak the best large cuBLAS GEMM sustains, measured with the
// "maximum achievable matmul FLOPS" finder (stas00/ml-engineering, compute/accelerator): A100 SXM
// 267.9 of 312 TFLOP/s (0.86), H100 SXM 792.1 of 989 (0.80), H100 PCIe 499.5 of 756 (0.66); the
// H200 is an H100 SXM chip (0.80); V100: 83 of 125 TFLOP/s (0.66), cuBLAS's mixed-precision GEMM
// on a Tesla V100 (Markidis et al., "NVIDIA Tensor Core Programmability, Performance & Precision",
// arXiv 1803.04014) — the finder has no V100 row.
// align_bytes: a GEMM runs at that rate when each of its dimensions, in bytes, is a multiple of
// this; below it the kernel moves its tiles in narrower pieces (step_gemm_align_factor). NVIDIA's
// "Matrix Multiplication Background" guide (Tensor Core Requirements): 16 bytes on V100, 128 on
// A100. H100/H200: 64, measured (stas00/ml-engineering training/performance, swiglu-maf-bench on
// an H100: inner dimensions 64, 128, 256 and 512 bytes aligned all within 1% of each other).
struct GpuSpec {
    const char* name;
    int cc;                 // compute capability x10: the attention path and GeLU fusion keel would pick
    double peak16, peak32;  // dense FLOP/s: bf16/fp16 tensor cores, fp32 (no TF32: keel's --fp32 is fp32)
    double hbm_bw;          // HBM bytes/s
    double mem_gib;         // device memory, GiB
    double nvlink_bw;       // bytes/s one way, GPU to GPU inside a node
    double ib_bw;           // bytes/s one way, per GPU, between nodes
    double gemm_eff;        // share of peak16 a large GEMM sustains
    int align_bytes;        // the alignment of a GEMM dimension that reaches gemm_eff
};
static const GpuSpec GPU_SPECS[] = {
    {"v100-32gb", 70, 125e12, 15.7e12, 900e9, 32.0, 150e9, 6.25e9, 0.66, 16},
    {"a100-40gb", 80, 312e12, 19.5e12, 1555e9, 40.0, 300e9, 25e9, 0.86, 128},
    {"a100-80gb", 80, 312e12, 19.5e12, 2039e9, 80.0, 300e9, 25e9, 0.86, 128},
    {"h100-sxm", 90, 989e12, 67e12, 3.35e12, 79.65, 450e9, 50e9, 0.80, 64},
    {"h100-pcie", 90, 756e12, 51e12, 2.0e12, 79.65, 64e9, 50e9, 0.66, 64},
    {"h200", 90, 989e12, 67e12, 4.8e12, 140.4, 450e9, 50e9, 0.80, 64},
};
static const int NUM_GPU_SPECS = (int)(sizeof GPU_SPECS / sizeof GPU_SPECS[0]);

static inline const GpuSpec* gpu_spec_find(const std::string& name) {
    for (const GpuSpec& g : GPU_SPECS)
        if (name == g.name) return &g;
    return nullptr;
}

// --gpu-type auto: the row of a device by the name CUDA reports and its memory (bytes): "Tesla
// V100-SXM2-32GB", "NVIDIA A100-SXM4-40GB" / "-80GB" (by memory, as the PCIe cards' names do not
// say), "NVIDIA H100 80GB HBM3" (SXM) or "NVIDIA H100 PCIe", "NVIDIA H200" (and GH200). Null: none.
static inline const GpuSpec* gpu_spec_match(const std::string& device, double mem_bytes) {
    auto has = [&](const char* w) { return device.find(w) != std::string::npos; };
    if (has("V100")) return gpu_spec_find("v100-32gb");
    if (has("A100")) return gpu_spec_find(mem_bytes > 60.0 * (1 << 30) ? "a100-80gb" : "a100-40gb");
    if (has("H200")) return gpu_spec_find("h200");
    if (has("H100")) return gpu_spec_find(has("PCIe") ? "h100-pcie" : "h100-sxm");
    return nullptr;
}
// The --gpu-type choices: auto, then the table's names ("auto|v100-32gb|..."); the flag table's string
// is checked against it (test_gpu_spec).
static inline std::string gpu_spec_choices() {
    std::string s = "auto";
    for (const GpuSpec& g : GPU_SPECS) s += std::string("|") + g.name;
    return s;
}

// ---- efficiency curves (named, with their reasons) ------------------------------------------------------
// A GEMM whose smallest dimension d is small fills fewer tensor-core tiles per wave and pipelines a
// shorter k loop: its share of the large-GEMM rate is d/(d + STEP_GEMM_HALF_DIM) (128: one
// 128-wide cuBLAS tile; a 64-wide head-size product reaches a third, a 768-wide one 86%).
static const double STEP_GEMM_HALF_DIM = 128;
// A dimension aligned to 4 bytes instead of 64 (four halvings) took 1.46x as long on an H100
// (stas00/ml-engineering training/performance, swiglu-maf-bench: [4096, d]·[d, 4096] fp16 at
// d = 10922, 272.7 TFLOP/s, against d = 10944, 398.4): 0.115 of the aligned time per halving.
static const double STEP_GEMM_MISALIGN_COST = 0.115;
// keel's flash kernels (mma.sync, FlashAttention-2's scheme) as measured, counted as this model
// counts them (the causal half-products): the kernel lab on an H200 (docs/gpu.md, 27 November 2026,
// B=16 T=1024 NH=12 hs=64: the forward at 64 queries a block, the backward at 4 warps, both the
// launcher's) ran the forward in 0.1434 ms (2.58e10 FLOPs: 18.2% of the dense peak) and the backward
// in 0.5494 ms (6.44e10: 11.85%); in the 124M trainer's step (cold caches) they took 0.152 and 0.592
// ms a call. These are keel's kernels as they are, not what a flash kernel can reach
// (test/kernel_lab_h200_sample.txt holds that run). With them the model puts flash ahead of the GEMM
// path at head size 128 too, as the H200 measured it (L12 C1536 B=8 T=1024: 47.9 against 49.9 ms).
static const double STEP_FLASH_FWD_EFF = 0.182, STEP_FLASH_BWD_EFF = 0.1185;
// Memory-bound kernels (LayerNorm, residual, dropout, GeLU, softmax, the optimizer): 80% of HBM
// bandwidth, what a streaming copy reaches (STREAM-like copies on A100/H100).
static const double STEP_MEM_EFF = 0.80;
// Collectives: NCCL's ring reaches about 75% of NVLink's one-way bandwidth as bus bandwidth (nccl-tests
// all_reduce on a DGX A100: about 230 of 300 GB/s) and about 85% of a NIC's line rate (HDR: about 21
// of 25 GB/s); each of a ring's steps also costs a fixed latency (NCCL's ring base latency is a few µs
// inside a node, about 10 µs across one).
static const double STEP_NVLINK_EFF = 0.75, STEP_IB_EFF = 0.85;
static const double STEP_NVLINK_LATENCY_S = 5e-6, STEP_IB_LATENCY_S = 10e-6;
// Per kernel launch the GPU idles while the next kernel starts (back-to-back launches of short
// kernels: a few µs each); keel's layer issues about 24 kernels forward and 36 backward.
static const double STEP_KERNEL_GAP_S = 2e-6;

// Bytes a parameter costs the optimizer pass (memory-bound over the shard): Adam reads the fp32
// gradient, master weight, m and v (16) and writes master, m, v and the 2-byte compute copy (14); the
// gradient norm reads the gradient once more (4). 8-bit Adam: m and v are a byte each (16 - 6).
// Nothing else passes over the gradients: clipping is applied inside the update, and they are not
// zeroed between iterations (the first micro-batch's ops write them: llmc/model.h gpt_grads_begin).
static const double STEP_ADAM_BYTES_PER_PARAM = 34, STEP_ADAM8BIT_BYTES_PER_PARAM = 22;

// ---- whose implementation ------------------------------------------------------------------------------
// The model above is of keel's kernels and schedule. A published run of another stack checks it only
// for what the two share, so --software-stack names the run's stack and the step carries that stack's
// overhead over this model, measured once, away from the runs it is then checked on:
//   - megatron-lm (2021): 1, none measured — its Table 1 (arXiv 2104.04473) is within 8% as it is;
//   - megatron-deepspeed (2021-22: Megatron's layers under DeepSpeed's pipeline engine and ZeRO):
//     1.28, the same model shape on the same machine under both stacks — MT-NLG 530B on 280 DGX
//     A100 nodes of Selene (arXiv 2201.11990, section 2.4: 60.1 s per iteration at TP 8, PP 35, DP 8) took
//     1.317x this model's step, Megatron-LM's 529.6B on Selene (Table 1: 163 TFLOP/s at TP 8, PP 35,
//     DP 9) 1.031x, so DeepSpeed's stack took 1.277x Megatron-LM's (test_step_model recomputes it
//     from those two rows). What the factor holds is not broken down: it is the measured remainder.
struct StackSpec {
    const char* name;
    double overhead;  // the stack's step over this model's
};
static const StackSpec STEP_STACKS[] = {{"keel", 1.0}, {"megatron-lm", 1.0}, {"megatron-deepspeed", 1.28}};

static inline const StackSpec* step_stack_find(const std::string& name) {
    for (const StackSpec& s : STEP_STACKS)
        if (name == s.name) return &s;
    return nullptr;
}
// The --software-stack choices ("keel|megatron-lm|..."): test_gpu_spec compares the flag's string with it.
static inline std::string step_stack_choices() {
    std::string s;
    for (const StackSpec& x : STEP_STACKS) s += (s.empty() ? "" : "|") + std::string(x.name);
    return s;
}

// ---- the machine a plan runs on ------------------------------------------------------------------------
// The shares a prediction runs at: the named constants above unless --step-curves replaced some with
// figures measured on a GPU (step_curves_load); the GEMM share is the GPU row's gemm_eff.
struct StepCurves {
    double flash_fwd_eff = STEP_FLASH_FWD_EFF, flash_bwd_eff = STEP_FLASH_BWD_EFF;
    double mem_eff = STEP_MEM_EFF, nvlink_eff = STEP_NVLINK_EFF, ib_eff = STEP_IB_EFF;
    double kernel_gap_s = STEP_KERNEL_GAP_S;
};
struct StepHw {
    GpuSpec gpu;
    int gpus_per_node = 8;
    double peak = 0;  // the dense peak of the run's precision
    StepCurves curves;
};

// ---- --step-curves FILE: the efficiencies measured on a GPU ---------------------------------------------
// A curves file is `key value` lines, `#` to the end of a line a comment (scripts/gpu_check.sh writes
// one from the kernel lab: docs/operations.md#calibrating-to-a-gpu---step-curves-file). The keys are the
// model's shares; `gpu_type` (optional) names the GPU they were measured on, and a file that names one
// applies to plans of that GPU only: another GPU's kernels reach other shares.
struct StepCurveKey {
    const char* name;
    bool seconds;  // a time (0 <= s <= 1 ms), not a share of a peak (0 < share <= 1)
    double* (*field)(StepHw*);
};
static const StepCurveKey STEP_CURVE_KEYS[] = {
    {"gemm_eff", false, [](StepHw* h) { return &h->gpu.gemm_eff; }},
    {"flash_fwd_eff", false, [](StepHw* h) { return &h->curves.flash_fwd_eff; }},
    {"flash_bwd_eff", false, [](StepHw* h) { return &h->curves.flash_bwd_eff; }},
    {"mem_eff", false, [](StepHw* h) { return &h->curves.mem_eff; }},
    {"nvlink_eff", false, [](StepHw* h) { return &h->curves.nvlink_eff; }},
    {"ib_eff", false, [](StepHw* h) { return &h->curves.ib_eff; }},
    {"kernel_gap_s", true, [](StepHw* h) { return &h->curves.kernel_gap_s; }},
};
static const int NUM_STEP_CURVE_KEYS = (int)(sizeof STEP_CURVE_KEYS / sizeof STEP_CURVE_KEYS[0]);

static inline std::string step_curve_key_names() {
    std::string s = "gpu_type";
    for (const StepCurveKey& k : STEP_CURVE_KEYS) s += std::string(", ") + k.name;
    return s;
}

// One line's words, the comment dropped.
static inline std::vector<std::string> step_curves_words(const std::string& line) {
    std::vector<std::string> w;
    std::string body = line.substr(0, line.find('#')), cur;
    for (char ch : body) {
        if (std::isspace((unsigned char)ch)) {
            if (!cur.empty()) w.push_back(cur), cur.clear();
        } else cur += ch;
    }
    if (!cur.empty()) w.push_back(cur);
    return w;
}

// One line of any length, without its newline; false at the end of the file.
static inline bool step_curves_getline(FILE* f, std::string* line) {
    line->clear();
    int ch;
    while ((ch = fgetc(f)) != EOF && ch != '\n') *line += (char)ch;
    return ch != EOF || !line->empty();
}

// A key's value from its words: "" when good, else the problem. A share outside (0, 1] or a gap
// outside [0, 1 ms] is a mistake in the file (a percentage, a value in µs), not a measurement.
static inline std::string step_curves_value(const std::vector<std::string>& w, const StepCurveKey* k, double* v) {
    if (w.size() < 2) return std::string(k->name) + " has no value";
    if (w.size() > 2) return std::string(k->name) + " takes one value, found " + std::to_string(w.size() - 1);
    char* end = nullptr;
    errno = 0;
    *v = strtod(w[1].c_str(), &end);
    if (errno || end == w[1].c_str() || *end || !std::isfinite(*v)) return std::string(k->name) + ": '" + w[1] + "' is not a number";
    bool in = k->seconds ? *v >= 0 && *v <= 1e-3 : *v > 0 && *v <= 1;
    if (!in) return std::string(k->name) + " " + w[1] + " is out of range (" + (k->seconds ? "0 <= seconds <= 0.001" : "a share: 0 < value <= 1") + ")";
    return "";
}

// Reads FILE into `vals` (per key, NaN where absent) and `gpu_type`; false with "FILE:LINE: problem".
static inline bool step_curves_read(const std::string& path, double* vals, std::string* gpu_type, int* gpu_line, std::string* err) {
    FILE* f = fopen(path.c_str(), "r");
    if (!f) {
        *err = path + ": cannot read it: " + strerror(errno);
        return false;
    }
    std::vector<int> seen(NUM_STEP_CURVE_KEYS, 0);
    std::string line, problem;
    int n = 0;
    for (int i = 0; i < NUM_STEP_CURVE_KEYS; i++) vals[i] = NAN;
    while (problem.empty() && step_curves_getline(f, &line)) {
        n++;
        std::vector<std::string> w = step_curves_words(line);
        if (w.empty()) continue;
        if (w[0] == "gpu_type") {
            if (w.size() != 2) problem = w.size() < 2 ? "gpu_type has no value" : "gpu_type takes one value, found " + std::to_string(w.size() - 1);
            else if (*gpu_line) problem = "gpu_type given again (first on line " + std::to_string(*gpu_line) + ")";
            else if (!gpu_spec_find(w[1])) problem = "gpu_type '" + w[1] + "' is not in the GPU table (" + gpu_spec_choices().substr(5) + ")";
            else *gpu_type = w[1], *gpu_line = n;
            continue;
        }
        int k = 0;
        while (k < NUM_STEP_CURVE_KEYS && w[0] != STEP_CURVE_KEYS[k].name) k++;
        if (k == NUM_STEP_CURVE_KEYS) problem = "unknown key '" + w[0] + "' (the keys: " + step_curve_key_names() + ")";
        else if (seen[k]) problem = w[0] + " given again (first on line " + std::to_string(seen[k]) + ")";
        else problem = step_curves_value(w, &STEP_CURVE_KEYS[k], &vals[k]), seen[k] = n;
    }
    fclose(f);
    if (!problem.empty()) *err = path + ":" + std::to_string(n) + ": " + problem;
    return problem.empty();
}

// --step-curves FILE onto the plan's hardware: false with "FILE:LINE: problem"; `said` names the file,
// each figure it changed (from, to) and each it left as it was.
static inline bool step_curves_load(const std::string& path, StepHw* hw, std::string* said, std::string* err) {
    double vals[NUM_STEP_CURVE_KEYS];
    std::string gpu_type;
    int gpu_line = 0;
    if (!step_curves_read(path, vals, &gpu_type, &gpu_line, err)) return false;
    if (!gpu_type.empty() && gpu_type != hw->gpu.name) {
        *err = path + ":" + std::to_string(gpu_line) + ": measured on " + gpu_type + ", but the plan is for " + hw->gpu.name +
               " (--gpu-type): another GPU's kernels reach other shares";
        return false;
    }
    std::string changed, kept;
    char buf[160];
    for (int k = 0; k < NUM_STEP_CURVE_KEYS; k++) {
        double* f = STEP_CURVE_KEYS[k].field(hw);
        if (!std::isnan(vals[k]) && vals[k] != *f) {
            snprintf(buf, sizeof buf, "%s%s %g -> %g", changed.empty() ? "" : ", ", STEP_CURVE_KEYS[k].name, *f, vals[k]);
            changed += buf, *f = vals[k];
        } else {
            snprintf(buf, sizeof buf, "%s%s %g", kept.empty() ? "" : ", ", STEP_CURVE_KEYS[k].name, *f);
            kept += buf;
        }
    }
    *said = "--step-curves " + path + (gpu_type.empty() ? "" : " (measured on " + gpu_type + ")") + ": " +
            (changed.empty() ? "changed nothing" : changed) + (kept.empty() ? "" : "; unchanged: " + kept);
    return true;
}

// What one link moves, ring collectives and sends: bandwidth (bytes/s, after the efficiency) and the
// per-step latency of a group of `members` ranks of which `per_node` share a node.
struct StepLink {
    double bw = 0, latency = 0;
    bool inter_node = false;
};
static inline StepLink step_link(const StepHw* hw, int members, int per_node) {
    StepLink l;
    if (members <= per_node) {
        l.bw = hw->gpu.nvlink_bw * hw->curves.nvlink_eff, l.latency = STEP_NVLINK_LATENCY_S;
        return l;
    }
    // a ring that leaves the node crosses it through the NICs of the group's members on that node
    l.inter_node = true;
    l.bw = std::min(hw->gpu.nvlink_bw * hw->curves.nvlink_eff, per_node * hw->gpu.ib_bw * hw->curves.ib_eff);
    l.latency = STEP_IB_LATENCY_S;
    return l;
}
// Ring collectives over n ranks of `bytes` (the whole buffer): all-reduce moves 2(n−1)/n of it per
// rank in 2(n−1) steps, reduce-scatter and all-gather (n−1)/n in n−1 steps.
static inline double step_allreduce_s(const StepLink* l, int n, double bytes) {
    return n <= 1 ? 0 : 2.0 * (n - 1) / n * bytes / l->bw + 2.0 * (n - 1) * l->latency;
}
static inline double step_gather_s(const StepLink* l, int n, double bytes) {
    return n <= 1 ? 0 : 1.0 * (n - 1) / n * bytes / l->bw + (n - 1) * l->latency;
}

// ---- kernels -------------------------------------------------------------------------------------------
static inline double step_mem_s(const StepHw* hw, double bytes) { return bytes / (hw->gpu.hbm_bw * hw->curves.mem_eff); }
// The largest power of two (at most `cap`) dividing a dimension of `elems` elements of `esize` bytes.
static inline int step_align_bytes(double elems, double esize, int cap) {
    long long b = (long long)std::llround(elems * esize);
    int a = 1;
    while (a < cap && b % (2 * a) == 0) a *= 2;
    return a;
}
// How much longer a GEMM takes when its least aligned dimension falls short of the GPU's
// align_bytes: each halving below it costs STEP_GEMM_MISALIGN_COST of the aligned time. The
// requirement is the tensor cores': --fp32's products run on the CUDA cores, not modelled here.
static inline double step_gemm_align_factor(const StepHw* hw, double m, double n, double k, double esize) {
    if (esize > 2) return 1;
    int cap = hw->gpu.align_bytes;
    int a = std::min(step_align_bytes(m, esize, cap), std::min(step_align_bytes(n, esize, cap), step_align_bytes(k, esize, cap)));
    return 1 + STEP_GEMM_MISALIGN_COST * std::log2((double)cap / a);
}
// A (batch of) m×k by k×n product, 2-byte operands (4 under --fp32) and output: the roofline of its
// FLOPs at the shape's share of the GEMM rate (less for a misaligned shape) and its bytes.
static inline double step_gemm_s(const StepHw* hw, double m, double n, double k, double batch, double esize) {
    double d = std::min(m, std::min(n, k));
    double eff = hw->gpu.gemm_eff * d / (d + STEP_GEMM_HALF_DIM);
    double flops = 2 * m * n * k * batch, bytes = esize * (m * k + k * n + m * n) * batch;
    return std::max(flops / (hw->peak * eff) * step_gemm_align_factor(hw, m, n, k, esize), step_mem_s(hw, bytes)) + hw->curves.kernel_gap_s;
}

// One micro-batch through one layer on one TP rank: seconds of forward and backward (the recomputed
// forward costs `fwd` again), the TP all-reduces' seconds per forward and per backward, and FLOPs.
struct StepLayer {
    double fwd = 0, bwd = 0, tp_fwd = 0, tp_bwd = 0;
    double flops_fwd = 0, flops_bwd = 0;
};

// The attention's products and score traffic (per TP rank: NH/T heads), forward and backward.
static inline void step_attention(const StepHw* hw, const GPTConfig* g, double b, double s, int tp, bool flash, double es,
                                  StepLayer* o) {
    double heads = (double)g->num_heads / tp, hs = (double)g->channels / g->num_heads, bh = b * heads;
    double io = es * b * s * (g->channels / (double)tp);  // one of q, k, v, out, dout... (B, T, C/T)
    if (flash) {  // 2 causal half-products forward, 5 backward (S again, dP, dV, dK, dQ)
        double half = 2 * bh * (s * s / 2) * hs;
        o->flops_fwd += 2 * half, o->flops_bwd += 5 * half;
        o->fwd += std::max(2 * half / (hw->peak * hw->curves.flash_fwd_eff), step_mem_s(hw, 4 * io + 4 * bh * s)) + hw->curves.kernel_gap_s;
        double dq_chain = 8.0 * b * s * (g->channels / (double)tp) * (s / 128.0);  // the ordered dQ's fp32 partial sums
        o->bwd += std::max(5 * half / (hw->peak * hw->curves.flash_bwd_eff), step_mem_s(hw, 8 * io + 8 * bh * s + dq_chain)) + 2 * hw->curves.kernel_gap_s;
        return;
    }
    // GEMM path: Q·Kᵀ and P·V forward; dout·Vᵀ, Pᵀ·dout, dS·K, dSᵀ·Q backward, batched over B·NH/T
    // heads; the T×T traffic per score, in elements of the storage type (the products write and read
    // whole blocks, the row kernels the causal half): forward S written and half read, the
    // probabilities written and read by P·V (3.5); backward dP written, the probabilities read by
    // Pᵀ·dout, the dS rows' halves of dP, the probabilities and dS, dS read twice (5.5): 18 bytes
    // per score at 2 bytes each. Plus the head-major copies of q, k, v.
    double full = 2 * bh * s * s * hs;
    o->flops_fwd += 2 * full, o->flops_bwd += 4 * full;
    double qk = step_gemm_s(hw, s, s, hs, bh, es), pv = step_gemm_s(hw, s, hs, s, bh, es);
    o->fwd += qk + pv + step_mem_s(hw, 3.5 * es * bh * s * s + 6 * io) + 2 * hw->curves.kernel_gap_s;
    o->bwd += 2 * qk + 2 * pv + step_mem_s(hw, 5.5 * es * bh * s * s + 6 * io) + 2 * hw->curves.kernel_gap_s;
}

// --attention-impl auto on a GPU (train_gpt.cu trainer_attention_auto): one layer's attention of a
// micro-batch of (b, s) on a TP rank, forward + backward, on each path, as step_attention costs it.
// On an H200 (docs/gpu.md) it orders the paths as the measured steps did: flash faster at head size
// 64 (T=1024 and 2048), the GEMM path at head size 128 (T=1024).
struct AttnTimes {
    double flash_s, gemm_s;
};
static inline AttnTimes step_attention_times(const StepHw* hw, const GPTConfig* g, double b, double s, int tp, double es) {
    StepLayer f, m;
    step_attention(hw, g, b, s, tp, true, es, &f);
    step_attention(hw, g, b, s, tp, false, es, &m);
    return {f.fwd + f.bwd, m.fwd + m.bwd};
}

// One layer (llmc/model.h gpt_layer_forward/backward): LN1, QKV (column-parallel), attention, the
// projection (row-parallel, then the TP all-reduce), dropout + residual, LN2 (residual fused in),
// FC + GeLU, the MLP projection (row-parallel, all-reduce), dropout + residual. (keel's trainer also
// forms the next layer's LN1, or the final LayerNorm, in that last residual add's pass: per layer one
// (B,T,C) read and one launch fewer than counted here, which is what Megatron's stacks run — about
// 0.14 ms of GPT-2 124M's 45 ms step at B=16, T=1024 on an H100, below the model's resolution.)
static inline StepLayer step_layer(const StepHw* hw, const GPTConfig* g, double b, double s, int tp, bool flash, double es,
                                   const StepLink* tpl) {
    StepLayer o;
    double N = b * s, h = g->channels, hl = h / tp, fl = (double)gpt_ffn(g) / tp;
    double E = N * h * es, Ef = N * fl * es;  // a (B,T,C) activation, replicated over TP; the MLP's (B,T,F/T)
    struct { double n, k; } lin[4] = {{3 * hl, h}, {h, hl}, {fl, h}, {h, fl}};  // qkv, attproj, fc, fcproj: (out, in)
    for (auto& w : lin) {
        o.fwd += step_gemm_s(hw, N, w.n, w.k, 1, es);
        o.bwd += step_gemm_s(hw, N, w.k, w.n, 1, es) + step_gemm_s(hw, w.n, w.k, N, 1, es);  // dinp, dweight
        o.bwd += step_mem_s(hw, N * w.n * es) + hw->curves.kernel_gap_s;                   // the bias gradient's column sums
        o.flops_fwd += 2 * N * w.n * w.k, o.flops_bwd += 4 * N * w.n * w.k;
    }
    step_attention(hw, g, b, s, tp, flash, es, &o);
    bool dropout = g->hidden_dropout > 0, fused_gelu = gpt_gelu_fusion(g, true, hw->gpu.cc) && g->activation == ACT_GELU;
    // LN1 (read, write), LN2 with the residual (read 2, write 2), the last residual (read 2, write 1),
    // GeLU (read, write; in the FC's epilogue when fused: its pre-activation written beside), dropouts
    double fwd_bytes = 2 * E + 4 * E + 3 * E + (fused_gelu ? Ef : 2 * Ef) + (dropout ? 4 * E : 0);
    o.fwd += step_mem_s(hw, fwd_bytes) + (dropout ? 6 : 4) * hw->curves.kernel_gap_s;
    o.bwd += step_mem_s(hw, 2 * fwd_bytes + E) + (dropout ? 8 : 6) * hw->curves.kernel_gap_s;  // every pass reads dout too
    o.tp_fwd = 2 * step_allreduce_s(tpl, tp, N * h * es);
    o.tp_bwd = 2 * step_allreduce_s(tpl, tp, N * h * es);
    return o;
}

// ---- a stage, a step -----------------------------------------------------------------------------------
struct StepBreakdown {
    double compute = 0, recompute = 0, tp_comm = 0, pp_comm = 0, dp_comm = 0, bubble = 0, optimizer = 0;  // seconds
    double stack = 0;  // --software-stack's measured overhead over the parts above (0 for keel)
};
struct StepPlan {
    double step_s = 0, tokens_per_s = 0, samples_per_s = 0;
    double tflops_megatron = 0, tflops_exact = 0, mfu = 0;  // per GPU; MFU: model FLOPs (no recompute) / peak
    double flops_exact = 0;                                  // one iteration, all GPUs, as executed (recompute included)
    StepBreakdown br;
    int world = 1, slowest = 0, slowest_layers = 0;
    double stage_mb_s = 0;  // the slowest stage's seconds per micro-batch (forward + backward + its exposed communication)
    bool flash = false;
    StackSpec stack = STEP_STACKS[0];
};

// What the planner needs beyond the model and the layout.
struct StepOptions {
    double esize = 2;          // bytes of an activation or compute weight: 2 (bf16/fp16), 4 (--fp32)
    bool overlap_dp = true;    // --grad-bucket-mb > 0: the reduce-scatter runs behind the last backward
    bool dropout = false;
    StackSpec stack = STEP_STACKS[0];  // --software-stack
};

// One stage's seconds per micro-batch, split as the breakdown is, and its FLOPs per micro-batch (one TP rank).
struct StepStage {
    double comp = 0, rec = 0, tp = 0, pp = 0, bwd_window = 0, flops = 0;
    double total() const { return comp + rec + tp + pp; }
};

static inline StepStage step_stage(const StepHw* hw, const GPTConfig* g, const PlanLayout* l, int st, const StepLayer* ly,
                                   const StepLink* tpl, const StepLink* ppl, double es) {
    StepStage o;
    int layers = gpt_stage_layers_of(g, l->pp, st);
    bool first = st == 0, last = st == l->pp - 1, ckpt = l->checkpoint_activations;
    double N = (double)l->micro_batch * l->seq, h = g->channels, E = N * h * es;
    o.comp = layers * (ly->fwd + ly->bwd);
    o.rec = ckpt ? layers * ly->fwd : 0;
    o.tp = layers * (ly->tp_fwd + ly->tp_bwd + (ckpt ? ly->tp_fwd : 0));
    o.flops = layers * (ly->flops_fwd * (ckpt ? 2 : 1) + ly->flops_bwd);
    if (first) {  // lookup (+ embedding LayerNorm), positions, dropout; the word-embedding gradient's scatter
        o.comp += step_mem_s(hw, 4 * E + 6 * E + 2 * N * h * 4) + 6 * hw->curves.kernel_gap_s;
        o.tp += step_allreduce_s(tpl, l->tp, E);  // the vocabulary-parallel lookup's sum
    }
    if (last) {  // final LayerNorm, logits (column-parallel over the vocabulary), the fused classifier, dinp, dW
        GPTConfig rank = *g;
        rank.tp_size = l->tp;
        double Vl = (double)gpt_vocab_rows(&rank) / l->tp;
        o.comp += step_gemm_s(hw, N, Vl, h, 1, es) + step_gemm_s(hw, N, h, Vl, 1, es) + step_gemm_s(hw, Vl, h, N, 1, es);
        o.comp += step_mem_s(hw, 3 * N * Vl * es + 5 * E) + 4 * hw->curves.kernel_gap_s;
        o.flops += 6 * N * Vl * h;
        o.tp += step_allreduce_s(tpl, l->tp, E) + 3 * step_allreduce_s(tpl, l->tp, N * 4);  // d(lnf); the loss's max, sum, target
    }
    double send = ppl->bw > 0 ? E / ppl->bw + ppl->latency : 0;
    o.pp = ((st > 0) + (st < l->pp - 1)) * send;  // the activation this stage waits for, the gradient it waits for
    o.bwd_window = layers * (ly->bwd + (ckpt ? ly->fwd : 0));
    return o;
}

// The step: the slowest stage paces M micro-batches, the others' forward and backward fill the warm-up
// and cool-down once; then the data-parallel reduction's exposed part, the ZeRO all-gather, the tied
// embedding's sum, the optimizer.
static inline StepPlan step_predict(const StepHw* hw, const GPTConfig* g, const PlanLayout* l, const StepOptions* opt) {
    StepPlan p;
    p.world = l->tp * l->pp * l->dp;
    int gpn = hw->gpus_per_node;
    double es = opt->esize;
    p.flash = gpt_attention_flash(g, (size_t)es, true, hw->gpu.cc);
    StepLink tpl = step_link(hw, l->tp, std::min(l->tp, gpn));
    StepLink ppl = step_link(hw, 2, l->tp * l->dp * l->pp <= gpn ? 2 : 1);  // a pipeline spanning nodes: some sends cross
    StepLink dpl = step_link(hw, l->dp, std::max(1, std::min(l->dp, gpn / l->tp)));
    StepLayer ly = step_layer(hw, g, (double)l->micro_batch, l->seq, l->tp, p.flash, es, &tpl);
    ParamTable pt;
    param_table_build(&pt, g);
    double M = (double)l->micro_batches, sum = 0, worst = -1, dp_worst = 0, opt_worst = 0, flops = 0;
    StepStage slow;
    for (int st = 0; st < l->pp; st++) {
        StepStage s = step_stage(hw, g, l, st, &ly, &tpl, &ppl, es);
        sum += s.total();
        flops += s.flops;
        if (s.total() > worst) worst = s.total(), slow = s, p.slowest = st;
        bool first = st == 0, last = st == l->pp - 1;
        double n = (double)plan_stage_params(&pt, gpt_stage_layers_of(g, l->pp, st), g->num_layers, first, l->pp == 1 || last, l->tp);
        double rs = step_gather_s(&dpl, l->dp, 4 * n);
        double dp = (opt->overlap_dp ? std::max(0.0, rs - s.bwd_window) : rs) +
                    step_gather_s(&dpl, l->dp, l->zero_stage == 1 ? es * n : 4 * n);  // ZeRO-1: the weights; ZeRO-0: the gradients
        dp_worst = std::max(dp_worst, dp);
        double shard = l->zero_stage == 1 ? n / l->dp : n;
        opt_worst = std::max(opt_worst, step_mem_s(hw, shard * (l->adam8bit ? STEP_ADAM8BIT_BYTES_PER_PARAM : STEP_ADAM_BYTES_PER_PARAM)));
    }
    p.slowest_layers = gpt_stage_layers_of(g, l->pp, p.slowest);
    p.stage_mb_s = worst;
    p.br.compute = M * slow.comp;
    p.br.recompute = M * slow.rec;
    p.br.tp_comm = M * slow.tp;
    p.br.pp_comm = M * slow.pp;
    if (l->pp > 1) {  // the tied word embedding's fp32 gradient, summed by the first and last stage
        GPTConfig rank = *g;
        rank.tp_size = l->tp;
        StepLink emb = step_link(hw, 2, l->tp * l->dp * l->pp <= gpn ? 2 : 1);
        p.br.pp_comm += step_allreduce_s(&emb, 2, 4.0 * gpt_vocab_rows(&rank) / l->tp * g->channels);
    }
    p.br.bubble = sum - worst;
    p.br.dp_comm = dp_worst;
    p.br.optimizer = opt_worst;
    const StepBreakdown& b = p.br;
    double modelled = b.compute + b.recompute + b.tp_comm + b.pp_comm + b.dp_comm + b.bubble + b.optimizer;
    p.stack = opt->stack;
    p.br.stack = modelled * (opt->stack.overhead - 1);
    p.step_s = modelled + b.stack;
    double gbs = M * l->micro_batch * l->dp;
    p.samples_per_s = gbs / p.step_s;
    p.tokens_per_s = p.samples_per_s * l->seq;
    p.flops_exact = flops * M * l->tp * l->dp;
    p.tflops_exact = p.flops_exact / (p.step_s * p.world * 1e12);
    p.tflops_megatron = log_tflops((int64_t)gbs, l->seq, g->num_layers, g->channels, g->padded_vocab_size, l->checkpoint_activations,
                                   p.step_s, p.world);
    p.mfu = log_tflops((int64_t)gbs, l->seq, g->num_layers, g->channels, g->padded_vocab_size, false, p.step_s, p.world) * 1e12 / hw->peak;
    return p;
}

// ---- output --------------------------------------------------------------------------------------------
static inline std::string step_duration(double s) {
    char buf[64];
    if (s < 120) snprintf(buf, sizeof buf, "%.1f s", s);
    else if (s < 7200) snprintf(buf, sizeof buf, "%.1f min", s / 60);
    else if (s < 3 * 86400) snprintf(buf, sizeof buf, "%.1f h", s / 3600);
    else snprintf(buf, sizeof buf, "%.1f days", s / 86400);
    return buf;
}

// The iterations the run asks for: --train-iters, or --train-samples / the global batch, whichever is
// set, shortened by --train-tokens when that stops it first; 0: none given.
static inline int64_t step_run_iterations(int64_t train_iters, int64_t train_samples, int64_t train_tokens, int64_t gbs, int seq) {
    int64_t it = train_iters > 0 ? train_iters : train_samples > 0 ? (train_samples + gbs - 1) / gbs : 0;
    if (train_tokens > 0) {
        int64_t by_tokens = (train_tokens + gbs * seq - 1) / (gbs * seq);
        it = it > 0 ? std::min(it, by_tokens) : by_tokens;
    }
    return it;
}

static inline void step_print_breakdown(FILE* out, const StepBreakdown* b, double step, const char* indent) {
    auto pc = [&](double x) { return 100.0 * x / step; };
    fprintf(out, "%scompute %.3g s (%.1f%%) | recompute %.3g s (%.1f%%) | exposed TP communication %.3g s (%.1f%%) | PP "
            "communication %.3g s (%.1f%%) | DP communication %.3g s (%.1f%%) | pipeline bubble %.3g s (%.1f%%) | optimizer %.3g s (%.1f%%)",
            indent, b->compute, pc(b->compute), b->recompute, pc(b->recompute), b->tp_comm, pc(b->tp_comm), b->pp_comm, pc(b->pp_comm),
            b->dp_comm, pc(b->dp_comm), b->bubble, pc(b->bubble), b->optimizer, pc(b->optimizer));
    if (b->stack != 0) fprintf(out, " | the stack's measured overhead %.3g s (%.1f%%)", b->stack, pc(b->stack));
    fprintf(out, "\n");
}

static inline void step_print(FILE* out, const StepPlan* p, const StepHw* hw, const PlanLayout* l, int64_t iterations) {
    int nodes = (p->world + hw->gpus_per_node - 1) / hw->gpus_per_node;
    fprintf(out, "step time (a model: docs/operations.md#the-step-time-how-long-an-iteration-takes-and-where-the-time-goes): %d x %s on %d node%s of %d (one way: intra-node %.0f GB/s, "
            "inter-node %.1f GB/s per GPU), %s attention, %s's implementation (x%.2f)\n", p->world, hw->gpu.name, nodes, nodes == 1 ? "" : "s",
            hw->gpus_per_node, hw->gpu.nvlink_bw / 1e9, hw->gpu.ib_bw / 1e9, p->flash ? "flash" : "gemm", p->stack.name, p->stack.overhead);
    fprintf(out, "  %.4g s/iteration | %.0f tokens/s | %.4g samples/s | %.1f TFLOP/s per GPU (Megatron's formula, as the log line) "
            "| %.1f TFLOP/s per GPU (keel's exact count) | MFU %.1f%% of %.0f TFLOP/s\n", p->step_s, p->tokens_per_s, p->samples_per_s,
            p->tflops_megatron, p->tflops_exact, 100 * p->mfu, hw->peak / 1e12);
    step_print_breakdown(out, &p->br, p->step_s, "  where the time goes: ");
    fprintf(out, "  the pace: pipeline stage %d (%d layers) takes %.4g s per micro-batch, x %lld micro-batches per iteration\n", p->slowest,
            p->slowest_layers, p->stage_mb_s, (long long)l->micro_batches);
    if (iterations > 0)
        fprintf(out, "  the run: %lld iterations x %.4g s = %s (no evaluation, checkpoints or restarts counted)\n", (long long)iterations,
                p->step_s, step_duration(iterations * p->step_s).c_str());
}

// --dry-run-json: the same figures as named fields. memory: the estimate the verdict uses, with the reserve.
static inline std::string step_json(const StepPlan* p, const StepHw* hw, const PlanLayout* l, double memory, double limit, bool fits,
                                    int64_t iterations) {
    const StepBreakdown& b = p->br;
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"step_seconds\": %s, \"tokens_per_second\": %s, \"samples_per_second\": %s, \"tflops_per_gpu\": %s, "
             "\"tflops_per_gpu_exact\": %s, \"mfu\": %s, \"memory_bytes_per_gpu\": %.0f, \"memory_limit_bytes\": %.0f, \"fits\": %s, "
             "\"gpu_type\": \"%s\", \"gpus_per_node\": %d, \"world_size\": %d, \"attention\": \"%s\", "
             "\"software_stack\": \"%s\", \"stack_overhead\": %s, "
             "\"layout\": {\"tensor_model_parallel_size\": %d, \"pipeline_model_parallel_size\": %d, \"data_parallel_size\": %d, "
             "\"zero_stage\": %d, \"micro_batch_size\": %lld, \"micro_batches\": %lld, \"checkpoint_activations\": %s}, "
             "\"breakdown\": {\"compute\": %s, \"recompute\": %s, \"tp_comm\": %s, \"pp_comm\": %s, \"dp_comm\": %s, \"bubble\": %s, "
             "\"optimizer\": %s, \"stack\": %s}, \"slowest_stage\": %d, \"train_iterations\": %lld, \"train_seconds\": %s}\n",
             json_num(p->step_s).c_str(), json_num(p->tokens_per_s).c_str(), json_num(p->samples_per_s).c_str(),
             json_num(p->tflops_megatron).c_str(), json_num(p->tflops_exact).c_str(), json_num(p->mfu).c_str(), memory, limit,
             fits ? "true" : "false", hw->gpu.name, hw->gpus_per_node, p->world, p->flash ? "flash" : "gemm", p->stack.name,
             json_num(p->stack.overhead).c_str(), l->tp, l->pp, l->dp,
             l->zero_stage, (long long)l->micro_batch, (long long)l->micro_batches, l->checkpoint_activations ? "true" : "false",
             json_num(b.compute).c_str(), json_num(b.recompute).c_str(), json_num(b.tp_comm).c_str(), json_num(b.pp_comm).c_str(),
             json_num(b.dp_comm).c_str(), json_num(b.bubble).c_str(), json_num(b.optimizer).c_str(), json_num(b.stack).c_str(), p->slowest, (long long)iterations,
             iterations > 0 ? json_num(iterations * p->step_s).c_str() : "null");
    return buf;
}

// ---- --search-layout -----------------------------------------------------------------------------------
struct StepCandidate {
    PlanLayout l;
    StepPlan p;
    double memory = 0;  // the estimate with the reserve
};

// Every TP x PP x DP = gpus (TP dividing the heads and the MLP width and at most a node, PP at most the
// layers), micro-batch (a power of two dividing the global batch per DP rank), checkpointing on/off
// and ZeRO stage 0/1 (1 only with DP > 1) whose estimate fits `limit`, fastest first. Keel's even
// layer split (a --pp-partition-method is for the given P).
static inline std::vector<StepCandidate> step_search(const StepHw* hw, const GPTConfig* g0, const PlanLayout* base, int gpus, int64_t gbs,
                                                     const StepOptions* opt, double limit) {
    GPTConfig g = *g0;
    g.pp_counts = nullptr;
    std::vector<StepCandidate> out;
    for (int tp = 1; tp <= std::min(gpus, hw->gpus_per_node); tp++) {
        if (gpus % tp || g.num_heads % tp || gpt_ffn(&g) % tp) continue;
        for (int pp = 1; pp <= std::min(gpus / tp, g.num_layers); pp++) {
            if ((gpus / tp) % pp) continue;
            int dp = gpus / (tp * pp);
            if (gbs % dp) continue;
            for (int64_t mb = 1; mb <= gbs / dp; mb *= 2) {
                if ((gbs / dp) % mb) continue;
                for (int ck = 0; ck < 2; ck++)
                    for (int z = 0; z <= (dp > 1 ? 1 : 0); z++) {
                        StepCandidate c;
                        c.l = *base;
                        c.l.tp = tp, c.l.pp = pp, c.l.dp = dp, c.l.zero_stage = z, c.l.micro_batch = mb;
                        c.l.micro_batches = gbs / (mb * dp), c.l.checkpoint_activations = ck;
                        g.checkpoint_activations = ck;
                        Plan m = plan_compute(&g, &c.l);
                        c.memory = m.total + m.reserve;
                        if (c.memory > limit) continue;
                        c.p = step_predict(hw, &g, &c.l, opt);
                        out.push_back(c);
                    }
            }
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const StepCandidate& a, const StepCandidate& b) { return a.p.step_s < b.p.step_s; });
    return out;
}

// Why the fastest layout beats the flags' one: each part of the breakdown that differs, in seconds.
static inline void step_search_explain(FILE* out, const StepCandidate* best, const StepCandidate* given) {
    const StepBreakdown &a = best->p.br, &b = given->p.br;
    struct { const char* name; double d; } parts[] = {{"compute", b.compute - a.compute}, {"recompute", b.recompute - a.recompute},
        {"TP communication", b.tp_comm - a.tp_comm}, {"PP communication", b.pp_comm - a.pp_comm},
        {"DP communication", b.dp_comm - a.dp_comm}, {"bubble", b.bubble - a.bubble}, {"optimizer", b.optimizer - a.optimizer},
        {"the stack's overhead", b.stack - a.stack}};
    std::string saves, costs;
    char buf[96];
    for (auto& x : parts) {
        if (std::fabs(x.d) < 0.005 * given->p.step_s) continue;  // under half a percent: not a reason
        snprintf(buf, sizeof buf, "%s%s %.3g s", x.d > 0 ? (saves.empty() ? "" : ", ") : (costs.empty() ? "" : ", "), x.name, std::fabs(x.d));
        (x.d > 0 ? saves : costs) += buf;
    }
    fprintf(out, "  why rank 1 is faster (%.4g s vs %.4g s): it saves %s%s%s; its memory %.2f GiB vs %.2f GiB\n", best->p.step_s,
            given->p.step_s, saves.empty() ? "nothing in particular" : saves.c_str(), costs.empty() ? "" : " and spends more on ",
            costs.c_str(), best->memory / (1024.0 * 1024 * 1024), given->memory / (1024.0 * 1024 * 1024));
}

static inline void step_search_print(FILE* out, const std::vector<StepCandidate>& c, const PlanLayout* given, int gpus, int64_t gbs, int top) {
    fprintf(out, "layouts of %d GPUs for a global batch of %lld that fit, fastest first (%zu fit):\n", gpus, (long long)gbs, c.size());
    fprintf(out, "  %4s %4s %4s %4s %5s %4s %6s %11s %9s %6s %9s\n", "rank", "TP", "PP", "DP", "micro", "ckpt", "ZeRO", "s/iteration",
            "TFLOP/s", "MFU", "GiB/GPU");
    int given_rank = -1;
    for (size_t i = 0; i < c.size(); i++) {
        const PlanLayout& l = c[i].l;
        bool is_given = l.tp == given->tp && l.pp == given->pp && l.dp == given->dp && l.micro_batch == given->micro_batch &&
                        l.checkpoint_activations == given->checkpoint_activations && l.zero_stage == given->zero_stage;
        if (is_given) given_rank = (int)i + 1;
        if ((int)i >= top && !is_given) continue;
        fprintf(out, "  %4zu %4d %4d %4d %5lld %4s %6d %11.4g %9.1f %5.1f%% %9.2f%s\n", i + 1, l.tp, l.pp, l.dp, (long long)l.micro_batch,
                l.checkpoint_activations ? "yes" : "no", l.zero_stage, c[i].p.step_s, c[i].p.tflops_megatron, 100 * c[i].p.mfu,
                c[i].memory / (1024.0 * 1024 * 1024), is_given ? "   <- the flags' layout" : "");
        if ((int)i < 3 || is_given) step_print_breakdown(out, &c[i].p.br, c[i].p.step_s, "         ");
    }
    if (given_rank < 0) {
        fprintf(out, "  the flags' layout is not among them (it does not fit, or does not divide %d GPUs)\n", gpus);
        return;
    }
    fprintf(out, "  the flags' layout ranks %d of %zu\n", given_rank, c.size());
    if (given_rank > 1) step_search_explain(out, &c[0], &c[given_rank - 1]);
}
