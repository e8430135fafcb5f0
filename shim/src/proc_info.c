#include "proc_info.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t proc_start_time(pid_t pid, char *state)
{
    char path[64], buf[1024];
    if (state)
        *state = 0;
    /* The leader thread's own record: the same start time and state as /proc/<pid>/stat.
     * QEMU user-mode synthesizes /proc/self/stat and /proc/<own pid>/stat (its own
     * clock, a tick off the kernel's), so a process would record a start time that
     * no other process sees; it passes this path through from the kernel. */
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* comm may contain spaces and ')', so fields are counted after the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ')
        return 0;
    p += 2; /* field 3: state */
    if (state)
        *state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return 0;
        p++;
    }
    return strtoull(p, NULL, 10);
}

int proc_alive(pid_t pid, uint64_t start_time)
{
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 0;
    char state = 0;
    uint64_t st = proc_start_time(pid, &state);
    if (st == 0)
        return 1; /* exists, /proc unreadable (hidepid): assume the same process */
    if (state == 'Z' || state == 'X')
        return 0; /* exited, not reaped: the driver already released its memory */
    return start_time == 0 || st == start_time;
}
