/*
 * cyclic_scan: reads a file through mmap several times in the same order, the way a model
 * runner reads its weights for every token. Under a memory limit smaller than the file,
 * the kernel's LRU evicts exactly the part needed next.
 *
 * Usage: cyclic_scan FILE PASSES [--keep MIB --chunk MIB]
 *   Reads one byte of every page of FILE, in file order, PASSES times; prints the sum of
 *   the bytes read on stdout and one line per pass on stderr: "pass N SECONDS READ_BYTES"
 *   (READ_BYTES: what this process had read from the device during the pass, /proc/self/io).
 *   --keep MIB --chunk MIB  the program manages its own memory (the in-process reference):
 *          the first MIB of the file stays; of the rest, each CHUNK is paged out right after
 *          use (madvise MADV_PAGEOUT) and the next chunk is asked for ahead (MADV_WILLNEED).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

#define PAGE 4096

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long long read_bytes(void) {
    FILE *f = fopen("/proc/self/io", "r");
    long long v = -1;
    char line[128];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "read_bytes: %lld", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: cyclic_scan FILE PASSES [--keep MIB --chunk MIB]\n");
        return 2;
    }
    size_t keep = 0, chunk = 0;
    for (int i = 3; i + 1 < argc; i += 2) {
        size_t v = (size_t)strtoull(argv[i + 1], NULL, 10) << 20;
        if (!strcmp(argv[i], "--keep"))
            keep = v;
        else if (!strcmp(argv[i], "--chunk"))
            chunk = v;
    }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size == 0) {
        fprintf(stderr, "cyclic_scan: %s: empty or unreadable\n", argv[1]);
        return 1;
    }
    size_t size = (size_t)st.st_size;
    const unsigned char *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    int passes = atoi(argv[2]);
    uint64_t sum = 0;
    for (int pass = 0; pass < passes; pass++) {
        double t0 = now_s();
        long long r0 = read_bytes();
        for (size_t off = 0; off < size; off += PAGE) {
            if (chunk && off >= keep && (off - keep) % chunk == 0) {
                if (off > keep) madvise((void *)(p + off - chunk), chunk, MADV_PAGEOUT);
                size_t next = off + chunk;
                if (next < size) madvise((void *)(p + next), next + chunk <= size ? chunk : size - next, MADV_WILLNEED);
            }
            sum += p[off];
        }
        double dt = now_s() - t0;
        fprintf(stderr, "pass %d %.4f %lld\n", pass, dt, read_bytes() - r0);
    }
    printf("%llu\n", (unsigned long long)sum);
    return 0;
}
