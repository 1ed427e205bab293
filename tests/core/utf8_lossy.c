/* core's tr_utf8_lossy as a filter for test_utf8_oracle.py: stdin holds records (a 4-byte
 * little-endian length, the bytes), stdout gets each one's repaired bytes in the same framing;
 * argv[1] "subpart" (one U+FFFD a maximal ill-formed subpart) or "byte" (one a byte). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "subpart") && strcmp(argv[1], "byte"))) {
        fprintf(stderr, "usage: utf8_lossy subpart|byte < records\n");
        return 2;
    }
    int per_byte = !strcmp(argv[1], "byte");
    unsigned char head[4];
    while (fread(head, 1, 4, stdin) == 4) {
        uint32_t n = (uint32_t)head[0] | (uint32_t)head[1] << 8 | (uint32_t)head[2] << 16 |
                     (uint32_t)head[3] << 24;
        unsigned char *s = malloc(n + 1);
        size_t want = s && fread(s, 1, n, stdin) == n ? tr_utf8_lossy(s, n, per_byte, NULL) : 0;
        char *out = s ? malloc(want + 1) : NULL;
        if (!s || !out) {
            fprintf(stderr, "utf8_lossy: a short record or out of memory\n");
            return 1;
        }
        uint32_t m = (uint32_t)tr_utf8_lossy(s, n, per_byte, out);
        if (m != want) {
            fprintf(stderr, "utf8_lossy: %u bytes written, %zu counted\n", m, want);
            return 1;
        }
        unsigned char len[4] = {m & 0xFF, m >> 8 & 0xFF, m >> 16 & 0xFF, m >> 24};
        fwrite(len, 1, 4, stdout);
        fwrite(out, 1, m, stdout);
        free(s);
        free(out);
    }
    return 0;
}
