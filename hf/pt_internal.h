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
/* The same of the archive that is bytes [base, base + size) of fd (torch.distributed.checkpoint's
 * .distcp files: one torch.save archive per chunk, each at an offset); entries' offsets are
 * file offsets. */
TR_MUST_CHECK int pt_zip_open_at(int fd, uint64_t base, uint64_t size, const char *path,
                                 pt_zip *z);
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
/* pt_pickle_run's flags. PT_LEGACY: persistent ids of 6 fields (pre-1.6 files). PT_OBJECTS:
 * what a training checkpoint holds beside tensors is read too (Megatron-LM's
 * model_optim_rng.pt): argparse.Namespace (a dict of its attributes, BUILD's state), and as
 * opaque values never interpreted nor called: numpy arrays, dtypes and scalars
 * (numpy.core.multiarray / numpy._core.multiarray _reconstruct and scalar, numpy ndarray and
 * dtype), _codecs.encode's bytes, io.BytesIO, torch.Size, torch's dtypes, builtins (or
 * protocol 2's __builtin__) set and bytes,
 * megatron.* enums; tensors with state (_rebuild_parameter_with_state, _rebuild_from_type_v2
 * of torch.Tensor / Parameter). Every other global stays refused. */
/* PT_DCP (with PT_OBJECTS): a torch.distributed.checkpoint .metadata pickle (torch 2.x): the
 * dataclasses of torch.distributed.checkpoint.metadata (Metadata, TensorStorageMetadata,
 * BytesStorageMetadata, ChunkStorageMetadata, MetadataIndex, StorageMeta) and filesystem's
 * _StorageInfo as objects of attributes (BUILD's dict; pt_value_class names them), its
 * TensorProperties, _MEM_FORMAT_ENCODING, torch.serialization._get_layout and pathlib's
 * PosixPath as opaque values. Under PT_OBJECTS torch.Size((ints)) is its tuple of ints. */
enum { PT_LEGACY = 1, PT_OBJECTS = 2, PT_DCP = 4 };
/* Run the pickle in buf[0, n) (what: "data.pkl" for messages) under the allowlist of what
 * torch.save writes for a state dict (flags: PT_*); *used: the bytes up to STOP (on failure:
 * SIZE_MAX when the bytes ended first, else 0). TR_ERR_INVALID naming the opcode / GLOBAL /
 * limit and its byte. */
TR_MUST_CHECK int pt_pickle_run(const char *path, const char *what, const unsigned char *buf,
                                size_t n, int flags, pt_pickle **out, size_t *used);
void pt_pickle_free(pt_pickle *p);
/* The top object as a state dict: string key -> tensor (checked: contiguous, inside its
 * storage); *t[*n] malloc'd (pt_tensors_free). */
TR_MUST_CHECK int pt_pickle_state(pt_pickle *p, pt_tensor **t, size_t *n);
void pt_tensors_free(pt_tensor *t, size_t n);
/* The top object as one tensor (torch.save(tensor)), called name (checked as a state dict's:
 * contiguous, inside its storage); t->name and t->key malloc'd after a success. */
TR_MUST_CHECK int pt_pickle_tensor(pt_pickle *p, const char *name, pt_tensor *t);
/* The same of dict d; nested 1: dicts inside it too, named "OUTER.INNER" (Megatron's legacy
 * model: language_model.embedding.word_embeddings.weight), and entries named "_extra_state"
 * or "*._extra_state" skipped whatever they hold (Transformer Engine's and megatron-core's
 * extra state); at most PT_MAX_DEPTH dicts deep, names of PT_MAX_NAME bytes. */
#define PT_MAX_DEPTH 16
#define PT_MAX_NAME 1024
TR_MUST_CHECK int pt_pickle_state_of(pt_pickle *p, uint32_t d, int nested, pt_tensor **t,
                                     size_t *n);
/* The top object as legacy sys_info: a dict whose little_endian is True. */
TR_MUST_CHECK int pt_pickle_sys_info(pt_pickle *p);
/* The top object as a list of strings (a legacy file's storage keys); *keys[*n] malloc'd. */
TR_MUST_CHECK int pt_pickle_keys(pt_pickle *p, char ***keys, size_t *n);

/* The values of a pickle run with PT_OBJECTS (torch_state.c), by object index: the top one,
 * each one's kind (PT_V_*; a storage, a class or a torch dtype is PT_V_OPAQUE) and its name for
 * messages ("an int", "a Namespace"); a dict's or Namespace's value of a string key (1 found;
 * the last one of a key given twice, as Python keeps it); an int (not a bool), a bool, a float
 * or int as a double (1: it is one); a string (UTF-8, no NUL; else NULL); the items of a tuple
 * or list (a dict's entries count in pt_value_len). */
enum { PT_V_NONE, PT_V_BOOL, PT_V_INT, PT_V_FLOAT, PT_V_STR, PT_V_BYTES, PT_V_TUPLE, PT_V_LIST,
       PT_V_DICT, PT_V_NAMESPACE, PT_V_TENSOR, PT_V_OPAQUE };
uint32_t pt_pickle_top(const pt_pickle *p);
int pt_value_kind(const pt_pickle *p, uint32_t v);
const char *pt_value_kind_name(const pt_pickle *p, uint32_t v);
int pt_value_get(const pt_pickle *p, uint32_t d, const char *key, uint32_t *v);
int pt_value_int(const pt_pickle *p, uint32_t v, int64_t *out);
int pt_value_bool(const pt_pickle *p, uint32_t v, int *out);
int pt_value_number(const pt_pickle *p, uint32_t v, double *out);
const char *pt_value_str(const pt_pickle *p, uint32_t v);
size_t pt_value_len(const pt_pickle *p, uint32_t v);
uint32_t pt_value_item(const pt_pickle *p, uint32_t v, size_t i);
/* The class of an object of attributes (PT_V_NAMESPACE): PT_C_*; else PT_C_NONE. Its
 * attributes are pt_value_get's keys. */
enum { PT_C_NONE, PT_C_NAMESPACE, PT_C_METADATA, PT_C_TENSOR_MD, PT_C_BYTES_MD, PT_C_CHUNK,
       PT_C_INDEX, PT_C_STORAGE_META, PT_C_STORAGE_INFO, PT_C_COUNT };
int pt_value_class(const pt_pickle *p, uint32_t v);

/* A torch.save'd ZIP archive's objects (torch_bin.c): its pickle run with PT_OBJECTS, kept
 * open to read the tensors of any of its state dicts. */
typedef struct pt_objects pt_objects;
TR_MUST_CHECK int pt_objects_open(const char *path, pt_objects **out);
pt_pickle *pt_objects_pickle(pt_objects *f);
/* Dict d of f (pt_pickle_state_of, nested) as a tr_st_file of its own (tensors' begin / end
 * file offsets; closed apart from f). */
TR_MUST_CHECK int pt_objects_state(pt_objects *f, uint32_t d, tr_st_file **out);
void pt_objects_close(pt_objects *f);
/* The torch.save'd tensor (torch.save(tensor), as torch.distributed.checkpoint's FileSystemWriter
 * writes each chunk) that is bytes [base, base + size) of fd (file path) as a tr_st_file of its
 * own holding that one tensor, named name (fd is dup'd). */
TR_MUST_CHECK int pt_tensor_at(int fd, const char *path, uint64_t base, uint64_t size,
                               const char *name, tr_st_file **out);

/* ------------------------------------------------------------------ into a tr_st_file */

/* A tr_st_file over the open fd (owned from here, also on failure) holding tensors t[0, n)
 * (names owned from here) with begin/end as file offsets (data_start 0); sorts them into data
 * order and refuses a name given twice. */
TR_MUST_CHECK int st_file_adopt(const char *path, int fd, tr_st_tensor *t, size_t n,
                                tr_st_file **out);

#endif
