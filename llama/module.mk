# llama/module.mk - the CPU Llama trainer (train_llama.c at the repository root: the model file plus the shared
# loop of common/) and its parity test. build/test_llama checks the model against test/ref/llama_ref.bin and
# regenerates that file with dev/ref/llama_ref.py (Debian's /usr/bin/python3 with torch); `make llama-ref`
# rewrites the committed file after a deliberate change to the model, its initialisation or the reference.

# The parity reference batch is real Llama 2 tokens from $(DATA)/sotu/llama2/sotu_val_000000.bin (`make data-llama`).

# second expansion ($$) because TRAIN_LINK_OBJ is completed by module.mk files read after this one
train_llama: $(BUILD)/train_llama.o $$(TRAIN_LINK_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS)
PROGRAMS += train_llama

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
