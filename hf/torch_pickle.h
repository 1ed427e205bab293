/* hf/ internal: the restricted unpickler's objects (torch_pickle.c runs the opcodes,
 * torch_state.c gives torch.save's globals their meaning and reads the result). Objects live in
 * one pool, named by index: a pointer into it is stale after anything that makes an object. */
#ifndef TR_HF_TORCH_PICKLE_H
#define TR_HF_TORCH_PICKLE_H

#include "hf/pt_internal.h"

/* O_OPAQUE: a value of PT_OBJECTS' wider allowlist that is never interpreted (a numpy array, a
 * torch dtype, an enum member, ...) */
enum { O_NONE, O_BOOL, O_INT, O_FLOAT, O_STR, O_BYTES, O_TUPLE, O_LIST, O_DICT, O_GLOBAL,
       O_STORAGE, O_TENSOR, O_OPAQUE };

/* the allowed globals (below 100: storages). PT_OBJECTS only: argparse.Namespace (an O_DICT of
 * sub 1: BUILD's dict gives its attributes), classes and functions whose call is an O_OPAQUE
 * (OPAQUE_CALL), values used as they are (OPAQUE_VALUE: torch dtypes), torch.Tensor and
 * Parameter as _rebuild_from_type_v2's types, and the rebuilds of tensors with state */
enum { G_ORDERED_DICT = 100, G_REBUILD_V2, G_REBUILD_PARAMETER, G_NAMESPACE, G_OPAQUE_CALL,
       G_OPAQUE_VALUE, G_TENSOR_TYPE, G_REBUILD_PARAMETER_STATE, G_REBUILD_FROM_TYPE, G_SIZE,
       G_CLASS = 120 /* + PT_C_*: a dataclass of PT_DCP (an O_DICT of sub PT_C_*) */ };

typedef struct {
    uint8_t kind;
    uint8_t sub;  /* O_GLOBAL: G_* or a dtype; O_STORAGE: its dtype; O_BOOL: the value;
                   * O_DICT: PT_C_* for an object of attributes (argparse.Namespace, ...) */
    uint32_t len; /* O_STR / O_BYTES: bytes; containers: items (a dict: 2 per entry) */
    uint32_t cap;
    union {
        int64_t i;          /* O_INT */
        double f;           /* O_FLOAT */
        char *s;            /* O_STR / O_BYTES: len bytes + NUL */
        uint32_t *items;    /* O_TUPLE, O_LIST, O_DICT (key, value, ...) */
        struct {            /* O_STORAGE: key (an O_STR), numel */
            uint32_t key;
            int64_t numel;
        } st;
        uint32_t tensor;    /* O_TENSOR: index into tensors */
    } u;
} obj;

typedef struct {
    uint32_t storage; /* O_STORAGE */
    int64_t offset;
    int ndim;
    int64_t size[TR_ST_MAX_DIMS], stride[TR_ST_MAX_DIMS];
} raw_tensor;

struct pt_pickle {
    const char *path, *what;
    obj *objs;
    size_t n_objs, cap_objs;
    raw_tensor *tensors;
    size_t n_tensors, cap_tensors;
    uint32_t *stack;
    size_t sp;
    size_t marks[PT_MAX_MARKS];
    int n_marks;
    uint32_t *memo;
    size_t n_memo, cap_memo;
    size_t items; /* objects plus container slots (PT_MAX_ITEMS) */
    uint32_t top; /* the object STOP returned */
    size_t at;    /* the current opcode's byte */
    int legacy;
    int objects; /* PT_OBJECTS: the wider allowlist */
    int dcp;     /* PT_DCP: torch.distributed.checkpoint's Metadata classes too */
    int ran_out; /* the error is the end of the bytes */
};

/* torch_pickle.c: an error at the current opcode ("PATH: WHAT byte N: CAUSE"), out of memory,
 * growing *v (elements of esize, *cap of them) to hold n (-1 on failure), a new object of kind k
 * (its index in *out), a push, "an int" for an object's kind */
int pk_fail(pt_pickle *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int pk_nomem(pt_pickle *p);
int pk_grow(void **v, size_t *cap, size_t n, size_t esize);
TR_MUST_CHECK int pk_new_obj(pt_pickle *p, int k, uint32_t *out);
TR_MUST_CHECK int pk_push(pt_pickle *p, uint32_t o);
const char *pk_kind_of(const pt_pickle *p, uint32_t o);
const char *pk_kind_name(int kind);

/* torch_state.c: GLOBAL (refused unless allowed), REDUCE / NEWOBJ (op) of f on the tuple args,
 * BINPERSID of pid; each pushes its result */
TR_MUST_CHECK int pk_global(pt_pickle *p, const char *mod, size_t ml, const char *name,
                            size_t nl);
TR_MUST_CHECK int pk_call(pt_pickle *p, uint32_t f, uint32_t args, const char *op);
TR_MUST_CHECK int pk_persistent(pt_pickle *p, uint32_t pid);
/* BUILD of object o with state: a dict's state (OrderedDict's _metadata) and an opaque object's
 * are ignored, a Namespace's dict is its attributes; anything else refused */
TR_MUST_CHECK int pk_build(pt_pickle *p, uint32_t o, uint32_t state);
/* torch_pickle.c: append items[0, n) to container c (a list, a dict or a Namespace) */
TR_MUST_CHECK int pk_add_items(pt_pickle *p, uint32_t c, const uint32_t *items, size_t n);

#endif
