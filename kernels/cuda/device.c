/* The CUDA backend's device: lazy init (device from the local rank, compute stream, scratch,
 * cuBLASLt), the calling thread's device, error capture, memory info and the up-front
 * reservation of the arena. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/cuda/cuda_internal.h"

static struct {
    pthread_once_t once;
    int rc;           /* init result */
    char msg[512];    /* init failure */
    int device;
    int count; /* devices on this machine */
    char name[256];
    int smem_optin; /* shared memory a block may opt into, bytes */
    cudaStream_t stream;
    void *scratch;
    double *host_scalar;
    /* the first error inside an op */
    pthread_mutex_t err_mu;
    int failed;
    char err[512];
} dev = {.once = PTHREAD_ONCE_INIT, .err_mu = PTHREAD_MUTEX_INITIALIZER, .device = -1};

static _Thread_local int thread_device = -1;

/* The local rank's variable, as the launchers set it: torchrun/trident, Open MPI, Slurm. */
static const char *local_rank_var(const char **value)
{
    static const char *const vars[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            *value = v;
            return vars[i];
        }
    }
    *value = NULL;
    return "LOCAL_RANK";
}

static void init_fail(int rc, const char *fmt, const char *what, cudaError_t e)
{
    dev.rc = rc;
    snprintf(dev.msg, sizeof dev.msg, fmt, what, cudaGetErrorString(e), (int)e);
}

static void init_once(void)
{
    if (tr_cuda_check_switches(NULL)) { /* a misspelt TRIDENT_CUDA_* switch stops the start */
        dev.rc = TR_ERR_CONFIG;
        snprintf(dev.msg, sizeof dev.msg, "%s", tr_errmsg());
        return;
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        init_fail(TR_ERR_CONFIG, "no CUDA device: %s: %s (error %d)", "cudaGetDeviceCount", e);
        return;
    }
    const char *value = NULL, *var = local_rank_var(&value);
    int device = 0, shared = 0;
    if (tr_cuda_pick_device(value, var, count, &device, &shared)) {
        dev.rc = TR_ERR_CONFIG;
        snprintf(dev.msg, sizeof dev.msg, "%s", tr_errmsg());
        return;
    }
    if ((e = cudaSetDevice(device)) != cudaSuccess) {
        init_fail(TR_ERR_CONFIG, "no CUDA device: %s: %s (error %d)", "cudaSetDevice", e);
        return;
    }
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
        init_fail(TR_ERR_CONFIG, "no CUDA device: %s: %s (error %d)", "cudaGetDeviceProperties", e);
        return;
    }
    dev.device = device;
    dev.count = count;
    thread_device = device;
    snprintf(dev.name, sizeof dev.name, "%s", prop.name);
    dev.smem_optin = (int)prop.sharedMemPerBlockOptin;
    if (shared)
        tr_info("cuda: %s=%s on %d devices: sharing GPU %d (%s) with another rank", var, value,
                count, device, dev.name);
    if ((e = cudaStreamCreateWithFlags(&dev.stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc(&dev.scratch, CU_SCRATCH_BYTES)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&dev.host_scalar, sizeof(double))) != cudaSuccess) {
        init_fail(TR_ERR_NOMEM, "cuda: %s failed: %s (error %d)", "creating the stream and scratch",
                  e);
        return;
    }
    const char *lw = getenv("LOCAL_WORLD_SIZE"), *mib = getenv("TRIDENT_CUDA_STAGING_MIB");
    size_t staging = tr_cuda_staging_bytes(prop.totalGlobalMem,
                                           tr_cuda_ranks_on_device(lw ? atoi(lw) : 1, count, device),
                                           mib ? atol(mib) : 0);
    int rc = cu_gemm_init(staging, dev.name, prop.multiProcessorCount);
    if (rc) {
        dev.rc = rc;
        snprintf(dev.msg, sizeof dev.msg, "%s", tr_errmsg());
        return;
    }
    tr_debug("cuda: GPU %d (%s), %d SMs, %.1f GiB", device, dev.name, prop.multiProcessorCount,
             (double)prop.totalGlobalMem / (double)(1ull << 30));
    dev.rc = TR_OK;
}

int tr_cuda_init(void)
{
    pthread_once(&dev.once, init_once);
    if (dev.rc)
        return tr_fail(dev.rc, "%s", dev.msg);
    return TR_OK;
}

int tr_cuda_device(void) { return dev.device; }
const char *tr_cuda_device_name(void) { return dev.name; }
void *tr_cuda_stream(void) { return (void *)dev.stream; }
void *cu_scratch(void) { return dev.scratch; }
int cu_smem_optin(void) { return dev.smem_optin; }

int cu_env_is(const char *name, const char *value)
{
    const char *e = getenv(name);
    return e && !strcmp(e, value);
}
double *cu_host_scalar(void) { return dev.host_scalar; }

size_t tr_cuda_workspace_bytes(void)
{
    return dev.rc || dev.device < 0 ? 0 : CU_SCRATCH_BYTES + cu_gemm_workspace_bytes();
}

cudaStream_t cu_stream(tr_stream s)
{
    if (thread_device != dev.device && dev.device >= 0) {
        cu_note(cudaSetDevice(dev.device), "cudaSetDevice");
        thread_device = dev.device;
    }
    return s ? (cudaStream_t)s : dev.stream;
}

void tr_cuda_use_device(void) { cu_stream(NULL); }

/* Keep the first error seen inside an op (logged once); later ones are dropped. */
void cu_keep_error(const char *fmt, ...)
{
    pthread_mutex_lock(&dev.err_mu);
    int first = !dev.failed;
    if (first) {
        dev.failed = 1;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(dev.err, sizeof dev.err, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&dev.err_mu);
    if (first)
        tr_log(TR_LOG_ERROR, "%s", dev.err);
}

cudaStream_t cu_shared_stream(tr_stream s, const char *op)
{
    cudaStream_t st = cu_stream(s);
    if (st != dev.stream)
        cu_keep_error("cuda: %s on a stream other than the compute stream: it uses the "
                      "backend's shared scratch and workspace, which serve the compute stream "
                      "only",
                      op);
    return st;
}

int cu_note(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    cu_keep_error("CUDA error in %s on GPU %d: %s (error %d)", what, dev.device,
                  cudaGetErrorString(e), (int)e);
    return 1;
}

void cu_launched(const char *what) { cu_note(cudaGetLastError(), what); }

int cu_failed(void)
{
    pthread_mutex_lock(&dev.err_mu);
    int f = dev.failed;
    pthread_mutex_unlock(&dev.err_mu);
    return f;
}

int tr_cuda_status(void)
{
    pthread_mutex_lock(&dev.err_mu);
    int f = dev.failed;
    char msg[sizeof dev.err];
    memcpy(msg, dev.err, sizeof msg);
    pthread_mutex_unlock(&dev.err_mu);
    return f ? tr_fail(TR_ERR_INTERNAL, "%s", msg) : TR_OK;
}

int cu_chunks(int N, int cols, int arrays)
{
    size_t per_chunk = (size_t)(cols > 0 ? cols : 1) * (size_t)(arrays > 0 ? arrays : 1) *
                       sizeof(float);
    size_t fit = CU_SCRATCH_BYTES / per_chunk;
    int r = (N + 255) / 256; /* at least 256 rows per chunk */
    if (r > CU_MAX_CHUNKS)
        r = CU_MAX_CHUNKS;
    if ((size_t)r > fit)
        r = (int)fit;
    return r < 1 ? 1 : r;
}

int tr_cuda_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    int rc = tr_cuda_init();
    if (rc)
        return rc;
    cu_stream(NULL);
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess)
        return tr_fail(TR_ERR_INTERNAL, "cudaMemGetInfo on GPU %d: %s", dev.device,
                       cudaGetErrorString(e));
    return TR_OK;
}

int tr_cuda_reserve(const tr_cuda_budget *b)
{
    size_t free_b = 0, total_b = 0;
    int rc = tr_cuda_mem_info(&free_b, &total_b);
    if (rc)
        return rc;
    /* ranks of this node on the same GPU: each plans on its share, not on what is free
     * before the others have allocated */
    const char *lw = getenv("LOCAL_WORLD_SIZE");
    int sharers = tr_cuda_ranks_on_device(lw ? atoi(lw) : 1, dev.count, dev.device);
    if (sharers > 1) {
        size_t share = tr_cuda_device_share(free_b, total_b, sharers);
        tr_debug("cuda: GPU %d shared by %d ranks of this node: planning on %.2f GiB of %.2f "
                 "GiB free", dev.device, sharers, (double)share / (double)(1ull << 30),
                 (double)free_b / (double)(1ull << 30));
        free_b = share;
    }
    /* the workspace is allocated already: it is part of the budget but not of free memory */
    tr_cuda_budget need = *b;
    size_t held = tr_cuda_workspace_bytes();
    need.workspace = need.workspace > held ? need.workspace - held : 0;
    rc = tr_cuda_budget_check(&need, free_b, total_b, dev.device, dev.name);
    if (rc)
        return rc;
    if ((rc = cu_arena_release()))
        return rc;
    tr_cuda_budget arena_part = {.params = b->params, .grads = b->grads,
                                 .optimizer = b->optimizer, .activations = b->activations};
    size_t bytes = tr_cuda_budget_total(&arena_part);
    if (!bytes)
        return TR_OK;
    bytes += 8 * 256; /* the parameter-state blocks' alignment */
    void *base = NULL;
    cudaError_t e = cudaMalloc(&base, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return tr_fail(TR_ERR_NOMEM,
                       "GPU %d (%s): cannot allocate the %.2f GiB arena: %s (%.2f GiB were free)",
                       dev.device, dev.name, (double)bytes / (double)(1ull << 30),
                       cudaGetErrorString(e), (double)free_b / (double)(1ull << 30));
    }
    rc = cu_arena_adopt(base, bytes);
    if (rc)
        cudaFree(base);
    return rc;
}
