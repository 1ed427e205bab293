/* Learning-rate schedule, Megatron-LM's: linear warm-up from lr_warmup_init (default 0) over
 * lr_warmup_iters (or lr_warmup_fraction of lr_decay_iters), then the decay style until
 * lr_decay_iters, min_lr after.
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

double tr_lr_at(const tr_training_config *t, int iteration)
{
    double warmup = tr_training_warmup(t);
    if (warmup > 0 && iteration <= warmup)
        return t->lr_warmup_init + (t->lr - t->lr_warmup_init) * iteration / warmup;
    if (!strcmp(t->lr_decay_style, "constant"))
        return t->lr;
    double decay = t->lr_decay_iters > warmup ? t->lr_decay_iters : warmup;
    if (iteration >= decay)
        return t->min_lr;
    if (!strcmp(t->lr_decay_style, "inverse-square-root")) {
        double lr = t->lr * sqrt((warmup > 1 ? warmup : 1) /
                                 (double)(iteration > 1 ? iteration : 1));
        return lr > t->min_lr ? lr : t->min_lr;
    }
    double coeff;
    if (!strcmp(t->lr_decay_style, "WSD")) {
        double anneal_start = decay - t->lr_wsd_decay_iters;
        coeff = iteration <= anneal_start || t->lr_wsd_decay_iters < 1
                    ? 1.0
                    : wsd_coeff(t->lr_wsd_decay_style ? t->lr_wsd_decay_style : "exponential",
                                (double)(iteration - anneal_start) / t->lr_wsd_decay_iters);
    } else {
        double ratio = (iteration - warmup) / (decay - warmup);
        coeff = !strcmp(t->lr_decay_style, "linear") ? 1.0 - ratio
                                                     : 0.5 * (1.0 + cos(M_PI * ratio));
    }
    return t->min_lr + coeff * (t->lr - t->min_lr);
}
