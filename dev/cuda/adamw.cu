// dev/cuda/adamw.cu — kernel lab: the AdamW update over every parameter (llmc/cuda/adamw.cuh's
// adamw_update against cpu/adamw.h):
//   m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²;  p -= lr·((m/bc1) / (sqrt(v/bc2) + eps) + wd·p)
// Legend: n parameters, the GPT-2 count for the flags' shape with 12 layers:
//   n = Vp·C + T·C + 12·(12·C² + 13·C) + 2·C  (124,475,904 at the defaults).
// p, g, m, v (n) fp32.
// Variants:
//   1 keel: keel_cuda::adamw_update. (No naive variant: one thread per element is already the simplest
//           shape; candidates are 128-bit loads, writing the bf16 copy in the same pass, and one
//           launch for every tensor.)
// Memory-bound: GB/s counts p, g, m, v read and p, m, v written (28 bytes per parameter).
// Check: the kernel spells the CPU's rounding (no FMA contraction), so the results should be equal;
// the bound, 1e-6 relative, leaves room for a variant that contracts one multiply-add.
#include "llmc/cpu/adamw.h"
#include "llmc/cuda/adamw.cuh"
#include "dev/cuda/lab.h"

// ---- variant 1: keel's launcher (the one place to adapt when its arguments change) ---------------
struct LabAdamHyper { float lr = 6e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f, bc1, bc2; };
static void keel_adamw(float* p, const float* g, float* m, float* v, int64_t n, const LabAdamHyper& h) {
    keel_cuda::adamw_update(p, g, m, v, n, h.lr, h.beta1, h.beta2, h.eps, h.wd, h.bc1, h.bc2);
}

int main(int argc, char** argv) {
    LabArgs a = lab_parse(argc, argv, "AdamW update (llmc/cuda/adamw.cuh, adamw_update)");
    lab_print_device(a);
    int64_t C = a.C, n = (int64_t)a.Vp * C + (int64_t)a.T * C + 12 * (12 * C * C + 13 * C) + 2 * C;
    LabAdamHyper h;
    int step = 10;  // a step past the first: the bias corrections are not 1-β
    h.bc1 = 1.0f - std::pow(h.beta1, (float)step);
    h.bc2 = 1.0f - std::pow(h.beta2, (float)step);
    std::vector<float> p0 = lab_randn(n, 1, 0.02), g = lab_randn(n, 2, 1e-3), m0 = lab_randn(n, 3, 1e-4), v0 = lab_randn(n, 4, 1e-6);
    for (float& x : v0) x = x * x;  // the second moment is non-negative
    std::vector<float> p = p0, m = m0, v = v0;
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, h.lr, h.beta1, h.beta2, h.eps, h.wd, h.bc1, h.bc2);

    float *d_p = lab_upload(p0), *d_g = lab_upload(g), *d_m = lab_upload(m0), *d_v = lab_upload(v0);
    float *d_p0 = lab_upload(p0), *d_m0 = lab_upload(m0), *d_v0 = lab_upload(v0);

    LabOp op;
    op.title = "adamw_update n=" + std::to_string(n) + " fp32 (GPT-2 parameter count for C, Vp, T; 12 layers)";
    op.bytes = 28.0 * n;
    op.reset = [&] {
        lab_restore(d_p, d_p0, n);
        lab_restore(d_m, d_m0, n);
        lab_restore(d_v, d_v0, n);
    };
    op.check = [&] {
        return std::vector<LabCheck>{lab_compare("p", lab_download(d_p, n), p, 1e-6, 0.0),
                                     lab_compare("m", lab_download(d_m, n), m, 1e-6, 0.0),
                                     lab_compare("v", lab_download(d_v, n), v, 1e-6, 0.0)};
    };
    op.variants = {{1, "keel", [&] { keel_adamw(d_p, d_g, d_m, d_v, n, h); }}};
    return lab_finish(lab_run(a, op));
}
