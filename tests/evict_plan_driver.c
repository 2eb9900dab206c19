/* Feeds a page stream through the pager's plan-guided eviction (native/policy/pc_evict_plan.h)
 * as the pager runs it: on entering a chunk, the stream pages of the chunk passed leave and
 * their frames are taken first; else the plan's CLOCK sweep (reference bits set on insertion
 * and on every hit, as the simulator sets them). Prints "a PAGE" per page evicted after use
 * and "v PAGE" per victim of the sweep: tests/test_evict_plan.py compares them with a Python
 * reference of the same rule.
 *   evict_plan_driver CAPACITY CHUNK_PAGES CLASSES < pages (one per line)
 * CLASSES: one digit per page (0 other, 1 keep, 2 stream). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../native/policy/pc_evict_plan.h"

enum { RES = 1, REF = 2, PIN = 4 };

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    uint64_t cap = strtoull(argv[1], NULL, 10), cp = strtoull(argv[2], NULL, 10), fill = 0, hand = 0, nfree = 0;
    uint64_t npages = strlen(argv[3]);
    int64_t *ring = malloc(cap * sizeof *ring);
    uint64_t *freef = malloc(cap * sizeof *freef), *slot = malloc(npages * sizeof *slot);
    uint8_t *state = calloc(npages, 1), *cls = malloc(npages);
    int64_t hist[2] = {-1, -1};
    if (!ring || !freef || !slot || !state || !cls || cap == 0 || cp == 0) return 2;
    for (uint64_t i = 0; i < npages; i++) cls[i] = (uint8_t)(argv[3][i] - '0');
    long long p;
    while (scanf("%lld", &p) == 1) {
        if (p < 0 || (uint64_t)p >= npages) return 2;
        int64_t c = p / (int64_t)cp;
        if (c != hist[0]) {
            int64_t passed = pc_plan_enter(hist, c);
            for (int64_t q = passed * (int64_t)cp;
                 passed >= 0 && q < (passed + 1) * (int64_t)cp && (uint64_t)q < npages; q++) {
                if (cls[q] != PC_CLASS_STREAM || !(state[q] & RES)) continue;
                printf("a %lld\n", (long long)q);
                state[q] = 0;
                ring[slot[q]] = -1;
                freef[nfree++] = slot[q];
            }
        }
        if (state[p] & RES) {
            state[p] |= REF;
            continue;
        }
        int64_t h = -1;
        if (fill < cap) h = (int64_t)fill++;
        while (h < 0 && nfree) {
            uint64_t f = freef[--nfree];
            if (ring[f] < 0) h = (int64_t)f;
        }
        if (h < 0) {
            h = pc_plan_clock_next(ring, cap, &hand, state, cls, RES, REF, PIN, 3 * cap + 3);
            if (h < 0) return 3;
            if (ring[h] >= 0 && (state[ring[h]] & RES)) {
                printf("v %lld\n", (long long)ring[h]);
                state[ring[h]] = 0;
            }
        }
        ring[h] = p;
        slot[p] = (uint64_t)h;
        state[p] = RES | REF;
    }
    return 0;
}
