/*
 * Configuration shared by the stand-in libcuda.so.1 and libnvidia-ml.so.1.
 *
 * Every setting is an environment variable; STUB_CONFIG may name a KEY=VALUE file
 * (one per line, '#' comments) whose values apply where the environment has none.
 *
 *   STUB_GPUS           comma list of device UUIDs (default: two devices)
 *   STUB_GPU_MEM        memory per device, one size or a comma list (default 80g)
 *   STUB_GPU_SMS        SM count per device, one number or a comma list (default 132)
 *   STUB_WAVE_US        GPU time of one wave of blocks (a kernel of B blocks on a
 *                       device with S SMs runs ceil(B/S) waves; default 0)
 *   STUB_GRAPH_US       GPU time of one cuGraphLaunch (default 1000)
 *   STUB_QUEUE_DEPTH    launches queued before a launch blocks (default 4)
 *   STUB_PITCH_ALIGN    pitch alignment of cuMemAllocPitch (default 256)
 *   STUB_ALLOC_DELAY_US time each allocation takes (default 0)
 *   STUB_STATE_FILE     file holding the devices' physical usage across processes
 *                       (used and peak bytes per device); unset: per process
 *   STUB_CTX_BYTES      NVML per-process usage beyond the allocations (default 0)
 *   STUB_NVML_EXTRA_PROCS  other processes NVML lists on every device (default 0)
 *   STUB_NVML_RESERVED  reserved bytes nvmlDeviceGetMemoryInfo_v2 reports (default 0)
 *   STUB_NVML_UTIL, STUB_NVML_MEM_UTIL  percent nvmlDeviceGetUtilizationRates reports
 *                       for gpu / memory (default 0; the node monitor's host figures)
 *   STUB_MANAGED=0      cuMemAllocManaged fails with CUDA_ERROR_NOT_SUPPORTED (default 1:
 *                       managed memory is host-backed, never counted as device memory)
 *   STUB_HOST_MEM       host memory managed allocations may take (default 1t)
 *   STUB_ADVISE_V2=0    cuMemAdvise_v2 (CUDA 12.2) answers CUDA_ERROR_NOT_SUPPORTED
 *   STUB_PROCADDR_THUNKS=1  cuGetProcAddress returns internal entry points (not the
 *                       exported symbols) for a few functions, as a driver may
 */
#ifndef STUB_CONFIG_H
#define STUB_CONFIG_H

#include <stdint.h>

#define STUB_MAX_GPUS 16

typedef struct {
    int n;
    char uuid[STUB_MAX_GPUS][64];
    unsigned char uuid_bytes[STUB_MAX_GPUS][16];
    uint64_t mem[STUB_MAX_GPUS];
    int sms[STUB_MAX_GPUS];
} stub_gpus;

const stub_gpus *stub_gpus_get(void);
const char *stub_env(const char *name);
uint64_t stub_env_u64(const char *name, uint64_t dflt); /* accepts k/m/g suffixes */
int64_t stub_env_i64(const char *name, int64_t dflt);
uint64_t stub_parse_size(const char *s);

/* Cross-process physical usage (STUB_STATE_FILE); NULL when not configured. */
typedef struct {
    int64_t used[STUB_MAX_GPUS];
    int64_t peak[STUB_MAX_GPUS];
} stub_state;
stub_state *stub_state_get(void);

uint64_t stub_now_ns(void);

#endif
