/*
 * dataloader/bench_dataloader.c - measures training-loader throughput (tokens per second of batches delivered)
 * on real shards or on a synthetic shard it writes first. Not a test: it asserts nothing.
 *
 *   build/bench_dataloader --data DIR_OR_GLOB [--B 8] [--T 1024] [--batches 2000] [--shuffle 1]
 *   build/bench_dataloader --make build/bench.bin --tokens 50000000     (writes a random uint16 shard first)
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/rng.h"
#include "common/util.h"
#include "dataloader/dataloader.h"

static const struct option options[] = {
    {"data", required_argument, 0, 'd'},   {"make", required_argument, 0, 'm'},
    {"tokens", required_argument, 0, 'n'}, {"B", required_argument, 0, 'B'},
    {"T", required_argument, 0, 'T'},      {"batches", required_argument, 0, 'k'},
    {"shuffle", required_argument, 0, 's'}, {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

int main(int argc, char **argv) {
    const char *data = NULL, *make = NULL;
    long long tokens = 50000000, batches = 2000;
    int B = 8, T = 1024, shuffle = 1, c;
    while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (c) {
        case 'd': data = optarg; break;
        case 'm': make = optarg; break;
        case 'n': tokens = atoll(optarg); break;
        case 'B': B = atoi(optarg); break;
        case 'T': T = atoi(optarg); break;
        case 'k': batches = atoll(optarg); break;
        case 's': shuffle = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s --data SPEC | --make PATH [--tokens N] [--B 8] [--T 1024] [--batches 2000] "
                            "[--shuffle 0|1]\n", argv[0]);
            return c == 'h' ? 0 : 1;
        }
    }
    if (make) {
        if (tokens < 2) fatal("--tokens %lld: need at least 2 tokens", tokens);
        int32_t *tok = xmalloc((size_t)tokens * sizeof(int32_t), "synthetic tokens");
        Rng r;
        rng_seed(&r, 1);
        for (long long i = 0; i < tokens; i++) tok[i] = (int32_t)rng_below(&r, 50257);
        double t0 = now_seconds();
        shard_write(make, tok, (size_t)tokens, 2);
        printf("wrote %s: %lld tokens in %.2f s\n", make, tokens, now_seconds() - t0);
        free(tok);
        if (!data) data = make;
    }
    if (!data) fatal("pass --data SPEC (shard file, directory or glob) or --make PATH; see --help");
    DataLoader *dl = dataloader_open(data, B, T, 0, 1, 42, shuffle, 50257);
    int *in = xmalloc((size_t)B * T * sizeof(int), "inputs"), *tg = xmalloc((size_t)B * T * sizeof(int), "targets");
    double t0 = now_seconds();
    for (long long i = 0; i < batches; i++) dataloader_next(dl, in, tg);
    double dt = now_seconds() - t0;
    printf("%s: W=%llu windows, B=%d T=%d shuffle=%d: %lld batches in %.3f s, %.1f us/batch, %.1f M tokens/s\n",
           data, (unsigned long long)dataloader_num_windows(dl), B, T, shuffle, batches, dt, 1e6 * dt / batches,
           (double)batches * B * T / dt / 1e6);
    dataloader_free(dl);
    free(in);
    free(tg);
    return 0;
}
