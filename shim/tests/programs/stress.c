/*
 * stress: random allocations and frees on one device, to race with other processes
 * sharing the same limit. Starts when the file named by --go exists, so that all
 * racers begin together. Prints {"ok":..,"oom":..,"other":..}.
 *   stress --seed S --ops N --min-mb A --max-mb B [--go FILE] [--ord N]
 */
#include <sched.h>
#include <unistd.h>

#include "common.h"

int main(int argc, char **argv)
{
    unsigned seed = 1;
    long ops = 1000;
    int min_mb = 64, max_mb = 256, ord = 0;
    const char *go = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seed")) seed = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ops")) ops = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--min-mb")) min_mb = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-mb")) max_mb = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--go")) go = argv[i + 1];
        else if (!strcmp(argv[i], "--ord")) ord = atoi(argv[i + 1]);
    }
    ctx_on(ord);
    if (go)
        while (access(go, F_OK) != 0)
            usleep(200);
    CUdeviceptr held[64];
    int n = 0;
    long ok = 0, oom = 0, other = 0;
    for (long k = 0; k < ops; k++) {
        int r = rand_r(&seed);
        if (n > 0 && (n == 64 || r % 3 == 0)) {
            int j = r % n;
            if (cuMemFree_v2(held[j]) != CUDA_SUCCESS)
                other++;
            held[j] = held[--n];
        } else {
            size_t mb = (size_t)(min_mb + (r / 3) % (max_mb - min_mb + 1));
            CUresult rc = cuMemAlloc_v2(&held[n], mb << 20);
            if (rc == CUDA_SUCCESS)
                ok++, n++;
            else if (rc == CUDA_ERROR_OUT_OF_MEMORY)
                oom++;
            else
                other++;
        }
        if (r % 7 == 0)
            sched_yield();
    }
    while (n > 0)
        cuMemFree_v2(held[--n]);
    printf("{\"ok\":%ld,\"oom\":%ld,\"other\":%ld}\n", ok, oom, other);
    return 0;
}
