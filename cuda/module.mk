# cuda/module.mk - the CUDA build (CUDA engineer). Nothing here is part of `make` / `make test` (which must not
# need nvcc): `make cuda` compiles every CUDA target (kernel tests in dev/cuda, train_gptcu), `make train_gptcu`
# the trainer, `make test-gpu` builds and runs the GPU tests (fails, saying so, where no GPU is usable).
#   GPU_ARCH="80 90"  compute capabilities of the fat binary (default: A100 and H100/H200), plus PTX of the newest
#   PRECISION=FP32    kernel tests in fp32 instead of bf16, under build/cuda-fp32 (the fp32 trainer is always
#                     built as train_gptcu_fp32)
#   USE_CUDNN=1       defines ENABLE_CUDNN and links cuDNN 9: the plain targets use cuDNN attention (cuda/mk/cudnn.mk)
#   CUDA_HOME         toolkit root (default /usr/local/cuda)

CUDA_HOME ?= /usr/local/cuda
ifeq ($(origin NVCC),undefined)
NVCC := $(or $(shell command -v nvcc 2>/dev/null),$(CUDA_HOME)/bin/nvcc)
endif
GPU_ARCH  ?= 80 90
# PTX of the newest listed architecture rides along with the SASS, so a GPU newer than every entry (Blackwell, ...)
# JIT-compiles it at start-up instead of failing with "no kernel image is available for execution on the device"
GPU_PTX_ARCH := $(shell printf "%s\n" $(GPU_ARCH) | sort -n | tail -1)
PRECISION ?= BF16
USE_CUDNN ?= 0
CUDA_BUILD := $(BUILD)/cuda$(if $(filter FP32,$(PRECISION)),-fp32)

NVCC_FLAGS := -O3 -std=c++17 -I. -lineinfo --Werror all-warnings \
              -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-Wno-unused-function,-Werror \
              $(foreach a,$(GPU_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
              -gencode arch=compute_$(GPU_PTX_ARCH),code=compute_$(GPU_PTX_ARCH)
ifeq ($(PRECISION),FP32)
NVCC_FLAGS += -DENABLE_FP32
endif
ifeq ($(USE_CUDNN),1)
NVCC_FLAGS += -DENABLE_CUDNN
CUDNN_LIBS := -lcudnn
endif
# extra library directories (e.g. a Python env's nvidia/*/lib), colon-separated, also used as rpath
CUDA_LIB_DIRS ?=
NVCC_LDFLAGS := -L$(CUDA_HOME)/lib64 -Xlinker -rpath=$(CUDA_HOME)/lib64 $(foreach d,$(subst :, ,$(CUDA_LIB_DIRS)),-L$(d) -Xlinker -rpath=$(d))
CUDA_LIBS := -lcublasLt -lcublas $(CUDNN_LIBS)

# kernel tests: dev/cuda/<name>.cu -> $(CUDA_BUILD)/test_<name>; each checks its kernels against a CPU reference
CUDA_KERNEL_TESTS := encoder layernorm gelu matmul attention classifier optimizer global_norm
# the optimizer test checks the device AdamW/AdamS against optim/optim.c itself
$(CUDA_BUILD)/test_optimizer: $(BUILD)/optim/optim.o $(COMMON_OBJ)
$(CUDA_BUILD)/test_optimizer: CUDA_EXTRA_OBJ = $(BUILD)/optim/optim.o $(COMMON_OBJ) -Xcompiler -fopenmp

$(CUDA_BUILD)/test_%: dev/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -MMD -MP $< $(CUDA_EXTRA_OBJ) -o $@ $(NVCC_LDFLAGS) $(CUDA_LIBS)

$(CUDA_BUILD)/gpu_probe: dev/cuda/gpu_probe.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -MMD -MP $< -o $@ $(NVCC_LDFLAGS)

# The trainer: train_gpt.cu (device model) + models/gpt2_host.c (train_gpt.c's table, init and model files, built
# by $(CC)) + the shared loop, linked by $(MPICC) like train_gpt. train_gptcu is bf16, train_gptcu_fp32 all fp32.
CUDA_TRAIN_LIBS = -L$(CUDA_HOME)/lib64 -Wl,-rpath=$(CUDA_HOME)/lib64 $(foreach d,$(subst :, ,$(CUDA_LIB_DIRS)),-L$(d) -Wl,-rpath=$(d)) \
                  -lcudart $(CUDA_LIBS) -lstdc++
NVCC_TRAIN_FLAGS = $(filter-out -DENABLE_FP32,$(NVCC_FLAGS)) -Xcompiler -fopenmp
$(BUILD)/cuda/train_gpt.o: train_gpt.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_TRAIN_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/cuda-fp32/train_gpt.o: train_gpt.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_TRAIN_FLAGS) -DENABLE_FP32 -MMD -MP -c $< -o $@
train_gptcu: $(BUILD)/cuda/train_gpt.o $(BUILD)/models/gpt2_host.o $$(TRAIN_LINK_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS) $(CUDA_TRAIN_LIBS)
train_gptcu_fp32: $(BUILD)/cuda-fp32/train_gpt.o $(BUILD)/models/gpt2_host.o $$(TRAIN_LINK_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS) $(CUDA_TRAIN_LIBS)
CUDA_TRAINERS := train_gptcu train_gptcu_fp32

# whole-model test: train_gpt.cu (TESTING) against train_gpt.c in one process, bf16 and fp32 builds
$(BUILD)/cuda/test_gpt2cu.o: test/gpu/test_gpt2cu.cu train_gpt.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_TRAIN_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/cuda-fp32/test_gpt2cu.o: test/gpu/test_gpt2cu.cu train_gpt.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_TRAIN_FLAGS) -DENABLE_FP32 -MMD -MP -c $< -o $@
# BLAS_FALLBACK=1: for GPU machines without OpenBLAS, the CPU reference links models/blas_fallback.c's plain sgemm
# (the *_noblas.o objects: models/module.mk)
BLAS_FALLBACK ?= 0
ifeq ($(BLAS_FALLBACK),1)
GPT2_HOST_TEST_OBJ := $(BUILD)/models/gpt2_host_noblas.o $(BUILD)/models/blas_fallback.o
GPT2_HOST_TEST_LIBS :=
else
GPT2_HOST_TEST_OBJ := $(BUILD)/models/gpt2_host.o
GPT2_HOST_TEST_LIBS := $(BLAS_LIBS)
endif
$(BUILD)/cuda/test_gpt2cu $(BUILD)/cuda-fp32/test_gpt2cu: %/test_gpt2cu: %/test_gpt2cu.o $(GPT2_HOST_TEST_OBJ) $(BUILD)/optim/optim.o $(COMMON_OBJ)
	$(CC) $(CFLAGS) $^ -o $@ $(GPT2_HOST_TEST_LIBS) $(LDLIBS) $(CUDA_TRAIN_LIBS)
CUDA_MODEL_TESTS := $(BUILD)/cuda/test_gpt2cu $(BUILD)/cuda-fp32/test_gpt2cu

# Each further CUDA component (SCAPE kernels, the device optimizer, the Llama trainer) keeps its rules in its own
# fragment cuda/mk/<part>.mk, which appends to CUDA_KERNEL_TESTS (dev/cuda/<name>.cu programs), CUDA_MODEL_TESTS
# (whole-model test binaries) and CUDA_TRAINERS; the aggregate targets below are defined after them.
include $(sort $(wildcard cuda/mk/*.mk))
CUDA_TEST_BINS := $(CUDA_KERNEL_TESTS:%=$(CUDA_BUILD)/test_%)

# USE_CUDNN changes what the objects hold but not their paths: a stamp with its value (rewritten when it differs)
# is a prerequisite of everything compiled from code that may include cuda/attention.cuh, so switching rebuilds it
# instead of linking a stale object (a "USE_CUDNN=1 make train_gptcu" after a plain build would run cuBLAS).
CUDNN_STAMP := $(BUILD)/cuda/.use_cudnn
ifneq ($(shell cat $(CUDNN_STAMP) 2>/dev/null),$(USE_CUDNN))
$(shell mkdir -p $(BUILD)/cuda && echo $(USE_CUDNN) > $(CUDNN_STAMP))
endif
$(CUDA_TEST_BINS) $(patsubst %,%.o,$(CUDA_MODEL_TESTS)) $(BUILD)/cuda/train_gpt.o $(BUILD)/cuda-fp32/train_gpt.o \
    $(BUILD)/cuda/train_llama.o $(BUILD)/cuda-fp32/train_llama.o: $(CUDNN_STAMP)

.PHONY: cuda test-gpu cuda-tests
cuda-tests: $(CUDA_BUILD)/gpu_probe $(CUDA_TEST_BINS) $(CUDA_MODEL_TESTS)
cuda: cuda-tests $(CUDA_TRAINERS)

# The probe runs first and fails with one line when no GPU is usable; every test binary fails on its own too.
test-gpu: cuda-tests
	@test/run.sh $(CUDA_BUILD)/gpu_probe $(CUDA_TEST_BINS) $(CUDA_MODEL_TESTS)

-include $(wildcard $(BUILD)/cuda/*.d $(BUILD)/cuda-fp32/*.d)

clean: clean-cuda
.PHONY: clean-cuda
clean-cuda:
	rm -f $(CUDA_TRAINERS)

# the lists scripts/gpu_check.sh builds and runs (one name or path per line)
.PHONY: print-cuda-kernel-tests print-cuda-model-tests
print-cuda-kernel-tests:
	@printf '%s\n' $(CUDA_KERNEL_TESTS)
print-cuda-model-tests:
	@printf '%s\n' $(CUDA_MODEL_TESTS)
