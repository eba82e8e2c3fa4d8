// cuda/softmax.cuh — the online-softmax state shared by the attention and classifier kernels.
// A state (m, s) stands for a set of values x with m = max x and s = Σ exp(x - m). Adding one value
// and merging two states are exact rewrites of that definition (rescale the smaller-max sum by
// exp(Δmax)), so a row's (max, Σ exp) comes out of one pass over it instead of two. The merges run
// in fixed trees (lane butterfly, then warp order), so the result is a function of the inputs alone.
#pragma once
#include "llmc/cuda/common.cuh"

namespace keel_cuda {

__device__ inline void softmax_state_add(float* m, float* s, float x) {
    if (x > *m) {
        *s = *s * expf(*m - x) + 1.0f;  // the first value: 0·exp(-inf) + 1
        *m = x;
    } else {
        *s += expf(x - *m);
    }
}

// Merges (mo, so) into (m, s); a state that saw nothing (m = -inf) contributes nothing (its
// exp(-inf - -inf) would be NaN).
__device__ inline void softmax_state_merge(float* m, float* s, float mo, float so) {
    float mn = mo > *m ? mo : *m;
    float a = *m == -INFINITY ? 0.0f : *s * expf(*m - mn), c = mo == -INFINITY ? 0.0f : so * expf(mo - mn);
    *m = mn;
    *s = a + c;
}

// Over the 32 lanes in a fixed butterfly: every lane ends with the warp's state.
__device__ inline void warp_softmax_combine(float* m, float* s) {
    for (int off = 16; off > 0; off >>= 1) {
        float mo = __shfl_xor_sync(0xffffffffu, *m, off), so = __shfl_xor_sync(0xffffffffu, *s, off);
        softmax_state_merge(m, s, mo, so);
    }
}

// Over the block (blockDim.x a multiple of 32): warp states, then warp 0 merges them in warp order
// (butterfly over lanes holding warp w's state). Every thread gets the result. `shared` holds 64 floats.
__device__ inline void block_softmax_combine(float* m, float* s, float* shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    warp_softmax_combine(m, s);
    __syncthreads();  // shared may still be read by a previous call
    if (lane == 0) {
        shared[warp] = *m;
        shared[32 + warp] = *s;
    }
    __syncthreads();
    float wm = lane < warps ? shared[lane] : -INFINITY, ws = lane < warps ? shared[32 + lane] : 0.0f;
    warp_softmax_combine(&wm, &ws);
    *m = wm;
    *s = ws;
}

}  // namespace keel_cuda
