/* Fuzz target yaml: config text through tr_config_load_string (yaml/). A config that loads
 * must write (tr_config_write), load again from what was written and compare equal. */
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"
#include "yaml/config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)fz_dir(); /* log level */
    tr_config c;
    if (tr_config_load_string((const char *)data, size, "fuzz.yaml", NULL, 0, &c)) return 0;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f || tr_config_write(&c, f)) abort();
    fclose(f);
    tr_config c2;
    if (tr_config_load_string(text, len, "written.yaml", NULL, 0, &c2)) {
        fprintf(stderr, "a written config does not load: %s\n%s", tr_errmsg(), text);
        abort();
    }
    if (!tr_config_equal(&c, &c2)) {
        fprintf(stderr, "the config differs after a write and a load:\n%s", text);
        abort();
    }
    tr_config_free(&c2);
    tr_config_free(&c);
    free(text);
    return 0;
}
