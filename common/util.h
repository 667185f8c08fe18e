/*
 * common/util.h - small helpers every program in the runtime uses: fatal errors with one clear line,
 * checked allocation and checked file I/O that name the file on failure, a monotonic clock.
 * Not for: anything model- or optimizer-specific.
 */
#ifndef COMMON_UTIL_H
#define COMMON_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __GNUC__
#define NORETURN __attribute__((noreturn))
#define PRINTF_LIKE(a, b) __attribute__((format(printf, a, b)))
#else
#define NORETURN
#define PRINTF_LIKE(a, b)
#endif

/* Prints "error: <message>" as one line on stderr and exits with status 1. If the process runs under MPI
 * (comm layer initialised) the hook set by set_fatal_hook runs first so the whole job is brought down. */
NORETURN void fatal(const char *fmt, ...) PRINTF_LIKE(1, 2);
/* fatal() with status 2: a command-line value found wrong after the parse (e.g. a --model spec), so that scripts can
 * tell "called wrong" from "failed" as for args_fail's usage errors. */
NORETURN void fatal_usage(const char *fmt, ...) PRINTF_LIKE(1, 2);
/* Writes "error: <message>\n" to stderr in one write() (cut at 8 KiB): under mpirun the launcher's own lines could
 * otherwise land between the pieces of one line. fatal() and the usage errors (common/args.c) print with it. */
void error_line_v(const char *fmt, va_list ap);
/* Hook called by fatal() before exit (e.g. MPI_Abort); NULL clears it. */
void set_fatal_hook(void (*hook)(int status));
/* Called by fatal() before the hook, after the open outputs' temp files are removed (e.g. to remove an output
 * directory the program made and left empty); NULL clears it. */
void set_fatal_cleanup(void (*cleanup)(void));
/* The rank a launcher gave this process, read from its environment before any MPI call (mpirun's
 * OMPI_COMM_WORLD_RANK, srun's PMIX_RANK or PMI_RANK); -1 when no launcher started it. */
int launcher_rank(void);

/* fflush(stdout) and fatal() naming the OS error if standard output can no longer be written (redirected to a full
 * disk, say); call where a program must not go on unheard (the trainer: after each step's line). */
void xflush_stdout(void);
/* malloc/calloc that never return NULL: on failure fatal() names `what` and the size asked for. */
void *xmalloc(size_t bytes, const char *what);
void *xcalloc(size_t n, size_t size, const char *what);
/* realloc that never returns NULL: on failure fatal() names `what` and the size asked for. */
void *xrealloc(void *p, size_t bytes, const char *what);

/* fopen that fails with "error: cannot open <path> for <reading|writing>: <strerror>. <hint>" */
FILE *xfopen(const char *path, const char *mode, const char *hint);
/* fread/fwrite of exactly `bytes` bytes or fatal() naming the path and what was being read. */
void xfread(void *dst, size_t bytes, FILE *f, const char *path, const char *what);
void xfwrite(const void *src, size_t bytes, FILE *f, const char *path, const char *what);
/* All that is left of stream f (a file, a pipe, stdin) in a new buffer with a NUL after it, its length (the NUL not
 * counted) in *len; NULL with errno (EIO if the stream kept none) on a read error. f stays open. The one whole-file
 * reader of the programs: each caller words its own error. */
char *read_stream(FILE *f, size_t *len);
/* Writes head then body (either may be empty) to `path` atomically (atomic_open ... atomic_commit below). On any
 * failure (disk full, permissions) the temp file is removed, the old `path` is left as it was, and fatal() names
 * `path` and says to check free space and permissions. */
void write_file_atomic(const char *path, const void *head, size_t head_bytes, const void *body, size_t body_bytes);

/* ---- the atomic write: every whole file the programs write (model files, checkpoints, shards, vocabularies, GGUF,
 * --eval-dump) goes through these, so the target holds its old content or the complete new one, never a part:
 *   atomic_open    a new temp file beside the target (open_temp_beside: never an existing name or a planted link)
 *   atomic_stream  write into it (fwrite, fprintf); the first OS error of a write is kept and reported at the end
 *   atomic_close   flush (a write error counts), mode 0644, fsync, close
 *   atomic_place   rename onto the target (a link there is replaced itself, never followed), fsync of the folder
 *   atomic_commit  close then place; atomic_discard drops the temp instead.
 * Each returns 0 or the OS error of the first step that failed, the temp file then removed and the target as it
 * was; the caller words the message. */
typedef struct AtomicFile AtomicFile;
/* A new temp file beside path and its stream; NULL with errno if the temp cannot be made (nothing is left). */
AtomicFile *atomic_open(const char *path);
/* The stream to write into. */
FILE *atomic_stream(AtomicFile *a);
/* The temp file's name (to remove it from an exit handler). */
const char *atomic_temp_name(const AtomicFile *a);
/* Flushes the stream; 0 while every write so far succeeded, else the first OS error (EIO if none was kept). */
int atomic_error(AtomicFile *a);
/* Flushes, sets mode 0644, fsyncs and closes the temp; 0, or the error with the temp removed (then atomic_discard). */
int atomic_close(AtomicFile *a);
/* After atomic_close: renames the temp onto path and fsyncs its folder; 0 or the error, temp removed. Frees a. */
int atomic_place(AtomicFile *a, const char *path);
/* atomic_close then atomic_place (or atomic_discard on failure); 0 or the error. Frees a. */
int atomic_commit(AtomicFile *a, const char *path);
/* Removes the temp, the target untouched; frees a. NULL is a no-op. */
void atomic_discard(AtomicFile *a);
/* Removes the temp file of every atomic write in progress (async-signal-safe: for a handler that ends the process,
 * so no temp is left beside its target). */
void atomic_remove_temps(void);
/* For a program without stop signals of its own (export_gguf): SIGINT, SIGTERM and SIGHUP remove the temps of the
 * writes in progress (atomic_remove_temps), then end the process as the signal would. */
void atomic_temps_go_with_signals(void);
/* Creates a new file "<path>.tmp.XXXXXX" (a unique name, mkostemp: mode 0600, O_EXCL so an existing name or a
 * planted symbolic link is never opened) and returns its descriptor, its name in tmp; -1 with errno on failure. */
int open_temp_beside(const char *path, char *tmp, size_t cap);
/* Bytes this process can still allocate and touch: the least of MemAvailable (/proc/meminfo), a cgroup memory limit
 * less its usage, and an address-space limit (RLIMIT_AS) less what is mapped; which one in source (cap bytes).
 * -1 if none can be read. SCAPE_TEST_MEM_AVAILABLE=BYTES (tests only) replaces all of them.
 */
double mem_available_bytes(char *source, size_t cap);
/* 1 if path itself is a symbolic link (lstat). */
int is_symlink(const char *path);
/* 1 if both paths exist and name the same file (device and inode, links followed). */
int same_file(const char *a, const char *b);
/* fsync of the directory holding `path` (best effort): makes a rename or unlink in it durable. */
void fsync_parent_dir(const char *path);
/* Size of a file in bytes, or -1 if it cannot be stat'ed. */
int64_t file_size(const char *path);
/* v as the fewest significant digits (1-9) that read back (strtof) as the same float, "%g" style: 0.1f is "0.1",
 * not "0.100000001". Non-finite values print as "%g" does. */
void format_float_shortest(char *buf, size_t cap, float v);
/* format_float_shortest for a double: the fewest significant digits (1-17) that read back (strtod) as the same
 * double, so a --density typed as 0.05 shows as "0.05", not "0.050000000000000003". */
void format_double_shortest(char *buf, size_t cap, double v);
/* 1 if s[0..n) is well-formed UTF-8: no overlong forms, surrogates or code points above U+10FFFF (a NUL byte is
 * valid; callers that want C strings pass strlen). */
int utf8_valid_n(const char *s, size_t n);
int file_exists(const char *path);
/* mkdir -p; fatal() on failure. */
void make_dirs(const char *path);
/* mkdir -p for the folder an option names (flag: "--out"); fatal() on failure with one line naming the option and
 * the fix: "--out X: cannot create directory Y: <reason>; choose a writable folder". */
void make_dirs_for(const char *flag, const char *path);
/* make_dirs_for, noting in made[] (at most cap) the length of each prefix of path that it made a folder of, shortest
 * first, and returning how many: the folders to remove again, deepest first, are exactly these (a prefix that was
 * there, "a/.." or a doubled '/', is not among them). */
int make_dirs_for_noting(const char *flag, const char *path, size_t *made, int cap);

/* ---- output files (issue 43): every output of a run is written the way checkpoints are ----
 * A run names the files it reads (out_guard_input) before it opens its outputs; no output is then written over one
 * of them, over another output of the run, or through a symbolic link. Two ways to write:
 *   whole   out_open / out_commit: a temp file beside the target, every write and the close checked, fsync,
 *           rename at the end; the target holds its old content or the complete new one, never a part. A temp
 *           not committed is removed when the process exits (fatal() included) or the caller discards it.
 *   append  out_open_append: a log that grows by whole lines (common/log.c). */

/* Marks path (which exists) as an input of this run, `what` saying which ("the --eval-task file"): out_open and
 * out_open_append then refuse it, by its resolved name and by device and inode (another spelling, a link to it or
 * a hard link of it). */
void out_guard_input(const char *path, const char *what);
typedef struct OutFile OutFile;
/* Opens a new content for `path`, `what` naming the output in messages ("--eval-dump"). Refuses, returning NULL
 * with one line in err (cap bytes) naming path and the fix: a symbolic link, something there that is not a regular
 * file (a folder, a FIFO, a device such as /dev/full), an input or another output of this run, a temp file that
 * cannot be made. The target stays as it was until out_commit. */
OutFile *out_open(const char *path, const char *what, char *err, size_t cap);
/* The stream to write into (fprintf and friends); its errors are caught by out_commit. */
FILE *out_stream(OutFile *o);
/* 1 while every write so far succeeded (fflush and ferror now); 0 with err naming the file and the OS error. */
int out_ok(OutFile *o, char *err, size_t cap);
/* Flushes, fsyncs and closes the temp (each checked) and renames it onto the target. Returns 1, or 0 with err
 * (one line: the target, the OS error, the fix), the temp removed and the target as it was. Frees o. */
int out_commit(OutFile *o, char *err, size_t cap);
/* Drops the new content: the temp is removed, the target left as it was. Frees o; NULL is a no-op. */
void out_discard(OutFile *o);
/* Opens `path` for appending (O_APPEND, created 0644 if missing) without ever blocking: refuses, returning -1 with
 * one line in err, a FIFO, a socket, a folder, a block device, an input or a whole output of this run (out_open),
 * a file with other hard links (their content would change with it), and a symbolic link, except one to a character
 * device (/dev/null: a discarded log; /dev/full), where nothing can be cut or overwritten. Returns the descriptor (blocking mode, close-on-exec). */
int out_open_append(const char *path, char *err, size_t cap);

/* Makes the calling thread flush denormal floats to zero (x86 MXCSR FTZ and DAZ; no-op elsewhere). Threads it
 * creates afterwards inherit the setting (pthread_create copies the floating-point environment), so call it first
 * in main, before any OpenMP region. Why: late in backward, tiny gradients become denormal and x86 handles them
 * in microcode; measured on d12 at B=4, T=256, layernorm backward took 378 ms per step instead of 22 ms and GELU
 * backward 96 instead of 10. Values below 1.2e-38 do not affect training. */
void fp_flush_denormals(void);

/* Seconds since an arbitrary monotonic origin. */
double now_seconds(void);

#endif
