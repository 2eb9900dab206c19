/* Many threads writing one shared file mapping at random: a race test for pagers.
 *
 *   stress FILE NPAGES THREADS ITERS SEED EXPECT_OUT
 *
 * Word 0 of page p holds p (set by the caller beforehand, only ever read here); word
 * 1+t counts the writes thread t made to that page. Threads hit the same pages at the
 * same time (different words), so a pager sees concurrent faults, writes to pages it is
 * evicting, and write-protect faults racing write-backs. Every read of word 0 is checked;
 * at the end the counts seen in memory are checked against each thread's own tally, and
 * the tallies are written to EXPECT_OUT (uint64 [NPAGES][THREADS]) so the caller can check
 * the file after unmap. Exit 0 only if every check passed.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096

static uint64_t *g_map;
static long g_npages, g_threads, g_iters;
static unsigned long long g_seed;
static uint64_t *g_tally; /* [npages][threads] */
static long g_bad;

static void *worker(void *arg) {
    long t = (long)arg;
    unsigned long long x = g_seed * 6364136223846793005ull + (unsigned long long)t * 1442695040888963407ull + 1;
    long bad = 0;
    for (long i = 0; i < g_iters; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        long p = (long)(x % (unsigned long long)g_npages);
        volatile uint64_t *pg = g_map + p * (PAGE / 8);
        if (pg[0] != (uint64_t)p) bad++;
        if ((x >> 40) % 3) { /* two in three accesses write */
            pg[1 + t]++;
            g_tally[p * g_threads + t]++;
        }
    }
    __atomic_add_fetch(&g_bad, bad, __ATOMIC_SEQ_CST);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: stress FILE NPAGES THREADS ITERS SEED EXPECT_OUT\n");
        return 2;
    }
    g_npages = atol(argv[2]);
    g_threads = atol(argv[3]);
    g_iters = atol(argv[4]);
    g_seed = strtoull(argv[5], NULL, 10);
    if (g_threads < 1 || g_threads > 64 || g_npages < 1) return 2;
    int fd = open(argv[1], O_RDWR);
    if (fd < 0) {
        perror("open");
        return 2;
    }
    size_t len = (size_t)g_npages * PAGE;
    g_map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (g_map == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    g_tally = calloc((size_t)(g_npages * g_threads), sizeof(uint64_t));
    pthread_t th[64];
    for (long t = 0; t < g_threads; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    for (long t = 0; t < g_threads; t++) pthread_join(th[t], NULL);
    long mismatch = 0;
    for (long p = 0; p < g_npages; p++)
        for (long t = 0; t < g_threads; t++)
            if (g_map[p * (PAGE / 8) + 1 + t] != g_tally[p * g_threads + t]) mismatch++;
    FILE *out = fopen(argv[6], "wb");
    if (!out ||
        fwrite(g_tally, sizeof(uint64_t), (size_t)(g_npages * g_threads), out) != (size_t)(g_npages * g_threads)) {
        perror("writing tallies");
        return 2;
    }
    fclose(out);
    if (munmap(g_map, len) != 0) {
        perror("munmap");
        return 1;
    }
    printf("{\"bad_reads\": %ld, \"count_mismatches\": %ld}\n", g_bad, mismatch);
    return g_bad || mismatch ? 1 : 0;
}
