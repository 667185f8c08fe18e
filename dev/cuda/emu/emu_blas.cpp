/*
 * dev/cuda/emu/emu_blas.cpp - cuBLAS and cuBLASLt for the CPU emulator (declarations and scope: include/emu_blas.h).
 * Every call validates what the library would, and what a wrong argument would silently corrupt on a GPU: each
 * operand's column-major extent ((cols-1)*ld + rows elements) must lie inside one device allocation, ld >= rows,
 * the declared minimum alignments must hold for the real pointers, attribute sizes must match their types.
 * A violation stops the program with "FAIL emu: ..." (emu::die). The product is sgemm (fp32 accumulation, as
 * cuBLAS's CUBLAS_COMPUTE_32F) on fp32 copies of the operands, rounded once to the output type.
 */
#include "emu_blas.h"
#include <cblas.h>
#include <vector>

struct emu_blas_handle { int math; cudaStream_t stream; };
struct emu_lt_handle { int dummy; };
struct emu_lt_desc {
    int compute, scale;
    int32_t ta, tb, epi;
    const void *bias;
    void *aux;
    int64_t aux_ld;
};
struct emu_lt_layout { int type; uint64_t rows, cols; int64_t ld; };
struct emu_lt_pref { uint64_t ws; uint32_t align[4]; };

static int lt_no_epilogue() {
    const char *e = getenv("EMU_LT_NO_EPILOGUE");
    return e ? atoi(e) : 0;
}
static size_t type_size(int t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF || t == CUDA_R_16F ? 2 : 0; }
static const char *type_name(int t) { return t == CUDA_R_32F ? "fp32" : t == CUDA_R_16BF ? "bf16" : "unsupported type"; }
static uint32_t alignment_of(const void *p) {
    uint32_t al = 256;
    while (al > 1 && (uintptr_t)p % al) al >>= 1;
    return al;
}
/* the rows x cols column-major operand at p (leading dimension ld) lies inside one device allocation */
static void check_operand(const char *fn, const char *name, const void *p, int type, long rows, long cols, long ld) {
    if (rows <= 0 || cols <= 0) emu::die("%s: operand %s is %ld x %ld", fn, name, rows, cols);
    if (ld < rows) emu::die("%s: operand %s: leading dimension %ld < rows %ld", fn, name, ld, rows);
    size_t bytes = ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * type_size(type);
    int pinned = 0;
    if (!p) emu::die("%s: operand %s is NULL", fn, name);
    long held = emu::alloc_holding(p, bytes, &pinned);
    if (held < 0 || pinned) {
        long whole = emu::alloc_holding(p, 0, &pinned);
        if (whole >= 0 && !pinned)
            emu::die("%s: operand %s (%s, %ld x %ld, ld %ld: %zu bytes from %p) runs past the end of its device "
                     "allocation of %ld bytes", fn, name, type_name(type), rows, cols, ld, bytes, p, whole);
        emu::die("%s: operand %s (%p) is not device memory", fn, name, p);
    }
}
static void to_f32(float *dst, const void *src, int type, size_t n) {
    if (type == CUDA_R_32F) memcpy(dst, src, n * 4);
    else for (size_t i = 0; i < n; i++) dst[i] = (float)((const __nv_bfloat16 *)src)[i];
}
static float gelu_tanh(float x) {
    double xd = x;
    return (float)(0.5 * xd * (1.0 + tanh(0.7978845608028654 * (xd + 0.044715 * xd * xd * xd))));
}
/* D (m x n, ldd) = alpha op(A) op(B) + beta D, then the epilogue; types: all `type` */
static void gemm(int type, int ta, int tb, long m, long n, long k, float alpha, const void *A, long lda, const void *B,
                 long ldb, float beta, void *D, long ldd, int epi, const void *bias, void *aux, long aux_ld) {
    long ra = ta ? k : m, ca = ta ? m : k, rb = tb ? n : k, cb = tb ? k : n;
    /* scratch kept between calls: fresh large allocations cost a page fault per page */
    static thread_local std::vector<float> a, b, d;
    a.resize((size_t)(ca - 1) * lda + ra);
    b.resize((size_t)(cb - 1) * ldb + rb);
    d.resize((size_t)m * n);
    to_f32(a.data(), A, type, a.size());
    to_f32(b.data(), B, type, b.size());
    size_t es = type_size(type);
    if (beta != 0.0f)
        for (long j = 0; j < n; j++) to_f32(&d[(size_t)j * m], (const char *)D + (size_t)j * ldd * es, type, (size_t)m);
    cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
                alpha, a.data(), (int)lda, b.data(), (int)ldb, beta, d.data(), (int)m);
    int has_bias = epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_GELU_BIAS || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int has_gelu = epi == CUBLASLT_EPILOGUE_GELU || epi == CUBLASLT_EPILOGUE_GELU_BIAS || epi == CUBLASLT_EPILOGUE_GELU_AUX ||
                   epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int has_aux = epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    for (long j = 0; j < n; j++)
        for (long i = 0; i < m; i++) {
            float v = d[(size_t)j * m + i];
            if (has_bias) v += type == CUDA_R_32F ? ((const float *)bias)[i] : (float)((const __nv_bfloat16 *)bias)[i];
            if (has_aux) {
                /* the pre-GELU value, stored in the output type */
                if (type == CUDA_R_32F) ((float *)aux)[(size_t)j * aux_ld + i] = v;
                else ((__nv_bfloat16 *)aux)[(size_t)j * aux_ld + i] = __float2bfloat16_rn(v);
            }
            if (has_gelu) v = gelu_tanh(v);
            if (type == CUDA_R_32F) ((float *)D)[(size_t)j * ldd + i] = v;
            else ((__nv_bfloat16 *)D)[(size_t)j * ldd + i] = __float2bfloat16_rn(v);
        }
}

const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS (emulated)";
    }
}
cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = new emu_blas_handle{0, nullptr}; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { h->math = m; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
    int k, const void *alpha, const void *A, cudaDataType at, int lda, long long sa, const void *B, cudaDataType bt,
    int ldb, long long sb, const void *beta, void *C, cudaDataType ct, int ldc, long long sc, int batch,
    cublasComputeType_t ctype, cublasGemmAlgo_t) {
    const char *fn = "cublasGemmStridedBatchedEx";
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (at != bt || bt != ct || !type_size(at) || at == CUDA_R_16F)
        emu::die("%s: types A %d B %d C %d (the emulator does fp32 or bf16, all three the same)", fn, at, bt, ct);
    if (ctype != CUBLAS_COMPUTE_32F) emu::die("%s: compute type %d, expected CUBLAS_COMPUTE_32F (alpha and beta are floats)", fn, ctype);
    if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n || !batch) return CUBLAS_STATUS_SUCCESS;
    int tA = ta != CUBLAS_OP_N, tB = tb != CUBLAS_OP_N;
    long ra = tA ? k : m, ca = tA ? m : k, rb = tB ? n : k, cb = tB ? k : n;
    if (lda < (ra > 1 ? ra : 1) || ldb < (rb > 1 ? rb : 1) || ldc < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
    size_t es = type_size(at);
    for (int i = 0; i < batch; i += (batch > 1 ? batch - 1 : 1)) { /* the first and the last batch entry */
        check_operand(fn, "A", (const char *)A + (size_t)i * sa * es, at, ra, ca, lda);
        check_operand(fn, "B", (const char *)B + (size_t)i * sb * es, bt, rb, cb, ldb);
        check_operand(fn, "C", (const char *)C + (size_t)i * sc * es, ct, m, n, ldc);
    }
    float al = *(const float *)alpha, be = *(const float *)beta; /* host scalars: read at the call */
    emu::enqueue(h->stream, fn, [=]() {
        for (int i = 0; i < batch; i++)
            gemm(at, tA, tB, m, n, k, al, (const char *)A + (size_t)i * sa * es, lda,
                 (const char *)B + (size_t)i * sb * es, ldb, be, (char *)C + (size_t)i * sc * es, ldc,
                 CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0);
    });
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = new emu_lt_handle{0}; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t scale) {
    if (c != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F)
        emu::die("cublasLtMatmulDescCreate: compute type %d scale type %d; the emulator (and the project) use "
                 "CUBLAS_COMPUTE_32F with fp32 alpha/beta", c, scale);
    *d = new emu_lt_desc{c, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0};
    return CUBLAS_STATUS_SUCCESS;
}
/* the library rejects a size that is not the attribute's; so does this, with the reason */
static cublasStatus_t attr_size(const char *what, size_t got, size_t want) {
    if (got == want) return CUBLAS_STATUS_SUCCESS;
    fprintf(stderr, "emu: cuBLASLt attribute %s given %zu bytes, its type has %zu: CUBLAS_STATUS_INVALID_VALUE\n", what,
            got, want);
    return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v, size_t n) {
    cublasStatus_t st;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
        if ((st = attr_size("TRANSA", n, 4))) return st;
        memcpy(&d->ta, v, 4);
        break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if ((st = attr_size("TRANSB", n, 4))) return st;
        memcpy(&d->tb, v, 4);
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if ((st = attr_size("EPILOGUE", n, 4))) return st;
        memcpy(&d->epi, v, 4);
        break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if ((st = attr_size("BIAS_POINTER", n, sizeof(void *)))) return st;
        memcpy(&d->bias, v, sizeof(void *));
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        if ((st = attr_size("EPILOGUE_AUX_POINTER", n, sizeof(void *)))) return st;
        memcpy(&d->aux, v, sizeof(void *));
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        if ((st = attr_size("EPILOGUE_AUX_LD", n, 8))) return st;
        memcpy(&d->aux_ld, v, 8);
        break;
    default: emu::die("cublasLtMatmulDescSetAttribute: attribute %d is not emulated", (int)a);
    }
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld) {
    if (!type_size(t) || t == CUDA_R_16F) emu::die("cublasLtMatrixLayoutCreate: type %d is not emulated", (int)t);
    *l = new emu_lt_layout{(int)t, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new emu_lt_pref{0, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *v, size_t n) {
    cublasStatus_t st;
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if ((st = attr_size("MAX_WORKSPACE_BYTES", n, 8))) return st;
        memcpy(&p->ws, v, 8);
    } else if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
        if ((st = attr_size("MIN_ALIGNMENT", n, 4))) return st;
        memcpy(&p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], v, 4);
    } else emu::die("cublasLtMatmulPreferenceSetAttribute: attribute %d is not emulated", (int)a);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }

static int epi_known(int e) {
    return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU ||
           e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
/* shape and type agreement of the descriptor and the four layouts: what the library checks before it looks for
 * an algorithm (CUBLAS_STATUS_INVALID_VALUE / NOT_SUPPORTED on a GPU; here a stop with the figures) */
static void check_problem(const char *fn, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                          cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd) {
    uint64_t m = dd->rows, n = dd->cols;
    uint64_t am = d->ta ? a->cols : a->rows, ak = d->ta ? a->rows : a->cols;
    uint64_t bk = d->tb ? b->cols : b->rows, bn = d->tb ? b->rows : b->cols;
    if (am != m || bn != n || ak != bk)
        emu::die("%s: shapes disagree: op(A) %lu x %lu, op(B) %lu x %lu, D %lu x %lu (transa %d transb %d)", fn,
                 (unsigned long)am, (unsigned long)ak, (unsigned long)bk, (unsigned long)bn, (unsigned long)m,
                 (unsigned long)n, d->ta, d->tb);
    if (c->rows != m || c->cols != n) emu::die("%s: C layout %lu x %lu, D %lu x %lu", fn, (unsigned long)c->rows, (unsigned long)c->cols, (unsigned long)m, (unsigned long)n);
    if (a->type != b->type || a->type != c->type || a->type != dd->type)
        emu::die("%s: operand types A %s B %s C %s D %s differ", fn, type_name(a->type), type_name(b->type), type_name(c->type), type_name(dd->type));
    const cublasLtMatrixLayout_t ls[4] = {a, b, c, dd};
    for (int i = 0; i < 4; i++)
        if (ls[i]->ld < (int64_t)ls[i]->rows)
            emu::die("%s: layout %c: leading dimension %ld < rows %lu", fn, "ABCD"[i], (long)ls[i]->ld, (unsigned long)ls[i]->rows);
    if (!epi_known(d->epi)) emu::die("%s: epilogue %d is not emulated", fn, d->epi);
    int need_bias = d->epi == CUBLASLT_EPILOGUE_BIAS || d->epi == CUBLASLT_EPILOGUE_GELU_BIAS || d->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int need_aux = d->epi == CUBLASLT_EPILOGUE_GELU_AUX || d->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    if (need_bias && !d->bias) emu::die("%s: epilogue %d needs CUBLASLT_MATMUL_DESC_BIAS_POINTER", fn, d->epi);
    if (need_aux && (!d->aux || d->aux_ld < (int64_t)m))
        emu::die("%s: epilogue %d needs an aux pointer and an aux leading dimension >= %lu (got %p, %ld)", fn, d->epi,
                 (unsigned long)m, d->aux, (long)d->aux_ld);
    if (need_aux && d->aux_ld % 8)
        emu::die("%s: aux leading dimension %ld is not a multiple of 8 (cuBLASLt requires it)", fn, (long)d->aux_ld);
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p,
    int requested, cublasLtMatmulHeuristicResult_t *r, int *found) {
    const char *fn = "cublasLtMatmulAlgoGetHeuristic";
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    check_problem(fn, d, a, b, c, dd);
    *found = 0;
    if (d->epi != CUBLASLT_EPILOGUE_DEFAULT && lt_no_epilogue() == 1) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->epi != CUBLASLT_EPILOGUE_DEFAULT && lt_no_epilogue() == 2) return CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < 4; i++) {
        uint32_t al = p->align[i];
        if (al == 0 || (al & (al - 1)) || al > 256) emu::die("%s: minimum alignment %u of %c is not a power of two <= 256", fn, al, "ABCD"[i]);
    }
    memset(r, 0, sizeof *r);
    /* the algorithm remembers what it was chosen for: cublasLtMatmul checks the pointers against it */
    for (int i = 0; i < 4; i++) r->algo.data[i] = p->align[i];
    r->algo.data[4] = 0x454D55; /* "EMU": chosen by this heuristic */
    r->algo.data[5] = (uint64_t)d->epi;
    r->workspaceSize = 0;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
    cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, const void *beta, const void *C,
    cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *algo, void *ws,
    size_t ws_bytes, cudaStream_t stream) {
    const char *fn = "cublasLtMatmul";
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    check_problem(fn, d, la, lb, lc, ld);
    if (!algo || algo->data[4] != 0x454D55) emu::die("%s: no algorithm from cublasLtMatmulAlgoGetHeuristic", fn);
    if (algo->data[5] != (uint64_t)d->epi) emu::die("%s: the algorithm was chosen for epilogue %lu, the descriptor has %d", fn, (unsigned long)algo->data[5], d->epi);
    const void *ptr[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if (alignment_of(ptr[i]) < algo->data[i])
            emu::die("%s: %c at %p is %u-byte aligned, the algorithm was chosen for a declared minimum of %lu bytes "
                     "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)", fn, "ABCD"[i], ptr[i], alignment_of(ptr[i]),
                     (unsigned long)algo->data[i], "ABCD"[i]);
    if (ws_bytes && emu::alloc_holding(ws, ws_bytes, nullptr) < 0)
        emu::die("%s: workspace %p of %zu bytes is not device memory of that size", fn, ws, ws_bytes);
    float be = *(const float *)beta;
    check_operand(fn, "A", A, la->type, (long)la->rows, (long)la->cols, (long)la->ld);
    check_operand(fn, "B", B, lb->type, (long)lb->rows, (long)lb->cols, (long)lb->ld);
    check_operand(fn, "D", D, ld->type, (long)ld->rows, (long)ld->cols, (long)ld->ld);
    if (be != 0.0f) check_operand(fn, "C", C, lc->type, (long)lc->rows, (long)lc->cols, (long)lc->ld);
    if (C != D && be != 0.0f) emu::die("%s: C != D with beta != 0 is not emulated", fn);
    long m = (long)ld->rows, n = (long)ld->cols, k = d->ta ? (long)la->rows : (long)la->cols;
    int epi = d->epi;
    if (d->bias) check_operand(fn, "bias", d->bias, ld->type, m, 1, m);
    if (epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
        check_operand(fn, "aux", d->aux, ld->type, m, n, (long)d->aux_ld);
    /* the descriptor, layouts and host scalars as they are at the call */
    const int type = la->type, ta = d->ta != CUBLAS_OP_N, tb = d->tb != CUBLAS_OP_N;
    const long lda = (long)la->ld, ldb = (long)lb->ld, ldd = (long)ld->ld, aux_ld = (long)d->aux_ld;
    const float al = *(const float *)alpha;
    const void *bias = d->bias;
    void *aux = d->aux;
    emu::enqueue(stream, fn, [=]() { gemm(type, ta, tb, m, n, k, al, A, lda, B, ldb, be, D, ldd, epi, bias, aux, aux_ld); });
    return CUBLAS_STATUS_SUCCESS;
}
