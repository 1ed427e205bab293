/* cuBLASLt plans and calls (gemm_internal.h): the one cuBLASLt handle, its workspace and the
 * bf16 staging buffer gemm.c and linear.c convert operands into; plans (descriptors, layouts
 * and an algorithm) cached by gemm_choice.h's key: shape, strides, mode, epilogue and operand
 * alignment (the views into the flat parameter buffer are often only 4-byte aligned, and an
 * algorithm chosen for 256-byte alignment must not see them). A plan's algorithm is the one
 * recorded for its key on this device (gemm_choice.h's table) where cuBLASLt accepts it, else
 * the heuristic's first.
 * TRIDENT_CUDA_GEMM_KEYS=FILE appends each key a plan is made for ("key <22 integers> <beta of
 * its first call>"), which benchmarks/gemm_choose reads; gemm_internal.h's probe calls are
 * that tool's way in. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "core/core.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/gemm_internal.h"

#define LT_WORKSPACE ((size_t)32 << 20)  /* cuBLASLt's own (32 MiB suits Hopper) */
#define PLAN_SLOTS 1024                   /* cached plans (open addressing) */

typedef cu_gemm_key plan_key; /* (gemm_choice.h: hashed and compared as bytes) */

typedef struct {
    int used, none; /* none: cuBLASLt has no algorithm for this key (remembered) */
    int listed;     /* written to TRIDENT_CUDA_GEMM_KEYS's file */
    int recorded;   /* its algorithm is the recorded one (gemm_choice.h) */
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
    cu_gemm_choices choices;   /* this device's recorded algorithms (gemm_choice.h) */
    long chose, refused_choice; /* plans on a recorded algorithm, refused ones (the counts) */
    FILE *keys;                 /* TRIDENT_CUDA_GEMM_KEYS's file, or NULL */
} G = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The recorded choices for this device: TRIDENT_CUDA_GEMM_CHOICES's file, none, or the
 * compiled-in table; a file that cannot be read or parsed fails the backend's start. */
static int choices_load(const char *device, int sms)
{
    const char *path = getenv("TRIDENT_CUDA_GEMM_CHOICES");
    char *text = NULL, err[512];
    if (path && !strcmp(path, "none"))
        return TR_OK;
    if (path && *path) {
        size_t n;
        if (tr_read_file(path, (size_t)64 << 20, "a GEMM choices table", &text, &n)) {
            snprintf(err, sizeof err, "%s", tr_errmsg()); /* (tr_fail rewrites the message) */
            return tr_fail(TR_ERR_CONFIG, "cuda: TRIDENT_CUDA_GEMM_CHOICES=%s: cannot read it: %s",
                           path, err);
        }
        if (memchr(text, 0, n)) {
            free(text);
            return tr_fail(TR_ERR_CONFIG, "cuda: TRIDENT_CUDA_GEMM_CHOICES=%s: not a text file",
                           path);
        }
    }
    int rc = cu_gemm_choices_parse(text ? text : cu_gemm_choices_builtin(),
                                   path && *path ? path : "kernels/cuda/gemm_choices.inc",
                                   &G.choices, err, sizeof err);
    free(text);
    if (rc)
        return tr_fail(TR_ERR_CONFIG, "cuda: GEMM choices: %s", err);
    int total = G.choices.n;
    int kept = cu_gemm_choices_select(&G.choices, device, sms, (int)cublasLtGetVersion());
    if (path && *path && total && !kept)
        tr_warn("cuda: TRIDENT_CUDA_GEMM_CHOICES=%s: none of its %d choices was recorded on "
                "this device (%s, %d SMs) and cuBLASLt %d: the heuristic's algorithms are used",
                path, total, device, sms, (int)cublasLtGetVersion());
    else if (kept)
        tr_debug("cuda: %d recorded GEMM algorithm choices for %s", kept, device);
    return TR_OK;
}

int cu_gemm_init(size_t staging_bytes, const char *device, int sms)
{
    const char *lt_error = cu_cublaslt_error(); /* (loads it: cublaslt_lazy.c) */
    if (lt_error)
        return tr_fail(TR_ERR_INTERNAL, "cuda: cuBLASLt: %s", lt_error);
    int rc = choices_load(device, sms);
    if (rc)
        return rc;
    const char *keys = getenv("TRIDENT_CUDA_GEMM_KEYS");
    if (keys && *keys && !(G.keys = fopen(keys, "a")))
        return tr_fail(TR_ERR_IO, "cuda: TRIDENT_CUDA_GEMM_KEYS=%s: cannot open it for writing",
                       keys);
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

/* Build k's descriptors and layouts into p (no algorithm yet); 0, or -1 (p cleared). */
static int plan_describe(plan *p, const plan_key *k)
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
    return 0;
fail:
    plan_destroy(p);
    return -1;
}

/* The heuristic's first n algorithms for described plan p, best first, into algos; returns
 * how many (0 where it has none). */
static int plan_candidates(const plan *p, int n, cublasLtMatmulAlgo_t *algos)
{
    const plan_key *k = &p->key;
    cublasLtMatmulPreference_t pref = NULL;
    if (n < 1 || cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
        return 0;
    uint64_t ws = LT_WORKSPACE;
    uint32_t al_a = (uint32_t)k->alB, al_b = (uint32_t)k->alA, al_c = (uint32_t)k->alC;
    cublasLtMatmulHeuristicResult_t res[CU_GEMM_CANDIDATES];
    int got = 0;
    if (n > CU_GEMM_CANDIDATES)
        n = CU_GEMM_CANDIDATES;
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
        cublasLtMatmulAlgoGetHeuristic(G.lt, p->desc, p->a, p->b, p->c, p->c, pref, n, res,
                                       &got) == CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulPreferenceDestroy(pref);
    int m = 0;
    for (int i = 0; ok && i < got; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= LT_WORKSPACE)
            algos[m++] = res[i].algo;
    return m;
}

/* Whether cuBLASLt accepts algo for described plan p within the workspace. */
static int plan_accepts(const plan *p, const cublasLtMatmulAlgo_t *algo)
{
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    return cublasLtMatmulAlgoCheck(G.lt, p->desc, p->a, p->b, p->c, p->c, algo, &r) ==
               CUBLAS_STATUS_SUCCESS &&
           r.workspaceSize <= LT_WORKSPACE;
}

_Static_assert(sizeof(cublasLtMatmulAlgo_t) == CU_GEMM_ALGO_WORDS * sizeof(uint64_t),
               "gemm_choice.h records cublasLtMatmulAlgo_t as 8 words");

/* Build descriptors and pick the algorithm (recorded for k where cuBLASLt accepts it, else
 * the heuristic's first); 0 on success. */
static int plan_make(plan *p, const plan_key *k)
{
    if (plan_describe(p, k))
        return -1;
    const uint64_t *rec = cu_gemm_choices_find(&G.choices, k);
    if (rec) {
        memcpy(&p->algo, rec, sizeof p->algo);
        if (plan_accepts(p, &p->algo)) {
            G.chose++;
            p->used = p->recorded = 1;
            return 0;
        }
        if (!G.refused_choice++) {
            char what[256];
            cu_gemm_describe(what, sizeof what, k);
            tr_warn("cuda: cuBLASLt refuses the recorded algorithm for %s: the heuristic's "
                    "first is used (tr_cuda_gemm_choice_counts counts the refusals)", what);
        }
    }
    if (plan_candidates(p, 1, &p->algo) < 1) {
        plan_destroy(p);
        return -1;
    }
    p->used = 1;
    return 0;
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

void cu_gemm_describe(char *buf, size_t n, const plan_key *k)
{
    snprintf(buf, n, "gemm (mode %d, ta %d, tb %d, M %d, N %d, K %d, lda %d, ldb %d, ldc %d, "
                     "batch %d, alignment %d/%d/%d%s%s%s)",
             k->mode, k->ta, k->tb, k->M, k->N, k->K, k->lda, k->ldb, k->ldc, k->batch, k->alA,
             k->alB, k->alC, k->out16 ? ", bf16 output" : "",
             k->gelu == CU_BGRADB ? ", BGRADB epilogue" : k->bias ? ", bias epilogue" : "",
             k->gelu && k->gelu != CU_BGRADB ? ", GELU epilogue" : "");
}

/* Key k's GEMM on its cached plan: C = alpha op(A) op(B) + beta Cin [epilogue: bias (BGRADB:
 * its column sums' output), aux]. A recorded algorithm that cuBLASLt refuses at the call (its
 * check passed) gives way to the heuristic's first, for this call and the plan's later ones.
 * 0, or -1 when there is no algorithm or an epilogue call was refused (nothing launched: the
 * caller falls back); a failure of a plain call is noted. A key is listed (TRIDENT_CUDA_GEMM_
 * KEYS) after its first call that ran. */
static int run_key(cudaStream_t st, const plan_key *k, float alpha, const void *A, const void *B,
                   float beta, const void *Cin, void *C, const void *bias, const void *aux)
{
    int epi = k->bias || k->gelu;
    pthread_mutex_lock(&G.mu);
    plan *p = plan_get(k);
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
    if (p && s != CUBLAS_STATUS_SUCCESS && p->recorded) {
        p->recorded = 0, G.refused_choice++;
        if (plan_candidates(p, 1, &p->algo) == 1)
            s = cublasLtMatmul(G.lt, p->desc, &alpha, B, p->a, A, p->b, &beta, Cin, p->c, C,
                               p->c, &p->algo, G.workspace, LT_WORKSPACE, st);
    }
    if (p && s == CUBLAS_STATUS_SUCCESS && G.keys && !p->listed) {
        char text[512]; /* (a cache reset may list a key again: readers dedupe) */
        cu_gemm_key_format(k, text, sizeof text);
        fprintf(G.keys, "key %s %g\n", text, (double)beta);
        fflush(G.keys);
        p->listed = 1;
    }
    if (p && s != CUBLAS_STATUS_SUCCESS && epi)
        p->none = 1; /* refused: the key's later calls go straight to the fallback */
    if (k->gelu == CU_GELU_FORWARD || k->gelu == CU_GELU_BACKWARD || k->gelu == CU_BGRADB)
        G.epi_ran += s == CUBLAS_STATUS_SUCCESS, G.epi_refused += s != CUBLAS_STATUS_SUCCESS;
    pthread_mutex_unlock(&G.mu);
    if (!p)
        return -1;
    if (s != CUBLAS_STATUS_SUCCESS && epi)
        return -1; /* the caller runs it without the epilogue (a refused call launches nothing) */
    if (s != CUBLAS_STATUS_SUCCESS) {
        char what[256];
        cu_gemm_describe(what, sizeof what, k);
        cu_note(cudaErrorUnknown, what);
    }
    return 0;
}

int cu_gemm_key_run(cudaStream_t st, const cu_gemm_key *k, float alpha, const void *A,
                    const void *B, float beta, const void *Cin, void *C, const void *bias,
                    const void *aux)
{
    return run_key(st, k, alpha, A, B, beta, Cin ? Cin : C, C, bias, aux);
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
    return run_key(st, &k, alpha, A, B, beta, Cin, C, bias, aux);
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

void tr_cuda_epilogue_counts(long *ran, long *refused)
{
    pthread_mutex_lock(&G.mu);
    *ran = G.epi_ran, *refused = G.epi_refused;
    pthread_mutex_unlock(&G.mu);
}


void tr_cuda_gemm_choice_counts(long *chosen, long *refused)
{
    pthread_mutex_lock(&G.mu);
    *chosen = G.chose, *refused = G.refused_choice;
    pthread_mutex_unlock(&G.mu);
}

/* ---- gemm_internal.h's probe: one key's plan outside the cache, for benchmarks/gemm_choose */
struct cu_gemm_probe {
    plan p;
};

cu_gemm_probe *cu_gemm_probe_make(const cu_gemm_key *k)
{
    cu_gemm_probe *q = calloc(1, sizeof *q);
    if (q && plan_describe(&q->p, k)) {
        free(q);
        return NULL;
    }
    return q;
}

int cu_gemm_probe_candidates(const cu_gemm_probe *q, int n, cublasLtMatmulAlgo_t *algos)
{
    return plan_candidates(&q->p, n, algos);
}

int cu_gemm_probe_accepts(const cu_gemm_probe *q, const cublasLtMatmulAlgo_t *algo)
{
    return plan_accepts(&q->p, algo);
}

int cu_gemm_probe_run(cu_gemm_probe *q, cudaStream_t st, const cublasLtMatmulAlgo_t *algo,
                      float alpha, const void *A, const void *B, float beta, const void *Cin,
                      void *C, const void *bias, const void *aux)
{
    const plan *p = &q->p;
    int needs_aux = p->key.gelu == CU_GELU_FORWARD || p->key.gelu == CU_GELU_BACKWARD;
    if ((p->key.bias && !bias) || (needs_aux && !aux) || !A || !B || !C)
        return -1; /* (the descriptor's stand-ins are no pointers to write through) */
    if (p->key.bias && /* (BGRADB's column sums too: its bias pointer) */
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                       sizeof bias) != CUBLAS_STATUS_SUCCESS)
        return -1;
    if (aux && cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                              &aux, sizeof aux) != CUBLAS_STATUS_SUCCESS)
        return -1;
    pthread_mutex_lock(&G.mu); /* (the workspace is the backend's one) */
    cublasStatus_t s = cublasLtMatmul(G.lt, p->desc, &alpha, B, p->a, A, p->b, &beta,
                                      Cin ? Cin : C, p->c, C, p->c, algo, G.workspace,
                                      LT_WORKSPACE, st);
    pthread_mutex_unlock(&G.mu);
    return s == CUBLAS_STATUS_SUCCESS ? 0 : -1;
}

void cu_gemm_probe_free(cu_gemm_probe *q)
{
    if (q)
        plan_destroy(&q->p);
    free(q);
}
