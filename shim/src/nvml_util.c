#include "nvml_util.h"

#include <stdlib.h>
#include <string.h>

#include "real_driver.h"

/* 1 initialized, -1 unavailable, 0 not tried. NVML's init is reference counted and
 * the library never shuts it down, so the application's own use is unaffected. */
static int g_state;

static int nvml_ready(void)
{
    int s = __atomic_load_n(&g_state, __ATOMIC_ACQUIRE);
    if (s == 0) {
        nvmlInit_v2_pfn init = REAL(nvmlInit_v2);
        s = (init && init() == NVML_SUCCESS) ? 1 : -1;
        __atomic_store_n(&g_state, s, __ATOMIC_RELEASE);
    }
    return s == 1;
}

static nvmlDevice_t handle_of(const char *uuid)
{
    nvmlDevice_t h = NULL;
    nvmlDeviceGetHandleByUUID_pfn f = REAL(nvmlDeviceGetHandleByUUID);
    if (!nvml_ready() || f == NULL || f(uuid, &h) != NVML_SUCCESS)
        return NULL;
    return h;
}

int nvml_index_of_uuid(const char *uuid)
{
    nvmlDevice_t h = handle_of(uuid);
    nvmlDeviceGetIndex_pfn f = REAL(nvmlDeviceGetIndex);
    unsigned idx = 0;
    if (h == NULL || f == NULL || f(h, &idx) != NVML_SUCCESS)
        return -1;
    return (int)idx;
}

/* nvmlProcessInfo_t of the _v2/_v3 calls, and the older v1 record. */
struct proc_info_v2 {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
};
struct proc_info_v1 {
    unsigned int pid;
    unsigned long long usedGpuMemory;
};

typedef int (*procs_fn)(nvmlDevice_t, unsigned int *, void *);

static procs_fn procs_call(size_t *rec_size)
{
    procs_fn f = (procs_fn)REAL(nvmlDeviceGetComputeRunningProcesses_v3);
    *rec_size = sizeof(struct proc_info_v2);
    if (f == NULL)
        f = (procs_fn)REAL(nvmlDeviceGetComputeRunningProcesses_v2);
    if (f == NULL) {
        f = (procs_fn)REAL(nvmlDeviceGetComputeRunningProcesses);
        *rec_size = sizeof(struct proc_info_v1);
    }
    return f;
}

int nvml_process_count(const char *uuid)
{
    nvmlDevice_t h = handle_of(uuid);
    size_t rec;
    procs_fn f = procs_call(&rec);
    if (h == NULL || f == NULL)
        return -1;
    unsigned int n = 0;
    int rc = f(h, &n, NULL);
    if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE)
        return -1;
    return (int)n;
}

int nvml_process_used(const char *uuid, pid_t pid, uint64_t *bytes)
{
    nvmlDevice_t h = handle_of(uuid);
    size_t rec;
    procs_fn f = procs_call(&rec);
    if (h == NULL || f == NULL)
        return -1;
    unsigned int n = 64;
    unsigned char *buf = NULL;
    int rc = NVML_ERROR_INSUFFICIENT_SIZE;
    /* The list can grow between the sizing call and the real one: retry a little. */
    for (int attempt = 0; attempt < 3 && rc == NVML_ERROR_INSUFFICIENT_SIZE; attempt++) {
        n += 16;
        unsigned char *nb = realloc(buf, n * rec);
        if (nb == NULL)
            break;
        buf = nb;
        rc = f(h, &n, buf);
    }
    int found = -1;
    if (rc == NVML_SUCCESS) {
        for (unsigned i = 0; i < n; i++) {
            unsigned int p;
            unsigned long long used;
            memcpy(&p, buf + i * rec, sizeof p);
            memcpy(&used, buf + i * rec + offsetof(struct proc_info_v1, usedGpuMemory), sizeof used);
            if ((pid_t)p == pid && used != ~0ULL) { /* ~0: NVML_VALUE_NOT_AVAILABLE */
                *bytes = used;
                found = 0;
                break;
            }
        }
    }
    free(buf);
    return found;
}
