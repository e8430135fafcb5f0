/*
 * Stand-in libcuda.so.1 for tests: a configurable list of fake devices (see
 * stub_config.h) with memory accounting, primary and created contexts, pools, VMM
 * handles, arrays, events, cuGetProcAddress with versioned and per-thread variants,
 * and a simulated GPU: kernels queue on one timeline per process and take a known
 * time, so tests can measure the duty cycle a throttle achieves.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_abi.h"
#include "stub_config.h"

#define API __attribute__((visibility("default")))

/* ---- devices and contexts ------------------------------------------------- */

struct ctx {
    int dev; /* physical index */
    int primary;
    int refcount;
    int alive;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_initialized;
static int g_visible[STUB_MAX_GPUS]; /* CUDA ordinal -> physical index */
static int g_nvisible;
static struct ctx g_primary[STUB_MAX_GPUS];
static __thread struct ctx *t_current;
static const char *g_last_call = "";

static void set_last(const char *name)
{
    __atomic_store_n(&g_last_call, name, __ATOMIC_RELAXED);
}

/* CUDA_VISIBLE_DEVICES: indices or UUID prefixes; the list ends at the first
 * entry that matches nothing, as with the real driver. */
static void parse_visible(const stub_gpus *g)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    g_nvisible = 0;
    if (cvd == NULL) {
        for (int i = 0; i < g->n; i++)
            g_visible[g_nvisible++] = i;
        return;
    }
    const char *p = cvd;
    while (*p && g_nvisible < STUB_MAX_GPUS) {
        size_t len = strcspn(p, ",");
        char item[80];
        if (len >= sizeof item)
            break;
        memcpy(item, p, len);
        item[len] = 0;
        int found = -1;
        if (item[0] >= '0' && item[0] <= '9') {
            int idx = atoi(item);
            if (idx < g->n)
                found = idx;
        } else {
            for (int i = 0; i < g->n; i++)
                if (strncmp(g->uuid[i], item, len) == 0)
                    found = i;
        }
        if (found < 0)
            break;
        g_visible[g_nvisible++] = found;
        p += len;
        if (*p == ',')
            p++;
    }
}

static int phys(CUdevice dev)
{
    return (dev >= 0 && dev < g_nvisible) ? g_visible[dev] : -1;
}

static pthread_mutex_t g_gpu_mu; /* defined with the simulated GPU below */

/* The stand-in must itself survive fork() while another thread is inside it, or the
 * fork tests would test it instead of the library. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&g_mu);
    pthread_mutex_lock(&g_gpu_mu);
}

static void fork_release(void)
{
    pthread_mutex_unlock(&g_gpu_mu);
    pthread_mutex_unlock(&g_mu);
}

API CUresult cuInit(unsigned int flags)
{
    (void)flags;
    pthread_mutex_lock(&g_mu);
    if (!g_initialized) {
        pthread_atfork(fork_prepare, fork_release, fork_release);
        parse_visible(stub_gpus_get());
        g_initialized = 1;
    }
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

#define NEED_INIT()                      \
    if (!g_initialized)                  \
    return CUDA_ERROR_NOT_INITIALIZED

API CUresult cuDriverGetVersion(int *v)
{
    *v = 12080;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *n)
{
    NEED_INIT();
    *n = g_nvisible;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    NEED_INIT();
    if (ordinal < 0 || ordinal >= g_nvisible)
        return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    NEED_INIT();
    if (phys(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    strncpy(name, "Stub GPU", (size_t)len);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice dev)
{
    NEED_INIT();
    int p = phys(dev);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    memcpy(u->bytes, stub_gpus_get()->uuid_bytes[p], 16);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice dev)
{
    return cuDeviceGetUuid(u, dev);
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    NEED_INIT();
    int p = phys(dev);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = stub_gpus_get()->mem[p];
    return CUDA_SUCCESS;
}

/* Legacy 32-bit variant: exists so cuGetProcAddress can hand out an entry point of
 * another signature for old versions. */
API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    size_t b;
    CUresult rc = cuDeviceTotalMem_v2(&b, dev);
    if (rc == CUDA_SUCCESS)
        *bytes = b > 0xffffffffu ? 0xffffffffu : (unsigned)b;
    return rc;
}

API CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice dev)
{
    NEED_INIT();
    int p = phys(dev);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *v = attr == 16 /* MULTIPROCESSOR_COUNT */ ? stub_gpus_get()->sms[p] : 0;
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    NEED_INIT();
    int p = phys(dev);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_mu);
    g_primary[p].dev = p;
    g_primary[p].primary = 1;
    g_primary[p].alive = 1;
    g_primary[p].refcount++;
    pthread_mutex_unlock(&g_mu);
    *pctx = (CUcontext)&g_primary[p];
    return CUDA_SUCCESS;
}

static void free_ctx_allocations(struct ctx *c);

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    int p = phys(dev);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_mu);
    int destroy = g_primary[p].refcount > 0 && --g_primary[p].refcount == 0;
    pthread_mutex_unlock(&g_mu);
    if (destroy) {
        free_ctx_allocations(&g_primary[p]);
        g_primary[p].alive = 0;
    }
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    int p = phys(dev);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    free_ctx_allocations(&g_primary[p]);
    g_primary[p].alive = 0;
    g_primary[p].refcount = 0;
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    int p = phys(dev);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = g_primary[p].alive;
    return CUDA_SUCCESS;
}

API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    (void)flags;
    NEED_INIT();
    int p = phys(dev);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    struct ctx *c = calloc(1, sizeof *c);
    c->dev = p;
    c->alive = 1;
    t_current = c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    struct ctx *c = (struct ctx *)ctx;
    if (c == NULL || c->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    free_ctx_allocations(c);
    if (t_current == c)
        t_current = NULL;
    c->alive = 0; /* leaked on purpose: handles stay comparable */
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    t_current = (struct ctx *)ctx;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(CUcontext *ctx)
{
    NEED_INIT();
    *ctx = (CUcontext)t_current;
    return CUDA_SUCCESS;
}

static struct ctx *current(void)
{
    return (t_current && t_current->alive) ? t_current : NULL;
}

API CUresult cuCtxGetDevice(CUdevice *dev)
{
    NEED_INIT();
    struct ctx *c = current();
    if (c == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    for (int i = 0; i < g_nvisible; i++)
        if (g_visible[i] == c->dev) {
            *dev = i;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_CONTEXT;
}

/* ---- memory ----------------------------------------------------------------- */

enum { K_PTR, K_VMM, K_ARRAY };

/* Managed memory's advised preferred location: none yet, the host, or a device. */
enum { PREF_NONE = -3, PREF_HOST = -1 };

struct alloc {
    unsigned long long key;
    uint64_t bytes;
    int dev;      /* physical; -1: host memory */
    int kind;
    struct ctx *ctx;
    int managed;  /* cuMemAllocManaged: host-backed until touched (never in g_used) */
    int pref;     /* PREF_* or the physical device of CU_MEM_ADVISE_SET_PREFERRED_LOCATION */
    int accessed_by; /* physical device of CU_MEM_ADVISE_SET_ACCESSED_BY, -1 none */
};

static struct alloc *g_allocs;
static size_t g_nallocs, g_capallocs;
static uint64_t g_next_key = 0x7f0000000000ull;
static int64_t g_used[STUB_MAX_GPUS]; /* this process */
static uint64_t g_managed_bytes;       /* this process's managed memory */

static void account(int dev, int64_t delta)
{
    if (dev < 0)
        return;
    g_used[dev] += delta;
    stub_state *s = stub_state_get();
    if (s) {
        int64_t now = __atomic_add_fetch(&s->used[dev], delta, __ATOMIC_SEQ_CST);
        int64_t peak = __atomic_load_n(&s->peak[dev], __ATOMIC_SEQ_CST);
        while (now > peak && !__atomic_compare_exchange_n(&s->peak[dev], &peak, now, 0, __ATOMIC_SEQ_CST,
                                                          __ATOMIC_SEQ_CST))
            ;
    }
}

static int64_t phys_used(int dev)
{
    stub_state *s = stub_state_get();
    return s ? __atomic_load_n(&s->used[dev], __ATOMIC_SEQ_CST) : g_used[dev];
}

static CUresult do_alloc(unsigned long long *key, uint64_t bytes, int dev, int kind, struct ctx *c)
{
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t delay = stub_env_u64("STUB_ALLOC_DELAY_US", 0);
    if (delay)
        usleep((useconds_t)delay);
    pthread_mutex_lock(&g_mu);
    if (dev >= 0 && (uint64_t)phys_used(dev) + bytes > stub_gpus_get()->mem[dev]) {
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (g_nallocs == g_capallocs) {
        g_capallocs = g_capallocs ? 2 * g_capallocs : 256;
        g_allocs = realloc(g_allocs, g_capallocs * sizeof *g_allocs);
    }
    *key = g_next_key;
    g_next_key += (bytes + 0xfffff) & ~0xfffffull; /* 1 MiB apart, never 0 */
    g_allocs[g_nallocs++] = (struct alloc){*key, bytes, dev, kind, c, 0, PREF_NONE, -1};
    account(dev, (int64_t)bytes);
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

static CUresult do_free(uint64_t key, int kind)
{
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_nallocs; i++) {
        if (g_allocs[i].key == key && g_allocs[i].kind == kind) {
            account(g_allocs[i].dev, -(int64_t)g_allocs[i].bytes);
            if (g_allocs[i].managed)
                g_managed_bytes -= g_allocs[i].bytes;
            g_allocs[i] = g_allocs[--g_nallocs];
            pthread_mutex_unlock(&g_mu);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return CUDA_ERROR_INVALID_VALUE;
}

static void free_ctx_allocations(struct ctx *c)
{
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_nallocs;) {
        if (g_allocs[i].ctx == c && g_allocs[i].kind != K_VMM) {
            account(g_allocs[i].dev, -(int64_t)g_allocs[i].bytes);
            if (g_allocs[i].managed)
                g_managed_bytes -= g_allocs[i].bytes;
            g_allocs[i] = g_allocs[--g_nallocs];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&g_mu);
}

/* Test hook: what this process holds on physical device `dev`. */
API uint64_t stubProcessUsedBytes(int dev)
{
    return (dev >= 0 && dev < STUB_MAX_GPUS) ? (uint64_t)g_used[dev] : 0;
}

#define NEED_CTX(c)                        \
    NEED_INIT();                           \
    struct ctx *c = current();             \
    if (c == NULL)                         \
        return CUDA_ERROR_INVALID_CONTEXT

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    NEED_CTX(c);
    set_last("cuMemAlloc_v2");
    return do_alloc(dptr, bytesize, c->dev, K_PTR, c);
}

/* Legacy 32-bit variant, see cuDeviceTotalMem. */
API CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
    CUdeviceptr p;
    CUresult rc = cuMemAlloc_v2(&p, bytesize);
    set_last("cuMemAlloc");
    if (rc == CUDA_SUCCESS)
        *dptr = (unsigned)p;
    return rc;
}

API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t w, size_t h, unsigned elem)
{
    NEED_CTX(c);
    if (w == 0 || h == 0 || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t align = stub_env_u64("STUB_PITCH_ALIGN", 256);
    *pitch = (w + align - 1) / align * align;
    return do_alloc(dptr, (uint64_t)*pitch * h, c->dev, K_PTR, c);
}

/* Managed memory, as a driver with concurrent managed access (Pascal and newer) gives
 * it: pages are populated on first touch where they are preferred, so the allocation
 * itself takes no device memory and may exceed it; the host's memory bounds it
 * (STUB_HOST_MEM, default 1 TiB). STUB_MANAGED=0: a device without managed memory
 * (CUDA_ERROR_NOT_SUPPORTED, as on some virtualized GPUs). */
API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    NEED_CTX(c);
    set_last("cuMemAllocManaged");
    if (stub_env_i64("STUB_MANAGED", 1) == 0)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (bytesize == 0 || (flags != 1 && flags != 2))
        return CUDA_ERROR_INVALID_VALUE; /* CU_MEM_ATTACH_GLOBAL or CU_MEM_ATTACH_HOST */
    pthread_mutex_lock(&g_mu);
    if (g_managed_bytes + bytesize > stub_env_u64("STUB_HOST_MEM", 1ull << 40)) {
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (g_nallocs == g_capallocs) {
        g_capallocs = g_capallocs ? 2 * g_capallocs : 256;
        g_allocs = realloc(g_allocs, g_capallocs * sizeof *g_allocs);
    }
    *dptr = g_next_key;
    g_next_key += (bytesize + 0xfffff) & ~0xfffffull;
    g_allocs[g_nallocs++] = (struct alloc){*dptr, bytesize, -1, K_PTR, c, 1, PREF_NONE, -1};
    g_managed_bytes += bytesize;
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

static struct alloc *find_managed(CUdeviceptr p, size_t count)
{
    for (size_t i = 0; i < g_nallocs; i++)
        if (g_allocs[i].managed && p >= g_allocs[i].key && p + count <= g_allocs[i].key + g_allocs[i].bytes)
            return &g_allocs[i];
    return NULL;
}

/* cuMemAdvise (CUDA 8; device -1 = CU_DEVICE_CPU) and cuMemAdvise_v2 (CUDA 12.2,
 * a CUmemLocation). Only the two pieces of advice the shim gives are kept. */
static CUresult advise(CUdeviceptr p, size_t count, int advice, int where)
{
    pthread_mutex_lock(&g_mu);
    struct alloc *a = find_managed(p, count);
    if (a == NULL) {
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (advice == 3) /* CU_MEM_ADVISE_SET_PREFERRED_LOCATION */
        a->pref = where;
    else if (advice == 5) /* CU_MEM_ADVISE_SET_ACCESSED_BY */
        a->accessed_by = where;
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

API CUresult cuMemAdvise(CUdeviceptr p, size_t count, int advice, CUdevice device)
{
    NEED_INIT();
    set_last("cuMemAdvise");
    int where = device == -1 ? PREF_HOST : phys(device);
    if (where == -1 && device != -1)
        return CUDA_ERROR_INVALID_DEVICE;
    return advise(p, count, advice, where);
}

API CUresult cuMemAdvise_v2(CUdeviceptr p, size_t count, int advice, CUmemLocation loc)
{
    NEED_INIT();
    set_last("cuMemAdvise_v2");
    if (stub_env_i64("STUB_ADVISE_V2", 1) == 0)
        return CUDA_ERROR_NOT_SUPPORTED;
    int where;
    if (loc.type == CU_MEM_LOCATION_TYPE_HOST)
        where = PREF_HOST;
    else if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE && (where = phys(loc.id)) >= 0)
        ;
    else
        return CUDA_ERROR_INVALID_VALUE;
    return advise(p, count, advice, where);
}

/* Test hook: whether `p` is managed memory, and its advice. Returns 1 for managed
 * memory (pref: -1 host, -3 none, else the physical device; accessed_by: -1 none). */
API int stubManagedInfo(CUdeviceptr p, int *pref, int *accessed_by)
{
    pthread_mutex_lock(&g_mu);
    struct alloc *a = find_managed(p, 1);
    int rc = a != NULL;
    if (a) {
        *pref = a->pref;
        *accessed_by = a->accessed_by;
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* Test hook: managed bytes this process holds. */
API uint64_t stubManagedBytes(void)
{
    return g_managed_bytes;
}

API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    NEED_INIT();
    set_last("cuMemFree_v2");
    return do_free(dptr, K_PTR);
}

API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    NEED_CTX(c);
    uint64_t mem = stub_gpus_get()->mem[c->dev];
    int64_t used = phys_used(c->dev);
    *total = mem;
    *free = used >= (int64_t)mem ? 0 : mem - (uint64_t)used;
    return CUDA_SUCCESS;
}

API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    (void)s;
    NEED_CTX(c);
    set_last("cuMemAllocAsync");
    return do_alloc(dptr, bytesize, c->dev, K_PTR, c);
}

API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    CUresult rc = cuMemAllocAsync(dptr, bytesize, s);
    set_last("cuMemAllocAsync_ptsz");
    return rc;
}

API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    (void)s;
    NEED_INIT();
    set_last("cuMemFreeAsync");
    /* As the driver: stream-ordered frees are for stream-ordered (pool) memory only. */
    pthread_mutex_lock(&g_mu);
    int managed = find_managed(dptr, 1) != NULL;
    pthread_mutex_unlock(&g_mu);
    if (managed)
        return CUDA_ERROR_INVALID_VALUE;
    return do_free(dptr, K_PTR);
}

API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
    return cuMemFreeAsync(dptr, s);
}

struct pool {
    int dev; /* -1 host */
};

API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolPropsPrefix *props)
{
    NEED_INIT();
    struct pool *p = calloc(1, sizeof *p);
    if (props->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        p->dev = phys(props->location.id);
        if (p->dev < 0) {
            free(p);
            return CUDA_ERROR_INVALID_DEVICE;
        }
    } else {
        p->dev = -1;
    }
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    free(pool);
    return CUDA_SUCCESS;
}

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{
    (void)s;
    NEED_CTX(c);
    return do_alloc(dptr, bytesize, ((struct pool *)pool)->dev, K_PTR, c);
}

API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{
    return cuMemAllocFromPoolAsync(dptr, bytesize, pool, s);
}

API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                         unsigned long long flags)
{
    (void)flags;
    NEED_INIT();
    int dev = -1;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        dev = phys(prop->location.id);
        if (dev < 0)
            return CUDA_ERROR_INVALID_DEVICE;
    }
    return do_alloc(h, size, dev, K_VMM, NULL);
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    return do_free(h, K_VMM);
}

static uint64_t elem_bytes(int format)
{
    switch (format) {
    case 0x01: case 0x08: return 1;
    case 0x02: case 0x09: case 0x10: return 2;
    default: return 4;
    }
}

API CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
    NEED_CTX(c);
    uint64_t b = elem_bytes(d->Format) * d->NumChannels * d->Width * (d->Height ? d->Height : 1);
    unsigned long long key;
    CUresult rc = do_alloc(&key, b, c->dev, K_ARRAY, c);
    if (rc == CUDA_SUCCESS)
        *a = (CUarray)(uintptr_t)key;
    return rc;
}

API CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    NEED_CTX(c);
    uint64_t b = elem_bytes(d->Format) * d->NumChannels * d->Width * (d->Height ? d->Height : 1) *
                 (d->Depth ? d->Depth : 1);
    unsigned long long key;
    CUresult rc = do_alloc(&key, b, c->dev, K_ARRAY, c);
    if (rc == CUDA_SUCCESS)
        *a = (CUarray)(uintptr_t)key;
    return rc;
}

API CUresult cuArrayDestroy(CUarray a)
{
    return do_free((uint64_t)(uintptr_t)a, K_ARRAY);
}

/* ---- the simulated GPU ---------------------------------------------------- */

struct interval {
    uint64_t start, end;
};

static pthread_mutex_t g_gpu_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_busy_until;
static struct interval *g_iv;
static size_t g_niv, g_capiv;

/* Queues `dur` ns of work; blocks while STUB_QUEUE_DEPTH launches are pending,
 * like a driver whose push buffer is full. */
static void submit(uint64_t dur)
{
    uint64_t depth = stub_env_u64("STUB_QUEUE_DEPTH", 4);
    pthread_mutex_lock(&g_gpu_mu);
    for (;;) {
        uint64_t now = stub_now_ns();
        size_t pending = 0;
        uint64_t first_end = 0;
        for (size_t i = g_niv; i > 0 && g_iv[i - 1].end > now; i--) {
            pending++;
            first_end = g_iv[i - 1].end;
        }
        if (pending < depth)
            break;
        pthread_mutex_unlock(&g_gpu_mu);
        uint64_t wait = first_end > now ? first_end - now : 1000;
        struct timespec ts = {(time_t)(wait / 1000000000ull), (long)(wait % 1000000000ull)};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&g_gpu_mu);
    }
    uint64_t now = stub_now_ns();
    uint64_t start = g_busy_until > now ? g_busy_until : now;
    g_busy_until = start + dur;
    if (dur) {
        if (g_niv == g_capiv) {
            g_capiv = g_capiv ? 2 * g_capiv : 1024;
            g_iv = realloc(g_iv, g_capiv * sizeof *g_iv);
        }
        g_iv[g_niv++] = (struct interval){start, start + dur};
    }
    pthread_mutex_unlock(&g_gpu_mu);
}

/* Test hook: GPU-busy nanoseconds of this process within [t0, t1) (CLOCK_MONOTONIC). */
API uint64_t stubBusyNs(uint64_t t0, uint64_t t1)
{
    uint64_t sum = 0;
    pthread_mutex_lock(&g_gpu_mu);
    for (size_t i = 0; i < g_niv; i++) {
        uint64_t s = g_iv[i].start > t0 ? g_iv[i].start : t0;
        uint64_t e = g_iv[i].end < t1 ? g_iv[i].end : t1;
        if (e > s)
            sum += e - s;
    }
    pthread_mutex_unlock(&g_gpu_mu);
    return sum;
}

/* Test hook: name of the last launch/allocation entry point that ran. */
API const char *stubLastCall(void)
{
    return __atomic_load_n(&g_last_call, __ATOMIC_RELAXED);
}

API uint64_t stubNowNs(void)
{
    return stub_now_ns();
}

static uint64_t kernel_ns(struct ctx *c, uint64_t blocks)
{
    uint64_t sms = (uint64_t)stub_gpus_get()->sms[c->dev];
    uint64_t waves = (blocks + sms - 1) / sms;
    return waves * stub_env_u64("STUB_WAVE_US", 0) * 1000ull;
}

static CUresult launch(const char *name, CUfunction f, uint64_t blocks)
{
    NEED_CTX(c);
    if (f == NULL || blocks == 0)
        return CUDA_ERROR_INVALID_VALUE;
    set_last(name);
    submit(kernel_ns(c, blocks));
    return CUDA_SUCCESS;
}

API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned shm, CUstream s, void **p, void **e)
{
    (void)bx, (void)by, (void)bz, (void)shm, (void)s, (void)p, (void)e;
    return launch("cuLaunchKernel", f, (uint64_t)gx * gy * gz);
}

API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned shm, CUstream s, void **p, void **e)
{
    (void)bx, (void)by, (void)bz, (void)shm, (void)s, (void)p, (void)e;
    return launch("cuLaunchKernel_ptsz", f, (uint64_t)gx * gy * gz);
}

API CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **p, void **e)
{
    (void)p, (void)e;
    return launch("cuLaunchKernelEx", f, (uint64_t)cfg->gridDimX * cfg->gridDimY * cfg->gridDimZ);
}

API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *cfg, CUfunction f, void **p, void **e)
{
    (void)p, (void)e;
    return launch("cuLaunchKernelEx_ptsz", f, (uint64_t)cfg->gridDimX * cfg->gridDimY * cfg->gridDimZ);
}

API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                       unsigned by, unsigned bz, unsigned shm, CUstream s, void **p)
{
    (void)bx, (void)by, (void)bz, (void)shm, (void)s, (void)p;
    return launch("cuLaunchCooperativeKernel", f, (uint64_t)gx * gy * gz);
}

API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                            unsigned by, unsigned bz, unsigned shm, CUstream s, void **p)
{
    (void)bx, (void)by, (void)bz, (void)shm, (void)s, (void)p;
    return launch("cuLaunchCooperativeKernel_ptsz", f, (uint64_t)gx * gy * gz);
}

API CUresult cuGraphLaunch(CUgraphExec g, CUstream s)
{
    (void)s;
    NEED_CTX(c);
    (void)c;
    if (g == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    set_last("cuGraphLaunch");
    submit(stub_env_u64("STUB_GRAPH_US", 1000) * 1000ull);
    return CUDA_SUCCESS;
}

API CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s)
{
    CUresult rc = cuGraphLaunch(g, s);
    set_last("cuGraphLaunch_ptsz");
    return rc;
}

struct event {
    uint64_t t;
    int recorded;
};

API CUresult cuEventCreate(CUevent *e, unsigned int flags)
{
    (void)flags;
    NEED_CTX(c);
    (void)c;
    *e = (CUevent)calloc(1, sizeof(struct event));
    return CUDA_SUCCESS;
}

API CUresult cuEventDestroy_v2(CUevent e)
{
    free(e);
    return CUDA_SUCCESS;
}

API CUresult cuEventRecord(CUevent e, CUstream s)
{
    (void)s;
    NEED_CTX(c);
    (void)c;
    struct event *ev = (struct event *)e;
    pthread_mutex_lock(&g_gpu_mu);
    uint64_t now = stub_now_ns();
    ev->t = g_busy_until > now ? g_busy_until : now; /* when the queue reaches it */
    ev->recorded = 1;
    pthread_mutex_unlock(&g_gpu_mu);
    return CUDA_SUCCESS;
}

API CUresult cuEventQuery(CUevent e)
{
    struct event *ev = (struct event *)e;
    return (!ev->recorded || stub_now_ns() >= ev->t) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

API CUresult cuEventSynchronize(CUevent e)
{
    struct event *ev = (struct event *)e;
    while (ev->recorded && stub_now_ns() < ev->t)
        usleep(100);
    return CUDA_SUCCESS;
}

API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    struct event *ea = (struct event *)a, *eb = (struct event *)b;
    if (!ea->recorded || !eb->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    if (cuEventQuery(a) != CUDA_SUCCESS || cuEventQuery(b) != CUDA_SUCCESS)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)((int64_t)eb->t - (int64_t)ea->t) / 1e6);
    return CUDA_SUCCESS;
}

API CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b)
{
    return cuEventElapsedTime(ms, a, b);
}

API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    (void)s;
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSynchronize(void)
{
    NEED_CTX(c);
    (void)c;
    for (;;) {
        pthread_mutex_lock(&g_gpu_mu);
        uint64_t until = g_busy_until;
        pthread_mutex_unlock(&g_gpu_mu);
        uint64_t now = stub_now_ns();
        if (now >= until)
            return CUDA_SUCCESS;
        usleep((useconds_t)((until - now) / 1000 + 1));
    }
}

API CUresult cuStreamSynchronize(CUstream s)
{
    (void)s;
    return cuCtxSynchronize();
}

/* ---- cuGetProcAddress ------------------------------------------------------- */

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status);
API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);

/* With STUB_PROCADDR_THUNKS=1, cuGetProcAddress hands out these internal entry
 * points instead of the exported ones (same behaviour, other addresses), as a driver
 * may; the library must still recognize what it was given. */
static CUresult thunk_cuMemAlloc_v2(CUdeviceptr *d, size_t n)
{
    return cuMemAlloc_v2(d, n);
}
static CUresult thunk_cuMemGetInfo_v2(size_t *f, size_t *t)
{
    return cuMemGetInfo_v2(f, t);
}
static CUresult thunk_cuMemAllocAsync(CUdeviceptr *d, size_t n, CUstream s)
{
    return cuMemAllocAsync(d, n, s);
}
static CUresult thunk_cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, CUstream s)
{
    return cuMemAllocAsync_ptsz(d, n, s);
}
static CUresult thunk_cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                          unsigned by, unsigned bz, unsigned shm, CUstream s, void **p, void **e)
{
    return cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shm, s, p, e);
}
static CUresult thunk_cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                          CUdriverProcAddressQueryResult *status)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, status);
}

/* A variant from a future CUDA (version 99000) with another signature: a library
 * that swapped it for its cuMemGetInfo_v2 hook would corrupt the caller's stack. */
static CUresult future_cuMemGetInfo_v99(size_t *f, size_t *t, int extra)
{
    (void)extra;
    return cuMemGetInfo_v2(f, t);
}

/* Base name, first CUDA version of this variant, per-thread-stream variant or not,
 * entry point, internal entry point (or NULL). Like the driver: the newest variant
 * whose version is <= the caller's wins; _ptsz variants only for
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. The table holds function pointers,
 * not names, so no lookup goes through dlsym(). */
static const struct {
    const char *name;
    int version;
    int ptsz;
    void *fn;
    void *thunk;
} g_table[] = {
#define E(n, v, f) {n, v, 0, (void *)&f, NULL}
#define P(n, v, f) {n, v, 1, (void *)&f, NULL}
#define ET(n, v, f) {n, v, 0, (void *)&f, (void *)&thunk_##f}
#define PT(n, v, f) {n, v, 1, (void *)&f, (void *)&thunk_##f}
    E("cuInit", 2000, cuInit),
    E("cuDriverGetVersion", 2020, cuDriverGetVersion),
    E("cuDeviceGet", 2000, cuDeviceGet),
    E("cuDeviceGetCount", 2000, cuDeviceGetCount),
    E("cuDeviceGetName", 2000, cuDeviceGetName),
    E("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    E("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    E("cuDeviceTotalMem", 2000, cuDeviceTotalMem),
    E("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    E("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    E("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    E("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    E("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    E("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    E("cuCtxCreate", 3020, cuCtxCreate_v2),
    E("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    E("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    E("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    E("cuCtxGetDevice", 2000, cuCtxGetDevice),
    E("cuCtxSynchronize", 2000, cuCtxSynchronize),
    ET("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    E("cuMemGetInfo", 99000, future_cuMemGetInfo_v99),
    E("cuMemAlloc", 2000, cuMemAlloc),
    ET("cuMemAlloc", 3020, cuMemAlloc_v2),
    E("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    E("cuMemAllocManaged", 6000, cuMemAllocManaged),
    E("cuMemAdvise", 8000, cuMemAdvise),
    E("cuMemAdvise", 12020, cuMemAdvise_v2),
    E("cuMemFree", 3020, cuMemFree_v2),
    ET("cuMemAllocAsync", 11020, cuMemAllocAsync),
    PT("cuMemAllocAsync", 11020, cuMemAllocAsync_ptsz),
    E("cuMemFreeAsync", 11020, cuMemFreeAsync),
    P("cuMemFreeAsync", 11020, cuMemFreeAsync_ptsz),
    E("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    P("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync_ptsz),
    E("cuMemPoolCreate", 11020, cuMemPoolCreate),
    E("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    E("cuMemCreate", 10020, cuMemCreate),
    E("cuMemRelease", 10020, cuMemRelease),
    E("cuArrayCreate", 3020, cuArrayCreate_v2),
    E("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    E("cuArrayDestroy", 2000, cuArrayDestroy),
    E("cuLaunchKernel", 4000, cuLaunchKernel),
    PT("cuLaunchKernel", 7000, cuLaunchKernel_ptsz),
    E("cuLaunchKernelEx", 11060, cuLaunchKernelEx),
    P("cuLaunchKernelEx", 11060, cuLaunchKernelEx_ptsz),
    E("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel),
    P("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel_ptsz),
    E("cuGraphLaunch", 10000, cuGraphLaunch),
    P("cuGraphLaunch", 10000, cuGraphLaunch_ptsz),
    E("cuEventCreate", 2000, cuEventCreate),
    E("cuEventDestroy", 4000, cuEventDestroy_v2),
    E("cuEventRecord", 2000, cuEventRecord),
    E("cuEventQuery", 2000, cuEventQuery),
    E("cuEventSynchronize", 2000, cuEventSynchronize),
    E("cuEventElapsedTime", 2000, cuEventElapsedTime),
    E("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    E("cuStreamSynchronize", 2000, cuStreamSynchronize),
    E("cuGetProcAddress", 11030, cuGetProcAddress),
    ET("cuGetProcAddress", 12000, cuGetProcAddress_v2),
#undef E
#undef P
#undef ET
#undef PT
};

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status)
{
    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    int want_ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    int thunks = stub_env_i64("STUB_PROCADDR_THUNKS", 0) != 0;
    void *best = NULL;
    int best_version = -1, best_ptsz = 0, known = 0;
    for (size_t i = 0; i < sizeof g_table / sizeof g_table[0]; i++) {
        if (strcmp(g_table[i].name, symbol) != 0)
            continue;
        known = 1;
        if (g_table[i].version > version || (g_table[i].ptsz && !want_ptsz))
            continue;
        /* Prefer the per-thread variant when asked, then the newest version. */
        if (g_table[i].ptsz > best_ptsz ||
            (g_table[i].ptsz == best_ptsz && g_table[i].version > best_version)) {
            best = thunks && g_table[i].thunk ? g_table[i].thunk : g_table[i].fn;
            best_version = g_table[i].version;
            best_ptsz = g_table[i].ptsz;
        }
    }
    *pfn = best;
    if (status)
        *status = best ? 0 : known ? 2 /* VERSION_NOT_SUFFICIENT */ : 1 /* SYMBOL_NOT_FOUND */;
    return best ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
