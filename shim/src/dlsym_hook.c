/*
 * dlsym() interposition. The CUDA runtime, PyTorch and ctypes reach the driver with
 * dlopen("libcuda.so.1") + dlsym(handle, name); a lookup on a specific handle never
 * sees a preloaded library, so without this the limits would not apply to them.
 */
#include <dlfcn.h>
#include <string.h>

#include "hooks.h"
#include "log.h"
#include "shim.h"

static void *lookup_on_handle(dlsym_pfn real, void *handle, const char *name)
{
    void *p = real(handle, name);
    if (p == NULL || name == NULL)
        return p;
    /* Cheap filter first: this runs for every dlsym of every process. */
    if (!(name[0] == 'c' && name[1] == 'u') && strncmp(name, "nvml", 4) != 0)
        return p;
    const hook_entry *e = hook_find(name);
    if (e == NULL || p == e->hook)
        return p;
    /* Only the driver's own definition is replaced: the library must already be
     * loaded (it is, if p came from it) and p must be its entry point. */
    void *out = p;
    if (real_library(real_sym_lib(e->real), 0) != NULL && real_sym(e->real) == p) {
        out = e->hook;
        LOG_DEBUG("dlsym(%s) -> hook", name);
    }
    (void)dlerror(); /* the lookup succeeded: leave no error from our own lookups */
    return out;
}

SHIM_EXPORT void *dlsym(void *handle, const char *name)
{
    dlsym_pfn real = real_dlsym();
    if (real == NULL)
        return NULL;
    /* RTLD_NEXT and RTLD_DEFAULT resolve relative to the caller, which glibc finds
     * from the return address: these must be tail calls so the caller stays the
     * application, not this library. Preloaded hooks win RTLD_DEFAULT anyway. */
    if (handle == RTLD_NEXT || handle == RTLD_DEFAULT)
        return real(handle, name);
    return lookup_on_handle(real, handle, name);
}
