# The one build of the runtime. `make train` prepares the default corpus and trains the default GPT-2;
# `make test` runs every test that needs no GPU and ends with "N passed, N failed".
# Each component adds its programs and tests in its own module.mk (included below).

CC      ?= gcc
OPT     ?= -O3 -march=native
CFLAGS  += $(OPT) -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fopenmp -I. -MMD -MP
LDLIBS  += -lm -lxxhash
# OpenBLAS built on OpenMP (Debian's libopenblas0-openmp), linked by path: its GEMMs then run on the same OpenMP
# threads as the trainers' own kernels. With the default pthread build the two thread pools spin against each
# other on every switch between a BLAS call and an OpenMP loop (GNU OpenMP threads spin-wait after each loop):
# on 2 cores that cost a d12 step about a third of its time (issue 18; scripts/bench_cpu.sh). -lopenblas (the
# system's choice) where the OpenMP build is not installed.
OPENBLAS_OMP_DIR := /usr/lib/$(shell $(CC) -print-multiarch 2>/dev/null)/openblas-openmp
OPENBLAS_OMP_LINK := -L$(OPENBLAS_OMP_DIR) -Wl,-rpath,$(OPENBLAS_OMP_DIR) -l:libopenblas.so.0
BLAS_LIBS  = $(if $(wildcard $(OPENBLAS_OMP_DIR)/libopenblas.so.0),$(OPENBLAS_OMP_LINK),-lopenblas)
PCRE2_LIBS = -lpcre2-8
MPICC   ?= mpicc
PYTHON_REF ?= /usr/bin/python3
BUILD   := build
DATA    ?= data

# filled by the module.mk files
PROGRAMS :=
TEST_BINS :=
TEST_CMDS :=
# docs/layout.md's rules (file and function sizes, floors, cycles, one row per rule), on the tracked sources (~1 s)
TEST_CMDS += "/usr/bin/python3 test/test_structure.py"
TEST_DEPS :=

COMMON_SRC := common/util.c common/params.c common/rng.c
COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/%.o)

.PHONY: all data train test bench clean cuda test-gpu
all: programs

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# rules may name objects of modules read later (e.g. $$(TRAIN_LINK_OBJ) of trainer/module.mk)
.SECONDEXPANSION:
include $(wildcard */module.mk)

programs: $(PROGRAMS)

# The test suite: every command in TEST_CMDS, counted by test/run.sh.
test: $(PROGRAMS) $(TEST_BINS) $(TEST_DEPS)
	@test/run.sh $(TEST_CMDS)

clean:
	rm -rf $(BUILD) $(PROGRAMS)

# ---------------------------------------------------------------------------------------------------------------
# Hardening (hardening engineer): the WERROR switch, `make test-sanitize`, fuzzing and `make cppcheck`.
# test/fuzz/README.md says how to add a fuzz harness for a new reader.

# WERROR=1 (CI): every compiler warning fails the build.
ifeq ($(WERROR),1)
CFLAGS += -Werror
endif

# `make test-sanitize`: the whole `make test` (same TEST_CMDS, multi-rank runs included) with every program, test
# binary and object built with ASan + UBSan (-O1 -g). Tests and scripts name binaries as build/... and ./tok, so
# rather than asking every module to parameterise its paths, the run happens in a copy of the working tree
# (tracked and untracked-but-not-ignored files, refreshed each time) in $(SAN_DIR)/tree, whose own build/ and
# ./tok, ./train_gpt are the sanitized ones; the normal build is never touched. The data cache is shared: every
# data target in TEST_DEPS (data, data-llama, ...) is made first by the normal build, and `-o <target>` for each
# keeps the sanitized make from re-making it (a sanitized tokenizer would take minutes and race the shared files).
# The tree's ./data is a link to that cache, as ./data is in the normal tree, for the tools that default to
# ./data (`tok shards` run by the trainers' first-use corpus preparation). Any sanitizer report ends that test
# with a non-zero status, which test/run.sh counts as a failure.
# LeakSanitizer is off by default; SAN_LEAKS=1 turns it on with full (slow) unwinding, so that Open MPI's own
# allocations can be suppressed by library name (test/lsan.supp; with the default fast unwinder their stacks
# end in unnamed frames of dlclose()d plug-ins). That passes the multi-rank tests, but children that tests fork
# from a process with OpenMP threads get LeakSanitizer's "Running thread ... was not suspended" line on stderr
# and fail the tests that expect exactly one error line (test_gpt2, test_llama). The fuzz replays
# (build/fuzz/replay_*) check leaks in the plain `make test` regardless.
SAN_DIR   ?= build-san
SAN_LEAKS ?= 0
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SAN_OPT   := -O1 -g $(SAN_FLAGS)
SAN_ENV   := ASAN_OPTIONS=halt_on_error=1:detect_leaks=$(SAN_LEAKS):abort_on_error=0:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1$(if $(filter 1,$(SAN_LEAKS)),:fast_unwind_on_malloc=0) \
             UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
             LSAN_OPTIONS=suppressions=$(CURDIR)/test/lsan.supp:print_suppressions=0
SAN_DATA_DEP := $(sort $(filter data data-%,$(TEST_DEPS)))
# Left out of the sanitized suite (the plain `make test` runs them): the slowest tests there, which test the project
# against outside programs and whose own C paths other tests already run sanitized: llama.cpp on the GGUF exports
# (the writer: test_gguf_writer), a SLURM cluster's requeues (the SIGTERM checkpoint: test_preempt) and the README's
# commands (the trainers, at a few steps each: every trainer test).
SAN_SKIP := test/test_gguf.sh test/test_slurm.sh test/test_readme.sh

.PHONY: test-sanitize fuzz fuzz-ci fuzz-build cppcheck lint
test-sanitize: $(SAN_DATA_DEP)
	@mkdir -p $(SAN_DIR)/tree
	@if [ ! -e $(SAN_DIR)/tree/data ] || [ -L $(SAN_DIR)/tree/data ]; then \
		ln -sfn $(abspath $(DATA)) $(SAN_DIR)/tree/data; fi
	@git ls-files -co --exclude-standard | while IFS= read -r f; do [ -f "$$f" ] && echo "$$f"; done \
		| sort > $(SAN_DIR)/files.txt
	@cd $(SAN_DIR)/tree && find . -path ./build -prune -o -type f -print | sed 's|^\./||' | sort \
		| comm -23 - ../files.txt | while IFS= read -r f; do rm -f "$$f"; done
	@tr '\n' '\0' < $(SAN_DIR)/files.txt | tar --null -T - -cf - | tar -xf - -C $(SAN_DIR)/tree
	$(SAN_ENV) TEST_SKIP="$(SAN_SKIP)" $(MAKE) -C $(SAN_DIR)/tree $(SAN_DATA_DEP:%=-o %) OPT="$(SAN_OPT)" \
		DATA=$(abspath $(DATA)) test

# Fuzzing. Each harness test/fuzz/fuzz_<h>.c is built twice (see test/fuzz/fuzz.h):
#   $(BUILD)/fuzz/fuzz_<h>    clang libFuzzer + ASan + UBSan, for `make fuzz` (needs clang and libclang-rt-14-dev)
#   $(BUILD)/fuzz/replay_<h>  $(CC) + ASan + UBSan, part of `make test`: replays test/fuzz/corpus/<h>/ (the small
#                             committed seeds) and test/fuzz/regress/<h>/ (every crash input ever found).
# A harness is listed in FUZZ_HARNESSES with FUZZ_SRC_<h> (its .c files, harness first) and optionally
# FUZZ_LIBS_<h>, FUZZ_ENV_<h> (environment for both runs) and FUZZ_REPLAY_FLAGS_<h> (see test/fuzz/replay.c).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS   = -g -O1 -std=gnu11 -I. -MMD -MP $(SAN_FLAGS) -fsanitize=fuzzer-no-link -DFUZZING
REPLAY_CFLAGS = $(filter-out $(OPT),$(CFLAGS)) -g -O1 $(SAN_FLAGS) -DFUZZING

HARDENING_TEST_BINS :=
FUZZ_HARNESSES := shard loader
FUZZ_SRC_shard  := test/fuzz/fuzz_shard.c dataloader/shard.c $(COMMON_SRC)
FUZZ_SRC_loader := test/fuzz/fuzz_loader.c dataloader/shard.c dataloader/dataloader.c $(COMMON_SRC)
FUZZ_LIBS_loader := -lpthread
# SCAPE's coded mask segments as received from the mask all-gather (optim/mask_code.c)
FUZZ_HARNESSES += mask_code
FUZZ_SRC_mask_code := test/fuzz/fuzz_mask_code.c optim/mask_code.c $(COMMON_SRC)
FUZZ_REPLAY_FLAGS_loader := --any-error
# tokenizer: encode/decode with the real vocabulary (needs `make data`), and the vocabulary loader
ifneq ($(wildcard tokenizer/bpe.c),)
FUZZ_HARNESSES += bpe vocab
FUZZ_SRC_bpe   := test/fuzz/fuzz_bpe.c $(BPE_SRC) $(COMMON_SRC)
FUZZ_SRC_vocab := test/fuzz/fuzz_vocab.c $(BPE_SRC) $(COMMON_SRC)
FUZZ_LIBS_bpe  := $(PCRE2_LIBS) -lpthread
FUZZ_LIBS_vocab := $(PCRE2_LIBS) -lpthread
FUZZ_ENV_bpe   := FUZZ_DATA=$(DATA)
endif
# the shard tool's JSON-lines reader (jsonl_text, tokenizer/tok_jsonl.c)
ifneq ($(wildcard tokenizer/tok_jsonl.c),)
FUZZ_HARNESSES += jsonl
FUZZ_SRC_jsonl := test/fuzz/fuzz_jsonl.c tokenizer/tok_jsonl.c $(COMMON_SRC)
endif
# GPT-2 model files (gpt2_load, static in train_gpt.c: the harness includes the file with TESTING defined)
ifneq ($(wildcard train_gpt.c),)
FUZZ_HARNESSES += model
FUZZ_SRC_model := test/fuzz/fuzz_model.c $(COMMON_SRC)
FUZZ_LIBS_model := $(BLAS_LIBS)
# a 1 KB file must not make the reader allocate gigabytes: the replay turns such an allocation into a failure
FUZZ_ENV_model := ASAN_OPTIONS=max_allocation_size_mb=1024
$(BUILD)/fuzz/lf/test/fuzz/fuzz_model.o $(BUILD)/fuzz/san/test/fuzz/fuzz_model.o: train_gpt.c
endif
# Llama model files (llama_load, static in train_llama.c, included the same way)
ifneq ($(wildcard train_llama.c),)
FUZZ_HARNESSES += llama_model
FUZZ_SRC_llama_model := test/fuzz/fuzz_llama_model.c $(COMMON_SRC)
FUZZ_LIBS_llama_model := $(BLAS_LIBS)
FUZZ_ENV_llama_model := ASAN_OPTIONS=max_allocation_size_mb=1024
$(BUILD)/fuzz/lf/test/fuzz/fuzz_llama_model.o $(BUILD)/fuzz/san/test/fuzz/fuzz_llama_model.o: train_llama.c
endif
# the downstream task readers (eval/tasks.c, JSON through jansson)
ifneq ($(wildcard eval/tasks.c),)
FUZZ_HARNESSES += tasks
FUZZ_SRC_tasks := test/fuzz/fuzz_tasks.c eval/tasks.c $(COMMON_SRC)
FUZZ_LIBS_tasks := -ljansson
endif
# checkpoints: manifest and per-rank training-state files
ifneq ($(wildcard trainer/ckpt.c),)
FUZZ_HARNESSES += ckpt
FUZZ_SRC_ckpt := test/fuzz/fuzz_ckpt.c trainer/ckpt.c common/log.c $(COMMON_SRC)
FUZZ_LIBS_ckpt := -lxxhash
endif

$(BUILD)/fuzz/lf/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@
$(BUILD)/fuzz/san/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(REPLAY_CFLAGS) -c $< -o $@

define FUZZ_HARNESS
$(BUILD)/fuzz/fuzz_$(1): $(patsubst %.c,$(BUILD)/fuzz/lf/%.o,test/fuzz/fuzz.c $(FUZZ_SRC_$(1)))
	$$(FUZZ_CC) $$(FUZZ_CFLAGS) -fsanitize=fuzzer $$^ -o $$@ -lm $(FUZZ_LIBS_$(1))
$(BUILD)/fuzz/replay_$(1): $(patsubst %.c,$(BUILD)/fuzz/san/%.o,test/fuzz/fuzz.c test/fuzz/replay.c $(FUZZ_SRC_$(1)))
	$$(CC) $$(REPLAY_CFLAGS) $$^ -o $$@ -lm $(FUZZ_LIBS_$(1))
HARDENING_TEST_BINS += $(BUILD)/fuzz/replay_$(1)
TEST_CMDS += "$(FUZZ_ENV_$(1)) $(BUILD)/fuzz/replay_$(1) $(FUZZ_REPLAY_FLAGS_$(1)) fuzz_$(1) test/fuzz/corpus/$(1) $(wildcard test/fuzz/regress/$(1))"
endef
$(foreach h,$(FUZZ_HARNESSES),$(eval $(call FUZZ_HARNESS,$(h))))

# Failure drills: full disk (RLIMIT_FSIZE) and SIGKILL against the writers of checkpoints, shards and models
# (test/test_drills.c), SIGKILL against the trainer itself (test/test_drills_kill.sh), and non-finite steps
# (test/test_drills_nan.sh).
ifneq ($(and $(wildcard trainer/ckpt.c),$(wildcard train_gpt.c)),)
$(BUILD)/test_drills: test/test_drills.c train_gpt.c $(BUILD)/trainer/ckpt.o $(BUILD)/trainer/ckpt_line.o $(BUILD)/common/log.o \
		$(BUILD)/dataloader/shard.o $(COMMON_OBJ)
	$(CC) $(CFLAGS) test/test_drills.c $(filter %.o,$^) -o $@ $(LDLIBS) $(BLAS_LIBS)
HARDENING_TEST_BINS += $(BUILD)/test_drills
TEST_CMDS += $(BUILD)/test_drills
endif
# SIGKILL at random moments of a real (tiny) training run with a checkpoint every step, resumed with --resume latest
ifneq ($(filter train_gpt,$(PROGRAMS)),)
TEST_CMDS += "test/test_drills_kill.sh ./train_gpt $(DATA)"
# NaN/Inf loss or gradient norm (test-only SCAPE_TEST_INJECT_NAN): skipped steps, --max-bad-steps stop, resume
TEST_CMDS += "test/test_drills_nan.sh ./train_gpt $(DATA)"
# SIGTERM mid-run: the step finishes, a checkpoint is written, exit 143; --resume latest continues bit-identically
TEST_CMDS += "test/test_preempt.sh ./train_gpt $(DATA)"
endif
# `test:` above expanded TEST_BINS before this section was read, so the binaries are added to it here
TEST_BINS += $(HARDENING_TEST_BINS)
test: $(HARDENING_TEST_BINS)

# `make werror` (CI): every program and test binary built with -Werror, in its own $(WERROR_BUILD)/ so that the
# normal build's objects are left alone (the programs in the repository root are relinked from it: same flags but
# -Werror, so the same code; the next plain `make` relinks them from build/). Under build/, so ignored and cleaned.
WERROR_BUILD ?= $(BUILD)/werror
.PHONY: werror test-bins
test-bins: $(TEST_BINS)
werror:
	@$(MAKE) --no-print-directory BUILD=$(WERROR_BUILD) WERROR=1 programs test-bins

# `make fuzz FUZZ_SECONDS=N [FUZZ_ONLY="h1 h2"]`: each harness for N seconds; crash inputs are copied into
# test/fuzz/regress/<h>/ (commit them; `make test` then replays them). `make fuzz-ci`: 10 s each, for CI.
FUZZ_ONLY ?= $(FUZZ_HARNESSES)
fuzz-build: $(FUZZ_ONLY:%=$(BUILD)/fuzz/fuzz_%)
fuzz: fuzz-build $(filter data,$(SAN_DATA_DEP))
	@FUZZ_BUILD=$(BUILD)/fuzz $(foreach h,$(FUZZ_ONLY),FUZZ_ENV_$(h)="$(FUZZ_ENV_$(h))") \
		scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_ONLY)
fuzz-ci:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=10

# `make cppcheck` (alias `lint`): static analysis of every C file (tracked or new); fails on any finding that is not
# suppressed, with its reason, in test/cppcheck-suppressions.txt.
CPPCHECK ?= cppcheck
cppcheck lint:
	$(CPPCHECK) --quiet --error-exitcode=1 --std=c11 --language=c --platform=unix64 --library=posix \
		--enable=warning,portability,performance --inline-suppr -I. -D__GNUC__ -D_OPENMP \
		--suppressions-list=test/cppcheck-suppressions.txt -j2 \
		$(shell git ls-files -co --exclude-standard '*.c' 2>/dev/null)

clean: clean-hardening
.PHONY: clean-hardening
clean-hardening:
	rm -rf $(SAN_DIR)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
