/*
 * pageset_touch: touch a known list of file pages, each by one way, for testing the
 * page-set recorder against the truth (the arguments).
 *
 * Usage: pageset_touch OP:FILE:PAGES [OP:FILE:PAGES ...]
 *   OP     mmap   read one byte of each page through a read-only MAP_SHARED mapping of the
 *                 whole file, default advice (read-ahead and fault-around as the kernel does)
 *          mmapw  the same through a writable MAP_SHARED mapping (file opened read-write)
 *          pread  pread() 4096 bytes at each page's offset
 *          read   lseek() to each page, then read() 4096 bytes
 *          read1  lseek() to byte 100 of each page, then read() one byte
 *   PAGES  comma-separated page indices or ranges A-B (A, A+1, ..., B), touched in this order
 * Operations run in the order given; each file is opened once per operation.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGE 4096

static void die(const char *what, const char *file) {
    fprintf(stderr, "pageset_touch: %s: %s\n", what, file);
    exit(1);
}

static char buf[PAGE];
static volatile unsigned sum;

static void touch(const char *op, const char *file, int fd, const char *map, long pg) {
    off_t off = (off_t)pg * PAGE;
    if (map) {
        sum += (unsigned char)map[off];
    } else if (!strcmp(op, "pread")) {
        if (pread(fd, buf, PAGE, off) < 0) die("pread", file);
        sum += (unsigned char)buf[0];
    } else if (!strcmp(op, "read") || !strcmp(op, "read1")) {
        int one = !strcmp(op, "read1");
        if (lseek(fd, off + (one ? 100 : 0), SEEK_SET) < 0 || read(fd, buf, one ? 1 : PAGE) < 0) die("read", file);
        sum += (unsigned char)buf[0];
    } else {
        die("unknown operation", op);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: pageset_touch OP:FILE:PAGES ...\n");
        return 2;
    }
    for (int a = 1; a < argc; a++) {
        char *spec = strdup(argv[a]);
        char *op = strtok(spec, ":");
        char *file = strtok(NULL, ":");
        char *pages = strtok(NULL, ":");
        if (!op || !file || !pages) die("bad spec", argv[a]);
        int writable = !strcmp(op, "mmapw");
        int fd = open(file, writable ? O_RDWR : O_RDONLY);
        if (fd < 0) die("open", file);
        struct stat st;
        if (fstat(fd, &st) < 0) die("stat", file);
        char *map = NULL;
        if (!strncmp(op, "mmap", 4)) {
            map = mmap(NULL, (size_t)st.st_size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
            if (map == MAP_FAILED) die("mmap", file);
        }
        for (char *p = strtok(pages, ","); p; p = strtok(NULL, ",")) {
            char *dash = strchr(p, '-');
            for (long pg = atol(p), hi = dash ? atol(dash + 1) : pg; pg <= hi; pg++) touch(op, file, fd, map, pg);
        }
        if (map) munmap(map, (size_t)st.st_size);
        close(fd);
        free(spec);
    }
    return sum == 0xFFFFFFFFu; /* keep the reads */
}
