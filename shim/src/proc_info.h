/* Process identity from /proc: pid + start time survive pid reuse. */
#ifndef HAMI_PROC_INFO_H
#define HAMI_PROC_INFO_H

#include <stdint.h>
#include <sys/types.h>

/* Start time of `pid` in clock ticks after boot (/proc/<pid>/stat field 22), or 0
 * when unreadable. *state receives the state letter ('R', 'S', 'Z', ...) or 0. */
uint64_t proc_start_time(pid_t pid, char *state);

/* 1 when `pid` runs and, if start_time != 0, was started at start_time. */
int proc_alive(pid_t pid, uint64_t start_time);

#endif
