/* The CUDA backend's pure host logic: device choice from the local rank, the memory budget
 * check, and the arena's offset bookkeeping. No CUDA call here (tested on any machine). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/cuda/cuda.h"

/* ---------------------------------------------------------------- device choice */

int tr_cuda_pick_device(const char *local_rank, const char *var_name, int device_count,
                        int *device, int *shared)
{
    *device = 0;
    *shared = 0;
    if (!var_name || !*var_name)
        var_name = "LOCAL_RANK";
    if (device_count <= 0)
        return tr_fail(TR_ERR_CONFIG, "no CUDA device: the CUDA runtime reports %d devices",
                       device_count);
    long r = 0;
    if (local_rank && *local_rank) {
        char *end = NULL;
        errno = 0;
        r = strtol(local_rank, &end, 10);
        if (errno || end == local_rank || *end || r < 0 || r > 0x7FFFFFFFL)
            return tr_fail(TR_ERR_CONFIG,
                           "%s='%s' is not a local rank (expected an integer in 0..2147483647)",
                           var_name, local_rank);
    }
    *device = (int)(r % device_count);
    *shared = r >= device_count;
    return TR_OK;
}

int tr_cuda_ranks_on_device(int local_world_size, int device_count, int device)
{
    if (local_world_size < 1 || device_count < 1 || device < 0 || device >= device_count ||
        device >= local_world_size)
        return 1;
    return (local_world_size - device + device_count - 1) / device_count;
}

size_t tr_cuda_device_share(size_t free_bytes, size_t total_bytes, int ranks_on_device)
{
    if (ranks_on_device <= 1)
        return free_bytes;
    size_t share = total_bytes / (size_t)ranks_on_device;
    return share < free_bytes ? share : free_bytes;
}

size_t tr_cuda_staging_bytes(size_t total_bytes, int ranks_on_device, long mib_override)
{
    const size_t MiB = (size_t)1 << 20, lo = 64 * MiB, hi = 512 * MiB;
    if (mib_override > 0)
        return (size_t)mib_override * MiB;
    size_t b = total_bytes / 64;
    b = b < lo ? lo : b > hi ? hi : b;
    if (ranks_on_device > 1)
        b /= (size_t)ranks_on_device;
    b = b < lo ? lo : b;
    return b & ~(MiB - 1);
}

/* ---------------------------------------------------------------- memory budget */

static size_t sat_add(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

size_t tr_cuda_budget_total(const tr_cuda_budget *b)
{
    size_t t = 0;
    t = sat_add(t, b->params);
    t = sat_add(t, b->grads);
    t = sat_add(t, b->optimizer);
    t = sat_add(t, b->activations);
    t = sat_add(t, b->workspace);
    t = sat_add(t, b->reserved);
    return t;
}

static double gib(size_t bytes) { return (double)bytes / (double)(1ull << 30); }

int tr_cuda_budget_check(const tr_cuda_budget *b, size_t free_bytes, size_t total_bytes,
                         int device, const char *device_name)
{
    size_t need = tr_cuda_budget_total(b);
    if (need <= free_bytes)
        return TR_OK;
    return tr_fail(TR_ERR_NOMEM,
                   "GPU %d (%s): training needs %.2f GiB (parameters %.2f, gradients %.2f, "
                   "optimizer %.2f, activations %.2f, workspace %.2f, reserved %.2f) but only "
                   "%.2f GiB of %.2f GiB are free: short by %.2f GiB; lower "
                   "training.micro_batch_size, turn on recompute, or use more tensor/pipeline "
                   "parallelism",
                   device, device_name && *device_name ? device_name : "unknown", gib(need),
                   gib(b->params), gib(b->grads), gib(b->optimizer), gib(b->activations),
                   gib(b->workspace), gib(b->reserved), gib(free_bytes), gib(total_bytes),
                   gib(need - free_bytes));
}

/* ---------------------------------------------------------------- arena */

static int is_pow2(size_t x) { return x && !(x & (x - 1)); }

/* Round up to a multiple of align (a power of two); 0 when it would overflow. */
static size_t round_up(size_t x, size_t align)
{
    if (x > SIZE_MAX - (align - 1))
        return 0;
    return (x + align - 1) & ~(align - 1);
}

size_t tr_arena_bytes_for(const size_t *sizes, size_t n, size_t align)
{
    if (!is_pow2(align))
        align = 1;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t r = round_up(sizes[i] ? sizes[i] : 1, align);
        if (!r)
            return SIZE_MAX;
        total = sat_add(total, r);
    }
    return total;
}

int tr_arena_init(tr_arena *a, size_t capacity, size_t align)
{
    memset(a, 0, sizeof *a);
    if (!is_pow2(align))
        return tr_fail(TR_ERR_INVALID, "arena: alignment %zu is not a power of two", align);
    a->align = align;
    a->capacity = capacity & ~(align - 1);
    if (a->capacity) {
        a->holes = malloc(sizeof *a->holes * 8);
        if (!a->holes)
            return tr_fail(TR_ERR_NOMEM, "arena: out of memory");
        a->cap_holes = 8;
        a->holes[0] = (tr_arena_block){0, a->capacity};
        a->n_holes = 1;
    }
    return TR_OK;
}

void tr_arena_destroy(tr_arena *a)
{
    free(a->holes);
    free(a->blocks);
    memset(a, 0, sizeof *a);
}

/* Make room for one more entry in a sorted block array. */
static int grow(tr_arena_block **arr, int n, int *cap)
{
    if (n < *cap)
        return TR_OK;
    int nc = *cap ? 2 * *cap : 8;
    tr_arena_block *p = realloc(*arr, sizeof *p * (size_t)nc);
    if (!p)
        return tr_fail(TR_ERR_NOMEM, "arena: out of memory");
    *arr = p;
    *cap = nc;
    return TR_OK;
}

static void insert_at(tr_arena_block *arr, int *n, int i, tr_arena_block b)
{
    memmove(arr + i + 1, arr + i, sizeof *arr * (size_t)(*n - i));
    arr[i] = b;
    (*n)++;
}

static void remove_at(tr_arena_block *arr, int *n, int i)
{
    memmove(arr + i, arr + i + 1, sizeof *arr * (size_t)(*n - i - 1));
    (*n)--;
}

/* First index whose offset is >= off. */
static int lower_bound(const tr_arena_block *arr, int n, size_t off)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (arr[mid].offset < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

size_t tr_arena_largest_hole(const tr_arena *a)
{
    size_t m = 0;
    for (int i = 0; i < a->n_holes; i++)
        if (a->holes[i].size > m)
            m = a->holes[i].size;
    return m;
}

int tr_arena_alloc(tr_arena *a, size_t bytes, size_t *offset)
{
    size_t need = round_up(bytes ? bytes : 1, a->align ? a->align : 1);
    int h = -1;
    for (int i = 0; need && i < a->n_holes; i++)
        if (a->holes[i].size >= need) {
            h = i;
            break;
        }
    if (h < 0)
        return tr_fail(TR_ERR_NOMEM,
                       "arena: no room for %zu bytes (%zu free in total, the largest hole %zu, "
                       "capacity %zu)",
                       bytes, a->capacity - a->used, tr_arena_largest_hole(a), a->capacity);
    if (grow(&a->blocks, a->n_blocks, &a->cap_blocks))
        return TR_ERR_NOMEM;
    size_t off = a->holes[h].offset;
    if (a->holes[h].size == need) {
        remove_at(a->holes, &a->n_holes, h);
    } else {
        a->holes[h].offset += need;
        a->holes[h].size -= need;
    }
    insert_at(a->blocks, &a->n_blocks, lower_bound(a->blocks, a->n_blocks, off),
              (tr_arena_block){off, need});
    a->used += need;
    if (a->used > a->peak)
        a->peak = a->used;
    *offset = off;
    return TR_OK;
}

int tr_arena_free(tr_arena *a, size_t offset)
{
    int i = lower_bound(a->blocks, a->n_blocks, offset);
    if (i >= a->n_blocks || a->blocks[i].offset != offset)
        return tr_fail(TR_ERR_INVALID, "arena: offset %zu is not the start of a block in use",
                       offset);
    tr_arena_block b = a->blocks[i];
    /* the hole list may need one more entry (when b touches no hole) */
    if (grow(&a->holes, a->n_holes, &a->cap_holes))
        return TR_ERR_NOMEM;
    remove_at(a->blocks, &a->n_blocks, i);
    a->used -= b.size;
    int h = lower_bound(a->holes, a->n_holes, b.offset); /* first hole after b */
    int merge_prev = h > 0 && a->holes[h - 1].offset + a->holes[h - 1].size == b.offset;
    int merge_next = h < a->n_holes && b.offset + b.size == a->holes[h].offset;
    if (merge_prev && merge_next) {
        a->holes[h - 1].size += b.size + a->holes[h].size;
        remove_at(a->holes, &a->n_holes, h);
    } else if (merge_prev) {
        a->holes[h - 1].size += b.size;
    } else if (merge_next) {
        a->holes[h].offset = b.offset;
        a->holes[h].size += b.size;
    } else {
        insert_at(a->holes, &a->n_holes, h, b);
    }
    return TR_OK;
}
