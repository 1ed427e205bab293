/* GEMMs through cuBLASLt. Row-major C = alpha op(A) op(B) + beta C is computed as the
 * column-major product C^T = op(B)^T op(A)^T: cuBLASLt's "A" is our B and its "B" our A,
 * each stored matrix read in place (a row-major r x c matrix with row stride ld is a
 * column-major c x r matrix with leading dimension ld).
 *
 * Plans (descriptors, layouts and the heuristic's algorithm) are cached by shape, strides,
 * mode and operand alignment (the views into the flat parameter buffer are often only
 * 4-byte aligned, and an algorithm chosen for 256-byte alignment must not see them).
 *
 * BF16 mode converts the operands to bf16 (bf16.h's rounding) in a staging workspace,
 * in slabs along K when they do not fit: C = alpha sum_k op(A)[:, k] op(B)[k, :] + beta C,
 * the first slab with the caller's beta, the others with 1. The head's bf16-storage GEMMs
 * (end of file) write a bf16 C (blocks of C, never slabs of K: one rounding) or read a bf16
 * A in place.
 *
 * kernels.h's fused linear ops (linear_forward / linear_backward, bf16 mode) live in linear.c,
 * built from this file's calls and staging as gemm_internal.h exports them. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "core/core.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/gemm_internal.h"

#define LT_WORKSPACE ((size_t)32 << 20)  /* cuBLASLt's own (32 MiB suits Hopper) */
#define PLAN_SLOTS 1024                   /* cached plans (open addressing) */

typedef struct {
    int mode, ta, tb, M, N, K, lda, ldb, ldc, batch;
    long long sA, sB, sC;
    int alA, alB, alC; /* operand alignment in bytes (capped at 256) */
    int out16;         /* C stored bf16 (the head's gemm_out16) */
    int bias;          /* the bias epilogue (linear_forward): D = op(A) op(B) + beta C + bias;
                        * 2: a bf16 bias vector (a bf16 D's: cuBLASLt's bias takes D's type) */
    int alBias;        /* the bias vector's alignment in bytes (the heuristic reads it) */
    int gelu;          /* cu_matmul_gelu's: 0 none, CU_GELU_FORWARD or _BACKWARD (aux bf16);
                        * CU_BGRADB: cu_matmul_bgrad's (the bias pointer its output) */
    int alAux;         /* the aux matrix's alignment in bytes */
    long long ldAux;   /* its leading dimension in elements */
} plan_key;

typedef struct {
    int used, none; /* none: cuBLASLt has no algorithm for this key (remembered) */
    plan_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} plan;

static struct {
    pthread_mutex_t mu;
    cublasLtHandle_t lt;
    void *workspace;
    uint16_t *staging;
    size_t staging_bytes; /* for the bf16 copies of both operands (tr_cuda_staging_bytes) */
    plan *plans;
    int n_plans;
    int fast; /* TRIDENT_CUDA_GEMM=fast: BF16 mode uses 32F_FAST_16BF instead of staging */
    long epi_ran, epi_refused; /* GELU / BGRADB GEMMs run, refused (tr_cuda_epilogue_counts) */
} G = {.mu = PTHREAD_MUTEX_INITIALIZER};

int cu_gemm_init(size_t staging_bytes)
{
    if (cublasLtCreate(&G.lt) != CUBLAS_STATUS_SUCCESS)
        return tr_fail(TR_ERR_INTERNAL, "cuda: cublasLtCreate failed");
    G.staging_bytes = staging_bytes;
    if (cudaMalloc(&G.workspace, LT_WORKSPACE) != cudaSuccess ||
        cudaMalloc((void **)&G.staging, G.staging_bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return tr_fail(TR_ERR_NOMEM, "cuda: cannot allocate the GEMM workspaces (%zu MiB)",
                       (LT_WORKSPACE + G.staging_bytes) >> 20);
    }
    G.plans = calloc(PLAN_SLOTS, sizeof *G.plans);
    if (!G.plans)
        return tr_fail(TR_ERR_NOMEM, "cuda: out of memory for GEMM plans");
    G.fast = cu_env_is("TRIDENT_CUDA_GEMM", "fast");
    return TR_OK;
}

size_t cu_gemm_workspace_bytes(void) { return LT_WORKSPACE + G.staging_bytes; }

uint16_t *cu_gemm_staging(void) { return G.staging; }
size_t cu_gemm_staging_elems(void) { return G.staging_bytes / sizeof(uint16_t); }
int cu_gemm_fast(void) { return G.fast; }

/* Largest power of two (<= 256) dividing the address and every batch offset. */
static int alignment(const void *p, long long stride_elems, int elem_bytes)
{
    uintptr_t x = (uintptr_t)p | (uintptr_t)(stride_elems * elem_bytes) | 256u;
    return (int)(x & (~x + 1));
}

static uint64_t hash_key(const plan_key *k)
{
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void plan_destroy(plan *p)
{
    if (p->a)
        cublasLtMatrixLayoutDestroy(p->a);
    if (p->b)
        cublasLtMatrixLayoutDestroy(p->b);
    if (p->c)
        cublasLtMatrixLayoutDestroy(p->c);
    if (p->desc)
        cublasLtMatmulDescDestroy(p->desc);
    memset(p, 0, sizeof *p);
}

static int layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int rows, int cols, int ld,
                  int batch, long long stride)
{
    if (cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld) !=
        CUBLAS_STATUS_SUCCESS)
        return -1;
    if (batch > 1) {
        int32_t bc = batch;
        int64_t so = stride;
        if (cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc,
                                             sizeof bc) != CUBLAS_STATUS_SUCCESS ||
            cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                             &so, sizeof so) != CUBLAS_STATUS_SUCCESS)
            return -1;
    }
    return 0;
}

/* Build descriptors and pick the algorithm; 0 on success. */
static int plan_make(plan *p, const plan_key *k)
{
    memset(p, 0, sizeof *p);
    p->key = *k;
    cublasComputeType_t compute = k->mode == CU_GEMM_FAST_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                                                   : CUBLAS_COMPUTE_32F;
    cudaDataType_t in = k->mode == CU_GEMM_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasOperation_t op_a = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's A = our B */
    cublasOperation_t op_b = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's B = our A */
    if (cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
                                       sizeof op_a) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
                                       sizeof op_b) != CUBLAS_STATUS_SUCCESS)
        goto fail;
    /* the bias epilogue: a vector of D's rows (column-major D is our C^T: one per column
     * of our C, an output feature), broadcast over its columns (our rows, the tokens); the
     * GELU ones (cu_matmul_gelu) with a bf16 aux matrix laid out as D */
    cublasLtEpilogue_t epi = k->gelu == CU_GELU_FORWARD
                                 ? (k->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                            : CUBLASLT_EPILOGUE_GELU_AUX)
                             : k->gelu == CU_GELU_BACKWARD ? CUBLASLT_EPILOGUE_DGELU
                             : k->gelu == CU_BGRADB        ? CUBLASLT_EPILOGUE_BGRADB
                                                           : CUBLASLT_EPILOGUE_BIAS;
    int aux = k->gelu == CU_GELU_FORWARD || k->gelu == CU_GELU_BACKWARD;
    /* (the aux matrix takes D's type, bf16: cuBLASLt refuses a type set for it but in fp8) */
    cudaDataType_t bias_type = k->bias == 2 ? CUDA_R_16BF : CUDA_R_32F;
    /* the heuristic takes the bias pointer's value for its alignment (it does not read it):
     * a stand-in with the key's alignment, the real one set per call (matmul_bias); the aux
     * pointer likewise */
    const void *bias_like = (const void *)(uintptr_t)(k->alBias ? k->alBias : 256);
    const void *aux_like = (const void *)(uintptr_t)(k->alAux ? k->alAux : 256);
    int64_t ld_aux = k->ldAux;
    if ((k->bias || k->gelu) &&
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                       sizeof epi) != CUBLAS_STATUS_SUCCESS)
        goto fail;
    if (aux &&
        (cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                        &aux_like, sizeof aux_like) != CUBLAS_STATUS_SUCCESS ||
         cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux,
                                        sizeof ld_aux) != CUBLAS_STATUS_SUCCESS))
        goto fail;
    if (k->bias && (cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                   &bias_type, sizeof bias_type) !=
                        CUBLAS_STATUS_SUCCESS ||
                    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &bias_like, sizeof bias_like) !=
                        CUBLAS_STATUS_SUCCESS))
        goto fail;
    /* our B: stored (tb ? N x K : K x N) row-major = column-major (tb ? K x N : N x K) */
    if (layout(&p->a, in, k->tb ? k->K : k->N, k->tb ? k->N : k->K, k->ldb, k->batch, k->sB) ||
        /* our A: stored (ta ? K x M : M x K) row-major = column-major (ta ? M x K : K x M) */
        layout(&p->b, in, k->ta ? k->M : k->K, k->ta ? k->K : k->M, k->lda, k->batch, k->sA) ||
        layout(&p->c, k->out16 ? CUDA_R_16BF : CUDA_R_32F, k->N, k->M, k->ldc, k->batch, k->sC))
        goto fail;
    cublasLtMatmulPreference_t pref = NULL;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
        goto fail;
    uint64_t ws = LT_WORKSPACE;
    uint32_t al_a = (uint32_t)k->alB, al_b = (uint32_t)k->alA, al_c = (uint32_t)k->alC;
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    int ok =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &al_a, sizeof al_a) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &al_b, sizeof al_b) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &al_c, sizeof al_c) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &al_c, sizeof al_c) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoGetHeuristic(G.lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &res,
                                       &got) == CUBLAS_STATUS_SUCCESS &&
        got > 0;
    cublasLtMatmulPreferenceDestroy(pref);
    if (!ok)
        goto fail;
    p->algo = res.algo;
    p->used = 1;
    return 0;
fail:
    plan_destroy(p);
    return -1;
}

/* Fill slot p for k: a plan, or a remembered "none". */
static plan *plan_fill(plan *p, const plan_key *k)
{
    if (plan_make(p, k)) {
        p->used = p->none = 1;
        p->key = *k;
    }
    G.n_plans++;
    return p->none ? NULL : p;
}

/* The cached plan for k (made on first use); NULL when cuBLASLt has none. Locked. */
static plan *plan_get(const plan_key *k)
{
    uint64_t h = hash_key(k);
    for (int probe = 0; probe < PLAN_SLOTS; probe++) {
        plan *p = &G.plans[(h + (uint64_t)probe) % PLAN_SLOTS];
        if (p->used && !memcmp(&p->key, k, sizeof *k))
            return p->none ? NULL : p;
        if (!p->used) {
            if (G.n_plans >= PLAN_SLOTS * 3 / 4) /* keep probes short: start over when full */
                break;
            return plan_fill(p, k);
        }
    }
    for (int i = 0; i < PLAN_SLOTS; i++)
        if (G.plans[i].used)
            plan_destroy(&G.plans[i]);
    G.n_plans = 0;
    return plan_fill(&G.plans[h % PLAN_SLOTS], k);
}

static void describe(char *buf, size_t n, const plan_key *k)
{
    snprintf(buf, n, "gemm (mode %d, ta %d, tb %d, M %d, N %d, K %d, lda %d, ldb %d, ldc %d, "
                     "batch %d, alignment %d/%d/%d%s%s%s)",
             k->mode, k->ta, k->tb, k->M, k->N, k->K, k->lda, k->ldb, k->ldc, k->batch, k->alA,
             k->alB, k->alC, k->out16 ? ", bf16 output" : "",
             k->gelu == CU_BGRADB ? ", BGRADB epilogue" : k->bias ? ", bias epilogue" : "",
             k->gelu && k->gelu != CU_BGRADB ? ", GELU epilogue" : "");
}

/* One cuBLASLt call on operands already in the mode's element type, C fp32 or (out16) bf16:
 * C = alpha op(A) op(B) + beta Cin [+ bias], Cin (NULL: C itself) read as cuBLASLt's C and C
 * written as its D (the same layout), so a residual needs no copy into C first. Returns 0, or
 * -1 when cuBLASLt has no algorithm for it (nothing launched or noted: the caller may fall
 * back); a failure of the call itself is noted. */
static int matmul_epi(cudaStream_t st, cu_gemm_mode mode, int ta, int tb, int M, int N, int K,
                      float alpha, const void *A, int lda, long long sA, const void *B, int ldb,
                      long long sB, float beta, void *C, const void *Cin, int out16, int ldc,
                      long long sC, int batch, const void *bias, int gelu, const void *aux,
                      int ld_aux)
{
    if (!Cin)
        Cin = C;
    int es = mode == CU_GEMM_BF16 ? 2 : 4;
    plan_key k;
    memset(&k, 0, sizeof k); /* the key is hashed and compared as bytes */
    k.mode = mode, k.ta = ta, k.tb = tb, k.M = M, k.N = N, k.K = K;
    k.lda = lda, k.ldb = ldb, k.ldc = ldc, k.batch = batch, k.out16 = out16;
    k.bias = bias ? (out16 ? 2 : 1) : 0; /* a bf16 output's bias is bf16 too */
    k.sA = batch > 1 ? sA : 0, k.sB = batch > 1 ? sB : 0, k.sC = batch > 1 ? sC : 0;
    k.alA = alignment(A, k.sA, es), k.alB = alignment(B, k.sB, es);
    k.alC = alignment(C, k.sC, out16 ? 2 : 4);
    int al_in = alignment(Cin, k.sC, out16 ? 2 : 4); /* the plan serves both: the lesser */
    if (al_in < k.alC)
        k.alC = al_in;
    k.alBias = bias ? alignment(bias, 0, out16 ? 2 : 4) : 0;
    k.gelu = gelu, k.alAux = aux ? alignment(aux, 0, 2) : 0, k.ldAux = aux ? ld_aux : 0;
    pthread_mutex_lock(&G.mu);
    plan *p = plan_get(&k);
    cublasStatus_t s = CUBLAS_STATUS_NOT_SUPPORTED;
    if (p && bias && /* the plan's descriptor is shared: its bias pointer set per call */
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                       sizeof bias) != CUBLAS_STATUS_SUCCESS)
        p = NULL;
    if (p && aux && /* and its aux pointer */
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                       sizeof aux) != CUBLAS_STATUS_SUCCESS)
        p = NULL;
    if (p)
        s = cublasLtMatmul(G.lt, p->desc, &alpha, B, p->a, A, p->b, &beta, Cin, p->c, C, p->c,
                           &p->algo, G.workspace, LT_WORKSPACE, st);
    if (p && s != CUBLAS_STATUS_SUCCESS && (bias || gelu))
        p->none = 1; /* refused: the key's later calls go straight to the fallback */
    if (gelu)
        G.epi_ran += s == CUBLAS_STATUS_SUCCESS, G.epi_refused += s != CUBLAS_STATUS_SUCCESS;
    pthread_mutex_unlock(&G.mu);
    if (!p)
        return -1;
    if (s != CUBLAS_STATUS_SUCCESS && (bias || gelu))
        return -1; /* the caller runs it without the epilogue (a refused call launches nothing) */
    if (s != CUBLAS_STATUS_SUCCESS) {
        char what[256];
        describe(what, sizeof what, &k);
        cu_note(cudaErrorUnknown, what);
    }
    return 0;
}

int cu_matmul_from(cudaStream_t st, cu_gemm_mode mode, int ta, int tb, int M, int N, int K,
                   float alpha, const void *A, int lda, long long sA, const void *B, int ldb,
                   long long sB, float beta, void *C, const void *Cin, int out16, int ldc,
                   long long sC, int batch, const void *bias)
{
    return matmul_epi(st, mode, ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, Cin,
                      out16, ldc, sC, batch, bias, 0, NULL, 0);
}

/* C16 (M, N, row stride ldc) = epilogue(op(A) op(B) [+ bias16]) on bf16 operands (BF16 mode),
 * beta 0, with cuBLASLt's GELU epilogues: CU_GELU_FORWARD writes gelu of the sum to C16 and
 * the sum itself to aux (GELU_AUX_BIAS); CU_GELU_BACKWARD writes gelu'(aux) times the product
 * to C16 (DGELU). aux: bf16, M x N with row stride ld_aux (a multiple of 8). 0, or -1 when
 * cuBLASLt has no algorithm or refuses the call (nothing launched: the caller falls back). */
int cu_matmul_gelu(cudaStream_t st, int gelu, int ta, int tb, int M, int N, int K,
                   const uint16_t *A, int lda, const uint16_t *B, int ldb, uint16_t *C16, int ldc,
                   const uint16_t *bias16, const uint16_t *aux, int ld_aux)
{
    if (ld_aux % 8 || ld_aux < N || (gelu == CU_GELU_BACKWARD && bias16))
        return -1;
    return matmul_epi(st, CU_GEMM_BF16, ta, tb, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, 0.0f, C16,
                      NULL, 1, ldc, 0, 1, bias16, gelu, aux, ld_aux);
}

/* C (M, N, fp32) = op(A) op(B) + beta C on bf16 operands (BF16 mode), and colsum[m] = sum_k
 * op(A)[m, k] (overwritten: M floats) in cuBLASLt's BGRADB epilogue (its B is our A): a
 * weight gradient dW = dy^T x with its bias gradient's column sums of dy. 0, or -1 when no
 * algorithm has it (nothing launched). */
int cu_matmul_bgrad(cudaStream_t st, int ta, int tb, int M, int N, int K, const uint16_t *A,
                    int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc,
                    float *colsum)
{
    return matmul_epi(st, CU_GEMM_BF16, ta, tb, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, beta, C,
                      NULL, 0, ldc, 0, 1, colsum, CU_BGRADB, NULL, 0);
}

static int matmul_bias(cudaStream_t st, cu_gemm_mode mode, int ta, int tb, int M, int N, int K,
                       float alpha, const void *A, int lda, long long sA, const void *B,
                       int ldb, long long sB, float beta, void *C, int out16, int ldc,
                       long long sC, int batch, const float *bias)
{
    return cu_matmul_from(st, mode, ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, NULL,
                          out16, ldc, sC, batch, bias);
}

/* C (rows x cols, row stride ldc) = C0: what a fallback that cannot read C0 as cuBLASLt's C
 * does first (C0 NULL or C: nothing) */
void cu_gemm_copy_in(cudaStream_t st, float *C, const float *C0, int rows, int cols, int ldc)
{
    if (!C0 || C0 == C)
        return;
    size_t pitch = (size_t)ldc * sizeof(float);
    cu_note(cudaMemcpy2DAsync(C, pitch, C0, pitch, (size_t)cols * sizeof(float), (size_t)rows,
                              cudaMemcpyDeviceToDevice, st),
            "gemm (C from its input)");
}

int cu_matmul_to(cudaStream_t st, cu_gemm_mode mode, int ta, int tb, int M, int N, int K,
                 float alpha, const void *A, int lda, long long sA, const void *B, int ldb,
                 long long sB, float beta, void *C, int out16, int ldc, long long sC, int batch)
{
    return matmul_bias(st, mode, ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, out16,
                       ldc, sC, batch, NULL);
}

int cu_matmul(cudaStream_t st, cu_gemm_mode mode, int ta, int tb, int M, int N, int K, float alpha,
              const void *A, int lda, long long sA, const void *B, int ldb, long long sB,
              float beta, float *C, int ldc, long long sC, int batch)
{
    return cu_matmul_to(st, mode, ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, 0, ldc,
                        sC, batch);
}

/* fp32 operands: mode FAST_BF16 (falling back to FP32 when cuBLASLt has no algorithm for
 * these strides and alignments) or FP32; noted as an error when neither has one. */
static void matmul_f32(cudaStream_t st, cu_gemm_mode mode, int ta, int tb, int M, int N,
                       int K, float alpha, const float *A, int lda, long long sA, const float *B,
                       int ldb, long long sB, float beta, float *C, int ldc, long long sC,
                       int batch)
{
    if (mode == CU_GEMM_FAST_BF16 && !cu_matmul(st, mode, ta, tb, M, N, K, alpha, A, lda, sA, B,
                                                ldb, sB, beta, C, ldc, sC, batch))
        return;
    if (!cu_matmul(st, CU_GEMM_FP32, ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc,
                   sC, batch))
        return;
    plan_key k = {.mode = mode, .ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda,
                  .ldb = ldb, .ldc = ldc, .batch = batch};
    char what[256];
    describe(what, sizeof what, &k);
    cu_note(cudaErrorNotSupported, what);
}

/* BF16 mode: operands converted into the staging buffer, in slabs of K. With bias, the
 * first slab tries the bias epilogue; returns whether the bias was added. C0 (NULL: C): the
 * matrix beta scales, read by the first slab (a residual: no copy into C first). */
int cu_gemm_staged(cudaStream_t st, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C,
                   const float *C0, int ldc, const float *bias)
{
    int biased = 0;
    size_t cap = G.staging_bytes / sizeof(uint16_t) - 128; /* room for B's 256-byte start */
    size_t per_k = (size_t)M + (size_t)N;
    size_t kc = cap / per_k;
    if (kc >= 64)
        kc &= ~(size_t)63;
    if (kc < 16) { /* operands too wide to stage even 16 columns: let cuBLASLt round */
        cu_gemm_copy_in(st, C, C0, M, N, ldc);
        matmul_f32(st, CU_GEMM_FAST_BF16, ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta,
                   C, ldc, 0, 1);
        return 0;
    }
    if (kc > (size_t)K)
        kc = (size_t)K;
    uint16_t *sa = G.staging;
    /* the B slab starts on a 256-byte boundary after A's */
    size_t a_elems = cu_align128((size_t)M * kc);
    for (int k0 = 0; k0 < K; k0 += (int)kc) {
        int w = K - k0 < (int)kc ? K - k0 : (int)kc;
        uint16_t *sb = sa + a_elems;
        /* op(A)[:, k0:k0+w]: ta ? rows k0.. of the stored K x M : columns k0.. of M x K */
        if (ta)
            cu_pack_bf16(st, sa, A + (size_t)k0 * lda, w, M, lda);
        else
            cu_pack_bf16(st, sa, A + k0, M, w, lda);
        /* op(B)[k0:k0+w, :]: tb ? columns k0.. of the stored N x K : rows k0.. of K x N */
        if (tb)
            cu_pack_bf16(st, sb, B + k0, N, w, ldb);
        else
            cu_pack_bf16(st, sb, B + (size_t)k0 * ldb, w, N, ldb);
        float b = k0 == 0 ? beta : 1.0f;
        const float *cin = k0 == 0 ? C0 : NULL;
        if (k0 == 0 && bias)
            biased = !cu_matmul_from(st, CU_GEMM_BF16, ta, tb, M, N, w, alpha, sa, ta ? M : w, 0,
                                     sb, tb ? w : N, 0, b, C, cin, 0, ldc, 0, 1, bias);
        if (k0 == 0 && biased)
            continue;
        if (!cu_matmul_from(st, CU_GEMM_BF16, ta, tb, M, N, w, alpha, sa, ta ? M : w, 0, sb,
                            tb ? w : N, 0, b, C, cin, 0, ldc, 0, 1, NULL))
            continue;
        /* no bf16 algorithm for these shapes: this slab on the fp32 operands */
        cu_gemm_copy_in(st, C, cin, M, N, ldc);
        matmul_f32(st, CU_GEMM_FAST_BF16, ta, tb, M, N, w, alpha,
                       ta ? A + (size_t)k0 * lda : A + k0, lda, 0,
                       tb ? B + k0 : B + (size_t)k0 * ldb, ldb, 0, b, C, ldc, 0, 1);
    }
    return biased;
}

void cu_gemm_ex(cudaStream_t st, cu_gemm_mode mode, int trans_a, int trans_b, int M,
                   int N, int K, float alpha, const float *A, int lda, long long sA,
                   const float *B, int ldb, long long sB, float beta, float *C, int ldc,
                   long long sC, int batch)
{
    if (M <= 0 || N <= 0 || batch <= 0)
        return;
    if (K <= 0 || alpha == 0.0f) { /* BLAS semantics: C = beta C (beta 0 writes zeros) */
        for (int i = 0; i < batch; i++)
            cu_scale_2d(st, C + (size_t)i * (size_t)sC, M, N, ldc, beta);
        return;
    }
    if (mode == CU_GEMM_BF16 && G.fast)
        mode = CU_GEMM_FAST_BF16;
    if (mode == CU_GEMM_BF16) {
        for (int i = 0; i < batch; i++)
            cu_gemm_staged(st, trans_a, trans_b, M, N, K, alpha, A + (size_t)i * (size_t)sA, lda,
                           B + (size_t)i * (size_t)sB, ldb, beta, C + (size_t)i * (size_t)sC, NULL,
                           ldc, NULL);
        return;
    }
    matmul_f32(st, mode, trans_a, trans_b, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc,
               sC, batch);
}

void cu_gemm_fp32(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc)
{
    cu_gemm_ex(cu_shared_stream(s, "gemm"), CU_GEMM_FP32, trans_a, trans_b, M, N, K, alpha, A, lda, 0,
                  B, ldb, 0, beta, C, ldc, 0, 1);
}

void cu_gemm_bf16(tr_stream s, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc)
{
    cu_gemm_ex(cu_shared_stream(s, "gemm"), CU_GEMM_BF16, trans_a, trans_b, M, N, K, alpha, A, lda, 0,
                  B, ldb, 0, beta, C, ldc, 0, 1);
}

/* ---- the head's bf16-storage GEMMs (kernels.h's gemm_out16, gemm_a16) */

void cu_gemm_note_none(const char *op, int M, int N, int K)
{
    char what[160];
    snprintf(what, sizeof what, "%s (M %d, N %d, K %d): no cuBLASLt algorithm or staging room",
             op, M, N, K);
    cu_note(cudaErrorNotSupported, what);
}

/* C (fp32, beta) or C16 (bf16) = alpha op(A) op(B), each operand fp32 (staged whole along K,
 * so each result is rounded once) or bf16 (A16, B16: read in place); in blocks of C's rows
 * and columns when the staged operands do not fit together. what names the op. */
static void gemm_mixed(cudaStream_t st, const char *what, int ta, int tb, int M, int N, int K,
                       float alpha, const float *A, const uint16_t *A16, int lda,
                       const float *B, const uint16_t *B16, int ldb, float beta, float *C,
                       uint16_t *C16, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0 || alpha == 0.0f) {
        if (C16)
            cu_note(cudaMemset2DAsync(C16, (size_t)ldc * 2, 0, (size_t)N * 2, (size_t)M, st),
                    what);
        else
            cu_scale_2d(st, C, M, N, ldc, beta);
        return;
    }
    /* staged bf16 elements per row of op(A), per column of op(B) (0: read in place) */
    size_t ka = A ? (size_t)K : 0, kb = B ? (size_t)K : 0;
    size_t cap = G.staging_bytes / sizeof(uint16_t) - 128, mb = (size_t)M, nb = (size_t)N;
    if ((size_t)M * ka + (size_t)N * kb > cap) {
        size_t cap_a = kb ? cap / 2 : cap; /* A's blocks take half when B is staged too */
        if (ka)
            mb = (size_t)M * ka <= cap_a ? (size_t)M : cap_a / ka;
        if (kb)
            nb = (cap - mb * ka) / kb;
        nb = nb > (size_t)N ? (size_t)N : nb;
    }
    if (mb >= 8 && mb < (size_t)M) /* blocks of whole 8 rows and columns: C's blocks stay */
        mb &= ~(size_t)7;         /* 16-byte aligned where C is */
    if (nb >= 8 && nb < (size_t)N)
        nb &= ~(size_t)7;
    if (mb < 1 || nb < 1) {
        cu_gemm_note_none(what, M, N, K);
        return;
    }
    uint16_t *sa = G.staging, *sb = sa + cu_align128(mb * ka);
    for (int i0 = 0; i0 < M; i0 += (int)mb) {
        int m = M - i0 < (int)mb ? M - i0 : (int)mb, la = lda;
        /* op(A) rows i0..: columns i0.. of the stored K x M, or rows i0.. of M x K */
        const uint16_t *a = A16 ? (ta ? A16 + i0 : A16 + (size_t)i0 * lda) : sa;
        if (A && ta)
            cu_pack_bf16(st, sa, A + i0, K, m, lda), la = m;
        else if (A)
            cu_pack_bf16(st, sa, A + (size_t)i0 * lda, m, K, lda), la = K;
        for (int j0 = 0; j0 < N; j0 += (int)nb) {
            int n = N - j0 < (int)nb ? N - j0 : (int)nb, lb = ldb;
            /* op(B) columns j0..: rows j0.. of the stored N x K, or columns j0.. of K x N */
            const uint16_t *b = B16 ? (tb ? B16 + (size_t)j0 * ldb : B16 + j0) : sb;
            if (B && tb)
                cu_pack_bf16(st, sb, B + (size_t)j0 * ldb, n, K, ldb), lb = K;
            else if (B)
                cu_pack_bf16(st, sb, B + j0, K, n, ldb), lb = n;
            void *c = C16 ? (void *)(C16 + (size_t)i0 * ldc + j0)
                          : (void *)(C + (size_t)i0 * ldc + j0);
            if (cu_matmul_to(st, CU_GEMM_BF16, ta, tb, m, n, K, alpha, a, la, 0, b, lb, 0,
                             C16 ? 0.0f : beta, c, C16 != NULL, ldc, 0, 1))
                cu_gemm_note_none(what, m, n, K);
        }
    }
}

/* C16 = alpha op(A) op(B): both operands staged whole along K (each result rounded to bf16
 * once), in blocks of C's rows and columns when they do not fit the staging together. */
void cu_gemm_out16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, uint16_t *C16, int ldc)
{
    gemm_mixed(cu_shared_stream(s, "gemm_out16"), "gemm_out16", ta, tb, M, N, K, alpha, A, NULL,
               lda, B, NULL, ldb, 0.0f, NULL, C16, ldc);
}

/* kernels.h's gemm_mixed16 (the head's GEMMs on its weight converted once) */
void cu_gemm_mixed16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                     const float *A, const uint16_t *A16, int lda, const float *B,
                     const uint16_t *B16, int ldb, float beta, float *C, uint16_t *C16, int ldc)
{
    gemm_mixed(cu_shared_stream(s, "gemm_mixed16"), "gemm_mixed16", ta, tb, M, N, K, alpha, A,
               A16, lda, B, B16, ldb, beta, C, C16, ldc);
}

void tr_cuda_epilogue_counts(long *ran, long *refused)
{
    pthread_mutex_lock(&G.mu);
    *ran = G.epi_ran, *refused = G.epi_refused;
    pthread_mutex_unlock(&G.mu);
}

void cu_narrow16(tr_stream s, uint16_t *dst16, const float *src, size_t n)
{
    cu_to_bf16(s, dst16, src, n);
}

/* C = alpha op(A16) op(B) + beta C: A read in place, B staged in slabs of K (the first with
 * the caller's beta, the others accumulating in the fp32 C). */
/* cu_gemm_a16 on stream st; with bias, the first K slab tries the bias epilogue (returns
 * whether the bias was added), and C0 is the matrix beta scales, as cu_gemm_staged's */
int cu_gemm_a16_on(cudaStream_t st, int ta, int tb, int M, int N, int K, float alpha,
                   const uint16_t *A16, int lda, const float *B, int ldb, float beta, float *C,
                   const float *C0, int ldc, const float *bias)
{
    if (M <= 0 || N <= 0)
        return 0;
    if (K <= 0 || alpha == 0.0f) {
        cu_gemm_copy_in(st, C, C0, M, N, ldc);
        cu_scale_2d(st, C, M, N, ldc, beta);
        return 0;
    }
    size_t kc = (G.staging_bytes / sizeof(uint16_t)) / (size_t)N;
    if (kc >= 64)
        kc &= ~(size_t)63;
    if (kc < 1) {
        cu_gemm_note_none("gemm_a16", M, N, K);
        return 0;
    }
    if (kc > (size_t)K)
        kc = (size_t)K;
    int biased = 0;
    for (int k0 = 0; k0 < K; k0 += (int)kc) {
        int w = K - k0 < (int)kc ? K - k0 : (int)kc;
        if (tb) /* op(B) rows k0..: columns k0.. of the stored N x K */
            cu_pack_bf16(st, G.staging, B + k0, N, w, ldb);
        else
            cu_pack_bf16(st, G.staging, B + (size_t)k0 * ldb, w, N, ldb);
        /* op(A) columns k0..: rows k0.. of the stored K x M, or columns k0.. of M x K */
        const uint16_t *a = ta ? A16 + (size_t)k0 * lda : A16 + k0;
        float b = k0 ? 1.0f : beta;
        const float *cin = k0 == 0 ? C0 : NULL;
        if (k0 == 0 && bias)
            biased = !cu_matmul_from(st, CU_GEMM_BF16, ta, tb, M, N, w, alpha, a, lda, 0, G.staging,
                                     tb ? w : N, 0, b, C, cin, 0, ldc, 0, 1, bias);
        if (k0 == 0 && biased)
            continue;
        if (cu_matmul_from(st, CU_GEMM_BF16, ta, tb, M, N, w, alpha, a, lda, 0, G.staging,
                           tb ? w : N, 0, b, C, cin, 0, ldc, 0, 1, NULL))
            cu_gemm_note_none("gemm_a16", M, N, w);
    }
    return biased;
}

void cu_gemm_a16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha,
                 const uint16_t *A16, int lda, const float *B, int ldb, float beta, float *C,
                 int ldc)
{
    cu_gemm_a16_on(cu_shared_stream(s, "gemm_a16"), ta, tb, M, N, K, alpha, A16, lda, B, ldb, beta,
                   C, NULL, ldc, NULL);
}

/* C = alpha op(A) op(B16) + beta C: B read in place, A staged in slabs of K (the first with
 * the caller's beta, the others accumulating in the fp32 C). */
void cu_gemm_b16(tr_stream s, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                 int lda, const uint16_t *B16, int ldb, float beta, float *C, int ldc)
{
    cudaStream_t st = cu_shared_stream(s, "gemm_b16");
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0 || alpha == 0.0f) {
        cu_scale_2d(st, C, M, N, ldc, beta);
        return;
    }
    size_t kc = (G.staging_bytes / sizeof(uint16_t)) / (size_t)M;
    if (kc >= 64)
        kc &= ~(size_t)63;
    if (kc < 1) {
        cu_gemm_note_none("gemm_b16", M, N, K);
        return;
    }
    if (kc > (size_t)K)
        kc = (size_t)K;
    for (int k0 = 0; k0 < K; k0 += (int)kc) {
        int w = K - k0 < (int)kc ? K - k0 : (int)kc;
        if (ta) /* op(A) columns k0..: rows k0.. of the stored K x M */
            cu_pack_bf16(st, G.staging, A + (size_t)k0 * lda, w, M, lda);
        else
            cu_pack_bf16(st, G.staging, A + k0, M, w, lda);
        /* op(B) rows k0..: columns k0.. of the stored N x K, or rows k0.. of K x N */
        const uint16_t *b = tb ? B16 + k0 : B16 + (size_t)k0 * ldb;
        if (cu_matmul_to(st, CU_GEMM_BF16, ta, tb, M, N, w, alpha, G.staging, ta ? M : w, 0, b, ldb,
                         0, k0 ? 1.0f : beta, C, 0, ldc, 0, 1))
            cu_gemm_note_none("gemm_b16", M, N, w);
    }
}
