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
#include "highfd.h"
#include "infile.h"
#include "outfile.h"
#include "pager_internal.h"
#include "policy/pc_evict.h"
#include "policy/pc_evict_plan.h"
#include "policy/pc_policy.h"
#include "vformat.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
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

/* Raw syscalls: when built into the LD_PRELOAD shim, mmap/munmap resolve to the shim's. */
static void *sys_mmap(void *addr, size_t len, int prot, int flags) {
    long r = syscall(SYS_mmap, addr, len, prot, flags, -1, 0);
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return MAP_FAILED;
    }
    return (void *)r;
}

static int sys_munmap(void *addr, size_t len) {
    return (int)syscall(SYS_munmap, addr, len);
}

static __thread char g_err[512];

const char *pgr_last_error(void) {
    return g_err;
}

void set_err(const char *fmt, ...) {
    PC_VFORMAT(g_err, fmt);
}

int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Errors seen by the handler thread go to stderr once each kind: the program keeps
 * running and the stats carry the count. */
static void handler_error(pgr_region *r, const char *what, int err) {
    r->st.errors++;
    if (r->st.errors <= 3) fprintf(stderr, "pagecast pager: %s: %s: %s\n", r->path, what, strerror(err));
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

void log_rec(pgr_region *r, int64_t t, int64_t page, int kind, int flags, int tid) {
    if (r->cfg.log_fd < 0) return;
    if (r->nlog == r->logcap) log_flush(r); /* more than a batch: evictions after use, drop_all */
    pgr_log_rec *x = &r->log[r->nlog++];
    x->t_ns = t - r->t0;
    x->page = (int64_t)(r->file_offset / r->ps) + page;
    x->kind = (uint8_t)kind;
    x->flags = (uint8_t)flags;
    x->pad = 0;
    x->tid = tid;
}

void log_flush(pgr_region *r) {
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

static uint8_t *twin(pgr_region *r, uint64_t p) {
    return r->twins + (uint64_t)r->slot[p] * r->ps;
}

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

/* Write the bytes of snap[0, n) that differ from the twin of page p to the file at off, in
 * ONE pwrite: a SIGKILL ends the handler thread with the program at any point, and a
 * write-back made of several pwrites would then leave the page half new and half old in the
 * file. One pwrite of bytes within one page is all or nothing (the kernel checks for a fatal
 * signal between page-cache folios, not inside one). One run of changed bytes: that run.
 * Several: the span from the first changed byte to the last, with the unchanged bytes in
 * between read from the file now, so bytes another writer put there are kept (except those
 * it writes between this pread and the pwrite: docs/pager.md). */
static int write_changed(pgr_region *r, uint64_t p, const uint8_t *snap, size_t n, uint64_t off, uint8_t *scratch) {
    const uint8_t *tw = twin(r, p);
    size_t lo = skip_same(snap, tw, 0, n);
    if (lo == n) return 0;
    size_t hi = n;
    while (hi > lo && snap[hi - 1] == tw[hi - 1]) hi--;
    size_t j = lo;
    while (j < hi && snap[j] != tw[j]) j++;
    if (j == hi) return pwrite_full(r->fd, snap + lo, hi - lo, off + lo); /* one run */
    size_t got = 0, want = hi - lo;
    while (got < want) {
        ssize_t k = pread(r->fd, scratch + got, want - got, (off_t)(off + lo + got));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) break;
        got += (size_t)k;
    }
    want = got; /* the file shrank meanwhile: nothing past its end */
    for (size_t i = 0; i < want; i++)
        if (snap[lo + i] != tw[lo + i]) scratch[i] = snap[lo + i];
    return want ? pwrite_full(r->fd, scratch, want, off + lo) : 0;
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

/* Page p's memory was dropped: its state and counters. */
static void evicted(pgr_region *r, uint64_t p, int64_t t, int dirty) {
    if (r->state[p] & ST_PF) r->st.prefetch_evicted_untouched++;
    if (r->cls && r->cls[p] == PC_CLASS_KEEP && r->st.plan_keep_resident) r->st.plan_keep_resident--;
    r->state[p] = 0;
    if (r->slot) r->slot[p] = NO_SLOT;
    r->st.evictions++;
    r->st.resident--;
    log_rec(r, t, (int64_t)p, PGR_REC_EVICT, dirty ? PGR_RF_DIRTY : 0, -1);
}

static int evict(pgr_region *r, uint64_t p, int64_t t) {
    int dirty = needs_writeback(r, p);
    if (dirty && clean_page(r, p) < 0) {
        /* Keeping the page is the only way not to lose its data. */
        handler_error(r, "write-back failed; page kept resident", errno);
        return -1;
    }
    if (!dirty && r->nvict < r->vcap) { /* unmapped with the batch's other victims */
        r->vict[r->nvict++] = (int64_t)p;
        evicted(r, p, t, 0);
        return 0;
    }
    r->st.unmap_calls++;
    if (madvise(r->base + p * r->ps, r->ps, MADV_DONTNEED) < 0) {
        handler_error(r, "madvise(MADV_DONTNEED)", errno);
        return -1;
    }
    evicted(r, p, t, dirty);
    return 0;
}

static int cmp_i64(const void *a, const void *b);

/* Unmap the victims evict() held back: one MADV_DONTNEED per run of neighbouring pages, not
 * one per page (each call flushes the TLB of every CPU the program runs on; a batch's
 * victims were mostly installed together, so they are neighbours). They are clean, and
 * only this thread maps pages, so none is mapped again before this. */
static void flush_victims(pgr_region *r) {
    qsort(r->vict, r->nvict, sizeof(int64_t), cmp_i64);
    for (uint64_t i = 0; i < r->nvict;) {
        uint64_t j = i + 1;
        while (j < r->nvict && r->vict[j] == r->vict[j - 1] + 1) j++;
        r->st.unmap_calls++;
        if (madvise(r->base + (uint64_t)r->vict[i] * r->ps, (j - i) * r->ps, MADV_DONTNEED) < 0)
            handler_error(r, "madvise(MADV_DONTNEED)", errno);
        i = j;
    }
    r->nvict = r->vcap = 0;
}

/* A keep page of the plan is pinned while that leaves the budget room to stream through
 * (keep_max); past it, it is streamed (as for_limit streams the chunks it drops). */
static void plan_admit(pgr_region *r, uint64_t p, int delta) {
    if (!r->cls || r->cls[p] != PC_CLASS_KEEP) return;
    if (delta < 0) {
        if (r->st.plan_keep_resident) r->st.plan_keep_resident--;
    } else if (r->st.plan_keep_resident >= r->keep_max) {
        r->cls[p] = PC_CLASS_STREAM;
        r->st.plan_keep_demoted++;
    } else {
        r->st.plan_keep_resident++;
    }
}

static void ring_place(pgr_region *r, uint64_t h, uint64_t p) {
    r->ring[h] = (int64_t)p;
    if (r->slot) r->slot[p] = (uint32_t)h;
}

/* Place page p in the CLOCK ring, evicting a victim if the budget is full. The sweep is
 * pc_clock_next (native/policy/pc_evict.h), the simulator's CLOCK rule; with a memory plan,
 * frames freed by evict-after-use first, then pc_plan_clock_next (pc_evict_plan.h). */
int ring_insert(pgr_region *r, uint64_t p, int64_t t) {
    plan_admit(r, p, 1);
    if (r->fill < r->cap) {
        ring_place(r, r->fill++, p);
        return 0;
    }
    while (r->nfree) {
        uint64_t h = r->freef[--r->nfree];
        if (r->ring[h] >= 0) continue; /* the sweep took it meanwhile */
        ring_place(r, h, p);
        return 0;
    }
    for (uint64_t tries = 0; tries < r->cap + 1; tries++) {
        int64_t hh = r->cls
                         ? pc_plan_clock_next(r->ring, r->cap, &r->hand, r->state, r->cls, ST_RES, ST_REF, ST_PIN,
                                              3 * r->cap + 3)
                         : pc_clock_next(r->ring, r->cap, &r->hand, r->state, ST_RES, ST_REF, ST_PIN, 3 * r->cap + 3);
        if (hh < 0) break;
        uint64_t h = (uint64_t)hh;
        int64_t v = r->ring[h];
        if (v >= 0 && (r->state[v] & ST_RES) && evict(r, (uint64_t)v, t) < 0) continue;
        if (v >= 0 && r->slot && r->slot[v] == h) r->slot[v] = NO_SLOT; /* a page whose install failed */
        ring_place(r, h, p);
        return 0;
    }
    plan_admit(r, p, -1);
    errno = ENOMEM;
    return -1;
}

/* ---- memory plan: evict after use, prefetch along the next chain ------------------- */

static uint64_t chunk_of(pgr_region *r, uint64_t p) {
    return (r->first_page + p) / r->chunk_pages;
}

/* Region pages [*lo, *hi) of file chunk c (empty if outside the region). */
static void chunk_range(pgr_region *r, uint64_t c, uint64_t *lo, uint64_t *hi) {
    uint64_t a = c * r->chunk_pages, b = a + r->chunk_pages;
    *lo = a > r->first_page ? a - r->first_page : 0;
    *hi = b > r->first_page ? b - r->first_page : 0;
    if (*hi > r->npages) *hi = r->npages;
    if (*lo > *hi) *lo = *hi;
}

/* Page q left frame h after use: the frame is taken first. */
static void free_frame(pgr_region *r, uint64_t q, uint32_t h) {
    r->st.plan_after_use++;
    if (h != NO_SLOT && r->ring[h] == (int64_t)q) {
        r->ring[h] = -1;
        if (r->nfree < r->cap) r->freef[r->nfree++] = h;
    }
}

/* The program moved past chunk c: its stream pages leave now, their frames go first. So do
 * the chunk's pages in the page cache, which the region's copy made dead weight: under a
 * memory limit the kernel would reclaim them anyway, at the cost of a reclaim scan. */
static void evict_after_use(pgr_region *r, uint64_t c, int64_t t) {
    uint64_t lo, hi;
    chunk_range(r, c, &lo, &hi);
    if (lo < hi && r->cls[lo] == PC_CLASS_STREAM && r->npend_drop < 2) r->pend_drop[r->npend_drop++] = (int64_t)c;
    /* One MADV_DONTNEED a run of pages, not a page: each call flushes the TLB of every CPU
     * the program runs on. A dirty page goes alone (evict writes it back first). */
    uint64_t q = lo;
    while (q < hi) {
        uint64_t a = q;
        while (q < hi && r->cls[q] == PC_CLASS_STREAM && (r->state[q] & ST_RES) && !(r->state[q] & ST_PIN) &&
               !needs_writeback(r, q))
            q++;
        if (q == a) { /* not one of the chunk's clean resident stream pages: page by page */
            if (r->cls[q] == PC_CLASS_STREAM && (r->state[q] & ST_RES) && !(r->state[q] & ST_PIN)) {
                uint32_t h = r->slot[q];
                if (evict(r, q, t) == 0) free_frame(r, q, h);
            }
            q++;
            continue;
        }
        r->st.unmap_calls++;
        if (madvise(r->base + a * r->ps, (q - a) * r->ps, MADV_DONTNEED) < 0) {
            handler_error(r, "madvise(MADV_DONTNEED)", errno);
            continue;
        }
        for (uint64_t k = a; k < q; k++) {
            uint32_t h = r->slot[k];
            evicted(r, k, t, 0);
            free_frame(r, k, h);
        }
    }
}

static int chunk_kept(pgr_region *r, uint64_t k) {
    uint64_t lo, hi;
    chunk_range(r, k, &lo, &hi);
    return lo < hi && r->cls[lo] == PC_CLASS_KEEP && r->cls[hi - 1] == PC_CLASS_KEEP;
}

/* The chunk to read after chunk k: the plan's next; else the next chunk in file order when
 * both are kept (the keep set is read whole once; its chunks have no next in the plan), or
 * when the program is reading the file in order (in_order: a scan the recordings showed no
 * chain for, such as a database's table scan between point queries). */
static int64_t plan_succ(pgr_region *r, int64_t k) {
    if (r->pnext[k] >= 0 || (uint64_t)k + 1 >= r->nchunks) return r->pnext[k];
    if (r->in_order) return k + 1;
    return chunk_kept(r, (uint64_t)k) && chunk_kept(r, (uint64_t)k + 1) ? k + 1 : -1;
}

/* Whether entering chunk c continues the file in order from the chunk entered before,
 * prev: c follows it, or only kept chunks lie between them (pinned, so passed without a
 * miss the pager could see). */
#define PLAN_ORDER_GAP 64
static int entered_in_order(pgr_region *r, int64_t prev, uint64_t c) {
    if (prev < 0 || (uint64_t)prev >= c || c - (uint64_t)prev > PLAN_ORDER_GAP) return 0;
    for (uint64_t k = (uint64_t)prev + 1; k < c; k++)
        if (!chunk_kept(r, k)) return 0;
    return 1;
}

/* The chain from chunk c (plan_succ), at most max chunks, stopping where it comes back to
 * a chunk it named (threads working on neighbouring chunks make the plan's next a cycle). */
static uint64_t plan_chain(pgr_region *r, uint64_t c, int64_t *out, uint64_t max) {
    uint64_t n = 0;
    for (int64_t k = (int64_t)c; n < max;) {
        k = plan_succ(r, k);
        int seen = k == (int64_t)c;
        for (uint64_t i = 0; i < n && !seen; i++) seen = out[i] == k;
        if (k < 0 || seen) break;
        out[n++] = k;
    }
    return n;
}

#define PLAN_MAX_AHEAD    64
#define PLAN_LOOKUP_PAGES 7
#define PLAN_SCAN_AHEAD   2

/* Read the next pf_chunks chunks of the chain into the page cache: their I/O overlaps the
 * program's work on this one, and the faults there copy them from memory. A chunk is read
 * ahead again only once it was evicted after use or the program entered more chunks since
 * than the window holds, however often it comes back to the chunks before it. */
static void plan_read_ahead(pgr_region *r, uint64_t c) {
    int64_t ch[PLAN_MAX_AHEAD];
    /* a plan without a window of its own still reads a scan ahead, within the three chunks
     * of page cache the pager's margin holds (launch.memlimit_pager) */
    uint64_t ahead = r->pf_chunks ? r->pf_chunks : r->in_order ? PLAN_SCAN_AHEAD : 0;
    uint64_t n = plan_chain(r, c, ch, ahead < PLAN_MAX_AHEAD ? ahead : PLAN_MAX_AHEAD);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t k = (uint64_t)ch[i], lo, hi;
        if (r->ra[k] && r->entries - r->ra[k] <= 2 * ahead + 2) continue;
        r->ra[k] = r->entries;
        chunk_range(r, k, &lo, &hi);
        while (lo < hi && (r->state[lo] & ST_RES)) lo++;
        if (lo < hi) {
            posix_fadvise(r->fd, (off_t)(r->file_offset + lo * r->ps), (off_t)((hi - lo) * r->ps), POSIX_FADV_WILLNEED);
            if (!r->pf_chunks) r->st.plan_scan_ahead++;
        }
    }
}

/* A chunk evicted after use that the program enters again within PLAN_REGRET_ENTRIES chunk
 * entries was still in use (threads working on neighbouring chunks, as BLAS over a memmap
 * does): a regret. From 8 regrets that make a tenth of the chunks evicted after use, it
 * stops for the region (the kernel backend's rule): CLOCK does the rest. */
#define PLAN_REGRET_ENTRIES 3

static void plan_enter(pgr_region *r, uint64_t p, int64_t t) {
    uint64_t c = chunk_of(r, p);
    if ((int64_t)c == r->hist[0] || c >= r->nchunks) return;
    r->entries++;
    if (r->gone_at[c] && r->entries - r->gone_at[c] <= PLAN_REGRET_ENTRIES) {
        r->st.plan_regrets++;
        if (!r->st.plan_stream_off && r->st.plan_regrets >= 8 && r->st.plan_regrets * 10 >= r->after_use_chunks)
            r->st.plan_stream_off = 1;
    }
    r->gone_at[c] = 0;
    if (r->hist[0] >= 0) { /* a kept chunk left: its pages are pinned, their page-cache copies dead weight */
        uint64_t lo, hi;
        chunk_range(r, (uint64_t)r->hist[0], &lo, &hi);
        if (lo < hi && r->cls[lo] == PC_CLASS_KEEP && r->cls[hi - 1] == PC_CLASS_KEEP && r->npend_drop < 2)
            r->pend_drop[r->npend_drop++] = r->hist[0];
    }
    /* either of the last two: two threads each reading the file in order alternate; back to
     * the chunk just left (a page read out of order at a boundary) changes nothing */
    if ((int64_t)c != r->hist[1])
        r->in_order = entered_in_order(r, r->hist[0], c) || entered_in_order(r, r->hist[1], c);
    int64_t passed = pc_plan_enter(r->hist, (int64_t)c);
    if (passed >= 0 && !r->st.plan_stream_off) {
        evict_after_use(r, (uint64_t)passed, t);
        r->gone_at[passed] = r->entries;
        r->ra[passed] = 0;
        r->after_use_chunks++;
    }
    r->pend_ra = (int64_t)c;
}

/* The page-cache work a chunk entry asks for (read ahead along the chain, drop the copies of
 * chunks done with), done once the faulting thread runs again: each call allocates or frees
 * a chunk's pages, hundreds of microseconds the program need not wait for. */
static void plan_after_wake(pgr_region *r) {
    for (int i = 0; i < r->npend_drop; i++) {
        uint64_t lo, hi;
        chunk_range(r, (uint64_t)r->pend_drop[i], &lo, &hi);
        if (lo < hi)
            posix_fadvise(r->fd, (off_t)(r->file_offset + lo * r->ps), (off_t)((hi - lo) * r->ps), POSIX_FADV_DONTNEED);
    }
    r->npend_drop = 0;
    if (r->pend_ra >= 0) plan_read_ahead(r, (uint64_t)r->pend_ra);
    r->pend_ra = -1;
}

/* The batch for a fault at p: the rest of its chunk (the kernel's read-around would read
 * more), then, for a kept or streamed chunk, on along the chain (plan_succ). Once regrets
 * stopped evict-after-use, the whole batch depth. */
static uint64_t plan_pages(pgr_region *r, uint64_t p, int64_t *out, uint64_t max) {
    /* at most half a chunk while evicting after use: every chunk then takes a miss, which
     * is how the pager learns the program entered it */
    if (!r->st.plan_stream_off && max > r->chunk_pages / 2) max = r->chunk_pages / 2 ? r->chunk_pages / 2 : 1;
    /* a miss out of order outside the keep set, in a chunk the plan names no successor for,
     * is a lookup (a B-tree's point query): the page and a few after it, not half a chunk
     * the budget would evict unread */
    uint64_t c = chunk_of(r, p), n = 0, lo, hi;
    int unnamed = c >= r->nchunks || r->pnext[c] < 0;
    if (!r->in_order && r->cls[p] != PC_CLASS_KEEP && unnamed && max > PLAN_LOOKUP_PAGES) max = PLAN_LOOKUP_PAGES;
    chunk_range(r, c, &lo, &hi);
    for (uint64_t q = p + 1; q < hi && n < max; q++) out[n++] = (int64_t)q;
    if (r->cls[p] == PC_CLASS_OTHER) return n;
    int64_t ch[PLAN_MAX_AHEAD];
    uint64_t nch = plan_chain(r, c, ch, r->pf_chunks < PLAN_MAX_AHEAD ? r->pf_chunks : PLAN_MAX_AHEAD);
    for (uint64_t i = 0; i < nch && n < max; i++) {
        chunk_range(r, (uint64_t)ch[i], &lo, &hi);
        for (uint64_t q = lo; q < hi && n < max; q++) out[n++] = (int64_t)q;
    }
    return n;
}

/* ---- prefetch policies ------------------------------------------------------------- */

/* The stride step (native/policy/pc_policy.h, the rule of policies/stride.py) is told the
 * events the simulator would show it: misses and first uses of prefetched pages. The
 * pager sees no first use of a page it mapped (no accessed bits in user space), so before
 * a miss that continues the stride k steps on, the k - 1 pages in between that are
 * resident — served without a fault, by the prefetches along that stride — are shown to
 * it first as the hits it could not observe. */
static uint64_t stride_pages(pgr_region *r, uint64_t p, int64_t *out, uint64_t max) {
    pc_stride_state *s = &r->stride;
    int64_t degree = r->cfg.depth > 0 ? r->cfg.depth : 0, np = (int64_t)r->npages;
    if (s->last >= 0 && s->stride != 0 && s->conf >= r->cfg.min_conf) {
        int64_t d = (int64_t)p - s->last, k = d / s->stride;
        if (d % s->stride == 0 && k >= 2 && k <= degree + 1) {
            int64_t j = 1;
            while (j < k && (r->state[s->last + j * s->stride] & ST_RES)) j++;
            if (j == k)
                for (j = 1; j < k; j++) pc_stride_step(s, s->last + s->stride, degree, r->cfg.min_conf, np, out, max);
        }
    }
    return pc_stride_step(s, (int64_t)p, degree, r->cfg.min_conf, np, out, max);
}

/* The first page of the learned set at or after q; r->npages when there is none. */
static uint64_t next_learned(const pgr_region *r, uint64_t q) {
    while (q < r->npages) {
        uint64_t w = r->learned[q >> 6] >> (q & 63);
        if (w) {
            q += (uint64_t)__builtin_ctzll(w);
            return q < r->npages ? q : r->npages;
        }
        q = (q | 63) + 1;
    }
    return r->npages;
}

static uint64_t policy_pages(pgr_region *r, uint64_t p, int64_t *out, uint64_t max) {
    uint64_t n = 0;
    switch (r->cfg.policy) {
        case PC_POLICY_NEXTLINE: {
            int64_t window = (r->cfg.depth > 0 ? r->cfg.depth : 0) + 1;
            int64_t before = r->cfg.before < 0 ? window / 2 : r->cfg.before < window ? r->cfg.before : window - 1;
            n = pc_nextline_step((int64_t)p, 0, before, window, (int64_t)r->npages, out, max);
            break;
        }
        case PC_POLICY_STRIDE:
            n = stride_pages(r, p, out, max);
            break;
        case PC_POLICY_SPARSE:
            /* The learned set in increasing order (the workload is monotone): next N members. */
            r->learned[p >> 6] |= 1ull << (p & 63);
            for (uint64_t q = next_learned(r, p + 1); q < r->npages && n < max; q = next_learned(r, q + 1))
                out[n++] = (int64_t)q;
            break;
        case PC_POLICY_TABLE:
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

int copy_pages(pgr_region *r, uint64_t p, const uint8_t *src, uint64_t npg, int wp, int wake) {
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
            posix_fadvise(r->fd, (off_t)(r->file_offset + (uint64_t)a * r->ps), (off_t)((uint64_t)(b - a + 1) * r->ps),
                          POSIX_FADV_WILLNEED);
        a = b = q;
    }
    if (a >= 0)
        posix_fadvise(r->fd, (off_t)(r->file_offset + (uint64_t)a * r->ps), (off_t)((uint64_t)(b - a + 1) * r->ps),
                      POSIX_FADV_WILLNEED);
    for (uint64_t k = i; k < n; k++) {
        int64_t q = r->batch[k];
        if (q - hi <= IO_GAP) {
            hi = q;
            continue;
        }
        posix_fadvise(r->fd, (off_t)(r->file_offset + (uint64_t)lo * r->ps), (off_t)((uint64_t)(hi - lo + 1) * r->ps),
                      POSIX_FADV_WILLNEED);
        lo = hi = q;
    }
    posix_fadvise(r->fd, (off_t)(r->file_offset + (uint64_t)lo * r->ps), (off_t)((uint64_t)(hi - lo + 1) * r->ps),
                  POSIX_FADV_WILLNEED);
}

/* Read-ahead of the window after the batch (pages only, into the page cache): its I/O
 * overlaps the program's work on this batch, so the next fault finds its pages cached.
 * Only for policies whose next window is known without changing their state. */
static void lookahead_io(pgr_region *r, uint64_t last, uint64_t max) {
    if (r->cfg.policy == PC_POLICY_NEXTLINE) {
        uint64_t end = last + 1 + max < r->npages ? last + 1 + max : r->npages;
        if (end > last + 1)
            posix_fadvise(r->fd, (off_t)(r->file_offset + (last + 1) * r->ps), (off_t)((end - last - 1) * r->ps),
                          POSIX_FADV_WILLNEED);
        return;
    }
    if (r->cfg.policy != PC_POLICY_SPARSE) return;
    uint64_t k = 0;
    for (uint64_t q = next_learned(r, last + 1); q < r->npages && k < max; q = next_learned(r, q + 1), k++) {
        if (r->file_offset + q * r->ps >= r->valid_end) break;
        if (!(r->state[q] & ST_RES))
            posix_fadvise(r->fd, (off_t)(r->file_offset + q * r->ps), (off_t)r->ps, POSIX_FADV_WILLNEED);
    }
}

/* The prefetch batch of a fault on p: the policy's (or plan's) candidates that are in range,
 * not resident, not pinned and before the file's end, pinned and sorted in r->batch, at
 * most budget-1 of them (``maxpf``, also returned). p is pinned too. */
static uint64_t pin_batch(pgr_region *r, uint64_t p, int64_t t, uint64_t *maxpf_out) {
    uint64_t maxpf = (uint64_t)(r->cfg.depth > 0 ? r->cfg.depth : 0);
    if (maxpf > r->cap - 1) maxpf = r->cap - 1;
    *maxpf_out = maxpf;
    if (r->cls) plan_enter(r, p, t);
    uint64_t cand = r->cls ? plan_pages(r, p, r->batch, maxpf) : policy_pages(r, p, r->batch, maxpf);
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
    return n;
}

/* The first n pages of r->batch (sorted, placed in the ring) installed: one pread and one
 * UFFDIO_COPY per contiguous run, not woken. Pages that could not be installed are unpinned. */
static void install_prefetched(pgr_region *r, uint64_t n, int64_t t) {
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
        ((r->state[p] & ST_PIN) || (r->pack_pos[p] >= 0 && (uint64_t)r->pack_pos[p] < r->pack->hi + r->pack->defer))) {
        r->dfr[r->ndfr++] = (struct deferred){(int64_t)p, write, tid};
        r->st.pack_deferred++;
        log_rec(r, t, (int64_t)p, PGR_REC_FAULT, (write ? PGR_RF_WRITE : 0) | PGR_RF_PACK, tid);
        return;
    }
    uint64_t maxpf;
    uint64_t n = pin_batch(r, p, t, &maxpf);
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
    r->vcap = n + 1;
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
    flush_victims(r);

    install_prefetched(r, n, t);
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

/* pgr_check_size with mu held. */
static long resized_locked(pgr_region *r, int64_t t) {
    struct stat sb;
    if (fstat(r->fd, &sb) < 0) return -1;
    uint64_t now = (uint64_t)sb.st_size < r->map_end ? (uint64_t)sb.st_size : r->map_end;
    long n = 0;
    if (now < r->valid_end) {
        /* from the page the new end falls in: it is written back up to the end and read again */
        uint64_t first = now <= r->file_offset ? 0 : (now - r->file_offset) / r->ps;
        for (uint64_t p = first; p < r->npages; p++)
            if ((r->state[p] & ST_RES) && !(r->state[p] & ST_PIN) && evict(r, p, t) == 0) n++;
    }
    r->valid_end = now;
    return n;
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
        if (r->cls) plan_after_wake(r);
    }
    r->ndfr = 0;
}

static void *handler_main(void *arg) {
    pgr_region *r = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    struct uffd_msg msgs[MAXMSG];
    struct pollfd pf[3] = {{.fd = r->uffd, .events = POLLIN},
                           {.fd = r->stop_pipe[0], .events = POLLIN},
                           {.fd = r->pack_efd, .events = POLLIN}};
    /* Periodic write-back bounds what a SIGKILL can lose (the kernel's dirty_expire does
     * the same for page-cache pages, which survive the process anyway). */
    int64_t period = (int64_t)(r->cfg.flush_ms > 0 ? r->cfg.flush_ms : 0) * 1000000LL;
    int64_t next_flush = period ? now_ns() + period : INT64_MAX;
    for (;;) {
        if (period && now_ns() >= next_flush) {
            pthread_mutex_lock(&r->mu);
            resized_locked(r, now_ns()); /* a truncate pagecast did not see (another process, O_TRUNC) */
            log_flush(r);
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
            if (r->cls) plan_after_wake(r);
        }
        /* A fault deferred just as the loader ended: its eventfd may already be consumed. */
        if (r->ndfr && r->st.pack_state != PGR_PACK_RUNNING) serve_deferred(r);
        pthread_mutex_unlock(&r->mu);
    }
    return NULL;
}

/* The page-pack loader (pgr_pack_start) is in pack.c. */

int pread_full(int fd, void *dst, uint64_t n, uint64_t off) {
    uint64_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (uint8_t *)dst + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        got += (uint64_t)k;
    }
    return 0;
}

/* ---- open / close ------------------------------------------------------------------ */

static int load_learned(pgr_region *r) {
    int fd = open(r->learn_path,
                  O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK); /* saved by rename: never a link or a FIFO */
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    char magic[8];
    uint64_t np = 0;
    int ok = read(fd, magic, 8) == 8 && memcmp(magic, "PGCBITS1", 8) == 0 && read(fd, &np, 8) == 8 && np == r->npages &&
             read(fd, r->learned, r->nwords * 8) == (ssize_t)(r->nwords * 8);
    close(fd);
    if (!ok) memset(r->learned, 0, r->nwords * 8);
    return ok ? 0 : -1;
}

int pgr_save_learned(pgr_region *r, const char *path) {
    char tmp[PATH_MAX + 32];
    if (foreign(r)) return -1;
    int fd = pc_out_temp(path, tmp, sizeof tmp); /* exclusive, random name: never through a planted link */
    if (fd < 0) return -1;
    pthread_mutex_lock(&r->mu);
    uint64_t np = r->npages;
    int ok = write(fd, "PGCBITS1", 8) == 8 && write(fd, &np, 8) == 8 &&
             write(fd, r->learned, r->nwords * 8) == (ssize_t)(r->nwords * 8);
    pthread_mutex_unlock(&r->mu);
    ok = close(fd) == 0 && ok;
    return pc_out_commit(ok, tmp, path);
}

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
    free(r->vict);
    free(r->log);
    free(r->samples);
    free(r->slot);
    free(r->cls);
    free(r->pnext);
    free(r->freef);
    free(r->ra);
    free(r->gone_at);
    free(r->wbuf);
    free(r->ebuf);
    if (r->twins) sys_munmap(r->twins, r->cap * r->ps);
    free(r);
}

/* The arguments of pgr_open_fd checked against the file (``sb``); a length of 0 becomes
 * the rest of the file. -1 with the error set. */
static int check_open_args(int fd_in, const char *path, uint64_t offset, uint64_t *length, const pgr_config *cfg,
                           long ps, struct stat *sb) {
    if (!cfg || cfg->budget_pages < 1) {
        set_err("budget must be at least one page");
        errno = EINVAL;
        return -1;
    }
    if (offset % (uint64_t)ps) {
        set_err("%s: offset %llu is not page aligned", path, (unsigned long long)offset);
        errno = EINVAL;
        return -1;
    }
    if (fstat(fd_in, sb) < 0) {
        set_err("%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(sb->st_mode)) {
        set_err("%s: not a regular file", path);
        errno = EINVAL;
        return -1;
    }
    if (*length == 0) {
        if ((uint64_t)sb->st_size <= offset) {
            set_err("%s: empty file (nothing to map)", path);
            errno = EINVAL;
            return -1;
        }
        *length = (uint64_t)sb->st_size - offset;
    }
    return 0;
}

/* The region's page state, eviction ring, read buffers and logs, sized by its pages, its
 * budget and the read depth; with write-back, the twins of written pages. -1: out of memory. */
static int alloc_region_buffers(pgr_region *r, const pgr_config *cfg) {
    uint64_t maxb = (uint64_t)(cfg->depth > 0 ? cfg->depth : 0) + 1;
    r->nwords = (r->npages + 63) / 64;
    r->state = calloc(r->npages, 1);
    r->ring = malloc(r->cap * sizeof(int64_t));
    r->learned = calloc(r->nwords, 8);
    r->buf = malloc(maxb * r->ps);
    r->dbuf = malloc(r->ps);
    r->batch = malloc((maxb + 1) * sizeof(int64_t));
    r->vict = malloc((maxb + 1) * sizeof(int64_t));
    r->logcap = 2 * maxb + 2;
    r->log = malloc(r->logcap * sizeof(pgr_log_rec));
    r->samples = malloc(NSAMPLES * sizeof(uint32_t));
    pthread_mutex_init(&r->mu, NULL);
    if (!r->state || !r->ring || !r->learned || !r->buf || !r->dbuf || !r->batch || !r->vict || !r->log ||
        !r->samples) {
        set_err("out of memory");
        return -1;
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
            return -1;
        }
        madvise(r->twins, r->cap * r->ps, MADV_DONTFORK);
    }
    return 0;
}

/* The region's own descriptor of the file, its memory registered with userfaultfd, its
 * log header, stop pipe and pack eventfd, and its fault handler thread. -1 with the error set. */
static int start_region(pgr_region *r, int fd_in, const char *path, void *addr, int fixed, int prot) {
    r->fd = pc_fd_high_or_keep(fcntl(fd_in, F_DUPFD_CLOEXEC, 3));
    if (r->fd < 0) {
        set_err("%s: dup: %s", path, strerror(errno));
        return -1;
    }
    int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (fixed ? MAP_FIXED : 0);
    r->base = sys_mmap(addr, r->len, prot, mflags);
    if (r->base == MAP_FAILED) {
        r->base = NULL;
        set_err("%s: mmap of %llu bytes: %s", path, (unsigned long long)r->len, strerror(errno));
        return -1;
    }
    /* A forked child would see unregistered anonymous memory (zeros): give it nothing. */
    madvise(r->base, r->len, MADV_DONTFORK);
    struct uffdio_register reg = {
        .range = {.start = (uint64_t)(uintptr_t)r->base, .len = r->len},
        .mode = UFFDIO_REGISTER_MODE_MISSING | (r->wp ? UFFDIO_REGISTER_MODE_WP : 0),
    };
    if (ioctl(r->uffd, UFFDIO_REGISTER, &reg) < 0) {
        set_err("%s: UFFDIO_REGISTER: %s", path, strerror(errno));
        return -1;
    }
    if (r->cfg.log_fd >= 0 && write_log_header(r) < 0) {
        set_err("%s: writing the fault log header: %s", path, strerror(errno));
        return -1;
    }
    if (pipe2(r->stop_pipe, O_CLOEXEC) < 0) {
        set_err("pipe: %s", strerror(errno));
        return -1;
    }
    r->stop_pipe[0] = pc_fd_high_or_keep(r->stop_pipe[0]);
    r->stop_pipe[1] = pc_fd_high_or_keep(r->stop_pipe[1]);
    r->pack_efd = pc_fd_high_or_keep(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (r->pack_efd < 0) {
        set_err("eventfd: %s", strerror(errno));
        return -1;
    }
    if (pthread_create(&r->thr, NULL, handler_main, r) != 0) {
        set_err("cannot start the fault handler thread");
        return -1;
    }
    r->thr_started = 1;
    return 0;
}

pgr_region *pgr_open_fd(int fd_in, const char *path, uint64_t offset, uint64_t length, const pgr_config *cfg,
                        void *addr, int fixed, int prot) {
    long ps = sysconf(_SC_PAGESIZE);
    struct stat sb;
    if (check_open_args(fd_in, path, offset, &length, cfg, ps, &sb) < 0) return NULL;
    char why[400];
    int feat = 0;
    /* every descriptor of a region goes high (highfd.h): under the shim they live in the
     * program, whose own open() calls must get the numbers they get without the pager */
    int uffd = pc_fd_high_or_keep(uffd_create(&feat, why, sizeof why));
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
    r->first_page = offset / r->ps;
    uint64_t fend = offset + length;
    r->valid_end = (uint64_t)sb.st_size < fend ? (uint64_t)sb.st_size : fend;
    r->map_end = fend;
    r->cap = cfg->budget_pages < r->npages ? cfg->budget_pages : r->npages;
    /* PAGECAST_PAGER_NO_WP=1 (tests): behave as on a kernel without userfaultfd WP */
    const char *nowp = getenv("PAGECAST_PAGER_NO_WP");
    r->wp = (feat & UFFD_FEATURE_PAGEFAULT_FLAG_WP) != 0 && !(nowp && *nowp == '1');
    if (cfg->writeback && !r->wp) {
        /* Without write-protect nothing stops a thread writing a page between its
         * write-back and its drop at eviction: that write would be lost. Refused instead. */
        set_err("%s: userfaultfd write-protect is unavailable here (Linux >= 5.7 has it): a writable shared "
                "mapping could lose writes at eviction",
                path);
        errno = EOPNOTSUPP;
        goto fail;
    }
    r->st.wp_enabled = r->wp;
    pc_stride_init(&r->stride);
    r->hist[0] = r->hist[1] = -1;
    r->pend_ra = -1;
    r->t0 = now_ns();
    snprintf(r->path, sizeof r->path, "%s", path);
    if (cfg->learn_path) snprintf(r->learn_path, sizeof r->learn_path, "%s", cfg->learn_path);
    r->cfg.learn_path = r->learn_path[0] ? r->learn_path : NULL;
    if (alloc_region_buffers(r, cfg) < 0) goto fail;
    if (r->learn_path[0] && load_learned(r) < 0)
        fprintf(stderr, "pagecast pager: %s: ignoring learned pages file %s (unreadable or other size)\n", path,
                r->learn_path);
    if (start_region(r, fd_in, path, addr, fixed, prot) < 0) goto fail;
    return r;
fail:
    {
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

pgr_region *pgr_open(const char *path, uint64_t offset, uint64_t length, const pgr_config *cfg, void *addr, int fixed,
                     int prot) {
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

void *pgr_base(pgr_region *r) {
    return r->base;
}
uint64_t pgr_length(pgr_region *r) {
    return r->len;
}

/* In a forked child the region's lock may be held by a thread that stayed in the parent,
 * and its memory is not mapped (MADV_DONTFORK): every call but pgr_close refuses. */
int foreign(pgr_region *r) {
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

long pgr_check_size(pgr_region *r) {
    if (foreign(r)) return -1;
    pthread_mutex_lock(&r->mu);
    long n = resized_locked(r, now_ns());
    log_flush(r);
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
    r->nfree = 0;
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
            if (!rc) fprintf(stderr, "pagecast pager: %s: write-back at close failed: %s\n", r->path, strerror(errno));
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
            snprintf(why, whylen, "offset %llu (%llu) is out of order or past the %llu listed pages",
                     (unsigned long long)i + 1, (unsigned long long)offsets[i + 1], (unsigned long long)npages_listed);
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
    struct stat sb;
    int fd = pc_open_regular(path, O_RDONLY, &sb); /* a FIFO in the table's place must not block the program */
    if (fd < 0) {
        set_err("pager table %s: %s", path, pc_open_why(errno));
        return -1;
    }
    uint64_t size = (uint64_t)sb.st_size;
    const char *why = NULL;
    char whybuf[200];
    uint8_t *raw = NULL;
    if (!S_ISREG(sb.st_mode))
        why = "not a regular file";
    else if (size < 16 + 16 + 2)
        why = "too short to be a pager table";
    else if (size > (1ull << 40))
        why = "larger than 1 TiB";
    else if (!(raw = malloc(size)))
        why = "out of memory";
    else if (pread_full(fd, raw, size, 0) < 0)
        why = "read failed";
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
        if (!t->off)
            why = "out of memory";
        else {
            memcpy(t->off, raw + 16, (np + 1) * 8);
            total = t->off[np];
            if (total > (size - pages_at) / 8) why = "the offsets name more entries than the file holds (truncated?)";
        }
    }
    if (!why) {
        t->pages = malloc((total ? total : 1) * 8);
        if (!t->pages)
            why = "out of memory";
        else {
            memcpy(t->pages, raw + pages_at, total * 8);
            if (!table_valid(t->off, t->pages, np, total, whybuf, sizeof whybuf)) why = whybuf;
        }
    }
    if (!why) {
        uint64_t at = pages_at + total * 8, rem = size - at;
        const uint8_t *nul = rem ? memchr(raw + at, 0, rem) : NULL;
        if (!nul || rem < 2)
            why = "no NUL-terminated data file path after the entries (truncated?)";
        else if ((uint64_t)(nul - raw) != size - 1)
            why = "bytes after the data file path (padded?)";
        else if (rem > PATH_MAX)
            why = "data file path longer than PATH_MAX";
        else
            memcpy(t->src, raw + at, rem);
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
        set_err("pager table %s covers %llu pages, the mapping of %s has %llu", path, (unsigned long long)t.npages,
                r->path, (unsigned long long)r->npages);
        free(t.off);
        free(t.pages);
        return -1;
    }
    table_install(r, t.off, t.pages);
    return 0;
}

/* Memory plan map: see pager.h (PGR_MAP_MAGIC). Every field is checked against the file's
 * size before use. */
typedef struct {
    uint64_t npages, chunk_pages, pf_chunks, nchunks;
    uint8_t *cls;
    int64_t *next;
    char src[PATH_MAX];
} plan_map;

static const char *plan_map_check(const uint8_t *raw, uint64_t size, plan_map *m) {
    if (size < 40 + 2) return "too short to be a memory plan map";
    if (memcmp(raw, PGR_MAP_MAGIC, 6) != 0 || raw[6] != '0' + PGR_MAP_VERSION || raw[7] != 0)
        return "not a memory plan map of this version (bad magic)";
    memcpy(&m->npages, raw + 8, 8);
    memcpy(&m->chunk_pages, raw + 16, 8);
    memcpy(&m->pf_chunks, raw + 24, 8);
    memcpy(&m->nchunks, raw + 32, 8);
    if (m->npages == 0 || m->chunk_pages == 0 || m->npages > size)
        return "page count or chunk size is zero or does not fit the file";
    if (m->nchunks != (m->npages + m->chunk_pages - 1) / m->chunk_pages) return "chunk count does not match the pages";
    uint64_t next_at = 40 + (m->npages + 7) / 8 * 8;
    if (next_at > size || m->nchunks > (size - next_at) / 8) return "the classes and chains do not fit the file";
    if (m->pf_chunks > m->nchunks) return "prefetch distance larger than the file";
    for (uint64_t i = 0; i < m->npages; i++)
        if (raw[40 + i] > PC_CLASS_STREAM) return "a page class is not keep, stream or other";
    for (uint64_t i = 0; i < m->nchunks; i++) {
        int64_t v;
        memcpy(&v, raw + next_at + 8 * i, 8);
        if (v < -1 || v >= (int64_t)m->nchunks) return "a next chunk is outside the file";
    }
    uint64_t at = next_at + 8 * m->nchunks, rem = size - at;
    const uint8_t *nul = rem ? memchr(raw + at, 0, rem) : NULL;
    if (!nul || rem < 2 || (uint64_t)(nul - raw) != size - 1 || rem > PATH_MAX)
        return "no NUL-terminated data file path ending the file";
    memcpy(m->src, raw + at, rem);
    m->cls = malloc(m->npages);
    m->next = malloc(m->nchunks * 8);
    if (!m->cls || !m->next) return "out of memory";
    memcpy(m->cls, raw + 40, m->npages);
    memcpy(m->next, raw + next_at, m->nchunks * 8);
    return NULL;
}

int pgr_plan_load(pgr_region *r, const char *path) {
    if (foreign(r)) return -1;
    struct stat sb;
    int fd = pc_open_regular(path, O_RDONLY, &sb);
    if (fd < 0) {
        set_err("memory plan map %s: %s", path, pc_open_why(errno));
        return -1;
    }
    uint64_t size = (uint64_t)sb.st_size;
    plan_map m = {0};
    const char *why = NULL;
    uint8_t *raw = NULL;
    if (!S_ISREG(sb.st_mode))
        why = "not a regular file";
    else if (size > (1ull << 40))
        why = "larger than 1 TiB";
    else if (!(raw = malloc(size ? size : 1)))
        why = "out of memory";
    else if (pread_full(fd, raw, size, 0) < 0)
        why = "read failed";
    else
        why = plan_map_check(raw, size, &m);
    close(fd);
    free(raw);
    struct stat want, st;
    int other = !why && (fstat(r->fd, &want) < 0 || stat(m.src, &st) < 0 || st.st_dev != want.st_dev ||
                         st.st_ino != want.st_ino);
    uint8_t *cls = NULL;
    uint64_t *freef = NULL, *gone_at = NULL, *ra = NULL;
    uint32_t *slot = r->slot;
    if (!why && !other) {
        cls = calloc(r->npages, 1);
        freef = malloc(r->cap * sizeof *freef);
        ra = calloc(m.nchunks, sizeof *ra);
        gone_at = calloc(m.nchunks, sizeof *gone_at);
        if (!slot && (slot = malloc(r->npages * sizeof *slot))) memset(slot, 0xff, r->npages * sizeof *slot);
        if (!cls || !freef || !slot || !ra || !gone_at) why = "out of memory";
    }
    if (why || other) {
        if (why) set_err("memory plan map %s: %s", path, why);
        free(m.cls);
        free(m.next);
        free(cls);
        free(freef);
        free(ra);
        free(gone_at);
        if (slot != r->slot) free(slot);
        return why ? -1 : 1;
    }
    for (uint64_t p = 0; p < r->npages; p++)
        cls[p] = r->first_page + p < m.npages ? m.cls[r->first_page + p] : PC_CLASS_OTHER;
    free(m.cls);
    pthread_mutex_lock(&r->mu);
    r->slot = slot;
    r->pnext = m.next;
    r->nchunks = m.nchunks;
    r->chunk_pages = m.chunk_pages;
    r->pf_chunks = m.pf_chunks;
    uint64_t room = 2 * ((uint64_t)(r->cfg.depth > 0 ? r->cfg.depth : 0) + 1);
    r->keep_max = r->cap > room ? r->cap - room : 0;
    r->freef = freef;
    r->ra = ra;
    r->gone_at = gone_at;
    /* The plan reads ahead along its chain itself: the kernel's read-ahead on the pager's
     * reads (up to the device's window, 8 MiB on some disks) would fill the limit with pages
     * evicted unread and read again. A descriptor of its own, so the program's is untouched. */
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", r->fd);
    int rfd = r->cfg.writeback ? -1 : open(self, O_RDONLY | O_CLOEXEC);
    if (rfd >= 0) {
        posix_fadvise(rfd, 0, 0, POSIX_FADV_RANDOM);
        close(r->fd);
        r->fd = pc_fd_high_or_keep(rfd);
    }
    r->cls = cls; /* last: the handler reads the plan once cls is set */
    pthread_mutex_unlock(&r->mu);
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
