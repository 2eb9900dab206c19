/* Parity driver for pagecast.policies.parity (check() and tests/test_policy_parity.py):
 * feeds an access stream to the C policy steps the native backends run
 * (native/policy/pc_policy.h: the live fast path calls them per file, the pager per
 * mapping) and prints the pages each event names, one line per event.
 *
 *   policy_parity_driver ID P0 P1 LIMIT0 [LIMIT1 ...]  < "region page hit" lines
 *
 * ID is a PC_POLICY_* id, P0/P1 the policy's native parameters (nextline: before, window;
 * stride: degree, min_conf), LIMITi the pages of region i (0: unknown). */
#include <stdio.h>
#include <stdlib.h>

#include "policy/pc_policy.h"

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s ID P0 P1 LIMIT...\n", argv[0]);
        return 2;
    }
    int id = atoi(argv[1]);
    int64_t p0 = atoll(argv[2]), p1 = atoll(argv[3]);
    int nreg = argc - 4;
    int64_t *limit = calloc((size_t)nreg, sizeof *limit);
    pc_stride_state *st = calloc((size_t)nreg, sizeof *st);
    if (!limit || !st) return 1;
    for (int i = 0; i < nreg; i++) {
        limit[i] = atoll(argv[4 + i]);
        pc_stride_init(&st[i]);
    }
    long long region, page;
    int hit;
    int64_t out[PC_MAX_PREFETCH];
    while (scanf("%lld %lld %d", &region, &page, &hit) == 3) {
        if (region < 0 || region >= nreg) {
            fprintf(stderr, "region %lld out of range\n", region);
            return 2;
        }
        size_t n;
        switch (id) {
            case PC_POLICY_NONE:
                n = 0;
                break;
            case PC_POLICY_NEXTLINE:
                n = pc_nextline_step(page, hit, p0, p1, limit[region], out, PC_MAX_PREFETCH);
                break;
            case PC_POLICY_STRIDE:
                n = pc_stride_step(&st[region], page, p0, p1, limit[region], out, PC_MAX_PREFETCH);
                break;
            default:
                fprintf(stderr, "policy id %d has no shared C step in pc_policy.h\n", id);
                return 3;
        }
        for (size_t i = 0; i < n; i++) printf(i ? " %lld" : "%lld", (long long)out[i]);
        printf("\n");
    }
    return 0;
}
