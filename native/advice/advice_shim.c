/* LD_PRELOAD shim: give regular files an unmodified program opens or maps a kernel
 * read-ahead advice, so the kernel's own strategies (no read-ahead, sequential) can be
 * measured on, and planned for, programs that never call fadvise/madvise themselves;
 * and, for `pagecast run --plan`, run the per-read part of a plan inside the program.
 *
 *   PAGECAST_ADVICE=random|sequential|normal          every regular file
 *   PAGECAST_ADVICE_FILES=A:DEV:INO[:FIRST:PAGES:B][,...]
 *                                                     only these files (A: r, s, n, or l:
 *                                                     sequential read in large folios), by
 *                                                     st_dev and st_ino; wins over the above.
 *                                                     With a span: a mapping gets A on file
 *                                                     pages [FIRST, FIRST+PAGES) only, B on
 *                                                     the rest (a weights file read in order
 *                                                     beside a table read by lookups)
 *   PAGECAST_EXTENT_FILES=DEV:INO:NPAGES:DEGREE:MAXPAGES[,...]
 *                                                     the `extent` policy on these files
 *   PAGECAST_FEEDBACK=PATH                            the launcher's feedback segment
 *                                                     (launch/feedback.h)
 *   PAGECAST_OBJECT_FILES=DEV:INO:PAGES:ALIGN[:n][,...]
 *                                                     mapped files read as objects of PAGES
 *                                                     pages at ALIGN + k * PAGES; `:n`: a
 *                                                     page faulted again after reclaim gets
 *                                                     the kernel's read-around, not one page
 *
 * The per-file forms are what `pagecast run --plan` sets: a plan's advice is per file, and
 * a file is named by (device, inode) because a path can be spelt many ways (relative,
 * symlinks) and the launcher has already checked that inode is the recorded file.
 *
 * open*()  -> posix_fadvise(fd, 0, 0, advice)       (read()/pread() read-ahead of that open file)
 * mmap*()  -> madvise(addr, len, advice) for file-backed mappings (fault read-around)
 * read(), pread() on an `extent` file -> after the program's read returns, posix_fadvise
 *             WILLNEED of the next DEGREE pages per page read of the file (from the first
 *             page read on, wrapping), until every page was named once: the policy of
 *             src/pagecast/policies/extent.py, one event per page a read covers. Files of
 *             more than MAXPAGES pages are not objects and are left alone, as there.
 * read(), pread() on a feedback file -> each page read is marked and counted once, inside
 *             or outside the plan's ranges; mmap of it sets its `mapped` flag.
 * mmap() of an object file (readable, not MAP_FIXED) -> mapped with no access and read-ahead
 *             off (kept with `:n`); the first touch of an object faults (SIGSEGV, caught here): the whole
 *             object is asked of the page cache at once (MADV_WILLNEED) and made accessible
 *             with the program's protection, and the access resumes and waits only for its
 *             own page. One signal per object instead of a read-around window (read_ahead_kb,
 *             often far larger than the object) or a read per page (read-ahead off). A
 *             SIGSEGV outside those mappings goes to the disposition the program had when it
 *             mapped the file (the default: the program dies as it would have); a program
 *             that installs its own SIGSEGV handler afterwards replaces this one, and its
 *             object mappings then fault into it: plan `objects` only for programs that do not.
 *
 * The dynamic loader maps shared libraries with its own internal calls, which a preload
 * cannot see: libraries keep the default read-around. Reads inside libc (fread), file
 * descriptors made by fcntl(F_DUPFD) or numbered FD_TRACKED and above are not seen either. Nothing else changes:
 * return values and errno are the program's, and a read is never delayed by what the shim
 * does for it (that follows the read). Children inherit the variables and the shim. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "launch/feedback.h"
#include "open_mode.h"

#define FD_TRACKED 4096 /* fds below this are looked up in a table; a program's files are */

static int fadv = -1, madv = -1; /* -2: no global advice */

struct file_advice {
    dev_t dev;
    ino_t ino;
    int fadv, madv;
    long long first, pages; /* pages > 0: madv on this span of the file only */
    int other;              /* the rest of a mapping's advice, with a span */
};
static struct file_advice *files;
static size_t nfiles;

struct extent_file {
    dev_t dev;
    ino_t ino;
    int64_t npages, degree, max_pages;
    int64_t start, done; /* the policy's cursor: first page read (-1: untouched), pages named */
    int lock;
};
static struct extent_file *extents;
static size_t nextents;

struct object_file {
    dev_t dev;
    ino_t ino;
    int64_t pages, align;
    int refault_readaround; /* under a memory limit: an object's pages come back after reclaim */
};
static struct object_file *objfiles;
static size_t nobjfiles;

/* Mappings of object files not yet unmapped; the SIGSEGV handler only reads them. */
#define MAX_OBJECT_MAPS 256
struct object_map {
    uintptr_t start, end;
    int64_t first_page; /* file page at start */
    int64_t pages, align;
    int prot, live;
};
static struct object_map objmaps[MAX_OBJECT_MAPS];
static int nobjmaps, objmap_lock;
static struct sigaction prev_segv;

static struct pcf_header *seg; /* feedback segment, or NULL */

/* fd -> (feedback slot + 1) | (extent slot + 1) << 16; 0: nothing to do on its reads */
static uint32_t fdinfo[FD_TRACKED];

static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Not an madvise value: MADV_SEQUENTIAL with MADV_HUGEPAGE beside it (letter `l`). A fault in
 * a mapping advised sequential alone reads ahead in single pages; with MADV_HUGEPAGE the
 * kernel's fault path reads large folios first: a scan beside a locked keep set in a memory
 * cgroup ran 3.2x faster a pass (benchmarks/seq_large_folios.py, Linux 6.18). */
#define MADV_SEQUENTIAL_LARGE (-100)

static void apply_madvise(void *p, size_t len, int m) {
    if (m == MADV_SEQUENTIAL_LARGE) {
        madvise(p, len, MADV_SEQUENTIAL);
        madvise(p, len, MADV_HUGEPAGE); /* refused where THP is off: the advice above stands */
    } else
        madvise(p, len, m);
}

/* Whether an advice value asks for an madvise (-1, -2: none given). */
static int has_madvise(int m) {
    return m >= 0 || m == MADV_SEQUENTIAL_LARGE;
}

static int parse_advice(const char *a, int *f, int *m) {
    if (!strcmp(a, "l")) {
        *f = POSIX_FADV_SEQUENTIAL;
        *m = MADV_SEQUENTIAL_LARGE;
    } else if (!strcmp(a, "random") || !strcmp(a, "r")) {
        *f = POSIX_FADV_RANDOM;
        *m = MADV_RANDOM;
    } else if (!strcmp(a, "sequential") || !strcmp(a, "s")) {
        *f = POSIX_FADV_SEQUENTIAL;
        *m = MADV_SEQUENTIAL;
    } else if (!strcmp(a, "normal") || !strcmp(a, "n")) {
        *f = POSIX_FADV_NORMAL;
        *m = MADV_NORMAL;
    } else
        return -1;
    return 0;
}

static size_t count_items(const char *list) {
    size_t n = 1;
    for (const char *p = list; *p; p++) n += *p == ',';
    return n;
}

/* The item after p's in a comma-separated list; NULL after the last. */
static const char *next_item(const char *p) {
    const char *c = strchr(p, ',');
    return c ? c + 1 : NULL;
}

/* PAGECAST_ADVICE_FILES: malformed entries are skipped (the program must run regardless) */
static void parse_files(const char *list) {
    files = calloc(count_items(list), sizeof *files);
    if (!files) return;
    for (const char *p = list; p && *p; p = next_item(p)) {
        char a[2] = {*p, 0};
        unsigned long long dev, ino;
        struct file_advice fa = {0};
        long long first = 0, pages = 0;
        char b[2] = {0, 0};
        int got = p[1] == ':' ? sscanf(p + 2, "%llu:%llu:%lld:%lld:%c", &dev, &ino, &first, &pages, b) : 0;
        if (got >= 2 && parse_advice(a, &fa.fadv, &fa.madv) == 0) {
            int unused;
            fa.dev = (dev_t)dev;
            fa.ino = (ino_t)ino;
            if (got == 5 && first >= 0 && pages > 0 && parse_advice(b, &unused, &fa.other) == 0) {
                fa.first = first;
                fa.pages = pages;
            }
            files[nfiles++] = fa;
        }
    }
}

static void parse_extents(const char *list) {
    extents = calloc(count_items(list), sizeof *extents);
    if (!extents) return;
    for (const char *p = list; p && *p; p = next_item(p)) {
        unsigned long long dev, ino;
        long long np, deg, maxp;
        if (sscanf(p, "%llu:%llu:%lld:%lld:%lld", &dev, &ino, &np, &deg, &maxp) == 5 && np >= 0 && deg > 0 &&
            maxp > 0) {
            struct extent_file *e = &extents[nextents++];
            e->dev = (dev_t)dev;
            e->ino = (ino_t)ino;
            e->npages = np;
            e->degree = deg;
            e->max_pages = maxp;
            e->start = -1;
        }
    }
}

static void parse_objects(const char *list) {
    objfiles = calloc(count_items(list), sizeof *objfiles);
    if (!objfiles) return;
    for (const char *p = list; p && *p; p = next_item(p)) {
        unsigned long long dev, ino;
        long long pages, align;
        char mode = 0;
        int got = sscanf(p, "%llu:%llu:%lld:%lld:%c", &dev, &ino, &pages, &align, &mode);
        if (got >= 4 && pages > 0 && align >= 0)
            objfiles[nobjfiles++] = (struct object_file){(dev_t)dev, (ino_t)ino, pages, align % pages, mode == 'n'};
    }
}

/* Map the feedback segment. Raw system calls: the shim's own open/mmap are the wrappers below. */
static void attach_feedback(const char *path) {
    /* the launcher made it with mkostemp: never a link, a FIFO or another user's file */
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return; /* the prefetcher has finished and removed it: nothing left to judge */
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        st.st_size >= (off_t)sizeof(struct pcf_header)) {
        void *p = (void *)syscall(SYS_mmap, NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        struct pcf_header *h = p;
        if (p != MAP_FAILED && h->magic == PCF_MAGIC && h->version == PCF_VERSION && h->size == (uint64_t)st.st_size &&
            sizeof *h + (uint64_t)h->nfiles * sizeof h->files[0] <= h->size)
            seg = h;
        else if (p != MAP_FAILED)
            syscall(SYS_munmap, p, (size_t)st.st_size);
    }
    syscall(SYS_close, fd);
}

static void init_once(void) {
    int saved = errno;
    const char *a = getenv("PAGECAST_ADVICE");
    if (!a || parse_advice(a, &fadv, &madv) < 0) {
        fadv = -2;
        madv = -2;
    }
    const char *list = getenv("PAGECAST_ADVICE_FILES");
    if (list && *list) parse_files(list);
    list = getenv("PAGECAST_EXTENT_FILES");
    if (list && *list) parse_extents(list);
    list = getenv("PAGECAST_FEEDBACK");
    if (list && *list) attach_feedback(list);
    list = getenv("PAGECAST_OBJECT_FILES");
    if (list && *list) parse_objects(list);
    errno = saved;
}

static void init_advice(void) {
    pthread_once(&once, init_once);
}

static int per_file(void) {
    return nfiles || nextents || seg || nobjfiles;
}

/* The advice for this file: its own entry, else the global one (-2: none); its entry or NULL. */
static const struct file_advice *advice_for(const struct stat *st, int *f, int *m) {
    *f = fadv;
    *m = madv;
    for (size_t i = 0; i < nfiles; i++)
        if (files[i].dev == st->st_dev && files[i].ino == st->st_ino) {
            *f = files[i].fadv;
            *m = files[i].madv;
            return &files[i];
        }
    return NULL;
}

/* A mapping of file bytes [off, off + len) at p: the span's advice on its part, the other on the rest. */
static void advise_span(char *p, size_t len, off_t off, const struct file_advice *fa) {
    long long page = sysconf(_SC_PAGESIZE);
    long long lo = fa->first * page, hi = (fa->first + fa->pages) * page;
    long long s = lo > (long long)off ? lo : (long long)off;
    long long e = hi < (long long)off + (long long)len ? hi : (long long)off + (long long)len;
    apply_madvise(p, len, fa->other);
    if (s < e) apply_madvise(p + (s - off), (size_t)(e - s), fa->madv);
}

static int feedback_slot(const struct stat *st) {
    for (uint32_t i = 0; seg && i < seg->nfiles; i++)
        if (seg->files[i].dev == (uint64_t)st->st_dev && seg->files[i].ino == (uint64_t)st->st_ino) return (int)i;
    return -1;
}

static int extent_slot(const struct stat *st) {
    for (size_t i = 0; i < nextents; i++)
        if (extents[i].dev == st->st_dev && extents[i].ino == st->st_ino) return (int)i;
    return -1;
}

/* Advise a descriptor an open just returned; returns it unchanged (an error stays one). */
static int advise_fd(int fd) {
    if (fd < 0) return fd;
    init_advice();
    if (fd < FD_TRACKED) __atomic_store_n(&fdinfo[fd], 0, __ATOMIC_RELAXED);
    if (fadv < 0 && !per_file()) return fd;
    int saved = errno;
    struct stat st;
    int f, m;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        advice_for(&st, &f, &m);
        if (f >= 0) posix_fadvise(fd, 0, 0, f);
        int fb = feedback_slot(&st), ex = extent_slot(&st);
        if (fd < FD_TRACKED && (fb >= 0 || ex >= 0))
            __atomic_store_n(&fdinfo[fd], (uint32_t)(fb + 1) | (uint32_t)(ex + 1) << 16, __ATOMIC_RELAXED);
    }
    errno = saved;
    return fd;
}

static void advise_map(void *p, size_t len, int flags, int fd, off_t off) {
    if (p == MAP_FAILED || fd < 0 || (flags & MAP_ANONYMOUS)) return;
    init_advice();
    if (!has_madvise(madv) && !per_file()) return;
    int saved = errno;
    int m = madv, f;
    struct stat st;
    const struct file_advice *fa = NULL;
    if (per_file() && fstat(fd, &st) == 0) {
        fa = advice_for(&st, &f, &m);
        int fb = feedback_slot(&st);
        if (fb >= 0) __atomic_store_n(&seg->files[fb].mapped, 1, __ATOMIC_RELAXED);
    }
    if (fa && fa->pages > 0)
        advise_span(p, len, off, fa);
    else if (has_madvise(m))
        apply_madvise(p, len, m);
    errno = saved;
}

/* Count each page of a read once, as inside or outside the plan's ranges. */
static void feedback_read(struct pcf_file *f, int64_t first, int64_t last) {
    unsigned char *base = (unsigned char *)seg;
    unsigned char *planned = base + f->planned_off, *seen = base + f->seen_off;
    if (last >= f->npages) last = f->npages - 1;
    int64_t in = 0, out = 0;
    for (int64_t p = first; p <= last; p++) {
        unsigned char bit = (unsigned char)(1u << (p & 7));
        if (__atomic_fetch_or(&seen[p >> 3], bit, __ATOMIC_RELAXED) & bit) continue;
        if (pcf_test(planned, p))
            in++;
        else
            out++;
    }
    __atomic_fetch_add(&f->reads, 1, __ATOMIC_RELAXED);
    if (in) __atomic_fetch_add(&f->pages_in, in, __ATOMIC_RELAXED);
    if (out) __atomic_fetch_add(&f->pages_out, out, __ATOMIC_RELAXED);
}

/* The extent policy: DEGREE pages named per page read, from the first page read on. */
static void extent_read(int fd, struct extent_file *e, int64_t first, int64_t last) {
    int64_t size = e->npages;
    if (size <= 0 || size > e->max_pages) return;
    while (__atomic_test_and_set(&e->lock, __ATOMIC_ACQUIRE));
    if (e->start < 0) {
        e->start = first % size;
        e->done = 1; /* the page read itself */
    }
    int64_t from = e->done, n = (last - first + 1) * e->degree;
    if (n > size - from) n = size - from;
    e->done += n;
    int64_t start = e->start;
    __atomic_clear(&e->lock, __ATOMIC_RELEASE);
    if (n <= 0) return;
    int64_t a = (start + from) % size, head = n < size - a ? n : size - a;
    posix_fadvise(fd, (off_t)a * PCF_PAGE, (off_t)head * PCF_PAGE, POSIX_FADV_WILLNEED);
    if (n > head) posix_fadvise(fd, 0, (off_t)(n - head) * PCF_PAGE, POSIX_FADV_WILLNEED);
}

/* After a read of len bytes at off returned: the shim's part, which the read never waits for. */
static void after_read(int fd, off_t off, ssize_t len) {
    if (len <= 0 || fd < 0 || fd >= FD_TRACKED || off < 0) return;
    uint32_t info = __atomic_load_n(&fdinfo[fd], __ATOMIC_RELAXED);
    if (!info) return;
    int saved = errno;
    int64_t first = off / PCF_PAGE, last = (off + len - 1) / PCF_PAGE;
    if ((info & 0xFFFF) && seg) feedback_read(&seg->files[(info & 0xFFFF) - 1], first, last);
    if (info >> 16) extent_read(fd, &extents[(info >> 16) - 1], first, last);
    errno = saved;
}

static off_t position_after(int fd, ssize_t r) {
    if (r <= 0 || fd < 0 || fd >= FD_TRACKED || !__atomic_load_n(&fdinfo[fd], __ATOMIC_RELAXED)) return -1;
    int saved = errno;
    off_t end = lseek(fd, 0, SEEK_CUR);
    errno = saved;
    return end < r ? -1 : end - r;
}

#define NEXT(name)                                                                                                     \
    static __typeof__(name) *real;                                                                                     \
    if (!real) real = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

int open(const char *path, int flags, ...) {
    PC_OPEN_MODE(m, flags);
    NEXT(open);
    return advise_fd(real(path, flags, m));
}

int open64(const char *path, int flags, ...) {
    PC_OPEN_MODE(m, flags);
    NEXT(open64);
    return advise_fd(real(path, flags, m));
}

int openat(int dir, const char *path, int flags, ...) {
    PC_OPEN_MODE(m, flags);
    NEXT(openat);
    return advise_fd(real(dir, path, flags, m));
}

int openat64(int dir, const char *path, int flags, ...) {
    PC_OPEN_MODE(m, flags);
    NEXT(openat64);
    return advise_fd(real(dir, path, flags, m));
}

int close(int fd) {
    NEXT(close);
    if (fd >= 0 && fd < FD_TRACKED) __atomic_store_n(&fdinfo[fd], 0, __ATOMIC_RELAXED);
    return real(fd);
}

/* A duplicate names the same open file: it inherits what the shim knows of it (dd, for
 * one, opens its input and dup2()s it onto fd 0). */
static int copy_info(int from, int to) {
    if (to >= 0 && to < FD_TRACKED)
        __atomic_store_n(&fdinfo[to],
                         from >= 0 && from < FD_TRACKED ? __atomic_load_n(&fdinfo[from], __ATOMIC_RELAXED) : 0,
                         __ATOMIC_RELAXED);
    return to;
}

int dup(int fd) {
    NEXT(dup);
    return copy_info(fd, real(fd));
}

int dup2(int fd, int to) {
    NEXT(dup2);
    return copy_info(fd, real(fd, to));
}

int dup3(int fd, int to, int flags) {
    NEXT(dup3);
    return copy_info(fd, real(fd, to, flags));
}

ssize_t read(int fd, void *buf, size_t n) {
    NEXT(read);
    ssize_t r = real(fd, buf, n);
    after_read(fd, position_after(fd, r), r);
    return r;
}

ssize_t readv(int fd, const struct iovec *iov, int cnt) {
    NEXT(readv);
    ssize_t r = real(fd, iov, cnt);
    after_read(fd, position_after(fd, r), r);
    return r;
}

ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    NEXT(pread);
    ssize_t r = real(fd, buf, n, off);
    after_read(fd, off, r);
    return r;
}

ssize_t pread64(int fd, void *buf, size_t n, off64_t off) {
    NEXT(pread64);
    ssize_t r = real(fd, buf, n, off);
    after_read(fd, off, r);
    return r;
}

ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off) {
    NEXT(preadv);
    ssize_t r = real(fd, iov, cnt, off);
    after_read(fd, off, r);
    return r;
}

/* The first touch of an object: fetch it whole, then let the access resume. Only system
 * calls (async-signal-safe) and reads of objmaps. */
static void on_segv(int sig, siginfo_t *si, void *uc) {
    uintptr_t a = (uintptr_t)si->si_addr;
    int n = __atomic_load_n(&nobjmaps, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        struct object_map *m = &objmaps[i];
        if (!__atomic_load_n(&m->live, __ATOMIC_ACQUIRE) || a < m->start || a >= m->end) continue;
        int64_t page = m->first_page + (int64_t)((a - m->start) / PCF_PAGE);
        int64_t lo = page < m->align ? 0 : m->align + (page - m->align) / m->pages * m->pages;
        int64_t hi = page < m->align ? m->align : lo + m->pages;
        uintptr_t s = m->start + (uintptr_t)((lo > m->first_page ? lo : m->first_page) - m->first_page) * PCF_PAGE;
        uintptr_t e = m->start + (uintptr_t)(hi - m->first_page) * PCF_PAGE;
        if (e > m->end || e < s) e = m->end;
        int saved = errno;
        madvise((void *)s, e - s, MADV_WILLNEED);
        int r = mprotect((void *)s, e - s, m->prot);
        errno = saved;
        if (r == 0) return; /* the access runs again, now allowed */
        break;
    }
    /* not an object's first touch: what the program had */
    if ((prev_segv.sa_flags & SA_SIGINFO) && prev_segv.sa_sigaction) {
        prev_segv.sa_sigaction(sig, si, uc);
    } else if (prev_segv.sa_handler != SIG_DFL && prev_segv.sa_handler != SIG_IGN && prev_segv.sa_handler) {
        prev_segv.sa_handler(sig);
    } else {
        signal(SIGSEGV, SIG_DFL); /* the faulting access runs again and the program dies of it */
    }
}

static int object_slot(int fd) {
    struct stat st;
    if (!nobjfiles || fstat(fd, &st) != 0) return -1;
    for (size_t i = 0; i < nobjfiles; i++)
        if (objfiles[i].dev == st.st_dev && objfiles[i].ino == st.st_ino) return (int)i;
    return -1;
}

/* mmap of an object file: mapped with no access (the first touch of each object faults
 * into on_segv) and read-ahead off. -1: not an object mapping, map as asked. */
static void *map_objects(void *addr, size_t len, int prot, int flags, int fd, off_t off,
                         void *(*real)(void *, size_t, int, int, int, off_t)) {
    if (fd < 0 || (flags & (MAP_ANONYMOUS | MAP_FIXED)) || !(prot & PROT_READ) || off % PCF_PAGE) return MAP_FAILED;
    init_advice();
    int saved = errno, slot = object_slot(fd);
    errno = saved;
    if (slot < 0) return MAP_FAILED;
    while (__atomic_test_and_set(&objmap_lock, __ATOMIC_ACQUIRE));
    void *p = MAP_FAILED;
    if (nobjmaps < MAX_OBJECT_MAPS) {
        if (nobjmaps == 0) {
            struct sigaction sa = {.sa_sigaction = on_segv, .sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER};
            sigemptyset(&sa.sa_mask);
            sigaction(SIGSEGV, &sa, &prev_segv);
        }
        p = real(addr, len, PROT_NONE, flags, fd, off);
        if (p != MAP_FAILED) {
            /* read-ahead off: a first touch reads its object, not a window around it; where
             * reclaim takes objects back (a memory limit), one page a refault costs more than
             * the window */
            if (!objfiles[slot].refault_readaround) madvise(p, len, MADV_RANDOM);
            struct object_map *m = &objmaps[nobjmaps];
            *m = (struct object_map){
                (uintptr_t)p, (uintptr_t)p + len, off / PCF_PAGE, objfiles[slot].pages, objfiles[slot].align, prot, 1};
            __atomic_store_n(&nobjmaps, nobjmaps + 1, __ATOMIC_RELEASE);
        }
        errno = saved;
    }
    __atomic_clear(&objmap_lock, __ATOMIC_RELEASE);
    return p;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    NEXT(mmap);
    void *p = map_objects(addr, len, prot, flags, fd, off, real);
    if (p != MAP_FAILED) return p;
    p = real(addr, len, prot, flags, fd, off);
    advise_map(p, len, flags, fd, off);
    return p;
}

int munmap(void *addr, size_t len) {
    NEXT(munmap);
    uintptr_t a = (uintptr_t)addr;
    for (int i = 0; i < __atomic_load_n(&nobjmaps, __ATOMIC_ACQUIRE); i++)
        if (objmaps[i].start >= a && objmaps[i].end <= a + len) __atomic_store_n(&objmaps[i].live, 0, __ATOMIC_RELEASE);
    return real(addr, len);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off) {
    NEXT(mmap64);
    void *p = map_objects(addr, len, prot, flags, fd, off, real);
    if (p != MAP_FAILED) return p;
    p = real(addr, len, prot, flags, fd, off);
    advise_map(p, len, flags, fd, off);
    return p;
}
