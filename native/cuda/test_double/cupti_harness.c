/* cupti_harness — runs the CUPTI collector's record conversion (cupti_collector.c,
 * included whole) on hand-built CUPTI activity records, for tests on a machine without
 * a GPU. It writes the same cupti.<pid>.bin / kernels.<pid>.tsv the collector writes in
 * a real run into $PAGECAST_CUDA_OUT. The scenario is fixed; tests/test_cuda_cupti.py
 * knows what each record must become in the trace. */
#include "../cupti_collector.c"

#define BASE     0x7f0000000000ULL
#define DEV_BASE 0x7f1000000000ULL

static void um(CUpti_ActivityUnifiedMemoryCounterKind kind, uint64_t addr, uint64_t value, uint32_t flags, uint64_t t,
               uint32_t stream) {
    CUpti_ActivityUnifiedMemoryCounter3 u;
    memset(&u, 0, sizeof u);
    u.kind = CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER;
    u.counterKind = kind;
    u.address = addr;
    u.value = value;
    u.flags = flags;
    u.start = t;
    u.end = t + 40;
    u.streamId = stream;
    u.srcId = 1;
    u.dstId = 2;
    convert((CUpti_Activity *)&u);
}

static void mem(CUpti_ActivityMemoryOperationType op, CUpti_ActivityMemoryKind mk, uint64_t addr, uint64_t bytes,
                uint64_t t) {
    CUpti_ActivityMemory4 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
    m.memoryOperationType = op;
    m.memoryKind = mk;
    m.address = addr;
    m.bytes = bytes;
    m.timestamp = t;
    m.deviceId = 0;
    m.processId = 99;
    convert((CUpti_Activity *)&m);
}

static void kernel(const char *name, uint64_t start, uint64_t end, uint32_t stream, uint32_t corr) {
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof k);
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.name = name;
    k.start = start;
    k.end = end;
    k.streamId = stream;
    k.correlationId = corr;
    k.deviceId = 0;
    k.gridX = 1024;
    convert((CUpti_Activity *)&k);
}

int main(void) {
    if (open_outputs() != 0) return 1;
    mem(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, CUPTI_ACTIVITY_MEMORY_KIND_MANAGED, BASE, 8u << 20, 1000);
    mem(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, DEV_BASE, 1u << 20, 1100);
    mem(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, 0x10000, 4096, 1150);
    kernel("vector_add_uvm(float*, float*, float*, int)", 1900, 2500, 7, 42);
    um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT, BASE + 5 * 4096 + 12, 1,
       CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_WRITE, 2000, 7);
    um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD, BASE + 5 * 4096, 65536,
       CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_COHERENCE, 2050, 7);
    um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT, BASE + 9 * 4096, 1,
       CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_READ, 2100, 7);
    um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD, BASE + 16 * 4096, 1u << 20,
       CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_PREFETCH, 2200, 7);
    um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT, BASE + 20 * 4096, 1,
       CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_ATOMIC, 2300, 7);
    kernel("vector_add_uvm(float*, float*, float*, int)", 2600, 2900, 7, 43);
    um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH, BASE + (2u << 20), 2u << 20,
       CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_EVICTION, 3000, 0);
    um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING, BASE + 4096, 1, 0, 3100, 0);
    um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING, BASE + 8192, 1, 0, 3200, 0);
    um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT, BASE + 3 * 4096, 1, 0, 3300, 0);
    um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP, DEV_BASE + 4096, 1, 2, 3400, 0);
    um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOD, BASE, 4096, 0, 3500, 0);
    kernel("weird\tname\nwith breaks", 3600, 3700, 8, 44);
    mem(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, CUPTI_ACTIVITY_MEMORY_KIND_MANAGED, BASE, 8u << 20, 4000);
    mem(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, CUPTI_ACTIVITY_MEMORY_KIND_MANAGED, BASE, 4u << 20, 4100);
    um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT, BASE + 4096, 1,
       CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_READ, 4200, 9);
    um(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT, 0x1000, 1,
       CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_READ, 4300, 9);
    CUpti_Activity other = {.kind = CUPTI_ACTIVITY_KIND_DRIVER};
    convert(&other); /* kinds the collector does not enable are ignored */
    dropped = 3;
    close_outputs();
    return 0;
}
