/*
 * test/test_train_units.c - unit tests of the training loop's plumbing: the LR schedule against hand-computed
 * values, the sampler against counted frequencies, the option parser (values, ranges, one-line errors with exit
 * status 2, --help generated from the table), the update rules' own options in that table (optim/rule.h), the JSON
 * log and the checkpoint files (atomic write, manifest, completeness, latest, pruning). Error paths run in a forked child so the exit status and stderr can be checked.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/args.h"
#include "trainer/ckpt.h"
#include "common/log.h"
#include "trainer/sampler.h"
#include "common/schedule.h"
#include "trainer/train.h"
#include "trainer/train_rules.h"
#include "common/util.h"
#include "test/test.h"

#include <xxhash.h>

static char tmpdir[256];

/* ---- schedule ---- */

TEST(lr_schedule_matches_hand_computed_values) {
    LrSchedule s = {1e-3f, 1e-4f, 10, 110};
    /* warm-up: lr * t / warmup */
    CHECK(fabsf(lr_at(&s, 1) - 1e-4f) < 1e-11f, "t=1: expected 1e-4, got %.9g", lr_at(&s, 1));
    CHECK(fabsf(lr_at(&s, 5) - 5e-4f) < 1e-11f, "t=5: expected 5e-4, got %.9g", lr_at(&s, 5));
    CHECK(lr_at(&s, 10) == 1e-3f, "t=10 (end of warm-up): expected 1e-3, got %g", lr_at(&s, 10));
    /* halfway through the decay, p = 0.5, cos = 0: floor + (lr - floor) / 2 = 5.5e-4 */
    CHECK(fabsf(lr_at(&s, 60) - 5.5e-4f) < 1e-10f, "t=60: expected 5.5e-4, got %.9g", lr_at(&s, 60));
    /* p = 0.25: 1e-4 + 9e-4 * (1 + cos(pi/4)) / 2 = 1e-4 + 9e-4 * 0.8535533906 = 8.681980516e-4 */
    CHECK(fabsf(lr_at(&s, 35) - 8.681980516e-4f) < 1e-10f, "t=35: expected 8.681980516e-4, got %.9g",
          lr_at(&s, 35));
    CHECK(lr_at(&s, 110) == 1e-4f, "t=steps: expected the floor 1e-4, got %g", lr_at(&s, 110));
    CHECK(lr_at(&s, 200) == 1e-4f, "t>steps: expected the floor, got %g", lr_at(&s, 200));
    LrSchedule nw = {2e-3f, 0.0f, 0, 10}; /* no warm-up: step 1 is p = 1/10 */
    float want = (float)(2e-3 * 0.5 * (1 + cos(M_PI * 0.1)));
    CHECK(fabsf(lr_at(&nw, 1) - want) < 5e-10f, "no warm-up t=1: expected %.9g, got %.9g", want, lr_at(&nw, 1));
    for (int t = 11; t < 110; t++)
        CHECK(lr_at(&s, t + 1) <= lr_at(&s, t), "decay not monotone at t=%d", t);
}

/* ---- sampler ---- */

TEST(sampler_greedy_topk_and_frequencies) {
    float logits[6] = {0.0f, 2.0f, 1.0f, 2.0f, -1.0f, 0.5f};
    Rng r;
    rng_seed(&r, 7);
    CHECK(sample_token(logits, 6, 0.0f, 0, &r) == 1, "greedy: expected lowest id of the tied max (1)");
    /* top-2 keeps ids 1 and 3 (equal logits): each ~50%, nothing else ever */
    int counts[6] = {0};
    for (int i = 0; i < 20000; i++) counts[sample_token(logits, 6, 1.0f, 2, &r)]++;
    CHECK(counts[0] + counts[2] + counts[4] + counts[5] == 0, "top-2 sampled outside {1,3}: %d %d %d %d",
          counts[0], counts[2], counts[4], counts[5]);
    CHECK(abs(counts[1] - 10000) < 400, "top-2: id 1 drawn %d of 20000, expected ~10000", counts[1]);
    /* full softmax at temperature 2: p_i ~ exp(l_i / 2) */
    double z = 0, p[6];
    for (int i = 0; i < 6; i++) z += exp(logits[i] / 2.0);
    for (int i = 0; i < 6; i++) p[i] = exp(logits[i] / 2.0) / z;
    memset(counts, 0, sizeof counts);
    int n = 60000;
    for (int i = 0; i < n; i++) counts[sample_token(logits, 6, 2.0f, 0, &r)]++;
    for (int i = 0; i < 6; i++) {
        double sd = sqrt(n * p[i] * (1 - p[i]));
        CHECK(fabs(counts[i] - n * p[i]) < 5 * sd, "T=2: id %d drawn %d times, expected %.0f +- %.0f", i, counts[i],
              n * p[i], 5 * sd);
    }
    /* same RNG state, same draws */
    Rng a, b;
    rng_seed(&a, 99);
    rng_seed(&b, 99);
    for (int i = 0; i < 100; i++)
        CHECK(sample_token(logits, 6, 1.0f, 3, &a) == sample_token(logits, 6, 1.0f, 3, &b), "not deterministic");
}

/* ---- args ---- */

typedef struct {
    int n;
    float x;
    const char *s;
    int flag;
    uint64_t seed;
} Opts;

static ArgSpec *opt_table(Opts *o, int *n) {
    static ArgSpec t[5];
    ArgSpec init[5] = {
        {"num", ARG_INT, &o->n, "3", 1, 10, NULL, "an int", 0},
        {"lr", ARG_FLOAT, &o->x, "0.5", 0, 1, NULL, "a float", 0},
        {"optimizer", ARG_STRING, &o->s, "adamw", 0, 0, "adamw|adams|scape", "a choice", 0},
        {"zero", ARG_FLAG, &o->flag, NULL, 0, 1, NULL, "a flag", 0},
        {"seed", ARG_U64, &o->seed, "1337", 0, 1.8446744073709552e19, NULL, "a seed", 0},
    };
    memcpy(t, init, sizeof t);
    *n = 5;
    return t;
}

TEST(args_defaults_values_and_repeats) {
    Opts o;
    int n;
    ArgSpec *t = opt_table(&o, &n);
    char *argv0[] = {"prog", NULL};
    args_parse(t, n, 1, argv0, "usage", NULL);
    CHECK(o.n == 3 && o.x == 0.5f && strcmp(o.s, "adamw") == 0 && o.flag == 0 && o.seed == 1337,
          "defaults: got %d %g %s %d %llu", o.n, o.x, o.s, o.flag, (unsigned long long)o.seed);
    char *argv1[] = {"prog", "--num", "7", "--lr=1e-2", "--optimizer", "scape", "--zero", "--num", "9",
                     "--seed", "18446744073709551615", NULL};
    args_parse(t, n, 11, argv1, "usage", NULL);
    CHECK(o.n == 9, "last repeat wins: expected 9, got %d", o.n);
    CHECK(o.x == 1e-2f, "--lr=1e-2: got %g", o.x);
    CHECK(strcmp(o.s, "scape") == 0 && o.flag == 1, "choice/flag: got %s %d", o.s, o.flag);
    CHECK(o.seed == UINT64_MAX, "64-bit seed: got %llu", (unsigned long long)o.seed);
    CHECK(args_find(t, n, "num")->given && !args_find(t, n, "nope"), "given/find");
}

/* Runs args_parse in a child; returns its exit status and its stderr in err. */
static int parse_in_child(int argc, char **argv, char *err, size_t cap, char *out, size_t out_cap) {
    int pe[2], po[2];
    if (pipe(pe) || pipe(po)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pe[1], 2);
        dup2(po[1], 1);
        close(pe[0]);
        close(po[0]);
        Opts o;
        int n;
        ArgSpec *t = opt_table(&o, &n);
        args_parse(t, n, argc, argv, "usage: prog [options]", NULL);
        exit(0);
    }
    close(pe[1]);
    close(po[1]);
    /* help output can exceed a pipe buffer only for huge tables; read stdout first, then stderr */
    ssize_t k, got = 0;
    while ((k = read(po[0], out + got, out_cap - 1 - (size_t)got)) > 0) got += k;
    out[got] = '\0';
    got = 0;
    while ((k = read(pe[0], err + got, cap - 1 - (size_t)got)) > 0) got += k;
    err[got] = '\0';
    close(pe[0]);
    close(po[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

TEST(args_errors_are_one_line_with_status_2) {
    struct {
        char *args[5];
        const char *want;
    } cases[] = {
        {{"prog", "--lr", "5", NULL}, "error: --lr: 5 is out of range [0, 1]\n"},
        {{"prog", "--lr", "abc", NULL}, "error: --lr: 'abc' is not a number\n"},
        {{"prog", "--num", "2.5", NULL}, "error: --num: '2.5' is not an integer\n"},
        {{"prog", "--num", "11", NULL}, "error: --num: 11 is out of range [1, 10]\n"},
        /* a seed past 2^64 - 1 is refused, not clamped; the range reads as whole numbers, not 1.84467440737096e+19 */
        {{"prog", "--seed", "18446744073709551616", NULL},
         "error: --seed: 18446744073709551616 is out of range [0, 18446744073709551615]\n"},
        {{"prog", "--seed", "1.8446744073709552e19", NULL},
         "error: --seed: 1.8446744073709552e19 is out of range [0, 18446744073709551615]\n"},
        {{"prog", "--seed", "-1", NULL}, "error: --seed: -1 is out of range [0, 18446744073709551615]\n"},
        {{"prog", "--bogus", "1", NULL}, "error: unknown option --bogus; see --help\n"},
        {{"prog", "--optimizer", "sgd", NULL}, "error: --optimizer: 'sgd' is not one of adamw|adams|scape\n"},
        {{"prog", "--num", NULL, NULL}, "error: --num needs a value; see --help\n"},
        {{"prog", "--num", "--lr", "0.1"}, "error: --num needs a value (the next argument is the option --lr); see --help\n"},
        {{"prog", "--optimizer", "--zero", NULL},
         "error: --optimizer needs a value (the next argument is the option --zero); see --help\n"},
        /* getopt_long takes "--se 5" as --seed 5, so "--num --se 5" is a missing value too, not a stray "5" */
        {{"prog", "--num", "--se", "5"}, "error: --num needs a value (the next argument is the option --se); see --help\n"},
        {{"prog", "stray", NULL, NULL}, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[4096], out[65536];
        int argc = 0;
        while (cases[i].args[argc]) argc++;
        int st = parse_in_child(argc, cases[i].args, err, sizeof err, out, sizeof out);
        CHECK(st == 2, "case %zu (%s %s): expected exit 2, got %d", i, cases[i].args[1],
              cases[i].args[2] ? cases[i].args[2] : "", st);
        CHECK(count_lines(err) == 1, "case %zu: expected one stderr line, got: %s", i, err);
        if (cases[i].want) CHECK(strcmp(err, cases[i].want) == 0, "case %zu: expected '%s', got '%s'", i,
                                 cases[i].want, err);
    }
}

/* A usage error reaches stderr in one write: under mpirun the line was written in three pieces ("error: ", the
 * message, "\n"), and mpirun's own banner about the ranks that had already exited 2 landed between them
 * ("error: ------..."; test_train_mpi's usage_error_one_line). stderr is a SOCK_SEQPACKET socket here, so each
 * write is one packet and the first recv holds exactly the first write. */
TEST(args_error_is_one_write) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0, "socketpair");
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        dup2(sv[1], 2);
        args_fail("--out was given an empty value (%s)", "an unset shell variable?");
    }
    close(sv[1]);
    char got[512] = "";
    ssize_t n = recv(sv[0], got, sizeof got - 1, 0);
    got[n > 0 ? n : 0] = '\0';
    close(sv[0]);
    int st;
    waitpid(pid, &st, 0);
    CHECK(strcmp(got, "error: --out was given an empty value (an unset shell variable?)\n") == 0 && WIFEXITED(st)
              && WEXITSTATUS(st) == 2, "first write: '%s', status %d", got, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

/* Only an MPI program (args_rank0_prints) leaves its usage errors to rank 0: any other, export_gguf say, run as a
 * task of `srun -n 4 bash -c ...` (PMIX_RANK 1..3), printed nothing and exited 2. */
TEST(args_errors_print_on_every_rank_unless_the_program_is_mpi) {
    char err[4096], out[65536];
    char *args[] = {"prog", "--lr", "abc", NULL};
    setenv("PMIX_RANK", "1", 1);
    int st = parse_in_child(3, args, err, sizeof err, out, sizeof out);
    CHECK(st == 2 && strcmp(err, "error: --lr: 'abc' is not a number\n") == 0,
          "PMIX_RANK=1, not an MPI program: expected the error line and status 2, got %d '%s'", st, err);
    args_rank0_prints(); /* the child inherits it */
    st = parse_in_child(3, args, err, sizeof err, out, sizeof out);
    CHECK(st == 2 && err[0] == '\0', "PMIX_RANK=1, an MPI program: expected silence and status 2, got %d '%s'", st,
          err);
    unsetenv("PMIX_RANK");
    st = parse_in_child(3, args, err, sizeof err, out, sizeof out);
    CHECK(st == 2 && count_lines(err) == 1, "rank 0 of an MPI program: expected one line, got %d '%s'", st, err);
}

/* --help of the REAL trainer table: every option appears as "--name", and help exits 0. */
static Model *never_create(const char *s, const char *i, uint64_t seed, int B, int T) { return NULL; }

TEST(help_lists_every_option_of_the_trainer_table) {
    ModelFamily fam = {"toy", NULL, "v8l1t8", "toy spec", never_create, NULL};
    TrainConfig c;
    int n;
    ArgSpec *t = train_options(&c, &fam, &n);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    args_print_help(f, t, n, "usage", NULL);
    fclose(f);
    const char *required[] = {"model", "init", "train", "val", "out", "batch", "seq", "total-batch", "steps", "lr",
                              "warmup", "lr-floor", "weight-decay", "clip", "optimizer", "beta1", "beta2", "eps",
                              "eval-every", "eval-batches", "sample-every", "sample-tokens", "prompt",
                              "temperature", "top-k", "ckpt-every", "keep-ckpts", "resume", "seed", "threads",
                              "zero", "density", "density-start", "density-warmup", "scape-exclude-norms", "data",
                              "peak-flops"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        CHECK(args_find(t, n, required[i]) != NULL, "option --%s missing from the table", required[i]);
    for (int i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, t[i].type == ARG_FLAG ? "  --%s[=0|1] " : "  --%s ", t[i].name);
        CHECK(strstr(buf, key) != NULL, "--help does not list --%s", t[i].name);
        /* every default must parse under its own rules (else the trainer could not start) */
    }
    CHECK(strstr(buf, "default v8l1t8") != NULL, "--model default should come from the family");
    /* all defaults parse: parsing no arguments succeeds in the parent */
    char *argv0[] = {"prog", NULL};
    args_parse(t, n, 1, argv0, "usage", NULL);
    CHECK(strcmp(c.model, "v8l1t8") == 0 && c.B > 0 && c.T > 0 && c.steps > 0, "defaults: model %s B %d T %d",
          c.model, c.B, c.T);
    free(buf);
    free(t);
}

/* ---- log ---- */

TEST(jsonl_lines_are_objects_with_event_and_exact_floats) {
    char path[512];
    snprintf(path, sizeof path, "%s/log.jsonl", tmpdir);
    JsonLog *l = jlog_open(path);
    jlog_begin(l, "train");
    jlog_int(l, "step", 3);
    jlog_num(l, "train_loss", (double)0.1f);
    jlog_num(l, "val_loss", NAN);
    jlog_str(l, "text", "a\"b\\c\nd\x01");
    jlog_end(l);
    jlog_begin(NULL, "ignored"); /* rank != 0: no-ops */
    jlog_end(NULL);
    jlog_close(l);
    FILE *f = xfopen(path, "r", NULL);
    char line[1024];
    CHECK(fgets(line, sizeof line, f) != NULL, "no line written");
    const char *want = "{\"event\": \"train\", \"step\": 3, \"train_loss\": 0.100000001, \"val_loss\": null, "
                       "\"text\": \"a\\\"b\\\\c\\nd\\u0001\"}\n";
    CHECK(strcmp(line, want) == 0, "expected %s got %s", want, line);
    CHECK(fgets(line, sizeof line, f) == NULL, "expected exactly one line");
    fclose(f);
    /* UTF-8: well-formed sequences pass through, stray bytes become U+FFFD */
    char esc[64];
    size_t elen = 0;
    json_escape(esc, sizeof esc, &elen, "\xc3\xa9t\xc3\xa9 ok\xe2\x82");
    CHECK(strcmp(esc, "\"\xc3\xa9t\xc3\xa9 ok\\ufffd\\ufffd\"") == 0, "utf-8 escape: got %s", esc);
    /* a long event (a big sample) is written whole, not truncated */
    l = jlog_open(path);
    char *big = xmalloc(200001, "big");
    memset(big, 'x', 200000);
    big[200000] = '\0';
    big[7] = '\n';
    jlog_begin(l, "sample");
    jlog_str(l, "text", big);
    jlog_end(l);
    jlog_close(l);
    int64_t want_len = (int64_t)strlen("{\"event\": \"sample\", \"text\": \"\"}\n") + 200001;
    CHECK(file_size(path) - (int64_t)strlen(want) == want_len, "long event: file grew by %lld, expected %lld",
          (long long)(file_size(path) - (int64_t)strlen(want)), (long long)want_len);
    free(big);
    float back = strtof("0.100000001", NULL);
    CHECK(back == 0.1f, "9 significant digits must round-trip a float");
}

/* ---- checkpoint files ---- */

static void write_ckpt(const char *out, int step, int world) {
    char dir[512];
    ckpt_dir(dir, sizeof dir, out, step);
    make_dirs(dir);
    float blob[10];
    for (int i = 0; i < 10; i++) blob[i] = (float)(step * 100 + i);
    CkptFile files[4];
    char rn[3][32];
    char path[600];
    snprintf(path, sizeof path, "%s/model.bin", dir);
    write_file_atomic(path, "MODEL", 5, NULL, 0);
    files[0].name = "model.bin";
    if (!ckpt_file_hash(path, &files[0].bytes, &files[0].xxh3) || files[0].bytes != 5) fatal("cannot hash %s", path);
    for (int r = 0; r < world; r++) {
        CkptState h;
        memset(&h, 0, sizeof h);
        h.rank = r, h.world = world, h.step = step, h.blob_bytes = sizeof blob;
        ckpt_write_state(dir, &h, blob);
        snprintf(rn[r], 32, "state_rank%d.bin", r);
        files[r + 1].name = rn[r];
        snprintf(path, sizeof path, "%s/%s", dir, rn[r]);
        if (!ckpt_file_hash(path, &files[r + 1].bytes, &files[r + 1].xxh3)) fatal("cannot hash %s", path);
    }
    /* option values with every escape the manifest must carry: quotes, backslash, newline, tab, a control byte,
     * UTF-8 */
    const char *names[] = {"lr", "prompt", "train"};
    const char *values[] = {"0.00100000005", "say \"hi\"\\\n\tto \x01 caf\xc3\xa9", ""};
    ckpt_write_manifest(dir, world, step, world + 1, files, 3, names, values, step == 10 ? "0123456789abcdef" : "",
                        "00000000000000aa", "");
}

TEST(manifest_checksums_options_and_verification) {
    char out[300], dir[512], why[512], path[600];
    snprintf(out, sizeof out, "%s/verify", tmpdir);
    write_ckpt(out, 10, 2);
    ckpt_dir(dir, sizeof dir, out, 10);
    CkptInfo info;
    CHECK(ckpt_verify(dir, &info, why, sizeof why), "fresh checkpoint does not verify: %s", why);
    CHECK(info.step == 10 && info.world == 2 && info.n_files == 3 && info.n_hashed == 3 && info.bytes == 5 + 2 * 296,
          "info: step %d world %d files %d hashed %d bytes %lld", info.step, info.world, info.n_files, info.n_hashed,
          (long long)info.bytes);
    CkptOptions o;
    CHECK(ckpt_read_options(dir, &o), "options unreadable");
    CHECK(o.n == 3 && strcmp(o.names[1], "prompt") == 0 && strcmp(o.values[1], "say \"hi\"\\\n\tto \x01 caf\xc3\xa9") == 0 &&
          strcmp(o.values[0], "0.00100000005") == 0 && o.values[2][0] == '\0' && strcmp(o.init_hash, "0123456789abcdef") == 0,
          "options read back: n %d, prompt '%s', init '%s'", o.n, o.n > 1 ? o.values[1] : "", o.init_hash);
    ckpt_options_free(&o);
    /* one byte of model.bin changed in place: same size, so complete, but it no longer verifies */
    snprintf(path, sizeof path, "%s/model.bin", dir);
    FILE *f = fopen(path, "r+b");
    fputc('m', f);
    fclose(f);
    int step, world;
    CHECK(ckpt_is_complete(dir, &step, &world, why, sizeof why), "size-only check should still pass: %s", why);
    CHECK(!ckpt_verify(dir, &info, why, sizeof why) && strstr(why, "model.bin fails its checksum"), "verify: %s", why);
    /* latest passes over it to the older good one; prune keeps the verified step even beyond keep */
    write_ckpt(out, 4, 1);
    write_ckpt(out, 2, 1);
    char found[512];
    CHECK(ckpt_find_latest(out, found, sizeof found) == 4, "latest should skip the damaged 10 and take 4");
    ckpt_prune(out, 1, 2);
    ckpt_dir(dir, sizeof dir, out, 2);
    CHECK(file_exists(dir), "prune removed the verified step 2");
    ckpt_dir(dir, sizeof dir, out, 4);
    CHECK(!file_exists(dir), "prune kept step 4 beyond keep 1");
}

TEST(sample_context_has_one_bos_whatever_the_prompt) {
    int32_t out[8], lead;
    const int32_t spelled[] = {7, 5, 6}, plain[] = {5, 6};
    size_t n = sample_context(spelled, 3, 7, 1, out, &lead); /* Llama, --prompt '<|begin_of_text|>...' */
    CHECK(n == 3 && lead == 0 && out[0] == 7 && out[1] == 5 && out[2] == 6, "spelled BOS: n %zu lead %d", n, lead);
    n = sample_context(plain, 2, 7, 1, out, &lead); /* Llama, plain prompt */
    CHECK(n == 3 && lead == 1 && out[0] == 7 && out[1] == 5, "plain prompt: n %zu lead %d", n, lead);
    n = sample_context(NULL, 0, 7, 1, out, &lead); /* no prompt */
    CHECK(n == 1 && lead == 1 && out[0] == 7, "no prompt: n %zu lead %d", n, lead);
    n = sample_context(plain, 2, 50256, 0, out, &lead); /* GPT-2: the prompt alone */
    CHECK(n == 2 && lead == 0 && out[0] == 5, "GPT-2 prompt: n %zu lead %d", n, lead);
    n = sample_context(NULL, 0, 50256, 0, out, &lead); /* GPT-2, no prompt: end-of-text */
    CHECK(n == 1 && lead == 1 && out[0] == 50256, "GPT-2 no prompt: n %zu lead %d", n, lead);
}

TEST(args_format_reads_back_to_the_same_value) {
    ModelFamily fam = {"toy", NULL, "v8l1t8", "toy spec", never_create, NULL};
    TrainConfig c;
    int n;
    ArgSpec *t = train_options(&c, &fam, &n);
    char *argv1[] = {"prog", "--lr", "3e-4", "--density", "0.01", "--zero", "--seed", "18446744073709551615",
                     "--prompt", "a \"b\"", NULL};
    args_parse(t, n, 10, argv1, "usage", NULL);
    TrainConfig before = c;
    static char vals[256][256];
    CHECK(n <= 256, "table of %d options too long for the test", n);
    for (int i = 0; i < n; i++) args_format(&t[i], vals[i], sizeof vals[i]);
    char *argv0[] = {"prog", NULL};
    args_parse(t, n, 1, argv0, "usage", NULL); /* back to the defaults */
    for (int i = 0; i < n; i++) args_set(&t[i], vals[i]);
    CHECK(c.lr == before.lr && c.density == before.density && c.zero == 1 && c.seed == UINT64_MAX &&
          strcmp(c.prompt, "a \"b\"") == 0 && c.lr_floor == before.lr_floor && c.B == before.B,
          "round trip: lr %g density %.17g zero %d seed %llu prompt %s", c.lr, c.density, c.zero,
          (unsigned long long)c.seed, c.prompt);
    free(t);
}

/* ---- the update rules' own options (optim/rule.h rows, trainer/train_rules.c) ---- */

/* A rule's flags parsed by the trainer land in the chosen rule's block of DistConfig exactly where
 * distopt_set_option (the same rows) puts them, the others at their defaults; another rule's block is untouched. */
TEST(rule_options_reach_the_chosen_rules_block) {
    ModelFamily fam = {"toy", NULL, "v8l1t8", "toy spec", never_create, NULL};
    TrainConfig c;
    memset(&c, 0, sizeof c);
    int n;
    ArgSpec *t = train_options(&c, &fam, &n);
    char *argv1[] = {"prog", "--optimizer", "powersgd", "--powersgd-rank", "3", "--powersgd-eps", "0.25",
                     "--demo-topk", "7", NULL};
    args_parse(t, n, 9, argv1, "usage", NULL);
    DistConfig dc, want;
    train_dist_config(&c, &dc);
    memset(&want, 0, sizeof want);
    want.opt.kind = OPT_POWERSGD;
    distopt_default_options(&want);
    CHECK(distopt_set_option(&want, "powersgd-rank", "3") == 0 && distopt_set_option(&want, "powersgd-eps", "0.25") == 0,
          "distopt_set_option refused PowerSGD's own options");
    CHECK(dc.opt.kind == OPT_POWERSGD && memcmp(&dc.rule_params, &want.rule_params, sizeof want.rule_params) == 0,
          "the trainer's PowerSGD block differs from distopt_set_option's");
    CHECK(distopt_set_option(&want, "demo-topk", "7") == -1, "PowerSGD took DeMo's --demo-topk");
    DistConfig demo;
    memset(&demo, 0, sizeof demo);
    demo.opt.kind = OPT_DEMO;
    distopt_default_options(&demo);
    distopt_set_option(&demo, "demo-topk", "7");
    CHECK(memcmp(&c.rule_params[OPT_DEMO], &demo.rule_params, sizeof demo.rule_params) == 0,
          "the trainer's DeMo block differs from distopt_set_option's");
    free(t);
}

/* --onebit-freeze 0 resolves to 15% of --steps in the option itself (what the manifest records); the other rules'
 * options keep their values; their defining rows are the ones a resume must keep. */
TEST(rule_configure_resolves_into_the_recorded_option) {
    ModelFamily fam = {"toy", NULL, "v8l1t8", "toy spec", never_create, NULL};
    TrainConfig c;
    memset(&c, 0, sizeof c);
    int n;
    ArgSpec *t = train_options(&c, &fam, &n);
    char *argv1[] = {"prog", "--optimizer", "onebit-adam", "--steps", "200", NULL};
    args_parse(t, n, 5, argv1, "usage", NULL);
    char before[64], after[64];
    args_format(args_find(t, n, "onebit-freeze"), before, sizeof before);
    DistConfig dc;
    train_dist_config(&c, &dc);
    args_format(args_find(t, n, "onebit-freeze"), after, sizeof after);
    CHECK(!strcmp(before, "0") && !strcmp(after, "30"), "--onebit-freeze %s became %s, want 0 -> 30", before, after);
    CHECK(train_option_defining("demo-topk", "demo") && train_option_defining("powersgd-rank", "powersgd") &&
          !train_option_defining("onebit-freeze", "onebit-adam") && !train_option_defining("lr", "adamw") &&
          train_option_defining("diloco-h", "diloco") && !train_option_defining("diloco-outer-lr", "diloco") &&
          train_option_defining("sparseloco-mask", "sparseloco") &&
          !train_option_defining("sparseloco-beta", "sparseloco"), "defining options");
    /* another rule's option is not defining for this one: a resume of a DiLoCo checkpoint with --sparseloco-h said
     * it contradicted the checkpoint's (never used) --sparseloco-h 30, instead of naming the rule it needs */
    CHECK(!train_option_defining("sparseloco-h", "diloco") && train_option_of_other_rule("sparseloco-h", "diloco") &&
          !train_option_of_other_rule("diloco-h", "diloco") && !train_option_of_other_rule("lr", "diloco") &&
          train_option_of_other_rule("demo-topk", "adamw"), "another rule's options");
    CHECK(!strcmp(train_optimizer_choices(), "adamw|adams|scape|topk-ef|powersgd|onebit-adam|demo|diloco|sparseloco"),
          "--optimizer choices %s", train_optimizer_choices());
    free(t);
}

/* The memory check's bytes per parameter of the local-update rules: the staging buffer 4 plus what their init
 * allocates (theta_prev, the outer state, the inner m and v; v not with AdamS; SparseLoCo's message, (4 + 2 k +
 * ceil(k b / 8)) / C, and with the shared mask two masks of 1/8 and the payload 4 k / C). */
TEST(local_update_rules_bytes_per_param) {
    ModelFamily fam = {"toy", NULL, "v8l1t8", "toy spec", never_create, NULL};
    const char *const runs[][5] = {
        {"--optimizer", "diloco", NULL},
        {"--optimizer", "diloco", "--diloco-inner", "adams", NULL},
        {"--optimizer", "sparseloco", NULL},
        {"--optimizer", "sparseloco", "--sparseloco-mask", "shared", NULL},
    };
    const double want[] = {20, 16, 20 + 148.0 / 4096, 20 + 148.0 / 4096 + 0.25 + 256.0 / 4096};
    for (int i = 0; i < 4; i++) {
        TrainConfig c;
        memset(&c, 0, sizeof c);
        int n, argc = 1;
        ArgSpec *t = train_options(&c, &fam, &n);
        char *argv[6] = {"prog"};
        while (runs[i][argc - 1]) {
            argv[argc] = (char *)runs[i][argc - 1];
            argc++;
        }
        args_parse(t, n, argc, argv, "usage", NULL);
        double b = train_optimizer_bytes_per_param(&c, 2);
        CHECK(fabs(b - want[i]) < 1e-9, "%s %s: %g bytes per parameter, want %g", argv[2], argc > 3 ? argv[4] : "",
              b, want[i]);
        free(t);
    }
}

TEST(checkpoint_state_round_trip_and_completeness) {
    char out[300], dir[512], why[512], path[600];
    snprintf(out, sizeof out, "%s/run", tmpdir);
    write_ckpt(out, 10, 2);
    ckpt_dir(dir, sizeof dir, out, 10);
    int step = -1, world = -1;
    CHECK(ckpt_is_complete(dir, &step, &world, why, sizeof why), "complete checkpoint rejected: %s", why);
    CHECK(step == 10 && world == 2, "manifest: step %d world %d", step, world);
    snprintf(path, sizeof path, "%s/state_rank1.bin", dir);
    CkptState h;
    float *blob = ckpt_read_state(path, &h);
    CHECK(h.rank == 1 && h.world == 2 && h.step == 10 && h.blob_bytes == 40 && blob[3] == 1003.0f,
          "state read back: rank %d world %d step %d bytes %llu blob[3] %g", h.rank, h.world, h.step,
          (unsigned long long)h.blob_bytes, blob[3]);
    free(blob);
    snprintf(path, sizeof path, "%s/state_rank1.bin.tmp", dir);
    CHECK(!file_exists(path), "temp file left behind");
    /* truncate one state file: no longer complete, and the reason names the file and both sizes */
    snprintf(path, sizeof path, "%s/state_rank1.bin", dir);
    CHECK(truncate(path, 100) == 0, "truncate");
    CHECK(!ckpt_is_complete(dir, &step, &world, why, sizeof why), "truncated checkpoint accepted");
    CHECK(strstr(why, "state_rank1.bin has 100 bytes, manifest says 296") != NULL, "reason: %s", why);
}

TEST(latest_skips_incomplete_and_prune_keeps_newest) {
    char out[300], dir[512], path[600];
    snprintf(out, sizeof out, "%s/latest", tmpdir);
    for (int s = 2; s <= 10; s += 2) write_ckpt(out, s, 1);
    char found[512];
    CHECK(ckpt_find_latest(out, found, sizeof found) == 10, "latest should be 10");
    /* newest has no manifest (crash while writing), next one a truncated state file */
    ckpt_dir(dir, sizeof dir, out, 10);
    ckpt_invalidate(dir);
    ckpt_dir(dir, sizeof dir, out, 8);
    snprintf(path, sizeof path, "%s/state_rank0.bin", dir);
    CHECK(truncate(path, 50) == 0, "truncate");
    int s = ckpt_find_latest(out, found, sizeof found);
    CHECK(s == 6, "latest with 10 and 8 incomplete: expected 6, got %d", s);
    ckpt_dir(dir, sizeof dir, out, 6);
    CHECK(strcmp(found, dir) == 0, "latest dir: expected %s got %s", dir, found);
    /* pruning to 2 keeps complete 6 and 4, removes 2, never touches the incomplete ones */
    ckpt_prune(out, 2, -1);
    int w;
    char why[512];
    ckpt_dir(dir, sizeof dir, out, 2);
    CHECK(!file_exists(dir), "ckpt_2 should be pruned");
    ckpt_dir(dir, sizeof dir, out, 4);
    CHECK(ckpt_is_complete(dir, &s, &w, why, sizeof why), "ckpt_4 should be kept: %s", why);
    ckpt_dir(dir, sizeof dir, out, 10);
    CHECK(file_exists(dir), "incomplete ckpt_10 must not be pruned");
}

TEST(corrupt_state_file_fails_with_one_line) {
    char out[300], dir[512], path[600];
    snprintf(out, sizeof out, "%s/corrupt", tmpdir);
    write_ckpt(out, 4, 1);
    ckpt_dir(dir, sizeof dir, out, 4);
    snprintf(path, sizeof path, "%s/state_rank0.bin", dir);
    FILE *f = fopen(path, "r+b");
    fseek(f, (long)sizeof(CkptState) + 5, SEEK_SET);
    fputc(0x7f, f); /* same length, different bytes */
    fclose(f);
    int pe[2];
    CHECK(pipe(pe) == 0, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pe[1], 2);
        CkptState h;
        ckpt_read_state(path, &h);
        exit(0);
    }
    close(pe[1]);
    char err[2048];
    ssize_t k, got = 0;
    while ((k = read(pe[0], err + got, sizeof err - 1 - (size_t)got)) > 0) got += k;
    err[got] = '\0';
    close(pe[0]);
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0, "corrupt state file was accepted");
    CHECK(count_lines(err) == 1 && strstr(err, "checksum") && strstr(err, path), "message: %s", err);
}

/* Issue 34, symptom 5: only canonical names are checkpoints (ckpt_010, ckpt_+10 and ckpt_4294967306 would each be
 * read as step 10 by strtol); retention neither counts nor removes a linked-in checkpoint, removes nothing through
 * a link, and finishes a removal that a killed run left half-done. */
TEST(prune_counts_canonical_names_only_and_never_follows_links) {
    int st = -1;
    CHECK(ckpt_parse_name("ckpt_10", &st) && st == 10, "ckpt_10 -> %d", st);
    CHECK(ckpt_parse_name("ckpt_0", &st) && st == 0, "ckpt_0 -> %d", st);
    const char *bad[] = {"ckpt_010", "ckpt_+10", "ckpt_ 10", "ckpt_-1", "ckpt_4294967306", "ckpt_2147483648",
                         "ckpt_", "ckpt_10x", "ckpt_10.bak"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(!ckpt_parse_name(bad[i], &st), "%s was taken for a checkpoint name", bad[i]);
    char out[300], other[300], dir[512], path[700], link[512];
    snprintf(out, sizeof out, "%s/links", tmpdir);
    snprintf(other, sizeof other, "%s/links_other", tmpdir);
    for (int s = 2; s <= 6; s += 2) write_ckpt(out, s, 1);
    write_ckpt(other, 1, 1);
    /* look-alike folders of the same step, a link to another run's checkpoint named as the newest step */
    snprintf(dir, sizeof dir, "%s/ckpt_004", out);
    make_dirs(dir);
    snprintf(dir, sizeof dir, "%s/ckpt_4294967302", out);
    make_dirs(dir);
    ckpt_dir(dir, sizeof dir, other, 1);
    char target[600];
    CHECK(realpath(dir, target) != NULL, "realpath");
    snprintf(link, sizeof link, "%s/ckpt_9", out);
    CHECK(symlink(target, link) == 0, "symlink");
    int *steps;
    int n = ckpt_list(out, &steps);
    CHECK(n == 4 && steps[0] == 9 && steps[1] == 6 && steps[2] == 4 && steps[3] == 2, "listed %d entries", n);
    free(steps);
    ckpt_prune(out, 1, -1); /* keep 1 real one: ckpt_6; the link is not counted, the look-alikes are not ours */
    ckpt_dir(dir, sizeof dir, out, 6);
    CHECK(file_exists(dir), "ckpt_6, the newest real checkpoint, was removed");
    ckpt_dir(dir, sizeof dir, out, 4);
    CHECK(!file_exists(dir), "ckpt_4 should be pruned");
    snprintf(path, sizeof path, "%s/model.bin", target);
    CHECK(file_exists(path) && is_symlink(link), "retention removed the linked-in checkpoint or its files");
    snprintf(dir, sizeof dir, "%s/ckpt_004", out);
    CHECK(file_exists(dir), "ckpt_004 is no checkpoint and must be left alone");
    /* a removal killed half-way: the renamed folder is finished by the next prune */
    snprintf(dir, sizeof dir, "%s/.deleting-ckpt_2", out);
    make_dirs(dir);
    snprintf(path, sizeof path, "%s/state_rank0.bin", dir);
    write_file_atomic(path, "x", 1, NULL, 0);
    ckpt_prune(out, 1, -1);
    CHECK(!file_exists(dir), "a half-removed checkpoint was left behind");
}

/* Issue 34, symptom 8: option values come back exactly: bytes that are not UTF-8 (a Latin-1 path), and values far
 * longer than 64 KiB. */
TEST(manifest_options_keep_any_bytes_at_any_length) {
    char out[300], dir[512];
    snprintf(out, sizeof out, "%s/optbytes", tmpdir);
    write_ckpt(out, 3, 1);
    ckpt_dir(dir, sizeof dir, out, 3);
    size_t big_n = 200000;
    char *big = xmalloc(big_n + 1, "big value");
    for (size_t i = 0; i < big_n; i++) big[i] = (char)('a' + i % 26);
    big[big_n] = '\0';
    const char *names[] = {"train", "prompt", "out", "lr"};
    const char *values[] = {"/data/caf\xe9/*.bin", big, "half \xe2\x82", "1e-3"};
    CkptFile f = {"model.bin", 5, 0};
    char mpath[600];
    snprintf(mpath, sizeof mpath, "%s/model.bin", dir);
    ckpt_file_hash(mpath, &f.bytes, &f.xxh3);
    ckpt_write_manifest(dir, 1, 3, 1, &f, 4, names, values, "", "0123456789abcdef", "/old/caf\xe9/ckpt_2");
    CkptOptions o;
    CHECK(ckpt_read_options(dir, &o), "options did not parse");
    CHECK(o.n == 4, "%d options", o.n);
    for (int i = 0; i < o.n && i < 4; i++)
        CHECK(strcmp(o.values[i], values[i]) == 0, "--%s came back as %zu bytes, not the %zu given", names[i],
              strlen(o.values[i]), strlen(values[i]));
    CHECK(strcmp(o.run_id, "0123456789abcdef") == 0, "run_id '%s'", o.run_id);
    ckpt_options_free(&o);
    free(big);
    CHECK(utf8_valid("caf\xc3\xa9 \xf0\x9f\x98\x80") && !utf8_valid("\xc0\xaf") && !utf8_valid("\xed\xa0\x80") &&
          !utf8_valid("\xf4\x90\x80\x80") && !utf8_valid("\xe2\x82"), "utf8_valid");
}

/* A program stopped by a signal while it writes a file (export_gguf, Ctrl-C in the middle of a GGUF) leaves neither
 * the file nor its temp: atomic_temps_go_with_signals removes the temps of the writes in progress, then the process
 * ends by the signal as it would have. */
TEST(a_signal_mid_write_leaves_no_temp_file) {
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/signalled", tmpdir);
    make_dirs(dir);
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    pid_t pid = fork();
    if (pid == 0) {
        atomic_temps_go_with_signals();
        AtomicFile *a = atomic_open(path);
        if (!a) _exit(3);
        fputs("half a file", atomic_stream(a));
        fflush(atomic_stream(a));
        raise(SIGINT);
        _exit(4); /* not reached */
    }
    int st;
    waitpid(pid, &st, 0);
    DIR *d = opendir(dir);
    int left = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') left++;
    if (d) closedir(d);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT, "the writer did not end by its SIGINT (status %d)", st);
    CHECK(left == 0, "%d file(s) left in %s after a SIGINT mid-write", left, dir);
}

/* Issue 34, symptom 3: a roll-back moves the later checkpoints aside (kept), so latest and retention follow the new
 * branch; a roll-back killed half-way is finished by the next run; unfinished later folders are removed. */
TEST(rollback_moves_later_checkpoints_aside) {
    char out[300], dir[512], dest[600], why[512], found[600];
    snprintf(out, sizeof out, "%s/rollback", tmpdir);
    for (int s = 2; s <= 8; s += 2) write_ckpt(out, s, 1);
    ckpt_dir(dir, sizeof dir, out, 8);
    ckpt_invalidate(dir); /* ckpt_8: a save that died */
    int moved = ckpt_abandon_after(out, 2, dest, sizeof dest, why, sizeof why);
    CHECK(moved == 2, "moved %d (%s), expected 2 (ckpt_4, ckpt_6)", moved, why);
    CHECK(ckpt_find_latest(out, found, sizeof found) == 2, "latest after the roll-back is not ckpt_2");
    CHECK(!file_exists(dir), "the unfinished ckpt_8 was kept");
    char p[800];
    snprintf(p, sizeof p, "%s/ckpt_6/manifest.json", dest);
    CHECK(file_exists(p), "ckpt_6 not kept in %s", dest);
    /* a second roll-back to the same step gets a folder of its own */
    write_ckpt(out, 4, 1);
    char dest2[600];
    CHECK(ckpt_abandon_after(out, 2, dest2, sizeof dest2, why, sizeof why) == 1 && strcmp(dest, dest2) != 0,
          "second roll-back: %s vs %s", dest, dest2);
    /* killed between writing the intent and moving: the next run finishes it */
    write_ckpt(out, 6, 1);
    snprintf(p, sizeof p, "%s/.rollback", out);
    write_file_atomic(p, "2 abandoned/after_ckpt_2.9\n", 27, NULL, 0);
    CHECK(ckpt_finish_rollback(out, why, sizeof why) == 1, "pending roll-back not finished: %s", why);
    CHECK(ckpt_find_latest(out, found, sizeof found) == 2 && !file_exists(p), "after finishing: latest not 2");
    snprintf(p, sizeof p, "%s/abandoned/after_ckpt_2.9/ckpt_6/model.bin", out);
    CHECK(file_exists(p), "%s missing", p);
}

/* Rewrites the run_id of the checkpoint <dir> (written by write_ckpt: run 00000000000000aa) to id, as if the folder
 * had been copied in from another run: the manifest's own checksum (its last member) is made anew, so the
 * checkpoint stays a good one, of another run. */
static void set_run_id(const char *dir, const char *id) {
    char path[600], buf[4096];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    char *at = strstr(buf, "00000000000000aa");
    if (!at || strlen(id) != 16) fatal("set_run_id: %s has no run id to replace", path);
    memcpy(at, id, 16);
    char *seal = strstr(buf, ", \"manifest_xxh3\": \"");
    if (!seal) fatal("set_run_id: %s has no checksum of its own", path);
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits(buf, (size_t)(seal - buf)));
    memcpy(seal + strlen(", \"manifest_xxh3\": \""), hex, 16);
    write_file_atomic(path, buf, n, NULL, 0);
}

/* Issue 43, symptoms 4 and 8: a checkpoint of another run copied into --out is named by the line check and neither
 * counted nor removed by retention; a roll-back never moves checkpoints through a link planted at <out>/abandoned:
 * it is refused before anything moves, and so is finishing a pending roll-back into it. */
TEST(lineage_keeps_to_its_own_run_and_its_own_folder) {
    char out[300], dir[512], why[1024], dest[600], p[800], elsewhere[400], target[600];
    snprintf(out, sizeof out, "%s/lineage", tmpdir);
    for (int s = 2; s <= 6; s += 2) write_ckpt(out, s, 1);
    CHECK(ckpt_line_check(out, why, sizeof why) == 0, "one run's checkpoints taken for two: %s", why);
    write_ckpt(out, 8, 1);
    ckpt_dir(dir, sizeof dir, out, 8);
    set_run_id(dir, "00000000000000bb");
    CHECK(ckpt_line_check(out, why, sizeof why) < 0 &&
          strcmp(why, "run 00000000000000bb: ckpt_8; run 00000000000000aa: ckpt_6, ckpt_4, ckpt_2") == 0,
          "line check: '%s'", why);
    ckpt_prune(out, 1, 6); /* this run just wrote ckpt_6: keep 1 of its own, never the other run's ckpt_8 */
    CHECK(file_exists(dir), "retention removed ckpt_8, another run's");
    ckpt_dir(dir, sizeof dir, out, 6);
    CHECK(file_exists(dir), "retention removed ckpt_6, the one just written");
    ckpt_dir(dir, sizeof dir, out, 4);
    CHECK(!file_exists(dir), "ckpt_4 kept beyond keep 1 (the other run's ckpt_8 was counted)");

    snprintf(out, sizeof out, "%s/lineage_link", tmpdir);
    snprintf(elsewhere, sizeof elsewhere, "%s/lineage_elsewhere", tmpdir);
    write_ckpt(out, 2, 1);
    write_ckpt(out, 4, 1);
    make_dirs(elsewhere);
    CHECK(realpath(elsewhere, target) != NULL, "realpath");
    snprintf(p, sizeof p, "%s/abandoned", out);
    CHECK(symlink(target, p) == 0, "symlink");
    CHECK(ckpt_abandon_check(out, 4, why, sizeof why) == 0, "nothing later than 4, yet refused: %s", why);
    CHECK(ckpt_abandon_check(out, 2, why, sizeof why) < 0 && strstr(why, "abandoned is a symbolic link"),
          "check: %s", why);
    CHECK(ckpt_abandon_after(out, 2, dest, sizeof dest, why, sizeof why) < 0, "roll-back through the link went on");
    ckpt_dir(dir, sizeof dir, out, 4);
    snprintf(p, sizeof p, "%s/.rollback", out);
    CHECK(file_exists(dir) && !file_exists(p), "a refused roll-back moved ckpt_4 or left its intent");
    write_file_atomic(p, "2 abandoned/after_ckpt_2\n", 25, NULL, 0); /* pending from a run killed half-way */
    int step = -1;
    CHECK(ckpt_rollback_pending(out, &step, why, sizeof why) == 1 && step == 2, "pending: step %d (%s)", step, why);
    CHECK(ckpt_finish_rollback(out, why, sizeof why) < 0 && strstr(why, "abandoned is a symbolic link"),
          "finishing through the link: %s", why);
    snprintf(p, sizeof p, "%s/after_ckpt_2", target);
    CHECK(file_exists(dir) && !file_exists(p), "a checkpoint or folder went through the link to %s", target);
    snprintf(p, sizeof p, "%s/.rollback", out);
    write_file_atomic(p, "2 abandoned/../x\n", 17, NULL, 0);
    CHECK(ckpt_rollback_pending(out, &step, why, sizeof why) < 0 && strstr(why, "malformed"), "'../x' taken: %s", why);
}

/* Issue 34, symptom 6: the atomic write never opens a planted link: the temp name is new each time. */
TEST(atomic_write_never_follows_a_planted_link) {
    char victim[400], dir[300], link[600], path[500];
    snprintf(dir, sizeof dir, "%s/planted", tmpdir);
    make_dirs(dir);
    snprintf(victim, sizeof victim, "%s/victim.txt", tmpdir);
    write_file_atomic(victim, "precious", 8, NULL, 0);
    snprintf(path, sizeof path, "%s/model.bin", dir);
    snprintf(link, sizeof link, "%s.tmp", path);
    char target[600];
    CHECK(realpath(victim, target) != NULL, "realpath");
    CHECK(symlink(target, link) == 0, "symlink");
    snprintf(link, sizeof link, "%s/victim_link", dir);
    CHECK(symlink(target, link) == 0, "symlink");
    write_file_atomic(path, "MODEL", 5, NULL, 0);
    write_file_atomic(link, "new", 3, NULL, 0); /* replaces the link itself */
    CHECK(file_size(victim) == 8 && file_size(path) == 5, "victim %lld bytes, model %lld", (long long)file_size(victim),
          (long long)file_size(path));
    CHECK(!is_symlink(link) && file_size(link) == 3, "the link at the path was not replaced by a file");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "build/test_train_units.%d", (int)getpid());
    make_dirs(tmpdir);
    RUN_TEST(lr_schedule_matches_hand_computed_values);
    RUN_TEST(sampler_greedy_topk_and_frequencies);
    RUN_TEST(args_defaults_values_and_repeats);
    RUN_TEST(args_errors_are_one_line_with_status_2);
    RUN_TEST(args_errors_print_on_every_rank_unless_the_program_is_mpi);
    RUN_TEST(args_error_is_one_write);
    RUN_TEST(help_lists_every_option_of_the_trainer_table);
    RUN_TEST(jsonl_lines_are_objects_with_event_and_exact_floats);
    RUN_TEST(checkpoint_state_round_trip_and_completeness);
    RUN_TEST(latest_skips_incomplete_and_prune_keeps_newest);
    RUN_TEST(corrupt_state_file_fails_with_one_line);
    RUN_TEST(manifest_checksums_options_and_verification);
    RUN_TEST(args_format_reads_back_to_the_same_value);
    RUN_TEST(rule_options_reach_the_chosen_rules_block);
    RUN_TEST(rule_configure_resolves_into_the_recorded_option);
    RUN_TEST(local_update_rules_bytes_per_param);
    RUN_TEST(sample_context_has_one_bos_whatever_the_prompt);
    RUN_TEST(prune_counts_canonical_names_only_and_never_follows_links);
    RUN_TEST(manifest_options_keep_any_bytes_at_any_length);
    RUN_TEST(rollback_moves_later_checkpoints_aside);
    RUN_TEST(atomic_write_never_follows_a_planted_link);
    RUN_TEST(a_signal_mid_write_leaves_no_temp_file);
    RUN_TEST(lineage_keeps_to_its_own_run_and_its_own_folder);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tmpdir);
    TEST_EXIT();
}
