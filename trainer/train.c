/*
 * trainer/train.c - the shared training loop (see train.h). Reads top to bottom: set-up helpers, the set-up steps
 * in train_main's order (options, batch, model, tokenizer, data, update), train_step, then train_main: parse, set
 * up, restore, the loop {train_step, log_step, evaluation hooks, checkpoint policy}, finish.
 * One step t = 1..steps (train_step): `accum` micro-steps of forward/backward over this rank's B x T windows (the
 * last backward hands finished gradient buckets to the communication thread), then the update's step(t, lr_t)
 * (optim/updater.h: the host DistOptim of optim/dist.h, or the model's device-resident update).
 * Not for: model maths (train_gpt.c, ...), update formulas and communication (optim/), what a step prints
 * (train_log.c), validation and tasks (eval_hooks.c), checkpoints (ckpt_policy.c, formats in ckpt.c).
 */
#define _GNU_SOURCE
#include "trainer/train.h"

#include <cblas.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/rng.h"
#include "common/schedule.h"
#include "common/util.h"
#include "dataloader/dataloader.h"
#include "comm/comm.h"
#include "optim/dist.h"
#include "tokenizer/tokenizer.h"
#include "trainer/ckpt.h"
#include "trainer/ckpt_policy.h"
#include "trainer/drills.h"
#include "trainer/eval_hooks.h"
#include "trainer/run.h"
#include "trainer/train_log.h"
#include "trainer/train_rules.h"
#include "optim/updater.h"

/* ------------------------------------------------------------------------------------------------------------ */
/* set-up helpers */

/* Ranks sharing this node, from MPI (comm/comm.h comm_local_size: any launcher), for the threads default. */
static int local_ranks(void) { return comm_local_size(); }

/* Sets OpenMP's and OpenBLAS's threads: --threads, or (0) the cores of this node shared by its ranks; returns them. */
static int set_threads(int requested) {
    int threads = requested;
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = (int)(cores / local_ranks());
        if (threads < 1) threads = 1;
    }
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    return threads;
}

/* 1 if spec names an existing file or directory or a glob that matches something. */
static int shards_exist(const char *spec) {
    if (file_exists(spec)) return 1;
    glob_t g;
    int rc = glob(spec, 0, NULL, &g);
    int found = rc == 0 && g.gl_pathc > 0;
    if (rc == 0) globfree(&g);
    return found;
}

/* The make target that prepares the default corpus for a tokenizer kind: `data` writes the GPT-2 (uint16) shards,
 * `data-llama` the Llama 2 and Llama 3 (uint32) ones (tokenizer/module.mk). Families without a tokenizer (the
 * tests' toy model) use `data`. */
static const char *data_target(const char *tokenizer_kind) {
    return tokenizer_kind && strncmp(tokenizer_kind, "llama", 5) == 0 ? "data-llama" : "data";
}

/* The folder of this program into dir (cap bytes), 1 if it holds the Makefile that prepares the default corpus (the
 * build puts the trainers beside it), else 0. */
static int program_dir(char *dir, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", dir, cap - 1);
    if (n <= 0) return 0;
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (!slash) return 0;
    *slash = '\0';
    char mk[4200];
    snprintf(mk, sizeof mk, "%s/Makefile", dir);
    return file_exists(mk);
}

/* The default corpus is "prepared on first use": rank 0 runs `make -s -C <this program's folder> <data_target>
 * DATA=<--data, absolute>` once while the others wait; never a Makefile of the folder it was started from (another
 * project's `make data`), never through a shell (a quote in --data). fatal() when the program has no Makefile beside
 * it or make fails. */
static void ensure_data(const TrainConfig *c, const char *tokenizer_kind, const char *train, const char *val,
                        int defaults) {
    const char *target = data_target(tokenizer_kind);
    int missing = !shards_exist(train) || !shards_exist(val);
    if (missing && defaults) {
        if (comm_rank() == 0) {
            char dir[4096], data[4400], cwd[4096], cmd[9000];
            if (!program_dir(dir, sizeof dir))
                fatal("the default corpus is missing under %s/ and this program has no Makefile beside it to prepare "
                      "it; run `make %s DATA=...` in the repository, or pass --train and --val", c->data, target);
            if (c->data[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(data, sizeof data, "DATA=%s", c->data);
            else snprintf(data, sizeof data, "DATA=%s/%s", cwd, c->data);
            snprintf(cmd, sizeof cmd, "make -s -C '%s' %s '%s'", dir, target, data);
            printf("default corpus missing under %s/: preparing it once with `%s`\n", c->data, cmd);
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0) {
                execlp("make", "make", "-s", "-C", dir, target, data, (char *)NULL);
                _exit(127);
            }
            int st = 0;
            if (pid < 0) fatal("cannot start `%s`: %s; run it by hand, or pass --train and --val", cmd, strerror(errno));
            while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                fatal("`%s` failed (%s %d); run it by hand to see why, or pass --train and --val", cmd,
                      WIFEXITED(st) ? "status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        }
        comm_barrier();
    }
    if (!shards_exist(train))
        fatal("--train %s: no shard matches; run `make %s` for the default corpus, or point --train at "
              "token shards (file, dir or glob)", train, target);
    if (!shards_exist(val))
        fatal("--val %s: no shard matches; run `make %s` for the default corpus, or point --val at "
              "token shards (file, dir or glob)", val, target);
}

/* --comm as the update's backend: nccl, mpi, else auto. */
static CommBackend comm_backend(const char *name) {
    if (strcmp(name, "nccl") == 0) return COMM_BACKEND_NCCL;
    if (strcmp(name, "mpi") == 0) return COMM_BACKEND_MPI;
    return COMM_BACKEND_AUTO;
}

/* Preemption: SIGTERM (a cluster's notice before it kills a job), SIGINT (Ctrl-C) or SIGHUP (the terminal or ssh
 * session that started the run closed) asks the run to stop after the step in progress; a second signal ends the
 * process at once, removing the temp files of the writes in progress (a checkpoint file, the --eval-dump beside its
 * target). The flag is agreed on by all ranks through the step's mean-loss all-reduce, so every rank stops after
 * the same step and writes its part of one checkpoint. Rank 0 says so on stderr, with write(2) (all a handler may
 * call): one note at the first signal (none under --eval-only, which stops at once and says so), one error line at
 * the second. On stderr, not stdout: after Ctrl-C on `train_gpt ... | tee log` the pipe's reader is gone, and a
 * write to it would end the run by SIGPIPE before its checkpoint. */
static volatile sig_atomic_t stop_signal = 0;
static int stop_says;               /* 1: this process writes the lines (rank 0) */
static int stop_notes_first;        /* 1: the first signal gets its note (not --eval-only) */
static char stop_second_line[4600]; /* the second signal's error line, made before any signal can come */
static void say(const char *line) {
    ssize_t n = write(2, line, strlen(line));
    (void)n; /* nothing to do if stderr is gone */
}
static void on_stop_signal(int sig) {
    if (stop_signal) {
        if (stop_says) say(stop_second_line);
        atomic_remove_temps();
        _exit(128 + sig);
    }
    stop_signal = sig;
    if (stop_says && stop_notes_first)
        say(sig == SIGINT  ? "note: SIGINT received: stopping after this step with a checkpoint (a second signal "
                             "stops at once)\n"
            : sig == SIGHUP ? "note: SIGHUP received: stopping after this step with a checkpoint (a second signal "
                              "stops at once)\n"
                            : "note: SIGTERM received: stopping after this step with a checkpoint (a second signal "
                              "stops at once)\n");
}
static void install_stop_handlers(const Run *r) {
    stop_says = r->rank == 0;
    stop_notes_first = !r->c.eval_only;
    if (r->c.eval_only)
        snprintf(stop_second_line, sizeof stop_second_line, "error: second signal: stopped at once, nothing "
                 "written\n");
    else if ((size_t)snprintf(stop_second_line, sizeof stop_second_line, "error: second signal: stopped at once, "
                              "without a checkpoint of this step; continue from the newest checkpoint with --resume "
                              "latest --out %s\n", r->c.out) >= sizeof stop_second_line)
        snprintf(stop_second_line, sizeof stop_second_line, "error: second signal: stopped at once, without a "
                 "checkpoint of this step; continue from the newest checkpoint with --resume latest and this --out\n");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask); /* one handler at a time: a second signal is handled as the second, after the first */
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGHUP);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* One run per --out: rank 0 holds an exclusive flock on <out>/.lock for the run's lifetime (the descriptor is never
 * closed; the kernel drops the lock when the process ends, however it ends, so a killed run never blocks the next).
 * A second run on the same directory stops here, before it reads or writes anything there, naming the holder's pid
 * (which the holder wrote into the file). fatal() also when the directory cannot be made or the file opened. */
static int out_lock_fd = -1;

/* A run refused before it writes anything (a --resume that is not there, shards of another tokenizer) leaves no
 * --out behind that it made: the folders it created are removed again while <out> holds nothing but the lock.
 * Only the folders its own mkdir made (an "a/../b" or "runs/x/" walks no further) and only a lock it holds: a run
 * refused because another holds --out leaves that run's lock and folder alone. */
static char fresh_out[4200];  /* the --out whose folders this run made */
static size_t fresh_made[64]; /* the lengths of the prefixes of fresh_out it made, shortest first */
static int n_fresh_made;
static void remove_fresh_out(void) {
    if (!n_fresh_made) return;
    DIR *d = opendir(fresh_out);
    if (d) {
        int others = 0;
        for (struct dirent *e; (e = readdir(d));)
            others += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, ".lock");
        closedir(d);
        if (others) return;
    }
    char path[4400];
    if (out_lock_fd >= 0) { /* the lock is this run's: another run's is never removed */
        snprintf(path, sizeof path, "%s/.lock", fresh_out);
        unlink(path);
    }
    for (int i = n_fresh_made - 1; i >= 0; i--) { /* deepest first; rmdir leaves a folder anything was put in */
        snprintf(path, sizeof path, "%.*s", (int)fresh_made[i], fresh_out);
        if (rmdir(path) != 0) break;
    }
    n_fresh_made = 0;
}

static void lock_out_dir(const Run *r, const char *out) {
    if (r->rank != 0) return;
    snprintf(fresh_out, sizeof fresh_out, "%s", out); /* whole: make_dirs refuses a path of 4096 bytes or more */
    n_fresh_made = make_dirs_for_noting("--out", out, fresh_made, (int)(sizeof fresh_made / sizeof fresh_made[0]));
    if (n_fresh_made) set_fatal_cleanup(remove_fresh_out);
    char path[4400];
    snprintf(path, sizeof path, "%s/.lock", out);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644); /* never through a planted link */
    if (fd < 0 && errno == ELOOP)
        fatal("%s is a symbolic link; the run locks only a file of its own: remove the link", path);
    if (fd < 0) fatal("cannot open %s: %s; check that --out %s is writable", path, strerror(errno), out);
    struct stat st; /* a hard link planted there: writing the pid would overwrite another file's content */
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink > 1)
        fatal("%s has %lu names (a hard link of another file); the run writes its pid only into a file of its own: "
              "remove it (a run makes it anew)", path, (unsigned long)st.st_nlink);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        fatal("--out %s is in use by another run (pid %s holds %s); wait for it to finish or stop it, or pass "
              "another --out", out, pid[0] ? pid : "unknown", path);
    }
    out_lock_fd = fd; /* kept open for the run's lifetime: closing it would release the lock */
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        fatal("cannot write %s: %s; check free space and permissions", path, strerror(errno));
    out_guard_input(path, "the --out lock file"); /* an output renamed onto it would free --out for a second run */
}

/* Every shard of spec that records its tokenizer (dataloader.h; `tok shards` writes it) must record the model's:
 * ids of another vocabulary may all lie below V (Llama 2's 32000 < GPT-2's 50257) and would train silently.
 * fatal() naming the shard, both tokenizers and the fix, before the first step, on every rank. */
static void check_data_tokenizer(const char *spec, const char *tok_kind, const Model *m) {
    if (!tok_kind) return; /* a model without a tokenizer of its own (the tests' toy) */
    int n;
    char **paths = shard_list(spec, &n);
    for (int i = 0; i < n; i++) {
        const char *t = shard_tokenizer(paths[i]);
        if (t && strcmp(t, tok_kind) != 0)
            fatal("%s was tokenized for %s, but this %s model (V %d) uses %s; pass shards made with `tok shards "
                  "--model %s` (make data, make data-llama)", paths[i], t, m->family, m->vocab_size, tok_kind, tok_kind);
    }
    shard_list_free(paths, n);
}

/* NULL if the options agree with each other, else the one-line reason (a static buffer). floor_given: --lr-floor
 * was on the command line (else a floor above a small --lr becomes lr/10). */
static const char *options_conflict(TrainConfig *c, int floor_given) {
    static char msg[512];
    if (c->lr_floor > c->lr && !floor_given) c->lr_floor = 0.1f * c->lr; /* a small --lr with the default floor */
    if (c->lr_floor > c->lr)
        snprintf(msg, sizeof msg, "--lr-floor %g is above --lr %g; the cosine decays from --lr down to --lr-floor",
                 c->lr_floor, c->lr);
    else if (c->density < 1.0 && !train_rule_sparse(c))
        snprintf(msg, sizeof msg, "--density %g applies only to --optimizer scape or topk-ef (got %s)", c->density,
                 c->optimizer);
    else if (c->mask_stats_every > 0 && !train_rule_sparse(c))
        snprintf(msg, sizeof msg, "--mask-stats-every %d logs the masks of --optimizer scape or topk-ef, and %s keeps "
                 "none; drop it", c->mask_stats_every, c->optimizer);
    else if (c->eval_only && !c->eval_task[0])
        snprintf(msg, sizeof msg, "--eval-only scores --eval-task FORMAT=FILE[,...]; give the tasks");
    else if (c->eval_only && !c->init[0] && !c->resume[0])
        snprintf(msg, sizeof msg, "--eval-only scores a trained model: give --init MODEL_FILE or --resume CHECKPOINT_DIR");
    else if ((c->eval_task_every || c->eval_task_skip_bad || c->eval_dump[0]) && !c->eval_task[0])
        snprintf(msg, sizeof msg, "--eval-task-every, --eval-task-skip-bad and --eval-dump apply to --eval-task; give the "
                 "tasks");
    else
        return NULL;
    return msg;
}

/* Exits 2 with one line when a path option is given an empty value (`--resume "$CKPT"` with CKPT unset), which
 * would otherwise read as not given: a new training run with the defaults instead of the resume or check asked for,
 * the default corpus instead of `--train "$SHARDS"`, no scoring or dump instead of the tasks asked for. */
static void refuse_empty_values(ArgSpec *opts, int n_opts) {
    static const struct { const char *name, *fix; } paths[] = {
        {"resume", "pass <out>/ckpt_<step> or latest"}, {"verify-ckpt", "pass <out>/ckpt_<step> or an --out dir"},
        {"init", "pass a model file"}, {"out", "pass the output directory"},
        {"train", "pass training shards (file, dir or glob), or drop the flag for the default corpus"},
        {"val", "pass validation shards (file, dir or glob), or drop the flag for the default corpus"},
        {"data", "pass the data cache dir, or drop the flag for data"},
        {"tokenizer", "pass gpt2, bpe4k, llama2, llama3 or a learned vocabulary's folder, or drop the flag"},
        {"eval-task", "pass FORMAT=FILE[,...], or drop the flag"}, {"eval-dump", "pass a file, or drop the flag"}};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        ArgSpec *s = args_find(opts, n_opts, paths[i].name);
        if (s && s->given && !(*(const char *const *)s->field)[0]) {
            args_fail("--%s was given an empty value (an unset shell variable?); %s", paths[i].name, paths[i].fix);
        }
    }
}

/* Refuses, before anything is allocated or initialised, a model that cannot fit in this node's memory: the model's
 * own bytes (ModelFamily.memory_bytes: parameters, gradients, activations for B x T) and the update's state, times
 * the ranks on this node, against what the machine can give (mem_available_bytes: MemAvailable, a cgroup limit, an
 * address-space limit). One line with both figures. Also keeps the model's canonical spec (r->model_canon). */
static void check_memory(Run *r, const char *init) {
    const TrainConfig *c = &r->c;
    if (!r->fam->memory_bytes) return;
    size_t np;
    double model = r->fam->memory_bytes(c->model, init, c->B, c->T, &np, r->model_canon, sizeof r->model_canon);
    double optim = train_optimizer_bytes_per_param(c, r->world) * (double)np;
    int local = local_ranks();
    char source[64];
    double avail = mem_available_bytes(source, sizeof source);
    double need = (model + optim) * local;
    if (avail > 0 && need > avail) {
        const double G = 1024.0 * 1024.0 * 1024.0;
        fatal("--model %s (%zu parameters) with --batch %d --seq %d needs %.1f GiB per rank (model, gradients and "
              "activations %.1f, %s state %.1f) x %d rank%s on this node = %.1f GiB, but %.1f GiB are available "
              "(%s); use a smaller --model, --batch or --seq, or fewer ranks per node", init ? init : c->model, np,
              c->B, c->T, (model + optim) / G, model / G, c->optimizer, optim / G, local, local == 1 ? "" : "s",
              need / G, avail / G, source);
    }
}

/* ------------------------------------------------------------------------------------------------------------ */
/* set-up, in train_main's order */

/* Parses argv into r->c and r->opts (options first, before MPI, so --help and usage errors need no launcher); exits
 * 2 on a usage error: an empty path value, or options that contradict each other (checked now unless resuming; then
 * once the checkpoint's options are in: a --density given to resume a SCAPE run is not checked against the default
 * optimizer). Reads the test drills' variables too. Returns -1 to go on, or --verify-ckpt's exit status (0, 1).
 * *floor_given: --lr-floor was on the command line. */
static int parse_options(Run *r, int argc, char **argv, int *floor_given) {
    TrainConfig *c = &r->c;
    int n_opts;
    ArgSpec *opts = train_options(c, r->fam, &n_opts);
    char usage[256];
    snprintf(usage, sizeof usage, "usage: %s [options]   (multi-rank: mpirun -np N %s [options])", argv[0], argv[0]);
    args_rank0_prints(); /* every rank parses this command line: one error line, rank 0's */
    args_parse(opts, n_opts, argc, argv, usage,
               "Pre-trains a model on token shards and writes <out>/log.jsonl and <out>/ckpt_<step>/.");
    r->opts = opts;
    r->n_opts = n_opts;
    *floor_given = args_find(opts, n_opts, "lr-floor")->given;
    refuse_empty_values(opts, n_opts);
    if (c->verify_ckpt[0]) {
        int status = verify_checkpoints(c->verify_ckpt);
        free(opts);
        return status;
    }
    const char *conflict = c->resume[0] ? NULL : options_conflict(c, *floor_given);
    if (conflict) args_fail("%s", conflict);
    nan_injection_parse(&r->inj); /* before anything is set up or written, as a usage error would be */
    return -1;
}

/* The batch arithmetic, total = B * T * world * accum: r->tokens_per_step (--total-batch, default one micro-batch
 * per rank) and r->accum; fatal() when --total-batch is not a multiple of B * T * world. */
static void batch_shape(Run *r) {
    TrainConfig *c = &r->c;
    int64_t micro = (int64_t)c->B * c->T * r->world;
    r->tokens_per_step = c->total_batch ? c->total_batch : micro;
    if (r->tokens_per_step % micro != 0)
        fatal("--total-batch %lld is not a multiple of --batch %d x --seq %d x %d rank%s = %lld tokens; use a "
              "multiple such as %lld", (long long)r->tokens_per_step, c->B, c->T, r->world, r->world == 1 ? "" : "s",
              (long long)micro, (long long)(r->tokens_per_step / micro + 1) * micro);
    r->accum = (int)(r->tokens_per_step / micro);
}

/* The model: from the checkpoint's model.bin when resuming, else --init or --model; refused before it is allocated
 * when it cannot fit in this node's memory (check_memory), and after when --comm or --seq asks what it cannot do. */
static void create_model(Run *r) {
    TrainConfig *c = &r->c;
    char model_file[sizeof r->ckpt_path + 16];
    const char *init = c->init[0] ? c->init : NULL;
    if (r->ckpt_path[0]) {
        if ((size_t)snprintf(model_file, sizeof model_file, "%s/model.bin", r->ckpt_path) >= sizeof model_file)
            fatal("--resume %s: path too long", r->ckpt_path);
        init = model_file;
    }
    check_memory(r, init);
    r->m = r->fam->create(c->model, init, c->seed, c->B, c->T);
    comm_print_placement(r->threads); /* after create: a CUDA model has chosen its GPU */
    /* a run started from --init records the model its file holds, not the unused --model default */
    if (!r->ckpt_path[0] && c->init[0] && r->model_canon[0]) c->model = r->model_canon;
    if (strcmp(c->comm, "nccl") == 0 && !r->m->create_updater)
        fatal("--comm nccl: this trainer communicates through MPI only (NCCL needs a CUDA trainer such as "
              "train_gptcu); use --comm mpi or auto");
    if (c->T > r->m->max_seq_len)
        fatal("--seq %d exceeds the model's maximum sequence length %d; use --seq %d or less", c->T,
              r->m->max_seq_len, r->m->max_seq_len);
}

/* The tokenizer kind of the run's data, after the model because its vocabulary picks it (a Llama with V 128256 reads
 * Llama 3 shards, the others Llama 2's): the model's, else the family's, or --tokenizer (a built-in name, or the
 * folder of a learned vocabulary: *learned). fatal() when --tokenizer names none, has no default corpus or does not
 * fit the model. NULL when the family has none (the tests' toy). */
static const char *choose_tokenizer(Run *r, int defaults_data, int *learned) {
    TrainConfig *c = &r->c;
    const char *tok_kind = r->m->tokenizer ? r->m->tokenizer : r->fam->tokenizer;
    if (c->tokenizer[0]) tok_kind = c->tokenizer; /* a built-in name, or the folder of a learned vocabulary */
    *learned = tok_kind && tokenizer_is_dir(tok_kind);
    if (c->tokenizer[0] && !*learned && strcmp(tok_kind, "gpt2") && strcmp(tok_kind, "bpe4k") &&
        strcmp(tok_kind, "llama2") && strcmp(tok_kind, "llama3"))
        fatal("--tokenizer %s: not a tokenizer; use gpt2, bpe4k, llama2, llama3 or the folder of a vocabulary learned "
              "by `tok train --out DIR` (holding encoder.json and vocab.bpe)", c->tokenizer);
    if (*learned && defaults_data)
        fatal("--tokenizer %s: a learned vocabulary has no default corpus; pass --train and --val (shards made with "
              "`tok shards --model %s`)", tok_kind, tok_kind);
    if (c->tokenizer[0] && tok_kind) {
        Tokenizer *t = tokenizer_load(tok_kind, c->data);
        if (tokenizer_vocab_size(t) != r->m->vocab_size)
            fatal("--tokenizer %s has %d tokens but the model has V = %d; give the model v%d (e.g. --model ...v%d) or "
                  "the tokenizer it was made for", c->tokenizer, tokenizer_vocab_size(t), r->m->vocab_size,
                  tokenizer_vocab_size(t), tokenizer_vocab_size(t));
        tokenizer_free(t);
    }
    return tok_kind;
}

/* The data: --train/--val or the default corpus (prepared on first use), every shard checked against the model's
 * tokenizer, then the training and validation loaders; and the tokenizer of the samples (--sample-every). */
static void open_data(Run *r, const char *tok_kind, int learned, int defaults_data) {
    TrainConfig *c = &r->c;
    const char *shard_kind = learned ? "bpe" : tok_kind; /* what `tok shards` records for it */
    const char *tokdir = tok_kind ? tok_kind : r->fam->family;
    char train_spec[4200], val_spec[4200];
    if (c->train[0]) snprintf(train_spec, sizeof train_spec, "%s", c->train);
    else snprintf(train_spec, sizeof train_spec, "%s/sotu/%s/sotu_train_*.bin", c->data, tokdir);
    if (c->val[0]) snprintf(val_spec, sizeof val_spec, "%s", c->val);
    else snprintf(val_spec, sizeof val_spec, "%s/sotu/%s/sotu_val_*.bin", c->data, tokdir);
    ensure_data(c, tok_kind, train_spec, val_spec, defaults_data);

    if (c->sample_every > 0 && tok_kind && !r->tok) {
        r->tok = tokenizer_load(tok_kind, c->data);
        if (tokenizer_vocab_size(r->tok) > r->m->vocab_size)
            fatal("tokenizer '%s' has %d tokens but the model only %d; use a model built for this tokenizer",
                  tok_kind, tokenizer_vocab_size(r->tok), r->m->vocab_size);
    }

    check_data_tokenizer(train_spec, shard_kind, r->m);
    check_data_tokenizer(val_spec, shard_kind, r->m);
    uint64_t vocab_hash = tok_kind ? tokenizer_vocab_hash(tok_kind, c->data) : 0; /* 0: its files are not at hand */
    if (tok_kind) shard_check_vocab(train_spec, vocab_hash, tok_kind, r->rank == 0);
    if (tok_kind) shard_check_vocab(val_spec, vocab_hash, tok_kind, r->rank == 0);
    r->dl = dataloader_open(train_spec, c->B, c->T, r->rank, r->world, rng_mix(c->seed, 0x64617461ull), c->shuffle,
                            r->m->vocab_size);
    r->vl = valloader_open(val_spec, c->B, c->T, r->rank, r->world, r->m->vocab_size);
    valloader_set_max_batches(r->vl, (uint64_t)c->eval_batches);
}

/* The update: the model's own device-resident one (Model.create_updater) unless --update host or a host-only setting
 * asks otherwise, else the host DistOptim (optim/dist.h, updater_host.c); fatal() naming the flag that asks for what
 * this trainer lacks. */
static void create_update(Run *r) {
    TrainConfig *c = &r->c;
    DistConfig dc;
    train_dist_config(c, &dc);
    UpdaterConfig uc;
    memset(&uc, 0, sizeof uc);
    uc.dist = dc;
    uc.comm = comm_backend(c->comm);
    uc.seed = c->seed;
    uc.scape_offload_residual = c->scape_offload_residual;
    /* the ablation and the variants are the host's */
    int want_host = strcmp(c->update, "host") == 0 || c->scape_double_residual || dc.variant != SCAPE_FAITHFUL;
    r->u = r->m->create_updater && !want_host ? r->m->create_updater(r->m, &uc) : NULL;
    if (!r->u) {
        if (strcmp(c->update, "device") == 0 && !r->m->create_updater)
            fatal("--update device: this trainer updates on the host only (the device update belongs to the CUDA "
                  "trainers, e.g. train_gptcu); use --update auto or host");
        if (strcmp(c->update, "device") == 0)
            fatal("--update device: this trainer has no device-resident update for --optimizer %s (only for adamw, "
                  "adams and scape); use --update auto or host", c->optimizer);
        if (c->scape_offload_residual)
            fatal("--scape-offload-residual: only the device SCAPE update of the CUDA trainers has a residual in GPU "
                  "memory to offload (this run updates on the host); drop the flag, or use --optimizer scape with a "
                  "CUDA trainer and --update auto");
        if (uc.comm == COMM_BACKEND_NCCL)
            fatal("--comm nccl: the host update moves %s's gradients through host memory (MPI); use --comm mpi or "
                  "auto%s", c->optimizer, want_host ? ", or --update auto" : "");
        r->u = updater_host_create(&r->m->table, r->m->params, r->m->grads, &dc);
    }
    r->sparse_rule = train_rule_sparse(c); /* the step line shows d */
}

/* The loop's learning-rate schedule and (B, T) input and target buffers, and rank 0's <out>/log.jsonl. */
static void open_loop(Run *r) {
    TrainConfig *c = &r->c;
    r->sched = (LrSchedule){c->lr, c->lr_floor, c->warmup, c->steps};
    r->inputs = xmalloc((size_t)c->B * c->T * sizeof(int), "inputs");
    r->targets = xmalloc((size_t)c->B * c->T * sizeof(int), "targets");
    if (r->rank == 0) {
        make_dirs_for("--out", c->out);
        char path[4400];
        snprintf(path, sizeof path, "%s/log.jsonl", c->out);
        r->log = jlog_open(path);
    }
}

/* Frees the option table and the option values restored from the checkpoint. */
static void free_options(Run *r) {
    for (int i = 0; i < r->n_restored; i++) free(r->restored[i]);
    free(r->opts);
    free(r->resume_notes);
}

/* Frees everything the run holds, commits the --eval-dump and ends MPI; returns the exit status: status, or 1 when
 * the dump could not be written (one "error:" line). */
static int finish_run(Run *r, int status) {
    jlog_close(r->log);
    nan_injection_free(&r->inj);
    free(r->inputs);
    free(r->targets);
    r->u->free(r->u);
    valloader_free(r->vl);
    dataloader_free(r->dl);
    if (!free_eval_tasks(r) && status == 0) status = 1; /* the dump could not be written: one "error:" line */
    if (r->tok) tokenizer_free(r->tok);
    r->m->free(r->m);
    comm_finalize();
    free_options(r);
    return status;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* one training step */

/* The loss vote of step t, on every rank before its last backward: the mean loss over every rank's micro-batches
 * into *mean (loss: this rank's sum over its `accum` micro-batches), and with it whether any rank was asked to stop
 * (a signal: all stop after this step, r->stop_at). Returns 1 when the last backward runs at scale 1/accum, 0 when
 * it must run at scale NaN: the mean loss is not finite (so the gradient norm is NaN on every rank and the update
 * skips the step the only way that leaves its state, moments, residuals and masks, untouched; buckets must still go
 * on the wire, the other ranks wait for them), or a drill asks for it (trainer/drills.h). */
static int vote_loss(Run *r, int t, double loss, double *mean) {
    int nan_grad = nan_injection_step(&r->inj, r->rank, t, &loss);
    /* SIGHUP (1) votes 2^-10, not 1: two ranks' SIGHUPs then never add up to SIGINT (2); any sum that is not one
     * rank's vote (several ranks signalled) reads as SIGTERM on the ranks that got none */
    double hup = 1.0 / 1024;
    double sums[2] = {loss / r->accum, stop_signal == SIGHUP ? hup : stop_signal ? (double)stop_signal : 0.0};
    comm_allreduce_sum_f64(sums, 2);
    *mean = sums[0] / r->world;
    double s = sums[1]; /* another rank's signal, when only one rank got one */
    if (s > 0 && !r->stop_at)
        r->stop_at = stop_signal ? stop_signal : s == hup ? SIGHUP : s == SIGINT ? SIGINT : SIGTERM;
    return isfinite(*mean) && !nan_grad;
}

/* One training step t = 1..steps on every rank: `accum` micro-steps of forward and backward over this rank's B x T
 * windows, the loss vote before the last backward, whose finished gradient buckets go to the update as they are
 * ready, then the update's step(t, lr_t) (optim/updater.h: the host DistOptim of optim/dist.h, or the model's
 * device-resident update), which skips a step whose gradient norm is not finite. Returns the mean loss, the gradient
 * norm, whether it was skipped, its time and its traffic. */
static StepResult train_step(Run *r, int t) {
    const TrainConfig *c = &r->c;
    StepResult s;
    memset(&s, 0, sizeof s);
    double t0 = now_seconds();
    s.lr = lr_at(&r->sched, t);
    double loss = 0.0;
    /* mask statistics on logged steps and the step before (their Jaccard compares with it) */
    int ms = c->mask_stats_every;
    r->u->mask_stats_enable(r->u, ms > 0 && (t % ms == 0 || (t + 1) % ms == 0));
    for (int a = 0; a < r->accum; a++) {
        int last_micro = a == r->accum - 1;
        dataloader_next(r->dl, r->inputs, r->targets);
        loss += r->m->forward(r->m, r->inputs, r->targets, c->B, c->T);
        float scale = 1.0f / (float)r->accum;
        if (last_micro && !vote_loss(r, t, loss, &s.loss)) scale = NAN;
        /* only the last micro-step's gradients are final, so only then may buckets go on the wire */
        r->m->backward(r->m, scale, last_micro ? r->u->bucket_ready : NULL, r->u);
    }
    int skipped = r->u->step(r->u, t, s.lr, &s.grad_norm);
    /* skipped is the same on every rank (the norm is global), and so is the mean loss (all-reduced) */
    s.bad = skipped || !isfinite(s.loss);
    s.secs = now_seconds() - t0;
    comm_stats_take(&s.comm);
    return s;
}

/* ------------------------------------------------------------------------------------------------------------ */

int train_main(int argc, char **argv, const ModelFamily *fam) {
    Run run, *r = &run;
    memset(r, 0, sizeof *r);
    r->fam = fam;
    TrainConfig *c = &r->c;
    fp_flush_denormals(); /* before any OpenMP region, so every compute thread inherits it (util.h says why) */
    int floor_given, verified = parse_options(r, argc, argv, &floor_given);
    if (verified >= 0) return verified; /* --verify-ckpt */

    comm_init(&argc, &argv);
    r->rank = comm_rank();
    r->world = comm_world();
    install_stop_handlers(r);
    r->threads = set_threads(c->threads);
    comm_set_timeout(c->comm_timeout);
    distopt_test_corrupt_mask_rank(r->world); /* a drill's variable refused before --out is touched */
    if (!c->eval_only) lock_out_dir(r, c->out); /* --eval-only writes no checkpoint: --out need not be free */

    /* resuming: what defines the run comes from the checkpoint (ckpt_policy.h choose_checkpoint) */
    choose_checkpoint(r);
    const char *conflict = options_conflict(c, floor_given);
    if (conflict) fatal("%s", conflict);
    train_rule_options_check(r->opts, r->n_opts, c);
    int defaults_data = !c->train[0] && !c->val[0];
    batch_shape(r);
    create_model(r);
    int learned;
    const char *tok_kind = choose_tokenizer(r, defaults_data, &learned);
    if (c->eval_task[0]) load_eval_tasks(r, tok_kind);
    if (c->eval_only) { /* score the model of --init / --resume, no data, no optimizer, no checkpoint */
        eval_only(r, &stop_signal);
        tokenizer_free(r->tok);
        r->m->free(r->m);
        comm_finalize();
        free_options(r);
        return 0;
    }
    open_data(r, tok_kind, learned, defaults_data);
    create_update(r);
    rng_seed(&r->sample_rng, rng_mix(c->seed, 0x73616d70ull));
    int start = r->ckpt_path[0] ? restore_checkpoint(r) : 0;
    open_loop(r);
    open_eval_dump(r, start);
    /* every check has passed: only now does the line of checkpoints change, and only for a run that trains (a
     * resume with --steps at or below its checkpoint's step, a typo for a longer run, moves nothing aside) */
    if (start < c->steps) commit_lineage(r);
    log_start(r, start);
    set_fatal_cleanup(NULL); /* the run has begun: --out is its, whatever happens now */
    if (start >= c->steps && r->rank == 0) printf("checkpoint is at step %d, --steps %d: nothing to do\n", start,
                                                   c->steps);
    if (start == 0 && c->eval_every > 0) validate(r, 0);
    CommStats between;
    comm_stats_take(&between); /* set-up traffic (parameter broadcast) is not a step's */
    int status = 0; /* the exit status */

    for (int t = start + 1; t <= c->steps; t++) {
        StepResult s = train_step(r, t);
        r->bad_run = s.bad ? r->bad_run + 1 : 0;
        log_step(r, t, &s);
        if (c->max_bad_steps > 0 && r->bad_run >= c->max_bad_steps) {
            status = log_stop_bad_steps(r, t); /* nothing is written or pruned on the way out */
            break;
        }
        if (c->mask_stats_every > 0 && t % c->mask_stats_every == 0) log_mask_stats(r, t);
        int last = t == c->steps;
        int val = last || (c->eval_every > 0 && t % c->eval_every == 0);
        int smp = c->sample_every > 0 && (last || t % c->sample_every == 0);
        int tasks = r->ntasks && (last || (c->eval_task_every > 0 && t % c->eval_task_every == 0));
        if (val || smp) run_synced_model(r, 1); /* they see the synchronized model (local-update rules) */
        if (val) validate(r, t);
        if (smp) sample(r, t);
        if (val || smp) run_synced_model(r, 0);
        int saved = checkpoint_at(r, t); /* after sampling: the saved sampler RNG is the one the next step uses */
        /* the tasks after the checkpoint: a scoring point never costs the run (eval_tasks_at) */
        if (tasks) {
            run_synced_model(r, 1);
            eval_tasks_at(r, t);
            run_synced_model(r, 0);
        }
        comm_stats_take(&between); /* validation/checkpoint traffic is not the next step's */
        if (r->stop_at && !last) { /* preempted: a checkpoint of this step, then out */
            status = checkpoint_and_stop(r, t, saved);
            break;
        }
    }
    /* the run reached --steps but its last step was skipped: its end was not saved, so it did not do what it says */
    if (status == 0 && r->bad_run > 0 && start < c->steps) status = log_end_skipped(r);
    return finish_run(r, status);
}
