/*
 * LD_PRELOAD shim for `pagecast run`: prefetch the program's anonymous memory from
 * inside the program. Anonymous pages belong to one address space, so the daemon
 * cannot populate them from outside (unlike the shared page cache for files).
 *
 * The constructor reads PAGECAST_ANON_SOCK (a unix socket served by the predictor
 * process), stays inert in the process named by PAGECAST_ANON_SKIP (the fault
 * collector, which execs the program), and otherwise removes itself from the environment (PAGECAST_ANON_* and its entry in
 * LD_PRELOAD), so children the program execs run without it. It then starts one
 * helper thread that connects, says hello {magic, pid, mode}, and for every 16-byte
 * record {address, length} received calls madvise(mode) and answers 16 bytes
 * {monotonic ns when done, 0 or errno}.
 *
 * mode: MADV_POPULATE_WRITE (Linux >= 5.14) pre-faults private anonymous pages as if
 * written: zeroed pages are allocated and mapped writable, exactly what the program's
 * own first touch would do, so neither a first read nor a first write faults later.
 * MADV_POPULATE_READ would map the shared zero page, and the first write would still
 * fault (copy-on-write). Without POPULATE_* the shim falls back to MADV_WILLNEED
 * (only useful for swapped-out pages) and says so in the hello.
 *
 * The shim must never hurt the program: every failure (no variable, no socket, the
 * predictor died, a short read) ends the helper thread silently; signals are blocked
 * in it; its stack comes from a memfd mapping so it creates no anonymous region that
 * would shift the creation order pagecast uses to match anonymous regions across runs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "highfd.h"
#include "live/anon_wire.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define STACK_BYTES (256 * 1024)
#define BATCH       256

static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static volatile int sock_fd = -1;

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int choose_mode(void) {
    /* madvise checks the advice before the range: length 0 probes support */
    if (madvise(NULL, 0, MADV_POPULATE_WRITE) == 0) return MADV_POPULATE_WRITE;
    return MADV_WILLNEED;
}

static void *helper(void *arg) {
    (void)arg;
    /* a high number (highfd.h): the program's own open() calls keep the numbers they get bare */
    int fd = pc_fd_high_or_keep(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd < 0) return NULL;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, sock_path, sizeof sa.sun_path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return NULL;
    }
    sock_fd = fd;
    int mode = choose_mode();
    struct pc_anon_hello hello = {PC_ANON_MAGIC, (uint64_t)getpid(), (uint64_t)mode};
    if (write_all(fd, &hello, sizeof hello) != 0) goto out;
    struct pc_anon_request in[BATCH];
    struct pc_anon_ack ack[BATCH];
    size_t have = 0; /* bytes in `in` */
    for (;;) {
        ssize_t r = recv(fd, (char *)in + have, sizeof in - have, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break; /* predictor gone or channel broken: stop quietly */
        have += (size_t)r;
        size_t n = have / sizeof *in;
        for (size_t i = 0; i < n; i++) {
            int rc = madvise((void *)(uintptr_t)in[i].addr, (size_t)in[i].len, mode);
            ack[i].done_ns = mono_ns();
            ack[i].err = rc == 0 ? 0 : errno;
        }
        if (n && write_all(fd, ack, n * sizeof *ack) != 0) break;
        size_t rest = have - n * sizeof *in;
        memmove(in, (char *)in + n * sizeof *in, rest);
        have = rest;
    }
out:
    sock_fd = -1;
    close(fd);
    return NULL;
}

/* A forked child has no helper thread; drop its copy of the connection. */
static void after_fork_child(void) {
    int fd = sock_fd;
    if (fd >= 0) {
        sock_fd = -1;
        close(fd);
    }
}

/* Remove every LD_PRELOAD entry whose path is `self` (separators: space or colon). */
static void drop_self_from_preload(const char *self) {
    const char *pre = getenv("LD_PRELOAD");
    if (!pre || !self || !*self) return;
    size_t n = strlen(pre);
    char *out = malloc(n + 1);
    if (!out) return;
    size_t o = 0;
    const char *p = pre;
    while (*p) {
        size_t len = strcspn(p, " :");
        if (len && !(len == strlen(self) && strncmp(p, self, len) == 0)) {
            if (o) out[o++] = ':';
            memcpy(out + o, p, len);
            o += len;
        }
        p += len;
        while (*p == ' ' || *p == ':') p++;
    }
    out[o] = 0;
    if (o)
        setenv("LD_PRELOAD", out, 1);
    else
        unsetenv("LD_PRELOAD");
    free(out);
}

__attribute__((constructor)) static void pc_anon_init(void) {
    const char *path = getenv("PAGECAST_ANON_SOCK");
    if (!path || !*path || strlen(path) >= sizeof sock_path)
        return; /* inert: not started by pagecast run (or a child of the program) */
    /* pagecast's fault collector starts the program: pass through it untouched */
    const char *skip = getenv("PAGECAST_ANON_SKIP");
    if (skip && *skip) {
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
            self[n] = 0;
            if (strcmp(self, skip) == 0) return;
        }
    }
    memcpy(sock_path, path, strlen(path) + 1);
    drop_self_from_preload(getenv("PAGECAST_ANON_SHIM"));
    unsetenv("PAGECAST_ANON_SOCK");
    unsetenv("PAGECAST_ANON_SHIM");
    unsetenv("PAGECAST_ANON_SKIP");

    int mfd = (int)syscall(SYS_memfd_create, "pagecast-shim-stack", 1u /* MFD_CLOEXEC */);
    if (mfd < 0) return;
    void *stack = MAP_FAILED;
    if (ftruncate(mfd, STACK_BYTES) == 0) stack = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    close(mfd);
    if (stack == MAP_FAILED) return;
    pthread_atfork(NULL, NULL, after_fork_child);
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return;
    pthread_attr_setstack(&attr, stack, STACK_BYTES);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread inherits "all blocked" */
    pthread_t t;
    pthread_create(&t, &attr, helper, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
}
