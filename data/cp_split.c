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

int tr_cp_doc_starts(const int32_t *segments, const int32_t *positions, int B, int T, int cp,
                     int rank, int32_t *starts)
{
    int c = T / (2 * cp), Tl = T / cp;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < 2; h++)
            for (int i = 0, q0 = tr_cp_chunk(cp, rank, h) * c; i < c; i++) {
                int n = b * Tl + h * c + i, s = q0 + i - positions[n];
                int same = i > 0 && segments[n] == segments[n - 1];
                if (s < 0 || (same ? s != starts[n - 1] : i > 0 && positions[n] != 0))
                    return n;
                starts[n] = s;
            }
    return -1;
}
