/* Eviction guided by a memory plan (pagecast plan --memory), beside the CLOCK sweep of
 * pc_evict.h: the userfaultfd pager's rule under `pagecast run --memory --plan --backend
 * pager` (native/pager/pager.c), and the rule tests/evict_plan_driver.c feeds streams
 * through for tests/test_evict_plan.py, against a Python reference of it.
 *
 * Every page has a class from the plan: keep (held for the whole run), stream (used once
 * per pass: its next use is farther than the budget holds) or other. Three steps:
 *  - keep pages are never victims (passed over like pinned ones), so a keep page is read
 *    once per run;
 *  - evict after use: when the program enters a chunk, the chunk it entered two distinct
 *    chunks before (it has moved past it) gives up its stream pages at once; their frames
 *    are taken first by the pages coming in (pc_plan_enter names that chunk);
 *  - otherwise CLOCK, in which a stream page gets no second chance. */
#ifndef PAGECAST_PC_EVICT_PLAN_H
#define PAGECAST_PC_EVICT_PLAN_H

#include <stdint.h>

enum { PC_CLASS_OTHER = 0, PC_CLASS_KEEP = 1, PC_CLASS_STREAM = 2 };

/* The CLOCK sweep of pc_clock_next with the plan's classes (cls: per page): frames of keep
 * pages are passed over, a stream page's reference bit is ignored. -1 after max_steps. */
static inline int64_t pc_plan_clock_next(const int64_t *ring, uint64_t cap, uint64_t *hand, uint8_t *state,
                                         const uint8_t *cls, uint8_t res, uint8_t ref, uint8_t pin,
                                         uint64_t max_steps) {
    for (uint64_t steps = 0; steps < max_steps; steps++) {
        uint64_t h = *hand;
        *hand = (h + 1) % cap;
        int64_t v = ring[h];
        if (v < 0 || !(state[v] & (res | pin))) return (int64_t)h;
        if ((state[v] & pin) || cls[v] == PC_CLASS_KEEP) continue;
        if ((state[v] & ref) && cls[v] != PC_CLASS_STREAM) {
            state[v] &= (uint8_t)~ref;
            continue;
        }
        return (int64_t)h;
    }
    return -1;
}

/* The program touched chunk c. hist holds the last two distinct chunks it entered (-1:
 * none yet), most recent first. Returns the chunk it has now moved past (entered two
 * distinct chunks before c, and not c itself), whose stream pages leave now; -1 if none. */
static inline int64_t pc_plan_enter(int64_t hist[2], int64_t c) {
    if (c == hist[0]) return -1;
    int64_t passed = -1;
    if (c != hist[1]) passed = hist[1];
    hist[1] = hist[0];
    hist[0] = c;
    return passed;
}

#endif
