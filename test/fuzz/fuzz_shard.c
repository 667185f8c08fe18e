/*
 * test/fuzz/fuzz_shard.c - the token-shard readers (dataloader/shard.c): the fuzz input is the whole file.
 * shard_check_header must accept it or refuse it with one error line; when it accepts, shard_read_all must
 * return exactly the count the header promised, and with a vocabulary bound every id returned must be below it.
 */
#include <stdlib.h>
#include <string.h>

#include "dataloader/dataloader.h"
#include "test/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file(0, "shard.bin", data, size);
    /* the last byte picks the vocabulary bound, so both the checked and unchecked reads are reached */
    int vocab = size && (data[size - 1] & 1) ? 50257 : 0;
    FUZZ_RUN({
        int tb = 0;
        int64_t n = shard_check_header(path, &tb);
        if (tb != 2 && tb != 4) abort();
        if ((size_t)n * (size_t)tb + 1024 != size) abort(); /* accepted a length that does not match */
        int64_t got = -1;
        int32_t *tokens = shard_read_all(path, &got, vocab);
        if (got != n) abort();
        for (int64_t i = 0; i < got; i++)
            if (tokens[i] < 0 || (vocab && tokens[i] >= vocab)) abort();
        free(tokens);
    });
    return 0;
}
