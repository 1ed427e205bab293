/* Megatron-LM's batch-size ramp-up and sample-based iteration count, as pure functions of
 * the training section (megatron/core/num_microbatches_calculator.py's
 * RampupBatchsizeNumMicroBatchesCalculator.update and training.py's update_train_iters). */
#include "yaml/config.h"

int tr_training_batch_at(const tr_training_config *t, uint64_t consumed)
{
    if (t->n_rampup_batch_size != 3)
        return t->global_batch_size;
    int start = t->rampup_batch_size[0], incr = t->rampup_batch_size[1];
    uint64_t ramp = (uint64_t)t->rampup_batch_size[2];
    int increments = (t->global_batch_size - start) / incr;
    if (consumed > ramp || increments < 1)
        return t->global_batch_size;
    /* Megatron: steps = int(consumed / (ramp / increments)), both divisions in float64 */
    double per_increment = (double)ramp / (double)increments;
    long long steps = (long long)((double)consumed / per_increment);
    long long b = start + steps * (long long)incr;
    return b < t->global_batch_size ? (int)b : t->global_batch_size;
}

long long tr_training_iterations(const tr_training_config *t)
{
    if (!tr_training_by_samples(t))
        return t->train_iters;
    long long global = t->global_batch_size, samples = (long long)t->train_samples;
    if (t->n_rampup_batch_size != 3)
        return samples / global;
    /* the ramp: one iteration per batch while the samples consumed before it are <= ramp
     * (Megatron's loop, taken a plateau at a time: the batch b stays while consumed + j b is
     * <= ramp and gives b, monotone in j, so the last such j is found by doubling and halving;
     * the cost is the number of batch sizes, not of iterations) */
    long long ramp = t->rampup_batch_size[2], iterations = 0, consumed = 0;
    while (consumed <= ramp) {
        long long b = tr_training_batch_at(t, (uint64_t)consumed), lo = 0, hi = 1;
#define SAME(j) (consumed + (j) * b <= ramp && tr_training_batch_at(t, (uint64_t)(consumed + (j) * b)) == b)
        while (SAME(hi))
            lo = hi, hi *= 2;
        while (hi - lo > 1) { /* SAME(lo), !SAME(hi) */
            long long mid = lo + (hi - lo) / 2;
            if (SAME(mid))
                lo = mid;
            else
                hi = mid;
        }
#undef SAME
        iterations += lo + 1;
        consumed += (lo + 1) * b;
    }
    /* then whole final batches of what is left (Python's floor division: negative when
     * train_samples ends inside the ramp) */
    long long left = samples - consumed;
    long long q = left / global;
    if (left % global && left < 0)
        q--;
    return iterations + q;
}
