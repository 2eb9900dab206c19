/*
 * Creating output files, also as root in a directory other users can write (/tmp, a shared
 * output directory). A file is never opened through a name someone else could have chosen
 * first: a temporary is created exclusively (O_CREAT|O_EXCL, which refuses an existing
 * name and a planted symlink alike) under a random name next to the output, written, and
 * renamed over the output (rename replaces a symlink at the output's name, it does not
 * follow it). Files that are appended to while the program runs (logs) are created with
 * O_EXCL|O_NOFOLLOW under their final name. The same contract as src/pagecast/util/atomic.py.
 *
 * Header-only: every native part that writes files (launcher, pager, shims, CUDA logs)
 * includes it, and none of them links another object for it.
 */
#ifndef PC_OUTFILE_H
#define PC_OUTFILE_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The umask, read without changing it (umask() would race with the program's threads). */
static inline mode_t pc_out_umask(void) {
    mode_t m = 022;
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return m;
    char buf[2048];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return m;
    buf[n] = 0;
    char *u = strstr(buf, "\nUmask:");
    if (u) m = (mode_t)strtoul(u + 7, NULL, 8);
    return m;
}

/* A new temporary for `path` in its directory, ".NAME.XXXXXX.tmp" (random), created
 * O_EXCL with the permissions a new file gets (0644 under umask 022). Its name goes to
 * tmp. Returns the descriptor (O_CLOEXEC) or -1 with errno set. */
static inline int pc_out_temp(const char *path, char *tmp, size_t tmplen) {
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path + 1) : 0;
    const char *base = slash ? slash + 1 : path;
    if (!*base || snprintf(tmp, tmplen, "%.*s.%s.XXXXXX.tmp", dirlen, path, base) >= (int)tmplen) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = mkostemps(tmp, 4, O_CLOEXEC);
    if (fd < 0) return -1;
    if (fchmod(fd, 0644 & ~pc_out_umask()) < 0) { /* mkostemps makes 0600 */
    }
    return fd;
}

/* pc_out_temp as a stdio stream ("w" or "wb"). */
static inline FILE *pc_out_ftemp(const char *path, char *tmp, size_t tmplen) {
    int fd = pc_out_temp(path, tmp, tmplen);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
    }
    return f;
}

/* The temporary is written and closed: rename it into place if ok, else remove it.
 * Returns 0, or -1 (temporary removed). */
static inline int pc_out_commit(int ok, const char *tmp, const char *path) {
    if (ok && rename(tmp, path) == 0) return 0;
    int e = errno;
    unlink(tmp);
    errno = e;
    return -1;
}

/* pc_out_commit for a stream: closes it first (a failed close is a failed write). */
static inline int pc_out_fcommit(FILE *f, const char *tmp, const char *path) {
    int ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    return pc_out_commit(ok, tmp, path);
}

/* A new file under its final name, for files written as they go (logs): refuses any
 * existing name, a symlink included. flags: O_WRONLY, O_APPEND, ... */
static inline int pc_out_new(const char *path, int flags) {
    return open(path, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
}

#endif
