/*
 * Per-process record of what the hooks charged, so a free can return exactly the
 * charge of its allocation: device pointers, VMM handles, arrays, memory pools.
 */
#ifndef HAMI_ALLOC_TABLE_H
#define HAMI_ALLOC_TABLE_H

#include <stdint.h>

#include "cuda_abi.h"

typedef enum { TBL_PTR = 0, TBL_VMM = 1, TBL_ARRAY = 2, TBL_POOL = 3, TBL_COUNT } alloc_kind;

typedef struct {
    uint64_t key;   /* CUdeviceptr, handle, CUarray or CUmemoryPool value */
    uint64_t bytes; /* charged bytes (pools: unused) */
    int dev;        /* CUdevice charged; pools: location device, -1 host */
    CUcontext ctx;  /* context current at allocation (pointers and arrays) */
    int host;       /* 1: oversubscribed, satisfied from host-backed managed memory */
} alloc_rec;

/* Inserts; if `key` was present (the driver reissued it), the old record is
 * returned in *old and 1 is returned. */
int atab_put(alloc_kind k, const alloc_rec *rec, alloc_rec *old);

/* Removes and returns the record of `key`; 0 when absent. */
int atab_take(alloc_kind k, uint64_t key, alloc_rec *out);

/* Looks up without removing; 0 when absent. */
int atab_get(alloc_kind k, uint64_t key, alloc_rec *out);

/* Removes every record of context `ctx` from `k`, calling `fn` on each. */
void atab_drop_ctx(alloc_kind k, CUcontext ctx, void (*fn)(const alloc_rec *));

/* In a forked child: the parent's allocations are not the child's. */
void atab_reset_after_fork(void);

#endif
