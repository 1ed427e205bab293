/* Context parallelism's split of each sample into the rank's two chunks (data/data.h). */
#include "data/data.h"

#include <string.h>

void tr_cp_keep(void *rows, size_t size, int B, int T, int cp, int rank)
{
    char *r = rows;
    size_t c = (size_t)(T / (2 * cp)), Tl = (size_t)(T / cp);
    /* every destination lies at or before its source and after every earlier source, so the
     * pieces move forward in order without overwriting one still to be read */
    for (size_t b = 0; b < (size_t)B; b++)
        for (int h = 0; h < 2; h++)
            memmove(r + (b * Tl + (size_t)h * c) * size,
                    r + (b * (size_t)T + (size_t)tr_cp_chunk(cp, rank, h) * c) * size, c * size);
}

void tr_cp_keep_chunks(int32_t *rows, int B, int T, int cp, int rank)
{
    tr_cp_keep(rows, sizeof *rows, B, T, cp, rank);
}
