// fma_peak — this machine's fp32 fused multiply-add peak, measured: every thread runs 16
// independent chains of vector FMAs (enough to cover the FMA latency on every x86 core keel has met)
// for a fixed count, and the best of three rounds is reported. `make bench` prints it beside the
// trainer's GFLOP/s, so "fraction of peak" compares numbers taken in one run on one machine.
// Each ISA the CPU supports is measured (AVX-512 and AVX2+FMA via target attributes, whatever
// -march says); the peak is the widest one's. Output lines: "fma_peak <isa> <GFLOP/s>".
#include <omp.h>

#include <cstdio>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

static const long ITERS = 40000000;

#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

__attribute__((target("avx512f"))) static float chains_avx512() {
    __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.001f);
#define DECL(i) __m512 a##i = _mm512_set1_ps((float)i);
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, x, y);
#define SUM(i) s = _mm512_add_ps(s, a##i);
    CHAINS(DECL)
    for (long it = 0; it < ITERS; it++) {
        CHAINS(STEP)
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3));  // keeps the loop a loop
    }
    __m512 s = _mm512_setzero_ps();
    CHAINS(SUM)
    return _mm512_reduce_add_ps(s);
#undef DECL
#undef STEP
#undef SUM
}

__attribute__((target("avx2,fma"))) static float chains_avx2() {
    __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(0.001f);
#define DECL(i) __m256 a##i = _mm256_set1_ps((float)i);
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, x, y);
#define SUM(i) s = _mm256_add_ps(s, a##i);
    CHAINS(DECL)
    for (long it = 0; it < ITERS; it++) {
        CHAINS(STEP)
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3));
    }
    __m256 s = _mm256_setzero_ps();
    CHAINS(SUM)
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
#undef DECL
#undef STEP
#undef SUM
}

// GFLOP/s of all threads running `chains` at once (each FMA is 2 FLOPs per lane).
static double measure(float (*chains)(), int lanes) {
    double best = 0;
    for (int round = 0; round < 3; round++) {
        float sink = 0;
        double t0 = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
        sink += chains();
        double secs = omp_get_wtime() - t0;
        double gflops = 2.0 * lanes * 16 * ITERS * omp_get_max_threads() / secs / 1e9;
        if (gflops > best) best = gflops;
        if (sink == 12345.0f) printf(" ");  // uses the result
    }
    return best;
}

#endif

int main() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) printf("fma_peak AVX-512 %.1f\n", measure(chains_avx512, 16));
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) printf("fma_peak AVX2 %.1f\n", measure(chains_avx2, 8));
#endif
    printf("fma_peak threads %d\n", omp_get_max_threads());
    return 0;
}
