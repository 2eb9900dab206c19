/* The CLOCK sweep shared by the userfaultfd pager (native/pager/pager.c) and the policy
 * registry's parity test (tests/evict_parity_driver.c), the rule of the simulator's CLOCK
 * (src/pagecast/sim/engine.py, _clock_sweep; policies/evict_clock.py).
 *
 * The hand moves over the frames of a ring; a frame whose page has the reference bit
 * loses the bit and is passed over, the first frame without it is the victim's. A frame
 * holding no resident page is free at once; a pinned page (being installed) is passed
 * over. Who sets the reference bit is the caller's business: the simulator on every hit,
 * the pager when it learns of a use (a write fault, the first use of a prefetched page). */
#ifndef PAGECAST_PC_EVICT_H
#define PAGECAST_PC_EVICT_H

#include <stdint.h>

/* The frame the hand frees next (the hand moves past it), or -1 after max_steps frames. */
static inline int64_t pc_clock_next(const int64_t *ring, uint64_t cap, uint64_t *hand, uint8_t *state, uint8_t res,
                                    uint8_t ref, uint8_t pin, uint64_t max_steps) {
    for (uint64_t steps = 0; steps < max_steps; steps++) {
        uint64_t h = *hand;
        *hand = (h + 1) % cap;
        int64_t v = ring[h];
        if (v < 0 || !(state[v] & (res | pin))) return (int64_t)h;
        if (state[v] & pin) continue;
        if (state[v] & ref) {
            state[v] &= (uint8_t)~ref;
            continue;
        }
        return (int64_t)h;
    }
    return -1;
}

#endif
