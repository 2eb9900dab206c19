/*
 * anon_touch: a real program whose anonymous-memory access pattern is fixed, for the
 * in-process anonymous prefetch of `pagecast run` (native/live/anon_shim.c).
 *
 * Usage: anon_touch [--mib M] [--pages N] [--work W] [--spawn] [--time] [--exit CODE]
 *   mmaps M MiB (default 64) of private anonymous memory, then visits N (default 4096)
 *   distinct pages in a fixed irregular order (a seeded shuffle, the same every run):
 *   for each page it does W (default 20000) rounds of arithmetic, then writes one word
 *   and reads another. Each first touch is one minor fault unless the page is already
 *   populated. --spawn runs /usr/bin/env as a child (fork + exec) halfway through (prints its environment).
 *   Prints one line: "anon_touch pages=N checksum=X" (independent of how pages arrived).
 *   --time also prints "anon_touch loop_s=S" on stderr: wall time of the touching loop.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv) {
    long mib = 64, npages = 4096, work = 20000, code = 0;
    int spawn = 0, timing = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mib") && i + 1 < argc)
            mib = atol(argv[++i]);
        else if (!strcmp(argv[i], "--pages") && i + 1 < argc)
            npages = atol(argv[++i]);
        else if (!strcmp(argv[i], "--work") && i + 1 < argc)
            work = atol(argv[++i]);
        else if (!strcmp(argv[i], "--exit") && i + 1 < argc)
            code = atol(argv[++i]);
        else if (!strcmp(argv[i], "--spawn"))
            spawn = 1;
        else if (!strcmp(argv[i], "--time"))
            timing = 1;
        else {
            fprintf(stderr, "usage: anon_touch [--mib M] [--pages N] [--work W] [--spawn] [--time] [--exit CODE]\n");
            return 2;
        }
    }
    long total = mib * 1024 * 1024 / PAGE;
    if (npages > total) npages = total;
    /* a fixed irregular visiting order: the first N entries of a seeded shuffle */
    long *perm = malloc((size_t)total * sizeof *perm);
    if (!perm) return 1;
    for (long i = 0; i < total; i++) perm[i] = i;
    for (long i = 0; i < npages; i++) {
        long j = i + (long)(next() % (uint64_t)(total - i));
        long t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    char *buf = mmap(NULL, (size_t)total * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        perror("anon_touch: mmap");
        return 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t sum = 0;
    for (long i = 0; i < npages; i++) {
        uint64_t *p = (uint64_t *)(buf + perm[i] * PAGE);
        uint64_t x = (uint64_t)perm[i];
        for (long w = 0; w < work; w++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        p[0] = x;
        sum += p[0] + p[PAGE / 8 - 1];
        if (spawn && i == npages / 2) {
            fflush(stdout);
            pid_t c = fork();
            if (c == 0) {
                execl("/usr/bin/env", "env", (char *)NULL);
                _exit(127);
            }
            int st;
            if (c > 0) waitpid(c, &st, 0);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (timing)
        fprintf(stderr, "anon_touch loop_s=%.6f\n", (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    printf("anon_touch pages=%ld checksum=%llu\n", npages, (unsigned long long)sum);
    return (int)code;
}
