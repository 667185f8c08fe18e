/*
 * test/test.h - the tiny test protocol every C test binary follows.
 * Each case prints "ok <name>" or "FAIL <name>: <expected vs actual>"; the binary exits non-zero if any case
 * failed. test/run.sh counts these lines across binaries and prints "N passed, N failed".
 */
#ifndef TEST_TEST_H
#define TEST_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_failures_ = 0;
static int test_case_failed_ = 0;

/* Inside a case: records a failure with a message, keeps going. */
#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            if (!test_case_failed_) printf("FAIL %s: ", test_name_);      \
            else printf("     also: ");                                    \
            printf(__VA_ARGS__);                                          \
            printf("  [%s:%d]\n", __FILE__, __LINE__);                    \
            test_case_failed_ = 1;                                        \
        }                                                                 \
    } while (0)

/* Runs fn() as one case named name. */
#define RUN_TEST(fn)                                                      \
    do {                                                                  \
        const char *test_name_ = #fn;                                     \
        (void)test_name_;                                                 \
        test_case_failed_ = 0;                                            \
        fn(test_name_);                                                   \
        if (test_case_failed_) test_failures_++;                          \
        else printf("ok %s\n", #fn);                                      \
        fflush(stdout);                                                   \
    } while (0)

/* Case functions take the case name so CHECK can print it. */
#define TEST(fn) static void fn(const char *test_name_)

#define TEST_EXIT() return test_failures_ ? 1 : 0

#endif
