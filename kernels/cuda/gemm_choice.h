/* kernels/cuda/gemm_choice.h — recorded cuBLASLt algorithm choices (internal to the CUDA
 * backend; pure C with no CUDA header, so builds without CUDA compile and test it too).
 *
 * gemm.c caches one plan per GEMM key (shape, strides, mode, alignments, epilogue) and takes
 * cuBLASLt's heuristic's first algorithm for it. benchmarks/gemm_choose times the heuristic's
 * first few algorithms on the keys a run made (TRIDENT_CUDA_GEMM_KEYS) and records the fastest
 * in a choices table; gemm.c then uses the recorded algorithm for its key, after
 * cublasLtMatmulAlgoCheck accepts it. A choice is data recorded once, never a timing taken at
 * run time, so every run on one device picks the same algorithm (bitwise determinism holds).
 *
 * A table applies only where it was recorded: the same device name, SM count and cuBLASLt
 * version (cublasLtMatmulAlgo_t is documented as serializable for one library version).
 * Text, one item a line; '#' first or after a blank starts a comment; a `device` line starts
 * a block (one a device name, SM count and cuBLASLt version):
 *   device <SM count> <name, to the end of the line>
 *   cublaslt <cublasLtGetVersion()>
 *   choice <the key's 22 integers, cu_gemm_key's order> <the algorithm's 8 words in hex>
 * The table gemm.c uses: TRIDENT_CUDA_GEMM_CHOICES=FILE, or `none`; unset, the compiled-in
 * kernels/cuda/gemm_choices.inc (the same text, one C string a line). */
#ifndef TR_KERNELS_CUDA_GEMM_CHOICE_H
#define TR_KERNELS_CUDA_GEMM_CHOICE_H
#include <stddef.h>
#include <stdint.h>

/* One GEMM as gemm.c's plan cache keys it (hashed and compared as bytes: memset it first).
 * Sizes and strides as cuda_internal.h's cu_gemm_ex; alignments in bytes (capped at 256). */
typedef struct {
    int mode, ta, tb, M, N, K, lda, ldb, ldc, batch;
    long long sA, sB, sC;
    int alA, alB, alC; /* operand alignment in bytes (capped at 256) */
    int out16;         /* C stored bf16 (the head's gemm_out16) */
    int bias;          /* the bias epilogue: 1 an fp32 bias vector, 2 a bf16 one */
    int alBias;        /* the bias vector's alignment in bytes (the heuristic reads it) */
    int gelu;          /* 0, or gemm_internal.h's CU_GELU_FORWARD / _BACKWARD / CU_BGRADB */
    int alAux;         /* the aux matrix's alignment in bytes */
    long long ldAux;   /* its leading dimension in elements */
} cu_gemm_key;

#define CU_GEMM_KEY_FIELDS 22
#define CU_GEMM_ALGO_WORDS 8 /* sizeof(cublasLtMatmulAlgo_t) / 8 */

/* The key as its 22 integers separated by spaces (no newline); buf of >= 512 bytes. */
void cu_gemm_key_format(const cu_gemm_key *k, char *buf, size_t n);
/* Reads 22 integers at s into *k (memset first); *end past them. 0, or -1 where s does not
 * hold 22 integers, one is out of its field's range (sizes < 1, alignments not a power of
 * two <= 256, flags outside their values) or the fields disagree (gemm_plan.c makes no such
 * key: strides without a batch, an epilogue without its pointers' alignment, a GELU
 * epilogue without a bf16 C and an aux matrix of rows a multiple of 8 >= N, ...). */
int cu_gemm_key_parse(const char *s, cu_gemm_key *k, const char **end);

typedef struct {
    cu_gemm_key key;
    uint64_t algo[CU_GEMM_ALGO_WORDS];
    int block; /* its device block's index */
} cu_gemm_choice;

typedef struct {
    char name[256];
    int sms, version; /* version 0: no cublaslt line (the block matches nothing) */
} cu_gemm_device;

typedef struct {
    cu_gemm_device *blocks;
    int n_blocks;
    cu_gemm_choice *rows;
    int n;
} cu_gemm_choices;

/* Parses a whole table's text into *t (zeroed first). 0, or -1 with "ORIGIN:LINE: what" in err
 * (a line that is none of the three items, a malformed key or algorithm, a choice before any
 * device line, the same key twice in a block, two blocks of one device and cuBLASLt version,
 * out of memory). */
int cu_gemm_choices_parse(const char *text, const char *origin, cu_gemm_choices *t, char *err,
                          size_t n_err);
/* Keeps the rows recorded on this device and cuBLASLt version; returns how many. */
int cu_gemm_choices_select(cu_gemm_choices *t, const char *device, int sms, int version);
/* The recorded algorithm for k (8 words), or NULL. */
const uint64_t *cu_gemm_choices_find(const cu_gemm_choices *t, const cu_gemm_key *k);
void cu_gemm_choices_free(cu_gemm_choices *t);

/* The compiled-in table's text (kernels/cuda/gemm_choices.inc joined), "" when it is empty. */
const char *cu_gemm_choices_builtin(void);

#endif
