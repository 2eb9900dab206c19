/* Per-API metrics and the call timeline of libpagecast_cuda.so.
 *
 * Metrics are lock-free atomic counters per wrapper slot; the timeline is one CSV line
 * per call, formatted on the caller's stack and written under a mutex (AI4Mem's
 * interposer pushed to an unlocked queue from every thread). Files live in
 * $PAGECAST_CUDA_OUT, are written under temporary names and renamed when complete. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "outfile.h"
#include "pc_internal.h"
#include "vformat.h"

#define PC_MAX_SLOTS 64

struct metric {
    const char *name;
    uint64_t count, total_ns, bytes, errors;
};

static struct metric metrics[PC_MAX_SLOTS];
static pthread_mutex_t tl_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *timeline;
static char out_dir[2048];
static char tl_final[2300], tl_tmp[2400];
static int enabled;

static const char *dir_names[] = {"", "htod", "dtoh", "dtod", "htoh", "to_device", "to_host"};

int64_t pc_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

const char *pc_out_dir(void) {
    return enabled ? out_dir : NULL;
}
int pc_log_enabled(void) {
    return enabled;
}

static void path_for(char *buf, size_t n, const char *stem, const char *ext) {
    snprintf(buf, n, "%s/%s.%d.%s", out_dir, stem, (int)getpid(), ext);
}

static void write_session(void) {
    char path[2300], tmp[2400];
    path_for(path, sizeof path, "session", "json");
    FILE *f = pc_out_ftemp(path, tmp, sizeof tmp);
    if (!f) return;
    struct timespec mono, real;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    clock_gettime(CLOCK_REALTIME, &real);
    fprintf(f, "{\"pid\": %d, \"monotonic_ns\": %lld, \"realtime_ns\": %lld, \"format\": 1}\n", (int)getpid(),
            (long long)mono.tv_sec * 1000000000LL + mono.tv_nsec, (long long)real.tv_sec * 1000000000LL + real.tv_nsec);
    pc_out_fcommit(f, tmp, path);
}

/* fork(): the child must not flush the parent's buffered timeline into the parent's
 * file, nor report the parent's counts as its own. Flush before the fork; the child
 * drops the (now empty) stream and starts its own files under its own pid. */
static void before_fork(void) {
    pthread_mutex_lock(&tl_lock);
    if (timeline) fflush(timeline);
}
static void parent_after_fork(void) {
    pthread_mutex_unlock(&tl_lock);
}
static void child_after_fork(void) {
    pthread_mutex_unlock(&tl_lock);
    if (timeline) fclose(timeline);
    timeline = NULL;
    memset(metrics, 0, sizeof metrics);
    enabled = 0;
    pc_log_init();
}

void pc_log_init(void) {
    static int atfork_done;
    if (!atfork_done) {
        atfork_done = 1;
        pthread_atfork(before_fork, parent_after_fork, child_after_fork);
    }
    const char *d = getenv("PAGECAST_CUDA_OUT");
    if (!d || !*d || strlen(d) >= sizeof out_dir) return;
    strcpy(out_dir, d);
    enabled = 1;
    write_session();
    const char *tl = getenv("PAGECAST_CUDA_TIMELINE");
    if (tl && strcmp(tl, "0") == 0) return;
    path_for(tl_final, sizeof tl_final, "timeline", "csv");
    timeline = pc_out_ftemp(tl_final, tl_tmp, sizeof tl_tmp);
    if (!timeline) {
        fprintf(stderr, "pagecast-cuda: cannot write beside %s; timeline disabled\n", tl_final);
        return;
    }
    setvbuf(timeline, NULL, _IOFBF, 1 << 20);
    fputs("name,start_ns,duration_ns,bytes,direction,ptr,alloc,offset,result\n", timeline);
}

static char *put_u64(char *p, uint64_t v) {
    char tmp[24];
    int n = 0;
    do tmp[n++] = (char)('0' + v % 10), v /= 10;
    while (v);
    while (n) *p++ = tmp[--n];
    return p;
}

static char *put_i64(char *p, int64_t v) {
    if (v < 0) {
        *p++ = '-';
        return put_u64(p, (uint64_t)0 - (uint64_t)v);
    }
    return put_u64(p, (uint64_t)v);
}

static char *put_hex(char *p, uint64_t v) {
    static const char digits[] = "0123456789abcdef";
    char tmp[20];
    int n = 0;
    *p++ = '0';
    *p++ = 'x';
    do tmp[n++] = digits[v & 15], v >>= 4;
    while (v);
    while (n) *p++ = tmp[--n];
    return p;
}

void pc_log_call(int fn, const char *name, int64_t start_ns, int64_t dur_ns, uint64_t bytes, int dir, uint64_t ptr,
                 int result) {
    if (fn >= 0 && fn < PC_MAX_SLOTS) {
        struct metric *m = &metrics[fn];
        if (!__atomic_load_n(&m->name, __ATOMIC_RELAXED)) __atomic_store_n(&m->name, name, __ATOMIC_RELAXED);
        __atomic_fetch_add(&m->count, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&m->total_ns, (uint64_t)(dur_ns > 0 ? dur_ns : 0), __ATOMIC_RELAXED);
        __atomic_fetch_add(&m->bytes, bytes, __ATOMIC_RELAXED);
        if (result != 0) __atomic_fetch_add(&m->errors, 1, __ATOMIC_RELAXED);
    }
    if (!timeline) return;
    int64_t alloc = -1;
    uint64_t offset = 0;
    if (ptr) pagecast_cuda_translate(ptr, &alloc, &offset);
    /* Hand formatting: snprintf was 60 % of the cost of a logged call. */
    char line[512], *p = line, *end = line + sizeof line - 64;
    for (const char *c = name; *c && p < end; c++) *p++ = *c;
    *p++ = ',';
    p = put_i64(p, start_ns);
    *p++ = ',';
    p = put_i64(p, dur_ns);
    *p++ = ',';
    p = put_u64(p, bytes);
    *p++ = ',';
    for (const char *c = dir >= 0 && dir <= PC_DIR_TO_HOST ? dir_names[dir] : ""; *c; c++) *p++ = *c;
    *p++ = ',';
    p = put_hex(p, ptr);
    *p++ = ',';
    p = put_i64(p, alloc);
    *p++ = ',';
    p = put_u64(p, offset);
    *p++ = ',';
    p = put_i64(p, result);
    *p++ = '\n';
    size_t n = (size_t)(p - line);
    pthread_mutex_lock(&tl_lock);
    if (timeline) fwrite(line, 1, n, timeline);
    pthread_mutex_unlock(&tl_lock);
}

void pc_log_message(const char *fmt, ...) {
    char msg[5000];
    PC_VFORMAT(msg, fmt);
    fprintf(stderr, "pagecast-cuda: %s\n", msg);
    if (!enabled) return;
    char path[2300];
    path_for(path, sizeof path, "messages", "log");
    /* appended line by line: the messages must survive a crash; never through a link */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (f) {
        fprintf(f, "%lld %s\n", (long long)pc_now_ns(), msg);
        fclose(f);
    } else if (fd >= 0) {
        close(fd);
    }
}

static int write_metrics(void) {
    char path[2300], tmp[2400];
    path_for(path, sizeof path, "metrics", "csv");
    FILE *f = pc_out_ftemp(path, tmp, sizeof tmp);
    if (!f) return -1;
    fputs("name,count,total_ns,bytes,errors\n", f);
    for (int i = 0; i < PC_MAX_SLOTS; i++) {
        const struct metric *m = &metrics[i];
        const char *name = __atomic_load_n(&m->name, __ATOMIC_RELAXED);
        uint64_t count = __atomic_load_n(&m->count, __ATOMIC_RELAXED);
        if (!name || !count) continue;
        fprintf(f, "%s,%llu,%llu,%llu,%llu\n", name, (unsigned long long)count,
                (unsigned long long)__atomic_load_n(&m->total_ns, __ATOMIC_RELAXED),
                (unsigned long long)__atomic_load_n(&m->bytes, __ATOMIC_RELAXED),
                (unsigned long long)__atomic_load_n(&m->errors, __ATOMIC_RELAXED));
    }
    return pc_out_fcommit(f, tmp, path);
}

int pagecast_cuda_flush(void) {
    if (!enabled) return 0;
    char path[2300];
    path_for(path, sizeof path, "allocs", "csv");
    int rc = write_metrics() | pc_alloc_write_csv(path);
    pthread_mutex_lock(&tl_lock);
    if (timeline) fflush(timeline);
    pthread_mutex_unlock(&tl_lock);
    return rc;
}

void pc_log_finish(void) {
    if (!enabled) return;
    pagecast_cuda_flush();
    pthread_mutex_lock(&tl_lock);
    if (timeline) {
        int bad = fclose(timeline) != 0;
        timeline = NULL;
        if (bad || rename(tl_tmp, tl_final) != 0) unlink(tl_tmp);
    }
    pthread_mutex_unlock(&tl_lock);
}
