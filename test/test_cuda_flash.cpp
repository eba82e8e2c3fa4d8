// test_cuda_flash — the fused flash attention (cuda/flash_attention.cuh) and its CPU twin
// (cpu/flash_attention.h) against the materialized attention (cpu/attention.h) and the GEMM path
// (cuda/attention.cuh), for every score variant (standard, qk-inward, layer coefficient 3, both,
// ALiBi), attention dropout p = 0.25 with and without a tensor-parallel head_offset, and all of them
// together.
//   0. The shared-memory layouts: every per-lane access pattern of the flash kernels (the functions
//      flash_ldm_*, flash_frag, flash_chunk the kernels address shared memory through) evaluated for
//      the 32 lanes of a warp at every offset the kernels use, in each tile width: no bank conflict
//      (degree 1), and a negative control (the same ldmatrix rows unswizzled: 8-way) the checker sees.
//   1. The instructions (cuda/mma.cuh; under the emulation test/cuda_emu/ptx.h): mma.sync m16n8k16
//      in bf16 and fp16 with operands built by the documented fragment layouts against a loop,
//      ldmatrix x4 / x4.trans delivering the documented element to every lane and register, cp.async
//      of 16, 8 and 0 source bytes; so on a GPU this checks the documentation against the hardware,
//      and under the emulation the emulation against the documentation. Emulation only: 2·16·8·16
//      FLOPs per mma in mma_flops, cp.async bytes landing at the wait, a lane skipping mma.sync
//      stopping the program (exit 3).
//   2. The CPU twin (fp32) against cpu/attention.h on the same inputs, head sizes 8, 12, 64: out the
//      same value (1e-6), lse = log Σ exp(s) in double (1e-6), dinp from the recomputed
//      probabilities (1e-5 relative plus 1e-6·rms: ds = att·(datt - D) cancels where datt ≈ D).
//   3. The CUDA path, bf16, every variant, hs = 64 at T = 1, 37 (B = 2: B·NH = 4), 130 (three query
//      tiles, the last partial) and hs = 128 at T = 37, 130; T = 64 (one whole tile); fp16 at hs 64
//      and 128. References in double from the same rounded inputs at the kernel's rounding points:
//        forward: per key tile of 64 (ascending), m' = max(m, max s), p = exp(s - m'),
//                 P = L(p·drop), O = O·exp(m - m') + Σ P·v, l likewise; out = L(O/l);
//                 lse checked against the exact log-sum-exp (fp32: 2e-6 relative and absolute);
//        backward (from the kernel's own out and lse, checked above): D = dout·out,
//                 p = exp(s - lse), dv += L(p·drop)·dout, dS = L(p·(dP·drop - D)/√hs),
//                 dq += dS·k, dk += dS·q, dinp = L(dinp0 + Σ).
//      Tolerance: check_lowp (cuda_test.h: 8e-3 relative, 1e-3·rms floor) after `absorb` (below):
//      the kernel differs from these references by fp32 sums in another order, its one rounding of
//      each output, and roundings of p or dS that fall the other way at a bf16 boundary. Negative
//      controls prove that a small element doubled or the largest 2% off is caught.
//      Flash vs the GEMM path (same inputs, both from dinp = 0): GEMM_RTOL and floors below.
//   4. Byte-repeatable (forward and backward twice from the same start: the same bytes); nothing
//      allocated by the calls once flash_attention_reserve has run; the products counted in mma_flops
//      (emulation); with dropout, head_offset changes the output (the model head's mask).
// Runtime: ~12 s under the emulation on 2 cores.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <queue>
#include <vector>

#include "llmc/cpu/attention.h"
#include "llmc/cpu/flash_attention.h"
#include "llmc/cuda/attention.cuh"
#include "llmc/cuda/flash_attention.cuh"
#include "test/attention_test.h"
#include "test/cuda_test.h"

typedef __nv_bfloat16 bf16;

// ---- 0. the shared-memory layouts ---------------------------------------------------------------------
// The worst degree of one pattern (element offset of each lane, 16-bit elements) over all the
// (r0, c0) the kernels use with it: r0 from 0 to rows - dr by dr, c0 from 0 to width - dc by dc.
// elem: the bytes of the tile's elements (2; 4 for the deferred dQ chain's fp32 tiles).
template <typename P> static int pattern_degree(P pat, int rows, int width, int dr, int dc, int bytes, int elem = 2) {
    int worst = 0;
    for (int r0 = 0; r0 + dr <= rows; r0 += dr)
        for (int c0 = 0; c0 + dc <= width; c0 += dc) {
            std::vector<long> a(32);
            for (int l = 0; l < 32; l++) a[l] = (long)elem * pat(l, r0, c0, width);
            worst = std::max(worst, bank_degree(a, bytes));
        }
    return worst;
}
static void test_layouts() {
    using namespace keel_cuda;
    struct Case {
        std::string what;
        int degree;
    };
    std::vector<Case> cases;
    for (int hb : {64 * 1000 + 64, 64 * 1000 + 32, 128 * 1000 + 32}) {  // (head size, query rows a backward step)
        int hs = hb / 1000, bq = hb % 1000;
        std::string h = " (hs " + std::to_string(hs) + (bq != flash_bq(hs) ? ", " + std::to_string(bq) + "-query steps" : std::string()) + ")";
        auto add = [&](std::string w, int d) { cases.push_back({w + h, d}); };
        // forward: Q fragments, K as B, V as B (trans), the output staging (4-byte stores, 16-byte reads)
        const int br = flash_fwd_br(flash_fwd_mt(hs));  // the forward's query rows a block
        add("ldmatrix A (Q; K and V in the backward)", pattern_degree(flash_ldm_a, br, hs, 16, 16, 16));
        add("ldmatrix B (K for Q·Kᵀ; Q, dO for K·Qᵀ, V·dOᵀ)", pattern_degree(flash_ldm_b, FLASH_BC, hs, 16, 16, 16));
        add("ldmatrix.trans B (V for P·V; dO, Q, K in the backward)", pattern_degree(flash_ldm_bt, FLASH_BC, hs, 16, 16, 16));
        add("fragment stores (the output staging)", pattern_degree(flash_frag, br, hs, 8, 8, 4));
        add("16-byte chunks (cp.async fills, the output read-out)",
            pattern_degree([](int l, int r0, int, int w) { return flash_chunk(r0 * (w / 8) + l, w); }, 64, hs, 256 / hs, hs, 16));  // a warp's 32 chunks: 256/hs rows
        // backward: dSᵀ (width BQ) written as fragments, read transposed as the A of dS·K
        add("fragment stores of dSᵀ (width " + std::to_string(bq) + ")", pattern_degree(flash_frag, FLASH_BC, bq, 8, 8, 4));
        add("ldmatrix.trans A (dS from dSᵀ, width " + std::to_string(bq) + ")", pattern_degree(flash_ldm_at, FLASH_BC, bq, 16, 16, 16));
        // the deferred dQ chain's fp32 tiles: the part's fragment pairs (8-byte) and the cp.async fill (16-byte chunks)
        add("fp32 fragment pairs of the deferred dQ part", pattern_degree(flash_dq_pair, bq, hs, 8, 8, 8, 4));
        add("16-byte chunks of the deferred dQ fill",
            pattern_degree([](int l, int r0, int, int w) { return flash_dq_chunk(r0 * (w / 4) + l, w); }, bq, hs, 128 / hs, hs, 16, 4));  // a warp's 32 chunks: 128/hs rows
        // the early dQ chain's fill: each warp its own 16 rows × DQW channels of that tile, 32 chunks at a time
        for (int warps : {4, 8}) {
            if (bq != flash_bq(hs) && warps != 4) continue;  // (32-query steps at head size 64: built at 4 warps only; 8 would be 2-way)
            int mqs = bq / 16, dqw = hs * mqs / warps, worst = 0;
            for (int w = 0; w < warps; w++)
                for (int k = 0; k < 16 * dqw / 4 / 32; k++) {
                    std::vector<long> a(32);
                    for (int l = 0; l < 32; l++) a[l] = 4L * flash_dq_warp_chunk(l + 32 * k, w % mqs * 16, w / mqs * dqw, dqw, hs);
                    worst = std::max(worst, bank_degree(a, 16));
                }
            add("16-byte chunks of the early dQ fill, " + std::to_string(warps) + " warps", worst);
        }
    }
    for (const Case& c : cases) check_true(std::string("shared-memory layout: ") + c.what + " conflict-free (degree " + std::to_string(c.degree) + ")", c.degree == 1);
    // negative control: the same ldmatrix rows in a plain row-major tile of 128-byte rows all fall on
    // one group of 4 banks (8 passes), and the checker says so
    int plain = pattern_degree([](int l, int r0, int c0, int w) { return (r0 + l % 16) * w + c0 + l / 16 * 8; }, 64, 64, 16, 16, 16);
    check_true("negative control: ldmatrix A on an unswizzled 64-wide tile is 8-way conflicted (degree " + std::to_string(plain) + ")", plain == 8);
    // and the fp32 pairs without the rows' 8-float pad: the 4 rows of a 16-lane phase on one bank group (4-way)
    int unpadded = pattern_degree([](int l, int r0, int c0, int w) { return (r0 + l / 4) * w + c0 + l % 4 * 2; }, 64, 64, 8, 8, 8, 4);
    check_true("negative control: fp32 fragment pairs in unpadded 64-float rows are 4-way conflicted (degree " + std::to_string(unpadded) + ")",
               unpadded == 4);
}

// ---- 1. the instructions (cuda/mma.cuh) ------------------------------------------------------------
// Each kernel builds its operands by the layouts cuda/mma.cuh documents (plain loads and stores, no
// ldmatrix), so on a GPU this checks the documentation against the hardware, and under the
// emulation the emulation against the documentation.
// d (16×8) = a (16×16, row-major) · b (16×8, row-major k×n) + c (16×8): one warp.
template <typename T> __global__ void mma_selftest_kernel(float* d, const T* a, const T* b, const float* c) {
    using namespace keel_cuda;
    int l = threadIdx.x, g = l / 4, t = l % 4;
    auto pk = [](T lo, T hi) { return pack2<T>(to_f32(lo), to_f32(hi)); };
    uint32_t fa[4] = {pk(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]), pk(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]),
                      pk(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]), pk(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9])};
    uint32_t fb[2] = {pk(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]), pk(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g])};
    float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
    mma_m16n8k16<T>(acc, fa, fb);
    d[g * 8 + 2 * t] = acc[0];
    d[g * 8 + 2 * t + 1] = acc[1];
    d[(g + 8) * 8 + 2 * t] = acc[2];
    d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}
// ldmatrix x4 and x4.trans of 32 rows of 8 16-bit values (row r at lane r's address, rows stored
// 16 bytes apart in shared memory): out[(variant·32 + lane)·4 + j] = register j.
__global__ void ldmatrix_selftest_kernel(uint32_t* out, const uint16_t* rows) {
    using namespace keel_cuda;
    KEEL_DYNAMIC_SHARED(uint16_t, sm);
    int l = threadIdx.x;
    for (int i = 0; i < 8; i++) sm[l * 8 + i] = rows[l * 8 + i];
    __syncwarp();
    uint32_t r[4];
    ldmatrix_x4(r, sm + l * 8);
    for (int j = 0; j < 4; j++) out[l * 4 + j] = r[j];
    ldmatrix_x4_trans(r, sm + l * 8);
    for (int j = 0; j < 4; j++) out[(32 + l) * 4 + j] = r[j];
}
// cp.async: lane l copies 16 bytes of src + 8l (16-bit units) to shared memory with src_bytes =
// 16, except lane 3 (8: the rest zero-filled) and lane 5 (0: all zeros); then the shared bytes out.
__global__ void cp_async_selftest_kernel(uint16_t* out, const uint16_t* src) {
    using namespace keel_cuda;
    KEEL_DYNAMIC_SHARED(uint16_t, sm);
    int l = threadIdx.x;
    for (int i = 0; i < 8; i++) sm[l * 8 + i] = 0x7777;  // what a copy that never landed leaves
    __syncthreads();
    cp_async16(sm + l * 8, src + l * 8, l == 3 ? 8 : l == 5 ? 0 : 16);
    cp_async_commit();
#ifdef KEEL_CUDA_EMULATION
    out[32 * 8 + l] = sm[l * 8];  // before the wait: the emulation shows the old bytes (a GPU may not)
#endif
    cp_async_wait<0>();
    __syncthreads();
    for (int i = 0; i < 8; i++) out[l * 8 + i] = sm[((l + 1) % 32) * 8 + i];  // another lane's copy: visible after the barrier
}
// A warp whose lane 5 skips the product: undefined on the GPU, an error under emulation.
__global__ void mma_divergent_kernel(float* d) {
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float acc[4] = {0, 0, 0, 0};
    if (threadIdx.x != 5) keel_cuda::mma_m16n8k16<bf16>(acc, a, b);
    __syncwarp();
    d[threadIdx.x] = acc[0];
}

template <typename T> static void test_mma(const char* what) {
    std::vector<float> a = lowp_rounded<T>(randn(256, 40)), b = lowp_rounded<T>(randn(128, 41)), c = randn(128, 42);
    std::vector<float> want(128);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            double s = c[i * 8 + j];
            for (int k = 0; k < 16; k++) s += (double)a[i * 16 + k] * b[k * 8 + j];
            want[i * 8 + j] = (float)s;
        }
    T *da = dev_upload(lowp_store<T>(a)), *db = dev_upload(lowp_store<T>(b));
    float *dc = dev_upload(c), *dd = dev_upload(std::vector<float>(128, 7.0f));
#ifdef KEEL_CUDA_EMULATION
    uint64_t flops0 = emu::profile().mma_flops;
#endif
    KEEL_LAUNCH(mma_selftest_kernel<T>, 1, 32, 0, MAIN_STREAM)(dd, da, db, dc);
    CUDA_CHECK_LAUNCH();
    // (the emulation adds in k order in fp32; a GPU's tensor core in its own order and alignment)
    check_close(std::string("mma.sync m16n8k16 by the documented fragment layout ") + what, dev_download(dd, 128), want, 1e-5, 1e-5);
#ifdef KEEL_CUDA_EMULATION
    check_true(std::string("mma.sync counts 2·16·8·16 FLOPs in mma_flops ") + what, emu::profile().mma_flops - flops0 == 4096);
#endif
    dev_free(da), dev_free(db), dev_free(dc), dev_free(dd);
}

static void test_ldmatrix_cp_async() {
    std::vector<uint16_t> rows(256);
    for (int i = 0; i < 256; i++) rows[i] = (uint16_t)(1000 + i);  // row r, element e: 1000 + 8r + e
    uint16_t* drows = dev_upload(rows);
    uint32_t* dout = dev_upload(std::vector<uint32_t>(256, 0));
    KEEL_LAUNCH(ldmatrix_selftest_kernel, 1, 32, 512, MAIN_STREAM)(dout, drows);
    CUDA_CHECK_LAUNCH();
    std::vector<uint32_t> got = dev_download(dout, 256);
    int bad = 0;
    for (int l = 0; l < 32; l++)
        for (int j = 0; j < 4; j++)
            for (int hi = 0; hi < 2; hi++) {
                int g = l / 4, t = l % 4;
                // matrix j is rows 8j..8j+7; plain: (row g, element 2t+hi); trans: (row 2t+hi, element g)
                uint32_t want_plain = 1000 + 8 * (8 * j + g) + 2 * t + hi, want_trans = 1000 + 8 * (8 * j + 2 * t + hi) + g;
                bad += ((got[l * 4 + j] >> (16 * hi)) & 0xffffu) != want_plain;
                bad += ((got[(32 + l) * 4 + j] >> (16 * hi)) & 0xffffu) != want_trans;
            }
    check_true("ldmatrix x4 and x4.trans deliver the documented elements to every lane and register (" + std::to_string(bad) + " wrong)", bad == 0);
    uint16_t* dcp = dev_upload(std::vector<uint16_t>(32 * 8 + 32, 0));
    KEEL_LAUNCH(cp_async_selftest_kernel, 1, 32, 512, MAIN_STREAM)(dcp, drows);
    CUDA_CHECK_LAUNCH();
    std::vector<uint16_t> cp = dev_download(dcp, 32 * 8 + 32);
    bad = 0;
    for (int l = 0; l < 32; l++) {
        int src = (l + 1) % 32;
        for (int i = 0; i < 8; i++) {
            uint16_t want = src == 5 || (src == 3 && i >= 4) ? 0 : (uint16_t)(1000 + 8 * src + i);
            bad += cp[l * 8 + i] != want;
        }
    }
    check_true("cp.async 16 bytes with 16, 8 (zero-filled rest) and 0 source bytes, visible to the block after wait + barrier (" +
                   std::to_string(bad) + " wrong)", bad == 0);
#ifdef KEEL_CUDA_EMULATION
    bad = 0;
    for (int l = 0; l < 32; l++) bad += cp[32 * 8 + l] != 0x7777;
    check_true("cp.async emulation: the bytes land at the wait (a read before it sees the old bytes)", bad == 0);
#endif
    dev_free(drows), dev_free(dout), dev_free(dcp);
}

static void test_instructions() {
    test_mma<bf16>("bf16");
    test_mma<__half>("fp16");
    test_ldmatrix_cp_async();
#ifdef KEEL_CUDA_EMULATION
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {  // the child runs the divergent warp; the emulator must exit 3 with a message
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 2);
        float* dd = dev_upload(std::vector<float>(32));
        KEEL_LAUNCH(mma_divergent_kernel, 1, 32, 0, MAIN_STREAM)(dd);
        cudaDeviceSynchronize();  // (a launch runs by the next host wait at the latest)
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    check_true("mma.sync emulation: a lane skipping the instruction is an error (exit 3)", WIFEXITED(status) && WEXITSTATUS(status) == 3);
#endif
}

// ---- double-precision references ---------------------------------------------------------------------
// The softmax input of (b, h, t, u) from fp32-valued inputs, in double, the variant's way.
static double ref_score(const std::vector<float>& inp, int b, int h, int t, int u, int T, int C, int NH, const AttentionOpts& o) {
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    const float* q = &inp[((size_t)b * T + t) * C3 + h * hs];
    const float* k = &inp[((size_t)b * T + u) * C3 + C + h * hs];
    double dot = 0;
    for (int i = 0; i < hs; i++) dot += (double)q[i] * k[i];
    double s = dot / (std::sqrt((double)hs) * o.coeff);
    if (o.alibi) s += (double)o.alibi[h] * u / o.coeff;
    return s * o.coeff;
}
static double ref_mult(const AttentionOpts& o, int b, int h, int t, int u) {
    if (!(o.dropout.p > 0)) return 1.0;
    return dropout_keep(&o.dropout, b, attention_dropout_index(h + o.head_offset, t, u)) ? (float)(1.0 / (1.0 - o.dropout.p)) : 0.0;
}
// x rounded to the storage type L (bf16 or fp16), back in fp32.
template <typename L> static float lowp_round(double x) { return keel_cuda::to_f32(keel_cuda::from_f32<L>((float)x)); }

// The exact log-sum-exp of every row (B,NH,T).
static std::vector<float> ref_lse(const std::vector<float>& inp, int B, int T, int C, int NH, const AttentionOpts& o) {
    std::vector<float> lse((size_t)B * NH * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                std::vector<double> s(t + 1);
                double mx = -INFINITY, sum = 0;
                for (int u = 0; u <= t; u++) mx = std::max(mx, s[u] = ref_score(inp, b, h, t, u, T, C, NH, o));
                for (int u = 0; u <= t; u++) sum += std::exp(s[u] - mx);
                lse[((size_t)b * NH + h) * T + t] = (float)(mx + std::log(sum));
            }
    return lse;
}

// Rounding ambiguity. The kernel's fp32 values of p and dS differ from these double ones by a few
// ulp (the tensor core's summation order, expf), so where a value lies within that distance of a
// bf16 rounding boundary the kernel may round it the other way: one term changes by 2^-8 of itself
// (measured: 0.0015 in a dv element at T = 37, two elements of 28416). The references add up, per
// output element, how far such ambiguous roundings can move it (|Δ rounding|·|other factor|), and
// `absorb` moves the kernel's value toward the reference by at most that much before the check;
// everywhere else the check is the strict one.
static const double P_REL_ERR = 5e-6;  // bound on the relative error of the kernel's fp32 exp(s - m): scores to ~1e-6 absolute, expf 1 ulp
template <typename L> static double round_spread(double x, double err) { return std::fabs((double)lowp_round<L>(x + err) - (double)lowp_round<L>(x - err)); }
static std::vector<float> absorb(std::vector<float> got, const std::vector<float>& want, const std::vector<double>& slack) {
    for (size_t i = 0; i < got.size(); i++) {
        double d = (double)got[i] - want[i];
        if (std::fabs(d) <= slack[i]) got[i] = want[i];
        else got[i] = (float)(got[i] - (d > 0 ? slack[i] : -slack[i]));
    }
    return got;
}

// The flash forward at the kernel's rounding points (see the top of the file), bf16 storage;
// slack (B,T,C): the rounding ambiguity of each output.
template <typename L> static std::vector<float> ref_flash_out(std::vector<double>* slack, const std::vector<float>& inp, int B, int T, int C, int NH,
                                             const AttentionOpts& o) {
    const int BC = keel_cuda::FLASH_BC;
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    std::vector<float> out((size_t)B * T * C);
    slack->assign(out.size(), 0.0);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double m = -INFINITY, l = 0;
                std::vector<double> O(hs, 0.0), s(BC), amb(hs, 0.0);
                for (int k0 = 0; k0 <= t; k0 += BC) {
                    int k1 = std::min(k0 + BC, t + 1);
                    double mt = -INFINITY;
                    for (int u = k0; u < k1; u++) mt = std::max(mt, s[u - k0] = ref_score(inp, b, h, t, u, T, C, NH, o));
                    double mn = std::max(m, mt), corr = std::exp(m - mn);
                    l *= corr;
                    for (int i = 0; i < hs; i++) O[i] *= corr;
                    for (int u = k0; u < k1; u++) {
                        double p = std::exp(s[u - k0] - mn);
                        l += p;
                        double x = p * ref_mult(o, b, h, t, u), P = lowp_round<L>(x), spread = round_spread<L>(x, x * P_REL_ERR);
                        for (int i = 0; i < hs; i++) {
                            double v = inp[((size_t)b * T + u) * C3 + 2 * C + h * hs + i];
                            O[i] += P * v;
                            amb[i] = amb[i] * corr + spread * std::fabs(v);
                        }
                    }
                    m = mn;
                }
                for (int i = 0; i < hs; i++) {
                    out[((size_t)b * T + t) * C + h * hs + i] = lowp_round<L>(O[i] / l);
                    (*slack)[((size_t)b * T + t) * C + h * hs + i] = amb[i] / l;
                }
            }
    return out;
}

// The flash backward at the kernel's rounding points, from the kernel's out and lse, bf16 storage;
// slack (B,T,3C): the rounding ambiguity of each element.
template <typename L> static std::vector<float> ref_flash_dinp(std::vector<double>* slack, const std::vector<float>& inp, const std::vector<float>& dout, const std::vector<float>& out,
                                              const std::vector<float>& lse, const std::vector<float>& dinp0, int B, int T, int C, int NH,
                                              const AttentionOpts& o) {
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    double scale = 1.0f / std::sqrt((float)hs);
    std::vector<double> d(dinp0.size(), 0.0);
    slack->assign(dinp0.size(), 0.0);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float* dO = &dout[((size_t)b * T + t) * C + h * hs];
                const float* o_t = &out[((size_t)b * T + t) * C + h * hs];
                double D = 0, D_abs = 0;
                for (int i = 0; i < hs; i++) D += (double)dO[i] * o_t[i], D_abs += std::fabs((double)dO[i] * o_t[i]);
                double lse_t = lse[((size_t)b * NH + h) * T + t];
                for (int u = 0; u <= t; u++) {
                    const float* v = &inp[((size_t)b * T + u) * C3 + 2 * C + h * hs];
                    double p = std::exp(ref_score(inp, b, h, t, u, T, C, NH, o) - lse_t), mlt = ref_mult(o, b, h, t, u), dP = 0, dP_abs = 0;
                    for (int i = 0; i < hs; i++) dP += (double)dO[i] * v[i], dP_abs += std::fabs((double)dO[i] * v[i]);
                    double x = p * mlt, y = p * (dP * mlt - D) * scale;
                    double P = lowp_round<L>(x), dS = lowp_round<L>(y);
                    // fp32 sums of dP and D: within ~1e-6 of their absolute sums (5e-6 taken)
                    double P_spread = round_spread<L>(x, x * P_REL_ERR);
                    double dS_spread = round_spread<L>(y, std::fabs(y) * P_REL_ERR + p * scale * 5e-6 * (dP_abs * mlt + D_abs));
                    for (int i = 0; i < hs; i++) {
                        double k_i = inp[((size_t)b * T + u) * C3 + C + h * hs + i], q_i = inp[((size_t)b * T + t) * C3 + h * hs + i];
                        d[((size_t)b * T + t) * C3 + h * hs + i] += dS * k_i;      // dq_t
                        d[((size_t)b * T + u) * C3 + C + h * hs + i] += dS * q_i;  // dk_u
                        d[((size_t)b * T + u) * C3 + 2 * C + h * hs + i] += P * dO[i];  // dv_u
                        (*slack)[((size_t)b * T + t) * C3 + h * hs + i] += dS_spread * std::fabs(k_i);
                        (*slack)[((size_t)b * T + u) * C3 + C + h * hs + i] += dS_spread * std::fabs(q_i);
                        (*slack)[((size_t)b * T + u) * C3 + 2 * C + h * hs + i] += P_spread * std::fabs(dO[i]);
                    }
                }
            }
    std::vector<float> r(dinp0.size());
    for (size_t i = 0; i < r.size(); i++) r[i] = lowp_round<L>((double)dinp0[i] + (float)d[i]);
    return r;
}

// ---- 2. the CPU twin -----------------------------------------------------------------------------------
static void test_cpu_twin(int B, int T, int C, int NH, const AttnVariant& v) {
    char tag[128];
    snprintf(tag, sizeof tag, " %s B=%d T=%d C=%d NH=%d", v.name, B, T, C, NH);
    AttnOptsPair op;
    attn_opts_make(&op, v, NH);
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;
    std::vector<float> inp = randn(n_inp, 50), dout = randn(n_out, 51), dinp0 = randn(n_inp, 52);  // (B,T,3C) (B,T,C) (B,T,3C)
    std::vector<float> out(n_out), att(n_att), dinp = dinp0;                                       // (B,T,C) (B,NH,T,T) (B,T,3C)
    std::vector<float> f_out(n_out), f_lse((size_t)B * NH * T), f_dinp = dinp0;                    // (B,T,C) (B,NH,T) (B,T,3C)
    attention_forward(out.data(), att.data(), inp.data(), B, T, C, NH, &op.host);
    attention_backward(dinp.data(), dout.data(), inp.data(), att.data(), B, T, C, NH, &op.host);
    flash_attention_forward(f_out.data(), f_lse.data(), inp.data(), B, T, C, NH, &op.host);
    flash_attention_backward(f_dinp.data(), dout.data(), inp.data(), f_out.data(), f_lse.data(), B, T, C, NH, &op.host);
    check_close(std::string("cpu flash_attention_forward out = attention_forward's") + tag, f_out, out, 1e-6, 1e-7);
    check_close(std::string("cpu flash_attention_forward lse") + tag, f_lse, ref_lse(inp, B, T, C, NH, op.host), 1e-6, 1e-6);
    check_close(std::string("cpu flash_attention_backward dinp = attention_backward's") + tag, f_dinp, dinp, 1e-5, 1e-6 * rms_of(dinp));
}

// ---- 3. the CUDA path in bf16 ------------------------------------------------------------------------
// Flash vs the GEMM path: each differs from the exact result by its own bf16 roundings of the
// products' operands (measured at T = 130, all variants on: max |error| of out 0.011 for both,
// rms(out) 0.33, about 3.5% of the rms), so they agree within 2% relative plus 5% of the rms. dinp
// gets a floor of 10% of its rms: flash's D = dout·out uses the bf16 out, so where the exact dS is 0
// (query row t = 0: one key, p = 1, dP = D) flash has dS = (dP - D)/√hs of the order of
// 2^-9·|dout||v|, where the GEMM path's Σ att·datt cancels exactly (measured: 0.018 at rms 0.25).
// A 5% error of the largest element (≈ 7× rms) plus the floor is still caught (negative controls).
static const double GEMM_RTOL = 2e-2, GEMM_FLOOR_OUT = 5e-2, GEMM_FLOOR_DINP = 1e-1;

struct FlashRun {
    std::vector<float> out, lse, dinp;
};
template <typename L> static FlashRun flash_run(const std::vector<float>& inp, const std::vector<float>& dout, const std::vector<float>& dinp0, int B, int T, int C,
                          int NH, const AttentionOpts* o) {
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_lse = (size_t)B * NH * T;
    L *d_inp = dev_upload(lowp_store<L>(inp)), *d_dout = dev_upload(lowp_store<L>(dout)), *d_dinp = dev_upload(lowp_store<L>(dinp0));
    L* d_out = dev_upload(lowp_store<L>(std::vector<float>(n_out, 7.0f)));  // junk: every element must be written
    float* d_lse = dev_upload(std::vector<float>(n_lse, 7.0f));
    keel_cuda::flash_attention_forward(d_out, d_lse, d_inp, B, T, C, NH, o);
    keel_cuda::flash_attention_backward(d_dinp, d_dout, d_inp, d_out, d_lse, B, T, C, NH, o);
    FlashRun r{lowp_widen(dev_download(d_out, n_out)), dev_download(d_lse, n_lse), lowp_widen(dev_download(d_dinp, n_inp))};
    for (void* p : {(void*)d_inp, (void*)d_dout, (void*)d_dinp, (void*)d_out, (void*)d_lse}) dev_free(p);
    return r;
}

// The backward at WARPS warps a block (4: 64 keys; 8: 128, FlashAttention-2's shape), its dQ chain
// added as CHAIN says (FLASH_CHAIN_EARLY: the trainer's; SERIAL; DEFER), on the forward's out and lse,
// from dinp0: its dinp.
template <typename L, int WARPS, int CHAIN = keel_cuda::FLASH_CHAIN_EARLY, int STEP = 0>
static std::vector<float> flash_backward_w(const std::vector<float>& inp, const std::vector<float>& dout, const FlashRun& f,
                                           const std::vector<float>& dinp0, int B, int T, int C, int NH, const AttentionOpts* o) {
    size_t n_inp = (size_t)B * T * 3 * C;
    L *d_inp = dev_upload(lowp_store<L>(inp)), *d_dout = dev_upload(lowp_store<L>(dout)), *d_dinp = dev_upload(lowp_store<L>(dinp0));
    L* d_out = dev_upload(lowp_store<L>(f.out));
    float* d_lse = dev_upload(f.lse);
    if (C / NH == 64) keel_cuda::flash_backward_launch<L, 64, true, WARPS, CHAIN, STEP>(d_dinp, d_dout, d_inp, d_out, d_lse, B, T, C, NH, o);
    else keel_cuda::flash_backward_launch<L, 128, true, WARPS, CHAIN, STEP>(d_dinp, d_dout, d_inp, d_out, d_lse, B, T, C, NH, o);
    std::vector<float> r = lowp_widen(dev_download(d_dinp, n_inp));
    for (void* p : {(void*)d_inp, (void*)d_dout, (void*)d_dinp, (void*)d_out, (void*)d_lse}) dev_free(p);
    return r;
}

template <typename L> static void test_flash(int B, int T, int C, int NH, const AttnVariant& v, bool repeat, bool vs_gemm, bool controls) {
    char tag[128];
    snprintf(tag, sizeof tag, " %s %s B=%d T=%d C=%d NH=%d", sizeof(L) == 2 && std::is_same<L, bf16>::value ? "bf16" : "fp16", v.name, B, T, C, NH);
    AttnOptsPair op;
    attn_opts_make(&op, v, NH);
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C;
    std::vector<float> inp = lowp_rounded<L>(randn(n_inp, 60)), dout = lowp_rounded<L>(randn(n_out, 61));  // (B,T,3C) (B,T,C)
    std::vector<float> dinp0 = lowp_rounded<L>(randn(n_inp, 62));                                              // (B,T,3C)
    keel_cuda::flash_attention_reserve<L>(B, T, C, NH);
#ifdef KEEL_CUDA_EMULATION
    uint64_t allocs0 = emu::profile().allocations + 5, flops0 = emu::profile().mma_flops;  // flash_run's 5 buffers
#endif
    FlashRun g = flash_run<L>(inp, dout, dinp0, B, T, C, NH, &op.dev);
#ifdef KEEL_CUDA_EMULATION
    check_true(std::string("flash allocates nothing after flash_attention_reserve") + tag, emu::profile().allocations == allocs0);
    check_true(std::string("flash products on tensor cores (mma_flops > 0)") + tag, emu::profile().mma_flops > flops0);
#endif
    std::vector<double> slack_out, slack_dinp;
    std::vector<float> want_out = ref_flash_out<L>(&slack_out, inp, B, T, C, NH, op.host);
    check_lowp(std::string("flash_attention_forward out") + tag, absorb(g.out, want_out, slack_out), want_out);
    std::vector<float> want_lse = ref_lse(inp, B, T, C, NH, op.host);
    check_close(std::string("flash_attention_forward lse (fp32)") + tag, g.lse, want_lse, 2e-6, 2e-6);
    std::vector<float> want_dinp = ref_flash_dinp<L>(&slack_dinp, inp, dout, g.out, g.lse, dinp0, B, T, C, NH, op.host);
    check_lowp(std::string("flash_attention_backward dinp") + tag, absorb(g.dinp, want_dinp, slack_dinp), want_dinp);
    {  // each warp count against the reference; dK and dV the same bits at 4 and 8 (each warp's 16 keys see
       // the same query blocks in the same order), dQ summed over 64- or 128-key tiles (another order); the
       // launcher's default (4 warps at both head sizes) is that kernel, byte for byte; and the dQ
       // chain added serially, deferred by a step or acquiring its turn by a second read, and steps of
       // 32 queries at head size 64, give every byte of the default's (the same sums in the same order)
        std::vector<float> d4 = flash_backward_w<L, 4>(inp, dout, g, dinp0, B, T, C, NH, &op.dev);
        std::vector<float> d8 = flash_backward_w<L, 8>(inp, dout, g, dinp0, B, T, C, NH, &op.dev);
        check_lowp(std::string("flash_attention_backward, 4 warps x 64 keys, dinp") + tag, absorb(d4, want_dinp, slack_dinp), want_dinp);
        check_lowp(std::string("flash_attention_backward, 8 warps x 128 keys, dinp") + tag, absorb(d8, want_dinp, slack_dinp), want_dinp);
        bool kv_same = true;
        for (size_t r = 0; r < (size_t)B * T; r++)
            kv_same = kv_same && memcmp(&d8[r * 3 * C + C], &d4[r * 3 * C + C], 2 * C * sizeof(float)) == 0;
        check_true(std::string("flash_attention_backward, 8 warps x 128 keys: dK, dV = the 4-warp kernel's, same bytes") + tag, kv_same);
        check_true(std::string("flash_attention_backward: the launcher's default is 4 warps, same bytes") + tag, g.dinp == d4);
        if (C / NH == 64) {  // 32-query steps (3 blocks a multiprocessor; the trainer times them against 64 at start-up)
            std::vector<float> d32 = flash_backward_w<L, 4, keel_cuda::FLASH_CHAIN_EARLY, 32>(inp, dout, g, dinp0, B, T, C, NH, &op.dev);
            check_true(std::string("flash_attention_backward, 32-query steps: the 64-query steps' bytes") + tag, d32 == d4);
        }
        if constexpr (std::is_same<L, bf16>::value) {  // the kernel lab's variants, built in bf16 only (kernel_instances.cu)
            std::vector<float> d4d = flash_backward_w<L, 4, keel_cuda::FLASH_CHAIN_DEFER>(inp, dout, g, dinp0, B, T, C, NH, &op.dev);
            std::vector<float> d8d = flash_backward_w<L, 8, keel_cuda::FLASH_CHAIN_DEFER>(inp, dout, g, dinp0, B, T, C, NH, &op.dev);
            check_true(std::string("flash_attention_backward, dQ chain deferred a step: the default chain's bytes at 4 and 8 warps") + tag,
                       d4d == d4 && d8d == d8);
            std::vector<float> d4s = flash_backward_w<L, 4, keel_cuda::FLASH_CHAIN_SERIAL>(inp, dout, g, dinp0, B, T, C, NH, &op.dev);
            std::vector<float> d8s = flash_backward_w<L, 8, keel_cuda::FLASH_CHAIN_SERIAL>(inp, dout, g, dinp0, B, T, C, NH, &op.dev);
            check_true(std::string("flash_attention_backward, dQ chain added serially: the default chain's bytes at 4 and 8 warps") + tag,
                       d4s == d4 && d8s == d8);
            std::vector<float> d4a = flash_backward_w<L, 4, keel_cuda::FLASH_CHAIN_EARLY_ACQUIRE>(inp, dout, g, dinp0, B, T, C, NH, &op.dev);
            check_true(std::string("flash_attention_backward, the early chain acquiring by a second read: the default chain's bytes") + tag, d4a == d4);
        }
    }
    if (controls) {  // the perturbed element's slack counts too
        std::string w = std::string("flash_attention_forward out") + tag;
        expect_fail(w + " with a small element doubled", [&] { return check_lowp(w, absorb(perturb_small(g.out, want_out), want_out, slack_out), want_out); });
        expect_fail(w + " with the largest element 2% off", [&] { return check_lowp(w, absorb(perturb_large(g.out, want_out), want_out, slack_out), want_out); });
        w = std::string("flash_attention_backward dinp") + tag;
        expect_fail(w + " with a small element doubled", [&] { return check_lowp(w, absorb(perturb_small(g.dinp, want_dinp), want_dinp, slack_dinp), want_dinp); });
        expect_fail(w + " with the largest element 2% off", [&] { return check_lowp(w, absorb(perturb_large(g.dinp, want_dinp), want_dinp, slack_dinp), want_dinp); });
        size_t amb = 0;
        double worst = 0, floor = LOWP_ATOL_RMS * rms_of(want_dinp);
        for (size_t i = 0; i < slack_dinp.size(); i++) {
            amb += slack_dinp[i] > 0.1 * (floor + LOWP_RTOL * std::fabs(want_dinp[i]));
            worst = std::max(worst, slack_dinp[i] / (floor + LOWP_RTOL * std::fabs(want_dinp[i])));
        }
        printf("      (rounding ambiguity over 10%% of the element's tolerance: %zu of %zu dinp elements; at most %.3g of it)\n", amb,
               slack_dinp.size(), worst);
    }
    if (repeat) {
        FlashRun g2 = flash_run<L>(inp, dout, dinp0, B, T, C, NH, &op.dev);
        check_true(std::string("flash forward and backward byte-repeatable") + tag,
                   same_bytes_f32(g.out, g2.out) && same_bytes_f32(g.lse, g2.lse) && same_bytes_f32(g.dinp, g2.dinp));
    }
    if (vs_gemm) {  // the GEMM path on the same bf16 inputs, both backwards from dinp = 0 (so dinp is the op's result)
        size_t n_att = (size_t)B * NH * T * T;
        std::vector<float> zero(n_inp, 0.0f);
        FlashRun f = flash_run<L>(inp, dout, zero, B, T, C, NH, &op.dev);
        keel_cuda::attention_reserve<L>(B, T, C, NH);
        L *d_inp = dev_upload(lowp_store<L>(inp)), *d_dout = dev_upload(lowp_store<L>(dout)), *d_dinp = dev_upload(lowp_store<L>(zero));
        L *d_out = dev_upload(lowp_store<L>(std::vector<float>(n_out))), *d_att = dev_upload(lowp_store<L>(std::vector<float>(n_att)));
        keel_cuda::attention_forward(d_out, d_att, d_inp, B, T, C, NH, &op.dev);
        keel_cuda::attention_backward(d_dinp, d_dout, d_inp, d_att, B, T, C, NH, &op.dev);
        std::vector<float> gemm_out = lowp_widen(dev_download(d_out, n_out)), gemm_dinp = lowp_widen(dev_download(d_dinp, n_inp));
        check_close(std::string("flash out vs the GEMM path") + tag, f.out, gemm_out, GEMM_RTOL, GEMM_FLOOR_OUT * rms_of(gemm_out));
        check_close(std::string("flash dinp vs the GEMM path") + tag, f.dinp, gemm_dinp, GEMM_RTOL, GEMM_FLOOR_DINP * rms_of(gemm_dinp));
        if (controls)
            for (int which = 0; which < 2; which++) {
                const std::vector<float>& got = which ? f.dinp : f.out;
                const std::vector<float>& want = which ? gemm_dinp : gemm_out;
                std::string w = std::string(which ? "flash dinp" : "flash out") + " vs the GEMM path" + tag;
                double floor = which ? GEMM_FLOOR_DINP : GEMM_FLOOR_OUT;
                expect_fail(w + " with the largest element 5% off", [&] {
                    std::vector<float> x = got;
                    size_t k = 0;
                    for (size_t i = 0; i < want.size(); i++)
                        if (std::fabs(want[i]) > std::fabs(want[k])) k = i;
                    x[k] = 1.05f * want[k] + (want[k] > 0 ? 1 : -1) * (float)(floor * rms_of(want));
                    return check_close(w, x, want, GEMM_RTOL, floor * rms_of(want));
                });
            }
        for (L* p : {d_inp, d_dout, d_dinp, d_out, d_att}) dev_free(p);
    }
}

// The mask is the model head's: head_offset changes which elements drop.
static void test_flash_head_offset_matters(int B, int T, int C, int NH) {
    AttnOptsPair a, b;
    attn_opts_make(&a, AttnVariant{"", ATTN_SCALING_STANDARD, 1.0, false, 0.25, 0}, NH);
    attn_opts_make(&b, AttnVariant{"", ATTN_SCALING_STANDARD, 1.0, false, 0.25, 2}, NH);
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C;
    std::vector<float> inp = randn(n_inp, 63), dout = randn(n_out, 64), dinp0(n_inp, 0.0f);
    FlashRun r0 = flash_run<bf16>(inp, dout, dinp0, B, T, C, NH, &a.dev), r2 = flash_run<bf16>(inp, dout, dinp0, B, T, C, NH, &b.dev);
    size_t differ = 0;
    for (size_t i = 0; i < n_out; i++) differ += r0.out[i] != r2.out[i];
    check_true("flash dropout: head_offset=2 differs from head_offset=0 (" + std::to_string(differ) + " of " + std::to_string(n_out) + " outputs)",
               differ > n_out / 4);
}

// dinp_write: the backward writes every element of dinp without reading it (the model's gradient
// buffer is not zeroed first). From a NaN-filled dinp it must give the bytes of the accumulating
// backward from a zeroed one (one rounding of the same fp32 sum either way); an element it missed
// stays NaN.
template <typename L> static void test_flash_write(int B, int T, int C, int NH, const AttnVariant& v) {
    char tag[96];
    snprintf(tag, sizeof tag, " %s B=%d T=%d C=%d NH=%d", v.name, B, T, C, NH);
    AttnOptsPair op;
    attn_opts_make(&op, v, NH);
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_lse = (size_t)B * NH * T;
    std::vector<float> inp = lowp_rounded<L>(randn(n_inp, 70)), dout = lowp_rounded<L>(randn(n_out, 71));
    L *d_inp = dev_upload(lowp_store<L>(inp)), *d_dout = dev_upload(lowp_store<L>(dout)), *d_out = dev_upload(lowp_store<L>(std::vector<float>(n_out)));
    float* d_lse = dev_upload(std::vector<float>(n_lse));
    L* d_acc = dev_upload(lowp_store<L>(std::vector<float>(n_inp, 0.0f)));
    L* d_wr = dev_upload(lowp_store<L>(std::vector<float>(n_inp, NAN)));
    keel_cuda::flash_attention_forward(d_out, d_lse, d_inp, B, T, C, NH, &op.dev);
    keel_cuda::flash_attention_backward(d_acc, d_dout, d_inp, d_out, d_lse, B, T, C, NH, &op.dev);
    keel_cuda::flash_attention_backward(d_wr, d_dout, d_inp, d_out, d_lse, B, T, C, NH, &op.dev, true);
    std::vector<L> acc = dev_download(d_acc, n_inp), wr = dev_download(d_wr, n_inp);
    size_t nan = 0;
    for (L x : wr) nan += std::isnan(keel_cuda::to_f32(x));
    check_true(std::string("flash backward dinp_write: every element written (") + std::to_string(nan) + " left NaN)" + tag, nan == 0);
    check_true(std::string("flash backward dinp_write = accumulating from zero, byte for byte") + tag,
               memcmp(acc.data(), wr.data(), n_inp * sizeof(L)) == 0);
    for (void* p : {(void*)d_inp, (void*)d_dout, (void*)d_out, (void*)d_lse, (void*)d_acc, (void*)d_wr}) dev_free(p);
}

// Which dQ chain the backward takes by the device's shared memory: the early chain unless its staging
// tile costs blocks a multiprocessor (head size 128 at 4 warps on an A100's 164 KB), and the
// launcher asks this device (the emulated one has an A100's shared memory).
static void test_chain_choice() {
    using namespace keel_cuda;
    const size_t a100 = 164 * 1024, h100 = 228 * 1024, rsv = 1024;
    struct Case {
        int hs, warps;
        size_t smem;
        int want;
        const char* what;
    } cases[] = {{64, 8, a100, FLASH_CHAIN_EARLY, "hs 64, 8 warps, A100"},   {64, 8, h100, FLASH_CHAIN_EARLY, "hs 64, 8 warps, H100"},
                 {64, 4, a100, FLASH_CHAIN_EARLY, "hs 64, 4 warps, A100"},   {128, 4, a100, FLASH_CHAIN_SERIAL, "hs 128, 4 warps, A100"},
                 {128, 4, h100, FLASH_CHAIN_EARLY, "hs 128, 4 warps, H100"}, {128, 8, a100, FLASH_CHAIN_EARLY, "hs 128, 8 warps, A100"}};
    for (const Case& c : cases)
        check_true(std::string("flash backward's dQ chain by shared memory: ") + c.what + (c.want == FLASH_CHAIN_EARLY ? ": early" : ": serial"),
                   flash_backward_chain(c.hs, c.warps, c.smem, rsv) == c.want);
#ifdef KEEL_CUDA_EMULATION
    check_true("flash backward's dQ chain on this (emulated A100) device: early at hs 64, serial at hs 128 with 4 warps",
               flash_backward_chain_here(64, 8) == FLASH_CHAIN_EARLY && flash_backward_chain_here(128, 4) == FLASH_CHAIN_SERIAL);
#else
    printf("      this GPU's dQ chain at hs 128, 4 warps: %s\n", flash_backward_chain_here(128, 4) == FLASH_CHAIN_EARLY ? "early" : "serial");
#endif
}

// The grid's block order (flash_block, flash_groups): every (tile, head) exactly once; within a head
// the ranks in index order (the backward's dQ chain waits only for lower ranks of its head: the
// blocks that start first); groups of equal size (within one head) holding three waves of blocks or
// more. The list schedule that motivates it: blocks of the lengths the kernels give them started in
// index order on `slots` block slots, each as one frees up, at GPT-2 124M's shape on 132
// multiprocessors (2 forward blocks of 128 queries each, 1 backward block of 8 warps): the grouped
// order ends nearer the average slot's work than head by head. And on the emulated device, every number of groups gives
// the same bytes.
static double list_schedule_tail(int ntiles, int BH, int groups, long long slots, bool forward) {
    std::priority_queue<double, std::vector<double>, std::greater<double>> q;
    for (long long k = 0; k < slots; k++) q.push(0.0);
    double end = 0, work = 0;
    for (unsigned i = 0; i < (unsigned)(ntiles * BH); i++) {
        keel_cuda::FlashBlock fb = keel_cuda::flash_block(i, ntiles, BH, groups);
        // key tiles a query tile multiplies; 64-query steps of a 128-key tile from its diagonal on
        double len = forward ? keel_cuda::flash_forward_tile(fb.rank, ntiles) + 1 : 2.0 * (ntiles - keel_cuda::flash_backward_tile(fb.rank, ntiles));
        double t = q.top() + len;
        q.pop();
        q.push(t);
        end = std::max(end, t);
        work += len;
    }
    return end / (work / (double)slots);
}
static void test_block_order() {
    using namespace keel_cuda;
    bool bijective = true, ranks_ascend = true, groups_even = true, groups_big = true;
    for (int ntiles : {1, 2, 3, 8, 16, 17})
        for (int BH : {1, 2, 3, 5, 7, 12, 25, 64})
            for (int groups : {1, 2, 3, 4, 5, BH}) {
                if (groups > BH) continue;
                std::vector<int> seen((size_t)ntiles * BH, -1);
                std::vector<int> head_group(BH, -1);
                for (unsigned i = 0; i < (unsigned)(ntiles * BH); i++) {
                    FlashBlock fb = flash_block(i, ntiles, BH, groups);
                    bool in = fb.rank >= 0 && fb.rank < ntiles && fb.bh >= 0 && fb.bh < BH;
                    if (!in || seen[(size_t)fb.bh * ntiles + fb.rank] >= 0) {
                        bijective = false;
                        continue;
                    }
                    seen[(size_t)fb.bh * ntiles + fb.rank] = (int)i;
                }
                for (int bh = 0; bh < BH; bh++)
                    for (int r = 1; r < ntiles; r++) ranks_ascend = ranks_ascend && seen[(size_t)bh * ntiles + r - 1] < seen[(size_t)bh * ntiles + r];
                // a group: the heads whose rank-0 blocks come between two blocks of rank > 0; sizes from the
                // runs of rank-0 blocks in index order
                std::vector<int> sizes;
                int run = 0;
                for (unsigned i = 0; i < (unsigned)(ntiles * BH); i++) {
                    FlashBlock fb = flash_block(i, ntiles, BH, groups);
                    if (fb.rank == 0) run++;
                    else if (run) sizes.push_back(run), run = 0;
                }
                if (run) sizes.push_back(run);
                if (ntiles > 1) {
                    int lo = *std::min_element(sizes.begin(), sizes.end()), hi = *std::max_element(sizes.begin(), sizes.end());
                    groups_even = groups_even && (int)sizes.size() == groups && hi - lo <= 1;
                }
            }
    for (int BH : {1, 7, 48, 192, 400, 1000})
        for (int ntiles : {1, 8, 16, 32})
            for (long long slots : {8LL, 132LL, 396LL}) {
                int n = flash_groups(BH, ntiles, slots);
                groups_big = groups_big && n >= 1 && n <= BH && (n == 1 || (long long)(BH / n) * ntiles >= 3 * slots);
            }
    check_true("flash block order: every (tile, head) once, for any number of groups", bijective);
    check_true("flash block order: a head's tile ranks start in rank order (the dQ chain's waits are on blocks started before)", ranks_ascend);
    check_true("flash block order: the heads split into the groups asked for, of equal size (within one head)", groups_even);
    check_true("flash block order: each group holds at least three waves of blocks (or there is one group)", groups_big);
    const int BH = 16 * 12;
    double f1 = list_schedule_tail(8, BH, BH, 264, true), fg = list_schedule_tail(8, BH, flash_groups(BH, 8, 264), 264, true);
    double b1 = list_schedule_tail(8, BH, BH, 132, false), bg = list_schedule_tail(8, BH, flash_groups(BH, 8, 132), 132, false);
    printf("      list schedule at GPT-2 124M (B=16, T=1024), end / average work: forward head by head %.3f, grouped %.3f; backward %.3f, %.3f\n", f1, fg,
           b1, bg);
    check_true("flash block order: the grouped order's list schedule ends sooner than head by head (forward and backward)", fg < f1 - 0.1 && bg < b1 - 0.01);
}

// Forward and backward with the grid's heads in 1, 2 and 4 groups, head by head, and the launcher's
// choice: the same bytes.
template <typename L, int HS> static void test_flash_order(int B, int T, int NH, const AttnVariant& v) {
    const int C = HS * NH;
    AttnOptsPair op;
    attn_opts_make(&op, v, NH);
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_lse = (size_t)B * NH * T;
    std::vector<float> inp = lowp_rounded<L>(randn(n_inp, 80)), dout = lowp_rounded<L>(randn(n_out, 81));
    L *d_inp = dev_upload(lowp_store<L>(inp)), *d_dout = dev_upload(lowp_store<L>(dout)), *d_out = dev_upload(lowp_store<L>(std::vector<float>(n_out)));
    L* d_dinp = dev_upload(lowp_store<L>(std::vector<float>(n_inp)));
    float* d_lse = dev_upload(std::vector<float>(n_lse));
    keel_cuda::flash_attention_reserve<L>(B, T, C, NH);
    std::vector<L> out0, dinp0;
    std::vector<float> lse0;
    bool same = true;
    for (int groups : {0, 1, 2, 4, B * NH}) {
        keel_cuda::flash_attention_forward(d_out, d_lse, d_inp, B, T, C, NH, &op.dev, groups);
        keel_cuda::flash_attention_backward(d_dinp, d_dout, d_inp, d_out, d_lse, B, T, C, NH, &op.dev, true, groups);
        std::vector<L> out = dev_download(d_out, n_out), dinp = dev_download(d_dinp, n_inp);
        std::vector<float> lse = dev_download(d_lse, n_lse);
        if (groups == 0) out0 = out, dinp0 = dinp, lse0 = lse;
        else same = same && memcmp(out.data(), out0.data(), n_out * sizeof(L)) == 0 && memcmp(dinp.data(), dinp0.data(), n_inp * sizeof(L)) == 0 &&
                    same_bytes_f32(lse, lse0);
    }
    char tag[96];
    snprintf(tag, sizeof tag, " (%s, B=%d T=%d hs=%d NH=%d)", v.name, B, T, HS, NH);
    check_true(std::string("flash forward and backward: heads in 1, 2, 4 groups, head by head and the launcher's, the same bytes") + tag, same);
    if (HS == 64) {  // the 128-query blocks (two row tiles a warp) against the launcher's 64 (one)
        keel_cuda::flash_attention_forward(d_out, d_lse, d_inp, B, T, C, NH, &op.dev, 0, 2);
        std::vector<L> out = dev_download(d_out, n_out);
        std::vector<float> lse = dev_download(d_lse, n_lse);
        check_true(std::string("flash forward: two row tiles a warp (128-query blocks) and one (64), the same bytes") + tag,
                   memcmp(out.data(), out0.data(), n_out * sizeof(L)) == 0 && same_bytes_f32(lse, lse0));
    }
    for (void* p : {(void*)d_inp, (void*)d_dout, (void*)d_out, (void*)d_dinp, (void*)d_lse}) dev_free(p);
}

// The start-up trial of the backward's query step (flash_trial, flash_attention_tune): a candidate of
// the same bytes (32-query steps) may be picked, one whose bytes differ never is, whatever the
// times; the tuner fills its inputs, settles once, says how, and the launcher then runs the step it
// chose, with the default's bytes. (The emulator's times are its own: which candidate wins here means
// nothing.)
static void test_step_trial() {
    using namespace keel_cuda;
    const int B = 1, T = 130, C = 128, NH = 2;
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C;
    bf16 *qkv = dev_upload(lowp_store<bf16>(randn(n_inp, 70))), *out = dev_upload(std::vector<bf16>(n_out));
    bf16* dqkv = dev_upload(std::vector<bf16>(n_inp));
    float* lse = dev_upload(std::vector<float>((size_t)B * NH * T));
    AttentionOpts o;
    keel_cuda::flash_attention_forward<bf16>(out, lse, qkv, B, T, C, NH, &o);
    FlashTrial same = flash_trial([&] { flash_backward_launch<bf16, 64>(dqkv, out, qkv, out, lse, B, T, C, NH, &o, true); },
                                  [&] { flash_backward_launch<bf16, 64, true, 4, FLASH_CHAIN_EARLY, 32>(dqkv, out, qkv, out, lse, B, T, C, NH, &o, true); },
                                  dqkv, n_inp * sizeof(bf16), 3);
    // (no times printed: test_emu_sanitize compares this test's output across schedules byte for byte)
    check_true("flash_trial: 32-query steps write the 64-query steps' bytes, timed, either may be picked",
               same.same && same.ms[0] > 0 && same.ms[1] > 0 && same.pick == (same.ms[1] < same.ms[0] ? 1 : 0));
    // (a candidate computing something else: the default kernel on the first position alone, from
    // another output gradient, the q slice)
    FlashTrial differ = flash_trial([&] { flash_backward_launch<bf16, 64>(dqkv, out, qkv, out, lse, B, T, C, NH, &o, true); },
                                    [&] { flash_backward_launch<bf16, 64>(dqkv, qkv, qkv, out, lse, 1, 1, C, NH, &o, true); },
                                    dqkv, n_inp * sizeof(bf16), 3);
    check_true("flash_trial: a candidate whose bytes differ is not picked", !differ.same && differ.pick == 0);
    FlashTrial untimed = flash_trial([&] { flash_backward_launch<bf16, 64>(dqkv, out, qkv, out, lse, B, T, C, NH, &o, true); },
                                     [&] { flash_backward_launch<bf16, 64, true, 4, FLASH_CHAIN_EARLY, 32>(dqkv, out, qkv, out, lse, B, T, C, NH, &o, true); },
                                     dqkv, n_inp * sizeof(bf16), 0);
    check_true("flash_trial: with no timed rounds the default stays", untimed.same && untimed.pick == 0);
    // the rule itself, on given times (the trials above cannot choose theirs)
    check_true("flash_trial_pick: the faster candidate of the same bytes, never one whose bytes differ, never untimed",
               flash_trial_pick(true, 2.f, 1.f, 5) == 1 && flash_trial_pick(true, 1.f, 2.f, 5) == 0 && flash_trial_pick(true, 1.f, 1.f, 5) == 0 &&
                   flash_trial_pick(false, 2.f, 1.f, 5) == 0 && flash_trial_pick(true, 2.f, 1.f, 0) == 0);

    setenv("KEEL_FLASH_BWD_STEP", "auto", 1);  // (read once, here first: the emulation's default is 64 untimed)
    check_true("flash_attention_tune: nothing chosen before it runs", flash_bwd_step().step == 0 && keel_cuda::flash_attention_note().empty());
    keel_cuda::flash_attention_tune<bf16>(qkv, out, lse, dqkv, B, T, C, NH);
    std::vector<float> filled = lowp_widen(dev_download(qkv, n_inp));
    bool in_range = true;
    for (float x : filled) in_range = in_range && x >= -1.f && x < 1.f;
    int step = flash_bwd_step().step;
    std::string note = keel_cuda::flash_attention_note();
    check_true("flash_attention_tune: settles 64 or 32 by the trial and says so, its inputs filled in [-1, 1)",
               (step == 64 || step == 32) && note.find("-query steps (timed at start-up on B=1, T=130") != std::string::npos && in_range);
    flash_bwd_step().step = 0;
    keel_cuda::flash_attention_tune<bf16>(qkv, out, lse, dqkv, 1, 64, 256, 2);  // head size 128: nothing to choose
    check_true("flash_attention_tune: head size 128 has nothing to choose", flash_bwd_step().step == 0);
    // the launcher runs the step chosen (the emulator's register check names each kernel launched, with
    // its template arguments), with the same bytes either way
    std::vector<bf16> by[2];
    bool ran32[2] = {false, false};
    for (int k = 0; k < 2; k++) {
        flash_bwd_step().step = k ? 32 : 64;
#ifdef KEEL_CUDA_EMULATION
        emu::RegistersMode was = emu::registers_mode();
        emu::registers_mode() = emu::REGISTERS_REPORT;  // (assigned: set_registers_mode would print the report at exit)
        emu::registers_largest_block().clear();
#endif
        keel_cuda::flash_attention_backward<bf16>(dqkv, out, qkv, out, lse, B, T, C, NH, &o, true);
        by[k] = dev_download(dqkv, n_inp);
#ifdef KEEL_CUDA_EMULATION
        for (const auto& kv : emu::registers_largest_block())
            ran32[k] = ran32[k] || kv.first == "keel_cuda::flash_attention_backward_kernel<__nv_bfloat16, 64, true, 4, 1, 32>";
        emu::registers_largest_block().clear();
        emu::registers_mode() = was;
#else
        ran32[k] = k == 1;
#endif
    }
    check_true("flash_attention_backward runs 32-query steps when chosen, 64 otherwise, with the same bytes",
               !ran32[0] && ran32[1] && memcmp(by[0].data(), by[1].data(), n_inp * sizeof(bf16)) == 0);
    flash_bwd_step().step = step;
    for (void* p : {(void*)qkv, (void*)out, (void*)dqkv, (void*)lse}) dev_free(p);
}

int main() {
    test_layouts();
    test_chain_choice();
    test_block_order();
    test_instructions();
    const AttnVariant variants[] = {
        {"standard", ATTN_SCALING_STANDARD, 1.0, false, 0.0, 0},
        {"qk-inward", ATTN_SCALING_QK_INWARD, 1.0, false, 0.0, 0},
        {"coeff=3", ATTN_SCALING_STANDARD, 3.0, false, 0.0, 0},
        {"qk-inward coeff=3", ATTN_SCALING_QK_INWARD, 3.0, false, 0.0, 0},
        {"alibi", ATTN_SCALING_STANDARD, 1.0, true, 0.0, 0},
        {"dropout p=0.25", ATTN_SCALING_STANDARD, 1.0, false, 0.25, 0},
        {"dropout p=0.25 head_offset=3", ATTN_SCALING_STANDARD, 1.0, false, 0.25, 3},
        {"all: qk-inward coeff=2 alibi dropout head_offset=5", ATTN_SCALING_QK_INWARD, 2.0, true, 0.25, 5},
    };
    struct Shape { int B, T, C, NH; };
    // CPU twin: head sizes 8, 12 and 64 (the twin has no tile constraints)
    const Shape cpu_shapes[] = {{1, 1, 16, 2}, {2, 37, 48, 4}, {1, 70, 128, 2}};
    for (const Shape& s : cpu_shapes)
        for (const AttnVariant& v : variants) test_cpu_twin(s.B, s.T, s.C, s.NH, v);
    // CUDA, bf16, every variant: hs = 64 at T = 1, 37 (B = 2), 130; hs = 128 at T = 37 and 130; all
    // against the GEMM path but T = 1 (covered by the others' row 0); byte-repeatability at T = 130;
    // negative controls on the standard and the all-knobs variant.
    for (int vi = 0; vi < 8; vi++) {
        const AttnVariant& v = variants[vi];
        bool ctl = vi == 0 || vi == 7;
        test_flash<bf16>(1, 1, 128, 2, v, false, false, false);
        test_flash<bf16>(2, 37, 128, 2, v, false, true, false);
        test_flash<bf16>(1, 130, 128, 2, v, true, true, ctl);
        test_flash<bf16>(1, 37, 256, 2, v, false, true, false);
        test_flash<bf16>(1, 130, 256, 2, v, vi == 7, ctl, ctl);
    }
    test_flash<bf16>(1, 64, 64, 1, variants[5], false, false, false);  // T = one whole tile
    test_flash_write<bf16>(2, 130, 128, 2, variants[7]);
    test_flash_write<bf16>(1, 100, 256, 2, variants[0]);
    // fp16 storage: the same kernels with __half fragments
    test_flash<__half>(2, 37, 128, 2, variants[0], false, true, false);
    test_flash<__half>(1, 130, 256, 2, variants[7], true, true, true);
    test_flash_head_offset_matters(1, 37, 128, 2);
    test_step_trial();
    test_flash_order<bf16, 64>(2, 300, 3, variants[7]);  // 6 heads, 5 query tiles, 3 key tiles of 128
    test_flash_order<bf16, 128>(1, 200, 5, variants[0]);
    test_flash_order<__half, 64>(1, 130, 2, variants[0]);  // plain scores: the FULL tiles of both row-tile counts
    printf("flash_attention_supported: hs 64 bf16 %d, hs 128 fp16 %d, hs 96 bf16 %d, hs 64 fp32 %d\n", keel_cuda::flash_attention_supported(64, 2),
           keel_cuda::flash_attention_supported(128, 2), keel_cuda::flash_attention_supported(96, 2), keel_cuda::flash_attention_supported(64, 4));
    check_true("flash_attention_supported: hs 64/128 in 16-bit only",
               keel_cuda::flash_attention_supported(64, 2) && keel_cuda::flash_attention_supported(128, 2) &&
                   !keel_cuda::flash_attention_supported(96, 2) && !keel_cuda::flash_attention_supported(64, 4));
    return cuda_test_finish();
}
