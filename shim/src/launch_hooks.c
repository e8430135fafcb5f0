/*
 * Kernel launches: every launch entry point goes through the compute throttle.
 * _ptsz variants treat stream 0 as the calling thread's default stream.
 */
#include <stdint.h>

#include "hooks.h"
#include "shim.h"
#include "throttle.h"

#define GRID unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shm

static CUresult launch(cuLaunchKernel_pfn real, int per_thread, CUfunction f, GRID, CUstream s, void **params,
                       void **extra)
{
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    throttle_ticket t;
    throttle_begin(&t, s, per_thread, (uintptr_t)f);
    CUresult rc = real(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
    throttle_end(&t, rc);
    return rc;
}

SHIM_EXPORT CUresult cuLaunchKernel(CUfunction f, GRID, CUstream s, void **params, void **extra)
{
    return launch(REAL(cuLaunchKernel), 0, f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}

SHIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, GRID, CUstream s, void **params, void **extra)
{
    return launch(REAL(cuLaunchKernel_ptsz), 1, f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}

static CUresult launch_ex(cuLaunchKernelEx_pfn real, int per_thread, const CUlaunchConfig *cfg, CUfunction f,
                          void **params, void **extra)
{
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    throttle_ticket t;
    throttle_begin(&t, cfg ? cfg->hStream : NULL, per_thread, (uintptr_t)f);
    CUresult rc = real(cfg, f, params, extra);
    throttle_end(&t, rc);
    return rc;
}

SHIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    return launch_ex(REAL(cuLaunchKernelEx), 0, config, f, params, extra);
}

SHIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    return launch_ex(REAL(cuLaunchKernelEx_ptsz), 1, config, f, params, extra);
}

static CUresult launch_coop(cuLaunchCooperativeKernel_pfn real, int per_thread, CUfunction f, GRID, CUstream s,
                            void **params)
{
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    throttle_ticket t;
    throttle_begin(&t, s, per_thread, (uintptr_t)f);
    CUresult rc = real(f, gx, gy, gz, bx, by, bz, shm, s, params);
    throttle_end(&t, rc);
    return rc;
}

SHIM_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, GRID, CUstream s, void **params)
{
    return launch_coop(REAL(cuLaunchCooperativeKernel), 0, f, gx, gy, gz, bx, by, bz, shm, s, params);
}

SHIM_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, GRID, CUstream s, void **params)
{
    return launch_coop(REAL(cuLaunchCooperativeKernel_ptsz), 1, f, gx, gy, gz, bx, by, bz, shm, s, params);
}

/* A graph launch is one unit of GPU work for the throttle, measured like a kernel. */
static CUresult graph_launch(cuGraphLaunch_pfn real, int per_thread, CUgraphExec g, CUstream s)
{
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    throttle_ticket t;
    throttle_begin(&t, s, per_thread, (uintptr_t)g);
    CUresult rc = real(g, s);
    throttle_end(&t, rc);
    return rc;
}

SHIM_EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s)
{
    return graph_launch(REAL(cuGraphLaunch), 0, g, s);
}

SHIM_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s)
{
    return graph_launch(REAL(cuGraphLaunch_ptsz), 1, g, s);
}
