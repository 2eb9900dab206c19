"""Round trips and crash recovery of the trace format."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from pagecast.errors import PagecastError
from pagecast.trace import Kind, Region, RegionMap, TraceWriter, match_regions, open_trace, recover_partial
from pagecast.trace.schedule import Schedule, read_schedule, write_schedule


def _rows(n, seed=0):
    rng = np.random.default_rng(seed)
    return dict(
        t_ns=np.arange(n, dtype=np.int64) * 10,
        region=rng.integers(0, 3, n).astype(np.int32),
        page=rng.integers(0, 1 << 40, n),
        kind=rng.integers(0, 8, n).astype(np.uint8),
        flags=rng.integers(0, 256, n).astype(np.uint8),
        tid=rng.integers(-1, 1000, n).astype(np.int32),
        ip=rng.integers(0, 1 << 63, n, dtype=np.uint64),
        bytes=rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32),
    )


@pytest.mark.parametrize("journal", [False, True])
def test_round_trip_in_row_groups(tmp_path, journal):
    path = tmp_path / "t.parquet"
    rows = _rows(10_000)
    regions = [
        Region(0, "weights.bin", "file", path="/x/weights.bin", length=1 << 20),
        Region(0, "anon#0", "anon", order=0, length=8192),
    ]
    with TraceWriter(path, regions=regions, source="test", row_group_rows=3000, journal=journal) as w:
        for i in range(0, 10_000, 700):
            w.write(**{k: v[i : i + 700] for k, v in rows.items()})
        w.add_region(Region(0, "late", "anon", order=1, length=4096))
    assert not (tmp_path / "t.parquet.partial").exists()
    t = open_trace(path)
    assert t.num_rows == 10_000
    assert t.num_row_groups == 4
    assert [r.name for r in t.regions] == ["weights.bin", "anon#0", "late"]
    assert [r.id for r in t.regions] == [0, 1, 2]
    assert t.meta["source"] == "test" and t.meta["sorted_by_time"] is True
    back = t.read()
    for k, v in rows.items():
        np.testing.assert_array_equal(back[k], v)
    chunks = list(t.iter_batches(["page"], batch_rows=4096))
    np.testing.assert_array_equal(np.concatenate([c["page"] for c in chunks]), rows["page"])


def test_scalar_broadcast_and_unsorted_flag(tmp_path):
    path = tmp_path / "t.parquet"
    with TraceWriter(path) as w:
        w.write(t_ns=[5, 6, 7], page=[1, 2, 3], kind=Kind.FAULT_MAJOR, region=0)
        w.write(t_ns=[1], page=[9])
    t = open_trace(path)
    d = t.read()
    assert d["kind"].tolist() == [2, 2, 2, 0]
    assert d["region"].tolist() == [0, 0, 0, -1]
    assert d["tid"].tolist() == [-1] * 4
    assert t.meta["sorted_by_time"] is False


def test_failed_write_leaves_no_file(tmp_path):
    path = tmp_path / "t.parquet"
    with pytest.raises(RuntimeError):
        with TraceWriter(path) as w:
            w.write(t_ns=[1], page=[1])
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def _encoder_threads():
    return [t for t in threading.enumerate() if t.name.startswith("pagecast-trace-encoder")]


def test_per_column_encodings_and_background_encoder(tmp_path):
    from pagecast.trace.writer import COLUMN_ENCODING, COMPRESSION

    path = tmp_path / "t.parquet"
    rows = _rows(25_000, seed=3)
    # extremes the delta encoder must wrap correctly: kernel-space ips, negative tids/regions
    rows["ip"][::7] = np.uint64(0xFFFFFFFF81000000) + np.arange(len(rows["ip"][::7]), dtype=np.uint64)
    rows["ip"][1] = np.iinfo(np.uint64).max
    rows["page"][2] = np.iinfo(np.int64).max
    rows["page"][3] = np.iinfo(np.int64).min
    rows["region"][::5] = -1
    sizes = np.random.default_rng(1).integers(1, 2500, 40)
    with TraceWriter(path, row_group_rows=1000) as w:
        i = 0
        for n in sizes:
            w.write(**{k: v[i : i + n] for k, v in rows.items()})
            i += n
            if i >= 25_000:
                break
    assert not _encoder_threads()
    t = open_trace(path)
    assert t.num_rows == 25_000 and t.num_row_groups == 25
    back = t.read()
    for k, v in rows.items():
        np.testing.assert_array_equal(back[k], v)
    md = pq.ParquetFile(path).metadata
    for g in (0, md.num_row_groups - 1):
        for j in range(md.num_columns):
            col = md.row_group(g).column(j)
            name = col.path_in_schema
            assert col.compression == COMPRESSION.upper()
            assert COLUMN_ENCODING[name] in col.encodings
            assert not col.has_dictionary_page
            assert col.is_stats_set == (name == "t_ns")


def test_failure_after_queued_row_groups_leaves_no_file_or_thread(tmp_path):
    path = tmp_path / "t.parquet"
    rows = _rows(20_000)
    with pytest.raises(RuntimeError):
        with TraceWriter(path, row_group_rows=1000) as w:
            w.write(**rows)
            assert _encoder_threads()
            raise RuntimeError("producer failed")
    assert list(tmp_path.iterdir()) == []
    assert not _encoder_threads()


def test_crash_mid_write_recovers_complete_row_groups(tmp_path):
    path = tmp_path / "crash.parquet"
    code = textwrap.dedent(
        f"""
        import os, numpy as np
        from pagecast.trace import TraceWriter, Region
        w = TraceWriter({str(path)!r}, journal=True, row_group_rows=1000, source="crashy")
        w.add_region(Region(0, "r", "anon", length=4096 * 100))
        w.write(t_ns=np.arange(2500), page=np.arange(2500) % 100, region=0)
        os.kill(os.getpid(), 9)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code])
    assert proc.returncode == -signal.SIGKILL
    assert not path.exists()
    with pytest.raises(PagecastError, match="recover"):
        open(path, "wb").close()
        open_trace(path)
    os.unlink(path)
    rec = recover_partial(str(path) + ".partial")
    assert (rec.rows, rec.batches, rec.regions, rec.truncated) == (2000, 2, 1, False)
    t = open_trace(rec.trace)
    assert t.num_rows == 2000  # two complete row groups; the 500 buffered rows died with the process
    assert t.meta["source"] == "crashy"
    assert [r.name for r in t.regions] == ["r"]
    np.testing.assert_array_equal(t.read(["page"])["page"], np.arange(2000) % 100)


def test_bad_files_give_one_line_errors(tmp_path):
    with pytest.raises(PagecastError, match="no such trace"):
        open_trace(tmp_path / "missing.parquet")
    junk = tmp_path / "junk.parquet"
    junk.write_text("hello")
    with pytest.raises(PagecastError, match="junk.parquet: not a Parquet trace"):
        open_trace(junk)
    import pyarrow as pa

    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1]}), other)
    with pytest.raises(PagecastError, match="not a pagecast trace"):
        open_trace(other)


def test_region_map_translate_and_unmap():
    m = RegionMap(4096)
    m.add(0x10000, 0x20000, region=0, first_page=100)  # file mapped at offset 100 pages
    m.add(0x40000, 0x42000, region=1)
    addrs = np.array([0x10000, 0x10FFF, 0x1F000, 0x20000, 0x41234, 0x5])
    r, p = m.translate(addrs)
    assert r.tolist() == [0, 0, 0, -1, 1, -1]
    assert p[:3].tolist() == [100, 100, 115] and p[4] == 1
    m.remove(0x14000, 0x18000)  # punch a hole: splits the mapping
    r, p = m.translate(np.array([0x13000, 0x15000, 0x18000]))
    assert r.tolist() == [0, -1, 0] and p[0] == 103 and p[2] == 108


def test_match_regions_across_runs():
    a = [
        Region(0, "w", "file", path="/w"),
        Region(1, "anon#0", "anon", order=0, length=8192),
        Region(2, "anon#1", "anon", order=1, length=4096),
    ]
    b = [
        Region(0, "anon#0", "anon", order=0, length=8192),
        Region(1, "anon#1", "anon", order=1, length=12288),
        Region(2, "w", "file", path="/w"),
    ]
    assert match_regions(a, b) == {0: 2, 1: 0, 2: 1}


def test_schedule_round_trip_and_remap(tmp_path):
    s = Schedule(trigger=[3, 1, 1], t_ns=[30, 10, 10], region=[0, 1, 0], page=[7, 8, 9], score=[0.5, 0.2, 0.9])
    p = write_schedule(tmp_path / "s.parquet", s, regions=[Region(0, "a"), Region(1, "b")], meta={"model": "x"})
    back = read_schedule(p)
    assert back.trigger.tolist() == [1, 1, 3]
    assert back.page.tolist() == [9, 8, 7]  # best score first within a trigger
    assert back.meta["model"] == "x" and [r.name for r in back.regions] == ["a", "b"]
    moved = back.remap_regions({0: 5})
    assert moved.region.tolist() == [5, 5] and moved.page.tolist() == [9, 7]


def test_caller_may_reuse_its_buffers(tmp_path):
    # Row groups are encoded on a background thread: the writer must not alias caller arrays.
    buf = np.arange(5000, dtype=np.int64)
    with TraceWriter(tmp_path / "t.parquet", row_group_rows=1000) as w:
        for k in range(4):
            buf[:] = np.arange(5000) + k * 5000
            w.write(t_ns=buf, page=buf)
    got = open_trace(tmp_path / "t.parquet").read(["page"])["page"]
    np.testing.assert_array_equal(got, np.arange(20000))


@pytest.mark.parametrize("journal", [False, True])
def test_buffer_reuse_in_whole_and_partial_row_groups(tmp_path, journal):
    # Writes of 2500 rows with 1000-row groups: whole groups go straight from the caller's
    # arrays (copied into the writer's reused buffers, or journalled at once), the rest
    # is staged. The caller overwrites every buffer after each call; region comes as
    # int64 (converted, so fresh), page/ip in the column's own dtype (must be copied).
    page = np.empty(2500, np.int64)
    ip = np.empty(2500, np.uint64)
    region = np.empty(2500, np.int64)
    t = np.empty(2500, np.int64)
    path = tmp_path / "t.parquet"
    with TraceWriter(path, row_group_rows=1000, journal=journal) as w:
        if not journal:
            # a slow encoder: a buffer reused while its row group is still being encoded would show
            encode = w._pq.write_batch
            w._pq.write_batch = lambda *a, **kw: (time.sleep(0.02), encode(*a, **kw))
        for k in range(5):
            base = k * 2500
            t[:] = np.arange(base, base + 2500)
            page[:] = t * 3
            ip[:] = (t + 7).astype(np.uint64)
            region[:] = t % 5
            w.write(t_ns=t, page=page, ip=ip, region=region, kind=Kind.FAULT_MINOR)
        for buf in (t, page, ip, region):
            buf[:] = -1 if buf.dtype.kind == "i" else 0
    tr = open_trace(path)
    assert tr.num_rows == 12_500 and tr.num_row_groups == 13
    d = tr.read()
    expect = np.arange(12_500)
    np.testing.assert_array_equal(d["t_ns"], expect)
    np.testing.assert_array_equal(d["page"], expect * 3)
    np.testing.assert_array_equal(d["ip"], (expect + 7).astype(np.uint64))
    np.testing.assert_array_equal(d["region"], expect % 5)
    assert set(d["kind"].tolist()) == {int(Kind.FAULT_MINOR)} and tr.meta["sorted_by_time"] is True


def test_copy_false_hands_arrays_over(tmp_path):
    rows = _rows(7_300, seed=5)
    path = tmp_path / "t.parquet"
    sizes = [1000, 3000, 1, 999, 2300]  # whole groups at offset 0 and mid-write, plus staged tails
    with TraceWriter(path, row_group_rows=1000) as w:
        i = 0
        for n in sizes:
            w.write(copy=False, **{k: v[i : i + n] for k, v in rows.items()})
            i += n
        assert i == 7_300
    back = open_trace(path).read()
    for k, v in rows.items():
        np.testing.assert_array_equal(back[k], v)


def test_write_rejects_bad_shapes(tmp_path):
    with TraceWriter(tmp_path / "t.parquet") as w:
        with pytest.raises(ValueError, match="1-D"):
            w.write(t_ns=np.zeros((2, 2), np.int64))
        with pytest.raises(ValueError, match="different lengths"):
            w.write(t_ns=[1, 2], page=[1])
        w.write(t_ns=[3], page=[4])
    assert open_trace(tmp_path / "t.parquet").read(["page"])["page"].tolist() == [4]
