/*
 * Process-wide state of the library: configuration, the devices this process has
 * seen (keyed by UUID), memory charging, fork and exit handling. Everything is
 * initialized lazily by the first hooked call, so a process that never touches
 * CUDA or NVML runs exactly as without the library.
 */
#ifndef HAMI_SHIM_H
#define HAMI_SHIM_H

#include <stdint.h>

#include "config.h"
#include "cuda_abi.h"

#define SHIM_EXPORT __attribute__((visibility("default")))
#define SHIM_MAX_DEVICES 64

typedef struct dev_state {
    char uuid[CFG_UUID_LEN];
    int container_index; /* index into the container's device list, -1 unknown */
    int region_idx;      /* device table index in the shared region, -1 none */
    int fenced;          /* fail closed: no memory at all */
    char reason[CFG_REASON_LEN];
    uint64_t mem_limit;  /* bytes */
    uint64_t mem_total;  /* physical bytes */
    int sm_limit;        /* percent; 0 = unlimited */
    uint64_t reconciled_ns; /* last NVML reconciliation, CLOCK_MONOTONIC */
    /* task priority (priority.c) */
    int prio_fd;             /* high: own beat file, -1 not open */
    int prio_tried;          /* high: opening it was attempted */
    uint64_t prio_beat_ns;   /* high: last beat written */
    uint64_t prio_checked_ns; /* low: last look at the board */
    int prio_yielding;       /* low: a high-priority container was active then */
} dev_state;

/* Configuration (loaded on first use, registers the fork handlers). */
const shim_config *shim_cfg(void);

/* 1 when the library must only forward calls (CUDA_DISABLE_CONTROL, or exiting). */
int shim_passthrough(void);

/* Device state by CUDA device handle / by UUID (NVML path); NULL when the device
 * cannot be identified (callers fail closed for allocations). */
dev_state *shim_device(CUdevice dev);
dev_state *shim_device_by_uuid(const char *uuid, uint64_t phys_total);

/* Device of the calling thread's current context; 0 on success. */
int shim_current_device(CUdevice *dev, CUcontext *ctx);

/* Attaches the region and takes this process's slot; 0 when ready. */
int shim_ensure_registered(void);

/* Charges `bytes` on `d`: CUDA_SUCCESS or CUDA_ERROR_OUT_OF_MEMORY. */
int shim_charge(dev_state *d, uint64_t bytes);
void shim_uncharge(dev_state *d, uint64_t bytes);
void shim_uncharge_dev(CUdevice dev, uint64_t bytes);

/* Oversubscription: `bytes` already charged on `d` were satisfied from host-backed
 * managed memory (reported apart in the region), or such an allocation was freed
 * (returns the charge and the host-backed record). */
void shim_mark_host(dev_state *d, uint64_t bytes);
void shim_uncharge_host_dev(CUdevice dev, uint64_t bytes);

/* The virtual device: total = min(limit, physical), used = container usage,
 * free = max(0, total - used), and never more than physically free. With
 * CUDA_OVERSUBSCRIBE the limit is the total (it may pass the physical size) and free
 * is not capped by the physically free memory: what the GPU lacks comes from the host. */
void shim_mem_view(dev_state *d, uint64_t phys_free, uint64_t *free_out, uint64_t *total_out,
                   uint64_t *used_out);

/* Formats a CUDA UUID as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
void shim_format_uuid(const CUuuid *u, char *out, unsigned len);

uint64_t shim_now_ns(void);
void shim_sleep_ns(uint64_t ns);

#endif
