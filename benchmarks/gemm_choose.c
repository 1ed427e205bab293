/* benchmarks/gemm_choose: records, for the GEMMs a trident run made, the fastest of
 * cuBLASLt's candidate algorithms on this GPU (kernels/cuda/gemm_choice.h's table).
 *
 * A run with TRIDENT_CUDA_GEMM_KEYS=FILE lists each GEMM key it made a plan for (shape,
 * strides, alignments, epilogue, the beta of its first call). For each key this tool
 * allocates operands of that layout and alignment (random values), checks that its probe
 * (gemm_internal.h) computes what trident's own call of the key computes, to the bit, times
 * the heuristic's first N algorithms (the minimum over 3 rounds of a mean over >= 10 ms of
 * calls; the first as trident's plans take it), checks the fastest's outputs (C, and the GELU
 * forward's aux or BGRADB's column sums) against the heuristic first's on the same operands
 * (beta 0: the largest difference relative to the largest value, within 2^-7 for bf16, 1e-3
 * for fp32), and records it where it is at least --margin faster. Then
 * TRIDENT_CUDA_GEMM_CHOICES=OUT makes trident use them, and --inc writes them as
 * kernels/cuda/gemm_choices.inc's compiled-in lines.
 * stdout: a Markdown table (each key's heuristic-first and best times, TFLOP/s, the choice).
 *   gemm_choose --keys FILE [--keys FILE ...] --out FILE [--inc FILE] [--candidates N]
 *               [--margin F] [--force-index I] [--max-gib G]
 * --force-index I records candidate I (or the last there is) for every key with more than
 * one, however fast: the GPU tests' way to run trident on algorithms other than the first.
 * Exit 77 (SKIP) where no GPU is usable, 2 for a bad key file or argument. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "core/core.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/gemm_internal.h"

typedef struct {
    cu_gemm_key key;
    double beta;
} listed_key;

static int usage(const char *why)
{
    fprintf(stderr, "gemm_choose: %s\nusage: gemm_choose --keys FILE [--keys FILE ...] --out "
                    "FILE [--inc FILE] [--candidates N] [--margin F] [--force-index I] "
                    "[--max-gib G]\n", why);
    return 2;
}

/* Reads "key <22 integers> <beta>" lines of path into *keys (deduplicated); 0, or -1 with a
 * message (a line that is not one). */
static int read_keys(const char *path, listed_key **keys, int *n, int *cap)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "gemm_choose: cannot read %s\n", path);
        return -1;
    }
    char line[1024];
    int line_no = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        line_no++;
        const char *end;
        listed_key k;
        char *tail;
        if (!strchr(line, '\n') && !feof(f)) {
            fprintf(stderr, "gemm_choose: %s:%d: line too long\n", path, line_no);
            rc = -1;
            break;
        }
        if (line[0] == '\n' || line[0] == '#')
            continue;
        if (strncmp(line, "key ", 4) || cu_gemm_key_parse(line + 4, &k.key, &end) ||
            (k.beta = strtod(end, &tail), tail == end) || !isfinite(k.beta) ||
            strspn(tail, " \t\r\n") != strlen(tail)) {
            fprintf(stderr, "gemm_choose: %s:%d: expected \"key <22 integers> <beta>\" "
                            "(TRIDENT_CUDA_GEMM_KEYS's lines)\n", path, line_no);
            rc = -1;
            break;
        }
        int seen = 0;
        for (int i = 0; i < *n && !seen; i++)
            seen = !memcmp(&(*keys)[i].key, &k.key, sizeof k.key);
        if (seen)
            continue;
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 64;
            listed_key *g = realloc(*keys, (size_t)*cap * sizeof **keys);
            if (!g) {
                rc = -1;
                break;
            }
            *keys = g;
        }
        (*keys)[(*n)++] = k;
    }
    fclose(f);
    return rc;
}

/* Elements a stored (rows x cols, row stride ld) matrix spans, batch of them stride apart. */
static size_t span(long rows, long cols, long ld, int batch, long long stride)
{
    return (size_t)(batch - 1) * (size_t)stride + (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

typedef struct {
    void *base;  /* cudaMalloc's */
    char *p;     /* at the key's alignment */
    size_t bytes;
} dev_buf;

/* bytes at exactly alignment al (the lowest set bit of the address), filled with one fixed
 * pattern of random values of the element type (bf16 or fp32 in [-1, 1)); 0 or -1 */
static int buf_make(dev_buf *b, size_t elems, int elem_bytes, int al)
{
    enum { CHUNK = 1 << 22 };
    static float f32[CHUNK];
    static uint16_t b16[CHUNK];
    static int made;
    if (!made) { /* (once: the values only need to be numbers a GEMM meets) */
        uint64_t r = 0x9e3779b97f4a7c15ull;
        for (int i = 0; i < CHUNK; i++) { /* xorshift values in [-1, 1) */
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            f32[i] = (float)((double)(r >> 11) / 4503599627370496.0 - 1.0);
            b16[i] = bf16_from_f32(f32[i]);
        }
        made = 1;
    }
    b->bytes = elems * (size_t)elem_bytes;
    if (cudaMalloc(&b->base, b->bytes + 256) != cudaSuccess) {
        (void)cudaGetLastError();
        b->base = NULL;
        return -1;
    }
    b->p = (char *)b->base + (al < 256 ? al : 0);
    const char *src = elem_bytes == 2 ? (const char *)b16 : (const char *)f32;
    size_t chunk = (size_t)CHUNK * (size_t)elem_bytes;
    for (size_t off = 0; off < b->bytes; off += chunk) {
        size_t n = b->bytes - off < chunk ? b->bytes - off : chunk;
        if (cudaMemcpy(b->p + off, src, n, cudaMemcpyHostToDevice) != cudaSuccess)
            return -1;
    }
    return 0;
}

static void buf_free(dev_buf *b)
{
    if (b->base)
        cudaFree(b->base);
    memset(b, 0, sizeof *b);
}

enum { OP_A, OP_B, OP_C, OP_CIN, OP_BIAS, OP_AUX, N_OPS };
typedef struct {
    dev_buf b[N_OPS]; /* A, B, C, Cin (beta != 0), bias (or BGRADB's sums), aux */
    size_t nC, nBias, nAux; /* elements of C, the bias / sums and aux */
} operands;

static void operands_free(operands *o)
{
    for (int i = 0; i < N_OPS; i++)
        buf_free(&o->b[i]);
}

/* ms per call of algo (min over 3 rounds of the mean over >= 10 ms of calls); -1 refused */
static double time_algo(cu_gemm_probe *q, cudaStream_t st, const cublasLtMatmulAlgo_t *algo,
                        const operands *o, double beta)
{
    const dev_buf *b = o->b;
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
        return -1;
    double best = -1;
    float ms = 0;
    int reps = 1;
    for (int round = -1; round < 3; round++) { /* round -1: warm up and size the rounds */
        cudaEventRecord(e0, st);
        int ok = 1;
        for (int r = 0; r < reps && ok; r++)
            ok = !cu_gemm_probe_run(q, st, algo, 1.0f, b[OP_A].p, b[OP_B].p, (float)beta,
                                    b[OP_CIN].p, b[OP_C].p, b[OP_BIAS].p, b[OP_AUX].p);
        cudaEventRecord(e1, st);
        if (!ok || cudaEventSynchronize(e1) != cudaSuccess ||
            cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
            (void)cudaGetLastError();
            best = -1;
            break;
        }
        double per = ms / reps;
        if (round == -1) {
            reps = per > 0 ? (int)ceil(10.0 / per) : 100;
            reps = reps < 3 ? 3 : reps > 200 ? 200 : reps;
            continue;
        }
        if (best < 0 || per < best)
            best = per;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best;
}

/* Host floats of the device buffer's n elements (bf16 widened) appended at h + *at. */
static int fetch(float *h, size_t *at, const dev_buf *b, size_t n, int bf16)
{
    if (cudaMemcpy(h + *at, b->p, n * (bf16 ? 2 : 4), cudaMemcpyDeviceToHost) != cudaSuccess)
        return -1;
    if (bf16) /* widen in place, from the end (element i's 4 bytes cover bf16 2i and 2i + 1) */
        for (size_t i = n; i-- > 0;) {
            uint16_t v;
            memcpy(&v, (const char *)(h + *at) + 2 * i, 2);
            h[*at + i] = bf16_to_f32(v);
        }
    *at += n;
    return 0;
}

/* Every output of one call with beta 0 (C, then the GELU forward's aux or BGRADB's sums) as
 * host floats, *n of them: by the probe on algo, or (q NULL) by trident's own call of the key
 * (cu_gemm_key_run). NULL on failure. */
static float *outputs_of(cu_gemm_probe *q, cudaStream_t st, const cublasLtMatmulAlgo_t *algo,
                         const operands *o, const cu_gemm_key *k, size_t *n)
{
    const dev_buf *b = o->b;
    size_t nx = k->gelu == CU_GELU_FORWARD ? o->nAux : k->gelu == CU_BGRADB ? o->nBias : 0;
    int rc = q ? cu_gemm_probe_run(q, st, algo, 1.0f, b[OP_A].p, b[OP_B].p, 0.0f, NULL,
                                   b[OP_C].p, b[OP_BIAS].p, b[OP_AUX].p)
               : cu_gemm_key_run(st, k, 1.0f, b[OP_A].p, b[OP_B].p, 0.0f, NULL, b[OP_C].p,
                                 b[OP_BIAS].p, b[OP_AUX].p);
    if (rc || cudaStreamSynchronize(st) != cudaSuccess)
        return NULL;
    float *h = malloc((o->nC + nx) * sizeof(float));
    *n = 0;
    if (!h || fetch(h, n, &b[OP_C], o->nC, k->out16) ||
        (nx && fetch(h, n, k->gelu == CU_BGRADB ? &b[OP_BIAS] : &b[OP_AUX], nx,
                     k->gelu == CU_GELU_FORWARD))) {
        free(h);
        return NULL;
    }
    return h;
}

/* The largest |x - r| over the largest |r| (NaN anywhere: infinity) */
static double rel_diff(const float *x, const float *r, size_t n)
{
    double diff = 0, mx = 0;
    for (size_t j = 0; j < n; j++) {
        double d = fabs((double)x[j] - r[j]), a = fabs((double)r[j]);
        if (d != d)
            return INFINITY;
        diff = d > diff ? d : diff;
        mx = a > mx ? a : mx;
    }
    return mx > 0 ? diff / mx : diff > 0 ? INFINITY : 0;
}

int main(int argc, char **argv)
{
    const char *out = NULL, *inc = NULL;
    int n_cand = 8, force = -1;
    double margin = 0.03, max_gib = 0;
    listed_key *keys = NULL;
    int n_keys = 0, cap = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage("each option takes a value");
        i++;
        if (!strcmp(a, "--keys")) {
            if (read_keys(v, &keys, &n_keys, &cap))
                return 2;
        } else if (!strcmp(a, "--out"))
            out = v;
        else if (!strcmp(a, "--inc"))
            inc = v;
        else if (!strcmp(a, "--candidates") && (n_cand = atoi(v)) >= 1 &&
                 n_cand <= CU_GEMM_CANDIDATES)
            ;
        else if (!strcmp(a, "--margin") && (margin = atof(v)) >= 0 && margin < 1)
            ;
        else if (!strcmp(a, "--force-index") && (force = atoi(v)) >= 0)
            ;
        else if (!strcmp(a, "--max-gib") && (max_gib = atof(v)) > 0)
            ;
        else
            return usage("an unknown option or a value out of range");
    }
    if (!out || !n_keys)
        return usage("--out and at least one --keys file with keys are needed");
    setvbuf(stdout, NULL, _IOLBF, 0); /* (a run stopped at a time limit keeps its rows) */
    /* trident's own calls (the check against the probe) on the heuristic's first algorithms,
     * and nothing listed */
    setenv("TRIDENT_CUDA_GEMM_CHOICES", "none", 1);
    unsetenv("TRIDENT_CUDA_GEMM_KEYS");
    if (tr_cuda_init()) {
        printf("SKIP: no usable GPU: %s\n", tr_errmsg());
        return 77;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, tr_cuda_device()) != cudaSuccess) {
        printf("SKIP: no usable GPU: cudaGetDeviceProperties failed\n");
        return 77;
    }
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    double cap_bytes = max_gib > 0 ? max_gib * (double)(1ull << 30) : 0.6 * (double)free_b;
    cudaStream_t st = (cudaStream_t)tr_cuda_stream();
    FILE *fo = fopen(out, "w");
    if (!fo) {
        fprintf(stderr, "gemm_choose: cannot write %s\n", out);
        return 2;
    }
    int version = (int)cublasLtGetVersion();
    time_t now = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    fprintf(fo, "# benchmarks/gemm_choose, %s: %d keys, %d candidates each, margin %.3f%s\n",
            date, n_keys, n_cand, margin, force >= 0 ? ", forced (a test's table)" : "");
    fprintf(fo, "device %d %s\ncublaslt %d\n", prop.multiProcessorCount, prop.name, version);
    printf("| GEMM (M x N x K, batch; epilogue) | beta | candidates | heuristic's first ms | "
           "best ms (candidate) | TFLOP/s first -> best | recorded | max difference |\n"
           "|---|---:|---:|---:|---:|---:|---|---:|\n");
    int recorded = 0, failed = 0;
    double sum_first = 0, sum_chosen = 0;
    for (int i = 0; i < n_keys; i++) {
        const cu_gemm_key *k = &keys[i].key;
        double beta = keys[i].beta;
        int es = k->mode == CU_GEMM_BF16 ? 2 : 4, cs = k->out16 ? 2 : 4;
        int has_aux = k->gelu == CU_GELU_FORWARD || k->gelu == CU_GELU_BACKWARD;
        operands o;
        memset(&o, 0, sizeof o);
        size_t nA = span(k->ta ? k->K : k->M, k->ta ? k->M : k->K, k->lda, k->batch, k->sA);
        size_t nB = span(k->tb ? k->N : k->K, k->tb ? k->K : k->N, k->ldb, k->batch, k->sB);
        o.nC = span(k->M, k->N, k->ldc, k->batch, k->sC);
        o.nAux = has_aux ? span(k->M, k->N, k->ldAux, 1, 0) : 0;
        /* the bias: one a column of C (N), BGRADB's sums one a row (M, fp32) */
        o.nBias = !k->bias ? 0 : k->gelu == CU_BGRADB ? (size_t)k->M : (size_t)k->N;
        int bias_bytes = k->bias == 2 ? 2 : 4;
        double need = (double)(nA * es + nB * es + 2 * o.nC * cs + o.nAux * 2 +
                               o.nBias * bias_bytes);
        const char *epi = k->gelu == CU_GELU_FORWARD    ? "GELU"
                          : k->gelu == CU_GELU_BACKWARD ? "dGELU"
                          : k->gelu == CU_BGRADB        ? "BGRADB"
                          : k->bias                     ? "bias"
                                                        : "none";
        char what[160], batch[32] = "";
        if (k->batch > 1)
            snprintf(batch, sizeof batch, ", batch %d", k->batch);
        snprintf(what, sizeof what, "%d x %d x %d%s; %s%s, %s%s", k->M, k->N, k->K, batch, epi,
                 k->out16 ? ", bf16 C" : "", k->ta ? "T" : "N", k->tb ? "T" : "N");
        if (need > cap_bytes) {
            printf("| %s | %g | | not run: needs %.1f GiB | | | | |\n", what, beta,
                   need / (double)(1ull << 30));
            continue;
        }
        cu_gemm_probe *q = cu_gemm_probe_make(k);
        cublasLtMatmulAlgo_t algos[CU_GEMM_CANDIDATES], first;
        /* candidate 0 is the heuristic's first as trident's plans ask for it (one result) */
        int n = q && cu_gemm_probe_candidates(q, 1, &first) == 1
                    ? cu_gemm_probe_candidates(q, n_cand, algos)
                    : 0;
        if (n > 0 && memcmp(&algos[0], &first, sizeof first)) {
            int at = 1;
            while (at < n && memcmp(&algos[at], &first, sizeof first))
                at++;
            if (at == n)
                at = n < n_cand ? n++ : n - 1; /* (not among them: in, the last out) */
            memmove(&algos[1], &algos[0], (size_t)at * sizeof *algos);
            algos[0] = first;
        }
        int too_loose = k->alA < es || k->alB < es || k->alC < cs ||
                        (k->bias && k->alBias < bias_bytes) || (has_aux && k->alAux < 2);
        dev_buf *b = o.b;
        int ok = n > 0 && !too_loose && !buf_make(&b[OP_A], nA, es, k->alA) &&
                 !buf_make(&b[OP_B], nB, es, k->alB) &&
                 !buf_make(&b[OP_C], o.nC, cs, k->alC) &&
                 (beta == 0 || !buf_make(&b[OP_CIN], o.nC, cs, k->alC)) &&
                 (!o.nBias || !buf_make(&b[OP_BIAS], o.nBias, bias_bytes, k->alBias)) &&
                 (!o.nAux || !buf_make(&b[OP_AUX], o.nAux, 2, k->alAux));
        /* the probe computes what trident's own call of the key does, to the bit */
        size_t n_ref = 0, n_x = 0;
        float *ref = ok ? outputs_of(q, st, &algos[0], &o, k, &n_ref) : NULL;
        float *own = ref ? outputs_of(NULL, st, NULL, &o, k, &n_x) : NULL;
        const char *why = too_loose ? "an alignment below its element's size"
                          : n == 0  ? "no candidate"
                          : !ok  ? "allocation"
                          : !ref ? "the heuristic's first refused"
                          : !own ? "trident's own call refused"
                          : n_x != n_ref || memcmp(own, ref, n_ref * sizeof *ref)
                              ? "the probe's output is not trident's call's"
                              : NULL;
        free(own);
        double t[CU_GEMM_CANDIDATES];
        int best = -1;
        for (int c = 0; !why && c < n; c++) {
            t[c] = time_algo(q, st, &algos[c], &o, beta);
            if (t[c] > 0 && (best < 0 || t[c] < t[best]))
                best = c;
        }
        if (!why && (best < 0 || t[0] <= 0))
            why = "the heuristic's first failed to run";
        if (why) {
            printf("| %s | %g | %d | failed (%s) | | | | |\n", what, beta, n, why);
            failed++;
            free(ref);
            operands_free(&o);
            cu_gemm_probe_free(q);
            continue;
        }
        int chosen = best;
        if (force >= 0 && n > 1) {
            chosen = force < n ? force : n - 1;
            if (t[chosen] <= 0)
                chosen = 0;
        } else if (t[best] > (1.0 - margin) * t[0])
            chosen = 0;
        /* the choice's outputs (C, aux, BGRADB's sums) beside the heuristic first's */
        double diff = 0;
        int refused = 0;
        if (chosen != 0) {
            size_t nc = 0;
            float *x = outputs_of(q, st, &algos[chosen], &o, k, &nc);
            diff = x && nc == n_ref ? rel_diff(x, ref, n_ref) : INFINITY;
            if (!(diff <= (k->out16 || k->gelu == CU_GELU_FORWARD ? 1.0 / 128 : 1e-3)))
                chosen = 0, refused = 1;
            free(x);
        }
        free(ref);
        double flops = 2.0 * k->M * (double)k->N * k->K * k->batch;
        char diff_text[48] = "";
        if (diff != 0 || refused)
            snprintf(diff_text, sizeof diff_text, "%.2e%s", diff, refused ? " (refused)" : "");
        printf("| %s | %g | %d | %.3f | %.3f (%d) | %.0f -> %.0f | %s | %s |\n", what, beta, n,
               t[0], t[best], best, flops / t[0] / 1e9, flops / t[best] / 1e9,
               chosen ? "yes" : "no", diff_text);
        sum_first += t[0], sum_chosen += t[chosen];
        if (chosen) {
            uint64_t w[CU_GEMM_ALGO_WORDS];
            char key_text[512];
            memcpy(w, &algos[chosen], sizeof w);
            cu_gemm_key_format(k, key_text, sizeof key_text);
            fprintf(fo, "choice %s", key_text);
            for (int j = 0; j < CU_GEMM_ALGO_WORDS; j++)
                fprintf(fo, " %llx", (unsigned long long)w[j]);
            fprintf(fo, "  # %s: %.3f ms, the heuristic's first %.3f\n", what, t[chosen], t[0]);
            fflush(fo);
            recorded++;
        }
        operands_free(&o);
        cu_gemm_probe_free(q);
    }
    fclose(fo);
    printf("\n%d keys, %d recorded, %d failed; one call of each: %.3f ms with the heuristic's "
           "first algorithms, %.3f ms with the recorded ones (%.3fx); %s, %d SMs, cuBLASLt %d\n",
           n_keys, recorded, failed, sum_first, sum_chosen,
           sum_chosen > 0 ? sum_first / sum_chosen : 0.0, prop.name, prop.multiProcessorCount,
           version);
    if (inc) { /* the same lines as C strings (kernels/cuda/gemm_choices.inc) */
        FILE *fi = fopen(inc, "w"), *fr = fopen(out, "r");
        char line[1024];
        if (!fi || !fr) {
            fprintf(stderr, "gemm_choose: cannot write %s\n", inc);
            return 2;
        }
        fprintf(fi, "/* kernels/cuda/gemm_choices.inc — the compiled-in cuBLASLt algorithm "
                    "choices (kernels/cuda/gemm_choice.h's\n * text, one C string a line), "
                    "written by benchmarks/gemm_choose --inc: one block a device and\n"
                    " * cuBLASLt version (a new recording replaces its old block; keep the "
                    "others). */\n");
        while (fgets(line, sizeof line, fr)) {
            line[strcspn(line, "\r\n")] = 0;
            fputc('"', fi);
            for (const char *c = line; *c; c++) {
                if (*c == '"' || *c == '\\')
                    fputc('\\', fi);
                fputc(*c, fi);
            }
            fputs("\",\n", fi);
        }
        fclose(fr);
        fclose(fi);
    }
    free(keys);
    return failed ? 1 : 0;
}
