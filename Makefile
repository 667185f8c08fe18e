# The one build of the runtime. `make train` prepares the default corpus and trains the default GPT-2;
# `make test` runs every test that needs no GPU and ends with "N passed, N failed".
# Each component adds its programs and tests in its own module.mk (included below).

CC      ?= gcc
OPT     ?= -O3 -march=native
CFLAGS  += $(OPT) -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fopenmp -I. -MMD -MP
LDLIBS  += -lm
BLAS_LIBS  = -lopenblas
PCRE2_LIBS = -lpcre2-8
MPICC   ?= mpicc
PYTHON_REF ?= /usr/bin/python3
BUILD   := build
DATA    ?= data

# filled by the module.mk files
PROGRAMS :=
TEST_BINS :=
TEST_CMDS :=
TEST_DEPS :=

COMMON_SRC := common/util.c common/params.c common/rng.c
COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/%.o)

.PHONY: all data train test bench clean cuda test-gpu
all: programs

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

include $(wildcard */module.mk)

programs: $(PROGRAMS)

# The test suite: every command in TEST_CMDS, counted by test/run.sh.
test: $(PROGRAMS) $(TEST_BINS) $(TEST_DEPS)
	@test/run.sh $(TEST_CMDS)

clean:
	rm -rf $(BUILD) $(PROGRAMS)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
