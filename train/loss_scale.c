/* fp16 loss scaling (training.precision fp16; Megatron's keys and its dynamic scaler): the
 * backward's seed is multiplied by the scale; the optimizer step checks the scaled gradients'
 * global norm, which every rank of the world computes alike from one all-reduce, so an
 * overflow (inf or NaN anywhere) is seen by every rank at the same iteration: the step is
 * skipped everywhere and the scale backs off; otherwise the gradients are unscaled inside
 * AdamW (grad_scale / scale) and, after loss_scale_window clean steps in a row, the scale
 * doubles. A static training.loss_scale never changes; overflowed steps are still skipped. */
#include <math.h>
#include <string.h>

#include "train/engine_internal.h"

void engine_scaler_init(engine_scaler *s, const tr_training_config *t)
{
    memset(s, 0, sizeof *s);
    s->on = !strcmp(t->precision, "fp16");
    s->dynamic = s->on && !(t->loss_scale > 0);
    s->scale = !s->on ? 1.0 : t->loss_scale > 0 ? t->loss_scale : t->initial_loss_scale;
    s->hysteresis_left = t->hysteresis;
}

int engine_scaler_update(engine_scaler *s, const tr_training_config *t, int overflow)
{
    if (!s->on)
        return 0;
    if (overflow) {
        s->skipped++;
        if (s->dynamic) {
            s->growth = 0;
            if (--s->hysteresis_left <= 0)
                s->scale = fmax(s->scale * 0.5, t->min_loss_scale);
        }
        return 1;
    }
    /* (>=: a run resumed with a shorter window than the one its checkpoint counted against
     * grows at its first clean step; == never grew again) */
    if (s->dynamic && ++s->growth >= t->loss_scale_window) {
        s->growth = 0;
        s->hysteresis_left = t->hysteresis;
        s->scale *= 2.0;
    }
    return 0;
}
