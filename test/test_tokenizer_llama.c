/*
 * test/test_tokenizer_llama.c DATA_DIR - the Llama 3 and Llama 2 tokenizers: vocabulary shape and special ids,
 * published encodings (the vectors the JS packages test themselves with, which their authors took from Meta's
 * and Hugging Face's tokenizers), special tokens only where allowed, byte fallback, Llama 2's leading-space and
 * BOS decode rules, the scan and heap merges agreeing, and round trips over the corpus and random bytes.
 * Token-by-token parity on random texts is test/test_tokenizer_node.sh.
 * Not for: GPT-2 (test/test_tokenizer.c), the `tok` program (test/test_tokenizer_shards.py).
 */
#define _GNU_SOURCE /* memmem */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "test/test.h"
#include "tokenizer/bpe_internal.h"
#include "tokenizer/tokenizer.h"

static const char *data_dir;
static Tokenizer *l3, *l2;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static int32_t *enc(Tokenizer *t, const char *s, size_t n, int special, size_t *ng) {
    int32_t *ids = NULL;
    size_t cap = 0;
    *ng = tokenizer_encode(t, s, n, special, &ids, &cap);
    return ids;
}

/* Checks encode(s) == want (and, if round_trip, decode gives s back). */
static int expect(const char *test_name_, Tokenizer *t, const char *s, int special, const int32_t *want,
                  size_t nw, int round_trip) {
    size_t ng;
    int32_t *got = enc(t, s, strlen(s), special, &ng);
    int ok = ng == nw && (nw == 0 || !memcmp(got, want, nw * sizeof(int32_t)));
    char gs[512] = "", ws[512] = "";
    for (size_t i = 0; i < ng && strlen(gs) < 480; i++) snprintf(gs + strlen(gs), 32, " %d", got[i]);
    for (size_t i = 0; i < nw && strlen(ws) < 480; i++) snprintf(ws + strlen(ws), 32, " %d", want[i]);
    CHECK(ok, "%s(\"%.40s\"): expected [%s ], got [%s ]", tokenizer_kind(t), s, ws, gs);
    if (round_trip) {
        size_t dl;
        char *d = tokenizer_decode(t, got, ng, &dl);
        CHECK(dl == strlen(s) && !memcmp(d, s, dl), "%s: decode(encode(\"%.40s\")) = \"%.40s\"", tokenizer_kind(t),
              s, d);
        ok = ok && dl == strlen(s);
        free(d);
    }
    free(got);
    return ok;
}
#define EXPECT(t, s, special, ...)                                                                             \
    do {                                                                                                       \
        const int32_t w_[] = {__VA_ARGS__};                                                                    \
        expect(test_name_, t, s, special, w_, sizeof w_ / sizeof *w_, 1);                                      \
    } while (0)

static int token_is(Tokenizer *t, int id, const char *text) {
    size_t n;
    const char *b = tokenizer_token_bytes(t, id, &n);
    return b && n == strlen(text) && !memcmp(b, text, n);
}

TEST(test_llama3_shape_and_specials) {
    CHECK(tokenizer_vocab_size(l3) == 128256, "V = 128256, got %d", tokenizer_vocab_size(l3));
    CHECK(tokenizer_bos(l3) == 128000 && tokenizer_eot(l3) == 128001, "bos/eot 128000/128001, got %d/%d",
          tokenizer_bos(l3), tokenizer_eot(l3));
    CHECK(token_is(l3, 128000, "<|begin_of_text|>"), "128000 is <|begin_of_text|>");
    CHECK(token_is(l3, 128001, "<|end_of_text|>"), "128001 is <|end_of_text|>");
    CHECK(token_is(l3, 128006, "<|start_header_id|>"), "128006 is <|start_header_id|>");
    CHECK(token_is(l3, 128009, "<|eot_id|>"), "128009 is <|eot_id|>");
    CHECK(token_is(l3, 128011, "<|reserved_special_token_3|>"), "128011 is <|reserved_special_token_3|>");
    CHECK(token_is(l3, 128255, "<|reserved_special_token_247|>"), "128255 is <|reserved_special_token_247|>");
    CHECK(token_is(l3, 220, " ") && token_is(l3, 198, "\n"), "220 is ' ', 198 is '\\n'");
    CHECK(!strcmp(tokenizer_kind(l3), "llama3"), "kind llama3, got %s", tokenizer_kind(l3));
}

/* llama3-tokenizer-js 1.2.0's own test vectors (src/llama3-tokenizer.js, defaultTests) */
TEST(test_llama3_known_encodings) {
    EXPECT(l3, "grabbed", 0, 59312, 2788);
    EXPECT(l3, " grabbed", 0, 30418);
    EXPECT(l3, "           grabbed", 0, 1881, 30418);
    EXPECT(l3, "\n", 0, 198);
    EXPECT(l3, " \n", 0, 720);
    EXPECT(l3, "\ttabs\t\t\t\tout here", 0, 3324, 3518, 573, 14294, 1618);
    EXPECT(l3, "ax\n####\nboo", 0, 710, 198, 71050, 34093);
    EXPECT(l3, "\xE9\x95\x87", 0, 104643);                                         /* 镇 */
    EXPECT(l3, "\xF0\x9F\xA6\x99", 0, 9468, 99, 247);                              /* 🦙 */
    EXPECT(l3, "\xF0\x9F\xA6\x99\xEA\x99\x8A", 0, 9468, 99, 247, 166, 247, 232); /* 🦙Ꙋ */
    EXPECT(l3, "This is a test sentence.", 0, 2028, 374, 264, 1296, 11914, 13);
}

TEST(test_llama3_specials_only_when_allowed) {
    EXPECT(l3, "<|begin_of_text|><|end_of_text|>", 1, 128000, 128001);
    EXPECT(l3, "I<|eot_id|>", 1, 40, 128009);
    EXPECT(l3, "<|reserved_special_token_247|>x", 1, 128255, 87);
    /* not allowed: the same texts are ordinary text, no id >= 128000 */
    const char *texts[] = {"<|begin_of_text|><|end_of_text|>", "I<|eot_id|>", "<|reserved_special_token_247|>",
                           "<|reserved_special_token_248|>", "<|endoftext|>", "<<|eot_id|>|>"};
    for (int allow = 0; allow < 2; allow++)
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
            size_t ng, dl;
            int32_t *ids = enc(l3, texts[i], strlen(texts[i]), allow, &ng);
            int specials = 0;
            for (size_t k = 0; k < ng; k++) specials += ids[k] >= 128000;
            int want = allow ? (i == 0 ? 2 : i <= 2 || i == 5) : 0;
            CHECK(specials == want, "allow=%d \"%s\": %d special ids, expected %d", allow, texts[i], specials, want);
            char *d = tokenizer_decode(l3, ids, ng, &dl);
            CHECK(dl == strlen(texts[i]) && !memcmp(d, texts[i], dl), "\"%s\" does not round-trip", texts[i]);
            free(d);
            free(ids);
        }
}

TEST(test_llama3_scan_and_heap_merge_alike) {
    const char *alpha = "aeinrst ETH.,0123456789'\xC3\xA9";
    size_t na = strlen(alpha);
    int32_t a[64], b[64];
    for (int c = 0; c < 3000; c++) {
        unsigned char p[64];
        size_t n = 2 + rnd() % 60;
        for (size_t i = 0; i < n; i++) p[i] = (unsigned char)alpha[rnd() % na];
        size_t ka = bpe_merge_piece(l3, p, n, 0, a), kb = bpe_merge_piece(l3, p, n, 1, b);
        CHECK(ka == kb && !memcmp(a, b, ka * sizeof(int32_t)), "case %d: scan and heap merges differ", c);
        if (test_case_failed_) return;
    }
}

TEST(test_llama2_shape) {
    CHECK(tokenizer_vocab_size(l2) == 32000, "V = 32000, got %d", tokenizer_vocab_size(l2));
    CHECK(tokenizer_bos(l2) == 1 && tokenizer_eot(l2) == 2, "bos/eos 1/2, got %d/%d", tokenizer_bos(l2),
          tokenizer_eot(l2));
    CHECK(token_is(l2, 1, "<s>") && token_is(l2, 2, "</s>") && token_is(l2, 0, "<unk>"), "0..2 <unk> <s> </s>");
    CHECK(token_is(l2, 3 + 0x0A, "\n") && token_is(l2, 3 + 0xFF, "\xFF"), "byte tokens <0x0A>, <0xFF>");
    CHECK(token_is(l2, 29871, " ") && token_is(l2, 2646, " gra"), "U+2581 pieces decode to spaces");
}

/* llama-tokenizer-js 1.2.2's own test vectors (defaultTests; encode adds BOS 1 there, here it is absent) */
TEST(test_llama2_known_encodings) {
    EXPECT(l2, "grabbed", 0, 2646, 1327, 287);
    EXPECT(l2, " grabbed", 0, 29871, 2646, 1327, 287);
    EXPECT(l2, "           grabbed", 0, 9651, 2646, 1327, 287);
    EXPECT(l2, "\n", 0, 29871, 13);
    EXPECT(l2, " \n", 0, 259, 13);
    EXPECT(l2, "\ttabs\t\t\t\tout here", 0, 29871, 12, 21175, 12, 12, 12, 12, 449, 1244);
    EXPECT(l2, "ax\n####\nboo", 0, 4853, 13, 4136, 13, 833, 29877);
    EXPECT(l2, "\xE9\x95\x87", 0, 29871, 30411);
    EXPECT(l2, "\xF0\x9F\xA6\x99", 0, 29871, 243, 162, 169, 156);
    EXPECT(l2, "\xEA\x99\x8A\xF0\x9F\xA6\x99", 0, 29871, 237, 156, 141, 243, 162, 169, 156);
    /* no special text in Llama 2: "<s>" is ordinary text even when allowed */
    EXPECT(l2, "<s>", 1, 529, 29879, 29958);
    int32_t none[1];
    expect(test_name_, l2, "", 0, none, 0, 1); /* as the package: nothing, not even the prefixed space */
}

TEST(test_llama2_decode_rules) {
    const int32_t with_bos[] = {1, 2646, 1327, 287}, plain[] = {2646, 1327, 287}, two_bos[] = {1, 1, 2646};
    size_t n;
    char *d = tokenizer_decode(l2, with_bos, 4, &n);
    CHECK(n == 7 && !memcmp(d, "grabbed", 7), "decode([1 2646 1327 287]) = \"grabbed\", got \"%s\"", d);
    free(d);
    d = tokenizer_decode(l2, plain, 3, &n);
    CHECK(n == 7 && !memcmp(d, "grabbed", 7), "decode([2646 1327 287]) = \"grabbed\", got \"%s\"", d);
    free(d);
    d = tokenizer_decode(l2, two_bos, 3, &n);
    CHECK(!strcmp(d, "<s> gra"), "only the first BOS is dropped: expected \"<s> gra\", got \"%s\"", d);
    free(d);
    /* U+2581 in the text is SentencePiece's space marker: it encodes as the space piece */
    size_t n1, n2;
    int32_t *a = enc(l2, "a b", 3, 0, &n1), *b = enc(l2, "a\xE2\x96\x81" "b", 5, 0, &n2);
    CHECK(n1 == n2 && !memcmp(a, b, n1 * sizeof(int32_t)), "\"a\\u2581b\" should encode as \"a b\"");
    free(a);
    free(b);
}

TEST(test_llama2_byte_fallback_for_invalid_utf8) {
    const char s[] = "ab\xFF" "cd\xC3\x28" " \xE2\x82";
    size_t ng, dl;
    int32_t *ids = enc(l2, s, sizeof s - 1, 0, &ng);
    int ff = 0, c3 = 0, e2 = 0, x82 = 0;
    for (size_t i = 0; i < ng; i++) {
        ff += ids[i] == 3 + 0xFF;
        c3 += ids[i] == 3 + 0xC3;
        e2 += ids[i] == 3 + 0xE2;
        x82 += ids[i] == 3 + 0x82;
    }
    CHECK(ff == 1 && c3 == 1 && e2 == 1 && x82 == 1, "each invalid byte becomes its <0xNN> token once");
    char *d = tokenizer_decode(l2, ids, ng, &dl);
    CHECK(dl == sizeof s - 1 && !memcmp(d, s, dl), "invalid UTF-8 does not round-trip");
    free(d);
    free(ids);
}

/* random byte strings: any bytes for Llama 3; for Llama 2 without U+2581, which decodes as ' ' */
static void random_round_trips(const char *test_name_, Tokenizer *t) {
    char buf[300];
    for (int c = 0; c < 400; c++) {
        size_t n = rnd() % sizeof buf;
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rnd();
            buf[i] = r % 4 == 0 ? " a\n\xC3\xA9\xE4\xB8\xAD"[r / 4 % 8] : (char)(r >> 8);
        }
        if (t == l2 && memmem(buf, n, "\xE2\x96\x81", 3)) continue;
        size_t ng, dl;
        int32_t *ids = enc(t, buf, n, c & 1, &ng);
        char *d = tokenizer_decode(t, ids, ng, &dl);
        CHECK(dl == n && !memcmp(d, buf, n), "%s: case %d (%zu bytes) does not round-trip", tokenizer_kind(t), c, n);
        free(d);
        free(ids);
        if (test_case_failed_) return;
    }
}
TEST(test_random_bytes_round_trip) {
    random_round_trips(test_name_, l3);
    random_round_trips(test_name_, l2);
}

TEST(test_corpus_round_trips) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/sotu/txt", data_dir);
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s; run `make data`", dir);
    if (!d) return;
    int files = 0;
    size_t tokens[2] = {0, 0}, bytes = 0;
    for (struct dirent *e; (e = readdir(d)) && files < 40;) {
        if (!strstr(e->d_name, ".txt")) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = xfopen(path, "rb", "run `make data`");
        size_t n = (size_t)file_size(path);
        char *s = xmalloc(n + 1, "speech");
        xfread(s, n, f, path, "the speech");
        fclose(f);
        files++;
        bytes += n;
        Tokenizer *ts[2] = {l3, l2};
        for (int k = 0; k < 2; k++) {
            size_t ng, dl;
            int32_t *ids = enc(ts[k], s, n, 0, &ng);
            tokens[k] += ng;
            char *out = tokenizer_decode(ts[k], ids, ng, &dl);
            CHECK(dl == n && !memcmp(out, s, n), "%s: %s does not round-trip", tokenizer_kind(ts[k]), path);
            free(out);
            free(ids);
        }
        free(s);
    }
    closedir(d);
    CHECK(files > 0, "no speeches in %s", dir);
    if (!test_case_failed_)
        printf("# %d speeches, %zu bytes: llama3 %zu tokens, llama2 %zu tokens\n", files, bytes, tokens[0],
               tokens[1]);
}

int main(int argc, char **argv) {
    if (argc < 2) fatal("usage: %s DATA_DIR", argv[0]);
    data_dir = argv[1];
    l3 = tokenizer_load("llama3", data_dir);
    l2 = tokenizer_load("llama2", data_dir);
    RUN_TEST(test_llama3_shape_and_specials);
    RUN_TEST(test_llama3_known_encodings);
    RUN_TEST(test_llama3_specials_only_when_allowed);
    RUN_TEST(test_llama3_scan_and_heap_merge_alike);
    RUN_TEST(test_llama2_shape);
    RUN_TEST(test_llama2_known_encodings);
    RUN_TEST(test_llama2_decode_rules);
    RUN_TEST(test_llama2_byte_fallback_for_invalid_utf8);
    RUN_TEST(test_random_bytes_round_trip);
    RUN_TEST(test_corpus_round_trips);
    tokenizer_free(l3);
    tokenizer_free(l2);
    TEST_EXIT();
}
