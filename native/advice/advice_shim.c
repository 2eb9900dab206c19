/* LD_PRELOAD shim: give regular files an unmodified program opens or maps a kernel
 * read-ahead advice, so the kernel's own strategies (no read-ahead, sequential) can be
 * measured on, and planned for, programs that never call fadvise/madvise themselves.
 *
 *   PAGECAST_ADVICE=random|sequential|normal          every regular file
 *   PAGECAST_ADVICE_FILES=A:DEV:INO[,A:DEV:INO...]    only these files (A: r, s or n), by
 *                                                     st_dev and st_ino; wins over the above
 *
 * The second form is what `pagecast run --plan` sets: a plan's advice is per file, and a
 * file is named by (device, inode) because a path can be spelt many ways (relative,
 * symlinks) and the launcher has already checked that inode is the recorded file.
 *
 * open*()  -> posix_fadvise(fd, 0, 0, advice)       (read()/pread() read-ahead of that open file)
 * mmap*()  -> madvise(addr, len, advice) for file-backed mappings (fault read-around)
 *
 * The dynamic loader maps shared libraries with its own internal calls, which a preload
 * cannot see: libraries keep the default read-around. Nothing else changes: return
 * values and errno are the program's. Children inherit the variables and the shim. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

static int fadv = -1, madv = -1; /* -1: not read yet; -2: off */

struct file_advice {
    dev_t dev;
    ino_t ino;
    int fadv, madv;
};
static struct file_advice *files;
static size_t nfiles;

static int parse_advice(const char *a, int *f, int *m) {
    if (!strcmp(a, "random") || !strcmp(a, "r")) { *f = POSIX_FADV_RANDOM; *m = MADV_RANDOM; }
    else if (!strcmp(a, "sequential") || !strcmp(a, "s")) { *f = POSIX_FADV_SEQUENTIAL; *m = MADV_SEQUENTIAL; }
    else if (!strcmp(a, "normal") || !strcmp(a, "n")) { *f = POSIX_FADV_NORMAL; *m = MADV_NORMAL; }
    else return -1;
    return 0;
}

/* PAGECAST_ADVICE_FILES: malformed entries are skipped (the program must run regardless) */
static void parse_files(const char *list) {
    size_t cap = 1;
    for (const char *p = list; *p; p++) cap += *p == ',';
    files = calloc(cap, sizeof *files);
    if (!files) return;
    for (const char *p = list; *p;) {
        char a[2] = {*p, 0};
        unsigned long long dev, ino;
        int used = 0;
        struct file_advice fa;
        if (p[1] == ':' && sscanf(p + 2, "%llu:%llu%n", &dev, &ino, &used) == 2 && parse_advice(a, &fa.fadv, &fa.madv) == 0) {
            fa.dev = (dev_t)dev;
            fa.ino = (ino_t)ino;
            files[nfiles++] = fa;
        }
        const char *c = strchr(p, ',');
        if (!c) break;
        p = c + 1;
    }
}

static void init_advice(void) {
    if (fadv != -1) return;
    int saved = errno;
    const char *a = getenv("PAGECAST_ADVICE");
    if (!a || parse_advice(a, &fadv, &madv) < 0) { fadv = -2; madv = -2; }
    const char *list = getenv("PAGECAST_ADVICE_FILES");
    if (list && *list) parse_files(list);
    errno = saved;
}

/* The advice for this file: its own entry, else the global one (-2: none). */
static void advice_for(const struct stat *st, int *f, int *m) {
    *f = fadv;
    *m = madv;
    for (size_t i = 0; i < nfiles; i++)
        if (files[i].dev == st->st_dev && files[i].ino == st->st_ino) {
            *f = files[i].fadv;
            *m = files[i].madv;
            return;
        }
}

static void advise_fd(int fd) {
    if (fd < 0) return;
    init_advice();
    if (fadv < 0 && !nfiles) return;
    int saved = errno;
    struct stat st;
    int f, m;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        advice_for(&st, &f, &m);
        if (f >= 0) posix_fadvise(fd, 0, 0, f);
    }
    errno = saved;
}

static void advise_map(void *p, size_t len, int flags, int fd) {
    if (p == MAP_FAILED || fd < 0 || (flags & MAP_ANONYMOUS)) return;
    init_advice();
    if (madv < 0 && !nfiles) return;
    int saved = errno;
    int m = madv, f;
    struct stat st;
    if (nfiles) {
        if (fstat(fd, &st) == 0) advice_for(&st, &f, &m);
    }
    if (m >= 0) madvise(p, len, m);
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
