/*
 * cuda/attention_cudnn.cuh - causal multi-head self-attention on cuDNN's fused flash-attention engines, written
 * against the cuDNN 9 backend (graph) API directly: tensor / operation descriptors, an operation graph, engine
 * heuristics, a finalized execution plan and a variant pack per call. No cudnn-frontend.
 *
 * What is computed (Dao, FlashAttention-2, arXiv 2307.08691; scores scaled by 1/sqrt(hs), causal):
 *   forward   S = scale Q K^T, masked to -FLT_MAX above the diagonal; m = rowmax S; l = rowsum exp(S - m);
 *             O = (exp(S - m) / l) V; and the statistics L = m + log l (Algorithm 1, line 13), fp32, saved
 *             instead of the (B,NH,T,T) probabilities.
 *   backward  P = exp(S - L) recomputed from Q, K and L (Algorithm 2, line 11); D = rowsum(dO * O) (line 4);
 *             dV = P^T dO; dP = dO V^T; dS = P * (dP - D); dQ = scale dS K; dK = scale dS^T Q (lines 12-18).
 * The graphs are the composite form cuDNN's fused SDPA engines recognise (matmul, pointwise, reduction and
 * reshape nodes; the causal mask as GEN_INDEX row >= col and a BINARY_SELECT); cuDNN fuses each into one
 * flash kernel, so S and P never reach memory.
 *
 * Layouts (no permutes: the strides address the trainer's buffers directly):
 *   qkv  (B,T,3C) rows [q | k | v], head h at channels h*hs..(h+1)*hs of each;  out, dout (B,T,C);
 *   stats (B,NH,T) fp32;  dqkv (B,T,3C) like qkv, OVERWRITTEN by the backward.
 * Precision: bf16 inputs and outputs, fp32 compute and accumulation. Only in bf16 builds: cuDNN's flash engines
 * take fp16/bf16, so the fp32 build (ENABLE_FP32) does not compile this file's code and keeps cuBLAS.
 *
 * Plans: one finalized execution plan per (B, T, NH, hs, forward|backward) (the precision is the build's), built
 * on first use and cached (CDNN_MAX_PLANS, oldest evicted); one workspace shared by all plans, allocated once
 * and grown only if a later shape needs more. The backward's own fp32 buffers (D, and the dQ accumulator of the
 * non-deterministic graph) are allocated once, at the largest shape. The backward graph is the deterministic one
 * where cuDNN accepts it (cdnn_build_backward).
 * Errors: no cuDNN failure exits. Every cuDNN call's status is checked; the first failure stops the build or the
 * call and is returned as one line (what failed, cuDNN's status string and its last error message) so the
 * caller (cuda/attention.cuh) can fall back to cuBLAS attention. Asynchronous kernel faults surface, as
 * everywhere else, at the next cudaCheck.
 * Not for: grouped-query attention (cuda/gqa.cuh), dropout, padding masks.
 */
#ifndef CUDA_ATTENTION_CUDNN_CUH
#define CUDA_ATTENTION_CUDNN_CUH

#if defined(ENABLE_CUDNN) && !defined(ENABLE_FP32)
#define ATTENTION_CUDNN 1

#include <float.h>
#include <stdbool.h>
#include <stdarg.h>
#include <cudnn.h>
#include "cuda/common.cuh"

#define CDNN_MAX_DESCS 96 /* descriptors of one plan: the backward graph needs about 70 */
#define CDNN_MAX_PLANS 8  /* cached shapes: training, evaluation and sampling use one to three */
#define CDNN_MAX_CFGS 16  /* engine configurations tried per graph, best first */
#define CDNN_WHY 320      /* length of a failure line */

/* one finalized execution plan and every descriptor it was built from (destroyed together) */
typedef struct {
    int B, T, NH, hs, backward; /* the cache key */
    int deterministic;          /* backward: 1 = dQ written directly (no fp32 accumulator; see cdnn_build_backward) */
    cudnnBackendDescriptor_t plan;
    int64_t workspace;          /* bytes the plan needs */
    cudnnBackendDescriptor_t descs[CDNN_MAX_DESCS];
    int ndesc;
} CdnnPlan;

typedef struct {
    cudnnHandle_t handle;
    int Bmax, Tmax, NH, hs;
    CdnnPlan plans[CDNN_MAX_PLANS];
    int nplans, evict;          /* filled entries; next entry to replace once full */
    void *workspace;            /* shared by every plan */
    size_t workspace_bytes;
    float *softmax_sum;         /* (Bmax,NH,Tmax) the backward's D = rowsum(dO * O) */
    float *dq_accum;            /* (Bmax,NH,Tmax,hs) fp32 dQ accumulator of the non-deterministic backward; NULL
                                   until such a plan runs */
    float scale, one, neg_big;  /* pass-by-value scalars: 1/sqrt(hs), 1, -FLT_MAX (the masked score) */
    char bwd_note[CDNN_WHY];    /* empty, or why the backward is not the deterministic graph */
} CudnnAttn;

/* unique ids of the tensors a variant pack binds; virtual tensors are numbered from CDNN_UID_VIRTUAL */
enum {
    CDNN_UID_Q = 1, CDNN_UID_K, CDNN_UID_V, CDNN_UID_O, CDNN_UID_STATS, CDNN_UID_SCALE, CDNN_UID_NEG, CDNN_UID_DO,
    CDNN_UID_DQ, CDNN_UID_DK, CDNN_UID_DV, CDNN_UID_ONE, CDNN_UID_SUM, CDNN_UID_DQACC, CDNN_UID_VIRTUAL = 100
};

/* ---------------------------------------------------------------- failure lines */

/* "<what>: <status string> (<cuDNN's last error message>)" into why */
static void cdnn_why(char *why, cudnnStatus_t st, const char *fmt, ...) {
    char what[160], last[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    last[0] = 0;
    cudnnGetLastErrorString(last, sizeof last);
    for (char *c = last; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    snprintf(why, CDNN_WHY, "%s: %s%s%s%s", what, cudnnGetErrorString(st), last[0] ? " (" : "", last,
             last[0] ? ")" : "");
}

/* ---------------------------------------------------------------- graph building */

/* State of one graph build: the first failure stops every later call (each becomes a no-op). */
typedef struct {
    CdnnPlan *p;
    cudnnStatus_t st;
    int64_t next_uid;
    char *why;
    const char *graph; /* "forward" / "backward", for the failure line */
} CdnnBuild;

static int cdnn_failed(CdnnBuild *b, cudnnStatus_t st, const char *what) {
    if (st == CUDNN_STATUS_SUCCESS) return 0;
    b->st = st;
    cdnn_why(b->why, st, "cuDNN %s graph (B=%d T=%d NH=%d hs=%d): %s", b->graph, b->p->B, b->p->T, b->p->NH,
             b->p->hs, what);
    return 1;
}
static cudnnBackendDescriptor_t cdnn_new(CdnnBuild *b, cudnnBackendDescriptorType_t type, const char *what) {
    if (b->st != CUDNN_STATUS_SUCCESS) return NULL;
    if (b->p->ndesc == CDNN_MAX_DESCS) {
        cdnn_failed(b, CUDNN_STATUS_INTERNAL_ERROR, "internal: more than CDNN_MAX_DESCS descriptors");
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    if (cdnn_failed(b, cudnnBackendCreateDescriptor(type, &d), what)) return NULL;
    b->p->descs[b->p->ndesc++] = d;
    return d;
}
static void cdnn_set(CdnnBuild *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                     cudnnBackendAttributeType_t type, int64_t count, const void *value, const char *what) {
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    cdnn_failed(b, cudnnBackendSetAttribute(d, name, type, count, value), what);
}
static void cdnn_finalize(CdnnBuild *b, cudnnBackendDescriptor_t d, const char *what) {
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    cdnn_failed(b, cudnnBackendFinalize(d), what);
}

/* A 4-d tensor: uid 0 = a new virtual one (never in memory); by_value = a host scalar bound at execution. */
static cudnnBackendDescriptor_t cdnn_tensor(CdnnBuild *b, int64_t uid, cudnnDataType_t dt, int64_t d0, int64_t d1,
                                            int64_t d2, int64_t d3, int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                                            int by_value) {
    cudnnBackendDescriptor_t t = cdnn_new(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor descriptor");
    bool is_virtual = uid == 0, by_val = by_value != 0;
    if (is_virtual) uid = b->next_uid++;
    int64_t dim[4] = {d0, d1, d2, d3}, str[4] = {s0, s1, s2, s3}, align = 16;
    cdnn_set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor data type");
    cdnn_set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, "tensor dimensions");
    cdnn_set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str, "tensor strides");
    cdnn_set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor unique id");
    cdnn_set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    cdnn_set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor is-virtual");
    if (by_val) cdnn_set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_val, "tensor by-value");
    cdnn_finalize(b, t, "tensor descriptor finalize");
    return t;
}
/* a virtual (b,h,s,s) score-shaped tensor of type dt */
static cudnnBackendDescriptor_t cdnn_scores(CdnnBuild *b, cudnnDataType_t dt, int64_t B, int64_t H, int64_t S) {
    return cdnn_tensor(b, 0, dt, B, H, S, S, H * S * S, S * S, S, 1, 0);
}
/* a virtual (b,h,s,1) row-statistic tensor */
static cudnnBackendDescriptor_t cdnn_rows(CdnnBuild *b, int64_t B, int64_t H, int64_t S) {
    return cdnn_tensor(b, 0, CUDNN_DATA_FLOAT, B, H, S, 1, H * S, S, 1, 1, 0);
}

/* y = mode(x [, bx [, t]]) elementwise with broadcasting, computed in `prec`; axis >= 0 for GEN_INDEX */
static cudnnBackendDescriptor_t cdnn_pointwise(CdnnBuild *b, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                                               cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t bx,
                                               cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                                               int64_t axis) {
    cudnnBackendDescriptor_t pw = cdnn_new(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise descriptor");
    cdnn_set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    cdnn_set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    if (axis >= 0) cdnn_set(b, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    cdnn_finalize(b, pw, "pointwise descriptor finalize");
    cudnnBackendDescriptor_t op = cdnn_new(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
    cdnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw,
             "pointwise operation mode");
    cdnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise x");
    if (bx) cdnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bx, "pointwise b");
    if (t) cdnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "pointwise t");
    cdnn_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise y");
    cdnn_finalize(b, op, "pointwise operation finalize");
    return op;
}
/* c = a b, batched over the two leading dimensions, fp32 compute */
static cudnnBackendDescriptor_t cdnn_matmul(CdnnBuild *b, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t bm,
                                            cudnnBackendDescriptor_t c) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = cdnn_new(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul descriptor");
    cdnn_set(b, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "matmul compute type");
    cdnn_finalize(b, mm, "matmul descriptor finalize");
    cudnnBackendDescriptor_t op = cdnn_new(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
    cdnn_set(b, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
    cdnn_set(b, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bm, "matmul b");
    cdnn_set(b, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
    cdnn_set(b, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, "matmul desc");
    cdnn_finalize(b, op, "matmul operation finalize");
    return op;
}
/* y = reduction of x over the dimensions where y has extent 1, fp32 */
static cudnnBackendDescriptor_t cdnn_reduce(CdnnBuild *b, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                                            cudnnBackendDescriptor_t y) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t rd = cdnn_new(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction descriptor");
    cdnn_set(b, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction mode");
    cdnn_set(b, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "reduction compute type");
    cdnn_finalize(b, rd, "reduction descriptor finalize");
    cudnnBackendDescriptor_t op = cdnn_new(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
    cdnn_set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction x");
    cdnn_set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction y");
    cdnn_set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd, "reduction desc");
    cdnn_finalize(b, op, "reduction operation finalize");
    return op;
}
/* whether this build and the loaded library set the reshape operations' mode (cdnn_reshape) */
static int cdnn_reshape_mode_set(void) {
#ifdef CDNN_RESHAPE_VIEW_ONLY
    return cudnnGetVersion() >= 92200;
#else
    return 0;
#endif
}
/* y = x viewed with y's dimensions and strides (used for transposes). cuDNN 9.22 added a mode to the reshape
 * operation (a view of the same memory, or a logical reshape); cudnn-frontend sets the view for these
 * transposes, and so do we where the headers have the attribute (cuda/mk/cudnn.mk probes for it and defines
 * CDNN_RESHAPE_VIEW_ONLY) and the library loaded at run time is 9.22 or newer. Older libraries have one
 * behaviour, the view. */
static cudnnBackendDescriptor_t cdnn_reshape(CdnnBuild *b, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = cdnn_new(b, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape operation");
    cdnn_set(b, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reshape x");
    cdnn_set(b, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reshape y");
#ifdef CDNN_RESHAPE_VIEW_ONLY
    if (cdnn_reshape_mode_set()) {
        auto mode = CDNN_RESHAPE_VIEW_ONLY;
        cdnn_set(b, op, (cudnnBackendAttributeName_t)CUDNN_ATTR_OPERATION_RESHAPE_MODE,
                 (cudnnBackendAttributeType_t)CUDNN_TYPE_RESHAPE_MODE, 1, &mode, "reshape mode");
    }
#endif
    cdnn_finalize(b, op, "reshape operation finalize");
    return op;
}
/* s (b,h,s,s) -> the same with -FLT_MAX where column > row (the causal mask); appends 4 operations to ops */
static cudnnBackendDescriptor_t cdnn_causal_mask(CdnnBuild *b, cudnnBackendDescriptor_t *ops, int *nops,
                                                 cudnnBackendDescriptor_t s, cudnnBackendDescriptor_t neg,
                                                 int64_t B, int64_t H, int64_t S) {
    cudnnBackendDescriptor_t row = cdnn_scores(b, CUDNN_DATA_INT32, B, H, S), col = cdnn_scores(b, CUDNN_DATA_INT32, B, H, S);
    cudnnBackendDescriptor_t keep = cdnn_scores(b, CUDNN_DATA_BOOLEAN, B, H, S), y = cdnn_scores(b, CUDNN_DATA_FLOAT, B, H, S);
    ops[(*nops)++] = cdnn_pointwise(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, NULL, NULL, row, 2);
    ops[(*nops)++] = cdnn_pointwise(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, NULL, NULL, col, 3);
    ops[(*nops)++] = cdnn_pointwise(b, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
    ops[(*nops)++] = cdnn_pointwise(b, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, neg, keep, y, -1);
    return y;
}

/* Operation graph of ops -> heuristics (mode A, best first) -> the first engine configuration that finalizes
 * into an execution plan; its workspace size into p. */
static void cdnn_plan(CdnnBuild *b, cudnnHandle_t handle, cudnnBackendDescriptor_t *ops, int nops) {
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    cudnnBackendDescriptor_t g = cdnn_new(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    cdnn_set(b, g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops, "graph operations");
    cdnn_set(b, g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "graph handle");
    cdnn_finalize(b, g, "operation graph finalize");
    cudnnBackendDescriptor_t h = cdnn_new(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    cdnn_set(b, h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g, "heuristics graph");
    cdnn_set(b, h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    cdnn_finalize(b, h, "engine heuristics finalize");
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    int64_t count = 0;
    if (cdnn_failed(b, cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                                &count, NULL), "heuristics result count"))
        return;
    if (count <= 0) {
        cdnn_failed(b, CUDNN_STATUS_NOT_SUPPORTED, "heuristics found no engine for this graph");
        return;
    }
    if (count > CDNN_MAX_CFGS) count = CDNN_MAX_CFGS;
    cudnnBackendDescriptor_t cfgs[CDNN_MAX_CFGS];
    for (int64_t i = 0; i < count; i++) cfgs[i] = cdnn_new(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
    if (b->st != CUDNN_STATUS_SUCCESS) return;
    int64_t got = 0;
    if (cdnn_failed(b, cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                count, &got, cfgs), "heuristics results"))
        return;
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int64_t i = 0; i < got && i < count; i++) {
        cudnnBackendDescriptor_t plan = cdnn_new(b, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
        cdnn_set(b, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "plan handle");
        cdnn_set(b, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i],
                 "plan engine config");
        if (b->st != CUDNN_STATUS_SUCCESS) return;
        last = cudnnBackendFinalize(plan); /* an engine that cannot run this graph here: try the next one */
        if (last != CUDNN_STATUS_SUCCESS) continue;
        int64_t n = 0, ws = 0;
        if (cdnn_failed(b, cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                                    1, &n, &ws), "plan workspace size"))
            return;
        b->p->plan = plan;
        b->p->workspace = ws;
        return;
    }
    char what[96];
    snprintf(what, sizeof what, "none of the %lld engine configurations finalized (last shown)", (long long)got);
    cdnn_failed(b, last, what);
}

/* The forward graph of the header's formulas for one shape. Q, K^T, V are views of qkv; O of out. */
static void cdnn_build_forward(CdnnBuild *b, cudnnHandle_t handle) {
    int64_t B = b->p->B, H = b->p->NH, S = b->p->T, D = b->p->hs, C = H * D, C3 = 3 * C;
    cudnnDataType_t io = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t ops[24];
    int n = 0;
    cudnnBackendDescriptor_t q = cdnn_tensor(b, CDNN_UID_Q, io, B, H, S, D, S * C3, D, C3, 1, 0);
    cudnnBackendDescriptor_t kt = cdnn_tensor(b, CDNN_UID_K, io, B, H, D, S, S * C3, D, 1, C3, 0);
    cudnnBackendDescriptor_t v = cdnn_tensor(b, CDNN_UID_V, io, B, H, S, D, S * C3, D, C3, 1, 0);
    cudnnBackendDescriptor_t o = cdnn_tensor(b, CDNN_UID_O, io, B, H, S, D, S * C, D, C, 1, 0);
    cudnnBackendDescriptor_t stats = cdnn_tensor(b, CDNN_UID_STATS, f32, B, H, S, 1, H * S, S, 1, 1, 0);
    cudnnBackendDescriptor_t scale = cdnn_tensor(b, CDNN_UID_SCALE, f32, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    cudnnBackendDescriptor_t neg = cdnn_tensor(b, CDNN_UID_NEG, f32, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    cudnnBackendDescriptor_t s1 = cdnn_scores(b, f32, B, H, S), s2 = cdnn_scores(b, f32, B, H, S);
    ops[n++] = cdnn_matmul(b, q, kt, s1);                                                      /* Q K^T */
    ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_MUL, f32, s1, scale, NULL, s2, -1);           /* * 1/sqrt(hs) */
    cudnnBackendDescriptor_t s3 = cdnn_causal_mask(b, ops, &n, s2, neg, B, H, S);
    cudnnBackendDescriptor_t mx = cdnn_rows(b, B, H, S), sum = cdnn_rows(b, B, H, S), lg = cdnn_rows(b, B, H, S);
    cudnnBackendDescriptor_t s4 = cdnn_scores(b, f32, B, H, S), e = cdnn_scores(b, f32, B, H, S);
    cudnnBackendDescriptor_t p = cdnn_scores(b, io, B, H, S); /* P in the I/O type: the second matmul's input */
    ops[n++] = cdnn_reduce(b, CUDNN_REDUCE_TENSOR_MAX, s3, mx);                                /* m */
    ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_SUB, f32, s3, mx, NULL, s4, -1);
    ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_EXP, f32, s4, NULL, NULL, e, -1);
    ops[n++] = cdnn_reduce(b, CUDNN_REDUCE_TENSOR_ADD, e, sum);                                /* l */
    ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_LOG, f32, sum, NULL, NULL, lg, -1);
    ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_ADD, f32, mx, lg, NULL, stats, -1);           /* L = m + log l */
    ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_DIV, f32, e, sum, NULL, p, -1);               /* P */
    ops[n++] = cdnn_matmul(b, p, v, o);                                                        /* O = P V */
    cdnn_plan(b, handle, ops, n);
}

/* The backward graph of the header's formulas for one shape. deterministic = 1: dQ = dS K is written directly,
 * the form cudnn-frontend builds when asked for a deterministic backward (cuDNN then runs its dP-workspace
 * algorithm, which needs a (B,NH,T,T) bf16 workspace, one for all layers); 0: dQ is accumulated in an fp32 buffer
 * across key blocks (atomics: faster, not bitwise reproducible) and copied out, cudnn-frontend's default. */
static void cdnn_build_backward(CdnnBuild *b, cudnnHandle_t handle, int deterministic) {
    int64_t B = b->p->B, H = b->p->NH, S = b->p->T, D = b->p->hs, C = H * D, C3 = 3 * C;
    cudnnDataType_t io = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t ops[32];
    int n = 0;
    cudnnBackendDescriptor_t q = cdnn_tensor(b, CDNN_UID_Q, io, B, H, S, D, S * C3, D, C3, 1, 0);
    cudnnBackendDescriptor_t kt = cdnn_tensor(b, CDNN_UID_K, io, B, H, D, S, S * C3, D, 1, C3, 0);
    cudnnBackendDescriptor_t vt = cdnn_tensor(b, CDNN_UID_V, io, B, H, D, S, S * C3, D, 1, C3, 0);
    cudnnBackendDescriptor_t o = cdnn_tensor(b, CDNN_UID_O, io, B, H, S, D, S * C, D, C, 1, 0);
    cudnnBackendDescriptor_t dout = cdnn_tensor(b, CDNN_UID_DO, io, B, H, S, D, S * C, D, C, 1, 0);
    cudnnBackendDescriptor_t stats = cdnn_tensor(b, CDNN_UID_STATS, f32, B, H, S, 1, H * S, S, 1, 1, 0);
    cudnnBackendDescriptor_t dq = cdnn_tensor(b, CDNN_UID_DQ, io, B, H, S, D, S * C3, D, C3, 1, 0);
    cudnnBackendDescriptor_t dk = cdnn_tensor(b, CDNN_UID_DK, io, B, H, S, D, S * C3, D, C3, 1, 0);
    cudnnBackendDescriptor_t dv = cdnn_tensor(b, CDNN_UID_DV, io, B, H, S, D, S * C3, D, C3, 1, 0);
    cudnnBackendDescriptor_t scale = cdnn_tensor(b, CDNN_UID_SCALE, f32, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    cudnnBackendDescriptor_t one = cdnn_tensor(b, CDNN_UID_ONE, f32, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    cudnnBackendDescriptor_t neg = cdnn_tensor(b, CDNN_UID_NEG, f32, 1, 1, 1, 1, 1, 1, 1, 1, 1);
    cudnnBackendDescriptor_t dsum = cdnn_tensor(b, CDNN_UID_SUM, f32, B, H, S, 1, H * S, S, 1, 1, 0);
    cudnnBackendDescriptor_t dqacc = deterministic ? NULL
                                                   : cdnn_tensor(b, CDNN_UID_DQACC, f32, B, H, S, D, H * S * D, S * D, D, 1, 0);
    /* D = rowsum(dO * O), kept in memory for the kernel (Algorithm 2, line 4) */
    cudnnBackendDescriptor_t doo = cdnn_tensor(b, 0, f32, B, H, S, D, H * S * D, S * D, D, 1, 0), rs = cdnn_rows(b, B, H, S);
    ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_MUL, f32, dout, o, NULL, doo, -1);
    ops[n++] = cdnn_reduce(b, CUDNN_REDUCE_TENSOR_ADD, doo, rs);
    ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_MUL, f32, rs, one, NULL, dsum, -1);
    /* P = exp(scale Q K^T, masked, - L) */
    cudnnBackendDescriptor_t s1 = cdnn_scores(b, f32, B, H, S), s2 = cdnn_scores(b, f32, B, H, S);
    ops[n++] = cdnn_matmul(b, q, kt, s1);
    ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_MUL, f32, s1, scale, NULL, s2, -1);
    cudnnBackendDescriptor_t s3 = cdnn_causal_mask(b, ops, &n, s2, neg, B, H, S);
    cudnnBackendDescriptor_t s4 = cdnn_scores(b, f32, B, H, S), p = cdnn_scores(b, f32, B, H, S);
    ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_SUB, f32, s3, stats, NULL, s4, -1);
    ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_EXP, f32, s4, NULL, NULL, p, -1);
    /* dV = P^T dO (P^T: a transposed view in the I/O type) */
    cudnnBackendDescriptor_t pt = cdnn_tensor(b, 0, io, B, H, S, S, H * S * S, S * S, 1, S, 0);
    ops[n++] = cdnn_reshape(b, p, pt);
    ops[n++] = cdnn_matmul(b, pt, dout, dv);
    /* dS = scale * P * (dO V^T - D) */
    cudnnBackendDescriptor_t dp = cdnn_scores(b, f32, B, H, S), t1 = cdnn_scores(b, f32, B, H, S);
    cudnnBackendDescriptor_t t2 = cdnn_scores(b, f32, B, H, S), ds = cdnn_scores(b, f32, B, H, S);
    ops[n++] = cdnn_matmul(b, dout, vt, dp);
    ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_SUB, f32, dp, dsum, NULL, t1, -1);
    ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_MUL, f32, t1, p, NULL, t2, -1);
    ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_MUL, f32, t2, scale, NULL, ds, -1);
    /* dK = dS^T Q */
    cudnnBackendDescriptor_t dst = cdnn_tensor(b, 0, io, B, H, S, S, H * S * S, S * S, 1, S, 0);
    ops[n++] = cdnn_reshape(b, ds, dst);
    ops[n++] = cdnn_matmul(b, dst, q, dk);
    /* dQ = dS K: directly, or accumulated in fp32 and then written to dqkv */
    cudnnBackendDescriptor_t k = cdnn_tensor(b, 0, f32, B, H, S, D, S * C3, D, C3, 1, 0);
    ops[n++] = cdnn_reshape(b, kt, k);
    if (deterministic) ops[n++] = cdnn_matmul(b, ds, k, dq);
    else {
        ops[n++] = cdnn_matmul(b, ds, k, dqacc);
        ops[n++] = cdnn_pointwise(b, CUDNN_POINTWISE_IDENTITY, f32, dqacc, NULL, NULL, dq, -1);
    }
    cdnn_plan(b, handle, ops, n);
}

static void cdnn_plan_free(CdnnPlan *p) {
    for (int i = p->ndesc - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->descs[i]); /* teardown: status ignored */
    memset(p, 0, sizeof *p);
}
/* removes entry p from the cache (the last entry moves into its place) */
static void cdnn_drop(CudnnAttn *ca, CdnnPlan *p) {
    cdnn_plan_free(p);
    CdnnPlan *last = &ca->plans[ca->nplans - 1];
    if (p != last) { *p = *last; memset(last, 0, sizeof *last); }
    ca->nplans--;
    if (ca->evict >= ca->nplans) ca->evict = 0;
}

/* The cached plan of this shape, built on first use; NULL with why filled if it cannot be built. */
static CdnnPlan *cdnn_get_plan(CudnnAttn *ca, int B, int T, int backward, char *why) {
    for (int i = 0; i < ca->nplans; i++) {
        CdnnPlan *p = &ca->plans[i];
        if (p->B == B && p->T == T && p->NH == ca->NH && p->hs == ca->hs && p->backward == backward) return p;
    }
    if ((size_t)B * T > (size_t)ca->Bmax * ca->Tmax) { /* the backward's buffers hold Bmax*Tmax rows */
        snprintf(why, CDNN_WHY, "cuDNN attention: B=%d T=%d exceeds the B*T it was set up for (B=%d T=%d)", B, T,
                 ca->Bmax, ca->Tmax);
        return NULL;
    }
    /* the backward's kernels before cuDNN 9.16 needed the sequence length a multiple of 128 (cudnn-frontend
     * masks the padding itself there; this graph has no padding mask) */
    if (backward && cudnnGetVersion() < 91600 && T % 128 != 0) {
        snprintf(why, CDNN_WHY, "cuDNN attention: the backward with cuDNN %zu needs T %% 128 == 0 (T=%d); cuDNN >= "
                 "9.16 does not", cudnnGetVersion(), T);
        return NULL;
    }
    CdnnPlan *p;
    if (ca->nplans < CDNN_MAX_PLANS) p = &ca->plans[ca->nplans++];
    else {
        p = &ca->plans[ca->evict];
        ca->evict = (ca->evict + 1) % CDNN_MAX_PLANS;
        cdnn_plan_free(p);
    }
    memset(p, 0, sizeof *p);
    p->B = B; p->T = T; p->NH = ca->NH; p->hs = ca->hs; p->backward = backward;
    CdnnBuild b = {p, CUDNN_STATUS_SUCCESS, CDNN_UID_VIRTUAL, why, backward ? "backward" : "forward"};
    if (backward) { /* the deterministic graph first (bitwise-repeatable runs), else the accumulating one */
        p->deterministic = 1;
        cdnn_build_backward(&b, ca->handle, 1);
        if (b.st != CUDNN_STATUS_SUCCESS || !p->plan) {
            snprintf(ca->bwd_note, sizeof ca->bwd_note, "%s", why);
            for (int i = p->ndesc - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->descs[i]); /* status ignored */
            p->ndesc = 0;
            p->plan = NULL;
            p->deterministic = 0;
            b.st = CUDNN_STATUS_SUCCESS;
            b.next_uid = CDNN_UID_VIRTUAL;
            cdnn_build_backward(&b, ca->handle, 0);
        }
    } else
        cdnn_build_forward(&b, ca->handle);
    if (b.st != CUDNN_STATUS_SUCCESS || !p->plan) {
        if (b.st == CUDNN_STATUS_SUCCESS) snprintf(why, CDNN_WHY, "cuDNN %s graph: no execution plan", b.graph);
        cdnn_drop(ca, p);
        return NULL;
    }
    if ((size_t)p->workspace > ca->workspace_bytes) { /* rare: a new shape needs more than any before */
        cudaError_t e = cudaSuccess;
        if (ca->workspace) { /* an execution enqueued earlier may still be reading it */
            e = cudaDeviceSynchronize();
            if (e == cudaSuccess) e = cudaFree(ca->workspace);
        }
        ca->workspace = NULL;
        ca->workspace_bytes = 0;
        if (e == cudaSuccess) e = cudaMalloc(&ca->workspace, (size_t)p->workspace);
        if (e != cudaSuccess) {
            snprintf(why, CDNN_WHY, "cuDNN attention: cannot allocate its %.1f MiB workspace: %s",
                     p->workspace / 1048576.0, cudaGetErrorString(e));
            cudaGetLastError(); /* not sticky: clear it for the next cudaCheckLaunch */
            ca->workspace = NULL;
            cdnn_drop(ca, p);
            return NULL;
        }
        ca->workspace_bytes = (size_t)p->workspace;
    }
    return p;
}

/* variant pack of n (uid, pointer) pairs + the shared workspace, executed on stream s */
static int cdnn_execute(CudnnAttn *ca, CdnnPlan *p, const int64_t *uids, void **ptrs, int n, cudaStream_t s,
                        char *why) {
    const char *gr = p->backward ? "backward" : "forward";
    cudnnStatus_t st = cudnnSetStream(ca->handle, s);
    if (st != CUDNN_STATUS_SUCCESS) { cdnn_why(why, st, "cuDNN attention %s: cudnnSetStream", gr); return 0; }
    cudnnBackendDescriptor_t vp = NULL;
    st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (st != CUDNN_STATUS_SUCCESS) { cdnn_why(why, st, "cuDNN attention %s: variant pack", gr); return 0; }
    const char *what = "variant pack unique ids";
    st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (st == CUDNN_STATUS_SUCCESS) {
        what = "variant pack data pointers";
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        what = "variant pack workspace";
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ca->workspace);
    }
    if (st == CUDNN_STATUS_SUCCESS) { what = "variant pack finalize"; st = cudnnBackendFinalize(vp); }
    if (st == CUDNN_STATUS_SUCCESS) { what = "cudnnBackendExecute"; st = cudnnBackendExecute(ca->handle, p->plan, vp); }
    if (st != CUDNN_STATUS_SUCCESS) cdnn_why(why, st, "cuDNN attention %s (B=%d T=%d): %s", gr, p->B, p->T, what);
    cudnnBackendDestroyDescriptor(vp); /* teardown: status ignored */
    return st == CUDNN_STATUS_SUCCESS;
}

/* ---------------------------------------------------------------- public */

/* 1 for the cuDNN releases whose bf16 fused attention forward is known to compute wrong results (9.10.0 and
 * 9.10.1; issue 35); cudnn_attention_init refuses them, so a model on one of them runs cuBLAS attention.
 * v is cudnnGetVersion()'s 9.x encoding, major*10000 + minor*100 + patch. */
static inline int cudnn_version_known_bad(size_t v) { return v >= 91000 && v <= 91001; }

/* Floats between two layers' statistics when a model keeps them in one buffer: B*NH*T rounded up to a multiple
 * of 4, so every layer's pointer has the 16-byte alignment the stats tensor descriptor declares
 * (CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT 16; B*NH*T alone is not a multiple of 4 when, say, B=1, NH=3, T=67). */
static inline size_t cudnn_attention_stats_stride(int B, int NH, int T) { return ((size_t)B * NH * T + 3) / 4 * 4; }

/* Releases everything cudnn_attention_init set up (safe on a failed or zeroed one). */
static void cudnn_attention_free(CudnnAttn *ca) {
    for (int i = 0; i < ca->nplans; i++) cdnn_plan_free(&ca->plans[i]);
    if (ca->workspace) cudaCheck(cudaFree(ca->workspace));
    if (ca->softmax_sum) cudaCheck(cudaFree(ca->softmax_sum));
    if (ca->dq_accum) cudaCheck(cudaFree(ca->dq_accum));
    if (ca->handle) cudnnDestroy(ca->handle); /* teardown: status ignored */
    memset(ca, 0, sizeof *ca);
}

/* whether a forward plan of this shape is cached (an inference-only forward at a new shape does not build one) */
static int cudnn_attention_has_plan(const CudnnAttn *ca, int B, int T) {
    for (int i = 0; i < ca->nplans; i++) {
        const CdnnPlan *p = &ca->plans[i];
        if (p->B == B && p->T == T && !p->backward) return 1;
    }
    return 0;
}

/* 1 if the backward plan of (B, T) (cached) writes dQ directly: bitwise-repeatable; 0 if it accumulates */
static int cudnn_attention_deterministic(const CudnnAttn *ca, int B, int T) {
    for (int i = 0; i < ca->nplans; i++) {
        const CdnnPlan *p = &ca->plans[i];
        if (p->B == B && p->T == T && p->backward) return p->deterministic;
    }
    return 0;
}

/* Sets up cuDNN attention for shapes up to (Bmax, Tmax) with NH heads of size hs: a handle, the backward's fp32
 * row buffer (Bmax*NH*Tmax*4 bytes; the non-deterministic backward adds hs times that on first use), and the
 * forward and backward plans of (Bmax, Tmax), so a graph cuDNN cannot run shows at start-up. Returns 1, or 0 with
 * why filled (everything released). */
static int cudnn_attention_init(CudnnAttn *ca, int Bmax, int Tmax, int NH, int hs, char *why) {
    memset(ca, 0, sizeof *ca);
    ca->Bmax = Bmax; ca->Tmax = Tmax; ca->NH = NH; ca->hs = hs;
    ca->scale = 1.0f / sqrtf((float)hs);
    ca->one = 1.0f;
    ca->neg_big = -FLT_MAX; /* what cudnn-frontend uses for a masked score before cuDNN 9.10 (-inf after) */
    if (cudnnGetVersion() < 90000) {
        snprintf(why, CDNN_WHY, "cuDNN attention needs cuDNN >= 9.0 at run time, found %zu", cudnnGetVersion());
        return 0;
    }
    if (cudnn_version_known_bad(cudnnGetVersion())) {
        size_t v = cudnnGetVersion();
        snprintf(why, CDNN_WHY, "cuDNN %zu.%zu.%zu is known to compute the bf16 attention forward wrongly (9.10.0 "
                 "and 9.10.1); install another cuDNN 9 (9.10.2 or newer) for cuDNN attention", v / 10000, v % 10000 / 100, v % 100);
        return 0;
    }
    cudnnStatus_t st = cudnnCreate(&ca->handle);
    if (st != CUDNN_STATUS_SUCCESS) { ca->handle = NULL; cdnn_why(why, st, "cudnnCreate"); return 0; }
    size_t rows = (size_t)Bmax * NH * Tmax;
    cudaError_t e = cudaMalloc((void **)&ca->softmax_sum, rows * sizeof(float));
    if (e != cudaSuccess) {
        snprintf(why, CDNN_WHY, "cuDNN attention: cannot allocate %.1f MiB for its backward buffer: %s",
                 rows * 4 / 1048576.0, cudaGetErrorString(e));
    }
    if (e == cudaSuccess && cdnn_get_plan(ca, Bmax, Tmax, 0, why) && cdnn_get_plan(ca, Bmax, Tmax, 1, why)) return 1;
    cudaGetLastError(); /* a failed cudaMalloc is not sticky; clear it for the next cudaCheckLaunch */
    cudnn_attention_free(ca);
    return 0;
}

/* out (B,T,C) = causal attention of qkv (B,T,3C); stats (B,NH,T) fp32 = the row log-sum-exp L of the scaled
 * masked scores, for the backward. B, T up to the init's. Returns 1, or 0 with why filled. */
static int cudnn_attention_forward(CudnnAttn *ca, floatX *out, float *stats, const floatX *qkv, int B, int T,
                                   cudaStream_t s, char *why) {
    CdnnPlan *p = cdnn_get_plan(ca, B, T, 0, why);
    if (!p) return 0;
    size_t C = (size_t)ca->NH * ca->hs;
    int64_t uids[] = {CDNN_UID_Q, CDNN_UID_K, CDNN_UID_V, CDNN_UID_O, CDNN_UID_STATS, CDNN_UID_SCALE, CDNN_UID_NEG};
    void *ptrs[] = {(void *)qkv, (void *)(qkv + C), (void *)(qkv + 2 * C), out, stats, &ca->scale, &ca->neg_big};
    return cdnn_execute(ca, p, uids, ptrs, 7, s, why);
}

/* dqkv (B,T,3C) OVERWRITTEN with d(loss)/d(qkv), from dout (B,T,C) and the forward's input qkv, output out and
 * stats. Returns 1, or 0 with why filled. */
static int cudnn_attention_backward(CudnnAttn *ca, floatX *dqkv, const floatX *dout, const floatX *out,
                                    const float *stats, const floatX *qkv, int B, int T, cudaStream_t s, char *why) {
    CdnnPlan *p = cdnn_get_plan(ca, B, T, 1, why);
    if (!p) return 0;
    size_t C = (size_t)ca->NH * ca->hs;
    /* cuDNN >= 9.6 clears its dQ accumulator itself; older versions expect zeros (cudnn-frontend memsets it) */
    cudaError_t e = cudaSuccess;
    if (!p->deterministic && !ca->dq_accum) /* sized for the largest shape, once */
        e = cudaMalloc((void **)&ca->dq_accum, (size_t)ca->Bmax * ca->Tmax * C * sizeof(float));
    if (e == cudaSuccess && !p->deterministic)
        e = cudaMemsetAsync(ca->dq_accum, 0, (size_t)B * T * C * sizeof(float), s);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* not sticky: clear it for the next cudaCheckLaunch */
        snprintf(why, CDNN_WHY, "cuDNN attention backward: clearing the dQ accumulator: %s", cudaGetErrorString(e));
        return 0;
    }
    int64_t uids[] = {CDNN_UID_Q, CDNN_UID_K, CDNN_UID_V, CDNN_UID_O, CDNN_UID_DO, CDNN_UID_STATS, CDNN_UID_DQ,
                      CDNN_UID_DK, CDNN_UID_DV, CDNN_UID_SCALE, CDNN_UID_ONE, CDNN_UID_NEG, CDNN_UID_SUM,
                      CDNN_UID_DQACC};
    void *ptrs[] = {(void *)qkv, (void *)(qkv + C), (void *)(qkv + 2 * C), (void *)out, (void *)dout,
                    (void *)stats, dqkv, dqkv + C, dqkv + 2 * C, &ca->scale, &ca->one, &ca->neg_big,
                    ca->softmax_sum, ca->dq_accum};
    return cdnn_execute(ca, p, uids, ptrs, p->deterministic ? 13 : 14, s, why); /* DQACC last: only if used */
}

#endif /* ENABLE_CUDNN && !ENABLE_FP32 */
#endif
