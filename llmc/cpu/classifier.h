// cpu/classifier.h — fused softmax + cross-entropy over the (padded) vocabulary.
// Legend: N rows (B*T), V real vocabulary, Vp padded vocabulary (V ≤ Vp; columns ≥ V never count).
//   forward:  probs[n,:V] = softmax(logits[n,:V]) written over logits in place; probs[n,V:] = 0
//             losses[n] = -log(probs[n, target[n]]) = log Σ exp(l - max) - (l_target - max)
//   backward: dlogits[n,j] = (probs[n,j] - [j == target[n]])·dloss, written over probs in place
//             (dloss is the weight of each row in the loss: 1/(rows in the global batch)); a target
//             outside [0, V) subtracts nothing (vocabulary-parallel: it is another rank's column)
// Fused: the (N,Vp) buffer is one round trip — logits → probs → dlogits — never three buffers.
// Numerics: max-subtracted softmax with exp_f32, the sum over V in row_sum's fixed lane order
// (cpu/vmath.h); a row is one thread's work.
#pragma once
#include <cmath>

#include "llmc/cpu/vmath.h"

template <typename F>
void classifier_forward(F* losses,                          // (N)
                        F* logits,                          // (N,Vp): logits in, probs out
                        const int* targets,                 // (N)
                        int N, int V, int Vp) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        F* p = logits + (size_t)n * Vp;
        F maxv = row_max(p, V);
        F target_logit = p[targets[n]];
        for (int j = 0; j < V; j++) p[j] = exp_f32(p[j] - maxv);  // a loop of its own: it vectorizes
        F sum = row_sum(p, V);
        F inv = (F)1 / sum;
        for (int j = 0; j < V; j++) p[j] *= inv;
        for (int j = V; j < Vp; j++) p[j] = 0;
        losses[n] = std::log(sum) - (target_logit - maxv);  // log-sum-exp: finite even if the prob underflows
    }
}

template <typename F>
void classifier_backward(F* dlogits,                        // (N,Vp): probs in, dlogits out
                         const int* targets, F dloss, int N, int V, int Vp) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        F* p = dlogits + (size_t)n * Vp;
        for (int j = 0; j < V; j++) p[j] *= dloss;
        int t = targets[n];
        if (t >= 0 && t < V) p[t] -= dloss;  // vocabulary-parallel: a target on another rank is not here
    }
}

// ---- vocabulary-parallel cross-entropy (tensor parallelism, Megatron's scheme) -----------------------
// A rank holds Vl = Vp/TP columns of the logits, (N,Vl); the first Vr of them are real vocabulary
// (Vr = clamp(V - rank·Vl, 0, Vl)). No rank ever holds a whole row. The model runs:
//   vocab_parallel_max     rowmax[n] = max over the Vr real local columns (-inf if none)
//                          → all-reduce MAX over the tensor-parallel group (exact: max is order-free)
//   vocab_parallel_sumexp  logits[n,j] ← exp(logits[n,j] - rowmax[n]) in place (j < Vr);
//                          stats[n] = (Σ_j of those, the target's logit if the target is a local
//                          real column else 0); targets are local column numbers (any value: only
//                          0 ≤ t < Vr is here) → all-reduce SUM (the target term has one non-zero addend)
//   vocab_parallel_finish  losses[n] = log Σ - (target logit - rowmax); probs = exp / Σ in place,
//                          padding columns 0
// and the backward is classifier_backward over (N, Vr, Vl) with the local targets. The loss equals
// the one-rank classifier's up to the order of the Σ over the vocabulary.
template <typename F>
void vocab_parallel_max(F* rowmax, const F* logits, int N, int Vr, int Vl) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) rowmax[n] = Vr > 0 ? row_max(logits + (size_t)n * Vl, Vr) : (F)-INFINITY;
}

template <typename F>
void vocab_parallel_sumexp(F* stats,                        // (N,2): Σ exp, target logit
                           F* logits, const int* targets, const F* rowmax, int N, int Vr, int Vl) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        F* p = logits + (size_t)n * Vl;
        int t = targets[n];
        stats[2 * n + 1] = t >= 0 && t < Vr ? p[t] : (F)0;
        for (int j = 0; j < Vr; j++) p[j] = exp_f32(p[j] - rowmax[n]);
        stats[2 * n] = Vr > 0 ? row_sum(p, Vr) : (F)0;
    }
}

template <typename F>
void vocab_parallel_finish(F* losses, F* probs, const F* stats, const F* rowmax, int N, int Vr, int Vl) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        F* p = probs + (size_t)n * Vl;
        F sum = stats[2 * n], inv = (F)1 / sum;
        for (int j = 0; j < Vr; j++) p[j] *= inv;
        for (int j = Vr; j < Vl; j++) p[j] = 0;
        losses[n] = std::log(sum) - (stats[2 * n + 1] - rowmax[n]);
    }
}
