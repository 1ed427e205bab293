/* Checks that involve more than one key (single-key ranges and names are checked while
 * converting). Each message points at the key the user most likely set. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "yaml/config_internal.h"

#define bad config_bad
#define set_at config_set_at

int config_bad(const tr_config *c, const char *k1, const char *k2, const char *fmt, ...)
{
    const char *key = !config_find_mark(c, k1) && k2 && config_find_mark(c, k2) ? k2 : k1;
    char loc[1200], what[800];
    snprintf(loc, sizeof loc, "%s", tr_config_where(c, key));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tr_fail(TR_ERR_CONFIG, "%s: %s", loc, what);
}

const char *config_set_at(const tr_config *c, const char *key, char *buf, size_t cap)
{
    if (config_find_mark(c, key))
        snprintf(buf, cap, " (set at %s)", tr_config_where(c, key));
    else
        snprintf(buf, cap, " (default)");
    return buf;
}

/* "a multiple of d: e.g. lo or hi" for a value v that is not one. */
static const char *multiples(int v, int d, char *buf, size_t cap)
{
    long lo = (long)v / d * d, hi = lo + d;
    if (lo > 0)
        snprintf(buf, cap, "e.g. %ld or %ld", lo, hi);
    else
        snprintf(buf, cap, "e.g. %ld", hi);
    return buf;
}

static int check_model_and_tp(const tr_config *c)
{
    const tr_model_config *m = &c->model;
    int tp = c->parallel.tensor_model_parallel_size;
    char at[1300], eg[64];
    if (!m->kv_channels && m->hidden_size % m->num_attention_heads)
        return bad(c, "model.hidden_size", "model.num_attention_heads",
                   "model.hidden_size = %d is not a multiple of model.num_attention_heads = %d%s; "
                   "hidden_size must be divisible by num_attention_heads (%s), or "
                   "model.kv_channels set to the head size",
                   m->hidden_size, m->num_attention_heads,
                   set_at(c, "model.num_attention_heads", at, sizeof at),
                   multiples(m->hidden_size, m->num_attention_heads, eg, sizeof eg));
    if (m->hidden_size % tp)
        return bad(c, "parallel.tensor_model_parallel_size", "model.hidden_size",
                   "parallel.tensor_model_parallel_size = %d does not divide model.hidden_size = "
                   "%d%s; tensor parallelism splits hidden_size evenly",
                   tp, m->hidden_size, set_at(c, "model.hidden_size", at, sizeof at));
    if (m->num_attention_heads % tp)
        return bad(c, "parallel.tensor_model_parallel_size", "model.num_attention_heads",
                   "parallel.tensor_model_parallel_size = %d does not divide "
                   "model.num_attention_heads = %d%s; each tensor-parallel rank holds whole heads",
                   tp, m->num_attention_heads,
                   set_at(c, "model.num_attention_heads", at, sizeof at));
    if (m->max_position_embeddings < m->seq_length)
        return bad(c, "model.max_position_embeddings", "model.seq_length",
                   "model.max_position_embeddings = %d is less than model.seq_length = %d%s; "
                   "allowed: max_position_embeddings >= seq_length",
                   m->max_position_embeddings, m->seq_length,
                   set_at(c, "model.seq_length", at, sizeof at));
    if (m->sliding_window && m->sliding_window < m->seq_length)
        return bad(c, "model.sliding_window", "model.seq_length",
                   "model.sliding_window = %d is less than model.seq_length = %d%s; trident's "
                   "attention is full causal, which is the model's windowed attention only over "
                   "sequences no longer than the window: allowed: seq_length <= sliding_window",
                   m->sliding_window, m->seq_length,
                   set_at(c, "model.seq_length", at, sizeof at));
    return TR_OK;
}

/* The model family's switches (Llama, Bloom): each combination either works or is named. */
static int check_family(const tr_config *c)
{
    const tr_model_config *m = &c->model;
    int tp = c->parallel.tensor_model_parallel_size, heads = m->num_attention_heads;
    int groups = m->num_query_groups, ffn = tr_model_ffn_hidden(m);
    int rope = !strcmp(m->position_embedding_type, "rope");
    char at[1300];
    if (heads % groups)
        return bad(c, "model.num_query_groups", "model.num_attention_heads",
                   "model.num_query_groups = %d does not divide model.num_attention_heads = %d%s; "
                   "each query group shares one key/value head among an equal number of query "
                   "heads", groups, heads, set_at(c, "model.num_attention_heads", at, sizeof at));
    if (groups % tp)
        return bad(c, "parallel.tensor_model_parallel_size", "model.num_query_groups",
                   "parallel.tensor_model_parallel_size = %d does not divide "
                   "model.num_query_groups = %d%s; each tensor-parallel rank holds whole query "
                   "groups (their key/value heads)", tp, groups,
                   set_at(c, "model.num_query_groups", at, sizeof at));
    if (m->swiglu && m->geglu)
        return bad(c, "model.geglu", "model.swiglu",
                   "model.geglu and model.swiglu are both true%s; the gated MLP has one "
                   "activation: allowed: at most one of them",
                   set_at(c, "model.swiglu", at, sizeof at));
    if (m->relu && (m->swiglu || m->geglu))
        return bad(c, "model.relu", m->geglu ? "model.geglu" : "model.swiglu",
                   "model.relu and model.%s are both true%s; the MLP has one activation: "
                   "allowed: relu with swiglu and geglu false", m->geglu ? "geglu" : "swiglu",
                   set_at(c, m->geglu ? "model.geglu" : "model.swiglu", at, sizeof at));
    if (ffn < 1)
        return bad(c, "model.ffn_hidden_size", m->geglu ? "model.geglu" : "model.swiglu",
                   "model.%s with hidden_size %d gives Megatron's default MLP width "
                   "int(8h/3 / 64) x 64 = 0; set model.ffn_hidden_size",
                   m->geglu ? "geglu" : "swiglu", m->hidden_size);
    if (ffn % tp)
        return bad(c, "parallel.tensor_model_parallel_size", "model.ffn_hidden_size",
                   "parallel.tensor_model_parallel_size = %d does not divide the MLP width "
                   "model.ffn_hidden_size = %d%s; tensor parallelism splits it evenly",
                   tp, ffn, set_at(c, "model.ffn_hidden_size", at, sizeof at));
    if (m->output_layer_bias && !m->untie_embeddings_and_output_weights)
        return bad(c, "model.output_layer_bias", "model.untie_embeddings_and_output_weights",
                   "model.output_layer_bias is true but the output layer is the word embedding "
                   "(untie_embeddings_and_output_weights false%s): allowed: output_layer_bias "
                   "with untie_embeddings_and_output_weights true",
                   set_at(c, "model.untie_embeddings_and_output_weights", at, sizeof at));
    if (m->parallel_shared_norm && !m->parallel_residual)
        return bad(c, "model.parallel_shared_norm", "model.parallel_residual",
                   "model.parallel_shared_norm is true but model.parallel_residual is false%s; "
                   "one norm feeds both branches only of a parallel residual: allowed: "
                   "parallel_shared_norm with parallel_residual true",
                   set_at(c, "model.parallel_residual", at, sizeof at));
    if (m->swiglu && !strcmp(m->gelu_approximate, "none"))
        return bad(c, "model.gelu_approximate", "model.swiglu",
                   "model.gelu_approximate is 'none' but model.swiglu is true%s; the SwiGLU MLP "
                   "has no GELU: allowed: gelu_approximate with swiglu false",
                   set_at(c, "model.swiglu", at, sizeof at));
    /* a value other than the default (a written config carries the defaults) */
    const char *rope_keys[] = {"model.rotary_base", "model.rotary_percent",
                               "model.rotary_seq_len_interpolation_factor",
                               "model.use_rope_scaling"};
    int changed[] = {m->rotary_base != 10000.0, m->rotary_percent != 1.0,
                     m->rotary_seq_len_interpolation_factor != 1.0, m->use_rope_scaling};
    for (int i = 0; i < 4; i++)
        if (!rope && changed[i])
            return bad(c, rope_keys[i], NULL,
                       "%s is set but model.position_embedding_type is '%s'%s; rotary settings "
                       "need position_embedding_type: rope", rope_keys[i],
                       m->position_embedding_type,
                       set_at(c, "model.position_embedding_type", at, sizeof at));
    if (m->use_rope_scaling && m->rotary_seq_len_interpolation_factor != 1.0)
        return bad(c, "model.use_rope_scaling", "model.rotary_seq_len_interpolation_factor",
                   "model.use_rope_scaling is true and model.rotary_seq_len_interpolation_factor "
                   "is %g%s; one rope scaling at a time: Llama 3.1's frequency scaling or the "
                   "linear position interpolation", m->rotary_seq_len_interpolation_factor,
                   set_at(c, "model.rotary_seq_len_interpolation_factor", at, sizeof at));
    if (m->use_rope_scaling &&
        !(m->rope_scaling_high_freq_factor > m->rope_scaling_low_freq_factor))
        return bad(c, "model.rope_scaling_high_freq_factor", "model.rope_scaling_low_freq_factor",
                   "model.rope_scaling_high_freq_factor = %g is not above "
                   "model.rope_scaling_low_freq_factor = %g%s; the scaling blends the "
                   "wavelengths between original / high and original / low",
                   m->rope_scaling_high_freq_factor, m->rope_scaling_low_freq_factor,
                   set_at(c, "model.rope_scaling_low_freq_factor", at, sizeof at));
    /* Phi-3's layer is a Llama's: RMSNorm, rope over whole heads, SwiGLU, no linear biases */
    int phi3 = m->hf_family && !strcmp(m->hf_family, "phi3");
    if (phi3 && (strcmp(m->normalization, "RMSNorm") || !rope || m->rotary_percent != 1.0 ||
                 !m->swiglu || m->add_bias_linear || m->add_qkv_bias))
        return bad(c, "model.hf_family", NULL,
                   "model.hf_family is 'phi3' but the model is not a Llama's layer%s; allowed: "
                   "phi3 with normalization RMSNorm, position_embedding_type rope, "
                   "rotary_percent 1, swiglu true, add_bias_linear and add_qkv_bias false",
                   set_at(c, "model.hf_family", at, sizeof at));
    if (rope) {
        int hs = tr_model_head_size(m);
        double dims = hs * m->rotary_percent;
        int rot = (int)dims;
        if (rot != dims || rot < 2 || rot % 2)
            return bad(c, "model.rotary_percent", "model.position_embedding_type",
                       "model.rotary_percent = %g of the head size %d gives %g rotated "
                       "dimensions; allowed: an even whole number >= 2 (rotary pairs)",
                       m->rotary_percent, hs, dims);
    }
    return TR_OK;
}

static int check_pipeline(const tr_config *c)
{
    const tr_parallel_config *p = &c->parallel;
    int pp = p->pipeline_model_parallel_size, vpp = p->virtual_pipeline_model_parallel_size;
    int layers = c->model.num_layers;
    int interleaved = !strcmp(p->pipeline_schedule, "interleaved");
    char at[1300];
    if (layers < pp)
        return bad(c, "parallel.pipeline_model_parallel_size", "model.num_layers",
                   "parallel.pipeline_model_parallel_size = %d is more than model.num_layers = "
                   "%d%s; each pipeline stage needs at least one layer",
                   pp, layers, set_at(c, "model.num_layers", at, sizeof at));
    if (p->num_pipeline_layers > 0) {
        long sum = 0;
        for (int i = 0; i < p->num_pipeline_layers; i++)
            sum += p->pipeline_layers[i];
        if (p->num_pipeline_layers != pp)
            return bad(c, "parallel.pipeline_layers", NULL,
                       "parallel.pipeline_layers has %d entries but "
                       "parallel.pipeline_model_parallel_size = %d%s; allowed: one entry (a "
                       "layer count) per pipeline stage, or [] for an even split",
                       p->num_pipeline_layers, pp,
                       set_at(c, "parallel.pipeline_model_parallel_size", at, sizeof at));
        if (sum != layers)
            return bad(c, "parallel.pipeline_layers", NULL,
                       "parallel.pipeline_layers sums to %ld but model.num_layers = %d%s; the "
                       "stages must hold every layer exactly once",
                       sum, layers, set_at(c, "model.num_layers", at, sizeof at));
    }
    if (vpp > 1 && !interleaved)
        return bad(c, "parallel.virtual_pipeline_model_parallel_size", "parallel.pipeline_schedule",
                   "parallel.virtual_pipeline_model_parallel_size = %d with pipeline_schedule "
                   "'%s'; virtual stages need pipeline_schedule: interleaved",
                   vpp, p->pipeline_schedule);
    if (interleaved) {
        if (vpp < 2 || pp < 2)
            return bad(c, "parallel.pipeline_schedule",
                       "parallel.virtual_pipeline_model_parallel_size",
                       "pipeline_schedule 'interleaved' with pipeline_model_parallel_size = %d "
                       "and virtual_pipeline_model_parallel_size = %d; interleaving needs both "
                       ">= 2",
                       pp, vpp);
        for (int i = 0; i < p->num_pipeline_layers; i++)
            if (p->pipeline_layers[i] % vpp)
                return bad(c, "parallel.pipeline_layers", NULL,
                           "parallel.pipeline_layers[%d] = %d is not a multiple of "
                           "virtual_pipeline_model_parallel_size = %d; each stage splits its "
                           "layers into that many chunks",
                           i, p->pipeline_layers[i], vpp);
        if (p->num_pipeline_layers == 0 && layers % (pp * vpp))
            return bad(c, "model.num_layers", "parallel.virtual_pipeline_model_parallel_size",
                       "model.num_layers = %d is not divisible by pipeline_model_parallel_size x "
                       "virtual_pipeline_model_parallel_size = %d x %d; the interleaved schedule "
                       "gives every chunk the same number of layers",
                       layers, pp, vpp);
    }
    return TR_OK;
}

static int check_training(const tr_config *c)
{
    const tr_training_config *t = &c->training;
    char at[1300], eg[64];
    if (t->global_batch_size % t->micro_batch_size)
        return bad(c, "training.global_batch_size", "training.micro_batch_size",
                   "training.global_batch_size = %d is not a multiple of "
                   "training.micro_batch_size = %d%s; allowed: a multiple (%s)",
                   t->global_batch_size, t->micro_batch_size,
                   set_at(c, "training.micro_batch_size", at, sizeof at),
                   multiples(t->global_batch_size, t->micro_batch_size, eg, sizeof eg));
    if (t->min_lr > t->lr)
        return bad(c, "training.min_lr", "training.lr",
                   "training.min_lr = %g is greater than training.lr = %g%s; allowed: min_lr <= "
                   "lr",
                   t->min_lr, t->lr, set_at(c, "training.lr", at, sizeof at));
    if (t->lr_warmup_fraction > 0 && t->lr_warmup_iters > 0)
        return bad(c, "training.lr_warmup_fraction", "training.lr_warmup_iters",
                   "training.lr_warmup_fraction = %g and training.lr_warmup_iters = %d%s both give "
                   "the warm-up; allowed: one of them", t->lr_warmup_fraction, t->lr_warmup_iters,
                   set_at(c, "training.lr_warmup_iters", at, sizeof at));
    if (t->lr_warmup_init > t->lr)
        return bad(c, "training.lr_warmup_init", "training.lr",
                   "training.lr_warmup_init = %g is greater than training.lr = %g%s; allowed: "
                   "lr_warmup_init <= lr", t->lr_warmup_init, t->lr,
                   set_at(c, "training.lr", at, sizeof at));
    int wsd = !strcmp(t->lr_decay_style, "WSD") && !tr_training_by_samples(t);
    int warmup = (int)ceil(tr_training_warmup(t));
    int stable_from = t->lr_decay_iters > warmup ? t->lr_decay_iters - warmup : 0;
    if (wsd && t->lr_wsd_decay_iters < 1)
        return bad(c, "training.lr_decay_style", NULL,
                   "training.lr_decay_style = WSD needs training.lr_wsd_decay_iters, the "
                   "iterations of the anneal that ends at lr_decay_iters = %d; allowed: 1 to %d",
                   t->lr_decay_iters, stable_from);
    if (wsd && t->lr_wsd_decay_iters > stable_from)
        return bad(c, "training.lr_wsd_decay_iters", NULL,
                   "training.lr_wsd_decay_iters = %d is more than the %d iterations from the end "
                   "of the warm-up (%d iterations) to lr_decay_iters = %d; allowed: 1 to %d",
                   t->lr_wsd_decay_iters, stable_from, warmup, t->lr_decay_iters, stable_from);
    if (t->min_loss_scale > t->initial_loss_scale)
        return bad(c, "training.min_loss_scale", "training.initial_loss_scale",
                   "training.min_loss_scale = %g is greater than training.initial_loss_scale = "
                   "%g%s; allowed: min_loss_scale <= initial_loss_scale",
                   t->min_loss_scale, t->initial_loss_scale,
                   set_at(c, "training.initial_loss_scale", at, sizeof at));
    if (t->eval_interval > 0 && t->eval_iters < 1)
        return bad(c, "training.eval_iters", "training.eval_interval",
                   "training.eval_iters = 0 with training.eval_interval = %d; allowed: "
                   "eval_iters >= 1 when evaluating (or eval_interval: 0)",
                   t->eval_interval);
    return TR_OK;
}

/* Where the loader puts a missing key of `section`: the section, or the file's start. */
static const char *missing_at(const tr_config *c, const char *section, char *loc, size_t cap)
{
    if (config_find_mark(c, section))
        snprintf(loc, cap, "%s", tr_config_where(c, section));
    else
        snprintf(loc, cap, "%s:1:1", c->source ? c->source : "<config>");
    return loc;
}

/* Iteration- or sample-based training, as Megatron's validate_args allows them: train_iters
 * or train_samples (one); the other kind's LR keys and the batch ramp-up refused. */
static int check_length(const tr_config *c)
{
    const tr_training_config *t = &c->training;
    char at[1300];
    if (!t->train_iters && !t->train_samples) {
        char loc[1200];
        return tr_fail(TR_ERR_CONFIG, "%s: missing required key training.train_iters; add it to "
                       "section 'training' (an integer >= 1), or training.train_samples for "
                       "sample-based training", missing_at(c, "training", loc, sizeof loc));
    }
    if (t->train_iters && t->train_samples)
        return bad(c, "training.train_samples", "training.train_iters",
                   "training.train_samples = %llu and training.train_iters = %d%s both give the "
                   "run's length; allowed: one of them (Megatron: iteration- or sample-based)",
                   (unsigned long long)t->train_samples, t->train_iters,
                   set_at(c, "training.train_iters", at, sizeof at));
    struct { const char *key; int set; } by_samples[] = {
        {"training.lr_decay_samples", t->lr_decay_samples > 0},
        {"training.lr_warmup_samples", t->lr_warmup_samples > 0},
        {"training.lr_wsd_decay_samples", t->lr_wsd_decay_samples > 0},
        {"training.rampup_batch_size", t->n_rampup_batch_size > 0}};
    struct { const char *key; int set; } by_iters[] = {
        {"training.lr_decay_iters", t->lr_decay_iters > 0},
        {"training.lr_warmup_iters", t->lr_warmup_iters > 0},
        {"training.lr_wsd_decay_iters", t->lr_wsd_decay_iters > 0}};
    if (t->train_iters) {
        for (int i = 0; i < 4; i++)
            if (by_samples[i].set)
                return bad(c, by_samples[i].key, NULL,
                           "%s is for sample-based training, but training.train_iters = %d%s "
                           "makes this run iteration-based; allowed: train_samples instead of "
                           "train_iters, or the iteration keys (Megatron refuses the mix)%s",
                           by_samples[i].key, t->train_iters,
                           set_at(c, "training.train_iters", at, sizeof at),
                           i == 3 ? "; a batch-size ramp-up needs train_samples" : "");
        if (t->lr_decay_iters < 1)
            return bad(c, "training.lr_decay_iters", NULL,
                       "training.lr_decay_iters = 0; allowed: an integer >= 1 (default "
                       "train_iters)");
        return TR_OK;
    }
    for (int i = 0; i < 3; i++)
        if (by_iters[i].set)
            return bad(c, by_iters[i].key, NULL,
                       "%s is for iteration-based training, but training.train_samples = %llu%s "
                       "makes this run sample-based; allowed: the *_samples keys (Megatron "
                       "refuses the mix)", by_iters[i].key, (unsigned long long)t->train_samples,
                       set_at(c, "training.train_samples", at, sizeof at));
    if (t->lr_warmup_fraction > 0 && t->lr_warmup_samples > 0)
        return bad(c, "training.lr_warmup_fraction", "training.lr_warmup_samples",
                   "training.lr_warmup_fraction = %g and training.lr_warmup_samples = %llu%s both "
                   "give the warm-up; allowed: one of them", t->lr_warmup_fraction,
                   (unsigned long long)t->lr_warmup_samples,
                   set_at(c, "training.lr_warmup_samples", at, sizeof at));
    if (t->n_rampup_batch_size) {
        const int *r = t->rampup_batch_size;
        int g = t->global_batch_size;
        if (t->n_rampup_batch_size != 3)
            return bad(c, "training.rampup_batch_size", NULL,
                       "training.rampup_batch_size has %d entries; allowed: [start, increment, "
                       "ramp samples] (Megatron's --rampup-batch-size)", t->n_rampup_batch_size);
        if (r[0] >= g)
            return bad(c, "training.rampup_batch_size", "training.global_batch_size",
                       "training.rampup_batch_size starts at %d, not below "
                       "training.global_batch_size = %d%s; allowed: a start below the global "
                       "batch the ramp grows to (without a ramp: drop the key)", r[0], g,
                       set_at(c, "training.global_batch_size", at, sizeof at));
        if ((g - r[0]) % r[1])
            return bad(c, "training.rampup_batch_size", "training.global_batch_size",
                       "training.rampup_batch_size: global_batch_size - start = %d - %d = %d is "
                       "not a multiple of the increment %d%s; the ramp reaches the global batch "
                       "in whole increments (Megatron's rule)", g, r[0], g - r[0], r[1],
                       set_at(c, "training.global_batch_size", at, sizeof at));
        if (r[0] % t->micro_batch_size || r[1] % t->micro_batch_size)
            return bad(c, "training.rampup_batch_size", "training.micro_batch_size",
                       "training.rampup_batch_size: the %s %d is not a multiple of "
                       "training.micro_batch_size = %d%s; every batch of the ramp is whole "
                       "micro-batches", r[0] % t->micro_batch_size ? "start" : "increment",
                       r[0] % t->micro_batch_size ? r[0] : r[1], t->micro_batch_size,
                       set_at(c, "training.micro_batch_size", at, sizeof at));
    }
    long long iters = tr_training_iterations(t);
    if (iters < 1 || iters > INT_MAX)
        return bad(c, "training.train_samples", NULL,
                   "training.train_samples = %llu gives %lld iterations (Megatron's count%s); "
                   "allowed: 1 to %d iterations", (unsigned long long)t->train_samples, iters,
                   t->n_rampup_batch_size ? ": the ramp-up's, then whole global batches of the "
                                            "rest" : ": train_samples / global_batch_size",
                   INT_MAX);
    /* the LR schedule in samples (Megatron's OptimizerParamScheduler asserts) */
    double decay = tr_training_decay_samples(t), warmup = tr_training_warmup_samples(t);
    if (!(warmup < decay))
        return bad(c, t->lr_warmup_fraction > 0 ? "training.lr_warmup_fraction"
                                                : "training.lr_warmup_samples",
                   "training.lr_decay_samples",
                   "the warm-up of %.17g samples is not shorter than the decay's %.17g "
                   "(lr_decay_samples, default train_samples); allowed: warm-up < decay", warmup,
                   decay);
    if (!strcmp(t->lr_decay_style, "WSD")) {
        double room = decay - warmup;
        if (t->lr_wsd_decay_samples < 1 || (double)t->lr_wsd_decay_samples > room)
            return bad(c, t->lr_wsd_decay_samples ? "training.lr_wsd_decay_samples"
                                                  : "training.lr_decay_style", NULL,
                       "training.lr_decay_style = WSD needs training.lr_wsd_decay_samples, the "
                       "samples of the anneal that ends at the decay's %.17g, from 1 to the %.17g "
                       "after the warm-up (got %llu)", decay, room,
                       (unsigned long long)t->lr_wsd_decay_samples);
    }
    return TR_OK;
}

/* The data lists (one source of samples, each list a valid blend) and the tokenizer's files. */
static int check_data(const tr_config *c)
{
    const tr_data_config *d = &c->data;
    if (!d->n_data_path && !d->n_train_data_path) {
        char loc[1200];
        return tr_fail(TR_ERR_CONFIG, "%s: missing required key data.data_path; add it to section "
                       "'data' (a dataset prefix, or Megatron's blend [0.3, prefixA, 0.7, prefixB]; "
                       "or data.train_data_path with valid_data_path / test_data_path)",
                       missing_at(c, "data", loc, sizeof loc));
    }
    if (d->n_data_path && (d->n_train_data_path || d->n_valid_data_path || d->n_test_data_path))
        return bad(c, "data.train_data_path", "data.data_path", "data.data_path and data.train_data_path"
                   " / valid_data_path / test_data_path exclude each other (Megatron's rule): give "
                   "either one list cut by data.split, or a list per split");
    struct { const char *key; char **list; int n; } lists[] = {
        {"data.data_path", d->data_path, d->n_data_path},
        {"data.train_data_path", d->train_data_path, d->n_train_data_path},
        {"data.valid_data_path", d->valid_data_path, d->n_valid_data_path},
        {"data.test_data_path", d->test_data_path, d->n_test_data_path}};
    for (int i = 0; i < 4; i++) {
        const char **paths = NULL;
        double *w = NULL;
        int n = 0;
        if (!lists[i].n)
            continue;
        int rc = tr_config_blend(lists[i].list, lists[i].n, &paths, &w, &n);
        free(paths);
        free(w);
        if (rc) {
            char msg[600];
            snprintf(msg, sizeof msg, "%s", tr_errmsg());
            return bad(c, lists[i].key, NULL, "%s: %s", lists[i].key, msg);
        }
    }
    if (!strcmp(d->dataset_type, "sft")) { /* one SFT prefix (and its loss mask) */
        if (!d->n_data_path)
            return bad(c, "data.train_data_path", "data.dataset_type", "data.dataset_type sft takes "
                       "data.data_path (one prefix, cut by data.split), not per-split lists");
        if (d->n_data_path != 1)
            return bad(c, "data.data_path", NULL, "data.dataset_type sft takes one dataset prefix "
                       "in data.data_path (no blend), got a list of %d", d->n_data_path);
        if (!strcmp(d->data_format, "llmc"))
            return bad(c, "data.data_format", "data.dataset_type", "data.dataset_type sft reads "
                       "Megatron indexed datasets (PREFIX and PREFIX_loss_mask), not llm.c shards");
    } else if (!d->sft_packing) { /* (true, the default, is what config.yaml writes back) */
        return bad(c, "data.sft_packing", NULL, "data.sft_packing false is for data.dataset_type "
                   "sft (dataset_type is %s)", d->dataset_type);
    }
    int type = !strcmp(d->tokenizer_type, "GPT2BPETokenizer") ? 1
               : !strcmp(d->tokenizer_type, "HFTokenizer") ||
                       !strcmp(d->tokenizer_type, "Llama2Tokenizer") ||
                       !strcmp(d->tokenizer_type, "GPTSentencePieceTokenizer") ||
                       !strcmp(d->tokenizer_type, "TikTokenizer") ||
                       !strcmp(d->tokenizer_type, "Llama3Tokenizer") ? 2 : 0;
    int tik = !strcmp(d->tokenizer_type, "TikTokenizer");
    if (tik && !strcmp(d->tiktoken_pattern, "none"))
        return bad(c, "data.tokenizer.type", NULL, "data.tokenizer.type TikTokenizer needs "
                   "data.tokenizer.tiktoken_pattern v1 or v2");
    if (!tik && strcmp(d->tiktoken_pattern, "none"))
        return bad(c, "data.tokenizer.tiktoken_pattern", NULL, "data.tokenizer.tiktoken_pattern is "
                   "for data.tokenizer.type TikTokenizer");
    if (!tik && d->tiktoken_vocab_size)
        return bad(c, "data.tokenizer.tiktoken_vocab_size", NULL, "data.tokenizer."
                   "tiktoken_vocab_size is for data.tokenizer.type TikTokenizer");
    if (!tik && d->n_tiktoken_special_tokens)
        return bad(c, "data.tokenizer.tiktoken_special_tokens", NULL, "data.tokenizer."
                   "tiktoken_special_tokens is for data.tokenizer.type TikTokenizer");
    struct { const char *key, *value; int needed; } files[] = {
        {"data.tokenizer.vocab_file", d->vocab_file, type == 1},
        {"data.tokenizer.merge_file", d->merge_file, type == 1},
        {"data.tokenizer.model", d->tokenizer_model, type == 2}};
    for (int i = 0; i < 3; i++) {
        if (files[i].needed && !files[i].value[0])
            return bad(c, "data.tokenizer.type", NULL, "data.tokenizer.type %s needs %s",
                       d->tokenizer_type, files[i].key);
        if (!files[i].needed && files[i].value[0])
            return bad(c, files[i].key, NULL, "%s is not used by data.tokenizer.type %s", files[i].key,
                       d->tokenizer_type);
    }
    return TR_OK;
}

/* parallel.zero_stage against use_distributed_optimizer (stage 1's Megatron spelling): when
 * both are written they must agree (true: a stage >= 1 shards the optimizer; false: 0). */
static int check_zero(const tr_config *c)
{
    const tr_parallel_config *p = &c->parallel;
    char at[1300];
    if (config_find_mark(c, "parallel.zero_stage") &&
        config_find_mark(c, "parallel.use_distributed_optimizer") &&
        (p->use_distributed_optimizer != 0) != (p->zero_stage >= 1))
        return bad(c, "parallel.zero_stage", NULL,
                   "parallel.zero_stage = %d contradicts parallel.use_distributed_optimizer = "
                   "%s%s (true is stage 1: the optimizer sharded, as every stage >= 1 does); "
                   "set one of them", p->zero_stage, p->use_distributed_optimizer ? "true" : "false",
                   set_at(c, "parallel.use_distributed_optimizer", at, sizeof at));
    return TR_OK;
}

/* finetune.lora: known target names, each once; what is not implemented said so. */
static int check_finetune(const tr_config *c)
{
    const tr_finetune_config *f = &c->finetune;
    static const char *const names[] = {"qkv", "proj", "fc1", "fc2"};
    if (*f->load && c->parallel.zero_stage >= 3)
        return bad(c, "finetune.load", "parallel.zero_stage", "finetune.load with "
                   "parallel.zero_stage %d is not implemented; allowed: zero_stage 0-2",
                   c->parallel.zero_stage);
    if (f->lora_rank == 0) /* no adapters: the lora keys are unused */
        return TR_OK;
    for (int i = 0; i < f->n_lora_targets; i++) {
        int k = 0;
        while (k < 4 && strcmp(f->lora_targets[i], names[k]))
            k++;
        if (k == 4)
            return bad(c, "finetune.lora.target_modules", NULL, "finetune.lora.target_modules: "
                       "unknown module '%s'; allowed: qkv, proj, fc1, fc2 (attention input and "
                       "output projections, MLP input and output)", f->lora_targets[i]);
        for (int j = 0; j < i; j++)
            if (!strcmp(f->lora_targets[i], f->lora_targets[j]))
                return bad(c, "finetune.lora.target_modules", NULL, "finetune.lora.target_modules"
                           " names '%s' twice", f->lora_targets[i]);
    }
    if (c->parallel.zero_stage >= 3)
        return bad(c, "parallel.zero_stage", "finetune.lora.rank", "LoRA fine-tuning "
                   "(finetune.lora.rank %d) with parallel.zero_stage %d is not implemented; "
                   "allowed: zero_stage 0-2 (the adapters are small: stage 1 or 2 shards them)",
                   f->lora_rank, c->parallel.zero_stage);
    return TR_OK;
}

int config_validate(const tr_config *c)
{
    int rc = check_model_and_tp(c);
    if (!rc)
        rc = check_zero(c);
    if (!rc)
        rc = config_check_moe(c);
    if (!rc)
        rc = config_check_cp(c);
    if (!rc)
        rc = check_family(c);
    if (!rc)
        rc = check_pipeline(c);
    if (!rc)
        rc = check_length(c);
    if (!rc)
        rc = check_training(c);
    if (!rc)
        rc = check_data(c);
    if (!rc)
        rc = check_finetune(c);
    return rc;
}
