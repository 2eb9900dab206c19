/* Generated from the policy registry (pagecast.policies.base.render_ids_header);
 * tests/test_policy_parity.py checks that this file matches it. Do not edit by hand:
 * declare native_id=... in the policy's module and regenerate with
 *   python -c 'from pagecast.policies.base import render_ids_header as r; print(r(), end="")' \
 *     > native/policy/pc_policy_ids.h */
#ifndef PAGECAST_PC_POLICY_IDS_H
#define PAGECAST_PC_POLICY_IDS_H

#include <stddef.h>

/* clang-format off */
enum pc_policy_id {
    PC_POLICY_NONE = 0,
    PC_POLICY_NEXTLINE = 1,
    PC_POLICY_STRIDE = 2,
    PC_POLICY_SPARSE = 3,
    PC_POLICY_TABLE = 4,
};

/* Canonical names, indexed by id (NULL: no policy has that id). */
static const char *const pc_policy_names[] = {
    "none",
    "nextline",
    "stride",
    "sparse",
    "table",
};
#define PC_POLICY_COUNT 5
/* clang-format on */

#endif
