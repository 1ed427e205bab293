/* Replays inputs through a fuzz target without libFuzzer (fuzz.h): every regular file of each
 * directory argument (sorted by name) and every file argument, one call each. Prints the count
 * at the end; with -v also each file and the library's last error message after it. A crash,
 * abort or sanitizer report ends the run (the test fails); so does an empty corpus (a corpus
 * folder that went missing). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "fuzz.h"

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_file(const char *path, int verbose)
{
    size_t n;
    uint8_t *d = fz_slurp(path, &n);
    if (verbose) fprintf(stderr, "replay %s (%zu bytes)\n", path, n);
    /* an exact-size copy, so that reading past the input is an ASan error */
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) abort();
    memcpy(copy, d, n);
    free(d);
    LLVMFuzzerTestOneInput(copy, n);
    if (verbose) fprintf(stderr, "  last error: %.300s\n", tr_errmsg());
    free(copy);
    return 1;
}

static int run_dir(const char *dir, int verbose)
{
    DIR *dd = opendir(dir);
    if (!dd) {
        perror(dir);
        exit(2);
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(dd))) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = realloc(names, cap * sizeof *names);
            if (!names) abort();
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(dd);
    if (n) qsort(names, n, sizeof *names, cmp_names);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        char p[4096];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (!stat(p, &st) && S_ISREG(st.st_mode)) count += run_file(p, verbose);
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv)
{
    int verbose = 0, count = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) {
            verbose = 1;
            continue;
        }
        struct stat st;
        if (stat(argv[i], &st)) {
            perror(argv[i]);
            return 2;
        }
        count += S_ISDIR(st.st_mode) ? run_dir(argv[i], verbose) : run_file(argv[i], verbose);
    }
    printf("replayed %d inputs\n", count);
    if (!count) {
        fprintf(stderr, "no inputs: usage: %s [-v] DIR|FILE...\n", argv[0]);
        return 1;
    }
    return 0;
}
