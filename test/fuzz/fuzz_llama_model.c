/*
 * test/fuzz/fuzz_llama_model.c - the Llama model-file reader (llama_load in train_llama.c): the fuzz input is the
 * whole file. train_llama.c is included with TESTING defined, as test/test_llama.c does, so the static reader is
 * reachable unchanged.
 * Oracle: an accepted file is exactly the 1024-byte header plus 4 bytes per parameter, and a corrupt header must
 * be refused before the model is allocated (the replay caps one allocation at 1 GB, so a 1 KB file that makes the
 * reader ask for gigabytes is a finding).
 */
#define TESTING
#include "train_llama.c"

#include "test/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file(0, "llama.bin", data, size);
    FUZZ_RUN({
        Model *m = llama_load(path, 1, 1);
        if (1024 + m->table.total * sizeof(float) != size) abort();
        m->free(m);
    });
    return 0;
}
