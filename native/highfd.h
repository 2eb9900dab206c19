/*
 * Descriptors a shim opens inside the program (a userfaultfd, the pager's copies of the
 * file, pipes, logs) must not take the numbers the program's own open() calls would get:
 * programs that expect the lowest free number (shells, fd-passing code, `3 4` for two
 * opens) would see others. So such a descriptor is moved up to the highest free number
 * below the soft RLIMIT_NOFILE, and never above 1023 (a higher number would grow the
 * program's descriptor table for nothing). A fixed number (900, as before) fails silently
 * under `ulimit -n 512` and leaves the descriptor low.
 *
 * Header-only, like outfile.h.
 */
#ifndef PC_HIGHFD_H
#define PC_HIGHFD_H

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#define PC_HIGHFD_TOP    1024 /* descriptors are placed below this (and below the limit) */
#define PC_HIGHFD_SEARCH 64   /* how far below the top a free number is looked for */

/* Move fd (close-on-exec) to the highest free number in [top - 64, top), top the lower of
 * the soft limit and 1024. Returns the new descriptor (fd is closed), or -1 with fd left as
 * it is when none of those numbers is free: the caller decides what to do then. */
static inline int pc_fd_high(int fd) {
    struct rlimit rl;
    long top = PC_HIGHFD_TOP;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)top) top = (long)rl.rlim_cur;
    for (long want = top - 1; want > fd && want >= top - PC_HIGHFD_SEARCH; want--) {
        int hi = fcntl(fd, F_DUPFD_CLOEXEC, (int)want); /* the lowest free number >= want */
        if (hi >= 0 && hi < top) {
            close(fd);
            return hi;
        }
        if (hi >= 0)
            close(hi); /* past the top (a limit above 1024): look lower */
        else if (errno != EMFILE)
            break;
    }
    return -1;
}

/* pc_fd_high, keeping fd where it is when no high number is free. */
static inline int pc_fd_high_or_keep(int fd) {
    int hi = fd >= 0 ? pc_fd_high(fd) : -1;
    return hi >= 0 ? hi : fd;
}

#endif
