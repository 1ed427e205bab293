/* The planner's activation memory against what model/ allocates (tr_gpt_activation_bytes on
 * the CPU, fp32, runtime trident): a GPT-2-like, a Llama-like (SwiGLU, GQA) and a Gemma-like
 * (GeGLU, 2 key/value heads, kv_channels 48 wider than h / heads) tiny model, at TP 1 and 2, with and
 * without sequence parallelism, recompute none / selective / full, one stage (1 slot) and two
 * (stage 0: 2 slots, the embedding; stage 1: 1 slot, the head). Sizes are multiples of 16
 * floats, so model/'s 64-byte alignment of each tensor adds nothing. Context parallelism (2):
 * the same with s / 2 local tokens plus model/gpt_cp.c's three buffers of the gathered rows.
 * Megatron's count in real widths: GPT-2's Korthikanti numbers and a SwiGLU model's by hand. */
#include <sys/wait.h>
#include <unistd.h>

#include "plan/plan_internal.h"
#include "plan_test.h"

#include "comm/comm.h"
#include "model/gpt.h"

/* A TP 2 model needs rank 0 of a two-rank communicator to be created (nothing is sent: the
 * activation bytes are sizes); rank 1 is a child process that joins and waits for the end. */
static tr_comm *tp_comm;
static int tp_pipe[2] = {-1, -1};
static pid_t tp_child = -1;

static int join_rank(int r, int port, tr_comm **out)
{
    tr_comm_rendezvous rv = {.rank = r, .size = 2, .master_addr = "127.0.0.1",
                             .master_port = port, .job_token = "test-plan-acts"};
    return tr_comm_init(&rv, NULL, out);
}

static int make_tp_pair(void **state)
{
    (void)state;
    tr_store_server *s = NULL;
    if (tr_store_server_start("127.0.0.1", 0, NULL, NULL, 0, &s) || pipe(tp_pipe))
        return -1;
    int port = tr_store_server_port(s);
    tr_store_server_stop(s);
    fflush(NULL);
    tp_child = fork();
    if (tp_child == 0) {
        tr_comm *c = NULL;
        close(tp_pipe[1]);
        int rc = join_rank(1, port, &c);
        char b;
        while (read(tp_pipe[0], &b, 1) > 0) {
        }
        tr_comm_destroy(c);
        _exit(rc ? 1 : 0);
    }
    close(tp_pipe[0]);
    if (tp_child < 0 || join_rank(0, port, &tp_comm)) {
        print_error("TP pair: %s\n", tr_errmsg());
        return -1;
    }
    return 0;
}

static int free_tp_pair(void **state)
{
    (void)state;
    close(tp_pipe[1]);
    tr_comm_destroy(tp_comm);
    int status = 0;
    if (tp_child > 0)
        waitpid(tp_child, &status, 0);
    return 0;
}

static void load(const char *file, const char *const *sets, int n, tr_config *cfg)
{
    char path[4096];
    snprintf(path, sizeof path, TR_SOURCE_ROOT "/configs/%s", file);
    tr_t_load_file(path, sets, n, cfg);
}

/* model/'s activation bytes of layers [first, first + count) on TP rank 0 with `slots` slots;
 * with context parallelism the model's shape holds s / CP tokens. */
static double model_bytes(const tr_config *cfg, int first, int count, int slots, int cp)
{
    tr_gpt_shape s;
    assert_int_equal(tr_gpt_shape_from_config(cfg, first, count, 0, &s), TR_OK);
    tr_gpt_shape_set_cp(&s, cp, 0);
    tr_gpt *g = NULL;
    if (tr_gpt_create(&s, tr_kernels_cpu(), s.tp_size > 1 ? tp_comm : NULL, &g)) {
        print_error("model: %s\n", tr_errmsg());
        fail();
    }
    double bytes = (double)tr_gpt_activation_bytes(g, cfg->training.micro_batch_size, slots);
    tr_gpt_free(g);
    return bytes;
}

/* whether tr_gpt_activation_bytes counts model/gpt_cp.c's buffers (gpt_cp_bytes); if not,
 * the CP layouts are checked without them */
static int model_counts_cp;

static double planned_acts(const tr_plan_memory *m)
{
    return m->activations + m->recompute + m->embedding + m->loss;
}

/* cfg's own layout on cpu-host at world TP x PP x CP: each stage's activation memory against
 * the model of its layers with its peak slots. */
static void check_layout(const tr_config *cfg, const char *what)
{
    tr_plan_cluster c;
    assert_int_equal(tr_plan_cluster_preset("cpu-host", &c), TR_OK);
    int cp = cfg->parallel.context_parallel_size > 1 ? cfg->parallel.context_parallel_size : 1;
    int world = cfg->parallel.tensor_model_parallel_size *
                cfg->parallel.pipeline_model_parallel_size * cp;
    tr_plan_layout L;
    assert_int_equal(tr_plan_layout_from_config(cfg, world, &L), TR_OK);
    assert_int_equal(L.cp, cp);
    assert_int_equal(L.trident_kernels, 1);
    tr_plan_result *r = calloc(1, sizeof *r);
    tr_plan_explain ex;
    assert_int_equal(tr_plan_explain_layout(cfg, &L, world, &c, 0, r, &ex), TR_OK);
    int peaks[2];
    plan_schedule_peaks(L.pp, L.num_micro_batches, L.schedule, L.v, peaks);
    int per = cfg->model.num_layers / L.pp;
    for (int st = 0; st < L.pp; st++) {
        double model = model_bytes(cfg, st * per, per, peaks[st], cp);
        double plan = planned_acts(&ex.memory[st]);
        /* CP: model/gpt_cp.c's buffers, where tr_gpt_activation_bytes counts them */
        tr_plan_trident_acts ta;
        tr_plan_trident_activations(cfg, &L, r->vocab_padded, &ta);
        assert_true(cp == 1 ? ta.cp == 0 : ta.cp > 0);
        if (model == plan - ta.cp && model_counts_cp == 0)
            model = plan;
        else if (cp > 1)
            model_counts_cp = 1;
        if (model != plan) {
            print_error("%s, stage %d of %d (%d slots): model/ allocates %.17g bytes, the plan "
                        "%.17g (activations %.17g, recompute %.17g, embedding %.17g, loss "
                        "%.17g)\n", what, st, L.pp, peaks[st], model, plan,
                        ex.memory[st].activations, ex.memory[st].recompute,
                        ex.memory[st].embedding, ex.memory[st].loss);
            fail();
        }
    }
    tr_plan_explain_free(&ex);
    free(r);
}

static void test_trident_vs_model(void **state)
{
    (void)state;
    static const struct {
        const char *file, *name;
        const char *sets[4];
    } families[] = {
        {"tiny.yaml", "gpt2", {NULL}},
        {"tiny-llama.yaml", "llama", {NULL}},
        {"tiny-llama.yaml", "gemma",
         {"model.swiglu=false", "model.geglu=true", "model.kv_channels=48",
          "model.num_query_groups=2"}},
    };
    static const char *const recompute[] = {"none", "selective", "full"};
    for (int f = 0; f < 3; f++)
        for (int tp = 1; tp <= 2; tp++)
            for (int sp = 0; sp <= (tp > 1); sp++)
                for (int rc = 0; rc < 3; rc++)
                    for (int pp = 1; pp <= 2; pp++)
                        for (int cp = 1; cp <= 2; cp++) {
                            char set[8][64];
                            const char *sets[12];
                            int n = 0;
                            for (int k = 0; k < 4 && families[f].sets[k]; k++)
                                sets[n++] = families[f].sets[k];
                            snprintf(set[0], 64, "parallel.tensor_model_parallel_size=%d", tp);
                            snprintf(set[1], 64, "parallel.sequence_parallel=%s",
                                     sp ? "true" : "false");
                            snprintf(set[2], 64, "training.recompute=%s", recompute[rc]);
                            snprintf(set[3], 64, "parallel.pipeline_model_parallel_size=%d", pp);
                            snprintf(set[4], 64, "parallel.context_parallel_size=%d", cp);
                            snprintf(set[5], 64, "training.micro_batch_size=2");
                            snprintf(set[6], 64, "training.global_batch_size=8");
                            snprintf(set[7], 64, "training.precision=fp32");
                            for (int k = 0; k < 8; k++)
                                sets[n++] = set[k];
                            tr_config cfg;
                            load(families[f].file, sets, n, &cfg);
                            char what[160];
                            snprintf(what, sizeof what, "%s TP %d%s recompute %s PP %d CP %d",
                                     families[f].name, tp, sp ? " SP" : "", recompute[rc], pp,
                                     cp);
                            check_layout(&cfg, what);
                            tr_config_free(&cfg);
                        }
}

/* Megatron's count: GPT-2's widths give Korthikanti's 34 + 5as/h; a SwiGLU GQA model keeps
 * 10h replicated + 2 (qkv + aw + 2F + F) / t split (+ the scores); CP 2 halves the tokens and
 * keeps the scores of the local queries over every key. */
static void test_megatron_widths(void **state)
{
    (void)state;
    tr_config gpt2, llama;
    load("tiny.yaml", NULL, 0, &gpt2);
    load("tiny-llama.yaml", NULL, 0, &llama);
    double s = 128, b = 2, h = 128, a = 4;
    tr_plan_recompute N = TR_PLAN_RECOMPUTE_NONE, S = TR_PLAN_RECOMPUTE_SELECTIVE;
    assert_true(tr_plan_layer_activation_bytes_model(&gpt2.model, 128, 2, 1, 1, 0, N, 1) ==
                s * b * h * (34 + 5 * a * s / h));
    assert_true(tr_plan_layer_activation_bytes_model(&gpt2.model, 128, 2, 2, 1, 0, N, 1) ==
                tr_plan_layer_activation_bytes(128, 2, 128, 4, 2, 0, N, 1));
    /* Llama: qkv = 128 + 2 x 2 x 32 = 256, aw = 128, F = 352, fc = 704 */
    double split = 2 * (256 + 128 + 704 + 352);
    assert_true(tr_plan_layer_activation_bytes_model(&llama.model, 128, 2, 2, 1, 0, S, 1) ==
                s * b * (10 * h + split / 2));
    assert_true(tr_plan_layer_activation_bytes_model(&llama.model, 128, 2, 2, 1, 1, S, 0) ==
                2 * s * b * (10 * h + split) / 2);
    assert_true(tr_plan_layer_activation_bytes_model(&llama.model, 128, 2, 1, 2, 0, N, 1) ==
                s / 2 * b * (10 * h + split + 5 * a * s));
    tr_config_free(&gpt2);
    tr_config_free(&llama);
}

/* Llama 3 70B at s 32768 on 64 H100 nodes (runtime megatron, global batch 128): the config's
 * TP 8 x PP 4 with selective recompute does not fit at CP 1 (activations), fits at CP 4; the
 * search ranks CP layouts first and keeps CP 1 only with full recompute. */
static void test_llama3_70b_long(void **state)
{
    (void)state;
    const char *sets[] = {"model.seq_length=32768", "model.max_position_embeddings=32768",
                          "cluster.runtime=megatron", "training.global_batch_size=128"};
    tr_config cfg;
    load("llama3-70b.yaml", sets, 4, &cfg);
    tr_plan_cluster c;
    assert_int_equal(tr_plan_cluster_from_config(&cfg, &c), TR_OK);
    /* (a config of CP 4 in bf16 is refused by yaml/ for trident's training: the layout) */
    tr_plan_layout L;
    assert_int_equal(tr_plan_layout_from_config(&cfg, 512, &L), TR_OK);
    tr_plan_result *r = calloc(1, sizeof *r);
    assert_int_equal(tr_plan_evaluate(&cfg, &L, 512, &c, 0, 0, r), TR_OK);
    assert_false(r->fits);
    L.cp = 4;
    L.dp = 4;
    L.num_micro_batches = 32;
    assert_int_equal(tr_plan_evaluate(&cfg, &L, 512, &c, 1, 0, r), TR_OK);
    assert_true(r->fits && r->valid);
    free(r);
    tr_plan_search_result s;
    assert_int_equal(tr_plan_search(&cfg, 0, &c, &s), TR_OK);
    assert_int_equal(s.world, 512);
    assert_true(s.n_fit > 10);
    assert_false(s.config_result.fits);
    assert_true(s.fit[0].layout.cp > 1);
    for (int i = 0; i < s.n_fit; i++) {
        const tr_plan_layout *f = &s.fit[i].layout;
        assert_true(f->cp > 1 || f->recompute == TR_PLAN_RECOMPUTE_FULL);
        assert_true(s.fit[i].memory.total <= s.fit[i].capacity);
        assert_int_equal(f->tp * f->cp * f->pp * f->dp, 512);
        assert_int_equal(32768 % (2 * f->cp), 0);
    }
    tr_plan_search_free(&s);
    tr_config_free(&cfg);
}

/* CP's time: per layer forward one all-gather of the K/V of b whole sequences (trident: fp32,
 * b s 2 groups hs / t floats), backward another and a reduce-scatter of their gradient, over
 * the CP group's link; the attention's FLOPs 1/CP of the whole (flat model: the local queries
 * against every key); the gradients reduced over DP x CP. */
static void test_cp_time(void **state)
{
    (void)state;
    const char *sets[] = {"parallel.context_parallel_size=2", "training.micro_batch_size=2",
                          "training.global_batch_size=8", "training.precision=fp32"};
    tr_config cfg, one;
    load("tiny-llama.yaml", sets, 4, &cfg);
    load("tiny-llama.yaml", sets + 1, 3, &one);
    tr_plan_cluster c;
    assert_int_equal(tr_plan_cluster_preset("cpu-host", &c), TR_OK);
    tr_plan_result *r = calloc(1, sizeof *r), *r1 = calloc(1, sizeof *r1);
    assert_int_equal(tr_plan_predict(&cfg, 4, &c, r), TR_OK);
    assert_int_equal(tr_plan_predict(&one, 4, &c, r1), TR_OK);
    assert_true(r->layout.cp == 2 && r->layout.dp == 2 && r1->layout.dp == 4);
    assert_int_equal(r->cp_link, TR_PLAN_LINK_INTRA);
    double bw = c.intra_bw * c.intra_efficiency, lat = c.intra_latency;
    double bytes = 2.0 * 128 * (2 * 2 * 32) * 4; /* b s kv 4: kv = 2 groups x 32 */
    double layer = 2 * tr_plan_allgather_s(bytes, 2, bw, lat) +
                   tr_plan_reduce_scatter_s(bytes, 2, bw, lat);
    assert_close(r->cp_comm_s, cfg.model.num_layers * layer, 1e-12);
    assert_true(r1->cp_comm_s == 0);
    /* the same gradient reduction (DP x CP = 4 ranks on one node) */
    assert_close(r->dp_comm_s, r1->dp_comm_s, 1e-12);
    /* compute: half the tokens a rank, the attention's half of the causal work */
    assert_true(r->compute_f_s < 0.6 * r1->compute_f_s && r->compute_f_s > 0.4 * r1->compute_f_s);
    assert_true(r->model_flops == r1->model_flops);
    free(r);
    free(r1);
    tr_config_free(&cfg);
    tr_config_free(&one);
}

/* Attention dropout keeps the attention output and its input qkv in fp32 (model/'s gpt_atty16:
 * the fp32 dropout ops), which bf16 storage halves otherwise: GPT-2 (no rope) in bf16 gains
 * N (aw + qkv) / t x 2 bytes a layer with attention_dropout 0.1. */
static void test_attention_dropout_storage(void **state)
{
    (void)state;
    const char *sets[] = {"training.precision=bf16", "training.micro_batch_size=2",
                          "training.global_batch_size=8", "model.attention_dropout=0.1"};
    tr_config drop, plain;
    load("tiny.yaml", sets, 4, &drop);
    load("tiny.yaml", sets, 3, &plain);
    tr_plan_layout L;
    assert_int_equal(tr_plan_layout_from_config(&plain, 1, &L), TR_OK);
    L.trident_kernels = 1;
    tr_plan_trident_acts a0, a1;
    tr_plan_trident_activations(&plain, &L, 0, &a0);
    tr_plan_trident_activations(&drop, &L, 0, &a1);
    double qkv, Fw, fcw, N = 2.0 * plain.model.seq_length;
    tr_plan_layer_dims(&plain.model, &qkv, &Fw, &fcw);
    double aw = tr_plan_attention_width(&plain.model);
    assert_close(a1.layer_whole - a0.layer_whole, 2 * N * (aw + qkv), 1e-12);
    tr_config_free(&drop);
    tr_config_free(&plain);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trident_vs_model),
        cmocka_unit_test(test_megatron_widths),
        cmocka_unit_test(test_llama3_70b_long),
        cmocka_unit_test(test_cp_time),
        cmocka_unit_test(test_attention_dropout_storage),
    };
    unsetenv("WORLD_SIZE");
    unsetenv("RANK");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    return cmocka_run_group_tests(tests, make_tp_pair, free_tp_pair);
}
