/*
 * test/fuzz/fuzz_model.c - the GPT-2 model-file reader (gpt2_load in train_gpt.c, llm.c's layout): the fuzz
 * input is the whole file. train_gpt.c is included with TESTING defined (as test/test_gpt2.c does), so its
 * static reader is reachable without changing it.
 * Oracle: an accepted file has exactly 1024 + (params x 4 or x 2) bytes. A corrupt header must be refused before
 * the model is allocated: libFuzzer's -malloc_limit_mb turns a header that makes the reader allocate gigabytes
 * for a 1 KB file into a finding.
 */
#define TESTING
#include "train_gpt.c"

#include "test/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file(0, "model.bin", data, size);
    FUZZ_RUN({
        Model *m = gpt2_load(path, 1, 1);
        int32_t version;
        memcpy(&version, data + 4, 4); /* accepted, so at least the 1024-byte header is there */
        size_t elem = version == GPT2_VERSION_FP32 ? 4 : 2;
        if (1024 + m->table.total * elem != size) abort();
        gpt2_free(m);
    });
    return 0;
}
