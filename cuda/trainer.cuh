/*
 * cuda/trainer.cuh - the plumbing the CUDA trainers (train_gpt.cu, train_llama.cu) share, so that each model file
 * keeps only its layers: GPU selection, device allocation with a clear out-of-memory error, and DeviceParams, the
 * parameter side of a CUDA model (fp32 master, floatX parameters and gradients laid out by the ParamTable) in
 * either of its two modes:
 *   host update   the loop's DistOptim owns the master weights in host memory: device_params_upload before each
 *                 forward, device_params_add_to_host after each backward (the whole gradient crosses PCIe);
 *   device update the Updater of cuda/dist.h owns them on the GPU (device_params_create_updater): each backward
 *                 hands finished buckets over with device_params_bucket_done, nothing crosses PCIe per step, and
 *                 device_params_to_host refreshes the host copy before a model file is written.
 * And DeviceBatch, a micro-batch's tokens on the device: upload with the vocabulary check, the token grouping of
 * the deterministic embedding backward built on the host while the GPU runs the forward, the mean loss.
 * Shapes: P parameters (table->total), N = B*T rows, Vp padded vocabulary.
 * Not for: layers and kernels (the other headers of cuda/), the update itself (cuda/dist.cu).
 */
#ifndef CUDA_TRAINER_CUH
#define CUDA_TRAINER_CUH

#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/device_model.h"
#include "cuda/encoder.cuh"
#include "cuda/optimizer.cuh"
extern "C" {
#include "common/model.h"
#include "common/util.h"
}
#if !defined(TESTING) || defined(TESTING_DEVICE_UPDATE)
#include "cuda/dist.h"
extern "C" {
#include "comm/comm.h"
}
#endif

/* cudaMalloc of `bytes`, or fatal() naming `what`, the size in GiB and the fix. */
static void *dalloc(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess)
        fatal("cannot allocate %.2f GiB of GPU memory for %s (%s); reduce --batch or --seq", bytes / 1073741824.0,
              what, cudaGetErrorString(e));
    return p;
}

/* Picks this process's GPU by its node-local rank from MPI (comm/comm.h comm_gpu_for_rank: any launcher; with
 * one visible device per task, that device). fatal() naming `trainer` and the CPU trainer to use instead when no
 * device is usable. */
static void select_gpu(const char *trainer, const char *cpu_trainer) {
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    char why[320];
    if (e != cudaSuccess || ndev == 0)
        fatal("no CUDA device usable (%s); run %s on a machine with an NVIDIA GPU, or use %s",
              cuda_no_device_why(e, ndev, why, sizeof why), trainer, cpu_trainer);
#if !defined(TESTING) || defined(TESTING_DEVICE_UPDATE)
    int dev = comm_gpu_for_rank(comm_local_rank(), comm_local_size(), ndev);
    cudaCheck(cudaSetDevice(dev));
    comm_note_gpu(dev);
#else
    cudaCheck(cudaSetDevice(0)); /* the model tests: one process, no communication layer linked */
#endif
}

typedef struct {
    const ParamTable *table; /* the host model's */
    float *host_params;      /* (P) host, Model.params */
    float *host_grads;       /* (P) host, Model.grads (host update only) */
    float *master;           /* (P) fp32: a copy of host_params (host update), or THE master weights (device) */
    floatX *params;          /* (P) the copy the forward reads; == (floatX *)master in fp32 builds */
    floatX *grads;           /* (P) this micro-step's gradients; the backward zeroes it first */
    float *grad32;           /* (P) fp32 accumulator over micro-steps of the device update, else NULL */
    cudaEvent_t grads_free;  /* with grad32: the update records it once grad32 is zeroed (cuda/device_model.h) */
    floatX *h_grads;         /* (P) pinned staging of the host update's download; NULL once the device update runs */
    int host_pinned;         /* 1 while host_params is page-locked (cudaHostRegister) for the host update's upload */
    int device_update;       /* 1 once an Updater owns the parameters on the GPU */
    int *bucket_n;           /* (num_buckets) slices per bucket */
    int **bucket_slices;     /* (num_buckets)(bucket_n[b]) table indices of each bucket's slices, memory order */
    cudaStream_t s;          /* the model's compute stream */
} DeviceParams;

/* Allocates dp's device buffers and pinned staging for model `base` (its table, params and grads) on stream s,
 * and lists each bucket's slices. fatal() when memory runs out. */
static void device_params_alloc(DeviceParams *dp, Model *base, cudaStream_t s) {
    memset(dp, 0, sizeof *dp);
    const ParamTable *tab = &base->table;
    size_t P = tab->total;
    dp->table = tab;
    dp->host_params = base->params;
    dp->host_grads = base->grads;
    dp->s = s;
    dp->master = (float *)dalloc(P * sizeof(float), "the fp32 parameters");
#ifdef ENABLE_FP32
    dp->params = dp->master;
#else
    dp->params = (floatX *)dalloc(P * sizeof(floatX), "the parameters");
#endif
    dp->grads = (floatX *)dalloc(P * sizeof(floatX), "the gradients");
    cudaCheck(cudaMallocHost((void **)&dp->h_grads, P * sizeof(floatX)));
    param_table_bucket_slices(tab, &dp->bucket_n, &dp->bucket_slices);
}

#ifndef ENABLE_FP32
/* fp32 master -> floatX working copy, round to nearest (host update; the device update writes params itself) */
__global__ static void to_floatx_kernel(floatX *dst, const float *src, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = from_float<floatX>(src[i]);
}
#endif

/* Page-locks host_params (the model's own allocation) for the host update's upload, once, on its first use: a
 * copy from pageable memory is staged by the driver through a bounce buffer while the host waits; from
 * page-locked memory it is one DMA at the bus's rate, and the host goes on at once. The copy then reads
 * host_params when it runs, not at the call, so the host must not write them until the stream has passed it:
 * the loop writes them only in its update, after device_params_add_to_host synchronised the stream. A refusal
 * (RLIMIT_MEMLOCK, a driver without the call) keeps the pageable copy, with one note on stderr. */
static void device_params_pin_host(DeviceParams *dp) {
    if (dp->host_pinned) return;
    dp->host_pinned = -1; /* tried */
    cudaError_t e = cudaHostRegister(dp->host_params, dp->table->total * sizeof(float), cudaHostRegisterDefault);
    if (e == cudaSuccess) { dp->host_pinned = 1; return; }
    cudaGetLastError(); /* not sticky: clear it for the next cudaCheckLaunch */
    fprintf(stderr, "note: cannot page-lock the host parameters (%s); the host update uploads them from pageable "
            "memory (slower, same results)\n", cudaGetErrorString(e));
}
static void device_params_unpin_host(DeviceParams *dp) {
    if (dp->host_pinned == 1) cudaCheck(cudaHostUnregister(dp->host_params));
    dp->host_pinned = 0;
}

/* Host update, before each forward: the loop may have changed host_params since the last one; upload them into
 * master and convert to params. Does nothing under the device update (it keeps master and params current). */
static void device_params_upload(DeviceParams *dp) {
    if (dp->device_update) return;
    device_params_pin_host(dp);
    size_t P = dp->table->total;
    cudaCheck(cudaMemcpyAsync(dp->master, dp->host_params, P * sizeof(float), cudaMemcpyHostToDevice, dp->s));
#ifndef ENABLE_FP32
    to_floatx_kernel<<<ceil_div((long)P, 256), 256, 0, dp->s>>>(dp->params, dp->master, (long)P);
    cudaCheckLaunch();
#endif
}

/* Device update: bucket b's gradients of this micro-step are final on the stream (their last write is enqueued);
 * add them into grad32 (the sum the host path forms on the CPU: acc + (float)g, one rounding) and, on the last
 * micro-step (on_bucket non-NULL), hand the bucket to the update, which orders its collective after the
 * accumulation by an event on the stream (cuda/device_model.h's protocol). The accumulation first waits for
 * grads_free: the last step's update may still be zeroing grad32 on a stream of its own (once that has run, the
 * wait costs nothing, so it is simply repeated for every bucket). */
static void device_params_bucket_done(DeviceParams *dp, int b, BucketReadyFn on_bucket, void *ctx) {
    cudaCheck(cudaStreamWaitEvent(dp->s, dp->grads_free, 0));
    for (int k = 0; k < dp->bucket_n[b]; k++) {
        const ParamSlice *sl = &dp->table->slices[dp->bucket_slices[b][k]];
        grad_accumulate(dp->grad32 + sl->offset, dp->grads + sl->offset, (long)sl->numel, dp->s);
    }
    if (on_bucket) on_bucket(ctx, b);
}

/* Host update, after each backward: adds this micro-step's gradients into host_grads (the loop's optimizer and
 * communication read those), then reports every bucket final, in order, when on_bucket is non-NULL. */
static void device_params_add_to_host(DeviceParams *dp, BucketReadyFn on_bucket, void *ctx) {
    size_t P = dp->table->total;
    cudaCheck(cudaMemcpyAsync(dp->h_grads, dp->grads, P * sizeof(floatX), cudaMemcpyDeviceToHost, dp->s));
    cudaCheck(cudaStreamSynchronize(dp->s));
    float *hg = dp->host_grads;
    const floatX *dg = dp->h_grads;
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)P; i++) hg[i] += (float)dg[i];
    if (on_bucket)
        for (int b = 0; b < dp->table->num_buckets; b++) on_bucket(ctx, b);
}

/* Device update: copies the master weights into host_params (before a model file is written from them). */
static void device_params_to_host(DeviceParams *dp) {
    if (!dp->device_update) return;
    cudaCheck(cudaStreamSynchronize(dp->s));
    cudaCheck(cudaMemcpy(dp->host_params, dp->master, dp->table->total * sizeof(float), cudaMemcpyDeviceToHost));
}

#if !defined(TESTING) || defined(TESTING_DEVICE_UPDATE)
/* Model.create_updater's body: the device-resident update (cuda/dist.h) for adamw, adams and scape, NULL (the
 * loop's host update, as before) for topk-ef. Allocates grad32, lets the update broadcast rank 0's host_params
 * into master and params, and frees the host path's pinned staging (2P bytes). From here on the GPU holds the
 * master weights. fatal() when GPU memory runs out. (Compiled where cuda/dist.o is linked: the trainers and
 * the tests that define TESTING_DEVICE_UPDATE.) */
static Updater *device_params_create_updater(DeviceParams *dp, const UpdaterConfig *cfg) {
    if (!device_updater_supports(cfg->dist.opt.kind)) return NULL;
    size_t P = dp->table->total;
    dp->grad32 = (float *)dalloc(P * sizeof(float), "the fp32 gradients");
    cudaCheck(cudaMemset(dp->grad32, 0, P * sizeof(float)));
    cudaCheck(cudaEventCreateWithFlags(&dp->grads_free, cudaEventDisableTiming));
    DeviceModel dm = {dp->table, dp->master, dp->params, dp->grad32, dp->host_params, dp->s, dp->grads_free};
    Updater *u = device_updater_create(&dm, cfg);
    if (!u) {
        cudaCheck(cudaEventDestroy(dp->grads_free));
        cudaCheck(cudaFree(dp->grad32));
        dp->grad32 = NULL;
        return NULL;
    }
    dp->device_update = 1;
    cudaCheck(cudaStreamSynchronize(dp->s));
    cudaCheck(cudaFreeHost(dp->h_grads));
    dp->h_grads = NULL;
    device_params_unpin_host(dp); /* the device update never uploads host_params */
    return u;
}
#endif

static void device_params_free(DeviceParams *dp) {
    cudaCheck(cudaFree(dp->master));
#ifndef ENABLE_FP32
    cudaCheck(cudaFree(dp->params));
#endif
    cudaCheck(cudaFree(dp->grads));
    if (dp->grad32) {
        cudaCheck(cudaEventDestroy(dp->grads_free));
        cudaCheck(cudaFree(dp->grad32));
    }
    if (dp->h_grads) cudaCheck(cudaFreeHost(dp->h_grads));
    device_params_unpin_host(dp); /* before the host model frees host_params */
    param_table_bucket_slices_free(dp->table->num_buckets, dp->bucket_n, dp->bucket_slices);
}

/* ---- DeviceBatch: one micro-step's tokens ----
 * Every forward ends with a stream synchronisation (device_batch_mean_loss, or the trainer's own when there are
 * no targets), and every asynchronous copy from the pinned buffers below is enqueued inside the forward, so a new
 * forward may overwrite them at once: no synchronisation at its start. */
typedef struct {
    size_t Nmax;                            /* rows the buffers hold (Bmax * Tmax) */
    int Vp;
    int *d_inputs, *d_targets;              /* (N) device */
    int *h_inputs, *h_targets;              /* (N) pinned staging of the uploads */
    float *h_losses;                        /* (N) pinned: the per-row losses of the last forward */
    EncoderPlan plan;                       /* pinned (N, N+1, N): rows grouped by token, encoder.cuh */
    int *plan_count;                        /* (Vp) host scratch of the plan */
    int *d_order, *d_seg_start, *d_seg_tok; /* the plan on the device, read by the embedding backward */
} DeviceBatch;

static void device_batch_create(DeviceBatch *db, size_t Nmax, int Vp) {
    memset(db, 0, sizeof *db);
    db->Nmax = Nmax;
    db->Vp = Vp;
    db->d_inputs = (int *)dalloc(Nmax * 4, "inputs");
    db->d_targets = (int *)dalloc(Nmax * 4, "targets");
    db->d_order = (int *)dalloc(Nmax * 4, "the embedding-backward plan");
    db->d_seg_start = (int *)dalloc((Nmax + 1) * 4, "the embedding-backward plan");
    db->d_seg_tok = (int *)dalloc(Nmax * 4, "the embedding-backward plan");
    cudaCheck(cudaMallocHost((void **)&db->h_inputs, Nmax * 4));
    cudaCheck(cudaMallocHost((void **)&db->h_targets, Nmax * 4));
    cudaCheck(cudaMallocHost((void **)&db->h_losses, Nmax * 4));
    cudaCheck(cudaMallocHost((void **)&db->plan.order, Nmax * 4));
    cudaCheck(cudaMallocHost((void **)&db->plan.seg_start, (Nmax + 1) * 4));
    cudaCheck(cudaMallocHost((void **)&db->plan.seg_tok, Nmax * 4));
    db->plan_count = (int *)xmalloc((size_t)Vp * 4, "the embedding-backward plan");
}

/* After the stream is idle. */
static void device_batch_free(DeviceBatch *db) {
    void *dev[] = {db->d_inputs, db->d_targets, db->d_order, db->d_seg_start, db->d_seg_tok};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaCheck(cudaFree(dev[i]));
    void *pinned[] = {db->h_inputs, db->h_targets, db->h_losses, db->plan.order, db->plan.seg_start, db->plan.seg_tok};
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++) cudaCheck(cudaFreeHost(pinned[i]));
    free(db->plan_count);
}

/* The forward's first step: every token of inputs (N) and targets (N, or NULL) checked against [0, V) (fatal()
 * names the position and `tokenizer`, the vocabulary the data should have been made with), then both copied to
 * d_inputs / d_targets on s. N <= Nmax. */
static void device_batch_upload(DeviceBatch *db, const int *inputs, const int *targets, size_t N, int V,
                                const char *tokenizer, cudaStream_t s) {
    for (size_t i = 0; i < N; i++) {
        if (inputs[i] < 0 || inputs[i] >= V)
            fatal("input token %d at position %zu is outside the vocabulary [0, %d); the data does not match the "
                  "%s", inputs[i], i, V, tokenizer);
        if (targets && (targets[i] < 0 || targets[i] >= V))
            fatal("target token %d at position %zu is outside the vocabulary [0, %d); the data does not match the "
                  "%s", targets[i], i, V, tokenizer);
    }
    memcpy(db->h_inputs, inputs, N * sizeof(int));
    cudaCheck(cudaMemcpyAsync(db->d_inputs, db->h_inputs, N * sizeof(int), cudaMemcpyHostToDevice, s));
    if (targets) {
        memcpy(db->h_targets, targets, N * sizeof(int));
        cudaCheck(cudaMemcpyAsync(db->d_targets, db->h_targets, N * sizeof(int), cudaMemcpyHostToDevice, s));
    }
}

/* For the backward of a forward with targets, called once the forward's kernels are enqueued (so the host works
 * while the GPU runs them) and before device_batch_mean_loss: the embedding-backward plan of the N uploaded
 * inputs, and its upload on s. The backward reads it from d_order, d_seg_start, d_seg_tok and plan.nseg. */
static void device_batch_plan_backward(DeviceBatch *db, size_t N, cudaStream_t s) {
    encoder_backward_plan(&db->plan, db->h_inputs, (int)N, db->Vp, db->plan_count);
    cudaCheck(cudaMemcpyAsync(db->d_order, db->plan.order, N * sizeof(int), cudaMemcpyHostToDevice, s));
    cudaCheck(cudaMemcpyAsync(db->d_seg_start, db->plan.seg_start, (N + 1) * sizeof(int), cudaMemcpyHostToDevice, s));
    cudaCheck(cudaMemcpyAsync(db->d_seg_tok, db->plan.seg_tok, N * sizeof(int), cudaMemcpyHostToDevice, s));
}

/* The end of a forward with targets: the per-row losses d_losses (N) downloaded, the stream synchronised (which
 * also completes every copy from the pinned buffers), and their mean summed in row order on the host
 * (independent of the launch configuration). */
static float device_batch_mean_loss(DeviceBatch *db, const float *d_losses, size_t N, cudaStream_t s) {
    cudaCheck(cudaMemcpyAsync(db->h_losses, d_losses, N * sizeof(float), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    double sum = 0.0;
    for (size_t i = 0; i < N; i++) sum += db->h_losses[i];
    return (float)(sum / N);
}

/* Model.logits: the (N,Vp) floatX logits of the last forward as floats in *h_logits (cap_rows * Vp floats,
 * allocated on first use), after the stream finished. */
static const float *logits_to_host(float **h_logits, size_t cap_rows, const floatX *d_logits, size_t N, size_t Vp,
                                   cudaStream_t s) {
    if (!*h_logits) *h_logits = (float *)xmalloc(cap_rows * Vp * sizeof(float), "host logits");
    floatX *tmp = (floatX *)xmalloc(N * Vp * sizeof(floatX), "logits staging");
    cudaCheck(cudaStreamSynchronize(s));
    cudaCheck(cudaMemcpy(tmp, d_logits, N * Vp * sizeof(floatX), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < N * Vp; i++) (*h_logits)[i] = (float)tmp[i];
    free(tmp);
    return *h_logits;
}

#endif
