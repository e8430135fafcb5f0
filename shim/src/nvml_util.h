/* What the library itself asks NVML: device index by UUID, processes on a device. */
#ifndef HAMI_NVML_UTIL_H
#define HAMI_NVML_UTIL_H

#include <stdint.h>
#include <sys/types.h>

/* NVML index of the device with `uuid` (the container's physical order), or -1. */
int nvml_index_of_uuid(const char *uuid);

/* Number of compute processes NVML lists on the device, or -1 when unknown. */
int nvml_process_count(const char *uuid);

/* NVML's used bytes for process `pid` on the device; 0 on success, -1 when NVML is
 * unavailable or does not list the pid (e.g. another pid namespace). */
int nvml_process_used(const char *uuid, pid_t pid, uint64_t *bytes);

#endif
