/*
 * Page packs of a plan, run by the launcher itself: the userfaultfd pager's LD_PRELOAD
 * shim (built next to this binary as "<this binary>-pager.so") is preloaded into the
 * program and streams each pack into its file's mapping from the program's first mmap of
 * it. No Python starts: handing a pack over to the Python live machinery cost a run
 * ~850 ms of interpreter and imports before the program started (benchmarks/launch_overhead.py),
 * more than a pack saves on a program that runs for a fraction of a second.
 *
 * A pack is run only when its header names this very file (device and inode) with the
 * identity the plan recorded; any other (missing, malformed, another file's, stale) is
 * refused here with the warning the Python side prints for it, and the file is read on
 * demand. A pack of an ELF file (the dynamic loader maps those with calls the pager never
 * sees; the Python side warms their pages instead) or a per-fault policy the launcher
 * cannot run sends all the plan's packs to Python (one pager per program).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infile.h"
#include "launch.h"
#include "pager/pack.h"

/* The longest string exec passes on (the kernel's MAX_ARG_STRLEN is 32 pages). */
#define ENV_MAX (128 * 1024 - 1)

static int is_elf_path(const char *path) {
    struct stat st;
    int fd = pc_open_regular(path, O_RDONLY, &st);
    if (fd < 0) return 0;
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM); /* the header's page only: no read-ahead into the cache */
    char m[4];
    int elf = pread(fd, m, 4, 0) == 4 && memcmp(m, "\177ELF", 4) == 0;
    close(fd);
    return elf;
}

/* Whether f's pack is a current pack of f, as the pager will check it again; if not, the
 * reason in `why` (the words the Python side uses for the same refusal). */
static int pack_matches(const struct pcl_file *f, char *why, size_t n) {
    struct stat pst, src;
    int fd = pc_open_regular(f->arg, O_RDONLY, &pst);
    if (fd < 0) {
        snprintf(why, n, "pack %s not used (cannot open it: %s); the file is read on demand", f->arg,
                 pc_open_why(errno));
        return 0;
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM); /* the pager reads the rest itself (O_DIRECT) */
    struct pack_header h;
    int whole = pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && memcmp(h.magic, PGR_PACK_MAGIC, 8) == 0;
    close(fd);
    if (!whole || h.version != PGR_PACK_VERSION) {
        snprintf(why, n, "pack %s not used (%s); the file is read on demand", f->arg,
                 whole ? "a page pack of another version" : "not a page pack: bad or short header");
        return 0;
    }
    h.path[sizeof h.path - 1] = 0;
    if (stat(h.path, &src) < 0 || (uint64_t)src.st_dev != f->dev || (uint64_t)src.st_ino != f->ino) {
        snprintf(why, n, "pack %s is a pack of %s, not of this file; the file is read on demand", f->arg, h.path);
        return 0;
    }
    if (h.src_size != f->size || h.src_mtime_ns != f->mtime_ns || h.src_ctime_ns != f->ctime_ns ||
        h.src_ino != f->ino || h.src_dev != f->dev) {
        snprintf(why, n,
                 "pack %s not used (stale: the file changed since the pack was built); the file is read on demand",
                 f->arg);
        return 0;
    }
    return 1;
}

/* Append `s` to the list at w (',' between items; ',' and '\' escaped as the shim reads them). */
static char *put_item(char *w, const char *list, const char *s) {
    if (w != list) *w++ = ',';
    for (; *s; s++) {
        if (*s == ',' || *s == '\\') *w++ = '\\';
        *w++ = *s;
    }
    *w = 0;
    return w;
}

static void add_preload(const char *lib) {
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, lib)) return;
    if (!pre || !*pre) {
        setenv("LD_PRELOAD", lib, 1);
        return;
    }
    /* first: the pager sees the program's mmap before any other interposer */
    char *both = malloc(strlen(pre) + strlen(lib) + 2);
    sprintf(both, "%s:%s", lib, pre);
    setenv("LD_PRELOAD", both, 1);
    free(both);
}

int pcl_packs_setup(struct pcl_plan *plan, char *stats_dir, size_t stats_len) {
    int packs = 0;
    for (int i = 0; i < plan->nfiles; i++) {
        const struct pcl_file *f = &plan->files[i];
        if (f->status != PCL_ST_PENDING) continue;
        if (f->strategy == PCL_PER_FAULT) return 0; /* the live loop runs the packs beside it */
        packs += f->strategy == PCL_PACK;
    }
    if (!packs || getenv("PAGECAST_PAGER")) return 0; /* already under a pager: its own */
    char shim[4096 + 16];
    ssize_t len = readlink("/proc/self/exe", shim, 4096);
    if (len <= 0) return 0;
    shim[len] = 0;
    strcat(shim, "-pager.so");
    if (access(shim, R_OK) != 0) return 0;
    /* a pack of an ELF file goes to Python (which warms its pages instead), and with it the
     * plan's other packs: one pager per program */
    size_t cap = 0;
    for (int i = 0; i < plan->nfiles; i++) {
        const struct pcl_file *f = &plan->files[i];
        if (f->strategy != PCL_PACK || f->status != PCL_ST_PENDING) continue;
        char real[4096];
        if (!realpath(f->path, real) || is_elf_path(real)) return 0;
        cap += 2 * (strlen(real) + strlen(f->arg)) + 48;
    }
    if (cap > ENV_MAX) return 0;
    char *files = malloc(cap + 1), *pk = malloc(cap + 1), *wf = files, *wp = pk;
    *files = *pk = 0;
    int native = 0;
    for (int i = 0; i < plan->nfiles; i++) {
        struct pcl_file *f = &plan->files[i];
        char real[4096], spec[4096 + 32], why[2 * 4096 + 200];
        if (f->strategy != PCL_PACK || f->status != PCL_ST_PENDING || !realpath(f->path, real)) continue;
        if (!pack_matches(f, why, sizeof why)) {
            /* refused here, with the warning the Python side would print: not worth 0.85 s of
             * interpreter start-up to say so */
            f->status = PCL_ST_NOT_RUN;
            snprintf(f->detail, sizeof f->detail, "%.*s", (int)sizeof f->detail - 1, why);
            fprintf(stderr, "pagecast run: warning: %s: %s\n", f->path, why);
            continue;
        }
        snprintf(spec, sizeof spec, "%s:%llu", real, (unsigned long long)(f->size ? f->size : 1));
        wf = put_item(wf, files, spec);
        wp = put_item(wp, pk, f->arg);
        f->status = PCL_ST_NATIVE;
        snprintf(f->detail, sizeof f->detail, "page pack %.100s streamed by the userfaultfd pager in the program",
                 f->arg);
        native++;
    }
    if (native) {
        setenv("PAGECAST_PAGER", files, 1);
        setenv("PAGECAST_PAGER_PACK", pk, 1);
        setenv("PAGECAST_PAGER_POLICY", "none", 1);
        setenv("PAGECAST_PAGER_STRICT", "0", 1);
        if (stats_dir) {
            /* a 0700 directory of a random name: nobody can plant a file or link in it */
            const char *t = getenv("TMPDIR");
            snprintf(stats_dir, stats_len, "%s/pagecast-pager-XXXXXX", t && *t ? t : "/tmp");
            if (mkdtemp(stats_dir))
                setenv("PAGECAST_PAGER_STATS", stats_dir, 1);
            else
                stats_dir[0] = 0;
        }
        add_preload(shim);
    }
    free(files);
    free(pk);
    return native;
}

/* A path escaped as the pager's stats files write it. */
static void stats_escape(const char *s, char *out, size_t n) {
    size_t k = 0;
    for (; *s && k + 7 < n; s++) {
        if (*s == '"' || *s == '\\') out[k++] = '\\';
        if ((unsigned char)*s < 0x20) {
            k += (size_t)snprintf(out + k, n - k, "\\u%04x", (unsigned char)*s);
            continue;
        }
        out[k++] = *s;
    }
    out[k] = 0;
}

static char *read_small(const char *path) {
    FILE *f = fopen(path, "re");
    if (!f) return NULL;
    size_t cap = 4096, len = 0, r;
    char *s = malloc(cap);
    while ((r = fread(s + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (len + 1 == cap) s = realloc(s, cap *= 2);
    }
    s[len] = 0;
    fclose(f);
    return s;
}

void pcl_packs_report(struct pcl_plan *plan, const char *stats_dir, FILE *out) {
    char *all = malloc(1);
    size_t len = 0;
    all[0] = 0;
    DIR *d = stats_dir ? opendir(stats_dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "pager.", 6) != 0) continue;
        char p[4096 + 300];
        snprintf(p, sizeof p, "%s/%s", stats_dir, e->d_name);
        char *s = read_small(p);
        unlink(p);
        if (!s) continue;
        size_t n = strlen(s);
        while (n && (s[n - 1] == '\n' || s[n - 1] == ' ')) s[--n] = 0;
        all = realloc(all, len + strlen(s) + 8);
        len += (size_t)sprintf(all + len, "%s%s", len ? ", " : "", s);
        free(s);
    }
    if (d) closedir(d);
    if (stats_dir) rmdir(stats_dir);
    for (int i = 0; i < plan->nfiles; i++) {
        struct pcl_file *f = &plan->files[i];
        char real[4096], esc[8300], key[8400];
        if (f->strategy != PCL_PACK || f->status != PCL_ST_NATIVE || !realpath(f->path, real)) continue;
        stats_escape(real, esc, sizeof esc);
        snprintf(key, sizeof key, "\"path\": \"%s\"", esc);
        if (!strstr(all, key))
            fprintf(stderr,
                    "pagecast run: warning: %s: pack %s unused: the program never mapped the file (read with read() "
                    "or loaded by the dynamic loader?)\n",
                    real, f->arg);
    }
    fprintf(out, "{\"regions\": [%s]}", all);
    free(all);
}
