/*
 * comm/comm.c - the communication layer (see comm.h): Open MPI collectives on host buffers, executed in order by
 * one communication thread from a ticketed job queue, so that backward can queue a bucket's collective and go on.
 * Not for: deciding what to send (dist.c, scape.c).
 *
 * Threading: MPI is initialised with MPI_THREAD_MULTIPLE requested (SERIALIZED at least is required). After
 * comm_init every collective runs on the communication thread, so collectives are issued in queue order on
 * every rank; the compute thread only calls MPI for MPI_Abort (fatal hook), which is why MULTIPLE is preferred.
 * Without mpirun (no Open MPI / PMIx environment) MPI is not touched at all and the world is one rank.
 *
 * Waiting policy: Open MPI's blocking collectives busy-poll, so a communication thread blocked on a peer that is
 * still in backward burns a whole core that the compute thread (OpenMP, BLAS) needs. Every collective is
 * therefore started nonblocking (MPI_I*) and completed by MPI_Test with sleeps that grow by 1.5x from 10 us to
 * 500 us (SCAPE_COMM_SLEEP_MAX_US changes the cap). MPI_Test also drives Open MPI's progress, so a transfer in
 * flight keeps moving at every test. SCAPE_COMM_SPIN=1 restores plain MPI_Wait, for comparison
 * (comm/bench_comm.c).
 */
#include "comm/comm.h"

#include <limits.h>
#include <stdio.h>
#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/bf16.h"
#include "common/util.h"

#define QCAP 4096 /* jobs in flight; enough for every bucket of a step plus the mask all-gather */

typedef enum { JOB_ALLREDUCE_AVG, JOB_ALLREDUCE_AVG_BF16, JOB_REDUCE_SCATTER_AVG, JOB_REDUCE_SCATTER_AVG_BF16, JOB_ALLGATHERV, JOB_ALLGATHER_BYTES, JOB_ALLTOALL_BYTES, JOB_BCAST,
               JOB_SUM_F64, JOB_MAX_I64, JOB_BARRIER, JOB_STOP } JobOp;

typedef struct {
    JobOp op;
    CommKind kind;
    void *buf;          /* in/out buffer */
    void *out;          /* reduce-scatter output; bf16 all-reduce: the rounding error (float, may be NULL) */
    float *err;         /* bf16 reduce-scatter: the rounding error of this rank's part */
    size_t n;           /* elements (allreduce, bcast bytes, control) */
    size_t elem_bytes;  /* allgatherv */
    size_t *counts;     /* world entries (reduce-scatter, allgatherv), owned by the job */
    size_t *sizes;      /* all-gather of bytes: the caller's (world) array the job fills with every rank's length */
    int root;
} Job;

static struct {
    int inited, use_mpi, rank, world;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    Job q[QCAP];
    uint64_t next_ticket; /* ticket of the next queued job (first is 1) */
    uint64_t done;        /* highest finished ticket */
    /* Byte counters hold numerators n * (N-1) of the ring formulas, divided by N when taken, so that many
     * bucket-sized calls sum to exactly the formula applied to their total. */
    uint64_t calls[2][COMM_NKINDS], sent_num[2][COMM_NKINDS], recv_num[2][COMM_NKINDS];
    double wait_s[2][COMM_NKINDS];
    float *scratch; /* comm-thread scratch for the averaging all-reduce */
    size_t scratch_n;
    uint16_t *scratch16; /* comm-thread scratch of the bf16 all-reduce: world parts received, then the mean */
    size_t scratch16_n;
    int spin;        /* SCAPE_COMM_SPIN=1: busy-wait on requests */
    long sleep_max_ns; /* longest sleep between tests (SCAPE_COMM_SLEEP_MAX_US, default 500) */
    double busy_s;   /* wall time the comm thread spent running jobs, since the last comm_stats_take */
    double cpu_s;    /* CPU time the comm thread used meanwhile */
    /* whole-run totals per kind for SCAPE_COMM_REPORT=1 (printed by comm_finalize) */
    uint64_t run_calls[COMM_NKINDS], run_sent_num[COMM_NKINDS];
    double run_wait_s[COMM_NKINDS], run_busy_s[COMM_NKINDS], run_cpu_s[COMM_NKINDS];
    /* watchdog (comm_set_timeout): the job the comm thread runs, for the report; a communicator of its own */
    int timeout_s;
    JobOp cur_op;
    uint64_t cur_ticket;
    MPI_Comm wd_comm;
    /* this rank's node (MPI_Comm_split_type shared): local rank and size, the node's lowest world rank, its name */
    int local_rank, local_size, node_id;
    char host[64];
} C;

static const char *job_name(JobOp op) {
    switch (op) {
    case JOB_ALLREDUCE_AVG: return "an fp32 all-reduce (gradients or SCAPE payload)";
    case JOB_ALLREDUCE_AVG_BF16: return "a bf16 all-reduce (SCAPE payload)";
    case JOB_REDUCE_SCATTER_AVG: return "a reduce-scatter (ZeRO-1 gradients)";
    case JOB_REDUCE_SCATTER_AVG_BF16: return "a bf16 reduce-scatter (SCAPE payload with ZeRO-1)";
    case JOB_ALLGATHERV: return "an all-gather (parameters or masks)";
    case JOB_ALLGATHER_BYTES: return "an all-gather of bytes (coded masks, checkpoint checksums)";
    case JOB_ALLTOALL_BYTES: return "an all-to-all of bytes (1-bit Adam's signs)";
    case JOB_BCAST: return "a broadcast";
    case JOB_SUM_F64: return "a sum all-reduce (step loss, stop flag, norms)";
    case JOB_MAX_I64: return "a max all-reduce";
    case JOB_BARRIER: return "a barrier";
    case JOB_STOP: break;
    }
    return "a collective";
}

/* The watchdog fires on the communication thread when one request has waited C.timeout_s seconds. It tells every
 * other rank so (a small message on C.wd_comm), listens for the same message from the others for a grace period,
 * then names the ranks it did not hear from (those not waiting in a collective: stopped, hung, dead, or still
 * computing) on stderr and ends the whole job with MPI_Abort. A rank that is itself stopped says nothing; the
 * others name it. */
static void NORETURN watchdog_fire(double waited) {
    int N = C.world, msg[2] = {C.rank, (int)(C.cur_ticket & 0x7fffffff)};
    MPI_Request *rq = xcalloc((size_t)N, sizeof(MPI_Request), "watchdog requests");
    for (int p = 0; p < N; p++)
        if (p != C.rank) MPI_Isend(msg, 2, MPI_INT, p, 7171, C.wd_comm, &rq[p]);
    char *heard = xcalloc((size_t)N, 1, "watchdog ranks");
    heard[C.rank] = 1;
    int n_heard = 1;
    double grace = C.timeout_s / 2.0 < 1.0 ? 1.0 : C.timeout_s / 2.0 > 30.0 ? 30.0 : C.timeout_s / 2.0;
    double t0 = now_seconds();
    while (n_heard < N && now_seconds() - t0 < grace) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, 7171, C.wd_comm, &flag, &st);
        if (!flag) {
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
            continue;
        }
        int got[2];
        MPI_Recv(got, 2, MPI_INT, st.MPI_SOURCE, 7171, C.wd_comm, MPI_STATUS_IGNORE);
        if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < N && !heard[st.MPI_SOURCE]) {
            heard[st.MPI_SOURCE] = 1;
            n_heard++;
        }
    }
    char missing[512] = "";
    size_t len = 0;
    int n_missing = 0;
    for (int p = 0; p < N && len + 16 < sizeof missing; p++)
        if (!heard[p]) len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d", n_missing++ ? ", " : "", p);
    fflush(stdout);
    if (n_missing)
        fprintf(stderr, "error: comm watchdog: rank %d waited %.0f s in %s (collective #%llu); rank%s %s did not reach "
                "it (stopped, hung, dead or far behind): ending the job on every rank (--comm-timeout %d); continue "
                "with --resume latest once every node is healthy\n", C.rank, waited, job_name(C.cur_op),
                (unsigned long long)C.cur_ticket, n_missing == 1 ? "" : "s", missing, C.timeout_s);
    else
        fprintf(stderr, "error: comm watchdog: rank %d waited %.0f s in %s (collective #%llu) and every rank is waiting "
                "too: the ranks are not in the same collective (a bug) or the network is down; ending the job "
                "(--comm-timeout %d)\n", C.rank, waited, job_name(C.cur_op), (unsigned long long)C.cur_ticket,
                C.timeout_s);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1); /* not reached */
}

void comm_set_timeout(int seconds) { C.timeout_s = seconds > 0 ? seconds : 0; }

/* Completes one nonblocking request (see the waiting policy at the top). */
static void wait_req(MPI_Request *rq) {
    if (C.spin) {
        MPI_Wait(rq, MPI_STATUS_IGNORE);
        return;
    }
    long ns = 10000;
    double t0 = C.timeout_s ? now_seconds() : 0.0;
    for (unsigned it = 1;; it++) {
        int done = 0;
        MPI_Test(rq, &done, MPI_STATUS_IGNORE);
        if (done) return;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        if (ns < C.sleep_max_ns) ns += ns / 2;
        if (C.timeout_s && it % 64 == 0) {
            double waited = now_seconds() - t0;
            if (waited >= C.timeout_s) watchdog_fire(waited);
        }
    }
}

static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void abort_hook(int status) {
    if (C.use_mpi) MPI_Abort(MPI_COMM_WORLD, status ? status : 1);
}

int comm_rank(void) { return C.inited ? C.rank : 0; }
int comm_world(void) { return C.inited ? C.world : 1; }
int comm_local_rank(void) { return C.inited ? C.local_rank : 0; }
int comm_local_size(void) { return C.inited ? C.local_size : 1; }
int comm_node_id(void) { return C.inited ? C.node_id : 0; }
const char *comm_host(void) { return C.host[0] ? C.host : "?"; }

int comm_using_mpi(void) { return C.use_mpi; }

static int to_int(size_t n, const char *what) {
    if (n > (size_t)INT_MAX) fatal("comm: %s of %zu elements exceeds MPI's int count; use more ranks or smaller buckets", what, n);
    return (int)n;
}

/* ---- the communication thread ---- */

/* comm_part's parts of n elements as MPI's int counts and displacements (world entries each, malloc'd) */
static void allreduce_parts(size_t n, int **cnt, int **dsp) {
    *cnt = xmalloc((size_t)C.world * sizeof(int), "comm counts");
    *dsp = xmalloc((size_t)C.world * sizeof(int), "comm displacements");
    for (int r = 0; r < C.world; r++) {
        size_t off;
        (*cnt)[r] = to_int(comm_part(n, C.world, r, &off), "all-reduce part");
        (*dsp)[r] = to_int(off, "all-reduce offset");
    }
}

static void run_allreduce_avg(float *buf, size_t n) {
    int N = C.world;
    if (!C.use_mpi || N == 1 || n == 0) return;
    int *cnt, *dsp;
    allreduce_parts(n, &cnt, &dsp);
    size_t mine = (size_t)cnt[C.rank];
    if (mine > C.scratch_n) {
        free(C.scratch);
        C.scratch = xmalloc((mine ? mine : 1) * sizeof(float), "comm scratch");
        C.scratch_n = mine;
    }
    MPI_Request rq;
    MPI_Ireduce_scatter(buf, C.scratch, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &rq);
    wait_req(&rq);
    float fN = (float)N;
    for (size_t i = 0; i < mine; i++) C.scratch[i] /= fN;
    MPI_Iallgatherv(C.scratch, cnt[C.rank], MPI_FLOAT, buf, cnt, dsp, MPI_FLOAT, MPI_COMM_WORLD, &rq);
    wait_req(&rq);
    free(cnt);
    free(dsp);
}

/* The owner's part of a bf16 average (comm.h): recv holds every rank's `mine` values, rank after rank; out gets the
 * fp32 sum in rank order divided by N, rounded to bf16, and err (may be NULL) the exact rounding error. Shared by
 * the all-reduce and the reduce-scatter, so both give the same bits. */
static void bf16_mean_of_parts(const uint16_t *recv, size_t mine, int N, uint16_t *out, float *err) {
    const float fN = (float)N;
    for (size_t i = 0; i < mine; i++) {
        float s = 0.0f;
        for (int r = 0; r < N; r++) s += bf16_to_f32(recv[(size_t)r * mine + i]);
        float mean = s / fN;
        uint16_t b = bf16_from_f32(mean);
        out[i] = b;
        if (err) err[i] = mean - bf16_to_f32(b);
    }
}

/* comm_iallreduce_avg_bf16 (comm.h gives the exact arithmetic): an all-to-all of the parts, the owner's fp32 sum in
 * rank order, bf16 rounding of the mean, an all-gather of the rounded parts. */
static void run_allreduce_avg_bf16(uint16_t *buf, float *err, size_t n) {
    int N = C.world;
    if (err) memset(err, 0, n * sizeof(float));
    if (!C.use_mpi || N == 1 || n == 0) return;
    int *cnt, *dsp;
    allreduce_parts(n, &cnt, &dsp);
    int *rcnt = xmalloc((size_t)N * sizeof(int), "comm counts");
    int *rdsp = xmalloc((size_t)N * sizeof(int), "comm displacements");
    size_t mine = (size_t)cnt[C.rank];
    for (int r = 0; r < N; r++) {
        rcnt[r] = (int)mine;
        rdsp[r] = to_int((size_t)r * mine, "all-to-all offset");
    }
    size_t need = (size_t)N * mine;
    if (need > C.scratch16_n) {
        free(C.scratch16);
        C.scratch16 = xmalloc((need ? need : 1) * sizeof(uint16_t), "comm bf16 scratch");
        C.scratch16_n = need;
    }
    MPI_Request rq;
    MPI_Ialltoallv(buf, cnt, dsp, MPI_UINT16_T, C.scratch16, rcnt, rdsp, MPI_UINT16_T, MPI_COMM_WORLD, &rq);
    wait_req(&rq);
    bf16_mean_of_parts(C.scratch16, mine, N, buf + dsp[C.rank], err ? err + dsp[C.rank] : NULL);
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, dsp, MPI_UINT16_T, MPI_COMM_WORLD, &rq);
    wait_req(&rq);
    free(cnt);
    free(dsp);
    free(rcnt);
    free(rdsp);
}

/* comm_ireduce_scatter_avg_bf16 (comm.h): an all-to-all of each owner's part, the owner's fp32 sum in rank order,
 * the mean rounded to bf16 and its rounding error; the arithmetic of run_allreduce_avg_bf16 on other parts. */
static void run_reduce_scatter_avg_bf16(const uint16_t *in, uint16_t *out, float *err, const size_t *counts) {
    int N = C.world;
    size_t off = 0, mine = counts[C.rank];
    for (int r = 0; r < C.rank; r++) off += counts[r];
    if (err) memset(err, 0, mine * sizeof(float));
    if (!C.use_mpi || N == 1) {
        memmove(out, in + off, mine * sizeof(uint16_t));
        return;
    }
    int *scnt = xmalloc((size_t)N * sizeof(int), "comm counts"), *sdsp = xmalloc((size_t)N * sizeof(int), "comm counts");
    int *rcnt = xmalloc((size_t)N * sizeof(int), "comm counts"), *rdsp = xmalloc((size_t)N * sizeof(int), "comm counts");
    size_t o = 0;
    for (int r = 0; r < N; r++) {
        scnt[r] = to_int(counts[r], "reduce-scatter part");
        sdsp[r] = to_int(o, "reduce-scatter offset");
        o += counts[r];
        rcnt[r] = to_int(mine, "reduce-scatter part");
        rdsp[r] = to_int((size_t)r * mine, "all-to-all offset");
    }
    size_t need = (size_t)N * mine;
    if (need > C.scratch16_n) {
        free(C.scratch16);
        C.scratch16 = xmalloc((need ? need : 1) * sizeof(uint16_t), "comm bf16 scratch");
        C.scratch16_n = need;
    }
    MPI_Request rq;
    MPI_Ialltoallv(in, scnt, sdsp, MPI_UINT16_T, C.scratch16, rcnt, rdsp, MPI_UINT16_T, MPI_COMM_WORLD, &rq);
    wait_req(&rq);
    bf16_mean_of_parts(C.scratch16, mine, N, out, err);
    free(scnt);
    free(sdsp);
    free(rcnt);
    free(rdsp);
}

static void run_job(Job *j) {
    int N = C.world;
    switch (j->op) {
    case JOB_ALLREDUCE_AVG: run_allreduce_avg(j->buf, j->n); break;
    case JOB_ALLREDUCE_AVG_BF16: run_allreduce_avg_bf16(j->buf, j->out, j->n); break;
    case JOB_REDUCE_SCATTER_AVG_BF16: run_reduce_scatter_avg_bf16(j->buf, j->out, j->err, j->counts); break;
    case JOB_REDUCE_SCATTER_AVG: {
        size_t off = 0;
        for (int r = 0; r < C.rank; r++) off += j->counts[r];
        size_t mine = j->counts[C.rank];
        if (!C.use_mpi || N == 1) {
            memmove(j->out, (const float *)j->buf + off, mine * sizeof(float));
            break;
        }
        int *cnt = xmalloc((size_t)N * sizeof(int), "comm counts");
        for (int r = 0; r < N; r++) cnt[r] = to_int(j->counts[r], "reduce-scatter part");
        MPI_Request rq;
        MPI_Ireduce_scatter(j->buf, j->out, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &rq);
        wait_req(&rq);
        float fN = (float)N, *o = j->out;
        for (size_t i = 0; i < mine; i++) o[i] /= fN;
        free(cnt);
        break;
    }
    case JOB_ALLGATHERV: {
        if (!C.use_mpi || N == 1) break;
        MPI_Datatype t;
        MPI_Type_contiguous(to_int(j->elem_bytes, "element size"), MPI_BYTE, &t);
        MPI_Type_commit(&t);
        int *cnt = xmalloc((size_t)N * sizeof(int), "comm counts");
        int *dsp = xmalloc((size_t)N * sizeof(int), "comm displacements");
        size_t off = 0;
        for (int r = 0; r < N; r++) {
            cnt[r] = to_int(j->counts[r], "all-gather part");
            dsp[r] = to_int(off, "all-gather offset");
            off += j->counts[r];
        }
        MPI_Request rq;
        MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, j->buf, cnt, dsp, t, MPI_COMM_WORLD, &rq);
        wait_req(&rq);
        MPI_Type_free(&t);
        free(cnt);
        free(dsp);
        break;
    }
    case JOB_ALLGATHER_BYTES: {
        /* the lengths first (8 bytes a rank), then each rank's bytes into its slot of `elem_bytes` (the cap) */
        uint64_t mine = j->n, *len = xmalloc((size_t)N * sizeof(uint64_t), "comm lengths");
        if (C.use_mpi && N > 1) {
            MPI_Request rq;
            MPI_Iallgather(&mine, 1, MPI_UINT64_T, len, 1, MPI_UINT64_T, MPI_COMM_WORLD, &rq);
            wait_req(&rq);
        } else {
            len[0] = mine;
        }
        int *cnt = xmalloc((size_t)N * sizeof(int), "comm counts");
        int *dsp = xmalloc((size_t)N * sizeof(int), "comm displacements");
        for (int r = 0; r < N; r++) {
            if (len[r] > j->elem_bytes)
                fatal("all-gather of coded masks: rank %d sends %llu bytes, more than the %zu it may; the ranks run "
                      "different builds or settings", r, (unsigned long long)len[r], j->elem_bytes);
            j->sizes[r] = (size_t)len[r];
            cnt[r] = to_int(len[r], "all-gather part");
            dsp[r] = to_int((size_t)r * j->elem_bytes, "all-gather offset");
        }
        char *out = j->out;
        if (C.use_mpi && N > 1) {
            MPI_Request rq;
            MPI_Iallgatherv(j->buf, cnt[C.rank], MPI_BYTE, out, cnt, dsp, MPI_BYTE, MPI_COMM_WORLD, &rq);
            wait_req(&rq);
        } else {
            memcpy(out, j->buf, (size_t)mine);
        }
        free(len);
        free(cnt);
        free(dsp);
        break;
    }
    case JOB_ALLTOALL_BYTES: {
        if (!C.use_mpi || N == 1) {
            memcpy(j->out, j->buf, j->n);
            break;
        }
        MPI_Request rq;
        int blk = to_int(j->n, "all-to-all block");
        MPI_Ialltoall(j->buf, blk, MPI_BYTE, j->out, blk, MPI_BYTE, MPI_COMM_WORLD, &rq);
        wait_req(&rq);
        break;
    }
    case JOB_BCAST: {
        if (!C.use_mpi || N == 1) break;
        /* chunked so byte counts beyond INT_MAX work */
        char *p = j->buf;
        for (size_t done = 0; done < j->n;) {
            size_t c = j->n - done < (1u << 30) ? j->n - done : (1u << 30);
            MPI_Request rq;
            MPI_Ibcast(p + done, (int)c, MPI_BYTE, j->root, MPI_COMM_WORLD, &rq);
            wait_req(&rq);
            done += c;
        }
        break;
    }
    case JOB_SUM_F64: {
        if (!C.use_mpi || N == 1) break;
        /* all-gather then sum in rank order: the same bits on every rank and in every run */
        double *all = xmalloc((size_t)N * j->n * sizeof(double), "comm f64 gather");
        MPI_Request rq;
        MPI_Iallgather(j->buf, to_int(j->n, "f64 sum"), MPI_DOUBLE, all, (int)j->n, MPI_DOUBLE, MPI_COMM_WORLD, &rq);
        wait_req(&rq);
        double *b = j->buf;
        for (size_t i = 0; i < j->n; i++) {
            double s = 0;
            for (int r = 0; r < N; r++) s += all[(size_t)r * j->n + i];
            b[i] = s;
        }
        free(all);
        break;
    }
    case JOB_MAX_I64:
        if (C.use_mpi && N > 1) {
            MPI_Request rq;
            MPI_Iallreduce(MPI_IN_PLACE, j->buf, to_int(j->n, "i64 max"), MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD, &rq);
            wait_req(&rq);
        }
        break;
    case JOB_BARRIER:
        if (C.use_mpi && N > 1) {
            MPI_Request rq;
            MPI_Ibarrier(MPI_COMM_WORLD, &rq);
            wait_req(&rq);
        }
        break;
    case JOB_STOP: break;
    }
}

static void *comm_thread_main(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&C.mu);
        while (C.done + 1 == C.next_ticket) pthread_cond_wait(&C.cv_job, &C.mu);
        uint64_t ticket = C.done + 1;
        Job j = C.q[(ticket - 1) % QCAP];
        pthread_mutex_unlock(&C.mu);
        C.cur_op = j.op; /* for the watchdog's report (this thread only) */
        C.cur_ticket = ticket;

        double w0 = now_seconds(), c0 = thread_cpu_seconds();
        run_job(&j);
        free(j.counts);
        double dw = now_seconds() - w0, dc = thread_cpu_seconds() - c0;

        pthread_mutex_lock(&C.mu);
        C.busy_s += dw;
        C.cpu_s += dc;
        C.run_busy_s[j.kind] += dw;
        C.run_cpu_s[j.kind] += dc;
        C.done = ticket;
        pthread_cond_broadcast(&C.cv_done);
        pthread_mutex_unlock(&C.mu);
        if (j.op == JOB_STOP) return NULL;
    }
}

/* ---- queueing (compute thread) ---- */

static void count(CommKind k, uint64_t sent_num, uint64_t recv_num) {
    for (int s = 0; s < 2; s++) {
        C.calls[s][k]++;
        C.sent_num[s][k] += sent_num;
        C.recv_num[s][k] += recv_num;
    }
    C.run_calls[k]++;
    C.run_sent_num[k] += sent_num;
}

static CommHandle enqueue(const Job *j) {
    if (!C.inited) fatal("comm: collective used before comm_init(); call comm_init first in main");
    pthread_mutex_lock(&C.mu);
    while (C.next_ticket - 1 - C.done >= QCAP) pthread_cond_wait(&C.cv_done, &C.mu);
    uint64_t t = C.next_ticket++;
    C.q[(t - 1) % QCAP] = *j;
    pthread_cond_signal(&C.cv_job);
    pthread_mutex_unlock(&C.mu);
    return t;
}

void comm_wait(CommHandle h) {
    if (h == 0) return;
    CommKind k = C.q[(h - 1) % QCAP].kind; /* slot stays valid: only this thread queues new jobs */
    double t0 = now_seconds();
    pthread_mutex_lock(&C.mu);
    while (C.done < h) pthread_cond_wait(&C.cv_done, &C.mu);
    pthread_mutex_unlock(&C.mu);
    double dt = now_seconds() - t0;
    C.wait_s[0][k] += dt;
    C.wait_s[1][k] += dt;
    C.run_wait_s[k] += dt;
}

static size_t *copy_counts(const size_t *counts, size_t *total) {
    size_t *c = xmalloc((size_t)C.world * sizeof(size_t), "comm counts");
    *total = 0;
    for (int r = 0; r < C.world; r++) {
        c[r] = counts[r];
        *total += counts[r];
    }
    return c;
}

CommHandle comm_iallreduce_avg_f32(float *buf, size_t n) {
    uint64_t b = 2ull * 4ull * n * (uint64_t)(C.world - 1);
    count(COMM_ALLREDUCE, b, b);
    Job j = {.op = JOB_ALLREDUCE_AVG, .kind = COMM_ALLREDUCE, .buf = buf, .n = n};
    return enqueue(&j);
}

CommHandle comm_iallreduce_avg_bf16(uint16_t *buf, size_t n, float *err) {
    uint64_t b = 2ull * 2ull * n * (uint64_t)(C.world - 1);
    count(COMM_ALLREDUCE, b, b);
    Job j = {.op = JOB_ALLREDUCE_AVG_BF16, .kind = COMM_ALLREDUCE, .buf = buf, .out = err, .n = n};
    return enqueue(&j);
}

CommHandle comm_ireduce_scatter_avg_f32(const float *in, float *out, const size_t *counts) {
    size_t total;
    Job j = {.op = JOB_REDUCE_SCATTER_AVG, .kind = COMM_REDUCE_SCATTER, .buf = (void *)in, .out = out};
    j.counts = copy_counts(counts, &total);
    uint64_t b = 4ull * total * (uint64_t)(C.world - 1);
    count(COMM_REDUCE_SCATTER, b, b);
    return enqueue(&j);
}

CommHandle comm_ireduce_scatter_avg_bf16(const uint16_t *in, uint16_t *out, float *err, const size_t *counts) {
    size_t total;
    Job j = {.op = JOB_REDUCE_SCATTER_AVG_BF16, .kind = COMM_REDUCE_SCATTER, .buf = (void *)in, .out = out, .err = err};
    j.counts = copy_counts(counts, &total);
    uint64_t b = 2ull * total * (uint64_t)(C.world - 1);
    count(COMM_REDUCE_SCATTER, b, b);
    return enqueue(&j);
}

CommHandle comm_iallgatherv(void *buf, const size_t *counts, size_t elem_bytes) {
    size_t total;
    Job j = {.op = JOB_ALLGATHERV, .kind = COMM_ALLGATHER, .buf = buf, .elem_bytes = elem_bytes};
    j.counts = copy_counts(counts, &total);
    uint64_t b = (uint64_t)elem_bytes * total * (uint64_t)(C.world - 1);
    count(COMM_ALLGATHER, b, b);
    return enqueue(&j);
}

CommHandle comm_iallgather(void *buf, size_t count, size_t elem_bytes) {
    size_t *counts = xmalloc((size_t)C.world * sizeof(size_t), "comm counts");
    for (int r = 0; r < C.world; r++) counts[r] = count;
    CommHandle h = comm_iallgatherv(buf, counts, elem_bytes);
    free(counts);
    return h;
}

CommHandle comm_iallgather_bytes(const void *mine, size_t n, void *out, size_t cap, size_t *sizes) {
    if (n > cap) fatal("comm_iallgather_bytes: %zu bytes exceed the slot of %zu", n, cap);
    Job j = {.op = JOB_ALLGATHER_BYTES, .kind = COMM_ALLGATHER, .buf = (void *)mine, .out = out, .n = n,
             .elem_bytes = cap, .sizes = sizes};
    return enqueue(&j);
}

CommHandle comm_ialltoall_bytes(const void *in, void *out, size_t block) {
    uint64_t b = (uint64_t)block * (uint64_t)C.world * (uint64_t)(C.world - 1);
    count(COMM_REDUCE_SCATTER, b, b);
    Job j = {.op = JOB_ALLTOALL_BYTES, .kind = COMM_REDUCE_SCATTER, .buf = (void *)in, .out = out, .n = block};
    return enqueue(&j);
}

CommHandle comm_ibcast(void *buf, size_t bytes, int root) {
    if (root < 0 || root >= comm_world()) fatal("comm_bcast: root %d outside the world of %d ranks", root, comm_world());
    /* counted as scatter + all-gather (the large-message broadcast): n (N-1)/N each way */
    uint64_t b = (uint64_t)bytes * (uint64_t)(C.world - 1);
    count(COMM_BCAST, b, b);
    Job j = {.op = JOB_BCAST, .kind = COMM_BCAST, .buf = buf, .n = bytes, .root = root};
    return enqueue(&j);
}

void comm_stats_add(CommKind kind, uint64_t n_bytes, double wait_ms) {
    if ((int)kind < 0 || (int)kind >= (int)COMM_NKINDS) fatal("comm_stats_add: kind %d outside 0..%d", (int)kind, COMM_NKINDS - 1);
    uint64_t b = (kind == COMM_ALLREDUCE ? 2ull : 1ull) * n_bytes * (uint64_t)(comm_world() - 1);
    count(kind, b, b);
    double s = 1e-3 * wait_ms;
    C.wait_s[0][kind] += s;
    C.wait_s[1][kind] += s;
    C.run_wait_s[kind] += s;
}

void comm_barrier(void) {
    count(COMM_CONTROL, 0, 0);
    Job j = {.op = JOB_BARRIER, .kind = COMM_CONTROL};
    comm_wait(enqueue(&j));
}

void comm_allreduce_sum_f64(double *buf, size_t n) {
    uint64_t b = 8ull * n * (uint64_t)(C.world - 1) * (uint64_t)C.world; /* all-gather of N * 8n bytes */
    count(COMM_CONTROL, b, b);
    Job j = {.op = JOB_SUM_F64, .kind = COMM_CONTROL, .buf = buf, .n = n};
    comm_wait(enqueue(&j));
}

void comm_allreduce_max_i64(int64_t *buf, size_t n) {
    uint64_t b = 2ull * 8ull * n * (uint64_t)(C.world - 1);
    count(COMM_CONTROL, b, b);
    Job j = {.op = JOB_MAX_I64, .kind = COMM_CONTROL, .buf = buf, .n = n};
    comm_wait(enqueue(&j));
}

void comm_bcast(void *buf, size_t bytes, int root) { comm_wait(comm_ibcast(buf, bytes, root)); }

void comm_allgather(const void *in, void *out, size_t bytes) {
    memmove((char *)out + (size_t)comm_rank() * bytes, in, bytes);
    size_t *counts = xmalloc((size_t)comm_world() * sizeof(size_t), "comm counts");
    for (int r = 0; r < comm_world(); r++) counts[r] = bytes;
    size_t total;
    Job j = {.op = JOB_ALLGATHERV, .kind = COMM_CONTROL, .buf = out, .elem_bytes = 1};
    j.counts = copy_counts(counts, &total);
    free(counts);
    uint64_t b = (uint64_t)total * (uint64_t)(C.world - 1);
    count(COMM_CONTROL, b, b);
    comm_wait(enqueue(&j));
}

static void take(int s, CommStats *out, int k) {
    uint64_t N = (uint64_t)comm_world();
    out->calls = C.calls[s][k];
    out->bytes_sent = C.sent_num[s][k] / N;
    out->bytes_recv = C.recv_num[s][k] / N;
    out->wait_ms = 1e3 * C.wait_s[s][k];
    C.calls[s][k] = C.sent_num[s][k] = C.recv_num[s][k] = 0;
    C.wait_s[s][k] = 0;
    out->busy_ms = out->cpu_ms = 0;
}

void comm_stats_take(CommStats *out) {
    /* totals: sum the per-kind numerators first so the division by N is applied once */
    uint64_t N = (uint64_t)comm_world(), calls = 0, sn = 0, rn = 0;
    double w = 0;
    uint64_t kind_sent[COMM_NKINDS];
    for (int k = 0; k < COMM_NKINDS; k++) {
        calls += C.calls[0][k];
        kind_sent[k] = C.sent_num[0][k] / N;
        sn += C.sent_num[0][k];
        rn += C.recv_num[0][k];
        w += C.wait_s[0][k];
        C.calls[0][k] = C.sent_num[0][k] = C.recv_num[0][k] = 0;
        C.wait_s[0][k] = 0;
    }
    out->calls = calls;
    for (int k = 0; k < COMM_NKINDS; k++) out->bytes_sent_kind[k] = kind_sent[k];
    out->bytes_sent = sn / N;
    out->bytes_recv = rn / N;
    out->wait_ms = 1e3 * w;
    pthread_mutex_lock(&C.mu);
    out->busy_ms = 1e3 * C.busy_s;
    out->cpu_ms = 1e3 * C.cpu_s;
    C.busy_s = C.cpu_s = 0;
    pthread_mutex_unlock(&C.mu);
}

void comm_stats_take_kind(CommStats out[COMM_NKINDS]) {
    for (int k = 0; k < COMM_NKINDS; k++) take(1, &out[k], k);
}

/* ---- life cycle ---- */

/* A switch read from the environment: unset, empty or "0" is off, "1" on; any other value (yes, true, on, off) is
 * refused with one line naming the variable, so that a check asked for is never silently skipped nor "off" read as
 * on. */
static int env_switch(const char *name, const char *what) {
    const char *v = getenv(name);
    if (!v || !v[0] || strcmp(v, "0") == 0) return 0;
    if (strcmp(v, "1") == 0) return 1;
    fatal("%s=%s: set it to 1 (%s) or 0, or unset it", name, v, what);
}

void comm_init(int *argc, char ***argv) {
    if (C.inited) return;
    C.rank = 0;
    C.world = 1;
    if (launcher_rank() >= 0) {
        int provided;
        MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
        C.use_mpi = 1;
        set_fatal_hook(abort_hook);
        if (provided < MPI_THREAD_SERIALIZED) {
            fatal("comm: this MPI library gives thread level %d, the communication thread needs at least "
                  "MPI_THREAD_SERIALIZED; use an Open MPI built with thread support", provided);
        }
        MPI_Comm_rank(MPI_COMM_WORLD, &C.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &C.world);
        MPI_Comm_dup(MPI_COMM_WORLD, &C.wd_comm); /* the watchdog's messages never match a collective's */
        /* the node from MPI itself, whatever launched the job (mpirun, srun, mpiexec.hydra): no launcher's
         * environment variables */
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, C.rank, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &C.local_rank);
        MPI_Comm_size(node, &C.local_size);
        C.node_id = C.rank;
        MPI_Bcast(&C.node_id, 1, MPI_INT, 0, node); /* local rank 0's world rank names the node */
        MPI_Comm_free(&node);
    } else {
        C.local_rank = 0;
        C.local_size = 1;
        C.node_id = 0;
    }
    if (gethostname(C.host, sizeof C.host) != 0) snprintf(C.host, sizeof C.host, "?");
    C.host[sizeof C.host - 1] = '\0';
    pthread_mutex_init(&C.mu, NULL);
    pthread_cond_init(&C.cv_job, NULL);
    pthread_cond_init(&C.cv_done, NULL);
    C.next_ticket = 1;
    C.done = 0;
    C.spin = env_switch("SCAPE_COMM_SPIN", "wait on collectives with plain MPI_Wait, outside the watchdog");
    /* checked now, read later: the report at the end, the sync check by the update */
    env_switch("SCAPE_COMM_REPORT", "rank 0 prints the run's totals per kind of collective");
    env_switch("SCAPE_CHECK_SYNC", "check that the ranks' parameters and update state stay identical");
    const char *smax = getenv("SCAPE_COMM_SLEEP_MAX_US");
    C.sleep_max_ns = smax ? 1000L * atol(smax) : 500000L;
    if (C.sleep_max_ns < 1000 || C.sleep_max_ns > 100000000L)
        fatal("SCAPE_COMM_SLEEP_MAX_US=%s is outside 1..100000 (microseconds); unset it for the default 500", smax);
    if (pthread_create(&C.thread, NULL, comm_thread_main, NULL) != 0) fatal("comm: cannot start the communication thread");
    C.inited = 1;
}

/* SCAPE_COMM_REPORT=1: rank 0 prints, per kind of collective, the whole run's calls, bytes sent, the time the
 * compute thread waited, the time the communication thread spent in them and its CPU time, and the share hidden
 * behind compute, 1 - wait / busy (scripts/bench_scape.sh reads these lines). */
static void run_report(void) {
    const char *e = getenv("SCAPE_COMM_REPORT");
    if (!e || strcmp(e, "1") != 0 || C.rank != 0) return;
    static const char *names[COMM_NKINDS] = {"allreduce", "reduce_scatter", "allgather", "bcast", "control"};
    for (int k = 0; k < COMM_NKINDS; k++) {
        if (!C.run_calls[k]) continue;
        double busy = 1e3 * C.run_busy_s[k], wait = 1e3 * C.run_wait_s[k];
        printf("comm report: %s calls %llu bytes_sent %llu wait_ms %.1f busy_ms %.1f cpu_ms %.1f hidden %.3f\n",
               names[k], (unsigned long long)C.run_calls[k], (unsigned long long)(C.run_sent_num[k] / (uint64_t)C.world),
               wait, busy, 1e3 * C.run_cpu_s[k], busy > 0 ? 1.0 - wait / busy : 0.0);
    }
    fflush(stdout);
}

void comm_finalize(void) {
    if (!C.inited) return;
    Job j = {.op = JOB_STOP, .kind = COMM_CONTROL};
    comm_wait(enqueue(&j));
    run_report();
    pthread_join(C.thread, NULL);
    free(C.scratch);
    C.scratch = NULL;
    C.scratch_n = 0;
    free(C.scratch16);
    C.scratch16 = NULL;
    C.scratch16_n = 0;
    C.inited = 0;
    if (C.use_mpi) {
        set_fatal_hook(NULL);
        MPI_Comm_free(&C.wd_comm);
        MPI_Finalize();
        C.use_mpi = 0;
    }
}
