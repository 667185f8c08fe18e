/*
 * test/test_comm_mpi.h - test/test.h for programs that run as several MPI ranks: a case passes only if it passed
 * on every rank; rank 0 prints "ok <name>_n<N>", a failing rank prints its own FAIL line (and rank 0 one more
 * if it passed itself), so test/run.sh counts each case once per world size.
 */
#ifndef TEST_COMM_MPI_H
#define TEST_COMM_MPI_H

#include "comm/comm.h"
#include "test/test.h"

#define MPI_RUN_TEST(fn)                                                                         \
    do {                                                                                         \
        const char *test_name_ = #fn;                                                            \
        test_case_failed_ = 0;                                                                   \
        fn(test_name_);                                                                          \
        fflush(stdout);                                                                          \
        int64_t f_ = test_case_failed_;                                                          \
        comm_allreduce_max_i64(&f_, 1);                                                          \
        if (f_) {                                                                                \
            test_failures_++;                                                                    \
            if (comm_rank() == 0 && !test_case_failed_)                                          \
                printf("FAIL %s_n%d: failed on another rank (see its line)\n", #fn, comm_world()); \
        } else if (comm_rank() == 0) {                                                           \
            printf("ok %s_n%d\n", #fn, comm_world());                                            \
        }                                                                                        \
        fflush(stdout);                                                                          \
    } while (0)

#endif
