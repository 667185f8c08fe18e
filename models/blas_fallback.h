/*
 * models/blas_fallback.h - the one CBLAS call the CPU models make (cblas_sgemm), declared for GPU machines that
 * have no OpenBLAS (scripts/gpu_check.sh builds the CPU reference of test/gpu/test_gpt2cu.cu and test_llamacu.cu
 * against it with BLAS_FALLBACK=1). train_gpt.c and train_llama.c include it instead of <cblas.h> only where
 * BLAS_FALLBACK is defined (models/module.mk's *_noblas.o); everything else uses the real <cblas.h>. Its own name,
 * so it never stands in for the system header by accident.
 */
#ifndef MODELS_BLAS_FALLBACK_H
#define MODELS_BLAS_FALLBACK_H

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };

/* C = alpha op(A) op(B) + beta C, the reference BLAS semantics (M x N result, inner K). */
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                 float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

#endif
