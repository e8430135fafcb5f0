#include "shim.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc_table.h"
#include "log.h"
#include "nvml_util.h"
#include "real_driver.h"
#include "region.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* config + device table */
static int g_cfg_loaded;
static shim_config g_cfg;
static int g_exiting;
static dev_state g_devs[SHIM_MAX_DEVICES];
static int g_ndevs;
static dev_state *g_by_cudev[SHIM_MAX_DEVICES];
static int g_any_fenced;
static uint64_t g_region_retry_ns; /* after a failed attach, next attempt not before */
static char g_region_err[256];

uint64_t shim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void shim_sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    nanosleep(&ts, NULL);
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&g_mu);
    region_fork_prepare();
}

static void fork_parent(void)
{
    region_fork_parent();
    pthread_mutex_unlock(&g_mu);
}

static void fork_child(void)
{
    /* The child owns none of the parent's allocations, slot, lock or events. */
    region_after_fork_child();
    atab_reset_after_fork();
    g_region_retry_ns = 0;
    pthread_mutex_init(&g_mu, NULL);
}

const shim_config *shim_cfg(void)
{
    if (__atomic_load_n(&g_cfg_loaded, __ATOMIC_ACQUIRE))
        return &g_cfg;
    pthread_mutex_lock(&g_mu);
    if (!g_cfg_loaded) {
        config_load(&g_cfg);
        pthread_atfork(fork_prepare, fork_parent, fork_child);
        if (g_cfg.disabled)
            LOG_INFO("CUDA_DISABLE_CONTROL is set: forwarding every call unchanged");
        __atomic_store_n(&g_cfg_loaded, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_mu);
    return &g_cfg;
}

int shim_passthrough(void)
{
    return shim_cfg()->disabled || __atomic_load_n(&g_exiting, __ATOMIC_RELAXED);
}

static int ensure_attached(void)
{
    if (region_ok())
        return 0;
    uint64_t now = shim_now_ns();
    if (g_region_retry_ns && now < g_region_retry_ns)
        return -1;
    char err[256];
    if (region_attach(g_cfg.region_path, g_cfg.lock_timeout_ms, err, sizeof err) == 0) {
        g_region_retry_ns = 0;
        return 0;
    }
    if (strcmp(err, g_region_err) != 0)
        LOG_ERROR("shared region unusable: %s; refusing all GPU memory until it is", err);
    snprintf(g_region_err, sizeof g_region_err, "%s", err);
    g_region_retry_ns = now + 1000000000ull;
    return -1;
}

int shim_ensure_registered(void)
{
    shim_cfg();
    if (region_has_slot())
        return 0;
    pthread_mutex_lock(&g_mu);
    int rc = ensure_attached();
    if (rc == 0)
        rc = region_register_self(g_cfg.priority, g_any_fenced);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

void shim_format_uuid(const CUuuid *u, char *out, unsigned len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

/* Container index of a device: its place in NVIDIA_VISIBLE_DEVICES (the device
 * plugin's order), else NVML's order (physical, unaffected by CUDA_VISIBLE_DEVICES),
 * else the caller's fallback. */
static int container_index(const char *uuid, int fallback)
{
    if (g_cfg.n_visible > 0)
        return config_visible_index(&g_cfg, uuid);
    int idx = nvml_index_of_uuid(uuid);
    if (idx >= 0)
        return idx;
    if (getenv("CUDA_VISIBLE_DEVICES"))
        LOG_WARN("no UUID list in NVIDIA_VISIBLE_DEVICES and no NVML: limits of %s are looked "
                 "up by CUDA ordinal %d, which CUDA_VISIBLE_DEVICES may have renumbered",
                 uuid, fallback);
    return fallback;
}

static dev_state *resolve_locked(const char *uuid, uint64_t phys_total, int fallback_index)
{
    for (int i = 0; i < g_ndevs; i++) {
        if (strcmp(g_devs[i].uuid, uuid) == 0) {
            if (phys_total && !g_devs[i].mem_total)
                g_devs[i].mem_total = phys_total;
            return &g_devs[i];
        }
    }
    if (g_ndevs >= SHIM_MAX_DEVICES)
        return NULL;
    dev_state *d = &g_devs[g_ndevs];
    memset(d, 0, sizeof *d);
    snprintf(d->uuid, sizeof d->uuid, "%s", uuid);
    d->mem_total = phys_total;
    d->container_index = container_index(uuid, fallback_index);
    d->prio_fd = -1;

    device_limits lim;
    config_device_limits(d->container_index, &lim);
    d->mem_limit = lim.mem_state == LIMIT_OK ? lim.mem_bytes : 0;
    d->sm_limit = (lim.sm_state == LIMIT_OK && lim.sm_percent < 100) ? lim.sm_percent : 0;
    if (lim.mem_state != LIMIT_OK || lim.sm_state == LIMIT_MALFORMED) {
        d->fenced = 1;
        snprintf(d->reason, sizeof d->reason, "%s", lim.reason);
    }
    d->region_idx = -1;
    if (ensure_attached() != 0) {
        if (!d->fenced)
            snprintf(d->reason, sizeof d->reason, "shared region: %.170s", g_region_err);
        d->fenced = 1;
    } else {
        d->region_idx = region_device(uuid, d->mem_limit, phys_total, d->sm_limit, d->fenced, d->reason);
        if (d->region_idx < 0 && !d->fenced) {
            d->fenced = 1;
            snprintf(d->reason, sizeof d->reason, "no room for the device in the shared region");
        }
    }
    if (d->fenced) {
        g_any_fenced = 1;
        if (region_has_slot())
            region_register_self(g_cfg.priority, 1); /* flags our slot for the monitor */
        /* Loud: this is the one message an operator must see when asking for logs. */
        LOG_ERROR("FAILING CLOSED on device %s (container index %d): %s. "
                  "Every GPU memory allocation on it will return CUDA_ERROR_OUT_OF_MEMORY.",
                  uuid, d->container_index, d->reason);
    } else {
        LOG_INFO("device %s (container index %d): memory limit %llu bytes, compute limit %d%%",
                 uuid, d->container_index, (unsigned long long)d->mem_limit, d->sm_limit);
    }
    __atomic_store_n(&g_ndevs, g_ndevs + 1, __ATOMIC_RELEASE);
    return d;
}

dev_state *shim_device_by_uuid(const char *uuid, uint64_t phys_total)
{
    shim_cfg();
    pthread_mutex_lock(&g_mu);
    dev_state *d = resolve_locked(uuid, phys_total, -1);
    pthread_mutex_unlock(&g_mu);
    return d;
}

dev_state *shim_device(CUdevice dev)
{
    shim_cfg();
    if (dev >= 0 && dev < SHIM_MAX_DEVICES) {
        dev_state *d = __atomic_load_n(&g_by_cudev[dev], __ATOMIC_ACQUIRE);
        if (d)
            return d;
    }
    CUuuid u;
    cuDeviceGetUuid_pfn get_uuid = REAL(cuDeviceGetUuid);
    if (get_uuid == NULL || get_uuid(&u, dev) != CUDA_SUCCESS) {
        LOG_ERROR("cannot read the UUID of CUDA device %d", dev);
        return NULL;
    }
    char uuid[CFG_UUID_LEN];
    shim_format_uuid(&u, uuid, sizeof uuid);
    size_t total = 0;
    cuDeviceTotalMem_v2_pfn get_total = REAL(cuDeviceTotalMem_v2);
    if (get_total == NULL || get_total(&total, dev) != CUDA_SUCCESS)
        total = 0;
    pthread_mutex_lock(&g_mu);
    dev_state *d = resolve_locked(uuid, total, dev);
    if (d && dev >= 0 && dev < SHIM_MAX_DEVICES)
        __atomic_store_n(&g_by_cudev[dev], d, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_mu);
    return d;
}

int shim_current_device(CUdevice *dev, CUcontext *ctx)
{
    cuCtxGetDevice_pfn f = REAL(cuCtxGetDevice);
    if (f == NULL || f(dev) != CUDA_SUCCESS)
        return -1;
    if (ctx) {
        cuCtxGetCurrent_pfn g = REAL(cuCtxGetCurrent);
        if (g == NULL || g(ctx) != CUDA_SUCCESS)
            *ctx = NULL;
    }
    return 0;
}

/* Counts NVML's view of this process's memory (context, page rounding, pools'
 * caches, anything no hook saw) beyond what the hooks charged. */
static void maybe_reconcile(dev_state *d)
{
    if (g_cfg.reconcile_ms < 0)
        return;
    uint64_t now = shim_now_ns();
    uint64_t last = __atomic_load_n(&d->reconciled_ns, __ATOMIC_RELAXED);
    if (last && now - last < (uint64_t)g_cfg.reconcile_ms * 1000000ull)
        return;
    __atomic_store_n(&d->reconciled_ns, now, __ATOMIC_RELAXED);
    uint64_t seen;
    if (nvml_process_used(d->uuid, getpid(), &seen) != 0)
        return; /* NVML absent, or it lists host pids we cannot match */
    uint64_t mine = region_my_used(d->region_idx);
    uint64_t extra = seen > mine ? seen - mine : 0;
    region_set_untracked(d->region_idx, extra);
    LOG_DEBUG("reconciled %s: NVML %llu bytes, charged %llu, untracked %llu", d->uuid,
              (unsigned long long)seen, (unsigned long long)mine, (unsigned long long)extra);
}

int shim_charge(dev_state *d, uint64_t bytes)
{
    if (d->fenced) {
        LOG_WARN("refusing %llu bytes on %s: failing closed (%s)", (unsigned long long)bytes,
                 d->uuid, d->reason);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (shim_ensure_registered() != 0) {
        LOG_ERROR("refusing %llu bytes on %s: no slot in the shared region", (unsigned long long)bytes,
                  d->uuid);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    maybe_reconcile(d);
    switch (region_reserve(d->region_idx, bytes, d->mem_limit)) {
    case RES_OK:
        return CUDA_SUCCESS;
    case RES_OVER_LIMIT:
        LOG_INFO("refusing %llu bytes on %s: the container uses %llu of its %llu bytes",
                 (unsigned long long)bytes, d->uuid, (unsigned long long)region_usage(d->region_idx),
                 (unsigned long long)d->mem_limit);
        return CUDA_ERROR_OUT_OF_MEMORY;
    default:
        LOG_ERROR("refusing %llu bytes on %s: shared region unavailable", (unsigned long long)bytes,
                  d->uuid);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
}

void shim_uncharge(dev_state *d, uint64_t bytes)
{
    if (d && !d->fenced && bytes)
        region_release(d->region_idx, bytes);
}

void shim_uncharge_dev(CUdevice dev, uint64_t bytes)
{
    dev_state *d = (dev >= 0 && dev < SHIM_MAX_DEVICES) ? __atomic_load_n(&g_by_cudev[dev], __ATOMIC_ACQUIRE) : NULL;
    shim_uncharge(d, bytes);
}

void shim_mark_host(dev_state *d, uint64_t bytes)
{
    if (d && !d->fenced && bytes)
        region_add_oversub(d->region_idx, bytes);
}

void shim_uncharge_host_dev(CUdevice dev, uint64_t bytes)
{
    dev_state *d = (dev >= 0 && dev < SHIM_MAX_DEVICES) ? __atomic_load_n(&g_by_cudev[dev], __ATOMIC_ACQUIRE) : NULL;
    if (d && !d->fenced && bytes)
        region_sub_oversub(d->region_idx, bytes);
    shim_uncharge(d, bytes);
}

void shim_mem_view(dev_state *d, uint64_t phys_free, uint64_t *free_out, uint64_t *total_out,
                   uint64_t *used_out)
{
    if (d == NULL || d->fenced) {
        *free_out = *total_out = 0;
        if (used_out)
            *used_out = 0;
        return;
    }
    if (!region_ok()) {
        /* e.g. a forked child, or an NVML-only process, reading before any charge */
        pthread_mutex_lock(&g_mu);
        ensure_attached();
        pthread_mutex_unlock(&g_mu);
    }
    static uint64_t last_reclaim;
    uint64_t now = shim_now_ns();
    if (now - __atomic_load_n(&last_reclaim, __ATOMIC_RELAXED) > 1000000000ull) {
        /* Queries should not count processes that died since the last allocation. */
        __atomic_store_n(&last_reclaim, now, __ATOMIC_RELAXED);
        region_reclaim();
    }
    if (region_has_slot())
        maybe_reconcile(d);
    uint64_t total = d->mem_limit;
    if (d->mem_total && d->mem_total < total && !g_cfg.oversubscribe)
        total = d->mem_total;
    uint64_t used = region_usage(d->region_idx);
    uint64_t free = used < total ? total - used : 0;
    if (free > phys_free && !g_cfg.oversubscribe)
        free = phys_free; /* other tenants may hold the physical rest */
    *free_out = free;
    *total_out = total;
    if (used_out)
        *used_out = used;
}

__attribute__((destructor)) static void shim_fini(void)
{
    if (!__atomic_load_n(&g_cfg_loaded, __ATOMIC_ACQUIRE))
        return; /* never touched CUDA: nothing to undo */
    __atomic_store_n(&g_exiting, 1, __ATOMIC_RELAXED);
    region_on_exit();
}
