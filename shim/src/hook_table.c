#include <string.h>

#include "hooks.h"

static const hook_entry g_hooks[] = {
#define X(name) {#name, RS_##name, (void *)&name},
    HOOKED_FUNCTIONS(X)
#undef X
};

#define N_HOOKS (sizeof g_hooks / sizeof g_hooks[0])

const hook_entry *hook_find(const char *name)
{
    for (size_t i = 0; i < N_HOOKS; i++)
        if (strcmp(g_hooks[i].name, name) == 0)
            return &g_hooks[i];
    return NULL;
}

const hook_entry *hook_for_symbol(enum real_symbol id)
{
    for (size_t i = 0; i < N_HOOKS; i++)
        if (g_hooks[i].real == id)
            return &g_hooks[i];
    return NULL;
}

const hook_entry *hook_for_real(void *p)
{
    if (p == NULL)
        return NULL;
    for (size_t i = 0; i < N_HOOKS; i++)
        if (real_sym_lib(g_hooks[i].real) == LIB_CUDA && real_sym(g_hooks[i].real) == p)
            return &g_hooks[i];
    return NULL;
}
