/* Leveled logging to stderr. */
#include "core.h"

static tr_log_level log_level = TR_LOG_INFO;
static int log_rank = -1;

void tr_log_set_level(tr_log_level level) { log_level = level; }
void tr_log_set_rank(int rank) { log_rank = rank; }

void tr_log(tr_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warning", "error"};
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
