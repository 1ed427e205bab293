/* yaml/: valid configs, defaults, marks, files, overrides that succeed, write -> load round
 * trip. (Errors: test_config_errors.c; hostile inputs: test_config_fuzz.c.) */
#include <stdlib.h>
#include <unistd.h>

#include "yaml/config_internal.h"
#include "yaml_test.h"

/* The key table: no key twice, every key in a listed section, every section with keys,
 * defaults only on optional keys, derived defaults naming a key. */
static void test_schema_table(void **state)
{
    (void)state;
    int n_sections = 0;
    while (config_sections[n_sections])
        n_sections++;
    int keys_per_section[16] = {0};
    assert_true(n_sections <= 16);
    for (int i = 0; i < config_n_keys; i++) {
        const config_key_spec *k = &config_keys[i];
        int s = config_section_index(k->section);
        assert_true(s >= 0);
        keys_per_section[s]++;
        for (int j = 0; j < i; j++)
            assert_false(!strcmp(k->section, config_keys[j].section) &&
                         !strcmp(k->key, config_keys[j].key));
        if (k->required)
            assert_null(k->def);
        if (k->def && k->def[0] == '=')
            assert_true(config_key_index(k->def + 1) >= 0);
        assert_true(offsetof(tr_config, marks) > k->offset);
    }
    for (int s = 0; s < n_sections; s++)
        assert_true(keys_per_section[s] > 0);
}

static void test_required_only_gets_every_default(void **state)
{
    (void)state;
    tr_config c;
    assert_int_equal(tr_t_load(TR_T_REQUIRED, NULL, 0, &c), TR_OK);
    assert_string_equal(c.source, "t.yaml");
    assert_int_equal(c.model.num_layers, 4);
    assert_int_equal(c.model.hidden_size, 64);
    assert_int_equal(c.model.num_attention_heads, 4);
    assert_int_equal(c.model.seq_length, 32);
    assert_int_equal(c.model.max_position_embeddings, 32); /* = seq_length */
    assert_int_equal(c.model.vocab_size, 256);
    assert_int_equal(c.model.make_vocab_size_divisible_by, 128);
    assert_true(c.model.init_method_std == 0.02);
    assert_true(c.model.layernorm_epsilon == 1e-5);

    assert_int_equal(c.parallel.tensor_model_parallel_size, 1);
    assert_int_equal(c.parallel.pipeline_model_parallel_size, 1);
    assert_int_equal(c.parallel.num_pipeline_layers, 0);
    assert_string_equal(c.parallel.pipeline_schedule, "1f1b");
    assert_int_equal(c.parallel.virtual_pipeline_model_parallel_size, 1);
    assert_int_equal(c.parallel.sequence_parallel, 0);
    assert_true(c.parallel.ddp_bucket_size_mb == 25);
    assert_int_equal(c.parallel.overlap_grad_reduce, 1);
    assert_int_equal(c.parallel.use_distributed_optimizer, 0);
    assert_true(c.parallel.comm_timeout_s == 300);
    assert_string_equal(c.parallel.order, "tp-dp-pp");

    assert_int_equal(c.training.micro_batch_size, 2);
    assert_int_equal(c.training.global_batch_size, 2); /* = micro_batch_size */
    assert_int_equal(c.training.train_iters, 10);
    assert_true(c.training.lr == 3e-4);
    assert_true(c.training.min_lr == 0);
    assert_int_equal(c.training.lr_warmup_iters, 0);
    assert_int_equal(c.training.lr_decay_iters, 10); /* = train_iters */
    assert_string_equal(c.training.lr_decay_style, "cosine");
    assert_true(c.training.clip_grad == 1.0);
    assert_true(c.training.weight_decay == 0.01);
    assert_true(c.training.adam_beta1 == 0.9);
    assert_true(c.training.adam_beta2 == 0.999);
    assert_true(c.training.adam_eps == 1e-8);
    assert_true(c.training.seed == 1234);
    assert_int_equal(c.training.eval_interval, 0);
    assert_int_equal(c.training.eval_iters, 10);
    assert_string_equal(c.training.recompute, "none");
    assert_string_equal(c.training.precision, "fp32");

    assert_int_equal(c.data.n_data_path, 1);
    assert_string_equal(c.data.data_path[0], "/tmp/corpus");
    assert_string_equal(c.data.data_format, "auto");
    assert_string_equal(c.data.split, "969,30,1");

    assert_int_equal(c.logging.log_interval, 1);
    assert_int_equal(c.logging.trace, 0);
    assert_string_equal(c.logging.level, "info");
    assert_true(c.logging.peak_gflops == 0);

    assert_string_equal(c.cluster.preset, "none");
    assert_string_equal(c.cluster.device, "auto");
    assert_int_equal(c.cluster.nodes, 0);
    assert_true(c.cluster.peak_tflops == 0);

    /* positions of keys and sections; defaults name only the file */
    assert_string_equal(tr_config_where(&c, "model"), "t.yaml:1:1");
    assert_string_equal(tr_config_where(&c, "model.hidden_size"), "t.yaml:3:3");
    assert_string_equal(tr_config_where(&c, "training.lr"), "t.yaml:9:3");
    assert_string_equal(tr_config_where(&c, "data.data_path"), "t.yaml:11:3");
    assert_string_equal(tr_config_where(&c, "training.min_lr"), "t.yaml");
    assert_string_equal(tr_config_where(&c, "parallel"), "t.yaml");
    assert_string_equal(tr_config_where(&c, "no.such_key"), "t.yaml");
    tr_config_free(&c);
    assert_true(tr_t_is_zero(&c));
    tr_config_free(&c); /* freeing twice, or a zeroed struct, is safe */
    tr_config_free(NULL);
    assert_string_equal(tr_config_where(NULL, "model"), "<config>");
}

/* Every key set away from its default, in every spelling the loader accepts. */
static const char full_config[] =
    "# all keys\n"
    "model:\n"
    "  num_layers: 8\n"
    "  hidden_size: 96\n"
    "  num_attention_heads: 6\n"
    "  seq_length: 48\n"
    "  max_position_embeddings: 64\n"
    "  vocab_size: 50257\n"
    "  make_vocab_size_divisible_by: 64\n"
    "  init_method_std: 0.006\n"
    "  layernorm_epsilon: 1.0e-6\n"
    "parallel:\n"
    "  tensor_model_parallel_size: 2\n"
    "  pipeline_model_parallel_size: 2\n"
    "  pipeline_layers: [4, 4]\n"
    "  pipeline_schedule: interleaved\n"
    "  virtual_pipeline_model_parallel_size: 2\n"
    "  sequence_parallel: yes\n"
    "  ddp_bucket_size_mb: 0\n"
    "  overlap_grad_reduce: no\n"
    "  use_distributed_optimizer: True\n"
    "  comm_timeout_s: 12.5\n"
    "  order: tp-pp-dp\n"
    "training:\n"
    "  micro_batch_size: 3\n"
    "  global_batch_size: 12\n"
    "  train_iters: 1000\n"
    "  lr: 6e-4\n"
    "  min_lr: 0.00006\n"
    "  lr_warmup_iters: 10\n"
    "  lr_decay_iters: 800\n"
    "  lr_decay_style: linear\n"
    "  clip_grad: 0\n"
    "  weight_decay: 0.1\n"
    "  adam_beta1: 0.8\n"
    "  adam_beta2: 0.95\n"
    "  adam_eps: 1e-10\n"
    "  seed: 18446744073709551615\n"
    "  eval_interval: 100\n"
    "  eval_iters: 3\n"
    "  recompute: full\n"
    "  precision: bf16\n"
    "data:\n"
    "  data_path: \"/data/with space/it's \\\"quoted\\\"\\\\ # not a comment: é\"\n"
    "  data_format: megatron\n"
    "  split: '90, 10 ,0'\n"
    "logging:\n"
    "  log_interval: 5\n"
    "  trace: on\n"
    "  level: debug\n"
    "  peak_gflops: 312e3\n"
    "cluster:\n"
    "  preset: h100-80gb\n"
    "  device: cpu\n"
    "  nodes: 48\n"
    "  gpus_per_node: 8\n"
    "  gpu_memory_gib: 79.6\n"
    "  reserved_memory_gib: 2\n"
    "  peak_tflops: 989\n"
    "  gemm_efficiency: 0.55\n"
    "  intra_node_gbytes_per_s: 450\n"
    "  intra_node_latency_us: 5\n"
    "  inter_node_gbytes_per_s: 400\n"
    "  inter_node_latency_us: 10\n";

static void test_every_key_set(void **state)
{
    (void)state;
    tr_config c;
    assert_int_equal(tr_t_load(full_config, NULL, 0, &c), TR_OK);
    assert_int_equal(c.model.num_layers, 8);
    assert_int_equal(c.model.max_position_embeddings, 64);
    assert_int_equal(c.model.vocab_size, 50257);
    assert_int_equal(c.model.make_vocab_size_divisible_by, 64);
    assert_true(c.model.init_method_std == 0.006);
    assert_true(c.model.layernorm_epsilon == 1e-6);
    assert_int_equal(c.parallel.tensor_model_parallel_size, 2);
    assert_int_equal(c.parallel.num_pipeline_layers, 2);
    assert_int_equal(c.parallel.pipeline_layers[0], 4);
    assert_int_equal(c.parallel.pipeline_layers[1], 4);
    assert_string_equal(c.parallel.pipeline_schedule, "interleaved");
    assert_int_equal(c.parallel.virtual_pipeline_model_parallel_size, 2);
    assert_int_equal(c.parallel.sequence_parallel, 1);
    assert_true(c.parallel.ddp_bucket_size_mb == 0);
    assert_int_equal(c.parallel.overlap_grad_reduce, 0);
    assert_int_equal(c.parallel.use_distributed_optimizer, 1);
    assert_true(c.parallel.comm_timeout_s == 12.5);
    assert_string_equal(c.parallel.order, "tp-pp-dp");
    assert_int_equal(c.training.global_batch_size, 12);
    assert_true(c.training.lr == 6e-4);
    assert_true(c.training.min_lr == 6e-5);
    assert_int_equal(c.training.lr_decay_iters, 800);
    assert_string_equal(c.training.lr_decay_style, "linear");
    assert_true(c.training.clip_grad == 0);
    assert_true(c.training.adam_eps == 1e-10);
    assert_true(c.training.seed == UINT64_MAX);
    assert_string_equal(c.training.recompute, "full");
    assert_string_equal(c.training.precision, "bf16");
    assert_string_equal(c.data.data_path[0], "/data/with space/it's \"quoted\"\\ # not a comment: é");
    assert_string_equal(c.data.data_format, "megatron");
    assert_string_equal(c.data.split, "90, 10 ,0");
    assert_int_equal(c.logging.log_interval, 5);
    assert_int_equal(c.logging.trace, 1);
    assert_string_equal(c.logging.level, "debug");
    assert_true(c.logging.peak_gflops == 312e3);
    assert_string_equal(tr_config_where(&c, "logging.peak_gflops"), "t.yaml:51:3");
    assert_string_equal(c.cluster.preset, "h100-80gb");
    assert_string_equal(c.cluster.device, "cpu");
    assert_int_equal(c.cluster.nodes, 48);
    assert_int_equal(c.cluster.gpus_per_node, 8);
    assert_true(c.cluster.gpu_memory_gib == 79.6);
    assert_true(c.cluster.gemm_efficiency == 0.55);
    assert_true(c.cluster.inter_node_latency_us == 10);
    tr_config_free(&c);
}

/* Writes c with tr_config_write, loads the text back, asserts equality; returns the text. */
static char *round_trip(const tr_config *c)
{
    size_t len;
    char *text = tr_t_write(c, &len);
    tr_config back;
    int rc = tr_config_load_string(text, len, "written.yaml", NULL, 0, &back);
    if (rc)
        print_error("%s\n--- written:\n%s", tr_errmsg(), text);
    assert_int_equal(rc, TR_OK);
    assert_true(tr_config_equal(c, &back));
    assert_true(tr_config_equal(&back, c));
    tr_config_free(&back);
    return text;
}

static void test_write_round_trip(void **state)
{
    (void)state;
    tr_config c;
    assert_int_equal(tr_t_load(TR_T_REQUIRED, NULL, 0, &c), TR_OK);
    char *text = round_trip(&c);
    /* every key is written; defaults are marked */
    assert_non_null(strstr(text, "\n  max_position_embeddings: 32  # default\n"));
    assert_non_null(strstr(text, "\n  hidden_size: 64\n"));
    assert_non_null(strstr(text, "\n  pipeline_layers: []  # default\n"));
    assert_non_null(strstr(text, "\n  seed: 1234  # default\n"));
    assert_non_null(strstr(text, "\n  lr: 0.0003\n"));
    assert_non_null(strstr(text, "\nlogging:\n"));
    free(text);
    tr_config_free(&c);

    assert_int_equal(tr_t_load(full_config, NULL, 0, &c), TR_OK);
    free(round_trip(&c));
    /* awkward doubles still come back bit for bit; equality notices a change */
    c.training.lr = 0.1 + 0.2;
    c.training.min_lr = 1e-300;
    c.model.init_method_std = 123456789.123456789;
    c.parallel.comm_timeout_s = 5e-324 * 1e300;
    free(round_trip(&c));
    /* strings with what YAML would fold or strip: tab, control bytes, NEL, LS, PS, BOM */
    free(c.data.data_path[0]);
    c.data.data_path[0] = strdup("a\tb\x01\x7f\xc2\x85" "c\xe2\x80\xa8" "d\xe2\x80\xa9" "e\xef\xbb\xbf"
                              "f\"g\\h #i: j\n k ");
    free(round_trip(&c));
    tr_config d;
    assert_int_equal(tr_t_load(full_config, NULL, 0, &d), TR_OK);
    assert_false(tr_config_equal(&c, &d));
    tr_config_free(&d);
    tr_config_free(&c);
}

static void test_overrides(void **state)
{
    (void)state;
    const char *ov[] = {
        "training.lr=3e-4",
        "data.data_path=/x/y",
        "parallel.pipeline_model_parallel_size=2",
        "parallel.pipeline_layers=[1,3]",
        "parallel.sequence_parallel=yes",
        "training.train_iters=7",
        "training.train_iters=9", /* the later one wins */
        "data.split=\"1,0,0\"",
        "model.hidden_size= 128 # a comment",
        "parallel.pipeline_schedule=gpipe",
        "training.recompute=selective",
        "cluster.preset=a100-80gb",
    };
    tr_config c;
    int rc = tr_t_load(TR_T_REQUIRED, ov, (int)(sizeof ov / sizeof ov[0]), &c);
    if (rc)
        print_error("%s\n", tr_errmsg());
    assert_int_equal(rc, TR_OK);
    assert_true(c.training.lr == 3e-4);
    assert_string_equal(c.data.data_path[0], "/x/y");
    assert_int_equal(c.parallel.num_pipeline_layers, 2);
    assert_int_equal(c.parallel.pipeline_layers[0], 1);
    assert_int_equal(c.parallel.pipeline_layers[1], 3);
    assert_int_equal(c.parallel.sequence_parallel, 1);
    assert_int_equal(c.training.train_iters, 9);
    assert_int_equal(c.training.lr_decay_iters, 9); /* derived defaults follow overrides */
    assert_string_equal(c.data.split, "1,0,0");
    assert_int_equal(c.model.hidden_size, 128);
    assert_string_equal(c.parallel.pipeline_schedule, "gpipe");
    assert_string_equal(c.training.recompute, "selective");
    assert_string_equal(c.cluster.preset, "a100-80gb");
    assert_string_equal(tr_config_where(&c, "training.lr"), "--set training.lr");
    assert_string_equal(tr_config_where(&c, "parallel.pipeline_layers"),
                        "--set parallel.pipeline_layers");
    assert_string_equal(tr_config_where(&c, "model.num_layers"), "t.yaml:2:3");
    tr_config_free(&c);

    /* an override can supply a required key the file lacks, and an empty list */
    const char *ov2[] = {"training.train_iters=5", "parallel.pipeline_layers=[]"};
    const char *no_iters = TR_T_MODEL "training:\n  micro_batch_size: 2\n  lr: 1e-3\n" TR_T_DATA;
    assert_int_equal(tr_t_load(no_iters, ov2, 2, &c), TR_OK);
    assert_int_equal(c.training.train_iters, 5);
    assert_int_equal(c.parallel.num_pipeline_layers, 0);
    tr_config_free(&c);
}

static void test_yaml_forms(void **state)
{
    (void)state;
    tr_config c;
    /* flow mappings, quoted keys and numbers, scalar aliases, comments, document markers,
     * an empty section, CRLF line ends */
    const char *text = "%YAML 1.1\n"
                       "---\n"
                       "model: {num_layers: 2, \"hidden_size\": &h 64, num_attention_heads: *h,\r\n"
                       "        seq_length: '16'}\r\n"
                       "training:\n"
                       "  micro_batch_size: +2\n"
                       "  train_iters: &n 10\n"
                       "  lr_decay_iters: *n\n"
                       "  lr: .5e-3\n"
                       "  seed: 0\n"
                       "data: {data_path: !!str 123}\n"
                       "logging:\n"
                       "parallel:   # nothing here\n"
                       "...\n";
    int rc = tr_t_load(text, NULL, 0, &c);
    if (rc)
        print_error("%s\n", tr_errmsg());
    assert_int_equal(rc, TR_OK);
    assert_int_equal(c.model.num_attention_heads, 64);
    assert_int_equal(c.model.seq_length, 16);
    assert_int_equal(c.training.micro_batch_size, 2);
    assert_int_equal(c.training.lr_decay_iters, 10);
    assert_true(c.training.lr == 0.5e-3);
    assert_true(c.training.seed == 0);
    assert_string_equal(c.data.data_path[0], "123");
    assert_string_equal(tr_config_where(&c, "model.hidden_size"), "t.yaml:3:24");
    assert_string_equal(tr_config_where(&c, "logging"), "t.yaml:12:1");
    tr_config_free(&c);
}

static void load_config_file(const char *name, tr_config *c)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/configs/%s", TR_SOURCE_ROOT, name);
    int rc = tr_config_load(path, NULL, 0, c);
    if (rc)
        print_error("%s\n", tr_errmsg());
    assert_int_equal(rc, TR_OK);
    assert_string_equal(c->source, path);
    free(round_trip(c));
}

static void test_shipped_configs(void **state)
{
    (void)state;
    tr_config c;
    load_config_file("tiny.yaml", &c);
    assert_int_equal(c.model.num_layers, 4);
    assert_int_equal(c.model.hidden_size, 128);
    assert_int_equal(c.model.vocab_size, 256);
    assert_int_equal(c.training.global_batch_size, 16);
    assert_string_equal(c.data.data_path[0], "data/cache/fortunes");
    assert_string_equal(c.data.split, "98,2,0");
    tr_config_free(&c);
    load_config_file("gpt2-124m.yaml", &c);
    assert_int_equal(c.model.num_layers, 12);
    assert_int_equal(c.model.hidden_size, 768);
    assert_int_equal(c.model.seq_length, 1024);
    assert_int_equal(c.model.vocab_size, 50257);
    assert_true(c.training.lr == 6e-4);
    tr_config_free(&c);
}

static void test_file_variant(void **state)
{
    (void)state;
    char path[] = "/tmp/tr_yaml_test_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(TR_T_REQUIRED "logging:\n  log_interval: x\n", f);
    fclose(f);
    tr_config c;
    assert_int_equal(tr_config_load(path, NULL, 0, &c), TR_ERR_CONFIG);
    char want[256];
    snprintf(want, sizeof want, "%s:13:17: logging.log_interval: expected an integer, found 'x'",
             path);
    assert_string_equal(tr_errmsg(), want);
    assert_true(tr_t_is_zero(&c));
    const char *ov[] = {"logging.log_interval=4"};
    assert_int_equal(tr_config_load(path, ov, 1, &c), TR_OK);
    assert_int_equal(c.logging.log_interval, 4);
    snprintf(want, sizeof want, "%s:3:3", path);
    assert_string_equal(tr_config_where(&c, "model.hidden_size"), want);
    tr_config_free(&c);
    unlink(path);

    /* missing file, a directory */
    assert_int_equal(tr_config_load("/nonexistent/dir/x.yaml", NULL, 0, &c), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(), "/nonexistent/dir/x.yaml: cannot open (No such file or "
                                     "directory); expected a readable YAML file");
    assert_int_equal(tr_config_load("/tmp", NULL, 0, &c), TR_ERR_CONFIG);
    assert_string_equal(tr_errmsg(),
                        "/tmp: cannot read (Is a directory); expected a readable YAML file");
    assert_true(tr_t_is_zero(&c));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_table),
        cmocka_unit_test(test_required_only_gets_every_default),
        cmocka_unit_test(test_every_key_set),
        cmocka_unit_test(test_write_round_trip),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_yaml_forms),
        cmocka_unit_test(test_shipped_configs),
        cmocka_unit_test(test_file_variant),
    };
    return cmocka_run_group_tests_name("yaml config", tests, NULL, NULL);
}
