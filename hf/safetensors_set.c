/* A folder's weights: model.safetensors, or model.safetensors.index.json and its shards, or the
 * same of pytorch_model.bin, as one table of tensors by name. */
#include "hf/hf_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INDEX_NAME "model.safetensors.index.json"

typedef struct {
    const tr_st_tensor *t;
    tr_st_file *f;
} set_entry;

struct tr_st_set {
    tr_st_file **files;
    size_t n_files;
    set_entry *entries; /* sorted by name */
    size_t n;
};

void tr_st_set_close(tr_st_set *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_files; i++)
        tr_st_close(s->files[i]);
    free(s->files);
    free(s->entries);
    free(s);
}

size_t tr_st_set_count(const tr_st_set *s) { return s->n; }

const tr_st_tensor *tr_st_set_at(const tr_st_set *s, size_t i, tr_st_file **file)
{
    if (i >= s->n)
        return NULL;
    if (file)
        *file = s->entries[i].f;
    return s->entries[i].t;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const set_entry *)a)->t->name, ((const set_entry *)b)->t->name);
}

const tr_st_tensor *tr_st_set_find(const tr_st_set *s, const char *name, tr_st_file **file)
{
    tr_st_tensor t = {.name = name};
    set_entry key = {.t = &t};
    const set_entry *e = bsearch(&key, s->entries, s->n, sizeof key, cmp_entry);
    if (e && file)
        *file = e->f;
    return e ? e->t : NULL;
}

/* Add an opened file (s owns it from here, also on failure). */
static int add_file(tr_st_set *s, tr_st_file *f)
{
    tr_st_file **files = realloc(s->files, (s->n_files + 1) * sizeof *files);
    set_entry *entries = files ? realloc(s->entries, (s->n + tr_st_count(f) + 1) * sizeof *entries)
                               : NULL;
    if (files)
        s->files = files;
    if (entries)
        s->entries = entries;
    if (!files || !entries) {
        tr_st_close(f);
        return tr_fail(TR_ERR_NOMEM, "out of memory opening %s", tr_st_path(f));
    }
    s->files[s->n_files++] = f;
    for (size_t i = 0; i < tr_st_count(f); i++)
        s->entries[s->n++] = (set_entry){tr_st_at(f, i), f};
    return TR_OK;
}

static int plain_file_name(const char *name)
{
    return *name && strlen(name) < 256 && !strchr(name, '/') && strcmp(name, ".") &&
           strcmp(name, "..");
}

/* Every tensor of shard f must be in the index's weight map, for f (file name `name`). */
static int check_shard(const char *index, json_t *map, tr_st_file *f, const char *name)
{
    for (size_t i = 0; i < tr_st_count(f); i++) {
        const char *t = tr_st_at(f, i)->name;
        json_t *where = json_object_get(map, t);
        if (!where || strcmp(json_string_value(where), name))
            return tr_fail(TR_ERR_INVALID, "%s holds tensor '%.200s', which %s %s%s", tr_st_path(f),
                           t, index, where ? "places in " : "does not list",
                           where ? json_string_value(where) : "");
    }
    return TR_OK;
}

/* The shards of the index at path (folder dir) into s, each opened by open_file. */
static int open_index(tr_st_set *s, const char *dir, const char *path,
                      int (*open_file)(const char *, tr_st_file **))
{
    json_t *root = NULL;
    int rc = hf_load_json(path, TR_ST_MAX_HEADER, &root);
    if (rc)
        return rc;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(root) || !json_is_object(map))
        rc = tr_fail(TR_ERR_INVALID, "%s: no \"weight_map\" object", path);
    const char *key;
    json_t *v;
    if (!rc)
        json_object_foreach(map, key, v) {
            if (!json_is_string(v) || !plain_file_name(json_string_value(v))) {
                rc = tr_fail(TR_ERR_INVALID, "%s: weight_map['%.200s'] is not a file name in the "
                             "folder", path, key);
                break;
            }
        }
    /* each shard once, in the order the map names them first */
    const char **opened = rc ? NULL : calloc(json_object_size(map) + 1, sizeof *opened);
    size_t n_opened = 0;
    if (!rc && !opened)
        rc = tr_fail(TR_ERR_NOMEM, "out of memory reading %s", path);
    json_object_foreach(map, key, v) {
        if (rc)
            break;
        const char *file = json_string_value(v);
        int seen = 0;
        for (size_t i = 0; i < n_opened && !seen; i++)
            seen = !strcmp(opened[i], file);
        char shard[4200];
        tr_st_file *f = NULL;
        if (seen || (rc = hf_join(shard, sizeof shard, dir, file)))
            continue;
        opened[n_opened++] = file;
        if ((rc = open_file(shard, &f)))
            rc = tr_fail_context(rc, "a shard of %s", path);
        else if (!(rc = check_shard(path, map, f, file)))
            rc = add_file(s, f);
        else
            tr_st_close(f);
    }
    free(opened);
    /* and every name of the map in its shard */
    if (!rc)
        qsort(s->entries, s->n, sizeof *s->entries, cmp_entry);
    json_object_foreach(map, key, v) {
        if (rc)
            break;
        if (!tr_st_set_find(s, key, NULL))
            rc = tr_fail(TR_ERR_INVALID, "%s lists tensor '%.200s' in %s, which does not hold it",
                         path, key, json_string_value(v));
    }
    json_decref(root);
    return rc;
}

int tr_st_set_open(const char *dir, tr_st_set **out)
{
    *out = NULL;
    tr_st_set *s = calloc(1, sizeof *s);
    if (!s)
        return tr_fail(TR_ERR_NOMEM, "out of memory");
    /* the first present, in this order */
    static const struct {
        const char *name;
        int index;
        int (*open)(const char *, tr_st_file **);
    } kinds[] = {
        {INDEX_NAME, 1, tr_st_open},
        {"model.safetensors", 0, tr_st_open},
        {"pytorch_model.bin.index.json", 1, tr_pt_open},
        {"pytorch_model.bin", 0, tr_pt_open},
    };
    char path[4200];
    struct stat st;
    int rc = TR_OK, found = 0;
    for (size_t k = 0; !rc && !found && k < sizeof kinds / sizeof kinds[0]; k++) {
        if ((rc = hf_join(path, sizeof path, dir, kinds[k].name)) || stat(path, &st))
            continue;
        found = 1;
        tr_st_file *f = NULL;
        if (kinds[k].index)
            rc = open_index(s, dir, path, kinds[k].open);
        else if (!(rc = kinds[k].open(path, &f)))
            rc = add_file(s, f);
    }
    if (!rc && !found)
        rc = tr_fail(TR_ERR_INVALID, "%s holds no weights: none of " INDEX_NAME ", "
                     "model.safetensors, pytorch_model.bin.index.json, pytorch_model.bin", dir);
    if (rc) {
        tr_st_set_close(s);
        return rc;
    }
    qsort(s->entries, s->n, sizeof *s->entries, cmp_entry);
    *out = s;
    return TR_OK;
}
