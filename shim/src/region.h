/*
 * The container's shared region: a memory-mapped file (layout in region_layout.h and
 * REGION.md) through which all processes of a container share one memory limit and
 * one compute budget per device, keyed by device UUID.
 *
 * Writers serialize on an fcntl lock (open-file-description lock on byte 0, classic
 * POSIX lock where OFD locks are unsupported) that the kernel drops when the holder
 * dies, plus a process mutex for threads. Every wait is bounded.
 */
#ifndef HAMI_REGION_H
#define HAMI_REGION_H

#include <stddef.h>
#include <stdint.h>

#include "region_layout.h"

typedef enum {
    RES_OK = 0,
    RES_OVER_LIMIT = 1, /* the container would pass the limit */
    RES_ERROR = 2,      /* region unusable or lock not taken in time */
} reserve_result;

/* Opens, creates or validates the region file. 0 on success; -1 with `err` filled
 * (the caller then fails closed). Idempotent; thread-safe. */
int region_attach(const char *path, int lock_timeout_ms, char *err, size_t errlen);

/* 1 when attached and usable. */
int region_ok(void);

/* Registers `uuid` in the device table (or finds it) and publishes the limits this
 * process enforces. Returns the table index, or -1. */
int region_device(const char *uuid, uint64_t mem_limit, uint64_t mem_total, int sm_limit,
                  int fenced, const char *reason);

/* Takes (or re-takes after exec) this process's slot. 0 on success. */
int region_register_self(int priority, int fenced);

/* Charges `bytes` on device index `dev` to this process if the container stays within
 * `limit`; compare-and-add under the lock. */
reserve_result region_reserve(int dev, uint64_t bytes, uint64_t limit);

/* Returns a charge (never below zero). Lock-free: only this process writes its slot. */
void region_release(int dev, uint64_t bytes);

/* The host-backed (oversubscribed) part of this process's used_bytes on `dev`: added
 * after a charge was satisfied with managed memory, subtracted at its free. */
void region_add_oversub(int dev, uint64_t bytes);
void region_sub_oversub(int dev, uint64_t bytes);

/* Container-wide host-backed bytes on device index `dev` (sum over live slots). */
uint64_t region_oversub(int dev);

/* Container-wide usage on device index `dev`, bytes (sum over live slots). */
uint64_t region_usage(int dev);

/* 1 when this process holds a slot (lock-free check). */
int region_has_slot(void);

/* Bytes this process has charged on `dev`. */
uint64_t region_my_used(int dev);

/* Sets this process's untracked bytes (NVML reconciliation) on `dev`. */
void region_set_untracked(int dev, uint64_t bytes);

/* Adds measured GPU time / launches to this process's slot. */
void region_add_busy(int dev, uint64_t busy_ns, uint64_t launches);

/* Throttle virtual time of device index `dev` (NULL when not attached). */
int64_t *region_tat(int dev);

/* Number of live slots that used device index `dev` (launched or allocated). */
int region_active_processes(int dev);

/* Reclaims slots of dead processes now (normally done lazily). */
void region_reclaim(void);

/* Marks the device as throttled or not, for the monitor. */
void region_set_throttled(int dev, int on);

/* fork() handlers: hold the process mutex across fork; in the child, forget the
 * parent's slot and lock and re-attach lazily. */
void region_fork_prepare(void);
void region_fork_parent(void);
void region_after_fork_child(void);

/* At exit: return this process's slot. */
void region_on_exit(void);

#endif
