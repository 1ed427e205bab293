/* Checkpoint fixtures of the fuzz targets manifest, ckpt and lora* (fixture.c).
 *
 * fz_make_checkpoint() trains a tiny model from a committed YAML file of tests/fuzz/fixtures/
 * for a few steps and saves it, all by library calls, in the target's temporary folder.
 * A fz_fixture then keeps that checkpoint's files in memory: the tracker first, then the
 * iteration folder's files sorted by name (the numbering the corpus inputs use), restored
 * before every input and then replaced or patched by the input (fz_fixture_apply). */
#ifndef TRIDENT_TESTS_FUZZ_FIXTURE_H
#define TRIDENT_TESTS_FUZZ_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "yaml/config.h"

#define FZ_FIXTURE_FILES 64

typedef struct {
    char path[1400];
    uint8_t *data;
    size_t size;
} fz_fixture_file;

typedef struct {
    char root[1024], iter_dir[1100];
    fz_fixture_file file[FZ_FIXTURE_FILES];
    int n;
} fz_fixture;

/* Loads fixtures/YAML with `overrides` and data.data_path set to a small llm.c shard (tokens
 * 0..4), into *cfg (the caller frees it with tr_config_free). */
void fz_fixture_config(const char *yaml, const char *const *overrides, int n, tr_config *cfg);
/* A checkpoint of cfg in dir: `steps` training steps then tr_checkpoint_save as iteration
 * `steps`; steps < 0: no training, tr_checkpoint_save_model (a release checkpoint). */
void fz_make_checkpoint(const tr_config *cfg, const char *dir, int steps);
/* Reads the checkpoint in dir into x. */
void fz_fixture_init(fz_fixture *x, const char *dir);
/* Reads the n files `names` of folder dir (a Hugging Face folder: no tracker) into x, in
 * that order: the numbering of the inputs. */
void fz_fixture_init_files(fz_fixture *x, const char *dir, const char *const *names, int n);
/* Writes every file back as it was. */
void fz_fixture_restore(fz_fixture *x);
/* Applies an input to the restored fixture. Byte 0: bit 0 recompute the manifest's checksums
 * from the files as they are (what a writer of that data would have written); bits 1, 2: part
 * 0, 1 is a patch of its file rather than its new contents (records of a 3-byte little-endian
 * offset modulo the file's size + 1, a length byte and the bytes, written over the original;
 * length 0 truncates there). Bytes 1, 2: the file index (modulo n + 4; >= n: none) of parts 0
 * and 1, which follow from byte 3 separated by "\n@@@\n". An empty part keeps its file; the
 * one-byte content "X" deletes it. */
void fz_fixture_apply(fz_fixture *x, const uint8_t *data, size_t size);

#endif
