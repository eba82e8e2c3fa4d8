// cuda/classifier.cuh — fused softmax + cross-entropy over the (padded) vocabulary; the contract of
// cpu/classifier.h:
//   forward:  probs[n,:V] = softmax(logits[n,:V]) over logits in place, probs[n,V:] = 0,
//             losses[n] = log Σ exp(l - max) - (l_target - max)
//   backward: dlogits[n,j] = (probs[n,j] - [j == target[n]])·dloss in place, j < V; a target
//             outside [0, V) subtracts nothing (vocabulary-parallel: another rank's column)
//   vocabulary-parallel cross-entropy over a rank's (N,Vl) slice whose first Vr columns are real:
//     vocab_parallel_max     rowmax[n] = max_{j<Vr} l[n,j] (-inf for Vr = 0)
//     vocab_parallel_sumexp  l[n,j] ← exp(l[n,j] - rowmax[n]) in place (j < Vr); stats[n] =
//                            (Σ_j exp, the original logit at local target t if 0 ≤ t < Vr else 0)
//     vocab_parallel_finish  probs[n,:Vr] *= 1/Σ, probs[n,Vr:] = 0, losses[n] = log Σ - (l_t - rowmax)
//   (the model all-reduces rowmax by MAX and stats by SUM between the calls; cpu/classifier.h).
// Legend: N rows (B*T), V real vocabulary, Vp padded vocabulary (V ≤ Vp); Vl local columns, Vr ≤ Vl
// of them real. losses, rowmax and stats are fp32 whatever the storage F.
// Forward: one block per row; thread k takes the columns j ≡ k (mod blockDim) in ascending j, for
// the max, the sum and the writes alike, so no thread reads a column another one has overwritten.
// Max and sum are block reductions in a fixed tree (the block size is a function of V alone), so
// the result depends on the inputs only. The exponentials are recomputed in the writing pass rather
// than stored and re-read: a bf16 row would otherwise round each one twice.
// Backward: one thread per (n, j < V), elementwise. fp32 arithmetic whatever the storage F.
// Vocabulary-parallel ops: one block per row as the forward, the block size a function of Vr (of Vl
// for finish), thread k on the columns j ≡ k (mod blockDim) ascending, max and Σ by the fixed-tree
// block reductions. sumexp sums the fp32 exponentials before they are rounded to F, and the thread
// that owns the target's column reads its original logit just before overwriting it.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

template <typename F>
__global__ void classifier_forward_kernel(float* losses, F* logits, const int* targets, int V, int Vp) {
    __shared__ float red[32];  // (32) warp partials of the reductions
    int n = blockIdx.x;
    F* p = logits + (size_t)n * Vp;  // (Vp) this row
    // Read before any thread overwrites the row: the barriers in the max below order it first.
    float target_logit = to_f32(p[targets[n]]);
    float maxv = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float x = to_f32(p[j]);
        maxv = x > maxv ? x : maxv;
    }
    maxv = block_max(maxv, red);
    float sum = 0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(to_f32(p[j]) - maxv);
    sum = block_sum(sum, red);
    float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] = from_f32<F>(expf(to_f32(p[j]) - maxv) * inv);
    for (int j = V + threadIdx.x; j < Vp; j += blockDim.x) p[j] = from_f32<F>(0.0f);
    // log-sum-exp form: finite even where the target's probability underflows
    if (threadIdx.x == 0) losses[n] = logf(sum) - (target_logit - maxv);
}

// One thread per (n, j), j < V; the padding columns stay 0 from the forward.
template <typename F>
__global__ void classifier_backward_kernel(F* dlogits, const int* targets, float dloss, int N, int V, int Vp) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * V) return;
    int n = (int)(i / V), j = (int)(i % V);
    F* p = dlogits + (size_t)n * Vp + j;
    float d = dloss, g = to_f32(*p) * d;
    if (j == targets[n]) g -= d;  // j < V: a target outside [0, V) matches no column
    *p = from_f32<F>(g);
}

// One block per vocabulary-parallel row: rowmax[n] over the Vr real columns; -inf when Vr = 0
// (block_max of nothing).
template <typename F>
__global__ void vocab_parallel_max_kernel(float* rowmax, const F* logits, int Vr, int Vl) {
    __shared__ float red[32];  // (32) warp partials
    const F* p = logits + (size_t)blockIdx.x * Vl;  // (Vl) this row
    float maxv = -INFINITY;
    for (int j = threadIdx.x; j < Vr; j += blockDim.x) {
        float x = to_f32(p[j]);
        maxv = x > maxv ? x : maxv;
    }
    maxv = block_max(maxv, red);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = maxv;
}

template <typename F>
__global__ void vocab_parallel_sumexp_kernel(float* stats, F* logits, const int* targets, const float* rowmax, int Vr,
                                             int Vl) {
    __shared__ float red[32];  // (32) warp partials
    int n = blockIdx.x, t = targets[n];
    F* p = logits + (size_t)n * Vl;  // (Vl) this row
    float m = rowmax[n], sum = 0;
    if (threadIdx.x == 0 && !(t >= 0 && t < Vr)) stats[2 * n + 1] = 0.0f;  // the target is not here
    for (int j = threadIdx.x; j < Vr; j += blockDim.x) {
        float x = to_f32(p[j]);
        if (j == t) stats[2 * n + 1] = x;  // read by the column's owner before it overwrites it
        float e = expf(x - m);
        sum += e;  // the fp32 value, not the one rounded to F
        p[j] = from_f32<F>(e);
    }
    sum = block_sum(sum, red);
    if (threadIdx.x == 0) stats[2 * n] = sum;
}

template <typename F>
__global__ void vocab_parallel_finish_kernel(float* losses, F* probs, const float* stats, const float* rowmax, int Vr,
                                             int Vl) {
    int n = blockIdx.x;
    F* p = probs + (size_t)n * Vl;  // (Vl) this row
    float sum = stats[2 * n], inv = 1.0f / sum;
    for (int j = threadIdx.x; j < Vr; j += blockDim.x) p[j] = from_f32<F>(to_f32(p[j]) * inv);
    for (int j = Vr + threadIdx.x; j < Vl; j += blockDim.x) p[j] = from_f32<F>(0.0f);
    if (threadIdx.x == 0) losses[n] = logf(sum) - (stats[2 * n + 1] - rowmax[n]);
}

// Threads of a one-block-per-row launch over n columns: enough warps to cover n once, up to 1024
// (a row of V = 50257 is then ~49 columns a thread); 32 for n = 0.
static inline int classifier_row_threads(int n) {
    int threads = n >= 1024 ? 1024 : (int)ceil_div(n, 32) * 32;
    return threads == 0 ? 32 : threads;
}

template <typename F>
void classifier_forward(float* losses,      // (N) fp32 whatever F
                        F* logits,          // (N,Vp): logits in, probs out
                        const int* targets, // (N)
                        int N, int V, int Vp) {
    if (N == 0) return;
    KEEL_LAUNCH(classifier_forward_kernel<F>, N, classifier_row_threads(V), 0, MAIN_STREAM)(losses, logits, targets, V, Vp);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
void classifier_backward(F* dlogits,          // (N,Vp): probs in, dlogits out
                         const int* targets,  // (N)
                         float dloss, int N, int V, int Vp) {
    size_t n = (size_t)N * V;
    if (n == 0) return;
    KEEL_LAUNCH(classifier_backward_kernel<F>, ceil_div(n, 256), 256, 0, MAIN_STREAM)(dlogits, targets, dloss, N, V, Vp);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
void vocab_parallel_max(float* rowmax,     // (N) fp32
                        const F* logits,   // (N,Vl)
                        int N, int Vr, int Vl) {
    if (N == 0) return;
    KEEL_LAUNCH(vocab_parallel_max_kernel<F>, N, classifier_row_threads(Vr), 0, MAIN_STREAM)(rowmax, logits, Vr, Vl);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
void vocab_parallel_sumexp(float* stats,          // (N,2) fp32: Σ exp, target logit
                           F* logits,             // (N,Vl): logits in, exp(l - rowmax) out (j < Vr)
                           const int* targets,    // (N) local column numbers, any value
                           const float* rowmax,   // (N) the group's max
                           int N, int Vr, int Vl) {
    if (N == 0) return;
    KEEL_LAUNCH(vocab_parallel_sumexp_kernel<F>, N, classifier_row_threads(Vr), 0, MAIN_STREAM)(stats, logits, targets, rowmax, Vr, Vl);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
void vocab_parallel_finish(float* losses,         // (N) fp32
                           F* probs,              // (N,Vl): exp in, probs out
                           const float* stats,    // (N,2) the group's sums
                           const float* rowmax,   // (N)
                           int N, int Vr, int Vl) {
    if (N == 0) return;
    KEEL_LAUNCH(vocab_parallel_finish_kernel<F>, N, classifier_row_threads(Vl), 0, MAIN_STREAM)(losses, probs, stats, rowmax, Vr, Vl);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
