// test_gpu_spec — --dry-run's GPU table (llmc/step_model.h): the flag's choices are the table's names
// (one source), each row is consistent with the datasheet relations it encodes, and --gpu-type auto
// maps the device names CUDA reports to their rows.
#include "llmc/flags.h"
#include "llmc/step_model.h"
#include "test/unit_check.h"

int main() {
    const Flag* f = nullptr;
    for (int i = 0; i < NUM_FLAGS; i++)
        if (std::string(FLAGS[i].name) == "gpu-type") f = &FLAGS[i];
    CHECK(f && f->choices && gpu_spec_choices() == f->choices, "--gpu-type choices '%s' vs the table's '%s'", f && f->choices ? f->choices : "",
          gpu_spec_choices().c_str());
    const Flag* st = nullptr;
    for (int i = 0; i < NUM_FLAGS; i++)
        if (std::string(FLAGS[i].name) == "software-stack") st = &FLAGS[i];
    CHECK(st && st->choices && step_stack_choices() == st->choices, "--software-stack choices '%s' vs the table's '%s'",
          st && st->choices ? st->choices : "", step_stack_choices().c_str());
    // --step-curves: the shares start as the named constants; each key names one field of its own, and
    // the flag's help lists every key (the table is the one source)
    StepHw hw;
    CHECK(hw.curves.flash_fwd_eff == STEP_FLASH_FWD_EFF && hw.curves.flash_bwd_eff == STEP_FLASH_BWD_EFF && hw.curves.mem_eff == STEP_MEM_EFF &&
              hw.curves.nvlink_eff == STEP_NVLINK_EFF && hw.curves.ib_eff == STEP_IB_EFF && hw.curves.kernel_gap_s == STEP_KERNEL_GAP_S,
          "StepCurves' defaults are not the named constants");
    const Flag* sc = nullptr;
    for (int i = 0; i < NUM_FLAGS; i++)
        if (std::string(FLAGS[i].name) == "step-curves") sc = &FLAGS[i];
    for (int i = 0; i < NUM_STEP_CURVE_KEYS; i++) {
        CHECK(sc && std::string(sc->help).find(STEP_CURVE_KEYS[i].name) != std::string::npos, "--step-curves' help lacks %s", STEP_CURVE_KEYS[i].name);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(STEP_CURVE_KEYS[i].name, STEP_CURVE_KEYS[j].name) != 0 && STEP_CURVE_KEYS[i].field(&hw) != STEP_CURVE_KEYS[j].field(&hw),
                  "curve keys %s and %s: the same name or field", STEP_CURVE_KEYS[i].name, STEP_CURVE_KEYS[j].name);
    }
    for (const StackSpec& x : STEP_STACKS) CHECK(x.overhead >= 1 && x.overhead < 2, "%s: overhead %g", x.name, x.overhead);
    for (const GpuSpec& g : GPU_SPECS) {
        // tensor cores at 8-16x the fp32 rate; HBM 0.9-5 TB/s; the link inside a node faster than the NIC
        CHECK(g.peak16 >= 7.9 * g.peak32 && g.peak16 <= 16 * g.peak32, "%s: fp16/bf16 vs fp32 peak", g.name);
        CHECK(g.hbm_bw >= 0.9e12 && g.hbm_bw <= 5e12 && g.mem_gib >= 32 && g.nvlink_bw > g.ib_bw, "%s: bandwidths", g.name);
        CHECK(g.gemm_eff > 0.5 && g.gemm_eff < 0.95, "%s: GEMM share of peak %g", g.name, g.gemm_eff);
        CHECK(g.align_bytes >= 16 && g.align_bytes <= 128 && (g.align_bytes & (g.align_bytes - 1)) == 0, "%s: alignment %d", g.name, g.align_bytes);
        CHECK(gpu_spec_find(g.name) == &g, "%s: found by its name", g.name);
    }
    struct { const char* device; double gib; const char* want; } cases[] = {
        {"Tesla V100-SXM2-32GB", 31.7, "v100-32gb"},     {"NVIDIA A100-SXM4-40GB", 39.4, "a100-40gb"},
        {"NVIDIA A100-SXM4-80GB", 79.2, "a100-80gb"},    {"NVIDIA A100 80GB PCIe", 79.2, "a100-80gb"},
        {"NVIDIA A100-PCIE-40GB", 39.4, "a100-40gb"},    {"NVIDIA H100 80GB HBM3", 79.6, "h100-sxm"},
        {"NVIDIA H100 PCIe", 79.6, "h100-pcie"},         {"NVIDIA H200", 140.4, "h200"},
        {"NVIDIA GeForce RTX 4090", 24, nullptr},
    };
    for (auto& c : cases) {
        const GpuSpec* g = gpu_spec_match(c.device, c.gib * (1 << 30));
        CHECK(c.want ? g && std::string(g->name) == c.want : !g, "'%s' -> %s, want %s", c.device, g ? g->name : "none", c.want ? c.want : "none");
    }
    printf("%s (%d GPU types, %zu device names)\n", fails ? "FAIL" : "PASS", NUM_GPU_SPECS, sizeof cases / sizeof cases[0]);
    return fails != 0;
}
