"""The rows under a memory limit of ``pagecast bench`` / ``pagecast demo``: the workload's
dense pass recorded under an ``auto`` limit, planned, and run on another prompt by the kernel
alone and by the plan through each backend, in a real memory cgroup."""

from __future__ import annotations

import subprocess
import sys

from conftest import require_memcg
from pagecast.bench import sparse_weights as wl
from pagecast.bench.memory_rows import (
    AUTO_SHARE,
    OWN_SLACK,
    dense_workload,
    limited_run,
    memory_rows,
    own_bytes,
    resolve_limit,
)
from pagecast.constants import PAGE_SIZE


def test_dense_pass_rows_under_an_auto_limit(tmp_path):
    require_memcg("memory cgroups and perf need root")
    weights = wl.ensure_weights(tmp_path / "w.bin", size_mib=64)
    # the program's own memory comes from a recording of its sparse run, as in the demo
    sparse = tmp_path / "sparse.parquet"
    argv = wl.WorkloadConfig(weights, prompt=1, tokens=2).argv()
    r = subprocess.run([sys.executable, "-m", "pagecast", "record", "-o", str(sparse), "--", *argv],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    size = weights.stat().st_size
    limit = resolve_limit("auto", [sparse], size)
    assert limit == (own_bytes([sparse]) + OWN_SLACK + int(size * AUTO_SHARE)) // PAGE_SIZE * PAGE_SIZE
    assert limit < size  # the weights do not fit: every token reads some of them again

    rows = memory_rows(tmp_path, "auto", dense_workload(3), (101, 102), 103, lambda s: None)([sparse], weights)
    mib = limit >> 20
    assert [n for n, _ in rows] == [
        f"kernel: under a {mib} MiB limit",
        f"pagecast: memory plan, {mib} MiB limit",
        f"pagecast: memory plan via pager, {mib} MiB limit",
    ]
    kernel, plan, pager = (fn(0) for _, fn in rows)
    assert kernel.checksum == plan.checksum == pager.checksum  # the same computation every way
    # the kernel's LRU reads the whole file every token; the pager holds the keep set in its
    # budget, read once. What the controller saves beside the program depends on when it
    # polls (a pass here takes a few ms): what is certain is that it locked the keep set
    assert kernel.bytes_read > 2 * size
    assert pager.bytes_read < kernel.bytes_read
    argv = dense_workload(3)(weights, 103).argv()
    _, rep = limited_run(argv, limit, tmp_path / "memory.plan", weights, "kernel")
    assert rep["controller"]["pinned_bytes"] > 0 and rep["memory"]["oom_kills"] == 0
