/*
 * common/args.h - command-line options from ONE table: the getopt_long parser and the --help text are both
 * generated from it, so the help can never disagree with the parser.
 * Every option is a long option taking a value ("--lr 3e-4" or "--lr=3e-4"), except flags: "--zero" sets one,
 * "--zero=0" clears it (so a resumed run can turn off what its checkpoint recorded), "--zero=1" sets it.
 * Errors (unknown option, missing value, malformed number, out of range, not one of the choices) print one line
 * "error: --lr: 5 is out of range [0, 1]" on stderr and exit with status 2 (under mpirun or srun, rank 0 alone
 * prints it in a program that called args_rank0_prints); a value that is another option of the table
 * ("--out --steps 10") is refused as a missing value.
 * Not for: what the options mean (trainer/train.c owns the training table).
 */
#ifndef COMMON_ARGS_H
#define COMMON_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/util.h"

typedef enum {
    ARG_INT,    /* int field; min/max apply */
    ARG_U64,    /* uint64_t field (seeds); min/max apply */
    ARG_FLOAT,  /* float field; min/max apply */
    ARG_DOUBLE, /* double field; min/max apply (values whose decimal spelling matters, e.g. densities) */
    ARG_STRING, /* const char * field; `choices` ("adamw|adams|scape") restricts it when non-NULL */
    ARG_FLAG    /* int field: 1 when present as --name or --name=1, 0 with --name=0; default 0 */
} ArgType;

typedef struct {
    const char *name;    /* long name without dashes, e.g. "lr" */
    ArgType type;
    void *field;         /* where the value goes */
    const char *def;     /* default as it would be typed ("3e-4"; "" for an empty string; NULL for flags) */
    double min, max;     /* inclusive range for numbers */
    const char *choices; /* ARG_STRING only: allowed values separated by '|', or NULL */
    const char *help;    /* one line */
    int given;           /* set by args_parse: 1 if the option appeared on the command line */
} ArgSpec;

/* Stores every default into its field, then parses argv[1..argc). Options may repeat (last wins). Positional
 * arguments are an error. "--help" / "-h" prints args_print_help(stdout) and exits 0.
 * `usage` is the first line of the help (e.g. "usage: train_gpt [options]"), `extra` a paragraph after it (or
 * NULL). Exits 2 on any error (see above). String fields point into argv or into `def` (no copies). */
void args_parse(ArgSpec *specs, int n, int argc, char **argv, const char *usage, const char *extra);

/* Prints the help: usage, extra, then one line per option "  --name VALUE  help (default X, range [a, b])". */
void args_print_help(FILE *out, const ArgSpec *specs, int n, const char *usage, const char *extra);

/* Sets s's field from text as the parser would (range and choices checked; a flag takes "0" or "1"); a string
 * field keeps the pointer, so text must outlive the field. Exits 2 with the parser's one-line error. */
void args_set(ArgSpec *s, const char *text);
/* s's current value as text that args_set reads back to the same value (floats with 9, doubles with 17
 * significant digits; flags "0"/"1"); cut at cap - 1 bytes. */
void args_format(const ArgSpec *s, char *buf, size_t cap);

/* Prints "error: <message>" as one line on stderr and exits 2, as the parser's own errors do; for the usage errors
 * a program finds after parsing (options that contradict each other). Under mpirun or srun only rank 0 prints, in a
 * program that called args_rank0_prints. */
NORETURN void args_fail(const char *fmt, ...) PRINTF_LIKE(1, 2);

/* For an MPI program (the trainers), whose ranks all parse the same command line: from now on a usage error prints
 * only on rank 0 of a launcher (mpirun's OMPI_COMM_WORLD_RANK, srun's PMIX_RANK or PMI_RANK). Any other program
 * (export_gguf) prints its errors wherever it runs, a task of `srun -n 4 bash -c ...` included. */
void args_rank0_prints(void);

/* The spec named `name`, or NULL. */
ArgSpec *args_find(ArgSpec *specs, int n, const char *name);

#endif
