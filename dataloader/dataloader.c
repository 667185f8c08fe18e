/*
 * dataloader/dataloader.c - the training loader (distributed, shuffled per epoch, resumable) and the
 * validation loader (sequential, rank-strided) over token shards. Semantics are fixed in dataloader.h.
 * Not for: the file format itself (shard.c), tokenizing text, or choosing B and T.
 *
 * Memory: the shards stay on disk; each batch is one pread of B*T+1 tokens from a file descriptor kept open for
 * the loader's lifetime (one fd per shard), and the next batch's window is handed to the kernel's readahead
 * (posix_fadvise WILLNEED) so its disk read overlaps the training step; no thread is needed for that. With shuffling on, the epoch's order is a global permutation of all
 * W windows held as W uint64 (8 bytes per window: 1 GB of tokens at B*T = 1024 uses 8 MB), rebuilt at every
 * epoch from rng_mix(seed, epoch). Without shuffling no permutation is stored.
 */
#define _FILE_OFFSET_BITS 64
#include "dataloader/dataloader.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/rng.h"
#include "common/util.h"

#define HEADER_BYTES ((int64_t)SHARD_HEADER_INTS * 4)

/* ---------------------------------------------------------------------------------------------------------- */
/* the set of shards both loaders read windows from */

typedef struct {
    char **paths;
    int num_shards;
    int *fds;            /* (num_shards) open for the loader's lifetime */
    uint64_t *cum;       /* (num_shards + 1) windows before shard s; cum[num_shards] = W */
    int64_t BT;          /* B*T: a window is BT + 1 tokens, windows start every BT tokens */
    int token_bytes;     /* 2 or 4, the same for every shard */
    int vocab_size;      /* > 0: check every id */
    unsigned char *raw;  /* (BT + 1) * token_bytes, the bytes of one window */
} ShardSet;

static void shardset_open(ShardSet *s, const char *spec, int B, int T, int vocab_size) {
    if (B <= 0 || T <= 0) fatal("data loader: B=%d and T=%d must be positive; check --batch and --seq-len", B, T);
    memset(s, 0, sizeof *s);
    s->BT = (int64_t)B * T;
    s->vocab_size = vocab_size;
    s->paths = shard_list(spec, &s->num_shards);
    s->fds = xmalloc((size_t)s->num_shards * sizeof(int), "shard fds");
    s->cum = xmalloc(((size_t)s->num_shards + 1) * sizeof(uint64_t), "shard window table");
    s->cum[0] = 0;
    for (int i = 0; i < s->num_shards; i++) {
        int tb;
        int64_t n = shard_check_header(s->paths[i], &tb);
        if (i == 0) s->token_bytes = tb;
        else if (tb != s->token_bytes)
            fatal("%s: holds %d-byte tokens but %s holds %d-byte tokens; all shards of one data set must come from "
                  "the same tokenizer",
                  s->paths[i], tb, s->paths[0], s->token_bytes);
        /* a window needs BT + 1 tokens; windows start every BT tokens */
        uint64_t windows = n > 0 ? (uint64_t)(n - 1) / (uint64_t)s->BT : 0;
        s->cum[i + 1] = s->cum[i] + windows;
        s->fds[i] = open(s->paths[i], O_RDONLY);
        if (s->fds[i] < 0) {
            int err = errno;
            fatal("cannot open token shard %s: %s; check the path and the open-file limit (ulimit -n)",
                  s->paths[i], strerror(err));
        }
    }
    s->raw = xmalloc((size_t)(s->BT + 1) * (size_t)s->token_bytes, "window buffer");
}

static uint64_t shardset_windows(const ShardSet *s) { return s->cum[s->num_shards]; }

/* Fails unless the data hold at least one window per rank: one step needs `world` windows. */
static void shardset_require(const ShardSet *s, const char *spec, int world) {
    uint64_t W = shardset_windows(s);
    if (W < (uint64_t)world)
        fatal("%s: the data hold %llu windows of B*T+1 = %lld tokens, fewer than the %d rank(s) need for one step; "
              "use more data or a smaller batch/sequence length",
              spec, (unsigned long long)W, (long long)(s->BT + 1), world);
}

/* Where global window g (0 <= g < W) lies: its shard, its first token in that shard, its byte offset. */
static int shardset_locate(const ShardSet *s, uint64_t g, int64_t *first, off_t *offset) {
    /* binary search: the shard i with cum[i] <= g < cum[i+1] */
    int lo = 0, hi = s->num_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->cum[mid] <= g) lo = mid;
        else hi = mid - 1;
    }
    *first = (int64_t)(g - s->cum[lo]) * s->BT;
    *offset = (off_t)(HEADER_BYTES + *first * s->token_bytes);
    return lo;
}

/* Asks the kernel to start reading window g into the page cache now (asynchronous readahead), so the next
 * batch's pread finds it there; shuffled windows defeat the kernel's own sequential readahead. */
static void shardset_prefetch(const ShardSet *s, uint64_t g) {
    int64_t first;
    off_t offset;
    int shard = shardset_locate(s, g, &first, &offset);
    posix_fadvise(s->fds[shard], offset, (off_t)((s->BT + 1) * s->token_bytes), POSIX_FADV_WILLNEED);
}

/* Reads global window g (0 <= g < W) into inputs (B,T) and targets (B,T), targets = inputs shifted by one. */
static void shardset_read(ShardSet *s, uint64_t g, int *inputs, int *targets) {
    int64_t first; /* token index of the window in its shard */
    off_t offset;
    int shard = shardset_locate(s, g, &first, &offset);
    int tb = s->token_bytes;
    size_t bytes = (size_t)(s->BT + 1) * (size_t)tb;
    size_t got = 0;
    while (got < bytes) {
        ssize_t r = pread(s->fds[shard], s->raw + got, bytes - got, offset + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            fatal("%s: read of tokens %lld..%lld failed (%s); was the shard changed or truncated during training?",
                  s->paths[shard], (long long)first, (long long)(first + s->BT),
                  r < 0 ? strerror(errno) : "end of file");
        got += (size_t)r;
    }
    for (int64_t i = 0; i <= s->BT; i++) {
        const unsigned char *p = s->raw + i * tb;
        uint32_t v = tb == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8
                             : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        if (v > INT32_MAX)
            fatal("%s: token id %u at token offset %lld does not fit an int32 token id; the shard is corrupt, "
                  "re-create it", s->paths[shard], v, (long long)(first + i));
        if (s->vocab_size > 0 && v >= (uint32_t)s->vocab_size)
            fatal("%s: token id %u at token offset %lld is >= the model's vocab_size %d; the data were tokenized for "
                  "a different vocabulary (re-tokenize, or pick the matching model)",
                  s->paths[shard], v, (long long)(first + i), s->vocab_size);
        if (i < s->BT) inputs[i] = (int)v;
        if (i > 0) targets[i - 1] = (int)v;
    }
}

static void shardset_close(ShardSet *s) {
    for (int i = 0; i < s->num_shards; i++) close(s->fds[i]);
    shard_list_free(s->paths, s->num_shards);
    free(s->fds);
    free(s->cum);
    free(s->raw);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* training loader */

struct DataLoader {
    ShardSet set;
    int rank, world, shuffle;
    uint64_t W;        /* windows over all shards */
    uint64_t seed;
    uint64_t epoch;    /* epochs completed */
    uint64_t start;    /* order position where this epoch's reading began (0 but after a world-size change) */
    uint64_t index;    /* windows this rank read in this epoch */
    uint64_t count;    /* windows this rank reads in this epoch: floor((W - start) / world) */
    uint64_t *perm;    /* (W) this epoch's order when shuffling, else NULL (identity) */
};

/* Puts the loader at the beginning (plus `start`) of epoch `epoch`; builds that epoch's order. */
static void begin_epoch(DataLoader *dl, uint64_t epoch, uint64_t start) {
    dl->epoch = epoch;
    dl->start = start;
    dl->index = 0;
    dl->count = start <= dl->W ? (dl->W - start) / (uint64_t)dl->world : 0;
    if (dl->shuffle) {
        for (uint64_t i = 0; i < dl->W; i++) dl->perm[i] = i;
        Rng r;
        rng_seed(&r, rng_mix(dl->seed, epoch));
        rng_shuffle_u64(&r, dl->perm, (size_t)dl->W);
    }
}

/* The global window the loader reads next (index < count). */
static uint64_t current_window(const DataLoader *dl) {
    uint64_t p = dl->start + (uint64_t)dl->rank + (uint64_t)dl->world * dl->index;
    return dl->perm ? dl->perm[p] : p;
}

DataLoader *dataloader_open(const char *spec, int B, int T, int rank, int world, uint64_t seed, int shuffle,
                            int vocab_size) {
    if (world < 1 || rank < 0 || rank >= world)
        fatal("data loader: rank %d of world %d is not valid; the rank must be in [0, world)", rank, world);
    DataLoader *dl = xcalloc(1, sizeof *dl, "data loader");
    shardset_open(&dl->set, spec, B, T, vocab_size);
    shardset_require(&dl->set, spec, world);
    dl->rank = rank;
    dl->world = world;
    dl->shuffle = shuffle != 0;
    dl->seed = seed;
    dl->W = shardset_windows(&dl->set);
    if (dl->shuffle) {
        if (dl->W > SIZE_MAX / sizeof(uint64_t)) fatal("%s: too many windows to shuffle in memory", spec);
        dl->perm = xmalloc((size_t)dl->W * sizeof(uint64_t), "shuffle order");
    }
    begin_epoch(dl, 0, 0);
    return dl;
}

void dataloader_next(DataLoader *dl, int *inputs, int *targets) {
    /* count is 0 only right after a world-size change that left fewer than world windows in the epoch */
    while (dl->index >= dl->count) begin_epoch(dl, dl->epoch + 1, 0);
    shardset_read(&dl->set, current_window(dl), inputs, targets);
    dl->index++;
    /* advance eagerly so the position's epoch counts completed epochs */
    if (dl->index >= dl->count) begin_epoch(dl, dl->epoch + 1, 0);
    if (dl->index < dl->count) shardset_prefetch(&dl->set, current_window(dl));
}

uint64_t dataloader_num_windows(const DataLoader *dl) { return dl->W; }
uint64_t dataloader_windows_per_epoch(const DataLoader *dl) { return dl->W / (uint64_t)dl->world; }
int dataloader_token_bytes(const DataLoader *dl) { return dl->set.token_bytes; }

void dataloader_get_pos(const DataLoader *dl, DataPos *pos) {
    memset(pos, 0, sizeof *pos);
    pos->epoch = dl->epoch;
    pos->index = dl->index;
    pos->seed = dl->seed;
    pos->num_windows = dl->W;
    pos->rank = dl->rank;
    pos->world = dl->world;
    pos->start = dl->start;
}

void dataloader_set_pos(DataLoader *dl, const DataPos *pos) {
    if (pos->num_windows != dl->W)
        fatal("data position was saved over %llu windows but the data now hold %llu; resume with the same data "
              "set, batch size and sequence length",
              (unsigned long long)pos->num_windows, (unsigned long long)dl->W);
    if (pos->world < 1 || pos->start > dl->W || pos->index > (dl->W - pos->start) / (uint64_t)pos->world)
        fatal("data position (epoch %llu, index %llu, start %llu, world %d) is out of range for %llu windows; the "
              "checkpoint is corrupt",
              (unsigned long long)pos->epoch, (unsigned long long)pos->index, (unsigned long long)pos->start,
              (int)pos->world, (unsigned long long)dl->W);
    dl->seed = pos->seed;
    if (pos->world == dl->world) {
        begin_epoch(dl, pos->epoch, pos->start);
        dl->index = pos->index;
    } else {
        begin_epoch(dl, pos->epoch, pos->start + pos->index * (uint64_t)pos->world);
    }
    if (dl->index >= dl->count) begin_epoch(dl, dl->epoch + 1, 0);
}

void dataloader_free(DataLoader *dl) {
    if (!dl) return;
    shardset_close(&dl->set);
    free(dl->perm);
    free(dl);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* validation loader */

struct ValLoader {
    ShardSet set;
    int rank, world;
    uint64_t W;
    uint64_t max_batches; /* 0 = all */
    uint64_t index;       /* batches read in this pass */
};

ValLoader *valloader_open(const char *spec, int B, int T, int rank, int world, int vocab_size) {
    if (world < 1 || rank < 0 || rank >= world)
        fatal("validation loader: rank %d of world %d is not valid; the rank must be in [0, world)", rank, world);
    ValLoader *vl = xcalloc(1, sizeof *vl, "validation loader");
    shardset_open(&vl->set, spec, B, T, vocab_size);
    shardset_require(&vl->set, spec, world);
    vl->rank = rank;
    vl->world = world;
    vl->W = shardset_windows(&vl->set);
    return vl;
}

void valloader_set_max_batches(ValLoader *vl, uint64_t max_batches) { vl->max_batches = max_batches; }

uint64_t valloader_num_batches(const ValLoader *vl) {
    /* every rank reads the same count so their losses can be averaged step by step */
    uint64_t n = vl->W / (uint64_t)vl->world;
    return vl->max_batches && vl->max_batches < n ? vl->max_batches : n;
}

int valloader_next(ValLoader *vl, int *inputs, int *targets) {
    if (vl->index >= valloader_num_batches(vl)) return 0;
    shardset_read(&vl->set, (uint64_t)vl->rank + (uint64_t)vl->world * vl->index, inputs, targets);
    vl->index++;
    if (vl->index < valloader_num_batches(vl))
        shardset_prefetch(&vl->set, (uint64_t)vl->rank + (uint64_t)vl->world * vl->index);
    return 1;
}

void valloader_reset(ValLoader *vl) { vl->index = 0; }

void valloader_free(ValLoader *vl) {
    if (!vl) return;
    shardset_close(&vl->set);
    free(vl);
}
