/* Learning-rate schedule: linear warm-up, then cosine/linear decay to min_lr. */
#include "train/train.h"

#include <math.h>
#include <string.h>

double tr_lr_at(const tr_training_config *t, int iteration)
{
    int warmup = t->lr_warmup_iters;
    if (warmup > 0 && iteration <= warmup)
        return t->lr * iteration / warmup;
    if (!strcmp(t->lr_decay_style, "constant"))
        return t->lr;
    int decay = t->lr_decay_iters > warmup ? t->lr_decay_iters : warmup;
    if (iteration >= decay)
        return t->min_lr;
    double ratio = (double)(iteration - warmup) / (double)(decay - warmup);
    double coeff = !strcmp(t->lr_decay_style, "linear") ? 1.0 - ratio
                                                         : 0.5 * (1.0 + cos(M_PI * ratio));
    return t->min_lr + coeff * (t->lr - t->min_lr);
}
