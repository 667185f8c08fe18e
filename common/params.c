/* common/params.c - see params.h. */
#include "params.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

int param_table_add(ParamTable *t, const char *name, int layer, int bucket, int decay, int ndim, const size_t *shape) {
    if (ndim < 1 || ndim > PARAM_MAX_DIMS) fatal("param_table_add(%s): ndim %d out of range 1..4", name, ndim);
    if (strlen(name) >= PARAM_NAME_MAX) fatal("param_table_add: name '%s' too long", name);
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->slices = realloc(t->slices, (size_t)t->cap * sizeof(ParamSlice));
        if (!t->slices) fatal("out of memory growing the parameter table");
    }
    ParamSlice *s = &t->slices[t->n];
    memset(s, 0, sizeof *s);
    strcpy(s->name, name);
    s->layer = layer;
    s->ndim = ndim;
    s->numel = 1;
    for (int i = 0; i < ndim; i++) {
        s->shape[i] = shape[i];
        s->numel *= shape[i];
    }
    s->offset = t->total;
    s->decay = decay;
    s->dense_only = !decay;
    s->bucket = bucket;
    t->total += s->numel;
    if (bucket + 1 > t->num_buckets) t->num_buckets = bucket + 1;
    return t->n++;
}

int param_table_find(const ParamTable *t, const char *name, int layer) {
    for (int i = 0; i < t->n; i++)
        if (t->slices[i].layer == layer && strcmp(t->slices[i].name, name) == 0) return i;
    return -1;
}

void param_table_free(ParamTable *t) {
    free(t->slices);
    memset(t, 0, sizeof *t);
}

void param_table_bucket_slices(const ParamTable *t, int **count, int ***slices) {
    int nb = t->num_buckets;
    int *n = xcalloc((size_t)(nb > 0 ? nb : 1), sizeof(int), "bucket slices");
    int **sl = xcalloc((size_t)(nb > 0 ? nb : 1), sizeof(int *), "bucket slices");
    for (int i = 0; i < t->n; i++) {
        int b = t->slices[i].bucket;
        if (b < 0 || b >= nb) fatal("parameter table: slice %s has bucket %d outside 0..%d", t->slices[i].name, b, nb - 1);
        n[b]++;
    }
    for (int b = 0; b < nb; b++) {
        sl[b] = xmalloc((size_t)(n[b] ? n[b] : 1) * sizeof(int), "bucket slices");
        n[b] = 0;
    }
    for (int i = 0; i < t->n; i++) {
        int b = t->slices[i].bucket;
        sl[b][n[b]++] = i;
    }
    *count = n;
    *slices = sl;
}

void param_table_bucket_slices_free(int num_buckets, int *count, int **slices) {
    if (slices)
        for (int b = 0; b < num_buckets; b++) free(slices[b]);
    free(slices);
    free(count);
}
