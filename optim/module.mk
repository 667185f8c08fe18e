# optim/module.mk - shared by two engineers; each keeps to its own marked section.

# --- optimizers (model engineer)
# optim/optim.c (AdamW, AdamS) and, for want of a top-level module.mk, the GPT-2 parity test of train_gpt.c:
# build/test_gpt2 DATA checks the model against test/ref/gpt2_ref.bin and regenerates that file with
# dev/ref/gpt2_ref.py (needs `make data` for the validation shard). `make gpt2-ref` rewrites the committed file.
OPTIM_OBJ := $(BUILD)/optim/optim.o
# no fused multiply-adds, like scape.o: dense AdamS and SCAPE at density 1 must round identically;
# -fno-math-errno lets sqrtf vectorize (nothing reads errno)
$(OPTIM_OBJ): CFLAGS += -ffp-contract=off -fno-math-errno

$(BUILD)/test_gpt2: test/test_gpt2.c train_gpt.c $(OPTIM_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) test/test_gpt2.c $(OPTIM_OBJ) $(COMMON_OBJ) -o $@ $(LDLIBS) $(BLAS_LIBS)

# throughput benchmark (not a test): scripts/bench_cpu.sh runs it
$(BUILD)/bench_gpt2: dev/bench_gpt2.c train_gpt.c $(OPTIM_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) dev/bench_gpt2.c $(OPTIM_OBJ) $(COMMON_OBJ) -o $@ $(LDLIBS) $(BLAS_LIBS)

.PHONY: gpt2-ref test-gpt2
gpt2-ref: $(BUILD)/test_gpt2 data
	$(BUILD)/test_gpt2 --write-init $(BUILD)/gpt2_ref_init.bin
	$(PYTHON_REF) dev/ref/gpt2_ref.py --model $(BUILD)/gpt2_ref_init.bin \
		--shard $(DATA)/sotu/gpt2/sotu_val_000000.bin --out test/ref/gpt2_ref.bin

test-gpt2: $(BUILD)/test_gpt2 data
	PYTHON_REF=$(PYTHON_REF) $(BUILD)/test_gpt2 $(DATA)

TEST_BINS += $(BUILD)/test_gpt2
TEST_DEPS += data
TEST_CMDS += "PYTHON_REF=$(PYTHON_REF) $(BUILD)/test_gpt2 $(DATA)"
# --- end optimizers

# --- data-parallel update and SCAPE (distributed engineer)
# Programs that use DIST_OBJ link with $(MPICC) (Open MPI) and -lpthread; the collectives, MPI_CFLAGS and
# MPIRUN_TEST are comm/module.mk's (read before this file).
DIST_RULES := dist rules dist_dense dist_scape dist_scape_row dist_scape_zero dist_topk_ef dist_powersgd dist_onebit_adam dist_demo dist_loco dist_diloco dist_sparseloco dist_mask_stats dist_state
# common/args.o: a rule's own options are common/args.h rows (optim/rule.h), parsed by distopt_set_option too
DIST_OBJ := $(COMM_OBJ) $(DIST_RULES:%=$(BUILD)/optim/%.o) $(BUILD)/optim/scape.o $(BUILD)/optim/mask_code.o $(OPTIM_OBJ) \
            $(BUILD)/common/args.o
# no fused multiply-adds: SCAPE's conservation test recomputes c bit for bit, and ranks must round alike
$(DIST_RULES:%=$(BUILD)/optim/%.o) $(BUILD)/optim/scape.o: CFLAGS += -ffp-contract=off

.PHONY: scape
scape: $(DIST_OBJ) $(BUILD)/test_comm $(BUILD)/test_dist

$(BUILD)/test_dist: test/test_dist.c $(DIST_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -ffp-contract=off $(filter %.c %.o,$^) -o $@ $(LDLIBS) -lpthread

# bench_step: median ms of one update step per optimizer (not a test; see the file's header)
$(BUILD)/bench_step: optim/bench_step.c $(DIST_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(filter %.c %.o,$^) -o $@ $(LDLIBS) -lpthread

# bench_zero: per-rank state and bytes per step, AdamS and SCAPE with and without ZeRO-1 (not a test; the file's
# header; scripts/bench_zero.sh runs it)
$(BUILD)/bench_zero: optim/bench_zero.c $(DIST_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(filter %.c %.o,$^) -o $@ $(LDLIBS) -lpthread

# coded masks (optim/mask_code.c): round trips, sizes against the entropy floor, bad input
$(BUILD)/test_mask_code: test/test_mask_code.c $(BUILD)/optim/mask_code.o $(BUILD)/optim/scape.o $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(filter %.c %.o,$^) -o $@ $(LDLIBS)
TEST_BINS += $(BUILD)/test_mask_code
TEST_CMDS += $(BUILD)/test_mask_code

TEST_BINS += $(BUILD)/test_dist $(BUILD)/bench_step $(BUILD)/bench_zero
TEST_CMDS += $(BUILD)/test_dist
TEST_CMDS += "$(MPIRUN_TEST) -np 2 $(BUILD)/test_dist"
TEST_CMDS += "$(MPIRUN_TEST) -np 3 $(BUILD)/test_dist"
TEST_CMDS += "$(MPIRUN_TEST) -np 4 $(BUILD)/test_dist"
TEST_CMDS += "test/test_dist_resume.sh $(BUILD)/test_dist"
# the local-update rules (issue 45): DiLoCo's bytes, synchronized model, resume and skips on 1-3 ranks (a second), and
# through the whole loop with the toy model (test/test_loco.sh, about 15 s)
$(BUILD)/test_loco: test/test_loco.c $(DIST_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -ffp-contract=off $(filter %.c %.o,$^) -o $@ $(LDLIBS) -lpthread
TEST_BINS += $(BUILD)/test_loco
TEST_CMDS += $(BUILD)/test_loco
TEST_CMDS += "$(MPIRUN_TEST) -np 2 $(BUILD)/test_loco"
TEST_CMDS += "$(MPIRUN_TEST) -np 3 $(BUILD)/test_loco"
TEST_CMDS += "test/test_loco.sh $(BUILD)/test_train_toy"
# SCAPE against an independent float64 numpy reference of SCAPE.md section 3, step by step (a few seconds)
$(BUILD)/scape_ref_driver: test/scape_ref_driver.c $(DIST_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -ffp-contract=off $(filter %.c %.o,$^) -o $@ $(LDLIBS) -lpthread
TEST_BINS += $(BUILD)/scape_ref_driver
TEST_CMDS += "test/test_scape_ref.sh $(BUILD)/scape_ref_driver"
# whole-trainer SCAPE / topk-ef / data-parallel checks on real tokens (needs train_gpt and `make data`; about 1 min
# alone, 2-3 min on a busy 2-core machine)
TEST_DEPS += train_gpt data
TEST_CMDS += "test/test_scape_gpt2.sh ./train_gpt $(DATA)"
# settings that make a compressing rule dense for the whole run are noted; 1-bit Adam's freeze step survives a resume
# with another --steps (the toy model, about a second)
TEST_CMDS += "test/test_rule_settings.sh $(BUILD)/test_train_toy"

# `make bench-scape`: 4-rank dense AdamS vs SCAPE d=0.1 / 0.01 (bytes, step time, hidden comm, mask coding)
.PHONY: bench-scape
bench-scape: train_gpt data
	scripts/bench_scape.sh
# --- end communication
