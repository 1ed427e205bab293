/* Fuzz target pt: one pytorch_model.bin (hf/torch_bin.c: a torch.save ZIP archive or a legacy
 * file, its pickle run under the allowlist). After a successful open, every tensor up to 2^20
 * elements reads (as f32 where its dtype is a float) and is found again by its name, inside the
 * file. */
#include <stdlib.h>
#include <string.h>

#include "hf/hf.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fz_write("pytorch_model.bin", data, size);
    fz_path(path, sizeof path, "pytorch_model.bin");
    tr_st_file *f;
    if (tr_pt_open(path, &f)) return 0;
    for (size_t i = 0; i < tr_st_count(f); i++) {
        const tr_st_tensor *t = tr_st_at(f, i);
        const tr_st_tensor *found = tr_st_find(f, t->name);
        if (!found || strcmp(found->name, t->name)) abort();
        if (t->end < t->begin || t->end > size) abort();
        if (t->end - t->begin != t->numel * tr_st_dtype_size(t->dtype)) abort();
        if (t->numel > (1u << 20)) continue;
        /* exactly the tensor's bytes or floats: a read past them is an ASan error */
        int is_float = t->dtype == TR_ST_F32 || t->dtype == TR_ST_F16 || t->dtype == TR_ST_BF16 ||
                       t->dtype == TR_ST_F64;
        size_t n = is_float ? t->numel * sizeof(float) : (size_t)(t->end - t->begin);
        void *v = malloc(n ? n : 1);
        if (!v) abort();
        if (is_float ? tr_st_read_f32(f, t, v) : tr_st_read(f, t, v)) abort();
        free(v);
    }
    tr_st_close(f);
    return 0;
}
