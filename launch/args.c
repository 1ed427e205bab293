/* launch/args.h: the option parser of the `trident` subcommands. */
#include "launch/args.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int is_option(const char *arg) { return arg[0] == '-' && arg[1] != '\0'; }

int args_error(const arg_parser *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", a->cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

int args_next(arg_parser *a, const char **value)
{
    *value = NULL;
    if (a->next < 1)
        a->next = 1;
    if (a->next >= a->argc)
        return ARGS_END;
    const char *arg = a->argv[a->next];
    if (a->values_of && !is_option(arg)) { /* one more word of --input a b c */
        a->next++;
        *value = arg;
        return (int)(a->values_of - a->opts);
    }
    a->values_of = NULL;
    if (a->stop_at_command && (!strcmp(arg, "--") || !is_option(arg))) {
        a->next += !strcmp(arg, "--");
        return ARGS_END;
    }
    a->next++;
    if (!is_option(arg)) {
        *value = arg;
        return ARGS_POSITIONAL;
    }
    /* --name=value */
    char name[64];
    const char *eq = strchr(arg, '='), *inline_value = NULL;
    if (!strncmp(arg, "--", 2) && eq && (size_t)(eq - arg) < sizeof name) {
        memcpy(name, arg, (size_t)(eq - arg));
        name[eq - arg] = '\0';
        inline_value = eq + 1;
    } else {
        snprintf(name, sizeof name, "%s", arg);
    }
    if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
        a->usage(stdout);
        return ARGS_HELP;
    }
    const arg_opt *o = a->opts;
    while (o->name && strcmp(o->name, name))
        o++;
    if (!o->name) {
        if (a->unknown) {
            fprintf(stderr, "%s: ", a->cmd);
            fprintf(stderr, a->unknown, arg);
            fputc('\n', stderr);
        } else {
            args_error(a, "unknown option '%s' (see %s --help)", arg, a->cmd);
        }
        return ARGS_ERROR;
    }
    int index = (int)(o - a->opts);
    switch (o->kind) {
    case ARG_FLAG:
        if (inline_value) {
            args_error(a, "%s takes no value", name);
            return ARGS_ERROR;
        }
        return index;
    case ARG_VALUE:
        if (!inline_value) {
            if (a->next >= a->argc) {
                args_error(a, "%s needs a value", name);
                return ARGS_ERROR;
            }
            inline_value = a->argv[a->next++];
        }
        *value = inline_value;
        return index;
    case ARG_VALUES:
    default:
        if (!inline_value) {
            if (a->next >= a->argc || is_option(a->argv[a->next])) {
                args_error(a, "%s needs at least one %s", name, o->what ? o->what : "value");
                return ARGS_ERROR;
            }
            inline_value = a->argv[a->next++];
            a->values_of = o;
        }
        *value = inline_value;
        return index;
    }
}

int args_parse_int(const char *text, int min, int max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (!*text || *end || errno || v < min || v > max)
        return 0;
    *out = (int)v;
    return 1;
}

int args_int(const arg_parser *a, const char *flag, const char *text, int min, int max, int *out)
{
    if (args_parse_int(text, min, max, out))
        return 0;
    if (min == INT_MIN && max == INT_MAX)
        return args_error(a, "%s needs an integer (got '%s')", flag, text);
    if (max == INT_MAX)
        return args_error(a, "%s needs an integer >= %d, got '%s'", flag, min, text);
    return args_error(a, "%s needs an integer in [%d, %d], got '%s'", flag, min, max, text);
}
