#include "region.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "proc_info.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_fd = -1;
static int g_use_ofd = 1;
static int g_timeout_ms = 5000;
static char g_path[4096];
static struct region_file *g_map;         /* header + device table */
static unsigned char *g_base;             /* whole mapping */
static int g_slot = -1;                   /* this process's slot, -1 none */
static pid_t g_slot_pid;                  /* pid that took g_slot (fork check) */
/* Set when the file was found shrunk (a tenant truncated it) or a slot held more than
 * its device: the region is no longer trusted and every reservation is refused. */
static volatile sig_atomic_t g_broken;
static int g_broken_logged;
static struct sigaction g_old_bus;
static int g_bus_installed;

/* Saturating sum: two hostile slots must not wrap the container's usage to a small
 * number (2^64 - x + y). */
static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Replaces the whole mapping by private zero pages: the faulting access (or any later
 * one) reads zeros instead of raising SIGBUS, and g_broken makes every reservation
 * fail. mmap is a plain system call, safe in a signal handler. */
static int detach_to_zero_pages(void)
{
    if (g_base == NULL)
        return -1;
    void *m = mmap(g_base, REGION_FILE_SIZE, PROT_READ | PROT_WRITE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -1;
    g_broken = 1;
    return 0;
}

/* A file shrunk under a live process would kill it with SIGBUS on the next access to
 * the lost pages: those faults are ours to absorb; any other SIGBUS goes on to the
 * handler that was there before (or the default action). */
static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    unsigned char *a = si ? (unsigned char *)si->si_addr : NULL;
    if (g_base && a >= g_base && a < g_base + REGION_FILE_SIZE && detach_to_zero_pages() == 0)
        return; /* the access is retried on zero pages */
    if (g_old_bus.sa_flags & SA_SIGINFO) {
        if (g_old_bus.sa_sigaction) {
            g_old_bus.sa_sigaction(sig, si, uc);
            return;
        }
    } else if (g_old_bus.sa_handler == SIG_IGN) {
        return;
    } else if (g_old_bus.sa_handler != SIG_DFL) {
        g_old_bus.sa_handler(sig);
        return;
    }
    signal(SIGBUS, SIG_DFL); /* re-executing the access now ends the process as usual */
}

static void install_sigbus(void)
{
    if (g_bus_installed)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &g_old_bus) == 0)
        g_bus_installed = 1;
}

/* 0 while the region can be trusted; checks the file still has its full size (one
 * fstat, on the allocation path only). */
static int region_trusted(void)
{
    if (g_broken)
        goto broken;
    struct stat st;
    if (g_fd >= 0 && fstat(g_fd, &st) == 0 && (uint64_t)st.st_size < REGION_FILE_SIZE) {
        detach_to_zero_pages();
        goto broken;
    }
    return 0;
broken:
    if (!g_broken_logged) {
        g_broken_logged = 1;
        LOG_ERROR("shared region %s was shrunk or corrupted under this process; refusing all "
                  "GPU memory", g_path);
    }
    return -1;
}

static struct region_slot *slot_at(unsigned i)
{
    return (struct region_slot *)(g_base + REGION_HEADER_SIZE + (size_t)i * sizeof(struct region_slot));
}

/* Host-backed part of slot i's used_bytes on device d (the version-2 table). */
static uint64_t *oversub_at(unsigned i, unsigned d)
{
    return (uint64_t *)(void *)(g_base + REGION_OVERSUB_OFFSET) + (size_t)i * REGION_MAX_DEVICES + d;
}

static void zero_slot_usage(unsigned i)
{
    /* The container's GPU time and launches outlive the process: moved to the device
     * table, so the monitor's counters never go back when a process leaves. */
    for (unsigned d = 0; d < REGION_MAX_DEVICES; d++) {
        struct region_slot_device *sd = &slot_at(i)->dev[d];
        uint64_t busy = __atomic_exchange_n(&sd->busy_ns, 0, __ATOMIC_RELAXED);
        uint64_t launches = __atomic_exchange_n(&sd->launches, 0, __ATOMIC_RELAXED);
        if (busy)
            __atomic_add_fetch(&g_map->devices[d].exited_busy_ns, busy, __ATOMIC_RELAXED);
        if (launches)
            __atomic_add_fetch(&g_map->devices[d].exited_launches, launches, __ATOMIC_RELAXED);
    }
    memset(slot_at(i)->dev, 0, sizeof slot_at(i)->dev);
    memset(oversub_at(i, 0), 0, REGION_MAX_DEVICES * sizeof(uint64_t));
}

static uint64_t now_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* The creation lock (an fcntl lock on byte 0, released by the kernel if its holder
 * dies) serializes creating and validating the file, before the header's mutex
 * exists. Acquired by polling with a growing back-off, so that a stuck (not dead)
 * holder cannot hang the application. */
static int file_lock(void)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 1;
    uint64_t deadline = now_ns(CLOCK_MONOTONIC) + (uint64_t)g_timeout_ms * 1000000ull;
    long backoff = 20;
    for (;;) {
        int cmd = g_use_ofd ? F_OFD_SETLK : F_SETLK;
        if (fcntl(g_fd, cmd, &fl) == 0)
            return 0;
        if (errno == EINVAL && g_use_ofd) {
            /* Kernel or filesystem without OFD locks: per-process locks plus g_mu. */
            g_use_ofd = 0;
            continue;
        }
        if (errno != EAGAIN && errno != EACCES && errno != EINTR) {
            LOG_ERROR("locking shared region %s: %s", g_path, strerror(errno));
            return -1;
        }
        if (now_ns(CLOCK_MONOTONIC) > deadline) {
            LOG_ERROR("shared region %s stayed locked for %d ms; giving up", g_path, g_timeout_ms);
            return -1;
        }
        sleep_us(backoff);
        if (backoff < 2000)
            backoff *= 2;
    }
}

static void file_unlock(void)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_UNLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 1;
    if (fcntl(g_fd, g_use_ofd ? F_OFD_SETLK : F_SETLK, &fl) != 0)
        LOG_WARN("unlocking shared region: %s", strerror(errno));
}

_Static_assert(sizeof(pthread_mutex_t) <= REGION_LOCK_LEN, "robust mutex fits the header");

static pthread_mutex_t *shared_mutex(void)
{
    return (pthread_mutex_t *)(void *)g_map->hdr.lock;
}

/* The writers' lock. A holder that dies leaves it "owner dead": the next locker
 * repairs what the dead process may have left (its slot) and carries on. */
static void reclaim_locked(void);
static int region_lock(void)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += g_timeout_ms / 1000;
    deadline.tv_nsec += (long)(g_timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    int rc = pthread_mutex_timedlock(shared_mutex(), &deadline);
    if (rc == EOWNERDEAD) {
        LOG_WARN("a process died holding the lock of %s; recovering", g_path);
        pthread_mutex_consistent(shared_mutex());
        reclaim_locked();
        return 0;
    }
    if (rc == 0)
        return 0;
    LOG_ERROR("shared region %s: lock not taken within %d ms (%s)", g_path, g_timeout_ms, strerror(rc));
    return -1;
}

static void region_unlock(void)
{
    pthread_mutex_unlock(shared_mutex());
}

static int all_zero(const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i])
            return 0;
    return 1;
}

static void init_header(struct region_file *f)
{
    memset(f, 0, sizeof *f);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init((pthread_mutex_t *)(void *)f->hdr.lock, &a);
    pthread_mutexattr_destroy(&a);
    f->hdr.version = REGION_VERSION;
    f->hdr.header_size = REGION_HEADER_SIZE;
    f->hdr.device_entry_size = sizeof(struct region_device);
    f->hdr.max_devices = REGION_MAX_DEVICES;
    f->hdr.slot_size = sizeof(struct region_slot);
    f->hdr.max_slots = REGION_MAX_SLOTS;
    f->hdr.file_size = REGION_FILE_SIZE;
    f->hdr.created_unix_ns = now_ns(CLOCK_REALTIME);
    /* Readers treat a region without magic as "not initialized yet". */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memcpy(f->hdr.magic, REGION_MAGIC, 8);
}

/* Validates an existing header; 0 when usable, 1 when it is a valid version-1 file
 * that this process upgrades in place (same layout, table appended). */
static int check_header(const struct region_header *h, uint64_t size, char *err, size_t errlen)
{
    if (memcmp(h->magic, REGION_MAGIC, 8) != 0) {
        snprintf(err, errlen, "not a hami-vgpu region (bad magic)");
        return -1;
    }
    if (h->version != REGION_VERSION && h->version != REGION_VERSION_V1) {
        snprintf(err, errlen, "unsupported region version %u (this library writes %u)",
                 h->version, REGION_VERSION);
        return -1;
    }
    uint64_t want = h->version == REGION_VERSION ? REGION_FILE_SIZE : REGION_V1_FILE_SIZE;
    if (h->header_size != REGION_HEADER_SIZE || h->slot_size != sizeof(struct region_slot) ||
        h->max_slots != REGION_MAX_SLOTS || h->max_devices != REGION_MAX_DEVICES ||
        h->device_entry_size != sizeof(struct region_device) || h->file_size != want) {
        snprintf(err, errlen, "region geometry differs from version %u", h->version);
        return -1;
    }
    if (size < want) {
        snprintf(err, errlen, "region truncated: %llu of %llu bytes",
                 (unsigned long long)size, (unsigned long long)want);
        return -1;
    }
    return h->version == REGION_VERSION_V1 ? 1 : 0;
}

/* Opens the region without following a symlink at its path (a tenant could point it
 * at another container's region, or at a file to be made world-writable), creating it
 * only with O_EXCL; *created says whether this process made it. O_NONBLOCK keeps a
 * FIFO planted at the path from hanging the open; it is cleared afterwards. */
static int open_region(int *created, char *err, size_t errlen)
{
    const int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    *created = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        int fd = open(g_path, flags);
        if (fd < 0 && errno == ENOENT) {
            fd = open(g_path, flags | O_CREAT | O_EXCL, 0666);
            if (fd < 0 && errno == EEXIST)
                continue; /* another process created it first: open theirs */
            if (fd >= 0)
                *created = 1;
        }
        if (fd < 0) {
            snprintf(err, errlen, "cannot open %s: %s%s", g_path, strerror(errno),
                     errno == ELOOP ? " (a symbolic link is refused)" : "");
            return -1;
        }
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            snprintf(err, errlen, "%s is not a regular file; refusing it", g_path);
            close(fd);
            return -1;
        }
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
            (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        return fd;
    }
    snprintf(err, errlen, "cannot open %s: it keeps appearing and disappearing", g_path);
    return -1;
}

static int attach_locked(char *err, size_t errlen)
{
    int created = 0;
    int fd = open_region(&created, err, errlen);
    if (fd < 0)
        return -1;
    g_fd = fd;
    if (file_lock() != 0) {
        snprintf(err, errlen, "cannot lock %s within %d ms", g_path, g_timeout_ms);
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "fstat %s: %s", g_path, strerror(errno));
        goto fail_locked;
    }
    int fresh = 0, upgrade = 0;
    if ((uint64_t)st.st_size < sizeof(struct region_file)) {
        /* Empty, or a creator died before writing anything: ours to initialize. */
        unsigned char head[sizeof(struct region_file)];
        ssize_t n = st.st_size ? pread(fd, head, (size_t)st.st_size, 0) : 0;
        if (n < 0 || !all_zero(head, (size_t)n)) {
            snprintf(err, errlen, "region truncated: %lld bytes", (long long)st.st_size);
            goto fail_locked;
        }
        fresh = 1;
    } else {
        struct region_header h;
        if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
            snprintf(err, errlen, "reading %s: %s", g_path, strerror(errno));
            goto fail_locked;
        }
        if (all_zero(h.magic, sizeof h.magic))
            fresh = 1; /* sized but never stamped: the creator died mid-way */
        else if ((upgrade = check_header(&h, (uint64_t)st.st_size, err, errlen)) < 0)
            goto fail_locked;
    }
    if (upgrade && (uint64_t)st.st_size < REGION_FILE_SIZE) {
        /* Version 1, written by an older library whose processes may still run: extend
         * (never shrink) the file; their mappings of the first part stay valid. */
        if (ftruncate(fd, (off_t)REGION_FILE_SIZE) != 0) {
            snprintf(err, errlen, "extending %s to version %u: %s", g_path, REGION_VERSION,
                     strerror(errno));
            goto fail_locked;
        }
    }
    if (fresh) {
        if (ftruncate(fd, (off_t)REGION_FILE_SIZE) != 0) {
            snprintf(err, errlen, "sizing %s: %s", g_path, strerror(errno));
            goto fail_locked;
        }
        /* Processes of other users in the container share it; only a file this process
         * created is ever chmod-ed (never one it found, which may not be ours). */
        if (created)
            (void)fchmod(fd, 0666);
    }
    void *m = mmap(NULL, REGION_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "mmap %s: %s", g_path, strerror(errno));
        goto fail_locked;
    }
    g_base = m;
    g_map = m;
    g_broken = 0;
    g_broken_logged = 0;
    install_sigbus();
    if (fresh) {
        memset(g_base, 0, REGION_FILE_SIZE);
        init_header(g_map);
        LOG_INFO("created shared region %s (%llu bytes)", g_path,
                 (unsigned long long)REGION_FILE_SIZE);
    } else if (upgrade) {
        /* The appended table starts at zero: no older process oversubscribes. The size
         * goes first, the version last, so a reader never sees version 2 with the
         * version-1 size. */
        memset(g_base + REGION_OVERSUB_OFFSET, 0, REGION_OVERSUB_SIZE);
        __atomic_store_n(&g_map->hdr.file_size, REGION_FILE_SIZE, __ATOMIC_RELEASE);
        __atomic_store_n(&g_map->hdr.version, REGION_VERSION, __ATOMIC_RELEASE);
        LOG_INFO("upgraded shared region %s from version %u to %u", g_path, REGION_VERSION_V1,
                 REGION_VERSION);
    }
    file_unlock();
    return 0;
fail_locked:
    file_unlock();
fail:
    close(fd);
    g_fd = -1;
    return -1;
}

int region_attach(const char *path, int lock_timeout_ms, char *err, size_t errlen)
{
    pthread_mutex_lock(&g_mu);
    int rc = 0;
    if (g_map == NULL) {
        snprintf(g_path, sizeof g_path, "%s", path);
        g_timeout_ms = lock_timeout_ms;
        rc = attach_locked(err, errlen);
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

int region_ok(void)
{
    return __atomic_load_n(&g_map, __ATOMIC_ACQUIRE) != NULL;
}

static void reclaim_locked(void)
{
    struct region_header *h = &g_map->hdr;
    uint32_t hwm = __atomic_load_n(&h->slot_hwm, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < hwm && i < REGION_MAX_SLOTS; i++) {
        struct region_slot *s = slot_at(i);
        int32_t pid = __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE);
        if (pid == 0 || (int)i == g_slot)
            continue;
        if (proc_alive(pid, s->start_time))
            continue;
        LOG_INFO("reclaiming slot %u of dead process %d", i, (int)pid);
        zero_slot_usage(i);
        s->flags = 0;
        __atomic_store_n(&s->pid, 0, __ATOMIC_RELEASE);
    }
    while (hwm > 0 && __atomic_load_n(&slot_at(hwm - 1)->pid, __ATOMIC_ACQUIRE) == 0 &&
           (int)(hwm - 1) != g_slot)
        hwm--;
    __atomic_store_n(&h->slot_hwm, hwm, __ATOMIC_RELEASE);
}

void region_reclaim(void)
{
    pthread_mutex_lock(&g_mu);
    if (g_map && region_lock() == 0) {
        reclaim_locked();
        region_unlock();
    }
    pthread_mutex_unlock(&g_mu);
}

int region_register_self(int priority, int fenced)
{
    pthread_mutex_lock(&g_mu);
    int rc = -1;
    pid_t me = getpid();
    if (g_map == NULL)
        goto out;
    if (g_slot >= 0 && g_slot_pid == me) {
        if (fenced)
            __atomic_or_fetch(&slot_at((unsigned)g_slot)->flags, REGION_SLOT_FENCED, __ATOMIC_RELAXED);
        rc = 0;
        goto out;
    }
    if (region_lock() != 0)
        goto out;
    reclaim_locked();
    uint64_t st = proc_start_time(me, NULL);
    int found = -1, free_slot = -1;
    for (unsigned i = 0; i < REGION_MAX_SLOTS; i++) {
        struct region_slot *s = slot_at(i);
        int32_t pid = __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE);
        if (pid == me && s->start_time == st) {
            found = (int)i; /* our own slot from before exec(): the driver freed it all */
            break;
        }
        if (pid == 0 && free_slot < 0)
            free_slot = (int)i;
    }
    int idx = found >= 0 ? found : free_slot;
    if (idx < 0) {
        LOG_ERROR("shared region %s: all %u process slots are in use", g_path, REGION_MAX_SLOTS);
    } else {
        struct region_slot *s = slot_at((unsigned)idx);
        __atomic_store_n(&s->pid, 0, __ATOMIC_RELEASE);
        zero_slot_usage((unsigned)idx);
        s->start_time = st;
        s->priority = priority;
        s->flags = fenced ? REGION_SLOT_FENCED : 0;
        s->attach_unix_ns = now_ns(CLOCK_REALTIME);
        __atomic_store_n(&s->pid, me, __ATOMIC_RELEASE);
        if ((uint32_t)idx + 1 > g_map->hdr.slot_hwm)
            __atomic_store_n(&g_map->hdr.slot_hwm, (uint32_t)idx + 1, __ATOMIC_RELEASE);
        g_slot = idx;
        g_slot_pid = me;
        rc = 0;
        LOG_DEBUG("registered in slot %d of %s", idx, g_path);
    }
    region_unlock();
out:
    pthread_mutex_unlock(&g_mu);
    return rc;
}

int region_device(const char *uuid, uint64_t mem_limit, uint64_t mem_total, int sm_limit,
                  int fenced, const char *reason)
{
    if (strlen(uuid) >= REGION_UUID_LEN)
        return -1;
    pthread_mutex_lock(&g_mu);
    int idx = -1;
    if (g_map == NULL || region_lock() != 0)
        goto out;
    struct region_header *h = &g_map->hdr;
    uint32_t n = h->device_count;
    for (uint32_t i = 0; i < n && i < REGION_MAX_DEVICES; i++)
        if (strncmp(g_map->devices[i].uuid, uuid, REGION_UUID_LEN) == 0)
            idx = (int)i;
    if (idx < 0 && n < REGION_MAX_DEVICES) {
        idx = (int)n;
        struct region_device *d = &g_map->devices[idx];
        memset(d, 0, sizeof *d);
        snprintf(d->uuid, sizeof d->uuid, "%s", uuid);
        __atomic_store_n(&h->device_count, n + 1, __ATOMIC_RELEASE);
    }
    if (idx >= 0) {
        struct region_device *d = &g_map->devices[idx];
        __atomic_store_n(&d->mem_limit, mem_limit, __ATOMIC_RELAXED);
        __atomic_store_n(&d->mem_total, mem_total, __ATOMIC_RELAXED);
        __atomic_store_n(&d->sm_limit, (uint32_t)sm_limit, __ATOMIC_RELAXED);
        if (fenced) {
            __atomic_or_fetch(&d->flags, REGION_DEV_FENCED, __ATOMIC_RELAXED);
            __atomic_or_fetch(&h->flags, REGION_FLAG_FENCED, __ATOMIC_RELAXED);
            snprintf(h->fence_reason, sizeof h->fence_reason, "%s: %s", uuid, reason ? reason : "");
        } else {
            __atomic_and_fetch(&d->flags, ~REGION_DEV_FENCED, __ATOMIC_RELAXED);
        }
    } else {
        LOG_ERROR("shared region %s: device table full (%u devices)", g_path, REGION_MAX_DEVICES);
    }
    region_unlock();
out:
    pthread_mutex_unlock(&g_mu);
    return idx;
}

/* The container's usage of one device, saturating at UINT64_MAX. A slot holding more
 * than the device's physical total (or, oversubscribed, than its limit) cannot be
 * real: it is corruption (or a hostile write), and the whole usage reads as
 * UINT64_MAX so that nothing more is granted. */
static uint64_t usage_of(int dev)
{
    if (g_broken)
        return UINT64_MAX;
    uint64_t total = __atomic_load_n(&g_map->devices[dev].mem_total, __ATOMIC_RELAXED);
    uint64_t limit = __atomic_load_n(&g_map->devices[dev].mem_limit, __ATOMIC_RELAXED);
    if (total && limit > total)
        total = limit;
    uint64_t sum = 0;
    uint32_t hwm = __atomic_load_n(&g_map->hdr.slot_hwm, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < hwm && i < REGION_MAX_SLOTS; i++) {
        struct region_slot *s = slot_at(i);
        if (__atomic_load_n(&s->pid, __ATOMIC_ACQUIRE) == 0)
            continue;
        uint64_t slot = sat_add(__atomic_load_n(&s->dev[dev].used_bytes, __ATOMIC_RELAXED),
                                __atomic_load_n(&s->dev[dev].untracked_bytes, __ATOMIC_RELAXED));
        if (total && slot > total) {
            if (!g_broken_logged) {
                g_broken_logged = 1;
                LOG_ERROR("shared region %s: slot %u holds %llu bytes of a %llu-byte device; "
                          "corrupt, refusing all GPU memory", g_path, i, (unsigned long long)slot,
                          (unsigned long long)total);
            }
            return UINT64_MAX;
        }
        sum = sat_add(sum, slot);
    }
    return sum;
}

static int valid_dev(int dev)
{
    return g_map != NULL && dev >= 0 && dev < (int)REGION_MAX_DEVICES;
}

/* No getpid() here (a system call on every allocation): the fork handler resets
 * g_slot in children. */
static int have_slot(void)
{
    return g_slot >= 0;
}

reserve_result region_reserve(int dev, uint64_t bytes, uint64_t limit)
{
    pthread_mutex_lock(&g_mu);
    reserve_result rc = RES_ERROR;
    if (!valid_dev(dev) || !have_slot() || region_trusted() != 0 || region_lock() != 0)
        goto out;
    for (int attempt = 0; attempt < 2; attempt++) {
        uint64_t used = usage_of(dev);
        if (bytes <= limit && used <= limit - bytes) {
            __atomic_add_fetch(&slot_at((unsigned)g_slot)->dev[dev].used_bytes, bytes, __ATOMIC_RELAXED);
            rc = RES_OK;
            break;
        }
        rc = RES_OVER_LIMIT;
        if (attempt == 0)
            reclaim_locked(); /* dead processes may still hold part of the limit */
    }
    region_unlock();
out:
    pthread_mutex_unlock(&g_mu);
    return rc;
}

static void sub_clamped(uint64_t *p, uint64_t v)
{
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    for (;;) {
        uint64_t next = cur > v ? cur - v : 0;
        if (__atomic_compare_exchange_n(p, &cur, next, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return;
    }
}

void region_release(int dev, uint64_t bytes)
{
    /* g_mu keeps a concurrent fork()/exit handler from seeing a half-done update. */
    pthread_mutex_lock(&g_mu);
    if (valid_dev(dev) && have_slot())
        sub_clamped(&slot_at((unsigned)g_slot)->dev[dev].used_bytes, bytes);
    pthread_mutex_unlock(&g_mu);
}

void region_add_oversub(int dev, uint64_t bytes)
{
    pthread_mutex_lock(&g_mu);
    if (valid_dev(dev) && have_slot())
        __atomic_add_fetch(oversub_at((unsigned)g_slot, (unsigned)dev), bytes, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g_mu);
}

void region_sub_oversub(int dev, uint64_t bytes)
{
    pthread_mutex_lock(&g_mu);
    if (valid_dev(dev) && have_slot())
        sub_clamped(oversub_at((unsigned)g_slot, (unsigned)dev), bytes);
    pthread_mutex_unlock(&g_mu);
}

uint64_t region_oversub(int dev)
{
    if (!valid_dev(dev) || g_broken)
        return 0;
    uint64_t sum = 0;
    uint32_t hwm = __atomic_load_n(&g_map->hdr.slot_hwm, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < hwm && i < REGION_MAX_SLOTS; i++)
        if (__atomic_load_n(&slot_at(i)->pid, __ATOMIC_ACQUIRE) != 0)
            sum = sat_add(sum, __atomic_load_n(oversub_at(i, (unsigned)dev), __ATOMIC_RELAXED));
    return sum;
}

uint64_t region_usage(int dev)
{
    if (!valid_dev(dev))
        return 0;
    return usage_of(dev);
}

int region_has_slot(void)
{
    return __atomic_load_n(&g_map, __ATOMIC_ACQUIRE) != NULL && __atomic_load_n(&g_slot, __ATOMIC_ACQUIRE) >= 0;
}

uint64_t region_my_used(int dev)
{
    if (!valid_dev(dev) || !have_slot())
        return 0;
    return __atomic_load_n(&slot_at((unsigned)g_slot)->dev[dev].used_bytes, __ATOMIC_RELAXED);
}

void region_set_untracked(int dev, uint64_t bytes)
{
    if (valid_dev(dev) && have_slot())
        __atomic_store_n(&slot_at((unsigned)g_slot)->dev[dev].untracked_bytes, bytes, __ATOMIC_RELAXED);
}

void region_add_busy(int dev, uint64_t busy_ns, uint64_t launches)
{
    if (!valid_dev(dev) || !have_slot())
        return;
    struct region_slot_device *sd = &slot_at((unsigned)g_slot)->dev[dev];
    if (busy_ns)
        __atomic_add_fetch(&sd->busy_ns, busy_ns, __ATOMIC_RELAXED);
    if (launches)
        __atomic_add_fetch(&sd->launches, launches, __ATOMIC_RELAXED);
}

int64_t *region_tat(int dev)
{
    return valid_dev(dev) ? &g_map->devices[dev].tat_ns : NULL;
}

void region_set_throttled(int dev, int on)
{
    if (!valid_dev(dev))
        return;
    if (on)
        __atomic_or_fetch(&g_map->devices[dev].flags, REGION_DEV_THROTTLED, __ATOMIC_RELAXED);
    else
        __atomic_and_fetch(&g_map->devices[dev].flags, ~REGION_DEV_THROTTLED, __ATOMIC_RELAXED);
}

int region_active_processes(int dev)
{
    if (!valid_dev(dev))
        return 0;
    int n = 0;
    uint32_t hwm = __atomic_load_n(&g_map->hdr.slot_hwm, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < hwm && i < REGION_MAX_SLOTS; i++) {
        struct region_slot *s = slot_at(i);
        if (__atomic_load_n(&s->pid, __ATOMIC_ACQUIRE) == 0)
            continue;
        if (__atomic_load_n(&s->dev[dev].used_bytes, __ATOMIC_RELAXED) ||
            __atomic_load_n(&s->dev[dev].launches, __ATOMIC_RELAXED) || (int)i == g_slot)
            n++;
    }
    return n;
}

void region_fork_prepare(void)
{
    pthread_mutex_lock(&g_mu);
}

void region_fork_parent(void)
{
    pthread_mutex_unlock(&g_mu);
}

void region_after_fork_child(void)
{
    /* The child shares the parent's open file description, hence its OFD lock: it
     * must open its own. The mapping stays valid but the slot is the parent's. */
    pthread_mutex_init(&g_mu, NULL);
    if (g_fd >= 0)
        close(g_fd);
    g_fd = -1;
    if (g_base)
        munmap(g_base, REGION_FILE_SIZE);
    __atomic_store_n(&g_map, NULL, __ATOMIC_RELEASE);
    g_base = NULL;
    g_slot = -1;
    g_slot_pid = 0;
    g_broken = 0;
}

void region_on_exit(void)
{
    /* No lock needed: zeroing our own slot only lowers the container's usage, and
     * slots are taken only when pid == 0, which we store last. */
    if (g_map == NULL || !have_slot())
        return;
    struct region_slot *s = slot_at((unsigned)g_slot);
    zero_slot_usage((unsigned)g_slot);
    __atomic_store_n(&s->pid, 0, __ATOMIC_RELEASE);
    g_slot = -1;
}
