/*
 * uffd_own: a program that uses userfaultfd on its own memory, as a checkpointing or
 * live-migration runtime does. Two parts, both checked byte by byte:
 *
 *   memfd: a 16-page memfd (shmem) mapping registered in MISSING mode; a handler thread
 *          fills each page on first touch with UFFDIO_COPY (page i: bytes i+1).
 *   file:  a 16-page mapping of FILE (a regular file on disk) registered in write-protect
 *          mode (UFFD_FEATURE_WP_ASYNC), as a dirty-page tracker does.
 *
 *   uffd_own FILE
 *
 * Prints "memfd ok" and "file ok" and exits 0; any failure prints what failed and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15) /* Linux 6.7; older headers lack it */
#endif

#define PAGE   4096UL
#define NPAGES 16

static int fail(const char *what) {
    printf("%s failed: %s\n", what, strerror(errno));
    return 1;
}

static int new_uffd(uint64_t features) {
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
    if (fd < 0) return -1;
    struct uffdio_api api = {.api = UFFD_API, .features = features};
    if (ioctl(fd, UFFDIO_API, &api) < 0) return -1;
    return fd;
}

struct filler {
    int uffd;
    char *base;
};

static void *fill(void *arg) {
    struct filler *f = arg;
    static char page[PAGE] __attribute__((aligned(4096)));
    for (int served = 0; served < NPAGES;) {
        struct pollfd p = {.fd = f->uffd, .events = POLLIN};
        if (poll(&p, 1, 10000) <= 0) break;
        struct uffd_msg msg;
        if (read(f->uffd, &msg, sizeof msg) != sizeof msg || msg.event != UFFD_EVENT_PAGEFAULT) continue;
        uintptr_t at = (uintptr_t)msg.arg.pagefault.address & ~(PAGE - 1);
        memset(page, (int)((at - (uintptr_t)f->base) / PAGE + 1), PAGE);
        struct uffdio_copy c = {.dst = at, .src = (uintptr_t)page, .len = PAGE};
        if (ioctl(f->uffd, UFFDIO_COPY, &c) == 0) served++;
    }
    return NULL;
}

static int memfd_part(void) {
    int m = memfd_create("uffd_own", MFD_CLOEXEC);
    if (m < 0 || ftruncate(m, NPAGES * PAGE) < 0) return fail("memfd");
    char *base = mmap(NULL, NPAGES * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
    if (base == MAP_FAILED) return fail("memfd mmap");
    struct filler f = {new_uffd(0), base};
    if (f.uffd < 0) return fail("userfaultfd");
    struct uffdio_register r = {.range = {(uintptr_t)base, NPAGES * PAGE}, .mode = UFFDIO_REGISTER_MODE_MISSING};
    if (ioctl(f.uffd, UFFDIO_REGISTER, &r) < 0) return fail("UFFDIO_REGISTER of the memfd mapping");
    pthread_t t;
    pthread_create(&t, NULL, fill, &f);
    for (int i = NPAGES - 1; i >= 0; i--)
        for (size_t b = 0; b < PAGE; b += 512)
            if (base[i * PAGE + b] != (char)(i + 1)) {
                printf("memfd page %d reads %d, not %d\n", i, base[i * PAGE + b], i + 1);
                return 1;
            }
    pthread_join(t, NULL);
    printf("memfd ok\n");
    return 0;
}

static int file_part(const char *path) {
    int fd = open(path, O_RDWR);
    if (fd < 0) return fail("open");
    char *base = mmap(NULL, NPAGES * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) return fail("file mmap");
    int u = new_uffd(UFFD_FEATURE_WP_ASYNC);
    if (u < 0) {
        printf("file ok (write-protect tracking unsupported here)\n");
        return 0;
    }
    struct uffdio_register r = {.range = {(uintptr_t)base, NPAGES * PAGE}, .mode = UFFDIO_REGISTER_MODE_WP};
    if (ioctl(u, UFFDIO_REGISTER, &r) < 0) return fail("UFFDIO_REGISTER of the file mapping");
    for (int i = 0; i < NPAGES; i++)
        if (base[i * PAGE] != (char)(0x40 + i)) {
            printf("file page %d reads %d\n", i, base[i * PAGE]);
            return 1;
        }
    printf("file ok\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: uffd_own FILE\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    return memfd_part() || file_part(argv[1]);
}
