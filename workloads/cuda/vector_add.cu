// Vector add over CUDA managed memory (AI4Mem's test program, rewritten).
// Usage: vector_add [N elements, default 16M] [iterations, default 10]
// Three managed arrays are initialised on the host, so every kernel launch after a host
// touch migrates them back to the GPU on demand (GPU page faults).
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.cuh"

__global__ void vector_add_uvm(const float *a, const float *b, float *c, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) c[i] = a[i] + b[i];
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 1 << 24;
    const int iters = argc > 2 ? std::atoi(argv[2]) : 10;
    if (n <= 0 || iters <= 0) {
        std::fprintf(stderr, "usage: %s [N > 0] [iterations > 0]\n", argv[0]);
        return 2;
    }
    float *a, *b, *c;
    CHECK(cudaMallocManaged(&a, sizeof(float) * n));
    CHECK(cudaMallocManaged(&b, sizeof(float) * n));
    CHECK(cudaMallocManaged(&c, sizeof(float) * n));
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    float total_ms = 0;
    for (int it = 0; it < iters; it++) {
        for (int i = 0; i < n; i++) { // host writes: pages migrate back to the CPU
            a[i] = float(i);
            b[i] = float(it);
        }
        CHECK(cudaEventRecord(t0));
        vector_add_uvm<<<1024, 1024>>>(a, b, c, n);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(t1));
        CHECK(cudaEventSynchronize(t1));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, t0, t1));
        total_ms += ms;
        for (int i = 0; i < n; i += 4096)
            if (c[i] != float(i) + float(it)) {
                std::fprintf(stderr, "wrong result at %d in iteration %d\n", i, it);
                return 1;
            }
    }
    std::printf("vector_add n=%d iterations=%d kernel_ms=%.3f\n", n, iters, total_ms);
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(c));
    return 0;
}
