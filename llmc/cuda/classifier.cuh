// cuda/classifier.cuh — fused softmax + cross-entropy over the (padded) vocabulary, loss and
// gradient in one kernel; the contract of cpu/classifier.h:
//   classifier_forward(losses, logits, targets, N, V, Vp, dloss):
//     losses[n] = log Σ exp(l - max) - (l_target - max)
//     dloss ≠ 0: logits ← dlogits = (p - [j == target])·dloss (j < V), 0 for j ≥ V, p = softmax(l)
//     dloss = 0: losses only (the logits are not written)
//   vocabulary-parallel cross-entropy over a rank's (N,Vl) slice whose first Vr columns are real:
//     vocab_parallel_max     rowmax[n] = max_{j<Vr} l[n,j] (-inf for Vr = 0)
//     vocab_parallel_sumexp  stats[n] = (Σ_j exp(l - rowmax), the original logit at local target t
//                            if 0 ≤ t < Vr else 0); the logits are unchanged
//     vocab_parallel_finish  losses[n] = log Σ - (l_t - rowmax); dloss ≠ 0: logits ← dlogits
//   (the model all-reduces rowmax by MAX and stats by SUM between the calls; cpu/classifier.h).
// Legend: N rows (B*T), V real vocabulary, Vp padded vocabulary (V ≤ Vp); Vl local columns, Vr ≤ Vl
// of them real. losses, rowmax and stats are fp32 whatever the storage F.
// The fused kernel: one block per row, 1024 threads for GPT-2's vocabulary (a function of V alone).
// Pass 1 reads the row once: each thread keeps an online (max, Σ exp) over its columns — 16-byte
// groups of 16/sizeof(F) columns, group g for thread g mod blockDim, when the row allows (the state
// rescaled once a group, e^d from exp2_approx), else single columns (the state per column, expf) —
// merged by block_softmax_combine's fixed tree (cuda/softmax.cuh). Pass 2 re-reads
// the row (from L2: a block's row is ~100 KB in bf16) and writes (exp(l - max)/Σ - [j = t])·dloss,
// formed in fp32 and rounded once to F. The probabilities never exist in memory: a bf16 p ≈ 0.999
// would round to 1 and the target's gradient (p - 1) to 0; here it is (p - 1) of the fp32 p.
// The target's logit is read before any thread overwrites the row (the reductions' barriers order it).
// The vocabulary-parallel ops: one block per row as above (scalar columns), the block size a
// function of Vr (of Vl for finish), max and Σ by the fixed-tree block reductions.
#pragma once
#include <type_traits>
#include "llmc/cuda/common.cuh"
#include "llmc/cuda/softmax.cuh"

namespace keel_cuda {

// e^d for the softmax's d = x - max ≤ 0: exp2_approx(d·log2 e), two instructions where expf takes
// about eight (its range reduction and denormal results). Relative error about 2^-22 plus the
// product's rounding, |d|·log2(e)·2^-24: 2e-6 at d = -20, where e^d is already 2e-9 of the row's
// largest term; terms below 2^-126 of it become 0 (expf gives denormals there).
__device__ inline float classifier_exp(float d) { return exp2_approx(d * 1.4426950408889634f); }

// Row n of logits (V real of Vp columns), in groups of G columns (16 bytes when the row allows, else
// G = 1) strided over the block. GROUPED (G > 1): per group the state is rescaled once, to the
// group's max, and its G terms added against that max in column order, by classifier_exp. Otherwise
// one column at a time, the online state per value and expf, as the kernel was first written: a
// branch and about 18 instructions a column in the first pass and 14 in the second made it
// issue-bound on an H200 (0.94 ms at B=8, T=1024, GPT-2's vocabulary, where its bytes allow about
// 0.4); the grouped passes take about 9 and 11. The kernel lab keeps it as the "before".
template <typename F, int G, bool GROUPED = (G > 1)>
__global__ void classifier_fused_kernel(float* losses, F* logits, const int* targets, float dloss, int V, int Vp) {
    KEEL_SHARED(float, red, [64]);  // (64) warp states of the block reduction
    int n = blockIdx.x, t = targets[n];
    F* p = logits + (size_t)n * Vp;  // (Vp) this row
    float target_logit = t >= 0 && t < V ? to_f32(p[t]) : 0.0f;
    float m = -INFINITY, s = 0.0f;
    for (int j0 = threadIdx.x * G; j0 < V; j0 += blockDim.x * G) {
        Pack<F, G> x = pack_load<F, G>(p + j0);
        if constexpr (!GROUPED) {
            for (int g = 0; g < G; g++)
                if (j0 + g < V) softmax_state_add(&m, &s, to_f32(x.v[g]));
        } else {
            float v[G], gm = -INFINITY;
            KEEL_UNROLL
            for (int g = 0; g < G; g++) v[g] = to_f32(x.v[g]);
            if (j0 + G > V) {  // the row's last real group: the columns past V are terms of 0
                KEEL_UNROLL
                for (int g = 0; g < G; g++)
                    if (j0 + g >= V) v[g] = -INFINITY;
            }
            KEEL_UNROLL
            for (int g = 0; g < G; g++) gm = fmaxf(gm, v[g]);
            if (gm > m) {  // (the first group: 0·e^-inf)
                s *= classifier_exp(m - gm);
                m = gm;
            }
            KEEL_UNROLL
            for (int g = 0; g < G; g++) s += classifier_exp(v[g] - m);
        }
    }
    block_softmax_combine(&m, &s, red);
    if (threadIdx.x == 0) losses[n] = logf(s) - (target_logit - m);  // log-sum-exp: finite where p underflows
    if (dloss == 0.0f) return;
    float inv = 1.0f / s;
    for (int j0 = threadIdx.x * G; j0 < Vp; j0 += blockDim.x * G) {
        Pack<F, G> x = pack_load<F, G>(p + j0);
        auto grad = [&](auto real_c) {  // real_c: every column of the group < V (all but the group V cuts and the padding's)
            KEEL_UNROLL
            for (int g = 0; g < G; g++) {
                int j = j0 + g;
                float d = 0.0f;  // the padding columns' gradient
                if (decltype(real_c)::value || j < V)
                    d = ((GROUPED ? classifier_exp(to_f32(x.v[g]) - m) : expf(to_f32(x.v[g]) - m)) * inv - (j == t ? 1.0f : 0.0f)) * dloss;
                x.v[g] = from_f32<F>(d);
            }
        };
        if (j0 + G <= V) grad(std::true_type());
        else grad(std::false_type());
        pack_store<F, G>(p + j0, x);
    }
}

// One block per vocabulary-parallel row: rowmax[n] over the Vr real columns; -inf when Vr = 0
// (block_max of nothing).
template <typename F>
__global__ void vocab_parallel_max_kernel(float* rowmax, const F* logits, int Vr, int Vl) {
    KEEL_SHARED(float, red, [32]);  // (32) warp partials
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
__global__ void vocab_parallel_sumexp_kernel(float* stats, const F* logits, const int* targets, const float* rowmax, int Vr, int Vl) {
    KEEL_SHARED(float, red, [32]);  // (32) warp partials
    int n = blockIdx.x, t = targets[n];
    const F* p = logits + (size_t)n * Vl;  // (Vl) this row
    float m = rowmax[n], sum = 0;
    for (int j = threadIdx.x; j < Vr; j += blockDim.x) sum += expf(to_f32(p[j]) - m);
    sum = block_sum(sum, red);
    if (threadIdx.x == 0) {
        stats[2 * n] = sum;
        stats[2 * n + 1] = t >= 0 && t < Vr ? to_f32(p[t]) : 0.0f;  // the target is here or not
    }
}

template <typename F>
__global__ void vocab_parallel_finish_kernel(float* losses, F* logits, const float* stats, const float* rowmax, const int* targets,
                                             float dloss, int Vr, int Vl) {
    int n = blockIdx.x, t = targets[n];
    F* p = logits + (size_t)n * Vl;  // (Vl) this row
    float sum = stats[2 * n], m = rowmax[n], inv = 1.0f / sum;
    if (threadIdx.x == 0) losses[n] = logf(sum) - (stats[2 * n + 1] - m);
    if (dloss == 0.0f) return;
    for (int j = threadIdx.x; j < Vl; j += blockDim.x) {
        float d = 0.0f;
        if (j < Vr) d = (expf(to_f32(p[j]) - m) * inv - (j == t ? 1.0f : 0.0f)) * dloss;
        p[j] = from_f32<F>(d);
    }
}

// Threads of a one-block-per-row launch over n columns: enough warps to cover n once, up to 1024
// (a row of V = 50257 is then ~49 columns a thread); 32 for n = 0.
static inline int classifier_row_threads(int n) {
    int threads = n >= 1024 ? 1024 : (int)ceil_div(n, 32) * 32;
    return threads == 0 ? 32 : threads;
}

// GROUPED = false: the 16-byte path one column at a time (the kernel lab's "before"; the trainer's is
// grouped).
template <typename F, bool GROUPED = true>
void classifier_forward(float* losses,      // (N) fp32 whatever F
                        F* logits,          // (N,Vp): logits in, dlogits out (dloss ≠ 0)
                        const int* targets, // (N)
                        int N, int V, int Vp, float dloss) {
    if (N == 0) return;
    const int G = 16 / sizeof(F);
    if (Vp % G == 0 && aligned16(logits))  // every row starts 16-byte aligned
        KEEL_LAUNCH(classifier_fused_kernel<F KEEL_COMMA G KEEL_COMMA GROUPED>, N, classifier_row_threads((int)ceil_div(V, G)), 0, MAIN_STREAM)(
            losses, logits, targets, dloss, V, Vp);
    else
        KEEL_LAUNCH(classifier_fused_kernel<F KEEL_COMMA 1>, N, classifier_row_threads(V), 0, MAIN_STREAM)(losses, logits, targets, dloss, V, Vp);
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
                           const F* logits,       // (N,Vl)
                           const int* targets,    // (N) local column numbers, any value
                           const float* rowmax,   // (N) the group's max
                           int N, int Vr, int Vl) {
    if (N == 0) return;
    KEEL_LAUNCH(vocab_parallel_sumexp_kernel<F>, N, classifier_row_threads(Vr), 0, MAIN_STREAM)(stats, logits, targets, rowmax, Vr, Vl);
    CUDA_CHECK_LAUNCH();
}

template <typename F>
void vocab_parallel_finish(float* losses,         // (N) fp32
                           F* logits,             // (N,Vl): logits in, dlogits out (dloss ≠ 0)
                           const float* stats,    // (N,2) the group's sums
                           const float* rowmax,   // (N)
                           const int* targets,    // (N) local column numbers
                           float dloss, int N, int Vr, int Vl) {
    if (N == 0) return;
    KEEL_LAUNCH(vocab_parallel_finish_kernel<F>, N, classifier_row_threads(Vl), 0, MAIN_STREAM)(losses, logits, stats, rowmax, targets, dloss,
                                                                                                  Vr, Vl);
    CUDA_CHECK_LAUNCH();
}

}  // namespace keel_cuda
