// cuda/vec.cuh — 16-byte vector access for the kernels of the fast path (one 128-bit load or store
// per thread and operand: 8 bf16/fp16 values or 4 fp32 values).
//   Pack<T, V>         V values of T (V a power of two), aligned to its size up to 16 bytes
//   pack_load/store    one vector access at p (p must be V-aligned: pack_aligned says whether it is)
// A kernel takes the vector path only when every pointer it reads or writes this way is 16-byte
// aligned and its row lengths are multiples of V; otherwise its launcher picks the V = 1 instance of
// the same template (same arithmetic per element, so both give the same bits).
// KEEL_COMMA lets a kernel with two template arguments pass through KEEL_LAUNCH (a literal comma
// would split the macro argument): KEEL_LAUNCH(kernel<F KEEL_COMMA V>, ...).
#pragma once
#include <cstdint>

#include "llmc/cuda/common.cuh"

#define KEEL_COMMA ,

namespace keel_cuda {

template <typename T, int V> struct alignas(V * sizeof(T) >= 16 ? 16 : V * sizeof(T)) Pack {
    T v[V];
};

template <typename T, int V> __device__ inline Pack<T, V> pack_load(const T* p) { return *(const Pack<T, V>*)p; }
template <typename T, int V> __device__ inline void pack_store(T* p, const Pack<T, V>& x) { *(Pack<T, V>*)p = x; }

__host__ inline bool pack_aligned(const void* p) { return ((uintptr_t)p & 15u) == 0; }

}  // namespace keel_cuda
