/*
 * Prefetch issuing for the live loop: posix_fadvise(WILLNEED) over a batch of page
 * ranges in one foreign call, so the Python predictor process never holds (or waits for)
 * the GIL while the kernel submits reads. Each call returns after the reads are queued,
 * not completed; t_issue receives the monotonic time (ns since t0) of each submission.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <time.h>

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int pc_willneed(const int32_t *fds, const int64_t *first, const int64_t *npages, int64_t n, int64_t page_size,
                int64_t t0, int64_t *t_issue) {
    int errors = 0;
    for (int64_t i = 0; i < n; i++) {
        t_issue[i] = mono_ns() - t0;
        if (fds[i] < 0 || posix_fadvise(fds[i], first[i] * page_size, npages[i] * page_size, POSIX_FADV_WILLNEED) != 0)
            errors++;
    }
    return errors;
}
