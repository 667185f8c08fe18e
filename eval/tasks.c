/*
 * eval/tasks.c - readers of the downstream task files (formats and prompts in eval/tasks.h). JSON through
 * jansson; everything else (lines, UTF-8, labels, the prompts) here.
 */
#define _GNU_SOURCE /* vasprintf */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "eval/tasks.h"
#include "common/util.h"

const char *TASK_FORMATS = "hellaswag|arc|piqa|lambada|boolq|copa|mmlu|jsonl";

/* ---------------------------------------------------------------- small helpers */

static char *xstrdup_n(const char *s, size_t n) {
    char *d = xmalloc(n + 1, "a task string");
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}
/* printf into a new string */
static char *strf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) fatal("out of memory building a task string");
    return s;
}
/* One item being built; the reader's error goes into why (returned 0). */
typedef struct {
    const char *path;
    int line;
    char why[512];
} Ctx;
static int bad(Ctx *x, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->why, sizeof x->why, fmt, ap);
    va_end(ap);
    return 0;
}
/* obj[key] as a non-NULL string, or 0 with why */
static int get_str(Ctx *x, json_t *obj, const char *key, const char **out) {
    *out = "";
    json_t *v = json_object_get(obj, key);
    if (!v) return bad(x, "no \"%s\"", key);
    if (!json_is_string(v)) return bad(x, "\"%s\" is not a string", key);
    *out = json_string_value(v);
    return 1;
}
/* an integer label: a JSON integer, or a string of decimal digits */
static int get_index(Ctx *x, json_t *v, const char *key, int *out) {
    if (!v) return bad(x, "no \"%s\"", key);
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < -1000000 || i > 1000000) return bad(x, "\"%s\" %lld is out of range", key, (long long)i);
        *out = (int)i;
        return 1;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        errno = 0;
        long i = strtol(s, &end, 10);
        if (*s && !*end && !errno && i >= -1000000 && i <= 1000000) { *out = (int)i; return 1; }
    }
    return bad(x, "\"%s\" is not an integer", key);
}
/* adds a choice (takes ownership of c); empty choices are refused */
static int add_choice(Ctx *x, TaskItem *it, char *c) {
    if (!c[0] || (c[0] == ' ' && !c[1])) {
        free(c);
        return bad(x, "choice %d is empty", it->nchoice);
    }
    it->choices = xrealloc(it->choices, (size_t)(it->nchoice + 1) * sizeof(char *), "task choices");
    it->choices[it->nchoice++] = c;
    return 1;
}
static void item_free(TaskItem *it) {
    free(it->context);
    for (int i = 0; i < it->nchoice; i++) free(it->choices[i]);
    free(it->choices);
    memset(it, 0, sizeof *it);
}
static int check_label(Ctx *x, TaskItem *it) {
    if (it->label < 0 || it->label >= it->nchoice)
        return bad(x, "label %d is out of range for %d choices (0..%d)", it->label, it->nchoice, it->nchoice - 1);
    return 1;
}

/* ---------------------------------------------------------------- one reader per format */

static int read_hellaswag(Ctx *x, json_t *o, TaskItem *it) {
    const char *ctx;
    if (json_object_get(o, "ctx")) {
        if (!get_str(x, o, "ctx", &ctx)) return 0;
        it->context = xstrdup_n(ctx, strlen(ctx));
    } else { /* the original release without "ctx": ctx_a + " " + ctx_b */
        const char *a, *b;
        if (!get_str(x, o, "ctx_a", &a) || !get_str(x, o, "ctx_b", &b)) return bad(x, "no \"ctx\" (nor \"ctx_a\" and \"ctx_b\")");
        it->context = b[0] ? strf("%s %s", a, b) : strf("%s", a);
    }
    json_t *e = json_object_get(o, "endings");
    if (!json_is_array(e) || json_array_size(e) < 2) return bad(x, "\"endings\" is not an array of at least 2 strings");
    for (size_t i = 0; i < json_array_size(e); i++) {
        json_t *s = json_array_get(e, i);
        if (!json_is_string(s)) return bad(x, "ending %zu is not a string", i);
        if (!add_choice(x, it, strf(" %s", json_string_value(s)))) return 0;
    }
    return get_index(x, json_object_get(o, "label"), "label", &it->label) && check_label(x, it);
}

static int read_arc(Ctx *x, json_t *o, TaskItem *it) {
    json_t *q = json_object_get(o, "question"), *choices, *texts = NULL, *labels = NULL;
    const char *stem;
    if (json_is_object(q)) { /* the ARC release */
        if (!get_str(x, q, "stem", &stem)) return 0;
        choices = json_object_get(q, "choices");
        if (!json_is_array(choices) || json_array_size(choices) < 2) return bad(x, "\"question.choices\" is not an array of at least 2 choices");
    } else { /* {"question": "...", "choices": {"text": [...], "label": [...]}} */
        if (!get_str(x, o, "question", &stem)) return 0;
        choices = json_object_get(o, "choices");
        texts = choices ? json_object_get(choices, "text") : NULL;
        labels = choices ? json_object_get(choices, "label") : NULL;
        if (!json_is_array(texts) || !json_is_array(labels) || json_array_size(texts) != json_array_size(labels) ||
            json_array_size(texts) < 2)
            return bad(x, "\"choices\" needs \"text\" and \"label\" arrays of equal length, at least 2");
    }
    const char *key;
    if (!get_str(x, o, "answerKey", &key)) return 0;
    it->context = strf("Question: %s\nAnswer:", stem);
    it->label = -1;
    size_t n = texts ? json_array_size(texts) : json_array_size(choices);
    for (size_t i = 0; i < n; i++) {
        json_t *t, *l;
        if (texts) { t = json_array_get(texts, i); l = json_array_get(labels, i); }
        else {
            json_t *c = json_array_get(choices, i);
            t = json_object_get(c, "text");
            l = json_object_get(c, "label");
        }
        if (!json_is_string(t) || !json_is_string(l)) return bad(x, "choice %zu needs a string \"text\" and \"label\"", i);
        for (size_t k = 0; k < i; k++) { /* a repeated label would make answerKey name two choices */
            json_t *lk = texts ? json_array_get(labels, k) : json_object_get(json_array_get(choices, k), "label");
            if (!strcmp(json_string_value(lk), json_string_value(l)))
                return bad(x, "choices %zu and %zu both have the label \"%s\"", k, i, json_string_value(l));
        }
        if (!strcmp(json_string_value(l), key)) it->label = (int)i;
        if (!add_choice(x, it, strf(" %s", json_string_value(t)))) return 0;
    }
    if (it->label < 0) return bad(x, "answerKey \"%s\" is none of the choices' labels", key);
    return 1;
}

static int read_piqa(Ctx *x, json_t *o, TaskItem *it) {
    const char *goal, *s1, *s2;
    if (!get_str(x, o, "goal", &goal) || !get_str(x, o, "sol1", &s1) || !get_str(x, o, "sol2", &s2)) return 0;
    it->context = strf("Question: %s\nAnswer:", goal);
    if (!add_choice(x, it, strf(" %s", s1)) || !add_choice(x, it, strf(" %s", s2))) return 0;
    it->label = -2; /* from the labels file */
    return 1;
}

static int read_boolq(Ctx *x, json_t *o, TaskItem *it) {
    const char *passage, *question;
    if (!get_str(x, o, "passage", &passage) || !get_str(x, o, "question", &question)) return 0;
    json_t *l = json_object_get(o, "label");
    if (!l) l = json_object_get(o, "answer");
    if (!l) return bad(x, "no \"label\" (nor \"answer\")");
    if (json_is_boolean(l)) it->label = json_is_true(l);
    else if (!get_index(x, l, "label", &it->label)) return 0;
    it->context = strf("%s\nQuestion: %s?\nAnswer:", passage, question);
    if (!add_choice(x, it, strf(" no")) || !add_choice(x, it, strf(" yes"))) return 0;
    return check_label(x, it);
}

static int read_copa(Ctx *x, json_t *o, TaskItem *it) {
    const char *premise, *c1, *c2, *q;
    if (!get_str(x, o, "premise", &premise) || !get_str(x, o, "choice1", &c1) || !get_str(x, o, "choice2", &c2) ||
        !get_str(x, o, "question", &q))
        return 0;
    const char *conn = !strcmp(q, "cause") ? "because" : !strcmp(q, "effect") ? "therefore" : NULL;
    if (!conn) return bad(x, "\"question\" is \"%s\", not \"cause\" or \"effect\"", q);
    size_t n = strlen(premise);
    while (n && isspace((unsigned char)premise[n - 1])) n--;
    if (n && premise[n - 1] == '.') n--;
    it->context = strf("%.*s %s", (int)n, premise, conn);
    const char *cs[2] = {c1, c2};
    for (int i = 0; i < 2; i++) {
        char *c = strf(" %s", cs[i]);
        c[1] = (char)tolower((unsigned char)c[1]);
        if (!add_choice(x, it, c)) return 0;
    }
    return get_index(x, json_object_get(o, "label"), "label", &it->label) && check_label(x, it);
}

static int read_mmlu(Ctx *x, json_t *o, TaskItem *it) {
    const char *q;
    if (!get_str(x, o, "question", &q)) return 0;
    json_t *c = json_object_get(o, "choices");
    if (!json_is_array(c) || json_array_size(c) != 4) return bad(x, "\"choices\" is not an array of 4 strings");
    const char *s[4];
    for (int i = 0; i < 4; i++) {
        json_t *v = json_array_get(c, (size_t)i);
        if (!json_is_string(v)) return bad(x, "choice %d is not a string", i);
        s[i] = json_string_value(v);
        if (!s[i][0]) return bad(x, "choice %d is empty", i);
    }
    it->context = strf("%s\nA. %s\nB. %s\nC. %s\nD. %s\nAnswer:", q, s[0], s[1], s[2], s[3]);
    for (int i = 0; i < 4; i++) add_choice(x, it, strf(" %c", 'A' + i));
    json_t *a = json_object_get(o, "answer");
    if (json_is_string(a) && strlen(json_string_value(a)) == 1 && json_string_value(a)[0] >= 'A' &&
        json_string_value(a)[0] <= 'Z')
        it->label = json_string_value(a)[0] - 'A';
    else if (!get_index(x, a, "answer", &it->label)) return 0;
    return check_label(x, it);
}

static int read_generic(Ctx *x, json_t *o, TaskItem *it) {
    const char *ctx;
    if (!get_str(x, o, "context", &ctx)) return 0;
    it->context = xstrdup_n(ctx, strlen(ctx));
    json_t *c = json_object_get(o, "choices");
    if (!c) return bad(x, "no \"choices\"");
    if (!json_is_array(c) || json_array_size(c) < 1) return bad(x, "\"choices\" is not a non-empty array of strings");
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *v = json_array_get(c, i);
        if (!json_is_string(v)) return bad(x, "choice %zu is not a string", i);
        if (!add_choice(x, it, xstrdup_n(json_string_value(v), strlen(json_string_value(v))))) return 0;
    }
    return get_index(x, json_object_get(o, "label"), "label", &it->label) && check_label(x, it);
}

/* LAMBADA: the last word of the passage is the target */
static int read_lambada_text(Ctx *x, const char *s, size_t n, TaskItem *it) {
    while (n && isspace((unsigned char)s[n - 1])) n--;
    size_t sp = n;
    while (sp && s[sp - 1] != ' ') sp--;
    if (!sp) return bad(x, "the passage has no space: no context before its last word");
    it->context = xstrdup_n(s, sp - 1);
    if (!add_choice(x, it, strf(" %.*s", (int)(n - sp), s + sp))) return 0;
    it->label = 0;
    return 1;
}

/* ---------------------------------------------------------------- the file */

/* PIQA's labels file: line i holds the label of item i, "0" or "1" and nothing else (spaces around it aside); blank
 * lines only at the end. Returns the labels (-3 for a value other than 0 or 1: that item's fault, skippable), n in
 * *n; or NULL with err naming the file and line when a blank line or extra words would shift or garble the labels
 * of every item after it. */
static int *read_labels(const char *path, const char *text, size_t len, int *n, char *err, size_t cap) {
    int *v = NULL, count = 0, line = 0, blank = 0; /* blank: the first blank line so far */
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *a = p, *b = nl ? nl : end;
        p = nl ? nl + 1 : end;
        line++;
        while (a < b && isspace((unsigned char)*a)) a++;
        while (b > a && isspace((unsigned char)b[-1])) b--;
        if (a == b) { if (!blank) blank = line; continue; }
        const char *why = blank ? "is blank, and every label after it would belong to the item before its own"
                                : NULL;
        const char *w = a;
        while (w < b && !isspace((unsigned char)*w)) w++;
        if (!why && w < b) why = "holds more than one word; the file is not one label per line";
        if (why) {
            snprintf(err, cap, "%s:%d: PIQA labels line %s: want one 0 or 1 per line for each item, nothing else "
                     "(fix the labels file)", path, blank ? blank : line, why);
            free(v);
            return NULL;
        }
        v = xrealloc(v, (size_t)(count + 1) * sizeof(int), "PIQA's labels");
        v[count++] = b - a == 1 && (*a == '0' || *a == '1') ? *a - '0' : -3;
    }
    *n = count;
    return v ? v : xmalloc(sizeof(int), "PIQA's labels");
}

/* The whole of a regular file (a folder, a FIFO or a device is refused without blocking), NUL-terminated. */
static char *read_whole(const char *path, size_t *len, char *err, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0) { snprintf(err, cap, "%s: cannot open the task file (%s)", path, strerror(errno)); return NULL; }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, cap, "%s: is a %s, not a task file; give FORMAT=FILE with the file itself", path,
                 S_ISDIR(st.st_mode) ? "folder" : S_ISFIFO(st.st_mode) ? "FIFO" : "device or special file");
        close(fd);
        return NULL;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) { snprintf(err, cap, "%s: cannot read the task file (%s)", path, strerror(errno)); close(fd); return NULL; }
    char *buf = read_stream(f, len);
    int e = errno;
    fclose(f);
    if (!buf) snprintf(err, cap, "%s: cannot read the task file (%s)", path, strerror(e));
    return buf;
}

int task_load(Task *t, const char *spec, int skip_bad, char *err, size_t cap) {
    memset(t, 0, sizeof *t);
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || !eq[1]) {
        snprintf(err, cap, "--eval-task '%s': want FORMAT=FILE or NAME:FORMAT=FILE (formats %s)", spec, TASK_FORMATS);
        return 0;
    }
    char head[128];
    snprintf(head, sizeof head, "%.*s", (int)(eq - spec), spec);
    const char *colon = strchr(head, ':');
    const char *format = colon ? colon + 1 : head;
    snprintf(t->name, sizeof t->name, "%.*s", colon ? (int)(colon - head) : (int)strlen(head), head);
    /* the format: one of TASK_FORMATS, found as "|format|" in "|" TASK_FORMATS "|" */
    size_t fl = strlen(format);
    char fmtbar[sizeof t->format + 2] = "", all[128];
    snprintf(all, sizeof all, "|%s|", TASK_FORMATS);
    if (fl > 0 && fl < sizeof t->format) {
        fmtbar[0] = '|';
        memcpy(fmtbar + 1, format, fl);
        fmtbar[fl + 1] = '|';
        fmtbar[fl + 2] = 0;
    }
    if (fl == 0 || fl >= sizeof t->format || !strstr(all, fmtbar)) {
        snprintf(err, cap, "--eval-task '%s': unknown format '%s'; one of %s", spec, format, TASK_FORMATS);
        return 0;
    }
    memcpy(t->format, format, fl + 1);
    /* piqa: FILE[:LABELS] */
    char labels_path[1100] = "";
    snprintf(t->path, sizeof t->path, "%s", eq + 1);
    if (!strcmp(format, "piqa")) {
        char *c = strrchr(t->path, ':');
        if (c) { snprintf(labels_path, sizeof labels_path, "%s", c + 1); *c = 0; }
        else {
            size_t n = strlen(t->path);
            if (n > 6 && !strcmp(t->path + n - 6, ".jsonl"))
                snprintf(labels_path, sizeof labels_path, "%.*s-labels.lst", (int)(n - 6), t->path);
            else snprintf(labels_path, sizeof labels_path, "%s-labels.lst", t->path);
        }
    }
    t->kind = !strcmp(format, "lambada") ? TASK_LASTWORD : TASK_CHOICE;
    size_t len;
    char *text = read_whole(t->path, &len, err, cap);
    if (!text) return 0;
    int *labels = NULL, nlabels = 0, lline = 0; /* piqa: the labels file, one per item in order */
    snprintf(t->labels, sizeof t->labels, "%s", labels_path);
    if (labels_path[0]) {
        size_t llen;
        char *ltext = read_whole(labels_path, &llen, err, cap);
        if (ltext) labels = read_labels(labels_path, ltext, llen, &nlabels, err, cap);
        free(ltext);
        if (!labels) {
            size_t k = strlen(err);
            if (!ltext) snprintf(err + k, cap - k, " (PIQA's labels: give them as piqa=FILE:LABELS)");
            free(text);
            return 0;
        }
    }
    int ok = 1, cap_items = 0;
    Ctx x = {t->path, 0, ""};
    char *p = text, *end = text + len;
    while (p < end && ok) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        x.line++;
        size_t n = (size_t)(le - p);
        if (n && p[n - 1] == '\r') n--;
        const char *line = p;
        p = nl ? nl + 1 : end;
        size_t k = 0;
        while (k < n && isspace((unsigned char)line[k])) k++;
        if (k == n) continue; /* a blank line is no item */
        TaskItem it = {0};
        it.line = x.line;
        int good, label_line = -1; /* piqa: this item's label, read first so a skipped item keeps them aligned */
        if (labels) {
            lline++;
            label_line = lline > nlabels ? -2 : labels[lline - 1];
        }
        if (!utf8_valid_n(line, n)) good = bad(&x, "invalid UTF-8");
        else if (!strcmp(format, "lambada") && line[k] != '{') good = read_lambada_text(&x, line, n, &it);
        else {
            json_error_t je;
            json_t *o = json_loadb(line, n, JSON_REJECT_DUPLICATES, &je);
            if (!o || !json_is_object(o)) good = bad(&x, "not a JSON object (%s)", o ? "another JSON value" : je.text);
            else if (!strcmp(format, "hellaswag")) good = read_hellaswag(&x, o, &it);
            else if (!strcmp(format, "arc")) good = read_arc(&x, o, &it);
            else if (!strcmp(format, "piqa")) good = read_piqa(&x, o, &it);
            else if (!strcmp(format, "boolq")) good = read_boolq(&x, o, &it);
            else if (!strcmp(format, "copa")) good = read_copa(&x, o, &it);
            else if (!strcmp(format, "mmlu")) good = read_mmlu(&x, o, &it);
            else if (!strcmp(format, "lambada")) {
                const char *s;
                good = get_str(&x, o, "text", &s) && read_lambada_text(&x, s, strlen(s), &it);
            } else good = read_generic(&x, o, &it);
            json_decref(o);
        }
        if (good && it.label == -2) { /* piqa */
            if (label_line == -2) good = bad(&x, "the labels file %s has no line %d", labels_path, lline);
            else if (label_line == -3) good = bad(&x, "its label, %s:%d, is not 0 or 1 (want 0 or 1)", labels_path, lline);
            else { it.label = label_line; good = check_label(&x, &it); }
        }
        if (good) {
            if (t->n == cap_items) {
                cap_items = cap_items ? 2 * cap_items : 256;
                t->items = xrealloc(t->items, (size_t)cap_items * sizeof(TaskItem), "task items");
            }
            t->items[t->n++] = it;
        } else {
            item_free(&it);
            if (skip_bad) t->skipped++;
            else {
                snprintf(err, cap, "%s:%d: %s item: %s; fix the item, or pass --eval-task-skip-bad to skip bad items "
                         "(they are counted)", t->path, x.line, format, x.why);
                ok = 0;
            }
        }
    }
    if (ok && labels && nlabels > lline) {
        snprintf(err, cap, "%s: more labels than items in %s (%d labels, %d items); the two files do not belong together",
                 labels_path, t->path, nlabels, lline);
        ok = 0;
    }
    if (ok && t->n == 0) {
        snprintf(err, cap, "%s: no %s item%s", t->path, format, t->skipped ? " that could be read (all skipped)" : "");
        ok = 0;
    }
    free(text);
    free(labels);
    if (!ok) task_free(t);
    return ok;
}

void task_free(Task *t) {
    for (int i = 0; i < t->n; i++) item_free(&t->items[i]);
    free(t->items);
    t->items = NULL;
    t->n = 0;
}
