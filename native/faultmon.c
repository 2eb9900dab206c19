/*
 * faultmon: run a command and stream every page fault it takes.
 *
 * Usage: faultmon [--fd N] [--ring-pages N] [--poll-ms N] [--preload SO] [--file-tp K:ID:OFFS ...] -- CMD ARGS...
 *
 * The child is forked stopped (it blocks on a pipe) so the counters are attached before
 * it runs a single instruction of the command; with enable_on_exec they start counting
 * at exec, so faults of the fork/exec glue are not recorded.
 *
 * Why per-CPU events: the kernel refuses to mmap a ring buffer of an inherited per-task
 * event opened with cpu == -1 (every thread would write one buffer), so we open the
 * major and minor fault events once per CPU with inherit=1 and point the minor event's
 * output at the major event's ring on the same CPU (PERF_EVENT_IOC_SET_OUTPUT).
 *
 * Output on fd N (default 1): frames {u32 type, u32 len, payload}. Samples travel in
 * bulk as arrays of struct fm_sample so the reader decodes them with one numpy call.
 * Records of different rings are not ordered with each other; after each drain a
 * WATERMARK frame promises that no later frame holds an event older than its time.
 *
 * With --fast FILE the live loop's native fast path (live/fastpath.c) runs inside this
 * process: the major-fault event wakes us per sample (minor faults every N samples with
 * --fast-wake-minor N; in any case they are read within --fast-poll-ms),
 * each sample goes straight to the predictor, which issues posix_fadvise(WILLNEED). The
 * reader then still gets every frame, but only every --poll-ms (it only records).
 *
 * Page-set mode (pagecast record's default): --preload SO puts SO (native/pageset/shim.c)
 * first in the command's LD_PRELOAD; --file-tp K:ID:INO:DEV:INDEX:LAST opens a filemap
 * tracepoint (id and raw field offsets from tracefs) on the same rings: K 0 is
 * mm_filemap_get_pages (the pages a read-family system call asks of the page cache), K 1
 * mm_filemap_fault (the file page a fault maps; LAST = INDEX). Each sample becomes a
 * struct fm_read {.., what = K} in a READS frame, by device and inode. If the kernel
 * refuses a tracepoint a NOTE frame says why and recording goes on without it.
 *
 * Exit status: that of the command (128 + signal if it was killed); 126/127 for
 * errors of faultmon itself, after an ERROR frame with a one-line message.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "faultmon.h"
#include "live/fastpath.h"
#include "pageset/uffd_compat.h"
#include "vformat.h"

/* --file-tp: per kind, the tracepoint id (0: not used) and raw offsets of i_ino, s_dev,
 * index, last_index */
#define NTP 2
static const char *tp_name[NTP] = {"filemap:mm_filemap_get_pages", "filemap:mm_filemap_fault"};
static uint64_t tp_id[NTP];
static unsigned tp_off[NTP][4];

struct ring {
    int fd_maj, fd_min, fd_tp[NTP];
    uint64_t id_maj, id_min, id_tp[NTP];
    void *base;
    size_t data_size;
};

static int out_fd = 1;
static struct ring *rings;
static int nrings;
static size_t ring_pages = 4096; /* data pages per CPU: 16 MiB, ~350k samples */
static uint64_t lost_total;
static int fast;            /* --fast given: the native fast path runs in this process */
static int fast_wake_minor; /* --fast-wake-minor N: every N minor-fault samples wake the fast path too */
static uint64_t seen_ns;    /* when the current drain pass started reading the rings */
static uint64_t wakeups;

/* Sample buffer flushed as one SAMPLES frame. */
#define SBUF_CAP 65536
static struct fm_sample sbuf[SBUF_CAP];
static size_t sbuf_n;
#define RBUF_CAP 16384
static struct fm_read rbuf[RBUF_CAP];
static size_t rbuf_n;

uint64_t fm_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void write_all(const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(out_fd, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            _exit(126); /* reader gone: nothing left to report to */
        }
        c += w;
        n -= (size_t)w;
    }
}

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

void fm_frame(uint32_t type, const void *a, uint32_t alen, const void *b, uint32_t blen) {
    uint32_t hdr[2] = {type, alen + blen};
    pthread_mutex_lock(&out_mu);
    write_all(hdr, sizeof hdr);
    if (alen) write_all(a, alen);
    if (blen) write_all(b, blen);
    pthread_mutex_unlock(&out_mu);
}

static void flush_samples(void) {
    if (sbuf_n) {
        fm_frame(FR_SAMPLES, sbuf, (uint32_t)(sbuf_n * sizeof sbuf[0]), NULL, 0);
        sbuf_n = 0;
    }
    if (rbuf_n) {
        fm_frame(FR_READS, rbuf, (uint32_t)(rbuf_n * sizeof rbuf[0]), NULL, 0);
        rbuf_n = 0;
    }
}

void fm_fail(const char *fmt, ...) {
    char msg[1024];
    PC_VFORMAT(msg, fmt);
    flush_samples();
    fm_frame(FR_ERROR, msg, (uint32_t)strlen(msg), NULL, 0);
    if (out_fd != 2) fprintf(stderr, "faultmon: %s\n", msg);
    exit(126);
}

static int perf_open(struct perf_event_attr *a, pid_t pid, int cpu) {
    return (int)syscall(SYS_perf_event_open, a, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
}

static void fill_attr(struct perf_event_attr *a, uint64_t config, int leader, int exclude_kernel) {
    memset(a, 0, sizeof *a);
    a->type = PERF_TYPE_SOFTWARE;
    a->size = sizeof *a;
    a->config = config;
    a->sample_period = 1; /* one sample per fault: perf's default sampling loses most */
    a->sample_type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR;
    a->disabled = 1;
    a->enable_on_exec = 1;
    a->inherit = 1;
    a->exclude_kernel = (unsigned)exclude_kernel;
    a->exclude_hv = 1;
    a->sample_id_all = 1;
    a->use_clockid = 1;
    a->clockid = CLOCK_MONOTONIC;
    if (fast && config == PERF_COUNT_SW_PAGE_FAULTS_MAJ) {
        /* fast path: wake on every major fault: the program is waiting for a read */
        a->watermark = 0;
        a->wakeup_events = 1;
    } else if (fast && fast_wake_minor > 0) {
        /* and every N minor faults (replay is paced by them too); a wake-up per minor fault
         * costs the faulting program more than it gains on a small machine */
        a->watermark = 0;
        a->wakeup_events = (uint32_t)fast_wake_minor;
    } else {
        a->watermark = 1;
        a->wakeup_watermark = (uint32_t)(ring_pages * 4096 / 4);
    }
    if (leader) {
        /* side-band records only once per ring, else each would arrive twice */
        a->mmap = 1;
        a->mmap_data = 1;
        a->mmap2 = 1;
        a->comm = 1;
        a->comm_exec = 1;
        a->task = 1;
    }
}

/* Copy len bytes at ring offset off (may wrap). */
static void ring_copy(struct ring *r, uint64_t off, void *dst, size_t len) {
    char *data = (char *)r->base + 4096;
    size_t pos = (size_t)(off % r->data_size);
    size_t first = r->data_size - pos;
    if (first >= len) {
        memcpy(dst, data + pos, len);
    } else {
        memcpy(dst, data + pos, first);
        memcpy((char *)dst + first, data, len - first);
    }
}

static void handle_record(struct ring *r, const struct perf_event_header *h, const char *rec) {
    const char *p = rec + sizeof *h;
    /* sample_id trailer with our sample_type: {pid, tid}, time, identifier */
    const char *trailer = rec + h->size - 24;
    uint64_t ttime;
    memcpy(&ttime, trailer + 8, 8);
    switch (h->type) {
        case PERF_RECORD_SAMPLE: {
            uint64_t id, ip, time, addr;
            uint32_t pt[2];
            memcpy(&id, p, 8);
            memcpy(&ip, p + 8, 8);
            memcpy(pt, p + 16, 8);
            memcpy(&time, p + 24, 8);
            memcpy(&addr, p + 32, 8);
            int tp = -1;
            for (int k = 0; k < NTP; k++)
                if (r->fd_tp[k] >= 0 && id == r->id_tp[k]) tp = k;
            if (tp >= 0) {
                /* p + 40: u32 raw size, then the tracepoint's record */
                uint32_t rsz;
                memcpy(&rsz, p + 40, 4);
                const char *raw = p + 44;
                const unsigned *off = tp_off[tp];
                unsigned need = 0;
                for (int k = 0; k < 4; k++)
                    if (off[k] + (k == 1 ? 4u : 8u) > need) need = off[k] + (k == 1 ? 4u : 8u);
                if (rsz < need || 44 + rsz + sizeof *h > h->size) break;
                struct fm_read *rd = &rbuf[rbuf_n++];
                memcpy(&rd->ino, raw + off[0], 8);
                memcpy(&rd->dev, raw + off[1], 4);
                memcpy(&rd->first, raw + off[2], 8);
                memcpy(&rd->last, raw + off[3], 8);
                rd->time = time;
                rd->pid = pt[0];
                rd->tid = pt[1];
                rd->what = (uint32_t)tp;
                if (rbuf_n == RBUF_CAP) flush_samples();
                break;
            }
            struct fm_sample *s = &sbuf[sbuf_n++];
            s->time = time;
            s->addr = addr;
            s->ip = ip;
            s->pid = pt[0];
            s->tid = pt[1];
            s->kind = id == r->id_maj ? 2 : 1;
            s->pad = 0;
            if (fast) fp_on_fault(time, pt[0], addr, s->kind == 2, seen_ns);
            if (sbuf_n == SBUF_CAP) flush_samples();
            break;
        }
        case PERF_RECORD_MMAP2: {
            struct fm_mmap m;
            uint32_t pt[2];
            memcpy(pt, p, 8);
            memcpy(&m.addr, p + 8, 8);
            memcpy(&m.len, p + 16, 8);
            memcpy(&m.pgoff, p + 24, 8);
            uint32_t mm[2];
            memcpy(mm, p + 32, 8);
            memcpy(&m.ino, p + 40, 8);
            /* p+48: ino_generation */
            memcpy(&m.prot, p + 56, 4);
            memcpy(&m.flags, p + 60, 4);
            const char *name = p + 64;
            size_t maxn = (size_t)(trailer - name);
            size_t n = strnlen(name, maxn);
            m.time = ttime;
            m.pid = pt[0];
            m.tid = pt[1];
            m.maj = mm[0];
            m.min = mm[1];
            if (h->misc & PERF_RECORD_MISC_MMAP_BUILD_ID) {
                m.maj = m.min = 0;
                m.ino = 0;
            }
            flush_samples(); /* keep samples and maps in ring order */
            fm_frame(FR_MMAP, &m, sizeof m, name, (uint32_t)n);
            break;
        }
        case PERF_RECORD_FORK: {
            uint32_t v[4];
            memcpy(v, p, 16);
            uint64_t t;
            memcpy(&t, p + 16, 8);
            struct fm_fork f = {t, v[0], v[1], v[2], v[3]};
            flush_samples();
            fm_frame(FR_FORK, &f, sizeof f, NULL, 0);
            break;
        }
        case PERF_RECORD_COMM: {
            if (!(h->misc & PERF_RECORD_MISC_COMM_EXEC)) break;
            uint32_t pt[2];
            memcpy(pt, p, 8);
            const char *name = p + 8;
            size_t n = strnlen(name, (size_t)(trailer - name));
            struct fm_exec e = {ttime, pt[0], pt[1]};
            flush_samples();
            fm_frame(FR_EXEC, &e, sizeof e, name, (uint32_t)n);
            break;
        }
        case PERF_RECORD_LOST: {
            uint64_t lost;
            memcpy(&lost, p + 8, 8);
            lost_total += lost;
            struct fm_lost l = {ttime, lost};
            flush_samples();
            fm_frame(FR_LOST, &l, sizeof l, NULL, 0);
            break;
        }
        default:
            break;
    }
}

/* Fast path: hand the side-band records in [tail, head) to it before any sample of any
 * ring is drained, so a fault on another CPU's ring right after an mmap finds its mapping
 * (rings are not ordered with each other). */
static void prescan(struct ring *r, uint64_t head) {
    struct perf_event_mmap_page *meta = r->base;
    static char rec[65536];
    for (uint64_t tail = meta->data_tail; tail < head;) {
        struct perf_event_header h;
        ring_copy(r, tail, &h, sizeof h);
        if (h.size < sizeof h) fm_fail("corrupt perf ring record (size %u)", h.size);
        if (h.type != PERF_RECORD_SAMPLE && h.size >= sizeof h + 24) {
            ring_copy(r, tail, rec, h.size);
            const char *p = rec + sizeof h;
            uint32_t v[4];
            memcpy(v, p, 16);
            if (h.type == PERF_RECORD_MMAP2) {
                uint64_t addr, len, pgoff, ino;
                memcpy(&addr, p + 8, 8);
                memcpy(&len, p + 16, 8);
                memcpy(&pgoff, p + 24, 8);
                memcpy(&ino, p + 40, 8);
                if (h.misc & PERF_RECORD_MISC_MMAP_BUILD_ID) ino = 1; /* no inode given: a path still names a file */
                const char *name = p + 64;
                const char *trailer = rec + h.size - 24;
                fp_on_mmap(v[0], addr, len, pgoff, ino, name, strnlen(name, (size_t)(trailer - name)));
            } else if (h.type == PERF_RECORD_FORK) {
                fp_on_fork(v[0], v[1]);
            } else if (h.type == PERF_RECORD_COMM && (h.misc & PERF_RECORD_MISC_COMM_EXEC)) {
                fp_on_exec(v[0]);
            }
        }
        tail += h.size;
    }
}

static void drain(struct ring *r, uint64_t head) {
    struct perf_event_mmap_page *meta = r->base;
    uint64_t tail = meta->data_tail;
    static char rec[65536];
    while (tail < head) {
        struct perf_event_header h;
        ring_copy(r, tail, &h, sizeof h);
        if (h.size < sizeof h) fm_fail("corrupt perf ring record (size %u)", h.size);
        ring_copy(r, tail, rec, h.size);
        if (h.size >= sizeof h + 24 || h.type == PERF_RECORD_SAMPLE) handle_record(r, &h, rec);
        tail += h.size;
    }
    __atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
}

static void drain_pass(void) {
    uint64_t heads[nrings];
    seen_ns = fm_now_ns();
    for (int i = 0; i < nrings; i++)
        heads[i] = __atomic_load_n(&((struct perf_event_mmap_page *)rings[i].base)->data_head, __ATOMIC_ACQUIRE);
    if (fast)
        for (int i = 0; i < nrings; i++) prescan(&rings[i], heads[i]);
    for (int i = 0; i < nrings; i++) drain(&rings[i], heads[i]);
}

static void drain_all(void) {
    /* Anything written after this moment is newer than it, minus the short gap between
     * a sample's timestamp and its write into the ring: keep a margin. */
    uint64_t mark = fm_now_ns() - 2000000ull;
    drain_pass();
    flush_samples();
    if (fast) fp_flush();
    fm_frame(FR_WATERMARK, &mark, sizeof mark, NULL, 0);
}

static void note(const char *fmt, ...) {
    char msg[512];
    PC_VFORMAT(msg, fmt);
    fm_frame(FR_NOTE, msg, (uint32_t)strlen(msg), NULL, 0);
}

static void drop_tracepoint(int tp) {
    for (int k = 0; k < nrings; k++)
        if (rings[k].fd_tp[tp] >= 0) {
            close(rings[k].fd_tp[tp]);
            rings[k].fd_tp[tp] = -1;
        }
    tp_id[tp] = 0;
}

/* A filemap tracepoint, into the ring of the fault events on the same CPU. Not fatal:
 * without it the recording still has every fault. */
static void open_tracepoint(int tp, struct ring *r, pid_t child, int cpu, int exclude_kernel) {
    if (exclude_kernel) {
        note("%s not used: kernel samples are not permitted (kernel.perf_event_paranoid)", tp_name[tp]);
        drop_tracepoint(tp);
        return;
    }
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_TRACEPOINT;
    a.size = sizeof a;
    a.config = tp_id[tp];
    a.sample_period = 1;
    a.sample_type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR |
                    PERF_SAMPLE_RAW;
    a.disabled = 1;
    a.enable_on_exec = 1;
    a.inherit = 1;
    a.exclude_hv = 1;
    a.sample_id_all = 1;
    a.use_clockid = 1;
    a.clockid = CLOCK_MONOTONIC;
    a.watermark = 1;
    a.wakeup_watermark = (uint32_t)(ring_pages * 4096 / 4);
    r->fd_tp[tp] = perf_open(&a, child, cpu);
    if (r->fd_tp[tp] < 0) {
        note("%s not usable: %s", tp_name[tp], strerror(errno));
        drop_tracepoint(tp);
        return;
    }
    if (ioctl(r->fd_tp[tp], PERF_EVENT_IOC_SET_OUTPUT, r->fd_maj) < 0 ||
        ioctl(r->fd_tp[tp], PERF_EVENT_IOC_ID, &r->id_tp[tp]) < 0) {
        note("%s cannot share the fault ring: %s", tp_name[tp], strerror(errno));
        close(r->fd_tp[tp]);
        r->fd_tp[tp] = -1;
        drop_tracepoint(tp);
    }
}

static void open_rings(pid_t child, int *exclude_kernel) {
    long ncpu = sysconf(_SC_NPROCESSORS_CONF);
    if (ncpu < 1) ncpu = 1;
    rings = calloc((size_t)ncpu, sizeof *rings);
    if (!rings) fm_fail("out of memory");
    *exclude_kernel = 0;
    for (int cpu = 0; cpu < ncpu; cpu++) {
        struct perf_event_attr a;
        int fd;
        for (;;) {
            fill_attr(&a, PERF_COUNT_SW_PAGE_FAULTS_MAJ, 1, *exclude_kernel);
            fd = perf_open(&a, child, cpu);
            if (fd < 0 && (errno == EACCES || errno == EPERM) && !*exclude_kernel) {
                *exclude_kernel = 1; /* paranoid level 2 allows user-mode faults only */
                continue;
            }
            break;
        }
        if (fd < 0) {
            if (errno == ENODEV || errno == EINVAL) continue; /* offline CPU */
            if (errno == EACCES || errno == EPERM) {
                int lvl = -1;
                FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
                if (f) {
                    if (fscanf(f, "%d", &lvl) != 1) lvl = -1;
                    fclose(f);
                }
                fm_fail("perf_event_open not permitted (%s; kernel.perf_event_paranoid=%d): run as root, "
                        "or `sysctl kernel.perf_event_paranoid=1`, or grant CAP_PERFMON",
                        strerror(errno), lvl);
            }
            if (errno == ENOENT || errno == ENOSYS)
                fm_fail("perf_event_open unavailable (%s): kernel built without perf events?", strerror(errno));
            fm_fail("perf_event_open failed on cpu %d: %s", cpu, strerror(errno));
        }
        struct ring *r = &rings[nrings];
        r->fd_maj = fd;
        fill_attr(&a, PERF_COUNT_SW_PAGE_FAULTS_MIN, 0, *exclude_kernel);
        r->fd_min = perf_open(&a, child, cpu);
        if (r->fd_min < 0) fm_fail("perf_event_open (minor faults) failed on cpu %d: %s", cpu, strerror(errno));
        size_t pages = ring_pages;
        for (;;) {
            r->base = mmap(NULL, (pages + 1) * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd_maj, 0);
            if (r->base != MAP_FAILED) break;
            /* unprivileged users are limited by perf_event_mlock_kb: shrink */
            if (errno != EPERM || pages <= 8) fm_fail("cannot map perf ring buffer: %s", strerror(errno));
            pages /= 2;
        }
        r->data_size = pages * 4096;
        if (ioctl(r->fd_min, PERF_EVENT_IOC_SET_OUTPUT, r->fd_maj) < 0)
            fm_fail("PERF_EVENT_IOC_SET_OUTPUT: %s", strerror(errno));
        if (ioctl(r->fd_maj, PERF_EVENT_IOC_ID, &r->id_maj) < 0 || ioctl(r->fd_min, PERF_EVENT_IOC_ID, &r->id_min) < 0)
            fm_fail("PERF_EVENT_IOC_ID: %s", strerror(errno));
        for (int k = 0; k < NTP; k++) {
            r->fd_tp[k] = -1;
            if (tp_id[k]) open_tracepoint(k, r, child, cpu, *exclude_kernel);
        }
        nrings++;
    }
    if (!nrings) fm_fail("perf_event_open found no usable CPU");
}

/* Can the page-set shim arm a file mapping here? The same steps on one page of our own
 * executable; the shim itself stays silent (it must never disturb the program). */
static void probe_uffd_wp(void) {
    const char *why = NULL;
    int err = 0;
    int u = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (u < 0) {
        why = "userfaultfd";
        err = errno;
    } else {
        struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_WP_ASYNC};
        if (ioctl(u, UFFDIO_API, &api) < 0) {
            why = "UFFD_FEATURE_WP_ASYNC (Linux >= 6.7)";
            err = errno;
        } else {
            int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
            void *p = fd < 0 ? MAP_FAILED : mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) {
                why = "mapping a file";
                err = errno;
            } else {
                struct uffdio_register r = {.range = {(unsigned long)p, 4096}, .mode = UFFDIO_REGISTER_MODE_WP};
                if (ioctl(u, UFFDIO_REGISTER, &r) < 0) {
                    why = "write-protect registration of a file mapping";
                    err = errno;
                }
                munmap(p, 4096);
            }
            if (fd >= 0) close(fd);
        }
        close(u);
    }
    if (why)
        note("mapped page sets incomplete: %s failed (%s): pages that fault-around or large folios map "
             "without a fault are missing",
             why, strerror(err));
}

/* The dispositions and mask the program would have had started bare (bit N-1: signal N,
 * as /proc/PID/status shows them): the recorder ignores SIGINT for itself, and an ignored
 * signal would stay ignored across exec. Handlers are reset by exec anyway. */
static void bare_signals(unsigned long long ign, unsigned long long mask) {
    sigset_t set;
    sigemptyset(&set);
    for (int sig = 1; sig <= 64; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = (ign >> (sig - 1)) & 1 ? SIG_IGN : SIG_DFL;
        sigemptyset(&sa.sa_mask);
        (void)sigaction(sig, &sa, NULL); /* the C library's internal signals refuse: fine */
        if ((mask >> (sig - 1)) & 1) sigaddset(&set, sig);
    }
    sigprocmask(SIG_SETMASK, &set, NULL);
}

static void usage(void) {
    fprintf(
        stderr,
        "usage: faultmon [--fd N] [--ring-pages N] [--poll-ms N] [--preload SO] [--file-tp K:ID:INO:DEV:INDEX:LAST]... "
        "[--fast CONFIG [--fast-poll-ms N] [--fast-wake-minor N]] [--sig-ign HEX --sig-mask HEX] -- CMD ARGS...\n");
    exit(126);
}

/* The forked child: waits for the go byte, takes the program's bare signal state and the
 * preloaded shim, and execs the command; an exec error goes back through ``execerr``. */
static void run_child(char **cmd, int go, int execerr, const char *preload, int sig_given, unsigned long long sig_ign,
                      unsigned long long sig_mask) {
    char c;
    if (out_fd > 2) close(out_fd);
    if (read(go, &c, 1) != 1) _exit(127); /* parent gave up */
    signal(SIGPIPE, SIG_DFL);
    if (sig_given) bare_signals(sig_ign, sig_mask);
    if (preload) {
        const char *old = getenv("LD_PRELOAD");
        char *v = malloc(strlen(preload) + (old ? strlen(old) : 0) + 2);
        if (v) {
            strcpy(v, preload);
            if (old && *old) {
                strcat(v, ":");
                strcat(v, old);
            }
            setenv("LD_PRELOAD", v, 1);
        }
    }
    execvp(cmd[0], cmd);
    int e = errno;
    if (write(execerr, &e, sizeof e) < 0) _exit(127);
    _exit(127);
}

/* Drain the rings until the traced program exits; its wait status. */
static int drain_until_exit(pid_t child, int poll_ms, int fast_poll_ms) {
    struct pollfd *pfd = calloc((size_t)nrings, sizeof *pfd);
    for (int k = 0; k < nrings; k++) {
        pfd[k].fd = rings[k].fd_maj;
        pfd[k].events = POLLIN;
    }
    int status = 0;
    uint64_t next_report = fm_now_ns() + (uint64_t)poll_ms * 1000000ull;
    for (;;) {
        pid_t w = waitpid(child, &status, WNOHANG);
        if (w == child) break;
        if (w < 0 && errno != EINTR) fm_fail("waitpid: %s", strerror(errno));
        if (!fast) {
            poll(pfd, (nfds_t)nrings, poll_ms);
            drain_all();
            continue;
        }
        /* Fast path: act on samples at once, report to the reader every poll_ms. */
        uint64_t now = fm_now_ns();
        if (now >= next_report) {
            drain_all();
            next_report = now + (uint64_t)poll_ms * 1000000ull;
            continue;
        }
        int wait_ms = (int)((next_report - now + 999999) / 1000000);
        if (poll(pfd, (nfds_t)nrings, wait_ms < fast_poll_ms ? wait_ms : fast_poll_ms) > 0) wakeups++;
        drain_pass();
    }
    return status;
}

int main(int argc, char **argv) {
    int poll_ms = 20, fast_poll_ms = 1;
    const char *fast_config = NULL;
    const char *preload = NULL;
    unsigned long long sig_ign = 0, sig_mask = 0;
    int sig_given = 0;
    int i = 1;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            i++;
            break;
        } else if (!strcmp(argv[i], "--fd") && i + 1 < argc) {
            out_fd = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--ring-pages") && i + 1 < argc) {
            ring_pages = (size_t)atol(argv[++i]);
        } else if (!strcmp(argv[i], "--poll-ms") && i + 1 < argc) {
            poll_ms = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--preload") && i + 1 < argc) {
            preload = argv[++i];
        } else if (!strcmp(argv[i], "--file-tp") && i + 1 < argc) {
            unsigned long long id;
            unsigned k, o[4];
            if (sscanf(argv[++i], "%u:%llu:%u:%u:%u:%u", &k, &id, &o[0], &o[1], &o[2], &o[3]) != 6 || k >= NTP) usage();
            tp_id[k] = id;
            memcpy(tp_off[k], o, sizeof o);
        } else if (!strcmp(argv[i], "--fast") && i + 1 < argc) {
            fast_config = argv[++i];
            fast = 1;
        } else if (!strcmp(argv[i], "--fast-wake-minor") && i + 1 < argc) {
            fast_wake_minor = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--fast-poll-ms") && i + 1 < argc) {
            fast_poll_ms = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--sig-ign") && i + 1 < argc) {
            sig_ign = strtoull(argv[++i], NULL, 16);
            sig_given = 1;
        } else if (!strcmp(argv[i], "--sig-mask") && i + 1 < argc) {
            sig_mask = strtoull(argv[++i], NULL, 16);
            sig_given = 1;
        } else {
            usage();
        }
    }
    if (i >= argc) usage();
    if (ring_pages & (ring_pages - 1)) fm_fail("--ring-pages must be a power of two");
    char **cmd = argv + i;
    signal(SIGPIPE, SIG_IGN);
    /* A larger pipe absorbs the reader's scheduling hiccups before the rings must. */
    (void)fcntl(out_fd, F_SETPIPE_SZ, 1 << 20);

    int go[2], execerr[2];
    if (pipe2(go, O_CLOEXEC) < 0 || pipe2(execerr, O_CLOEXEC) < 0) fm_fail("pipe: %s", strerror(errno));
    pid_t child = fork();
    if (child < 0) fm_fail("fork: %s", strerror(errno));
    if (child == 0) {
        close(go[1]);
        close(execerr[0]);
        run_child(cmd, go[0], execerr[1], preload, sig_given, sig_ign, sig_mask);
    }
    close(go[0]);
    close(execerr[1]);
    /* Ctrl-C reaches the traced program through the terminal; we keep draining until it exits. */
    signal(SIGINT, SIG_IGN);

    int exclude_kernel = 0;
    open_rings(child, &exclude_kernel);
    if (preload) probe_uffd_wp();

    uint64_t t0 = fm_now_ns();
    struct fm_hello hello = {FM_STREAM_MAGIC,
                             FM_STREAM_VERSION,
                             t0,
                             (uint32_t)child,
                             (uint32_t)nrings,
                             (uint32_t)exclude_kernel,
                             (uint32_t)(rings[0].data_size / 4096)};
    fm_frame(FR_HELLO, &hello, sizeof hello, NULL, 0);
    if (fast) fp_load(fast_config); /* before the program runs: a bad file is an error, not a slow run */
    if (write(go[1], "g", 1) != 1) fm_fail("cannot start the command: %s", strerror(errno));
    close(go[1]);
    int e = 0;
    ssize_t n = read(execerr[0], &e, sizeof e);
    close(execerr[0]);
    if (n == (ssize_t)sizeof e) {
        waitpid(child, NULL, 0);
        fm_fail("cannot run %s: %s", cmd[0], strerror(e));
    }
    if (fast) fp_start();

    int status = drain_until_exit(child, poll_ms, fast_poll_ms);
    drain_all();
    if (fast) fp_finish(wakeups);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    struct fm_exit ex = {status, code, fm_now_ns(), lost_total};
    fm_frame(FR_EXIT, &ex, sizeof ex, NULL, 0);
    return code;
}
