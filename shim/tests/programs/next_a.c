#include <dlfcn.h>

int next_probe(void)
{
    return 1;
}

/* dlsym(RTLD_NEXT) from this library must find the next definition (libnext_b's),
 * not this one: it only works if an interposed dlsym keeps the caller's identity. */
int call_next(void)
{
    int (*f)(void) = (int (*)(void))dlsym(RTLD_NEXT, "next_probe");
    return f ? f() : -1;
}
