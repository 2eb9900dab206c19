/* Internal interfaces of libpagecast_cuda.so (driver-API interposer + prefetch injector).
 * Not installed; the only public ABI is the exported cu* wrappers, dlsym, and the
 * pagecast_cuda_* query functions declared at the end. */
#ifndef PAGECAST_CUDA_INTERNAL_H
#define PAGECAST_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

/* Built with -fvisibility=hidden: only what is marked here is exported. */
#define PC_EXPORT __attribute__((visibility("default")))

/* ---- clock ------------------------------------------------------------------------ */
int64_t pc_now_ns(void); /* CLOCK_MONOTONIC */

/* ---- allocation table (alloc_table.c) ---------------------------------------------- */
enum pc_alloc_kind { PC_ALLOC_DEVICE = 0, PC_ALLOC_MANAGED = 1 };

struct pc_alloc {
    int64_t id;    /* creation order over all allocations of the process */
    int32_t kind;  /* enum pc_alloc_kind */
    int32_t order; /* creation order among allocations of the same kind */
    uint64_t base;
    uint64_t size;
    int64_t created_ns;
    int64_t freed_ns; /* -1 while live */
};

/* Records a successful allocation; returns its id. */
int64_t pc_alloc_add(uint64_t base, uint64_t size, int kind);
/* Marks the live allocation starting at base freed; returns its id or -1 if unknown. */
int64_t pc_alloc_free(uint64_t base);
/* Live allocation containing addr: fills *out, returns 1; 0 if none. */
int pc_alloc_lookup(uint64_t addr, struct pc_alloc *out);
/* The allocation with this (kind, order), live or freed: returns 1 and fills *out, else 0. */
int pc_alloc_by_order(int kind, int32_t order, struct pc_alloc *out);
/* Changes on every allocation and free. */
uint64_t pc_alloc_generation(void);
/* Writes the whole table as CSV to path (temp + rename). Returns 0 on success. */
int pc_alloc_write_csv(const char *path);

/* ---- metrics and timeline (iolog.c) ------------------------------------------------- */
enum pc_dir { PC_DIR_NONE = 0, PC_DIR_HTOD, PC_DIR_DTOH, PC_DIR_DTOD, PC_DIR_HTOH, PC_DIR_TO_DEVICE, PC_DIR_TO_HOST };

void pc_log_init(void);
void pc_log_finish(void);
int pc_log_enabled(void);
/* One API call: counted in the metrics of slot fn, and a timeline row if enabled. */
void pc_log_call(int fn, const char *name, int64_t start_ns, int64_t dur_ns, uint64_t bytes, int dir, uint64_t ptr,
                 int result);
void pc_log_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *pc_out_dir(void);

/* ---- real driver entry points (interpose.c) ------------------------------------------ */
void *pc_real_sym(const char *name); /* an export of the real driver, never a wrapper */

/* ---- prefetch injector (injector.c) --------------------------------------------------- */
void pc_injector_init(void);
void pc_injector_finish(void);
/* Called by the cuLaunchKernel wrappers on the application's thread, before the launch. */
void pc_injector_on_launch(void);

/* ---- exported query functions (for tests and tools) ---------------------------------- */
PC_EXPORT int pagecast_cuda_translate(uint64_t addr, int64_t *alloc_id, uint64_t *offset);
PC_EXPORT int pagecast_cuda_flush(void);

#endif
