/*
 * The live loop's native fast path, linked into faultmon: schedule replay and the simple
 * classic prefetchers (next-line, stride) decided and issued (posix_fadvise WILLNEED) in
 * the collector itself, the moment a fault sample is read from the perf ring.
 * See fastpath.c for the configuration file and the frames it adds.
 */
#ifndef PAGECAST_FASTPATH_H
#define PAGECAST_FASTPATH_H

#include <stddef.h>
#include <stdint.h>

/* Frames added to faultmon's output (see faultmon.h for the others). */
enum { FR_ISSUED = 10, FR_FILE = 11, FR_FASTSTAT = 12 };
/* FR_FASTSTAT's payload: this many u64 counters (collect/faultmon.py names them in order) */
#define FP_NSTATS 12

/* One page whose read the fast path issued, in FR_ISSUED arrays (mirrored by
 * collect/faultmon.py's ISSUED_DTYPE; tests/test_binary_layouts.py compares them). */
struct fp_issued {
    uint64_t t_issue;  /* just before the posix_fadvise call of its range */
    uint64_t t_fault;  /* perf sample time of the causing fault; 0: issued at start */
    uint64_t t_seen;   /* the sample was read from the ring */
    uint64_t t_submit; /* the predictor had decided (before the first read was issued) */
    int64_t page;
    int32_t file;
    uint32_t flags; /* 1: issued at start, no causing fault */
};

/* FR_FILE: a file the fast path knows, once; followed by its path (no NUL). */
struct fp_file_frame {
    int32_t index; /* the `file` of fp_issued records */
    int32_t tag;   /* the schedule's region id, -1 for files found at run time */
};

/* The fast-path config file (pagecast.live.fastpath writes it): this header, then
 * nfiles x {u32 len, i32 tag, path bytes}, i32 row_file[nrows], i64 row_page[nrows]. */
#define FP_CONFIG_MAGIC   "PCFAST" /* then the version as one ASCII digit and a NUL */
#define FP_CONFIG_VERSION 1
struct fp_config_head {
    char magic[8];
    uint32_t mode, nfiles;
    int64_t lookahead, gap, p0, p1;
    uint64_t nrows;
};

/* Provided by faultmon.c. */
void fm_frame(uint32_t type, const void *a, uint32_t alen, const void *b, uint32_t blen);
void fm_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
uint64_t fm_now_ns(void);

int fp_enabled(void);
void fp_load(const char *config_path); /* fails through fm_fail on a bad file */
void fp_start(void);                   /* after the program was released: initial wave */
void fp_on_mmap(uint32_t pid, uint64_t addr, uint64_t len, uint64_t pgoff, uint64_t ino, const char *name, size_t n);
void fp_on_fork(uint32_t pid, uint32_t ppid);
void fp_on_exec(uint32_t pid);
void fp_on_fault(uint64_t t_fault, uint32_t pid, uint64_t addr, int major, uint64_t t_seen);
void fp_flush(void);              /* emit the issued records gathered so far */
void fp_finish(uint64_t wakeups); /* wait for the initial wave, flush, emit the statistics */

#endif
