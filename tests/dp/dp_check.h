/* Shared pieces of dp_check (multi-process checks of dp/, run by `trident launch`). */
#ifndef TR_DP_CHECK_H
#define TR_DP_CHECK_H

#include "comm/comm.h"
#include "dp/dp.h"
#include "tests/common/check.h"

#include <stdio.h>
#include <stdlib.h>

/* Gradient contribution of "rank" who, micro-batch m, element i: multiples of 1/8 in
 * [-11/8, 11/8], so every sum and every average over 1, 2 or 4 ranks is exact in fp32. */
float gval(int who, int m, size_t i, int salt);

/* Cut [0, n) into nt "tensors": bounds[0] = 0 < bounds[1] < ... < bounds[nt] = n (the same on
 * every rank for the same seed). */
void make_tensors(size_t n, int nt, unsigned seed, size_t *bounds);

/* MiB for a bucket of `elems` fp32 elements. */
double mb_of(size_t elems);

/* One accumulation window as a backward would run it: for each micro-batch, for each tensor
 * (in `order`, or front to back when NULL) add gval(who, m, i, salt) and report the range
 * (report = 0: no hook at all). Then tr_dp_finish. */
void run_window(tr_dp *dp, float *grads, const size_t *bounds, int nt, const int *order, int M,
                int who, int salt, int report);

void check_dp(tr_comm *world);      /* averages, skip-sync counters, shards, ZeRO-1 step */
void check_groups(tr_comm *world);  /* grad norm, TP and embedding finalize */
void check_overlap(tr_comm *world, int progress_thread); /* timestamps of a fake backward */

#endif
