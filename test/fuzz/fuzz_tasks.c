/*
 * test/fuzz/fuzz_tasks.c - the downstream task readers (eval/tasks.c, task_load): the first input byte picks the
 * format (hellaswag, arc, piqa, lambada, boolq, copa, mmlu, jsonl), the rest is the task file; PIQA's labels file
 * is "0\n1\n" repeated. Oracle (eval/tasks.h's promises): a load either succeeds with at least one item, each with
 * a non-empty context string, at least one non-empty choice and its label in range, or fails with one line in err
 * that names the file; a failed load leaves no items.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/tasks.h"
#include "test/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *formats[] = {"hellaswag", "arc", "piqa", "lambada", "boolq", "copa", "mmlu", "jsonl"};
    if (size < 1) return 0;
    const char *format = formats[data[0] % 8];
    const char *path = fuzz_write_file(0, "task.jsonl", data + 1, size - 1);
    static const uint8_t labels[] = "0\n1\n0\n1\n1\n0\n0\n1\n";
    const char *lpath = fuzz_write_file(1, "labels.lst", labels, sizeof labels - 1);
    char spec[2200], err[1200];
    if (!strcmp(format, "piqa")) snprintf(spec, sizeof spec, "piqa=%s:%s", path, lpath);
    else snprintf(spec, sizeof spec, "%s=%s", format, path);
    for (int skip = 0; skip <= 1; skip++) {
        FUZZ_RUN({
            Task t;
            err[0] = 0;
            if (task_load(&t, spec, skip, err, sizeof err)) {
                if (t.n < 1) abort();
                for (int i = 0; i < t.n; i++) {
                    const TaskItem *it = &t.items[i];
                    if (!it->context || it->nchoice < 1 || it->label < 0 || it->label >= it->nchoice) abort();
                    for (int j = 0; j < it->nchoice; j++)
                        if (!it->choices[j] || !it->choices[j][0]) abort();
                }
                task_free(&t);
            } else if (t.n != 0 || t.items || !err[0] || strchr(err, '\n') || !strstr(err, path)) {
                abort();
            }
        });
    }
    return 0;
}
