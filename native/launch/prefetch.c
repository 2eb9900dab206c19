/*
 * The launcher's prefetcher: issues a plan's warm and stream requests into the page
 * cache, beside the program, at low priority.
 *
 * Requests are the plan's ranges cut into chunks of CHUNK_KIB, in plan order (files in
 * plan order, ranges in file order), so the device sees an ascending sweep per file.
 * DEPTH threads take the next request from a shared counter:
 * - warm: posix_fadvise(WILLNEED), which queues the reads and returns: the threads keep
 *   the block layer fed without copying data;
 * - stream: pread() into a scratch buffer, so exactly DEPTH requests are in flight: a
 *   bounded sequential read that does not flood the queue ahead of the program's own
 *   reads.
 * Before every request a thread checks stop_fd (a pidfd of the program): once the program
 * has exited, there is nothing left to speed up, and the rest is not issued.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

#define PAGE 4096

struct request {
	int file;
	int64_t first, npages;
};

struct job {
	struct pcl_plan *plan;
	struct request *req;
	int64_t nreq;
	int64_t next; /* atomic */
	int stop_fd;
	int stopped; /* atomic */
	int64_t requests_done; /* atomic */
};

static int64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void pcl_lower_priority(void)
{
	/* ioprio_set(IOPRIO_WHO_PROCESS, self, IOPRIO_CLASS_BE level 7): below the program's
	 * default BE level 4 where the I/O scheduler honours priorities (bfq, mq-deadline).
	 * Not the idle class: under bfq an idle-class reader can be starved for seconds,
	 * and a prefetch that arrives after the program needed the page is pure cost. */
	const int IOPRIO_WHO_PROCESS = 1, IOPRIO_CLASS_BE = 2, IOPRIO_CLASS_SHIFT = 13;
	syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, (IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT) | 7);
	if (nice(10) == -1) {
		/* already at the floor: nothing to do */
	}
}

static int program_exited(struct job *j)
{
	if (__atomic_load_n(&j->stopped, __ATOMIC_RELAXED))
		return 1;
	if (j->stop_fd < 0)
		return 0;
	struct pollfd p = {.fd = j->stop_fd, .events = POLLIN};
	if (poll(&p, 1, 0) > 0) {
		__atomic_store_n(&j->stopped, 1, __ATOMIC_RELAXED);
		return 1;
	}
	return 0;
}

static void *reader(void *arg)
{
	struct job *j = arg;
	char *buf = NULL;
	size_t buflen = 0;
	for (;;) {
		int64_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
		if (i >= j->nreq || program_exited(j))
			break;
		struct request *r = &j->req[i];
		struct pcl_file *f = &j->plan->files[r->file];
		off_t off = (off_t)r->first * PAGE;
		size_t len = (size_t)r->npages * PAGE;
		int ok;
		if (f->strategy == PCL_WARM) {
			ok = posix_fadvise(f->fd, off, (off_t)len, POSIX_FADV_WILLNEED) == 0;
		} else {
			if (buflen < len) {
				free(buf);
				buf = malloc(len);
				buflen = buf ? len : 0;
			}
			ok = buf && pread(f->fd, buf, len, off) >= 0;
		}
		if (ok)
			__atomic_fetch_add(&f->pages_issued, r->npages, __ATOMIC_RELAXED);
		else
			__atomic_fetch_add(&f->errors, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&j->requests_done, 1, __ATOMIC_RELAXED);
	}
	free(buf);
	return NULL;
}

/* Cut every pending warm/stream file's ranges into chunk-sized requests, in plan order. */
static struct request *make_requests(struct pcl_plan *plan, int64_t *n)
{
	int64_t cap = 0;
	for (int i = 0; i < plan->nfiles; i++) {
		struct pcl_file *f = &plan->files[i];
		if (f->status != PCL_ST_PENDING || (f->strategy != PCL_WARM && f->strategy != PCL_STREAM))
			continue;
		if (f->strategy == PCL_STREAM && f->nranges == 0) {
			/* whole file */
			f->ranges = realloc(f->ranges, sizeof *f->ranges);
			f->ranges[0][0] = 0;
			f->ranges[0][1] = (int64_t)((f->size + PAGE - 1) / PAGE);
			f->nranges = f->ranges[0][1] ? 1 : 0;
			f->pages_planned = f->ranges[0][1];
		}
		/* the identity check pinned the file's size: pages past its end are nothing to read,
		 * and clipping here keeps a hostile range from sizing the request array */
		int64_t last = (int64_t)((f->size + PAGE - 1) / PAGE);
		f->pages_planned = 0;
		for (int64_t k = 0; k < f->nranges; k++) {
			if (f->ranges[k][0] >= last)
				f->ranges[k][1] = 0;
			else if (f->ranges[k][1] > last - f->ranges[k][0])
				f->ranges[k][1] = last - f->ranges[k][0];
			f->pages_planned += f->ranges[k][1];
		}
		int64_t chunk = f->chunk_kib * 1024 / PAGE;
		for (int64_t k = 0; k < f->nranges; k++)
			cap += (f->ranges[k][1] + chunk - 1) / chunk;
	}
	struct request *req = malloc((size_t)(cap ? cap : 1) * sizeof *req);
	int64_t m = 0;
	if (!req) {
		*n = 0;
		return NULL;
	}
	for (int i = 0; i < plan->nfiles; i++) {
		struct pcl_file *f = &plan->files[i];
		if (f->status != PCL_ST_PENDING || (f->strategy != PCL_WARM && f->strategy != PCL_STREAM))
			continue;
		int64_t chunk = f->chunk_kib * 1024 / PAGE;
		for (int64_t k = 0; k < f->nranges; k++)
			for (int64_t a = f->ranges[k][0], e = a + f->ranges[k][1]; a < e; a += chunk)
				req[m++] = (struct request){i, a, e - a < chunk ? e - a : chunk};
	}
	*n = m;
	return req;
}

void pcl_json_str(FILE *o, const char *s)
{
	fputc('"', o);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(o, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(o, "\\u%04x", *p);
		else
			fputc(*p, o);
	}
	fputc('"', o);
}

static void write_status(struct pcl_plan *plan, struct job *j, int64_t elapsed_ns, const char *path)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
	FILE *o = fopen(tmp, "w");
	if (!o)
		return;
	int64_t pages = 0, errors = 0;
	for (int i = 0; i < plan->nfiles; i++) {
		pages += plan->files[i].pages_issued;
		errors += plan->files[i].errors;
	}
	fprintf(o, "{\"prefetch\": {\"pages_issued\": %lld, \"bytes_issued\": %lld, \"requests\": %lld, "
		   "\"errors\": %lld, \"elapsed_s\": %.6f, \"stopped\": \"%s\"},\n \"files\": [",
		(long long)pages, (long long)pages * PAGE, (long long)j->requests_done, (long long)errors,
		elapsed_ns / 1e9, j->stopped ? "program-exited" : "done");
	for (int i = 0; i < plan->nfiles; i++) {
		struct pcl_file *f = &plan->files[i];
		fprintf(o, "%s\n  {\"path\": ", i ? "," : "");
		pcl_json_str(o, f->path);
		fprintf(o, ", \"strategy\": \"%s\", \"advice\": \"%s\", \"advice_applied\": %s, \"status\": \"%s\", "
			   "\"pages_planned\": %lld, \"pages_issued\": %lld, \"bytes_issued\": %lld, \"detail\": ",
			pcl_strategy_names[f->strategy], pcl_advice_names[f->advice], f->advice_ok ? "true" : "false",
			pcl_status_names[f->status], (long long)f->pages_planned,
			(long long)f->pages_issued, (long long)f->pages_issued * PAGE);
		pcl_json_str(o, f->detail);
		fputc('}', o);
	}
	fputs("]}\n", o);
	if (fclose(o) == 0)
		rename(tmp, path);
	else
		unlink(tmp);
}

void pcl_prefetch_run(struct pcl_plan *plan, int stop_fd, const char *status_path)
{
	int64_t t0 = mono_ns();
	struct job j = {.plan = plan, .stop_fd = stop_fd};
	j.req = make_requests(plan, &j.nreq);
	int depth = 1;
	for (int i = 0; i < plan->nfiles; i++)
		if (plan->files[i].status == PCL_ST_PENDING && plan->files[i].depth > depth &&
		    (plan->files[i].strategy == PCL_WARM || plan->files[i].strategy == PCL_STREAM))
			depth = plan->files[i].depth;
	pthread_t th[64];
	int started = 0;
	for (int t = 1; t < depth; t++)
		if (pthread_create(&th[started], NULL, reader, &j) == 0)
			started++;
	reader(&j);
	for (int t = 0; t < started; t++)
		pthread_join(th[t], NULL);
	for (int i = 0; i < plan->nfiles; i++) {
		struct pcl_file *f = &plan->files[i];
		if (f->status != PCL_ST_PENDING || (f->strategy != PCL_WARM && f->strategy != PCL_STREAM))
			continue;
		if (f->errors)
			f->status = PCL_ST_ERROR;
		else
			f->status = f->pages_issued >= f->pages_planned ? PCL_ST_WARMED : PCL_ST_STOPPED;
		if (f->errors)
			snprintf(f->detail, sizeof f->detail, "%lld requests failed", (long long)f->errors);
	}
	if (status_path)
		write_status(plan, &j, mono_ns() - t0, status_path);
	free(j.req);
}
