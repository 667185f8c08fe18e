/*
 * test/test_scape_topk_emul.c - the GPU top-k of cuda/scape.cuh (scape_topk_mask_gpu) emulated on the CPU, with no
 * GPU: the kernels' decomposition (three histogram passes, a select step after each, per-chunk counts of the keys
 * equal to the threshold T and their exclusive scan, then the marking pass chunk by chunk in rounds of one
 * block) run with the kernels' own select step and marking rule (scape_topk_select / scape_topk_walk /
 * scape_topk_take of optim/scape.h, compiled for both), checked against scape_topk_mask on random and adversarial
 * slices, and scape_topk_walk against the CPU's bin-by-bin loop on random histograms.
 * What it does not check: the CUDA parts (warp votes, shared-memory histograms, atomics on mask words, CUB),
 * which dev/cuda/scape.cu checks against scape_topk_mask on a GPU.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optim/scape.h"
#include "test/test.h"

#define EMUL_THREADS 256 /* SCAPE_THREADS of cuda/scape.cuh: the marking kernel's block, one round per 256 elements */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double next_unit(void) { return (double)(next_u64() >> 11) / 9007199254740992.0; }
static size_t next_below(size_t n) { return (size_t)(next_unit() * (double)n) % (n ? n : 1); }
static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}
static uint32_t key_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return scape_topk_key(u);
}

/* scape_topk_mask_gpu, kernel by kernel, on the CPU. st_out: the final select state (for reports). */
static void emul_topk(const float *c, size_t n, size_t k, uint8_t *bits, size_t bit_off, ScapeTopkState *st_out) {
    memset(st_out, 0, sizeof *st_out);
    if (n == 0 || k == 0) return;
    if (k >= n) {
        mask_set_range(bits, bit_off, n); /* scape_mask_set_range */
        return;
    }
    ScapeTopkState st;
    memset(&st, 0, sizeof st);
    static unsigned int h[SCAPE_TOPK_BINS];
    static unsigned long long gsum[SCAPE_TOPK_GROUPS];
    for (int pass = 0; pass < 3; pass++) {
        /* scape_topk_hist_kernel: the counts do not depend on which block saw which element */
        const int shift = scape_topk_shift(pass), nb = 1 << scape_topk_width(pass);
        const uint32_t dmask = (uint32_t)nb - 1, prefix = pass ? st.prefix : 0, pmask = pass ? st.pmask : 0;
        memset(h, 0, sizeof h);
        for (size_t j = 0; j < n; j++) {
            uint32_t key = key_of(c[j]);
            if ((key & pmask) == prefix) h[(key >> shift) & dmask]++;
        }
        /* scape_topk_select_kernel */
        for (int g = 0; g < SCAPE_TOPK_GROUPS; g++) gsum[g] = scape_topk_group_sum(h, nb / SCAPE_TOPK_GROUPS, g);
        scape_topk_select(&st, pass, h, gsum, (long long)k);
    }
    /* scape_topk_eq_count_kernel + the exclusive scan */
    const size_t nch = (n + SCAPE_TOPK_CHUNK - 1) / SCAPE_TOPK_CHUNK;
    long long *eqscan = malloc(nch * sizeof(long long));
    long long run = 0;
    for (size_t ch = 0; ch < nch; ch++) {
        long long cnt = 0;
        if (!st.all_ties)
            for (size_t j = ch * SCAPE_TOPK_CHUNK; j < n && j < (ch + 1) * SCAPE_TOPK_CHUNK; j++) cnt += key_of(c[j]) == st.prefix;
        eqscan[ch] = run;
        run += cnt;
    }
    /* scape_topk_mark_kernel: chunk by chunk, rounds of EMUL_THREADS elements */
    const uint32_t T = st.prefix;
    const long long need = st.need;
    for (size_t ch = 0; ch < nch; ch++) {
        const size_t lo = ch * SCAPE_TOPK_CHUNK;
        long long taken = st.all_ties ? 0 : eqscan[ch];
        for (size_t e0 = 0; e0 < SCAPE_TOPK_CHUNK && lo + e0 < n; e0 += EMUL_THREADS) {
            const int all = st.all_ties, scan = !all && taken < need;
            long long before = 0; /* the block's exclusive count of equal keys, thread by thread */
            for (size_t t = 0; t < EMUL_THREADS; t++) {
                const size_t j = lo + e0 + t;
                uint32_t key = 0;
                int eqf = 0;
                if (j < n) {
                    key = key_of(c[j]);
                    eqf = key == T;
                }
                long long tie_rank = need;
                if (all) tie_rank = 0;
                else if (scan) tie_rank = taken + before;
                before += eqf;
                if (j < n && scape_topk_take(key, T, tie_rank, need)) mask_set(bits, bit_off + j);
            }
            if (scan) taken += before;
        }
    }
    free(eqscan);
    *st_out = st;
}

/* One slice: both selections into copies of one mask whose other bits are random; 1 if they agree. */
static int compare_case(const char *test_name_, const char *what, const float *c, size_t n, size_t k, size_t bit_off) {
    const size_t nbits = bit_off + n + 41, nbytes = mask_bytes(nbits) + MASK_PAD;
    uint8_t *base = malloc(nbytes), *cpu = malloc(nbytes), *emu = malloc(nbytes);
    for (size_t i = 0; i < nbytes; i++) base[i] = (uint8_t)next_u64();
    for (size_t j = bit_off; j < bit_off + n; j++) base[j >> 3] &= (uint8_t)~(1u << (j & 7));
    memcpy(cpu, base, nbytes);
    memcpy(emu, base, nbytes);
    uint32_t *tmp = malloc((n ? n : 1) * sizeof(uint32_t));
    scape_topk_mask(c, n, k, cpu, bit_off, tmp);
    ScapeTopkState st;
    emul_topk(c, n, k, emu, bit_off, &st);
    int ok = 1;
    for (size_t j = 0; j < nbits; j++)
        if (mask_get(cpu, j) != mask_get(emu, j)) {
            long long e = (long long)j - (long long)bit_off;
            CHECK(0, "%s: n=%zu k=%zu bit_off=%zu: bit %zu (element %lld) emulated GPU %d, scape_topk_mask %d; bits set "
                  "%zu vs %zu; threshold key 0x%08x need %lld all_ties %d",
                  what, n, k, bit_off, j, e, mask_get(emu, j), mask_get(cpu, j), mask_count(emu, bit_off, bit_off + n),
                  mask_count(cpu, bit_off, bit_off + n), st.prefix, st.need, st.all_ties);
            ok = 0;
            break;
        }
    free(base);
    free(cpu);
    free(emu);
    free(tmp);
    return ok;
}

/* values of kind 0..6: uniform, few values, zeros and -0, NaN/inf/denormal sprinkles, any bit pattern, half the
 * slice one value, quantized */
static void fill(float *c, size_t n, int kind) {
    static const float few[7] = {0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 2.0f, -2.0f};
    static const uint32_t special[10] = {0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0xFFFFFFFFu, 0x7F800000u,
                                         0xFF800000u, 0x00000001u, 0x80000003u, 0x80000000u, 0x007FFFFFu};
    const float tie = (float)(next_unit() - 0.5);
    for (size_t i = 0; i < n; i++) {
        float u = (float)(2 * next_unit() - 1);
        switch (kind) {
        case 0: c[i] = u; break;
        case 1: c[i] = few[next_below(7)]; break;
        case 2: c[i] = next_below(2) ? 0.0f : -0.0f; break;
        case 3: c[i] = next_below(50) == 0 ? from_bits(special[next_below(10)]) : u; break;
        case 4: c[i] = from_bits((uint32_t)next_u64()); break;
        case 5: c[i] = next_below(2) ? tie : (next_below(2) ? -tie : u); break;
        default: c[i] = (float)((int)(u * 16)) / 16.0f; break;
        }
    }
}

TEST(walk_equals_the_cpu_loop) {
    static unsigned int h[SCAPE_TOPK_BINS];
    static unsigned long long gsum[SCAPE_TOPK_GROUPS];
    for (int trial = 0; trial < 20000; trial++) {
        const int nb = trial & 1 ? 2048 : 512, per = nb / SCAPE_TOPK_GROUPS;
        const int sparse = (int)next_below(4); /* 0: dense counts ... 3: almost all bins empty */
        long long total = 0;
        for (int b = 0; b < nb; b++) {
            unsigned v = 0;
            if (next_below(1u << (2 * sparse)) == 0) v = (unsigned)(next_below(4) == 0 ? next_below(100000) : next_below(5));
            h[b] = v;
            total += v;
        }
        if (total == 0) {
            h[next_below((size_t)nb)] = 1;
            total = 1;
        }
        for (int g = 0; g < SCAPE_TOPK_GROUPS; g++) gsum[g] = scape_topk_group_sum(h, per, g);
        const long long need = trial % 7 == 0 ? total : trial % 7 == 1 ? 1 : 1 + (long long)next_below((size_t)total);
        long long r_cpu = need, r_walk = need;
        int b_cpu = nb - 1;
        for (; b_cpu > 0; b_cpu--) { /* scape_topk_mask's loop */
            if ((long long)h[b_cpu] >= r_cpu) break;
            r_cpu -= h[b_cpu];
        }
        int b_walk = scape_topk_walk(h, gsum, SCAPE_TOPK_GROUPS, per, &r_walk);
        if (b_walk != b_cpu || r_walk != r_cpu) {
            CHECK(0, "trial %d (nb %d, total %lld, need %lld): walk gives bin %d rem %lld, the loop bin %d rem %lld", trial,
                  nb, total, need, b_walk, r_walk, b_cpu, r_cpu);
            return;
        }
    }
}

TEST(edge_cases_equal_scape_topk_mask) {
    float *c = malloc(20000 * sizeof(float));
    fill(c, 20000, 0);
    compare_case(test_name_, "n1_k1", c, 1, 1, 7);
    compare_case(test_name_, "k_eq_n", c, 45, 45, 3);
    compare_case(test_name_, "k1", c, 37, 1, 5);
    compare_case(test_name_, "k_n_minus_1", c, 4099, 4098, 31);
    compare_case(test_name_, "chunk_boundary", c, 8193, 4096, 0);
    memset(c, 0, 20000 * sizeof(float));
    compare_case(test_name_, "zeros", c, 10000, 123, 0);
    compare_case(test_name_, "zeros_k_n_minus_1", c, 10000, 9999, 9);
    fill(c, 20000, 3);
    compare_case(test_name_, "nan_inf_k10", c, 20000, 10, 3);
    compare_case(test_name_, "nan_inf_k19990", c, 20000, 19990, 3);
    free(c);
}

TEST(random_slices_equal_scape_topk_mask) {
    const size_t maxn = 20000;
    float *c = malloc(maxn * sizeof(float));
    int cases = 0;
    for (int trial = 0; trial < 3000; trial++) {
        size_t n;
        switch (trial % 5) {
        case 0: n = 1 + next_below(64); break;
        case 1: n = SCAPE_TOPK_CHUNK - 2 + next_below(5); break;
        case 2: n = 2 * SCAPE_TOPK_CHUNK - 2 + next_below(5); break;
        default: n = 1 + next_below(maxn); break;
        }
        const size_t k = trial % 11 == 0 ? n : trial % 13 == 0 ? 1 : trial % 17 == 0 ? n - 1 : 1 + next_below(n);
        const int kind = (int)next_below(7);
        fill(c, n, kind);
        char what[64];
        snprintf(what, sizeof what, "trial %d kind %d", trial, kind);
        if (!compare_case(test_name_, what, c, n, k ? k : 1, next_below(64))) break;
        cases++;
    }
    printf("  %d random slices (n <= %zu, 7 kinds of values) equal\n", cases, maxn);
    free(c);
}

TEST(large_tied_slices_equal_scape_topk_mask) {
    const size_t n = 600011;
    float *c = malloc(n * sizeof(float));
    for (int kind = 1; kind < 7; kind++) {
        fill(c, n, kind);
        char what[32];
        snprintf(what, sizeof what, "kind %d", kind);
        compare_case(test_name_, what, c, n, 1 + next_below(n - 1), 13);
        compare_case(test_name_, what, c, n, (size_t)(0.01 * n), 0);
    }
    free(c);
}

int main(void) {
    RUN_TEST(walk_equals_the_cpu_loop);
    RUN_TEST(edge_cases_equal_scape_topk_mask);
    RUN_TEST(random_slices_equal_scape_topk_mask);
    RUN_TEST(large_tied_slices_equal_scape_topk_mask);
    TEST_EXIT();
}
