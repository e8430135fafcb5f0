/*
 * Memory: every allocation path reserves its size on the container's limit before
 * the driver is called and rolls the reservation back if the driver fails; frees
 * are always forwarded and return exactly what their allocation charged.
 */
#include <stdint.h>

#include "alloc_table.h"
#include "hooks.h"
#include "log.h"
#include "shim.h"

typedef struct {
    int active;
    CUdevice dev;
    dev_state *d;
    CUcontext ctx;
    uint64_t bytes;
} charge_ticket;

/* Reserves `bytes` on device `dev` (-1: the current context's device). Returns
 * CUDA_ERROR_OUT_OF_MEMORY when the container would pass its limit. */
static CUresult charge_begin(charge_ticket *t, uint64_t bytes, int dev)
{
    t->active = 0;
    if (bytes == 0 || shim_passthrough())
        return CUDA_SUCCESS; /* the driver judges empty requests */
    CUdevice cd;
    CUcontext ctx = NULL;
    if (shim_current_device(&cd, &ctx) != 0) {
        if (dev < 0)
            return CUDA_SUCCESS; /* no context: the driver reports that error itself */
        ctx = NULL;
    }
    if (dev >= 0)
        cd = dev;
    dev_state *d = shim_device(cd);
    if (d == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY; /* cannot tell which limit applies: fail closed */
    CUresult rc = shim_charge(d, bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    t->active = 1;
    t->dev = cd;
    t->d = d;
    t->ctx = ctx;
    t->bytes = bytes;
    return CUDA_SUCCESS;
}

/* Returns the charge of a record (and its host-backed share, if it has one). */
static void uncharge_rec(const alloc_rec *r)
{
    if (r->host)
        shim_uncharge_host_dev(r->dev, r->bytes);
    else
        shim_uncharge_dev(r->dev, r->bytes);
}

/* Keeps the charge and records the allocation under `key`, or rolls back. `host`:
 * satisfied from host-backed managed memory (oversubscription). */
static void charge_end_host(charge_ticket *t, CUresult rc, alloc_kind kind, uint64_t key, int host)
{
    if (!t->active)
        return;
    if (rc != CUDA_SUCCESS || key == 0) {
        shim_uncharge(t->d, t->bytes);
        return;
    }
    alloc_rec rec = {key, t->bytes, t->dev, t->ctx, host}, old;
    if (host)
        shim_mark_host(t->d, t->bytes);
    /* A reissued key means its earlier allocation was freed where no hook saw it. */
    if (atab_put(kind, &rec, &old))
        uncharge_rec(&old);
}

static void charge_end(charge_ticket *t, CUresult rc, alloc_kind kind, uint64_t key)
{
    charge_end_host(t, rc, kind, key, 0);
}

static void free_end(alloc_kind kind, int had, const alloc_rec *r, CUresult rc)
{
    if (!had)
        return;
    if (rc == CUDA_SUCCESS)
        uncharge_rec(r);
    else
        atab_put(kind, r, NULL); /* still allocated */
}

/* CUDA_OVERSUBSCRIBE: an allocation within the container's limit that the GPU cannot
 * hold (the driver said out of memory) is served from managed memory that prefers the
 * host, so the GPU reaches it over the bus instead of the application failing
 * (SHIM.md "Oversubscription"). Returns the driver's answer; the advice is best-effort
 * (a driver without it still pages the memory on demand). */
#define CU_MEM_ATTACH_GLOBAL 0x1u
#define CU_MEM_ADVISE_SET_PREFERRED_LOCATION 3
#define CU_MEM_ADVISE_SET_ACCESSED_BY 5
#define CU_DEVICE_CPU (-1)
static CUresult alloc_host_backed(CUdeviceptr *dptr, size_t bytes, CUdevice dev)
{
    cuMemAllocManaged_pfn managed = REAL(cuMemAllocManaged);
    if (managed == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = managed(dptr, bytes, CU_MEM_ATTACH_GLOBAL);
    if (rc != CUDA_SUCCESS) {
        LOG_INFO("oversubscription: cuMemAllocManaged(%zu) failed (%d)", bytes, rc);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* A CUmemLocation names a device by ordinal; the driver's CUdevice handles are
     * the ordinals (cuDeviceGet(&d, i) gives d == i). */
    const int ordinal = dev;
    cuMemAdvise_v2_pfn adv2 = REAL(cuMemAdvise_v2);
    cuMemAdvise_pfn adv1 = REAL(cuMemAdvise);
    CUresult a = CUDA_ERROR_NOT_SUPPORTED, b = CUDA_ERROR_NOT_SUPPORTED;
    if (adv2) {
        CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0}, gpu = {CU_MEM_LOCATION_TYPE_DEVICE, ordinal};
        a = adv2(*dptr, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host);
        b = adv2(*dptr, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, gpu);
    }
    if (a != CUDA_SUCCESS && adv1) {
        a = adv1(*dptr, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_DEVICE_CPU);
        b = adv1(*dptr, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, dev);
    }
    if (a != CUDA_SUCCESS || b != CUDA_SUCCESS)
        LOG_INFO("oversubscription: cuMemAdvise not applied (%d, %d); pages migrate on demand", a, b);
    LOG_INFO("oversubscription: %zu bytes on device %d served from host-backed managed memory",
             bytes, dev);
    return CUDA_SUCCESS;
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    if (a && b > UINT64_MAX / a)
        return UINT64_MAX;
    return a * b;
}

/* ---- device pointers --------------------------------------------------- */

SHIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    REAL_OR_RETURN(real, cuMemAlloc_v2, CUDA_ERROR_NOT_INITIALIZED);
    charge_ticket t;
    CUresult rc = charge_begin(&t, bytesize, -1);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = real(dptr, bytesize);
    int host = 0;
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && t.active && dptr && shim_cfg()->oversubscribe) {
        rc = alloc_host_backed(dptr, bytesize, t.dev);
        host = rc == CUDA_SUCCESS;
    }
    charge_end_host(&t, rc, TBL_PTR, rc == CUDA_SUCCESS && dptr ? *dptr : 0, host);
    return rc;
}

SHIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                        unsigned int ElementSizeBytes)
{
    REAL_OR_RETURN(real, cuMemAllocPitch_v2, CUDA_ERROR_NOT_INITIALIZED);
    /* The pitch is chosen by the driver: reserve an upper bound, then settle. */
    uint64_t est = mul_sat((WidthInBytes + 511) & ~(uint64_t)511, Height);
    charge_ticket t;
    CUresult rc = charge_begin(&t, est, -1);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (rc == CUDA_SUCCESS && t.active && pPitch && dptr) {
        uint64_t actual = mul_sat(*pPitch, Height);
        if (actual > t.bytes) {
            if (shim_charge(t.d, actual - t.bytes) != CUDA_SUCCESS) {
                cuMemFree_v2_pfn fr = REAL(cuMemFree_v2);
                if (fr)
                    fr(*dptr);
                shim_uncharge(t.d, t.bytes);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
        } else if (actual < t.bytes) {
            shim_uncharge(t.d, t.bytes - actual);
        }
        t.bytes = actual;
    }
    charge_end(&t, rc, TBL_PTR, rc == CUDA_SUCCESS && dptr ? *dptr : 0);
    return rc;
}

SHIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    REAL_OR_RETURN(real, cuMemAllocManaged, CUDA_ERROR_NOT_INITIALIZED);
    charge_ticket t;
    CUresult rc = charge_begin(&t, bytesize, -1);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = real(dptr, bytesize, flags);
    charge_end(&t, rc, TBL_PTR, rc == CUDA_SUCCESS && dptr ? *dptr : 0);
    return rc;
}

SHIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    REAL_OR_RETURN(real, cuMemFree_v2, CUDA_ERROR_NOT_INITIALIZED);
    alloc_rec r;
    int had = atab_take(TBL_PTR, dptr, &r);
    CUresult rc = real(dptr);
    free_end(TBL_PTR, had, &r, rc);
    return rc;
}

/* ---- stream-ordered allocations and pools ------------------------------- */

/* Stream 0 of a _ptsz entry point is the calling thread's default stream. */
static CUstream stream_of(CUstream s, int per_thread)
{
    return per_thread && s == NULL ? CU_STREAM_PER_THREAD : s;
}

static int capturing(CUstream s)
{
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    cuStreamIsCapturing_pfn f = REAL(cuStreamIsCapturing);
    return f && (f(s, &cap) != CUDA_SUCCESS || cap != CU_STREAM_CAPTURE_STATUS_NONE);
}

static CUresult alloc_async(cuMemAllocAsync_pfn real, int per_thread, CUdeviceptr *dptr, size_t bytesize,
                            CUstream s)
{
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    charge_ticket t;
    CUresult rc = charge_begin(&t, bytesize, -1);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = real(dptr, bytesize, s);
    int host = 0;
    /* Managed memory is usable at once, which a stream-ordered allocation allows; inside
     * a graph capture the allocation is a graph node and cannot be replaced. */
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && t.active && dptr && shim_cfg()->oversubscribe &&
        !capturing(stream_of(s, per_thread))) {
        rc = alloc_host_backed(dptr, bytesize, t.dev);
        host = rc == CUDA_SUCCESS;
    }
    charge_end_host(&t, rc, TBL_PTR, rc == CUDA_SUCCESS && dptr ? *dptr : 0, host);
    return rc;
}

SHIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(REAL(cuMemAllocAsync), 0, dptr, bytesize, hStream);
}

SHIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(REAL(cuMemAllocAsync_ptsz), 1, dptr, bytesize, hStream);
}

static CUresult free_async(cuMemFreeAsync_pfn real, int per_thread, CUdeviceptr dptr, CUstream s)
{
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    alloc_rec r;
    int had = atab_take(TBL_PTR, dptr, &r);
    CUresult rc;
    if (had && r.host) {
        /* Oversubscribed: managed memory, which only cuMemFree releases. Freed once the
         * stream's earlier work is done, as the stream-ordered free would have. */
        cuStreamSynchronize_pfn sync = REAL(cuStreamSynchronize);
        cuMemFree_v2_pfn fr = REAL(cuMemFree_v2);
        rc = sync ? sync(stream_of(s, per_thread)) : CUDA_SUCCESS;
        if (rc == CUDA_SUCCESS)
            rc = fr ? fr(dptr) : CUDA_ERROR_NOT_INITIALIZED;
    } else {
        rc = real(dptr, s);
    }
    free_end(TBL_PTR, had, &r, rc);
    return rc;
}

SHIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(REAL(cuMemFreeAsync), 0, dptr, hStream);
}

SHIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(REAL(cuMemFreeAsync_ptsz), 1, dptr, hStream);
}

static CUresult alloc_from_pool(cuMemAllocFromPoolAsync_pfn real, CUdeviceptr *dptr, size_t bytesize,
                                CUmemoryPool pool, CUstream s)
{
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    int dev = -1; /* pools we did not see created (device default pools): current device */
    alloc_rec pr;
    if (atab_get(TBL_POOL, (uint64_t)(uintptr_t)pool, &pr)) {
        if (pr.dev < 0)
            return real(dptr, bytesize, pool, s); /* host-located pool: not GPU memory */
        dev = pr.dev;
    }
    charge_ticket t;
    CUresult rc = charge_begin(&t, bytesize, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = real(dptr, bytesize, pool, s);
    charge_end(&t, rc, TBL_PTR, rc == CUDA_SUCCESS && dptr ? *dptr : 0);
    return rc;
}

SHIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream)
{
    return alloc_from_pool(REAL(cuMemAllocFromPoolAsync), dptr, bytesize, pool, hStream);
}

SHIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                  CUstream hStream)
{
    return alloc_from_pool(REAL(cuMemAllocFromPoolAsync_ptsz), dptr, bytesize, pool, hStream);
}

/* Ordinal in a CUmemLocation -> CUdevice handle. */
static int device_of_ordinal(int ordinal, CUdevice *dev)
{
    cuDeviceGet_pfn get = REAL(cuDeviceGet);
    return get && get(dev, ordinal) == CUDA_SUCCESS ? 0 : -1;
}

SHIM_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolPropsPrefix *poolProps)
{
    REAL_OR_RETURN(real, cuMemPoolCreate, CUDA_ERROR_NOT_INITIALIZED);
    CUresult rc = real(pool, poolProps);
    if (rc != CUDA_SUCCESS || pool == NULL || poolProps == NULL || shim_passthrough())
        return rc;
    alloc_rec r = {(uint64_t)(uintptr_t)*pool, 0, -1, NULL, 0};
    int type = poolProps->location.type;
    CUdevice dev;
    if (type == CU_MEM_LOCATION_TYPE_DEVICE && device_of_ordinal(poolProps->location.id, &dev) == 0) {
        r.dev = dev;
        atab_put(TBL_POOL, &r, NULL);
    } else if (type == CU_MEM_LOCATION_TYPE_HOST || type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
               type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
        atab_put(TBL_POOL, &r, NULL); /* dev -1: host memory, not charged */
    }
    return rc;
}

SHIM_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    REAL_OR_RETURN(real, cuMemPoolDestroy, CUDA_ERROR_NOT_INITIALIZED);
    CUresult rc = real(pool);
    alloc_rec r;
    if (rc == CUDA_SUCCESS)
        atab_take(TBL_POOL, (uint64_t)(uintptr_t)pool, &r);
    return rc;
}

/* ---- virtual memory management ------------------------------------------ */

SHIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                 unsigned long long flags)
{
    REAL_OR_RETURN(real, cuMemCreate, CUDA_ERROR_NOT_INITIALIZED);
    CUdevice dev;
    /* Host-located physical memory (HOST, HOST_NUMA...) is not charged to a GPU. */
    if (prop == NULL || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        device_of_ordinal(prop->location.id, &dev) != 0)
        return real(handle, size, prop, flags);
    charge_ticket t;
    CUresult rc = charge_begin(&t, size, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = real(handle, size, prop, flags);
    charge_end(&t, rc, TBL_VMM, rc == CUDA_SUCCESS && handle ? *handle : 0);
    return rc;
}

SHIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    REAL_OR_RETURN(real, cuMemRelease, CUDA_ERROR_NOT_INITIALIZED);
    alloc_rec r;
    int had = atab_take(TBL_VMM, handle, &r);
    CUresult rc = real(handle);
    free_end(TBL_VMM, had, &r, rc);
    return rc;
}

/* ---- arrays --------------------------------------------------------------- */

/* Bytes per channel of an array format; 4 (an upper bound) for video and other
 * multi-plane formats. The driver adds alignment, so arrays are an estimate. */
static uint64_t format_bytes(int format)
{
    switch (format) {
    case 0x01: case 0x08: case 0xc0: case 0xc1: case 0xc2: case 0xc6: case 0xc7: case 0xc8:
        return 1;
    case 0x02: case 0x09: case 0x10: case 0xc3: case 0xc4: case 0xc5: case 0xc9: case 0xca: case 0xcb:
        return 2;
    default:
        return 4;
    }
}

static uint64_t array_bytes(size_t w, size_t h, size_t d, int format, unsigned channels)
{
    uint64_t b = mul_sat(format_bytes(format), channels ? channels : 1);
    b = mul_sat(b, w);
    b = mul_sat(b, h ? h : 1);
    return mul_sat(b, d ? d : 1);
}

SHIM_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    REAL_OR_RETURN(real, cuArrayCreate_v2, CUDA_ERROR_NOT_INITIALIZED);
    uint64_t bytes = desc ? array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels) : 0;
    charge_ticket t;
    CUresult rc = charge_begin(&t, bytes, -1);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = real(pHandle, desc);
    charge_end(&t, rc, TBL_ARRAY, rc == CUDA_SUCCESS && pHandle ? (uint64_t)(uintptr_t)*pHandle : 0);
    return rc;
}

SHIM_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    REAL_OR_RETURN(real, cuArray3DCreate_v2, CUDA_ERROR_NOT_INITIALIZED);
    uint64_t bytes =
        desc ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels) : 0;
    charge_ticket t;
    CUresult rc = charge_begin(&t, bytes, -1);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = real(pHandle, desc);
    charge_end(&t, rc, TBL_ARRAY, rc == CUDA_SUCCESS && pHandle ? (uint64_t)(uintptr_t)*pHandle : 0);
    return rc;
}

SHIM_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
    REAL_OR_RETURN(real, cuArrayDestroy, CUDA_ERROR_NOT_INITIALIZED);
    alloc_rec r;
    int had = atab_take(TBL_ARRAY, (uint64_t)(uintptr_t)hArray, &r);
    CUresult rc = real(hArray);
    free_end(TBL_ARRAY, had, &r, rc);
    return rc;
}

/* ---- contexts: destroying one frees its allocations without cuMemFree -------- */

static void drop_context(CUcontext ctx)
{
    if (ctx == NULL)
        return;
    atab_drop_ctx(TBL_PTR, ctx, uncharge_rec);
    atab_drop_ctx(TBL_ARRAY, ctx, uncharge_rec);
}

SHIM_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    REAL_OR_RETURN(real, cuCtxDestroy_v2, CUDA_ERROR_NOT_INITIALIZED);
    CUresult rc = real(ctx);
    if (rc == CUDA_SUCCESS)
        drop_context(ctx);
    return rc;
}

SHIM_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    REAL_OR_RETURN(real, cuDevicePrimaryCtxReset_v2, CUDA_ERROR_NOT_INITIALIZED);
    /* Learn the primary context's handle without creating it (only if active). */
    CUcontext primary = NULL;
    unsigned flags = 0;
    int active = 0;
    cuDevicePrimaryCtxGetState_pfn state = REAL(cuDevicePrimaryCtxGetState);
    cuDevicePrimaryCtxRetain_pfn retain = REAL(cuDevicePrimaryCtxRetain);
    cuDevicePrimaryCtxRelease_v2_pfn release = REAL(cuDevicePrimaryCtxRelease_v2);
    if (state && retain && release && state(dev, &flags, &active) == CUDA_SUCCESS && active &&
        retain(&primary, dev) == CUDA_SUCCESS)
        release(dev);
    CUresult rc = real(dev);
    if (rc == CUDA_SUCCESS)
        drop_context(primary);
    return rc;
}

/* ---- the virtual device ------------------------------------------------------ */

SHIM_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    REAL_OR_RETURN(real, cuMemGetInfo_v2, CUDA_ERROR_NOT_INITIALIZED);
    CUresult rc = real(free, total);
    if (rc != CUDA_SUCCESS || free == NULL || total == NULL || shim_passthrough())
        return rc;
    CUdevice dev;
    if (shim_current_device(&dev, NULL) != 0)
        return rc;
    uint64_t f, t;
    shim_mem_view(shim_device(dev), *free, &f, &t, NULL);
    *free = f;
    *total = t;
    return rc;
}

SHIM_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    REAL_OR_RETURN(real, cuDeviceTotalMem_v2, CUDA_ERROR_NOT_INITIALIZED);
    CUresult rc = real(bytes, dev);
    if (rc != CUDA_SUCCESS || bytes == NULL || shim_passthrough())
        return rc;
    uint64_t f, t;
    shim_mem_view(shim_device(dev), UINT64_MAX, &f, &t, NULL);
    *bytes = t;
    return rc;
}
