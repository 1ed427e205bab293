/* kernels/cuda/ — the CUDA backend of the op table (device memory) and its host-side pieces.
 *
 * Contract:
 *  - Two tables with the ops and semantics of kernels/kernels.h on device memory:
 *      "cuda"       bf16 mixed precision: every GEMM multiplies bf16 operands (rounded to
 *                   nearest-even from the fp32 buffers, see bf16.h) with fp32 accumulation
 *                   into fp32 outputs; the fused attention rounds its tiles to bf16 and
 *                   multiplies them on the tensor cores (flash_mma.cuh: mma.sync for head
 *                   sizes 16/32/64/128; flash.cu's wmma kernels for others, or all with
 *                   TRIDENT_CUDA_ATTENTION=wmma). The chunked head's logits and their
 *                   gradient are stored bf16 (kernels.h's gemm_out16 ...; fp32 with
 *                   TRIDENT_CUDA_HEAD=fp32), and so are the GELU and LayerNorm outputs that
 *                   feed the GEMMs (gelu_forward16, layernorm_forward16, gemm_b16; fp32 with
 *                   TRIDENT_CUDA_ACTIVATIONS=fp32), and the attention output that feeds the
 *                   projection (attention_forward16 ...; fp32 with
 *                   TRIDENT_CUDA_ATTENTION_OUT=fp32) and its input qkv and their
 *                   gradient (QKV's output and output gradient: attention_forward_qkv16
 *                   ...; fp32 with TRIDENT_CUDA_ATTENTION_IN=fp32, and where the output
 *                   is); the linear layers'
 *                   biases ride in cuBLASLt's epilogue (linear_forward) and a layer's
 *                   backward converts its output gradient once for both GEMMs
 *                   (linear_backward; TRIDENT_CUDA_EPILOGUE=0: the unfused pieces).
 *                   Everything else stored stays fp32: the parameters
 *                   are the fp32 master weights, gradients accumulate in fp32 (the
 *                   data-parallel buffer), Adam moments are fp32, normalisations, softmax,
 *                   losses and reductions run in fp32 (sums of squares in double).
 *                   TRIDENT_CUDA_GEMM=fast runs the GEMMs in cuBLASLt's 32F_FAST_16BF mode
 *                   instead (the library rounds inside the kernel; no conversion pass).
 *      "cuda-fp32"  everything fp32 (no TF32), for checking against the CPU backend.
 *    The model calls the table with float * either way; precision is this backend's choice.
 *  - Nothing calls CUDA at program start. The first tr_kernels_cuda()/tr_cuda_init() picks
 *    the device (tr_cuda_pick_device: the local rank modulo the device count, so several
 *    ranks may share one GPU), creates the compute stream that tr_stream NULL stands for,
 *    the cuBLASLt handle and the workspaces (tr_cuda_workspace_bytes()). Without a usable
 *    device it fails with TR_ERR_CONFIG "no CUDA device: <reason>", every later call too.
 *  - Ops are asynchronous on their stream (NULL = the compute stream; any other value is a
 *    cudaStream_t). to_host, sumsq and synchronize block until the stream has drained;
 *    to_device may return before the copy lands (the host buffer is free to reuse).
 *    The calling thread is switched to the backend's device on entry.
 *  - Ops return void (kernels.h); a CUDA error inside one is kept (the first) and logged:
 *    tr_cuda_status() returns it as TR_ERR_INTERNAL with its message, and sumsq returns NaN
 *    from then on so a training loop stops at its gradient norm.
 *  - Memory: alloc() is zero-filled (on the compute stream). After tr_cuda_reserve() it
 *    serves requests from one arena allocated up front for everything a training run asks
 *    alloc() for (the parameter, gradient and Adam buffers, each one block, and the
 *    activation slots and scratch), falling back to cudaMalloc when the arena is full;
 *    free() returns either kind. One op keeps memory of its own: the opt-in fused attention
 *    backward (TRIDENT_CUDA_ATTENTION_BWD=fused, flash_mma.cu) its dQ sums and flags,
 *    B*NH*T*HS floats and a few ints, cudaMalloc'ed at its first call of a larger shape
 *    (outside the arena and the memory budget; where they cannot be had, the two-kernel
 *    backward runs).
 *  - Pure host logic with no CUDA call (tested on any machine): tr_cuda_pick_device, the
 *    arena bookkeeping (tr_arena_*), the memory budget (tr_cuda_budget_*), and the fp32 <->
 *    bf16 conversion in bf16.h. */
#ifndef TR_KERNELS_CUDA_H
#define TR_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TR_CUDA_FP32 = 0, TR_CUDA_BF16 = 1 } tr_cuda_precision;

/* ---------------------------------------------------------------- device and tables */

/* Idempotent: the device, stream, cuBLASLt handle and workspaces (see above). */
TR_MUST_CHECK int tr_cuda_init(void);
/* The table ("cuda" for BF16, "cuda-fp32" for FP32); NULL with the error set when
 * tr_cuda_init() fails. */
const tr_kernels *tr_kernels_cuda(tr_cuda_precision precision);
/* After a successful init: the device index, its name, the compute stream (a cudaStream_t). */
int tr_cuda_device(void);
const char *tr_cuda_device_name(void);
void *tr_cuda_stream(void);
/* Make the calling thread use the backend's device (CUDA's current device is per thread);
 * ops do this themselves, other CUDA users of the backend's memory (comm/nccl) call it. */
void tr_cuda_use_device(void);
/* The first CUDA error seen inside an op (TR_ERR_INTERNAL naming the op), else TR_OK. */
TR_MUST_CHECK int tr_cuda_status(void);
/* Free and total device memory (cudaMemGetInfo). */
TR_MUST_CHECK int tr_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);
/* Device memory the backend holds for itself after init (cuBLASLt, bf16 staging, reduction
 * scratch). */
size_t tr_cuda_workspace_bytes(void);
/* GEMMs that ran with a cuBLASLt epilogue beyond the bias (the GELU ones of kernels.h's
 * linear_gelu_forward16 / linear_backward_gelu16, and BGRADB's bias gradient of a bf16 dy16
 * in linear_backward), and those it refused (the op's fallback did the work), since the
 * process started: the tests' proof that the epilogue ran. */
void tr_cuda_epilogue_counts(long *ran, long *refused);

/* GEMM plans made on an algorithm recorded for their key on this device (kernels/cuda/
 * gemm_choice.h's table: TRIDENT_CUDA_GEMM_CHOICES or the compiled-in one), and recorded
 * algorithms cuBLASLt refused (those plans took the heuristic's first), since the start. */
void tr_cuda_gemm_choice_counts(long *chosen, long *refused);

/* cuDNN's attention (TRIDENT_CUDA_ATTENTION=cudnn, kernels/cuda/attention_cudnn.h): the
 * forward and backward calls it ran, and those it was asked for and could have taken but did
 * not (its library missing, or a graph it refused: trident's kernels ran), since the start.
 * Returns 1 when cuDNN is loaded, 0 when it is not (not asked for yet, or failed to load), -1
 * in a build without its headers. */
int tr_cuda_cudnn_attention_counts(long *ran, long *refused);

/* Pure: the TRIDENT_CUDA_* switches of an environment (envp: NAME=VALUE strings ending in
 * NULL; NULL: this process's): TR_OK when each is a switch of the backend with a value it
 * takes, else TR_ERR_CONFIG naming the variable and what it takes (a misspelt name or value
 * would otherwise be ignored without a word); an empty value is the switch's default. The
 * backend's start refuses what this refuses. TRIDENT_CUDA_HOME (the toolkit's folder for
 * scripts/gpu_check_cuda.py) is let through. */
TR_MUST_CHECK int tr_cuda_check_switches(char *const *envp);

/* Pure: the device for a process whose local rank is given as text (the value of the
 * variable named var_name, e.g. "LOCAL_RANK"; NULL or "" = 0) on a machine with
 * device_count devices: local_rank % device_count. *shared = 1 when local_rank >=
 * device_count (another rank of the node uses the same GPU). Errors: TR_ERR_CONFIG for no
 * device ("no CUDA device: ...") or text that is not an integer in 0..2^31-1 (names the
 * variable and its value). */
TR_MUST_CHECK int tr_cuda_pick_device(const char *local_rank, const char *var_name, int device_count,
                        int *device, int *shared);

/* Pure: how many of a node's local_world_size ranks use `device` when rank r takes
 * r % device_count (at least 1), and the memory one of them may plan on: total / that count,
 * or free_bytes when that is less. Ranks sharing a GPU size their arenas from this, not from
 * the whole GPU's free memory they would otherwise race for. */
int tr_cuda_ranks_on_device(int local_world_size, int device_count, int device);
size_t tr_cuda_device_share(size_t free_bytes, size_t total_bytes, int ranks_on_device);
/* Pure: bytes of the bf16 GEMM staging buffer (gemm.c converts both operands of a bf16-mode
 * GEMM into it; operands that do not fit run in slabs along K, each slab a GEMM that writes
 * the fp32 output again, so too small a buffer splits even gpt2-124m's forward GEMMs at
 * micro-batch 48): 1/64 of the GPU's memory clamped to [64, 512] MiB, divided among the ranks
 * sharing the GPU (at least 64 MiB); mib_override > 0 (TRIDENT_CUDA_STAGING_MIB) replaces it. */
size_t tr_cuda_staging_bytes(size_t total_bytes, int ranks_on_device, long mib_override);

/* fp32 <-> bf16 on the device (round to nearest even, NaN kept quiet with its sign): the
 * conversions of bf16.h, n elements, on stream s. */
void tr_cuda_to_bf16(tr_stream s, uint16_t *dst, const float *src, size_t n);
void tr_cuda_from_bf16(tr_stream s, float *dst, const uint16_t *src, size_t n);

/* ---------------------------------------------------------------- memory budget (pure) */

/* What one rank needs on its GPU, in bytes. */
typedef struct {
    size_t params;      /* fp32 parameters (master weights) */
    size_t grads;       /* fp32 gradients (the data-parallel buffer) */
    size_t optimizer;   /* Adam m and v (fp32) */
    size_t activations; /* the arena: every in-flight micro-batch's activations + scratch */
    size_t workspace;   /* the backend's own (tr_cuda_workspace_bytes) */
    size_t reserved;    /* CUDA context, NCCL buffers, fragmentation margin */
} tr_cuda_budget;

/* Sum of the parts (saturates at SIZE_MAX). */
size_t tr_cuda_budget_total(const tr_cuda_budget *b);
/* TR_OK when the total fits in free_bytes; else TR_ERR_NOMEM with
 * "GPU <device> (<name>): training needs X GiB (parameters .., gradients .., optimizer ..,
 *  activations .., workspace .., reserved ..) but only Y GiB of Z GiB are free: short by
 *  W GiB; lower training.micro_batch_size, turn on recompute, or use more tensor/pipeline
 *  parallelism". */
TR_MUST_CHECK int tr_cuda_budget_check(const tr_cuda_budget *b, size_t free_bytes, size_t total_bytes,
                         int device, const char *device_name);
/* Device: check b against the free memory (counting the workspace the backend already
 * holds as allocated), then allocate the arena: params + grads + optimizer + activations
 * bytes, plus the alignment of up to 8 blocks of parameter state (m and v are two). Call
 * before the first alloc() of a run; activations should come from tr_arena_bytes_for() over
 * the requests (256-byte alignment). A second call replaces an empty arena; TR_ERR_INVALID
 * while the current one still has blocks in use. */
TR_MUST_CHECK int tr_cuda_reserve(const tr_cuda_budget *b);

/* ---------------------------------------------------------------- arena (pure bookkeeping)
 * First-fit allocation of offsets in [0, capacity), every block aligned to `align` (a power
 * of two) and rounded up to it; free() coalesces neighbours. No memory is touched: the
 * device arena adds the offsets to its base pointer. */
typedef struct {
    size_t offset, size;
} tr_arena_block;

typedef struct {
    size_t capacity, align;
    size_t used, peak;       /* bytes in blocks handed out, and the most ever */
    tr_arena_block *holes;   /* free blocks, sorted by offset, never adjacent */
    int n_holes, cap_holes;
    tr_arena_block *blocks;  /* blocks in use, sorted by offset */
    int n_blocks, cap_blocks;
} tr_arena;

/* align must be a power of two >= 1; capacity is rounded down to it. */
TR_MUST_CHECK int tr_arena_init(tr_arena *a, size_t capacity, size_t align);
void tr_arena_destroy(tr_arena *a);
/* A zero-byte request takes one alignment unit. TR_ERR_NOMEM when no hole is large enough:
 * "arena: no room for X bytes (Y free in total, the largest hole Z, capacity C)". */
TR_MUST_CHECK int tr_arena_alloc(tr_arena *a, size_t bytes, size_t *offset);
/* TR_ERR_INVALID for an offset that is not the start of a block in use. */
TR_MUST_CHECK int tr_arena_free(tr_arena *a, size_t offset);
size_t tr_arena_largest_hole(const tr_arena *a);
/* The capacity that serves these requests, made in order without frees: the sum of the
 * sizes each rounded up to align (0 counts as one unit). Saturates at SIZE_MAX. */
size_t tr_arena_bytes_for(const size_t *sizes, size_t n, size_t align);

#ifdef __cplusplus
}
#endif

#endif
