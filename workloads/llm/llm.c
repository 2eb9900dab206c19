/* BowerAccess's `llm` test program, rewritten: maps a weights file and touches a sparse, monotonically
 * increasing subset of its pages. With no options it is BowerAccess's example: 9 pages,
 * touch 0, 2, 5, 6, 8 (write 'A'+page, read it back, print it).
 *
 *   llm [-n NPAGES] [-p 0,2,5,...] [-g SEED:PERMILLE] [-r PASSES] [-m seed|read|write]
 *       [-q] [-t] [-R] [FILE]
 *   -g   touch a sorted pseudo-random PERMILLE/1000 of the pages (same SEED, same set)
 *   -r   repeat the pass (the sparse-monotonic predictor learns from earlier passes)
 *   -m   seed: write then read back each page and print it; read: read one byte per
 *        page; write: write 'A'+page%26 to the first byte of each page
 *   -t   print {"accesses", "ns", "access_ns_p50", "checksum"} as JSON on stdout at the end
 *   -R   madvise(MADV_RANDOM): no kernel read-around, every first touch is a major fault
 * The file is created (or extended) to NPAGES pages if shorter, never truncated.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PAGE_SIZE 4096
/* BowerAccess's chcore flag marks the special budget-limited mapping; on Linux the
 * pagecast shim picks the file by name instead (PAGECAST_PAGER), so the flag is 0. */
#define MAP_LLM 0

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static long parse_list(const char *s, long **out) {
    long n = 1;
    for (const char *c = s; *c; c++) n += *c == ',';
    *out = malloc((size_t)n * sizeof(long));
    long k = 0;
    char *end;
    while (*s) {
        (*out)[k++] = strtol(s, &end, 10);
        if (end == s) break;
        s = *end == ',' ? end + 1 : end;
    }
    return k;
}

static long gen_pages(long npages, unsigned long long seed, long permille, long **out) {
    *out = malloc((size_t)npages * sizeof(long));
    unsigned long long x = seed * 0x9E3779B97F4A7C15ull + 1;
    long k = 0;
    for (long p = 0; p < npages; p++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if ((long)(x % 1000) < permille) (*out)[k++] = p;
    }
    return k;
}

int main(int argc, char **argv) {
    long npages = 9, passes = 1, *pages = NULL, npl = 0;
    const char *mode = "seed";
    int quiet = 0, timing = 0, random_adv = 0, opt;
    while ((opt = getopt(argc, argv, "n:p:g:r:m:qtR")) != -1) {
        switch (opt) {
            case 'n':
                npages = atol(optarg);
                break;
            case 'p':
                npl = parse_list(optarg, &pages);
                break;
            case 'g': {
                unsigned long long seed = strtoull(optarg, NULL, 10);
                const char *c = strchr(optarg, ':');
                npl = -1 - (c ? atol(c + 1) : 100);
                (void)seed;
                break;
            }
            case 'r':
                passes = atol(optarg);
                break;
            case 'm':
                mode = optarg;
                break;
            case 'q':
                quiet = 1;
                break;
            case 't':
                timing = 1;
                break;
            case 'R':
                random_adv = 1;
                break;
            default:
                fprintf(stderr, "usage: llm [-n NPAGES] [-p LIST] [-g SEED:PERMILLE] [-r PASSES] [-m seed|read|write] "
                                "[-q] [-t] [-R] [FILE]\n");
                return 2;
        }
    }
    if (npl < 0) { /* -g: needs npages, which may come after it */
        long permille = -1 - npl;
        const char *arg = NULL;
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], "-g") && i + 1 < argc) arg = argv[i + 1];
        npl = gen_pages(npages, strtoull(arg, NULL, 10), permille, &pages);
    }
    if (!pages) npl = parse_list("0,2,5,6,8", &pages);
    const char *filename = optind < argc ? argv[optind] : "weight.dat";
    int writing = strcmp(mode, "read") != 0;
    int fd = open(filename, writing ? O_RDWR | O_CREAT : O_RDONLY, 0666);
    if (fd < 0) {
        perror("open");
        return EXIT_FAILURE;
    }
    struct stat sb;
    fstat(fd, &sb);
    if (writing && sb.st_size < npages * PAGE_SIZE && ftruncate(fd, npages * PAGE_SIZE) == -1) {
        perror("ftruncate");
        return EXIT_FAILURE;
    }
    size_t len = (size_t)npages * PAGE_SIZE;
    char *map = mmap(NULL, len, writing ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED | MAP_LLM, fd, 0);
    if (map == MAP_FAILED) {
        perror("mmap");
        return EXIT_FAILURE;
    }
    if (random_adv && madvise(map, len, MADV_RANDOM) == -1) perror("madvise");
    unsigned long long checksum = 0;
    int64_t *lat = timing ? malloc((size_t)(npl * passes + 1) * sizeof(int64_t)) : NULL;
    long nlat = 0;
    int64_t t0 = now_ns();
    for (long pass = 0; pass < passes; pass++) {
        for (long i = 0; i < npl; i++) {
            long p = pages[i];
            if (p < 0 || p >= npages) continue;
            volatile char *b = map + p * PAGE_SIZE;
            int64_t ta = lat ? now_ns() : 0;
            if (!strcmp(mode, "seed")) {
                *b = (char)('A' + p);
                if (!quiet) printf("Accessed page %ld, first byte: %c\n", p, *b);
                checksum += (unsigned char)*b;
            } else if (!strcmp(mode, "write")) {
                *b = (char)('A' + p % 26);
                checksum += (unsigned char)*b;
            } else {
                checksum += (unsigned char)*b;
            }
            if (lat) lat[nlat++] = now_ns() - ta;
        }
    }
    int64_t dt = now_ns() - t0;
    if (timing) {
        qsort(lat, (size_t)nlat, sizeof(int64_t), cmp_i64);
        printf("{\"accesses\": %ld, \"ns\": %lld, \"access_ns_p50\": %lld, \"checksum\": %llu}\n", npl * passes,
               (long long)dt, nlat ? (long long)lat[(nlat - 1) / 2] : 0LL, checksum);
    }
    if (munmap(map, len) == -1) perror("munmap");
    close(fd);
    return EXIT_SUCCESS;
}
