/*
 * Native launcher for `pagecast run --plan`: the plan parser, the prefetcher and the
 * process set-up share these types. The plan format is documented in
 * src/pagecast/plan/format.py (the reference); plan.c parses it without any library.
 */
#ifndef PC_LAUNCH_H
#define PC_LAUNCH_H

#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "launch/feedback.h"

enum pcl_strategy { PCL_NOTHING, PCL_WARM, PCL_STREAM, PCL_PACK, PCL_PER_FAULT, PCL_NSTRATEGIES };

/* The read-ahead advice the program's own accesses to a file get (through the shim). */
enum pcl_advice { PCL_ADV_DEFAULT, PCL_ADV_RANDOM, PCL_ADV_SEQUENTIAL, PCL_NADVICES };

/* What happened to one file: reported in the status JSON. */
enum pcl_status {
    PCL_ST_NOTHING,     /* plan says nothing to do */
    PCL_ST_PENDING,     /* to be prefetched */
    PCL_ST_WARMED,      /* every planned request issued */
    PCL_ST_STOPPED,     /* the program exited first: some requests not issued */
    PCL_ST_STALE,       /* identity differs from the recording */
    PCL_ST_MISSING,     /* cannot open */
    PCL_ST_HANDED_OVER, /* pack / per-fault: run by the Python live machinery */
    PCL_ST_UNAVAILABLE, /* pack / per-fault without the Python machinery */
    PCL_ST_ERROR,       /* an I/O error while prefetching */
    PCL_ST_NATIVE,      /* per-fault `extent`: run inside the program by the advice shim */
    PCL_ST_CANCELLED,   /* live feedback: the program's reads were not in the plan; rest not issued */
    PCL_ST_NOT_RUN,     /* a pack refused (missing, malformed, another file's, stale): read on demand */
};

/* Live feedback on a warm/stream file (launch/feedback.h): where its decision stands. */
enum pcl_feedback {
    PCL_FB_NONE,      /* not a prefetched file */
    PCL_FB_OFF,       /* no feedback: disabled, no shim, or the file's plan fits in the first batch */
    PCL_FB_WAITING,   /* first batch issued; the rest waits for the program's reads */
    PCL_FB_PAYING,    /* enough of the program's reads were in the plan: go on */
    PCL_FB_CANCELLED, /* too few were: the rest is not issued */
    PCL_FB_MAPPED,    /* the program maps the file: its faults are not seen, not judged */
    PCL_FB_ELF,       /* an ELF file: the loader maps it with calls the shim cannot see */
    PCL_NFEEDBACK
};

/* Feedback parameters (PAGECAST_PLAN_FEEDBACK=MIN:RATIO:BATCH or off). */
struct pcl_feedback_cfg {
    int on;
    int64_t min_sample; /* distinct pages the program must have read from a file to judge it */
    double min_ratio;   /* of those, the share inside the plan below which the file stops */
    int64_t batch;      /* pages of a file issued before any judgement */
};

struct pcl_file {
    char *path;
    uint64_t size, ino, dev;
    int64_t mtime_ns, ctime_ns;
    enum pcl_strategy strategy;
    enum pcl_advice advice;
    int advice_ok; /* advice != default and the file is the recorded one: the shim applies it */
    int depth;
    int64_t chunk_kib;
    double gain_ms;
    char *arg;
    char *reason;
    int64_t nranges;
    int64_t (*ranges)[2]; /* first page, npages */
    /* filled in by the launcher and the prefetcher */
    int fd;
    enum pcl_status status;
    char detail[160];
    int64_t pages_planned;
    int64_t pages_issued; /* atomically updated by reader threads */
    int64_t errors;
    /* native per-fault `extent` (launch/feedback.h has the rest of the shim's side) */
    int64_t ext_degree, ext_max_pages;
    int64_t obj_pages, obj_align; /* `objects:pages=N,align=A` (mapped files): objects fetched on first touch */
    /* live feedback */
    int fb_slot; /* index in the feedback segment, -1: none */
    enum pcl_feedback fb;
    int elf_checked;
    int64_t pages_used, pages_outside; /* from the shim, at the end: distinct pages read in / out of the plan */
    int64_t req_lo, req_hi, req_next, req_gate; /* this file's requests; those from req_gate on wait for a verdict */
    int inflight; /* requests handed to a reader and not yet done (under the prefetcher's lock) */
};

/* When the plan's warm requests are issued (plan option `issue`, version 3). */
enum pcl_issue { PCL_ISSUE_BESIDE, PCL_ISSUE_BEFORE, PCL_NISSUES };

struct pcl_plan {
    enum pcl_issue issue;
    char *note; /* plan option `note`: informative, never acted on */
    int nfiles;
    struct pcl_file *files;
    struct pcl_feedback_cfg fbcfg;
    struct pcf_header *fb; /* the feedback segment, or NULL */
    size_t fb_size;
    char fb_path[4096];
    int wait_exit; /* the prefetcher reports after the program exits (the used counts are final) */
    /* issue before: what the launcher itself issued before exec (added to the report) */
    int64_t before_requests, before_ns;
};

extern const char *const pcl_strategy_names[PCL_NSTRATEGIES];
extern const char *const pcl_status_names[];
extern const char *const pcl_advice_names[PCL_NADVICES];
extern const char *const pcl_feedback_names[PCL_NFEEDBACK];
extern const char *const pcl_issue_names[PCL_NISSUES];

/* Parse the plan at path. On failure returns -1 and writes a one-line reason to err. */
int pcl_plan_read(const char *path, struct pcl_plan *plan, char *err, size_t errlen);

/* Open every file with work to do and compare its identity with the recording's; prints
 * one warning line per file that cannot be prefetched. Returns the number of files left
 * with native work (warm/stream). */
int pcl_plan_open(struct pcl_plan *plan);
/* The identity check of a planned file against `st` (regular file, size, mtime, ctime,
 * inode, device); on a mismatch the file is marked stale or missing with one warning. */
int pcl_file_identity_ok(struct pcl_file *f, const struct stat *st);
void pcl_file_missing(struct pcl_file *f, const char *why);

/* `issue before`: issue every pending warm file's requests now, in this process, with
 * posix_fadvise(WILLNEED), synchronously, in plan order, one call per CHUNK_KIB of a range;
 * each file is opened after the identity check and closed afterwards. The files become
 * warmed (or error/stale/missing) and are left out of the prefetcher. Returns the number of
 * files still left to the prefetcher (stream). */
int pcl_issue_before(struct pcl_plan *plan);

/* Create the feedback segment for the pending warm/stream files (not for --prefetch-only:
 * no program reads). Returns 0, or -1 with feedback off (one warning if it could not be made). */
int pcl_feedback_setup(struct pcl_plan *plan);

/* Issue the plan's warm/stream requests until done or until stop_fd (a pidfd of the
 * program, or -1) becomes readable; then write the status JSON to status_path (if any). */
void pcl_prefetch_run(struct pcl_plan *plan, int stop_fd, const char *status_path);

/* Page packs the launcher runs itself (launch/packs.c): each pending pack file whose pack is
 * a current pack of it, in a plan with no per-fault file left for Python, becomes native and
 * the program's environment preloads the pager shim with them. `stats_dir` (or NULL): a
 * buffer of `stats_len` bytes that receives the private directory made for the pager's
 * counters ("" if none was). Returns the number of packs made native. */
int pcl_packs_setup(struct pcl_plan *plan, char *stats_dir, size_t stats_len);
/* After the program: the pager's counters from `stats_dir` as {"regions": [...]} on `out`
 * (the directory is emptied and removed), one warning per native pack never mapped. */
void pcl_packs_report(struct pcl_plan *plan, const char *stats_dir, FILE *out);

/* Write s as a JSON string literal (quotes, backslashes and control bytes escaped). */
void pcl_json_str(FILE *o, const char *s);

/* Lower this process's CPU and I/O priority (nice +10, best-effort class, lowest level). */
void pcl_lower_priority(void);

#endif
