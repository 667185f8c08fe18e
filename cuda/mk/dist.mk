# cuda/mk/dist.mk - the device-resident update (cuda/dist.cu) and its test, included by cuda/module.mk.
# cuda/dist.cu is compiled once per precision (it sees the trainer's floatX): build/cuda/dist.o for
# train_gptcu, build/cuda-fp32/dist.o for train_gptcu_fp32. NCCL is optional:
#   NCCL_HOME  where include/nccl.h and lib64 (or lib) live (default CUDA_HOME; a CUDA_LIB_DIRS entry's
#              ../include is searched too, for a Python env's nvidia/nccl)
#   USE_NCCL   1 / 0 (default: 1 when nccl.h is found); without it --comm nccl is refused with a message
NCCL_HOME ?= $(CUDA_HOME)
NCCL_INC_DIR := $(firstword $(foreach d,$(NCCL_HOME)/include $(foreach l,$(subst :, ,$(CUDA_LIB_DIRS)),$(l)/../include),$(if $(wildcard $(d)/nccl.h),$(d))))
USE_NCCL ?= $(if $(NCCL_INC_DIR),1,0)
ifeq ($(USE_NCCL),1)
UPDATER_NVCC_FLAGS := -DENABLE_NCCL $(if $(NCCL_INC_DIR),-I$(NCCL_INC_DIR))
# libnccl.so.2 by name: a pip wheel ships no unversioned libnccl.so
NCCL_LIBS := -L$(NCCL_HOME)/lib64 -L$(NCCL_HOME)/lib -Wl,-rpath=$(NCCL_HOME)/lib64 -Wl,-rpath=$(NCCL_HOME)/lib -l:libnccl.so.2
else
UPDATER_NVCC_FLAGS :=
NCCL_LIBS :=
endif
UPDATER_NVCC := $(filter-out -DENABLE_FP32,$(NVCC_FLAGS)) $(UPDATER_NVCC_FLAGS)

# -ffp-contract=off: the host code of the update (the sharded SCAPE's fold at a load) must round as optim/'s does
$(BUILD)/cuda/dist.o: cuda/dist.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(UPDATER_NVCC) -Xcompiler -ffp-contract=off -MMD -MP -c $< -o $@
$(BUILD)/cuda-fp32/dist.o: cuda/dist.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(UPDATER_NVCC) -DENABLE_FP32 -Xcompiler -ffp-contract=off -MMD -MP -c $< -o $@

# the trainers link the update of their precision (cuda/module.mk's recipes link every prerequisite) and NCCL
train_gptcu: $(BUILD)/cuda/dist.o
train_gptcu_fp32: $(BUILD)/cuda-fp32/dist.o
train_gptcu train_gptcu_fp32: CUDA_TRAIN_LIBS += $(NCCL_LIBS)

# test/gpu/test_updater.cu: the device update against optim/dist.c's host update, bf16 and fp32 builds; linked by
# $(MPICC) (the communication layer is Open MPI's; run alone or under mpirun, several ranks may share one GPU).
# $$(DIST_OBJ): optim/module.mk, which defines it, is read after this file (second expansion is on).
$(BUILD)/cuda/test_updater.o: test/gpu/test_updater.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(UPDATER_NVCC) -MMD -MP -c $< -o $@
$(BUILD)/cuda-fp32/test_updater.o: test/gpu/test_updater.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(UPDATER_NVCC) -DENABLE_FP32 -MMD -MP -c $< -o $@
$(BUILD)/cuda/test_updater $(BUILD)/cuda-fp32/test_updater: %/test_updater: %/test_updater.o %/dist.o $$(DIST_OBJ) $(COMMON_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lpthread $(CUDA_TRAIN_LIBS) $(NCCL_LIBS)
CUDA_MODEL_TESTS += $(BUILD)/cuda/test_updater $(BUILD)/cuda-fp32/test_updater

# test/gpu/test_gpt2cu_update.cu: train_gpt.cu through its device update vs through the host update, bf16 and fp32
$(BUILD)/cuda/test_gpt2cu_update.o: test/gpu/test_gpt2cu_update.cu train_gpt.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_TRAIN_FLAGS) $(UPDATER_NVCC_FLAGS) -MMD -MP -c $< -o $@
$(BUILD)/cuda-fp32/test_gpt2cu_update.o: test/gpu/test_gpt2cu_update.cu train_gpt.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_TRAIN_FLAGS) $(UPDATER_NVCC_FLAGS) -DENABLE_FP32 -MMD -MP -c $< -o $@
$(BUILD)/cuda/test_gpt2cu_update $(BUILD)/cuda-fp32/test_gpt2cu_update: %/test_gpt2cu_update: %/test_gpt2cu_update.o %/dist.o $(GPT2_HOST_TEST_OBJ) $(BUILD)/optim/updater_host.o $$(DIST_OBJ) $(COMMON_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(GPT2_HOST_TEST_LIBS) $(LDLIBS) -lpthread $(CUDA_TRAIN_LIBS) $(NCCL_LIBS)
CUDA_MODEL_TESTS += $(BUILD)/cuda/test_gpt2cu_update $(BUILD)/cuda-fp32/test_gpt2cu_update

# test/gpu/test_scape_updater.cu: device SCAPE (cuda/dist_scape.cuh inside cuda/dist.cu) against optim/dist.c's
# host SCAPE, bf16 and fp32 builds, 1 rank or under mpirun (ranks may share one GPU). Host code without FMA
# contraction: its conservation check recomputes c on the CPU bit for bit.
$(BUILD)/cuda/test_scape_updater.o: test/gpu/test_scape_updater.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(UPDATER_NVCC) -Xcompiler -ffp-contract=off -MMD -MP -c $< -o $@
$(BUILD)/cuda-fp32/test_scape_updater.o: test/gpu/test_scape_updater.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(UPDATER_NVCC) -DENABLE_FP32 -Xcompiler -ffp-contract=off -MMD -MP -c $< -o $@
$(BUILD)/cuda/test_scape_updater $(BUILD)/cuda-fp32/test_scape_updater: %/test_scape_updater: %/test_scape_updater.o %/dist.o $$(DIST_OBJ) $(COMMON_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lpthread $(CUDA_TRAIN_LIBS) $(NCCL_LIBS)
CUDA_MODEL_TESTS += $(BUILD)/cuda/test_scape_updater $(BUILD)/cuda-fp32/test_scape_updater
