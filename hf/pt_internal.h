/* hf/ internal: PyTorch pytorch_model.bin reading (zip_read.c, torch_pickle.c, torch_bin.c).
 * Not part of the contract (hf/hf.h says what tr_pt_open reads and refuses). */
#ifndef TR_HF_PT_INTERNAL_H
#define TR_HF_PT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "hf/hf.h"

/* Every error of this module: TR_ERR_INVALID, "PATH: CAUSE" (printf-style CAUSE). */
int pt_bad(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* n bytes at off of fd (file path): TR_ERR_IO, or TR_ERR_INVALID where the file ends first. */
TR_MUST_CHECK int pt_read_at(int fd, const char *path, void *buf, size_t n, uint64_t off);

/* ------------------------------------------------------------------ ZIP (zip_read.c) */

#define PT_ZIP_MAX_ENTRIES (1u << 20)

typedef struct {
    char *name;      /* NUL-free, as stored */
    uint64_t offset; /* file offset of the entry's bytes (after its local header) */
    uint64_t size;   /* bytes (STORED: compressed == uncompressed) */
} pt_zip_entry;

typedef struct {
    pt_zip_entry *entries; /* [n], sorted by name */
    size_t n;
    char *archive; /* the top folder of the central directory's first entry ("model") */
} pt_zip;

/* The central directory of the archive in fd (file_size bytes; path names it in messages),
 * ZIP64 included; every entry STORED, inside the file, named once. */
TR_MUST_CHECK int pt_zip_open(int fd, uint64_t file_size, const char *path, pt_zip *z);
/* Entry ARCHIVE/rel, or NULL. */
const pt_zip_entry *pt_zip_find(const pt_zip *z, const char *rel);
void pt_zip_free(pt_zip *z);

/* ------------------------------------------------------------------ pickle (torch_pickle.c) */

#define PT_MAX_PICKLE (256u << 20) /* bytes of one pickle */
#define PT_MAX_STACK (1u << 17)    /* values on the stack */
#define PT_MAX_MARKS 64            /* open MARKs */
#define PT_MAX_ITEMS (1u << 24)    /* objects plus container slots, all together */
#define PT_MAX_STRING (1u << 20)   /* bytes of one string */

/* A tensor of a state dict: name -> (storage dtype, key, numel), offset, contiguous shape. */
typedef struct {
    char *name;
    tr_st_dtype dtype;
    char *key;              /* the storage's key: data/KEY in a ZIP */
    uint64_t storage_numel; /* elements of the storage (its persistent id's) */
    uint64_t offset;        /* storage_offset (elements) */
    int ndim;
    uint64_t shape[TR_ST_MAX_DIMS];
    uint64_t numel;
} pt_tensor;

typedef struct pt_pickle pt_pickle;
/* Run the pickle in buf[0, n) (what: "data.pkl" for messages) under the allowlist of what
 * torch.save writes for a state dict; *used: the bytes up to STOP (on failure: SIZE_MAX when
 * the bytes ended first, else 0). legacy: persistent ids of 6 fields (pre-1.6 files).
 * TR_ERR_INVALID naming the opcode / GLOBAL / limit and its byte. */
TR_MUST_CHECK int pt_pickle_run(const char *path, const char *what, const unsigned char *buf,
                                size_t n, int legacy, pt_pickle **out, size_t *used);
void pt_pickle_free(pt_pickle *p);
/* The top object as a state dict: string key -> tensor (checked: contiguous, inside its
 * storage); *t[*n] malloc'd (pt_tensors_free). */
TR_MUST_CHECK int pt_pickle_state(pt_pickle *p, pt_tensor **t, size_t *n);
void pt_tensors_free(pt_tensor *t, size_t n);
/* The top object as legacy sys_info: a dict whose little_endian is True. */
TR_MUST_CHECK int pt_pickle_sys_info(pt_pickle *p);
/* The top object as a list of strings (a legacy file's storage keys); *keys[*n] malloc'd. */
TR_MUST_CHECK int pt_pickle_keys(pt_pickle *p, char ***keys, size_t *n);

/* ------------------------------------------------------------------ into a tr_st_file */

/* A tr_st_file over the open fd (owned from here, also on failure) holding tensors t[0, n)
 * (names owned from here) with begin/end as file offsets (data_start 0); sorts them into data
 * order and refuses a name given twice. */
TR_MUST_CHECK int st_file_adopt(const char *path, int fd, tr_st_tensor *t, size_t n,
                                tr_st_file **out);

#endif
