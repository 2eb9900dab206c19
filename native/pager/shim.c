/* LD_PRELOAD shim: puts the pagecast pager under mmap() of chosen files, so an unmodified
 * program runs on a budget-limited userfaultfd region served from the file.
 *
 * Environment:
 *   PAGECAST_PAGER=FILE:BUDGET[,FILE:BUDGET]  files to page; BUDGET in bytes (K/M/G suffix)
 *                                             or pages with a trailing 'p' (e.g. 16p)
 *   PAGECAST_PAGER_POLICY=none|nextline|stride|sparse|table   (default none; the names of
 *                                             native/policy/pc_policy_ids.h; the old name
 *                                             next = nextline with BEFORE=0, deprecated)
 *   PAGECAST_PAGER_DEPTH=N                    pages per prefetch batch (default 16)
 *   PAGECAST_PAGER_BEFORE=N                   nextline: pages below the fault (default (N+1)/2)
 *   PAGECAST_PAGER_MIN_CONF=N                 stride: confidence needed to prefetch (default 1)
 *   PAGECAST_PAGER_TABLE=T[,T]                table files (pagecast pager table) for policy table
 *   PAGECAST_PAGER_LEARN=DIR                  sparse policy: keep learned page sets across runs
 *   PAGECAST_PAGER_LOG=DIR                    binary fault logs DIR/pager.PID.N.pglog
 *   PAGECAST_PAGER_STATS=DIR                  counters at unmap/exit: DIR/pager.PID.N.json
 *   PAGECAST_PAGER_FLUSH_MS=N                 write dirty pages back every N ms (default 1000,
 *                                             0 = only at eviction/msync/unmap/exit)
 *   PAGECAST_PAGER_STRICT=1                   if the pager cannot start, mmap fails (else it
 *                                             falls back to the kernel mapping, with a warning)
 *   PAGECAST_PAGER_PACK=P[,P]                 page packs (pagecast pager pack): each names its source
 *                                             file; a loader thread streams the matching one into the
 *                                             region as it is mapped. A stale or malformed pack is
 *                                             ignored with a one-line warning.
 *   PAGECAST_PAGER_PACK_DEFER=N               faults on pack pages at most N ahead of the loader wait
 *                                             for it (default 256)
 *   PAGECAST_PAGER_PACK_THREADS=N             loader threads reading and mapping in parallel (default 4, at most 8)
 *   PAGECAST_PAGER_PACK_DIRECT=0              read packs through the page cache (default O_DIRECT)
 *   PAGECAST_PAGER_PACK_STOP_AFTER=N          tests: the loader stops after N pages, as if it died
 *   PAGECAST_PAGER_NO_WP=1                    tests: behave as on a kernel without userfaultfd WP
 *   PAGECAST_PAGER_PLAN=M[,M]                 memory plan maps (pagecast run --memory --backend pager):
 *                                             keep pages pinned, stream pages evicted after use, the
 *                                             next chain prefetched; each names its data file
 * A file matches by device and inode, whatever name the program opens it by; it need not
 * exist before the run (a file the program creates is paged when it maps it).
 * Lists of paths: items separated by ',', a ',' or '\' inside a path written '\,' or '\\'.
 *
 * Guarantees (docs/pager.md, "Guarantees and limits"): the kernel's own checks apply to
 * every paged mmap; dirty pages are written back (changed bytes only) at eviction, msync,
 * munmap, exit, _exit and every signal whose default action ends the process; a forked
 * child never touches the parent's regions; mremap of a paged region and a second mapping
 * of a file range a writable paged mapping covers are refused before anything is lost.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "highfd.h"
#include "outfile.h"
#include "pager.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define MAXSPEC 16
#define MAXREG  64

typedef struct {
    char path[PATH_MAX];
    uint64_t budget_bytes, budget_pages;
} spec_t;

typedef struct {
    pgr_region *r;
    uint8_t *base;
    size_t len;
    int writeback;
    int writable; /* PROT_WRITE now (mapped so, or mprotect'ed since) */
    int log_fd;
    int n;
    dev_t dev; /* the file and the byte range of it the region maps */
    ino_t ino;
    uint64_t foff;
    int partial_warned;
    char path[PATH_MAX];
} live_t;

static spec_t g_spec[MAXSPEC];
static int g_nspec;
static live_t g_live[MAXREG];
static int g_nopened;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mremap)(void *, size_t, size_t, int, ...);
static int (*real_munmap)(void *, size_t);
static int (*real_msync)(void *, size_t, int);
static int (*real_mprotect)(void *, size_t, int);
static int (*real_ftruncate)(int, off_t);
static int (*real_truncate)(const char *, off_t);
static void (*real__exit)(int);

static void resolve(void) {
    if (!real_mmap) real_mmap = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
    if (!real_munmap) real_munmap = (int (*)(void *, size_t))dlsym(RTLD_NEXT, "munmap");
    if (!real_msync) real_msync = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "msync");
    if (!real_mprotect) real_mprotect = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "mprotect");
    if (!real__exit) real__exit = (void (*)(int))dlsym(RTLD_NEXT, "_exit");
    if (!real_mremap) real_mremap = (void *(*)(void *, size_t, size_t, int, ...))dlsym(RTLD_NEXT, "mremap");
    if (!real_ftruncate) real_ftruncate = (int (*)(int, off_t))dlsym(RTLD_NEXT, "ftruncate");
    if (!real_truncate) real_truncate = (int (*)(const char *, off_t))dlsym(RTLD_NEXT, "truncate");
}

/* Lists in the environment: items separated by ',', with '\,' and '\\' standing for a
 * ',' and a '\' inside an item (pagecast.pager.runtime.encode_list). Copies the next item,
 * unescaped, into out and advances *s; 0 at the end of the list. */
static int next_item(const char **s, char *out, size_t n) {
    const char *p = *s;
    if (!p || !*p) return 0;
    size_t k = 0;
    for (; *p && *p != ','; p++) {
        if (*p == '\\' && (p[1] == ',' || p[1] == '\\')) p++;
        if (k + 1 < n) out[k++] = *p;
    }
    out[k] = 0;
    *s = *p ? p + 1 : p;
    return 1;
}

static int strict_mode(void) {
    const char *strict = getenv("PAGECAST_PAGER_STRICT");
    return strict && *strict == '1';
}

static uint64_t parse_size(const char *s, int *pages, int *ok) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    *ok = errno == 0 && end != s && *s != '-';
    *pages = 0;
    int shift = 0;
    switch (*end) {
        case 'k':
        case 'K':
            shift = 10;
            end++;
            break;
        case 'm':
        case 'M':
            shift = 20;
            end++;
            break;
        case 'g':
        case 'G':
            shift = 30;
            end++;
            break;
        case 'p':
        case 'P':
            *pages = 1;
            end++;
            break;
        default:
            break;
    }
    if (shift && v > (ULLONG_MAX >> shift)) *ok = 0; /* 2^64 bytes or more */
    v <<= shift;
    if (*end == 'i' || *end == 'B') end++;
    if (*end == 'B') end++;
    if (*end) *ok = 0;
    return v;
}

/* The policy id named by PAGECAST_PAGER_POLICY; *next_alias set for the deprecated "next". */
static const char *policy_env(int *policy, int *next_alias) {
    const char *p = getenv("PAGECAST_PAGER_POLICY");
    *policy = PC_POLICY_NONE;
    *next_alias = 0;
    if (!p || !*p) return NULL;
    if (!strcmp(p, "next")) {
        *policy = PC_POLICY_NEXTLINE;
        *next_alias = 1;
        return NULL;
    }
    for (int i = 0; i < PC_POLICY_COUNT; i++)
        if (pc_policy_names[i] && !strcmp(p, pc_policy_names[i])) {
            *policy = i;
            return NULL;
        }
    return p;
}

static void atfork_prepare(void) {
    pthread_mutex_lock(&g_mu);
}
static void atfork_parent(void) {
    pthread_mutex_unlock(&g_mu);
}

/* The child has none of the regions: their memory is MADV_DONTFORK, their threads and maybe
 * the owner of a lock stayed in the parent. Forget them (never write back the parent's
 * pages, never write its stats), so the child's exit, munmap and signals do nothing. */
static void atfork_child(void) {
    for (int i = 0; i < MAXREG; i++) {
        if (g_live[i].r && g_live[i].log_fd >= 0) close(g_live[i].log_fd);
        g_live[i].r = NULL;
    }
    pthread_mutex_init(&g_mu, NULL);
}

__attribute__((constructor)) static void shim_init(void) {
    resolve();
    const char *env = getenv("PAGECAST_PAGER");
    if (!env || !*env) return;
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    char tok[PATH_MAX + 64];
    for (const char *cur = env; g_nspec < MAXSPEC && next_item(&cur, tok, sizeof tok);) {
        char *colon = strrchr(tok, ':');
        int pages = 0, ok = 0;
        uint64_t v = colon ? parse_size(colon + 1, &pages, &ok) : 0;
        if (!colon || !ok || v == 0) {
            fprintf(stderr,
                    "pagecast pager: PAGECAST_PAGER entry '%s' is not FILE:BUDGET (e.g. weights.bin:1M, below 2^64 "
                    "bytes)%s\n",
                    tok, strict_mode() ? "; strict mode: not running the program unpaged" : "");
            if (strict_mode()) real__exit(2);
            continue;
        }
        *colon = 0;
        spec_t *s = &g_spec[g_nspec++];
        snprintf(s->path, sizeof s->path, "%.4095s", tok);
        s->budget_pages = pages ? v : 0;
        s->budget_bytes = pages ? 0 : v;
    }
    int pol, next_alias;
    const char *bad = policy_env(&pol, &next_alias);
    if (bad)
        fprintf(stderr, "pagecast pager: unknown PAGECAST_PAGER_POLICY '%s' (none, nextline, stride, sparse, table)\n",
                bad);
}

static spec_t *match(int fd) {
    struct stat a, b;
    if (fstat(fd, &a) < 0 || !S_ISREG(a.st_mode)) return NULL;
    for (int i = 0; i < g_nspec; i++)
        if (stat(g_spec[i].path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) return &g_spec[i];
    return NULL;
}

/* Policy table: the first table of PAGECAST_PAGER_TABLE built for this file (every field
 * checked in pgr_table_load). A malformed one is refused with one line; the region then
 * serves faults without prefetch. */
static void load_table(pgr_region *r) {
    const char *cur = getenv("PAGECAST_PAGER_TABLE");
    char t[PATH_MAX];
    while (next_item(&cur, t, sizeof t)) {
        if (!*t) continue;
        int rc = pgr_table_load(r, t);
        if (rc < 0) fprintf(stderr, "pagecast pager: %s; no prefetch table for this mapping\n", pgr_last_error());
        if (rc == 0) break;
    }
}

/* Memory plan: the first map of PAGECAST_PAGER_PLAN built for this file (every field
 * checked in pgr_plan_load). A malformed one is refused with one line; the region then
 * serves faults with CLOCK alone. */
static void load_plan(pgr_region *r) {
    const char *cur = getenv("PAGECAST_PAGER_PLAN");
    char t[PATH_MAX];
    while (cur && next_item(&cur, t, sizeof t)) {
        if (!*t) continue;
        int rc = pgr_plan_load(r, t);
        if (rc < 0) fprintf(stderr, "pagecast pager: %s; this mapping is served without its plan\n", pgr_last_error());
        if (rc <= 0) break;
    }
}

static void start_pack(pgr_region *r) {
    const char *env = getenv("PAGECAST_PAGER_PACK");
    if (!env || !*env) return;
    const char *d = getenv("PAGECAST_PAGER_PACK_DEFER"), *sa = getenv("PAGECAST_PAGER_PACK_STOP_AFTER"),
               *th = getenv("PAGECAST_PAGER_PACK_THREADS");
    uint64_t defer = d ? strtoull(d, NULL, 10) : 0, stop_after = sa ? strtoull(sa, NULL, 10) : 0;
    char t[PATH_MAX];
    for (const char *cur = env; next_item(&cur, t, sizeof t);) {
        if (!*t) continue;
        int rc = pgr_pack_start(r, t, defer, stop_after, th ? atoi(th) : 0);
        if (rc < 0) fprintf(stderr, "pagecast pager: %s\n", pgr_last_error());
        if (rc <= 0) break; /* one pack per region: the first one built for this file */
    }
}

static void learn_path_for(const char *path, char *out, size_t n) {
    const char *dir = getenv("PAGECAST_PAGER_LEARN");
    out[0] = 0;
    if (!dir || !*dir) return;
    char real[PATH_MAX];
    if (!realpath(path, real)) snprintf(real, sizeof real, "%s", path);
    char name[PATH_MAX];
    size_t j = 0;
    for (size_t i = 0; real[i] && j + 1 < sizeof name; i++) name[j++] = real[i] == '/' ? '%' : real[i];
    name[j] = 0;
    snprintf(out, n, "%s/%.200s.bits", dir, name);
}

static void install_fatal_handlers(void);

static void *shim_map(spec_t *s, void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    char path[PATH_MAX];
    char fdlink[64];
    snprintf(fdlink, sizeof fdlink, "/proc/self/fd/%d", fd);
    ssize_t pl = readlink(fdlink, path, sizeof path - 1);
    if (pl < 0)
        snprintf(path, sizeof path, "%s", s->path);
    else
        path[pl] = 0;

    pgr_config cfg = {0};
    long ps = sysconf(_SC_PAGESIZE);
    cfg.budget_pages =
        s->budget_pages ? s->budget_pages : s->budget_bytes / (uint64_t)ps + (s->budget_bytes % (uint64_t)ps != 0);
    int next_alias;
    policy_env(&cfg.policy, &next_alias);
    const char *d = getenv("PAGECAST_PAGER_DEPTH");
    cfg.depth = d ? atoi(d) : 16;
    const char *bf = getenv("PAGECAST_PAGER_BEFORE");
    cfg.before = next_alias ? 0 : bf ? atoi(bf) : -1;
    const char *mc = getenv("PAGECAST_PAGER_MIN_CONF");
    cfg.min_conf = mc ? atoi(mc) : 1;
    int acc = fcntl(fd, F_GETFL) & O_ACCMODE;
    cfg.writeback = (flags & MAP_SHARED) && acc == O_RDWR;
    cfg.on_eof_sigbus = 1;
    const char *fl = getenv("PAGECAST_PAGER_FLUSH_MS");
    cfg.flush_ms = fl ? atoi(fl) : 1000;
    char learn[PATH_MAX + 256];
    learn_path_for(path, learn, sizeof learn);
    cfg.learn_path = learn[0] ? learn : NULL;
    int n = __atomic_fetch_add(&g_nopened, 1, __ATOMIC_SEQ_CST);
    int log_fd = -1;
    const char *logdir = getenv("PAGECAST_PAGER_LOG");
    if (logdir && *logdir) {
        char lp[PATH_MAX + 64];
        snprintf(lp, sizeof lp, "%s/pager.%d.%d.pglog", logdir, (int)getpid(), n);
        /* an existing name or a planted link is refused; a high number, as the region's own (highfd.h) */
        log_fd = pc_fd_high_or_keep(pc_out_new(lp, O_WRONLY | O_APPEND));
        if (log_fd < 0) fprintf(stderr, "pagecast pager: cannot write fault log %s: %s\n", lp, strerror(errno));
    }
    cfg.log_fd = log_fd;
    pgr_region *r = pgr_open_fd(fd, path, (uint64_t)off, len, &cfg, addr, (flags & MAP_FIXED) != 0, prot);
    if (!r) {
        int e = errno;
        if (log_fd >= 0) close(log_fd);
        if (strict_mode()) {
            fprintf(stderr, "pagecast pager: %s\n", pgr_last_error());
            errno = e;
            return MAP_FAILED;
        }
        fprintf(stderr, "pagecast pager: %s; using an ordinary mapping instead\n", pgr_last_error());
        return real_mmap(addr, len, prot, flags, fd, off);
    }
    if (cfg.policy == PC_POLICY_TABLE) load_table(r);
    load_plan(r);
    start_pack(r);
    pthread_mutex_lock(&g_mu);
    int slot = -1;
    for (int i = 0; i < MAXREG; i++)
        if (!g_live[i].r) {
            slot = i;
            break;
        }
    if (slot < 0) {
        pthread_mutex_unlock(&g_mu);
        pgr_close(r, NULL);
        if (log_fd >= 0) close(log_fd);
        fprintf(stderr, "pagecast pager: more than %d paged regions; using an ordinary mapping\n", MAXREG);
        return real_mmap(addr, len, prot, flags, fd, off);
    }
    static int installed;
    if (!installed) {
        installed = 1;
        install_fatal_handlers();
    }
    live_t *l = &g_live[slot];
    l->r = r;
    l->base = pgr_base(r);
    l->len = pgr_length(r);
    l->log_fd = log_fd;
    l->writeback = cfg.writeback;
    l->n = n;
    struct stat sb;
    fstat(fd, &sb);
    l->dev = sb.st_dev;
    l->ino = sb.st_ino;
    l->foff = (uint64_t)off;
    l->writable = (prot & PROT_WRITE) != 0;
    l->partial_warned = 0;
    snprintf(l->path, sizeof l->path, "%s", path);
    pthread_mutex_unlock(&g_mu);
    return l->base;
}

static void write_stats(live_t *l, const pgr_stats *s, uint64_t p50, uint64_t p99, int rc) {
    const char *dir = getenv("PAGECAST_PAGER_STATS");
    if (!dir || !*dir) return;
    char p[PATH_MAX + 64], tmp[PATH_MAX + 100];
    snprintf(p, sizeof p, "%s/pager.%d.%d.json", dir, (int)getpid(), l->n);
    FILE *f = pc_out_ftemp(p, tmp, sizeof tmp);
    if (!f) return;
    char esc[2 * PATH_MAX];
    size_t k = 0;
    for (const char *c = l->path; *c && k + 7 < sizeof esc; c++) {
        if (*c == '"' || *c == '\\') esc[k++] = '\\';
        if ((unsigned char)*c < 0x20) {
            k += (size_t)snprintf(esc + k, sizeof esc - k, "\\u%04x", (unsigned char)*c);
            continue;
        }
        esc[k++] = *c;
    }
    esc[k] = 0;
    fprintf(f,
            "{\"path\": \"%s\", \"faults\": %llu, \"wp_faults\": %llu, \"late_faults\": %llu, "
            "\"prefetched\": %llu, \"prefetch_hits\": %llu, \"prefetch_evicted_untouched\": %llu, "
            "\"evictions\": %llu, \"writebacks\": %llu, \"writeback_skipped_eof\": %llu, "
            "\"eof_faults\": %llu, \"max_resident\": %llu, \"copy_ioctls\": %llu, \"bytes_read\": %llu, "
            "\"service_ns_total\": %llu, \"service_ns_p50\": %llu, \"service_ns_p99\": %llu, "
            "\"errors\": %d, \"wp_enabled\": %d, \"pack_pages\": %llu, \"pack_installed\": %llu, "
            "\"pack_skipped\": %llu, \"pack_bytes_read\": %llu, \"pack_deferred\": %llu, \"pack_done_ns\": %llu, "
            "\"pack_state\": %d, \"plan_keep_resident\": %llu, \"plan_keep_demoted\": %llu, "
            "\"plan_after_use\": %llu, \"plan_regrets\": %llu, \"plan_stream_off\": %llu, \"unmap_calls\": %llu, "
            "\"plan_scan_ahead\": %llu, \"close_ok\": %s}\n",
            esc, (unsigned long long)s->faults, (unsigned long long)s->wp_faults, (unsigned long long)s->late_faults,
            (unsigned long long)s->prefetched, (unsigned long long)s->prefetch_hits,
            (unsigned long long)s->prefetch_evicted_untouched, (unsigned long long)s->evictions,
            (unsigned long long)s->writebacks, (unsigned long long)s->writeback_skipped_eof,
            (unsigned long long)s->eof_faults, (unsigned long long)s->max_resident, (unsigned long long)s->copy_ioctls,
            (unsigned long long)s->bytes_read, (unsigned long long)s->service_ns_total, (unsigned long long)p50,
            (unsigned long long)p99, s->errors, s->wp_enabled, (unsigned long long)s->pack_pages,
            (unsigned long long)s->pack_installed, (unsigned long long)s->pack_skipped,
            (unsigned long long)s->pack_bytes_read, (unsigned long long)s->pack_deferred,
            (unsigned long long)s->pack_done_ns, s->pack_state, (unsigned long long)s->plan_keep_resident,
            (unsigned long long)s->plan_keep_demoted, (unsigned long long)s->plan_after_use,
            (unsigned long long)s->plan_regrets, (unsigned long long)s->plan_stream_off,
            (unsigned long long)s->unmap_calls, (unsigned long long)s->plan_scan_ahead, rc == 0 ? "true" : "false");
    pc_out_fcommit(f, tmp, p);
}

/* Caller holds g_mu. */
static int close_live(live_t *l) {
    uint64_t p50, p99;
    pgr_percentiles(l->r, &p50, &p99);
    pgr_stats s;
    int rc = pgr_close(l->r, &s);
    write_stats(l, &s, p50, p99, rc);
    if (l->log_fd >= 0) close(l->log_fd);
    l->r = NULL;
    return rc;
}

static void close_all(void) {
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < MAXREG; i++)
        if (g_live[i].r) close_live(&g_live[i]);
    pthread_mutex_unlock(&g_mu);
}

__attribute__((destructor)) static void shim_fini(void) {
    close_all();
}

/* A signal whose default action ends the process skips exit handlers; with the kernel's
 * MAP_SHARED the written data would survive in the page cache, so write back first, then
 * die of the same signal. Every such signal (man 7 signal: action Term or Core, and the
 * real-time ones) except SIGKILL, which cannot be caught. Installed only where the program
 * keeps the default action; a handler the program installs later replaces it. */
static const int g_fatal[] = {SIGHUP,  SIGINT,    SIGQUIT, SIGILL,  SIGTRAP, SIGABRT, SIGBUS,    SIGFPE,
                              SIGUSR1, SIGSEGV,   SIGUSR2, SIGPIPE, SIGALRM, SIGTERM, SIGSTKFLT, SIGXCPU,
                              SIGXFSZ, SIGVTALRM, SIGPROF, SIGIO,   SIGPWR,  SIGSYS};

static void on_fatal(int sig) {
    for (int i = 0; i < MAXREG; i++)
        if (g_live[i].r) pgr_emergency_writeback(g_live[i].r);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_one(int sig) {
    struct sigaction old;
    if (sigaction(sig, NULL, &old) == 0 && old.sa_handler == SIG_DFL && !(old.sa_flags & SA_SIGINFO)) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND | SA_NODEFER;
        sigaction(sig, &sa, NULL);
    }
}

static void install_fatal_handlers(void) {
    for (size_t i = 0; i < sizeof g_fatal / sizeof g_fatal[0]; i++) install_one(g_fatal[i]);
    for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++) install_one(sig);
}

/* Another paged region (not `self`) mapping bytes [off, off + len) of the file, where
 * either it or the new mapping is writable: the two would be separate copies, neither
 * seeing the other's writes. The caller holds g_mu. */
static live_t *conflicting(dev_t dev, ino_t ino, uint64_t off, size_t len, int writable, const live_t *self) {
    for (int i = 0; i < MAXREG; i++) {
        live_t *l = &g_live[i];
        if (l != self && l->r && l->dev == dev && l->ino == ino && (l->writable || writable) &&
            off < l->foff + l->len && l->foff < off + len)
            return l;
    }
    return NULL;
}

static live_t *overlapping(const uint8_t *a, size_t len, int read_only_only);

/* Refuses a call over the paged region l, if there is one: one line naming its file and
 * why, errno err. Returns whether it refused. */
static int refuse(const live_t *l, int err, const char *why) {
    if (!l) return 0;
    fprintf(stderr, "pagecast pager: %s: %s\n", l->path, why);
    errno = err;
    return 1;
}

/* A kernel mapping of bytes a paged region maps, where either one can write the file: it
 * would not see the region's writes (or the region its). A file matches by device and inode,
 * so this holds also when its name is gone (unlinked, renamed) and the PAGECAST_PAGER path
 * no longer names it. The kernel's own refusal comes first, as for paged mappings. Sets
 * errno (EBUSY, with one line) and returns 1 when refused. */
static int busy(int fd, off_t off, size_t len, int prot, int flags) {
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) return 0;
    int writes = (flags & MAP_SHARED) && (prot & PROT_WRITE); /* a private mapping never writes the file */
    pthread_mutex_lock(&g_mu);
    live_t *l = conflicting(sb.st_dev, sb.st_ino, (uint64_t)off, len, writes, NULL);
    char path[PATH_MAX];
    if (l) snprintf(path, sizeof path, "%s", l->path);
    int lw = l && l->writable;
    pthread_mutex_unlock(&g_mu);
    if (!l) return 0;
    void *probe =
        real_mmap(NULL, len, prot, flags & ~(MAP_FIXED | MAP_FIXED_NOREPLACE | MAP_POPULATE | MAP_LOCKED), fd, off);
    if (probe == MAP_FAILED) return 1; /* the kernel's errno */
    real_munmap(probe, len);
    fprintf(stderr,
            "pagecast pager: %s: bytes %llu-%llu are already mapped by the pager%s; a second mapping would not see the "
            "first one's writes: mmap refused (EBUSY)\n",
            path, (unsigned long long)off, (unsigned long long)off + len - 1, lw ? " writable" : "");
    errno = EBUSY;
    return 1;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    resolve();
    if (g_nspec && (flags & MAP_FIXED) && len) {
        /* MAP_FIXED would replace the region's memory under the pager */
        pthread_mutex_lock(&g_mu);
        int refused = refuse(overlapping(addr, len, 0), EINVAL,
                             "mmap(MAP_FIXED) over a paged region refused (EINVAL); munmap it first");
        pthread_mutex_unlock(&g_mu);
        if (refused) return MAP_FAILED;
    }
    if (g_nspec && fd >= 0 && !(flags & MAP_ANONYMOUS) && len) {
        spec_t *s = match(fd);
        int to_kernel = !s || ((flags & MAP_PRIVATE) && (prot & PROT_WRITE)); /* see below */
        if (to_kernel && busy(fd, off, len, prot, flags)) return MAP_FAILED;
        /* A writable private mapping's changes must live as long as the mapping, but an
         * evicted page is re-read from the file: such mappings stay with the kernel. */
        if (s && (flags & MAP_PRIVATE) && (prot & PROT_WRITE)) {
            fprintf(stderr,
                    "pagecast pager: %s: writable MAP_PRIVATE mapping left to the kernel (evicting it would lose "
                    "private changes)\n",
                    s->path);
            s = NULL;
        }
        if (s) {
            /* The kernel's own checks first (access mode against prot, append-only,
             * noexec, seals, flags): a mapping it refuses is refused the same way. */
            void *probe = real_mmap(NULL, len, prot,
                                    flags & ~(MAP_FIXED | MAP_FIXED_NOREPLACE | MAP_POPULATE | MAP_LOCKED), fd, off);
            if (probe == MAP_FAILED) return MAP_FAILED;
            real_munmap(probe, len);
            struct stat sb;
            if (fstat(fd, &sb) < 0) return MAP_FAILED;
            pthread_mutex_lock(&g_mu);
            live_t *l = conflicting(sb.st_dev, sb.st_ino, (uint64_t)off, len, (prot & PROT_WRITE) != 0, NULL);
            if (l)
                fprintf(stderr,
                        "pagecast pager: %s: bytes %llu-%llu are already mapped by the pager%s; a second mapping would "
                        "not see the first one's writes: mmap refused (EBUSY)\n",
                        l->path, (unsigned long long)off, (unsigned long long)off + len - 1,
                        l->writable ? " writable" : "");
            pthread_mutex_unlock(&g_mu);
            if (l) {
                errno = EBUSY;
                return MAP_FAILED;
            }
            return shim_map(s, addr, len, prot, flags, fd, off);
        }
    }
    return real_mmap(addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) __attribute__((alias("mmap")));

/* Moving or resizing a paged region would leave the pager serving the old range (and the
 * moved pages unregistered): refused before anything changes. */
void *mremap(void *old, size_t old_size, size_t new_size, int flags, ...) {
    resolve();
    void *new_addr = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        new_addr = va_arg(ap, void *);
        va_end(ap);
    }
    if (g_nspec) {
        pthread_mutex_lock(&g_mu);
        live_t *l = overlapping(old, old_size ? old_size : 1, 0);
        if (!l && (flags & MREMAP_FIXED)) l = overlapping(new_addr, new_size, 0);
        int refused = refuse(l, EINVAL,
                             "mremap of a paged region refused (EINVAL): the pager cannot move or resize it; munmap "
                             "and mmap it again");
        pthread_mutex_unlock(&g_mu);
        if (refused) return MAP_FAILED;
    }
    return real_mremap(old, old_size, new_size, flags, new_addr);
}

/* The first paged region overlapping [a, a + len) (only those without write-back if
 * read_only_only); the caller holds g_mu. */
static live_t *overlapping(const uint8_t *a, size_t len, int read_only_only) {
    for (int i = 0; i < MAXREG; i++) {
        live_t *l = &g_live[i];
        if (!l->r || (read_only_only && l->writeback) || a + len <= l->base || a >= l->base + l->len) continue;
        return l;
    }
    return NULL;
}

/* What munmap or msync of a paged region returns: 0, or -1 with EIO when the pager's
 * write-back failed (rc < 0), as the kernel reports a failed write-back. */
static int served_result(long rc) {
    if (rc < 0) {
        errno = EIO;
        return -1;
    }
    return 0;
}

/* The paged region overlapping [addr, addr + len), returned with g_mu held; NULL, and
 * g_mu not held, when there is none. */
static live_t *lock_overlapping(void *addr, size_t len) {
    if (!g_nspec) return NULL;
    pthread_mutex_lock(&g_mu);
    live_t *l = overlapping(addr, len, 0);
    if (!l) pthread_mutex_unlock(&g_mu);
    return l;
}

int munmap(void *addr, size_t len) {
    resolve();
    live_t *l = lock_overlapping(addr, len);
    if (!l) return real_munmap(addr, len);
    /* munmap's length is rounded up to whole pages, as the kernel does: the mmap
     * length given back is a full unmap even when it is not a page multiple */
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    if ((uint8_t *)addr != l->base || (len + ps - 1) / ps * ps < l->len) {
        /* Part of the region: it stays mapped and served whole until the program
         * unmaps all of it or exits. Unmapping the part would leave the pager's page
         * table and budget describing pages that are gone, and tearing down the
         * whole region kills a program that goes on using the rest (llama.cpp drops
         * the fragments of its weights file no tensor uses, then computes). */
        if (!l->partial_warned)
            fprintf(stderr,
                    "pagecast pager: %s: partial munmap of a paged region: the range stays mapped until the "
                    "region is unmapped whole\n",
                    l->path);
        l->partial_warned = 1;
        pthread_mutex_unlock(&g_mu);
        return 0;
    }
    int rc = close_live(l);
    pthread_mutex_unlock(&g_mu);
    return served_result(rc);
}

int msync(void *addr, size_t len, int flags) {
    resolve();
    live_t *l = lock_overlapping(addr, len);
    if (!l) return real_msync(addr, len, flags);
    long n = pgr_flush(l->r);
    pthread_mutex_unlock(&g_mu);
    return served_result(n);
}

/* Making a paged region without write-back writable would let changes be lost at
 * eviction: refuse, as the kernel refuses PROT_WRITE on a read-only shared mapping. */
int mprotect(void *addr, size_t len, int prot) {
    resolve();
    if (g_nspec && (prot & PROT_WRITE)) {
        uint8_t *a = addr;
        pthread_mutex_lock(&g_mu);
        int refused = refuse(overlapping(a, len, 1), EACCES, "PROT_WRITE on a paged region without write-back refused");
        /* a region becoming writable while another one maps the same bytes: as at mmap */
        live_t *l = refused ? NULL : overlapping(a, len, 0);
        if (l && conflicting(l->dev, l->ino, l->foff, l->len, 1, l))
            refused = refuse(l, EACCES,
                             "PROT_WRITE refused: another paged mapping of the same bytes would not see the writes");
        if (refused) {
            pthread_mutex_unlock(&g_mu);
            return -1;
        }
        int rc = real_mprotect(addr, len, prot);
        if (rc == 0 && l) l->writable = 1;
        pthread_mutex_unlock(&g_mu);
        return rc;
    }
    return real_mprotect(addr, len, prot);
}

/* A truncate of a paged file: the kernel drops the page cache past the new end at once, so
 * that a later touch of a page there is SIGBUS; the pager drops its resident pages there
 * too, right after the call (other ways to change the size are seen at the next periodic
 * write-back, pgr_check_size). */
static void resized(const struct stat *sb) {
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < MAXREG; i++)
        if (g_live[i].r && g_live[i].dev == sb->st_dev && g_live[i].ino == sb->st_ino) pgr_check_size(g_live[i].r);
    pthread_mutex_unlock(&g_mu);
}

/* What a truncate returned (rc), after the pager followed a successful one: the file is
 * path's, or fd's when path is NULL. errno stays as the call left it. */
static int truncated(int rc, int fd, const char *path) {
    struct stat sb;
    int e = errno;
    if (rc == 0 && g_nspec && (path ? stat(path, &sb) : fstat(fd, &sb)) == 0) resized(&sb);
    errno = e;
    return rc;
}

int ftruncate(int fd, off_t len) {
    resolve();
    return truncated(real_ftruncate(fd, len), fd, NULL);
}

int ftruncate64(int fd, off_t len) __attribute__((alias("ftruncate")));

int truncate(const char *path, off_t len) {
    resolve();
    return truncated(real_truncate(path, len), -1, path);
}

int truncate64(const char *path, off_t len) __attribute__((alias("truncate")));

/* _exit skips destructors: write back first, as the kernel keeps a MAP_SHARED page. */
void _exit(int status) {
    resolve();
    close_all();
    real__exit(status);
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

void _Exit(int status) {
    _exit(status);
}
