// cuda/adamw.cuh — the optimizer's elementwise kernels; the contract of cpu/adamw.h:
//   adamw_update: m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²
//                 p -= lr·( (m/bc1) / (sqrt(v/bc2) + eps) + wd·p )      (bc1, bc2 passed in)
//   adamw_update_pieces: adamw_update on every piece of an AdamPieces table (wd where the piece
//                 decays, else 0), writing p_c = round_to_F(p) of each updated element when p_c is
//                 given — in ONE launch (below)
//   grad_scale:        g *= s
//   grad_round_fp16:   g = fp16_round(g)                                   (llmc/ops.h)
//   grad_unscale_check: g *= (float)inv_scale, returns whether any result is inf/NaN
//   sumsq_f64, count_zeros: Σ x² in double and the number of exact zeros of one range
//   sumsq_zeros_chunks: both of those for many chunks of one buffer in one launch (the gradient
//                 norm's per-chunk partials, llmc/optimizer.h); out[2c] = Σ x², out[2c+1] = zeros.
// Legend: n elements of one flat range; nchunks ranges (offset, numel) of one buffer; npieces rows
// of an update table.
//
// Numerics. The elementwise ops run one thread per element with the CPU's float formula, rounded
// the CPU's way: the CPU build has -ffp-contract=off, while nvcc fuses a·b+c into one FMA by
// default (--fmad=true), so the kernels spell every operation as an _rn intrinsic (fmul_rn & co.
// in cuda/common.cuh), which nvcc never contracts and which fast-math flags do not relax. sqrt and division are
// IEEE round-to-nearest on both sides: the updated p, m, v are bit-identical to the CPU's.
// The reductions are deterministic but not the CPU's order (its 8 lanes would be 8 threads): each
// thread adds its grid-strided elements in ascending order, the block adds its threads in a fixed
// tree (block_sum), a second single-block kernel adds the per-block partials in a fixed order. The
// grid is a function of n alone, so the result is a function of the data alone; it agrees with the
// CPU's sum to ~1e-15..1e-13 relative (exact float squares added in double; the test allows 1e-12).
// Zero counts are exact.
// The unscale check ORs an int flag per block on the host: order-independent, no atomics.
//
// The update of many pieces in one launch (adamw_update_pieces here, adam32/adam8bit_update_pieces
// in cuda/adam8bit.cuh). The optimizer updates ~12·L + 4 pieces (one per tensor and layer: the units
// of llmc/optimizer.h, cut to the rank's shard under ZeRO-1); a launch per piece is ~12·L small
// launches per step, most of them a few thousand elements (biases, LayerNorms) that leave the GPU
// idle. adam_pieces_init uploads the pieces once, at set-up, as a device table (AdamPieceRow) that
// also gives each piece its first CUDA block of the launch: ceil(numel / 1024) blocks for the
// elementwise kinds (256 threads × 4 elements), one per quantization block for 8-bit Adam. A CUDA
// block finds its piece by a binary search over first_block (every thread of the block reads the
// same few rows: broadcasts from L1); a thread then owns 4 consecutive elements of it, moved as one
// 16-byte access per buffer where all 4 are there and the address is aligned, else one by one with
// the same arithmetic. What changes per step is a kernel argument (lr, the bias corrections), or,
// for the percentile-clipping factors, a few bytes per piece copied host→device only when they
// changed. No read-back.
// The compute copy. Under --bf16/--fp16 the forward reads a bf16/fp16 copy of the fp32 master
// weights, refreshed after every step by cast_from_f32 over the whole buffer: a second full pass
// over the parameters. The update writes it instead, from the value it has just stored, rounded as
// cast_from_f32 rounds (from_f32: round to nearest even), so the copy ends byte for byte what the
// cast would write — for the elements the update touches; the optimizer passes p_c only when those
// are all of the rank's parameters (llmc/optimizer.h).
#pragma once
#include <algorithm>
#include <vector>

#include "llmc/cuda/common.cuh"

namespace keel_cuda {

// ---- elementwise --------------------------------------------------------------------------------
// One element of adamw_update: updates *p, *m, *v (registers) from g.
__device__ inline void adamw_element(float* p, float* m, float* v, float g, float lr, float beta1, float beta2, float eps,
                                     float wd, float bc1, float bc2) {
    float mi = fadd_rn(fmul_rn(beta1, *m), fmul_rn(1.0f - beta1, g));
    float vi = fadd_rn(fmul_rn(beta2, *v), fmul_rn(fmul_rn(1.0f - beta2, g), g));
    *m = mi;
    *v = vi;
    float mhat = fdiv_rn(mi, bc1), vhat = fdiv_rn(vi, bc2);
    float step = fadd_rn(fdiv_rn(mhat, fadd_rn(fsqrt_rn(vhat), eps)), fmul_rn(wd, *p));
    *p = fsub_rn(*p, fmul_rn(lr, step));
}

__global__ void adamw_update_kernel(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                                    float beta2, float eps, float wd, float bc1, float bc2, float clip) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float pi = p[i], mi = m[i], vi = v[i];
    adamw_element(&pi, &mi, &vi, fmul_rn(g[i], clip), lr, beta1, beta2, eps, wd, bc1, bc2);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
}

// ---- the update table: many pieces in one launch --------------------------------------------------
// One row per piece, in device memory (adam_pieces_init). Index spaces: offset_param is an element of
// the rank's flat parameter buffer (p, g, p_c), offset_state of the state buffers the op is given
// (m, v or the 8-bit codes), offset_block of the absmax arrays; first_block is a CUDA block of the
// update's grid.
struct AdamPieceRow {
    int64_t offset_param;
    int64_t offset_state;
    int64_t offset_block;   // 8-bit pieces; 0 otherwise
    int64_t numel;
    int64_t first_block;    // the launch's first block working on this piece
    int64_t decay;          // 1: weight decay applies (the parameter table's decay group)
};

// The pieces of one update op, set up once. The per-step factors (percentile clipping, 8-bit Adam's
// kinds) sit right after the rows, in the same allocation.
struct AdamPieces {
    int npieces = 0;
    int block_size = 0;                 // 8-bit Adam: the quantization block, one CUDA block each; 0: elementwise
    unsigned grid = 0;                  // the update's CUDA blocks
    AdamPieceRow* rows = nullptr;       // (npieces) device
    float* gnorm_scale = nullptr;       // (npieces) device: the factors of the last step that had them
    std::vector<float> gnorm_scale_host;  // what gnorm_scale holds (empty: nothing uploaded yet)
};

enum { ADAM_THREADS = 256, ADAM_VEC = 4 };  // elementwise kinds: a thread owns 4 consecutive elements

// The piece of CUDA block b: the last row whose first_block is ≤ b (a piece of no blocks is skipped,
// as the piece after it starts at the same block).
__device__ inline const AdamPieceRow* adam_piece_of_block(const AdamPieceRow* rows, int npieces, int64_t b) {
    int lo = 0, hi = npieces - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (rows[mid].first_block <= b) lo = mid;
        else hi = mid - 1;
    }
    return rows + lo;
}

// ADAM_VEC consecutive values of which the first len exist: one aligned 16-byte (p_c: 8-byte)
// access when all are there, else one by one. Either way the same values.
template <typename T> __device__ inline bool adam_vec_whole(const T* x, int len) {
    return len == ADAM_VEC && ((uintptr_t)x % sizeof(Pack<T, ADAM_VEC>)) == 0;
}
template <typename T> __device__ inline Pack<T, ADAM_VEC> adam_vec_load(const T* x, int len) {
    if (adam_vec_whole(x, len)) return pack_load<T, ADAM_VEC>(x);
    Pack<T, ADAM_VEC> r;
    KEEL_UNROLL for (int j = 0; j < ADAM_VEC; j++) r.v[j] = j < len ? x[j] : T(0);
    return r;
}
template <typename T> __device__ inline void adam_vec_store(T* x, const Pack<T, ADAM_VEC>& r, int len) {
    if (adam_vec_whole(x, len)) pack_store<T, ADAM_VEC>(x, r);
    else
        KEEL_UNROLL for (int j = 0; j < ADAM_VEC; j++)
            if (j < len) x[j] = r.v[j];
}
// The compute copy of ADAM_VEC updated parameters, rounded as cast_from_f32 rounds.
template <typename F> __device__ inline void adam_vec_store_copy(F* x, const Pack<float, ADAM_VEC>& p, int len) {
    Pack<F, ADAM_VEC> r;
    KEEL_UNROLL for (int j = 0; j < ADAM_VEC; j++) r.v[j] = from_f32<F>(p.v[j]);
    adam_vec_store(x, r, len);
}

// The elements of the piece a thread of an elementwise update owns: [*i, *i + *len) of piece *r.
// False when it owns none (the piece's last block is partial).
__device__ inline bool adam_vec_of_thread(const AdamPieceRow* rows, int npieces, const AdamPieceRow** r, int64_t* i, int* len) {
    *r = adam_piece_of_block(rows, npieces, blockIdx.x);
    *i = ((int64_t)(blockIdx.x - (*r)->first_block) * blockDim.x + threadIdx.x) * ADAM_VEC;
    if (*i >= (*r)->numel) return false;
    *len = (*r)->numel - *i < ADAM_VEC ? (int)((*r)->numel - *i) : ADAM_VEC;
    return true;
}

// Grid: (AdamPieces::grid); block: (ADAM_THREADS). p_c: null when there is no copy to write.
template <typename F>
__global__ void adamw_update_pieces_kernel(float* p, F* p_c, const float* g, float* m, float* v, const AdamPieceRow* rows,
                                           int npieces, float lr, float beta1, float beta2, float eps, float wd, float bc1,
                                           float bc2, float clip) {
    const AdamPieceRow* r;
    int64_t i;
    int len;
    if (!adam_vec_of_thread(rows, npieces, &r, &i, &len)) return;
    int64_t e = r->offset_param + i, s = r->offset_state + i;
    float wd_piece = r->decay ? wd : 0.0f;
    Pack<float, ADAM_VEC> pp = adam_vec_load(p + e, len), gg = adam_vec_load(g + e, len);
    Pack<float, ADAM_VEC> mm = adam_vec_load(m + s, len), vv = adam_vec_load(v + s, len);
    KEEL_UNROLL for (int j = 0; j < ADAM_VEC; j++)  // (a constant trip count: the packs stay in registers)
        if (j < len) adamw_element(&pp.v[j], &mm.v[j], &vv.v[j], fmul_rn(gg.v[j], clip), lr, beta1, beta2, eps, wd_piece, bc1, bc2);
    adam_vec_store(m + s, mm, len);
    adam_vec_store(v + s, vv, len);
    adam_vec_store(p + e, pp, len);
    if (p_c) adam_vec_store_copy(p_c + e, pp, len);
}

__global__ void grad_scale_kernel(float* g, int64_t n, float s) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = fmul_rn(g[i], s);
}

__global__ void grad_round_fp16_kernel(float* g, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = fp16_round(g[i]);
}

// Non-finite: exponent all ones (inf or NaN). On the bits, so no host/device isfinite overloads.
__device__ inline bool nonfinite_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7F800000u) == 0x7F800000u;
}

// flags: (gridDim.x) — 1 where the block saw a non-finite unscaled value.
__global__ void grad_unscale_check_kernel(int* flags, float* g, size_t n, float s) {
    KEEL_SHARED(int, shared, [32]);
    int found = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = fmul_rn(g[i], s);
        g[i] = x;
        found |= nonfinite_f32(x);
    }
    found = block_sum(found, shared);  // a count of threads that found one: any non-zero is "yes"
    if (threadIdx.x == 0) flags[blockIdx.x] = found != 0;
}

// ---- reductions ---------------------------------------------------------------------------------
// What one element adds to the reduction, and its type: a square in double, or a zero count. A
// float's square is exact in double (24 + 24 significand bits < 53), so whether nvcc fuses it into
// the accumulating add changes nothing.
// In: the element type read (converted to float first).
struct SumSqTerm {
    typedef double T;
    typedef float In;
    __device__ static T of(float x) { return (double)x * (double)x; }
};
template <typename X> struct SumSqOf : SumSqTerm { typedef X In; };
struct ZeroTerm {
    typedef long long T;
    typedef float In;
    __device__ static T of(float x) { return x == 0.0f ? 1 : 0; }
};

enum { REDUCE_THREADS = 256, REDUCE_MAX_BLOCKS = 1024, REDUCE_PER_THREAD = 16 };

// The grid of the first pass: a function of n alone (the determinism contract), enough blocks to
// fill a GPU, at least REDUCE_PER_THREAD elements per thread so small ranges use few blocks.
static inline unsigned reduce_blocks(int64_t n) {
    unsigned b = ceil_div((size_t)n, (size_t)REDUCE_THREADS * REDUCE_PER_THREAD);
    return b < (unsigned)REDUCE_MAX_BLOCKS ? b : (unsigned)REDUCE_MAX_BLOCKS;
}

// partial: (gridDim.x) — block b's sum over the elements i ≡ (b·blockDim + t) mod (grid·blockDim).
template <typename Term> __global__ void reduce_partials_kernel(typename Term::T* partial, const typename Term::In* x, int64_t n) {
    typedef typename Term::T T;
    KEEL_SHARED(T, shared, [32]);
    T acc = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc += Term::of(to_f32(x[i]));
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block: thread t adds partials t, t + blockDim, ... in order, then the fixed tree; out: (1).
template <typename T> __global__ void reduce_final_kernel(T* out, const T* partial, int nparts) {
    KEEL_SHARED(T, shared, [32]);
    T acc = 0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += partial[i];
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) *out = acc;
}

// Runs both passes and copies the result to the host (the copy waits for the kernels).
template <typename Term> static typename Term::T reduce_to_host(const typename Term::In* x, int64_t n) {
    typedef typename Term::T T;
    static DeviceScratch scratch;  // (blocks + 1) partials, the last slot the result
    if (n <= 0) return 0;
    unsigned blocks = reduce_blocks(n);
    T* partial = (T*)scratch_reserve(&scratch, (blocks + 1) * sizeof(T));
    KEEL_LAUNCH(reduce_partials_kernel<Term>, blocks, REDUCE_THREADS, 0, MAIN_STREAM)(partial, x, n);
    CUDA_CHECK_LAUNCH();
    KEEL_LAUNCH(reduce_final_kernel<T>, 1, REDUCE_THREADS, 0, MAIN_STREAM)(partial + blocks, partial, (int)blocks);
    CUDA_CHECK_LAUNCH();
    T result;
    device_to_host(&result, partial + blocks, sizeof(T));
    return result;
}

// One block per chunk. table: (2, nchunks) — element offsets, then numels; out: (nchunks, 2) —
// Σ x² and the zero count (exact in a double below 2^53) of each chunk.
// Loads are 16 bytes (Pack128: 4 floats) wherever the chunk allows: a chunk starts at any element
// (a unit's offset), so its first 0-3 elements up to a 16-byte boundary and its last 0-3 are read one
// by one, each by one thread (lane j of the first warp takes head element j and tail element j); the
// body is read in whole packs, pack i by thread i mod blockDim. The order of the sums is a function of
// the chunk's length and alignment only: the same bits every run.
__global__ void sumsq_zeros_chunks_kernel(double* out, const float* base, const int64_t* table, int nchunks) {
    KEEL_SHARED(double, shared_d, [32]);
    KEEL_SHARED(long long, shared_z, [32]);
    typedef Pack128<float> P;
    int c = blockIdx.x;
    const float* x = base + table[c];
    int64_t n = table[nchunks + c];
    int64_t head = (int64_t)(((sizeof(P) - (uintptr_t)x % sizeof(P)) % sizeof(P)) / sizeof(float));
    if (head > n) head = n;
    int64_t npacks = (n - head) / P::SIZE, tail0 = head + npacks * P::SIZE;
    double sumsq = 0;
    long long zeros = 0;
    for (int64_t i = threadIdx.x; i < npacks; i += blockDim.x) {
        P p = load128(x + head + i * P::SIZE);
        double s = 0;
        KEEL_UNROLL for (int j = 0; j < P::SIZE; j++) {
            s += SumSqTerm::of(p.v[j]);
            zeros += ZeroTerm::of(p.v[j]);
        }
        sumsq += s;
    }
    if ((int64_t)threadIdx.x < head) {
        sumsq += SumSqTerm::of(x[threadIdx.x]);
        zeros += ZeroTerm::of(x[threadIdx.x]);
    }
    if ((int64_t)threadIdx.x < n - tail0) {
        sumsq += SumSqTerm::of(x[tail0 + threadIdx.x]);
        zeros += ZeroTerm::of(x[tail0 + threadIdx.x]);
    }
    sumsq = block_sum(sumsq, shared_d);
    zeros = block_sum(zeros, shared_z);
    if (threadIdx.x == 0) {
        out[2 * c] = sumsq;
        out[2 * c + 1] = (double)zeros;
    }
}

// ---- launchers ----------------------------------------------------------------------------------
static inline void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                                float beta2, float eps, float wd, float bc1, float bc2, float clip = 1.0f) {
    if (n <= 0) return;
    KEEL_LAUNCH(adamw_update_kernel, ceil_div(n, 256), 256, 0, MAIN_STREAM)(p, g, m, v, n, lr, beta1, beta2, eps, wd, bc1, bc2, clip);
    CUDA_CHECK_LAUNCH();
}

// The table of npieces pieces (host arrays; see AdamPieceRow), uploaded once. block_size: 8-bit
// Adam's quantization block (a CUDA block each), or 0 for the elementwise kinds (1024 elements a
// CUDA block). One cudaMalloc of npieces·(sizeof(AdamPieceRow) + 4) bytes (llmc/optimizer.h counts it
// for --dry-run), none when npieces is 0.
static inline void adam_pieces_init(AdamPieces* t, const int64_t* offset_param, const int64_t* offset_state,
                                    const int64_t* offset_block, const int64_t* numel, const uint8_t* decay, int npieces,
                                    int block_size) {
    *t = AdamPieces();
    t->npieces = npieces;
    t->block_size = block_size;
    if (npieces == 0) return;
    std::vector<AdamPieceRow> rows((size_t)npieces);
    int64_t per_block = block_size > 0 ? block_size : (int64_t)ADAM_THREADS * ADAM_VEC, blocks = 0;
    for (int k = 0; k < npieces; k++) {
        rows[k] = {offset_param[k], offset_state[k], offset_block[k], numel[k], blocks, decay[k] ? 1 : 0};
        blocks += (numel[k] + per_block - 1) / per_block;
    }
    if (blocks > 0x7fffffff) keel_die("adam_pieces_init: %lld CUDA blocks, over the grid's limit", (long long)blocks);
    t->grid = (unsigned)blocks;
    size_t bytes = (size_t)npieces * (sizeof(AdamPieceRow) + sizeof(float));
    CUDA_CHECK(cudaMalloc(&t->rows, bytes));
    t->gnorm_scale = (float*)(t->rows + npieces);
    host_to_device(t->rows, rows.data(), rows.size() * sizeof(AdamPieceRow));
}

static inline void adam_pieces_free(AdamPieces* t) {
    if (t->rows) CUDA_CHECK(cudaFree(t->rows));
    *t = AdamPieces();
}

// Puts this step's per-piece factors (host, npieces) on the device: a copy only when they changed.
static inline const float* adam_pieces_scales(AdamPieces* t, const float* gnorm_scale) {
    size_t n = (size_t)t->npieces;
    if (t->gnorm_scale_host.size() != n || memcmp(t->gnorm_scale_host.data(), gnorm_scale, n * sizeof(float)) != 0) {
        t->gnorm_scale_host.assign(gnorm_scale, gnorm_scale + n);  // the copy's source stays alive and unchanged
        CUDA_CHECK(cudaMemcpyAsync(t->gnorm_scale, t->gnorm_scale_host.data(), n * sizeof(float), cudaMemcpyHostToDevice, MAIN_STREAM));
    }
    return t->gnorm_scale;
}

// adamw_update over every piece of t in one launch; wd applies to the pieces that decay. p_c: the
// compute copy to write (same layout as p), or null.
template <typename F>
static inline void adamw_update_pieces(float* p, F* p_c, const float* g, float* m, float* v, const AdamPieces* t, float lr,
                                       float beta1, float beta2, float eps, float wd, float bc1, float bc2, float clip = 1.0f) {
    if (t->block_size != 0) keel_die("adamw_update_pieces: the table was set up for 8-bit Adam (block %d)", t->block_size);
    if (t->grid == 0) return;
    KEEL_LAUNCH(adamw_update_pieces_kernel<F>, t->grid, ADAM_THREADS, 0, MAIN_STREAM)(p, p_c, g, m, v, t->rows, t->npieces, lr,
                                                                                      beta1, beta2, eps, wd, bc1, bc2, clip);
    CUDA_CHECK_LAUNCH();
}

// Σx² of any storage type (the layer statistics read bf16 activations).
template <typename X> static inline double sumsq_f64(const X* x, int64_t n) { return reduce_to_host<SumSqOf<X>>(x, n); }

static inline int64_t count_zeros(const float* x, int64_t n) { return (int64_t)reduce_to_host<ZeroTerm>(x, n); }

static inline void grad_scale(float* g, int64_t n, float s) {
    if (n <= 0) return;
    KEEL_LAUNCH(grad_scale_kernel, ceil_div(n, 256), 256, 0, MAIN_STREAM)(g, n, s);
    CUDA_CHECK_LAUNCH();
}

static inline void grad_round_fp16(float* g, size_t n) {
    if (n == 0) return;
    KEEL_LAUNCH(grad_round_fp16_kernel, ceil_div(n, 256), 256, 0, MAIN_STREAM)(g, n);
    CUDA_CHECK_LAUNCH();
}

// param_checksum (llmc/ops.h): every thread sums its elements' terms mod 2⁶⁴, the block's threads
// add theirs into one word with integer atomics — integer sums, so the order cannot change the value
// — and 8 bytes come back to the host.
static __global__ void param_checksum_kernel(unsigned long long* out, const float* x, int64_t n, int64_t first) {
    unsigned long long acc = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc += param_checksum_term(__float_as_uint(x[i]), (uint64_t)(first + i));
    atomicAdd(out, acc);
}
static inline uint64_t param_checksum(const float* x, int64_t n, int64_t first = 0) {
    static DeviceScratch scratch;  // (1) the sum
    unsigned long long* out = (unsigned long long*)scratch_reserve(&scratch, sizeof(unsigned long long));
    device_memset_zero(out, sizeof *out);
    if (n > 0) {
        KEEL_LAUNCH(param_checksum_kernel, reduce_blocks(n), REDUCE_THREADS, 0, MAIN_STREAM)(out, x, n, first);
        CUDA_CHECK_LAUNCH();
    }
    unsigned long long sum = 0;
    device_to_host(&sum, out, sizeof sum);
    return (uint64_t)sum;
}

// inv_scale is rounded to float once, on the host, as the CPU op does (Megatron's convention).
static inline bool grad_unscale_check(float* g, size_t n, double inv_scale) {
    static DeviceScratch scratch;  // (blocks) int flags
    if (n == 0) return false;
    unsigned blocks = reduce_blocks((int64_t)n);
    int* flags = (int*)scratch_reserve(&scratch, blocks * sizeof(int));
    KEEL_LAUNCH(grad_unscale_check_kernel, blocks, REDUCE_THREADS, 0, MAIN_STREAM)(flags, g, n, (float)inv_scale);
    CUDA_CHECK_LAUNCH();
    std::vector<int> host(blocks);
    device_to_host(host.data(), flags, blocks * sizeof(int));
    int found = 0;
    for (int f : host) found |= f;
    return found != 0;
}

// out: host (nchunks, 2); base: device; offsets, numels: host (nchunks). One launch for all chunks.
static inline void sumsq_zeros_chunks(double* out, const float* base, const int64_t* offsets, const int64_t* numels,
                                      size_t nchunks) {
    static DeviceScratch table_scratch, out_scratch;
    if (nchunks == 0) return;
    std::vector<int64_t> table(2 * nchunks);  // (2, nchunks): offsets, then numels
    std::copy(offsets, offsets + nchunks, table.begin());
    std::copy(numels, numels + nchunks, table.begin() + nchunks);
    int64_t* d_table = (int64_t*)scratch_reserve(&table_scratch, table.size() * sizeof(int64_t));
    double* d_out = (double*)scratch_reserve(&out_scratch, 2 * nchunks * sizeof(double));
    host_to_device(d_table, table.data(), table.size() * sizeof(int64_t));
    KEEL_LAUNCH(sumsq_zeros_chunks_kernel, (unsigned)nchunks, REDUCE_THREADS, 0, MAIN_STREAM)(d_out, base, d_table, (int)nchunks);
    CUDA_CHECK_LAUNCH();
    device_to_host(out, d_out, 2 * nchunks * sizeof(double));
}

}  // namespace keel_cuda
