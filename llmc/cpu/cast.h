// cpu/cast.h — the compute copy of the parameters, and bf16 storage for the CPU trainer:
//   cast_from_f32:    out[i] = (F)inp[i]
//   cast_round_bf16:  out[i] = bf16_round(inp[i])   (out may be inp)
// The CPU trainer computes in fp32. Without --bf16 its model reads the master weights themselves
// (model.h skips the copy when the compute type is the master type). Under --bf16 it keeps fp32
// arithmetic and rounds, to bf16, the weights the ops read (a rounded copy of the master weights)
// and every activation and activation gradient where the GPU stores them in bf16 (model.h
// gpt_stored, docs/internals.md#precision): the storage of the CUDA trainer's --bf16, emulated.
#pragma once
#include <cstddef>

#include "llmc/ops.h"

template <typename F> void cast_from_f32(F* out, const float* inp, size_t N) {
    for (size_t i = 0; i < N; i++) out[i] = (F)inp[i];
}

template <typename F> void cast_round_bf16(F* out, const F* inp, size_t N) {
#pragma omp parallel for schedule(static) if (N >= (1u << 16))
    for (size_t i = 0; i < N; i++) out[i] = (F)bf16_round((float)inp[i]);
}
