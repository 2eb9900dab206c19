"""Page-set rows of a recording: the first use of each file page, by mapping or by read.

``pagecast record`` (page-set mode) sees page faults (translated to region-relative
pages; under the page-set shim every first touch of a file-mapped page faults) and two
filemap tracepoints: the file page each fault maps and the pages each read-family system
call asks for, by inode. ``PageSetRows`` turns them into
one ``Kind.FILE_MAPPED`` row per file page first touched through a mapping and one
``Kind.FILE_READ`` row per file page first asked for by a read, each at the time of that
first use, streaming: it keeps one bitmap per file region and per kind. Recording under a
memory limit, every later read of a page is a ``Kind.FILE_REREAD`` row too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pagecast.collect.faultmon import FaultBatch, FileUseBatch
from pagecast.trace.schema import Kind


class FirstUse:
    """Remembers which pages of each region were seen; picks the rows that are first uses."""

    def __init__(self) -> None:
        self._seen: dict[int, np.ndarray] = {}
        self.pages = 0

    def _bitmap(self, region: int, need: int) -> np.ndarray:
        seen = self._seen.get(region)
        if seen is None or len(seen) < need:
            grown = np.zeros(max(need, 2 * len(seen) if seen is not None else need), bool)
            if seen is not None:
                grown[: len(seen)] = seen
            self._seen[region] = seen = grown
        return seen

    def take(self, region: np.ndarray, page: np.ndarray) -> np.ndarray:
        """Indices (ascending) of the rows whose (region, page) was never seen before; marks them seen."""
        out: list[np.ndarray] = []
        for rid in np.unique(region):
            idx = np.flatnonzero(region == rid)
            pages = page[idx]
            seen = self._bitmap(int(rid), int(pages.max()) + 1)
            _, first = np.unique(pages, return_index=True)
            cand = idx[first]
            cand = cand[~seen[page[cand]]]
            seen[page[cand]] = True
            out.append(cand)
        if not out:
            return np.empty(0, np.int64)
        rows = np.sort(np.concatenate(out))
        self.pages += len(rows)
        return rows


@dataclass
class Rows:
    """Trace rows (column arrays), as TraceWriter.write takes them."""

    t_ns: np.ndarray
    region: np.ndarray
    page: np.ndarray
    kind: np.ndarray
    tid: np.ndarray
    ip: np.ndarray

    def __len__(self) -> int:
        return len(self.t_ns)

    def columns(self) -> dict[str, np.ndarray]:
        return {
            "t_ns": self.t_ns,
            "region": self.region,
            "page": self.page,
            "kind": self.kind,
            "tid": self.tid,
            "ip": self.ip,
        }


def expand_ranges(first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row index, page) for every page of the inclusive ranges [first, last], in row order."""
    n = (last - first + 1).astype(np.int64)
    rep = np.repeat(np.arange(len(n)), n)
    starts = np.cumsum(n) - n
    pages = first[rep] + (np.arange(int(n.sum()), dtype=np.int64) - starts[rep])
    return rep, pages


class PageSetRows:
    """Adds the page-set rows to each batch of a recording, in time order."""

    def __init__(self, every_read: bool = False) -> None:
        self.mapped = FirstUse()
        self.read = FirstUse()
        # also a FILE_REREAD row for every later read of a page: under a memory limit the
        # pages a program reads again are its reuse, which first uses alone do not show
        self.every_read = every_read

    def rows(self, batch: FaultBatch, from_samples: np.ndarray) -> Rows:
        """The batch's fault rows followed in time by its page-set rows (a page-set row sorts
        after the fault that revealed it). ``from_samples[region]``: whether the fault
        samples in that file region count for its mapped page set (else only the
        filemap:mm_filemap_fault samples do; see FaultMonitor.page_set_fault_regions)."""
        parts = [Rows(batch.t_ns, batch.region, batch.page, batch.kind, batch.tid, batch.ip)]
        ok = np.append(from_samples, False)  # index -1: no region
        fsel = np.flatnonzero(ok[np.minimum(batch.region, len(from_samples))])
        m_t, m_reg, m_page, m_tid, m_ip = (
            batch.t_ns[fsel],
            batch.region[fsel],
            batch.page[fsel],
            batch.tid[fsel],
            batch.ip[fsel],
        )
        uses: FileUseBatch | None = batch.uses
        if uses is not None and len(uses):
            mp = uses.mapped  # one page each
            m_t, m_reg, m_page = (
                np.concatenate([m_t, uses.t_ns[mp]]),
                np.concatenate([m_reg, uses.region[mp]]),
                np.concatenate([m_page, uses.first[mp]]),
            )
            m_tid, m_ip = (
                np.concatenate([m_tid, uses.tid[mp]]),
                np.concatenate([m_ip, np.zeros(int(mp.sum()), np.uint64)]),
            )
        if len(m_t):
            order = np.argsort(m_t, kind="stable")
            take = order[self.mapped.take(m_reg[order], m_page[order])]
            parts.append(
                Rows(
                    m_t[take],
                    m_reg[take],
                    m_page[take],
                    np.full(len(take), Kind.FILE_MAPPED, np.uint8),
                    m_tid[take],
                    m_ip[take],
                )
            )
        if uses is not None and len(uses) and not uses.mapped.all():
            rd = ~uses.mapped
            rep, pages = expand_ranges(uses.first[rd], uses.last[rd])
            region = uses.region[rd][rep]
            take = self.read.take(region, pages)
            kind = np.full(len(take), Kind.FILE_READ, np.uint8)
            if self.every_read:
                kind = np.full(len(pages), Kind.FILE_REREAD, np.uint8)
                kind[take] = Kind.FILE_READ
                take = np.arange(len(pages))
            src = rep[take]
            parts.append(
                Rows(
                    uses.t_ns[rd][src],
                    region[take],
                    pages[take],
                    kind,
                    uses.tid[rd][src],
                    np.zeros(len(take), np.uint64),
                )
            )
        if len(parts) == 1:
            return parts[0]
        cols = {f: np.concatenate([getattr(p, f) for p in parts]) for f in Rows.__dataclass_fields__}
        order = np.argsort(cols["t_ns"], kind="stable")
        return Rows(**{f: v[order] for f, v in cols.items()})
