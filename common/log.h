/*
 * common/log.h - <out>/log.jsonl: one JSON object per line per event ("start", "train", "val", "sample", "ckpt",
 * "resume"), always with an "event" key, each written whole with one write(2) as it ends, so a crash loses at most
 * the current event. A write that fails (a full disk) is fatal naming the file and the OS error, after cutting the
 * part of the line that landed: the file never ends in half a line.
 * Numbers are written with 9 significant digits (float32 values round-trip exactly); non-finite values as null.
 * A NULL Log* makes every call a no-op, so ranks other than 0 can call the same code.
 * Not for: the human-readable per-step stdout line (trainer/train_log.c).
 */
#ifndef COMMON_LOG_H
#define COMMON_LOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct JsonLog JsonLog;

/* Opens `path` for appending (a resumed run continues the same file); a partial last line left by a process that
 * died mid-write is cut, with a note on stderr. fatal() naming the path on failure. */
JsonLog *jlog_open(const char *path);
void jlog_close(JsonLog *l);

/* jlog_begin starts an object with "event": event; the setters add keys in call order; jlog_end writes it. */
void jlog_begin(JsonLog *l, const char *event);
void jlog_int(JsonLog *l, const char *key, int64_t v);
void jlog_num(JsonLog *l, const char *key, double v);
/* A float setting (lr, weight decay) in the fewest digits that read back as the same float: 0.001, not the
 * 0.00100000005 that %.9g prints for 1e-3f. */
void jlog_float(JsonLog *l, const char *key, float v);
void jlog_str(JsonLog *l, const char *key, const char *v);
/* Arrays of n numbers (as jlog_num: non-finite -> null) and of n strings (added by the optimizer engineer). */
void jlog_nums(JsonLog *l, const char *key, const double *v, int n);
void jlog_strs(JsonLog *l, const char *key, const char *const *v, int n);
void jlog_end(JsonLog *l);

/* Appends s as a JSON string literal (quotes, escapes for ", \, control bytes) to buf of size cap at *len;
 * truncates safely. Exposed for the checkpoint manifest. */
void json_escape(char *buf, size_t cap, size_t *len, const char *s);

#endif
