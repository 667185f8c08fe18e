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
