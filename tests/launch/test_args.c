/* launch/args.c, the option parser of the `trident` subcommands: --flag VALUE and
 * --flag=VALUE, flags, multi-word options, positional arguments, -h / --help, the end of the
 * options before a command (trident launch), and the messages of every usage error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "launch/args.h"

enum { TP, JSON, INPUT, NAME };
static const arg_opt opts[] = {
    [TP] = {.name = "--tp", .kind = ARG_VALUE},
    [JSON] = {.name = "--json", .kind = ARG_FLAG},
    [INPUT] = {.name = "--input", .kind = ARG_VALUES, .what = "file"},
    [NAME] = {.name = "-n", .kind = ARG_VALUE},
    {.name = NULL},
};

static int usage_calls;
static void usage(FILE *f)
{
    (void)f;
    usage_calls++;
}

/* What the parser writes to stderr while fn runs, captured through a temporary file. */
static char captured[1024];
static int saved_fd = -1;
static FILE *capture_file;

static void capture_begin(void)
{
    fflush(stderr);
    capture_file = tmpfile();
    assert_non_null(capture_file);
    saved_fd = dup(2);
    assert_true(saved_fd >= 0);
    assert_true(dup2(fileno(capture_file), 2) >= 0);
}

static const char *capture_end(void)
{
    fflush(stderr);
    assert_true(dup2(saved_fd, 2) >= 0);
    close(saved_fd);
    rewind(capture_file);
    size_t n = fread(captured, 1, sizeof captured - 1, capture_file);
    captured[n] = '\0';
    fclose(capture_file);
    return captured;
}

/* Parse argv (argv[0] is the subcommand) and record what came back, one item a line:
 * "TP=4", "JSON", "INPUT=a", "POS=x", "HELP", "ERROR", then "END next=N". */
static char trace[1024];
static const char *parse(arg_parser *a, char **argv, int argc)
{
    static const char *names[] = {"TP", "JSON", "INPUT", "NAME"};
    a->argv = argv;
    a->argc = argc;
    trace[0] = '\0';
    size_t len = 0;
    for (;;) {
        const char *v;
        int o = args_next(a, &v);
        if (o == ARGS_END) {
            snprintf(trace + len, sizeof trace - len, "END next=%d", a->next);
            return trace;
        }
        if (o == ARGS_HELP || o == ARGS_ERROR) {
            snprintf(trace + len, sizeof trace - len, "%s", o == ARGS_HELP ? "HELP" : "ERROR");
            return trace;
        }
        len += (size_t)snprintf(trace + len, sizeof trace - len, "%s%s%s\n",
                                o == ARGS_POSITIONAL ? "POS" : names[o], v ? "=" : "",
                                v ? v : "");
    }
}

static arg_parser make(void)
{
    return (arg_parser){.cmd = "trident test", .opts = opts, .usage = usage};
}

static void test_values_and_flags(void **state)
{
    (void)state;
    char *argv[] = {"test", "--tp", "4", "--tp=8", "--json", "config.yaml", "-", "-n", "-x",
                    "--input", "a", "b", "-", "--input=c", "d"};
    arg_parser a = make();
    assert_string_equal(parse(&a, argv, 15), "TP=4\nTP=8\nJSON\nPOS=config.yaml\nPOS=-\n"
                                              "NAME=-x\nINPUT=a\nINPUT=b\nINPUT=-\nINPUT=c\n"
                                              "POS=d\nEND next=15");
    /* the value of a VALUE option is the next word whatever it is */
    char *neg[] = {"test", "--tp", "-5", "--tp=", "--json"};
    a = make();
    assert_string_equal(parse(&a, neg, 5), "TP=-5\nTP=\nJSON\nEND next=5");
}

static void test_help(void **state)
{
    (void)state;
    char *argv[] = {"test", "--tp", "2", "-h", "--bogus"};
    arg_parser a = make();
    usage_calls = 0;
    assert_string_equal(parse(&a, argv, 5), "TP=2\nHELP");
    assert_int_equal(usage_calls, 1);
    char *argv2[] = {"test", "--input", "a", "--help"};
    a = make();
    assert_string_equal(parse(&a, argv2, 4), "INPUT=a\nHELP");
    assert_int_equal(usage_calls, 2);
}

static void expect_error(arg_parser a, char **argv, int argc, const char *want_trace,
                         const char *want_message)
{
    capture_begin();
    const char *got = parse(&a, argv, argc);
    const char *msg = capture_end();
    assert_string_equal(got, want_trace);
    assert_string_equal(msg, want_message);
}

static void test_errors(void **state)
{
    (void)state;
    char *unknown[] = {"test", "--tp", "1", "--bogus=3"};
    expect_error(make(), unknown, 4, "TP=1\nERROR",
                 "trident test: unknown option '--bogus=3' (see trident test --help)\n");
    arg_parser custom = make();
    custom.unknown = "unknown argument '%s' (see --help)";
    char *unknown2[] = {"test", "-q"};
    expect_error(custom, unknown2, 2, "ERROR", "trident test: unknown argument '-q' (see --help)\n");
    char *missing[] = {"test", "--tp"};
    expect_error(make(), missing, 2, "ERROR", "trident test: --tp needs a value\n");
    char *flag_value[] = {"test", "--json=yes"};
    expect_error(make(), flag_value, 2, "ERROR", "trident test: --json takes no value\n");
    char *no_files[] = {"test", "--input", "--json"};
    expect_error(make(), no_files, 3, "ERROR", "trident test: --input needs at least one file\n");
    char *no_files_end[] = {"test", "--input"};
    expect_error(make(), no_files_end, 2, "ERROR",
                 "trident test: --input needs at least one file\n");
    /* "--" is an option like any other unless options end before a command */
    char *dashdash[] = {"test", "--"};
    expect_error(make(), dashdash, 2, "ERROR",
                 "trident test: unknown option '--' (see trident test --help)\n");
}

static void test_stop_at_command(void **state)
{
    (void)state;
    arg_parser a = make();
    a.stop_at_command = 1;
    char *argv[] = {"launch", "--tp", "2", "--", "--json", "x"};
    assert_string_equal(parse(&a, argv, 6), "TP=2\nEND next=4");
    a = make();
    a.stop_at_command = 1;
    char *argv2[] = {"launch", "--json", "sh", "-c", "--tp"};
    assert_string_equal(parse(&a, argv2, 5), "JSON\nEND next=2");
    a = make();
    a.stop_at_command = 1;
    char *argv3[] = {"launch", "--tp=1"};
    assert_string_equal(parse(&a, argv3, 2), "TP=1\nEND next=2");
}

static void test_ints(void **state)
{
    (void)state;
    arg_parser a = make();
    int v = -1;
    assert_int_equal(args_int(&a, "--tp", "12", 1, 4096, &v), 0);
    assert_int_equal(v, 12);
    assert_int_equal(args_int(&a, "--tp", "-7", INT_MIN, INT_MAX, &v), 0);
    assert_int_equal(v, -7);
    assert_true(args_parse_int("2147483647", 1, INT_MAX, &v));
    assert_false(args_parse_int("2147483648", 1, INT_MAX, &v));
    assert_false(args_parse_int("", 0, 10, &v));
    assert_false(args_parse_int("4x", 0, 10, &v));
    assert_int_equal(v, INT_MAX);
    const struct {
        const char *text;
        int min, max;
        const char *message;
    } bad[] = {
        {"0", 1, 4096, "trident test: --tp needs an integer in [1, 4096], got '0'\n"},
        {"x", 1, INT_MAX, "trident test: --tp needs an integer >= 1, got 'x'\n"},
        {"99999999999", INT_MIN, INT_MAX, "trident test: --tp needs an integer (got '99999999999')\n"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        capture_begin();
        int rc = args_int(&a, "--tp", bad[i].text, bad[i].min, bad[i].max, &v);
        assert_int_equal(rc, 2);
        assert_string_equal(capture_end(), bad[i].message);
    }
    capture_begin();
    assert_int_equal(args_error(&a, "%d things", 3), 2);
    assert_string_equal(capture_end(), "trident test: 3 things\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_and_flags), cmocka_unit_test(test_help),
        cmocka_unit_test(test_errors),           cmocka_unit_test(test_stop_at_command),
        cmocka_unit_test(test_ints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
