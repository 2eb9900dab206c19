/* pagecast userfaultfd pager core. See pager.h and docs/pager.md.
 *
 * Design in brief:
 *  - The region is anonymous private memory registered with userfaultfd (MISSING covers
 *    anonymous memory, not regular-file mappings); pages are filled from the backing
 *    file with UFFDIO_COPY.
 *  - Dirtiness: pages are installed write-protected (UFFDIO_COPY_MODE_WP); the first
 *    write takes a WP fault, which marks the page dirty and lifts the protection. A page
 *    first touched by a write is installed writable and dirty at once (one fault, not two).
 *  - Eviction: CLOCK over the resident pages in arrival order. User space cannot see
 *    read accesses to a mapped page (no accessed bit without idle-page tracking), so the
 *    reference bit is set by the accesses the pager does see: a write (WP fault). Clean
 *    pages therefore go first in FIFO order and written pages get a second chance, which
 *    also saves write-backs. On a monotone stream FIFO is what LRU would do anyway.
 *  - Write-back: a dirty victim is write-protected first (writers then block in a WP
 *    fault), the bytes that differ from its twin (its copy from when it became dirty)
 *    written with pwrite, then dropped with MADV_DONTNEED; a blocked writer's fault is
 *    later served as a missing write fault from the written-back file. Writing only the
 *    changed bytes leaves what other writers put in the file alone.
 *  - One handler thread per region serves every fault under the region lock; prefetched
 *    pages are copied before the demanded page, whose copy wakes the faulting thread, so
 *    a batch is visible all at once (one fault per batch window).
 */
#define _GNU_SOURCE
#include "pager.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

#define ST_RES 1u
#define ST_DIRTY 2u
#define ST_REF 4u
#define ST_PF 8u   /* prefetched, no access observed yet */
#define ST_PIN 16u /* part of the batch being installed: not a victim */

#define NSAMPLES (1u << 20)
#define MAXMSG 64

struct pgr_region {
    uint8_t *base;
    uint64_t len, npages, ps;
    uint64_t file_offset;
    uint64_t valid_end; /* file offset of the end of mapped file data at open */
    int fd;
    int uffd;
    int stop_pipe[2];
    pthread_t thr;
    int thr_started;
    pthread_mutex_t mu;
    pgr_config cfg;
    char path[PATH_MAX];
    char learn_path[PATH_MAX];
    uint8_t *state;
    int64_t *ring;
    uint64_t cap, fill, hand;
    uint64_t *learned;
    uint64_t nwords;
    uint64_t *tab_off;
    int64_t *tab_pages;
    int64_t last_fault, last_delta, stride;
    uint8_t *buf;     /* staging for one batch */
    uint8_t *dbuf;    /* staging for the demanded page */
    int64_t *batch;   /* pages of the current batch */
    pgr_log_rec *log; /* records of the current batch */
    uint64_t nlog, logcap;
    uint32_t *samples;
    int64_t t0;
    int64_t pending_wake; /* page whose faulting thread is woken after timing */
    int wp;
    int shrink_warned;
    pgr_stats st;
    /* page pack (pgr_pack_start) */
    int pack_efd;         /* the loader's end-of-stream signal to the handler */
    struct pgr_pack *pack;
    int32_t *pack_pos;    /* region page -> its position j in the pack; -2-j once mapped (by anyone); -1 not in it */
    struct deferred *dfr; /* faults waiting for the loader */
    uint64_t ndfr, dfrcap;
    int miss_io;          /* demand reads in flight (futex): loaders hold their next read meanwhile */
    /* Write-back regions: the page as it was when it became dirty ("twin", one per ring
     * slot), so a write-back writes only the bytes the program changed and never
     * overwrites what another writer put in the file meanwhile. */
    uint8_t *twins;       /* cap pages (NORESERVE: only dirty pages' twins are touched) */
    uint32_t *slot;       /* page -> its ring slot */
    uint8_t *wbuf, *ebuf; /* snapshot + file page scratch: write_back under mu / emergency */
    pid_t owner;          /* the process that opened the region (a forked child is not) */
};

struct deferred {
    int64_t page;
    int write, tid;
};

#define PACK_MAX_THREADS 8

struct pgr_pack {
    int fd;
    int dfd;         /* the same file opened O_DIRECT (-1: not supported here, read through the page cache) */
    uint64_t n, block, data_off, nblocks, chunk; /* chunk: blocks per read after the first */
    int64_t *rpage;  /* pack position -> region page, -1 outside the region */
    uint64_t *sums;  /* per block */
    uint8_t *buf[PACK_MAX_THREADS];
    uint64_t next_chunk; /* chunks are claimed in order by the loader threads (atomic) */
    uint64_t hi;     /* end of the furthest chunk claimed (under r->mu) */
    uint64_t claimed; /* pages claimed for installing so far (under r->mu; stop_after) */
    uint64_t defer, stop_after;
    int stop;        /* set by pgr_close or by a thread that failed: the others stop too */
    int nthreads, live;
    pthread_t thr[PACK_MAX_THREADS];
    char why[200];   /* first failure */
    char path[PATH_MAX];
};

static int foreign(pgr_region *r);

/* Raw syscalls: when built into the LD_PRELOAD shim, mmap/munmap resolve to the shim's. */
static void *sys_mmap(void *addr, size_t len, int prot, int flags) {
    long r = syscall(SYS_mmap, addr, len, prot, flags, -1, 0);
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return MAP_FAILED;
    }
    return (void *)r;
}

static int sys_munmap(void *addr, size_t len) { return (int)syscall(SYS_munmap, addr, len); }

static __thread char g_err[512];

const char *pgr_last_error(void) { return g_err; }

static void set_err(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Errors seen by the handler thread go to stderr once each kind: the program keeps
 * running and the stats carry the count. */
static void handler_error(pgr_region *r, const char *what, int err) {
    r->st.errors++;
    if (r->st.errors <= 3)
        fprintf(stderr, "pagecast pager: %s: %s: %s\n", r->path, what, strerror(err));
}

static int uffd_create(int *features_out, char *why, size_t whylen) {
    /* Full mode first; an unprivileged process (vm.unprivileged_userfaultfd=0) may still
     * handle faults raised in user mode. */
    int flags[2] = {O_CLOEXEC | O_NONBLOCK, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY};
    int last = 0;
    for (int i = 0; i < 2; i++) {
        int fd = (int)syscall(SYS_userfaultfd, flags[i]);
        if (fd < 0) {
            last = errno;
            if (errno == ENOSYS) break;
            continue;
        }
        uint64_t want[2] = {UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_THREAD_ID, 0};
        for (int j = 0; j < 2; j++) {
            struct uffdio_api api = {.api = UFFD_API, .features = want[j]};
            if (ioctl(fd, UFFDIO_API, &api) == 0) {
                *features_out = (int)api.features;
                return fd;
            }
            last = errno;
            close(fd);
            fd = (int)syscall(SYS_userfaultfd, flags[i]);
            if (fd < 0) break;
        }
        if (fd >= 0) close(fd);
    }
    if (last == EPERM)
        snprintf(why, whylen,
                 "userfaultfd not permitted (%s): needs CAP_SYS_PTRACE, vm.unprivileged_userfaultfd=1, "
                 "or a seccomp policy that allows syscall %d",
                 strerror(last), (int)SYS_userfaultfd);
    else
        snprintf(why, whylen, "userfaultfd unavailable: %s", strerror(last));
    errno = last;
    return -1;
}

int pgr_probe(void) {
    int feat = 0;
    char why[400];
    int fd = uffd_create(&feat, why, sizeof why);
    if (fd < 0) {
        set_err("%s", why);
        return errno ? errno : EPERM;
    }
    close(fd);
    return 0;
}

/* ---- fault log --------------------------------------------------------------------- */

static void log_rec(pgr_region *r, int64_t t, int64_t page, int kind, int flags, int tid) {
    if (r->cfg.log_fd < 0) return;
    if (r->nlog == r->logcap) return; /* logcap bounds one batch; never reached */
    pgr_log_rec *x = &r->log[r->nlog++];
    x->t_ns = t - r->t0;
    x->page = (int64_t)(r->file_offset / r->ps) + page;
    x->kind = (uint8_t)kind;
    x->flags = (uint8_t)flags;
    x->pad = 0;
    x->tid = tid;
}

static void log_flush(pgr_region *r) {
    if (r->cfg.log_fd < 0 || r->nlog == 0) return;
    size_t n = r->nlog * sizeof(pgr_log_rec);
    const char *p = (const char *)r->log;
    while (n) {
        ssize_t w = write(r->cfg.log_fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            handler_error(r, "writing the fault log", errno);
            r->cfg.log_fd = -1;
            break;
        }
        p += w;
        n -= (size_t)w;
    }
    r->nlog = 0;
}

static int write_log_header(pgr_region *r) {
    pgr_log_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, PGR_LOG_MAGIC, 8);
    h.version = PGR_LOG_VERSION;
    h.page_size = (uint32_t)r->ps;
    h.file_offset = r->file_offset;
    h.length = r->len;
    h.t0_ns = r->t0;
    h.pid = getpid();
    h.policy = r->cfg.policy;
    h.budget_pages = r->cap;
    size_t pl = strnlen(r->path, sizeof h.path - 1);
    memcpy(h.path, r->path, pl);
    _Static_assert(sizeof(pgr_log_header) == PGR_LOG_HEADER, "log header size");
    _Static_assert(sizeof(pgr_log_rec) == 24, "log record size");
    return write(r->cfg.log_fd, &h, sizeof h) == (ssize_t)sizeof h ? 0 : -1;
}

/* ---- write-back and eviction ------------------------------------------------------- */

static int wp_range(pgr_region *r, uint64_t page, uint64_t n, int protect) {
    struct uffdio_writeprotect w = {
        .range = {.start = (uint64_t)(uintptr_t)(r->base + page * r->ps), .len = n * r->ps},
        .mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP : 0,
    };
    while (ioctl(r->uffd, UFFDIO_WRITEPROTECT, &w) < 0) {
        if (errno == EAGAIN) continue;
        return -1;
    }
    return 0;
}

#define NO_SLOT UINT32_MAX /* a page without a ring slot (not resident, or no room was found) */

static uint8_t *twin(pgr_region *r, uint64_t p) { return r->twins + (uint64_t)r->slot[p] * r->ps; }

/* Page p is about to become dirty: keep its bytes as they are now (src) to diff against. */
static void twin_set(pgr_region *r, uint64_t p, const uint8_t *src) {
    if (r->twins && r->slot[p] != NO_SLOT) memcpy(twin(r, p), src, r->ps);
}

static int pwrite_full(int fd, const uint8_t *src, size_t n, uint64_t off) {
    while (n) {
        ssize_t w = pwrite(fd, src, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        src += w;
        off += (uint64_t)w;
        n -= (size_t)w;
    }
    return 0;
}

/* First i' >= i with a[i'] != b[i'] (n if none): 64-byte blocks by memcmp (vectorised). */
static size_t skip_same(const uint8_t *a, const uint8_t *b, size_t i, size_t n) {
    while (i < n && (i & 63) && a[i] == b[i]) i++;
    while (i + 64 <= n && memcmp(a + i, b + i, 64) == 0) i += 64;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Runs of changed bytes written with one pwrite each up to this many; beyond, the file's
 * page is read, the changed bytes laid over it and the page written whole (two syscalls;
 * another writer's bytes written in between those two are overwritten, docs/pager.md). */
#define WB_MAX_RUNS 4

/* Write the bytes of snap[0, n) that differ from the twin of page p to the file at off. */
static int write_changed(pgr_region *r, uint64_t p, const uint8_t *snap, size_t n, uint64_t off, uint8_t *scratch) {
    const uint8_t *tw = twin(r, p);
    size_t lo[WB_MAX_RUNS], hi[WB_MAX_RUNS];
    int nr = 0;
    for (size_t i = skip_same(snap, tw, 0, n); i < n; i = skip_same(snap, tw, i, n)) {
        size_t j = i;
        while (j < n && snap[j] != tw[j]) j++;
        if (nr == WB_MAX_RUNS) {
            nr = -1;
            break;
        }
        lo[nr] = i;
        hi[nr++] = j;
        i = j;
    }
    if (nr >= 0) {
        for (int k = 0; k < nr; k++)
            if (pwrite_full(r->fd, snap + lo[k], hi[k] - lo[k], off + lo[k]) < 0) return -1;
        return 0;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(r->fd, scratch + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) break;
        got += (size_t)k;
    }
    if (got < n) n = got; /* the file shrank meanwhile: nothing past its end */
    for (size_t i = 0; i < n; i++)
        if (snap[i] != tw[i]) scratch[i] = snap[i];
    return pwrite_full(r->fd, scratch, n, off);
}

/* Write page `p` (resident) to the file, clamped to the file's current end (a page past a
 * shrunk end is skipped and counted, as the kernel discards it on truncate). Only the
 * bytes changed since the page was read (its twin) are written. `emergency`: from a
 * fatal-signal handler (its own scratch buffer). */
static int write_back(pgr_region *r, uint64_t p, int emergency) {
    uint64_t off = r->file_offset + p * r->ps;
    uint64_t end = off + r->ps;
    if (end > r->valid_end) end = r->valid_end;
    struct stat sb;
    if (fstat(r->fd, &sb) == 0 && (uint64_t)sb.st_size < end) {
        if ((uint64_t)sb.st_size < r->valid_end && !r->shrink_warned) {
            r->shrink_warned = 1;
            fprintf(stderr,
                    "pagecast pager: %s: file shrank to %lld bytes while mapped; dirty data past the "
                    "new end is discarded, as the kernel does on truncate\n",
                    r->path, (long long)sb.st_size);
        }
        if ((uint64_t)sb.st_size <= off) {
            r->st.writeback_skipped_eof++;
            return 0;
        }
        end = (uint64_t)sb.st_size;
    }
    if (end <= off) return 0;
    size_t n = end - off;
    if (r->slot[p] == NO_SLOT) { /* no twin (installed when no slot could be freed): the whole page */
        if (pwrite_full(r->fd, r->base + p * r->ps, n, off) < 0) return -1;
    } else {
        /* Write-protected while it is written (writeback regions need WP, pgr_open_fd), or
         * the handler is gone: the page is stable, and clean afterwards (its next write
         * takes a WP fault, which renews the twin). */
        if (write_changed(r, p, r->base + p * r->ps, n, off, emergency ? r->ebuf : r->wbuf) < 0) return -1;
    }
    r->st.writebacks++;
    return 0;
}

/* Make a dirty page clean: block writers, copy it out. The page stays resident. */
static int clean_page(pgr_region *r, uint64_t p) {
    if (r->wp && wp_range(r, p, 1, 1) < 0) return -1;
    if (write_back(r, p, 0) < 0) return -1;
    if (r->wp) r->state[p] &= (uint8_t)~ST_DIRTY;
    return 0;
}

static int needs_writeback(pgr_region *r, uint64_t p) {
    return r->cfg.writeback && (r->state[p] & ST_DIRTY);
}

static int evict(pgr_region *r, uint64_t p, int64_t t) {
    int dirty = needs_writeback(r, p);
    if (dirty && clean_page(r, p) < 0) {
        /* Keeping the page is the only way not to lose its data. */
        handler_error(r, "write-back failed; page kept resident", errno);
        return -1;
    }
    if (madvise(r->base + p * r->ps, r->ps, MADV_DONTNEED) < 0) {
        handler_error(r, "madvise(MADV_DONTNEED)", errno);
        return -1;
    }
    if (r->state[p] & ST_PF) r->st.prefetch_evicted_untouched++;
    r->state[p] = 0;
    if (r->slot) r->slot[p] = NO_SLOT;
    r->st.evictions++;
    r->st.resident--;
    log_rec(r, t, (int64_t)p, PGR_REC_EVICT, dirty ? PGR_RF_DIRTY : 0, -1);
    return 0;
}

/* Place page p in the CLOCK ring, evicting a victim if the budget is full. */
static int ring_insert(pgr_region *r, uint64_t p, int64_t t) {
    if (r->fill < r->cap) {
        if (r->slot) r->slot[p] = (uint32_t)r->fill;
        r->ring[r->fill++] = (int64_t)p;
        return 0;
    }
    for (uint64_t steps = 0; steps < 3 * r->cap + 3; steps++) {
        uint64_t h = r->hand;
        r->hand = (r->hand + 1) % r->cap;
        int64_t v = r->ring[h];
        /* A slot is free if its page is neither resident nor being installed (an install
         * that failed leaves such a slot behind). */
        if (v >= 0 && (r->state[v] & (ST_RES | ST_PIN))) {
            uint8_t s = r->state[v];
            if (s & ST_PIN) continue;
            if (s & ST_REF) {
                r->state[v] &= (uint8_t)~ST_REF;
                continue;
            }
            if (evict(r, (uint64_t)v, t) < 0) continue;
        }
        if (v >= 0 && r->slot && r->slot[v] == h) r->slot[v] = NO_SLOT; /* a page whose install failed */
        r->ring[h] = (int64_t)p;
        if (r->slot) r->slot[p] = (uint32_t)h;
        return 0;
    }
    errno = ENOMEM;
    return -1;
}

/* ---- prefetch policies ------------------------------------------------------------- */

static uint64_t policy_pages(pgr_region *r, uint64_t p, int64_t *out, uint64_t max) {
    uint64_t n = 0;
    int64_t np = (int64_t)r->npages;
    switch (r->cfg.policy) {
    case PGR_POLICY_NEXT:
        for (int64_t q = (int64_t)p + 1; q < np && n < max; q++) out[n++] = q;
        break;
    case PGR_POLICY_STRIDE: {
        int64_t d = (int64_t)p - r->last_fault;
        int hit = 0;
        if (r->last_fault >= 0) {
            if (r->stride && d && d % r->stride == 0 && d / r->stride > 0)
                hit = 1;
            else if (d && d == r->last_delta) {
                r->stride = d;
                hit = 1;
            }
            r->last_delta = d;
        }
        r->last_fault = (int64_t)p;
        if (hit)
            for (int64_t q = (int64_t)p + r->stride; q >= 0 && q < np && n < max; q += r->stride) out[n++] = q;
        break;
    }
    case PGR_POLICY_SPARSE: {
        /* The learned set in increasing order (the workload is monotone): next N members. */
        r->learned[p >> 6] |= 1ull << (p & 63);
        uint64_t q = p + 1;
        while (q < r->npages && n < max) {
            uint64_t w = r->learned[q >> 6] >> (q & 63);
            if (!w) {
                q = (q | 63) + 1;
                continue;
            }
            q += (uint64_t)__builtin_ctzll(w);
            if (q >= r->npages) break;
            out[n++] = (int64_t)q;
            q++;
        }
        break;
    }
    case PGR_POLICY_TABLE:
        if (r->tab_off)
            for (uint64_t i = r->tab_off[p]; i < r->tab_off[p + 1] && n < max; i++) out[n++] = r->tab_pages[i];
        break;
    default:
        break;
    }
    return n;
}

/* ---- serving faults ---------------------------------------------------------------- */

/* Bytes of file data behind page p now: ps, fewer at the end, 0 past a (shrunk) end. */
static ssize_t read_page(pgr_region *r, uint64_t p, uint8_t *dst, uint64_t npg) {
    uint64_t off = r->file_offset + p * r->ps;
    uint64_t want = npg * r->ps;
    uint64_t got = 0;
    if (off < r->valid_end) {
        uint64_t lim = r->valid_end - off;
        if (want > lim) want = lim;
        while (got < want) {
            ssize_t n = pread(r->fd, dst + got, want - got, (off_t)(off + got));
            if (n < 0) {
                if (errno == EINTR) continue;
                return -1;
            }
            if (n == 0) break;
            got += (uint64_t)n;
        }
    }
    memset(dst + got, 0, npg * r->ps - got);
    __atomic_fetch_add(&r->st.bytes_read, got, __ATOMIC_RELAXED);
    return (ssize_t)got;
}

static int copy_pages(pgr_region *r, uint64_t p, const uint8_t *src, uint64_t npg, int wp, int wake) {
    struct uffdio_copy c = {
        .dst = (uint64_t)(uintptr_t)(r->base + p * r->ps),
        .src = (uint64_t)(uintptr_t)src,
        .len = npg * r->ps,
        .mode = (wp && r->wp ? UFFDIO_COPY_MODE_WP : 0) | (wake ? 0 : UFFDIO_COPY_MODE_DONTWAKE),
    };
    __atomic_fetch_add(&r->st.copy_ioctls, 1, __ATOMIC_RELAXED); /* the pack loaders copy without the lock */
    for (;;) {
        if (ioctl(r->uffd, UFFDIO_COPY, &c) == 0) return 0;
        if (errno == EAGAIN && c.copy > 0) { /* partial copy: continue after it */
            c.dst += (uint64_t)c.copy;
            c.src += (uint64_t)c.copy;
            c.len -= (uint64_t)c.copy;
            c.copy = 0;
            continue;
        }
        if (errno == EAGAIN) continue;
        return -1;
    }
}

static void wake(pgr_region *r, uint64_t p) {
    struct uffdio_range rg = {.start = (uint64_t)(uintptr_t)(r->base + p * r->ps), .len = r->ps};
    ioctl(r->uffd, UFFDIO_WAKE, &rg);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void record_sample(pgr_region *r, int64_t t0) {
    int64_t dt = now_ns() - t0;
    r->samples[r->st.nsamples % NSAMPLES] = dt > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)dt;
    r->st.nsamples++;
    r->st.service_ns_total += (uint64_t)dt;
}

static void page_past_end(pgr_region *r, uint64_t p, int tid) {
    r->st.eof_faults++;
    if (r->st.eof_faults <= 3)
        fprintf(stderr,
                "pagecast pager: %s: access to page %llu past the end of the file (it shrank or the "
                "mapping is longer than the file)%s\n",
                r->path, (unsigned long long)(r->file_offset / r->ps + p),
                r->cfg.on_eof_sigbus ? ": SIGBUS, as with a kernel mapping" : ": served as zeros");
    if (r->cfg.on_eof_sigbus && tid > 0) syscall(SYS_tgkill, getpid(), tid, SIGBUS);
}

/* Start the I/O of the demanded page and its batch at once, so the disk works on them in
 * parallel while the reads wait for the first. Only touching pages are merged into one
 * request: measured here, merging across gaps (read-around style) read far more data and
 * was slower on the sparse workload than many small parallel requests. */
#define IO_GAP 1
static void start_io(pgr_region *r, uint64_t p, uint64_t n) {
    int64_t lo = (int64_t)p, hi = (int64_t)p;
    uint64_t i = 0;
    while (i < n && r->batch[i] < (int64_t)p) i++; /* batch is sorted; p splits it */
    /* pages below p first (policies such as table may name them), then p and above */
    int64_t a = -1, b = -1;
    for (uint64_t k = 0; k < i; k++) {
        int64_t q = r->batch[k];
        if (a >= 0 && q - b <= IO_GAP) {
            b = q;
            continue;
        }
        if (a >= 0)
            posix_fadvise(r->fd, (off_t)(r->file_offset + (uint64_t)a * r->ps), (off_t)((uint64_t)(b - a + 1) * r->ps), POSIX_FADV_WILLNEED);
        a = b = q;
    }
    if (a >= 0)
        posix_fadvise(r->fd, (off_t)(r->file_offset + (uint64_t)a * r->ps), (off_t)((uint64_t)(b - a + 1) * r->ps), POSIX_FADV_WILLNEED);
    for (uint64_t k = i; k < n; k++) {
        int64_t q = r->batch[k];
        if (q - hi <= IO_GAP) {
            hi = q;
            continue;
        }
        posix_fadvise(r->fd, (off_t)(r->file_offset + (uint64_t)lo * r->ps), (off_t)((uint64_t)(hi - lo + 1) * r->ps), POSIX_FADV_WILLNEED);
        lo = hi = q;
    }
    posix_fadvise(r->fd, (off_t)(r->file_offset + (uint64_t)lo * r->ps), (off_t)((uint64_t)(hi - lo + 1) * r->ps), POSIX_FADV_WILLNEED);
}

/* Read-ahead of the window after the batch (pages only, into the page cache): its I/O
 * overlaps the program's work on this batch, so the next fault finds its pages cached.
 * Only for policies whose next window is known without changing their state. */
static void lookahead_io(pgr_region *r, uint64_t last, uint64_t max) {
    if (r->cfg.policy == PGR_POLICY_NEXT) {
        uint64_t end = last + 1 + max < r->npages ? last + 1 + max : r->npages;
        if (end > last + 1)
            posix_fadvise(r->fd, (off_t)(r->file_offset + (last + 1) * r->ps), (off_t)((end - last - 1) * r->ps),
                          POSIX_FADV_WILLNEED);
        return;
    }
    if (r->cfg.policy != PGR_POLICY_SPARSE) return;
    uint64_t q = last + 1, k = 0;
    while (q < r->npages && k < max) {
        uint64_t w = r->learned[q >> 6] >> (q & 63);
        if (!w) {
            q = (q | 63) + 1;
            continue;
        }
        q += (uint64_t)__builtin_ctzll(w);
        if (q >= r->npages || r->file_offset + q * r->ps >= r->valid_end) break;
        if (!(r->state[q] & ST_RES))
            posix_fadvise(r->fd, (off_t)(r->file_offset + q * r->ps), (off_t)r->ps, POSIX_FADV_WILLNEED);
        q++;
        k++;
    }
}

static void serve_missing(pgr_region *r, uint64_t p, int write, int tid, int64_t t) {
    if (r->state[p] & ST_RES) { /* raced a batch (or another thread): it is there now */
        r->st.late_faults++;
        log_rec(r, t, (int64_t)p, PGR_REC_FAULT, (write ? PGR_RF_WRITE : 0) | PGR_RF_LATE, tid);
        if (write && r->wp && !(r->state[p] & ST_DIRTY)) {
            twin_set(r, p, r->base + p * r->ps); /* still write-protected: stable */
            r->state[p] |= ST_DIRTY | ST_REF;
            wp_range(r, p, 1, 0);
        } else {
            wake(r, p);
        }
        return;
    }
    /* A pack page just ahead of the loader: the loader maps it within a few hundred
     * microseconds (its UFFDIO_COPY wakes this thread); reading it from the file now would
     * queue a random read behind the pack's sequential stream. */
    if (r->pack && r->ndfr == r->dfrcap) { /* drop waiters the loader has woken already */
        uint64_t k = 0;
        for (uint64_t i = 0; i < r->ndfr; i++)
            if (!(r->state[r->dfr[i].page] & ST_RES)) r->dfr[k++] = r->dfr[i];
        r->ndfr = k;
    }
    /* A page the loader is copying right now (claimed, not yet resident) must wait for it:
     * a second UFFDIO_COPY would fail with EEXIST. */
    int loading = r->pack && r->st.pack_state == PGR_PACK_RUNNING;
    if (loading && r->ndfr < r->dfrcap &&
        ((r->state[p] & ST_PIN) ||
         (r->pack_pos[p] >= 0 && (uint64_t)r->pack_pos[p] < r->pack->hi + r->pack->defer))) {
        r->dfr[r->ndfr++] = (struct deferred){(int64_t)p, write, tid};
        r->st.pack_deferred++;
        log_rec(r, t, (int64_t)p, PGR_REC_FAULT, (write ? PGR_RF_WRITE : 0) | PGR_RF_PACK, tid);
        return;
    }
    /* Batch: prefetch candidates (in range, not resident, unique), at most budget-1. */
    uint64_t maxpf = (uint64_t)(r->cfg.depth > 0 ? r->cfg.depth : 0);
    if (maxpf > r->cap - 1) maxpf = r->cap - 1;
    uint64_t cand = policy_pages(r, p, r->batch, maxpf);
    uint64_t n = 0;
    r->state[p] |= ST_PIN;
    for (uint64_t i = 0; i < cand; i++) {
        int64_t q = r->batch[i];
        if (q < 0 || (uint64_t)q >= r->npages || (r->state[q] & (ST_RES | ST_PIN))) continue;
        if (r->file_offset + (uint64_t)q * r->ps >= r->valid_end) continue;
        r->state[q] |= ST_PIN;
        r->batch[n++] = q;
    }
    qsort(r->batch, n, sizeof(int64_t), cmp_i64);
    if (n) {
        start_io(r, p, n);
        lookahead_io(r, (uint64_t)r->batch[n - 1], maxpf);
    }

    /* The demanded page's data first: a file that shrank under the mapping shows here. */
    uint64_t off = r->file_offset + p * r->ps;
    uint64_t expect = off < r->valid_end ? (r->valid_end - off < r->ps ? r->valid_end - off : r->ps) : 0;
    /* The read runs without the lock, so pack loaders keep installing meanwhile: the page
     * is pinned (loaders skip it) and only this thread serves faults. While it is in
     * flight the loaders hold back their next read, so on a device that serves requests
     * in order the miss waits only for the loader reads already queued. */
    pthread_mutex_unlock(&r->mu);
    __atomic_fetch_add(&r->miss_io, 1, __ATOMIC_ACQ_REL);
    ssize_t got = read_page(r, p, r->dbuf, 1);
    int rd_errno = errno;
    if (__atomic_sub_fetch(&r->miss_io, 1, __ATOMIC_ACQ_REL) == 0 && r->pack)
        syscall(SYS_futex, &r->miss_io, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
    pthread_mutex_lock(&r->mu);
    errno = rd_errno;
    if (got < 0) {
        handler_error(r, "reading the backing file", errno);
        got = 0;
    }
    if (expect == 0 || (uint64_t)got < expect) {
        page_past_end(r, p, tid);
        if (r->cfg.on_eof_sigbus) {
            for (uint64_t i = 0; i < n; i++) r->state[r->batch[i]] &= (uint8_t)~ST_PIN;
            r->state[p] &= (uint8_t)~ST_PIN;
            wake(r, p);
            return;
        }
    }
    r->st.faults++;
    log_rec(r, t, (int64_t)p, PGR_REC_FAULT, write ? PGR_RF_WRITE : 0, tid);

    /* Room for the whole batch first, so no member can be a victim. */
    if (ring_insert(r, p, t) < 0) {
        handler_error(r, "no page could be evicted", errno);
    }
    uint64_t placed = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (ring_insert(r, (uint64_t)r->batch[i], t) < 0) {
            for (uint64_t k = i; k < n; k++) r->state[r->batch[k]] &= (uint8_t)~ST_PIN;
            break;
        }
        placed++;
    }
    n = placed;

    /* Prefetched pages: one pread and one UFFDIO_COPY per contiguous run, not woken. */
    for (uint64_t i = 0; i < n;) {
        uint64_t j = i + 1;
        while (j < n && r->batch[j] == r->batch[j - 1] + 1) j++;
        uint64_t q = (uint64_t)r->batch[i], run = j - i;
        ssize_t rd = read_page(r, q, r->buf, run);
        if (rd >= 0 && (uint64_t)rd < run * r->ps && r->file_offset + (q + run) * r->ps <= r->valid_end) {
            /* The file shrank: prefetch only pages that still have data behind them. */
            uint64_t keep = ((uint64_t)rd + r->ps - 1) / r->ps;
            for (uint64_t k = i + keep; k < j; k++) r->state[r->batch[k]] &= (uint8_t)~ST_PIN;
            if (!keep) {
                i = j;
                continue;
            }
            j = i + keep;
            run = keep;
        }
        if (rd < 0 || copy_pages(r, q, r->buf, run, 1, 0) < 0) {
            handler_error(r, "prefetch", errno);
            for (uint64_t k = i; k < j; k++) r->state[r->batch[k]] &= (uint8_t)~ST_PIN;
            i = j;
            continue;
        }
        for (uint64_t k = i; k < j; k++) {
            uint64_t s = (uint64_t)r->batch[k];
            r->state[s] = ST_RES | ST_PF | (r->wp ? 0 : ST_DIRTY);
            if (r->pack_pos && r->pack_pos[s] >= 0) r->pack_pos[s] = -2 - r->pack_pos[s];
            r->st.resident++;
            r->st.prefetched++;
            log_rec(r, t, (int64_t)s, PGR_REC_PREFETCH, 0, -1);
        }
        i = j;
    }
    for (uint64_t i = 0; i < n; i++) r->state[r->batch[i]] &= (uint8_t)~ST_PIN;

    /* The demanded page last: its copy wakes the faulting thread. A write fault installs
     * the page writable and already dirty (saves the WP fault). */
    if (copy_pages(r, p, r->dbuf, 1, !write, 0) < 0) {
        handler_error(r, "serving a fault", errno);
        r->state[p] &= (uint8_t)~ST_PIN;
        wake(r, p);
        return;
    }
    r->state[p] = ST_RES | ((write || !r->wp) ? ST_DIRTY : 0);
    if (write) twin_set(r, p, r->dbuf);
    /* once mapped, the file (maybe written back since) is the truth: the loader skips it */
    if (r->pack_pos && r->pack_pos[p] >= 0) r->pack_pos[p] = -2 - r->pack_pos[p];
    r->st.resident++;
    if (r->st.resident > r->st.max_resident) r->st.max_resident = r->st.resident;
    r->pending_wake = (int64_t)p;
}

static void serve_wp(pgr_region *r, uint64_t p, int tid, int64_t t) {
    if (!(r->state[p] & ST_RES)) { /* evicted while the writer waited */
        serve_missing(r, p, 1, tid, t);
        return;
    }
    r->st.wp_faults++;
    if (r->state[p] & ST_PF) r->st.prefetch_hits++;
    /* Only the first WP fault of a clean page: another thread's fault queued behind it
     * finds the page writable already (and maybe written). */
    if (!(r->state[p] & ST_DIRTY)) twin_set(r, p, r->base + p * r->ps); /* still write-protected: stable */
    r->state[p] = (uint8_t)((r->state[p] | ST_DIRTY | ST_REF) & ~ST_PF);
    log_rec(r, t, (int64_t)p, PGR_REC_FAULT, PGR_RF_WRITE | PGR_RF_WP, tid);
    if (wp_range(r, p, 1, 0) < 0) {
        handler_error(r, "lifting write protection", errno);
        wake(r, p);
    }
}

/* Write every dirty resident page back and write-protect it again (caller holds mu). */
static long flush_locked(pgr_region *r) {
    long n = 0;
    int bad = 0;
    for (uint64_t i = 0; i < r->fill; i++) { /* the ring holds every resident page */
        int64_t v = r->ring[i];
        if (v < 0) continue;
        uint64_t p = (uint64_t)v;
        if (!(r->state[p] & ST_RES) || !needs_writeback(r, p)) continue;
        if (clean_page(r, p) < 0)
            bad = 1;
        else
            n++;
    }
    return bad ? -1 : n;
}

/* The loader ended (done, stopped or failed): faults that waited for it and are still
 * missing are served from the file now (caller holds mu). */
static void serve_deferred(pgr_region *r) {
    for (uint64_t i = 0; i < r->ndfr; i++) {
        struct deferred d = r->dfr[i];
        int64_t t = now_ns();
        r->pending_wake = -1;
        if (r->state[d.page] & ST_RES)
            wake(r, (uint64_t)d.page);
        else
            serve_missing(r, (uint64_t)d.page, d.write, d.tid, t);
        log_flush(r);
        if (r->pending_wake >= 0) wake(r, (uint64_t)r->pending_wake);
    }
    r->ndfr = 0;
}

static void *handler_main(void *arg) {
    pgr_region *r = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    struct uffd_msg msgs[MAXMSG];
    struct pollfd pf[3] = {{.fd = r->uffd, .events = POLLIN}, {.fd = r->stop_pipe[0], .events = POLLIN},
                           {.fd = r->pack_efd, .events = POLLIN}};
    /* Periodic write-back bounds what a SIGKILL can lose (the kernel's dirty_expire does
     * the same for page-cache pages, which survive the process anyway). */
    int64_t period = (int64_t)(r->cfg.flush_ms > 0 ? r->cfg.flush_ms : 0) * 1000000LL;
    int64_t next_flush = period ? now_ns() + period : INT64_MAX;
    for (;;) {
        if (period && now_ns() >= next_flush) {
            pthread_mutex_lock(&r->mu);
            if (flush_locked(r) < 0) handler_error(r, "periodic write-back", errno);
            pthread_mutex_unlock(&r->mu);
            next_flush = now_ns() + period;
        }
        /* Read first: under a fault storm the next message is usually queued already. */
        ssize_t got = read(r->uffd, msgs, sizeof msgs);
        if (got < 0 && errno == EAGAIN) {
            int timeout = -1;
            if (period) {
                int64_t left = next_flush - now_ns();
                timeout = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
            }
            if (poll(pf, 3, timeout) < 0 && errno != EINTR) {
                handler_error(r, "poll", errno);
                break;
            }
            if (pf[1].revents) break;
            if (pf[2].revents) {
                uint64_t v;
                if (read(pf[2].fd, &v, sizeof v) < 0) { /* eventfd: a wake-up only */
                }
                pf[2].fd = -1; /* the loader signals once, at its end */
                pthread_mutex_lock(&r->mu);
                serve_deferred(r);
                pthread_mutex_unlock(&r->mu);
            }
            continue;
        }
        if (got < 0) {
            if (errno == EINTR) continue;
            handler_error(r, "reading userfaultfd", errno);
            break;
        }
        pthread_mutex_lock(&r->mu);
        for (size_t i = 0; i < (size_t)got / sizeof msgs[0]; i++) {
            struct uffd_msg *m = &msgs[i];
            if (m->event != UFFD_EVENT_PAGEFAULT) continue;
            int64_t t = now_ns();
            uint64_t a = m->arg.pagefault.address;
            uint64_t p = (a - (uint64_t)(uintptr_t)r->base) / r->ps;
            if (p >= r->npages) continue;
            int tid = (int)m->arg.pagefault.feat.ptid;
            uint64_t fl = m->arg.pagefault.flags;
            r->pending_wake = -1;
            if (fl & UFFD_PAGEFAULT_FLAG_WP)
                serve_wp(r, p, tid, t);
            else
                serve_missing(r, p, (fl & UFFD_PAGEFAULT_FLAG_WRITE) != 0, tid, t);
            /* Logged before the thread runs on, so a program that dies right after a fault
             * still has it in its log. Service time ends here: the wake-up hands the CPU to
             * the faulting thread, whose run would otherwise count as service. */
            log_flush(r);
            record_sample(r, t);
            if (r->pending_wake >= 0) wake(r, (uint64_t)r->pending_wake);
        }
        /* A fault deferred just as the loader ended: its eventfd may already be consumed. */
        if (r->ndfr && r->st.pack_state != PGR_PACK_RUNNING) serve_deferred(r);
        pthread_mutex_unlock(&r->mu);
    }
    return NULL;
}


/* ---- page pack: sequential cold start ------------------------------------------------ */

uint64_t pgr_pack_sum(const uint64_t *w, uint64_t nwords) {
    uint64_t h = nwords;
    for (uint64_t i = 0; i < nwords; i++) h += (w[i] ^ 0x9e3779b97f4a7c15ull) * (2 * i + 1);
    return h;
}

static int pread_full(int fd, void *dst, uint64_t n, uint64_t off) {
    uint64_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (uint8_t *)dst + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        got += (uint64_t)k;
    }
    return 0;
}

#define PACK_READ_BLOCKS 8   /* blocks per read after the first (PAGECAST_PAGER_PACK_CHUNK): 2 MiB */
#define PACK_LOCK_PAGES 16   /* pages claimed per hold of the region lock: faults interleave */

/* Chunk c of the pack: [start, end) positions. Chunk 0 is one block (latency), then
 * k->chunk blocks each; boundaries are block-aligned (checksums are per block). */
static int pack_chunk(const struct pgr_pack *k, uint64_t c, uint64_t *start, uint64_t *end) {
    uint64_t B = k->block;
    *start = c == 0 ? 0 : B + (c - 1) * k->chunk * B;
    *end = c == 0 ? B : *start + k->chunk * B;
    if (*end > k->n) *end = k->n;
    return *start < k->n;
}

/* Install pack positions [i, end) whose bytes are in buf. Pages are claimed under the
 * lock (ST_PIN + a ring slot), copied without it (so several loader threads and the fault
 * handler run at once), then marked resident under it. Returns 0, or -1 with k->why set. */
static int pack_install(pgr_region *r, uint64_t i, uint64_t end, const uint8_t *buf) {
    struct pgr_pack *k = r->pack;
    int64_t pg[PACK_LOCK_PAGES];
    uint64_t at[PACK_LOCK_PAGES], slot[PACK_LOCK_PAGES];
    int ok[PACK_LOCK_PAGES];
    for (uint64_t j = i; j < end;) {
        if (__atomic_load_n(&k->stop, __ATOMIC_ACQUIRE)) return -1;
        int64_t t = now_ns();
        int nc = 0, full = 0, hook = 0;
        pthread_mutex_lock(&r->mu);
        for (; j < end && nc < PACK_LOCK_PAGES; j++) {
            int64_t p = k->rpage[j];
            if (p < 0) continue; /* outside the region */
            if (r->pack_pos[p] == -2 - (int32_t)j) { /* the program faulted it in before the loader came */
                r->st.pack_skipped++;
                continue;
            }
            if (r->pack_pos[p] != (int32_t)j) continue; /* a duplicate */
            if (r->state[p] & (ST_RES | ST_PIN)) {
                r->st.pack_skipped++;
                r->pack_pos[p] = -2 - (int32_t)j;
                continue;
            }
            if (k->stop_after && k->claimed >= k->stop_after) {
                hook = 1;
                break;
            }
            if (r->fill >= r->cap) { /* never evict for the pack: it is a guess, resident pages are not */
                full = 1;
                break;
            }
            slot[nc] = r->fill;
            ring_insert(r, (uint64_t)p, t);
            r->state[p] |= ST_PIN;
            r->pack_pos[p] = -2 - (int32_t)j;
            k->claimed++;
            pg[nc] = p;
            at[nc++] = j;
        }
        pthread_mutex_unlock(&r->mu);
        /* write-protected like a prefetch; with wake, so a thread waiting on the page runs on */
        int err = 0;
        for (int c = 0; c < nc; c++) {
            ok[c] = copy_pages(r, (uint64_t)pg[c], buf + (at[c] - i) * r->ps, 1, 1, 1) == 0;
            if (!ok[c] && !err) err = errno;
        }
        pthread_mutex_lock(&r->mu);
        for (int c = 0; c < nc; c++) {
            int64_t p = pg[c];
            if (!ok[c]) {
                r->state[p] &= (uint8_t)~ST_PIN;
                r->ring[slot[c]] = -1;
                if (r->slot) r->slot[p] = NO_SLOT;
                continue;
            }
            r->state[p] = ST_RES | ST_PF | (r->wp ? 0 : ST_DIRTY);
            r->st.resident++;
            r->st.pack_installed++;
            r->st.prefetched++;
            log_rec(r, t, p, PGR_REC_PREFETCH, PGR_RF_PACK, -1);
            if (r->nlog == r->logcap) log_flush(r);
        }
        if (r->st.resident > r->st.max_resident) r->st.max_resident = r->st.resident;
        log_flush(r);
        pthread_mutex_unlock(&r->mu);
        const char *why = err ? "UFFDIO_COPY failed" : full ? "memory budget full" : hook ? "stopped early (test hook PAGECAST_PAGER_PACK_STOP_AFTER)" : NULL;
        if (why) {
            pthread_mutex_lock(&r->mu);
            if (!k->why[0])
                snprintf(k->why, sizeof k->why, "%s%s%s after %llu pages", why, err ? ": " : "", err ? strerror(err) : "",
                         (unsigned long long)r->st.pack_installed);
            pthread_mutex_unlock(&r->mu);
            return -1;
        }
    }
    return 0;
}

/* The last loader thread to end tells the handler, which serves every fault that waited. */
static void pack_thread_end(pgr_region *r, const char *why) {
    struct pgr_pack *k = r->pack;
    pthread_mutex_lock(&r->mu);
    if (why && !k->why[0]) snprintf(k->why, sizeof k->why, "%s", why);
    if (k->why[0]) __atomic_store_n(&k->stop, 1, __ATOMIC_RELEASE);
    int last = --k->live == 0;
    int closing = k->stop == 2;
    if (last) {
        r->st.pack_state = k->why[0] || closing ? PGR_PACK_STOPPED : PGR_PACK_DONE;
        r->st.pack_done_ns = (uint64_t)(now_ns() - r->t0);
    }
    pthread_mutex_unlock(&r->mu);
    if (!last) return;
    if (k->why[0]) fprintf(stderr, "pagecast pager: page pack %s: %s; the rest is served from %s\n", k->path, k->why, r->path);
    uint64_t one = 1;
    if (write(r->pack_efd, &one, sizeof one) < 0) { /* the handler also checks the state after each batch */
    }
}

struct pack_arg {
    pgr_region *r;
    int id;
};

/* Claim the next chunk and read it into buf. Each thread has its read in flight while
 * the others map theirs: the disk here serves requests in order, and when it is slow a
 * single read in flight left it idle ~110 µs between reads (the wake-up of the next
 * reader) and cost 20-45 % of the stream's speed. A demand read (a fault on a page not
 * in the pack) in flight holds the *next* loader read back (up to 2 ms), so the miss
 * waits only for reads already queued. Returns 1 with [*i, *end) in buf, 0 at the end,
 * -1 with why set. */
static int pack_read_next(pgr_region *r, uint8_t *buf, uint64_t *i, uint64_t *end, char *why, size_t whylen) {
    struct pgr_pack *k = r->pack;
    uint64_t ps = r->ps;
    uint64_t c = __atomic_fetch_add(&k->next_chunk, 1, __ATOMIC_ACQ_REL);
    if (!pack_chunk(k, c, i, end)) return 0;
    pthread_mutex_lock(&r->mu);
    if (*end > k->hi) k->hi = *end;
    pthread_mutex_unlock(&r->mu);
    if (c == 1 && k->dfd < 0) /* the rest as one sequential stream: the disk reads ahead while pages are mapped */
        posix_fadvise(k->fd, (off_t)(k->data_off + *i * ps), (off_t)((k->n - *i) * ps), POSIX_FADV_WILLNEED);
    struct timespec hold = {0, 2000000};
    for (int v; (v = __atomic_load_n(&r->miss_io, __ATOMIC_ACQUIRE)) != 0;)
        if (syscall(SYS_futex, &r->miss_io, FUTEX_WAIT_PRIVATE, v, &hold, NULL, 0) < 0 && errno == ETIMEDOUT) break;
    if (pread_full(k->dfd >= 0 ? k->dfd : k->fd, buf, (*end - *i) * ps, k->data_off + *i * ps) < 0) {
        snprintf(why, whylen, "read failed at page %llu of %llu (%s)", (unsigned long long)*i, (unsigned long long)k->n,
                 errno ? strerror(errno) : "file shorter than its header says");
        return -1;
    }
    return 1;
}

static void *pack_main(void *arg) {
    struct pack_arg *a = arg;
    pgr_region *r = a->r;
    struct pgr_pack *k = r->pack;
    uint8_t *buf = k->buf[a->id];
    free(a);
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    uint64_t ps = r->ps;
    char why[200] = "";
    for (;;) {
        if (__atomic_load_n(&k->stop, __ATOMIC_ACQUIRE)) break;
        uint64_t i, end;
        if (pack_read_next(r, buf, &i, &end, why, sizeof why) <= 0) break;
        __atomic_fetch_add(&r->st.pack_bytes_read, (end - i) * ps, __ATOMIC_RELAXED);
        for (uint64_t b = i / k->block; b * k->block < end; b++) {
            uint64_t lo = b * k->block, hi = lo + k->block < k->n ? lo + k->block : k->n;
            if (pgr_pack_sum((const uint64_t *)(buf + (lo - i) * ps), (hi - lo) * ps / 8) != k->sums[b]) {
                snprintf(why, sizeof why, "block %llu (pages %llu-%llu) fails its checksum (pack corrupted?)",
                         (unsigned long long)b, (unsigned long long)lo, (unsigned long long)hi - 1);
                break;
            }
        }
        if (why[0] || pack_install(r, i, end, buf) < 0) break;
    }
    pack_thread_end(r, why[0] ? why : NULL);
    return NULL;
}

static void pack_free(struct pgr_pack *k) {
    if (!k) return;
    if (k->fd >= 0) close(k->fd);
    if (k->dfd >= 0) close(k->dfd);
    free(k->rpage);
    free(k->sums);
    for (int i = 0; i < PACK_MAX_THREADS; i++) free(k->buf[i]);
    free(k);
}

int pgr_pack_start(pgr_region *r, const char *pack_path, uint64_t defer, uint64_t stop_after, int threads) {
    _Static_assert(sizeof(pgr_pack_header) == PGR_PACK_HEADER, "pack header size");
    if (foreign(r)) return -1;
    if (r->pack) {
        set_err("%s: a page pack is already loading for %s", pack_path, r->path);
        return -1;
    }
    int fd = open(pack_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_err("page pack %s: %s", pack_path, strerror(errno));
        return -1;
    }
    pgr_pack_header h;
    struct stat ps_st, src, cur;
    if (fstat(fd, &ps_st) < 0 || pread_full(fd, &h, sizeof h, 0) < 0 || memcmp(h.magic, PGR_PACK_MAGIC, 8) != 0) {
        set_err("page pack %s: not a page pack (bad or short header)", pack_path);
        close(fd);
        return -1;
    }
    h.path[sizeof h.path - 1] = 0;
    if (fstat(r->fd, &cur) < 0 || stat(h.path, &src) < 0 || src.st_dev != cur.st_dev || src.st_ino != cur.st_ino) {
        close(fd);
        return 1; /* built for another file */
    }
    uint64_t nblocks = h.block_pages ? (h.npages + h.block_pages - 1) / h.block_pages : 0;
    uint64_t idx_bytes = (h.npages + nblocks) * 8;
    uint64_t data_off = (h.index_offset + idx_bytes + 4095) / 4096 * 4096;
    if (h.version != PGR_PACK_VERSION) {
        set_err("page pack %s: unsupported version %u (this pagecast reads %d)", pack_path, h.version, PGR_PACK_VERSION);
        close(fd);
        return -1;
    }
    if (h.page_size != r->ps || h.block_pages < 1 || h.block_pages > (1u << 16) ||
        h.npages > (1ull << 31) - 1 || h.index_offset != PGR_PACK_HEADER || h.data_offset != data_off) {
        set_err("page pack %s: malformed header (version %u, page size %u)", pack_path, h.version, h.page_size);
        close(fd);
        return -1;
    }
    if ((uint64_t)ps_st.st_size != data_off + h.npages * r->ps) {
        set_err("page pack %s: truncated or padded: %llu bytes, the header says %llu", pack_path,
                (unsigned long long)ps_st.st_size, (unsigned long long)(data_off + h.npages * r->ps));
        close(fd);
        return -1;
    }
    if ((uint64_t)cur.st_size != h.src_size || (int64_t)cur.st_mtim.tv_sec * 1000000000LL + cur.st_mtim.tv_nsec != h.src_mtime_ns ||
        (int64_t)cur.st_ctim.tv_sec * 1000000000LL + cur.st_ctim.tv_nsec != h.src_ctime_ns || (uint64_t)cur.st_ino != h.src_ino ||
        (uint64_t)cur.st_dev != h.src_dev) {
        set_err("page pack %s is stale: %s changed since the pack was built (size/mtime/ctime/inode differ); ignored",
                pack_path, r->path);
        close(fd);
        return -1;
    }
    struct pgr_pack *k = calloc(1, sizeof *k);
    uint64_t *idx = malloc(idx_bytes ? idx_bytes : 8);
    if (!k || !idx) {
        free(k);
        free(idx);
        close(fd);
        set_err("out of memory");
        return -1;
    }
    k->fd = fd;
    k->dfd = -1;
    if (pread_full(fd, idx, idx_bytes, h.index_offset) < 0 || pgr_pack_sum(idx, idx_bytes / 8) != h.index_sum) {
        set_err("page pack %s: index fails its checksum (corrupted)", pack_path);
        free(idx);
        pack_free(k);
        return -1;
    }
    snprintf(k->path, sizeof k->path, "%s", pack_path);
    /* Direct I/O: the device writes the pages into the loader's buffer, no page-cache copy
     * or page-cache pages to allocate; while one loader thread maps its chunk the others'
     * reads are in flight. */
    const char *dio = getenv("PAGECAST_PAGER_PACK_DIRECT");
    k->dfd = dio && *dio == '0' ? -1 : open(pack_path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    k->n = h.npages;
    k->block = h.block_pages;
    k->nblocks = nblocks;
    k->data_off = data_off;
    k->defer = defer ? defer : 256;
    k->stop_after = stop_after;
    k->rpage = malloc((k->n ? k->n : 1) * sizeof(int64_t));
    k->sums = malloc((nblocks ? nblocks : 1) * sizeof(uint64_t));
    k->nthreads = threads < 1 ? 4 : threads > PACK_MAX_THREADS ? PACK_MAX_THREADS : threads;
    const char *ch = getenv("PAGECAST_PAGER_PACK_CHUNK");
    k->chunk = ch && atoi(ch) > 0 ? (uint64_t)atoi(ch) : PACK_READ_BLOCKS;
    int bufs_ok = 1;
    uint64_t bufpages = k->chunk * k->block; /* a read never spans more than the pack */
    if (bufpages > k->n) bufpages = k->n ? k->n : 1;
    for (int t = 0; t < k->nthreads; t++) bufs_ok &= (k->buf[t] = aligned_alloc(4096, bufpages * r->ps)) != NULL;
    int32_t *pos = malloc(r->npages * sizeof(int32_t));
    struct deferred *dfr = malloc(4096 * sizeof *dfr);
    if (!k->rpage || !k->sums || !bufs_ok || !pos || !dfr) {
        set_err("page pack %s: out of memory", pack_path);
        free(idx);
        free(pos);
        free(dfr);
        pack_free(k);
        return -1;
    }
    memcpy(k->sums, idx + k->n, nblocks * 8);
    for (uint64_t p = 0; p < r->npages; p++) pos[p] = -1;
    uint64_t first_page = r->file_offset / r->ps, inside = 0;
    for (uint64_t j = 0; j < k->n; j++) {
        int64_t fp = (int64_t)idx[j], p = fp - (int64_t)first_page;
        int ok = fp >= 0 && p >= 0 && (uint64_t)p < r->npages && r->file_offset + (uint64_t)p * r->ps < r->valid_end;
        k->rpage[j] = ok ? p : -1;
        if (ok && pos[p] < 0) {
            pos[p] = (int32_t)j;
            inside++;
        }
    }
    free(idx);
    pthread_mutex_lock(&r->mu);
    r->pack = k;
    r->pack_pos = pos;
    r->dfr = dfr;
    r->dfrcap = 4096;
    r->st.pack_pages = inside;
    r->st.pack_bytes_read = PGR_PACK_HEADER + idx_bytes;
    r->st.pack_state = PGR_PACK_RUNNING;
    pthread_mutex_unlock(&r->mu);
    /* several threads: while the program waits for its next page, the idle core maps pages too */
    /* Every thread counts as live from the start: counted one by one, a thread that failed
     * (a corrupted first block) before the next was created would find itself the last
     * and report the end, and so would the next one. */
    int want = k->nthreads, started = 0;
    pthread_mutex_lock(&r->mu);
    k->live = want;
    pthread_mutex_unlock(&r->mu);
    for (int t = 0; t < want; t++) {
        struct pack_arg *a = malloc(sizeof *a);
        if (!a) break;
        *a = (struct pack_arg){r, t};
        if (pthread_create(&k->thr[t], NULL, pack_main, a) != 0) {
            free(a);
            break;
        }
        started++;
    }
    k->nthreads = started;
    if (!started) {
        pthread_mutex_lock(&r->mu);
        k->live = 0;
        r->st.pack_state = PGR_PACK_STOPPED;
        pthread_mutex_unlock(&r->mu);
        set_err("page pack %s: cannot start the loader thread", pack_path);
        return -1;
    }
    for (int t = started; t < want; t++) pack_thread_end(r, "cannot start every loader thread");
    return 0;
}

/* ---- open / close ------------------------------------------------------------------ */

static int load_learned(pgr_region *r) {
    int fd = open(r->learn_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    char magic[8];
    uint64_t np = 0;
    int ok = read(fd, magic, 8) == 8 && memcmp(magic, "PGCBITS1", 8) == 0 && read(fd, &np, 8) == 8 &&
             np == r->npages && read(fd, r->learned, r->nwords * 8) == (ssize_t)(r->nwords * 8);
    close(fd);
    if (!ok) memset(r->learned, 0, r->nwords * 8);
    return ok ? 0 : -1;
}

int pgr_save_learned(pgr_region *r, const char *path) {
    char tmp[PATH_MAX + 32];
    if (foreign(r)) return -1;
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    pthread_mutex_lock(&r->mu);
    uint64_t np = r->npages;
    int ok = write(fd, "PGCBITS1", 8) == 8 && write(fd, &np, 8) == 8 &&
             write(fd, r->learned, r->nwords * 8) == (ssize_t)(r->nwords * 8);
    pthread_mutex_unlock(&r->mu);
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) < 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static void pack_free(struct pgr_pack *k);

static void free_region(pgr_region *r) {
    pack_free(r->pack);
    free(r->pack_pos);
    free(r->dfr);
    free(r->state);
    free(r->ring);
    free(r->learned);
    free(r->tab_off);
    free(r->tab_pages);
    free(r->buf);
    free(r->dbuf);
    free(r->batch);
    free(r->log);
    free(r->samples);
    free(r->slot);
    free(r->wbuf);
    free(r->ebuf);
    if (r->twins) sys_munmap(r->twins, r->cap * r->ps);
    free(r);
}

pgr_region *pgr_open_fd(int fd_in, const char *path, uint64_t offset, uint64_t length, const pgr_config *cfg,
                        void *addr, int fixed, int prot) {
    long ps = sysconf(_SC_PAGESIZE);
    if (!cfg || cfg->budget_pages < 1) {
        set_err("budget must be at least one page");
        errno = EINVAL;
        return NULL;
    }
    if (offset % (uint64_t)ps) {
        set_err("%s: offset %llu is not page aligned", path, (unsigned long long)offset);
        errno = EINVAL;
        return NULL;
    }
    struct stat sb;
    if (fstat(fd_in, &sb) < 0) {
        set_err("%s: %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        set_err("%s: not a regular file", path);
        errno = EINVAL;
        return NULL;
    }
    if (length == 0) {
        if ((uint64_t)sb.st_size <= offset) {
            set_err("%s: empty file (nothing to map)", path);
            errno = EINVAL;
            return NULL;
        }
        length = (uint64_t)sb.st_size - offset;
    }
    char why[400];
    int feat = 0;
    int uffd = uffd_create(&feat, why, sizeof why);
    if (uffd < 0) {
        int e = errno;
        set_err("%s: %s", path, why);
        errno = e;
        return NULL;
    }
    pgr_region *r = calloc(1, sizeof *r);
    if (!r) {
        close(uffd);
        set_err("out of memory");
        errno = ENOMEM;
        return NULL;
    }
    r->uffd = uffd;
    r->fd = -1;
    r->stop_pipe[0] = r->stop_pipe[1] = -1;
    r->pack_efd = -1;
    r->cfg = *cfg;
    r->ps = (uint64_t)ps;
    r->len = (length + r->ps - 1) / r->ps * r->ps;
    r->npages = r->len / r->ps;
    r->file_offset = offset;
    uint64_t fend = offset + length;
    r->valid_end = (uint64_t)sb.st_size < fend ? (uint64_t)sb.st_size : fend;
    r->cap = cfg->budget_pages < r->npages ? cfg->budget_pages : r->npages;
    /* PAGECAST_PAGER_NO_WP=1 (tests): behave as on a kernel without userfaultfd WP */
    const char *nowp = getenv("PAGECAST_PAGER_NO_WP");
    r->wp = (feat & UFFD_FEATURE_PAGEFAULT_FLAG_WP) != 0 && !(nowp && *nowp == '1');
    if (cfg->writeback && !r->wp) {
        /* Without write-protect nothing stops a thread writing a page between its
         * write-back and its drop at eviction: that write would be lost. Refused instead. */
        set_err("%s: userfaultfd write-protect is unavailable here (Linux >= 5.7 has it): a writable shared "
                "mapping could lose writes at eviction", path);
        errno = EOPNOTSUPP;
        goto fail;
    }
    r->st.wp_enabled = r->wp;
    r->last_fault = -1;
    r->t0 = now_ns();
    snprintf(r->path, sizeof r->path, "%s", path);
    if (cfg->learn_path) snprintf(r->learn_path, sizeof r->learn_path, "%s", cfg->learn_path);
    r->cfg.learn_path = r->learn_path[0] ? r->learn_path : NULL;
    uint64_t maxb = (uint64_t)(cfg->depth > 0 ? cfg->depth : 0) + 1;
    r->nwords = (r->npages + 63) / 64;
    r->state = calloc(r->npages, 1);
    r->ring = malloc(r->cap * sizeof(int64_t));
    r->learned = calloc(r->nwords, 8);
    r->buf = malloc(maxb * r->ps);
    r->dbuf = malloc(r->ps);
    r->batch = malloc((maxb + 1) * sizeof(int64_t));
    r->logcap = 2 * maxb + 2;
    r->log = malloc(r->logcap * sizeof(pgr_log_rec));
    r->samples = malloc(NSAMPLES * sizeof(uint32_t));
    pthread_mutex_init(&r->mu, NULL);
    if (!r->state || !r->ring || !r->learned || !r->buf || !r->dbuf || !r->batch || !r->log || !r->samples) {
        set_err("out of memory");
        goto fail;
    }
    for (uint64_t i = 0; i < r->cap; i++) r->ring[i] = -1;
    r->owner = getpid();
    if (r->cfg.writeback) {
        r->twins = sys_mmap(NULL, r->cap * r->ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
        if (r->twins == MAP_FAILED) r->twins = NULL;
        r->slot = malloc(r->npages * sizeof *r->slot);
        if (r->slot) memset(r->slot, 0xff, r->npages * sizeof *r->slot); /* NO_SLOT */
        r->wbuf = malloc(r->ps);
        r->ebuf = malloc(r->ps);
        if (!r->twins || !r->slot || !r->wbuf || !r->ebuf) {
            set_err("out of memory");
            goto fail;
        }
        madvise(r->twins, r->cap * r->ps, MADV_DONTFORK);
    }
    if (r->learn_path[0] && load_learned(r) < 0)
        fprintf(stderr, "pagecast pager: %s: ignoring learned pages file %s (unreadable or other size)\n", path,
                r->learn_path);
    r->fd = fcntl(fd_in, F_DUPFD_CLOEXEC, 3);
    if (r->fd < 0) {
        set_err("%s: dup: %s", path, strerror(errno));
        goto fail;
    }
    int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (fixed ? MAP_FIXED : 0);
    r->base = sys_mmap(addr, r->len, prot, mflags);
    if (r->base == MAP_FAILED) {
        r->base = NULL;
        set_err("%s: mmap of %llu bytes: %s", path, (unsigned long long)r->len, strerror(errno));
        goto fail;
    }
    /* A forked child would see unregistered anonymous memory (zeros): give it nothing. */
    madvise(r->base, r->len, MADV_DONTFORK);
    struct uffdio_register reg = {
        .range = {.start = (uint64_t)(uintptr_t)r->base, .len = r->len},
        .mode = UFFDIO_REGISTER_MODE_MISSING | (r->wp ? UFFDIO_REGISTER_MODE_WP : 0),
    };
    if (ioctl(uffd, UFFDIO_REGISTER, &reg) < 0) {
        set_err("%s: UFFDIO_REGISTER: %s", path, strerror(errno));
        goto fail;
    }
    if (r->cfg.log_fd >= 0 && write_log_header(r) < 0) {
        set_err("%s: writing the fault log header: %s", path, strerror(errno));
        goto fail;
    }
    if (pipe2(r->stop_pipe, O_CLOEXEC) < 0) {
        set_err("pipe: %s", strerror(errno));
        goto fail;
    }
    r->pack_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->pack_efd < 0) {
        set_err("eventfd: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&r->thr, NULL, handler_main, r) != 0) {
        set_err("cannot start the fault handler thread");
        goto fail;
    }
    r->thr_started = 1;
    return r;
fail: {
    int e = errno ? errno : EINVAL;
    if (r->base) sys_munmap(r->base, r->len);
    if (r->fd >= 0) close(r->fd);
    if (r->stop_pipe[0] >= 0) close(r->stop_pipe[0]);
    if (r->stop_pipe[1] >= 0) close(r->stop_pipe[1]);
    if (r->pack_efd >= 0) close(r->pack_efd);
    close(uffd);
    pthread_mutex_destroy(&r->mu);
    free_region(r);
    errno = e;
    return NULL;
}
}

pgr_region *pgr_open(const char *path, uint64_t offset, uint64_t length, const pgr_config *cfg, void *addr,
                     int fixed, int prot) {
    int wb = cfg ? cfg->writeback : 0;
    int fd = open(path, (wb ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        set_err("%s: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    pgr_region *r = pgr_open_fd(fd, path, offset, length, cfg, addr, fixed, prot);
    int e = errno;
    close(fd);
    errno = e;
    return r;
}

void *pgr_base(pgr_region *r) { return r->base; }
uint64_t pgr_length(pgr_region *r) { return r->len; }

/* In a forked child the region's lock may be held by a thread that stayed in the parent,
 * and its memory is not mapped (MADV_DONTFORK): every call but pgr_close refuses. */
static int foreign(pgr_region *r) {
    if (getpid() == r->owner) return 0;
    set_err("%s: the paged region belongs to the parent process (this is a forked child)", r->path);
    errno = EINVAL;
    return 1;
}

long pgr_flush(pgr_region *r) {
    if (foreign(r)) return -1;
    pthread_mutex_lock(&r->mu);
    long n = flush_locked(r);
    pthread_mutex_unlock(&r->mu);
    return n;
}

long pgr_drop_all(pgr_region *r) {
    long n = 0;
    int64_t t = now_ns();
    if (foreign(r)) return -1;
    pthread_mutex_lock(&r->mu);
    for (uint64_t i = 0; i < r->fill; i++) {
        int64_t v = r->ring[i];
        if (v >= 0 && (r->state[v] & ST_RES)) {
            if (evict(r, (uint64_t)v, t) < 0) {
                pthread_mutex_unlock(&r->mu);
                return -1;
            }
            n++;
        }
        r->ring[i] = -1;
    }
    r->fill = r->hand = 0;
    log_flush(r);
    pthread_mutex_unlock(&r->mu);
    return n;
}

int pgr_close(pgr_region *r, pgr_stats *final_stats) {
    if (!r) return 0;
    if (getpid() != r->owner) {
        /* A forked child: the handler and loader threads, the region's memory
         * (MADV_DONTFORK) and maybe the lock's owner stayed in the parent. Writing back
         * would write nothing of the child's, and the stop pipe is the parent's. */
        if (final_stats) *final_stats = r->st;
        close(r->uffd);
        close(r->fd);
        close(r->stop_pipe[0]);
        close(r->stop_pipe[1]);
        close(r->pack_efd);
        r->twins = NULL; /* not mapped here, and the address may be another mapping's now */
        if (r->pack) r->pack->nthreads = 0;
        free_region(r);
        return 0;
    }
    if (r->pack) { /* the loader first: it maps pages into the region */
        __atomic_store_n(&r->pack->stop, 2, __ATOMIC_RELEASE);
        for (int t = 0; t < r->pack->nthreads; t++) pthread_join(r->pack->thr[t], NULL);
    }
    if (r->thr_started) {
        char c = 1;
        if (write(r->stop_pipe[1], &c, 1) < 0) { /* the thread still stops at close below */
        }
        pthread_join(r->thr, NULL);
    }
    int rc = 0;
    /* Handler stopped: nothing else changes state. Write every dirty page back. */
    for (uint64_t p = 0; p < r->npages; p++) {
        if ((r->state[p] & ST_RES) && needs_writeback(r, p) && write_back(r, p, 0) < 0) {
            if (!rc)
                fprintf(stderr, "pagecast pager: %s: write-back at close failed: %s\n", r->path, strerror(errno));
            rc = -1;
        }
    }
    if (final_stats) *final_stats = r->st;
    if (r->learn_path[0] && pgr_save_learned(r, r->learn_path) < 0)
        fprintf(stderr, "pagecast pager: %s: cannot save learned pages to %s: %s\n", r->path, r->learn_path,
                strerror(errno));
    if (rc == 0) sys_munmap(r->base, r->len); /* on failure keep the memory: the data lives there */
    close(r->uffd);
    close(r->fd);
    close(r->stop_pipe[0]);
    close(r->stop_pipe[1]);
    close(r->pack_efd);
    pthread_mutex_destroy(&r->mu);
    free_region(r);
    return rc;
}

void pgr_get_stats(pgr_region *r, pgr_stats *out) {
    if (foreign(r)) {
        *out = r->st;
        return;
    }
    pthread_mutex_lock(&r->mu);
    *out = r->st;
    pthread_mutex_unlock(&r->mu);
}

uint64_t pgr_get_samples(pgr_region *r, uint32_t *out, uint64_t cap) {
    if (foreign(r)) return 0;
    pthread_mutex_lock(&r->mu);
    uint64_t n = r->st.nsamples < NSAMPLES ? r->st.nsamples : NSAMPLES;
    if (n > cap) n = cap;
    memcpy(out, r->samples, n * sizeof(uint32_t));
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* A table's CSR arrays are safe to walk: offsets start at 0 and never decrease, and every
 * listed page is a page of the table (policy_pages indexes with them). */
static int table_valid(const uint64_t *offsets, const int64_t *pages, uint64_t npages, uint64_t npages_listed,
                       char *why, size_t whylen) {
    if (offsets[0] != 0) {
        snprintf(why, whylen, "the first offset is %llu, not 0", (unsigned long long)offsets[0]);
        return 0;
    }
    for (uint64_t i = 0; i < npages; i++)
        if (offsets[i + 1] < offsets[i] || offsets[i + 1] > npages_listed) {
            snprintf(why, whylen, "offset %llu (%llu) is out of order or past the %llu listed pages", (unsigned long long)i + 1,
                     (unsigned long long)offsets[i + 1], (unsigned long long)npages_listed);
            return 0;
        }
    for (uint64_t i = 0; i < offsets[npages]; i++)
        if (pages[i] < 0 || (uint64_t)pages[i] >= npages) {
            snprintf(why, whylen, "entry %llu names page %lld, outside its %llu pages", (unsigned long long)i,
                     (long long)pages[i], (unsigned long long)npages);
            return 0;
        }
    return 1;
}

static void table_install(pgr_region *r, uint64_t *o, int64_t *pg) {
    if (foreign(r)) { /* the parent's handler reads the table; the child has none */
        free(o);
        free(pg);
        return;
    }
    pthread_mutex_lock(&r->mu);
    free(r->tab_off);
    free(r->tab_pages);
    r->tab_off = o;
    r->tab_pages = pg;
    pthread_mutex_unlock(&r->mu);
}

int pgr_set_table(pgr_region *r, const uint64_t *offsets, const int64_t *pages, uint64_t npages) {
    if (npages != r->npages) {
        set_err("table has %llu pages, region %llu", (unsigned long long)npages, (unsigned long long)r->npages);
        return -1;
    }
    char why[200];
    if (!table_valid(offsets, pages, npages, offsets[npages], why, sizeof why)) {
        set_err("malformed prefetch table: %s", why);
        return -1;
    }
    uint64_t total = offsets[npages];
    uint64_t *o = malloc((npages + 1) * sizeof *o);
    int64_t *pg = malloc((total ? total : 1) * sizeof *pg);
    if (!o || !pg) {
        free(o);
        free(pg);
        set_err("out of memory");
        return -1;
    }
    memcpy(o, offsets, (npages + 1) * sizeof *o);
    memcpy(pg, pages, total * sizeof *pg);
    table_install(r, o, pg);
    return 0;
}

/* Table file: see pager.h (pgr_table_header). Every field is checked against the file's
 * size before use. */
typedef struct {
    uint64_t npages;
    uint64_t *off;
    int64_t *pages;
    char src[PATH_MAX];
} table_file;

static int table_read(const char *path, table_file *t) {
    memset(t, 0, sizeof *t);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) < 0) {
        set_err("pager table %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    uint64_t size = (uint64_t)sb.st_size;
    const char *why = NULL;
    char whybuf[200];
    uint8_t *raw = NULL;
    if (!S_ISREG(sb.st_mode)) why = "not a regular file";
    else if (size < 16 + 16 + 2) why = "too short to be a pager table";
    else if (size > (1ull << 40)) why = "larger than 1 TiB";
    else if (!(raw = malloc(size))) why = "out of memory";
    else if (pread_full(fd, raw, size, 0) < 0) why = "read failed";
    else if (memcmp(raw, PGR_TABLE_MAGIC, 6) != 0 || raw[6] < '0' || raw[6] > '9' || raw[7] != 0)
        why = "not a pager table file (bad magic)";
    else if (raw[6] != '0' + PGR_TABLE_VERSION) {
        snprintf(whybuf, sizeof whybuf, "unsupported pager table version %c (this pagecast reads %d)", raw[6],
                 PGR_TABLE_VERSION);
        why = whybuf;
    }
    close(fd);
    uint64_t np = 0, total = 0, pages_at = 0;
    if (!why) {
        memcpy(&np, raw + 8, 8);
        if (np == 0 || np > (size - 16) / 8 - 1) why = "page count does not fit the file (truncated?)";
    }
    if (!why) {
        pages_at = 16 + 8 * (np + 1);
        t->off = malloc((np + 1) * 8);
        if (!t->off) why = "out of memory";
        else {
            memcpy(t->off, raw + 16, (np + 1) * 8);
            total = t->off[np];
            if (total > (size - pages_at) / 8) why = "the offsets name more entries than the file holds (truncated?)";
        }
    }
    if (!why) {
        t->pages = malloc((total ? total : 1) * 8);
        if (!t->pages) why = "out of memory";
        else {
            memcpy(t->pages, raw + pages_at, total * 8);
            if (!table_valid(t->off, t->pages, np, total, whybuf, sizeof whybuf)) why = whybuf;
        }
    }
    if (!why) {
        uint64_t at = pages_at + total * 8, rem = size - at;
        const uint8_t *nul = rem ? memchr(raw + at, 0, rem) : NULL;
        if (!nul || rem < 2) why = "no NUL-terminated data file path after the entries (truncated?)";
        else if ((uint64_t)(nul - raw) != size - 1) why = "bytes after the data file path (padded?)";
        else if (rem > PATH_MAX) why = "data file path longer than PATH_MAX";
        else memcpy(t->src, raw + at, rem);
    }
    free(raw);
    if (why) {
        set_err("pager table %s: %s", path, why);
        free(t->off);
        free(t->pages);
        t->off = NULL;
        t->pages = NULL;
        return -1;
    }
    t->npages = np;
    return 0;
}

int pgr_table_check(const char *path, uint64_t *npages, char *src, size_t srclen) {
    table_file t;
    if (table_read(path, &t) < 0) return -1;
    if (npages) *npages = t.npages;
    if (src && srclen) snprintf(src, srclen, "%s", t.src);
    free(t.off);
    free(t.pages);
    return 0;
}

int pgr_table_load(pgr_region *r, const char *path) {
    table_file t;
    if (table_read(path, &t) < 0) return -1;
    struct stat want, st;
    if (fstat(r->fd, &want) < 0 || stat(t.src, &st) < 0 || st.st_dev != want.st_dev || st.st_ino != want.st_ino) {
        free(t.off);
        free(t.pages);
        return 1;
    }
    if (t.npages != r->npages) {
        set_err("pager table %s covers %llu pages, the mapping of %s has %llu", path, (unsigned long long)t.npages, r->path,
                (unsigned long long)r->npages);
        free(t.off);
        free(t.pages);
        return -1;
    }
    table_install(r, t.off, t.pages);
    return 0;
}

int pgr_learn_pages(pgr_region *r, const int64_t *pages, uint64_t n) {
    if (foreign(r)) return -1;
    pthread_mutex_lock(&r->mu);
    for (uint64_t i = 0; i < n; i++)
        if (pages[i] >= 0 && (uint64_t)pages[i] < r->npages) r->learned[pages[i] >> 6] |= 1ull << (pages[i] & 63);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

uint64_t pgr_learned_count(pgr_region *r) {
    uint64_t c = 0;
    if (foreign(r)) return 0;
    pthread_mutex_lock(&r->mu);
    for (uint64_t i = 0; i < r->nwords; i++) c += (uint64_t)__builtin_popcountll(r->learned[i]);
    pthread_mutex_unlock(&r->mu);
    return c;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

void pgr_percentiles(pgr_region *r, uint64_t *p50, uint64_t *p99) {
    *p50 = *p99 = 0;
    uint64_t n = r->st.nsamples < NSAMPLES ? r->st.nsamples : NSAMPLES;
    if (!n) return;
    uint32_t *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return;
    n = pgr_get_samples(r, tmp, n);
    qsort(tmp, n, sizeof *tmp, cmp_u32);
    *p50 = tmp[(n - 1) / 2];
    *p99 = tmp[(n - 1) * 99 / 100];
    free(tmp);
}

/* Called from a fatal-signal handler: no locks, no allocation, only pwrite/fstat. The
 * handler thread may be mid-fault; a page it is installing is not yet marked resident
 * and is skipped, which is right (it holds no program data yet). */
long pgr_emergency_writeback(pgr_region *r) {
    long n = 0;
    for (uint64_t p = 0; p < r->npages; p++)
        if ((r->state[p] & ST_RES) && needs_writeback(r, p) && write_back(r, p, 1) == 0) n++;
    return n;
}
