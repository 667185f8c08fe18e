/*
 * dev/cuda/scape.cu - checks cuda/scape.cuh against the CPU SCAPE code itself (optim/scape.c linked in, and the
 * shared scape_update_on of optim/scape.h), then times each kernel.
 *   masks:    pack / unpack / set range / count at unaligned bit offsets, neighbouring bits kept
 *             (exact, against mask_set / mask_get / mask_set_range / mask_count)
 *   top-k:    scape_topk_mask on random data, all-zero and few-valued slices (huge ties across many chunks), NaN,
 *             inf, -0 and denormals, k = 1, k = n - 1, k = n, n = 1, unaligned offsets, two slices sharing mask
 *             words; exact (bytes of the mask), plus an independent sort-based reference where n is small enough
 *   bucket:   corrected first moment + compaction (c and payload exact, K_b exact), in-place variant (c into r),
 *             the non-finite flag; the g_hat norm (toleranced: the CPU adds the same doubles in another order,
 *             1e-12 relative; repeat runs must be bitwise equal); the masked AdamS update with and without
 *             clipping (params, m, r exact), the floatX copy (exact: fp32 equals the params; bf16 equals a host
 *             emulation of the stochastic rounding with sr_seed), conservation (SCAPE.md invariant 2), and the
 *             per-slice variants with r and c in a one-slice staging buffer (residual offload), exact
 *   stats:    the mask statistics' per-slice AND / OR popcounts (exact) and kept / total energies (against long
 *             double, 2 n DBL_EPSILON relative), edge slices, prev = NULL, repeat runs bitwise
 * Exact means bit for bit: all arithmetic is fp32 with the CPU's operation order; in the bf16 build only the
 * gradient input is bf16, rounded on the host before the CPU reference sees it, so fp32 results still match.
 * Then "time ..." lines: each kernel on 64M (top-k: 32M) elements, GB/s against the peak the device reports.
 * Also built for the CPU emulation of dev/cuda/emu (`make test-emu`, CUDA_EMU: smaller, no timings).
 */
#include <float.h>
#include <math.h>
#include <algorithm>
#include <functional>
#include <vector>
#include "dev/cuda/dev_common.cuh"
#include "cuda/scape.cuh"
extern "C" {
#include "common/params.h"
#include "optim/scape.h"
}

/* CUDA_EMU: built by the CPU emulation of dev/cuda/emu (make test-emu), the large top-k cases shrink to 1/16 and
 * the timings are skipped */
#if defined(CUDA_EMU)
#define SCAPE_TEST_LARGE(n) ((n) / 16)
#else
#define SCAPE_TEST_LARGE(n) (n)
#endif

/* ---- helpers ---- */

static uint32_t *mask_to_device(const uint8_t *h, long long nbits) {
    long long words = scape_mask_words(nbits);
    uint32_t *d;
    cudaCheck(cudaMalloc(&d, (words ? words : 1) * 4));
    cudaCheck(cudaMemset(d, 0, (words ? words : 1) * 4));
    cudaCheck(cudaMemcpy(d, h, mask_bytes((size_t)nbits), cudaMemcpyHostToDevice));
    return d;
}
static uint8_t *mask_from_device(const uint32_t *d, long long nbits) {
    uint8_t *h = (uint8_t *)calloc(mask_bytes((size_t)nbits) + MASK_PAD, 1);
    cudaCheck(cudaMemcpy(h, d, mask_bytes((size_t)nbits), cudaMemcpyDeviceToHost));
    return h;
}
static float *f32_to_device(const float *h, size_t n) {
    float *d;
    cudaCheck(cudaMalloc(&d, (n ? n : 1) * 4));
    cudaCheck(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    return d;
}
static uint32_t fbits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}
/* first index where the two float arrays differ bitwise, or -1 */
static long long first_bitdiff(const float *a, const float *b, size_t n, size_t *count) {
    long long first = -1;
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (fbits(a[i]) != fbits(b[i])) {
            if (first < 0) first = (long long)i;
            c++;
        }
    if (count) *count = c;
    return first;
}
static int check_bitwise(const char *name, const float *got, const float *ref, size_t n) {
    size_t cnt;
    long long i = first_bitdiff(got, ref, n, &cnt);
    if (i >= 0) {
        printf("FAIL %s: %zu of %zu values differ bitwise; first [%lld] got %.9g (0x%08x) expected %.9g (0x%08x)\n", name,
               cnt, n, i, got[i], fbits(got[i]), ref[i], fbits(ref[i]));
        dev_failures++;
        return 0;
    }
    printf("ok %s (n=%zu, bitwise equal)\n", name, n);
    return 1;
}
/* random bytes with each bit set with probability dens, over nbits bits (plus MASK_PAD) */
static uint8_t *random_mask(size_t nbits, double dens) {
    uint8_t *m = (uint8_t *)calloc(mask_bytes(nbits) + MASK_PAD, 1);
    for (size_t j = 0; j < nbits; j++)
        if (dev_uniform(0.5f) + 0.5f < dens) mask_set(m, j);
    return m;
}
static void clear_bits(uint8_t *m, size_t lo, size_t hi) {
    for (size_t j = lo; j < hi; j++) m[j >> 3] &= (uint8_t)~(1u << (j & 7));
}
static long long first_mask_diff(const uint8_t *a, const uint8_t *b, size_t nbits) {
    for (size_t j = 0; j < nbits; j++)
        if (mask_get(a, j) != mask_get(b, j)) return (long long)j;
    return -1;
}

/* ---- masks ---- */

static void test_masks(void) {
    const size_t ns[] = {1, 7, 31, 32, 32, 33, 64, 1000, 100003, 100003};
    const size_t offs[] = {0, 3, 1, 0, 5, 31, 32, 17, 0, 29};
    for (int c = 0; c < 10; c++) {
        const size_t n = ns[c], off = offs[c], nbits = off + n + 70; /* bits after the range: a neighbour */
        char nm[96];
        uint8_t *base = random_mask(nbits, 0.5);
        clear_bits(base, off, off + n);
        uint8_t *src = (uint8_t *)malloc(n);
        for (size_t e = 0; e < n; e++) {
            float u = dev_uniform(0.5f) + 0.5f;
            src[e] = u < 0.5f ? 0 : (uint8_t)(1 + (uint8_t)(u * 254)); /* any nonzero byte means 1 */
        }
        /* pack */
        uint8_t *exp = (uint8_t *)calloc(mask_bytes(nbits) + MASK_PAD, 1);
        memcpy(exp, base, mask_bytes(nbits));
        for (size_t e = 0; e < n; e++)
            if (src[e]) mask_set(exp, off + e);
        uint32_t *d_bits = mask_to_device(base, nbits);
        uint8_t *d_src;
        cudaCheck(cudaMalloc(&d_src, n));
        cudaCheck(cudaMemcpy(d_src, src, n, cudaMemcpyHostToDevice));
        scape_mask_pack(d_bits, off, d_src, n, 0);
        uint8_t *got = mask_from_device(d_bits, nbits);
        long long bad = first_mask_diff(got, exp, nbits);
        snprintf(nm, sizeof nm, "mask_pack_n%zu_off%zu", n, off);
        if (bad >= 0) {
            printf("FAIL %s: bit %lld (element %lld of the range [%zu, %zu)) is %d, expected %d\n", nm, bad,
                   bad - (long long)off, off, off + n, mask_get(got, bad), mask_get(exp, bad));
            dev_failures++;
        } else printf("ok %s\n", nm);
        /* unpack to float and to bytes */
        float *d_f;
        uint8_t *d_u;
        cudaCheck(cudaMalloc(&d_f, n * 4));
        cudaCheck(cudaMalloc(&d_u, n));
        scape_mask_unpack<float>(d_f, d_bits, off, n, 0);
        scape_mask_unpack<uint8_t>(d_u, d_bits, off, n, 0);
        float *hf = from_device_f32(d_f, n);
        uint8_t *hu = (uint8_t *)malloc(n);
        cudaCheck(cudaMemcpy(hu, d_u, n, cudaMemcpyDeviceToHost));
        long long ub = -1;
        for (size_t e = 0; e < n && ub < 0; e++)
            if (hf[e] != (float)mask_get(exp, off + e) || hu[e] != mask_get(exp, off + e)) ub = (long long)e;
        snprintf(nm, sizeof nm, "mask_unpack_n%zu_off%zu", n, off);
        if (ub >= 0) {
            printf("FAIL %s: element %lld unpacked to %g / %d, bit is %d\n", nm, ub, hf[ub], hu[ub], mask_get(exp, off + ub));
            dev_failures++;
        } else printf("ok %s\n", nm);
        /* count over a few ranges */
        unsigned long long *d_cnt, cnt;
        cudaCheck(cudaMalloc(&d_cnt, 8));
        size_t los[4] = {off, off + n / 3, 0, off + n / 2}, his[4] = {off + n, off + n - n / 4, nbits, off + n / 2};
        int cok = 1;
        for (int r = 0; r < 4; r++) {
            scape_mask_count(d_cnt, d_bits, (long long)los[r], (long long)his[r], 0);
            cudaCheck(cudaMemcpy(&cnt, d_cnt, 8, cudaMemcpyDeviceToHost));
            size_t ref = mask_count(exp, los[r], his[r]);
            if (cnt != ref) {
                printf("FAIL mask_count_n%zu_off%zu: [%zu, %zu) counted %llu, mask_count says %zu\n", n, off, los[r], his[r],
                       cnt, ref);
                dev_failures++;
                cok = 0;
            }
        }
        if (cok) printf("ok mask_count_n%zu_off%zu (4 ranges)\n", n, off);
        /* set range over the cleared range of base */
        memcpy(exp, base, mask_bytes(nbits));
        mask_set_range(exp, off, n);
        cudaCheck(cudaMemcpy(d_bits, base, mask_bytes(nbits), cudaMemcpyHostToDevice));
        scape_mask_set_range(d_bits, off, n, 0);
        free(got);
        got = mask_from_device(d_bits, nbits);
        bad = first_mask_diff(got, exp, nbits);
        snprintf(nm, sizeof nm, "mask_set_range_n%zu_off%zu", n, off);
        if (bad >= 0) {
            printf("FAIL %s: bit %lld is %d, mask_set_range gives %d\n", nm, bad, mask_get(got, bad), mask_get(exp, bad));
            dev_failures++;
        } else printf("ok %s\n", nm);
        cudaCheck(cudaFree(d_bits));
        cudaCheck(cudaFree(d_src));
        cudaCheck(cudaFree(d_f));
        cudaCheck(cudaFree(d_u));
        cudaCheck(cudaFree(d_cnt));
        free(base); free(src); free(exp); free(got); free(hf); free(hu);
    }
}

/* ---- top-k ---- */

static uint32_t abskey(float x) { return fbits(x) & 0x7FFFFFFFu; }

/* Independent reference: sort the indices by (|c| key descending, index ascending), take the first k. */
static uint8_t *topk_sort_ref(const float *c, size_t n, size_t k, size_t nbits, size_t bit_off, const uint8_t *base) {
    std::vector<uint32_t> idx(n);
    for (size_t i = 0; i < n; i++) idx[i] = (uint32_t)i;
    std::sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
        uint32_t ka = abskey(c[a]), kb = abskey(c[b]);
        return ka != kb ? ka > kb : a < b;
    });
    uint8_t *m = (uint8_t *)calloc(mask_bytes(nbits) + MASK_PAD, 1);
    memcpy(m, base, mask_bytes(nbits));
    for (size_t i = 0; i < k && i < n; i++) mask_set(m, bit_off + idx[i]);
    return m;
}

/* One top-k case: the slice c (n) at bit_off of a mask whose other bits are random (they must survive). */
static void topk_case(const char *name, const float *c, size_t n, size_t k, size_t bit_off, ScapeTopkWork *w, int sort_ref) {
    const size_t nbits = bit_off + n + 45;
    uint8_t *base = random_mask(nbits, 0.5);
    clear_bits(base, bit_off, bit_off + n);
    uint8_t *cpu = (uint8_t *)calloc(mask_bytes(nbits) + MASK_PAD, 1);
    memcpy(cpu, base, mask_bytes(nbits));
    uint32_t *tmp = (uint32_t *)malloc((n ? n : 1) * 4);
    scape_topk_mask(c, n, k, cpu, bit_off, tmp);
    free(tmp);
    float *d_c = f32_to_device(c, n);
    uint32_t *d_bits = mask_to_device(base, nbits);
    scape_topk_mask_gpu(d_bits, (long long)bit_off, d_c, (long long)n, (long long)k, w, 0);
    cudaCheck(cudaDeviceSynchronize());
    uint8_t *got = mask_from_device(d_bits, nbits);
    long long bad = first_mask_diff(got, cpu, nbits);
    size_t gk = mask_count(got, bit_off, bit_off + n), ck = mask_count(cpu, bit_off, bit_off + n);
    if (bad >= 0) {
        ScapeTopkState st;
        cudaCheck(cudaMemcpy(&st, w->state, sizeof st, cudaMemcpyDeviceToHost));
        /* the k-th largest key, for the report */
        std::vector<uint32_t> keys(n);
        for (size_t i = 0; i < n; i++) keys[i] = abskey(c[i]);
        const size_t kk = k < n ? k : n;
        std::nth_element(keys.begin(), keys.begin() + (kk - 1), keys.end(), std::greater<uint32_t>());
        long long e = bad - (long long)bit_off;
        printf("FAIL topk_%s: n=%zu k=%zu bit_off=%zu: first differing bit %lld (element %lld, c=%.9g key 0x%08x) GPU %d "
               "CPU %d; bits set in the slice GPU %zu CPU %zu; GPU threshold key 0x%08x need %lld all_ties %d; k-th "
               "largest key 0x%08x\n",
               name, n, k, bit_off, bad, e, (e >= 0 && e < (long long)n) ? c[e] : 0.0f,
               (e >= 0 && e < (long long)n) ? abskey(c[e]) : 0u, mask_get(got, bad), mask_get(cpu, bad), gk, ck, st.prefix,
               st.need, st.all_ties, keys[kk - 1]);
        dev_failures++;
    } else {
        printf("ok topk_%s (n=%zu k=%zu bit_off=%zu, %zu bits set, mask equal to scape_topk_mask)\n", name, n, k, bit_off, gk);
    }
    if (sort_ref) {
        uint8_t *ref = topk_sort_ref(c, n, k, nbits, bit_off, base);
        long long rb = first_mask_diff(cpu, ref, nbits);
        size_t expect = k < n ? k : n;
        char nm[96];
        snprintf(nm, sizeof nm, "topk_%s_sort_reference", name);
        if (rb >= 0 || ck != expect) {
            printf("FAIL %s: scape_topk_mask differs from the sort at bit %lld (CPU %d sort %d); %zu bits set, expected %zu\n",
                   nm, rb, rb >= 0 ? mask_get(cpu, rb) : -1, rb >= 0 ? mask_get(ref, rb) : -1, ck, expect);
            dev_failures++;
        } else printf("ok %s\n", nm);
        free(ref);
    }
    cudaCheck(cudaFree(d_c));
    cudaCheck(cudaFree(d_bits));
    free(base); free(cpu); free(got);
}

static void test_topk(ScapeTopkWork *w) {
    /* random, small */
    float *c = host_random(1000, 1.0f);
    topk_case("random_n1000_k10", c, 1000, 10, 0, w, 1);
    topk_case("n1_k1", c, 1, 1, 7, w, 1);
    topk_case("k_eq_n", c, 45, 45, 3, w, 1);
    topk_case("k_gt_n", c, 45, 50, 3, w, 1);
    topk_case("k1_n37", c, 37, 1, 5, w, 1);
    free(c);
    c = host_random(4099, 1.0f);
    topk_case("k_n_minus_1", c, 4099, 4098, 31, w, 1);
    topk_case("half_n4099", c, 4099, 2049, 1, w, 1);
    free(c);
    /* all zeros (and -0, the same key): the first k indices */
    c = (float *)calloc(10000, 4);
    topk_case("zeros_n10000_k123", c, 10000, 123, 0, w, 1);
    for (int i = 0; i < 10000; i += 3) c[i] = -0.0f;
    topk_case("signed_zeros_k5000", c, 10000, 5000, 9, w, 1);
    free(c);
    /* five values: ties on the threshold in every chunk */
    const float vals[7] = {0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 2.0f, -2.0f};
    const size_t nf = 100003;
    c = (float *)malloc(nf * 4);
    for (size_t i = 0; i < nf; i++) c[i] = vals[(size_t)((dev_uniform(0.5f) + 0.5f) * 6.999f)];
    topk_case("few_values_k50000", c, nf, 50000, 13, w, 1);
    topk_case("few_values_k3", c, nf, 3, 0, w, 1);
    free(c);
    /* NaN (several payloads, both signs), inf, denormals, -0 */
    const size_t nn = 20000;
    c = host_random(nn, 1.0f);
    const uint32_t special[] = {0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0xFFFFFFFFu, 0x7F800000u, 0xFF800000u,
                                0x00000001u, 0x80000003u, 0x80000000u, 0x007FFFFFu};
    for (int i = 0; i < 200; i++) c[(size_t)((dev_uniform(0.5f) + 0.5f) * (nn - 1))] = bitsf(special[i % 10]);
    topk_case("nan_inf_k10", c, nn, 10, 3, w, 1);    /* threshold among the NaNs */
    topk_case("nan_inf_k70", c, nn, 70, 3, w, 1);    /* NaNs, infs and part of the rest */
    topk_case("nan_inf_k19990", c, nn, 19990, 3, w, 1); /* down to the denormals and zeros */
    free(c);
    /* two slices sharing mask words: A at bit 3 (45 elements), B right after it at bit 48 (77 elements) */
    {
        float *a = host_random(45, 1.0f), *b = host_random(77, 1.0f);
        const size_t nbits = 200;
        uint8_t *cpu = (uint8_t *)calloc(mask_bytes(nbits) + MASK_PAD, 1);
        uint32_t tmp[128];
        scape_topk_mask(a, 45, 9, cpu, 3, tmp);
        scape_topk_mask(b, 77, 30, cpu, 48, tmp);
        float *d_a = f32_to_device(a, 45), *d_b = f32_to_device(b, 77);
        uint8_t *zero = (uint8_t *)calloc(mask_bytes(nbits) + MASK_PAD, 1);
        uint32_t *d_bits = mask_to_device(zero, nbits);
        scape_topk_mask_gpu(d_bits, 3, d_a, 45, 9, w, 0);
        scape_topk_mask_gpu(d_bits, 48, d_b, 77, 30, w, 0);
        uint8_t *got = mask_from_device(d_bits, nbits);
        long long bad = first_mask_diff(got, cpu, nbits);
        if (bad >= 0) {
            printf("FAIL topk_adjacent_slices: bit %lld GPU %d CPU %d\n", bad, mask_get(got, bad), mask_get(cpu, bad));
            dev_failures++;
        } else printf("ok topk_adjacent_slices (two slices in one word, %zu bits set)\n", mask_count(got, 0, nbits));
        cudaCheck(cudaFree(d_a)); cudaCheck(cudaFree(d_b)); cudaCheck(cudaFree(d_bits));
        free(a); free(b); free(cpu); free(zero); free(got);
    }
    /* large: quantized values, so the threshold value has ~10^5 ties spread over hundreds of chunks */
    const size_t nq = SCAPE_TEST_LARGE(3000017);
    c = (float *)malloc(nq * 4);
    for (size_t i = 0; i < nq; i++) c[i] = roundf(dev_uniform(4.0f) * 8.0f) / 8.0f;
    topk_case("quantized_n3M_k37pct", c, nq, (size_t)(0.37 * nq), 5, w, 1);
    free(c);
    /* large random, density 0.01, many histogram blocks */
    const size_t nl = SCAPE_TEST_LARGE((1u << 24) + 5);
    c = host_random(nl, 1.0f);
    topk_case("random_n16M_d0.01", c, nl, scape_k(0.01, nl), 11, w, 0);
    free(c);
}

/* ---- mask statistics (scape_mask_stats, for DistMaskStats) ----
 * Per reported slice: AND / OR popcounts of (cur, prev) against counting mask_get bit by bit (exact), and the
 * kept / total energy of x on cur against long double sums (relative error at most 2 n DBL_EPSILON: two sums of n
 * positive doubles, any order). Slices at unaligned offsets, several tiles per slice, a slice reported out of
 * memory order, one skipped, one with x = 0 (energy 1 by dist.c's rule: all = 0), one with both masks empty on it
 * (union 0); prev = NULL gives zero counts; a second run gives the same bits. */
static void test_mask_stats(void) {
    ParamTable tab;
    memset(&tab, 0, sizeof tab);
    const size_t sizes[7] = {1, 31, 4097, 33, 9000, 70, 100};
    const char *names[7] = {"a", "b", "c", "d", "e", "zero_x", "empty_masks"};
    for (int i = 0; i < 7; i++) param_table_add(&tab, names[i], 0, 0, 1, 1, &sizes[i]);
    const size_t P = tab.total;
    const int rep[6] = {0, 2, 1, 4, 5, 6}; /* slice 3 not reported, 1 after 2 */
    const int n = 6;
    uint8_t *cur = random_mask(P, 0.3), *prev = random_mask(P, 0.5);
    float *x = (float *)malloc(P * sizeof(float));
    for (size_t j = 0; j < P; j++) x[j] = (j % 7 == 3) ? 0.0f : dev_uniform(2.0f) * (j % 5 == 0 ? 1e-20f : 1.0f);
    const ParamSlice *sz = &tab.slices[5], *se = &tab.slices[6];
    for (size_t j = sz->offset; j < sz->offset + sz->numel; j++) x[j] = 0.0f;
    clear_bits(cur, se->offset, se->offset + se->numel);
    clear_bits(prev, se->offset, se->offset + se->numel);
    ScapeBucketPlan pl;
    scape_plan_build(&pl, &tab, rep, n);
    int *d_st;
    cudaCheck(cudaMalloc(&d_st, (n + 1) * sizeof(int)));
    cudaCheck(cudaMemcpy(d_st, pl.slice_tile, (n + 1) * sizeof(int), cudaMemcpyHostToDevice));
    ScapeMaskStatsSums *d_part, *d_out, got[3][6];
    cudaCheck(cudaMalloc(&d_part, (size_t)pl.ntiles * sizeof(ScapeMaskStatsSums)));
    cudaCheck(cudaMalloc(&d_out, n * sizeof(ScapeMaskStatsSums)));
    uint32_t *d_cur = mask_to_device(cur, (long long)P), *d_prev = mask_to_device(prev, (long long)P);
    float *d_x = f32_to_device(x, P);
    for (int run = 0; run < 3; run++) { /* 0, 1: with prev; 2: prev = NULL */
        scape_mask_stats(d_out, d_part, &pl, d_st, d_cur, run < 2 ? d_prev : NULL, d_x, 0);
        cudaCheck(cudaMemcpy(got[run], d_out, n * sizeof(ScapeMaskStatsSums), cudaMemcpyDeviceToHost));
    }
    int cbad = 0, ebad = 0, nbad = 0;
    double worst = 0;
    for (int k = 0; k < n; k++) {
        const ParamSlice *sl = &tab.slices[rep[k]];
        unsigned long long in = 0, un = 0;
        long double kept = 0, all = 0;
        for (size_t j = sl->offset; j < sl->offset + sl->numel; j++) {
            in += mask_get(cur, j) && mask_get(prev, j);
            un += mask_get(cur, j) || mask_get(prev, j);
            long double v = (long double)x[j] * (long double)x[j];
            all += v;
            if (mask_get(cur, j)) kept += v;
        }
        const ScapeMaskStatsSums *g = &got[0][k];
        if (g->inter != in || g->uni != un) {
            if (!cbad) printf("FAIL mask_stats_popcounts: slice %s: inter %llu union %llu, bit by bit %llu %llu\n",
                              sl->name, g->inter, g->uni, in, un);
            cbad++;
        }
        const double tol = 2.0 * (double)sl->numel * DBL_EPSILON;
        const double rk = kept > 0 ? (double)fabsl((long double)g->kept - kept) / (double)kept : fabs(g->kept);
        const double ra = all > 0 ? (double)fabsl((long double)g->all - all) / (double)all : fabs(g->all);
        if (!(rk <= tol && ra <= tol)) {
            if (!ebad) printf("FAIL mask_stats_energy: slice %s: kept %.17g all %.17g, long double %.17Lg %.17Lg (rel "
                              "%.3g %.3g > %.3g)\n", sl->name, g->kept, g->all, kept, all, rk, ra, tol);
            ebad++;
        }
        worst = std::max(worst, std::max(rk, ra));
        if (got[2][k].inter || got[2][k].uni || memcmp(&got[2][k].kept, &g->kept, 8) || memcmp(&got[2][k].all, &g->all, 8))
            nbad++;
    }
    const ScapeMaskStatsSums *z = &got[0][4], *e = &got[0][5];
    if (z->all != 0.0 || z->kept != 0.0 || e->uni != 0 || e->kept != 0.0 || !(e->all > 0)) {
        printf("FAIL mask_stats_edges: x = 0 slice: kept %g all %g (want 0 0); empty-mask slice: union %llu kept %g all %g "
               "(want 0, 0, > 0)\n", z->kept, z->all, e->uni, e->kept, e->all);
        dev_failures++;
    } else printf("ok mask_stats_edges (x = 0: all = 0; masks empty on the slice: union 0)\n");
    if (cbad) dev_failures++;
    else printf("ok mask_stats_popcounts (%d slices, %d tiles)\n", n, pl.ntiles);
    if (ebad) dev_failures++;
    else printf("ok mask_stats_energy (worst rel %.3g against long double)\n", worst);
    if (nbad) {
        printf("FAIL mask_stats_no_prev: %d slices with counts or energies changed by prev = NULL\n", nbad);
        dev_failures++;
    } else printf("ok mask_stats_no_prev\n");
    if (memcmp(got[0], got[1], sizeof got[0])) {
        printf("FAIL mask_stats_repeat: a second run gave other bits\n");
        dev_failures++;
    } else printf("ok mask_stats_repeat_bitwise\n");
    cudaCheck(cudaFree(d_st));
    cudaCheck(cudaFree(d_part));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_cur));
    cudaCheck(cudaFree(d_prev));
    cudaCheck(cudaFree(d_x));
    scape_plan_free(&pl);
    free(cur); free(prev); free(x);
    param_table_free(&tab);
}

/* ---- bucket kernels: corrected first moment + compaction, norm, update ---- */

typedef struct {
    ParamTable tab;
    int nb;
    std::vector<int> slices[2];
    size_t bucket_off[2];
    ScapeBucketPlan plan[2];
} Buckets;

/* Residual offload (SCAPE.md section 7): bucket 0 slice by slice with r and c in a one-slice staging buffer (c
 * written over r in place), against the CPU results of the whole-bucket run: c, the payload, then (from the
 * averaged payload in d_bavg) params, m and the new r. */
static void test_bucket_slices(Buckets *B, const float *m, const float *r, const float *p, const float *c,
                               const float *payload, const float *pc, const float *mc, const float *rc, const floatX *d_g,
                               const uint32_t *d_mask, const float *d_bavg, const ScapeUpdateArgs *a, float b1) {
    const ScapeBucketPlan *pl = &B->plan[0];
    const size_t P = B->tab.total;
    size_t maxn = 0;
    for (int i : B->slices[0]) maxn = std::max(maxn, B->tab.slices[i].numel);
    float *d_stage, *d_pay2, *d_p, *d_m;
    cudaCheck(cudaMalloc(&d_stage, maxn * 4));
    cudaCheck(cudaMalloc(&d_pay2, P * 4));
    d_p = f32_to_device(p, P);
    d_m = f32_to_device(m, P);
    float *h = (float *)malloc(P * 4);
    int ok = 1;
    for (int k = 0; k < pl->nslices; k++) {
        const ParamSlice *s = &B->tab.slices[B->slices[0][k]];
        if (pl->slice_off[k] != (long long)s->offset) {
            printf("FAIL bucket_slices_plan: slice %d of the plan at offset %lld, the table says %zu\n", k, pl->slice_off[k], s->offset);
            dev_failures++;
            ok = 0;
        }
        cudaCheck(cudaMemcpy(d_stage, r + s->offset, s->numel * 4, cudaMemcpyHostToDevice));
        scape_momentum_compact_slice(d_stage, d_pay2 + B->bucket_off[0], (int *)NULL, pl, k, d_g, d_m, d_stage, d_mask, b1, 0);
        cudaCheck(cudaMemcpy(h + s->offset, d_stage, s->numel * 4, cudaMemcpyDeviceToHost));
    }
    float *hpay = from_device_f32(d_pay2, P);
    long long kb;
    cudaCheck(cudaMemcpy(&kb, scape_plan_count_ptr(pl), 8, cudaMemcpyDeviceToHost));
    const size_t K = (size_t)kb;
    long long bad = -1;
    for (int i : B->slices[0]) {
        const ParamSlice *s = &B->tab.slices[i];
        for (size_t j = s->offset; j < s->offset + s->numel && bad < 0; j++)
            if (fbits(h[j]) != fbits(c[j])) bad = (long long)j;
    }
    if (bad >= 0) {
        printf("FAIL bucket_slices_momentum_c: element %lld: staged c %.9g, CPU %.9g\n", bad, h[bad], c[bad]);
        dev_failures++;
        ok = 0;
    }
    if (first_bitdiff(hpay + B->bucket_off[0], payload + B->bucket_off[0], K, NULL) >= 0) {
        long long i = first_bitdiff(hpay + B->bucket_off[0], payload + B->bucket_off[0], K, NULL);
        printf("FAIL bucket_slices_payload: payload[%lld] %.9g, CPU %.9g\n", i, hpay[B->bucket_off[0] + i],
               payload[B->bucket_off[0] + i]);
        dev_failures++;
        ok = 0;
    }
    /* the update, slice by slice: the staging buffer holds c and becomes the new r */
    for (int k = 0; k < pl->nslices; k++) {
        const ParamSlice *s = &B->tab.slices[B->slices[0][k]];
        cudaCheck(cudaMemcpy(d_stage, c + s->offset, s->numel * 4, cudaMemcpyHostToDevice));
        scape_update_slice(d_p, (floatX *)NULL, d_m, d_stage, d_stage, pl, k, d_bavg + B->bucket_off[0], d_mask, a, 0);
        cudaCheck(cudaMemcpy(h + s->offset, d_stage, s->numel * 4, cudaMemcpyDeviceToHost));
    }
    float *gp = from_device_f32(d_p, P), *gm = from_device_f32(d_m, P);
    bad = -1;
    for (int i : B->slices[0]) {
        const ParamSlice *s = &B->tab.slices[i];
        for (size_t j = s->offset; j < s->offset + s->numel && bad < 0; j++)
            if (fbits(h[j]) != fbits(rc[j]) || fbits(gp[j]) != fbits(pc[j]) || fbits(gm[j]) != fbits(mc[j])) bad = (long long)j;
    }
    if (bad >= 0) {
        printf("FAIL bucket_slices_update: element %lld: r %.9g vs %.9g, params %.9g vs %.9g, m %.9g vs %.9g (staged vs CPU)\n",
               bad, h[bad], rc[bad], gp[bad], pc[bad], gm[bad], mc[bad]);
        dev_failures++;
        ok = 0;
    }
    if (ok) printf("ok bucket_slices (bucket 0 slice by slice, r and c staged per slice: c, payload, params, m, r bitwise)\n");
    free(h); free(hpay); free(gp); free(gm);
    cudaCheck(cudaFree(d_stage)); cudaCheck(cudaFree(d_pay2)); cudaCheck(cudaFree(d_p)); cudaCheck(cudaFree(d_m));
}

static void test_bucket(void) {
    Buckets B;
    memset(&B.tab, 0, sizeof B.tab);
    /* slices in memory order; buckets interleave, so a bucket is not contiguous in memory */
    const size_t sizes[6] = {1, 4097, 10000, 33, 70001, 8192};
    const int bucket[6] = {0, 1, 0, 1, 0, 1}, decay[6] = {0, 1, 1, 0, 1, 1};
    const double dens[6] = {1.0, 0.1, 0.5, 0.0, 0.01, 1.0};
    const char *names[6] = {"a", "b", "c", "d", "e", "f"};
    for (int i = 0; i < 6; i++) param_table_add(&B.tab, names[i], 0, bucket[i], decay[i], 1, &sizes[i]);
    const size_t P = B.tab.total;
    B.nb = 2;
    for (int i = 0; i < 6; i++) B.slices[bucket[i]].push_back(i);
    size_t off = 0;
    for (int b = 0; b < 2; b++) {
        B.bucket_off[b] = off;
        for (int i : B.slices[b]) off += B.tab.slices[i].numel;
        scape_plan_build(&B.plan[b], &B.tab, B.slices[b].data(), (int)B.slices[b].size());
    }
    /* mask M_t with a different density per slice */
    uint8_t *mask = (uint8_t *)calloc(mask_bytes(P) + MASK_PAD, 1);
    for (int i = 0; i < 6; i++) {
        const ParamSlice *s = &B.tab.slices[i];
        for (size_t j = 0; j < s->numel; j++)
            if (dev_uniform(0.5f) + 0.5f < dens[i]) mask_set(mask, s->offset + j);
    }
    float *g = host_random(P, 1.0f), *m = host_random(P, 0.1f), *r = host_random(P, 0.01f), *p = host_random(P, 0.5f);
    round_host(g, P); /* the device reads floatX gradients */
    const float b1 = 0.9f;
    /* CPU: scape_c_bucket then scape_queue_bucket */
    float *c = (float *)malloc(P * 4), *payload = (float *)calloc(P, 4);
    memcpy(c, g, P * 4);
    size_t K[2];
    for (int b = 0; b < 2; b++) {
        K[b] = 0;
        for (int i : B.slices[b]) {
            const ParamSlice *s = &B.tab.slices[i];
            scape_corrected_momentum(c, m, r, s->offset, s->offset + s->numel, b1);
            K[b] += scape_gather_masked(c, mask, s->offset, s->offset + s->numel, payload + B.bucket_off[b] + K[b]);
        }
    }
    /* GPU */
    floatX *d_g = to_device(g, P);
    float *d_m = f32_to_device(m, P), *d_r = f32_to_device(r, P), *d_p = f32_to_device(p, P), *d_c, *d_pay;
    cudaCheck(cudaMalloc(&d_c, P * 4));
    cudaCheck(cudaMalloc(&d_pay, P * 4));
    cudaCheck(cudaMemset(d_pay, 0, P * 4));
    uint32_t *d_mask = mask_to_device(mask, (long long)P);
    int *d_bad;
    cudaCheck(cudaMalloc(&d_bad, 4));
    cudaCheck(cudaMemset(d_bad, 0, 4));
    for (int b = 0; b < 2; b++) {
        scape_payload_offsets(&B.plan[b], d_mask, 0);
        scape_momentum_compact(d_c, d_pay + B.bucket_off[b], d_bad, &B.plan[b], d_g, d_m, d_r, d_mask, b1, 0);
    }
    float *hc = from_device_f32(d_c, P), *hpay = from_device_f32(d_pay, P);
    check_bitwise("momentum_compact_c", hc, c, P);
    int kok = 1;
    for (int b = 0; b < 2; b++) {
        long long gk;
        cudaCheck(cudaMemcpy(&gk, scape_plan_count_ptr(&B.plan[b]), 8, cudaMemcpyDeviceToHost));
        if (gk != (long long)K[b]) {
            printf("FAIL payload_count_bucket%d: K_b %lld on the device, scape_gather_masked gives %zu\n", b, gk, K[b]);
            dev_failures++;
            kok = 0;
        }
        char nm[64];
        snprintf(nm, sizeof nm, "momentum_compact_payload_bucket%d", b);
        check_bitwise(nm, hpay + B.bucket_off[b], payload + B.bucket_off[b], K[b]);
    }
    if (kok) printf("ok payload_count (K_b = %zu and %zu)\n", K[0], K[1]);
    int hbad;
    cudaCheck(cudaMemcpy(&hbad, d_bad, 4, cudaMemcpyDeviceToHost));
    check_true("momentum_compact_finite", hbad == 0, "non-finite flag set on finite inputs");
    /* in place: c written over a copy of r */
    float *d_r2 = f32_to_device(r, P);
    for (int b = 0; b < 2; b++)
        scape_momentum_compact(d_r2, d_pay + B.bucket_off[b], (int *)NULL, &B.plan[b], d_g, d_m, d_r2, d_mask, b1, 0);
    float *hr2 = from_device_f32(d_r2, P);
    check_bitwise("momentum_compact_in_place", hr2, c, P);
    free(hr2);
    cudaCheck(cudaFree(d_r2));
    /* a NaN gradient off the mask must raise the flag */
    {
        const ParamSlice *s = &B.tab.slices[3]; /* density 0: all off the mask */
        float nanv = NAN;
        floatX xn;
#ifdef ENABLE_FP32
        xn = nanv;
#else
        xn = __float2bfloat16_rn(nanv);
#endif
        floatX *d_g2 = to_device(g, P);
        cudaCheck(cudaMemcpy(d_g2 + s->offset + 7, &xn, sizeof xn, cudaMemcpyHostToDevice));
        float *d_c2;
        cudaCheck(cudaMalloc(&d_c2, P * 4));
        cudaCheck(cudaMemset(d_bad, 0, 4));
        scape_momentum_compact(d_c2, d_pay + B.bucket_off[1], d_bad, &B.plan[1], d_g2, d_m, d_r, d_mask, b1, 0);
        cudaCheck(cudaMemcpy(&hbad, d_bad, 4, cudaMemcpyDeviceToHost));
        check_true("momentum_compact_nonfinite_flag", hbad == 1, "a NaN gradient off the mask did not set the flag");
        cudaCheck(cudaFree(d_g2));
        cudaCheck(cudaFree(d_c2));
    }

    /* the averaged payload b: any values will do; make them differ from the local payload */
    float *bavg = (float *)calloc(P, 4);
    for (int b = 0; b < 2; b++)
        for (size_t q = 0; q < K[b]; q++) {
            size_t i = B.bucket_off[b] + q;
            bavg[i] = payload[i] * 0.5f + dev_uniform(0.01f);
        }
    cudaCheck(cudaMemcpy(d_pay, bavg, P * 4, cudaMemcpyHostToDevice));

    /* norm: CPU sums (double) g_hat^2 in index order; the device in its own fixed order */
    const float omb1 = 1.0f - b1;
    double ss_cpu = 0;
    for (int b = 0; b < 2; b++) {
        size_t q = B.bucket_off[b];
        for (int i : B.slices[b]) {
            const ParamSlice *s = &B.tab.slices[i];
            for (size_t j = s->offset; j < s->offset + s->numel; j++)
                if (mask_get(mask, j)) {
                    float gh = (bavg[q++] - b1 * m[j]) / omb1;
                    ss_cpu += (double)gh * (double)gh;
                }
        }
    }
    int np = scape_norm_partials(&B.plan[0]) + scape_norm_partials(&B.plan[1]);
    double *d_part, *d_ss, ss_gpu[2];
    cudaCheck(cudaMalloc(&d_part, np * sizeof(double)));
    cudaCheck(cudaMalloc(&d_ss, sizeof(double)));
    for (int rep = 0; rep < 2; rep++) {
        scape_norm_partial(d_part, &B.plan[0], d_pay + B.bucket_off[0], d_m, d_mask, b1, 0);
        scape_norm_partial(d_part + scape_norm_partials(&B.plan[0]), &B.plan[1], d_pay + B.bucket_off[1], d_m, d_mask, b1, 0);
        scape_norm_finish(d_ss, d_part, np, 0);
        cudaCheck(cudaMemcpy(&ss_gpu[rep], d_ss, 8, cudaMemcpyDeviceToHost));
    }
    double rel = fabs(ss_gpu[0] - ss_cpu) / ss_cpu;
    if (!(rel <= 1e-12)) {
        printf("FAIL ghat_norm: sum of g_hat^2 %.17g on the device, %.17g on the CPU (rel err %.3g > 1e-12)\n", ss_gpu[0],
               ss_cpu, rel);
        dev_failures++;
    } else printf("ok ghat_norm (sum %.17g, rel err %.3g vs the CPU's order)\n", ss_gpu[0], rel);
    check_true("ghat_norm_repeatable", memcmp(&ss_gpu[0], &ss_gpu[1], 8) == 0, "two runs of the norm differ bitwise");

    /* update, unclipped and clipped, from the same state */
    const int t = 3;
    const float lr = 1e-3f, b2 = 0.95f, eps = 1e-8f, wdv = 0.1f;
    const uint64_t seed = 0x1234567890ABCDEFull;
    const float bc1 = (float)(1.0 - pow((double)b1, t));
    const float sqrt_bc2 = (float)sqrt(1.0 - pow((double)b2, t));
    floatX *d_copy;
    cudaCheck(cudaMalloc(&d_copy, P * sizeof(floatX)));
    for (int clipped = 0; clipped < 2; clipped++) {
        const float sc = clipped ? 0.37f : 1.0f;
        float *pc = (float *)malloc(P * 4), *mc = (float *)malloc(P * 4), *rc = (float *)malloc(P * 4);
        memcpy(pc, p, P * 4);
        memcpy(mc, m, P * 4);
        memcpy(rc, r, P * 4);
        for (int b = 0; b < 2; b++) {
            size_t q = B.bucket_off[b];
            for (int i : B.slices[b]) {
                const ParamSlice *s = &B.tab.slices[i];
                const float wd = s->decay ? wdv : 0.0f;
                for (size_t j = s->offset; j < s->offset + s->numel; j++) {
                    if (mask_get(mask, j)) {
                        rc[j] = 0.0f;
                        scape_update_on(&pc[j], &mc[j], bavg[q++], sc, clipped, b1, omb1, b2, eps, bc1, sqrt_bc2, lr, wd);
                    } else {
                        rc[j] = c[j];
                        mc[j] = 0.0f;
                        pc[j] -= lr * (wd * pc[j]);
                    }
                }
            }
        }
        cudaCheck(cudaMemcpy(d_p, p, P * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_m, m, P * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_r, r, P * 4, cudaMemcpyHostToDevice));
        ScapeUpdateArgs a = scape_update_args(t, lr, b1, b2, eps, wdv, clipped, sc, seed);
        for (int b = 0; b < 2; b++)
            scape_update(d_p, d_copy, d_m, d_r, d_c, &B.plan[b], d_pay + B.bucket_off[b], d_mask, &a, 0);
        float *gp = from_device_f32(d_p, P), *gm = from_device_f32(d_m, P), *gr = from_device_f32(d_r, P);
        char nm[64];
        snprintf(nm, sizeof nm, "update_%s_params", clipped ? "clipped" : "unclipped");
        check_bitwise(nm, gp, pc, P);
        snprintf(nm, sizeof nm, "update_%s_m", clipped ? "clipped" : "unclipped");
        check_bitwise(nm, gm, mc, P);
        snprintf(nm, sizeof nm, "update_%s_r", clipped ? "clipped" : "unclipped");
        check_bitwise(nm, gr, rc, P);
        /* conservation (SCAPE.md invariant 2): the local payload on the mask plus r is c, bit for bit */
        if (!clipped) {
            long long bad = -1;
            for (int b = 0; b < 2 && bad < 0; b++) {
                size_t q = B.bucket_off[b];
                for (int i : B.slices[b]) {
                    const ParamSlice *s = &B.tab.slices[i];
                    for (size_t j = s->offset; j < s->offset + s->numel && bad < 0; j++) {
                        /* on the mask the payload holds c and r is 0; off it r holds c */
                        int on = mask_get(mask, j), good = on ? fbits(hpay[q]) == fbits(hc[j]) && fbits(gr[j]) == 0
                                                             : fbits(gr[j]) == fbits(hc[j]);
                        if (!good) {
                            bad = (long long)j;
                            printf("FAIL conservation: element %lld (%s the mask): payload %.9g, r %.9g, c %.9g\n", bad,
                                   on ? "on" : "off", on ? hpay[q] : 0.0f, gr[j], hc[j]);
                            dev_failures++;
                        }
                        q += on;
                    }
                }
            }
            if (bad < 0) printf("ok conservation (scatter(payload) + r == c bitwise, SCAPE.md invariant 2)\n");
            test_bucket_slices(&B, m, r, p, c, payload, pc, mc, rc, d_g, d_mask, d_pay, &a, b1);
        }
        /* the floatX copy */
        floatX *hcopy = (floatX *)malloc(P * sizeof(floatX));
        cudaCheck(cudaMemcpy(hcopy, d_copy, P * sizeof(floatX), cudaMemcpyDeviceToHost));
        long long cb = -1;
        uint32_t exp_bits = 0, got_bits = 0;
        for (int i = 0; i < B.tab.n && cb < 0; i++) {
            const ParamSlice *s = &B.tab.slices[i];
            const uint32_t sseed = sr_seed(seed, t, i);
            for (size_t j = s->offset; j < s->offset + s->numel && cb < 0; j++) {
#ifdef ENABLE_FP32
                exp_bits = fbits(pc[j]);
                got_bits = fbits(hcopy[j]);
#else
                uint32_t u = fbits(pc[j]);
                if ((u & 0x7F800000u) != 0x7F800000u) u = (u + (hash_u32((uint32_t)(j - s->offset), sseed) & 0xFFFFu)) & 0xFFFF0000u;
                exp_bits = u >> 16;
                uint16_t raw;
                memcpy(&raw, &hcopy[j], 2);
                got_bits = raw;
#endif
                if (exp_bits != got_bits) cb = (long long)j;
            }
        }
        snprintf(nm, sizeof nm, "update_%s_copy_%s", clipped ? "clipped" : "unclipped", PRECISION_NAME);
        if (cb >= 0) {
            printf("FAIL %s: element %lld: copy bits 0x%x, expected 0x%x (master %.9g)\n", nm, cb, got_bits, exp_bits, pc[cb]);
            dev_failures++;
        } else printf("ok %s (stochastic rounding as sr_seed/hash_u32 give it)\n", nm);
        free(hcopy);
        free(pc); free(mc); free(rc); free(gp); free(gm); free(gr);
    }
    for (int b = 0; b < 2; b++) scape_plan_free(&B.plan[b]);
    cudaCheck(cudaFree(d_g)); cudaCheck(cudaFree(d_m)); cudaCheck(cudaFree(d_r)); cudaCheck(cudaFree(d_p));
    cudaCheck(cudaFree(d_c)); cudaCheck(cudaFree(d_pay)); cudaCheck(cudaFree(d_mask)); cudaCheck(cudaFree(d_bad));
    cudaCheck(cudaFree(d_part)); cudaCheck(cudaFree(d_ss)); cudaCheck(cudaFree(d_copy));
    free(mask); free(g); free(m); free(r); free(p); free(c); free(payload); free(hc); free(hpay); free(bavg);
    param_table_free(&B.tab);
}

/* ---- timing (no assertions) ---- */

static void timing(ScapeTopkWork *w) {
    int dev = 0, clk = 0, bus = 0;
    cudaCheck(cudaGetDevice(&dev));
    double peak = 0;
    if (cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess && clk > 0 && bus > 0)
        peak = 2.0 * clk * 1e3 * (bus / 8.0) / 1e9;
    (void)cudaGetLastError();
    printf("time device peak memory bandwidth %.0f GB/s (2 x memory clock x bus width; 0 = not reported)\n", peak);

    /* one slice of 64M elements (Llama-1.8B's largest matrices are ~16M-260M), mask density 0.01 */
    const size_t n = 8192ull * 8192ull;
    ParamTable tab;
    memset(&tab, 0, sizeof tab);
    param_table_add(&tab, "w", 0, 0, 1, 1, &n);
    int sl = 0;
    ScapeBucketPlan pl;
    scape_plan_build(&pl, &tab, &sl, 1);
    float *h = host_random(n, 1.0f);
    float *d_c = f32_to_device(h, n), *d_m = f32_to_device(h, n), *d_r = f32_to_device(h, n), *d_p = f32_to_device(h, n);
    floatX *d_g = to_device(h, n), *d_copy;
    cudaCheck(cudaMalloc(&d_copy, n * sizeof(floatX)));
    float *d_pay;
    cudaCheck(cudaMalloc(&d_pay, n * 4));
    uint8_t *mask = random_mask(n, 0.01);
    uint32_t *d_mask = mask_to_device(mask, (long long)n);
    const double K = (double)mask_count(mask, 0, n);
    float ms = time_ms([&] { scape_payload_offsets(&pl, d_mask, 0); }, 10);
    printf("time payload_offsets n=%zu: %.3f ms (%.0f GB/s of mask)\n", n, ms, n / 8.0 / ms / 1e6);
    ms = time_ms([&] { scape_momentum_compact(d_c, d_pay, (int *)NULL, &pl, d_g, d_m, d_r, d_mask, 0.9f, 0); }, 10);
    double bytes = n * (sizeof(floatX) + 12.0 + 1 / 8.0) + K * 4;
    printf("time momentum_compact n=%zu d=0.01: %.3f ms, %.0f GB/s (%.0f%% of peak)\n", n, ms, bytes / ms / 1e6,
           peak > 0 ? 100 * bytes / ms / 1e6 / peak : 0.0);
    int np = scape_norm_partials(&pl);
    double *d_part, *d_ss;
    cudaCheck(cudaMalloc(&d_part, np * 8));
    cudaCheck(cudaMalloc(&d_ss, 8));
    ms = time_ms([&] { scape_norm_partial(d_part, &pl, d_pay, d_m, d_mask, 0.9f, 0); scape_norm_finish(d_ss, d_part, np, 0); }, 10);
    printf("time ghat_norm n=%zu d=0.01: %.3f ms (mask %.0f MB, %.0f MB of payload and m)\n", n, ms, n / 8e6, K * 8 / 1e6);
    ScapeUpdateArgs a = scape_update_args(5, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0, 1.0f, 1);
    ms = time_ms([&] { scape_update(d_p, d_copy, d_m, d_r, d_c, &pl, d_pay, d_mask, &a, 0); }, 10);
    bytes = n * (4 * 2 + 4 + 4 + 4 + 4 + sizeof(floatX) + 1 / 8.0); /* p r/w, m r/w(approx), r w, c r, copy w */
    printf("time update n=%zu d=0.01: %.3f ms, %.0f GB/s (%.0f%% of peak)\n", n, ms, bytes / ms / 1e6,
           peak > 0 ? 100 * bytes / ms / 1e6 / peak : 0.0);
    /* top-k at the paper's densities, on 32M elements */
    const long long nt = 32ll << 20;
    const double dd[2] = {0.01, 0.1};
    for (int i = 0; i < 2; i++) {
        long long k = (long long)scape_k(dd[i], (size_t)nt);
        ms = time_ms([&] {
            cudaCheck(cudaMemsetAsync(d_mask, 0, scape_mask_words(nt) * 4, 0));
            scape_topk_mask_gpu(d_mask, 0, d_c, nt, k, w, 0);
        }, 5);
        /* 3 histogram passes and the marking pass read c; the tie count reads it only when the threshold value has
         * ties that are not all taken, which random data does not have */
        bytes = nt * 4.0 * 4;
        printf("time topk n=%lld k=%lld: %.3f ms, %.1f Gelem/s, %.0f GB/s counting 4 reads of c (%.0f%% of peak)\n", nt, k,
               ms, nt / ms / 1e6, bytes / ms / 1e6, peak > 0 ? 100 * bytes / ms / 1e6 / peak : 0.0);
    }
    /* worst case: values of 1/8 steps, so the threshold value has ~10^5 ties that are not all taken (tie count
     * pass and block scans in the marking pass) */
    {
        for (long long i = 0; i < nt; i++) h[i] = roundf(dev_uniform(4.0f) * 8.0f) / 8.0f;
        cudaCheck(cudaMemcpy(d_c, h, nt * 4, cudaMemcpyHostToDevice));
        long long k = (long long)scape_k(0.37, (size_t)nt);
        ms = time_ms([&] {
            cudaCheck(cudaMemsetAsync(d_mask, 0, scape_mask_words(nt) * 4, 0));
            scape_topk_mask_gpu(d_mask, 0, d_c, nt, k, w, 0);
        }, 5);
        printf("time topk_ties n=%lld k=%lld (65 distinct values): %.3f ms, %.0f GB/s counting 5 reads of c\n", nt, k, ms,
               nt * 4.0 * 5 / ms / 1e6);
    }
    /* pack n bytes, count n bits */
    uint8_t *d_flags;
    cudaCheck(cudaMalloc(&d_flags, n));
    cudaCheck(cudaMemset(d_flags, 1, n));
    ms = time_ms([&] { scape_mask_pack(d_mask, 3, d_flags, (long long)n - 3, 0); }, 10);
    printf("time mask_pack n=%zu: %.3f ms, %.0f GB/s\n", n, ms, n * 1.125 / ms / 1e6);
    unsigned long long *d_cnt;
    cudaCheck(cudaMalloc(&d_cnt, 8));
    ms = time_ms([&] { scape_mask_count(d_cnt, d_mask, 5, (long long)n, 0); }, 10);
    printf("time mask_count n=%zu: %.3f ms, %.0f GB/s\n", n, ms, n / 8.0 / ms / 1e6);
    scape_plan_free(&pl);
    cudaCheck(cudaFree(d_c)); cudaCheck(cudaFree(d_m)); cudaCheck(cudaFree(d_r)); cudaCheck(cudaFree(d_p));
    cudaCheck(cudaFree(d_g)); cudaCheck(cudaFree(d_copy)); cudaCheck(cudaFree(d_pay)); cudaCheck(cudaFree(d_mask));
    cudaCheck(cudaFree(d_part)); cudaCheck(cudaFree(d_ss)); cudaCheck(cudaFree(d_flags)); cudaCheck(cudaFree(d_cnt));
    free(h); free(mask);
    param_table_free(&tab);
}

int main(void) {
    cuda_require_device("scape");
    test_masks();
    ScapeTopkWork w;
    scape_topk_work_create(&w, 64ll << 20);
    test_topk(&w);
    test_bucket();
    test_mask_stats();
#if !defined(CUDA_EMU)
    timing(&w);
#endif
    scape_topk_work_free(&w);
    printf("%s\n", dev_failures ? "scape: FAILURES" : "scape: all checks passed");
    return dev_failures ? 1 : 0;
}
