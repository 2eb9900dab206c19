/*
 * The anonymous-memory shim's socket protocol (live/anon_shim.c ↔ pagecast.live.anon),
 * native endianness (both ends run on this machine): the shim sends one hello, then
 * answers every request with one ack. Mirrored by numpy dtypes in online/anon.py;
 * tests/test_binary_layouts.py compares the two.
 */
#ifndef PAGECAST_ANON_WIRE_H
#define PAGECAST_ANON_WIRE_H

#include <stdint.h>

/* "pcashm" then the protocol version "01"; the predictor drops a connection whose hello
 * carries anything else. */
#define PC_ANON_MAGIC 0x70636173686d3031ULL

struct pc_anon_hello {
    uint64_t magic; /* PC_ANON_MAGIC */
    uint64_t pid;
    uint64_t mode; /* the madvise advice the shim uses */
};

struct pc_anon_request {
    uint64_t addr, len; /* madvise(addr, len, mode) */
};

struct pc_anon_ack {
    int64_t done_ns; /* CLOCK_MONOTONIC when madvise returned */
    int64_t err;     /* 0 or errno */
};

#endif
