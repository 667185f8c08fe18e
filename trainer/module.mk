# trainer/module.mk - the shared training loop (train.c and what only it uses: options, sampler, checkpoint
# files and their policy, evaluation hooks, the step's log, test drills, the updater seam with its host
# implementation), the `train` and `deps` targets, and the loop's tests (a toy model trains through train_main).
# The loop also links the ground folder's log and schedule (args comes with the update rules, optim/module.mk).
#
# A trainer links $(TRAIN_LINK_OBJ) and $(TRAIN_LIBS). Because module.mk files are read in alphabetical order,
# write it as $$(TRAIN_LINK_OBJ) in a rule's prerequisites (second expansion is on), e.g. (models/module.mk)
#   train_gpt: $(BUILD)/train_gpt.o $$(TRAIN_LINK_OBJ)
#   	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS)
TRAIN_OBJ := $(BUILD)/trainer/train.o $(BUILD)/trainer/train_options.o $(BUILD)/trainer/train_rules.o $(BUILD)/trainer/sampler.o \
             $(BUILD)/trainer/ckpt.o $(BUILD)/trainer/ckpt_line.o $(BUILD)/trainer/ckpt_policy.o \
             $(BUILD)/trainer/eval_hooks.o $(BUILD)/trainer/train_log.o $(BUILD)/trainer/drills.o \
             $(BUILD)/optim/updater_host.o \
             $(BUILD)/common/log.o $(BUILD)/common/schedule.o
# recursive (=): the other components' variables are defined by module.mk files read after this one
TRAIN_LINK_OBJ = $(TRAIN_OBJ) $(EVAL_OBJ) $(DIST_OBJ) $(DATALOADER_OBJ) $(TOKENIZER_OBJ) $(COMMON_OBJ)
TRAIN_LIBS = $(BLAS_LIBS) $(PCRE2_LIBS) $(JANSSON_LIBS) $(LDLIBS) -lpthread

# unit tests of the plumbing: no model, data or tokenizer needed; the option table takes the update rules' own
# options from their rows, so it links the rules (and MPI's library, though nothing starts MPI)
TRAIN_UNIT_OBJ := $(BUILD)/trainer/train_options.o $(BUILD)/trainer/train_rules.o $(BUILD)/trainer/sampler.o \
                  $(BUILD)/trainer/ckpt.o $(BUILD)/trainer/ckpt_line.o $(BUILD)/common/log.o $(BUILD)/common/schedule.o
$(BUILD)/test_train_units: $(BUILD)/test/test_train_units.o $(TRAIN_UNIT_OBJ) $$(DIST_OBJ) $(COMMON_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lpthread

# the toy model driven by the real loop
$(BUILD)/test_train_toy: $(BUILD)/test/test_train_toy.o $$(TRAIN_LINK_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(TRAIN_LIBS)

# The CPU trainers are thin: a model file plus this loop (their rules: models/module.mk).

.PHONY: train deps trainer
trainer: $(BUILD)/test_train_units $(BUILD)/test_train_toy

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
# issue 34: a run directory survives slips and faults (lineage, links, exporter, memory, make data twice, learned
# vocabularies); uses the toy model and train_gpt / export_gguf / tok on the default corpus
TEST_DEPS += train_gpt train_llama export_gguf tok data
TEST_CMDS += "test/test_rundir.sh $(BUILD)/test_train_toy $(DATA)"
