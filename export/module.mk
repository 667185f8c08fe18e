# export/module.mk - `export_gguf` (a model file or checkpoint to a GGUF file for llama.cpp) and its test, which
# loads the exported files in llama.cpp (node-llama-cpp, installed into the data cache by
# scripts/fetch_llama_cpp.sh from the pinned lockfile test/gguf/package-lock.json) and compares its tokenizer,
# logits and greedy continuation with this runtime's.
# The models are read through models/gpt2_host.c and models/llama_host.c (the CPU model files compiled without
# their main, as the CUDA trainers use them; models/module.mk).
EXPORT_MODEL_OBJ := $(BUILD)/models/gpt2_host.o $(BUILD)/models/llama_host.o $(BUILD)/optim/optim.o
export_gguf: $(BUILD)/export/export_gguf.o $(BUILD)/export/gguf.o $(EXPORT_MODEL_OBJ) $(BUILD)/common/args.o \
		$(BUILD)/trainer/ckpt.o $(BUILD)/common/log.o $$(TOKENIZER_OBJ) $(COMMON_OBJ)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(BLAS_LIBS) $(PCRE2_LIBS) -lpthread -lxxhash
PROGRAMS += export_gguf

# the runtime's side of the comparison: tokens, logits and greedy continuation of a model file
$(BUILD)/gguf_ref: $(BUILD)/test/gguf_ref.o $(EXPORT_MODEL_OBJ) $$(TOKENIZER_OBJ) $(COMMON_OBJ)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(BLAS_LIBS) $(PCRE2_LIBS) -lpthread
# the GGUF writer alone: every value type and the F16/BF16 rounding, read back by node-llama-cpp's GGUF parser
$(BUILD)/test_gguf_writer: $(BUILD)/test/test_gguf_writer.o $(BUILD)/export/gguf.o $(COMMON_OBJ)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# `make llama-cpp`: node-llama-cpp (llama.cpp's CPU build) into $(DATA)/npm/node-llama-cpp
LLAMA_CPP_STAMP := $(DATA)/npm/node-llama-cpp/.stamp
.PHONY: llama-cpp export
llama-cpp: $(LLAMA_CPP_STAMP)
$(LLAMA_CPP_STAMP): test/gguf/package.json test/gguf/package-lock.json scripts/fetch_llama_cpp.sh
	scripts/fetch_llama_cpp.sh $(DATA)
export: export_gguf $(BUILD)/gguf_ref $(BUILD)/test_gguf_writer

TEST_BINS += $(BUILD)/gguf_ref $(BUILD)/test_gguf_writer
TEST_DEPS += export_gguf train_gpt train_llama data data-llama llama-cpp
TEST_CMDS += "test/test_gguf_writer.sh $(BUILD)/test_gguf_writer $(DATA)"
TEST_CMDS += "test/test_gguf.sh $(DATA)"
