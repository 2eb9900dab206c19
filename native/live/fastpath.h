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

/* Frames added to faultmon's output (see faultmon.c for the others). */
enum { FR_ISSUED = 10, FR_FILE = 11, FR_FASTSTAT = 12 };

/* Provided by faultmon.c. */
void fm_frame(uint32_t type, const void *a, uint32_t alen, const void *b, uint32_t blen);
void fm_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
uint64_t fm_now_ns(void);

int fp_enabled(void);
void fp_load(const char *config_path); /* fails through fm_fail on a bad file */
void fp_start(void);                    /* after the program was released: initial wave */
void fp_on_mmap(uint32_t pid, uint64_t addr, uint64_t len, uint64_t pgoff, uint64_t ino, const char *name, size_t n);
void fp_on_fork(uint32_t pid, uint32_t ppid);
void fp_on_exec(uint32_t pid);
void fp_on_fault(uint64_t t_fault, uint32_t pid, uint64_t addr, int major, uint64_t t_seen);
void fp_flush(void);  /* emit the issued records gathered so far */
void fp_finish(uint64_t wakeups); /* wait for the initial wave, flush, emit the statistics */

#endif
