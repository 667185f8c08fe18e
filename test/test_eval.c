/*
 * test/test_eval.c DATA_DIR - the downstream tasks (issue 32): every reader on the hand-written items of test/eval/
 * (the strings the prompts build, the labels), every malformed input (a missing field, a label out of range, an
 * empty choice, invalid UTF-8, broken JSON, PIQA's labels out of step, an unknown format, a missing file) failing
 * with one line naming the file and the line, or skipped and counted on request; and the scorer on a model whose
 * logits are a known function of the input token, against log-likelihoods this file computes itself (its own
 * tokenisation rule, truncation and log-softmax in long double): per choice, acc, acc_norm, LAMBADA's greedy
 * accuracy and perplexity, at two lengths (one truncating the context), batch sizes 1 and 5 alike, and two ranks
 * (summed through the reduce) equal to one. Uses the bpe4k tokenizer of DATA_DIR (make data).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <signal.h>
#include <fcntl.h>

#include "eval/evaluate.h"
#include "eval/tasks.h"
#include "common/util.h"
#include "test/test.h"

static const char *data_dir = "data";
static int ref_truncated; /* rows whose context the reference cut */
static char tmpdir[256];
static Tokenizer *tok;

static char *write_tmp(const char *name, const char *text, size_t len) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, len, f);
    fclose(f);
    return path;
}
static int load(Task *t, const char *spec, int skip, char *err) { return task_load(t, spec, skip, err, 1200); }

/* ---------------------------------------------------------------- readers */

TEST(hellaswag_reads_ctx_and_ctx_a_b) {
    Task t;
    char err[1200];
    CHECK(load(&t, "hellaswag=test/eval/hellaswag.jsonl", 0, err), "load failed: %s", err);
    if (!t.n) return;
    CHECK(t.n == 3, "expected 3 items (a blank line is none), got %d", t.n);
    CHECK(!strcmp(t.items[0].context, "A man is standing on a ladder next to a wall. He"), "context 0: '%s'", t.items[0].context);
    CHECK(t.items[0].nchoice == 4 && !strcmp(t.items[0].choices[2], " paints the wall with a roller."),
          "choice 2 of item 0: '%s'", t.items[0].nchoice > 2 ? t.items[0].choices[2] : "");
    CHECK(t.items[0].label == 2 && t.items[1].label == 0 && t.items[2].label == 1, "labels %d %d %d", t.items[0].label,
          t.items[1].label, t.items[2].label);
    CHECK(!strcmp(t.items[1].context, "A woman puts flour into a bowl. she"), "ctx_a + ctx_b: '%s'", t.items[1].context);
    CHECK(t.items[2].line == 4, "the third item is on line 4, got %d", t.items[2].line);
    CHECK(t.kind == TASK_CHOICE && !strcmp(t.name, "hellaswag"), "kind %d name %s", t.kind, t.name);
    task_free(&t);
}

TEST(arc_reads_both_layouts_and_answer_keys) {
    Task t;
    char err[1200];
    CHECK(load(&t, "arc_easy:arc=test/eval/arc.jsonl", 0, err), "load failed: %s", err);
    if (!t.n) return;
    CHECK(!strcmp(t.name, "arc_easy") && !strcmp(t.format, "arc"), "name %s format %s", t.name, t.format);
    CHECK(!strcmp(t.items[0].context, "Question: Which of these keeps a plant alive?\nAnswer:"), "'%s'", t.items[0].context);
    CHECK(t.items[0].nchoice == 3 && !strcmp(t.items[0].choices[1], " water and light") && t.items[0].label == 1,
          "item 0: %d choices, label %d", t.items[0].nchoice, t.items[0].label);
    CHECK(t.items[1].nchoice == 4 && !strcmp(t.items[1].choices[1], " temperature") && t.items[1].label == 1,
          "item 1 (numeric answerKey '2'): label %d", t.items[1].label);
    task_free(&t);
}

TEST(piqa_reads_goal_solutions_and_labels_file) {
    Task t;
    char err[1200];
    CHECK(load(&t, "piqa=test/eval/piqa.jsonl", 0, err), "load failed (labels beside it): %s", err);
    if (!t.n) return;
    CHECK(t.n == 2 && t.items[0].label == 0 && t.items[1].label == 1, "labels %d %d", t.items[0].label, t.items[1].label);
    CHECK(!strcmp(t.items[1].context, "Question: To open a jar with a stuck lid,\nAnswer:") &&
          !strcmp(t.items[1].choices[1], " run the lid under hot water."), "'%s' / '%s'", t.items[1].context,
          t.items[1].choices[1]);
    task_free(&t);
    CHECK(load(&t, "piqa=test/eval/piqa.jsonl:test/eval/piqa-labels.lst", 0, err), "explicit labels: %s", err);
    task_free(&t);
}

TEST(lambada_splits_the_last_word_text_and_jsonl) {
    Task t;
    char err[1200];
    CHECK(load(&t, "lambada=test/eval/lambada.txt", 0, err), "load failed: %s", err);
    if (!t.n) return;
    CHECK(t.kind == TASK_LASTWORD && t.n == 3, "kind %d, %d items", t.kind, t.n);
    CHECK(!strcmp(t.items[0].context, "She looked at the old photograph for a long time, remembering the summer they spent by the") &&
          !strcmp(t.items[0].choices[0], " sea") && t.items[0].nchoice == 1 && t.items[0].label == 0,
          "context '%s' target '%s'", t.items[0].context, t.items[0].choices[0]);
    task_free(&t);
    CHECK(load(&t, "lambada=test/eval/lambada.jsonl", 0, err), "jsonl: %s", err);
    if (t.n) CHECK(!strcmp(t.items[0].choices[0], " garden"), "target '%s'", t.items[0].choices[0]);
    task_free(&t);
}

TEST(boolq_copa_mmlu_generic_build_their_prompts) {
    Task t;
    char err[1200];
    CHECK(load(&t, "boolq=test/eval/boolq.jsonl", 0, err), "boolq: %s", err);
    if (t.n) {
        CHECK(!strcmp(t.items[0].context, "The Sun is the star at the centre of the Solar System.\nQuestion: is the sun a star?\nAnswer:"),
              "'%s'", t.items[0].context);
        CHECK(t.items[0].label == 1 && t.items[1].label == 0 && !strcmp(t.items[0].choices[0], " no") &&
              !strcmp(t.items[0].choices[1], " yes"), "labels %d %d", t.items[0].label, t.items[1].label);
    }
    task_free(&t);
    CHECK(load(&t, "copa=test/eval/copa.jsonl", 0, err), "copa: %s", err);
    if (t.n) {
        CHECK(!strcmp(t.items[0].context, "The man broke his toe because") &&
              !strcmp(t.items[0].choices[0], " he dropped a hammer on his foot."), "'%s' / '%s'", t.items[0].context,
              t.items[0].choices[0]);
        CHECK(!strcmp(t.items[1].context, "I tipped the bottle therefore") && t.items[1].label == 1, "'%s'",
              t.items[1].context);
    }
    task_free(&t);
    CHECK(load(&t, "mmlu=test/eval/mmlu.jsonl", 0, err), "mmlu: %s", err);
    if (t.n) {
        CHECK(!strcmp(t.items[0].context, "What is 2 + 3?\nA. 4\nB. 5\nC. 6\nD. 7\nAnswer:"), "'%s'", t.items[0].context);
        CHECK(t.items[0].label == 1 && t.items[1].label == 2 && !strcmp(t.items[1].choices[2], " C"), "labels %d %d",
              t.items[0].label, t.items[1].label);
    }
    task_free(&t);
    CHECK(load(&t, "jsonl=test/eval/generic.jsonl", 0, err), "generic: %s", err);
    if (t.n) CHECK(!strcmp(t.items[0].choices[0], " Paris") && !t.items[1].context[0], "'%s'", t.items[0].choices[0]);
    task_free(&t);
}

/* one malformed file: loading fails with a message naming file:line and containing want; with skip, the one bad
 * item is counted and the good ones read */
static void malformed(const char *test_name_, const char *format, const char *name, const char *text, size_t len,
                      int line, const char *want, int good_items) {
    char spec[700], err[1200], where[600];
    const char *path = write_tmp(name, text, len);
    snprintf(spec, sizeof spec, "%s=%s", format, path);
    snprintf(where, sizeof where, "%s:%d: ", path, line);
    Task t;
    int ok = load(&t, spec, 0, err);
    CHECK(!ok, "%s: the bad item was accepted", name);
    if (!ok) CHECK(strstr(err, where) && strstr(err, want) && !strchr(err, '\n'),
                   "%s: want one line with '%s' and '%s', got: %s", name, where, want, err);
    CHECK(t.n == 0 && t.items == NULL, "%s: a failed load left %d items", name, t.n);
    if (good_items > 0) {
        ok = load(&t, spec, 1, err);
        CHECK(ok && t.n == good_items && t.skipped == 1, "%s with skip: ok %d, %d items, %d skipped (%s)", name, ok, t.n,
              t.skipped, ok ? "" : err);
        task_free(&t);
    }
}

TEST(malformed_items_name_file_and_line) {
    const char *good = "{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 1}\n";
    char buf[1024];
    snprintf(buf, sizeof buf, "%s{\"context\": \"a\", \"label\": 0}\n%s", good, good);
    malformed(test_name_, "jsonl", "missing.jsonl", buf, strlen(buf), 2, "no \"choices\"", 2);
    snprintf(buf, sizeof buf, "%s%s{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 2}\n", good, good);
    malformed(test_name_, "jsonl", "range.jsonl", buf, strlen(buf), 3, "label 2 is out of range for 2 choices", 2);
    snprintf(buf, sizeof buf, "{\"ctx\": \"x\", \"endings\": [\"a\", \"\", \"c\", \"d\"], \"label\": 0}\n%s", "");
    malformed(test_name_, "hellaswag", "empty.jsonl", buf, strlen(buf), 1, "choice 1 is empty", 0);
    int n = snprintf(buf, sizeof buf, "%s{\"context\": \"caf\xc3\", \"choices\": [\" b\"], \"label\": 0}\n", good);
    malformed(test_name_, "jsonl", "utf8.jsonl", buf, (size_t)n, 2, "invalid UTF-8", 1);
    n = snprintf(buf, sizeof buf, "first line is fine and has words\nsecond \xff\xfe line\n");
    malformed(test_name_, "lambada", "utf8.txt", buf, (size_t)n, 2, "invalid UTF-8", 1);
    snprintf(buf, sizeof buf, "%s{\"context\": \"a\", \"choices\": [\" b\"\n", good);
    malformed(test_name_, "jsonl", "syntax.jsonl", buf, strlen(buf), 2, "not a JSON object", 1);
    snprintf(buf, sizeof buf, "{\"question\": {\"stem\": \"q\", \"choices\": [{\"text\": \"a\", \"label\": \"A\"}, "
             "{\"text\": \"b\", \"label\": \"B\"}]}, \"answerKey\": \"E\"}\n");
    malformed(test_name_, "arc", "key.jsonl", buf, strlen(buf), 1, "answerKey \"E\" is none of the choices", 0);
    snprintf(buf, sizeof buf, "{\"premise\": \"p.\", \"choice1\": \"a\", \"choice2\": \"b\", \"question\": \"why\", \"label\": 0}\n");
    malformed(test_name_, "copa", "copa.jsonl", buf, strlen(buf), 1, "not \"cause\" or \"effect\"", 0);
    /* PIQA: a label that is not 0/1, and more labels than items */
    const char *pq = "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\"}\n{\"goal\": \"h\", \"sol1\": \"a\", \"sol2\": \"b\"}\n";
    write_tmp("p-labels.lst", "1\n7\n", 4);
    malformed(test_name_, "piqa", "p.jsonl", pq, strlen(pq), 2, "want 0 or 1", 1);
    write_tmp("q-labels.lst", "1\n0\n1\n", 6);
    char spec[700], err[1200];
    snprintf(spec, sizeof spec, "piqa=%s", write_tmp("q.jsonl", pq, strlen(pq)));
    Task t;
    CHECK(!load(&t, spec, 0, err) && strstr(err, "more labels than items"), "labels longer than items: %s", err);
    CHECK(!load(&t, "nosuch=test/eval/generic.jsonl", 0, err) && strstr(err, "unknown format 'nosuch'") &&
          strstr(err, "hellaswag|arc"), "unknown format: %s", err);
    CHECK(!load(&t, "jsonl=/nonexistent/x.jsonl", 0, err) && strstr(err, "/nonexistent/x.jsonl: cannot open"),
          "missing file: %s", err);
    CHECK(!load(&t, "jsonl", 0, err) && strstr(err, "want FORMAT=FILE"), "no '=': %s", err);
    write_tmp("allbad.jsonl", "{\"context\": 1}\n", 15);
    snprintf(spec, sizeof spec, "jsonl=%s/allbad.jsonl", tmpdir);
    CHECK(!load(&t, spec, 1, err) && strstr(err, "all skipped"), "a file with no good item, skipping: %s", err);
}

/* PIQA's labels (symptom 12): a blank line or extra words would shift or garble every later label, so the file is
 * refused naming its line; blank lines at its end are fine */
TEST(piqa_labels_file_with_a_blank_line_or_extra_words_is_refused_by_line) {
    const char *pq = "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\"}\n{\"goal\": \"h\", \"sol1\": \"a\", \"sol2\": \"b\"}\n";
    const char *cases[][3] = {{"0\n\n1\n", "2", "is blank"}, {"0\n1 yes\n", "2", "more than one word"},
                              {"1 0\n0\n", "1", "more than one word"}};
    char spec[700], err[1200], where[700];
    Task t;
    for (int i = 0; i < 3; i++) {
        char name[64], lname[64];
        snprintf(name, sizeof name, "pl%d.jsonl", i);
        snprintf(lname, sizeof lname, "pl%d-labels.lst", i);
        char *lp = write_tmp(lname, cases[i][0], strlen(cases[i][0]));
        snprintf(where, sizeof where, "%s:%s: ", lp, cases[i][1]);
        snprintf(spec, sizeof spec, "piqa=%s", write_tmp(name, pq, strlen(pq)));
        int ok = load(&t, spec, 0, err);
        CHECK(!ok && strstr(err, where) && strstr(err, cases[i][2]) && !strchr(err, '\n'),
              "labels '%s': want an error with '%s' and '%s', got ok %d: %s", cases[i][0], where, cases[i][2], ok,
              ok ? "" : err);
        if (ok) task_free(&t);
        ok = load(&t, spec, 1, err);
        CHECK(!ok, "labels '%s' accepted with --eval-task-skip-bad (labels %d %d)", cases[i][0],
              ok ? t.items[0].label : -1, ok && t.n > 1 ? t.items[1].label : -1);
        if (ok) task_free(&t);
    }
    write_tmp("pe-labels.lst", "1\n0\n\n\n", 6);
    snprintf(spec, sizeof spec, "piqa=%s", write_tmp("pe.jsonl", pq, strlen(pq)));
    int ok = load(&t, spec, 0, err);
    CHECK(ok && t.n == 2 && t.items[0].label == 1 && t.items[1].label == 0, "blank lines at the end: ok %d %s", ok,
          ok ? "" : err);
    if (ok) task_free(&t);
}

TEST(arc_choices_with_the_same_label_are_refused) {
    char buf[1024];
    snprintf(buf, sizeof buf, "{\"question\": {\"stem\": \"q\", \"choices\": [{\"text\": \"a\", \"label\": \"A\"}, "
             "{\"text\": \"b\", \"label\": \"B\"}]}, \"answerKey\": \"A\"}\n{\"question\": {\"stem\": \"q\", \"choices\": "
             "[{\"text\": \"a\", \"label\": \"A\"}, {\"text\": \"b\", \"label\": \"A\"}]}, \"answerKey\": \"A\"}\n");
    malformed(test_name_, "arc", "dup.jsonl", buf, strlen(buf), 2, "choices 0 and 1 both have the label \"A\"", 1);
    snprintf(buf, sizeof buf, "{\"question\": \"q\", \"choices\": {\"text\": [\"a\", \"b\", \"c\"], \"label\": [\"1\", "
             "\"2\", \"2\"]}, \"answerKey\": \"2\"}\n");
    malformed(test_name_, "arc", "dup2.jsonl", buf, strlen(buf), 1, "choices 1 and 2 both have the label \"2\"", 0);
}

/* symptom 21a: a folder given as the task file is named as a folder, not "read error" */
TEST(a_folder_as_task_file_is_named_as_a_folder) {
    char spec[700], err[1200], want[600];
    Task t;
    snprintf(spec, sizeof spec, "hellaswag=%s", tmpdir);
    snprintf(want, sizeof want, "%s: is a folder", tmpdir);
    int ok = load(&t, spec, 0, err);
    CHECK(!ok && strstr(err, want), "want '%s', got ok %d: %s", want, ok, ok ? "" : err);
    if (ok) task_free(&t);
    char fifo[600];
    snprintf(fifo, sizeof fifo, "%s/fifo.jsonl", tmpdir);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    snprintf(spec, sizeof spec, "jsonl=%s", fifo);
    ok = load(&t, spec, 0, err); /* would block forever if the FIFO were opened for reading without O_NONBLOCK */
    CHECK(!ok && strstr(err, "is a FIFO"), "a FIFO: ok %d: %s", ok, ok ? "" : err);
    unlink(fifo);
}

/* ---------------------------------------------------------------- output files (common/util.h) */

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = xcalloc(1 << 16, 1, "file");
    size_t n = fread(s, 1, (1 << 16) - 1, f);
    s[n] = 0;
    fclose(f);
    return s;
}
/* number of entries of tmpdir whose name contains ".tmp." */
static int temps_left(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls -a %s | grep -c '\\.tmp\\.'", tmpdir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) { if (fscanf(p, "%d", &n) != 1) n = -1; pclose(p); }
    return n;
}

TEST(out_open_refuses_links_devices_inputs_and_other_outputs) {
    char err[4600], path[600], lnk[600], input[600];
    snprintf(input, sizeof input, "%s", write_tmp("input.bin", "precious", 8));
    out_guard_input(input, "the test's input");
    snprintf(lnk, sizeof lnk, "%s/link.jsonl", tmpdir);
    snprintf(path, sizeof path, "%s/target.jsonl", tmpdir);
    CHECK(symlink(path, lnk) == 0, "symlink");
    OutFile *o = out_open(lnk, "--eval-dump", err, sizeof err);
    CHECK(!o && strstr(err, "is a symbolic link"), "a link: %s", o ? "opened" : err);
    o = out_open("/dev/full", "--eval-dump", err, sizeof err);
    CHECK(!o && strstr(err, "/dev/full: is a character device"), "/dev/full: %s", o ? "opened" : err);
    o = out_open(tmpdir, "--eval-dump", err, sizeof err);
    CHECK(!o && strstr(err, "is a folder"), "a folder: %s", o ? "opened" : err);
    char other[700]; /* the input by another spelling, and by a hard link */
    snprintf(other, sizeof other, "%s/./input.bin", tmpdir);
    o = out_open(other, "--eval-dump", err, sizeof err);
    CHECK(!o && strstr(err, "is the test's input of this run"), "the input: %s", o ? "opened" : err);
    snprintf(other, sizeof other, "%s/hard.bin", tmpdir);
    CHECK(link(input, other) == 0, "link");
    o = out_open(other, "--eval-dump", err, sizeof err);
    CHECK(!o && strstr(err, "is the test's input"), "a hard link of the input: %s", o ? "opened" : err);
    CHECK(out_open_append(input, err, sizeof err) < 0 && strstr(err, "is the test's input"), "a log onto the input: %s",
          err);
    /* a whole output, then a log on the same path: refused */
    o = out_open(path, "--eval-dump", err, sizeof err);
    CHECK(o != NULL, "a new file: %s", err);
    CHECK(out_open_append(path, err, sizeof err) < 0 && strstr(err, "is the --eval-dump file of this run"),
          "a log onto the dump: %s", err);
    if (o) {
        fprintf(out_stream(o), "row\n");
        CHECK(!file_exists(path), "the target exists before out_commit");
        CHECK(out_commit(o, err, sizeof err), "commit: %s", err);
    }
    char *got = slurp(path), *kept = slurp(input);
    CHECK(got && !strcmp(got, "row\n"), "the committed file holds '%s'", got ? got : "(none)");
    CHECK(kept && !strcmp(kept, "precious"), "the input holds '%s'", kept ? kept : "(none)");
    CHECK(temps_left() == 0, "%d temp files left", temps_left());
    free(got);
    free(kept);
}

TEST(out_commit_of_a_failed_write_keeps_the_old_file_and_no_temp) {
    char err[4600], path[600];
    snprintf(path, sizeof path, "%s", write_tmp("old.jsonl", "old content\n", 12));
    OutFile *o = out_open(path, "--eval-dump", err, sizeof err);
    CHECK(o != NULL, "%s", err);
    if (!o) return;
    /* a full disk, as RLIMIT_FSIZE makes one: writes past 4 KiB fail with EFBIG (SIGXFSZ ignored) */
    struct rlimit old, lim = {4096, 4096};
    getrlimit(RLIMIT_FSIZE, &old);
    lim.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    for (int i = 0; i < 2000; i++) fprintf(out_stream(o), "row %d of a dump that does not fit\n", i);
    int ok = out_commit(o, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
    CHECK(!ok && strstr(err, path) && strstr(err, "cannot write") && !strchr(err, '\n'), "ok %d: %s", ok, err);
    char *got = slurp(path);
    CHECK(got && !strcmp(got, "old content\n"), "the old file now holds '%.40s'", got ? got : "(none)");
    CHECK(temps_left() == 0, "%d temp files left", temps_left());
    free(got);
}

TEST(a_temp_not_committed_is_removed_when_the_process_exits) {
    char path[600];
    snprintf(path, sizeof path, "%s/exit.jsonl", tmpdir);
    pid_t pid = fork();
    if (pid == 0) {
        char err[4600];
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        OutFile *o = out_open(path, "--eval-dump", err, sizeof err);
        if (o) fprintf(out_stream(o), "half\n");
        fatal("the child stops with its output not committed");
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "the child ended with %d", st);
    CHECK(!file_exists(path) && temps_left() == 0, "exists %d, %d temp files", file_exists(path), temps_left());
}

TEST(out_open_append_refuses_a_fifo_without_blocking) {
    char err[4600], fifo[600], lnk[600];
    snprintf(fifo, sizeof fifo, "%s/log.jsonl", tmpdir);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    alarm(10); /* a blocking open ends the test binary instead of hanging it */
    int fd = out_open_append(fifo, err, sizeof err);
    CHECK(fd < 0 && strstr(err, "is a FIFO") && strstr(err, fifo), "a FIFO: fd %d %s", fd, fd < 0 ? err : "");
    int rd = open(fifo, O_RDONLY | O_NONBLOCK); /* with a reader the open succeeds: refused by its type */
    fd = out_open_append(fifo, err, sizeof err);
    CHECK(fd < 0 && strstr(err, "is a FIFO"), "a FIFO with a reader: fd %d %s", fd, fd < 0 ? err : "");
    alarm(0);
    if (rd >= 0) close(rd);
    if (fd >= 0) close(fd);
    unlink(fifo);
    snprintf(lnk, sizeof lnk, "%s/lnk.jsonl", tmpdir);
    CHECK(symlink(write_tmp("someone.jsonl", "x\n", 2), lnk) == 0, "symlink");
    fd = out_open_append(lnk, err, sizeof err);
    CHECK(fd < 0 && strstr(err, "is a symbolic link"), "a link to a file: fd %d %s", fd, fd < 0 ? err : "");
    fd = out_open_append(write_tmp("mine.jsonl", "", 0), err, sizeof err);
    CHECK(fd >= 0 && write(fd, "a\n", 2) == 2, "a regular file: %s", fd < 0 ? err : "write failed");
    if (fd >= 0) close(fd);
}

/* ---------------------------------------------------------------- the scorer */

/* A model whose logits depend on the input token x at each position p and on p: logit(v | x, p) = ((x * 7919 +
 * v * 104729 + p * 31) % 1009) / 200, over V (so where the context is cut shows); Vp = V + 3 with padding logits
 * that would win if they were counted. */
typedef struct {
    Model base;
    float *logits;
    int Bmax, Tmax;
    int forwards;
    int nan; /* every logit NaN: a diverged model */
} Fake;
static float fake_logit(int x, int p, int v) {
    return (float)(((int64_t)x * 7919 + (int64_t)v * 104729 + (int64_t)p * 31) % 1009) / 200.0f;
}
static float fake_forward(Model *m, const int *in, const int *tg, int B, int T) {
    Fake *f = (Fake *)m;
    int Vp = m->padded_vocab_size;
    f->forwards++;
    for (int b = 0; b < B; b++)
        for (int p = 0; p < T; p++)
            for (int v = 0; v < Vp; v++)
                f->logits[((size_t)b * T + p) * Vp + v] =
                    f->nan ? NAN : v < m->vocab_size ? fake_logit(in[b * T + p], p, v) : 1e6f;
    return 0;
}
static const float *fake_logits(const Model *m) { return ((const Fake *)m)->logits; }
static Fake *fake_new(int V, int B, int T) {
    Fake *f = xcalloc(1, sizeof(Fake), "fake model");
    f->base.vocab_size = V;
    f->base.padded_vocab_size = V + 3;
    f->base.max_seq_len = 1024;
    f->base.forward = fake_forward;
    f->base.logits = fake_logits;
    f->logits = xmalloc((size_t)B * T * (V + 3) * sizeof(float), "fake logits");
    f->Bmax = B;
    f->Tmax = T;
    return f;
}
static void fake_free(Fake *f) { free(f->logits); free(f); }

/* The harness rule written out again (eval/evaluate.h): loglik of choice j of item it at length T, long double */
static long double ref_loglik(const TaskItem *it, int j, int T, int *greedy, int *ok) {
    char ctx[4096], whole[8192];
    snprintf(ctx, sizeof ctx, "%s", it->context);
    size_t n = strlen(ctx);
    while (n && (ctx[n - 1] == ' ' || ctx[n - 1] == '\n' || ctx[n - 1] == '\t')) n--;
    snprintf(whole, sizeof whole, "%s%s", it->context, it->choices[j]);
    ctx[n] = 0;
    int32_t *w = NULL, *c = NULL;
    size_t wc = 0, cc = 0;
    size_t nw = tokenizer_encode(tok, whole, strlen(whole), 0, &w, &wc);
    size_t nc = n ? tokenizer_encode(tok, ctx, n, 0, &c, &cc) : 0;
    free(c);
    size_t ncont = nw - nc;
    *ok = nw > nc && ncont < (size_t)T;
    if (!*ok) { free(w); return 0; }
    int32_t all[8192];
    size_t na = 0;
    if (tokenizer_bos(tok) != tokenizer_eot(tok)) all[na++] = tokenizer_bos(tok);
    else if (nc == 0) all[na++] = tokenizer_eot(tok);
    for (size_t i = 0; i < nw; i++) all[na++] = w[i];
    free(w);
    size_t s = na > (size_t)T + 1 ? na - (size_t)T - 1 : 0; /* keep the last T + 1 */
    ref_truncated += s > 0;
    long double ll = 0;
    *greedy = 1;
    int V = tokenizer_vocab_size(tok);
    for (size_t k = na - ncont; k < na; k++) {
        int x = all[k - 1], y = all[k], p = (int)(k - 1 - s); /* all[k-1] is read at position k-1-s of the row */
        long double mx = -1e30L, sum = 1; /* the argmax's own term */
        int am = 0;
        for (int v = 0; v < V; v++)
            if (fake_logit(x, p, v) > mx) { mx = fake_logit(x, p, v); am = v; }
        for (int v = 0; v < V; v++)
            if (v != am) sum += expl((long double)fake_logit(x, p, v) - mx);
        ll += (long double)fake_logit(x, p, y) - mx - logl(sum);
        *greedy &= am == y;
    }
    return ll;
}

/* the dump's loglik of (line, choice) */
static double dump_ll(const char *dump, int line, int choice, int *found) {
    char key[64];
    snprintf(key, sizeof key, "\"line\":%d,\"choice\":%d,", line, choice);
    const char *p = strstr(dump, key);
    *found = p != NULL;
    if (!p) return NAN;
    p = strstr(p, "\"loglik\":");
    return p ? strtod(p + 9, NULL) : NAN;
}
/* eval_task with the options spelled out (step 0, no progress, no stop) */
static int score(Fake *f, const Task *t, int B, int T, int rank, int world, EvalReduceFn reduce, int skip, FILE *dump,
                 TaskScore *sc, char *err) {
    EvalOptions o = {.B = B, .T = T, .rank = rank, .world = world, .reduce = reduce, .skip_bad = skip, .dump = dump};
    return eval_task(&f->base, tok, t, &o, sc, err, 1200);
}
static char *run_dump(Fake *f, const Task *t, int B, int T, TaskScore *sc, int *ok, char *err) {
    char path[512];
    snprintf(path, sizeof path, "%s/dump.jsonl", tmpdir);
    FILE *d = fopen(path, "w");
    *ok = score(f, t, B, T, 0, 1, NULL, 0, d, sc, err) == EVAL_OK;
    fclose(d);
    d = fopen(path, "rb");
    char *s = xcalloc(1 << 20, 1, "dump");
    size_t n = fread(s, 1, (1 << 20) - 1, d);
    s[n] = 0;
    fclose(d);
    return s;
}

static void score_against_reference(const char *test_name_, const char *spec, int T) {
    Task t;
    char err[1200];
    if (!load(&t, spec, 0, err)) { CHECK(0, "%s: %s", spec, err); return; }
    Fake *f = fake_new(tokenizer_vocab_size(tok), 5, T);
    TaskScore sc, sc1;
    int ok;
    char *dump = run_dump(f, &t, 5, T, &sc, &ok, err);
    CHECK(ok, "%s T=%d: %s", spec, T, err);
    long double worst = 0;
    int right = 0, right_norm = 0, greedy_right = 0;
    long double ll_sum = 0;
    for (int i = 0; i < t.n && ok; i++) {
        const TaskItem *it = &t.items[i];
        int best = 0, bestn = 0;
        long double bl = -1e30L, bn = -1e30L;
        for (int j = 0; j < it->nchoice; j++) {
            int g, rok, found;
            long double r = ref_loglik(it, j, T, &g, &rok);
            double got = dump_ll(dump, it->line, j, &found);
            CHECK(rok && found, "%s line %d choice %d: reference ok %d, in the dump %d", spec, it->line, j, rok, found);
            long double d = fabsl((long double)got - r) / (fabsl(r) > 1 ? fabsl(r) : 1);
            if (d > worst) worst = d;
            if (r > bl) { bl = r; best = j; }
            long double rn = r / (long double)strlen(it->choices[j]);
            if (rn > bn) { bn = rn; bestn = j; }
            if (t.kind == TASK_LASTWORD) { greedy_right += g; ll_sum += r; }
        }
        right += best == it->label;
        right_norm += bestn == it->label;
    }
    CHECK(worst < 1e-6L, "%s T=%d: worst relative loglik difference %.3Le", spec, T, worst);
    CHECK(sc.items == t.n, "%s: %d items scored of %d", spec, sc.items, t.n);
    if (t.kind == TASK_LASTWORD) {
        long double ppl = expl(-ll_sum / t.n);
        CHECK(fabs(sc.acc - (double)greedy_right / t.n) < 1e-12, "%s: acc %g, reference %g", spec, sc.acc,
              (double)greedy_right / t.n);
        CHECK(fabsl((long double)sc.ppl - ppl) / ppl < 1e-6L, "%s: ppl %g, reference %Lg", spec, sc.ppl, ppl);
        CHECK(isnan(sc.acc_norm), "%s: a last-word task has no acc_norm (%g)", spec, sc.acc_norm);
    } else {
        CHECK(fabs(sc.acc - (double)right / t.n) < 1e-12 && fabs(sc.acc_norm - (double)right_norm / t.n) < 1e-12,
              "%s: acc %g acc_norm %g, reference %g %g", spec, sc.acc, sc.acc_norm, (double)right / t.n,
              (double)right_norm / t.n);
    }
    /* batch 1 gives the same dump, bit for bit, in more forward passes */
    int fw5 = f->forwards;
    f->forwards = 0;
    char *dump1 = run_dump(f, &t, 1, T, &sc1, &ok, err);
    CHECK(ok && !strcmp(dump, dump1) && sc1.acc == sc.acc, "%s: B=1 differs from B=5", spec);
    CHECK(f->forwards > fw5, "%s: B=1 took %d forwards, B=5 %d (not batched?)", spec, f->forwards, fw5);
    free(dump);
    free(dump1);
    fake_free(f);
    task_free(&t);
}

TEST(scores_equal_the_reference_at_two_lengths) {
    const char *specs[] = {"hellaswag=test/eval/hellaswag.jsonl", "arc=test/eval/arc.jsonl", "piqa=test/eval/piqa.jsonl",
                           "lambada=test/eval/lambada.txt", "boolq=test/eval/boolq.jsonl", "copa=test/eval/copa.jsonl",
                           "mmlu=test/eval/mmlu.jsonl", "jsonl=test/eval/generic.jsonl"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) score_against_reference(test_name_, specs[i], 64);
    CHECK(ref_truncated == 0, "at T=64 no context should be cut (%d were)", ref_truncated);
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) score_against_reference(test_name_, specs[i], 20);
    CHECK(ref_truncated >= 10, "at T=20 the long contexts are cut from the left: only %d rows were", ref_truncated);
}

static double held[8];
static void hold(double *x, size_t n) { memcpy(held, x, n * sizeof(double)); }
static void add_held(double *x, size_t n) { for (size_t i = 0; i < n; i++) x[i] += held[i]; }

TEST(two_ranks_score_like_one) {
    Task t;
    char err[1200];
    CHECK(load(&t, "hellaswag=test/eval/hellaswag.jsonl", 0, err), "%s", err);
    Fake *f = fake_new(tokenizer_vocab_size(tok), 4, 32);
    TaskScore one, r0, r1;
    CHECK(score(f, &t, 4, 32, 0, 1, NULL, 0, NULL, &one, err), "%s", err);
    CHECK(score(f, &t, 4, 32, 0, 2, hold, 0, NULL, &r0, err), "%s", err);
    CHECK(score(f, &t, 4, 32, 1, 2, add_held, 0, NULL, &r1, err), "%s", err);
    CHECK(r1.items == one.items && r1.acc == one.acc && r1.acc_norm == one.acc_norm,
          "2 ranks: %d items acc %g acc_norm %g; 1 rank: %d items acc %g acc_norm %g", r1.items, r1.acc, r1.acc_norm,
          one.items, one.acc, one.acc_norm);
    fake_free(f);
    task_free(&t);
}

TEST(a_continuation_longer_than_T_names_the_item_or_is_skipped) {
    char text[8192];
    int n = snprintf(text, sizeof text, "{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 0}\n{\"context\": \"x\", \"choices\": [\"");
    for (int i = 0; i < 40; i++) n += snprintf(text + n, sizeof text - n, " word%d", i);
    snprintf(text + n, sizeof text - n, "\", \" y\"], \"label\": 1}\n");
    char spec[700], err[1200];
    snprintf(spec, sizeof spec, "jsonl=%s", write_tmp("long.jsonl", text, strlen(text)));
    Task t;
    CHECK(load(&t, spec, 0, err), "%s", err);
    Fake *f = fake_new(tokenizer_vocab_size(tok), 2, 16);
    TaskScore sc;
    char where[600];
    snprintf(where, sizeof where, "%s/long.jsonl:2: jsonl item: choice 0 is", tmpdir);
    int ok = score(f, &t, 2, 16, 0, 1, NULL, 0, NULL, &sc, err);
    CHECK(!ok && strstr(err, where) && strstr(err, "raise --seq"), "want an error with '%s', got ok %d: %s", where, ok,
          err);
    ok = score(f, &t, 2, 16, 0, 1, NULL, 1, NULL, &sc, err);
    CHECK(ok && sc.items == 1 && sc.skipped == 1, "skip: ok %d, %d items, %d skipped", ok, sc.items, sc.skipped);
    fake_free(f);
    task_free(&t);
}

/* symptom 1: every item is checked against T before any scoring, naming file and line; with skip_bad counted */
TEST(every_item_is_checked_against_T_before_scoring) {
    char text[8192];
    int n = snprintf(text, sizeof text, "{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 0}\n\n{\"context\": \"x\", \"choices\": [\" y\", \"");
    for (int i = 0; i < 40; i++) n += snprintf(text + n, sizeof text - n, " word%d", i);
    snprintf(text + n, sizeof text - n, "\"], \"label\": 1}\n");
    char spec[700], err[1200], where[600];
    snprintf(spec, sizeof spec, "jsonl=%s", write_tmp("check.jsonl", text, strlen(text)));
    Task t;
    CHECK(load(&t, spec, 0, err), "%s", err);
    if (!t.n) return;
    EvalOptions o = {.B = 2, .T = 16, .rank = 0, .world = 1};
    int too_long = -1;
    snprintf(where, sizeof where, "%s/check.jsonl:3: jsonl item: choice 1 is", tmpdir);
    int ok = eval_check_task(tok, &t, &o, &too_long, err, sizeof err);
    CHECK(!ok && strstr(err, where) && strstr(err, "raise --seq"), "want '%s', got ok %d: %s", where, ok, err);
    o.T = 128;
    CHECK(eval_check_task(tok, &t, &o, &too_long, err, sizeof err) && too_long == 0, "T=128: %s", err);
    o.T = 16;
    o.skip_bad = 1;
    CHECK(eval_check_task(tok, &t, &o, &too_long, err, sizeof err) && too_long == 1, "skip: %d too long", too_long);
    o.skip_bad = 0;
    o.world = 2; /* each rank checks its own share: item 1, the long one, is rank 1's */
    CHECK(eval_check_task(tok, &t, &o, &too_long, err, sizeof err), "rank 0 of 2 has only the short item: %s", err);
    o.rank = 1;
    CHECK(!eval_check_task(tok, &t, &o, &too_long, err, sizeof err), "rank 1 of 2 passed the long item");
    task_free(&t);
}

/* symptom 10: NaN logits are not "chance": every item counts as non-finite and wrong, the dump says null */
TEST(a_model_of_nan_scores_nonfinite_not_chance) {
    Task t;
    char err[1200];
    CHECK(load(&t, "hellaswag=test/eval/hellaswag.jsonl", 0, err), "%s", err);
    Fake *f = fake_new(tokenizer_vocab_size(tok), 4, 64);
    f->nan = 1;
    TaskScore sc;
    int ok;
    char *dump = run_dump(f, &t, 4, 64, &sc, &ok, err);
    CHECK(ok && sc.nonfinite == t.n && sc.items == t.n, "ok %d: %d non-finite of %d items (%d)", ok, sc.nonfinite,
          sc.items, t.n);
    CHECK(sc.acc == 0 && sc.acc_norm == 0, "acc %g acc_norm %g: the first choice won the NaN ties", sc.acc,
          sc.acc_norm);
    CHECK(strstr(dump, "\"loglik\":null") && !strstr(dump, "\"greedy\":true"), "dump: %.200s", dump);
    free(dump);
    task_free(&t);
    CHECK(load(&t, "lambada=test/eval/lambada.txt", 0, err), "%s", err);
    dump = run_dump(f, &t, 4, 64, &sc, &ok, err);
    CHECK(ok && sc.nonfinite == t.n && sc.acc == 0 && isnan(sc.ppl), "lambada: %d non-finite, acc %g ppl %g",
          sc.nonfinite, sc.acc, sc.ppl);
    f->nan = 0;
    free(dump);
    dump = run_dump(f, &t, 4, 64, &sc, &ok, err);
    CHECK(ok && sc.nonfinite == 0, "a finite model: %d non-finite", sc.nonfinite);
    free(dump);
    fake_free(f);
    task_free(&t);
}

/* symptom 11: every dump row names the step of the model it scored */
TEST(dump_rows_carry_the_step) {
    Task t;
    char err[1200], path[600];
    CHECK(load(&t, "arc=test/eval/arc.jsonl", 0, err), "%s", err);
    Fake *f = fake_new(tokenizer_vocab_size(tok), 4, 64);
    snprintf(path, sizeof path, "%s/step.jsonl", tmpdir);
    FILE *d = fopen(path, "w");
    EvalOptions o = {.B = 4, .T = 64, .rank = 0, .world = 1, .dump = d, .step = 1234};
    TaskScore sc;
    CHECK(eval_task(&f->base, tok, &t, &o, &sc, err, sizeof err) == EVAL_OK, "%s", err);
    fclose(d);
    char *s = slurp(path);
    int rows = 0, with = 0;
    for (char *p = s; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p)) {
        rows++;
        with += !strncmp(p, "{\"step\":1234,", 13);
    }
    CHECK(rows == 7 && with == rows, "%d of %d rows start with \"step\":1234 (want 7): %.120s", with, rows, s);
    free(s);
    fake_free(f);
    task_free(&t);
}

/* a rank that cannot score its share still takes part in the reduce, so the others fail with it, never wait */
static int reduces;
static void count_hold(double *x, size_t n) { reduces++; hold(x, n); }
TEST(a_rank_that_fails_takes_part_in_the_reduce) {
    char text[8192];
    int n = snprintf(text, sizeof text, "{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 0}\n{\"context\": \"x\", \"choices\": [\"");
    for (int i = 0; i < 40; i++) n += snprintf(text + n, sizeof text - n, " word%d", i);
    snprintf(text + n, sizeof text - n, "\", \" y\"], \"label\": 1}\n");
    char spec[700], err[1200];
    snprintf(spec, sizeof spec, "jsonl=%s", write_tmp("rank.jsonl", text, strlen(text)));
    Task t;
    CHECK(load(&t, spec, 0, err), "%s", err);
    Fake *f = fake_new(tokenizer_vocab_size(tok), 2, 16);
    TaskScore sc;
    reduces = 0;
    int st1 = score(f, &t, 2, 16, 1, 2, count_hold, 0, NULL, &sc, err); /* rank 1: the long item */
    CHECK(st1 == EVAL_FAILED && reduces == 1, "rank 1: status %d, %d reduces", st1, reduces);
    int st0 = score(f, &t, 2, 16, 0, 2, add_held, 0, NULL, &sc, err);
    CHECK(st0 == EVAL_FAILED && strstr(err, "other rank could not score"), "rank 0: status %d: %s", st0, err);
    fake_free(f);
    task_free(&t);
}

/* symptom 17b: the stop flag ends the scoring before the next forward pass */
TEST(a_stop_signal_ends_scoring_between_forward_passes) {
    Task t;
    char err[1200];
    CHECK(load(&t, "hellaswag=test/eval/hellaswag.jsonl", 0, err), "%s", err);
    Fake *f = fake_new(tokenizer_vocab_size(tok), 1, 64);
    volatile sig_atomic_t stop = SIGINT;
    EvalOptions o = {.B = 1, .T = 64, .rank = 0, .world = 1, .stop = &stop};
    TaskScore sc;
    int st = eval_task(&f->base, tok, &t, &o, &sc, err, sizeof err);
    CHECK(st == EVAL_STOPPED && f->forwards == 0, "status %d after %d forwards", st, f->forwards);
    stop = 0;
    st = eval_task(&f->base, tok, &t, &o, &sc, err, sizeof err);
    int rows = 0;
    for (int i = 0; i < t.n; i++) rows += t.items[i].nchoice;
    CHECK(st == EVAL_OK && f->forwards == rows, "unstopped: status %d after %d forwards (want %d)", st, f->forwards,
          rows);
    fake_free(f);
    task_free(&t);
}

int main(int argc, char **argv) {
    if (argc > 1) data_dir = argv[1];
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_eval.XXXXXX");
    if (!mkdtemp(tmpdir)) { printf("FAIL test_eval: cannot make a temp dir\n"); return 1; }
    tok = tokenizer_load("bpe4k", data_dir);
    RUN_TEST(hellaswag_reads_ctx_and_ctx_a_b);
    RUN_TEST(arc_reads_both_layouts_and_answer_keys);
    RUN_TEST(piqa_reads_goal_solutions_and_labels_file);
    RUN_TEST(lambada_splits_the_last_word_text_and_jsonl);
    RUN_TEST(boolq_copa_mmlu_generic_build_their_prompts);
    RUN_TEST(malformed_items_name_file_and_line);
    RUN_TEST(scores_equal_the_reference_at_two_lengths);
    RUN_TEST(two_ranks_score_like_one);
    RUN_TEST(a_continuation_longer_than_T_names_the_item_or_is_skipped);
    RUN_TEST(piqa_labels_file_with_a_blank_line_or_extra_words_is_refused_by_line);
    RUN_TEST(arc_choices_with_the_same_label_are_refused);
    RUN_TEST(a_folder_as_task_file_is_named_as_a_folder);
    RUN_TEST(every_item_is_checked_against_T_before_scoring);
    RUN_TEST(a_model_of_nan_scores_nonfinite_not_chance);
    RUN_TEST(dump_rows_carry_the_step);
    RUN_TEST(a_rank_that_fails_takes_part_in_the_reduce);
    RUN_TEST(a_stop_signal_ends_scoring_between_forward_passes);
    RUN_TEST(out_open_refuses_links_devices_inputs_and_other_outputs);
    RUN_TEST(out_commit_of_a_failed_write_keeps_the_old_file_and_no_temp);
    RUN_TEST(a_temp_not_committed_is_removed_when_the_process_exits);
    RUN_TEST(out_open_append_refuses_a_fifo_without_blocking);
    tokenizer_free(tok);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tmpdir);
    TEST_EXIT();
}
