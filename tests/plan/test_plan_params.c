/* The planner's parameter counts against the model's tensor table, exactly, for every shipped
 * config (the .yaml files of configs/) and every point of every shipped grid (of configs/sweeps/):
 *  - the whole model at TP 1: tr_plan_model_params() = model/'s count of one stage holding
 *    every layer (tr_gpt_count_params, the table tr_gpt_create builds; no parameter memory,
 *    so Bloom-176B costs nothing); the planner's n_params of the config's layout = the same
 *    count with that layout's padded vocabulary (what training reports);
 *  - each pipeline stage of the config's own layout (TP, PP, interleaved chunks), on the
 *    first and the last TP rank: tr_plan_stage_params() = the sum over the stage's chunks. */
#include "plan_test.h"

#include <dirent.h>

#include "model/gpt.h"
#include "pp/pp.h"

typedef struct {
    int configs, grid_points, refused_points, refused_layouts, stages;
} counts;

/* model/'s element count for layers [first, +count) on TP rank tp_rank of cfg's layout;
 * vocab_padded > 0 replaces the shape's padded vocabulary. */
static double model_count(const tr_config *cfg, int first, int count, int tp_rank,
                          int vocab_padded)
{
    tr_gpt_shape s;
    int rc = tr_gpt_shape_from_config(cfg, first, count, tp_rank, &s);
    if (!rc) {
        if (vocab_padded > 0)
            s.Vp = vocab_padded;
        size_t n = 0;
        rc = tr_gpt_count_params(&s, &n);
        if (!rc)
            return (double)n;
    }
    print_error("%s: layers [%d, +%d), TP rank %d: %s\n", cfg->source, first, count, tp_rank,
                tr_errmsg());
    fail();
    return 0;
}

#define assert_exact(what, a, b)                                                               \
    do {                                                                                       \
        double a_ = (a), b_ = (b);                                                             \
        if (a_ != b_) {                                                                        \
            print_error("%s: %s: planner %.17g, model %.17g\n", where, what, a_, b_);         \
            fail();                                                                            \
        }                                                                                      \
    } while (0)

static void check_config(const char *where, tr_config *cfg, int grid_point, counts *n)
{
    const tr_model_config *m = &cfg->model;

    /* the whole model, TP 1 */
    tr_config one = *cfg;
    one.parallel.tensor_model_parallel_size = 1;
    double whole = model_count(&one, 0, m->num_layers, 0, 0);
    int vp1 = tr_gpt_padded_vocab(m, 1);
    assert_exact("whole model at TP 1", tr_plan_model_params(m, vp1), whole);

    /* the config's own layout, one data-parallel replica (expert parallelism: its EP) */
    const tr_parallel_config *p = &cfg->parallel;
    int t = p->tensor_model_parallel_size, P = p->pipeline_model_parallel_size;
    int w = t * P * (p->expert_model_parallel_size > 1 ? p->expert_model_parallel_size : 1);
    tr_plan_cluster cl;
    tr_plan_layout L;
    tr_plan_result *r = tr_alloc(sizeof *r, "plan result");
    assert_non_null(r);
    assert_int_equal(tr_plan_cluster_preset("cpu-host", &cl), TR_OK);
    assert_int_equal(tr_plan_layout_from_config(cfg, w, &L), TR_OK);
    int rc = tr_plan_evaluate(cfg, &L, w, &cl, 0, 0, r);
    if (rc) {
        /* a layout the model cannot take (heads over TP, layers over PP): grid points only */
        if (!grid_point)
            print_error("%s: %s\n", where, tr_errmsg());
        assert_true(grid_point);
        tr_clear_error();
        n->refused_layouts++;
    } else {
        /* n_params: the whole model with the layout's padded vocabulary (what training
         * reports: every tensor once, summed over the model-parallel ranks) */
        int vpt = tr_gpt_padded_vocab(m, t);
        assert_int_equal(r->vocab_padded, vpt);
        assert_exact("n_params", r->n_params, model_count(&one, 0, m->num_layers, 0, vpt));
        tr_pp_partition part;
        assert_int_equal(tr_pp_partition_from_config(cfg, &part), TR_OK);
        for (int st = 0; st < P; st++) {
            int layers = 0;
            for (int c = 0; c < part.v; c++)
                layers += tr_pp_layer_count(&part, st, c);
            double planned = tr_plan_stage_params(m, vpt, t, P, st, layers);
            int ranks[2] = {0, t - 1};
            for (int k = 0; k < (t > 1 ? 2 : 1); k++) {
                double model = 0;
                for (int c = 0; c < part.v; c++)
                    model += model_count(cfg, tr_pp_layer_first(&part, st, c),
                                         tr_pp_layer_count(&part, st, c), ranks[k], 0);
                char what[64];
                snprintf(what, sizeof what, "stage %d of TP %d x PP %d, TP rank %d", st, t, P,
                         ranks[k]);
                assert_exact(what, planned, model);
            }
            n->stages++;
        }
    }
    tr_free(r);
}

static int is_yaml(const char *name)
{
    size_t len = strlen(name);
    return len > 5 && !strcmp(name + len - 5, ".yaml");
}

/* Calls fn on each DIR/NAME.yaml in name order; returns how many. */
static int each_yaml(const char *dir, void (*fn)(const char *path, counts *n), counts *n)
{
    struct dirent **list = NULL;
    int k = scandir(dir, &list, NULL, alphasort);
    if (k < 0) {
        print_error("cannot list %s\n", dir);
        fail();
    }
    int found = 0;
    for (int i = 0; i < k; i++) {
        if (is_yaml(list[i]->d_name)) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, list[i]->d_name);
            fn(path, n);
            found++;
        }
        free(list[i]);
    }
    free(list);
    return found;
}

static void one_config(const char *path, counts *n)
{
    tr_config cfg;
    tr_t_load_file(path, NULL, 0, &cfg);
    check_config(path, &cfg, 0, n);
    tr_config_free(&cfg);
    n->configs++;
}

static void one_grid(const char *path, counts *n)
{
    tr_grid_spec g;
    int rc = tr_grid_load(path, &g);
    if (rc)
        print_error("%s: %s\n", path, tr_errmsg());
    assert_int_equal(rc, TR_OK);
    size_t points = tr_grid_num_points(&g);
    for (size_t i = 0; i < points; i++) {
        tr_config cfg;
        if (tr_grid_point_config(&g, i, NULL, 0, &cfg)) {
            tr_clear_error(); /* a point the config refuses (the sweep skips it too) */
            n->refused_points++;
            continue;
        }
        char where[1100];
        snprintf(where, sizeof where, "%s point %zu", path, i);
        check_config(where, &cfg, 1, n);
        tr_config_free(&cfg);
        n->grid_points++;
    }
    tr_grid_free(&g);
}

static void test_shipped_configs(void **state)
{
    (void)state;
    counts n = {0};
    int configs = each_yaml(TR_SOURCE_ROOT "/configs", one_config, &n);
    int grids = each_yaml(TR_SOURCE_ROOT "/configs/sweeps", one_grid, &n);
    print_message("%d configs, %d grids (%d points, %d refused by the config loader); "
                  "%d layouts the model cannot take (whole model checked only); %d stages "
                  "compared\n",
                  configs, grids, n.grid_points, n.refused_points, n.refused_layouts, n.stages);
    assert_true(configs >= 4); /* bloom-176b, gpt2-124m, tiny, tiny-3d */
    assert_true(n.stages > configs);
}

/* The count function is the table tr_gpt_create builds: same number for a small stage. */
static void test_count_matches_create(void **state)
{
    (void)state;
    tr_gpt_shape s = {.num_layers = 3, .C = 8, .NH = 2, .T = 5, .max_T = 6, .V = 11, .Vp = 16,
                      .eps = 1e-5f, .init_std = 0.02f, .seed = 1, .layer_first = 0,
                      .layer_count = 3, .is_first = 1, .is_last = 1, .tp_size = 1};
    for (int first = 0; first < 3; first++) {
        s.layer_first = first;
        s.layer_count = 3 - first;
        s.is_first = first == 0;
        size_t n = 0;
        assert_int_equal(tr_gpt_count_params(&s, &n), TR_OK);
        tr_gpt *g = NULL;
        assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_OK);
        assert_int_equal(n, tr_gpt_num_params(g));
        tr_gpt_free(g);
    }
    s.Vp = 10; /* below V */
    size_t n = 0;
    assert_int_equal(tr_gpt_count_params(&s, &n), TR_ERR_INVALID);
    tr_clear_error();
}

/* LoRA: tr_plan_stage_adapters = model/'s adapter table (the trainable count under LoRA) for
 * the GPT-2, Llama and Bloom tiny configs, every target and a subset (TP 1: the model needs no
 * communicator); TP 2 by the splits: column-parallel B and row-parallel A halve. */
static void test_lora_adapters(void **state)
{
    (void)state;
    static const char *const files[] = {"tiny.yaml", "tiny-llama.yaml", "tiny-bloom.yaml"};
    static const char *const targets[] = {"finetune.lora.target_modules=[qkv, proj, fc1, fc2]",
                                          "finetune.lora.target_modules=[qkv, fc2]"};
    for (int f = 0; f < 3; f++)
        for (int k = 0; k < 2; k++) {
            char path[4096];
            snprintf(path, sizeof path, TR_SOURCE_ROOT "/configs/%s", files[f]);
            const char *sets[] = {"finetune.lora.rank=4", targets[k],
                                  "parallel.tensor_model_parallel_size=1",
                                  "parallel.pipeline_model_parallel_size=1"};
            tr_config cfg;
            assert_int_equal(tr_config_load(path, sets, 4, &cfg), TR_OK);
            tr_gpt_shape s;
            int L = cfg.model.num_layers;
            assert_int_equal(tr_gpt_shape_from_config(&cfg, 0, L, 0, &s), TR_OK);
            tr_gpt *g = NULL;
            assert_int_equal(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), TR_OK);
            double planned = tr_plan_stage_adapters(&cfg, 1, L), model = (double)tr_gpt_num_params(g);
            if (planned != model) {
                print_error("%s, %s: planner %.17g adapters, model %.17g\n", files[f], targets[k], planned,
                            model);
                fail();
            }
            /* TP 2: everything split is halved (qkv B, proj A, fc B, fc_proj A) */
            double split = 0, whole = 0;
            for (int i = 0; i < tr_gpt_num_tensors(g); i++) {
                const tr_param_tensor *t = tr_gpt_tensor(g, i);
                int col = strstr(t->name, ".qkv.") || strstr(t->name, ".fc.");
                int is_b = strstr(t->name, "lora_B") != NULL;
                *(col == is_b ? &split : &whole) += (double)t->numel;
            }
            assert_true(tr_plan_stage_adapters(&cfg, 2, L) == whole + split / 2);
            assert_true(tr_plan_stage_adapters(&cfg, 2, 1) * L == whole + split / 2);
            tr_gpt_free(g);
            tr_config_free(&cfg);
        }
    tr_config cfg;
    assert_int_equal(tr_config_load(TR_SOURCE_ROOT "/configs/tiny.yaml", NULL, 0, &cfg), TR_OK);
    assert_true(tr_plan_stage_adapters(&cfg, 1, 4) == 0); /* no LoRA */
    tr_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_matches_create),
        cmocka_unit_test(test_lora_adapters),
        cmocka_unit_test(test_shipped_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
