# keel — build, set-up, tests, benchmarks.
#   make help       this list
#   make            build train_gpt_cpu (always), tokenize_gpt2, the dev tools, and train_gpt (CUDA) when nvcc is found
#   make run        install what is missing, prepare data, build the CPU trainer and tokenizer, start the default CPU training
#   make test       install what is missing, prepare data, build everything, run every test
#   make data       prepare the default data set (Brown corpus shards + GPT-2 BPE files) alone
#   make test-cuda  the CUDA kernels and trainer under the CPU emulation of CUDA (no GPU needed)
#   make test-emu-sanitize  the emulator as a CUDA sanitizer: schedules, streams run apart, poison, the checked build (races, bounds, uninitialized shared memory), planted defects, the trainer at DP/TP/PP=2
#   make test-gpu   the same tests on a real GPU (nvcc-built), plus train_gpt vs train_gpt_cpu
#   make gpu-bundle what scripts/gpu_session.sh runs on a GPU lent for minutes, compiled here (nvcc, no GPU needed)
#   make test-extra the measurements make test leaves out (8-bit vs 32-bit Adam on Brown, 2 minutes)
#   make bench      print ms/iteration, tokens/s and GFLOP/s for fixed configurations
#   make ptxas-report  registers, stack, spills and shared memory of every CUDA kernel (sm_80, sm_90)
#   make kernel-registers  rewrite test/cuda_emu/kernel_registers.h, the emulator's registers-per-thread table, from that report
#   make fuzz       build the libFuzzer targets (test/fuzz) and fuzz each for FUZZ_SECONDS (default 60)
#   make test-sanitize  the CPU trainer and unit tests under ASan + UBSan on a representative set (test/sanitize.sh)
#   make test-crash     SIGKILL at KILLS random instants (default 200), every resume byte-identical
#   make test-crash-mpi SIGSTOP/SIGKILL of a random rank of 4 at KILLS instants (default 50): the job ends, resumes byte-identical
#   make test-save-faults  SIGKILL/SIGSTOP of one rank of 4 at every stage of a cooperative save: the job ends, latest holds, resumes byte-identical
#   make test-mutants   plant each defect of test/mutants/*.patch in a scratch copy: the tests it names must fail
#   make clean      remove the binaries and build/
# Overrides: make NO_CUDA=1 (skip the CUDA trainer), make NO_MPI=1 (build without MPI).
CXX       ?= g++
CXXFLAGS  ?= -O3 -march=native
# -ffp-contract=off: a*b+c is rounded twice everywhere, so a loop's result cannot depend on whether
# the compiler chose its vector body or its scalar tail (thread-count independence, docs/internals.md#determinism).
# -fno-math-errno: sqrt need not set errno, so loops with sqrt vectorize (AdamW ran 5× slower
# without it); every result is unchanged, IEEE sqrt is exact either way.
KEEL_CXXFLAGS = -std=c++17 -Wall -Wextra -Wno-unused-parameter -ffp-contract=off -fno-math-errno -I.
LDLIBS    = -lm
COMMA := ,

# ---- detection (each overridable) ---------------------------------------------------------------
# The ✓/✗ lines are printed once per command: by the top-level make, or, for the targets that run
# scripts/setup.sh first (which may install what was missing), by the build that follows set-up
# (it is passed KEEL_BANNER=1). Nested makes and `make help`/`make clean` stay quiet.
SETUP_GOALS := run test test-cuda test-emu-sanitize test-extra test-crash test-sanitize fuzz
QUIET_GOALS := help clean setup
ifeq ($(MAKELEVEL),0)
  ifeq ($(filter $(SETUP_GOALS) $(QUIET_GOALS),$(MAKECMDGOALS)),)
    KEEL_BANNER ?= 1
  endif
endif
say = $(if $(filter 1,$(KEEL_BANNER)),$(info $(1)))
OPENMP_OK := $(shell echo 'int main(){return 0;}' | $(CXX) -fopenmp -x c++ - -o /dev/null 2>/dev/null && echo 1)
ifeq ($(OPENMP_OK),1)
  KEEL_CXXFLAGS += -fopenmp
  $(call say,✓ OpenMP)
else
  $(call say,✗ OpenMP (g++ -fopenmp failed): the CPU trainer runs single-threaded)
endif

ifeq ($(NO_MPI),1)
  $(call say,✗ MPI (NO_MPI=1))
else
  MPICXX := $(shell command -v mpicxx 2>/dev/null)
  ifneq ($(MPICXX),)
    MPI_CFLAGS := $(shell mpicxx --showme:compile 2>/dev/null)
    MPI_LIBS   := $(shell mpicxx --showme:link 2>/dev/null)
    $(call say,✓ MPI ($(MPICXX)))
  else
    $(call say,✗ MPI (mpicxx not found; scripts/setup.sh installs OpenMPI))
  endif
endif

# clang with libFuzzer and the sanitizer runtimes (libclang-rt-dev): the fuzz targets (make fuzz)
FUZZ_CXX ?= clang++
FUZZ_OK := $(shell printf '\043include <cstddef>\n\043include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
             | $(FUZZ_CXX) -fsanitize=fuzzer,address,undefined -x c++ - -o /dev/null 2>/dev/null && echo 1)
ifeq ($(FUZZ_OK),1)
  $(call say,✓ libFuzzer ($(FUZZ_CXX) -fsanitize=fuzzer))
else
  $(call say,✗ libFuzzer ($(FUZZ_CXX) -fsanitize=fuzzer cannot link; scripts/setup.sh installs clang$(COMMA) libclang-rt-dev): make fuzz and test_fuzz_smoke fail)
endif

CUDA_HOME ?= /usr/local/cuda
ifeq ($(NO_CUDA),1)
  $(call say,✗ CUDA (NO_CUDA=1))
else
  NVCC := $(shell command -v nvcc 2>/dev/null || (test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc))
  ifneq ($(NVCC),)
    $(call say,✓ nvcc ($(NVCC)))
    NCCL_INC := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
    ifneq ($(NCCL_INC),)
      $(call say,✓ NCCL ($(NCCL_INC)))
    else
      $(call say,✗ NCCL (nccl.h not found): train_gpt is built for one GPU)
    endif
  else
    $(call say,✗ nvcc (not found): train_gpt (CUDA) is not built)
  endif
endif

# ---- GPU architecture: what nvcc compiles the device code for ------------------------------------
# Without an -arch nvcc targets its oldest architecture: on an H100 the driver would JIT-compile the
# PTX at start-up and every bf16 conversion would run in software. So: the GPU that nvidia-smi finds
# (compute capability "9.0" → sm_90), else a fat binary for A100 and H100 (sm_80 sm_90) with PTX of
# the newest for later GPUs to JIT. GPU_ARCH="90" or "80 90" overrides; each value must be one nvcc
# can compile for (nvcc --list-gpu-code; an a/f suffix, e.g. 90a, names the same GPU's
# architecture-specific variant).
GPU_ARCH_FAT := 80 90
ifneq ($(NVCC),)
  NVCC_GPU_CODES := $(patsubst sm_%,%,$(shell $(NVCC) --list-gpu-code 2>/dev/null))
  ifneq ($(origin GPU_ARCH),undefined)
    GPU_ARCH_WHY := GPU_ARCH=$(GPU_ARCH)
  else
    # The first GPU: "name, 9.0"; a driver that finds no GPU prints an error instead (no match).
    GPU_FOUND := $(shell nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null | head -n1 | grep -E ', *[0-9]+\.[0-9]+$$')
    GPU_FOUND_CAP := $(subst .,,$(lastword $(subst $(COMMA), ,$(GPU_FOUND))))
    GPU_FOUND_NAME := $(shell echo '$(GPU_FOUND)' | cut -d, -f1)
    ifeq ($(GPU_FOUND),)
      GPU_ARCH := $(GPU_ARCH_FAT)
      GPU_ARCH_WHY := no GPU found: fat binary; GPU_ARCH= overrides
    else ifneq ($(filter $(GPU_FOUND_CAP),$(NVCC_GPU_CODES)),)
      GPU_ARCH := $(GPU_FOUND_CAP)
      GPU_ARCH_WHY := found $(GPU_FOUND_NAME) via nvidia-smi
    else
      $(call say,✗ GPU arch sm_$(GPU_FOUND_CAP) of $(GPU_FOUND_NAME): this nvcc cannot compile for it (it knows $(NVCC_GPU_CODES)))
      GPU_ARCH := $(GPU_ARCH_FAT)
      GPU_ARCH_WHY := fat binary instead; GPU_ARCH= overrides
    endif
  endif
  GPU_ARCH_BAD := $(strip $(foreach a,$(GPU_ARCH),$(if $(filter $(patsubst %a,%,$(patsubst %f,%,$(a))),$(NVCC_GPU_CODES)),,$(a))))
  ifeq ($(strip $(GPU_ARCH)),)
    $(error ✗ GPU_ARCH is empty: give compute capabilities without the dot, e.g. GPU_ARCH=90 or GPU_ARCH="80 90")
  endif
  ifneq ($(GPU_ARCH_BAD),)
    $(error ✗ GPU_ARCH=$(GPU_ARCH): $(GPU_ARCH_BAD) is not an architecture this nvcc compiles for (one or more of: $(NVCC_GPU_CODES); e.g. GPU_ARCH=90 or GPU_ARCH="80 90"))
  endif
  # Machine code for each architecture, plus PTX of the newest (numeric order) so a later GPU can JIT.
  GPU_ARCH_PTX := $(lastword $(shell printf '%s\n' $(GPU_ARCH) | sort -n))
  NVCC_ARCH_FLAGS := $(foreach a,$(GPU_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) -gencode arch=compute_$(GPU_ARCH_PTX),code=compute_$(GPU_ARCH_PTX)
  $(call say,✓ GPU arch $(foreach a,$(GPU_ARCH),sm_$(a)) ($(GPU_ARCH_WHY)))
endif
GPU_ARCH_STAMP := build/gpu_arch_flags

HEADERS := $(wildcard llmc/*.h llmc/cpu/*.h llmc/cuda/*.h llmc/cuda/*.cuh)
TARGETS := train_gpt_cpu tokenize_gpt2 batch_lookup layer_norms megatron_data preprocess_data
# Without MPI, train_gpt is a single-GPU build: no NCCL (its bootstrap needs MPI), one process.
ifneq ($(NVCC),)
  TARGETS := train_gpt $(TARGETS)  # first: nvcc's compile is the longest, the others fill the other cores
  ifneq ($(and $(MPI_LIBS),$(NCCL_INC)),)
    TRAIN_GPT_COMM := -DKEEL_MPI $(MPI_CFLAGS)
    TRAIN_GPT_COMM_LIBS := -lnccl $(MPI_LIBS)
  else
    $(call say,✗ MPI + NCCL for train_gpt: it is built for one GPU (no mpirun); scripts/setup.sh installs OpenMPI)
  endif
endif

.PHONY: all help run test test-cuda test-emu-sanitize test-gpu gpu-bundle gpu-bundle-files data bench setup clean tests cuda-lab cuda-lab-emu gpu-profile ptxas-report kernel-registers fuzz fuzz-build asan-build test-sanitize test-crash test-crash-mpi test-save-faults test-extra test-mutants
all: $(TARGETS)

# With MPI found, train_gpt_cpu runs data parallel under mpirun (llmc/comm.h); without, one process.
ifneq ($(MPI_LIBS),)
  CPU_MPI_FLAGS := -DKEEL_MPI $(MPI_CFLAGS)
endif
train_gpt_cpu: train_gpt.cu $(HEADERS)
	$(CXX) $(CXXFLAGS) $(KEEL_CXXFLAGS) $(CPU_MPI_FLAGS) -x c++ $< -o $@ $(MPI_LIBS) $(LDLIBS)

# Everything nvcc builds depends on this file, rewritten only when the architecture flags change: a
# build for another GPU (or GPU_ARCH=) recompiles instead of reporting "up to date". It is written as
# the Makefile is read, not by a rule that always runs: GNU make under -j starts a target whose
# prerequisite had to run only after every other ready job, so nvcc's train_gpt, the longest
# compile, would begin last instead of first.
ifneq ($(NVCC),)
  $(shell mkdir -p build && { echo '$(NVCC_ARCH_FLAGS)' | cmp -s - $(GPU_ARCH_STAMP) || echo '$(NVCC_ARCH_FLAGS)' > $(GPU_ARCH_STAMP); })
endif
$(GPU_ARCH_STAMP):
	@mkdir -p build && echo '$(NVCC_ARCH_FLAGS)' > $@

# The same train_gpt.cu, compiled by nvcc and linked against cuBLASLt, NCCL and MPI. ptxas's report
# of every kernel (-Xptxas -v) and the PTX are kept in build/ptxas_keep/ with the hash of the sources,
# the flags and the nvcc that made them: scripts/ptxas_report.sh (make ptxas-report, test_ptxas) reads
# them instead of compiling the trainer once more per architecture when they are current.
NVCC_FLAGS ?= -O3 -std=c++17 --expt-relaxed-constexpr
PTXAS_KEEP := build/ptxas_keep
train_gpt: train_gpt.cu $(HEADERS) $(GPU_ARCH_STAMP)
	@rm -rf $(PTXAS_KEEP) && mkdir -p $(PTXAS_KEEP)
	@h=$$(bash scripts/ptxas_report.sh --source-hash) && \
	  echo "$(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH_FLAGS) -DKEEL_CUDA $(TRAIN_GPT_COMM) -I. -Xcompiler -fopenmp,-ffp-contract=off,-fno-math-errno $< -o $@ ..." && \
	  { $(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH_FLAGS) -DKEEL_CUDA $(TRAIN_GPT_COMM) -I. -Xcompiler -fopenmp,-ffp-contract=off,-fno-math-errno $< -o $@ \
	      -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -lcublasLt -lcublas $(TRAIN_GPT_COMM_LIBS) -lm \
	      -Xptxas -v -keep -keep-dir $(PTXAS_KEEP) 2>$(PTXAS_KEEP)/ptxas.log; rc=$$?; \
	    grep -vE '^ptxas info|^    [0-9]+ bytes stack frame' $(PTXAS_KEEP)/ptxas.log >&2; [ $$rc = 0 ]; } && \
	  find $(PTXAS_KEEP) -type f ! -name '*.ptx' ! -name ptxas.log -delete && \
	  printf '%s\n%s\n%s\n' "$$h" "$(NVCC_FLAGS)" "$$($(NVCC) --version | tail -1)" >$(PTXAS_KEEP)/made_from

tokenize_gpt2: dev/tokenize_gpt2.cpp $(HEADERS)
	$(CXX) $(CXXFLAGS) $(KEEL_CXXFLAGS) $< -o $@ $(LDLIBS)

# The bad-batch lookup: which samples iterations A..B consumed, from the run's flags or checkpoint.
batch_lookup: dev/batch_lookup.cpp $(HEADERS)
	$(CXX) $(CXXFLAGS) $(KEEL_CXXFLAGS) $< -o $@ $(LDLIBS)

# Megatron's indexed data (.bin/.idx): written from text or llm.c shards, read back and validated.
megatron_data: dev/megatron_data.cpp $(HEADERS)
	$(CXX) $(CXXFLAGS) $(KEEL_CXXFLAGS) $< -o $@ $(LDLIBS)

# Megatron-DeepSpeed's tools/preprocess_data.py: JSON lines → PREFIX_KEY_document.bin/.idx (threads: -pthread).
preprocess_data: dev/preprocess_data.cpp $(HEADERS)
	$(CXX) $(CXXFLAGS) $(KEEL_CXXFLAGS) -pthread $< -o $@ $(LDLIBS)

# Per-layer weight/gradient norms and activation RMS of a checkpoint (the --log-layer-norms-interval oracle).
layer_norms: dev/layer_norms.cpp $(HEADERS)
	$(CXX) $(CXXFLAGS) $(KEEL_CXXFLAGS) $< -o $@ $(LDLIBS)

# ---- tests ---------------------------------------------------------------------------------------
TEST_SRCS := $(wildcard test/test_*.cpp)
TEST_BINS := $(patsubst test/%.cpp,build/%,$(TEST_SRCS))
build/%: test/%.cpp $(HEADERS)
	@mkdir -p build
	$(CXX) $(CXXFLAGS) $(KEEL_CXXFLAGS) $< -o $@ $(LDLIBS)
# The fast-kernel test once more for each narrower gemm engine (x86): all must equal the reference.
ifneq ($(filter x86_64 i386 i686,$(shell uname -m)),)
  TEST_BINS += build/test_fast_kernels_avx2 build/test_fast_kernels_scalar
endif
build/test_fast_kernels_avx2: test/test_fast_kernels.cpp $(HEADERS)
	@mkdir -p build
	$(CXX) $(CXXFLAGS) $(KEEL_CXXFLAGS) -mno-avx512f $< -o $@ $(LDLIBS)
build/test_fast_kernels_scalar: test/test_fast_kernels.cpp $(HEADERS)
	@mkdir -p build
	$(CXX) $(CXXFLAGS) $(KEEL_CXXFLAGS) -mno-avx512f -mno-avx2 $< -o $@ $(LDLIBS)
# The readers of outside bytes (llmc/json.h, llmc/safetensors.h) and their fuzz test once more under
# AddressSanitizer + UBSan: a read past a buffer or an overflow fails the test (docs/internals.md#tests-and-benchmarks).
TEST_BINS += build/test_safetensors_asan
build/test_safetensors_asan: test/test_safetensors.cpp $(HEADERS)
	@mkdir -p build
	$(CXX) -O1 -g -fno-omit-frame-pointer $(KEEL_CXXFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=all $< -o $@ $(LDLIBS)
# The CUDA kernels (llmc/cuda) compiled by g++ against the CPU emulation of the CUDA execution
# model (test/cuda_emu) and checked against the CPU ops.
EMU_HEADERS := $(wildcard test/cuda_emu/*.h) test/cuda_test.h test/attention_test.h
EMU_FLAGS := -Itest/cuda_emu -DKEEL_CUDA_EMULATION
# (x86: the emulator's warp bookkeeping and the kernels' __popc count bits on every collective; without
# -mpopcnt each count is a libgcc call, 3% of an emulated training run)
ifneq ($(filter x86_64 i386 i686,$(shell uname -m)),)
  EMU_FLAGS += -mpopcnt
endif
CUDA_TEST_BINS := $(patsubst test/%.cpp,build/%,$(wildcard test/test_cuda_*.cpp))
build/test_cuda_%: test/test_cuda_%.cpp $(HEADERS) $(EMU_HEADERS)
	@mkdir -p build
	$(CXX) -O2 $(KEEL_CXXFLAGS) $(EMU_FLAGS) $< -o $@ $(LDLIBS)
# The same kernel tests in the emulator's checked build (test/cuda_emu/racecheck.h): every shared-memory
# access is checked for races, bounds and uninitialized reads. -fsanitize=thread only instruments the
# accesses; its runtime is not linked (racecheck.h is it), hence the separate link step.
RACECHECK_FLAGS := -O1 -g -DKEEL_EMU_RACECHECK -fsanitize=thread --param=tsan-instrument-func-entry-exit=0
RACECHECK_TEST_BINS := $(patsubst test/%.cpp,build/racecheck/%,$(wildcard test/test_cuda_*.cpp))
build/racecheck/test_cuda_%: test/test_cuda_%.cpp $(HEADERS) $(EMU_HEADERS)
	@mkdir -p build/racecheck
	$(CXX) $(KEEL_CXXFLAGS) $(EMU_FLAGS) $(RACECHECK_FLAGS) -c $< -o $@.o
	$(CXX) $(KEEL_CXXFLAGS) $@.o -o $@ $(LDLIBS) -ldl && rm -f $@.o
# The trainer in the checked build (make test-emu-sanitize): every kernel at the trainer's shapes.
build/racecheck/train_gpt_emu: train_gpt.cu $(HEADERS) $(EMU_HEADERS)
	@mkdir -p build/racecheck
	$(CXX) $(KEEL_CXXFLAGS) $(EMU_FLAGS) $(RACECHECK_FLAGS) -DKEEL_CUDA $(CPU_MPI_FLAGS) -x c++ -c $< -o $@.o
	$(CXX) $(KEEL_CXXFLAGS) $@.o -o $@ $(MPI_LIBS) $(LDLIBS) -ldl && rm -f $@.o
# The CUDA trainer under the emulation: the same train_gpt.cu with KEEL_CUDA, compiled by g++.
build/train_gpt_emu: train_gpt.cu $(HEADERS) $(EMU_HEADERS)
	@mkdir -p build
	$(CXX) -O2 $(KEEL_CXXFLAGS) $(EMU_FLAGS) -DKEEL_CUDA $(CPU_MPI_FLAGS) -x c++ $< -o $@ $(MPI_LIBS) $(LDLIBS)
# (the checked build of the three quick kernel tests for test_emu_sanitize's fast subset; make
# test-emu-sanitize builds the rest)
tests: $(TEST_BINS) build/train_gpt_emu build/asan/train_gpt_cpu build/gpu_spec $(if $(FUZZ_OK),fuzz-build) \
       build/racecheck/test_cuda_emu build/racecheck/test_cuda_elementwise build/racecheck/test_cuda_matmul

# ---- hardening (docs/operations.md#hardening) ---------------------------------------------------------------
# libFuzzer targets, one per reader of outside bytes (test/fuzz/fuzz_*.cpp), built by clang with
# ASan + UBSan; -DKEEL_FUZZ makes keel_die throw so a refusal is an ordinary outcome (llmc/common.h).
# `make fuzz` runs each for FUZZ_SECONDS from its seed corpus (test/fuzz/corpus/<target>); the
# corpus it grows stays in build/fuzz/corpus, a finding lands in build/fuzz/findings.
FUZZ_FLAGS = -std=c++17 -O1 -g -fno-omit-frame-pointer -DKEEL_FUZZ -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_BINS := $(patsubst test/fuzz/%.cpp,build/fuzz/%,$(wildcard test/fuzz/fuzz_*.cpp))
build/fuzz/%: test/fuzz/%.cpp test/fuzz/fuzz.h $(HEADERS)
	@mkdir -p build/fuzz
	$(FUZZ_CXX) $(FUZZ_FLAGS) $< -o $@
fuzz-build: $(FUZZ_BINS)
FUZZ_SECONDS ?= 60
fuzz: setup
	@$(MAKE) --no-print-directory KEEL_BANNER=1 -j$(BUILD_JOBS) fuzz-build tokenize_gpt2
	@$(MAKE) --no-print-directory data
	@bash test/fuzz/run.sh $(FUZZ_SECONDS)

# The CPU trainer and the CPU unit tests under AddressSanitizer + UBSan (build/asan/), then a
# representative set of runs: many knobs, save + resume, DP=2 under mpirun, bad inputs.
# (-Wno-maybe-uninitialized: GCC 12 warns falsely inside <regex> under the sanitizers; -march=native:
# the CPU's own kernels, the AVX2/AVX-512 paths the trainer runs, are the ones checked, and three times
# faster under the sanitizers than the scalar fallback, which test_fast_kernels_scalar covers)
ASAN_FLAGS = -O1 -march=native -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all -Wno-maybe-uninitialized
ASAN_TEST_BINS := $(patsubst test/%.cpp,build/asan/%,$(filter-out test/test_cuda_%.cpp,$(wildcard test/test_*.cpp)))
build/asan/train_gpt_cpu: train_gpt.cu $(HEADERS)
	@mkdir -p build/asan
	$(CXX) $(ASAN_FLAGS) $(KEEL_CXXFLAGS) $(CPU_MPI_FLAGS) -x c++ $< -o $@ $(MPI_LIBS) $(LDLIBS)
build/asan/test_%: test/test_%.cpp $(HEADERS)
	@mkdir -p build/asan
	$(CXX) $(ASAN_FLAGS) $(KEEL_CXXFLAGS) $< -o $@ $(LDLIBS)
asan-build: build/asan/train_gpt_cpu $(ASAN_TEST_BINS)
test-sanitize: setup
	@$(MAKE) --no-print-directory KEEL_BANNER=1 -j$(BUILD_JOBS) asan-build train_gpt_cpu
	@$(MAKE) --no-print-directory data
	@bash test/sanitize.sh full

# The measurements make test leaves out (test/run_tests.sh `extra`: the 8-bit vs 32-bit Adam quality margin).
test-extra: setup
	@$(MAKE) --no-print-directory KEEL_BANNER=1 -j$(BUILD_JOBS) all tests
	@$(MAKE) --no-print-directory data
	@KEEL_TEST_EXTRA=1 bash test/run_tests.sh adam8bit_brown

# SIGKILL at KILLS random instants of a run that saves every iteration or two, each resumed: every
# run must end byte-identical to an uninterrupted one (test/test_crash_random.sh).
KILLS ?= 200
test-crash: setup
	@$(MAKE) --no-print-directory KEEL_BANNER=1 train_gpt_cpu
	@$(MAKE) --no-print-directory data
	@KEEL_CRASH_KILLS=$(KILLS) bash test/test_crash_random.sh

# A dead or wedged rank under mpirun (test/test_rank_faults.sh; make test runs 2 faults per layout)
test-crash-mpi: setup
	@$(MAKE) --no-print-directory KEEL_BANNER=1 train_gpt_cpu
	@$(MAKE) --no-print-directory data
	@KILLS=$$(( ($(if $(filter command line,$(origin KILLS)),$(KILLS),50) + 1) / 2 )) bash test/test_rank_faults.sh

# One rank of a DP 2 x PP 2 ZeRO-1 run killed or stopped at every stage of a save (test/test_save_faults.sh:
# 14 cases; make test runs 4).
test-save-faults: setup
	@$(MAKE) --no-print-directory KEEL_BANNER=1 train_gpt_cpu
	@$(MAKE) --no-print-directory data
	@SAVE_FAULTS=all bash test/test_save_faults.sh

# The suite's own test: each planted defect (test/mutants/*.patch, applied one at a time to a copy of
# the committed tree) must fail the tests the patch names; prints the mutation score
# (test/mutants/run.sh; MUTANTS="a b" runs only those).
test-mutants: setup
	@$(MAKE) --no-print-directory data
	@bash test/mutants/run.sh $(MUTANTS)

setup:
	@bash scripts/setup.sh

data: tokenize_gpt2
	@bash dev/data/prepare_brown.sh

# The builds run one per core (BUILD_JOBS; nvcc's train_gpt alone takes minutes, the g++ targets go
# beside it), the tests two at a time (test/run_tests.sh, KEEL_TEST_JOBS).
BUILD_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
test: setup
	@$(MAKE) --no-print-directory KEEL_BANNER=1 -j$(BUILD_JOBS) all tests
	@$(MAKE) --no-print-directory data
	@bash test/run_tests.sh

# The CUDA kernels and the CUDA trainer under the CPU emulation alone (make test runs them too).
test-cuda: setup
	@$(MAKE) --no-print-directory KEEL_BANNER=1 -j$(BUILD_JOBS) train_gpt_cpu $(CUDA_TEST_BINS) build/train_gpt_emu
	@$(MAKE) --no-print-directory data
	@bash test/run_tests.sh cuda

# The emulator as a CUDA sanitizer, all of it (test/test_emu_sanitize.sh; docs/emulator.md): every kernel
# test under several schedules, stream interleavings and poisons and in the checked build, the planted
# defects, and the emulated trainer at DP=2, TP=2 and PP=2 with its streams run apart.
test-emu-sanitize: setup
	@$(MAKE) --no-print-directory KEEL_BANNER=1 -j$(BUILD_JOBS) train_gpt_cpu $(CUDA_TEST_BINS) $(RACECHECK_TEST_BINS) build/train_gpt_emu \
	  build/racecheck/train_gpt_emu
	@$(MAKE) --no-print-directory data
	@KEEL_EMU_SANITIZE=full bash test/run_tests.sh emu_sanitize

# On a machine with a GPU: the same kernel tests compiled by nvcc, and the real train_gpt against
# the CPU trainer.
# (test_cuda_emu tests the emulator itself: it has no GPU build)
GPU_TEST_BINS := $(patsubst test/%.cpp,build/gpu/%,$(filter-out test/test_cuda_emu.cpp,$(wildcard test/test_cuda_*.cpp)))
build/gpu/test_cuda_%: test/test_cuda_%.cpp $(HEADERS) $(GPU_ARCH_STAMP)
	@mkdir -p build/gpu
	$(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH_FLAGS) -I. -x cu $< -o $@ -Xcompiler -fopenmp -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas
# (no set-up step: a GPU machine may have no network; `make data` is a no-op where data/ is in place)
test-gpu:
	@$(MAKE) --no-print-directory train_gpt_cpu train_gpt $(GPU_TEST_BINS)
	@$(MAKE) --no-print-directory data
	@KEEL_TEST_BIN_DIR=build/gpu KEEL_CUDA_TRAINER=./train_gpt bash test/run_tests.sh cuda

# A GPU lent for minutes (scripts/gpu_session.sh): everything that script runs, compiled here — nvcc
# needs no GPU — so the machine's time goes to running. train_gpt and train_gpt_cpu without MPI and
# NCCL (one process; a lent machine may have neither library) in build/bundle/, the nvcc kernel tests
# and the kernel labs the script times, and the Brown shards and data/gpt2 (the trainer test's text
# samples). For sm_90 (H100, H200) unless GPU_ARCH says otherwise, whatever GPU this machine has: the
# lent one is another, and one architecture keeps the bundle small (about 45 MiB; both sm_80 and
# sm_90 would be about twice). The CPU trainer is built for x86-64-v3 (AVX2), not this machine's
# -march=native: the GPU machine's processor may be another.
GPU_BUNDLE_LABS := build/lab/flash_attention build/lab/layernorm build/lab/classifier
GPU_BUNDLE := build/bundle/train_gpt build/bundle/train_gpt_cpu $(GPU_TEST_BINS) $(GPU_BUNDLE_LABS)
GPU_BUNDLE_DATA := data/brown/brown_train.bin data/brown/brown_val.bin data/gpt2
build/bundle/train_gpt: train_gpt.cu $(HEADERS) $(GPU_ARCH_STAMP)
	@mkdir -p build/bundle
	$(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH_FLAGS) -DKEEL_CUDA -I. -Xcompiler -fopenmp,-ffp-contract=off,-fno-math-errno $< -o $@ \
	  -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -lcublasLt -lcublas -lm
build/bundle/train_gpt_cpu: train_gpt.cu $(HEADERS)
	@mkdir -p build/bundle
	$(CXX) -O3 -march=x86-64-v3 $(KEEL_CXXFLAGS) -x c++ $< -o $@ $(LDLIBS)
ifneq ($(NVCC),)
gpu-bundle:
	@$(MAKE) --no-print-directory GPU_ARCH="$(if $(filter file,$(origin GPU_ARCH)),90,$(GPU_ARCH))" gpu-bundle-files
gpu-bundle-files: $(GPU_BUNDLE)
	@$(MAKE) --no-print-directory data
	@echo "gpu-bundle: $$(du -cb build/bundle build/gpu $(GPU_BUNDLE_LABS) $(GPU_BUNDLE_DATA) | tail -n 1 | awk '{ printf "%.1f MiB", $$1 / 1048576 }') to bring to the GPU machine (8 paths):"
	@echo "  build/bundle build/gpu $(GPU_BUNDLE_LABS) $(GPU_BUNDLE_DATA)"
	@echo "  then there: bash scripts/gpu_session.sh"
else
gpu-bundle:
	@echo "✗ gpu-bundle needs nvcc (see the ✓/✗ lines above)"; exit 1
endif

# ---- kernel lab (dev/cuda) --------------------------------------------------------------------------
# One program per hot kernel family: numbered variants, each checked against the CPU op before it
# is timed (dev/cuda/README.md). `make cuda-lab` builds them with nvcc for the GPU arch above into
# build/lab/; `make cuda-lab-emu` builds them with g++ against the CUDA emulation and runs their
# checks at a tiny shape (nothing is timed there).
LAB_SRCS := $(wildcard dev/cuda/*.cu)
LAB_BINS := $(patsubst dev/cuda/%.cu,build/lab/%,$(LAB_SRCS))
LAB_EMU_BINS := $(patsubst dev/cuda/%.cu,build/lab_emu/%,$(LAB_SRCS))
LAB_EMU_ARGS ?= -B 2 -T 37 -C 48 -NH 4 -V 500 -Vp 512 -r 1 -S 64
build/lab/%: dev/cuda/%.cu dev/cuda/lab.h $(HEADERS) $(GPU_ARCH_STAMP)
	@mkdir -p build/lab
	$(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH_FLAGS) -I. $< -o $@ -Xcompiler -fopenmp,-ffp-contract=off,-fno-math-errno \
	  -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas
build/lab_emu/%: dev/cuda/%.cu dev/cuda/lab.h $(HEADERS) $(EMU_HEADERS)
	@mkdir -p build/lab_emu
	$(CXX) -O2 $(KEEL_CXXFLAGS) $(EMU_FLAGS) -x c++ $< -o $@ $(LDLIBS)
ifneq ($(NVCC),)
cuda-lab: $(LAB_BINS)
else
cuda-lab:
	@echo "✗ cuda-lab needs nvcc (and NCCL headers; see the ✓/✗ lines above)"; exit 1
endif
cuda-lab-emu: $(LAB_EMU_BINS)
	@for b in $(LAB_EMU_BINS); do echo "== $$b $(LAB_EMU_ARGS)"; $$b $(LAB_EMU_ARGS) || exit 1; done

# Builds only what the CPU demo runs: no CUDA trainer (nvcc takes minutes), no dev tools.
run: setup
	@$(MAKE) --no-print-directory KEEL_BANNER=1 -j$(BUILD_JOBS) train_gpt_cpu tokenize_gpt2
	@$(MAKE) --no-print-directory data
	@bash scripts/run_brown_cpu.sh

build/fma_peak: dev/fma_peak.cpp
	@mkdir -p build
	$(CXX) -O2 -fopenmp $< -o $@

# One row of the step model's GPU table as `key value` lines (scripts/step_curves.sh reads its peaks).
build/gpu_spec: dev/gpu_spec.cpp $(HEADERS)
	@mkdir -p build
	$(CXX) $(CXXFLAGS) $(KEEL_CXXFLAGS) $< -o $@ $(LDLIBS)

bench: train_gpt_cpu build/fma_peak
	@bash scripts/bench.sh

# The GPU trainer's step profile without a GPU (the emulator's KEEL_EMU_PROFILE counts): launches,
# tensor-core FLOPs against the model's, syncs, allocations and bytes per iteration.
# Registers, stack frame, spills and shared memory of every kernel for sm_80 and sm_90 (nvcc, no GPU);
# fails when any kernel has a stack frame or spills (test_ptxas runs it).
ptxas-report:
	@bash scripts/ptxas_report.sh $(or $(PTXAS_ARCH),80 90)
# The same report, also written as the table the CUDA emulator checks each launch's registers ×
# threads against (docs/emulator.md); test_ptxas fails when the checked-in table is not current.
kernel-registers:
	@bash scripts/ptxas_report.sh --registers test/cuda_emu/kernel_registers.h 80 90

gpu-profile:
	@bash scripts/gpu_profile.sh

# The targets, one line each: the header comment of this file.
help:
	@sed -n 's/^#   make/  make/p; s/^# Overrides:/Overrides:/p' $(firstword $(MAKEFILE_LIST))

clean:
	rm -rf build train_gpt_cpu train_gpt tokenize_gpt2 batch_lookup layer_norms megatron_data preprocess_data
