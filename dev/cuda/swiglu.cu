/*
 * dev/cuda/swiglu.cu - checks cuda/swiglu.cuh against a float64 CPU reference of train_llama.c's SwiGLU
 * (out = silu(gate) * up; backward d(gate), d(up) from d(out)), including large |gate| where the sigmoid
 * saturates, and times both at Llama-500M's size (B*T = 8192, F = 4096).
 * Tolerances: dev_common.cuh's TOL_REL / TOL_ABS (fp32 1e-4 / 1e-5; bf16 2e-2 / 2e-3).
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/swiglu.cuh"

int main(void) {
    cuda_require_device("swiglu");
    printf("  precision " PRECISION_NAME "\n");
#ifdef CUDA_EMU /* the CPU emulator (make test-emu): a small n */
    const long n = 64L * 1024 + 3;
#else
    const long n = 8L * 1024 * 4096;
#endif
    float *gate = host_random(n, 6.0f), *up = host_random(n, 2.0f), *dout = host_random(n, 1.0f);
    gate[0] = 40.0f; gate[1] = -40.0f; gate[2] = 0.0f; gate[3] = -90.0f; /* saturated sigmoid; expf(90) is inf */
    round_host(gate, n); round_host(up, n); round_host(dout, n);
    floatX *d_gate = to_device(gate, n), *d_up = to_device(up, n), *d_dg = to_device(dout, n), *d_out, *d_dup;
    cudaCheck(cudaMalloc(&d_out, n * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dup, n * sizeof(floatX)));
    swiglu_forward(d_out, d_gate, d_up, n, 0);
    swiglu_backward_inplace(d_dg, d_dup, d_gate, d_up, n, 0);
    float *out = from_device(d_out, n), *dg = from_device(d_dg, n), *du = from_device(d_dup, n);
    float *rout = (float *)malloc(n * 4), *rdg = (float *)malloc(n * 4), *rdu = (float *)malloc(n * 4);
    for (long i = 0; i < n; i++) {
        double g = gate[i], sig = 1.0 / (1.0 + exp(-g)), d = dout[i];
        rout[i] = (float)(g * sig * up[i]);
        rdu[i] = (float)(d * g * sig);
        rdg[i] = (float)(d * up[i] * sig * (1.0 + g * (1.0 - sig)));
    }
    check_close("swiglu_forward", out, rout, n, TOL_REL, TOL_ABS);
    check_close("swiglu_backward_dgate", dg, rdg, n, TOL_REL, TOL_ABS);
    check_close("swiglu_backward_dup", du, rdu, n, TOL_REL, TOL_ABS);
    check_true("swiglu_saturated_finite", isfinite(out[3]) && isfinite(dg[3]) && isfinite(du[3]) && out[3] == 0.0f,
               "gate -90 (expf overflow) gave a non-finite or non-zero value");

    /* timing: restore d(out) before each backward would only add a copy; the backward reads and writes the same
     * bytes whatever the values, so it runs on its own output */
    float fms = time_ms([&] { swiglu_forward(d_out, d_gate, d_up, n, 0); }, 20);
    float bms = time_ms([&] { swiglu_backward_inplace(d_dg, d_dup, d_gate, d_up, n, 0); }, 20);
    printf("time swiglu n=%ld: forward %.3f ms (%.0f GB/s), backward %.3f ms (%.0f GB/s)\n", n, fms,
           3.0 * n * sizeof(floatX) / fms / 1e6, bms, 5.0 * n * sizeof(floatX) / bms / 1e6);
    return dev_failures ? 1 : 0;
}
