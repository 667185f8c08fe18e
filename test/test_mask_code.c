/*
 * test/test_mask_code.c - optim/mask_code.c: every coded segment decodes to exactly the mask encoded (random
 * masks at densities 1e-4 .. 0.5, clustered masks, masks near the previous one, segment lengths that are not
 * multiples of 8 or 64, unaligned offsets into the previous mask, empty segments); the code chooses the method the
 * data call for and comes close to the entropy floor; bad input (truncated, trailing bytes, unknown method, XOR
 * without a previous mask, positions out of order or past the segment, padding bits set) is refused.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "optim/mask_code.h"
#include "optim/scape.h"
#include "test/test.h"

static uint8_t *new_mask(size_t n) { return calloc(mask_bytes(n) + MASK_PAD, 1); }

/* a random mask of n bits with each bit set with probability d */
static uint8_t *random_mask(Rng *r, size_t n, double d) {
    uint8_t *m = new_mask(n);
    for (size_t j = 0; j < n; j++)
        if (rng_uniform(r) < d) mask_set(m, j);
    return m;
}

/* encode then decode; 1 when the decoded bits equal the mask's, and *len, *method get the code's */
static int round_trip(const uint8_t *m, size_t n, const uint8_t *prev, size_t off, size_t *len, int *method) {
    uint8_t *code = malloc(mask_code_bound(n)), *back = malloc(mask_bytes(n) ? mask_bytes(n) : 1);
    *len = mask_encode(m, n, prev, off, code, method);
    int ok = *len <= mask_code_bound(n) && mask_decode(code, *len, n, prev, off, back) == 0;
    for (size_t j = 0; ok && j < n; j++) ok = mask_get(back, j) == mask_get(m, j);
    free(code);
    free(back);
    return ok;
}

static double entropy_bits(double d) { return d <= 0 || d >= 1 ? 0 : -d * log2(d) - (1 - d) * log2(1 - d); }

TEST(random_masks_round_trip_at_every_density) {
    const double ds[] = {1e-4, 0.001, 0.01, 0.1, 0.5};
    const size_t ns[] = {0, 1, 7, 63, 64, 65, 1000, 100003};
    Rng r;
    rng_seed(&r, 1);
    for (size_t a = 0; a < sizeof ds / sizeof ds[0]; a++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++) {
            uint8_t *m = random_mask(&r, ns[b], ds[a]);
            size_t len;
            int method;
            CHECK(round_trip(m, ns[b], NULL, 0, &len, &method), "d %g n %zu: decode differs", ds[a], ns[b]);
            CHECK(method != MASK_CODE_XOR, "d %g n %zu: XOR chosen without a previous mask", ds[a], ns[b]);
            free(m);
        }
}

TEST(code_size_is_near_the_entropy_floor) {
    /* random masks: Golomb-Rice of geometric gaps is within a few percent of H(d) per element for d <= 0.1; at
     * d = 0.5 the raw bitmask (1 bit) is the best there is */
    const double ds[] = {1e-4, 0.001, 0.01, 0.1, 0.5};
    const size_t n = 2000000;
    Rng r;
    rng_seed(&r, 2);
    for (size_t a = 0; a < sizeof ds / sizeof ds[0]; a++) {
        uint8_t *m = random_mask(&r, n, ds[a]);
        size_t len;
        int method;
        CHECK(round_trip(m, n, NULL, 0, &len, &method), "d %g: decode differs", ds[a]);
        double bits = 8.0 * (double)len / (double)n, floor_ = entropy_bits(ds[a]);
        if (ds[a] < 0.5) {
            CHECK(method == MASK_CODE_RICE, "d %g: method %d, expected Rice", ds[a], method);
            CHECK(bits < 1.06 * floor_ + 1e-4, "d %g: %.5f bits per element, entropy %.5f", ds[a], bits, floor_);
        } else {
            CHECK(method == MASK_CODE_RAW, "d 0.5: method %d, expected raw", method);
            CHECK(len == mask_code_bound(n), "d 0.5: %zu bytes, raw is %zu", len, mask_code_bound(n));
        }
        free(m);
    }
}

TEST(masks_near_the_previous_one_use_the_xor) {
    /* prev at d = 0.01 over off + n elements; the new mask keeps 90% of prev's bits in the segment and adds as many
     * new ones: the XOR has ~20% of the mask's positions, so it codes smaller than the mask itself */
    const size_t n = 500000, off = 12345;
    Rng r;
    rng_seed(&r, 3);
    uint8_t *prev = random_mask(&r, off + n, 0.01), *m = new_mask(n);
    size_t kept = 0;
    for (size_t j = 0; j < n; j++)
        if (mask_get(prev, off + j) && rng_uniform(&r) < 0.9) { mask_set(m, j); kept++; }
    for (size_t added = 0; added < kept / 9;) {
        size_t j = (size_t)rng_below(&r, n);
        if (!mask_get(m, j) && !mask_get(prev, off + j)) { mask_set(m, j); added++; }
    }
    size_t len_xor, len_plain;
    int method;
    CHECK(round_trip(m, n, prev, off, &len_xor, &method), "with prev: decode differs");
    CHECK(method == MASK_CODE_XOR, "method %d, expected XOR", method);
    CHECK(round_trip(m, n, NULL, 0, &len_plain, &method), "without prev: decode differs");
    CHECK(len_xor < len_plain / 2, "XOR code %zu bytes, plain %zu: expected under half", len_xor, len_plain);
    /* a mask unrelated to prev: the XOR would have more positions, so it is not chosen */
    uint8_t *u = random_mask(&r, n, 0.01);
    CHECK(round_trip(u, n, prev, off, &len_xor, &method) && method == MASK_CODE_RICE, "unrelated mask: method %d", method);
    free(prev);
    free(m);
    free(u);
}

TEST(clustered_and_extreme_masks_round_trip) {
    const size_t n = 70001;
    uint8_t *all = new_mask(n), *none = new_mask(n), *runs = new_mask(n), *ends = new_mask(n);
    mask_set_range(all, 0, n);
    for (size_t j = 0; j < n; j++)
        if ((j / 1000) % 3 == 0) mask_set(runs, j);
    mask_set(ends, 0);
    mask_set(ends, n - 1);
    Rng r;
    rng_seed(&r, 4);
    uint8_t *prev = random_mask(&r, n + 3, 0.3);
    const uint8_t *ms[] = {all, none, runs, ends};
    for (int i = 0; i < 4; i++) {
        size_t len;
        int method;
        CHECK(round_trip(ms[i], n, NULL, 0, &len, &method), "mask %d without prev: decode differs", i);
        CHECK(round_trip(ms[i], n, prev, 3, &len, &method), "mask %d with prev: decode differs", i);
    }
    size_t len;
    int method;
    round_trip(none, n, NULL, 0, &len, &method);
    CHECK(method == MASK_CODE_RICE && len <= 4, "empty mask: method %d, %zu bytes", method, len);
    free(all);
    free(none);
    free(runs);
    free(ends);
    free(prev);
}

TEST(bad_input_is_refused) {
    const size_t n = 5000;
    Rng r;
    rng_seed(&r, 5);
    uint8_t *m = random_mask(&r, n, 0.01), *prev = random_mask(&r, n, 0.01);
    uint8_t *code = malloc(mask_code_bound(n) + 8), *seg = malloc(mask_bytes(n));
    int method;
    size_t len = mask_encode(m, n, NULL, 0, code, &method);
    CHECK(method == MASK_CODE_RICE, "setup: method %d", method);
    CHECK(mask_decode(code, len, n, NULL, 0, seg) == 0, "the valid code was refused");
    for (size_t cut = 0; cut < len; cut++)
        CHECK(mask_decode(code, cut, n, NULL, 0, seg) == -1, "truncated to %zu of %zu bytes: accepted", cut, len);
    code[len] = 0;
    CHECK(mask_decode(code, len + 1, n, NULL, 0, seg) == -1, "a trailing byte was accepted");
    CHECK(mask_decode(code, len, n / 2, NULL, 0, seg) == -1, "positions past a shorter segment were accepted");
    uint8_t saved = code[0];
    code[0] = 7;
    CHECK(mask_decode(code, len, n, NULL, 0, seg) == -1, "unknown method 7 accepted");
    code[0] = MASK_CODE_XOR;
    CHECK(mask_decode(code, len, n, NULL, 0, seg) == -1, "XOR accepted without a previous mask");
    CHECK(mask_decode(code, len, n, prev, 0, seg) == 0, "the same body as XOR with a previous mask was refused");
    code[0] = saved;
    /* padding bits of the last byte set */
    uint8_t last = code[len - 1];
    for (int b = 7; b >= 0 && !((last >> b) & 1); b--) {
        code[len - 1] = (uint8_t)(last | (1u << b));
        CHECK(mask_decode(code, len, n, NULL, 0, seg) == -1, "padding bit %d set: accepted", b);
    }
    code[len - 1] = last;
    /* raw: wrong length, bits past n */
    const size_t n2 = 13;
    uint8_t raw[3] = {MASK_CODE_RAW, 0xFF, 0x1F};
    CHECK(mask_decode(raw, 3, n2, NULL, 0, seg) == 0, "valid raw refused");
    raw[2] = 0x3F;
    CHECK(mask_decode(raw, 3, n2, NULL, 0, seg) == -1, "raw with a bit past n accepted");
    CHECK(mask_decode(raw, 2, n2, NULL, 0, seg) == -1, "short raw accepted");
    /* a count larger than the segment */
    uint8_t big[4] = {MASK_CODE_RICE, 20, 0, 0};
    CHECK(mask_decode(big, 4, 10, NULL, 0, seg) == -1, "20 positions in a 10-element segment accepted");
    free(m);
    free(prev);
    free(code);
    free(seg);
}

int main(void) {
    RUN_TEST(random_masks_round_trip_at_every_density);
    RUN_TEST(code_size_is_near_the_entropy_floor);
    RUN_TEST(masks_near_the_previous_one_use_the_xor);
    RUN_TEST(clustered_and_extreme_masks_round_trip);
    RUN_TEST(bad_input_is_refused);
    TEST_EXIT();
}
