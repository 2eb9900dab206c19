/*
 * The launcher's prefetcher: issues a plan's warm and stream requests into the page
 * cache, beside the program, at low priority.
 *
 * Requests are the plan's ranges cut into chunks of CHUNK_KIB, in plan order (files in
 * plan order, ranges in file order), so the device sees an ascending sweep per file.
 * DEPTH threads take the next request from a shared counter:
 * - warm: posix_fadvise(WILLNEED), which queues the reads and returns: the threads keep
 *   the block layer fed without copying data;
 * - stream: sendfile() of the request to /dev/null, so exactly DEPTH requests are in
 *   flight: a bounded sequential read that does not flood the queue ahead of the
 *   program's own reads. It goes through the kernel's sequential read-ahead, which reads
 *   into large folios and overlaps the next window with this one, and the /dev/null end
 *   discards the data without copying it: a steadier and 1.1-1.6 times higher throughput
 *   than WILLNEED requests of the same file (order-0 pages, one by one), and a fifteenth
 *   to a fortieth of the CPU of pread() into a buffer (benchmarks/stream_read.py). Where
 *   the file system cannot splice, pread() into a scratch buffer.
 * Before every request a thread checks stop_fd (a pidfd of the program): once the program
 * has exited, there is nothing left to speed up, and the rest is not issued.
 *
 * Live feedback (launch/feedback.h): a file's first batch (cfg.batch pages) is issued at
 * once; its later requests wait until the program has read cfg.min_sample distinct pages
 * of it (counted by the advice shim), and are issued only while at least cfg.min_ratio of
 * those pages are inside the plan's ranges. Below that the plan does not fit this run and
 * the rest of the file is cancelled; a file the program never reads keeps only its first
 * batch. Files whose accesses the shim cannot see are not judged: files the program maps
 * (page faults) and ELF files (mapped by the dynamic loader), nor any file when feedback
 * is off. Waiting requests never hold up other files' requests.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "infile.h"
#include "launch.h"
#include "outfile.h"

#define PAGE 4096

struct request {
    int file;
    int64_t first, npages;
};

struct job {
    struct pcl_plan *plan;
    struct request *req;
    int64_t nreq;
    pthread_mutex_t lock; /* guards the files' request cursors and feedback states */
    int scan_from;        /* files before this one have no request left to hand out (under lock) */
    int stop_fd;
    int stopped;           /* atomic */
    int64_t requests_done; /* atomic */
};

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void pcl_lower_priority(void) {
    /* ioprio_set(IOPRIO_WHO_PROCESS, self, IOPRIO_CLASS_BE level 7): below the program's
	 * default BE level 4 where the I/O scheduler honours priorities (bfq, mq-deadline).
	 * Not the idle class: under bfq an idle-class reader can be starved for seconds,
	 * and a prefetch that arrives after the program needed the page is pure cost. */
    const int IOPRIO_WHO_PROCESS = 1, IOPRIO_CLASS_BE = 2, IOPRIO_CLASS_SHIFT = 13;
    syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, (IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT) | 7);
    if (nice(10) == -1) {
        /* already at the floor: nothing to do */
    }
}

static int program_exited(struct job *j) {
    if (__atomic_load_n(&j->stopped, __ATOMIC_RELAXED)) return 1;
    if (j->stop_fd < 0) return 0;
    struct pollfd p = {.fd = j->stop_fd, .events = POLLIN};
    if (poll(&p, 1, 0) > 0) {
        __atomic_store_n(&j->stopped, 1, __ATOMIC_RELAXED);
        return 1;
    }
    return 0;
}

static int prefetched(const struct pcl_file *f) {
    return f->status == PCL_ST_PENDING && (f->strategy == PCL_WARM || f->strategy == PCL_STREAM);
}

static int is_elf(int fd) {
    char m[4];
    return pread(fd, m, 4, 0) == 4 && memcmp(m, "\177ELF", 4) == 0;
}

/* Update a file's feedback state from the shim's counts (under the job lock). */
static void judge(struct pcl_plan *plan, struct pcl_file *f) {
    if (f->fb != PCL_FB_WAITING && f->fb != PCL_FB_PAYING) return;
    struct pcf_file *s = &plan->fb->files[f->fb_slot];
    if (__atomic_load_n(&s->mapped, __ATOMIC_RELAXED)) {
        f->fb = PCL_FB_MAPPED;
        return;
    }
    if (!f->elf_checked) {
        /* only for files with more than one batch, once, when they reach their gate */
        f->elf_checked = 1;
        if (is_elf(f->fd)) {
            f->fb = PCL_FB_ELF;
            return;
        }
    }
    int64_t in = __atomic_load_n(&s->pages_in, __ATOMIC_RELAXED),
            out = __atomic_load_n(&s->pages_out, __ATOMIC_RELAXED);
    if (in + out < plan->fbcfg.min_sample) return;
    f->fb = (double)in < plan->fbcfg.min_ratio * (double)(in + out) ? PCL_FB_CANCELLED : PCL_FB_PAYING;
}

/* The launcher checked the file's identity with stat() before the program started and
 * left opening it to the prefetcher, off the program's path. Open it now and check that
 * it is still the file the launcher saw; on failure the file's requests are skipped. */
static int open_planned(struct pcl_file *f) {
    if (f->fd >= 0) return 1;
    struct stat st;
    /* a FIFO swapped in since the stat must not block us; a warm file is only advised, so its
     * O_NONBLOCK stays (clearing it costs two system calls a file) */
    int fd =
        f->strategy == PCL_WARM ? pc_open_regular_nb(f->path, O_RDONLY, &st) : pc_open_regular(f->path, O_RDONLY, &st);
    if (fd < 0) {
        snprintf(f->detail, sizeof f->detail, "cannot open (%s)", pc_open_why(errno));
        f->status = PCL_ST_MISSING;
        return 0;
    }
    if ((uint64_t)st.st_ino != f->ino || (uint64_t)st.st_dev != f->dev || (uint64_t)st.st_size != f->size) {
        close(fd);
        snprintf(f->detail, sizeof f->detail, "replaced while the program started; not prefetched");
        f->status = PCL_ST_STALE;
        return 0;
    }
    f->fd = fd;
    return 1;
}

/* Whether a file has no request left to hand out, for good: a file leaves this state never. */
static int exhausted(const struct pcl_file *f) {
    return !prefetched(f) || f->req_next >= f->req_hi || f->fb == PCL_FB_CANCELLED;
}

/* A file's descriptor is closed once its last request is done: a plan of thousands of
 * small files (grep -r's 13,000) would otherwise hold them all open and meet the
 * descriptor limit (1024 by default), every file after it reported missing. */
static void close_if_done(struct pcl_file *f) {
    if (f->fd >= 0 && f->inflight == 0 && exhausted(f)) {
        close(f->fd);
        f->fd = -1;
    }
}

/* The next request to issue: 1 (in *out), 0 (only waiting files are left), -1 (none left).
 * The scan starts at the first file that may have requests left (scan_from): started from
 * the first file every time, a plan of 13,000 files cost the prefetcher a second of CPU. */
static int next_request(struct job *j, int64_t *out) {
    struct pcl_plan *plan = j->plan;
    int waiting = 0;
    pthread_mutex_lock(&j->lock);
    for (int i = j->scan_from; i < plan->nfiles; i++) {
        struct pcl_file *f = &plan->files[i];
        if (!exhausted(f)) open_planned(f); /* on failure no longer prefetched(): exhausted from now on */
        if (!exhausted(f) && f->req_next >= f->req_gate) {
            judge(plan, f);
            if (f->fb == PCL_FB_CANCELLED) close_if_done(f);
        }
        if (exhausted(f)) {
            if (i == j->scan_from) j->scan_from++;
            continue;
        }
        if (f->req_next >= f->req_gate && f->fb == PCL_FB_WAITING) {
            waiting = 1;
            continue;
        }
        *out = f->req_next++;
        f->inflight++;
        pthread_mutex_unlock(&j->lock);
        return 1;
    }
    pthread_mutex_unlock(&j->lock);
    return waiting ? 0 : -1;
}

static void request_done(struct job *j, struct pcl_file *f) {
    pthread_mutex_lock(&j->lock);
    f->inflight--;
    close_if_done(f);
    pthread_mutex_unlock(&j->lock);
}

/* Read [off, off + len) of fd into the page cache: sendfile() to /dev/null, or pread()
 * into *buf where the file cannot be spliced (the first refusal turns sendfile off for
 * this thread: *null_fd = -2). */
static int stream_read(int fd, off_t off, size_t len, int *null_fd, char **buf, size_t *buflen) {
    if (*null_fd == -1) {
        *null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (*null_fd < 0) *null_fd = -2;
    }
    while (*null_fd >= 0 && len > 0) {
        ssize_t n = sendfile(*null_fd, fd, &off, len);
        if (n > 0) {
            len -= (size_t)n;
            continue;
        }
        if (n == 0) return 1; /* end of file */
        if (errno == EINTR) continue;
        if (errno != EINVAL && errno != ENOSYS) return 0;
        close(*null_fd);
        *null_fd = -2;
    }
    if (len == 0) return 1;
    if (*buflen < len) {
        free(*buf);
        *buf = malloc(len);
        *buflen = *buf ? len : 0;
    }
    return *buf && pread(fd, *buf, len, off) >= 0;
}

static void *reader(void *arg) {
    struct job *j = arg;
    char *buf = NULL;
    size_t buflen = 0;
    int null_fd = -1;
    for (;;) {
        int64_t i;
        if (program_exited(j)) break;
        int got = next_request(j, &i);
        if (got < 0) break;
        if (got == 0) {
            /* a file waits for the program's reads: look again shortly, or stop at its exit */
            struct pollfd p = {.fd = j->stop_fd, .events = POLLIN};
            if (j->stop_fd < 0) break;
            poll(&p, 1, 2);
            continue;
        }
        struct request *r = &j->req[i];
        struct pcl_file *f = &j->plan->files[r->file];
        off_t off = (off_t)r->first * PAGE;
        size_t len = (size_t)r->npages * PAGE;
        int ok;
        if (f->strategy == PCL_WARM) {
            ok = posix_fadvise(f->fd, off, (off_t)len, POSIX_FADV_WILLNEED) == 0;
        } else {
            ok = stream_read(f->fd, off, len, &null_fd, &buf, &buflen);
        }
        if (ok)
            __atomic_fetch_add(&f->pages_issued, r->npages, __ATOMIC_RELAXED);
        else
            __atomic_fetch_add(&f->errors, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&j->requests_done, 1, __ATOMIC_RELAXED);
        request_done(j, f);
    }
    free(buf);
    if (null_fd >= 0) close(null_fd);
    return NULL;
}

/* The identity check pinned the file's size: pages past its end are nothing to read, and
 * clipping keeps a hostile range from sizing the request array. */
static void clip_ranges(struct pcl_file *f) {
    int64_t last = (int64_t)((f->size + PAGE - 1) / PAGE);
    f->pages_planned = 0;
    for (int64_t k = 0; k < f->nranges; k++) {
        if (f->ranges[k][0] >= last)
            f->ranges[k][1] = 0;
        else if (f->ranges[k][1] > last - f->ranges[k][0])
            f->ranges[k][1] = last - f->ranges[k][0];
        f->pages_planned += f->ranges[k][1];
    }
}

/* Cut every pending warm/stream file's ranges into chunk-sized requests, in plan order. */
static struct request *make_requests(struct pcl_plan *plan, int64_t *n) {
    int64_t cap = 0;
    for (int i = 0; i < plan->nfiles; i++) {
        struct pcl_file *f = &plan->files[i];
        if (f->status != PCL_ST_PENDING || (f->strategy != PCL_WARM && f->strategy != PCL_STREAM)) continue;
        if (f->strategy == PCL_STREAM && f->nranges == 0) {
            /* whole file */
            f->ranges = realloc(f->ranges, sizeof *f->ranges);
            f->ranges[0][0] = 0;
            f->ranges[0][1] = (int64_t)((f->size + PAGE - 1) / PAGE);
            f->nranges = f->ranges[0][1] ? 1 : 0;
            f->pages_planned = f->ranges[0][1];
        }
        clip_ranges(f);
        int64_t chunk = f->chunk_kib * 1024 / PAGE;
        for (int64_t k = 0; k < f->nranges; k++) cap += (f->ranges[k][1] + chunk - 1) / chunk;
    }
    struct request *req = malloc((size_t)(cap ? cap : 1) * sizeof *req);
    int64_t m = 0;
    if (!req) {
        *n = 0;
        return NULL;
    }
    for (int i = 0; i < plan->nfiles; i++) {
        struct pcl_file *f = &plan->files[i];
        if (f->status != PCL_ST_PENDING || (f->strategy != PCL_WARM && f->strategy != PCL_STREAM)) continue;
        int64_t chunk = f->chunk_kib * 1024 / PAGE, before = 0;
        f->req_lo = f->req_next = m;
        f->req_gate = -1;
        for (int64_t k = 0; k < f->nranges; k++)
            for (int64_t a = f->ranges[k][0], e = a + f->ranges[k][1]; a < e; a += chunk) {
                int64_t n = e - a < chunk ? e - a : chunk;
                /* the first request that would start past the first batch waits for a verdict */
                if (f->req_gate < 0 && f->fb == PCL_FB_WAITING && before >= plan->fbcfg.batch) f->req_gate = m;
                req[m++] = (struct request){i, a, n};
                before += n;
            }
        f->req_hi = m;
        if (f->req_gate < 0) f->req_gate = m;
    }
    *n = m;
    return req;
}

/* Issue one warm file's ranges before the program starts; the requests made. */
static int64_t issue_file_before(struct pcl_file *f) {
    int64_t requests = 0;
    clip_ranges(f);
    f->fb = PCL_FB_OFF; /* everything is issued up front: nothing left for a verdict to stop */
    if (f->advice == PCL_ADV_DEFAULT) {
        /* not stat()ed by pcl_plan_open: the identity is checked here, on the open file
         * (O_NONBLOCK: a FIFO put in a file's place must not block the launch; left set, as
         * the descriptor is only advised) */
        struct stat st;
        int fd = pc_open_regular_nb(f->path, O_RDONLY, &st);
        if (fd < 0) {
            pcl_file_missing(f, pc_open_why(errno));
            return 0;
        }
        if (!pcl_file_identity_ok(f, &st)) {
            close(fd);
            return 0;
        }
        f->fd = fd;
    } else if (!open_planned(f))
        return 0;
    int64_t chunk = f->chunk_kib * 1024 / PAGE;
    for (int64_t k = 0; k < f->nranges; k++)
        for (int64_t a = f->ranges[k][0], e = a + f->ranges[k][1]; a < e; a += chunk) {
            int64_t n = e - a < chunk ? e - a : chunk;
            if (posix_fadvise(f->fd, (off_t)a * PAGE, (off_t)n * PAGE, POSIX_FADV_WILLNEED) == 0)
                f->pages_issued += n;
            else
                f->errors++;
            requests++;
        }
    close(f->fd);
    f->fd = -1;
    if (f->errors) {
        f->status = PCL_ST_ERROR;
        snprintf(f->detail, sizeof f->detail, "%lld requests failed", (long long)f->errors);
    } else {
        f->status = PCL_ST_WARMED;
        snprintf(f->detail, sizeof f->detail, "issued before the program started");
    }
    return requests;
}

/* Plans warming at least this many files before the program starts split them between two
 * threads, each a contiguous half in plan order (alternate files had both threads walking
 * the same directories at once, contending for their entries): each file costs four system
 * calls (open, fstat, fadvise, close), and a plan of every file `grep -r` read (13,000)
 * spent 30 ms on them in front of the program, 6 % of its run. */
#define BEFORE_SPLIT_FILES 1024

struct before_share {
    struct pcl_plan *plan;
    int begin, end;
    int64_t requests;
};

static int warmed_before(const struct pcl_file *f) {
    return prefetched(f) && f->strategy == PCL_WARM;
}

static void *issue_share(void *arg) {
    struct before_share *s = arg;
    for (int i = s->begin; i < s->end; i++)
        if (warmed_before(&s->plan->files[i])) s->requests += issue_file_before(&s->plan->files[i]);
    return NULL;
}

int pcl_issue_before(struct pcl_plan *plan) {
    int64_t t0 = mono_ns();
    int left = 0, warm = 0;
    for (int i = 0; i < plan->nfiles; i++) {
        const struct pcl_file *f = &plan->files[i];
        if (warmed_before(f))
            warm++;
        else if (prefetched(f))
            left++; /* stream: read beside the program, as in every plan */
    }
    int half = plan->nfiles / 2;
    struct before_share share[2] = {{plan, 0, half, 0}, {plan, half, plan->nfiles, 0}};
    pthread_t other;
    int split = warm >= BEFORE_SPLIT_FILES && pthread_create(&other, NULL, issue_share, &share[1]) == 0;
    if (!split) share[0].end = plan->nfiles;
    issue_share(&share[0]);
    if (split) pthread_join(other, NULL);
    plan->before_requests += share[0].requests + (split ? share[1].requests : 0);
    plan->before_ns = mono_ns() - t0;
    return left;
}

void pcl_json_str(FILE *o, const char *s) {
    fputc('"', o);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(o, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(o, "\\u%04x", *p);
        else
            fputc(*p, o);
    }
    fputc('"', o);
}

static void write_status(struct pcl_plan *plan, struct job *j, int64_t elapsed_ns, const char *path) {
    char tmp[4200];
    FILE *o = pc_out_ftemp(path, tmp, sizeof tmp);
    if (!o) return;
    int64_t pages = 0, errors = 0;
    for (int i = 0; i < plan->nfiles; i++) {
        pages += plan->files[i].pages_issued;
        errors += plan->files[i].errors;
    }
    fprintf(o,
            "{\"prefetch\": {\"pages_issued\": %lld, \"bytes_issued\": %lld, \"requests\": %lld, "
            "\"errors\": %lld, \"elapsed_s\": %.6f, \"stopped\": \"%s\", \"issue\": \"%s\", "
            "\"before_exec_s\": %.6f},\n \"files\": [",
            (long long)pages, (long long)pages * PAGE, (long long)(j->requests_done + plan->before_requests),
            (long long)errors, (elapsed_ns + plan->before_ns) / 1e9, j->stopped ? "program-exited" : "done",
            pcl_issue_names[plan->issue], plan->before_ns / 1e9);
    for (int i = 0; i < plan->nfiles; i++) {
        struct pcl_file *f = &plan->files[i];
        fprintf(o, "%s\n  {\"path\": ", i ? "," : "");
        pcl_json_str(o, f->path);
        fprintf(o,
                ", \"strategy\": \"%s\", \"advice\": \"%s\", \"advice_applied\": %s, \"status\": \"%s\", "
                "\"pages_planned\": %lld, \"pages_issued\": %lld, \"bytes_issued\": %lld, \"detail\": ",
                pcl_strategy_names[f->strategy], pcl_advice_names[f->advice], f->advice_ok ? "true" : "false",
                pcl_status_names[f->status], (long long)f->pages_planned, (long long)f->pages_issued,
                (long long)f->pages_issued * PAGE);
        pcl_json_str(o, f->detail);
        if (f->fb == PCL_FB_NONE)
            fputs(", \"feedback\": null, \"pages_used\": null, \"pages_outside\": null", o);
        else if (f->fb == PCL_FB_OFF)
            fputs(", \"feedback\": \"off\", \"pages_used\": null, \"pages_outside\": null", o);
        else
            fprintf(o, ", \"feedback\": \"%s\", \"pages_used\": %lld, \"pages_outside\": %lld",
                    pcl_feedback_names[f->fb], (long long)f->pages_used, (long long)f->pages_outside);
        fputc('}', o);
    }
    fputs("]}\n", o);
    pc_out_fcommit(o, tmp, path);
}

/* Whether a prefetched file gets a feedback slot. A file whose plan fits in the first batch
 * is issued whole before any verdict: judging it could stop nothing, and every file judged
 * costs the program the shim's bookkeeping on its reads (git's 700 small objects: ~1.5 ms
 * of a 70 ms run). Sizing and filling the segment must agree on this, file for file. */
static int judged(const struct pcl_feedback_cfg *c, const struct pcl_file *f) {
    int64_t npages = (int64_t)((f->size + PAGE - 1) / PAGE), planned = 0;
    if (f->strategy == PCL_STREAM && f->nranges == 0) planned = npages;
    for (int64_t k = 0; k < f->nranges; k++) planned += f->ranges[k][1];
    return c->on && npages > 0 && planned > c->batch;
}

int pcl_feedback_setup(struct pcl_plan *plan) {
    const struct pcl_feedback_cfg *c = &plan->fbcfg;
    int n = 0;
    size_t size = sizeof(struct pcf_header);
    for (int i = 0; i < plan->nfiles; i++) {
        struct pcl_file *f = &plan->files[i];
        if (!prefetched(f)) continue;
        f->fb = PCL_FB_OFF;
        if (!judged(c, f)) continue;
        int64_t npages = (int64_t)((f->size + PAGE - 1) / PAGE);
        n++;
        size += sizeof(struct pcf_file) + 2 * (size_t)((npages + 63) / 64 * 8);
    }
    if (!n) return -1;
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(plan->fb_path, sizeof plan->fb_path, "%s/pagecast-feedback-%d-XXXXXX", dir, (int)getpid());
    int fd = mkostemp(plan->fb_path, O_CLOEXEC);
    void *p = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, (off_t)size) == 0) p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
    if (p == MAP_FAILED) {
        fprintf(stderr,
                "pagecast run: warning: cannot create the feedback segment in %s (%s); every planned page "
                "is issued without live feedback\n",
                dir, strerror(errno));
        if (fd >= 0) unlink(plan->fb_path);
        plan->fb_path[0] = 0;
        return -1;
    }
    struct pcf_header *h = p;
    h->magic = PCF_MAGIC;
    h->version = PCF_VERSION;
    h->size = size;
    size_t off = sizeof *h + (size_t)n * sizeof(struct pcf_file);
    for (int i = 0; i < plan->nfiles; i++) {
        struct pcl_file *f = &plan->files[i];
        if (!prefetched(f) || !judged(c, f)) continue;
        int64_t npages = (int64_t)((f->size + PAGE - 1) / PAGE);
        struct pcf_file *s = &h->files[h->nfiles];
        s->dev = f->dev;
        s->ino = f->ino;
        s->npages = npages;
        s->planned_off = (int64_t)off;
        off += (size_t)((npages + 63) / 64 * 8);
        s->seen_off = (int64_t)off;
        off += (size_t)((npages + 63) / 64 * 8);
        unsigned char *bits = (unsigned char *)p + s->planned_off;
        if (f->strategy == PCL_STREAM && f->nranges == 0) {
            memset(bits, 0xFF, (size_t)((npages + 7) / 8));
        } else {
            for (int64_t k = 0; k < f->nranges; k++)
                for (int64_t a = f->ranges[k][0], e = a + f->ranges[k][1]; a < e && a < npages; a++)
                    bits[a >> 3] |= (unsigned char)(1u << (a & 7));
        }
        f->fb_slot = (int)h->nfiles++;
        f->fb = PCL_FB_WAITING;
    }
    plan->fb = h;
    plan->fb_size = size;
    return 0;
}

static void feedback_detail(struct pcl_plan *plan, struct pcl_file *f) {
    struct pcf_file *s = &plan->fb->files[f->fb_slot];
    if (f->req_gate < f->req_hi && f->req_next >= f->req_gate) {
        /* the last word: the program may have exited before a thread looked (no more reads
		 * of the file now, not even of its ELF header) */
        f->elf_checked = 1;
        judge(plan, f);
    }
    f->pages_used = __atomic_load_n(&s->pages_in, __ATOMIC_RELAXED);
    f->pages_outside = __atomic_load_n(&s->pages_out, __ATOMIC_RELAXED);
    if (f->fb == PCL_FB_CANCELLED) {
        f->status = PCL_ST_CANCELLED;
        snprintf(f->detail, sizeof f->detail,
                 "live feedback: %lld of the first %lld pages the program read were in the plan (< %.0f %%); "
                 "%lld of %lld planned pages not issued",
                 (long long)f->pages_used, (long long)(f->pages_used + f->pages_outside), 100 * plan->fbcfg.min_ratio,
                 (long long)(f->pages_planned - f->pages_issued), (long long)f->pages_planned);
    } else if (f->fb == PCL_FB_WAITING && f->pages_issued < f->pages_planned && !f->errors) {
        snprintf(f->detail, sizeof f->detail,
                 "live feedback: the program read %lld pages of the file (%lld needed to judge the plan); "
                 "%lld of %lld planned pages not issued",
                 (long long)(f->pages_used + f->pages_outside), (long long)plan->fbcfg.min_sample,
                 (long long)(f->pages_planned - f->pages_issued), (long long)f->pages_planned);
    }
}

void pcl_prefetch_run(struct pcl_plan *plan, int stop_fd, const char *status_path) {
    int64_t t0 = mono_ns();
    struct job j = {.plan = plan, .stop_fd = stop_fd};
    pthread_mutex_init(&j.lock, NULL);
    j.req = make_requests(plan, &j.nreq);
    int depth = 1;
    for (int i = 0; i < plan->nfiles; i++)
        if (prefetched(&plan->files[i]) && plan->files[i].depth > depth) depth = plan->files[i].depth;
    pthread_t th[64];
    int started = 0;
    for (int t = 1; t < depth; t++)
        if (pthread_create(&th[started], NULL, reader, &j) == 0) started++;
    reader(&j);
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    int64_t elapsed = mono_ns() - t0;
    if (plan->fb && plan->wait_exit && stop_fd >= 0 && !j.stopped) {
        /* the used counts are final once the program has exited */
        struct pollfd p = {.fd = stop_fd, .events = POLLIN};
        while (poll(&p, 1, -1) < 0 && errno == EINTR);
    }
    for (int i = 0; i < plan->nfiles; i++) {
        struct pcl_file *f = &plan->files[i];
        if (!prefetched(f)) continue;
        if (f->errors)
            f->status = PCL_ST_ERROR;
        else
            f->status = f->pages_issued >= f->pages_planned ? PCL_ST_WARMED : PCL_ST_STOPPED;
        if (f->errors) snprintf(f->detail, sizeof f->detail, "%lld requests failed", (long long)f->errors);
        if (f->fb_slot >= 0 && plan->fb) feedback_detail(plan, f);
    }
    if (plan->fb_path[0]) unlink(plan->fb_path);
    if (status_path) write_status(plan, &j, elapsed, status_path);
    free(j.req);
}
