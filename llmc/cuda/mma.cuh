// cuda/mma.cuh — the warp-level tensor-core instructions keel's own kernels issue, by their PTX names,
// and the shared-memory tile layout they read them from.
//
//   mma_m16n8k16<F>(d, a, b)   d (16×8 fp32) += a (16×16 F, row) · b (16×8 F, col): one mma.sync.aligned
//                              .m16n8k16.row.col.f32.{bf16,f16}.f32, fp32 accumulation
//   ldmatrix_x4(r, p)          four 8×8 matrices of 16-bit elements from shared memory: lane l gives the
//                              address of row l%8 of matrix l/8 (16 contiguous bytes); register j of
//                              lane l receives row l/4 of matrix j, elements 2·(l%4) and 2·(l%4)+1
//   ldmatrix_x4_trans(r, p)    the same with each matrix transposed: register j of lane l receives
//                              elements (rows 2·(l%4), 2·(l%4)+1; column l/4) of matrix j
//   cp_async16(dst, src, n)    16 bytes global → shared without a register round trip (cp.async.cg);
//                              n < 16 source bytes are read and the rest zero-filled (n = 0: zeros)
//   cp_async4(dst, src, n)     the same for 4 bytes (cp.async.ca; n = 4 or 0)
//   cp_async_commit()          closes this thread's group of cp_async16 calls since the last commit
//   cp_async_wait<N>()         waits until at most N of this thread's committed groups are in flight;
//                              the copied bytes are then visible to this thread, and to the block after
//                              a __syncthreads
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16", 16-bit A/B, fp32 C/D), with
// g = lane/4, t = lane%4; each 32-bit register holds two elements, the lower-numbered in its low half:
//   A (16×16, row-major m×k): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..2t+1), a[2] = (g, 2t+8..2t+9),
//                             a[3] = (g+8, 2t+8..2t+9)
//   B (16×8, k×n):            b[0] = (k = 2t..2t+1, n = g), b[1] = (k = 2t+8..2t+9, n = g)
//   C/D (16×8 fp32):          d[0..1] = (g, 2t..2t+1), d[2..3] = (g+8, 2t..2t+1)
// So a C/D fragment pair (columns 8j..8j+15) is, rounded to F and packed, the A fragment of the next
// product (FlashAttention-2's P·V without a trip through shared memory): a = {pack(c0[0], c0[1]),
// pack(c0[2], c0[3]), pack(c1[0], c1[1]), pack(c1[2], c1[3])}.
//
// Under the CPU emulation (KEEL_CUDA_EMULATION) the same names come from test/cuda_emu/ptx.h, which
// implements these layouts exactly (a kernel that assumes another layout computes wrong values there
// too) and checks what the hardware requires (all 32 lanes, shared-memory addresses, 16-byte
// alignment); cp.async copies there land only at the wait, so a read before the wait sees old bytes.
#pragma once
#include <cstdint>

#ifdef KEEL_CUDA_EMULATION
#include <ptx.h>
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace keel_cuda {

template <typename F> __device__ inline void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);
template <> __device__ inline void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ inline void mma_m16n8k16<__half>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ inline uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ inline void cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ inline void cp_async4(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ inline void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

}  // namespace keel_cuda
#endif

namespace keel_cuda {

// Two floats rounded to F and packed as one 32-bit register (the first in the low half).
template <typename F> __device__ inline uint32_t pack2(float lo, float hi) {
    F l = from_f32<F>(lo), h = from_f32<F>(hi);
    uint16_t lb, hb;
    memcpy(&lb, &l, 2);
    memcpy(&hb, &h, 2);
    return (uint32_t)lb | (uint32_t)hb << 16;
}

// ---- the swizzled tile layout ---------------------------------------------------------------------
// A tile of `rows` rows of `width` 16-bit elements (width 32, 64 or 128: rows of 64, 128 or 256
// bytes), stored as 16-byte chunks of 8 consecutive elements. Chunk c of row r is placed at chunk
// position c ^ (r & 7) of its row (rows of ≥ 8 chunks), or, for 64-byte rows, position p ^ (L & 7)
// of its 128-byte line L = r/2 (p = the chunk's position in the line). The eight rows an ldmatrix
// phase reads at one column (and the eight 16-byte stores of a cp.async phase along a row) then
// fall on eight different 16-byte bank groups: every access of the flash kernels is conflict-free,
// which test_flash_layout checks lane by lane for each pattern (flash_bank_conflicts below).
__host__ __device__ constexpr inline int swz(int r, int c, int width) {
    return width >= 64 ? r * width + (((c >> 3) ^ (r & 7)) << 3) + (c & 7)
                       : (r >> 1) * 64 + (((((r & 1) << 2) | (c >> 3)) ^ ((r >> 1) & 7)) << 3) + (c & 7);
}

}  // namespace keel_cuda
