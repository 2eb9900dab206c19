/*
 * touchpages: a small real program with a known page-access pattern, for testing the
 * recorders against the truth.
 *
 * Usage: touchpages FILE PAGES [--anon N] [--thread N] [--exit CODE]
 *   FILE   a file of at least max(PAGES)+1 pages
 *   PAGES  comma-separated page indices, read one byte each, in this order, through a
 *          read-only mmap of FILE with MADV_RANDOM (no read-around: one major fault per
 *          page when the file is cold)
 *   --anon N    then write N pages of a fresh anonymous mapping (N minor faults)
 *   --thread N  a second thread writes N pages of its own anonymous mapping
 *   --exit CODE exit with this status
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGE 4096

static void *touch_anon(long n) {
    if (n <= 0) return NULL;
    char *p = mmap(NULL, (size_t)n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("touchpages: mmap anon");
        exit(1);
    }
    for (long i = 0; i < n; i++) p[i * PAGE] = (char)i;
    return p;
}

static void *thread_main(void *arg) {
    touch_anon((long)(intptr_t)arg);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: touchpages FILE PAGES [--anon N] [--thread N] [--exit CODE]\n");
        return 2;
    }
    long anon = 0, thread_pages = 0;
    int code = 0;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--anon"))
            anon = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--thread"))
            thread_pages = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--exit"))
            code = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "touchpages: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        perror(argv[1]);
        return 2;
    }
    struct stat st;
    fstat(fd, &st);
    const volatile char *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        perror("touchpages: mmap");
        return 2;
    }
    madvise((void *)m, (size_t)st.st_size, MADV_RANDOM);
    unsigned long sum = 0;
    for (char *s = strtok(argv[2], ","); s; s = strtok(NULL, ",")) {
        long pg = atol(s);
        if (pg < 0 || (pg + 1) * PAGE > st.st_size) {
            fprintf(stderr, "touchpages: page %ld outside the file\n", pg);
            return 2;
        }
        sum += (unsigned char)m[pg * PAGE];
    }
    /* The main thread's mapping first, then the thread's: mapped concurrently, the second
     * one can land right below the first and the kernel merges the two VMAs, so the
     * recorder sees one 12-page mmap instead of 3 + 9 (seen once under load). The
     * thread's stack (its guard page is PROT_NONE) then keeps the two apart. */
    touch_anon(anon);
    pthread_t th;
    if (thread_pages > 0 && pthread_create(&th, NULL, thread_main, (void *)(intptr_t)thread_pages) != 0) {
        fprintf(stderr, "touchpages: pthread_create failed\n");
        return 2;
    }
    if (thread_pages > 0) pthread_join(th, NULL);
    printf("%lu\n", sum);
    return code;
}
