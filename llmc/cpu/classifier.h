// cpu/classifier.h — fused softmax + cross-entropy over the (padded) vocabulary.
// Legend: N rows (B*T), V real vocabulary, Vp padded vocabulary (V ≤ Vp; columns ≥ V never count).
//   forward:  probs[n,:V] = softmax(logits[n,:V]) written over logits in place; probs[n,V:] = 0
//             losses[n] = -log(probs[n, target[n]]) = log Σ exp(l - max) - (l_target - max)
//   backward: dlogits[n,j] = (probs[n,j] - [j == target[n]])·dloss, written over probs in place
//             (dloss is the weight of each row in the loss: 1/(rows in the global batch))
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
        p[targets[n]] -= dloss;
    }
}
