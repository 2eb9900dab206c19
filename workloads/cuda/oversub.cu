// Oversubscription patterns over one managed array larger than the GPU's memory.
// Usage: oversub PATTERN [--factor F] [--size-mb M] [--iters K] [--stride PAGES] [--seed S]
//   PATTERN  stream  — every thread walks its contiguous slice (sequential, all pages)
//            strided — one word per page, every STRIDE-th page, shifting by one page per pass
//            gather  — reads at random indices (a device-memory index array), random pages
//   --factor F   array size = F x the GPU's total memory (default 1.5)
//   --size-mb M  array size in MiB instead (for small tests)
// Prints the pattern, bytes and kernel time. Managed pages are evicted and re-faulted
// as the kernels sweep, which is what a prefetcher has to beat.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "check.cuh"

static const size_t kWordsPerPage = 4096 / sizeof(uint32_t);

__global__ void stream_kernel(uint32_t *data, size_t n) {
    size_t threads = size_t(gridDim.x) * blockDim.x;
    size_t per = (n + threads - 1) / threads;
    size_t t = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    size_t end = (t + 1) * per < n ? (t + 1) * per : n;
    for (size_t i = t * per; i < end; i++) data[i] += 1;
}

__global__ void strided_kernel(uint32_t *data, size_t pages, size_t stride, size_t shift) {
    size_t step = size_t(gridDim.x) * blockDim.x;
    for (size_t p = shift + (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * stride; p < pages; p += step * stride)
        data[p * kWordsPerPage] += 1;
}

__global__ void gather_kernel(const uint32_t *data, const uint64_t *idx, size_t m, unsigned long long *sum) {
    unsigned long long local = 0;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < m; i += size_t(gridDim.x) * blockDim.x)
        local += data[idx[i]];
    atomicAdd(sum, local);
}

static uint64_t splitmix(uint64_t &s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr,
                     "usage: %s stream|strided|gather [--factor F] [--size-mb M] [--iters K] [--stride P] [--seed S]\n",
                     argv[0]);
        return 2;
    }
    const char *pattern = argv[1];
    double factor = 1.5;
    size_t size_mb = 0, stride = 16;
    int iters = 3;
    uint64_t seed = 1;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--factor"))
            factor = std::atof(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--size-mb"))
            size_mb = std::strtoull(argv[i + 1], nullptr, 10);
        else if (!std::strcmp(argv[i], "--iters"))
            iters = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--stride"))
            stride = std::strtoull(argv[i + 1], nullptr, 10);
        else if (!std::strcmp(argv[i], "--seed"))
            seed = std::strtoull(argv[i + 1], nullptr, 10);
        else {
            std::fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (std::strcmp(pattern, "stream") && std::strcmp(pattern, "strided") && std::strcmp(pattern, "gather")) {
        std::fprintf(stderr, "unknown pattern %s (stream, strided, gather)\n", pattern);
        return 2;
    }
    if (stride == 0 || iters <= 0 || factor <= 0) {
        std::fprintf(stderr, "--stride, --iters and --factor must be positive\n");
        return 2;
    }
    size_t free_b = 0, total_b = 0;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    size_t bytes = size_mb ? size_mb << 20 : size_t(factor * double(total_b));
    bytes = (bytes + 4095) & ~size_t(4095);
    size_t n = bytes / sizeof(uint32_t), pages = bytes / 4096;
    uint32_t *data;
    CHECK(cudaMallocManaged(&data, bytes));
    std::memset(data, 0, bytes); // first touch on the host: every page starts on the CPU

    uint64_t *idx = nullptr;
    unsigned long long *sum = nullptr;
    size_t m = n / 16;
    if (!std::strcmp(pattern, "gather")) {
        uint64_t *host_idx = static_cast<uint64_t *>(std::malloc(m * sizeof(uint64_t)));
        if (!host_idx) return 1;
        for (size_t i = 0; i < m; i++) host_idx[i] = splitmix(seed) % n;
        CHECK(cudaMalloc(&idx, m * sizeof(uint64_t)));
        CHECK(cudaMemcpy(idx, host_idx, m * sizeof(uint64_t), cudaMemcpyHostToDevice));
        std::free(host_idx);
        CHECK(cudaMalloc(&sum, sizeof(unsigned long long)));
        CHECK(cudaMemset(sum, 0, sizeof(unsigned long long)));
    }
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    CHECK(cudaEventRecord(t0));
    for (int it = 0; it < iters; it++) {
        if (!std::strcmp(pattern, "stream"))
            stream_kernel<<<256, 256>>>(data, n);
        else if (!std::strcmp(pattern, "strided"))
            strided_kernel<<<256, 256>>>(data, pages, stride, size_t(it) % stride);
        else
            gather_kernel<<<256, 256>>>(data, idx, m, sum);
        CHECK(cudaGetLastError());
    }
    CHECK(cudaEventRecord(t1));
    CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    std::printf("oversub pattern=%s bytes=%zu gpu_total=%zu iterations=%d kernel_ms=%.3f\n", pattern, bytes, total_b,
                iters, ms);
    if (idx) CHECK(cudaFree(idx));
    if (sum) CHECK(cudaFree(sum));
    CHECK(cudaFree(data));
    return 0;
}
