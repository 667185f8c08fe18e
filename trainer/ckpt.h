/*
 * trainer/ckpt.h - training checkpoints (DESIGN.md "Files"): <out>/ckpt_<step>/ holds
 *   model.bin            the model file (Model.save), written by rank 0
 *   state_rank<r>.bin    one per rank: CkptState header, then this rank's optimizer blob (distopt_save)
 *   manifest.json        written last by rank 0: {"world", "step", "files": [{"name", "bytes"}]}
 * Every file is written atomically (temp file, fsync, rename). A checkpoint counts only if its manifest exists and
 * every listed file has exactly the listed size; anything else is skipped by "latest" and refused by name.
 * Not for: deciding when to checkpoint or restoring model/optimizer/loader (trainer/train.c).
 */
#ifndef TRAINER_CKPT_H
#define TRAINER_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "common/params.h"
#include "dataloader/dataloader.h"

#define CKPT_MAGIC 0x504B4353u /* "SCKP" little-endian */
#define CKPT_VERSION 1
#define CKPT_ID_MAX 120

/* Fixed-layout header of state_rank<r>.bin (little-endian, no implicit padding). The fingerprint fields let a
 * resume refuse a checkpoint made for another model, optimizer or batch shape with a precise message. */
typedef struct {
    uint32_t magic, version;
    uint32_t header_bytes; /* sizeof(CkptState), so a future version can grow it */
    int32_t rank, world;   /* the saving rank and world size */
    int32_t step;          /* optimizer steps completed */
    uint64_t sample_rng;   /* Rng state of the sampler */
    DataPos data;          /* this rank's training-loader position */
    uint64_t blob_bytes;   /* optimizer blob that follows the header */
    uint64_t blob_fnv;     /* FNV-1a 64 of the blob: catches corruption that keeps the length */
    /* fingerprint */
    uint64_t table_hash;   /* param_table_hash of the model */
    uint64_t num_params;   /* table.total */
    int32_t optimizer;     /* OptimizerKind */
    int32_t zero;          /* ZeRO-1 on/off */
    int32_t B, T;          /* micro-batch shape */
    int64_t total_batch;   /* tokens per optimizer step */
    char model_id[CKPT_ID_MAX]; /* --init path if given, else --model spec */
} CkptState;

/* FNV-1a 64-bit hash (Fowler, Noll, Vo) of n bytes, continuing from h (start with FNV_OFFSET). */
#define FNV_OFFSET 0xcbf29ce484222325ull
uint64_t fnv1a64(uint64_t h, const void *data, size_t n);
/* Hash of everything that defines the flat layout: names, layers, shapes, offsets, decay, dense_only, buckets. */
uint64_t param_table_hash(const ParamTable *t);

/* "<out>/ckpt_<step>" into buf. */
void ckpt_dir(char *buf, size_t cap, const char *out, int step);


/* Writes <dir>/state_rank<h->rank>.bin; fills h->magic, version, header_bytes, blob_bytes, blob_fnv. */
void ckpt_write_state(const char *dir, CkptState *h, const void *blob);
/* Reads and validates a state file (magic, version, header size, file length, blob hash); returns the blob
 * (caller frees) and fills *h. fatal() naming the file and the fix on any problem. */
void *ckpt_read_state(const char *path, CkptState *h);

/* Writes <dir>/manifest.json atomically: world, step and the files with their sizes. */
void ckpt_write_manifest(const char *dir, int world, int step, int n_files, const char *const *names,
                         const int64_t *sizes);
/* 1 if <dir> is a complete checkpoint (manifest parses, every listed file exists with its size); then *step and
 * *world are set. 0 otherwise, with the reason in why (one line, e.g. "state_rank1.bin has 100 bytes, manifest
 * says 4196"). */
int ckpt_is_complete(const char *dir, int *step, int *world, char *why, size_t why_cap);
/* Newest complete checkpoint under out: its directory into buf, returns its step; -1 if none. Each newer but
 * incomplete one is reported on stderr with why it was skipped. */
int ckpt_find_latest(const char *out, char *buf, size_t cap);
/* Removes all but the newest `keep` complete checkpoints under out (keep <= 0: keep all). The manifest goes
 * first so a half-removed checkpoint is never mistaken for a complete one. */
void ckpt_prune(const char *out, int keep);
/* Removes <dir>/manifest.json if present, so rewriting files in an existing checkpoint dir is never seen as
 * complete until the new manifest lands. */
void ckpt_invalidate(const char *dir);

#endif
