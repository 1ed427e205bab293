/* For tests/train/test_rampup.py: the schedule trident computes for a config, without
 * training. usage: rampup_probe CONFIG [SECTION.KEY=VALUE ...]
 * Prints "iterations N", then one line per iteration "ITERATION BATCH CONSUMED LR": its
 * global batch (Megatron's of the samples consumed before it), the samples consumed after it
 * and its LR (tr_lr_of_step, no step skipped), as the engine's step computes them. */
#include <stdio.h>

#include "train/train.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: rampup_probe CONFIG [SECTION.KEY=VALUE ...]\n");
        return 2;
    }
    tr_config c;
    if (tr_config_load(argv[1], (const char *const *)argv + 2, argc - 2, &c)) {
        fprintf(stderr, "rampup_probe: %s\n", tr_errmsg());
        return 2;
    }
    const tr_training_config *t = &c.training;
    long long n = tr_training_iterations(t);
    uint64_t consumed = 0;
    printf("iterations %lld\n", n);
    for (long long it = 1; it <= n; it++) {
        int batch = tr_training_batch_at(t, consumed);
        consumed += (uint64_t)batch;
        printf("%lld %d %llu %.17g\n", it, batch, (unsigned long long)consumed,
               tr_lr_of_step(t, (int)it, consumed));
    }
    tr_config_free(&c);
    return 0;
}
