/*
 * eval/tasks.h - downstream task files, read into one shape: items of a context and candidate continuations, the
 * way evaluation harnesses score language models (the log-likelihood of each continuation given the context).
 *
 * Formats (the published files, one item per line unless said):
 *   hellaswag  JSONL: {"ctx", "endings": [4 strings], "label"} (llm.c's file and the original release; the
 *              original's "ctx_a"/"ctx_b" are used when "ctx" is missing). context = ctx, choice i = " " + ending i.
 *   arc        JSONL: {"question": {"stem", "choices": [{"text", "label"}]}, "answerKey"} (the ARC release), or
 *              {"question", "choices": {"text": [...], "label": [...]}, "answerKey"}. context = "Question: " + stem
 *              + "\nAnswer:", choice = " " + text; answerKey is one of the choices' labels (A-E or 1-5).
 *   piqa       JSONL {"goal", "sol1", "sol2"} plus the labels file (one 0/1 per line and nothing else, line i for
 *              item i, blank lines only at its end; given as FILE:LABELS, or FILE's name with "-labels.lst" in
 *              place of ".jsonl"). context = "Question: " + goal + "\nAnswer:".
 *   lambada    plain text, one passage per line (or JSONL {"text"}); the target is the last word: context = the
 *              text before the last space, continuation = " " + last word. Scored as a last-word task.
 *   boolq      JSONL {"passage", "question", "label" (or "answer"): bool or 0/1}. context = passage +
 *              "\nQuestion: " + question + "?\nAnswer:", choices " no", " yes".
 *   copa       JSONL {"premise", "choice1", "choice2", "question": "cause"|"effect", "label"}. context = premise
 *              without its final period + " because" / " therefore", choice = " " + choice with its first letter
 *              lower-cased.
 *   mmlu       JSONL {"question", "choices": [4 strings], "answer": 0-3 or "A"-"D"}. context = question +
 *              "\nA. c0\nB. c1\nC. c2\nD. c3\nAnswer:", choices " A", " B", " C", " D".
 *   jsonl      the generic form for anything else: {"context", "choices": [strings], "label"}, strings used as
 *              they are (the leading space of a choice is the user's to give).
 * Every string must be valid UTF-8; every choice non-empty; the label in range; ARC's choice labels distinct. A task
 * file (or labels file) must be a regular file: a folder, FIFO or device is refused by name. A bad item is an error naming the
 * file, the line and what is wrong, unless the caller asks to skip bad items, which are then counted (Task.skipped).
 * Not for: scoring (eval/evaluate.h), downloading (the data sets are the user's files).
 */
#ifndef EVAL_TASKS_H
#define EVAL_TASKS_H

#include <stddef.h>

typedef enum { TASK_CHOICE, TASK_LASTWORD } TaskKind;

typedef struct {
    char *context;  /* text before the continuation (may be empty) */
    char **choices; /* nchoice continuations, each non-empty */
    int nchoice;    /* 1 for a last-word task */
    int label;      /* index of the correct continuation */
    int line;       /* 1-based line of the item in its file */
} TaskItem;

typedef struct {
    char name[64];    /* the format name, or what the user called it */
    char format[16];  /* one of the formats above */
    char path[1024];
    char labels[1100]; /* piqa: the labels file read beside path; "" for the other formats */
    TaskKind kind;
    TaskItem *items;
    int n;            /* items read */
    int skipped;      /* bad items skipped (skip_bad only) */
} Task;

/* The formats task_load reads, '|'-separated (for --help and error messages). */
extern const char *TASK_FORMATS;

/* Reads a task file. spec is "FORMAT=FILE" (piqa: "piqa=FILE[:LABELS]"); "NAME:FORMAT=FILE" names it. Returns 1,
 * or 0 with one line in err (cap bytes) naming the file and line, what is wrong and the fix, and t left empty.
 * With skip_bad, bad items are counted in t->skipped instead (a file that cannot be read, or with no good item,
 * still fails). */
int task_load(Task *t, const char *spec, int skip_bad, char *err, size_t cap);
void task_free(Task *t);

#endif
