/*
 * test/test_dataloader.c - specification tests of the token-shard format and the loaders (dataloader/).
 * Shards are small files written into a temp directory under build/; every token of a test data set is a
 * distinct value (a global counter), so each batch tells exactly which window it came from.
 * Rejection cases run the failing call in a forked child and check its exit status and its one-line stderr.
 */
#define _FILE_OFFSET_BITS 64
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "dataloader/dataloader.h"
#include "test/test.h"

static char tmpdir[256];

/* path of `name` inside the test's temp directory (static buffer rotation for a few live paths) */
static const char *tpath(const char *name) {
    static char bufs[8][512];
    static int k = 0;
    char *b = bufs[k++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", tmpdir, name);
    return b;
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* A data set of several shards in directory `sub`; token values are a global counter starting at 1, so the
 * first input token of a batch identifies its window. Returns W; win_of[v] = global window index whose first
 * token is v, or -1. */
typedef struct {
    char dir[512];
    int num_shards;
    int64_t total;    /* tokens over all shards */
    uint64_t W;
    int64_t *win_of;  /* (total + 2) */
} DataSet;

static void dataset_make(DataSet *ds, const char *sub, const int64_t *lens, int num_shards, int BT) {
    snprintf(ds->dir, sizeof ds->dir, "%s", tpath(sub));
    remove_tree(ds->dir);
    make_dirs(ds->dir);
    ds->num_shards = num_shards;
    ds->total = 0;
    for (int s = 0; s < num_shards; s++) ds->total += lens[s];
    ds->win_of = malloc((size_t)(ds->total + 2) * sizeof(int64_t));
    for (int64_t i = 0; i < ds->total + 2; i++) ds->win_of[i] = -1;
    int32_t next = 1;
    ds->W = 0;
    for (int s = 0; s < num_shards; s++) {
        int32_t *tok = malloc((size_t)(lens[s] ? lens[s] : 1) * sizeof(int32_t));
        for (int64_t i = 0; i < lens[s]; i++) tok[i] = next + (int32_t)i;
        for (int64_t w = 0; lens[s] > 0 && w < (lens[s] - 1) / BT; w++) ds->win_of[next + w * BT] = (int64_t)ds->W++;
        char p[600];
        snprintf(p, sizeof p, "%s/shard_%03d.bin", ds->dir, s);
        shard_write(p, tok, (size_t)lens[s], 2);
        next += (int32_t)lens[s];
        free(tok);
    }
}

/* Checks one batch is a real window: consecutive tokens, targets = inputs shifted by one. Returns its index. */
static int64_t window_of(const DataSet *ds, const int *in, const int *tg, int BT, int *ok) {
    *ok = 1;
    if (in[0] < 1 || in[0] > ds->total || ds->win_of[in[0]] < 0) { *ok = 0; return -1; }
    for (int i = 0; i < BT; i++) {
        if (in[i] != in[0] + i) *ok = 0;
        if (tg[i] != in[0] + i + 1) *ok = 0;
        if (i + 1 < BT && tg[i] != in[i + 1]) *ok = 0;
    }
    return ds->win_of[in[0]];
}

/* ---------------------------------------------------------------------------------------------------------- */

TEST(shard_write_roundtrip_u16_and_header_bytes) {
    int32_t tok[5] = {0, 1, 65535, 258, 50256};
    const char *p = tpath("rt16.bin");
    shard_write(p, tok, 5, 2);
    CHECK(file_size(p) == 1024 + 10, "file size 1034 vs %lld", (long long)file_size(p));
    unsigned char h[16];
    FILE *f = fopen(p, "rb");
    CHECK(f && fread(h, 1, 16, f) == 16, "header readable");
    if (f) fclose(f);
    uint32_t magic = h[0] | h[1] << 8 | h[2] << 16 | (uint32_t)h[3] << 24;
    CHECK(magic == SHARD_MAGIC_U16, "magic %d vs %u", SHARD_MAGIC_U16, magic);
    CHECK(h[4] == 1 && h[8] == 5, "version 1 / n 5 vs %d / %d", h[4], h[8]);
    int tb = 0;
    CHECK(shard_check_header(p, &tb) == 5 && tb == 2, "n 5 tb 2 vs tb %d", tb);
    int64_t n = 0;
    int32_t *back = shard_read_all(p, &n, 0);
    CHECK(n == 5, "n 5 vs %lld", (long long)n);
    for (int i = 0; i < 5; i++) CHECK(back[i] == tok[i], "token %d: %d vs %d", i, tok[i], back[i]);
    free(back);
    /* the atomic write leaves no temp file behind */
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) CHECK(strstr(e->d_name, ".tmp.") == NULL, "temp file %s left", e->d_name);
    if (d) closedir(d);
}

TEST(uint32_shards_read_correctly) {
    enum { N = 4 * 8 * 3 + 1 };
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = 100000 + 997 * i; /* ids far above 65535 */
    const char *p = tpath("u32.bin");
    shard_write(p, tok, N, 4);
    int tb = 0;
    CHECK(shard_check_header(p, &tb) == N && tb == 4, "n %d tb 4 vs tb %d", N, tb);
    int64_t n = 0;
    int32_t *back = shard_read_all(p, &n, 200000);
    for (int i = 0; i < N; i++) CHECK(back[i] == tok[i], "token %d: %d vs %d", i, tok[i], back[i]);
    free(back);
    DataLoader *dl = dataloader_open(p, 4, 8, 0, 1, 0, 0, 0);
    CHECK(dataloader_token_bytes(dl) == 4, "token bytes 4 vs %d", dataloader_token_bytes(dl));
    CHECK(dataloader_num_windows(dl) == 3, "W 3 vs %llu", (unsigned long long)dataloader_num_windows(dl));
    int in[32], tg[32];
    for (int w = 0; w < 3; w++) {
        dataloader_next(dl, in, tg);
        for (int i = 0; i < 32; i++) {
            CHECK(in[i] == tok[w * 32 + i], "window %d input %d: %d vs %d", w, i, tok[w * 32 + i], in[i]);
            CHECK(tg[i] == tok[w * 32 + i + 1], "window %d target %d: %d vs %d", w, i, tok[w * 32 + i + 1], tg[i]);
        }
    }
    dataloader_free(dl);
}

TEST(shard_list_file_directory_and_glob_sorted) {
    const char *dir = tpath("list");
    make_dirs(dir);
    int32_t t[3] = {1, 2, 3};
    char p[600];
    const char *names[3] = {"c.bin", "a.bin", "b.bin"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        shard_write(p, t, 3, 2);
    }
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    FILE *f = fopen(p, "w");
    if (f) { fputs("x", f); fclose(f); }
    int n = 0;
    char **l = shard_list(dir, &n);
    CHECK(n == 3, "3 shards vs %d", n);
    for (int i = 0; i < n && i < 3; i++) {
        char want[600];
        snprintf(want, sizeof want, "%s/%c.bin", dir, 'a' + i);
        CHECK(!strcmp(l[i], want), "entry %d: %s vs %s", i, want, l[i]);
    }
    shard_list_free(l, n);
    char g[600];
    snprintf(g, sizeof g, "%s/[ab].bin", dir);
    l = shard_list(g, &n);
    CHECK(n == 2 && strstr(l[0], "a.bin") && strstr(l[1], "b.bin"), "glob gives a.bin, b.bin (n %d)", n);
    shard_list_free(l, n);
    snprintf(p, sizeof p, "%s/b.bin", dir);
    l = shard_list(p, &n);
    CHECK(n == 1 && !strcmp(l[0], p), "single file");
    shard_list_free(l, n);
}

/* One epoch over all ranks: every window read exactly once except exactly W mod N never read; every rank reads
 * floor(W/N) batches; unshuffled order is r, r+N, ...; the epoch counter advances. Returns the epoch's order
 * (reads of rank 0, then rank 1, ...) in `order` (W/N*N entries). */
static void run_epoch(const char *test_name_, const DataSet *ds, DataLoader **dls, int N, int BT, int shuffle,
                      int64_t *order, uint64_t epoch) {
    uint64_t W = ds->W, per = W / (uint64_t)N;
    int *counts = calloc(W, sizeof(int));
    int *in = malloc((size_t)BT * sizeof(int)), *tg = malloc((size_t)BT * sizeof(int));
    for (int r = 0; r < N; r++) {
        CHECK(dataloader_windows_per_epoch(dls[r]) == per, "rank %d per-epoch %llu vs %llu", r,
              (unsigned long long)per, (unsigned long long)dataloader_windows_per_epoch(dls[r]));
        for (uint64_t i = 0; i < per; i++) {
            DataPos pos;
            dataloader_get_pos(dls[r], &pos);
            CHECK(pos.epoch == epoch && pos.index == i, "rank %d before read %llu: epoch %llu index %llu", r,
                  (unsigned long long)i, (unsigned long long)pos.epoch, (unsigned long long)pos.index);
            dataloader_next(dls[r], in, tg);
            int ok;
            int64_t w = window_of(ds, in, tg, BT, &ok);
            CHECK(ok, "rank %d read %llu is not a window with shifted targets (first token %d)", r,
                  (unsigned long long)i, in[0]);
            if (!ok) continue;
            counts[w]++;
            order[(uint64_t)r * per + i] = w;
            if (!shuffle)
                CHECK((uint64_t)w == (uint64_t)r + (uint64_t)N * i, "unshuffled rank %d read %llu: window %llu vs %lld",
                      r, (unsigned long long)i, (unsigned long long)(r + N * i), (long long)w);
        }
        DataPos pos;
        dataloader_get_pos(dls[r], &pos);
        CHECK(pos.epoch == epoch + 1 && pos.index == 0, "rank %d after epoch: epoch %llu index %llu", r,
              (unsigned long long)pos.epoch, (unsigned long long)pos.index);
    }
    uint64_t unread = 0, multi = 0;
    for (uint64_t w = 0; w < W; w++) {
        if (counts[w] == 0) unread++;
        if (counts[w] > 1) multi++;
    }
    CHECK(multi == 0, "%llu windows read more than once", (unsigned long long)multi);
    CHECK(unread == W % (uint64_t)N, "unread windows %llu vs W mod N = %llu", (unsigned long long)unread,
          (unsigned long long)(W % (uint64_t)N));
    if (!shuffle)
        for (uint64_t w = W - W % (uint64_t)N; w < W; w++)
            CHECK(counts[w] == 0, "unshuffled leftover window %llu was read", (unsigned long long)w);
    free(counts);
    free(in);
    free(tg);
}

TEST(every_window_once_per_epoch_across_ranks_and_shard_lengths) {
    const int B = 2, T = 4, BT = B * T;
    int configs = 0;
    for (int N = 1; N <= 4; N++) {
        int64_t m = (int64_t)BT * N;
        /* shard lengths around multiples of B*T*N, and shards with no window at all */
        int64_t sets[5][4] = {
            {2 * m - 1, 2 * m, 2 * m + 1, 0},
            {m + BT, 3 * m + 1, BT, 0},
            {m + 1, 0, 0, 0},
            {m - 1 + BT, 2 * m - 1, 1, m + 1},
            {3 * m + BT + 1, 0, 0, 0},
        };
        int counts[5] = {3, 3, 1, 4, 1};
        for (int si = 0; si < 5; si++) {
            DataSet ds;
            dataset_make(&ds, "cover", sets[si], counts[si], BT);
            if (ds.W < (uint64_t)N) { free(ds.win_of); continue; }
            for (int shuffle = 0; shuffle <= 1; shuffle++) {
                DataLoader *dls[4];
                for (int r = 0; r < N; r++) dls[r] = dataloader_open(ds.dir, B, T, r, N, 1234, shuffle, 0);
                CHECK(dataloader_num_windows(dls[0]) == ds.W, "N %d set %d: W %llu vs %llu", N, si,
                      (unsigned long long)ds.W, (unsigned long long)dataloader_num_windows(dls[0]));
                uint64_t per = ds.W / (uint64_t)N;
                int64_t *o1 = malloc((per * N + 1) * sizeof(int64_t)), *o2 = malloc((per * N + 1) * sizeof(int64_t));
                run_epoch(test_name_, &ds, dls, N, BT, shuffle, o1, 0);
                run_epoch(test_name_, &ds, dls, N, BT, shuffle, o2, 1);
                int same = memcmp(o1, o2, per * N * sizeof(int64_t)) == 0;
                if (shuffle && per * N >= 4)
                    CHECK(!same, "N %d set %d: epoch 2 has the same order as epoch 1 with shuffling on", N, si);
                if (!shuffle) CHECK(same, "N %d set %d: unshuffled epochs differ", N, si);
                free(o1);
                free(o2);
                for (int r = 0; r < N; r++) dataloader_free(dls[r]);
                configs++;
            }
            free(ds.win_of);
        }
    }
    CHECK(configs >= 36, "configurations run %d vs >= 36", configs);
}

TEST(shuffled_order_depends_on_seed) {
    const int B = 2, T = 4, BT = 8;
    int64_t lens[2] = {20 * BT + 1, 17 * BT + 3};
    DataSet ds;
    dataset_make(&ds, "seed", lens, 2, BT);
    DataLoader *a = dataloader_open(ds.dir, B, T, 0, 1, 1, 1, 0), *b = dataloader_open(ds.dir, B, T, 0, 1, 2, 1, 0);
    DataLoader *c = dataloader_open(ds.dir, B, T, 0, 1, 1, 1, 0);
    int ia[8], ta[8], ib[8], tb[8], ic[8], tc[8], diff = 0, same_seed_diff = 0;
    for (int i = 0; i < 37; i++) {
        dataloader_next(a, ia, ta);
        dataloader_next(b, ib, tb);
        dataloader_next(c, ic, tc);
        diff += ia[0] != ib[0];
        same_seed_diff += ia[0] != ic[0];
    }
    CHECK(diff > 0, "seeds 1 and 2 give different orders");
    CHECK(same_seed_diff == 0, "the same seed gives the same order (%d differences)", same_seed_diff);
    dataloader_free(a);
    dataloader_free(b);
    dataloader_free(c);
    free(ds.win_of);
}

/* Saves the position after `skip` batches, reads `ahead` more, then restores in a fresh loader and compares. */
static void check_resume(const char *test_name_, const char *dir, int B, int T, int rank, int world, int shuffle,
                         int skip, int ahead) {
    int BT = B * T;
    DataLoader *dl = dataloader_open(dir, B, T, rank, world, 77, shuffle, 0);
    int *in = malloc((size_t)BT * sizeof(int)), *tg = malloc((size_t)BT * sizeof(int));
    int *want_in = malloc((size_t)ahead * BT * sizeof(int)), *want_tg = malloc((size_t)ahead * BT * sizeof(int));
    for (int i = 0; i < skip; i++) dataloader_next(dl, in, tg);
    DataPos pos;
    dataloader_get_pos(dl, &pos);
    for (int i = 0; i < ahead; i++) dataloader_next(dl, want_in + (size_t)i * BT, want_tg + (size_t)i * BT);
    dataloader_free(dl);
    /* a different seed at open: the saved one must win */
    DataLoader *dl2 = dataloader_open(dir, B, T, rank, world, 999, shuffle, 0);
    dataloader_set_pos(dl2, &pos);
    int mismatches = 0;
    for (int i = 0; i < ahead; i++) {
        dataloader_next(dl2, in, tg);
        mismatches += memcmp(in, want_in + (size_t)i * BT, (size_t)BT * sizeof(int)) != 0;
        mismatches += memcmp(tg, want_tg + (size_t)i * BT, (size_t)BT * sizeof(int)) != 0;
    }
    CHECK(mismatches == 0, "rank %d/%d shuffle %d skip %d: %d of %d batches differ after restore", rank, world,
          shuffle, skip, mismatches, 2 * ahead);
    dataloader_free(dl2);
    free(in);
    free(tg);
    free(want_in);
    free(want_tg);
}

TEST(restored_position_reproduces_next_batches) {
    const int B = 2, T = 4, BT = 8;
    int64_t lens[3] = {5 * BT + 1, 4 * BT, 6 * BT + 2}; /* W = 5 + 3 + 6 = 14 */
    DataSet ds;
    dataset_make(&ds, "resume", lens, 3, BT);
    CHECK(ds.W == 14, "W 14 vs %llu", (unsigned long long)ds.W);
    for (int world = 1; world <= 3; world++) {
        int per = (int)(14 / world);
        for (int shuffle = 0; shuffle <= 1; shuffle++) {
            for (int rank = 0; rank < world; rank++) {
                check_resume(test_name_, ds.dir, B, T, rank, world, shuffle, per / 2, 2 * per + 1);  /* mid epoch */
                check_resume(test_name_, ds.dir, B, T, rank, world, shuffle, per, per + 2);          /* at the boundary */
                check_resume(test_name_, ds.dir, B, T, rank, world, shuffle, per - 1, per + 2);      /* just before */
                check_resume(test_name_, ds.dir, B, T, rank, world, shuffle, 3 * per + 1, per);      /* epoch 3 */
            }
        }
    }
    free(ds.win_of);
}

TEST(resume_on_other_world_size_continues_the_epoch) {
    const int B = 2, T = 4, BT = 8;
    int64_t lens[2] = {11 * BT + 1, 12 * BT + 1}; /* W = 23 */
    DataSet ds;
    dataset_make(&ds, "reworld", lens, 2, BT);
    int in[8], tg[8], ok;
    int counts[23] = {0};
    DataPos pos;
    /* 2 ranks read 4 windows each, then the job resumes on 3 ranks */
    for (int r = 0; r < 2; r++) {
        DataLoader *dl = dataloader_open(ds.dir, B, T, r, 2, 5, 1, 0);
        for (int i = 0; i < 4; i++) {
            dataloader_next(dl, in, tg);
            counts[window_of(&ds, in, tg, BT, &ok)]++;
        }
        dataloader_get_pos(dl, &pos);
        dataloader_free(dl);
    }
    uint64_t per = (23 - 8) / 3;
    for (int r = 0; r < 3; r++) {
        DataLoader *dl = dataloader_open(ds.dir, B, T, r, 3, 5, 1, 0);
        dataloader_set_pos(dl, &pos);
        for (uint64_t i = 0; i < per; i++) {
            dataloader_next(dl, in, tg);
            int64_t w = window_of(&ds, in, tg, BT, &ok);
            CHECK(ok, "rank %d read a window", r);
            if (ok) counts[w]++;
        }
        DataPos p2;
        dataloader_get_pos(dl, &p2);
        CHECK(p2.epoch == 1 && p2.index == 0 && p2.start == 0, "rank %d: the resumed epoch ends after %llu reads", r,
              (unsigned long long)per);
        dataloader_free(dl);
    }
    /* a position saved inside the resumed epoch (start != 0) restores on the same world size */
    DataLoader *a = dataloader_open(ds.dir, B, T, 1, 3, 5, 1, 0);
    dataloader_set_pos(a, &pos);
    dataloader_next(a, in, tg);
    DataPos mid;
    dataloader_get_pos(a, &mid);
    CHECK(mid.start == 8 && mid.index == 1 && mid.world == 3, "mid-epoch position start 8 index 1 vs %llu %llu",
          (unsigned long long)mid.start, (unsigned long long)mid.index);
    int want[12][8];
    for (int i = 0; i < 12; i++) dataloader_next(a, want[i], tg);
    DataLoader *b = dataloader_open(ds.dir, B, T, 1, 3, 6, 1, 0);
    dataloader_set_pos(b, &mid);
    int differ = 0;
    for (int i = 0; i < 12; i++) {
        dataloader_next(b, in, tg);
        differ += memcmp(in, want[i], sizeof in) != 0;
    }
    CHECK(differ == 0, "%d of 12 batches differ after restoring inside the resumed epoch", differ);
    dataloader_free(a);
    dataloader_free(b);
    int multi = 0, unread = 0;
    for (int w = 0; w < 23; w++) {
        multi += counts[w] > 1;
        unread += counts[w] == 0;
    }
    CHECK(multi == 0, "%d windows read twice in the epoch", multi);
    CHECK(unread == (23 - 8) % 3, "unread %d vs %d", unread, (23 - 8) % 3);
    free(ds.win_of);
}

TEST(validation_loader_is_sequential_and_rank_strided) {
    const int B = 2, T = 4, BT = 8;
    int64_t lens[2] = {7 * BT + 1, 4 * BT + 5}; /* W = 11 */
    DataSet ds;
    dataset_make(&ds, "val", lens, 2, BT);
    int in[8], tg[8], ok;
    for (int N = 1; N <= 3; N++)
        for (int r = 0; r < N; r++) {
            ValLoader *vl = valloader_open(ds.dir, B, T, r, N, 0);
            uint64_t nb = valloader_num_batches(vl);
            CHECK(nb == 11 / (uint64_t)N, "N %d: batches %d vs %llu", N, 11 / N, (unsigned long long)nb);
            for (int pass = 0; pass < 2; pass++) {
                uint64_t i = 0;
                while (valloader_next(vl, in, tg)) {
                    int64_t w = window_of(&ds, in, tg, BT, &ok);
                    CHECK(ok && (uint64_t)w == r + N * i, "N %d rank %d batch %llu: window %llu vs %lld", N, r,
                          (unsigned long long)i, (unsigned long long)(r + N * i), (long long)w);
                    i++;
                    if (i > 100) break;
                }
                CHECK(i == nb, "pass %d read %llu vs %llu", pass, (unsigned long long)i, (unsigned long long)nb);
                valloader_reset(vl);
            }
            valloader_set_max_batches(vl, 2);
            uint64_t i = 0;
            while (valloader_next(vl, in, tg) && i < 100) i++;
            CHECK(i == (nb < 2 ? nb : 2), "max_batches 2: read %llu", (unsigned long long)i);
            valloader_free(vl);
        }
    free(ds.win_of);
}

/* A sparse shard whose header claims 2^31 + 3*1024 + 1 uint16 tokens (about 4.3 GB); only the last window is
 * written, past the 4 GB offset. No disk space is used for the hole. */
TEST(offsets_past_4GB_in_sparse_shard) {
    const int B = 4, T = 256, BT = 1024;
    const uint64_t n = (1ull << 31) + 3 * BT + 1, W = (n - 1) / BT;
    const char *p = tpath("sparse.bin");
    int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "create %s", p);
    if (fd < 0) return;
    unsigned char h[1024] = {0};
    uint32_t hv[3] = {SHARD_MAGIC_U16, SHARD_VERSION_U16, (uint32_t)n};
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 4; b++) h[4 * k + b] = (unsigned char)(hv[k] >> (8 * b));
    CHECK(pwrite(fd, h, 1024, 0) == 1024, "header write");
    CHECK(ftruncate(fd, (off_t)(1024 + 2 * n)) == 0, "ftruncate to %llu bytes", (unsigned long long)(1024 + 2 * n));
    uint64_t first = (W - 1) * BT; /* token index of the last window, > 2^31 */
    unsigned char win[2 * (BT + 1)];
    for (int i = 0; i <= BT; i++) {
        unsigned v = (unsigned)(i * 7 + 3) % 65536;
        win[2 * i] = (unsigned char)v;
        win[2 * i + 1] = (unsigned char)(v >> 8);
    }
    off_t off = (off_t)(1024 + 2 * first);
    CHECK(off > (off_t)(4ull << 30), "the window sits past 4 GiB (offset %lld)", (long long)off);
    CHECK(pwrite(fd, win, sizeof win, off) == (ssize_t)sizeof win, "tail write");
    close(fd);
    struct stat st;
    stat(p, &st);
    CHECK((long long)st.st_blocks * 512 < (16ll << 20), "the shard is sparse: %lld bytes on disk",
          (long long)st.st_blocks * 512);
    int tb;
    CHECK(shard_check_header(p, &tb) == (int64_t)n, "header count %llu", (unsigned long long)n);
    DataLoader *dl = dataloader_open(p, B, T, 0, 1, 0, 0, 50257);
    CHECK(dataloader_num_windows(dl) == W, "W %llu vs %llu", (unsigned long long)W,
          (unsigned long long)dataloader_num_windows(dl));
    DataPos pos;
    dataloader_get_pos(dl, &pos);
    pos.index = W - 1; /* jump straight to the last window */
    dataloader_set_pos(dl, &pos);
    int *in = malloc(BT * sizeof(int)), *tg = malloc(BT * sizeof(int));
    dataloader_next(dl, in, tg);
    int bad = 0;
    for (int i = 0; i < BT; i++) bad += in[i] != (i * 7 + 3) || tg[i] != ((i + 1) * 7 + 3);
    CHECK(bad == 0, "%d tokens of the window past 4 GB wrong (first %d vs 3)", bad, in[0]);
    dataloader_get_pos(dl, &pos);
    CHECK(pos.epoch == 1 && pos.index == 0, "after the last window the epoch advanced");
    dataloader_next(dl, in, tg); /* epoch 2 starts at window 0: the hole reads as zeros */
    CHECK(in[0] == 0 && tg[BT - 1] == 0, "window 0 is zeros");
    dataloader_free(dl);
    free(in);
    free(tg);
    unlink(p);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* rejections: the call runs in a forked child that must exit non-zero with one stderr line holding `needles` */

typedef void (*CaseFn)(const char *arg);

static void expect_fatal(const char *test_name_, const char *what, CaseFn fn, const char *arg, const char *needle1,
                         const char *needle2) {
    int pipefd[2];
    if (pipe(pipefd) != 0) { CHECK(0, "pipe"); return; }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        dup2(pipefd[1], 2);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 1);
        fn(arg);
        _exit(0);
    }
    close(pipefd[1]);
    char err[4096];
    size_t len = 0;
    ssize_t r;
    while (len < sizeof err - 1 && (r = read(pipefd[0], err + len, sizeof err - 1 - len)) > 0) len += (size_t)r;
    err[len] = '\0';
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0, "%s: exit status non-zero vs %d", what,
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    int lines = 0;
    for (size_t i = 0; i < len; i++) lines += err[i] == '\n';
    CHECK(lines == 1, "%s: one stderr line vs %d: %s", what, lines, err);
    CHECK(strstr(err, needle1) != NULL, "%s: message names '%s': %s", what, needle1, err);
    if (needle2) CHECK(strstr(err, needle2) != NULL, "%s: message says '%s': %s", what, needle2, err);
}

static void open_and_read_all(const char *spec) {
    DataLoader *dl = dataloader_open(spec, 2, 4, 0, 1, 0, 0, 400);
    int in[8], tg[8];
    for (uint64_t i = 0; i < dataloader_windows_per_epoch(dl); i++) dataloader_next(dl, in, tg);
}
static void open_world4(const char *spec) { dataloader_open(spec, 2, 4, 0, 4, 0, 1, 0); }
static void open_val_world4(const char *spec) { valloader_open(spec, 2, 4, 1, 4, 0); }
static void read_all_vocab400(const char *path) {
    int64_t n;
    shard_read_all(path, &n, 400);
}
static void write_too_big_id(const char *path) {
    int32_t t[3] = {1, 70000, 2};
    shard_write(path, t, 3, 2);
}
static void restore_other_bt(const char *spec) {
    DataLoader *a = dataloader_open(spec, 2, 4, 0, 1, 0, 1, 0), *b = dataloader_open(spec, 1, 4, 0, 1, 0, 1, 0);
    DataPos pos;
    dataloader_get_pos(a, &pos);
    dataloader_set_pos(b, &pos);
}

/* Overwrites 4 bytes at `off` of a file with v (little-endian). */
static void poke32(const char *path, long off, uint32_t v) {
    int fd = open(path, O_WRONLY);
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    if (fd >= 0) {
        if (pwrite(fd, b, 4, off) != 4) perror("pwrite");
        close(fd);
    }
}

static const char *good_shard(const char *name, int n, int bad_at) {
    int32_t *t = malloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) t[i] = i % 300;
    if (bad_at >= 0) t[bad_at] = 500;
    const char *p = tpath(name);
    shard_write(p, t, (size_t)n, 2);
    free(t);
    return p;
}

TEST(rejects_bad_shards_with_one_line_naming_the_file) {
    const char *p;
    p = good_shard("magic.bin", 100, -1);
    poke32(p, 0, 123);
    expect_fatal(test_name_, "corrupt magic", open_and_read_all, p, p, "bad magic 123");
    p = good_shard("version.bin", 100, -1);
    poke32(p, 4, 2);
    expect_fatal(test_name_, "wrong version", open_and_read_all, p, p, "version 2");
    p = good_shard("trunc.bin", 100, -1);
    CHECK(truncate(p, 1024 + 2 * 100 - 2) == 0, "truncate");
    expect_fatal(test_name_, "truncated body", open_and_read_all, p, p, "truncated");
    p = good_shard("long.bin", 100, -1);
    CHECK(truncate(p, 1024 + 2 * 100 + 6) == 0, "extend");
    expect_fatal(test_name_, "longer than its header", open_and_read_all, p, p, "longer");
    p = good_shard("short_header.bin", 100, -1);
    CHECK(truncate(p, 100) == 0, "truncate header");
    expect_fatal(test_name_, "file shorter than a header", open_and_read_all, p, p, "header");
    p = good_shard("vocab.bin", 100, 61);
    expect_fatal(test_name_, "token past the vocabulary (loader)", open_and_read_all, p, p, "different vocabulary");
    expect_fatal(test_name_, "token past the vocabulary (read_all)", read_all_vocab400, p, p, "different vocabulary");
    p = good_shard("tiny.bin", 3 * 8 + 1, -1); /* 3 windows, 4 ranks */
    expect_fatal(test_name_, "too small for one step", open_world4, p, p, "fewer than");
    expect_fatal(test_name_, "validation too small", open_val_world4, p, p, "fewer than");
    p = good_shard("bt.bin", 100, -1);
    expect_fatal(test_name_, "restore with other B*T", restore_other_bt, p, "windows", "same data set");
    const char *empty = tpath("emptydir");
    make_dirs(empty);
    expect_fatal(test_name_, "empty directory", open_and_read_all, empty, empty, "no *.bin");
    char glob_spec[600];
    snprintf(glob_spec, sizeof glob_spec, "%s/*.bin", empty);
    expect_fatal(test_name_, "empty glob", open_and_read_all, glob_spec, glob_spec, "no token shard");
    p = tpath("missing.bin");
    expect_fatal(test_name_, "missing file", open_and_read_all, p, p, NULL);
    p = tpath("bigid.bin");
    expect_fatal(test_name_, "id too big for uint16", write_too_big_id, p, p, "uint16");
    CHECK(!file_exists(p), "nothing written for a bad id");
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) CHECK(strstr(e->d_name, ".tmp.") == NULL, "temp file %s left", e->d_name);
    if (d) closedir(d);
}

/* Runs fn(arg) in a forked child; returns its exit status (-1 if it did not exit) and its stderr in err. */
static int child_status(CaseFn fn, const char *arg, char *err, size_t cap) {
    int pipefd[2];
    if (pipe(pipefd) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        dup2(pipefd[1], 2);
        fn(arg);
        _exit(0);
    }
    close(pipefd[1]);
    size_t len = 0;
    ssize_t r;
    while (len < cap - 1 && (r = read(pipefd[0], err + len, cap - 1 - len)) > 0) len += (size_t)r;
    err[len] = '\0';
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#define VOCAB_A 0x0123456789abcdefull
static void check_vocab_a(const char *spec) { shard_check_vocab(spec, VOCAB_A, "voc_a", 1); }
static void check_vocab_b(const char *spec) { shard_check_vocab(spec, 0xfedcba9876543210ull, "voc_b", 1); }

/* Shards carry their vocabulary's hash (header ints 5, 6): shards of another vocabulary of the same size are refused
 * naming both hashes; shards that record their tokenizer but no hash (written before the field) still pass, with a
 * note; llm.c's (nothing recorded) pass without one. */
TEST(vocab_hash_is_recorded_and_checked) {
    int32_t t[40];
    for (int i = 0; i < 40; i++) t[i] = i;
    const char *dir = tpath("vocab_hash");
    make_dirs(dir);
    char p0[600], p1[600], glob_spec[600];
    snprintf(p0, sizeof p0, "%s/s_000000.bin", dir);
    snprintf(p1, sizeof p1, "%s/s_000001.bin", dir);
    snprintf(glob_spec, sizeof glob_spec, "%s/s_*.bin", dir);
    shard_write_tokenizer(p0, t, 40, 2, "bpe", VOCAB_A);
    shard_write_tokenizer(p1, t, 40, 2, "bpe", VOCAB_A);
    CHECK(shard_vocab_hash(p0) == VOCAB_A, "recorded hash %016llx vs %016llx", (unsigned long long)shard_vocab_hash(p0),
          (unsigned long long)VOCAB_A);
    int64_t n;
    int32_t *back = shard_read_all(p0, &n, 300); /* still a plain llm.c shard to every reader */
    CHECK(n == 40 && back[39] == 39, "read back %lld tokens", (long long)n);
    free(back);
    char err[4096];
    int st = child_status(check_vocab_a, glob_spec, err, sizeof err);
    CHECK(st == 0 && err[0] == 0, "the same vocabulary: status 0 and no output vs %d '%s'", st, err);
    expect_fatal(test_name_, "another vocabulary", check_vocab_b, glob_spec, "s_000000.bin", "0123456789abcdef");
    expect_fatal(test_name_, "another vocabulary names both", check_vocab_b, glob_spec, "fedcba9876543210", "voc_b");
    shard_write_tokenizer(p1, t, 40, 2, "bpe", 0); /* a shard written before the hash was recorded */
    CHECK(shard_vocab_hash(p1) == 0, "no hash recorded: %016llx", (unsigned long long)shard_vocab_hash(p1));
    st = child_status(check_vocab_a, glob_spec, err, sizeof err);
    CHECK(st == 0 && strstr(err, "note: 1 of 2 shards") && strstr(err, "record no vocabulary hash"),
          "an old shard: status 0 and a note vs %d '%s'", st, err);
    shard_write(p0, t, 40, 2); /* llm.c's: nothing recorded */
    shard_write(p1, t, 40, 2);
    st = child_status(check_vocab_a, glob_spec, err, sizeof err);
    CHECK(st == 0 && err[0] == 0, "llm.c's shards: status 0 and no output vs %d '%s'", st, err);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "build/test_dataloader_tmp.%d", (int)getpid());
    make_dirs(tmpdir);
    RUN_TEST(shard_write_roundtrip_u16_and_header_bytes);
    RUN_TEST(uint32_shards_read_correctly);
    RUN_TEST(shard_list_file_directory_and_glob_sorted);
    RUN_TEST(every_window_once_per_epoch_across_ranks_and_shard_lengths);
    RUN_TEST(shuffled_order_depends_on_seed);
    RUN_TEST(restored_position_reproduces_next_batches);
    RUN_TEST(resume_on_other_world_size_continues_the_epoch);
    RUN_TEST(validation_loader_is_sequential_and_rank_strided);
    RUN_TEST(offsets_past_4GB_in_sparse_shard);
    RUN_TEST(rejects_bad_shards_with_one_line_naming_the_file);
    RUN_TEST(vocab_hash_is_recorded_and_checked);
    remove_tree(tmpdir);
    TEST_EXIT();
}
