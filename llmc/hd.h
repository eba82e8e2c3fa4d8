// hd.h — KEEL_HD: a function both the host and CUDA kernels call (the one definition of a formula that the
// CPU loops and the GPU kernels share). Empty for g++, including the CUDA emulation build.
#pragma once
#if defined(__CUDACC__)
#define KEEL_HD __host__ __device__
#else
#define KEEL_HD
#endif
