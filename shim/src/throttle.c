#include "throttle.h"

#include <pthread.h>
#include <string.h>

#include "log.h"
#include "nvml_util.h"
#include "priority.h"
#include "real_driver.h"
#include "region.h"
#include "shim.h"

#define MAX_PENDING 64             /* measured launches in flight per device */
#define EST_SLOTS 256              /* per-kernel duration estimates */
#define TOLERANCE_NS 20000000LL    /* clock may run this far ahead: short bursts */
#define MAX_WAIT_NS 10000000000LL  /* one launch never waits longer than this */
#define SHARED_CHECK_NS 1000000000ull
/* Unthrottled launches are sampled, not all measured (see throttle.h): */
#define OBSERVE_PENDING 4          /* measured launches in flight per device */
#define OBSERVE_HARVEST_NS 1000000ull /* look for finished ones at most this often */

struct pending {
    CUevent start, end;
    uintptr_t key;
    int64_t est_ns;
    int limit; /* percent it was booked at; 0: unthrottled, nothing booked */
};

struct tdev {
    pthread_mutex_t mu;
    int init;
    CUcontext ctx;                 /* context owning the events below */
    CUevent free_ev[2 * MAX_PENDING + 2];
    int n_free;
    struct pending q[MAX_PENDING];
    int head, count;
    struct {
        uintptr_t key;
        int64_t ns;
    } est[EST_SLOTS];
    int64_t any_ns;                /* estimate for kernels never measured (atomic) */
    int have_any;                  /* any_ns is valid (atomic) */
    uint64_t harvested_ns;         /* last harvest of unthrottled measurements */
    int64_t local_clock;           /* used when the shared region is unavailable */
    uint64_t shared_checked_ns;
    int shared;
    int marked;                    /* told the region the throttle is on (force) */
};

static struct tdev g_td[SHIM_MAX_DEVICES];
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;

static void after_fork_child(void)
{
    /* Events and contexts do not survive fork(); start from nothing. */
    memset(g_td, 0, sizeof g_td);
    pthread_mutex_init(&g_init_mu, NULL);
}

static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

static void register_atfork(void)
{
    /* Own handler: shim.c need not know this module's state (no shim.c <-> throttle.c
     * cycle). Registered at the first launch, before which there is nothing to reset. */
    pthread_atfork(NULL, NULL, after_fork_child);
}

static struct tdev *tdev_for(int dev)
{
    if (dev < 0 || dev >= SHIM_MAX_DEVICES)
        return NULL;
    struct tdev *td = &g_td[dev];
    if (!__atomic_load_n(&td->init, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&g_init_mu);
        if (!td->init) {
            pthread_mutex_init(&td->mu, NULL);
            __atomic_store_n(&td->init, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&g_init_mu);
    }
    return td;
}

static int64_t *clock_of(struct tdev *td, int region_idx)
{
    int64_t *c = region_tat(region_idx);
    return c ? c : &td->local_clock;
}

/* Expected GPU time of a launch of `key`, or -1 when nothing was measured yet. */
static int64_t estimate(struct tdev *td, uintptr_t key)
{
    size_t i = (key >> 4) % EST_SLOTS;
    if (key != 0 && td->est[i].key == key)
        return td->est[i].ns;
    return __atomic_load_n(&td->have_any, __ATOMIC_ACQUIRE) ? __atomic_load_n(&td->any_ns, __ATOMIC_RELAXED) : -1;
}

/* 1 when `key` has an estimate of its own (not the device-wide one). */
static int known(struct tdev *td, uintptr_t key)
{
    size_t i = (key >> 4) % EST_SLOTS;
    return key != 0 && td->est[i].key == key;
}

static void learn(struct tdev *td, uintptr_t key, int64_t ns)
{
    size_t i = (key >> 4) % EST_SLOTS;
    if (td->est[i].key != key) {
        td->est[i].key = key;
        td->est[i].ns = ns;
    } else {
        td->est[i].ns += (ns - td->est[i].ns) / 4; /* EWMA, alpha 1/4 */
    }
    /* Atomic: an unthrottled launch that finds the lock taken reads it without. */
    int64_t any = __atomic_load_n(&td->any_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&td->any_ns, td->have_any ? any + (ns - any) / 4 : ns, __ATOMIC_RELAXED);
    __atomic_store_n(&td->have_any, 1, __ATOMIC_RELEASE);
}

static CUevent take_event(struct tdev *td)
{
    if (td->n_free > 0)
        return td->free_ev[--td->n_free];
    CUevent e = NULL;
    cuEventCreate_pfn create = REAL(cuEventCreate);
    if (create == NULL || create(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
        return NULL;
    return e;
}

static void give_event(struct tdev *td, CUevent e)
{
    if (e == NULL)
        return;
    if (td->n_free < (int)(sizeof td->free_ev / sizeof td->free_ev[0])) {
        td->free_ev[td->n_free++] = e;
        return;
    }
    cuEventDestroy_v2_pfn destroy = REAL(cuEventDestroy_v2);
    if (destroy)
        destroy(e);
}

/* Applies the measurements of finished launches (td->mu held): the GPU time to the
 * region's busy counter, the estimate, and for a throttled launch the correction of
 * its booking on the clock. */
static void harvest(struct tdev *td, int region_idx)
{
    cuEventQuery_pfn query = REAL(cuEventQuery);
    cuEventElapsedTime_pfn elapsed = REAL(cuEventElapsedTime);
    if (query == NULL || elapsed == NULL)
        return;
    int64_t *clk = clock_of(td, region_idx);
    while (td->count > 0) {
        struct pending *p = &td->q[td->head];
        int rc = query(p->end);
        if (rc == CUDA_ERROR_NOT_READY)
            break;
        float ms = 0;
        if (rc == CUDA_SUCCESS && elapsed(&ms, p->start, p->end) == CUDA_SUCCESS && ms >= 0) {
            int64_t actual = (int64_t)((double)ms * 1e6);
            if (p->limit > 0)
                __atomic_add_fetch(clk, (actual - p->est_ns) * 100 / p->limit, __ATOMIC_RELAXED);
            learn(td, p->key, actual);
            region_add_busy(region_idx, (uint64_t)actual, 0);
            give_event(td, p->start);
            give_event(td, p->end);
        } else {
            /* Context destroyed or similar: these events are dead, drop them. */
            LOG_DEBUG("dropping a launch measurement (cuEventQuery %d)", rc);
        }
        td->head = (td->head + 1) % MAX_PENDING;
        td->count--;
    }
}

/* Policy "default" limits only while someone outside the container uses the GPU:
 * NVML lists more processes on it than the container has. */
static int device_shared(struct tdev *td, dev_state *d)
{
    uint64_t now = shim_now_ns();
    if (td->shared_checked_ns && now - td->shared_checked_ns < SHARED_CHECK_NS)
        return td->shared;
    int total = nvml_process_count(d->uuid);
    int ours = region_active_processes(d->region_idx);
    /* Unknown is treated as shared: throttling by mistake beats not throttling. */
    int shared = total < 0 || total > ours;
    if (shared != td->shared || !td->shared_checked_ns)
        LOG_INFO("device %s %s (NVML processes %d, container processes %d)", d->uuid,
                 shared ? "is shared: compute limit on" : "is not shared: compute limit off",
                 total, ours);
    td->shared = shared;
    td->shared_checked_ns = now;
    td->marked = shared;
    region_set_throttled(d->region_idx, shared);
    return shared;
}

/* Records the start event of a measured launch (t->start stays NULL when it cannot). */
static void start_measure(throttle_ticket *t, struct tdev *td)
{
    CUcontext cur = NULL;
    cuCtxGetCurrent_pfn get_cur = REAL(cuCtxGetCurrent);
    cuEventRecord_pfn record = REAL(cuEventRecord);
    if (get_cur == NULL || get_cur(&cur) != CUDA_SUCCESS || record == NULL)
        return;
    pthread_mutex_lock(&td->mu);
    if (td->ctx != cur && td->count == 0) {
        /* Events belong to a context: start a pool for the new one. While launches of
         * another context are still pending, new ones go unmeasured (estimate only). */
        cuEventDestroy_v2_pfn destroy = REAL(cuEventDestroy_v2);
        for (int i = 0; i < td->n_free; i++)
            if (destroy)
                destroy(td->free_ev[i]);
        td->n_free = 0;
        td->ctx = cur;
    }
    if (td->ctx == cur && td->count < MAX_PENDING) {
        CUevent e = take_event(td);
        if (e && record(e, t->stream) == CUDA_SUCCESS)
            t->start = e;
        else
            give_event(td, e);
    }
    pthread_mutex_unlock(&td->mu);
}

/* 1 when `s` is being captured into a graph (or cannot be asked): nothing runs now,
 * and an event recorded on it would join the graph. */
static int capturing(CUstream s)
{
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    cuStreamIsCapturing_pfn is_capturing = REAL(cuStreamIsCapturing);
    return is_capturing && (is_capturing(s, &cap) != CUDA_SUCCESS || cap != CU_STREAM_CAPTURE_STATUS_NONE);
}

/*
 * An unthrottled launch (no compute limit, policy disable, or default on a GPU nobody
 * else uses): nothing waits, but its GPU time is still counted, so the monitor's
 * utilisation covers every container, not only throttled ones. Measuring every launch
 * would cost two event records each; instead a launch is measured while its kernel has
 * no estimate of its own (at most OBSERVE_PENDING in flight) or while nothing measured
 * is in flight, and every other launch adds its kernel's estimate. Finished
 * measurements are looked for at most once per OBSERVE_HARVEST_NS, so the extra driver
 * calls per second are bounded whatever the launch rate. Never blocks: a thread that
 * finds the device's lock taken counts the device-wide estimate without it.
 */
static void observe_begin(throttle_ticket *t, struct tdev *td, dev_state *d, CUdevice dev, CUstream s,
                          uintptr_t key, int capture_checked)
{
    if (shim_ensure_registered() != 0)
        return;
    region_add_busy(d->region_idx, 0, 1);
    t->dev = dev;
    t->region_idx = d->region_idx;
    t->limit = 0;
    t->booked = 0;
    t->key = key;
    t->stream = s;
    t->start = NULL;
    if (pthread_mutex_trylock(&td->mu) != 0) {
        if (__atomic_load_n(&td->have_any, __ATOMIC_ACQUIRE)) {
            t->est_ns = __atomic_load_n(&td->any_ns, __ATOMIC_RELAXED);
            t->active = 1;
        }
        return;
    }
    if (td->count > 0) {
        const uint64_t now = shim_now_ns();
        if (now - td->harvested_ns >= OBSERVE_HARVEST_NS) {
            harvest(td, d->region_idx);
            td->harvested_ns = now;
        }
    }
    const int sample = td->count == 0 || (!known(td, key) && td->count < OBSERVE_PENDING);
    t->est_ns = estimate(td, key);
    pthread_mutex_unlock(&td->mu);
    if (!sample) {
        t->active = t->est_ns > 0;
        return;
    }
    if (!capture_checked && capturing(s))
        return; /* counted when the graph is launched */
    t->est_ns = 0;
    t->active = 1;
    start_measure(t, td);
}

void throttle_begin(throttle_ticket *t, CUstream stream, int per_thread, uintptr_t key)
{
    t->active = 0;
    pthread_once(&g_atfork_once, register_atfork);
    if (shim_passthrough())
        return;
    CUdevice dev;
    if (shim_current_device(&dev, NULL) != 0)
        return; /* the driver will report the missing context */
    dev_state *d = shim_device(dev);
    struct tdev *td = tdev_for(dev);
    if (d == NULL || td == NULL)
        return;
    CUstream s = (per_thread && stream == NULL) ? CU_STREAM_PER_THREAD : stream;
    const shim_config *cfg = shim_cfg();
    if ((!cfg->sm_configured && cfg->priority < 0) || cfg->policy == POLICY_DISABLE) {
        observe_begin(t, td, d, dev, s, key, 0);
        return;
    }
    /* Task priority: a low-priority container yields while a high one is active on
     * the GPU (priority.h); the lower of that share and the compute limit applies. */
    const int yield = priority_before_launch(d);
    int limit = d->sm_limit > 0 && d->sm_limit < 100 ? d->sm_limit : 100;
    if (yield > 0 && yield < limit)
        limit = yield;
    if (limit >= 100) {
        if (td->marked && cfg->priority > 0) {
            /* No longer yielding, and no compute limit of its own: the monitor's flag goes. */
            td->marked = 0;
            region_set_throttled(d->region_idx, 0);
        }
        observe_begin(t, td, d, dev, s, key, 0);
        return;
    }
    const int registered = shim_ensure_registered() == 0; /* before device_shared counts us */
    if (capturing(s))
        return; /* captured into a graph: nothing runs now, and events would join the graph */

    const uint64_t deadline = shim_now_ns() + MAX_WAIT_NS;
    pthread_mutex_lock(&td->mu);
    if (cfg->policy == POLICY_DEFAULT && !yield && !device_shared(td, d)) {
        pthread_mutex_unlock(&td->mu);
        observe_begin(t, td, d, dev, s, key, 1);
        return;
    }
    if (registered)
        region_add_busy(d->region_idx, 0, 1); /* marks the device as used by us */
    if (!td->marked) {
        td->marked = 1;
        region_set_throttled(d->region_idx, 1);
    }
    harvest(td, d->region_idx);
    /* Without an estimate, let one launch through at a time until it is measured;
     * with one, bound what is in flight unmeasured. */
    while (td->count > 0 && (td->count >= MAX_PENDING || estimate(td, key) < 0) &&
           shim_now_ns() < deadline) {
        pthread_mutex_unlock(&td->mu);
        shim_sleep_ns(200000);
        pthread_mutex_lock(&td->mu);
        harvest(td, d->region_idx);
    }
    int64_t est = estimate(td, key);
    if (est < 0)
        est = 0; /* corrected when its measurement arrives */
    int64_t booked = est * 100 / limit;
    int64_t *clk = clock_of(td, d->region_idx);
    pthread_mutex_unlock(&td->mu);

    for (;;) {
        int64_t now = (int64_t)shim_now_ns();
        int64_t c = __atomic_load_n(clk, __ATOMIC_ACQUIRE);
        if (c - now > TOLERANCE_NS && (uint64_t)now < deadline) {
            int64_t wait = c - now - TOLERANCE_NS;
            shim_sleep_ns((uint64_t)(wait < 5000000 ? wait : 5000000));
            pthread_mutex_lock(&td->mu);
            harvest(td, d->region_idx); /* corrections may move the clock */
            pthread_mutex_unlock(&td->mu);
            continue;
        }
        int64_t next = (c > now ? c : now) + booked;
        if (__atomic_compare_exchange_n(clk, &c, next, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            break;
    }

    t->active = 1;
    t->dev = dev;
    t->region_idx = d->region_idx;
    t->limit = limit;
    t->booked = booked;
    t->est_ns = est;
    t->key = key;
    t->stream = s;
    t->start = NULL;
    start_measure(t, td);
}

void throttle_end(throttle_ticket *t, int rc)
{
    if (!t->active)
        return;
    if (t->start == NULL) {
        /* Unmeasured: a successful launch counts its estimate; a failed one gives its
         * booking back (nothing ran). */
        if (rc == CUDA_SUCCESS && t->est_ns > 0)
            region_add_busy(t->region_idx, (uint64_t)t->est_ns, 0);
        else if (rc != CUDA_SUCCESS && t->booked)
            __atomic_sub_fetch(clock_of(tdev_for(t->dev), t->region_idx), t->booked, __ATOMIC_RELAXED);
        return;
    }
    struct tdev *td = tdev_for(t->dev);
    pthread_mutex_lock(&td->mu);
    if (rc != CUDA_SUCCESS) {
        /* Nothing ran: give the booking back. */
        __atomic_sub_fetch(clock_of(td, t->region_idx), t->booked, __ATOMIC_RELAXED);
        give_event(td, t->start);
    } else {
        CUevent e = take_event(td);
        cuEventRecord_pfn record = REAL(cuEventRecord);
        if (e && record && record(e, t->stream) == CUDA_SUCCESS && td->count < MAX_PENDING) {
            struct pending *p = &td->q[(td->head + td->count) % MAX_PENDING];
            p->start = t->start;
            p->end = e;
            p->key = t->key;
            p->est_ns = t->est_ns;
            p->limit = t->limit;
            td->count++;
        } else {
            give_event(td, e);
            give_event(td, t->start);
        }
    }
    pthread_mutex_unlock(&td->mu);
}
