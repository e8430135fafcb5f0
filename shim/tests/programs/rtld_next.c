/* rtld_next: checks dlsym(RTLD_NEXT) / dlsym(RTLD_DEFAULT) semantics under the library. */
#include <dlfcn.h>
#include <stdio.h>

int call_next(void);
int next_probe(void);

int main(void)
{
    int (*def)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "next_probe");
    int (*nxt)(void) = (int (*)(void))dlsym(RTLD_NEXT, "next_probe");
    printf("{\"from_lib_next\":%d,\"default\":%d,\"from_main_next\":%d}\n", call_next(), def ? def() : -1,
           nxt ? nxt() : -1);
    return 0;
}
