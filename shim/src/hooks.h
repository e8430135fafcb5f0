/*
 * The explicit list of interposed functions. Each hook has the name and signature
 * of the real entry point (declared from REAL_FUNCTIONS), is exported from the
 * library, and is what dlsym() and cuGetProcAddress() hand out in its place.
 * Nothing is ever redirected by name prefix.
 */
#ifndef HAMI_HOOKS_H
#define HAMI_HOOKS_H

#include "real_driver.h"

#define HOOKED_FUNCTIONS(X)                                                          \
    X(cuInit)                                                                        \
    X(cuDeviceTotalMem_v2)                                                           \
    X(cuMemGetInfo_v2)                                                               \
    X(cuMemAlloc_v2)                                                                 \
    X(cuMemAllocPitch_v2)                                                            \
    X(cuMemAllocManaged)                                                             \
    X(cuMemFree_v2)                                                                  \
    X(cuMemAllocAsync)                                                               \
    X(cuMemAllocAsync_ptsz)                                                          \
    X(cuMemFreeAsync)                                                                \
    X(cuMemFreeAsync_ptsz)                                                           \
    X(cuMemAllocFromPoolAsync)                                                       \
    X(cuMemAllocFromPoolAsync_ptsz)                                                  \
    X(cuMemPoolCreate)                                                               \
    X(cuMemPoolDestroy)                                                              \
    X(cuMemCreate)                                                                   \
    X(cuMemRelease)                                                                  \
    X(cuArrayCreate_v2)                                                              \
    X(cuArray3DCreate_v2)                                                            \
    X(cuArrayDestroy)                                                                \
    X(cuCtxDestroy_v2)                                                               \
    X(cuDevicePrimaryCtxReset_v2)                                                    \
    X(cuLaunchKernel)                                                                \
    X(cuLaunchKernel_ptsz)                                                           \
    X(cuLaunchKernelEx)                                                              \
    X(cuLaunchKernelEx_ptsz)                                                         \
    X(cuLaunchCooperativeKernel)                                                     \
    X(cuLaunchCooperativeKernel_ptsz)                                                \
    X(cuGraphLaunch)                                                                 \
    X(cuGraphLaunch_ptsz)                                                            \
    X(cuGetProcAddress)                                                              \
    X(cuGetProcAddress_v2)                                                           \
    X(nvmlDeviceGetMemoryInfo)                                                       \
    X(nvmlDeviceGetMemoryInfo_v2)

#define X(name) extern name##_fn name;
HOOKED_FUNCTIONS(X)
#undef X

typedef struct {
    const char *name;
    enum real_symbol real; /* the real function the hook stands for */
    void *hook;
} hook_entry;

/* The hook named exactly `name`, or NULL. */
const hook_entry *hook_find(const char *name);

/* The hook standing for real function `id`, or NULL. */
const hook_entry *hook_for_symbol(enum real_symbol id);

/* The hook standing for the real driver entry point `p`, or NULL. Matching the
 * address (not the name) guarantees the signatures agree: cuGetProcAddress may
 * return a different version (_v2, _ptsz, ...) than the name suggests. */
const hook_entry *hook_for_real(void *p);

#define REAL_OR_RETURN(var, name, err)  \
    name##_pfn var = REAL(name);        \
    if (var == NULL)                    \
        return (err)

#endif
