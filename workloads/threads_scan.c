/*
 * threads_scan: THREADS threads read a file through one mmap several times in the same
 * order, splitting every block of BLOCK_KIB between them and meeting at a barrier after each
 * block, the way a model runner's threads split each weight matrix's rows and wait for one
 * another before the next operation. At a grain finer than the block the threads are in
 * different chunks at once and come back to ones a few behind; at the block's grain the
 * program goes through the file in order.
 *
 * Usage: threads_scan FILE PASSES THREADS BLOCK_KIB
 *   Reads one byte of every page of FILE, PASSES times; prints the sum of the bytes read
 *   on stdout and one line per pass on stderr: "pass N SECONDS".
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PAGE        4096
#define MAX_THREADS 16

struct shared {
    const volatile uint8_t *map;
    size_t pages, block_pages;
    int threads, passes;
    pthread_barrier_t barrier;
};

struct worker {
    struct shared *s;
    int id;
    uint64_t sum;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *work(void *arg) {
    struct worker *w = arg;
    struct shared *s = w->s;
    size_t part = (s->block_pages + (size_t)s->threads - 1) / (size_t)s->threads;
    for (int p = 0; p < s->passes; p++) {
        double t0 = now_s();
        for (size_t b = 0; b < s->pages; b += s->block_pages) {
            size_t lo = b + (size_t)w->id * part, hi = lo + part;
            if (hi > b + s->block_pages) hi = b + s->block_pages;
            if (hi > s->pages) hi = s->pages;
            for (size_t i = lo; i < hi; i++) w->sum += s->map[i * PAGE];
            pthread_barrier_wait(&s->barrier);
        }
        if (w->id == 0) fprintf(stderr, "pass %d %.6f\n", p, now_s() - t0);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: threads_scan FILE PASSES THREADS BLOCK_KIB\n");
        return 2;
    }
    struct shared s = {.passes = atoi(argv[2]), .threads = atoi(argv[3])};
    long block_kib = atol(argv[4]);
    if (s.passes < 1 || s.threads < 1 || s.threads > MAX_THREADS || block_kib < 4) {
        fprintf(stderr, "threads_scan: PASSES >= 1, 1 <= THREADS <= %d, BLOCK_KIB >= 4\n", MAX_THREADS);
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < PAGE) {
        perror(argv[1]);
        return 1;
    }
    s.pages = (size_t)st.st_size / PAGE;
    s.block_pages = (size_t)block_kib * 1024 / PAGE;
    s.map = mmap(NULL, s.pages * PAGE, PROT_READ, MAP_SHARED, fd, 0);
    if (s.map == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    pthread_barrier_init(&s.barrier, NULL, (unsigned)s.threads);
    struct worker w[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    for (int i = 0; i < s.threads; i++) {
        w[i] = (struct worker){.s = &s, .id = i};
        pthread_create(&tid[i], NULL, work, &w[i]);
    }
    uint64_t sum = 0;
    for (int i = 0; i < s.threads; i++) {
        pthread_join(tid[i], NULL);
        sum += w[i].sum;
    }
    printf("%llu\n", (unsigned long long)sum);
    return 0;
}
