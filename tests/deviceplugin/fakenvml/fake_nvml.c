/*
 * A stand-in libnvidia-ml.so.1 for tests: the real pynvml loads it through the dynamic
 * loader (LD_LIBRARY_PATH), so discovery and health code run their real paths without a
 * GPU. Built by the tests:  cc -shared -fPIC -O1 -Wl,-soname,libnvidia-ml.so.1
 *                           -o libnvidia-ml.so.1 fake_nvml.c -lpthread
 *
 * Driven by the JSON file named by $FAKE_NVML_CONFIG, re-read whenever it changes
 * (tests rewrite it to add events or failures while a process runs):
 *
 *   {
 *     "driver_version": "550.54.15",
 *     "fail": {"nvmlInit": 9},                  // function -> nvmlReturn_t, every device
 *     "topology": {"0-1": 10},                  // common-ancestor level of a pair (default 40)
 *     "devices": [
 *       {"uuid": "GPU-...", "name": "NVIDIA A100-PCIE-16GB", "memory_mib": 16384,
 *        "unified": false,                      // true: memory info NOT_SUPPORTED
 *        "bus_id": "00000000:3B:00.0", "mig": false,
 *        "events": true,                        // false: no event types supported
 *        "nvlinks": [{"peer": 1, "links": 2}],  // active NVLinks to another device index
 *        "processes": [{"pid": 4242, "used_bytes": 1073741824,   // host PID, usedGpuMemory
 *                       "type": "compute"}],    // or "graphics"; used_bytes -1: N/A
 *        "fail": {"nvmlDeviceGetMemoryInfo": 15}}
 *     ],
 *     "events": [{"device": 0, "xid": 79},     // delivered once each, in order; device -1:
 *                {"device": 1, "type": "double_bit_ecc"}]   // not attributable (NULL handle)
 *   }
 *
 * MIG (a device with "mig": true): its GPU instance profiles are "mig_profiles"
 *   [{"id": 0, "slices": 1, "memory_mib": 9856, "sm": 14, "instances": 7,
 *     "placements": [[0, 1], [1, 1], ...]}]   // [start, size] in memory slices
 * or, when absent, an A100-SXM4-80GB's (1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb,
 * 7g.80gb; NVIDIA's MIG user guide, "Supported MIG Profiles"). The GPU and compute
 * instances live in a state file ($FAKE_NVML_MIG_STATE, default "$FAKE_NVML_CONFIG.mig"),
 * shared by every process under flock, so instances outlive the process that made them
 * as on a real GPU. One compute instance per GPU instance, covering it whole.
 *
 * Only what hami-nvidia calls is implemented; structures and return codes follow nvml.h.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};

#define EVENT_SINGLE_BIT_ECC 0x1ULL
#define EVENT_DOUBLE_BIT_ECC 0x2ULL
#define EVENT_XID_CRITICAL 0x8ULL
#define MAX_DEVICES 64
#define MAX_FAILS 16
#define MAX_LINKS 18
#define MAX_EVENTS 256
#define MAX_PROCS 64
#define NVML_VALUE_NOT_AVAILABLE_ULL 0xFFFFFFFFFFFFFFFFULL

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

struct fail {
    char fn[64];
    int code;
};

#define MAX_MIG_PROFILES 16
#define MAX_PLACEMENTS 16
struct mig_profile {
    unsigned id, slices, memory_mib, sm, instances, nplacements;
    unsigned start[MAX_PLACEMENTS], size[MAX_PLACEMENTS];
};

struct fake_process {
    unsigned int pid;
    unsigned long long used_bytes;
    int graphics;
};

struct fake_device {
    struct fake_process procs[MAX_PROCS];
    int nprocs;
    struct mig_profile mig_profiles[MAX_MIG_PROFILES];
    int nmig_profiles;
    int index;
    char uuid[96];
    char name[96];
    char bus_id[32];
    unsigned long long memory_mib;
    int unified, mig, events;
    int link_peer[MAX_LINKS]; /* -1: inactive */
    struct fail fails[MAX_FAILS];
    int nfails;
};

struct fake_event {
    int device;
    unsigned long long type, data;
};

typedef struct fake_device *nvmlDevice_t;
typedef struct fake_event_set {
    unsigned long long mask[MAX_DEVICES];
} *nvmlEventSet_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct fake_device devices[MAX_DEVICES];
static int ndevices;
static struct fail global_fails[MAX_FAILS];
static int nglobal_fails;
static int topology[MAX_DEVICES][MAX_DEVICES];
static struct fake_event events[MAX_EVENTS];
static int nevents, delivered;
static char driver_version[80] = "550.54.15";
static int initialized;
static struct timespec loaded_mtime;
static off_t loaded_size = -1;

/* ---- a small JSON reader --------------------------------------------------------- */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };
struct jval {
    enum jtype t;
    double num;
    int b;
    char *str;
    struct jval **items;
    char **keys;
    int n;
};
struct jparser {
    const char *p;
    const char *err;
};

static void jfree(struct jval *v) {
    if (!v) return;
    for (int i = 0; i < v->n; i++) {
        jfree(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    free(v);
}

static void jskip(struct jparser *ps) {
    while (*ps->p && isspace((unsigned char)*ps->p)) ps->p++;
}

static struct jval *jparse(struct jparser *ps);

static char *jstring(struct jparser *ps) {
    if (*ps->p != '"') { ps->err = "expected a string"; return NULL; }
    ps->p++;
    size_t cap = 32, len = 0;
    char *out = malloc(cap);
    while (*ps->p && *ps->p != '"') {
        char c = *ps->p++;
        if (c == '\\') {
            char e = *ps->p++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case '"': case '\\': case '/': c = e; break;
            default: free(out); ps->err = "unsupported escape"; return NULL;
            }
        }
        if (len + 2 > cap) out = realloc(out, cap *= 2);
        out[len++] = c;
    }
    if (*ps->p != '"') { free(out); ps->err = "unterminated string"; return NULL; }
    ps->p++;
    out[len] = 0;
    return out;
}

static struct jval *jnew(enum jtype t) {
    struct jval *v = calloc(1, sizeof *v);
    v->t = t;
    return v;
}

static void jpush(struct jval *v, char *key, struct jval *item) {
    v->items = realloc(v->items, sizeof *v->items * (v->n + 1));
    if (v->t == J_OBJ) {
        v->keys = realloc(v->keys, sizeof *v->keys * (v->n + 1));
        v->keys[v->n] = key;
    }
    v->items[v->n++] = item;
}

static struct jval *jparse(struct jparser *ps) {
    jskip(ps);
    char c = *ps->p;
    if (c == '{' || c == '[') {
        int obj = c == '{';
        struct jval *v = jnew(obj ? J_OBJ : J_ARR);
        ps->p++;
        jskip(ps);
        if (*ps->p == (obj ? '}' : ']')) { ps->p++; return v; }
        for (;;) {
            char *key = NULL;
            jskip(ps);
            if (obj) {
                key = jstring(ps);
                if (!key) { jfree(v); return NULL; }
                jskip(ps);
                if (*ps->p != ':') { free(key); jfree(v); ps->err = "expected ':'"; return NULL; }
                ps->p++;
            }
            struct jval *item = jparse(ps);
            if (!item) { free(key); jfree(v); return NULL; }
            jpush(v, key, item);
            jskip(ps);
            if (*ps->p == ',') { ps->p++; continue; }
            if (*ps->p == (obj ? '}' : ']')) { ps->p++; return v; }
            jfree(v);
            ps->err = "expected ',' or a closing bracket";
            return NULL;
        }
    }
    if (c == '"') {
        char *s = jstring(ps);
        if (!s) return NULL;
        struct jval *v = jnew(J_STR);
        v->str = s;
        return v;
    }
    if (!strncmp(ps->p, "true", 4) || !strncmp(ps->p, "false", 5)) {
        struct jval *v = jnew(J_BOOL);
        v->b = *ps->p == 't';
        ps->p += v->b ? 4 : 5;
        return v;
    }
    if (!strncmp(ps->p, "null", 4)) { ps->p += 4; return jnew(J_NULL); }
    char *end;
    double d = strtod(ps->p, &end);
    if (end == ps->p) { ps->err = "unexpected character"; return NULL; }
    ps->p = end;
    struct jval *v = jnew(J_NUM);
    v->num = d;
    return v;
}

static struct jval *jget(const struct jval *obj, const char *key) {
    if (!obj || obj->t != J_OBJ) return NULL;
    for (int i = 0; i < obj->n; i++)
        if (!strcmp(obj->keys[i], key)) return obj->items[i];
    return NULL;
}

static long long jint(const struct jval *obj, const char *key, long long dflt) {
    const struct jval *v = jget(obj, key);
    return v && v->t == J_NUM ? (long long)v->num : dflt;
}

static int jbool(const struct jval *obj, const char *key, int dflt) {
    const struct jval *v = jget(obj, key);
    return v && v->t == J_BOOL ? v->b : dflt;
}

static void jcopy(char *dst, size_t cap, const struct jval *obj, const char *key, const char *dflt) {
    const struct jval *v = jget(obj, key);
    snprintf(dst, cap, "%s", v && v->t == J_STR ? v->str : dflt);
}

static int jfails(const struct jval *obj, struct fail *out) {
    const struct jval *f = jget(obj, "fail");
    int n = 0;
    if (!f || f->t != J_OBJ) return 0;
    for (int i = 0; i < f->n && n < MAX_FAILS; i++) {
        if (f->items[i]->t != J_NUM) continue;
        snprintf(out[n].fn, sizeof out[n].fn, "%s", f->keys[i]);
        out[n++].code = (int)f->items[i]->num;
    }
    return n;
}

/* ---- the configuration ------------------------------------------------------------ */

/* An A100-SXM4-80GB's GPU instance profiles: id (nvmlGpuInstanceProfile), compute
 * slices, MiB, SMs, max instances, placements (start/size in memory slices). */
static const struct mig_profile default_profiles[] = {
    {0, 1, 9856, 14, 7, 7, {0, 1, 2, 3, 4, 5, 6}, {1, 1, 1, 1, 1, 1, 1}},
    {9, 1, 19968, 14, 4, 4, {0, 2, 4, 6}, {2, 2, 2, 2}},
    {1, 2, 19968, 28, 3, 3, {0, 2, 4}, {2, 2, 2}},
    {2, 3, 40192, 42, 2, 2, {0, 4}, {4, 4}},
    {3, 4, 40192, 56, 1, 1, {0}, {4}},
    {4, 7, 81152, 98, 1, 1, {0}, {8}},
};

static void load_mig_profiles(struct fake_device *fd, const struct jval *list) {
    fd->nmig_profiles = 0;
    if (!list || list->t != J_ARR) {
        int n = (int)(sizeof default_profiles / sizeof default_profiles[0]);
        for (int i = 0; i < n; i++) fd->mig_profiles[i] = default_profiles[i];
        fd->nmig_profiles = n;
        return;
    }
    for (int i = 0; i < list->n && fd->nmig_profiles < MAX_MIG_PROFILES; i++) {
        const struct jval *p = list->items[i];
        struct mig_profile *m = &fd->mig_profiles[fd->nmig_profiles++];
        memset(m, 0, sizeof *m);
        m->id = (unsigned)jint(p, "id", 0);
        m->slices = (unsigned)jint(p, "slices", 1);
        m->memory_mib = (unsigned)jint(p, "memory_mib", 0);
        m->sm = (unsigned)jint(p, "sm", 0);
        m->instances = (unsigned)jint(p, "instances", 1);
        const struct jval *pl = jget(p, "placements");
        for (int k = 0; pl && pl->t == J_ARR && k < pl->n && k < MAX_PLACEMENTS; k++) {
            const struct jval *pair = pl->items[k];
            if (pair->t != J_ARR || pair->n != 2) continue;
            m->start[m->nplacements] = (unsigned)pair->items[0]->num;
            m->size[m->nplacements] = (unsigned)pair->items[1]->num;
            m->nplacements++;
        }
    }
}

/* Re-read $FAKE_NVML_CONFIG when it changed. Returns 0, or an NVML error. Caller holds mu. */
static int reload(void) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    if (!path) {
        fprintf(stderr, "fake NVML: FAKE_NVML_CONFIG is not set\n");
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "fake NVML: cannot stat %s\n", path);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    if (st.st_size == loaded_size && st.st_mtim.tv_sec == loaded_mtime.tv_sec &&
        st.st_mtim.tv_nsec == loaded_mtime.tv_nsec)
        return NVML_SUCCESS;
    FILE *f = fopen(path, "r");
    if (!f) return NVML_ERROR_DRIVER_NOT_LOADED;
    char *text = malloc(st.st_size + 1);
    size_t got = fread(text, 1, st.st_size, f);
    fclose(f);
    text[got] = 0;
    struct jparser ps = {text, NULL};
    struct jval *root = jparse(&ps);
    if (!root || root->t != J_OBJ) {
        fprintf(stderr, "fake NVML: %s: %s at offset %ld\n", path,
                ps.err ? ps.err : "not an object", (long)(ps.p - text));
        free(text);
        jfree(root);
        return NVML_ERROR_UNKNOWN; /* keep the previous configuration */
    }
    free(text);
    loaded_size = st.st_size;
    loaded_mtime = st.st_mtim;

    jcopy(driver_version, sizeof driver_version, root, "driver_version", "550.54.15");
    nglobal_fails = jfails(root, global_fails);

    const struct jval *devs = jget(root, "devices");
    ndevices = 0;
    for (int i = 0; devs && devs->t == J_ARR && i < devs->n && i < MAX_DEVICES; i++) {
        const struct jval *d = devs->items[i];
        struct fake_device *fd = &devices[ndevices++];
        char dflt_uuid[64], dflt_bus[32];
        snprintf(dflt_uuid, sizeof dflt_uuid, "GPU-00000000-0000-0000-0000-%012d", i);
        snprintf(dflt_bus, sizeof dflt_bus, "00000000:%02X:00.0", 0x10 + i);
        fd->index = i;
        jcopy(fd->uuid, sizeof fd->uuid, d, "uuid", dflt_uuid);
        jcopy(fd->name, sizeof fd->name, d, "name", "NVIDIA Fake GPU");
        jcopy(fd->bus_id, sizeof fd->bus_id, d, "bus_id", dflt_bus);
        fd->memory_mib = (unsigned long long)jint(d, "memory_mib", 16384);
        fd->unified = jbool(d, "unified", 0);
        fd->mig = jbool(d, "mig", 0);
        fd->events = jbool(d, "events", 1);
        load_mig_profiles(fd, jget(d, "mig_profiles"));
        fd->nfails = jfails(d, fd->fails);
        fd->nprocs = 0;
        const struct jval *procs = jget(d, "processes");
        for (int k = 0; procs && procs->t == J_ARR && k < procs->n && k < MAX_PROCS; k++) {
            const struct jval *pr = procs->items[k];
            struct fake_process *fp = &fd->procs[fd->nprocs++];
            char type[16];
            jcopy(type, sizeof type, pr, "type", "compute");
            fp->pid = (unsigned)jint(pr, "pid", 0);
            long long used = jint(pr, "used_bytes", 0);
            fp->used_bytes = used < 0 ? NVML_VALUE_NOT_AVAILABLE_ULL : (unsigned long long)used;
            fp->graphics = !strcmp(type, "graphics");
        }
        for (int l = 0; l < MAX_LINKS; l++) fd->link_peer[l] = -1;
        const struct jval *links = jget(d, "nvlinks");
        int next = 0;
        for (int k = 0; links && links->t == J_ARR && k < links->n; k++) {
            int peer = (int)jint(links->items[k], "peer", -1);
            int count = (int)jint(links->items[k], "links", 1);
            for (int c = 0; c < count && next < MAX_LINKS; c++) fd->link_peer[next++] = peer;
        }
    }
    for (int a = 0; a < MAX_DEVICES; a++)
        for (int b = 0; b < MAX_DEVICES; b++) topology[a][b] = 40; /* same NUMA node */
    const struct jval *topo = jget(root, "topology");
    for (int i = 0; topo && topo->t == J_OBJ && i < topo->n; i++) {
        int a, b;
        if (sscanf(topo->keys[i], "%d-%d", &a, &b) == 2 && a >= 0 && b >= 0 &&
            a < MAX_DEVICES && b < MAX_DEVICES && topo->items[i]->t == J_NUM) {
            topology[a][b] = topology[b][a] = (int)topo->items[i]->num;
        }
    }
    const struct jval *evs = jget(root, "events");
    nevents = 0;
    for (int i = 0; evs && evs->t == J_ARR && i < evs->n && i < MAX_EVENTS; i++) {
        const struct jval *e = evs->items[i];
        char type[32];
        jcopy(type, sizeof type, e, "type", "xid");
        events[nevents].device = (int)jint(e, "device", -1);
        events[nevents].type = !strcmp(type, "double_bit_ecc")   ? EVENT_DOUBLE_BIT_ECC
                               : !strcmp(type, "single_bit_ecc") ? EVENT_SINGLE_BIT_ECC
                                                                  : EVENT_XID_CRITICAL;
        events[nevents].data = (unsigned long long)jint(e, "xid", 0);
        nevents++;
    }
    jfree(root);
    return NVML_SUCCESS;
}

static int failure(const struct fake_device *d, const char *fn) {
    if (d)
        for (int i = 0; i < d->nfails; i++)
            if (!strcmp(d->fails[i].fn, fn)) return d->fails[i].code;
    for (int i = 0; i < nglobal_fails; i++)
        if (!strcmp(global_fails[i].fn, fn)) return global_fails[i].code;
    return NVML_SUCCESS;
}

/* Common prologue of device calls: initialised, configuration current, handle valid. */
#define ENTER(dev, fn)                                                         \
    pthread_mutex_lock(&mu);                                                   \
    int rc_ = initialized ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;           \
    if (rc_ == NVML_SUCCESS) { reload(); }                                     \
    if (rc_ == NVML_SUCCESS && (dev) != NULL &&                                \
        ((dev) < devices || (dev) >= devices + ndevices))                      \
        rc_ = NVML_ERROR_INVALID_ARGUMENT;                                     \
    if (rc_ == NVML_SUCCESS) rc_ = failure((dev), (fn));                       \
    if (rc_ != NVML_SUCCESS) { pthread_mutex_unlock(&mu); return rc_; }

/* ENTER for calls on a device: a NULL or foreign handle is INVALID_ARGUMENT. */
#define ENTER_DEV(dev, fn)                                                     \
    if ((dev) == NULL) return NVML_ERROR_INVALID_ARGUMENT;                     \
    ENTER(dev, fn)

#define LEAVE(rc)                \
    pthread_mutex_unlock(&mu);   \
    return (rc);

static int copy_out(char *dst, unsigned int len, const char *src) {
    if (!dst || strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* ---- init ------------------------------------------------------------------------ */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&mu);
    int rc = reload();
    if (rc == NVML_SUCCESS) rc = failure(NULL, "nvmlInit");
    if (rc == NVML_SUCCESS) initialized++;
    pthread_mutex_unlock(&mu);
    return rc;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&mu);
    int rc = initialized ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (initialized) initialized--;
    pthread_mutex_unlock(&mu);
    return rc;
}

const char *nvmlErrorString(nvmlReturn_t rc) {
    switch (rc) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case 19: return "In use by another client";
    case 23: return "Insufficient Resources";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    ENTER((struct fake_device *)NULL, "nvmlSystemGetDriverVersion");
    LEAVE(copy_out(version, length, driver_version));
}

/* ---- devices ---------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    ENTER((struct fake_device *)NULL, "nvmlDeviceGetCount");
    *count = (unsigned int)ndevices;
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    ENTER((struct fake_device *)NULL, "nvmlDeviceGetHandleByIndex");
    if (index >= (unsigned int)ndevices) { LEAVE(NVML_ERROR_INVALID_ARGUMENT); }
    int rc = failure(&devices[index], "nvmlDeviceGetHandleByIndex");
    if (rc == NVML_SUCCESS) *device = &devices[index];
    LEAVE(rc);
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    ENTER((struct fake_device *)NULL, "nvmlDeviceGetHandleByUUID");
    for (int i = 0; i < ndevices; i++) {
        if (!strcmp(devices[i].uuid, uuid)) {
            int rc = failure(&devices[i], "nvmlDeviceGetHandleByUUID");
            if (rc == NVML_SUCCESS) *device = &devices[i];
            LEAVE(rc);
        }
    }
    LEAVE(NVML_ERROR_NOT_FOUND);
}

static int mig_uuid_of(nvmlDevice_t handle, char *uuid, unsigned int length);

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    int mig_rc = mig_uuid_of(device, uuid, length);
    if (mig_rc >= 0) return mig_rc;
    ENTER_DEV(device, "nvmlDeviceGetUUID");
    LEAVE(copy_out(uuid, length, device->uuid));
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    ENTER_DEV(device, "nvmlDeviceGetName");
    LEAVE(copy_out(name, length, device->name));
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    ENTER_DEV(device, "nvmlDeviceGetIndex");
    *index = (unsigned int)device->index;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) {
    ENTER_DEV(device, "nvmlDeviceGetMinorNumber");
    *minor = (unsigned int)device->index;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    ENTER_DEV(device, "nvmlDeviceGetMemoryInfo");
    if (device->unified) { LEAVE(NVML_ERROR_NOT_SUPPORTED); }
    memory->total = device->memory_mib << 20;
    memory->used = 0;
    memory->free = memory->total;
    LEAVE(NVML_SUCCESS);
}

static void fill_pci(const struct fake_device *d, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", d->bus_id);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", d->bus_id + 4);
    sscanf(d->bus_id, "%x:%x:%x", &pci->domain, &pci->bus, &pci->device);
    pci->pciDeviceId = 0x20B010DE;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    ENTER_DEV(device, "nvmlDeviceGetPciInfo");
    fill_pci(device, pci);
    LEAVE(NVML_SUCCESS);
}
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    ENTER_DEV(device, "nvmlDeviceGetMigMode");
    *current = *pending = (unsigned int)device->mig;
    LEAVE(NVML_SUCCESS);
}

/* ---- topology --------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, int *level) {
    ENTER_DEV(a, "nvmlDeviceGetTopologyCommonAncestor");
    if (b < devices || b >= devices + ndevices) { LEAVE(NVML_ERROR_INVALID_ARGUMENT); }
    *level = topology[a->index][b->index];
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, int *active) {
    ENTER_DEV(device, "nvmlDeviceGetNvLinkState");
    if (link >= MAX_LINKS) { LEAVE(NVML_ERROR_INVALID_ARGUMENT); }
    *active = device->link_peer[link] >= 0;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t *pci) {
    ENTER_DEV(device, "nvmlDeviceGetNvLinkRemotePciInfo");
    if (link >= MAX_LINKS || device->link_peer[link] < 0 ||
        device->link_peer[link] >= ndevices) {
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    }
    fill_pci(&devices[device->link_peer[link]], pci);
    LEAVE(NVML_SUCCESS);
}

/* ---- events ----------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types) {
    ENTER_DEV(device, "nvmlDeviceGetSupportedEventTypes");
    if (!device->events) { LEAVE(NVML_ERROR_NOT_SUPPORTED); }
    *types = EVENT_SINGLE_BIT_ECC | EVENT_DOUBLE_BIT_ECC | EVENT_XID_CRITICAL;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    ENTER((struct fake_device *)NULL, "nvmlEventSetCreate");
    *set = calloc(1, sizeof **set);
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                      nvmlEventSet_t set) {
    ENTER_DEV(device, "nvmlDeviceRegisterEvents");
    if (!device->events) { LEAVE(NVML_ERROR_NOT_SUPPORTED); }
    set->mask[device->index] |= types;
    LEAVE(NVML_SUCCESS);
}

/* The next undelivered event a set listens to, or -1. Caller holds mu. */
static int next_event(nvmlEventSet_t set) {
    while (delivered < nevents) {
        struct fake_event *e = &events[delivered];
        if (e->device < 0) return delivered;
        if (e->device < ndevices && (set->mask[e->device] & e->type)) return delivered;
        delivered++; /* nobody listens: dropped, as NVML would */
    }
    return -1;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        ENTER((struct fake_device *)NULL, "nvmlEventSetWait");
        int i = next_event(set);
        if (i >= 0) {
            struct fake_event *e = &events[i];
            memset(data, 0, sizeof *data);
            data->device = e->device >= 0 ? &devices[e->device] : NULL;
            data->eventType = e->type;
            data->eventData = e->data;
            delivered = i + 1;
            LEAVE(NVML_SUCCESS);
        }
        pthread_mutex_unlock(&mu);
        clock_gettime(CLOCK_MONOTONIC, &now);
        long elapsed_ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (elapsed_ms >= (long)timeoutms) return NVML_ERROR_TIMEOUT;
        usleep(10000);
    }
}
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    free(set);
    return NVML_SUCCESS;
}

/* ---- MIG -------------------------------------------------------------------------- */

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>

enum {
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
};
#define MAX_GIS 256
#define MAX_HANDLES 1024

typedef struct {
    unsigned int start, size;
} nvmlGpuInstancePlacement_t;
typedef nvmlGpuInstancePlacement_t nvmlComputeInstancePlacement_t;

typedef struct {
    unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
        copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;
typedef struct {
    unsigned int version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
        copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} nvmlGpuInstanceProfileInfo_v2_t;
typedef struct {
    unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
        sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;
typedef struct {
    unsigned int version, id, sliceCount, instanceCount, multiprocessorCount,
        sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount, sharedJpegCount,
        sharedOfaCount;
    char name[96];
} nvmlComputeInstanceProfileInfo_v2_t;

/* One GPU instance of the state file (its compute instance: ci_id >= 0). */
struct gi_state {
    int dev;
    unsigned id, profile, start, size;
    int ci_id;
    unsigned ci_profile, serial;
};
static struct gi_state gis[MAX_GIS];
static int ngis;
static unsigned next_serial = 1;

/* Handles stay valid across state reloads: a handle is an index into one of these. */
struct inst_handle {
    int used, dev;
    unsigned gi, ci;
};
static struct inst_handle gi_handles[MAX_HANDLES], ci_handles[MAX_HANDLES], mig_handles[MAX_HANDLES];
typedef struct inst_handle *nvmlGpuInstance_t;
typedef struct inst_handle *nvmlComputeInstance_t;

typedef struct {
    nvmlDevice_t device;
    unsigned int id, profileId;
    nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;
typedef struct {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id, profileId;
    nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

static struct inst_handle *handle_for(struct inst_handle *table, int dev, unsigned gi, unsigned ci) {
    for (int i = 0; i < MAX_HANDLES; i++)
        if (table[i].used && table[i].dev == dev && table[i].gi == gi && table[i].ci == ci)
            return &table[i];
    for (int i = 0; i < MAX_HANDLES; i++)
        if (!table[i].used) {
            table[i] = (struct inst_handle){1, dev, gi, ci};
            return &table[i];
        }
    return NULL;
}

static int in_table(const struct inst_handle *table, const void *h) {
    return h && (const struct inst_handle *)h >= table &&
           (const struct inst_handle *)h < table + MAX_HANDLES &&
           ((const struct inst_handle *)h)->used;
}

static void state_path(char *out, size_t cap) {
    const char *p = getenv("FAKE_NVML_MIG_STATE");
    if (p && *p) snprintf(out, cap, "%s", p);
    else snprintf(out, cap, "%s.mig", getenv("FAKE_NVML_CONFIG") ? getenv("FAKE_NVML_CONFIG") : "/tmp/fake-nvml");
}

/* Lock the state (flock on "<state>.lock") and read it. Returns the lock fd or -1. */
static int state_open(void) {
    char path[600], lock[640];
    state_path(path, sizeof path);
    snprintf(lock, sizeof lock, "%s.lock", path);
    int fd = open(lock, O_CREAT | O_RDWR, 0644);
    if (fd < 0) return -1;
    flock(fd, LOCK_EX);
    ngis = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            struct gi_state g;
            if (sscanf(line, "next %u", &next_serial) == 1) continue;
            if (ngis < MAX_GIS && sscanf(line, "gi %d %u %u %u %u %d %u %u", &g.dev, &g.id,
                                         &g.profile, &g.start, &g.size, &g.ci_id,
                                         &g.ci_profile, &g.serial) == 8)
                gis[ngis++] = g;
        }
        fclose(f);
    }
    return fd;
}

static void state_close(int fd, int write) {
    if (write) {
        char path[600], tmp[640];
        state_path(path, sizeof path);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (f) {
            fprintf(f, "next %u\n", next_serial);
            for (int i = 0; i < ngis; i++)
                fprintf(f, "gi %d %u %u %u %u %d %u %u\n", gis[i].dev, gis[i].id, gis[i].profile,
                        gis[i].start, gis[i].size, gis[i].ci_id, gis[i].ci_profile, gis[i].serial);
            fclose(f);
            rename(tmp, path);
        }
    }
    flock(fd, LOCK_UN);
    close(fd);
}

static struct gi_state *find_gi(int dev, unsigned id) {
    for (int i = 0; i < ngis; i++)
        if (gis[i].dev == dev && gis[i].id == id) return &gis[i];
    return NULL;
}

static const struct mig_profile *find_profile(const struct fake_device *d, unsigned id) {
    for (int i = 0; i < d->nmig_profiles; i++)
        if (d->mig_profiles[i].id == id) return &d->mig_profiles[i];
    return NULL;
}

/* The compute instance profile id covering `slices` (nvmlComputeInstanceProfile). */
static unsigned ci_profile_for(unsigned slices) {
    switch (slices) {
    case 1: return 0;
    case 2: return 1;
    case 3: return 2;
    case 4: return 3;
    case 7: return 4;
    case 8: return 5;
    case 6: return 6;
    default: return 0;
    }
}

static void mig_uuid_text(const struct gi_state *g, char *out, size_t cap) {
    snprintf(out, cap, "MIG-%08x-%04x-%04x-%04x-%012x", 0x5a5a0000u + (unsigned)g->dev,
             g->id & 0xffff, (unsigned)g->ci_id & 0xffff, g->profile & 0xffff, g->serial);
}

/* Prologue of MIG calls on a device: ENTER, MIG mode on, state locked (sfd). */
#define ENTER_MIG(dev, fn)                                                     \
    ENTER_DEV(dev, fn)                                                         \
    if (!(dev)->mig) { LEAVE(NVML_ERROR_NOT_SUPPORTED); }                      \
    int sfd = state_open();                                                    \
    if (sfd < 0) { LEAVE(NVML_ERROR_UNKNOWN); }

#define LEAVE_MIG(rc, write)     \
    state_close(sfd, (write));   \
    LEAVE(rc)

static void fill_profile(const struct mig_profile *m, nvmlGpuInstanceProfileInfo_t *out) {
    memset(out, 0, sizeof *out);
    out->id = m->id;
    out->sliceCount = m->slices;
    out->instanceCount = m->instances;
    out->multiprocessorCount = m->sm;
    out->memorySizeMB = m->memory_mib;
}

static int profile_info(nvmlDevice_t device, unsigned profile, nvmlGpuInstanceProfileInfo_t *out,
                        char *name, size_t cap) {
    const struct mig_profile *m = find_profile(device, profile);
    if (!m) return NVML_ERROR_NOT_SUPPORTED;
    fill_profile(m, out);
    if (name) snprintf(name, cap, "MIG %ug.%ugb", m->slices, (m->memory_mib + 1023) / 1024);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info) {
    ENTER_DEV(device, "nvmlDeviceGetGpuInstanceProfileInfo");
    if (!device->mig) { LEAVE(NVML_ERROR_NOT_SUPPORTED); }
    LEAVE(profile_info(device, profile, info, NULL, 0));
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info) {
    ENTER_DEV(device, "nvmlDeviceGetGpuInstanceProfileInfo");
    if (!device->mig) { LEAVE(NVML_ERROR_NOT_SUPPORTED); }
    nvmlGpuInstanceProfileInfo_t v1;
    char name[96];
    int rc = profile_info(device, profile, &v1, name, sizeof name);
    if (rc == NVML_SUCCESS) {
        unsigned version = info->version;
        memset(info, 0, sizeof *info);
        info->version = version;
        info->id = v1.id;
        info->sliceCount = v1.sliceCount;
        info->instanceCount = v1.instanceCount;
        info->multiprocessorCount = v1.multiprocessorCount;
        info->memorySizeMB = v1.memorySizeMB;
        snprintf(info->name, sizeof info->name, "%s", name);
    }
    LEAVE(rc);
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profile,
                                                           nvmlGpuInstancePlacement_t *placements,
                                                           unsigned int *count) {
    ENTER_DEV(device, "nvmlDeviceGetGpuInstancePossiblePlacements");
    if (!device->mig) { LEAVE(NVML_ERROR_NOT_SUPPORTED); }
    const struct mig_profile *m = find_profile(device, profile);
    if (!m) { LEAVE(NVML_ERROR_NOT_SUPPORTED); }
    if (!placements) {
        *count = m->nplacements;
        LEAVE(NVML_SUCCESS);
    }
    if (*count < m->nplacements) {
        *count = m->nplacements;
        LEAVE(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned i = 0; i < m->nplacements; i++) {
        placements[i].start = m->start[i];
        placements[i].size = m->size[i];
    }
    *count = m->nplacements;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profile,
                                                      const nvmlGpuInstancePlacement_t *placement,
                                                      nvmlGpuInstance_t *out) {
    ENTER_MIG(device, "nvmlDeviceCreateGpuInstanceWithPlacement");
    const struct mig_profile *m = find_profile(device, profile);
    int ok = 0;
    for (unsigned i = 0; m && i < m->nplacements; i++)
        if (m->start[i] == placement->start && m->size[i] == placement->size) ok = 1;
    if (!m || !ok) { LEAVE_MIG(NVML_ERROR_INVALID_ARGUMENT, 0); }
    unsigned same = 0;
    for (int i = 0; i < ngis; i++) {
        if (gis[i].dev != device->index) continue;
        if (gis[i].profile == profile) same++;
        if (placement->start < gis[i].start + gis[i].size && gis[i].start < placement->start + placement->size) {
            LEAVE_MIG(NVML_ERROR_INSUFFICIENT_RESOURCES, 0);
        }
    }
    if (same >= m->instances || ngis >= MAX_GIS) { LEAVE_MIG(NVML_ERROR_INSUFFICIENT_RESOURCES, 0); }
    unsigned id = 1;
    while (find_gi(device->index, id)) id++;
    gis[ngis++] = (struct gi_state){device->index, id, profile, placement->start, placement->size, -1, 0, 0};
    *out = handle_for(gi_handles, device->index, id, 0);
    LEAVE_MIG(NVML_SUCCESS, 1);
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profile,
                                       nvmlGpuInstance_t *instances, unsigned int *count) {
    ENTER_MIG(device, "nvmlDeviceGetGpuInstances");
    unsigned n = 0;
    for (int i = 0; i < ngis; i++)
        if (gis[i].dev == device->index && gis[i].profile == profile) {
            if (instances) instances[n] = handle_for(gi_handles, device->index, gis[i].id, 0);
            n++;
        }
    *count = n;
    LEAVE_MIG(NVML_SUCCESS, 0);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *out) {
    ENTER_MIG(device, "nvmlDeviceGetGpuInstanceById");
    if (!find_gi(device->index, id)) { LEAVE_MIG(NVML_ERROR_NOT_FOUND, 0); }
    *out = handle_for(gi_handles, device->index, id, 0);
    LEAVE_MIG(NVML_SUCCESS, 0);
}

/* Prologue of calls on a GPU instance handle: the GI must still exist (gstate). */
#define ENTER_GI(h, fn)                                                              \
    if (!in_table(gi_handles, (h))) return NVML_ERROR_INVALID_ARGUMENT;              \
    struct fake_device *gdev_ = &devices[(h)->dev];                                  \
    ENTER_MIG(gdev_, fn)                                                             \
    struct gi_state *gstate = find_gi((h)->dev, (h)->gi);                            \
    if (!gstate) { LEAVE_MIG(NVML_ERROR_NOT_FOUND, 0); }

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t *info) {
    ENTER_GI(gi, "nvmlGpuInstanceGetInfo");
    info->device = gdev_;
    info->id = gstate->id;
    info->profileId = gstate->profile;
    info->placement.start = gstate->start;
    info->placement.size = gstate->size;
    LEAVE_MIG(NVML_SUCCESS, 0);
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gi) {
    ENTER_GI(gi, "nvmlGpuInstanceDestroy");
    if (gstate->ci_id >= 0) { LEAVE_MIG(NVML_ERROR_IN_USE, 0); }
    *gstate = gis[--ngis];
    LEAVE_MIG(NVML_SUCCESS, 1);
}

static int ci_profile_info(const struct gi_state *g, const struct fake_device *d, unsigned profile,
                           nvmlComputeInstanceProfileInfo_t *out) {
    const struct mig_profile *m = find_profile(d, g->profile);
    if (!m || profile != ci_profile_for(m->slices)) return NVML_ERROR_NOT_SUPPORTED;
    memset(out, 0, sizeof *out);
    out->id = profile;
    out->sliceCount = m->slices;
    out->instanceCount = 1;
    out->multiprocessorCount = m->sm;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gi, unsigned int profile,
                                                          unsigned int eng,
                                                          nvmlComputeInstanceProfileInfo_t *info) {
    (void)eng;
    ENTER_GI(gi, "nvmlGpuInstanceGetComputeInstanceProfileInfo");
    LEAVE_MIG(ci_profile_info(gstate, gdev_, profile, info), 0);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gi, unsigned int profile,
                                                           unsigned int eng,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info) {
    (void)eng;
    ENTER_GI(gi, "nvmlGpuInstanceGetComputeInstanceProfileInfo");
    nvmlComputeInstanceProfileInfo_t v1;
    int rc = ci_profile_info(gstate, gdev_, profile, &v1);
    if (rc == NVML_SUCCESS) {
        unsigned version = info->version;
        memset(info, 0, sizeof *info);
        info->version = version;
        info->id = v1.id;
        info->sliceCount = v1.sliceCount;
        info->instanceCount = v1.instanceCount;
        info->multiprocessorCount = v1.multiprocessorCount;
    }
    LEAVE_MIG(rc, 0);
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gi, unsigned int profile,
                                                  nvmlComputeInstance_t *out) {
    ENTER_GI(gi, "nvmlGpuInstanceCreateComputeInstance");
    nvmlComputeInstanceProfileInfo_t info;
    int rc = ci_profile_info(gstate, gdev_, profile, &info);
    if (rc != NVML_SUCCESS) { LEAVE_MIG(rc, 0); }
    if (gstate->ci_id >= 0) { LEAVE_MIG(NVML_ERROR_INSUFFICIENT_RESOURCES, 0); }
    gstate->ci_id = 0;
    gstate->ci_profile = profile;
    gstate->serial = next_serial++;
    *out = handle_for(ci_handles, gi->dev, gi->gi, 0);
    LEAVE_MIG(NVML_SUCCESS, 1);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gi, unsigned int profile,
                                                nvmlComputeInstance_t *out, unsigned int *count) {
    ENTER_GI(gi, "nvmlGpuInstanceGetComputeInstances");
    unsigned n = 0;
    if (gstate->ci_id >= 0 && gstate->ci_profile == profile) {
        if (out) out[0] = handle_for(ci_handles, gi->dev, gi->gi, (unsigned)gstate->ci_id);
        n = 1;
    }
    *count = n;
    LEAVE_MIG(NVML_SUCCESS, 0);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gi, unsigned int id,
                                                   nvmlComputeInstance_t *out) {
    ENTER_GI(gi, "nvmlGpuInstanceGetComputeInstanceById");
    if (gstate->ci_id < 0 || (unsigned)gstate->ci_id != id) { LEAVE_MIG(NVML_ERROR_NOT_FOUND, 0); }
    *out = handle_for(ci_handles, gi->dev, gi->gi, id);
    LEAVE_MIG(NVML_SUCCESS, 0);
}

#define ENTER_CI(h, fn)                                                              \
    if (!in_table(ci_handles, (h))) return NVML_ERROR_INVALID_ARGUMENT;              \
    struct fake_device *gdev_ = &devices[(h)->dev];                                  \
    ENTER_MIG(gdev_, fn)                                                             \
    struct gi_state *gstate = find_gi((h)->dev, (h)->gi);                            \
    if (!gstate || gstate->ci_id < 0 || (unsigned)gstate->ci_id != (h)->ci) {        \
        LEAVE_MIG(NVML_ERROR_NOT_FOUND, 0);                                          \
    }

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *info) {
    ENTER_CI(ci, "nvmlComputeInstanceGetInfo");
    info->device = gdev_;
    info->gpuInstance = handle_for(gi_handles, ci->dev, ci->gi, 0);
    info->id = (unsigned)gstate->ci_id;
    info->profileId = gstate->ci_profile;
    info->placement.start = 0;
    info->placement.size = find_profile(gdev_, gstate->profile)->slices;
    LEAVE_MIG(NVML_SUCCESS, 0);
}
nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *info) {
    return nvmlComputeInstanceGetInfo_v2(ci, info);
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t ci) {
    ENTER_CI(ci, "nvmlComputeInstanceDestroy");
    gstate->ci_id = -1;
    LEAVE_MIG(NVML_SUCCESS, 1);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    ENTER_DEV(device, "nvmlDeviceGetMaxMigDeviceCount");
    *count = device->mig ? 7 : 0;
    LEAVE(NVML_SUCCESS);
}

/* MIG device index i: the i-th compute instance of the GPU, by GPU instance id. */
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *out) {
    ENTER_MIG(device, "nvmlDeviceGetMigDeviceHandleByIndex");
    struct gi_state *order[MAX_GIS];
    int n = 0;
    for (int i = 0; i < ngis; i++)
        if (gis[i].dev == device->index && gis[i].ci_id >= 0) order[n++] = &gis[i];
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (order[b]->id < order[a]->id) {
                struct gi_state *t = order[a];
                order[a] = order[b];
                order[b] = t;
            }
    if ((int)index >= n) { LEAVE_MIG(NVML_ERROR_NOT_FOUND, 0); }
    *out = (nvmlDevice_t)handle_for(mig_handles, device->index, order[index]->id,
                                    (unsigned)order[index]->ci_id);
    LEAVE_MIG(NVML_SUCCESS, 0);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig) {
    *is_mig = (unsigned)in_table(mig_handles, device);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    if (!in_table(mig_handles, device)) return NVML_ERROR_INVALID_ARGUMENT;
    *id = ((struct inst_handle *)device)->gi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    if (!in_table(mig_handles, device)) return NVML_ERROR_INVALID_ARGUMENT;
    *id = ((struct inst_handle *)device)->ci;
    return NVML_SUCCESS;
}

/* The UUID of a MIG device handle (NOT_FOUND once its instance is gone); -1 when
 * `handle` is not a MIG device handle. */
static int mig_uuid_of(nvmlDevice_t handle, char *uuid, unsigned int length) {
    if (!in_table(mig_handles, handle)) return -1;
    struct inst_handle *h = (struct inst_handle *)handle;
    struct fake_device *d = &devices[h->dev];
    ENTER_MIG(d, "nvmlDeviceGetUUID");
    struct gi_state *g = find_gi(h->dev, h->gi);
    if (!g || g->ci_id < 0 || (unsigned)g->ci_id != h->ci) { LEAVE_MIG(NVML_ERROR_NOT_FOUND, 0); }
    char text[96];
    mig_uuid_text(g, text, sizeof text);
    LEAVE_MIG(copy_out(uuid, length, text), 0);
}

/* ---- per-process accounting -------------------------------------------------------
 * nvmlDeviceGet{Compute,Graphics}RunningProcesses[_v2|_v3] (nvml.h): *count in/out; a
 * NULL array (or a count too small) answers INSUFFICIENT_SIZE with the count needed,
 * zero processes answer SUCCESS with *count 0. _v2 and _v3 fill nvmlProcessInfo_v2_t
 * (the same layout); the unversioned call the older nvmlProcessInfo_v1_t. PIDs are the
 * host's (the driver's view), whatever namespace the caller runs in. */

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

static nvmlReturn_t running(nvmlDevice_t device, unsigned int *count, void *out, int graphics,
                            int v1, const char *fn) {
    ENTER_DEV(device, fn);
    if (count == NULL) { LEAVE(NVML_ERROR_INVALID_ARGUMENT); }
    unsigned int n = 0;
    for (int i = 0; i < device->nprocs; i++) n += device->procs[i].graphics == graphics;
    if (n == 0) { *count = 0; LEAVE(NVML_SUCCESS); }
    if (out == NULL || *count < n) { *count = n; LEAVE(NVML_ERROR_INSUFFICIENT_SIZE); }
    unsigned int k = 0;
    for (int i = 0; i < device->nprocs; i++) {
        const struct fake_process *p = &device->procs[i];
        if (p->graphics != graphics) continue;
        if (v1) {
            nvmlProcessInfo_v1_t *o = (nvmlProcessInfo_v1_t *)out + k;
            o->pid = p->pid;
            o->usedGpuMemory = p->used_bytes;
        } else {
            nvmlProcessInfo_v2_t *o = (nvmlProcessInfo_v2_t *)out + k;
            o->pid = p->pid;
            o->usedGpuMemory = p->used_bytes;
            o->gpuInstanceId = 0xFFFFFFFFu;
            o->computeInstanceId = 0xFFFFFFFFu;
        }
        k++;
    }
    *count = n;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *p) {
    return running(d, c, p, 0, 0, "nvmlDeviceGetComputeRunningProcesses_v3");
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *p) {
    return running(d, c, p, 0, 0, "nvmlDeviceGetComputeRunningProcesses_v2");
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v1_t *p) {
    return running(d, c, p, 0, 1, "nvmlDeviceGetComputeRunningProcesses");
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *p) {
    return running(d, c, p, 1, 0, "nvmlDeviceGetGraphicsRunningProcesses_v3");
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *p) {
    return running(d, c, p, 1, 0, "nvmlDeviceGetGraphicsRunningProcesses_v2");
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v1_t *p) {
    return running(d, c, p, 1, 1, "nvmlDeviceGetGraphicsRunningProcesses");
}
