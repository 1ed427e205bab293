/* Leveled logging to stderr. */
#include "core.h"

#include <string.h>

static const char *names[] = {"debug", "info", "warning", "error"};
static tr_log_level log_level = TR_LOG_INFO;
static int log_rank = -1;

void tr_log_set_rank(int rank) { log_rank = rank; }

int tr_log_set_level_name(const char *name)
{
    for (int l = TR_LOG_DEBUG; l <= TR_LOG_ERROR; l++)
        if (!strcmp(name, names[l])) {
            log_level = (tr_log_level)l;
            return TR_OK;
        }
    return tr_fail(TR_ERR_INVALID, "log level '%s': expected debug, info, warning or error", name);
}

void tr_log(tr_log_level level, const char *fmt, ...)
{
    if (level < log_level)
        return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (log_rank >= 0)
        fprintf(stderr, "trident %s [rank %d]: %s\n", names[level], log_rank, line);
    else
        fprintf(stderr, "trident %s: %s\n", names[level], line);
}
