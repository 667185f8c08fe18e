/*
 * test/test_gguf_writer.c - writes OUT.gguf with export/gguf.c: metadata of every value type the exporter uses and
 * four tensors of the same N source values (F32; F16; BF16; F32 with its rows reversed through `rows`), and the
 * source values as raw float32 in OUT.f32, for test/test_gguf_writer.py to read back with node-llama-cpp's GGUF
 * parser and check bit for bit against numpy's float16 and an integer bf16 rounding. The values: every class of
 * float that F16/BF16 rounding treats differently (zeros, subnormals of both formats, ties at the rounding bit,
 * the overflow threshold 65520, infinities) then seeded random floats over many magnitudes.
 *   test_gguf_writer OUT.gguf OUT.f32
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "common/util.h"
#include "export/gguf.h"

#define ROWS 64
#define COLS 64

static float from_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_gguf_writer OUT.gguf OUT.f32\n");
        return 2;
    }
    const size_t N = ROWS * COLS;
    float *x = xmalloc(N * sizeof(float), "values");
    const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, -70000.0f, INFINITY,
                             -INFINITY, 6.0e-8f, 5.96046448e-8f, 2.98023224e-8f, 2.98023252e-8f, 6.1035156e-5f,
                             6.1e-5f, 1e-40f, -1e-45f, 3.4e38f, 1.00048828125f, 1.00146484375f, 1.0009765625f,
                             from_bits(0x3F808000u), from_bits(0x3F818000u), from_bits(0x3F808001u),
                             from_bits(0x7F7FFFFFu), from_bits(0x33000000u), from_bits(0x33000001u)};
    size_t ns = sizeof special / sizeof special[0];
    memcpy(x, special, sizeof special);
    Rng r;
    rng_seed(&r, 20261202);
    for (size_t i = ns; i < N; i++) {
        float mant = rng_uniform(&r) * 2.0f - 1.0f;
        int e = (int)(rng_uniform(&r) * 60.0f) - 40; /* 2^-40 .. 2^20: subnormal, normal and overflowing halves */
        x[i] = ldexpf(mant, e);
    }
    uint32_t rev[ROWS];
    for (int i = 0; i < ROWS; i++) rev[i] = (uint32_t)(ROWS - 1 - i);

    GgufWriter *w = gguf_writer_new();
    gguf_kv_string(w, "general.architecture", "test");
    gguf_kv_string(w, "test.utf8", "caf\xc3\xa9 \xe2\x96\x81x");
    gguf_kv_u32(w, "test.u32", 4000000000u);
    gguf_kv_i32(w, "test.i32", -123456);
    gguf_kv_f32(w, "test.f32", 0.1f);
    gguf_kv_bool(w, "test.true", 1);
    gguf_kv_bool(w, "test.false", 0);
    const char *strs[] = {"a", "b c", "", "\xe2\x96\x81\xe2\x96\x81" "dXYZ"};
    size_t lens[] = {1, 3, 0, 7}; /* the last one cut after "d": lengths, not NULs, delimit */
    gguf_kv_strings(w, "test.strings", strs, lens, 4);
    const int32_t ints[] = {1, -2, 3, 2147483647};
    gguf_kv_i32s(w, "test.i32s", ints, 4);
    const float fl[] = {0.5f, -1.5f, 1e-30f};
    gguf_kv_f32s(w, "test.f32s", fl, 3);
    uint64_t ne[2] = {COLS, ROWS}, ne1[1] = {7};
    gguf_add_tensor(w, "t.f32", 2, ne, GGUF_F32, x, NULL);
    gguf_add_tensor(w, "t.vec", 1, ne1, GGUF_F32, x + 1, NULL); /* 28 bytes: the next tensor must be re-aligned */
    gguf_add_tensor(w, "t.f16", 2, ne, GGUF_F16, x, NULL);
    gguf_add_tensor(w, "t.bf16", 2, ne, GGUF_BF16, x, NULL);
    gguf_add_tensor(w, "t.rev", 2, ne, GGUF_F32, x, rev);
    gguf_write(w, argv[1]);
    gguf_writer_free(w);
    FILE *f = xfopen(argv[2], "wb", "check the path");
    xfwrite(x, N * sizeof(float), f, argv[2], "values");
    fclose(f);
    free(x);
    return 0;
}
