/* Fuzz target evalregex: a Python re pattern and a text (cut at "\n@@@\n") through
 * tr_regex_compile, tr_regex_findall and tr_regex_sub (eval/regex.h), 200000 steps a call.
 * After a successful compile and match: the whole matches lie in the text in order, without
 * overlap, each group's span in the text (one a lookaround set may lie outside its match); sub's
 * text is the text without the matches. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "eval/regex.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[2];
    size_t len[2];
    fz_split(data, size, part, len, 2);
    tr_regex *re;
    if (tr_regex_compile((const char *)part[0], len[0], &re))
        return 0;
    tr_regex_set_steps(re, 200000);
    const char *text = (const char *)part[1];
    tr_regex_span *spans;
    size_t n, row = (size_t)tr_regex_groups(re) + 1, kept = 0, at = 0;
    char *sub = NULL;
    if (!tr_regex_findall(re, text, len[1], &spans, &n)) {
        for (size_t k = 0; k < n; k++) {
            const tr_regex_span *m = &spans[k * row];
            if (m->begin < at || m->end < m->begin || m->end > len[1])
                abort();
            for (size_t g = 1; g < row; g++) /* (a lookaround's group may lie outside) */
                if (m[g].begin != SIZE_MAX && (m[g].end > len[1] || m[g].end < m[g].begin))
                    abort();
            kept += m->begin - at;
            at = m->end;
        }
        kept += len[1] - at;
        if (!tr_regex_sub(re, text, len[1], "", &sub) &&
            (strlen(sub) > kept || (!memchr(text, 0, len[1]) && strlen(sub) != kept)))
            abort();
        free(sub);
        free(spans);
    }
    tr_regex_free(re);
    return 0;
}
