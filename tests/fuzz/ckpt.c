/* Fuzz target ckpt: a whole checkpoint (train/checkpoint.c). At start, two training steps of
 * fixtures/ckpt.yaml are saved as iteration 2 and one engine of that config is made; each input
 * replaces or patches one or two of the checkpoint's files (fz_fixture_apply: byte 1, 2 pick
 * the files: 0 the tracker, then the iteration folder's files by name) and the engine loads
 * it. After a successful load the parameters and Adam's moments are finite and exp_avg_sq is
 * not negative. */
#include <stdio.h>
#include <stdlib.h>

#include "train/checkpoint_internal.h"
#include "train/engine_internal.h"
#include "train/train.h"
#include "fixture.h"
#include "fuzz.h"

static fz_fixture x;
static tr_config cfg;
static tr_engine *e;

/* The engine holds communicator resources (UCX) that LeakSanitizer would report at exit. */
static void free_engine(void)
{
    tr_engine_free(e);
    tr_config_free(&cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!e) {
        char dir[1024];
        fz_fixture_config("ckpt.yaml", NULL, 0, &cfg);
        fz_path(dir, sizeof dir, "ckpt");
        fz_make_checkpoint(&cfg, dir, 2);
        fz_fixture_init(&x, dir);
        fz_must(tr_engine_create(&cfg, &e), "engine");
        atexit(free_engine);
    }
    fz_fixture_restore(&x);
    fz_fixture_apply(&x, data, size);
    int iteration = -1;
    if (tr_checkpoint_load(e, x.root, &iteration)) return 0;
    if (getenv("FUZZ_VERBOSE")) fprintf(stderr, "loaded iteration %d\n", iteration);
    fz_check_finite("params", e->params, e->n_params, 0);
    size_t shard = tr_dp_shard_numel(e->dp);
    fz_check_finite("exp_avg", e->adam_m, shard, 0);
    fz_check_finite("exp_avg_sq", e->adam_v, shard, 1);
    return 0;
}
