/*
 * The `pagecast` command of a regular install: `pagecast run --plan PLAN -- PROG` with no
 * Python interpreter in front of the program.
 *
 * setup.py compiles this file when the package is built (PAGECAST_FRONT_ID: the id of the
 * native sources the package ships, or for an editable install the id of this file alone,
 * pagecast.launch.front.editable_id) and installs it as `pagecast`, beside
 * `pagecast-python`, the Python command line (bin/pagecast). For a command line of the form
 * `run --plan FILE [--json] [--plan-status FILE] -- PROG ARGS` (exactly the set
 * pagecast.launch.command.planned_argv accepts) it execs the native launcher named by the
 * pointer file the Python side wrote for this id (pagecast.launch.front); anything else, or
 * a pointer that is missing or no longer valid, execs `pagecast-python` with the same
 * arguments, and the Python side validates the launcher and writes the pointer.
 *
 * Why a binary and not a shell script: a shell rebuilds the environment it passes on (dash
 * drops variables whose names are not identifiers, among them bash's exported functions,
 * resets IFS, PPID and OPTIND, adds or corrects PWD, reorders), for the planned program and
 * for every other pagecast command alike. This program passes the caller's environment,
 * arguments, signal dispositions and mask on untouched, so the launcher is asked not to
 * reset SIGPIPE/SIGXFSZ (the Python side must: Python ignores both).
 *
 * The pointer (${XDG_CACHE_HOME:-$HOME/.cache}/pagecast/native/pagecast-front-ID-DIRHASH) is trusted
 * only while every source file it lists still has the size and mtime it had when the
 * Python side checked that the launcher was built from them (for an editable install:
 * every file of the checkout's native/, which its owner edits).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef PAGECAST_FRONT_ID
#define PAGECAST_FRONT_ID "editable"
#endif

#define POINTER_MAGIC "pagecast-front 1"
#define PYTHON_ENTRY  "pagecast-python"
#define HINT_ENV      "PAGECAST_FRONT_ID"

struct planned {
    const char *plan, *status;
    int json, prog; /* prog: index of the program in argv */
};

/* pagecast.launch.command.planned_argv, on argv[1..]. */
static int planned_argv(int argc, char **argv, struct planned *p) {
    memset(p, 0, sizeof *p);
    if (argc < 5 || strcmp(argv[1], "run") != 0) return 0;
    int sep = 0;
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--") == 0) {
            sep = i;
            break;
        }
    if (!sep) return 0;
    for (int i = 2; i < sep; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--json") == 0)
            p->json = 1;
        else if ((strcmp(o, "--plan") == 0 || strcmp(o, "--plan-status") == 0) && i + 1 < sep) {
            if (o[6] == '\0')
                p->plan = argv[i + 1];
            else
                p->status = argv[i + 1];
            i++;
        } else if (strncmp(o, "--plan=", 7) == 0)
            p->plan = o + 7;
        else if (strncmp(o, "--plan-status=", 14) == 0)
            p->status = o + 14;
        else
            return 0;
    }
    if (!p->plan || !*p->plan || sep + 1 >= argc) return 0;
    p->prog = sep + 1;
    return 1;
}

static int set_env(const char *name) {
    const char *v = getenv(name);
    return v && *v;
}

static int valid_id(const char *id) {
    size_t n = strlen(id);
    if (n < 16) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) return 0;
    return 1;
}

/* One line without its newline; 0 at EOF or for a line too long. */
static int read_line(FILE *f, char *buf, size_t size) {
    if (!fgets(buf, (int)size, f)) return 0;
    size_t n = strlen(buf);
    if (n == 0 || buf[n - 1] != '\n') return 0;
    buf[n - 1] = '\0';
    return 1;
}

/* The interpreter pip wrote into the first line of pagecast-python ("#!/abs/python"). */
static int python_of(const char *entry, char *py, size_t size) {
    FILE *f = fopen(entry, "re");
    if (!f) return 0;
    char line[PATH_MAX + 8];
    int ok = read_line(f, line, sizeof line) && line[0] == '#' && line[1] == '!' && line[2] == '/' &&
             !strpbrk(line + 2, " \t") && strlen(line + 2) < size;
    fclose(f);
    if (!ok) return 0;
    strcpy(py, line + 2);
    return access(py, X_OK) == 0;
}

/* This installation's pointer key: the id and an FNV-1a hash of the directory the front is
 * in, so two installations of the same sources never use each other's pointer (pagecast.launch.front's
 * pointer_key computes the same). */
static void pointer_key(const char *dir, char *key, size_t size) {
    unsigned long long h = 0xcbf29ce484222325ULL;
    for (const unsigned char *c = (const unsigned char *)dir; *c; c++) h = (h ^ *c) * 0x100000001b3ULL;
    snprintf(key, size, "%s-%016llx", PAGECAST_FRONT_ID, h);
}

/* The launcher a valid pointer names; 0 if there is none, or a listed source changed. */
static int launcher_of(const char *key, char *launcher, size_t size) {
    const char *base = getenv("XDG_CACHE_HOME");
    const char *suffix = "";
    if (!base || !*base) {
        base = getenv("HOME");
        suffix = "/.cache";
    }
    if (!base || base[0] != '/') return 0;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s%s/pagecast/native/pagecast-front-%s", base, suffix, key) >= (int)sizeof path)
        return 0;
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    char native[PATH_MAX], line[PATH_MAX + 64];
    int ok = read_line(f, line, sizeof line) && strcmp(line, POINTER_MAGIC) == 0 && read_line(f, launcher, size) &&
             launcher[0] == '/' && read_line(f, native, sizeof native) && native[0] == '/';
    int files = 0;
    while (ok && read_line(f, line, sizeof line)) {
        /* "SIZE MTIME_NS REL": checked like pagecast.launch.binary's stamp */
        long long want_size, want_mtime;
        int at;
        char file[2 * PATH_MAX];
        struct stat st;
        if (sscanf(line, "%lld %lld %n", &want_size, &want_mtime, &at) != 2 ||
            snprintf(file, sizeof file, "%s/%s", native, line + at) >= (int)sizeof file || stat(file, &st) != 0 ||
            st.st_size != want_size || (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec != want_mtime)
            ok = 0;
        files++;
    }
    ok = ok && files > 0 && !ferror(f) && feof(f);
    fclose(f);
    return ok && access(launcher, X_OK) == 0;
}

/* The directory this program is in: /proc/self/exe (a symlink to it, as pipx makes, is
 * followed); without /proc, argv[0] as the caller's exec found it (a bare name: on PATH). */
static int self_dir(const char *arg0, char *dir, size_t size) {
    ssize_t n = readlink("/proc/self/exe", dir, size - 1);
    if (n > 0) {
        dir[n] = '\0';
    } else if (strchr(arg0, '/')) {
        if (snprintf(dir, size, "%s", arg0) >= (int)size) return 0;
    } else {
        const char *path = getenv("PATH");
        int found = 0;
        while (path && *path && !found) {
            size_t len = strcspn(path, ":");
            found =
                len > 0 && snprintf(dir, size, "%.*s/%s", (int)len, path, arg0) < (int)size && access(dir, X_OK) == 0;
            path += len + (path[len] == ':');
        }
        if (!found) return 0;
    }
    char *slash = strrchr(dir, '/');
    if (!slash) return 0;
    *slash = '\0';
    return 1;
}

int main(int argc, char **argv) {
    char dir[PATH_MAX], entry[PATH_MAX + 32], key[128];
    if (argc < 1 || !self_dir(argv[0], dir, sizeof dir)) {
        fprintf(stderr, "pagecast: cannot find where this command is installed (no /proc/self/exe)\n");
        return 127;
    }
    snprintf(entry, sizeof entry, "%s/%s", dir, PYTHON_ENTRY);
    pointer_key(dir, key, sizeof key);
    struct planned p;
    /* the same conditions as the Python side's fast path, plus a usable id */
    if (valid_id(PAGECAST_FRONT_ID) && planned_argv(argc, argv, &p) && !set_env("PAGECAST_PLAN_HANDOVER") &&
        !set_env("PAGECAST_NATIVE_DIR") && !set_env("PAGECAST_BUILD_DIR")) {
        char launcher[PATH_MAX], py[PATH_MAX];
        if (launcher_of(key, launcher, sizeof launcher) && python_of(entry, py, sizeof py)) {
            int n = argc - p.prog;
            char **av = calloc((size_t)n + 10, sizeof *av);
            if (av) {
                int k = 0;
                av[k++] = launcher;
                av[k++] = "--python";
                av[k++] = py;
                if (p.json) av[k++] = "--wait";
                if (p.status && *p.status) {
                    av[k++] = "--status";
                    av[k++] = (char *)p.status;
                }
                av[k++] = (char *)p.plan;
                av[k++] = "--";
                for (int i = p.prog; i < argc; i++) av[k++] = argv[i];
                execv(launcher, av);
                free(av); /* not executable after all: the Python side sorts it out */
            }
        }
        setenv(HINT_ENV, key, 1); /* ask the Python side to (re)write the pointer */
    }
    argv[0] = entry;
    execv(entry, argv);
    fprintf(stderr, "pagecast: cannot run %s (%s): reinstall pagecast\n", entry, strerror(errno));
    return 127;
}
