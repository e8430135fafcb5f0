/*
 * lock_holder: takes the shared region's writer lock (the robust mutex in the
 * header, REGION.md) and holds it until killed.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "region_layout.h"

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    int fd = open(argv[1], O_RDWR);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    struct region_header *h = mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    int rc = pthread_mutex_lock((pthread_mutex_t *)(void *)h->lock);
    if (rc != 0 && rc != EOWNERDEAD) {
        fprintf(stderr, "lock: %d\n", rc);
        return 1;
    }
    printf("locked\n");
    fflush(stdout);
    for (;;)
        pause();
}
