/*
 * Opening an input that must be a regular file (a plan, a planned data file, a page pack, a
 * prefetch table) without ever blocking. A name checked with stat() a moment ago can be
 * something else by the time it is opened: a FIFO put in its place would block open() until
 * a writer comes, forever in a detached process. So the open is O_NONBLOCK|O_NOCTTY (a FIFO
 * or a device opens at once), the type is checked on the descriptor, not on the name, and
 * O_NONBLOCK is cleared again for the regular file.
 *
 * Header-only, like outfile.h.
 */
#ifndef PC_INFILE_H
#define PC_INFILE_H

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* pc_open_regular with O_NONBLOCK left set: for a descriptor that is only advised
 * (posix_fadvise) and closed, never read, where clearing the flag would be two more system
 * calls per file (a plan warming 13,000 files before the program starts pays them all). */
static inline int pc_open_regular_nb(const char *path, int flags, struct stat *st) {
    int fd = open(path, flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return -1;
    if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
        int e = S_ISREG(st->st_mode) ? errno : EINVAL;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* Open path (flags: O_RDONLY, O_RDWR, O_DIRECT, ...; O_CLOEXEC is added); *st gets its
 * fstat. Returns the descriptor, or -1 with errno set: EINVAL when it is not a regular file. */
static inline int pc_open_regular(const char *path, int flags, struct stat *st) {
    int fd = pc_open_regular_nb(path, flags, st);
    if (fd < 0) return -1;
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

/* Why pc_open_regular failed, for a message. */
static inline const char *pc_open_why(int err) {
    return err == EINVAL ? "not a regular file" : strerror(err);
}

#endif
