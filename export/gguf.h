/*
 * export/gguf.h - a writer of GGUF files (version 3), the model format of llama.cpp and the engines built on it.
 * A file is: "GGUF", version, tensor count, key/value count; the key/value pairs (metadata); one info record per
 * tensor (name, dimensions, type, offset of its data); padding to the alignment; the tensors' data, each starting
 * at a multiple of the alignment (32 bytes, GGUF's default). Little-endian throughout (the hosts this runs on).
 * Dimensions follow ggml: ne[0] is the length of a row (the contiguous one), so a row-major (rows, cols) matrix
 * is ne = {cols, rows}.
 * Use: gguf_writer_new, the gguf_kv_* calls in the order the keys should appear, gguf_add_tensor for each tensor
 * (the data are read only at gguf_write, so they must stay valid until then), gguf_write, gguf_writer_free.
 * Not for: reading GGUF, quantised types, what llama.cpp expects of a model (export/export_gguf.c).
 */
#ifndef EXPORT_GGUF_H
#define EXPORT_GGUF_H

#include <stddef.h>
#include <stdint.h>

/* ggml tensor types this writer produces (their numbers in the file) */
typedef enum { GGUF_F32 = 0, GGUF_F16 = 1, GGUF_BF16 = 30 } GgufTensorType;

typedef struct GgufWriter GgufWriter;

GgufWriter *gguf_writer_new(void);
void gguf_writer_free(GgufWriter *w);

/* Metadata. Keys and strings are UTF-8 without NUL in the file. fatal() on a key given twice. */
void gguf_kv_string(GgufWriter *w, const char *key, const char *value);
void gguf_kv_u32(GgufWriter *w, const char *key, uint32_t value);
void gguf_kv_i32(GgufWriter *w, const char *key, int32_t value);
void gguf_kv_f32(GgufWriter *w, const char *key, float value);
void gguf_kv_bool(GgufWriter *w, const char *key, int value);
/* Arrays: n strings of lens[i] bytes each (need not be NUL-terminated), n int32, n float32. */
void gguf_kv_strings(GgufWriter *w, const char *key, const char *const *values, const size_t *lens, size_t n);
void gguf_kv_i32s(GgufWriter *w, const char *key, const int32_t *values, size_t n);
void gguf_kv_f32s(GgufWriter *w, const char *key, const float *values, size_t n);

/* A tensor of ndim (1..4) dimensions ne (ne[0] contiguous) stored as `type`, from fp32 data of prod(ne) values in
 * ggml order. With `rows` non-NULL, row r of the stored tensor (r < ne[1] * ... ) is data row rows[r] (each row
 * ne[0] floats): a permutation or subset of the source's rows, copied at write time (used to reorder q/k heads).
 * F16 and BF16 round to nearest, ties to even; values beyond F16's range become inf. */
void gguf_add_tensor(GgufWriter *w, const char *name, int ndim, const uint64_t *ne, GgufTensorType type,
                     const float *data, const uint32_t *rows);

/* Writes the file atomically: a temp file beside `path`, fsync, rename. On any failure the temp file is removed,
 * an existing `path` is left as it was, and fatal() names `path` and the OS error. Returns the bytes written. */
uint64_t gguf_write(GgufWriter *w, const char *path);

/* fp32 -> IEEE binary16, round to nearest, ties to even (exposed for the tests). */
uint16_t gguf_f16_from_f32(float x);

#endif
