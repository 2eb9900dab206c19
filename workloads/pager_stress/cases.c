/* Edge cases a pager must get right, one per mode, each on a shared mapping of FILE
 * (NPAGES pages). Run under the pagecast pager by tests/test_pager_reliability.py; every
 * mode also runs as-is on a kernel mapping, which is the reference.
 *
 *   cases fork FILE NPAGES NFORKS   write every page, fork NFORKS children that _exit(0)
 *   cases mremap FILE NPAGES        write, mremap (grow, may move), write again via the result
 *   cases fixed FILE NPAGES         write, mmap(MAP_FIXED) anonymous memory over the mapping,
 *                                   write again through the mapping if that was refused
 *   cases signal FILE NPAGES SIG    write every page, then die of SIG (13: a write to a closed pipe)
 *   cases writer FILE NPAGES        write bytes [0,64) of every page, print "ready", wait for a
 *                                   line on stdin (another process writes the file meanwhile),
 *                                   write bytes [64,128), exit without munmap
 *   cases twomaps FILE NPAGES [U]   two writable MAP_SHARED mappings of the file (U=1: the file
 *                                   is unlinked between the two)
 *   cases shrink FILE NPAGES [W]    write bytes [0,256) of every page, ftruncate to 10 pages and
 *                                   100 bytes, then print for every page whether reading it
 *                                   raises SIGBUS, and page 10's bytes 50 and 200 (W=1: print
 *                                   "ready" and wait for a line on stdin instead of truncating:
 *                                   another process truncates the file meanwhile)
 *   cases readtwice FILE NPAGES     two read-only MAP_SHARED mappings of a read-write descriptor,
 *                                   then mprotect(PROT_WRITE) of the first
 *   cases rdonly FILE NPAGES        a read-only descriptor mapped PROT_WRITE|MAP_SHARED
 *   cases read FILE NPAGES STEP     read page 0, STEP, 2*STEP, ... (mod NPAGES) NPAGES times and
 *                                   print the FNV-1a hash of every byte read
 *
 *   cases gens FILE NPAGES          rewrite every page's GEN_SLOTS counters with generation
 *                                   1, 2, 3, ... forever, within a page from the last counter to
 *                                   the first (so at any instant a page holds g+1 in its last k
 *                                   counters and g in the others); killed by the test
 *   cases fds FILE NPAGES           map the file, then open /dev/null twice and print the two
 *                                   descriptor numbers (those a program gets bare: the pager's
 *                                   own descriptors must not take them)
 *
 * Written byte at page p, offset o (o < 128): pattern(p, o) below.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096

static uint8_t pattern(long p, long o) {
    return (uint8_t)(p * 31 + o * 7 + 1);
}

static void write_range(uint8_t *m, long npages, long lo, long hi) {
    for (long p = 0; p < npages; p++)
        for (long o = lo; o < hi; o++) m[p * PAGE + o] = pattern(p, o);
}

static uint8_t *map_rw(const char *file, long npages, int *fd_out) {
    int fd = open(file, O_RDWR);
    if (fd < 0) {
        perror("open");
        exit(2);
    }
    uint8_t *m = mmap(NULL, (size_t)npages * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    if (fd_out) *fd_out = fd;
    return m;
}

static int do_fork(const char *file, long npages, long nforks) {
    uint8_t *m = map_rw(file, npages, NULL);
    for (long i = 0; i < nforks; i++) {
        write_range(m, npages, 0, 64); /* dirty pages and evictions in flight at each fork */
        pid_t c = fork();
        if (c < 0) {
            perror("fork");
            return 2;
        }
        if (c == 0) _exit(0);
        int st;
        if (waitpid(c, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "child %ld did not exit cleanly\n", i);
            return 3;
        }
    }
    write_range(m, npages, 64, 128);
    return 0;
}

static int do_mremap(const char *file, long npages) {
    uint8_t *m = map_rw(file, npages, NULL);
    size_t len = (size_t)npages * PAGE;
    write_range(m, npages, 0, 64);
    uint8_t *n = mremap(m, len, len + PAGE, MREMAP_MAYMOVE);
    if (n == MAP_FAILED) {
        printf("mremap refused: %s\n", strerror(errno));
        n = m; /* the region is untouched: go on with it */
    } else {
        printf("mremap moved\n");
    }
    for (long p = 0; p < npages; p++)
        for (long o = 0; o < 64; o++)
            if (n[p * PAGE + o] != pattern(p, o)) {
                printf("lost: page %ld reads %d\n", p, n[p * PAGE + o]);
                return 3;
            }
    write_range(n, npages, 64, 128);
    return 0;
}

static int do_fixed(const char *file, long npages) {
    uint8_t *m = map_rw(file, npages, NULL);
    write_range(m, npages, 0, 64);
    void *n = mmap(m, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (n != MAP_FAILED) {
        printf("replaced\n");
        return 0;
    }
    printf("MAP_FIXED refused: %s\n", strerror(errno));
    write_range(m, npages, 64, 128);
    return 0;
}

static int do_signal(const char *file, long npages, int sig) {
    uint8_t *m = map_rw(file, npages, NULL);
    write_range(m, npages, 0, 128);
    if (sig == SIGPIPE) { /* as `prog | head` ends: a write to a pipe nobody reads */
        int p[2];
        if (pipe(p) < 0) return 2;
        close(p[0]);
        if (write(p[1], "x", 1) < 0) perror("write");
    } else {
        raise(sig);
    }
    return 4; /* not reached: the signal's default action ends the process */
}

static int do_writer(const char *file, long npages) {
    uint8_t *m = map_rw(file, npages, NULL);
    write_range(m, npages, 0, 64);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) return 2;
    write_range(m, npages, 64, 128);
    return 0;
}

static int do_twomaps(const char *file, long npages, long unlink_first) {
    int fd;
    uint8_t *a = map_rw(file, npages, &fd);
    if (unlink_first) {
        write_range(a, npages, 0, 64); /* dirty pages the file does not have yet */
        unlink(file);
    }
    uint8_t *b = mmap(NULL, (size_t)npages * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (b == MAP_FAILED) {
        printf("second mapping refused: %s\n", strerror(errno));
        write_range(a, npages, 0, 128);
        return 0;
    }
    write_range(a, npages, 0, 64);
    write_range(b, npages, 64, 128);
    for (long p = 0; p < npages; p++)
        if (b[p * PAGE] != pattern(p, 0) || a[p * PAGE + 64] != pattern(p, 64)) {
            printf("incoherent: page %ld\n", p);
            return 3;
        }
    printf("coherent\n");
    return 0;
}

static sigjmp_buf g_jump;

static void on_sigbus(int sig) {
    (void)sig;
    siglongjmp(g_jump, 1);
}

static int do_shrink(const char *file, long npages, long wait) {
    int fd;
    uint8_t *m = map_rw(file, npages, &fd);
    write_range(m, npages, 0, 256);
    if (wait) {
        if (msync(m, (size_t)npages * PAGE, MS_SYNC) < 0) perror("msync");
        printf("ready\n");
        fflush(stdout);
        char line[64];
        if (!fgets(line, sizeof line, stdin)) return 2;
    } else if (ftruncate(fd, 10 * PAGE + 100) < 0) {
        perror("ftruncate");
        return 2;
    }
    struct sigaction sa = {.sa_handler = on_sigbus};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
    for (long p = 0; p < npages; p++) {
        volatile uint8_t v = 0;
        if (sigsetjmp(g_jump, 1) == 0) {
            v = m[p * PAGE];
            printf("%ld:%s ", p, v == pattern(p, 0) ? "data" : "other");
        } else {
            printf("%ld:SIGBUS ", p);
        }
    }
    printf("\npage 10 byte 50: %d, byte 200: %d\n", m[10 * PAGE + 50], m[10 * PAGE + 200]);
    return 0;
}

static int do_readtwice(const char *file, long npages) {
    int fd = open(file, O_RDWR);
    if (fd < 0) return 2;
    size_t len = (size_t)npages * PAGE;
    uint8_t *a = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0), *b = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (a == MAP_FAILED || b == MAP_FAILED) {
        printf("refused: %s\n", strerror(errno));
        return 3;
    }
    printf("both mapped, %s\n", memcmp(a, b, len) == 0 ? "same bytes" : "different bytes");
    if (mprotect(a, len, PROT_READ | PROT_WRITE) < 0)
        printf("mprotect refused: %s\n", strerror(errno));
    else
        printf("mprotect done\n");
    return 0;
}

static int do_rdonly(const char *file, long npages) {
    int fd = open(file, O_RDONLY);
    if (fd < 0) return 2;
    uint8_t *m = mmap(NULL, (size_t)npages * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        printf("refused: %s\n", strerror(errno));
        return 0;
    }
    write_range(m, npages, 0, 64);
    printf("mapped\n");
    return 0;
}

static int do_read(const char *file, long npages, long step) {
    int fd = open(file, O_RDONLY);
    if (fd < 0) return 2;
    const uint8_t *m = mmap(NULL, (size_t)npages * PAGE, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    uint64_t h = 1469598103934665603ull;
    for (long i = 0, p = 0; i < npages; i++, p = (p + step) % npages)
        for (long o = 0; o < PAGE; o++) h = (h ^ m[p * PAGE + o]) * 1099511628211ull;
    printf("%016llx\n", (unsigned long long)h);
    return 0;
}

#define GEN_SLOTS 4 /* counters per page, 1 KiB apart: a write-back sees GEN_SLOTS runs of change */

static int do_gens(const char *file, long npages) {
    uint8_t *m = map_rw(file, npages, NULL);
    for (uint64_t g = 1;; g++)
        for (long p = 0; p < npages; p++)
            for (int i = GEN_SLOTS - 1; i >= 0; i--) {
                ((volatile uint64_t *)(m + p * PAGE))[i * (PAGE / 8 / GEN_SLOTS)] = g;
                __asm__ volatile("" ::: "memory");
            }
    return 0;
}

static int do_fds(const char *file, long npages) {
    int fd;
    uint8_t *m = map_rw(file, npages, &fd);
    m[0] = 1; /* a fault: the pager is running */
    int a = open("/dev/null", O_RDONLY), b = open("/dev/null", O_RDONLY);
    printf("%d %d\n", a, b);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: cases MODE FILE NPAGES [ARG]\n");
        return 2;
    }
    const char *mode = argv[1], *file = argv[2];
    long npages = atol(argv[3]), arg = argc > 4 ? atol(argv[4]) : 0;
    if (!strcmp(mode, "fork")) return do_fork(file, npages, arg);
    if (!strcmp(mode, "mremap")) return do_mremap(file, npages);
    if (!strcmp(mode, "fixed")) return do_fixed(file, npages);
    if (!strcmp(mode, "signal")) return do_signal(file, npages, (int)arg);
    if (!strcmp(mode, "writer")) return do_writer(file, npages);
    if (!strcmp(mode, "twomaps")) return do_twomaps(file, npages, arg);
    if (!strcmp(mode, "shrink")) return do_shrink(file, npages, arg);
    if (!strcmp(mode, "readtwice")) return do_readtwice(file, npages);
    if (!strcmp(mode, "rdonly")) return do_rdonly(file, npages);
    if (!strcmp(mode, "read")) return do_read(file, npages, arg);
    if (!strcmp(mode, "fds")) return do_fds(file, npages);
    if (!strcmp(mode, "gens")) return do_gens(file, npages);
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
