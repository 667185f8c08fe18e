/*
 * tokenizer/bpe_train.c - learns a byte-level BPE vocabulary from text (`tok train`), written in GPT-2's two files
 * (encoder.json, vocab.bpe) so that tokenizer_load_gpt2() and every tool that reads GPT-2's vocabulary read it.
 *
 * The algorithm is the one GPT-2's vocabulary was built with (Sennrich et al. 2016, "Neural Machine Translation of
 * Rare Words with Subword Units", Algorithm 1, over bytes as in Radford et al. 2019, sec. 2.2): the text is split
 * into pieces by GPT-2's pre-tokenizer regex (the same split encoding uses, so a merge never crosses a piece),
 * each distinct piece is counted, and the most frequent adjacent pair of symbols, counted over all pieces with
 * their multiplicity, is merged into a new symbol, again and again, until the vocabulary is full. Ties go to the
 * pair with the smaller (left id, right id), so the result depends on the text only. Merging a word applies the
 * pair left to right without overlap, which is what the encoder does when it replays the merges by rank, so
 * encoding a training piece gives back the segmentation training ended with.
 *
 * Ids: byte b is token b; the merges' results follow in the order they were learned (a merge whose bytes are
 * already a token reuses that token and adds none); <|endoftext|> is the last id, as in GPT-2.
 * Not for: encoding (bpe_encode.c), reading documents (tok_docs.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "tokenizer/bpe_internal.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    int64_t count;    /* occurrences in the text */
    size_t off;       /* symbols at sym[off .. off + n) */
    uint32_t n;       /* current symbol count (shrinks as merges apply) */
} Word;

struct BpeTrainer {
    /* distinct pieces: bytes, hash table (slot = index + 1), counts */
    unsigned char *wbytes;
    size_t wbytes_len, wbytes_cap;
    size_t *woff;  /* (n_words + 1) piece w is wbytes[woff[w] .. woff[w + 1]) */
    Word *words;
    size_t n_words, words_cap, woff_cap;
    uint32_t *wslots;
    size_t wmask;
    int32_t *sym; /* every word's symbols, concatenated */
    /* tokens: bytes of each id, and the merges in rank order */
    unsigned char *tbytes;
    size_t tbytes_len, tbytes_cap;
    size_t *toff; /* (vocab + 1) */
    int n_tokens;
    int32_t (*merges)[3]; /* (left, right, result) */
    int n_merges;
    uint32_t *tslots; /* bytes -> id + 1 */
    size_t tmask;
    /* pair counts: key (left << 32 | right), UINT64_MAX empty */
    uint64_t *pkey;
    int64_t *pcount;
    size_t pmask, n_pairs;
    int64_t text_bytes;
};

static void *grow(void *p, size_t *cap, size_t need, size_t elem, const char *what) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    *cap = c;
    return xrealloc(p, c * elem, what);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* counting pieces */

static void word_table_resize(BpeTrainer *bt, size_t slots) {
    free(bt->wslots);
    bt->wslots = xcalloc(slots, sizeof(uint32_t), "bpe word table");
    bt->wmask = slots - 1;
    for (size_t w = 0; w < bt->n_words; w++) {
        size_t i = bpe_hash_bytes(bt->wbytes + bt->woff[w], bt->woff[w + 1] - bt->woff[w]) & bt->wmask;
        while (bt->wslots[i]) i = (i + 1) & bt->wmask;
        bt->wslots[i] = (uint32_t)w + 1;
    }
}

static void count_piece(const unsigned char *p, size_t n, void *ctx) {
    BpeTrainer *bt = ctx;
    bt->text_bytes += (int64_t)n;
    size_t i = bpe_hash_bytes(p, n) & bt->wmask;
    for (uint32_t s; (s = bt->wslots[i]); i = (i + 1) & bt->wmask) {
        size_t w = s - 1;
        if (bt->woff[w + 1] - bt->woff[w] == n && !memcmp(bt->wbytes + bt->woff[w], p, n)) {
            bt->words[w].count++;
            return;
        }
    }
    if (bt->n_words + 1 >= UINT32_MAX) fatal("tok train: more than 4 billion distinct pieces");
    bt->words = grow(bt->words, &bt->words_cap, bt->n_words + 1, sizeof(Word), "bpe words");
    bt->woff = grow(bt->woff, &bt->woff_cap, bt->n_words + 2, sizeof(size_t), "bpe words");
    bt->wbytes = grow(bt->wbytes, &bt->wbytes_cap, bt->wbytes_len + n, 1, "bpe word bytes");
    memcpy(bt->wbytes + bt->wbytes_len, p, n);
    bt->wbytes_len += n;
    size_t w = bt->n_words++;
    bt->words[w] = (Word){.count = 1};
    bt->woff[w + 1] = bt->wbytes_len;
    bt->wslots[i] = (uint32_t)w + 1;
    if (2 * bt->n_words > bt->wmask) word_table_resize(bt, 2 * (bt->wmask + 1));
}

BpeTrainer *bpe_trainer_new(void) {
    BpeTrainer *bt = xcalloc(1, sizeof *bt, "bpe trainer");
    bt->woff = grow(NULL, &bt->woff_cap, 1, sizeof(size_t), "bpe words");
    bt->woff[0] = 0;
    word_table_resize(bt, 1 << 12);
    return bt;
}

void bpe_trainer_add(BpeTrainer *bt, const char *text, size_t len) {
    if (bt->sym) fatal("bpe_trainer_add: the trainer has already trained; add all text before bpe_trainer_train");
    bpe_pretokenize_gpt2(text, len, count_piece, bt);
}

size_t bpe_trainer_n_words(const BpeTrainer *bt) { return bt->n_words; }
int64_t bpe_trainer_text_bytes(const BpeTrainer *bt) { return bt->text_bytes; }

/* ---------------------------------------------------------------------------------------------------------- */
/* tokens and pairs */

static int token_lookup(const BpeTrainer *bt, const unsigned char *p, size_t n) {
    for (size_t i = bpe_hash_bytes(p, n) & bt->tmask; bt->tslots[i]; i = (i + 1) & bt->tmask) {
        int id = (int)bt->tslots[i] - 1;
        if (bt->toff[id + 1] - bt->toff[id] == n && !memcmp(bt->tbytes + bt->toff[id], p, n)) return id;
    }
    return -1;
}

/* Appends a token of n bytes (the caller checked it is new); returns its id. */
static int token_add(BpeTrainer *bt, const unsigned char *p, size_t n) {
    int id = bt->n_tokens++;
    bt->tbytes = grow(bt->tbytes, &bt->tbytes_cap, bt->tbytes_len + n, 1, "bpe token bytes");
    memcpy(bt->tbytes + bt->tbytes_len, p, n);
    bt->tbytes_len += n;
    bt->toff[id + 1] = bt->tbytes_len;
    size_t i = bpe_hash_bytes(p, n) & bt->tmask;
    while (bt->tslots[i]) i = (i + 1) & bt->tmask;
    bt->tslots[i] = (uint32_t)id + 1;
    return id;
}

static void pair_table_resize(BpeTrainer *bt, size_t slots) {
    uint64_t *ok = bt->pkey;
    int64_t *oc = bt->pcount;
    size_t old = ok ? bt->pmask + 1 : 0;
    bt->pkey = xmalloc(slots * sizeof(uint64_t), "bpe pair table");
    bt->pcount = xmalloc(slots * sizeof(int64_t), "bpe pair table");
    memset(bt->pkey, 0xFF, slots * sizeof(uint64_t));
    bt->pmask = slots - 1;
    bt->n_pairs = 0;
    for (size_t j = 0; j < old; j++) {
        if (ok[j] == UINT64_MAX || oc[j] == 0) continue; /* pairs gone to zero are dropped here */
        size_t i = bpe_hash_u64(ok[j]) & bt->pmask;
        while (bt->pkey[i] != UINT64_MAX) i = (i + 1) & bt->pmask;
        bt->pkey[i] = ok[j];
        bt->pcount[i] = oc[j];
        bt->n_pairs++;
    }
    free(ok);
    free(oc);
}

static void pair_add(BpeTrainer *bt, int32_t a, int32_t b, int64_t delta) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = bpe_hash_u64(k) & bt->pmask;
    while (bt->pkey[i] != UINT64_MAX && bt->pkey[i] != k) i = (i + 1) & bt->pmask;
    if (bt->pkey[i] == UINT64_MAX) {
        bt->pkey[i] = k;
        bt->pcount[i] = 0;
        if (2 * ++bt->n_pairs > bt->pmask) {
            bt->pcount[i] = delta;
            pair_table_resize(bt, 2 * (bt->pmask + 1));
            return;
        }
    }
    bt->pcount[i] += delta;
}

static void word_pairs(BpeTrainer *bt, const Word *w, int64_t sign) {
    const int32_t *s = bt->sym + w->off;
    for (uint32_t j = 0; j + 1 < w->n; j++) pair_add(bt, s[j], s[j + 1], sign * w->count);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* training */

void bpe_trainer_train(BpeTrainer *bt, int vocab_size) {
    if (vocab_size < 257 || vocab_size > 65536)
        fatal("bpe_trainer_train: vocabulary size %d is outside [257, 65536] (256 bytes, the merges, "
              "<|endoftext|>; uint16 shards)", vocab_size);
    if (bt->sym) fatal("bpe_trainer_train: this trainer has already trained");
    if (bt->n_words == 0) fatal("tok train: the corpus holds no text to learn merges from; give non-empty inputs");
    /* every word starts as its bytes */
    bt->sym = xmalloc((bt->wbytes_len ? bt->wbytes_len : 1) * sizeof(int32_t), "bpe symbols");
    for (size_t w = 0; w < bt->n_words; w++) {
        bt->words[w].off = bt->woff[w];
        bt->words[w].n = (uint32_t)(bt->woff[w + 1] - bt->woff[w]);
        for (size_t j = bt->woff[w]; j < bt->woff[w + 1]; j++) bt->sym[j] = bt->wbytes[j];
    }
    bt->toff = xmalloc(((size_t)vocab_size + 1) * sizeof(size_t), "bpe tokens");
    bt->toff[0] = 0;
    size_t tslots = 1;
    while (tslots < 2 * (size_t)vocab_size) tslots <<= 1;
    bt->tslots = xcalloc(tslots, sizeof(uint32_t), "bpe token table");
    bt->tmask = tslots - 1;
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        token_add(bt, &c, 1);
    }
    bt->merges = xmalloc((size_t)vocab_size * 3 * sizeof(int32_t), "bpe merges");
    pair_table_resize(bt, 1 << 16);
    for (size_t w = 0; w < bt->n_words; w++) word_pairs(bt, &bt->words[w], 1);

    unsigned char *cat = NULL;
    size_t cat_cap = 0;
    while (bt->n_tokens < vocab_size - 1) {
        /* the most frequent pair; ties to the smaller (left, right) */
        size_t best = SIZE_MAX;
        for (size_t i = 0; i <= bt->pmask; i++) {
            if (bt->pkey[i] == UINT64_MAX || bt->pcount[i] <= 0) continue;
            if (best == SIZE_MAX || bt->pcount[i] > bt->pcount[best] ||
                (bt->pcount[i] == bt->pcount[best] && bt->pkey[i] < bt->pkey[best]))
                best = i;
        }
        if (best == SIZE_MAX)
            fatal("tok train: the corpus allows only %d tokens (every piece is one token already), fewer than "
                  "--vocab %d; give more text or a smaller --vocab", bt->n_tokens + 1, vocab_size);
        int32_t a = (int32_t)(bt->pkey[best] >> 32), b = (int32_t)(bt->pkey[best] & 0xFFFFFFFFu);
        size_t la = bt->toff[a + 1] - bt->toff[a], lb = bt->toff[b + 1] - bt->toff[b];
        cat = grow(cat, &cat_cap, la + lb, 1, "bpe merge");
        memcpy(cat, bt->tbytes + bt->toff[a], la);
        memcpy(cat + la, bt->tbytes + bt->toff[b], lb);
        int m = token_lookup(bt, cat, la + lb);
        if (m < 0) m = token_add(bt, cat, la + lb);
        bt->merges[bt->n_merges][0] = a;
        bt->merges[bt->n_merges][1] = b;
        bt->merges[bt->n_merges][2] = m;
        bt->n_merges++;
        /* apply it to every word holding the pair, moving that word's pair counts from old to new */
        for (size_t w = 0; w < bt->n_words; w++) {
            Word *wd = &bt->words[w];
            int32_t *s = bt->sym + wd->off;
            uint32_t j = 0;
            while (j + 1 < wd->n && !(s[j] == a && s[j + 1] == b)) j++;
            if (j + 1 >= wd->n) continue;
            word_pairs(bt, wd, -1);
            uint32_t o = j;
            for (uint32_t i = j; i < wd->n;) {
                if (i + 1 < wd->n && s[i] == a && s[i + 1] == b) { s[o++] = m; i += 2; }
                else s[o++] = s[i++];
            }
            wd->n = o;
            word_pairs(bt, wd, 1);
        }
    }
    free(cat);
    static const char eot[] = "<|endoftext|>";
    token_add(bt, (const unsigned char *)eot, sizeof eot - 1);
}

int bpe_trainer_n_merges(const BpeTrainer *bt) { return bt->n_merges; }

/* ---------------------------------------------------------------------------------------------------------- */
/* writing */

/* A token spelled in GPT-2's printable byte alphabet (bytes_to_unicode), as a JSON string body when json != 0
 * (the alphabet's '"' and '\' escaped). */
static void spell(FILE *f, const unsigned char *p, size_t n, const int cp_of[256], int json) {
    for (size_t i = 0; i < n; i++) {
        int cp = cp_of[p[i]];
        if (json && (cp == '"' || cp == '\\')) fputc('\\', f);
        if (cp < 0x80) fputc(cp, f);
        else {
            fputc(0xC0 | (cp >> 6), f);
            fputc(0x80 | (cp & 0x3F), f);
        }
    }
}

/* Starts the new content of dir/name (atomic_open: a temp file beside it, renamed onto it by place_file). On
 * failure discards `pending` (an earlier file of the same set, or NULL) and fatal()s. */
static AtomicFile *start_file(const char *dir, const char *name, AtomicFile *pending) {
    char path[8500];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
        atomic_discard(pending);
        fatal("%s exists and is not a regular file (a folder, device or pipe); name another file", path);
    }
    AtomicFile *a = atomic_open(path);
    if (!a) {
        int err = errno;
        atomic_discard(pending);
        fatal("cannot create a temp file beside %s: %s; check that the directory is writable", path, strerror(err));
    }
    return a;
}

/* Flushes, fsyncs and closes a's temp file (to become dir/name); on any failure discards it and `pending` and
 * fatal()s naming dir/name. */
static void close_file(AtomicFile *a, const char *dir, const char *name, AtomicFile *pending) {
    int err = atomic_close(a);
    if (!err) return;
    atomic_discard(a);
    atomic_discard(pending);
    fatal("cannot write %s/%s: %s; check free disk space and permissions (nothing was replaced)", dir, name,
          strerror(err));
}

/* Renames a's temp file onto dir/name (replacing a link there, never what it points to); fatal() discarding
 * pending. */
static void place_file(AtomicFile *a, const char *dir, const char *name, AtomicFile *pending) {
    char path[8500];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int err = atomic_place(a, path);
    if (!err) return;
    atomic_discard(pending);
    fatal("cannot write %s: %s; check permissions of the folder", path, strerror(err));
}

void bpe_trainer_write(const BpeTrainer *bt, const char *dir) {
    if (!bt->toff) fatal("bpe_trainer_write: train first (bpe_trainer_train)");
    make_dirs(dir);
    int cp_of[256];
    bpe_byte_to_unicode(cp_of);
    /* both files complete before either replaces an old one: never a new vocab.bpe beside an old encoder.json */
    AtomicFile *bpe = start_file(dir, "vocab.bpe", NULL);
    FILE *f = atomic_stream(bpe);
    fprintf(f, "#version: 0.2 (tok train: %d tokens, %d merges)\n", bt->n_tokens, bt->n_merges);
    for (int r = 0; r < bt->n_merges; r++) {
        for (int k = 0; k < 2; k++) {
            int id = bt->merges[r][k];
            spell(f, bt->tbytes + bt->toff[id], bt->toff[id + 1] - bt->toff[id], cp_of, 0);
            fputc(k ? '\n' : ' ', f);
        }
    }
    close_file(bpe, dir, "vocab.bpe", NULL);
    AtomicFile *enc = start_file(dir, "encoder.json", bpe);
    f = atomic_stream(enc);
    fputc('{', f);
    int eot = bt->n_tokens - 1;
    for (int id = 0; id < bt->n_tokens; id++) {
        fputs(id ? ", \"" : "\"", f);
        if (id == eot) fputs("<|endoftext|>", f);
        else spell(f, bt->tbytes + bt->toff[id], bt->toff[id + 1] - bt->toff[id], cp_of, 1);
        fprintf(f, "\": %d", id);
    }
    fputs("}\n", f);
    close_file(enc, dir, "encoder.json", bpe);
    place_file(enc, dir, "encoder.json", bpe);
    place_file(bpe, dir, "vocab.bpe", NULL); /* each place fsyncs the folder */
}

void bpe_trainer_write_words(const BpeTrainer *bt, const char *path) {
    /* through a temp file beside path, like the vocabulary: never through a link, complete or absent */
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    const char *name = slash ? slash + 1 : path;
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    if (!*name) fatal("--words-out %s: name a file, not a folder", path);
    AtomicFile *a = start_file(dir, name, NULL);
    FILE *f = atomic_stream(a);
    for (size_t w = 0; w < bt->n_words; w++) {
        fprintf(f, "%lld\t", (long long)bt->words[w].count);
        for (size_t j = bt->woff[w]; j < bt->woff[w + 1]; j++) fprintf(f, "%02x", bt->wbytes[j]);
        fputc('\n', f);
    }
    close_file(a, dir, name, NULL);
    place_file(a, dir, name, NULL);
}

void bpe_trainer_free(BpeTrainer *bt) {
    if (!bt) return;
    free(bt->wbytes);
    free(bt->woff);
    free(bt->words);
    free(bt->wslots);
    free(bt->sym);
    free(bt->tbytes);
    free(bt->toff);
    free(bt->merges);
    free(bt->tslots);
    free(bt->pkey);
    free(bt->pcount);
    free(bt);
}
