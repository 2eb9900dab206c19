/*
 * Live feedback between the launcher's prefetcher and the advice shim in the program.
 *
 * The launcher creates a small shared file (PAGECAST_FEEDBACK names it; /dev/shm when
 * there is one) with one slot per planned warm/stream file: the file's (device, inode),
 * its size in pages and a bitmap of the pages the plan warms. The shim, preloaded into the
 * program, marks every page the program read()s or pread()s from such a file in a second
 * bitmap and counts it once, as inside or outside the plan; it flags a file the program
 * mmaps (page faults are not visible to it). The prefetcher reads those counts before each
 * request beyond a file's first batch and stops a file whose plan is not paying off.
 *
 * Everything here is written by one side and read by the other with relaxed atomics: a
 * count read a moment late only delays a decision. The shim never blocks on it.
 */
#ifndef PC_FEEDBACK_H
#define PC_FEEDBACK_H

#include <stdint.h>

#define PCF_MAGIC   0x50434642u /* "PCFB" */
#define PCF_VERSION 1u
#define PCF_PAGE    4096

struct pcf_file {
    uint64_t dev, ino;
    int64_t npages;      /* file size in pages (at the identity check) */
    int64_t planned_off; /* byte offset in the segment of the planned-page bitmap */
    int64_t seen_off;    /* byte offset of the bitmap of pages the program read */
    int64_t pages_in;    /* distinct pages the program read that the plan warms */
    int64_t pages_out;   /* distinct pages the program read that the plan does not warm */
    int64_t reads;       /* read()/pread() calls on the file */
    uint32_t mapped;     /* the program mmap'd the file: its faults are not counted */
    uint32_t pad;
};

struct pcf_header {
    uint32_t magic, version;
    uint32_t nfiles, pad;
    uint64_t size; /* bytes of the whole segment */
    struct pcf_file files[];
};

static inline int pcf_test(const unsigned char *bits, int64_t page) {
    return (__atomic_load_n(&bits[page >> 3], __ATOMIC_RELAXED) >> (page & 7)) & 1;
}

#endif
