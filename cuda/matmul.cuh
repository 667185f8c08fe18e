/*
 * cuda/matmul.cuh - the linear layers through cuBLASLt: floatX inputs (bf16, or fp32 under PRECISION=FP32),
 * fp32 accumulation, bias and GELU (tanh) epilogues fused into the GEMM; backward GEMMs and a deterministic
 * bias-gradient column sum. Also the cuBLAS handle the attention's batched GEMMs use.
 * Layout: row-major tensors, which cuBLAS (column-major) sees transposed: a row-major (N,C) matrix is a
 * column-major C x N matrix with leading dimension C. Shapes: N rows, C input channels, OC output channels.
 * Not for: attention's batched GEMMs' softmax (attention.cuh).
 */
#ifndef CUDA_MATMUL_CUH
#define CUDA_MATMUL_CUH

#include <string.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include "cuda/common.cuh"
#include "cuda/gelu.cuh"

static inline void cublas_check_(cublasStatus_t st, const char *what, const char *file, int line) {
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "error: cuBLAS: %s failed at %s:%d: status %d (%s)\n", what, file, line, (int)st,
                cublasGetStatusString(st));
        exit(1);
    }
}
#define cublasCheck(call) cublas_check_((call), #call, __FILE__, __LINE__)

#ifdef ENABLE_FP32
#define CUDA_FLOATX CUDA_R_32F
#else
#define CUDA_FLOATX CUDA_R_16BF
#endif

#define CUBLASLT_WORKSPACE_BYTES (32u << 20)

/* Largest power of two, at most 256, that divides the address. cuBLASLt's heuristic assumes 256-byte aligned A,
 * B, C and D unless the preference says otherwise (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, default 256), and
 * the views the trainers pass (layer l's slice of a flat weight buffer, e.g. attprojw of d2c32 at 128 bytes) are
 * often less aligned: declaring the true alignment keeps it from choosing a kernel the pointer cannot serve. */
static inline uint32_t lt_alignment(const void *p) {
    uint32_t al = 256;
    while (al > 1 && (uintptr_t)p % al != 0) al >>= 1;
    return al;
}

/* Everything that determines a GEMM's cuBLASLt descriptors and the algorithm the heuristic picks. The pointers
 * themselves change per call (layer l's slice, this step's activations) and enter only through their alignments:
 * A, B and C/D as declared in the preference, bias and aux because the heuristic also reads the epilogue's
 * pointers (bias alignment decides whether a bias epilogue exists: matmul_forward's fallback). al_bias, al_aux 0:
 * no such pointer. Every field is 32 bits, so the key has no padding and is compared with memcmp. lt_matmul has
 * no batched form (attention's batched GEMMs go through cuBLAS), hence no batch count or strides. */
typedef struct {
    int32_t m, n, k, lda, ldb, ldd;
    int32_t ta, tb, epi;
    int32_t type;                               /* A, B, C, D, bias and aux: all floatX */
    uint32_t al_a, al_b, al_d, al_bias, al_aux; /* lt_alignment() of each pointer */
    uint32_t ws;                                /* workspace bytes offered to the heuristic */
} LtKey;

/* One key's finalized descriptors and its algorithm, chosen once: every later call with the same key runs the
 * same algorithm, so a run's GEMMs are bitwise repeatable step to step. found 0: cuBLASLt has no algorithm for
 * the key (the caller's fallback runs; the descriptors are already freed). */
typedef struct {
    LtKey key;
    int found;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} LtPlan;

/* GPT-2 and Llama use a few dozen keys (each linear layer forward and backward, the fallback epilogues, the few
 * alignments layer slices take); beyond this many, GEMMs are planned per call, as they were before the table */
#define LT_PLANS_MAX 128

/* Handles shared by every GEMM of a process; one per device, used by one host thread (the plan table has no
 * lock). */
typedef struct {
    cublasLtHandle_t lt;
    cublasHandle_t blas;
    void *workspace; /* CUBLASLT_WORKSPACE_BYTES on the device */
    LtPlan plans[LT_PLANS_MAX]; /* lt_matmul_try's cache, nplans used, searched in order */
    int nplans;
    int plans_full_noted;
} Blas;

static void lt_plan_destroy_descriptors(LtPlan *p) {
    cublasCheck(cublasLtMatrixLayoutDestroy(p->la));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->ld));
    cublasCheck(cublasLtMatmulDescDestroy(p->desc));
}
static void lt_plan_free(LtPlan *p) {
    if (p->found) lt_plan_destroy_descriptors(p);
    p->found = 0;
}
/* Frees every plan: blas_free, and dev/cuda/matmul.cu's timing of the per-call planning this table saves. */
static void lt_plans_clear(Blas *b) {
    for (int i = 0; i < b->nplans; i++) lt_plan_free(&b->plans[i]);
    b->nplans = 0;
}

static void blas_init(Blas *b) {
    cublasCheck(cublasLtCreate(&b->lt));
    cublasCheck(cublasCreate(&b->blas));
#ifdef ENABLE_FP32
    /* no TF32 or other shortcut: fp32 builds must be true fp32 for the tight CPU comparisons */
    cublasCheck(cublasSetMathMode(b->blas, CUBLAS_PEDANTIC_MATH));
#endif
    cudaCheck(cudaMalloc(&b->workspace, CUBLASLT_WORKSPACE_BYTES));
    b->nplans = 0;
    b->plans_full_noted = 0;
}
static void blas_free(Blas *b) {
    lt_plans_clear(b);
    cudaCheck(cudaFree(b->workspace));
    cublasCheck(cublasDestroy(b->blas));
    cublasCheck(cublasLtDestroy(b->lt));
}

/* Builds p for key: the descriptor (transposes, epilogue, the aux leading dimension; bias and aux pointers of
 * this call, which the heuristic inspects), the layouts, and one algorithm from the heuristic under the declared
 * alignments and workspace. */
static void lt_plan_build(Blas *bl, LtPlan *p, const LtKey *key, const floatX *bias, const floatX *aux) {
    p->key = *key;
    cublasOperation_t ta = (cublasOperation_t)key->ta, tb = (cublasOperation_t)key->tb;
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)key->epi;
    int m = key->m, n = key->n, k = key->k;
    cudaDataType_t type = (cudaDataType_t)key->type;
    cublasCheck(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (bias) cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (aux) {
        int64_t ld = key->ldd;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    cublasCheck(cublasLtMatrixLayoutCreate(&p->la, type, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, key->lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, type, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, key->ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->ld, type, m, n, key->ldd));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = key->ws;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key->al_a, sizeof(key->al_a)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key->al_b, sizeof(key->al_b)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key->al_d, sizeof(key->al_d)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key->al_d, sizeof(key->al_d)));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    /* "no algorithm" comes back either as found == 0 or as CUBLAS_STATUS_NOT_SUPPORTED (cublasLt.h: no heuristic
     * for this configuration, e.g. an epilogue the type or alignment does not allow): both mean "fall back" */
    cublasStatus_t hst = cublasLtMatmulAlgoGetHeuristic(bl->lt, p->desc, p->la, p->lb, p->ld, p->ld, pref, 1, &heur, &found);
    if (hst == CUBLAS_STATUS_NOT_SUPPORTED) found = 0;
    else cublas_check_(hst, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    p->found = found > 0;
    if (p->found) p->algo = heur.algo;
    else lt_plan_destroy_descriptors(p);
}

/* The plan for key: from the table, else built and added (or, with the table full, built into *tmp, which the
 * caller frees after the call). */
static LtPlan *lt_plan_get(Blas *bl, const LtKey *key, const floatX *bias, const floatX *aux, LtPlan *tmp) {
    for (int i = 0; i < bl->nplans; i++)
        if (memcmp(&bl->plans[i].key, key, sizeof *key) == 0) return &bl->plans[i];
    LtPlan *p = tmp;
    if (bl->nplans < LT_PLANS_MAX) p = &bl->plans[bl->nplans++];
    else if (!bl->plans_full_noted) {
        bl->plans_full_noted = 1;
        fprintf(stderr, "note: more than %d cuBLASLt GEMM configurations; the rest are planned on every call "
                        "(raise LT_PLANS_MAX in cuda/matmul.cuh)\n", LT_PLANS_MAX);
    }
    lt_plan_build(bl, p, key, bias, aux);
    return p;
}

/* D = alpha * op(A) op(B) + beta * C (C == D), column-major view, m x n result, inner k; lda, ldb, ldd leading
 * dimensions. epi: CUBLASLT_EPILOGUE_DEFAULT, _BIAS (bias: m values), _GELU_BIAS, _GELU_AUX_BIAS (aux: the
 * pre-GELU m x n matrix, leading dimension ldd). Returns 0 (and does nothing) if cuBLASLt has no algorithm for
 * this shape, epilogue and alignment; lt_matmul() then exits with one line. The descriptors and the algorithm
 * come from bl's plan table (LtKey): after a configuration's first call, a call only sets this call's bias and
 * aux pointers and runs cublasLtMatmul. */
static int lt_matmul_try(Blas *bl, floatX *d, const floatX *a, const floatX *b, const floatX *bias, floatX *aux,
                      int m, int n, int k, int lda, int ldb, int ldd, cublasOperation_t ta, cublasOperation_t tb,
                      float beta, cublasLtEpilogue_t epi, cudaStream_t s) {
    LtKey key;
    memset(&key, 0, sizeof key);
    key.m = m; key.n = n; key.k = k; key.lda = lda; key.ldb = ldb; key.ldd = ldd;
    key.ta = ta; key.tb = tb; key.epi = epi;
    key.type = CUDA_FLOATX;
    key.al_a = lt_alignment(a); key.al_b = lt_alignment(b); key.al_d = lt_alignment(d);
    key.al_bias = bias ? lt_alignment(bias) : 0;
    key.al_aux = aux ? lt_alignment(aux) : 0;
    key.ws = CUBLASLT_WORKSPACE_BYTES;
    LtPlan tmp;
    LtPlan *p = lt_plan_get(bl, &key, bias, aux, &tmp);
    if (!p->found) return 0;
    /* the descriptor is read when cublasLtMatmul enqueues, so the next call may repoint it at once */
    if (bias) cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (aux) cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    float alpha = 1.0f;
    cublasCheck(cublasLtMatmul(bl->lt, p->desc, &alpha, a, p->la, b, p->lb, &beta, d, p->ld, d, p->ld, &p->algo,
                               bl->workspace, key.ws, s));
    if (p == &tmp) lt_plan_free(&tmp);
    return 1;
}
static void lt_matmul(Blas *bl, floatX *d, const floatX *a, const floatX *b, const floatX *bias, floatX *aux,
                      int m, int n, int k, int lda, int ldb, int ldd, cublasOperation_t ta, cublasOperation_t tb,
                      float beta, cublasLtEpilogue_t epi, cudaStream_t s) {
    if (!lt_matmul_try(bl, d, a, b, bias, aux, m, n, k, lda, ldb, ldd, ta, tb, beta, epi, s)) {
        fprintf(stderr, "error: cuBLASLt has no algorithm for m=%d n=%d k=%d epilogue=%d; use channel counts that "
                        "are multiples of 8\n", m, n, k, (int)epi);
        exit(1);
    }
}

/* out (N,OC) += bias (OC) broadcast over rows: the fallback where cuBLASLt has no bias epilogue for a pointer */
__global__ static void add_bias_kernel(floatX *out, const floatX *bias, int N, int OC) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)N * OC) return;
    out[i] = from_float<floatX>(to_float(out[i]) + to_float(bias[i % OC]));
}

/* out (N,OC) = inp (N,C) @ weight(OC,C)^T + bias (OC, may be NULL). With pre_gelu non-NULL the GELU epilogue
 * runs: pre_gelu (N,OC) receives inp @ w^T + bias and out = GELU(pre_gelu) (a cuBLASLt epilogue in bf16 builds,
 * the GELU kernel in fp32 builds or where cuBLASLt has no such epilogue for the shape). */
static void matmul_forward(Blas *bl, floatX *out, floatX *pre_gelu, const floatX *inp, const floatX *weight,
                           const floatX *bias, int N, int C, int OC, cudaStream_t s) {
    cublasLtEpilogue_t epi = pre_gelu ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                      : (bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
    /* column-major: out_cm (OC x N) = W_cm^T (OC x C) inp_cm (C x N), W_cm being row-major W (OC,C) as C x OC */
    int fuse = 1;
#ifdef ENABLE_FP32
    /* fp32 builds exist for tight comparisons: use the tanhf GELU kernel, not the epilogue's GELU, whose accuracy
     * cuBLASLt does not document */
    fuse = pre_gelu == NULL;
#endif
    if (fuse && lt_matmul_try(bl, out, weight, inp, bias, pre_gelu, OC, N, C, C, C, OC, CUBLAS_OP_T, CUBLAS_OP_N, 0.0f,
                              epi, s))
        return;
    /* unfused: the GEMM (with the bias epilogue where cuBLASLt offers one for this bias pointer, else a plain GEMM
     * and the bias kernel) into pre_gelu if there is a GELU, else into out; then the GELU kernel */
    floatX *dst = pre_gelu ? pre_gelu : out;
    if (!bias || !lt_matmul_try(bl, dst, weight, inp, bias, NULL, OC, N, C, C, C, OC, CUBLAS_OP_T, CUBLAS_OP_N, 0.0f,
                                CUBLASLT_EPILOGUE_BIAS, s)) {
        lt_matmul(bl, dst, weight, inp, NULL, NULL, OC, N, C, C, C, OC, CUBLAS_OP_T, CUBLAS_OP_N, 0.0f,
                  CUBLASLT_EPILOGUE_DEFAULT, s);
        if (bias) {
            add_bias_kernel<<<ceil_div((long)N * OC, 256), 256, 0, s>>>(dst, bias, N, OC);
            cudaCheckLaunch();
        }
    }
    if (pre_gelu) gelu_forward(out, pre_gelu, (long)N * OC, s);
}

#define BIAS_BWD_ROWS 256
/* partial[rb, oc] = sum of dout[rb*ROWS .. , oc] over the row block, rows in order (deterministic) */
__global__ static void bias_backward_partial_kernel(float *partial, const floatX *dout, int N, int OC) {
    int oc = blockIdx.x * blockDim.x + threadIdx.x;
    if (oc >= OC) return;
    int r0 = blockIdx.y * BIAS_BWD_ROWS;
    float acc = 0.0f;
    for (int r = r0; r < r0 + BIAS_BWD_ROWS && r < N; r++) acc += to_float(dout[(long)r * OC + oc]);
    partial[(long)blockIdx.y * OC + oc] = acc;
}
__global__ static void bias_backward_reduce_kernel(floatX *dbias, const float *partial, int nrb, int OC) {
    int oc = blockIdx.x * blockDim.x + threadIdx.x;
    if (oc >= OC) return;
    float acc = 0.0f;
    for (int b = 0; b < nrb; b++) acc += partial[(long)b * OC + oc];
    dbias[oc] = from_float<floatX>(to_float(dbias[oc]) + acc);
}
static size_t matmul_backward_scratch_floats(int N, int OC) { return (size_t)ceil_div(N, BIAS_BWD_ROWS) * OC; }

/* Backward of matmul_forward without the GELU: dinp (N,C) = dout (N,OC) @ weight (OC,C) (OVERWRITTEN when
 * dinp_beta is 0, added to when 1), dweight (OC,C) += dout^T @ inp, dbias (OC) += column sums of dout (if
 * non-NULL; needs scratch of matmul_backward_scratch_floats(N, OC)). dinp may be NULL (not needed). */
static void matmul_backward(Blas *bl, floatX *dinp, floatX *dweight, floatX *dbias, float *scratch,
                            const floatX *dout, const floatX *inp, const floatX *weight, int N, int C, int OC,
                            float dinp_beta, cudaStream_t s) {
    if (dinp) /* dinp^T (C x N) = W_cm (C x OC) * dout^T (OC x N) */
        lt_matmul(bl, dinp, weight, dout, NULL, NULL, C, N, OC, C, OC, C, CUBLAS_OP_N, CUBLAS_OP_N, dinp_beta,
                  CUBLASLT_EPILOGUE_DEFAULT, s);
    /* dW_cm (C x OC) += inp_cm (C x N) * dout_cm^T (N x OC) */
    lt_matmul(bl, dweight, inp, dout, NULL, NULL, C, OC, N, C, OC, C, CUBLAS_OP_N, CUBLAS_OP_T, 1.0f,
              CUBLASLT_EPILOGUE_DEFAULT, s);
    if (dbias) {
        int nrb = ceil_div(N, BIAS_BWD_ROWS);
        bias_backward_partial_kernel<<<dim3(ceil_div(OC, 256), nrb), 256, 0, s>>>(scratch, dout, N, OC);
        cudaCheckLaunch();
        bias_backward_reduce_kernel<<<ceil_div(OC, 256), 256, 0, s>>>(dbias, scratch, nrb, OC);
        cudaCheckLaunch();
    }
}

#endif
