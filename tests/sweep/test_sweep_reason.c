/* launch/ sweep: the failure reason read from a point's stderr log
 * (tr_sweep_failure_reason) and the per-rank memory / escaped reason in the CSV and JSONL
 * writers. Logs are written in the launcher's format: rank lines "[rN] text", its own lines
 * "trident train: ...". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/core.h"
#include "launch/sweep.h"

static char tmp_dir[] = "/tmp/trident-sweep-reason-XXXXXX";

static int make_tmp(void **state)
{
    (void)state;
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static int remove_tmp(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Writes `text` to TMP/name and returns the path (static buffer). */
static const char *write_log(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

#define LAUNCHER_STOP "trident train: rank 1 exited with status 2; stopping the other ranks\n"
#define LAUNCHER_DONE "trident train: all ranks stopped 0.01 s after rank 1 failed; exit status 2\n"

/* The failed rank's first error wins even when another rank's follow-on error came first;
 * info/warning log lines are not errors; the launcher's closing line follows. */
static void test_failed_rank_first_error(void **state)
{
    (void)state;
    const char *log = write_log("a.log",
        "[r0] trident info [rank 0]: dp: nothing to shard\n"
        "[r1] trident warning [rank 1]: something odd\n"
        "[r0] trident train: comm: rank 1 closed the connection\n"
        "[r1] trident train: point.yaml:45:3: data.data_path: x.idx: file is 40 bytes\n"
        "[r1] trident train: a later error\n" LAUNCHER_STOP LAUNCHER_DONE);
    char reason[1024];
    tr_sweep_failure_reason(log, 2, reason, sizeof reason);
    assert_string_equal(reason, "rank 1: point.yaml:45:3: data.data_path: x.idx: file is 40 bytes "
                                "(trident train: all ranks stopped 0.01 s after rank 1 failed; "
                                "exit status 2)");
}

/* Without the launcher's verdict, the first rank error of any rank; other programs' error
 * lines (sanitizers, libraries) count, their warnings do not. */
static void test_any_rank_and_foreign_errors(void **state)
{
    (void)state;
    const char *log = write_log("b.log",
        "[r3] UCX  WARN  some transport warning\n"
        "[r2] ==77==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1\n"
        "[r3] trident train: later\n");
    char reason[1024];
    tr_sweep_failure_reason(log, 1, reason, sizeof reason);
    assert_string_equal(reason, "rank 2: ==77==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1");
    log = write_log("c.log", "[r0] x.c:10:5: runtime error: signed integer overflow\n");
    tr_sweep_failure_reason(log, 1, reason, sizeof reason);
    assert_string_equal(reason, "rank 0: x.c:10:5: runtime error: signed integer overflow");
}

/* A rank killed by a signal prints nothing: the launcher's first line, then its last. */
static void test_killed_rank(void **state)
{
    (void)state;
    const char *log = write_log("d.log",
        "[r0] trident info [rank 0]: starting\n"
        "trident train: rank 3 was killed by signal 11 (SIGSEGV); stopping the other ranks\n"
        "trident train: all ranks stopped 0.00 s after rank 3 failed; exit status 139\n");
    char reason[1024];
    tr_sweep_failure_reason(log, 139, reason, sizeof reason);
    assert_string_equal(reason, "trident train: rank 3 was killed by signal 11 (SIGSEGV); stopping the "
                                "other ranks (trident train: all ranks stopped 0.00 s after rank 3 "
                                "failed; exit status 139)");
}

/* The launcher failed before starting ranks: its one line, nothing after it. */
static void test_launcher_only(void **state)
{
    (void)state;
    const char *log = write_log("e.log", "trident train: point.yaml:3:1: unknown key 'foo'\n");
    char reason[1024];
    tr_sweep_failure_reason(log, 2, reason, sizeof reason);
    assert_string_equal(reason, "trident train: point.yaml:3:1: unknown key 'foo'");
}

/* Nothing in the log, or no log at all: the exit status. */
static void test_empty_and_missing_log(void **state)
{
    (void)state;
    char reason[1024], path[600];
    tr_sweep_failure_reason(write_log("f.log", ""), 2, reason, sizeof reason);
    assert_string_equal(reason, "exit status 2");
    tr_sweep_failure_reason(write_log("g.log", "[r0] trident info [rank 0]: hello\n\n"), 3, reason,
                            sizeof reason);
    assert_string_equal(reason, "exit status 3");
    snprintf(path, sizeof path, "%s/missing.log", tmp_dir);
    tr_sweep_failure_reason(path, 127, reason, sizeof reason);
    assert_string_equal(reason, "exit status 127");
    reason[0] = 'x';
    tr_sweep_failure_reason(path, 1, reason, 0); /* no room: nothing written */
    assert_int_equal(reason[0], 'x');
}

/* A huge error line (multi-byte characters, tabs, escape codes) is bounded, cut on a UTF-8
 * boundary and marked; control characters become spaces. */
static void test_bounded_and_clean(void **state)
{
    (void)state;
    size_t big = 20000;
    char *text = malloc(big + 512); /* + the launcher lines */
    assert_non_null(text);
    strcpy(text, "[r1] trident train: bad\tvalue \x1b[31m");
    size_t len = strlen(text);
    while (len + 2 < big) {
        memcpy(text + len, "\xc3\xa9", 2); /* é */
        len += 2;
    }
    strcpy(text + len, "\n" LAUNCHER_STOP LAUNCHER_DONE);
    const char *log = write_log("h.log", text);
    free(text);
    char reason[1024];
    tr_sweep_failure_reason(log, 2, reason, sizeof reason);
    assert_true(strlen(reason) < 1000);
    assert_memory_equal(reason, "rank 1: bad value  [31m\xc3\xa9", 25);
    for (const char *p = reason; *p; p++)
        assert_true((unsigned char)*p >= 0x20);
    const char *cut = strstr(reason, "... (trident train: all ranks stopped");
    assert_non_null(cut);
    /* the byte before "..." ends a whole é */
    assert_int_equal((unsigned char)cut[-1], 0xa9);
    assert_int_equal((unsigned char)cut[-2], 0xc3);
    /* a small buffer: still terminated, still on a character boundary */
    char small[16];
    tr_sweep_failure_reason(log, 2, small, sizeof small);
    assert_string_equal(small, "rank 1: bad ...");
}

/* A grid with one axis and two points: one ok with per-rank peaks, one failed with a reason
 * that needs CSV quoting. */
static void test_writers(void **state)
{
    (void)state;
    const char *grid_path = write_log("grid.yaml",
        "base:\n  model: {num_layers: 2, hidden_size: 32, num_attention_heads: 2, seq_length: 16}\n"
        "grid:\n  training.micro_batch_size: [1, 2]\nrun: {world_size: 2}\n");
    tr_grid_spec g;
    assert_int_equal(tr_grid_load(grid_path, &g), TR_OK);
    double peaks[2] = {101.5, 99.25};
    tr_sweep_point p[2] = {
        {.index = 0, .status = TR_POINT_OK, .dp = 2, .tp = 1, .pp = 1, .mb = 1, .median_ms = 2,
         .tokens_per_s = 1000, .peak_rss_mb = 101.5, .peak_rss_mb_per_rank = peaks, .n_ranks = 2,
         .bubble = 0, .final_loss = 5.5, .predicted_ms = 1},
        {.index = 1, .status = TR_POINT_FAILED, .dp = 2, .tp = 1, .pp = 1, .mb = 2},
    };
    snprintf(p[1].reason, sizeof p[1].reason, "rank 0: bad \"value\", here");
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    assert_int_equal(tr_sweep_write_csv(f, &g, p, 2), TR_OK);
    fclose(f);
    assert_non_null(strstr(buf, ",peak_rss_mb_max_rank,peak_rss_mb_per_rank,measured_bubble,"));
    assert_non_null(strstr(buf, "\n0,\"1\",2,1,1,ok,\"\",2,1000,101.5,101.5;99.25,0,5.5,1,2\n"));
    assert_non_null(strstr(buf, "\n1,\"2\",2,1,1,failed,\"rank 0: bad \"\"value\"\", here\",,,,,,,,\n"));
    free(buf);
    f = open_memstream(&buf, &size);
    assert_int_equal(tr_sweep_write_jsonl(f, &g, p, 2), TR_OK);
    fclose(f);
    assert_non_null(strstr(buf, "\"peak_rss_mb_max_rank\":101.5,\"peak_rss_mb_per_rank\":[101.5,99.25],"));
    assert_non_null(strstr(buf, "\"reason\":\"rank 0: bad \\\"value\\\", here\""));
    free(buf);
    tr_grid_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failed_rank_first_error),
        cmocka_unit_test(test_any_rank_and_foreign_errors),
        cmocka_unit_test(test_killed_rank),
        cmocka_unit_test(test_launcher_only),
        cmocka_unit_test(test_empty_and_missing_log),
        cmocka_unit_test(test_bounded_and_clean),
        cmocka_unit_test(test_writers),
    };
    return cmocka_run_group_tests(tests, make_tmp, remove_tmp);
}
