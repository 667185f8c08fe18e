/*
 * dev/cuda/encoder.cu - checks cuda/encoder.cuh against a CPU reference (float64 sums): forward, the backward's
 * dwte/dwpe with many repeated tokens, and that two backward runs are bitwise equal; then times both.
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/encoder.cuh"

int main(void) {
    cuda_require_device("encoder");
#ifdef CUDA_EMU /* the CPU emulator (make test-emu): B*T = 256 */
    const int B = 4, T = 64, C = 768, Vp = 50304, maxT = 1024, N = B * T;
#else
    const int B = 8, T = 1024, C = 768, Vp = 50304, maxT = 1024, N = B * T;
#endif
    float *wte = host_random((size_t)Vp * C, 0.1f), *wpe = host_random((size_t)maxT * C, 0.1f);
    float *dout = host_random((size_t)N * C, 1.0f);
    round_host(wte, (size_t)Vp * C); round_host(wpe, (size_t)maxT * C); round_host(dout, (size_t)N * C);
    int *inp = (int *)malloc(N * sizeof(int));
    /* a small token range so most tokens repeat many times (the case atomics would make non-deterministic) */
    for (int n = 0; n < N; n++) inp[n] = (int)((dev_uniform(1.0f) + 1.0f) * 0.5f * 300) % 300 + (n % 7 == 0 ? 50000 : 0);

    floatX *d_wte = to_device(wte, (size_t)Vp * C), *d_wpe = to_device(wpe, (size_t)maxT * C);
    floatX *d_out, *d_dout = to_device(dout, (size_t)N * C);
    int *d_inp;
    cudaCheck(cudaMalloc(&d_out, (size_t)N * C * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_inp, N * sizeof(int)));
    cudaCheck(cudaMemcpy(d_inp, inp, N * sizeof(int), cudaMemcpyHostToDevice));

    encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C, 0);
    float *out = from_device(d_out, (size_t)N * C), *ref = (float *)malloc((size_t)N * C * sizeof(float));
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) ref[(size_t)n * C + c] = wte[(size_t)inp[n] * C + c] + wpe[(size_t)(n % T) * C + c];
    check_close("encoder_forward", out, ref, (size_t)N * C, TOL_REL, TOL_ABS);

    /* backward from zeroed gradients, reference in float64 */
    EncoderPlan p;
    p.order = (int *)malloc(N * sizeof(int)); p.seg_start = (int *)malloc((N + 1) * sizeof(int));
    p.seg_tok = (int *)malloc(N * sizeof(int));
    int *count = (int *)malloc(Vp * sizeof(int));
    encoder_backward_plan(&p, inp, N, Vp, count);
    int ok = 1;
    for (int k = 0; k < p.nseg; k++)
        for (int j = p.seg_start[k]; j < p.seg_start[k + 1]; j++) {
            if (inp[p.order[j]] != p.seg_tok[k]) ok = 0;
            if (j > p.seg_start[k] && p.order[j] <= p.order[j - 1]) ok = 0;
        }
    check_true("encoder_backward_plan", ok && p.seg_start[p.nseg] == N, "plan groups rows by token in row order");
    int *d_order, *d_ss, *d_st;
    cudaCheck(cudaMalloc(&d_order, N * sizeof(int))); cudaCheck(cudaMalloc(&d_ss, (N + 1) * sizeof(int)));
    cudaCheck(cudaMalloc(&d_st, N * sizeof(int)));
    cudaCheck(cudaMemcpy(d_order, p.order, N * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_ss, p.seg_start, (N + 1) * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_st, p.seg_tok, N * sizeof(int), cudaMemcpyHostToDevice));
    floatX *d_dwte, *d_dwpe;
    cudaCheck(cudaMalloc(&d_dwte, (size_t)Vp * C * sizeof(floatX))); cudaCheck(cudaMalloc(&d_dwpe, (size_t)maxT * C * sizeof(floatX)));
    float *dwte_ref[2];
    for (int run = 0; run < 2; run++) {
        cudaCheck(cudaMemset(d_dwte, 0, (size_t)Vp * C * sizeof(floatX)));
        cudaCheck(cudaMemset(d_dwpe, 0, (size_t)maxT * C * sizeof(floatX)));
        encoder_backward(d_dwte, d_dwpe, d_dout, d_order, d_ss, d_st, p.nseg, B, T, C, 0);
        dwte_ref[run] = from_device(d_dwte, (size_t)Vp * C);
    }
    check_same("encoder_backward_deterministic", dwte_ref[0], dwte_ref[1], (size_t)Vp * C);
    double *acc = (double *)calloc((size_t)Vp * C, sizeof(double)), *accp = (double *)calloc((size_t)maxT * C, sizeof(double));
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            acc[(size_t)inp[n] * C + c] += dout[(size_t)n * C + c];
            accp[(size_t)(n % T) * C + c] += dout[(size_t)n * C + c];
        }
    float *r1 = (float *)malloc((size_t)Vp * C * sizeof(float)), *r2 = (float *)malloc((size_t)maxT * C * sizeof(float));
    for (size_t i = 0; i < (size_t)Vp * C; i++) r1[i] = (float)acc[i];
    for (size_t i = 0; i < (size_t)maxT * C; i++) r2[i] = (float)accp[i];
    /* sums of up to ~40 terms of size 1: absolute tolerance scaled by sqrt(terms) */
    check_close("encoder_backward_dwte", dwte_ref[0], r1, (size_t)Vp * C, TOL_REL, TOL_ABS * 20);
    float *dwpe = from_device(d_dwpe, (size_t)maxT * C);
    check_close("encoder_backward_dwpe", dwpe, r2, (size_t)maxT * C, TOL_REL, TOL_ABS * 5);

    float fms = time_ms([&] { encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C, 0); }, 20);
    float bms = time_ms([&] { encoder_backward(d_dwte, d_dwpe, d_dout, d_order, d_ss, d_st, p.nseg, B, T, C, 0); }, 20);
    printf("time encoder B=%d T=%d C=%d: forward %.3f ms (%.0f GB/s), backward %.3f ms\n", B, T, C, fms,
           3.0 * N * C * sizeof(floatX) / fms / 1e6, bms);
    return dev_failures ? 1 : 0;
}
