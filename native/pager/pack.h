/* pagecast page packs: the file format and the loader that streams one into a pager
 * region (pack.c). A pack is written by pagecast.pager.pack (Python). */
#ifndef PAGECAST_PACK_H
#define PAGECAST_PACK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Page pack file (docs/pager.md, "Page packs"), little-endian:
 *   header (4096 bytes): magic "PGCPACK1", u32 version, u32 page_size, u64 npages,
 *   u64 block_pages, u64 index_offset (4096), u64 data_offset, u64 src_size, i64 src_mtime_ns,
 *   i64 src_ctime_ns, u64 src_ino, u64 src_dev, u64 index_sum, path of the source (NUL-terminated);
 *   index: i64 file_page[npages] (first-use order), u64 block_sum[ceil(npages/block_pages)];
 *   data at data_offset: the pages' bytes in the same order.
 * Sums: pgr_pack_sum over 64-bit words. The file is exactly data_offset + npages*page_size. */
#define PGR_PACK_MAGIC   "PGCPACK1"
#define PGR_PACK_VERSION 1
#define PGR_PACK_HEADER  4096
uint64_t pgr_pack_sum(const uint64_t *w, uint64_t nwords);

/* The header as laid out on disk (PGR_PACK_HEADER bytes; mirrored by pagecast.pager.pack's
 * HEADER_FIXED, tests/test_binary_layouts.py compares the two). */
struct pack_header {
    char magic[8];
    uint32_t version, page_size;
    uint64_t npages, block_pages, index_offset, data_offset, src_size;
    int64_t src_mtime_ns, src_ctime_ns;
    uint64_t src_ino, src_dev, index_sum;
    char path[PGR_PACK_HEADER - 96];
};

typedef struct pgr_region pgr_region;

/* Page pack: if `pack_path` was built from this region's file, start a loader thread that
 * streams it sequentially and maps its pages (in first-use order) ahead of the program.
 * Returns 0 started, 1 the pack is for another file, -1 refused (stale, malformed, I/O
 * error; one-line reason in pgr_last_error(), nothing is mapped from it). `defer` (pages):
 * a fault on a pack page at most this far ahead of the loader waits for the loader instead
 * of reading the file (0 = default 256). `stop_after` > 0: the loader stops after that
 * many pages, as if it had died (tests). `threads` loader threads (<= 0: 4) claim chunks
 * in order and map their pages in parallel. Call before the program touches the region. */
int pgr_pack_start(pgr_region *r, const char *pack_path, uint64_t defer, uint64_t stop_after, int threads);

#ifdef __cplusplus
}
#endif
#endif
