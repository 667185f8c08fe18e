/*
 * test/test_comm.c - the communication layer (comm/comm.h) on 1..N ranks: each collective's result against
 * values every rank can compute itself, queue ordering, the per-kind byte counters against the ring formulas of
 * SCAPE.md section 6. With --die-rank R / --fatal-rank R it instead makes rank R die (SIGKILL) or fail (fatal())
 * while the others block in a collective; test/test_comm_kill.sh checks that the job then ends, non-zero, soon.
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/bf16.h"
#include "common/rng.h"
#include "common/util.h"
#include "test/test_comm_mpi.h"

static int R, N;

TEST(allreduce_avg_is_the_mean_on_every_rank) {
    size_t sizes[] = {0, 1, 3, 1000, 4099};
    for (int c = 0; c < 5; c++) {
        size_t n = sizes[c];
        float *x = xmalloc(n * sizeof(float) + 4, "x");
        for (size_t i = 0; i < n; i++) x[i] = (float)(R + 1) + 0.5f * (float)i;
        comm_wait(comm_iallreduce_avg_f32(x, n));
        for (size_t i = 0; i < n; i++) {
            float want = (float)(N + 1) / 2.0f + 0.5f * (float)i;
            if (x[i] != want) {
                CHECK(0, "n=%zu x[%zu] expected %g, got %g", n, i, want, x[i]);
                break;
            }
        }
        free(x);
    }
}

/* bf16 input of rank r at element i, any sign and a wide range of magnitudes (so the sums round) */
static uint16_t bf16_input(int r, size_t i) {
    Rng g;
    rng_seed(&g, rng_mix((uint64_t)r + 1, (uint64_t)i));
    float x;
    rng_normal(&g, &x, 1, 0.0f, 1.0f);
    return bf16_from_f32(x * ldexpf(1.0f, (int)(i % 13) - 6));
}

/* comm.h's definition, recomputed here from every rank's inputs: owner's fp32 sum in rank order, mean, RNE to bf16,
 * identical on every rank; err is the fp32 mean minus the rounded mean on this rank's part (the parts cut as in the
 * fp32 all-reduce) and 0 elsewhere; and the error is the exact difference, so bf16 mean + err == fp32 mean. */
TEST(allreduce_avg_bf16_is_the_rounded_rank_order_mean_with_its_error_on_the_owner) {
    size_t sizes[] = {0, 1, 3, 1000, 4099};
    for (int c = 0; c < 5; c++) {
        size_t n = sizes[c];
        uint16_t *x = xmalloc(n * sizeof(uint16_t) + 2, "x");
        float *err = xmalloc(n * sizeof(float) + 4, "err");
        for (size_t i = 0; i < n; i++) x[i] = bf16_input(R, i);
        for (size_t i = 0; i < n; i++) err[i] = 12345.0f; /* must be overwritten */
        comm_wait(comm_iallreduce_avg_bf16(x, n, err));
        size_t lo = 0;
        for (int r = 0; r < R; r++) lo += n / (size_t)N + ((size_t)r < n % (size_t)N);
        size_t hi = lo + n / (size_t)N + ((size_t)R < n % (size_t)N);
        size_t bad = 0, bad_err = 0;
        for (size_t i = 0; i < n; i++) {
            float s = 0.0f;
            for (int r = 0; r < N; r++) s += bf16_to_f32(bf16_input(r, i));
            float mean = s / (float)N;
            uint16_t want = bf16_from_f32(mean);
            if (x[i] != want) {
                if (!bad) CHECK(0, "n=%zu x[%zu] = %#06x, expected %#06x (mean %.9g)", n, i, x[i], want, mean);
                bad++;
            }
            float want_err = i >= lo && i < hi ? mean - bf16_to_f32(want) : 0.0f;
            int exact = bf16_to_f32(want) + want_err == (i >= lo && i < hi ? mean : bf16_to_f32(want));
            if (err[i] != want_err || !exact) {
                if (!bad_err) CHECK(0, "n=%zu err[%zu] = %.9g, expected %.9g (exact %d)", n, i, err[i], want_err, exact);
                bad_err++;
            }
        }
        CHECK(bad == 0 && bad_err == 0, "n=%zu: %zu values and %zu errors differ", n, bad, bad_err);
        uint16_t h = 0;
        for (size_t i = 0; i < n; i++) h = (uint16_t)(h * 31u + x[i]);
        uint16_t *all = xmalloc((size_t)N * sizeof h, "hashes");
        comm_allgather(&h, all, sizeof h);
        for (int r = 0; r < N; r++) CHECK(all[r] == h, "n=%zu: rank %d's result differs from rank %d's", n, r, R);
        free(all);
        free(x);
        free(err);
    }
}

TEST(queued_jobs_run_in_order_and_one_wait_covers_earlier_ones) {
    enum { J = 20, n = 257 };
    float *x = xmalloc(J * n * sizeof(float), "x");
    CommHandle h = 0;
    for (int j = 0; j < J; j++) {
        for (int i = 0; i < n; i++) x[j * n + i] = (float)(R * 100 + j);
        h = comm_iallreduce_avg_f32(x + j * n, n);
    }
    comm_wait(h);
    for (int j = 0; j < J; j++) {
        float want = (float)(100.0 * (N - 1) / 2.0 + j);
        CHECK(x[j * n] == want && x[j * n + n - 1] == want, "job %d expected %g, got %g", j, want, x[j * n]);
    }
    free(x);
}

TEST(reduce_scatter_avg_gives_each_rank_its_part_of_the_mean) {
    size_t *counts = xmalloc((size_t)N * sizeof(size_t), "counts");
    size_t total = 0, off = 0;
    for (int r = 0; r < N; r++) {
        counts[r] = (size_t)(r * 7 % 5) * 3 + (r == 1 ? 0 : 1); /* uneven, rank 1 gets nothing */
        if (r < R) off += counts[r];
        total += counts[r];
    }
    float *in = xmalloc(total * sizeof(float) + 4, "in"), *out = xmalloc(counts[R] * sizeof(float) + 4, "out");
    for (size_t i = 0; i < total; i++) in[i] = (float)(2 * R) + (float)i;
    comm_wait(comm_ireduce_scatter_avg_f32(in, out, counts));
    for (size_t i = 0; i < counts[R]; i++) {
        float want = (float)(N - 1) + (float)(off + i);
        CHECK(out[i] == want, "out[%zu] expected %g, got %g", i, want, out[i]);
    }
    free(in); free(out); free(counts);
}

/* comm.h's comm_ireduce_scatter_avg_bf16, recomputed from every rank's inputs: each owner's part (uneven counts,
 * one rank empty) is the fp32 rank-order mean rounded to bf16, the bits comm_iallreduce_avg_bf16 gives, and err the
 * exact rounding error of the owner's part. */
TEST(reduce_scatter_avg_bf16_gives_each_owner_the_rounded_rank_order_mean_and_its_error) {
    size_t *counts = xmalloc((size_t)N * sizeof(size_t), "counts");
    size_t total = 0, off = 0;
    for (int r = 0; r < N; r++) {
        counts[r] = (size_t)(r * 7 % 5) * 300 + (r == 1 ? 0 : 11);
        if (r < R) off += counts[r];
        total += counts[r];
    }
    uint16_t *in = xmalloc(total * sizeof(uint16_t) + 2, "in"), *out = xmalloc(counts[R] * sizeof(uint16_t) + 2, "out");
    float *err = xmalloc(counts[R] * sizeof(float) + 4, "err");
    for (size_t i = 0; i < total; i++) in[i] = bf16_input(R, i);
    for (size_t i = 0; i < counts[R]; i++) err[i] = 12345.0f;
    comm_wait(comm_ireduce_scatter_avg_bf16(in, out, err, counts));
    size_t bad = 0;
    for (size_t i = 0; i < counts[R]; i++) {
        float s = 0.0f;
        for (int r = 0; r < N; r++) s += bf16_to_f32(bf16_input(r, off + i));
        float mean = s / (float)N;
        uint16_t want = bf16_from_f32(mean);
        float want_err = N == 1 ? 0.0f : mean - bf16_to_f32(want);
        if (out[i] != want || err[i] != want_err) {
            if (!bad) CHECK(0, "part value %zu: %#06x err %.9g, expected %#06x err %.9g", i, out[i], err[i], want, want_err);
            bad++;
        }
    }
    CHECK(bad == 0, "%zu of %zu values or errors differ", bad, counts[R]);
    free(in); free(out); free(err); free(counts);
}

TEST(allgatherv_in_place_fills_every_part) {
    size_t *counts = xmalloc((size_t)N * sizeof(size_t), "counts");
    size_t total = 0, off = 0;
    for (int r = 0; r < N; r++) {
        counts[r] = (size_t)(3 + 5 * r) % 7;
        if (r < R) off += counts[r];
        total += counts[r];
    }
    int32_t *buf = xcalloc(total + 1, sizeof(int32_t), "buf");
    for (size_t i = 0; i < counts[R]; i++) buf[off + i] = 1000 * R + (int32_t)i;
    comm_wait(comm_iallgatherv(buf, counts, sizeof(int32_t)));
    size_t o = 0;
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < counts[r]; i++, o++)
            CHECK(buf[o] == 1000 * r + (int32_t)i, "part %d[%zu] expected %d, got %d", r, i, 1000 * r + (int)i, buf[o]);
    free(buf); free(counts);
}

/* Block r of rank w's input reaches rank r as its block w, byte for byte (values depend on sender, receiver and
 * position), and the counter says block (N-1) bytes sent, as a reduce-scatter of N blocks. */
TEST(alltoall_bytes_delivers_each_block_to_its_rank) {
    const size_t block = 37;
    uint8_t *in = xmalloc((size_t)N * block, "in"), *out = xcalloc((size_t)N * block, 1, "out");
    for (int r = 0; r < N; r++)
        for (size_t k = 0; k < block; k++) in[(size_t)r * block + k] = (uint8_t)(R * 71 + r * 13 + k * 3 + 1);
    CommStats k0[COMM_NKINDS], k1[COMM_NKINDS];
    comm_stats_take_kind(k0);
    comm_wait(comm_ialltoall_bytes(in, out, block));
    comm_stats_take_kind(k1);
    for (int w = 0; w < N; w++)
        for (size_t k = 0; k < block; k++) {
            uint8_t want = (uint8_t)(w * 71 + R * 13 + k * 3 + 1);
            CHECK(out[(size_t)w * block + k] == want, "block from rank %d byte %zu: expected %u, got %u", w, k, want,
                  out[(size_t)w * block + k]);
        }
    CHECK(k1[COMM_REDUCE_SCATTER].calls == 1 && k1[COMM_REDUCE_SCATTER].bytes_sent == block * (uint64_t)(N - 1),
          "counted %llu calls, %llu bytes; expected 1, %llu", (unsigned long long)k1[COMM_REDUCE_SCATTER].calls,
          (unsigned long long)k1[COMM_REDUCE_SCATTER].bytes_sent, (unsigned long long)(block * (uint64_t)(N - 1)));
    free(in);
    free(out);
}

TEST(bcast_and_control_helpers_agree_everywhere) {
    char s[32];
    snprintf(s, sizeof s, "from rank %d", R);
    comm_bcast(s, sizeof s, N - 1);
    char want[32];
    snprintf(want, sizeof want, "from rank %d", N - 1);
    CHECK(strcmp(s, want) == 0, "bcast expected '%s', got '%s'", want, s);
    double v[2] = {R + 0.25, -1.0};
    comm_allreduce_sum_f64(v, 2);
    CHECK(v[0] == N * (N - 1) / 2.0 + 0.25 * N && v[1] == -N, "sum expected %g %d, got %g %g", N * (N - 1) / 2.0 + 0.25 * N, -N, v[0], v[1]);
    int64_t mx = R * 3 - 1;
    comm_allreduce_max_i64(&mx, 1);
    CHECK(mx == (N - 1) * 3 - 1, "max expected %d, got %lld", (N - 1) * 3 - 1, (long long)mx);
    int32_t mine = 10 + R, *all = xmalloc((size_t)N * sizeof(int32_t), "all");
    comm_allgather(&mine, all, sizeof mine);
    for (int r = 0; r < N; r++) CHECK(all[r] == 10 + r, "allgather[%d] expected %d, got %d", r, 10 + r, all[r]);
    free(all);
    comm_barrier();
}

TEST(byte_counters_follow_the_ring_formulas) {
    CommStats k[COMM_NKINDS];
    comm_stats_take_kind(k); /* reset */
    size_t n1 = 1001, n2 = 77;
    float *x = xcalloc(n1 + n2, sizeof(float), "x");
    comm_iallreduce_avg_f32(x, n1);
    comm_wait(comm_iallreduce_avg_f32(x + n1, n2));
    size_t counts[64];
    for (int r = 0; r < N; r++) counts[r] = 13 + (size_t)r;
    size_t tot = 0;
    for (int r = 0; r < N; r++) tot += counts[r];
    uint8_t *g = xcalloc(tot, 1, "g");
    comm_wait(comm_iallgatherv(g, counts, 1));
    uint16_t *h = xcalloc(n2, sizeof(uint16_t), "h");
    comm_stats_take_kind(k);
    uint64_t ar = 2ull * 4 * (n1 + n2) * (uint64_t)(N - 1) / (uint64_t)N;
    uint64_t ag = (uint64_t)tot * (uint64_t)(N - 1) / (uint64_t)N;
    CHECK(k[COMM_ALLREDUCE].calls == 2, "all-reduce calls expected 2, got %llu", (unsigned long long)k[COMM_ALLREDUCE].calls);
    CHECK(k[COMM_ALLREDUCE].bytes_sent == ar && k[COMM_ALLREDUCE].bytes_recv == ar, "all-reduce bytes expected %llu, got %llu/%llu",
          (unsigned long long)ar, (unsigned long long)k[COMM_ALLREDUCE].bytes_sent, (unsigned long long)k[COMM_ALLREDUCE].bytes_recv);
    CHECK(k[COMM_ALLGATHER].calls == 1 && k[COMM_ALLGATHER].bytes_recv == ag, "all-gather expected 1 call %llu bytes, got %llu calls %llu bytes",
          (unsigned long long)ag, (unsigned long long)k[COMM_ALLGATHER].calls, (unsigned long long)k[COMM_ALLGATHER].bytes_recv);
    CHECK(k[COMM_REDUCE_SCATTER].calls == 0, "reduce-scatter calls expected 0, got %llu", (unsigned long long)k[COMM_REDUCE_SCATTER].calls);
    CHECK(k[COMM_ALLREDUCE].wait_ms >= 0, "negative wait time %g", k[COMM_ALLREDUCE].wait_ms);
    /* the bf16 all-reduce moves half the bytes of the fp32 one */
    comm_wait(comm_iallreduce_avg_bf16(h, n2, NULL));
    comm_stats_take_kind(k);
    uint64_t ar16 = 2ull * 2 * n2 * (uint64_t)(N - 1) / (uint64_t)N;
    CHECK(k[COMM_ALLREDUCE].calls == 1 && k[COMM_ALLREDUCE].bytes_sent == ar16 && k[COMM_ALLREDUCE].bytes_recv == ar16,
          "bf16 all-reduce expected 1 call of %llu bytes, got %llu calls %llu/%llu bytes", (unsigned long long)ar16,
          (unsigned long long)k[COMM_ALLREDUCE].calls, (unsigned long long)k[COMM_ALLREDUCE].bytes_sent,
          (unsigned long long)k[COMM_ALLREDUCE].bytes_recv);
    free(x); free(g); free(h);
}

/* The communication thread's busy and CPU time are counted and reset by comm_stats_take; while it waits for a
 * late peer (rank 0 queues an all-reduce, the others join 300 ms later) it sleeps between MPI_Tests instead of
 * busy polling: its CPU time stays under half of the time it spent in the collective. */
TEST(comm_thread_busy_time_counted_and_waiting_does_not_spin) {
    CommStats cs;
    comm_barrier();
    comm_stats_take(&cs);
    size_t n = 1 << 20;
    float *buf = xcalloc(n, sizeof(float), "buf");
    if (R != 0) usleep(300 * 1000);
    comm_wait(comm_iallreduce_avg_f32(buf, n));
    comm_stats_take(&cs);
    CHECK(cs.busy_ms > 0 && cs.cpu_ms >= 0, "busy %.3f ms, cpu %.3f ms: expected busy > 0, cpu >= 0", cs.busy_ms, cs.cpu_ms);
    if (R == 0 && N > 1)
        CHECK(cs.busy_ms >= 250 && cs.cpu_ms < 0.5 * cs.busy_ms,
              "rank 0 waited in the all-reduce %.1f ms (want >= 250) using %.1f ms of CPU (want < half)", cs.busy_ms, cs.cpu_ms);
    comm_stats_take(&cs);
    CHECK(cs.busy_ms == 0 && cs.cpu_ms == 0, "after a take without jobs: busy %.3f, cpu %.3f, expected 0", cs.busy_ms, cs.cpu_ms);
    free(buf);
}

/* issue 30: the node-local rank comes from MPI (MPI_Comm_split_type shared), not from a launcher's variables: on
 * this one machine every rank shares the node, local rank = world rank (split keyed by world rank), size = world,
 * node id 0; and keys are told apart per node (the NCCL check passes a GPU's bus id). */
TEST(local_rank_and_size_come_from_mpi) {
    CHECK(comm_local_rank() == R && comm_local_size() == N && comm_node_id() == 0,
          "rank %d of %d: local rank %d of %d, node %d (expected %d of %d, node 0)", R, N, comm_local_rank(),
          comm_local_size(), comm_node_id(), R, N);
    CHECK(comm_host()[0] != '\0' && strcmp(comm_host(), "?") != 0, "host name '%s'", comm_host());
    char key[32];
    snprintf(key, sizeof key, "gpu-%d", R);
    CHECK(comm_node_keys_distinct(key) == 1, "distinct keys reported as shared");
    CHECK(comm_node_keys_distinct("same") == (N == 1), "a key every rank passes: %d with %d ranks",
          comm_node_keys_distinct("same"), N);
}

/* The GPU choice over (local rank, local size, visible GPUs): one each while there are enough, round-robin past
 * them, and the single visible device when a launcher gives each task its own (CUDA_VISIBLE_DEVICES per task). */
TEST(gpu_choice_by_local_rank) {
    static const int cases[][4] = {/* local rank, local size, visible, expected */
                                   {0, 1, 1, 0}, {0, 4, 4, 0}, {3, 4, 4, 3}, {1, 2, 8, 1}, {5, 8, 4, 1},
                                   {7, 8, 4, 3}, {0, 2, 1, 0}, {1, 2, 1, 0}, {3, 4, 1, 0}, {2, 3, 2, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = comm_gpu_for_rank(cases[i][0], cases[i][1], cases[i][2]);
        CHECK(got == cases[i][3], "local rank %d of %d with %d visible: GPU %d, expected %d", cases[i][0], cases[i][1],
              cases[i][2], got, cases[i][3]);
    }
}

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    R = comm_rank();
    N = comm_world();
    if (N > 64) fatal("test_comm: at most 64 ranks");
    if (argc == 3 && (strcmp(argv[1], "--die-rank") == 0 || strcmp(argv[1], "--fatal-rank") == 0)) {
        int victim = atoi(argv[2]);
        comm_barrier();
        if (R == victim) {
            usleep(200 * 1000);
            if (argv[1][2] == 'd') raise(SIGKILL);
            fatal("test_comm: rank %d fails on purpose (--fatal-rank)", R);
        }
        for (;;) comm_barrier(); /* the survivors block here until the job is brought down */
    }
    MPI_RUN_TEST(allreduce_avg_is_the_mean_on_every_rank);
    MPI_RUN_TEST(allreduce_avg_bf16_is_the_rounded_rank_order_mean_with_its_error_on_the_owner);
    MPI_RUN_TEST(queued_jobs_run_in_order_and_one_wait_covers_earlier_ones);
    MPI_RUN_TEST(reduce_scatter_avg_gives_each_rank_its_part_of_the_mean);
    MPI_RUN_TEST(reduce_scatter_avg_bf16_gives_each_owner_the_rounded_rank_order_mean_and_its_error);
    MPI_RUN_TEST(allgatherv_in_place_fills_every_part);
    MPI_RUN_TEST(alltoall_bytes_delivers_each_block_to_its_rank);
    MPI_RUN_TEST(bcast_and_control_helpers_agree_everywhere);
    MPI_RUN_TEST(byte_counters_follow_the_ring_formulas);
    MPI_RUN_TEST(comm_thread_busy_time_counted_and_waiting_does_not_spin);
    MPI_RUN_TEST(local_rank_and_size_come_from_mpi);
    MPI_RUN_TEST(gpu_choice_by_local_rank);
    comm_finalize();
    TEST_EXIT();
}
