/*
 * export/gguf.c - see gguf.h. The metadata is serialised into memory as the calls come; tensor data are converted
 * and streamed to the file one row at a time at gguf_write, so exporting a model needs no second copy of it.
 */
#define _GNU_SOURCE
#include "export/gguf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/bf16.h"
#include <sys/stat.h>

#include "common/util.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_VERSION 3u
#define GGUF_ALIGN 32u

/* GGUF value types (their numbers in the file) */
enum { V_U32 = 4, V_I32 = 5, V_F32 = 6, V_BOOL = 7, V_STRING = 8, V_ARRAY = 9 };

typedef struct {
    char *name;
    int ndim;
    uint64_t ne[4];
    GgufTensorType type;
    const float *data;
    const uint32_t *rows;
    uint64_t offset; /* from the start of the data section */
} Tensor;

struct GgufWriter {
    unsigned char *kv; /* the serialised key/value pairs */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    char **keys;       /* for the duplicate check */
    Tensor *t;
    size_t n_t, cap_t;
};

GgufWriter *gguf_writer_new(void) { return xcalloc(1, sizeof(GgufWriter), "GGUF writer"); }

void gguf_writer_free(GgufWriter *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->keys);
    free(w->kv);
    free(w->t);
    free(w);
}

static void put(GgufWriter *w, const void *p, size_t n) {
    if (w->kv_len + n > w->kv_cap) {
        w->kv_cap = (w->kv_len + n) * 2 + 4096;
        w->kv = xrealloc(w->kv, w->kv_cap, "GGUF metadata");
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
}
static void put_u32(GgufWriter *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(GgufWriter *w, uint64_t v) { put(w, &v, 8); }
static void put_str(GgufWriter *w, const char *s, size_t n) {
    put_u64(w, n);
    put(w, s, n);
}

/* the key and the value's type; fatal() on a repeated key (llama.cpp would take one of them silently) */
static void key(GgufWriter *w, const char *k, uint32_t type) {
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], k)) fatal("GGUF writer: metadata key '%s' given twice", k);
    w->keys = xrealloc(w->keys, (size_t)(w->n_kv + 1) * sizeof(char *), "GGUF keys");
    w->keys[w->n_kv++] = strdup(k);
    put_str(w, k, strlen(k));
    put_u32(w, type);
}

void gguf_kv_string(GgufWriter *w, const char *k, const char *value) {
    key(w, k, V_STRING);
    put_str(w, value, strlen(value));
}
void gguf_kv_u32(GgufWriter *w, const char *k, uint32_t value) {
    key(w, k, V_U32);
    put_u32(w, value);
}
void gguf_kv_i32(GgufWriter *w, const char *k, int32_t value) {
    key(w, k, V_I32);
    put(w, &value, 4);
}
void gguf_kv_f32(GgufWriter *w, const char *k, float value) {
    key(w, k, V_F32);
    put(w, &value, 4);
}
void gguf_kv_bool(GgufWriter *w, const char *k, int value) {
    key(w, k, V_BOOL);
    uint8_t b = value != 0;
    put(w, &b, 1);
}
void gguf_kv_strings(GgufWriter *w, const char *k, const char *const *values, const size_t *lens, size_t n) {
    key(w, k, V_ARRAY);
    put_u32(w, V_STRING);
    put_u64(w, n);
    for (size_t i = 0; i < n; i++) put_str(w, values[i], lens[i]);
}
void gguf_kv_i32s(GgufWriter *w, const char *k, const int32_t *values, size_t n) {
    key(w, k, V_ARRAY);
    put_u32(w, V_I32);
    put_u64(w, n);
    put(w, values, n * sizeof(int32_t));
}
void gguf_kv_f32s(GgufWriter *w, const char *k, const float *values, size_t n) {
    key(w, k, V_ARRAY);
    put_u32(w, V_F32);
    put_u64(w, n);
    put(w, values, n * sizeof(float));
}

static size_t type_size(GgufTensorType t) { return t == GGUF_F32 ? 4 : 2; }
static uint64_t align_up(uint64_t x) { return (x + GGUF_ALIGN - 1) / GGUF_ALIGN * GGUF_ALIGN; }
static uint64_t tensor_bytes(const Tensor *t) {
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->ne[d];
    return n * type_size(t->type);
}

void gguf_add_tensor(GgufWriter *w, const char *name, int ndim, const uint64_t *ne, GgufTensorType type,
                     const float *data, const uint32_t *rows) {
    if (ndim < 1 || ndim > 4) fatal("GGUF writer: tensor '%s' has %d dimensions; 1 to 4 are allowed", name, ndim);
    if (type != GGUF_F32 && type != GGUF_F16 && type != GGUF_BF16) fatal("GGUF writer: tensor '%s': unknown type %d", name, (int)type);
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) fatal("GGUF writer: tensor '%s' added twice", name);
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t * 2 + 16;
        w->t = xrealloc(w->t, w->cap_t * sizeof(Tensor), "GGUF tensors");
    }
    Tensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        if (ne[d] == 0) fatal("GGUF writer: tensor '%s' has an empty dimension %d", name, d);
        t->ne[d] = ne[d];
    }
    t->type = type;
    t->data = data;
    t->rows = rows;
    t->offset = w->n_t ? align_up(w->t[w->n_t - 1].offset + tensor_bytes(&w->t[w->n_t - 1])) : 0;
    w->n_t++;
}

uint16_t gguf_f16_from_f32(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return sign | 0x7E00u;  /* NaN stays a (quiet) NaN */
    if (ax >= 0x477FF000u) return sign | 0x7C00u; /* >= 65520 rounds to inf (65504 is the largest half) */
    if (ax < 0x38800000u) {                       /* below 2^-14: a subnormal half, in units of 2^-24 */
        float v;
        memcpy(&v, &ax, 4);
        return sign | (uint16_t)lrintf(v * 16777216.0f); /* exact scaling; lrintf rounds to nearest even */
    }
    uint32_t mant = ax & 0x7FFFFFu;
    uint32_t h = (((ax >> 23) - 127u + 15u) << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry into the exponent is still right */
    return sign | (uint16_t)h;
}

/* fwrite that remembers the first failure (checked once at the end, with errno) */
typedef struct {
    FILE *f;
    int err;
    uint64_t bytes;
} Out;
static void out(Out *o, const void *p, size_t n) {
    if (o->err || n == 0) return;
    if (fwrite(p, 1, n, o->f) != n) o->err = errno ? errno : EIO;
    o->bytes += n;
}
static void out_pad(Out *o) {
    static const unsigned char zeros[GGUF_ALIGN];
    out(o, zeros, (size_t)(align_up(o->bytes) - o->bytes));
}

uint64_t gguf_write(GgufWriter *w, const char *path) {
    AtomicFile *a = atomic_open(path); /* a temp file beside path, renamed onto it at the end: complete or absent */
    if (!a) fatal("cannot write %s: %s; check that its folder exists and is writable", path, strerror(errno));
    Out o = {atomic_stream(a), 0, 0};
    out(&o, GGUF_MAGIC, 4);
    uint32_t version = GGUF_VERSION;
    uint64_t n_t = w->n_t;
    out(&o, &version, 4);
    out(&o, &n_t, 8);
    out(&o, &w->n_kv, 8);
    out(&o, w->kv, w->kv_len);
    for (size_t i = 0; i < w->n_t; i++) {
        const Tensor *t = &w->t[i];
        uint64_t n = strlen(t->name);
        uint32_t nd = (uint32_t)t->ndim, ty = (uint32_t)t->type;
        out(&o, &n, 8);
        out(&o, t->name, n);
        out(&o, &nd, 4);
        out(&o, t->ne, 8 * (size_t)t->ndim);
        out(&o, &ty, 4);
        out(&o, &t->offset, 8);
    }
    out_pad(&o);
    const uint64_t data_start = o.bytes;
    uint16_t *half = NULL;
    size_t half_cap = 0;
    for (size_t i = 0; i < w->n_t && !o.err; i++) {
        const Tensor *t = &w->t[i];
        out_pad(&o);
        if (o.bytes - data_start != t->offset) fatal("GGUF writer: internal offset mismatch at tensor '%s'", t->name);
        uint64_t row = t->ne[0], nrows = 1;
        for (int d = 1; d < t->ndim; d++) nrows *= t->ne[d];
        if (t->type != GGUF_F32 && row > half_cap) {
            half_cap = (size_t)row;
            half = xrealloc(half, half_cap * sizeof(uint16_t), "GGUF row");
        }
        for (uint64_t r = 0; r < nrows && !o.err; r++) {
            const float *src = t->data + (t->rows ? (uint64_t)t->rows[r] : r) * row;
            if (t->type == GGUF_F32) {
                out(&o, src, (size_t)row * 4);
            } else {
                for (uint64_t j = 0; j < row; j++)
                    half[j] = t->type == GGUF_F16 ? gguf_f16_from_f32(src[j]) : bf16_from_f32(src[j]);
                out(&o, half, (size_t)row * 2);
            }
        }
    }
    free(half);
    if (o.err) atomic_discard(a);
    else o.err = atomic_commit(a, path);
    if (o.err)
        fatal("cannot write %s: %s; nothing was written (check free space and permissions)", path, strerror(o.err));
    return o.bytes;
}
