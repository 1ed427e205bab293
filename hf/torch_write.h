/* hf/ internal: a torch.save writer (torch_write.c): a STORED ZIP archive ARCHIVE/{data.pkl,
 * data/KEY, version, byteorder} as PyTorch >= 1.6 writes it, which torch.load and trident's
 * reader (tr_pt_open, pt_objects_open) read. The pickle (protocol 2) is built in calls made in
 * its order: each value is pushed as the pickle machine would push it. Tensors' bytes go to
 * the file as they are given (entries 64-byte aligned, CRC-32 recorded); data.pkl, version,
 * byteorder and the central directory at ptw_close. ZIP64 (APPNOTE 4.5.3) where a size or
 * offset reaches 4 GiB or the entries 65535: the extended information extra field of an
 * entry's local header and directory entry, the ZIP64 end record and locator. Tests set the
 * environment variable TRIDENT_TEST_FORCE_ZIP64=1 (read at ptw_open; a variable, not a call,
 * so that it reaches a `trident convert` run as a subprocess) to write every ZIP64 record. */
#ifndef TR_HF_TORCH_WRITE_H
#define TR_HF_TORCH_WRITE_H

#include <stdint.h>

#include "hf/hf.h"

typedef struct ptw ptw;

/* A new file at path (it must not exist). */
TR_MUST_CHECK int ptw_open(const char *path, ptw **out);
/* Values: each pushes one. */
void ptw_none(ptw *w);
void ptw_bool(ptw *w, int v);
void ptw_int(ptw *w, int64_t v);
void ptw_float(ptw *w, double v);
void ptw_str(ptw *w, const char *s);
void ptw_global(ptw *w, const char *module, const char *name); /* torch.float32, ... */
/* Containers: begin, push the items (a dict: key, value, ...), end. */
void ptw_dict_begin(ptw *w);
void ptw_dict_end(ptw *w);
void ptw_tuple_begin(ptw *w);
void ptw_tuple_end(ptw *w);
/* argparse.Namespace(): begin, push (name, value) pairs, end. */
void ptw_namespace_begin(ptw *w);
void ptw_namespace_end(ptw *w);
/* A contiguous tensor of dtype (TR_ST_F32 or TR_ST_BF16) and shape[ndim] whose bytes (little
 * endian) are data: its storage written now as data/KEY (KEY 0, 1, ...), the tensor pushed. */
TR_MUST_CHECK int ptw_tensor(ptw *w, tr_st_dtype dtype, int ndim, const uint64_t *shape,
                             const void *data);
/* rc == 0: STOP, the remaining entries and the central directory, closed (returns the first
 * error). rc != 0: the file closed and removed. Frees w. */
TR_MUST_CHECK int ptw_close(ptw *w, int rc);

#endif
