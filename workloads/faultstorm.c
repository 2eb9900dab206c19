/*
 * faultstorm: a fault-heavy program for recorder benchmarks.
 *
 * Usage: faultstorm MIB ROUNDS
 * Each round maps MIB MiB of anonymous memory, writes one byte per 4 KiB page (one minor
 * fault each) and unmaps it: MIB * 256 * ROUNDS faults in total.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: faultstorm MIB ROUNDS\n");
        return 2;
    }
    size_t len = (size_t)atol(argv[1]) << 20;
    long rounds = atol(argv[2]);
    unsigned long sum = 0;
    for (long r = 0; r < rounds; r++) {
        char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("faultstorm: mmap");
            return 1;
        }
        for (size_t off = 0; off < len; off += 4096) {
            p[off] = (char)off;
            sum += (unsigned char)p[off];
        }
        munmap(p, len);
    }
    printf("%lu\n", sum);
    return 0;
}
