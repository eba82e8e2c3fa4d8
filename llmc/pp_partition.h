// pp_partition.h — --pp-partition-method: which transformer layers each pipeline stage holds, as
// DeepSpeed's PipelineModule decides it for Megatron-DeepSpeed's GPTModelPipe.
//
// DeepSpeed does not split the transformer layers: it splits GPTModelPipe's whole list of layer
// specs, in this order (BigScience's megatron/model/gpt_model.py):
//   _to_float16, EmbeddingPipe, <lambda> (transpose), L x ParallelTransformerLayerPipe,
//   <lambda> (transpose back), MixedFusedLayerNorm, EmbeddingPipe (the tied LM head),
//   float16_to_fp32 (only under --fp16/--bf16)
// and a stage holds the specs [parts[s], parts[s+1]). The methods (deepspeed/runtime/pipe/module.py
// _partition_layers, with the deepspeed/runtime/utils.py of BigScience's DeepSpeed):
//   uniform       partition_uniform over the spec count: floor(n/P) specs per stage, the remainder
//                 all on the last stage
//   type:REGEX    weight 1 for each spec whose class or function name matches REGEX (case-insensitive
//                 search), 0 for the rest; partition_balanced over those weights: a binary search for
//                 the smallest bottleneck (eps 1e-3) that _lprobe can fill, then _lprobe's partition.
//                 BigScience: type:transformer, and type:transformer|embedding (the embedding and the
//                 head count as a layer, so the first and last stages take one transformer layer less)
// keel then keeps the transformer layers of each stage. keel's stage model fixes the rest: the
// embedding on the first stage, the final LayerNorm and the head on the last. A partition that
// puts the embedding elsewhere, the head elsewhere, or leaves a stage without a transformer layer
// is refused naming the stage (DeepSpeed would run it; keel's stages cannot hold it).
//   parameters    (Megatron-DeepSpeed's default) is refused: it balances DeepSpeed's per-spec
//                 parameter counts, which keel's fused stages do not reproduce; name a method.
// Unset (keel's default): L/P layers per stage, the earlier stages taking the remainder
// (llmc/parallel.h pipeline_stage_layers).
#pragma once
#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "llmc/common.h"

// GPTModelPipe's spec names for L layers (half: --fp16 or --bf16 adds the trailing cast).
static inline std::vector<std::string> pp_gpt_specs(int L, bool half) {
    std::vector<std::string> s = {"_to_float16", "EmbeddingPipe", "<lambda>"};
    for (int l = 0; l < L; l++) s.push_back("ParallelTransformerLayerPipe");
    for (const char* n : {"<lambda>", "MixedFusedLayerNorm", "EmbeddingPipe"}) s.push_back(n);
    if (half) s.push_back("float16_to_fp32");
    return s;
}

static inline std::vector<int> pp_partition_uniform(int n, int P) {
    std::vector<int> parts(P + 1, 0);
    if (n <= P) {
        for (int p = 0; p <= P; p++) parts[p] = std::min(p, n);
        return parts;
    }
    int chunk = n / P;
    for (int p = 0; p < P; p++) parts[p] = std::min(chunk * p, n);
    parts[P] = n;
    return parts;
}

// DeepSpeed's _lprobe: can P parts of at most `bottleneck` each cover the inclusive prefix sums w?
static inline bool pp_lprobe(const std::vector<double>& w, int P, double bottleneck, std::vector<int>* parts) {
    int n = (int)w.size();
    parts->assign(P + 1, n);
    (*parts)[0] = 0;
    double bsum = bottleneck;
    int chunk = n / P, step = chunk;
    for (int p = 1; p < P; p++) {
        while (step < n && w[step] < bsum) step += chunk;  // jump to the bucket holding the target
        int lo = step - chunk, hi = std::min(step, n);
        (*parts)[p] = (int)(std::lower_bound(w.begin() + lo, w.begin() + hi, bsum) - w.begin());
        if ((*parts)[p] == n) return w[n - 1] - w[(*parts)[p - 1]] < bottleneck;
        bsum = w[(*parts)[p] - 1] + bottleneck;
    }
    return bsum >= w[n - 1];
}

static inline std::vector<int> pp_partition_balanced(const std::vector<double>& weights, int P) {
    int n = (int)weights.size();
    if (n <= P) return pp_partition_uniform(n, P);
    std::vector<double> w = weights;
    for (int i = 1; i < n; i++) w[i] += w[i - 1];
    const double eps = 1e-3;
    double lower = w[n - 1] / P, upper = w[n - 1];
    std::vector<int> parts;
    while (upper > lower + eps) {  // the smallest bottleneck _lprobe can fill
        double mid = lower + (upper - lower) / 2;
        if (pp_lprobe(w, P, mid, &parts)) upper = mid;
        else lower = mid + eps;
    }
    pp_lprobe(w, P, upper, &parts);
    return parts;
}

// The transformer layers of each of the P stages under `method` (exit 2 for a method keel refuses
// or a partition its stages cannot hold); an empty method: keel's split.
static inline std::vector<int> pp_layer_counts(const std::string& method, int L, int P, bool half) {
    std::vector<int> counts(P);
    if (method.empty()) {
        for (int s = 0; s < P; s++) counts[s] = L / P + (s < L % P ? 1 : 0);
        return counts;
    }
    std::vector<std::string> specs = pp_gpt_specs(L, half);
    std::vector<int> parts;
    if (method == "uniform") {
        parts = pp_partition_uniform((int)specs.size(), P);
    } else if (method.compare(0, 5, "type:") == 0) {
        std::regex rx;
        try {
            rx = std::regex(method.substr(5), std::regex::ECMAScript | std::regex::icase);
        } catch (const std::regex_error&) {
            keel_usage_error("--pp-partition-method %s: not a valid regular expression after 'type:'", method.c_str());
        }
        std::vector<double> w(specs.size());
        for (size_t i = 0; i < specs.size(); i++) w[i] = std::regex_search(specs[i], rx) ? 1 : 0;
        parts = pp_partition_balanced(w, P);
    } else if (method == "parameters") {
        keel_usage_error("--pp-partition-method parameters (Megatron-DeepSpeed's default) is not built: keel cannot reproduce DeepSpeed's "
                         "per-module parameter counts; pass type:transformer (BigScience), type:transformer|embedding or uniform");
    } else {
        keel_usage_error("--pp-partition-method %s: keel knows uniform and type:REGEX (DeepSpeed's profile and others are not built)",
                         method.c_str());
    }
    int embed = 1, head = (int)specs.size() - (half ? 2 : 1);  // the EmbeddingPipe specs
    for (int s = 0; s < P; s++) {
        counts[s] = 0;
        for (int i = parts[s]; i < parts[s + 1]; i++) counts[s] += specs[i] == "ParallelTransformerLayerPipe";
        bool has_embed = parts[s] <= embed && embed < parts[s + 1], has_head = parts[s] <= head && head < parts[s + 1];
        if ((has_embed && s != 0) || (has_head && s != P - 1) || counts[s] == 0)
            keel_usage_error("--pp-partition-method %s puts %s on stage %d of %d (L=%d): keel's stages need the embedding first, the head "
                             "last and a transformer layer each; choose another method or --num-layers",
                             method.c_str(), counts[s] == 0 ? "no transformer layer" : has_embed ? "the embedding" : "the head", s, P, L);
    }
    return counts;
}
