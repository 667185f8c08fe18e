/*
 * test/fuzz/fuzz_loader.c - the training and validation loaders over one fuzzed shard, and the restore of a
 * loader position read from a checkpoint (dataloader_set_pos). Input layout:
 *   byte 0: B-1 (low 2 bits) and world-1 (bits 2-3);  byte 1: T-1 (low 4 bits), shuffle (bit 4), rank pick;
 *   bytes 2..57: a DataPos as a checkpoint would hold it (its raw bytes);  the rest: the shard file.
 * Every batch must hold ids that exist in the shard's token range, and inputs/targets must overlap by one.
 */
#include <stdlib.h>
#include <string.h>

#include "dataloader/dataloader.h"
#include "test/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PARAM_BYTES (2 + sizeof(DataPos))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < PARAM_BYTES) return 0;
    int B = 1 + (data[0] & 3), world = 1 + ((data[0] >> 2) & 3);
    int T = 1 + (data[1] & 15), shuffle = (data[1] >> 4) & 1;
    int rank = (data[1] >> 5) % world;
    DataPos pos;
    memcpy(&pos, data + 2, sizeof pos);
    const char *path = fuzz_write_file(0, "loader.bin", data + PARAM_BYTES, size - PARAM_BYTES);
    int *inputs = malloc((size_t)B * T * sizeof(int)), *targets = malloc((size_t)B * T * sizeof(int));
    FUZZ_RUN({
        DataLoader *dl = dataloader_open(path, B, T, rank, world, 1234, shuffle, 0);
        for (int i = 0; i < 5; i++) {
            dataloader_next(dl, inputs, targets);
            for (int j = 0; j + 1 < B * T; j++)
                if (j % T != T - 1 && inputs[j + 1] != targets[j]) abort(); /* windows are contiguous */
        }
        DataPos saved;
        dataloader_get_pos(dl, &saved);
        dataloader_set_pos(dl, &saved); /* a position the loader itself wrote must always restore */
        dataloader_next(dl, inputs, targets);
        dataloader_free(dl);
    });
    FUZZ_RUN({
        DataLoader *dl = dataloader_open(path, B, T, rank, world, 1234, shuffle, 0);
        dataloader_set_pos(dl, &pos); /* an arbitrary (corrupt) saved position: restore or refuse */
        for (int i = 0; i < 3; i++) dataloader_next(dl, inputs, targets);
        dataloader_free(dl);
    });
    FUZZ_RUN({
        ValLoader *vl = valloader_open(path, B, T, rank, world, 50257);
        valloader_set_max_batches(vl, 4);
        while (valloader_next(vl, inputs, targets)) {}
        valloader_free(vl);
    });
    free(inputs);
    free(targets);
    return 0;
}
