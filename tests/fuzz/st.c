/* Fuzz target st: one safetensors file (hf/safetensors.c). After a successful open, every
 * tensor up to 2^20 elements reads as f32 and is found again by its name. */
#include <stdlib.h>
#include <string.h>

#include "hf/hf.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fz_write("a.safetensors", data, size);
    fz_path(path, sizeof path, "a.safetensors");
    tr_st_file *f;
    if (tr_st_open(path, &f)) return 0;
    for (size_t i = 0; i < tr_st_count(f); i++) {
        const tr_st_tensor *t = tr_st_at(f, i);
        const tr_st_tensor *found = tr_st_find(f, t->name);
        if (!found || strcmp(found->name, t->name)) abort();
        if (t->numel > (1u << 20)) continue;
        /* exactly numel floats: a read past them is an ASan error */
        float *v = malloc(t->numel ? t->numel * sizeof(float) : 1);
        if (!v) abort();
        FZ_IGNORE(tr_st_read_f32(f, t, v));
        free(v);
    }
    (void)tr_st_meta(f, "format");
    tr_st_close(f);
    return 0;
}
