/*
 * export/export_gguf.c - the `export_gguf` program: a model file or checkpoint of train_gpt / train_llama (and of
 * the CUDA trainers, which write the same files) to a GGUF file that llama.cpp and the engines built on it load,
 * with the tokenizer embedded:
 *   GPT-2  architecture "gpt2": token_embd, position_embd, per block attn_norm, attn_qkv (q, k, v rows as llm.c
 *          stores them), attn_output, ffn_norm, ffn_up, ffn_down (weights and biases), output_norm; the lm_head is
 *          tied to token_embd, so no output tensor (llama.cpp then uses token_embd). Tokenizer "gpt2" with the
 *          "gpt-2" pre-tokenizer: GPT-2's 50257 tokens and 50000 merges, <|endoftext|> as BOS and EOS.
 *   Llama  architecture "llama": token_embd, per block attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
 *          ffn_gate (w1), ffn_up (w3), ffn_down (w2), output_norm, output (lm_head). This runtime's RoPE pairs
 *          channel j with j + hd/2 (rotate-half); llama.cpp's "llama" rotates neighbouring channels, so the rows of
 *          wq and wk are permuted within each head (row 2i + s of the file = row s * hd/2 + i of the model), which
 *          leaves q.k unchanged. Tokenizer: Llama 2's SentencePiece vocabulary ("llama": pieces, scores, types;
 *          <s> 1, </s> 2, <unk> 0) or Llama 3's byte-level BPE ("gpt2" with the "llama-bpe" pre-tokenizer; 128000
 *          merge-built tokens and 256 control tokens, <|begin_of_text|> 128000, <|end_of_text|> 128001).
 * Only the V real rows of wte / lm_head are written (not the Vp padding). Vectors (norm gains, biases) stay F32
 * whatever --type says, as llama.cpp's own converter does.
 * Llama 2 scores: SentencePiece merges the adjacent pair whose result has the highest score. This runtime's
 * tokenizer (and llama-tokenizer-js, and Hugging Face's tokenizer.json) merges by the rank of the pair; the score
 * of a token here is minus the rank of the first merge that makes it, which orders the merges the same way.
 * Errors (exit 1 with one line naming the file and the fix, nothing written): a missing, truncated or foreign model
 * file, a checkpoint folder without its manifest, a tokenizer whose size is not the model's V, an --out in a folder
 * that does not exist. Usage errors exit 2 (common/args.h).
 * Not for: the GGUF encoding itself (export/gguf.c), quantisation.
 */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/args.h"
#include "common/params.h"
#include "common/util.h"
#include "trainer/ckpt.h"
#include "models/gpt2_host.h"
#include "models/llama_host.h"
#include "export/gguf.h"
#include "tokenizer/tokenizer.h"

#define GPT2_MAGIC 20240326
#define LLAMA_MAGIC 20261129

/* ---- tokenizer metadata ---- */

typedef struct {
    int n;
    char **s;      /* (n) token strings as the GGUF spells them */
    size_t *len;
    int32_t *type; /* (n) 1 normal, 2 unknown, 3 control, 6 byte */
    float *score;  /* (n) Llama 2 only */
} Vocab;

/* Every token of tok as the GGUF spells it (as its vocabulary files do: tokenizer_token_spelling) with its type:
 * Llama 2's <unk> unknown, <s> </s> control, <0xNN> byte; the other tokenizers' special tokens control. */
static Vocab vocab_build(const Tokenizer *tok) {
    Vocab v = {0};
    int l2 = !strcmp(tokenizer_kind(tok), "llama2"), l3 = !strcmp(tokenizer_kind(tok), "llama3");
    v.n = tokenizer_vocab_size(tok);
    v.s = xcalloc((size_t)v.n, sizeof(char *), "vocabulary");
    v.len = xcalloc((size_t)v.n, sizeof(size_t), "vocabulary");
    v.type = xcalloc((size_t)v.n, sizeof(int32_t), "vocabulary");
    for (int id = 0; id < v.n; id++) {
        size_t n;
        tokenizer_token_bytes(tok, id, &n);
        v.s[id] = xmalloc(3 * n + 8, "token");
        v.len[id] = tokenizer_token_spelling(tok, id, v.s[id]);
        if (l2) v.type[id] = id == 0 ? 2 : id < 3 ? 3 : id < 3 + 256 ? 6 : 1;
        else v.type[id] = (l3 && id >= 128000) || (!l3 && id == tokenizer_eot(tok)) ? 3 : 1;
    }
    return v;
}

static void vocab_free(Vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->s[i]);
    free(v->s);
    free(v->len);
    free(v->type);
    free(v->score);
}

/* tokenizer.ggml.* for tok (kind gpt2, bpe4k, llama2 or llama3; bpe4k is GPT-2's format and pre-tokenizer with
 * its own vocabulary) */
static void add_tokenizer(GgufWriter *w, const Tokenizer *tok) {
    const char *kind = tokenizer_kind(tok);
    int l2 = !strcmp(kind, "llama2"), l3 = !strcmp(kind, "llama3");
    Vocab v = vocab_build(tok);
    int32_t *mg;
    size_t nm = tokenizer_merges(tok, &mg);
    gguf_kv_string(w, "tokenizer.ggml.model", l2 ? "llama" : "gpt2");
    if (!l2) gguf_kv_string(w, "tokenizer.ggml.pre", l3 ? "llama-bpe" : "gpt-2");
    gguf_kv_strings(w, "tokenizer.ggml.tokens", (const char *const *)v.s, v.len, (size_t)v.n);
    if (l2) {
        /* score = -(rank of the first merge that makes the token); tokens no merge makes rank below all merges */
        v.score = xmalloc((size_t)v.n * sizeof(float), "scores");
        for (int i = 0; i < v.n; i++) v.score[i] = i < 3 + 256 ? 0.0f : -(float)(nm + (size_t)i);
        for (size_t k = nm; k-- > 0;) v.score[mg[3 * k + 2]] = -(float)k;
        gguf_kv_f32s(w, "tokenizer.ggml.scores", v.score, (size_t)v.n);
    }
    gguf_kv_i32s(w, "tokenizer.ggml.token_type", v.type, (size_t)v.n);
    if (!l2) {
        char **ms = xmalloc((nm ? nm : 1) * sizeof(char *), "merges");
        size_t *ml = xmalloc((nm ? nm : 1) * sizeof(size_t), "merges");
        for (size_t k = 0; k < nm; k++) {
            int a = mg[3 * k], b = mg[3 * k + 1];
            ml[k] = v.len[a] + 1 + v.len[b];
            ms[k] = xmalloc(ml[k], "merge");
            memcpy(ms[k], v.s[a], v.len[a]);
            ms[k][v.len[a]] = ' ';
            memcpy(ms[k] + v.len[a] + 1, v.s[b], v.len[b]);
        }
        gguf_kv_strings(w, "tokenizer.ggml.merges", (const char *const *)ms, ml, nm);
        for (size_t k = 0; k < nm; k++) free(ms[k]);
        free(ms);
        free(ml);
    }
    gguf_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)tokenizer_bos(tok));
    gguf_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)tokenizer_eot(tok));
    if (l2) gguf_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    /* GPT-2 and bpe4k have no BOS of their own (llm.c puts <|endoftext|> before documents, which a prompt need not
     * start with) */
    gguf_kv_bool(w, "tokenizer.ggml.add_bos_token", tokenizer_bos(tok) != tokenizer_eot(tok));
    gguf_kv_bool(w, "tokenizer.ggml.add_eos_token", 0);
    free(mg);
    vocab_free(&v);
}

/* ---- tensors ---- */

typedef struct {
    GgufWriter *w;
    const Model *m;
    GgufTensorType mat; /* type of matrices; vectors are always F32 */
} Ctx;

static const ParamSlice *slice(const Model *m, const char *name, int layer) {
    int i = param_table_find(&m->table, name, layer);
    if (i < 0) fatal("internal: the model has no tensor '%s' (layer %d)", name, layer);
    return &m->table.slices[i];
}

/* A vector (1-D, F32) or a matrix of `rows` rows of the model's tensor (name, layer), under GGUF name gname
 * (layer >= 0: "blk.<layer>.<gname>"). rows <= the tensor's first dimension (wte/lm_head: V of Vp); perm: the
 * source row of each written row, or NULL. */
static void tensor(Ctx *c, const char *name, int layer, const char *gname, uint64_t rows, const uint32_t *perm) {
    const ParamSlice *s = slice(c->m, name, layer);
    char full[96];
    if (layer >= 0) snprintf(full, sizeof full, "blk.%d.%s", layer, gname);
    else snprintf(full, sizeof full, "%s", gname);
    const float *data = c->m->params + s->offset;
    if (s->ndim == 1) {
        uint64_t ne[1] = {s->shape[0]};
        gguf_add_tensor(c->w, full, 1, ne, GGUF_F32, data, NULL);
    } else {
        uint64_t ne[2] = {s->shape[1], rows ? rows : s->shape[0]};
        gguf_add_tensor(c->w, full, 2, ne, c->mat, data, perm);
    }
}

/* rows of a q or k projection with nh heads of hd rows each, reordered from rotate-half pairs (j, j + hd/2) to
 * neighbouring pairs (2i, 2i + 1): written row h*hd + 2i + s is model row h*hd + s*hd/2 + i */
static uint32_t *rope_rows(int nh, int hd) {
    uint32_t *r = xmalloc((size_t)nh * (size_t)hd * sizeof(uint32_t), "row order");
    for (int h = 0; h < nh; h++)
        for (int i = 0; i < hd / 2; i++)
            for (int s = 0; s < 2; s++) r[h * hd + 2 * i + s] = (uint32_t)(h * hd + s * (hd / 2) + i);
    return r;
}

/* ---- main ---- */

static int read_magic(const char *path) {
    FILE *f = xfopen(path, "rb", "pass a model file (model.bin) or a checkpoint folder (out/ckpt_<step>)");
    int32_t h[2] = {0, 0};
    size_t n = fread(h, 4, 2, f);
    fclose(f);
    if (n != 2) fatal("%s is too short to be a model file; pass a model file written by train_gpt or train_llama", path);
    return h[0];
}

/* The model file to export into path (cap bytes): model_path itself, or the model.bin of the checkpoint folder it
 * names. fatal() before anything is loaded if --out's folder does not exist, if the checkpoint is incomplete or does
 * not verify, if --out is the model file itself, or if --out exists and is not a GGUF file (never written over). */
static void resolve_model_path(const char *model_path, const char *out, char *path, size_t cap) {
    /* the output's folder first: a typo there should not cost a model load */
    char *out_copy = strdup(out);
    const char *out_dir = dirname(out_copy);
    struct stat st;
    if (stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        fatal("--out %s: the folder %s does not exist; create it first (mkdir -p %s)", out, out_dir, out_dir);
    free(out_copy);

    /* a checkpoint folder means its model.bin, once the checkpoint is complete */
    if (stat(model_path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(path, cap, "%s/manifest.json", model_path);
        if (!file_exists(path))
            fatal("%s has no manifest.json: not a checkpoint folder, or one whose writing never finished; pass a "
                  "complete checkpoint (out/ckpt_<step>) or a model file", model_path);
        snprintf(path, cap, "%s/model.bin", model_path);
    } else {
        snprintf(path, cap, "%s", model_path);
    }
    /* a model.bin beside a manifest is a checkpoint's: exported only once it verifies (trainer/ckpt.h) */
    {
        char *dir_copy = strdup(path), man[4200];
        const char *dir = dirname(dir_copy);
        snprintf(man, sizeof man, "%s/manifest.json", dir);
        if (file_exists(man)) {
            char why[512];
            CkptInfo info;
            if (!ckpt_verify(dir, &info, why, sizeof why))
                fatal("%s: its checkpoint %s does not verify (%s); export a checkpoint that does (train_* "
                      "--verify-ckpt <out> lists them)", path, dir, why);
        }
        free(dir_copy);
    }
    /* never write over the input, whatever path names it, nor over a file that is not a GGUF export */
    if (same_file(out, path))
        fatal("--out %s is the model file being exported (%s); pass another --out, e.g. model.gguf", out, path);
    if (stat(out, &st) == 0) {
        char head[4] = {0};
        FILE *g = fopen(out, "rb");
        size_t got = g ? fread(head, 1, 4, g) : 0;
        if (g) fclose(g);
        if (!S_ISREG(st.st_mode) || got != 4 || memcmp(head, "GGUF", 4) != 0)
            fatal("--out %s exists and is not a GGUF file; it is left as it is: remove it first or pass another "
                  "--out", out);
    }
}

int main(int argc, char **argv) {
    const char *model_path, *out, *type, *tok_kind, *data, *name;
    ArgSpec specs[] = {
        {"model", ARG_STRING, &model_path, "", 0, 0, NULL, "model file (model.bin, --init file) or checkpoint folder (out/ckpt_<step>)", 0},
        {"out", ARG_STRING, &out, "", 0, 0, NULL, "GGUF file to write (its folder must exist)", 0},
        {"type", ARG_STRING, &type, "f32", 0, 0, "f32|f16|bf16", "type of the weight matrices (vectors stay f32)", 0},
        {"tokenizer", ARG_STRING, &tok_kind, "auto", 0, 0, NULL,
         "vocabulary to embed: auto (the model's: GPT-2 gpt2, or bpe4k when V is 4096; Llama llama3 when V is "
         "128256, else llama2), gpt2, bpe4k, llama2, llama3, or the folder of one learned by `tok train --out DIR`",
         0},
        {"data", ARG_STRING, &data, "data", 0, 0, NULL, "data cache holding the vocabularies (make data, make data-llama)", 0},
        {"name", ARG_STRING, &name, "", 0, 0, NULL, "general.name in the file (default: the model's description)", 0},
    };
    const int n_specs = (int)(sizeof specs / sizeof specs[0]);
    args_parse(specs, n_specs, argc, argv, "usage: export_gguf --model PATH --out FILE.gguf [options]",
               "Writes a GGUF file for llama.cpp from a model of train_gpt / train_llama, tokenizer included.");
    if (!*model_path) { fprintf(stderr, "error: --model is required (a model file or checkpoint folder)\n"); return 2; }
    if (!*out) { fprintf(stderr, "error: --out is required (the GGUF file to write)\n"); return 2; }
    atomic_temps_go_with_signals(); /* Ctrl-C while the file is written leaves no FILE.gguf.tmp.* beside it */

    char path[4096];
    resolve_model_path(model_path, out, path, sizeof path);
    int magic = read_magic(path);
    if (magic != GPT2_MAGIC && magic != LLAMA_MAGIC)
        fatal("%s is not a model file of this runtime (magic %d; GPT-2 files start with %d, Llama files with %d)", path,
              magic, GPT2_MAGIC, LLAMA_MAGIC);
    int llama = magic == LLAMA_MAGIC;
    Model *m = llama ? llama_host_create(NULL, path, 0, 1, 1) : gpt2_host_create(NULL, path, 0, 1, 1);
    const ModelFamily *fam = llama ? llama_host_family() : gpt2_host_family();
    const char *kind = strcmp(tok_kind, "auto") ? tok_kind : m->tokenizer ? m->tokenizer : fam->tokenizer;
    int learned = tokenizer_is_dir(kind);
    if (strcmp(kind, "gpt2") && strcmp(kind, "bpe4k") && strcmp(kind, "llama2") && strcmp(kind, "llama3") && !learned)
        fatal("--tokenizer %s: not a tokenizer; use auto, gpt2, bpe4k, llama2, llama3 or the folder of a vocabulary "
              "learned by `tok train --out DIR` (holding encoder.json and vocab.bpe)", kind);
    if (!llama && strcmp(kind, "gpt2") != 0 && strcmp(kind, "bpe4k") != 0 && !learned)
        fatal("--tokenizer %s: a GPT-2 model takes a byte-level BPE (gpt2, bpe4k or a learned one; llama.cpp's gpt2 "
              "architecture); drop --tokenizer", kind);
    Tokenizer *tok = tokenizer_load(kind, data);
    if (tokenizer_vocab_size(tok) != m->vocab_size)
        fatal("%s has V = %d but the %s tokenizer has %d tokens; pass the --tokenizer the model was trained with",
              path, m->vocab_size, kind, tokenizer_vocab_size(tok));

    GgufWriter *w = gguf_writer_new();
    Ctx c = {w, m, !strcmp(type, "f16") ? GGUF_F16 : !strcmp(type, "bf16") ? GGUF_BF16 : GGUF_F32};
    const char *arch = llama ? "llama" : "gpt2";
    char key[96];
#define ARCH_KEY(k) (snprintf(key, sizeof key, "%s." k, arch), key)
    gguf_kv_string(w, "general.architecture", arch);
    gguf_kv_string(w, "general.name", *name ? name : m->desc);
    /* llama.cpp's file types: 0 all F32, 1 mostly F16, 32 mostly BF16 */
    gguf_kv_u32(w, "general.file_type", c.mat == GGUF_F32 ? 0 : c.mat == GGUF_F16 ? 1 : 32);
    gguf_kv_u32(w, ARCH_KEY("context_length"), (uint32_t)m->max_seq_len);
    gguf_kv_u32(w, ARCH_KEY("embedding_length"), (uint32_t)m->channels);
    gguf_kv_u32(w, ARCH_KEY("block_count"), (uint32_t)m->num_layers);
    gguf_kv_u32(w, ARCH_KEY("attention.head_count"), (uint32_t)m->num_heads);
    const int L = m->num_layers, V = m->vocab_size;
    uint32_t *q_rows = NULL, *k_rows = NULL;
    if (!llama) {
        gguf_kv_u32(w, ARCH_KEY("feed_forward_length"), (uint32_t)(4 * m->channels));
        gguf_kv_f32(w, ARCH_KEY("attention.layer_norm_epsilon"), 1e-5f); /* train_gpt.c's layernorm */
        add_tokenizer(w, tok);
        tensor(&c, "wte", -1, "token_embd.weight", (uint64_t)V, NULL);
        tensor(&c, "wpe", -1, "position_embd.weight", 0, NULL);
        for (int l = 0; l < L; l++) {
            tensor(&c, "ln1w", l, "attn_norm.weight", 0, NULL);
            tensor(&c, "ln1b", l, "attn_norm.bias", 0, NULL);
            tensor(&c, "qkvw", l, "attn_qkv.weight", 0, NULL);
            tensor(&c, "qkvb", l, "attn_qkv.bias", 0, NULL);
            tensor(&c, "attprojw", l, "attn_output.weight", 0, NULL);
            tensor(&c, "attprojb", l, "attn_output.bias", 0, NULL);
            tensor(&c, "ln2w", l, "ffn_norm.weight", 0, NULL);
            tensor(&c, "ln2b", l, "ffn_norm.bias", 0, NULL);
            tensor(&c, "fcw", l, "ffn_up.weight", 0, NULL);
            tensor(&c, "fcb", l, "ffn_up.bias", 0, NULL);
            tensor(&c, "fcprojw", l, "ffn_down.weight", 0, NULL);
            tensor(&c, "fcprojb", l, "ffn_down.bias", 0, NULL);
        }
        tensor(&c, "lnfw", -1, "output_norm.weight", 0, NULL);
        tensor(&c, "lnfb", -1, "output_norm.bias", 0, NULL);
    } else {
        LlamaHostConfig lc = llama_host_config(m);
        const int hd = lc.C / lc.NH;
        gguf_kv_u32(w, ARCH_KEY("feed_forward_length"), (uint32_t)lc.F);
        gguf_kv_u32(w, ARCH_KEY("attention.head_count_kv"), (uint32_t)lc.NKV);
        gguf_kv_f32(w, ARCH_KEY("rope.freq_base"), lc.rope_theta);
        gguf_kv_u32(w, ARCH_KEY("rope.dimension_count"), (uint32_t)hd);
        gguf_kv_f32(w, ARCH_KEY("attention.layer_norm_rms_epsilon"), lc.norm_eps);
        gguf_kv_u32(w, ARCH_KEY("vocab_size"), (uint32_t)V);
        add_tokenizer(w, tok);
        q_rows = rope_rows(lc.NH, hd);
        k_rows = rope_rows(lc.NKV, hd);
        tensor(&c, "wte", -1, "token_embd.weight", (uint64_t)V, NULL);
        for (int l = 0; l < L; l++) {
            tensor(&c, "attn_norm", l, "attn_norm.weight", 0, NULL);
            tensor(&c, "wq", l, "attn_q.weight", 0, q_rows);
            tensor(&c, "wk", l, "attn_k.weight", 0, k_rows);
            tensor(&c, "wv", l, "attn_v.weight", 0, NULL);
            tensor(&c, "wo", l, "attn_output.weight", 0, NULL);
            tensor(&c, "ffn_norm", l, "ffn_norm.weight", 0, NULL);
            tensor(&c, "w1", l, "ffn_gate.weight", 0, NULL);
            tensor(&c, "w3", l, "ffn_up.weight", 0, NULL);
            tensor(&c, "w2", l, "ffn_down.weight", 0, NULL);
        }
        tensor(&c, "norm_f", -1, "output_norm.weight", 0, NULL);
        tensor(&c, "lm_head", -1, "output.weight", (uint64_t)V, NULL);
    }
#undef ARCH_KEY
    uint64_t bytes = gguf_write(w, out);
    printf("export_gguf: %s (%s, %s) -> %s: %s weights, %s tokenizer, %.1f MB\n", path, arch, m->desc, out, type,
           kind, bytes / 1e6);
    gguf_writer_free(w);
    free(q_rows);
    free(k_rows);
    tokenizer_free(tok);
    m->free(m);
    return 0;
}
