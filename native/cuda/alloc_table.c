/* Allocation table: every cuMemAlloc/cuMemAllocManaged of the process, so that any
 * device address becomes (allocation, offset). Allocations are kept forever (the table
 * is written out at exit); a second array holds the live ones sorted by base for
 * binary search. One mutex guards both: calls come from any application thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outfile.h"
#include "pc_internal.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pc_alloc *all; /* index == id */
static size_t n_all, cap_all;
static int64_t *live; /* ids of live allocations, sorted by base */
static size_t n_live, cap_live;
static int32_t next_order[2];
static uint64_t generation; /* bumped on every change, read without the lock */

uint64_t pc_alloc_generation(void) {
    return __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* First live index whose base is > addr. */
static size_t upper_bound(uint64_t addr) {
    size_t lo = 0, hi = n_live;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (all[live[mid]].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Hold the lock across fork() so a child never inherits it locked by another thread. */
static void lock_table(void) {
    pthread_mutex_lock(&lock);
}
static void unlock_table(void) {
    pthread_mutex_unlock(&lock);
}
__attribute__((constructor)) static void register_atfork(void) {
    pthread_atfork(lock_table, unlock_table, unlock_table);
}

int64_t pc_alloc_add(uint64_t base, uint64_t size, int kind) {
    int64_t id = -1;
    pthread_mutex_lock(&lock);
    if (grow((void **)&all, &cap_all, n_all + 1, sizeof *all) == 0 &&
        grow((void **)&live, &cap_live, n_live + 1, sizeof *live) == 0) {
        id = (int64_t)n_all++;
        struct pc_alloc *a = &all[id];
        a->id = id;
        a->kind = kind;
        a->order = next_order[kind == PC_ALLOC_MANAGED]++;
        a->base = base;
        a->size = size;
        a->created_ns = pc_now_ns();
        a->freed_ns = -1;
        size_t pos = upper_bound(base);
        if (pos > 0 && all[live[pos - 1]].base == base) {
            /* The driver reused a base whose free we have not recorded yet (a racing
             * free on another thread): the old allocation is gone. */
            all[live[pos - 1]].freed_ns = a->created_ns;
            live[pos - 1] = id;
            __atomic_fetch_add(&generation, 1, __ATOMIC_RELEASE);
            pthread_mutex_unlock(&lock);
            return id;
        }
        memmove(&live[pos + 1], &live[pos], (n_live - pos) * sizeof *live);
        live[pos] = id;
        n_live++;
        __atomic_fetch_add(&generation, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&lock);
    return id;
}

int64_t pc_alloc_free(uint64_t base) {
    int64_t id = -1;
    pthread_mutex_lock(&lock);
    size_t pos = upper_bound(base);
    if (pos > 0 && all[live[pos - 1]].base == base) {
        id = live[pos - 1];
        all[id].freed_ns = pc_now_ns();
        memmove(&live[pos - 1], &live[pos], (n_live - pos) * sizeof *live);
        n_live--;
        __atomic_fetch_add(&generation, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&lock);
    return id;
}

int pc_alloc_lookup(uint64_t addr, struct pc_alloc *out) {
    int found = 0;
    pthread_mutex_lock(&lock);
    size_t pos = upper_bound(addr);
    if (pos > 0) {
        const struct pc_alloc *a = &all[live[pos - 1]];
        if (addr - a->base < a->size) {
            *out = *a;
            found = 1;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

int pc_alloc_by_order(int kind, int32_t order, struct pc_alloc *out) {
    int found = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_all; i++) {
        if (all[i].kind == kind && all[i].order == order) {
            *out = all[i];
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

int pc_alloc_write_csv(const char *path) {
    char tmp[4200];
    FILE *f = pc_out_ftemp(path, tmp, sizeof tmp);
    if (!f) return -1;
    fputs("id,kind,order,base,size,created_ns,freed_ns\n", f);
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_all; i++) {
        const struct pc_alloc *a = &all[i];
        fprintf(f, "%lld,%s,%d,0x%llx,%llu,%lld,%lld\n", (long long)a->id,
                a->kind == PC_ALLOC_MANAGED ? "managed" : "device", a->order, (unsigned long long)a->base,
                (unsigned long long)a->size, (long long)a->created_ns, (long long)a->freed_ns);
    }
    pthread_mutex_unlock(&lock);
    return pc_out_fcommit(f, tmp, path);
}

int pagecast_cuda_translate(uint64_t addr, int64_t *alloc_id, uint64_t *offset) {
    struct pc_alloc a;
    if (!pc_alloc_lookup(addr, &a)) return 0;
    if (alloc_id) *alloc_id = a.id;
    if (offset) *offset = addr - a.base;
    return 1;
}
