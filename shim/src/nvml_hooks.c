/*
 * NVML memory queries report the same virtual device as cuMemGetInfo, so that
 * nvidia-smi and pynvml inside the container show the limit and the container's
 * usage. v2 reports no reserved memory: the virtual device has none, and v1 and v2
 * then agree (total = used + free whenever usage is within the limit).
 */
#include "hooks.h"
#include "shim.h"

static dev_state *device_of(nvmlDevice_t h, uint64_t phys_total)
{
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    nvmlDeviceGetUUID_pfn get = REAL(nvmlDeviceGetUUID);
    if (get == NULL || get(h, uuid, sizeof uuid) != NVML_SUCCESS)
        return NULL;
    return shim_device_by_uuid(uuid, phys_total);
}

SHIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    REAL_OR_RETURN(real, nvmlDeviceGetMemoryInfo, NVML_ERROR_FUNCTION_NOT_FOUND);
    nvmlReturn_t rc = real(device, memory);
    if (rc != NVML_SUCCESS || memory == NULL || shim_passthrough())
        return rc;
    uint64_t f, t, u;
    shim_mem_view(device_of(device, memory->total), memory->free, &f, &t, &u);
    memory->total = t;
    memory->free = f;
    memory->used = u;
    return rc;
}

SHIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    REAL_OR_RETURN(real, nvmlDeviceGetMemoryInfo_v2, NVML_ERROR_FUNCTION_NOT_FOUND);
    nvmlReturn_t rc = real(device, memory); /* validates memory->version */
    if (rc != NVML_SUCCESS || memory == NULL || shim_passthrough())
        return rc;
    uint64_t f, t, u;
    shim_mem_view(device_of(device, memory->total), memory->free + memory->reserved, &f, &t, &u);
    memory->total = t;
    memory->reserved = 0;
    memory->free = f;
    memory->used = u;
    return rc;
}
