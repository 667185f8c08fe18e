# cuda/mk/scape.mk - SCAPE's device kernels (cuda/scape.cuh; scape-kernels engineer). Included by cuda/module.mk.
# dev/cuda/scape.cu checks every kernel against optim/scape.c (top-k, momentum, gather, masks) and the shared
# scape_update_on of optim/scape.h: bit for bit, so its host code is compiled without FMA contraction, like
# scape.o (-ffp-contract=off); scape.o needs OpenMP.
CUDA_KERNEL_TESTS += scape
$(CUDA_BUILD)/test_scape: $(BUILD)/optim/scape.o $(COMMON_OBJ)
$(CUDA_BUILD)/test_scape: CUDA_EXTRA_OBJ = $(BUILD)/optim/scape.o $(COMMON_OBJ) -Xcompiler -fopenmp -Xcompiler -ffp-contract=off

# No GPU needed, part of `make test`: the GPU top-k's decomposition emulated on the CPU with the kernels' own
# select step and marking rule (optim/scape.h, compiled for host and device), against scape_topk_mask.
$(BUILD)/test_scape_topk_emul: test/test_scape_topk_emul.c $(BUILD)/optim/scape.o $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
TEST_BINS += $(BUILD)/test_scape_topk_emul
TEST_CMDS += $(BUILD)/test_scape_topk_emul

# The kernels of cuda/scape.cuh also run on the CPU, with dev/cuda/scape.cu, in `make test-emu` (cuda/mk/emu.mk).
