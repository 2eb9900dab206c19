/* libpagecast_cupti.so: CUPTI unified-memory collector, loaded by the driver through
 * CUDA_INJECTION64_PATH (exported InitializeInjection).
 *
 * Enables CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER (configured first, as CUPTI
 * requires, for HtoD/DtoH bytes with their cause, GPU page faults with their access
 * type, CPU faults, thrashing, throttling and remote maps), CONCURRENT_KERNEL and
 * MEMORY2 (allocations, so addresses become (allocation, offset) in the same clock), and
 * streams every record as a fixed 48-byte record (pc_cupti_format.h) to
 * $PAGECAST_CUDA_OUT/cupti.<pid>.bin, renamed into place at exit.
 *
 * Not run on a GPU by this project's tests (there is none where it was written): it is
 * compiled with -Werror against the CUDA 13 CUPTI headers; the converter is tested on
 * records written in this format. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cupti.h>

#include "outfile.h"
#include "pc_cupti_format.h"

#define BUF_SIZE (8u << 20)
#define ALIGN    8

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *out, *names;
static char out_final[4200], out_tmp[4300], names_final[4200], names_tmp[4300];
static uint64_t dropped;

/* kernel name → id, open addressing on the string hash */
struct name_slot {
    uint64_t hash;
    char *name;
    uint32_t id;
};
static struct name_slot *name_tab;
static size_t name_cap, name_count;

static void report(const char *what, CUptiResult r) {
    const char *s = "?";
    cuptiGetResultString(r, &s);
    fprintf(stderr, "pagecast-cupti: %s: %s\n", what, s);
}

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
    return h;
}

/* Caller holds lock. */
static uint32_t name_id(const char *name) {
    if (!name) name = "?";
    if (name_count * 2 >= name_cap) {
        size_t cap = name_cap ? name_cap * 2 : 1024;
        struct name_slot *t = calloc(cap, sizeof *t);
        if (!t) return UINT32_MAX;
        for (size_t i = 0; i < name_cap; i++) {
            if (!name_tab[i].name) continue;
            size_t j = name_tab[i].hash & (cap - 1);
            while (t[j].name) j = (j + 1) & (cap - 1);
            t[j] = name_tab[i];
        }
        free(name_tab);
        name_tab = t;
        name_cap = cap;
    }
    uint64_t h = hash_str(name);
    size_t j = h & (name_cap - 1);
    while (name_tab[j].name) {
        if (name_tab[j].hash == h && strcmp(name_tab[j].name, name) == 0) return name_tab[j].id;
        j = (j + 1) & (name_cap - 1);
    }
    name_tab[j].hash = h;
    name_tab[j].name = strdup(name);
    name_tab[j].id = (uint32_t)name_count++;
    if (names) {
        /* Names are free text: keep the file one line per kernel. */
        fprintf(names, "%u\t", name_tab[j].id);
        for (const char *c = name; *c; c++) fputc(*c == '\t' || *c == '\n' || *c == '\r' ? ' ' : *c, names);
        fputc('\n', names);
    }
    return name_tab[j].id;
}

static void emit(const struct pc_rec *r) {
    if (out) fwrite(r, sizeof *r, 1, out);
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    void *p = NULL;
    *buffer = posix_memalign(&p, ALIGN, BUF_SIZE) == 0 ? p : NULL;
    *size = *buffer ? BUF_SIZE : 0;
    *max_records = 0;
}

static void convert(const CUpti_Activity *rec) {
    struct pc_rec o;
    memset(&o, 0, sizeof o);
    switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER: {
            const CUpti_ActivityUnifiedMemoryCounter3 *u = (const CUpti_ActivityUnifiedMemoryCounter3 *)rec;
            o.type = PC_REC_UM;
            o.subkind = (uint8_t)u->counterKind;
            o.flags = (uint16_t)u->flags;
            o.stream = u->streamId;
            o.start = u->start;
            o.end = u->end;
            o.address = u->address;
            o.value = u->value;
            o.src = u->srcId;
            o.dst = u->dstId;
            break;
        }
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            o.type = PC_REC_KERNEL;
            o.stream = k->streamId;
            o.start = k->start;
            o.end = k->end;
            o.address = k->correlationId;
            o.value = name_id(k->name);
            o.src = k->deviceId;
            o.dst = (uint32_t)k->gridX;
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMORY2: {
            const CUpti_ActivityMemory4 *m = (const CUpti_ActivityMemory4 *)rec;
            o.type = PC_REC_MEMORY;
            o.subkind = (uint8_t)m->memoryOperationType;
            o.flags = (uint16_t)m->memoryKind;
            o.stream = m->streamId;
            o.start = m->timestamp;
            o.address = m->address;
            o.value = m->bytes;
            o.src = m->deviceId;
            o.dst = m->processId;
            break;
        }
        default:
            return;
    }
    emit(&o);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&lock);
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) convert(rec);
    size_t d = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &d) == CUPTI_SUCCESS) dropped += d;
    pthread_mutex_unlock(&lock);
    (void)size;
    free(buffer);
}

static int64_t clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Writes the trailer and renames the files into place. */
static void close_outputs(void) {
    pthread_mutex_lock(&lock);
    if (out) {
        struct pc_rec t = {.type = PC_REC_DROPPED, .value = dropped};
        emit(&t);
        int bad = fclose(out) != 0;
        out = NULL;
        if (bad || rename(out_tmp, out_final) != 0) unlink(out_tmp);
    }
    if (names) {
        int bad = fclose(names) != 0;
        names = NULL;
        if (bad || rename(names_tmp, names_final) != 0) unlink(names_tmp);
    }
    pthread_mutex_unlock(&lock);
}

static void finish(void) {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    close_outputs();
    if (dropped) fprintf(stderr, "pagecast-cupti: CUPTI dropped %llu records\n", (unsigned long long)dropped);
}

static int enable_um_counters(void) {
    static const CUpti_ActivityUnifiedMemoryCounterKind kinds[] = {
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP,
    };
    enum { N = sizeof kinds / sizeof kinds[0] };
    const char *dev = getenv("PAGECAST_CUPTI_DEVICE");
    CUpti_ActivityUnifiedMemoryCounterConfig cfg[N];
    for (int i = 0; i < N; i++) {
        cfg[i].scope = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE;
        cfg[i].kind = kinds[i];
        cfg[i].deviceId = dev ? (uint32_t)atoi(dev) : 0;
        cfg[i].enable = 1;
    }
    CUptiResult r = cuptiActivityConfigureUnifiedMemoryCounter(cfg, N);
    if (r != CUPTI_SUCCESS) {
        /* Some counters are unsupported on some platforms (e.g. GPU faults before
         * Pascal, or under MPS): keep the ones that work. */
        report("configuring all unified-memory counters at once", r);
        int ok = 0;
        for (int i = 0; i < N; i++) {
            CUptiResult ri = cuptiActivityConfigureUnifiedMemoryCounter(&cfg[i], 1);
            if (ri == CUPTI_SUCCESS)
                ok++;
            else {
                char what[96];
                snprintf(what, sizeof what, "unified-memory counter kind %d unavailable", (int)kinds[i]);
                report(what, ri);
            }
        }
        if (!ok) return -1;
    }
    r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
    if (r != CUPTI_SUCCESS) {
        report("enabling unified-memory counters", r);
        return -1;
    }
    return 0;
}

static int open_outputs(void) {
    const char *dir = getenv("PAGECAST_CUDA_OUT");
    if (!dir || !*dir) dir = ".";
    int pid = (int)getpid();
    snprintf(out_final, sizeof out_final, "%s/cupti.%d.bin", dir, pid);
    snprintf(names_final, sizeof names_final, "%s/kernels.%d.tsv", dir, pid);
    out = pc_out_ftemp(out_final, out_tmp, sizeof out_tmp);
    names = pc_out_ftemp(names_final, names_tmp, sizeof names_tmp);
    if (!out || !names) {
        fprintf(stderr, "pagecast-cupti: cannot write beside %s\n", out_final);
        if (out) pc_out_commit(fclose(out) && 0, out_tmp, out_final);
        if (names) pc_out_commit(fclose(names) && 0, names_tmp, names_final);
        out = names = NULL;
        return -1;
    }
    setvbuf(out, NULL, _IOFBF, 1 << 20);
    uint64_t ts = 0;
    cuptiGetTimestamp(&ts);
    struct pc_rec h = {.type = PC_REC_HEADER,
                       .start = ts,
                       .end = (uint64_t)clock_ns(CLOCK_MONOTONIC),
                       .address = (uint64_t)clock_ns(CLOCK_REALTIME),
                       .value = PC_CUPTI_FORMAT_VERSION,
                       .src = (uint32_t)pid,
                       .dst = PC_CUPTI_MAGIC};
    emit(&h);
    return 0;
}

__attribute__((visibility("default"))) int InitializeInjection(void) {
    static int done;
    if (done) return 1;
    done = 1;
    if (open_outputs() != 0) return 0;
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
        report("registering activity buffers", r);
        return 0;
    }
    enable_um_counters();
    if ((r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) != CUPTI_SUCCESS)
        report("enabling kernel records", r);
    if ((r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2)) != CUPTI_SUCCESS)
        report("enabling allocation records", r);
    atexit(finish);
    return 1;
}
