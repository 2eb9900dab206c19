/*
 * Plan file parser for the launcher. The format (line-based text, CRC-32 over the body)
 * is specified in src/pagecast/plan/format.py; this parser refuses a plan as a whole on
 * any defect so that a damaged plan is never half-applied.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infile.h"
#include "launch.h"

const char *const pcl_strategy_names[PCL_NSTRATEGIES] = {"nothing", "warm", "stream", "pack", "per-fault"};
const char *const pcl_advice_names[PCL_NADVICES] = {"default", "random", "sequential"};
const char *const pcl_status_names[] = {"nothing",     "pending",     "warmed", "stopped", "stale",     "missing",
                                        "handed-over", "unavailable", "error",  "native",  "cancelled", "not-run"};
const char *const pcl_issue_names[PCL_NISSUES] = {"beside", "before"};
const char *const pcl_feedback_names[PCL_NFEEDBACK] = {"none",      "off",    "waiting", "paying",
                                                       "cancelled", "mapped", "elf"};

static uint32_t crc32_ieee(const unsigned char *p, size_t n) {
    static uint32_t table[256];
    if (!table[1]) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Percent-decode a field in place ("-" is the empty string). */
static int unescape(char *s) {
    if (s[0] == '-' && s[1] == 0) {
        s[0] = 0;
        return 0;
    }
    char *w = s;
    for (char *r = s; *r; r++) {
        if (*r == '%') {
            int a = hexval(r[1]), b = a < 0 ? -1 : hexval(r[2]);
            if (b < 0) return -1;
            *w++ = (char)(a * 16 + b);
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = 0;
    return 0;
}

/* The lexical rules below are the format's, shared with the Python reader
 * (src/pagecast/plan/format.py, "Lexical rules"): an integer is -?[0-9]+ within 64 bits,
 * a decimal -?[0-9]+(.[0-9]+)?, nothing else (no sign '+', no blanks, no exponent, no
 * nan/inf), so the two readers accept exactly the same plans. */
static int digits(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

static int parse_i64(const char *s, int64_t *out) {
    char *end;
    if (!digits(s[0] == '-' ? s + 1 : s)) return -1;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

static int parse_decimal(const char *s, double *out) {
    const char *dot = strchr(s, '.');
    char whole[64];
    size_t n = dot ? (size_t)(dot - s) : strlen(s);
    if (n >= sizeof whole) return -1;
    memcpy(whole, s, n);
    whole[n] = 0;
    if (!digits(whole[0] == '-' ? whole + 1 : whole) || (dot && !digits(dot + 1))) return -1;
    *out = strtod(s, NULL);
    return 0;
}

/* Split line (NUL-terminated, modified) at single spaces into at most max fields. */
static int split(char *line, char **f, int max) {
    int n = 0;
    for (char *p = line;;) {
        if (n == max) return max + 1;
        f[n++] = p;
        char *sp = strchr(p, ' ');
        if (!sp) return n;
        *sp = 0;
        p = sp + 1;
    }
}

static int read_all(const char *path, char **buf, size_t *len, char *err, size_t errlen) {
    struct stat st;
    int fd = pc_open_regular(path, O_RDONLY, &st); /* a FIFO given as the plan must not block the launch */
    if (fd < 0) {
        if (errno == EINVAL)
            snprintf(err, errlen, "not a regular file");
        else
            snprintf(err, errlen, "cannot read plan (%s)", strerror(errno));
        return -1;
    }
    *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, *buf + got, (size_t)st.st_size - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    (*buf)[got] = 0;
    *len = got;
    return 0;
}

#define FAIL(...)                                                                                                      \
    do {                                                                                                               \
        snprintf(err, errlen, __VA_ARGS__);                                                                            \
        goto fail;                                                                                                     \
    } while (0)

/* Version 3: the plan options before the first file record, from ``*linep`` on (advanced past
 * them). An unknown key refuses the plan: it was written by a newer pagecast, and half of
 * its intent is worse than none. */
static int parse_options(struct pcl_plan *plan, char **linep, char *end, int *linenop, char *err, size_t errlen) {
    char *line = *linep;
    int lineno = *linenop;
    for (int seen = 0; line < end && strncmp(line, "opt ", 4) == 0; lineno++) {
        char *next = strchr(line, '\n');
        if (next) *next = 0;
        char *o[4];
        if (split(line, o, 3) != 3) FAIL("not a usable plan: line %d: expected an option 'opt KEY VALUE'", lineno);
        int key = strcmp(o[1], "issue") == 0 ? 1 : strcmp(o[1], "note") == 0 ? 2 : 0;
        if (!key)
            FAIL("not a usable plan: line %d: unknown option '%.40s' (this launcher knows issue, note; written by a "
                 "newer pagecast?)",
                 lineno, o[1]);
        if (seen & key) FAIL("not a usable plan: line %d: option '%s' given twice", lineno, o[1]);
        seen |= key;
        if (unescape(o[2]) < 0) FAIL("not a usable plan: line %d: bad %%-escape in option '%s'", lineno, o[1]);
        if (key == 2) {
            plan->note = o[2];
        } else {
            int k;
            for (k = 0; k < PCL_NISSUES; k++)
                if (strcmp(o[2], pcl_issue_names[k]) == 0) break;
            if (k == PCL_NISSUES)
                FAIL("not a usable plan: line %d: unknown issue option '%.40s' (valid: beside, before)", lineno, o[2]);
            plan->issue = (enum pcl_issue)k;
        }
        line = next ? next + 1 : end;
    }
    *linep = line;
    *linenop = lineno;
    return 0;
fail:
    return -1;
}

/* One 'file' record (its fields ``f``) and the range lines after it; ``*linep``, ``*nextp``
 * and ``*linenop`` end at its last range line. */
static int parse_file(struct pcl_file *pf, char **f, int nfields, char **linep, char **nextp, char *end, int *linenop,
                      char *err, size_t errlen) {
    char *line = *linep, *next = *nextp;
    int lineno = *linenop;
    int64_t v[5], depth, chunk, nr;
    for (int i = 0; i < 5; i++)
        if (parse_i64(f[2 + i], &v[i]) < 0) FAIL("not a usable plan: line %d: bad identity field", lineno);
    pf->size = (uint64_t)v[0];
    pf->mtime_ns = v[1];
    pf->ctime_ns = v[2];
    pf->ino = (uint64_t)v[3];
    pf->dev = (uint64_t)v[4];
    int s;
    for (s = 0; s < PCL_NSTRATEGIES; s++)
        if (strcmp(f[7], pcl_strategy_names[s]) == 0) break;
    if (s == PCL_NSTRATEGIES) FAIL("not a usable plan: line %d: unknown strategy '%.40s'", lineno, f[7]);
    pf->strategy = (enum pcl_strategy)s;
    pf->advice = PCL_ADV_DEFAULT;
    if (nfields == 15) {
        int a;
        for (a = 0; a < PCL_NADVICES; a++)
            if (strcmp(f[13], pcl_advice_names[a]) == 0) break;
        if (a == PCL_NADVICES) FAIL("not a usable plan: line %d: unknown advice '%.40s'", lineno, f[13]);
        pf->advice = (enum pcl_advice)a;
    }
    if (parse_i64(f[8], &depth) < 0 || depth < 1 || depth > 64 || parse_i64(f[9], &chunk) < 0 || chunk < 4 ||
        chunk > (1 << 20) || parse_i64(f[nfields - 1], &nr) < 0 || nr < 0)
        FAIL("not a usable plan: line %d: bad depth, chunk or range count", lineno);
    pf->depth = (int)depth;
    pf->chunk_kib = chunk;
    if (parse_decimal(f[10], &pf->gain_ms) < 0) FAIL("not a usable plan: line %d: bad gain '%.40s'", lineno, f[10]);
    if (unescape(f[1]) < 0 || unescape(f[11]) < 0 || unescape(f[12]) < 0)
        FAIL("not a usable plan: line %d: bad %%-escape", lineno);
    pf->path = f[1];
    pf->arg = f[11];
    pf->reason = f[12];
    if ((pf->strategy == PCL_PACK || pf->strategy == PCL_PER_FAULT) && !*pf->arg)
        FAIL("not a usable plan: line %d: strategy %s needs an argument (pack file or policy)", lineno,
             pcl_strategy_names[pf->strategy]);
    pf->fd = -1;
    pf->fb_slot = -1;
    /* every range line takes at least 6 bytes ("r 0 1\n"): a larger count cannot be
     * honest, and would overflow the allocation below */
    if (nr > (end - line) / 6 + 1)
        FAIL("not a usable plan: line %d: range count %lld runs past the end", lineno, (long long)nr);
    pf->nranges = nr;
    pf->ranges = malloc((size_t)(nr ? nr : 1) * sizeof *pf->ranges);
    if (!pf->ranges) FAIL("not a usable plan: line %d: out of memory for %lld ranges", lineno, (long long)nr);
    int64_t prev_end = -1;
    for (int64_t j = 0; j < nr; j++) {
        line = next ? next + 1 : end;
        lineno++;
        if (line >= end) FAIL("not a usable plan: line %d: range count runs past the end", lineno);
        next = strchr(line, '\n');
        if (next) *next = 0;
        char *r[4];
        int64_t a, n;
        if (split(line, r, 3) != 3 || strcmp(r[0], "r") != 0 || parse_i64(r[1], &a) < 0 || parse_i64(r[2], &n) < 0 ||
            a < 0 || n < 1 || a < prev_end || n > INT64_MAX - a)
            FAIL("not a usable plan: line %d: expected a range 'r FIRST NPAGES' in file order", lineno);
        pf->ranges[j][0] = a;
        pf->ranges[j][1] = n;
        pf->pages_planned += n;
        prev_end = a + n;
    }
    *linep = line;
    *nextp = next;
    *linenop = lineno;
    return 0;
fail:
    return -1;
}

int pcl_plan_read(const char *path, struct pcl_plan *plan, char *err, size_t errlen) {
    char *buf;
    size_t len;
    memset(plan, 0, sizeof *plan);
    if (read_all(path, &buf, &len, err, errlen) < 0) return -1;
    static const char magic[] = "PAGECAST-PLAN ";
    if (len < sizeof magic - 1 || memcmp(buf, magic, sizeof magic - 1) != 0)
        FAIL("not a usable plan: bad magic (expected 'PAGECAST-PLAN' on the first line)");
    char *nl = memchr(buf, '\n', len);
    if (!nl) FAIL("not a usable plan: truncated (no end line)");
    *nl = 0;
    int64_t version;
    if (parse_i64(buf + sizeof magic - 1, &version) < 0) FAIL("not a usable plan: bad version field");
    if (version < 1 || version > 3)
        FAIL("not a usable plan: plan format version %lld, this launcher reads versions 1..3", (long long)version);
    /* version 2 adds ADVICE before NRANGES */
    const int nfields = version == 1 ? 14 : 15;
    *nl = '\n';
    for (size_t i = 0; i < len; i++)
        if (buf[i] != '\n' && (buf[i] < 0x20 || buf[i] > 0x7e))
            FAIL("not a usable plan: byte %zu is a control or non-ASCII byte (0x%02x)", i, (unsigned char)buf[i]);
    /* the end line: the last line starting after a newline */
    if (len < 2 || buf[len - 1] != '\n') FAIL("not a usable plan: truncated (no end line)");
    char *end = NULL;
    for (char *p = buf + len - 2; p >= buf; p--)
        if (*p == '\n') {
            end = p + 1;
            break;
        }
    if (!end || strncmp(end, "end ", 4) != 0) FAIL("not a usable plan: truncated (no end line)");
    unsigned long long nfiles_end;
    unsigned int want;
    {
        char endline[64], *e[4];
        size_t el = (size_t)(buf + len - 1 - end);
        int ok = el < sizeof endline;
        if (ok) {
            memcpy(endline, end, el);
            endline[el] = 0;
            ok = split(endline, e, 3) == 3 && digits(e[1]) && strlen(e[1]) < 20 && strlen(e[2]) == 8 &&
                 strspn(e[2], "0123456789abcdef") == 8;
        }
        if (!ok) FAIL("not a usable plan: malformed end line (expected 'end NFILES CRC32')");
        nfiles_end = strtoull(e[1], NULL, 10);
        want = (unsigned int)strtoul(e[2], NULL, 16);
    }
    if (crc32_ieee((unsigned char *)buf, (size_t)(end - buf)) != want)
        FAIL("not a usable plan: checksum mismatch (truncated or corrupted)");
    end[-1] = 0;

    /* count file records to size the array */
    int cap = 0;
    for (char *p = nl + 1; p && p < end; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, "file ", 5) == 0) cap++;
    plan->files = calloc(cap ? cap : 1, sizeof *plan->files);
    char *line = nl + 1;
    int lineno = 2;
    if (version >= 3 && parse_options(plan, &line, end, &lineno, err, errlen) < 0) goto fail;
    while (line < end) {
        char *next = strchr(line, '\n');
        if (next) *next = 0;
        char *f[16];
        if (split(line, f, nfields) != nfields || strcmp(f[0], "file") != 0)
            FAIL("not a usable plan: line %d: expected a 'file' record with %d fields", lineno, nfields);
        if (parse_file(&plan->files[plan->nfiles], f, nfields, &line, &next, end, &lineno, err, errlen) < 0) goto fail;
        plan->nfiles++;
        line = next ? next + 1 : end;
        lineno++;
    }
    if ((unsigned long long)plan->nfiles != nfiles_end)
        FAIL("not a usable plan: end line says %llu files, found %d", nfiles_end, plan->nfiles);
    /* buf stays allocated: the file records point into it */
    return 0;
fail:
    free(buf);
    memset(plan, 0, sizeof *plan);
    return -1;
}

static void warn(const struct pcl_file *f, const char *what) {
    fprintf(stderr, "pagecast run: warning: %s: %s\n", f->path, what);
}

static const char *what_not_done(const struct pcl_file *f) {
    int no_prefetch = f->strategy == PCL_NOTHING || (f->strategy == PCL_WARM && f->nranges == 0);
    return no_prefetch ? "advice" : pcl_strategy_names[f->strategy];
}

void pcl_file_missing(struct pcl_file *f, const char *why) {
    f->status = PCL_ST_MISSING;
    snprintf(f->detail, sizeof f->detail, "cannot open (%s); %s not done", why, what_not_done(f));
    warn(f, f->detail);
}

int pcl_file_identity_ok(struct pcl_file *f, const struct stat *st) {
    if (!S_ISREG(st->st_mode)) {
        pcl_file_missing(f, "not a regular file");
        return 0;
    }
    char diff[64] = "";
    if ((uint64_t)st->st_size != f->size) strcat(diff, "/size");
    if ((int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec != f->mtime_ns) strcat(diff, "/mtime");
    if ((int64_t)st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec != f->ctime_ns) strcat(diff, "/ctime");
    if ((uint64_t)st->st_ino != f->ino) strcat(diff, "/inode");
    if ((uint64_t)st->st_dev != f->dev) strcat(diff, "/device");
    if (!diff[0]) return 1;
    f->status = PCL_ST_STALE;
    snprintf(f->detail, sizeof f->detail, "changed since it was recorded (%s differ%s); %s skipped", diff + 1,
             strchr(diff + 1, '/') ? "" : "s", what_not_done(f));
    warn(f, f->detail);
    return 0;
}

/* A spec's two options `k1=N,k2=N` (either or both, any order) into v[0] and v[1], each
 * within [lo, hi]: 1, or 0 for anything else (the spec is then handed over). */
struct kv_opt {
    const char *key;
    int64_t lo, hi;
};

static int parse_two_options(const char *list, const struct kv_opt opt[2], int64_t v[2]) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        int64_t x;
        if (!eq || parse_i64(eq + 1, &x) < 0) return 0;
        *eq = 0;
        int k = strcmp(kv, opt[0].key) == 0 ? 0 : strcmp(kv, opt[1].key) == 0 ? 1 : -1;
        if (k < 0 || x < opt[k].lo || x > opt[k].hi) return 0;
        v[k] = x;
    }
    return 1;
}

/* A per-fault spec the shim runs natively: `extent` with optional degree=N, max_pages=N
 * (the defaults of src/pagecast/policies/extent.py). Anything else: 0, handed over. */
static int native_extent(struct pcl_file *f) {
    const char *a = f->arg;
    if (strncmp(a, "extent", 6) != 0 || (a[6] && a[6] != ':')) return 0;
    static const struct kv_opt opt[2] = {{"degree", 1, 1 << 20}, {"max_pages", 1, INT64_MAX}};
    int64_t v[2] = {16, 512};
    if (!parse_two_options(a[6] ? a + 7 : "", opt, v)) return 0;
    f->ext_degree = v[0];
    f->ext_max_pages = v[1];
    return 1;
}

/* A per-fault spec the shim runs natively on a mapped file: `objects:pages=N[,align=A]`, an
 * object layout learned by the planner (src/pagecast/plan/objects.py). Anything else: 0. */
static int native_objects(struct pcl_file *f) {
    const char *a = f->arg;
    if (strncmp(a, "objects:", 8) != 0) return 0;
    static const struct kv_opt opt[2] = {{"pages", 1, 1 << 24}, {"align", 0, INT64_MAX}};
    int64_t v[2] = {0, 0};
    if (!parse_two_options(a + 8, opt, v) || !v[0]) return 0;
    f->obj_pages = v[0];
    f->obj_align = v[1] % v[0];
    return 1;
}

int pcl_plan_open(struct pcl_plan *plan) {
    int native = 0, root = geteuid() == 0;
    for (int i = 0; i < plan->nfiles; i++) {
        struct pcl_file *f = &plan->files[i];
        int no_prefetch = f->strategy == PCL_NOTHING || (f->strategy == PCL_WARM && f->nranges == 0);
        if (no_prefetch && f->advice == PCL_ADV_DEFAULT) {
            f->status = PCL_ST_NOTHING;
            continue;
        }
        if (plan->issue == PCL_ISSUE_BEFORE && f->strategy == PCL_WARM && f->advice == PCL_ADV_DEFAULT) {
            /* issued before exec by pcl_issue_before, which opens the file anyway: it checks
             * the identity on the open file (one path lookup instead of two per file) */
            f->status = PCL_ST_PENDING;
            native++;
            continue;
        }
        /* stat, not open: this runs before the program starts, once per planned file (a
         * plan of 750 files cost 3 ms with open + fstat + close); the prefetcher opens
         * the files it reads, off the program's path (prefetch.c, open_planned) */
        struct stat st;
        if (stat(f->path, &st) < 0) {
            pcl_file_missing(f, strerror(errno));
            continue;
        }
        if (!root && S_ISREG(st.st_mode) && access(f->path, R_OK) != 0) {
            /* root reads anything; others pay one access() to keep the warning for an unreadable file */
            pcl_file_missing(f, strerror(errno));
            continue;
        }
        if (!pcl_file_identity_ok(f, &st)) continue;
        /* the advice follows the identity check: a replaced file gets the kernel's default */
        f->advice_ok = f->advice != PCL_ADV_DEFAULT;
        if (no_prefetch) {
            f->status = PCL_ST_NOTHING;
            continue;
        }
        if (f->strategy == PCL_PER_FAULT && native_objects(f)) {
            f->status = PCL_ST_NATIVE;
            snprintf(f->detail, sizeof f->detail, "%s on the program's first touch of each object (advice shim)",
                     f->arg);
            continue;
        }
        if (f->strategy == PCL_PER_FAULT && native_extent(f)) {
            /* the shim acts on the program's own reads: nothing for the launcher to issue */
            f->status = PCL_ST_NATIVE;
            snprintf(f->detail, sizeof f->detail, "%s on the program's read()/pread() calls (advice shim)", f->arg);
            continue;
        }
        f->status = PCL_ST_PENDING;
        if (f->strategy == PCL_WARM || f->strategy == PCL_STREAM) native++;
    }
    return native;
}
