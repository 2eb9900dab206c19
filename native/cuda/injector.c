/* Prefetch injector of libpagecast_cuda.so.
 *
 * A watcher thread polls the predictions file (PREDICTIONS_FILE or PREFETCH_CSV) and,
 * when it is replaced, parses it, merges adjacent pages into ranges and arms them.
 * Armed ranges are issued from the application's own thread at its next cuLaunchKernel
 * (that thread has the CUDA context current; the kernel about to run is what faults),
 * (or every launch, with PREFETCH_REPEAT=1) on a private non-blocking stream, in chunks, and only after checking the range
 * against the live allocation table: a page of an allocation that was freed, or an
 * address no live allocation contains, is skipped and counted, never handed to the
 * driver (the "invalid argument" AI4Mem's injector got).
 *
 * File formats (see docs/cuda.md):
 *   pagecast-prefetch 1                      first line
 *   <managed|device> <order> <page> [score]  one page per line; '#' starts a comment
 *   evict <managed|device> <order> <page> [score]
 *                                            a pre-eviction: the page goes to the host
 *                                            (cuMemPrefetchAsync to the CPU location), issued
 *                                            before the prefetches of the same launch
 * or AI4Mem's predictions CSV with absolute addresses (header naming page_addr or
 * Prefetch_Address, optional score/Confidence column). */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "outfile.h"
#include "pc_internal.h"

#undef cuMemPrefetchAsync
#define PAGE_SHIFT    12
#define SLOT_PREFETCH 60 /* metrics slot of our own prefetches (interposer uses < 32) */
#define KIND_ABSOLUTE (-1)

struct range {
    int to_host;   /* a pre-eviction (to the CPU), not a prefetch */
    int kind;      /* PC_ALLOC_MANAGED / PC_ALLOC_DEVICE, or KIND_ABSOLUTE */
    int32_t order; /* allocation order among its kind (unused for absolute) */
    uint64_t page; /* first page (relative, or absolute address >> 12) */
    uint64_t npages;
    size_t line; /* first file line naming one of its pages: issue priority */
};

struct entry {
    int to_host;
    int kind;
    int32_t order;
    uint64_t page;
    size_t line;
};

struct config {
    char path[4096];
    int device, sync, repeat;
    double delay_sec, min_score;
    long poll_ms;
    uint64_t chunk;
};

struct stats {
    uint64_t loads_ok, loads_failed, ranges_loaded, chunks, bytes, errors, skipped_freed, skipped_no_alloc,
        pages_out_of_range, evict_chunks, evict_bytes;
};

static struct config cfg;
static int active;
static pthread_t watcher;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* ranges, stats, stream */
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static int stopping;
static struct range *armed;
static size_t n_armed;
static int have_armed;            /* atomic fast-path flag for the launch hook */
static uint64_t tried_generation; /* allocation table generation of the last attempt */
static int new_load;
static struct stats st;
static CUstream stream;
static pid_t owner; /* the process that runs the watcher (a forked child has none) */

/* ---- parsing --------------------------------------------------------------------------- */
static int cmp_entry(const void *a, const void *b) {
    const struct entry *x = a, *y = b;
    if (x->to_host != y->to_host) return x->to_host < y->to_host ? -1 : 1;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->order != y->order) return x->order < y->order ? -1 : 1;
    if (x->page != y->page) return x->page < y->page ? -1 : 1;
    return x->line < y->line ? -1 : (x->line > y->line);
}

static int cmp_range_line(const void *a, const void *b) {
    const struct range *x = a, *y = b;
    /* pre-evictions first: they make room for the prefetches of the same launch */
    if (x->to_host != y->to_host) return x->to_host > y->to_host ? -1 : 1;
    return x->line < y->line ? -1 : (x->line > y->line);
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

static int parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (!*s || *s == '-') return -1;
    unsigned long long v = strtoull(s, &end, 0); /* 0x... or decimal */
    if (errno || *trim(end)) return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *trim(end) || isnan(v)) return -1;
    *out = v;
    return 0;
}

/* Splits s in place on sep (',' or whitespace when sep == 0); returns the field count. */
static int split(char *s, char sep, char **f, int max) {
    int n = 0;
    while (n < max) {
        if (!sep)
            while (isspace((unsigned char)*s)) s++;
        if (!*s && (!sep || n > 0)) break;
        f[n++] = s;
        char *e = sep ? strchr(s, sep) : s + strcspn(s, " \t");
        if (!e || !*e) break;
        *e = 0;
        s = e + 1;
    }
    for (int i = 0; i < n; i++) f[i] = trim(f[i]);
    return n;
}

static int find_col(char **f, int n, const char *a, const char *b) {
    for (int i = 0; i < n; i++)
        if (strcasecmp(f[i], a) == 0 || (b && strcasecmp(f[i], b) == 0)) return i;
    return -1;
}

/* Parses the file into merged ranges sorted by first line. On error returns -1 with a
 * one-line message in err naming the line. */
static int parse_file(const char *path, struct range **out, size_t *n_out, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct entry *e = NULL;
    size_t n = 0, cap = 0, lineno = 0;
    int mode = 0; /* 1 native, 2 seed CSV */
    int col_addr = -1, col_score = -1;
    char *line = NULL;
    size_t lcap = 0;
    int rc = 0;
    while (getline(&line, &lcap, f) >= 0) {
        lineno++;
        char *hash = mode == 1 ? strchr(line, '#') : NULL;
        if (hash) *hash = 0;
        char *s = trim(line);
        if (!*s || (mode != 1 && s[0] == '#')) continue;
        char *fld[16];
        if (mode == 0) {
            if (strncmp(s, "pagecast-prefetch", 17) == 0) {
                int nf = split(s, 0, fld, 16);
                if (nf < 2 || strcmp(fld[1], "1") != 0) {
                    snprintf(err, errlen, "%s:%zu: unsupported pagecast-prefetch version", path, lineno);
                    rc = -1;
                    break;
                }
                mode = 1;
                continue;
            }
            int nf = split(s, ',', fld, 16);
            col_addr = find_col(fld, nf, "page_addr", "Prefetch_Address");
            col_score = find_col(fld, nf, "score", "Confidence");
            if (col_addr < 0) {
                snprintf(err, errlen,
                         "%s:%zu: not a predictions file (expected a 'pagecast-prefetch 1' line or a CSV header "
                         "with page_addr or Prefetch_Address)",
                         path, lineno);
                rc = -1;
                break;
            }
            mode = 2;
            continue;
        }
        struct entry x = {0};
        double score = 1.0;
        x.line = lineno;
        if (mode == 1) {
            int nf = split(s, 0, fld, 16);
            uint64_t order, page;
            char **fp = fld; /* the fields after an 'evict' word */
            if (nf > 0 && strcmp(fld[0], "evict") == 0) {
                x.to_host = 1;
                fp++, nf--;
            }
            if (nf < 3 || nf > 4) {
                snprintf(err, errlen, "%s:%zu: expected '[evict] <managed|device> <order> <page> [score]'", path,
                         lineno);
                rc = -1;
                break;
            }
            if (strcmp(fp[0], "managed") == 0)
                x.kind = PC_ALLOC_MANAGED;
            else if (strcmp(fp[0], "device") == 0)
                x.kind = PC_ALLOC_DEVICE;
            else {
                snprintf(err, errlen, "%s:%zu: unknown allocation kind '%.32s'", path, lineno, fp[0]);
                rc = -1;
                break;
            }
            if (parse_u64(fp[1], &order) || order > INT32_MAX || parse_u64(fp[2], &page) ||
                page > (UINT64_MAX >> PAGE_SHIFT) || (nf == 4 && parse_double(fp[3], &score))) {
                snprintf(err, errlen, "%s:%zu: bad number", path, lineno);
                rc = -1;
                break;
            }
            x.order = (int32_t)order;
            x.page = page;
        } else {
            int nf = split(s, ',', fld, 16);
            uint64_t addr;
            if (col_addr >= nf || parse_u64(fld[col_addr], &addr) ||
                (col_score >= 0 && (col_score >= nf || parse_double(fld[col_score], &score)))) {
                snprintf(err, errlen, "%s:%zu: bad address or score", path, lineno);
                rc = -1;
                break;
            }
            x.kind = KIND_ABSOLUTE;
            x.page = addr >> PAGE_SHIFT;
        }
        if (score < cfg.min_score) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            struct entry *q = realloc(e, cap * sizeof *e);
            if (!q) {
                snprintf(err, errlen, "%s: out of memory", path);
                rc = -1;
                break;
            }
            e = q;
        }
        e[n++] = x;
    }
    free(line);
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        rc = -1;
    }
    fclose(f);
    if (rc == 0 && mode == 0) {
        snprintf(err, errlen, "%s: empty predictions file", path);
        rc = -1;
    }
    if (rc != 0) {
        free(e);
        return -1;
    }
    qsort(e, n, sizeof *e, cmp_entry);
    struct range *r = n ? malloc(n * sizeof *r) : NULL;
    size_t nr = 0;
    for (size_t i = 0; i < n; i++) {
        struct range *last = nr ? &r[nr - 1] : NULL;
        if (last && last->to_host == e[i].to_host && last->kind == e[i].kind && last->order == e[i].order &&
            e[i].page <= last->page + last->npages) {
            if (e[i].page == last->page + last->npages) last->npages++; /* else a duplicate page */
            if (e[i].line < last->line) last->line = e[i].line;
            continue;
        }
        r[nr++] = (struct range){e[i].to_host, e[i].kind, e[i].order, e[i].page, 1, e[i].line};
    }
    free(e);
    if (nr) qsort(r, nr, sizeof *r, cmp_range_line);
    *out = r;
    *n_out = nr;
    return 0;
}

/* ---- issuing ---------------------------------------------------------------------------- */
typedef CUresult (*stream_create_fn)(CUstream *, unsigned int);
typedef CUresult (*stream_sync_fn)(CUstream);
typedef CUresult (*prefetch_v1_fn)(CUdeviceptr, size_t, CUdevice, CUstream);
typedef CUresult (*prefetch_v2_fn)(CUdeviceptr, size_t, CUmemLocation, unsigned int, CUstream);

/* One cuMemPrefetchAsync of [addr, addr+bytes): to the device, or to the host for a
 * pre-eviction (CU_MEM_LOCATION_TYPE_HOST in the v2 ABI, CU_DEVICE_CPU in the v1 ABI). */
static CUresult prefetch_chunk(uint64_t addr, uint64_t bytes, int to_host) {
    static prefetch_v2_fn v2;
    static prefetch_v1_fn v1;
    static int resolved;
    if (!resolved) {
        v2 = (prefetch_v2_fn)pc_real_sym("cuMemPrefetchAsync_v2");
        v1 = (prefetch_v1_fn)pc_real_sym("cuMemPrefetchAsync");
        resolved = 1;
    }
    int64_t t0 = pc_now_ns();
    CUresult r = CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND;
    if (v2) {
        CUmemLocation loc = {.type = to_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE,
                             .id = to_host ? 0 : cfg.device};
        r = v2((CUdeviceptr)addr, (size_t)bytes, loc, 0, stream);
    } else if (v1) {
        r = v1((CUdeviceptr)addr, (size_t)bytes, to_host ? CU_DEVICE_CPU : (CUdevice)cfg.device, stream);
    }
    if (to_host)
        pc_log_call(SLOT_PREFETCH + 1, "pagecast_pre_evict", t0, pc_now_ns() - t0, bytes, PC_DIR_TO_HOST, addr, (int)r);
    else
        pc_log_call(SLOT_PREFETCH, "pagecast_prefetch", t0, pc_now_ns() - t0, bytes, PC_DIR_TO_DEVICE, addr, (int)r);
    return r;
}

/* Issues [addr, addr+bytes) of allocation a in chunks aligned to the chunk size. */
static void issue_span(const struct pc_alloc *a, uint64_t off, uint64_t bytes, int to_host) {
    uint64_t end = off + bytes;
    while (off < end) {
        uint64_t next = (off / cfg.chunk + 1) * cfg.chunk;
        if (next > end) next = end;
        CUresult r = prefetch_chunk(a->base + off, next - off, to_host);
        if (r == CUDA_SUCCESS && to_host) {
            st.evict_chunks++;
            st.evict_bytes += next - off;
        } else if (r == CUDA_SUCCESS) {
            st.chunks++;
            st.bytes += next - off;
        } else {
            st.errors++;
        }
        off = next;
    }
}

enum { RANGE_PENDING = 0, RANGE_ISSUED = 1, RANGE_DROPPED = 2 };

/* Issues the range if its allocation is live; RANGE_PENDING keeps it armed. */
static int try_range(const struct range *rg) {
    struct pc_alloc a;
    uint64_t size_pages;
    if (rg->kind == KIND_ABSOLUTE) {
        /* Seed addresses: each piece must lie in a live allocation, else it is skipped. */
        uint64_t page = rg->page, left = rg->npages;
        while (left) {
            if (!pc_alloc_lookup(page << PAGE_SHIFT, &a)) {
                st.skipped_no_alloc++;
                page++, left--;
                continue;
            }
            uint64_t off = (page << PAGE_SHIFT) - a.base;
            uint64_t avail = a.size - off;
            uint64_t want = left << PAGE_SHIFT;
            uint64_t bytes = want < avail ? want : avail;
            issue_span(&a, off, bytes, rg->to_host);
            uint64_t used = (bytes + (1u << PAGE_SHIFT) - 1) >> PAGE_SHIFT;
            page += used, left -= used;
        }
        return RANGE_ISSUED;
    }
    if (!pc_alloc_by_order(rg->kind, rg->order, &a)) return RANGE_PENDING; /* not allocated yet */
    if (a.freed_ns >= 0) {
        st.skipped_freed++;
        return RANGE_DROPPED;
    }
    size_pages = (a.size + (1u << PAGE_SHIFT) - 1) >> PAGE_SHIFT;
    if (rg->page >= size_pages) {
        st.pages_out_of_range += rg->npages;
        return RANGE_DROPPED;
    }
    uint64_t n = rg->npages;
    if (rg->page + n > size_pages) {
        st.pages_out_of_range += rg->page + n - size_pages;
        n = size_pages - rg->page;
    }
    uint64_t off = rg->page << PAGE_SHIFT;
    uint64_t bytes = n << PAGE_SHIFT;
    if (off + bytes > a.size) bytes = a.size - off; /* last partial page */
    issue_span(&a, off, bytes, rg->to_host);
    return RANGE_ISSUED;
}

void pc_injector_on_launch(void) {
    if (!__atomic_load_n(&have_armed, __ATOMIC_ACQUIRE)) return;
    if (pthread_mutex_trylock(&lock) != 0) return; /* another thread is issuing */
    uint64_t gen = pc_alloc_generation();
    if (!cfg.repeat && !new_load && gen == tried_generation) goto out; /* nothing new can be issued */
    new_load = 0;
    tried_generation = gen;
    if (!stream) {
        stream_create_fn create = (stream_create_fn)pc_real_sym("cuStreamCreate");
        if (!create || create(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
            stream = NULL;
            st.errors++;
            pc_log_message("cannot create the prefetch stream; prefetches not issued");
            __atomic_store_n(&have_armed, 0, __ATOMIC_RELEASE);
            goto out;
        }
    }
    size_t keep = 0;
    for (size_t i = 0; i < n_armed; i++) {
        int state = try_range(&armed[i]);
        /* PREFETCH_REPEAT: a program that moves its data back to the host between
         * launches needs the same pages again before every launch. */
        if (state == RANGE_PENDING || (state == RANGE_ISSUED && cfg.repeat)) armed[keep++] = armed[i];
    }
    n_armed = keep;
    if (cfg.sync) {
        stream_sync_fn sync = (stream_sync_fn)pc_real_sym("cuStreamSynchronize");
        if (sync) sync(stream);
    }
    if (!n_armed) __atomic_store_n(&have_armed, 0, __ATOMIC_RELEASE);
out:
    pthread_mutex_unlock(&lock);
}

/* ---- watcher ------------------------------------------------------------------------------ */
static void load(void) {
    struct range *r = NULL;
    size_t n = 0;
    char err[4800]; /* room for the longest path */
    if (parse_file(cfg.path, &r, &n, err, sizeof err) != 0) {
        pthread_mutex_lock(&lock);
        st.loads_failed++;
        pthread_mutex_unlock(&lock);
        pc_log_message("%s; file ignored", err);
        return;
    }
    pthread_mutex_lock(&lock);
    free(armed);
    armed = r;
    n_armed = n;
    new_load = 1;
    st.loads_ok++;
    st.ranges_loaded += n;
    __atomic_store_n(&have_armed, n > 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
}

/* Waits ms milliseconds or until stopping; returns 1 when stopping. */
static int nap(long ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&wake_lock);
    while (!stopping && pthread_cond_timedwait(&wake, &wake_lock, &ts) == 0) {
    }
    int s = stopping;
    pthread_mutex_unlock(&wake_lock);
    return s;
}

static void *watch(void *arg) {
    (void)arg;
    if (cfg.delay_sec > 0 && nap((long)(cfg.delay_sec * 1000))) return NULL;
    struct stat last = {0};
    int seen = 0;
    for (;;) {
        struct stat now;
        if (stat(cfg.path, &now) == 0) {
            /* An atomic replace (rename) changes the inode; an in-place edit the mtime. */
            if (!seen || now.st_ino != last.st_ino || now.st_size != last.st_size ||
                now.st_mtim.tv_sec != last.st_mtim.tv_sec || now.st_mtim.tv_nsec != last.st_mtim.tv_nsec) {
                last = now;
                seen = 1;
                load();
            }
        }
        if (nap(cfg.poll_ms)) return NULL;
    }
}

static double env_double(const char *name, double dflt) {
    const char *v = getenv(name);
    double d;
    return v && *v && parse_double(v, &d) == 0 ? d : dflt;
}

void pc_injector_init(void) {
    const char *path = getenv("PREDICTIONS_FILE");
    if (!path || !*path) path = getenv("PREFETCH_CSV");
    if (!path || !*path || strlen(path) >= sizeof cfg.path) return;
    strcpy(cfg.path, path);
    cfg.device = (int)env_double("PREFETCH_DEVICE", 0);
    cfg.sync = env_double("PREFETCH_SYNC", 0) != 0;
    cfg.repeat = env_double("PREFETCH_REPEAT", 0) != 0;
    cfg.delay_sec = env_double("PREFETCH_DELAY_SEC", 0);
    cfg.poll_ms = (long)env_double("PREFETCH_POLL_MS", 1000);
    if (cfg.poll_ms < 1) cfg.poll_ms = 1;
    double chunk = env_double("PREFETCH_CHUNK_BYTES", 2 << 20);
    cfg.chunk = chunk >= 4096 ? ((uint64_t)chunk >> PAGE_SHIFT) << PAGE_SHIFT : 4096;
    cfg.min_score = env_double("PREFETCH_MIN_SCORE", -INFINITY);
    if (pthread_create(&watcher, NULL, watch, NULL) != 0) {
        pc_log_message("cannot start the predictions watcher thread; prefetching disabled");
        return;
    }
    active = 1;
    owner = getpid();
}

static void write_stats(void) {
    const char *dir = pc_out_dir();
    if (!dir) return;
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/injector.%d.json", dir, (int)getpid());
    FILE *f = pc_out_ftemp(path, tmp, sizeof tmp);
    if (!f) return;
    fprintf(f,
            "{\"predictions_file\": \"%s\", \"loads_ok\": %llu, \"loads_failed\": %llu, \"ranges_loaded\": %llu, "
            "\"chunks\": %llu, \"bytes\": %llu, \"errors\": %llu, \"skipped_freed\": %llu, "
            "\"skipped_no_alloc\": %llu, \"pages_out_of_range\": %llu, \"pending_ranges\": %zu, "
            "\"evict_chunks\": %llu, \"evict_bytes\": %llu, "
            "\"chunk_bytes\": %llu, \"device\": %d, \"sync\": %d, \"repeat\": %d}\n",
            cfg.path, (unsigned long long)st.loads_ok, (unsigned long long)st.loads_failed,
            (unsigned long long)st.ranges_loaded, (unsigned long long)st.chunks, (unsigned long long)st.bytes,
            (unsigned long long)st.errors, (unsigned long long)st.skipped_freed,
            (unsigned long long)st.skipped_no_alloc, (unsigned long long)st.pages_out_of_range, n_armed,
            (unsigned long long)st.evict_chunks, (unsigned long long)st.evict_bytes, (unsigned long long)cfg.chunk,
            cfg.device, cfg.sync, cfg.repeat);
    pc_out_fcommit(f, tmp, path);
}

void pc_injector_finish(void) {
    if (!active) return;
    if (getpid() != owner) return; /* a forked child: the watcher thread is the parent's */
    pthread_mutex_lock(&wake_lock);
    stopping = 1;
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&wake_lock);
    pthread_join(watcher, NULL);
    active = 0;
    pthread_mutex_lock(&lock);
    write_stats();
    pthread_mutex_unlock(&lock);
}
