/*
 * faultmon's output stream (native/faultmon.c → pagecast.collect.faultmon), little endian:
 * frames {u32 type, u32 len, payload}. The first frame is FR_HELLO (or FR_ERROR when the
 * collector failed before it could start the program); its magic and version let the
 * reader refuse a stream of another collector build with one line instead of misreading
 * it. The payload structs below are mirrored by numpy dtypes in collect/faultmon.py;
 * tests/test_binary_layouts.py checks that both sides agree.
 */
#ifndef PAGECAST_FAULTMON_H
#define PAGECAST_FAULTMON_H

#include <stdint.h>

#define FM_STREAM_MAGIC   0x4d544c46u /* "FLTM" read as little-endian bytes */
#define FM_STREAM_VERSION 1u

enum {
    FR_HELLO = 1,
    FR_SAMPLES = 2,
    FR_MMAP = 3,
    FR_FORK = 4,
    FR_EXEC = 5,
    FR_LOST = 6,
    FR_WATERMARK = 7,
    FR_EXIT = 8,
    FR_ERROR = 9,
    /* 10-12: the live fast path's frames (live/fastpath.h) */
    FR_READS = 14,
    FR_NOTE = 15,
};

struct fm_hello {
    uint32_t magic;   /* FM_STREAM_MAGIC */
    uint32_t version; /* FM_STREAM_VERSION */
    uint64_t t0;
    uint32_t pid, nrings, exclude_kernel, ring_pages;
};

/* A read-family system call's or a file fault's pages (filemap tracepoints), in FR_READS. */
struct fm_read {
    uint64_t time;
    uint64_t ino;
    uint64_t first, last; /* page indices, inclusive: what the call asked for (may pass EOF) */
    uint32_t pid, tid;
    uint32_t dev;  /* the kernel's dev_t: major << 20 | minor */
    uint32_t what; /* 0 read-family call, 1 fault on a file mapping */
};

/* One page fault, in FR_SAMPLES arrays. */
struct fm_sample {
    uint64_t time;
    uint64_t addr;
    uint64_t ip;
    uint32_t pid;
    uint32_t tid;
    uint32_t kind; /* 2 major, 1 minor (pagecast Kind values) */
    uint32_t pad;
};

struct fm_mmap {
    uint64_t time, addr, len, pgoff, ino;
    uint32_t pid, tid, prot, flags, maj, min;
    /* followed by the file name (no NUL) */
};

struct fm_fork {
    uint64_t time;
    uint32_t pid, ppid, tid, ptid;
};

struct fm_exec {
    uint64_t time;
    uint32_t pid, tid;
    /* followed by the command name (no NUL) */
};

struct fm_lost {
    uint64_t time, lost;
};

struct fm_exit {
    int32_t status, code;
    uint64_t time, lost;
};

#endif
