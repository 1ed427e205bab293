/* dp_check, groups: finalize over TP (replicated parameters' partial gradients) and over the
 * embedding group (tied wte on the first and last pipeline stage, at different offsets), and
 * the global gradient norm (replicated ranges counted once, shards once each), with and
 * without ZeRO-1. World layouts: TP x DP with TP fastest (rank = t + d*TP) and PP = 2 x DP
 * (rank = d + s*DP). Values are multiples of 1/8, so every expected number is exact. */
#include "dp_check.h"

#include <math.h>
#include <string.h>

static uint64_t allreduces(tr_comm *c)
{
    tr_comm_counters k;
    tr_comm_get_counters(c, &k);
    return k.ops[TR_COMM_OP_ALLREDUCE];
}

/* Does this rank hold the final value of element i? (its shard, or everything) */
typedef struct {
    unsigned char *own;
} own_ctx;

static void mark_own(void *ctx, size_t off, size_t cnt, size_t shard_off)
{
    (void)shard_off;
    memset(((own_ctx *)ctx)->own + off, 1, cnt);
}

static unsigned char *owned(tr_dp *dp, size_t n)
{
    unsigned char *own = calloc(n, 1);
    own_ctx c = {own};
    OK(tr_dp_shard_foreach(dp, 0, n, mark_own, &c));
    return own;
}

/* S1 [0,1000) and S2 [1300,1800) differ per TP rank; R [1000,1300) (two tensors) is
 * replicated: each TP rank holds a partial gradient, finalize adds them over TP. */
static void check_tp_and_norm(tr_comm *world, int TP, int zero)
{
    int W = tr_comm_size(world), r = tr_comm_rank(world);
    int D = W / TP, t = r % TP, d = r / TP;
    tr_comm *tpc = NULL, *dpc = NULL;
    OK(tr_comm_split(world, d, t, "tp", &tpc));
    OK(tr_comm_split(world, t, d, "dp", &dpc));
    const size_t n = 1800;
    const size_t bounds[] = {0, 1000, 1150, 1300, 1800};
    const int M = 2, salt = 40 + TP + zero;
    float *g = calloc(n, 4), *p = calloc(n, 4);
    tr_dp_config cfg = {.bucket_size_mb = mb_of(256), .overlap_grad_reduce = 1,
                        .distributed_optimizer = zero};
    tr_dp *dp = NULL;
    OK(tr_dp_create(&cfg, dpc, g, p, n, &dp));
    run_window(dp, g, bounds, 4, NULL, M, t * 8 + d, salt, 1);

    tr_dp_range rep[2] = {{1000, 150}, {1150, 150}};
    tr_comm_reset_counters(tpc);
    const tr_kernels *K = tr_kernels_cpu();
    size_t held_before = K->bytes_in_use(NULL);
    OK(tr_dp_finalize_grads(dp, tpc, rep, 2, NULL, NULL, 0));
    size_t held_after = K->bytes_in_use(NULL);
    unsigned char *own = owned(dp, n);
    size_t rep_owned = 0;
    for (size_t i = 1000; i < 1300; i++)
        rep_owned += own[i];
    /* two pieces packed into one all-reduce: the packing buffer is the backend's memory (on
     * CUDA a device buffer beside the gradients, not host memory the copies cannot reach) */
    if (TP > 1 && !zero && rep_owned == 300)
        CHECK(held_after >= held_before + 300 * sizeof(float),
              "finalize: the packing of two replicated ranges did not come from the kernel "
              "backend's allocator (%zu bytes held before, %zu after)",
              held_before, held_after);
    CHECK(allreduces(tpc) == (TP > 1 && rep_owned ? 1u : 0u),
          "finalize: %llu TP all-reduces for two replicated ranges",
          (unsigned long long)allreduces(tpc));

    /* expected gradient of TP rank tt at element i (after DP average; R summed over TP) */
    double sumsq = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        int replicated = i >= 1000 && i < 1300;
        double rsum = 0;
        for (int tt = 0; tt < TP; tt++) {
            float avg = 0;
            for (int dd = 0; dd < D; dd++)
                for (int m = 0; m < M; m++)
                    avg += gval(tt * 8 + dd, m, i, salt);
            avg /= (float)D;
            if (replicated)
                rsum += avg;
            else
                sumsq += (double)avg * avg;
            if (tt == t && !replicated && own[i] && g[i] != avg && bad++ < 3)
                CHECK(0, "TP %d element %zu: %g, want %g", TP, i, g[i], avg);
        }
        if (replicated) {
            sumsq += rsum * rsum;
            if (own[i] && g[i] != (float)rsum && bad++ < 3)
                CHECK(0, "TP %d replicated element %zu: %g, want %g", TP, i, g[i], rsum);
        }
    }

    /* norm: S1, S2 everywhere, R only on TP rank 0; over MP (= TP here) or the world */
    tr_dp_range counted[3] = {{0, 1000}, {1300, 500}, {1000, 300}};
    double norm = -1;
    OK(tr_dp_grad_norm(dp, counted, t == 0 ? 3 : 2, zero ? world : tpc, &norm));
    double want = sqrt(sumsq);
    CHECK(norm == want, "TP %d zero %d: grad norm %.17g, serial %.17g", TP, zero, norm, want);
    double *all = calloc((size_t)W, sizeof *all);
    OK(tr_comm_allgather(world, &norm, all, (size_t)W, TR_COMM_F64));
    for (int q = 0; q < W; q++)
        CHECK(memcmp(&all[q], &norm, sizeof norm) == 0, "norm of rank %d %.17g != mine %.17g",
              q, all[q], norm);
    free(all);
    free(own);
    tr_dp_free(dp);
    free(g);
    free(p);
    tr_comm_destroy(tpc);
    tr_comm_destroy(dpc);
}

/* Two stages: stage 0 = [layers 700][wte E], stage 1 = [wte E][layers 1234]; wte aligned. */
static void check_embedding(tr_comm *world, int zero)
{
    int W = tr_comm_size(world), r = tr_comm_rank(world);
    int D = W / 2, s = r / D, d = r % D;
    tr_comm *emb = NULL, *dpc = NULL;
    OK(tr_comm_split(world, d, s, "embed", &emb));
    OK(tr_comm_split(world, s, d, "dp", &dpc));
    const size_t E = 2000;
    size_t n = s == 0 ? 700 + E : E + 1234, wte = s == 0 ? 700 : 0;
    size_t b0[] = {0, 300, 700, 700 + E}, b1[] = {0, E, E + 600, E + 1234};
    const size_t *bounds = s == 0 ? b0 : b1;
    const int M = 3, salt = 60 + zero;
    float *g = calloc(n, 4), *p = calloc(n, 4);
    tr_dp_range wr = {wte, E};
    tr_dp_config cfg = {.bucket_size_mb = mb_of(300), .overlap_grad_reduce = 1,
                        .distributed_optimizer = zero, .aligned = &wr, .n_aligned = 1};
    tr_dp *dp = NULL;
    OK(tr_dp_create(&cfg, dpc, g, p, n, &dp));
    OK(tr_dp_start(dp, M));
    for (int m = 0; m < M; m++)
        for (int k = 0; k < 3; k++) {
            for (size_t i = bounds[k]; i < bounds[k + 1]; i++) /* wte: index within wte */
                g[i] += i >= wte && i < wte + E ? gval(s * 8 + d, m, i - wte, salt)
                                                : gval(s * 8 + d, m, i, salt + 1);
            OK(tr_dp_report(dp, bounds[k], bounds[k + 1] - bounds[k]));
        }
    OK(tr_dp_finish(dp));
    if (tr_dp_sharded(dp)) {
        tr_dp_range shifted = {wte + 1, E - 1};
        int rc = tr_dp_finalize_grads(dp, NULL, NULL, 0, emb, &shifted, 1);
        CHECK(rc == TR_ERR_INVALID && strstr(tr_errmsg(), "not one of the aligned ranges"),
              "unaligned embedding range under ZeRO-1: %d %s", rc, tr_errmsg());
    }
    tr_comm_reset_counters(emb);
    OK(tr_dp_finalize_grads(dp, NULL, NULL, 0, emb, &wr, 1));
    CHECK(allreduces(emb) == 1, "%llu embedding all-reduces",
          (unsigned long long)allreduces(emb));
    unsigned char *own = owned(dp, n);
    size_t bad = 0, nown = 0;
    for (size_t j = 0; j < E; j++) {
        if (!own[wte + j])
            continue;
        nown++;
        float want = 0;
        for (int dd = 0; dd < D; dd++)
            for (int m = 0; m < M; m++)
                want += gval(0 * 8 + dd, m, j, salt) + gval(1 * 8 + dd, m, j, salt);
        want /= (float)D;
        if (g[wte + j] != want && bad++ < 3)
            CHECK(0, "stage %d wte element %zu: %g, want %g", s, j, g[wte + j], want);
    }
    CHECK(nown > 0 && (!tr_dp_sharded(dp) || nown < E), "owns %zu of %zu wte elements", nown,
          E);
    free(own);
    tr_dp_free(dp);
    free(g);
    free(p);
    tr_comm_destroy(emb);
    tr_comm_destroy(dpc);
}

void check_groups(tr_comm *world)
{
    int W = tr_comm_size(world);
    for (int zero = 0; zero <= 1; zero++) {
        check_tp_and_norm(world, 1, zero);
        if (W % 2 == 0) {
            check_tp_and_norm(world, 2, zero);
            check_embedding(world, zero);
        }
    }
}
