/*
 * comm/bench_comm.c - how much CPU the communication thread takes from compute while it waits inside a
 * collective. Run with 2 ranks: rank 0 queues a large all-reduce at once and then multiplies matrices (sgemm,
 * fixed count); rank 1 multiplies first and joins the all-reduce only afterwards, so rank 0's communication thread
 * waits inside MPI for the whole of rank 1's compute. Prints per rank the sgemm wall time alone (no collective
 * queued) and with the waiting collective, and the communication thread's wall and CPU time. Compare
 * SCAPE_COMM_SPIN=1 (Open MPI's blocking wait, busy polling) with the default (MPI_Test with sleeps).
 * Usage: mpirun -np 2 build/bench_comm [reps=600] [M_floats=4]    Not a test: it asserts nothing.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/util.h"
#include "comm/comm.h"

static double sgemm_loop(const float *a, const float *b, float *c, int n, int reps) {
    double t0 = now_seconds();
    for (int i = 0; i < reps; i++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    return now_seconds() - t0;
}

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    int reps = argc > 1 ? atoi(argv[1]) : 600;
    double mf = argc > 2 ? atof(argv[2]) : 4;
    if (reps < 1 || reps > 100000 || !(mf > 0 && mf <= 1000)) fatal("usage: bench_comm [reps 1..100000] [M_floats in (0, 1000]]");
    const int n = 256;
    float *a = xmalloc((size_t)n * n * sizeof(float), "a"), *b = xmalloc((size_t)n * n * sizeof(float), "b");
    float *c = xmalloc((size_t)n * n * sizeof(float), "c");
    for (int i = 0; i < n * n; i++) a[i] = b[i] = (float)(i % 13) * 0.01f;
    size_t nbuf = (size_t)(mf * 1e6);
    float *buf = xcalloc(nbuf, sizeof(float), "all-reduce buffer");
    CommStats cs;
    comm_barrier();
    double alone = sgemm_loop(a, b, c, n, reps);
    comm_barrier();
    comm_stats_take(&cs);
    double with;
    if (comm_rank() == 0) {
        CommHandle h = comm_iallreduce_avg_f32(buf, nbuf);
        with = sgemm_loop(a, b, c, n, reps);
        comm_wait(h);
    } else {
        with = sgemm_loop(a, b, c, n, reps);
        comm_wait(comm_iallreduce_avg_f32(buf, nbuf));
    }
    comm_stats_take(&cs);
    CommStats cs1;
    comm_barrier();
    comm_stats_take(&cs1);
    double t0 = now_seconds();
    comm_wait(comm_iallreduce_avg_f32(buf, nbuf));
    double ar = now_seconds() - t0;
    comm_stats_take(&cs1);
    const char *spin = getenv("SCAPE_COMM_SPIN");
    printf("rank %d (%s): sgemm alone %.0f ms, with a waiting all-reduce %.0f ms (+%.0f%%); comm thread busy %.0f ms, "
           "CPU %.0f ms; the all-reduce alone (%.0f MB) %.0f ms, comm thread CPU %.0f ms\n", comm_rank(), spin && spin[0] == '1' ? "busy wait" : "test+sleep", 1e3 * alone, 1e3 * with,
           100.0 * (with / alone - 1), cs.busy_ms, cs.cpu_ms, 4e-6 * (double)nbuf, 1e3 * ar, cs1.cpu_ms);
    free(a); free(b); free(c); free(buf);
    comm_finalize();
    return 0;
}
