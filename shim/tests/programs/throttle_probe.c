/*
 * throttle_probe: launches stand-in kernels back to back for a while and prints the
 * duty cycle the (simulated) GPU achieved after a warm-up, from the stand-in
 * driver's own record of when each kernel ran.
 *   throttle_probe --seconds T --warmup W --grid BLOCKS --variant kernel|ptsz|ex|ex_ptsz|coop|coop_ptsz|graph
 *                  [--report-ms MS]   also one line per MS window: {"t0","t1","duty"} (CLOCK_MONOTONIC ns)
 */
#include <unistd.h>

#include "common.h"

typedef CUresult (*fn_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
typedef CUresult (*fn_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*fn_coop)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void **);
typedef CUresult (*fn_graph)(CUgraphExec, CUstream);

int main(int argc, char **argv)
{
    double seconds = 2, warmup = 0.5;
    unsigned grid = 132;
    long report_ms = 0;
    const char *variant = "kernel";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--grid")) grid = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--variant")) variant = argv[i + 1];
        else if (!strcmp(argv[i], "--report-ms")) report_ms = atol(argv[i + 1]);
    }
    ctx_on(0);
    uint64_t (*busy)(uint64_t, uint64_t) = (uint64_t(*)(uint64_t, uint64_t))dlsym(RTLD_DEFAULT, "stubBusyNs");
    /* Entry points as an application linked to the driver would call them. */
    char name[64];
    snprintf(name, sizeof name, "%s",
             !strcmp(variant, "kernel") ? "cuLaunchKernel"
             : !strcmp(variant, "ptsz") ? "cuLaunchKernel_ptsz"
             : !strcmp(variant, "ex") ? "cuLaunchKernelEx"
             : !strcmp(variant, "ex_ptsz") ? "cuLaunchKernelEx_ptsz"
             : !strcmp(variant, "coop") ? "cuLaunchCooperativeKernel"
             : !strcmp(variant, "coop_ptsz") ? "cuLaunchCooperativeKernel_ptsz"
                                             : "cuGraphLaunch");
    void *fn = dlsym(RTLD_DEFAULT, name);
    if (!fn || !busy) {
        fprintf(stderr, "throttle_probe: missing %s or stubBusyNs\n", name);
        return 4;
    }
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = grid;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 128;
    cfg.blockDimY = cfg.blockDimZ = 1;
    CUfunction f = (CUfunction)0x1000;
    uint64_t t_start = now_ns();
    uint64_t t_measure = t_start + (uint64_t)(warmup * 1e9);
    uint64_t t_end = t_measure + (uint64_t)(seconds * 1e9);
    long launches = 0;
    CUresult rc = CUDA_SUCCESS;
    uint64_t win = t_start;
    while (now_ns() < t_end && rc == CUDA_SUCCESS) {
        if (report_ms > 0 && now_ns() - win >= (uint64_t)report_ms * 1000000ull) {
            uint64_t t = now_ns();
            printf("{\"t0\":%llu,\"t1\":%llu,\"duty\":%.4f}\n", (unsigned long long)win, (unsigned long long)t,
                   (double)busy(win, t) / (double)(t - win));
            fflush(stdout);
            win = t;
        }
        if (strstr(name, "Ex"))
            rc = ((fn_ex)fn)(&cfg, f, NULL, NULL);
        else if (strstr(name, "Cooperative"))
            rc = ((fn_coop)fn)(f, grid, 1, 1, 128, 1, 1, 0, NULL, NULL);
        else if (strstr(name, "Graph"))
            rc = ((fn_graph)fn)((CUgraphExec)0x2000, NULL);
        else
            rc = ((fn_launch)fn)(f, grid, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
        launches++;
    }
    uint64_t t_stop = now_ns();
    cuCtxSynchronize();
    double duty = (double)busy(t_measure, t_stop) / (double)(t_stop - t_measure);
    printf("{\"rc\":%d,\"duty\":%.4f,\"launches\":%ld,\"window_s\":%.3f,\"t_start\":%llu,\"t_stop\":%llu}\n", rc,
           duty, launches, (double)(t_stop - t_measure) / 1e9, (unsigned long long)t_start,
           (unsigned long long)t_stop);
    return rc == CUDA_SUCCESS ? 0 : 1;
}
