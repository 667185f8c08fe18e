/*
 * cuda/device_model.h - what a CUDA model (train_gpt.cu; train_llama.cu later) hands the device-resident update
 * (cuda/dist.h): its device buffers laid out by its ParamTable, and its compute stream. The model owns every
 * buffer here; the update reads and writes them in place.
 * Protocol per optimizer step: each micro-step's backward ADDS its gradients into `grads` (fp32, the loop's
 * "sum over micro-steps of loss_scale-weighted gradients"); on the last micro-step it calls the update's
 * bucket_ready(b) right after enqueueing, on `stream`, the last write to bucket b's slices of `grads`. The
 * update's step() leaves new `master` and `params` ordered on `stream`, and zeroes `grads` on whichever stream
 * it likes (device SCAPE: its communication stream, once its top-k of the next mask has read c there); it records
 * `grads_free` on that stream right after, so `grads` is zero and writable again when `grads_free` completes.
 * The model makes `stream` wait for `grads_free` (cudaStreamWaitEvent) before its first write into `grads` in a
 * step. The model creates and destroys the event; until the update first records it the wait is a no-op.
 * Not for: kernels (cuda/optimizer.cuh) or the update itself (cuda/dist.cu).
 */
#ifndef CUDA_DEVICE_MODEL_H
#define CUDA_DEVICE_MODEL_H

#include "cuda/common.cuh"
extern "C" {
#include "common/params.h"
}

typedef struct {
    const ParamTable *table; /* the model's table: P = table->total, slices, buckets */
    float *master;           /* (P) device, fp32 master weights */
    floatX *params;          /* (P) device, the floatX copy the forward reads; == (floatX *)master in fp32 builds */
    float *grads;            /* (P) device, fp32 gradient accumulator (zero at the start of each step) */
    float *host_params;      /* (P) host (Model.params): the initial weights (rank 0's are broadcast) */
    cudaStream_t stream;     /* the model's compute stream */
    cudaEvent_t grads_free;  /* the model's; recorded by the update once grads is zeroed (see the protocol above) */
} DeviceModel;

#endif
