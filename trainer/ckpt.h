/*
 * trainer/ckpt.h - training checkpoints (DESIGN.md "Files"): <out>/ckpt_<step>/ holds
 *   model.bin            the model file (Model.save), written by rank 0
 *   state_rank<r>.bin    one per rank: CkptState header, then this rank's optimizer blob (distopt_save)
 *   manifest.json        written last by rank 0: {"format", "version": 2, "world", "step",
 *                        "files": [{"name", "bytes", "xxh3"}], "init_xxh3", "options": {name: value}}
 * Every file is written atomically (temp file, fsync, rename). Each file's checksum (XXH3-64 of its bytes, read
 * back after the fsync) is in the manifest. A checkpoint is complete when its manifest exists and every listed file
 * has the listed size (cheap: retention uses it), and verified when every file also has its checksum (resume and
 * --verify-ckpt use it). "latest" passes over one that does not verify, naming it; an explicit one is refused.
 * The options are every trainer option's value as typed (trainer/ckpt_policy.c: what defines the run is taken from
 * the checkpoint on resume); init_xxh3 identifies an --init model file by content ("" when none was given).
 * Not for: choosing, writing or restoring a run's checkpoint (trainer/ckpt_policy.c), deciding when (trainer/train.c).
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

/* Hash of everything that defines the flat layout: names, layers, shapes, offsets, decay, dense_only, buckets. */
uint64_t param_table_hash(const ParamTable *t);

/* "<out>/ckpt_<step>" into buf. */
void ckpt_dir(char *buf, size_t cap, const char *out, int step);


/* Writes <dir>/state_rank<h->rank>.bin; fills h->magic, version, header_bytes, blob_bytes, blob_fnv. */
void ckpt_write_state(const char *dir, CkptState *h, const void *blob);
/* Reads and validates a state file (magic, version, header size, file length, blob hash); returns the blob
 * (caller frees) and fills *h. fatal() naming the file and the fix on any problem. */
void *ckpt_read_state(const char *path, CkptState *h);

#define CKPT_MANIFEST_VERSION 3 /* 1: no checksums or options (still read: complete, but nothing to verify); 2: no
                                   checksum of the manifest itself (still read: its options are taken unchecked) */

/* One file of a checkpoint as the manifest lists it. */
typedef struct {
    const char *name; /* relative to the checkpoint directory, no '/' */
    int64_t bytes;
    uint64_t xxh3;    /* ckpt_file_hash of the file */
} CkptFile;

/* XXH3-64 (libxxhash) of the file's whole content and its length in bytes; 0 (errno set) if it cannot be read. */
int ckpt_file_hash(const char *path, int64_t *bytes, uint64_t *hash);

/* Writes <dir>/manifest.json atomically: world, step, the files with sizes and checksums, the --init file's hash
 * (16 hex digits, or "" / NULL), the run's identity (run_id: 16 hex digits made when the run started at step 0,
 * kept by every resume) and parent (the checkpoint directory this process resumed from, "" for a fresh run), and
 * n_opts option name/value pairs, each as typed, whole, any bytes but NUL: a JSON string when it is valid UTF-8,
 * else {"hex": "<bytes>"}. */
void ckpt_write_manifest(const char *dir, int world, int step, int n_files, const CkptFile *files, int n_opts,
                         const char *const *opt_names, const char *const *opt_values, const char *init_hash,
                         const char *run_id, const char *parent);
/* 1 if s is well-formed UTF-8 (no overlong forms, surrogates or code points above U+10FFFF). */
int utf8_valid(const char *s);

/* What a manifest says of its checkpoint. */
typedef struct {
    int step, world;
    int n_files;  /* files listed */
    int n_hashed; /* of which checksummed and verified (0 for a version-1 manifest, or from ckpt_is_complete) */
    int64_t bytes;
} CkptInfo;
/* 1 if <dir> is complete and every file matches its checksum (reads every byte); else 0 with the reason in why,
 * e.g. "model.bin fails its checksum (xxh3 ..., manifest says ...): its content is damaged". */
int ckpt_verify(const char *dir, CkptInfo *info, char *why, size_t why_cap);

/* The options a checkpoint recorded (ckpt_write_manifest). */
#define CKPT_MAX_OPTIONS 96
#define CKPT_MANIFEST_MAX (16 << 20) /* a manifest longer than this is malformed (values are whole: a command line
                                        is at most a few MiB) */
typedef struct {
    int n;
    char names[CKPT_MAX_OPTIONS][64];
    char *values[CKPT_MAX_OPTIONS]; /* malloc'd, whole */
    char init_hash[32];             /* "" when the run had no --init, or the manifest predates options */
    char run_id[32];                /* "" when the manifest predates run identities */
} CkptOptions;
/* Reads <dir>/manifest.json's options into *o; 0 if the manifest has none (version 1) or they are malformed.
 * Free with ckpt_options_free. */
int ckpt_read_options(const char *dir, CkptOptions *o);
void ckpt_options_free(CkptOptions *o);
/* The run_id <dir>'s manifest records into id (cap bytes; "" when it records none or cannot be read). */
void ckpt_run_id(const char *dir, char *id, size_t cap);
/* The whole file as a NUL-terminated string (malloc'd, caller frees); NULL if it is absent, unreadable or longer
 * than max bytes. */
char *ckpt_read_text(const char *path, size_t max);

/* 1 if <dir> is a complete checkpoint (manifest parses, every listed file exists with its size); then *step and
 * *world are set. 0 otherwise, with the reason in why (one line, e.g. "state_rank1.bin has 100 bytes, manifest
 * says 4196"). */
int ckpt_is_complete(const char *dir, int *step, int *world, char *why, size_t why_cap);
/* Removes <dir>/manifest.json if present, so rewriting files in an existing checkpoint dir is never seen as
 * complete until the new manifest lands. */
void ckpt_invalidate(const char *dir);

/* ---- the checkpoints of an --out as one line (ckpt_line.c); the functions above are one checkpoint's (ckpt.c) */
/* 1 and *step if name is a checkpoint's: "ckpt_" and the step in canonical decimal (no sign, no leading zero, at
 * most INT_MAX); "ckpt_010", "ckpt_+10" and "ckpt_4294967306" are not, so they are never counted or removed. */
int ckpt_parse_name(const char *name, int *step);
/* Steps of all ckpt_<step> entries under out (complete or not, links included), newest first, into *steps
 * (malloc'd, caller frees); returns the count (0 when out does not exist). */
int ckpt_list(const char *out, int **steps);
/* Newest checkpoint under out that verifies (ckpt_verify): its directory into buf, returns its step; -1 if none.
 * Each newer one that is incomplete or damaged is reported on stderr ("note: skipping checkpoint DIR: why"). */
int ckpt_find_latest(const char *out, char *buf, size_t cap);
/* ckpt_find_latest, but quiet: the number of ckpt_<step> entries seen in *n_seen, and the notes on those passed
 * over in why_all instead of on stderr, one line each ("note: skipping checkpoint DIR: why\n"). */
int ckpt_find_latest_why(const char *out, char *buf, size_t cap, int *n_seen, char *why_all, size_t why_cap);
/* ckpt_find_latest_why among the checkpoints of step <= max_step only (the line a pending roll-back leaves). */
int ckpt_find_latest_upto(const char *out, int max_step, char *buf, size_t cap, int *n_seen, char *why_all,
                          size_t why_cap);
/* Removes all but the newest `keep` complete checkpoints under out (keep <= 0: keep all), never the one of step
 * verified_step (the newest that verified: the one just written, checksummed from its files read back; -1: none).
 * Incomplete ones are left alone, and so is a ckpt_<step> that is a symbolic link or whose manifest records
 * another run_id than verified_step's (neither is this run's: neither counted nor removed). A removal renames the
 * folder to .deleting-ckpt_<step> first and removes what is in it without following links; such folders left by a
 * run killed half-way are removed by the next prune, and so is a real ckpt_<step> older than verified_step that has
 * no manifest.json (what a removal killed between its unlinks left: it holds nothing complete). */
void ckpt_prune(const char *out, int keep, int verified_step);
/* Removes the real folder <out>/ckpt_<step> as a prune does (a link is left alone). */
void ckpt_remove(const char *out, int step);
/* How many ckpt_<step> entries under out have a manifest.json (checkpoints that were complete once, damaged or
 * not); the newest of them in *newest (-1: none). */
int ckpt_recorded(const char *out, int *newest);

/* Lineage. An --out holds one line of checkpoints: a run continued from ckpt_<step> (a roll-back: --resume
 * <out>/ckpt_4 while ckpt_8 exists) moves every later ckpt_<s> into <out>/abandoned/after_ckpt_<step>[.k]/ (kept,
 * never deleted; nothing of this run sees them again), so "latest" and retention follow the new branch; a later
 * one that never got its manifest (an unfinished write) is removed instead.
 * ckpt_abandon_after does that and returns how many it moved (0: none were later), with the folder in dest;
 * -1 with why on failure (nothing moved when <out>/abandoned is a link: ckpt_abandon_check). Every folder is
 * opened without following links. The intent is written first (<out>/.rollback), so a run killed half-way is
 * completed by ckpt_finish_rollback, which every training run calls before choosing a checkpoint (--eval-only only
 * reads it): 1 if it finished one, 0 if none was pending, -1 with why if it cannot. */
int ckpt_abandon_after(const char *out, int step, char *dest, size_t dest_cap, char *why, size_t why_cap);
int ckpt_finish_rollback(const char *out, char *why, size_t why_cap);
/* Changes nothing. ckpt_abandon_check: 0 if ckpt_abandon_after(out, step) can move the later checkpoints (none is
 * later, or <out>/abandoned is absent or a real folder), -1 with why (a link there would take them outside --out;
 * the move itself opens every folder without following links). ckpt_rollback_pending: 1 and *step if a roll-back
 * is pending in <out>/.rollback (so only checkpoints up to *step are the line), 0 if none, -1 with why (a link, a
 * malformed file). ckpt_line_check: 0 if every ckpt_<step> under out that records a run_id records the same one,
 * -1 if they are two runs' (a checkpoint folder copied or linked in from another --out) with why listing each
 * run's, e.g. "run 1f...: ckpt_6; run 9a...: ckpt_4, ckpt_2". */
int ckpt_abandon_check(const char *out, int step, char *why, size_t why_cap);
int ckpt_rollback_pending(const char *out, int *step, char *why, size_t why_cap);
int ckpt_line_check(const char *out, char *why, size_t why_cap);

#endif
