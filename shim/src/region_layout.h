/*
 * On-disk layout of the shared region file, version 2 (version 1 plus a table
 * appended after the slots). shim/REGION.md documents it
 * field by field; backends/hami-nvidia/hami_nvidia/shared_region.py reads it. A test
 * (tests/shim/test_region_layout.py) compares the offsets below with the reader's.
 * Change anything here only together with REGION_VERSION, REGION.md and the reader.
 */
#ifndef HAMI_REGION_LAYOUT_H
#define HAMI_REGION_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define REGION_MAGIC "HAMIVGPU" /* 8 bytes, no terminating NUL in the file */
#define REGION_VERSION 2u
#define REGION_VERSION_V1 1u /* same layout without the oversubscription table */
#define REGION_MAX_DEVICES 16u
#define REGION_MAX_SLOTS 1024u
#define REGION_UUID_LEN 96u
#define REGION_REASON_LEN 128u
#define REGION_LOCK_LEN 64u
#define REGION_HEADER_SIZE 4096u /* header + device table, padded to one page */

/* region_header.flags */
#define REGION_FLAG_FENCED 0x1u /* some process runs fail-closed, see fence_reason */
/* region_device.flags */
#define REGION_DEV_FENCED 0x1u   /* last registering process fails closed on it */
#define REGION_DEV_THROTTLED 0x2u /* compute throttle active when last checked */
/* region_slot.flags */
#define REGION_SLOT_FENCED 0x1u   /* this process fails closed on at least one device */

struct region_header {
    char magic[8];              /* "HAMIVGPU", written last at creation */
    uint32_t version;           /* REGION_VERSION */
    uint32_t header_size;       /* byte offset of slot 0 */
    uint32_t device_entry_size; /* sizeof(struct region_device) */
    uint32_t max_devices;       /* entries in the device table */
    uint32_t slot_size;         /* sizeof(struct region_slot) */
    uint32_t max_slots;         /* slots after the header */
    uint64_t file_size;         /* header_size + max_slots * slot_size */
    uint64_t created_unix_ns;   /* CLOCK_REALTIME at creation */
    uint32_t device_count;      /* device entries in use, [0, device_count) */
    uint32_t slot_hwm;          /* slots [0, slot_hwm) may be in use */
    uint32_t flags;             /* REGION_FLAG_* */
    uint32_t reserved0;
    /* Writers' lock: a process-shared robust pthread mutex (opaque to readers). The
     * kernel marks it owner-dead when its holder dies; waits on it are bounded. */
    unsigned char lock[REGION_LOCK_LEN];
    char fence_reason[REGION_REASON_LEN]; /* NUL-terminated, latest fail-closed cause */
};

struct region_device {
    char uuid[REGION_UUID_LEN]; /* "GPU-..." NUL-terminated; the key of usage */
    uint64_t mem_limit;         /* bytes, as the last registering process enforces */
    uint64_t mem_total;         /* bytes, physical size reported by the driver */
    int64_t tat_ns;             /* throttle virtual time, CLOCK_MONOTONIC ns */
    uint32_t sm_limit;          /* percent of the device, 0 = unlimited */
    uint32_t flags;             /* REGION_DEV_* */
    uint64_t exited_busy_ns;    /* busy_ns of the slots of processes that left, ns */
    uint64_t exited_launches;   /* launches of the slots of processes that left */
    uint64_t reserved[2];
};

struct region_slot_device {
    uint64_t used_bytes;      /* device memory charged by the hooks, bytes */
    uint64_t untracked_bytes; /* NVML per-process usage beyond used_bytes, bytes */
    uint64_t busy_ns;         /* GPU time of the process's kernel launches, ns */
    uint64_t launches;        /* kernel launches of the process */
};

struct region_slot {
    int32_t pid;              /* 0 = free; written last when a slot is taken */
    uint32_t flags;           /* REGION_SLOT_* */
    uint64_t start_time;      /* /proc/<pid>/stat field 22, clock ticks after boot */
    int32_t priority;         /* CUDA_TASK_PRIORITY, -1 unset */
    uint32_t reserved0;
    uint64_t attach_unix_ns;  /* CLOCK_REALTIME when the slot was taken */
    uint64_t reserved[4];
    struct region_slot_device dev[REGION_MAX_DEVICES]; /* indexed like the device table */
};

struct region_file {
    struct region_header hdr;
    struct region_device devices[REGION_MAX_DEVICES];
};

/* Version 1 ended after the slots; version 2 appends, at that offset, the host-backed
 * (oversubscribed) part of every slot's used_bytes: uint64_t [max_slots][max_devices].
 * Nothing before it moved, so a version-1 file is upgraded in place by extending it. */
#define REGION_V1_FILE_SIZE ((uint64_t)REGION_HEADER_SIZE + (uint64_t)REGION_MAX_SLOTS * sizeof(struct region_slot))
#define REGION_OVERSUB_OFFSET REGION_V1_FILE_SIZE
#define REGION_OVERSUB_SIZE ((uint64_t)REGION_MAX_SLOTS * REGION_MAX_DEVICES * sizeof(uint64_t))
#define REGION_FILE_SIZE (REGION_V1_FILE_SIZE + REGION_OVERSUB_SIZE)

_Static_assert(sizeof(struct region_header) == 256, "header layout");
_Static_assert(sizeof(struct region_device) == 160, "device layout");
_Static_assert(sizeof(struct region_slot_device) == 32, "slot device layout");
_Static_assert(sizeof(struct region_slot) == 64 + 32 * REGION_MAX_DEVICES, "slot layout");
_Static_assert(offsetof(struct region_file, devices) == 256, "device table offset");
_Static_assert(sizeof(struct region_file) <= REGION_HEADER_SIZE, "header fits its page");
_Static_assert(offsetof(struct region_device, tat_ns) % 8 == 0, "atomic alignment");
_Static_assert(REGION_V1_FILE_SIZE == 593920, "version 1 size");
_Static_assert(REGION_FILE_SIZE == 724992, "version 2 size");

#endif
