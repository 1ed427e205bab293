/* Streaming JSON writer: enough for metrics lines, topology tables and traces. */
#include "core.h"

#include <math.h>
#include <string.h>

void tr_json_begin(tr_json *j, FILE *f)
{
    j->f = f;
    j->depth = 0;
    j->need_comma[0] = 0;
}

static void write_string(FILE *f, const char *s)
{
    fputc('"', f);
    size_t len = strlen(s);
    for (const unsigned char *p = (const unsigned char *)s, *end = p + len; p < end; p++) {
        size_t bad = *p >= 0x80 ? tr_utf8_invalid_len(p, (size_t)(end - p)) : 0;
        if (bad) { /* an ill-formed subpart (a character cut short, a stray byte): U+FFFD */
            fputs("\\ufffd", f);
            p += bad - 1;
        } else if (*p >= 0x80) { /* a whole multi-byte character */
            size_t n = *p >= 0xF0 ? 4 : *p >= 0xE0 ? 3 : 2;
            fwrite(p, 1, n, f);
            p += n - 1;
        } else if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void write_key(tr_json *j, const char *key)
{
    if (j->need_comma[j->depth])
        fputc(',', j->f);
    j->need_comma[j->depth] = 1;
    if (key) {
        write_string(j->f, key);
        fputc(':', j->f);
    }
}

static void open_scope(tr_json *j, const char *key, char bracket)
{
    write_key(j, key);
    fputc(bracket, j->f);
    if (j->depth < 31)
        j->depth++;
    j->need_comma[j->depth] = 0;
}

void tr_json_object_begin(tr_json *j, const char *key) { open_scope(j, key, '{'); }
void tr_json_array_begin(tr_json *j, const char *key) { open_scope(j, key, '['); }

void tr_json_object_end(tr_json *j)
{
    fputc('}', j->f);
    if (j->depth > 0)
        j->depth--;
}

void tr_json_array_end(tr_json *j)
{
    fputc(']', j->f);
    if (j->depth > 0)
        j->depth--;
}

void tr_json_int(tr_json *j, const char *key, long long v)
{
    write_key(j, key);
    fprintf(j->f, "%lld", v);
}

void tr_json_double(tr_json *j, const char *key, double v)
{
    write_key(j, key);
    if (isfinite(v))
        fprintf(j->f, "%.9g", v);
    else
        fputs("null", j->f);
}

void tr_json_string(tr_json *j, const char *key, const char *v)
{
    write_key(j, key);
    write_string(j->f, v);
}

void tr_json_bool(tr_json *j, const char *key, int v)
{
    write_key(j, key);
    fputs(v ? "true" : "false", j->f);
}

void tr_json_null(tr_json *j, const char *key)
{
    write_key(j, key);
    fputs("null", j->f);
}
