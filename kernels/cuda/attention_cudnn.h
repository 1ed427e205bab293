/* cuDNN's fused attention as an opt-in path of the bf16 mode's attention (attention_cudnn.cpp):
 * what it takes and how trident's tensors are described to it. Pure C, so that builds without
 * CUDA test it too (tests/cuda/test_cudnn_layout.c).
 *
 * Switch: TRIDENT_CUDA_ATTENTION=cudnn (forward and backward), cudnn-forward, cudnn-backward;
 * unset, flash_mma.cu's kernels run. The backward asks cuDNN for its deterministic algorithm
 * (kernels.h's attention contract: the same bits run to run), and a call it does not take, or
 * a cuDNN that is missing or refuses the graph, runs trident's own kernels (said once).
 * cudnn-nondeterministic: both passes, the backward free to take cuDNN's faster engines that
 * add into dQ atomically (cuDNN's and PyTorch's default; Megatron-LM's unless its
 * deterministic mode is asked for): the bits of dQ, and so of the run, may differ run to run.
 *
 * Layouts (kernels.h's attention_*_qkv16 with NG = NH): qkv16 (B, T, NH, 3, HS) bf16, out16 and
 * dout16 (B, T, NH, HS) bf16, lse (B, NH, T) fp32, the natural log of each query row's sum of
 * exp(scale q.k) over its keys: cuDNN's "stats". cuDNN sees each as a (B, H, S, D) view with
 * element (b, h, s, d) at offset + b*stride[0] + h*stride[1] + s*stride[2] + d*stride[3]. */
#ifndef TR_KERNELS_CUDA_ATTENTION_CUDNN_H
#define TR_KERNELS_CUDA_ATTENTION_CUDNN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t dim[4];    /* B, H, S, D (D = 1 for the stats) */
    int64_t stride[4]; /* elements */
    int64_t offset;    /* elements from the buffer's start */
} tr_cudnn_view;

typedef struct {
    tr_cudnn_view q, k, v; /* in qkv16 (and dq, dk, dv in dqkv16) */
    tr_cudnn_view o;       /* out16, dout16 */
    tr_cudnn_view stats;   /* lse */
} tr_cudnn_sdpa_layout;

/* The views of qkv (B, T, NH, 3, HS), out (B, T, NH, HS) and lse (B, NH, T). */
static inline tr_cudnn_sdpa_layout tr_cudnn_sdpa_layout_of(int B, int T, int NH, int HS)
{
    tr_cudnn_sdpa_layout l;
    int64_t C = (int64_t)NH * HS, C3 = 3 * C;
    tr_cudnn_view qkv = {{B, NH, T, HS}, {(int64_t)T * C3, 3 * (int64_t)HS, C3, 1}, 0};
    l.q = qkv;
    l.k = qkv, l.k.offset = HS;
    l.v = qkv, l.v.offset = 2 * (int64_t)HS;
    tr_cudnn_view o = {{B, NH, T, HS}, {(int64_t)T * C, HS, C, 1}, 0};
    l.o = o;
    tr_cudnn_view st = {{B, NH, T, 1}, {(int64_t)NH * T, T, 1, 1}, 0};
    l.stats = st;
    return l;
}

/* Which passes the switch asks cuDNN for (bit 1 forward, bit 2 backward; bit 4: the backward
 * may be non-deterministic) from the value of TRIDENT_CUDA_ATTENTION (NULL: unset): 0 for
 * anything else. */
enum { TR_CUDNN_FORWARD = 1, TR_CUDNN_BACKWARD = 2, TR_CUDNN_NONDETERMINISTIC = 4 };
int tr_cudnn_attention_passes(const char *value);

/* NULL when cuDNN can take the call, else why not: the grouped layout (NG != NH), ALiBi,
 * packed segments, a head size cuDNN's flash kernels do not take (a multiple of 8 up to 128),
 * a pointer not 16-byte aligned (`pointers`: the call's pointers OR-ed), or sizes past int32
 * offsets. */
const char *tr_cudnn_attention_refusal(int B, int T, int NH, int NG, int HS, int alibi,
                                       int segments, uintptr_t pointers);

/* Built with cuDNN's headers only (attention_cudnn.cpp): the graph of one pass (pass:
 * TR_CUDNN_FORWARD, TR_CUDNN_BACKWARD, or that | TR_CUDNN_NONDETERMINISTIC) of
 * (B, T, NH, HS) built without a GPU for the device that device_json
 * describes (cuDNN's device-properties JSON) at SM version sm (90: Hopper), through cuDNN's
 * support check, which picks engines for that device: NULL when cuDNN supports it, else why
 * not (valid until the next call). cuDNN's library is loaded as for a run; its run-time
 * compiled engines need a libcuda.so.1 to get that far (the toolkit's stub will do). */
const char *tr_cudnn_attention_check(const char *device_json, int sm, int pass, int B, int T,
                                     int NH, int HS);

#ifdef __cplusplus
}
#endif

#endif
