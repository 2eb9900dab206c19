/* Fault injection for tests/test_plan_launch.py: an LD_PRELOAD library that replaces the
 * file named by SWAP_AFTER_STAT with a FIFO right after the process stat()s it, once. The
 * launcher checks a planned file with stat() and its prefetcher opens it later; this puts
 * the swap exactly in between, which a real race hits only now and then. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int stat(const char *path, struct stat *st) {
    static int (*real)(const char *, struct stat *);
    static int done;
    if (!real) real = (int (*)(const char *, struct stat *))dlsym(RTLD_NEXT, "stat");
    int rc = real(path, st);
    const char *target = getenv("SWAP_AFTER_STAT");
    if (rc == 0 && target && !done && strcmp(path, target) == 0) {
        done = 1;
        unlink(path);
        mkfifo(path, 0600);
    }
    return rc;
}
