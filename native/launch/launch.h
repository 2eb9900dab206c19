/*
 * Native launcher for `pagecast run --plan`: the plan parser, the prefetcher and the
 * process set-up share these types. The plan format is documented in
 * src/pagecast/plan/format.py (the reference); plan.c parses it without any library.
 */
#ifndef PC_LAUNCH_H
#define PC_LAUNCH_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

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
	int64_t pages_issued;  /* atomically updated by reader threads */
	int64_t errors;
};

struct pcl_plan {
	int nfiles;
	struct pcl_file *files;
};

extern const char *const pcl_strategy_names[PCL_NSTRATEGIES];
extern const char *const pcl_status_names[];
extern const char *const pcl_advice_names[PCL_NADVICES];

/* Parse the plan at path. On failure returns -1 and writes a one-line reason to err. */
int pcl_plan_read(const char *path, struct pcl_plan *plan, char *err, size_t errlen);

/* Open every file with work to do and compare its identity with the recording's; prints
 * one warning line per file that cannot be prefetched. Returns the number of files left
 * with native work (warm/stream). */
int pcl_plan_open(struct pcl_plan *plan);

/* Issue the plan's warm/stream requests until done or until stop_fd (a pidfd of the
 * program, or -1) becomes readable; then write the status JSON to status_path (if any). */
void pcl_prefetch_run(struct pcl_plan *plan, int stop_fd, const char *status_path);

/* Write s as a JSON string literal (quotes, backslashes and control bytes escaped). */
void pcl_json_str(FILE *o, const char *s);

/* Lower this process's CPU and I/O priority (nice +10, best-effort class, lowest level). */
void pcl_lower_priority(void);

#endif
