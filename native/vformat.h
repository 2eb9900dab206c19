/*
 * A message formatted from a variadic function's own arguments into a fixed array: cut to
 * fit and always terminated, so an error, note or log line never overruns its buffer
 * whatever a path or a system message inside it holds.
 *
 * Header-only, like open_mode.h.
 */
#ifndef PC_VFORMAT_H
#define PC_VFORMAT_H

#include <stdarg.h>
#include <stdio.h>

/* In a variadic function whose last named parameter is `fmt`: formats its arguments into
 * `buf`, an array (not a pointer: its size is the limit). */
#define PC_VFORMAT(buf, fmt)                                                                                           \
    do {                                                                                                               \
        va_list pc_ap_;                                                                                                \
        va_start(pc_ap_, fmt);                                                                                         \
        vsnprintf(buf, sizeof buf, fmt, pc_ap_);                                                                       \
        va_end(pc_ap_);                                                                                                \
    } while (0)

#endif
