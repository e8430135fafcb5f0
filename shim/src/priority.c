#include "priority.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

static void beat(dev_state *d, const shim_config *cfg, uint64_t now)
{
    uint64_t last = __atomic_load_n(&d->prio_beat_ns, __ATOMIC_RELAXED);
    if (last && now - last < PRIORITY_BEAT_NS)
        return;
    if (!__atomic_compare_exchange_n(&d->prio_beat_ns, &last, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return; /* another thread beats now */
    int fd = __atomic_load_n(&d->prio_fd, __ATOMIC_ACQUIRE);
    if (fd < 0) {
        if (__atomic_exchange_n(&d->prio_tried, 1, __ATOMIC_ACQ_REL))
            return; /* tried and failed: logged once */
        char path[4200];
        snprintf(path, sizeof path, "%s/%s/beat", cfg->priority_beat_dir, d->uuid);
        fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
        if (fd < 0) {
            LOG_WARN("high priority on %s, but its beat file %s cannot be opened (%s): "
                     "low-priority containers will not yield", d->uuid, path, strerror(errno));
            return;
        }
        __atomic_store_n(&d->prio_fd, fd, __ATOMIC_RELEASE);
    }
    if (pwrite(fd, &now, sizeof now, 0) != (ssize_t)sizeof now)
        LOG_DEBUG("beat on %s: %s", d->uuid, strerror(errno));
}

/* 1 when some entry of the GPU's board holds a fresh beat. Untrusted content: entries
 * are opened without following links or blocking, only regular files count, and only
 * their first 8 bytes are read; a time in the future is not a beat. */
static int high_active(dev_state *d, const shim_config *cfg, uint64_t now)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", cfg->priority_board_dir, d->uuid);
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return 0;
    DIR *dir = fdopendir(dfd);
    if (dir == NULL) {
        close(dfd);
        return 0;
    }
    int active = 0, seen = 0;
    struct dirent *e;
    while (!active && seen < PRIORITY_MAX_ENTRIES && (e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        seen++;
        int sub = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0)
            continue;
        int fd = openat(sub, "beat", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        close(sub);
        if (fd < 0)
            continue;
        struct stat st;
        uint64_t t = 0;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && pread(fd, &t, sizeof t, 0) == (ssize_t)sizeof t &&
            t <= now + PRIORITY_BEAT_NS && now - t <= PRIORITY_FRESH_NS)
            active = 1;
        close(fd);
    }
    closedir(dir);
    return active;
}

int priority_before_launch(dev_state *d)
{
    const shim_config *cfg = shim_cfg();
    if (cfg->priority < 0)
        return 0;
    uint64_t now = shim_now_ns();
    if (cfg->priority == 0) {
        beat(d, cfg, now);
        return 0;
    }
    uint64_t checked = __atomic_load_n(&d->prio_checked_ns, __ATOMIC_RELAXED);
    if (!checked || now - checked >= PRIORITY_CHECK_NS) {
        int active = high_active(d, cfg, now);
        int was = __atomic_exchange_n(&d->prio_yielding, active, __ATOMIC_RELAXED);
        if (was != active)
            LOG_INFO("device %s: %s", d->uuid,
                     active ? "a high-priority container is active: yielding"
                            : "no high-priority container active: full share again");
        __atomic_store_n(&d->prio_checked_ns, now, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&d->prio_yielding, __ATOMIC_RELAXED) ? PRIORITY_LOW_SHARE : 0;
}
