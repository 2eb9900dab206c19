/* The record stream written by libpagecast_cupti.so (cupti.<pid>.bin): fixed 48-byte
 * little-endian records, read by pagecast.collect.cupti_records with one numpy dtype
 * (tests/test_binary_layouts.py compares the two). Kernel
 * names go to kernels.<pid>.tsv ("<id>\t<name>") so records stay fixed-size. */
#ifndef PAGECAST_CUPTI_FORMAT_H
#define PAGECAST_CUPTI_FORMAT_H

#include <stdint.h>

/* Version 1 had no magic; version 2 puts PC_CUPTI_MAGIC in the header record's dst. */
#define PC_CUPTI_FORMAT_VERSION 2
#define PC_CUPTI_MAGIC          0x50554350u /* "PCUP" read as little-endian bytes */

enum pc_rec_type {
    PC_REC_HEADER = 0,  /* start = CUPTI timestamp, end = CLOCK_MONOTONIC, address = CLOCK_REALTIME
                           (all taken together), value = format version, src = pid,
                           dst = PC_CUPTI_MAGIC */
    PC_REC_UM = 1,      /* a CUpti_ActivityUnifiedMemoryCounter3 record */
    PC_REC_KERNEL = 2,  /* a CUpti_ActivityKernel record */
    PC_REC_MEMORY = 3,  /* a CUpti_ActivityMemory4 record (MEMORY2 kind) */
    PC_REC_DROPPED = 4, /* value = records CUPTI dropped for lack of buffers */
};

struct pc_rec {
    uint8_t type;
    uint8_t subkind; /* UM: counter kind; MEMORY: operation type (1 alloc, 2 release) */
    uint16_t flags;  /* UM: access type (faults) or migration cause (transfers); MEMORY: memory kind */
    uint32_t stream; /* UM, KERNEL: stream id */
    uint64_t start;  /* CUPTI timestamps, ns */
    uint64_t end;
    uint64_t address; /* UM, MEMORY: address; KERNEL: correlation id */
    uint64_t value;   /* UM: bytes or count; KERNEL: name id; MEMORY: bytes */
    uint32_t src;     /* UM: source id; KERNEL, MEMORY: device */
    uint32_t dst;     /* UM: destination id; KERNEL: grid x; MEMORY: process id */
} __attribute__((packed));

_Static_assert(sizeof(struct pc_rec) == 48, "pc_rec must be 48 bytes");

#endif
