/* pagecast page-pack loader: a learned cold start streamed from one sequential file into
 * a pager region (pgr_pack_start, see pager.h and docs/pager.md, "Page packs"). Loader
 * threads read the pack in large chunks and map each page into the region with
 * UFFDIO_COPY through the core's helpers (pager_internal.h); the core's fault handler
 * leaves a fault just ahead of the loader to it. */
#define _GNU_SOURCE
#include "pack.h"
#include "highfd.h"
#include "infile.h"
#include "pager.h"
#include "pager_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- page pack: sequential cold start ------------------------------------------------ */

uint64_t pgr_pack_sum(const uint64_t *w, uint64_t nwords) {
    uint64_t h = nwords;
    for (uint64_t i = 0; i < nwords; i++) h += (w[i] ^ 0x9e3779b97f4a7c15ull) * (2 * i + 1);
    return h;
}

#define PACK_READ_BLOCKS 8  /* blocks per read after the first (PAGECAST_PAGER_PACK_CHUNK): 2 MiB */
#define PACK_LOCK_PAGES  16 /* pages claimed per hold of the region lock: faults interleave */

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
            if (p < 0) continue;                     /* outside the region */
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
        const char *why = err    ? "UFFDIO_COPY failed"
                          : full ? "memory budget full"
                          : hook ? "stopped early (test hook PAGECAST_PAGER_PACK_STOP_AFTER)"
                                 : NULL;
        if (why) {
            pthread_mutex_lock(&r->mu);
            if (!k->why[0])
                snprintf(k->why, sizeof k->why, "%s%s%s after %llu pages", why, err ? ": " : "",
                         err ? strerror(err) : "", (unsigned long long)r->st.pack_installed);
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
    if (k->why[0])
        fprintf(stderr, "pagecast pager: page pack %s: %s; the rest is served from %s\n", k->path, k->why, r->path);
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
 * single read in flight left it idle between reads (the wake-up of the next reader),
 * a large part of the stream's speed (BENCHMARKS.md, "Figures moved out of the code").
 * A demand read (a fault on a page not in the pack) in flight holds the *next* loader
 * read back, so the miss waits only for reads already queued. Returns 1 with [*i, *end) in buf, 0 at the end,
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

void pack_free(struct pgr_pack *k) {
    if (!k) return;
    if (k->fd >= 0) close(k->fd);
    if (k->dfd >= 0) close(k->dfd);
    free(k->rpage);
    free(k->sums);
    for (int i = 0; i < PACK_MAX_THREADS; i++) free(k->buf[i]);
    free(k);
}

/* The pack's header against this pagecast, its own size (``ps_st``) and the mapped file as it
 * is now (``cur``). -1 with the error set. */
static int check_header(const pgr_region *r, const char *pack_path, const struct pack_header *h,
                        const struct stat *ps_st, const struct stat *cur, uint64_t data_off) {
    if (h->version != PGR_PACK_VERSION) {
        set_err("page pack %s: unsupported version %u (this pagecast reads %d)", pack_path, h->version,
                PGR_PACK_VERSION);
        return -1;
    }
    if (h->page_size != r->ps || h->block_pages < 1 || h->block_pages > (1u << 16) || h->npages > (1ull << 31) - 1 ||
        h->index_offset != PGR_PACK_HEADER || h->data_offset != data_off) {
        set_err("page pack %s: malformed header (page size %u)", pack_path, h->page_size);
        return -1;
    }
    if ((uint64_t)ps_st->st_size != data_off + h->npages * r->ps) {
        set_err("page pack %s: truncated or padded: %llu bytes, the header says %llu", pack_path,
                (unsigned long long)ps_st->st_size, (unsigned long long)(data_off + h->npages * r->ps));
        return -1;
    }
    if ((uint64_t)cur->st_size != h->src_size ||
        (int64_t)cur->st_mtim.tv_sec * 1000000000LL + cur->st_mtim.tv_nsec != h->src_mtime_ns ||
        (int64_t)cur->st_ctim.tv_sec * 1000000000LL + cur->st_ctim.tv_nsec != h->src_ctime_ns ||
        (uint64_t)cur->st_ino != h->src_ino || (uint64_t)cur->st_dev != h->src_dev) {
        set_err("page pack %s is stale: %s changed since the pack was built (size/mtime/ctime/inode differ); ignored",
                pack_path, r->path);
        return -1;
    }
    return 0;
}

/* Each pack page's page in the region (``k->rpage``, -1: outside it or past the file's end)
 * and each region page's first place in the pack (``pos``, -1: none); returns the region
 * pages the pack holds. */
static uint64_t place_pack_pages(const pgr_region *r, struct pgr_pack *k, const uint64_t *idx, int32_t *pos) {
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
    return inside;
}

static int start_loaders(pgr_region *r, struct pgr_pack *k, const char *pack_path);

int pgr_pack_start(pgr_region *r, const char *pack_path, uint64_t defer, uint64_t stop_after, int threads) {
    _Static_assert(sizeof(struct pack_header) == PGR_PACK_HEADER, "pack header size");
    if (foreign(r)) return -1;
    if (r->pack) {
        set_err("%s: a page pack is already loading for %s", pack_path, r->path);
        return -1;
    }
    struct pack_header h;
    struct stat ps_st, src, cur;
    int fd = pc_fd_high_or_keep(pc_open_regular(pack_path, O_RDONLY, &ps_st)); /* never blocks on a FIFO */
    if (fd < 0) {
        set_err("page pack %s: %s", pack_path, pc_open_why(errno));
        return -1;
    }
    if (pread_full(fd, &h, sizeof h, 0) < 0 || memcmp(h.magic, PGR_PACK_MAGIC, 8) != 0) {
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
    if (check_header(r, pack_path, &h, &ps_st, &cur, data_off) < 0) {
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
    struct stat dst;
    k->dfd = dio && *dio == '0' ? -1 : pc_fd_high_or_keep(pc_open_regular(pack_path, O_RDONLY | O_DIRECT, &dst));
    if (k->dfd >= 0 && (dst.st_dev != ps_st.st_dev || dst.st_ino != ps_st.st_ino)) { /* replaced meanwhile */
        close(k->dfd);
        k->dfd = -1;
    }
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
    uint64_t inside = place_pack_pages(r, k, idx, pos);
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
    return start_loaders(r, k, pack_path);
}

/* The loader threads. Several: while the program waits for its next page, the idle core maps
 * pages too. -1 with the error set when none could start. */
static int start_loaders(pgr_region *r, struct pgr_pack *k, const char *pack_path) {
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
