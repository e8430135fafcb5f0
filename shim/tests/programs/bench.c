/*
 * bench: per-call cost of cuMemAlloc_v2 and cuLaunchKernel through the library's
 * hooks and straight into the driver, in the same process. The hooked entry points
 * are what a linked call resolves to (dlsym(RTLD_DEFAULT)); the unhooked ones are
 * the driver's own definitions (looked up with the C library's dlsym).
 * Rounds alternate between the two to cancel drift; medians are printed as JSON.
 *   bench [ROUNDS] [CALLS_PER_ROUND]
 */
#include "common.h"

typedef CUresult (*fn_alloc)(CUdeviceptr *, size_t);
typedef CUresult (*fn_free)(CUdeviceptr);
typedef CUresult (*fn_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double alloc_round(fn_alloc al, fn_free fr, int n, CUdeviceptr *ptrs)
{
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++)
        if (al(&ptrs[i], 4096) != CUDA_SUCCESS)
            exit(5);
    double per = (double)(now_ns() - t0) / n;
    for (int i = 0; i < n; i++)
        fr(ptrs[i]);
    return per;
}

static double launch_round(fn_launch l, int n)
{
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++)
        if (l((CUfunction)0x1000, 132, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS)
            exit(6);
    return (double)(now_ns() - t0) / n;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 31;
    int calls = argc > 2 ? atoi(argv[2]) : 2000;
    ctx_on(0);
    fn_alloc al_h = (fn_alloc)dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"), al_u = (fn_alloc)driver_sym("cuMemAlloc_v2");
    fn_free fr_h = (fn_free)dlsym(RTLD_DEFAULT, "cuMemFree_v2"), fr_u = (fn_free)driver_sym("cuMemFree_v2");
    fn_launch l_h = (fn_launch)dlsym(RTLD_DEFAULT, "cuLaunchKernel"), l_u = (fn_launch)driver_sym("cuLaunchKernel");
    if (!al_u || !fr_u || !l_u)
        return 4;
    CUdeviceptr *ptrs = calloc((size_t)calls, sizeof *ptrs);
    double *ah = calloc((size_t)rounds, sizeof(double)), *au = calloc((size_t)rounds, sizeof(double));
    double *lh = calloc((size_t)rounds, sizeof(double)), *lu = calloc((size_t)rounds, sizeof(double));
    alloc_round(al_h, fr_h, calls, ptrs); /* warm caches and lazy resolution */
    launch_round(l_h, calls);
    for (int r = 0; r < rounds; r++) {
        ah[r] = alloc_round(al_h, fr_h, calls, ptrs);
        au[r] = alloc_round(al_u, fr_u, calls, ptrs);
        lh[r] = launch_round(l_h, calls);
        lu[r] = launch_round(l_u, calls);
    }
    qsort(ah, (size_t)rounds, sizeof(double), cmp);
    qsort(au, (size_t)rounds, sizeof(double), cmp);
    qsort(lh, (size_t)rounds, sizeof(double), cmp);
    qsort(lu, (size_t)rounds, sizeof(double), cmp);
    printf("{\"hooked_distinct\":%d,\"alloc_hooked_ns\":%.1f,\"alloc_unhooked_ns\":%.1f,"
           "\"launch_hooked_ns\":%.1f,\"launch_unhooked_ns\":%.1f}\n",
           al_h != al_u && l_h != l_u, ah[rounds / 2], au[rounds / 2], lh[rounds / 2], lu[rounds / 2]);
    return 0;
}
