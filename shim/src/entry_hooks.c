/*
 * Entry points: cuInit (first contact with CUDA) and cuGetProcAddress /
 * cuGetProcAddress_v2, how the CUDA runtime (11.3+) fetches every driver entry point.
 *
 * The real function runs first with the caller's version and flags. Its answer is
 * swapped for a hook only when it is provably the entry point the hook stands for,
 * hence has the same signature:
 *   1. it is the driver's exported definition of that function (same address), or
 *   2. the driver gives the same answer when asked for the symbol at the version
 *      (and stream flavour) that introduced the hooked variant, for drivers whose
 *      resolver hands out internal addresses rather than exported ones.
 * A variant newer than the hooked one (a future _v3) fails both tests and is left
 * alone rather than given a hook of the wrong signature.
 */
#include <string.h>

#include "hooks.h"
#include "log.h"
#include "shim.h"

/* The CUDA version that introduced each hooked variant, as cuda.h versions them. */
static const struct {
    const char *base;
    int since;
    int per_thread; /* the _ptsz flavour, chosen with PER_THREAD_DEFAULT_STREAM */
    enum real_symbol real;
} g_variants[] = {
    {"cuInit", 2000, 0, RS_cuInit},
    {"cuDeviceTotalMem", 3020, 0, RS_cuDeviceTotalMem_v2},
    {"cuMemGetInfo", 3020, 0, RS_cuMemGetInfo_v2},
    {"cuMemAlloc", 3020, 0, RS_cuMemAlloc_v2},
    {"cuMemAllocPitch", 3020, 0, RS_cuMemAllocPitch_v2},
    {"cuMemAllocManaged", 6000, 0, RS_cuMemAllocManaged},
    {"cuMemFree", 3020, 0, RS_cuMemFree_v2},
    {"cuMemAllocAsync", 11020, 0, RS_cuMemAllocAsync},
    {"cuMemAllocAsync", 11020, 1, RS_cuMemAllocAsync_ptsz},
    {"cuMemFreeAsync", 11020, 0, RS_cuMemFreeAsync},
    {"cuMemFreeAsync", 11020, 1, RS_cuMemFreeAsync_ptsz},
    {"cuMemAllocFromPoolAsync", 11020, 0, RS_cuMemAllocFromPoolAsync},
    {"cuMemAllocFromPoolAsync", 11020, 1, RS_cuMemAllocFromPoolAsync_ptsz},
    {"cuMemPoolCreate", 11020, 0, RS_cuMemPoolCreate},
    {"cuMemPoolDestroy", 11020, 0, RS_cuMemPoolDestroy},
    {"cuMemCreate", 10020, 0, RS_cuMemCreate},
    {"cuMemRelease", 10020, 0, RS_cuMemRelease},
    {"cuArrayCreate", 3020, 0, RS_cuArrayCreate_v2},
    {"cuArray3DCreate", 3020, 0, RS_cuArray3DCreate_v2},
    {"cuArrayDestroy", 2000, 0, RS_cuArrayDestroy},
    {"cuCtxDestroy", 4000, 0, RS_cuCtxDestroy_v2},
    {"cuDevicePrimaryCtxReset", 11000, 0, RS_cuDevicePrimaryCtxReset_v2},
    {"cuLaunchKernel", 4000, 0, RS_cuLaunchKernel},
    {"cuLaunchKernel", 7000, 1, RS_cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", 11060, 0, RS_cuLaunchKernelEx},
    {"cuLaunchKernelEx", 11060, 1, RS_cuLaunchKernelEx_ptsz},
    {"cuLaunchCooperativeKernel", 9000, 0, RS_cuLaunchCooperativeKernel},
    {"cuLaunchCooperativeKernel", 9000, 1, RS_cuLaunchCooperativeKernel_ptsz},
    {"cuGraphLaunch", 10000, 0, RS_cuGraphLaunch},
    {"cuGraphLaunch", 10000, 1, RS_cuGraphLaunch_ptsz},
    {"cuGetProcAddress", 11030, 0, RS_cuGetProcAddress},
    {"cuGetProcAddress", 12000, 0, RS_cuGetProcAddress_v2},
};

/* The driver's resolver, whichever it exports. */
static void *resolve(const char *symbol, int version, cuuint64_t flags)
{
    void *p = NULL;
    cuGetProcAddress_v2_pfn v2 = REAL(cuGetProcAddress_v2);
    cuGetProcAddress_pfn v1 = REAL(cuGetProcAddress);
    int rc = v2 ? v2(symbol, &p, version, flags, NULL) : v1 ? v1(symbol, &p, version, flags) : -1;
    return rc == CUDA_SUCCESS ? p : NULL;
}

static const hook_entry *hook_by_version(const char *symbol, void *p)
{
    for (size_t i = 0; i < sizeof g_variants / sizeof g_variants[0]; i++) {
        if (strcmp(g_variants[i].base, symbol) != 0)
            continue;
        cuuint64_t f = g_variants[i].per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                                : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
        if (resolve(symbol, g_variants[i].since, f) == p)
            return hook_for_symbol(g_variants[i].real);
    }
    return NULL;
}

static void swap(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    if (symbol == NULL || pfn == NULL || *pfn == NULL || shim_passthrough())
        return;
    const hook_entry *e = hook_for_real(*pfn);
    if (e == NULL)
        e = hook_by_version(symbol, *pfn);
    if (e) {
        LOG_DEBUG("cuGetProcAddress(%s, %d, %llu) -> hook %s", symbol, version, (unsigned long long)flags,
                  e->name);
        *pfn = e->hook;
    }
}

SHIM_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    REAL_OR_RETURN(real, cuGetProcAddress, CUDA_ERROR_NOT_FOUND);
    CUresult rc = real(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS)
        swap(symbol, pfn, cudaVersion, flags);
    return rc;
}

SHIM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult *symbolStatus)
{
    REAL_OR_RETURN(real, cuGetProcAddress_v2, CUDA_ERROR_NOT_FOUND);
    CUresult rc = real(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (rc == CUDA_SUCCESS)
        swap(symbol, pfn, cudaVersion, flags);
    return rc;
}

SHIM_EXPORT CUresult cuInit(unsigned int flags)
{
    REAL_OR_RETURN(real, cuInit, CUDA_ERROR_NOT_INITIALIZED);
    CUresult rc = real(flags);
    /* First contact with CUDA: join the container's region, so the process is
     * visible to the monitor before it allocates. */
    if (rc == CUDA_SUCCESS && !shim_passthrough())
        (void)shim_ensure_registered();
    return rc;
}
