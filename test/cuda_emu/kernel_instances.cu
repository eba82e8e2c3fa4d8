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
