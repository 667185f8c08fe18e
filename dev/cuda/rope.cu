/*
 * dev/cuda/rope.cu - checks cuda/rope.cuh against a float64 CPU reference of train_llama.c's rotate-half RoPE:
 * forward on q (NH heads) and k (NKV heads) at positions 0..T-1 of every row, backward (the transposed rotation)
 * against the float64 transpose, backward(forward(x)) = x, and a T shorter than the table; then times both.
 * The device table is built as train_llama.c's rope_table does (angle t * theta^(-2j/hd) in double, rounded once
 * to float); the reference rotates by the exact double angles, so the check also bounds the table's rounding.
 * Tolerances: dev_common.cuh's TOL_REL / TOL_ABS (fp32 1e-4 / 1e-5; bf16 2e-2 / 2e-3).
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/rope.cuh"

/* x (N, nh*hd) rotated by sign * angle(t = n % T, j), in double; out may not alias x */
static void ref_rope(float *out, const float *x, int N, int T, int nh, int hd, double theta, double sign) {
    int half = hd / 2;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < nh; h++)
            for (int j = 0; j < half; j++) {
                double ang = (double)(n % T) * pow(theta, -2.0 * j / hd), c = cos(ang), s = sign * sin(ang);
                const float *v = x + ((size_t)n * nh + h) * hd;
                float *o = out + ((size_t)n * nh + h) * hd;
                o[j] = (float)(v[j] * c - v[j + half] * s);
                o[j + half] = (float)(v[j + half] * c + v[j] * s);
            }
}

static void run_case(const char *tag, int B, int T, int maxT, int nh, int hd, double theta, int timed) {
    int half = hd / 2, N = B * T;
    size_t n = (size_t)N * nh * hd, nt = (size_t)maxT * half;
    char name[128];
    float *cos_tab = (float *)malloc(nt * 4), *sin_tab = (float *)malloc(nt * 4);
    for (int t = 0; t < maxT; t++)
        for (int j = 0; j < half; j++) { /* train_llama.c rope_table */
            double angle = (double)t * pow(theta, -2.0 * j / hd);
            cos_tab[(size_t)t * half + j] = (float)cos(angle);
            sin_tab[(size_t)t * half + j] = (float)sin(angle);
        }
    float *d_cos, *d_sin;
    cudaCheck(cudaMalloc(&d_cos, nt * 4));
    cudaCheck(cudaMalloc(&d_sin, nt * 4));
    cudaCheck(cudaMemcpy(d_cos, cos_tab, nt * 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_sin, sin_tab, nt * 4, cudaMemcpyHostToDevice));
    float *x = host_random(n, 2.0f), *dy = host_random(n, 1.0f);
    round_host(x, n); round_host(dy, n);
    float *rx = (float *)malloc(n * 4), *rdx = (float *)malloc(n * 4);
    ref_rope(rx, x, N, T, nh, hd, theta, 1.0);
    ref_rope(rdx, dy, N, T, nh, hd, theta, -1.0);

    floatX *d_x = to_device(x, n), *d_dy = to_device(dy, n);
    rope_forward(d_x, d_cos, d_sin, B, T, nh, hd, 0);
    float *gx = from_device(d_x, n);
    snprintf(name, sizeof name, "rope_forward_%s", tag);
    check_close(name, gx, rx, n, TOL_REL, TOL_ABS);
    rope_backward(d_dy, d_cos, d_sin, B, T, nh, hd, 0);
    float *gdx = from_device(d_dy, n);
    snprintf(name, sizeof name, "rope_backward_%s", tag);
    check_close(name, gdx, rdx, n, TOL_REL, TOL_ABS);
    /* the inverse rotation restores x (up to two roundings of floatX) */
    rope_backward(d_x, d_cos, d_sin, B, T, nh, hd, 0);
    float *gx2 = from_device(d_x, n);
    snprintf(name, sizeof name, "rope_backward_inverts_forward_%s", tag);
    /* bf16: two roundings of values up to 2 sqrt 2, each mixing a pair: up to 2^-6 absolute (0.0156 in a host emulation) */
    check_close(name, gx2, x, n, 2 * TOL_REL, 20 * TOL_ABS);
    /* position 0 is the identity: the first row of every sequence is untouched (cos 0 = 1, sin 0 = 0 exactly) */
    int same = 1;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < nh * hd; i++) {
            size_t k = (size_t)b * T * nh * hd + i;
            if (gx[k] != x[k]) same = 0;
        }
    snprintf(name, sizeof name, "rope_position0_identity_%s", tag);
    check_true(name, same, "a row at position 0 changed under the rotation");

    if (timed) {
        float ms = time_ms([&] { rope_forward(d_x, d_cos, d_sin, B, T, nh, hd, 0); }, 20);
        printf("time rope B=%d T=%d nh=%d hd=%d: %.3f ms (%.0f GB/s)\n", B, T, nh, hd, ms,
               2.0 * n * sizeof(floatX) / ms / 1e6);
    }
    cudaCheck(cudaFree(d_cos)); cudaCheck(cudaFree(d_sin)); cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_dy));
    free(cos_tab); free(sin_tab); free(x); free(dy); free(rx); free(rdx); free(gx); free(gdx); free(gx2);
}

int main(void) {
    cuda_require_device("rope");
    printf("  precision " PRECISION_NAME "\n");
    run_case("q_NH8_hd64", 2, 64, 128, 8, 64, 1e4, 0);       /* queries, T shorter than the table */
    run_case("k_NKV2_hd64", 2, 64, 128, 2, 64, 1e4, 0);      /* keys of the same model */
    run_case("hd16_theta1e5", 3, 33, 33, 4, 16, 1e5, 0);     /* odd T = maxT, Llama-500M's theta */
#ifdef CUDA_EMU /* the CPU emulator (make test-emu): T = 128 */
    run_case("500m_q", 1, 128, 2048, 16, 96, 1e5, 1);        /* Llama-500M queries, T = 128 of the 2048 table */
#else
    run_case("500m_q", 4, 2048, 2048, 16, 96, 1e5, 1);       /* Llama-500M queries at T = 2048, timed */
#endif
    return dev_failures ? 1 : 0;
}
