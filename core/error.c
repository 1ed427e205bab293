/* Thread-local error message behind tr_fail()/tr_errmsg(). */
#include "core.h"

#include <string.h>

static _Thread_local char error_message[2048];

int tr_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    return code;
}

int tr_fail_context(int code, const char *fmt, ...)
{
    char prefix[512], old[sizeof error_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, error_message, sizeof old);
    size_t plen = strlen(prefix), olen = strlen(old), cap = sizeof error_message - 1;
    if (plen > cap)
        plen = cap;
    memcpy(error_message, prefix, plen);
    size_t pos = plen;
    if (pos + 2 <= cap) {
        memcpy(error_message + pos, ": ", 2);
        pos += 2;
    }
    if (olen > cap - pos)
        olen = cap - pos;
    memcpy(error_message + pos, old, olen);
    error_message[pos + olen] = '\0';
    return code;
}

const char *tr_errmsg(void) { return error_message[0] ? error_message : "no error message"; }

void tr_clear_error(void) { error_message[0] = '\0'; }
