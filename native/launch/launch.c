/*
 * pagecast-launch: start a program with its plan's prefetching, at no start-up cost.
 *
 *   pagecast-launch [--wait] [--status FILE] [--python PY] [--prefetch-only] PLAN [-- PROG ARGS...]
 *
 * Default (exec) mode: parse PLAN, check each file's identity, fork the prefetcher, and
 * exec PROG in this very process. So PROG keeps the pid the caller started, the same
 * stdin/stdout/stderr, process group, session and signal dispositions, and its exit status
 * (or the signal that killed it) is seen by the caller directly: nothing of pagecast sits
 * between them. The prefetcher is a grandchild: the launcher forks a child that forks the
 * prefetcher and exits at once, and the launcher reaps that child before it execs. PROG
 * therefore has no child it did not create (a program that calls wait() for "any child",
 * like a shell, never reaps or waits for ours), and the prefetcher is reparented to init
 * (or the nearest subreaper). A thread cannot do this job: exec ends every thread.
 * The prefetcher holds a pidfd of PROG and stops when it exits; its stdin/stdout/stderr
 * are /dev/null, so a caller reading PROG's output (a pipe, `$(...)`) sees EOF when PROG
 * exits, not when the prefetcher does.
 *
 * --wait: PROG runs as a child and the launcher reports afterwards: it waits for PROG,
 * then the prefetcher, and prints one JSON object on stdout (PROG's stdout goes to
 * stderr, as in every `pagecast run --json`). SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 are
 * forwarded to PROG; SIGINT and SIGQUIT are ignored here because the terminal delivers
 * them to PROG itself. Exit status: PROG's, 128+N if it was killed by signal N.
 *
 * Plans with a pack or per-fault strategy need the Python live machinery
 * (src/pagecast/launch, live, pager): the launcher starts the warm/stream prefetching, then execs
 * `PY -m pagecast run --plan PLAN -- PROG ARGS` with PAGECAST_PLAN_HANDOVER naming the
 * prefetcher's status file ("-": none is written), and the Python side runs the rest.
 *
 * --prefetch-only: start the prefetcher for PLAN's warm/stream files and exit.
 *
 * A plan with the option `issue before` (format version 3) has its warm files issued by
 * this process, before PROG is exec'd (or forked, with --wait): posix_fadvise(WILLNEED)
 * per CHUNK_KIB of each range, synchronously, in plan order, at the caller's priority, as
 * the kernel strategy "WILLNEED every file before start" does. Only stream files are left
 * to a prefetcher, and none is forked when nothing is left for it.
 *
 * --restore-signals: reset SIGPIPE and SIGXFSZ to their default action first. An ignored
 * signal stays ignored across exec, and the Python interpreter that execs this launcher
 * ignores both at start-up; without this, PROG would inherit that (a `yes | head` would
 * see EPIPE instead of dying quietly). subprocess does the same for its children.
 *
 * A plan that cannot be used (unreadable, corrupt, wrong version) costs one warning line
 * and PROG runs without it; a stale or missing file costs one warning naming it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

extern char **environ;

struct opts {
    int wait_mode, prefetch_only, restore_signals;
    const char *status, *python, *plan;
    char **prog;
};

static int usage(void) {
    fprintf(stderr,
            "usage: pagecast-launch [--wait] [--status FILE] [--python PY] [--prefetch-only] [--restore-signals] "
            "PLAN [-- PROG ARGS...]\n");
    return 2;
}

static int parse_args(int argc, char **argv, struct opts *o) {
    memset(o, 0, sizeof *o);
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--wait") == 0)
            o->wait_mode = 1;
        else if (strcmp(argv[i], "--prefetch-only") == 0)
            o->prefetch_only = 1;
        else if (strcmp(argv[i], "--restore-signals") == 0)
            o->restore_signals = 1;
        else if (strcmp(argv[i], "--status") == 0 && i + 1 < argc)
            o->status = argv[++i];
        else if (strcmp(argv[i], "--python") == 0 && i + 1 < argc)
            o->python = argv[++i];
        else if (strcmp(argv[i], "--") == 0)
            break;
        else if (!o->plan && argv[i][0] != '-')
            o->plan = argv[i];
        else
            return -1;
    }
    if (!o->plan) return -1;
    if (i < argc) o->prog = &argv[i + 1]; /* argv[argc] is NULL: an empty command has prog[0] == NULL */
    if (!o->prefetch_only && (!o->prog || !o->prog[0])) return -1;
    return 0;
}

static int pidfd_of(pid_t pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

static void to_devnull(void) {
    int fd = open("/dev/null", O_RDWR);
    if (fd < 0) return;
    dup2(fd, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    if (fd > 2) close(fd);
}

static void close_range_or_loop(unsigned lo, unsigned hi) {
    if (lo > hi || close_range(lo, hi, 0) == 0) return;
    long max = sysconf(_SC_OPEN_MAX);
    for (long fd = lo; fd <= (long)hi && fd < (max > 0 && max < 65536 ? max : 65536); fd++) close((int)fd);
}

/* The prefetcher keeps only its stop pidfd: every other descriptor it was forked with is
 * the caller's or the program's (a pipe whose reader waits for EOF, a lock file) and must
 * close when the program closes it, not when the prefetcher is done. */
static void close_inherited(int stop_fd) {
    if (stop_fd < 3) {
        close_range_or_loop(3, ~0U);
        return;
    }
    close_range_or_loop(3, (unsigned)stop_fd - 1);
    close_range_or_loop((unsigned)stop_fd + 1, ~0U);
}

/* Fork the prefetcher. detach: double fork, so it is not our child after we exec. */
static pid_t start_prefetcher(struct pcl_plan *plan, int stop_fd, const char *status, int detach, int close_fd) {
    pid_t c = fork();
    if (c < 0) return -1;
    if (c == 0) {
        if (close_fd >= 0) close(close_fd); /* e.g. the pipe that releases PROG: it must not wait for us */
        if (detach) {
            pid_t g = fork();
            if (g != 0) _exit(0);
        }
        to_devnull();
        close_inherited(stop_fd);
        pcl_lower_priority();
        pcl_prefetch_run(plan, stop_fd, status);
        _exit(0);
    }
    if (detach) {
        while (waitpid(c, NULL, 0) < 0 && errno == EINTR);
        return 0;
    }
    return c;
}

static int exec_prog(char **prog) {
    execvp(prog[0], prog);
    int e = errno;
    fprintf(stderr, "pagecast run: error: cannot run %s (%s)\n", prog[0], strerror(e));
    return e == ENOENT ? 127 : 126;
}

static int plan_needs_python(const struct pcl_plan *plan) {
    for (int i = 0; i < plan->nfiles; i++) {
        const struct pcl_file *f = &plan->files[i];
        if ((f->strategy == PCL_PACK || f->strategy == PCL_PER_FAULT) && f->status == PCL_ST_PENDING) return 1;
    }
    return 0;
}

/* The report the prefetcher writes for this process alone (--wait without --status) lives
 * in a directory of its own, made by mkdtemp (0700, random name): a name in $TMPDIR that
 * anyone could guess (and plant a symlink at) is never written, read or removed. */
static int private_status(char *status, size_t n) {
    const char *t = getenv("TMPDIR");
    char dir[4000];
    snprintf(dir, sizeof dir, "%s/pagecast-launch-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "pagecast run: warning: cannot create a private directory in %s (%s); no prefetch report\n",
                t && *t ? t : "/tmp", strerror(errno));
        return -1;
    }
    snprintf(status, n, "%s/status.json", dir);
    return 0;
}

static void remove_private_status(const char *status) {
    unlink(status);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", status);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    rmdir(dir);
}

static int handover(const struct opts *o, struct pcl_plan *plan, int stop_fd, int native) {
    /* a status file only when someone reads it: the user (--status) or the --json report */
    char status[4096] = "-";
    if (o->status)
        snprintf(status, sizeof status, "%s", o->status);
    else if (o->wait_mode && private_status(status, sizeof status) < 0)
        snprintf(status, sizeof status, "-");
    const char *status_path = strcmp(status, "-") ? status : NULL;
    for (int i = 0; i < plan->nfiles; i++)
        if (plan->files[i].status == PCL_ST_PENDING &&
            (plan->files[i].strategy == PCL_PACK || plan->files[i].strategy == PCL_PER_FAULT))
            plan->files[i].status = PCL_ST_HANDED_OVER;
    if (native)
        start_prefetcher(plan, stop_fd, status_path, 1, -1);
    else if (status_path)
        pcl_prefetch_run(plan, -1, status_path);
    int n = 0;
    for (char **p = o->prog; *p; p++) n++;
    char **argv = calloc((size_t)n + 9, sizeof *argv);
    int k = 0;
    argv[k++] = (char *)o->python;
    argv[k++] = "-m";
    argv[k++] = "pagecast";
    argv[k++] = "run";
    argv[k++] = "--plan";
    argv[k++] = (char *)o->plan;
    if (o->wait_mode) argv[k++] = "--json";
    argv[k++] = "--";
    for (int i = 0; i < n; i++) argv[k++] = o->prog[i];
    setenv("PAGECAST_PLAN_HANDOVER", status, 1);
    execv(o->python, argv);
    fprintf(stderr,
            "pagecast run: warning: cannot start %s for the plan's pack/per-fault files (%s); running without them\n",
            o->python, strerror(errno));
    unsetenv("PAGECAST_PLAN_HANDOVER");
    return exec_prog(o->prog);
}

/* The advice shim (built next to this binary as "<this binary>-advice.so") does the plan's
 * work inside the program, through LD_PRELOAD: per-file read-ahead advice
 * (PAGECAST_ADVICE_FILES), the per-fault `extent` policy on read()s (PAGECAST_EXTENT_FILES)
 * and the live feedback counts (PAGECAST_FEEDBACK). Files are named by device and inode,
 * and only files whose identity was checked are listed. Without the shim: one warning, and
 * the program runs with the kernel's default advice, no extent and no feedback. */
/* The longest string exec passes on (the kernel's MAX_ARG_STRLEN is 32 pages): a longer
 * variable makes execve fail with E2BIG, and the program would not start. */
#define ENV_MAX (128 * 1024 - 1)

static void setup_shim(struct pcl_plan *plan) {
    size_t nadv = 0, next = 0;
    for (int i = 0; i < plan->nfiles; i++) {
        nadv += plan->files[i].advice_ok;
        next += plan->files[i].status == PCL_ST_NATIVE;
    }
    if (!nadv && !next && !plan->fb) return;
    char shim[4096 + 16];
    ssize_t len = readlink("/proc/self/exe", shim, 4096);
    if (len > 0) {
        shim[len] = 0;
        strcat(shim, "-advice.so");
    }
    if (len <= 0 || access(shim, R_OK) != 0) {
        fprintf(stderr,
                "pagecast run: warning: the advice shim is not available (%s); the program keeps the kernel's "
                "default read-ahead, without extent prefetch or live feedback\n",
                len > 0 ? shim : "cannot find the launcher");
        for (int i = 0; i < plan->nfiles; i++) {
            struct pcl_file *f = &plan->files[i];
            f->advice_ok = 0;
            if (f->status == PCL_ST_NATIVE) {
                f->status = PCL_ST_UNAVAILABLE;
                snprintf(f->detail, sizeof f->detail, "%s needs the advice shim; not used", f->arg);
            }
            if (f->fb == PCL_FB_WAITING) f->fb = PCL_FB_OFF;
        }
        if (plan->fb_path[0]) unlink(plan->fb_path);
        plan->fb_path[0] = 0;
        plan->fb = NULL;
        return;
    }
    char *list = malloc((nadv + next) * 96 + 1), *w = list;
    *w = 0;
    int dropped = 0;
    for (int i = 0; i < plan->nfiles; i++) {
        struct pcl_file *f = &plan->files[i];
        if (!f->advice_ok) continue;
        if (w - list > ENV_MAX - 64) { /* one more entry would not fit in one variable */
            f->advice_ok = 0;
            dropped++;
            continue;
        }
        w += sprintf(w, "%s%c:%llu:%llu", w == list ? "" : ",", pcl_advice_names[f->advice][0],
                     (unsigned long long)f->dev, (unsigned long long)f->ino);
    }
    if (dropped)
        fprintf(
            stderr,
            "pagecast run: warning: read-ahead advice for %d of the plan's files left to the kernel's default (more "
            "than one environment variable can name)\n",
            dropped);
    if (nadv) setenv("PAGECAST_ADVICE_FILES", list, 1);
    w = list;
    *w = 0;
    for (int i = 0; i < plan->nfiles; i++) {
        struct pcl_file *f = &plan->files[i];
        if (f->status == PCL_ST_NATIVE && !f->obj_pages)
            w += sprintf(w, "%s%llu:%llu:%lld:%lld:%lld", w == list ? "" : ",", (unsigned long long)f->dev,
                         (unsigned long long)f->ino, (long long)((f->size + 4095) / 4096), (long long)f->ext_degree,
                         (long long)f->ext_max_pages);
    }
    if (*list) setenv("PAGECAST_EXTENT_FILES", list, 1);
    w = list;
    *w = 0;
    for (int i = 0; i < plan->nfiles; i++) {
        struct pcl_file *f = &plan->files[i];
        if (f->status == PCL_ST_NATIVE && f->obj_pages)
            w += sprintf(w, "%s%llu:%llu:%lld:%lld", w == list ? "" : ",", (unsigned long long)f->dev,
                         (unsigned long long)f->ino, (long long)f->obj_pages, (long long)f->obj_align);
    }
    if (*list) setenv("PAGECAST_OBJECT_FILES", list, 1);
    free(list);
    if (plan->fb) setenv("PAGECAST_FEEDBACK", plan->fb_path, 1);
    const char *pre = getenv("LD_PRELOAD");
    if (pre && *pre && !strstr(pre, shim)) {
        char *both = malloc(strlen(pre) + strlen(shim) + 2);
        sprintf(both, "%s:%s", pre, shim);
        setenv("LD_PRELOAD", both, 1);
        free(both);
    } else if (!pre || !*pre) {
        setenv("LD_PRELOAD", shim, 1);
    }
}

/* PAGECAST_PLAN_FEEDBACK: "off", or MIN_SAMPLE:MIN_RATIO:BATCH_PAGES (see prefetch.c). */
static void feedback_config(struct pcl_feedback_cfg *c) {
    *c = (struct pcl_feedback_cfg){.on = 1, .min_sample = 64, .min_ratio = 1.0 / 16, .batch = 1024};
    const char *e = getenv("PAGECAST_PLAN_FEEDBACK");
    if (!e || !*e) return;
    long long m, b;
    double r;
    if (strcmp(e, "off") == 0)
        c->on = 0;
    else if (sscanf(e, "%lld:%lf:%lld", &m, &r, &b) == 3 && m >= 1 && r >= 0 && r <= 1 && b >= 0)
        *c = (struct pcl_feedback_cfg){.on = 1, .min_sample = m, .min_ratio = r, .batch = b};
    else
        fprintf(stderr,
                "pagecast run: warning: PAGECAST_PLAN_FEEDBACK=%s: expected 'off' or MIN_SAMPLE:MIN_RATIO:BATCH_PAGES "
                "(e.g. 64:0.0625:1024); using the defaults\n",
                e);
}

static volatile pid_t g_child;

static void forward(int sig) {
    if (g_child > 0) kill(g_child, sig);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* --wait: PROG as a child, then one JSON report on stdout. */
static int run_and_report(const struct opts *o, struct pcl_plan *plan, int plan_ok, const char *plan_err, int native,
                          const char *pager_stats) {
    char status[4096] = "";
    int own_status = !o->status;
    if (o->status)
        snprintf(status, sizeof status, "%s", o->status);
    else if (plan_ok && private_status(status, sizeof status) < 0)
        status[0] = 0;
    const char *status_path = status[0] ? status : NULL;
    fflush(stdout);
    double t0 = now_s();
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0) return 126;
    pid_t child = fork();
    if (child == 0) {
        char c;
        dup2(2, 1); /* stdout carries the JSON report */
        close(pipefd[1]);
        /* wait until the parent has the pidfd and the prefetcher is started */
        while (read(pipefd[0], &c, 1) < 0 && errno == EINTR);
        _exit(exec_prog(o->prog));
    }
    close(pipefd[0]);
    g_child = child;
    struct sigaction sa = {.sa_handler = forward};
    sigemptyset(&sa.sa_mask);
    int fwd[] = {SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
    for (unsigned i = 0; i < sizeof fwd / sizeof *fwd; i++) sigaction(fwd[i], &sa, NULL);
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    int stop_fd = pidfd_of(child);
    pid_t pf = -1;
    if (plan_ok && native)
        pf = start_prefetcher(plan, stop_fd, status_path, 0, pipefd[1]);
    else if (plan_ok)
        pcl_prefetch_run(plan, -1, status_path);
    close(pipefd[1]); /* release PROG */
    int ws = 0;
    while (waitpid(child, &ws, 0) < 0 && errno == EINTR);
    double wall = now_s() - t0 + plan->before_ns / 1e9; /* `issue before` ran in front of PROG: its cost */
    if (pf > 0)
        while (waitpid(pf, NULL, 0) < 0 && errno == EINTR);
    int rc = WIFSIGNALED(ws) ? -WTERMSIG(ws) : WEXITSTATUS(ws);
    int exit_status = rc < 0 ? 128 - rc : rc;
    printf("{\n  \"mode\": \"plan\",\n  \"plan\": ");
    pcl_json_str(stdout, o->plan);
    printf(",\n  \"plan_error\": ");
    if (plan_ok)
        printf("null");
    else
        pcl_json_str(stdout, plan_err);
    printf(",\n  \"returncode\": %d,\n  \"exit_status\": %d,\n  \"wall_s\": %.6f,\n", rc, exit_status, wall);
    char *st = NULL;
    FILE *f = plan_ok && status_path ? fopen(status, "re") : NULL;
    if (f) {
        size_t cap = 1 << 16, len = 0;
        st = malloc(cap);
        size_t r;
        while ((r = fread(st + len, 1, cap - len - 1, f)) > 0) {
            len += r;
            if (len + 1 == cap) st = realloc(st, cap *= 2);
        }
        st[len] = 0;
        fclose(f);
    }
    if (own_status && status_path) remove_private_status(status);
    /* the status object is {"prefetch": ..., "files": [...]}: splice its members in */
    char *open_brace = st ? strchr(st, '{') : NULL, *close_brace = st ? strrchr(st, '}') : NULL;
    if (open_brace && close_brace && close_brace > open_brace) {
        *close_brace = 0;
        printf("  %s,\n", open_brace + 1);
    } else {
        printf("  \"prefetch\": null,\n  \"files\": [],\n");
    }
    if (pager_stats) {
        printf("  \"live\": ");
        pcl_packs_report(plan, pager_stats, stdout);
        printf("\n}\n");
    } else {
        printf("  \"live\": null\n}\n");
    }
    fflush(stdout);
    free(st);
    return exit_status;
}

int main(int argc, char **argv) {
    struct opts o;
    if (parse_args(argc, argv, &o) < 0) return usage();
    if (o.restore_signals) {
        signal(SIGPIPE, SIG_DFL);
        signal(SIGXFSZ, SIG_DFL);
    }
    struct pcl_plan plan;
    char err[512], pager_stats[4096] = "";
    int plan_ok = pcl_plan_read(o.plan, &plan, err, sizeof err) == 0;
    if (!plan_ok) fprintf(stderr, "pagecast run: warning: %s: %s; running the program without it\n", o.plan, err);
    int native = plan_ok ? pcl_plan_open(&plan) : 0;
    /* `issue before`: the warm files are issued here, before anything else starts; only
     * stream files are left to a prefetcher (none forked when none are left) */
    if (plan_ok && plan.issue == PCL_ISSUE_BEFORE) native = pcl_issue_before(&plan);
    if (plan_ok && !o.prefetch_only) {
        feedback_config(&plan.fbcfg);
        if (native) pcl_feedback_setup(&plan);
        setup_shim(&plan);
        /* --json: the pager's counters go to a private directory, made only for a plan with packs */
        if (pcl_packs_setup(&plan, o.wait_mode ? pager_stats : NULL, sizeof pager_stats) == 0) pager_stats[0] = 0;
        /* the prefetcher outlives its work to report the program's final use of the plan;
		 * not on a hand-over, whose Python side collects the report when the program exits */
        plan.wait_exit = !plan_needs_python(&plan) || !o.python;
    }
    if (o.prefetch_only) {
        if (native)
            start_prefetcher(&plan, -1, o.status, 1, -1);
        else if (plan_ok && o.status)
            pcl_prefetch_run(&plan, -1, o.status);
        return plan_ok ? 0 : 2;
    }
    if (plan_ok && plan_needs_python(&plan)) {
        if (o.python) {
            /* the pidfd must name the process that will become PROG: this one */
            return handover(&o, &plan, pidfd_of(getpid()), native);
        }
        for (int i = 0; i < plan.nfiles; i++) {
            struct pcl_file *f = &plan.files[i];
            if ((f->strategy == PCL_PACK || f->strategy == PCL_PER_FAULT) && f->status == PCL_ST_PENDING) {
                f->status = PCL_ST_UNAVAILABLE;
                snprintf(f->detail, sizeof f->detail, "%s needs pagecast's Python live machinery; not used",
                         pcl_strategy_names[f->strategy]);
                fprintf(stderr, "pagecast run: warning: %s: %s\n", f->path, f->detail);
            }
        }
    }
    if (o.wait_mode) return run_and_report(&o, &plan, plan_ok, err, native, pager_stats[0] ? pager_stats : NULL);
    if (native)
        start_prefetcher(&plan, pidfd_of(getpid()), o.status, 1, -1);
    else if (plan_ok && o.status)
        pcl_prefetch_run(&plan, -1, o.status);
    return exec_prog(o.prog);
}
