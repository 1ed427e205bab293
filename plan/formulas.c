/* The planner's formulas, one function each (see plan/plan.h for the derivations). */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "plan/plan.h"
#include "plan/plan_internal.h"

int tr_plan_recompute_parse(const char *s, tr_plan_recompute *out)
{
    static const char *const names[] = {"none", "selective", "full"};
    for (int i = 0; i < 3; i++)
        if (s && !strcmp(s, names[i])) {
            *out = (tr_plan_recompute)i;
            return TR_OK;
        }
    return tr_fail(TR_ERR_CONFIG, "unknown recompute mode '%s'; allowed: none, selective, full",
                   s ? s : "(null)");
}

const char *tr_plan_recompute_name(tr_plan_recompute r)
{
    switch (r) {
    case TR_PLAN_RECOMPUTE_NONE: return "none";
    case TR_PLAN_RECOMPUTE_SELECTIVE: return "selective";
    case TR_PLAN_RECOMPUTE_FULL: return "full";
    }
    return "?";
}

const char *tr_plan_link_name(tr_plan_link l)
{
    return l == TR_PLAN_LINK_INTRA ? "intra-node" : l == TR_PLAN_LINK_INTER ? "inter-node" : "none";
}

/* The family switches of m (model.* keys). A config not made by the loader (no family
 * strings set) is GPT-2, whatever its zeroed switches say. */
typedef struct {
    double h, qkv, F, fc; /* hidden; qkv rows (a + 2 groups x head size); MLP width; fc rows */
    double a;             /* the attention's width: heads x head size (h unless kv_channels) */
    int bias, qkv_bias, rms, learned, emb_ln, untie; /* qkv_bias: qkv's (with bias or alone) */
    int mlp_bias;                                    /* fc's and fc_proj's (with bias or alone) */
    int norms;                                       /* per layer: 2, or 1 (a shared norm) */
    int out_bias;                                    /* the untied output layer's bias */
    int norm_bias;                                   /* LayerNorm's bias (not RMSNorm's) */
    double E, K;                                     /* experts, experts per token (0: dense) */
} family;

static family family_of(const tr_model_config *m)
{
    family f;
    int loaded = m->normalization != NULL;
    int heads = m->num_attention_heads > 0 ? m->num_attention_heads : 1;
    int groups = m->num_query_groups > 0 ? m->num_query_groups : heads;
    double hs = loaded && m->kv_channels > 0 ? m->kv_channels : (double)m->hidden_size / heads;
    f.h = m->hidden_size;
    f.a = heads * hs;
    f.qkv = f.a + 2.0 * groups * hs;
    f.F = tr_model_ffn_hidden(m);
    f.fc = loaded && (m->swiglu || m->geglu) ? 2 * f.F : f.F;
    f.bias = !loaded || m->add_bias_linear;
    f.qkv_bias = f.bias || (loaded && m->add_qkv_bias);
    f.mlp_bias = f.bias || (loaded && m->add_mlp_bias);
    f.rms = loaded && !strcmp(m->normalization, "RMSNorm");
    f.learned = !m->position_embedding_type ||
                !strcmp(m->position_embedding_type, "learned_absolute");
    f.emb_ln = loaded && m->embedding_layernorm;
    f.untie = loaded && m->untie_embeddings_and_output_weights;
    f.norms = loaded && m->parallel_residual && m->parallel_shared_norm ? 1 : 2;
    f.out_bias = f.untie && m->output_layer_bias;
    f.norm_bias = !f.rms && (!loaded || !m->no_layernorm_bias);
    f.E = m->num_experts > 0 ? m->num_experts : 0;
    f.K = f.E > 0 ? m->moe_router_topk : 0;
    return f;
}

void tr_plan_layer_dims(const tr_model_config *m, double *qkv, double *ffn, double *fc)
{
    family f = family_of(m);
    *qkv = f.qkv;
    *ffn = f.F;
    *fc = f.fc;
}

double tr_plan_attention_width(const tr_model_config *m)
{
    return family_of(m).a;
}

/* One MLP (the dense layer's, or one expert's) on one TP rank: fc and fc_proj split over t,
 * fc's bias split, fc_proj's whole. */
static double mlp_params(const family *f, int tp)
{
    double n = (f->fc * f->h + f->F * f->h) / tp;
    return f->mlp_bias ? n + f->fc / tp + f->h : n;
}

/* GPT-2: 12h^2/t + 7h/t + 6h; in general the qkv, projection and MLP matrices split over t,
 * their column-parallel biases too, the row-parallel biases and the norms whole; with experts
 * E MLPs and the router (E, h), replicated. */
static double layer_params(const family *f, int tp)
{
    double h = f->h;
    double n = (f->qkv * h + f->a * h) / tp;
    if (f->bias) /* attn_proj's */
        n += h;
    if (f->qkv_bias)
        n += f->qkv / tp;
    n += f->E > 0 ? f->E * (mlp_params(f, tp) + h) : mlp_params(f, tp);
    return n + f->norms * (f->norm_bias ? 2.0 * h : h);
}

double plan_stage_expert_params(const tr_model_config *m, int tp, int layers)
{
    family f = family_of(m);
    return f.E > 0 ? layers * f.E * mlp_params(&f, tp) : 0;
}

double tr_plan_stage_params(const tr_model_config *m, int vocab_padded, int tp, int pp, int stage,
                            int layers)
{
    family f = family_of(m);
    double h = m->hidden_size, norm = f.norm_bias ? 2.0 * h : h;
    double n = layers * layer_params(&f, tp);
    if (stage == 0) {
        n += (double)vocab_padded * h / tp;
        if (f.learned)
            n += (double)m->max_position_embeddings * h;
        if (f.emb_ln)
            n += norm;
    }
    if (stage == pp - 1) {
        n += norm;
        if (pp > 1 || f.untie) /* the head's copy of wte, or the output layer */
            n += (double)vocab_padded * h / tp;
        if (f.out_bias)
            n += (double)vocab_padded / tp;
    }
    return n;
}

int plan_lora_target(const tr_finetune_config *ft, int k)
{
    static const char *const names[4] = {"qkv", "proj", "fc1", "fc2"};
    int on = ft->lora_rank > 0 && ft->n_lora_targets == 0;
    for (int i = 0; ft->lora_rank > 0 && i < ft->n_lora_targets && !on; i++)
        on = !strcmp(ft->lora_targets[i], names[k]);
    return on;
}

double tr_plan_stage_adapters(const tr_config *cfg, int tp, int layers)
{
    const tr_finetune_config *ft = &cfg->finetune;
    if (ft->lora_rank < 1)
        return 0;
    family f = family_of(&cfg->model);
    double r = ft->lora_rank, h = f.h, t = tp, n = 0;
    /* A + B per target: column-parallel (qkv, fc1) A whole, B split; row-parallel A split */
    double each[4] = {r * h + f.qkv * r / t, r * f.a / t + h * r, r * h + f.fc * r / t,
                      r * f.F / t + h * r};
    for (int k = 0; k < 4; k++)
        n += plan_lora_target(ft, k) ? each[k] : 0;
    return n * layers;
}

double tr_plan_model_params(const tr_model_config *m, int vocab_padded)
{
    return tr_plan_stage_params(m, vocab_padded, 1, 1, 0, m->num_layers);
}

double tr_plan_model_active_params(const tr_model_config *m, int vocab_padded)
{
    family f = family_of(m);
    double idle = f.E > 0 ? m->num_layers * (f.E - f.K) * mlp_params(&f, 1) : 0;
    return tr_plan_model_params(m, vocab_padded) - idle;
}

double tr_plan_moe_layer_bytes(const tr_model_config *m, int s, int b, int tp, int act_bytes)
{
    family f = family_of(m);
    if (f.E <= 0)
        return 0;
    double T = (double)s * b, M = f.K * T;
    return (f.K - 1) * T * (f.fc + f.F) / tp * act_bytes + 2 * M * f.h * act_bytes +
           4 * (T * f.E + T + 5 * M);
}

double tr_plan_moe_scratch_bytes(const tr_model_config *m, int s, int b, int tp)
{
    family f = family_of(m);
    if (f.E <= 0)
        return 0;
    double T = (double)s * b, M = f.K * T;
    return 4 * (2 * T * f.E + T * f.h + M * f.h + M * (f.fc + f.F) / tp + 2 * M + f.E);
}

void tr_plan_state_bytes(int bf16, int distributed_optimizer, int dp, double *weights,
                         double *grads, double *optimizer)
{
    double opt = bf16 ? 12.0 : 8.0; /* fp32 master + m + v, or m + v */
    *weights = bf16 ? 2.0 : 4.0;
    *grads = 4.0;
    *optimizer = distributed_optimizer && dp > 1 ? opt / dp : opt;
}

double tr_plan_layer_forward_flops(int s, int b, int h)
{
    double S = s, B = b, H = h;
    return 24.0 * B * S * H * H + 4.0 * B * S * S * H;
}

double tr_plan_layer_forward_flops_model(const tr_model_config *m, int s, int b)
{
    family f = family_of(m);
    double S = s, B = b, h = f.h, mlp = f.fc * h + f.F * h;
    /* with experts: k MLPs a token (the active parameters) and the router's (h, E) GEMM */
    if (f.E > 0)
        mlp = f.K * mlp + f.E * h;
    return 2.0 * B * S * (f.qkv * h + f.a * h + mlp) + 4.0 * B * S * S * f.a;
}

double tr_plan_model_flops(const tr_model_config *m, int vocab_padded, int global_batch)
{
    double s = m->seq_length, h = m->hidden_size;
    double fwd = m->num_layers * tr_plan_layer_forward_flops_model(m, m->seq_length, global_batch) +
                 2.0 * global_batch * s * h * vocab_padded;
    return 3.0 * fwd;
}

double tr_plan_hardware_flops(const tr_model_config *m, int vocab_padded, int global_batch,
                              tr_plan_recompute rc)
{
    double extra = 0, s = m->seq_length;
    if (rc == TR_PLAN_RECOMPUTE_FULL)
        extra = m->num_layers * tr_plan_layer_forward_flops_model(m, m->seq_length, global_batch);
    else if (rc == TR_PLAN_RECOMPUTE_SELECTIVE)
        extra = m->num_layers * 4.0 * global_batch * s * s * tr_plan_attention_width(m);
    return tr_plan_model_flops(m, vocab_padded, global_batch) + extra;
}

double tr_plan_allreduce_s(double bytes, int n, double bw, double latency)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * latency;
}

double tr_plan_reduce_scatter_s(double bytes, int n, double bw, double latency)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    return (double)(n - 1) / n * bytes / bw + (n - 1) * latency;
}

double tr_plan_allgather_s(double bytes, int n, double bw, double latency)
{
    return tr_plan_reduce_scatter_s(bytes, n, bw, latency);
}

double tr_plan_dp_exposed_s(double per_bucket, int n_buckets, double backward, int overlap)
{
    if (n_buckets < 1 || per_bucket <= 0)
        return 0;
    if (!overlap)
        return n_buckets * per_bucket;
    /* Buckets go one at a time: bucket k starts at max(ready_k, end of bucket k-1), so the
     * last ends at max_k (ready_k + (n - k + 1) c). */
    double end = 0;
    for (int k = 1; k <= n_buckets; k++) {
        double e = backward * k / n_buckets + (n_buckets - k + 1) * per_bucket;
        if (e > end)
            end = e;
    }
    return end > backward ? end - backward : 0;
}
