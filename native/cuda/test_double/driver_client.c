/* driver_client — a test program for the interposer, run against the driver TEST DOUBLE.
 *
 * It finds the driver the way statically linked cudart does (dlopen + dlsym of
 * cuGetProcAddress, then cuGetProcAddress for everything else), or by plain dlsym, and
 * runs the operations named on its command line, printing one line per result:
 *   resolve dlsym|gpa1|gpa2|gpa2_pt   resolve every entry point; print which library each is in
 *   managed SIZE | device SIZE        allocate; prints "alloc IDX 0xPTR SIZE"
 *   free IDX
 *   htod IDX OFF N | dtoh IDX OFF N | htod_async IDX OFF N | dtoh_async IDX OFF N
 *   dtod IDX OFF IDX2 OFF2 N | memcpy IDX OFF IDX2 OFF2 N | memcpy_async IDX OFF IDX2 OFF2 N
 *   memcpy_h2d IDX OFF N               generic cuMemcpy from a host buffer
 *   launch | launch_ex | launches N     cuLaunchKernel, cuLaunchKernelEx, N x cuLaunchKernel
 *   alloc_async SIZE | free_async IDX  stream-ordered allocation (prints "alloc IDX 0xPTR SIZE")
 *   pf1 IDX OFF N DEV | pf2 IDX OFF N DEV   cuMemPrefetchAsync v8000 / v12020 ABI
 *   translate IDX OFF                  ask the interposer (pagecast_cuda_translate)
 *   threads T K                        T threads x K managed allocations, copies, launches, frees
 *   fork_launch                        fork; the child launches once and exits; the parent waits
 *   sleep MS
 *   wait_stdin                         print "waiting", then block until a line arrives on stdin
 * Environment: PAGECAST_CUDA_DRIVER = path of the driver library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#undef cuGetProcAddress
#undef cuMemPrefetchAsync

typedef CUresult (*gpa1_t)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa2_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static struct {
    CUresult (*managed)(CUdeviceptr *, size_t, unsigned int);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free)(CUdeviceptr);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **);
    CUresult (*htod)(CUdeviceptr, const void *, size_t);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);
    CUresult (*dtod)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*memcpy_)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*htod_async)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*dtoh_async)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*pf1)(CUdeviceptr, size_t, CUdevice, CUstream);
    CUresult (*pf2)(CUdeviceptr, size_t, CUmemLocation, unsigned int, CUstream);
    CUresult (*launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
    CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
    CUresult (*free_async)(CUdeviceptr, CUstream);
} api;

struct named {
    const char *label, *export_name, *base;
    int version;
    void **slot;
};

static struct named entries[] = {
    {"managed", "cuMemAllocManaged", "cuMemAllocManaged", 13000, (void **)&api.managed},
    {"alloc", "cuMemAlloc_v2", "cuMemAlloc", 13000, (void **)&api.alloc},
    {"free", "cuMemFree_v2", "cuMemFree", 13000, (void **)&api.free},
    {"launch", "cuLaunchKernel", "cuLaunchKernel", 13000, (void **)&api.launch},
    {"htod", "cuMemcpyHtoD_v2", "cuMemcpyHtoD", 13000, (void **)&api.htod},
    {"dtoh", "cuMemcpyDtoH_v2", "cuMemcpyDtoH", 13000, (void **)&api.dtoh},
    {"dtod", "cuMemcpyDtoD_v2", "cuMemcpyDtoD", 13000, (void **)&api.dtod},
    {"memcpy", "cuMemcpy", "cuMemcpy", 13000, (void **)&api.memcpy_},
    {"htod_async", "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync", 13000, (void **)&api.htod_async},
    {"dtoh_async", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync", 13000, (void **)&api.dtoh_async},
    {"memcpy_async", "cuMemcpyAsync", "cuMemcpyAsync", 13000, (void **)&api.memcpy_async},
    /* Same base name, two ABIs: the version picks which one the caller gets. */
    {"pf1", "cuMemPrefetchAsync", "cuMemPrefetchAsync", 11000, (void **)&api.pf1},
    {"pf2", "cuMemPrefetchAsync_v2", "cuMemPrefetchAsync", 12020, (void **)&api.pf2},
    {"launch_ex", "cuLaunchKernelEx", "cuLaunchKernelEx", 13000, (void **)&api.launch_ex},
    {"alloc_async", "cuMemAllocAsync", "cuMemAllocAsync", 13000, (void **)&api.alloc_async},
    {"free_async", "cuMemFreeAsync", "cuMemFreeAsync", 13000, (void **)&api.free_async},
};
#define N_ENTRIES (sizeof entries / sizeof entries[0])

static CUdeviceptr ptrs[4096];
static size_t sizes[4096];
static int n_ptrs;

static void resolve(void *h, const char *mode) {
    gpa1_t g1 = NULL;
    gpa2_t g2 = NULL;
    cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT;
    if (strcmp(mode, "gpa1") == 0) g1 = (gpa1_t)dlsym(h, "cuGetProcAddress");
    if (strncmp(mode, "gpa2", 4) == 0) g2 = (gpa2_t)dlsym(h, "cuGetProcAddress_v2");
    if (strcmp(mode, "gpa2_pt") == 0) flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    for (size_t i = 0; i < N_ENTRIES; i++) {
        void *p = NULL;
        CUresult r = CUDA_SUCCESS;
        CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
        if (g1)
            r = g1(entries[i].base, &p, entries[i].version, flags);
        else if (g2)
            r = g2(entries[i].base, &p, entries[i].version, flags, &st);
        else
            p = dlsym(h, entries[i].export_name);
        *entries[i].slot = p;
        Dl_info info;
        const char *lib = p && dladdr(p, &info) && info.dli_fname ? info.dli_fname : "?";
        printf("resolved %s %s result=%d status=%d\n", entries[i].label, lib, (int)r, (int)st);
    }
}

static CUdeviceptr at(int idx, size_t off) {
    return ptrs[idx] + off;
}

static void *worker(void *arg) {
    int k = *(int *)arg;
    char host[8192];
    memset(host, 7, sizeof host);
    for (int i = 0; i < k; i++) {
        CUdeviceptr p;
        if (api.managed(&p, 8192, 1) != CUDA_SUCCESS) continue;
        api.htod(p, host, sizeof host);
        api.launch(NULL, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
        api.dtoh(host, p, sizeof host);
        if (i % 2 == 0) api.free(p);
    }
    return NULL;
}

/* n launches, timed: the interposer's cost per call */
static CUresult timed_launches(unsigned long long n) {
    CUresult r = CUDA_SUCCESS;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (unsigned long long k = 0; k < n && r == CUDA_SUCCESS; k++)
        r = api.launch(NULL, 4, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("launches %llu ns_per_call %.1f\n", n,
           ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)(n ? n : 1));
    return r;
}

/* t threads (at most 64) running ``worker`` with k each, joined */
static void run_threads(int t, int k) {
    pthread_t th[64];
    if (t > 64) t = 64;
    for (int j = 0; j < t; j++) pthread_create(&th[j], NULL, worker, &k);
    for (int j = 0; j < t; j++) pthread_join(th[j], NULL);
}

/* a launch from a forked child: the interposer must work after fork */
static CUresult launch_in_child(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        api.launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

int main(int argc, char **argv) {
    const char *path = getenv("PAGECAST_CUDA_DRIVER");
    void *h = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "driver_client: %s\n", dlerror());
        return 3;
    }
    static char host[1 << 22];
    for (size_t i = 0; i < sizeof host; i++) host[i] = (char)i;
    int (*translate)(uint64_t, int64_t *, uint64_t *) =
        (int (*)(uint64_t, int64_t *, uint64_t *))dlsym(RTLD_DEFAULT, "pagecast_cuda_translate");
    for (int i = 1; i < argc; i++) {
        const char *op = argv[i];
#define ARG(k) strtoull(argv[i + (k)], NULL, 0)
#define NEED(n)                                                                                                        \
    if (i + (n) >= argc) {                                                                                             \
        fprintf(stderr, "driver_client: %s needs %d arguments\n", op, n);                                              \
        return 2;                                                                                                      \
    }
        CUresult r = CUDA_SUCCESS;
        if (strcmp(op, "resolve") == 0) {
            NEED(1);
            resolve(h, argv[i + 1]);
            i += 1;
            continue;
        } else if (strcmp(op, "managed") == 0 || strcmp(op, "device") == 0 || strcmp(op, "alloc_async") == 0) {
            NEED(1);
            size_t size = ARG(1);
            CUdeviceptr p = 0;
            r = op[0] == 'm'   ? api.managed(&p, size, 1)
                : op[0] == 'd' ? api.alloc(&p, size)
                               : api.alloc_async(&p, size, NULL);
            if (r == CUDA_SUCCESS) {
                ptrs[n_ptrs] = p;
                sizes[n_ptrs] = size;
                printf("alloc %d 0x%llx %zu\n", n_ptrs, (unsigned long long)p, size);
                fflush(stdout);
                n_ptrs++;
            }
            i += 1;
        } else if (strcmp(op, "free") == 0 || strcmp(op, "free_async") == 0) {
            NEED(1);
            r = op[4] ? api.free_async(ptrs[ARG(1)], NULL) : api.free(ptrs[ARG(1)]);
            i += 1;
        } else if (strcmp(op, "htod") == 0 || strcmp(op, "htod_async") == 0) {
            NEED(3);
            r = op[4] ? api.htod_async(at(ARG(1), ARG(2)), host, ARG(3), NULL)
                      : api.htod(at(ARG(1), ARG(2)), host, ARG(3));
            i += 3;
        } else if (strcmp(op, "dtoh") == 0 || strcmp(op, "dtoh_async") == 0) {
            NEED(3);
            r = op[4] ? api.dtoh_async(host, at(ARG(1), ARG(2)), ARG(3), NULL)
                      : api.dtoh(host, at(ARG(1), ARG(2)), ARG(3));
            i += 3;
        } else if (strcmp(op, "dtod") == 0 || strcmp(op, "memcpy") == 0 || strcmp(op, "memcpy_async") == 0) {
            NEED(5);
            CUdeviceptr d = at(ARG(1), ARG(2)), s = at(ARG(3), ARG(4));
            size_t n = ARG(5);
            r = op[0] == 'd' ? api.dtod(d, s, n) : (op[6] ? api.memcpy_async(d, s, n, NULL) : api.memcpy_(d, s, n));
            i += 5;
        } else if (strcmp(op, "memcpy_h2d") == 0) {
            NEED(3);
            r = api.memcpy_(at(ARG(1), ARG(2)), (CUdeviceptr)(uintptr_t)host, ARG(3));
            i += 3;
        } else if (strcmp(op, "launch") == 0) {
            r = api.launch(NULL, 4, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
        } else if (strcmp(op, "launch_ex") == 0) {
            CUlaunchConfig cfg = {
                .gridDimX = 8, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128, .blockDimY = 1, .blockDimZ = 1};
            r = api.launch_ex(&cfg, NULL, NULL, NULL);
        } else if (strcmp(op, "launches") == 0) {
            NEED(1);
            r = timed_launches(ARG(1));
            i += 1;
        } else if (strcmp(op, "pf1") == 0 || strcmp(op, "pf2") == 0) {
            NEED(4);
            int dev = (int)strtol(argv[i + 4], NULL, 0);
            if (op[2] == '1') {
                r = api.pf1(at(ARG(1), ARG(2)), ARG(3), dev, NULL);
            } else {
                CUmemLocation loc = {.type = dev < 0 ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE,
                                     .id = dev < 0 ? 0 : dev};
                r = api.pf2(at(ARG(1), ARG(2)), ARG(3), loc, 0, NULL);
            }
            i += 4;
        } else if (strcmp(op, "translate") == 0) {
            NEED(2);
            int64_t id = -1;
            uint64_t off = 0;
            uint64_t addr = at(ARG(1), ARG(2));
            int ok = translate ? translate(addr, &id, &off) : -1;
            printf("translate 0x%llx %d %lld %llu\n", (unsigned long long)addr, ok, (long long)id,
                   (unsigned long long)off);
            i += 2;
            continue;
        } else if (strcmp(op, "threads") == 0) {
            NEED(2);
            run_threads((int)ARG(1), (int)ARG(2));
            i += 2;
        } else if (strcmp(op, "fork_launch") == 0) {
            r = launch_in_child();
        } else if (strcmp(op, "wait_stdin") == 0) {
            char buf[64];
            printf("waiting\n");
            fflush(stdout);
            if (!fgets(buf, sizeof buf, stdin)) return 4;
            continue;
        } else if (strcmp(op, "sleep") == 0) {
            NEED(1);
            struct timespec ts = {(time_t)(ARG(1) / 1000), (long)(ARG(1) % 1000) * 1000000L};
            nanosleep(&ts, NULL);
            i += 1;
            continue;
        } else {
            fprintf(stderr, "driver_client: unknown operation %s\n", op);
            return 2;
        }
        printf("result %s %d\n", op, (int)r);
    }
    fflush(stdout);
    return 0;
}
