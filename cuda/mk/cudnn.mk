# cuda/mk/cudnn.mk - cuDNN's fused flash attention (cuda/attention_cudnn.cuh, chosen by cuda/attention.cuh's
# Attention), included by cuda/module.mk before its aggregate targets. The cuDNN path is compiled by every
# `make cuda`, whatever USE_CUDNN says, so CI (nvcc, no GPU, warnings as errors) keeps it building:
#   train_gptcu_cudnn                    train_gpt.cu with -DENABLE_CUDNN (bf16), linked with cuDNN 9
#   train_llamacu_cudnn                  train_llama.cu likewise
#   $(BUILD)/cuda/test_attention_cudnn   dev/cuda/attention_cudnn.cu: cuDNN attention against the float64 CPU
#                                        reference and the cuBLAS path; bf16 only (cuDNN's flash engines take no
#                                        fp32), so it is listed with the model tests, not CUDA_KERNEL_TESTS (whose
#                                        entries are also built in fp32 and by the emulator, which has no cuDNN)
#   $(BUILD)/cuda/test_attention_cudnn_graph  dev/cuda/attention_cudnn_graph.cu: both graphs at several shapes;
#                                        without a GPU every descriptor up to the operation graph (host-side
#                                        attribute checks), with one the full plans
#   make test-cudnn-graphs               runs the latter: needs libcudnn, not a GPU
# USE_CUDNN=1 (module.mk) makes the plain targets (train_gptcu, the kernel and model tests) use cuDNN too.
# cuDNN's headers: CUDA_HOME/include, else a CUDA_LIB_DIRS entry's ../include (a Python env's nvidia/cudnn).
CUDNN_INC_DIR := $(firstword $(foreach d,$(CUDA_HOME)/include $(foreach l,$(subst :, ,$(CUDA_LIB_DIRS)),$(l)/../include),$(if $(wildcard $(d)/cudnn.h),$(d))))
# cuDNN 9.22 gave the reshape operation a mode (a view of the same memory, or a logical reshape); the graphs set
# the view where the headers have it. The attribute's spelling is probed by compiling against the headers (an
# enumerator cannot be tested by the preprocessor): CDNN_RESHAPE_VIEW_ONLY names the view's enumerator, or is
# left undefined for older headers. Recursive (=): the probe runs only when a cuDNN object is compiled.
cdnn_probe_view = $(shell printf '\043include <cudnn.h>\nint main(void) { cudnnBackendAttributeName_t a = CUDNN_ATTR_OPERATION_RESHAPE_MODE; cudnnBackendAttributeType_t t = CUDNN_TYPE_RESHAPE_MODE; return (int)a + (int)t + (int)$(1); }\n' | \
    $(CC) -x c -fsyntax-only $(if $(CUDNN_INC_DIR),-I$(CUDNN_INC_DIR)) -I$(CUDA_HOME)/include - > /dev/null 2>&1 && echo $(1))
CDNN_VIEW_ONLY = $(firstword $(foreach v,CUDNN_RESHAPE_MODE_VIEW_ONLY CUDNN_RESHAPE_VIEW_ONLY,$(call cdnn_probe_view,$(v))))
CUDNN_NVCC_FLAGS = -DENABLE_CUDNN $(if $(CUDNN_INC_DIR),-I$(CUDNN_INC_DIR)) $(if $(CDNN_VIEW_ONLY),-DCDNN_RESHAPE_VIEW_ONLY=$(CDNN_VIEW_ONLY))
# libcudnn.so.9 by name: a pip wheel ships no unversioned libcudnn.so
CUDNN_LINK := -l:libcudnn.so.9
ifeq ($(USE_CUDNN),1) # module.mk has added -DENABLE_CUDNN and -lcudnn
NVCC_FLAGS += $(if $(CUDNN_INC_DIR),-I$(CUDNN_INC_DIR)) $(if $(CDNN_VIEW_ONLY),-DCDNN_RESHAPE_VIEW_ONLY=$(CDNN_VIEW_ONLY))
endif

# the trainer: bf16 only; links the bf16 device update (cuda/mk/dist.mk) and NCCL like train_gptcu
$(BUILD)/cuda-cudnn/train_gpt.o: train_gpt.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(filter-out -DENABLE_CUDNN,$(NVCC_TRAIN_FLAGS)) $(CUDNN_NVCC_FLAGS) -MMD -MP -c $< -o $@
train_gptcu_cudnn: $(BUILD)/cuda-cudnn/train_gpt.o $(BUILD)/models/gpt2_host.o $(BUILD)/cuda/dist.o $$(TRAIN_LINK_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS) $(CUDA_TRAIN_LIBS) $(NCCL_LIBS) $(CUDNN_LINK)
CUDA_TRAINERS += train_gptcu_cudnn
# train_llama.cu likewise (its grouped-query attention runs on the same Attention, key/value heads expanded)
$(BUILD)/cuda-cudnn/train_llama.o: train_llama.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(filter-out -DENABLE_CUDNN,$(NVCC_TRAIN_FLAGS)) $(CUDNN_NVCC_FLAGS) -MMD -MP -c $< -o $@
train_llamacu_cudnn: $(BUILD)/cuda-cudnn/train_llama.o $(BUILD)/models/llama_host.o $(BUILD)/cuda/dist.o $$(TRAIN_LINK_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS) $(CUDA_TRAIN_LIBS) $(NCCL_LIBS) $(CUDNN_LINK)
CUDA_TRAINERS += train_llamacu_cudnn

# the kernel test (cuDNN vs reference vs cuBLAS); run by make test-gpu and scripts/gpu_check.sh
$(BUILD)/cuda/test_attention_cudnn: dev/cuda/attention_cudnn.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(filter-out -DENABLE_FP32 -DENABLE_CUDNN,$(NVCC_FLAGS)) $(CUDNN_NVCC_FLAGS) -MMD -MP $< -o $@ \
	    $(NVCC_LDFLAGS) -lcublasLt -lcublas $(CUDNN_LINK)
CUDA_MODEL_TESTS += $(BUILD)/cuda/test_attention_cudnn
$(BUILD)/cuda/test_attention_cudnn_graph: dev/cuda/attention_cudnn_graph.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(filter-out -DENABLE_FP32 -DENABLE_CUDNN,$(NVCC_FLAGS)) $(CUDNN_NVCC_FLAGS) -MMD -MP $< -o $@ \
	    $(NVCC_LDFLAGS) $(CUDNN_LINK)
CUDA_MODEL_TESTS += $(BUILD)/cuda/test_attention_cudnn_graph
.PHONY: test-cudnn-graphs
test-cudnn-graphs: $(BUILD)/cuda/test_attention_cudnn_graph
	@test/run.sh $<

-include $(wildcard $(BUILD)/cuda-cudnn/*.d)
