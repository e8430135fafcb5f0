/*
 * Task priority across the containers of one GPU (CUDA_TASK_PRIORITY from the limits
 * file: 0 high, 1 and above low, unset neither; HAMi's nvidia.com/priority).
 *
 * Signalling is node-local and set up by the device plugin, per GPU UUID:
 *   <board>/<uuid>/<podUID>_<container>/beat   (host: <hook>/priority/...)
 * Every container on the GPU sees <board>/<uuid>/ read-only; a high-priority container
 * also gets its own entry writable, as <beat>/<uuid>/. While it launches work it
 * writes the time (CLOCK_MONOTONIC ns, 8 bytes) into its beat file at most every
 * PRIORITY_BEAT_NS; a low-priority container that finds a beat fresher than
 * PRIORITY_FRESH_NS throttles its launches to PRIORITY_LOW_SHARE percent. A tenant
 * writes only its own entry, and only when its priority is high: it can make
 * low-priority containers yield to it, which is what its priority means, no more.
 */
#ifndef HAMI_PRIORITY_H
#define HAMI_PRIORITY_H

#include "shim.h"

#define PRIORITY_LOW_SHARE 10                 /* percent a low container keeps */
#define PRIORITY_BEAT_NS 20000000ull          /* high: write the beat at most this often */
#define PRIORITY_FRESH_NS 300000000ull        /* a beat counts this long after it was written */
#define PRIORITY_CHECK_NS 20000000ull         /* low: read the board at most this often */
#define PRIORITY_MAX_ENTRIES 256              /* entries of the board read per check */

/* Before a launch on `d`: a high-priority container beats; returns the percent a
 * low-priority container is held to now (PRIORITY_LOW_SHARE while a high one is
 * active on the GPU), or 0 when priority does not limit this launch. */
int priority_before_launch(dev_state *d);

#endif
