/* Internals shared by the pager core (pager.c) and the page-pack loader (pack.c): the
 * region, the pack, the page-state flags and the core's helpers the loader calls. Not
 * part of the API (pager.h); hidden from the symbols a shared object exports, so the
 * LD_PRELOAD shim adds no names to the program it is loaded into. */
#ifndef PAGECAST_PAGER_INTERNAL_H
#define PAGECAST_PAGER_INTERNAL_H

#include "pager.h"
#include "policy/pc_policy.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>

#define PGR_HIDDEN __attribute__((visibility("hidden")))

#define ST_RES   1u
#define ST_DIRTY 2u
#define ST_REF   4u
#define ST_PF    8u  /* prefetched, no access observed yet */
#define ST_PIN   16u /* part of the batch being installed: not a victim */

#define NSAMPLES (1u << 20)
#define MAXMSG   64

struct pgr_region {
    uint8_t *base;
    uint64_t len, npages, ps;
    uint64_t file_offset;
    uint64_t valid_end; /* file offset of the end of mapped file data (at open; moved by a resize) */
    uint64_t map_end;   /* file offset of the end of the mapping */
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
    pc_stride_state stride; /* stride policy */
    uint8_t *buf;           /* staging for one batch */
    uint8_t *dbuf;          /* staging for the demanded page */
    int64_t *batch;         /* pages of the current batch */
    int64_t *vict;          /* clean victims of the current batch, unmapped together (flush_victims) */
    uint64_t nvict, vcap;   /* vcap 0: victims are unmapped one by one, as evicted */
    pgr_log_rec *log;       /* records of the current batch */
    uint64_t nlog, logcap;
    uint32_t *samples;
    int64_t t0;
    int64_t pending_wake; /* page whose faulting thread is woken after timing */
    int wp;
    int shrink_warned;
    pgr_stats st;
    /* page pack (pgr_pack_start) */
    int pack_efd; /* the loader's end-of-stream signal to the handler */
    struct pgr_pack *pack;
    int32_t *pack_pos;    /* region page -> its position j in the pack; -2-j once mapped (by anyone); -1 not in it */
    struct deferred *dfr; /* faults waiting for the loader */
    uint64_t ndfr, dfrcap;
    int miss_io; /* demand reads in flight (futex): loaders hold their next read meanwhile */
    /* Write-back regions: the page as it was when it became dirty ("twin", one per ring
     * slot), so a write-back writes only the bytes the program changed and never
     * overwrites what another writer put in the file meanwhile. */
    uint8_t *twins;       /* cap pages (NORESERVE: only dirty pages' twins are touched) */
    uint32_t *slot;       /* page -> its ring slot */
    uint8_t *wbuf, *ebuf; /* snapshot + file page scratch: write_back under mu / emergency */
    pid_t owner;          /* the process that opened the region (a forked child is not) */
    /* memory plan (pgr_plan_load, policy/pc_evict_plan.h): NULL cls = none */
    uint8_t *cls;         /* region page -> PC_CLASS_* */
    int64_t *pnext;       /* file chunk -> the chunk to prefetch after it, -1 none */
    uint64_t chunk_pages; /* pages per chunk */
    uint64_t nchunks;     /* chunks of the file */
    uint64_t first_page;  /* file page of region page 0 */
    uint64_t pf_chunks;   /* chunks read ahead along the next chain */
    uint64_t keep_max;    /* keep pages pinned at most (the rest of the budget streams) */
    int64_t hist[2];      /* the last two distinct chunks faulted in (pc_plan_enter) */
    uint64_t *freef;      /* frames freed by evict-after-use, taken first */
    uint64_t nfree;
    uint64_t *ra;      /* file chunk -> chunk entries counted when it was read ahead (0: not since evicted) */
    uint64_t *gone_at; /* file chunk -> chunk entries counted when it was evicted after use (0: not) */
    uint64_t entries;  /* chunk entries (pc_plan_enter) */
    uint64_t after_use_chunks;
    int in_order;         /* the program entered its last chunk in file order (plan_enter) */
    int64_t pend_ra;      /* chunk entered: read ahead from it after the wake-up (-1: none) */
    int64_t pend_drop[2]; /* chunks whose page-cache copies are dropped after the wake-up */
    int npend_drop;
};

struct deferred {
    int64_t page;
    int write, tid;
};

#define PACK_MAX_THREADS 8

struct pgr_pack {
    int fd;
    int dfd; /* the same file opened O_DIRECT (-1: not supported here, read through the page cache) */
    uint64_t n, block, data_off, nblocks, chunk; /* chunk: blocks per read after the first */
    int64_t *rpage;                              /* pack position -> region page, -1 outside the region */
    uint64_t *sums;                              /* per block */
    uint8_t *buf[PACK_MAX_THREADS];
    uint64_t next_chunk; /* chunks are claimed in order by the loader threads (atomic) */
    uint64_t hi;         /* end of the furthest chunk claimed (under r->mu) */
    uint64_t claimed;    /* pages claimed for installing so far (under r->mu; stop_after) */
    uint64_t defer, stop_after;
    int stop; /* set by pgr_close or by a thread that failed: the others stop too */
    int nthreads, live;
    pthread_t thr[PACK_MAX_THREADS];
    char why[200]; /* first failure */
    char path[PATH_MAX];
};

#define NO_SLOT UINT32_MAX /* a page without a ring slot (not resident, or no room was found) */

PGR_HIDDEN int foreign(pgr_region *r);
PGR_HIDDEN void set_err(const char *fmt, ...);
PGR_HIDDEN int64_t now_ns(void);
PGR_HIDDEN void log_rec(pgr_region *r, int64_t t, int64_t page, int kind, int flags, int tid);
PGR_HIDDEN void log_flush(pgr_region *r);
PGR_HIDDEN int ring_insert(pgr_region *r, uint64_t p, int64_t t);
PGR_HIDDEN int copy_pages(pgr_region *r, uint64_t p, const uint8_t *src, uint64_t npg, int wp, int wake);
PGR_HIDDEN int pread_full(int fd, void *dst, uint64_t n, uint64_t off);
PGR_HIDDEN void pack_free(struct pgr_pack *k);

#endif
