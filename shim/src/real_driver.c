#include "real_driver.h"

#include <dlfcn.h>
#include <stddef.h>

#include "log.h"

static const struct {
    const char *name;
    const char *alt;
    int lib;
} g_syms[RS_COUNT] = {
#define X(name, alt, lib, args) {#name, alt, lib},
    REAL_FUNCTIONS(X)
#undef X
};

/* A resolved-and-absent entry is cached as this value so lookups are not repeated. */
#define ABSENT ((void *)1)

static void *g_real[RS_COUNT];
static void *g_lib[2];
static dlsym_pfn g_dlsym;

static const char *const g_lib_names[2] = {"libcuda.so.1", "libnvidia-ml.so.1"};

dlsym_pfn real_dlsym(void)
{
    dlsym_pfn f = __atomic_load_n(&g_dlsym, __ATOMIC_ACQUIRE);
    if (f)
        return f;
    /* dlvsym is not interposed, so it reaches the C library's dlsym. The version
     * differs by glibc release and architecture; try the known ones, newest first. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0] && !f; i++)
        f = (dlsym_pfn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    if (f)
        __atomic_store_n(&g_dlsym, f, __ATOMIC_RELEASE);
    return f;
}

void *real_library(int lib, int load)
{
    void *h = __atomic_load_n(&g_lib[lib], __ATOMIC_ACQUIRE);
    if (h)
        return h;
    h = dlopen(g_lib_names[lib], RTLD_LAZY | RTLD_LOCAL | (load ? 0 : RTLD_NOLOAD));
    if (h == NULL) {
        /* Always consume the error: the application's next dlerror() must not see it. */
        const char *why = dlerror();
        if (load)
            LOG_WARN("cannot load %s: %s", g_lib_names[lib], why ? why : "?");
        return NULL;
    }
    void *expected = NULL;
    if (!__atomic_compare_exchange_n(&g_lib[lib], &expected, h, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        dlclose(h); /* another thread won; drop our extra reference */
        h = expected;
    }
    return h;
}

void *real_sym(enum real_symbol id)
{
    void *p = __atomic_load_n(&g_real[id], __ATOMIC_ACQUIRE);
    if (p)
        return p == ABSENT ? NULL : p;
    dlsym_pfn ds = real_dlsym();
    void *h = real_library(g_syms[id].lib, 1);
    if (ds == NULL || h == NULL)
        return NULL; /* not cached: the library may become loadable later */
    p = ds(h, g_syms[id].name);
    if (p == NULL && g_syms[id].alt)
        p = ds(h, g_syms[id].alt);
    if (p == NULL) {
        (void)dlerror(); /* see real_library() */
        LOG_DEBUG("%s not found in %s", g_syms[id].name, g_lib_names[g_syms[id].lib]);
    }
    __atomic_store_n(&g_real[id], p ? p : ABSENT, __ATOMIC_RELEASE);
    return p;
}

const char *real_sym_name(enum real_symbol id)
{
    return g_syms[id].name;
}

int real_sym_lib(enum real_symbol id)
{
    return g_syms[id].lib;
}
