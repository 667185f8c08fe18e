/*
 * scape/comm.h - the communication layer: MPI collectives on host buffers, run by one communication thread
 * that executes queued jobs in order, with every collective counted. Without mpirun the same binary runs as one
 * rank (every collective is then a local copy and counts zero bytes).
 * Not for: deciding what to send (scape/dist.h, scape/scape.h).
 */
#ifndef SCAPE_COMM_H
#define SCAPE_COMM_H

#include <stddef.h>
#include <stdint.h>

/* Per-step totals of all collectives of this rank. bytes_* follow SCAPE.md section 6's ring model
 * (all-reduce of n bytes: 2 n (N-1)/N sent and received; all-gather / reduce-scatter: n (N-1)/N). */
typedef struct {
    uint64_t calls;
    uint64_t bytes_sent;
    uint64_t bytes_recv;
    double wait_ms;  /* time the compute thread spent blocked waiting for communication */
} CommStats;

/* Initialises MPI (MPI_Init_thread) if launched under mpirun, else a 1-rank world; starts the communication
 * thread; installs a fatal() hook that aborts the whole job (MPI_Abort). Call first in main. */
void comm_init(int *argc, char ***argv);
void comm_finalize(void);
int comm_rank(void);
int comm_world(void);

/* Blocking helpers for the compute thread (small control data: losses, norms, checksums, flags). */
void comm_barrier(void);
void comm_allreduce_sum_f64(double *buf, size_t n);
void comm_allreduce_max_i64(int64_t *buf, size_t n);
void comm_bcast(void *buf, size_t bytes, int root);
/* all-gather of `bytes` from every rank into out (world * bytes). */
void comm_allgather(const void *in, void *out, size_t bytes);

/* Counters since the last call; resets them. */
void comm_stats_take(CommStats *out);

#endif
