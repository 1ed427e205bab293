/* Per-layer tensor-parallel check, run as T ranks by `trident launch --nproc T`:
 *   tp_layer_check [--sp] [--timeout S]
 * For the column-parallel linear (plain and with gathered output), the row-parallel linear
 * (with and without residual aliasing), the vocab-parallel embedding and the vocab-parallel
 * cross-entropy (also with a rank holding only padding), the forward output and the input
 * and weight gradients of the split layer on every rank equal the matching slices of the
 * unsplit layer (a one-rank tr_tp, computed locally): relative difference <= 1e-5.
 * The unsplit layer is itself checked against the definition computed here in double (a
 * bug shared by the split and unsplit code, which every T > 1 comparison misses, fails
 * there: e.g. the linear layers' bias gradient left at zero, injected in tp/linear.c, failed
 * every run's definition check and passed the comparisons with the unsplit layer). At T = 1
 * the split layer is the unsplit code, so that run (tp-layers-reference) is the definition
 * check of every layer and the one-rank context (no communicator).
 * With --sp (T > 1) the same under sequence parallelism. Exit 0 when everything matched. */
#include "tp_check.h"
#include "tp/tp.h"

#define TOL 1e-5

static tr_tp one; /* the unsplit reference */
static tr_tp tp;  /* this rank's */
static const int N = 12; /* token rows: 2 sequences of 6 */

static void rows_of(int *r0, int *nl) { tr_tp_rows(&tp, N, r0, nl); }

/* The unsplit linear layer against its definition in double: y = [res +] x W^T + b,
 * dx = dy W, dW = dy^T x, db = column sums of dy (W: OC x IC; res may be NULL). */
static void expect_linear_definition(const char *what, const float *y, const float *dx,
                                     const float *dW, const float *db, const float *x,
                                     const float *W, const float *b, const float *res,
                                     const float *dy, int IC, int OC)
{
    float *want_y = tc_floats((size_t)N * OC), *want_dx = tc_floats((size_t)N * IC);
    float *want_dW = tc_floats((size_t)OC * IC), *want_db = tc_floats(OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = (double)b[o] + (res ? res[(size_t)n * OC + o] : 0.0);
            for (int i = 0; i < IC; i++)
                acc += (double)x[(size_t)n * IC + i] * W[(size_t)o * IC + i];
            want_y[(size_t)n * OC + o] = (float)acc;
        }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IC; i++) {
            double acc = 0;
            for (int o = 0; o < OC; o++)
                acc += (double)dy[(size_t)n * OC + o] * W[(size_t)o * IC + i];
            want_dx[(size_t)n * IC + i] = (float)acc;
        }
    for (int o = 0; o < OC; o++) {
        double sum = 0;
        for (int n = 0; n < N; n++)
            sum += dy[(size_t)n * OC + o];
        want_db[o] = (float)sum;
        for (int i = 0; i < IC; i++) {
            double acc = 0;
            for (int n = 0; n < N; n++)
                acc += (double)dy[(size_t)n * OC + o] * x[(size_t)n * IC + i];
            want_dW[(size_t)o * IC + i] = (float)acc;
        }
    }
    char m[96];
    snprintf(m, sizeof m, "%s, unsplit vs definition: output", what);
    tc_expect_close(m, y, want_y, (size_t)N * OC, TOL);
    snprintf(m, sizeof m, "%s, unsplit vs definition: input gradient", what);
    tc_expect_close(m, dx, want_dx, (size_t)N * IC, TOL);
    snprintf(m, sizeof m, "%s, unsplit vs definition: weight gradient", what);
    tc_expect_close(m, dW, want_dW, (size_t)OC * IC, TOL);
    snprintf(m, sizeof m, "%s, unsplit vs definition: bias gradient", what);
    tc_expect_close(m, db, want_db, OC, TOL);
    free(want_y), free(want_dx), free(want_dW), free(want_db);
}

static void check_column(int gather_output)
{
    const int IC = 8, OC = 16, OCl = OC / tp.size;
    int r0, Nl;
    rows_of(&r0, &Nl);
    float *x = tc_floats((size_t)N * IC), *W = tc_floats((size_t)OC * IC), *b = tc_floats(OC);
    float *dy = tc_floats((size_t)N * OC);
    fill(x, (size_t)N * IC, 1, 1.0f);
    fill(W, (size_t)OC * IC, 2, 0.5f);
    fill(b, OC, 3, 0.1f);
    fill(dy, (size_t)N * OC, 4, 1.0f);
    /* reference */
    float *y_ref = tc_floats((size_t)N * OC), *dx_ref = tc_floats((size_t)N * IC);
    float *dW_ref = tc_floats((size_t)OC * IC), *db_ref = tc_floats(OC);
    float *x_ref = tc_fdup(x, (size_t)N * IC);
    OK(tr_tp_column_linear_forward(&one, y_ref, x_ref, W, b, N, IC, OC, NULL, NULL));
    OK(tr_tp_column_linear_backward(&one, dx_ref, dW_ref, db_ref, dy, x_ref, W, N, IC, OC));
    expect_linear_definition("column", y_ref, dx_ref, dW_ref, db_ref, x, W, b, NULL, dy, IC, OC);
    /* split: output rows [t*OCl, ..) of W and b; under SP only our input rows are given */
    float *xs = tc_floats((size_t)N * IC), *Ws = tc_floats((size_t)OCl * IC), *bs = tc_floats(OCl);
    for (size_t i = 0; i < (size_t)N * IC; i++)
        xs[i] = NAN; /* rows of other ranks must come from the gather */
    memcpy(xs + (size_t)r0 * IC, x + (size_t)r0 * IC, (size_t)Nl * IC * sizeof(float));
    slice(Ws, W, IC, tp.rank * OCl, OCl, 0, IC);
    slice(bs, b, 1, tp.rank * OCl, OCl, 0, 1);
    float *y = tc_floats((size_t)N * OCl);
    float *y_full = gather_output ? tc_floats((size_t)N * OC) : NULL;
    float *scratch = tc_floats((size_t)N * OC);
    OK(tr_tp_column_linear_forward(&tp, y, xs, Ws, bs, N, IC, OCl, y_full, scratch));
    tc_expect_close("column: gathered input", xs, x, (size_t)N * IC, 0.0);
    expect_slice("column: output", y, y_ref, OC, 0, N, tp.rank * OCl, OCl, TOL);
    float *dys = tc_floats((size_t)N * OCl);
    if (gather_output) {
        tc_expect_close("column: gathered output", y_full, y_ref, (size_t)N * OC, TOL);
        /* the gather's backward is the split */
        OK(tr_tp_scatter_to_region_forward(&tp, dys, dy, N, OCl));
    } else {
        slice(dys, dy, OC, 0, N, tp.rank * OCl, OCl);
    }
    float *dx = tc_floats((size_t)N * IC), *dW = tc_floats((size_t)OCl * IC), *db = tc_floats(OCl);
    OK(tr_tp_column_linear_backward(&tp, dx, dW, db, dys, xs, Ws, N, IC, OCl));
    expect_slice("column: input gradient", dx + (size_t)r0 * IC, dx_ref, IC, r0, Nl, 0, IC, TOL);
    expect_slice("column: weight gradient", dW, dW_ref, IC, tp.rank * OCl, OCl, 0, IC, TOL);
    expect_slice("column: bias gradient", db, db_ref, 1, tp.rank * OCl, OCl, 0, 1, TOL);
    free(x), free(W), free(b), free(dy), free(y_ref), free(dx_ref), free(dW_ref), free(db_ref);
    free(x_ref), free(xs), free(Ws), free(bs), free(y), free(y_full), free(scratch), free(dys);
    free(dx), free(dW), free(db);
}

static void check_row(int alias_residual)
{
    const int IC = 16, OC = 8, ICl = IC / tp.size;
    int r0, Nl;
    rows_of(&r0, &Nl);
    float *x = tc_floats((size_t)N * IC), *W = tc_floats((size_t)OC * IC), *b = tc_floats(OC);
    float *res = tc_floats((size_t)N * OC), *dy = tc_floats((size_t)N * OC);
    fill(x, (size_t)N * IC, 11, 1.0f);
    fill(W, (size_t)OC * IC, 12, 0.5f);
    fill(b, OC, 13, 0.1f);
    fill(res, (size_t)N * OC, 14, 1.0f);
    fill(dy, (size_t)N * OC, 15, 1.0f);
    float *y_ref = tc_floats((size_t)N * OC), *dx_ref = tc_floats((size_t)N * IC);
    float *dW_ref = tc_floats((size_t)OC * IC), *db_ref = tc_floats(OC);
    OK(tr_tp_row_linear_forward(&one, y_ref, res, x, W, b, N, IC, OC, NULL));
    OK(tr_tp_row_linear_backward(&one, dx_ref, dW_ref, db_ref, dy, x, W, N, IC, OC, NULL));
    expect_linear_definition("row", y_ref, dx_ref, dW_ref, db_ref, x, W, b, res, dy, IC, OC);
    /* split: input columns of x (the scatter mapping) and of W; our rows of the residual */
    float *xs = tc_floats((size_t)N * ICl), *Ws = tc_floats((size_t)OC * ICl);
    OK(tr_tp_scatter_to_region_forward(&tp, xs, x, N, ICl));
    slice(Ws, W, IC, 0, OC, tp.rank * ICl, ICl);
    float *y = tc_floats((size_t)Nl * OC), *ress = tc_floats((size_t)Nl * OC);
    float *scratch = tc_floats((size_t)N * OC);
    slice(ress, res, OC, r0, Nl, 0, OC);
    if (alias_residual)
        memcpy(y, ress, (size_t)Nl * OC * sizeof(float));
    OK(tr_tp_row_linear_forward(&tp, y, alias_residual ? y : ress, xs, Ws, b, N, ICl, OC,
                                scratch));
    expect_slice("row: output", y, y_ref, OC, r0, Nl, 0, OC, TOL);
    float *dys = tc_floats((size_t)Nl * OC), *dx = tc_floats((size_t)N * ICl);
    float *dW = tc_floats((size_t)OC * ICl), *db = tc_floats(OC);
    slice(dys, dy, OC, r0, Nl, 0, OC);
    OK(tr_tp_row_linear_backward(&tp, dx, dW, db, dys, xs, Ws, N, ICl, OC, scratch));
    expect_slice("row: input gradient", dx, dx_ref, IC, 0, N, tp.rank * ICl, ICl, TOL);
    expect_slice("row: weight gradient", dW, dW_ref, IC, 0, OC, tp.rank * ICl, ICl, TOL);
    if (tp.sequence_parallel) /* partial over our rows: what the engine all-reduces */
        OK(tr_comm_allreduce(tp.comm, db, db, OC, TR_COMM_F32, TR_COMM_SUM));
    tc_expect_close("row: bias gradient", db, db_ref, OC, TOL);
    expect_same_on_all(tp.comm, "row: bias gradient", db, OC);
    free(x), free(W), free(b), free(res), free(dy), free(y_ref), free(dx_ref), free(dW_ref);
    free(db_ref), free(xs), free(Ws), free(y), free(ress), free(scratch), free(dys), free(dx);
    free(dW), free(db);
}

static void make_ids(int32_t *ids, int V, int salt)
{
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((unsigned)(i * 7 + salt * 13 + i * i) % (unsigned)V);
    ids[0] = V - 1; /* the last real id, held by the last rank that holds real ids */
}

static void check_embedding(void)
{
    const int C = 8, V = 27, Vp = 32, Vl = Vp / tp.size;
    int r0, Nl;
    rows_of(&r0, &Nl);
    int32_t ids[12];
    make_ids(ids, V, 1);
    float *table = tc_floats((size_t)Vp * C), *dout = tc_floats((size_t)N * C);
    fill(table, (size_t)Vp * C, 21, 1.0f);
    fill(dout, (size_t)N * C, 22, 1.0f);
    float *out_ref = tc_floats((size_t)N * C), *dtable_ref = tc_floats((size_t)Vp * C);
    OK(tr_tp_vocab_embedding_forward(&one, out_ref, ids, table, N, C, Vp, NULL));
    OK(tr_tp_vocab_embedding_backward(&one, dtable_ref, dout, ids, N, C, Vp, NULL, NULL));
    /* the definition: rows of the table; each row's gradient the sum of its tokens' */
    float *want_out = tc_floats((size_t)N * C), *want_dtable = tc_floats((size_t)Vp * C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            want_out[(size_t)n * C + c] = table[(size_t)ids[n] * C + c];
            want_dtable[(size_t)ids[n] * C + c] += dout[(size_t)n * C + c];
        }
    tc_expect_close("embedding, unsplit vs definition: output", out_ref, want_out, (size_t)N * C, 0.0);
    tc_expect_close("embedding, unsplit vs definition: table gradient", dtable_ref, want_dtable,
                    (size_t)Vp * C, TOL);
    free(want_out), free(want_dtable);
    float *ts = tc_floats((size_t)Vl * C), *out = tc_floats((size_t)Nl * C);
    float *scratch = tc_floats((size_t)N * C);
    slice(ts, table, C, tp.rank * Vl, Vl, 0, C);
    OK(tr_tp_vocab_embedding_forward(&tp, out, ids, ts, N, C, Vl, scratch));
    expect_slice("embedding: output", out, out_ref, C, r0, Nl, 0, C, 0.0);
    float *douts = tc_floats((size_t)Nl * C), *dts = tc_floats((size_t)Vl * C);
    slice(douts, dout, C, r0, Nl, 0, C);
    const float *dall = NULL;
    OK(tr_tp_vocab_embedding_backward(&tp, dts, douts, ids, N, C, Vl, scratch, &dall));
    expect_slice("embedding: table gradient", dts, dtable_ref, C, tp.rank * Vl, Vl, 0, C, TOL);
    tc_expect_close("embedding: gathered output gradient", dall, dout, (size_t)N * C, 0.0);
    free(table), free(dout), free(out_ref), free(dtable_ref), free(ts), free(out), free(scratch);
    free(douts), free(dts);
}

static void check_cross_entropy(int V)
{
    const int Vp = 32, Vl = Vp / tp.size;
    int32_t targets[12];
    make_ids(targets, V, 2);
    float *logits = tc_floats((size_t)N * Vp);
    fill(logits, (size_t)N * Vp, 31, 3.0f);
    float *loss_ref = tc_floats(N), *stats_ref = tc_floats(3 * (size_t)N);
    float *dl_ref = tc_floats((size_t)N * Vp);
    OK(tr_tp_vocab_cross_entropy_forward(&one, loss_ref, stats_ref, logits, targets, N, Vp, V));
    OK(tr_tp_vocab_cross_entropy_backward(&one, dl_ref, logits, stats_ref, targets, N, Vp, V,
                                          1.0f / N));
    /* the definition, in double, as an independent check of the reference */
    for (int n = 0; n < N; n++) {
        double mx = -INFINITY, se = 0;
        for (int c = 0; c < V; c++)
            mx = fmax(mx, logits[(size_t)n * Vp + c]);
        for (int c = 0; c < V; c++)
            se += exp(logits[(size_t)n * Vp + c] - mx);
        double want = log(se) + mx - logits[(size_t)n * Vp + targets[n]];
        CHECK(fabs(want - loss_ref[n]) <= 1e-5 * fabs(want) + 1e-6, "cross-entropy row %d: "
              "%.7g vs %.7g", n, loss_ref[n], want);
        /* gradient: (softmax - onehot(target)) / N on the real columns, 0 on padding */
        for (int c = 0; c < Vp; c++) {
            double g = c < V ? (exp(logits[(size_t)n * Vp + c] - mx) / se - (c == targets[n])) / N
                             : 0.0;
            CHECK(fabs(g - dl_ref[(size_t)n * Vp + c]) <= 1e-6,
                  "cross-entropy gradient row %d column %d: %.7g vs %.7g", n, c,
                  dl_ref[(size_t)n * Vp + c], g);
        }
    }
    float *ls = tc_floats((size_t)N * Vl), *loss = tc_floats(N), *stats = tc_floats(3 * (size_t)N);
    slice(ls, logits, Vp, 0, N, tp.rank * Vl, Vl);
    OK(tr_tp_vocab_cross_entropy_forward(&tp, loss, stats, ls, targets, N, Vl, V));
    char what[64];
    snprintf(what, sizeof what, "cross-entropy (V=%d): losses", V);
    tc_expect_close(what, loss, loss_ref, N, TOL);
    expect_same_on_all(tp.comm, what, loss, N);
    /* the gradient in place of the logits, as the model does */
    OK(tr_tp_vocab_cross_entropy_backward(&tp, ls, ls, stats, targets, N, Vl, V, 1.0f / N));
    snprintf(what, sizeof what, "cross-entropy (V=%d): logit gradient", V);
    expect_slice(what, ls, dl_ref, Vp, 0, N, tp.rank * Vl, Vl, TOL);
    free(logits), free(loss_ref), free(stats_ref), free(dl_ref), free(ls), free(loss), free(stats);
}

/* The fused, chunked head (tr_tp_vocab_head_loss) split over the ranks, in chunks of `rows`
 * token rows, against the unsplit unfused pieces (column linear, cross-entropy forward and
 * backward, scale_rows by the loss weights, column linear backward): losses, input gradient
 * (this rank's rows under SP), weight gradient. One rank and one chunk: bit for bit. */
static void check_head_loss(int V, int rows, int weighted)
{
    const int C = 8, Vp = 32, Vl = Vp / tp.size;
    int r0, Nl;
    rows_of(&r0, &Nl);
    int32_t targets[12];
    make_ids(targets, V, 3);
    float *x = tc_floats((size_t)N * C), *W = tc_floats((size_t)Vp * C), *w = tc_floats(N);
    fill(x, (size_t)N * C, 61, 1.0f);
    fill(W, (size_t)Vp * C, 62, 0.7f);
    fill(w, N, 63, 1.0f);
    for (int n = 0; n < N; n++)
        w[n] = n % 4 == 1 ? 0.0f : fabsf(w[n]); /* masked tokens too */
    const float *wts = weighted ? w : NULL, scale = 1.0f / N;
    /* reference: the unsplit pieces */
    float *x_ref = tc_fdup(x, (size_t)N * C), *lg = tc_floats((size_t)N * Vp);
    float *loss_ref = tc_floats(N), *stats = tc_floats(3 * (size_t)N);
    float *dx_ref = tc_floats((size_t)N * C), *dW_ref = tc_floats((size_t)Vp * C);
    OK(tr_tp_column_linear_forward(&one, lg, x_ref, W, NULL, N, C, Vp, NULL, NULL));
    OK(tr_tp_vocab_cross_entropy_forward(&one, loss_ref, stats, lg, targets, N, Vp, V));
    OK(tr_tp_vocab_cross_entropy_backward(&one, lg, lg, stats, targets, N, Vp, V, scale));
    if (wts)
        one.k->scale_rows(NULL, lg, wts, N, Vp);
    OK(tr_tp_column_linear_backward(&one, dx_ref, dW_ref, NULL, lg, x_ref, W, N, C, Vp));
    /* split and chunked; under SP only our rows of x are given */
    float *xs = tc_floats((size_t)N * C), *Ws = tc_floats((size_t)Vl * C);
    for (size_t i = 0; i < (size_t)N * C; i++)
        xs[i] = NAN;
    memcpy(xs + (size_t)r0 * C, x + (size_t)r0 * C, (size_t)Nl * C * sizeof(float));
    slice(Ws, W, C, tp.rank * Vl, Vl, 0, C);
    float *loss = tc_floats(N), *dx = tc_floats((size_t)N * C), *dW = tc_floats((size_t)Vl * C);
    tr_tp_head_chunks ch = {.logits = tc_floats((size_t)rows * Vl),
                            .stats = tc_floats(8 * (size_t)rows), .rows = rows};
    OK(tr_tp_vocab_head_loss(&tp, &ch, loss, dx, dW, xs, Ws, targets, wts, N, C, Vl, V, scale));
    char what[96];
    double tol = tp.size == 1 && rows == N ? 0.0 : TOL;
    snprintf(what, sizeof what, "head+loss (V=%d, %d-row chunks%s): losses", V, rows,
             weighted ? ", weighted" : "");
    tc_expect_close(what, loss, loss_ref, N, tol);
    expect_same_on_all(tp.comm, what, loss, N);
    snprintf(what, sizeof what, "head+loss (V=%d, %d-row chunks%s): input gradient", V, rows,
             weighted ? ", weighted" : "");
    expect_slice(what, dx + (size_t)r0 * C, dx_ref, C, r0, Nl, 0, C, tol);
    snprintf(what, sizeof what, "head+loss (V=%d, %d-row chunks%s): weight gradient", V, rows,
             weighted ? ", weighted" : "");
    expect_slice(what, dW, dW_ref, C, tp.rank * Vl, Vl, 0, C, tol);
    /* evaluation (scale 0): the losses alone, gradients untouched */
    float *dW0 = tc_fdup(dW, (size_t)Vl * C);
    OK(tr_tp_vocab_head_loss(&tp, &ch, loss, NULL, dW, xs, Ws, targets, wts, N, C, Vl, V, 0.0f));
    snprintf(what, sizeof what, "head loss only (V=%d, %d-row chunks)", V, rows);
    tc_expect_close(what, loss, loss_ref, N, tol);
    tc_expect_close("head loss only: weight gradient untouched", dW, dW0, (size_t)Vl * C, 0.0);
    free(x), free(W), free(w), free(x_ref), free(lg), free(loss_ref), free(stats), free(dx_ref);
    free(dW_ref), free(xs), free(Ws), free(loss), free(dx), free(dW), free(ch.logits);
    free(ch.stats), free(dW0);
}

/* The head in bf16 storage ("cpu-bf16", kernels.h's gemm_out16 ...: the chunk's logits and
 * their gradient in bf16, chunks of 2 * rows in the same buffer) against the same table
 * without those ops (fp32 storage of values its ops round to bf16) in chunks of 2 * rows: bit
 * for bit, split over the ranks, in chunks, weighted. */
static void check_head_loss_bf16(int V, int rows, int weighted)
{
    const int C = 8, Vp = 32, Vl = Vp / tp.size;
    const tr_kernels *half = tr_kernels_get("cpu-bf16");
    CHECK(half && half->gemm_out16 && half->gemm_a16 && half->xent_stats16 &&
              half->xent_loss_backward16, "cpu-bf16 has the bf16-storage head ops");
    tr_kernels full = *half;
    full.gemm_out16 = NULL, full.gemm_a16 = NULL, full.xent_stats16 = NULL;
    full.xent_loss_backward16 = NULL;
    int32_t targets[12];
    make_ids(targets, V, 5);
    float *x = tc_floats((size_t)N * C), *W = tc_floats((size_t)Vl * C), *w = tc_floats(N);
    fill(x, (size_t)N * C, 71, 1.0f);
    fill(W, (size_t)Vl * C, 72 + tp.rank, 0.7f);
    fill(w, N, 73, 1.0f);
    for (int n = 0; n < N; n++)
        w[n] = fabsf(w[n]);
    const float *wts = weighted ? w : NULL;
    float *loss[2], *dx[2], *dW[2];
    for (int i = 0; i < 2; i++) {
        tr_tp t = tp;
        t.k = i ? &full : half;
        loss[i] = tc_floats(N), dx[i] = tc_floats((size_t)N * C), dW[i] = tc_floats((size_t)Vl * C);
        float *xs = tc_fdup(x, (size_t)N * C);
        int r = i ? 2 * rows : rows; /* bf16 storage runs chunks of 2 * rows: the same cuts */
        tr_tp_head_chunks ch = {.logits = tc_floats((size_t)r * Vl),
                                .stats = tc_floats(8 * (size_t)r), .rows = r};
        OK(tr_tp_vocab_head_loss(&t, &ch, loss[i], dx[i], dW[i], xs, W, targets, wts, N, C, Vl,
                                 V, 1.0f / N));
        free(xs), free(ch.logits), free(ch.stats);
    }
    int r0, Nl;
    rows_of(&r0, &Nl);
    char what[96];
    snprintf(what, sizeof what, "bf16 head (V=%d, %d-row chunks%s): losses", V, rows,
             weighted ? ", weighted" : "");
    tc_expect_close(what, loss[0], loss[1], N, 0.0);
    snprintf(what, sizeof what, "bf16 head (V=%d, %d-row chunks%s): input gradient", V, rows,
             weighted ? ", weighted" : "");
    tc_expect_close(what, dx[0] + (size_t)r0 * C, dx[1] + (size_t)r0 * C, (size_t)Nl * C, 0.0);
    snprintf(what, sizeof what, "bf16 head (V=%d, %d-row chunks%s): weight gradient", V, rows,
             weighted ? ", weighted" : "");
    tc_expect_close(what, dW[0], dW[1], (size_t)Vl * C, 0.0);
    for (int i = 0; i < 2; i++)
        free(loss[i]), free(dx[i]), free(dW[i]);
    free(x), free(W), free(w);
}

/* The mappings on their own: f backward / g forward sum over ranks; the last-dimension
 * gather is the inverse of the split. */
static void check_mappings(void)
{
    const int cols = 3, n = N * cols;
    float *mine = tc_floats(n), *sum = tc_floats(n), *want = tc_floats(n);
    for (int r = 0; r < tp.size; r++) {
        fill(mine, n, 40 + r, 1.0f);
        for (int i = 0; i < n; i++)
            want[i] += mine[i];
    }
    fill(mine, n, 40 + tp.rank, 1.0f);
    OK(tr_tp_reduce_from_region_forward(&tp, mine, sum, n));
    tc_expect_close("g forward (all-reduce)", sum, want, n, 1e-6);
    OK(tr_tp_copy_to_region_backward(&tp, mine, n));
    tc_expect_close("f backward (all-reduce)", mine, sum, n, 0.0);
    float *full = tc_floats((size_t)n * tp.size), *back = tc_floats((size_t)n * tp.size);
    float *part = tc_floats(n), *scratch = tc_floats((size_t)n * tp.size);
    fill(full, (size_t)n * tp.size, 49, 1.0f);
    OK(tr_tp_scatter_to_region_forward(&tp, part, full, N, cols));
    OK(tr_tp_gather_from_region_forward(&tp, back, part, N, cols, scratch));
    tc_expect_close("gather(scatter(x)) along the last dimension", back, full,
                    (size_t)n * tp.size, 0.0);
    free(mine), free(sum), free(want), free(full), free(back), free(part), free(scratch);
}

int main(int argc, char **argv)
{
    int sp = 0;
    double timeout_s = 60;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sp"))
            sp = 1;
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
            timeout_s = atof(argv[++i]);
    }
    double t0 = tr_now();
    tr_comm *world = tc_world(timeout_s, 0);
    const tr_kernels *k = tr_kernels_cpu();
    OK(tr_tp_init(&one, k, NULL, 0));
    OK(tr_tp_init(&tp, k, world, sp));
    CHECK(tp.size == tr_comm_size(world) && tp.rank == tc_rank, "context size/rank");
    CHECK(tp.sequence_parallel == (sp && tp.size > 1), "sequence_parallel only with T > 1");
    CHECK((tp.comm != NULL) == (tp.size > 1), "no communicator for one rank");
    OK(tr_tp_check_rows(&tp, N));
    if (tp.sequence_parallel) {
        CHECK(tr_tp_check_rows(&tp, N + 1) == TR_ERR_INVALID &&
                  strstr(tr_errmsg(), "13 token rows") && strstr(tr_errmsg(), "divisible"),
              "rows not divisible by T: %s", tr_errmsg());
    }
    check_mappings();
    check_column(0);
    check_column(1);
    check_row(0);
    check_row(1);
    check_embedding();
    check_cross_entropy(27);
    check_cross_entropy(20); /* with T = 4 the last rank holds only padding */
    for (int weighted = 0; weighted < 2; weighted++) {
        check_head_loss(27, N, weighted); /* one chunk */
        check_head_loss(27, 5, weighted); /* chunks of 5, 5, 2 rows */
        check_head_loss(20, 1, weighted); /* row by row; with T = 4 a rank of padding only */
        check_head_loss_bf16(27, 5, weighted);
        check_head_loss_bf16(27, N, weighted);
    }
    char name[64];
    snprintf(name, sizeof name, "tp_layer_check%s", sp ? " --sp" : "");
    int rc = finish(world, name, t0);
    tr_comm_destroy(world);
    return rc;
}
