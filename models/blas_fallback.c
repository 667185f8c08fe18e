/*
 * models/blas_fallback.c - a plain OpenMP sgemm with the CBLAS interface, for the CPU reference in GPU tests
 * on machines without OpenBLAS (see blas_fallback.h beside it). Correct for every order/transpose combination, slow
 * (no blocking): fine for the small models the tests use, never for training.
 */
#include "models/blas_fallback.h"

#include <stddef.h>

static void sgemm_rowmajor(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                           const float *B, int ldb, float beta, float *C, int ldc) {
    #pragma omp parallel
    {
        #pragma omp for schedule(static)
        for (int i = 0; i < M; i++) {
            float *c = C + (size_t)i * ldc;
            for (int j = 0; j < N; j++) c[j] = beta == 0.0f ? 0.0f : beta * c[j];
        }
        /* i-k-j order over contiguous rows of op(B); each thread owns whole rows of C */
        #pragma omp for schedule(static)
        for (int i = 0; i < M; i++) {
            float *c = C + (size_t)i * ldc;
            for (int k = 0; k < K; k++) {
                float a = alpha * (ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
                if (a == 0.0f) continue;
                if (!tb) {
                    const float *b = B + (size_t)k * ldb;
                    for (int j = 0; j < N; j++) c[j] += a * b[j];
                } else {
                    for (int j = 0; j < N; j++) c[j] += a * B[(size_t)j * ldb + k];
                }
            }
        }
    }
}

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                 float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    int tA = ta != CblasNoTrans, tB = tb != CblasNoTrans;
    if (order == CblasRowMajor) sgemm_rowmajor(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else sgemm_rowmajor(tB, tA, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc); /* C^T = op(B)^T op(A)^T */
}
