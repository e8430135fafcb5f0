/*
 * Stand-in libnvidia-ml.so.1 for tests: the devices of stub_config.h in physical
 * order (NVML ignores CUDA_VISIBLE_DEVICES), memory info (v1 and v2), and the
 * compute-process list: the calling process plus STUB_NVML_EXTRA_PROCS others.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "cuda_abi.h"
#include "stub_config.h"

#define API __attribute__((visibility("default")))

struct nvml_dev {
    int index;
};
static struct nvml_dev g_devs[STUB_MAX_GPUS];
static int g_init;

API nvmlReturn_t nvmlInit_v2(void)
{
    const stub_gpus *g = stub_gpus_get();
    for (int i = 0; i < g->n; i++)
        g_devs[i].index = i;
    g_init++;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlInit(void)
{
    return nvmlInit_v2();
}

API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return nvmlInit_v2();
}

API nvmlReturn_t nvmlShutdown(void)
{
    if (g_init > 0)
        g_init--;
    return NVML_SUCCESS;
}

API const char *nvmlErrorString(nvmlReturn_t r)
{
    return r == NVML_SUCCESS ? "Success" : "Stub NVML error";
}

#define NEED_INIT()           \
    if (g_init <= 0)          \
    return NVML_ERROR_UNINITIALIZED

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
    NEED_INIT();
    *n = (unsigned)stub_gpus_get()->n;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCount(unsigned int *n)
{
    return nvmlDeviceGetCount_v2(n);
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *h)
{
    NEED_INIT();
    if (i >= (unsigned)stub_gpus_get()->n)
        return NVML_ERROR_INVALID_ARGUMENT;
    *h = (nvmlDevice_t)&g_devs[i];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *h)
{
    return nvmlDeviceGetHandleByIndex_v2(i, h);
}

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *h)
{
    NEED_INIT();
    const stub_gpus *g = stub_gpus_get();
    for (int i = 0; i < g->n; i++)
        if (strcmp(g->uuid[i], uuid) == 0) {
            *h = (nvmlDevice_t)&g_devs[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

static int idx_of(nvmlDevice_t h)
{
    struct nvml_dev *d = (struct nvml_dev *)h;
    if (d < g_devs || d >= g_devs + stub_gpus_get()->n)
        return -1;
    return d->index;
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned int len)
{
    NEED_INIT();
    int i = idx_of(h);
    if (i < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    const char *u = stub_gpus_get()->uuid[i];
    if (strlen(u) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(uuid, u);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *index)
{
    NEED_INIT();
    int i = idx_of(h);
    if (i < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)i;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned int len)
{
    NEED_INIT();
    if (idx_of(h) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    strncpy(name, "Stub GPU", len);
    return NVML_SUCCESS;
}

/* Bytes in use on device i: all processes when STUB_STATE_FILE is shared, else the
 * calling process's stand-in libcuda (if it is loaded). */
static uint64_t used_on(int i)
{
    stub_state *s = stub_state_get();
    if (s)
        return (uint64_t)__atomic_load_n(&s->used[i], __ATOMIC_SEQ_CST);
    uint64_t (*own)(int) = (uint64_t(*)(int))dlsym(RTLD_DEFAULT, "stubProcessUsedBytes");
    return own ? own(i) : 0;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m)
{
    NEED_INIT();
    int i = idx_of(h);
    if (i < 0 || m == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    m->total = stub_gpus_get()->mem[i];
    m->used = used_on(i);
    m->free = m->used > m->total ? 0 : m->total - m->used;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m)
{
    NEED_INIT();
    int i = idx_of(h);
    if (i < 0 || m == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    m->total = stub_gpus_get()->mem[i];
    m->reserved = stub_env_u64("STUB_NVML_RESERVED", 0);
    m->used = used_on(i);
    uint64_t taken = m->used + m->reserved;
    m->free = taken > m->total ? 0 : m->total - taken;
    return NVML_SUCCESS;
}

typedef struct {
    unsigned int gpu, memory;
} stub_nvml_utilization;

API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, stub_nvml_utilization *u)
{
    NEED_INIT();
    if (idx_of(h) < 0 || u == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    u->gpu = (unsigned)stub_env_u64("STUB_NVML_UTIL", 0);
    u->memory = (unsigned)stub_env_u64("STUB_NVML_MEM_UTIL", 0);
    return NVML_SUCCESS;
}

struct proc_v2 {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
};
struct proc_v1 {
    unsigned int pid;
    unsigned long long usedGpuMemory;
};

static nvmlReturn_t procs(nvmlDevice_t h, unsigned int *count, void *infos, int v1)
{
    NEED_INIT();
    int i = idx_of(h);
    if (i < 0 || count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned extra = (unsigned)stub_env_i64("STUB_NVML_EXTRA_PROCS", 0);
    unsigned n = 1 + extra;
    if (*count < n || infos == NULL) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    uint64_t (*own)(int) = (uint64_t(*)(int))dlsym(RTLD_DEFAULT, "stubProcessUsedBytes");
    for (unsigned k = 0; k < n; k++) {
        unsigned pid = k == 0 ? (unsigned)getpid() : 900000 + k;
        unsigned long long used =
            k == 0 ? (own ? own(i) : 0) + stub_env_u64("STUB_CTX_BYTES", 0) : (1ull << 30);
        if (v1) {
            struct proc_v1 *p = (struct proc_v1 *)infos + k;
            p->pid = pid;
            p->usedGpuMemory = used;
        } else {
            struct proc_v2 *p = (struct proc_v2 *)infos + k;
            memset(p, 0, sizeof *p);
            p->pid = pid;
            p->usedGpuMemory = used;
        }
    }
    *count = n;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *count, void *infos)
{
    return procs(h, count, infos, 0);
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *count, void *infos)
{
    return procs(h, count, infos, 0);
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned int *count, void *infos)
{
    return procs(h, count, infos, 1);
}
