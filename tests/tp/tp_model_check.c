/* The GPT stage split over T tensor-parallel ranks against the unsplit model (T = 1, built
 * locally on every rank), run by `trident launch --nproc W`:
 *   tp_model_check [--tp T] [--sp] [--head-rows R] [--weights] [--parallel-residual]
 *                  [--mlp-bias] [--no-norm-bias] [--relu] [--timeout S]
 * (T divides W; default T = W). --head-rows: the split model's head and loss run in chunks of
 * R token rows (tr_gpt_set_head_chunk_rows; the reference in one chunk), so every chunk's
 * statistics are all-reduced; --weights: per-token loss weights (packed fine-tuning data);
 * --parallel-residual: GPT-NeoX's layer (parallel residual, exact GELU), whose attention
 * projection and fc_proj share one reduction forward (3 collectives a layer, not 4);
 * --mlp-bias: with it, GPT-J's (one norm for both branches, the tanh GELU, no attention biases
 * but fc's and fc_proj's: model.add_mlp_bias), the reduction adding fc_proj's bias alone;
 * --no-norm-bias: MPT's layer (ALiBi, LayerNorms without biases: model.layernorm_bias false,
 * no linear biases, the exact GELU), the norms reading C zeros and sinking their bias
 * gradients; --relu: OPT's (GPT-2's layer with the MLP's ReLU: model.relu), each rank's ReLU
 * on its own columns of fc's output.
 * Every run sets its biases off 0 (a function of the name and whole row, the same in every
 * layout) so that each one's forward counts: a split layer that dropped or doubled a bias
 * would pass with the zeros tr_gpt_init_params gives them.
 * The world is cut into W/T TP groups (consecutive ranks), each checked on its own. Checks:
 *  - initialisation: every shard is bit for bit the matching slice of the T = 1 tensor, with
 *    the right split_dim / full shape / flags;
 *  - two micro-batches with gradient accumulation: losses (relative <= 1e-5, the same on every
 *    TP rank) and every gradient shard against the T = 1 slice (relative <= 1e-5); gradients
 *    of replicated tensors identical on every TP rank (under SP after the all-reduce of the
 *    tensors marked tp_grad_allreduce, as the engine does);
 *  - the grad-ready hook: ranges arrive front to back and cover the buffer once per micro-batch;
 *  - communication count per iteration: 4 all-reduces per layer per micro-batch + 1 for the
 *    embedding + 3 for the loss (SP: all-gathers and reduce-scatters, see below); an
 *    evaluation forward: 2 all-reduces; the model's TP communication timer
 *    (tr_gpt_tp_comm_seconds) counts the same collectives;
 *  - the model cut into two pipeline stages on the same TP group (stage input received in
 *    tr_gpt_acts_input_buffer, output gradient in tr_gpt_acts_output_grad_buffer) gives the
 *    whole TP model's loss and gradients;
 *  - bf16 storage ("cpu-bf16" with kernels.h's optional bf16-storage and fused linear ops, the
 *    CUDA bf16 mode's twin) against the same table without them, split the same way (under
 *    SP the bf16 rows are gathered as stored): the loss and every gradient shard bit for bit. */
#include "model/gpt.h"
#include "tp_check.h"

#define TOL 1e-5
enum { LAYERS = 3, B = 2, SEQ = 6, N = B * SEQ, C = 16, V = 27, M = 2 };

static tr_comm *tpc; /* this rank's TP group (NULL when T == 1) */
static int T = 1, t = 0, sp = 0;
static int head_rows = 0, weighted = 0, chunks = 1; /* chunks: of the split model's head */
static int pres = 0, mlp_bias = 0; /* --parallel-residual, --mlp-bias */
static int no_norm_bias = 0;       /* --no-norm-bias */
static int relu = 0;               /* --relu */
static float weights[N];
static const tr_kernels *kernels; /* make()'s table (NULL: "cpu") */

typedef struct {
    tr_gpt *g;
    tr_gpt_acts *a;
    float *params, *grads;
} model;

static void make(model *m, int first, int count, int tp_size)
{
    tr_gpt_shape s = {.num_layers = LAYERS, .C = C, .NH = 4, .T = SEQ, .max_T = 8, .V = V,
                      .Vp = 32, .eps = 1e-5f, .init_std = 0.3f, .seed = 5,
                      .layer_first = first, .layer_count = count, .tp_size = tp_size,
                      .tp_rank = tp_size > 1 ? t : 0, .sequence_parallel = sp};
    s.is_first = first == 0;
    s.is_last = first + count == LAYERS;
    s.parallel_residual = s.gelu_exact = pres;
    if (mlp_bias) /* GPT-J's layer */
        s.parallel_shared_norm = s.no_linear_bias = s.mlp_bias = 1, s.gelu_exact = 0;
    if (no_norm_bias) /* MPT's layer */
        s.position = TR_POS_ALIBI, s.no_norm_bias = s.no_linear_bias = s.gelu_exact = 1;
    s.relu = relu; /* OPT's */
    OK(tr_gpt_create(&s, kernels ? kernels : tr_kernels_cpu(), tp_size > 1 ? tpc : NULL, &m->g));
    size_t n = tr_gpt_num_params(m->g);
    m->params = tc_floats(n);
    m->grads = tc_floats(n);
    tr_gpt_bind(m->g, m->params, m->grads);
    OK(tr_gpt_init_params(m->g));
    for (int i = 0; i < tr_gpt_num_tensors(m->g); i++) { /* biases off 0 (by name and whole
                                                          * row, as T = 1's) so each counts */
        tr_param_tensor *p = tr_gpt_tensor(m->g, i);
        unsigned h = 5;
        for (const char *c = p->name; *c; c++)
            h = h * 31u + (unsigned char)*c;
        int r0 = p->split_dim == 0 ? (tp_size > 1 ? t : 0) * p->rows : 0;
        if (strstr(p->name, ".bias"))
            for (int r = 0; r < p->rows; r++)
                p->param[r] = 0.1f * sinf(0.37f * (float)(r0 + r) + (float)(h % 97u));
    }
    OK(tr_gpt_acts_create(m->g, B, &m->a));
}

static void unmake(model *m)
{
    tr_gpt_acts_free(m->a);
    tr_gpt_free(m->g);
    free(m->params);
    free(m->grads);
}

static tr_param_tensor *find(tr_gpt *g, const char *name, int skip)
{
    for (int i = 0; i < tr_gpt_num_tensors(g); i++)
        if (!strcmp(tr_gpt_tensor(g, i)->name, name) && skip-- == 0)
            return tr_gpt_tensor(g, i);
    return NULL;
}

static void batch(int mb, int32_t *tokens, int32_t *targets)
{
    for (int i = 0; i < N; i++) {
        tokens[i] = (int32_t)((i * 7 + 3 + mb * 5) % V);
        targets[i] = (int32_t)((i * 5 + 1 + mb * 11) % V);
    }
}

/* The T = 1 slice matching shard p: rows [t*rows, ..) or columns [t*cols, ..) of r. */
static void expect_shard(const char *what, const tr_param_tensor *p, const float *shard,
                         const float *whole, double tol)
{
    char msg[96];
    snprintf(msg, sizeof msg, "%s %s", p->name, what);
    int r0 = p->split_dim == 0 ? t * p->rows : 0, c0 = p->split_dim == 1 ? t * p->cols : 0;
    expect_slice(msg, shard, whole, p->full_cols, r0, p->rows, c0, p->cols, tol);
}

static void check_layout(model *tpm, model *ref)
{
    for (int i = 0; i < tr_gpt_num_tensors(tpm->g); i++) {
        tr_param_tensor *p = tr_gpt_tensor(tpm->g, i), *r = find(ref->g, p->name, 0);
        CHECK(r && r->rows == p->full_rows && r->cols == p->full_cols, "%s full shape", p->name);
        if (!r)
            continue;
        int want_split = T == 1 ? -1
                         : strstr(p->name, "qkv.") || strstr(p->name, "fc.") ||
                                 !strcmp(p->name, "wte")
                             ? 0
                         : strstr(p->name, "proj.weight") ? 1
                                                          : -1;
        CHECK(p->split_dim == want_split, "%s split_dim %d, expected %d", p->name, p->split_dim,
              want_split);
        CHECK(p->rows * (p->split_dim == 0 ? T : 1) == p->full_rows &&
                  p->cols * (p->split_dim == 1 ? T : 1) == p->full_cols,
              "%s shard shape", p->name);
        CHECK(p->word_embedding == !strcmp(p->name, "wte"), "%s word_embedding", p->name);
        CHECK(p->count_in_norm == (p->split_dim >= 0 || t == 0), "%s count_in_norm", p->name);
        int partial = sp && T > 1 && p->split_dim < 0 && strcmp(p->name, "wpe");
        CHECK(p->tp_grad_allreduce == partial, "%s tp_grad_allreduce %d", p->name,
              p->tp_grad_allreduce);
        expect_shard("initial value", p, p->param, r->param, 0.0);
    }
}

/* Grad-ready hook: ranges must arrive front to back and tile the buffer. */
static size_t hook_next;
static int hook_calls;
static void hook(void *ctx, size_t offset, size_t count)
{
    (void)ctx;
    CHECK(offset == hook_next, "grad range at %zu, expected %zu", offset, hook_next);
    hook_next = offset + count;
    hook_calls++;
}

static void step(model *m, int mb, float scale, float *loss)
{
    int32_t tokens[N], targets[N];
    batch(mb, tokens, targets);
    if (weighted)
        OK(tr_gpt_acts_set_packing(m->a, NULL, NULL, weights));
    OK(tr_gpt_forward(m->g, m->a, tokens, NULL, targets, scale, loss));
    if (scale != 0.0f)
        OK(tr_gpt_backward(m->g, m->a, NULL));
}

static void check_counts(const tr_comm_counters *c, int micro_batches)
{
    /* the loss: per head chunk 2 (max; sums of exponentials and target logits); a layer 2
     * forward (the parallel residual: 1) and 2 backward */
    uint64_t fwd = pres ? 1 : 2;
    uint64_t per_mb_ar = sp ? 2 * (uint64_t)chunks : (fwd + 2) * LAYERS + 1 + 2 * chunks + 1;
    /* SP: per layer 2 all-gathers + 2 reduce-scatters (the parallel residual: 1) forward, 2
     * and 2 backward; the embedding a reduce-scatter forward, an all-gather backward; the
     * head an all-gather forward, a reduce-scatter backward */
    uint64_t per_mb_ag = sp ? 4 * LAYERS + 2 : 0, per_mb_rs = sp ? (fwd + 2) * LAYERS + 2 : 0;
    uint64_t ar = c->ops[TR_COMM_OP_ALLREDUCE], ag = c->ops[TR_COMM_OP_ALLGATHER],
             rs = c->ops[TR_COMM_OP_REDUCE_SCATTER];
    CHECK(ar == per_mb_ar * micro_batches, "%llu all-reduces, expected %llu",
          (unsigned long long)ar, (unsigned long long)(per_mb_ar * micro_batches));
    CHECK(ag == per_mb_ag * micro_batches && rs == per_mb_rs * micro_batches,
          "%llu all-gathers and %llu reduce-scatters, expected %llu and %llu",
          (unsigned long long)ag, (unsigned long long)rs,
          (unsigned long long)(per_mb_ag * micro_batches),
          (unsigned long long)(per_mb_rs * micro_batches));
    if (tc_rank == 0)
        printf("T=%d%s, %d layers, %d micro-batches: %llu all-reduces, %llu all-gathers, "
               "%llu reduce-scatters per iteration\n", T, sp ? " SP" : "", LAYERS,
               micro_batches, (unsigned long long)ar, (unsigned long long)ag,
               (unsigned long long)rs);
}

/* Sum the partial gradients over TP, as the engine's finalize step does under SP. */
static void finalize_grads(model *m)
{
    for (int i = 0; i < tr_gpt_num_tensors(m->g); i++) {
        tr_param_tensor *p = tr_gpt_tensor(m->g, i);
        if (p->tp_grad_allreduce)
            OK(tr_comm_allreduce(tpc, p->grad, p->grad, p->numel, TR_COMM_F32, TR_COMM_SUM));
    }
}

static void check_grads(model *tpm, model *ref)
{
    for (int i = 0; i < tr_gpt_num_tensors(tpm->g); i++) {
        tr_param_tensor *p = tr_gpt_tensor(tpm->g, i), *r = find(ref->g, p->name, 0);
        expect_shard("gradient", p, p->grad, r->grad, TOL);
        if (p->split_dim < 0) {
            char what[96];
            snprintf(what, sizeof what, "%s gradient", p->name);
            expect_same_on_all(tpc, what, p->grad, p->numel);
        }
    }
}

static void check_whole(model *tpm, model *ref)
{
    float loss_tp[M], loss_ref[M], scale = 1.0f / (M * N);
    tr_gpt_set_grad_hook(tpm->g, hook, NULL);
    if (tpc)
        tr_comm_reset_counters(tpc);
    tr_gpt_tp_comm_reset(tpm->g);
    for (int mb = 0; mb < M; mb++) {
        hook_next = 0;
        hook_calls = 0;
        step(tpm, mb, scale, &loss_tp[mb]);
        CHECK(hook_next == tr_gpt_num_params(tpm->g) && hook_calls == LAYERS + 2,
              "grad ranges covered %zu of %zu in %d calls", hook_next,
              tr_gpt_num_params(tpm->g), hook_calls);
        step(ref, mb, scale, &loss_ref[mb]);
    }
    tr_comm_counters c = {0};
    if (tpc)
        tr_comm_get_counters(tpc, &c);
    if (T > 1)
        check_counts(&c, M);
    /* the model's TP communication timer counts exactly the collectives the group saw */
    long timed_calls = -1;
    double timed_s = tr_gpt_tp_comm_seconds(tpm->g, &timed_calls);
    uint64_t collectives = c.ops[TR_COMM_OP_ALLREDUCE] + c.ops[TR_COMM_OP_ALLGATHER] +
                           c.ops[TR_COMM_OP_REDUCE_SCATTER];
    CHECK((uint64_t)timed_calls == collectives && timed_s >= 0 && (T > 1 || timed_s == 0),
          "TP comm timer: %ld calls, %.6f s; the group counted %llu collectives", timed_calls,
          timed_s, (unsigned long long)collectives);
    tr_gpt_set_grad_hook(tpm->g, NULL, NULL);
    tc_expect_close("losses", loss_tp, loss_ref, M, TOL);
    expect_same_on_all(tpc, "losses", loss_tp, M);
    /* replicated gradients: identical on every TP rank straight out of backward when they
     * are whole (no SP, or not marked), otherwise after the TP all-reduce */
    for (int i = 0; i < tr_gpt_num_tensors(tpm->g); i++) {
        tr_param_tensor *p = tr_gpt_tensor(tpm->g, i);
        if (p->split_dim < 0 && !p->tp_grad_allreduce)
            expect_same_on_all(tpc, p->name, p->grad, p->numel);
    }
    if (sp)
        finalize_grads(tpm);
    check_grads(tpm, ref);
    /* an evaluation forward: per layer 2 all-reduces (SP: 2 all-gathers, 2 reduce-scatters;
     * the parallel residual: 1 all-reduce or reduce-scatter), the embedding 1 (SP: a
     * reduce-scatter), the loss 2 per chunk (SP: plus the final LN's gather) */
    if (tpc) {
        tr_comm_reset_counters(tpc);
        float l;
        step(tpm, 0, 0.0f, &l);
        CHECK(l == loss_tp[0], "evaluation loss %.9g vs %.9g", l, loss_tp[0]);
        tr_comm_get_counters(tpc, &c);
        uint64_t fwd = pres ? 1 : 2;
        uint64_t ar = sp ? 2 * (uint64_t)chunks : fwd * LAYERS + 1 + 2 * chunks;
        uint64_t gs = sp ? 2 * LAYERS + 1 : 0, rs = sp ? fwd * LAYERS + 1 : 0;
        CHECK(c.ops[TR_COMM_OP_ALLREDUCE] == ar && c.ops[TR_COMM_OP_ALLGATHER] == gs &&
                  c.ops[TR_COMM_OP_REDUCE_SCATTER] == rs,
              "evaluation forward: %llu all-reduces (expected %llu), %llu all-gathers (expected "
              "%llu) and %llu reduce-scatters (expected %llu)",
              (unsigned long long)c.ops[TR_COMM_OP_ALLREDUCE], (unsigned long long)ar,
              (unsigned long long)c.ops[TR_COMM_OP_ALLGATHER], (unsigned long long)gs,
              (unsigned long long)c.ops[TR_COMM_OP_REDUCE_SCATTER], (unsigned long long)rs);
    }
}

/* Stages [0, 1) and [1, LAYERS) on the same TP group against the whole TP model (one
 * micro-batch, fresh gradients). */
static void check_pipeline(model *whole)
{
    model s0, s1;
    make(&s0, 0, 1, T);
    make(&s1, 1, LAYERS - 1, T);
    size_t hn = tr_gpt_hidden_numel(s0.g, B);
    CHECK(hn == (size_t)N * C / (sp && T > 1 ? T : 1), "hidden numel %zu", hn);
    memset(whole->grads, 0, tr_gpt_num_params(whole->g) * sizeof(float));
    float scale = 1.0f / N, lw, ls;
    step(whole, 0, scale, &lw);
    int32_t tokens[N], targets[N];
    batch(0, tokens, targets);
    OK(tr_gpt_forward(s0.g, s0.a, tokens, NULL, NULL, scale, NULL));
    if (weighted)
        OK(tr_gpt_acts_set_packing(s1.a, NULL, NULL, weights));
    float *in = tr_gpt_acts_input_buffer(s1.a); /* "received" there: no copy in forward */
    memcpy(in, tr_gpt_acts_output(s0.a), hn * sizeof(float));
    OK(tr_gpt_forward(s1.g, s1.a, NULL, in, targets, scale, &ls));
    OK(tr_gpt_backward(s1.g, s1.a, NULL));
    float *dout = tr_gpt_acts_output_grad_buffer(s0.a);
    memcpy(dout, tr_gpt_acts_input_grad(s1.a), hn * sizeof(float));
    OK(tr_gpt_backward(s0.g, s0.a, dout));
    CHECK(ls == lw, "two stages: loss %.9g vs whole %.9g", ls, lw);
    for (int i = 0; i < tr_gpt_num_tensors(whole->g); i++) {
        tr_param_tensor *w = tr_gpt_tensor(whole->g, i);
        tr_param_tensor *a = find(s0.g, w->name, 0), *b = find(s1.g, w->name, 0);
        float *sum = tc_floats(w->numel);
        for (size_t e = 0; e < w->numel; e++)
            sum[e] = (a ? a->grad[e] : 0.0f) + (b ? b->grad[e] : 0.0f);
        char what[96];
        snprintf(what, sizeof what, "two stages: %s gradient", w->name);
        tc_expect_close(what, sum, w->grad, w->numel, 1e-6);
        free(sum);
    }
    tr_param_tensor *head = find(s1.g, "wte", 0);
    CHECK(head && head->word_embedding && !head->count_in_norm, "the head's wte copy flags");
    unmake(&s0);
    unmake(&s1);
}

/* bf16 storage on and off at this TP layout: the same loss and gradient bits (parameters
 * perturbed: the biases start at 0, where a wrong bias would not show) */
static void check_bf16_storage(void)
{
    const tr_kernels *half = tr_kernels_get("cpu-bf16");
    CHECK(half && half->gelu_forward16 && half->linear_backward, "cpu-bf16 has its bf16 ops");
    if (!half)
        return;
    tr_kernels full = *half; /* the optional bf16-storage and fused ops off */
    tr_kernels_without_bf16_storage(&full);
    model m[2];
    float loss[2];
    for (int i = 0; i < 2; i++) {
        kernels = i ? &full : half;
        make(&m[i], 0, LAYERS, T);
        size_t n = tr_gpt_num_params(m[i].g);
        for (size_t e = 0; e < n; e++)
            m[i].params[e] += 0.02f * sinf((float)(e + 31 * (size_t)t));
        /* (the bf16 head runs chunks of twice the rows: the same cuts on the other side) */
        tr_gpt_set_head_chunk_rows(m[i].g, i ? 2 * head_rows : head_rows);
        step(&m[i], 0, 1.0f / N, &loss[i]);
    }
    kernels = NULL;
    size_t n = tr_gpt_num_params(m[0].g);
    CHECK(loss[0] == loss[1], "bf16 storage on and off: loss %.9g vs %.9g", loss[0], loss[1]);
    CHECK(!memcmp(m[0].grads, m[1].grads, n * sizeof(float)),
          "bf16 storage on and off: the same gradient bits (%zu floats)", n);
    unmake(&m[0]);
    unmake(&m[1]);
}

int main(int argc, char **argv)
{
    double timeout_s = 60;
    int want_tp = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sp"))
            sp = 1;
        else if (!strcmp(argv[i], "--tp") && i + 1 < argc)
            want_tp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--head-rows") && i + 1 < argc)
            head_rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--weights"))
            weighted = 1;
        else if (!strcmp(argv[i], "--parallel-residual"))
            pres = 1;
        else if (!strcmp(argv[i], "--mlp-bias"))
            pres = mlp_bias = 1;
        else if (!strcmp(argv[i], "--no-norm-bias"))
            no_norm_bias = 1;
        else if (!strcmp(argv[i], "--relu"))
            relu = 1;
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
            timeout_s = atof(argv[++i]);
    }
    for (int i = 0; i < N; i++) /* some tokens masked, the others weighted unevenly */
        weights[i] = (float)(i % 3) * 0.75f;
    if (head_rows > 0)
        chunks = (N + head_rows - 1) / head_rows;
    double t0 = tr_now();
    tr_comm *world = tc_world(timeout_s, 0);
    T = want_tp ? want_tp : tr_comm_size(world);
    if (T < 1 || tr_comm_size(world) % T) {
        fprintf(stderr, "tp_model_check: --tp %d does not divide the world\n", T);
        return 2;
    }
    if (T > 1) {
        OK(tr_comm_split(world, tc_rank / T, tc_rank, "tp", &tpc));
        t = tr_comm_rank(tpc);
    }
    sp = sp && T > 1;
    model tpm, ref;
    make(&tpm, 0, LAYERS, T);
    make(&ref, 0, LAYERS, 1);
    tr_gpt_set_head_chunk_rows(tpm.g, head_rows);
    check_layout(&tpm, &ref);
    check_whole(&tpm, &ref);
    check_pipeline(&tpm);
    unmake(&tpm);
    unmake(&ref);
    check_bf16_storage();
    char name[96];
    snprintf(name, sizeof name, "tp_model_check T=%d%s%s%s%s", T, sp ? " --sp" : "",
             head_rows ? " (chunked head)" : "", weighted ? " (loss weights)" : "",
             mlp_bias       ? " (GPT-J: parallel residual, MLP biases)"
             : no_norm_bias ? " (MPT: ALiBi, no norm or linear biases)"
             : relu         ? " (OPT: ReLU)"
             : pres         ? " (parallel residual)"
                            : "");
    int rc = finish(world, name, t0);
    tr_comm_destroy(tpc);
    tr_comm_destroy(world);
    return rc;
}
