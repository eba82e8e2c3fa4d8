// kernel_instances.cu — the instantiations of keel's kernels that the CUDA kernel tests launch and
// train_gpt.cu never makes (the trainer adds residual gradients in place and casts fp32 only to the
// 16-bit types). scripts/ptxas_report.sh compiles this file beside train_gpt.cu, so that the
// emulator's register table (kernel_registers.h, `make kernel-registers`) has them too; a kernel a
// test launches that neither file instantiates is refused under KEEL_EMU_REGISTERS=strict, which
// test_emu_sanitize sets. For nvcc only: g++ never compiles it.
#include "llmc/cuda/cast.cuh"
#include "llmc/cuda/residual.cuh"

template void keel_cuda::cast_from_f32<float>(float*, const float*, size_t);
template void keel_cuda::residual_backward<float>(float*, float*, const float*, size_t);
template void keel_cuda::residual_backward<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, const __nv_bfloat16*, size_t);
template void keel_cuda::residual_backward<__half>(__half*, __half*, const __half*, size_t);

// The flash backward with its dQ chain added serially (FLASH_CHAIN_SERIAL = 0) and deferred a step
// (FLASH_CHAIN_DEFER = 2), at 4 and 8 warps a block, and acquiring by a second read (4 warps), which
// test_cuda_flash and the kernel lab run beside the trainer's kernels: bf16 only, the kernel lab's
// type (each a compile of 10–20 s an architecture here; the chains are the same code in fp16). The
// 32-query steps at head size 64 are the trainer's (timed at start-up), in both types.
#include "llmc/cuda/flash_attention.cuh"
#define KEEL_FLASH_BWD_CHAIN(F, HS, W, CHAIN)                                                                                    \
    template __global__ void keel_cuda::flash_attention_backward_kernel<F, HS, true, W, CHAIN>(                                  \
        F*, const F*, const F*, const float*, const float*, float*, int*, int, int, int, int, int, int, AttentionOpts, keel_cuda::AttnScoreScale, \
        float, bool);
#define KEEL_FLASH_BWD_CHAINS(F, HS, W) KEEL_FLASH_BWD_CHAIN(F, HS, W, 0) KEEL_FLASH_BWD_CHAIN(F, HS, W, 2)
KEEL_FLASH_BWD_CHAINS(__nv_bfloat16, 64, 4)
KEEL_FLASH_BWD_CHAINS(__nv_bfloat16, 64, 8)
KEEL_FLASH_BWD_CHAINS(__nv_bfloat16, 128, 4)
KEEL_FLASH_BWD_CHAINS(__nv_bfloat16, 128, 8)
// the early chain acquiring by a second read (FLASH_CHAIN_EARLY_ACQUIRE = 3, the lab's variant 9)
KEEL_FLASH_BWD_CHAIN(__nv_bfloat16, 64, 4, 3)
KEEL_FLASH_BWD_CHAIN(__nv_bfloat16, 128, 4, 3)

// The fused classifier's 16-byte path one column at a time (GROUPED = false), which test_cuda_attention
// checks and the kernel lab times beside the trainer's grouped kernel.
#include "llmc/cuda/classifier.cuh"
template __global__ void keel_cuda::classifier_fused_kernel<float, 4, false>(float*, float*, const int*, float, int, int);
template __global__ void keel_cuda::classifier_fused_kernel<__nv_bfloat16, 8, false>(float*, __nv_bfloat16*, const int*, float, int, int);

// The LayerNorm backward as first built (one load in flight, 2 slots in the last block, the
// compare-and-swap counter) and with the loads in flight but that counter (6 slots), each with its
// scalar fallback (odd C, misaligned views: one load in flight) and in both forms of the column sums
// (FUSED: one pass, or two), which test_cuda_layers holds to the launcher's bytes and the kernel lab
// times beside it.
#include "llmc/cuda/layernorm.cuh"
#define KEEL_LN_BWD_CAS_FORM(F, K, VEC, Q, FUSED)                                                                                       \
    template __global__ void keel_cuda::layernorm_backward_kernel<F, K, VEC, Q, false, FUSED>(F*, float*, float*, float*, unsigned*,    \
                                                                                             unsigned, unsigned, const F*, const F*, \
                                                                                             const F*, const float*, const float*,   \
                                                                                             int, int, int, int, bool, bool, bool);
#define KEEL_LN_BWD_CAS(F, K, VEC, Q) KEEL_LN_BWD_CAS_FORM(F, K, VEC, Q, true) KEEL_LN_BWD_CAS_FORM(F, K, VEC, Q, false)
#define KEEL_LN_BWD_CASES(F) \
    KEEL_LN_BWD_CAS(F, 1, true, 2) KEEL_LN_BWD_CAS(F, 1, false, 2) KEEL_LN_BWD_CAS(F, 3, true, 6) KEEL_LN_BWD_CAS(F, 1, false, 6)
KEEL_LN_BWD_CASES(float)
KEEL_LN_BWD_CASES(__nv_bfloat16)
KEEL_LN_BWD_CASES(__half)
// and the forwards with one chunk in flight, likewise
#define KEEL_LN_FWD_ONE(F)                                                                                                         \
    template __global__ void keel_cuda::layernorm_forward_kernel<F, 1, true>(F*, float*, float*, const F*, const F*, const F*, int, int); \
    template __global__ void keel_cuda::residual_layernorm_forward_kernel<F, 1, true>(F*, F*, float*, float*, const F*, const F*, const F*, \
                                                                                      const F*, int, int);
KEEL_LN_FWD_ONE(float)
KEEL_LN_FWD_ONE(__nv_bfloat16)
KEEL_LN_FWD_ONE(__half)
