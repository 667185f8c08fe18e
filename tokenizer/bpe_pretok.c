/*
 * tokenizer/bpe_pretok.c - the byte-level pre-tokenizers: GPT-2's and Llama 3's regexes (PCRE2, JIT), which cut
 * text into the pieces BPE then merges one by one, and the walk over a text's pieces that encoding and the BPE
 * trainer share.
 *
 * Invalid UTF-8: OpenAI's encoders take Unicode strings, so they define nothing for it. Here PCRE2 runs with
 * PCRE2_MATCH_INVALID_UTF, under which an invalid sequence matches no pattern item: each valid stretch is
 * pre-tokenized exactly as it would be alone (the stretch's end acts as end of text), and each run of bytes
 * between stretches becomes one piece of its own, merged like any other. Every byte lands in exactly one
 * piece, so decode(encode(x)) == x for all x. (Llama 2 has no pre-tokenizer: bpe_encode.c.)
 *
 * Not for: merging (bpe_encode.c), the special tokens' text (tokenizer_encode splits it off first).
 */
#include <pthread.h>
#include <stddef.h>

#include "common/util.h"
#include "tokenizer/bpe_impl.h"

/* GPT-2's pre-tokenizer: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * \s is spelled out as Unicode's White_Space property, which is what tiktoken's Rust regex uses. Engines' own \s
 * disagree on a few characters (U+0085, U+180E, U+FEFF, U+001C..U+001F; JavaScript's, Python's and PCRE2's
 * differ), so spelling it out makes the result independent of the PCRE2 build; scripts/bench_tokenizer.sh
 * checks those characters against tiktoken. \p{L} and \p{N} come from PCRE2's Unicode tables. */
#define WS "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";

/* Llama 3's pre-tokenizer, as in Meta's tiktoken setup and the tokenizer.json that llama3-tokenizer-js bakes in:
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|
 * \s+(?!\S)|\s+   with \s spelled out as for GPT-2. (?i) is PCRE2's Unicode caseless matching, as in tiktoken's
 * Rust regex (so 's also matches U+017F); the JS package rewrites it as [sS]... (ASCII only). */
static const char LLAMA3_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|"
    "[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";

/* Compiles a pre-tokenizer pattern (UTF, Unicode properties, invalid UTF-8 matching nothing) with JIT. */
static pcre2_code *compile_pattern(const char *pattern, const char *what) {
    int err;
    PCRE2_SIZE erroff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        fatal("PCRE2 cannot compile %s's pattern at offset %zu: %s; libpcre2-8 10.34 or newer is needed", what,
              (size_t)erroff, (char *)msg);
    }
    /* JIT is a speed-up only; without it pcre2_match interprets the same pattern */
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

pcre2_code *bpe_pretokenizer_compile(Kind kind) {
    if (kind == KIND_GPT2) return compile_pattern(GPT2_PATTERN, "GPT-2");
    if (kind == KIND_LLAMA3) return compile_pattern(LLAMA3_PATTERN, "Llama 3");
    return NULL;
}

void bpe_next_piece(const pcre2_code *re, pcre2_match_data *md, const unsigned char *text, size_t len, size_t pos,
                    size_t *start, size_t *end) {
    int rc = pcre2_match(re, (PCRE2_SPTR)text, len, pos, 0, md, NULL);
    *start = *end = len;
    if (rc >= 0) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        *start = ov[0];
        *end = ov[1];
    } else if (rc != PCRE2_ERROR_NOMATCH) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        fatal("PCRE2 match failed at byte %zu: %s", pos, (char *)msg);
    }
}

/* GPT-2's pattern for bpe_pretokenize_gpt2, compiled once per process (a compiled pattern is read-only and
 * shareable; match data is not) */
static pcre2_code *gpt2_re;
static void compile_gpt2_re(void) { gpt2_re = compile_pattern(GPT2_PATTERN, "GPT-2"); }

void bpe_pretokenize_gpt2(const char *text, size_t len, void (*fn)(const unsigned char *, size_t, void *),
                          void *ctx) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, compile_gpt2_re);
    const pcre2_code *re = gpt2_re;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) fatal("out of memory creating PCRE2 match data");
    const unsigned char *p = (const unsigned char *)text;
    for (size_t pos = 0, start, end; pos < len; pos = end) {
        bpe_next_piece(re, md, p, len, pos, &start, &end);
        if (start > pos) fn(p + pos, start - pos, ctx);
        if (end > start) fn(p + start, end - start, ctx);
    }
    pcre2_match_data_free(md);
}
