# llama/module.mk - the CPU Llama trainer (train_llama.c at the repository root: the model file plus the shared
# loop of common/) and its parity test. build/test_llama checks the model against test/ref/llama_ref.bin and
# regenerates that file with dev/ref/llama_ref.py (Debian's /usr/bin/python3 with torch); `make llama-ref`
# rewrites the committed file after a deliberate change to the model, its initialisation or the reference.

# second expansion ($$) because TRAIN_LINK_OBJ is completed by module.mk files read after this one
train_llama: $(BUILD)/train_llama.o $$(TRAIN_LINK_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS)
PROGRAMS += train_llama

$(BUILD)/test_llama: test/test_llama.c train_llama.c $(OPTIM_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) test/test_llama.c $(OPTIM_OBJ) $(COMMON_OBJ) -o $@ $(LDLIBS) $(BLAS_LIBS)

.PHONY: llama llama-ref test-llama
llama: train_llama $(BUILD)/test_llama

llama-ref: $(BUILD)/test_llama
	$(BUILD)/test_llama --write-init $(BUILD)/llama_ref_init.bin
	$(PYTHON_REF) dev/ref/llama_ref.py --model $(BUILD)/llama_ref_init.bin --out test/ref/llama_ref.bin

test-llama: $(BUILD)/test_llama
	PYTHON_REF=$(PYTHON_REF) $(BUILD)/test_llama

TEST_BINS += $(BUILD)/test_llama
TEST_CMDS += "PYTHON_REF=$(PYTHON_REF) $(BUILD)/test_llama"
