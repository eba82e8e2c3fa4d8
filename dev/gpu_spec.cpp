// dev/gpu_spec.cpp — one row of the step model's GPU table (llmc/step_model.h GPU_SPECS) and the
// model's efficiencies as `key value` lines, so a script reads the peaks from the table --dry-run plans
// with instead of keeping a copy: scripts/step_curves.sh turns the kernel lab's rates into shares of them.
//
//   build/gpu_spec TYPE            the row of --gpu-type TYPE (v100-32gb, a100-80gb, h200, ...)
//   build/gpu_spec --match NAME MIB   the row --gpu-type auto picks for a device CUDA (or nvidia-smi)
//                                     names NAME with MIB MiB of memory
//
// Lines: gpu_type, peak16_flops, peak32_flops, hbm_bytes_per_s, mem_gib, nvlink_bytes_per_s,
// ib_bytes_per_s, align_bytes, gemm_half_dim, then the model's shares as the curves file names them
// (gemm_eff, flash_fwd_eff, ...). Exit 2 with one error line: no such row.
#include "llmc/step_model.h"

static void print_row(const GpuSpec* g) {
    StepHw hw;
    hw.gpu = *g;
    printf("gpu_type %s\npeak16_flops %.6g\npeak32_flops %.6g\nhbm_bytes_per_s %.6g\nmem_gib %.6g\n", g->name, g->peak16, g->peak32,
           g->hbm_bw, g->mem_gib);
    printf("nvlink_bytes_per_s %.6g\nib_bytes_per_s %.6g\nalign_bytes %d\ngemm_half_dim %.6g\n", g->nvlink_bw, g->ib_bw, g->align_bytes,
           STEP_GEMM_HALF_DIM);
    for (const StepCurveKey& k : STEP_CURVE_KEYS) printf("%s %.6g\n", k.name, *k.field(&hw));
}

int main(int argc, char** argv) {
    const GpuSpec* g = nullptr;
    if (argc == 2 && strcmp(argv[1], "--match") != 0) {
        g = gpu_spec_find(argv[1]);
        if (!g) return fprintf(stderr, "error: gpu_spec: '%s' is not in the GPU table (%s)\n", argv[1], gpu_spec_choices().substr(5).c_str()), 2;
    } else if (argc == 4 && strcmp(argv[1], "--match") == 0) {
        char* end = nullptr;
        double mib = strtod(argv[3], &end);
        if (end == argv[3] || *end || !(mib > 0)) return fprintf(stderr, "error: gpu_spec --match: memory '%s' is not a size in MiB\n", argv[3]), 2;
        g = gpu_spec_match(argv[2], mib * 1024 * 1024);
        if (!g) return fprintf(stderr, "error: gpu_spec: device '%s' (%s MiB) matches no row of the GPU table\n", argv[2], argv[3]), 2;
    } else {
        fprintf(stderr, "error: usage: %s TYPE | --match DEVICE_NAME MEMORY_MIB\n", argv[0]);
        return 2;
    }
    print_row(g);
    return 0;
}
