// backend.h — picks the op set and memory functions the trainer is compiled against.
//
// train_gpt.cu is backend-agnostic (DESIGN §1): it calls the ops below by name. The CPU op set
// (llmc/cpu/*.h: fp32 OpenMP kernels, the readable reference of the method) is what both
// binaries use until the CUDA op set (llmc/cuda/*.cuh, same signatures) lands; then KEEL_CUDA
// selects it here and nowhere else.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "llmc/common.h"
#include "llmc/cpu/adam8bit.h"
#include "llmc/cpu/adamw.h"
#include "llmc/cpu/attention.h"
#include "llmc/cpu/classifier.h"
#include "llmc/cpu/dropout.h"
#include "llmc/cpu/encoder.h"
#include "llmc/cpu/gelu.h"
#include "llmc/cpu/headscale.h"
#include "llmc/cpu/layernorm.h"
#include "llmc/cpu/matmul.h"
#include "llmc/cpu/relu.h"
#include "llmc/cpu/residual.h"

#ifdef KEEL_CUDA
#include "llmc/cuda/device.cuh"
#endif

static inline const char* backend_name() {
#ifdef KEEL_CUDA
    return "cpu kernels inside the CUDA build (the CUDA op set has not landed yet)";
#else
    static char name[64];
    snprintf(name, sizeof name, "cpu (fp32, OpenMP, %s matmul)", gemm_isa());
    return name;
#endif
}

// Device memory: host memory on the CPU backend. Sizes in bytes; failures name the size.
static inline void* backend_malloc(size_t bytes) {
    void* p = nullptr;
    if (bytes && posix_memalign(&p, 64, bytes) != 0)
        keel_die_code(KEEL_EXIT_RUNTIME, "use a smaller model or micro-batch", "out of memory allocating %zu bytes", bytes);
    return p;
}
static inline void backend_free(void* p) { free(p); }
static inline void backend_memset_zero(void* p, size_t bytes) { memset(p, 0, bytes); }
static inline void backend_copy_to_host(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
static inline void backend_copy_to_device(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
