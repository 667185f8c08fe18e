/*
 * trainer/train_options.c - the trainer's one option table (common/args.h generates the parser and --help from it);
 * the update rules' own options come from their rows (optim/rule.h), in the place the table marks.
 * Kept apart from train.c so tests can check the table and its help without linking the whole runtime.
 */
#include "trainer/train.h"
#include "trainer/train_rules.h"

ArgSpec *train_options(TrainConfig *c, const ModelFamily *fam, int *n) {
    const double IMAX = 2147483647.0;
    ArgSpec t[] = {
        {"model", ARG_STRING, &c->model, fam->default_model, 0, 0, NULL, fam->model_help, 0},
        {"init", ARG_STRING, &c->init, "", 0, 0, NULL, "start from this model file instead of --model", 0},
        {"data", ARG_STRING, &c->data, "data", 0, 0, NULL, "data cache dir (corpus shards, tokenizer files)", 0},
        {"tokenizer", ARG_STRING, &c->tokenizer, "", 0, 0, NULL,
         "vocabulary of the data and samples: gpt2, bpe4k, llama2, llama3 or the folder of one learned by `tok train "
         "--out DIR` (its V must be the model's; then pass --train/--val shards made with `tok shards --model DIR`) "
         "[default: the model's, by its V]", 0},
        {"train", ARG_STRING, &c->train, "", 0, 0, NULL,
         "training shards: file, dir or glob (default <data>/sotu/<tok>/sotu_train_*.bin)", 0},
        {"val", ARG_STRING, &c->val, "", 0, 0, NULL,
         "validation shards (default <data>/sotu/<tok>/sotu_val_*.bin)", 0},
        {"out", ARG_STRING, &c->out, "out", 0, 0, NULL, "output dir: log.jsonl and ckpt_<step>/", 0},
        {"batch", ARG_INT, &c->B, "8", 1, 65536, NULL, "B, sequences per micro-step per rank", 0},
        {"seq", ARG_INT, &c->T, "128", 1, 1048576, NULL, "T, tokens per sequence", 0},
        {"total-batch", ARG_INT, &c->total_batch, "0", 0, IMAX, NULL,
         "tokens per optimizer step, B*T*ranks*accum (0: B*T*ranks, no accumulation)", 0},
        {"steps", ARG_INT, &c->steps, "300", 1, IMAX, NULL, "optimizer steps", 0},
        {"lr", ARG_FLOAT, &c->lr, "1e-3", 0, 1, NULL, "peak learning rate", 0},
        {"warmup", ARG_INT, &c->warmup, "30", 0, IMAX, NULL, "linear warm-up steps", 0},
        {"lr-floor", ARG_FLOAT, &c->lr_floor, "1e-4", 0, 1, NULL, "final learning rate of the cosine decay (lr/10 if the default is above --lr)", 0},
        {"weight-decay", ARG_FLOAT, &c->weight_decay, "0.1", 0, 10, NULL,
         "decoupled weight decay (matrices only)", 0},
        {"clip", ARG_FLOAT, &c->clip, "1.0", 0, 1e9, NULL, "global gradient-norm clip, 0 = off", 0},
        {"optimizer", ARG_STRING, &c->optimizer, "adamw", 0, 0, train_optimizer_choices(),
         "update rule (topk-ef: top-k of raw gradients with error feedback into AdamW, the baseline; powersgd: "
         "PowerSGD's low-rank gradients with error feedback into AdamW; onebit-adam: 1-bit Adam, AdamW until "
         "--onebit-freeze, then the momentum sent as signs with error compensation; demo: DeMo, each rank's momentum "
         "sends its top DCT coefficients per block, sign step; diloco: DiLoCo, H local inner steps per rank, then "
         "the averaged pseudo-gradient by an outer Nesterov SGD; sparseloco: SparseLoCo, DiLoCo's inner steps, then "
         "each rank's error feedback's top-k per chunk in 2 bits; these five run the host update, also in the CUDA "
         "trainers)", 0},
        {"beta1", ARG_FLOAT, &c->beta1, "0.9", 0, 0.999999, NULL, "first-moment decay", 0},
        {"beta2", ARG_FLOAT, &c->beta2, "0.95", 0, 0.999999, NULL, "second-moment decay", 0},
        {"eps", ARG_FLOAT, &c->eps, "1e-8", 0, 1, NULL, "denominator epsilon", 0},
        {"eval-every", ARG_INT, &c->eval_every, "50", 0, IMAX, NULL,
         "validate every N steps (and at step 0 and the end); 0 = only at the end", 0},
        {"eval-batches", ARG_INT, &c->eval_batches, "20", 0, IMAX, NULL,
         "validation batches per rank per pass, 0 = all", 0},
        {"sample-every", ARG_INT, &c->sample_every, "100", 0, IMAX, NULL,
         "print a sample every N steps (and at the end), 0 = never", 0},
        {"sample-tokens", ARG_INT, &c->sample_tokens, "64", 1, 1000000, NULL, "tokens per sample", 0},
        {"prompt", ARG_STRING, &c->prompt, "", 0, 0, NULL, "sample prompt text (empty: start from end-of-text)", 0},
        {"temperature", ARG_FLOAT, &c->temperature, "1.0", 0, 100, NULL, "sampling temperature, 0 = greedy", 0},
        {"top-k", ARG_INT, &c->top_k, "40", 0, IMAX, NULL, "sample among the k likeliest tokens, 0 = all", 0},
        {"ckpt-every", ARG_INT, &c->ckpt_every, "0", 0, IMAX, NULL,
         "checkpoint every N steps (and always at the end), 0 = only at the end", 0},
        {"keep-ckpts", ARG_INT, &c->keep_ckpts, "2", 0, IMAX, NULL, "keep the newest N checkpoints, 0 = all", 0},
        {"resume", ARG_STRING, &c->resume, "", 0, 0, NULL,
         "continue from a checkpoint dir, or \"latest\" (newest complete one under --out)", 0},
        {"verify-ckpt", ARG_STRING, &c->verify_ckpt, "", 0, 0, NULL,
         "check a checkpoint dir (or every one under an --out dir) against its manifest's checksums, print one line "
         "each and exit (0: all good, 1: one is damaged or incomplete); trains nothing", 0},
        {"seed", ARG_U64, &c->seed, "1337", 0, 1.8446744073709552e19, NULL,
         "seed of initialisation, data order, sampling", 0},
        {"shuffle", ARG_INT, &c->shuffle, "1", 0, 1, NULL, "1: shuffle training windows every epoch", 0},
        {"threads", ARG_INT, &c->threads, "0", 0, 4096, NULL,
         "OpenMP/OpenBLAS threads per rank, 0 = online cores / ranks on this node (on a machine shared with other "
         "jobs, 1 or OMP_WAIT_POLICY=passive OPENBLAS_THREAD_TIMEOUT=4 stop idle threads spinning on busy cores)", 0},
        {"comm", ARG_STRING, &c->comm, "auto", 0, 0, "auto|mpi|nccl",
         "gradient/parameter collectives: mpi (host buffers; the only one of the CPU trainers), nccl (GPU buffers, "
         "one GPU per rank), auto (nccl for several ranks each with its own GPU, else mpi)", 0},
        {"update", ARG_STRING, &c->update, "auto", 0, 0, "auto|host|device",
         "where the parameter update runs: device (GPU-resident adamw/adams/scape of the CUDA trainers), host "
         "(optim/dist.h on host buffers; the only one of the CPU trainers, and of topk-ef), auto (device where "
         "the trainer has one for the optimizer)", 0},
        {"comm-timeout", ARG_INT, &c->comm_timeout, "900", 0, 86400, NULL,
         "watchdog: a collective that waits this many seconds for another rank ends the job on every rank, naming "
         "the ranks that did not arrive and the collective (MPI collectives; 0 = wait forever)", 0},
        {"zero", ARG_FLAG, &c->zero, NULL, 0, 1, NULL, "ZeRO-1: shard the optimizer state over ranks (adamw, adams, scape)", 0},
        {"density", ARG_DOUBLE, &c->density, "1.0", 1e-6, 1, NULL, "SCAPE / topk-ef target density d (0.01 = 99% sparse)", 0},
        {"density-start", ARG_DOUBLE, &c->density_start, "1.0", 1e-6, 1, NULL,
         "SCAPE / topk-ef density d_start at step 1 of the warm-up", 0},
        {"density-warmup", ARG_INT, &c->density_warmup, "0", 0, IMAX, NULL,
         "SCAPE / topk-ef geometric density warm-up steps", 0},
        {"density-dense-steps", ARG_INT, &c->density_dense, "0", 0, IMAX, NULL,
         "SCAPE / topk-ef: steps at --density-start before the warm-up begins (a dense phase; the authors' "
         "--topk-adams-start-iter, 2000 in their Llama-500M d 0.1 run)", 0},
        {"scape-double-residual-defect", ARG_FLAG, &c->scape_double_residual, NULL, 0, 1, NULL,
         "comparison only: reproduces a defect of the authors' newest SCAPE reducer, which writes the residual twice "
         "per step off the mask (r <- r + 2 (beta1 m + (1 - beta1) g) there); host update, no --zero", 0},
        {"scape-variant", ARG_STRING, &c->scape_variant, "faithful", 0, 0, "faithful|catchup|tensor-nu|residual-decay",
         "SCAPE's update: faithful (the paper's), or a same-bytes variant (issue 31; formulas in optim/dist_scape.c): "
         "catchup scales a coordinate's step on entering the mask by 1 + the steps it missed, capped; tensor-nu takes "
         "an entering coordinate's nu from its tensor's mean g_hat^2 over the coordinates that stayed on the mask, "
         "its step capped at --scape-variant-cap times the faithful one; residual-decay keeps rho of the old "
         "residual off the mask (host update, fp32 payload, no --zero)", 0},
        {"scape-variant-cap", ARG_FLOAT, &c->scape_variant_cap, "4", 1, 255, NULL,
         "--scape-variant catchup / tensor-nu: cap A on the entering step's factor", 0},
        {"scape-residual-decay", ARG_FLOAT, &c->scape_residual_decay, "0.9", 0, 1, NULL,
         "--scape-variant residual-decay: rho, r <- c - (1 - rho) r_old off the mask (1 = faithful)", 0},
        {.name = NULL}, /* here: every rule's own options, from its row (optim/rule.h; train_rule_options_insert) */
        {"scape-offload-residual", ARG_FLAG, &c->scape_offload_residual, NULL, 0, 1, NULL,
         "device SCAPE: keep the residual r in pinned host memory, staged through the GPU a slice at a time "
         "(SCAPE.md section 7; saves 4P bytes of GPU memory, results identical)", 0},
        {"scape-payload", ARG_STRING, &c->scape_payload, "fp32", 0, 0, "fp32|bf16",
         "SCAPE payload precision on the wire: bf16 halves the all-reduce bytes, its rounding error is kept in the "
         "residual (SCAPE.md section 7)", 0},
        {"scape-mask-coding", ARG_STRING, &c->scape_mask_coding, "auto", 0, 0, "none|auto",
         "SCAPE mask all-gather: auto codes each owner's mask segment (gaps, Golomb-Rice; or the change from the "
         "last mask; or raw bits, whichever is smallest: optim/mask_code.h), none sends 1 bit per parameter; "
         "results identical (the host update; the device update sends 1 bit)", 0},
        {"scape-exclude-norms", ARG_INT, &c->scape_exclude_norms, "1", 0, 1, NULL,
         "1: norm gains and biases stay dense under SCAPE / topk-ef", 0},
        {"mask-stats-every", ARG_INT, &c->mask_stats_every, "0", 0, IMAX, NULL,
         "log mask stability (Jaccard of consecutive masks, kept energy) every N steps, 0 = off", 0},
        {"max-bad-steps", ARG_INT, &c->max_bad_steps, "5", 0, IMAX, NULL,
         "stop (status 1, no checkpoint of the bad state) after N consecutive steps with a non-finite loss or "
         "gradient norm, each of which is skipped; 0 = never stop", 0},
        {"peak-flops", ARG_FLOAT, &c->peak_flops, "0", 0, 1e18, NULL,
         "peak FLOP/s of one rank for MFU, 0 = print n/a", 0},
        {"eval-task", ARG_STRING, &c->eval_task, "", 0, 0, NULL,
         "downstream tasks scored on the model's forward pass, FORMAT=FILE[,FORMAT=FILE...] (or NAME:FORMAT=FILE; "
         "piqa=FILE[:LABELS]); formats hellaswag|arc|piqa|lambada|boolq|copa|mmlu|jsonl "
         "(docs/evaluation.md); logs an eval_task event per task with acc, acc_norm (or ppl), items, ms", 0},
        {"eval-task-every", ARG_INT, &c->eval_task_every, "0", 0, IMAX, NULL,
         "score --eval-task every N steps (and at the end), 0 = only at the end", 0},
        {"eval-task-skip-bad", ARG_FLAG, &c->eval_task_skip_bad, NULL, 0, 1, NULL,
         "skip task items that cannot be read or scored (each counted in the event's \"skipped\") instead of "
         "stopping with the item's file and line", 0},
        {"eval-only", ARG_FLAG, &c->eval_only, NULL, 0, 1, NULL,
         "score --eval-task on the model of --init (a model file) or --resume (a checkpoint), print a table, "
         "append the events to <out>/eval.jsonl and exit; trains nothing", 0},
        {"eval-dump", ARG_STRING, &c->eval_dump, "", 0, 0, NULL,
         "write every (item, choice) log-likelihood the tasks score to this JSONL file (one file per rank: "
         "FILE.rank<r> with several ranks)", 0},
    };
    return train_rule_options_insert(t, (int)(sizeof t / sizeof t[0]), c, n);
}
