/* hf/meta.c's params.json reading (meta_read_params) on Meta's own files: the rope scaling
 * factor without rope_scaling_factor (Llama 3.2 1B and 3B: 32, as their Hugging Face
 * config.json; Llama 3.1: 8), with it, Llama 3's unscaled rope, and bad factors refused naming
 * the key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "hf/meta_internal.h"

static char dir[256];

static int read_json(const char *json, tr_model_config *m)
{
    char path[300];
    snprintf(path, sizeof path, "%s/params.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(json, f);
    fclose(f);
    return meta_read_params(dir, m);
}

/* Meta's params.json of Llama 3.2 1B, 3.2 3B, 3.1 8B and 3 8B, as downloaded */
static const char llama32_1b[] =
    "{\"dim\": 2048, \"n_layers\": 16, \"n_heads\": 32, \"n_kv_heads\": 8, \"vocab_size\": 128256, "
    "\"ffn_dim_multiplier\": 1.5, \"multiple_of\": 256, \"norm_eps\": 1e-05, \"rope_theta\": "
    "500000.0, \"use_scaled_rope\": true}";
static const char llama32_3b[] =
    "{\"dim\": 3072, \"ffn_dim_multiplier\": 1.0, \"multiple_of\": 256, \"n_heads\": 24, "
    "\"n_kv_heads\": 8, \"n_layers\": 28, \"norm_eps\": 1e-05, \"rope_theta\": 500000.0, "
    "\"use_scaled_rope\": true, \"vocab_size\": 128256}";
static const char llama31_8b[] =
    "{\"dim\": 4096, \"ffn_dim_multiplier\": 1.3, \"multiple_of\": 1024, \"n_heads\": 32, "
    "\"n_kv_heads\": 8, \"n_layers\": 32, \"norm_eps\": 1e-05, \"rope_theta\": 500000.0, "
    "\"use_scaled_rope\": true, \"vocab_size\": 128256}";
static const char llama3_8b[] =
    "{\"dim\": 4096, \"n_layers\": 32, \"n_heads\": 32, \"n_kv_heads\": 8, \"vocab_size\": 128256, "
    "\"multiple_of\": 1024, \"ffn_dim_multiplier\": 1.3, \"norm_eps\": 1e-05, \"rope_theta\": "
    "500000.0}";

static void test_rope_factor(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        int scaled, ffn, positions;
        double factor;
    } files[] = {
        {llama32_1b, 1, 8192, 131072, 32.0},
        {llama32_3b, 1, 8192, 131072, 32.0},
        {llama31_8b, 1, 14336, 131072, 8.0},
        {llama3_8b, 0, 14336, 8192, 0.0},
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        tr_model_config m;
        assert_int_equal(read_json(files[i].json, &m), TR_OK);
        assert_int_equal(m.use_rope_scaling, files[i].scaled);
        assert_int_equal(m.ffn_hidden_size, files[i].ffn);
        assert_int_equal(m.max_position_embeddings, files[i].positions);
        if (files[i].scaled) {
            assert_true(m.rope_scaling_factor == files[i].factor);
            assert_true(m.rope_scaling_low_freq_factor == 1.0);
            assert_true(m.rope_scaling_high_freq_factor == 4.0);
            assert_int_equal(m.rope_scaling_original_max_position_embeddings, 8192);
        }
    }
    /* a 1B-sized file with 16 layers but another width, or another depth: 8 */
    tr_model_config m;
    char json[600];
    snprintf(json, sizeof json, "%.*s, \"rope_scaling_factor\": 16}", (int)strlen(llama32_1b) - 1,
             llama32_1b);
    assert_int_equal(read_json(json, &m), TR_OK); /* given: taken */
    assert_true(m.rope_scaling_factor == 16.0);
    snprintf(json, sizeof json, "%.*s, \"rope_scaling_factor\": null}",
             (int)strlen(llama31_8b) - 1, llama31_8b);
    assert_int_equal(read_json(json, &m), TR_OK);
    assert_true(m.rope_scaling_factor == 8.0);
    assert_int_equal(read_json("{\"dim\": 2048, \"n_layers\": 15, \"n_heads\": 32, \"norm_eps\": "
                               "1e-05, \"use_scaled_rope\": true}", &m), TR_OK);
    assert_true(m.rope_scaling_factor == 8.0);
    assert_int_equal(read_json("{\"dim\": 3072, \"n_layers\": 16, \"n_heads\": 24, \"norm_eps\": "
                               "1e-05, \"use_scaled_rope\": true}", &m), TR_OK);
    assert_true(m.rope_scaling_factor == 8.0);
    static const struct { const char *value, *needle; } bad[] = {
        {"0.5", "params.json: rope_scaling_factor 0.5 is below 1"},
        {"0", "params.json: rope_scaling_factor must be a positive number"},
        {"\"32\"", "rope_scaling_factor"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(json, sizeof json, "%.*s, \"rope_scaling_factor\": %s}",
                 (int)strlen(llama32_1b) - 1, llama32_1b, bad[i].value);
        assert_int_equal(read_json(json, &m), TR_ERR_INVALID);
        if (!strstr(tr_errmsg(), bad[i].needle))
            fprintf(stderr, "expected '%s' in: %s\n", bad[i].needle, tr_errmsg());
        assert_non_null(strstr(tr_errmsg(), bad[i].needle));
    }
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/trident-meta-params-%d", (int)getpid());
    if (mkdir(dir, 0755))
        return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rope_factor)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char path[300];
    snprintf(path, sizeof path, "%s/params.json", dir);
    unlink(path);
    rmdir(dir);
    return rc;
}
