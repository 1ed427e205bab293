/* Fuzz target manifest: the input is the manifest.txt of a release checkpoint (a Bloom-style
 * model made at start from fixtures/bloom.yaml), read by tr_checkpoint_read_model
 * (train/checkpoint_model.c). Only "no crash, no leak" is checked. */
#include <string.h>

#include "train/train.h"
#include "fixture.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char ckpt[1024], manifest[1100];
    if (!ckpt[0]) {
        tr_config cfg;
        fz_fixture_config("bloom.yaml", NULL, 0, &cfg);
        fz_path(ckpt, sizeof ckpt, "ckpt");
        fz_make_checkpoint(&cfg, ckpt, -1);
        tr_config_free(&cfg);
        snprintf(manifest, sizeof manifest, "%s/release/manifest.txt", ckpt);
    }
    fz_write_path(manifest, data, size);
    tr_model_config m;
    int iteration;
    memset(&m, 0, sizeof m);
    FZ_IGNORE(tr_checkpoint_read_model(ckpt, &m, &iteration));
    return 0;
}
