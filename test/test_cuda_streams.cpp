// test_cuda_streams — the ops' shared scratch on two streams, and the device counters a stopped
// launch leaves behind.
//
// Every op that needs scratch (the GEMM attention path's head-major copies and score blocks, the flash
// backward's D and dQ buffers, the bias gradient's partial sums and cuBLASLt's workspace, the LayerNorm
// backward's per-block partials) has one static buffer per process (cuda/common.cuh DeviceScratch). A
// call on another stream than the buffer's last user is ordered after that user by an event. Here two
// calls over different inputs go to two streams back to back; under the emulation the streams' queued
// work runs in a random interleaving (KEEL_EMU_STREAMS=async:SEED, set per seed below) that keeps only
// what CUDA guarantees, so without the hand-over one call's kernels read the other's scratch between
// its own launches — a wrong result, caught byte for byte against the same call made alone. Built for
// a GPU (make test-gpu), the two streams run concurrently on the hardware.
//
// The counters: the LayerNorm backward's blocks count themselves done, and the flash backward's dQ
// chain passes turns, in device words that outlive a launch. A launch that stopped part-way (an
// aborted kernel) or any stale value must not change or stall a later launch: the words are planted
// with stale values and the next launch must give the bytes of a clean one (each launch tags its
// counts; nothing is reset between launches).
#include <algorithm>
#include <cstring>
#include <functional>

#include "llmc/cpu/layernorm.h"
#include "llmc/cuda/attention.cuh"
#include "llmc/cuda/flash_attention.cuh"
#include "llmc/cuda/layernorm.cuh"
#include "llmc/cuda/matmul.cuh"
#include "test/cuda_test.h"

typedef __nv_bfloat16 bf16;

// One op over two input sets: issue(k) queues it on the current op stream for set k (writing, not
// accumulating, every output), outputs(k) reads set k's outputs as bytes, clear(k) fills them with
// 0xff bytes (NaN) on the legacy stream first, so an output left unwritten shows.
struct OpCase {
    std::string name;
    std::function<void(int)> issue;
    std::function<std::vector<uint8_t>(int)> outputs;
    std::function<void(int)> clear;
};

template <typename T> static std::vector<uint8_t> bytes_of(const T* d, size_t n) {
    std::vector<uint8_t> h(n * sizeof(T));
    if (n) CUDA_CHECK(cudaMemcpy(h.data(), d, h.size(), cudaMemcpyDeviceToHost));
    return h;
}
template <typename T> static void fill_nan(T* d, size_t n) { CUDA_CHECK(cudaMemset(d, 0xff, n * sizeof(T))); }
template <typename T> static T* upload_as(const std::vector<float>& v) { return dev_upload(lowp_store<T>(v)); }

// The GEMM attention path, forward then backward (its scratch holds the head-major q, k, v, the
// scores and dP across the op's launches), fp32.
static OpCase gemm_attention_case() {
    const int B = 2, T = 37, C = 32, NH = 4;
    static AttentionOpts o;
    static float *inp[2], *dout[2], *out[2], *att[2], *dinp[2];
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;
    for (int k = 0; k < 2; k++) {
        inp[k] = upload_as<float>(randn(n_inp, 100 + k));
        dout[k] = upload_as<float>(randn(n_out, 110 + k));
        out[k] = upload_as<float>(std::vector<float>(n_out));
        att[k] = upload_as<float>(std::vector<float>(n_att));
        dinp[k] = upload_as<float>(std::vector<float>(n_inp));
    }
    keel_cuda::attention_reserve<float>(B, T, C, NH);
    return {"GEMM attention forward + backward",
            [=](int k) {
                keel_cuda::attention_forward(out[k], att[k], inp[k], B, T, C, NH, &o);
                keel_cuda::attention_backward(dinp[k], dout[k], inp[k], att[k], B, T, C, NH, &o, true);
            },
            [=](int k) {
                std::vector<uint8_t> r = bytes_of(out[k], n_out), d = bytes_of(dinp[k], n_inp);
                r.insert(r.end(), d.begin(), d.end());
                return r;
            },
            [=](int k) {
                fill_nan(out[k], n_out);
                fill_nan(dinp[k], n_inp);
            }};
}

// The flash backward (D by one kernel, then the backward reading it and passing dQ turns), bf16, at
// 4 and 8 warps a block: T = 160 has 3 key tiles of 64 (2 of 128), so each query step's dQ chain has
// several parts.
static const int FL_B = 2, FL_T = 160, FL_C = 128, FL_NH = 2;  // head size 64
template <int WARPS> static OpCase flash_case() {
    const int B = FL_B, T = FL_T, C = FL_C, NH = FL_NH;
    static AttentionOpts o;
    static bf16 *inp[2], *dout[2], *out[2], *dinp[2];
    static float* lse[2];
    size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_lse = (size_t)B * NH * T;
    for (int k = 0; k < 2; k++) {
        inp[k] = upload_as<bf16>(randn(n_inp, 200 + k));
        dout[k] = upload_as<bf16>(randn(n_out, 210 + k));
        out[k] = upload_as<bf16>(std::vector<float>(n_out));
        lse[k] = dev_upload(std::vector<float>(n_lse));
        dinp[k] = upload_as<bf16>(std::vector<float>(n_inp));
        keel_cuda::flash_attention_forward(out[k], lse[k], inp[k], B, T, C, NH, &o);  // the backward's inputs
    }
    keel_cuda::flash_attention_reserve<bf16>(B, T, C, NH);
    return {"flash attention backward, " + std::to_string(WARPS) + " warps a block",
            [=](int k) { keel_cuda::flash_backward_launch<bf16, 64, true, WARPS>(dinp[k], dout[k], inp[k], out[k], lse[k], B, T, C, NH, &o, true); },
            [=](int k) { return bytes_of(dinp[k], n_inp); }, [=](int k) { fill_nan(dinp[k], n_inp); }};
}

// matmul_backward with a bias: cuBLASLt's products (its workspace) and the bias gradient's two-stage
// column sum (its partials), fp32; every output written.
static OpCase matmul_case() {
    const int N = 600, C = 24, OC = 40;  // 600 rows: the bias gradient sums several 256-row chunks
    static float *dout[2], *inp[2], *w[2], *dinp[2], *dw[2], *db[2];
    for (int k = 0; k < 2; k++) {
        dout[k] = upload_as<float>(randn((size_t)N * OC, 300 + k));
        inp[k] = upload_as<float>(randn((size_t)N * C, 310 + k));
        w[k] = upload_as<float>(randn((size_t)OC * C, 320 + k));
        dinp[k] = upload_as<float>(std::vector<float>((size_t)N * C));
        dw[k] = upload_as<float>(std::vector<float>((size_t)OC * C));
        db[k] = upload_as<float>(std::vector<float>(OC));
    }
    keel_cuda::matmul_reserve(N, OC);
    return {"matmul backward with bias",
            [=](int k) { keel_cuda::matmul_backward(dinp[k], dw[k], db[k], dout[k], inp[k], w[k], N, C, OC, true, true); },
            [=](int k) {
                std::vector<uint8_t> r = bytes_of(dinp[k], (size_t)N * C), a = bytes_of(dw[k], (size_t)OC * C), b = bytes_of(db[k], OC);
                r.insert(r.end(), a.begin(), a.end());
                r.insert(r.end(), b.begin(), b.end());
                return r;
            },
            [=](int k) {
                fill_nan(dinp[k], (size_t)N * C);
                fill_nan(dw[k], (size_t)OC * C);
                fill_nan(db[k], OC);
            }};
}

// The LayerNorm backward: 128 rows in 8 blocks of 16, whose partials the last block to finish adds.
static const int LN_N = 128, LN_C = 48;
struct LNData {
    float *dout[2], *inp[2], *w, *mean[2], *rstd[2], *dinp[2], *dw[2], *db[2];
};
static LNData* ln_data() {
    static LNData d;
    static bool made = false;
    if (made) return &d;
    made = true;
    size_t NC = (size_t)LN_N * LN_C;
    d.w = upload_as<float>(randn(LN_C, 409));
    for (int k = 0; k < 2; k++) {
        std::vector<float> x = randn(NC, 400 + k), y(NC), mean(LN_N), rstd(LN_N), w = randn(LN_C, 409), b(LN_C);
        layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), LN_N, LN_C);  // the statistics (CPU op)
        d.inp[k] = upload_as<float>(x);
        d.dout[k] = upload_as<float>(randn(NC, 410 + k));
        d.mean[k] = dev_upload(mean);
        d.rstd[k] = dev_upload(rstd);
        d.dinp[k] = upload_as<float>(std::vector<float>(NC));
        d.dw[k] = upload_as<float>(std::vector<float>(LN_C));
        d.db[k] = upload_as<float>(std::vector<float>(LN_C));
    }
    keel_cuda::layernorm_reserve(LN_N, LN_C);
    return &d;
}
static OpCase layernorm_case() {
    LNData* d = ln_data();
    size_t NC = (size_t)LN_N * LN_C;
    return {"layernorm backward",
            [=](int k) {
                keel_cuda::layernorm_backward(d->dinp[k], d->dw[k], d->db[k], d->dout[k], d->inp[k], d->w, d->mean[k], d->rstd[k], LN_N,
                                              LN_C, true, true);
            },
            [=](int k) {
                std::vector<uint8_t> r = bytes_of(d->dinp[k], NC), a = bytes_of(d->dw[k], LN_C), b = bytes_of(d->db[k], LN_C);
                r.insert(r.end(), a.begin(), a.end());
                r.insert(r.end(), b.begin(), b.end());
                return r;
            },
            [=](int k) {
                fill_nan(d->dinp[k], NC);
                fill_nan(d->dw[k], LN_C);
                fill_nan(d->db[k], LN_C);
            }};
}

// The emulator's streams run apart, from `seed`, for the scope (then as the environment set them:
// KEEL_EMU_STREAMS, which test_emu_sanitize varies).
struct StreamsApart {
#ifdef KEEL_CUDA_EMULATION
    bool async;
    uint64_t rng;
    explicit StreamsApart(uint64_t seed) : async(emu::streams().async), rng(emu::streams().rng) { emu::set_streams(true, seed); }
    ~StreamsApart() {
        CUDA_CHECK(cudaDeviceSynchronize());
        emu::set_streams(async, rng);
    }
#else
    explicit StreamsApart(uint64_t) {}  // a GPU's streams run concurrently by themselves
#endif
};

// Each input set's outputs with the op made alone on keel's stream, set `last` made last (its
// partials are then the ones left in the op's scratch).
static void made_alone(const OpCase& c, std::vector<uint8_t> want[2], int last = 1) {
    for (int k : {1 - last, last}) {
        c.clear(k);
        c.issue(k);
        CUDA_CHECK(cudaDeviceSynchronize());
        want[k] = c.outputs(k);
    }
}
// The next two calls (set 0, then set 1) give the bytes of each made alone.
static bool next_two_match(const OpCase& c, const std::vector<uint8_t> want[2]) {
    c.clear(0);
    c.issue(0);
    c.clear(1);
    c.issue(1);
    CUDA_CHECK(cudaDeviceSynchronize());
    return c.outputs(0) == want[0] && c.outputs(1) == want[1];
}

// Set 0 on stream a and set 1 on stream b, issued back to back, against each made alone.
static const int SEEDS = 16;
static void two_streams(const OpCase& c, cudaStream_t a, cudaStream_t b) {
    std::vector<uint8_t> want[2];
    made_alone(c, want);
    check_true(c.name + ": the two input sets give different outputs (the check below can tell them apart)", want[0] != want[1]);
    int bad = 0;
    for (int seed = 1; seed <= SEEDS; seed++) {
        for (int k = 0; k < 2; k++) c.clear(k);
        CUDA_CHECK(cudaDeviceSynchronize());
        {
            StreamsApart apart((uint64_t)seed);
            {
                OpStreamScope on_a(a);
                c.issue(0);
            }
            {
                OpStreamScope on_b(b);
                c.issue(1);
            }
        }
        if (c.outputs(0) != want[0] || c.outputs(1) != want[1]) bad++;
    }
    check_true(c.name + ": on two streams issued back to back, both calls give the bytes of each made alone (" + std::to_string(SEEDS) +
                   " interleavings, " + std::to_string(bad) + " wrong)",
               bad == 0);
    // and back on keel's own stream, after the other two
    c.clear(0);
    c.issue(0);
    CUDA_CHECK(cudaDeviceSynchronize());
    check_true(c.name + ": the next call on keel's stream after them the same", c.outputs(0) == want[0]);
}

// ---- counters left by a stopped launch --------------------------------------------------------------------
static void stale_layernorm_counter() {
    OpCase c = layernorm_case();
    std::vector<uint8_t> want[2];
    made_alone(c, want, 0);
    keel_cuda::LayerNormScratch* ls = keel_cuda::layernorm_scratch();
    unsigned* done = ls->done;
    const unsigned B = keel_cuda::LN_DONE_COUNT_BITS;
    // a completed launch leaves the word armed for the next one: its tag, count 0 (so each of its
    // blocks counts itself with one add)
    unsigned armed = dev_download(done, 1)[0];
    check_true("layernorm backward: a completed launch leaves the done word armed for the next launch's tag, count 0",
               armed == keel_cuda::layernorm_following_tag(ls) && (armed & ((1u << B) - 1)) == 0);
    int bad = 0;
    for (int kind = 0; kind < 5; kind++) {
        // the partial slots hold the other set's sums: a launch that miscounted would add them in
        c.clear(1);
        c.issue(1);
        CUDA_CHECK(cudaDeviceSynchronize());
        unsigned last_tag = ls->launches << B, next_tag = keel_cuda::layernorm_following_tag(ls);
        // a stale word: what a launch that stopped after 5 of its 8 blocks leaves (its tag, count 5),
        // a count of 3 under tag 0 (no launch's), another tag's full count, all bits set, and the tag
        // before the next launch's at a full count byte (the first block's add carries into the next
        // launch's tag with count 0: it must still count once, by its swap)
        const unsigned stale[] = {last_tag | 5u, 3u, (last_tag + (9u << B)) | 8u, 0xffffffffu, (next_tag - (1u << B)) | 255u};
        CUDA_CHECK(cudaMemcpy(done, &stale[kind], sizeof(unsigned), cudaMemcpyHostToDevice));
        if (!next_two_match(c, want)) bad++;
        // and the launch after a stale word armed the word again
        if (dev_download(done, 1)[0] != keel_cuda::layernorm_following_tag(ls)) bad++;
    }
    check_true("layernorm backward: a stale done word (5 kinds, a stopped launch's among them) changes neither the next launch nor the one "
               "after, and the word is armed again after them (" + std::to_string(bad) + " wrong)",
               bad == 0);
}

// The LayerNorm counter's protocol under every interleaving of its blocks' atomic operations, which the
// emulator (blocks one after another) never makes: layernorm_count_step, one atomic operation of one
// block's thread 0 a call, on a plain word (each call is atomic by construction). For 3 blocks and
// each starting word — armed, the fresh 0, a stopped launch's partial count, other tags, a full count
// byte one tag below (the first add carries into this launch's tag) or two adds below it, all bits
// set — and for 4 blocks from the armed word and the two-adds carry, every interleaving must count each block once: exactly one block last, and only when
// every other block has counted; the word left armed for the next launch (ARMED) or holding the full
// count (the swap loop alone, as first built).
struct ModelWord {  // (host and device, as the step function is: nvcc then has nothing to warn of)
    unsigned v;
    __host__ __device__ unsigned add1() { return v++; }
    __host__ __device__ unsigned load() { return v; }
    __host__ __device__ unsigned cas(unsigned e, unsigned n) {
        unsigned o = v;
        if (o == e) v = n;
        return o;
    }
    __host__ __device__ void exch(unsigned n) { v = n; }
};
struct ModelResult {
    long interleavings = 0, wrong = 0;
};
template <bool ARMED>
static void count_interleavings(std::vector<keel_cuda::LnCount>& c, ModelWord w, unsigned tag, unsigned next, ModelResult* r) {
    const unsigned blocks = (unsigned)c.size();
    bool all_done = true;
    for (size_t i = 0; i < c.size(); i++) {
        if (c[i].state == 3) continue;
        all_done = false;
        std::vector<keel_cuda::LnCount> c2 = c;
        ModelWord w2 = w;
        bool was_counted = c2[i].state >= 2;
        keel_cuda::layernorm_count_step<ARMED>(c2[i], w2, tag, next, blocks);
        if (!was_counted && c2[i].state >= 2 && c2[i].last)  // this step made block i the last: all others counted before it
            for (size_t k = 0; k < c2.size(); k++)
                if (k != i && c2[k].state < 2) r->wrong++;
        count_interleavings<ARMED>(c2, w2, tag, next, r);
    }
    if (!all_done) return;
    r->interleavings++;
    int lasts = 0;
    for (const keel_cuda::LnCount& b : c) lasts += b.last;
    unsigned want = ARMED ? next : tag + blocks;
    if (lasts != 1 || w.v != want) r->wrong++;
}
static void layernorm_counter_interleavings() {
    const unsigned B = keel_cuda::LN_DONE_COUNT_BITS, tag = 77u << B, next = 78u << B;
    const unsigned starts[] = {tag, 0u, (76u << B) | 5u, (300u << B) | 127u, (76u << B) | 255u, (76u << B) | 254u, 0xffffffffu};
    ModelResult armed, swap;
    for (unsigned blocks : {3u, 4u})
        for (unsigned w0 : starts) {
            if (blocks == 4 && w0 != tag && w0 != ((76u << B) | 254u)) continue;  // (4 blocks: 1.3 million interleavings a word)
            std::vector<keel_cuda::LnCount> c(blocks);
            count_interleavings<true>(c, ModelWord{w0}, tag, next, &armed);
            std::vector<keel_cuda::LnCount> c2(blocks);
            count_interleavings<false>(c2, ModelWord{w0}, tag, next, &swap);
        }
    check_true("layernorm done counter, every interleaving of 3 blocks' atomics from 7 starting words and of 4 from 2: each block counted once, one last "
               "after all, the word armed (" + std::to_string(armed.interleavings) + " interleavings, " + std::to_string(armed.wrong) + " wrong)",
               armed.interleavings > 1000 && armed.wrong == 0);
    check_true("the same for the compare-and-swap loop alone (the word left at the full count; " + std::to_string(swap.interleavings) +
                   " interleavings, " + std::to_string(swap.wrong) + " wrong)",
               swap.interleavings > 1000 && swap.wrong == 0);
}

template <int WARPS> static void stale_flash_turns() {
    OpCase c = flash_case<WARPS>();
    std::vector<uint8_t> want[2];
    made_alone(c, want);
    keel_cuda::DeviceScratch* turns = keel_cuda::flash_attention_counters();
    size_t n = turns->bytes / sizeof(int);
    // a completed launch leaves every counter it used — one per head-batch and query step — at 0, no
    // launch's turn: a later launch of another shape (its chains on other counters) finds no tag of
    // an older one there
    size_t used = (size_t)FL_B * FL_NH * ((FL_T + keel_cuda::flash_bq(64) - 1) / keel_cuda::flash_bq(64));
    std::vector<int> left = dev_download((const int*)turns->ptr, used);
    check_true(c.name + ": a completed launch leaves its " + std::to_string(used) + " dQ turn counters at 0",
               used <= n && std::count(left.begin(), left.end(), 0) == (long)used);
    // stale turns: another launch's tag at a middle turn, bare turns (no tag), junk
    const int stale[] = {keel_cuda::flash_turn_value(777, 1), 1, 2, 0x5a5a5a5a};
    int bad = 0;
    for (int v : stale) {
        CUDA_CHECK(cudaMemcpy(turns->ptr, std::vector<int>(n, v).data(), n * sizeof(int), cudaMemcpyHostToDevice));
        if (!next_two_match(c, want)) bad++;
    }
    check_true(c.name + ": stale dQ turn counters (4 kinds) neither stall nor change the next launch nor the one after (" + std::to_string(bad) +
                   " wrong)",
               bad == 0);
}

int main() {
    cudaStream_t a, b;
    CUDA_CHECK(cudaStreamCreate(&a));
    CUDA_CHECK(cudaStreamCreate(&b));
    two_streams(gemm_attention_case(), a, b);
    two_streams(flash_case<4>(), a, b);
    two_streams(flash_case<8>(), a, b);
    two_streams(matmul_case(), a, b);
    two_streams(layernorm_case(), a, b);
    stale_layernorm_counter();
    layernorm_counter_interleavings();
    stale_flash_turns<4>();
    stale_flash_turns<8>();
    return cuda_test_finish();
}
