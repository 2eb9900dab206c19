/* LD_PRELOAD shim: give every regular file an unmodified program opens or maps one
 * kernel read-ahead advice, so the kernel's own strategies (no read-ahead, sequential)
 * can be measured on programs that never call fadvise/madvise themselves.
 *
 *   PAGECAST_ADVICE=random|sequential|normal
 *
 * open*()  -> posix_fadvise(fd, 0, 0, advice)       (read()/pread() read-ahead of that open file)
 * mmap*()  -> madvise(addr, len, advice) for file-backed mappings (fault read-around)
 *
 * The dynamic loader maps shared libraries with its own internal calls, which a preload
 * cannot see: libraries keep the default read-around. Nothing else changes: return
 * values and errno are the program's. Children inherit the variable and the shim. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

static int fadv = -1, madv = -1; /* -1: not read yet; -2: off */

static void init_advice(void) {
    if (fadv != -1) return;
    const char *a = getenv("PAGECAST_ADVICE");
    if (a && !strcmp(a, "random")) { fadv = POSIX_FADV_RANDOM; madv = MADV_RANDOM; }
    else if (a && !strcmp(a, "sequential")) { fadv = POSIX_FADV_SEQUENTIAL; madv = MADV_SEQUENTIAL; }
    else if (a && !strcmp(a, "normal")) { fadv = POSIX_FADV_NORMAL; madv = MADV_NORMAL; }
    else { fadv = -2; madv = -2; }
}

static void advise_fd(int fd) {
    if (fd < 0) return;
    init_advice();
    if (fadv < 0) return;
    int saved = errno;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) posix_fadvise(fd, 0, 0, fadv);
    errno = saved;
}

static void advise_map(void *p, size_t len, int flags, int fd) {
    if (p == MAP_FAILED || fd < 0 || (flags & MAP_ANONYMOUS)) return;
    init_advice();
    if (madv < 0) return;
    int saved = errno;
    madvise(p, len, madv);
    errno = saved;
}

#define NEXT(name) static __typeof__(name) *real; if (!real) real = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

static mode_t mode_arg(int flags, va_list ap) {
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
    NEXT(open);
    int fd = real(path, flags, m);
    advise_fd(fd);
    return fd;
}

int open64(const char *path, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
    NEXT(open64);
    int fd = real(path, flags, m);
    advise_fd(fd);
    return fd;
}

int openat(int dir, const char *path, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
    NEXT(openat);
    int fd = real(dir, path, flags, m);
    advise_fd(fd);
    return fd;
}

int openat64(int dir, const char *path, int flags, ...) {
    va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
    NEXT(openat64);
    int fd = real(dir, path, flags, m);
    advise_fd(fd);
    return fd;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    NEXT(mmap);
    void *p = real(addr, len, prot, flags, fd, off);
    advise_map(p, len, flags, fd);
    return p;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off) {
    NEXT(mmap64);
    void *p = real(addr, len, prot, flags, fd, off);
    advise_map(p, len, flags, fd);
    return p;
}
