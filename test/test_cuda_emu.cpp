// test_cuda_emu — the CPU emulation of the CUDA execution model itself (test/cuda_emu): what the
// kernel tests rely on must hold, or they could pass for the wrong reason.
//   - __syncthreads really waits: a shared-memory reduction whose threads read what others wrote;
//   - warp shuffles/ballot/any/all give the lanes' values; a block reduction with partial warps;
//   - a kernel whose barriers do not match is reported as a deadlock (exit 3), not run through;
//   - host code touching device memory dies (SIGSEGV), copies in the wrong direction are refused;
//   - KEEL_EMU_SCHEDULE reorders the blocks of a grid and the threads of a block;
//   - KEEL_EMU_STREAMS=async runs two streams apart unless an event orders them;
//   - bf16/fp16 conversions round to nearest even like the GPU, on known values;
//   - a launch a GPU refuses for registers × threads or __launch_bounds__ is refused, a fitting one runs.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "llmc/cuda/layernorm.cuh"
#include "llmc/cuda/matmul.cuh"
#include "test/cuda_test.h"

using namespace keel_cuda;

// out[block] = Σ in[block·n .. ] through shared memory: thread i writes, the tree reads others'
__global__ void shared_tree_kernel(float* out, const float* in, int n) {
    KEEL_SHARED(float, buf, [256]);
    int i = threadIdx.x;
    buf[i] = i < n ? in[blockIdx.x * n + i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (i < s) buf[i] += buf[i + s];
        __syncthreads();
    }
    if (i == 0) out[blockIdx.x] = buf[0];
}

__global__ void warp_ops_kernel(int* out) {  // out (blockDim.x, 6)
    int lane = threadIdx.x % 32, i = threadIdx.x;
    out[i * 6 + 0] = __shfl_xor_sync(0xffffffffu, i, 1);
    out[i * 6 + 1] = __shfl_down_sync(0xffffffffu, i, 4);
    out[i * 6 + 2] = __shfl_sync(0xffffffffu, i, 3);
    out[i * 6 + 3] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
    out[i * 6 + 4] = __any_sync(0xffffffffu, lane == 7);
    out[i * 6 + 5] = __all_sync(0xffffffffu, lane < 31);
}

__global__ void block_sum_kernel(double* out) {
    KEEL_SHARED(double, sh, [32]);
    double v = block_sum((double)(threadIdx.x + 1), sh);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}

__global__ void mismatched_barrier_kernel(int* x) {
    // half the block waits at the block barrier, the other half at a warp barrier: neither completes
    if (threadIdx.x < 16) __syncthreads();
    else __syncwarp(0xffffffffu);
    x[threadIdx.x] = 1;
}

// Reads its dynamic shared memory's first float (the launch limits' tests: whether it may launch).
__global__ void smem_kernel(float* out) {
    KEEL_DYNAMIC_SHARED(float, sm);
    sm[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.y] = sm[1];
}

// Reads dynamic shared memory that no thread wrote (the poison test: the output is the pattern).
__global__ void uninit_smem_kernel(float* out) {
    KEEL_DYNAMIC_SHARED(float, sm);
    if (threadIdx.x == 0) out[0] = sm[5];
}

// Logs the order in which the threads of the grid run past a warp barrier (the schedule's test).
__global__ void order_log_kernel(int* log, int* counter) {
    __syncwarp();
    log[atomicAdd(counter, 1)] = (int)(blockIdx.x * blockDim.x + threadIdx.x);
}
static std::vector<int> run_order(emu::ScheduleMode mode, uint64_t seed) {
    emu::set_schedule(mode, seed);
    int *log = dev_upload(std::vector<int>(128)), *counter = dev_upload(std::vector<int>(1, 0));
    KEEL_LAUNCH(order_log_kernel, 2, 64, 0, MAIN_STREAM)(log, counter);
    std::vector<int> order = dev_download(log, 128);
    dev_free(log);
    dev_free(counter);
    emu::set_schedule(emu::SCHEDULE_IN_ORDER);
    return order;
}

// Reads a static shared word that no thread wrote (the poison test: the output is the pattern).
__global__ void uninit_static_smem_kernel(float* out) {
    KEEL_SHARED(float, sm, [8]);
    if (threadIdx.x == 0) out[0] = sm[5];
}

__global__ void fill_kernel(int* x, int v) { x[threadIdx.x] = v; }
__global__ void fill_all_kernel(int* x, int v) { x[blockIdx.x * blockDim.x + threadIdx.x] = v; }
__global__ void copy_kernel(int* dst, const int* src) { dst[threadIdx.x] = src[threadIdx.x]; }
// KEEL_EMU_STREAMS=async:seed: x = 7 on stream a, then out = x on stream b, with or without b
// waiting for a's event; whether out got the 7.
static bool cross_stream_copy(uint64_t seed, bool wait) {
    emu::Streams saved_mode = emu::streams();  // (KEEL_EMU_STREAMS as the test was started with, restored below)
    emu::set_streams(true, seed);
    cudaStream_t a, b;
    cudaEvent_t e;
    cudaStreamCreate(&a);
    cudaStreamCreate(&b);
    cudaEventCreate(&e);
    int *x = dev_upload(std::vector<int>(32, 0)), *out = dev_upload(std::vector<int>(32, 0));
    KEEL_LAUNCH(fill_kernel, 1, 32, 0, a)(x, 7);
    cudaEventRecord(e, a);
    if (wait) cudaStreamWaitEvent(b, e, 0);
    KEEL_LAUNCH(copy_kernel, 1, 32, 0, b)(out, x);
    bool got = dev_download(out, 32)[31] == 7;  // (a blocking copy: the legacy stream waits for a and b)
    for (void* p : {(void*)x, (void*)out}) dev_free(p);
    cudaEventDestroy(e);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    emu::set_streams(saved_mode.async, saved_mode.rng);
    return got;
}

static int child_status(void (*fn)()) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        fn();
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}

// A child's exit status, and what it wrote to stderr (a refusal's message).
static int child_output(void (*fn)(), std::string* err) {
    fflush(stdout);
    FILE* f = tmpfile();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fileno(f), 2);
        fn();
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    err->clear();
    rewind(f);
    for (int c; (c = fgetc(f)) != EOF;) err->push_back((char)c);
    fclose(f);
    return st;
}

// Stands for kernels ptxas gave N registers: test_registers adds their rows to the table.
namespace regs_test {
template <int N> __global__ void regs_kernel(float* p) {
    if (threadIdx.x == 0) p[0] = (float)N;
}
struct Op {};
template <typename F, typename O, unsigned V, bool B> __global__ void typed_kernel(F* p) {}
static __global__ void static_kernel(float* p) {}
template <typename T> struct Box {};
template <typename B> __global__ void nested_kernel(float* p) {}
}  // namespace regs_test
namespace keel_cuda {
__global__ void unlisted_kernel(float* p) {}  // a keel kernel the table lacks (as one added since it was made)
}
static float* regs_buf() {
    static float* p = dev_upload(std::vector<float>(1, 0.0f));
    return p;
}
template <int N> static void launch_regs(unsigned threads) {
    KEEL_LAUNCH(regs_test::regs_kernel<N>, 1, threads, 0, MAIN_STREAM)(regs_buf());
    cudaDeviceSynchronize();
}
// Whether launch() is refused (exit 3) with a message that contains `want`.
static bool refused_with(void (*launch)(), const char* want) {
    std::string err;
    int st = child_output(launch, &err);
    bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 3 && err.find(want) != std::string::npos;
    if (!ok) printf("      (exit status %d, stderr: %s)\n", st, err.c_str());
    return ok;
}

// registers × threads (registers.h): the keys name the instantiation as c++filt names ptxas's entry;
// a block over the register file (counts rounded up to 8) or over __launch_bounds__ is refused
static void test_registers() {
    check_true("kernel_key: a template's arguments as c++filt prints them",
               emu::kernel_key<regs_test::typed_kernel<__nv_bfloat16, regs_test::Op, 4u, true>>() ==
                   "regs_test::typed_kernel<__nv_bfloat16, regs_test::Op, 4u, true>");
    check_true("kernel_key: nested template arguments end in \">>\" (the table's spelling, whatever the demangler's)",
               emu::kernel_key<regs_test::nested_kernel<regs_test::Box<float>>>() == "regs_test::nested_kernel<regs_test::Box<float>>");
    check_true("kernel_key: a static kernel, a plain one", emu::kernel_key<regs_test::static_kernel>() == "regs_test::static_kernel" &&
                                                               emu::kernel_key<regs_test::regs_kernel<7>>() == "regs_test::regs_kernel<7>");
    // keel's kernels found in the table under the names g++'s side makes (nvcc mangled the table's)
    bool found = true;
    for (const std::string& k : {emu::kernel_key<keel_cuda::layernorm_backward_kernel<__nv_bfloat16, keel_cuda::LN_BWD_INFLIGHT, true>>(),
                                 emu::kernel_key<keel_cuda::matmul_dbias_partial_kernel<float, 4>>(),
                                 emu::kernel_key<keel_cuda::matmul_dbias_finish_kernel>()})
        found = found && emu::register_rows().count(k) == 1;
    check_true("keel kernels (a template, one with an int argument, a static one) are in kernel_registers.h by these names", found);
    emu::kernel_registers_add("regs_test::regs_kernel<255>", 80, 255, 0);
    emu::kernel_registers_add("regs_test::regs_kernel<255>", 90, 255, 0);
    emu::kernel_registers_add("regs_test::regs_kernel<64>", 80, 64, 0);
    emu::kernel_registers_add("regs_test::regs_kernel<64>", 90, 65, 0);  // sm_90 the stricter
    emu::kernel_registers_add("regs_test::regs_kernel<81>", 80, 81, 0);
    emu::kernel_registers_add("regs_test::regs_kernel<40>", 80, 40, 128);  // __launch_bounds__(128)
    check_true("255 registers × 1024 threads refused, naming the kernel, the registers and the limit",
               refused_with([] { launch_regs<255>(1024); },
                            "kernel regs_test::regs_kernel<255>: 255 registers per thread on sm_80 (256 as allocated) × 1024 threads = "
                            "262144 registers, over the 65536 of a block"));
    launch_regs<255>(256);
    check_true("255 registers × 256 threads (65536 as allocated) launches", dev_download(regs_buf(), 1)[0] == 255.0f);
    check_true("64 registers on sm_80 but 65 on sm_90, × 1024 threads: refused for sm_90",
               refused_with([] { launch_regs<64>(1024); }, "65 registers per thread on sm_90 (72 as allocated) × 1024 threads"));
    launch_regs<64>(512);
    check_true("the same kernel × 512 threads launches", dev_download(regs_buf(), 1)[0] == 64.0f);
    check_true("81 registers × 768 threads refused: 62208 as counted, 67584 as allocated in 8s",
               refused_with([] { launch_regs<81>(768); }, "81 registers per thread on sm_80 (88 as allocated) × 768 threads = 67584"));
    check_true("__launch_bounds__(128) launched with 256 threads refused",
               refused_with([] { launch_regs<40>(256); }, "kernel regs_test::regs_kernel<40>: 256 threads per block, over its __launch_bounds__(128)"));
    launch_regs<40>(128);
    check_true("__launch_bounds__(128) launched with 128 threads runs", dev_download(regs_buf(), 1)[0] == 40.0f);

    // a keel kernel missing from the table: named once and run; refused under KEEL_EMU_REGISTERS=strict
    std::string err;
    int st = child_output([] {
        emu::set_registers_mode(emu::REGISTERS_WARN);
        for (int i = 0; i < 2; i++) KEEL_LAUNCH(keel_cuda::unlisted_kernel, 1, 32, 0, MAIN_STREAM)(regs_buf());
    }, &err);
    size_t first = err.find("kernel keel_cuda::unlisted_kernel is not in test/cuda_emu/kernel_registers.h: its registers are not checked");
    check_true("a keel kernel missing from the table runs, named once on stderr",
               WIFEXITED(st) && WEXITSTATUS(st) == 0 && first != std::string::npos && err.find("unlisted_kernel", first + 40) == std::string::npos);
    check_true("... and is refused under KEEL_EMU_REGISTERS=strict", refused_with([] {
        emu::set_registers_mode(emu::REGISTERS_STRICT);
        KEEL_LAUNCH(keel_cuda::unlisted_kernel, 1, 32, 0, MAIN_STREAM)(regs_buf());
    }, "kernel keel_cuda::unlisted_kernel is not in test/cuda_emu/kernel_registers.h (KEEL_EMU_REGISTERS=strict)"));
}

// KEEL_EMU_POISON: fresh device memory and each block's shared memory hold the pattern; the NaN check
// names the kernel that wrote a NaN (reading shared memory nothing wrote on purpose: not in the
// checked build, which stops there)
static void test_poison() {
#ifndef KEEL_EMU_RACECHECK
    {
        emu::set_poison(1);
        float* p = nullptr;
        cudaMalloc((void**)&p, 16);
        std::vector<float> fresh = dev_download(p, 4);
        float* out = dev_upload(std::vector<float>(1, 0.0f));
        KEEL_LAUNCH(uninit_smem_kernel, 1, 32, 64, MAIN_STREAM)(out);
        float seen = dev_download(out, 1)[0];
        check_true("poison nan: a fresh cudaMalloc reads NaN, an unwritten shared word reads NaN", std::isnan(fresh[0]) && std::isnan(seen));
        emu::set_poison(2, 11);
        KEEL_LAUNCH(uninit_smem_kernel, 1, 32, 64, MAIN_STREAM)(out);
        float r1 = dev_download(out, 1)[0];
        KEEL_LAUNCH(uninit_smem_kernel, 1, 32, 64, MAIN_STREAM)(out);
        float r2 = dev_download(out, 1)[0];
        uint32_t b1, b2;
        memcpy(&b1, &r1, 4);
        memcpy(&b2, &r2, 4);
        check_true("poison random: an unwritten shared word differs from block to block", b1 != b2);
        for (float* q : {&r1, &r2}) {  // a static shared array: the pattern at every block's start
            emu::set_poison(q == &r1 ? 1 : 3);
            KEEL_LAUNCH(uninit_static_smem_kernel, 1, 32, 0, MAIN_STREAM)(out);
            *q = dev_download(out, 1)[0];
        }
        check_true("poison nan / ones: an unwritten static shared word reads NaN / 1.0", std::isnan(r1) && r2 == 1.0f);
        emu::set_poison(1);  // KEEL_EMU_NANCHECK: the kernel that wrote the NaN into `out` is named
        emu::nancheck().enabled = true;
        cudaMemset(out, 0, sizeof(float));
        uint64_t reports = emu::nancheck().reports;
        KEEL_LAUNCH(uninit_static_smem_kernel, 1, 32, 0, MAIN_STREAM)(out);
        cudaDeviceSynchronize();
        check_true("NaN check: the kernel that wrote a NaN read from poisoned shared memory is reported", emu::nancheck().reports == reports + 1);
        emu::nancheck().enabled = false;
        emu::set_poison(0);
        for (void* q : {(void*)p, (void*)out}) dev_free(q);
    }
#endif
}

// KEEL_EMU_SCHEDULE: the blocks of a grid and the threads of a block past each barrier run in
// launch order, reversed, or in a fresh random permutation from the seed
static void test_schedules() {
    {
        std::vector<int> in_order = run_order(emu::SCHEDULE_IN_ORDER, 0), reverse = run_order(emu::SCHEDULE_REVERSE, 0);
        std::vector<int> r5 = run_order(emu::SCHEDULE_RANDOM, 5), r5_again = run_order(emu::SCHEDULE_RANDOM, 5), r6 = run_order(emu::SCHEDULE_RANDOM, 6);
        // (the lane whose arrival completes a warp barrier goes on at once: the rest follow in the pass's order)
        bool inorder_ok = true, reverse_ok = true;
        for (int i = 0; i < 64; i++) inorder_ok = inorder_ok && in_order[i] < 64, reverse_ok = reverse_ok && reverse[i] >= 64;
        for (int i = 2; i < 31; i++) inorder_ok = inorder_ok && in_order[i] < in_order[i + 1], reverse_ok = reverse_ok && reverse[i] > reverse[i + 1];
        std::vector<int> sorted = r5, all(128);
        std::sort(sorted.begin(), sorted.end());
        for (int i = 0; i < 128; i++) all[i] = i;
        check_true("schedule in-order: block 0 first, its threads in launch order", inorder_ok);
        check_true("schedule reverse: the last block first, its threads in reverse order", reverse_ok);
        check_true("schedule random: a permutation of all threads, neither in-order nor reverse, the same for the same seed",
                   sorted == all && r5 != in_order && r5 != reverse && r5 == r5_again && r5 != r6);
    }
}

// KEEL_EMU_STREAMS=async: streams run apart; only an event wait orders them
static void test_streams() {
    {
        int stale = 0, waited = 0;
        for (uint64_t seed = 1; seed <= 8; seed++) stale += !cross_stream_copy(seed, false), waited += cross_stream_copy(seed, true);
        check_true("streams async: without cudaStreamWaitEvent some interleavings (of 8) read x before it is written", stale > 0 && stale < 8);
        check_true("streams async: with the wait every interleaving reads the written x", waited == 8);
    }
}

// Event timing (cudaEventElapsedTime, which --time-ops reads): the emulation's time between two
// events spans the work queued between them; the real call's errors for an event without timing, one
// never recorded, and (async streams) one its stream has not reached.
static void test_event_timing() {
    emu::Streams saved_mode = emu::streams();
    emu::set_streams(false, 0);
    cudaEvent_t a, b, c, untimed;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventCreate(&c);
    cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming);
    int n = 1 << 16;
    int* x = dev_upload(std::vector<int>(n, 0));
    cudaEventRecord(a, MAIN_STREAM);
    for (int k = 0; k < 16; k++) KEEL_LAUNCH(fill_all_kernel, n / 256, 256, 0, MAIN_STREAM)(x, k);
    cudaEventRecord(b, MAIN_STREAM);
    cudaEventRecord(c, MAIN_STREAM);
    cudaEventRecord(untimed, MAIN_STREAM);
    cudaEventSynchronize(c);
    float ab = -1, bc = -1, ba = 1;
    bool ok = cudaEventElapsedTime(&ab, a, b) == cudaSuccess && cudaEventElapsedTime(&bc, b, c) == cudaSuccess &&
              cudaEventElapsedTime(&ba, b, a) == cudaSuccess;
    if (!(ab > 0 && bc >= 0 && bc < ab)) printf("      event timing: 16 launches %.3f ms, nothing %.3f ms\n", ab, bc);
    // (printed only on failure: test_emu_sanitize compares this test's output across runs, byte for byte)
    check_true("cudaEventElapsedTime: the launches between two events take time, nothing between two takes less, reversed is negative",
               ok && ab > 0 && bc >= 0 && bc < ab && ba == -ab);
    float t = 0;
    cudaEvent_t never;
    cudaEventCreate(&never);
    check_true("cudaEventElapsedTime: an event without timing, or never recorded, is an invalid handle (as on a GPU)",
               cudaEventElapsedTime(&t, a, untimed) == cudaErrorInvalidResourceHandle &&
                   cudaEventElapsedTime(&t, never, a) == cudaErrorInvalidResourceHandle);
    cudaGetLastError();
    emu::set_streams(true, 3);  // queued work: the event is not reached until the host waits
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaEventRecord(a, s);
    KEEL_LAUNCH(fill_kernel, 1, 32, 0, s)(x, 9);
    cudaEventRecord(b, s);
    bool not_ready = cudaEventElapsedTime(&t, a, b) == cudaErrorNotReady;
    cudaEventSynchronize(b);
    check_true("cudaEventElapsedTime: not ready before its stream reaches the event, a time after the wait",
               not_ready && cudaEventElapsedTime(&t, a, b) == cudaSuccess && t >= 0);
    cudaEvent_t gone;  // destroyed while its record is still queued (CUDA allows it): the record runs harmlessly
    cudaEventCreate(&gone);
    cudaEventRecord(gone, s);
    cudaEventDestroy(gone);
    KEEL_LAUNCH(fill_kernel, 1, 32, 0, s)(x, 11);
    check_true("an event destroyed with its record queued: the stream runs on", cudaStreamSynchronize(s) == cudaSuccess &&
                                                                                   dev_download(x, 32)[31] == 11);
    cudaStreamDestroy(s);
    for (cudaEvent_t e : {a, b, c, untimed, never}) cudaEventDestroy(e);
    dev_free(x);
    emu::set_streams(saved_mode.async, saved_mode.rng);
}

int main() {
    // shared memory + barriers, several blocks, a partial block
    int n = 200, blocks = 5;
    std::vector<float> in = randn((size_t)n * blocks, 1), want(blocks, 0.0f);
    float *d_in = dev_upload(in), *d_out = dev_upload(std::vector<float>(blocks));
    KEEL_LAUNCH(shared_tree_kernel, blocks, 256, 0, MAIN_STREAM)(d_out, d_in, n);
    std::vector<float> got = dev_download(d_out, blocks);
    for (int b = 0; b < blocks; b++) {  // the same tree on the host
        std::vector<float> buf(256, 0.0f);
        for (int i = 0; i < n; i++) buf[i] = in[b * n + i];
        for (int s = 128; s > 0; s /= 2)
            for (int i = 0; i < s; i++) buf[i] += buf[i + s];
        want[b] = buf[0];
    }
    check_close("shared-memory tree reduction with __syncthreads", got, want, 0, 0);

    int* d_w = dev_upload(std::vector<int>(64 * 6));
    KEEL_LAUNCH(warp_ops_kernel, 1, 64, 0, MAIN_STREAM)(d_w);
    std::vector<int> w = dev_download(d_w, 64 * 6);
    bool ok = true;
    for (int i = 0; i < 64; i++) {
        int lane = i % 32, base = i - lane;
        unsigned ballot = 0;
        for (int l = 0; l < 32; l++) ballot |= (l % 3 == 0 ? 1u : 0u) << l;
        ok = ok && w[i * 6 + 0] == (i ^ 1) && w[i * 6 + 1] == (lane + 4 < 32 ? i + 4 : i) && w[i * 6 + 2] == base + 3 &&
             (unsigned)w[i * 6 + 3] == ballot && w[i * 6 + 4] == 1 && w[i * 6 + 5] == 0;
    }
    check_true("__shfl_xor/down/sync, __ballot/any/all_sync give the lanes' values", ok);

    double* d_s = dev_upload(std::vector<double>(3));
    KEEL_LAUNCH(block_sum_kernel, 3, 96, 0, MAIN_STREAM)(d_s);
    std::vector<double> s = dev_download(d_s, 3);
    check_true("block_sum over 3 warps = 96·97/2 in every block", s[0] == 4656 && s[1] == 4656 && s[2] == 4656);

    int st = child_status([] {
        int* x = nullptr;
        cudaMalloc((void**)&x, 32 * sizeof(int));
        KEEL_LAUNCH(mismatched_barrier_kernel, 1, 32, 0, MAIN_STREAM)(x);
        cudaDeviceSynchronize();  // (a launch runs by the next host wait at the latest: KEEL_EMU_STREAMS)
    });
    check_true("mismatched barriers reported as a deadlock (exit 3)", WIFEXITED(st) && WEXITSTATUS(st) == 3);

    st = child_status([] {
        float* p = nullptr;
        cudaMalloc((void**)&p, 1024);
        volatile float v = p[3];  // host code reading device memory
        (void)v;
    });
    check_true("host read of device memory dies with SIGSEGV", WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    st = child_status([] {
        float h[4] = {0, 0, 0, 0}, *p = nullptr;
        cudaMalloc((void**)&p, sizeof h);
        cudaMemcpy(p, h, sizeof h, cudaMemcpyDeviceToHost);  // direction swapped
    });
    check_true("cudaMemcpy with the wrong direction is refused", WIFEXITED(st) && WEXITSTATUS(st) == 3);

    // launch limits a GPU enforces at run time: dynamic shared memory over 48 KiB only after the
    // kernel's opt-in (and only up to it), grid y at most 65535
    st = child_status([] {
        float* p = nullptr;
        cudaMalloc((void**)&p, 64);
        KEEL_LAUNCH(smem_kernel, 1, 32, 64 * 1024, MAIN_STREAM)(p);  // no cudaFuncSetAttribute
    });
    check_true("a launch with 64 KiB of dynamic shared memory and no opt-in is refused (exit 3)", WIFEXITED(st) && WEXITSTATUS(st) == 3);
    st = child_status([] {
        float* p = nullptr;
        cudaMalloc((void**)&p, 64);
        cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 56 * 1024);
        KEEL_LAUNCH(smem_kernel, 1, 32, 64 * 1024, MAIN_STREAM)(p);  // over the raised limit
    });
    check_true("a launch over the kernel's raised shared-memory limit is refused (exit 3)", WIFEXITED(st) && WEXITSTATUS(st) == 3);
    st = child_status([] {
        float* p = nullptr;
        cudaMalloc((void**)&p, 64);
        KEEL_LAUNCH(smem_kernel, dim3(1, 65536), 32, 0, MAIN_STREAM)(p);
    });
    check_true("a grid of 65536 rows (gridDim.y) is refused (exit 3)", WIFEXITED(st) && WEXITSTATUS(st) == 3);
    {
        float* p = dev_upload(std::vector<float>(2, 0.0f));
        check_true("cudaFuncSetAttribute(MaxDynamicSharedMemorySize, 64 KiB) accepted",
                   cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) == cudaSuccess);
        KEEL_LAUNCH(smem_kernel, dim3(1, 2), 32, 64 * 1024, MAIN_STREAM)(p);
        std::vector<float> got = dev_download(p, 2);
        check_true("after the opt-in, 64 KiB of dynamic shared memory launches and works", got[0] == 1.0f && got[1] == 1.0f);
        check_true("an opt-in over 163 KiB (an A100's limit) is refused", cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 164 * 1024) != cudaSuccess);
        check_true("an opt-in of 163 KiB is allowed", cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 163 * 1024) == cudaSuccess);
        cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);  // back to what follows expects
        cudaGetLastError();
        // the occupancy query (keel's flash launchers size their block order by it): by threads, by
        // shared memory (164 KiB a multiprocessor, 1 KiB reserved a block), 0 over the kernel's limit
        int n1024 = -1, n64k = -1, n100k = -1, n32 = -1;
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n1024, smem_kernel, 1024, 0);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n64k, smem_kernel, 32, 64 * 1024);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n100k, smem_kernel, 32, 100 * 1024);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n32, smem_kernel, 32, 0);
        printf("      occupancy: 1024 threads %d, 64 KiB %d, 100 KiB (over the 64 KiB opt-in) %d, 32 threads %d\n", n1024, n64k, n100k, n32);
        check_true("cudaOccupancyMaxActiveBlocksPerMultiprocessor: 2 blocks of 1024 threads, 2 of 64 KiB, 0 over the opt-in, 32 at most",
                   n1024 == 2 && n64k == 2 && n100k == 0 && n32 == 32);
        dev_free(p);
    }

    test_registers();
    test_poison();

    test_schedules();
    test_streams();
    test_event_timing();

    // round to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 → 1 (even); 1 + 3·2^-8 → 1 + 2^-6
    check_true("bf16 rounding: ties to even, NaN stays NaN",
               __bfloat162float(__float2bfloat16(1.0f + 0x1p-8f)) == 1.0f && __bfloat162float(__float2bfloat16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f &&
                   __float2bfloat16(1.0f).x == 0x3f80 && std::isnan(__bfloat162float(__float2bfloat16(NAN))) &&
                   __bfloat162float(__float2bfloat16(-2.5f)) == -2.5f);
    bool half_ok = true;
    for (float x : {1.0f, 65504.0f, 65519.0f, 65520.0f, 0x1p-24f, 0x1p-25f, 3 * 0x1p-25f, -1.0009765625f, 0.1f, 1e-6f, -0.0f})
        half_ok = half_ok && __half2float(__float2half(x)) == fp16_round(x) && std::signbit(__half2float(__float2half(x))) == std::signbit(x);
    check_true("fp16 conversion = fp16_round (the CPU's binary16 rounding) on limits and subnormals", half_ok);
    printf("emulator: %llu launches, %llu blocks, %llu threads\n", (unsigned long long)emu::stats().launches,
           (unsigned long long)emu::stats().blocks, (unsigned long long)emu::stats().threads);
    return cuda_test_finish();
}
