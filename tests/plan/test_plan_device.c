/* The device model: the GEMM curve (top = gemm_efficiency, tile and wave quantisation, the
 * memory-bound regime of thin matrices), streaming kernels, the measured-table correction
 * and its file format, the flat model of CPU and custom clusters. */
#include <unistd.h>

#include "plan_test.h"

static double eff(const tr_plan_cluster *c, double m, double n, double k, double batch)
{
    return 2 * m * n * k * batch / tr_plan_gemm_s(c, m, n, k, batch) / c->peak_flops;
}

static void test_gemm_curve(void **state)
{
    (void)state;
    tr_plan_cluster a;
    assert_int_equal(tr_plan_cluster_preset("a100-80gb", &a), TR_OK);
    assert_int_equal(a.sms, 108);
    /* the top: a large square GEMM reaches gemm_efficiency less its tile overhead */
    double big = eff(&a, 8192, 8192, 8192, 1);
    assert_true(big <= a.gemm_efficiency && big > 0.95 * a.gemm_efficiency);
    /* smaller K: the tile's prologue/epilogue weighs more */
    assert_true(eff(&a, 8192, 8192, 512, 1) < big);
    /* wave quantisation: 108 tiles of 256 x 128 are one wave; one row more needs a second
     * wave of some tile shape, so the efficiency drops */
    double one_wave = eff(&a, 256 * 12, 128 * 9, 8192, 1);
    double spill = eff(&a, 256 * 12 + 1, 128 * 9, 8192, 1);
    assert_true(one_wave > 0.9 * big);
    assert_true(spill < 0.95 * one_wave);
    /* tile quantisation: N = 96 (a head dimension) wastes part of every 128-wide tile */
    assert_true(eff(&a, 8192, 96, 8192, 1) < eff(&a, 8192, 128, 8192, 1));
    /* thin matrices are memory-bound: attention scores at head dimension 64 take the time of
     * moving their bytes */
    double bytes = 2.0 * 96 * (2048.0 * 64 + 64 * 2048 + 2048.0 * 2048);
    double mem = bytes / (a.hbm_bw * a.hbm_efficiency);
    assert_close(tr_plan_gemm_s(&a, 2048, 2048, 64, 96), mem + a.kernel_overhead_s, 0.02);
    /* a tiny GEMM costs at least a kernel's overhead */
    assert_true(tr_plan_gemm_s(&a, 8, 8, 8, 1) >= a.kernel_overhead_s);
    /* the H100 has more SMs and a higher peak: a large GEMM is faster, by less than the peak
     * ratio (its top of the curve is lower) */
    tr_plan_cluster h;
    assert_int_equal(tr_plan_cluster_preset("h100-80gb", &h), TR_OK);
    double ta = tr_plan_gemm_model_s(&a, 8192, 8192, 8192, 1);
    double th = tr_plan_gemm_model_s(&h, 8192, 8192, 8192, 1);
    assert_true(ta / th > 2 && ta / th < h.peak_flops / a.peak_flops);
    /* its measured table (plan/gemm/h100-80gb.inc, 2026-11-27) */
    assert_true(h.n_gemm_table > 300);
    /* H200: the same GEMM model as H100, faster memory-bound kernels; its measured table
     * (plan/gemm/h200.inc, 2026-11-26) puts a large square at what cuBLASLt took there */
    tr_plan_cluster h2;
    assert_int_equal(tr_plan_cluster_preset("h200", &h2), TR_OK);
    assert_close(tr_plan_gemm_model_s(&h2, 8192, 8192, 8192, 1),
                 tr_plan_gemm_model_s(&h, 8192, 8192, 8192, 1), 1e-12);
    assert_true(h2.n_gemm_table > 300);
    double t2 = tr_plan_gemm_s(&h2, 8192, 8192, 8192, 1);
    assert_true(t2 > 1.38e-3 && t2 < 1.41e-3);
    assert_true(tr_plan_stream_s(&h2, 1e9) < tr_plan_stream_s(&h, 1e9));
}

static void test_stream_and_flat(void **state)
{
    (void)state;
    tr_plan_cluster a, cpu;
    assert_int_equal(tr_plan_cluster_preset("a100-80gb", &a), TR_OK);
    assert_close(tr_plan_stream_s(&a, 1e9),
                 1e9 / (a.hbm_bw * a.hbm_efficiency) + a.kernel_overhead_s, 1e-12);
    assert_true(tr_plan_stream_s(&a, 0) == 0);
    /* CPU: no shape model, FLOPs over the rate; streaming kernels are inside that rate */
    assert_int_equal(tr_plan_cluster_preset("cpu-host", &cpu), TR_OK);
    assert_close(tr_plan_gemm_s(&cpu, 100, 200, 300, 2),
                 2.0 * 100 * 200 * 300 * 2 / (cpu.peak_flops * cpu.gemm_efficiency), 1e-12);
    assert_true(tr_plan_stream_s(&cpu, 1e9) == 0);
}

static void test_measured_table(void **state)
{
    (void)state;
    tr_plan_cluster a;
    assert_int_equal(tr_plan_cluster_preset("a100-80gb", &a), TR_OK);
    assert_int_equal(a.n_gemm_table, 0); /* none measured yet: plan/gemm/a100-80gb.inc */
    double model = tr_plan_gemm_model_s(&a, 4096, 4096, 4096, 1);
    tr_plan_gemm_row rows[] = {{4096, 4096, 4096, 1, 1.5 * model},
                               {2048, 2048, 64, 96, tr_plan_gemm_model_s(&a, 2048, 2048, 64, 96)}};
    a.gemm_table = rows;
    a.n_gemm_table = 2;
    /* a measured shape is its measurement; a near one takes its ratio; a far one mostly the
     * ratio of the shapes nearer to it */
    assert_close(tr_plan_gemm_s(&a, 4096, 4096, 4096, 1), 1.5 * model, 1e-12);
    double near = tr_plan_gemm_s(&a, 4096, 4096, 4608, 1) /
                  tr_plan_gemm_model_s(&a, 4096, 4096, 4608, 1);
    assert_true(near > 1.3 && near <= 1.5);
    assert_close(tr_plan_gemm_s(&a, 2048, 2048, 64, 96), rows[1].seconds, 1e-12);

    /* the file format benchmarks/gemm_shapes prints */
    char dir[] = "/tmp/tr_gemm_XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/t.inc", dir);
    FILE *f = fopen(path, "w");
    fputs("/* benchmarks/gemm_shapes: cuBLASLt bf16, NVIDIA A100 */\n"
          "{4096, 4096, 4096, 1, 2.5e-4},\n\n"
          "  {2048, 2048, 64, 96, 1.0e-4},\n", f);
    fclose(f);
    tr_plan_gemm_row *t = NULL;
    int n = 0;
    assert_int_equal(tr_plan_gemm_table_read(path, &t, &n), TR_OK);
    assert_int_equal(n, 2);
    assert_close(t[1].batch, 96, 0);
    assert_close(t[0].seconds, 2.5e-4, 1e-15);
    free(t);
    f = fopen(path, "w");
    fputs("{4096, 4096, 4096, 1, 2.5e-4},\n{1, 2, three, 1, 1},\n", f);
    fclose(f);
    assert_int_equal(tr_plan_gemm_table_read(path, &t, &n), TR_ERR_INVALID);
    assert_msg("t.inc:2: expected a row");
    assert_null(t);
    f = fopen(path, "w");
    fputs("{4096, 4096, 4096, 1, -1},\n", f);
    fclose(f);
    assert_int_equal(tr_plan_gemm_table_read(path, &t, &n), TR_ERR_INVALID);
    f = fopen(path, "w");
    fputs("/* nothing */\n", f);
    fclose(f);
    assert_int_equal(tr_plan_gemm_table_read(path, &t, &n), TR_ERR_INVALID);
    assert_msg("holds no measured GEMM row");
    unlink(path);
    assert_int_equal(tr_plan_gemm_table_read(path, &t, &n), TR_ERR_IO);
    rmdir(dir);
    tr_clear_error();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_curve),
        cmocka_unit_test(test_stream_and_flat),
        cmocka_unit_test(test_measured_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
