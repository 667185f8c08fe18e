/*
 * dev/cuda/attention.cu - checks cuda/attention.cuh's cuBLAS kernels against a float64 CPU reference of causal
 * attention (dev/cuda/attention_ref.cuh: plain loops, independent of the GEMM formulation): forward output, the
 * saved att (upper triangle zero), and the backward's dqkv; then times forward and backward at GPT-2 124M's size
 * (B=8, T=1024, C=768, NH=12).
 * The cuDNN path (cuda/attention_cudnn.cuh) has its own test, dev/cuda/attention_cudnn.cu.
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/attention.cuh"
#include "dev/cuda/attention_ref.cuh"

int main(void) {
    cuda_require_device("attention");
    Blas bl;
    blas_init(&bl);
    const int B = 2, T = 128, C = 256, NH = 4;
    const size_t n3 = (size_t)B * T * 3 * C, n = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = host_random(n3, 1.0f), *dout = host_random(n, 1.0f);
    round_host(qkv, n3); round_host(dout, n);
    /* reference forward and backward in float64 (dev/cuda/attention_ref.cuh) */
    float *rout = (float *)calloc(n, 4), *ratt = (float *)calloc(na, 4), *rdqkv = (float *)calloc(n3, 4);
    attention_reference(qkv, dout, B, T, C, NH, rout, ratt, rdqkv, NULL);

    floatX *d_qkv = to_device(qkv, n3), *d_dout = to_device(dout, n), *d_out, *d_att, *d_scr, *d_dqkv;
    cudaCheck(cudaMalloc(&d_out, n * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_att, na * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dqkv, n3 * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_scr, attention_backward_scratch_elems(B, T, C, NH) * sizeof(floatX)));
    attention_forward(&bl, d_out, d_att, d_scr, d_qkv, B, T, C, NH, 0);
    float *out = from_device(d_out, n), *gatt = from_device(d_att, na);
    check_close("attention_forward_att", gatt, ratt, na, TOL_REL, TOL_ABS);
    check_close("attention_forward_out", out, rout, n, TOL_REL, TOL_ABS * 5);
    attention_backward(&bl, d_dqkv, d_scr, d_dout, d_att, d_qkv, B, T, C, NH, 0);
    float *gdq = from_device(d_dqkv, n3);
    check_close("attention_backward_dqkv", gdq, rdqkv, n3, TOL_REL * 2, TOL_ABS * 10);

    /* timing at GPT-2 124M size */
#ifdef CUDA_EMU /* the CPU emulator (make test-emu): a small timed size */
    const int TB = 1, TT = 64, TC = 768, TNH = 12;
#else
    const int TB = 8, TT = 1024, TC = 768, TNH = 12;
#endif
    floatX *t_qkv, *t_out, *t_att, *t_scr, *t_dqkv;
    cudaCheck(cudaMalloc(&t_qkv, (size_t)TB * TT * 3 * TC * sizeof(floatX)));
    cudaCheck(cudaMemset(t_qkv, 0, (size_t)TB * TT * 3 * TC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_out, (size_t)TB * TT * TC * sizeof(floatX)));
    cudaCheck(cudaMemset(t_out, 0, (size_t)TB * TT * TC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_att, (size_t)TB * TNH * TT * TT * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_dqkv, (size_t)TB * TT * 3 * TC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_scr, attention_backward_scratch_elems(TB, TT, TC, TNH) * sizeof(floatX)));
    float fms = time_ms([&] { attention_forward(&bl, t_out, t_att, t_scr, t_qkv, TB, TT, TC, TNH, 0); }, 10);
    float bms = time_ms([&] { attention_backward(&bl, t_dqkv, t_scr, t_out, t_att, t_qkv, TB, TT, TC, TNH, 0); }, 10);
    printf("time attention B=%d T=%d C=%d NH=%d: forward %.3f ms, backward %.3f ms\n", TB, TT, TC, TNH, fms, bms);
    blas_free(&bl);
    return dev_failures ? 1 : 0;
}
