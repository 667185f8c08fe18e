/*
 * test/fuzz/fuzz_jsonl.c - the JSON-lines reader of the shard tool (jsonl_text in tokenizer/tok_jsonl.c, which pulls
 * one string field out of one line): the fuzz input is one line. Fields tried: "text" (the default) and "" (empty
 * key). Oracle: the decoded text is never longer than the line (every escape shrinks or keeps its length).
 */
#include <stdlib.h>
#include <string.h>

#include "test/fuzz/fuzz.h"
#include "tokenizer/tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one_field(const uint8_t *data, size_t size, const char *path, const char *field) {
    FUZZ_RUN({
        char *line = malloc(size + 1); /* the shard tool reads a line into a NUL-terminated buffer */
        memcpy(line, data, size);
        line[size] = '\0';
        Doc d = {.path = (char *)path, .line = 1, .off = 0, .len = size, .name = NULL, .is_val = 0};
        size_t len = (size_t)-1;
        char *text = jsonl_text(&d, line, field, &len);
        if (len > size) abort(); /* decoded JSON is never longer than its source */
        free(text);
        free(line);
    });
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the path only appears in error lines, which must name the input */
    const char *path = fuzz_write_file(0, "input.jsonl", data, size);
    one_field(data, size, path, "text");
    one_field(data, size, path, "");
    return 0;
}
