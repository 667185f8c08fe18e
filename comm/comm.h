/*
 * comm/comm.h - the communication layer: MPI collectives on host buffers, run by one communication thread
 * that executes queued jobs in order, with every collective counted. Without mpirun the same binary runs as one
 * rank (every collective is then a local copy and counts zero bytes).
 * Not for: deciding what to send (optim/dist.h, optim/scape.h).
 */
#ifndef SCAPE_COMM_H
#define SCAPE_COMM_H

#include <stddef.h>
#include <stdint.h>

/* The kinds of collective, each counted on its own. */
typedef enum {
    COMM_ALLREDUCE = 0,   /* averaging all-reduces of fp32 buffers (gradients, SCAPE payload) */
    COMM_REDUCE_SCATTER,  /* ZeRO-1 gradient reduce-scatter */
    COMM_ALLGATHER,       /* ZeRO-1 parameter all-gather, SCAPE mask all-gather */
    COMM_BCAST,           /* broadcasts (initial parameters) */
    COMM_CONTROL,         /* small blocking helpers: barrier, f64 sums, i64 max, comm_allgather */
    COMM_NKINDS
} CommKind;

/* Per-step totals of all collectives of this rank. bytes_* follow SCAPE.md section 6's ring model
 * (all-reduce of n bytes: 2 n (N-1)/N sent and received; all-gather / reduce-scatter: n (N-1)/N). */
typedef struct {
    uint64_t calls;
    uint64_t bytes_sent;
    uint64_t bytes_recv;
    double wait_ms;  /* time the compute thread spent blocked waiting for communication */
    /* comm_stats_take only (0 from comm_stats_take_kind): wall time the communication thread spent running
     * collectives, and the CPU time it used meanwhile (busy polling shows as cpu_ms close to busy_ms). The share
     * of communication hidden behind compute is about 1 - wait_ms / busy_ms. */
    double busy_ms;
    double cpu_ms;
    /* comm_stats_take only: bytes_sent by kind of collective (CommKind above), e.g. SCAPE's payload all-reduce
     * and mask all-gather; they add up to bytes_sent up to the rounding of each division by N */
    uint64_t bytes_sent_kind[COMM_NKINDS];
} CommStats;

/* Initialises MPI (MPI_Init_thread) if launched under mpirun, else a 1-rank world; starts the communication
 * thread; installs a fatal() hook that aborts the whole job (MPI_Abort). Call first in main. */
void comm_init(int *argc, char ***argv);
void comm_finalize(void);
/* The watchdog: a collective whose request has waited `seconds` (0: never, the default) ends the job. The rank
 * tells the others it is stuck, listens for theirs for half the timeout (1..30 s), prints one line naming the
 * collective and the ranks it did not hear from (those not in a collective: stopped, hung, dead or far behind)
 * and calls MPI_Abort. Covers every collective run by the communication thread; SCAPE_COMM_SPIN=1 (plain MPI_Wait)
 * has no watchdog. Call after comm_init, before any collective that should be watched. */
void comm_set_timeout(int seconds);
int comm_rank(void);
int comm_world(void);
/* This rank's node, from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) at comm_init, so under any launcher (mpirun,
 * srun, mpiexec.hydra): its rank among the node's ranks (0.. local size - 1, in world-rank order) and their number;
 * 0 and 1 without MPI. comm_node_id: the node's lowest world rank (equal on a node, distinct across nodes). */
int comm_local_rank(void);
int comm_local_size(void);
int comm_node_id(void);
const char *comm_host(void); /* gethostname() of this rank */
/* The GPU a rank takes among `visible` devices (after CUDA_VISIBLE_DEVICES): with one visible device, that one
 * (SLURM's --gpus-per-task gives each task its own); otherwise local rank modulo visible (one each while there
 * are enough, round-robin beyond). A pure function: test_comm checks it over (local rank, local size, visible). */
int comm_gpu_for_rank(int local_rank, int local_size, int visible);
/* Records the device this rank computes on, for comm_print_placement (-1: none). */
void comm_note_gpu(int device);
/* 1 if no two ranks of one node pass the same key (at most 63 bytes; e.g. a GPU's PCI bus id: then every rank has a
 * GPU of its own). A collective: every rank calls it. */
int comm_node_keys_distinct(const char *key);
/* Rank 0 prints one line per rank, "placement: rank R on HOST: local rank L of N, T threads[, GPU g]". A
 * collective. */
void comm_print_placement(int threads);

/* Blocking helpers for the compute thread (small control data: losses, norms, checksums, flags). */
void comm_barrier(void);
void comm_allreduce_sum_f64(double *buf, size_t n);
void comm_allreduce_max_i64(int64_t *buf, size_t n);
void comm_bcast(void *buf, size_t bytes, int root);
/* all-gather of `bytes` from every rank into out (world * bytes). */
void comm_allgather(const void *in, void *out, size_t bytes);
/* The ranks-in-sync check of SCAPE.md section 9.3 (host and device updates, at the end of a run): 1 when
 * SCAPE_CHECK_SYNC=1 is in the environment; then every rank hashes what must be identical everywhere and calls
 * comm_sync_check, which all-gathers the hashes and fatal()s "sync check: rank R's <state> hash ... differs from
 * rank 0's ...; the ranks diverged" naming the first rank that differs, or prints on rank 0 "sync check: <same>
 * identical on N ranks (hash ...)". A collective: every rank calls it. */
int comm_sync_check_enabled(void);
void comm_sync_check(uint64_t hash, const char *state, const char *same);

/* Counters since the last call; resets them. */
void comm_stats_take(CommStats *out);

/* ---- Asynchronous jobs, run in order by the communication thread (added by the distributed engineer). ----
 * Every rank must queue the same jobs in the same order (as with any MPI collective). The buffers must stay
 * valid and untouched until the job is waited for. A CommHandle is a ticket: waiting for it also waits for
 * every job queued before it; 0 means "nothing" and returns at once. Only the compute thread queues and waits.
 * The blocking helpers above go through the same queue, so they are ordered with the queued jobs. */
typedef uint64_t CommHandle;


/* The parts the averaging all-reduces cut n elements into: part r has n/N elements, one more for r < n%N, and
 * starts after the earlier parts. Returns part r's size; *off (may be NULL) gets its first element. Shared with
 * the device SCAPE's NCCL bf16 all-reduce (cuda/dist_scape.cuh), which must cut as the host does. */
static inline size_t comm_part(size_t n, int world, int r, size_t *off) {
    const size_t N = (size_t)world, q = n / N, rem = n % N, rr = (size_t)r;
    if (off) *off = rr * q + (rr < rem ? rr : rem);
    return q + (rr < rem);
}

/* buf (n floats) <- mean over ranks of buf, in place. The result is bit-identical on every rank (it is computed
 * as reduce-scatter + all-gather, so each element is summed once, in one place). Bytes: 2 * 4n (N-1)/N. */
CommHandle comm_iallreduce_avg_f32(float *buf, size_t n);
/* The reduced-precision payload of SCAPE (SCAPE.md section 7): buf holds n bf16 values (common/bf16.h bit
 * patterns); afterwards every rank holds the same b = bf16(mean over ranks), computed exactly as follows. The n
 * elements are cut into world consecutive parts as comm_iallreduce_avg_f32 cuts them (n/N, the first n%N one more);
 * the owner of part r receives every rank's bf16 values of it (an all-to-all), sums them in fp32 in rank order,
 * divides by N in fp32 and rounds the mean to bf16 (nearest, ties to even); the parts are then all-gathered in
 * bf16. err (n floats, NULL to skip) receives, on this rank's own part, the fp32 mean minus its bf16 rounding
 * (exact), and 0 elsewhere: the caller feeds it back (dist.c adds N * err to this rank's residual, so the mean
 * residual keeps what rounding the mean lost). One rank: b = buf, err = 0. Deterministic, independent of the MPI
 * library's reduction algorithms. Counted as an all-reduce of 2n bytes: 2 * 2n (N-1)/N sent and received. */
CommHandle comm_iallreduce_avg_bf16(uint16_t *buf, size_t n, float *err);
/* in (sum_r counts[r] floats, identical layout on every rank) is summed over ranks and divided by N; this rank
 * gets its part, counts[rank] floats starting at sum_{r<rank} counts[r], written to out. counts has world
 * entries and is copied. Bytes: 4 * sum(counts) (N-1)/N. */
CommHandle comm_ireduce_scatter_avg_f32(const float *in, float *out, const size_t *counts);
/* The bf16 payload of SCAPE with ZeRO-1 (optim/dist_scape_zero.c): in holds sum_r counts[r] bf16 values (common/
 * bf16.h bit patterns, the same layout on every rank); the owner of part r (counts[r] values starting at the sum of
 * the earlier counts) receives every rank's values of it (an all-to-all), sums them in fp32 in rank order, divides
 * by N in fp32 and rounds the mean to bf16 (nearest, ties to even) into out (counts[rank] values); err (may be NULL,
 * counts[rank] floats) gets the fp32 mean minus its rounding, exact. The arithmetic of comm_iallreduce_avg_bf16,
 * on the owners' parts instead of equal ones. One rank: out = in, err = 0. Bytes: 2 * sum(counts) (N-1)/N. */
CommHandle comm_ireduce_scatter_avg_bf16(const uint16_t *in, uint16_t *out, float *err, const size_t *counts);
/* In place all-gather: buf holds world consecutive parts, part r = counts[r] elements of elem_bytes bytes;
 * this rank's part is already in place, the others are filled in. Bytes: total (N-1)/N. */
CommHandle comm_iallgatherv(void *buf, const size_t *counts, size_t elem_bytes);
/* comm_iallgatherv with every part count elements (topk-ef's buckets, 1-bit Adam's sign blocks, DeMo's pairs). */
CommHandle comm_iallgather(void *buf, size_t count, size_t elem_bytes);
/* All-gather of byte strings of different lengths (SCAPE's coded mask segments): this rank sends mine[0..n)
 * (n <= cap); afterwards out + r * cap holds rank r's sizes[r] bytes, for every rank r (out: world * cap bytes,
 * sizes: world entries, both written by the job and valid once it is waited for). The lengths travel first
 * (8 bytes a rank), then the bytes. fatal() if a rank's length exceeds cap. NOT counted in the statistics, since
 * the other ranks' lengths are not known when it is queued: once waited for, the caller counts it with
 * comm_stats_add(COMM_ALLGATHER, sum of sizes + 8 * world, 0). */
CommHandle comm_iallgather_bytes(const void *mine, size_t n, void *out, size_t cap, size_t *sizes);
/* All-to-all of equal blocks (1-bit Adam's signs to the owners of their chunks, optim/dist_onebit_adam.c): in holds
 * world blocks of `block` bytes, block r for rank r; afterwards out block r holds what rank r sent this rank (its own
 * block copied). in and out must not overlap. Counted as a reduce-scatter of world * block bytes (the first half of
 * an owner-computed reduction, like the bf16 all-reduce's all-to-all): block (N-1) sent and received. */
CommHandle comm_ialltoall_bytes(const void *in, void *out, size_t block);
CommHandle comm_ibcast(void *buf, size_t bytes, int root);
/* Blocks until job h (and all before it) finished; the time blocked is added to wait_ms of h's kind. */
void comm_wait(CommHandle h);
/* Per-kind counters since the last call of this function (independent of comm_stats_take); resets them. */
void comm_stats_take_kind(CommStats out[COMM_NKINDS]);
/* Counts one collective that ran outside this module (NCCL on the device, cuda/dist.cu) in the same per-step
 * and per-kind statistics, so log.jsonl's comm_bytes_* mean the same on every backend. n_bytes is the payload
 * as the functions above define it (all-reduce: the buffer; reduce-scatter: the whole input; all-gather: the
 * whole output; broadcast: the buffer); the ring formulas of section 6 turn it into bytes sent and received
 * (all-reduce 2 n (N-1)/N, the others n (N-1)/N). wait_ms: time the compute thread blocked on it. Compute thread
 * only, like every other call here. */
void comm_stats_add(CommKind kind, uint64_t n_bytes, double wait_ms);
/* 1 when running under MPI (launched by mpirun), 0 for the no-MPI single-rank world. */
int comm_using_mpi(void);

#endif
