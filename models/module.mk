# models/module.mk - the models' build: each CPU model file at the repository root (train_gpt.c, train_llama.c:
# parameter table, forward, backward, model files) linked with the shared loop into its trainer, and compiled
# without its main (TESTING) into a host library (models/<model>_host.c/.h) that the programs that need the model
# but not its trainer use: the CUDA trainers and GPU tests (table, init, model files; cuda/module.mk and
# cuda/mk/llama.mk link them), export_gguf and its reference (export/module.mk). Plain C; no GPU folder is needed.
# The host libraries live here rather than beside the model files so the top level stays the model files
# themselves, and rather than in cuda/ because CPU tools (export/) use them.
#   models/blas_fallback.c/.h   a plain sgemm for GPU machines without OpenBLAS: BLAS_FALLBACK=1 (cuda/module.mk)
#                               links the *_noblas.o host libraries, compiled with -DBLAS_FALLBACK, against it
# A new model: its file at the top level, a section below (trainer, host library), its parity test.
# Trainers are linked with $$(TRAIN_LINK_OBJ) (second expansion: trainer/module.mk and the components it lists
# are read after this file).

# ---- GPT-2 (train_gpt.c); its parity test build/test_gpt2 is in optim/module.mk ----
train_gpt: $(BUILD)/train_gpt.o $$(TRAIN_LINK_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS)
PROGRAMS += train_gpt

$(BUILD)/models/gpt2_host.o: models/gpt2_host.c train_gpt.c
$(BUILD)/models/gpt2_host_noblas.o: models/gpt2_host.c train_gpt.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DBLAS_FALLBACK -c $< -o $@

# ---- Llama (train_llama.c) ----
# The CPU Llama trainer and its parity test. build/test_llama checks the model against test/ref/llama_ref.bin and
# regenerates that file with dev/ref/llama_ref.py (Debian's /usr/bin/python3 with torch); `make llama-ref`
# rewrites the committed file after a deliberate change to the model, its initialisation or the reference.
# The parity reference batch is real Llama 2 tokens from $(DATA)/sotu/llama2/sotu_val_000000.bin (`make data-llama`).
train_llama: $(BUILD)/train_llama.o $$(TRAIN_LINK_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS)
PROGRAMS += train_llama

$(BUILD)/models/llama_host.o: models/llama_host.c train_llama.c
$(BUILD)/models/llama_host_noblas.o: models/llama_host.c train_llama.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DBLAS_FALLBACK -c $< -o $@

$(BUILD)/test_llama: test/test_llama.c train_llama.c $(OPTIM_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) test/test_llama.c $(OPTIM_OBJ) $(COMMON_OBJ) -o $@ $(LDLIBS) $(BLAS_LIBS)

.PHONY: llama llama-ref test-llama
llama: train_llama $(BUILD)/test_llama

# LLAMA_REF_OFFSET: the window's first token in the shard; chosen so the window crosses a document start (<s>)
LLAMA_REF_OFFSET ?= 9668
llama-ref: $(BUILD)/test_llama data-llama
	$(BUILD)/test_llama --write-init $(BUILD)/llama_ref_init.bin
	$(PYTHON_REF) dev/ref/llama_ref.py --model $(BUILD)/llama_ref_init.bin \
		--shard $(DATA)/sotu/llama2/sotu_val_000000.bin --offset $(LLAMA_REF_OFFSET) --out test/ref/llama_ref.bin

test-llama: $(BUILD)/test_llama data-llama
	PYTHON_REF=$(PYTHON_REF) $(BUILD)/test_llama $(DATA)

TEST_BINS += $(BUILD)/test_llama
TEST_DEPS += data-llama
TEST_CMDS += "PYTHON_REF=$(PYTHON_REF) $(BUILD)/test_llama $(DATA)"

# the Llama trainer through the shared loop on 2 ranks: SCAPE d=1 == AdamS, ranks in sync, save/resume bitwise, logs
TEST_CMDS += "test/test_scape_llama.sh ./train_llama $(DATA)"
