/*
 * Compute limit: keeps the container's GPU time on a device near sm_limit percent.
 *
 * Measured, not modelled: each throttled launch is bracketed by two CUDA events on
 * its stream, so the controller knows the GPU time every kernel really took. The
 * container's budget is one GCRA clock ("theoretical arrival time") per device in
 * the shared region: a launch books est * 100 / limit nanoseconds of wall time and
 * waits while the clock runs more than a small tolerance ahead of now; when the
 * kernel's measured time arrives, the booking is corrected by the difference. The
 * control quantity is time, so the gain is the same on a GPU with 8 SMs or 144: no
 * SM count, grid size or thread count enters it (SHIM.md lesson 7).
 *
 * Every launch, throttled or not, is counted in the region (busy_ns, launches) for the
 * monitor's per-container utilisation; an unthrottled one never waits and is measured
 * only on a sample (throttle.c, observe_begin).
 */
#ifndef HAMI_THROTTLE_H
#define HAMI_THROTTLE_H

#include <stdint.h>

#include "cuda_abi.h"

typedef struct {
    int active;
    int dev;          /* CUdevice */
    int region_idx;
    int limit;        /* percent */
    int64_t booked;   /* virtual ns booked on the clock */
    int64_t est_ns;   /* estimated GPU time of this launch */
    uintptr_t key;    /* CUfunction or CUgraphExec: what the estimate is kept for */
    CUstream stream;  /* stream the events go to */
    CUevent start;    /* NULL: this launch is not measured */
} throttle_ticket;

/* Before a launch: may sleep (bounded) to keep the device share; records the start
 * event. `per_thread` is set for the _ptsz entry points (stream 0 = per-thread). */
void throttle_begin(throttle_ticket *t, CUstream stream, int per_thread, uintptr_t key);

/* After the launch returned `rc`: records the end event, or undoes the booking. */
void throttle_end(throttle_ticket *t, int rc);

#endif
