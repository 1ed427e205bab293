/* model/ internals shared by gpt.c, gpt_forward.c and gpt_backward.c. Not part of the
 * contract. */
#ifndef TR_GPT_INTERNAL_H
#define TR_GPT_INTERNAL_H

#include "model/gpt.h"

/* Tensors of one transformer layer, in forward (= parameter buffer) order. */
enum {
    L_LN1_W, L_LN1_B, L_QKV_W, L_QKV_B, L_ATTPROJ_W, L_ATTPROJ_B,
    L_LN2_W, L_LN2_B, L_FC_W, L_FC_B, L_FCPROJ_W, L_FCPROJ_B, L_COUNT
};

/* Saved activations of one layer for one micro-batch. */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; /* (BT,C), (BT), (BT) */
    float *qkv;                       /* (BT, 3C) */
    float *atty;                      /* (BT, C) */
    float *att;                       /* (B, NH, T, T) */
    float *residual2;                 /* (BT, C) = input + attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* (BT,C), (BT), (BT) */
    float *fch, *fch_gelu;            /* (BT, 4C) */
    float *residual3;                 /* (BT, C) = layer output */
} tr_layer_acts;

struct tr_gpt_acts {
    tr_gpt *g;
    int B;
    float *memory;      /* one allocation, everything below points into it */
    int32_t *tokens;    /* (BT) first stage */
    float *stage_in;    /* (BT, C): embeddings (first stage) or the received hidden state */
    tr_layer_acts *layers;
    float *dhead;       /* (BT, C) last stage: gradient of the last layer's output */
    float *dinput;      /* (BT, C) not first: gradient of the stage input */
};

/* Scratch shared by all micro-batches (used only inside one forward or backward call). */
typedef struct {
    int B;
    float *memory;
    int32_t *targets;                       /* (BT) */
    float *lnf, *lnf_mean, *lnf_rstd;       /* (BT, C), (BT), (BT) */
    float *logits, *dlogits;                /* (BT, Vp) */
    float *maxv, *sumexp, *picked, *losses; /* (BT) */
    float *dres;                            /* (BT, C) */
    float *dln;                             /* (BT, C) */
    float *dqkv;                            /* (BT, 3C) */
    float *datty;                           /* (BT, C) */
    float *datt;                            /* (B, NH, T, T) */
    float *dfch, *dfch_gelu;                /* (BT, 4C) */
} tr_gpt_scratch;

struct tr_gpt {
    tr_gpt_shape s;
    const tr_kernels *k;
    tr_param_tensor *tensors;
    int n_tensors;
    size_t n_params;
    /* indices into tensors; -1 where this stage does not hold it */
    int wte, wpe, lnf_w, lnf_b, head_wte;
    int layer0; /* index of the first layer tensor; layer i tensor j = layer0 + i*L_COUNT + j */
    tr_gpt_scratch scratch;
    float *losses_host; /* (BT) */
};

static inline float *layer_param(tr_gpt *g, int layer, int which)
{
    return g->tensors[g->layer0 + layer * L_COUNT + which].param;
}

static inline float *layer_grad(tr_gpt *g, int layer, int which)
{
    return g->tensors[g->layer0 + layer * L_COUNT + which].grad;
}

/* y (N, OC) = x (N, IC) @ W^T (W: OC x IC) + b, with beta = 1 to accumulate into y. */
void tr_linear_forward(tr_gpt *g, float *y, const float *x, const float *W, const float *b,
                       int N, int IC, int OC, float beta);
/* dx (N, IC) = dy @ W (overwrites; skipped if dx NULL); dW += dy^T @ x; db += colsum(dy). */
void tr_linear_backward(tr_gpt *g, float *dx, float *dW, float *db, const float *dy,
                        const float *x, const float *W, int N, int IC, int OC);

int tr_gpt_scratch_ensure(tr_gpt *g, int B);

#endif
