/*
 * comm/comm_sync.c - placement and checks across ranks built on comm.h's blocking all-gather alone: the GPU a
 * rank takes (comm_gpu_for_rank), the placement lines (comm_print_placement), whether keys differ across ranks
 * (comm_node_keys_distinct) and the ranks-in-sync check of the host and device updates (comm_sync_check). Kept
 * apart from comm.c, which holds the thread, the queue and MPI itself.
 */
#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

int comm_gpu_for_rank(int local_rank, int local_size, int visible) {
    (void)local_size; /* ranks beyond the visible GPUs share them round-robin */
    if (visible <= 1) return 0; /* one visible GPU (CUDA_VISIBLE_DEVICES per task): each rank takes it */
    return local_rank % visible;
}

int comm_node_keys_distinct(const char *key) {
    enum { KEY = 64 };
    char mine[KEY + 8];
    memset(mine, 0, sizeof mine);
    int id = comm_node_id();
    memcpy(mine, &id, sizeof id);
    snprintf(mine + 8, KEY, "%s", key);
    int world = comm_world();
    char *all = xmalloc((size_t)world * sizeof mine, "node keys");
    comm_allgather(mine, all, sizeof mine);
    int distinct = 1;
    for (int a = 0; a < world && distinct; a++)
        for (int b = a + 1; b < world && distinct; b++)
            if (!memcmp(all + (size_t)a * sizeof mine, all + (size_t)b * sizeof mine, sizeof mine)) distinct = 0;
    free(all);
    return distinct;
}

static int noted_gpu = -1; /* comm_note_gpu's device, for the placement lines */
void comm_note_gpu(int device) { noted_gpu = device; }

void comm_print_placement(int threads) {
    enum { LINE = 160 };
    char mine[LINE];
    char gpu[24] = "";
    if (noted_gpu >= 0) snprintf(gpu, sizeof gpu, ", GPU %d", noted_gpu);
    snprintf(mine, sizeof mine, "rank %d on %s: local rank %d of %d, %d thread%s%s", comm_rank(), comm_host(),
             comm_local_rank(), comm_local_size(), threads, threads == 1 ? "" : "s", gpu);
    int world = comm_world();
    char *all = xmalloc((size_t)world * LINE, "placement");
    comm_allgather(mine, all, LINE);
    if (comm_rank() == 0) {
        for (int r = 0; r < world; r++) printf("placement: %s\n", all + (size_t)r * LINE);
        fflush(stdout);
    }
    free(all);
}
int comm_sync_check_enabled(void) {
    const char *e = getenv("SCAPE_CHECK_SYNC");
    return e && strcmp(e, "1") == 0;
}

void comm_sync_check(uint64_t hash, const char *state, const char *same) {
    int world = comm_world();
    uint64_t *all = xmalloc((size_t)world * sizeof(uint64_t), "sync check");
    comm_allgather(&hash, all, sizeof hash);
    for (int r = 1; r < world; r++)
        if (all[r] != all[0])
            fatal("sync check: rank %d's %s hash %016llx differs from rank 0's %016llx; the ranks diverged", r, state,
                  (unsigned long long)all[r], (unsigned long long)all[0]);
    if (comm_rank() == 0)
        printf("sync check: %s identical on %d ranks (hash %016llx)\n", same, world, (unsigned long long)all[0]);
    fflush(stdout);
    free(all);
}
