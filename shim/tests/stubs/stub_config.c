#include "stub_config.h"

#include <ctype.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char *g_file_keys[64], *g_file_vals[64];
static int g_file_n;
static stub_gpus g_gpus;
static stub_state *g_state;

uint64_t stub_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void load_file(void)
{
    const char *path = getenv("STUB_CONFIG");
    if (!path)
        return;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f) && g_file_n < 64) {
        char *eq = strchr(line, '=');
        if (line[0] == '#' || !eq)
            continue;
        *eq = 0;
        char *v = eq + 1;
        v[strcspn(v, "\r\n")] = 0;
        g_file_keys[g_file_n] = strdup(line);
        g_file_vals[g_file_n] = strdup(v);
        g_file_n++;
    }
    fclose(f);
}

uint64_t stub_parse_size(const char *s)
{
    char *end;
    uint64_t v = strtoull(s, &end, 10);
    switch (*end) {
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    default: break;
    }
    return v;
}

static void list_item(const char *list, int i, char *out, size_t len)
{
    const char *p = list;
    for (int k = 0; k < i; k++) {
        const char *c = strchr(p, ',');
        if (!c) {
            /* shorter list: the last item applies to the rest */
            break;
        }
        p = c + 1;
    }
    size_t n = strcspn(p, ",");
    if (n >= len)
        n = len - 1;
    memcpy(out, p, n);
    out[n] = 0;
}

static int hexval(int c)
{
    return isdigit(c) ? c - '0' : tolower(c) - 'a' + 10;
}

static void init(void)
{
    load_file();
    const char *uuids = stub_env("STUB_GPUS");
    if (!uuids)
        uuids = "GPU-00000000-1111-2222-3333-000000000000,GPU-00000000-1111-2222-3333-000000000001";
    const char *mem = stub_env("STUB_GPU_MEM");
    const char *sms = stub_env("STUB_GPU_SMS");
    int n = 1;
    for (const char *c = uuids; *c; c++)
        n += *c == ',';
    if (n > STUB_MAX_GPUS)
        n = STUB_MAX_GPUS;
    g_gpus.n = n;
    for (int i = 0; i < n; i++) {
        list_item(uuids, i, g_gpus.uuid[i], sizeof g_gpus.uuid[i]);
        int k = 0;
        for (const char *c = g_gpus.uuid[i] + 4; *c && k < 32; c++)
            if (isxdigit((unsigned char)*c)) {
                int v = hexval((unsigned char)*c);
                if (k % 2 == 0)
                    g_gpus.uuid_bytes[i][k / 2] = (unsigned char)(v << 4);
                else
                    g_gpus.uuid_bytes[i][k / 2] |= (unsigned char)v;
                k++;
            }
        char item[64];
        if (mem) {
            list_item(mem, i, item, sizeof item);
            g_gpus.mem[i] = stub_parse_size(item);
        } else {
            g_gpus.mem[i] = 80ull << 30;
        }
        if (sms) {
            list_item(sms, i, item, sizeof item);
            g_gpus.sms[i] = atoi(item);
        } else {
            g_gpus.sms[i] = 132;
        }
        if (g_gpus.sms[i] <= 0)
            g_gpus.sms[i] = 1;
    }
    const char *state = stub_env("STUB_STATE_FILE");
    if (state) {
        int fd = open(state, O_RDWR | O_CREAT, 0666);
        if (fd >= 0 && ftruncate(fd, sizeof(stub_state)) == 0) {
            void *m = mmap(NULL, sizeof(stub_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m != MAP_FAILED)
                g_state = m;
        }
        if (fd >= 0)
            close(fd);
    }
}

const char *stub_env(const char *name)
{
    const char *v = getenv(name);
    if (v)
        return v;
    for (int i = 0; i < g_file_n; i++)
        if (strcmp(g_file_keys[i], name) == 0)
            return g_file_vals[i];
    return NULL;
}

const stub_gpus *stub_gpus_get(void)
{
    pthread_once(&g_once, init);
    return &g_gpus;
}

stub_state *stub_state_get(void)
{
    pthread_once(&g_once, init);
    return g_state;
}

uint64_t stub_env_u64(const char *name, uint64_t dflt)
{
    pthread_once(&g_once, init);
    const char *v = stub_env(name);
    return v ? stub_parse_size(v) : dflt;
}

int64_t stub_env_i64(const char *name, int64_t dflt)
{
    pthread_once(&g_once, init);
    const char *v = stub_env(name);
    return v ? strtoll(v, NULL, 10) : dflt;
}
