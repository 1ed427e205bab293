/* cuda.h's tr_cuda_check_switches: the backend's TRIDENT_CUDA_* switches and the values each
 * takes. Pure (no CUDA): tested in every build (tests/cuda/test_cuda_host.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/cuda/cuda.h"

extern char **environ;

/* name (after TRIDENT_CUDA_), its values ('|'-separated; the default first), or "" for any
 * text, or "N" for a positive integer; an empty value is the default for every switch */
static const struct {
    const char *name, *values;
} switches[] = {
    {"ACTIVATIONS", "bf16|fp32"},
    {"ATTENTION", "mma|wmma|cudnn|cudnn-forward|cudnn-backward|cudnn-nondeterministic"},
    {"ATTENTION_BWD", "split|fused"},
    {"ATTENTION_IN", "bf16|fp32"},
    {"ATTENTION_KV", "32|64"},
    {"ATTENTION_OUT", "bf16|fp32"},
    {"EPILOGUE", "1|0"},
    {"GELU", "epilogue|separate"},
    {"GEMM", "staged|fast"},
    {"GEMM_CHOICES", ""}, /* a file, or none */
    {"GEMM_KEYS", ""},    /* a file to write */
    {"HEAD", "bf16|fp32"},
    {"HOME", ""}, /* the toolkit's folder, for scripts/gpu_check_cuda.py */
    {"NORM_BACKWARD", "fused|two-pass"},
    {"STAGING_MIB", "N"},
    {"XENT", "fused|two-pass"},
};

/* 1 when value is one of the '|'-separated values */
static int one_of(const char *value, const char *values)
{
    size_t n = strlen(value);
    for (const char *v = values; *v;) {
        const char *bar = strchr(v, '|');
        size_t len = bar ? (size_t)(bar - v) : strlen(v);
        if (len == n && !strncmp(v, value, n))
            return 1;
        v += len + (bar != NULL);
    }
    return 0;
}

static int positive_integer(const char *value)
{
    char *end;
    long n = strtol(value, &end, 10);
    return *value >= '0' && *value <= '9' && !*end && n > 0 && n <= (1L << 20);
}

static int check_one(const char *entry)
{
    static const char prefix[] = "TRIDENT_CUDA_";
    if (strncmp(entry, prefix, sizeof prefix - 1))
        return TR_OK;
    const char *name = entry + sizeof prefix - 1, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const char *value = eq ? eq + 1 : "";
    for (size_t i = 0; i < sizeof switches / sizeof *switches; i++) {
        if (strlen(switches[i].name) != len || strncmp(switches[i].name, name, len))
            continue;
        const char *values = switches[i].values;
        if (!*value) /* (NAME= : the shell's way to unset it for one command) the default */
            return TR_OK;
        if (!strcmp(values, "N") ? positive_integer(value) : !*values || one_of(value, values))
            return TR_OK;
        return tr_fail(TR_ERR_CONFIG, "cuda: %.*s=%s: it takes %s", (int)(len + sizeof prefix - 1),
                       entry, value,
                       !strcmp(values, "N") ? "a positive number (MiB)" : values);
    }
    char known[512] = "";
    for (size_t i = 0; i < sizeof switches / sizeof *switches; i++) {
        size_t used = strlen(known);
        snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "", switches[i].name);
    }
    return tr_fail(TR_ERR_CONFIG, "cuda: %.*s is not a switch of the CUDA backend (TRIDENT_CUDA_ "
                                  "followed by one of: %s)",
                   (int)(len + sizeof prefix - 1), entry, known);
}

int tr_cuda_check_switches(char *const *envp)
{
    for (char *const *e = envp ? envp : environ; e && *e; e++) {
        int rc = check_one(*e);
        if (rc)
            return rc;
    }
    return TR_OK;
}
