/*
 * probe: runs a list of driver operations and prints one JSON line per operation.
 * The driver is reached the way the test asks:
 *   --via direct    linked symbols (what a preload intercepts)
 *   --via dlsym     dlopen("libcuda.so.1") + dlsym(handle, name), like the runtime
 *   --via procaddr  cuGetProcAddress_v2 fetched with dlsym, then every entry point
 *                   through it with CUDA version 12080 (the CUDA 12 runtime's way)
 *   --via procaddr-ptds  the same with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
 *                   (a runtime built for per-thread default streams)
 * Operations (sizes take k/m/g):
 *   init | ctx ORD | newctx ORD | destroyctx | reset ORD
 *   alloc SIZE | pitch W H | managed SIZE | async SIZE | pool dev|host ORD | poolalloc SIZE
 *   vmm dev|host ORD SIZE | array W H | array3d W H D | free ID | freeall | fill SIZE
 *   meminfo | totalmem ORD | nvml IDX | launch N GRID
 *   where ID      is item ID managed memory, and where does it prefer to live (stand-in)
 *   physused ORD  device and managed bytes this process holds in the stand-in driver
 *   procaddr NAME VERSION FLAGS EXPECT | last | ready | wait | sleep MS
 *   exec OPS...   replaces the process image with a new probe running OPS (same pid)
 */
#include <unistd.h>

#include "common.h"

typedef CUresult (*fn_init)(unsigned);
typedef CUresult (*fn_devget)(CUdevice *, int);
typedef CUresult (*fn_retain)(CUcontext *, CUdevice);
typedef CUresult (*fn_setcur)(CUcontext);
typedef CUresult (*fn_ctxcreate)(CUcontext *, unsigned, CUdevice);
typedef CUresult (*fn_ctxdestroy)(CUcontext);
typedef CUresult (*fn_reset)(CUdevice);
typedef CUresult (*fn_alloc)(CUdeviceptr *, size_t);
typedef CUresult (*fn_pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
typedef CUresult (*fn_managed)(CUdeviceptr *, size_t, unsigned);
typedef CUresult (*fn_free)(CUdeviceptr);
typedef CUresult (*fn_async)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*fn_freeasync)(CUdeviceptr, CUstream);
typedef CUresult (*fn_poolcreate)(CUmemoryPool *, const void *);
typedef CUresult (*fn_poolalloc)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*fn_memcreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                                 unsigned long long);
typedef CUresult (*fn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*fn_arr)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
typedef CUresult (*fn_arr3)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
typedef CUresult (*fn_arrdestroy)(CUarray);
typedef CUresult (*fn_meminfo)(size_t *, size_t *);
typedef CUresult (*fn_totalmem)(size_t *, CUdevice);
typedef CUresult (*fn_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
typedef CUresult (*fn_gpa2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static struct {
    fn_init init;
    fn_devget devget;
    fn_retain retain;
    fn_setcur setcur;
    fn_ctxcreate ctxcreate;
    fn_ctxdestroy ctxdestroy;
    fn_reset reset;
    fn_alloc alloc;
    fn_pitch pitch;
    fn_managed managed;
    fn_free free;
    fn_async async;
    fn_freeasync freeasync;
    fn_poolcreate poolcreate;
    fn_poolalloc poolalloc;
    fn_memcreate memcreate;
    fn_release release;
    fn_arr arr;
    fn_arr3 arr3;
    fn_arrdestroy arrdestroy;
    fn_meminfo meminfo;
    fn_totalmem totalmem;
    fn_launch launch;
} api;

static void *g_driver;
static fn_gpa2 g_gpa;

/* name: exported symbol; base: what the runtime asks cuGetProcAddress for. */
static void *get(const char *mode, const char *name, const char *base)
{
    void *p = NULL;
    if (strcmp(mode, "direct") == 0) {
        p = dlsym(RTLD_DEFAULT, name); /* what a linked call resolves to */
    } else if (strcmp(mode, "dlsym") == 0) {
        p = dlsym(g_driver, name);
    } else {
        CUdriverProcAddressQueryResult st;
        cuuint64_t flags = strcmp(mode, "procaddr-ptds") == 0 ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                                               : CU_GET_PROC_ADDRESS_DEFAULT;
        if (g_gpa(base, &p, 12080, flags, &st) != CUDA_SUCCESS)
            p = NULL;
    }
    if (p == NULL) {
        fprintf(stderr, "probe: cannot resolve %s via %s\n", name, mode);
        exit(4);
    }
    return p;
}

static void resolve(const char *mode)
{
    g_driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (g_driver == NULL) {
        fprintf(stderr, "probe: %s\n", dlerror());
        exit(4);
    }
    g_gpa = (fn_gpa2)dlsym(g_driver, "cuGetProcAddress_v2");
#define R(field, type, name, base) api.field = (type)get(mode, name, base)
    R(init, fn_init, "cuInit", "cuInit");
    R(devget, fn_devget, "cuDeviceGet", "cuDeviceGet");
    R(retain, fn_retain, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain");
    R(setcur, fn_setcur, "cuCtxSetCurrent", "cuCtxSetCurrent");
    R(ctxcreate, fn_ctxcreate, "cuCtxCreate_v2", "cuCtxCreate");
    R(ctxdestroy, fn_ctxdestroy, "cuCtxDestroy_v2", "cuCtxDestroy");
    R(reset, fn_reset, "cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset");
    R(alloc, fn_alloc, "cuMemAlloc_v2", "cuMemAlloc");
    R(pitch, fn_pitch, "cuMemAllocPitch_v2", "cuMemAllocPitch");
    R(managed, fn_managed, "cuMemAllocManaged", "cuMemAllocManaged");
    R(free, fn_free, "cuMemFree_v2", "cuMemFree");
    R(async, fn_async, "cuMemAllocAsync", "cuMemAllocAsync");
    R(freeasync, fn_freeasync, "cuMemFreeAsync", "cuMemFreeAsync");
    R(poolcreate, fn_poolcreate, "cuMemPoolCreate", "cuMemPoolCreate");
    R(poolalloc, fn_poolalloc, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync");
    R(memcreate, fn_memcreate, "cuMemCreate", "cuMemCreate");
    R(release, fn_release, "cuMemRelease", "cuMemRelease");
    R(arr, fn_arr, "cuArrayCreate_v2", "cuArrayCreate");
    R(arr3, fn_arr3, "cuArray3DCreate_v2", "cuArray3DCreate");
    R(arrdestroy, fn_arrdestroy, "cuArrayDestroy", "cuArrayDestroy");
    R(meminfo, fn_meminfo, "cuMemGetInfo_v2", "cuMemGetInfo");
    R(totalmem, fn_totalmem, "cuDeviceTotalMem_v2", "cuDeviceTotalMem");
    R(launch, fn_launch, "cuLaunchKernel", "cuLaunchKernel");
#undef R
}

enum { K_PTR, K_ASYNC, K_VMM, K_ARRAY };
static struct {
    uint64_t v;
    int kind;
    int live;
} g_items[4096];
static int g_nitems;
static CUmemoryPool g_pool;
static CUcontext g_made_ctx;

static int keep(uint64_t v, int kind)
{
    if (g_nitems >= 4096)
        return -1;
    g_items[g_nitems].v = v;
    g_items[g_nitems].kind = kind;
    g_items[g_nitems].live = 1;
    return g_nitems++;
}

static CUresult release_item(int id)
{
    if (id < 0 || id >= g_nitems || !g_items[id].live)
        return CUDA_ERROR_INVALID_VALUE;
    g_items[id].live = 0;
    switch (g_items[id].kind) {
    case K_PTR: return api.free(g_items[id].v);
    case K_ASYNC: return api.freeasync(g_items[id].v, NULL);
    case K_VMM: return api.release(g_items[id].v);
    default: return api.arrdestroy((CUarray)(uintptr_t)g_items[id].v);
    }
}

static void out_rc(const char *op, CUresult rc, int id)
{
    printf("{\"op\":\"%s\",\"rc\":%d,\"id\":%d}\n", op, rc, id);
}

static void nvml_info(int idx)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) {
        printf("{\"op\":\"nvml\",\"rc\":-1}\n");
        return;
    }
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*byidx)(unsigned, nvmlDevice_t *) = (int (*)(unsigned, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    int (*uuid)(nvmlDevice_t, char *, unsigned) = (int (*)(nvmlDevice_t, char *, unsigned))dlsym(h, "nvmlDeviceGetUUID");
    int (*m1)(nvmlDevice_t, nvmlMemory_t *) = (int (*)(nvmlDevice_t, nvmlMemory_t *))dlsym(h, "nvmlDeviceGetMemoryInfo");
    int (*m2)(nvmlDevice_t, nvmlMemory_v2_t *) =
        (int (*)(nvmlDevice_t, nvmlMemory_v2_t *))dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
    nvmlDevice_t d;
    char u[96] = "";
    nvmlMemory_t a = {0};
    nvmlMemory_v2_t b = {0};
    b.version = nvmlMemory_v2;
    int r0 = init();
    int r1 = byidx((unsigned)idx, &d);
    uuid(d, u, sizeof u);
    int r2 = m1(d, &a);
    int r3 = m2(d, &b);
    printf("{\"op\":\"nvml\",\"rc\":%d,\"uuid\":\"%s\",\"v1\":{\"rc\":%d,\"total\":%llu,\"free\":%llu,\"used\":%llu},"
           "\"v2\":{\"rc\":%d,\"total\":%llu,\"reserved\":%llu,\"free\":%llu,\"used\":%llu}}\n",
           r0 | r1, u, r2, a.total, a.free, a.used, r3, b.total, b.reserved, b.free, b.used);
}

int main(int argc, char **argv)
{
    int i = 1;
    const char *mode = "direct";
    if (argc > 2 && strcmp(argv[1], "--via") == 0) {
        mode = argv[2];
        i = 3;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    resolve(mode);
    for (; i < argc; i++) {
        const char *op = argv[i];
#define ARG() (i + 1 < argc ? argv[++i] : (fprintf(stderr, "probe: %s needs an argument\n", op), exit(2), ""))
        if (!strcmp(op, "init")) {
            out_rc(op, api.init(0), -1);
        } else if (!strcmp(op, "ctx")) {
            CUdevice d;
            CUcontext c;
            int ord = atoi(ARG());
            CUresult rc = api.devget(&d, ord);
            if (!rc)
                rc = api.retain(&c, d);
            if (!rc)
                rc = api.setcur(c);
            out_rc(op, rc, -1);
        } else if (!strcmp(op, "newctx")) {
            CUdevice d;
            CUresult rc = api.devget(&d, atoi(ARG()));
            if (!rc)
                rc = api.ctxcreate(&g_made_ctx, 0, d);
            out_rc(op, rc, -1);
        } else if (!strcmp(op, "destroyctx")) {
            out_rc(op, api.ctxdestroy(g_made_ctx), -1);
        } else if (!strcmp(op, "reset")) {
            CUdevice d;
            CUresult rc = api.devget(&d, atoi(ARG()));
            out_rc(op, rc ? rc : api.reset(d), -1);
        } else if (!strcmp(op, "alloc") || !strcmp(op, "managed") || !strcmp(op, "async") ||
                   !strcmp(op, "poolalloc")) {
            uint64_t size = parse_size(ARG());
            CUdeviceptr p = 0;
            CUresult rc;
            int kind = K_PTR;
            if (!strcmp(op, "alloc"))
                rc = api.alloc(&p, size);
            else if (!strcmp(op, "managed"))
                rc = api.managed(&p, size, 1);
            else if (!strcmp(op, "async"))
                rc = api.async(&p, size, NULL), kind = K_ASYNC;
            else
                rc = api.poolalloc(&p, size, g_pool, NULL), kind = K_ASYNC;
            out_rc(op, rc, rc ? -1 : keep(p, kind));
        } else if (!strcmp(op, "pitch")) {
            uint64_t w = parse_size(ARG()), h = parse_size(ARG());
            CUdeviceptr p = 0;
            size_t pitch = 0;
            CUresult rc = api.pitch(&p, &pitch, w, h, 4);
            printf("{\"op\":\"pitch\",\"rc\":%d,\"id\":%d,\"pitch\":%zu}\n", rc, rc ? -1 : keep(p, K_PTR), pitch);
        } else if (!strcmp(op, "pool")) {
            const char *where = ARG();
            int ord = atoi(ARG());
            struct {
                int allocType, handleTypes;
                CUmemLocation location;
                void *win32;
                size_t maxSize;
                unsigned short usage;
                unsigned char reserved[54];
            } props;
            memset(&props, 0, sizeof props);
            props.allocType = 1;
            props.location.type = strcmp(where, "host") == 0 ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
            props.location.id = ord;
            out_rc(op, api.poolcreate(&g_pool, &props), -1);
        } else if (!strcmp(op, "vmm")) {
            const char *where = ARG();
            int ord = atoi(ARG());
            uint64_t size = parse_size(ARG());
            CUmemAllocationProp prop;
            memset(&prop, 0, sizeof prop);
            prop.type = 1;
            prop.location.type = strcmp(where, "host") == 0 ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
            prop.location.id = ord;
            CUmemGenericAllocationHandle hd = 0;
            CUresult rc = api.memcreate(&hd, size, &prop, 0);
            out_rc(op, rc, rc ? -1 : keep(hd, K_VMM));
        } else if (!strcmp(op, "array") || !strcmp(op, "array3d")) {
            CUarray a = NULL;
            CUresult rc;
            if (!strcmp(op, "array")) {
                CUDA_ARRAY_DESCRIPTOR d = {parse_size(ARG()), 0, 0x20, 1};
                d.Height = parse_size(ARG());
                rc = api.arr(&a, &d);
            } else {
                CUDA_ARRAY3D_DESCRIPTOR d = {parse_size(ARG()), 0, 0, 0x20, 1, 0};
                d.Height = parse_size(ARG());
                d.Depth = parse_size(ARG());
                rc = api.arr3(&a, &d);
            }
            out_rc(op, rc, rc ? -1 : keep((uint64_t)(uintptr_t)a, K_ARRAY));
        } else if (!strcmp(op, "free")) {
            int id = atoi(ARG());
            out_rc(op, release_item(id), id);
        } else if (!strcmp(op, "freeall")) {
            CUresult worst = CUDA_SUCCESS;
            for (int k = 0; k < g_nitems; k++)
                if (g_items[k].live) {
                    CUresult rc = release_item(k);
                    if (rc)
                        worst = rc;
                }
            out_rc(op, worst, -1);
        } else if (!strcmp(op, "fill")) {
            uint64_t size = parse_size(ARG());
            int n = 0;
            CUresult rc;
            CUdeviceptr p;
            while ((rc = api.alloc(&p, size)) == CUDA_SUCCESS && n < 100000) {
                keep(p, K_PTR);
                n++;
            }
            printf("{\"op\":\"fill\",\"rc\":%d,\"count\":%d}\n", rc, n);
        } else if (!strcmp(op, "meminfo")) {
            size_t f = 0, t = 0;
            CUresult rc = api.meminfo(&f, &t);
            printf("{\"op\":\"meminfo\",\"rc\":%d,\"free\":%zu,\"total\":%zu}\n", rc, f, t);
        } else if (!strcmp(op, "totalmem")) {
            CUdevice d;
            size_t t = 0;
            CUresult rc = api.devget(&d, atoi(ARG()));
            if (!rc)
                rc = api.totalmem(&t, d);
            printf("{\"op\":\"totalmem\",\"rc\":%d,\"total\":%zu}\n", rc, t);
        } else if (!strcmp(op, "nvml")) {
            nvml_info(atoi(ARG()));
        } else if (!strcmp(op, "launch")) {
            int n = atoi(ARG());
            unsigned grid = (unsigned)atoi(ARG());
            CUresult rc = CUDA_SUCCESS;
            for (int k = 0; k < n && !rc; k++)
                rc = api.launch((CUfunction)0x1000, grid, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
            out_rc(op, rc, -1);
        } else if (!strcmp(op, "procaddr")) {
            const char *name = ARG();
            int version = atoi(ARG());
            cuuint64_t flags = strtoull(ARG(), NULL, 10);
            const char *expect = ARG();
            void *p = NULL;
            CUdriverProcAddressQueryResult st = -1;
            fn_gpa2 gpa = (fn_gpa2)dlsym(g_driver, "cuGetProcAddress_v2");
            CUresult rc = gpa(name, &p, version, flags, &st);
            void *hook = dlsym(RTLD_DEFAULT, expect);
            void *real = driver_sym(expect);
            printf("{\"op\":\"procaddr\",\"rc\":%d,\"status\":%d,\"is_global\":%d,\"is_driver\":%d,\"null\":%d}\n",
                   rc, st, p != NULL && p == hook, p != NULL && p == real, p == NULL);
        } else if (!strcmp(op, "where")) {
            int id = atoi(ARG());
            int (*info)(CUdeviceptr, int *, int *) = (int (*)(CUdeviceptr, int *, int *))dlsym(RTLD_DEFAULT, "stubManagedInfo");
            int pref = -3, by = -1, managed = 0;
            if (info && id >= 0 && id < g_nitems)
                managed = info(g_items[id].v, &pref, &by);
            printf("{\"op\":\"where\",\"id\":%d,\"managed\":%d,\"preferred\":%d,\"accessed_by\":%d}\n", id, managed,
                   pref, by);
        } else if (!strcmp(op, "physused")) {
            int ord = atoi(ARG());
            uint64_t (*dev)(int) = (uint64_t (*)(int))dlsym(RTLD_DEFAULT, "stubProcessUsedBytes");
            uint64_t (*man)(void) = (uint64_t (*)(void))dlsym(RTLD_DEFAULT, "stubManagedBytes");
            printf("{\"op\":\"physused\",\"device\":%llu,\"managed\":%llu}\n",
                   (unsigned long long)(dev ? dev(ord) : 0), (unsigned long long)(man ? man() : 0));
        } else if (!strcmp(op, "last")) {
            const char *(*last)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "stubLastCall");
            printf("{\"op\":\"last\",\"name\":\"%s\"}\n", last ? last() : "");
        } else if (!strcmp(op, "ready")) {
            printf("{\"op\":\"ready\"}\n");
        } else if (!strcmp(op, "wait")) {
            char line[64];
            if (!fgets(line, sizeof line, stdin))
                return 0;
        } else if (!strcmp(op, "exec")) {
            char **nargv = calloc((size_t)argc + 4, sizeof *nargv);
            int k = 0;
            nargv[k++] = argv[0];
            nargv[k++] = "--via";
            nargv[k++] = (char *)mode;
            for (int j = i + 1; j < argc; j++)
                nargv[k++] = argv[j];
            execv("/proc/self/exe", nargv);
            perror("execv");
            return 5;
        } else if (!strcmp(op, "sleep")) {
            usleep((useconds_t)atoi(ARG()) * 1000);
        } else {
            fprintf(stderr, "probe: unknown operation %s\n", op);
            return 2;
        }
    }
    return 0;
}
