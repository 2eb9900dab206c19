"""pagecast's CUDA interposer and prefetch injector against the driver TEST DOUBLE.

There is no GPU here: ``libcuda_test_double.so`` stands in for libcuda (host memory,
every call logged), and ``driver_client`` finds it the way statically linked cudart does
(dlopen, dlsym of cuGetProcAddress, then cuGetProcAddress for the rest) or by dlsym.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from _cuda_double import Run, build_libs, client_env, run_client
from pagecast.collect.cuda import read_metrics, read_timeline, summarize_dir
from pagecast.trace import Region
from pagecast.trace.schedule import Schedule

pytestmark = pytest.mark.cuda_double

CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_HOST = 1, 2
PAGE = 4096


@pytest.fixture(scope="module")
def libs():
    return build_libs()


# ---- entry-point resolution -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["dlsym", "gpa1", "gpa2", "gpa2_pt"])
def test_double_resolution_returns_wrappers(libs, tmp_path, mode):
    r = run_client(libs, tmp_path, ["resolve", mode, "managed", "65536", "launch", "htod", "0", "0", "4096"])
    assert r.rc == 0, r.stderr
    resolved = r.lines("resolved")
    assert len(resolved) == 16
    for line in resolved:
        _, label, lib, result, status = line.split()
        assert lib == str(libs.interposer), line
        assert result == "result=0" and status == "status=0"
    # the wrappers forward to the function the driver chose for that query
    pt = mode == "gpa2_pt"
    names = [c["fn"] for c in r.calls() if not c["fn"].startswith("cuGetProcAddress")]
    assert names == [
        "cuMemAllocManaged",
        "cuLaunchKernel_ptsz" if pt else "cuLaunchKernel",
        "cuMemcpyHtoD_v2_ptds" if pt else "cuMemcpyHtoD_v2",
    ]
    metrics = {m["name"]: m for m in read_metrics(r.file("metrics"))}
    assert metrics["cuMemAllocManaged"]["count"] == 1
    assert metrics["cuLaunchKernel_ptsz" if pt else "cuLaunchKernel"]["count"] == 1


def test_double_without_interposer_resolves_to_the_double(libs, tmp_path):
    r = run_client(libs, tmp_path, ["resolve", "gpa2", "managed", "4096"], preload=False)
    assert r.rc == 0
    assert {l.split()[2] for l in r.lines("resolved")} == {str(libs.double)}
    assert not list((tmp_path / "out").iterdir())


def test_double_program_linked_to_the_driver_is_caught_by_exports(libs, tmp_path):
    """Code built with -lcuda calls cuMemAllocManaged, cuMemPrefetchAsync_v2, ... by symbol."""
    from _cuda_double import build_direct_client

    exe = build_direct_client(libs.double)
    env = client_env(libs, tmp_path)
    del env["PAGECAST_CUDA_DRIVER"]  # not needed: the driver is found after the interposer in the global scope
    p = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert {l.split()[2] for l in p.stdout.splitlines() if l.startswith("result")} == {"0"}
    r = Run(0, p.stdout, p.stderr, tmp_path / "out", tmp_path / "double.log")
    base = int(p.stdout.split()[1], 16)
    tl = [(t["name"], t["alloc"], t["offset"], t["bytes"]) for t in read_timeline(r.file("timeline"))]
    assert tl == [
        ("cuMemAllocManaged", 0, 0, 1 << 20),
        ("cuMemcpyHtoD_v2", 0, 4096, 4096),
        ("cuMemPrefetchAsync_v2", 0, 0, 65536),
        ("cuLaunchKernel", -1, 0, 0),
        ("cuMemFree_v2", 0, 0, 1 << 20),
    ]
    assert [c["fn"] for c in r.calls()] == [
        "cuMemAllocManaged",
        "cuMemcpyHtoD_v2",
        "cuMemPrefetchAsync_v2",
        "cuLaunchKernel",
        "cuMemFree_v2",
    ]
    assert int(r.calls("cuMemPrefetchAsync_v2")[0]["ptr"], 16) == base


def test_double_prefetch_abi_versions(libs, tmp_path):
    """cuMemPrefetchAsync asked for at 11000 gets the v8000 ABI (CUdevice), at 12020 the
    v12020 ABI (CUmemLocation + flags); both wrappers pass their arguments intact."""
    r = run_client(
        libs,
        tmp_path,
        [
            "resolve",
            "gpa2",
            "managed",
            "1048576",
            "pf1",
            "0",
            "0",
            "8192",
            "0",
            "pf2",
            "0",
            "4096",
            "8192",
            "-1",
            "pf1",
            "0",
            "0",
            "4096",
            "-1",
        ],
    )
    assert r.rc == 0, r.stderr
    base, _ = r.allocs()[0]
    v1 = r.calls("cuMemPrefetchAsync")
    v2 = r.calls("cuMemPrefetchAsync_v2")
    assert [(int(c["ptr"], 16), int(c["bytes"]), int(c["loc_type"]), int(c["loc_id"])) for c in v1] == [
        (base, 8192, CU_MEM_LOCATION_TYPE_DEVICE, 0),
        (base, 4096, CU_MEM_LOCATION_TYPE_HOST, -1),
    ]
    assert [(int(c["ptr"], 16), int(c["bytes"]), int(c["loc_type"]), c["result"]) for c in v2] == [
        (base + 4096, 8192, CU_MEM_LOCATION_TYPE_HOST, "0")
    ]
    tl = [t for t in read_timeline(r.file("timeline")) if t["name"].startswith("cuMemPrefetchAsync")]
    assert [(t["name"], t["direction"], t["alloc"], t["offset"], t["bytes"]) for t in tl] == [
        ("cuMemPrefetchAsync", "to_device", 0, 0, 8192),
        ("cuMemPrefetchAsync_v2", "to_host", 0, 4096, 8192),
        ("cuMemPrefetchAsync", "to_host", 0, 0, 4096),
    ]


def test_double_launch_ex_and_stream_ordered_allocations(libs, tmp_path):
    pf = tmp_path / "p.txt"
    pf.write_text("pagecast-prefetch 1\nmanaged 0 0\n")
    r = run_client(
        libs,
        tmp_path,
        [
            "resolve",
            "gpa2",
            "managed",
            "8192",
            "alloc_async",
            "65536",
            "translate",
            "1",
            "100",
            "free_async",
            "1",
            "translate",
            "1",
            "100",
            "sleep",
            "200",
            "launch_ex",
        ],
        PREDICTIONS_FILE=str(pf),
        PREFETCH_POLL_MS="20",
    )
    assert r.rc == 0, r.stderr
    t = [l.split()[2:] for l in r.lines("translate")]
    assert t == [["1", "1", "100"], ["0", "-1", "0"]]
    names = [c["fn"] for c in r.calls() if not c["fn"].startswith("cuGetProc")]
    assert names[-3:] == [
        "cuStreamCreate",
        "cuMemPrefetchAsync_v2",
        "cuLaunchKernelEx",
    ]  # the injector also fires on cuLaunchKernelEx
    metrics = {m["name"]: m["count"] for m in read_metrics(r.file("metrics"))}
    assert metrics["cuMemAllocAsync"] == metrics["cuMemFreeAsync"] == metrics["cuLaunchKernelEx"] == 1


def test_double_forked_child_writes_its_own_files(libs, tmp_path):
    pf = tmp_path / "p.txt"
    pf.write_text("pagecast-prefetch 1\nmanaged 0 0\n")
    r = run_client(
        libs,
        tmp_path,
        ["resolve", "gpa2", "managed", "4096", "launch", "fork_launch", "launch"],
        PREDICTIONS_FILE=str(pf),
        PREFETCH_POLL_MS="20",
    )
    assert r.rc == 0, r.stderr
    assert {l.split()[2] for l in r.lines("result")} == {"0"}  # the child exited cleanly (no join of a missing thread)
    timelines = sorted((tmp_path / "out").glob("timeline.*.csv"))
    assert len(timelines) == 2
    by_pid = {p.name.split(".")[1]: [t["name"] for t in read_timeline(p)] for p in timelines}
    parent = next(k for k, v in by_pid.items() if "cuMemAllocManaged" in v)
    child = next(k for k in by_pid if k != parent)
    assert by_pid[child] == ["cuLaunchKernel"]  # nothing of the parent's duplicated
    assert [n for n in by_pid[parent] if not n.startswith("cuGetProc")].count("cuLaunchKernel") == 2
    child_metrics = read_metrics(tmp_path / "out" / f"metrics.{child}.csv")
    assert [(m["name"], m["count"]) for m in child_metrics] == [("cuLaunchKernel", 1)]


# ---- allocation table ----------------------------------------------------------------------


def test_double_allocation_table_and_translation_exact(libs, tmp_path):
    sizes = [100_000, 8192, 3 * 1024 * 1024 + 5, 4096]
    ops = [
        "resolve",
        "gpa2",
        "managed",
        str(sizes[0]),
        "device",
        str(sizes[1]),
        "managed",
        str(sizes[2]),
        "device",
        str(sizes[3]),
        "free",
        "1",
    ]
    probes = []
    for idx, size in enumerate(sizes):
        for off in (0, 1, size - 1, size):
            probes.append((idx, off))
            ops += ["translate", str(idx), str(off)]
    r = run_client(libs, tmp_path, ops)
    assert r.rc == 0, r.stderr
    allocs = r.allocs()
    assert [allocs[i][1] for i in range(4)] == sizes
    got = [l.split() for l in r.lines("translate")]
    # an independent reference: the live allocation (allocation 1 was freed) holding the address
    live = {i: allocs[i] for i in (0, 2, 3)}
    for (idx, off), (_, addr, ok, aid, aoff) in zip(probes, got):
        a = allocs[idx][0] + off
        assert int(addr, 16) == a
        hit = [(i, a - b) for i, (b, s) in live.items() if b <= a < b + s]
        if hit:
            assert (int(ok), int(aid), int(aoff)) == (1, hit[0][0], hit[0][1]), (idx, off)
        else:
            assert int(ok) == 0, (idx, off)
    rows = (tmp_path / "out").glob("allocs.*.csv")
    (path,) = list(rows)
    lines = path.read_text().splitlines()
    assert lines[0] == "id,kind,order,base,size,created_ns,freed_ns"
    table = [l.split(",") for l in lines[1:]]
    assert [(int(t[0]), t[1], int(t[2]), int(t[3], 16), int(t[4])) for t in table] == [
        (0, "managed", 0, allocs[0][0], sizes[0]),
        (1, "device", 0, allocs[1][0], sizes[1]),
        (2, "managed", 1, allocs[2][0], sizes[2]),
        (3, "device", 1, allocs[3][0], sizes[3]),
    ]
    freed = [int(t[6]) for t in table]
    assert freed[0] == freed[2] == freed[3] == -1
    assert freed[1] >= int(table[1][5])


def test_double_threads_tables_and_logs_consistent(libs, tmp_path):
    threads, per = 8, 60
    r = run_client(libs, tmp_path, ["resolve", "gpa2", "threads", str(threads), str(per)])
    assert r.rc == 0, r.stderr
    n = threads * per
    freed = threads * ((per + 1) // 2)
    (path,) = list((tmp_path / "out").glob("allocs.*.csv"))
    table = [l.split(",") for l in path.read_text().splitlines()[1:]]
    assert len(table) == n
    assert sorted(int(t[0]) for t in table) == list(range(n))
    assert sorted(int(t[2]) for t in table) == list(range(n))  # managed orders: a permutation, no duplicates
    assert sum(int(t[6]) >= 0 for t in table) == freed
    metrics = {m["name"]: m for m in read_metrics(r.file("metrics"))}
    expect = {
        "cuMemAllocManaged": n,
        "cuMemcpyHtoD_v2": n,
        "cuLaunchKernel": n,
        "cuMemcpyDtoH_v2": n,
        "cuMemFree_v2": freed,
    }
    for name, count in expect.items():
        assert metrics[name]["count"] == count, name
        assert len(r.calls(name)) == count, name
    assert metrics["cuMemcpyHtoD_v2"]["bytes"] == n * 8192
    tl = read_timeline(r.file("timeline"))
    for name, count in expect.items():
        assert sum(t["name"] == name for t in tl) == count
    # every copy was translated into a live allocation at offset 0
    copies = [t for t in tl if t["name"] in ("cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2")]
    assert all(t["alloc"] >= 0 and t["offset"] == 0 for t in copies)


def test_double_metrics_and_timeline_well_formed(libs, tmp_path):
    ops = [
        "resolve",
        "gpa2",
        "managed",
        "65536",
        "device",
        "65536",
        "htod",
        "0",
        "0",
        "4096",
        "dtoh",
        "1",
        "8",
        "100",
        "dtod",
        "1",
        "0",
        "0",
        "0",
        "512",
        "memcpy_h2d",
        "1",
        "16",
        "64",
        "memcpy",
        "0",
        "0",
        "1",
        "0",
        "32",
        "memcpy_async",
        "1",
        "0",
        "0",
        "0",
        "16",
        "htod_async",
        "1",
        "0",
        "128",
        "dtoh_async",
        "0",
        "4096",
        "256",
        "launch",
        "free",
        "0",
        "free",
        "0",
    ]
    r = run_client(libs, tmp_path, ops)
    assert r.rc == 0, r.stderr
    results = [l.split()[2] for l in r.lines("result")]
    assert results[-1] != "0" and set(results[:-1]) == {"0"}  # double free: the driver's error, passed through
    tl = read_timeline(r.file("timeline"))
    rows = [
        (t["name"], t["bytes"], t["direction"], t["alloc"], t["offset"])
        for t in tl
        if not t["name"].startswith("cuGetProc")
    ]
    assert rows == [
        ("cuMemAllocManaged", 65536, "", 0, 0),
        ("cuMemAlloc_v2", 65536, "", 1, 0),
        ("cuMemcpyHtoD_v2", 4096, "htod", 0, 0),
        ("cuMemcpyDtoH_v2", 100, "dtoh", 1, 8),
        ("cuMemcpyDtoD_v2", 512, "dtod", 1, 0),
        ("cuMemcpy", 64, "htod", 1, 16),
        ("cuMemcpy", 32, "dtod", 0, 0),
        ("cuMemcpyAsync", 16, "dtod", 1, 0),
        ("cuMemcpyHtoDAsync_v2", 128, "htod", 1, 0),
        ("cuMemcpyDtoHAsync_v2", 256, "dtoh", 0, 4096),
        ("cuLaunchKernel", 0, "", -1, 0),
        ("cuMemFree_v2", 65536, "", 0, 0),
        ("cuMemFree_v2", 0, "", -1, 0),
    ]
    assert all(t["duration_ns"] >= 0 for t in tl)
    starts = [t["start_ns"] for t in tl]
    assert starts == sorted(starts)
    assert [t["result"] for t in tl][-1] != 0
    metrics = read_metrics(r.file("metrics"))
    for m in metrics:
        mine = [t for t in tl if t["name"] == m["name"]]
        assert m["count"] == len(mine)
        assert m["bytes"] == sum(t["bytes"] for t in mine)
        assert m["total_ns"] == sum(t["duration_ns"] for t in mine)
        assert m["errors"] == sum(t["result"] != 0 for t in mine)
    s = summarize_dir(tmp_path / "out")
    assert s["apis"]["cuMemcpy"]["count"] == 2 and s["timeline"]["rows"] == len(tl)
    assert s["timeline"]["bytes_by_direction"] == {"htod": 4096 + 64 + 128, "dtoh": 100 + 256, "dtod": 512 + 32 + 16}


# ---- prefetch injector -----------------------------------------------------------------------


def expected_prefetches(base: int, size: int, pages: list[int], chunk: int) -> list[tuple[int, int]]:
    """Reference: unique in-range pages → maximal runs → pieces cut at chunk multiples."""
    pages = sorted({p for p in pages if p * PAGE < size})
    out = []
    i = 0
    while i < len(pages):
        j = i
        while j + 1 < len(pages) and pages[j + 1] == pages[j] + 1:
            j += 1
        off, end = pages[i] * PAGE, min((pages[j] + 1) * PAGE, size)
        while off < end:
            nxt = min((off // chunk + 1) * chunk, end)
            out.append((base + off, nxt - off))
            off = nxt
        i = j + 1
    return out


def _schedule(rows: list[tuple[int, int, float]], regions: list[Region]) -> Schedule:
    n = len(rows)
    return Schedule(
        np.arange(n),
        np.arange(n) * 10,
        [r for r, _, _ in rows],
        [p for _, p, _ in rows],
        [s for _, _, s in rows],
        regions=regions,
    )


def test_double_injector_merges_chunks_and_checks_live_allocations(libs, tmp_path):
    from pagecast.cuda.injector import write_prefetch_file

    regions = [
        Region(0, "managed#0", "managed", order=0, length=100_000),
        Region(1, "weights", "file", path="/w"),
        Region(2, "managed#1", "managed", order=1, length=4096),
        Region(3, "managed#2", "managed", order=2, length=65536),
    ]
    pages0 = [3, 1, 2, 2, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 700]
    rows = [(0, p, 0.9) for p in pages0] + [(1, 5, 0.5), (2, 0, 0.5), (3, 5, 0.4), (3, 6, 0.4), (3, 4, 0.3)]
    pf = tmp_path / "prefetch.txt"
    stats = write_prefetch_file(_schedule(rows, regions), pf)
    assert stats == {"schedule_rows": len(rows), "pages": len(set(pages0)) + 4, "dropped_not_gpu": 1}
    chunk = 16384
    r = run_client(
        libs,
        tmp_path,
        [
            "resolve",
            "gpa2",
            "managed",
            "100000",
            "managed",
            "4096",
            "free",
            "1",
            "sleep",
            "300",
            "launch",
            "managed",
            "65536",
            "launch",
            "launch",
        ],
        PREDICTIONS_FILE=str(pf),
        PREFETCH_POLL_MS="20",
        PREFETCH_CHUNK_BYTES=str(chunk),
    )
    assert r.rc == 0, r.stderr
    allocs = r.allocs()
    got = [(int(c["ptr"], 16), int(c["bytes"])) for c in r.calls("cuMemPrefetchAsync_v2")]
    assert all(c["result"] == "0" for c in r.calls("cuMemPrefetchAsync_v2"))
    want0 = expected_prefetches(allocs[0][0], allocs[0][1], pages0, chunk)
    want2 = expected_prefetches(allocs[2][0], allocs[2][1], [5, 6, 4], chunk)
    # allocation 0 is live at the first launch; allocation 2 (managed order 2) only at the second
    assert sorted(got[: len(want0)]) == sorted(want0)
    assert got[len(want0) :] == want2
    assert not any(allocs[1][0] <= p < allocs[1][0] + 4096 for p, _ in got)  # freed: skipped
    # issued on the injector's own stream, created once, before the kernel it precedes
    names = [c["fn"] for c in r.calls() if not c["fn"].startswith("cuGetProc")]
    assert names.count("cuStreamCreate") == 1
    stream = r.calls("cuStreamCreate")[0]["stream"]
    assert {c["stream"] for c in r.calls("cuMemPrefetchAsync_v2")} == {stream}
    first_launch = names.index("cuLaunchKernel")
    assert names[first_launch - 1] == "cuMemPrefetchAsync_v2"
    import json

    st = json.loads(r.file("injector").read_text())
    assert st["loads_ok"] == 1 and st["loads_failed"] == 0
    assert st["chunks"] == len(got) and st["bytes"] == sum(b for _, b in got)
    assert st["skipped_freed"] == 1 and st["pages_out_of_range"] == 1 and st["pending_ranges"] == 0
    tl = [t for t in read_timeline(r.file("timeline")) if t["name"] == "pagecast_prefetch"]
    assert [(t["ptr"], t["bytes"]) for t in tl] == got


def test_double_injector_reloads_on_atomic_replace(libs, tmp_path):
    pf = tmp_path / "p.txt"
    pf.write_text("pagecast-prefetch 1\nmanaged 0 1\n")
    env = client_env(libs, tmp_path, PREDICTIONS_FILE=str(pf), PREFETCH_POLL_MS="20")
    p = subprocess.Popen(
        [
            str(libs.client),
            "resolve",
            "gpa2",
            "managed",
            "1048576",
            "sleep",
            "200",
            "launch",
            "wait_stdin",
            "sleep",
            "300",
            "launch",
            "launch",
        ],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in p.stdout:
        if line.startswith("waiting"):
            break
    tmp = tmp_path / ".p.txt.tmp"
    tmp.write_text("pagecast-prefetch 1\nmanaged 0 10\nmanaged 0 11\n")
    os.replace(tmp, pf)
    out, err = p.communicate("go\n", timeout=30)
    assert p.returncode == 0, err
    r = Run(0, out, err, tmp_path / "out", tmp_path / "double.log")
    base = None
    for c in r.calls("cuMemAllocManaged"):
        base = int(c["ptr"], 16)
    got = [(int(c["ptr"], 16) - base, int(c["bytes"])) for c in r.calls("cuMemPrefetchAsync_v2")]
    assert got == [(PAGE, PAGE), (10 * PAGE, 2 * PAGE)]  # each load issued once; the third launch adds nothing


def test_double_injector_repeat_reissues_before_every_launch(libs, tmp_path):
    pf = tmp_path / "p.txt"
    pf.write_text("pagecast-prefetch 1\nmanaged 0 0\nmanaged 0 1\nmanaged 1 0\n")
    r = run_client(
        libs,
        tmp_path,
        [
            "resolve",
            "gpa2",
            "managed",
            "65536",
            "managed",
            "4096",
            "sleep",
            "200",
            "launch",
            "launch",
            "free",
            "1",
            "launch",
        ],
        PREDICTIONS_FILE=str(pf),
        PREFETCH_POLL_MS="20",
        PREFETCH_REPEAT="1",
        PREFETCH_SYNC="1",
    )
    assert r.rc == 0, r.stderr
    a = r.allocs()
    names = [
        (c["fn"], int(c.get("ptr", "0"), 16), c.get("bytes"))
        for c in r.calls()
        if c["fn"] in ("cuMemPrefetchAsync_v2", "cuLaunchKernel", "cuStreamSynchronize")
    ]
    one = [("cuMemPrefetchAsync_v2", a[0][0], "8192"), ("cuMemPrefetchAsync_v2", a[1][0], "4096")]
    sync = ("cuStreamSynchronize", 0, None)
    launch = ("cuLaunchKernel", 0, None)
    assert names == one + [sync, launch] + one + [sync, launch] + one[:1] + [sync, launch]  # freed: dropped


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("pagecast-prefetch 1\nmanaged 0 1\nmanaged x 3\n", 3, "bad number"),
        ("pagecast-prefetch 1\nmanaged 0 1\nheap 0 3\n", 3, "unknown allocation kind"),
        ("pagecast-prefetch 1\nmanaged 0\n", 2, "expected"),
        ("pagecast-prefetch 2\nmanaged 0 1\n", 1, "unsupported"),
        ("hello,world\n1,2\n", 1, "not a predictions file"),
        ("trigger_time_ns,page_addr,page_idx,score\n1,0xzz,3,0.5\n", 2, "bad address"),
        ("", None, "empty predictions file"),
    ],
)
def test_double_malformed_predictions_reported_and_ignored(libs, tmp_path, text, line, what):
    pf = tmp_path / "bad.txt"
    pf.write_text(text)
    r = run_client(
        libs,
        tmp_path,
        ["resolve", "gpa2", "managed", "65536", "sleep", "200", "launch", "htod", "0", "0", "64", "launch"],
        PREDICTIONS_FILE=str(pf),
        PREFETCH_POLL_MS="20",
    )
    assert r.rc == 0
    assert {l.split()[2] for l in r.lines("result")} == {"0"}  # the program is unharmed
    where = f"{pf}:{line}:" if line else f"{pf}:"
    msgs = [l for l in r.stderr.splitlines() if l.startswith("pagecast-cuda: ")]
    assert len(msgs) == 1 and where in msgs[0] and what in msgs[0] and "ignored" in msgs[0], r.stderr
    assert r.calls("cuMemPrefetchAsync_v2") == [] and r.calls("cuMemPrefetchAsync") == []
    import json

    st = json.loads(r.file("injector").read_text())
    assert st["loads_failed"] == 1 and st["loads_ok"] == 0 and st["chunks"] == 0
    assert summarize_dir(tmp_path / "out")["messages"] == [msgs[0].removeprefix("pagecast-cuda: ")]


def test_double_seed_csv_addresses_only_inside_live_allocations(libs, tmp_path):
    """The seed's predictions.csv names absolute addresses: stale ones (a freed allocation,
    another run's address) are skipped, never handed to the driver."""
    pf = tmp_path / "predictions.csv"
    pf.write_text("trigger_time_ns,page_addr,page_idx,score\n")
    env = client_env(libs, tmp_path, PREDICTIONS_FILE=str(pf), PREFETCH_POLL_MS="20")
    p = subprocess.Popen(
        [
            str(libs.client),
            "resolve",
            "gpa2",
            "managed",
            "65536",
            "managed",
            "65536",
            "free",
            "1",
            "wait_stdin",
            "sleep",
            "300",
            "launch",
        ],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    allocs = {}
    for line in p.stdout:
        if line.startswith("alloc "):
            _, i, ptr, size = line.split()
            allocs[int(i)] = int(ptr, 16)
        if line.startswith("waiting"):
            break
    live, dead = allocs[0], allocs[1]
    rows = [(live + 2 * PAGE, 0.9), (live + 3 * PAGE, 0.8), (dead, 0.9), (0x7E0000000000, 0.9), (live + 15 * PAGE, 0.7)]
    tmp = tmp_path / ".pred.tmp"
    tmp.write_text(
        "trigger_time_ns,page_addr,page_idx,score\n"
        + "".join(f"{i},{hex(a)},{i},{s}\n" for i, (a, s) in enumerate(rows))
    )
    os.replace(tmp, pf)
    out, err = p.communicate("go\n", timeout=30)
    assert p.returncode == 0, err
    r = Run(0, out, err, tmp_path / "out", tmp_path / "double.log")
    got = sorted((int(c["ptr"], 16), int(c["bytes"])) for c in r.calls("cuMemPrefetchAsync_v2"))
    assert got == [(live + 2 * PAGE, 2 * PAGE), (live + 15 * PAGE, PAGE)]
    assert all(c["result"] == "0" for c in r.calls("cuMemPrefetchAsync_v2"))
    import json

    st = json.loads(r.file("injector").read_text())
    assert st["skipped_no_alloc"] == 2 and st["errors"] == 0


# ---- Python API and CLI over the double --------------------------------------------------------


def test_double_run_cuda_end_to_end(libs, tmp_path, monkeypatch, capsys):
    from pagecast.cli import main
    from pagecast.cuda.injector import run_cuda

    monkeypatch.setenv("PAGECAST_CUDA_DRIVER", str(libs.double))
    monkeypatch.setenv("PAGECAST_TEST_DOUBLE_LOG", str(tmp_path / "double.log"))
    regions = [Region(0, "managed#0", "managed", order=0, length=1 << 20)]
    sched = _schedule([(0, 4, 1.0), (0, 5, 0.9), (0, 6, 0.8)], regions)
    out = tmp_path / "run"
    rc = run_cuda(
        [str(libs.client), "resolve", "gpa2", "managed", "1048576", "sleep", "400", "launch"],
        schedule=sched,
        out_dir=out,
        poll_ms=20,
        json_out=True,
    )
    assert rc == 0
    import json

    summary = json.loads(capsys.readouterr().out)
    assert summary["exit_status"] == 0 and summary["pages"] == 3
    (st,) = summary["api"]["injector"].values()
    assert st["chunks"] == 1 and st["bytes"] == 3 * PAGE
    assert (out / "prefetch.txt").read_text().splitlines()[2:] == [
        "managed 0 4 1",
        "managed 0 5 0.9",
        "managed 0 6 0.8",
    ]
    assert main(["cuda", "timeline", str(out), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["apis"]["pagecast_prefetch"] == {
        "count": 1,
        "total_ns": again["apis"]["pagecast_prefetch"]["total_ns"],
        "bytes": 3 * PAGE,
        "errors": 0,
    }


def test_double_static_cudart_looks_up_through_the_hooks(libs, tmp_path):
    """A real nvcc-built program (static cudart 13) against the double posing as libcuda.so.1:
    cudart's dlsym of cuGetProcAddress_v2 lands in our hook and every query passes through
    our wrapper. (cudart then stops: the double lacks device/context entry points.)"""
    from pagecast.collect.cuda_native import build_workloads
    from pagecast.errors import PagecastError

    try:
        exe = build_workloads()["vector_add"]
    except PagecastError as e:
        pytest.skip(str(e))
    fake = tmp_path / "fakedrv"
    fake.mkdir()
    (fake / "libcuda.so.1").symlink_to(libs.double)
    env = client_env(libs, tmp_path, LD_LIBRARY_PATH=str(fake))
    del env["PAGECAST_CUDA_DRIVER"]  # found as libcuda.so.1, like a real driver
    p = subprocess.run([str(exe), "1000", "1"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0  # the double cannot run a real CUDA program
    r = Run(p.returncode, p.stdout, p.stderr, tmp_path / "out", tmp_path / "double.log")
    queries = {(c["symbol"], int(c["version"]), int(c["flags"])) for c in r.calls("cuGetProcAddress_v2")}
    for q in [
        ("cuMemAllocManaged", 6000, 0),
        ("cuMemPrefetchAsync", 8000, 0),
        ("cuMemPrefetchAsync", 12020, 0),
        ("cuMemPrefetchAsync", 12020, 2),
        ("cuLaunchKernel", 7000, 2),
    ]:
        assert q in queries
    metrics = {m["name"]: m for p in (tmp_path / "out").glob("metrics.*.csv") for m in read_metrics(p)}
    assert metrics["cuGetProcAddress_v2"]["count"] == len(r.calls("cuGetProcAddress_v2"))


test_double_static_cudart_looks_up_through_the_hooks = pytest.mark.slow(
    test_double_static_cudart_looks_up_through_the_hooks
)


SHARED = Path(os.environ.get("PAGECAST_SHARED_DIR", Path(__file__).resolve().parents[1].parent / "shared"))


def test_double_injector_reads_the_seeds_real_predictions_csv(libs, tmp_path):
    """The AI4Mem sample predictions.csv (Timestamp_ns,Prefetch_Address,Confidence) from
    another run: every address is stale here, so all are skipped and none reaches the driver."""
    src = SHARED / "data" / "ai4mem" / "predictions.csv"
    if not src.exists():
        pytest.skip("../shared/data/ai4mem absent")
    rows = [l for l in src.read_text().splitlines()[1:] if l.strip()]
    addrs = {int(l.split(",")[1], 16) >> 12 for l in rows}
    r = run_client(
        libs,
        tmp_path,
        ["resolve", "gpa2", "managed", "1048576", "sleep", "200", "launch"],
        PREDICTIONS_FILE=str(src),
        PREFETCH_POLL_MS="20",
    )
    assert r.rc == 0 and "pagecast-cuda" not in r.stderr
    import json

    st = json.loads(r.file("injector").read_text())
    assert st["loads_ok"] == 1 and st["chunks"] == 0 and st["errors"] == 0
    assert st["skipped_no_alloc"] == len(addrs)  # distinct pages (merged runs are skipped page by page)
    assert r.calls("cuMemPrefetchAsync_v2") == []
