# cuda/mk/llama.mk - the CUDA Llama (llama-cuda helper), included by cuda/module.mk before its aggregate targets.
#   train_llamacu        train_llama.cu (bf16) + models/llama_host.c (train_llama.c's table, init, model files)
#   train_llamacu_fp32   the same all in fp32 (tight comparisons with train_llama)
#   kernel tests         dev/cuda/{rmsnorm,rope,swiglu,gqa}.cu -> $(CUDA_BUILD)/test_<name> (module.mk's pattern rule)
#   model tests          test/gpu/test_llamacu.cu: the whole model against train_llama.c, bf16 and fp32 builds;
#                        test/gpu/test_llamacu_update.cu: the device update against the host update
# Rules follow module.mk's GPT-2 ones (NVCC_TRAIN_FLAGS, CUDA_TRAIN_LIBS, BLAS_FALLBACK), and for the device update
# cuda/mk/dist.mk's (dist.o per precision, NCCL_LIBS, UPDATER_NVCC_FLAGS, DIST_OBJ). That file is read before
# this one: its variables appear here only in recipes, target-specific values and $$-expanded prerequisites, all
# expanded after every makefile is read.

LLAMA_KERNEL_TESTS := rmsnorm rope swiglu gqa
CUDA_KERNEL_TESTS += $(LLAMA_KERNEL_TESTS)

$(BUILD)/cuda/train_llama.o: train_llama.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_TRAIN_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/cuda-fp32/train_llama.o: train_llama.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_TRAIN_FLAGS) -DENABLE_FP32 -MMD -MP -c $< -o $@
train_llamacu: $(BUILD)/cuda/train_llama.o $(BUILD)/models/llama_host.o $$(TRAIN_LINK_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS) $(CUDA_TRAIN_LIBS)
train_llamacu_fp32: $(BUILD)/cuda-fp32/train_llama.o $(BUILD)/models/llama_host.o $$(TRAIN_LINK_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS) $(CUDA_TRAIN_LIBS)
CUDA_TRAINERS += train_llamacu train_llamacu_fp32
# the trainers link the device update of their precision (cuda/mk/dist.mk builds it) and NCCL
train_llamacu: $(BUILD)/cuda/dist.o
train_llamacu_fp32: $(BUILD)/cuda-fp32/dist.o
train_llamacu train_llamacu_fp32: CUDA_TRAIN_LIBS += $(NCCL_LIBS)

# whole-model test: train_llama.cu (TESTING) against train_llama.c in one process, bf16 and fp32 builds
$(BUILD)/cuda/test_llamacu.o: test/gpu/test_llamacu.cu train_llama.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_TRAIN_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/cuda-fp32/test_llamacu.o: test/gpu/test_llamacu.cu train_llama.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_TRAIN_FLAGS) -DENABLE_FP32 -MMD -MP -c $< -o $@
# BLAS_FALLBACK=1 (module.mk): the CPU reference links models/blas_fallback.c's plain sgemm instead of OpenBLAS
ifeq ($(BLAS_FALLBACK),1)
LLAMA_HOST_TEST_OBJ := $(BUILD)/models/llama_host_noblas.o $(BUILD)/models/blas_fallback.o
LLAMA_HOST_TEST_LIBS :=
else
LLAMA_HOST_TEST_OBJ := $(BUILD)/models/llama_host.o
LLAMA_HOST_TEST_LIBS := $(BLAS_LIBS)
endif
$(BUILD)/cuda/test_llamacu $(BUILD)/cuda-fp32/test_llamacu: %/test_llamacu: %/test_llamacu.o $(LLAMA_HOST_TEST_OBJ) $(BUILD)/optim/optim.o $(COMMON_OBJ)
	$(CC) $(CFLAGS) $^ -o $@ $(LLAMA_HOST_TEST_LIBS) $(LDLIBS) $(CUDA_TRAIN_LIBS)
CUDA_MODEL_TESTS += $(BUILD)/cuda/test_llamacu $(BUILD)/cuda-fp32/test_llamacu

# test/gpu/test_llamacu_update.cu: train_llama.cu through its device update vs through the host update, bf16 and
# fp32; linked by $(MPICC) (the host update and the device update's MPI path are Open MPI's)
$(BUILD)/cuda/test_llamacu_update.o: test/gpu/test_llamacu_update.cu train_llama.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_TRAIN_FLAGS) $(UPDATER_NVCC_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/cuda-fp32/test_llamacu_update.o: test/gpu/test_llamacu_update.cu train_llama.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_TRAIN_FLAGS) $(UPDATER_NVCC_FLAGS) -DENABLE_FP32 -MMD -MP -c $< -o $@
$(BUILD)/cuda/test_llamacu_update $(BUILD)/cuda-fp32/test_llamacu_update: %/test_llamacu_update: %/test_llamacu_update.o %/dist.o $(LLAMA_HOST_TEST_OBJ) $(BUILD)/optim/updater_host.o $$(DIST_OBJ) $(COMMON_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(LLAMA_HOST_TEST_LIBS) $(LDLIBS) -lpthread $(CUDA_TRAIN_LIBS) $(NCCL_LIBS)
CUDA_MODEL_TESTS += $(BUILD)/cuda/test_llamacu_update $(BUILD)/cuda-fp32/test_llamacu_update

# everything of the CUDA Llama (GPU_ARCH / PRECISION as for `make cuda`)
.PHONY: llamacu
llamacu: train_llamacu train_llamacu_fp32 $(LLAMA_KERNEL_TESTS:%=$(CUDA_BUILD)/test_%) $(BUILD)/cuda/test_llamacu $(BUILD)/cuda-fp32/test_llamacu \
         $(BUILD)/cuda/test_llamacu_update $(BUILD)/cuda-fp32/test_llamacu_update
