# common/module.mk - the shared training loop (train.c and its plumbing: options, log, schedule, sampler,
# checkpoints), the `train` and `deps` targets, and the loop's tests (a toy model trains through train_main).
#
# A trainer links $(TRAIN_LINK_OBJ) and $(TRAIN_LIBS). Because module.mk files are read in alphabetical order,
# write it as $$(TRAIN_LINK_OBJ) in a rule's prerequisites (second expansion is on), e.g.
#   train_gpt: $(BUILD)/train_gpt.o $$(TRAIN_LINK_OBJ)
#   	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS)
.SECONDEXPANSION:

TRAIN_OBJ := $(BUILD)/common/train.o $(BUILD)/common/train_options.o $(BUILD)/common/args.o \
             $(BUILD)/common/log.o $(BUILD)/common/schedule.o $(BUILD)/common/sampler.o $(BUILD)/common/ckpt.o
# recursive (=): the other components' variables are defined by module.mk files read after this one
TRAIN_LINK_OBJ = $(TRAIN_OBJ) $(DIST_OBJ) $(DATALOADER_OBJ) $(TOKENIZER_OBJ) $(COMMON_OBJ)
TRAIN_LIBS = $(BLAS_LIBS) $(PCRE2_LIBS) $(LDLIBS) -lpthread

# unit tests of the plumbing: no MPI, model, data or tokenizer needed
TRAIN_UNIT_OBJ := $(BUILD)/common/train_options.o $(BUILD)/common/args.o $(BUILD)/common/log.o \
                  $(BUILD)/common/schedule.o $(BUILD)/common/sampler.o $(BUILD)/common/ckpt.o
$(BUILD)/test_train_units: $(BUILD)/test/test_train_units.o $(TRAIN_UNIT_OBJ) $(COMMON_OBJ)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# the toy model driven by the real loop
$(BUILD)/test_train_toy: $(BUILD)/test/test_train_toy.o $$(TRAIN_LINK_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS)

# The CPU trainers are thin: a model file plus this loop. (Rule kept here, next to TRAIN_LINK_OBJ; train_gpt.c
# itself belongs to the model engineer.)
train_gpt: $(BUILD)/train_gpt.o $$(TRAIN_LINK_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS)
PROGRAMS += train_gpt

.PHONY: train deps common
common: $(BUILD)/test_train_units $(BUILD)/test_train_toy

# `make train`: prepare the default corpus, build train_gpt, train the default model into out/default, print
# samples and plot out/default/loss.png. Settings live in scripts/train_default.sh (override via its variables).
train: data train_gpt
	scripts/train_default.sh

# `make deps`: the Debian packages (what CI installs on a fresh machine); uses sudo when not root.
deps:
	scripts/install_deps.sh

TEST_BINS += $(BUILD)/test_train_units $(BUILD)/test_train_toy
TEST_CMDS += $(BUILD)/test_train_units
TEST_CMDS += "test/test_train.sh $(BUILD)/test_train_toy"
TEST_CMDS += "test/test_train_mpi.sh $(BUILD)/test_train_toy"
