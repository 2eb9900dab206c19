/* direct_client — a program linked against the driver library itself (here the TEST
 * DOUBLE) that calls the driver API by name, as code built with -lcuda does: the
 * interposer must catch these calls through its exported symbols, without dlsym or
 * cuGetProcAddress. Prints "alloc 0xPTR" and one "result NAME R" per call. */
#include <stdio.h>

#include <cuda.h>

int main(void) {
    CUdeviceptr p = 0;
    CUresult r = cuMemAllocManaged(&p, 1 << 20, CU_MEM_ATTACH_GLOBAL);
    printf("alloc 0x%llx\nresult cuMemAllocManaged %d\n", (unsigned long long)p, (int)r);
    static char host[4096];
    printf("result cuMemcpyHtoD %d\n", (int)cuMemcpyHtoD(p + 4096, host, sizeof host));
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    printf("result cuMemPrefetchAsync %d\n", (int)cuMemPrefetchAsync(p, 65536, loc, 0, NULL)); /* the _v2 ABI */
    printf("result cuLaunchKernel %d\n", (int)cuLaunchKernel(NULL, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    printf("result cuMemFree %d\n", (int)cuMemFree(p));
    return 0;
}
