/*
 * Symbol resolution: the real dlsym (found with dlvsym, never through our own
 * dlsym), the real libcuda.so.1 / libnvidia-ml.so.1 (loaded lazily), and a cache of
 * the real entry points the shim calls. One list below names every one of them.
 */
#ifndef HAMI_REAL_DRIVER_H
#define HAMI_REAL_DRIVER_H

#include "cuda_abi.h"

enum { LIB_CUDA = 0, LIB_NVML = 1 };

/* X(name, alternative name or NULL, library, parameter list) */
#define REAL_FUNCTIONS(X)                                                                      \
    X(cuInit, NULL, LIB_CUDA, (unsigned int))                                                  \
    X(cuDeviceGet, NULL, LIB_CUDA, (CUdevice *, int))                                          \
    X(cuDeviceGetUuid, NULL, LIB_CUDA, (CUuuid *, CUdevice))                                   \
    X(cuDeviceTotalMem_v2, NULL, LIB_CUDA, (size_t *, CUdevice))                               \
    X(cuDevicePrimaryCtxGetState, NULL, LIB_CUDA, (CUdevice, unsigned int *, int *))           \
    X(cuDevicePrimaryCtxRetain, NULL, LIB_CUDA, (CUcontext *, CUdevice))                       \
    X(cuDevicePrimaryCtxRelease_v2, NULL, LIB_CUDA, (CUdevice))                                \
    X(cuDevicePrimaryCtxReset_v2, NULL, LIB_CUDA, (CUdevice))                                  \
    X(cuCtxGetDevice, NULL, LIB_CUDA, (CUdevice *))                                            \
    X(cuCtxGetCurrent, NULL, LIB_CUDA, (CUcontext *))                                          \
    X(cuCtxDestroy_v2, NULL, LIB_CUDA, (CUcontext))                                            \
    X(cuMemGetInfo_v2, NULL, LIB_CUDA, (size_t *, size_t *))                                   \
    X(cuMemAlloc_v2, NULL, LIB_CUDA, (CUdeviceptr *, size_t))                                  \
    X(cuMemAllocPitch_v2, NULL, LIB_CUDA, (CUdeviceptr *, size_t *, size_t, size_t, unsigned)) \
    X(cuMemAllocManaged, NULL, LIB_CUDA, (CUdeviceptr *, size_t, unsigned int))                \
    X(cuMemAdvise, NULL, LIB_CUDA, (CUdeviceptr, size_t, int, CUdevice))                       \
    X(cuMemAdvise_v2, NULL, LIB_CUDA, (CUdeviceptr, size_t, int, CUmemLocation))               \
    X(cuMemFree_v2, NULL, LIB_CUDA, (CUdeviceptr))                                             \
    X(cuMemAllocAsync, NULL, LIB_CUDA, (CUdeviceptr *, size_t, CUstream))                      \
    X(cuMemAllocAsync_ptsz, NULL, LIB_CUDA, (CUdeviceptr *, size_t, CUstream))                 \
    X(cuMemFreeAsync, NULL, LIB_CUDA, (CUdeviceptr, CUstream))                                 \
    X(cuMemFreeAsync_ptsz, NULL, LIB_CUDA, (CUdeviceptr, CUstream))                            \
    X(cuMemAllocFromPoolAsync, NULL, LIB_CUDA, (CUdeviceptr *, size_t, CUmemoryPool, CUstream)) \
    X(cuMemAllocFromPoolAsync_ptsz, NULL, LIB_CUDA,                                            \
      (CUdeviceptr *, size_t, CUmemoryPool, CUstream))                                         \
    X(cuMemPoolCreate, NULL, LIB_CUDA, (CUmemoryPool *, const CUmemPoolPropsPrefix *))         \
    X(cuMemPoolDestroy, NULL, LIB_CUDA, (CUmemoryPool))                                        \
    X(cuMemCreate, NULL, LIB_CUDA,                                                             \
      (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long)) \
    X(cuMemRelease, NULL, LIB_CUDA, (CUmemGenericAllocationHandle))                            \
    X(cuArrayCreate_v2, NULL, LIB_CUDA, (CUarray *, const CUDA_ARRAY_DESCRIPTOR *))            \
    X(cuArray3DCreate_v2, NULL, LIB_CUDA, (CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *))        \
    X(cuArrayDestroy, NULL, LIB_CUDA, (CUarray))                                               \
    X(cuLaunchKernel, NULL, LIB_CUDA,                                                          \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,       \
       CUstream, void **, void **))                                                            \
    X(cuLaunchKernel_ptsz, NULL, LIB_CUDA,                                                     \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,       \
       CUstream, void **, void **))                                                            \
    X(cuLaunchKernelEx, NULL, LIB_CUDA, (const CUlaunchConfig *, CUfunction, void **, void **)) \
    X(cuLaunchKernelEx_ptsz, NULL, LIB_CUDA,                                                   \
      (const CUlaunchConfig *, CUfunction, void **, void **))                                  \
    X(cuLaunchCooperativeKernel, NULL, LIB_CUDA,                                               \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,       \
       CUstream, void **))                                                                     \
    X(cuLaunchCooperativeKernel_ptsz, NULL, LIB_CUDA,                                          \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,       \
       CUstream, void **))                                                                     \
    X(cuGraphLaunch, NULL, LIB_CUDA, (CUgraphExec, CUstream))                                  \
    X(cuGraphLaunch_ptsz, NULL, LIB_CUDA, (CUgraphExec, CUstream))                             \
    X(cuGetProcAddress, NULL, LIB_CUDA, (const char *, void **, int, cuuint64_t))              \
    X(cuGetProcAddress_v2, NULL, LIB_CUDA,                                                     \
      (const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))              \
    X(cuEventCreate, NULL, LIB_CUDA, (CUevent *, unsigned int))                                \
    X(cuEventDestroy_v2, NULL, LIB_CUDA, (CUevent))                                            \
    X(cuEventRecord, NULL, LIB_CUDA, (CUevent, CUstream))                                      \
    X(cuEventQuery, NULL, LIB_CUDA, (CUevent))                                                 \
    X(cuEventElapsedTime, "cuEventElapsedTime_v2", LIB_CUDA, (float *, CUevent, CUevent))      \
    X(cuStreamIsCapturing, NULL, LIB_CUDA, (CUstream, CUstreamCaptureStatus *))                \
    X(cuStreamSynchronize, NULL, LIB_CUDA, (CUstream))                                         \
    X(nvmlInit_v2, NULL, LIB_NVML, (void))                                                     \
    X(nvmlDeviceGetMemoryInfo, NULL, LIB_NVML, (nvmlDevice_t, nvmlMemory_t *))                 \
    X(nvmlDeviceGetMemoryInfo_v2, NULL, LIB_NVML, (nvmlDevice_t, nvmlMemory_v2_t *))           \
    X(nvmlDeviceGetUUID, NULL, LIB_NVML, (nvmlDevice_t, char *, unsigned int))                 \
    X(nvmlDeviceGetHandleByUUID, NULL, LIB_NVML, (const char *, nvmlDevice_t *))               \
    X(nvmlDeviceGetIndex, NULL, LIB_NVML, (nvmlDevice_t, unsigned int *))                      \
    X(nvmlDeviceGetComputeRunningProcesses_v3, NULL, LIB_NVML,                                 \
      (nvmlDevice_t, unsigned int *, void *))                                                  \
    X(nvmlDeviceGetComputeRunningProcesses_v2, NULL, LIB_NVML,                                 \
      (nvmlDevice_t, unsigned int *, void *))                                                  \
    X(nvmlDeviceGetComputeRunningProcesses, NULL, LIB_NVML,                                    \
      (nvmlDevice_t, unsigned int *, void *))

#define X(name, alt, lib, args) RS_##name,
enum real_symbol { REAL_FUNCTIONS(X) RS_COUNT };
#undef X

/* CUresult and nvmlReturn_t are both int. name##_fn is the function type (used to
 * declare the hooks, which carry the same names), name##_pfn a pointer to it. */
#define X(name, alt, lib, args) typedef int name##_fn args; typedef int (*name##_pfn) args;
REAL_FUNCTIONS(X)
#undef X

typedef void *(*dlsym_pfn)(void *, const char *);

/* The C library's dlsym, or NULL if it cannot be found. */
dlsym_pfn real_dlsym(void);

/* Handle of the real library; with load == 0 only if the process already loaded it. */
void *real_library(int lib, int load);

/* The real entry point (loading the library if needed), or NULL. */
void *real_sym(enum real_symbol id);

const char *real_sym_name(enum real_symbol id);
int real_sym_lib(enum real_symbol id);

#define REAL(name) ((name##_pfn)real_sym(RS_##name))

#endif
