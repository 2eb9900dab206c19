/*
 * The mode argument of open(2)'s variadic family (open, open64, openat, openat64): a caller
 * passes it only when the flags create a file (O_CREAT, or O_TMPFILE, whose bits include
 * O_DIRECTORY's), so a wrapper may read it only then, as glibc's __OPEN_NEEDS_MODE does.
 *
 * Header-only, like highfd.h.
 */
#ifndef PC_OPEN_MODE_H
#define PC_OPEN_MODE_H

#include <fcntl.h>
#include <stdarg.h>
#include <sys/types.h>

static inline int pc_open_needs_mode(int flags) {
    return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE;
}

/* In a variadic open wrapper whose last named parameter is `flags`: declares `mode_t mode`,
 * the mode the caller passed (0 when the flags take none). */
#define PC_OPEN_MODE(mode, flags)                                                                                      \
    mode_t mode = 0;                                                                                                   \
    do {                                                                                                               \
        va_list pc_ap_;                                                                                                \
        va_start(pc_ap_, flags);                                                                                       \
        if (pc_open_needs_mode(flags)) mode = (mode_t)va_arg(pc_ap_, int);                                             \
        va_end(pc_ap_);                                                                                                \
    } while (0)

#endif
