/* llm.c's GPT-2 model file <-> trident (hf/llmc.h states the format and the contract). */
#include "hf/llmc.h"
#include "hf/hf_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "train/train.h"

#define LLMC_MAGIC 20240326
#define LLMC_HEADER_BYTES 1024
#define LLMC_VOCAB_MULTIPLE 128 /* train_gpt2.py's pad_vocab */

typedef struct {
    int maxT, V, L, NH, C, Vp;
} llmc_dims;

/* The 16 tensors in file order: llm.c's name, trident's (per layer: after "layers.N."), whether
 * stacked over layers, rows (in units of C; 0: the vocabulary or the positions) and columns. */
static const struct {
    const char *llmc, *trident;
    int layered, rows_c, cols_c;
} slots[] = {
    {"wte", "wte", 0, 0, 1},
    {"wpe", "wpe", 0, 0, 1},
    {"ln1w", "ln1.weight", 1, 1, 0},
    {"ln1b", "ln1.bias", 1, 1, 0},
    {"qkvw", "qkv.weight", 1, 3, 1},
    {"qkvb", "qkv.bias", 1, 3, 0},
    {"attprojw", "attn_proj.weight", 1, 1, 1},
    {"attprojb", "attn_proj.bias", 1, 1, 0},
    {"ln2w", "ln2.weight", 1, 1, 0},
    {"ln2b", "ln2.bias", 1, 1, 0},
    {"fcw", "fc.weight", 1, 4, 1},
    {"fcb", "fc.bias", 1, 4, 0},
    {"fcprojw", "fc_proj.weight", 1, 1, 4},
    {"fcprojb", "fc_proj.bias", 1, 1, 0},
    {"lnfw", "lnf.weight", 0, 1, 0},
    {"lnfb", "lnf.bias", 0, 1, 0},
};
enum { N_SLOTS = sizeof slots / sizeof slots[0], QKVW = 4, QKVB = 5 };

/* Rows and columns of one layer's slice of slot k (wte: all Vp rows). */
static void slot_shape(const llmc_dims *d, int k, uint64_t *rows, uint64_t *cols)
{
    uint64_t C = (uint64_t)d->C;
    *rows = k == 0 ? (uint64_t)d->Vp : k == 1 ? (uint64_t)d->maxT : slots[k].rows_c * C;
    *cols = slots[k].cols_c ? slots[k].cols_c * C : 1;
}

/* Elements of the whole file's tensors, and where slot k's layer l starts (elements). */
static uint64_t slot_start(const llmc_dims *d, int k, int l)
{
    uint64_t at = 0, rows, cols;
    for (int j = 0; j <= k; j++) {
        slot_shape(d, j, &rows, &cols);
        at += (j < k ? (slots[j].layered ? (uint64_t)d->L : 1) : (uint64_t)l) * rows * cols;
    }
    return at;
}

/* Trident's tensor of slot k, layer l (l unused for the unlayered). */
static const tr_param_tensor *find_tensor(tr_gpt *g, int k, int l)
{
    char name[96];
    if (slots[k].layered)
        snprintf(name, sizeof name, "layers.%d.%s", l, slots[k].trident);
    else
        snprintf(name, sizeof name, "%s", slots[k].trident);
    for (int i = 0; i < tr_gpt_num_tensors(g); i++)
        if (!strcmp(tr_gpt_tensor(g, i)->name, name))
            return tr_gpt_tensor(g, i);
    tr_fail(TR_ERR_INTERNAL, "the GPT-2 model has no tensor '%s'", name);
    return NULL;
}

/* The model section of d's GPT-2. */
static void model_of(const llmc_dims *d, tr_model_config *m)
{
    *m = (tr_model_config){.num_layers = d->L, .hidden_size = d->C,
                           .num_attention_heads = d->NH, .vocab_size = d->V,
                           .max_position_embeddings = d->maxT, .layernorm_epsilon = 1e-5};
}

/* ------------------------------------------------------------------ import */

/* The header's sizes, each checked; the file's size the one they give. */
static int read_header(FILE *f, const char *path, uint64_t size, llmc_dims *d, int *version)
{
    int32_t h[256];
    if (size < LLMC_HEADER_BYTES || fread(h, 1, sizeof h, f) != sizeof h)
        return tr_fail(TR_ERR_INVALID, "%s: %llu bytes, shorter than llm.c's model header (256 "
                       "int32, 1024 bytes): not an llm.c model checkpoint", path,
                       (unsigned long long)size);
    static const struct {
        int32_t magic;
        const char *what;
    } others[] = {{20240520, "llm.c's token shard (a dataset file)"},
                  {20240328, "llm.c's tokenizer file (gpt2_tokenizer.bin)"},
                  {20240327, "llm.c's debug state (gpt2_124M_debug_state.bin)"}};
    for (size_t i = 0; h[0] != LLMC_MAGIC && i < sizeof others / sizeof others[0]; i++)
        if (h[0] == others[i].magic)
            return tr_fail(TR_ERR_INVALID, "%s: magic %d is %s, not a model checkpoint (magic "
                           "%d)", path, (int)h[0], others[i].what, LLMC_MAGIC);
    if (h[0] != LLMC_MAGIC)
        return tr_fail(TR_ERR_INVALID, "%s: magic %d: not an llm.c model checkpoint (magic %d)",
                       path, (int)h[0], LLMC_MAGIC);
    if (h[1] != 3 && h[1] != 5)
        return tr_fail(TR_ERR_INVALID, "%s: version %d: llm.c's model checkpoints are version 3 "
                       "(fp32) or 5 (bf16), both with the padded vocabulary; write it again with "
                       "llm.c's train_gpt2.py", path, (int)h[1]);
    static const struct {
        const char *name;
        int32_t limit;
    } sizes[] = {{"maxT (header[2], max sequence length)", 1 << 24},
                 {"V (header[3], vocabulary)", 1 << 28},
                 {"L (header[4], layers)", 1 << 16},
                 {"NH (header[5], heads)", 1 << 16},
                 {"C (header[6], channels)", 1 << 20},
                 {"Vp (header[7], padded vocabulary)", 1 << 28}};
    for (int i = 0; i < 6; i++)
        if (h[2 + i] < 1 || h[2 + i] > sizes[i].limit)
            return tr_fail(TR_ERR_INVALID, "%s: %s is %d: must be in [1, %d]", path,
                           sizes[i].name, (int)h[2 + i], (int)sizes[i].limit);
    *d = (llmc_dims){.maxT = h[2], .V = h[3], .L = h[4], .NH = h[5], .C = h[6], .Vp = h[7]};
    *version = h[1];
    if (d->C % d->NH)
        return tr_fail(TR_ERR_INVALID, "%s: C (channels) %d is not a multiple of NH (heads) %d",
                       path, d->C, d->NH);
    if (d->V > d->Vp)
        return tr_fail(TR_ERR_INVALID, "%s: V (vocabulary) %d is above Vp (padded vocabulary) "
                       "%d", path, d->V, d->Vp);
    /* sizes within the limits: the elements fit 64 bits (< 2^57) */
    uint64_t n = slot_start(d, N_SLOTS - 1, 0) + (uint64_t)d->C;
    uint64_t want = LLMC_HEADER_BYTES + n * (*version == 3 ? 4u : 2u);
    if (size != want)
        return tr_fail(TR_ERR_INVALID, "%s: %llu bytes; its header (maxT %d, V %d, L %d, NH %d, "
                       "C %d, Vp %d, %s) gives %llu (1024 + %llu parameters of %d bytes)%s",
                       path, (unsigned long long)size, d->maxT, d->V, d->L, d->NH, d->C, d->Vp,
                       *version == 3 ? "fp32" : "bf16", (unsigned long long)want,
                       (unsigned long long)n, *version == 3 ? 4 : 2,
                       size < want ? ": truncated" : ": bytes after the last tensor");
    return TR_OK;
}

/* n values at element `at` of the file (after the header) as floats into out, each finite. */
static int read_values(FILE *f, const char *path, int bf16, uint64_t at, size_t n, float *out,
                       const char *what, int layer)
{
    size_t es = bf16 ? 2 : 4;
    uint16_t *h = (uint16_t *)out; /* bf16: the first half of out, widened from the end */
    if (fseeko(f, (off_t)(LLMC_HEADER_BYTES + at * es), SEEK_SET) ||
        fread(bf16 ? (void *)h : (void *)out, es, n, f) != n)
        return tr_fail(TR_ERR_IO, "%s: cannot read %s: %s", path, what,
                       ferror(f) ? strerror(errno) : "unexpected end of file");
    for (size_t i = n; bf16 && i-- > 0;)
        out[i] = tr_bf16_to_f32(h[i]);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(out[i])) {
            char where[32] = "";
            if (layer >= 0)
                snprintf(where, sizeof where, " of layer %d", layer);
            return tr_fail(TR_ERR_INVALID, "%s: %s%s holds %g at element %zu: weights must be "
                           "finite", path, what, where, (double)out[i], i);
        }
    return TR_OK;
}

/* Every trident tensor from the file. buf: qkvw's floats. */
static int read_tensors(FILE *f, const char *path, const llmc_dims *d, int bf16, tr_gpt *g,
                        float *params, float *buf)
{
    int rc = TR_OK;
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    for (int k = 0; k < N_SLOTS && !rc; k++)
        for (int l = 0; l < (slots[k].layered ? d->L : 1) && !rc; l++) {
            const tr_param_tensor *t = find_tensor(g, k, l);
            if (!t)
                return TR_ERR_INTERNAL;
            uint64_t rows, cols;
            slot_shape(d, k, &rows, &cols);
            rows = k == 0 ? (uint64_t)d->V : rows; /* wte's real rows */
            size_t n = (size_t)(rows * cols);
            if (n != t->numel)
                return tr_fail(TR_ERR_INTERNAL, "%s: %zu elements, trident's %s %zu",
                               slots[k].llmc, n, t->name, t->numel);
            float *dst = params + t->offset;
            int permute = k == QKVW || k == QKVB;
            rc = read_values(f, path, bf16, slot_start(d, k, l), n, permute ? buf : dst,
                             slots[k].llmc, slots[k].layered ? l : -1);
            for (uint64_t r = 0; !rc && permute && r < rows; r++)
                memcpy(dst + hf_fused_qkv_row(r, s) * cols, buf + r * cols,
                       cols * sizeof(float));
        }
    return rc;
}

int tr_llmc_import(const char *file, const char *ckpt_dir, tr_model_config *model,
                   tr_llmc_info *info)
{
    struct stat st;
    errno = 0;
    FILE *f = fopen(file, "rb");
    if (!f || fstat(fileno(f), &st)) {
        int rc = tr_fail(errno == ENOENT ? TR_ERR_INVALID : TR_ERR_IO, "cannot open %s: %s", file,
                         strerror(errno));
        if (f)
            fclose(f);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        fclose(f);
        return tr_fail(TR_ERR_INVALID, "%s is not a file: --from llmc reads llm.c's model "
                       "checkpoint (gpt2_124M.bin, model_NNNNNNNN.bin)", file);
    }
    llmc_dims d = {0};
    int version = 0;
    tr_model_config m = {0};
    tr_gpt *g = NULL;
    float *params = NULL, *buf = NULL;
    hf_out_dir o;
    int rc = read_header(f, file, (uint64_t)st.st_size, &d, &version);
    if (!rc) {
        model_of(&d, &m);
        rc = hf_whole_model(&m, TR_HF_GPT2, &g, &params);
    }
    uint64_t most = 3 * (uint64_t)d.C * (uint64_t)d.C; /* qkvw's rows, permuted */
    if (!rc && !(buf = malloc(most * sizeof(float) + 1)))
        rc = tr_fail(TR_ERR_NOMEM, "out of memory for a tensor of %llu floats",
                     (unsigned long long)most);
    if (!rc)
        rc = read_tensors(f, file, &d, version == 5, g, params, buf);
    fclose(f);
    free(buf);
    if (!rc && !(rc = hf_out_begin(ckpt_dir, &o)))
        rc = hf_out_end(&o, tr_checkpoint_save_model(o.tmp, g, params));
    tr_gpt_free(g);
    free(params);
    if (!rc && model)
        *model = m;
    if (!rc && info)
        *info = (tr_llmc_info){.version = version, .padded_vocab = d.Vp};
    return rc;
}

/* ------------------------------------------------------------------ export */

/* The checkpoint's model is one llm.c computes: GPT-2 with its epsilon. */
static int check_model(const char *ckpt_dir, const tr_model_config *m)
{
    int family = m->normalization ? tr_hf_family_of(m) : TR_HF_GPT2;
    if (family != TR_HF_GPT2)
        return tr_fail(TR_ERR_INVALID, "%s: the checkpoint's model is %s: llm.c's file holds a "
                       "GPT-2 (LayerNorm, learned positions, a tanh-GELU MLP of 4 x hidden, "
                       "biases, the head tied to wte)", ckpt_dir,
                       family < 0 ? "of no family trident exports" : tr_hf_family_name(family));
    if ((float)m->layernorm_epsilon != 1e-5f)
        return tr_fail(TR_ERR_INVALID, "%s: model.layernorm_epsilon is %g: llm.c's GPT-2 "
                       "LayerNorm uses 1e-5", ckpt_dir, m->layernorm_epsilon);
    return TR_OK;
}

/* One layer's slice of slot k written in llm.c's layout, fp32 or bf16 (finite: the
 * checkpoint's load refuses anything else); buf: scratch of the slice's floats. */
static int write_slice(FILE *f, const char *path, tr_gpt *g, const float *params, int k, int l,
                       int bf16, float *buf)
{
    const tr_param_tensor *t = find_tensor(g, k, l);
    if (!t)
        return TR_ERR_INTERNAL;
    const tr_gpt_shape *s = tr_gpt_get_shape(g);
    size_t cols = (size_t)t->full_cols, rows = t->numel / cols;
    const float *src = params + t->offset;
    if (k == QKVW || k == QKVB) {
        for (size_t r = 0; r < rows; r++)
            memcpy(buf + r * cols, src + hf_fused_qkv_row(r, s) * cols, cols * sizeof(float));
        src = buf;
    }
    char name[64];
    snprintf(name, sizeof name, slots[k].layered ? "%s of layer %d" : "%s", slots[k].llmc, l);
    int rc = TR_OK;
    if (bf16 && src != buf)
        memcpy(buf, src, t->numel * sizeof(float));
    if (bf16 && !(rc = hf_bf16_in_place(buf, t->numel, name)))
        src = buf;
    if (!rc && fwrite(src, bf16 ? 2 : 4, t->numel, f) != t->numel)
        rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return rc;
}

/* Header and tensors of g into path. */
static int write_file(const char *path, tr_gpt *g, const float *params, const llmc_dims *d,
                      int bf16)
{
    int32_t h[256] = {LLMC_MAGIC, bf16 ? 5 : 3, d->maxT, d->V, d->L, d->NH, d->C, d->Vp};
    uint64_t most = 0, rows, cols;
    for (int k = 0; k < N_SLOTS; k++) {
        slot_shape(d, k, &rows, &cols);
        most = rows * cols > most ? rows * cols : most;
    }
    float *buf = malloc(most * sizeof(float) + 1);
    errno = 0;
    FILE *f = buf ? fopen(path, "wb") : NULL;
    int rc = !buf ? tr_fail(TR_ERR_NOMEM, "out of memory for a tensor of %llu floats",
                            (unsigned long long)most)
             : !f ? tr_fail(TR_ERR_IO, "cannot create %s: %s", path, strerror(errno))
             : fwrite(h, sizeof h, 1, f) != 1 ? tr_fail(TR_ERR_IO, "cannot write %s", path)
                                               : TR_OK;
    for (int k = 0; k < N_SLOTS && !rc; k++) {
        for (int l = 0; l < (slots[k].layered ? d->L : 1) && !rc; l++)
            rc = write_slice(f, path, g, params, k, l, bf16, buf);
        if (!rc && k == 0) { /* wte's padding rows */
            size_t pad = (size_t)(d->Vp - d->V) * (size_t)d->C;
            memset(buf, 0, pad * 4 + 1);
            if (fwrite(buf, bf16 ? 2 : 4, pad, f) != pad)
                rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        }
    }
    if (f && !rc && (fflush(f) || fsync(fileno(f))))
        rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (f && fclose(f) && !rc)
        rc = tr_fail(TR_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    free(buf);
    return rc;
}

/* path's folder (".", "/" or the part before the last slash) into dir. */
static void parent_of(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, cap, ".");
    else
        snprintf(dir, cap, "%.*s", slash == path ? 1 : (int)(slash - path), path);
}

int tr_llmc_export(const char *ckpt_dir, const char *file, int bf16, int *iteration,
                   tr_llmc_info *info)
{
    tr_model_config m = {0};
    int it = 0, rc = tr_checkpoint_read_model(ckpt_dir, &m, &it);
    if (!rc)
        rc = check_model(ckpt_dir, &m);
    char tmp[4200], parent[4200];
    struct stat st;
    if (!rc && snprintf(tmp, sizeof tmp, "%s.tmp-%ld", file, (long)getpid()) >= (int)sizeof tmp)
        rc = tr_fail(TR_ERR_INVALID, "output '%s': too long a path", file);
    if (!rc && !lstat(file, &st))
        rc = tr_fail(TR_ERR_INVALID, "output %s exists (nothing is overwritten: remove it or "
                     "choose another)", file);
    tr_gpt *g = NULL;
    float *params = NULL;
    if (!rc)
        rc = hf_whole_model(&m, TR_HF_GPT2, &g, &params);
    if (!rc)
        rc = tr_checkpoint_load_model(ckpt_dir, g, tr_kernels_cpu(), params, &it);
    llmc_dims d = {.maxT = m.max_position_embeddings, .V = m.vocab_size, .L = m.num_layers,
                   .NH = m.num_attention_heads, .C = m.hidden_size};
    d.Vp = (int)(((int64_t)d.V + LLMC_VOCAB_MULTIPLE - 1) / LLMC_VOCAB_MULTIPLE *
                 LLMC_VOCAB_MULTIPLE);
    parent_of(file, parent, sizeof parent);
    if (!rc)
        rc = tr_make_dirs(parent);
    if (!rc) {
        rc = write_file(tmp, g, params, &d, bf16);
        if (!rc && rename(tmp, file))
            rc = tr_fail(TR_ERR_IO, "cannot rename %s to %s: %s", tmp, file, strerror(errno));
        if (!rc)
            rc = hf_sync_dir(parent);
        if (rc)
            unlink(tmp);
    }
    tr_gpt_free(g);
    free(params);
    if (!rc && iteration)
        *iteration = it;
    if (!rc && info)
        *info = (tr_llmc_info){.version = bf16 ? 5 : 3, .padded_vocab = d.Vp};
    return rc;
}
