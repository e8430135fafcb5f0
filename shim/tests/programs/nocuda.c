/*
 * nocuda: an ordinary program that never touches CUDA but uses dlopen/dlsym, fork
 * and threads. Under the library it must behave exactly as without it. Prints what
 * it computed and whether a GPU library got mapped into it.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
    void *m = dlopen("libm.so.6", RTLD_NOW);
    double (*cosine)(double) = m ? (double (*)(double))dlsym(m, "cos") : NULL;
    void *missing = m ? dlsym(m, "no_such_symbol_here") : NULL;
    const char *err = dlerror();
    int (*put)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "puts");
    pid_t c = fork();
    if (c == 0)
        _exit(3);
    int st = 0;
    waitpid(c, &st, 0);
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    int gpu_libs = 0;
    while (maps && fgets(line, sizeof line, maps))
        if (strstr(line, "libcuda") || strstr(line, "libnvidia-ml"))
            gpu_libs = 1;
    if (maps)
        fclose(maps);
    printf("{\"cos0\":%.1f,\"missing_is_null\":%d,\"dlerror_set\":%d,\"puts_found\":%d,\"child\":%d,\"gpu_libs\":%d}\n",
           cosine ? cosine(0.0) : -1.0, missing == NULL, err != NULL, put != NULL,
           WIFEXITED(st) ? WEXITSTATUS(st) : -1, gpu_libs);
    return 0;
}
