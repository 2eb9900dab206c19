/*
 * Native fast path of the live loop (linked into faultmon, enabled by --fast FILE).
 *
 * Why: the Python path (collector → daemon → predictor process → injector threads) costs
 * one poll period plus two pipe hops and two GIL hand-overs between a fault and its
 * prefetch: milliseconds on a loaded 2-core machine. Here the collector itself maps the
 * faulting address to (file, page), steps the predictor and calls posix_fadvise(WILLNEED)
 * before it reads the next sample; faultmon wakes on every major-fault sample.
 *
 * Predictors (same rules as the Python ones, on file-backed pages only: the only pages
 * another process can prefetch):
 *   replay   — pagecast.live.sources.ReplaySource: a fault on a page of the schedule at
 *              most `lookahead` rows past the cursor moves the cursor there, any other fault
 *              advances it by one; rows up to cursor + lookahead are issued; the first
 *              `lookahead` rows are issued when the program starts. Faults outside file
 *              mappings count as unknown pages (the Python source can also match anonymous
 *              regions by creation order; this path cannot without their region table).
 *   nextline — pagecast.policies.nextline on major faults: `before` pages below and
 *              window - before - 1 above, clipped to the file (issued in ascending order
 *              so they merge into two reads instead of one per page).
 *   stride   — pagecast.policies.stride, one table entry per file, every fault.
 * The policies' steps are the shared C ones (native/policy/pc_policy.h), also run by the
 * pager and checked against the Python and simulator versions (tests/test_policy_parity.py).
 * Consecutive pages up to `gap` apart are merged into one read, as the injector does.
 *
 * Config file (little endian, written by pagecast.live.fastpath):
 *   "PCFAST1\0", u32 mode (FP_MODE_REPLAY, or the PC_POLICY_* id of nextline or stride:
 *   native/policy/pc_policy_ids.h, from the policy registry), u32 nfiles,
 *   i64 lookahead, gap, p0, p1 (nextline: before, window; stride: degree, min_conf),
 *   u64 nrows, nfiles x {u32 len, i32 tag, path bytes}, i32 row_file[nrows], i64 row_page[nrows]
 *   (row_file -1: a row of a non-file region, counted for pacing but never issued).
 *
 * Output frames: FR_FILE {i32 index, i32 tag, path} once per file known;
 * FR_ISSUED arrays of struct fp_issued; FR_FASTSTAT once at the end: u64 faults, unmapped
 * (no file mapping), ranges, range_pages, errors, pages, replay cursor, poll wake-ups,
 * total ns inside posix_fadvise, per-fault handler time p50/p99/max (ns).
 * All times are CLOCK_MONOTONIC ns (perf's clock: faultmon sets use_clockid).
 */
#define _GNU_SOURCE
#include "live/fastpath.h"
#include "infile.h"
#include "policy/pc_policy.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGE_SHIFT   12
#define MAX_PREFETCH PC_MAX_PREFETCH

/* Schedule replay is not a policy of the registry: a mode above every policy id. */
#define FP_MODE_REPLAY 256

struct file {
    char *path;
    int fd;
    int32_t tag;   /* the schedule's region id, -1 for files found at run time */
    int64_t pages; /* 0: unknown */
    pc_stride_state stride;
};

struct map {
    uint64_t start, end;
    int32_t file; /* -1: not a file mapping */
    int64_t first_page;
};

struct proc {
    uint32_t pid;
    struct map *maps;
    int n, cap;
};

struct page_ref {
    int32_t file;
    int64_t page;
};

static int mode;
static int64_t lookahead, gap, p0, p1;
static struct file *files;
static int nfiles, cap_files;
static struct proc *procs;
static int nprocs, cap_procs;

/* replay */
static int64_t nrows;
static int32_t *row_file;
static int64_t *row_page;
static uint64_t *hkeys; /* open addressing: (file + 1) << 40 | page; 0 = empty */
static int64_t *hrows;
static uint64_t hmask;
static int64_t cursor = -1, issued_upto;

/* issued records and counters, shared with the start-up thread */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct fp_issued *out;
static size_t nout, cap_out;
static uint64_t st_faults, st_unmapped, st_ranges, st_range_pages, st_errors, st_pages, st_fadvise_ns;
static uint32_t *handler_ns; /* per fault: time spent in fp_on_fault (lookup + reads issued) */
static size_t nhandler, cap_handler;
static pthread_t start_thread;
static int start_running;

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) fm_fail("fast path: out of memory");
    return q;
}

int fp_enabled(void) {
    return mode != 0;
}

static int is_file_mapping(const char *name, uint64_t ino) {
    /* as pagecast.collect.faultmon: files by path; SysV/memfd are shared anonymous memory */
    if (name[0] != '/' || ino == 0) return 0;
    if (!strncmp(name, "/dev/zero", 9) || !strncmp(name, "/SYSV", 5) || !strncmp(name, "/memfd:", 7)) return 0;
    return 1;
}

static int add_file(const char *path, size_t n, int32_t tag, int open_it) {
    struct file nf = {.tag = tag, .fd = -1};
    pc_stride_init(&nf.stride);
    nf.path = xrealloc(NULL, n + 1);
    memcpy(nf.path, path, n);
    nf.path[n] = 0;
    if (open_it) {
        struct stat st;
        nf.fd = pc_open_regular(nf.path, O_RDONLY, &st); /* never blocks on a FIFO in a file's place */
        if (nf.fd >= 0) nf.pages = (st.st_size + 4095) >> PAGE_SHIFT;
    }
    /* under the lock: the start-up thread reads files[] (file_fd) while we may move it */
    pthread_mutex_lock(&mu);
    if (nfiles == cap_files) {
        cap_files = cap_files ? 2 * cap_files : 16;
        files = xrealloc(files, (size_t)cap_files * sizeof *files);
    }
    files[nfiles] = nf;
    int idx = nfiles++;
    pthread_mutex_unlock(&mu);
    struct fp_file_frame ff = {idx, tag};
    fm_frame(FR_FILE, &ff, sizeof ff, nf.path, (uint32_t)n);
    return idx;
}

static int file_fd(int32_t file) {
    pthread_mutex_lock(&mu);
    int fd = files[file].fd;
    pthread_mutex_unlock(&mu);
    return fd;
}

static int find_file(const char *path, size_t n) {
    for (int i = 0; i < nfiles; i++)
        if (!strncmp(files[i].path, path, n) && files[i].path[n] == 0) return i;
    return -1;
}

static void hash_put(uint64_t key, int64_t row) {
    uint64_t h = (key * 0x9E3779B97F4A7C15ull) & hmask;
    while (hkeys[h] && hkeys[h] != key) h = (h + 1) & hmask;
    if (!hkeys[h]) { /* the first row of a page wins: where the earlier run first needed it */
        hkeys[h] = key;
        hrows[h] = row;
    }
}

static int64_t hash_get(uint64_t key) {
    if (!hkeys) return -1;
    uint64_t h = (key * 0x9E3779B97F4A7C15ull) & hmask;
    while (hkeys[h]) {
        if (hkeys[h] == key) return hrows[h];
        h = (h + 1) & hmask;
    }
    return -1;
}

static uint64_t page_key(int32_t file, int64_t page) {
    return ((uint64_t)(file + 1) << 40) | (uint64_t)page;
}

static void read_exact(FILE *f, void *p, size_t n, const char *path, const char *what) {
    if (n && fread(p, 1, n, f) != n) fm_fail("%s: truncated fast-path config (reading %s)", path, what);
}

void fp_load(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) fm_fail("%s: cannot open fast-path config: %s", path, strerror(errno));
    struct fp_config_head h;
    read_exact(f, h.magic, 8, path, "magic");
    if (memcmp(h.magic, FP_CONFIG_MAGIC, 6) || h.magic[6] < '0' || h.magic[6] > '9' || h.magic[7])
        fm_fail("%s: not a pagecast fast-path config (bad magic)", path);
    if (h.magic[6] != '0' + FP_CONFIG_VERSION)
        fm_fail("%s: unsupported fast-path config version %c (this collector reads %d)", path, h.magic[6],
                FP_CONFIG_VERSION);
    read_exact(f, (char *)&h + 8, sizeof h - 8, path, "header");
    uint32_t hdr[2] = {h.mode, h.nfiles};
    int64_t par[4] = {h.lookahead, h.gap, h.p0, h.p1};
    uint64_t n = h.nrows;
    mode = (int)hdr[0];
    if (mode != FP_MODE_REPLAY && mode != PC_POLICY_NEXTLINE && mode != PC_POLICY_STRIDE)
        fm_fail("%s: unknown fast-path mode %d", path, mode);
    lookahead = par[0];
    gap = par[1];
    p0 = par[2];
    p1 = par[3];
    if (lookahead < 0 || gap < 0 ||
        (mode == PC_POLICY_NEXTLINE && !(p1 >= 1 && p1 <= MAX_PREFETCH + 1 && p0 >= 0 && p0 < p1)) ||
        (mode == PC_POLICY_STRIDE && !(p0 >= 1 && p0 <= MAX_PREFETCH)))
        fm_fail("%s: fast-path parameters out of range", path);
    for (uint32_t i = 0; i < hdr[1]; i++) {
        uint32_t len;
        int32_t tag;
        char buf[4096];
        read_exact(f, &len, 4, path, "file name length");
        read_exact(f, &tag, 4, path, "file tag");
        if (len == 0 || len >= sizeof buf) fm_fail("%s: bad file name length %u", path, len);
        read_exact(f, buf, len, path, "file name");
        add_file(buf, len, tag, 1);
    }
    nrows = (int64_t)n;
    row_file = xrealloc(NULL, n * sizeof *row_file);
    row_page = xrealloc(NULL, n * sizeof *row_page);
    read_exact(f, row_file, n * sizeof *row_file, path, "row files");
    read_exact(f, row_page, n * sizeof *row_page, path, "row pages");
    fclose(f);
    if (mode == FP_MODE_REPLAY) {
        uint64_t size = 16;
        while (size < 2 * n) size <<= 1;
        hmask = size - 1;
        hkeys = calloc(size, sizeof *hkeys);
        hrows = calloc(size, sizeof *hrows);
        if (!hkeys || !hrows) fm_fail("fast path: out of memory");
        for (int64_t r = 0; r < nrows; r++) {
            if (row_file[r] >= nfiles || row_page[r] < 0 || row_page[r] >= (1ll << 40))
                fm_fail("%s: row %lld names file %d / page %lld out of range", path, (long long)r, row_file[r],
                        (long long)row_page[r]);
            if (row_file[r] >= 0) hash_put(page_key(row_file[r], row_page[r]), r);
        }
    }
}

/* -- address space per process ------------------------------------------------------- */

static struct proc *get_proc(uint32_t pid, int create) {
    for (int i = 0; i < nprocs; i++)
        if (procs[i].pid == pid) return &procs[i];
    if (!create) return NULL;
    if (nprocs == cap_procs) {
        cap_procs = cap_procs ? 2 * cap_procs : 8;
        procs = xrealloc(procs, (size_t)cap_procs * sizeof *procs);
    }
    struct proc *p = &procs[nprocs++];
    memset(p, 0, sizeof *p);
    p->pid = pid;
    return p;
}

static void push_map(struct proc *p, struct map m) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->maps = xrealloc(p->maps, (size_t)p->cap * sizeof *p->maps);
    }
    p->maps[p->n++] = m;
}

/* A newer mapping replaces whatever it overlaps (perf reports mmap, not munmap: exact
 * for every fault that can happen, since a fault only hits mapped memory). */
static void add_map(struct proc *p, uint64_t start, uint64_t end, int32_t file, int64_t first_page) {
    int n = p->n;
    for (int i = 0; i < n; i++) {
        struct map m = p->maps[i];
        if (m.end <= start || m.start >= end) continue;
        p->maps[i].end = m.start; /* emptied; the parts outside the new one are re-added */
        if (m.start < start) push_map(p, (struct map){m.start, start, m.file, m.first_page});
        if (m.end > end)
            push_map(p, (struct map){end, m.end, m.file, m.first_page + (int64_t)((end - m.start) >> PAGE_SHIFT)});
    }
    int k = 0; /* drop emptied entries */
    for (int i = 0; i < p->n; i++)
        if (p->maps[i].end > p->maps[i].start) p->maps[k++] = p->maps[i];
    p->n = k;
    push_map(p, (struct map){start, end, file, first_page});
}

void fp_on_mmap(uint32_t pid, uint64_t addr, uint64_t len, uint64_t pgoff, uint64_t ino, const char *name, size_t n) {
    struct proc *p = get_proc(pid, 1);
    int32_t file = -1;
    char path[4096];
    if (n >= sizeof path) n = sizeof path - 1;
    memcpy(path, name, n);
    path[n] = 0;
    if (is_file_mapping(path, ino)) {
        file = find_file(path, n);
        if (file < 0) /* replay prefetches the schedule's files only: no need to open others */
            file = add_file(path, n, -1, mode != FP_MODE_REPLAY);
    }
    add_map(p, addr, addr + len, file, (int64_t)(pgoff >> PAGE_SHIFT));
}

void fp_on_fork(uint32_t pid, uint32_t ppid) {
    if (pid == ppid || get_proc(pid, 0)) return;
    struct proc *parent = get_proc(ppid, 0);
    int pn = parent ? parent->n : 0;
    struct map *copy = pn ? xrealloc(NULL, (size_t)pn * sizeof *copy) : NULL;
    if (pn) memcpy(copy, parent->maps, (size_t)pn * sizeof *copy);
    struct proc *c = get_proc(pid, 1); /* may move procs[]: parent pointer not used after */
    c->maps = copy;
    c->n = c->cap = pn;
}

void fp_on_exec(uint32_t pid) {
    struct proc *p = get_proc(pid, 1);
    p->n = 0;
}

static int translate(uint32_t pid, uint64_t addr, int32_t *file, int64_t *page) {
    static int last = -1; /* an index: procs[] moves when it grows */
    struct proc *p = last >= 0 && last < nprocs && procs[last].pid == pid ? &procs[last] : get_proc(pid, 0);
    if (!p) return 0;
    last = (int)(p - procs);
    for (int i = p->n - 1; i >= 0; i--) {
        struct map *m = &p->maps[i];
        if (addr >= m->start && addr < m->end) {
            if (m->file < 0) return 0;
            *file = m->file;
            *page = m->first_page + (int64_t)((addr - m->start) >> PAGE_SHIFT);
            return 1;
        }
    }
    return 0;
}

/* -- issuing ---------------------------------------------------------------------------- */

static void record(const struct page_ref *refs, size_t n, uint64_t t_issue, uint64_t t_fault, uint64_t t_seen,
                   uint64_t t_submit, uint32_t flags) {
    pthread_mutex_lock(&mu);
    if (nout + n > cap_out) {
        cap_out = (nout + n) * 2 + 1024;
        out = xrealloc(out, cap_out * sizeof *out);
    }
    for (size_t i = 0; i < n; i++)
        out[nout++] = (struct fp_issued){t_issue, t_fault, t_seen, t_submit, refs[i].page, refs[i].file, flags};
    pthread_mutex_unlock(&mu);
}

/* Issue pages in the given order, merging runs of pages at most `gap` apart. */
static void issue(const struct page_ref *refs, size_t n, uint64_t t_fault, uint64_t t_seen, uint32_t flags) {
    uint64_t t_submit = fm_now_ns();
    uint64_t ranges = 0, range_pages = 0, errors = 0, fadvise_ns = 0;
    size_t i = 0;
    while (i < n) {
        size_t j = i + 1;
        while (j < n && refs[j].file == refs[i].file && refs[j].page - refs[j - 1].page >= 1 &&
               refs[j].page - refs[j - 1].page <= gap + 1)
            j++;
        int64_t first = refs[i].page, npages = refs[j - 1].page - first + 1;
        int fd = file_fd(refs[i].file);
        uint64_t t_issue = fm_now_ns();
        if (fd < 0 || posix_fadvise(fd, first << PAGE_SHIFT, npages << PAGE_SHIFT, POSIX_FADV_WILLNEED) != 0) errors++;
        fadvise_ns += fm_now_ns() - t_issue;
        record(refs + i, j - i, t_issue, t_fault, t_seen, t_submit, flags);
        ranges++;
        range_pages += (uint64_t)npages;
        i = j;
    }
    pthread_mutex_lock(&mu);
    st_ranges += ranges;
    st_range_pages += range_pages;
    st_errors += errors;
    st_pages += n;
    st_fadvise_ns += fadvise_ns;
    pthread_mutex_unlock(&mu);
}

/* Rows [lo, hi) of the schedule that name a file, in order. */
static void issue_rows(int64_t lo, int64_t hi, uint64_t t_fault, uint64_t t_seen, uint32_t flags) {
    static struct page_ref stackbuf[512]; /* the fault path's usual case, main thread only */
    size_t cnt = (size_t)(hi - lo);
    struct page_ref *refs = cnt <= 512 && !flags ? stackbuf : calloc(cnt ? cnt : 1, sizeof *refs);
    if (!refs) fm_fail("fast path: out of memory");
    size_t n = 0;
    for (int64_t r = lo; r < hi; r++)
        if (row_file[r] >= 0) refs[n++] = (struct page_ref){row_file[r], row_page[r]};
    issue(refs, n, t_fault, t_seen, flags);
    if (refs != stackbuf) free(refs);
}

static int64_t start_upto; /* end of the start window: fixed before the thread starts */

static void *start_wave(void *arg) {
    (void)arg;
    issue_rows(0, start_upto, 0, 0, 1);
    return NULL;
}

void fp_start(void) {
    if (mode != FP_MODE_REPLAY) return;
    issued_upto = start_upto = lookahead < nrows ? lookahead : nrows; /* faults continue from here */
    /* a thread of its own: the first fault must not wait behind the start-up burst */
    if (issued_upto > 0 && pthread_create(&start_thread, NULL, start_wave, NULL) == 0)
        start_running = 1;
    else if (issued_upto > 0)
        start_wave(NULL);
}

static int cmp_ref(const void *a, const void *b) {
    const struct page_ref *x = a, *y = b;
    return (x->page > y->page) - (x->page < y->page);
}

static void predict(uint64_t t_fault, uint32_t pid, uint64_t addr, int major, uint64_t t_seen);

void fp_on_fault(uint64_t t_fault, uint32_t pid, uint64_t addr, int major, uint64_t t_seen) {
    uint64_t t = fm_now_ns();
    predict(t_fault, pid, addr, major, t_seen);
    if (nhandler == cap_handler) {
        cap_handler = cap_handler ? 2 * cap_handler : 65536;
        handler_ns = xrealloc(handler_ns, cap_handler * sizeof *handler_ns);
    }
    uint64_t d = fm_now_ns() - t;
    handler_ns[nhandler++] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

static void predict(uint64_t t_fault, uint32_t pid, uint64_t addr, int major, uint64_t t_seen) {
    int32_t file = -1;
    int64_t page = 0;
    int known = translate(pid, addr, &file, &page);
    st_faults++;
    if (!known) st_unmapped++;
    if (mode == FP_MODE_REPLAY) {
        int64_t pos = known ? hash_get(page_key(file, page)) : -1;
        if (pos >= 0 && cursor < pos && pos <= cursor + lookahead)
            cursor = pos;
        else
            cursor++; /* unknown page, one already passed, or a jump too far to trust */
        int64_t hi = cursor + 1 + lookahead < nrows ? cursor + 1 + lookahead : nrows;
        if (hi > issued_upto) {
            issue_rows(issued_upto, hi, t_fault, t_seen, 0);
            issued_upto = hi;
        }
        return;
    }
    if (!known) return;
    int64_t pages[MAX_PREFETCH];
    struct page_ref refs[MAX_PREFETCH];
    size_t n;
    struct file *f = &files[file];
    if (mode == PC_POLICY_NEXTLINE) /* a minor fault is a hit: nextline acts on misses only */
        n = pc_nextline_step(page, !major, p0, p1, f->pages, pages, MAX_PREFETCH);
    else
        n = pc_stride_step(&f->stride, page, p0, p1, f->pages, pages, MAX_PREFETCH);
    for (size_t i = 0; i < n; i++) refs[i] = (struct page_ref){file, pages[i]};
    if (mode == PC_POLICY_NEXTLINE) /* ascending: the window merges into two reads instead of one per page */
        qsort(refs, n, sizeof *refs, cmp_ref);
    if (n) issue(refs, n, t_fault, t_seen, 0);
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

void fp_flush(void) {
    pthread_mutex_lock(&mu);
    struct fp_issued *o = out;
    size_t n = nout;
    out = NULL;
    nout = cap_out = 0;
    pthread_mutex_unlock(&mu);
    for (size_t i = 0; i < n; i += 65536) {
        size_t k = n - i < 65536 ? n - i : 65536;
        fm_frame(FR_ISSUED, o + i, (uint32_t)(k * sizeof *o), NULL, 0);
    }
    free(o);
}

void fp_finish(uint64_t wakeups) {
    if (start_running) {
        pthread_join(start_thread, NULL);
        start_running = 0;
    }
    fp_flush();
    qsort(handler_ns, nhandler, sizeof *handler_ns, cmp_u32);
    uint64_t h50 = nhandler ? handler_ns[nhandler / 2] : 0, h99 = nhandler ? handler_ns[nhandler * 99 / 100] : 0;
    uint64_t hmax = nhandler ? handler_ns[nhandler - 1] : 0;
    uint64_t st[FP_NSTATS] = {st_faults,
                              st_unmapped,
                              st_ranges,
                              st_range_pages,
                              st_errors,
                              st_pages,
                              (uint64_t)cursor,
                              wakeups,
                              st_fadvise_ns,
                              h50,
                              h99,
                              hmax};
    fm_frame(FR_FASTSTAT, st, sizeof st, NULL, 0);
    for (int i = 0; i < nfiles; i++)
        if (files[i].fd >= 0) close(files[i].fd);
}
