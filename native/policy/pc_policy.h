/*
 * The C implementations of pagecast's policies, shared by every native backend: the live
 * loop's fast path (native/live/fastpath.c) and the userfaultfd pager (native/pager/pager.c)
 * call these step functions, and tests/test_policy_parity.py feeds fixed streams to them
 * through a small driver and checks that they name the same pages as the Python `observe`
 * and the simulator's compiled kernel of the same policy (src/pagecast/policies/<name>.py).
 *
 * A step sees one observed event (page, hit) of one region (a file, a paged mapping) and
 * writes the pages to prefetch to out[], best first, at most `max`, skipping pages outside
 * [0, limit) (limit 0: length unknown) exactly as pagecast.policies._numba.emit does.
 * Policy ids: pc_policy_ids.h, generated from the Python registry.
 */
#ifndef PAGECAST_PC_POLICY_H
#define PAGECAST_PC_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "policy/pc_policy_ids.h"

#define PC_MAX_PREFETCH 64 /* pages one event may ask for, as pagecast.policies._numba.MAX_PREFETCH */

static inline size_t pc_emit(int64_t *out, size_t n, size_t max, int64_t page, int64_t limit) {
    if (n >= max || page < 0 || (limit > 0 && page >= limit)) return n;
    out[n] = page;
    return n + 1;
}

/* nextline (policies/nextline.py): on a miss, `before` pages below the fault and
 * window - before - 1 above, nearest first (the page above before the one below). */
static inline size_t pc_nextline_step(int64_t page, int hit, int64_t before, int64_t window, int64_t limit,
                                      int64_t *out, size_t max) {
    if (hit) return 0;
    int64_t after = window - before - 1;
    size_t n = 0;
    for (int64_t d = 1; d <= (before > after ? before : after); d++) {
        if (d <= after) n = pc_emit(out, n, max, page + d, limit);
        if (d <= before) n = pc_emit(out, n, max, page - d, limit);
    }
    return n;
}

/* stride (policies/stride.py), one state per region: a repeated delta raises the confidence
 * (saturating at 3), any other non-zero delta replaces the stride and clears it; with
 * confidence >= min_conf, `degree` pages along the stride. */
typedef struct pc_stride_state {
    int64_t last, stride, conf;
} pc_stride_state;

static inline void pc_stride_init(pc_stride_state *s) {
    s->last = -1;
    s->stride = 0;
    s->conf = 0;
}

static inline size_t pc_stride_step(pc_stride_state *s, int64_t page, int64_t degree, int64_t min_conf, int64_t limit,
                                    int64_t *out, size_t max) {
    if (s->last >= 0) {
        int64_t d = page - s->last;
        if (d != 0 && d == s->stride)
            s->conf = s->conf + 1 < 3 ? s->conf + 1 : 3;
        else if (d != 0) {
            s->stride = d;
            s->conf = 0;
        }
    }
    s->last = page;
    size_t n = 0;
    if (s->stride != 0 && s->conf >= min_conf)
        for (int64_t k = 1; k <= degree; k++) n = pc_emit(out, n, max, page + k * s->stride, limit);
    return n;
}

#endif
