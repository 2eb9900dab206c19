/* pagecast userfaultfd pager: an anonymous region served page by page from a backing
 * file, with a resident-page budget, dirty write-back and batch prefetch.
 *
 * The fault handler is a native thread: it never calls back into Python (a Python
 * handler deadlocks when the faulting access holds the GIL).
 */
#ifndef PAGECAST_PAGER_H
#define PAGECAST_PAGER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Prefetch policies (chosen per region): the PC_POLICY_* ids of the policy registry,
 * native/policy/pc_policy_ids.h (none, nextline, stride, sparse, table). */
#include "policy/pc_policy_ids.h"

/* Binary fault log: a 4096-byte header, then fixed 24-byte records appended with one
 * write() per served fault (so a crash loses at most a torn last record). */
#define PGR_LOG_MAGIC   "PGCLOG1"
#define PGR_LOG_VERSION 1
#define PGR_LOG_HEADER  4096
enum { PGR_REC_FAULT = 8, PGR_REC_PREFETCH = 6, PGR_REC_EVICT = 7 }; /* = pagecast Kind */
enum {
    PGR_RF_WRITE = 1,      /* write fault */
    PGR_RF_PACK = 2,       /* fault left to the page-pack loader (the page was just ahead of it) */
    PGR_RF_LATE = 4,       /* fault on a page that was already resident (raced a batch) */
    PGR_RF_WP = 1 << 4,    /* subkind 1: write-protect fault (first write to a clean page) */
    PGR_RF_DIRTY = 1 << 5, /* subkind 2: eviction wrote the page back */
};

typedef struct pgr_log_header {
    char magic[8];
    uint32_t version;
    uint32_t page_size;
    uint64_t file_offset;
    uint64_t length;
    int64_t t0_ns; /* CLOCK_MONOTONIC at region open */
    int32_t pid;
    int32_t policy;
    uint64_t budget_pages;
    char path[4096 - 56];
} pgr_log_header;

typedef struct pgr_log_rec {
    int64_t t_ns; /* since t0_ns */
    int64_t page; /* file page (file_offset / page_size + region page) */
    uint8_t kind;
    uint8_t flags;
    uint16_t pad;
    int32_t tid;
} pgr_log_rec;

typedef struct pgr_config {
    uint64_t budget_pages;  /* resident-page budget (>= 1) */
    int policy;             /* PC_POLICY_* */
    int depth;              /* pages per prefetch batch (N) */
    int writeback;          /* 1: MAP_SHARED semantics (write dirty pages back); 0: private */
    int log_fd;             /* >= 0: append fault records here (header written by pgr_open) */
    int on_eof_sigbus;      /* fault beyond a shrunk file: 1 SIGBUS the thread (kernel-like), 0 zeros */
    const char *learn_path; /* sparse policy: load/save the learned page set here (may be NULL) */
    int flush_ms;           /* > 0: write dirty pages back every flush_ms (bounds SIGKILL loss) */
    int before;             /* nextline: pages below the fault (window = depth + 1); < 0: window / 2 */
    int min_conf;           /* stride: confidence needed to prefetch (policies/stride.py) */
} pgr_config;

typedef struct pgr_stats {
    uint64_t faults;        /* missing faults served (demand) */
    uint64_t wp_faults;     /* first writes to clean resident pages */
    uint64_t late_faults;   /* faults on pages already resident when served */
    uint64_t prefetched;    /* pages mapped by prefetch batches */
    uint64_t prefetch_hits; /* prefetched pages later seen accessed: user space sees writes only (docs/pager.md) */
    uint64_t prefetch_evicted_untouched; /* prefetched pages evicted with no observed access */
    uint64_t evictions;
    uint64_t writebacks;
    uint64_t writeback_skipped_eof; /* dirty pages wholly past a shrunk file's end */
    uint64_t eof_faults;            /* faults past the end of a shrunk file */
    uint64_t resident;
    uint64_t max_resident;
    uint64_t copy_ioctls; /* UFFDIO_COPY calls (a contiguous run is one call) */
    uint64_t bytes_read;
    uint64_t service_ns_total;
    uint64_t nsamples;  /* entries valid in the service-time sample ring */
    int32_t errors;     /* handler errors (first message in pgr_last_error) */
    int32_t wp_enabled; /* dirty tracking by write-protect (else every page is written back) */
    /* page pack (pgr_pack_start): a learned cold start streamed from one sequential file */
    uint64_t pack_pages;      /* pages of the pack inside this region */
    uint64_t pack_installed;  /* pages the loader mapped (UFFDIO_COPY) */
    uint64_t pack_skipped;    /* pack pages already resident (faulted first) when the loader got there */
    uint64_t pack_bytes_read; /* bytes read from the pack file (index + data) */
    uint64_t pack_deferred;   /* faults left to the loader (page just ahead of it) instead of read from the file */
    uint64_t pack_done_ns;    /* region open -> loader finished (0 while running / no pack) */
    int32_t pack_state;       /* PGR_PACK_* */
    int32_t pack_pad;
    /* memory plan (pgr_plan_load) */
    uint64_t plan_keep_resident; /* keep pages resident now: never evicted (pinned) */
    uint64_t plan_keep_demoted;  /* keep pages streamed: pinning them would leave the stream no room */
    uint64_t plan_after_use;     /* stream pages evicted once the program moved past their chunk */
    uint64_t plan_regrets;       /* chunks evicted after use that the program came back to at once */
    uint64_t plan_stream_off;    /* 1: regrets stopped evict-after-use for this region */
    uint64_t unmap_calls;        /* MADV_DONTNEED calls that evicted pages (neighbours go in one) */
    uint64_t plan_scan_ahead;    /* chunks read ahead along a scan the plan named no chain for */
} pgr_stats;

enum { PGR_PACK_NONE = 0, PGR_PACK_RUNNING = 1, PGR_PACK_DONE = 2, PGR_PACK_STOPPED = 3 };

/* Prefetch table file (pgr_table_check): "PGCTAB" + the version as one ASCII digit + NUL,
 * u64 npages, u64 offsets[npages+1], i64 pages[offsets[npages]], then the path of the data
 * file it was built for, NUL-terminated, ending the file. */
#define PGR_TABLE_MAGIC   "PGCTAB"
#define PGR_TABLE_VERSION 1
typedef struct pgr_table_header {
    char magic[8];
    uint64_t npages;
} pgr_table_header;

/* Memory plan map (pgr_plan_load; written by pagecast.launch.memlimit_pager): "PGCMAP" +
 * the version as one ASCII digit + NUL, u64 npages (file pages), u64 chunk_pages, u64
 * prefetch_chunks, u64 nchunks, u8 class[npages] (PC_CLASS_*, pc_evict_plan.h), zero
 * padding to a multiple of 8, i64 next[nchunks] (the chunk to prefetch after each, -1
 * none), then the path of the data file, NUL-terminated, ending the file. */
#define PGR_MAP_MAGIC   "PGCMAP"
#define PGR_MAP_VERSION 1

typedef struct pgr_region pgr_region;

/* Open `path` (bytes [offset, offset+length), length 0 = to end of file) as a paged
 * region. `addr`/`fixed` place it like mmap's hint / MAP_FIXED, `prot` as mmap's (PROT_*
 * bits; 0 is PROT_NONE). NULL on failure, with
 * errno set and a one-line reason in pgr_last_error(). */
pgr_region *pgr_open(const char *path, uint64_t offset, uint64_t length, const pgr_config *cfg, void *addr, int fixed,
                     int prot);
/* As pgr_open but serves an already opened descriptor (the shim's case). */
pgr_region *pgr_open_fd(int fd, const char *path, uint64_t offset, uint64_t length, const pgr_config *cfg, void *addr,
                        int fixed, int prot);
void *pgr_base(pgr_region *r);
uint64_t pgr_length(pgr_region *r);
/* Write back every dirty page now (the region stays usable). Returns pages written or -1. */
long pgr_flush(pgr_region *r);
/* Stop the handler, write back dirty pages, unmap; final counters into *final_stats if
 * not NULL. Returns 0, or -1 if a write-back failed (then the memory stays mapped). */
int pgr_close(pgr_region *r, pgr_stats *final_stats);
/* p50/p99 of the service-time samples in ns (0 if none). */
void pgr_percentiles(pgr_region *r, uint64_t *p50, uint64_t *p99);
void pgr_get_stats(pgr_region *r, pgr_stats *out);
/* Copies up to `cap` service-time samples (ns) into out; returns the count. */
uint64_t pgr_get_samples(pgr_region *r, uint32_t *out, uint64_t cap);
/* Table policy: CSR over region pages; fault at page p prefetches
 * pages[offsets[p] .. offsets[p+1]). Copied. Call before the first fault. */
int pgr_set_table(pgr_region *r, const uint64_t *offsets, const int64_t *pages, uint64_t npages);
/* Check a table file (pagecast pager table): every field against the file's size, offsets
 * in order, pages inside the table. 0 and its page count / data file path, or -1 with a
 * one-line reason naming the file in pgr_last_error(). */
int pgr_table_check(const char *path, uint64_t *npages, char *src, size_t srclen);
/* Load a table file into the region if it was built for the region's file: 0 loaded, 1 it
 * names another file, -1 malformed or of another size (reason in pgr_last_error()). */
int pgr_table_load(pgr_region *r, const char *path);
/* Load a memory plan map into the region if it was built for the region's file: 0 loaded,
 * 1 it names another file, -1 malformed (reason in pgr_last_error()). Call before the
 * first fault. */
int pgr_plan_load(pgr_region *r, const char *path);
/* Sparse policy: mark pages as learned (e.g. from an earlier run's trace). */
int pgr_learn_pages(pgr_region *r, const int64_t *pages, uint64_t n);
uint64_t pgr_learned_count(pgr_region *r);
int pgr_save_learned(pgr_region *r, const char *path);
/* Is userfaultfd usable here? 0 yes, else errno (message in pgr_last_error()). */
int pgr_probe(void);
const char *pgr_last_error(void);
/* Write dirty pages back without locking: only for a fatal-signal handler. */
long pgr_emergency_writeback(pgr_region *r);
/* The file changed size (ftruncate, O_TRUNC, another process): compare its size now with
 * what the region serves. After a shrink, resident pages at or past the new end are dropped
 * (dirty bytes before the end written back, those past it discarded, as the kernel's
 * truncate does), so a page wholly past the end raises SIGBUS again and the page across it
 * reads zeros past the end; after a growth the new bytes are served. The handler also does
 * this at every periodic write-back. Returns the pages dropped, or -1. */
long pgr_check_size(pgr_region *r);
/* Evict every resident page (writing dirty ones back): makes the next pass start cold. */
long pgr_drop_all(pgr_region *r);

#ifdef __cplusplus
}
#endif

#include "pack.h" /* page packs: file format and loader */
#endif
