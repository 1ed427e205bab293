/* Private to comm/ (not a contract): what the front end (comm.c) calls in the backends. Each
 * backend keeps its own structures in its folder's internal header (ucx/ucx_internal.h,
 * nccl/nccl_internal.h); none includes another's. */
#ifndef TR_COMM_INTERNAL_H
#define TR_COMM_INTERNAL_H

#include "comm/comm.h"

/* The world of each backend, called by tr_comm_init once it has checked rv and cfg (defaults
 * filled in, cfg->backend naming this backend). */
TR_MUST_CHECK int comm_ucx_init(const tr_comm_rendezvous *rv, const tr_comm_config *cfg,
                                   tr_comm **out);
#ifdef TR_HAVE_CUDA
TR_MUST_CHECK int comm_nccl_init(const tr_comm_rendezvous *rv, const tr_comm_config *cfg,
                                    tr_comm **out);
#endif

#endif
