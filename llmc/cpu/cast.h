// cpu/cast.h — the compute copy of the parameters:
//   cast_from_f32: out[i] = (F)inp[i]
// The CPU trainer computes in fp32, so its model never needs the copy (model.h skips it when the
// compute type is the master type); the op exists so both op sets have the same names.
#pragma once
#include <cstddef>

template <typename F> void cast_from_f32(F* out, const float* inp, size_t N) {
    for (size_t i = 0; i < N; i++) out[i] = (F)inp[i];
}
