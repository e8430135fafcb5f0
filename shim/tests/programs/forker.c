/*
 * forker: fork() with the library loaded. Limit expected: 1024 MiB on device 0.
 *   1. the parent holds 600 MiB, forks a child that never touches CUDA again;
 *   2. forks a child that uses CUDA: it sees the parent's usage, gets 424 MiB and no
 *      more, frees, exits;
 *   3. the parent then gets exactly its remaining 424 MiB;
 *   4. a thread allocates and frees in a loop while the main thread forks 20
 *      children that each allocate: none may hang (handlers keep locks consistent).
 * Prints one JSON line with what each step saw.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static volatile int g_stop;

static void *churn(void *arg)
{
    (void)arg;
    ctx_on(0);
    while (!g_stop) {
        CUdeviceptr p;
        if (cuMemAlloc_v2(&p, 1 << 20) == CUDA_SUCCESS)
            cuMemFree_v2(p);
    }
    return NULL;
}

static int wait_child(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(void)
{
    ctx_on(0);
    CUdeviceptr big;
    int parent_alloc = cuMemAlloc_v2(&big, 600u << 20);

    pid_t a = fork();
    if (a == 0)
        _exit(7); /* never touches CUDA */
    int a_status = wait_child(a);

    int pipefd[2];
    if (pipe(pipefd) != 0)
        return 5;
    pid_t b = fork();
    if (b == 0) {
        alarm(20);
        close(pipefd[0]);
        size_t f = 0, t = 0;
        cuMemGetInfo_v2(&f, &t);
        CUdeviceptr p, q;
        int r1 = cuMemAlloc_v2(&p, 424u << 20);
        int r2 = cuMemAlloc_v2(&q, 1);
        int r3 = cuMemFree_v2(p);
        char buf[256];
        int n = snprintf(buf, sizeof buf, "\"child_free_mib\":%zu,\"child_alloc_424\":%d,\"child_alloc_1\":%d,\"child_free\":%d",
                         f >> 20, r1, r2, r3);
        if (write(pipefd[1], buf, (size_t)n) != n)
            _exit(6);
        _exit(0);
    }
    close(pipefd[1]);
    char child[256] = "";
    ssize_t got = read(pipefd[0], child, sizeof child - 1);
    child[got > 0 ? got : 0] = 0;
    int b_status = wait_child(b);

    size_t f = 0, t = 0;
    cuMemGetInfo_v2(&f, &t);
    CUdeviceptr rest, one;
    int p_rest = cuMemAlloc_v2(&rest, 424u << 20);
    int p_one = cuMemAlloc_v2(&one, 1);
    cuMemFree_v2(rest);
    cuMemFree_v2(big);

    pthread_t th;
    pthread_create(&th, NULL, churn, NULL);
    int hung = 0, failed = 0;
    for (int k = 0; k < 20; k++) {
        pid_t c = fork();
        if (c == 0) {
            alarm(10); /* a deadlocked child dies of SIGALRM instead of hanging the test */
            ctx_on(0);
            CUdeviceptr p;
            int rc = cuMemAlloc_v2(&p, 1 << 20);
            if (rc == CUDA_SUCCESS)
                cuMemFree_v2(p);
            _exit(rc == CUDA_SUCCESS ? 0 : 1);
        }
        int st = wait_child(c);
        if (st == 128 + SIGALRM)
            hung++;
        else if (st != 0)
            failed++;
    }
    g_stop = 1;
    pthread_join(th, NULL);

    printf("{\"parent_alloc\":%d,\"a_status\":%d,\"b_status\":%d,%s,\"parent_free_mib\":%zu,"
           "\"parent_alloc_424\":%d,\"parent_alloc_1\":%d,\"hung\":%d,\"failed\":%d}\n",
           parent_alloc, a_status, b_status, child, f >> 20, p_rest, p_one, hung, failed);
    return 0;
}
