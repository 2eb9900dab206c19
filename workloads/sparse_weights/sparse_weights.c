/*
 * sparse_weights: a sparse "LLM in a flash" style inference loop over an mmapped
 * weights file, used to measure live prefetching on cold page caches.
 *
 *   sparse_weights gen WEIGHTS [--size-mib N] [--dim D] [--seed S]
 *   sparse_weights run WEIGHTS [--prompt P] [--tokens T] [--advice A] [--quiet]
 *
 * File layout: one 4 KiB header page, then L layers of R rows, each row D float32
 * (D = 1024 makes one row exactly one 4 KiB page, so neuron rows == pages).
 *
 * Per token and layer the program computes with a sparse set of rows, read in increasing
 * address order (as sparse-inference kernels do):
 *   - a power-law (Zipf) sample over a fixed per-layer ranking of rows: a stable hot
 *     head shared by every prompt plus a long input-dependent tail;
 *   - successors of the most activated rows of the previous layer (contextual sparsity:
 *     layer i+1's active set correlates with layer i's);
 *   - rows picked by sign bits of the hidden state (depends on the data read).
 * The prompt seeds the hidden state and the Zipf draws, so a different prompt touches a
 * different (but overlapping) set of pages.
 *
 * --dense: every row of every layer each token, in address order (a dense model, as a model
 * runner reads its weights for every token): the case of a memory limit below the file.
 *
 * --advice: random (MADV_RANDOM: no read-around), normal (kernel default read-around),
 * sequential (MADV_SEQUENTIAL), willneed (MADV_WILLNEED on the whole mapping at start).
 * Prints one JSON line at the end: ttft_s, tokens_per_s, wall_s, rows, checksum.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "outfile.h"

#define MAGIC        0x5357504741454353ULL /* "SCEAGPWS" */
#define HEADER_BYTES 4096

struct header {
    uint64_t magic;
    uint32_t version, layers, rows, dim;
    uint64_t seed;
};

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *path) {
    fprintf(stderr, "sparse_weights: %s%s%s: %s\n", what, path ? " " : "", path ? path : "", strerror(errno));
    exit(2);
}

static void usage(void) {
    fprintf(stderr,
            "usage: sparse_weights gen WEIGHTS [--size-mib N] [--dim D] [--seed S]\n"
            "       sparse_weights run WEIGHTS [--prompt P] [--tokens T] [--advice random|normal|sequential|willneed]\n"
            "                              [--hot K] [--ctx M] [--zipf S] [--pool N] [--tail N] [--dense] [--quiet]\n");
    exit(2);
}

/* ---------------------------------------------------------------- generator */

static int cmd_gen(const char *path, long size_mib, uint32_t dim, uint64_t seed) {
    uint64_t row_bytes = (uint64_t)dim * 4;
    uint32_t layers = 16;
    uint64_t rows = ((uint64_t)size_mib << 20) / (layers * row_bytes);
    if (rows < 64) rows = 64;
    rows &= ~(uint64_t)63; /* a power-of-two-friendly multiple for the ranking bijection */
    char tmp[4200];
    int fd = pc_out_temp(path, tmp, sizeof tmp); /* exclusive, random name: never through a planted link */
    if (fd < 0) die("cannot create a temporary beside", path);
    static char hdrbuf[HEADER_BYTES];
    struct header h = {MAGIC, 1, layers, (uint32_t)rows, dim, seed};
    memcpy(hdrbuf, &h, sizeof h);
    if (write(fd, hdrbuf, HEADER_BYTES) != HEADER_BYTES) die("write", tmp);
    size_t chunk_rows = 256;
    float *buf = malloc(chunk_rows * row_bytes);
    if (!buf) die("malloc", NULL);
    const float scale = 1.0f / sqrtf((float)dim);
    for (uint64_t r0 = 0; r0 < layers * rows; r0 += chunk_rows) {
        size_t n = (layers * rows - r0) < chunk_rows ? (size_t)(layers * rows - r0) : chunk_rows;
        for (size_t i = 0; i < n; i++) {
            uint64_t s = mix64(seed ^ ((r0 + i) * 0x100000001b3ULL));
            for (uint32_t j = 0; j < dim; j++) {
                s = mix64(s);
                /* uniform in [-1, 1) scaled: weights with zero mean */
                buf[i * dim + j] = (float)((int64_t)(s >> 11) - (1LL << 52)) / (float)(1LL << 52) * scale;
            }
        }
        size_t bytes = n * row_bytes;
        if (write(fd, buf, bytes) != (ssize_t)bytes) die("write", tmp);
    }
    free(buf);
    if (fsync(fd) != 0) die("fsync", tmp);
    /* Leave the new file cold: benchmarks start from an empty page cache. */
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if (rename(tmp, path) != 0) die("rename", path);
    printf("{\"path\":\"%s\",\"layers\":%u,\"rows\":%u,\"dim\":%u,\"bytes\":%llu}\n", path, layers, (unsigned)rows, dim,
           (unsigned long long)(HEADER_BYTES + layers * rows * row_bytes));
    return 0;
}

/* ---------------------------------------------------------------- inference */

struct model {
    const struct header *h;
    const float *w;
    uint32_t L, R, D;
};

static const float *row_ptr(const struct model *m, uint32_t layer, uint32_t row) {
    return m->w + ((uint64_t)layer * m->R + row) * m->D;
}

/* Fixed per-layer ranking: rank -> row, a bijection on [0, R) (R is a multiple of 64). */
static uint32_t rank_to_row(const struct model *m, uint32_t layer, uint32_t rank) {
    uint64_t a = 2 * (mix64(m->h->seed + 7 * layer) % (m->R / 2)) + 1; /* odd */
    while (a % 3 == 0 || a % 5 == 0) a += 2; /* R may carry factors 3/5 when not a power of two: keep a coprime-ish */
    uint64_t b = mix64(m->h->seed * 31 + layer) % m->R;
    uint64_t r = (a * rank + b) % m->R;
    return (uint32_t)r;
}

/* Zipf-like draw over ranks [0, n): inverse CDF of the continuous power law with
 * exponent s (s = 1 handled separately), so P(rank) ~ (rank + 1)^-s. */
static uint32_t zipf_rank(uint64_t *state, uint32_t n, double s) {
    *state = mix64(*state);
    double u = (double)(*state >> 11) / (double)(1ULL << 53);
    double r;
    if (fabs(s - 1.0) < 1e-9)
        r = exp(u * log((double)n + 1.0)) - 1.0;
    else
        r = pow(1.0 + u * (pow((double)n + 1.0, 1.0 - s) - 1.0), 1.0 / (1.0 - s)) - 1.0;
    uint32_t k = (uint32_t)r;
    return k >= n ? n - 1 : k;
}

/* The row arithmetic in LANES independent sums, which the compiler turns into vector
 * instructions without reassociating anything itself (no -ffast-math): a model runner's
 * matrix-vector product is vectorized, and a scalar loop (0.4 s per GiB here) would make the
 * dense pass wait on the CPU where a runner waits on the disk. */
#define LANES 16
static float dot(const float *restrict w, const float *restrict x, uint32_t d) {
    float acc[LANES] = {0};
    uint32_t j = 0;
    for (; j + LANES <= d; j += LANES)
        for (uint32_t i = 0; i < LANES; i++) acc[i] += w[j + i] * x[j + i];
    float a = 0;
    for (uint32_t i = 0; i < LANES; i++) a += acc[i];
    for (; j < d; j++) a += w[j] * x[j];
    return a;
}

static void axpy(float *restrict y, float a, const float *restrict w, uint32_t d) {
    for (uint32_t j = 0; j < d; j++) y[j] += a * w[j];
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

struct run_cfg {
    uint64_t prompt;
    int tokens;
    int hot;  /* Zipf draws per layer and token */
    int ctx;  /* successors of the top-ctx rows of the previous layer */
    int pool; /* hot, contextual and data-dependent rows are drawn from the top-pool ranks */
    int tail; /* uniformly random rows per layer and token */
    int quiet;
    int dense;     /* every row, every token */
    double zipf_s; /* power-law exponent of the row popularity */
};

static int cmd_run(const char *path, const char *advice, struct run_cfg cfg) {
    double t0 = now_s();
    int fd = open(path, O_RDONLY);
    if (fd < 0) die("cannot open", path);
    struct stat st;
    if (fstat(fd, &st) != 0) die("stat", path);
    void *base = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) die("mmap", path);
    close(fd);
    int adv = MADV_NORMAL;
    if (!strcmp(advice, "random"))
        adv = MADV_RANDOM;
    else if (!strcmp(advice, "sequential"))
        adv = MADV_SEQUENTIAL;
    else if (!strcmp(advice, "willneed"))
        adv = MADV_WILLNEED;
    else if (strcmp(advice, "normal") != 0) {
        fprintf(stderr, "sparse_weights: unknown --advice %s\n", advice);
        return 2;
    }
    if (adv != MADV_NORMAL && madvise(base, st.st_size, adv) != 0) die("madvise", path);

    struct model m;
    m.h = base;
    if (m.h->magic != MAGIC) {
        fprintf(stderr, "sparse_weights: %s: not a weights file (bad magic)\n", path);
        return 2;
    }
    m.L = m.h->layers, m.R = m.h->rows, m.D = m.h->dim;
    if ((uint64_t)st.st_size < HEADER_BYTES + (uint64_t)m.L * m.R * m.D * 4) {
        fprintf(stderr, "sparse_weights: %s: truncated weights file\n", path);
        return 2;
    }
    m.w = (const float *)((const char *)base + HEADER_BYTES);

    uint32_t D = m.D, R = m.R;
    /* contextual and data-dependent rows come from the popular part of the ranking */
    uint32_t pool = (uint32_t)cfg.pool < R ? (uint32_t)cfg.pool : R;
    float *x = calloc(D, sizeof(float)), *nx = calloc(D, sizeof(float));
    uint32_t *active = malloc(sizeof(uint32_t) * R);
    float *act = malloc(sizeof(float) * R);
    uint8_t *mark = calloc(R, 1);
    uint32_t *prev_top = calloc(cfg.ctx > 0 ? cfg.ctx : 1, sizeof(uint32_t));
    int *top_idx = calloc(cfg.ctx > 0 ? cfg.ctx + 1 : 1, sizeof(int));
    if (!x || !nx || !active || !act || !mark || !prev_top || !top_idx) die("malloc", NULL);

    double ttft = 0, checksum = 0;
    uint64_t rows_read = 0;
    for (int t = 0; t < cfg.tokens; t++) {
        /* token embedding: depends on the prompt and the previous token's output */
        uint64_t s = mix64(cfg.prompt * 0x9e37 + (uint64_t)t + 1);
        for (uint32_t j = 0; j < D; j++) {
            s = mix64(s);
            x[j] = 0.5f * x[j] + (float)((int64_t)(s >> 40) - (1 << 23)) / (float)(1 << 23);
        }
        int nprev = 0;
        for (uint32_t l = 0; l < m.L; l++) {
            int n = 0;
            uint64_t zs = mix64(cfg.prompt ^ mix64(((uint64_t)t << 32) | l));
            if (cfg.dense)
                for (uint32_t r = 0; r < R; r++) mark[r] = 1, active[n++] = r;
            for (int k = 0; k < cfg.hot && !cfg.dense; k++) {
                uint32_t r = rank_to_row(&m, l, zipf_rank(&zs, pool, cfg.zipf_s));
                if (!mark[r]) mark[r] = 1, active[n++] = r;
            }
            /* the input-dependent tail: rows anywhere in the layer */
            for (int k = 0; k < cfg.tail && !cfg.dense; k++) {
                zs = mix64(zs);
                uint32_t r = (uint32_t)(zs % R);
                if (!mark[r]) mark[r] = 1, active[n++] = r;
            }
            /* contextual: each strongly active row of layer l-1 wakes two rows here */
            for (int k = 0; k < nprev; k++) {
                for (uint64_t c = 0; c < 2; c++) {
                    uint32_t r = rank_to_row(
                        &m, l,
                        (uint32_t)(mix64(m.h->seed ^ (((uint64_t)l << 40) | ((uint64_t)prev_top[k] << 4) | c)) % pool));
                    if (!mark[r]) mark[r] = 1, active[n++] = r;
                }
            }
            /* data-dependent: sign pattern of the hidden state picks a few rows */
            for (uint32_t g = 0; g < 8; g++) {
                uint64_t bits = 0;
                for (uint32_t j = 0; j < 16; j++) bits = (bits << 1) | (x[(g * 16 + j) % D] > 0);
                uint32_t r =
                    rank_to_row(&m, l, (uint32_t)(mix64(bits ^ ((uint64_t)l << 20) ^ ((uint64_t)g << 28)) % pool));
                if (!mark[r]) mark[r] = 1, active[n++] = r;
            }
            qsort(active, n, sizeof(uint32_t), cmp_u32);
            /* read the rows in increasing address order: activations, then the output, a
             * weighted sum of the same rows (already resident); the dense pass does both
             * while a row is at hand, reading each row once a token as a dense model does */
            memset(nx, 0, D * sizeof(float));
            for (int k = 0; k < n; k++) {
                const float *w = row_ptr(&m, l, active[k]);
                float a = dot(w, x, D);
                act[k] = a > 0 ? a : 0.01f * a; /* leaky ReLU */
                if (cfg.dense) axpy(nx, act[k], w, D);
            }
            for (int k = 0; k < n && !cfg.dense; k++) {
                axpy(nx, act[k], row_ptr(&m, l, active[k]), D);
            }
            double norm = 0;
            for (uint32_t j = 0; j < D; j++) norm += (double)nx[j] * nx[j];
            float inv = norm > 0 ? (float)(1.0 / sqrt(norm / D)) : 1.0f;
            for (uint32_t j = 0; j < D; j++) x[j] = nx[j] * inv;
            /* top-ctx activations feed the next layer's contextual rows */
            nprev = 0;
            for (int k = 0; k < n && cfg.ctx > 0; k++) {
                /* insertion into a small array kept sorted by activation, best first */
                int pos = nprev < cfg.ctx ? nprev : cfg.ctx;
                while (pos > 0 && act[top_idx[pos - 1]] < act[k]) pos--;
                if (pos >= cfg.ctx) continue;
                int last = nprev < cfg.ctx ? nprev : cfg.ctx - 1;
                memmove(&top_idx[pos + 1], &top_idx[pos], (size_t)(last - pos) * sizeof(int));
                top_idx[pos] = k;
                if (nprev < cfg.ctx) nprev++;
            }
            for (int k = 0; k < nprev; k++) prev_top[k] = active[top_idx[k]];
            rows_read += n;
            for (int k = 0; k < n; k++) mark[active[k]] = 0;
        }
        for (uint32_t j = 0; j < D; j++) checksum += x[j];
        if (t == 0) ttft = now_s() - t0;
        if (!cfg.quiet) fprintf(stderr, "token %d done at %.3f s\n", t, now_s() - t0);
    }
    double wall = now_s() - t0;
    double rest = wall - ttft;
    printf("{\"ttft_s\":%.6f,\"tokens_per_s\":%.3f,\"wall_s\":%.6f,\"tokens\":%d,\"rows\":%llu,\"bytes_touched\":%llu,"
           "\"checksum\":%.6f,\"advice\":\"%s\",\"prompt\":%llu}\n",
           ttft, cfg.tokens > 1 && rest > 0 ? (cfg.tokens - 1) / rest : cfg.tokens / wall, wall, cfg.tokens,
           (unsigned long long)rows_read, (unsigned long long)rows_read * D * 4, checksum, advice,
           (unsigned long long)cfg.prompt);
    munmap(base, st.st_size);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) usage();
    const char *cmd = argv[1], *path = argv[2];
    long size_mib = 512;
    uint32_t dim = 1024;
    uint64_t seed = 1;
    const char *advice = "normal";
    struct run_cfg cfg = {
        .prompt = 1, .tokens = 4, .hot = 320, .ctx = 16, .quiet = 0, .zipf_s = 1.1, .pool = 320, .tail = 2};
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quiet")) {
            cfg.quiet = 1;
            continue;
        }
        if (!strcmp(a, "--dense")) {
            cfg.dense = 1;
            continue;
        }
        if (!v) usage();
        i++;
        if (!strcmp(a, "--size-mib"))
            size_mib = atol(v);
        else if (!strcmp(a, "--dim"))
            dim = (uint32_t)atol(v);
        else if (!strcmp(a, "--seed"))
            seed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--prompt"))
            cfg.prompt = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--tokens"))
            cfg.tokens = atoi(v);
        else if (!strcmp(a, "--hot"))
            cfg.hot = atoi(v);
        else if (!strcmp(a, "--tail"))
            cfg.tail = atoi(v);
        else if (!strcmp(a, "--pool"))
            cfg.pool = atoi(v);
        else if (!strcmp(a, "--zipf"))
            cfg.zipf_s = atof(v);
        else if (!strcmp(a, "--ctx"))
            cfg.ctx = atoi(v);
        else if (!strcmp(a, "--advice"))
            advice = v;
        else
            usage();
    }
    if (!strcmp(cmd, "gen")) {
        if (size_mib < 1 || dim < 16 || dim % 16) usage();
        return cmd_gen(path, size_mib, dim, seed);
    }
    if (!strcmp(cmd, "run")) {
        if (cfg.tokens < 1 || cfg.hot < 0 || cfg.ctx < 0 || cfg.pool < 1 || cfg.tail < 0) usage();
        return cmd_run(path, advice, cfg);
    }
    usage();
    return 2;
}
