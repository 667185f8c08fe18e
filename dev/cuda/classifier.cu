/*
 * dev/cuda/classifier.cu - checks cuda/classifier.cuh against a float64 CPU softmax/cross-entropy: per-row losses,
 * the in-place gradient (including 0 in the padded columns), loss-only mode leaving logits untouched; then times
 * it at B*T = 8192 rows of GPT-2's vocabulary.
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/classifier.cuh"

int main(void) {
    cuda_require_device("classifier");
    const int N = 256, V = 50257, Vp = 50304;
    const size_t nl = (size_t)N * Vp;
    float *logits = host_random(nl, 8.0f);
    for (size_t i = 0; i < nl; i++) if ((int)(i % Vp) >= V) logits[i] = 1e4f; /* garbage padding must be ignored */
    round_host(logits, nl);
    int *tg = (int *)malloc(N * sizeof(int));
    for (int n = 0; n < N; n++) tg[n] = (int)((dev_uniform(1.0f) + 1.0f) * 0.5f * V) % V;
    tg[0] = V - 1;
    const float loss_scale = 1.0f, gs = loss_scale / N;
    float *rl = (float *)malloc(N * 4), *rg = (float *)malloc(nl * 4);
    for (int n = 0; n < N; n++) {
        const float *r = logits + (size_t)n * Vp;
        double mx = -1e300, s = 0;
        for (int i = 0; i < V; i++) if (r[i] > mx) mx = r[i];
        for (int i = 0; i < V; i++) s += exp(r[i] - mx);
        double lse = mx + log(s);
        rl[n] = (float)(lse - r[tg[n]]);
        for (int i = 0; i < Vp; i++) rg[(size_t)n * Vp + i] = i < V ? (float)(gs * (exp(r[i] - lse) - (i == tg[n]))) : 0.0f;
    }
    floatX *d_l = to_device(logits, nl);
    float *d_loss;
    int *d_t;
    cudaCheck(cudaMalloc(&d_loss, N * 4));
    cudaCheck(cudaMalloc(&d_t, N * 4));
    cudaCheck(cudaMemcpy(d_t, tg, N * 4, cudaMemcpyHostToDevice));
    fused_classifier(d_l, d_loss, d_t, N, V, Vp, 0.0f, 0);
    float *l0 = from_device_f32(d_loss, N), *same = from_device(d_l, nl);
    check_close("classifier_loss_only", l0, rl, N, 1e-5, 1e-4);
    check_same("classifier_loss_only_keeps_logits", same, logits, nl);
    fused_classifier(d_l, d_loss, d_t, N, V, Vp, gs, 0);
    float *l1 = from_device_f32(d_loss, N), *g = from_device(d_l, nl);
    check_close("classifier_loss", l1, rl, N, 1e-5, 1e-4);
    /* gradients are O(1/N); the atol is relative to that scale */
    check_close("classifier_grad", g, rg, nl, TOL_REL, TOL_ABS * gs);

#ifdef CUDA_EMU /* the CPU emulator (make test-emu): a small timed size */
    const int TN = 16;
#else
    const int TN = 8192;
#endif
    floatX *t_l;
    float *t_loss;
    int *t_t;
    cudaCheck(cudaMalloc(&t_l, (size_t)TN * Vp * sizeof(floatX)));
    cudaCheck(cudaMemset(t_l, 0, (size_t)TN * Vp * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_loss, TN * 4));
    cudaCheck(cudaMalloc(&t_t, TN * 4));
    cudaCheck(cudaMemset(t_t, 0, TN * 4));
    float ms = time_ms([&] { fused_classifier(t_l, t_loss, t_t, TN, V, Vp, 1.0f / TN, 0); }, 10);
    printf("time classifier N=%d Vp=%d: %.3f ms (%.0f GB/s)\n", TN, Vp, ms, 2.0 * TN * Vp * sizeof(floatX) / ms / 1e6);
    return dev_failures ? 1 : 0;
}
