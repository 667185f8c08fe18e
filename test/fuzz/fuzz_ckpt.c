/*
 * test/fuzz/fuzz_ckpt.c - the checkpoint readers (trainer/ckpt.c): the manifest check (ckpt_is_complete) and the
 * per-rank training-state file (ckpt_read_state). Input: manifest.json text, "\n%%\n", the state_rank0.bin
 * bytes; both are written into one directory, which is then checked as a checkpoint directory.
 * Oracles: a complete checkpoint has world >= 1 and step >= 0; a verified one (checksums) is complete; parsed options
 * are NUL-terminated and at most CKPT_MAX_OPTIONS; an accepted state file has exactly header + blob_bytes bytes, a
 * NUL-terminated model_id, and the blob hash it claims.
 */
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "trainer/ckpt.h"
#include "test/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *rest;
    size_t rest_n;
    size_t first = fuzz_split(data, size, &rest, &rest_n);
    fuzz_write_file(0, "manifest.json", data, first);
    const char *state = fuzz_write_file(1, "state_rank0.bin", rest, rest_n);
    const char *dir = fuzz_tmpdir();
    FUZZ_RUN({
        int step = -1, world = -1;
        char why[256];
        if (ckpt_is_complete(dir, &step, &world, why, sizeof why)) {
            if (world < 1 || step < 0) abort(); /* a "complete" checkpoint the loop cannot use */
        } else if (!memchr(why, '\0', sizeof why) || why[0] == '\0') {
            abort(); /* incomplete must say why */
        }
    });
    FUZZ_RUN({
        /* the checksummed check and the options parser read the same manifest: a verified checkpoint is complete,
         * and parsed options are NUL-terminated names with values */
        CkptInfo info;
        char why[256];
        int step = -1, world = -1;
        if (ckpt_verify(dir, &info, why, sizeof why) && !ckpt_is_complete(dir, &step, &world, why, sizeof why))
            abort();
        CkptOptions o;
        if (ckpt_read_options(dir, &o)) {
            if (o.n < 0 || o.n > CKPT_MAX_OPTIONS) abort();
            for (int i = 0; i < o.n; i++)
                if (!memchr(o.names[i], '\0', sizeof o.names[i]) || !o.values[i]) abort();
            if (!memchr(o.init_hash, '\0', sizeof o.init_hash)) abort();
            ckpt_options_free(&o);
        }
    });
    FUZZ_RUN({
        CkptState h;
        void *blob = ckpt_read_state(state, &h);
        if (sizeof h + h.blob_bytes != rest_n) abort();
        if (!memchr(h.model_id, '\0', sizeof h.model_id)) abort();
        if (hash_fnv1a64(HASH_FNV1A64_OFFSET, blob, h.blob_bytes) != h.blob_fnv) abort();
        free(blob);
    });
    return 0;
}
