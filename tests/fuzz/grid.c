/* Fuzz target grid: a grid spec file (yaml/grid.c): its points, and the config of each of the
 * first four. Only "no crash, no leak" is checked. */
#include "yaml/config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fz_write("grid.yaml", data, size);
    fz_path(path, sizeof path, "grid.yaml");
    tr_grid_spec g;
    if (tr_grid_load(path, &g)) return 0;
    size_t n = tr_grid_num_points(&g);
    for (size_t i = 0; i < n && i < 4; i++) {
        tr_config c;
        if (!tr_grid_point_config(&g, i, NULL, 0, &c)) tr_config_free(&c);
    }
    tr_grid_free(&g);
    return 0;
}
