/* Context parallelism's split of each sample into the rank's two chunks (data/data.h). */
#include "data/data.h"

#include <string.h>

void tr_cp_keep_chunks(int32_t *rows, int B, int T, int cp, int rank)
{
    int c = T / (2 * cp), Tl = T / cp;
    /* every destination lies at or before its source and after every earlier source, so the
     * pieces move forward in order without overwriting one still to be read */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < 2; h++)
            memmove(rows + (size_t)b * Tl + (size_t)h * c,
                    rows + (size_t)b * T + (size_t)tr_cp_chunk(cp, rank, h) * c,
                    (size_t)c * sizeof *rows);
}
