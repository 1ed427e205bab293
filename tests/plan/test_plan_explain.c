/* `--explain` adds up: for every shipped config (the .yaml files of configs/) and every point of every
 * shipped grid (configs/sweeps/), on its own cluster section when it has one and on every
 * preset, each stage's parts (compute by kind, exposed communication by group, optimizer,
 * bubble, idle) are >= 0 and add up to the predicted step time within 1% (they do to
 * rounding), and each stage's memory parts add up to its total; the explained prediction is
 * tr_plan_evaluate's. Also with dropout, without P2P batching or scatter/gather, and without
 * fused gradient accumulation. */
#include "plan_test.h"

#include <dirent.h>

typedef struct {
    int layouts, stages;
} counts;

static void check_layout(const char *where, const tr_config *cfg, const tr_plan_cluster *c,
                         const tr_plan_layout *L, int world, counts *n)
{
    tr_plan_result *r = calloc(1, sizeof *r), *plain = calloc(1, sizeof *plain);
    tr_plan_explain e;
    int rc = tr_plan_explain_layout(cfg, L, world, c, 0, r, &e);
    if (rc == TR_ERR_CONFIG) { /* a layout the model cannot take (grid points) */
        tr_clear_error();
        free(r);
        free(plain);
        return;
    }
    if (rc)
        print_error("%s: %s\n", where, tr_errmsg());
    assert_int_equal(rc, TR_OK);
    assert_int_equal(tr_plan_evaluate(cfg, L, world, c, 1, 0, plain), TR_OK);
    assert_close(r->step_time_s, plain->step_time_s, 1e-12);
    assert_close(e.step_time_s, r->step_time_s, 1e-12);
    assert_int_equal(e.P, L->pp);
    for (int s = 0; s < e.P; s++) {
        double total = tr_plan_explain_stage_total(&e, s);
        if (!(fabs(total - r->step_time_s) <= 0.01 * r->step_time_s)) {
            print_error("%s (%s): stage %d parts add up to %.9g s, step %.9g s\n", where,
                        c->preset, s, total, r->step_time_s);
            fail();
        }
        assert_close(total, r->step_time_s, 1e-9); /* in fact to rounding */
        for (int k = 0; k < TR_PLAN_PARTS; k++) {
            double v = e.parts[(size_t)s * TR_PLAN_PARTS + k];
            if (!(v >= -1e-12 * r->step_time_s)) {
                print_error("%s: stage %d part %s = %g\n", where, s,
                            tr_plan_part_name((tr_plan_part)k), v);
                fail();
            }
        }
        const tr_plan_memory *m = &e.memory[s];
        assert_close(m->weights + m->grads + m->optimizer + m->activations + m->recompute +
                         m->embedding + m->loss + m->reserved,
                     m->total, 1e-12);
        assert_close(m->total, r->stage_memory[s], 1e-12);
        n->stages++;
    }
    /* compute is there on every stage of a GPU preset: GEMMs the largest part of it */
    if (c->device == TR_PLAN_DEVICE_GPU)
        for (int s = 0; s < e.P; s++)
            assert_true(e.parts[(size_t)s * TR_PLAN_PARTS + TR_PLAN_PART_GEMM] > 0);
    tr_plan_explain_free(&e);
    assert_null(e.parts);
    free(r);
    free(plain);
    n->layouts++;
}

static void check_config(const char *where, const tr_config *cfg, counts *n)
{
    static const char *const presets[] = {"a100-80gb", "h100-80gb", "h200", "cpu-host"};
    for (int p = -1; p < 4; p++) {
        tr_plan_cluster c;
        if (p < 0) {
            if (tr_plan_cluster_from_config(cfg, &c)) { /* no cluster section */
                tr_clear_error();
                continue;
            }
        } else {
            assert_int_equal(tr_plan_cluster_preset(presets[p], &c), TR_OK);
        }
        const tr_parallel_config *pc = &cfg->parallel;
        int world = 0;
        if (p < 0)
            assert_int_equal(tr_plan_world(&c, 0, &world), TR_OK);
        else /* two data-parallel replicas of the config's layout */
            world = 2 * pc->tensor_model_parallel_size * pc->pipeline_model_parallel_size;
        tr_plan_layout L;
        if (tr_plan_layout_from_config(cfg, world, &L)) {
            tr_clear_error();
            continue;
        }
        check_layout(where, cfg, &c, &L, world, n);
        /* the kernel and schedule variants */
        L.dropout = 1;
        L.p2p_batched = 0;
        L.scatter_gather = 0;
        L.grad_accum_fused = 0;
        check_layout(where, cfg, &c, &L, world, n);
    }
}

static int is_yaml(const char *name)
{
    size_t n = strlen(name);
    return n > 5 && !strcmp(name + n - 5, ".yaml");
}

static void test_shipped_configs(void **state)
{
    (void)state;
    counts n = {0};
    int configs = 0, points = 0;
    struct dirent **list = NULL;
    int k = scandir(TR_SOURCE_ROOT "/configs", &list, NULL, alphasort);
    assert_true(k > 0);
    for (int i = 0; i < k; i++) {
        if (is_yaml(list[i]->d_name)) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", TR_SOURCE_ROOT "/configs", list[i]->d_name);
            tr_config cfg;
            tr_t_load_file(path, NULL, 0, &cfg);
            check_config(path, &cfg, &n);
            tr_config_free(&cfg);
            configs++;
        }
        free(list[i]);
    }
    free(list);
    k = scandir(TR_SOURCE_ROOT "/configs/sweeps", &list, NULL, alphasort);
    for (int i = 0; i < k; i++) {
        if (is_yaml(list[i]->d_name)) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", TR_SOURCE_ROOT "/configs/sweeps",
                     list[i]->d_name);
            tr_grid_spec g;
            int rc = tr_grid_load(path, &g);
            if (rc)
                print_error("%s: %s\n", path, tr_errmsg());
            assert_int_equal(rc, TR_OK);
            for (size_t p = 0; p < tr_grid_num_points(&g); p++) {
                tr_config cfg;
                if (tr_grid_point_config(&g, p, NULL, 0, &cfg)) {
                    tr_clear_error();
                    continue;
                }
                check_config(path, &cfg, &n);
                tr_config_free(&cfg);
                points++;
            }
            tr_grid_free(&g);
        }
        free(list[i]);
    }
    free(list);
    print_message("%d configs, %d grid points: %d layouts, %d stages add up\n", configs, points,
                  n.layouts, n.stages);
    assert_true(configs >= 4);
    assert_true(n.layouts >= 2 * configs);
}

/* Bloom by hand: its pipeline has 12 stages; the first and last do the embedding sync, the
 * last the output layer; the report, the JSON and the SVG carry every part. */
static void test_bloom_parts(void **state)
{
    (void)state;
    tr_config cfg;
    tr_t_load_file(TR_BLOOM_YAML, NULL, 0, &cfg);
    tr_plan_cluster c;
    assert_int_equal(tr_plan_cluster_from_config(&cfg, &c), TR_OK);
    tr_plan_layout L;
    assert_int_equal(tr_plan_layout_from_config(&cfg, 384, &L), TR_OK);
    tr_plan_result *r = calloc(1, sizeof *r);
    tr_plan_explain e;
    assert_int_equal(tr_plan_explain_layout(&cfg, &L, 384, &c, 0, r, &e), TR_OK);
    assert_int_equal(e.P, 12);
#define PART(s, k) e.parts[(size_t)(s) * TR_PLAN_PARTS + TR_PLAN_PART_##k]
    assert_true(PART(11, OUTPUT) > 0 && PART(0, OUTPUT) == 0);
    assert_true(PART(0, EMBEDDING) > 0 && PART(5, EMBEDDING) == 0);
    assert_true(PART(0, EMBED_SYNC) > 0 && PART(11, EMBED_SYNC) == PART(0, EMBED_SYNC));
    assert_true(PART(5, EMBED_SYNC) == 0);
    assert_true(PART(3, RECOMPUTE) > 0 && PART(3, TP) > 0 && PART(3, PP) > 0);
    assert_true(PART(3, ZERO_GATHER) > 0 && PART(3, OPTIMIZER) > 0);
    assert_true(PART(0, BUBBLE) > PART(11, BUBBLE)); /* stage 0 waits longest to start */
    /* full recompute repeats the forward: as much as the forward's GEMMs and more */
    assert_true(PART(3, RECOMPUTE) > 0.3 * PART(3, GEMM));
#undef PART
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tr_plan_print_explain(f, &c, r, &e);
    tr_plan_write_explain_json(f, &cfg, &c, r, &e);
    assert_int_equal(tr_plan_write_explain_svg(f, &c, r, &e, "bloom"), TR_OK);
    fclose(f);
    assert_non_null(strstr(buf, "where the step goes"));
    assert_non_null(strstr(buf, "where the memory goes"));
    assert_non_null(strstr(buf, "\"dp_comm_exposed\""));
    assert_non_null(strstr(buf, "<svg"));
    assert_non_null(strstr(buf, "pipeline bubble"));
    assert_non_null(strstr(buf, "</svg>"));
    free(buf);
    tr_plan_explain_free(&e);
    free(r);
    tr_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_configs),
        cmocka_unit_test(test_bloom_parts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
