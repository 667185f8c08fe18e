/* common/args.c - see args.h. Builds getopt_long's option array from the table; one parse function per type. */
#include "args.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

static int rank0_prints; /* args_rank0_prints: an MPI program, whose ranks all parse one command line */
void args_rank0_prints(void) { rank0_prints = 1; }

/* Usage errors exit 2 (not fatal()'s 1) so scripts can tell "you called it wrong" from "it failed". In an MPI
 * program every rank parses the same command line, so under a launcher only rank 0 prints the line. */
void args_fail(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    if (!rank0_prints || launcher_rank() <= 0) {
        va_start(ap, fmt);
        error_line_v(fmt, ap);
        va_end(ap);
    }
    exit(2);
}

static int in_choices(const char *choices, const char *v) {
    size_t n = strlen(v);
    const char *p = choices;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

/* An ARG_U64 bound as a whole number: 18446744073709551615, not 1.84467440737096e+19 (a max of 2^64 as a double,
 * the table's way to say "any uint64_t", is UINT64_MAX). */
static unsigned long long u64_bound(double b) {
    return b >= 18446744073709551615.0 ? 18446744073709551615ull : b <= 0 ? 0 : (unsigned long long)b;
}

static void check_range(const ArgSpec *s, double x, const char *text) {
    if (x >= s->min && x <= s->max) return;
    if (s->type == ARG_U64)
        args_fail("--%s: %s is out of range [%llu, %llu]", s->name, text, u64_bound(s->min), u64_bound(s->max));
    args_fail("--%s: %s is out of range [%.15g, %.15g]", s->name, text, s->min, s->max);
}

/* Parses `text` into the field; `text` is either user input or the table's default. */
static void set_value(ArgSpec *s, const char *text) {
    char *end = NULL;
    switch (s->type) {
    case ARG_INT:
    case ARG_U64: {
        if (s->type == ARG_U64 && text[0] >= '0' && text[0] <= '9') {
            /* plain digits are read exactly (a seed of 2^64 - 1 as a double is 2^64); past 2^64 - 1 is out of range,
             * not strtoull's clamp */
            errno = 0;
            unsigned long long u = strtoull(text, &end, 10);
            if (*end == '\0') {
                if (errno == ERANGE) check_range(s, INFINITY, text);
                check_range(s, (double)u, text);
                *(uint64_t *)s->field = (uint64_t)u;
                break;
            }
        }
        errno = 0;
        /* strtod first so "1e6" works for sizes; then insist it is an exact integer */
        double x = strtod(text, &end);
        if (end == text || *end != '\0' || errno == ERANGE || !isfinite(x) || x != floor(x))
            args_fail("--%s: '%s' is not an integer", s->name, text);
        if (s->type == ARG_U64 && x >= 18446744073709551616.0) check_range(s, INFINITY, text); /* 2e19 */
        check_range(s, x, text);
        if (s->type == ARG_INT) *(int *)s->field = (int)x;
        else *(uint64_t *)s->field = (uint64_t)x;
        break;
    }
    case ARG_FLOAT:
    case ARG_DOUBLE: {
        errno = 0;
        double x = strtod(text, &end);
        if (end == text || *end != '\0' || errno == ERANGE || !isfinite(x))
            args_fail("--%s: '%s' is not a number", s->name, text);
        check_range(s, x, text);
        if (s->type == ARG_FLOAT) *(float *)s->field = (float)x;
        else *(double *)s->field = x;
        break;
    }
    case ARG_STRING:
        if (s->choices && !in_choices(s->choices, text))
            args_fail("--%s: '%s' is not one of %s", s->name, text, s->choices);
        *(const char **)s->field = text;
        break;
    case ARG_FLAG:
        if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0) args_fail("--%s: '%s' is not 0 or 1", s->name, text);
        *(int *)s->field = text[0] == '1';
        break;
    }
}

/* 1 when text is "--name" or "--name=..." for an option of the table (or --help), or a start of one's name, which
 * getopt_long takes for the option ("--ste 5" is --steps 5). */
static int names_option(const ArgSpec *specs, int n, const char *text) {
    if (strncmp(text, "--", 2) != 0) return 0;
    const char *name = text + 2;
    size_t len = strcspn(name, "=");
    if (len == 0) return 0; /* "--", the end of the options */
    if (len <= 4 && strncmp(name, "help", len) == 0) return 1;
    for (int i = 0; i < n; i++)
        if (strlen(specs[i].name) >= len && strncmp(specs[i].name, name, len) == 0) return 1;
    return 0;
}

void args_set(ArgSpec *s, const char *text) { set_value(s, text); }

void args_format(const ArgSpec *s, char *buf, size_t cap) {
    switch (s->type) {
    case ARG_INT: snprintf(buf, cap, "%d", *(const int *)s->field); break;
    case ARG_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)s->field); break;
    case ARG_FLOAT: snprintf(buf, cap, "%.9g", (double)*(const float *)s->field); break;
    case ARG_DOUBLE: snprintf(buf, cap, "%.17g", *(const double *)s->field); break;
    case ARG_STRING: snprintf(buf, cap, "%s", *(const char *const *)s->field); break;
    case ARG_FLAG: snprintf(buf, cap, "%d", *(const int *)s->field ? 1 : 0); break;
    }
}

ArgSpec *args_find(ArgSpec *specs, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(specs[i].name, name) == 0) return &specs[i];
    return NULL;
}

void args_parse(ArgSpec *specs, int n, int argc, char **argv, const char *usage, const char *extra) {
    for (int i = 0; i < n; i++) {
        specs[i].given = 0;
        if (specs[i].type == ARG_FLAG) *(int *)specs[i].field = 0;
        else set_value(&specs[i], specs[i].def ? specs[i].def : "");
    }
    struct option *opts = xcalloc((size_t)n + 2, sizeof(struct option), "option table");
    for (int i = 0; i < n; i++) {
        opts[i].name = specs[i].name;
        opts[i].has_arg = specs[i].type == ARG_FLAG ? optional_argument : required_argument; /* --zero, --zero=0 */
        opts[i].val = 256 + i;
    }
    opts[n].name = "help";
    opts[n].val = 'h';
    optind = 0; /* glibc: full re-initialisation, so the parser can run more than once (tests) */
    opterr = 0; /* we print our own one-line errors */
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (c == 'h') {
            args_print_help(stdout, specs, n, usage, extra);
            exit(0);
        } else if (c == ':') {
            args_fail("%s needs a value; see --help", argv[optind - 1]);
        } else if (c == '?') {
            const char *bad = argv[optind - 1];
            if (optopt && optopt < 256) args_fail("unknown option -%c; see --help", optopt);
            args_fail("unknown option %s; see --help", bad);
        } else {
            ArgSpec *s = &specs[c - 256];
            /* "--out --steps 10": the value of --out would be "--steps", and "10" a stray argument */
            if (optarg && optarg == argv[optind - 1] && names_option(specs, n, optarg))
                args_fail("--%s needs a value (the next argument is the option %s); see --help", s->name, optarg);
            set_value(s, s->type == ARG_FLAG && !optarg ? "1" : optarg);
            s->given = 1;
        }
    }
    if (optind < argc) args_fail("unexpected argument '%s' (options are --name value); see --help", argv[optind]);
    free(opts);
}

void args_print_help(FILE *out, const ArgSpec *specs, int n, const char *usage, const char *extra) {
    fprintf(out, "%s\n", usage);
    if (extra) fprintf(out, "%s\n", extra);
    fprintf(out, "\noptions:\n");
    for (int i = 0; i < n; i++) {
        const ArgSpec *s = &specs[i];
        const char *meta = s->type == ARG_INT || s->type == ARG_U64 ? " N"
                           : s->type == ARG_FLOAT || s->type == ARG_DOUBLE ? " X"
                           : s->type == ARG_STRING                  ? " S"
                                                                    : "[=0|1]";
        char left[64];
        snprintf(left, sizeof left, "--%s%s", s->name, meta);
        fprintf(out, "  %-24s %s", left, s->help);
        if (s->type == ARG_STRING && s->choices) fprintf(out, " (%s)", s->choices);
        /* an empty default whose help says what it is ("(default <data>/...)") gets no "[default none]" beside it */
        int empty = !s->def || !s->def[0];
        if (s->type != ARG_FLAG && !(empty && strstr(s->help, "default")))
            fprintf(out, " [default %s]", empty ? "none" : s->def);
        if (s->type == ARG_U64) /* whole numbers, not 1.84467440737096e+19 */
            fprintf(out, " [range %llu..%llu]", u64_bound(s->min), u64_bound(s->max));
        else if (s->type == ARG_INT || s->type == ARG_FLOAT || s->type == ARG_DOUBLE)
            fprintf(out, " [range %.15g..%.15g]", s->min, s->max);
        fputc('\n', out);
    }
    fprintf(out, "  %-24s %s\n", "--help", "print this help and exit");
}
