/* Learning-rate schedule, Megatron-LM's: linear warm-up from lr_warmup_init (default 0) over
 * lr_warmup_iters (or lr_warmup_fraction of lr_decay_iters), then the decay style until
 * lr_decay_iters, min_lr after; sample-based training (training.train_samples) the same in
 * samples (lr_warmup_samples, lr_decay_samples, lr_wsd_decay_samples), counted as Megatron's
 * scheduler counts them: each successful step adds its global batch.
 *   cosine / linear: min_lr + coeff (lr - min_lr), coeff from the decay ratio
 *     r = (it - warmup) / (decay - warmup): 0.5 (1 + cos(pi r)) or 1 - r;
 *   constant: lr throughout (after the warm-up);
 *   inverse-square-root: lr sqrt(max(warmup, 1) / it), at least min_lr;
 *   WSD (warmup-stable-decay): lr until the last lr_wsd_decay_iters iterations before
 *     lr_decay_iters, then annealed over them by lr_wsd_decay_style with the anneal ratio
 *     a in (0, 1]: exponential 2 * 0.5^a - 1, linear 1 - a, cosine 0.5 (1 + cos(pi a)),
 *     minus_sqrt 1 - sqrt(a). */
#include "train/train.h"

#include <math.h>
#include <string.h>

/* WSD's coefficient at anneal ratio a. */
static double wsd_coeff(const char *style, double a)
{
    if (!strcmp(style, "linear"))
        return 1.0 - a;
    if (!strcmp(style, "cosine"))
        return 0.5 * (1.0 + cos(M_PI * a));
    if (!strcmp(style, "minus_sqrt"))
        return 1.0 - sqrt(a);
    return 2.0 * pow(0.5, a) - 1.0; /* exponential */
}

/* Megatron's OptimizerParamScheduler.get_lr at num_steps `n`, the lengths in the same unit
 * (iterations, or samples): warm-up while n <= warmup, min_lr past the decay (n > decay). */
static double lr_schedule(const tr_training_config *t, double n, double warmup, double decay,
                          double wsd)
{
    if (warmup > 0 && n <= warmup)
        return t->lr_warmup_init + (t->lr - t->lr_warmup_init) * n / warmup;
    if (!strcmp(t->lr_decay_style, "constant"))
        return t->lr;
    if (decay < warmup)
        decay = warmup;
    if (n > decay)
        return t->min_lr;
    if (!strcmp(t->lr_decay_style, "inverse-square-root")) {
        double lr = t->lr * sqrt(warmup > 1 ? warmup : 1) / sqrt(n > 1 ? n : 1);
        return lr > t->min_lr ? lr : t->min_lr;
    }
    if (n == decay) /* every other style's coefficient is 0 there (cos(pi) = -1 exactly) */
        return t->min_lr;
    double coeff;
    if (!strcmp(t->lr_decay_style, "WSD")) {
        double anneal_start = decay - wsd;
        coeff = n <= anneal_start || wsd <= 0
                    ? 1.0
                    : wsd_coeff(t->lr_wsd_decay_style ? t->lr_wsd_decay_style : "exponential",
                                (n - anneal_start) / wsd);
    } else {
        double ratio = (n - warmup) / (decay - warmup);
        coeff = !strcmp(t->lr_decay_style, "linear") ? 1.0 - ratio
                                                     : 0.5 * (1.0 + cos(M_PI * ratio));
    }
    return t->min_lr + coeff * (t->lr - t->min_lr);
}

double tr_lr_at(const tr_training_config *t, int iteration)
{
    return lr_schedule(t, iteration, tr_training_warmup(t), t->lr_decay_iters,
                       t->lr_wsd_decay_iters);
}

double tr_lr_at_samples(const tr_training_config *t, uint64_t samples)
{
    return lr_schedule(t, (double)samples, tr_training_warmup_samples(t),
                       tr_training_decay_samples(t), (double)t->lr_wsd_decay_samples);
}

double tr_lr_of_step(const tr_training_config *t, int step, uint64_t samples)
{
    return tr_training_by_samples(t) ? tr_lr_at_samples(t, samples) : tr_lr_at(t, step);
}
