/*
 * test/fuzz/fuzz.h - what every fuzz harness shares: running a reader that may call fatal() without ending the
 * fuzzer, and handing the fuzz input to readers that take a path.
 *
 * A harness is one file defining LLVMFuzzerTestOneInput (and, if it needs set-up, LLVMFuzzerInitialize). It is
 * linked two ways (top Makefile, "hardening" section):
 *   build/fuzz/fuzz_<h>    clang + libFuzzer: fatal() longjmp()s back into the harness (FUZZ_RUN), so one
 *                          process tries millions of inputs; descriptors the reader left open are closed.
 *   build/fuzz/replay_<h>  gcc + ASan/UBSan, test/fuzz/replay.c's main: each input runs in a forked child (the
 *                          same longjmp, so every FUZZ_RUN of the harness is reached as under libFuzzer); a
 *                          child that saw a fatal() exits FUZZ_REJECTED; `make test` replays the seed corpus
 *                          and every committed crash input (test/fuzz/regress/<h>/) this way.
 * Not for: checking outputs of a reader beyond "no crash, no sanitizer report, one error line" unless the
 * harness has an oracle of its own (e.g. decode(encode(x)) == x).
 */
#ifndef TEST_FUZZ_FUZZ_H
#define TEST_FUZZ_FUZZ_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

/* Exit status of a replay child whose input was refused by fatal(): distinct from 0 (accepted), 1 (a plain
 * exit(1) that bypassed fatal()) and the sanitizers' status (test/fuzz/replay.c sets 86). */
#define FUZZ_REJECTED 3

extern jmp_buf fuzz_jmp;
extern volatile int fuzz_armed;
extern int fuzz_replay;     /* 1 in replay binaries */
extern int fuzz_rejections; /* fatal() calls caught by FUZZ_RUN so far */

void fuzz_begin(void);    /* installs the fatal hook, notes which descriptors are open */
void fuzz_rejected(void); /* after a longjmp out of fatal(): closes descriptors the reader left open */

/* Runs the statements; a fatal() inside them returns here (libFuzzer build). Locals changed by the statements
 * must not be used after FUZZ_RUN (longjmp semantics); free what the statements allocate inside them. */
#define FUZZ_RUN(...)                                                                                          \
    do {                                                                                                       \
        fuzz_begin();                                                                                          \
        if (setjmp(fuzz_jmp) == 0) {                                                                           \
            fuzz_armed = 1;                                                                                    \
            __VA_ARGS__;                                                                                       \
            fuzz_armed = 0;                                                                                    \
        } else {                                                                                               \
            fuzz_rejected();                                                                                   \
        }                                                                                                      \
    } while (0)

/* Writes n bytes to <private temp dir>/<name> (replaced each call) and returns the path (static storage, one
 * per name slot 0..3). The directory is $FUZZ_TMPDIR if set (replay.c sets it), else a fresh mkdtemp()
 * directory removed at exit. Aborts on I/O errors: those are harness failures, not findings. */
const char *fuzz_write_file(int slot, const char *name, const uint8_t *data, size_t n);
/* The private temp directory itself (created on first use). */
const char *fuzz_tmpdir(void);

/* Splits data at the first occurrence of the 4-byte separator "\n%%\n" (for harnesses that take several files):
 * returns the length of the first part and sets *rest / *rest_n to what follows the separator (or to the end). */
size_t fuzz_split(const uint8_t *data, size_t n, const uint8_t **rest, size_t *rest_n);

#endif
