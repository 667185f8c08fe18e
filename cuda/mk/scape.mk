# cuda/mk/scape.mk - SCAPE's device kernels (cuda/scape.cuh; scape-kernels engineer). Included by cuda/module.mk.
# dev/cuda/scape.cu checks every kernel against scape/scape.c (top-k, momentum, gather, masks) and the shared
# scape_update_on of scape/scape.h: bit for bit, so its host code is compiled without FMA contraction, like
# scape.o (-ffp-contract=off); scape.o needs OpenMP.
CUDA_KERNEL_TESTS += scape
$(CUDA_BUILD)/test_scape: $(BUILD)/scape/scape.o $(COMMON_OBJ)
$(CUDA_BUILD)/test_scape: CUDA_EXTRA_OBJ = $(BUILD)/scape/scape.o $(COMMON_OBJ) -Xcompiler -fopenmp -Xcompiler -ffp-contract=off

# No GPU needed, part of `make test`: the GPU top-k's decomposition emulated on the CPU with the kernels' own
# select step and marking rule (scape/scape.h, compiled for host and device), against scape_topk_mask.
$(BUILD)/test_scape_topk_emul: test/test_scape_topk_emul.c $(BUILD)/scape/scape.o $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
TEST_BINS += $(BUILD)/test_scape_topk_emul
TEST_CMDS += $(BUILD)/test_scape_topk_emul

# `make test-scape-emu`: dev/cuda/scape.cu, the real kernels of cuda/scape.cuh, run by the CPU emulation of the CUDA
# execution model in dev/cuda/emu/ (blocks as fibers, warp collectives checked for missing lanes, AddressSanitizer
# on device memory), bf16 and fp32 builds, with the large cases at 1/16 size and no timings (SCAPE_EMU). No GPU or
# nvcc needed: g++ >= 10 with the CUDA headers. About 2 minutes per build on 2 busy cores, so not in `make test`.
EMU_BUILD := $(BUILD)/emu
EMU_CXXFLAGS := -std=c++20 -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -ffp-contract=off -fopenmp -w \
                -DSCAPE_EMU -include dev/cuda/emu/emu_cuda.h -I$(EMU_BUILD)/inc -Idev/cuda/emu -I. -I$(CUDA_HOME)/include
EMU_DEPS := dev/cuda/scape.cu $(EMU_BUILD)/inc/cuda/scape.cuh dev/cuda/dev_common.cuh cuda/common.cuh scape/scape.h \
            dev/cuda/emu/emu_cuda.h dev/cuda/emu/emu_runtime.cpp dev/cuda/emu/cub/device/device_scan.cuh \
            $(BUILD)/scape/scape.o $(COMMON_OBJ)
EMU_LINK = -x none dev/cuda/emu/emu_runtime.cpp $(BUILD)/scape/scape.o $(COMMON_OBJ) -o $@ -lm
$(EMU_BUILD)/inc/cuda/scape.cuh: cuda/scape.cuh dev/cuda/emu/rewrite_launches.py
	@mkdir -p $(dir $@)
	$(PYTHON_REF) dev/cuda/emu/rewrite_launches.py $< $@
$(EMU_BUILD)/test_scape: $(EMU_DEPS)
	$(CXX) $(EMU_CXXFLAGS) -x c++ dev/cuda/scape.cu $(EMU_LINK)
$(EMU_BUILD)/test_scape_fp32: $(EMU_DEPS)
	$(CXX) $(EMU_CXXFLAGS) -DENABLE_FP32 -x c++ dev/cuda/scape.cu $(EMU_LINK)
.PHONY: test-scape-emu
test-scape-emu: $(EMU_BUILD)/test_scape $(EMU_BUILD)/test_scape_fp32
	@ASAN_OPTIONS=detect_leaks=0 test/run.sh $^
