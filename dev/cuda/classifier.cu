// dev/cuda/classifier.cu — kernel lab: the fused classifier, softmax + cross-entropy over the padded
// vocabulary with its gradient in the same pass (llmc/cuda/classifier.cuh against cpu/classifier.h):
//   classifier_forward(losses, logits, targets, N, V, Vp, dloss): losses, and for dloss ≠ 0 the
//   logits buffer overwritten with dlogits = (p - [j == target])·dloss (the probabilities are never
//   stored). dloss = 0 (evaluation) computes the losses alone.
// Legend: N rows (B*T), V real vocabulary, Vp padded; logits/dlogits (N,Vp) bf16 in place; losses
// (N) fp32; targets (N) int.
// Variants (each timed twice: training, dloss = 1/N, and evaluation, dloss = 0):
//   0 naive: one thread per row (max, Σ exp, gradient writes in sequence; neighbouring threads read
//            addresses Vp apart).
//   1 keel:  keel_cuda::classifier_forward (16-byte groups, the online state rescaled once a group,
//            exp by exp2_approx).
//   2 per column: the same 16-byte loads with the online state and expf per column, the kernel as an
//            H200 first timed it (0.944 ms at B=8: issue-bound, not memory-bound).
// Memory-bound where the instructions allow: GB/s is the figure.
// Checks: the gradient element by element with a pure relative bound (floor 0: a gradient of a
// probability of 2e-5 that is wrong by 2e-5 fails), 2e-2 for bf16 values, on rows
// that include confident targets (the target's logit +12: p ≈ 0.99, where (p - 1) must be formed in
// fp32 to keep its bits). Losses fp32, 1e-4 relative to |want| + rms: a confident row's loss, ~2e-4,
// is log Σ - (l_t - max) with both terms O(1), so its fp32 error is absolute, not relative.
#include "llmc/cpu/classifier.h"
#include "llmc/cuda/classifier.cuh"
#include "dev/cuda/lab.h"

typedef __nv_bfloat16 bf16;

// ---- variant 1: keel's launcher (the one place to adapt when its arguments change) ---------------
static void keel_classifier(float* losses, bf16* logits, const int* targets, int N, int V, int Vp, float dloss) {
    keel_cuda::classifier_forward(losses, logits, targets, N, V, Vp, dloss);
}
static void per_column_classifier(float* losses, bf16* logits, const int* targets, int N, int V, int Vp, float dloss) {
    keel_cuda::classifier_forward<bf16, false>(losses, logits, targets, N, V, Vp, dloss);
}

// ---- variant 0: naive ----------------------------------------------------------------------------
using keel_cuda::from_f32;
using keel_cuda::to_f32;
__global__ void classifier_naive_kernel(float* losses, bf16* logits, const int* targets, int N, int V, int Vp, float dloss) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    bf16* p = logits + (size_t)n * Vp;
    int t = targets[n];
    float maxv = -INFINITY, sum = 0, lt = t >= 0 && t < V ? to_f32(p[t]) : 0.0f;
    for (int j = 0; j < V; j++) maxv = fmaxf(maxv, to_f32(p[j]));
    float rest = 0;  // Σ over j ≠ t: p_t - 1 = -rest/sum keeps its bits when p_t ≈ 1
    for (int j = 0; j < V; j++) {
        float e = expf(to_f32(p[j]) - maxv);
        sum += e;
        if (j != t) rest += e;
    }
    losses[n] = logf(sum) - (lt - maxv);
    if (dloss == 0.0f) return;
    for (int j = 0; j < Vp; j++) {
        float g = j >= V ? 0.0f : j == t ? -rest / sum * dloss : expf(to_f32(p[j]) - maxv) / sum * dloss;
        p[j] = from_f32<bf16>(g);
    }
}
static void naive_classifier(float* losses, bf16* logits, const int* targets, int N, int V, int Vp, float dloss) {
    KEEL_LAUNCH(classifier_naive_kernel, keel_cuda::ceil_div(N, 128), 128, 0, MAIN_STREAM)(losses, logits, targets, N, V, Vp, dloss);
    CUDA_CHECK_LAUNCH();
}

int main(int argc, char** argv) {
    LabArgs a = lab_parse(argc, argv, "fused classifier: softmax + cross-entropy + gradient (llmc/cuda/classifier.cuh)");
    lab_print_device(a);
    int N = a.B * a.T, V = a.V, Vp = a.Vp;
    size_t NV = (size_t)N * Vp;
    float dloss = 1.0f / N;  // each row's weight in the mean loss
    std::vector<int> targets(N);
    for (int n = 0; n < N; n++) targets[n] = (int)rng_below((uint64_t)V, 2024, 77, 3, (uint64_t)n);
    std::vector<float> logits = lab_randn(NV, 1, 2.0);
    for (int n = 0; n < N; n += 4) logits[(size_t)n * Vp + targets[n]] += 12.0f;  // confident rows: p ≈ 0.99
    for (int n = 0; n < N; n++)
        for (int j = V; j < Vp; j++) logits[(size_t)n * Vp + j] = 0.0f;  // the padding columns (zero weights)
    logits = lab_round<bf16>(logits);
    std::vector<float> dlogits = logits, losses(N);
    printf("CPU reference ...\n");
    fflush(stdout);
    classifier_forward(losses.data(), dlogits.data(), targets.data(), N, V, Vp, dloss);

    int* d_targets = lab_upload(targets);
    bf16 *d_logits0 = lab_upload(lab_to<bf16>(logits)), *d_buf = lab_upload(lab_to<bf16>(logits));  // pristine, in place
    float* d_losses = lab_upload(std::vector<float>(N));
    std::string shape = " N=" + std::to_string(N) + " (B·T) V=" + std::to_string(V) + " Vp=" + std::to_string(Vp) + " bf16";
    int failed = 0;

    LabOp train;
    train.title = "classifier_forward, training (dloss=1/N: losses + dlogits)" + shape;
    train.bytes = 2.0 * NV * 2 + 4.0 * N * 2;  // logits read, dlogits written; targets read, losses written
    train.reset = [&] { lab_restore(d_buf, d_logits0, NV); };
    train.check = [&] {
        return std::vector<LabCheck>{lab_compare("dlogits", lab_from(lab_download(d_buf, NV)), dlogits, 2e-2, 0.0),
                                     lab_compare("losses", lab_download(d_losses, N), losses, 1e-4, 1.0)};
    };
    train.variants = {{0, "naive", [&] { naive_classifier(d_losses, d_buf, d_targets, N, V, Vp, dloss); }},
                      {1, "keel", [&] { keel_classifier(d_losses, d_buf, d_targets, N, V, Vp, dloss); }},
                      {2, "per column", [&] { per_column_classifier(d_losses, d_buf, d_targets, N, V, Vp, dloss); }}};
    failed += lab_run(a, train);

    LabOp eval;
    eval.title = "classifier_forward, evaluation (dloss=0: losses only)" + shape;
    eval.bytes = 2.0 * NV + 4.0 * N * 2;  // logits read; targets read, losses written
    eval.reset = train.reset;
    eval.check = [&] { return std::vector<LabCheck>{lab_compare("losses", lab_download(d_losses, N), losses, 1e-4, 1.0)}; };
    eval.variants = {{0, "naive", [&] { naive_classifier(d_losses, d_buf, d_targets, N, V, Vp, 0.0f); }},
                     {1, "keel", [&] { keel_classifier(d_losses, d_buf, d_targets, N, V, Vp, 0.0f); }},
                     {2, "per column", [&] { per_column_classifier(d_losses, d_buf, d_targets, N, V, Vp, 0.0f); }}};
    failed += lab_run(a, eval);
    return lab_finish(failed);
}
