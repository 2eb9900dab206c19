/*
 * LD_PRELOAD shim of `pagecast record` (page-set mode): makes every first touch of every
 * page of a file mapping take a page fault the recorder sees, and names every file the
 * program opens so the recorder can turn read()'s (device, inode) into a path.
 *
 * Why faults go missing without it: on a read fault the kernel maps the already-cached
 * neighbours of the page too ("fault-around", fault_around_bytes), and a large folio
 * (freshly written files, read-ahead) may be mapped whole, even by one PMD. Later touches
 * of those pages never fault, whatever the read-ahead or madvise advice.
 *
 * What it does, for every file-backed mapping (those present at start-up from
 * /proc/self/maps, new ones through mmap/mmap64/mremap/dlopen, again in a forked child):
 *   - registers it with a userfaultfd in UFFDIO_REGISTER_MODE_WP created with
 *     UFFD_FEATURE_WP_ASYNC (Linux >= 6.7: allowed on any memory type). Nothing is ever
 *     write-protected, so no fault is ever delivered to us; an armed VMA only makes the
 *     kernel skip fault-around and map one page per fault;
 *   - madvise(MADV_NOHUGEPAGE), so a large folio is not mapped by one PMD.
 * Read-ahead and I/O are left as they are: a page that read-ahead brought in still faults
 * once (a minor fault) on its first touch.
 *
 * A read-only MAP_SHARED mapping of a file opened read-only cannot be registered (the
 * kernel wants VM_MAYWRITE); the shim maps it MAP_PRIVATE instead, which reads the same
 * page-cache pages (a later mprotect(PROT_WRITE) would now succeed, copy-on-write,
 * instead of failing with EACCES).
 *
 * Naming opened files: after open/openat/fopen/... of a regular file, the shim maps one
 * page of it PROT_NONE and unmaps it at once. perf reports that mapping (PERF_RECORD_MMAP2:
 * pid, time, device, inode, path) in the same stream as the faults and reads, so the
 * recorder learns the path in order, however soon the program closes the file. The
 * recorder treats a PROT_NONE file mapping as a name only, never as mapped memory.
 *
 * Only mappings of files on disk: shared memory (memfd, /dev/shm, SysV, tmpfs, hugetlbfs)
 * has no I/O to plan and may be the program's own userfaultfd territory, so it is left
 * alone. A userfaultfd registration is a resource the program may want for itself: when
 * the program's own UFFDIO_REGISTER fails with EBUSY over a range the shim registered,
 * the shim unregisters that range and the program's call is retried (the pages of that
 * range are then recorded as the kernel faults them, fault-around included).
 *
 * Nothing here may fail the program: every error leaves the program running unchanged.
 * Calls the program makes straight to the kernel (static binaries, libc-internal opens
 * and mmaps such as locale files) are not seen; see docs/recording.md.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "highfd.h"
#include "open_mode.h"
#include "pageset/uffd_compat.h"

#define PAGE 4096UL

#define TMPFS_MAGIC_     0x01021994
#define HUGETLBFS_MAGIC_ 0x958458f6

static int uffd = -1;
static int uffd_failed;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mremap)(void *, size_t, size_t, int, ...);
static void *(*real_dlopen)(const char *, int);
static void *(*real_dlmopen)(Lmid_t, const char *, int);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_open_2)(const char *, int);
static int (*real_open64_2)(const char *, int);
static int (*real_openat_2)(int, const char *, int);
static int (*real_openat64_2)(int, const char *, int);
static int (*real_creat)(const char *, mode_t);
static FILE *(*real_fopen)(const char *, const char *);
static FILE *(*real_fopen64)(const char *, const char *);
static FILE *(*real_freopen)(const char *, const char *, FILE *);
static int (*real_ioctl)(int, unsigned long, ...);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_truncate)(const char *, off_t);
static int (*real_truncate64)(const char *, off_t);

#define RESOLVE(var, name)                                                                                             \
    do {                                                                                                               \
        if (!(var)) *(void **)&(var) = dlsym(RTLD_NEXT, name);                                                         \
    } while (0)

static void resolve_all(void) {
    RESOLVE(real_mmap, "mmap");
    RESOLVE(real_mremap, "mremap");
    RESOLVE(real_dlopen, "dlopen");
    RESOLVE(real_dlmopen, "dlmopen");
    RESOLVE(real_open, "open");
    RESOLVE(real_open64, "open64");
    RESOLVE(real_openat, "openat");
    RESOLVE(real_openat64, "openat64");
    RESOLVE(real_open_2, "__open_2");
    RESOLVE(real_open64_2, "__open64_2");
    RESOLVE(real_openat_2, "__openat_2");
    RESOLVE(real_openat64_2, "__openat64_2");
    RESOLVE(real_creat, "creat");
    RESOLVE(real_fopen, "fopen");
    RESOLVE(real_fopen64, "fopen64");
    RESOLVE(real_freopen, "freopen");
    RESOLVE(real_ioctl, "ioctl");
    RESOLVE(real_ftruncate, "ftruncate");
    RESOLVE(real_ftruncate64, "ftruncate64");
    RESOLVE(real_truncate, "truncate");
    RESOLVE(real_truncate64, "truncate64");
}

static int shared_memory_fs(long type) {
    return type == TMPFS_MAGIC_ || type == HUGETLBFS_MAGIC_;
}

/* A fresh userfaultfd, moved to a high descriptor so programs that expect the lowest
 * free numbers (shells, fd-passing code) see the numbers they would see without us
 * (highfd.h: below the descriptor limit). If no high number is free, no userfaultfd:
 * the program's numbers matter more than fault-around (one line says so). */
static int new_uffd(void) {
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0) return -1;
    struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_WP_ASYNC};
    if (ioctl(fd, UFFDIO_API, &api) < 0) {
        close(fd);
        return -1;
    }
    int hi = pc_fd_high(fd);
    if (hi < 0) {
        close(fd);
        fprintf(stderr,
                "pagecast record: warning: no free descriptor near the limit for the page-set shim; pages mapped "
                "around a fault may be missing from the page set\n");
    }
    return hi;
}

static void watch(void *addr, size_t len) {
    if (uffd_failed || !len) return;
    uintptr_t start = (uintptr_t)addr & ~(PAGE - 1);
    uintptr_t end = ((uintptr_t)addr + len + PAGE - 1) & ~(PAGE - 1);
    if (uffd < 0) {
        uffd = new_uffd();
        if (uffd < 0) {
            uffd_failed = 1;
            return;
        }
    }
    (void)madvise((void *)start, end - start, MADV_NOHUGEPAGE);
    struct uffdio_register r = {.range = {.start = start, .len = end - start}, .mode = UFFDIO_REGISTER_MODE_WP};
    (void)ioctl(uffd, UFFDIO_REGISTER, &r);
}

/* A mapping named in /proc/self/maps that is shared memory: memfd and SysV segments by
 * their names, the rest by the file system under the path (a deleted file: by name only). */
static int shared_memory_path(const char *path) {
    if (!strncmp(path, "/memfd:", 7) || !strncmp(path, "/SYSV", 5) || !strncmp(path, "/dev/shm/", 9) ||
        !strncmp(path, "/dev/zero", 9))
        return 1;
    struct statfs fs;
    return statfs(path, &fs) == 0 && shared_memory_fs((long)fs.f_type);
}

static void watch_line(char *line) {
    unsigned long lo, hi, ino;
    char perms[8];
    int pathpos = 0;
    if (sscanf(line, "%lx-%lx %7s %*x %*x:%*x %lu %n", &lo, &hi, perms, &ino, &pathpos) == 4 && ino != 0 &&
        pathpos > 0 && line[pathpos] == '/' && !shared_memory_path(line + pathpos))
        watch((void *)lo, hi - lo);
}

/* Register every file mapping listed in /proc/self/maps. Raw syscalls and a small stack
 * buffer: this also runs in a forked child of a multi-threaded parent, and a large static
 * buffer would give the shim a .bss mapping of its own, an anonymous region that would
 * shift the numbering of the program's anonymous regions (their identity across runs). */
static void watch_all(void) {
    char buf[8192];
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    size_t n = 0;
    for (;;) {
        ssize_t k = read(fd, buf + n, sizeof buf - 1 - n);
        if (k <= 0) break;
        n += (size_t)k;
        buf[n] = 0;
        char *line = buf, *nl;
        while ((nl = strchr(line, '\n'))) {
            *nl = 0;
            watch_line(line);
            line = nl + 1;
        }
        n = (size_t)(buf + n - line);
        memmove(buf, line, n);
        if (n == sizeof buf - 1) n = 0; /* a line longer than the buffer: drop it */
    }
    if (n) {
        buf[n] = 0;
        watch_line(buf);
    }
    close(fd);
}

/* watch_all() under the shim's lock: after something mapped files the shim did not see
 * one by one (the loader, a moved mapping, a fork). */
static void lock_and_watch_all(void) {
    pthread_mutex_lock(&mu);
    watch_all();
    pthread_mutex_unlock(&mu);
}

static int regular_fd(int fd) {
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

static int disk_file_fd(int fd) {
    struct statfs fs;
    return regular_fd(fd) && fstatfs(fd, &fs) == 0 && !shared_memory_fs((long)fs.f_type);
}

/* Name an opened file to the recorder: a PROT_NONE one-page mapping it sees, then gone. */
static void announce(int fd) {
    int saved = errno; /* the program's open succeeded: leave errno as it was */
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        void *p = (void *)syscall(SYS_mmap, NULL, PAGE, PROT_NONE, MAP_PRIVATE, fd, 0);
        if (p != MAP_FAILED && (uintptr_t)p < (uintptr_t)-4096) syscall(SYS_munmap, p, PAGE);
        /* and how far the file reaches as it is opened: the recorder learns it before any
         * read of this open, so a read it processes after the program shortened the file
         * is not cut to the shorter size */
        if (st.st_size > (off_t)PAGE) {
            off_t last = (st.st_size - 1) & ~(off_t)(PAGE - 1);
            p = (void *)syscall(SYS_mmap, NULL, PAGE, PROT_NONE, MAP_PRIVATE, fd, last);
            if (p != MAP_FAILED && (uintptr_t)p < (uintptr_t)-4096) syscall(SYS_munmap, p, PAGE);
        }
    }
    errno = saved;
}

static void before_fork(void) {
    pthread_mutex_lock(&mu);
}

static void after_fork_parent(void) {
    pthread_mutex_unlock(&mu);
}

static void after_fork_child(void) {
    pthread_mutex_unlock(&mu);
    /* A forked child keeps no userfaultfd registration (no UFFD_FEATURE_EVENT_FORK): arm
     * its own copy of the mappings. */
    if (uffd >= 0) close(uffd);
    uffd = -1;
    uffd_failed = 0;
    lock_and_watch_all();
}

__attribute__((constructor)) static void pageset_init(void) {
    resolve_all();
    lock_and_watch_all();
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static int read_only_fd(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & O_ACCMODE) == O_RDONLY;
}

static void *do_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    RESOLVE(real_mmap, "mmap");
    int file = !(flags & MAP_ANONYMOUS) && disk_file_fd(fd);
    if (file && (flags & MAP_TYPE) == MAP_SHARED && !(prot & PROT_WRITE) && read_only_fd(fd))
        flags = (flags & ~MAP_TYPE) | MAP_PRIVATE;
    void *p = real_mmap(addr, len, prot, flags, fd, off);
    if (file && p != MAP_FAILED) {
        int saved = errno;
        pthread_mutex_lock(&mu);
        watch(p, len);
        pthread_mutex_unlock(&mu);
        errno = saved;
    }
    return p;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return do_mmap(addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return do_mmap(addr, len, prot, flags, fd, off);
}

void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
    RESOLVE(real_mremap, "mremap");
    void *want = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        want = va_arg(ap, void *);
        va_end(ap);
    }
    void *p = real_mremap(old, old_len, new_len, flags, want);
    /* a moved mapping loses its registration; which kind it is, only the maps say */
    if (p != MAP_FAILED) lock_and_watch_all();
    return p;
}

void *dlopen(const char *file, int mode) {
    RESOLVE(real_dlopen, "dlopen");
    void *h = real_dlopen(file, mode);
    if (h && file) lock_and_watch_all(); /* the loader maps libraries with its own internal mmap */
    return h;
}

void *dlmopen(Lmid_t lmid, const char *file, int mode) {
    RESOLVE(real_dlmopen, "dlmopen");
    void *h = real_dlmopen(lmid, file, mode);
    if (h && file) lock_and_watch_all();
    return h;
}

/* If the next library lacks a variant (an older libc), the system call does the same. */
static int sys_open(int dir, const char *path, int flags, mode_t mode) {
    return (int)syscall(SYS_openat, dir, path, flags, mode);
}

/* How far the file reached before a call cuts it short (ftruncate, truncate, O_TRUNC):
 * a PROT_NONE page at its last page, which perf reports (PERF_RECORD_MMAP2: inode,
 * offset). The recorder clips a read's range to the file's size; the size it finds later
 * may be smaller than when the pages were read, and this keeps the pages that were. A
 * write-only descriptor cannot be mapped: the file is reopened read-only for it. */
static void announce_extent(int fd, off_t size) {
    if (size <= 0) return;
    int saved = errno;
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    int rfd = (int)syscall(SYS_openat, AT_FDCWD, self, O_RDONLY | O_CLOEXEC);
    if (rfd >= 0) {
        off_t last = (size - 1) & ~(off_t)(PAGE - 1);
        void *p = (void *)syscall(SYS_mmap, NULL, PAGE, PROT_NONE, MAP_PRIVATE, rfd, last);
        if (p != MAP_FAILED && (uintptr_t)p < (uintptr_t)-4096) syscall(SYS_munmap, p, PAGE);
        close(rfd);
    }
    errno = saved;
}

static off_t size_of(int fd) {
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
}

/* The size of the regular file an open with O_TRUNC is about to empty (-1: none). */
static off_t trunc_size(int dir, const char *path, int flags) {
    if (!(flags & O_TRUNC) || (flags & O_ACCMODE) == O_RDONLY || !path) return -1;
    int saved = errno;
    struct stat st;
    off_t size = fstatat(dir, path, &st, 0) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
    errno = saved;
    return size;
}

static int opened_was(off_t old_size, int fd) {
    if (fd >= 0) {
        announce_extent(fd, old_size);
        announce(fd);
    }
    return fd;
}

int open(const char *path, int flags, ...) {
    PC_OPEN_MODE(m, flags);
    RESOLVE(real_open, "open");
    off_t old = trunc_size(AT_FDCWD, path, flags);
    return opened_was(old, real_open ? real_open(path, flags, m) : sys_open(AT_FDCWD, path, flags, m));
}

int open64(const char *path, int flags, ...) {
    PC_OPEN_MODE(m, flags);
    RESOLVE(real_open64, "open64");
    off_t old = trunc_size(AT_FDCWD, path, flags);
    return opened_was(old,
                      real_open64 ? real_open64(path, flags, m) : sys_open(AT_FDCWD, path, flags | O_LARGEFILE, m));
}

int openat(int dir, const char *path, int flags, ...) {
    PC_OPEN_MODE(m, flags);
    RESOLVE(real_openat, "openat");
    off_t old = trunc_size(dir, path, flags);
    return opened_was(old, real_openat ? real_openat(dir, path, flags, m) : sys_open(dir, path, flags, m));
}

int openat64(int dir, const char *path, int flags, ...) {
    PC_OPEN_MODE(m, flags);
    RESOLVE(real_openat64, "openat64");
    off_t old = trunc_size(dir, path, flags);
    return opened_was(old,
                      real_openat64 ? real_openat64(dir, path, flags, m) : sys_open(dir, path, flags | O_LARGEFILE, m));
}

int __open_2(const char *path, int flags) {
    RESOLVE(real_open_2, "__open_2");
    off_t old = trunc_size(AT_FDCWD, path, flags);
    return opened_was(old, real_open_2 ? real_open_2(path, flags) : sys_open(AT_FDCWD, path, flags, 0));
}

int __open64_2(const char *path, int flags) {
    RESOLVE(real_open64_2, "__open64_2");
    off_t old = trunc_size(AT_FDCWD, path, flags);
    return opened_was(old,
                      real_open64_2 ? real_open64_2(path, flags) : sys_open(AT_FDCWD, path, flags | O_LARGEFILE, 0));
}

int __openat_2(int dir, const char *path, int flags) {
    RESOLVE(real_openat_2, "__openat_2");
    off_t old = trunc_size(dir, path, flags);
    return opened_was(old, real_openat_2 ? real_openat_2(dir, path, flags) : sys_open(dir, path, flags, 0));
}

int __openat64_2(int dir, const char *path, int flags) {
    RESOLVE(real_openat64_2, "__openat64_2");
    off_t old = trunc_size(dir, path, flags);
    return opened_was(old, real_openat64_2 ? real_openat64_2(dir, path, flags)
                                           : sys_open(dir, path, flags | O_LARGEFILE, 0));
}

int creat(const char *path, mode_t mode) {
    RESOLVE(real_creat, "creat");
    off_t old = trunc_size(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC);
    return opened_was(old, real_creat ? real_creat(path, mode)
                                      : sys_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode));
}

static FILE *fopened(FILE *f) {
    if (f) announce(fileno(f));
    return f;
}

static off_t fopen_trunc_size(const char *path, const char *mode) {
    return mode && mode[0] == 'w' ? trunc_size(AT_FDCWD, path, O_TRUNC | O_WRONLY) : -1;
}

static FILE *fopened_was(off_t old_size, FILE *f) {
    if (f) announce_extent(fileno(f), old_size);
    return fopened(f);
}

FILE *fopen(const char *path, const char *mode) {
    RESOLVE(real_fopen, "fopen");
    off_t old = fopen_trunc_size(path, mode);
    return fopened_was(old, real_fopen(path, mode));
}

FILE *fopen64(const char *path, const char *mode) {
    RESOLVE(real_fopen64, "fopen64");
    off_t old = fopen_trunc_size(path, mode);
    return fopened_was(old, real_fopen64(path, mode));
}

FILE *freopen(const char *path, const char *mode, FILE *f) {
    RESOLVE(real_freopen, "freopen");
    off_t old = fopen_trunc_size(path, mode);
    return fopened_was(old, real_freopen(path, mode, f));
}

/* The program's own userfaultfd: a registration refused because the shim holds the range
 * is given up by the shim, and the program's call made again. */
int ioctl(int fd, unsigned long req, ...) {
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    RESOLVE(real_ioctl, "ioctl");
    int rc = real_ioctl ? real_ioctl(fd, req, arg) : (int)syscall(SYS_ioctl, fd, req, arg);
    if (rc < 0 && errno == EBUSY && req == UFFDIO_REGISTER && arg) {
        pthread_mutex_lock(&mu);
        int ours = uffd;
        pthread_mutex_unlock(&mu);
        if (ours >= 0 && fd != ours) {
            struct uffdio_range range = ((struct uffdio_register *)arg)->range;
            if (syscall(SYS_ioctl, ours, UFFDIO_UNREGISTER, &range) == 0)
                rc = real_ioctl ? real_ioctl(fd, req, arg) : (int)syscall(SYS_ioctl, fd, req, arg);
            else
                errno = EBUSY;
        }
    }
    return rc;
}

static void before_shrink(int fd, off_t len) {
    off_t old = size_of(fd);
    if (old > len) announce_extent(fd, old);
}

static void before_shrink_path(const char *path, off_t len) {
    int saved = errno;
    int fd = path ? (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) : -1;
    if (fd >= 0) {
        before_shrink(fd, len);
        close(fd);
    }
    errno = saved;
}

int ftruncate(int fd, off_t len) {
    RESOLVE(real_ftruncate, "ftruncate");
    before_shrink(fd, len);
    return real_ftruncate ? real_ftruncate(fd, len) : (int)syscall(SYS_ftruncate, fd, len);
}

int ftruncate64(int fd, off_t len) {
    RESOLVE(real_ftruncate64, "ftruncate64");
    before_shrink(fd, len);
    return real_ftruncate64 ? real_ftruncate64(fd, len) : (int)syscall(SYS_ftruncate, fd, len);
}

int truncate(const char *path, off_t len) {
    RESOLVE(real_truncate, "truncate");
    before_shrink_path(path, len);
    return real_truncate ? real_truncate(path, len) : (int)syscall(SYS_truncate, path, len);
}

int truncate64(const char *path, off_t len) {
    RESOLVE(real_truncate64, "truncate64");
    before_shrink_path(path, len);
    return real_truncate64 ? real_truncate64(path, len) : (int)syscall(SYS_truncate, path, len);
}
