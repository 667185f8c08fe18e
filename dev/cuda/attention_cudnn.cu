/*
 * dev/cuda/attention_cudnn.cu - checks cuDNN's fused causal attention (cuda/attention_cudnn.cuh) on the same bf16
 * inputs against the float64 CPU reference (dev/cuda/attention_ref.cuh) and against the cuBLAS path
 * (cuda/attention.cuh): forward output, the saved statistics (row log-sum-exp), the backward's dqkv (pre-filled
 * with NaN, so an element the backward does not write fails), bitwise repeatability of the backward when its
 * deterministic graph is in use; at two shapes (the second plan comes through the
 * cache); then the whole-model Attention object: it chose cuDNN, its layer forward/backward, a sampling forward at
 * a shape without a plan (cuBLAS), and the fallback (a layer's forward on cuDNN, a simulated cuDNN failure, its
 * backward recomputed on cuBLAS). Times cuDNN against cuBLAS at GPT-2 124M's attention (B=8, T=1024, C=768, NH=12).
 * A test that cannot run its check must not pass: no cuDNN in the build, no GPU, or a cuDNN that cannot build or
 * run the graphs is a FAIL, with the reason, and a non-zero exit.
 * Tolerances (bf16 build, TOL_* of dev_common.cuh): out rtol 2e-2 atol 1e-2 and dqkv rtol 4e-2 atol 2e-2, as
 * dev/cuda/attention.cu allows the cuBLAS path (bf16 inputs, one output rounding; dqkv through bf16 P and dS);
 * stats are fp32 from fp32 scores: rtol 1e-3 atol 1e-3. cuDNN against cuBLAS: twice the reference tolerances
 * (each is within its tolerance of the reference).
 * Built by cuda/mk/cudnn.mk (always with -DENABLE_CUDNN, bf16); run by make test-gpu and scripts/gpu_check.sh.
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/attention.cuh"
#include "dev/cuda/attention_ref.cuh"

#ifndef ATTENTION_CUDNN
int main(void) {
    printf("FAIL attention_cudnn: this build has no cuDNN attention (it needs -DENABLE_CUDNN and bf16; "
           "cuda/mk/cudnn.mk builds it so)\n");
    return 1;
}
#else

static floatX *dev_nan(size_t n) { /* bf16 0xFFFF is a NaN */
    floatX *d;
    cudaCheck(cudaMalloc(&d, n * sizeof(floatX)));
    cudaCheck(cudaMemset(d, 0xFF, n * sizeof(floatX)));
    return d;
}

/* cuDNN forward + backward at one shape against the reference and the cuBLAS kernels */
static void check_shape(Blas *bl, CudnnAttn *ca, int B, int T, int C, int NH) {
    char name[96], tag[48], why[CDNN_WHY];
    snprintf(tag, sizeof tag, "B%d_T%d_C%d_NH%d", B, T, C, NH);
    size_t n3 = (size_t)B * T * 3 * C, n = (size_t)B * T * C, rows = (size_t)B * NH * T;
    float *qkv = host_random(n3, 1.0f), *dout = host_random(n, 1.0f);
    round_host(qkv, n3);
    round_host(dout, n);
    float *rout = (float *)malloc(n * 4), *rdqkv = (float *)malloc(n3 * 4), *rlse = (float *)malloc(rows * 4);
    attention_reference(qkv, dout, B, T, C, NH, rout, NULL, rdqkv, rlse);

    floatX *d_qkv = to_device(qkv, n3), *d_dout = to_device(dout, n), *d_out = dev_nan(n), *d_dqkv = dev_nan(n3);
    float *d_stats;
    cudaCheck(cudaMalloc(&d_stats, rows * sizeof(float)));
    snprintf(name, sizeof name, "attention_cudnn_forward_%s", tag);
    if (!cudnn_attention_forward(ca, d_out, d_stats, d_qkv, B, T, 0, why)) {
        check_true(name, 0, why);
        return;
    }
    float *out = from_device(d_out, n), *stats = from_device_f32(d_stats, rows);
    snprintf(name, sizeof name, "attention_cudnn_forward_out_%s", tag);
    check_close(name, out, rout, n, TOL_REL, TOL_ABS * 5);
    snprintf(name, sizeof name, "attention_cudnn_forward_stats_%s", tag);
    check_close(name, stats, rlse, rows, 1e-3, 1e-3);
    snprintf(name, sizeof name, "attention_cudnn_backward_%s", tag);
    if (!cudnn_attention_backward(ca, d_dqkv, d_dout, d_out, d_stats, d_qkv, B, T, 0, why)) {
        check_true(name, 0, why);
        return;
    }
    float *dqkv = from_device(d_dqkv, n3);
    snprintf(name, sizeof name, "attention_cudnn_backward_dqkv_%s", tag);
    check_close(name, dqkv, rdqkv, n3, TOL_REL * 2, TOL_ABS * 10);
    /* repeatability: bitwise when the deterministic backward graph is in use (else said, not claimed) */
    cudaCheck(cudaMemset(d_dqkv, 0xFF, n3 * sizeof(floatX)));
    snprintf(name, sizeof name, "attention_cudnn_backward_again_%s", tag);
    if (!cudnn_attention_backward(ca, d_dqkv, d_dout, d_out, d_stats, d_qkv, B, T, 0, why)) {
        check_true(name, 0, why);
        return;
    }
    float *dqkv_again = from_device(d_dqkv, n3);
    snprintf(name, sizeof name, "attention_cudnn_backward_bitwise_repeatable_%s", tag);
    if (cudnn_attention_deterministic(ca, B, T)) check_same(name, dqkv_again, dqkv, n3);
    else printf("  %s: not checked, the deterministic backward graph was refused: %s\n", name, ca->bwd_note);
    free(dqkv_again);

    /* the cuBLAS path on the same inputs */
    floatX *c_out = dev_nan(n), *c_dqkv = dev_nan(n3), *c_att, *c_scr;
    cudaCheck(cudaMalloc(&c_att, rows * T * sizeof(floatX)));
    cudaCheck(cudaMalloc(&c_scr, attention_backward_scratch_elems(B, T, C, NH) * sizeof(floatX)));
    attention_forward(bl, c_out, c_att, c_scr, d_qkv, B, T, C, NH, 0);
    attention_backward(bl, c_dqkv, c_scr, d_dout, c_att, d_qkv, B, T, C, NH, 0);
    float *cout_ = from_device(c_out, n), *cdqkv = from_device(c_dqkv, n3);
    snprintf(name, sizeof name, "attention_cudnn_vs_cublas_out_%s", tag);
    check_close(name, out, cout_, n, TOL_REL * 2, TOL_ABS * 10);
    snprintf(name, sizeof name, "attention_cudnn_vs_cublas_dqkv_%s", tag);
    check_close(name, dqkv, cdqkv, n3, TOL_REL * 4, TOL_ABS * 20);

    void *dev[] = {d_qkv, d_dout, d_out, d_dqkv, d_stats, c_out, c_dqkv, c_att, c_scr};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaCheck(cudaFree(dev[i]));
    void *host[] = {qkv, dout, rout, rdqkv, rlse, out, stats, dqkv, cout_, cdqkv};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

/* the model-level object: path choice, layer calls, sampling at a shape without a plan, fallback mid-step */
static void check_layers(Blas *bl, int B, int T, int C, int NH) {
    const int L = 2;
    size_t n3 = (size_t)B * T * 3 * C, n = (size_t)B * T * C;
    float *qkv = host_random(n3, 1.0f), *dout = host_random(n, 1.0f);
    round_host(qkv, n3);
    round_host(dout, n);
    float *rout = (float *)malloc(n * 4), *rdqkv = (float *)malloc(n3 * 4);
    attention_reference(qkv, dout, B, T, C, NH, rout, NULL, rdqkv, NULL);
    floatX *d_qkv = to_device(qkv, n3), *d_dout = to_device(dout, n), *d_out = dev_nan(n), *d_dqkv = dev_nan(n3);

    Attention at;
    attention_init(&at, bl, L, B, T, C, NH);
    if (!check_true("attention_layers_chose_cudnn", at.cudnn == 1, at.desc)) return;
    check_true("attention_layers_no_probabilities_allocated", at.att == NULL,
               "the cuDNN path allocated the (L,B,NH,T,T) probabilities");
    /* layer 0 on cuDNN */
    attention_layer_forward(&at, 0, d_out, d_qkv, B, T, 1, 0);
    float *out = from_device(d_out, n);
    check_close("attention_layers_cudnn_forward_out", out, rout, n, TOL_REL, TOL_ABS * 5);
    attention_layer_backward(&at, 0, d_dqkv, d_dout, d_out, d_qkv, B, T, 0);
    float *dqkv = from_device(d_dqkv, n3);
    check_close("attention_layers_cudnn_backward_dqkv", dqkv, rdqkv, n3, TOL_REL * 2, TOL_ABS * 10);
    check_true("attention_layers_still_cudnn", at.cudnn == 1, "the cuDNN path fell back to cuBLAS");

    /* sampling: B=1 and a length without a plan, no backward: cuBLAS with one layer's buffers */
    {
        int ST = T / 2 + 3;
        float *sq = host_random((size_t)ST * 3 * C, 1.0f), *sr = (float *)malloc((size_t)ST * C * 4);
        round_host(sq, (size_t)ST * 3 * C);
        attention_reference(sq, NULL, 1, ST, C, NH, sr, NULL, NULL, NULL);
        floatX *d_sq = to_device(sq, (size_t)ST * 3 * C), *d_so = dev_nan((size_t)ST * C);
        attention_layer_forward(&at, 1, d_so, d_sq, 1, ST, 0, 0);
        float *so = from_device(d_so, (size_t)ST * C);
        check_close("attention_layers_sampling_shape_out", so, sr, (size_t)ST * C, TOL_REL, TOL_ABS * 5);
        check_true("attention_layers_sampling_kept_cudnn", at.cudnn == 1, "a sampling forward disabled cuDNN");
        cudaCheck(cudaFree(d_sq));
        cudaCheck(cudaFree(d_so));
        free(sq); free(sr); free(so);
    }

    /* fallback: layer 1's forward on cuDNN, then cuDNN fails; its backward recomputes the probabilities on
     * cuBLAS, and later layers run on cuBLAS */
    cudaCheck(cudaMemset(d_out, 0xFF, n * sizeof(floatX)));
    attention_layer_forward(&at, 1, d_out, d_qkv, B, T, 1, 0);
    attention_cudnn_failed(&at, "test: a simulated cuDNN failure (this warning is expected)");
    check_true("attention_layers_fell_back", at.cudnn == 0 && at.att != NULL,
               "after a failure the cuBLAS path is not active or has no buffers");
    cudaCheck(cudaMemset(d_dqkv, 0xFF, n3 * sizeof(floatX)));
    attention_layer_backward(&at, 1, d_dqkv, d_dout, d_out, d_qkv, B, T, 0);
    float *dqkv2 = from_device(d_dqkv, n3);
    check_close("attention_layers_fallback_recomputed_backward_dqkv", dqkv2, rdqkv, n3, TOL_REL * 2, TOL_ABS * 10);
    cudaCheck(cudaMemset(d_out, 0xFF, n * sizeof(floatX)));
    cudaCheck(cudaMemset(d_dqkv, 0xFF, n3 * sizeof(floatX)));
    attention_layer_forward(&at, 0, d_out, d_qkv, B, T, 1, 0);
    attention_layer_backward(&at, 0, d_dqkv, d_dout, d_out, d_qkv, B, T, 0);
    float *out3 = from_device(d_out, n), *dqkv3 = from_device(d_dqkv, n3);
    check_close("attention_layers_after_fallback_forward_out", out3, rout, n, TOL_REL, TOL_ABS * 5);
    check_close("attention_layers_after_fallback_backward_dqkv", dqkv3, rdqkv, n3, TOL_REL * 2, TOL_ABS * 10);

    attention_free(&at);
    void *dev[] = {d_qkv, d_dout, d_out, d_dqkv};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaCheck(cudaFree(dev[i]));
    void *host[] = {qkv, dout, rout, rdqkv, out, dqkv, dqkv2, out3, dqkv3};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

int main(void) {
    cuda_require_device("attention_cudnn");
    Blas bl;
    blas_init(&bl);
    const int B = 2, T = 128, C = 256, NH = 4;
    CudnnAttn ca;
    char why[CDNN_WHY];
    if (!cudnn_attention_init(&ca, B, T, NH, C / NH, why)) {
        printf("FAIL attention_cudnn_init: %s\n", why);
        return 1;
    }
    printf("ok attention_cudnn_init (cuDNN %zu; forward and backward plans for B=%d T=%d NH=%d hs=%d)\n",
           cudnnGetVersion(), B, T, NH, C / NH);
    check_shape(&bl, &ca, B, T, C, NH);
    check_shape(&bl, &ca, 1, 256, C, NH); /* a second shape: its plans are built on first use */
    check_true("attention_cudnn_plan_cache", ca.nplans == 4, "expected 4 cached plans (2 shapes x fwd/bwd)");
    cudnn_attention_free(&ca);
    check_layers(&bl, B, T, C, NH);

    /* timing at GPT-2 124M's attention, cuDNN against cuBLAS */
    const int TB = 8, TT = 1024, TC = 768, TNH = 12;
    size_t n3 = (size_t)TB * TT * 3 * TC, n = (size_t)TB * TT * TC;
    CudnnAttn tc;
    if (!cudnn_attention_init(&tc, TB, TT, TNH, TC / TNH, why)) {
        printf("FAIL attention_cudnn_init_B%d_T%d: %s\n", TB, TT, why);
        return 1;
    }
    floatX *t_qkv, *t_out, *t_dqkv, *t_att, *t_scr;
    float *t_stats;
    cudaCheck(cudaMalloc(&t_qkv, n3 * sizeof(floatX)));
    cudaCheck(cudaMemset(t_qkv, 0, n3 * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_out, n * sizeof(floatX)));
    cudaCheck(cudaMemset(t_out, 0, n * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_dqkv, n3 * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_stats, (size_t)TB * TNH * TT * sizeof(float)));
    cudaCheck(cudaMalloc(&t_att, (size_t)TB * TNH * TT * TT * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_scr, attention_backward_scratch_elems(TB, TT, TC, TNH) * sizeof(floatX)));
    int ok = 1;
    float fd = time_ms([&] { ok &= cudnn_attention_forward(&tc, t_out, t_stats, t_qkv, TB, TT, 0, why); }, 10);
    float bd = time_ms([&] { ok &= cudnn_attention_backward(&tc, t_dqkv, t_out, t_out, t_stats, t_qkv, TB, TT, 0, why); }, 10);
    if (!check_true("attention_cudnn_timed_runs", ok, why)) return 1;
    float fc = time_ms([&] { attention_forward(&bl, t_out, t_att, t_scr, t_qkv, TB, TT, TC, TNH, 0); }, 10);
    float bc = time_ms([&] { attention_backward(&bl, t_dqkv, t_scr, t_out, t_att, t_qkv, TB, TT, TC, TNH, 0); }, 10);
    printf("time attention_cudnn B=%d T=%d C=%d NH=%d: forward %.3f ms, backward %.3f ms; cuBLAS path: forward "
           "%.3f ms, backward %.3f ms; saved per layer: stats %.1f MiB vs probabilities %.1f MiB\n", TB, TT, TC, TNH,
           fd, bd, fc, bc, (double)TB * TNH * TT * 4 / 1048576.0, (double)TB * TNH * TT * TT * 2 / 1048576.0);
    cudnn_attention_free(&tc);
    blas_free(&bl);
    return dev_failures ? 1 : 0;
}
#endif
