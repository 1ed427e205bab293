/* Device memory of the CUDA table: allocation (from the arena once one is
 * reserved, else cudaMalloc), copies and fills on the op's stream; the kernels' own
 * scratch buffers outside the arena, grown as calls need (cu_grow_buffer). */
#include <pthread.h>
#include <string.h>

#include "core/core.h"
#include "kernels/cuda/cuda_internal.h"

/* Every block of the arena starts on this boundary (cuBLASLt's preferred alignment). */
#define ARENA_ALIGN 256

static struct {
    pthread_mutex_t mu;
    char *base;
    tr_arena arena;
} A = {.mu = PTHREAD_MUTEX_INITIALIZER};

int cu_arena_adopt(void *base, size_t bytes)
{
    pthread_mutex_lock(&A.mu);
    int rc = A.base ? tr_fail(TR_ERR_INVALID, "cuda: an arena exists already")
                    : tr_arena_init(&A.arena, bytes, ARENA_ALIGN);
    if (!rc)
        A.base = base;
    pthread_mutex_unlock(&A.mu);
    return rc;
}

int cu_arena_release(void)
{
    pthread_mutex_lock(&A.mu);
    int rc = TR_OK;
    if (A.base && A.arena.n_blocks) {
        rc = tr_fail(TR_ERR_INVALID,
                     "cuda: the arena still has %d blocks (%zu bytes) in use",
                     A.arena.n_blocks, A.arena.used);
    } else if (A.base) {
        cu_note(cudaFree(A.base), "freeing the arena");
        tr_arena_destroy(&A.arena);
        A.base = NULL;
    }
    pthread_mutex_unlock(&A.mu);
    return rc;
}

void *cu_alloc(size_t bytes)
{
    cudaStream_t st = cu_stream(NULL);
    void *p = NULL;
    pthread_mutex_lock(&A.mu);
    size_t off = 0;
    if (A.base && tr_arena_alloc(&A.arena, bytes, &off) == TR_OK)
        p = A.base + off;
    pthread_mutex_unlock(&A.mu);
    if (!p) {
        cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            size_t free_b = 0, total_b = 0;
            cudaMemGetInfo(&free_b, &total_b);
            tr_fail(TR_ERR_NOMEM,
                    "GPU %d (%s): cannot allocate %.1f MiB: %s (%.1f MiB free of %.1f MiB)",
                    tr_cuda_device(), tr_cuda_device_name(), (double)bytes / 1048576.0,
                    cudaGetErrorString(e), (double)free_b / 1048576.0,
                    (double)total_b / 1048576.0);
            return NULL;
        }
    }
    if (bytes)
        cu_note(cudaMemsetAsync(p, 0, bytes, st), "alloc (zero fill)");
    return p;
}

void cu_free(void *p)
{
    if (!p)
        return;
    cu_stream(NULL);
    pthread_mutex_lock(&A.mu);
    int in_arena = A.base && (char *)p >= A.base && (char *)p < A.base + A.arena.capacity;
    if (in_arena && tr_arena_free(&A.arena, (size_t)((char *)p - A.base)))
        tr_log(TR_LOG_ERROR, "cuda: free: %s", tr_errmsg());
    pthread_mutex_unlock(&A.mu);
    if (!in_arena)
        cu_note(cudaFree(p), "free");
}

void cu_to_device(tr_stream s, void *dst, const void *host_src, size_t bytes)
{
    if (!bytes)
        return;
    cudaStream_t st = cu_stream(s);
    /* From pageable memory the call returns once the data is staged, so the caller may reuse
     * its buffer at once; from pinned memory the copy is truly asynchronous: wait for it. */
    struct cudaPointerAttributes attr;
    int pinned = cudaPointerGetAttributes(&attr, host_src) == cudaSuccess &&
                 attr.type == cudaMemoryTypeHost;
    (void)cudaGetLastError();
    cu_note(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, st), "to_device");
    if (pinned)
        cu_note(cudaStreamSynchronize(st), "to_device (synchronize)");
}

void cu_to_host(tr_stream s, void *host_dst, const void *src, size_t bytes)
{
    if (!bytes)
        return;
    cudaStream_t st = cu_stream(s);
    cu_note(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, st), "to_host");
    cu_note(cudaStreamSynchronize(st), "to_host (synchronize)");
}

void cu_copy(tr_stream s, void *dst, const void *src, size_t bytes)
{
    if (!bytes || dst == src)
        return;
    cu_note(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu_stream(s)),
               "copy");
}

void cu_zero(tr_stream s, void *dst, size_t bytes)
{
    if (!bytes)
        return;
    cu_note(cudaMemsetAsync(dst, 0, bytes, cu_stream(s)), "zero");
}

void cu_synchronize(tr_stream s)
{
    cu_note(cudaStreamSynchronize(cu_stream(s)), "synchronize");
}

int cu_grow_buffer(void **mem, size_t *have, size_t bytes, int zero, cudaStream_t st,
                   const char *what)
{
    if (bytes <= *have)
        return 1;
    if (*mem)
        cu_note(cudaFree(*mem), what);
    *mem = NULL, *have = 0;
    if (cudaMalloc(mem, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        *mem = NULL;
        return 0;
    }
    *have = bytes;
    if (zero)
        cu_note(cudaMemsetAsync(*mem, 0, bytes, st), what);
    return 1;
}
