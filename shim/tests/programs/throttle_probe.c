/*
 * throttle_probe: launches stand-in kernels back to back for a while and prints the
 * duty cycle the (simulated) GPU achieved after a warm-up, from the stand-in
 * driver's own record of when each kernel ran.
 *   throttle_probe --seconds T --warmup W --grid BLOCKS --variant kernel|ptsz|ex|ex_ptsz|coop|coop_ptsz|graph
 *                  [--report-ms MS]   also one line per MS window: {"t0","t1","duty","run_delay_ns"} (CLOCK_MONOTONIC ns)
 *                  [--stop-file PATH] stop early once PATH exists (a test ends a run on an event)
 *
 * run_delay_ns: how long the launching thread waited, runnable, for a CPU in the window
 * (the kernel's schedstat, sched-stats.rst). The simulated GPU idles only when the
 * launcher is not there to feed it, so on a loaded machine duty can fall short of what
 * the shim allows by at most this much: tests bound the shim's share with it.
 */
#include <unistd.h>

#include "common.h"

typedef CUresult (*fn_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
typedef CUresult (*fn_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*fn_coop)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void **);
typedef CUresult (*fn_graph)(CUgraphExec, CUstream);

/* Nanoseconds this thread has waited on a run queue (/proc/thread-self/schedstat, field 2). */
static uint64_t run_delay_ns(void)
{
    unsigned long long on_cpu = 0, waited = 0;
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (f == NULL)
        return 0;
    if (fscanf(f, "%llu %llu", &on_cpu, &waited) != 2)
        waited = 0;
    fclose(f);
    return (uint64_t)waited;
}

int main(int argc, char **argv)
{
    double seconds = 2, warmup = 0.5;
    unsigned grid = 132;
    long report_ms = 0;
    const char *variant = "kernel";
    const char *stop_file = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--grid")) grid = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--variant")) variant = argv[i + 1];
        else if (!strcmp(argv[i], "--report-ms")) report_ms = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--stop-file")) stop_file = argv[i + 1];
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
    uint64_t win = t_start, win_delay = run_delay_ns(), measure_delay = win_delay;
    int measuring = warmup <= 0;
    while (now_ns() < t_end && rc == CUDA_SUCCESS && !(stop_file && access(stop_file, F_OK) == 0)) {
        if (!measuring && now_ns() >= t_measure) {
            measure_delay = run_delay_ns();
            measuring = 1;
        }
        if (report_ms > 0 && now_ns() - win >= (uint64_t)report_ms * 1000000ull) {
            uint64_t t = now_ns(), d = run_delay_ns();
            printf("{\"t0\":%llu,\"t1\":%llu,\"duty\":%.4f,\"run_delay_ns\":%llu}\n", (unsigned long long)win,
                   (unsigned long long)t, (double)busy(win, t) / (double)(t - win), (unsigned long long)(d - win_delay));
            fflush(stdout);
            win = t;
            win_delay = d;
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
    uint64_t delayed = run_delay_ns() - measure_delay;
    cuCtxSynchronize();
    double duty = (double)busy(t_measure, t_stop) / (double)(t_stop - t_measure);
    printf("{\"rc\":%d,\"duty\":%.4f,\"launches\":%ld,\"window_s\":%.3f,\"t_start\":%llu,\"t_stop\":%llu,"
           "\"run_delay_ns\":%llu}\n",
           rc, duty, launches, (double)(t_stop - t_measure) / 1e9, (unsigned long long)t_start,
           (unsigned long long)t_stop, (unsigned long long)delayed);
    return rc == CUDA_SUCCESS ? 0 : 1;
}
