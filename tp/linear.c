/* Column- and row-parallel linear layers (weights (out, in), y = x W^T + b), built from the
 * kernel table's GEMM and the mappings of mappings.c. With T == 1 they are plain linears. */
#include "tp/tp.h"

#include "core/core.h"

/* y (N, OC) = x (N, IC) @ W^T + beta * y */
static void gemm_xWt(const tr_kernels *k, float *y, const float *x, const float *W, int N,
                     int IC, int OC, float beta)
{
    k->gemm(NULL, 0, 1, N, OC, IC, 1.0f, x, IC, W, IC, beta, y, OC);
}


/* dx (N, IC) = dy (N, OC) @ W (OC, IC) */
static void gemm_dx(const tr_kernels *k, float *dx, const float *dy, const float *W, int N,
                    int IC, int OC)
{
    k->gemm(NULL, 0, 0, N, IC, OC, 1.0f, dy, OC, W, IC, 0.0f, dx, IC);
}

/* dW (OC, IC) += dy^T (OC, N) @ x (N, IC) */
static void gemm_dW(const tr_kernels *k, float *dW, const float *dy, const float *x, int N,
                    int IC, int OC)
{
    k->gemm(NULL, 1, 0, OC, IC, N, 1.0f, dy, OC, x, IC, 1.0f, dW, IC);
}



/* A linear layer's input: fp32 (f), or bf16 storage (h: kernels.h's gemm_a16, gemm_b16 and
 * the fused linear ops read it; no LoRA then) */
typedef struct {
    const float *f;
    const uint16_t *h;
} row_input;

/* y (N, OC) = x W^T + beta y for either storage of x */
static void gemm_in_Wt(const tr_kernels *k, float *y, row_input x, const float *W, int N, int IC,
                       int OC, float beta)
{
    if (x.h)
        k->gemm_a16(NULL, 0, 1, N, OC, IC, 1.0f, x.h, IC, W, IC, beta, y, OC);
    else
        gemm_xWt(k, y, x.f, W, N, IC, OC, beta);
}

/* y (N, OC) = x W^T + b [+ residual, which may be y]: the table's fused linear_forward, or
 * its pieces (the same bits on the CPU) */
static void linear_xWt_bias(const tr_kernels *k, float *y, row_input x, const float *W,
                            const float *b, const float *residual, int N, int IC, int OC)
{
    if (k->linear_forward) {
        k->linear_forward(NULL, y, NULL, x.f, x.h, W, b, residual, N, IC, OC);
        return;
    }
    if (residual && residual != y)
        k->copy(NULL, y, residual, (size_t)N * OC * sizeof(float));
    gemm_in_Wt(k, y, x, W, N, IC, OC, residual ? 1.0f : 0.0f);
    if (b)
        k->bias_add(NULL, y, b, N, OC);
}

/* dx = dy W (dx NULL: skipped), dW += dy^T x (dW NULL: skipped) and db += sum_n dy (db NULL:
 * skipped): the table's fused linear_backward where it has one and both GEMMs are wanted.
 * dx16: dx stored bf16 instead (dx NULL; the caller checked for the fused op and dW). */
static void linear_dx_dW_db(const tr_kernels *k, float *dx, uint16_t *dx16, float *dW,
                            float *db, const float *dy, row_input x, const float *W, int N,
                            int IC, int OC)
{
    if ((dx || dx16) && dW && k->linear_backward) {
        k->linear_backward(NULL, dx, dx16, dW, db, dy, NULL, x.f, x.h, W, N, IC, OC);
        return;
    }
    if (dx)
        gemm_dx(k, dx, dy, W, N, IC, OC);
    if (dW && x.h) /* dW (OC, IC) += dy^T x16 */
        k->gemm_b16(NULL, 1, 0, OC, IC, N, 1.0f, dy, OC, x.h, IC, 1.0f, dW, IC);
    else if (dW)
        gemm_dW(k, dW, dy, x.f, N, IC, OC);
    if (db)
        k->bias_backward(NULL, db, dy, N, OC);
}

/* y (N, OC) += scale * (x A^T) B^T, keeping h = x A^T (N, r) */
/* xd = x * mask (elementwise: scale_rows of N*IC one-column rows) */
static const float *lora_dropped(const tr_kernels *k, const float *x, const tr_tp_lora *lo, int N,
                                 int IC)
{
    if (!lo->mask)
        return x;
    k->copy(NULL, lo->xd, x, (size_t)N * IC * sizeof(float));
    k->scale_rows(NULL, lo->xd, lo->mask, N * IC, 1);
    return lo->xd;
}

static void lora_forward(const tr_kernels *k, float *y, const float *x, const tr_tp_lora *lo,
                         int N, int IC, int OC)
{
    x = lora_dropped(k, x, lo, N, IC);
    gemm_xWt(k, lo->h, x, lo->A, N, IC, lo->r, 0.0f);
    k->gemm(NULL, 0, 1, N, OC, lo->r, lo->scale, lo->h, lo->r, lo->B, lo->r, 1.0f, y, OC);
}

/* From dy (N, OC): dh = scale dy B; dB += scale dy^T h; dA += dh^T x; dx += dh A. */
static void lora_backward(const tr_kernels *k, float *dx, const float *dy, const float *x,
                          const tr_tp_lora *lo, int N, int IC, int OC)
{
    int r = lo->r;
    k->gemm(NULL, 0, 0, N, r, OC, lo->scale, dy, OC, lo->B, r, 0.0f, lo->dh, r);
    if (lo->dB)
        k->gemm(NULL, 1, 0, OC, r, N, lo->scale, dy, OC, lo->h, r, 1.0f, lo->dB, r);
    if (lo->dA)
        k->gemm(NULL, 1, 0, r, IC, N, 1.0f, lo->dh, r, lora_dropped(k, x, lo, N, IC), IC, 1.0f,
                lo->dA, IC);
    if (dx && lo->mask) { /* dx += (dh A) * mask */
        k->gemm(NULL, 0, 0, N, IC, r, 1.0f, lo->dh, r, lo->A, IC, 0.0f, lo->xd, IC);
        k->scale_rows(NULL, lo->xd, lo->mask, N * IC, 1);
        k->axpy(NULL, dx, 1.0f, lo->xd, (size_t)N * IC);
    } else if (dx) {
        k->gemm(NULL, 0, 0, N, IC, r, 1.0f, lo->dh, r, lo->A, IC, 1.0f, dx, IC);
    }
}

int tr_tp_column_linear_forward(const tr_tp *tp, float *y, float *x, const float *W,
                                const float *b, int N, int IC, int OCl, float *y_full,
                                float *scratch)
{
    int rc = tr_tp_column_linear_forward_lora(tp, y, x, W, b, N, IC, OCl, NULL);
    if (rc || !y_full)
        return rc;
    return tr_tp_gather_from_region_forward(tp, y_full, y, N, OCl, scratch);
}

int tr_tp_column_linear_forward_lora(const tr_tp *tp, float *y, float *x, const float *W,
                                     const float *b, int N, int IC, int OCl,
                                     const tr_tp_lora *lora)
{
    const tr_kernels *k = tp->k;
    int first, count, rc;
    tr_tp_rows(tp, N, &first, &count);
    /* f forward is the identity; under SP the input is gathered from the sequence slices */
    rc = tr_tp_gather_from_sequence_region_forward(tp, x + (size_t)first * IC, x, N, IC);
    if (rc)
        return rc;
    row_input in = {x, NULL};
    linear_xWt_bias(k, y, in, W, b, NULL, N, IC, OCl);
    if (lora)
        lora_forward(k, y, x, lora, N, IC, OCl);
    return TR_OK;
}

int tr_tp_column_linear_forward16(const tr_tp *tp, float *y, uint16_t *x16, const float *W,
                                  const float *b, int N, int IC, int OCl)
{
    int first, count, rc;
    tr_tp_rows(tp, N, &first, &count);
    if (IC % 2)
        return tr_fail(TR_ERR_INVALID, "a bf16-storage input of %d columns: must be even", IC);
    /* under SP the rows are gathered as they are stored: IC/2 floats' bytes a row */
    rc = tr_tp_gather_from_sequence_region_forward(tp, (float *)(x16 + (size_t)first * IC),
                                                    (float *)x16, N, IC / 2);
    if (rc)
        return rc;
    row_input in = {NULL, x16};
    linear_xWt_bias(tp->k, y, in, W, b, NULL, N, IC, OCl);
    return TR_OK;
}

int tr_tp_column_linear_forward_out16(const tr_tp *tp, uint16_t *y16, uint16_t *gelu16, float *x,
                                      uint16_t *x16, const float *W, const float *b, int N,
                                      int IC, int OCl)
{
    const tr_kernels *k = tp->k;
    int first, count, rc;
    tr_tp_rows(tp, N, &first, &count);
    if (!k->linear_forward)
        return tr_fail(TR_ERR_INTERNAL, "a bf16-storage output needs the table's "
                                        "linear_forward (table %s)", k->name);
    if (x16 && IC % 2)
        return tr_fail(TR_ERR_INVALID, "a bf16-storage input of %d columns: must be even", IC);
    /* under SP the input rows are gathered as they are stored (bf16: IC/2 floats' bytes) */
    rc = x16 ? tr_tp_gather_from_sequence_region_forward(tp, (float *)(x16 + (size_t)first * IC),
                                                         (float *)x16, N, IC / 2)
             : tr_tp_gather_from_sequence_region_forward(tp, x + (size_t)first * IC, x, N, IC);
    if (rc)
        return rc;
    if (gelu16 && k->linear_gelu_forward16) { /* the GELU in the GEMM's epilogue */
        k->linear_gelu_forward16(NULL, y16, gelu16, x16 ? NULL : x, x16, W, b, N, IC, OCl);
        return TR_OK;
    }
    k->linear_forward(NULL, NULL, y16, x16 ? NULL : x, x16, W, b, NULL, N, IC, OCl);
    if (gelu16)
        k->gelu_forward16(NULL, gelu16, NULL, y16, (size_t)N * OCl);
    return TR_OK;
}

int tr_tp_column_linear_backward(const tr_tp *tp, float *dx, float *dW, float *db,
                                 const float *dy, const float *x, const float *W, int N,
                                 int IC, int OCl)
{
    return tr_tp_column_linear_backward_lora(tp, dx, dW, db, dy, x, W, N, IC, OCl, NULL);
}

/* column_backward's input gradient, conjugate of the forward's f (or, under SP, its gather):
 * all-reduced, or reduce-scattered in place (dx NULL: nothing) */
static int column_dx_reduce(const tr_tp *tp, float *dx, int N, int IC)
{
    if (!dx)
        return TR_OK;
    if (tp->sequence_parallel) {
        /* conjugate of the forward's gather: reduce-scatter, in place */
        int first, count;
        tr_tp_rows(tp, N, &first, &count);
        return tr_tp_reduce_scatter_to_sequence_region_forward(tp, dx, dx + (size_t)first * IC,
                                                               N, IC);
    }
    return tr_tp_copy_to_region_backward(tp, dx, (size_t)N * IC);
}

static int column_backward(const tr_tp *tp, float *dx, float *dW, float *db, const float *dy,
                           row_input x, const float *W, int N, int IC, int OCl,
                           const tr_tp_lora *lora)
{
    const tr_kernels *k = tp->k;
    linear_dx_dW_db(k, dx, NULL, dW, db, dy, x, W, N, IC, OCl);
    if (lora) /* its input gradient joins the base layer's before the reduction */
        lora_backward(k, dx, dy, x.f, lora, N, IC, OCl);
    return column_dx_reduce(tp, dx, N, IC);
}

int tr_tp_column_linear_backward_lora(const tr_tp *tp, float *dx, float *dW, float *db,
                                      const float *dy, const float *x, const float *W, int N,
                                      int IC, int OCl, const tr_tp_lora *lora)
{
    row_input in = {x, NULL};
    return column_backward(tp, dx, dW, db, dy, in, W, N, IC, OCl, lora);
}

int tr_tp_column_linear_backward16(const tr_tp *tp, float *dx, float *dW, float *db,
                                   const float *dy, const uint16_t *x16, const float *W, int N,
                                   int IC, int OCl)
{
    row_input in = {NULL, x16};
    return column_backward(tp, dx, dW, db, dy, in, W, N, IC, OCl, NULL);
}

int tr_tp_column_linear_backward_dy16(const tr_tp *tp, float *dx, uint16_t *dx16, float *dW,
                                      float *db, const uint16_t *dy16, const float *x,
                                      const uint16_t *x16, const float *W, int N, int IC,
                                      int OCl)
{
    const tr_kernels *k = tp->k;
    if (!(dx || dx16) || !dW || !k->linear_backward)
        return tr_fail(TR_ERR_INTERNAL, "a bf16-storage output gradient needs the table's "
                                        "linear_backward and both GEMMs (table %s)", k->name);
    if (dx16 && (tp->size > 1 || tp->sequence_parallel))
        return tr_fail(TR_ERR_INTERNAL, "a bf16 input gradient of a column-parallel linear "
                                        "needs one rank (it is not reduced)");
    k->linear_backward(NULL, dx16 ? NULL : dx, dx16, dW, db, NULL, dy16, x, x16, W, N, IC, OCl);
    return dx16 ? TR_OK : column_dx_reduce(tp, dx, N, IC);
}

int tr_tp_row_linear_forward(const tr_tp *tp, float *y, const float *residual, const float *x,
                             const float *W, const float *b, int N, int ICl, int OC,
                             float *scratch)
{
    return tr_tp_row_linear_forward_lora(tp, y, residual, x, W, b, N, ICl, OC, scratch, NULL);
}

static int row_forward(const tr_tp *tp, float *y, const float *residual, row_input x,
                       const float *W, const float *b, int N, int ICl, int OC, float *scratch,
                       const tr_tp_lora *lora)
{
    const tr_kernels *k = tp->k;
    int first, count, rc;
    tr_tp_rows(tp, N, &first, &count);
    if (tp->size == 1 && !lora) { /* the unsplit layer: the residual and bias in the GEMM */
        linear_xWt_bias(k, y, x, W, b, residual, N, ICl, OC);
        return TR_OK;
    }
    if (tp->size == 1) {
        /* the unsplit layer: accumulate onto the residual inside the GEMM */
        if (residual && residual != y)
            k->copy(NULL, y, residual, (size_t)N * OC * sizeof(float));
        gemm_in_Wt(k, y, x, W, N, ICl, OC, residual ? 1.0f : 0.0f);
        if (lora)
            lora_forward(k, y, x.f, lora, N, ICl, OC);
    } else {
        /* partial (N, OC) on every rank; reduce (g forward, or reduce-scatter under SP) */
        gemm_in_Wt(k, scratch, x, W, N, ICl, OC, 0.0f);
        if (lora) /* the adapter's partial rides on the base layer's reduction */
            lora_forward(k, scratch, x.f, lora, N, ICl, OC);
        float *reduced = residual ? scratch + (size_t)first * OC : y;
        rc = tr_tp_reduce_scatter_to_sequence_region_forward(tp, scratch, reduced, N, OC);
        if (rc)
            return rc;
        if (residual)
            k->add(NULL, y, residual, reduced, (size_t)count * OC);
    }
    if (b) /* once, after the reduction */
        k->bias_add(NULL, y, b, count, OC);
    return TR_OK;
}

static int row_partial(const tr_tp *tp, float *sum, int accumulate, row_input x,
                       const float *W, int N, int ICl, int OC, const tr_tp_lora *lora)
{
    if (tp->size == 1)
        return tr_fail(TR_ERR_INTERNAL, "a row-parallel partial sum needs tensor parallelism");
    gemm_in_Wt(tp->k, sum, x, W, N, ICl, OC, accumulate ? 1.0f : 0.0f);
    if (lora) /* the adapter's partial rides on the same reduction */
        lora_forward(tp->k, sum, x.f, lora, N, ICl, OC);
    return TR_OK;
}

int tr_tp_row_linear_partial_lora(const tr_tp *tp, float *sum, int accumulate, const float *x,
                                  const float *W, int N, int ICl, int OC,
                                  const tr_tp_lora *lora)
{
    row_input in = {x, NULL};
    return row_partial(tp, sum, accumulate, in, W, N, ICl, OC, lora);
}

int tr_tp_row_linear_partial16(const tr_tp *tp, float *sum, int accumulate,
                               const uint16_t *x16, const float *W, int N, int ICl, int OC)
{
    row_input in = {NULL, x16};
    return row_partial(tp, sum, accumulate, in, W, N, ICl, OC, NULL);
}

int tr_tp_row_reduce(const tr_tp *tp, float *y, const float *residual, float *sum,
                     const float *b1, const float *b2, int N, int OC)
{
    const tr_kernels *k = tp->k;
    int first, count;
    tr_tp_rows(tp, N, &first, &count);
    float *reduced = residual ? sum + (size_t)first * OC : y;
    int rc = tr_tp_reduce_scatter_to_sequence_region_forward(tp, sum, reduced, N, OC);
    if (rc)
        return rc;
    if (residual)
        k->add(NULL, y, residual, reduced, (size_t)count * OC);
    if (b1)
        k->bias_add(NULL, y, b1, count, OC);
    if (b2)
        k->bias_add(NULL, y, b2, count, OC);
    return TR_OK;
}

int tr_tp_row_linear_forward_lora(const tr_tp *tp, float *y, const float *residual,
                                  const float *x, const float *W, const float *b, int N,
                                  int ICl, int OC, float *scratch, const tr_tp_lora *lora)
{
    row_input in = {x, NULL};
    return row_forward(tp, y, residual, in, W, b, N, ICl, OC, scratch, lora);
}

int tr_tp_row_linear_forward16(const tr_tp *tp, float *y, const float *residual,
                               const uint16_t *x16, const float *W, const float *b, int N,
                               int ICl, int OC, float *scratch)
{
    row_input in = {NULL, x16};
    return row_forward(tp, y, residual, in, W, b, N, ICl, OC, scratch, NULL);
}

int tr_tp_row_linear_backward(const tr_tp *tp, float *dx, float *dW, float *db,
                              const float *dy, const float *x, const float *W, int N, int ICl,
                              int OC, float *scratch)
{
    return tr_tp_row_linear_backward_lora(tp, dx, dW, db, dy, x, W, N, ICl, OC, scratch, NULL);
}

/* The row-parallel backward's output gradient, all rows: dy itself (g backward is the
 * identity), or under SP gathered into scratch (conjugate of the forward's reduce-scatter). */
static int row_dy_all(const tr_tp *tp, const float *dy, float *scratch, int N, int OC,
                      const float **dy_all)
{
    *dy_all = dy;
    if (!tp->sequence_parallel)
        return TR_OK;
    *dy_all = scratch;
    return tr_tp_gather_from_sequence_region_forward(tp, dy, scratch, N, OC);
}

/* dx16: the input gradient stored bf16 instead of dx (dx NULL; the table's linear_backward,
 * no adapter) */
static int row_backward(const tr_tp *tp, float *dx, uint16_t *dx16, float *dW, float *db,
                        const float *dy, row_input x, const float *W, int N, int ICl, int OC,
                        float *scratch, const tr_tp_lora *lora)
{
    const tr_kernels *k = tp->k;
    int first, count, rc;
    tr_tp_rows(tp, N, &first, &count);
    if (dx16 && (!k->linear_backward || !dW || lora))
        return tr_fail(TR_ERR_INTERNAL, "a bf16-storage input gradient needs the table's "
                                        "linear_backward and the weight gradient (table %s)",
                       k->name);
    const float *dy_all;
    if ((rc = row_dy_all(tp, dy, scratch, N, OC, &dy_all)))
        return rc;
    /* the bias gradient sums this rank's rows: dy_all's own under SP (the others' come with
     * the TP reduction of the sequence-parallel gradients), so fused only without SP */
    linear_dx_dW_db(k, dx, dx16, dW, dy_all == dy ? db : NULL, dy_all, x, W, N, ICl, OC);
    if (lora)
        lora_backward(k, dx, dy_all, x.f, lora, N, ICl, OC);
    if (db && dy_all != dy)
        k->bias_backward(NULL, db, dy, count, OC);
    return TR_OK;
}

int tr_tp_row_linear_backward_lora(const tr_tp *tp, float *dx, float *dW, float *db,
                                   const float *dy, const float *x, const float *W, int N,
                                   int ICl, int OC, float *scratch, const tr_tp_lora *lora)
{
    row_input in = {x, NULL};
    return row_backward(tp, dx, NULL, dW, db, dy, in, W, N, ICl, OC, scratch, lora);
}

int tr_tp_row_linear_backward16(const tr_tp *tp, float *dx, float *dW, float *db,
                                const float *dy, const uint16_t *x16, const float *W, int N,
                                int ICl, int OC, float *scratch)
{
    row_input in = {NULL, x16};
    return row_backward(tp, dx, NULL, dW, db, dy, in, W, N, ICl, OC, scratch, NULL);
}

int tr_tp_row_linear_backward16_dx16(const tr_tp *tp, uint16_t *dx16, float *dW, float *db,
                                     const float *dy, const uint16_t *x16, const float *W, int N,
                                     int ICl, int OC, float *scratch)
{
    row_input in = {NULL, x16};
    return row_backward(tp, NULL, dx16, dW, db, dy, in, W, N, ICl, OC, scratch, NULL);
}

int tr_tp_row_linear_backward_gelu16(const tr_tp *tp, uint16_t *dpre16, float *dpre_bias,
                                     float *dW, float *db, const float *dy, const uint16_t *x16,
                                     const uint16_t *pre16, const float *W, int N, int ICl,
                                     int OC, float *scratch)
{
    const tr_kernels *k = tp->k;
    int first, count, rc;
    tr_tp_rows(tp, N, &first, &count);
    if (!k->linear_backward_gelu16 || !dW)
        return tr_fail(TR_ERR_INTERNAL, "the GELU in fc_proj's backward needs the table's "
                                        "linear_backward_gelu16 and the weight gradient (table %s)",
                       k->name);
    const float *dy_all;
    if ((rc = row_dy_all(tp, dy, scratch, N, OC, &dy_all)))
        return rc;
    /* (the bias gradient of this rank's rows: fused only without SP, as row_backward's) */
    k->linear_backward_gelu16(NULL, dpre16, dpre_bias, dW, dy_all == dy ? db : NULL, dy_all, x16,
                              pre16, W, N, ICl, OC);
    if (db && dy_all != dy)
        k->bias_backward(NULL, db, dy, count, OC);
    return TR_OK;
}
