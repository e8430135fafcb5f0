#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* -1 = not read yet. Racing first readers compute the same value. */
static int g_level = -1;

static int parse_level(const char *s)
{
    if (s == NULL || *s == '\0')
        return LOG_LVL_OFF;
    if (s[0] >= '0' && s[0] <= '9' && s[1] == '\0')
        return s[0] - '0' > LOG_LVL_DEBUG ? LOG_LVL_DEBUG : s[0] - '0';
    static const char *names[] = {"off", "error", "warn", "info", "debug"};
    for (int i = 0; i <= LOG_LVL_DEBUG; i++)
        if (strcasecmp(s, names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return LOG_LVL_WARN;
    /* Asked for logs but spelled it oddly: show errors and warnings. */
    return LOG_LVL_WARN;
}

int shim_log_level(void)
{
    int lvl = __atomic_load_n(&g_level, __ATOMIC_RELAXED);
    if (lvl < 0) {
        lvl = parse_level(getenv("LIBCUDA_LOG_LEVEL"));
        __atomic_store_n(&g_level, lvl, __ATOMIC_RELAXED);
    }
    return lvl;
}

void shim_log(int level, const char *fmt, ...)
{
    static const char *tags[] = {"", "ERROR", "WARN", "INFO", "DEBUG"};
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "[hami-vgpu %s pid=%d] ",
                     tags[level < 0 || level > LOG_LVL_DEBUG ? 0 : level], (int)getpid());
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    /* One write() per line so lines from several threads do not interleave. */
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
}
