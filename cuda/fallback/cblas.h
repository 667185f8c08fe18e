/*
 * cuda/fallback/cblas.h - the one CBLAS call train_gpt.c makes (cblas_sgemm), declared for GPU machines that have
 * no OpenBLAS (scripts/gpu_check.sh builds the CPU reference of test/gpu/test_gpt2cu.cu against it with
 * BLAS_FALLBACK=1). Only on the include path in that build; everything else uses the real <cblas.h>.
 */
#ifndef CUDA_FALLBACK_CBLAS_H
#define CUDA_FALLBACK_CBLAS_H

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };

/* C = alpha op(A) op(B) + beta C, the reference BLAS semantics (M x N result, inner K). */
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                 float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

#endif
