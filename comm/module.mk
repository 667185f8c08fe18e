# comm/module.mk - the collectives (comm/comm.c: Open MPI on a communication thread, with byte and time counters),
# their test and benchmark. Read before optim/module.mk, whose DIST_OBJ links COMM_OBJ.

# Programs that link COMM_OBJ link with $(MPICC) (Open MPI) and -lpthread.
COMM_OBJ := $(BUILD)/comm/comm.o $(BUILD)/comm/comm_sync.o
MPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null)
$(BUILD)/comm/comm.o: CFLAGS += $(MPI_CFLAGS)
# every multi-rank test runs under this (one thread per rank; any number of ranks on 2 cores)
MPIRUN_TEST := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --bind-to none

$(BUILD)/test_comm: test/test_comm.c $(COMM_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(filter %.c %.o,$^) -o $@ $(LDLIBS) -lpthread

# bench_comm: CPU the communication thread takes while it waits (SCAPE_COMM_SPIN=1 vs default); not a test
$(BUILD)/bench_comm: comm/bench_comm.c $(COMM_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(filter %.c %.o,$^) -o $@ $(LDLIBS) $(BLAS_LIBS) -lpthread

TEST_BINS += $(BUILD)/test_comm $(BUILD)/bench_comm
TEST_CMDS += $(BUILD)/test_comm
TEST_CMDS += "$(MPIRUN_TEST) -np 2 $(BUILD)/test_comm"
TEST_CMDS += "$(MPIRUN_TEST) -np 3 $(BUILD)/test_comm"
TEST_CMDS += "test/test_comm_kill.sh $(BUILD)/test_comm"
