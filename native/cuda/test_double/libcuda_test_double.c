/* libcuda_test_double.so — a TEST DOUBLE of the CUDA driver (there is no GPU here).
 *
 * It implements the entry points pagecast's interposer hooks, on host memory: "device"
 * and "managed" allocations are page-aligned malloc'd blocks, copies are memcpy, kernel
 * launches and streams do nothing. Every call is appended to $PAGECAST_TEST_DOUBLE_LOG
 * as one line "<export name> key=value ...". Like the real driver it rejects a prefetch
 * or copy whose range is not inside one live allocation (CUDA_ERROR_INVALID_VALUE, logged
 * with result=1), and resolves cuGetProcAddress queries by (name, version, per-thread
 * flag) to the newest ABI not newer than the requested version.
 *
 * Build with -Wl,-Bsymbolic so that pointers it hands out are its own functions even
 * when an LD_PRELOADed interposer exports the same names. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "vformat.h"

#undef cuGetProcAddress
#undef cuMemPrefetchAsync

#define EXPORT __attribute__((visibility("default")))

struct block {
    uint64_t base, size;
    int managed, live;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct block blocks[4096];
static int n_blocks;
static int next_stream = 1;

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
    const char *path = getenv("PAGECAST_TEST_DOUBLE_LOG");
    if (!path) return;
    char line[1024];
    PC_VFORMAT(line, fmt);
    pthread_mutex_lock(&lock);
    FILE *f = fopen(path, "a");
    if (f) {
        fprintf(f, "%s\n", line);
        fclose(f);
    }
    pthread_mutex_unlock(&lock);
}

/* 1 if [p, p+n) lies in one live allocation (managed only if want_managed). */
static int valid_range(uint64_t p, uint64_t n, int want_managed) {
    int ok = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_blocks; i++) {
        const struct block *b = &blocks[i];
        if (b->live && p >= b->base && n <= b->size && p - b->base <= b->size - n && (!want_managed || b->managed)) {
            ok = 1;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

static CUresult do_alloc(CUdeviceptr *dptr, size_t size, int managed) {
    if (!dptr || !size) return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    /* 2 MiB alignment, like the driver's VA blocks, so tests see realistic bases. */
    if (posix_memalign(&p, 2u << 20, (size + 4095) & ~(size_t)4095) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(p, 0, size);
    pthread_mutex_lock(&lock);
    if (n_blocks == (int)(sizeof blocks / sizeof blocks[0])) {
        pthread_mutex_unlock(&lock);
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    blocks[n_blocks++] = (struct block){(uint64_t)(uintptr_t)p, size, managed, 1};
    pthread_mutex_unlock(&lock);
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuInit(unsigned int flags) {
    logf_("cuInit flags=%u", flags);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = CUDA_VERSION;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags) {
    CUresult r = do_alloc(dptr, size, 1);
    logf_("cuMemAllocManaged size=%zu flags=%u ptr=0x%llx result=%d", size, flags,
          r == CUDA_SUCCESS ? (unsigned long long)*dptr : 0ULL, (int)r);
    return r;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    CUresult r = do_alloc(dptr, size, 0);
    logf_("cuMemAlloc_v2 size=%zu ptr=0x%llx result=%d", size, r == CUDA_SUCCESS ? (unsigned long long)*dptr : 0ULL,
          (int)r);
    return r;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    void *to_free = NULL;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_blocks; i++) {
        if (blocks[i].live && blocks[i].base == (uint64_t)ptr) {
            blocks[i].live = 0;
            to_free = (void *)(uintptr_t)ptr;
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    /* Not returned to malloc: a later allocation must not reuse the address while a
     * test still inspects it. */
    (void)to_free;
    logf_("cuMemFree_v2 ptr=0x%llx result=%d", (unsigned long long)ptr, (int)r);
    return r;
}

static CUresult launch(const char *name, CUfunction f, unsigned gx, unsigned bx, CUstream s) {
    logf_("%s func=%p grid=%u block=%u stream=%p result=0", name, (void *)f, gx, bx, (void *)s);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
    (void)gy, (void)gz, (void)by, (void)bz, (void)shmem, (void)params, (void)extra;
    return launch("cuLaunchKernel", f, gx, bx, s);
}
EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
    (void)gy, (void)gz, (void)by, (void)bz, (void)shmem, (void)params, (void)extra;
    return launch("cuLaunchKernel_ptsz", f, gx, bx, s);
}

static CUresult launch_ex(const char *name, const CUlaunchConfig *cfg, CUfunction f) {
    logf_("%s func=%p grid=%u block=%u stream=%p result=0", name, (void *)f, cfg ? cfg->gridDimX : 0,
          cfg ? cfg->blockDimX : 0, cfg ? (void *)cfg->hStream : NULL);
    return cfg ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    (void)params, (void)extra;
    return launch_ex("cuLaunchKernelEx", cfg, f);
}
EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    (void)params, (void)extra;
    return launch_ex("cuLaunchKernelEx_ptsz", cfg, f);
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream st) {
    CUresult r = do_alloc(dptr, size, 0);
    logf_("cuMemAllocAsync size=%zu ptr=0x%llx stream=%p result=%d", size,
          r == CUDA_SUCCESS ? (unsigned long long)*dptr : 0ULL, (void *)st, (int)r);
    return r;
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream st) {
    return cuMemAllocAsync(dptr, size, st);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream st) {
    (void)st;
    return cuMemFree_v2(ptr);
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream st) {
    return cuMemFreeAsync(ptr, st);
}

static CUresult copy(const char *name, uint64_t dst, uint64_t src, size_t n, int dst_dev, int src_dev) {
    CUresult r = CUDA_SUCCESS;
    if ((dst_dev && !valid_range(dst, n, 0)) || (src_dev && !valid_range(src, n, 0)))
        r = CUDA_ERROR_INVALID_VALUE;
    else
        memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    logf_("%s dst=0x%llx src=0x%llx bytes=%zu result=%d", name, (unsigned long long)dst, (unsigned long long)src, n,
          (int)r);
    return r;
}

#define U(p) ((uint64_t)(uintptr_t)(p))
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) {
    return copy("cuMemcpyHtoD_v2", d, U(s), n, 1, 0);
}
EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n) {
    return copy("cuMemcpyHtoD_v2_ptds", d, U(s), n, 1, 0);
}
EXPORT CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) {
    return copy("cuMemcpyDtoH_v2", U(d), s, n, 0, 1);
}
EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n) {
    return copy("cuMemcpyDtoH_v2_ptds", U(d), s, n, 0, 1);
}
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) {
    return copy("cuMemcpyDtoD_v2", d, s, n, 1, 1);
}
EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) {
    return copy("cuMemcpyDtoD_v2_ptds", d, s, n, 1, 1);
}
EXPORT CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) {
    return copy("cuMemcpy", d, s, n, 0, 0);
}
EXPORT CUresult cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) {
    return copy("cuMemcpy_ptds", d, s, n, 0, 0);
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) {
    (void)st;
    return copy("cuMemcpyHtoDAsync_v2", d, U(s), n, 1, 0);
}
EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream st) {
    (void)st;
    return copy("cuMemcpyHtoDAsync_v2_ptsz", d, U(s), n, 1, 0);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) {
    (void)st;
    return copy("cuMemcpyDtoHAsync_v2", U(d), s, n, 0, 1);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream st) {
    (void)st;
    return copy("cuMemcpyDtoHAsync_v2_ptsz", U(d), s, n, 0, 1);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    (void)st;
    return copy("cuMemcpyDtoDAsync_v2", d, s, n, 1, 1);
}
EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    (void)st;
    return copy("cuMemcpyDtoDAsync_v2_ptsz", d, s, n, 1, 1);
}
EXPORT CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    (void)st;
    return copy("cuMemcpyAsync", d, s, n, 0, 0);
}
EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    (void)st;
    return copy("cuMemcpyAsync_ptsz", d, s, n, 0, 0);
}

static CUresult prefetch(const char *name, CUdeviceptr p, size_t n, int loc_type, int loc_id, unsigned flags,
                         CUstream st) {
    CUresult r = valid_range(p, n, 1) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    logf_("%s ptr=0x%llx bytes=%zu loc_type=%d loc_id=%d flags=%u stream=%p result=%d", name, (unsigned long long)p, n,
          loc_type, loc_id, flags, (void *)st, (int)r);
    return r;
}
/* v8000 ABI: a device ordinal, CU_DEVICE_CPU (-1) for the host. */
EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dev, CUstream st) {
    return prefetch("cuMemPrefetchAsync", p, n,
                    dev == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE, dev, 0, st);
}
EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice dev, CUstream st) {
    return prefetch("cuMemPrefetchAsync_ptsz", p, n,
                    dev == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE, dev, 0, st);
}
/* v12020 ABI: a CUmemLocation and flags. */
EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream st) {
    return prefetch("cuMemPrefetchAsync_v2", p, n, loc.type, loc.id, flags, st);
}
EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags,
                                           CUstream st) {
    return prefetch("cuMemPrefetchAsync_v2_ptsz", p, n, loc.type, loc.id, flags, st);
}

EXPORT CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    *s = (CUstream)(uintptr_t)(0x5000 + next_stream++);
    pthread_mutex_unlock(&lock);
    logf_("cuStreamCreate flags=%u stream=%p result=0", flags, (void *)*s);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamSynchronize(CUstream s) {
    logf_("cuStreamSynchronize stream=%p result=0", (void *)s);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
    logf_("cuStreamDestroy_v2 stream=%p result=0", (void *)s);
    return CUDA_SUCCESS;
}

struct entry {
    const char *base;
    int min_version, per_thread;
    void *fn;
};

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status);

static const struct entry table[] = {
    {"cuInit", 2000, 0, (void *)cuInit},
    {"cuDriverGetVersion", 2020, 0, (void *)cuDriverGetVersion},
    {"cuMemAllocManaged", 6000, 0, (void *)cuMemAllocManaged},
    {"cuMemAlloc", 3020, 0, (void *)cuMemAlloc_v2},
    {"cuMemFree", 3020, 0, (void *)cuMemFree_v2},
    {"cuLaunchKernel", 4000, 0, (void *)cuLaunchKernel},
    {"cuLaunchKernel", 7000, 1, (void *)cuLaunchKernel_ptsz},
    {"cuMemcpyHtoD", 3020, 0, (void *)cuMemcpyHtoD_v2},
    {"cuMemcpyHtoD", 7000, 1, (void *)cuMemcpyHtoD_v2_ptds},
    {"cuMemcpyDtoH", 3020, 0, (void *)cuMemcpyDtoH_v2},
    {"cuMemcpyDtoH", 7000, 1, (void *)cuMemcpyDtoH_v2_ptds},
    {"cuMemcpyDtoD", 3020, 0, (void *)cuMemcpyDtoD_v2},
    {"cuMemcpyDtoD", 7000, 1, (void *)cuMemcpyDtoD_v2_ptds},
    {"cuMemcpy", 4000, 0, (void *)cuMemcpy},
    {"cuMemcpy", 7000, 1, (void *)cuMemcpy_ptds},
    {"cuMemcpyHtoDAsync", 3020, 0, (void *)cuMemcpyHtoDAsync_v2},
    {"cuMemcpyHtoDAsync", 7000, 1, (void *)cuMemcpyHtoDAsync_v2_ptsz},
    {"cuMemcpyDtoHAsync", 3020, 0, (void *)cuMemcpyDtoHAsync_v2},
    {"cuMemcpyDtoHAsync", 7000, 1, (void *)cuMemcpyDtoHAsync_v2_ptsz},
    {"cuMemcpyDtoDAsync", 3020, 0, (void *)cuMemcpyDtoDAsync_v2},
    {"cuMemcpyDtoDAsync", 7000, 1, (void *)cuMemcpyDtoDAsync_v2_ptsz},
    {"cuMemcpyAsync", 4000, 0, (void *)cuMemcpyAsync},
    {"cuMemcpyAsync", 7000, 1, (void *)cuMemcpyAsync_ptsz},
    {"cuMemPrefetchAsync", 8000, 0, (void *)cuMemPrefetchAsync},
    {"cuMemPrefetchAsync", 8000, 1, (void *)cuMemPrefetchAsync_ptsz},
    {"cuMemPrefetchAsync", 12020, 0, (void *)cuMemPrefetchAsync_v2},
    {"cuMemPrefetchAsync", 12020, 1, (void *)cuMemPrefetchAsync_v2_ptsz},
    {"cuLaunchKernelEx", 11060, 0, (void *)cuLaunchKernelEx},
    {"cuLaunchKernelEx", 11060, 1, (void *)cuLaunchKernelEx_ptsz},
    {"cuMemAllocAsync", 11020, 0, (void *)cuMemAllocAsync},
    {"cuMemAllocAsync", 11020, 1, (void *)cuMemAllocAsync_ptsz},
    {"cuMemFreeAsync", 11020, 0, (void *)cuMemFreeAsync},
    {"cuMemFreeAsync", 11020, 1, (void *)cuMemFreeAsync_ptsz},
    {"cuStreamCreate", 2000, 0, (void *)cuStreamCreate},
    {"cuStreamSynchronize", 2000, 0, (void *)cuStreamSynchronize},
    {"cuStreamDestroy", 4000, 0, (void *)cuStreamDestroy_v2},
    {"cuGetProcAddress", 11030, 0, (void *)cuGetProcAddress},
    {"cuGetProcAddress", 12000, 0, (void *)cuGetProcAddress_v2},
};

static CUdriverProcAddressQueryResult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    int pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, any = 0, best = -1;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].base, symbol) != 0) continue;
        any = 1;
        int want = pt;
        int has_pt = 0;
        for (size_t j = 0; j < sizeof table / sizeof table[0]; j++)
            if (table[j].per_thread && strcmp(table[j].base, symbol) == 0) has_pt = 1;
        if (!has_pt) want = 0;
        if (table[i].per_thread != want || table[i].min_version > version) continue;
        if (best < 0 || table[i].min_version > table[best].min_version) best = (int)i;
    }
    *pfn = best >= 0 ? table[best].fn : NULL;
    return best >= 0 ? CU_GET_PROC_ADDRESS_SUCCESS
                     : (any ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    CUdriverProcAddressQueryResult s = lookup(symbol, pfn, version, flags);
    logf_("cuGetProcAddress symbol=%s version=%d flags=%llu status=%d", symbol, version, (unsigned long long)flags,
          (int)s);
    return s == CU_GET_PROC_ADDRESS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    CUdriverProcAddressQueryResult s = lookup(symbol, pfn, version, flags);
    if (status) *status = s;
    logf_("cuGetProcAddress_v2 symbol=%s version=%d flags=%llu status=%d", symbol, version, (unsigned long long)flags,
          (int)s);
    return s == CU_GET_PROC_ADDRESS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
