// cpu/classifier.h — fused softmax + cross-entropy over the (padded) vocabulary, loss and gradient
// in one op: the probabilities are never a result of their own.
// Legend: N rows (B*T), V real vocabulary, Vp padded vocabulary (V ≤ Vp; columns ≥ V never count).
//   classifier_forward(losses, logits, targets, N, V, Vp, dloss):
//     losses[n] = -log p[n, target[n]] = log Σ exp(l - max) - (l_target - max),  p = softmax(l[n,:V])
//     dloss ≠ 0 (training): logits ← dlogits[n,j] = (p[n,j] - [j == target[n]])·dloss for j < V, 0 for
//       j ≥ V (dloss is each row's weight in the loss being differentiated: 1/(rows in the global
//       batch), times the loss scale); the model's backward starts from them.
//     dloss = 0 (evaluation): losses only; the logits buffer is scratch afterwards.
//   A target outside [0, V) subtracts nothing (vocabulary-parallel: it is another rank's column).
// Why fused: (p - 1) is formed in fp32 from fp32 p, never from a stored probability — on the GPU a
// bf16 probability of a confident target (p ≈ 0.999) rounds to 1 and its gradient to 0; and the
// (N,Vp) buffer makes one round trip (logits → dlogits) with no probability pass in between.
// Numerics: max-subtracted softmax with exp_f32, the sum over V in row_sum's fixed lane order
// (cpu/vmath.h); a row is one thread's work. dlogits = (e·(1/Σ))·dloss, then - dloss at the
// target: the same operations, in the same order, as the unfused probs-then-gradient pair.
#pragma once
#include <cmath>
#include <vector>

#include "llmc/cpu/vmath.h"

template <typename F>
void classifier_forward(F* losses,                          // (N)
                        F* logits,                          // (N,Vp): logits in, dlogits out (dloss ≠ 0)
                        const int* targets,                 // (N)
                        int N, int V, int Vp, F dloss) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        F* p = logits + (size_t)n * Vp;
        F maxv = row_max(p, V);
        int t = targets[n];
        F target_logit = t >= 0 && t < V ? p[t] : (F)0;
        for (int j = 0; j < V; j++) p[j] = exp_f32(p[j] - maxv);  // a loop of its own: it vectorizes
        F sum = row_sum(p, V);
        losses[n] = std::log(sum) - (target_logit - maxv);  // log-sum-exp: finite even if the prob underflows
        if (dloss == (F)0) continue;
        F inv = (F)1 / sum;
        for (int j = 0; j < V; j++) p[j] = (p[j] * inv) * dloss;
        if (t >= 0 && t < V) p[t] -= dloss;
        for (int j = V; j < Vp; j++) p[j] = 0;
    }
}

// ---- vocabulary-parallel cross-entropy (tensor parallelism, Megatron's scheme) -----------------------
// A rank holds Vl = Vp/TP columns of the logits, (N,Vl); the first Vr of them are real vocabulary
// (Vr = clamp(V - rank·Vl, 0, Vl)). No rank ever holds a whole row. The model runs:
//   vocab_parallel_max     rowmax[n] = max over the Vr real local columns (-inf if none)
//                          → all-reduce MAX over the tensor-parallel group (exact: max is order-free)
//   vocab_parallel_sumexp  stats[n] = (Σ_{j<Vr} exp(logits[n,j] - rowmax[n]), the target's logit if
//                          the target is a local real column else 0); targets are local column
//                          numbers (any value: only 0 ≤ t < Vr is here); the logits are unchanged
//                          → all-reduce SUM (the target term has one non-zero addend)
//   vocab_parallel_finish  losses[n] = log Σ - (target logit - rowmax); with dloss ≠ 0 the logits
//                          become dlogits = (exp(l - rowmax)/Σ - [j == t])·dloss for j < Vr, 0 for
//                          the padding columns (classifier_forward's fused gradient, on a slice)
// The loss equals the one-rank classifier's up to the order of the Σ over the vocabulary. The
// exponentials are computed twice (sumexp and finish) rather than stored: the same function of the
// same inputs, so the same values, and the logits stay intact between the two all-reduces.
template <typename F>
void vocab_parallel_max(F* rowmax, const F* logits, int N, int Vr, int Vl) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) rowmax[n] = Vr > 0 ? row_max(logits + (size_t)n * Vl, Vr) : (F)-INFINITY;
}

template <typename F>
void vocab_parallel_sumexp(F* stats,                        // (N,2): Σ exp, target logit
                           const F* logits, const int* targets, const F* rowmax, int N, int Vr, int Vl) {
#pragma omp parallel
    {
        std::vector<F> e(Vr > 0 ? Vr : 1);  // (Vr) one row's exponentials
#pragma omp for
        for (int n = 0; n < N; n++) {
            const F* p = logits + (size_t)n * Vl;
            int t = targets[n];
            stats[2 * n + 1] = t >= 0 && t < Vr ? p[t] : (F)0;
            for (int j = 0; j < Vr; j++) e[j] = exp_f32(p[j] - rowmax[n]);
            stats[2 * n] = Vr > 0 ? row_sum(e.data(), Vr) : (F)0;
        }
    }
}

template <typename F>
void vocab_parallel_finish(F* losses,                       // (N)
                           F* logits,                       // (N,Vl): logits in, dlogits out (dloss ≠ 0)
                           const F* stats, const F* rowmax, const int* targets, F dloss, int N, int Vr, int Vl) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        F sum = stats[2 * n];
        losses[n] = std::log(sum) - (stats[2 * n + 1] - rowmax[n]);
        if (dloss == (F)0) continue;
        F* p = logits + (size_t)n * Vl;
        F inv = (F)1 / sum;
        for (int j = 0; j < Vr; j++) p[j] = (exp_f32(p[j] - rowmax[n]) * inv) * dloss;
        int t = targets[n];
        if (t >= 0 && t < Vr) p[t] -= dloss;
        for (int j = Vr; j < Vl; j++) p[j] = 0;
    }
}
