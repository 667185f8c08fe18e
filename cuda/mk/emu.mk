# cuda/mk/emu.mk - `make test-emu`: the project's CUDA code run on the CPU by the emulator in dev/cuda/emu/
# (README.md there: what it checks and what it cannot). g++ only: no nvcc, no GPU, no CUDA headers.
#   1. dev/cuda/emu/rewrite.py copies the CUDA sources into build/emu/src/ with each kernel launch rewritten;
#   2. every kernel test in CUDA_KERNEL_TESTS (dev/cuda/<name>.cu) and the whole-model tests are compiled by g++
#      with AddressSanitizer against the emulator's headers, bf16 (build/emu/bf16/) and fp32 (build/emu/fp32/);
#   3. test/run.sh runs them (the matmul and GPT-2 tests also with every cuBLASLt epilogue refused, so the
#      fallbacks run; the fp32 device update and SCAPE tests also on 2 ranks, host-staged MPI, as two ranks sharing
#      a GPU; the tests whose code uses several streams also with EMU_STREAMS=reverse)
#      plus the emulator's self-test (deliberate bugs it must report), one process at a time,
#      one OpenMP/OpenBLAS thread each.
# Tests shrink their large timed cases under CUDA_EMU (defined by the emulator's header).
# Included by cuda/module.mk before its aggregate targets; CUDA_KERNEL_TESTS is read at run time, so kernel tests
# added by later fragments are included.
CUEMU := $(BUILD)/emu
CUEMU_CXX ?= g++
CUEMU_SAN ?= -fsanitize=address -fno-omit-frame-pointer
CUEMU_CXXFLAGS = -std=c++17 -O1 -g $(CUEMU_SAN) -ffp-contract=off -fopenmp -w -DCUDA_EMU \
                 -include dev/cuda/emu/include/emu.h -Idev/cuda/emu/include -I$(CUEMU)/src -I.
CUEMU_RT := $(CUEMU)/obj/emu.o $(CUEMU)/obj/emu_blas.o $(CUEMU)/obj/emu_raw.o
CUEMU_LIBS = $(BLAS_LIBS) -lm -lstdc++ -lpthread
CUEMU_HDRS := $(wildcard dev/cuda/emu/include/*.h dev/cuda/emu/include/cub/*.cuh dev/cuda/emu/include/cub/device/*.cuh)
# the host headers the CUDA sources include (struct layouts such as optim/updater.h's Updater): the rewritten copies
# under $(CUEMU)/src do not carry their dependencies, so a changed header must rebuild the emulator objects too
CUEMU_HDRS += $(wildcard common/*.h optim/*.h trainer/*.h dataloader/*.h tokenizer/*.h)
CUEMU_SRC = $(wildcard cuda/*.cuh cuda/*.cu dev/cuda/*.cu dev/cuda/*.cuh test/gpu/*.cu test/gpu/*.cuh train_gpt.cu train_llama.cu) \
            dev/cuda/emu/selftest.cu
# host objects the kernel tests may link (the optimizer and SCAPE tests check against optim/*.c)
CUEMU_HOST_OBJ = $(BUILD)/optim/optim.o $(BUILD)/optim/scape.o $(COMMON_OBJ)
CUEMU_ENV := ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

$(CUEMU)/src/.stamp: $$(CUEMU_SRC) dev/cuda/emu/rewrite.py
	@mkdir -p $(dir $@)
	$(PYTHON_REF) dev/cuda/emu/rewrite.py $(CUEMU)/src $(CUEMU_SRC)
	@touch $@
$(CUEMU)/obj/emu_raw.o: dev/cuda/emu/emu_raw.c
	@mkdir -p $(dir $@)
	$(CC) -O3 -fno-tree-loop-distribute-patterns -c $< -o $@
# NCCL as MPI (emu_nccl.cpp): compiled against mpi.h, linked only into the programs that link the device update
MPICXX ?= mpicxx
$(CUEMU)/obj/emu_nccl.o: dev/cuda/emu/emu_nccl.cpp $(CUEMU_HDRS)
	@mkdir -p $(dir $@)
	$(MPICXX) $(filter-out -include dev/cuda/emu/include/emu.h,$(CUEMU_CXXFLAGS)) -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX -O2 -c $< -o $@
$(CUEMU)/obj/%.o: dev/cuda/emu/%.cpp $(CUEMU_HDRS)
	@mkdir -p $(dir $@)
	$(CUEMU_CXX) $(filter-out -include dev/cuda/emu/include/emu.h,$(CUEMU_CXXFLAGS)) -O2 -c $< -o $@

# kernel tests: dev/cuda/<name>.cu
$(CUEMU)/bf16/test_%: $(CUEMU)/src/.stamp $(CUEMU_RT) $(CUEMU_HDRS) $$(CUEMU_HOST_OBJ)
	@mkdir -p $(dir $@)
	$(CUEMU_CXX) $(CUEMU_CXXFLAGS) -x c++ $(CUEMU)/src/dev/cuda/$*.cu -x none $(CUEMU_RT) $(CUEMU_HOST_OBJ) -o $@ $(CUEMU_LIBS)
$(CUEMU)/fp32/test_%: $(CUEMU)/src/.stamp $(CUEMU_RT) $(CUEMU_HDRS) $$(CUEMU_HOST_OBJ)
	@mkdir -p $(dir $@)
	$(CUEMU_CXX) $(CUEMU_CXXFLAGS) -DENABLE_FP32 -x c++ $(CUEMU)/src/dev/cuda/$*.cu -x none $(CUEMU_RT) $(CUEMU_HOST_OBJ) -o $@ $(CUEMU_LIBS)

# whole-model tests, built as cuda/module.mk, cuda/mk/llama.mk and cuda/mk/dist.mk build them for the GPU; the
# device update with ENABLE_NCCL against the emulator's NCCL (MPI underneath; EMU_DEVICES=2 gives each of two
# ranks its own emulated GPU, so the --comm nccl paths run)
CUEMU_PREC_bf16 :=
CUEMU_PREC_fp32 := -DENABLE_FP32
define CUEMU_MODEL
$(CUEMU)/$(1)/test_gpt2cu: test/gpu/test_gpt2cu.cu $(CUEMU)/src/.stamp $(CUEMU_RT) $(CUEMU_HDRS) $(BUILD)/models/gpt2_host.o $(BUILD)/optim/optim.o $(COMMON_OBJ)
	@mkdir -p $$(dir $$@)
	$$(CUEMU_CXX) $$(CUEMU_CXXFLAGS) $(CUEMU_PREC_$(1)) -x c++ $(CUEMU)/src/test/gpu/test_gpt2cu.cu -x none $(CUEMU_RT) $(BUILD)/models/gpt2_host.o $(BUILD)/optim/optim.o $(COMMON_OBJ) -o $$@ $$(CUEMU_LIBS)
$(CUEMU)/$(1)/test_llamacu: test/gpu/test_llamacu.cu $(CUEMU)/src/.stamp $(CUEMU_RT) $(CUEMU_HDRS) $(BUILD)/models/llama_host.o $(BUILD)/optim/optim.o $(COMMON_OBJ)
	@mkdir -p $$(dir $$@)
	$$(CUEMU_CXX) $$(CUEMU_CXXFLAGS) $(CUEMU_PREC_$(1)) -x c++ $(CUEMU)/src/test/gpu/test_llamacu.cu -x none $(CUEMU_RT) $(BUILD)/models/llama_host.o $(BUILD)/optim/optim.o $(COMMON_OBJ) -o $$@ $$(CUEMU_LIBS)
$(CUEMU)/$(1)/dist.o: cuda/dist.cu $(CUEMU)/src/.stamp $(CUEMU_HDRS)
	@mkdir -p $$(dir $$@)
	$$(CUEMU_CXX) $$(CUEMU_CXXFLAGS) $(CUEMU_PREC_$(1)) -DENABLE_NCCL -x c++ -c $(CUEMU)/src/cuda/dist.cu -o $$@
$(CUEMU)/$(1)/test_updater: test/gpu/test_updater.cu $(CUEMU)/src/.stamp $(CUEMU_RT) $(CUEMU_HDRS) $(CUEMU)/$(1)/dist.o $(CUEMU)/obj/emu_nccl.o $$$$(DIST_OBJ) $(COMMON_OBJ)
	@mkdir -p $$(dir $$@)
	$$(CUEMU_CXX) $$(CUEMU_CXXFLAGS) $(CUEMU_PREC_$(1)) -x c++ -c $(CUEMU)/src/test/gpu/test_updater.cu -o $$@.o
	$$(MPICC) -fopenmp $$(CUEMU_SAN) $$@.o $(CUEMU)/$(1)/dist.o $(CUEMU_RT) $(CUEMU)/obj/emu_nccl.o $$(DIST_OBJ) $(COMMON_OBJ) -o $$@ $$(CUEMU_LIBS)
$(CUEMU)/$(1)/test_gpt2cu_update: test/gpu/test_gpt2cu_update.cu $(CUEMU)/src/.stamp $(CUEMU_RT) $(CUEMU_HDRS) $(CUEMU)/$(1)/dist.o $(CUEMU)/obj/emu_nccl.o $(BUILD)/models/gpt2_host.o $(BUILD)/optim/updater_host.o $$$$(DIST_OBJ) $(COMMON_OBJ)
	@mkdir -p $$(dir $$@)
	$$(CUEMU_CXX) $$(CUEMU_CXXFLAGS) $(CUEMU_PREC_$(1)) -x c++ -c $(CUEMU)/src/test/gpu/test_gpt2cu_update.cu -o $$@.o
	$$(MPICC) -fopenmp $$(CUEMU_SAN) $$@.o $(CUEMU)/$(1)/dist.o $(CUEMU_RT) $(CUEMU)/obj/emu_nccl.o $(BUILD)/models/gpt2_host.o $(BUILD)/optim/updater_host.o $$(DIST_OBJ) $(COMMON_OBJ) -o $$@ $$(CUEMU_LIBS)
$(CUEMU)/$(1)/test_scape_updater: test/gpu/test_scape_updater.cu $(CUEMU)/src/.stamp $(CUEMU_RT) $(CUEMU_HDRS) $(CUEMU)/$(1)/dist.o $(CUEMU)/obj/emu_nccl.o $$$$(DIST_OBJ) $(COMMON_OBJ)
	@mkdir -p $$(dir $$@)
	$$(CUEMU_CXX) $$(CUEMU_CXXFLAGS) $(CUEMU_PREC_$(1)) -x c++ -c $(CUEMU)/src/test/gpu/test_scape_updater.cu -o $$@.o
	$$(MPICC) -fopenmp $$(CUEMU_SAN) $$@.o $(CUEMU)/$(1)/dist.o $(CUEMU_RT) $(CUEMU)/obj/emu_nccl.o $$(DIST_OBJ) $(COMMON_OBJ) -o $$@ $$(CUEMU_LIBS)
$(CUEMU)/$(1)/test_llamacu_update: test/gpu/test_llamacu_update.cu $(CUEMU)/src/.stamp $(CUEMU_RT) $(CUEMU_HDRS) $(CUEMU)/$(1)/dist.o $(CUEMU)/obj/emu_nccl.o $(BUILD)/models/llama_host.o $(BUILD)/optim/updater_host.o $$$$(DIST_OBJ) $(COMMON_OBJ)
	@mkdir -p $$(dir $$@)
	$$(CUEMU_CXX) $$(CUEMU_CXXFLAGS) $(CUEMU_PREC_$(1)) -x c++ -c $(CUEMU)/src/test/gpu/test_llamacu_update.cu -o $$@.o
	$$(MPICC) -fopenmp $$(CUEMU_SAN) $$@.o $(CUEMU)/$(1)/dist.o $(CUEMU_RT) $(CUEMU)/obj/emu_nccl.o $(BUILD)/models/llama_host.o $(BUILD)/optim/updater_host.o $$(DIST_OBJ) $(COMMON_OBJ) -o $$@ $$(CUEMU_LIBS)
endef
$(foreach p,bf16 fp32,$(eval $(call CUEMU_MODEL,$(p))))
CUEMU_MODEL_TESTS := test_gpt2cu test_llamacu test_updater test_gpt2cu_update test_scape_updater test_llamacu_update
# the tests whose code uses more than one stream run again with EMU_STREAMS=reverse (every run above is
# EMU_STREAMS=defer, the emulator's default): between them, a missing stream wait or host synchronisation in
# either direction gives wrong results (dev/cuda/emu/README.md)
CUEMU_STREAM_TESTS := test_updater test_scape_updater test_gpt2cu_update test_llamacu_update

# the emulator's self-test: deliberate bugs it must report (dev/cuda/emu/selftest.cu, expect_fail.sh)
$(CUEMU)/selftest: dev/cuda/emu/selftest.cu $(CUEMU_RT) $(CUEMU_HDRS) $(CUEMU)/src/.stamp
	@mkdir -p $(dir $@)
	$(CUEMU_CXX) $(CUEMU_CXXFLAGS) -x c++ $(CUEMU)/src/dev/cuda/emu/selftest.cu -x none $(CUEMU_RT) -o $@ $(CUEMU_LIBS)
CUEMU_SELFTEST_CASES := oob_write oob_read exited_lane_shuffle syncthreads_after_exit divergent_syncthreads \
                        host_pointer_argument memcpy_direction lt_leading_dimension lt_alignment launch_bounds \
                        unordered_streams_raw unordered_streams_war host_reads_before_sync

CUEMU_BINS = $(foreach p,bf16 fp32,$(CUDA_KERNEL_TESTS:%=$(CUEMU)/$(p)/test_%) $(CUEMU_MODEL_TESTS:%=$(CUEMU)/$(p)/%))
# each model test is stopped after CUEMU_TIMEOUT seconds (a hang must fail, not stall CI)
CUEMU_TIMEOUT ?= 600
CUEMU_CMDS = $(foreach p,bf16 fp32,$(CUDA_KERNEL_TESTS:%=$(CUEMU)/$(p)/test_%) \
                 "EMU_LT_NO_EPILOGUE=1 $(CUEMU)/$(p)/test_matmul" "EMU_LT_NO_EPILOGUE=2 $(CUEMU)/$(p)/test_matmul" \
                 $(CUEMU_MODEL_TESTS:%="timeout $(CUEMU_TIMEOUT) $(CUEMU)/$(p)/%") \
                 "EMU_LT_NO_EPILOGUE=1 timeout $(CUEMU_TIMEOUT) $(CUEMU)/$(p)/test_gpt2cu") \
             "timeout 900 env $(MPIRUN_TEST) -np 2 $(CUEMU)/fp32/test_scape_updater" \
             $(CUEMU_STREAM_TESTS:%="EMU_STREAMS=reverse timeout $(CUEMU_TIMEOUT) $(CUEMU)/fp32/%") \
             "timeout 900 env EMU_STREAMS=reverse $(MPIRUN_TEST) -np 2 $(CUEMU)/fp32/test_scape_updater" \
             "timeout 900 env EMU_DEVICES=2 $(MPIRUN_TEST) -np 2 $(CUEMU)/fp32/test_updater" \
             "timeout 900 env EMU_DEVICES=2 EMU_STREAMS=reverse $(MPIRUN_TEST) -np 2 $(CUEMU)/fp32/test_updater" \
             "timeout 900 env EMU_DEVICES=2 $(MPIRUN_TEST) -np 2 $(CUEMU)/fp32/test_scape_updater nccl" \
             "timeout 900 env EMU_DEVICES=2 EMU_STREAMS=reverse $(MPIRUN_TEST) -np 2 $(CUEMU)/fp32/test_scape_updater nccl" \
             "$(CUEMU)/selftest ok" $(CUEMU_SELFTEST_CASES:%="dev/cuda/emu/expect_fail.sh $(CUEMU)/selftest %") \
             "dev/cuda/emu/expect_fail.sh $(CUEMU)/fp32/test_gelu old_driver"

.PHONY: test-emu emu-build
emu-build: $$(CUEMU_BINS) $(CUEMU)/selftest
test-emu: emu-build
	@$(CUEMU_ENV) test/run.sh $(CUEMU_CMDS)
