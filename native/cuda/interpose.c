/* libpagecast_cuda.so: CUDA driver-API interposer (LD_PRELOAD).
 *
 * nvcc links cudart statically by default, and cudart does not call the driver through
 * the dynamic linker: it dlopens libcuda.so.1, looks up cuGetProcAddress(_v2) with
 * dlsym and fetches every other entry point through it. So exporting cu* symbols alone
 * catches only programs linked against libcuda directly; we also hook dlsym and both
 * cuGetProcAddress ABIs and hand out our wrappers. Which wrapper is returned depends on
 * the ABI the caller asked for (the cudaVersion argument and the per-thread-stream flag):
 * cuMemPrefetchAsync has a v8000 ABI (CUdevice) and a v12020 ABI (CUmemLocation + flags)
 * with the same base name, and returning the wrong one corrupts the call.
 *
 * The real entry point behind each wrapper is whatever the real driver returned for the
 * same query, so a wrapper always forwards to the function the caller would have got. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "pc_internal.h"

/* cuda.h renames these to their newest ABI; we define every ABI explicitly. */
#undef cuGetProcAddress
#undef cuMemPrefetchAsync

#define MISSING CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND

enum slot {
    S_ALLOC_MANAGED,
    S_ALLOC,
    S_FREE,
    S_LAUNCH,
    S_LAUNCH_PTSZ,
    S_HTOD,
    S_HTOD_PTDS,
    S_DTOH,
    S_DTOH_PTDS,
    S_DTOD,
    S_DTOD_PTDS,
    S_MEMCPY,
    S_MEMCPY_PTDS,
    S_HTOD_ASYNC,
    S_HTOD_ASYNC_PTSZ,
    S_DTOH_ASYNC,
    S_DTOH_ASYNC_PTSZ,
    S_DTOD_ASYNC,
    S_DTOD_ASYNC_PTSZ,
    S_MEMCPY_ASYNC,
    S_MEMCPY_ASYNC_PTSZ,
    S_PREFETCH,
    S_PREFETCH_PTSZ,
    S_PREFETCH_V2,
    S_PREFETCH_V2_PTSZ,
    S_GPA,
    S_GPA_V2,
    S_LAUNCH_EX,
    S_LAUNCH_EX_PTSZ,
    S_ALLOC_ASYNC,
    S_ALLOC_ASYNC_PTSZ,
    S_FREE_ASYNC,
    S_FREE_ASYNC_PTSZ,
    S_COUNT
};

struct hook {
    const char *export_name; /* the driver's exported symbol for this ABI */
    const char *base;        /* the name cuGetProcAddress is asked for */
    int min_version;         /* first cudaVersion that gets this ABI */
    int per_thread;          /* _ptds/_ptsz variant (per-thread default stream) */
};

static const struct hook hooks[S_COUNT] = {
    [S_ALLOC_MANAGED] = {"cuMemAllocManaged", "cuMemAllocManaged", 6000, 0},
    [S_ALLOC] = {"cuMemAlloc_v2", "cuMemAlloc", 3020, 0},
    [S_FREE] = {"cuMemFree_v2", "cuMemFree", 3020, 0},
    [S_LAUNCH] = {"cuLaunchKernel", "cuLaunchKernel", 4000, 0},
    [S_LAUNCH_PTSZ] = {"cuLaunchKernel_ptsz", "cuLaunchKernel", 7000, 1},
    [S_HTOD] = {"cuMemcpyHtoD_v2", "cuMemcpyHtoD", 3020, 0},
    [S_HTOD_PTDS] = {"cuMemcpyHtoD_v2_ptds", "cuMemcpyHtoD", 7000, 1},
    [S_DTOH] = {"cuMemcpyDtoH_v2", "cuMemcpyDtoH", 3020, 0},
    [S_DTOH_PTDS] = {"cuMemcpyDtoH_v2_ptds", "cuMemcpyDtoH", 7000, 1},
    [S_DTOD] = {"cuMemcpyDtoD_v2", "cuMemcpyDtoD", 3020, 0},
    [S_DTOD_PTDS] = {"cuMemcpyDtoD_v2_ptds", "cuMemcpyDtoD", 7000, 1},
    [S_MEMCPY] = {"cuMemcpy", "cuMemcpy", 4000, 0},
    [S_MEMCPY_PTDS] = {"cuMemcpy_ptds", "cuMemcpy", 7000, 1},
    [S_HTOD_ASYNC] = {"cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync", 3020, 0},
    [S_HTOD_ASYNC_PTSZ] = {"cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpyHtoDAsync", 7000, 1},
    [S_DTOH_ASYNC] = {"cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync", 3020, 0},
    [S_DTOH_ASYNC_PTSZ] = {"cuMemcpyDtoHAsync_v2_ptsz", "cuMemcpyDtoHAsync", 7000, 1},
    [S_DTOD_ASYNC] = {"cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync", 3020, 0},
    [S_DTOD_ASYNC_PTSZ] = {"cuMemcpyDtoDAsync_v2_ptsz", "cuMemcpyDtoDAsync", 7000, 1},
    [S_MEMCPY_ASYNC] = {"cuMemcpyAsync", "cuMemcpyAsync", 4000, 0},
    [S_MEMCPY_ASYNC_PTSZ] = {"cuMemcpyAsync_ptsz", "cuMemcpyAsync", 7000, 1},
    [S_PREFETCH] = {"cuMemPrefetchAsync", "cuMemPrefetchAsync", 8000, 0},
    [S_PREFETCH_PTSZ] = {"cuMemPrefetchAsync_ptsz", "cuMemPrefetchAsync", 8000, 1},
    [S_PREFETCH_V2] = {"cuMemPrefetchAsync_v2", "cuMemPrefetchAsync", 12020, 0},
    [S_PREFETCH_V2_PTSZ] = {"cuMemPrefetchAsync_v2_ptsz", "cuMemPrefetchAsync", 12020, 1},
    [S_GPA] = {"cuGetProcAddress", "cuGetProcAddress", 11030, 0},
    [S_GPA_V2] = {"cuGetProcAddress_v2", "cuGetProcAddress", 12000, 0},
    [S_LAUNCH_EX] = {"cuLaunchKernelEx", "cuLaunchKernelEx", 11060, 0},
    [S_LAUNCH_EX_PTSZ] = {"cuLaunchKernelEx_ptsz", "cuLaunchKernelEx", 11060, 1},
    [S_ALLOC_ASYNC] = {"cuMemAllocAsync", "cuMemAllocAsync", 11020, 0},
    [S_ALLOC_ASYNC_PTSZ] = {"cuMemAllocAsync_ptsz", "cuMemAllocAsync", 11020, 1},
    [S_FREE_ASYNC] = {"cuMemFreeAsync", "cuMemFreeAsync", 11020, 0},
    [S_FREE_ASYNC_PTSZ] = {"cuMemFreeAsync_ptsz", "cuMemFreeAsync", 11020, 1},
};

/* Defined after the wrappers; static so that dlsym calls made before our constructor
 * (from other libraries' constructors) already see it. */
static void *const wrappers[S_COUNT];
static void *real_fn[S_COUNT];

/* ---- the real dlsym and the real driver ------------------------------------------------ */
typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym_ptr;

static dlsym_fn real_dlsym(void) {
    dlsym_fn f = __atomic_load_n(&real_dlsym_ptr, __ATOMIC_ACQUIRE);
    if (!f) {
        /* dlvsym is not hooked, so this cannot recurse into our dlsym. */
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!f) f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        __atomic_store_n(&real_dlsym_ptr, f, __ATOMIC_RELEASE);
    }
    return f;
}

static void *driver_handle(void) {
    static void *handle;
    void *h = __atomic_load_n(&handle, __ATOMIC_ACQUIRE);
    if (h) return h;
    const char *path = getenv("PAGECAST_CUDA_DRIVER");
    if (!path || !*path) path = "libcuda.so.1";
    h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen(path, RTLD_NOW);
    if (h) __atomic_store_n(&handle, h, __ATOMIC_RELEASE);
    return h;
}

static int is_wrapper(const void *p) {
    for (int i = 0; i < S_COUNT; i++)
        if (wrappers[i] == p) return 1;
    return 0;
}

void *pc_real_sym(const char *name) {
    void *h = driver_handle();
    dlsym_fn f = real_dlsym();
    if (!f) return NULL;
    /* No driver under the expected name: a program linked to it under another name
     * still has it next in the global scope, after us. */
    void *p = f(h ? h : RTLD_NEXT, name);
    return is_wrapper(p) ? NULL : p;
}

static void *real(int s) {
    void *p = __atomic_load_n(&real_fn[s], __ATOMIC_ACQUIRE);
    if (!p) {
        p = pc_real_sym(hooks[s].export_name);
        if (p) __atomic_store_n(&real_fn[s], p, __ATOMIC_RELEASE);
    }
    return p;
}

static void set_real(int s, void *p) {
    if (p && !is_wrapper(p)) __atomic_store_n(&real_fn[s], p, __ATOMIC_RELEASE);
}

/* ---- wrappers ---------------------------------------------------------------------------- */
typedef CUresult (*alloc_managed_fn)(CUdeviceptr *, size_t, unsigned int);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t);
typedef CUresult (*dtoh_fn)(void *, CUdeviceptr, size_t);
typedef CUresult (*dtod_fn)(CUdeviceptr, CUdeviceptr, size_t);
typedef CUresult (*htod_async_fn)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*dtoh_async_fn)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*dtod_async_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef CUresult (*prefetch_v1_fn)(CUdeviceptr, size_t, CUdevice, CUstream);
typedef CUresult (*prefetch_v2_fn)(CUdeviceptr, size_t, CUmemLocation, unsigned int, CUstream);
typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);
typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

#define LOG(s, t0, bytes, dir, ptr, r)                                                                                 \
    pc_log_call((s), hooks[s].export_name, (t0), pc_now_ns() - (t0), (bytes), (dir), (ptr), (int)(r))

/* The pointer exists only after the call returns (AI4Mem's interposer read it before). */
static CUresult after_alloc(int s, int64_t t0, CUresult r, const CUdeviceptr *dptr, size_t size, int kind) {
    uint64_t p = 0;
    if (r == CUDA_SUCCESS && dptr) {
        p = (uint64_t)*dptr;
        pc_alloc_add(p, size, kind);
    }
    LOG(s, t0, size, PC_DIR_NONE, p, r);
    return r;
}

static CUresult after_free(int s, int64_t t0, CUresult r, CUdeviceptr ptr) {
    struct pc_alloc a;
    uint64_t bytes = pc_alloc_lookup((uint64_t)ptr, &a) ? a.size : 0;
    LOG(s, t0, bytes, PC_DIR_NONE, (uint64_t)ptr, r); /* logged while still in the table */
    if (r == CUDA_SUCCESS) pc_alloc_free((uint64_t)ptr);
    return r;
}

static CUresult do_alloc_managed(int s, CUdeviceptr *dptr, size_t size, unsigned int flags) {
    alloc_managed_fn f = (alloc_managed_fn)real(s);
    if (!f) return MISSING;
    int64_t t0 = pc_now_ns();
    CUresult r = f(dptr, size, flags);
    return after_alloc(s, t0, r, dptr, size, PC_ALLOC_MANAGED);
}

static CUresult do_alloc(int s, CUdeviceptr *dptr, size_t size) {
    alloc_fn f = (alloc_fn)real(s);
    if (!f) return MISSING;
    int64_t t0 = pc_now_ns();
    CUresult r = f(dptr, size);
    return after_alloc(s, t0, r, dptr, size, PC_ALLOC_DEVICE);
}

static CUresult do_free(int s, CUdeviceptr ptr) {
    free_fn f = (free_fn)real(s);
    if (!f) return MISSING;
    int64_t t0 = pc_now_ns();
    CUresult r = f(ptr);
    return after_free(s, t0, r, ptr);
}

static CUresult do_launch(int s, CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shmem, CUstream st, void **params, void **extra) {
    launch_fn f = (launch_fn)real(s);
    if (!f) return MISSING;
    pc_injector_on_launch();
    int64_t t0 = pc_now_ns();
    CUresult r = f(fn, gx, gy, gz, bx, by, bz, shmem, st, params, extra);
    LOG(s, t0, 0, PC_DIR_NONE, 0, r);
    return r;
}

static CUresult do_launch_ex(int s, const CUlaunchConfig *cfg, CUfunction fn, void **params, void **extra) {
    launch_ex_fn f = (launch_ex_fn)real(s);
    if (!f) return MISSING;
    pc_injector_on_launch();
    int64_t t0 = pc_now_ns();
    CUresult r = f(cfg, fn, params, extra);
    LOG(s, t0, 0, PC_DIR_NONE, 0, r);
    return r;
}

/* Stream-ordered allocations (cudaMallocAsync) are device memory from a pool; the
 * address is valid from the call on, so it enters the table like cuMemAlloc's. */
static CUresult do_alloc_async(int s, CUdeviceptr *dptr, size_t size, CUstream st) {
    alloc_async_fn f = (alloc_async_fn)real(s);
    if (!f) return MISSING;
    int64_t t0 = pc_now_ns();
    CUresult r = f(dptr, size, st);
    return after_alloc(s, t0, r, dptr, size, PC_ALLOC_DEVICE);
}

static CUresult do_free_async(int s, CUdeviceptr ptr, CUstream st) {
    free_async_fn f = (free_async_fn)real(s);
    if (!f) return MISSING;
    int64_t t0 = pc_now_ns();
    CUresult r = f(ptr, st);
    return after_free(s, t0, r, ptr);
}

/* Direction of a UVA copy: an address in the allocation table is device or managed. */
static int infer_dir(uint64_t dst, uint64_t src, uint64_t *ptr) {
    struct pc_alloc a;
    int d = pc_alloc_lookup(dst, &a), s = pc_alloc_lookup(src, &a);
    *ptr = d ? dst : (s ? src : dst);
    return s ? (d ? PC_DIR_DTOD : PC_DIR_DTOH) : (d ? PC_DIR_HTOD : PC_DIR_HTOH);
}

#define COPY_SYNC(NAME, SLOT, FT, DT, ST, CALLPTR, DIR)                                                                \
    PC_EXPORT CUresult NAME(DT dst, ST src, size_t n) {                                                                \
        FT f = (FT)real(SLOT);                                                                                         \
        if (!f) return MISSING;                                                                                        \
        int64_t t0 = pc_now_ns();                                                                                      \
        CUresult r = f(dst, src, n);                                                                                   \
        uint64_t ptr = (uint64_t)(CALLPTR);                                                                            \
        int dir = (DIR);                                                                                               \
        LOG(SLOT, t0, n, dir, ptr, r);                                                                                 \
        return r;                                                                                                      \
    }
#define COPY_ASYNC(NAME, SLOT, FT, DT, ST, CALLPTR, DIR)                                                               \
    PC_EXPORT CUresult NAME(DT dst, ST src, size_t n, CUstream stream) {                                               \
        FT f = (FT)real(SLOT);                                                                                         \
        if (!f) return MISSING;                                                                                        \
        int64_t t0 = pc_now_ns();                                                                                      \
        CUresult r = f(dst, src, n, stream);                                                                           \
        uint64_t ptr = (uint64_t)(CALLPTR);                                                                            \
        int dir = (DIR);                                                                                               \
        LOG(SLOT, t0, n, dir, ptr, r);                                                                                 \
        return r;                                                                                                      \
    }

COPY_SYNC(cuMemcpyHtoD_v2, S_HTOD, htod_fn, CUdeviceptr, const void *, dst, PC_DIR_HTOD)
COPY_SYNC(cuMemcpyHtoD_v2_ptds, S_HTOD_PTDS, htod_fn, CUdeviceptr, const void *, dst, PC_DIR_HTOD)
COPY_SYNC(cuMemcpyDtoH_v2, S_DTOH, dtoh_fn, void *, CUdeviceptr, src, PC_DIR_DTOH)
COPY_SYNC(cuMemcpyDtoH_v2_ptds, S_DTOH_PTDS, dtoh_fn, void *, CUdeviceptr, src, PC_DIR_DTOH)
COPY_SYNC(cuMemcpyDtoD_v2, S_DTOD, dtod_fn, CUdeviceptr, CUdeviceptr, dst, PC_DIR_DTOD)
COPY_SYNC(cuMemcpyDtoD_v2_ptds, S_DTOD_PTDS, dtod_fn, CUdeviceptr, CUdeviceptr, dst, PC_DIR_DTOD)
COPY_SYNC(cuMemcpy, S_MEMCPY, dtod_fn, CUdeviceptr, CUdeviceptr, 0, infer_dir(dst, src, &ptr))
COPY_SYNC(cuMemcpy_ptds, S_MEMCPY_PTDS, dtod_fn, CUdeviceptr, CUdeviceptr, 0, infer_dir(dst, src, &ptr))
COPY_ASYNC(cuMemcpyHtoDAsync_v2, S_HTOD_ASYNC, htod_async_fn, CUdeviceptr, const void *, dst, PC_DIR_HTOD)
COPY_ASYNC(cuMemcpyHtoDAsync_v2_ptsz, S_HTOD_ASYNC_PTSZ, htod_async_fn, CUdeviceptr, const void *, dst, PC_DIR_HTOD)
COPY_ASYNC(cuMemcpyDtoHAsync_v2, S_DTOH_ASYNC, dtoh_async_fn, void *, CUdeviceptr, src, PC_DIR_DTOH)
COPY_ASYNC(cuMemcpyDtoHAsync_v2_ptsz, S_DTOH_ASYNC_PTSZ, dtoh_async_fn, void *, CUdeviceptr, src, PC_DIR_DTOH)
COPY_ASYNC(cuMemcpyDtoDAsync_v2, S_DTOD_ASYNC, dtod_async_fn, CUdeviceptr, CUdeviceptr, dst, PC_DIR_DTOD)
COPY_ASYNC(cuMemcpyDtoDAsync_v2_ptsz, S_DTOD_ASYNC_PTSZ, dtod_async_fn, CUdeviceptr, CUdeviceptr, dst, PC_DIR_DTOD)
COPY_ASYNC(cuMemcpyAsync, S_MEMCPY_ASYNC, dtod_async_fn, CUdeviceptr, CUdeviceptr, 0, infer_dir(dst, src, &ptr))
COPY_ASYNC(cuMemcpyAsync_ptsz, S_MEMCPY_ASYNC_PTSZ, dtod_async_fn, CUdeviceptr, CUdeviceptr, 0,
           infer_dir(dst, src, &ptr))

PC_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags) {
    return do_alloc_managed(S_ALLOC_MANAGED, dptr, size, flags);
}
PC_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    return do_alloc(S_ALLOC, dptr, size);
}
PC_EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
    return do_free(S_FREE, ptr);
}

PC_EXPORT CUresult cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                  unsigned bz, unsigned shmem, CUstream st, void **params, void **extra) {
    return do_launch(S_LAUNCH, fn, gx, gy, gz, bx, by, bz, shmem, st, params, extra);
}
PC_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                       unsigned bz, unsigned shmem, CUstream st, void **params, void **extra) {
    return do_launch(S_LAUNCH_PTSZ, fn, gx, gy, gz, bx, by, bz, shmem, st, params, extra);
}

PC_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction fn, void **params, void **extra) {
    return do_launch_ex(S_LAUNCH_EX, cfg, fn, params, extra);
}
PC_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *cfg, CUfunction fn, void **params, void **extra) {
    return do_launch_ex(S_LAUNCH_EX_PTSZ, cfg, fn, params, extra);
}
PC_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream st) {
    return do_alloc_async(S_ALLOC_ASYNC, dptr, size, st);
}
PC_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream st) {
    return do_alloc_async(S_ALLOC_ASYNC_PTSZ, dptr, size, st);
}
PC_EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream st) {
    return do_free_async(S_FREE_ASYNC, ptr, st);
}
PC_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream st) {
    return do_free_async(S_FREE_ASYNC_PTSZ, ptr, st);
}

static CUresult do_prefetch_v1(int s, CUdeviceptr p, size_t n, CUdevice dev, CUstream st) {
    prefetch_v1_fn f = (prefetch_v1_fn)real(s);
    if (!f) return MISSING;
    int64_t t0 = pc_now_ns();
    CUresult r = f(p, n, dev, st);
    LOG(s, t0, n, dev == CU_DEVICE_CPU ? PC_DIR_TO_HOST : PC_DIR_TO_DEVICE, (uint64_t)p, r);
    return r;
}

static CUresult do_prefetch_v2(int s, CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream st) {
    prefetch_v2_fn f = (prefetch_v2_fn)real(s);
    if (!f) return MISSING;
    int64_t t0 = pc_now_ns();
    CUresult r = f(p, n, loc, flags, st);
    LOG(s, t0, n, loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? PC_DIR_TO_DEVICE : PC_DIR_TO_HOST, (uint64_t)p, r);
    return r;
}

PC_EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dev, CUstream st) {
    return do_prefetch_v1(S_PREFETCH, p, n, dev, st);
}
PC_EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice dev, CUstream st) {
    return do_prefetch_v1(S_PREFETCH_PTSZ, p, n, dev, st);
}
PC_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream st) {
    return do_prefetch_v2(S_PREFETCH_V2, p, n, loc, flags, st);
}
PC_EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags,
                                              CUstream st) {
    return do_prefetch_v2(S_PREFETCH_V2_PTSZ, p, n, loc, flags, st);
}

/* ---- cuGetProcAddress and dlsym ----------------------------------------------------------- */

/* The wrapper slot for a cuGetProcAddress query: same base name and stream flavour, the
 * newest ABI whose version is <= the requested one (the driver's own rule). */
static int slot_for_query(const char *symbol, int version, cuuint64_t flags) {
    int want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    int best = -1, any_pt = 0;
    for (int i = 0; i < S_COUNT; i++)
        if (hooks[i].per_thread && strcmp(hooks[i].base, symbol) == 0) any_pt = 1;
    if (!any_pt) want_pt = 0;
    for (int i = 0; i < S_COUNT; i++) {
        const struct hook *h = &hooks[i];
        if (h->per_thread != want_pt || strcmp(h->base, symbol) != 0 || h->min_version > version) continue;
        if (best < 0 || h->min_version > hooks[best].min_version) best = i;
    }
    return best;
}

static void substitute(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    if (!symbol || !pfn || !*pfn || symbol[0] != 'c' || symbol[1] != 'u') return;
    int s = slot_for_query(symbol, version, flags);
    if (s < 0) return; /* not hooked, or an ABI older than any we wrap: pass through */
    set_real(s, *pfn);
    *pfn = wrappers[s];
}

PC_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    gpa_v1_fn f = (gpa_v1_fn)real(S_GPA);
    if (!f) return MISSING;
    int64_t t0 = pc_now_ns();
    CUresult r = f(symbol, pfn, version, flags);
    if (r == CUDA_SUCCESS) substitute(symbol, pfn, version, flags);
    LOG(S_GPA, t0, 0, PC_DIR_NONE, 0, r);
    return r;
}

PC_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *status) {
    gpa_v2_fn f = (gpa_v2_fn)real(S_GPA_V2);
    if (!f) return MISSING;
    int64_t t0 = pc_now_ns();
    CUresult r = f(symbol, pfn, version, flags, status);
    if (r == CUDA_SUCCESS && (!status || *status == CU_GET_PROC_ADDRESS_SUCCESS))
        substitute(symbol, pfn, version, flags);
    LOG(S_GPA_V2, t0, 0, PC_DIR_NONE, 0, r);
    return r;
}

PC_EXPORT void *dlsym(void *handle, const char *name) {
    dlsym_fn f = real_dlsym();
    if (!f) return NULL;
    void *p = f(handle, name);
    if (!p || name[0] != 'c' || name[1] != 'u') return p;
    for (int i = 0; i < S_COUNT; i++) {
        if (strcmp(hooks[i].export_name, name) == 0) {
            if (p == wrappers[i]) return p; /* the lookup found our own export */
            set_real(i, p);
            return wrappers[i];
        }
    }
    return p;
}

/* ---- life cycle ---------------------------------------------------------------------------- */
static void *const wrappers[S_COUNT] = {
    [S_ALLOC_MANAGED] = (void *)cuMemAllocManaged,
    [S_ALLOC] = (void *)cuMemAlloc_v2,
    [S_FREE] = (void *)cuMemFree_v2,
    [S_LAUNCH] = (void *)cuLaunchKernel,
    [S_LAUNCH_PTSZ] = (void *)cuLaunchKernel_ptsz,
    [S_HTOD] = (void *)cuMemcpyHtoD_v2,
    [S_HTOD_PTDS] = (void *)cuMemcpyHtoD_v2_ptds,
    [S_DTOH] = (void *)cuMemcpyDtoH_v2,
    [S_DTOH_PTDS] = (void *)cuMemcpyDtoH_v2_ptds,
    [S_DTOD] = (void *)cuMemcpyDtoD_v2,
    [S_DTOD_PTDS] = (void *)cuMemcpyDtoD_v2_ptds,
    [S_MEMCPY] = (void *)cuMemcpy,
    [S_MEMCPY_PTDS] = (void *)cuMemcpy_ptds,
    [S_HTOD_ASYNC] = (void *)cuMemcpyHtoDAsync_v2,
    [S_HTOD_ASYNC_PTSZ] = (void *)cuMemcpyHtoDAsync_v2_ptsz,
    [S_DTOH_ASYNC] = (void *)cuMemcpyDtoHAsync_v2,
    [S_DTOH_ASYNC_PTSZ] = (void *)cuMemcpyDtoHAsync_v2_ptsz,
    [S_DTOD_ASYNC] = (void *)cuMemcpyDtoDAsync_v2,
    [S_DTOD_ASYNC_PTSZ] = (void *)cuMemcpyDtoDAsync_v2_ptsz,
    [S_MEMCPY_ASYNC] = (void *)cuMemcpyAsync,
    [S_MEMCPY_ASYNC_PTSZ] = (void *)cuMemcpyAsync_ptsz,
    [S_PREFETCH] = (void *)cuMemPrefetchAsync,
    [S_PREFETCH_PTSZ] = (void *)cuMemPrefetchAsync_ptsz,
    [S_PREFETCH_V2] = (void *)cuMemPrefetchAsync_v2,
    [S_PREFETCH_V2_PTSZ] = (void *)cuMemPrefetchAsync_v2_ptsz,
    [S_GPA] = (void *)cuGetProcAddress,
    [S_GPA_V2] = (void *)cuGetProcAddress_v2,
    [S_LAUNCH_EX] = (void *)cuLaunchKernelEx,
    [S_LAUNCH_EX_PTSZ] = (void *)cuLaunchKernelEx_ptsz,
    [S_ALLOC_ASYNC] = (void *)cuMemAllocAsync,
    [S_ALLOC_ASYNC_PTSZ] = (void *)cuMemAllocAsync_ptsz,
    [S_FREE_ASYNC] = (void *)cuMemFreeAsync,
    [S_FREE_ASYNC_PTSZ] = (void *)cuMemFreeAsync_ptsz,
};

__attribute__((constructor)) static void pc_cuda_init(void) {
    real_dlsym();
    pc_log_init();
    pc_injector_init();
}

__attribute__((destructor)) static void pc_cuda_fini(void) {
    pc_injector_finish();
    pc_log_finish();
}
