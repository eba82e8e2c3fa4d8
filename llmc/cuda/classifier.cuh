// cuda/classifier.cuh — fused softmax + cross-entropy over the (padded) vocabulary; the contract of
// cpu/classifier.h:
//   forward:  probs[n,:V] = softmax(logits[n,:V]) over logits in place, probs[n,V:] = 0,
//             losses[n] = log Σ exp(l - max) - (l_target - max)
//   backward: dlogits[n,j] = (probs[n,j] - [j == target[n]])·dloss in place, j < V
// Legend: N rows (B*T), V real vocabulary, Vp padded vocabulary (V ≤ Vp).
// Forward: one block per row; thread k takes the columns j ≡ k (mod blockDim) in ascending j, for
// the max, the sum and the writes alike, so no thread reads a column another one has overwritten.
// Max and sum are block reductions in a fixed tree (the block size is a function of V alone), so
// the result depends on the inputs only. The exponentials are recomputed in the writing pass rather
// than stored and re-read: a bf16 row would otherwise round each one twice.
// Backward: one thread per (n, j < V), elementwise. fp32 arithmetic whatever the storage F.
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
    if (j == targets[n]) g -= d;
    *p = from_f32<F>(g);
}

template <typename F>
void classifier_forward(float* losses,      // (N) fp32 whatever F
                        F* logits,          // (N,Vp): logits in, probs out
                        const int* targets, // (N)
                        int N, int V, int Vp) {
    if (N == 0) return;
    // Enough threads to cover V once up to 1024 (a row of V = 50257 is then ~49 columns a thread).
    int threads = V >= 1024 ? 1024 : (int)ceil_div(V, 32) * 32;
    if (threads == 0) threads = 32;
    KEEL_LAUNCH(classifier_forward_kernel<F>, N, threads, 0, MAIN_STREAM)(losses, logits, targets, V, Vp);
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

}  // namespace keel_cuda
