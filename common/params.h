/*
 * common/params.h - the data-driven parameter table shared by every model, optimizer, SCAPE and checkpoint code.
 *
 * A model describes its parameters as a list of tensors (name, layer, shape, flags). All parameters live in ONE
 * flat fp32 buffer of `total` floats; gradients in a second buffer with the identical layout. Each entry of the
 * table is one slice in SCAPE's sense (SCAPE.md section 4): a per-layer tensor such as "qkvw" of layer 3 is its
 * own entry. The memory order is the model file's order (for GPT-2: llm.c's tensor-major order, all layers'
 * ln1w, then all layers' ln1b, ...), so a model file is one contiguous read.
 *
 * Gradient buckets: `bucket` groups the entries that backward finishes together (one transformer layer; the
 * embeddings and final norm form their own bucket, finished last). Buckets are numbered in the order backward
 * finishes them: 0 = last layer, ..., L-1 = first layer, L = embeddings/final norm.
 */
#ifndef COMMON_PARAMS_H
#define COMMON_PARAMS_H

#include <stddef.h>

#define PARAM_NAME_MAX 24
#define PARAM_MAX_DIMS 4

typedef struct {
    char name[PARAM_NAME_MAX]; /* e.g. "wte", "qkvw" */
    int layer;                 /* transformer layer index, -1 for tensors outside the blocks */
    int ndim;
    size_t shape[PARAM_MAX_DIMS];
    size_t numel;  /* product of shape */
    size_t offset; /* first element in the flat buffer, in floats */
    int decay;     /* 1: weight decay applies (embeddings, linear weights); 0: norm gains and biases */
    int dense_only;/* 1: SCAPE never sparsifies it (norm gains and biases when exclusion is on) */
    int bucket;    /* gradient bucket, in the order backward finishes them (see above) */
} ParamSlice;

typedef struct {
    ParamSlice *slices; /* n entries, in memory order (offsets increasing) */
    int n;
    int cap;
    size_t total;    /* floats in the flat buffer */
    int num_buckets;
} ParamTable;

/* Appends a tensor of the given shape (ndim <= 4 sizes) at the current end of the buffer and returns its index.
 * decay is 1 for matrices, 0 for gains/biases; dense_only defaults to !decay. */
int param_table_add(ParamTable *t, const char *name, int layer, int bucket, int decay, int ndim, const size_t *shape);
/* Index of the entry with this name and layer, or -1. */
int param_table_find(const ParamTable *t, const char *name, int layer);
void param_table_free(ParamTable *t);

/* Each bucket's entries: *count gets (num_buckets) ints, *slices (num_buckets) arrays of the indices of that
 * bucket's entries in table (= memory) order, each allocated (at least one int). fatal() naming the entry if an
 * entry's bucket is outside 0..num_buckets-1. Free with param_table_bucket_slices_free(t->num_buckets, ...). */
void param_table_bucket_slices(const ParamTable *t, int **count, int ***slices);
void param_table_bucket_slices_free(int num_buckets, int *count, int **slices);

#endif
