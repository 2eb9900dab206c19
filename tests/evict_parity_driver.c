/* Feeds a page stream through the pager's CLOCK sweep (native/policy/pc_evict.h) with the
 * simulator's reference bits (set on insertion and on every hit) and prints each victim:
 * tests/test_policy_parity.py compares them with the simulator's.
 *   evict_parity_driver CAPACITY < pages (one per line) */
#include <stdio.h>
#include <stdlib.h>

#include "../native/policy/pc_evict.h"

enum { RES = 1, REF = 2, PIN = 4, MAXPAGES = 1 << 20 };

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    uint64_t cap = strtoull(argv[1], NULL, 10), fill = 0, hand = 0;
    int64_t *ring = malloc(cap * sizeof *ring);
    uint8_t *state = calloc(MAXPAGES, 1);
    if (!ring || !state || cap == 0) return 2;
    long long p;
    while (scanf("%lld", &p) == 1) {
        if (p < 0 || p >= MAXPAGES) return 2;
        if (state[p] & RES) {
            state[p] |= REF;
            continue;
        }
        if (fill < cap) {
            ring[fill++] = p;
        } else {
            int64_t h = pc_clock_next(ring, cap, &hand, state, RES, REF, PIN, 3 * cap + 3);
            if (h < 0) return 3;
            printf("%lld\n", (long long)ring[h]);
            state[ring[h]] = 0;
            ring[h] = p;
        }
        state[p] = RES | REF;
    }
    return 0;
}
