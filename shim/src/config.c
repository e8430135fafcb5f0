#include "config.h"

#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "log.h"

/* The limits file (PROTOCOL.md section 7): the device plugin mounts the container's
 * limits read-only at CFG_LIMITS_FILE, as KEY=VALUE lines. When it exists, the shim's
 * variables are read from it only: a container's own env (which kubelet lets win over
 * the device plugin's) cannot raise its share. HAMI_SHIM_LIMITS_FILE names another path
 * (tests), used only while CFG_LIMITS_FILE does not exist. */
#define CFG_LIMITS_FILE "/usr/local/vgpu/limits"
#define CFG_LIMITS_MAX 64
static char g_limits_buf[8192];
static const char *g_limit_keys[CFG_LIMITS_MAX];
static const char *g_limit_vals[CFG_LIMITS_MAX];
static int g_limit_count;
static int g_limits_from_file;

static void load_limits_file(void)
{
    g_limit_count = 0;
    g_limits_from_file = 0;
    const char *path = CFG_LIMITS_FILE;
    if (access(path, F_OK) != 0) {
        path = getenv("HAMI_SHIM_LIMITS_FILE");
        if (path == NULL || *path == '\0')
            return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        /* It exists but cannot be read: fail closed rather than fall back to env. */
        LOG_ERROR("limits file %s unreadable; refusing GPU memory", path);
        g_limits_from_file = 1;
        return;
    }
    ssize_t n = read(fd, g_limits_buf, sizeof g_limits_buf - 1);
    close(fd);
    if (n < 0)
        n = 0;
    g_limits_buf[n] = '\0';
    g_limits_from_file = 1;
    char *line = g_limits_buf;
    while (line && *line && g_limit_count < CFG_LIMITS_MAX) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *eq = strchr(line, '=');
        if (eq && eq != line && line[0] != '#') {
            *eq = '\0';
            g_limit_keys[g_limit_count] = line;
            g_limit_vals[g_limit_count] = eq + 1;
            g_limit_count++;
        }
        line = next;
    }
}

/* A shim variable: from the limits file when there is one (absent there = unset, the
 * environment is not consulted), else from the environment. */
static const char *shim_var(const char *name)
{
    if (!g_limits_from_file)
        return getenv(name);
    for (int i = 0; i < g_limit_count; i++)
        if (strcmp(g_limit_keys[i], name) == 0)
            return g_limit_vals[i];
    return NULL;
}

int config_limits_from_file(void)
{
    return g_limits_from_file;
}

int config_parse_size(const char *s, uint64_t *out)
{
    if (s == NULL || !isdigit((unsigned char)s[0]))
        return -1;
    uint64_t v = 0;
    const char *p = s;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    switch (*p) {
    case '\0': break;
    case 'k': case 'K': shift = 10; p++; break;
    case 'm': case 'M': shift = 20; p++; break;
    case 'g': case 'G': shift = 30; p++; break;
    default: return -1;
    }
    if (*p != '\0')
        return -1;
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = v << shift;
    return 0;
}

int config_parse_percent(const char *s, int *out)
{
    if (s == NULL || *s == '\0' || strlen(s) > 3)
        return -1;
    int v = 0;
    for (const char *p = s; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return -1;
        v = v * 10 + (*p - '0');
    }
    if (v > 100)
        return -1;
    *out = v;
    return 0;
}

static int env_true(const char *name)
{
    const char *v = shim_var(name);
    return v && (strcasecmp(v, "true") == 0 || strcmp(v, "1") == 0 || strcasecmp(v, "yes") == 0);
}

static void load_visible(shim_config *cfg)
{
    cfg->n_visible = 0;
    const char *v = shim_var("NVIDIA_VISIBLE_DEVICES");
    if (v == NULL)
        return;
    int n = 0;
    const char *p = v;
    while (*p && n < CFG_MAX_VISIBLE) {
        while (*p == ' ')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        size_t len = (size_t)(e - p);
        while (len && p[len - 1] == ' ')
            len--;
        /* Indices, "all", "none": not a UUID list; ordering then comes from NVML. */
        if (len < 5 || len >= CFG_UUID_LEN ||
            (strncmp(p, "GPU-", 4) != 0 && strncmp(p, "MIG-", 4) != 0)) {
            cfg->n_visible = 0;
            return;
        }
        memcpy(cfg->visible[n], p, len);
        cfg->visible[n][len] = '\0';
        n++;
        p = *e ? e + 1 : e;
    }
    cfg->n_visible = n;
}

void config_load(shim_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    load_limits_file();
    cfg->disabled = env_true("CUDA_DISABLE_CONTROL");
    /* From the limits file when there is one: the device plugin sets it only where the
     * node's memory scaling is above 1 (a tenant's own env cannot turn it on). */
    cfg->oversubscribe = env_true("CUDA_OVERSUBSCRIBE");

    const char *path = shim_var("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    if (path == NULL || *path == '\0')
        path = CFG_DEFAULT_REGION_PATH;
    snprintf(cfg->region_path, sizeof cfg->region_path, "%s", path);

    const char *pol = shim_var("GPU_CORE_UTILIZATION_POLICY");
    if (pol == NULL || *pol == '\0' || strcasecmp(pol, "default") == 0) {
        cfg->policy = POLICY_DEFAULT;
    } else if (strcasecmp(pol, "force") == 0) {
        cfg->policy = POLICY_FORCE;
    } else if (strcasecmp(pol, "disable") == 0 || strcasecmp(pol, "none") == 0) {
        cfg->policy = POLICY_DISABLE;
    } else {
        /* Fail closed: an unreadable policy must not lift the compute limit. */
        cfg->policy = POLICY_FORCE;
        LOG_ERROR("GPU_CORE_UTILIZATION_POLICY=\"%s\" is not default|force|disable; "
                  "enforcing the compute limit (force)", pol);
    }

    cfg->priority = -1;
    const char *prio = shim_var("CUDA_TASK_PRIORITY");
    if (prio && *prio) {
        char *end = NULL;
        long v = strtol(prio, &end, 10);
        if (*end == '\0' && v >= 0 && v <= 1000)
            cfg->priority = (int)v;
        else
            LOG_ERROR("CUDA_TASK_PRIORITY=\"%s\" is not a small non-negative integer; ignored", prio);
    }

    /* Through shim_var: with a limits file the device plugin's fixed paths apply, and a
     * tenant's env cannot point them elsewhere. */
    const char *board = shim_var("HAMI_SHIM_PRIORITY_DIR");
    snprintf(cfg->priority_board_dir, sizeof cfg->priority_board_dir, "%s",
             board && *board ? board : CFG_DEFAULT_PRIORITY_BOARD);
    const char *beat = shim_var("HAMI_SHIM_PRIORITY_BEAT_DIR");
    snprintf(cfg->priority_beat_dir, sizeof cfg->priority_beat_dir, "%s",
             beat && *beat ? beat : CFG_DEFAULT_PRIORITY_BEAT);

    /* The tuning knobs below weaken enforcement when a tenant picks them (reconcile -1
     * stops charging what NVML sees beyond the hooks): like the limits, they come from
     * the limits file when there is one (the device plugin writes none: defaults). */
    cfg->lock_timeout_ms = CFG_DEFAULT_LOCK_TIMEOUT_MS;
    const char *lt = shim_var("HAMI_SHIM_LOCK_TIMEOUT_MS");
    if (lt && *lt) {
        char *end = NULL;
        long v = strtol(lt, &end, 10);
        if (*end == '\0' && v >= 1 && v <= 600000)
            cfg->lock_timeout_ms = (int)v;
        else
            LOG_ERROR("HAMI_SHIM_LOCK_TIMEOUT_MS=\"%s\" is not 1..600000; using %d", lt,
                      CFG_DEFAULT_LOCK_TIMEOUT_MS);
    }
    cfg->reconcile_ms = CFG_DEFAULT_RECONCILE_MS;
    const char *rc = shim_var("HAMI_SHIM_RECONCILE_MS");
    if (rc && *rc) {
        char *end = NULL;
        long v = strtol(rc, &end, 10);
        if (*end == '\0' && v >= -1 && v <= 3600000)
            cfg->reconcile_ms = (int)v;
        else
            LOG_ERROR("HAMI_SHIM_RECONCILE_MS=\"%s\" is not -1..3600000; using %d", rc,
                      CFG_DEFAULT_RECONCILE_MS);
    }

    /* Launches skip all throttle work when no compute limit is configured at all. */
    if (g_limits_from_file) {
        for (int i = 0; i < g_limit_count; i++)
            if (strncmp(g_limit_keys[i], "CUDA_DEVICE_SM_LIMIT", 20) == 0 ||
                strncmp(g_limit_keys[i], "CUDA_DEVICE_CORE_LIMIT", 22) == 0)
                cfg->sm_configured = 1;
    } else {
        extern char **environ;
        for (char **e = environ; e && *e; e++)
            if (strncmp(*e, "CUDA_DEVICE_SM_LIMIT", 20) == 0 ||
                strncmp(*e, "CUDA_DEVICE_CORE_LIMIT", 22) == 0)
                cfg->sm_configured = 1;
    }
    load_visible(cfg);
}

int config_visible_index(const shim_config *cfg, const char *uuid)
{
    for (int i = 0; i < cfg->n_visible; i++)
        if (strcmp(cfg->visible[i], uuid) == 0)
            return i;
    return -1;
}

/* Looks up NAME_<index>, then NAME; returns the value and the name it came from. */
static const char *lookup(const char *base, int index, char *name, size_t name_len)
{
    if (index >= 0) {
        snprintf(name, name_len, "%s_%d", base, index);
        const char *v = shim_var(name);
        if (v != NULL)
            return v;
    }
    snprintf(name, name_len, "%s", base);
    return shim_var(name);
}

void config_device_limits(int index, device_limits *out)
{
    memset(out, 0, sizeof *out);
    char name[64];

    const char *mem = lookup("CUDA_DEVICE_MEMORY_LIMIT", index, name, sizeof name);
    if (mem == NULL) {
        out->mem_state = LIMIT_MISSING;
        snprintf(out->reason, sizeof out->reason,
                 "no CUDA_DEVICE_MEMORY_LIMIT_%d or CUDA_DEVICE_MEMORY_LIMIT in the environment",
                 index);
    } else if (config_parse_size(mem, &out->mem_bytes) != 0) {
        out->mem_state = LIMIT_MALFORMED;
        snprintf(out->reason, sizeof out->reason,
                 "%s=\"%.64s\" is not a size (<digits>[k|m|g])", name, mem);
    } else {
        out->mem_state = LIMIT_OK;
    }

    /* Indexed names beat the all-device defaults; SM_LIMIT (HAMi) beats CORE_LIMIT
     * (handbook) at the same level. */
    const char *sm = NULL;
    if (index >= 0) {
        sm = lookup("CUDA_DEVICE_SM_LIMIT", index, name, sizeof name);
        if (sm == NULL || strcmp(name, "CUDA_DEVICE_SM_LIMIT") == 0) {
            char alt[64];
            const char *c = lookup("CUDA_DEVICE_CORE_LIMIT", index, alt, sizeof alt);
            if (c != NULL && strcmp(alt, "CUDA_DEVICE_CORE_LIMIT") != 0) {
                sm = c;
                snprintf(name, sizeof name, "%s", alt);
            }
        }
    }
    if (sm == NULL)
        sm = lookup("CUDA_DEVICE_SM_LIMIT", -1, name, sizeof name);
    if (sm == NULL)
        sm = lookup("CUDA_DEVICE_CORE_LIMIT", -1, name, sizeof name);
    if (sm == NULL) {
        out->sm_state = LIMIT_MISSING;
    } else if (config_parse_percent(sm, &out->sm_percent) != 0) {
        out->sm_state = LIMIT_MALFORMED;
        if (out->mem_state == LIMIT_OK)
            snprintf(out->reason, sizeof out->reason,
                     "%s=\"%.64s\" is not a percentage 0..100", name, sm);
    } else {
        out->sm_state = LIMIT_OK;
    }
}
